// The optimizer states: a rank's fp32 master weights, moments and gradient partition,
// on the device (offload_optimizer none) or in offload/'s optimizer tier (cpu, nvme),
// whose host gradient partition the communication stream adds each reduced bucket into;
// with offload_optimizer.ratio below 1 the first sub-groups' on the device, the rest in
// the tier.
#include <string.h>

#include "internal.h"
#include "zinf_half.h"

static const char *const device_name[] = {"fp32 master weights", "optimizer exp_avg", "optimizer exp_avg_sq",
                                          "fp32 gradients"};

static float **dev_state(zinf_engine *e, zinf_tier_state s) {
    switch (s) {
    case ZINF_TIER_MASTER: return &e->optim.master;
    case ZINF_TIER_EXP_AVG: return &e->optim.exp_avg;
    case ZINF_TIER_EXP_AVG_SQ: return &e->optim.exp_avg_sq;
    case ZINF_TIER_GRAD: break;
    }
    return &e->optim.grads32;
}

// The optimizer tier hands each updated module part to the parameters.
static zinf_status store_part(void *ctx, int mod, const void *src) {
    zinf_engine *e = ctx;
    return e->params.storage->store(e, mod, src, true);
}

// With cpuadam_cores_perc under 1, the NVMe workers run on the cores CPU Adam's
// threads leave (DeepSpeed's split of the cores between the optimizer and the rest),
// not on the same ones; with every core taken they run wherever the kernel puts them.
static zinf_status io_beside_adam(zinf_engine *e) {
    const int *cpus;
    int n = e->aio && e->optim.pool ? zinf_cpu_pool_spare(e->optim.pool, &cpus) : 0;
    if (n == 0) return ZINF_OK;
    if (zinf_aio_bind(e->aio, cpus, n) != 0) return zinf_fail(ZINF_ERR_IO, "engine: %s", zinf_last_error());
    char list[128];
    int len = 0;
    for (int i = 0; i < n && len < (int)sizeof list - 16; i++)
        len += snprintf(list + len, sizeof list - (size_t)len, "%s%d", i ? "," : "", cpus[i]);
    ZINF_LOG_INFO("NVMe workers on CPU%s %s%s, beside CPU Adam's %d thread%s", n > 1 ? "s" : "", list,
                  len >= (int)sizeof list - 16 ? ",..." : "", e->optim.threads, e->optim.threads > 1 ? "s" : "");
    return ZINF_OK;
}

// offload_optimizer.ratio below 1: of the n sub-groups the first int((1 - ratio) n) keep
// their states on the device, as DeepSpeed splits them. They are the first modules in
// forward order: the ones whose gradients the backward makes final last, and that the
// next forward reads first, so that an update on the CPU could go under neither pass.
static zinf_status device_prefix(zinf_engine *e, const size_t *part_n) {
    double ratio = e->cfg.zero.offload_optimizer.ratio;
    if (ratio >= 1) return ZINF_OK;
    int *group_of = malloc(((size_t)e->module_count + 1) * sizeof *group_of);
    if (!group_of) return zinf_fail(ZINF_ERR_NOMEM, "engine: out of memory");
    int n = zinf_optim_tier_group(part_n, e->module_count, e->cfg.zero.sub_group_size, group_of);
    e->optim.device_subgroups = (int)((1 - ratio) * n);
    for (int i = 0; i < e->module_count; i++)
        if (group_of[i] >= 0 && group_of[i] < e->optim.device_subgroups)
            e->optim.device_numel = e->layout[i].part_off + part_n[i];
    free(group_of);
    if (e->rank == 0 && !e->plan && e->optim.device_subgroups == 0)
        ZINF_LOG_WARN("offload_optimizer.ratio %g keeps none of the partition's %d sub-group%s of up to "
                      "sub_group_size %lld elements on the device: lower zero_optimization.sub_group_size (or leave "
                      "it out, for zinf to choose) for sub-groups the ratio can split",
                      ratio, n, n == 1 ? "" : "s", (long long)e->cfg.zero.sub_group_size);
    else if (e->rank == 0 && !e->plan)
        ZINF_LOG_INFO("offload_optimizer.ratio %g: the first %d of %d sub-groups (%zu of %zu elements) keep their "
                      "states on the device",
                      ratio, e->optim.device_subgroups, n, e->optim.device_numel, e->partition.numel);
    return ZINF_OK;
}

