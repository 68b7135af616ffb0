// zinf offload: the engine that keeps what a GPU cannot hold in host memory and on
// NVMe, and brings it back in time. Reading order, bottom up:
//   host memory   the facts budgets are planned from, and the pool every tier's host
//                 buffers come from (pinned and pageable, held to two budgets);
//   swap store    one rank's files on the nvme_path drives, read and written with io_uring;
//   optimizer tier  the fp32 master weights, moments and gradient partition in pinned
//                 memory or the swap store, updated by CPU Adam sub-group by sub-group;
//   parameter tier  stage 3's 16-bit slices on the device, in host memory or the swap
//                 store, gathered into full buffers on the device when a module runs;
//   prefetcher    the decisions over the recorded trace of module uses: what to gather
//                 ahead, what to keep, when execution left the trace.
// Each is an object made from a small config struct and borrowed handles (device,
// streams, aio engine, CPU pool, host pool). Nothing here knows the engine: what it
// lends (the gather collective, where updated parameters go, the latch failures of
// other threads land in) comes in as callbacks and handles. runtime/engine orchestrates.
#ifndef ZINF_OFFLOAD_H
#define ZINF_OFFLOAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "zinf_adam.h"
#include "zinf_aio.h"
#include "zinf_base.h"
#include "zinf_gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

// Where a tier keeps its data: NONE is the device.
typedef enum zinf_offload_device {
    ZINF_OFFLOAD_NONE = 0,
    ZINF_OFFLOAD_CPU = 1,
    ZINF_OFFLOAD_NVME = 2,
} zinf_offload_device;

// ---- host memory ----

typedef struct zinf_host_mem {
    uint64_t total_bytes;     // MemTotal
    uint64_t available_bytes; // MemAvailable: what can be allocated without swapping
    uint64_t memlock_limit;   // RLIMIT_MEMLOCK soft limit; UINT64_MAX when unlimited
    bool lock_unlimited;      // CAP_IPC_LOCK: mlock ignores that limit (root)
    char thp[16];             // transparent huge pages: "always", "madvise", "never", "unknown"
} zinf_host_mem;

// Fill *out from /proc and getrlimit. ZINF_ERR_IO with the file named when /proc
// cannot be read.
zinf_status zinf_host_mem_probe(zinf_host_mem *out);

// The host buffers of every tier, held to two budgets: pinned memory (pinned pages can
// be neither swapped nor reclaimed) and all host memory (past what the machine has,
// the OOM killer would settle it). Allocations are page-aligned, for O_DIRECT.
typedef struct zinf_host_pool zinf_host_pool;

typedef struct zinf_host_pool_config {
    zinf_device *dev;     // pins for it; on the host backend its memory is host memory too
    int local_ranks;      // ranks on this host: they share the memory
    int64_t pinned_limit; // device.pinned_memory_limit, or -1: half of this rank's share
                          // of what is available, within the locked-memory limit where it binds
} zinf_host_pool_config;

zinf_status zinf_host_pool_create(zinf_host_pool **out, const zinf_host_pool_config *cfg);

// The budgets a pool made with cfg holds to, worked out from the machine's memory hm:
// host memory is this rank's share of what is available, less what the device holds
// (device_bytes) on the host backend, whose memory is host memory too; pinned memory
// cfg's limit, else half of that share, within the locked-memory limit where it binds
// (the host backend pins with mlock; CUDA's driver pins past it). A plan's verdict is
// held to these for a pool not made yet.
typedef struct zinf_host_budgets {
    int64_t pinned, host; // bytes
} zinf_host_budgets;
zinf_host_budgets zinf_host_pool_budgets(const zinf_host_mem *hm, int local_ranks, bool host_backend,
                                         int64_t device_bytes, int64_t pinned_limit);
