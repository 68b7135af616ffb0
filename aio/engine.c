// The aio engine's front end: workers, tickets, and the split of a read or write into
// block_size chunks spread over the workers that serve each directory of a file.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

// ---- tickets ----

static zinf_aio_ticket ticket_of(const zinf_aio *aio, uint32_t slot) {
    return ((uint64_t)aio->slots[slot].gen << 32) | (slot + 1);
}

// The slot behind a ticket, or NULL for a ticket that is unknown or already released.
// Called with aio->lock held.
static ticket_slot *lookup(zinf_aio *aio, zinf_aio_ticket t) {
    uint64_t slot = (t & 0xffffffffu) - 1;
    if (t == 0 || slot >= aio->nslots) return NULL;
    ticket_slot *s = &aio->slots[slot];
    return s->used && s->gen == (uint32_t)(t >> 32) ? s : NULL;
}

// Called with aio->lock held; returns the slot index or -ENOMEM.
static int64_t take_slot(zinf_aio *aio) {
    for (uint32_t i = 0; i < aio->nslots; i++)
        if (!aio->slots[i].used) return i;
    uint32_t n = aio->nslots ? aio->nslots * 2 : 64;
    ticket_slot *grown = realloc(aio->slots, n * sizeof *grown);
    if (!grown) return -ENOMEM;
    memset(grown + aio->nslots, 0, (n - aio->nslots) * sizeof *grown);
    aio->slots = grown;
    int64_t slot = aio->nslots;
    aio->nslots = n;
    return slot;
}

// Free a completed ticket and turn its outcome into the return value (and this
// thread's error detail). Called with aio->lock held.
static int release(ticket_slot *s) {
    int err = s->err;
    if (err) zinf_fail(zinf_status_from_errno(err), "%s", s->detail);
    free(s->chunks);
    s->chunks = NULL;
    s->used = false;
    s->gen++;
    return -err;
}

// A ticket that fails names its first failing chunk in request order, whichever
// completes first: a file cut short fails every chunk past its end, and the error names
// where the bad part begins.
void aio_chunk_done(zinf_aio *aio, chunk *c, int err) {
    pthread_mutex_lock(&aio->lock);
    ticket_slot *s = &aio->slots[c->slot];
    size_t place = (size_t)(c - s->chunks);
    bool first = err && (!s->err || place < s->err_chunk);
    if (first) s->err = err, s->err_chunk = place;
    if (first && err == EBADMSG) {
        snprintf(s->detail, sizeof s->detail,
                 "%s %s at offset %llu (%u bytes): the bytes fail their checksum: the drive returned other data "
                 "than it was given, without an error",
                 c->write ? "write" : "read", c->path, (unsigned long long)c->offset, c->len);
    } else if (first) {
        snprintf(s->detail, sizeof s->detail, "%s %s at offset %llu (%u bytes): %s", c->write ? "write" : "read",
                 c->path, (unsigned long long)(c->offset + c->done), c->len - c->done, strerror(err));
    }
    if (--s->pending == 0) {
        pthread_cond_broadcast(&aio->cond);
        if (--aio->inflight[c->write] == 0) aio->busy_ns[c->write] += zinf_clock_ns() - aio->busy_since[c->write];
    }
    pthread_mutex_unlock(&aio->lock);
}

static int check(const chunk *c) {
    const zinf_aio_file *f = c->file;
    return f->check ? -f->check(f->check_arg, c->write, c->logical, c->buf, c->len) : 0;
}

int aio_completion(const chunk *c, int res) {
    // res == 0 with bytes left: a read past the end of the file (or a write that made no
    // progress); never report it as success.
    return res <= 0 ? (res < 0 ? -res : EIO) : check(c);
}

