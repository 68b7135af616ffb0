// The engine's internals, shared by its files: the flat layout (layout.c), the
// initialization (init.c), the stage-3 coordinator (coordinator.c), the gradient
// buckets (reduce.c), where the 16-bit parameters live (param_tier.c) and the optimizer
// states (optim_tier.c), the optimizer step (step.c) and the rest (engine.c).
#ifndef ZINF_ENGINE_INTERNAL_H
#define ZINF_ENGINE_INTERNAL_H

#include <pthread.h>
#include <stdlib.h>

#include "zinf_adam.h"
#include "zinf_aio.h"
#include "zinf_engine.h"
#include "zinf_internal.h"
#include "zinf_schedule.h"

// Each rank's slice of a module is a multiple of this many elements: 4 KiB in 16-bit
// dtypes (8 KiB in fp32), so a slice goes to disk with O_DIRECT in every dtype.
enum { SLICE_ALIGN = 2048 };

// Module i's place in the flat layout. Its flat buffer (padded numel) splits into
// `world` slices of `slice` elements; rank r owns [r * slice, (r + 1) * slice).
typedef struct mod_layout {
    size_t numel;  // parameters (the model's flat buffer size)
    size_t padded; // world * slice
    size_t slice;
    size_t part_lo; // start of this rank's optimizer part inside the flat buffer
    size_t part_n;  // its length: the whole buffer at stage 0, else the slice
    size_t part_off; // where that part starts in the rank's partition
} mod_layout;

// A run of one module's gradient in a bucket: elements [lo, lo + n) of every rank's
// slice, at `off` inside each rank block. A module bigger than what is left of a bucket
// is split, so reduce_bucket_size bounds the buckets whatever the module sizes.
typedef struct piece {
    int mod, bucket;
    size_t lo, n, off;
} piece;

// Pieces whose gradients are reduced together (in the order backward finishes their
// modules). Its buffer is rank-major: rank r's part of every piece, in piece order,
// forms block r, so a reduce-scatter hands each rank its slices.
typedef struct bucket {
    int first, count; // pieces[first .. first + count)
    size_t block;     // elements per rank block (sum of the pieces' n)
} bucket;

// A failure on a host thread (a collective run from a stream), raised at the next
// synchronization on the engine's thread.
typedef struct async_error {
    pthread_mutex_t mu;
    zinf_status st;
    char msg[512];
} async_error;

// A host buffer to be pinned, mapped at once and pinned by engine_host_pin.
typedef struct pinned_block {
    void *p;
    size_t bytes;
    bool pinned;
} pinned_block;

// Timed events on the compute stream around one wait: for a gather (disk when the
// slices came from NVMe), or while the engine thread waited for the background update
// to write a module, which is how long the stream then ran dry.
typedef struct wait_pair {
    zinf_event *before, *after;
    bool disk, update;
} wait_pair;

// The stage-3 coordinator's state: which modules are gathered, the trace of module
// uses recorded in the first step, and where execution is in it.
typedef struct coordinator {
    void **gathered;        // per module: its full 16-bit buffer on the device, or NULL
    zinf_event **landed;    // per module: recorded on the communication stream when its gather lands
    int *use_pos;           // per module: the trace position of its current use, or -1
    int *trace, ntrace;     // module uses of the recorded step
    int *next_use;          // per trace position: the next position of the same module, or -1
    int *rec, nrec, caprec; // uses of the running step
    int pos;                // position in the trace; -1 once execution departed from it
    bool have_trace;
    int64_t live;           // gathered elements now
    int64_t live_peak_bytes;
    int *queue, qhead, qlen; // ring of modules whose gather is decided but not yet issued
    bool *queued;           // per module: in that ring
    wait_pair *waits;       // this step's timed waits of the compute stream
    int nwaits, capwaits;
} coordinator;

// The optimizer's states, in the order the swap store and the tiers index them.
// ST_GRAD, the fp32 gradient partition, lives beside them: on the device, or in host
// memory when the optimizer is offloaded.
enum { ST_MASTER, ST_EXP_AVG, ST_EXP_AVG_SQ, NSTATES, ST_GRAD = NSTATES };

