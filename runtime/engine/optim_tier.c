// The optimizer tier: where a rank's fp32 master weights and moments live (device,
// pinned CPU memory, or the NVMe swap store) and the step that updates them there.
// With cpu or nvme the fp32 gradient partition is pinned host memory too: the
// communication stream adds each reduced bucket into it, and CPU Adam reads it.
// Offloaded steps run sub-group by sub-group in forward order (module boundaries,
// about sub_group_size elements); on nvme the next sub-group's states are read while
// this one computes and the previous one's are written back (pipeline_read /
// pipeline_write). The kernels are the ones the device optimizer runs on the host
// backend, tile by tile, so every tier gives the same bits.
#include <stdio.h>
#include <string.h>

#include "internal.h"
#include "zinf_swap.h"

static const char *const state_name[NSTATES] = {"master", "exp_avg", "exp_avg_sq"};
static const char *const device_name[NSTATES] = {"fp32 master weights", "optimizer exp_avg", "optimizer exp_avg_sq"};

static float **dev_state(zinf_engine *e, int s) {
    return s == ST_MASTER ? &e->master : s == ST_EXP_AVG ? &e->exp_avg : &e->exp_avg_sq;
}

static zinf_status host_alloc(zinf_engine *e, size_t bytes, const char *what, void **out) {
    ZINF_CHECK(engine_host_alloc(e, bytes, e->cfg.zero.offload_optimizer.pin_memory, what, out));
    e->host_bytes += (int64_t)bytes;
    return ZINF_OK;
}

static void host_free(zinf_engine *e, void *p) { engine_host_free(e, p, e->cfg.zero.offload_optimizer.pin_memory); }

static zinf_status start_thread(zinf_engine *e);
static void stop_thread(zinf_engine *e);
static zinf_status drop_preread(zinf_engine *e);

// Sub-groups: consecutive modules in forward order, closed once adding the next module
// would pass sub_group_size (a bigger module is its own).
static zinf_status plan_subgroups(zinf_engine *e) {
    e->sg = calloc((size_t)e->nmod + 1, sizeof *e->sg);
    e->sg_of = malloc((size_t)e->nmod * sizeof *e->sg_of);
    if (!e->sg || !e->sg_of) return zinf_fail(ZINF_ERR_NOMEM, "engine: out of memory");
    size_t cap = (size_t)e->cfg.zero.sub_group_size;
    for (int i = 0; i < e->nmod; i++) {
        size_t n = e->lay[i].part_n;
        e->sg_of[i] = -1;
        if (!n) continue;
        subgroup *g = e->nsg ? &e->sg[e->nsg - 1] : NULL;
        if (!g || g->n + n > cap) {
            g = &e->sg[e->nsg++];
            *g = (subgroup){.first = i, .off = e->lay[i].part_off};
        }
        g->last = i + 1;
        e->sg_of[i] = (int)(g - e->sg);
        g->n += n;
        if (g->n > e->sg_max) e->sg_max = g->n;
    }
    return ZINF_OK;
}

static zinf_status open_swap(zinf_engine *e) {
    const zinf_path_list *pl = &e->cfg.zero.offload_optimizer.nvme_path;
    ZINF_CHECK(engine_swap_open(e, pl, &e->swap));
    for (int s = 0; s < NSTATES; s++)
        ZINF_CHECK(zinf_swap_add(e->swap, state_name[s], e->npart * sizeof(float), &e->swap_id[s]));
    if (e->npart * sizeof(float) % zinf_swap_alignment(e->swap))
        return zinf_fail(ZINF_ERR_UNSUPPORTED, "%s: its block size %u does not divide zinf's 8 KiB slices",
                         pl->paths[0], zinf_swap_alignment(e->swap));
    // Read-ahead, compute and write-behind each need their own buffer of the three states.
    const zinf_offload_optimizer_config *oc = &e->cfg.zero.offload_optimizer;
    e->nio = 1 + oc->pipeline_read + oc->pipeline_write;
    for (int b = 0; b < e->nio; b++)
        ZINF_CHECK(host_alloc(e, NSTATES * e->sg_max * sizeof(float), "optimizer swap buffers", (void **)&e->io[b].buf));
    return ZINF_OK;
}

