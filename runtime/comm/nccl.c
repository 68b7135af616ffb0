// Collectives on device buffers through NCCL, bootstrapped over the host communicator.
// NCCL kernels wait for their peers without a deadline, so a rank that dies would hang
// the others' streams: every collective records an event behind it, and a watchdog
// thread aborts NCCL when the oldest one has not passed within the timeout or NCCL
// reports an asynchronous error. The abort ends the waiting kernels, the streams move
// on, and zinf_comm_status says what happened. The communicator is nonblocking
// (config.blocking = 0), so joining is bounded the same way.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "internal.h"

#if defined(ZINF_HAVE_NCCL) && defined(ZINF_HAVE_CUDA)
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdatomic.h>
#include <time.h>

// Collectives in flight at once; one more waits for the oldest to pass.
enum { PENDING_MAX = 256 };

struct nccl_state {
    ncclComm_t nc;
    int index; // the CUDA device
    double timeout_s;
    pthread_t watchdog;
    bool watching;
    pthread_mutex_t mu; // guards the ring and stop
    pthread_cond_t cv;  // signalled when the ring shrinks or stop is set
    bool stop;
    zinf_event *ev[PENDING_MAX];
    double since[PENDING_MAX];
    const char *what[PENDING_MAX];
    int head, count;
    atomic_bool failed;
    char failure[512]; // written once, before failed is set
};

static void sleep_ms(int ms) {
    struct timespec t = {0, (long)ms * 1000000L};
    nanosleep(&t, NULL);
}

// The first failure wins; it aborts NCCL so that kernels waiting on peers end. The
// abort frees the communicator, so NCCL is only asked about it under this lock and
// before the abort: nccl_detail adds NCCL's last error text.
static void fail_once(zinf_comm *c, const char *msg, bool nccl_detail) {
    struct nccl_state *n = c->nccl;
    pthread_mutex_lock(&n->mu);
    if (!atomic_load(&n->failed)) {
        if (nccl_detail)
            snprintf(n->failure, sizeof n->failure, "comm nccl: rank %d: %s (%s)", c->rank, msg,
                     ncclGetLastError(n->nc));
        else
            snprintf(n->failure, sizeof n->failure, "comm nccl: rank %d: %s", c->rank, msg);
        atomic_store(&n->failed, true);
        ZINF_LOG_ERROR("%s", n->failure);
        ncclCommAbort(n->nc);
    }
    pthread_mutex_unlock(&n->mu);
}

// NCCL's words for a failed call or an asynchronous error.
static void fail_nccl(zinf_comm *c, const char *what, ncclResult_t r) {
    char m[300];
    snprintf(m, sizeof m, "%s failed: %s", what, ncclGetErrorString(r));
    fail_once(c, m, true);
}

// The communicator's asynchronous state, asked under the lock an abort takes (another
// thread's abort frees it); ncclSuccess once it has failed, which callers check.
static ncclResult_t async_error(struct nccl_state *n) {
    ncclResult_t r = ncclSuccess;
    pthread_mutex_lock(&n->mu);
    if (!atomic_load(&n->failed) && ncclCommGetAsyncError(n->nc, &r) != ncclSuccess) r = ncclInternalError;
    pthread_mutex_unlock(&n->mu);
    return r;
}

static void fail_late(zinf_comm *c, const char *what, const char *verb) {
    char m[200];
    snprintf(m, sizeof m, "%s did not %s within %g s; a rank has died or stopped", what, verb, c->nccl->timeout_s);
    fail_once(c, m, false);
}

static zinf_status failed_status(zinf_comm *c) { return zinf_fail(ZINF_ERR_COMM, "%s", c->nccl->failure); }

static bool nccl_error(ncclResult_t r) { return r != ncclSuccess && r != ncclInProgress; }

