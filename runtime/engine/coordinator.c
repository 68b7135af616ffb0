// The stage-3 parameter coordinator. Before a module runs, its parameters (and those
// of the module it borrows from, the head's wte) are gathered from every rank's slice
// into a full buffer on the communication stream; after, the buffer is released unless
// the module is persistent (smaller than param_persistence_threshold) or used again
// within max_reuse_distance elements. The first step records the trace of module uses;
// later steps gather ahead along it, up to prefetch_bucket_size elements ahead and
// max_live_parameters gathered at once. Every decision depends only on the trace and
// element counts, never on timing, so all ranks issue the same collectives in the same
// order. Slices on NVMe are read ahead along the trace separately, as far as the
// parameter tier's buffers go: reads are local, so that stage may run on timing. When
// execution departs from the trace, the rest of the step gathers on demand and its
// uses become the new trace.
#include <string.h>

#include "internal.h"

zinf_status coord_create(zinf_engine *e) {
    coordinator *co = &e->co;
    size_t n = (size_t)e->nmod;
    co->gathered = calloc(n, sizeof *co->gathered);
    co->landed = calloc(n, sizeof *co->landed);
    co->use_pos = malloc(n * sizeof *co->use_pos);
    co->queue = malloc(n * sizeof *co->queue);
    co->queued = calloc(n, sizeof *co->queued);
    if (!co->gathered || !co->landed || !co->use_pos || !co->queue || !co->queued)
        return zinf_fail(ZINF_ERR_NOMEM, "engine: out of memory");
    for (int i = 0; i < e->nmod; i++) {
        co->use_pos[i] = -1;
        ZINF_CHECK(zinf_event_create(e->dev, &co->landed[i]));
    }
    return ZINF_OK;
}

static void free_all(zinf_engine *e) {
    coordinator *co = &e->co;
    // Gathers decided and never issued (execution departed from the trace) are dropped
    // on every rank alike.
    for (int i = 0; co->queued && i < e->nmod; i++)
        co->queued[i] = false;
    co->qhead = co->qlen = 0;
    for (int i = 0; co->gathered && i < e->nmod; i++) {
        zinf_device_free(e->dev, co->gathered[i]);
        co->gathered[i] = NULL;
    }
    co->live = 0;
}

void coord_destroy(zinf_engine *e) {
    coordinator *co = &e->co;
    free_all(e);
    for (int i = 0; co->landed && i < e->nmod; i++)
        zinf_event_destroy(co->landed[i]);
    for (int i = 0; i < co->capwaits; i++) {
        zinf_event_destroy(co->waits[i].before);
        zinf_event_destroy(co->waits[i].after);
    }
    free(co->waits);
    free(co->gathered), free(co->landed), free(co->use_pos), free(co->queue), free(co->queued);
    free(co->trace), free(co->next_use), free(co->rec);
}

// Decide to gather module x: its buffer now, its gather queued behind those decided
// before it. Decisions depend only on the trace and element counts, so every rank makes
// the same ones in the same order; issue() sends them in that order, only later when a
// background update has not yet written the module.
static zinf_status gather(zinf_engine *e, int x) {
    coordinator *co = &e->co;
    const mod_layout *l = &e->lay[x];
    zinf_status st = engine_alloc(e, l->padded * e->es, "gathered parameters", &co->gathered[x]);
    if (st == ZINF_ERR_NOMEM)
        return zinf_fail(st, "%s; lower zero_optimization.stage3_prefetch_bucket_size or stage3_max_live_parameters "
                             "(or reduce_bucket_size), or raise device.memory_limit",
                         zinf_last_error());
    ZINF_CHECK(st);
    co->live += (int64_t)l->padded;
    if (co->live * (int64_t)e->es > co->live_peak_bytes) co->live_peak_bytes = co->live * (int64_t)e->es;
    co->queue[(co->qhead + co->qlen++) % e->nmod] = x;
    co->queued[x] = true;
    return ZINF_OK;
}

// Issue decided gathers in order: up to and including module `upto` (waiting for the
// background update where it must), or with upto < 0 as many as are updated.
static zinf_status issue(zinf_engine *e, int upto) {
    coordinator *co = &e->co;
    while (co->qlen) {
        int x = co->queue[co->qhead];
        if (upto < 0 && !tier_updated(e, x)) break;
        co->qhead = (co->qhead + 1) % e->nmod, co->qlen--;
        co->queued[x] = false;
        ZINF_CHECK(ptier_gather(e, x, co->gathered[x]));
        ZINF_CHECK(zinf_event_record(co->landed[x], e->xs));
        if (x == upto) break;
    }
    return ZINF_OK;
}

