// The plan: what an engine takes and moves, without a device, a communicator or an
// allocation. Creation's own code runs on an engine in plan mode (engine_build: the
// flat layout, the tiers' plans, the buckets and staging; device and pinned memory
// counted, not taken), then two steps are replayed: the 16-bit gradients from first
// backward use to reduction, at stage 3 the gathers by the engine's own prefetcher, and
// the bytes each step moves between host and device and to and from NVMe; last, the
// budgets' verdict.
#include <stdio.h>
#include <string.h>

#include "internal.h"

static int64_t dev_bytes(size_t bytes) { return (int64_t)zinf_device_account_bytes(bytes); }

// Frees count at once: the engine frees after the stream passes, but waits for that
// before any allocation the device cannot hold, so this peak is the least memory that
// runs.
typedef struct replay {
    zinf_engine *e;
    zinf_prefetch *prefetcher; // stage 3
    bool *grad;
    int *ahead;
    int64_t dev, peak;
    int64_t *gathers; // per module, this step (a tiled module's: its sweeps over the tiles)
    int64_t *tile_ops; // per tiled module, this step: the ops that swept its tiles (each reads a slice on disk once)
} replay;

static void take(replay *r, size_t bytes) {
    r->dev += dev_bytes(bytes);
    if (r->dev > r->peak) r->peak = r->dev;
}

// coordinator.c gather, then issue: the buffer, and the gather's bytes counted.
static zinf_status gather(replay *r, int x) {
    r->gathers[x]++;
    take(r, r->e->layout[x].padded * r->e->elem_size);
    return zeropp_gather(r->e, x, NULL);
}

static zinf_status use(replay *r, int x) {
    if (x < 0 || !r->e->layout[x].padded) return ZINF_OK;
    ZINF_CHECK(zinf_prefetch_use(r->prefetcher, x));
    if (r->e->layout[x].tile) return ZINF_OK;
    if (zinf_prefetch_is_gathered(r->prefetcher, x)) return ZINF_OK;
    zinf_prefetch_gathered(r->prefetcher, x);
    return gather(r, x);
}

static void release(replay *r, int x) {
    if (x < 0 || !zinf_prefetch_is_gathered(r->prefetcher, x) || zinf_prefetch_keep(r->prefetcher, x)) return;
    zinf_prefetch_released(r->prefetcher, x);
    r->dev -= dev_bytes(r->e->layout[x].padded * r->e->elem_size);
}

// coordinator.c's tiles of module x during op, as often as the model sweeps them: a
// tile of parameters and the next one's gather (tile 0 is the largest), and where the op
// takes them a gradient tile; each sweep gathers every tile.
static zinf_status tiles(replay *r, const zinf_model_op *op, int x) {
    zinf_engine *e = r->e;
    if (x < 0 || !e->layout[x].tile) return ZINF_OK;
    bool grad;
    int sweeps = zinf_model_tile_sweeps(e->model, op, x, &grad);
    size_t tile = (size_t)e->partition.ranks * e->layout[x].tile * e->elem_size;
    int n = (sweeps ? 2 : 0) + grad;
    r->gathers[x] += sweeps, r->tile_ops[x] += sweeps > 0;
    for (int i = 0; i < n; i++)
        take(r, tile);
    r->dev -= n * dev_bytes(tile);
    zinf_tiling t = tiling_of(e, x);
    for (int s = 0; s < sweeps; s++)
        for (size_t k = 0; k < zinf_tiling_count(&t); k++)
            ZINF_CHECK(zeropp_plan_gather_slices(e, zinf_tiling_len(&t, k), NULL));
    return ZINF_OK;
}

// coordinator.c: coord_fetch, then coord_done.
static zinf_status run_op(replay *r, const zinf_model_op *op) {
    if (!r->prefetcher) return ZINF_OK; // parameters whole: nothing gathered
    int ext = zinf_model_module(r->e->model, op->module)->external;
    ZINF_CHECK(tiles(r, op, op->module));
    ZINF_CHECK(tiles(r, op, ext));
    ZINF_CHECK(use(r, op->module));
    ZINF_CHECK(use(r, ext));
    release(r, op->module), release(r, ext);
    int n = zinf_prefetch_ahead(r->prefetcher, r->ahead);
    for (int i = 0; i < n; i++)
        ZINF_CHECK(gather(r, r->ahead[i]));
    return ZINF_OK;
}