// The states of the partition's first elements (all of them, or the first sub-groups'
// with a ratio below 1) on the device.
static zinf_status device_states(zinf_engine *e) {
    int last = e->grads.held ? ZINF_TIER_EXP_AVG_SQ : ZINF_TIER_GRAD; // held: no fp32 gradients
    for (int s = ZINF_TIER_MASTER; e->optim.device_numel && s <= last; s++)
        ZINF_CHECK(
            engine_take_device(e, e->optim.device_numel * sizeof(float), device_name[s], (void **)dev_state(e, s)));
    return ZINF_OK;
}

zinf_status states_create(zinf_engine *e) {
    const zinf_offload_optimizer_config *oc = &e->cfg.zero.offload_optimizer;
    e->optim.offload = oc->device;
    e->optim.deferred = -1;
    if (e->optim.offload == ZINF_OFFLOAD_NONE) {
        e->optim.device_numel = e->partition.numel;
        if (e->optim.update->under_forward && !e->plan) { // each module's update, for share.c
            e->optim.updated = calloc((size_t)e->module_count, sizeof *e->optim.updated);
            if (!e->optim.updated) return zinf_fail(ZINF_ERR_NOMEM, "engine: out of memory");
            for (int i = 0; i < e->module_count; i++)
                ZINF_CHECK(zinf_event_create(e->dev, &e->optim.updated[i]));
        }
        return device_states(e);
    }
    size_t *part_n = malloc(((size_t)e->module_count + 1) * sizeof *part_n);
    if (!part_n) return zinf_fail(ZINF_ERR_NOMEM, "engine: out of memory");
    for (int i = 0; i < e->module_count; i++)
        part_n[i] = e->layout[i].part_n;
    zinf_status st = device_prefix(e, part_n);
    if (st == ZINF_OK) st = device_states(e);
    if (st != ZINF_OK) {
        free(part_n);
        return st;
    }
    // The tier holds the rest: its segments of the device's modules are empty.
    for (int i = 0; i < e->module_count; i++)
        if (states_on_device(e, i)) part_n[i] = 0;
    // DeepSpeed's cpuadam_cores_perc: a share of the cores, leaving the rest to the
    // threads that feed the device and move the data.
    int cores = zinf_cpu_pool_cores();
    e->optim.threads = oc->cpuadam_cores_perc >= 1 ? cores : (int)(oc->cpuadam_cores_perc * cores);
    if (e->optim.threads < 1) e->optim.threads = 1;
    st = e->plan ? ZINF_OK : zinf_cpu_pool_create(&e->optim.pool, e->optim.threads);
    zinf_optim_tier_config tc = {.device = e->optim.offload,
                                 .seg_n = part_n,
                                 .nseg = e->module_count,
                                 .sub_group_size = e->cfg.zero.sub_group_size,
                                 .param_dtype = e->dtype,
                                 .pin_memory = oc->pin_memory,
                                 .pipeline_read = oc->pipeline_read,
                                 .pipeline_write = oc->pipeline_write,
                                 .background = e->optim.background,
                                 .speculate_elements = (size_t)oc->speculate_elements,
                                 .swap = engine_swap_config(e, &oc->nvme_path),
                                 .dev = e->dev,
                                 .host = e->host,
                                 .cpu = e->optim.pool,
                                 .failure = e->failure,
                                 .store = store_part,
                                 .store_ctx = e,
                                 .store_stream = params_stream(e)};
    if (st == ZINF_OK && e->plan)
        st = zinf_optim_tier_plan(&tc, (uint64_t)e->cfg.aio.block_size, &e->optim.tier_stats);
    else if (st == ZINF_OK)
        st = zinf_optim_tier_create(&e->optim.tier, &tc);
    free(part_n);
    if (st != ZINF_OK) return st;
    // Pinned with pin_memory: the device's norms of landed gradients come down into it
    // (states_land_grads) without holding the thread that issues the copies.
    size_t norms_bytes = 2 * (size_t)e->module_count * e->partition.ranks * sizeof *e->grads.host_norms;
    if (oc->pin_memory)
        ZINF_CHECK(engine_take_pinned(e, norms_bytes, "gradient norms", (void **)&e->grads.host_norms));
    else if (!e->plan && !(e->grads.host_norms = malloc(norms_bytes)))
        return zinf_fail(ZINF_ERR_NOMEM, "engine: out of memory");
    if (!e->plan) {
        ZINF_CHECK(io_beside_adam(e));
        e->optim.host_grads32 = zinf_optim_tier_grads(e->optim.tier);
        e->optim.pinned_grads = oc->pin_memory;
        zinf_optim_tier_get_stats(e->optim.tier, &e->optim.tier_stats);
        memset(e->grads.host_norms, 0, norms_bytes);
        return ZINF_OK;
    }
    e->plan_host += e->optim.tier_stats.host_bytes;
    e->plan_pinned += e->optim.tier_stats.pinned_bytes;
    return ZINF_OK;
}

