// The parameter tier: where a rank's 16-bit parameters live between uses. Stages 0-2
// keep every module's full buffer on the device (params16). Stage 3 keeps only this
// rank's slices (part16): on the device, in (pinned) host memory (offload_param cpu),
// or with nvme the modules that fit in max_in_cpu elements (in forward order) in host
// memory and the rest in the swap store. Slices on disk come up through a pool of
// buffer_count pinned buffers: the coordinator reads ahead along the trace as far as
// the pool allows, and each gather waits only for its own read. Reads and the
// optimizer's write-backs run in order on the parameter stream, so a write-back always
// lands before the next step reads the slice.
#include <stdio.h>
#include <string.h>

#include "internal.h"
#include "zinf_swap.h"

static bool host_slices(const zinf_engine *e) { return e->stage == 3 && e->ptier != ZINF_OFFLOAD_NONE; }

bool ptier_on_disk(const zinf_engine *e, int mod) {
    return e->stage == 3 && e->ptier == ZINF_OFFLOAD_NVME && mod >= e->nresident && e->lay[mod].slice;
}

static uint64_t disk_off(const zinf_engine *e, int mod) { return (e->lay[mod].part_off - e->resident_n) * e->es; }

zinf_stream *ptier_stream(zinf_engine *e) { return e->ps ? e->ps : e->cs; }

static zinf_status open_pool(zinf_engine *e, size_t most, const char *biggest) {
    const zinf_offload_param_config *pc = &e->cfg.zero.offload_param;
    // A slice goes whole into one buffer: the pool's buffers are as big as the largest
    // slice on disk, whatever buffer_size says, and the plan shows it.
    if ((int64_t)most > pc->buffer_size)
        ZINF_LOG_INFO("zero_optimization.offload_param.buffer_size: raised from %lld to %zu elements, this rank's "
                      "slice of %s",
                      (long long)pc->buffer_size, most, biggest);
    e->pbuf_elems = most;
    e->npbuf = (int)pc->buffer_count;
    size_t n = (size_t)e->npbuf;
    e->pbuf = calloc(n, sizeof *e->pbuf);
    e->pread_done = calloc(n, sizeof *e->pread_done);
    e->pbuf_free = calloc(n, sizeof *e->pbuf_free);
    e->pfree = malloc(n * sizeof *e->pfree);
    e->pread_buf = malloc((size_t)e->nmod * sizeof *e->pread_buf);
    if (!e->pbuf || !e->pread_done || !e->pbuf_free || !e->pfree || !e->pread_buf)
        return zinf_fail(ZINF_ERR_NOMEM, "engine: out of memory");
    for (int i = 0; i < e->nmod; i++)
        e->pread_buf[i] = -1;
    for (int b = 0; b < e->npbuf; b++) {
        ZINF_CHECK(engine_host_alloc(e, most * e->es, pc->pin_memory, "parameter swap buffers", &e->pbuf[b]));
        ZINF_CHECK(zinf_event_create(e->dev, &e->pread_done[b]));
        ZINF_CHECK(zinf_event_create(e->dev, &e->pbuf_free[b]));
        e->pfree[e->nfree++] = b;
    }
    return ZINF_OK;
}

static zinf_status open_nvme(zinf_engine *e) {
    const zinf_offload_param_config *pc = &e->cfg.zero.offload_param;
    // The resident modules: a prefix in forward order, so they are one block of part16.
    while (e->nresident < e->nmod && (int64_t)(e->lay[e->nresident].part_off + e->lay[e->nresident].part_n) <= pc->max_in_cpu)
        e->nresident++;
    e->resident_n = e->nresident < e->nmod ? e->lay[e->nresident].part_off : e->npart;
    ZINF_CHECK(engine_host_alloc(e, e->resident_n * e->es, pc->pin_memory, "resident parameters", &e->part16));
    size_t most = 0;
    const char *biggest = NULL;
    for (int i = e->nresident; i < e->nmod; i++)
        if (e->lay[i].slice > most) most = e->lay[i].slice, biggest = zinf_model_module(e->m, i)->name;
    if (!most) return ZINF_OK; // everything fits in max_in_cpu
    ZINF_CHECK(engine_swap_open(e, &pc->nvme_path, &e->pswap));
    ZINF_CHECK(zinf_swap_add(e->pswap, "params", (e->npart - e->resident_n) * e->es, &e->pswap_id));
    if (SLICE_ALIGN * e->es % zinf_swap_alignment(e->pswap))
        return zinf_fail(ZINF_ERR_UNSUPPORTED, "%s: its block size %u does not divide zinf's %zu-byte slices",
                         pc->nvme_path.paths[0], zinf_swap_alignment(e->pswap), SLICE_ALIGN * e->es);
    return open_pool(e, most, biggest);
}

