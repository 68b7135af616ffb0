// A training step, top to bottom: the forward of a micro-batch (each op's parameters
// made available by the parameter policy: gathered at stage 3), its backward (each
// module's gradient widened into buckets and reduced as the backward finishes it), and
// after the last micro-batch the optimizer step: the global gradient norm and overflow
// check, the loss scaler and clipping, the update of this rank's partition with the new
// 16-bit parameters handed on to every rank, and the hand-off to the next step. How the
// update runs is the optimizer policy's (update_ops): on the device inside the step, or
// offloaded, started on the tier's thread for the next forward to run under (at stage 3
// the coordinator's gathers wait for it, at stages 1-2 share.c). With the optimizer on
// cpu, the sub-groups whose gradients the step's last backward makes final are updated
// under that backward on the guess that the step will neither clip nor overflow; the
// step keeps them or has them redone (offload/optim_tier.c).
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

// ---- forward ----

// Make op's modules available (stage 3 gathers them; at stages 1-2 a background
// update's new buffers are waited for) and run it.
static zinf_status run_op(zinf_engine *e, const zinf_model_op *op) {
    ZINF_CHECK(e->params.ops->before_op(e, op));
    ZINF_CHECK(zinf_model_run(e->model, e->compute_stream, op, e->params.view, e->grads.buffers16));
    // After the op is queued, so that gathering ahead never holds back the op at hand.
    return e->params.ops->after_op(e, op);
}

// A table logged a line a message (a table is longer than one log message holds); text
// is cut up.
static void log_lines(char *text) {
    char *rest;
    for (char *line = strtok_r(text, "\n", &rest); line; line = strtok_r(NULL, "\n", &rest))
        ZINF_LOG_INFO("%s", line);
}

// flops_profiler: the ops of step profile_step are timed from its first forward.
static zinf_status profile_start(zinf_engine *e) {
    const zinf_flops_profiler_config *fp = &e->cfg.flops_profiler;
    if (!fp->enabled || e->step.profiling || e->step.steps_taken + 1 != fp->profile_step) return ZINF_OK;
    zinf_sim_params model;
    zinf_device_profile_model(zinf_device_get_caps(e->dev), &e->cfg.device.sim, &model);
    ZINF_CHECK(zinf_device_profile_start(e->dev, &model));
    e->step.profiling = true;
    return ZINF_OK;
}

// At the profiled step's end: every rank stops its profile; rank 0 writes the table with
// the step's time and model FLOPs (6 per parameter and token, and attention's scores and
// weighted sums) to output_file, or logs it.
static zinf_status profile_report(zinf_engine *e, const zinf_step_info *si) {
    if (!e->step.profiling) return ZINF_OK;
    e->step.profiling = false;
    enum { MAX_ROWS = 512 };
    zinf_op_time *rows = malloc(MAX_ROWS * sizeof *rows);
    if (!rows) return zinf_fail(ZINF_ERR_NOMEM, "flops_profiler: out of memory");
    int n;
    zinf_status st = zinf_device_profile_stop(e->dev, rows, MAX_ROWS, &n);
    if (st != ZINF_OK || e->rank != 0) {
        free(rows);
        return st;
    }
    double tokens = (double)e->cfg.train_batch_size * zinf_model_get_params(e->model)->seq_len;
    double flops = tokens * zinf_engine_flops_per_token(e);
    zinf_sim_params model;
    zinf_sim_rates rates;
    zinf_device_profile_model(zinf_device_get_caps(e->dev), &e->cfg.device.sim, &model);
    zinf_sim_rates_of(&model, &rates);
    const char *path = e->cfg.flops_profiler.output_file;
    char *text = NULL;
    size_t len = 0;
    FILE *f = path ? fopen(path, "w") : open_memstream(&text, &len);
    if (!f) {
        free(rows);
        return path ? zinf_fail_errno(errno, "flops_profiler: output_file %s", path)
                    : zinf_fail(ZINF_ERR_NOMEM, "flops_profiler: out of memory");
    }
    fprintf(f, "flops_profiler: step %lld on %s beside a modeled %s: %.3f s, %.0f tokens, %.4g model FLOPs, %.3f "
               "TFLOPS%s\n",
            (long long)si->step, zinf_device_get_caps(e->dev)->name, rates.name, si->step_seconds, tokens, flops,
            flops / si->step_seconds / 1e12, e->sim ? " (modeled time)" : "");
    zinf_op_times_print(f, rows, n, 1, e->cfg.flops_profiler.detailed);
    free(rows);
    if (fclose(f) != 0) {
        free(text);
        return zinf_fail_errno(errno ? errno : EIO, "flops_profiler: writing %s", path ? path : "the profile");
    }
    if (path) {
        ZINF_LOG_INFO("flops_profiler: step %lld's profile written to %s", (long long)si->step, path);
        return ZINF_OK;
    }
    log_lines(text);
    free(text);
    return ZINF_OK;
}

