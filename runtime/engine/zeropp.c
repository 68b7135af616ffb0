// ZeRO++ (Wang et al. 2023) in the stage-3 gathers.
// - qwZ: a rank's 16-bit slice travels as int8 with one fp32 scale per group, and every
//   rank dequantizes the gathered buffer, its own slice included, so all ranks compute
//   with the same weights; stored slices, master weights and the optimizer never see a
//   quantized value.
// - hpZ: the ranks form groups of k consecutive ranks. A module's first gather of a
//   step leaves each rank holding 1/k of what was gathered, as it travelled (16-bit, or
//   int8 and scales with qwZ): its secondary partition. Later gathers of the module in
//   the step gather those within the group, so they never leave it, and give the same
//   bits as the first. An applied optimizer step (or any write of the parameters) ends
//   them; a step skipped for inf or NaN keeps them.
// - qgZ: a bucket's reduce-scatter becomes two all-to-alls of int4 values with fp32
//   group scales: inside the node, each rank gets its node's contributions to the blocks
//   of the ranks with its local index, sums them in fp32 and requantizes; across nodes,
//   among the ranks with that local index, each gets its own block's node sums and adds
//   them in fp32. The result is the same summed block as the plain reduce-scatter, up
//   to two int4 roundings; inf and NaN survive as NaN, so the overflow check sees them.
// A gather's "wire" is the buffer that holds every rank's slice as it travels: the full
// buffer itself, or with qwZ the quantized buffer the full one is dequantized from.
#include "internal.h"

// Every slice is a whole number of SLICE_ALIGN elements, so groups of that size never
// straddle two ranks' slices and need no padding. 2048 is below DeepSpeed's 4K-8K
// groups: a finer scale for a little more traffic (4 bytes per 2048, 0.2 %).
enum { QW_GROUP = SLICE_ALIGN };

// One rank's quantized slice of n elements: n int8, then the groups' scales.
static size_t qw_bytes(size_t n) { return n + n / QW_GROUP * sizeof(float); }

static size_t gather_bytes(const zinf_engine *e, int mod) {
    size_t n = e->layout[mod].slice;
    return e->zeropp.qwz ? qw_bytes(n) : n * e->elem_size;
}

// A rank's secondary partition of module mod: the wire of world / k ranks' slices.
static size_t seg_bytes(const zinf_engine *e, int mod) {
    return (size_t)(e->world / e->zeropp.hpz_ranks) * gather_bytes(e, mod);
}

// qgZ's groups: int4 has 16 levels, so much finer groups than qwZ's: 32 bytes of codes
// and 4 of scale, 0.5625 bytes per element against the plain reduce-scatter's 4. On
// test_zeropp's model, 30 steps stay within 1 % of plain ZeRO-3's losses with groups of
// 64 and drift 2.5 %, 5 % and 10 % with 128, 256 and 512.
enum { QG_GROUP = 64 };

// A block of n floats as qgZ sends it: int4 pairs (padded to 4 bytes), then the scales.
static size_t qg_codes(size_t n) { return ((n + 1) / 2 + 3) / 4 * 4; }
static size_t qg_slot(size_t n) { return qg_codes(n) + (n + QG_GROUP - 1) / QG_GROUP * sizeof(float); }

