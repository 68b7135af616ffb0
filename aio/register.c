// Registered buffers and fixed files. Every ring takes sparse tables at setup; an
// entry is filled or cleared by the ring's own worker thread (SINGLE_ISSUER rings
// refuse registration from any other), one worker after the other, and becomes
// visible to submissions only once every ring holds it.
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

// Hand u to worker w and wait until its thread applied it.
static int update_one(worker *w, ring_update u) {
    pthread_mutex_lock(&w->lock);
    w->update = u;
    w->update.pending = true;
    pthread_cond_signal(&w->cond);
    while (w->update.pending)
        pthread_cond_wait(&w->updated, &w->lock);
    int ret = w->update.result;
    pthread_mutex_unlock(&w->lock);
    return ret;
}

int aio_update_rings(zinf_aio *aio, ring_update u) {
    for (uint32_t i = 0; i < aio->cfg.threads; i++) {
        int ret = update_one(&aio->workers[i], u);
        if (ret == 0) continue;
        ring_update clear = {.file = u.file, .index = u.index, .fd = -1};
        for (uint32_t j = 0; j < i; j++)
            update_one(&aio->workers[j], clear);
        return ret;
    }
    return 0;
}

static int refuse(zinf_aio *aio, const char *what) {
    return zinf_fail(ZINF_ERR_UNSUPPORTED, "aio: cannot register %s: %s", what,
                     aio->uring ? "the kernel refused the rings' sparse tables" : "aio runs on pread/pwrite threads"),
           -EOPNOTSUPP;
}

// ---- buffers ----

int aio_buf_index(const zinf_aio *aio, const char *buf, size_t len) {
    for (int i = 0; i < AIO_MAX_BUFS; i++) {
        const buf_entry *e = &aio->bufs[i];
        if (e->live && buf >= e->base && len <= e->len && (size_t)(buf - e->base) <= e->len - len) return i;
    }
    return -1;
}

static void clear_rings(zinf_aio *aio, const int *idx, int n) {
    for (int k = 0; k < n; k++)
        aio_update_rings(aio, (ring_update){.index = (unsigned)idx[k], .fd = -1});
}

// Reserve n free entries for [base, base+len) in idx; -EINVAL for an overlap, -ENOSPC
// when the table is full. Called with aio->lock held.
static int reserve(zinf_aio *aio, char *base, size_t len, int n, int *idx) {
    int got = 0;
    for (int i = 0; i < AIO_MAX_BUFS; i++) {
        const buf_entry *e = &aio->bufs[i];
        if (e->taken && base < e->base + e->len && e->base < base + len) return -EINVAL;
        if (!e->taken && got < n) idx[got++] = i;
    }
    if (got < n) return -ENOSPC;
    for (int k = 0; k < n; k++) {
        size_t off = (size_t)k * AIO_MAX_BUF_ENTRY;
        aio->bufs[idx[k]] = (buf_entry){.base = base + off,
                                        .len = len - off < AIO_MAX_BUF_ENTRY ? len - off : AIO_MAX_BUF_ENTRY,
                                        .region = idx[0],
                                        .taken = true};
    }
    return 0;
}