// Consecutive modules [first, last) the offloaded optimizer updates together: elements
// [off, off + n) of the partition.
typedef struct subgroup {
    int first, last;
    size_t off, n;
} subgroup;

// A pinned buffer of the three states of one sub-group, with its IO in flight.
enum { MAX_IO = 3 };
typedef struct io_buf {
    float *buf; // master | exp_avg | exp_avg_sq, sg_max floats each
    zinf_aio_ticket t[NSTATES];
    int nt;
} io_buf;

// A device buffer freed once the stream work recorded in ev has passed it.
typedef struct pending_free {
    void *p;
    zinf_event *ev;
} pending_free;

struct zinf_engine {
    zinf_config cfg; // the caller's config (pointer members borrowed)
    zinf_comm *comm;
    bool nccl; // collectives on device buffers (the comm is attached to dev)
    int rank, world, stage;
    zinf_device *dev;
    zinf_stream *cs; // compute
    zinf_stream *xs; // communication and the copies around it
    zinf_model *m;
    int nmod;
    zinf_dtype dt; // model storage: F32, BF16 or F16
    size_t es;
    mod_layout *lay;
    size_t npart;   // N_r
    int64_t model_numel;
    int64_t act_bytes; // the model's activations and scratch on the device

    // the parameter tier (param_tier.c)
    void **params16;   // stages 0-2: full buffers per module, on the device
    void *part16;      // stage 3: this rank's slices in partition order (nvme: the resident ones)
    zinf_offload_device ptier; // where part16 lives: NONE the device, CPU host memory, NVME
                               // host memory for modules [0, nresident), the swap store after
    int nresident;
    size_t resident_n;         // elements of part16 with nvme
    struct zinf_swap *pswap;
    int pswap_id;
    zinf_stream *ps;           // nvme: reads into the pool and write-backs, in order
    void **pbuf;               // the pool: npbuf pinned buffers of pbuf_elems
    int npbuf;
    size_t pbuf_elems;
    zinf_event **pread_done, **pbuf_free; // per buffer: its read landed; its gather passed
    int *pfree, nfree;         // buffers holding no read
    int *pread_buf;            // per module: the buffer its slice was read into, or -1

    void **grads16;    // per module during backward
    void **pview;      // what the model reads: params16, or the gathered buffers at stage 3
    float *master, *exp_avg, *exp_avg_sq, *grads32; // optimizer tier none only
    double *d_stats;   // zinf_sumsq output per module part (2 doubles each)

    // gradient reduction
    int *last_bwd;      // per module: index in the schedule of its last backward use, or -1
    piece *pieces;      // in the order backward finishes their modules
    int npieces;
    int *first_piece;   // per module: its first piece (its pieces are consecutive), or -1
    bucket *buckets;
    int nbuckets;
    size_t bucket_cap;  // elements of the largest bucket (world * block)
    float *d_bucket[2]; // device: the bucket being filled and the one being reduced
    zinf_event *bucket_free[2];
    float *h_comm;      // pinned: staging for every host collective on xs (xs runs them in order)
    size_t h_comm_bytes;

    // the optimizer tier (optim_tier.c): cpu and nvme
    zinf_offload_device otier;
    float *h_state[NSTATES]; // cpu: master, exp_avg, exp_avg_sq
    float *h_grads32;        // the fp32 gradient partition on the host
    subgroup *sg;
    int nsg;
    size_t sg_max;        // elements of the largest sub-group
    void *h_out[2];       // the 16-bit result of a sub-group on its way to the device
    zinf_event *out_free[2];
    zinf_cpu_pool *pool;
    zinf_aio *aio;           // nvme, both tiers
    int64_t run_id;          // names the swap stores' directory; 0 until one opens
    struct zinf_swap *swap;
    int swap_id[NSTATES];
    io_buf io[MAX_IO];
    int nio;
    int npreread; // the next update's first sub-groups already read into io[0 ..)
    int64_t host_bytes; // host memory the optimizer tier holds
    int *sg_of;           // per module: its sub-group, or -1
    zinf_event **sg_done; // per sub-group: recorded on ptier_stream after its new parameters

