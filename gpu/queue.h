// Streams made of threads, shared by the host and sim backends. Each stream is a thread
// running a queue of tasks in submission order, so work on different streams really
// runs concurrently and a missing event wait shows up as a wrong result (host) or a
// wrong time (sim), as it would on a GPU. Events are counters: recording takes a
// ticket, the stream's thread publishes it when it reaches the record, a wait blocks
// its stream until then. A backend gives each stream a runner for its tasks.
#ifndef ZINF_GPU_QUEUE_H
#define ZINF_GPU_QUEUE_H

#include "internal.h"

typedef struct queue_event {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t recorded;  // tickets handed out
    uint64_t completed; // the highest ticket a stream has reached
    int64_t reached_ns; // when it did (the monotonic clock; the sim's modeled time)
} queue_event;

typedef enum task_kind { TASK_OP, TASK_COPY, TASK_MEMSET, TASK_RECORD, TASK_WAIT, TASK_FN, TASK_STOP } task_kind;

typedef struct task {
    task_kind kind;
    int64_t submitted_ns; // when the caller enqueued it
    union {
        op_record op;
        struct {
            void *dst;
            const void *src;
            size_t bytes;
            int byte;
            zinf_copy_kind kind;
        } mem;
        struct {
            queue_event *e;
            uint64_t ticket;
        } ev;
        struct {
            void (*fn)(void *);
            void *arg;
        } fn;
    } u;
} task;

// A backend's side of a stream: run one task on the stream's thread (a failure is
// kept for the next sync), and free its own state when the stream goes.
typedef struct queue_runner {
    zinf_status (*run)(void *own, const task *t);
    void (*release)(void *own);
} queue_runner;

// Make s's queue and thread; own is the runner's state, released with the stream.
zinf_status queue_stream_create(zinf_stream *s, const queue_runner *r, void *own);

// Publish ticket as reached at time at_ns; block until ticket is reached and return the
// time it was (at least: a later record may have been reached since).
void queue_event_reach(queue_event *e, uint64_t ticket, int64_t at_ns);
int64_t queue_event_wait_for(queue_event *e, uint64_t ticket);

// The backend_ops entries every queue backend shares.
void queue_stream_destroy(zinf_stream *s);
zinf_status queue_stream_sync(zinf_stream *s);
void *queue_stream_native(zinf_stream *s);
zinf_status queue_event_create(zinf_event *e);
void queue_event_destroy(zinf_event *e);
zinf_status queue_event_record(zinf_event *e, zinf_stream *s);
zinf_status queue_stream_wait_event(zinf_stream *s, zinf_event *e);
zinf_status queue_event_sync(zinf_event *e);
bool queue_event_done(zinf_event *e);
zinf_status queue_event_elapsed(zinf_event *start, zinf_event *end, double *seconds);
zinf_status queue_copy(zinf_stream *s, void *dst, const void *src, size_t bytes, zinf_copy_kind kind);
zinf_status queue_memset(zinf_stream *s, void *dst, int byte, size_t bytes);
zinf_status queue_host_fn(zinf_stream *s, void (*fn)(void *), void *arg);
zinf_status queue_launch(zinf_stream *s, const op_record *op);

// Those entries, as designated initializers of a backend_ops table.
#define QUEUE_BACKEND_OPS                                                                                              \
    .stream_destroy = queue_stream_destroy, .stream_sync = queue_stream_sync, .stream_native = queue_stream_native,    \
    .event_create = queue_event_create, .event_destroy = queue_event_destroy, .event_record = queue_event_record,      \
    .stream_wait_event = queue_stream_wait_event, .event_sync = queue_event_sync, .event_done = queue_event_done,     \
    .event_elapsed = queue_event_elapsed, .copy = queue_copy, .memset = queue_memset, .host_fn = queue_host_fn,       \
    .launch = queue_launch

#endif
