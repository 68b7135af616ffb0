// The plan's time: what a step takes on a GPU the sim device models, with a host whose
// NVMe drives and CPU Adam run at given rates. The model's kernels are timed by running
// one micro-batch's forward and backward on a sim device in virtual time (every kernel
// the engine would launch, at once and without memory); the engine's own kernels (the
// gradients' widening into buckets, stage 3's gathers, the device optimizer), the PCIe
// and NVMe bytes and the collectives come from the plan. The step overlaps them as the
// engine does (docs/performance.md, "The planner").
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "zinf_half.h"

// Values of a trained model's magnitude in every parameter buffer, one pattern of
// PATTERN_ELEMENTS copied over and over (the backward writes the gradient buffers). A
// card's products run faster on zeros, which draw less power: over zeros,
// Llama-3.2-1B's products took 70 ms of a pass that took them 85 ms in training on an
// H200 (2026-11-27).
enum { PATTERN_ELEMENTS = 1 << 20 };

static zinf_status fill_parameters(zinf_device *dev, zinf_stream *s, zinf_dtype dt, zinf_model *m, void **params,
                                   int nmod) {
    const size_t es = zinf_dtype_size(dt);
    void *host = malloc(PATTERN_ELEMENTS * es), *pattern = NULL;
    if (!host) return zinf_fail(ZINF_ERR_NOMEM, "model pass: out of host memory");
    uint32_t state = 1;
    for (size_t i = 0; i < PATTERN_ELEMENTS; i++) {
        state = state * 1664525u + 1013904223u; // uniform in [-0.05, 0.05)
        dt_store(host, dt, i, 0.1f * ((float)(state >> 8) / (float)(1u << 24) - 0.5f));
    }
    zinf_status st = zinf_device_alloc(dev, PATTERN_ELEMENTS * es, "model pass pattern", &pattern);
    if (st == ZINF_OK) st = zinf_copy_async(s, pattern, host, PATTERN_ELEMENTS * es, ZINF_COPY_H2D);
    for (int i = 0; st == ZINF_OK && i < nmod; i++)
        for (size_t done = 0, n = zinf_model_module(m, i)->numel; st == ZINF_OK && done < n; done += PATTERN_ELEMENTS) {
            size_t part = n - done < PATTERN_ELEMENTS ? n - done : PATTERN_ELEMENTS;
            st = zinf_copy_async(s, (char *)params[i] + done * es, pattern, part * es, ZINF_COPY_D2D);
        }
    if (st == ZINF_OK) st = zinf_stream_sync(s); // host is read until the copy is done
    zinf_device_free(dev, pattern);
    free(host);
    return st;
}

