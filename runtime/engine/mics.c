// MiCS (Zhang et al. 2022): the model's states are partitioned within shard groups of
// S consecutive ranks and replicated across the W / S groups. Everything the engine
// partitions (the flat layout, the gathers, the gradient buckets' reduce-scatter, the
// optimizer's part) runs over the shard group: partition.ranks ranks, this one partition.rank among them. At the
// accumulation boundary the gradient partition is all-reduced across the replication
// group (the ranks with the same place in every shard group), so the replicas step the
// same gradients to the same weights. Without MiCS the shard group is the world.
// With mics_hierarchical_params_gather and a shard group of whole nodes, a gather
// crosses nodes once per slice: an all-gather among the group's ranks with this rank's
// local index (one per node), then one inside the node of what that brought.
#include "internal.h"

// MiCS applies to sliced parameters (stage 3) over several ranks; a shard group of the
// whole world still takes the hierarchical gathers.
static bool mics_on(const zinf_engine *e) {
    return e->params.storage->sliced && e->world > 1 && e->cfg.zero.mics_shard_size > 0;
}

void mics_settings(zinf_engine *e) {
    e->partition.ranks = mics_on(e) ? (int)e->cfg.zero.mics_shard_size : e->world;
    e->partition.rank = e->rank % e->partition.ranks;
    e->partition.replicas = e->world / e->partition.ranks;
}

// The hierarchical gather's shape: the shard group spans hier_nodes whole nodes of
// hier_local consecutive ranks.
static bool hier_shape(zinf_engine *e) {
    int L = engine_ranks_per_node(e);
    bool whole = L > 0 && L < e->partition.ranks && e->partition.ranks % L == 0;
    e->partition.hier_local = whole ? L : 0;
    e->partition.hier_nodes = whole ? e->partition.ranks / L : 0;
    return whole;
}

zinf_status mics_create(zinf_engine *e) {
    partition *pt = &e->partition;
    pt->group = (rank_group){e->comm, pt->ranks, 1};
    if (!mics_on(e)) return ZINF_OK;
    if (e->cfg.zero.mics_hierarchical_params_gather && !hier_shape(e) && !e->plan)
        ZINF_LOG_INFO("engine: mics_hierarchical_params_gather needs shard groups of whole nodes (of the same number "
                      "of consecutive ranks): %d-rank groups over %d node%s here gather in one step",
                      e->partition.ranks, e->nodes, e->nodes == 1 ? "" : "s");
    size_t most = 0;
    for (int i = 0; e->partition.hier_nodes && i < e->module_count; i++)
        if (e->layout[i].padded * e->elem_size > most) most = e->layout[i].padded * e->elem_size;
    // qwZ's wire is smaller than the 16-bit buffer (a byte and a little per element).
    if (e->partition.hier_nodes)
        ZINF_CHECK(engine_take_device(e, most, "hierarchical gathers", &e->partition.hier_buffer));
    pt->replica_group = (rank_group){NULL, pt->replicas, pt->ranks};
    pt->hier_cross = (rank_group){NULL, pt->hier_nodes, pt->hier_local};
    pt->hier_node = (rank_group){NULL, pt->hier_local, 1};
    if (e->plan) return ZINF_OK;
    if (pt->replicas > 1) {
        ZINF_CHECK(zinf_comm_split(e->comm, e->rank / pt->ranks, &pt->shard_comm));
        ZINF_CHECK(zinf_comm_split(e->comm, pt->rank, &pt->replica_group.comm));
        pt->group.comm = pt->shard_comm;
    }
    if (pt->hier_nodes) {
        ZINF_CHECK(zinf_comm_split(pt->group.comm, pt->rank % pt->hier_local, &pt->hier_cross.comm));
        ZINF_CHECK(zinf_comm_split(pt->group.comm, pt->rank / pt->hier_local, &pt->hier_node.comm));
    }
    zinf_comm *groups[] = {pt->shard_comm, pt->replica_group.comm, pt->hier_cross.comm, pt->hier_node.comm};
    for (size_t i = 0; e->nccl && i < ZINF_ARRAY_LEN(groups); i++)
        if (groups[i]) ZINF_CHECK(zinf_comm_attach_device(groups[i], e->dev));
    return ZINF_OK;
}

