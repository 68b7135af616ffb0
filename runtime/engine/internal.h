// The engine's internals, shared by its files. From the bottom: memory as the engine
// takes it (memory.c) and its movers (collectives.c); the flat layout (layout.c);
// MiCS's groups (mics.c) and ZeRO++'s gathers and reductions (zeropp.c); the 16-bit
// parameters (params.c) and the optimizer states (states.c) wherever their offload tier
// keeps them; the gradient buckets (reduce.c); the stage-3 coordinator (coordinator.c)
// and the parameters of an update under the forward at stages 0-2 (share.c); the tables chosen once
// from the stage and the tier (policy.c); what creation and a plan share (build.c); the
// initialization (init.c); a training step: forward, backward and the optimizer step
// (step.c); creation (engine.c); checkpoints (checkpoint.c); the plan (plan.c,
// choose.c, timing.c). A file calls those before it, and circles of calls stay within
// three files (tests/cli/test_engine_calls.sh). The tiers and the prefetcher are
// offload/'s (zinf_offload.h).
#ifndef ZINF_ENGINE_INTERNAL_H
#define ZINF_ENGINE_INTERNAL_H

#include <pthread.h>
#include <stdlib.h>

#include "zinf_adam.h"
#include "zinf_aio.h"
#include "zinf_engine.h"
#include "monitor.h"
#include "zinf_internal.h"
#include "zinf_offload.h"
#include "zinf_schedule.h"

// Each rank's slice of a module is a multiple of this many elements: 4 KiB in 16-bit
// dtypes (8 KiB in fp32), so a slice goes to disk with O_DIRECT in every dtype.
enum { SLICE_ALIGN = 2048 };

// Module i's place in the flat layout. Its flat buffer (padded numel) splits into partition.ranks
// slices of `slice` elements; partition rank r owns [r * slice, (r + 1) * slice).
typedef struct mod_layout {
    size_t numel;  // parameters (the model's flat buffer size)
    size_t padded; // partition.ranks * slice
    size_t slice;
    size_t part_lo;  // start of this rank's optimizer part inside the flat buffer
    size_t part_n;   // its length: the whole buffer at stage 0, else the slice
    size_t part_off; // where that part starts in the rank's partition
    // The 16-bit parameters this rank holds, [param_lo, param_lo + param_n) of the flat
    // buffer: the whole buffer at stages 0-2, the slice at stage 3.
    size_t param_lo, param_n;
    // Stage 3 with memory.tile_bound: elements of each slice per tile (tile k is
    // elements [k tile, k tile + tile) of every slice, the last one the rest); 0: the
    // module is gathered whole.
    size_t tile;
} mod_layout;

// A run of one module's gradient in a bucket: elements [lo, lo + n) of every rank's
// slice, at `off` inside each rank block, reduced after the schedule's op `op`. A module
// bigger than what is left of a bucket is split, so reduce_bucket_size bounds the
// buckets whatever the module sizes. A tiled module is reduced after every op that
// takes its gradient tiles (a tied embedding: the head's backward and its own), each
// time in pieces of its own; `first`: of the module's first reduction in a backward.
typedef struct piece {
    int mod, bucket, op;
    size_t lo, n, off;
    bool first;
} piece;

// Pieces whose gradients are reduced together (in the order backward finishes their
// modules). Its buffer is rank-major: rank r's part of every piece, in piece order,
// forms block r, so a reduce-scatter hands each rank its slices.
typedef struct bucket {
    int first, count; // pieces[first .. first + count)
    size_t block;     // elements per rank block (sum of the pieces' n)
    size_t at;        // where its W blocks start in gradients.accumulated
} bucket;

// Timed events on the compute stream around one wait: for a gather (disk when the
// slices came from NVMe), or while the engine thread waited for the background update
// to write a module, which is how long the stream then ran dry.
typedef struct wait_pair {
    zinf_event *before, *after;
    bool disk, update;
} wait_pair;

// A tile of a tiled module's parameters, gathered on the device.
typedef struct tile_slot {
    void *buf;
    int mod, k;
    bool disk;          // its gather read the slice from NVMe
    zinf_event *landed; // on the communication stream, when its gather lands
} tile_slot;

// The stage-3 coordinator's state: the gathered buffers and the gathers decided by the
// prefetcher but not yet issued.
typedef struct coordinator {
    zinf_prefetch *prefetcher;
    void **gathered;         // per module: its full 16-bit buffer on the device, or NULL
    zinf_event **landed;     // per module: recorded on the communication stream when its gather lands
    int *queue, qhead, qlen; // ring of modules whose gather is decided but not yet issued
    bool *queued;            // per module: in that ring
    int *ahead;              // room for one zinf_prefetch_ahead
    wait_pair *waits;        // this step's timed waits of the compute stream
    int nwaits, capwaits;
    // A tiled module's tiles: tile k's gathered parameters in slot k % 2 (the next one
    // is gathered while the model computes on this one), a gradient tile being filled.
    tile_slot tile[2];
    void *grad_tile;
    zinf_tiling *tiling;   // per module, lent to the model
    zinf_tile_source src;
} coordinator;