// zinf_model_pass, and with op_s (NULL: not wanted) each op's compute seconds in the last
// pass (the busy time it adds: a sim device's modeled kernels), in a new array of the
// schedule's length.
static zinf_status model_pass(const zinf_config *cfg, zinf_device *dev, int passes, zinf_pass_time *out,
                              double **op_s) {
    if (!cfg || !dev || passes < 1 || !out)
        return zinf_fail(ZINF_ERR_INVAL, "model pass: a config, a device, passes >= 1 and out are required");
    *out = (zinf_pass_time){0};
    if (op_s) *op_s = NULL;
    zinf_engine e0; // the settings creation derives from cfg
    engine_settings(&e0, cfg);
    zinf_dtype dt = e0.dtype;
    // The output layer's chunk as one rank on dev would choose it.
    const zinf_device_caps *caps = zinf_device_get_caps(dev);
    zinf_plan_target one = {
        .world = 1, .backend = caps->backend, .device_capacity = (int64_t)caps->capacity, .local_ranks = 1};
    int64_t chunk;
    ZINF_CHECK(zinf_host_mem_probe(&one.host));
    ZINF_CHECK(engine_choose_head_chunk(&e0.cfg, &one, &chunk));
    zinf_model_params mp;
    ZINF_CHECK(engine_model_params(&e0.cfg, dt, &mp));
    // Checkpoints in host memory move on the model's own stream, beside the kernels
    // timed here; the plan counts their bytes over PCIe.
    mp.host_checkpoints = false;
    zinf_stream *s = NULL;
    zinf_event *t0 = NULL, *t1 = NULL;
    zinf_model *m = NULL;
    int nmod = 0;
    void **bufs = NULL;
    int32_t *tok = NULL;
    zinf_status st = zinf_stream_create(dev, &s);
    if (st == ZINF_OK) st = zinf_event_create_timed(dev, &t0);
    if (st == ZINF_OK) st = zinf_event_create_timed(dev, &t1);
    if (st == ZINF_OK) st = zinf_model_create(&m, dev, &mp);
    if (st == ZINF_OK) {
        nmod = zinf_model_module_count(m);
        bufs = calloc(2 * (size_t)nmod, sizeof *bufs); // parameters, then gradients
        tok = calloc((size_t)mp.batch * (size_t)mp.seq_len, sizeof *tok);
        if (!bufs || !tok) st = zinf_fail(ZINF_ERR_NOMEM, "model pass: out of host memory");
        // Ids spread over the vocabulary as text's are (the embedding's backward sums
        // the rows of each id: one id everywhere would be its slowest case).
        for (size_t i = 0; tok && i < (size_t)mp.batch * (size_t)mp.seq_len; i++)
            tok[i] = (int32_t)((i * 2654435761u) % (uint32_t)mp.shape.vocab_size);
    }
    for (int i = 0; st == ZINF_OK && i < 2 * nmod; i++) {
        size_t n = zinf_model_module(m, i % nmod)->numel * zinf_dtype_size(dt);
        if (n) st = zinf_device_alloc(dev, n, "model pass", &bufs[i]);
    }
    if (st == ZINF_OK) st = fill_parameters(dev, s, dt, m, bufs, nmod);
    if (st == ZINF_OK) st = zinf_model_set_batch(m, s, tok, tok, mp.batch, 1.0f);
    int nops = 0;
    const zinf_model_op *ops = st == ZINF_OK ? zinf_model_schedule(m, true, &nops) : NULL;
    if (st == ZINF_OK && op_s && !(*op_s = calloc((size_t)nops + 1, sizeof **op_s)))
        st = zinf_fail(ZINF_ERR_NOMEM, "model pass: out of host memory");
    zinf_device_busy b0 = {0}, b1 = {0};
    for (int pass = 0; st == ZINF_OK && pass < passes; pass++) {
        bool last = pass == passes - 1;
        if (last && (st = zinf_stream_sync(s)) == ZINF_OK) zinf_device_get_busy(dev, &b0);
        if (st == ZINF_OK) st = zinf_event_record(t0, s);
        double issued_from = zinf_clock_s();
        zinf_device_busy before = b0, after;
        for (int k = 0; st == ZINF_OK && k < nops; k++) {
            st = zinf_model_run(m, s, &ops[k], bufs, bufs + nmod);
            if (st != ZINF_OK || !last || !op_s || (st = zinf_stream_sync(s)) != ZINF_OK) continue;
            zinf_device_get_busy(dev, &after);
            (*op_s)[k] = after.compute_s - before.compute_s, before = after;
        }
        if (st == ZINF_OK) st = zinf_event_record(t1, s);
        out->issue_s = zinf_clock_s() - issued_from;
    }
    if (st == ZINF_OK) st = zinf_stream_sync(s);
    if (st == ZINF_OK) st = zinf_event_elapsed(t0, t1, &out->seconds);
    zinf_device_get_busy(dev, &b1);
    out->busy_s = b1.compute_s - b0.compute_s;
    for (int i = 0; bufs && i < 2 * nmod; i++)
        zinf_device_free(dev, bufs[i]);
    free(bufs), free(tok);
    zinf_model_destroy(m);
    zinf_event_destroy(t0), zinf_event_destroy(t1);
    zinf_stream_destroy(s);
    if (st != ZINF_OK && op_s) free(*op_s), *op_s = NULL;
    return st;
}