void states_destroy(zinf_engine *e) {
    if (e->dev) zinf_device_free(e->dev, e->optim.deferred_grad);
    for (int i = 0; e->optim.updated && i < e->module_count; i++)
        zinf_event_destroy(e->optim.updated[i]);
    free(e->optim.updated);
    zinf_host_pool_free(e->host, e->grads.host_norms, e->cfg.zero.offload_optimizer.pin_memory);
    zinf_optim_tier_destroy(e->optim.tier);
    zinf_cpu_pool_destroy(e->optim.pool);
    for (int s = ZINF_TIER_MASTER; e->dev && s <= ZINF_TIER_GRAD; s++)
        zinf_device_free(e->dev, *dev_state(e, s));
}

zinf_status states_grads_to_fp32(zinf_engine *e) {
    if (!grads_read_held(e)) return ZINF_OK;
    ZINF_CHECK(engine_alloc(e, e->optim.device_numel * sizeof(float), "fp32 gradients for this step",
                            (void **)&e->optim.grads32));
    if (e->grads.stale) return ZINF_OK; // the next write or backward overwrites them
    for (int i = 0; i < e->module_count; i++) {
        const mod_layout *l = &e->layout[i];
        float *dst = e->optim.grads32 + l->part_off;
        void **g = &e->grads.buffers16[i];
        if (!l->padded) continue;
        if (!*g) { // the backward did not reach the module: its gradient is zero
            ZINF_CHECK(zinf_memset_async(e->compute_stream, dst, 0, l->part_n * sizeof(float)));
            continue;
        }
        ZINF_CHECK(zinf_accumulate(e->compute_stream, dst, *g, e->dtype, l->part_n, true));
        ZINF_CHECK(engine_free_after(e, *g, e->compute_stream));
        *g = NULL;
    }
    return ZINF_OK;
}

