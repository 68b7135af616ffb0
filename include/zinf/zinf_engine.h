// zinf engine: data-parallel training of a GPT with ZeRO stages 0-3. Each rank holds
// its share of the model states: stage 1 partitions the optimizer states, stage 2 also
// the gradients, stage 3 also the 16-bit parameters, which are gathered module by
// module when they are needed and released after.
//
// A program drives it like DeepSpeed's engine: for every micro-batch forward then
// backward, then step once per gradient_accumulation_steps micro-batches. Every rank
// makes the same calls in the same order.
#ifndef ZINF_ENGINE_H
#define ZINF_ENGINE_H

#include <stdint.h>

#include "zinf_base.h"
#include "zinf_comm.h"
#include "zinf_config.h"
#include "zinf_model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zinf_engine zinf_engine;

// Build the model cfg->model describes on cfg->device, lay out this rank's partition
// and initialize it: from model.init_from, else GPT-2's initialization drawn from
// `seed` (each element's value depends only on the seed and its place in the model, so
// every stage and world size starts from the same weights and no rank ever holds more
// than its partition). comm's size must be cfg->world_size; the engine borrows it.
zinf_status zinf_engine_create(zinf_engine **out, const zinf_config *cfg, zinf_comm *comm);
void zinf_engine_destroy(zinf_engine *e); // NULL is a no-op
const zinf_model *zinf_engine_model(const zinf_engine *e);
// The engine's device, for its profile (zinf_device_profile_start) and reports.
zinf_device *zinf_engine_device(const zinf_engine *e);

// Forward one micro-batch of n sequences (<= train_micro_batch_size_per_gpu) of
// seq_len tokens; *loss is its mean loss. Without a following backward it is an
// evaluation.
zinf_status zinf_engine_forward(zinf_engine *e, const int32_t *tokens, const int32_t *targets, int n, double *loss);
// Backward of the last forward; the gradients are reduced across ranks and added to
// this rank's fp32 gradient partition (at stage 1 each rank sums its micro-batches and
// the step's last backward reduces the sums).
zinf_status zinf_engine_backward(zinf_engine *e);

typedef struct zinf_step_info {
    int64_t step;      // optimizer steps taken so far, this one included (skipped too)
    double loss;       // mean loss over the step's micro-batches on every rank
    double lr;         // the learning rate this step used
    double grad_norm;  // global L2 norm of the gradient, before clipping (unscaled)
    double loss_scale; // the scale this step's gradients carried
    bool skipped;      // inf or NaN in the gradients: no update (fp16: the scale was lowered)
    // Wall seconds from the step's first forward (an evaluation's forward before it does
    // not count) to the end of zinf_engine_step.
    double step_seconds;
    // Where the time went since the last step: how long the compute stream waited for
    // gathered parameters (all of them, and those read from NVMe); the offloaded
    // optimizer's update and its wait on NVMe in it (the update runs in the background
    // under the next step's forward: the one reported is the one that ran since the
    // last step), and how long the compute stream stood idle because it had not yet
    // reached the modules forward needed (at stages 1-2 also their all-gathers; the
    // device's update runs under the next forward too at stages 0-2, and these waits
    // are for it); and the NVMe link (bytes, and
    // the seconds some read or write was in flight), and the 16-bit slices on disk that
    // the update handed to the parameter pool, which their gathers did not read back.
    double wait_params_s, wait_params_nvme_s;
    double optim_s, optim_io_wait_s, wait_optim_s;
    // With the optimizer on cpu: the seconds of the update spent under this step's
    // backward on the sub-groups whose gradients it made final (optim_s is the rest, under
    // the forward), how many sub-groups, and how many of them were restored and updated
    // again because the step clipped or overflowed (zinf_config's super_offload).
    double optim_backward_s;
    int optim_speculated, optim_rolled_back;
    int64_t nvme_read_bytes, nvme_write_bytes;
    double nvme_read_s, nvme_write_s;
    int64_t param_handoff_bytes;
    // Bytes this rank received from other ranks since the last step, from ranks on its
    // node and on other nodes (zinf_comm_get_bytes: each collective by its definition).
    int64_t comm_bytes_intra, comm_bytes_inter;
    // On a simulated device (device.backend "sim"): loss and grad_norm mean nothing (its
    // values are never computed, and never skip a step), and the device's modeled busy
    // seconds since the last step: kernels, the PCIe link each way, and the links to the
    // other GPUs (collectives). Zeros elsewhere.
    bool simulated;
    double device_compute_s, pcie_h2d_s, pcie_d2h_s, gpu_link_s;
} zinf_step_info;