zinf_status zinf_model_pass(const zinf_config *cfg, zinf_device *dev, int passes, zinf_pass_time *out) {
    return model_pass(cfg, dev, passes, out, NULL);
}

// One micro-batch's forward and backward (recompute included) on a sim device in
// virtual time: the seconds the model's kernels take, their modeled times summed (the
// events would also hold the host's pace of launching them), and each op's (op_s NULL:
// not wanted).
static zinf_status model_seconds(const zinf_config *cfg, double *out, double **op_s) {
    zinf_device_params dp = {.backend = ZINF_BACKEND_SIM, .sim = cfg->device.sim, .attention = cfg->device.attention};
    dp.sim.virtual_time = true;
    dp.sim.memory = INT64_C(1) << 50; // reservations only: the plan judges the fit
    zinf_device *dev = NULL;
    zinf_status st = zinf_device_create(&dev, &dp);
    zinf_pass_time t;
    if (st == ZINF_OK) st = model_pass(cfg, dev, 1, &t, op_s);
    if (st == ZINF_OK) *out = t.busy_s;
    zinf_device_destroy(dev);
    return st;
}

// An offloaded step as the engine runs it (docs/architecture.md, "One training step"),
// one resource at a time: the device's ops in order; the communication thread bringing
// each bucket's sums down and adding them; the optimizer's threads, which share the
// cores with those additions (an addition waits for a chunk of speculation, never for
// a sub-group); the parameters' way up after each sub-group.
typedef struct step_model {
    const plan_schedule *s;
    const double *op_s; // each op of one micro-batch on the device
    int accum;
    // Seconds per element: the update (Adam, or the drives where they are slower), the
    // update under the backward (on cpu it writes its states to the second place), an
    // addition of sums into the host gradients, the sums' copy down, the new parameters'
    // way up.
    double update, update_away, add, down, up;
    double speculate; // elements the second place holds (super_offload)
    double after;     // seconds between the last bucket and the step (MiCS's norms)
} step_model;

// The first sub-group in forward order that is final by `now` and not yet speculated,
// while the second place has room for it; -1 when none.
static int next_speculation(const step_model *m, const double *final, const bool *taken, double room, double now) {
    for (int g = 0; g < m->s->group_count; g++)
        if (!taken[g] && final[g] <= now && m->s->groups[g].elements <= room) return g;
    return -1;
}

// One micro-batch's backward on the device from `dev`, its buckets down and added
// (from `comm` on, the optimizer's threads free from `host`). The last backward also
// speculates: *final gets each sub-group's time, *taken those speculated, *leftover the
// seconds of the one in flight at the step. Returns when the step starts.
static double backward(const step_model *m, double dev, double *comm, double *host, bool first, bool last,
                       double *op_end, double *final, bool *taken, double *leftover) {
    const plan_schedule *s = m->s;
    for (int k = s->forward_ops; k < s->ops; k++)
        op_end[k] = dev += m->op_s[k];
    for (int g = 0; g < s->group_count; g++)
        final[g] = INFINITY, taken[g] = false;
    double room = last ? m->speculate : 0, left = 0, start = INFINITY;
    int b = 0, busy = -1; // the next bucket; the sub-group being speculated
    *leftover = 0;
    for (;;) {
        const plan_bucket *bk = b < s->bucket_count ? &s->buckets[b] : NULL;
        double arrive = bk ? fmax(*comm, op_end[bk->op]) + bk->elements * m->down : INFINITY;
        if (!bk) start = fmax(dev, *comm) + m->after;
        if (busy < 0 && *host < start && (busy = next_speculation(m, final, taken, room, *host)) >= 0)
            taken[busy] = true, room -= s->groups[busy].elements, left = s->groups[busy].elements;
        if (busy >= 0 && arrive > *host) { // a chunk of it
            if (*host >= start) {
                *leftover = left * m->update_away;
                break;
            }
            double n = fmin(left, ZINF_OPTIM_SPECULATE_CHUNK);
            *host += n * m->update_away, left -= n;
            if (left <= 0) busy = -1;
        } else if (bk) {
            if (first && bk->lands) {
                *comm = arrive;
            } else {
                *host = fmax(*host, arrive) + bk->elements * m->add;
                *comm = *host;
            }
            for (int g = 0; g < s->group_count; g++)
                if (s->groups[g].last_bucket == b) final[g] = *comm;
            b++;
        } else {
            // Nothing to speculate now: on to the next sub-group to become final, if the
            // step has not begun by then.
            double next = INFINITY;
            for (int g = 0; g < s->group_count && last; g++)
                if (!taken[g] && final[g] > *host && final[g] < next && s->groups[g].elements <= room) next = final[g];
            if (next >= start) break;
            *host = next;
        }
    }
    return start;
}