// Stages 0-2: the last step's update runs under the next forward, and each module's new
// 16-bit buffer (this rank's part, stored by the update, then at stages 1-2 with more
// than one rank all-gathered from the owners' slices) reaches the forward on its own,
// in the order the forward first uses the modules.
typedef struct share {
    int *order;          // the modules with parameters, by first use in forward, then the rest
    int *pos;            // per module: its place in order
    int n, next;         // modules in order; the next to all-gather (partition.ranks > 1)
    zinf_event **landed; // per module: recorded on the communication stream when its all-gather lands
    bool *waited;        // per module: the compute stream waits for its new buffer already
    bool active;         // an update started at the last step and not every module is waited for
} share;

// Where the 16-bit parameters live, chosen once at creation from the stage (params.c):
// params_whole keeps every module's buffer on the device (stages 0-2), params_sliced
// this rank's slices in the parameter tier (stage 3: device, host memory or swap store).
typedef struct param_storage {
    // Each rank keeps only its slice of every module, gathered whole for each op (what
    // lays out tiles, MiCS's groups and ZeRO++'s gathers); else every module is whole.
    bool sliced;
    zinf_status (*create)(zinf_engine *e); // or count, in a plan
    // The device address of module mod's 16-bit part, or NULL where it lives in host
    // memory or on disk.
    void *(*device_part)(zinf_engine *e, int mod);
    // Queue storing module mod's new 16-bit part (part_n elements at src, host memory
    // that stays untouched until params_stream passes, or the device) where it lives.
    zinf_status (*store)(zinf_engine *e, int mod, const void *src, bool src_host);
    // Synchronously write elements [a, a + n) of module mod's flat buffer (this rank's
    // part of it at stage 3) from host memory.
    zinf_status (*write)(zinf_engine *e, int mod, size_t a, size_t n, const void *src);
    // Synchronously read elements [a, a + n) of module mod's 16-bit buffer (this rank's
    // part of it at stage 3) into host memory.
    zinf_status (*copy_out)(zinf_engine *e, int mod, size_t a, size_t n, void *dst);
} param_storage;
extern const param_storage params_whole, params_sliced;

// How the ops of a pass get their modules' 16-bit parameters, chosen once at creation
// from the stage (policy.c): whole on the device at stages 0-2, where an update under
// the forward has its new parts reach it through share.c; this rank's slices at stage 3,
// gathered by the coordinator (coordinator.c).
typedef struct param_ops {
    zinf_status (*create)(zinf_engine *e); // once the states are built
    void (*destroy)(zinf_engine *e);
    // Before op runs: its modules' parameters in params.view; after it is queued: what follows
    // it (gathers ahead, releases).
    zinf_status (*before_op)(zinf_engine *e, const zinf_model_op *op);
    zinf_status (*after_op)(zinf_engine *e, const zinf_model_op *op);
    // Every module's parameters as the last update left them, for the backward and
    // whatever reads them outside a pass.
    zinf_status (*settle)(zinf_engine *e);
    // After an update in the step: the ranks' new parts handed to every rank.
    zinf_status (*after_update)(zinf_engine *e);
    // The step's end: the gathered buffers go, this step's uses become the trace.
    zinf_status (*end_step)(zinf_engine *e);
} param_ops;

// How the optimizer step runs its update (step.c), chosen once from the optimizer's
// tier and the stage (policy.c): offloaded, started on the tier's thread; on the device
// where the parameters are whole (stages 0-2), issued on the parameters' store stream;
// either way for the next forward to run under. At stage 3 with the optimizer on the
// device, inside the step.
typedef struct update_ops {
    // Once the norm and the loss scale are known: the update with h (NULL: the step is
    // skipped), the new parameters handed on, the step's figures into info, and the
    // gradients and the parameters made ready for the next step.
    zinf_status (*run)(zinf_engine *e, const zinf_optim_hparams *h, zinf_step_info *info);
    // Whether module x's new 16-bit parameters are issued (offloaded: stored by the
    // tier's thread), so that waiting for them does not block this thread.
    bool (*updated)(zinf_engine *e, int x);
    // Stream s waits for module x's update (s NULL: this thread does).
    zinf_status (*wait)(zinf_engine *e, int x, zinf_stream *s);
    // Before op, at stages 0-2: where the update of op's module waits for op (the
    // device's defers the lookup's), the rows op reads computed ahead on the compute
    // stream, and *ahead set: the module's next op waits for its update instead.
    zinf_status (*ahead)(zinf_engine *e, const zinf_model_op *op, bool *ahead);
    // After op: an update that waited for it is issued.
    zinf_status (*after_op)(zinf_engine *e, const zinf_model_op *op);
    bool under_forward; // the next forward runs under the update (share.c, coordinator.c)
} update_ops;
extern const update_ops update_in_step, update_under_forward, update_offloaded;