// qgZ needs several nodes of the same number of consecutive ranks, so that a rank's
// local index names its peer on every node.
static zinf_status qg_create(zinf_engine *e) {
    if (e->nodes < 2 || !engine_ranks_per_node(e)) {
        e->zeropp.qgz = false;
        if (!e->plan)
            ZINF_LOG_INFO("engine: zero_quantized_gradients needs more than one node, each of the same number of "
                          "consecutive ranks (%d node%s here): gradients take the plain reduce-scatter",
                          e->nodes, e->nodes == 1 ? "" : "s");
        return ZINF_OK;
    }
    const size_t W = (size_t)e->world, N = (size_t)e->nodes, L = W / N, blk = e->grads.bucket_capacity / W;
    ZINF_CHECK(engine_take_device(e, W * qg_slot(blk), "qgZ buffers", &e->zeropp.qgz_send));
    ZINF_CHECK(engine_take_device(e, W * qg_slot(blk), "qgZ buffers", &e->zeropp.qgz_recv));
    ZINF_CHECK(engine_take_device(e, N * blk * sizeof(float), "qgZ buffers", (void **)&e->zeropp.qgz_node_sums));
    e->zeropp.qgz_node = (rank_group){NULL, (int)L, 1};
    e->zeropp.qgz_cross = (rank_group){NULL, (int)N, (int)L};
    if (e->plan) return ZINF_OK;
    ZINF_CHECK(zinf_comm_split(e->comm, (int)((size_t)e->rank / L), &e->zeropp.qgz_node.comm));
    ZINF_CHECK(zinf_comm_split(e->comm, (int)((size_t)e->rank % L), &e->zeropp.qgz_cross.comm));
    if (e->nccl) ZINF_CHECK(zinf_comm_attach_device(e->zeropp.qgz_node.comm, e->dev));
    return e->nccl ? zinf_comm_attach_device(e->zeropp.qgz_cross.comm, e->dev) : ZINF_OK;
}

zinf_status zeropp_create(zinf_engine *e) {
    const zinf_zero_config *z = &e->cfg.zero;
    bool three = e->params.storage->sliced && e->world > 1; // stage 3
    e->zeropp.qwz = three && z->quantized_weights;
    e->zeropp.qgz = three && z->quantized_gradients;
    if (e->zeropp.qgz) ZINF_CHECK(qg_create(e));
    e->zeropp.hpz_ranks = three && z->hpz_partition_size > 1 ? (int)z->hpz_partition_size : 1;
    if (!e->plan && e->world == 1 && e->params.storage->sliced &&
        (z->quantized_weights || z->quantized_gradients || z->hpz_partition_size > 1))
        ZINF_LOG_INFO("engine: ZeRO++ (zero_quantized_weights, zero_quantized_gradients, zero_hpz_partition_size) "
                      "has no effect on one rank: nothing is gathered from or reduced with others");
    if (e->zeropp.qwz) {
        size_t most = 0;
        for (int i = 0; i < e->module_count; i++) { // a tiled module's gathers are of a tile
            size_t n =
                (size_t)e->partition.ranks * qw_bytes(e->layout[i].tile ? e->layout[i].tile : e->layout[i].slice);
            if (n > most) most = n;
        }
        // The communication stream runs the gathers one after another: one buffer serves all.
        ZINF_CHECK(engine_take_device(e, most, "quantized gathers", &e->zeropp.quantized));
    }
    if (e->zeropp.hpz_ranks == 1) return ZINF_OK;
    // Beside parameters offloaded to host memory or NVMe the secondary partition stays
    // in pinned host memory: the device has no room to spare there, and a later gather
    // then reads no NVMe.
    e->zeropp.secondary_host = e->params.offload != ZINF_OFFLOAD_NONE;
    e->zeropp.secondary = calloc((size_t)e->module_count, sizeof *e->zeropp.secondary);
    e->zeropp.secondary_valid = calloc((size_t)e->module_count, sizeof *e->zeropp.secondary_valid);
    if (!e->zeropp.secondary || !e->zeropp.secondary_valid) return zinf_fail(ZINF_ERR_NOMEM, "engine: out of memory");
    for (int i = 0; i < e->module_count; i++) {
        if (!e->layout[i].padded || e->layout[i].tile) continue; // tiles are gathered from every rank
        const char *what = "hpZ secondary partition";
        size_t b = seg_bytes(e, i);
        ZINF_CHECK(e->zeropp.secondary_host ? engine_take_pinned(e, b, what, &e->zeropp.secondary[i])
                                            : engine_take_device(e, b, what, &e->zeropp.secondary[i]));
        e->zeropp.secondary_bytes += (int64_t)b;
    }
    e->zeropp.hpz_group = (rank_group){NULL, e->zeropp.hpz_ranks, 1};
    if (e->plan) return ZINF_OK;
    ZINF_CHECK(zinf_comm_split(e->comm, e->rank / e->zeropp.hpz_ranks, &e->zeropp.hpz_group.comm));
    return e->nccl ? zinf_comm_attach_device(e->zeropp.hpz_group.comm, e->dev) : ZINF_OK;
}