// Gather along the trace from position `from`, within the prefetch budgets.
static zinf_status prefetch(zinf_engine *e, int from) {
    coordinator *co = &e->co;
    int64_t ahead = 0;
    for (int i = from; i < co->ntrace; i++) {
        int x = co->trace[i];
        if (co->gathered[x]) continue;
        int64_t n = (int64_t)e->lay[x].padded;
        ahead += n;
        if (ahead > e->cfg.zero.prefetch_bucket_size || co->live + n > e->cfg.zero.max_live_parameters) break;
        ZINF_CHECK(gather(e, x));
    }
    return ZINF_OK;
}

// Start reading slices on disk along the trace from position `from`, as far as the
// parameter tier's pool goes; one buffer stays for a read on demand. Reads are local,
// so unlike gathers they may depend on anything.
static zinf_status read_ahead(zinf_engine *e, int from) {
    coordinator *co = &e->co;
    for (int i = from; i < co->ntrace && ptier_free_buffers(e) > 1; i++) {
        int x = co->trace[i];
        bool issued = co->gathered[x] && !co->queued[x];
        if (issued || !ptier_on_disk(e, x) || e->pread_buf[x] >= 0) continue;
        if (!tier_updated(e, x)) break; // the background update has not written it yet
        ZINF_CHECK(ptier_read(e, x));
    }
    return ZINF_OK;
}

static zinf_status record_use(coordinator *co, int x) {
    if (co->nrec == co->caprec) {
        int cap = co->caprec ? 2 * co->caprec : 64;
        int *n = realloc(co->rec, (size_t)cap * sizeof *n);
        if (!n) return zinf_fail(ZINF_ERR_NOMEM, "engine: out of memory");
        co->rec = n, co->caprec = cap;
    }
    co->rec[co->nrec++] = x;
    return ZINF_OK;
}

// A pair of timed events for one wait of the compute stream, recorded around it.
static zinf_status new_wait(coordinator *co, zinf_device *dev, wait_pair **out) {
    if (co->nwaits == co->capwaits) {
        int cap = co->capwaits ? 2 * co->capwaits : 64;
        wait_pair *n = realloc(co->waits, (size_t)cap * sizeof *n);
        if (!n) return zinf_fail(ZINF_ERR_NOMEM, "engine: out of memory");
        memset(n + co->capwaits, 0, (size_t)(cap - co->capwaits) * sizeof *n);
        co->waits = n, co->capwaits = cap;
    }
    wait_pair *w = &co->waits[co->nwaits++];
    if (!w->before) ZINF_CHECK(zinf_event_create_timed(dev, &w->before));
    if (!w->after) ZINF_CHECK(zinf_event_create_timed(dev, &w->after));
    w->disk = w->update = false;
    *out = w;
    return ZINF_OK;
}

// The compute stream waits for x's gather; when the gather may not have landed yet,
// timed events around the wait say for how long.
static zinf_status wait_landed(zinf_engine *e, int x) {
    coordinator *co = &e->co;
    if (zinf_event_done(co->landed[x])) return zinf_stream_wait_event(e->cs, co->landed[x]);
    wait_pair *w;
    ZINF_CHECK(new_wait(co, e->dev, &w));
    w->disk = ptier_on_disk(e, x);
    ZINF_CHECK(zinf_event_record(w->before, e->cs));
    ZINF_CHECK(zinf_stream_wait_event(e->cs, co->landed[x]));
    return zinf_event_record(w->after, e->cs);
}

// Issue the gathers decided up to x. When x is not updated yet this thread blocks
// until it is; the compute stream runs dry only once it has done what was queued
// before, and the timed events, one on each side of the block with nothing between
// them, measure exactly that.
static zinf_status issue_for_use(zinf_engine *e, int x) {
    if (tier_updated(e, x)) return issue(e, x);
    wait_pair *w;
    ZINF_CHECK(new_wait(&e->co, e->dev, &w));
    w->update = true;
    ZINF_CHECK(zinf_event_record(w->before, e->cs));
    ZINF_CHECK(issue(e, x));
    return zinf_event_record(w->after, e->cs);
}

