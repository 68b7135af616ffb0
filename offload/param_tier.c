// The parameter tier (zinf_offload.h): stage 3's 16-bit slices between uses, and the
// pool that brings slices on disk up for their gathers.
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "zinf_internal.h"
#include "zinf_offload.h"

// Each slice is a multiple of this many bytes' worth of 2048 elements: the engine's
// slice alignment, which a swap store's block size must divide.
enum { SLICE_ALIGN = 2048 };

struct zinf_param_tier {
    zinf_param_tier_config c;
    size_t *slice, *off; // owned: per module its slice and where it starts in the partition
    size_t n, es;        // the partition's elements; bytes per element
    void *part;          // the slices (nvme: the resident ones), on the device or in host memory
    int nresident;       // nvme: modules [0, nresident) are in part, the rest in the swap store
    size_t resident_n;
    zinf_swap *swap;
    int swap_id;
    zinf_stream *ps; // reads and write-backs, in order
    void **buf;      // the pool: nbuf buffers of buf_elems
    int nbuf;
    size_t buf_elems;
    zinf_event **read_done, **buf_free; // per buffer: its read landed; its gather passed
    int *free_list, nfree;              // buffers holding no read
    int *read_buf;                      // per module: the buffer its slice was read into (or handed to), or -1
    int64_t handoff_bytes;              // slices handed to the pool by their store, not read back
    // The pool's bookkeeping (free_list, nfree, read_buf, handoff_bytes) and the order of
    // what it queues on ps: a background update's stores run on the optimizer's thread
    // while the coordinator reads and gathers.
    pthread_mutex_t mu;
};

static bool host_slices(const zinf_param_tier *t) { return t->c.device != ZINF_OFFLOAD_NONE; }

bool zinf_param_tier_on_disk(const zinf_param_tier *t, int mod) {
    return t->c.device == ZINF_OFFLOAD_NVME && mod >= t->nresident && t->slice[mod];
}

static uint64_t disk_off(const zinf_param_tier *t, int mod) { return (t->off[mod] - t->resident_n) * t->es; }

zinf_stream *zinf_param_tier_stream(zinf_param_tier *t) { return t->ps ? t->ps : t->c.compute; }

// The slices, the resident prefix and the pool (nvme): what the buffers are sized by.
// A slice goes whole into one buffer: the pool's buffers are as big as the largest slice
// on disk, whatever buffer_size says.
static zinf_status shape(zinf_param_tier *t, const zinf_param_tier_config *cfg) {
    size_t nmod = (size_t)cfg->nmod;
    t->slice = malloc((nmod + 1) * sizeof *t->slice);
    t->off = malloc((nmod + 1) * sizeof *t->off);
    t->read_buf = malloc((nmod + 1) * sizeof *t->read_buf);
    if (!t->slice || !t->off || !t->read_buf) return zinf_fail(ZINF_ERR_NOMEM, "parameter tier: out of memory");
    for (size_t i = 0; i < nmod; i++) {
        t->slice[i] = cfg->slice[i];
        t->off[i] = t->n;
        t->n += cfg->slice[i];
        t->read_buf[i] = -1;
    }
    t->c.slice = t->slice;
    t->resident_n = t->n;
    if (cfg->device != ZINF_OFFLOAD_NVME) return ZINF_OK;
    // The resident modules: a prefix in forward order, so they are one block of part.
    int n = cfg->nmod;
    while (t->nresident < n && (int64_t)(t->off[t->nresident] + t->slice[t->nresident]) <= cfg->max_in_cpu)
        t->nresident++;
    t->resident_n = t->nresident < n ? t->off[t->nresident] : t->n;
    for (int i = t->nresident; i < n; i++)
        if (t->slice[i] > t->buf_elems) t->buf_elems = t->slice[i];
    t->nbuf = t->buf_elems ? (int)cfg->buffer_count : 0; // none when everything fits in max_in_cpu
    return ZINF_OK;
}

