// The 16-bit parameters: stages 0-2 keep every module's full buffer on the device
// (params.whole; an offloaded update stores into it on a stream of its own); stage 3 keeps
// this rank's slices in offload/'s parameter tier (on the device, in host memory, or
// in the swap store), gathered by the coordinator.
#include <string.h>

#include "internal.h"

static zinf_status gather(void *ctx, const void *mine, bool mine_host, void *full, size_t bytes) {
    return engine_gather_params(ctx, mine, mine_host, full, bytes);
}

// ---- stages 0-2: every module's buffer whole on the device ----

static zinf_status whole_create(zinf_engine *e) {
    for (int i = 0; i < e->module_count; i++)
        if (e->layout[i].padded)
            ZINF_CHECK(engine_take_device(e, e->layout[i].padded * e->elem_size, "parameters", &e->params.whole[i]));
    // The update runs under the next forward (share.c) and stores on a stream of its
    // own: on the compute stream a store would queue behind the forward's ops, and an
    // offloaded update's output buffers, reused once their stores pass, would wait for
    // the forward. On the device the update runs on that stream too.
    if (!e->plan && e->optim.update->under_forward) ZINF_CHECK(zinf_stream_create(e->dev, &e->params.store_stream));
    return ZINF_OK;
}

static void *whole_device_part(zinf_engine *e, int mod) {
    return (char *)e->params.whole[mod] + e->layout[mod].part_lo * e->elem_size;
}

static zinf_status whole_store(zinf_engine *e, int mod, const void *src, bool src_host) {
    const mod_layout *l = &e->layout[mod];
    return zinf_copy_async(params_stream(e), (char *)e->params.whole[mod] + l->part_lo * e->elem_size, src,
                           l->part_n * e->elem_size, src_host ? ZINF_COPY_H2D : ZINF_COPY_D2D);
}

static zinf_status whole_write(zinf_engine *e, int mod, size_t a, size_t n, const void *src) {
    zeropp_invalidate(e);
    ZINF_CHECK(zinf_copy_async(e->compute_stream, (char *)e->params.whole[mod] + a * e->elem_size, src,
                               n * e->elem_size, ZINF_COPY_H2D));
    return zinf_stream_sync(e->compute_stream);
}

static zinf_status whole_copy_out(zinf_engine *e, int mod, size_t a, size_t n, void *dst) {
    ZINF_CHECK(zinf_copy_async(e->compute_stream, dst, (const char *)e->params.whole[mod] + a * e->elem_size,
                               n * e->elem_size, ZINF_COPY_D2H));
    return zinf_stream_sync(e->compute_stream);
}

const param_storage params_whole = {
    .sliced = false,
    .create = whole_create,
    .device_part = whole_device_part,
    .store = whole_store,
    .write = whole_write,
    .copy_out = whole_copy_out,
};

// ---- stage 3: this rank's slices in the parameter tier ----

static zinf_status sliced_create(zinf_engine *e) {
    const zinf_offload_param_config *pc = &e->cfg.zero.offload_param;
    size_t *slice = malloc(((size_t)e->module_count + 1) * sizeof *slice);
    if (!slice) return zinf_fail(ZINF_ERR_NOMEM, "engine: out of memory");
    for (int i = 0; i < e->module_count; i++)
        slice[i] = e->layout[i].slice;
    // A background update stores on the tier's stream, so that a gather waits only for its sub-group.
    zinf_param_tier_config tc = {.device = e->params.offload,
                                 .slice = slice,
                                 .names = e->names,
                                 .nmod = e->module_count,
                                 .dtype = e->dtype,
                                 .pin_memory = pc->pin_memory,
                                 .max_in_cpu = pc->max_in_cpu,
                                 .buffer_size = pc->buffer_size,
                                 .buffer_count = pc->buffer_count,
                                 .own_stream = e->cfg.zero.offload_optimizer.device != ZINF_OFFLOAD_NONE,
                                 .swap = engine_swap_config(e, &pc->nvme_path),
                                 .dev = e->dev,
                                 .compute = e->compute_stream,
                                 .comm = e->comm_stream,
                                 .host = e->host,
                                 .failure = e->failure,
                                 .gather = gather,
                                 .gather_ctx = e};
    zinf_status st = e->plan ? zinf_param_tier_plan(&tc, (uint64_t)e->cfg.aio.block_size, &e->params.tier_stats)
                             : zinf_param_tier_create(&e->params.tier, &tc);
    free(slice);
    if (st != ZINF_OK) return st;
    if (!e->plan) {
        zinf_param_tier_get_stats(e->params.tier, &e->params.tier_stats);
        return ZINF_OK;
    }
    const zinf_param_tier_stats *ps = &e->params.tier_stats;
    int64_t host = ps->host_bytes + ps->buffers * ps->buffer_bytes;
    if (ps->device_bytes) e->plan_device += (int64_t)zinf_device_account_bytes((size_t)ps->device_bytes);
    e->plan_host += host;
    if (pc->pin_memory) e->plan_pinned += host;
    return ZINF_OK;
}

static void *sliced_device_part(zinf_engine *e, int mod) { return zinf_param_tier_device_slice(e->params.tier, mod); }

static zinf_status sliced_store(zinf_engine *e, int mod, const void *src, bool src_host) {
    return zinf_param_tier_store(e->params.tier, mod, src, src_host);
}

static zinf_status sliced_write(zinf_engine *e, int mod, size_t a, size_t n, const void *src) {
    zeropp_invalidate(e);
    return zinf_param_tier_write(e->params.tier, mod, a - e->layout[mod].part_lo, n, src);
}

static zinf_status sliced_copy_out(zinf_engine *e, int mod, size_t a, size_t n, void *dst) {
    return zinf_param_tier_copy_out(e->params.tier, mod, a - e->layout[mod].part_lo, n, dst);
}

const param_storage params_sliced = {
    .sliced = true,
    .create = sliced_create,
    .device_part = sliced_device_part,
    .store = sliced_store,
    .write = sliced_write,
    .copy_out = sliced_copy_out,
};

// ---- both ----

void params_destroy(zinf_engine *e) {
    zinf_param_tier_destroy(e->params.tier);
    zinf_stream_destroy(e->params.store_stream); // its stores end first
    for (int i = 0; e->params.whole && e->dev && i < e->module_count; i++)
        zinf_device_free(e->dev, e->params.whole[i]);
}

zinf_stream *params_stream(zinf_engine *e) {
    return e->params.tier           ? zinf_param_tier_stream(e->params.tier)
           : e->params.store_stream ? e->params.store_stream
                                    : e->compute_stream;
}