zinf_status mics_allgather(zinf_engine *e, const void *mine, bool mine_host, void *full, size_t bytes) {
    if (!e->partition.hier_nodes) return engine_allgather(e, &e->partition.group, mine, mine_host, full, bytes);
    const size_t N = (size_t)e->partition.hier_nodes, L = (size_t)e->partition.hier_local,
                 l = (size_t)e->partition.rank % L;
    char *t = e->partition.hier_buffer; // chunk l' (N slices): the slices of ranks (n, l') of the group, n = 0..N-1
    ZINF_CHECK(engine_allgather(e, &e->partition.hier_cross, mine, mine_host, t + l * N * bytes, bytes));
    ZINF_CHECK(engine_allgather(e, &e->partition.hier_node, t + l * N * bytes, false, t, N * bytes));
    if (e->plan) return ZINF_OK; // the reorder: copies on the device, nothing a plan counts
    for (size_t j = 0; j < L; j++)
        for (size_t n = 0; n < N; n++)
            ZINF_CHECK(
                engine_copy(e, (char *)full + (n * L + j) * bytes, t + (j * N + n) * bytes, bytes, ZINF_COPY_D2D));
    return ZINF_OK;
}

void mics_destroy(zinf_engine *e) {
    if (e->dev) zinf_device_free(e->dev, e->partition.hier_buffer);
    zinf_comm *groups[] = {e->partition.hier_cross.comm, e->partition.hier_node.comm, e->partition.shard_comm,
                           e->partition.replica_group.comm};
    for (size_t i = 0; i < ZINF_ARRAY_LEN(groups); i++) {
        zinf_comm_detach_device(groups[i]);
        zinf_comm_destroy(groups[i]);
    }
}

// The gradient partition summed over the replication group, each part where its states
// are: the offloaded part in host memory, where the tier keeps it; the device's (all
// of it without a tier, the first sub-groups' with offload_optimizer.ratio below 1) by
// NCCL, else through the staging in pieces. Every bucket has been added (the streams
// are idle).
zinf_status mics_reduce_grads(zinf_engine *e) {
    if (e->partition.replicas == 1) return ZINF_OK;
    size_t on_device = e->optim.device_numel;
    if (e->optim.tier)
        ZINF_CHECK(zinf_comm_allreduce_f32(e->partition.replica_group.comm, e->optim.host_grads32,
                                           e->partition.numel - on_device));
    if (on_device == 0) return ZINF_OK;
    if (e->nccl) {
        ZINF_CHECK(zinf_comm_device_allreduce_f32(e->partition.replica_group.comm, e->comm_stream, e->optim.grads32,
                                                  on_device));
        return engine_wait_streams(e);
    }
    size_t most = e->staging_bytes / sizeof(float);
    for (size_t o = 0, n; o < on_device; o += n) {
        n = on_device - o < most ? on_device - o : most;
        ZINF_CHECK(engine_copy(e, e->staging, e->optim.grads32 + o, n * sizeof(float), ZINF_COPY_D2H));
        ZINF_CHECK(engine_comm(e, &e->partition.replica_group, COMM_ALLREDUCE, e->staging, NULL, n));
        ZINF_CHECK(engine_copy(e, e->optim.grads32 + o, e->staging, n * sizeof(float), ZINF_COPY_H2D));
    }
    return engine_wait_streams(e);
}

// What mics_reduce_grads receives from each other replica: the host path's all-reduce
// of n floats moves 2 (n / R) + n % R of them from each (comm.c), in pieces of the
// staging's size on the way through it; NCCL's, 2 n / R by its definition.
static int64_t allreduce_bytes(int64_t n, int64_t R) { return (2 * (n / R) + n % R) * (int64_t)sizeof(float); }

int64_t mics_grads_bytes(const zinf_engine *e) {
    const int64_t R = e->partition.replicas, on_device = (int64_t)e->optim.device_numel;
    int64_t sum = allreduce_bytes((int64_t)e->partition.numel - on_device, R); // the tier's part
    if (e->nccl) return sum + 2 * (on_device * (int64_t)sizeof(float) / R);
    int64_t most = (int64_t)(e->staging_bytes / sizeof(float));
    for (int64_t o = 0; o < on_device; o += most)
        sum += allreduce_bytes(on_device - o < most ? on_device - o : most, R);
    return sum;
}