zinf_status zinf_engine_forward(zinf_engine *e, const int32_t *tokens, const int32_t *targets, int n, double *loss) {
    if (!e || !tokens || !targets || !loss)
        return zinf_fail(ZINF_ERR_INVAL, "engine forward: a required argument is NULL");
    ZINF_CHECK(zinf_latch_raise(e->failure));
    if (e->step.micro_batches == 0) {
        e->step.started_at = zinf_clock_s();
        ZINF_CHECK(profile_start(e));
    }
    // The objective is the mean over every micro-batch of every rank; fp16 scales it.
    double scale = e->step.scaler.scale;
    float dloss = (float)(scale / ((double)e->cfg.gradient_accumulation_steps * e->world));
    ZINF_CHECK(zinf_model_set_batch(e->model, e->compute_stream, tokens, targets, n, dloss));
    int nf;
    const zinf_model_op *ops = zinf_model_schedule(e->model, false, &nf);
    for (int i = 0; i < nf; i++)
        ZINF_CHECK(run_op(e, &ops[i]));
    double sum;
    int64_t count;
    ZINF_CHECK(zinf_model_loss(e->model, e->compute_stream, &sum, &count));
    *loss = e->step.last_loss = sum / (double)count;
    e->step.have_forward = true;
    return ZINF_OK;
}

// ---- backward ----

static zinf_optim_hparams hparams(const zinf_engine *e, double lr, float grad_scale) {
    const zinf_optimizer_config *o = &e->cfg.optimizer;
    // DeepSpeed's "Adam" decouples weight decay unless adam_w_mode is false.
    bool decoupled = o->type == ZINF_OPT_ADAMW || o->adam_w_mode;
    return (zinf_optim_hparams){.kind = decoupled ? ZINF_OPTIM_ADAMW : ZINF_OPTIM_ADAM,
                                .lr = lr,
                                .beta1 = o->betas[0],
                                .beta2 = o->betas[1],
                                .eps = o->eps,
                                .weight_decay = o->weight_decay,
                                .bias_correction = o->bias_correction,
                                .step = e->step.steps_applied + 1,
                                .grad_scale = grad_scale};
}

// Whether this step's last backward updates sub-groups under it: with super_offload's
// room, where the gradients are final as that backward adds them (not with MiCS's
// replicas), and not after a step that clipped or overflowed (the next likely does
// too, and a wrong guess costs a second update).
static bool speculates(const zinf_engine *e) {
    return e->cfg.zero.offload_optimizer.speculate_elements > 0 && e->partition.replicas == 1 && !e->step.guess_missed;
}

// The step's hyperparameters if it neither clips nor overflows, given to the optimizer
// tier to update sub-groups with as this backward makes their gradients final. The
// guess is the step's own bits: the same learning rate, step count and loss scale.
static zinf_status speculate(zinf_engine *e) {
    ZINF_CHECK(zinf_optim_tier_cancel(e->optim.tier, NULL)); // a backward without its step
    // The step's last backward: not one past it, whose gradients the last one's
    // speculation may still be reading.
    bool last = e->step.micro_batches + 1 == e->cfg.gradient_accumulation_steps;
    if (!e->grads.norms_on_arrival || !last || !speculates(e)) return ZINF_OK;
    double lr = zinf_lr_at(&e->cfg.optimizer, &e->cfg.scheduler, e->step.steps_applied + 1);
    zinf_optim_hparams h = hparams(e, lr, (float)(1.0 / e->step.scaler.scale));
    return zinf_optim_tier_speculate(e->optim.tier, &h);
}

// Module mod's 16-bit gradient buffer: for the backward about to write it, which sets
// the model's elements (zinf_model_run), with the padding past them zeroed; else all
// zeros, the gradient of a module the backward did not reach.
static zinf_status need_grad(zinf_engine *e, int mod, bool backward) {
    if (mod < 0 || e->grads.buffers16[mod] || !e->layout[mod].padded || e->layout[mod].tile)
        return ZINF_OK; // tiles: coordinator.c
    const mod_layout *l = &e->layout[mod];
    ZINF_CHECK(engine_alloc(e, l->padded * e->elem_size, "gradients", &e->grads.buffers16[mod]));
    size_t from = backward ? l->numel : 0;
    if (from == l->padded) return ZINF_OK;
    return zinf_memset_async(e->compute_stream, (char *)e->grads.buffers16[mod] + from * e->elem_size, 0,
                             (l->padded - from) * e->elem_size);
}