// A device buffer freed once the stream work recorded in ev has passed it.
typedef struct pending_free {
    void *p;
    zinf_event *ev;
} pending_free;

// A group of ranks a collective runs over: its communicator (none in a plan), and its
// members as rank 0 sees them, which a plan's movers count bytes from: ranks 0, stride,
// 2 stride, ..., size of them.
typedef struct rank_group {
    zinf_comm *comm;
    int size, stride;
} rank_group;

// What a plan's movers count instead of moving (collectives.c): bytes copied between
// host and device, and bytes rank 0 receives from ranks on its node and on others.
typedef struct traffic {
    int64_t h2d, d2h, comm_intra, comm_inter;
} traffic;

// The ranks the model's states are partitioned over (mics.c): the world, or with MiCS
// this rank's shard group; `ranks` of them, this one `rank` among them, replicated
// `replicas` times.
typedef struct partition {
    int ranks, rank, replicas;
    // The optimizer states are split over the ranks, each holding its slice of every
    // module (stages 1-3); at stage 0 every rank holds them whole.
    bool split;
    rank_group group;                 // the shard group (the engine's world without MiCS)
    zinf_comm *shard_comm;            // MiCS: the shard group's communicator, owned
    rank_group replica_group;         // MiCS: the replication group
    int hier_nodes, hier_local;       // hierarchical gathers: the shard group's nodes and ranks on each (0: off)
    rank_group hier_cross, hier_node; // its ranks with this local index; its ranks on this node
    void *hier_buffer;                           // a gather's slices in the order the two all-gathers leave them
    size_t numel;                                // this rank's partition: N_r elements
} partition;

// The gradients (reduce.c): the 16-bit buffers the backward adds to, and their buckets.
typedef struct gradients {
    bool scattered; // the buckets are reduce-scattered (stages 1-3), else all-reduced
    // Stage 1 over several micro-batches: each rank sums its whole gradient over the
    // step's micro-batches in fp32 on the device, bucket by bucket (a bucket's W blocks at
    // its `at`), and the buckets are reduced once, in the step's last backward.
    bool accumulate_locally;
    float *accumulated; // device: every bucket's elements, in bucket order; NULL unless accumulating locally
    size_t accumulated_bytes;
    // One rank (and no MiCS replicas) with the optimizer on the device and no local
    // accumulation: a bucket would only widen the pieces for flush to add them to the fp32
    // gradients, so each piece is added there straight from its 16-bit gradient on the
    // compute stream (zinf_accumulate: the same bits, one pass over memory instead of two;
    // the step's first backward overwrites the last step's sums, never zeroed).
    bool direct;
    // Direct with one micro-batch a step: the fp32 gradient would be the 16-bit one
    // widened, so the step reads the backward's 16-bit buffers themselves (held until the
    // update) and no fp32 gradients exist: the same bits for 10 fewer bytes an element
    // through device memory, and 2 fewer bytes an element held. Setting a gradient by
    // hand (zinf_engine_set_full), or a second backward before the step, makes fp32 ones
    // for that step (states_grads_to_fp32).
    bool held;
    bool accumulating;     // it holds the sums of this step's backward passes so far
    bool last_backward;    // the backward under way is the step's last
    void **buffers16;      // per module during backward
    int *last_backward_op; // per module: index in the schedule of its last backward use, or -1
    int current_op;        // the backward's op running now (its index in the schedule)
    piece *pieces;         // in the order backward finishes their modules
    int piece_count;
    int *first_piece; // per module: the first piece of its last reduction (consecutive pieces), or -1
    int *last_piece;  // per module: the last piece it has, after which its gradient is final, or -1
    bucket *buckets;
    int bucket_count;
    size_t bucket_capacity;   // elements of the largest bucket (world * block)
    float *device_buckets[2]; // the bucket being filled and the one being reduced
    zinf_event *bucket_free[2];
    double *device_norms; // the step's zinf_sumsq output per module part (2 doubles each)
    // An offloaded optimizer's gradients in host memory: in the step's last backward
    // each module's norms are taken as soon as its last piece is added (states.c), for
    // the step to sum. Per (module, rank slice) piece, sumsq and the inf/NaN flag. Held
    // gradients' norms are taken into device_norms as the backward finishes each module
    // (reduce.c).
    double *host_norms;
    int64_t backwards;     // backward passes so far
    bool norms_on_arrival; // the backward under way is the step's last (and not MiCS's)
    // The fp32 gradients hold the last step's values, which the next backward's first
    // additions overwrite instead of their being zeroed: offloaded, in the host partition
    // (states.c); on the device, each module's first reduction (zinf_accumulate's first).
    bool stale;
    int64_t *norms_taken; // per module: the backward whose arrival filled its host_ or device_norms, or -1
} gradients;