// Clip, update and (stages 1-2) share the new 16-bit parameters; zero the gradients. The
// update may still run when it returns (offloaded, or on the device at stages 0-2): each
// module's next use, and every call that reads the states, waits for its own part.
// At stage 1 it needs gradient_accumulation_steps backward passes since the last step.
zinf_status zinf_engine_step(zinf_engine *e, zinf_step_info *info);

// Model FLOPs per token of a training step (forward and backward, no recompute): 6 per
// parameter, and attention's scores and weighted sums, 12 * n_layer * seq_len * n_head *
// head_dim (a sliding window's saving not counted). What TFLOPS figures divide.
double zinf_engine_flops_per_token(const zinf_engine *e);

// The fp16 loss scale the next step's gradients carry (1 without fp16).
double zinf_engine_loss_scale(const zinf_engine *e);

typedef enum zinf_state_kind {
    ZINF_STATE_PARAM = 0,      // fp32 master weights
    ZINF_STATE_GRAD = 1,       // the gradient accumulated since the last step, unscaled (stage 1 over
                               // several micro-batches: zeros until the step's last backward, which reduces it)
    ZINF_STATE_EXP_AVG = 2,    // Adam's first moment
    ZINF_STATE_EXP_AVG_SQ = 3, // Adam's second moment
} zinf_state_kind;

// The full fp32 value of one parameter (Hugging Face name without `transformer.`,
// e.g. "h.0.attn.c_attn.weight"), gathered from every rank's partition into out
// (numel floats) on every rank; DeepSpeed's safe_get_full_*. Collective.
zinf_status zinf_engine_get_full(zinf_engine *e, const char *name, zinf_state_kind kind, float *out);
// Set it on every rank (each keeps its part); setting PARAM also rewrites the 16-bit
// copy. Collective: every rank passes the same values.
zinf_status zinf_engine_set_full(zinf_engine *e, const char *name, zinf_state_kind kind, const float *in);

// A hex digest (16 digits and a NUL) of the full fp32 master weights in model order,
// the same on every rank: identical runs print identical digests. Collective.
zinf_status zinf_engine_weights_digest(zinf_engine *e, char out[17]);

// ---- checkpoints (the format: zinf_checkpoint.h) ----
// Between steps only, and collective: every rank calls them with the same arguments.

// Save the states after the last step as root/global_step<N> (root is made when
// missing; its parent must exist), then point root/latest at it and keep the newest
// `keep` step directories (0: all). data_position (training sequences consumed) and
// seed are stored for the trainer and come back from load. Optimizer states on NVMe
// are streamed from the swap store, through a buffer of a few MiB. A failure (a full
// disk, a rank that fails) removes the partial directory and leaves every earlier
// checkpoint and latest as they were; so does a crash at any moment. Leftovers of
// interrupted saves are removed by the next save.
zinf_status zinf_engine_save(zinf_engine *e, const char *root, int64_t keep, int64_t data_position, int64_t seed);

typedef struct zinf_ckpt_resume {
    int64_t step;          // optimizer steps taken when it was saved
    int64_t data_position; // as saved
    int64_t seed;
    int world_size; // of the run that saved it
    char dir[4096]; // the step directory
} zinf_ckpt_resume;

// Load a checkpoint (a root, whose latest is followed, or a step directory) saved at
// any stage and world size by a model of the same shape: every rank takes its part of
// the flat buffers, re-sliced when the world size differs, along with the step count,
// the scheduler's and the loss scaler's state. Checksums and sizes are checked; a
// corrupted or truncated file, a missing rank or another model fails naming the file
// and the tensor, and leaves the engine's states undefined (destroy it).
zinf_status zinf_engine_load(zinf_engine *e, const char *path, zinf_ckpt_resume *out);