zinf_status coord_wait_times(zinf_engine *e, double *all, double *disk, double *update) {
    coordinator *co = &e->co;
    *all = *disk = *update = 0;
    for (int i = 0; i < co->nwaits; i++) {
        double s;
        ZINF_CHECK(zinf_event_elapsed(co->waits[i].before, co->waits[i].after, &s));
        *(co->waits[i].update ? update : all) += s;
        if (co->waits[i].disk) *disk += s;
    }
    co->nwaits = 0;
    return ZINF_OK;
}

static zinf_status use(zinf_engine *e, int x, void **params) {
    coordinator *co = &e->co;
    if (x < 0 || !e->lay[x].padded) return ZINF_OK;
    ZINF_CHECK(record_use(co, x));
    co->use_pos[x] = -1;
    if (co->have_trace && co->pos >= 0) {
        if (co->pos < co->ntrace && co->trace[co->pos] == x) {
            co->use_pos[x] = co->pos++;
        } else {
            const char *want = co->pos < co->ntrace ? zinf_model_module(e->m, co->trace[co->pos])->name : "the step";
            ZINF_LOG_INFO("stage 3: execution departed from the recorded module trace at use %d (expected %s, got "
                          "%s); gathering on demand and recording a new trace",
                          co->pos, want, zinf_model_module(e->m, x)->name);
            co->pos = -1;
        }
    }
    if (!co->gathered[x]) ZINF_CHECK(gather(e, x));
    if (co->queued[x]) ZINF_CHECK(issue_for_use(e, x));
    ZINF_CHECK(wait_landed(e, x));
    params[x] = co->gathered[x];
    return ZINF_OK;
}

zinf_status coord_fetch(zinf_engine *e, int mod, void **params) {
    ZINF_CHECK(use(e, mod, params));
    return use(e, zinf_model_module(e->m, mod)->external, params);
}

// Whether x, just used, stays gathered for a use soon enough.
static bool keep(const zinf_engine *e, int x) {
    const coordinator *co = &e->co;
    if ((int64_t)e->lay[x].numel < e->cfg.zero.param_persistence_threshold) return true;
    int p = co->use_pos[x];
    if (p < 0 || co->next_use[p] < 0) return false;
    int64_t dist = 0;
    for (int i = p + 1; i < co->next_use[p]; i++)
        dist += (int64_t)e->lay[co->trace[i]].numel;
    return dist <= e->cfg.zero.max_reuse_distance;
}

static zinf_status release(zinf_engine *e, int x) {
    coordinator *co = &e->co;
    if (x < 0 || !co->gathered[x] || keep(e, x)) return ZINF_OK;
    ZINF_CHECK(engine_free_after(e, co->gathered[x], e->cs));
    co->gathered[x] = NULL;
    co->live -= (int64_t)e->lay[x].padded;
    return ZINF_OK;
}

// After the op is queued, so that waiting for a background update of a module ahead
// never holds back the op at hand.
zinf_status coord_done(zinf_engine *e, int mod) {
    coordinator *co = &e->co;
    ZINF_CHECK(release(e, mod));
    ZINF_CHECK(release(e, zinf_model_module(e->m, mod)->external));
    if (!co->have_trace || co->pos < 0) return ZINF_OK;
    ZINF_CHECK(prefetch(e, co->pos));
    ZINF_CHECK(issue(e, -1));
    return e->pread_buf ? read_ahead(e, co->pos) : ZINF_OK;
}

// The step is over (both streams idle) and the slices changed: drop every gathered
// buffer, and adopt this step's uses as the trace when they differ from it.
zinf_status coord_end_step(zinf_engine *e) {
    coordinator *co = &e->co;
    free_all(e);
    ptier_forget_reads(e);
    bool same = co->have_trace && co->nrec == co->ntrace &&
                memcmp(co->rec, co->trace, (size_t)co->nrec * sizeof *co->rec) == 0;
    if (!same) {
        int *next = malloc((size_t)(co->nrec ? co->nrec : 1) * sizeof *next);
        if (!next) return zinf_fail(ZINF_ERR_NOMEM, "engine: out of memory");
        for (int i = 0; i < co->nrec; i++) {
            next[i] = -1;
            for (int j = i + 1; j < co->nrec && next[i] < 0; j++)
                if (co->rec[j] == co->rec[i]) next[i] = j;
        }
        free(co->trace), free(co->next_use);
        co->trace = co->rec, co->ntrace = co->nrec, co->next_use = next;
        co->rec = NULL, co->caprec = 0;
        co->have_trace = true;
    }
    co->nrec = 0;
    co->pos = 0;
    return ZINF_OK;
}