zinf_status ptier_create(zinf_engine *e) {
    if (e->stage < 3) {
        for (int i = 0; i < e->nmod; i++)
            if (e->lay[i].padded)
                ZINF_CHECK(zinf_device_alloc(e->dev, e->lay[i].padded * e->es, "parameters", &e->params16[i]));
        return ZINF_OK;
    }
    // Reads and write-backs of slices on disk, and the write-backs of a background
    // update, run on a stream of their own.
    if (e->ptier == ZINF_OFFLOAD_NVME || e->cfg.zero.offload_optimizer.device != ZINF_OFFLOAD_NONE)
        ZINF_CHECK(zinf_stream_create(e->dev, &e->ps));
    size_t bytes = e->npart * e->es;
    switch (e->ptier) {
    case ZINF_OFFLOAD_NONE: return zinf_device_alloc(e->dev, bytes, "parameter slices", &e->part16);
    case ZINF_OFFLOAD_CPU:
        return engine_host_alloc(e, bytes, e->cfg.zero.offload_param.pin_memory, "parameter slices", &e->part16);
    case ZINF_OFFLOAD_NVME: return open_nvme(e);
    }
    return ZINF_OK;
}

void ptier_destroy(zinf_engine *e) {
    if (e->ps) zinf_stream_sync(e->ps);
    for (int i = 0; e->params16 && i < e->nmod; i++)
        if (e->dev) zinf_device_free(e->dev, e->params16[i]);
    bool pin = e->cfg.zero.offload_param.pin_memory;
    if (host_slices(e)) engine_host_free(e, e->part16, pin);
    else if (e->dev) zinf_device_free(e->dev, e->part16);
    for (int b = 0; e->pbuf && b < e->npbuf; b++) {
        engine_host_free(e, e->pbuf[b], pin);
        zinf_event_destroy(e->pread_done[b]);
        zinf_event_destroy(e->pbuf_free[b]);
    }
    free(e->pbuf), free(e->pread_done), free(e->pbuf_free), free(e->pfree), free(e->pread_buf);
    zinf_stream_destroy(e->ps);
    zinf_swap_close(e->pswap);
}

// ---- reads and writes on the parameter stream ----

typedef struct swap_job {
    zinf_engine *e;
    bool write;
    uint64_t off;
    void *buf;
    size_t len;
} swap_job;

static void swap_job_run(void *arg) {
    swap_job *j = arg;
    zinf_engine *e = j->e;
    if (!engine_failed(e)) {
        zinf_aio_ticket t = 0;
        zinf_status st = j->write ? zinf_swap_write(e->pswap, e->pswap_id, j->off, j->buf, j->len, &t)
                                  : zinf_swap_read(e->pswap, e->pswap_id, j->off, j->buf, j->len, &t);
        if (st == ZINF_OK) st = zinf_swap_wait(e->pswap, t);
        if (st != ZINF_OK) engine_fail_async(e, st);
    }
    free(j);
}

static zinf_status queue_job(zinf_engine *e, bool write, int mod, void *buf) {
    swap_job *j = malloc(sizeof *j);
    if (!j) return zinf_fail(ZINF_ERR_NOMEM, "engine: out of memory");
    *j = (swap_job){e, write, disk_off(e, mod), buf, e->lay[mod].slice * e->es};
    zinf_status st = zinf_stream_host_fn(e->ps, swap_job_run, j);
    if (st != ZINF_OK) free(j);
    return st;
}

int ptier_free_buffers(const zinf_engine *e) { return e->nfree; }

zinf_status ptier_read(zinf_engine *e, int mod) {
    ZINF_CHECK(tier_wait_updated(e, mod, NULL)); // its write-back is queued before it on ps
    if (!e->nfree) return zinf_fail(ZINF_ERR_INTERNAL, "engine: no parameter swap buffer left for %s",
                                    zinf_model_module(e->m, mod)->name);
    int b = e->pfree[--e->nfree];
    ZINF_CHECK(zinf_stream_wait_event(e->ps, e->pbuf_free[b])); // its last gather has passed
    ZINF_CHECK(queue_job(e, false, mod, e->pbuf[b]));
    ZINF_CHECK(zinf_event_record(e->pread_done[b], e->ps));
    e->pread_buf[mod] = b;
    return ZINF_OK;
}

void ptier_forget_reads(zinf_engine *e) {
    for (int i = 0; e->pread_buf && i < e->nmod; i++)
        if (e->pread_buf[i] >= 0) {
            e->pfree[e->nfree++] = e->pread_buf[i];
            e->pread_buf[i] = -1;
        }
}