void zinf_host_pool_destroy(zinf_host_pool *p); // every buffer given back first; NULL is a no-op
// bytes of host memory, `what` naming it in errors; pinned when pinned. Refused with
// ZINF_ERR_NOMEM, saying which budget and what to change, past either budget. Buffers
// asked for before zinf_host_pool_pin are mapped now and pinned then.
zinf_status zinf_host_pool_alloc(zinf_host_pool *p, size_t bytes, bool pinned, const char *what, void **out);
void zinf_host_pool_free(zinf_host_pool *p, void *buf, bool pinned);
// Pin every buffer asked for so far, and later ones at once: a plan past a budget is
// refused before seconds go into pinning what would be given back.
zinf_status zinf_host_pool_pin(zinf_host_pool *p);
// What to change when the pinned budget (pinned) or all host memory runs short.
const char *zinf_host_pool_hint(bool pinned);
// Whether the last refused allocation was refused by a budget (not by the system).
bool zinf_host_pool_refused(const zinf_host_pool *p);

// Counted as buffers are taken (the tiers give theirs back only when destroyed).
typedef struct zinf_host_pool_usage {
    int64_t pinned, pinned_budget; // bytes
    int64_t host, host_budget;     // all host memory of the pool, pinned included
} zinf_host_pool_usage;
void zinf_host_pool_get_usage(const zinf_host_pool *p, zinf_host_pool_usage *out);

// ---- the swap store ----
// Where the NVMe tiers keep one rank's optimizer states and stage-3 parameters, as
// preallocated files on the aio engine (aio/zinf_aio.h). Layout (a contract other tools
// rely on): <nvme_path>/zinf-<run>/rank<R>/<name>, one file per state ("master",
// "exp_avg", "exp_avg_sq", "params"), striped over every nvme_path.

// Not thread-safe as a whole: add and close run alone. Async reads and writes on
// distinct ranges may come from any thread (the aio engine is); the synchronous
// pread/pwrite share one bounce buffer and take turns on it.
typedef struct zinf_swap zinf_swap;

typedef struct zinf_swap_config {
    const char *const *paths; // nvme_path directories (a missing one is made); several stripe every file
    int npaths;
    const char *run; // names the run's directory zinf-<run> (e.g. a pid or timestamp)
    int rank;
    zinf_aio *aio; // borrowed; outlives the store
    // Every 4 KiB block written gets a CRC-32C, checked when it is read back, so a drive
    // that returns other data than it was given stops the run (aio.checksum): true
    // leaves that out.
    bool without_checksums;
} zinf_swap_config;

// Probes every path (a directory, made when missing; writable; O_DIRECT) and makes
// <path>/zinf-<run>/rank<R>/ in each; zinf-<run> may already exist (other ranks share
// it). A path that cannot be made or written, or the same directory given twice, fails naming the path and `nvme_path`.
// Where a file system refuses O_DIRECT (tmpfs before Linux 6.6) the files run buffered, said once here with
// ZINF_LOG_WARN.
zinf_status zinf_swap_open(zinf_swap **out, const zinf_swap_config *cfg);

// Add a preallocated file `name` (a plain name, unique in the store) of at least `bytes`
// (rounded up to the alignment); *id names it in later calls. Space is reserved now, so
// a full drive fails here and not in the middle of a step: ZINF_ERR_NOSPC naming the
// path, the bytes needed and free, and what to do (free space, add nvme_path entries, or
// move the tier to cpu). A file of that name already on disk (a crashed run with the same
// run name) is refused, never shared.
zinf_status zinf_swap_add(zinf_swap *s, const char *name, uint64_t bytes, int *id);

// Offsets, lengths and buffers of async IO: multiples of this (>= 4096, the largest
// O_DIRECT alignment among the paths). File sizes are multiples of it too.
uint32_t zinf_swap_alignment(const zinf_swap *s);