zinf_status zinf_engine_backward(zinf_engine *e) {
    if (!e) return zinf_fail(ZINF_ERR_INVAL, "engine backward: e is NULL");
    if (!e->step.have_forward) return zinf_fail(ZINF_ERR_INVAL, "engine backward: no forward to take the backward of");
    // The gradients are the background update's until it ends. At stages 1-2 the
    // modules the forward did not use are all-gathered now, in order, before the
    // buckets' collectives; the compute stream waits for every new buffer.
    zinf_optim_tier_join(e->optim.tier);
    ZINF_CHECK(zinf_latch_raise(e->failure));
    ZINF_CHECK(e->params.ops->settle(e));
    // A second backward before the step adds to the first's gradients in fp32.
    if (e->step.micro_batches > 0) ZINF_CHECK(states_grads_to_fp32(e));
    // The gradients are final as this backward adds them when it is the step's last
    // (but with MiCS, whose replicas add theirs at the step).
    e->grads.backwards++;
    e->grads.last_backward = e->step.micro_batches + 1 >= e->cfg.gradient_accumulation_steps;
    e->grads.norms_on_arrival = e->grads.last_backward && e->partition.replicas == 1;
    ZINF_CHECK(speculate(e));
    // Not in a step that speculates: that reads through the same buffers, ahead, itself.
    if (!speculates(e)) ZINF_CHECK(zinf_optim_tier_preread(e->optim.tier));
    int nf, nall;
    zinf_model_schedule(e->model, false, &nf);
    const zinf_model_op *ops = zinf_model_schedule(e->model, true, &nall);
    for (int k = nf; k < nall; k++) {
        const zinf_model_op *op = &ops[k];
        e->grads.current_op = k;
        if (op->pass == ZINF_PASS_BACKWARD) {
            ZINF_CHECK(need_grad(e, op->module, true));
            ZINF_CHECK(need_grad(e, zinf_model_module(e->model, op->module)->external, true));
        }
        ZINF_CHECK(run_op(e, op));
        for (int i = 0; i < e->module_count; i++)
            if (e->grads.last_backward_op[i] == k) ZINF_CHECK(reduce_module_ready(e, i));
    }
    e->step.have_forward = false;
    // This backward's additions are queued, the first ones overwriting; at stage 1 only
    // the step's last backward adds (reduce.c).
    bool reduced = !e->grads.accumulate_locally || e->grads.last_backward;
    if (reduced) e->grads.stale = false;
    e->grads.accumulating = !reduced;
    e->step.micro_batches++;
    e->step.loss_sum += e->step.last_loss;
    return ZINF_OK;
}

// ---- the optimizer step ----