// step.c need_grad: a module's 16-bit gradient from its first backward use.
static void need_grad(replay *r, int x) {
    if (x < 0 || r->grad[x] || !r->e->layout[x].padded || r->e->layout[x].tile) return;
    r->grad[x] = true;
    take(r, r->e->layout[x].padded * r->e->elem_size);
}

static zinf_status micro_batch(replay *r) {
    zinf_engine *e = r->e;
    int nall;
    const zinf_model_op *ops = zinf_model_schedule(e->model, true, &nall);
    for (int k = 0; k < nall; k++) {
        const zinf_model_op *op = &ops[k];
        if (op->pass == ZINF_PASS_BACKWARD)
            need_grad(r, op->module), need_grad(r, zinf_model_module(e->model, op->module)->external);
        ZINF_CHECK(run_op(r, op));
        // reduce.c: reduced once its last backward use ran; held ones stay for the step.
        for (int i = 0; !e->grads.held && i < e->module_count; i++)
            if (e->grads.last_backward_op[i] == k && r->grad[i]) {
                r->grad[i] = false;
                r->dev -= dev_bytes(e->layout[i].padded * e->elem_size);
            }
    }
    return ZINF_OK;
}

// The held gradients go (states_zero_grads), step.c update's 16-bit scratch (a device
// optimizer writing slices that live in host memory), the new parameters handed to the
// ranks (params.ops after_update: at stages 1-2 all-gathered, counted), then
// coord_end_step: every gathered buffer goes, the uses become the trace.
static zinf_status end_step(replay *r) {
    zinf_engine *e = r->e;
    for (int i = 0; e->grads.held && i < e->module_count; i++)
        if (r->grad[i]) r->grad[i] = false, r->dev -= dev_bytes(e->layout[i].padded * e->elem_size);
    bool scratch = e->params.offload != ZINF_OFFLOAD_NONE && e->dtype != ZINF_DTYPE_F32;
    for (int i = 0; scratch && i < e->module_count; i++)
        if (e->layout[i].padded && states_on_device(e, i))
            take(r, e->layout[i].part_n * e->elem_size), r->dev -= dev_bytes(e->layout[i].part_n * e->elem_size);
    zeropp_invalidate(e); // the update was applied
    ZINF_CHECK(e->params.ops->after_update(e));
    if (!r->prefetcher) return ZINF_OK;
    for (int i = 0; i < e->module_count; i++)
        if (zinf_prefetch_is_gathered(r->prefetcher, i)) r->dev -= dev_bytes(e->layout[i].padded * e->elem_size);
    return zinf_prefetch_end_step(r->prefetcher);
}

// Two steps: the first gathers on demand and records the trace, the second (like every
// later one) follows it; gathers[] ends with the second step's gathers per module.
static zinf_status replay_steps(zinf_engine *e, int64_t *gathers, int64_t *tile_ops, zinf_plan *out) {
    size_t n = (size_t)e->module_count;
    replay r = {.e = e, .gathers = gathers, .tile_ops = tile_ops, .dev = e->plan_device, .peak = e->plan_device};
    r.grad = calloc(n, sizeof *r.grad), r.ahead = calloc(n, sizeof *r.ahead);
    zinf_status st = r.grad && r.ahead ? ZINF_OK : zinf_fail(ZINF_ERR_NOMEM, "plan: out of memory");
    if (st == ZINF_OK && e->params.storage->sliced) st = coord_prefetcher(e, &r.prefetcher);
    for (int step = 0; st == ZINF_OK && step < 2; step++) {
        memset(gathers, 0, n * sizeof *gathers), memset(tile_ops, 0, n * sizeof *tile_ops);
        e->counted = (traffic){0};
        for (int k = 0; st == ZINF_OK && k < e->cfg.gradient_accumulation_steps; k++)
            st = micro_batch(&r);
        if (st == ZINF_OK) st = end_step(&r);
    }
    out->device_peak = r.peak;
    out->gathered_peak = r.prefetcher ? zinf_prefetch_live_peak(r.prefetcher) * (int64_t)e->elem_size : 0;
    zinf_prefetch_destroy(r.prefetcher);
    free(r.grad), free(r.ahead);
    return st;
}