zinf_status tier_create(zinf_engine *e) {
    e->otier = e->cfg.zero.offload_optimizer.device;
    size_t bytes = e->npart * sizeof(float);
    if (e->otier == ZINF_OFFLOAD_NONE) {
        for (int s = 0; s < NSTATES; s++)
            ZINF_CHECK(zinf_device_alloc(e->dev, bytes, device_name[s], (void **)dev_state(e, s)));
        return zinf_device_alloc(e->dev, bytes, "fp32 gradients", (void **)&e->grads32);
    }
    ZINF_CHECK(plan_subgroups(e));
    ZINF_CHECK(host_alloc(e, bytes, "fp32 gradients", (void **)&e->h_grads32));
    memset(e->h_grads32, 0, bytes);
    size_t out_bytes = e->sg_max * (e->dt == ZINF_DTYPE_F32 ? sizeof(float) : e->es);
    for (int b = 0; b < 2; b++) {
        ZINF_CHECK(host_alloc(e, out_bytes, "16-bit optimizer output", &e->h_out[b]));
        ZINF_CHECK(zinf_event_create(e->dev, &e->out_free[b]));
    }
    ZINF_CHECK(zinf_cpu_pool_create(&e->pool, 0));
    e->sg_done = calloc((size_t)e->nsg + 1, sizeof *e->sg_done);
    if (!e->sg_done) return zinf_fail(ZINF_ERR_NOMEM, "engine: out of memory");
    for (int g = 0; g < e->nsg; g++)
        ZINF_CHECK(zinf_event_create(e->dev, &e->sg_done[g]));
    if (e->stage == 3) ZINF_CHECK(start_thread(e));
    if (e->otier == ZINF_OFFLOAD_CPU) {
        for (int s = 0; s < NSTATES; s++)
            ZINF_CHECK(host_alloc(e, bytes, device_name[s], (void **)&e->h_state[s]));
        return ZINF_OK;
    }
    return open_swap(e);
}

void tier_destroy(zinf_engine *e) {
    stop_thread(e);
    if (e->aio) zinf_aio_wait_all(e->aio);
    for (int s = 0; s < NSTATES; s++) {
        if (e->dev) zinf_device_free(e->dev, *dev_state(e, s));
        host_free(e, e->h_state[s]);
    }
    if (e->dev) zinf_device_free(e->dev, e->grads32);
    for (int b = 0; b < MAX_IO; b++)
        host_free(e, e->io[b].buf);
    for (int b = 0; b < 2; b++) {
        host_free(e, e->h_out[b]);
        zinf_event_destroy(e->out_free[b]);
    }
    host_free(e, e->h_grads32);
    zinf_swap_close(e->swap);
    zinf_cpu_pool_destroy(e->pool);
    for (int g = 0; e->sg_done && g < e->nsg; g++)
        zinf_event_destroy(e->sg_done[g]);
    free(e->sg_done), free(e->sg_of);
    free(e->sg);
}

// ---- any range, synchronously (initialization, full values, digests) ----

// Where state s lives: on the device (device tier, or gradients not offloaded), in
// host memory (*host set), or in the swap store (both NULL).
static float *state_home(zinf_engine *e, int s, float **host) {
    *host = NULL;
    if (s == ST_GRAD) {
        if (e->otier == ZINF_OFFLOAD_NONE) return e->grads32;
        *host = e->h_grads32;
        return NULL;
    }
    if (e->otier == ZINF_OFFLOAD_NONE) return *dev_state(e, s);
    if (e->otier == ZINF_OFFLOAD_CPU) *host = e->h_state[s];
    return NULL;
}

zinf_status tier_read(zinf_engine *e, int s, size_t off, size_t n, float *dst) {
    float *host, *dev = state_home(e, s, &host);
    if (host) {
        memcpy(dst, host + off, n * sizeof *dst);
        return ZINF_OK;
    }
    if (!dev) return zinf_swap_pread(e->swap, e->swap_id[s], off * sizeof *dst, dst, n * sizeof *dst);
    ZINF_CHECK(zinf_copy_async(e->cs, dst, dev + off, n * sizeof *dst, ZINF_COPY_D2H));
    return zinf_stream_sync(e->cs);
}

zinf_status tier_write(zinf_engine *e, int s, size_t off, size_t n, const float *src) {
    float *host, *dev = state_home(e, s, &host);
    if (host) {
        memcpy(host + off, src, n * sizeof *src);
        return ZINF_OK;
    }
    if (!dev) {
        ZINF_CHECK(drop_preread(e));
        return zinf_swap_pwrite(e->swap, e->swap_id[s], off * sizeof *src, src, n * sizeof *src);
    }
    ZINF_CHECK(zinf_copy_async(e->cs, dev + off, src, n * sizeof *src, ZINF_COPY_H2D));
    return zinf_stream_sync(e->cs);
}

