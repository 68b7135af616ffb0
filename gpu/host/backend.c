// The host backend: a device made of host memory and threads, its streams those of
// queue.h running the ops of host/ops.c, so work on different streams really runs
// concurrently and a missing event wait shows up as a wrong result in CI.
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../queue.h"
#include "host.h"

// Each stream's thread runs its ops in fp32 staging buffers of its own.
static zinf_status run_task(void *own, const task *t) {
    switch (t->kind) {
    case TASK_OP: return host_run_op(&t->u.op, own);
    case TASK_COPY: memcpy(t->u.mem.dst, t->u.mem.src, t->u.mem.bytes); break; // every kind: host addresses
    case TASK_MEMSET: memset(t->u.mem.dst, t->u.mem.byte, t->u.mem.bytes); break;
    case TASK_RECORD: queue_event_reach(t->u.ev.e, t->u.ev.ticket, zinf_clock_ns()); break;
    case TASK_WAIT: queue_event_wait_for(t->u.ev.e, t->u.ev.ticket); break;
    case TASK_FN: t->u.fn.fn(t->u.fn.arg); break;
    case TASK_STOP: break;
    }
    return ZINF_OK;
}

static void release(void *own) {
    host_scratch_free(own);
    free(own);
}

static zinf_status h_stream_create(zinf_stream *s) {
    static const queue_runner runner = {run_task, release};
    host_scratch *sc = calloc(1, sizeof *sc);
    if (!sc) return zinf_fail(ZINF_ERR_NOMEM, "host stream: out of memory");
    zinf_status st = queue_stream_create(s, &runner, sc);
    if (st != ZINF_OK) free(sc);
    return st;
}

// ---- device and memory ----

// The host device's buffers come from the C heap. glibc's threshold for serving a
// buffer by mmap moves with what the process happened to free before, and buffers it
// maps come back as fresh pages, faulted in again at every gather and gradient. Fixed at
// its largest (32 MiB on 64-bit), freed device buffers stay in the heap for reuse, as a
// GPU's caching allocator keeps them, whatever came before.
static void fix_mmap_threshold(void) { mallopt(M_MMAP_THRESHOLD, 32 << 20); }

static zinf_status h_open(zinf_device *d) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, fix_mmap_threshold);
    d->caps.backend = ZINF_BACKEND_HOST;
    d->caps.index = -1;
    snprintf(d->caps.name, sizeof d->caps.name, "host (%.80s)", zinf_gpu_host_blas_config());
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    d->caps.total_memory = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
    d->caps.async_copy = true;
    zinf_cpu_info cpu;
    zinf_cpu_probe(&cpu);
    d->caps.bf16_tensor = cpu.avx512_bf16 || cpu.amx_bf16;
    host_blas_fix_threads();
    return ZINF_OK;
}

static void h_close(zinf_device *d) { (void)d; }

static zinf_status h_mem_alloc(zinf_device *d, size_t bytes, void **out) {
    (void)d;
    // Page-aligned, so device buffers can also take O_DIRECT IO as pinned ones can.
    int rc = posix_memalign(out, 4096, bytes);
    if (rc != 0) {
        char sz[32];
        return zinf_fail(ZINF_ERR_NOMEM, "host device: cannot allocate %s of host memory",
                         zinf_size_format(bytes, sz, sizeof sz));
    }
    // New device memory holds anything; here all ones (NaN in every float type), so a
    // read before the first write shows, where fresh host pages would read as zeros.
    memset(*out, 0xff, bytes);
    return ZINF_OK;
}

static void h_mem_free(zinf_device *d, void *p, size_t bytes, bool unused) {
    (void)d, (void)bytes, (void)unused;
    free(p);
}

// Page-locking needs CAP_IPC_LOCK or room under RLIMIT_MEMLOCK; without either the
// memory stays pageable (correct, only slower to copy on a real device), said once.
static zinf_status h_host_register(zinf_device *d, void *p, size_t bytes) {
    (void)d;
    static int warned;
    if (mlock(p, bytes) != 0 && !__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
        ZINF_LOG_WARN("pinned memory: mlock refused (%s); host buffers stay pageable. Raise `ulimit -l` to lock them",
                      strerror(errno));
    return ZINF_OK;
}

static void h_host_unregister(zinf_device *d, void *p, size_t bytes) {
    (void)d;
    munlock(p, bytes);
}

const backend_ops zinf_host_backend = {
    .name = "host",
    .open = h_open,
    .close = h_close,
    .mem_alloc = h_mem_alloc,
    .mem_free = h_mem_free,
    .host_register = h_host_register,
    .host_unregister = h_host_unregister,
    .stream_create = h_stream_create,
    QUEUE_BACKEND_OPS,
};