// reduce.c flush with an offloaded optimizer, the sums on the device (one rank, or NCCL's
// in place): a bucket with pieces for the host partition brings down this rank's block
// (the whole buffer on one rank); in the step's first reduction, one the partition takes
// in place (pinned, each of its host pieces a module's first: states_grads_land) brings
// down those pieces alone. With offload_optimizer.ratio below 1 a bucket of the device's
// pieces alone brings nothing.
static int64_t sums_down_bytes(const zinf_engine *e, int64_t reductions) {
    size_t W = (size_t)e->partition.ranks;
    bool mine = e->partition.split && W > 1;
    int64_t bytes = 0;
    for (int b = 0; b < e->grads.bucket_count; b++) {
        const bucket *bk = &e->grads.buckets[b];
        size_t host = 0;
        bool first = true;
        for (int k = bk->first; k < bk->first + bk->count; k++) {
            const piece *p = &e->grads.pieces[k];
            if (states_on_device(e, p->mod)) continue;
            host += p->n, first = first && p->first;
        }
        if (!host) continue;
        size_t rows = mine ? 1 : W, block = rows * bk->block;
        bool lands = first && e->cfg.zero.offload_optimizer.pin_memory;
        bytes += (int64_t)((lands ? rows * host + (size_t)(reductions - 1) * block : (size_t)reductions * block) *
                           sizeof(float));
    }
    return bytes;
}

// reduce.c flush through the pinned staging (several ranks without NCCL): the sums for
// the device go back up, this rank's block where they were scattered, every block where
// all-reduced: each bucket with the optimizer on the device, those with a device's piece
// with offload_optimizer.ratio below 1.
static int64_t sums_up_bytes(const zinf_engine *e, int64_t reductions) {
    int64_t bytes = 0;
    size_t rows = e->grads.scattered ? 1 : (size_t)e->partition.ranks;
    for (int b = 0; b < e->grads.bucket_count; b++) {
        bool dev, host;
        reduce_bucket_sides(e, b, &dev, &host);
        if (dev) bytes += (int64_t)(rows * e->grads.buckets[b].block * sizeof(float)) * reductions;
    }
    return bytes;
}

