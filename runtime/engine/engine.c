// The engine: creation and destruction, and the full-value view of a rank's partition
// (DeepSpeed's safe_get_full_* / safe_set_full_*). A training step is step.c's.
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"
#include "zinf_half.h"

// ---- creation ----

static zinf_status check_config(const zinf_config *cfg, const zinf_comm *comm) {
    if (!cfg->model.present)
        return zinf_fail(ZINF_ERR_INVAL, "engine: the config has no \"model\" section; add one, e.g. "
                                         "{\"model\": {\"preset\": \"gpt2\"}}");
    if (zinf_comm_size(comm) != cfg->world_size)
        return zinf_fail(ZINF_ERR_INVAL,
                         "engine: the config's batch sizes were resolved for %d ranks but the communicator has %d",
                         cfg->world_size, zinf_comm_size(comm));
    return ZINF_OK;
}

zinf_status zinf_engine_target(const zinf_config *cfg, const zinf_comm *comm, zinf_plan_target *out) {
    if (!cfg || !comm || !out) return zinf_fail(ZINF_ERR_INVAL, "engine target: cfg, comm and out are required");
    zinf_device_params dp;
    zinf_device_choice dc;
    zinf_comm_info ci;
    int gpus, world = zinf_comm_size(comm), local = zinf_comm_local_size(comm);
    engine_device_params(cfg, comm, &dp, &gpus);
    ZINF_CHECK(zinf_device_choose(&dp, &dc));
    zinf_comm_probe(&ci);
    *out = (zinf_plan_target){.world = world,
                              .backend = dc.backend,
                              .nccl = world > 1 && ((dc.backend == ZINF_BACKEND_CUDA && local <= gpus && ci.nccl) ||
                                                    dc.backend == ZINF_BACKEND_SIM),
                              .device_capacity = (int64_t)dc.capacity,
                              .local_ranks = local,
                              .nodes = zinf_comm_nodes(comm)};
    return zinf_host_mem_probe(&out->host);
}

// The device and communication of the target.
static zinf_status open_device(zinf_engine *e, const zinf_plan_target *t) {
    zinf_device_params dp;
    int gpus;
    engine_device_params(&e->cfg, e->comm, &dp, &gpus);
    ZINF_CHECK(zinf_device_create(&e->dev, &dp));
    e->sim = zinf_device_get_caps(e->dev)->backend == ZINF_BACKEND_SIM;
    if (t->nccl) {
        ZINF_CHECK(zinf_comm_attach_device(e->comm, e->dev));
        e->nccl = true;
    } else if (t->world > 1 && t->backend == ZINF_BACKEND_CUDA) {
        if (t->local_ranks > gpus)
            ZINF_LOG_WARN("engine: %d ranks share %d GPUs on this host; collectives go through host memory",
                          t->local_ranks, gpus);
        else
            ZINF_LOG_WARN("engine: this build has no NCCL (built with NO_CUDA=1 or without NCCL installed); "
                          "collectives go through host memory");
    }
    return ZINF_OK;
}

// Creation runs the plan's own code, allocating: it takes exactly what the plan says,
// which zinf estimate and train's plan lines rest on. A difference is a bug in zinf.
static zinf_status check_plan(zinf_engine *e, const zinf_plan_target *t, uint64_t device_base) {
    zinf_engine_memory p, m;
    ZINF_CHECK(engine_plan_memory(&e->cfg, t, &p));
    zinf_engine_memory_get(e, &m);
    int64_t dev = m.device_in_use - (int64_t)device_base;
    if (dev == p.device_in_use && m.pinned == p.pinned && m.host_total == p.host_total) return ZINF_OK;
    return zinf_fail(
        ZINF_ERR_INTERNAL,
        "engine: took %lld device, %lld pinned and %lld host bytes where its plan says %lld, %lld and %lld",
        (long long)dev, (long long)m.pinned, (long long)m.host_total, (long long)p.device_in_use, (long long)p.pinned,
        (long long)p.host_total);
}