// A nonblocking call returned: wait (bounded) until NCCL has taken it.
static zinf_status settle(zinf_comm *c, ncclResult_t r, const char *what) {
    struct nccl_state *n = c->nccl;
    double deadline = zinf_clock_s() + n->timeout_s;
    while (r == ncclInProgress && !atomic_load(&n->failed)) {
        if (zinf_clock_s() > deadline) {
            fail_late(c, what, "start");
            break;
        }
        sleep_ms(1);
        r = async_error(n);
    }
    if (nccl_error(r)) fail_nccl(c, what, r);
    return atomic_load(&n->failed) ? failed_status(c) : ZINF_OK;
}

static void *watch(void *arg) {
    zinf_comm *c = arg;
    struct nccl_state *n = c->nccl;
    cudaSetDevice(n->index);
    pthread_mutex_lock(&n->mu);
    while (!n->stop && !atomic_load(&n->failed)) {
        while (n->count && zinf_event_done(n->ev[n->head])) {
            n->head = (n->head + 1) % PENDING_MAX;
            n->count--;
            pthread_cond_broadcast(&n->cv);
        }
        double waited = n->count ? zinf_clock_s() - n->since[n->head] : 0;
        const char *what = n->count ? n->what[n->head] : "";
        pthread_mutex_unlock(&n->mu);
        ncclResult_t r = async_error(n);
        if (nccl_error(r))
            fail_nccl(c, what[0] ? what : "a collective", r);
        else if (waited > n->timeout_s)
            fail_late(c, what, "complete");
        sleep_ms(20);
        pthread_mutex_lock(&n->mu);
    }
    pthread_cond_broadcast(&n->cv);
    pthread_mutex_unlock(&n->mu);
    return NULL;
}

// Record an event behind the collective just enqueued on s, for the watchdog.
static zinf_status track(zinf_comm *c, zinf_stream *s, const char *what) {
    struct nccl_state *n = c->nccl;
    pthread_mutex_lock(&n->mu);
    while (n->count == PENDING_MAX && !atomic_load(&n->failed) && !n->stop)
        pthread_cond_wait(&n->cv, &n->mu);
    zinf_status st = ZINF_OK;
    if (atomic_load(&n->failed)) {
        st = failed_status(c);
    } else {
        int slot = (n->head + n->count) % PENDING_MAX;
        st = zinf_event_record(n->ev[slot], s);
        if (st == ZINF_OK) {
            n->since[slot] = zinf_clock_s();
            n->what[slot] = what;
            n->count++;
        }
    }
    pthread_mutex_unlock(&n->mu);
    return st;
}

static void release(zinf_comm *c) {
    struct nccl_state *n = c->nccl;
    if (n->watching) {
        pthread_mutex_lock(&n->mu);
        n->stop = true;
        pthread_cond_broadcast(&n->cv);
        pthread_mutex_unlock(&n->mu);
        pthread_join(n->watchdog, NULL);
    }
    if (n->nc) {
        cudaSetDevice(n->index);
        if (atomic_load(&n->failed)) {
            // ncclCommAbort already freed it. The ranks are out of step as after a failed
            // host collective: the communicator is failed as a whole, so that closing it
            // leaves MPI alone instead of waiting in MPI_Finalize for a rank that is gone.
            pthread_mutex_lock(&c->lock);
            if (!c->failed) snprintf(c->failure, sizeof c->failure, "%s", n->failure);
            c->failed = true;
            pthread_mutex_unlock(&c->lock);
        } else {
            // Finalize flushes what is in flight; bounded, then abort.
            ncclResult_t r = ncclCommFinalize(n->nc);
            if (settle(c, r, "finalize") == ZINF_OK) ncclCommDestroy(n->nc);
        }
    }
    for (int i = 0; i < PENDING_MAX; i++)
        zinf_event_destroy(n->ev[i]);
    pthread_cond_destroy(&n->cv);
    pthread_mutex_destroy(&n->mu);
    free(n);
    c->nccl = NULL;
}