// Held gradients of [off, off + n) of the partition, widened; zeros for a module the
// backward did not reach.
static zinf_status read_held(zinf_engine *e, size_t off, size_t n, float *dst) {
    int i = 0;
    while (i + 1 < e->module_count && off >= e->layout[i].part_off + e->layout[i].part_n)
        i++;
    const void *g = e->grads.buffers16[i];
    if (!g) {
        memset(dst, 0, n * sizeof *dst);
        return ZINF_OK;
    }
    void *h = malloc(n * e->elem_size);
    if (!h) return zinf_fail(ZINF_ERR_NOMEM, "engine: out of memory");
    zinf_status st =
        zinf_copy_async(e->compute_stream, h, (const char *)g + (off - e->layout[i].part_off) * e->elem_size,
                        n * e->elem_size, ZINF_COPY_D2H);
    if (st == ZINF_OK) st = zinf_stream_sync(e->compute_stream);
    for (size_t k = 0; st == ZINF_OK && k < n; k++)
        dst[k] = dt_load(h, e->dtype, k);
    free(h);
    return st;
}

// A range of states_read and states_write lies within one module's part: on the device
// below optim.device_numel, in the tier (from its own start) at or past it.
zinf_status states_read(zinf_engine *e, zinf_tier_state s, size_t off, size_t n, float *dst) {
    if (s == ZINF_TIER_GRAD && e->grads.stale) { // no backward since the step
        memset(dst, 0, n * sizeof *dst);
        return ZINF_OK;
    }
    if (s == ZINF_TIER_GRAD && grads_read_held(e)) return read_held(e, off, n, dst);
    if (off >= e->optim.device_numel)
        return zinf_optim_tier_read(e->optim.tier, s, off - e->optim.device_numel, n, dst);
    ZINF_CHECK(zinf_copy_async(e->compute_stream, dst, *dev_state(e, s) + off, n * sizeof *dst, ZINF_COPY_D2H));
    return zinf_stream_sync(e->compute_stream);
}

zinf_status states_write(zinf_engine *e, zinf_tier_state s, size_t off, size_t n, const float *src) {
    if (s == ZINF_TIER_GRAD) ZINF_CHECK(states_grads_to_fp32(e));
    for (int i = 0; s == ZINF_TIER_GRAD && e->grads.norms_taken && i < e->module_count; i++)
        e->grads.norms_taken[i] = -1; // the norms taken as they arrived are of other values
    if (s == ZINF_TIER_GRAD && e->grads.stale) { // the rest of the partition is zero from now
        if (e->optim.tier) zinf_optim_tier_zero_grads(e->optim.tier);
        if (e->optim.device_numel)
            ZINF_CHECK(
                zinf_memset_async(e->compute_stream, e->optim.grads32, 0, e->optim.device_numel * sizeof(float)));
        e->grads.stale = false;
    }
    if (off >= e->optim.device_numel)
        return zinf_optim_tier_write(e->optim.tier, s, off - e->optim.device_numel, n, src);
    ZINF_CHECK(zinf_copy_async(e->compute_stream, *dev_state(e, s) + off, src, n * sizeof *src, ZINF_COPY_H2D));
    return zinf_stream_sync(e->compute_stream);
}

zinf_status states_zero(zinf_engine *e) {
    if (e->optim.tier) ZINF_CHECK(zinf_optim_tier_zero_states(e->optim.tier));
    size_t bytes = e->optim.device_numel * sizeof(float);
    if (!bytes) return ZINF_OK;
    ZINF_CHECK(zinf_memset_async(e->compute_stream, e->optim.exp_avg, 0, bytes));
    ZINF_CHECK(zinf_memset_async(e->compute_stream, e->optim.exp_avg_sq, 0, bytes));
    if (e->optim.grads32) ZINF_CHECK(zinf_memset_async(e->compute_stream, e->optim.grads32, 0, bytes));
    return zinf_stream_sync(e->compute_stream);
}

zinf_status states_zero_grads(zinf_engine *e, zinf_stream *readers) {
    e->grads.stale = true; // overwritten by the next backward (grad_add_run; reduce.c's widen and flush)
    if (!e->grads.held) return ZINF_OK;
    // The step's update reads the held gradients (or the fp32 ones a hand made): the
    // next backward makes new ones.
    for (int i = 0; i < e->module_count; i++) {
        ZINF_CHECK(engine_free_after(e, e->grads.buffers16[i], readers));
        e->grads.buffers16[i] = NULL;
    }
    ZINF_CHECK(engine_free_after(e, e->optim.grads32, readers));
    e->optim.grads32 = NULL;
    return ZINF_OK;
}