void zeropp_destroy(zinf_engine *e) {
    if (e->dev) {
        zinf_device_free(e->dev, e->zeropp.quantized);
        zinf_device_free(e->dev, e->zeropp.qgz_send), zinf_device_free(e->dev, e->zeropp.qgz_recv),
            zinf_device_free(e->dev, e->zeropp.qgz_node_sums);
    }
    zinf_comm *groups[] = {e->zeropp.qgz_node.comm, e->zeropp.qgz_cross.comm, e->zeropp.hpz_group.comm};
    for (size_t i = 0; i < ZINF_ARRAY_LEN(groups); i++) {
        zinf_comm_detach_device(groups[i]);
        zinf_comm_destroy(groups[i]);
    }
    for (int i = 0; e->zeropp.secondary && i < e->module_count; i++) {
        if (e->zeropp.secondary_host && e->host) zinf_host_pool_free(e->host, e->zeropp.secondary[i], true);
        if (!e->zeropp.secondary_host && e->dev) zinf_device_free(e->dev, e->zeropp.secondary[i]);
    }
    free(e->zeropp.secondary), free(e->zeropp.secondary_valid);
}

// The wire of a gather into full: full itself, or the quantized buffer.
static char *wire_of(zinf_engine *e, void *full) { return e->zeropp.qwz ? e->zeropp.quantized : full; }

// full = every rank's slice dequantized from the quantized wire (kernels: nothing a
// plan counts).
static zinf_status dequantize_all(zinf_engine *e, void *full, size_t n) {
    if (e->plan) return ZINF_OK;
    const size_t qb = qw_bytes(n), bytes = n * e->elem_size;
    for (size_t r = 0; r < (size_t)e->partition.ranks; r++) {
        const char *qr = (const char *)e->zeropp.quantized + r * qb;
        ZINF_CHECK(zinf_dequantize(e->comm_stream, 8, qr, (const float *)(qr + n), n, QW_GROUP, e->dtype, (char *)full + r * bytes,
                                   false));
    }
    return ZINF_OK;
}

zinf_status engine_gather_params(zinf_engine *e, const void *mine, bool mine_host, void *full, size_t bytes) {
    if (!e->zeropp.qwz) return mics_allgather(e, mine, mine_host, full, bytes);
    const size_t n = bytes / e->elem_size, qb = qw_bytes(n);
    char *qmine = (char *)e->zeropp.quantized + (size_t)e->partition.rank * qb;
    if (mine_host) { // quantized on the device: this rank's part goes up first, into its place
        char *place = (char *)full + (size_t)e->partition.rank * bytes;
        ZINF_CHECK(engine_copy(e, place, mine, bytes, ZINF_COPY_H2D));
        mine = place;
    }
    if (!e->plan)
        ZINF_CHECK(zinf_quantize(e->comm_stream, 8, e->dtype, mine, n, QW_GROUP, qmine, (float *)(qmine + n)));
    ZINF_CHECK(mics_allgather(e, qmine, false, e->zeropp.quantized, qb));
    return dequantize_all(e, full, n);
}

zinf_status zeropp_plan_gather_slices(zinf_engine *e, size_t n, void *full) {
    return engine_gather_params(e, NULL, e->params.offload != ZINF_OFFLOAD_NONE, full, n * e->elem_size);
}

bool zeropp_has_secondary(const zinf_engine *e, int mod) {
    return e->zeropp.hpz_ranks > 1 && e->zeropp.secondary_valid[mod];
}