zinf_status ptier_gather(zinf_engine *e, int mod, void *full) {
    const mod_layout *l = &e->lay[mod];
    size_t sb = l->slice * e->es;
    if (!ptier_on_disk(e, mod)) {
        ZINF_CHECK(tier_wait_updated(e, mod, e->xs));
        return engine_allgather(e, (const char *)e->part16 + l->part_off * e->es, host_slices(e), full, sb);
    }
    if (e->pread_buf[mod] < 0) ZINF_CHECK(ptier_read(e, mod));
    int b = e->pread_buf[mod];
    ZINF_CHECK(zinf_stream_wait_event(e->xs, e->pread_done[b]));
    ZINF_CHECK(engine_allgather(e, e->pbuf[b], true, full, sb));
    ZINF_CHECK(zinf_event_record(e->pbuf_free[b], e->xs));
    e->pread_buf[mod] = -1;
    e->pfree[e->nfree++] = b;
    return ZINF_OK;
}

void *ptier_device_part(zinf_engine *e, int mod) {
    const mod_layout *l = &e->lay[mod];
    if (e->stage < 3) return (char *)e->params16[mod] + l->part_lo * e->es;
    return host_slices(e) ? NULL : (char *)e->part16 + l->part_off * e->es;
}

zinf_status ptier_store(zinf_engine *e, int mod, void *src, bool src_host) {
    const mod_layout *l = &e->lay[mod];
    size_t bytes = l->part_n * e->es;
    if (e->stage < 3)
        return zinf_copy_async(e->cs, (char *)e->params16[mod] + l->part_lo * e->es, src, bytes,
                               src_host ? ZINF_COPY_H2D : ZINF_COPY_D2D);
    if (ptier_on_disk(e, mod) && src_host) return queue_job(e, true, mod, src);
    if (ptier_on_disk(e, mod)) { // made on the device (optimizer tier none): through host memory
        void *tmp = malloc(bytes);
        if (!tmp) return zinf_fail(ZINF_ERR_NOMEM, "engine: out of memory");
        zinf_status st = zinf_copy_async(e->cs, tmp, src, bytes, ZINF_COPY_D2H);
        if (st == ZINF_OK) st = zinf_stream_sync(e->cs);
        if (st == ZINF_OK) st = ptier_write(e, mod, l->part_lo, l->part_n, tmp);
        free(tmp);
        return st;
    }
    zinf_copy_kind kind = host_slices(e) ? (src_host ? ZINF_COPY_H2H : ZINF_COPY_D2H)
                                         : (src_host ? ZINF_COPY_H2D : ZINF_COPY_D2D);
    return zinf_copy_async(src_host ? ptier_stream(e) : e->cs, (char *)e->part16 + l->part_off * e->es, src, bytes,
                           kind);
}

zinf_status ptier_write(zinf_engine *e, int mod, size_t a, size_t n, const void *src) {
    const mod_layout *l = &e->lay[mod];
    size_t bytes = n * e->es;
    void *dst = NULL;
    if (e->stage < 3) {
        dst = (char *)e->params16[mod] + a * e->es;
    } else {
        size_t off = l->part_off + (a - l->part_lo); // in the partition
        if (ptier_on_disk(e, mod)) {
            ZINF_CHECK(zinf_stream_sync(e->ps));
            return zinf_swap_pwrite(e->pswap, e->pswap_id, (off - e->resident_n) * e->es, src, bytes);
        }
        dst = (char *)e->part16 + off * e->es;
        if (host_slices(e)) {
            memcpy(dst, src, bytes);
            return ZINF_OK;
        }
    }
    ZINF_CHECK(zinf_copy_async(e->cs, dst, src, bytes, ZINF_COPY_H2D));
    return zinf_stream_sync(e->cs);
}

zinf_status ptier_copy_out(zinf_engine *e, int mod, size_t a, size_t n, void *dst) {
    const mod_layout *l = &e->lay[mod];
    size_t bytes = n * e->es;
    const void *src;
    if (e->stage < 3) {
        src = (const char *)e->params16[mod] + a * e->es;
    } else {
        size_t off = l->part_off + (a - l->part_lo); // in the partition
        if (ptier_on_disk(e, mod)) {
            ZINF_CHECK(zinf_stream_sync(e->ps));
            return zinf_swap_pread(e->pswap, e->pswap_id, (off - e->resident_n) * e->es, dst, bytes);
        }
        src = (const char *)e->part16 + off * e->es;
        if (host_slices(e)) {
            memcpy(dst, src, bytes);
            return ZINF_OK;
        }
    }
    ZINF_CHECK(zinf_copy_async(e->cs, dst, src, bytes, ZINF_COPY_D2H));
    return zinf_stream_sync(e->cs);
}
