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

// per_peer bytes from every other rank of c.
static zinf_status modeled(zinf_comm *c, zinf_stream *s, const char *what, size_t per_peer) {
    if (!s) return zinf_fail(ZINF_ERR_INVAL, "comm %s: no stream", what);
    ZINF_CHECK(zinf_comm_status(c));
    zinf_comm_bytes b = zinf_comm_count(c, -1, per_peer);
    ZINF_CHECK(zinf_stream_host_fn(s, meet, c));
    return zinf_sim_collective(s, zinf_sim_collective_s(&c->sim->rates, (double)b.intra, (double)b.inter));
}

zinf_status zinf_comm_device_reduce_scatter_f32(zinf_comm *c, zinf_stream *s, const float *in, float *out,
                                                size_t count) {
    if (c && c->sim) return modeled(c, s, "reduce_scatter", count * sizeof(float));
    return nccl_reduce_scatter_f32(c, s, in, out, count);
}

zinf_status zinf_comm_device_allreduce_f32(zinf_comm *c, zinf_stream *s, float *buf, size_t n) {
    // A reduce-scatter and an all-gather of n / size floats each, as NCCL's ring.
    if (c && c->sim) return modeled(c, s, "allreduce", 2 * (n * sizeof(float) / (size_t)c->size));
    return nccl_allreduce_f32(c, s, buf, n);
}

zinf_status zinf_comm_device_allgather(zinf_comm *c, zinf_stream *s, const void *in, void *out, size_t bytes) {
    if (c && c->sim) return modeled(c, s, "allgather", bytes);
    return nccl_allgather(c, s, in, out, bytes);
}

zinf_status zinf_comm_device_alltoall(zinf_comm *c, zinf_stream *s, const void *in, void *out, size_t bytes) {
    if (c && c->sim) return modeled(c, s, "alltoall", bytes);
    return nccl_alltoall(c, s, in, out, bytes);
}