static zinf_status create(zinf_engine *e, const zinf_config *cfg, zinf_comm *comm) {
    ZINF_CHECK(check_config(cfg, comm));
    engine_settings(e, cfg);
    e->comm = comm;
    e->rank = zinf_comm_rank(comm);
    e->world = zinf_comm_size(comm);
    e->nodes = zinf_comm_nodes(comm);
    mics_settings(e);
    zinf_loss_scaler_init(&e->step.scaler, &cfg->fp16);

    zinf_model_params mp;
    zinf_plan_target t;
    ZINF_CHECK(zinf_engine_target(cfg, comm, &t));
    zinf_plan_choice choice;
    ZINF_CHECK(engine_choose(&e->cfg, &t, &choice));
    ZINF_CHECK(engine_model_params(&e->cfg, e->dtype, &mp));
    ZINF_CHECK(open_device(e, &t));
    // Ahead of the store stream's work, which an update under the forward puts beside them.
    ZINF_CHECK(zinf_stream_create_urgent(e->dev, &e->compute_stream));
    ZINF_CHECK(zinf_stream_create_urgent(e->dev, &e->comm_stream));
    ZINF_CHECK(zinf_event_create(e->dev, &e->compute_mark));
    zinf_device_mem before, after;
    zinf_device_get_mem(e->dev, &before);
    ZINF_CHECK(zinf_model_create(&e->model, e->dev, &mp));
    t.attention_workspace = (int64_t)zinf_model_attention_workspace(e->model);
    zinf_device_get_mem(e->dev, &after);
    e->activation_bytes = (int64_t)(after.in_use - before.in_use);
    ZINF_CHECK(engine_build(e));
    ZINF_CHECK(check_plan(e, &t, before.in_use));
    ZINF_CHECK(zinf_host_pool_pin(e->host));
    ZINF_CHECK(e->params.ops->create(e));
    ZINF_CHECK(init_partition(e));
    if (e->aio) zinf_aio_get_stats(e->aio, &e->step.aio_seen); // steps count their own IO and traffic
    zinf_comm_get_bytes(e->comm, &e->step.comm_seen);
    zinf_device_get_busy(e->dev, &e->step.busy_seen);
    if (e->rank == 0) ZINF_CHECK(zinf_monitor_open(&e->monitor, cfg));
    const zinf_comms_logger_config *cl = &cfg->comms_logger;
    if (cl->enabled) {
        ZINF_CHECK(zinf_comm_log_start(comm, cl->prof_all ? (1u << ZINF_COMM_OPS) - 1 : cl->prof_ops, cl->verbose));
        e->comms_logged = true;
    }
    return ZINF_OK;
}

zinf_status zinf_engine_create(zinf_engine **out, const zinf_config *cfg, zinf_comm *comm) {
    if (!out || !cfg || !comm) return zinf_fail(ZINF_ERR_INVAL, "engine: out, cfg and comm are required");
    *out = NULL;
    zinf_engine *e = calloc(1, sizeof *e);
    if (!e) return zinf_fail(ZINF_ERR_NOMEM, "engine: out of memory");
    zinf_status st = zinf_latch_create(&e->failure);
    if (st == ZINF_OK) st = create(e, cfg, comm);
    if (st != ZINF_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", zinf_last_error());
        bool device = st == ZINF_ERR_NOMEM && !zinf_host_pool_refused(e->host); // a host budget said what to change
        zinf_engine_destroy(e);
        // Say what to change, not just what ran out.
        return zinf_fail(st, "%s%s%s", msg, device ? "; " : "", device ? ENGINE_DEVICE_HINT : "");
    }
    *out = e;
    return ZINF_OK;
}