// Squared norm and inf/NaN flag of every (module, rank slice) piece, summed module by
// module and rank by rank: the same pieces in the same order whatever the stage, so
// the clip coefficient (and so the update) is the same bits at every stage. Most
// pieces' norms were taken as their gradients became final in the last backward: those
// on the device (reduce.c), those in host memory as they arrived (states.c). The rest
// are taken here, alike.
static zinf_status grad_stats(zinf_engine *e, double *sumsq, bool *nonfinite) {
    size_t W = (size_t)e->partition.ranks, np = (size_t)e->module_count * W;
    bool dev = e->optim.device_numel > 0; // some modules' gradients are on the device
    double *h = calloc(4 * np, sizeof *h), *from_dev = h + 2 * np;
    // The device's pieces, summed in one zinf_sumsq_many; the pieces whose norms come
    // from device_norms (a piece the backward did not reach stays zero).
    zinf_sumsq_piece *pieces = malloc(np * sizeof *pieces);
    bool *on_device = calloc(np, sizeof *on_device);
    int npieces = 0;
    zinf_dtype pieces_dt = grads_read_held(e) ? e->dtype : ZINF_DTYPE_F32;
    if (!h || !pieces || !on_device) {
        free(h), free(pieces), free(on_device);
        return zinf_fail(ZINF_ERR_NOMEM, "engine step: out of memory");
    }
    // The device's pieces first, so that they run while the host takes the rest.
    for (int i = 0; i < e->module_count; i++) {
        const mod_layout *l = &e->layout[i];
        if (!states_on_device(e, i)) continue;
        // Held: one rank, the whole module (no buffer: the backward did not reach it).
        if (grads_read_held(e)) {
            on_device[i] = e->grads.buffers16[i] != NULL;
            if (e->grads.buffers16[i] && e->grads.norms_taken[i] != e->grads.backwards)
                pieces[npieces++] = (zinf_sumsq_piece){
                    .x = e->grads.buffers16[i], .n = l->padded, .out = e->grads.device_norms + 2 * i};
            continue;
        }
        for (size_t r = 0; l->padded && r < W; r++)
            if (partition_holds(e, r)) {
                on_device[i * W + r] = true;
                if (e->grads.norms_taken[i] != e->grads.backwards)
                    pieces[npieces++] = states_device_grad_piece(e, i, r);
            }
    }
    zinf_status st = zinf_sumsq_many(e->compute_stream, pieces_dt, pieces, npieces);
    free(pieces);
    for (int i = 0; st == ZINF_OK && i < e->module_count; i++) {
        if (states_on_device(e, i)) continue;
        if (e->grads.norms_taken[i] == e->grads.backwards)
            memcpy(h + 2 * i * W, e->grads.host_norms + 2 * i * W, 2 * W * sizeof *h);
        else
            st = states_grad_norms(e, i, h);
    }
    if (st == ZINF_OK && dev)
        st = zinf_copy_async(e->compute_stream, from_dev, e->grads.device_norms, 2 * np * sizeof *h, ZINF_COPY_D2H);
    if (st == ZINF_OK) st = zinf_stream_sync(e->compute_stream);
    for (size_t k = 0; st == ZINF_OK && k < np; k++)
        if (on_device[k]) memcpy(h + 2 * k, from_dev + 2 * k, 2 * sizeof *h);
    free(on_device);
    // Each piece lives on one rank of the partition (or on all, at stage 0); adding the
    // others' zeros keeps its bits. MiCS's replicas hold the same pieces: each shard
    // group sums its own.
    if (st == ZINF_OK && e->partition.split && W > 1) st = zinf_comm_allreduce_f64(e->partition.group.comm, h, 2 * np);
    *sumsq = 0, *nonfinite = false;
    for (size_t k = 0; st == ZINF_OK && !e->sim && k < np; k++) { // a simulated device's values mean nothing
        *sumsq += h[2 * k];
        if (h[2 * k + 1] != 0) *nonfinite = true;
    }
    free(h);
    return st;
}

// Module i's part of the device's optimizer states from element `from` of it on: its
// held 16-bit gradient grad16 (NULL: the fp32 gradients), and the new 16-bit copy
// written to out (NULL: none, the parameters are the fp32 master's).
static zinf_optim_tile module_tile(const zinf_engine *e, int i, const void *grad16, void *out, size_t from) {
    const mod_layout *l = &e->layout[i];
    size_t at = l->part_off + from;
    return (zinf_optim_tile){.param = e->optim.master + at,
                             .exp_avg = e->optim.exp_avg + at,
                             .exp_avg_sq = e->optim.exp_avg_sq + at,
                             .grad = grad16 ? (const char *)grad16 + from * e->elem_size
                                            : (const void *)(e->optim.grads32 + at),
                             .grad_dtype = grad16 ? e->dtype : ZINF_DTYPE_F32,
                             .out = out ? (char *)out + from * e->elem_size : NULL,
                             .out_dtype = out ? e->dtype : ZINF_DTYPE_NONE,
                             .n = l->part_n - from};
}

// The optimizer on the device, on stream s after the backward: every module's part, or
// with offload_optimizer.ratio below 1 those of the first sub-groups; in the order of
// `order` (n modules) where given, each module's `updated` event recorded after it.
static zinf_status update(zinf_engine *e, const zinf_optim_hparams *h, zinf_stream *s, const int *order, int n) {
    bool f32 = e->dtype == ZINF_DTYPE_F32;
    // Held gradients: the backward's own (one rank: the part is the whole module), zeros
    // where the backward did not reach.
    bool held = grads_read_held(e);
    n = order ? n : e->module_count;
    for (int k = 0; held && k < n; k++) {
        int i = order ? order[k] : k;
        if (e->layout[i].padded && states_on_device(e, i)) ZINF_CHECK(need_grad(e, i, false));
    }
    if (s != e->compute_stream) {
        ZINF_CHECK(zinf_event_record(e->compute_mark, e->compute_stream));
        ZINF_CHECK(zinf_stream_wait_event(s, e->compute_mark));
    }
    for (int k = 0; k < n; k++) {
        int i = order ? order[k] : k;
        const mod_layout *l = &e->layout[i];
        if (!l->padded || !states_on_device(e, i)) continue;
        // The kernel writes the 16-bit part in place where it lives on the device, else
        // into scratch the parameter tier takes it from.
        void *dst = e->params.storage->device_part(e, i), *tmp = NULL;
        if (!dst && !f32) ZINF_CHECK(engine_alloc(e, l->part_n * e->elem_size, "16-bit parameters", &tmp));
        zinf_optim_tile t = module_tile(e, i, held ? e->grads.buffers16[i] : NULL, f32 ? NULL : dst ? dst : tmp, 0);
        ZINF_CHECK(zinf_device_optim(s, h, &t));
        // The parameters' stores may go on a stream of their own (a parameter tier's, or
        // at stages 1-2 an offloaded optimizer's with a ratio below 1): after the kernel.
        zinf_stream *ps = params_stream(e);
        if ((f32 || !dst) && ps != s) {
            ZINF_CHECK(zinf_event_record(e->compute_mark, s));
            ZINF_CHECK(zinf_stream_wait_event(ps, e->compute_mark));
        }
        if (f32 || !dst) ZINF_CHECK(e->params.storage->store(e, i, f32 ? t.param : tmp, false));
        ZINF_CHECK(engine_free_after(e, tmp, s));
        if (order) ZINF_CHECK(zinf_event_record(e->optim.updated[i], ps));
    }
    return ZINF_OK;
}