// Rank r's slice of a module in this rank's host gradient partition.
static float *host_grad_at(const zinf_engine *e, const mod_layout *l, size_t r) {
    return e->optim.host_grads32 + (l->part_off - e->optim.device_numel) + (r * l->slice - l->part_lo);
}

zinf_sumsq_piece states_device_grad_piece(const zinf_engine *e, int mod, size_t r) {
    const mod_layout *l = &e->layout[mod];
    return (zinf_sumsq_piece){.x = e->optim.grads32 + l->part_off + (r * l->slice - l->part_lo),
                              .n = l->slice,
                              .out = e->grads.device_norms + 2 * ((size_t)mod * e->partition.ranks + r)};
}

zinf_status states_grad_norms(zinf_engine *e, int mod, double *norms) {
    const mod_layout *l = &e->layout[mod];
    size_t W = (size_t)e->partition.ranks;
    for (size_t r = 0; l->padded && r < W; r++) {
        if (!partition_holds(e, r)) continue;
        // The kernel the host device runs for zinf_sumsq: the same bits as on the device.
        zinf_grad_stats gs;
        ZINF_CHECK(zinf_grad_stats_pool(e->optim.pool, host_grad_at(e, l, r), ZINF_DTYPE_F32, l->slice, &gs));
        norms[2 * ((size_t)mod * W + r)] = gs.sumsq, norms[2 * ((size_t)mod * W + r) + 1] = gs.nonfinite;
    }
    return ZINF_OK;
}

// Piece k is its module's last and the module's whole slice: in the step's last backward
// the final gradient arrives in one piece, whose norms are taken with it (as it is added,
// or on the device where it lands) rather than in a pass of their own.
static bool whole_final_piece(const zinf_engine *e, int k) {
    const piece *p = &e->grads.pieces[k];
    return e->grads.last_piece[p->mod] == k && p->lo == 0 && p->n == e->layout[p->mod].slice;
}

typedef struct grad_add_job {
    zinf_engine *e;
    const float *src; // reduced bucket in pinned memory; NULL: it landed in the partition
    int bucket;
    bool packed;      // this rank's block is at src, not at src + rank * block
    bool overwrite;   // the step's first backward over the last step's gradients
    int64_t backward; // the step's last backward, whose final gradients' norms are taken; else -1
} grad_add_job;