zinf_status zeropp_gather(zinf_engine *e, int mod, void *full) {
    const size_t seg = e->zeropp.hpz_ranks > 1 ? seg_bytes(e, mod) : 0;
    char *wire = wire_of(e, full);
    if (zeropp_has_secondary(e, mod)) { // within the group: the group's segments make the wire
        ZINF_CHECK(
            engine_allgather(e, &e->zeropp.hpz_group, e->zeropp.secondary[mod], e->zeropp.secondary_host, wire, seg));
        return e->zeropp.qwz ? dequantize_all(e, full, e->layout[mod].slice) : ZINF_OK;
    }
    ZINF_CHECK(e->plan ? zeropp_plan_gather_slices(e, e->layout[mod].slice, full)
                       : zinf_param_tier_gather(e->params.tier, mod, full));
    if (e->zeropp.hpz_ranks == 1) return ZINF_OK;
    // Keep this rank's segment of the wire before the next gather reuses it.
    size_t j = (size_t)(e->rank % e->zeropp.hpz_ranks);
    ZINF_CHECK(engine_copy(e, e->zeropp.secondary[mod], wire + j * seg, seg,
                           e->zeropp.secondary_host ? ZINF_COPY_D2H : ZINF_COPY_D2D));
    e->zeropp.secondary_valid[mod] = true;
    return ZINF_OK;
}

void zeropp_invalidate(zinf_engine *e) {
    for (int i = 0; e->zeropp.secondary_valid && i < e->module_count; i++)
        e->zeropp.secondary_valid[i] = false;
}

// ---- qgZ ----

// n floats at x, quantized into a slot: the int4 codes, then the scales.
static zinf_status qg_quantize(zinf_engine *e, const float *x, size_t n, char *slot) {
    return zinf_quantize(e->comm_stream, 4, ZINF_DTYPE_F32, x, n, QG_GROUP, slot, (float *)(slot + qg_codes(n)));
}

// out (+)= slot dequantized.
static zinf_status qg_dequantize(zinf_engine *e, const char *slot, size_t n, float *out, bool add) {
    return zinf_dequantize(e->comm_stream, 4, slot, (const float *)(slot + qg_codes(n)), n, QG_GROUP, ZINF_DTYPE_F32, out,
                           add);
}

zinf_status zeropp_reduce_scatter(zinf_engine *e, float *d, size_t blk) {
    const size_t N = (size_t)e->nodes, L = (size_t)e->world / N, qs = qg_slot(blk);
    char *send = e->zeropp.qgz_send, *recv = e->zeropp.qgz_recv;
    // Chunk j of the send buffer goes to local rank j: the blocks of ranks (n, j), n = 0..N-1.
    for (size_t j = 0; j < L; j++)
        for (size_t n = 0; n < N; n++)
            ZINF_CHECK(qg_quantize(e, d + (n * L + j) * blk, blk, send + (j * N + n) * qs));
    ZINF_CHECK(engine_alltoall(e, &e->zeropp.qgz_node, send, recv, N * qs));
    // From local rank l, slot n: its part of the block of rank (n, this local index).
    for (size_t n = 0; n < N; n++) {
        float *part = e->zeropp.qgz_node_sums + n * blk;
        for (size_t l = 0; l < L; l++)
            ZINF_CHECK(qg_dequantize(e, recv + (l * N + n) * qs, blk, part, l > 0));
        ZINF_CHECK(qg_quantize(e, part, blk, send + n * qs));
    }
    ZINF_CHECK(engine_alltoall(e, &e->zeropp.qgz_cross, send, recv, qs));
    float *mine = d + (size_t)e->rank * blk;
    for (size_t n = 0; n < N; n++)
        ZINF_CHECK(qg_dequantize(e, recv + n * qs, blk, mine, n > 0));
    return ZINF_OK;
}

void zeropp_reduce_traffic(const zinf_engine *e, int64_t blk, int64_t *intra, int64_t *inter, int64_t *pcie) {
    const int64_t N = e->nodes, qs = (int64_t)qg_slot((size_t)blk);
    *intra += N * qs, *inter += qs;
    if (!e->nccl) *pcie += (int64_t)e->world * qs + N * qs; // each way
}
