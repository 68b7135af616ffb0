// zinf comm internals: the communicator object and the table of data movements a
// backend provides. The front end (comm.c) checks arguments, splits long transfers and
// forms every sum itself, in rank order, from what the backend moves; so the sums are
// the same bits whatever the backend. Plain C: nothing outside mpi.c sees MPI types.
#ifndef ZINF_COMM_INTERNAL_H
#define ZINF_COMM_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "zinf_comm.h"
#include "zinf_internal.h"

// Moves between ranks, each waited for within c->timeout_s. Lengths are at most
// c->chunk_bytes (<= INT_MAX, an MPI count); the front end splits longer transfers.
// op names the public call, for messages. Any failure is final: the front end marks
// the communicator failed and refuses later calls.
typedef struct comm_ops {
    const char *name;
    zinf_status (*open)(zinf_comm *c); // fills rank, size and impl
    void (*close)(zinf_comm *c);       // after a failure (c->failed) it leaves MPI alone
    // Rank r gets [in + r * in_stride, + len) from every rank, in rank order, in out
    // (size * len bytes).
    zinf_status (*alltoall)(zinf_comm *c, const char *op, const void *in, size_t in_stride, void *out, size_t len);
    // [out + r * out_stride, + len) = rank r's in; in NULL: this rank's part is already
    // in place at out + rank * out_stride.
    zinf_status (*allgather)(zinf_comm *c, const char *op, const void *in, void *out, size_t out_stride, size_t len);
    zinf_status (*bcast)(zinf_comm *c, const char *op, void *buf, size_t len, int root);
    zinf_status (*barrier)(zinf_comm *c, const char *op);
    // sub (calloc'd, its settings copied) becomes the ranks of c whose color equals
    // this rank's, in c's rank order: fills its rank, size and impl. Every rank of c
    // calls it; the front end has checked, with a bounded exchange, that all are here.
    zinf_status (*split)(zinf_comm *c, zinf_comm *sub, int color);
} comm_ops;

// Always defined; without MPI in the build its open says so (ZINF_ERR_UNSUPPORTED).
extern const comm_ops zinf_comm_mpi_ops;

#define COMM_DEFAULT_TIMEOUT_S 300.0
#define COMM_DEFAULT_CHUNK     ((size_t)1 << 30)  // bytes per backend call (an MPI int count)
#define COMM_DEFAULT_SCRATCH   ((size_t)64 << 20) // the reduce paths' scratch, at most

// Bytes received, counted by each collective's definition: what a rank gets from each
// other rank, by whether that rank is on the same node. A communicator split from
// another adds to its parent's.
typedef struct comm_counts {
    _Atomic int64_t intra, inter;
} comm_counts;

struct zinf_comm {
    const comm_ops *ops;  // NULL: single (one rank, collectives are copies)
    int rank, size;       // size >= 1
    int local_rank, local_size; // among the ranks on this host
    int *host_of, *node_of;     // per rank: index of its host name, and of its node
    int nodes;                  // distinct nodes among the ranks
    comm_counts own;            // this communicator's counts, when it has no parent
    comm_counts *counts;        // &own, or the parent's
    double timeout_s;     // how long one backend call may wait for the other ranks
    size_t chunk_bytes;   // most bytes per backend call, <= INT_MAX (tests lower it)
    size_t scratch_max;   // bound on the scratch of reduce_scatter / allreduce (tests lower it)
    pthread_mutex_t lock; // one collective at a time, from whichever thread
    bool failed;          // a backend call failed: later calls refuse at once
    char failure[512];    // what that failure said
    void *scratch;        // grown on demand, freed by destroy
    size_t scratch_bytes;
    void *impl; // the backend's state
    struct nccl_state *nccl; // device collectives, once attached to a CUDA device (nccl.c)
    struct sim_link *sim;    // or to a simulated one (device.c)
    struct comm_log *log;     // the comms logger (log.c): own_log, or the parent's; NULL: off
    struct comm_log *own_log; // started on this communicator, freed with it
};

// Count bytes received from rank `from` (or, from < 0, the same from every other rank);
// what this call added, from the node and from other nodes.
zinf_comm_bytes zinf_comm_count(zinf_comm *c, int from, size_t bytes);

// The comms logger (log.c): whether c logs op, and a completed collective of op.
typedef struct comm_log comm_log;
bool comm_log_wants(const zinf_comm *c, zinf_comm_op op);
void comm_log_record(zinf_comm *c, zinf_comm_op op, size_t bytes, const char *path, double seconds);
void comm_log_free(comm_log *l);

// The device collectives on a CUDA device through NCCL (nccl.c), which device.c's
// public calls forward to unless the device is simulated.
zinf_status nccl_attach(zinf_comm *c, zinf_device *d);
void nccl_detach(zinf_comm *c);
zinf_status nccl_reduce_scatter_f32(zinf_comm *c, zinf_stream *s, const float *in, float *out, size_t count);
zinf_status nccl_allreduce_f32(zinf_comm *c, zinf_stream *s, float *buf, size_t n);
zinf_status nccl_allgather(zinf_comm *c, zinf_stream *s, const void *in, void *out, size_t bytes);
zinf_status nccl_alltoall(zinf_comm *c, zinf_stream *s, const void *in, void *out, size_t bytes);

#endif
