// The optimizer tier (zinf_offload.h): an offloaded optimizer partition and its update.
// Sub-groups close once adding the next segment would pass sub_group_size. On nvme each
// sub-group goes through one of up to three pinned buffers of its three states: one
// being read ahead, one computing, one being written behind.
//
// Speculation: in the step's last backward each sub-group is updated as soon as its
// gradients are final, on the guess that the step neither clips nor overflows, so that
// the update runs under the backward. It reads its states where they are and writes the
// new ones to the other of two places (its place in the partition, or one in a spare
// area: host memory on cpu, spare swap files on nvme), and its new parameters are held
// back, not stored: the backward still reads the old ones (stages 1-2), and the guess
// may be wrong. When the step's own hyperparameters are the guessed ones, the
// sub-group's states are where the update wrote them and its held parameters are
// stored; otherwise what it wrote is dropped and the sub-group is updated again from
// the states it left. Adam has no exact inverse in floating point (m' = b1 m + (1 - b1) g
// rounds), and a copy of the old states would move 24 more bytes per element than the
// update's 30; the two places move none. On nvme the speculation goes through the IO
// buffers in backward order (the last sub-groups first, as the backward finishes them):
// the next sub-group's states are read ahead while the backward still adds its
// gradients, and the last one's new states written behind.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zinf_internal.h"
#include "zinf_offload.h"

enum { NSTATES = 3, MAX_IO = 3 };
#define HOME SIZE_MAX // a sub-group's states at its place in the partition

static const char *const state_file[NSTATES] = {"master", "exp_avg", "exp_avg_sq"};
static const char *const state_what[NSTATES] = {"fp32 master weights", "optimizer exp_avg", "optimizer exp_avg_sq"};

// Consecutive segments [first, last): elements [off, off + n) of the partition.
typedef struct subgroup {
    int first, last;
    size_t off, n;
} subgroup;

// A pinned buffer of the three states of one sub-group, with its IO in flight.
typedef struct io_buf {
    float *buf; // master | exp_avg | exp_avg_sq, sg_max floats each
    zinf_aio_ticket t[NSTATES];
    int nt;
    int group; // the sub-group its IO is for, named when the IO fails
} io_buf;

struct zinf_optim_tier {
    zinf_optim_tier_config c;
    size_t *seg_n, *seg_off; // owned copies
    size_t n;                // the partition's elements
    size_t out_es;           // bytes per element handed to store
    subgroup *sg;
    int nsg;
    size_t sg_max;
    int *sg_of;            // per segment: its sub-group, or -1
    float *state[NSTATES]; // cpu
    float *grads;
    void *out[2]; // a sub-group's parameters on their way to store
    zinf_event *out_free[2];
    zinf_event **sg_done; // per sub-group: recorded on store_stream after its parameters
    zinf_swap *swap;      // nvme
    int swap_id[NSTATES];
    io_buf io[MAX_IO];
    int nio;
    int npreread; // the next update's first sub-groups already read into io[0 ..)
    int64_t host_bytes, pinned_bytes, update_ns, io_wait_ns;
    int64_t output_bytes, swap_buffer_bytes, speculation_bytes; // of host_bytes (zinf_optim_tier_stats)
    // Swap bytes read and written for updates (atomic): for the next update (its early
    // reads and speculation, then its own), for the last one to end, and since the last
    // zinf_optim_tier_take_times.
    int64_t next_io[2], last_io[2], issued_io[2];
    // Held while an update's IO is counted and submitted, and while the counts and the
    // aio engine's are taken together: a request in one and not yet in the other would
    // move its bytes from one step's figures to the next.
    pthread_mutex_t io_mu;

    // background: one update per zinf_optim_tier_start on the tier's thread.
    pthread_t thread;
    bool thread_up;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool job, stop; // an update asked for or running; the thread is to end
    zinf_optim_hparams h;
    int published;  // sub-groups of the running update whose sg_done is recorded
    bool unsettled; // stores of a background update may still be queued on store_stream

    // speculation (background), in c.speculate_elements elements of spare states and of
    // held parameters
    float *spare;          // cpu: master | exp_avg | exp_avg_sq
    int spare_id[NSTATES]; // nvme: the spare swap files
    size_t *spare_at;      // per sub-group: where its states live in spare, or HOME
    size_t *written_at;    // per speculated sub-group: where it wrote its new states
    char *held;            // the speculated sub-groups' new parameters (out_es bytes each)
    size_t *held_at;       // per speculated sub-group: its place in held
    size_t held_used;      // elements
    zinf_event *held_free; // recorded on store_stream after an update's stores
    int *order;            // nvme: the sub-groups a speculative run reads, in order
    int *sg_segments;      // per sub-group: its segments with elements
    int *sg_final;         // per sub-group: those whose gradients are final in this backward
    bool *speculated;      // per sub-group: updated with h_spec, its new states and parameters aside
    bool speculating;      // final sub-groups are to be updated with h_spec
    bool pending;          // nvme: the run through the final sub-groups is yet to start
    bool finishing;        // nvme: the run is to update the sub-groups it has read, and end
    bool running;          // the thread is updating sub-groups speculatively
    zinf_optim_hparams h_spec;
    bool keep; // the running update keeps the speculated sub-groups
    int64_t speculated_ns;
    int speculated_count;
};

// A host buffer from the pool, pinned where pin_memory asks and the device copies it;
// without a pool (a plan) only counted.
static zinf_status host_alloc(zinf_optim_tier *t, size_t bytes, bool pinned, const char *what, void **out) {
    pinned = pinned && t->c.pin_memory;
    if (t->c.host) ZINF_CHECK(zinf_host_pool_alloc(t->c.host, bytes, pinned, what, out));
    t->host_bytes += (int64_t)bytes;
    if (pinned) t->pinned_bytes += (int64_t)bytes;
    return ZINF_OK;
}

static void host_free(zinf_optim_tier *t, void *p, bool pinned) {
    zinf_host_pool_free(t->c.host, p, pinned && t->c.pin_memory);
}