// The moments and the gradient partition start at zero.
zinf_status tier_zero_states(zinf_engine *e) {
    size_t bytes = e->npart * sizeof(float);
    if (e->otier == ZINF_OFFLOAD_NONE) {
        ZINF_CHECK(zinf_memset_async(e->cs, e->exp_avg, 0, bytes));
        ZINF_CHECK(zinf_memset_async(e->cs, e->exp_avg_sq, 0, bytes));
        ZINF_CHECK(zinf_memset_async(e->cs, e->grads32, 0, bytes));
        return zinf_stream_sync(e->cs);
    }
    memset(e->h_grads32, 0, bytes);
    if (e->otier == ZINF_OFFLOAD_CPU) {
        memset(e->h_state[ST_EXP_AVG], 0, bytes);
        memset(e->h_state[ST_EXP_AVG_SQ], 0, bytes);
        return ZINF_OK;
    }
    // Through one IO buffer, a sub-group's worth at a time.
    ZINF_CHECK(drop_preread(e));
    float *z = e->io[0].buf;
    size_t chunk = NSTATES * e->sg_max;
    memset(z, 0, chunk * sizeof *z);
    for (int s = ST_EXP_AVG; s <= ST_EXP_AVG_SQ; s++)
        for (size_t o = 0; o < e->npart; o += chunk) {
            size_t n = e->npart - o < chunk ? e->npart - o : chunk;
            ZINF_CHECK(zinf_swap_pwrite(e->swap, e->swap_id[s], o * sizeof *z, z, n * sizeof *z));
        }
    return ZINF_OK;
}

// ---- the gradient partition on the host ----

typedef struct grad_add_job {
    zinf_engine *e;
    const float *src; // reduced bucket in pinned memory
    int bucket;
    bool packed; // this rank's block is at src, not at src + rank * block
} grad_add_job;

// On the communication stream's thread: grads += the reduced bucket, in fp32, the same
// additions the device does at the device tier.
static void grad_add_run(void *arg) {
    grad_add_job *j = arg;
    zinf_engine *e = j->e;
    const bucket *bk = &e->buckets[j->bucket];
    size_t W = (size_t)e->world;
    for (int k = bk->first; k < bk->first + bk->count; k++) {
        const piece *p = &e->pieces[k];
        const mod_layout *l = &e->lay[p->mod];
        for (size_t r = 0; r < W; r++) {
            if (e->stage > 0 && r != (size_t)e->rank) continue;
            const float *src = j->src + (j->packed ? 0 : r * bk->block) + p->off;
            float *dst = e->h_grads32 + l->part_off + (r * l->slice - l->part_lo) + p->lo;
            for (size_t i = 0; i < p->n; i++)
                dst[i] = dst[i] + src[i];
        }
    }
    free(j);
}

zinf_status tier_add_grads(zinf_engine *e, int b, const float *src, bool packed) {
    grad_add_job *j = malloc(sizeof *j);
    if (!j) return zinf_fail(ZINF_ERR_NOMEM, "engine: out of memory");
    *j = (grad_add_job){e, src, b, packed};
    zinf_status st = zinf_stream_host_fn(e->xs, grad_add_run, j);
    if (st != ZINF_OK) free(j);
    return st;
}

// ---- the offloaded update ----

static zinf_status wait_tickets(zinf_engine *e, io_buf *b) {
    int64_t t0 = zinf_clock_ns();
    zinf_status st = ZINF_OK;
    for (int k = 0; k < b->nt; k++) {
        zinf_status s = zinf_swap_wait(e->swap, b->t[k]);
        if (st == ZINF_OK) st = s;
    }
    b->nt = 0;
    e->optim_io_ns += zinf_clock_ns() - t0;
    return st;
}

// Start reading (or writing) sub-group g's three states from (to) buffer b.
static zinf_status swap_io(zinf_engine *e, int g, io_buf *b, bool write) {
    const subgroup *sg = &e->sg[g];
    for (int s = 0; s < NSTATES; s++) {
        float *p = b->buf + (size_t)s * e->sg_max;
        uint64_t off = sg->off * sizeof(float);
        size_t len = sg->n * sizeof(float);
        ZINF_CHECK(write ? zinf_swap_write(e->swap, e->swap_id[s], off, p, len, &b->t[b->nt])
                         : zinf_swap_read(e->swap, e->swap_id[s], off, p, len, &b->t[b->nt]));
        b->nt++;
    }
    return ZINF_OK;
}

