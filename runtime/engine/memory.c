// Memory as the engine takes it: device and pinned buffers (counted instead in a plan),
// device buffers freed once the stream work that reads them has passed (deferred frees),
// where a tier's swap store goes, and the figures of what an engine (or a plan) holds.
#include <string.h>

#include "internal.h"

zinf_swap_config engine_swap_config(zinf_engine *e, const zinf_path_list *pl) {
    return (zinf_swap_config){.paths = (const char *const *)pl->paths,
                              .npaths = pl->count,
                              .run = e->run,
                              .rank = e->rank,
                              .aio = e->aio,
                              .without_checksums = !e->cfg.aio.checksum};
}

zinf_status engine_reap(zinf_engine *e, bool wait) {
    zinf_status st = ZINF_OK;
    int kept = 0;
    for (int i = 0; i < e->pending.count; i++) {
        pending_free *p = &e->pending.items[i];
        if (wait) {
            zinf_status s = zinf_event_sync(p->ev);
            if (st == ZINF_OK) st = s;
        }
        if (wait || zinf_event_done(p->ev)) {
            zinf_device_free_unused(e->dev, p->p); // its last use has run
            zinf_event_destroy(p->ev);
        } else {
            e->pending.items[kept++] = *p;
        }
    }
    e->pending.count = kept;
    return st;
}

zinf_status engine_free_after(zinf_engine *e, void *p, zinf_stream *s) {
    if (!p) return ZINF_OK;
    if (e->pending.count == e->pending.capacity) {
        int cap = e->pending.capacity ? 2 * e->pending.capacity : 16;
        pending_free *n = realloc(e->pending.items, (size_t)cap * sizeof *n);
        if (!n) return zinf_fail(ZINF_ERR_NOMEM, "engine: out of memory");
        e->pending.items = n, e->pending.capacity = cap;
    }
    zinf_event *ev;
    ZINF_CHECK(zinf_event_create(e->dev, &ev));
    zinf_status st = zinf_event_record(ev, s);
    if (st != ZINF_OK) {
        zinf_event_destroy(ev);
        return st;
    }
    e->pending.items[e->pending.count++] = (pending_free){p, ev};
    return ZINF_OK;
}

zinf_status engine_take_device(zinf_engine *e, size_t bytes, const char *what, void **p) {
    if (!e->plan) return zinf_device_alloc(e->dev, bytes, what, p);
    e->plan_device += (int64_t)zinf_device_account_bytes(bytes);
    return ZINF_OK;
}

zinf_status engine_take_pinned(zinf_engine *e, size_t bytes, const char *what, void **p) {
    if (!e->plan) return zinf_host_pool_alloc(e->host, bytes, true, what, p);
    e->plan_pinned += (int64_t)bytes, e->plan_host += (int64_t)bytes;
    return ZINF_OK;
}

zinf_status engine_alloc(zinf_engine *e, size_t bytes, const char *what, void **p) {
    ZINF_CHECK(engine_reap(e, false));
    if (zinf_device_alloc(e->dev, bytes, what, p) == ZINF_OK) return ZINF_OK;
    if (e->pending.count == 0) return zinf_fail(ZINF_ERR_NOMEM, "%s", zinf_last_error());
    ZINF_CHECK(engine_reap(e, true));
    return zinf_device_alloc(e->dev, bytes, what, p);
}

void zinf_engine_memory_get(const zinf_engine *e, zinf_engine_memory *out) {
    memset(out, 0, sizeof *out);
    if (!e) return;
    size_t p16 = 0;
    for (int i = 0; i < e->module_count; i++)
        p16 += e->layout[i].param_n;
    out->params16 = (int64_t)(p16 * e->elem_size);
    out->gathered_max =
        e->params.coord.prefetcher ? zinf_prefetch_live_peak(e->params.coord.prefetcher) * (int64_t)e->elem_size : 0;
    out->hpz_ranks = e->zeropp.hpz_ranks > 1 ? e->zeropp.hpz_ranks : 1;
    out->secondary = e->zeropp.secondary_bytes;
    out->master = (int64_t)(e->partition.numel * sizeof(float));
    out->optim_states = 2 * out->master;
    out->grads32 = e->grads.held ? 0 : out->master; // held: the step reads the 16-bit ones
    if (e->optim.offload != ZINF_OFFLOAD_NONE) {
        out->subgroups_on_device = e->optim.device_subgroups;
        out->optimizer_device_numel = (int64_t)e->optim.device_numel;
    }
    out->activations = e->activation_bytes;
    out->reduce_bufs = e->grads.direct ? 0 : (int64_t)(2 * e->grads.bucket_capacity * sizeof(float));
    out->accumulated_grads = (int64_t)e->grads.accumulated_bytes;
    out->optimizer_tier = e->optim.offload;
    out->staging = (int64_t)e->staging_bytes;
    out->activation_host = e->ckpt_host_bytes;
    const zinf_optim_tier_stats *os = &e->optim.tier_stats;
    const zinf_param_tier_stats *ps = &e->params.tier_stats;
    out->host = os->host_bytes;
    out->optim_output = os->output_bytes;
    out->optim_swap_buffers = os->swap_buffer_bytes;
    out->optim_speculation = os->speculation_bytes;
    out->params_tier = e->params.offload;
    out->params_host = ps->host_bytes;
    out->params_resident = ps->resident;
    out->param_buffers = ps->buffers;
    out->param_buffer_bytes = ps->buffer_bytes;
    out->nvme = os->nvme_bytes + ps->nvme_bytes;
    out->subgroups = os->subgroups;
    out->subgroup_max = (int64_t)os->subgroup_max;
    out->optimizer_threads = e->optim.threads;
    if (e->plan) { // the capacity and the budget are the target's: zinf_engine_plan's verdict
        out->pinned = e->plan_pinned, out->host_total = e->plan_host;
        out->pinned_budget = out->device_capacity = -1;
        out->device_in_use = out->device_peak = e->plan_device;
    } else {
        zinf_host_pool_usage hu;
        zinf_host_pool_get_usage(e->host, &hu);
        out->pinned = hu.pinned, out->pinned_budget = hu.pinned_budget, out->host_total = hu.host;
        zinf_device_mem mem;
        zinf_device_get_mem(e->dev, &mem);
        out->device_in_use = (int64_t)mem.in_use;
        out->device_peak = (int64_t)mem.peak;
        out->device_capacity = (int64_t)mem.capacity;
    }
    out->partition_numel = (int64_t)e->partition.numel;
    out->model_numel = e->model_numel;
}