// The slices' memory, and the pool's: without a pool or device (a plan) nothing is taken.
static zinf_status take_buffers(zinf_param_tier *t) {
    const zinf_param_tier_config *c = &t->c;
    if (c->device == ZINF_OFFLOAD_NONE)
        return c->dev ? zinf_device_alloc(c->dev, t->n * t->es, "parameter slices", &t->part) : ZINF_OK;
    if (!c->host) return ZINF_OK;
    const char *what = c->device == ZINF_OFFLOAD_CPU ? "parameter slices" : "resident parameters";
    ZINF_CHECK(zinf_host_pool_alloc(c->host, t->resident_n * t->es, c->pin_memory, what, &t->part));
    t->buf = calloc((size_t)t->nbuf + 1, sizeof *t->buf);
    if (!t->buf) return zinf_fail(ZINF_ERR_NOMEM, "parameter tier: out of memory");
    for (int b = 0; b < t->nbuf; b++)
        ZINF_CHECK(
            zinf_host_pool_alloc(c->host, t->buf_elems * t->es, c->pin_memory, "parameter swap buffers", &t->buf[b]));
    return ZINF_OK;
}

static zinf_status open_swap(zinf_param_tier *t) {
    ZINF_CHECK(zinf_swap_open(&t->swap, &t->c.swap));
    ZINF_CHECK(zinf_swap_add(t->swap, "params", (t->n - t->resident_n) * t->es, &t->swap_id));
    if (SLICE_ALIGN * t->es % zinf_swap_alignment(t->swap))
        return zinf_fail(ZINF_ERR_UNSUPPORTED, "%s: its block size %u does not divide zinf's %zu-byte slices",
                         t->c.swap.paths[0], zinf_swap_alignment(t->swap), SLICE_ALIGN * t->es);
    if ((int64_t)t->buf_elems > t->c.buffer_size)
        for (int i = t->nresident; i < t->c.nmod; i++)
            if (t->slice[i] == t->buf_elems) {
                ZINF_LOG_INFO("zero_optimization.offload_param.buffer_size: raised from %lld to %zu elements, this "
                              "rank's slice of %s",
                              (long long)t->c.buffer_size, t->buf_elems, t->c.names[i]);
                break;
            }
    size_t n = (size_t)t->nbuf;
    t->read_done = calloc(n, sizeof *t->read_done);
    t->buf_free = calloc(n, sizeof *t->buf_free);
    t->free_list = malloc(n * sizeof *t->free_list);
    if (!t->read_done || !t->buf_free || !t->free_list)
        return zinf_fail(ZINF_ERR_NOMEM, "parameter tier: out of memory");
    for (int b = 0; b < t->nbuf; b++) {
        ZINF_CHECK(zinf_event_create(t->c.dev, &t->read_done[b]));
        ZINF_CHECK(zinf_event_create(t->c.dev, &t->buf_free[b]));
        t->free_list[t->nfree++] = b;
    }
    return ZINF_OK;
}

static zinf_status create(zinf_param_tier *t, const zinf_param_tier_config *cfg) {
    ZINF_CHECK(shape(t, cfg));
    // Reads and write-backs of slices on disk, and the stores of a background update,
    // run on a stream of their own.
    if (cfg->device == ZINF_OFFLOAD_NVME || cfg->own_stream) ZINF_CHECK(zinf_stream_create(cfg->dev, &t->ps));
    ZINF_CHECK(take_buffers(t));
    return t->nbuf ? open_swap(t) : ZINF_OK;
}

static zinf_param_tier *new_tier(const zinf_param_tier_config *cfg) {
    zinf_param_tier *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->c = *cfg;
    t->es = zinf_dtype_size(cfg->dtype);
    pthread_mutex_init(&t->mu, NULL);
    return t;
}

zinf_status zinf_param_tier_plan(const zinf_param_tier_config *cfg, uint64_t stripe, zinf_param_tier_stats *out) {
    memset(out, 0, sizeof *out);
    zinf_param_tier *t = new_tier(cfg);
    if (!t) return zinf_fail(ZINF_ERR_NOMEM, "parameter tier: out of memory");
    zinf_status st = shape(t, cfg);
    if (st == ZINF_OK) {
        zinf_param_tier_get_stats(t, out);
        if (t->nbuf)
            out->nvme_bytes =
                (int64_t)zinf_swap_planned_bytes((t->n - t->resident_n) * t->es, cfg->swap.npaths, stripe);
    }
    zinf_param_tier_destroy(t);
    return st;
}

