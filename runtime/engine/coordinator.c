// The stage-3 parameter coordinator: it carries out offload/'s prefetcher's decisions.
// Before a module runs, its parameters (and those of the module it borrows from, the
// head's wte) are gathered from every rank's slice into a full buffer on the
// communication stream; after, the buffer is released unless the prefetcher keeps it.
// Gathers the prefetcher decides ahead along the trace are issued in decision order, so
// every rank issues the same collectives in the same order; one waits for a background
// update only when its module has not been written yet. Slices on NVMe are read ahead
// along the trace separately, as far as the parameter tier's buffers go: reads are
// local, so that stage may run on timing. A tiled module (memory.tile_bound) is
// outside the prefetcher: the model asks for its tiles inside its op (below).
#include <string.h>

#include "internal.h"

zinf_status coord_prefetcher(const zinf_engine *e, zinf_prefetch **out) {
    size_t n = (size_t)e->module_count;
    size_t *numel = malloc(n * sizeof *numel), *padded = malloc(n * sizeof *padded);
    zinf_status st = numel && padded ? ZINF_OK : zinf_fail(ZINF_ERR_NOMEM, "engine: out of memory");
    for (int i = 0; st == ZINF_OK && i < e->module_count; i++)
        numel[i] = e->layout[i].numel, padded[i] = e->layout[i].tile ? 0 : e->layout[i].padded; // tiles: below
    const zinf_zero_config *z = &e->cfg.zero;
    zinf_prefetch_config pc = {.nmod = e->module_count,
                               .numel = numel,
                               .padded = padded,
                               .names = e->names,
                               .bucket_size = z->prefetch_bucket_size,
                               .max_live = z->max_live_parameters,
                               .persistence_threshold = z->param_persistence_threshold,
                               .max_reuse_distance = z->max_reuse_distance};
    if (st == ZINF_OK) st = zinf_prefetch_create(out, &pc);
    free(numel), free(padded);
    return st;
}

static zinf_status tiles_create(zinf_engine *e);

zinf_status coord_create(zinf_engine *e) {
    coordinator *co = &e->params.coord;
    size_t n = (size_t)e->module_count;
    co->gathered = calloc(n, sizeof *co->gathered);
    co->landed = calloc(n, sizeof *co->landed);
    co->queue = malloc(n * sizeof *co->queue);
    co->queued = calloc(n, sizeof *co->queued);
    co->ahead = malloc(n * sizeof *co->ahead);
    if (!co->gathered || !co->landed || !co->queue || !co->queued || !co->ahead)
        return zinf_fail(ZINF_ERR_NOMEM, "engine: out of memory");
    for (int i = 0; i < e->module_count; i++)
        ZINF_CHECK(zinf_event_create(e->dev, &co->landed[i]));
    ZINF_CHECK(tiles_create(e));
    return coord_prefetcher(e, &co->prefetcher);
}

static void free_all(zinf_engine *e) {
    coordinator *co = &e->params.coord;
    // Gathers decided and never issued (execution departed from the trace) are dropped
    // on every rank alike.
    for (int i = 0; co->queued && i < e->module_count; i++)
        co->queued[i] = false;
    co->qhead = co->qlen = 0;
    for (int i = 0; co->gathered && i < e->module_count; i++) {
        zinf_device_free(e->dev, co->gathered[i]);
        co->gathered[i] = NULL;
    }
    for (int s = 0; s < 2; s++) // a tiled op that failed midway
        zinf_device_free(e->dev, co->tile[s].buf), co->tile[s].buf = NULL;
    zinf_device_free(e->dev, co->grad_tile), co->grad_tile = NULL;
}

void coord_destroy(zinf_engine *e) {
    coordinator *co = &e->params.coord;
    free_all(e);
    for (int i = 0; co->landed && i < e->module_count; i++)
        zinf_event_destroy(co->landed[i]);
    for (int s = 0; s < 2; s++)
        zinf_event_destroy(co->tile[s].landed);
    free(co->tiling);
    coord_free_waits(e);
    free(co->gathered), free(co->landed), free(co->queue), free(co->queued), free(co->ahead);
    zinf_prefetch_destroy(co->prefetcher);
}