// Async, aligned: start a read into / write from buf (pinned, aligned), wait for the
// ticket with zinf_swap_wait; buf is untouchable until then. Out-of-range or unaligned
// requests fail with ZINF_ERR_INVAL naming the file, offset and length (*t = 0).
zinf_status zinf_swap_read(zinf_swap *s, int id, uint64_t off, void *buf, size_t len, zinf_aio_ticket *t);
zinf_status zinf_swap_write(zinf_swap *s, int id, uint64_t off, const void *buf, size_t len, zinf_aio_ticket *t);
// Wait for and release one ticket: ZINF_OK or the failure of its first request (path,
// offset and errno text in zinf_last_error()); for a read, ZINF_ERR_CORRUPT where a
// block fails its checksum (the file, the block's offset and both checksums named).
zinf_status zinf_swap_wait(zinf_swap *s, zinf_aio_ticket t);

// Synchronous, any offset/length/buffer, through an internal aligned bounce buffer of
// bounded size (4 MiB chunks; partial head and tail blocks are read, merged and written
// back on write): for setting or reading single tensors, initialization, digests. Must
// not overlap async IO in flight on the same blocks.
zinf_status zinf_swap_pread(zinf_swap *s, int id, uint64_t off, void *dst, size_t len);
zinf_status zinf_swap_pwrite(zinf_swap *s, int id, uint64_t off, const void *src, size_t len);

uint64_t zinf_swap_bytes(const zinf_swap *s); // bytes preallocated over all files and paths
bool zinf_swap_direct(const zinf_swap *s);    // every file runs O_DIRECT

// What zinf_swap_add of a file of `bytes` preallocates over npaths drives striped in
// stripe-byte units (the aio engine's block_size), on drives of 4 KiB blocks: the figure
// a plan counts before any store is open.
uint64_t zinf_swap_planned_bytes(uint64_t bytes, int npaths, uint64_t stripe);

// Closes and removes the files, the rank directory and zinf-<run> when it is left empty
// (wait for every ticket first). NULL is a no-op.
void zinf_swap_close(zinf_swap *s);

// ---- the optimizer tier ----
// A rank's optimizer partition with the optimizer offloaded: fp32 master weights,
// exp_avg and exp_avg_sq in host memory (cpu) or the swap store (nvme), and the fp32
// gradient partition in host memory either way, where the caller adds reduced
// gradients. The partition is a run of segments (the engine's modules, this rank's part
// of each); an update runs over sub-groups of consecutive segments, about
// sub_group_size elements each. With nvme a sub-group's three states are read, updated
// and written back through pinned buffers: with pipeline_read the next sub-group is
// read while this one computes, with pipeline_write this one is written while the next
// computes. The update is CPU Adam (cpu_adam/) over the same tiles the device
// optimizer runs on the host backend, so every tier gives the same bits. Each updated
// segment's parameters are handed to `store` in the model's dtype.

typedef enum zinf_tier_state {
    ZINF_TIER_MASTER = 0,
    ZINF_TIER_EXP_AVG = 1,
    ZINF_TIER_EXP_AVG_SQ = 2,
    ZINF_TIER_GRAD = 3, // the fp32 gradient partition
} zinf_tier_state;

typedef struct zinf_optim_tier zinf_optim_tier;

// Queue storing segment seg's new parameters (its elements at src, host memory left
// untouched until store_stream passes the point this call reaches).
typedef zinf_status (*zinf_tier_store_fn)(void *ctx, int seg, const void *src);