// Where the time since the last step went (both streams idle).
static zinf_status step_times(zinf_engine *e, zinf_step_info *info) {
    // Timed waits are recorded at stage 3 and with a background update; none otherwise.
    ZINF_CHECK(coord_wait_times(e, &info->wait_params_s, &info->wait_params_nvme_s, &info->wait_optim_s));
    zinf_optim_tier_times tt;
    zinf_optim_tier_take_times(e->optim.tier, &tt);
    info->optim_s = 1e-9 * (double)tt.update_ns;
    info->optim_io_wait_s = 1e-9 * (double)tt.io_wait_ns;
    info->optim_backward_s = 1e-9 * (double)tt.speculated_ns;
    info->optim_speculated = tt.speculated;
    zinf_comm_bytes cb;
    zinf_comm_get_bytes(e->comm, &cb);
    info->comm_bytes_intra = cb.intra - e->step.comm_seen.intra;
    info->comm_bytes_inter = cb.inter - e->step.comm_seen.inter;
    e->step.comm_seen = cb;
    zinf_device_busy busy;
    zinf_device_get_busy(e->dev, &busy);
    info->simulated = e->sim;
    info->device_compute_s = busy.compute_s - e->step.busy_seen.compute_s;
    info->pcie_h2d_s = busy.h2d_s - e->step.busy_seen.h2d_s;
    info->pcie_d2h_s = busy.d2h_s - e->step.busy_seen.d2h_s;
    info->gpu_link_s = busy.link_s - e->step.busy_seen.link_s;
    e->step.busy_seen = busy;
    if (e->params.tier) {
        zinf_param_tier_stats ps;
        zinf_param_tier_get_stats(e->params.tier, &ps);
        info->param_handoff_bytes = ps.handoff_bytes - e->step.handoff_seen;
        e->step.handoff_seen = ps.handoff_bytes;
    }
    if (!e->aio) return ZINF_OK;
    zinf_aio_stats now = tt.aio;
    if (!tt.have_aio) zinf_aio_get_stats(e->aio, &now);
    // The optimizer's IO counts with its update: that update's early reads and
    // speculation ran under the step before, the next one's under this step's backward.
    info->nvme_read_bytes =
        (int64_t)(now.read_bytes - e->step.aio_seen.read_bytes) - tt.issued_io_bytes[0] + tt.update_io_bytes[0];
    info->nvme_write_bytes =
        (int64_t)(now.write_bytes - e->step.aio_seen.write_bytes) - tt.issued_io_bytes[1] + tt.update_io_bytes[1];
    info->nvme_read_s = 1e-9 * (double)(now.read_busy_ns - e->step.aio_seen.read_busy_ns);
    info->nvme_write_s = 1e-9 * (double)(now.write_busy_ns - e->step.aio_seen.write_busy_ns);
    e->step.aio_seen = now;
    return ZINF_OK;
}

