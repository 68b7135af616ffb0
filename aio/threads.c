// The fallback worker where io_uring is refused: blocking pread/pwrite on a thread
// per worker, with the same completion rules (short transfers continue, 0 is EIO).
#include <errno.h>
#include <unistd.h>

#include "internal.h"

static int transfer(chunk *c) {
    while (c->done < c->len) {
        ssize_t r = c->write ? pwrite(c->fd, c->buf + c->done, c->len - c->done, (off_t)(c->offset + c->done))
                             : pread(c->fd, c->buf + c->done, c->len - c->done, (off_t)(c->offset + c->done));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return errno;
        if (r == 0) return EIO;
        c->done += (uint32_t)r;
    }
    return 0;
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
            aio_chunk_done(w->aio, c, transfer(c));
            c = next;
        }
    }
    return NULL;
}