// Bytes moved per optimizer step: what the replay's movers counted (the gathers at
// stage 3, the new parameters' all-gather at stages 1-2), then following the engine's
// copies: each micro-batch's gradient buckets (stage 1: the step's, once) to the host
// (reduce.c flush: the whole bucket, every rank's block, where a host collective needs
// it or at stage 0; with NCCL at stages 1-3 this rank's block), the new 16-bit
// parameters (the optimizer tier's stores, step.c update), and on NVMe the three
// optimizer states read and written once, each gather of a slice on disk read once (a
// secondary with hpZ reads none; a tiled module's slice once per op), and every slice
// on disk written once. The batch's tokens and losses (a few bytes per token) are left
// out.
static void pcie_nvme_traffic(const zinf_engine *e, const int64_t *gathers, const int64_t *tile_ops, zinf_plan *out) {
    size_t W = (size_t)e->world, pad4 = 0, slice4 = 0;
    int64_t ga = e->cfg.gradient_accumulation_steps, reductions = reductions_per_step(e);
    bool staged = W > 1 && !e->nccl, offloaded = e->optim.offload != ZINF_OFFLOAD_NONE;
    out->h2d += e->counted.h2d, out->d2h += e->counted.d2h;
    for (int i = 0; i < e->module_count; i++) {
        const mod_layout *x = &e->layout[i];
        size_t sb = x->slice * e->elem_size;
        bool disk = e->params.offload == ZINF_OFFLOAD_NVME && i >= e->params.tier_stats.resident && x->slice;
        pad4 += x->padded * sizeof(float), slice4 += x->slice * sizeof(float);
        bool hpz = e->zeropp.hpz_ranks > 1 && !x->tile;
        int64_t reads = x->tile ? tile_ops[i] : hpz ? gathers[i] > 0 : gathers[i];
        if (disk) out->nvme_read += reads * (int64_t)sb, out->nvme_write += (int64_t)sb;
    }
    if (e->zeropp.qgz) { // reduce.c flush with zeropp_reduce_scatter: the sums land on the device
        int64_t intra = 0, inter = 0, pcie = 0;
        for (int b = 0; b < e->grads.bucket_count; b++)
            zeropp_reduce_traffic(e, (int64_t)e->grads.buckets[b].block, &intra, &inter, &pcie);
        out->d2h += (pcie + (offloaded ? (int64_t)slice4 : 0)) * ga, out->h2d += pcie * ga;
    } else if (staged) {
        out->d2h += (int64_t)pad4 * reductions;
    } else if (offloaded) {
        out->d2h += sums_down_bytes(e, reductions);
    }
    if (staged && !e->zeropp.qgz) out->h2d += sums_up_bytes(e, reductions);
    if (e->partition.replicas > 1 && staged && !offloaded) // mics.c: the partition's gradients through the staging
        out->d2h += (int64_t)(e->partition.numel * sizeof(float)),
            out->h2d += (int64_t)(e->partition.numel * sizeof(float));
    if (e->ckpt_host_bytes) { // every checkpoint out, and back in but the three left in the slots
        const zinf_model_params *mp = zinf_model_get_params(e->model);
        int64_t one = e->ckpt_host_bytes / (mp->shape.n_layer + 1), back = mp->shape.n_layer - 2;
        out->d2h += e->ckpt_host_bytes * ga, out->h2d += (back > 0 ? back : 0) * one * ga;
    }
    // The new 16-bit parameters: up from the tier's update, down from the device's to
    // slices in host memory.
    bool host_params = e->params.offload != ZINF_OFFLOAD_NONE;
    size_t on_device = e->optim.device_numel, on_tier = e->partition.numel - on_device;
    if (!host_params) out->h2d += (int64_t)(on_tier * e->elem_size);
    if (host_params) out->d2h += (int64_t)(on_device * e->elem_size);
    if (e->optim.offload == ZINF_OFFLOAD_NVME) {
        out->nvme_read += (int64_t)(3 * on_tier * sizeof(float));
        out->nvme_write += (int64_t)(3 * on_tier * sizeof(float));
    }
}

// Bytes rank 0 receives per optimizer step, as the communicator counts them, from the
// members of each group it is in, added to what the replay's movers counted (the
// stage-3 gathers, the stage-1/2 all-gather of the new parameters). Over the
// partition's ranks (the world, or MiCS's shard group): each micro-batch's buckets, at
// stage 1 the step's once (reduce.c flush: a reduce-scatter of a block at stages 1-3,
// an all-reduce, twice that, at 0; the blocks add up to the slices; qgZ's all-to-alls
// instead) and the gradient norms' pieces at stages 1-3 (step.c). Over the world: the
// loss and micro-batch count. With MiCS, over the replication group: the gradient
// partition's all-reduce (mics.c).
static void comm_traffic(zinf_engine *e, zinf_plan *out) {
    int64_t part = 0, slices = 0, ga = e->cfg.gradient_accumulation_steps;
    int64_t reductions = reductions_per_step(e);
    if (e->world == 1) return;
    for (int i = 0; i < e->module_count; i++)
        slices += (int64_t)e->layout[i].slice;
    if (e->zeropp.qgz) { // zeropp_reduce_scatter: an all-to-all in rank 0's node, one among its peers on every node
        int64_t intra = 0, inter = 0, pcie = 0;
        for (int b = 0; b < e->grads.bucket_count; b++)
            zeropp_reduce_traffic(e, (int64_t)e->grads.buckets[b].block, &intra, &inter, &pcie);
        engine_count_from(e, &e->zeropp.qgz_node, ga * intra);
        engine_count_from(e, &e->zeropp.qgz_cross, ga * inter);
    } else {
        part += reductions * slices * (int64_t)sizeof(float) * (e->grads.scattered ? 1 : 2);
    }
    if (e->partition.split) part += 2 * (int64_t)e->module_count * e->partition.ranks * (int64_t)sizeof(double);
    engine_count_from(e, &e->partition.group, part);
    engine_count_from(e, &(rank_group){NULL, e->world, 1}, 2 * (int64_t)sizeof(double));
    if (e->partition.replicas > 1) engine_count_from(e, &e->partition.replica_group, mics_grads_bytes(e));
    out->comm_intra = e->counted.comm_intra, out->comm_inter = e->counted.comm_inter;
}