// The 16-bit parameters (params.c) and how the ops get them (policy.c).
typedef struct parameters {
    void **whole;                     // stages 0-2: full buffers per module, on the device
    zinf_offload_device offload;      // stage 3: where the slices live
    zinf_param_tier *tier;            // stage 3: the slices
    zinf_param_tier_stats tier_stats; // its figures: of the tier made, or planned
    // Stages 0-2 with the update under the forward: the update stores this rank's parts
    // on it (and on the device runs there), apart from the forward's ops.
    zinf_stream *store_stream;
    void **view;                      // what the model reads: whole, or the gathered buffers at stage 3
    const param_storage *storage;     // the stage's (policy.c)
    const param_ops *ops;
    coordinator coord; // stage 3; its timed waits also at stages 1-2 with a background update
    share share;       // stages 0-2 with an update under the forward
} parameters;

// The optimizer (states.c, step.c): its states on the device or in the offload tier,
// and how the step runs the update.
typedef struct optimizer {
    zinf_offload_device offload;
    float *master, *exp_avg, *exp_avg_sq, *grads32; // on the device: the partition's first device_numel elements
    // The partition's first elements, whose states are on the device: all of it with the
    // optimizer there; with offload_optimizer.ratio below 1, the first sub-groups'
    // (DeepSpeed's partial offload); else none. The tier holds the rest.
    size_t device_numel;
    int device_subgroups;
    zinf_optim_tier *tier;                          // cpu and nvme
    zinf_optim_tier_stats tier_stats;               // its figures: of the tier made, or planned
    float *host_grads32;                            // its gradient partition
    bool pinned_grads;                              // host_grads32 is in pinned memory
    zinf_cpu_pool *pool;                            // cpu and nvme: CPU Adam and the host gradient norms
    int threads;                                    // its threads (cpuadam_cores_perc of the cores)
    const update_ops *update;                       // the tier's and the stage's (policy.c)
    // Offloaded (stages 1-3): the update runs on the tier's thread and the next step's
    // forward starts at once; a module waits only for its own sub-group (at stage 3
    // its gather, at stages 1-2 share.c).
    bool background;
    // On the device under the forward: per module, recorded on the store stream after
    // its update (and its store).
    zinf_event **updated;
    // On the device under the forward, the module whose update waits for its first op
    // (-1: none): the lookup, which reads only some rows of it, computed ahead from the
    // states as they are (step.c's rows_ahead). Its update is issued after that op
    // (update_deferred) with the step's hyperparameters and a held gradient, kept here
    // (fp32 gradients stay in grads32 until the next backward).
    int deferred;
    zinf_optim_hparams deferred_h;
    void *deferred_grad;
} optimizer;

// ZeRO++ (zeropp.c).
typedef struct zeropp_state {
    bool qwz;                                  // stage-3 gathers move int8 weights
    void *quantized;                           // the quantized slices of one gather, every rank's
    int hpz_ranks;                             // hpZ: ranks per secondary group (1: off)
    rank_group hpz_group;                      // this rank's group
    void **secondary;                          // per module: this rank's secondary partition
    bool *secondary_valid;                     // per module: it holds the parameters as they are now
    bool secondary_host;                       // in pinned host memory (parameters offloaded), else on the device
    int64_t secondary_bytes;                   // all of them
    bool qgz;                                  // stage-3 gradient buckets reduce as int4 (when the node layout allows)
    rank_group qgz_node, qgz_cross;            // this rank's node; the ranks with its local index on every node
    void *qgz_send, *qgz_recv;                 // qgZ's send and receive buffers: world slots
    float *qgz_node_sums;                      // one block per node
} zeropp_state;

// The step under way (engine.c, step.c).
typedef struct step_state {
    int micro_batches;   // since the last step
    double started_at;   // zinf_clock_s at its first forward (an evaluation's before it does not count)
    bool profiling;      // flops_profiler: this step's ops are being timed
    double loss_sum;     // their mean losses, summed in order
    double last_loss;    // of the last forward
    bool have_forward;   // a forward waits for its backward
    int64_t steps_taken; // optimizer steps so far (skipped included)
    int64_t steps_applied;
    zinf_loss_scaler scaler;
    // The last step clipped or overflowed: the next one, likely to as well, updates
    // nothing under its backward (an offloaded optimizer's speculation).
    bool guess_missed;
    // The counters at the last step's end, which the next step's figures start from.
    zinf_aio_stats aio_seen;
    int64_t handoff_seen; // the parameter tier's handoff_bytes
    zinf_comm_bytes comm_seen;
    zinf_device_busy busy_seen;
} step_state;