    // Stage 3 with an offloaded optimizer: the update runs on its own thread and the next
    // step's forward starts at once; a gather waits only for its module's sub-group.
    bool background;
    pthread_t othread;
    bool othread_up;
    pthread_mutex_t omu;
    pthread_cond_t ocv;
    bool ojob, ostop;      // an update asked for or running; the thread is to end
    zinf_optim_hparams oh;
    int published;         // sub-groups of the running update whose sg_done is recorded
    bool unsynced;         // stores of a background update may still be queued on ptier_stream

    // host memory, against the budgets (engine_host_alloc)
    int64_t pinned_used, pinned_budget, host_used, host_budget;
    bool host_refused; // the last host allocation was past a budget
    pinned_block *pblocks; // every buffer meant to be pinned: mapped, and pinned once pin_now
    int npblocks, cappblocks;
    bool pin_now;
    int64_t optim_ns, optim_io_ns; // this step's offloaded update, and its waits on NVMe
    zinf_aio_stats aio_seen;       // the aio counters at the last step's end

    coordinator co;
    zinf_event *fwd_done, *ev_cs;

    // the current step
    int micro;            // micro-batches since the last step
    double loss_sum;      // their mean losses, summed in order
    double last_loss;     // of the last forward
    bool have_forward;
    int64_t steps_taken;  // optimizer steps so far (skipped included)
    int64_t steps_applied;
    zinf_loss_scaler scaler;

    pending_free *pend;
    int npend, cappend;

    async_error aerr;
};

// layout.c
zinf_status layout_build(zinf_engine *e);
// init.c
zinf_status init_partition(zinf_engine *e);
// coordinator.c (stage 3)
zinf_status coord_create(zinf_engine *e);
void coord_destroy(zinf_engine *e);
// Make module mod's parameters (and its external module's) available for op index k
// of the running pass; params[] gets the buffers.
zinf_status coord_fetch(zinf_engine *e, int mod, void **params);
zinf_status coord_done(zinf_engine *e, int mod);
zinf_status coord_end_step(zinf_engine *e);
// The step's waits for gathers (streams idle): seconds in all and for slices from NVMe.
zinf_status coord_wait_times(zinf_engine *e, double *all, double *disk, double *update);
// reduce.c
zinf_status reduce_create(zinf_engine *e);
void reduce_destroy(zinf_engine *e);
zinf_status reduce_module_ready(zinf_engine *e, int mod);
// param_tier.c
zinf_status ptier_create(zinf_engine *e);
void ptier_destroy(zinf_engine *e);
// Whether module mod's slice lives in the swap store.
bool ptier_on_disk(const zinf_engine *e, int mod);
// Where write-backs run: the parameter stream with nvme, else the compute stream.
zinf_stream *ptier_stream(zinf_engine *e);
// Pool buffers holding no read; start reading module mod's slice into one.
int ptier_free_buffers(const zinf_engine *e);
zinf_status ptier_read(zinf_engine *e, int mod);
// Drop the reads no gather took (the step changed the slices).
void ptier_forget_reads(zinf_engine *e);
// Queue the gather of module mod's slices into full (device) on the communication stream.
zinf_status ptier_gather(zinf_engine *e, int mod, void *full);
// The device address of module mod's 16-bit part, or NULL where it lives in host memory
// or on disk.
void *ptier_device_part(zinf_engine *e, int mod);
// Queue storing module mod's new 16-bit part (part_n elements at src, host memory that
// stays untouched until ptier_stream passes, or the device) where it lives.
zinf_status ptier_store(zinf_engine *e, int mod, void *src, bool src_host);
// Synchronously write elements [a, a + n) of module mod's flat buffer (this rank's part
// of it) from host memory.
zinf_status ptier_write(zinf_engine *e, int mod, size_t a, size_t n, const void *src);
// Synchronously read elements [a, a + n) of module mod's 16-bit buffer (this rank's
// part of it at stage 3) into host memory.
zinf_status ptier_copy_out(zinf_engine *e, int mod, size_t a, size_t n, void *dst);
// step.c
zinf_status step_run(zinf_engine *e, zinf_step_info *info);

