// zinf comm: communication between data-parallel ranks. `single` is one rank; `mpi`
// runs collectives over host memory between processes started by mpirun; attached to
// a CUDA device, the communicator becomes `nccl`: NCCL, bootstrapped over MPI, runs the
// collectives on device buffers, on the caller's stream. No wait inside a collective outlasts the communicator's
// timeout (a large call may take several waits while it makes progress): a rank that
// died or stopped makes the others fail with ZINF_ERR_COMM, never hang.
#ifndef ZINF_COMM_H
#define ZINF_COMM_H

#include <stdbool.h>
#include <stddef.h>

#include "zinf_base.h"
#include "zinf_gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zinf_comm_info {
    bool mpi;              // built with MPI
    char mpi_version[160]; // MPI_Get_library_version, first line
    bool nccl;             // built with NCCL
    int nccl_version;      // ncclGetVersion, e.g. 22703
} zinf_comm_info;

void zinf_comm_probe(zinf_comm_info *out);

typedef enum zinf_comm_kind {
    ZINF_COMM_AUTO = 0, // mpi when an MPI launcher started more than one rank, else single
    ZINF_COMM_SINGLE = 1,
    ZINF_COMM_MPI = 2,
} zinf_comm_kind;

typedef struct zinf_comm zinf_comm;

// Join the job. mpi initializes MPI (threads: every collective may come from a
// different thread, one at a time) unless the program already did. timeout_s bounds
// every later wait (0: ZINF_COMM_TIMEOUT, else 300 s).
zinf_status zinf_comm_create(zinf_comm **out, zinf_comm_kind kind, double timeout_s);
// Finalizes MPI when this communicator initialized it and nothing failed; after a
// failure it leaves MPI as it is, so the process can exit without hanging in finalize.
void zinf_comm_destroy(zinf_comm *c); // NULL is a no-op
int zinf_comm_rank(const zinf_comm *c);
int zinf_comm_size(const zinf_comm *c);
// Among the ranks on this host (same host name): which GPU a rank takes.
int zinf_comm_local_rank(const zinf_comm *c);
int zinf_comm_local_size(const zinf_comm *c);
const char *zinf_comm_name(const zinf_comm *c); // "single", "mpi", "nccl", "sim"
// Nodes: the ranks on one host, or with ZINF_RANKS_PER_NODE=K every K consecutive ranks
// (so that one machine can play several nodes). Numbered from 0 in rank order.
int zinf_comm_node(const zinf_comm *c);                // this rank's
int zinf_comm_nodes(const zinf_comm *c);               // how many
int zinf_comm_node_of(const zinf_comm *c, int rank);   // -1 for no such rank

// Bytes this rank has received since creation, counted by each collective's
// definition: from every other rank, an all-gather its part, a reduce-scatter its
// block of that rank's input, an all-reduce both (reduce-scatter then all-gather; on
// the host path the n % W tail is gathered whole), a broadcast the buffer from the
// root; split by whether that rank is on this rank's node. Communicators split from c
// add to c's counts.
typedef struct zinf_comm_bytes {
    int64_t intra, inter;
} zinf_comm_bytes;
void zinf_comm_get_bytes(const zinf_comm *c, zinf_comm_bytes *out);

// DeepSpeed's comms logger: every collective of c (and of the communicators split from
// it) of the kinds chosen is timed and counted, by kind, message size, ranks and path
// ("mpi", "nccl", "sim"), from now on. A message is what one rank gives: an all-reduce's
// and a broadcast's buffer, an all-gather's block, a reduce-scatter's output block, an
// all-to-all's whole input. Time is wall time on the host paths, the NCCL stream's
// time between the collective's start and end on a GPU, and the modeled links' time
// on a simulated device. verbose: every collective is logged as it completes (rank 0).
typedef enum zinf_comm_op {
    ZINF_COMM_ALL_REDUCE = 0,
    ZINF_COMM_ALL_GATHER = 1,
    ZINF_COMM_REDUCE_SCATTER = 2,
    ZINF_COMM_BROADCAST = 3,
    ZINF_COMM_ALL_TO_ALL = 4,
    ZINF_COMM_BARRIER = 5,
    ZINF_COMM_OPS = 6,
} zinf_comm_op;
// DeepSpeed's names, by zinf_comm_op, then NULL: an initializer, so that the config's
// schema (which does not link the comm layer) spells them from the same list.
#define ZINF_COMM_OP_NAMES {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "barrier", NULL}
extern const char *const zinf_comm_op_names[ZINF_COMM_OPS + 1];
// ops: a bit (1 << op) per kind logged.
zinf_status zinf_comm_log_start(zinf_comm *c, unsigned ops, bool verbose);
// Stop logging and drop the records (a later start begins afresh); after the
// communicators split from c are destroyed. Not started: a no-op.
void zinf_comm_log_stop(zinf_comm *c);
// What has been logged, as DeepSpeed's comms summary table (malloc'd; free()): per kind
// and message size the count, total and mean latency (ms), and the mean algorithm and
// bus bandwidth (Gbps, as nccl-tests defines them); "" when nothing was logged.
zinf_status zinf_comm_log_summary(const zinf_comm *c, char **out);

