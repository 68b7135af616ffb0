// MiCS (Zhang et al. 2022): the model's states are partitioned within shard groups of
// S consecutive ranks and replicated across the W / S groups. Everything the engine
// partitions (the flat layout, the gathers, the gradient buckets' reduce-scatter, the
// optimizer's part) runs over the shard group: pw ranks, this one pr among them. At the
// accumulation boundary the gradient partition is all-reduced across the replication
// group (the ranks with the same place in every shard group), so the replicas step the
// same gradients to the same weights. Without MiCS the shard group is the world.
#include "internal.h"

void mics_settings(zinf_engine *e) {
    int64_t S = e->cfg.zero.mics_shard_size;
    bool on = e->stage == 3 && e->world > 1 && S > 0 && S < e->world;
    e->pw = on ? (int)S : e->world;
    e->pr = e->rank % e->pw;
    e->replicas = e->world / e->pw;
}

zinf_status mics_create(zinf_engine *e) {
    e->pcomm = e->comm;
    if (e->replicas == 1 || e->plan) return ZINF_OK;
    ZINF_CHECK(zinf_comm_split(e->comm, e->rank / e->pw, &e->mics_shard));
    ZINF_CHECK(zinf_comm_split(e->comm, e->pr, &e->mics_repl));
    e->pcomm = e->mics_shard;
    if (e->nccl) ZINF_CHECK(zinf_comm_attach_device(e->mics_shard, e->dev));
    return e->nccl ? zinf_comm_attach_device(e->mics_repl, e->dev) : ZINF_OK;
}

void mics_destroy(zinf_engine *e) {
    zinf_comm *groups[] = {e->mics_shard, e->mics_repl};
    for (size_t i = 0; i < ZINF_ARRAY_LEN(groups); i++) {
        zinf_comm_detach_device(groups[i]);
        zinf_comm_destroy(groups[i]);
    }
}

// The gradient partition, device or host, summed over the replication group: on the
// device by NCCL, else through the staging in pieces, or in host memory where the
// offloaded optimizer keeps it. Every bucket has been added (the streams are idle).
zinf_status mics_reduce_grads(zinf_engine *e) {
    if (e->replicas == 1) return ZINF_OK;
    if (e->ot) return zinf_comm_allreduce_f32(e->mics_repl, e->h_grads32, e->npart);
    if (e->nccl) {
        ZINF_CHECK(zinf_comm_device_allreduce_f32(e->mics_repl, e->xs, e->grads32, e->npart));
        return engine_sync(e);
    }
    size_t most = e->h_comm_bytes / sizeof(float);
    for (size_t o = 0, n; o < e->npart; o += n) {
        n = e->npart - o < most ? e->npart - o : most;
        ZINF_CHECK(zinf_copy_async(e->xs, e->h_comm, e->grads32 + o, n * sizeof(float), ZINF_COPY_D2H));
        ZINF_CHECK(engine_comm(e, e->mics_repl, COMM_ALLREDUCE, e->h_comm, NULL, n));
        ZINF_CHECK(zinf_copy_async(e->xs, e->grads32 + o, e->h_comm, n * sizeof(float), ZINF_COPY_H2D));
    }
    return engine_sync(e);
}

// What mics_reduce_grads receives from each other replica: the host path's all-reduce
// of n floats moves 2 (n / R) + n % R of them from each (comm.c), in pieces of the
// staging's size on the way through it; NCCL's, 2 n / R by its definition.
static int64_t allreduce_bytes(int64_t n, int64_t R) { return (2 * (n / R) + n % R) * (int64_t)sizeof(float); }

int64_t mics_grads_bytes(const zinf_engine *e) {
    const int64_t n = (int64_t)e->npart, R = e->replicas;
    if (e->otier != ZINF_OFFLOAD_NONE) return allreduce_bytes(n, R);
    if (e->nccl) return 2 * (n * (int64_t)sizeof(float) / R);
    int64_t most = (int64_t)(e->h_comm_bytes / sizeof(float)), sum = 0;
    for (int64_t o = 0; o < n; o += most)
        sum += allreduce_bytes(n - o < most ? n - o : most, R);
    return sum;
}