// Where the engine's bytes live, for the plan and the log line.
typedef struct zinf_engine_memory {
    zinf_offload_device params_tier; // where params16 lives: NONE the device, CPU host memory,
                                     // NVME host memory for the first modules and NVMe after
    int64_t params16;                // 16-bit parameters (full, or this rank's slices at stage 3)
    int64_t params_host;             // of those, in host memory (cpu; nvme: the modules within max_in_cpu)
    int params_resident;             // nvme: modules kept in host memory
    int param_buffers;               // nvme: the pool slices on disk are read through, and each one's bytes
    int64_t param_buffer_bytes;
    int64_t gathered_max;               // device: most bytes of gathered parameters at once (stage 3), measured
    int hpz_ranks;                      // ZeRO++ hpZ: ranks of a secondary group (1: no hpZ)
    int64_t secondary;                  // hpZ: this rank's secondary partition, on the device, or in pinned
                                        // host memory when params_tier is not NONE
    zinf_offload_device optimizer_tier; // where the three below live: NONE is the device,
                                        // CPU pinned host memory, NVME the swap store
    int64_t master;                     // fp32 master weights of this rank's partition
    int64_t optim_states;               // exp_avg and exp_avg_sq
    int64_t grads32;                    // fp32 gradient partition (host memory when the optimizer is offloaded;
                                        // 0 where the step reads the backward's 16-bit gradients)
    // offload_optimizer.ratio below 1: the first sub-groups keep their states and
    // gradients on the device (16 bytes per element); the three above are the whole partition's.
    int subgroups_on_device;
    int64_t optimizer_device_numel;
    int64_t activations;                // device: the model's activations and scratch
    int64_t reduce_bufs;                // device: gradient buckets
    int64_t accumulated_grads;          // device: stage 1's whole fp32 gradient summed over micro-batches
    int64_t staging;                    // pinned host: communication and gradient staging
    int64_t activation_host;            // pinned host: the activation checkpoints (cpu_checkpointing)
    int64_t host;                       // host memory of the optimizer tier: states (cpu), gradients, IO buffers
    // Of host: the 16-bit output buffers, the swap buffers (nvme), the second place of
    // the speculated sub-groups (super_offload) (zinf_optim_tier_stats).
    int64_t optim_output, optim_swap_buffers, optim_speculation;
    int64_t pinned;                     // pinned host in all: staging, and the tiers' host memory where pin_memory
    int64_t pinned_budget;
    int64_t host_total; // host memory the tiers and staging hold, pinned or not
    int64_t nvme;       // the swap stores' files, both tiers
    int subgroups;      // offloaded optimizer: sub-groups per step, and the largest's elements
    int64_t subgroup_max;
    int optimizer_threads; // offloaded optimizer: CPU Adam's threads
    int64_t device_in_use, device_peak, device_capacity;
    int64_t partition_numel; // N_r: elements of this rank's partition
    int64_t model_numel;     // parameters of the model
} zinf_engine_memory;

void zinf_engine_memory_get(const zinf_engine *e, zinf_engine_memory *out);

// ---- the plan ----
// What an engine with cfg takes and moves per rank, worked out without a device, a
// communicator or an allocation: creation's own code, counting instead of taking, and a
// replay of two steps (the stage-3 gathers by the engine's own prefetcher); and whether
// that fits where it would run. cfg's world_size is not used: the target says where.
typedef struct zinf_plan_target {
    int world;               // ranks
    zinf_backend backend;    // HOST or CUDA (its attention workspace)
    bool nccl;               // collectives on device buffers (NCCL, or a sim device's modeled links); else
                             // through pinned staging
    int64_t device_capacity; // bytes the device may hold; <= 0: not known, not judged
    int local_ranks;         // ranks on one host: they share its memory
    zinf_host_mem host;      // that host's memory, for the host budgets
    int nodes;               // the ranks form this many nodes of world / nodes consecutive ranks (0: 1)
    // The model's attention workspace as the run's device counts it (a CUDA device with
    // cuDNN's attention asks what its plans need, known once it is open); 0: the
    // backend's own count, all a plan without a device has.
    int64_t attention_workspace;
} zinf_plan_target;

// Where zinf_engine_create(cfg, comm) would make its engine, found without making it:
// the backend device.backend comes to, NCCL between ranks where each on a host has a
// GPU of its own and the build has NCCL, the device's capacity (device.memory_limit or
// the card's memory) and this host's memory. Creation makes exactly this.
zinf_status zinf_engine_target(const zinf_config *cfg, const zinf_comm *comm, zinf_plan_target *out);

// One budget's verdict: need against have (have < 0: not known).
typedef struct zinf_plan_budget {
    int64_t need, have;
} zinf_plan_budget;

typedef enum zinf_plan_fit {
    ZINF_PLAN_FITS = 0,         // within every budget
    ZINF_PLAN_EXCEEDS = 1,      // past at least one budget: creation or the first step would fail
    ZINF_PLAN_FITS_UNKNOWN = 2, // within every known budget; the device's capacity is not known
} zinf_plan_fit;

// Keys the config left out that zinf chose for the machine instead of DeepSpeed's
// defaults (0: not chosen: given, or the default stands).
typedef struct zinf_plan_choice {
    int64_t reduce_bucket_size; // in place of 5e8: two fp32 buckets within 1/64 of the device
    int64_t sub_group_size;     // in place of 1e9 with the optimizer on nvme: 1e8, less where its
                                // swap buffers would not fit the pinned budget
    int64_t head_chunk_tokens;  // memory.head_chunk_tokens where a micro-batch's logits would
                                // take more than 1/64 of the device
    // super_offload: the elements of sub-groups updated under the backward at once (the
    // whole partition where half of what the plan leaves free holds their second place
    // and held parameters, else what that half holds), and the partition's elements.
    int64_t speculate_elements, partition_numel;
} zinf_plan_choice;