typedef struct zinf_optim_tier_config {
    zinf_offload_device device; // CPU or NVME
    const size_t *seg_n;        // per segment: its elements (0: none), consecutive in the partition
    int nseg;
    int64_t sub_group_size;             // elements; a bigger segment is a sub-group of its own
    zinf_dtype param_dtype;             // what `store` gets: F32 (the master weights) or the 16-bit dtype
    bool pin_memory;                    // the states (cpu), the gradients and the IO buffers
    bool pipeline_read, pipeline_write; // nvme
    // The update runs on a thread of its own (zinf_optim_tier_start), and each
    // sub-group says when its parameters are stored (zinf_optim_tier_updated).
    bool background;
    // With background: sub-groups of up to this many elements at once may be updated
    // under the backward (zinf_optim_tier_speculate), into spare states (12 bytes per
    // element: host memory, not pinned, on cpu; swap files on nvme) with their
    // parameters held (param_dtype's size, pinned as the rest); 0: none.
    size_t speculate_elements;
    zinf_swap_config swap; // nvme: where the states go
    // borrowed
    zinf_device *dev;
    zinf_host_pool *host;
    zinf_cpu_pool *cpu;
    zinf_latch *failure; // a background update's failure lands here
    zinf_tier_store_fn store;
    void *store_ctx;
    zinf_stream *store_stream; // where `store` queues its work
} zinf_optim_tier_config;

// The sub-groups of nseg segments of seg_n elements: consecutive segments, each
// sub-group closing once adding the next segment would pass sub_group_size (a bigger
// segment is one of its own). group_of[i]: segment i's sub-group (-1 for an empty one);
// returns how many there are. The tier's own rule, for a plan's schedule too.
int zinf_optim_tier_group(const size_t *seg_n, int nseg, int64_t sub_group_size, int *group_of);
// Elements per call of a speculative update: the engine's communication thread adds
// the arriving gradients between calls, so it never waits for a whole sub-group.
#define ZINF_OPTIM_SPECULATE_CHUNK (1 << 22)

zinf_status zinf_optim_tier_create(zinf_optim_tier **out, const zinf_optim_tier_config *cfg);
void zinf_optim_tier_destroy(zinf_optim_tier *t); // NULL is a no-op

// n elements of a state at partition offset off, to or from host memory, synchronously
// (initialization, full values, checkpoints).
zinf_status zinf_optim_tier_read(zinf_optim_tier *t, zinf_tier_state s, size_t off, size_t n, float *dst);
zinf_status zinf_optim_tier_write(zinf_optim_tier *t, zinf_tier_state s, size_t off, size_t n, const float *src);
// The moments and the gradients start at zero; the gradients start over.
zinf_status zinf_optim_tier_zero_states(zinf_optim_tier *t);
void zinf_optim_tier_zero_grads(zinf_optim_tier *t);
// The gradient partition, for the caller to add reduced gradients into (never while an
// update runs).
float *zinf_optim_tier_grads(zinf_optim_tier *t);

// One update, on this thread: every sub-group in order, each stored as it is done.
zinf_status zinf_optim_tier_update(zinf_optim_tier *t, const zinf_optim_hparams *h);
// Start reading the next update's first sub-groups (nvme with pipeline_read, once per
// step; called as backward starts, so that the update computes at once).
zinf_status zinf_optim_tier_preread(zinf_optim_tier *t);
// background: start one update on the tier's thread (it reads the gradients and leaves
// them); wait for it to end (its failure goes to the latch). NULL or no update: no-op.
// Sub-groups speculated with other hyperparameters than h are updated again from the
// states they left (*redone of them); with the same, their held parameters are stored.
zinf_status zinf_optim_tier_start(zinf_optim_tier *t, const zinf_optim_hparams *h, int *redone);
void zinf_optim_tier_join(zinf_optim_tier *t);
// speculate: in the step's last backward, after joining the last update: each
// sub-group is updated with h (the step's hyperparameters if it neither clips nor
// overflows) on the tier's thread once zinf_optim_tier_grads_final has been called for
// each of its segments (with their gradients final in host memory). No-op without it.
zinf_status zinf_optim_tier_speculate(zinf_optim_tier *t, const zinf_optim_hparams *h);
void zinf_optim_tier_grads_final(zinf_optim_tier *t, int seg);
// No more sub-groups start speculating; the one in flight ends before this returns. With
// h (may be NULL) the guessed hyperparameters, it ends on the tier's thread instead,
// before the update there, and so do the sub-groups whose states are read already
// (nvme), so that their reads are not wasted; this returns at once. Sub-groups count
// as speculated (zinf_optim_tier_take_times) from when they start.
void zinf_optim_tier_stop_speculating(zinf_optim_tier *t, const zinf_optim_hparams *h);
// What the speculated sub-groups wrote dropped (*dropped of them, when not NULL): a
// skipped step, or states read or written between the backward and the step
// (zinf_optim_tier_read, _write and _zero_states do it).
zinf_status zinf_optim_tier_cancel(zinf_optim_tier *t, int *dropped);
// Whether segment seg's new parameters are stored (true with no update running or NULL);
// wait until they are, and make s (when not NULL) wait for store_stream to pass them.
bool zinf_optim_tier_updated(zinf_optim_tier *t, int seg);
zinf_status zinf_optim_tier_wait_updated(zinf_optim_tier *t, int seg, zinf_stream *s);
// The caller synchronized store_stream after joining: nothing of the last update is in flight.
void zinf_optim_tier_settled(zinf_optim_tier *t);