// Gather module x, which the prefetcher counts as gathered: its buffer now, its gather
// queued behind those decided before it. issue() sends them in that order, only later
// when a background update has not yet written the module.
static zinf_status gather(zinf_engine *e, int x) {
    coordinator *co = &e->params.coord;
    zinf_status st = engine_alloc(e, e->layout[x].padded * e->elem_size, "gathered parameters", &co->gathered[x]);
    if (st == ZINF_ERR_NOMEM)
        return zinf_fail(st,
                         "%s; lower zero_optimization.stage3_prefetch_bucket_size or stage3_max_live_parameters "
                         "(or reduce_bucket_size), or raise device.memory_limit",
                         zinf_last_error());
    ZINF_CHECK(st);
    co->queue[(co->qhead + co->qlen++) % e->module_count] = x;
    co->queued[x] = true;
    return ZINF_OK;
}

// Whether x's next gather reads its slice from NVMe (not from an hpZ secondary).
static bool from_disk(const zinf_engine *e, int x) {
    return zinf_param_tier_on_disk(e->params.tier, x) && !zeropp_has_secondary(e, x);
}

// Issue decided gathers in order: up to and including module `upto` (waiting for the
// background update where it must), or with upto < 0 as many as are updated.
static zinf_status issue(zinf_engine *e, int upto) {
    coordinator *co = &e->params.coord;
    while (co->qlen) {
        int x = co->queue[co->qhead];
        if (upto < 0 && !e->optim.update->updated(e, x)) break;
        co->qhead = (co->qhead + 1) % e->module_count, co->qlen--;
        co->queued[x] = false;
        // A slice in memory is written by then; one on disk is read after its write-back.
        bool disk = from_disk(e, x);
        ZINF_CHECK(e->optim.update->wait(e, x, disk ? NULL : e->comm_stream));
        ZINF_CHECK(zeropp_gather(e, x, co->gathered[x]));
        ZINF_CHECK(zinf_event_record(co->landed[x], e->comm_stream));
        if (x == upto) break;
    }
    return ZINF_OK;
}

// Gather what the prefetcher decides ahead.
static zinf_status prefetch(zinf_engine *e) {
    coordinator *co = &e->params.coord;
    int n = zinf_prefetch_ahead(co->prefetcher, co->ahead);
    for (int i = 0; i < n; i++)
        ZINF_CHECK(gather(e, co->ahead[i]));
    return ZINF_OK;
}

// Start reading slices on disk along the rest of the trace, as far as the parameter
// tier's pool goes; one buffer stays for a read on demand. Reads are local, so unlike
// gathers they may depend on anything.
static zinf_status read_ahead(zinf_engine *e) {
    coordinator *co = &e->params.coord;
    const int *uses;
    int n = zinf_prefetch_upcoming(co->prefetcher, &uses);
    for (int i = 0; i < n && zinf_param_tier_free_buffers(e->params.tier) > 1; i++) {
        int x = uses[i];
        bool issued = co->gathered[x] && !co->queued[x];
        if (issued || e->layout[x].tile || !from_disk(e, x) || zinf_param_tier_has_read(e->params.tier, x)) continue;
        if (!e->optim.update->updated(e, x)) break; // the background update has not written it yet
        ZINF_CHECK(zinf_param_tier_read(e->params.tier, x));
    }
    return ZINF_OK;
}

// A pair of timed events for one wait of the compute stream, for the caller to record
// around it.
static zinf_status new_wait(zinf_engine *e, wait_pair **out) {
    coordinator *co = &e->params.coord;
    if (co->nwaits == co->capwaits) {
        int cap = co->capwaits ? 2 * co->capwaits : 64;
        wait_pair *n = realloc(co->waits, (size_t)cap * sizeof *n);
        if (!n) return zinf_fail(ZINF_ERR_NOMEM, "engine: out of memory");
        memset(n + co->capwaits, 0, (size_t)(cap - co->capwaits) * sizeof *n);
        co->waits = n, co->capwaits = cap;
    }
    wait_pair *w = &co->waits[co->nwaits++];
    if (!w->before) ZINF_CHECK(zinf_event_create_timed(e->dev, &w->before));
    if (!w->after) ZINF_CHECK(zinf_event_create_timed(e->dev, &w->after));
    w->disk = w->update = false;
    *out = w;
    return ZINF_OK;
}

void coord_free_waits(zinf_engine *e) {
    coordinator *co = &e->params.coord;
    for (int i = 0; i < co->capwaits; i++) {
        zinf_event_destroy(co->waits[i].before);
        zinf_event_destroy(co->waits[i].after);
    }
    free(co->waits);
    co->waits = NULL, co->nwaits = co->capwaits = 0;
}

