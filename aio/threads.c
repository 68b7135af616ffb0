// The fallback worker where io_uring is refused: blocking pread/pwrite on a thread
// per worker, with the same completion rules (short transfers continue, EINTR and EAGAIN
// are tried again, 0 is EIO).
#include <errno.h>
#include <unistd.h>

#include "internal.h"

static int transfer(worker *w, chunk *c) {
    for (;;) {
        ssize_t r = c->write ? pwrite(c->fd, c->buf + c->done, c->len - c->done, (off_t)(c->offset + c->done))
                             : pread(c->fd, c->buf + c->done, c->len - c->done, (off_t)(c->offset + c->done));
        int res = aio_fault_apply(c, r < 0 ? -errno : (int)r);
        bool again = res == -EINTR || res == -EAGAIN;
        if (!again && res > 0 && (uint32_t)res < c->len - c->done) {
            c->done += (uint32_t)res;
            again = true;
        }
        if (again) {
            aio_count(&w->resubmitted);
            continue;
        }
        return aio_completion(c, res);
    }
}

void *aio_thread_worker(void *arg) {
    worker *w = arg;
    pthread_mutex_lock(&w->aio->lock);
    w->aio->started++;
    pthread_cond_broadcast(&w->aio->cond);
    pthread_mutex_unlock(&w->aio->lock);
    for (chunk *c; (c = aio_worker_take(w, true));) {
        while (c) {
            chunk *next = c->next;
            aio_chunk_done(w->aio, c, transfer(w, c));
            c = next;
        }
    }
    return NULL;
}