// Modules i and j come in the same tiles and are the same kind of module ("mlp").
static bool same_tiles(const zinf_engine *e, int i, int j) {
    zinf_tiling a = tiling_of(e, i), b = tiling_of(e, j);
    const char *x = strrchr(e->names[i], '.'), *y = strrchr(e->names[j], '.');
    return a.tile && b.tile && zinf_tiling_count(&a) == zinf_tiling_count(&b) && a.tile == b.tile &&
           strcmp(x ? x : e->names[i], y ? y : e->names[j]) == 0;
}

// Each kind once: "embedding in 9 tiles of 125 MiB, layers.0.mlp to layers.31.mlp (32
// modules) in 3 tiles of 125 MiB".
static void tiled(const zinf_engine *e, zinf_plan *out) {
    for (int i = 0; i < e->module_count; i++) {
        zinf_tiling t = tiling_of(e, i);
        bool said = false;
        for (int j = 0; j < i && !said; j++)
            said = same_tiles(e, j, i);
        if (!t.tile || said) continue;
        int count = 1, last = i;
        for (int j = i + 1; j < e->module_count; j++)
            if (same_tiles(e, i, j)) count++, last = j;
        char b[32], kind[96] = "";
        if (count > 1) snprintf(kind, sizeof kind, " to %s (%d modules)", e->names[last], count);
        size_t n = strlen(out->tiled);
        snprintf(out->tiled + n, sizeof out->tiled - n, "%s%s%s in %zu tiles of %s", n ? ", " : "", e->names[i], kind,
                 zinf_tiling_count(&t),
                 zinf_size_format((uint64_t)((size_t)e->partition.ranks * t.tile * e->elem_size), b, sizeof b));
    }
}

static void plan_free(zinf_engine *e) {
    free(e->grads.last_backward_op), free(e->grads.first_piece), free(e->grads.last_piece), free(e->grads.pieces),
        free(e->grads.buckets), free(e->zeropp.secondary), free(e->zeropp.secondary_valid);
    free(e->params.whole), free(e->grads.buffers16), free(e->params.view), free(e->names), free(e->layout);
    zinf_model_destroy(e->model);
    free(e);
}

// An engine in plan mode with creation's layout, tiers, buckets and staging counted.
static zinf_status plan_engine(const zinf_config *cfg, const zinf_plan_target *t, zinf_engine **out) {
    *out = NULL;
    if (t->world < 1) return zinf_fail(ZINF_ERR_INVAL, "engine plan: world %d is below 1", t->world);
    zinf_engine *e = calloc(1, sizeof *e);
    if (!e) return zinf_fail(ZINF_ERR_NOMEM, "engine plan: out of memory");
    engine_settings(e, cfg);
    e->plan = true, e->world = t->world, e->nccl = t->nccl && t->world > 1, e->nodes = t->nodes > 1 ? t->nodes : 1;
    mics_settings(e);
    zinf_model_params mp;
    zinf_status st = engine_model_params(cfg, e->dtype, &mp);
    mp.attention_workspace = t->attention_workspace;
    if (st == ZINF_OK) st = zinf_model_plan(&e->model, t->backend, &mp, &e->activation_bytes);
    e->plan_device = e->activation_bytes;
    if (st == ZINF_OK) st = engine_build(e);
    if (st != ZINF_OK) {
        plan_free(e);
        return st;
    }
    *out = e;
    return ZINF_OK;
}

// plan_engine with the keys the config leaves out chosen as creation chooses them.
static zinf_status plan_chosen(const zinf_config *given, const zinf_plan_target *t, zinf_plan_choice *choice,
                               zinf_engine **out) {
    zinf_config cfg = *given;
    ZINF_CHECK(engine_choose(&cfg, t, choice));
    return plan_engine(&cfg, t, out);
}