// Device buffers freed once the stream work recorded with them has passed (memory.c).
typedef struct pending_frees {
    pending_free *items;
    int count, capacity;
} pending_frees;

struct zinf_engine {
    zinf_config cfg; // the caller's config (pointer members borrowed)
    zinf_comm *comm;
    bool nccl; // collectives on device buffers (the comm is attached to dev)
    bool sim;  // the device is simulated: its values are meaningless, its time is modeled
    int rank, world;
    int nodes; // of the ranks (the target's, in a plan)
    partition partition;
    zinf_device *dev;
    zinf_stream *compute_stream;
    zinf_stream *comm_stream; // communication and the copies around it
    zinf_event *compute_mark; // recorded on the compute stream for another stream to wait for
    zinf_model *model;
    int module_count;
    const char **names; // per module, the model's
    zinf_dtype dtype;   // model storage: F32, BF16 or F16
    size_t elem_size;   // its bytes
    mod_layout *layout; // per module
    int64_t model_numel;
    int64_t activation_bytes; // the model's activations and scratch on the device
    float *staging;           // pinned: staging for every host collective on comm_stream (which runs them in order)
    size_t staging_bytes;
    pending_frees pending;
    zinf_monitor *monitor; // rank 0: the config's tensorboard and csv_monitor; NULL: none
    bool comms_logged;     // this engine started the comms logger on comm (stopped when destroyed)

    parameters params;
    gradients grads;
    optimizer optim;

    zinf_host_pool *host; // every host buffer of the tiers and the staging
    zinf_aio *aio;        // nvme, both tiers
    char run[24];         // names the swap stores' directory (rank 0's pid)

    zeropp_state zeropp;
    void *h_ckpt; // cpu_checkpointing: the model's checkpoints, pinned (lent to the model)
    int64_t ckpt_host_bytes;

    step_state step;

    zinf_latch *failure; // of work on the streams' threads and the background update

    // A plan (zinf_engine_plan) runs creation with no device, comm or host pool: what
    // it would take is counted (engine_take_device, engine_take_host) instead.
    bool plan;
    int64_t plan_device, plan_pinned, plan_host;
    int64_t plan_pool_device;     // device bytes when the host pool would be made (its budgets)
    traffic counted;              // what the plan's movers would have moved
};

// Module mod's tiles over partition.ranks ranks (tile 0: gathered whole); zinf_tiling_count and
// zinf_tiling_len read it.
static inline zinf_tiling tiling_of(const zinf_engine *e, int mod) {
    return (zinf_tiling){.ranks = e->partition.ranks, .slice = e->layout[mod].slice, .tile = e->layout[mod].tile};
}

// Rank r's slice of each module is in this rank's part of the optimizer states.
static inline bool partition_holds(const zinf_engine *e, size_t r) {
    return !e->partition.split || r == (size_t)e->partition.rank;
}

// The step reads the backward's own 16-bit gradients (grads.held), with no fp32 ones
// made beside them (states_grads_to_fp32: a gradient set by hand, a second backward).
static inline bool grads_read_held(const zinf_engine *e) { return e->grads.held && !e->optim.grads32; }

// Module mod's optimizer states are on the device (optim.device_numel), and its gradients
// are summed there.
static inline bool states_on_device(const zinf_engine *e, int mod) {
    return e->optim.offload == ZINF_OFFLOAD_NONE || e->layout[mod].part_off < e->optim.device_numel;
}