int aio_fault_apply(chunk *c, int res) {
    int f = c->fault;
    c->fault = 0;
    if (!f || res < 0) return res;
    if (f == ZINF_FAULT_CORRUPT) {
        if (res > 0) c->buf[c->done] ^= 0x10; // the drive's data, one bit wrong
        return res;
    }
    if (f == ZINF_FAULT_SHORT) {
        // Half of it, in whole 4 KiB blocks as O_DIRECT transfers stop: the rest follows.
        int half = res / 2 / 4096 * 4096;
        return half > 0 ? half : res;
    }
    return -f;
}

// lookup() for the public calls: an unknown ticket is a caller error with a message.
static ticket_slot *find(zinf_aio *aio, zinf_aio_ticket t) {
    ticket_slot *s = lookup(aio, t);
    if (!s) zinf_fail(ZINF_ERR_INVAL, "aio: ticket %#llx is unknown or already waited for", (unsigned long long)t);
    return s;
}

int zinf_aio_wait(zinf_aio *aio, zinf_aio_ticket t) {
    pthread_mutex_lock(&aio->lock);
    ticket_slot *s = find(aio, t);
    while (s && s->pending)
        pthread_cond_wait(&aio->cond, &aio->lock);
    int ret = s ? release(s) : -EINVAL;
    pthread_mutex_unlock(&aio->lock);
    return ret;
}

int zinf_aio_poll(zinf_aio *aio, zinf_aio_ticket t) {
    pthread_mutex_lock(&aio->lock);
    ticket_slot *s = find(aio, t);
    int ret = !s ? -EINVAL : s->pending ? 0 : release(s);
    if (s && !s->used && ret == 0) ret = 1; // released without error
    pthread_mutex_unlock(&aio->lock);
    return ret;
}

int zinf_aio_wait_all(zinf_aio *aio) {
    int first = 0;
    char detail[sizeof aio->slots[0].detail] = "";
    pthread_mutex_lock(&aio->lock);
    for (uint32_t i = 0; i < aio->nslots; i++) {
        ticket_slot *s = &aio->slots[i];
        if (!s->used) continue;
        while (s->pending)
            pthread_cond_wait(&aio->cond, &aio->lock);
        if (s->err && !first) {
            first = -s->err;
            snprintf(detail, sizeof detail, "%s", s->detail);
        }
        release(s);
    }
    pthread_mutex_unlock(&aio->lock);
    if (first) zinf_fail(zinf_status_from_errno(-first), "%s", detail);
    return first;
}

// ---- submission ----

// The workers that serve directory d: those with index = d (mod ndirs), so each
// directory (drive) has its own ring(s) when there are at least as many workers.
static worker *pick(zinf_aio *aio, int d, int ndirs, uint64_t k) {
    int nw = (int)aio->cfg.threads;
    if (nw <= ndirs) return &aio->workers[d % nw];
    int serving = (nw - d + ndirs - 1) / ndirs;
    return &aio->workers[d + ndirs * (int)(k % (uint64_t)serving)];
}

static int check_request(const zinf_aio_file *f, uint64_t off, const void *buf, size_t len, const char *op) {
    const char *what = off % f->align              ? "offset"
                       : len % f->align            ? "length"
                       : (uintptr_t)buf % f->align ? "buffer"
                                                   : NULL;
    if (what) {
        unsigned long long v = off % f->align ? off : len % f->align ? len : (unsigned long long)(uintptr_t)buf;
        zinf_fail(ZINF_ERR_INVAL, "aio %s %s: %s %#llx is not a multiple of the alignment %u", op, f->paths[0], what, v,
                  f->align);
        return -EINVAL;
    }
    if (off > f->size || len > f->size - off) {
        zinf_fail(ZINF_ERR_INVAL, "aio %s %s: bytes %llu..%llu are beyond the end (%llu bytes)", op, f->paths[0],
                  (unsigned long long)off, (unsigned long long)(off + len), (unsigned long long)f->size);
        return -EINVAL;
    }
    return 0;
}

