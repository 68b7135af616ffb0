// The policies, chosen once at creation: for each part of the engine whose work differs
// with the stage, a table of its operations. The rest of the engine calls through the
// tables and never asks which stage it runs.
#include <string.h>

#include "internal.h"

static zinf_status nothing(zinf_engine *e) {
    (void)e;
    return ZINF_OK;
}

// ---- parameters whole on the device (stages 0-2) ----

static zinf_status whole_create(zinf_engine *e) {
    memcpy(e->params.view, e->params.whole, (size_t)e->module_count * sizeof *e->params.view);
    return share_create(e);
}

static const param_ops replicated = {
    .create = whole_create,
    .destroy = share_destroy,
    .before_op = share_before_op,
    .after_op = share_after_op,
    .settle = share_finish,
    .after_update = nothing, // every rank updated the whole buffers
    .end_step = nothing,
};

static const param_ops partitioned = {
    .create = whole_create,
    .destroy = share_destroy,
    .before_op = share_before_op,
    .after_op = share_after_op,
    .settle = share_finish,
    .after_update = share_gather_all, // each rank updated its own part
    .end_step = nothing,
};

// ---- parameters as slices, gathered for each op (stage 3) ----

static zinf_status sliced_before_op(zinf_engine *e, const zinf_model_op *op) {
    return coord_fetch(e, op->module, e->params.view);
}

static zinf_status sliced_after_op(zinf_engine *e, const zinf_model_op *op) { return coord_done(e, op->module); }

static const param_ops sliced = {
    .create = coord_create,
    .destroy = coord_destroy,
    .before_op = sliced_before_op,
    .after_op = sliced_after_op,
    .settle = nothing, // an op waits for its own gather
    .after_update = nothing, // the update stored each slice where it lives
    .end_step = coord_end_step,
};

void policy_choose(zinf_engine *e) {
    int64_t stage = e->cfg.zero.stage;
    e->partition.split = stage > 0;
    // Each rank needs only its part of the sums at stages 1-3: a reduce-scatter.
    e->grads.scattered = stage >= 1;
    // Stage 1 keeps the whole gradient and reduces it once per step, as the ZeRO paper's
    // P_os and DeepSpeed's stage 1 do: one reduction instead of one per micro-batch, for
    // a whole gradient's memory (stage 2's per-micro-batch reductions need none).
    e->grads.accumulate_locally = stage == 1 && e->cfg.gradient_accumulation_steps > 1;
    e->params.storage = stage == 3 ? &params_sliced : &params_whole;
    e->params.ops = stage == 3 ? &sliced : stage > 0 ? &partitioned : &replicated;
    // The update runs under the next forward at every stage that offloads it (1-3), and
    // on the device where the parameters are whole (0-2); at stage 3 the next step's
    // gathers would read slices the update is still writing, so there it ends in the step.
    e->optim.background = e->cfg.zero.offload_optimizer.device != ZINF_OFFLOAD_NONE;
    e->optim.update = e->optim.background ? &update_offloaded : stage < 3 ? &update_under_forward : &update_in_step;
}