// c and d are given and c is not attached (device.c checked).
zinf_status nccl_attach(zinf_comm *c, zinf_device *d) {
    const zinf_device_caps *caps = zinf_device_get_caps(d);
    if (caps->backend != ZINF_BACKEND_CUDA)
        return zinf_fail(ZINF_ERR_UNSUPPORTED, "comm attach: NCCL needs a CUDA device; %s keeps host collectives",
                         caps->name);
    ZINF_CHECK(zinf_comm_status(c));
    struct nccl_state *n = calloc(1, sizeof *n);
    if (!n) return zinf_fail(ZINF_ERR_NOMEM, "comm attach: out of memory");
    n->index = caps->index;
    n->timeout_s = c->timeout_s;
    pthread_mutex_init(&n->mu, NULL);
    pthread_cond_init(&n->cv, NULL);
    c->nccl = n;
    zinf_status st = ZINF_OK;
    for (int i = 0; st == ZINF_OK && i < PENDING_MAX; i++)
        st = zinf_event_create(d, &n->ev[i]);

    // Rank 0 makes the id; every rank learns whether that worked before it waits on it.
    struct {
        int ok;
        ncclUniqueId id;
    } boot = {0};
    if (c->rank == 0 && st == ZINF_OK) boot.ok = ncclGetUniqueId(&boot.id) == ncclSuccess;
    zinf_status bst = zinf_comm_broadcast(c, &boot, sizeof boot, 0);
    if (st == ZINF_OK) st = bst;
    if (st == ZINF_OK && !boot.ok) st = zinf_fail(ZINF_ERR_COMM, "comm nccl: rank 0 could not make an NCCL id");
    if (st == ZINF_OK && cudaSetDevice(n->index) != cudaSuccess)
        st = zinf_fail(ZINF_ERR_CUDA, "comm nccl: cudaSetDevice(%d) failed", n->index);
    if (st == ZINF_OK) {
        ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
        cfg.blocking = 0;
        st = settle(c, ncclCommInitRankConfig(&n->nc, c->size, boot.id, c->rank, &cfg), "joining");
    }
    if (st == ZINF_OK) {
        n->watching = pthread_create(&n->watchdog, NULL, watch, c) == 0;
        if (!n->watching) st = zinf_fail(ZINF_ERR_NOMEM, "comm nccl: cannot start the watchdog thread");
    }
    if (st != ZINF_OK) {
        char msg[640];
        snprintf(msg, sizeof msg, "%s", zinf_last_error());
        release(c);
        return zinf_fail(st, "%s", msg);
    }
    ZINF_LOG_INFO("comm nccl: rank %d of %d on GPU %d", c->rank, c->size, n->index);
    return ZINF_OK;
}

void nccl_detach(zinf_comm *c) {
    if (c && c->nccl) release(c);
}

// Every device call: attached, on the right device; NCCL is called under the lock an
// abort takes, and only if no failure has aborted (and freed) the communicator; then
// the call settles, is counted (per_peer bytes from every other rank) and is tracked.
#define DEVICE_CALL(c, s, what, per_peer, call)                                                                        \
    do {                                                                                                               \
        if (!(c) || !(c)->nccl) return zinf_fail(ZINF_ERR_INVAL, "comm %s: not attached to a device", what);           \
        if (!(s)) return zinf_fail(ZINF_ERR_INVAL, "comm %s: no stream", what);                                        \
        struct nccl_state *n_ = (c)->nccl;                                                                             \
        cudaSetDevice(n_->index);                                                                                      \
        pthread_mutex_lock(&n_->mu);                                                                                   \
        bool failed_ = atomic_load(&n_->failed);                                                                       \
        ncclResult_t r_ = failed_ ? ncclSuccess : (call);                                                              \
        pthread_mutex_unlock(&n_->mu);                                                                                 \
        if (failed_) return failed_status(c);                                                                          \
        ZINF_CHECK(settle(c, r_, what));                                                                               \
        zinf_comm_count(c, -1, per_peer);                                                                              \
        return track(c, s, what);                                                                                      \
    } while (0)