int zinf_optim_tier_group(const size_t *seg_n, int nseg, int64_t sub_group_size, int *group_of) {
    size_t cap = (size_t)sub_group_size, open = 0; // the elements of the last sub-group
    int count = 0;
    for (int i = 0; i < nseg; i++) {
        group_of[i] = -1;
        if (!seg_n[i]) continue;
        if (!count || open + seg_n[i] > cap) count++, open = 0;
        group_of[i] = count - 1;
        open += seg_n[i];
    }
    return count;
}

static zinf_status plan_subgroups(zinf_optim_tier *t) {
    t->sg = calloc((size_t)t->c.nseg + 1, sizeof *t->sg);
    t->sg_of = malloc(((size_t)t->c.nseg + 1) * sizeof *t->sg_of);
    if (!t->sg || !t->sg_of) return zinf_fail(ZINF_ERR_NOMEM, "optimizer tier: out of memory");
    t->nsg = zinf_optim_tier_group(t->seg_n, t->c.nseg, t->c.sub_group_size, t->sg_of);
    for (int i = 0; i < t->c.nseg; i++) {
        if (t->sg_of[i] < 0) continue;
        subgroup *g = &t->sg[t->sg_of[i]];
        if (!g->n) *g = (subgroup){.first = i, .off = t->seg_off[i]};
        g->last = i + 1;
        g->n += t->seg_n[i];
        if (g->n > t->sg_max) t->sg_max = g->n;
    }
    return ZINF_OK;
}

static zinf_status open_swap(zinf_optim_tier *t) {
    ZINF_CHECK(zinf_swap_open(&t->swap, &t->c.swap));
    for (int s = 0; s < NSTATES; s++)
        ZINF_CHECK(zinf_swap_add(t->swap, state_file[s], t->n * sizeof(float), &t->swap_id[s]));
    for (int s = 0; t->c.speculate_elements && s < NSTATES; s++) {
        char name[32];
        snprintf(name, sizeof name, "%s.spare", state_file[s]);
        ZINF_CHECK(zinf_swap_add(t->swap, name, t->c.speculate_elements * sizeof(float), &t->spare_id[s]));
    }
    if (t->n * sizeof(float) % zinf_swap_alignment(t->swap))
        return zinf_fail(ZINF_ERR_UNSUPPORTED, "%s: its block size %u does not divide zinf's 8 KiB slices",
                         t->c.swap.paths[0], zinf_swap_alignment(t->swap));
    return ZINF_OK;
}

// The segments, the sub-groups and the number of IO buffers: what the buffers are sized by.
static zinf_status shape(zinf_optim_tier *t, const zinf_optim_tier_config *cfg) {
    if (cfg->device != ZINF_OFFLOAD_CPU && cfg->device != ZINF_OFFLOAD_NVME)
        return zinf_fail(ZINF_ERR_INVAL, "optimizer tier: the device must be cpu or nvme");
    if (cfg->speculate_elements && !cfg->background)
        return zinf_fail(ZINF_ERR_INVAL, "optimizer tier: speculation needs a background update");
    size_t nseg = (size_t)cfg->nseg;
    t->seg_n = malloc((nseg + 1) * sizeof *t->seg_n);
    t->seg_off = malloc((nseg + 1) * sizeof *t->seg_off);
    if (!t->seg_n || !t->seg_off) return zinf_fail(ZINF_ERR_NOMEM, "optimizer tier: out of memory");
    for (size_t i = 0; i < nseg; i++) {
        t->seg_n[i] = cfg->seg_n[i];
        t->seg_off[i] = t->n;
        t->n += cfg->seg_n[i];
    }
    t->c.seg_n = t->seg_n;
    t->out_es = cfg->param_dtype == ZINF_DTYPE_F32 ? sizeof(float) : zinf_dtype_size(cfg->param_dtype);
    // Read-ahead, compute and write-behind each need their own buffer of the three states.
    t->nio = cfg->device == ZINF_OFFLOAD_NVME ? 1 + cfg->pipeline_read + cfg->pipeline_write : 0;
    return plan_subgroups(t);
}

// Every host buffer, in the order they are taken: the gradient partition, two buffers
// of a sub-group's parameters on their way out, and the states (cpu) or the IO buffers
// of the three states of the largest sub-group (nvme). On cpu the states are never
// pinned: only this tier's threads touch them, and pinning them would spend the pinned
// budget that the gradients, the parameters on their way out and the held ones use.
static zinf_status take_buffers(zinf_optim_tier *t) {
    size_t bytes = t->n * sizeof(float);
    ZINF_CHECK(host_alloc(t, bytes, true, "fp32 gradients", (void **)&t->grads));
    int64_t before = t->host_bytes;
    for (int b = 0; b < 2; b++)
        ZINF_CHECK(host_alloc(t, t->sg_max * t->out_es, true, "16-bit optimizer output", &t->out[b]));
    t->output_bytes = t->host_bytes - before;
    for (int s = 0; t->c.device == ZINF_OFFLOAD_CPU && s < NSTATES; s++)
        ZINF_CHECK(host_alloc(t, bytes, false, state_what[s], (void **)&t->state[s]));
    before = t->host_bytes;
    for (int b = 0; b < t->nio; b++)
        ZINF_CHECK(
            host_alloc(t, NSTATES * t->sg_max * sizeof(float), true, "optimizer swap buffers", (void **)&t->io[b].buf));
    t->swap_buffer_bytes = t->host_bytes - before;
    size_t spec = t->c.speculate_elements;
    if (!spec) return ZINF_OK;
    before = t->host_bytes;
    if (t->c.device == ZINF_OFFLOAD_CPU) {
        ZINF_CHECK(host_alloc(t, NSTATES * spec * sizeof(float), false, "spare optimizer states for speculation",
                              (void **)&t->spare));
        if (t->c.host) zinf_cpu_pool_touch(t->c.cpu, t->spare, NSTATES * spec, sizeof(float)); // not in a backward
    }
    ZINF_CHECK(host_alloc(t, spec * t->out_es, true, "speculated 16-bit parameters", (void **)&t->held));
    t->speculation_bytes = t->host_bytes - before;
    return ZINF_OK;
}

static void *thread_main(void *arg);

static zinf_status start_thread(zinf_optim_tier *t) {
    if (pthread_create(&t->thread, NULL, thread_main, t) != 0)
        return zinf_fail(ZINF_ERR_NOMEM, "optimizer tier: cannot start the optimizer thread");
    t->thread_up = true;
    return ZINF_OK;
}