// The step's figures to the monitors (rank 0), stepped by the samples trained so far and
// named as DeepSpeed's own where it has them (train_loss, lr, loss_scale). A simulated
// device's loss and norm mean nothing, and a skipped step's norm is not finite: left out.
static zinf_status monitor_step(zinf_engine *e, const zinf_step_info *si) {
    if (!e->monitor) return ZINF_OK;
    double tokens = (double)e->cfg.train_batch_size * zinf_model_get_params(e->model)->seq_len;
    zinf_monitor_event ev[12];
    int n = 0;
    if (!si->simulated) ev[n++] = (zinf_monitor_event){"Train/Samples/train_loss", si->loss};
    if (!si->simulated && isfinite(si->grad_norm))
        ev[n++] = (zinf_monitor_event){"Train/Samples/grad_norm", si->grad_norm};
    ev[n++] = (zinf_monitor_event){"Train/Samples/lr", si->lr};
    ev[n++] = (zinf_monitor_event){"Train/Samples/loss_scale", si->loss_scale};
    ev[n++] = (zinf_monitor_event){"Train/Samples/step_seconds", si->step_seconds};
    ev[n++] = (zinf_monitor_event){"Train/Samples/tokens_per_s", tokens / si->step_seconds};
    ev[n++] = (zinf_monitor_event){"Train/Samples/wait_params_s", si->wait_params_s};
    ev[n++] = (zinf_monitor_event){"Train/Samples/wait_optim_s", si->wait_optim_s};
    ev[n++] = (zinf_monitor_event){"Train/Samples/optim_s", si->optim_s};
    ev[n++] = (zinf_monitor_event){"Train/Samples/optim_backward_s", si->optim_backward_s};
    return zinf_monitor_write(e->monitor, si->step * e->cfg.train_batch_size, ev, n);
}

void engine_log_comms(zinf_engine *e, const char *when) {
    char *table;
    if (e->rank != 0 || zinf_comm_log_summary(e->comm, &table) != ZINF_OK) return;
    ZINF_LOG_INFO("comms_logger: the collectives of this rank so far (%s):%s", when,
                  table[0] ? "" : " none (one rank: nothing moves)");
    log_lines(table);
    free(table);
}

static zinf_status finish(zinf_engine *e) {
    e->step.steps_taken++;
    e->step.micro_batches = 0;
    e->step.loss_sum = 0;
    return ZINF_OK;
}

// The update inside the step, h NULL when the step is skipped: the new parameters
// handed to every rank (params.ops after_update), then the step's figures, the gradients
// cleared and the step's end for the parameters.
static zinf_status run_in_step(zinf_engine *e, const zinf_optim_hparams *h, zinf_step_info *info) {
    if (h) {
        ZINF_CHECK(update(e, h, e->compute_stream, NULL, 0));
        ZINF_CHECK(e->params.ops->after_update(e));
    }
    ZINF_CHECK(engine_sync(e)); // the 16-bit parameters are where they live
    ZINF_CHECK(step_times(e, info));
    ZINF_CHECK(states_zero_grads(e, e->compute_stream));
    return e->params.ops->end_step(e);
}

// Whether module x's update can wait for its first use, the forward's first op: that op
// reads only some rows of x (the lookup), which the compute stream can compute ahead of
// the update from x's states and gradient on the device, into its 16-bit buffer there
// (the whole module this rank's part). The gradient must outlive the step: a held 16-bit
// one is kept aside for it (run_under_forward), the fp32 gradients stay until the next
// backward overwrites them, after its settle has issued the update; but held gradients
// beside fp32 ones a hand made (states_grads_to_fp32) are both freed with the step.
static bool defers(zinf_engine *e, int x) {
    int nf;
    const zinf_model_op *first = zinf_model_schedule(e->model, false, &nf);
    zinf_rows_read rows[ZINF_ROWS_READ_MAX];
    const mod_layout *l = &e->layout[x];
    return nf > 0 && first->module == x && (grads_read_held(e) || !e->grads.held) && e->dtype != ZINF_DTYPE_F32 &&
           states_on_device(e, x) && l->part_n == l->padded && e->params.storage->device_part(e, x) &&
           zinf_model_rows_read(e->model, first, rows) > 0;
}

// On the device where the parameters are whole (stages 0-2): the update is issued on
// the store stream, module by module in the order the next forward first uses them, and
// the step returns. Each module's first op waits for its update (share.c; at stages 1-2
// over several ranks for the all-gather after it), so the forward runs beside the
// updates of the modules it has not reached yet: the memory-bound update beside the
// products. The first module's update would hold back the forward's first op, the
// lookup: where it can, that op gets the rows it reads computed ahead (rows_ahead) and
// the module's update is issued after it (update_deferred). The bits are those of the
// update inside the step.
static zinf_status run_under_forward(zinf_engine *e, const zinf_optim_hparams *h, zinf_step_info *info) {
    if (!h) return run_in_step(e, NULL, info);
    const share *sh = &e->params.share;
    int defer = sh->n > 0 && defers(e, sh->order[0]);
    ZINF_CHECK(update(e, h, e->params.store_stream, sh->order + defer, sh->n - defer));
    if (defer) {
        int x = sh->order[0];
        e->optim.deferred = x, e->optim.deferred_h = *h;
        if (e->grads.held) { // kept from states_zero_grads
            ZINF_CHECK(need_grad(e, x, false));
            e->optim.deferred_grad = e->grads.buffers16[x], e->grads.buffers16[x] = NULL;
        }
    }
    ZINF_CHECK(step_times(e, info));
    ZINF_CHECK(states_zero_grads(e, e->params.store_stream));
    ZINF_CHECK(e->params.ops->end_step(e));
    share_start(e);
    return ZINF_OK;
}

