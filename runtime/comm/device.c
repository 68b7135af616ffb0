// Collectives on device buffers: NCCL on a CUDA device (nccl.c), or modeled on a
// simulated one. There the ranks first meet (a barrier on the host, bounded by the
// timeout, so a late rank holds the others up as it would inside an NCCL kernel), then
// the device's links are busy for the collective's time: the bytes this rank receives
// from its node at the modeled NVLink rate and from other nodes at the network's. No
// data moves; the bytes are counted as NCCL's would be.
#include <stdio.h>
#include <stdlib.h>

#include "internal.h"

struct sim_link {
    zinf_sim_rates rates;
    zinf_comm *meet; // a communicator of the same ranks for the barriers alone, so that
                     // they never interleave with host collectives on c from other threads
};

zinf_status zinf_comm_attach_device(zinf_comm *c, zinf_device *d) {
    if (!c || !d) return zinf_fail(ZINF_ERR_INVAL, "comm attach: c and d are required");
    if (c->nccl || c->sim) return zinf_fail(ZINF_ERR_INVAL, "comm attach: already attached to a device");
    if (zinf_device_get_caps(d)->backend != ZINF_BACKEND_SIM) return nccl_attach(c, d);
    struct sim_link *l = calloc(1, sizeof *l);
    if (!l) return zinf_fail(ZINF_ERR_NOMEM, "comm attach: out of memory");
    zinf_status st = zinf_device_sim_rates(d, &l->rates);
    if (st == ZINF_OK) st = zinf_comm_split(c, 0, &l->meet);
    if (st == ZINF_OK) l->meet->log = NULL; // its barriers are the modeled collectives' own
    if (st != ZINF_OK) {
        free(l);
        return st;
    }
    c->sim = l;
    return ZINF_OK;
}

void zinf_comm_detach_device(zinf_comm *c) {
    if (c && c->sim) {
        zinf_comm_destroy(c->sim->meet);
        free(c->sim);
        c->sim = NULL;
    }
    nccl_detach(c);
}

bool zinf_comm_on_device(const zinf_comm *c) { return c && (c->nccl || c->sim); }

// On the stream's thread: wait for every rank; a failure ends c as its own would.
static void meet(void *arg) {
    zinf_comm *c = arg;
    if (zinf_comm_barrier(c->sim->meet) == ZINF_OK) return;
    pthread_mutex_lock(&c->lock);
    if (!c->failed) {
        c->failed = true;
        snprintf(c->failure, sizeof c->failure, "%s", zinf_last_error());
    }
    pthread_mutex_unlock(&c->lock);
}

// per_peer bytes from every other rank of c; the comms logger counts the modeled time.
static zinf_status modeled(zinf_comm *c, zinf_stream *s, zinf_comm_op op, size_t bytes, size_t per_peer) {
    const char *what = zinf_comm_op_names[op];
    if (!s) return zinf_fail(ZINF_ERR_INVAL, "comm %s: no stream", what);
    ZINF_CHECK(zinf_comm_status(c));
    zinf_comm_bytes b = zinf_comm_count(c, -1, per_peer);
    ZINF_CHECK(zinf_stream_host_fn(s, meet, c));
    double seconds = zinf_sim_collective_s(&c->sim->rates, (double)b.intra, (double)b.inter);
    ZINF_CHECK(zinf_sim_collective(s, seconds));
    comm_log_record(c, op, bytes, "sim", seconds);
    return ZINF_OK;
}

// A logged NCCL collective is timed by host functions on its stream right before and
// after it: the stream runs them in order, so their clocks bound the collective.
typedef struct stamp {
    zinf_comm *c;
    zinf_comm_op op;
    size_t bytes;
    double start;
    bool failed; // the collective was not enqueued: nothing to record
} stamp;

static void stamp_start(void *arg) { ((stamp *)arg)->start = zinf_clock_s(); }

static void stamp_end(void *arg) {
    stamp *t = arg;
    if (!t->failed) comm_log_record(t->c, t->op, t->bytes, "nccl", zinf_clock_s() - t->start);
    free(t);
}

static zinf_status stamp_before(zinf_comm *c, zinf_stream *s, zinf_comm_op op, size_t bytes, stamp **out) {
    *out = NULL;
    if (!c || !s || !comm_log_wants(c, op)) return ZINF_OK;
    stamp *t = calloc(1, sizeof *t);
    if (!t) return zinf_fail(ZINF_ERR_NOMEM, "comm %s: out of memory", zinf_comm_op_names[op]);
    *t = (stamp){.c = c, .op = op, .bytes = bytes};
    zinf_status st = zinf_stream_host_fn(s, stamp_start, t);
    if (st != ZINF_OK) {
        free(t);
        return st;
    }
    *out = t;
    return ZINF_OK;
}

// (A stream that refuses the second host function leaves t to the first: not freed.)
static zinf_status stamp_after(zinf_stream *s, stamp *t, zinf_status st) {
    if (!t) return st;
    t->failed = st != ZINF_OK;
    zinf_status end = zinf_stream_host_fn(s, stamp_end, t);
    return st != ZINF_OK ? st : end;
}

zinf_status zinf_comm_device_reduce_scatter_f32(zinf_comm *c, zinf_stream *s, const float *in, float *out,
                                                size_t count) {
    size_t bytes = count * sizeof(float);
    if (c && c->sim) return modeled(c, s, ZINF_COMM_REDUCE_SCATTER, bytes, bytes);
    stamp *t;
    ZINF_CHECK(stamp_before(c, s, ZINF_COMM_REDUCE_SCATTER, bytes, &t));
    return stamp_after(s, t, nccl_reduce_scatter_f32(c, s, in, out, count));
}

zinf_status zinf_comm_device_allreduce_f32(zinf_comm *c, zinf_stream *s, float *buf, size_t n) {
    size_t bytes = n * sizeof(float);
    // A reduce-scatter and an all-gather of n / size floats each, as NCCL's ring.
    if (c && c->sim) return modeled(c, s, ZINF_COMM_ALL_REDUCE, bytes, 2 * (bytes / (size_t)c->size));
    stamp *t;
    ZINF_CHECK(stamp_before(c, s, ZINF_COMM_ALL_REDUCE, bytes, &t));
    return stamp_after(s, t, nccl_allreduce_f32(c, s, buf, n));
}

zinf_status zinf_comm_device_allgather(zinf_comm *c, zinf_stream *s, const void *in, void *out, size_t bytes) {
    if (c && c->sim) return modeled(c, s, ZINF_COMM_ALL_GATHER, bytes, bytes);
    stamp *t;
    ZINF_CHECK(stamp_before(c, s, ZINF_COMM_ALL_GATHER, bytes, &t));
    return stamp_after(s, t, nccl_allgather(c, s, in, out, bytes));
}

zinf_status zinf_comm_device_alltoall(zinf_comm *c, zinf_stream *s, const void *in, void *out, size_t bytes) {
    size_t total = c ? (size_t)c->size * bytes : bytes;
    if (c && c->sim) return modeled(c, s, ZINF_COMM_ALL_TO_ALL, total, bytes);
    stamp *t;
    ZINF_CHECK(stamp_before(c, s, ZINF_COMM_ALL_TO_ALL, total, &t));
    return stamp_after(s, t, nccl_alltoall(c, s, in, out, bytes));
}