// The step from its update's start (the last step's end): the update of the sub-groups
// the last backward left (the one in flight at the step first), in forward order, each
// one's parameters sent up after it (the held ones of those speculated first); the first
// forward, each op waiting for the sub-groups it reads first; every backward once the
// update is done, the last speculating. Repeated until the sub-groups speculated settle;
// where they alternate, the mean of the last two steps.
static zinf_status offloaded_step(const step_model *m, double *out) {
    const plan_schedule *s = m->s;
    size_t ng = (size_t)s->group_count + 1, nops = (size_t)s->ops + 1;
    double *ready = calloc(ng, sizeof *ready), *final = calloc(ng, sizeof *final), *need = calloc(nops, sizeof *need),
           *op_end = calloc(nops, sizeof *op_end);
    bool *was = calloc(ng, sizeof *was), *taken = calloc(ng, sizeof *taken);
    if (!ready || !final || !need || !op_end || !was || !taken) {
        free(ready), free(final), free(need), free(op_end), free(was), free(taken);
        return zinf_fail(ZINF_ERR_NOMEM, "plan time: out of memory");
    }
    double leftover = 0, steps[2] = {0, 0}, forward = 0;
    for (int k = 0; k < s->forward_ops; k++)
        forward += m->op_s[k];
    enum { ROUNDS = 8 };
    for (int round = 0; round < ROUNDS; round++) {
        double host = leftover, up = 0;
        for (int g = 0; g < s->group_count; g++)
            if (was[g]) ready[g] = up += s->groups[g].elements * m->up;
        for (int g = 0; g < s->group_count; g++) {
            if (was[g]) continue;
            host += s->groups[g].elements * m->update;
            ready[g] = up = fmax(up, host) + s->groups[g].elements * m->up;
        }
        for (int k = 0; k < s->forward_ops; k++)
            need[k] = 0;
        for (int g = 0; g < s->group_count; g++) {
            int k = s->groups[g].first_use;
            if (k >= 0) need[k] = fmax(need[k], ready[g]);
        }
        double dev = 0, comm = 0, start = 0;
        for (int k = 0; k < s->forward_ops; k++)
            dev = fmax(dev, need[k]) + m->op_s[k];
        dev = fmax(dev, host); // the first backward joins the update
        for (int micro = 0; micro < m->accum; micro++) {
            bool first = micro == 0, last = micro == m->accum - 1;
            start =
                backward(m, first ? dev : dev + forward, &comm, &host, first, last, op_end, final, taken, &leftover);
            dev = op_end[s->ops - 1];
        }
        steps[round % 2] = start;
        bool settled = true;
        for (int g = 0; g < s->group_count; g++)
            settled = settled && was[g] == taken[g], was[g] = taken[g];
        if (settled && round) {
            steps[(round + 1) % 2] = start;
            break;
        }
    }
    *out = (steps[0] + steps[1]) / 2;
    free(ready), free(final), free(need), free(op_end), free(was), free(taken);
    return ZINF_OK;
}