// On the communication stream's thread: grads += the reduced bucket, in fp32, the same
// additions the device does when the states are on the device, on the optimizer's
// threads (a pass over memory one thread would take several times as long over). In
// the step's first backward a module's first reduction overwrites what the last step
// left, with the bits of adding to zeros: no pass zeroing the gradients, and no read of
// them in that addition. In
// the step's last backward a module whose last piece this adds has its final gradient:
// its norms are taken now, under the rest of the backward, instead of in the step; when
// that piece is the module's whole slice, in the same pass as the addition, or on the
// device where the piece landed (states_land_grads).
static void grad_add_run(void *arg) {
    grad_add_job *j = arg;
    zinf_engine *e = j->e;
    const bucket *bk = &e->grads.buckets[j->bucket];
    size_t W = (size_t)e->partition.ranks;
    for (int k = bk->first; k < bk->first + bk->count; k++) {
        const piece *p = &e->grads.pieces[k];
        const mod_layout *l = &e->layout[p->mod];
        if (states_on_device(e, p->mod)) continue; // reduce.c adds it on the device
        bool last = j->backward >= 0 && e->grads.last_piece[p->mod] == k;
        bool whole = j->backward >= 0 && whole_final_piece(e, k);
        zinf_status st = ZINF_OK;
        for (size_t r = 0; j->src && r < W; r++) {
            if (!partition_holds(e, r)) continue;
            const float *src = j->src + (j->packed ? 0 : r * bk->block) + p->off;
            float *dst = host_grad_at(e, l, r) + p->lo;
            bool first = j->overwrite && p->first;
            if (whole) { // the norms of the slice, as states_grad_norms takes them
                zinf_grad_stats gs = {0};
                if (st == ZINF_OK) st = zinf_cpu_add_stats(e->optim.pool, dst, src, p->n, first, &gs);
                double *norm = &e->grads.host_norms[2 * ((size_t)p->mod * W + r)];
                norm[0] = gs.sumsq, norm[1] = gs.nonfinite;
            } else if (first) {
                zinf_cpu_add_first(e->optim.pool, dst, src, p->n);
            } else {
                zinf_cpu_add(e->optim.pool, dst, src, p->n);
            }
        }
        if (!last) continue;
        if (!whole) st = states_grad_norms(e, p->mod, e->grads.host_norms);
        if (st != ZINF_OK) {
            zinf_latch_set(e->failure, st);
            continue;
        }
        e->grads.norms_taken[p->mod] = j->backward;
        zinf_optim_tier_grads_final(e->optim.tier, p->mod); // its sub-group may be updated now
    }
    free(j);
}

zinf_status states_add_grads(zinf_engine *e, int b, const float *src, bool packed) {
    grad_add_job *j = malloc(sizeof *j);
    if (!j) return zinf_fail(ZINF_ERR_NOMEM, "engine: out of memory");
    *j = (grad_add_job){e, src, b, packed, e->grads.stale, e->grads.norms_on_arrival ? e->grads.backwards : -1};
    zinf_status st = zinf_stream_host_fn(e->comm_stream, grad_add_run, j);
    if (st != ZINF_OK) free(j);
    return st;
}

bool states_grads_land(const zinf_engine *e, int b) {
    if (!e->grads.stale || !e->optim.pinned_grads) return false;
    const bucket *bk = &e->grads.buckets[b];
    for (int k = bk->first; k < bk->first + bk->count; k++)
        if (!e->grads.pieces[k].first && !states_on_device(e, e->grads.pieces[k].mod)) return false;
    return true;
}

zinf_status states_land_grads(zinf_engine *e, int b, const float *from, bool packed) {
    const bucket *bk = &e->grads.buckets[b];
    size_t W = (size_t)e->partition.ranks;
    for (int k = bk->first; k < bk->first + bk->count; k++) {
        const piece *p = &e->grads.pieces[k];
        const mod_layout *l = &e->layout[p->mod];
        if (states_on_device(e, p->mod)) continue; // reduce.c adds it on the device
        // Its norms on the device, as grad_stats takes them there (the same bits as the
        // host's), and not a pass of the optimizer's threads.
        bool norms = e->grads.norms_on_arrival && whole_final_piece(e, k);
        for (size_t r = 0; r < W; r++) {
            if (!partition_holds(e, r)) continue;
            const float *src = from + (packed ? 0 : r * bk->block) + p->off;
            ZINF_CHECK(engine_copy(e, host_grad_at(e, l, r) + p->lo, src, p->n * sizeof *src, ZINF_COPY_D2H));
            if (!norms) continue;
            size_t at = 2 * ((size_t)p->mod * W + r);
            if (!e->plan) ZINF_CHECK(zinf_sumsq(e->comm_stream, ZINF_DTYPE_F32, src, p->n, e->grads.device_norms + at));
            ZINF_CHECK(engine_copy(e, e->grads.host_norms + at, e->grads.device_norms + at, 2 * sizeof(double),
                                   ZINF_COPY_D2H));
        }
    }
    return states_add_grads(e, b, NULL, packed); // the other norms, as the additions would take them
}
