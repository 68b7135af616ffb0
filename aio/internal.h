// aio internals: the request, ticket and worker structures shared by the engine
// (engine.c), the per-worker IO loops (ring.c, threads.c) and files (file.c).
#ifndef ZINF_AIO_INTERNAL_H
#define ZINF_AIO_INTERNAL_H

#include <liburing.h>
#include <pthread.h>
#include <sys/types.h>

#include "zinf_aio.h"
#include "zinf_internal.h"

// One block_size piece of a read or write, on one file of a (striped) file.
typedef struct chunk {
    struct chunk *next;
    int fd;
    int dir;          // which of the file's directories
    const char *path; // for error messages
    uint64_t offset;  // in that file
    char *buf;
    uint32_t len;
    uint32_t done; // bytes transferred so far (short transfers resume from here)
    bool write;
    uint32_t slot; // ticket slot
} chunk;

typedef struct ticket_slot {
    uint32_t gen; // bumped on release, so a stale ticket is recognized
    bool used;
    uint32_t pending; // chunks not yet completed
    int err;          // first error (positive errno), 0 if none
    char detail[320];
    chunk *chunks; // one allocation for all of this ticket's chunks
} ticket_slot;

typedef struct worker {
    zinf_aio *aio;
    int index;
    pthread_t thread;
    pthread_mutex_t lock; // guards head/tail/stop
    pthread_cond_t cond;
    chunk *head, *tail;
    bool stop;
    int init_err; // ring setup result, reported back to zinf_aio_create
} worker;

struct zinf_aio {
    zinf_aio_params cfg;
    bool uring; // workers run rings (else pread/pwrite)
    worker *workers;
    pthread_mutex_t lock; // guards the ticket table and init handshake
    pthread_cond_t cond;  // a ticket completed / a worker finished setting up
    ticket_slot *slots;
    uint32_t nslots;
    uint32_t started; // workers done with setup
    uint64_t spread;  // rotates chunks over a directory's workers
};

struct zinf_aio_file {
    int n; // directories
    int *fds;
    char **paths;
    uint64_t size;   // logical bytes
    uint64_t stripe; // bytes per directory in turn
    uint32_t align;
    bool direct;
    bool keep;
};

// The O_DIRECT offset alignment of an open file (statx, else sysfs); 0 when unknown.
uint32_t aio_logical_block(int fd, dev_t dev);

// Record that c finished with err (0: success) and wake waiters when its ticket is
// complete. Called by workers.
void aio_chunk_done(zinf_aio *aio, chunk *c, int err);

// The worker loops: return when the worker is told to stop and its queue is empty.
void *aio_ring_worker(void *arg);
void *aio_thread_worker(void *arg);
// Take all queued chunks (blocking until there are some or stop); NULL when stopping.
chunk *aio_worker_take(worker *w, bool block);

#endif