// Every rank of c calls it: the ranks with equal color (>= 0) form *out, ranked in c's
// order, with c's timeout and nodes. *out must be destroyed before c. A rank that does
// not join makes the others fail within the timeout.
zinf_status zinf_comm_split(zinf_comm *c, int color, zinf_comm **out);

// Collectives over host memory. All ranks call them in the same order with the same
// sizes. Sums are formed in rank order, x_0 + x_1 + ... + x_{W-1} left to right, so
// every rank gets the same bits and the result equals a sequential sum over ranks.

// The elementwise sum of every rank's in (W * count floats), scattered: rank r gets
// elements [r * count, (r + 1) * count) of it in out (count floats).
zinf_status zinf_comm_reduce_scatter_f32(zinf_comm *c, const float *in, float *out, size_t count);
// buf (n floats, any n) becomes the sum of every rank's buf.
zinf_status zinf_comm_allreduce_f32(zinf_comm *c, float *buf, size_t n);
// The same for doubles (losses, squared norms, flags).
zinf_status zinf_comm_allreduce_f64(zinf_comm *c, double *buf, size_t n);
// out (W * bytes) = every rank's in (bytes), in rank order; in may equal
// out + rank * bytes.
zinf_status zinf_comm_allgather(zinf_comm *c, const void *in, void *out, size_t bytes);
// out (W * bytes): block r is rank r's block for this rank, i.e. rank r's
// in + rank * bytes; in (W * bytes) holds this rank's block for every rank. in and out
// must not overlap.
zinf_status zinf_comm_alltoall(zinf_comm *c, const void *in, void *out, size_t bytes);
zinf_status zinf_comm_broadcast(zinf_comm *c, void *buf, size_t bytes, int root);
zinf_status zinf_comm_barrier(zinf_comm *c);

// ---- device buffers (NCCL, or modeled on a simulated device) ----
// Sums are NCCL's (its ring or tree order), not the host path's rank order: results
// agree with the host path within rounding, not bit for bit. On a simulated device
// nothing moves: the ranks meet on the host, then the device's links are busy for the
// bytes this rank receives, from its node at the modeled NVLink rate and from other
// nodes at the network's (zinf_sim_collective_s); the bytes are counted all the same.

// Start NCCL on d's GPU (every rank calls it, each with its own GPU), or the modeled
// links of a sim device. Host collectives keep working beside it. ZINF_ERR_UNSUPPORTED
// when the build has no NCCL or d is neither a CUDA nor a sim device; ZINF_ERR_COMM when
// NCCL fails or a rank does not join in time.
zinf_status zinf_comm_attach_device(zinf_comm *c, zinf_device *d);
// Finish every device collective and stop NCCL; before d is destroyed.
void zinf_comm_detach_device(zinf_comm *c); // not attached: a no-op
bool zinf_comm_on_device(const zinf_comm *c);
// The collectives above, on device memory of the attached device, enqueued on s (a
// stream of that device) and complete when s passes them. A collective that does not
// complete within the timeout (a rank died or stopped) aborts NCCL: the streams move
// on, and zinf_comm_status and every later call report ZINF_ERR_COMM.
zinf_status zinf_comm_device_reduce_scatter_f32(zinf_comm *c, zinf_stream *s, const float *in, float *out,
                                                size_t count); // out may be in + rank * count
zinf_status zinf_comm_device_allreduce_f32(zinf_comm *c, zinf_stream *s, float *buf, size_t n);
zinf_status zinf_comm_device_allgather(zinf_comm *c, zinf_stream *s, const void *in, void *out,
                                       size_t bytes); // in may be out + rank * bytes
zinf_status zinf_comm_device_alltoall(zinf_comm *c, zinf_stream *s, const void *in, void *out, size_t bytes);
// ZINF_OK, or the failure that ended the communicator (host or device side).
zinf_status zinf_comm_status(zinf_comm *c);

#ifdef __cplusplus
}
#endif
#endif