typedef struct zinf_optim_tier_stats {
    int subgroups;
    size_t subgroup_max;  // elements
    int64_t host_bytes;   // host memory the tier holds
    int64_t pinned_bytes; // of it pinned
    // Of host_bytes besides the gradient partition and (cpu) the states: the two buffers
    // of a sub-group's new 16-bit parameters on their way out; (nvme) the swap buffers,
    // the three states of the largest sub-group per buffer; (speculation) the spare
    // states (cpu) and the held 16-bit parameters.
    int64_t output_bytes, swap_buffer_bytes, speculation_bytes;
    int64_t nvme_bytes;   // its swap store
} zinf_optim_tier_stats;
void zinf_optim_tier_get_stats(const zinf_optim_tier *t, zinf_optim_tier_stats *out);
// What zinf_optim_tier_create would take with cfg, taking nothing: cfg's handles may be
// NULL; stripe is the aio engine's block_size, the swap files' stripe unit.
zinf_status zinf_optim_tier_plan(const zinf_optim_tier_config *cfg, uint64_t stripe, zinf_optim_tier_stats *out);
// Since the last call (zeros for NULL): nanoseconds in updates and in waits on NVMe
// among them, and in speculative updates of how many sub-groups. Swap bytes [read,
// written]: of the last update to end, its early reads and speculation included (the
// first call after it), and of every update's IO issued since the last call.
typedef struct zinf_optim_tier_times {
    int64_t update_ns, io_wait_ns;
    int64_t speculated_ns;
    int speculated;
    int64_t update_io_bytes[2], issued_io_bytes[2];
    // nvme: the aio engine's counters, taken at the same moment as issued_io_bytes (no
    // request of the tier's is in one and not the other).
    bool have_aio;
    zinf_aio_stats aio;
} zinf_optim_tier_times;
void zinf_optim_tier_take_times(zinf_optim_tier *t, zinf_optim_tier_times *out);

// ---- the parameter tier ----
// Stage 3's 16-bit parameters between uses: this rank's slice of every module, on the
// device, in host memory (cpu), or with nvme the modules that fit in max_in_cpu
// elements (a prefix in forward order) in host memory and the rest in the swap store.
// A gather makes a module's full buffer on the device from every rank's slice, through
// the collective the caller lends. Slices on disk come up through a pool of
// buffer_count pinned buffers (each as big as the largest slice on disk): a read may
// start early (zinf_param_tier_read, the prefetcher's read-ahead) and a gather waits only
// for its own. Reads and write-backs run in order on the tier's stream, so a write-back
// always lands before a later read of the slice.

typedef struct zinf_param_tier zinf_param_tier;

// On the communication stream: full (world * bytes, device) = every rank's mine (bytes,
// host memory when mine_host, else device memory).
typedef zinf_status (*zinf_tier_gather_fn)(void *ctx, const void *mine, bool mine_host, void *full, size_t bytes);

