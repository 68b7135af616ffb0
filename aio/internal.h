// aio internals: the request, ticket and worker structures shared by the engine
// (engine.c), the per-worker IO loops (ring.c, threads.c) and files (file.c).
#ifndef ZINF_AIO_INTERNAL_H
#define ZINF_AIO_INTERNAL_H

#include <liburing.h>
#include <pthread.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "zinf_aio.h"
#include "zinf_internal.h"

// Sizes of the sparse tables every ring registers at setup: registered buffer regions
// (the kernel takes at most 1 GiB per entry, so a larger buffer spans several) and
// fixed files (one per directory of each open swap file).
enum { AIO_MAX_BUFS = 256, AIO_MAX_FILES = 256, AIO_MAX_BUF_ENTRY = 1 << 30 };

// One block_size piece of a read or write, on one file of a (striped) file.
typedef struct chunk {
    struct chunk *next;
    int fd;
    int dir;          // which of the file's directories
    const char *path; // for error messages
    const zinf_aio_file *file;
    uint64_t logical; // offset in the whole (striped) file
    uint64_t offset;  // in that directory's file
    char *buf;
    uint32_t len;
    uint32_t done; // bytes transferred so far (short transfers resume from here)
    bool write;
    uint32_t slot;  // ticket slot
    int fixed_file; // index in the rings' file table, -1 for the plain fd
    int buf_index;  // registered buffer entry holding [buf, buf+len), -1 for none
    int fault;      // what zinf_fault_next said of it, until applied
    int res;        // the last completion's result, until its check has run
} chunk;

typedef struct ticket_slot {
    uint32_t gen; // bumped on release, so a stale ticket is recognized
    bool used;
    uint32_t pending; // chunks not yet completed
    int err;          // the error of the first failing chunk (positive errno), 0 if none
    size_t err_chunk; // that chunk's place in the request, for a failure in an earlier one
    char detail[320];
    chunk *chunks; // one allocation for all of this ticket's chunks
} ticket_slot;

// A change to the ring's registered tables, which only the ring's own thread may make
// (a SINGLE_ISSUER ring refuses io_uring_register from any other).
typedef struct ring_update {
    bool pending;     // set by the engine, cleared by the worker when applied
    bool file;        // file table (fd) or buffer table (iov)
    unsigned index;   // table entry
    int fd;           // -1 clears the entry
    struct iovec iov; // {NULL, 0} clears the entry
    int result;       // 0 or -errno, from the worker
} ring_update;

typedef struct worker {
    zinf_aio *aio;
    int index;
    pthread_t thread;
    pthread_mutex_t lock;   // guards head/tail/stop/update
    pthread_cond_t cond;    // work, stop or an update for the worker
    pthread_cond_t updated; // the worker applied the update
    chunk *head, *tail;
    bool stop;
    ring_update update;
    int init_err; // ring setup result, reported back to zinf_aio_create
    bool tables;  // the ring took the sparse buffer and file tables
    // Requests this worker issued, read by zinf_aio_stats (relaxed atomics).
    uint64_t requests, fixed_buffer, fixed_file, resubmitted;
} worker;

// A registered buffer region, split over table entries of at most AIO_MAX_BUF_ENTRY.
typedef struct buf_entry {
    char *base;
    size_t len;
    int region; // entry of the region's first piece, which names the region
    bool live;  // submissions may use it (registered with every ring)
    bool taken; // the entry is allocated (live or being registered/removed)
} buf_entry;

struct zinf_aio {
    zinf_aio_params cfg;
    bool uring; // workers run rings (else pread/pwrite)
    worker *workers;
    pthread_mutex_t lock; // guards the ticket table and init handshake
    pthread_cond_t cond;  // a ticket completed / a worker finished setting up
    ticket_slot *slots;
    uint32_t nslots;
    uint32_t started;               // workers done with setup
    uint64_t spread;                // rotates chunks over a directory's workers
    bool tables;                    // every ring took the sparse tables: registration is possible
    pthread_mutex_t reg_lock;       // one registration change at a time
    buf_entry bufs[AIO_MAX_BUFS];   // guarded by lock
    bool file_taken[AIO_MAX_FILES]; // guarded by lock
    // Per direction (0 read, 1 write), guarded by lock: bytes asked for, tickets in
    // flight, and the time at least one was (busy_ns, plus now - busy_since while so).
    uint64_t bytes[2];
    uint32_t inflight[2];
    int64_t busy_since[2], busy_ns[2];
};

struct zinf_aio_file {
    int n; // directories
    int *fds;
    char **paths;
    uint64_t size;   // logical bytes
    uint64_t stripe; // bytes per directory in turn
    int *fixed;      // the rings' file table entry per directory, -1 where unregistered
    zinf_aio *aio;
    uint32_t align;
    bool direct;
    bool keep;
    int (*check)(void *arg, bool write, uint64_t offset, const void *buf, size_t len);
    void *check_arg;
};

// The O_DIRECT offset alignment of an open file (statx, else sysfs); 0 when unknown.
uint32_t aio_logical_block(int fd, dev_t dev);

// What a test asked for applied to the request's result res (bytes or -errno) once it
// completes: the result the worker then acts on.
int aio_fault_apply(chunk *c, int res);
// A completed request's errno (0: success) from its last result, after the file's
// check of its bytes (a read's as they arrived, a write's as they went; the caller
// does not touch a buffer before its ticket completes).
int aio_completion(const chunk *c, int res);

// One more of a worker's counters (read by zinf_aio_get_stats on other threads).
static inline void aio_count(uint64_t *counter) { __atomic_store_n(counter, *counter + 1, __ATOMIC_RELAXED); }

// Record that c finished with err (0: success) and wake waiters when its ticket is
// complete. Called by workers.
void aio_chunk_done(zinf_aio *aio, chunk *c, int err);

// The worker loops: return when the worker is told to stop and its queue is empty.
void *aio_ring_worker(void *arg);
void *aio_thread_worker(void *arg);
// Take all queued chunks, when block waiting until there are some, the worker is told
// to stop, or a table update is pending (which the ring worker then applies).
chunk *aio_worker_take(worker *w, bool block);

// Registered tables (register.c). Apply every ring's update, one worker after the
// other: 0, or the first -errno after undoing the entry on the rings that took it.
int aio_update_rings(zinf_aio *aio, ring_update u);
// Register f's descriptors as fixed files where the rings allow it (a refusal just
// leaves them plain); and remove them again.
void aio_file_register(zinf_aio *aio, zinf_aio_file *f);
void aio_file_unregister(zinf_aio_file *f);
// The buffer entry holding [buf, buf+len), -1 for none. Called with aio->lock held.
int aio_buf_index(const zinf_aio *aio, const char *buf, size_t len);

#endif
