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

zinf_status zinf_model_pass(const zinf_config *cfg, zinf_device *dev, int passes, double *seconds, double *busy_s) {
    if (!cfg || !dev || passes < 1 || !seconds)
        return zinf_fail(ZINF_ERR_INVAL, "model pass: a config, a device, passes >= 1 and seconds are required");
    *seconds = 0;
    if (busy_s) *busy_s = 0;
    zinf_engine e0; // the settings creation derives from cfg
    engine_settings(&e0, cfg);
    zinf_dtype dt = e0.dtype;
    int64_t chunk;
    ZINF_CHECK(engine_choose_head_chunk(&e0.cfg, (int64_t)zinf_device_get_caps(dev)->capacity, &chunk));
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
        if (n && st == ZINF_OK) st = zinf_memset_async(s, bufs[i], 0, n);
    }
    if (st == ZINF_OK) st = zinf_model_set_batch(m, s, tok, tok, mp.batch, 1.0f);
    int nops = 0;
    const zinf_model_op *ops = st == ZINF_OK ? zinf_model_schedule(m, true, &nops) : NULL;
    zinf_device_busy b0 = {0}, b1 = {0};
    for (int pass = 0; st == ZINF_OK && pass < passes; pass++) {
        if (pass == passes - 1 && (st = zinf_stream_sync(s)) == ZINF_OK) zinf_device_get_busy(dev, &b0);
        if (st == ZINF_OK) st = zinf_event_record(t0, s);
        for (int k = 0; st == ZINF_OK && k < nops; k++)
            st = zinf_model_run(m, s, &ops[k], bufs, bufs + nmod);
        if (st == ZINF_OK) st = zinf_event_record(t1, s);
    }
    if (st == ZINF_OK) st = zinf_stream_sync(s);
    if (st == ZINF_OK) st = zinf_event_elapsed(t0, t1, seconds);
    zinf_device_get_busy(dev, &b1);
    if (busy_s) *busy_s = b1.compute_s - b0.compute_s;
    for (int i = 0; bufs && i < 2 * nmod; i++)
        zinf_device_free(dev, bufs[i]);
    free(bufs), free(tok);
    zinf_model_destroy(m);
    zinf_event_destroy(t0), zinf_event_destroy(t1);
    zinf_stream_destroy(s);
    return st;
}

// One micro-batch's forward and backward (recompute included) on a sim device in
// virtual time: the seconds the model's kernels take, their modeled times summed (the
// events would also hold the host's pace of launching them).
static zinf_status model_seconds(const zinf_config *cfg, double *out) {
    zinf_device_params dp = {.backend = ZINF_BACKEND_SIM, .sim = cfg->device.sim, .attention = cfg->device.attention};
    dp.sim.virtual_time = true;
    dp.sim.memory = INT64_C(1) << 50; // reservations only: the plan judges the fit
    zinf_device *dev = NULL;
    zinf_status st = zinf_device_create(&dev, &dp);
    double events_s;
    if (st == ZINF_OK) st = zinf_model_pass(cfg, dev, 1, &events_s, out);
    zinf_device_destroy(dev);
    return st;
}