// engine.c
// Device memory that, when the account is full, first waits for deferred frees.
zinf_status engine_alloc(zinf_engine *e, size_t bytes, const char *what, void **p);
// Free p once the work submitted to s so far is done; engine_reap frees what is due
// (all of it, waiting, when wait is set).
zinf_status engine_free_after(zinf_engine *e, void *p, zinf_stream *s);
zinf_status engine_reap(zinf_engine *e, bool wait);
// Collectives queued on the communication stream, in the same order on every rank. A
// failure is kept and raised by engine_sync.
typedef enum comm_op { COMM_ALLREDUCE, COMM_REDUCE_SCATTER, COMM_ALLGATHER } comm_op;
zinf_status engine_comm(zinf_engine *e, comm_op op, void *in, void *out, size_t n);
// The optimizer tier (optim_tier.c).
zinf_status tier_create(zinf_engine *e);
void tier_destroy(zinf_engine *e);
// n elements of a state (ST_*, ST_GRAD included) at partition offset off, to or from
// host memory, synchronously.
zinf_status tier_read(zinf_engine *e, int state, size_t off, size_t n, float *dst);
zinf_status tier_write(zinf_engine *e, int state, size_t off, size_t n, const float *src);
zinf_status tier_zero_states(zinf_engine *e); // moments and gradients
zinf_status tier_zero_grads(zinf_engine *e);
// Add bucket b, reduced in pinned memory at src, into the host gradient partition (on xs).
zinf_status tier_add_grads(zinf_engine *e, int b, const float *src, bool packed);
zinf_status tier_update(zinf_engine *e, const zinf_optim_hparams *h);
// Start reading the next update's first sub-groups from NVMe (once per step; no-op
// for other tiers or without pipeline_read).
zinf_status tier_preread(zinf_engine *e);
// Start the update on the optimizer thread (it also zeroes the gradients); wait for
// it to end (its failure is raised by engine_sync).
zinf_status tier_start(zinf_engine *e, const zinf_optim_hparams *h);
void tier_join(zinf_engine *e);
// Whether module mod's new parameters are queued; wait until they are, and make s wait
// for them.
bool tier_updated(zinf_engine *e, int mod);
zinf_status tier_wait_updated(zinf_engine *e, int mod, zinf_stream *s);
// On the communication stream: full (world * bytes, device) = every rank's mine
// (bytes, on the host when mine_host, else on the device; may be full + rank * bytes),
// by NCCL or through pinned staging.
zinf_status engine_allgather(zinf_engine *e, const void *mine, bool mine_host, void *full, size_t bytes);
// Host memory for an offload tier, `what` naming it: pinned when pinned, else pageable;
// page-aligned either way, for O_DIRECT. Refused, saying what to change, when it would
// pass the pinned budget or the host memory there is.
zinf_status engine_host_alloc(zinf_engine *e, size_t bytes, bool pinned, const char *what, void **out);
void engine_host_free(zinf_engine *e, void *p, bool pinned);
// Pin every buffer asked for so far, and later ones at once. Creation calls it once all
// of them have passed the budgets, so that a plan past a budget is refused before
// seconds go into pinning what would be given back.
zinf_status engine_host_pin(zinf_engine *e);
// Open a swap store on paths (the aio engine and the run's name are shared by both tiers).
zinf_status engine_swap_open(zinf_engine *e, const zinf_path_list *paths, struct zinf_swap **out);
// A failure on a stream's thread, raised by engine_sync; whether one happened.
void engine_fail_async(zinf_engine *e, zinf_status st);
bool engine_failed(zinf_engine *e);
// Wait for every stream and raise a failure of the work on them.
zinf_status engine_sync(zinf_engine *e);

#endif