// Cut [off, off+len) at stripe-unit and block boundaries (one directory has no stripes
// to cut at); fill chunks when non-NULL.
static size_t split(const zinf_aio_file *f, uint32_t block, uint64_t off, char *buf, size_t len, chunk *chunks) {
    size_t n = 0;
    for (uint64_t pos = 0; pos < len;) {
        uint64_t at = off + pos, unit = at / f->stripe, in_unit = at % f->stripe;
        uint64_t take = f->n > 1 ? f->stripe - in_unit : block;
        if (take > block) take = block;
        if (take > len - pos) take = len - pos;
        if (chunks) {
            int d = (int)(unit % (uint64_t)f->n);
            chunks[n] = (chunk){.fd = f->fds[d],
                                .file = f,
                                .logical = at,
                                .fixed_file = f->fixed[d],
                                .buf_index = -1,
                                .dir = d,
                                .path = f->paths[d],
                                .offset = unit / (uint64_t)f->n * f->stripe + in_unit,
                                .buf = buf + pos,
                                .len = (uint32_t)take};
        }
        n++;
        pos += take;
    }
    return n;
}

static int submit(zinf_aio *aio, zinf_aio_file *f, uint64_t off, char *buf, size_t len, bool write,
                  zinf_aio_ticket *ticket) {
    const char *op = write ? "write" : "read";
    int ret = check_request(f, off, buf, len, op);
    if (ret) return ret;
    size_t n = split(f, aio->cfg.block_size, off, buf, len, NULL);
    chunk *chunks = calloc(n ? n : 1, sizeof *chunks);
    if (!chunks) {
        zinf_fail(ZINF_ERR_NOMEM, "aio %s %s: out of memory for %zu requests", op, f->paths[0], n);
        return -ENOMEM;
    }
    split(f, aio->cfg.block_size, off, buf, len, chunks);
    // A test's faults, asked for here in the order of submission, whichever worker runs
    // the request.
    for (size_t i = 0; i < n; i++)
        chunks[i].fault = zinf_fault_next(write ? ZINF_FAULT_WRITE : ZINF_FAULT_READ);

    pthread_mutex_lock(&aio->lock);
    int64_t slot = take_slot(aio);
    if (slot >= 0) {
        aio->slots[slot] =
            (ticket_slot){.gen = aio->slots[slot].gen, .used = true, .pending = (uint32_t)n, .chunks = chunks};
        *ticket = ticket_of(aio, (uint32_t)slot);
        aio->bytes[write] += len;
        if (n && aio->inflight[write]++ == 0) aio->busy_since[write] = zinf_clock_ns();
        for (size_t i = 0, last = 0; i < n; i++) {
            chunk *c = &chunks[i];
            const buf_entry *e = &aio->bufs[last]; // most chunks sit in the previous one's entry
            bool in_last = e->live && c->buf >= e->base && (size_t)(c->buf - e->base) + c->len <= e->len;
            c->buf_index = in_last ? (int)last : aio_buf_index(aio, c->buf, c->len);
            if (c->buf_index >= 0) last = (size_t)c->buf_index;
        }
    }
    uint64_t spread = aio->spread;
    aio->spread += n;
    pthread_mutex_unlock(&aio->lock);
    if (slot < 0) {
        free(chunks);
        zinf_fail(ZINF_ERR_NOMEM, "aio %s %s: out of memory for tickets", op, f->paths[0]);
        return -ENOMEM;
    }

    // Hand each worker its chunks in one go, in file order.
    for (uint32_t w = 0; w < aio->cfg.threads; w++) {
        chunk *head = NULL, *last = NULL;
        for (size_t i = 0; i < n; i++) {
            chunk *c = &chunks[i];
            if (pick(aio, c->dir, f->n, spread + i) != &aio->workers[w]) continue;
            c->write = write;
            c->slot = (uint32_t)slot;
            if (last)
                last->next = c;
            else
                head = c;
            last = c;
        }
        if (!head) continue;
        worker *wk = &aio->workers[w];
        pthread_mutex_lock(&wk->lock);
        if (wk->tail)
            wk->tail->next = head;
        else
            wk->head = head;
        wk->tail = last;
        pthread_cond_signal(&wk->cond);
        pthread_mutex_unlock(&wk->lock);
    }
    return 0;
}

