// What creation and a plan share, once the config is read: the settings that follow
// from the config alone, the model's parameters, the device's, and the build of the flat
// layout, the states wherever they live and the gradient buckets.
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

void engine_settings(zinf_engine *e, const zinf_config *cfg) {
    e->cfg = *cfg;
    e->params.offload = cfg->zero.offload_param.device; // the config allows it at stage 3 only
    e->dtype = cfg->bf16 ? ZINF_DTYPE_BF16 : cfg->fp16.enabled ? ZINF_DTYPE_F16 : ZINF_DTYPE_F32;
    e->elem_size = zinf_dtype_size(e->dtype);
    policy_choose(e);
}

// The aio engine and the run's name the swap stores share: every rank's files go under
// one run directory, named by rank 0's process id.
static zinf_status open_aio(zinf_engine *e) {
    const zinf_aio_config *a = &e->cfg.aio;
    zinf_aio_params ap = {.block_size = (uint32_t)a->block_size,
                          .queue_depth = (uint32_t)a->queue_depth,
                          .threads = (uint32_t)a->intra_op_parallelism};
    if (zinf_aio_create(&e->aio, &ap) != 0) return zinf_fail(ZINF_ERR_IO, "engine: aio: %s", zinf_last_error());
    int64_t run_id = (int64_t)getpid();
    ZINF_CHECK(zinf_comm_broadcast(e->comm, &run_id, sizeof run_id, 0));
    snprintf(e->run, sizeof e->run, "%lld", (long long)run_id);
    return ZINF_OK;
}

static zinf_status alloc_states(zinf_engine *e) {
    bool nvme = e->cfg.zero.offload_optimizer.device == ZINF_OFFLOAD_NVME || e->params.offload == ZINF_OFFLOAD_NVME;
    if (e->plan) {
        e->plan_pool_device = e->plan_device;
    } else {
        // The host budgets count what the device holds by now on the host backend.
        zinf_host_pool_config hc = {.dev = e->dev,
                                    .local_ranks = zinf_comm_local_size(e->comm),
                                    .pinned_limit = e->cfg.device.pinned_memory_limit};
        ZINF_CHECK(zinf_host_pool_create(&e->host, &hc));
        if (nvme) ZINF_CHECK(open_aio(e));
    }
    ZINF_CHECK(e->params.storage->create(e));
    ZINF_CHECK(states_create(e));
    if (!e->plan) {
        e->grads.norms_taken = malloc((size_t)e->module_count * sizeof *e->grads.norms_taken);
        if (!e->grads.norms_taken) return zinf_fail(ZINF_ERR_NOMEM, "engine: out of memory");
        for (int i = 0; i < e->module_count; i++)
            e->grads.norms_taken[i] = -1;
    }
    return engine_take_device(e, (size_t)e->module_count * e->partition.ranks * 2 * sizeof(double), "gradient norms",
                              (void **)&e->grads.device_norms);
}

// With cpu_checkpointing the model's checkpoints live in pinned host memory from the
// pool, held to the pinned budget with every other pinned buffer.
static zinf_status lend_checkpoints(zinf_engine *e) {
    size_t bytes = zinf_model_checkpoint_bytes(zinf_model_get_params(e->model));
    if (!bytes) return ZINF_OK;
    e->ckpt_host_bytes = (int64_t)bytes;
    ZINF_CHECK(engine_take_pinned(e, bytes, "activation checkpoints (activation_checkpointing.cpu_checkpointing)",
                                  &e->h_ckpt));
    return e->plan ? ZINF_OK : zinf_model_lend_checkpoints(e->model, e->h_ckpt);
}

zinf_status engine_build(zinf_engine *e) {
    e->module_count = zinf_model_module_count(e->model);
    e->params.whole = calloc((size_t)e->module_count, sizeof *e->params.whole);
    e->grads.buffers16 = calloc((size_t)e->module_count, sizeof *e->grads.buffers16);
    e->params.view = calloc((size_t)e->module_count, sizeof *e->params.view);
    e->names = calloc((size_t)e->module_count, sizeof *e->names);
    if (!e->params.whole || !e->grads.buffers16 || !e->params.view || !e->names)
        return zinf_fail(ZINF_ERR_NOMEM, "engine: out of memory");
    for (int i = 0; i < e->module_count; i++)
        e->names[i] = zinf_model_module(e->model, i)->name;
    ZINF_CHECK(layout_build(e));
    // Before the states: held gradients need no fp32 ones.
    e->grads.direct = policy_grads_direct(&e->cfg, e->world);
    e->grads.held = policy_grads_held(&e->cfg, e->world);
    ZINF_CHECK(mics_create(e));
    ZINF_CHECK(alloc_states(e));
    ZINF_CHECK(lend_checkpoints(e));
    ZINF_CHECK(reduce_create(e));
    return zeropp_create(e);
}

zinf_status engine_model_params(const zinf_config *cfg, zinf_dtype dt, zinf_model_params *mp) {
    *mp = (zinf_model_params){.dtype = dt,
                              .batch = (int)cfg->train_micro_batch_size_per_gpu,
                              .training = true,
                              .checkpoint_activations = cfg->activation_checkpointing.enabled,
                              .head_chunk = (int)(cfg->memory.head_chunk_tokens > 0 ? cfg->memory.head_chunk_tokens : 0),
                              .host_checkpoints = cfg->activation_checkpointing.enabled &&
                                                  cfg->activation_checkpointing.cpu_checkpointing};
    ZINF_CHECK(zinf_model_shape_from_config(&cfg->model, &mp->shape));
    mp->seq_len = cfg->data.present && cfg->data.seq_len > 0 ? (int)cfg->data.seq_len : mp->shape.block_size;
    if (mp->seq_len > mp->shape.block_size)
        return zinf_fail(ZINF_ERR_INVAL, "data.seq_len: %d is longer than the model's block_size %d", mp->seq_len,
                         mp->shape.block_size);
    return ZINF_OK;
}

// Each rank on a host takes its own GPU (local rank); with more ranks than GPUs they
// share, and collectives stay on host memory, since NCCL refuses a GPU twice.
void engine_device_params(const zinf_config *cfg, const zinf_comm *comm, zinf_device_params *dp, int *gpus) {
    zinf_gpu_runtime_info ri;
    zinf_gpu_runtime_probe(&ri);
    *gpus = ri.device_count;
    *dp = (zinf_device_params){.backend = cfg->device.backend,
                               .memory_limit = cfg->device.memory_limit,
                               .sim = cfg->device.sim,
                               .attention = cfg->device.attention,
                               .index = ri.device_count > 0 ? zinf_comm_local_rank(comm) % ri.device_count : 0};
}