static zinf_status start_read(zinf_engine *e, int g) {
    io_buf *b = &e->io[g % e->nio];
    ZINF_CHECK(wait_tickets(e, b)); // its last write-back
    return swap_io(e, g, b, false);
}

// Update sub-group g from states at master/m/v (sub-group relative), then store its new
// 16-bit parameters in the parameter tier.
static zinf_status update_group(zinf_engine *e, const zinf_optim_hparams *h, int g, float *master, float *m,
                                float *v) {
    const subgroup *sg = &e->sg[g];
    void *hout = e->h_out[g & 1];
    bool f32 = e->dt == ZINF_DTYPE_F32;
    ZINF_CHECK(zinf_event_sync(e->out_free[g & 1])); // its previous upload left
    zinf_optim_tile t = {.param = master, .exp_avg = m, .exp_avg_sq = v, .grad = e->h_grads32 + sg->off,
                         .grad_dtype = ZINF_DTYPE_F32, .out = f32 ? NULL : hout,
                         .out_dtype = f32 ? ZINF_DTYPE_NONE : e->dt, .n = sg->n};
    ZINF_CHECK(zinf_optim_step(e->pool, h, &t));
    if (f32) memcpy(hout, master, sg->n * sizeof(float));
    size_t es = f32 ? sizeof(float) : e->es;
    for (int i = sg->first; i < sg->last; i++)
        if (e->lay[i].part_n) ZINF_CHECK(ptier_store(e, i, (char *)hout + (e->lay[i].part_off - sg->off) * es, true));
    ZINF_CHECK(zinf_event_record(e->out_free[g & 1], ptier_stream(e)));
    ZINF_CHECK(zinf_event_record(e->sg_done[g], ptier_stream(e)));
    if (!e->background) return ZINF_OK;
    pthread_mutex_lock(&e->omu);
    e->published = g + 1;
    pthread_cond_broadcast(&e->ocv);
    pthread_mutex_unlock(&e->omu);
    return ZINF_OK;
}

static zinf_status update_all(zinf_engine *e, const zinf_optim_hparams *h) {
    if (e->otier == ZINF_OFFLOAD_CPU) {
        for (int g = 0; g < e->nsg; g++) {
            size_t o = e->sg[g].off;
            ZINF_CHECK(update_group(e, h, g, e->h_state[ST_MASTER] + o, e->h_state[ST_EXP_AVG] + o,
                                    e->h_state[ST_EXP_AVG_SQ] + o));
        }
        return ZINF_OK;
    }
    const zinf_offload_optimizer_config *oc = &e->cfg.zero.offload_optimizer;
    int pre = e->npreread;
    e->npreread = 0;
    zinf_status st = e->nsg && !pre ? start_read(e, 0) : ZINF_OK;
    for (int g = 0; st == ZINF_OK && g < e->nsg; g++) {
        io_buf *b = &e->io[g % e->nio];
        if (oc->pipeline_read && g + 1 < e->nsg && g + 1 >= pre) st = start_read(e, g + 1);
        if (st == ZINF_OK) st = wait_tickets(e, b);
        float *p = b->buf;
        if (st == ZINF_OK) st = update_group(e, h, g, p, p + e->sg_max, p + 2 * e->sg_max);
        if (st == ZINF_OK) st = swap_io(e, g, b, true);
        if (st == ZINF_OK && !oc->pipeline_write) st = wait_tickets(e, b);
        if (st == ZINF_OK && !oc->pipeline_read && g + 1 < e->nsg) st = start_read(e, g + 1);
    }
    // Every buffer's IO ends before the buffers are reused or the states read.
    for (int b = 0; b < e->nio; b++) {
        zinf_status s = wait_tickets(e, &e->io[b]);
        if (st == ZINF_OK) st = s;
    }
    return st;
}

// Called as backward starts: the update that follows then computes at once instead of
// waiting for its first reads, and at stage 3 the next forward, which waits for the
// first sub-groups, starts sooner. Only the update's own buffers take the reads, in
// the places it would read them into; with pipeline_read off it reads nothing early.
zinf_status tier_preread(zinf_engine *e) {
    if (e->otier != ZINF_OFFLOAD_NVME || !e->cfg.zero.offload_optimizer.pipeline_read || e->npreread) return ZINF_OK;
    for (int g = 0; g < e->nio && g < e->nsg; g++) {
        ZINF_CHECK(start_read(e, g));
        e->npreread = g + 1;
    }
    return ZINF_OK;
}