// The compute stream waits for x's gather; when the gather may not have landed yet,
// timed events around the wait say for how long.
static zinf_status wait_event_timed(zinf_engine *e, zinf_event *landed, bool disk) {
    if (zinf_event_done(landed)) return zinf_stream_wait_event(e->compute_stream, landed);
    wait_pair *w;
    ZINF_CHECK(new_wait(e, &w));
    w->disk = disk;
    ZINF_CHECK(zinf_event_record(w->before, e->compute_stream));
    ZINF_CHECK(zinf_stream_wait_event(e->compute_stream, landed));
    return zinf_event_record(w->after, e->compute_stream);
}

static zinf_status wait_landed(zinf_engine *e, int x) {
    return wait_event_timed(e, e->params.coord.landed[x], from_disk(e, x));
}

zinf_status coord_timed_update_wait(zinf_engine *e, zinf_status (*fn)(zinf_engine *e, int x), int x) {
    wait_pair *w;
    ZINF_CHECK(new_wait(e, &w));
    w->update = true;
    ZINF_CHECK(zinf_event_record(w->before, e->compute_stream));
    ZINF_CHECK(fn(e, x));
    return zinf_event_record(w->after, e->compute_stream);
}

// Issue the gathers decided up to x. When x is not updated yet this thread blocks
// until it is: timed.
static zinf_status issue_for_use(zinf_engine *e, int x) {
    return e->optim.update->updated(e, x) ? issue(e, x) : coord_timed_update_wait(e, issue, x);
}

zinf_status coord_wait_times(zinf_engine *e, double *all, double *disk, double *update) {
    coordinator *co = &e->params.coord;
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
    coordinator *co = &e->params.coord;
    if (x < 0 || !e->layout[x].padded) return ZINF_OK;
    ZINF_CHECK(zinf_prefetch_use(co->prefetcher, x)); // a tiled module's too: its elements set reuse distances
    if (e->layout[x].tile) return ZINF_OK;
    if (!co->gathered[x]) {
        zinf_prefetch_gathered(co->prefetcher, x);
        ZINF_CHECK(gather(e, x));
    }
    if (co->queued[x]) ZINF_CHECK(issue_for_use(e, x));
    ZINF_CHECK(wait_landed(e, x));
    params[x] = co->gathered[x];
    return ZINF_OK;
}

zinf_status coord_fetch(zinf_engine *e, int mod, void **params) {
    ZINF_CHECK(use(e, mod, params));
    return use(e, zinf_model_module(e->model, mod)->external, params);
}

static zinf_status release(zinf_engine *e, int x) {
    coordinator *co = &e->params.coord;
    if (x >= 0 && e->layout[x].tile)
        return zinf_param_tier_release(e->params.tier, x); // its slice read for the op's tiles
    if (x < 0 || !co->gathered[x] || zinf_prefetch_keep(co->prefetcher, x)) return ZINF_OK;
    ZINF_CHECK(engine_free_after(e, co->gathered[x], e->compute_stream));
    co->gathered[x] = NULL;
    zinf_prefetch_released(co->prefetcher, x);
    return ZINF_OK;
}

// After the op is queued, so that waiting for a background update of a module ahead
// never holds back the op at hand.
zinf_status coord_done(zinf_engine *e, int mod) {
    coordinator *co = &e->params.coord;
    ZINF_CHECK(release(e, mod));
    ZINF_CHECK(release(e, zinf_model_module(e->model, mod)->external));
    if (!zinf_prefetch_following(co->prefetcher)) return ZINF_OK;
    ZINF_CHECK(prefetch(e));
    ZINF_CHECK(issue(e, -1));
    return read_ahead(e);
}

// The step is over (both streams idle) and the slices changed: drop every gathered
// buffer and every read, and let the prefetcher adopt this step's uses.
zinf_status coord_end_step(zinf_engine *e) {
    free_all(e);
    zinf_param_tier_forget_reads(e->params.tier);
    return zinf_prefetch_end_step(e->params.coord.prefetcher);
}

// ---- tiled modules ----
// The model asks for a tiled module's tiles inside its op (zinf_tile_source), sweeping
// them once or more. Handing over a tile queues the gather of the one the model names
// next, so that it runs under this one's compute: two tiles are on the device at most.
// A tile waits for its module's background update as a whole module's gather does; a
// slice on disk is read once for the op (at its first tile) and its pool buffer freed
// after the op (release). Tiles are gathered from every rank (no hpZ secondary keeps
// them: a secondary of the whole module is what tiling avoids). Gradient tiles are
// zeroed on the compute stream and go to the buckets as soon as the model is done with
// them.

static zinf_status tile_wait_update(zinf_engine *e, int x) {
    return e->optim.update->wait(e, x, from_disk(e, x) ? NULL : e->comm_stream);
}