// layout.c
zinf_status layout_build(zinf_engine *e);
// init.c
zinf_status init_partition(zinf_engine *e);
// coordinator.c (stage 3)
zinf_status coord_create(zinf_engine *e);
// The prefetcher over the engine's modules and budgets (the coordinator's, and the plan's).
zinf_status coord_prefetcher(const zinf_engine *e, zinf_prefetch **out);
void coord_destroy(zinf_engine *e);
// Make module mod's parameters (and its external module's) available for op index k
// of the running pass; params[] gets the buffers.
zinf_status coord_fetch(zinf_engine *e, int mod, void **params);
zinf_status coord_done(zinf_engine *e, int mod);
zinf_status coord_end_step(zinf_engine *e);
// The step's waits for gathers (streams idle): seconds in all and for slices from NVMe.
zinf_status coord_wait_times(zinf_engine *e, double *all, double *disk, double *update);
// The timed waits' events (coord_wait_times reads them) are freed all at once.
void coord_free_waits(zinf_engine *e);
// fn(e, x), which may block this thread until the background update has stored module
// x, between two timed events on the compute stream with nothing queued between them:
// the time the compute stream stood idle waiting for the update.
zinf_status coord_timed_update_wait(zinf_engine *e, zinf_status (*fn)(zinf_engine *e, int x), int x);
// share.c (stages 0-2 with an update under the forward; each a no-op otherwise)
zinf_status share_create(zinf_engine *e);
void share_destroy(zinf_engine *e);
// The step started the update: every module's new buffer is yet to reach the forward.
void share_start(zinf_engine *e);
// Before op: the compute stream waits for the update and all-gather of op's modules, or
// has the rows op reads of a deferred update's module computed ahead.
zinf_status share_before_op(zinf_engine *e, const zinf_model_op *op);
// After op: a deferred update issued after it; all-gather ahead, in order, the modules
// whose update is stored.
zinf_status share_after_op(zinf_engine *e, const zinf_model_op *op);
// Every module's new buffer, for the backward and whatever follows the step: the rest
// of the all-gathers in order, and the compute stream waits for them all.
zinf_status share_finish(zinf_engine *e);
// Stages 1-2, optimizer on the device: every rank updated its slices; the full 16-bit
// buffers all-gathered from them.
zinf_status share_gather_all(zinf_engine *e);
// reduce.c
zinf_status reduce_create(zinf_engine *e);
void reduce_destroy(zinf_engine *e);
zinf_status reduce_module_ready(zinf_engine *e, int mod);
// Tile k of tiled module mod is done in the backward's op grads.current_op: its gradient (every
// rank's part of the tile, rank after rank, on the device) goes to the buckets.
zinf_status reduce_tile_ready(zinf_engine *e, int mod, int k, const void *grad);
// Where bucket b's sums go: the fp32 gradients on the device, or the host partition of an
// offloaded optimizer; with offload_optimizer.ratio below 1, each piece where its
// module's states are, so a bucket may go to both.
void reduce_bucket_sides(const zinf_engine *e, int b, bool *to_device, bool *to_host);
// params.c: the 16-bit parameters (params.storage: params_whole, params_sliced)
void params_destroy(zinf_engine *e);
// Where the optimizer tier's stores run: the parameter tier's stream (stage 3), the
// store stream (stages 1-2), or the compute stream (an optimizer on the device).
zinf_stream *params_stream(zinf_engine *e);
// states.c: the optimizer states, on the device or in the optimizer tier.
zinf_status states_create(zinf_engine *e);
void states_destroy(zinf_engine *e);
// n elements of a state (ZINF_TIER_*) at partition offset off, to or from host memory,
// synchronously.
zinf_status states_read(zinf_engine *e, zinf_tier_state s, size_t off, size_t n, float *dst);
zinf_status states_write(zinf_engine *e, zinf_tier_state s, size_t off, size_t n, const float *src);
zinf_status states_zero(zinf_engine *e); // moments and gradients
// After the step: the gradients are the next backward's, the held ones freed once the
// stream whose update reads them passes.
zinf_status states_zero_grads(zinf_engine *e, zinf_stream *readers);
// Held gradients (gradients.held) become fp32 ones for the rest of the step, for a
// gradient set by hand or a second backward before the step to add in fp32 as without
// holding; nothing otherwise.
zinf_status states_grads_to_fp32(zinf_engine *e);
// Add bucket b, reduced in pinned memory at src, into the host gradient partition (on
// comm_stream); with src NULL (it landed there) only take the norms the device did not.
zinf_status states_add_grads(zinf_engine *e, int b, const float *src, bool packed);
// Whether bucket b's sums may land in the host gradient partition straight from the
// device: the step's first backward over it, every piece a module's first reduction
// (nothing to add to), and a pinned partition (a copy into pageable memory holds the
// issuing thread until it is done). The first addition's pass over host memory is saved.
bool states_grads_land(const zinf_engine *e, int b);
// Copy bucket b's sums at from (this rank's block alone when packed) into the partition
// on comm_stream, and take the norms the additions would have: a module's whole final
// slice on the device, into host_norms; the others from host memory.
zinf_status states_land_grads(zinf_engine *e, int b, const float *from, bool packed);
// The squared norm and inf/NaN flag of each slice of module mod's host gradient this
// rank holds, into norms (2 doubles per rank of the partition, at 2 (mod W + r)).
zinf_status states_grad_norms(zinf_engine *e, int mod, double *norms);
// Rank r's slice of module mod's fp32 gradients on the device, its norms into
// device_norms (at 2 (mod W + r)): the piece the step's norm takes.
zinf_sumsq_piece states_device_grad_piece(const zinf_engine *e, int mod, size_t r);
// mics.c
void mics_settings(zinf_engine *e); // partition.ranks, partition.rank and replicas from the config and the world
zinf_status mics_create(zinf_engine *e);
void mics_destroy(zinf_engine *e);
// A gather over the partition's ranks, as engine_allgather over partition.group (hierarchical
// with mics_hierarchical_params_gather).
zinf_status mics_allgather(zinf_engine *e, const void *mine, bool mine_host, void *full, size_t bytes);
// At the step: the gradient partition summed over the replicas.
zinf_status mics_reduce_grads(zinf_engine *e);
// Bytes that receives from each other replica.
int64_t mics_grads_bytes(const zinf_engine *e);
// step.c: rank 0 logs the comms logger's summary so far (when: "step 10", "the run").
void engine_log_comms(zinf_engine *e, const char *when);
// zeropp.c
zinf_status zeropp_create(zinf_engine *e);
void zeropp_destroy(zinf_engine *e);
// The parameter tier's gather: as engine_allgather over the partition's ranks, quantized with qwZ.
zinf_status engine_gather_params(zinf_engine *e, const void *mine, bool mine_host, void *full, size_t bytes);
// Queue the gather of module mod into full (device, padded elements) on the
// communication stream: from its secondary partition within the hpZ group when this
// step has one, else from every rank's slice (keeping the secondary with hpZ).
zinf_status zeropp_gather(zinf_engine *e, int mod, void *full);
bool zeropp_has_secondary(const zinf_engine *e, int mod);
// A plan's gather of n elements of every rank's slice of a module, as the parameter
// tier (which a plan lacks) makes it: from host memory where parameters are offloaded
// (from NVMe through pinned buffers), else from the device.
zinf_status zeropp_plan_gather_slices(zinf_engine *e, size_t n, void *full);
// The parameters change: no secondary partition holds them any more.
void zeropp_invalidate(zinf_engine *e);
// qgZ: sum bucket d (world blocks of blk floats) over the ranks into this rank's block
// d + rank * blk, on the communication stream.
zinf_status zeropp_reduce_scatter(zinf_engine *e, float *d, size_t blk);
// qgZ's bytes for one bucket of blocks of blk: from each other rank of the node
// (*intra) and from each of its peers on other nodes (*inter); and copied each way
// between device and host when collectives go through the staging (*pcie).
void zeropp_reduce_traffic(const zinf_engine *e, int64_t blk, int64_t *intra, int64_t *inter, int64_t *pcie);

