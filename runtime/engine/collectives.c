// The engine's movers: copies and collectives queued on the communication stream in
// the same order on every rank, by NCCL on device buffers or through the pinned staging
// with the host communicator; in a plan the same code counts the bytes instead
// (e->counted), so the plan and a step share one source of truth; and the waits for
// every stream.
#include "internal.h"

typedef struct comm_job {
    zinf_engine *e;
    zinf_comm *c;
    comm_op op;
    void *in, *out;
    size_t n;
} comm_job;

static void comm_job_run(void *arg) {
    comm_job *j = arg;
    zinf_engine *e = j->e;
    // After a failure the ranks no longer agree on what comes next: run nothing more.
    if (!zinf_latch_failed(e->failure)) {
        zinf_status st = ZINF_OK;
        switch (j->op) {
        case COMM_ALLREDUCE: st = zinf_comm_allreduce_f32(j->c, j->in, j->n); break;
        case COMM_REDUCE_SCATTER: st = zinf_comm_reduce_scatter_f32(j->c, j->in, j->out, j->n); break;
        case COMM_ALLGATHER: st = zinf_comm_allgather(j->c, j->in, j->out, j->n); break;
        case COMM_ALLTOALL: st = zinf_comm_alltoall(j->c, j->in, j->out, j->n); break;
        }
        if (st != ZINF_OK) zinf_latch_set(e->failure, st);
    }
    free(j);
}

void engine_count_from(zinf_engine *e, const rank_group *g, int64_t per) {
    int L = e->nodes > 1 ? e->world / e->nodes : e->world;
    for (int m = 1; m < g->size; m++)
        *(m * g->stride / L == 0 ? &e->counted.comm_intra : &e->counted.comm_inter) += per;
}

// What each other rank sends for op: the host communicator's all-reduce of n floats
// moves 2 (n / size) + n % size of them from each (comm.c).
static int64_t comm_bytes(const rank_group *g, comm_op op, size_t n) {
    switch (op) {
    case COMM_ALLREDUCE: return (int64_t)((2 * (n / (size_t)g->size) + n % (size_t)g->size) * sizeof(float));
    case COMM_REDUCE_SCATTER: return (int64_t)(n * sizeof(float));
    case COMM_ALLGATHER:
    case COMM_ALLTOALL: return (int64_t)n;
    }
    return 0;
}

zinf_status engine_comm(zinf_engine *e, const rank_group *g, comm_op op, void *in, void *out, size_t n) {
    if (e->plan) {
        engine_count_from(e, g, comm_bytes(g, op, n));
        return ZINF_OK;
    }
    comm_job *j = malloc(sizeof *j);
    if (!j) return zinf_fail(ZINF_ERR_NOMEM, "engine: out of memory");
    *j = (comm_job){e, g->comm, op, in, out, n};
    zinf_status st = zinf_stream_host_fn(e->comm_stream, comm_job_run, j);
    if (st != ZINF_OK) free(j);
    return st;
}

zinf_status engine_copy(zinf_engine *e, void *dst, const void *src, size_t bytes, zinf_copy_kind kind) {
    if (!e->plan) return zinf_copy_async(e->comm_stream, dst, src, bytes, kind);
    if (kind == ZINF_COPY_H2D) e->counted.h2d += (int64_t)bytes;
    if (kind == ZINF_COPY_D2H) e->counted.d2h += (int64_t)bytes;
    return ZINF_OK;
}

zinf_status engine_comm_after_compute(zinf_engine *e) {
    if (e->plan) return ZINF_OK;
    ZINF_CHECK(zinf_event_record(e->compute_mark, e->compute_stream));
    return zinf_stream_wait_event(e->comm_stream, e->compute_mark);
}

// NCCL's collective on device buffers, or its count in a plan.
static zinf_status device_allgather(zinf_engine *e, const rank_group *g, const void *mine, void *full, size_t bytes) {
    if (!e->plan) return zinf_comm_device_allgather(g->comm, e->comm_stream, mine, full, bytes);
    engine_count_from(e, g, (int64_t)bytes);
    return ZINF_OK;
}

zinf_status engine_allgather(zinf_engine *e, const rank_group *g, const void *mine, bool mine_host, void *full,
                             size_t bytes) {
    // A plan takes the view of rank 0, where its movers have no buffers to compare.
    const size_t W = (size_t)g->size, R = e->plan ? 0 : (size_t)zinf_comm_rank(g->comm);
    char *place = (char *)full + R * bytes;
    if (W == 1 && mine == full && !mine_host) return ZINF_OK; // full is the device's
    if (W == 1) return engine_copy(e, full, mine, bytes, mine_host ? ZINF_COPY_H2D : ZINF_COPY_D2D);
    if (e->nccl && mine_host) { // NCCL takes device buffers: this rank's part first
        ZINF_CHECK(engine_copy(e, place, mine, bytes, ZINF_COPY_H2D));
        mine = place;
    }
    if (e->nccl) return device_allgather(e, g, mine, full, bytes);
    char *h = (char *)e->staging + R * bytes;
    ZINF_CHECK(engine_copy(e, h, mine, bytes, mine_host ? ZINF_COPY_H2H : ZINF_COPY_D2H));
    ZINF_CHECK(engine_comm(e, g, COMM_ALLGATHER, h, e->staging, bytes));
    return engine_copy(e, full, e->staging, W * bytes, ZINF_COPY_H2D);
}

zinf_status engine_alltoall(zinf_engine *e, const rank_group *g, const void *in, void *out, size_t bytes) {
    if (e->nccl) return zinf_comm_device_alltoall(g->comm, e->comm_stream, in, out, bytes);
    size_t all = (size_t)g->size * bytes;
    char *h = (char *)e->staging;
    ZINF_CHECK(engine_copy(e, h, in, all, ZINF_COPY_D2H));
    ZINF_CHECK(engine_comm(e, g, COMM_ALLTOALL, h, h + all, bytes));
    return engine_copy(e, out, h + all, all, ZINF_COPY_H2D);
}

int engine_ranks_per_node(const zinf_engine *e) {
    if (e->nodes < 1 || e->world % e->nodes) return 0;
    int L = e->world / e->nodes;
    for (int r = 0; !e->plan && r < e->world; r++)
        if (zinf_comm_node_of(e->comm, r) != r / L) return 0;
    return L;
}

zinf_status engine_wait_streams(zinf_engine *e) {
    zinf_optim_tier_join(e->optim.tier);
    zinf_status a = zinf_stream_sync(e->comm_stream), b = zinf_stream_sync(e->compute_stream);
    zinf_status c = e->params.store_stream ? zinf_stream_sync(e->params.store_stream) : ZINF_OK;
    zinf_status d = e->params.tier ? zinf_stream_sync(zinf_param_tier_stream(e->params.tier)) : ZINF_OK;
    zinf_optim_tier_settled(e->optim.tier);
    ZINF_CHECK(zinf_latch_raise(e->failure));
    if (e->nccl) ZINF_CHECK(zinf_comm_status(e->comm)); // an abort lets the streams pass
    return a != ZINF_OK ? a : b != ZINF_OK ? b : c != ZINF_OK ? c : d;
}

zinf_status engine_sync(zinf_engine *e) {
    zinf_optim_tier_join(e->optim.tier);
    // Stages 1-2: the all-gathers of the modules the forward has not used yet, in order
    // (every rank syncs at the same points). Before the streams are synced and the
    // update is marked settled, so that they still wait for its stores.
    zinf_status settled = e->params.ops->settle(e);
    zinf_status st = engine_wait_streams(e);
    return st != ZINF_OK ? st : settled;
}
