// The sim backend: a GPU's time and memory, modeled (zinf_gpu.h). Streams are those of
// queue.h; each keeps a cursor, the modeled time its last work ends. A task starts at
// the later of the cursor and its submission, and when it needs an engine (compute, the
// PCIe link each way) at the later of that and the engine's own free time, so streams
// share an engine one thing at a time. The thread then sleeps until the task's end on
// the monotonic clock: events, host functions and syncs happen when they would on the
// GPU, while the time a late-woken thread loses is not passed on to the queued work
// behind it.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <time.h>

#include "../queue.h"
#include "sim.h"

enum { ENG_COMPUTE, ENG_H2D, ENG_D2H, ENG_LINK, ENG_COUNT };

typedef struct sim_engine {
    int64_t free_at; // when the work it has taken ends
    int64_t busy_ns; // the sum of that work's time
} sim_engine;

typedef struct pinned_range {
    uintptr_t lo, hi;
} pinned_range;

typedef struct sim_device {
    zinf_sim_rates r;
    bool paced; // streams sleep until each task's modeled end (not in virtual time)
    pthread_mutex_t mu; // guards everything below
    sim_engine eng[ENG_COUNT];
    pinned_range *pins; // registered host memory, which copies run from at the pinned rate
    size_t npins, cap;
} sim_device;

typedef struct sim_stream {
    sim_device *sd;
    int64_t cursor;
    bool slack_set;
} sim_stream;

static void sleep_until(const sim_stream *ss, int64_t ns) {
    if (!ss->sd->paced) return;
    struct timespec t = {.tv_sec = ns / 1000000000, .tv_nsec = ns % 1000000000};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, NULL) == EINTR) {
    }
}

// Host work that started at start has just ended (in virtual time it took none).
static int64_t after(int64_t start) {
    int64_t now = zinf_clock_ns();
    return now > start ? now : start;
}

static int64_t ns_of(double seconds) { return (int64_t)(seconds * 1e9 + 0.5); }

// Take engine e for dur_ns from start at the earliest; the stream's cursor moves to its end.
static void occupy(sim_stream *ss, int e, int64_t start, int64_t dur_ns) {
    sim_device *sd = ss->sd;
    pthread_mutex_lock(&sd->mu);
    sim_engine *g = &sd->eng[e];
    if (g->free_at > start) start = g->free_at;
    g->free_at = start + dur_ns;
    g->busy_ns += dur_ns;
    pthread_mutex_unlock(&sd->mu);
    ss->cursor = start + dur_ns;
}

static bool is_pinned(sim_device *sd, const void *p, size_t bytes) {
    uintptr_t lo = (uintptr_t)p, hi = lo + bytes;
    bool pinned = false;
    pthread_mutex_lock(&sd->mu);
    for (size_t i = 0; i < sd->npins && !pinned; i++)
        pinned = sd->pins[i].lo <= lo && hi <= sd->pins[i].hi;
    pthread_mutex_unlock(&sd->mu);
    return pinned;
}

static zinf_status run_task(void *own, const task *t) {
    sim_stream *ss = own;
    const zinf_sim_rates *r = &ss->sd->r;
    if (!ss->slack_set) { // on the stream's thread: it wakes at modeled times, and the
        // default 50 us timer slack would blur kernels of a few microseconds
        prctl(PR_SET_TIMERSLACK, 1000UL);
        ss->slack_set = true;
    }
    int64_t start = ss->cursor > t->submitted_ns ? ss->cursor : t->submitted_ns;
    switch (t->kind) {
    case TASK_OP:
        occupy(ss, t->u.op.kind == OP_COLLECTIVE ? ENG_LINK : ENG_COMPUTE, start, ns_of(sim_op_seconds(r, &t->u.op)));
        break;
    case TASK_COPY: {
        size_t n = t->u.mem.bytes;
        switch (t->u.mem.kind) {
        case ZINF_COPY_H2D: occupy(ss, ENG_H2D, start, ns_of(zinf_sim_copy_s(r, (double)n, is_pinned(ss->sd, t->u.mem.src, n)))); break;
        case ZINF_COPY_D2H: occupy(ss, ENG_D2H, start, ns_of(zinf_sim_copy_s(r, (double)n, is_pinned(ss->sd, t->u.mem.dst, n)))); break;
        case ZINF_COPY_D2D: occupy(ss, ENG_COMPUTE, start, ns_of(zinf_sim_memory_s(r, 2.0 * (double)n))); break;
        case ZINF_COPY_H2H: // real memory on both sides: a real copy, in its place in the stream
            sleep_until(ss, start);
            memcpy(t->u.mem.dst, t->u.mem.src, n);
            ss->cursor = after(start);
            return ZINF_OK;
        }
        break;
    }
    case TASK_MEMSET: occupy(ss, ENG_COMPUTE, start, ns_of(zinf_sim_memory_s(r, (double)t->u.mem.bytes))); break;
    case TASK_RECORD:
        sleep_until(ss, start);
        ss->cursor = start;
        queue_event_reach(t->u.ev.e, t->u.ev.ticket, start);
        return ZINF_OK;
    case TASK_WAIT: {
        int64_t at = queue_event_wait_for(t->u.ev.e, t->u.ev.ticket);
        ss->cursor = start > at ? start : at;
        return ZINF_OK;
    }
    case TASK_FN:
        sleep_until(ss, start);
        t->u.fn.fn(t->u.fn.arg);
        ss->cursor = after(start);
        return ZINF_OK;
    case TASK_STOP: return ZINF_OK;
    }
    sleep_until(ss, ss->cursor);
    return ZINF_OK;
}