int zinf_aio_read(zinf_aio *aio, zinf_aio_file *f, uint64_t offset, void *buf, size_t len, zinf_aio_ticket *ticket) {
    return submit(aio, f, offset, buf, len, false, ticket);
}

int zinf_aio_write(zinf_aio *aio, zinf_aio_file *f, uint64_t offset, const void *buf, size_t len,
                   zinf_aio_ticket *ticket) {
    // The buffer is only read; the chunk type is shared with reads.
    return submit(aio, f, offset, (char *)(uintptr_t)buf, len, true, ticket);
}

chunk *aio_worker_take(worker *w, bool block) {
    pthread_mutex_lock(&w->lock);
    while (block && !w->head && !w->stop && !w->update.pending)
        pthread_cond_wait(&w->cond, &w->lock);
    chunk *got = w->head;
    w->head = w->tail = NULL;
    pthread_mutex_unlock(&w->lock);
    return got;
}

// ---- engine ----

bool zinf_aio_uses_io_uring(const zinf_aio *aio) { return aio->uring; }

int zinf_aio_bind(zinf_aio *aio, const int *cpus, int n) {
    if (!aio || !cpus || n <= 0) {
        zinf_fail(ZINF_ERR_INVAL, "aio bind: no CPUs to bind the workers to");
        return -EINVAL;
    }
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int i = 0; i < n; i++)
        if (cpus[i] >= 0 && cpus[i] < CPU_SETSIZE) CPU_SET(cpus[i], &set);
    for (uint32_t i = 0; i < aio->cfg.threads; i++) {
        int err = pthread_setaffinity_np(aio->workers[i].thread, sizeof set, &set);
        if (err) {
            zinf_fail(zinf_status_from_errno(err), "aio bind: worker %u: %s", i, strerror(err));
            return -err;
        }
    }
    return 0;
}

void zinf_aio_get_stats(zinf_aio *aio, zinf_aio_stats *out) {
    *out = (zinf_aio_stats){0};
    pthread_mutex_lock(&aio->lock);
    int64_t now = zinf_clock_ns(), busy[2];
    for (int d = 0; d < 2; d++)
        busy[d] = aio->busy_ns[d] + (aio->inflight[d] ? now - aio->busy_since[d] : 0);
    *out = (zinf_aio_stats){
        .read_bytes = aio->bytes[0], .write_bytes = aio->bytes[1], .read_busy_ns = busy[0], .write_busy_ns = busy[1]};
    pthread_mutex_unlock(&aio->lock);
    for (uint32_t i = 0; i < aio->cfg.threads; i++) {
        const worker *w = &aio->workers[i];
        out->requests += __atomic_load_n(&w->requests, __ATOMIC_RELAXED);
        out->fixed_buffer += __atomic_load_n(&w->fixed_buffer, __ATOMIC_RELAXED);
        out->fixed_file += __atomic_load_n(&w->fixed_file, __ATOMIC_RELAXED);
        out->resubmitted += __atomic_load_n(&w->resubmitted, __ATOMIC_RELAXED);
    }
}

static void destroy_workers(zinf_aio *aio, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) {
        pthread_mutex_destroy(&aio->workers[i].lock);
        pthread_cond_destroy(&aio->workers[i].cond);
        pthread_cond_destroy(&aio->workers[i].updated);
    }
    free(aio->workers);
    pthread_mutex_destroy(&aio->lock);
    pthread_mutex_destroy(&aio->reg_lock);
    pthread_cond_destroy(&aio->cond);
}