typedef struct zinf_param_tier_config {
    zinf_offload_device device; // NONE (the device), CPU or NVME
    const size_t *slice;        // per module: this rank's slice in elements (0: none), consecutive
    const char *const *names;   // per module, for messages (borrowed: they outlive the tier)
    int nmod;
    zinf_dtype dtype;
    bool pin_memory;
    int64_t max_in_cpu;    // nvme: elements kept in host memory
    int64_t buffer_size;   // nvme: elements per pool buffer (raised to the largest slice on disk)
    int64_t buffer_count;  // nvme: pool buffers
    bool own_stream;       // a stream of its own even without nvme (for a background update's stores)
    zinf_swap_config swap; // nvme
    // borrowed
    zinf_device *dev;
    zinf_stream *compute; // where device-side copies run
    zinf_stream *comm;    // where gathers run
    zinf_host_pool *host;
    zinf_latch *failure; // a failed read or write-back on the tier's stream lands here
    zinf_tier_gather_fn gather;
    void *gather_ctx;
} zinf_param_tier_config;

zinf_status zinf_param_tier_create(zinf_param_tier **out, const zinf_param_tier_config *cfg);
void zinf_param_tier_destroy(zinf_param_tier *t); // waits for its stream; NULL is a no-op

// Whether module mod's slice lives in the swap store.
bool zinf_param_tier_on_disk(const zinf_param_tier *t, int mod);
// Where reads, write-backs and stores from host memory run: the tier's stream, or the
// compute stream when it has none.
zinf_stream *zinf_param_tier_stream(zinf_param_tier *t);
// Pool buffers holding no read; start reading module mod's slice into one; whether a
// read of it is started; forget every read no gather took (the slices changed; NULL
// is a no-op).
int zinf_param_tier_free_buffers(zinf_param_tier *t);
zinf_status zinf_param_tier_read(zinf_param_tier *t, int mod);
bool zinf_param_tier_has_read(zinf_param_tier *t, int mod);
void zinf_param_tier_forget_reads(zinf_param_tier *t);
// Queue the gather of module mod's slices into full (device, world * slice elements) on
// the communication stream, reading the slice first if it is on disk and not read yet.
zinf_status zinf_param_tier_gather(zinf_param_tier *t, int mod, void *full);
// The same for elements [off, off + n) of every rank's slice (full: world * n elements),
// one tile of a module gathered tile by tile. A slice on disk is read whole at its
// first part (unless read already) and its buffer kept for the other parts until
// zinf_param_tier_release (a no-op for a slice not on disk).
zinf_status zinf_param_tier_gather_part(zinf_param_tier *t, int mod, size_t off, size_t n, void *full);
zinf_status zinf_param_tier_release(zinf_param_tier *t, int mod);
// The device address of module mod's slice, or NULL where it lives in host memory or on disk.
void *zinf_param_tier_device_slice(zinf_param_tier *t, int mod);
// Queue storing module mod's new slice from src: host memory when src_host (page-aligned,
// since it goes to disk as it is, and untouched until the tier's stream passes), else
// device memory (ordered on the compute stream). A slice from host memory that goes to
// disk is also handed to a pool buffer while more than one is free, as a read of it:
// the gather after a background update then reads nothing (handoff_bytes counts these).
// Safe to call on one thread while another reads and gathers.
zinf_status zinf_param_tier_store(zinf_param_tier *t, int mod, const void *src, bool src_host);
// Synchronously write or read n elements at offset off of module mod's slice, from or
// into host memory; a write drops any read of the slice not gathered yet.
zinf_status zinf_param_tier_write(zinf_param_tier *t, int mod, size_t off, size_t n, const void *src);
zinf_status zinf_param_tier_copy_out(zinf_param_tier *t, int mod, size_t off, size_t n, void *dst);