static zinf_status create(zinf_optim_tier *t, const zinf_optim_tier_config *cfg) {
    ZINF_CHECK(shape(t, cfg));
    ZINF_CHECK(take_buffers(t));
    memset(t->grads, 0, t->n * sizeof(float));
    for (int b = 0; b < 2; b++)
        ZINF_CHECK(zinf_event_create(cfg->dev, &t->out_free[b]));
    t->sg_done = calloc((size_t)t->nsg + 1, sizeof *t->sg_done);
    if (!t->sg_done) return zinf_fail(ZINF_ERR_NOMEM, "optimizer tier: out of memory");
    for (int g = 0; g < t->nsg; g++)
        ZINF_CHECK(zinf_event_create(cfg->dev, &t->sg_done[g]));
    size_t ng = (size_t)t->nsg + 1;
    t->sg_segments = calloc(ng, sizeof *t->sg_segments);
    t->sg_final = calloc(ng, sizeof *t->sg_final);
    t->speculated = calloc(ng, sizeof *t->speculated);
    t->spare_at = malloc(ng * sizeof *t->spare_at);
    t->written_at = calloc(ng, sizeof *t->written_at);
    t->held_at = calloc(ng, sizeof *t->held_at);
    t->order = calloc(ng, sizeof *t->order);
    if (!t->order || !t->sg_segments || !t->sg_final || !t->speculated || !t->spare_at || !t->written_at || !t->held_at)
        return zinf_fail(ZINF_ERR_NOMEM, "optimizer tier: out of memory");
    for (int i = 0; i < t->c.nseg; i++)
        if (t->sg_of[i] >= 0) t->sg_segments[t->sg_of[i]]++;
    for (size_t g = 0; g < ng; g++)
        t->spare_at[g] = HOME;
    if (cfg->speculate_elements) ZINF_CHECK(zinf_event_create(cfg->dev, &t->held_free));
    if (cfg->background) ZINF_CHECK(start_thread(t));
    return cfg->device == ZINF_OFFLOAD_NVME ? open_swap(t) : ZINF_OK;
}

zinf_status zinf_optim_tier_plan(const zinf_optim_tier_config *cfg, uint64_t stripe, zinf_optim_tier_stats *out) {
    memset(out, 0, sizeof *out);
    zinf_optim_tier *t = calloc(1, sizeof *t);
    if (!t) return zinf_fail(ZINF_ERR_NOMEM, "optimizer tier: out of memory");
    t->c = *cfg;
    t->c.host = NULL; // count, take nothing
    zinf_status st = shape(t, cfg);
    if (st == ZINF_OK) st = take_buffers(t);
    if (st == ZINF_OK) {
        zinf_optim_tier_get_stats(t, out);
        if (cfg->device == ZINF_OFFLOAD_NVME)
            out->nvme_bytes =
                NSTATES *
                (int64_t)(zinf_swap_planned_bytes(t->n * sizeof(float), cfg->swap.npaths, stripe) +
                          (cfg->speculate_elements ? zinf_swap_planned_bytes(cfg->speculate_elements * sizeof(float),
                                                                             cfg->swap.npaths, stripe)
                                                   : 0));
    }
    free(t->seg_n), free(t->seg_off), free(t->sg), free(t->sg_of);
    free(t);
    return st;
}