zinf_status zinf_plan_time(const zinf_config *cfg, const zinf_plan_target *t, const zinf_plan *p,
                           const zinf_host_rates *h, zinf_step_time *out) {
    if (!cfg || !t || !p || !h || !out) return zinf_fail(ZINF_ERR_INVAL, "plan time: every argument is required");
    memset(out, 0, sizeof *out);
    zinf_engine e0; // the settings creation derives from cfg
    engine_settings(&e0, cfg);
    zinf_sim_rates r;
    zinf_sim_rates_of(&cfg->device.sim, &r);
    // One micro-batch's device seconds, and each op's where the schedule below needs them
    // (an offloaded optimizer).
    double micro = 0, *op_s = NULL;
    int64_t chunk; // the output layer's chunk as the engine would choose it on the target
    ZINF_CHECK(engine_choose_head_chunk(&e0.cfg, t, &chunk));
    ZINF_CHECK(model_seconds(&e0.cfg, &micro, p->mem.optimizer_tier != ZINF_OFFLOAD_NONE ? &op_s : NULL));
    const zinf_engine_memory *m = &p->mem;
    double accum = (double)cfg->gradient_accumulation_steps, es = (double)e0.elem_size;
    double numel = (double)m->model_numel, part = (double)m->partition_numel;
    // The partition's elements whose states are on the device (all, or with
    // offload_optimizer.ratio below 1 the first sub-groups') and those the tier updates.
    bool on_device = m->optimizer_tier == ZINF_OFFLOAD_NONE;
    double dev_part = on_device ? part : (double)m->optimizer_device_numel, tier_part = part - dev_part;
    // Per micro-batch the 16-bit gradients are widened into fp32 buckets (at stage 1 over
    // several, after the first, added to the sums so far), and with the optimizer on the
    // device (or part of it) each rank's part added to its fp32 gradients once per
    // reduction; on one rank (reduce.c's direct) added there straight from the 16-bit
    // gradients. Either way the step's first add writes the sums without reading them
    // (the last step's are overwritten, never zeroed). Held gradients (one micro-batch)
    // are not added at all: the step reads them. At stage 3 every module is gathered for
    // forward and again for backward.
    bool direct = policy_grads_direct(cfg, t->world), held = policy_grads_held(cfg, t->world);
    double engine, reductions = (double)reductions_per_step(&e0);
    if (held) {
        engine = 0;
    } else if (direct) {
        engine = zinf_sim_memory_s(&r, numel * (es + 4)) + (accum - 1) * zinf_sim_memory_s(&r, numel * (es + 8));
    } else {
        engine = accum * zinf_sim_memory_s(&r, numel * (es + 4));
        if (dev_part > 0)
            engine += zinf_sim_memory_s(&r, dev_part * 8) + (reductions - 1) * zinf_sim_memory_s(&r, dev_part * 12);
    }
    if (e0.grads.accumulate_locally) engine += (accum - 1) * zinf_sim_memory_s(&r, numel * 12);
    if (e0.params.storage->sliced && t->world == 1) engine += accum * 2 * zinf_sim_memory_s(&r, 2 * numel * es);
    // Per step: the norm over the gradients and the optimizer where it runs on the
    // device, all of it or the first sub-groups (the next backward overwrites the
    // gradients: no zeroing); each reads the gradients at their width (es held, else 4).
    double gs = held ? es : 4;
    if (dev_part > 0) engine += zinf_sim_memory_s(&r, dev_part * (gs + 24 + gs + es));
    out->compute = accum * micro + engine;
    out->h2d = zinf_sim_copy_s(&r, (double)p->h2d, true);
    out->d2h = zinf_sim_copy_s(&r, (double)p->d2h, true);
    out->links = p->comm_intra || p->comm_inter
                     ? zinf_sim_collective_s(&r, (double)p->comm_intra, (double)p->comm_inter)
                     : 0;
    out->nvme_read = h->nvme_read > 0 ? (double)p->nvme_read / h->nvme_read : 0;
    out->nvme_write = h->nvme_write > 0 ? (double)p->nvme_write / h->nvme_write : 0;
    // One NVMe link carries both directions: together at the mixed rate where known.
    double nvme = h->nvme_mixed > 0 ? (double)(p->nvme_read + p->nvme_write) / h->nvme_mixed
                                    : out->nvme_read + out->nvme_write;
    double device = out->compute > out->links ? out->compute : out->links;
    if (m->optimizer_tier == ZINF_OFFLOAD_NONE) {
        // Parameters offloaded at stage 3 stream in under compute.
        out->step = out->step_clipping = device > nvme ? device : nvme;
    } else {
        // The update runs on the optimizer's threads, sub-group by sub-group, and the
        // device waits where it needs one not yet done: the next forward for the
        // sub-groups it reads (stages 1-2 too: each module's all-gather follows its
        // sub-group), the backward for the whole update. Each reduction is added into the
        // host partition, the last taking the norms in the same pass; the step's first
        // over a pinned partition lands from the device (one rank, or NCCL's or qgZ's
        // sums in place), its norms taken there. With super_offload the last backward
        // updates each sub-group once its gradients are final, while the second place
        // has room and the backward runs (on cpu at the rate of Adam writing there). On nvme the update runs at the
        // slower of Adam and the drives. MiCS takes the norms after the backward, from host memory. Not counted: the
        // norms of modules that straddle buckets, the host's own time between ops.
        bool mics = e0.params.storage->sliced && cfg->zero.mics_shard_size > 0 && cfg->zero.mics_shard_size < t->world;
        bool lands = cfg->zero.offload_optimizer.pin_memory && (t->world == 1 || t->nccl);
        double first = lands ? 0 : tier_part / h->grad_add;
        double adds = first + (double)(reductions_per_step(&e0) - 1) * tier_part / h->grad_add;
        double norms_after = mics ? tier_part / h->grad_norm : 0;
        double adam = tier_part / h->adam;
        bool on_nvme = m->optimizer_tier == ZINF_OFFLOAD_NVME;
        double whole = on_nvme && nvme > adam ? nvme : adam, update = tier_part > 0 ? whole / tier_part : 0;
        out->cpu = adam + adds + norms_after;
        plan_schedule sched;
        zinf_status st = engine_plan_schedule(cfg, t, &sched);
        if (st != ZINF_OK) {
            free(op_s);
            return st;
        }
        // The engine's own kernels and the collectives, where they take longer, spread
        // over the model's ops.
        double scale = micro > 0 ? device / (accum * micro) : 1;
        for (int k = 0; k < sched.ops; k++)
            op_s[k] *= scale;
        step_model sm = {.s = &sched,
                         .op_s = op_s,
                         .accum = cfg->gradient_accumulation_steps,
                         .update = update,
                         .update_away = on_nvme || !h->adam_away ? update : 1 / h->adam_away,
                         .add = 1 / h->grad_add,
                         .down = zinf_sim_copy_s(&r, sizeof(float), true),
                         .up = m->params_tier == ZINF_OFFLOAD_NONE
                                   ? zinf_sim_copy_s(&r, es, cfg->zero.offload_optimizer.pin_memory)
                                   : 0,
                         .speculate = sched.speculate,
                         .after = norms_after};
        st = offloaded_step(&sm, &out->step);
        out->step_clipping = out->step;
        if (st == ZINF_OK && sm.speculate > 0 && cfg->gradient_clipping > 0) {
            sm.speculate = 0;
            st = offloaded_step(&sm, &out->step_clipping);
        }
        plan_schedule_free(&sched);
        if (st != ZINF_OK) {
            free(op_s);
            return st;
        }
    }
    const double busy[] = {out->compute, out->h2d, out->d2h, out->links, out->nvme_read, out->nvme_write, out->cpu};
    static const char *const names[] = {"device compute", "pcie up", "pcie down", "gpu links",
                                        "nvme read",      "nvme write", "cpu optimizer"};
    int top = 0;
    for (int i = 1; i < 7; i++)
        if (busy[i] > busy[top]) top = i;
    out->bound = names[top];
    for (int i = 0; i < 7; i++) {
        if (busy[i] > out->step) out->step = busy[i];
        if (busy[i] > out->step_clipping) out->step_clipping = busy[i];
    }
    free(op_s);
    return ZINF_OK;
}