zinf_status engine_plan_memory(const zinf_config *cfg, const zinf_plan_target *t, zinf_engine_memory *out) {
    zinf_engine *e;
    ZINF_CHECK(plan_engine(cfg, t, &e));
    zinf_engine_memory_get(e, out);
    plan_free(e);
    return ZINF_OK;
}

zinf_status engine_plan_schedule(const zinf_config *cfg, const zinf_plan_target *t, plan_schedule *out) {
    memset(out, 0, sizeof *out);
    zinf_plan_choice choice;
    zinf_engine *e;
    ZINF_CHECK(plan_chosen(cfg, t, &choice, &e));
    const zinf_offload_optimizer_config *oc = &e->cfg.zero.offload_optimizer;
    size_t nm = (size_t)e->module_count, W = (size_t)e->partition.ranks;
    const zinf_model_op *ops = zinf_model_schedule(e->model, true, &out->ops);
    zinf_model_schedule(e->model, false, &out->forward_ops);
    size_t *part_n = malloc((nm + 1) * sizeof *part_n);
    int *group_of = malloc((nm + 1) * sizeof *group_of);
    out->groups = calloc(nm + 1, sizeof *out->groups);
    out->buckets = calloc((size_t)e->grads.bucket_count + 1, sizeof *out->buckets);
    zinf_status st = part_n && group_of && out->groups && out->buckets
                         ? ZINF_OK
                         : zinf_fail(ZINF_ERR_NOMEM, "engine plan: out of memory for the update's schedule");
    // The tier's sub-groups: not those kept on the device (offload_optimizer.ratio).
    for (size_t i = 0; st == ZINF_OK && i < nm; i++)
        part_n[i] = states_on_device(e, (int)i) ? 0 : e->layout[i].part_n;
    if (st == ZINF_OK) out->group_count = zinf_optim_tier_group(part_n, (int)nm, e->cfg.zero.sub_group_size, group_of);
    for (int g = 0; g < out->group_count; g++)
        out->groups[g] = (plan_group){.first_use = -1, .last_bucket = -1};
    for (size_t i = 0; st == ZINF_OK && i < nm; i++) {
        plan_group *g = group_of[i] >= 0 ? &out->groups[group_of[i]] : NULL;
        int last = e->grads.last_piece[i], b = last >= 0 ? e->grads.pieces[last].bucket : -1;
        if (g) g->elements += (double)part_n[i], g->last_bucket = b > g->last_bucket ? b : g->last_bucket;
    }
    for (int k = 0; st == ZINF_OK && k < out->forward_ops; k++) {
        int read[2] = {ops[k].module, ops[k].module >= 0 ? zinf_model_module(e->model, ops[k].module)->external : -1};
        for (int j = 0; j < 2; j++) {
            int g = read[j] >= 0 ? group_of[read[j]] : -1;
            if (g >= 0 && out->groups[g].first_use < 0) out->groups[g].first_use = k;
        }
    }
    // reduce.c flush: with NCCL (or qgZ) or on one rank the sums are on the device and
    // may land (states_grads_land); at stages 1-3 over several ranks only this rank's
    // block comes down.
    bool on_device = W == 1 || e->nccl || e->zeropp.qgz, mine = e->partition.split && W > 1;
    for (int b = 0; st == ZINF_OK && b < e->grads.bucket_count; b++) {
        const bucket *bk = &e->grads.buckets[b];
        bool first = true, dev, host; // a bucket summed on the device alone brings nothing down
        reduce_bucket_sides(e, b, &dev, &host);
        for (int k = bk->first; k < bk->first + bk->count; k++)
            first = first && (e->grads.pieces[k].first || states_on_device(e, e->grads.pieces[k].mod));
        out->buckets[b] = (plan_bucket){.op = e->grads.pieces[bk->first + bk->count - 1].op,
                                        .elements = host ? (double)(mine ? bk->block : W * bk->block) : 0,
                                        .lands = first && on_device && oc->pin_memory};
    }
    out->bucket_count = e->grads.bucket_count;
    out->speculate = (double)oc->speculate_elements;
    free(part_n), free(group_of);
    plan_free(e);
    if (st != ZINF_OK) plan_schedule_free(out);
    return st;
}