zinf_status zinf_optim_tier_create(zinf_optim_tier **out, const zinf_optim_tier_config *cfg) {
    *out = NULL;
    zinf_optim_tier *t = calloc(1, sizeof *t);
    if (!t) return zinf_fail(ZINF_ERR_NOMEM, "optimizer tier: out of memory");
    t->c = *cfg;
    pthread_mutex_init(&t->mu, NULL);
    pthread_mutex_init(&t->io_mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    zinf_status st = create(t, cfg);
    if (st != ZINF_OK) {
        zinf_optim_tier_destroy(t);
        return st;
    }
    *out = t;
    return ZINF_OK;
}

void zinf_optim_tier_destroy(zinf_optim_tier *t) {
    if (!t) return;
    if (t->thread_up) {
        pthread_mutex_lock(&t->mu);
        t->stop = true;
        pthread_cond_broadcast(&t->cv);
        pthread_mutex_unlock(&t->mu);
        pthread_join(t->thread, NULL);
    }
    if (t->c.swap.aio) zinf_aio_wait_all(t->c.swap.aio);
    for (int s = 0; s < NSTATES; s++)
        host_free(t, t->state[s], false);
    for (int b = 0; b < MAX_IO; b++)
        host_free(t, t->io[b].buf, true);
    for (int b = 0; b < 2; b++) {
        host_free(t, t->out[b], true);
        zinf_event_destroy(t->out_free[b]);
    }
    host_free(t, t->grads, true);
    host_free(t, t->spare, false);
    host_free(t, t->held, true);
    zinf_event_destroy(t->held_free);
    free(t->sg_segments), free(t->sg_final), free(t->speculated), free(t->spare_at), free(t->written_at),
        free(t->held_at), free(t->order);
    zinf_swap_close(t->swap);
    for (int g = 0; t->sg_done && g < t->nsg; g++)
        zinf_event_destroy(t->sg_done[g]);
    free(t->sg_done), free(t->sg_of), free(t->sg);
    free(t->seg_n), free(t->seg_off);
    pthread_mutex_destroy(&t->mu);
    pthread_mutex_destroy(&t->io_mu);
    pthread_cond_destroy(&t->cv);
    free(t);
}

// ---- any range, synchronously ----

// timed: a wait of the update (io_wait_ns), not of the speculation or a range's IO.
static zinf_status wait_tickets(zinf_optim_tier *t, io_buf *b, bool timed) {
    int64_t t0 = zinf_clock_ns();
    zinf_status st = ZINF_OK;
    for (int k = 0; k < b->nt; k++) {
        zinf_status s = zinf_swap_wait(t->swap, b->t[k]);
        if (st == ZINF_OK) st = s;
    }
    b->nt = 0;
    if (timed) t->io_wait_ns += zinf_clock_ns() - t0;
    if (st == ZINF_OK) return ZINF_OK;
    const subgroup *g = &t->sg[b->group];
    return zinf_fail(st,
                     "optimizer states of sub-group %d (modules %d to %d, elements %zu to %zu of this rank's "
                     "partition): %s",
                     b->group, g->first, g->last, g->off, g->off + g->n, zinf_last_error());
}

// States written outside the update (initialization, loading) make early reads stale.
static zinf_status drop_preread(zinf_optim_tier *t) {
    zinf_status st = ZINF_OK;
    for (int b = 0; b < t->npreread; b++) {
        zinf_status s = wait_tickets(t, &t->io[b], false);
        if (st == ZINF_OK) st = s;
    }
    t->npreread = 0;
    return st;
}

static zinf_status settle_home(zinf_optim_tier *t);

// State s in host memory, or NULL where it lives in the swap store.
static float *host_state(zinf_optim_tier *t, zinf_tier_state s) { return s == ZINF_TIER_GRAD ? t->grads : t->state[s]; }

zinf_status zinf_optim_tier_read(zinf_optim_tier *t, zinf_tier_state s, size_t off, size_t n, float *dst) {
    ZINF_CHECK(settle_home(t)); // the states as the last step left them, each at home
    float *host = host_state(t, s);
    if (host) {
        memcpy(dst, host + off, n * sizeof *dst);
        return ZINF_OK;
    }
    return zinf_swap_pread(t->swap, t->swap_id[s], off * sizeof *dst, dst, n * sizeof *dst);
}

zinf_status zinf_optim_tier_write(zinf_optim_tier *t, zinf_tier_state s, size_t off, size_t n, const float *src) {
    ZINF_CHECK(settle_home(t)); // the states as the last step left them, each at home
    float *host = host_state(t, s);
    if (host) {
        memcpy(host + off, src, n * sizeof *src);
        return ZINF_OK;
    }
    ZINF_CHECK(drop_preread(t));
    return zinf_swap_pwrite(t->swap, t->swap_id[s], off * sizeof *src, src, n * sizeof *src);
}

zinf_status zinf_optim_tier_zero_states(zinf_optim_tier *t) {
    ZINF_CHECK(settle_home(t)); // the states as the last step left them, each at home
    size_t bytes = t->n * sizeof(float);
    memset(t->grads, 0, bytes);
    if (t->c.device == ZINF_OFFLOAD_CPU) {
        memset(t->state[ZINF_TIER_EXP_AVG], 0, bytes);
        memset(t->state[ZINF_TIER_EXP_AVG_SQ], 0, bytes);
        return ZINF_OK;
    }
    // Through one IO buffer, a sub-group's worth at a time.
    ZINF_CHECK(drop_preread(t));
    float *z = t->io[0].buf;
    size_t chunk = NSTATES * t->sg_max;
    memset(z, 0, chunk * sizeof *z);
    for (int s = ZINF_TIER_EXP_AVG; s <= ZINF_TIER_EXP_AVG_SQ; s++)
        for (size_t o = 0; o < t->n; o += chunk) {
            size_t n = t->n - o < chunk ? t->n - o : chunk;
            ZINF_CHECK(zinf_swap_pwrite(t->swap, t->swap_id[s], o * sizeof *z, z, n * sizeof *z));
        }
    return ZINF_OK;
}

// On the pool's threads: one thread's memset of a large partition is held to what one
// core can write.
void zinf_optim_tier_zero_grads(zinf_optim_tier *t) { zinf_cpu_pool_touch(t->c.cpu, t->grads, t->n, sizeof(float)); }

float *zinf_optim_tier_grads(zinf_optim_tier *t) { return t->grads; }

// ---- the update ----

// Sub-group g's state s at `at` (HOME or a place in the spare area): in host memory
// (cpu), or a swap file and the offset in it (nvme).
static float *state_at(zinf_optim_tier *t, int g, int s, size_t at) {
    return at == HOME ? t->state[s] + t->sg[g].off : t->spare + (size_t)s * t->c.speculate_elements + at;
}
static void swap_at(const zinf_optim_tier *t, int g, int s, size_t at, int *id, uint64_t *off) {
    *id = at == HOME ? t->swap_id[s] : t->spare_id[s];
    *off = (at == HOME ? t->sg[g].off : at) * sizeof(float);
}
static char *held_of(zinf_optim_tier *t, int g) { return t->held + t->held_at[g] * t->out_es; }

// Start reading (or writing) sub-group g's three states at `at` from (to) buffer b, for
// an update (counted) or not.
static zinf_status swap_io(zinf_optim_tier *t, int g, size_t at, io_buf *b, bool write, bool update) {
    size_t len = t->sg[g].n * sizeof(float);
    if (update) {
        pthread_mutex_lock(&t->io_mu);
        __atomic_add_fetch(&t->next_io[write], (int64_t)(NSTATES * len), __ATOMIC_RELAXED);
        __atomic_add_fetch(&t->issued_io[write], (int64_t)(NSTATES * len), __ATOMIC_RELAXED);
    }
    b->group = g;
    zinf_status st = ZINF_OK;
    for (int s = 0; st == ZINF_OK && s < NSTATES; s++) {
        float *p = b->buf + (size_t)s * t->sg_max;
        int id;
        uint64_t off;
        swap_at(t, g, s, at, &id, &off);
        st = write ? zinf_swap_write(t->swap, id, off, p, len, &b->t[b->nt])
                   : zinf_swap_read(t->swap, id, off, p, len, &b->t[b->nt]);
        if (st == ZINF_OK) b->nt++;
    }
    if (update) pthread_mutex_unlock(&t->io_mu);
    ZINF_CHECK(st);
    return ZINF_OK;
}

// Start reading sub-group g's states from where they live into b, once b's last
// write-back has passed.
static zinf_status start_read(zinf_optim_tier *t, int g, io_buf *b, bool timed) {
    ZINF_CHECK(wait_tickets(t, b, timed));
    return swap_io(t, g, t->spare_at[g], b, false, true);
}

// Adam over the n elements at partition offset off into the states at to (master,
// exp_avg, exp_avg_sq), from those at from (NULL: in place), the new parameters to out
// (f32: a copy of the masters).
static zinf_status adam(zinf_optim_tier *t, const zinf_optim_hparams *h, size_t off, size_t n, float *const *to,
                        const float *const *from, void *out) {
    bool f32 = t->c.param_dtype == ZINF_DTYPE_F32;
    zinf_optim_tile tile = {.param = to[ZINF_TIER_MASTER],
                            .exp_avg = to[ZINF_TIER_EXP_AVG],
                            .exp_avg_sq = to[ZINF_TIER_EXP_AVG_SQ],
                            .grad = t->grads + off,
                            .grad_dtype = ZINF_DTYPE_F32,
                            .out = f32 ? NULL : out,
                            .out_dtype = f32 ? ZINF_DTYPE_NONE : t->c.param_dtype,
                            .n = n,
                            .from_param = from ? from[ZINF_TIER_MASTER] : NULL,
                            .from_exp_avg = from ? from[ZINF_TIER_EXP_AVG] : NULL,
                            .from_exp_avg_sq = from ? from[ZINF_TIER_EXP_AVG_SQ] : NULL};
    ZINF_CHECK(zinf_optim_step(t->c.cpu, h, &tile));
    if (f32) memcpy(out, tile.param, n * sizeof(float));
    return ZINF_OK;
}

// Hand sub-group g's segments' parameters at out to store; the sub-group is updated.
static zinf_status store_group(zinf_optim_tier *t, int g, const void *out) {
    const subgroup *sg = &t->sg[g];
    for (int i = sg->first; i < sg->last; i++)
        if (t->seg_n[i])
            ZINF_CHECK(t->c.store(t->c.store_ctx, i, (const char *)out + (t->seg_off[i] - sg->off) * t->out_es));
    ZINF_CHECK(zinf_event_record(t->sg_done[g], t->c.store_stream));
    if (!t->c.background) return ZINF_OK;
    pthread_mutex_lock(&t->mu);
    t->published = g + 1;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    return ZINF_OK;
}

// Update sub-group g from states at master/m/v (sub-group relative), then hand its
// segments' parameters to store.
static zinf_status update_group(zinf_optim_tier *t, const zinf_optim_hparams *h, int g, float *master, float *m,
                                float *v) {
    const subgroup *sg = &t->sg[g];
    void *out = t->out[g & 1];
    ZINF_CHECK(zinf_event_sync(t->out_free[g & 1])); // its previous store passed
    ZINF_CHECK(adam(t, h, sg->off, sg->n, (float *const[]){master, m, v}, NULL, out));
    ZINF_CHECK(store_group(t, g, out));
    return zinf_event_record(t->out_free[g & 1], t->c.store_stream);
}

// Whether sub-group g was speculated with the hyperparameters the update has: its new
// states and held parameters stand.
static bool kept(const zinf_optim_tier *t, int g) { return t->speculated[g] && t->keep; }

// The first sub-group from g on that the update computes (one not kept), or nsg.
static int next_update(const zinf_optim_tier *t, int g) {
    while (g < t->nsg && kept(t, g))
        g++;
    return g;
}

// Sub-group g's speculation settled: its new states are its own and its held parameters
// stored (*taken), or what it wrote is dropped and the update computes it.
static zinf_status take_kept(zinf_optim_tier *t, int g, bool *taken) {
    *taken = kept(t, g);
    if (t->speculated[g]) {
        t->speculated[g] = false;
        if (*taken) t->spare_at[g] = t->written_at[g];
    }
    return *taken ? store_group(t, g, held_of(t, g)) : ZINF_OK;
}

static zinf_status update_host(zinf_optim_tier *t, const zinf_optim_hparams *h) {
    for (int g = 0; g < t->nsg; g++) {
        bool taken;
        ZINF_CHECK(take_kept(t, g, &taken));
        size_t at = t->spare_at[g];
        if (!taken)
            ZINF_CHECK(update_group(t, h, g, state_at(t, g, ZINF_TIER_MASTER, at),
                                    state_at(t, g, ZINF_TIER_EXP_AVG, at), state_at(t, g, ZINF_TIER_EXP_AVG_SQ, at)));
    }
    return ZINF_OK;
}

// The j-th sub-group computed goes through IO buffer j % nio, its states written back
// where they live. The first ones may be read already (npreread: only in a step that
// speculated nothing, so that they are sub-groups 0, 1, ...).
static zinf_status update_swapped(zinf_optim_tier *t, const zinf_optim_hparams *h) {
    int pre = t->npreread;
    t->npreread = 0;
    int first = next_update(t, 0);
    zinf_status st = first < t->nsg && !pre ? start_read(t, first, &t->io[0], true) : ZINF_OK;
    for (int g = 0, j = 0; st == ZINF_OK && g < t->nsg; g++) {
        bool taken;
        st = take_kept(t, g, &taken);
        if (st != ZINF_OK || taken) continue;
        io_buf *b = &t->io[j % t->nio], *next_b = &t->io[(j + 1) % t->nio];
        int next = next_update(t, g + 1);
        if (t->c.pipeline_read && next < t->nsg && j + 1 >= pre) st = start_read(t, next, next_b, true);
        if (st == ZINF_OK) st = wait_tickets(t, b, true);
        float *p = b->buf;
        if (st == ZINF_OK) st = update_group(t, h, g, p, p + t->sg_max, p + 2 * t->sg_max);
        if (st == ZINF_OK) st = swap_io(t, g, t->spare_at[g], b, true, true);
        if (st == ZINF_OK && !t->c.pipeline_write) st = wait_tickets(t, b, true);
        if (st == ZINF_OK && !t->c.pipeline_read && next < t->nsg) st = start_read(t, next, next_b, true);
        j++;
    }
    // Every buffer's IO ends before the buffers are reused or the states read.
    for (int b = 0; b < t->nio; b++) {
        zinf_status s = wait_tickets(t, &t->io[b], true);
        if (st == ZINF_OK) st = s;
    }
    return st;
}

static zinf_status update_all(zinf_optim_tier *t, const zinf_optim_hparams *h) {
    zinf_status st = t->c.device == ZINF_OFFLOAD_CPU ? update_host(t, h) : update_swapped(t, h);
    if (st == ZINF_OK && t->held_free) st = zinf_event_record(t->held_free, t->c.store_stream);
    return st;
}

zinf_status zinf_optim_tier_update(zinf_optim_tier *t, const zinf_optim_hparams *h) {
    int64_t t0 = zinf_clock_ns();
    zinf_status st = update_all(t, h);
    t->update_ns += zinf_clock_ns() - t0;
    for (int w = 0; w < 2; w++)
        __atomic_store_n(&t->last_io[w], __atomic_exchange_n(&t->next_io[w], 0, __ATOMIC_RELAXED), __ATOMIC_RELAXED);
    return st;
}

// Only the update's own buffers take the reads, in the places it would read them
// into; with pipeline_read off it reads nothing early.
zinf_status zinf_optim_tier_preread(zinf_optim_tier *t) {
    if (!t || t->c.device != ZINF_OFFLOAD_NVME || !t->c.pipeline_read || t->npreread) return ZINF_OK;
    for (int g = 0; g < t->nio && g < t->nsg; g++) {
        ZINF_CHECK(start_read(t, g, &t->io[g], false));
        t->npreread = g + 1;
    }
    return ZINF_OK;
}

// ---- speculation ----

// cpu: the update of sub-group g with the guessed hyperparameters, from its states where
// they live to written_at[g], its parameters held.
static zinf_status speculate_group(zinf_optim_tier *t, const zinf_optim_hparams *h, int g) {
    const subgroup *sg = &t->sg[g];
    ZINF_CHECK(zinf_event_sync(t->held_free)); // the last update's stores from held parameters passed
    for (size_t a = 0; a < sg->n; a += ZINF_OPTIM_SPECULATE_CHUNK) {
        size_t n = sg->n - a < ZINF_OPTIM_SPECULATE_CHUNK ? sg->n - a : ZINF_OPTIM_SPECULATE_CHUNK;
        float *to[NSTATES];
        const float *from[NSTATES];
        for (int s = 0; s < NSTATES; s++)
            to[s] = state_at(t, g, s, t->written_at[g]) + a, from[s] = state_at(t, g, s, t->spare_at[g]) + a;
        ZINF_CHECK(adam(t, h, sg->off + a, n, to, from, held_of(t, g) + a * t->out_es));
    }
    return ZINF_OK;
}

// A place of n elements in the spare area that no sub-group's states take (living
// there, or written there by a speculative update), the first; HOME when there is none.
// Under mu.
static size_t spare_place(const zinf_optim_tier *t, size_t n) {
    size_t at = 0;
    for (bool moved = true; moved;) {
        moved = false;
        for (int g = 0; g < t->nsg; g++) {
            size_t taken[2] = {t->spare_at[g], t->speculated[g] ? t->written_at[g] : HOME};
            for (int k = 0; k < 2; k++)
                if (taken[k] != HOME && taken[k] < at + n && at < taken[k] + t->sg[g].n)
                    at = taken[k] + t->sg[g].n, moved = true;
        }
    }
    return at + n <= t->c.speculate_elements ? at : HOME;
}

// Where sub-group g's speculative update may write, or its states' own place when
// there is no room for it: home for states living in the spare area, else a free place
// there; and no more held parameters than speculate_elements. Under mu.
static size_t write_place(const zinf_optim_tier *t, int g) {
    if (t->held_used + t->sg[g].n > t->c.speculate_elements) return t->spare_at[g];
    return t->spare_at[g] != HOME ? HOME : spare_place(t, t->sg[g].n);
}

// cpu: the first sub-group whose gradients are final, that is not speculated yet and
// that has room for its new states (at *to) and parameters. The first is the one the
// next forward needs soonest, and the one the backward finished last: the sub-groups
// the CPU leaves for after the step are the later ones, updated while the forward
// runs through the earlier (in the backward's order the forward would wait for every
// sub-group left, and then run the rest of itself with the CPU idle). None once every
// sub-group is final: the backward is over and the step's update follows at once, in
// place, where an update from elsewhere streams eight arrays, not five, and runs at
// 0.55-0.6x the rate on a 2-core machine (26M elements: 570 against 1000 M/s);
// started then, the one the forward needs first took 45 ms in place of 26, all of it
// on the step's path. Under mu.
static int next_final(const zinf_optim_tier *t, size_t *to) {
    int found = -1;
    bool all_final = true;
    for (int g = 0; g < t->nsg; g++) {
        if (t->sg_final[g] != t->sg_segments[g]) {
            all_final = false;
        } else if (found < 0 && !t->speculated[g]) {
            *to = write_place(t, g);
            if (*to != t->spare_at[g]) found = g;
        }
    }
    return all_final ? -1 : found;
}

// No more speculation. The thread's speculative work ends first; or, with `finish`, it
// ends on the thread before the next update there: the sub-group in flight (cpu), the
// sub-groups whose states are read (nvme: their reads are not wasted).
static void stop_speculating(zinf_optim_tier *t, bool finish) {
    pthread_mutex_lock(&t->mu);
    t->speculating = t->pending = false;
    t->finishing = finish;
    pthread_cond_broadcast(&t->cv); // a run waiting for final gradients
    while (!finish && t->running)
        pthread_cond_wait(&t->cv, &t->mu);
    pthread_mutex_unlock(&t->mu);
}

static int count_speculated(const zinf_optim_tier *t) {
    int n = 0;
    for (int g = 0; g < t->nsg; g++)
        n += t->speculated[g];
    return n;
}

zinf_status zinf_optim_tier_cancel(zinf_optim_tier *t, int *dropped) {
    if (dropped) *dropped = 0;
    if (!t || !t->c.speculate_elements) return ZINF_OK;
    stop_speculating(t, false);
    for (int g = 0; g < t->nsg; g++)
        if (t->speculated[g]) {
            t->speculated[g] = false;
            if (dropped) ++*dropped;
        }
    t->held_used = 0;
    return ZINF_OK;
}

// Every sub-group's states at home, where reads and writes of ranges find them (on
// nvme through the first IO buffer).
static zinf_status settle_home(zinf_optim_tier *t) {
    if (!t || !t->c.speculate_elements) return ZINF_OK;
    ZINF_CHECK(zinf_optim_tier_cancel(t, NULL));
    for (int g = 0; g < t->nsg; g++) {
        size_t at = t->spare_at[g];
        if (at == HOME) continue;
        if (t->c.device == ZINF_OFFLOAD_CPU) {
            for (int s = 0; s < NSTATES; s++)
                zinf_cpu_copy(t->c.cpu, state_at(t, g, s, HOME), state_at(t, g, s, at), t->sg[g].n);
        } else {
            io_buf *b = &t->io[0];
            ZINF_CHECK(drop_preread(t));
            ZINF_CHECK(swap_io(t, g, at, b, false, false));
            ZINF_CHECK(wait_tickets(t, b, false));
            ZINF_CHECK(swap_io(t, g, HOME, b, true, false));
            ZINF_CHECK(wait_tickets(t, b, false));
        }
        t->spare_at[g] = HOME;
    }
    return ZINF_OK;
}

zinf_status zinf_optim_tier_speculate(zinf_optim_tier *t, const zinf_optim_hparams *h) {
    if (!t || !t->c.speculate_elements) return ZINF_OK;
    ZINF_CHECK(zinf_optim_tier_cancel(t, NULL));
    // nvme: the speculation reads through the IO buffers. An early read (a backward of
    // gradient accumulation before the last) is waited for and dropped.
    ZINF_CHECK(drop_preread(t));
    pthread_mutex_lock(&t->mu);
    memset(t->sg_final, 0, (size_t)t->nsg * sizeof *t->sg_final);
    t->h_spec = *h;
    t->speculating = true;
    t->pending = t->c.device == ZINF_OFFLOAD_NVME;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    return ZINF_OK;
}

void zinf_optim_tier_grads_final(zinf_optim_tier *t, int seg) {
    if (!t || !t->c.speculate_elements || t->sg_of[seg] < 0) return;
    pthread_mutex_lock(&t->mu);
    if (t->speculating && ++t->sg_final[t->sg_of[seg]] == t->sg_segments[t->sg_of[seg]]) pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

static bool same_hparams(const zinf_optim_hparams *a, const zinf_optim_hparams *b) {
    return a->kind == b->kind && a->lr == b->lr && a->beta1 == b->beta1 && a->beta2 == b->beta2 && a->eps == b->eps &&
           a->weight_decay == b->weight_decay && a->bias_correction == b->bias_correction && a->step == b->step &&
           a->grad_scale == b->grad_scale;
}

void zinf_optim_tier_stop_speculating(zinf_optim_tier *t, const zinf_optim_hparams *h) {
    if (t && t->c.speculate_elements) stop_speculating(t, h && same_hparams(h, &t->h_spec));
}

// ---- the update in the background ----

// Sub-group g's new states' place (to) and its held parameters' taken: it counts as
// speculated from here, as it starts (a step's figures are taken before it ends), and
// is uncounted if dropped before it ends. Under mu.
static void reserve(zinf_optim_tier *t, int g, size_t to) {
    t->written_at[g] = to;
    t->held_at[g] = t->held_used;
    t->held_used += t->sg[g].n;
    t->speculated[g] = true;
    t->speculated_count++;
}

// cpu: one sub-group's speculative update, from under mu (held again on return).
static void speculate_next(zinf_optim_tier *t) {
    size_t to;
    int g = next_final(t, &to);
    zinf_optim_hparams h = t->h_spec;
    reserve(t, g, to);
    t->running = true;
    pthread_mutex_unlock(&t->mu);
    int64_t t0 = zinf_clock_ns();
    zinf_status st = speculate_group(t, &h, g);
    int64_t ns = zinf_clock_ns() - t0;
    if (st != ZINF_OK) zinf_latch_set(t->c.failure, st);
    pthread_mutex_lock(&t->mu);
    if (st != ZINF_OK) { // it left its states as they were
        t->speculated[g] = t->speculating = false;
        t->speculated_count--;
    }
    t->speculated_ns += ns;
    t->running = false;
    pthread_cond_broadcast(&t->cv);
}

// nvme: the next sub-group in backward order from *next that has room, reserved; -1
// when none is left. Under mu.
static int reserve_next(zinf_optim_tier *t, int *next) {
    for (; *next >= 0; --*next) {
        int g = *next;
        size_t to = write_place(t, g);
        if (to == t->spare_at[g]) continue;
        reserve(t, g, to);
        --*next;
        return g;
    }
    return -1;
}

// nvme: the sub-groups in backward order, each one's states read ahead into the next IO
// buffer while the backward still adds its gradients, updated in the buffer once they
// are final, and written behind to the other place; a sub-group without room is passed
// over. Ends when each is done or passed over, or when the speculation stops (after
// updating those read, when finishing): then the sub-groups read but not updated are
// not speculated, and after a failure none of this run's is. Its IO waits are not the
// update's (io_wait_ns). From under mu, held again on return.
static void speculate_swapped(zinf_optim_tier *t) {
    t->pending = false;
    t->running = true;
    zinf_optim_hparams h = t->h_spec;
    int ahead = 1 + t->c.pipeline_read; // buffers being read or computed at once
    int next = t->nsg - 1, read = 0, done = 0;
    pthread_mutex_unlock(&t->mu);
    zinf_status st = zinf_event_sync(t->held_free); // the last update's stores from held parameters passed
    pthread_mutex_lock(&t->mu);
    while (st == ZINF_OK && !t->stop && (t->speculating || (t->finishing && done < read))) {
        int g;
        while (st == ZINF_OK && t->speculating && read - done < ahead && (g = reserve_next(t, &next)) >= 0) {
            t->order[read] = g;
            io_buf *b = &t->io[read++ % t->nio];
            pthread_mutex_unlock(&t->mu);
            st = start_read(t, g, b, false);
            pthread_mutex_lock(&t->mu);
        }
        if (st != ZINF_OK || done == read) break;
        g = t->order[done];
        while (t->speculating && !t->stop && t->sg_final[g] != t->sg_segments[g])
            pthread_cond_wait(&t->cv, &t->mu);
        if (t->stop || !(t->speculating || t->finishing)) break; // finishing: every gradient is final
        pthread_mutex_unlock(&t->mu);
        int64_t t0 = zinf_clock_ns();
        io_buf *b = &t->io[done % t->nio];
        float *p = b->buf;
        const subgroup *sg = &t->sg[g];
        st = wait_tickets(t, b, false);
        if (st == ZINF_OK)
            st =
                adam(t, &h, sg->off, sg->n, (float *const[]){p, p + t->sg_max, p + 2 * t->sg_max}, NULL, held_of(t, g));
        if (st == ZINF_OK) st = swap_io(t, g, t->written_at[g], b, true, true);
        if (st == ZINF_OK && !t->c.pipeline_write) st = wait_tickets(t, b, false);
        int64_t ns = zinf_clock_ns() - t0;
        pthread_mutex_lock(&t->mu);
        t->speculated_ns += ns;
        done++;
    }
    pthread_mutex_unlock(&t->mu);
    for (int b = 0; b < t->nio; b++) {
        zinf_status s = wait_tickets(t, &t->io[b], false);
        if (st == ZINF_OK) st = s;
    }
    pthread_mutex_lock(&t->mu);
    for (int k = st == ZINF_OK ? done : 0; k < read; k++) {
        t->speculated[t->order[k]] = false;
        t->speculated_count--;
    }
    if (st != ZINF_OK) {
        zinf_latch_set(t->c.failure, st);
        t->speculating = false;
    }
    t->running = t->finishing = false;
    pthread_cond_broadcast(&t->cv);
}

// Whether the thread has speculative work: a final sub-group with room (cpu), or a run
// to start (nvme). Under mu.
static bool speculation_ready(const zinf_optim_tier *t) {
    size_t to;
    return t->speculating && (t->c.device == ZINF_OFFLOAD_NVME ? t->pending : next_final(t, &to) >= 0);
}

static void *thread_main(void *arg) {
    zinf_optim_tier *t = arg;
    pthread_mutex_lock(&t->mu);
    for (;;) {
        while (!t->job && !t->stop && !speculation_ready(t))
            pthread_cond_wait(&t->cv, &t->mu);
        if (t->stop) break;
        if (!t->job) {
            if (t->c.device == ZINF_OFFLOAD_NVME)
                speculate_swapped(t);
            else
                speculate_next(t);
            continue;
        }
        zinf_optim_hparams h = t->h;
        pthread_mutex_unlock(&t->mu);
        zinf_status st = zinf_optim_tier_update(t, &h);
        if (st != ZINF_OK) zinf_latch_set(t->c.failure, st);
        pthread_mutex_lock(&t->mu);
        t->job = false;
        t->published = t->nsg; // a failure also lets every waiter go on, to the latch
        pthread_cond_broadcast(&t->cv);
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

zinf_status zinf_optim_tier_start(zinf_optim_tier *t, const zinf_optim_hparams *h, int *redone) {
    *redone = 0;
    if (!t || !t->thread_up) return zinf_fail(ZINF_ERR_INTERNAL, "optimizer tier: no background thread to start");
    // With the guessed hyperparameters what is speculated stands, and what is being
    // finished ends on the thread before this update; else it ends now and is redone.
    pthread_mutex_lock(&t->mu);
    bool keep = same_hparams(h, &t->h_spec);
    pthread_mutex_unlock(&t->mu);
    if (t->c.speculate_elements) stop_speculating(t, keep);
    pthread_mutex_lock(&t->mu);
    t->keep = keep;
    if (!t->keep) *redone = count_speculated(t);
    t->h = *h;
    t->published = 0;
    t->job = t->unsettled = true;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
    return ZINF_OK;
}

void zinf_optim_tier_join(zinf_optim_tier *t) {
    if (!t || !t->thread_up) return;
    pthread_mutex_lock(&t->mu);
    while (t->job)
        pthread_cond_wait(&t->cv, &t->mu);
    pthread_mutex_unlock(&t->mu);
}

void zinf_optim_tier_settled(zinf_optim_tier *t) {
    if (t) t->unsettled = false;
}

bool zinf_optim_tier_updated(zinf_optim_tier *t, int seg) {
    if (!t || !t->thread_up || t->sg_of[seg] < 0) return true;
    pthread_mutex_lock(&t->mu);
    bool done = !t->job || t->published > t->sg_of[seg];
    pthread_mutex_unlock(&t->mu);
    return done;
}

zinf_status zinf_optim_tier_wait_updated(zinf_optim_tier *t, int seg, zinf_stream *s) {
    if (!t || !t->thread_up || !t->unsettled || t->sg_of[seg] < 0) return ZINF_OK;
    int g = t->sg_of[seg];
    pthread_mutex_lock(&t->mu);
    while (t->job && t->published <= g)
        pthread_cond_wait(&t->cv, &t->mu);
    pthread_mutex_unlock(&t->mu);
    return s ? zinf_stream_wait_event(s, t->sg_done[g]) : ZINF_OK;
}

void zinf_optim_tier_get_stats(const zinf_optim_tier *t, zinf_optim_tier_stats *out) {
    memset(out, 0, sizeof *out);
    if (!t) return;
    *out = (zinf_optim_tier_stats){.subgroups = t->nsg,
                                   .subgroup_max = t->sg_max,
                                   .host_bytes = t->host_bytes,
                                   .pinned_bytes = t->pinned_bytes,
                                   .output_bytes = t->output_bytes,
                                   .swap_buffer_bytes = t->swap_buffer_bytes,
                                   .speculation_bytes = t->speculation_bytes,
                                   .nvme_bytes = t->swap ? (int64_t)zinf_swap_bytes(t->swap) : 0};
}

void zinf_optim_tier_take_times(zinf_optim_tier *t, zinf_optim_tier_times *out) {
    memset(out, 0, sizeof *out);
    if (!t) return;
    pthread_mutex_lock(&t->mu);
    *out = (zinf_optim_tier_times){.update_ns = t->update_ns,
                                   .io_wait_ns = t->io_wait_ns,
                                   .speculated_ns = t->speculated_ns,
                                   .speculated = t->speculated_count};
    pthread_mutex_lock(&t->io_mu);
    for (int w = 0; w < 2; w++) {
        out->update_io_bytes[w] = __atomic_exchange_n(&t->last_io[w], 0, __ATOMIC_RELAXED);
        out->issued_io_bytes[w] = __atomic_exchange_n(&t->issued_io[w], 0, __ATOMIC_RELAXED);
    }
    if (t->swap) {
        zinf_aio_get_stats(t->c.swap.aio, &out->aio);
        out->have_aio = true;
    }
    pthread_mutex_unlock(&t->io_mu);
    t->update_ns = t->io_wait_ns = t->speculated_ns = 0;
    t->speculated_count = 0;
    pthread_mutex_unlock(&t->mu);
}