zinf_status zinf_param_tier_create(zinf_param_tier **out, const zinf_param_tier_config *cfg) {
    *out = NULL;
    zinf_param_tier *t = new_tier(cfg);
    if (!t) return zinf_fail(ZINF_ERR_NOMEM, "parameter tier: out of memory");
    zinf_status st = create(t, cfg);
    if (st != ZINF_OK) {
        zinf_param_tier_destroy(t);
        return st;
    }
    *out = t;
    return ZINF_OK;
}

void zinf_param_tier_destroy(zinf_param_tier *t) {
    if (!t) return;
    if (t->ps) zinf_stream_sync(t->ps);
    if (host_slices(t))
        zinf_host_pool_free(t->c.host, t->part, t->c.pin_memory);
    else
        zinf_device_free(t->c.dev, t->part);
    for (int b = 0; t->buf && b < t->nbuf; b++)
        zinf_host_pool_free(t->c.host, t->buf[b], t->c.pin_memory);
    for (int b = 0; t->read_done && t->buf_free && b < t->nbuf; b++) {
        zinf_event_destroy(t->read_done[b]);
        zinf_event_destroy(t->buf_free[b]);
    }
    free(t->buf), free(t->read_done), free(t->buf_free), free(t->free_list), free(t->read_buf);
    zinf_stream_destroy(t->ps);
    zinf_swap_close(t->swap);
    free(t->slice), free(t->off);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

// ---- reads and writes on the tier's stream ----

// A read into buf, a write from buf, or a handoff: src copied into buf in the stream's
// order (a backend's own host-to-host copy may run at once on the calling thread,
// ahead of the work queued before it).
typedef enum { JOB_READ, JOB_WRITE, JOB_HANDOFF } job_kind;

typedef struct swap_job {
    zinf_param_tier *t;
    job_kind kind;
    int mod; // named when its IO fails
    uint64_t off;
    void *buf;
    const void *src;
    size_t len;
} swap_job;

static void swap_job_run(void *arg) {
    swap_job *j = arg;
    zinf_param_tier *t = j->t;
    if (j->kind == JOB_HANDOFF) {
        memcpy(j->buf, j->src, j->len);
    } else if (!zinf_latch_failed(t->c.failure)) {
        zinf_aio_ticket tk = 0;
        zinf_status st = j->kind == JOB_WRITE ? zinf_swap_write(t->swap, t->swap_id, j->off, j->buf, j->len, &tk)
                                              : zinf_swap_read(t->swap, t->swap_id, j->off, j->buf, j->len, &tk);
        if (st == ZINF_OK) st = zinf_swap_wait(t->swap, tk);
        if (st != ZINF_OK) {
            zinf_fail(st, "16-bit parameters of module %d: %s", j->mod, zinf_last_error());
            zinf_latch_set(t->c.failure, st);
        }
    }
    free(j);
}

static zinf_status queue_job(zinf_param_tier *t, job_kind kind, int mod, void *buf, const void *src) {
    swap_job *j = malloc(sizeof *j);
    if (!j) return zinf_fail(ZINF_ERR_NOMEM, "parameter tier: out of memory");
    *j = (swap_job){t, kind, mod, disk_off(t, mod), buf, src, t->slice[mod] * t->es};
    zinf_status st = zinf_stream_host_fn(t->ps, swap_job_run, j);
    if (st != ZINF_OK) free(j);
    return st;
}

int zinf_param_tier_free_buffers(zinf_param_tier *t) {
    pthread_mutex_lock(&t->mu);
    int n = t->nfree;
    pthread_mutex_unlock(&t->mu);
    return n;
}

bool zinf_param_tier_has_read(zinf_param_tier *t, int mod) {
    pthread_mutex_lock(&t->mu);
    bool has = t->read_buf[mod] >= 0;
    pthread_mutex_unlock(&t->mu);
    return has;
}

// Take a free buffer for module mod, once its last gather has passed (t->mu held).
static zinf_status take_buffer(zinf_param_tier *t, int mod, int *b) {
    if (!t->nfree) return zinf_fail(ZINF_ERR_INTERNAL, "parameter tier: no swap buffer left for %s", t->c.names[mod]);
    *b = t->free_list[--t->nfree];
    t->read_buf[mod] = *b;
    return zinf_stream_wait_event(t->ps, t->buf_free[*b]);
}

static zinf_status read_locked(zinf_param_tier *t, int mod) {
    int b;
    ZINF_CHECK(take_buffer(t, mod, &b));
    ZINF_CHECK(queue_job(t, JOB_READ, mod, t->buf[b], NULL));
    return zinf_event_record(t->read_done[b], t->ps);
}

zinf_status zinf_param_tier_read(zinf_param_tier *t, int mod) {
    pthread_mutex_lock(&t->mu);
    zinf_status st = read_locked(t, mod);
    pthread_mutex_unlock(&t->mu);
    return st;
}

void zinf_param_tier_forget_reads(zinf_param_tier *t) {
    if (!t) return;
    pthread_mutex_lock(&t->mu);
    for (int i = 0; i < t->c.nmod; i++)
        if (t->read_buf[i] >= 0) {
            t->free_list[t->nfree++] = t->read_buf[i];
            t->read_buf[i] = -1;
        }
    pthread_mutex_unlock(&t->mu);
}

// The pool buffer holding module mod's slice goes back to the pool once the
// communication stream has passed its gathers (t->mu held).
static zinf_status release_locked(zinf_param_tier *t, int mod) {
    int b = t->read_buf[mod];
    if (b < 0) return ZINF_OK;
    ZINF_CHECK(zinf_event_record(t->buf_free[b], t->c.comm));
    t->read_buf[mod] = -1;
    t->free_list[t->nfree++] = b;
    return ZINF_OK;
}

// A slice on disk is read whole into a pool buffer, unless a read-ahead or a handoff put
// it there.
static zinf_status gather_locked(zinf_param_tier *t, int mod, size_t off, size_t n, void *full) {
    if (t->read_buf[mod] < 0) ZINF_CHECK(read_locked(t, mod));
    int b = t->read_buf[mod];
    ZINF_CHECK(zinf_stream_wait_event(t->c.comm, t->read_done[b]));
    return t->c.gather(t->c.gather_ctx, (const char *)t->buf[b] + off * t->es, true, full, n * t->es);
}

zinf_status zinf_param_tier_gather_part(zinf_param_tier *t, int mod, size_t off, size_t n, void *full) {
    if (!zinf_param_tier_on_disk(t, mod))
        return t->c.gather(t->c.gather_ctx, (const char *)t->part + (t->off[mod] + off) * t->es, host_slices(t), full,
                           n * t->es);
    pthread_mutex_lock(&t->mu);
    zinf_status st = gather_locked(t, mod, off, n, full);
    pthread_mutex_unlock(&t->mu);
    return st;
}

zinf_status zinf_param_tier_release(zinf_param_tier *t, int mod) {
    if (!zinf_param_tier_on_disk(t, mod)) return ZINF_OK;
    pthread_mutex_lock(&t->mu);
    zinf_status st = release_locked(t, mod);
    pthread_mutex_unlock(&t->mu);
    return st;
}

zinf_status zinf_param_tier_gather(zinf_param_tier *t, int mod, void *full) {
    if (!zinf_param_tier_on_disk(t, mod)) return zinf_param_tier_gather_part(t, mod, 0, t->slice[mod], full);
    pthread_mutex_lock(&t->mu);
    zinf_status st = gather_locked(t, mod, 0, t->slice[mod], full);
    if (st == ZINF_OK) st = release_locked(t, mod);
    pthread_mutex_unlock(&t->mu);
    return st;
}

void *zinf_param_tier_device_slice(zinf_param_tier *t, int mod) {
    return host_slices(t) ? NULL : (char *)t->part + t->off[mod] * t->es;
}

// A new slice from host memory goes to disk; while the pool has a buffer to spare
// beyond the one kept for a read on demand, it also goes to that buffer, as if read
// back, so that its next gather reads nothing. The copy lands before the write starts,
// both on the tier's stream, so src is free when the stream passes as before.
static zinf_status store_to_disk(zinf_param_tier *t, int mod, const void *src) {
    if (t->nfree > 1 && t->read_buf[mod] < 0) {
        int b;
        ZINF_CHECK(take_buffer(t, mod, &b));
        ZINF_CHECK(queue_job(t, JOB_HANDOFF, mod, t->buf[b], src));
        ZINF_CHECK(zinf_event_record(t->read_done[b], t->ps));
        t->handoff_bytes += (int64_t)(t->slice[mod] * t->es);
    }
    return queue_job(t, JOB_WRITE, mod, (void *)src, NULL);
}

zinf_status zinf_param_tier_store(zinf_param_tier *t, int mod, const void *src, bool src_host) {
    size_t bytes = t->slice[mod] * t->es;
    if (zinf_param_tier_on_disk(t, mod) && src_host) {
        pthread_mutex_lock(&t->mu);
        zinf_status st = store_to_disk(t, mod, src);
        pthread_mutex_unlock(&t->mu);
        return st;
    }
    if (zinf_param_tier_on_disk(t, mod)) { // made on the device: through host memory
        void *tmp = malloc(bytes);
        if (!tmp) return zinf_fail(ZINF_ERR_NOMEM, "parameter tier: out of memory");
        zinf_status st = zinf_copy_async(t->c.compute, tmp, src, bytes, ZINF_COPY_D2H);
        if (st == ZINF_OK) st = zinf_stream_sync(t->c.compute);
        if (st == ZINF_OK) st = zinf_param_tier_write(t, mod, 0, t->slice[mod], tmp);
        free(tmp);
        return st;
    }
    zinf_copy_kind kind =
        host_slices(t) ? (src_host ? ZINF_COPY_H2H : ZINF_COPY_D2H) : (src_host ? ZINF_COPY_H2D : ZINF_COPY_D2D);
    return zinf_copy_async(src_host ? zinf_param_tier_stream(t) : t->c.compute, (char *)t->part + t->off[mod] * t->es,
                           src, bytes, kind);
}

zinf_status zinf_param_tier_write(zinf_param_tier *t, int mod, size_t off, size_t n, const void *src) {
    size_t at = t->off[mod] + off, bytes = n * t->es; // in the partition
    if (zinf_param_tier_on_disk(t, mod)) {
        ZINF_CHECK(zinf_stream_sync(t->ps));
        pthread_mutex_lock(&t->mu); // a read or handoff of the slice is out of date now
        if (t->read_buf[mod] >= 0) t->free_list[t->nfree++] = t->read_buf[mod], t->read_buf[mod] = -1;
        pthread_mutex_unlock(&t->mu);
        return zinf_swap_pwrite(t->swap, t->swap_id, (at - t->resident_n) * t->es, src, bytes);
    }
    void *dst = (char *)t->part + at * t->es;
    if (host_slices(t)) {
        memcpy(dst, src, bytes);
        return ZINF_OK;
    }
    ZINF_CHECK(zinf_copy_async(t->c.compute, dst, src, bytes, ZINF_COPY_H2D));
    return zinf_stream_sync(t->c.compute);
}

zinf_status zinf_param_tier_copy_out(zinf_param_tier *t, int mod, size_t off, size_t n, void *dst) {
    size_t at = t->off[mod] + off, bytes = n * t->es;
    if (zinf_param_tier_on_disk(t, mod)) {
        ZINF_CHECK(zinf_stream_sync(t->ps));
        return zinf_swap_pread(t->swap, t->swap_id, (at - t->resident_n) * t->es, dst, bytes);
    }
    const void *src = (const char *)t->part + at * t->es;
    if (host_slices(t)) {
        memcpy(dst, src, bytes);
        return ZINF_OK;
    }
    ZINF_CHECK(zinf_copy_async(t->c.compute, dst, src, bytes, ZINF_COPY_D2H));
    return zinf_stream_sync(t->c.compute);
}

void zinf_param_tier_get_stats(zinf_param_tier *t, zinf_param_tier_stats *out) {
    memset(out, 0, sizeof *out);
    if (!t) return;
    size_t host_n = t->c.device == ZINF_OFFLOAD_NVME ? t->resident_n : t->c.device == ZINF_OFFLOAD_CPU ? t->n : 0;
    *out = (zinf_param_tier_stats){.device_bytes = t->c.device == ZINF_OFFLOAD_NONE ? (int64_t)(t->n * t->es) : 0,
                                   .host_bytes = (int64_t)(host_n * t->es),
                                   .resident = t->nresident,
                                   .buffers = t->nbuf,
                                   .buffer_bytes = (int64_t)(t->buf_elems * t->es),
                                   .nvme_bytes = t->swap ? (int64_t)zinf_swap_bytes(t->swap) : 0};
    pthread_mutex_lock(&t->mu);
    out->handoff_bytes = t->handoff_bytes;
    pthread_mutex_unlock(&t->mu);
}
