// Memory as the engine takes it: device and pinned buffers (counted instead in a plan),
// device buffers freed once the stream work that reads them has passed (deferred frees),
// where a tier's swap store goes, and the figures of what an engine (or a plan) holds.
#include <string.h>

#include "internal.h"

zinf_swap_config engine_swap_config(zinf_engine *e, const zinf_path_list *pl) {
    return (zinf_swap_config){
        .paths = (const char *const *)pl->paths, .npaths = pl->count, .run = e->run, .rank = e->rank, .aio = e->aio};
}

zinf_status engine_reap(zinf_engine *e, bool wait) {
    zinf_status st = ZINF_OK;
    int kept = 0;
    for (int i = 0; i < e->npend; i++) {
        pending_free *p = &e->pend[i];
        if (wait) {
            zinf_status s = zinf_event_sync(p->ev);
            if (st == ZINF_OK) st = s;
        }
        if (wait || zinf_event_done(p->ev)) {
            zinf_device_free(e->dev, p->p);
            zinf_event_destroy(p->ev);
        } else {
            e->pend[kept++] = *p;
        }
    }
    e->npend = kept;
    return st;
}

zinf_status engine_free_after(zinf_engine *e, void *p, zinf_stream *s) {
    if (!p) return ZINF_OK;
    if (e->npend == e->cappend) {
        int cap = e->cappend ? 2 * e->cappend : 16;
        pending_free *n = realloc(e->pend, (size_t)cap * sizeof *n);
        if (!n) return zinf_fail(ZINF_ERR_NOMEM, "engine: out of memory");
        e->pend = n, e->cappend = cap;
    }
    zinf_event *ev;
    ZINF_CHECK(zinf_event_create(e->dev, &ev));
    zinf_status st = zinf_event_record(ev, s);
    if (st != ZINF_OK) {
        zinf_event_destroy(ev);
        return st;
    }
    e->pend[e->npend++] = (pending_free){p, ev};
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
    if (e->npend == 0) return zinf_fail(ZINF_ERR_NOMEM, "%s", zinf_last_error());
    ZINF_CHECK(engine_reap(e, true));
    return zinf_device_alloc(e->dev, bytes, what, p);
}

void zinf_engine_memory_get(const zinf_engine *e, zinf_engine_memory *out) {
    memset(out, 0, sizeof *out);
    if (!e) return;
    size_t p16 = 0;
    for (int i = 0; i < e->nmod; i++)
        p16 += e->stage == 3 ? e->lay[i].slice : e->lay[i].padded;
    out->params16 = (int64_t)(p16 * e->elem_size);
    out->gathered_max = e->coord.prefetcher ? zinf_prefetch_live_peak(e->coord.prefetcher) * (int64_t)e->elem_size : 0;
    out->hpz_ranks = e->hpz_k > 1 ? e->hpz_k : 1;
    out->secondary = e->sec_bytes;
    out->master = (int64_t)(e->npart * sizeof(float));
    out->optim_states = 2 * out->master;
    out->grads32 = out->master;
    out->activations = e->act_bytes;
    out->reduce_bufs = (int64_t)(2 * e->bucket_cap * sizeof(float));
    out->optimizer_tier = e->otier;
    out->staging = (int64_t)e->h_comm_bytes;
    out->activation_host = e->ckpt_host_bytes;
    const zinf_optim_tier_stats *os = &e->ostats;
    const zinf_param_tier_stats *ps = &e->pstats;
    out->host = os->host_bytes;
    out->params_tier = e->ptier;
    out->params_host = ps->host_bytes;
    out->params_resident = ps->resident;
    out->param_buffers = ps->buffers;
    out->param_buffer_bytes = ps->buffer_bytes;
    out->nvme = os->nvme_bytes + ps->nvme_bytes;
    out->subgroups = os->subgroups;
    out->subgroup_max = (int64_t)os->subgroup_max;
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
    out->partition_numel = (int64_t)e->npart;
    out->model_numel = e->model_numel;
}