// The slot holding tile k of mod, or NULL.
static tile_slot *tile_held(coordinator *co, int mod, int k) {
    for (int s = 0; s < 2; s++)
        if (co->tile[s].buf && co->tile[s].mod == mod && co->tile[s].k == k) return &co->tile[s];
    return NULL;
}

static zinf_status tile_gather(zinf_engine *e, int mod, int k) {
    coordinator *co = &e->params.coord;
    size_t n = zinf_tiling_len(&co->tiling[mod], (size_t)k);
    tile_slot *t = &co->tile[co->tile[0].buf != NULL];
    if (t->buf) return zinf_fail(ZINF_ERR_INTERNAL, "engine: a third tile of %s asked for", e->names[mod]);
    zinf_status st =
        engine_alloc(e, (size_t)e->partition.ranks * n * e->elem_size, "gathered parameter tiles", &t->buf);
    if (st == ZINF_ERR_NOMEM)
        return zinf_fail(st, "%s; lower memory.tile_bound", zinf_last_error());
    ZINF_CHECK(st);
    t->mod = mod, t->k = k;
    // Every rank issues its gathers in one order: the ones decided before this tile go
    // first, though their modules' background updates may hold it back.
    if (co->qlen) ZINF_CHECK(issue_for_use(e, co->queue[(co->qhead + co->qlen - 1) % e->module_count]));
    ZINF_CHECK(e->optim.update->updated(e, mod) ? tile_wait_update(e, mod)
                                                : coord_timed_update_wait(e, tile_wait_update, mod));
    t->disk =
        from_disk(e, mod) && !zinf_param_tier_has_read(e->params.tier, mod); // the op's first tile reads the slice
    ZINF_CHECK(zinf_param_tier_gather_part(e->params.tier, mod, (size_t)k * co->tiling[mod].tile, n, t->buf));
    return zinf_event_record(t->landed, e->comm_stream);
}

static zinf_status tile_get(void *ctx, zinf_stream *s, int mod, int k, int next, bool grad, void **buf) {
    zinf_engine *e = ctx;
    coordinator *co = &e->params.coord;
    size_t bytes = (size_t)e->partition.ranks * zinf_tiling_len(&co->tiling[mod], (size_t)k) * e->elem_size;
    if (grad) {
        ZINF_CHECK(engine_alloc(e, bytes, "gradient tiles", &co->grad_tile));
        *buf = co->grad_tile;
        return zinf_memset_async(s, co->grad_tile, 0, bytes);
    }
    if (!tile_held(co, mod, k)) ZINF_CHECK(tile_gather(e, mod, k));
    tile_slot *t = tile_held(co, mod, k);
    if (next >= 0 && !tile_held(co, mod, next)) ZINF_CHECK(tile_gather(e, mod, next));
    ZINF_CHECK(wait_event_timed(e, t->landed, t->disk));
    *buf = t->buf;
    return ZINF_OK;
}

static zinf_status tile_done(void *ctx, zinf_stream *s, int mod, int k, bool grad) {
    zinf_engine *e = ctx;
    coordinator *co = &e->params.coord;
    tile_slot *t = grad ? NULL : tile_held(co, mod, k);
    if (!grad && !t) return zinf_fail(ZINF_ERR_INTERNAL, "engine: tile %d of %s done but not held", k, e->names[mod]);
    void **buf = grad ? &co->grad_tile : &t->buf;
    if (grad) ZINF_CHECK(reduce_tile_ready(e, mod, k, *buf));
    ZINF_CHECK(engine_free_after(e, *buf, s));
    *buf = NULL;
    return ZINF_OK;
}

static zinf_status tiles_create(zinf_engine *e) {
    coordinator *co = &e->params.coord;
    bool any = false;
    co->tiling = calloc((size_t)e->module_count, sizeof *co->tiling);
    if (!co->tiling) return zinf_fail(ZINF_ERR_NOMEM, "engine: out of memory");
    for (int i = 0; i < e->module_count; i++) {
        co->tiling[i] = tiling_of(e, i);
        any |= e->layout[i].tile > 0;
    }
    if (!any) return ZINF_OK;
    for (int s = 0; s < 2; s++)
        ZINF_CHECK(zinf_event_create(e->dev, &co->tile[s].landed));
    co->src = (zinf_tile_source){.tiling = co->tiling, .get = tile_get, .done = tile_done, .ctx = e};
    return zinf_model_lend_tiles(e->model, &co->src);
}
