// The io_uring worker: one ring per worker thread, at most queue_depth requests in
// flight, every completion checked; a short transfer is resubmitted for the rest.
#include <errno.h>
#include <string.h>
#include <time.h>

#include "internal.h"

// The best setup the kernel accepts, dropping flags one by one: a single issuer with
// deferred task work (completions run only when this thread reaps), then cooperative
// task work (no IPI to interrupt it), then plain. SQPOLL takes neither task-run flag.
static int setup(struct io_uring *ring, const zinf_aio_params *cfg, unsigned *used) {
    static const unsigned tries[] = {
        IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN,
        IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_COOP_TASKRUN,
        IORING_SETUP_COOP_TASKRUN,
        IORING_SETUP_SINGLE_ISSUER, // with SQPOLL, which takes no task-run flag
        0,
    };
    int ret = -EINVAL;
    for (size_t i = 0; i < ZINF_ARRAY_LEN(tries); i++) {
        unsigned flags = tries[i];
        if (cfg->sqpoll) {
            if (flags & (IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_COOP_TASKRUN)) continue;
            flags |= IORING_SETUP_SQPOLL;
        }
        struct io_uring_params p;
        memset(&p, 0, sizeof p);
        p.flags = flags;
        ret = io_uring_queue_init_params(cfg->queue_depth, ring, &p);
        if (ret == 0) {
            *used = flags;
            return 0;
        }
        if (ret != -EINVAL && ret != -EPERM) return ret; // not a refused flag: no use trying others
    }
    return ret;
}

static void prep(worker *w, struct io_uring_sqe *sqe, chunk *c) {
    int fd = c->fixed_file >= 0 ? c->fixed_file : c->fd;
    char *buf = c->buf + c->done;
    unsigned len = c->len - c->done;
    uint64_t off = c->offset + c->done;
    if (c->buf_index >= 0 && c->write)
        io_uring_prep_write_fixed(sqe, fd, buf, len, off, c->buf_index);
    else if (c->buf_index >= 0)
        io_uring_prep_read_fixed(sqe, fd, buf, len, off, c->buf_index);
    else if (c->write)
        io_uring_prep_write(sqe, fd, buf, len, off);
    else
        io_uring_prep_read(sqe, fd, buf, len, off);
    if (c->fixed_file >= 0) sqe->flags |= IOSQE_FIXED_FILE; // after prep, which clears flags
    io_uring_sqe_set_data(sqe, c);
    aio_count(&w->requests);
    if (c->buf_index >= 0) aio_count(&w->fixed_buffer);
    if (c->fixed_file >= 0) aio_count(&w->fixed_file);
}

// Apply a pending change to this ring's registered tables (see register.c).
static void apply_update(worker *w, struct io_uring *ring) {
    pthread_mutex_lock(&w->lock);
    ring_update *u = &w->update;
    if (u->pending) {
        int ret = u->file ? io_uring_register_files_update(ring, u->index, &u->fd, 1)
                          : io_uring_register_buffers_update_tag(ring, u->index, &u->iov, NULL, 1);
        u->result = ret < 0 ? ret : 0;
        u->pending = false;
        pthread_cond_broadcast(&w->updated);
    }
    pthread_mutex_unlock(&w->lock);
}

void *aio_ring_worker(void *arg) {
    worker *w = arg;
    zinf_aio *aio = w->aio;
    struct io_uring ring;
    unsigned flags = 0;
    int err = -setup(&ring, &aio->cfg, &flags);
    // Empty tables now, filled entry by entry as buffers and files are registered
    // (Linux 5.19+; older kernels run every request unregistered).
    w->tables = !err && io_uring_register_buffers_sparse(&ring, AIO_MAX_BUFS) == 0 &&
                io_uring_register_files_sparse(&ring, AIO_MAX_FILES) == 0;
    pthread_mutex_lock(&aio->lock);
    w->init_err = err;
    aio->started++;
    pthread_cond_broadcast(&aio->cond);
    pthread_mutex_unlock(&aio->lock);
    if (err) return NULL;
    if (w->index == 0)
        ZINF_LOG_DEBUG("aio: io_uring rings with setup flags %#x, queue depth %u, %s", flags, aio->cfg.queue_depth,
                       w->tables ? "registered buffers and files" : "no registered tables");

    chunk *todo = NULL, *todo_last = NULL; // taken from the queue, not yet submitted
    chunk *finished = NULL;                // completed, their checks not yet run
    unsigned inflight = 0;
    for (;;) {
        bool idle = inflight == 0 && !todo && !finished;
        chunk *got = aio_worker_take(w, idle);
        apply_update(w, &ring);
        if (!got && idle) {
            bool stop;
            pthread_mutex_lock(&w->lock);
            stop = w->stop && !w->head;
            pthread_mutex_unlock(&w->lock);
            if (stop) break; // told to stop, nothing left
            continue;        // woken for a table update
        }
        if (got) {
            if (todo_last)
                todo_last->next = got;
            else
                todo = got;
            for (todo_last = got; todo_last->next;)
                todo_last = todo_last->next;
        }
        while (inflight < aio->cfg.queue_depth && todo) {
            struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
            if (!sqe) break;
            chunk *c = todo;
            todo = c->next;
            if (!todo) todo_last = NULL;
            c->next = NULL;
            prep(w, sqe, c);
            inflight++;
        }
        // The next requests go to the drive before the finished ones' checks run (a
        // checksum of a block_size request takes a good part of the time the drive
        // takes to move it), so the queue never drains while this thread computes.
        if (finished) {
            io_uring_submit(&ring); // a refusal is met again, and said, just below
            for (chunk *c = finished, *next; c; c = next) {
                next = c->next;
                c->next = NULL;
                aio_chunk_done(aio, c, aio_completion(c, c->res));
            }
            finished = NULL;
        }
        int ret = io_uring_submit_and_wait(&ring, inflight ? 1 : 0);
        if (ret < 0 && ret != -EINTR && ret != -EAGAIN && ret != -EBUSY) {
            // The kernel refused the submission itself (not one request): say so and
            // retry shortly rather than spin.
            ZINF_LOG_ERROR("aio: io_uring_submit: %s; retrying", strerror(-ret));
            nanosleep(&(struct timespec){0, 1000000}, NULL);
        }
        struct io_uring_cqe *cqe;
        unsigned head, seen = 0;
        io_uring_for_each_cqe(&ring, head, cqe) {
            seen++;
            inflight--;
            chunk *c = io_uring_cqe_get_data(cqe);
            int res = aio_fault_apply(c, cqe->res);
            bool again = res == -EINTR || res == -EAGAIN;
            if (!again && res > 0 && (uint32_t)res < c->len - c->done) {
                c->done += (uint32_t)res; // short transfer: resubmit the rest
                again = true;
            }
            if (again) {
                aio_count(&w->resubmitted);
                c->next = todo;
                todo = c;
                if (!todo_last) todo_last = c;
                continue;
            }
            c->res = res;
            c->next = finished;
            finished = c;
        }
        io_uring_cq_advance(&ring, seen);
    }
    io_uring_queue_exit(&ring);
    return NULL;
}
