// The config schema: every key zinf reads, in the order the normalized config prints
// them, with type, default, range and DeepSpeed alias. Defaults and ranges follow
// DeepSpeed's DeepSpeedZeroConfig / offload configs / lr_schedules where the key is
// DeepSpeed's; the deviations are marked "zinf:".
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "internal.h"
#include "zinf_comm.h"

#define OFF(field) ((ptrdiff_t)offsetof(zinf_config, field))
#define NONE       ((ptrdiff_t)-1)
#define BIG        ((double)CONFIG_INT_MAX)

static const char *const offload_devices[] = {"none", "cpu", "nvme", NULL};
static const char *const ckpt_on_error[] = {"stop", "warn", NULL};
static const char *const optimizer_types[] = {"Adam", "AdamW", NULL};
static const char *const scheduler_types[] = {"", "WarmupLR", "WarmupDecayLR", "WarmupCosineLR", NULL};
static const char *const warmup_types[] = {"log", "linear", NULL};
static const char *const presets[] = {"",
                                      "gpt2",
                                      "gpt2-medium",
                                      "gpt2-large",
                                      "gpt2-xl",
                                      "llama-3.2-1b",
                                      "llama-3.2-3b",
                                      "llama-3.1-8b",
                                      "mistral-7b",
                                      "qwen2.5-0.5b",
                                      "qwen2.5-7b",
                                      "smollm2-135m",
                                      NULL};
static const char *const archs[] = {"gpt2", "llama", "mistral", "qwen2", NULL};
static const char *const rope_types[] = {"default", "linear", "dynamic", "llama3", NULL};
static const char *const data_formats[] = {"tokens-u16", "text-bytes", "tokens-u32", "megatron", NULL};
static const char *const samplings[] = {"random", "sequential", NULL};
static const char *const backends[] = {"auto", "host", "cuda", "sim", NULL};
static const char *const attentions[] = {"auto", "cudnn", "zinf", NULL}; // zinf_attention_impl's order
static const char *const sim_gpus[] = {"h100", "h200", "a100", "rtx4090", NULL};
static const char *const comm_ops[] = ZINF_COMM_OP_NAMES; // comms_logger.prof_ops: a bit per zinf_comm_op

#define SECTION(p, o, fl)                                                                                              \
    { .path = p, .kind = K_SECTION, .off = o, .flags = fl }
#define BOOL(p, o, d)                                                                                                  \
    { .path = p, .kind = K_BOOL, .off = o, .def = d }
#define INT(p, o, d, lo, hi, fl)                                                                                       \
    { .path = p, .kind = K_INT, .off = o, .def = d, .min = lo, .max = hi, .flags = fl }
#define REAL(p, o, d, lo, hi, fl)                                                                                      \
    { .path = p, .kind = K_REAL, .off = o, .def = d, .min = lo, .max = hi, .flags = fl }
#define ENUM(p, o, d, n, fl)                                                                                           \
    { .path = p, .kind = K_ENUM, .off = o, .def = d, .names = n, .flags = fl }
#define STRING(p, o, fl)                                                                                               \
    { .path = p, .kind = K_STRING, .off = o, .flags = fl }
#define UNSUPPORTED(p, v, h)                                                                                           \
    { .path = p, .kind = K_OFF, .off = NONE, .off_json = v, .hint = h }
#define INERT(p, h)                                                                                                    \
    { .path = p, .kind = K_INERT, .off = NONE, .hint = h }
#define SWITCHED_OFF(p) UNSUPPORTED(p, "{\"enabled\": false}", NULL)

#define ZO "zero_optimization."
#define OO ZO "offload_optimizer."
#define OP ZO "offload_param."
#define SP "scheduler.params."