void zinf_engine_destroy(zinf_engine *e) {
    if (!e) return;
    zinf_optim_tier_join(e->optim.tier);
    zinf_monitor_close(e->monitor);
    if (e->comms_logged) engine_log_comms(e, "the run");
    if (e->comm_stream) zinf_stream_sync(e->comm_stream);
    if (e->compute_stream) zinf_stream_sync(e->compute_stream);
    engine_reap(e, true);
    free(e->pending.items);
    if (e->params.ops) e->params.ops->destroy(e);
    reduce_destroy(e);
    zeropp_destroy(e);
    mics_destroy(e);
    for (int i = 0; e->grads.buffers16 && i < e->module_count; i++)
        zinf_device_free(e->dev, e->grads.buffers16[i]);
    if (e->dev) zinf_device_free(e->dev, e->grads.device_norms);
    free(e->grads.norms_taken);
    params_destroy(e);
    states_destroy(e);
    zinf_model_destroy(e->model); // its copies to and from h_ckpt end first
    if (e->host) zinf_host_pool_free(e->host, e->h_ckpt, true);
    zinf_host_pool_destroy(e->host);
    zinf_aio_destroy(e->aio);
    free(e->params.whole), free(e->grads.buffers16), free(e->params.view), free(e->names), free(e->layout);
    zinf_event_destroy(e->compute_mark);
    if (e->nccl) zinf_comm_detach_device(e->comm);
    zinf_stream_destroy(e->comm_stream);
    zinf_stream_destroy(e->compute_stream);
    zinf_device_destroy(e->dev);
    zinf_latch_destroy(e->failure);
    if (e->comms_logged) zinf_comm_log_stop(e->comm); // the communicators split from it are gone
    free(e);
}

const zinf_model *zinf_engine_model(const zinf_engine *e) { return e ? e->model : NULL; }

zinf_device *zinf_engine_device(const zinf_engine *e) { return e ? e->dev : NULL; }

// ---- full values ----

// The parameter called name, or NULL after failing with a message naming it.
static const zinf_param_info *find_param(const zinf_engine *e, const char *name, int *mod) {
    const zinf_param_info *p = zinf_model_find_param(e->model, name, mod);
    if (!p)
        zinf_fail(ZINF_ERR_INVAL, "engine: \"%s\" is not a parameter of this model (e.g. \"h.0.attn.c_attn.weight\")",
                  name ? name : "(null)");
    return p;
}

// The optimizer state of a kind, or -1 for an unknown kind.
static int state_index(zinf_state_kind kind) {
    switch (kind) {
    case ZINF_STATE_PARAM: return ZINF_TIER_MASTER;
    case ZINF_STATE_EXP_AVG: return ZINF_TIER_EXP_AVG;
    case ZINF_STATE_EXP_AVG_SQ: return ZINF_TIER_EXP_AVG_SQ;
    case ZINF_STATE_GRAD: return ZINF_TIER_GRAD;
    }
    return -1;
}

// The part of parameter p (elements [a, b) of its module) this rank holds: [*lo, *hi).
static bool owned(const zinf_engine *e, int mod, const zinf_param_info *p, size_t *lo, size_t *hi) {
    const mod_layout *l = &e->layout[mod];
    *lo = p->offset > l->part_lo ? p->offset : l->part_lo;
    *hi = p->offset + p->numel < l->part_lo + l->part_n ? p->offset + p->numel : l->part_lo + l->part_n;
    return *lo < *hi;
}

zinf_status zinf_engine_get_full(zinf_engine *e, const char *name, zinf_state_kind kind, float *out) {
    int mod;
    const zinf_param_info *p = e && out ? find_param(e, name, &mod) : NULL;
    if (!p) return e && out ? ZINF_ERR_INVAL : zinf_fail(ZINF_ERR_INVAL, "engine get_full: e and out are required");
    int s = state_index(kind);
    if (s < 0) return zinf_fail(ZINF_ERR_INVAL, "engine get_full: unknown state kind %d", (int)kind);
    ZINF_CHECK(engine_sync(e));
    const mod_layout *l = &e->layout[mod];
    size_t lo, hi;
    memset(out, 0, p->numel * sizeof *out);
    if (owned(e, mod, p, &lo, &hi))
        ZINF_CHECK(
            states_read(e, (zinf_tier_state)s, l->part_off + (lo - l->part_lo), hi - lo, out + (lo - p->offset)));
    // Each element is held by one rank of the partition; the others add zeros, which
    // changes no bits.
    if (e->partition.split && e->partition.ranks > 1)
        ZINF_CHECK(zinf_comm_allreduce_f32(e->partition.group.comm, out, p->numel));
    if (kind == ZINF_STATE_GRAD && e->step.scaler.scale != 1.0)
        for (size_t i = 0; i < p->numel; i++)
            out[i] = (float)(out[i] / e->step.scaler.scale);
    return ZINF_OK;
}

