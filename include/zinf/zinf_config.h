// zinf config: the training config (JSON, DeepSpeed-compatible keys plus zinf's own
// sections), parsed, validated and normalized. The struct is public: programs read it
// and may adjust it before creating an engine.
#ifndef ZINF_CONFIG_H
#define ZINF_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "zinf_aio.h"
#include "zinf_base.h"
#include "zinf_gpu.h"
#include "zinf_offload.h"

#ifdef __cplusplus
extern "C" {
#endif

// One or more directories; several stripe the swap store (one per drive).
typedef struct zinf_path_list {
    char **paths;
    int count;
} zinf_path_list;

typedef struct zinf_offload_optimizer_config {
    zinf_offload_device device;
    zinf_path_list nvme_path;
    int64_t buffer_count;
    bool pin_memory;
    bool pipeline_read;  // read sub-group i+1 while i computes
    bool pipeline_write; // write sub-group i-1 while i computes
    bool fast_init;
    bool super_offload; // cpu: update each sub-group under the backward, rolled back when the step clips or overflows
    // Chosen for the machine with super_offload (zinf_engine_plan): the elements of
    // sub-groups the backward may update at once, backed up in host memory; 0: none.
    int64_t speculate_elements;
    bool speculate_elements_chosen;
    double cpuadam_cores_perc; // the share of the physical cores CPU Adam's threads take
    // DeepSpeed's partial offload (stage 3): the share of the sub-groups offloaded, the
    // last ones in forward order; the first ones keep their states on the device.
    double ratio;
} zinf_offload_optimizer_config;

typedef struct zinf_offload_param_config {
    zinf_offload_device device;
    zinf_path_list nvme_path;
    int64_t buffer_count;
    int64_t buffer_size; // elements per swap buffer
    int64_t max_in_cpu;  // elements kept resident in host memory with nvme
    bool pin_memory;
} zinf_offload_param_config;

typedef struct zinf_zero_config {
    int64_t stage; // 0..3
    bool contiguous_gradients;
    bool reduce_scatter;
    bool round_robin_gradients;              // accepted; zinf's gradient path has no use for it
    bool gather_16bit_weights_on_model_save; // each save also writes the model as a Hugging Face directory
    int64_t reduce_bucket_size;              // elements
    // Whether the config gave these two; left out, the engine chooses them for the
    // machine (zinf_plan_choice) instead of keeping DeepSpeed's defaults.
    bool reduce_bucket_size_given, sub_group_size_given;
    bool allgather_partitions;
    int64_t allgather_bucket_size; // elements
    bool overlap_comm;             // default: stage == 3, as DeepSpeed
    int64_t sub_group_size;        // elements per optimizer tile; 0: one per module
    int64_t prefetch_bucket_size;  // elements (stage3_prefetch_bucket_size)
    int64_t param_persistence_threshold;
    int64_t max_live_parameters;
    int64_t max_reuse_distance;
    bool quantized_weights;     // ZeRO++ qwZ: stage-3 gathers move int8 weights
    int64_t hpz_partition_size; // ZeRO++ hpZ: ranks of a secondary group (1: off)
    bool quantized_gradients;   // ZeRO++ qgZ: stage-3 gradient reduce-scatter as int4 all-to-alls
    int64_t mics_shard_size;    // MiCS: ranks a model's states are partitioned over (-1: all)
    bool mics_hierarchical_params_gather;
    zinf_offload_optimizer_config offload_optimizer;
    zinf_offload_param_config offload_param;
} zinf_zero_config;

typedef struct zinf_fp16_config {
    bool enabled;
    double loss_scale; // 0: dynamic
    int64_t initial_scale_power;
    int64_t loss_scale_window;
    int64_t hysteresis;
    bool consecutive_hysteresis;
    double min_loss_scale;
} zinf_fp16_config;

typedef enum zinf_optimizer_type { ZINF_OPT_ADAM = 0, ZINF_OPT_ADAMW = 1 } zinf_optimizer_type;

typedef struct zinf_optimizer_config {
    zinf_optimizer_type type;
    double lr;
    double betas[2];
    double eps;
    double weight_decay;
    bool adam_w_mode; // decoupled weight decay; DeepSpeed's default even for "Adam"
    bool bias_correction;
} zinf_optimizer_config;

typedef enum zinf_scheduler_type {
    ZINF_SCHED_NONE = 0, // constant lr
    ZINF_SCHED_WARMUP_LR = 1,
    ZINF_SCHED_WARMUP_DECAY_LR = 2,
    ZINF_SCHED_WARMUP_COSINE_LR = 3,
} zinf_scheduler_type;

typedef enum zinf_warmup_type { ZINF_WARMUP_LOG = 0, ZINF_WARMUP_LINEAR = 1 } zinf_warmup_type;

typedef struct zinf_scheduler_config {
    zinf_scheduler_type type;
    double warmup_min_lr; // WarmupLR, WarmupDecayLR
    double warmup_max_lr; // WarmupLR, WarmupDecayLR
    int64_t warmup_num_steps;
    zinf_warmup_type warmup_type;
    int64_t total_num_steps; // WarmupDecayLR, WarmupCosineLR
    double warmup_min_ratio; // WarmupCosineLR
    double cos_min_ratio;    // WarmupCosineLR
} zinf_scheduler_config;

typedef struct zinf_aio_config {
    int64_t block_size;           // bytes per request
    int64_t queue_depth;          // requests in flight per ring
    int64_t intra_op_parallelism; // rings (workers); alias thread_count
    bool single_submit;           // accepted; no meaning for io_uring
    bool overlap_events;          // accepted; no meaning for io_uring
    bool checksum;                // CRC-32C of every swap block, checked on read (zinf's key)
} zinf_aio_config;

typedef struct zinf_activation_checkpointing_config {
    bool enabled; // the section is present: every block recomputes its forward
    // The blocks' saved inputs in pinned host memory, copied out as the forward writes
    // them and back ahead of each block's recompute (DeepSpeed's key, which there needs
    // partition_activations; zinf has no model parallelism and offloads them whole).
    bool cpu_checkpointing;
} zinf_activation_checkpointing_config;

typedef enum zinf_model_preset {
    ZINF_PRESET_NONE = 0,
    ZINF_PRESET_GPT2 = 1,
    ZINF_PRESET_GPT2_MEDIUM = 2,
    ZINF_PRESET_GPT2_LARGE = 3,
    ZINF_PRESET_GPT2_XL = 4,
    ZINF_PRESET_LLAMA_3_2_1B = 5,
    ZINF_PRESET_LLAMA_3_2_3B = 6,
    ZINF_PRESET_LLAMA_3_1_8B = 7,
    ZINF_PRESET_MISTRAL_7B = 8,
    ZINF_PRESET_QWEN2_5_0_5B = 9,
    ZINF_PRESET_QWEN2_5_7B = 10,
    ZINF_PRESET_SMOLLM2_135M = 11,
} zinf_model_preset;

// The architecture, as Hugging Face's model_type names it: GPT-2, or the Llama family
// (Llama, Mistral and Qwen2 compute alike; they differ in biases, window and names).
typedef enum zinf_model_arch {
    ZINF_ARCH_GPT2 = 0,
    ZINF_ARCH_LLAMA = 1,
    ZINF_ARCH_MISTRAL = 2,
    ZINF_ARCH_QWEN2 = 3,
} zinf_model_arch;

// Hugging Face's rope types zinf computes (rope_scaling.rope_type).
typedef enum zinf_rope_type {
    ZINF_ROPE_DEFAULT = 0,
    ZINF_ROPE_LINEAR = 1,
    ZINF_ROPE_DYNAMIC = 2,
    ZINF_ROPE_LLAMA3 = 3,
} zinf_rope_type;

// The largest model sizes zinf takes, from a config, a model directory or a checkpoint:
// within them every size the models form from two of them (4 x n_embd, n_head x head_dim)
// fits in an int.
enum {
    ZINF_MODEL_MAX_LAYERS = 1024,       // n_layer, max_window_layers
    ZINF_MODEL_MAX_HEADS = 1024,        // n_head, n_kv_head
    ZINF_MODEL_MAX_EMBD = 1 << 20,      // n_embd
    ZINF_MODEL_MAX_HEAD_DIM = 1024,     // head_dim
    ZINF_MODEL_MAX_FFN = 1 << 22,       // intermediate_size
    ZINF_MODEL_MAX_VOCAB = 1 << 24,     // vocab_size
    ZINF_MODEL_MAX_BLOCK = 1 << 20,     // block_size
    ZINF_MODEL_MAX_POSITIONS = 1 << 24, // sliding_window, original_max_position_embeddings
};

typedef struct zinf_model_config {
    bool present;
    zinf_model_preset preset;
    zinf_model_arch arch;
    int64_t n_layer, n_head, n_embd, vocab_size, block_size;
    // The Llama family's (GPT-2's are fixed: n_head, n_embd / n_head, 4 n_embd, 1e-5).
    int64_t n_kv_head, head_dim, intermediate_size;
    double norm_eps;   // RMSNorm's rms_norm_eps
    double rope_theta; // rotary base
    zinf_rope_type rope_type;
    double rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    int64_t rope_original_max_position; // original_max_position_embeddings; -1: block_size
    int64_t sliding_window;             // keys a query sees, itself included; -1: all
    int64_t max_window_layers;          // Qwen2: layers below this one see all keys; -1: 0
    bool tie_word_embeddings;           // the head is the embedding (GPT-2: always)
    bool attention_bias, mlp_bias;      // Llama's: biases on q, k, v, o / gate, up, down
    char *init_from;                    // safetensors file or Hugging Face model directory, or NULL
} zinf_model_config;

// The model section a Hugging Face model directory implies (DIR/config.json, read as
// transformers reads it, with its config class's defaults for what it leaves out):
// model_type gpt2, llama, mistral or qwen2; both rope forms (rope_theta + rope_scaling,
// and rope_parameters). It fills m's sizes where they are not given (< 0) and sets the
// rest. A given size that differs, another model_type or rope type, or a model zinf
// would compute differently (activation, GPT-2's epsilon or MLP width, an untied GPT-2
// head, attention scaling) fails naming the file and the key.
zinf_status zinf_config_model_from_hf(const char *dir, zinf_model_config *m);

typedef enum zinf_data_format {
    ZINF_DATA_TOKENS_U16 = 0,
    ZINF_DATA_TEXT_BYTES = 1,
    ZINF_DATA_TOKENS_U32 = 2,
    ZINF_DATA_MEGATRON = 3, // path: the .bin or the prefix of a Megatron-LM .bin / .idx pair
} zinf_data_format;
typedef enum zinf_sampling { ZINF_SAMPLING_RANDOM = 0, ZINF_SAMPLING_SEQUENTIAL = 1 } zinf_sampling;

typedef struct zinf_data_config {
    bool present;
    char *path;
    zinf_data_format format;
    int64_t seq_len; // default: model.block_size
    zinf_sampling sampling;
} zinf_data_config;

// The files of the Megatron dataset that data.path names: PREFIX.bin and PREFIX.idx for
// a path PREFIX.bin or PREFIX. Both are malloc'd; the caller frees them.
zinf_status zinf_data_megatron_files(const char *path, char **bin, char **idx);

typedef struct zinf_device_config {
    zinf_backend backend;
    int64_t memory_limit;        // bytes; -1 (null): the device's own capacity (host: its default)
    int64_t pinned_memory_limit; // bytes of pinned host memory per rank; -1 (null): half the
                                 // memory available, within the locked-memory limit
    zinf_sim_params sim;         // backend "sim": the modeled GPU; -1 (null): the preset's rates
    zinf_attention_impl attention;
} zinf_device_config;

// zinf's memory-centric features (the memory section).
typedef struct zinf_memory_config {
    // Tokens whose logits the output layer computes at once (the head and the
    // cross-entropy run chunk by chunk); -1 (null): zinf chooses from the device's
    // capacity (zinf_plan_choice), all tokens at once where their logits are small.
    int64_t head_chunk_tokens;
    // Stage 3: a module whose gathered parameters exceed this many elements, and that
    // the model can compute in parts (the embedding, the head and the MLPs), is gathered
    // and computed tile by tile, each tile at most this many elements (but one unit of
    // 2048 elements, or of whole rows for the head, per rank, and an MLP's norm), and its
    // gradient reduced tile by tile; -1 (null): every module is gathered whole.
    int64_t tile_bound;
} zinf_memory_config;

// DeepSpeed's tensorboard and csv_monitor sections: rank 0 writes every step's figures
// under output_path/job_name (an event file; one CSV per figure).
typedef struct zinf_monitor_config {
    bool enabled;
    char *output_path; // NULL or "": the working directory
    char *job_name;    // NULL: "DeepSpeedJobName", DeepSpeed's default
} zinf_monitor_config;

// DeepSpeed's comms_logger: the collectives of the kinds chosen (a bit per zinf_comm_op)
// timed and counted, the summary logged by rank 0 every steps_per_print steps and when
// the engine is destroyed; verbose: each collective as it completes.
typedef struct zinf_comms_logger_config {
    bool enabled, verbose, prof_all;
    unsigned prof_ops; // logged besides all of them with prof_all
} zinf_comms_logger_config;

// DeepSpeed's flops_profiler: the engine times every op of step profile_step on the
// device beside the sim model's time for it, and rank 0 writes the table (per op and
// shape with detailed, else per op) with the step's time, model FLOPs and TFLOPS to
// output_file, or logs it.
typedef struct zinf_flops_profiler_config {
    bool enabled, detailed;
    int64_t profile_step;
    char *output_file; // NULL: the log
} zinf_flops_profiler_config;

// What a training run does when a checkpoint cannot be written (a full or failing
// drive): stop (the previous checkpoint stays whole), or warn and train on.
typedef enum zinf_ckpt_on_error { ZINF_CKPT_ON_ERROR_STOP = 0, ZINF_CKPT_ON_ERROR_WARN = 1 } zinf_ckpt_on_error;

typedef struct zinf_checkpoint_config {
    char *dir;                   // NULL: no checkpoints
    int64_t interval;            // steps between saves; 0: only at the end of the run
    int64_t keep;                // newest checkpoints kept; 0: all
    char *load;                  // NULL, "latest" or a checkpoint directory
    zinf_ckpt_on_error on_error; // "stop" or "warn"
} zinf_checkpoint_config;

typedef struct zinf_config {
    int world_size; // the batch triple was resolved for this many ranks
    int64_t train_batch_size;
    int64_t train_micro_batch_size_per_gpu;
    int64_t gradient_accumulation_steps;
    double gradient_clipping; // 0: off
    int64_t steps_per_print;
    bool wall_clock_breakdown; // accepted; zinf train reports where each step's time went anyway
    int64_t seed;
    int64_t steps; // -1: not set (train then needs --steps)
    zinf_fp16_config fp16;
    bool bf16; // bf16.enabled
    zinf_optimizer_config optimizer;
    zinf_scheduler_config scheduler;
    zinf_zero_config zero;
    zinf_aio_config aio;
    zinf_activation_checkpointing_config activation_checkpointing;
    zinf_model_config model;
    zinf_data_config data;
    zinf_device_config device;
    zinf_memory_config memory;
    zinf_checkpoint_config checkpoint;
    zinf_monitor_config tensorboard, csv_monitor;
    zinf_comms_logger_config comms_logger;
    zinf_flops_profiler_config flops_profiler;
} zinf_config;

typedef struct zinf_config_options {
    const char *const *sets; // "key.path=value" overrides, applied in order
    int nsets;
    int world_size; // ranks the batch sizes are resolved for; 0: launcher's, else 1
} zinf_config_options;

// Read, validate and normalize the config file at path. On failure *cfg holds nothing to free, and zinf_last_error()
// names the file, the key path, the value and the rule: "zero_optimization.stage: 4 is out of range; expected an
// integer from 0 to 3". Malformed JSON is reported as FILE:LINE:COL.
zinf_status zinf_config_load(zinf_config *cfg, const char *path, const zinf_config_options *opts);
// The same from JSON text; name is what errors call it (e.g. the file name).
zinf_status zinf_config_parse(zinf_config *cfg, const char *json, const char *name, const zinf_config_options *opts);
// The normalized config as pretty-printed JSON (malloc'd; free()), every default
// filled in; it parses back to the same config.
zinf_status zinf_config_to_json(const zinf_config *cfg, char **out);
void zinf_config_free(zinf_config *cfg);

// The aio section as engine parameters: block_size, queue_depth, and
// intra_op_parallelism (or thread_count) as the number of rings. single_submit and
// overlap_events choose libaio's submission and completion styles; an io_uring ring
// always submits in batches and reaps completions as they arrive, so they set nothing.
zinf_aio_params zinf_config_aio_params(const zinf_config *cfg);

#ifdef __cplusplus
}
#endif
#endif