static void stop_workers(zinf_aio *aio, uint32_t n) {
    for (uint32_t i = 0; i < n; i++) {
        worker *w = &aio->workers[i];
        pthread_mutex_lock(&w->lock);
        w->stop = true;
        pthread_cond_signal(&w->cond);
        pthread_mutex_unlock(&w->lock);
    }
    for (uint32_t i = 0; i < n; i++)
        pthread_join(aio->workers[i].thread, NULL);
}

void zinf_aio_destroy(zinf_aio *aio) {
    if (!aio) return;
    zinf_aio_wait_all(aio);
    stop_workers(aio, aio->cfg.threads);
    destroy_workers(aio, aio->cfg.threads);
    free(aio->slots);
    free(aio);
}

int zinf_aio_create(zinf_aio **out, const zinf_aio_params *cfg) {
    zinf_aio_params c = cfg ? *cfg : (zinf_aio_params){0};
    if (!c.block_size) c.block_size = 1u << 20;
    if (!c.queue_depth) c.queue_depth = 8;
    if (!c.threads) c.threads = 1;
    *out = NULL;
    if (c.block_size % 4096 || c.block_size > (1u << 30)) {
        zinf_fail(ZINF_ERR_INVAL, "aio: block_size %u is not a multiple of 4096 up to 1 GiB", c.block_size);
        return -EINVAL;
    }
    if (c.queue_depth > 4096 || c.threads > 256) {
        zinf_fail(ZINF_ERR_INVAL, "aio: queue_depth %u (at most 4096) or threads %u (at most 256) too large",
                  c.queue_depth, c.threads);
        return -EINVAL;
    }
    zinf_aio *aio = calloc(1, sizeof *aio);
    worker *workers = calloc(c.threads, sizeof *workers);
    if (!aio || !workers) {
        free(aio);
        free(workers);
        zinf_fail(ZINF_ERR_NOMEM, "aio: out of memory");
        return -ENOMEM;
    }
    aio->cfg = c;
    aio->workers = workers;
    pthread_mutex_init(&aio->lock, NULL);
    pthread_mutex_init(&aio->reg_lock, NULL);
    pthread_cond_init(&aio->cond, NULL);
    aio->uring = !c.use_threads;
    if (aio->uring) {
        int refused = zinf_aio_uring_errno();
        if (refused) {
            // Kernels without io_uring, or containers whose seccomp filter refuses it.
            ZINF_LOG_WARN("io_uring is not available (%s): aio runs on %u pread/pwrite thread(s)", strerror(refused),
                          c.threads);
            aio->uring = false;
        }
    }
    uint32_t started = 0;
    int err = 0;
    for (; started < c.threads; started++) {
        worker *w = &workers[started];
        *w = (worker){.aio = aio, .index = (int)started};
        pthread_mutex_init(&w->lock, NULL);
        pthread_cond_init(&w->cond, NULL);
        pthread_cond_init(&w->updated, NULL);
        err = pthread_create(&w->thread, NULL, aio->uring ? aio_ring_worker : aio_thread_worker, w);
        if (err) break;
    }
    // Rings are set up inside their worker (a SINGLE_ISSUER ring belongs to the thread
    // that creates it); wait until each has reported.
    pthread_mutex_lock(&aio->lock);
    while (aio->started < started)
        pthread_cond_wait(&aio->cond, &aio->lock);
    pthread_mutex_unlock(&aio->lock);
    aio->tables = aio->uring;
    for (uint32_t i = 0; !err && i < started; i++) {
        err = workers[i].init_err;
        aio->tables &= workers[i].tables;
    }
    if (err) {
        stop_workers(aio, started);
        aio->cfg.threads = started;
        zinf_fail(zinf_status_from_errno(err), "aio: cannot start %u worker(s): %s", cfg ? cfg->threads : 1,
                  strerror(err));
        destroy_workers(aio, started);
        free(aio);
        return -err;
    }
    *out = aio;
    return 0;
}
