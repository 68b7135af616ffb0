// Stages 0-2: the step hands the update to the optimizer tier's thread (offloaded) or
// issues it on the store stream (on the device) and returns, and the next forward runs
// under it. The update stores each module's new 16-bit part (this rank's slice at
// stages 1-2) from the store stream; before a module's first op the compute stream
// waits for that module's update and, at stages 1-2 with more than one rank, for its
// all-gather from the owners' slices on the communication stream. The forward never
// reads a module before its update, so the bits are those of an update inside the step
// (ZeRO-Offload's delayed parameter update overlaps the same work by letting the
// forward read weights one step old).
#include <string.h>

#include "internal.h"

// Each rank updated only its own part (stages 1-2 over several ranks): the others'
// come by all-gather.
static bool gathers(const zinf_engine *e) { return e->partition.split && e->partition.ranks > 1; }

static void add(zinf_engine *e, int x) {
    share *s = &e->params.share;
    if (x < 0 || !e->layout[x].padded || s->pos[x] >= 0) return;
    s->pos[x] = s->n;
    s->order[s->n++] = x;
}

// The order of the all-gathers: the modules by first use in the forward's schedule
// (each op's module, then the one it borrows from), then those it never uses. It
// depends on the model alone, so every rank issues the same collectives in the same
// order whatever the timing.
static void build_order(zinf_engine *e) {
    int nf;
    const zinf_model_op *ops = zinf_model_schedule(e->model, false, &nf);
    for (int i = 0; i < e->module_count; i++)
        e->params.share.pos[i] = -1;
    for (int k = 0; k < nf; k++) {
        add(e, ops[k].module);
        add(e, zinf_model_module(e->model, ops[k].module)->external);
    }
    for (int i = 0; i < e->module_count; i++)
        add(e, i);
}

zinf_status share_create(zinf_engine *e) {
    share *s = &e->params.share;
    if (!e->optim.update->under_forward) return ZINF_OK;
    size_t n = (size_t)e->module_count + 1;
    s->order = malloc(n * sizeof *s->order);
    s->pos = malloc(n * sizeof *s->pos);
    s->waited = calloc(n, sizeof *s->waited);
    s->landed = calloc(n, sizeof *s->landed);
    if (!s->order || !s->pos || !s->waited || !s->landed) return zinf_fail(ZINF_ERR_NOMEM, "engine: out of memory");
    for (int i = 0; gathers(e) && i < e->module_count; i++)
        ZINF_CHECK(zinf_event_create(e->dev, &s->landed[i]));
    build_order(e);
    return ZINF_OK;
}

void share_destroy(zinf_engine *e) {
    share *s = &e->params.share;
    for (int i = 0; s->landed && i < e->module_count; i++)
        zinf_event_destroy(s->landed[i]);
    free(s->order), free(s->pos), free(s->waited), free(s->landed);
    coord_free_waits(e);
}

void share_start(zinf_engine *e) {
    share *s = &e->params.share;
    if (!s->order) return;
    s->active = true;
    s->next = 0;
    memset(s->waited, 0, (size_t)e->module_count * sizeof *s->waited);
}

// All-gather the modules in order from s->next: up to and including upto (blocking
// this thread until each is updated), or with upto < 0 as many as are updated.
// The communication stream first waits for the module's update (offloaded: the
// sub-group event the tier recorded on the store stream after the module's store),
// so the gather reads this rank's new slice; the gather then writes the whole buffer,
// and `landed` tells the compute stream when.
static zinf_status gather_upto(zinf_engine *e, int upto) {
    share *s = &e->params.share;
    while (s->next < s->n) {
        int x = s->order[s->next];
        if (upto < 0 && !e->optim.update->updated(e, x)) break;
        s->next++;
        ZINF_CHECK(e->optim.update->wait(e, x, e->comm_stream));
        size_t sb = e->layout[x].slice * e->elem_size;
        // After a failure the update's bits mean nothing; engine_sync raises it.
        if (!zinf_latch_failed(e->failure))
            ZINF_CHECK(engine_allgather(e, &e->partition.group, (char *)e->params.whole[x] + e->partition.rank * sb,
                                        false, e->params.whole[x], sb));
        ZINF_CHECK(zinf_event_record(s->landed[x], e->comm_stream));
        if (x == upto) break;
    }
    return ZINF_OK;
}

// The compute stream waits for module x's new buffer: its update, or the all-gather's
// landing.
static zinf_status wait_for(zinf_engine *e, int x) {
    share *s = &e->params.share;
    s->waited[x] = true;
    if (!gathers(e)) return e->optim.update->wait(e, x, e->compute_stream);
    if (s->pos[x] >= s->next) ZINF_CHECK(gather_upto(e, x));
    return zinf_stream_wait_event(e->compute_stream, s->landed[x]);
}

static zinf_status use(zinf_engine *e, int x) {
    share *s = &e->params.share;
    if (!s->active || x < 0 || !e->layout[x].padded || s->waited[x]) return ZINF_OK;
    // Whether the compute stream may run dry here: the update has not stored x yet, or
    // x's all-gather is not known to have landed. Then the wait is timed. The device's
    // update always is: its wait never blocks this thread, and the stream's idle time
    // between the two events is how much of the update the forward did not hide.
    bool pending = !e->optim.background || !e->optim.update->updated(e, x) ||
                   (gathers(e) && (s->pos[x] >= s->next || !zinf_event_done(s->landed[x])));
    return pending ? coord_timed_update_wait(e, wait_for, x) : wait_for(e, x);
}

// A background update's new buffers of op's modules are waited for, but for rows the
// update computes ahead for op (update_ops.ahead).
zinf_status share_before_op(zinf_engine *e, const zinf_model_op *op) {
    bool ahead = false;
    if (e->params.share.active) ZINF_CHECK(e->optim.update->ahead(e, op, &ahead));
    if (!ahead) ZINF_CHECK(use(e, op->module));
    return use(e, zinf_model_module(e->model, op->module)->external);
}

zinf_status share_after_op(zinf_engine *e, const zinf_model_op *op) {
    if (!e->params.share.active) return ZINF_OK;
    ZINF_CHECK(e->optim.update->after_op(e, op));
    return gathers(e) ? gather_upto(e, -1) : ZINF_OK;
}

zinf_status share_finish(zinf_engine *e) {
    share *s = &e->params.share;
    if (!s->active) return ZINF_OK;
    for (int i = 0; i < s->n; i++)
        if (!s->waited[s->order[i]]) ZINF_CHECK(wait_for(e, s->order[i]));
    s->active = false;
    return ZINF_OK;
}

// An offloaded update's buffers are all-gathered module by module, above.
zinf_status share_gather_all(zinf_engine *e) {
    if (e->partition.ranks == 1) return ZINF_OK;
    ZINF_CHECK(engine_comm_after_compute(e));
    for (int i = 0; i < e->module_count; i++) {
        const mod_layout *l = &e->layout[i];
        size_t sb = l->slice * e->elem_size;
        if (!sb) continue;
        ZINF_CHECK(engine_allgather(e, &e->partition.group, (char *)e->params.whole[i] + e->partition.rank * sb, false,
                                    e->params.whole[i], sb));
    }
    return ZINF_OK;
}