typedef struct zinf_plan {
    zinf_plan_choice choice; // what the plan, and an engine made from it, chose
    // As zinf_engine_memory_get reports it once the engine is made (the device's
    // capacity and the pinned budget are the target's; -1 where not known).
    zinf_engine_memory mem;
    int64_t device_peak;   // device bytes at the busiest moment of a step
    int64_t gathered_peak; // stage 3: gathered parameters at most, bytes (whole modules)
    // memory.tile_bound: the modules gathered and computed tile by tile, as "embedding in
    // 9 tiles of 64.0 MiB" (every rank's part of the largest tile); "" when none.
    char tiled[160];
    // Bytes per optimizer step, from the second step on (the first has no trace).
    int64_t h2d, d2h, nvme_read, nvme_write;
    // Bytes a rank receives from the other ranks per optimizer step, from its node and
    // from other nodes, as the communicator counts them (zinf_comm_get_bytes).
    int64_t comm_intra, comm_inter;
    // The budgets' verdict: the device's peak against its capacity; pinned and all host
    // memory against the budgets the engine's host pool would hold them to.
    zinf_plan_budget device, pinned, host;
    zinf_plan_fit fit;
} zinf_plan;

zinf_status zinf_engine_plan(const zinf_config *cfg, const zinf_plan_target *t, zinf_plan *out);

// ---- the plan's time ----
// A step of plan p on the GPU cfg->device.sim models (zinf_gpu.h's sim device), with a
// host whose NVMe drives and CPU Adam run at h's rates: each resource's busy seconds
// and the step's, overlapped as the engine overlaps them. The model's kernels are timed
// by a dry run on a sim device in virtual time; the rest comes from p's bytes.
typedef struct zinf_host_rates {
    double nvme_read, nvme_write; // bytes/s of a rank's nvme_path directories together
    double nvme_mixed;            // bytes/s read and written together (0: the two in turn)
    // Elements/s of a rank's optimizer threads: CPU Adam's step, a reduction's addition
    // into the gradients (per micro-batch), and a pass reading them for the norm.
    double adam, grad_add, grad_norm;
    // Elements/s of CPU Adam writing its states away from where it read them, as the
    // update under the backward does on cpu (super_offload); 0: adam's.
    double adam_away;
} zinf_host_rates;

typedef struct zinf_step_time {
    // Busy seconds per step: device kernels, PCIe each way, GPU links, NVMe each way
    // (each at its own rate), the optimizer's threads (accumulation, norm, Adam).
    double compute, h2d, d2h, links, nvme_read, nvme_write, cpu;
    double step;                                                  // the step's seconds
    // The step when it clips (gradient_clipping): the norm is known only at the
    // backward's end, so nothing is updated under it (a step that clipped after updating
    // would redo those sub-groups, and the engine stops speculating while steps clip, as
    // they do early in training). The step itself where nothing goes under the backward.
    double step_clipping;
    const char *bound; // the busiest resource
} zinf_step_time;

zinf_status zinf_plan_time(const zinf_config *cfg, const zinf_plan_target *t, const zinf_plan *p,
                           const zinf_host_rates *h, zinf_step_time *out);
typedef struct zinf_pass_time {
    double seconds; // the last pass, timed on the device
    double busy_s;  // the device's compute engine busy over it (zinf_device_get_busy: a sim
                    // device's modeled kernels, 0 elsewhere)
    double issue_s; // the host's wall time handing the last pass's ops to the device: near
                    // seconds, the host sets the pace (or waits on the device) somewhere in it
} zinf_pass_time;

// One micro-batch's forward and backward of cfg's model as the engine runs it (shape,
// micro-batch, precision, activation checkpointing) on device dev, over zeroed weights
// and token ids spread over the vocabulary, `passes` times (the first warm up). zinf
// estimate --time runs it on a sim device; zinf device-bench on yours.
zinf_status zinf_model_pass(const zinf_config *cfg, zinf_device *dev, int passes, zinf_pass_time *out);
// ZINF_OK unless p exceeds a budget; then ZINF_ERR_NOMEM naming each budget it is past,
// by how much, and what to change. zinf train refuses such a plan before allocating.
zinf_status zinf_plan_verdict(const zinf_plan *p);

#ifdef __cplusplus
}
#endif
#endif