// An offloaded update starts on the tier's thread and the next forward starts now; each
// module waits for its sub-group (stage 3: its gather; stages 1-2: its store and
// all-gather, share.c). This step reports the last update, which ran under this step's
// forward, and the sub-groups updated under this step's backward; the step's reads are
// forgotten before the update hands its slices over. A skipped step restores the
// sub-groups updated under its backward.
static zinf_status run_in_background(zinf_engine *e, const zinf_optim_hparams *h, zinf_step_info *info) {
    zinf_optim_tier_stop_speculating(e->optim.tier, h);
    if (!h) {
        int restored;
        ZINF_CHECK(zinf_optim_tier_cancel(e->optim.tier, &restored));
        ZINF_CHECK(run_in_step(e, NULL, info));
        info->optim_rolled_back = restored;
        return ZINF_OK;
    }
    ZINF_CHECK(step_times(e, info));
    ZINF_CHECK(e->params.ops->end_step(e));
    // offload_optimizer.ratio below 1: the first sub-groups are updated on the device
    // first, their new slices stored before the tier's thread stores any.
    if (e->optim.device_numel) {
        ZINF_CHECK(update(e, h, e->compute_stream, NULL, 0));
        ZINF_CHECK(engine_wait_streams(e));
    }
    ZINF_CHECK(zinf_optim_tier_start(e->optim.tier, h, &info->optim_rolled_back));
    // The update reads them; the next backward overwrites them.
    ZINF_CHECK(states_zero_grads(e, e->compute_stream));
    share_start(e);
    return ZINF_OK;
}

// An update inside the step leaves nothing to wait for; the device's under the forward
// is all issued when the step returns, so waiting for a module never blocks this thread.
static bool always_updated(zinf_engine *e, int x) {
    (void)e, (void)x;
    return true;
}

static zinf_status nothing_to_wait(zinf_engine *e, int x, zinf_stream *s) {
    (void)e, (void)x, (void)s;
    return ZINF_OK;
}

// The deferred module's update, on the store stream after the compute stream's work so
// far (the rows computed ahead and the op that read them); a held gradient freed after.
static zinf_status update_deferred(zinf_engine *e) {
    int x = e->optim.deferred;
    if (x < 0) return ZINF_OK;
    e->optim.deferred = -1;
    void *held = e->optim.deferred_grad;
    e->optim.deferred_grad = NULL;
    if (held) e->grads.buffers16[x] = held; // update() reads a held gradient from there
    zinf_status st = update(e, &e->optim.deferred_h, e->params.store_stream, &x, 1);
    if (held) e->grads.buffers16[x] = NULL;
    zinf_status freed = engine_free_after(e, held, e->params.store_stream);
    return st != ZINF_OK ? st : freed;
}

// For each table op reads rows of, the new 16-bit weights of those rows, the bits the
// update gives them: the update has not touched the module's states yet.
static zinf_status rows_ahead(zinf_engine *e, const zinf_model_op *op, bool *ahead) {
    int x = e->optim.deferred;
    zinf_rows_read r[ZINF_ROWS_READ_MAX];
    int n = op->module == x ? zinf_model_rows_read(e->model, op, r) : 0;
    *ahead = n > 0;
    for (int k = 0; k < n; k++) {
        zinf_optim_tile t =
            module_tile(e, x, e->optim.deferred_grad, e->params.storage->device_part(e, x), r[k].offset);
        ZINF_CHECK(
            zinf_device_optim_rows(e->compute_stream, &e->optim.deferred_h, &t, r[k].rows, r[k].count, r[k].row_len));
    }
    return ZINF_OK;
}

static zinf_status issue_deferred(zinf_engine *e, const zinf_model_op *op) {
    return op->module == e->optim.deferred ? update_deferred(e) : ZINF_OK;
}

// A deferred update is issued when anything else waits for its module.
static zinf_status wait_on_device(zinf_engine *e, int x, zinf_stream *s) {
    if (x == e->optim.deferred) ZINF_CHECK(update_deferred(e));
    return s ? zinf_stream_wait_event(s, e->optim.updated[x]) : zinf_event_sync(e->optim.updated[x]);
}

static zinf_status nothing_ahead(zinf_engine *e, const zinf_model_op *op, bool *ahead) {
    (void)e, (void)op;
    *ahead = false;
    return ZINF_OK;
}