static zinf_status s_stream_create(zinf_stream *s) {
    static const queue_runner runner = {run_task, free};
    sim_stream *ss = calloc(1, sizeof *ss);
    if (!ss) return zinf_fail(ZINF_ERR_NOMEM, "sim stream: out of memory");
    ss->sd = s->dev->impl;
    zinf_status st = queue_stream_create(s, &runner, ss);
    if (st != ZINF_OK) free(ss);
    return st;
}

// ---- device and memory ----

zinf_status zinf_device_sim_rates(const zinf_device *d, zinf_sim_rates *out) {
    if (d->be != &zinf_sim_backend)
        return zinf_fail(ZINF_ERR_UNSUPPORTED, "sim rates: %s is not a simulated device", d->caps.name);
    *out = ((const sim_device *)d->impl)->r;
    return ZINF_OK;
}

zinf_status zinf_sim_collective(zinf_stream *s, double seconds) {
    if (s->dev->be != &zinf_sim_backend)
        return zinf_fail(ZINF_ERR_UNSUPPORTED, "sim collective: %s is not a simulated device", s->dev->caps.name);
    op_record op = {.kind = OP_COLLECTIVE, .u.seconds = seconds > 0 ? seconds : 0};
    return queue_launch(s, &op);
}

static zinf_status s_describe(const zinf_device_params *p, char name[96], uint64_t *memory) {
    zinf_sim_rates r;
    zinf_sim_rates_of(&p->sim, &r);
    snprintf(name, 96, "simulated %s", r.name);
    *memory = r.memory;
    return ZINF_OK;
}

static zinf_status s_open(zinf_device *d) {
    sim_device *sd = calloc(1, sizeof *sd);
    if (!sd) return zinf_fail(ZINF_ERR_NOMEM, "sim device: out of memory");
    zinf_sim_rates_of(&d->params.sim, &sd->r);
    sd->r.attention = d->params.attention;
    sd->paced = !d->params.sim.virtual_time;
    pthread_mutex_init(&sd->mu, NULL);
    d->impl = sd;
    d->caps.backend = ZINF_BACKEND_SIM;
    d->caps.index = -1;
    s_describe(&d->params, d->caps.name, &d->caps.total_memory);
    d->caps.async_copy = true;
    d->caps.bf16_tensor = true;
    return ZINF_OK;
}

static void s_close(zinf_device *d) {
    sim_device *sd = d->impl;
    pthread_mutex_destroy(&sd->mu);
    free(sd->pins);
    free(sd);
}

// Address space only: reserved, never backed, so an 80 GB device fits in any machine,
// and a host access to device memory (a bug on a GPU too) faults at once.
static zinf_status s_mem_alloc(zinf_device *d, size_t bytes, void **out) {
    (void)d;
    void *p = mmap(NULL, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        char sz[32];
        return zinf_fail_errno(errno, "sim device: cannot reserve %s of address space",
                               zinf_size_format(bytes, sz, sizeof sz));
    }
    *out = p;
    return ZINF_OK;
}

static void s_mem_free(zinf_device *d, void *p, size_t bytes, bool unused) {
    (void)d, (void)unused;
    munmap(p, bytes);
}

// Host memory is real: it is locked as the host backend locks it, and the device
// remembers which ranges copy at the pinned rate.
static zinf_status s_host_register(zinf_device *d, void *p, size_t bytes) {
    sim_device *sd = d->impl;
    ZINF_CHECK(zinf_host_backend.host_register(d, p, bytes));
    pthread_mutex_lock(&sd->mu);
    if (sd->npins == sd->cap) {
        size_t cap = sd->cap ? 2 * sd->cap : 16;
        pinned_range *n = realloc(sd->pins, cap * sizeof *n);
        if (!n) {
            pthread_mutex_unlock(&sd->mu);
            zinf_host_backend.host_unregister(d, p, bytes);
            return zinf_fail(ZINF_ERR_NOMEM, "sim device: out of memory for its pinned ranges");
        }
        sd->pins = n, sd->cap = cap;
    }
    sd->pins[sd->npins++] = (pinned_range){(uintptr_t)p, (uintptr_t)p + bytes};
    pthread_mutex_unlock(&sd->mu);
    return ZINF_OK;
}

static void s_host_unregister(zinf_device *d, void *p, size_t bytes) {
    sim_device *sd = d->impl;
    zinf_host_backend.host_unregister(d, p, bytes);
    pthread_mutex_lock(&sd->mu);
    for (size_t i = 0; i < sd->npins; i++)
        if (sd->pins[i].lo == (uintptr_t)p) {
            sd->pins[i] = sd->pins[--sd->npins];
            break;
        }
    pthread_mutex_unlock(&sd->mu);
}

static void s_busy(zinf_device *d, zinf_device_busy *out) {
    sim_device *sd = d->impl;
    pthread_mutex_lock(&sd->mu);
    out->compute_s = 1e-9 * (double)sd->eng[ENG_COMPUTE].busy_ns;
    out->h2d_s = 1e-9 * (double)sd->eng[ENG_H2D].busy_ns;
    out->d2h_s = 1e-9 * (double)sd->eng[ENG_D2H].busy_ns;
    out->link_s = 1e-9 * (double)sd->eng[ENG_LINK].busy_ns;
    pthread_mutex_unlock(&sd->mu);
}

const backend_ops zinf_sim_backend = {
    .name = "sim",
    .describe = s_describe,
    .open = s_open,
    .close = s_close,
    .mem_alloc = s_mem_alloc,
    .mem_free = s_mem_free,
    .host_register = s_host_register,
    .host_unregister = s_host_unregister,
    .stream_create = s_stream_create,
    QUEUE_BACKEND_OPS,
    .busy = s_busy,
};