zinf_status zinf_engine_set_full(zinf_engine *e, const char *name, zinf_state_kind kind, const float *in) {
    int mod;
    const zinf_param_info *p = e && in ? find_param(e, name, &mod) : NULL;
    if (!p) return e && in ? ZINF_ERR_INVAL : zinf_fail(ZINF_ERR_INVAL, "engine set_full: e and in are required");
    int s = state_index(kind);
    if (s < 0) return zinf_fail(ZINF_ERR_INVAL, "engine set_full: unknown state kind %d", (int)kind);
    if (kind == ZINF_STATE_GRAD && e->step.scaler.scale != 1.0)
        return zinf_fail(ZINF_ERR_UNSUPPORTED, "engine set_full: setting gradients under fp16 loss scaling");
    ZINF_CHECK(engine_sync(e));
    const mod_layout *l = &e->layout[mod];
    size_t lo, hi;
    if (owned(e, mod, p, &lo, &hi))
        ZINF_CHECK(
            states_write(e, (zinf_tier_state)s, l->part_off + (lo - l->part_lo), hi - lo, in + (lo - p->offset)));
    if (kind == ZINF_STATE_PARAM) {
        // The 16-bit copy: what this rank holds of the parameter.
        size_t a = p->offset, b = p->offset + p->numel;
        a = a > l->param_lo ? a : l->param_lo;
        b = b < l->param_lo + l->param_n ? b : l->param_lo + l->param_n;
        void *tmp = a < b ? malloc((b - a) * e->elem_size) : NULL;
        if (a < b && !tmp) return zinf_fail(ZINF_ERR_NOMEM, "engine set_full: out of memory");
        for (size_t i = a; i < b; i++)
            dt_store(tmp, e->dtype, i - a, in[i - p->offset]);
        zinf_status st = a < b ? e->params.storage->write(e, mod, a, b - a, tmp) : ZINF_OK;
        free(tmp);
        ZINF_CHECK(st);
    }
    return zinf_stream_sync(e->compute_stream);
}

zinf_status zinf_engine_weights_digest(zinf_engine *e, char out[17]) {
    if (!e || !out) return zinf_fail(ZINF_ERR_INVAL, "engine digest: e and out are required");
    size_t most = 0;
    for (int i = 0; i < e->module_count; i++) {
        const zinf_module_info *mi = zinf_model_module(e->model, i);
        for (int j = 0; j < mi->nparams; j++)
            if (mi->params[j].numel > most) most = mi->params[j].numel;
    }
    float *buf = malloc(most * sizeof *buf);
    if (!buf) return zinf_fail(ZINF_ERR_NOMEM, "engine digest: out of memory");
    uint64_t h = 0xcbf29ce484222325ull; // FNV-1a over the bytes, in model order
    zinf_status st = ZINF_OK;
    for (int i = 0; st == ZINF_OK && i < e->module_count; i++) {
        const zinf_module_info *mi = zinf_model_module(e->model, i);
        for (int j = 0; st == ZINF_OK && j < mi->nparams; j++) {
            st = zinf_engine_get_full(e, mi->params[j].name, ZINF_STATE_PARAM, buf);
            const unsigned char *b = (const unsigned char *)buf;
            for (size_t k = 0; st == ZINF_OK && k < mi->params[j].numel * sizeof *buf; k++)
                h = (h ^ b[k]) * 0x100000001b3ull;
        }
    }
    free(buf);
    if (st == ZINF_OK) snprintf(out, 17, "%016llx", (unsigned long long)h);
    return st;
}
