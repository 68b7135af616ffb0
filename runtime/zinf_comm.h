// zinf comm: communication between data-parallel ranks. `single` is one rank; `mpi`
// runs collectives over host memory between processes started by mpirun (it is also
// what bootstraps NCCL). No wait inside a collective outlasts the communicator's
// timeout (a large call may take several waits while it makes progress): a rank that
// died or stopped makes the others fail with ZINF_ERR_COMM, never hang.
#ifndef ZINF_COMM_H
#define ZINF_COMM_H

#include <stdbool.h>
#include <stddef.h>

#include "zinf_base.h"

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
    ZINF_COMM_SINGLE,
    ZINF_COMM_MPI,
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
const char *zinf_comm_name(const zinf_comm *c); // "single", "mpi"

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
zinf_status zinf_comm_broadcast(zinf_comm *c, void *buf, size_t bytes, int root);
zinf_status zinf_comm_barrier(zinf_comm *c);

#ifdef __cplusplus
}
#endif
#endif