// memory.c
// What creation takes: device memory, and pinned host memory from the host pool; a plan
// counts it instead (*p stays NULL).
zinf_status engine_take_device(zinf_engine *e, size_t bytes, const char *what, void **p);
zinf_status engine_take_pinned(zinf_engine *e, size_t bytes, const char *what, void **p);
// Device memory that, when the account is full, first waits for deferred frees.
zinf_status engine_alloc(zinf_engine *e, size_t bytes, const char *what, void **p);
// Free p once the work submitted to s so far is done; engine_reap frees what is due
// (all of it, waiting, when wait is set).
zinf_status engine_free_after(zinf_engine *e, void *p, zinf_stream *s);
zinf_status engine_reap(zinf_engine *e, bool wait);
// Where a tier's swap store goes: paths, with the aio engine and the run's name the
// tiers share.
zinf_swap_config engine_swap_config(zinf_engine *e, const zinf_path_list *paths);

// collectives.c
// The movers: copies on the communication stream and collectives queued on it in the
// same order on every rank; in a plan they move nothing and count what they would
// (e->counted). A failure of a collective is kept and raised by engine_wait_streams.
typedef enum comm_op { COMM_ALLREDUCE, COMM_REDUCE_SCATTER, COMM_ALLGATHER, COMM_ALLTOALL } comm_op;
// The host collective op over g on the staging's pinned memory: n floats to sum (or
// the block of each rank, reduce-scattered), or n bytes from each rank.
zinf_status engine_comm(zinf_engine *e, const rank_group *g, comm_op op, void *in, void *out, size_t n);
zinf_status engine_copy(zinf_engine *e, void *dst, const void *src, size_t bytes, zinf_copy_kind kind);
// The communication stream waits for the work queued on the compute stream so far.
zinf_status engine_comm_after_compute(zinf_engine *e);
// A plan counts what rank 0 receives over g: `per` bytes from each other member, intra
// when on rank 0's node (nodes of consecutive ranks, the target's).
void engine_count_from(zinf_engine *e, const rank_group *g, int64_t per);
// On the communication stream: full (g->size * bytes, device) = every rank of g's mine
// (bytes, on the host when mine_host, else on the device; may be full + rank * bytes),
// by NCCL or through pinned staging.
zinf_status engine_allgather(zinf_engine *e, const rank_group *g, const void *mine, bool mine_host, void *full,
                             size_t bytes);