typedef struct zinf_param_tier_stats {
    int64_t device_bytes; // slices kept on the device
    int64_t host_bytes;   // slices kept in host memory
    int resident;         // nvme: modules kept in host memory
    int buffers;          // nvme: the pool
    int64_t buffer_bytes;
    int64_t nvme_bytes;    // the swap store
    int64_t handoff_bytes; // slices handed to the pool by their store so far, not read back
} zinf_param_tier_stats;
void zinf_param_tier_get_stats(zinf_param_tier *t, zinf_param_tier_stats *out);
// What zinf_param_tier_create would take with cfg, taking nothing: cfg's handles may be
// NULL; stripe is the aio engine's block_size, the swap file's stripe unit.
zinf_status zinf_param_tier_plan(const zinf_param_tier_config *cfg, uint64_t stripe, zinf_param_tier_stats *out);

// ---- the prefetcher ----
// Stage 3's decisions over the trace of module uses, recorded in the first step: what
// to gather ahead (along the trace, up to bucket_size elements ahead and max_live
// elements gathered at once), whether a module just used stays gathered (smaller than
// persistence_threshold, or used again within max_reuse_distance elements), and when
// execution departs from the trace (the rest of the step gathers on demand and its uses
// become the new trace). Decisions depend only on the trace and element counts, never
// on timing, so every rank makes the same ones in the same order and issues the same
// collectives. The prefetcher holds no buffers: the caller gathers and releases, and
// says so.

typedef struct zinf_prefetch zinf_prefetch;

typedef struct zinf_prefetch_config {
    int nmod;
    const size_t *numel;           // per module: parameters (reuse distances count these)
    const size_t *padded;          // per module: elements of its gathered buffer (budgets count these)
    const char *const *names;      // per module, for the departure message
    int64_t bucket_size;           // stage3_prefetch_bucket_size
    int64_t max_live;              // stage3_max_live_parameters
    int64_t persistence_threshold; // stage3_param_persistence_threshold
    int64_t max_reuse_distance;    // stage3_max_reuse_distance
} zinf_prefetch_config;

zinf_status zinf_prefetch_create(zinf_prefetch **out, const zinf_prefetch_config *cfg);
void zinf_prefetch_destroy(zinf_prefetch *p); // NULL is a no-op

// Module x is used now: the next use along the trace, or a departure from it (said once
// at INFO). Modules of no parameters are not uses; one the caller never gathers whole
// (padded 0: it comes in tiles) is a use, which reuse distances count, never gathered
// ahead.
zinf_status zinf_prefetch_use(zinf_prefetch *p, int x);
// Modules to gather ahead now, in order, written to out (room for nmod): along the
// trace from the current use, within the budgets. They count as gathered.
int zinf_prefetch_ahead(zinf_prefetch *p, int *out);
// The caller gathered (on demand) or released module x.
void zinf_prefetch_gathered(zinf_prefetch *p, int x);
void zinf_prefetch_released(zinf_prefetch *p, int x);
bool zinf_prefetch_is_gathered(const zinf_prefetch *p, int x);
// Whether x, just used, stays gathered.
bool zinf_prefetch_keep(const zinf_prefetch *p, int x);
// Whether execution follows a recorded trace (false in the first step and after a
// departure); the uses still ahead on it (a pointer into it), none when it does not.
bool zinf_prefetch_following(const zinf_prefetch *p);
int zinf_prefetch_upcoming(const zinf_prefetch *p, const int **uses);
// The step is over, every buffer released: this step's uses become the trace when they
// differ from it, and the next step starts at its beginning.
zinf_status zinf_prefetch_end_step(zinf_prefetch *p);
// Gathered elements now, and the most at once so far.
int64_t zinf_prefetch_live(const zinf_prefetch *p);
int64_t zinf_prefetch_live_peak(const zinf_prefetch *p);

#ifdef __cplusplus
}
#endif
#endif