void plan_schedule_free(plan_schedule *s) {
    free(s->groups), free(s->buckets);
    memset(s, 0, sizeof *s);
}

// The device's peak against its capacity; pinned and all host memory against the
// budgets the host pool, made when the device held plan_pool_device, would hold.
static void judge(const zinf_engine *e, const zinf_plan_target *t, zinf_plan *out) {
    zinf_host_budgets hb = zinf_host_pool_budgets(&t->host, t->local_ranks, t->backend == ZINF_BACKEND_HOST,
                                                  e->plan_pool_device, e->cfg.device.pinned_memory_limit);
    out->device = (zinf_plan_budget){out->device_peak, t->device_capacity > 0 ? t->device_capacity : -1};
    out->pinned = (zinf_plan_budget){out->mem.pinned, hb.pinned};
    out->host = (zinf_plan_budget){out->mem.host_total, hb.host};
    out->mem.device_capacity = out->device.have, out->mem.pinned_budget = hb.pinned;
    bool over = (out->device.have >= 0 && out->device.need > out->device.have) || out->pinned.need > out->pinned.have ||
                out->host.need > out->host.have;
    out->fit = over ? ZINF_PLAN_EXCEEDS : out->device.have < 0 ? ZINF_PLAN_FITS_UNKNOWN : ZINF_PLAN_FITS;
}

zinf_status zinf_engine_plan(const zinf_config *given, const zinf_plan_target *t, zinf_plan *out) {
    if (!given || !t || !out) return zinf_fail(ZINF_ERR_INVAL, "engine plan: cfg, t and out are required");
    memset(out, 0, sizeof *out);
    zinf_engine *e;
    ZINF_CHECK(plan_chosen(given, t, &out->choice, &e));
    zinf_engine_memory_get(e, &out->mem);
    int64_t *gathers = calloc((size_t)e->module_count + 1, sizeof *gathers),
            *tile_ops = calloc((size_t)e->module_count + 1, sizeof *tile_ops);
    zinf_status st = gathers && tile_ops ? replay_steps(e, gathers, tile_ops, out)
                                         : zinf_fail(ZINF_ERR_NOMEM, "engine plan: out of memory");
    if (st == ZINF_OK)
        comm_traffic(e, out), pcie_nvme_traffic(e, gathers, tile_ops, out), judge(e, t, out), tiled(e, out);
    free(gathers), free(tile_ops);
    plan_free(e);
    return st;
}

zinf_status zinf_plan_verdict(const zinf_plan *p) {
    if (!p) return zinf_fail(ZINF_ERR_INVAL, "plan verdict: p is required");
    if (p->fit != ZINF_PLAN_EXCEEDS) return ZINF_OK;
    char msg[2048] = "", a[32], b[32];
    const struct {
        const zinf_plan_budget *b;
        const char *what, *of, *hint;
    } budgets[] = {
        {&p->device, "the device's peak", "its capacity", ENGINE_DEVICE_HINT},
        {&p->pinned, "pinned host memory", "the pinned budget", zinf_host_pool_hint(true)},
        {&p->host, "host memory", "this rank's share of the memory available", zinf_host_pool_hint(false)},
    };
    for (size_t i = 0; i < ZINF_ARRAY_LEN(budgets); i++) {
        const zinf_plan_budget *x = budgets[i].b;
        if (x->have < 0 || x->need <= x->have) continue;
        size_t n = strlen(msg);
        snprintf(msg + n, sizeof msg - n, "%s%s %s is past %s, %s: %s", n ? "; " : "", budgets[i].what,
                 zinf_size_format((uint64_t)x->need, a, sizeof a), budgets[i].of,
                 zinf_size_format((uint64_t)x->have, b, sizeof b), budgets[i].hint);
        n = strlen(msg);
        if (x != &p->device && p->mem.activation_host) // the pinned and the host budgets hold them
            snprintf(msg + n, sizeof msg - n, "; of it, the activation checkpoints take %s "
                                              "(activation_checkpointing.cpu_checkpointing false keeps them on the device)",
                     zinf_size_format((uint64_t)p->mem.activation_host, a, sizeof a));
    }
    return zinf_fail(ZINF_ERR_NOMEM, "the plan does not fit: %s", msg);
}