// States written outside the update (initialization, loading) make the reads stale.
static zinf_status drop_preread(zinf_engine *e) {
    zinf_status st = ZINF_OK;
    for (int b = 0; b < e->npreread; b++) {
        zinf_status s = wait_tickets(e, &e->io[b]);
        if (st == ZINF_OK) st = s;
    }
    e->npreread = 0;
    return st;
}

zinf_status tier_update(zinf_engine *e, const zinf_optim_hparams *h) {
    int64_t t0 = zinf_clock_ns();
    zinf_status st = update_all(e, h);
    e->optim_ns += zinf_clock_ns() - t0;
    return st;
}

// ---- the update in the background (stage 3) ----

// The optimizer thread: one update per tier_start, then the gradients start over.
static void *optim_main(void *arg) {
    zinf_engine *e = arg;
    pthread_mutex_lock(&e->omu);
    for (;;) {
        while (!e->ojob && !e->ostop)
            pthread_cond_wait(&e->ocv, &e->omu);
        if (e->ostop) break;
        zinf_optim_hparams h = e->oh;
        pthread_mutex_unlock(&e->omu);
        zinf_status st = tier_update(e, &h);
        if (st == ZINF_OK) memset(e->h_grads32, 0, e->npart * sizeof(float));
        else engine_fail_async(e, st);
        pthread_mutex_lock(&e->omu);
        e->ojob = false;
        e->published = e->nsg; // a failure also lets every waiter go on, to engine_sync
        pthread_cond_broadcast(&e->ocv);
    }
    pthread_mutex_unlock(&e->omu);
    return NULL;
}

static zinf_status start_thread(zinf_engine *e) {
    pthread_mutex_init(&e->omu, NULL);
    pthread_cond_init(&e->ocv, NULL);
    if (pthread_create(&e->othread, NULL, optim_main, e) != 0)
        return zinf_fail(ZINF_ERR_NOMEM, "engine: cannot start the optimizer thread");
    e->othread_up = e->background = true;
    return ZINF_OK;
}

static void stop_thread(zinf_engine *e) {
    if (!e->othread_up) return;
    pthread_mutex_lock(&e->omu);
    e->ostop = true;
    pthread_cond_broadcast(&e->ocv);
    pthread_mutex_unlock(&e->omu);
    pthread_join(e->othread, NULL);
    pthread_mutex_destroy(&e->omu);
    pthread_cond_destroy(&e->ocv);
    e->othread_up = false;
}

zinf_status tier_start(zinf_engine *e, const zinf_optim_hparams *h) {
    pthread_mutex_lock(&e->omu);
    e->oh = *h;
    e->published = 0;
    e->ojob = e->unsynced = true;
    pthread_cond_broadcast(&e->ocv);
    pthread_mutex_unlock(&e->omu);
    return ZINF_OK;
}

void tier_join(zinf_engine *e) {
    if (!e->background) return;
    pthread_mutex_lock(&e->omu);
    while (e->ojob)
        pthread_cond_wait(&e->ocv, &e->omu);
    pthread_mutex_unlock(&e->omu);
}

bool tier_updated(zinf_engine *e, int mod) {
    if (!e->background || e->sg_of[mod] < 0) return true;
    pthread_mutex_lock(&e->omu);
    bool done = !e->ojob || e->published > e->sg_of[mod];
    pthread_mutex_unlock(&e->omu);
    return done;
}

zinf_status tier_wait_updated(zinf_engine *e, int mod, zinf_stream *s) {
    if (!e->background || !e->unsynced || e->sg_of[mod] < 0) return ZINF_OK;
    int g = e->sg_of[mod];
    pthread_mutex_lock(&e->omu);
    while (e->ojob && e->published <= g)
        pthread_cond_wait(&e->ocv, &e->omu);
    pthread_mutex_unlock(&e->omu);
    return s ? zinf_stream_wait_event(s, e->sg_done[g]) : ZINF_OK;
}

zinf_status tier_zero_grads(zinf_engine *e) {
    if (e->otier == ZINF_OFFLOAD_NONE) return zinf_memset_async(e->cs, e->grads32, 0, e->npart * sizeof(float));
    memset(e->h_grads32, 0, e->npart * sizeof(float));
    return ZINF_OK;
}