zinf_status nccl_reduce_scatter_f32(zinf_comm *c, zinf_stream *s, const float *in, float *out,
                                                size_t count) {
    DEVICE_CALL(c, s, "reduce_scatter", count * sizeof(float),
                ncclReduceScatter(in, out, count, ncclFloat32, ncclSum, c->nccl->nc, zinf_stream_native(s)));
}

zinf_status nccl_allreduce_f32(zinf_comm *c, zinf_stream *s, float *buf, size_t n) {
    // A reduce-scatter and an all-gather of n / size floats each.
    DEVICE_CALL(c, s, "allreduce", 2 * (n * sizeof(float) / (size_t)c->size),
                ncclAllReduce(buf, buf, n, ncclFloat32, ncclSum, c->nccl->nc, zinf_stream_native(s)));
}

zinf_status nccl_allgather(zinf_comm *c, zinf_stream *s, const void *in, void *out, size_t bytes) {
    DEVICE_CALL(c, s, "allgather", bytes, ncclAllGather(in, out, bytes, ncclUint8, c->nccl->nc, zinf_stream_native(s)));
}

zinf_status nccl_alltoall(zinf_comm *c, zinf_stream *s, const void *in, void *out, size_t bytes) {
    DEVICE_CALL(c, s, "alltoall", bytes, ncclAlltoAll(in, out, bytes, ncclUint8, c->nccl->nc, zinf_stream_native(s)));
}

static bool device_failed(const zinf_comm *c) { return c->nccl && atomic_load(&c->nccl->failed); }
static const char *device_failure(const zinf_comm *c) { return c->nccl->failure; }

#else // no NCCL in this build

#define NO_NCCL(what)                                                                                                  \
    zinf_fail(ZINF_ERR_UNSUPPORTED,                                                                                    \
              "comm %s: this build has no NCCL (built with NO_CUDA=1 or without NCCL "                                 \
              "installed); collectives stay on host memory",                                                           \
              what)

zinf_status nccl_attach(zinf_comm *c, zinf_device *d) {
    (void)c, (void)d;
    return NO_NCCL("attach");
}
void nccl_detach(zinf_comm *c) { (void)c; }
zinf_status nccl_reduce_scatter_f32(zinf_comm *c, zinf_stream *s, const float *in, float *out,
                                                size_t count) {
    (void)c, (void)s, (void)in, (void)out, (void)count;
    return NO_NCCL("reduce_scatter");
}
zinf_status nccl_allreduce_f32(zinf_comm *c, zinf_stream *s, float *buf, size_t n) {
    (void)c, (void)s, (void)buf, (void)n;
    return NO_NCCL("allreduce");
}
zinf_status nccl_allgather(zinf_comm *c, zinf_stream *s, const void *in, void *out, size_t bytes) {
    (void)c, (void)s, (void)in, (void)out, (void)bytes;
    return NO_NCCL("allgather");
}
zinf_status nccl_alltoall(zinf_comm *c, zinf_stream *s, const void *in, void *out, size_t bytes) {
    (void)c, (void)s, (void)in, (void)out, (void)bytes;
    return NO_NCCL("alltoall");
}
static bool device_failed(const zinf_comm *c) {
    (void)c;
    return false;
}
static const char *device_failure(const zinf_comm *c) {
    (void)c;
    return "";
}

#endif

zinf_status zinf_comm_status(zinf_comm *c) {
    if (!c) return zinf_fail(ZINF_ERR_INVAL, "comm status: c is NULL");
    if (device_failed(c)) return zinf_fail(ZINF_ERR_COMM, "%s", device_failure(c));
    pthread_mutex_lock(&c->lock);
    zinf_status st = c->failed ? zinf_fail(ZINF_ERR_COMM, "%s", c->failure) : ZINF_OK;
    pthread_mutex_unlock(&c->lock);
    return st;
}