static zinf_status nothing_after(zinf_engine *e, const zinf_model_op *op) {
    (void)e, (void)op;
    return ZINF_OK;
}

static bool tier_updated(zinf_engine *e, int x) { return zinf_optim_tier_updated(e->optim.tier, x); }

static zinf_status wait_for_tier(zinf_engine *e, int x, zinf_stream *s) {
    return zinf_optim_tier_wait_updated(e->optim.tier, x, s);
}

const update_ops update_in_step = {.run = run_in_step,
                                   .updated = always_updated,
                                   .wait = nothing_to_wait,
                                   .ahead = nothing_ahead,
                                   .after_op = nothing_after};
const update_ops update_under_forward = {.run = run_under_forward,
                                         .updated = always_updated,
                                         .wait = wait_on_device,
                                         .ahead = rows_ahead,
                                         .after_op = issue_deferred,
                                         .under_forward = true};
const update_ops update_offloaded = {.run = run_in_background,
                                     .updated = tier_updated,
                                     .wait = wait_for_tier,
                                     .ahead = nothing_ahead,
                                     .after_op = nothing_after,
                                     .under_forward = true};

zinf_status zinf_engine_step(zinf_engine *e, zinf_step_info *info) {
    if (!e || !info) return zinf_fail(ZINF_ERR_INVAL, "engine step: e and info are required");
    if (e->step.micro_batches == 0) return zinf_fail(ZINF_ERR_INVAL, "engine step: no backward since the last step");
    if (e->grads.accumulating)
        return zinf_fail(ZINF_ERR_INVAL,
                         "engine step: after %d of gradient_accumulation_steps (%lld) backward passes; ZeRO stage 1 "
                         "reduces the gradients in the step's last, so run them all first",
                         e->step.micro_batches, (long long)e->cfg.gradient_accumulation_steps);
    ZINF_CHECK(engine_sync(e)); // every bucket reduced (and the last background update done)
    ZINF_CHECK(mics_reduce_grads(e));
    double sumsq = 0;
    bool nonfinite = false;
    ZINF_CHECK(grad_stats(e, &sumsq, &nonfinite));
    double lm[2] = {e->step.loss_sum, (double)e->step.micro_batches};
    if (e->world > 1) ZINF_CHECK(zinf_comm_allreduce_f64(e->comm, lm, 2));

    double scale = e->step.scaler.scale;
    *info = (zinf_step_info){
        .step = e->step.steps_taken + 1, .loss = lm[0] / lm[1], .loss_scale = scale, .grad_norm = sqrt(sumsq) / scale};
    info->lr = zinf_lr_at(&e->cfg.optimizer, &e->cfg.scheduler, e->step.steps_applied + 1);
    // A gradient with inf or NaN skips the step, as DeepSpeed's ZeRO optimizers do in
    // every precision; under fp16 the dynamic scaler also lowers the scale.
    ZINF_CHECK(zinf_loss_scaler_update(&e->step.scaler, nonfinite, &info->skipped));
    zinf_optim_hparams h;
    e->step.guess_missed = info->skipped;
    if (!info->skipped) {
        // DeepSpeed's clipping: one multiplier unscales and clips, applied when
        // (norm + 1e-6) / gradient_clipping exceeds 1.
        double combined = scale, clip = e->cfg.gradient_clipping;
        if (clip > 0 && (info->grad_norm + 1e-6) / clip > 1) combined = scale * (info->grad_norm + 1e-6) / clip;
        e->step.guess_missed = combined != scale;
        h = hparams(e, info->lr, (float)(1.0 / combined));
        e->step.steps_applied++;
        zeropp_invalidate(e); // before the next forward's gathers, which the update may run under
    }
    ZINF_CHECK(e->optim.update->run(e, info->skipped ? NULL : &h, info));
    info->step_seconds = zinf_clock_s() - e->step.started_at;
    ZINF_CHECK(monitor_step(e, info));
    ZINF_CHECK(profile_report(e, info));
    if (e->comms_logged && info->step % e->cfg.steps_per_print == 0) {
        char when[48];
        snprintf(when, sizeof when, "step %lld", (long long)info->step);
        engine_log_comms(e, when);
    }
    return finish(e);
}

double zinf_engine_flops_per_token(const zinf_engine *e) {
    const zinf_model_params *mp = zinf_model_get_params(e->model);
    const zinf_model_shape *s = &mp->shape;
    return 6.0 * (double)e->model_numel + 12.0 * s->n_layer * (double)mp->seq_len * s->n_head * s->head_dim;
}

double zinf_engine_loss_scale(const zinf_engine *e) { return e ? e->step.scaler.scale : 1.0; }
