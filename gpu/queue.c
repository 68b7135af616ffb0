// Streams made of threads (queue.h): the queue, its thread, events and the entries of
// backend_ops that the host and sim backends share.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "queue.h"

// ---- events ----

void queue_event_reach(queue_event *e, uint64_t ticket, int64_t at_ns) {
    pthread_mutex_lock(&e->mu);
    if (ticket > e->completed) {
        e->completed = ticket;
        e->reached_ns = at_ns;
    }
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

int64_t queue_event_wait_for(queue_event *e, uint64_t ticket) {
    pthread_mutex_lock(&e->mu);
    while (e->completed < ticket)
        pthread_cond_wait(&e->cv, &e->mu);
    int64_t at = e->reached_ns;
    pthread_mutex_unlock(&e->mu);
    return at;
}

// ---- streams ----

typedef struct queue_stream {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_idle;
    task *q; // ring of cap tasks
    size_t cap, head, count;
    uint64_t submitted, finished;
    zinf_status err; // the first failure since the last sync
    char err_text[512];
    queue_runner runner;
    void *own; // the runner's state, used only by this stream's thread
} queue_stream;

static void run_task(queue_stream *qs, const task *t) {
    zinf_status st = t->kind == TASK_STOP ? ZINF_OK : qs->runner.run(qs->own, t);
    if (st != ZINF_OK) {
        pthread_mutex_lock(&qs->mu);
        if (qs->err == ZINF_OK) {
            qs->err = st;
            snprintf(qs->err_text, sizeof qs->err_text, "%s", zinf_last_error());
        }
        pthread_mutex_unlock(&qs->mu);
    }
}

static void *stream_main(void *arg) {
    queue_stream *qs = arg;
    for (;;) {
        pthread_mutex_lock(&qs->mu);
        while (qs->count == 0)
            pthread_cond_wait(&qs->cv_work, &qs->mu);
        task t = qs->q[qs->head];
        qs->head = (qs->head + 1) % qs->cap;
        qs->count--;
        pthread_mutex_unlock(&qs->mu);

        run_task(qs, &t);

        pthread_mutex_lock(&qs->mu);
        qs->finished++;
        pthread_cond_broadcast(&qs->cv_idle);
        pthread_mutex_unlock(&qs->mu);
        if (t.kind == TASK_STOP) return NULL;
    }
}

static zinf_status submit(zinf_stream *s, task *t) {
    queue_stream *qs = s->impl;
    t->submitted_ns = zinf_clock_ns();
    pthread_mutex_lock(&qs->mu);
    if (qs->count == qs->cap) { // grow the ring, unrolling it into the new array
        size_t cap = qs->cap * 2;
        task *q = malloc(cap * sizeof *q);
        if (!q) {
            pthread_mutex_unlock(&qs->mu);
            return zinf_fail(ZINF_ERR_NOMEM, "stream: out of memory for its queue (%zu tasks)", cap);
        }
        for (size_t i = 0; i < qs->count; i++)
            q[i] = qs->q[(qs->head + i) % qs->cap];
        free(qs->q);
        qs->q = q;
        qs->cap = cap;
        qs->head = 0;
    }
    qs->q[(qs->head + qs->count) % qs->cap] = *t;
    qs->count++;
    qs->submitted++;
    pthread_cond_signal(&qs->cv_work);
    pthread_mutex_unlock(&qs->mu);
    return ZINF_OK;
}

zinf_status queue_stream_create(zinf_stream *s, const queue_runner *r, void *own) {
    queue_stream *qs = calloc(1, sizeof *qs);
    if (!qs) return zinf_fail(ZINF_ERR_NOMEM, "stream: out of memory");
    qs->cap = 64;
    qs->q = malloc(qs->cap * sizeof *qs->q);
    if (!qs->q) {
        free(qs);
        return zinf_fail(ZINF_ERR_NOMEM, "stream: out of memory");
    }
    qs->runner = *r;
    qs->own = own;
    pthread_mutex_init(&qs->mu, NULL);
    pthread_cond_init(&qs->cv_work, NULL);
    pthread_cond_init(&qs->cv_idle, NULL);
    int rc = pthread_create(&qs->thread, NULL, stream_main, qs);
    if (rc != 0) {
        free(qs->q);
        free(qs);
        return zinf_fail_errno(rc, "stream: cannot start its thread");
    }
    s->impl = qs;
    return ZINF_OK;
}

zinf_status queue_stream_sync(zinf_stream *s) {
    queue_stream *qs = s->impl;
    pthread_mutex_lock(&qs->mu);
    while (qs->finished < qs->submitted)
        pthread_cond_wait(&qs->cv_idle, &qs->mu);
    zinf_status st = qs->err;
    qs->err = ZINF_OK;
    if (st != ZINF_OK) zinf_fail(st, "%s", qs->err_text);
    pthread_mutex_unlock(&qs->mu);
    return st;
}

void queue_stream_destroy(zinf_stream *s) {
    queue_stream *qs = s->impl;
    task stop = {.kind = TASK_STOP};
    // The queue can always take one more task unless memory is gone; then drain first.
    while (submit(s, &stop) != ZINF_OK)
        queue_stream_sync(s);
    pthread_join(qs->thread, NULL);
    pthread_mutex_destroy(&qs->mu);
    pthread_cond_destroy(&qs->cv_work);
    pthread_cond_destroy(&qs->cv_idle);
    if (qs->runner.release) qs->runner.release(qs->own);
    free(qs->q);
    free(qs);
}

// Queue streams are threads of zinf's own; no library can enqueue on them.
void *queue_stream_native(zinf_stream *s) {
    (void)s;
    return NULL;
}

zinf_status queue_event_create(zinf_event *e) {
    queue_event *qe = calloc(1, sizeof *qe);
    if (!qe) return zinf_fail(ZINF_ERR_NOMEM, "event: out of memory");
    pthread_mutex_init(&qe->mu, NULL);
    pthread_cond_init(&qe->cv, NULL);
    e->impl = qe;
    return ZINF_OK;
}

void queue_event_destroy(zinf_event *e) {
    queue_event *qe = e->impl;
    pthread_mutex_destroy(&qe->mu);
    pthread_cond_destroy(&qe->cv);
    free(qe);
}

zinf_status queue_event_record(zinf_event *e, zinf_stream *s) {
    queue_event *qe = e->impl;
    pthread_mutex_lock(&qe->mu);
    uint64_t ticket = ++qe->recorded;
    pthread_mutex_unlock(&qe->mu);
    task t = {.kind = TASK_RECORD, .u.ev = {qe, ticket}};
    return submit(s, &t);
}

// Waits for the record that was last made before this call, as cudaStreamWaitEvent.
zinf_status queue_stream_wait_event(zinf_stream *s, zinf_event *e) {
    queue_event *qe = e->impl;
    pthread_mutex_lock(&qe->mu);
    uint64_t ticket = qe->recorded;
    pthread_mutex_unlock(&qe->mu);
    if (ticket == 0) return ZINF_OK;
    task t = {.kind = TASK_WAIT, .u.ev = {qe, ticket}};
    return submit(s, &t);
}

zinf_status queue_event_sync(zinf_event *e) {
    queue_event *qe = e->impl;
    pthread_mutex_lock(&qe->mu);
    uint64_t ticket = qe->recorded;
    pthread_mutex_unlock(&qe->mu);
    queue_event_wait_for(qe, ticket);
    return ZINF_OK;
}

bool queue_event_done(zinf_event *e) {
    queue_event *qe = e->impl;
    pthread_mutex_lock(&qe->mu);
    bool done = qe->completed >= qe->recorded;
    pthread_mutex_unlock(&qe->mu);
    return done;
}

zinf_status queue_event_elapsed(zinf_event *start, zinf_event *end, double *seconds) {
    queue_event *a = start->impl, *b = end->impl;
    pthread_mutex_lock(&a->mu);
    int64_t t0 = a->reached_ns;
    pthread_mutex_unlock(&a->mu);
    pthread_mutex_lock(&b->mu);
    int64_t t1 = b->reached_ns;
    pthread_mutex_unlock(&b->mu);
    *seconds = 1e-9 * (double)(t1 - t0);
    return ZINF_OK;
}

zinf_status queue_copy(zinf_stream *s, void *dst, const void *src, size_t bytes, zinf_copy_kind kind) {
    task t = {.kind = TASK_COPY, .u.mem = {.dst = dst, .src = src, .bytes = bytes, .kind = kind}};
    return submit(s, &t);
}

zinf_status queue_memset(zinf_stream *s, void *dst, int byte, size_t bytes) {
    task t = {.kind = TASK_MEMSET, .u.mem = {.dst = dst, .bytes = bytes, .byte = byte}};
    return submit(s, &t);
}

zinf_status queue_host_fn(zinf_stream *s, void (*fn)(void *), void *arg) {
    task t = {.kind = TASK_FN, .u.fn = {fn, arg}};
    return submit(s, &t);
}

zinf_status queue_launch(zinf_stream *s, const op_record *op) {
    task t = {.kind = TASK_OP, .u.op = *op};
    return submit(s, &t);
}