int zinf_aio_register_buffer(zinf_aio *aio, void *buf, size_t len) {
    if (!aio->uring || !aio->tables) return refuse(aio, "buffers");
    if (!buf || !len) return zinf_fail(ZINF_ERR_INVAL, "aio: register_buffer needs a buffer and a length"), -EINVAL;
    char size[32];
    zinf_size_format(len, size, sizeof size);
    size_t n = (len + AIO_MAX_BUF_ENTRY - 1) / AIO_MAX_BUF_ENTRY;
    int idx[AIO_MAX_BUFS];
    pthread_mutex_lock(&aio->reg_lock);
    pthread_mutex_lock(&aio->lock);
    int ret = n > AIO_MAX_BUFS ? -ENOSPC : reserve(aio, buf, len, (int)n, idx);
    pthread_mutex_unlock(&aio->lock);
    if (ret) {
        pthread_mutex_unlock(&aio->reg_lock);
        if (ret == -EINVAL)
            return zinf_fail(ZINF_ERR_INVAL, "aio: buffer %p (%s) overlaps a registered one", buf, size), ret;
        return zinf_fail(ZINF_ERR_NOSPC, "aio: buffer %p (%s) needs %zu table entries; the %d-entry table is too full",
                         buf, size, n, AIO_MAX_BUFS),
               ret;
    }
    int k = 0;
    for (; k < (int)n && !ret; k++) {
        const buf_entry *e = &aio->bufs[idx[k]]; // reserved: only this call writes it
        ret = aio_update_rings(aio, (ring_update){.index = (unsigned)idx[k], .fd = -1, .iov = {e->base, e->len}});
    }
    if (ret) clear_rings(aio, idx, k - 1); // the failed entry was undone by aio_update_rings
    pthread_mutex_lock(&aio->lock);
    for (k = 0; k < (int)n; k++) {
        if (ret)
            aio->bufs[idx[k]] = (buf_entry){0};
        else
            aio->bufs[idx[k]].live = true;
    }
    pthread_mutex_unlock(&aio->lock);
    pthread_mutex_unlock(&aio->reg_lock);
    if (ret == -ENOMEM)
        zinf_fail(ZINF_ERR_NOMEM,
                  "aio: cannot register %s at %p: pinned memory would pass RLIMIT_MEMLOCK (raise ulimit -l)", size,
                  buf);
    else if (ret)
        zinf_fail(zinf_status_from_errno(-ret), "aio: cannot register %s at %p: %s", size, buf, strerror(-ret));
    return ret;
}

int zinf_aio_unregister_buffer(zinf_aio *aio, void *buf) {
    int idx[AIO_MAX_BUFS], n = 0, head = -1;
    pthread_mutex_lock(&aio->reg_lock);
    pthread_mutex_lock(&aio->lock);
    for (int i = 0; i < AIO_MAX_BUFS && head < 0; i++)
        if (aio->bufs[i].live && aio->bufs[i].region == i && aio->bufs[i].base == (char *)buf) head = i;
    for (int i = 0; i < AIO_MAX_BUFS && head >= 0; i++)
        if (aio->bufs[i].live && aio->bufs[i].region == head) {
            aio->bufs[i].live = false; // new submissions stop using it
            idx[n++] = i;
        }
    pthread_mutex_unlock(&aio->lock);
    clear_rings(aio, idx, n);
    pthread_mutex_lock(&aio->lock);
    for (int k = 0; k < n; k++)
        aio->bufs[idx[k]] = (buf_entry){0};
    pthread_mutex_unlock(&aio->lock);
    pthread_mutex_unlock(&aio->reg_lock);
    if (!n) return zinf_fail(ZINF_ERR_INVAL, "aio: buffer %p is not registered", buf), -EINVAL;
    return 0;
}

// ---- files ----

void aio_file_register(zinf_aio *aio, zinf_aio_file *f) {
    if (!aio->uring || !aio->tables) return;
    pthread_mutex_lock(&aio->reg_lock);
    for (int i = 0; i < f->n; i++) {
        int slot = -1;
        pthread_mutex_lock(&aio->lock);
        for (int s = 0; s < AIO_MAX_FILES && slot < 0; s++)
            if (!aio->file_taken[s]) slot = s;
        if (slot >= 0) aio->file_taken[slot] = true;
        pthread_mutex_unlock(&aio->lock);
        if (slot < 0) break; // the rest stay plain descriptors
        int ret = aio_update_rings(aio, (ring_update){.file = true, .index = (unsigned)slot, .fd = f->fds[i]});
        if (ret) {
            ZINF_LOG_DEBUG("aio: %s stays a plain descriptor: %s", f->paths[i], strerror(-ret));
            pthread_mutex_lock(&aio->lock);
            aio->file_taken[slot] = false;
            pthread_mutex_unlock(&aio->lock);
            break;
        }
        f->fixed[i] = slot;
    }
    pthread_mutex_unlock(&aio->reg_lock);
}

void aio_file_unregister(zinf_aio_file *f) {
    zinf_aio *aio = f->aio;
    pthread_mutex_lock(&aio->reg_lock);
    for (int i = 0; i < f->n; i++) {
        if (f->fixed[i] < 0) continue;
        aio_update_rings(aio, (ring_update){.file = true, .index = (unsigned)f->fixed[i], .fd = -1});
        pthread_mutex_lock(&aio->lock);
        aio->file_taken[f->fixed[i]] = false;
        pthread_mutex_unlock(&aio->lock);
        f->fixed[i] = -1;
    }
    pthread_mutex_unlock(&aio->reg_lock);
}