zinf_status zinf_plan_time(const zinf_config *cfg, const zinf_plan_target *t, const zinf_plan *p,
                           const zinf_host_rates *h, zinf_step_time *out) {
    if (!cfg || !t || !p || !h || !out) return zinf_fail(ZINF_ERR_INVAL, "plan time: every argument is required");
    memset(out, 0, sizeof *out);
    zinf_engine e0; // the settings creation derives from cfg
    engine_settings(&e0, cfg);
    zinf_sim_rates r;
    zinf_sim_rates_of(&cfg->device.sim, &r);
    double micro = 0;
    int64_t chunk; // the output layer's chunk as the engine would choose it on the target
    ZINF_CHECK(engine_choose_head_chunk(&e0.cfg, t->device_capacity, &chunk));
    ZINF_CHECK(model_seconds(&e0.cfg, &micro));
    const zinf_engine_memory *m = &p->mem;
    double accum = (double)cfg->gradient_accumulation_steps, es = (double)e0.elem_size;
    double numel = (double)m->model_numel, part = (double)m->partition_numel;
    // Per micro-batch the 16-bit gradients are widened into fp32 buckets (at stage 1 over
    // several, after the first, added to the sums so far), and with the optimizer on the
    // device each rank's part added to its fp32 gradients; on one rank (reduce.c's
    // direct) added there straight from the 16-bit gradients. At stage 3 every module is
    // gathered for forward and again for backward.
    bool on_device = m->optimizer_tier == ZINF_OFFLOAD_NONE;
    bool direct = policy_grads_direct(cfg, t->world);
    double engine = direct ? accum * zinf_sim_memory_s(&r, numel * (es + 8))
                           : accum * zinf_sim_memory_s(&r, numel * (es + 4)) +
                                 (on_device ? accum * zinf_sim_memory_s(&r, part * 12) : 0);
    if (e0.grads.accumulate_locally) engine += (accum - 1) * zinf_sim_memory_s(&r, numel * 12);
    if (e0.params.storage->sliced && t->world == 1) engine += accum * 2 * zinf_sim_memory_s(&r, 2 * numel * es);
    // Per step: the norm over the fp32 gradients, their zeroing, and the optimizer when it
    // runs on the device.
    if (on_device) engine += zinf_sim_memory_s(&r, part * (4 + 4 + 28 + es));
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
        out->step = device > nvme ? device : nvme;
    } else {
        // The optimizer's threads accumulate every reduction's gradients, then take the
        // norm, step (with the NVMe traffic in flight under it) and zero the gradients.
        // At every stage the update starts under the next forward, but that forward soon
        // catches up with it and waits for each sub-group it needs: on an H100 with 16
        // cores, GPT-2 124M and large at stage 3 stepped in about the device's time
        // plus the optimizer threads'. Stages 1-2 follow the update the same way (each
        // module waits for its sub-group, then its all-gather), so they count alike.
        // With super_offload the share of the update the second place holds runs under the
        // last backward, beside the gradients' additions on the same threads; on nvme
        // with that share's traffic, the whole update being the slower of Adam and the
        // drives.
        // Each reduction is added into the host partition, and the last takes the norms in
        // the same pass, under the backward. The step's first over a pinned partition
        // lands from the device (one rank, or NCCL's reduce-scatter in place; qgZ's too,
        // not counted), its norms taken there: nothing is left to the threads but the
        // norms of modules that straddle buckets, not counted. MiCS takes the norms
        // after the backward, from host memory.
        const zinf_offload_optimizer_config *oc = &cfg->zero.offload_optimizer;
        bool mics = e0.params.storage->sliced && cfg->zero.mics_shard_size > 0 && cfg->zero.mics_shard_size < t->world;
        bool lands = oc->pin_memory && (t->world == 1 || t->nccl);
        double first = lands ? 0 : part / h->grad_add;
        double adds = first + (double)(reductions_per_step(&e0) - 1) * part / h->grad_add;
        double norms_after = mics ? part / h->grad_norm : 0;
        double adam = part / h->adam, spec_share = part > 0 ? (double)p->choice.speculate_elements / part : 0;
        bool on_nvme = m->optimizer_tier == ZINF_OFFLOAD_NVME;
        double whole = on_nvme && nvme > adam ? nvme : adam, under_backward = whole * spec_share;
        out->cpu = adam + adds + norms_after;
        double update = fmax(whole - under_backward, on_nvme ? nvme * (1 - spec_share) : nvme);
        out->step = fmax(device, adds + under_backward) + norms_after + update;
    }
    const double busy[] = {out->compute, out->h2d, out->d2h, out->links, out->nvme_read, out->nvme_write, out->cpu};
    static const char *const names[] = {"device compute", "pcie up", "pcie down", "gpu links",
                                        "nvme read",      "nvme write", "cpu optimizer"};
    int top = 0;
    for (int i = 1; i < 7; i++)
        if (busy[i] > busy[top]) top = i;
    out->bound = names[top];
    for (int i = 0; i < 7; i++)
        if (busy[i] > out->step) out->step = busy[i];
    return ZINF_OK;
}