const key zinf_config_keys[] = {
    // ---- batch and run ----
    INT("train_batch_size", OFF(train_batch_size), -1, 1, BIG, F_NULL),
    INT("train_micro_batch_size_per_gpu", OFF(train_micro_batch_size_per_gpu), -1, 1, BIG, F_NULL),
    INT("gradient_accumulation_steps", OFF(gradient_accumulation_steps), -1, 1, BIG, F_NULL),
    REAL("gradient_clipping", OFF(gradient_clipping), 0, 0, INFINITY, 0),
    INT("steps_per_print", OFF(steps_per_print), 10, 1, BIG, 0),
    BOOL("wall_clock_breakdown", OFF(wall_clock_breakdown), 0), // no effect: see rules
    INT("seed", OFF(seed), 42, 0, 4294967295.0, 0),
    INT("steps", OFF(steps), -1, 1, BIG, F_NULL),

    // ---- mixed precision ----
    SECTION("fp16", NONE, 0),
    BOOL("fp16.enabled", OFF(fp16.enabled), 0),
    REAL("fp16.loss_scale", OFF(fp16.loss_scale), 0, 0, INFINITY, 0),
    INT("fp16.initial_scale_power", OFF(fp16.initial_scale_power), 16, 0, 127, 0),
    INT("fp16.loss_scale_window", OFF(fp16.loss_scale_window), 1000, 1, BIG, 0),
    INT("fp16.hysteresis", OFF(fp16.hysteresis), 2, 1, BIG, 0),
    BOOL("fp16.consecutive_hysteresis", OFF(fp16.consecutive_hysteresis), 0),
    REAL("fp16.min_loss_scale", OFF(fp16.min_loss_scale), 1, 0, INFINITY, F_GT_MIN),
    UNSUPPORTED("fp16.auto_cast", "false", NULL),
    UNSUPPORTED("fp16.fp16_master_weights_and_grads", "false", "zinf keeps fp32 master weights"),
    {.path = "bf16", .kind = K_SECTION, .off = NONE, .alias = "bfloat16"},
    BOOL("bf16.enabled", OFF(bf16), 0),

    // ---- optimizer ----
    SECTION("optimizer", NONE, 0),
    ENUM("optimizer.type", OFF(optimizer.type), ZINF_OPT_ADAMW, optimizer_types, 0),
    SECTION("optimizer.params", NONE, 0),
    REAL("optimizer.params.lr", OFF(optimizer.lr), 1e-3, 0, INFINITY, 0),
    {.path = "optimizer.params.betas",
     .kind = K_REAL2,
     .off = OFF(optimizer.betas),
     .def = 0.9,
     .def2 = 0.999,
     .min = 0,
     .max = 1,
     .flags = F_LT_MAX},
    REAL("optimizer.params.eps", OFF(optimizer.eps), 1e-8, 0, INFINITY, 0),
    REAL("optimizer.params.weight_decay", OFF(optimizer.weight_decay), 0, 0, INFINITY, 0),
    BOOL("optimizer.params.adam_w_mode", OFF(optimizer.adam_w_mode), 1),
    BOOL("optimizer.params.bias_correction", OFF(optimizer.bias_correction), 1),
    UNSUPPORTED("optimizer.params.amsgrad", "false", NULL),
    UNSUPPORTED("optimizer.params.torch_adam", "false", "zinf always runs its own Adam kernels"),

    // ---- learning-rate schedule (optional: constant lr without it) ----
    SECTION("scheduler", NONE, F_OPTIONAL),
    ENUM("scheduler.type", OFF(scheduler.type), 0, scheduler_types, F_REQUIRED),
    SECTION("scheduler.params", NONE, 0),
    REAL(SP "warmup_min_lr", OFF(scheduler.warmup_min_lr), 0, 0, INFINITY, F_WLR | F_WDLR),
    REAL(SP "warmup_max_lr", OFF(scheduler.warmup_max_lr), 1e-3, 0, INFINITY, F_WLR | F_WDLR),
    INT(SP "warmup_num_steps", OFF(scheduler.warmup_num_steps), 1000, 0, BIG, F_WLR | F_WDLR | F_WCLR),
    ENUM(SP "warmup_type", OFF(scheduler.warmup_type), ZINF_WARMUP_LOG, warmup_types, F_WLR | F_WDLR | F_WCLR),
    INT(SP "total_num_steps", OFF(scheduler.total_num_steps), -1, 1, BIG, F_NULL | F_WDLR | F_WCLR),
    REAL(SP "warmup_min_ratio", OFF(scheduler.warmup_min_ratio), 0, 0, 1, F_WCLR),
    REAL(SP "cos_min_ratio", OFF(scheduler.cos_min_ratio), 1e-4, 0, 1, F_WCLR),
    UNSUPPORTED(SP "last_batch_iteration", "-1", "resume from a zinf checkpoint instead"),

    // ---- ZeRO ----
    SECTION("zero_optimization", NONE, 0),
    INT(ZO "stage", OFF(zero.stage), 0, 0, 3, 0),
    BOOL(ZO "contiguous_gradients", OFF(zero.contiguous_gradients), 1),
    BOOL(ZO "reduce_scatter", OFF(zero.reduce_scatter), 1),
    BOOL(ZO "round_robin_gradients", OFF(zero.round_robin_gradients), 0), // no effect: see rules
    {.path = ZO "stage3_gather_16bit_weights_on_model_save",
     .kind = K_BOOL,
     .off = OFF(zero.gather_16bit_weights_on_model_save),
     .alias = "gather_16bit_weights_on_model_save"},
    INT(ZO "reduce_bucket_size", OFF(zero.reduce_bucket_size), 5e8, 1, BIG, 0),
    BOOL(ZO "allgather_partitions", OFF(zero.allgather_partitions), 1),
    INT(ZO "allgather_bucket_size", OFF(zero.allgather_bucket_size), 5e8, 1, BIG, 0),
    BOOL(ZO "overlap_comm", OFF(zero.overlap_comm), 0), // default stage == 3: see rules
    // 0 is DeepSpeed's too: every parameter a sub-group there, every module here
    INT(ZO "sub_group_size", OFF(zero.sub_group_size), 1e9, 0, BIG, 0),
    {.path = ZO "stage3_prefetch_bucket_size",
     .kind = K_INT,
     .off = OFF(zero.prefetch_bucket_size),
     .def = 5e7,
     .min = 0,
     .max = BIG,
     .alias = "prefetch_bucket_size"},
    {.path = ZO "stage3_param_persistence_threshold",
     .kind = K_INT,
     .off = OFF(zero.param_persistence_threshold),
     .def = 1e5,
     .min = 0,
     .max = BIG,
     .alias = "param_persistence_threshold"},
    {.path = ZO "stage3_max_live_parameters",
     .kind = K_INT,
     .off = OFF(zero.max_live_parameters),
     .def = 1e9,
     .min = 0,
     .max = BIG,
     .alias = "max_live_parameters"},
    {.path = ZO "stage3_max_reuse_distance",
     .kind = K_INT,
     .off = OFF(zero.max_reuse_distance),
     .def = 1e9,
     .min = 0,
     .max = BIG,
     .alias = "max_reuse_distance"},

    SECTION(ZO "offload_optimizer", NONE, F_NULL),
    ENUM(OO "device", OFF(zero.offload_optimizer.device), ZINF_OFFLOAD_NONE, offload_devices, 0),
    {.path = OO "nvme_path", .kind = K_PATHS, .off = OFF(zero.offload_optimizer.nvme_path), .flags = F_NULL},
    INT(OO "buffer_count", OFF(zero.offload_optimizer.buffer_count), 4, 1, 1024, 0),
    BOOL(OO "pin_memory", OFF(zero.offload_optimizer.pin_memory), 1),         // zinf: pinned, budgeted
    BOOL(OO "pipeline_read", OFF(zero.offload_optimizer.pipeline_read), 1),   // zinf: on
    BOOL(OO "pipeline_write", OFF(zero.offload_optimizer.pipeline_write), 1), // zinf: on
    BOOL(OO "fast_init", OFF(zero.offload_optimizer.fast_init), 0),
    BOOL(OO "super_offload", OFF(zero.offload_optimizer.super_offload), 1),                    // zinf: on
    REAL(OO "cpuadam_cores_perc", OFF(zero.offload_optimizer.cpuadam_cores_perc), 1, 0, 1, 0), // zinf: all
    REAL(OO "ratio", OFF(zero.offload_optimizer.ratio), 1, 0, 1, 0),

    SECTION(ZO "offload_param", NONE, F_NULL),
    ENUM(OP "device", OFF(zero.offload_param.device), ZINF_OFFLOAD_NONE, offload_devices, 0),
    {.path = OP "nvme_path", .kind = K_PATHS, .off = OFF(zero.offload_param.nvme_path), .flags = F_NULL},
    INT(OP "buffer_count", OFF(zero.offload_param.buffer_count), 5, 1, 1024, 0),
    INT(OP "buffer_size", OFF(zero.offload_param.buffer_size), 1e8, 1, BIG, 0),
    INT(OP "max_in_cpu", OFF(zero.offload_param.max_in_cpu), 1e9, 0, BIG, 0),
    BOOL(OP "pin_memory", OFF(zero.offload_param.pin_memory), 1), // zinf: pinned, budgeted

    BOOL(ZO "zero_quantized_weights", OFF(zero.quantized_weights), 0),
    INT(ZO "zero_hpz_partition_size", OFF(zero.hpz_partition_size), 1, 1, 1 << 20, 0),
    BOOL(ZO "zero_quantized_gradients", OFF(zero.quantized_gradients), 0),
    INT(ZO "mics_shard_size", OFF(zero.mics_shard_size), -1, -1, 1 << 20, 0),
    BOOL(ZO "mics_hierarchical_params_gather", OFF(zero.mics_hierarchical_params_gather), 0),
    UNSUPPORTED(ZO "zero_quantized_nontrainable_weights", "false",
                "zinf trains every parameter: there are no frozen ones to keep quantized"),
    UNSUPPORTED(ZO "elastic_checkpoint", "false", "zinf re-slices checkpoints for a new world size by itself"),
    UNSUPPORTED(ZO "load_from_fp32_weights", "true", "zinf checkpoints always hold the fp32 master weights"),
    UNSUPPORTED(ZO "legacy_stage1", "false", NULL),
    UNSUPPORTED(ZO "pipeline_loading_checkpoint", "false", NULL),
    {.path = ZO "stage3_model_persistence_threshold",
     .kind = K_OFF,
     .off = NONE,
     .off_json = "9223372036854775807",
     .alias = "model_persistence_threshold"},
    UNSUPPORTED(ZO "cpu_offload", "false", "deprecated in DeepSpeed: use offload_optimizer.device \"cpu\""),
    UNSUPPORTED(ZO "cpu_offload_param", "false", "deprecated in DeepSpeed: use offload_param.device \"cpu\""),
    UNSUPPORTED(ZO "cpu_offload_use_pin_memory", "false", "deprecated in DeepSpeed: use offload_*.pin_memory"),
    INERT(ZO "ignore_unused_parameters", "zinf's models have no unused parameters"),
    INERT(ZO "memory_efficient_linear", "zinf's linear layers never keep extra copies"),
    INERT(ZO "override_module_apply", "a PyTorch module hook"),

    // ---- async IO ----
    SECTION("aio", NONE, 0),
    {.path = "aio.block_size",
     .kind = K_BYTES,
     .off = OFF(aio.block_size),
     .def = 1048576,
     .min = 4096,
     .max = 1073741824},
    INT("aio.queue_depth", OFF(aio.queue_depth), 8, 1, 4096, 0),
    {.path = "aio.intra_op_parallelism",
     .kind = K_INT,
     .off = OFF(aio.intra_op_parallelism),
     .def = 1,
     .min = 1,
     .max = 256,
     .alias = "thread_count"},
    BOOL("aio.single_submit", OFF(aio.single_submit), 0),
    BOOL("aio.overlap_events", OFF(aio.overlap_events), 1),
    BOOL("aio.checksum", OFF(aio.checksum), 1),
    UNSUPPORTED("aio.use_gds", "false", "GPUDirect Storage is not implemented"),

    // ---- activation checkpointing (optional: present = every block recomputes) ----
    SECTION("activation_checkpointing", OFF(activation_checkpointing.enabled), F_OPTIONAL),
    UNSUPPORTED("activation_checkpointing.partition_activations", "false", "zinf has no model parallelism"),
    BOOL("activation_checkpointing.cpu_checkpointing", OFF(activation_checkpointing.cpu_checkpointing), 0),
    UNSUPPORTED("activation_checkpointing.contiguous_memory_optimization", "false",
                "zinf's checkpoints are one buffer already, on the device or in pinned host memory"),
    UNSUPPORTED("activation_checkpointing.number_checkpoints", "null", "zinf checkpoints every block"),
    UNSUPPORTED("activation_checkpointing.synchronize_checkpoint_boundary", "false", NULL),
    UNSUPPORTED("activation_checkpointing.profile", "false", NULL),

    // ---- monitors: rank 0 writes each step's figures (runtime/monitor) ----
    SECTION("tensorboard", NONE, 0),
    BOOL("tensorboard.enabled", OFF(tensorboard.enabled), 0),
    STRING("tensorboard.output_path", OFF(tensorboard.output_path), F_NULL | F_EMPTY),
    STRING("tensorboard.job_name", OFF(tensorboard.job_name), F_NULL),
    SECTION("csv_monitor", NONE, 0),
    BOOL("csv_monitor.enabled", OFF(csv_monitor.enabled), 0),
    STRING("csv_monitor.output_path", OFF(csv_monitor.output_path), F_NULL | F_EMPTY),
    STRING("csv_monitor.job_name", OFF(csv_monitor.job_name), F_NULL),

    // ---- the comms logger (runtime/comm/log.c) ----
    SECTION("comms_logger", NONE, 0),
    BOOL("comms_logger.enabled", OFF(comms_logger.enabled), 0),
    BOOL("comms_logger.verbose", OFF(comms_logger.verbose), 0),
    BOOL("comms_logger.prof_all", OFF(comms_logger.prof_all), 1),
    {.path = "comms_logger.prof_ops", .kind = K_NAMES, .off = OFF(comms_logger.prof_ops), .names = comm_ops},
    INERT("comms_logger.debug", "zinf's records already name each collective's path (mpi, nccl, sim) and ranks"),

    // ---- the flops profiler (the engine's op profile of one step) ----
    SECTION("flops_profiler", NONE, 0),
    BOOL("flops_profiler.enabled", OFF(flops_profiler.enabled), 0),
    INT("flops_profiler.profile_step", OFF(flops_profiler.profile_step), 1, 1, BIG, 0),
    BOOL("flops_profiler.detailed", OFF(flops_profiler.detailed), 1),
    STRING("flops_profiler.output_file", OFF(flops_profiler.output_file), F_NULL),
    INERT("flops_profiler.module_depth", "zinf profiles the device's ops, not a module tree"),
    INERT("flops_profiler.top_modules", "zinf profiles the device's ops, not a module tree"),
    INERT("flops_profiler.recompute_fwd_factor", "zinf counts the model FLOPs without recomputation"),

    // ---- DeepSpeed features zinf does not have ----
    UNSUPPORTED("prescale_gradients", "false", NULL),
    UNSUPPORTED("gradient_predivide_factor", "1.0", NULL),
    UNSUPPORTED("communication_data_type", "null", "zinf reduces gradients in fp32"),
    UNSUPPORTED("sparse_gradients", "false", NULL),
    UNSUPPORTED("memory_breakdown", "false", "zinf logs memory per tier every step"),
    UNSUPPORTED("dump_state", "false", NULL),
    SWITCHED_OFF("amp"),
    UNSUPPORTED("wandb", "{\"enabled\": false}",
                "zinf writes TensorBoard event files and CSVs: enable tensorboard or csv_monitor"),
    UNSUPPORTED("comet", "{\"enabled\": false}",
                "zinf writes TensorBoard event files and CSVs: enable tensorboard or csv_monitor"),
    SWITCHED_OFF("elasticity"),
    SWITCHED_OFF("autotuning"),
    SWITCHED_OFF("data_efficiency"),
    SWITCHED_OFF("curriculum_learning"),
    UNSUPPORTED("hybrid_engine", "{\"enabled\": false}", "zinf has no hybrid (RLHF generation) engine"),
    INERT("zero_allow_untested_optimizer", "zinf builds its optimizer from the optimizer section"),
    INERT("zero_force_ds_cpu_optimizer", "zinf builds its optimizer from the optimizer section"),

    // ---- zinf's own sections ----
    SECTION("model", OFF(model.present), F_OPTIONAL),
    ENUM("model.preset", OFF(model.preset), ZINF_PRESET_NONE, presets, 0),
    INT("model.n_layer", OFF(model.n_layer), -1, 1, ZINF_MODEL_MAX_LAYERS, F_NULL),
    INT("model.n_head", OFF(model.n_head), -1, 1, ZINF_MODEL_MAX_HEADS, F_NULL),
    INT("model.n_embd", OFF(model.n_embd), -1, 1, ZINF_MODEL_MAX_EMBD, F_NULL),
    INT("model.vocab_size", OFF(model.vocab_size), -1, 1, ZINF_MODEL_MAX_VOCAB, F_NULL),
    INT("model.block_size", OFF(model.block_size), -1, 1, ZINF_MODEL_MAX_BLOCK, F_NULL),
    // The Llama family's keys, named as LlamaConfig names them where it has them; a
    // preset or a model directory gives them all (rules.c).
    ENUM("model.arch", OFF(model.arch), ZINF_ARCH_GPT2, archs, 0),
    INT("model.n_kv_head", OFF(model.n_kv_head), -1, 1, ZINF_MODEL_MAX_HEADS, F_NULL | F_LLAMA),
    INT("model.head_dim", OFF(model.head_dim), -1, 2, ZINF_MODEL_MAX_HEAD_DIM, F_NULL | F_LLAMA),
    INT("model.intermediate_size", OFF(model.intermediate_size), -1, 1, ZINF_MODEL_MAX_FFN, F_NULL | F_LLAMA),
    REAL("model.norm_eps", OFF(model.norm_eps), 1e-5, 0, 1, F_GT_MIN | F_LLAMA),
    REAL("model.rope_theta", OFF(model.rope_theta), 10000, 1, INFINITY, F_LLAMA),
    SECTION("model.rope_scaling", NONE, F_NULL | F_LLAMA),
    {.path = "model.rope_scaling.rope_type",
     .kind = K_ENUM,
     .off = OFF(model.rope_type),
     .def = ZINF_ROPE_DEFAULT,
     .names = rope_types,
     .alias = "type",
     .flags = F_LLAMA},
    REAL("model.rope_scaling.factor", OFF(model.rope_factor), 1, 1, INFINITY, F_LLAMA),
    REAL("model.rope_scaling.low_freq_factor", OFF(model.rope_low_freq_factor), 1, 0, INFINITY, F_GT_MIN | F_LLAMA),
    REAL("model.rope_scaling.high_freq_factor", OFF(model.rope_high_freq_factor), 4, 0, INFINITY, F_GT_MIN | F_LLAMA),
    INT("model.rope_scaling.original_max_position_embeddings", OFF(model.rope_original_max_position), -1, 1,
        ZINF_MODEL_MAX_POSITIONS, F_NULL | F_LLAMA),
    INT("model.sliding_window", OFF(model.sliding_window), -1, 1, ZINF_MODEL_MAX_POSITIONS, F_NULL | F_LLAMA),
    INT("model.max_window_layers", OFF(model.max_window_layers), -1, 0, ZINF_MODEL_MAX_LAYERS, F_NULL | F_LLAMA),
    {.path = "model.tie_word_embeddings",
     .kind = K_BOOL,
     .off = OFF(model.tie_word_embeddings),
     .def = 1,
     .flags = F_LLAMA},
    {.path = "model.attention_bias", .kind = K_BOOL, .off = OFF(model.attention_bias), .flags = F_LLAMA},
    {.path = "model.mlp_bias", .kind = K_BOOL, .off = OFF(model.mlp_bias), .flags = F_LLAMA},
    STRING("model.init_from", OFF(model.init_from), F_NULL),

    SECTION("data", OFF(data.present), F_OPTIONAL),
    STRING("data.path", OFF(data.path), F_NULL), // zinf train needs it; zinf.Engine is given its tokens
    ENUM("data.format", OFF(data.format), ZINF_DATA_TOKENS_U16, data_formats, 0),
    INT("data.seq_len", OFF(data.seq_len), -1, 1, 1048576, F_NULL),
    ENUM("data.sampling", OFF(data.sampling), ZINF_SAMPLING_RANDOM, samplings, 0),

    SECTION("device", NONE, 0),
    ENUM("device.backend", OFF(device.backend), ZINF_BACKEND_AUTO, backends, 0),
    ENUM("device.attention", OFF(device.attention), ZINF_ATTENTION_AUTO, attentions, 0),
    {.path = "device.memory_limit",
     .kind = K_BYTES,
     .off = OFF(device.memory_limit),
     .def = -1,
     .min = 1048576,
     .max = BIG,
     .flags = F_NULL},
    {.path = "device.pinned_memory_limit",
     .kind = K_BYTES,
     .off = OFF(device.pinned_memory_limit),
     .def = -1,
     .min = 0,
     .max = BIG,
     .flags = F_NULL},
    SECTION("device.sim", NONE, F_SIM),
    ENUM("device.sim.gpu", OFF(device.sim.gpu), ZINF_SIM_H100, sim_gpus, F_SIM),
    REAL("device.sim.tflops", OFF(device.sim.tflops), -1, 0, 1e6, F_NULL | F_GT_MIN | F_SIM),
    REAL("device.sim.hbm_gbps", OFF(device.sim.hbm_gbps), -1, 0, 1e6, F_NULL | F_GT_MIN | F_SIM),
    REAL("device.sim.pcie_gbps", OFF(device.sim.pcie_gbps), -1, 0, 1e6, F_NULL | F_GT_MIN | F_SIM),
    REAL("device.sim.nvlink_gbps", OFF(device.sim.nvlink_gbps), -1, 0, 1e6, F_NULL | F_GT_MIN | F_SIM),
    REAL("device.sim.net_gbps", OFF(device.sim.net_gbps), -1, 0, 1e6, F_NULL | F_GT_MIN | F_SIM),
    {.path = "device.sim.memory",
     .kind = K_BYTES,
     .off = OFF(device.sim.memory),
     .def = -1,
     .min = 1048576,
     .max = BIG,
     .flags = F_NULL | F_SIM},

    SECTION("memory", NONE, 0),
    INT("memory.head_chunk_tokens", OFF(memory.head_chunk_tokens), -1, 1, 1 << 30, F_NULL),
    INT("memory.tile_bound", OFF(memory.tile_bound), -1, 2048, BIG, F_NULL),

    SECTION("checkpoint", NONE, 0),
    STRING("checkpoint.dir", OFF(checkpoint.dir), F_NULL),
    INT("checkpoint.interval", OFF(checkpoint.interval), 0, 0, BIG, 0),
    INT("checkpoint.keep", OFF(checkpoint.keep), 0, 0, BIG, 0),
    STRING("checkpoint.load", OFF(checkpoint.load), F_NULL),
    ENUM("checkpoint.on_error", OFF(checkpoint.on_error), ZINF_CKPT_ON_ERROR_STOP, ckpt_on_error, 0),
    INERT("checkpoint.tag_validation", "zinf checkpoints carry no tags; each is checked against its checksums"),
    UNSUPPORTED("checkpoint.use_node_local_storage", "false", NULL),
    UNSUPPORTED("checkpoint.load_universal", "false", "zinf checkpoints load at any world size as they are"),
};

const size_t zinf_config_nkeys = sizeof zinf_config_keys / sizeof zinf_config_keys[0];

const char *config_key_name(const char *path) {
    const char *dot = strrchr(path, '.');
    return dot ? dot + 1 : path;
}

size_t config_key_parent_len(const char *path) {
    const char *dot = strrchr(path, '.');
    return dot ? (size_t)(dot - path) : 0;
}

const key *config_key_find(const char *path) {
    for (size_t i = 0; i < zinf_config_nkeys; i++)
        if (strcmp(zinf_config_keys[i].path, path) == 0) return &zinf_config_keys[i];
    return NULL;
}