// On the communication stream, device to device: block r of out (g->size * bytes) is
// rank r's block for this rank; by NCCL or through the pinned staging (2 g->size bytes).
zinf_status engine_alltoall(zinf_engine *e, const rank_group *g, const void *in, void *out, size_t bytes);
// L when every node is L consecutive ranks (node n: [n L, (n + 1) L)); else 0. A plan
// takes its target's nodes to be so.
int engine_ranks_per_node(const zinf_engine *e);
// Wait for every stream and the update's thread, and raise a failure of the work on them.
zinf_status engine_wait_streams(zinf_engine *e);
// engine_wait_streams once the parameters are settled (params.ops): every module as the
// last update left it, where the forward and the checkpoints read it.
zinf_status engine_sync(zinf_engine *e);

// build.c
// The config and what follows from it alone: stage, where stage-3 parameters live, dtype.
void engine_settings(zinf_engine *e, const zinf_config *cfg);
// The model's parameters for cfg (shared by creation and the plan).
zinf_status engine_model_params(const zinf_config *cfg, zinf_dtype dt, zinf_model_params *mp);
// The device creation opens for cfg on comm, and how many GPUs this host has.
void engine_device_params(const zinf_config *cfg, const zinf_comm *comm, zinf_device_params *dp, int *gpus);
// What creation and a plan share, once the model is made: the flat layout, where every
// state lives, the gradient buckets.
zinf_status engine_build(zinf_engine *e);

// choose.c
// Fill in the keys cfg left at DeepSpeed's defaults that zinf chooses for t, marking
// them given, so that a plan and the engine made from it choose once and alike.
zinf_status engine_choose(zinf_config *cfg, const zinf_plan_target *t, zinf_plan_choice *out);
// engine_choose's rule for memory.head_chunk_tokens alone, on t: sets the key where it
// is null; *chosen is the chunk when it cuts the tokens.
zinf_status engine_choose_head_chunk(zinf_config *cfg, const zinf_plan_target *t, int64_t *chosen);

// plan.c
// The memory figures of zinf_engine_plan, without its replay of the steps.
zinf_status engine_plan_memory(const zinf_config *cfg, const zinf_plan_target *t, zinf_engine_memory *out);
// What orders an offloaded update in a step, as the engine zinf_engine_plan makes would
// run it: the sub-groups in forward order, and the buckets in the order the last
// backward flushes them. A sub-group's gradients are final once its last bucket's sums
// are in host memory; the next forward's first op using it waits for its update.
typedef struct plan_group {
    double elements;
    int first_use;   // the first forward op that reads its parameters (-1: none)
    int last_bucket; // the last bucket holding its gradients (-1: none)
} plan_group;
typedef struct plan_bucket {
    int op;          // the backward op that fills it (an index into the schedule)
    double elements; // this rank's sums that come down to host memory
    bool lands;      // the step's first backward copies them into place: no addition
} plan_bucket;
typedef struct plan_schedule {
    int forward_ops, ops; // of zinf_model_schedule(model, true): the forward's come first
    plan_group *groups;
    int group_count;
    plan_bucket *buckets;
    int bucket_count;
    double speculate; // elements the second place holds (super_offload; 0: none)
} plan_schedule;
zinf_status engine_plan_schedule(const zinf_config *cfg, const zinf_plan_target *t, plan_schedule *out);
void plan_schedule_free(plan_schedule *s);

// policy.c
// The one place the stage and the optimizer's tier choose: the tables of operations
// (params.storage, params.ops, optim.update) and what follows from them (partition.split,
// grads.scattered, background), once engine_settings has read the config.
void policy_choose(zinf_engine *e);
// Whether a run of cfg over world ranks adds its gradients straight into the fp32 ones
// (gradients.direct): one rank, the optimizer on the device, no stage-1 accumulation
// (policy_choose's accumulate_locally).
static inline bool policy_grads_direct(const zinf_config *cfg, int world) {
    bool local = cfg->zero.stage == 1 && cfg->gradient_accumulation_steps > 1;
    return world == 1 && cfg->zero.offload_optimizer.device == ZINF_OFFLOAD_NONE && !local;
}

// Whether a run of cfg over world ranks holds its 16-bit gradients for the step
// (gradients.held): direct, one micro-batch a step, below stage 3 (whose modules may
// come in tiles, each gradient tile going as the model finishes it).
static inline bool policy_grads_held(const zinf_config *cfg, int world) {
    return policy_grads_direct(cfg, world) && cfg->gradient_accumulation_steps == 1 && cfg->zero.stage < 3;
}

// The gradient reductions a step makes: one per micro-batch, at stage 1 one.
static inline int64_t reductions_per_step(const zinf_engine *e) {
    return e->grads.accumulate_locally ? 1 : e->cfg.gradient_accumulation_steps;
}

// engine.c
// What to change when the device runs short.
#define ENGINE_DEVICE_HINT                                                                                             \
    "lower train_micro_batch_size_per_gpu or zero_optimization.reduce_bucket_size, turn on activation_checkpointing, " \
    "raise zero_optimization.stage, offload (offload_optimizer, offload_param) or raise device.memory_limit"

#endif
