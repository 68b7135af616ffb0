// The communicator's front end: create/destroy, argument checks, the single-rank
// paths, and the deterministic sums. A backend only moves bytes (alltoall, allgather,
// bcast, barrier); every sum is formed here, x_0 + x_1 + ... + x_{W-1} left to right in
// the element's type, so all ranks get the same bits as a sequential sum over ranks.
// reduce-scatter = alltoall of blocks + local sum; allreduce = reduce-scatter +
// allgather (the bandwidth-optimal pair, as in NCCL's ring, without its order drift).
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "internal.h"

// ---- create / destroy ----

// This rank's place among the ranks on its host (which GPU it takes).
static void find_local(zinf_comm *c) {
    c->local_rank = c->local_size = 0;
    for (int r = 0; r < c->size; r++) {
        if (c->host_of[r] != c->host_of[c->rank]) continue;
        c->local_size++;
        if (r < c->rank) c->local_rank++;
    }
}

// Every rank's host (by host name, numbered in order of first appearance) and node: its
// host, or with ZINF_RANKS_PER_NODE=K every K consecutive ranks. An exchange bounded
// like every collective, where MPI_Comm_split_type would block without a deadline.
static zinf_status find_nodes(zinf_comm *c) {
    enum { HOST = 256 };
    const size_t W = (size_t)c->size;
    char *names = calloc(W, HOST), me[HOST] = {0};
    int *host_of = malloc(W * sizeof *host_of), *node_of = malloc(W * sizeof *node_of);
    zinf_status st = names && host_of && node_of
                         ? ZINF_OK
                         : zinf_fail(ZINF_ERR_NOMEM, "comm: out of memory for %d host names", c->size);
    if (gethostname(me, HOST - 1) != 0) snprintf(me, sizeof me, "?");
    // Not counted: the maps the counts need are what this exchange makes.
    if (st == ZINF_OK) st = W > 1 ? zinf_comm_allgather(c, me, names, HOST) : ZINF_OK;
    if (st == ZINF_OK && W == 1) memcpy(names, me, HOST);
    int hosts = 0;
    for (size_t r = 0; st == ZINF_OK && r < W; r++) {
        size_t q = 0;
        while (strcmp(names + q * HOST, names + r * HOST) != 0)
            q++;
        host_of[r] = q == r ? hosts++ : host_of[q];
    }
    free(names);
    c->host_of = host_of, c->node_of = node_of;
    ZINF_CHECK(st);
    find_local(c);
    const char *knob = zinf_env(ZINF_ENV_RANKS_PER_NODE);
    long k = 0;
    if (knob) {
        char *end;
        k = strtol(knob, &end, 10);
        if (end == knob || *end || k < 1 || (k < c->size && c->size % k != 0))
            return zinf_fail(ZINF_ERR_INVAL,
                             "%s: \"%s\" is not a number of ranks >= 1 that divides the %d ranks (or is at least that "
                             "many: one node)",
                             zinf_env_name(ZINF_ENV_RANKS_PER_NODE), knob, c->size);
        if (k > c->size) k = c->size;
    }
    for (int r = 0; r < c->size; r++)
        node_of[r] = k ? r / (int)k : host_of[r];
    c->nodes = k ? c->size / (int)k : hosts;
    return ZINF_OK;
}

zinf_status zinf_comm_create(zinf_comm **out, zinf_comm_kind kind, double timeout_s) {
    if (!out) return zinf_fail(ZINF_ERR_INVAL, "comm: out is NULL");
    *out = NULL;
    if (!(timeout_s >= 0) || isinf(timeout_s))
        return zinf_fail(ZINF_ERR_INVAL, "comm: timeout_s %g is not a number of seconds >= 0 (0: %g s)", timeout_s,
                         COMM_DEFAULT_TIMEOUT_S);
    if (kind != ZINF_COMM_AUTO && kind != ZINF_COMM_SINGLE && kind != ZINF_COMM_MPI)
        return zinf_fail(ZINF_ERR_INVAL, "comm: kind %d is not auto, single or mpi", (int)kind);
    if (kind == ZINF_COMM_AUTO) {
        int rank, world;
        zinf_launcher_rank(&rank, &world);
#ifdef ZINF_HAVE_MPI
        kind = world > 1 ? ZINF_COMM_MPI : ZINF_COMM_SINGLE;
#else
        // Each rank would train alone on its own data: say so loudly, it is rarely meant.
        if (world > 1)
            ZINF_LOG_WARN("comm: the launcher started %d ranks but this build has no MPI; rank %d runs alone", world,
                          rank);
        kind = ZINF_COMM_SINGLE;
#endif
    }

    // 0 takes ZINF_COMM_TIMEOUT, so every program that embeds the engine honours it.
    const char *knob = zinf_env(ZINF_ENV_COMM_TIMEOUT);
    if (timeout_s == 0 && knob) {
        char *end;
        timeout_s = strtod(knob, &end);
        if (end == knob || *end || !(timeout_s > 0) || isinf(timeout_s))
            return zinf_fail(ZINF_ERR_INVAL, "%s: \"%s\" is not a number of seconds > 0", zinf_env_name(ZINF_ENV_COMM_TIMEOUT),
                             knob);
    }
    zinf_comm *c = calloc(1, sizeof *c);
    if (!c) return zinf_fail(ZINF_ERR_NOMEM, "comm: out of memory for the communicator");
    c->rank = 0;
    c->size = 1;
    c->timeout_s = timeout_s > 0 ? timeout_s : COMM_DEFAULT_TIMEOUT_S;
    c->chunk_bytes = COMM_DEFAULT_CHUNK;
    c->scratch_max = COMM_DEFAULT_SCRATCH;
    pthread_mutex_init(&c->lock, NULL);
    if (kind == ZINF_COMM_MPI) {
        c->ops = &zinf_comm_mpi_ops;
        zinf_status st = c->ops->open(c);
        if (st != ZINF_OK) {
            pthread_mutex_destroy(&c->lock);
            free(c);
            return st;
        }
        zinf_log_set_rank(c->rank, c->size);
    }
    c->counts = &c->own;
    zinf_status st = find_nodes(c);
    if (st != ZINF_OK) {
        zinf_comm_destroy(c);
        return st;
    }
    *out = c;
    return ZINF_OK;
}

// After a failure the timed-out transfer stays pending in MPI, pointing at the
// caller's buffers and the scratch; nothing drives MPI for this communicator again,
// and the process is expected to exit, so both are freed as usual.
void zinf_comm_destroy(zinf_comm *c) {
    if (!c) return;
    zinf_comm_detach_device(c);
    if (c->ops) c->ops->close(c);
    free(c->scratch);
    comm_log_free(c->own_log);
    free(c->host_of), free(c->node_of);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

int zinf_comm_rank(const zinf_comm *c) { return c ? c->rank : 0; }
int zinf_comm_size(const zinf_comm *c) { return c ? c->size : 1; }
int zinf_comm_local_rank(const zinf_comm *c) { return c ? c->local_rank : 0; }
int zinf_comm_local_size(const zinf_comm *c) { return c ? c->local_size : 1; }
int zinf_comm_node(const zinf_comm *c) { return c && c->node_of ? c->node_of[c->rank] : 0; }
int zinf_comm_nodes(const zinf_comm *c) { return c && c->node_of ? c->nodes : 1; }
int zinf_comm_node_of(const zinf_comm *c, int rank) {
    return c && c->node_of && rank >= 0 && rank < c->size ? c->node_of[rank] : -1;
}

void zinf_comm_get_bytes(const zinf_comm *c, zinf_comm_bytes *out) {
    *out = (zinf_comm_bytes){0};
    if (!c) return;
    out->intra = atomic_load(&c->counts->intra);
    out->inter = atomic_load(&c->counts->inter);
}

zinf_comm_bytes zinf_comm_count(zinf_comm *c, int from, size_t bytes) {
    zinf_comm_bytes added = {0};
    if (!c->node_of) return added; // creation's own exchange, before the maps exist
    for (int r = from < 0 ? 0 : from; r < c->size && bytes; r++) {
        if (r == c->rank) continue;
        bool intra = c->node_of[r] == c->node_of[c->rank];
        atomic_fetch_add(intra ? &c->counts->intra : &c->counts->inter, (int64_t)bytes);
        *(intra ? &added.intra : &added.inter) += (int64_t)bytes;
        if (from >= 0) break;
    }
    return added;
}
const char *zinf_comm_name(const zinf_comm *c) {
    return !c ? "none" : c->nccl ? "nccl" : c->sim ? "sim" : c->ops ? c->ops->name : "single";
}

// ---- helpers ----

static const char *name(const zinf_comm *c) { return c->ops ? c->ops->name : "single"; }

// Take the communicator for one collective; a failed one refuses at once, since the
// ranks no longer agree on which call comes next.
static zinf_status enter(zinf_comm *c, const char *op) {
    pthread_mutex_lock(&c->lock);
    if (!c->failed) return ZINF_OK;
    pthread_mutex_unlock(&c->lock);
    return zinf_fail(ZINF_ERR_COMM, "comm %s: %s refused: this communicator failed earlier: %s", name(c), op,
                     c->failure);
}

static zinf_status leave(zinf_comm *c, zinf_status st) {
    pthread_mutex_unlock(&c->lock);
    return st;
}

// A backend failure is final (see enter); keep its text for the refusals.
static zinf_status moved(zinf_comm *c, zinf_status st) {
    if (st != ZINF_OK && !c->failed) {
        c->failed = true;
        snprintf(c->failure, sizeof c->failure, "%s", zinf_last_error());
    }
    return st;
}

// The backend's moves, each counted once it has completed.
static zinf_status alltoall(zinf_comm *c, const char *op, const void *in, size_t in_stride, void *out, size_t len) {
    zinf_status st = moved(c, c->ops->alltoall(c, op, in, in_stride, out, len));
    if (st == ZINF_OK) zinf_comm_count(c, -1, len);
    return st;
}

static zinf_status allgather(zinf_comm *c, const char *op, const void *in, void *out, size_t out_stride, size_t len) {
    zinf_status st = moved(c, c->ops->allgather(c, op, in, out, out_stride, len));
    if (st == ZINF_OK) zinf_comm_count(c, -1, len);
    return st;
}

static zinf_status bcast(zinf_comm *c, const char *op, void *buf, size_t len, int root) {
    zinf_status st = moved(c, c->ops->bcast(c, op, buf, len, root));
    if (st == ZINF_OK && c->rank != root) zinf_comm_count(c, root, len);
    return st;
}

// Scratch for the reduce paths, kept between calls (about scratch_max at most). A
// failed communicator refuses every call, so scratch a timed-out transfer points into
// is never reallocated under it.
static zinf_status scratch(zinf_comm *c, const char *op, size_t bytes, void **out) {
    if (bytes > c->scratch_bytes) {
        free(c->scratch);
        c->scratch_bytes = 0;
        c->scratch = malloc(bytes);
        if (!c->scratch) {
            char sz[32];
            return zinf_fail(ZINF_ERR_NOMEM, "comm %s: %s: out of memory for %s of scratch", name(c), op,
                             zinf_size_format(bytes, sz, sizeof sz));
        }
        c->scratch_bytes = bytes;
    }
    *out = c->scratch;
    return ZINF_OK;
}

// Elements each rank contributes per round of a reduce path: W of them fill scratch.
static size_t per_round(const zinf_comm *c, size_t elem) {
    size_t s = c->scratch_max / ((size_t)c->size * elem);
    if (s > c->chunk_bytes / elem) s = c->chunk_bytes / elem;
    return s ? s : 1;
}

static size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

static bool overlap(const void *a, size_t an, const void *b, size_t bn) {
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return an && bn && x < y + bn && y < x + an;
}

// dst[j] = src[j] + src[m + j] + ... + src[(w - 1) * m + j], left to right.
static void sum_f32(float *dst, const float *src, size_t m, int w) {
    memcpy(dst, src, m * sizeof *dst);
    for (int k = 1; k < w; k++) {
        const float *s = src + (size_t)k * m;
        for (size_t j = 0; j < m; j++)
            dst[j] += s[j];
    }
}

static void sum_f64(double *dst, const double *src, size_t m, int w) {
    memcpy(dst, src, m * sizeof *dst);
    for (int k = 1; k < w; k++) {
        const double *s = src + (size_t)k * m;
        for (size_t j = 0; j < m; j++)
            dst[j] += s[j];
    }
}

// The comms logger's view of a host collective: its start (0: not logged, or no
// backend: one rank's copies move nothing), then its completion.
static double log_start(const zinf_comm *c, zinf_comm_op op) {
    return c->ops && comm_log_wants(c, op) ? zinf_clock_s() : 0;
}

static zinf_status logged(zinf_comm *c, zinf_comm_op op, size_t bytes, double t0, zinf_status st) {
    if (t0 > 0 && st == ZINF_OK) comm_log_record(c, op, bytes, name(c), zinf_clock_s() - t0);
    return st;
}

#define NO_COMM(op) zinf_fail(ZINF_ERR_INVAL, "comm %s: c is NULL", op)
#define NULL_ARG(c, op, arg, n)                                                                                        \
    zinf_fail(ZINF_ERR_INVAL, "comm %s: %s: " #arg " is NULL with " #n " %zu", name(c), op, (size_t)(n))

// ---- collectives ----

zinf_status zinf_comm_reduce_scatter_f32(zinf_comm *c, const float *in, float *out, size_t count) {
    static const char op[] = "reduce_scatter_f32";
    if (!c) return NO_COMM(op);
    const size_t W = (size_t)c->size;
    if (count > SIZE_MAX / sizeof(float) / W)
        return zinf_fail(ZINF_ERR_INVAL, "comm %s: %s: count %zu for %zu ranks overflows", name(c), op, count, W);
    if (count && !in) return NULL_ARG(c, op, in, count);
    if (count && !out) return NULL_ARG(c, op, out, count);
    // out may be this rank's block of in: each round overwrites only what it has sent.
    if (count && out != in + (size_t)c->rank * count && overlap(in, W * count * 4, out, count * 4))
        return zinf_fail(ZINF_ERR_INVAL, "comm %s: %s: out overlaps in without being in + rank * count", name(c), op);
    ZINF_CHECK(enter(c, op));
    zinf_status st = ZINF_OK;
    if (!c->ops) {
        if (count && out != in) memcpy(out, in, count * sizeof *out);
        return leave(c, st);
    }
    double t0 = log_start(c, ZINF_COMM_REDUCE_SCATTER);
    const size_t s = per_round(c, sizeof(float));
    float *sc = NULL;
    if (count) st = scratch(c, op, W * min_size(s, count) * sizeof(float), (void **)&sc);
    for (size_t o = 0, m; st == ZINF_OK && o < count; o += m) {
        m = min_size(s, count - o);
        st = alltoall(c, op, in + o, count * sizeof(float), sc, m * sizeof(float));
        if (st == ZINF_OK) sum_f32(out + o, sc, m, c->size);
    }
    return logged(c, ZINF_COMM_REDUCE_SCATTER, count * sizeof(float), t0, leave(c, st));
}

// Rounds of W blocks of m floats: rank r sums block r, then all gather the sums in
// place. The n % W floats left after the last whole round are gathered and summed by
// everyone, which costs one small round instead of a padded copy of buf.
zinf_status zinf_comm_allreduce_f32(zinf_comm *c, float *buf, size_t n) {
    static const char op[] = "allreduce_f32";
    if (!c) return NO_COMM(op);
    if (n && !buf) return NULL_ARG(c, op, buf, n);
    if (n > SIZE_MAX / sizeof(float) / (size_t)c->size)
        return zinf_fail(ZINF_ERR_INVAL, "comm %s: %s: n %zu is too large", name(c), op, n);
    ZINF_CHECK(enter(c, op));
    zinf_status st = ZINF_OK;
    if (!c->ops || n == 0) return leave(c, st);
    double t0 = log_start(c, ZINF_COMM_ALL_REDUCE);
    const size_t W = (size_t)c->size, s = per_round(c, sizeof(float)), tail = n % W;
    size_t most = min_size(s, n / W);
    if (tail > most) most = tail;
    float *sc;
    st = scratch(c, op, W * most * sizeof(float), (void **)&sc);
    size_t o = 0;
    while (st == ZINF_OK && n - o >= W) {
        size_t m = min_size(s, (n - o) / W), len = m * sizeof(float);
        st = alltoall(c, op, buf + o, len, sc, len);
        if (st != ZINF_OK) break;
        // The alltoall has completed, so this rank's block of buf may take the sum.
        sum_f32(buf + o + (size_t)c->rank * m, sc, m, c->size);
        st = allgather(c, op, NULL, buf + o, len, len);
        o += m * W;
    }
    if (st == ZINF_OK && o < n) {
        size_t len = (n - o) * sizeof(float);
        st = allgather(c, op, buf + o, sc, len, len);
        if (st == ZINF_OK) sum_f32(buf + o, sc, n - o, c->size);
    }
    return logged(c, ZINF_COMM_ALL_REDUCE, n * sizeof(float), t0, leave(c, st));
}

// Small arrays (losses, norms, flags): gather everything and sum locally.
zinf_status zinf_comm_allreduce_f64(zinf_comm *c, double *buf, size_t n) {
    static const char op[] = "allreduce_f64";
    if (!c) return NO_COMM(op);
    if (n && !buf) return NULL_ARG(c, op, buf, n);
    ZINF_CHECK(enter(c, op));
    zinf_status st = ZINF_OK;
    if (!c->ops || n == 0) return leave(c, st);
    double t0 = log_start(c, ZINF_COMM_ALL_REDUCE);
    const size_t s = per_round(c, sizeof(double));
    double *sc;
    st = scratch(c, op, (size_t)c->size * min_size(s, n) * sizeof(double), (void **)&sc);
    for (size_t o = 0, m; st == ZINF_OK && o < n; o += m) {
        m = min_size(s, n - o);
        size_t len = m * sizeof(double);
        st = allgather(c, op, buf + o, sc, len, len);
        if (st == ZINF_OK) sum_f64(buf + o, sc, m, c->size);
    }
    return logged(c, ZINF_COMM_ALL_REDUCE, n * sizeof(double), t0, leave(c, st));
}

// What every call moving W blocks of `bytes` checks first.
static zinf_status check_blocks(const zinf_comm *c, const char *op, const void *in, const void *out, size_t bytes) {
    if (!c) return NO_COMM(op);
    if (bytes > SIZE_MAX / (size_t)c->size)
        return zinf_fail(ZINF_ERR_INVAL, "comm %s: %s: %zu bytes for %d ranks overflows", name(c), op, bytes, c->size);
    if (bytes && !in) return NULL_ARG(c, op, in, bytes);
    if (bytes && !out) return NULL_ARG(c, op, out, bytes);
    return ZINF_OK;
}

zinf_status zinf_comm_allgather(zinf_comm *c, const void *in, void *out, size_t bytes) {
    static const char op[] = "allgather";
    ZINF_CHECK(check_blocks(c, op, in, out, bytes));
    const size_t W = (size_t)c->size;
    bool in_place = bytes && in == (const char *)out + (size_t)c->rank * bytes;
    if (!in_place && overlap(in, bytes, out, W * bytes))
        return zinf_fail(ZINF_ERR_INVAL, "comm %s: %s: in overlaps out without being out + rank * bytes", name(c), op);
    ZINF_CHECK(enter(c, op));
    zinf_status st = ZINF_OK;
    if (!c->ops) {
        if (bytes && !in_place) memcpy(out, in, bytes);
        return leave(c, st);
    }
    double t0 = log_start(c, ZINF_COMM_ALL_GATHER);
    for (size_t o = 0, len; st == ZINF_OK && o < bytes; o += len) {
        len = min_size(c->chunk_bytes, bytes - o);
        st = allgather(c, op, in_place ? NULL : (const char *)in + o, (char *)out + o, bytes, len);
    }
    return logged(c, ZINF_COMM_ALL_GATHER, bytes, t0, leave(c, st));
}

// Rounds of at most chunk_bytes per rank through the scratch, each block then put in
// its place (the backend's output is one block per rank, back to back).
zinf_status zinf_comm_alltoall(zinf_comm *c, const void *in, void *out, size_t bytes) {
    static const char op[] = "alltoall";
    ZINF_CHECK(check_blocks(c, op, in, out, bytes));
    const size_t W = (size_t)c->size;
    if (overlap(in, W * bytes, out, W * bytes))
        return zinf_fail(ZINF_ERR_INVAL, "comm %s: %s: in and out overlap", name(c), op);
    ZINF_CHECK(enter(c, op));
    zinf_status st = ZINF_OK;
    if (!c->ops) {
        if (bytes) memcpy(out, in, bytes);
        return leave(c, st);
    }
    double t0 = log_start(c, ZINF_COMM_ALL_TO_ALL);
    const size_t s = per_round(c, 1);
    char *sc = NULL;
    if (bytes) st = scratch(c, op, W * min_size(s, bytes), (void **)&sc);
    for (size_t o = 0, len; st == ZINF_OK && o < bytes; o += len) {
        len = min_size(s, bytes - o);
        st = alltoall(c, op, (const char *)in + o, bytes, sc, len);
        for (size_t r = 0; st == ZINF_OK && r < W; r++)
            memcpy((char *)out + r * bytes + o, sc + r * len, len);
    }
    return logged(c, ZINF_COMM_ALL_TO_ALL, W * bytes, t0, leave(c, st));
}

zinf_status zinf_comm_broadcast(zinf_comm *c, void *buf, size_t bytes, int root) {
    static const char op[] = "broadcast";
    if (!c) return NO_COMM(op);
    if (root < 0 || root >= c->size)
        return zinf_fail(ZINF_ERR_INVAL, "comm %s: %s: root %d is not a rank (0..%d)", name(c), op, root, c->size - 1);
    if (bytes && !buf) return NULL_ARG(c, op, buf, bytes);
    ZINF_CHECK(enter(c, op));
    zinf_status st = ZINF_OK;
    double t0 = log_start(c, ZINF_COMM_BROADCAST);
    for (size_t o = 0, len; c->ops && st == ZINF_OK && o < bytes; o += len) {
        len = min_size(c->chunk_bytes, bytes - o);
        st = bcast(c, op, (char *)buf + o, len, root);
    }
    return logged(c, ZINF_COMM_BROADCAST, bytes, t0, leave(c, st));
}

zinf_status zinf_comm_barrier(zinf_comm *c) {
    static const char op[] = "barrier";
    if (!c) return NO_COMM(op);
    ZINF_CHECK(enter(c, op));
    double t0 = log_start(c, ZINF_COMM_BARRIER);
    return logged(c, ZINF_COMM_BARRIER, 0, t0, leave(c, c->ops ? moved(c, c->ops->barrier(c, op)) : ZINF_OK));
}

// ---- sub-communicators ----

// Renumber ids (n of them) from 0 in order of first appearance; returns how many.
static int renumber(int *id, int n) {
    int distinct = 0, *orig = malloc((size_t)n * sizeof *orig);
    if (!orig) return -1;
    memcpy(orig, id, (size_t)n * sizeof *id);
    for (int i = 0; i < n; i++) {
        int j = 0;
        while (orig[j] != orig[i])
            j++;
        id[i] = j < i ? id[j] : distinct++;
    }
    free(orig);
    return distinct;
}

zinf_status zinf_comm_split(zinf_comm *c, int color, zinf_comm **out) {
    static const char op[] = "split";
    if (!c || !out) return zinf_fail(ZINF_ERR_INVAL, "comm split: c and out are required");
    *out = NULL;
    if (color < 0) return zinf_fail(ZINF_ERR_INVAL, "comm %s: %s: color %d is below 0", name(c), op, color);
    const size_t W = (size_t)c->size;
    int *colors = malloc(W * sizeof *colors);
    zinf_comm *sub = calloc(1, sizeof *sub);
    if (sub) sub->host_of = malloc(W * sizeof *sub->host_of), sub->node_of = malloc(W * sizeof *sub->node_of);
    if (!colors || !sub || !sub->host_of || !sub->node_of) {
        free(colors);
        if (sub) free(sub->host_of), free(sub->node_of);
        free(sub);
        return zinf_fail(ZINF_ERR_NOMEM, "comm %s: %s: out of memory", name(c), op);
    }
    sub->timeout_s = c->timeout_s, sub->chunk_bytes = c->chunk_bytes, sub->scratch_max = c->scratch_max;
    sub->counts = c->counts;
    sub->log = c->log;
    sub->size = 1;
    pthread_mutex_init(&sub->lock, NULL);
    // Every rank is here and agrees on the members before the backend joins them.
    zinf_status st = zinf_comm_allgather(c, &color, colors, sizeof color);
    int n = 0, me = 0;
    for (int r = 0; st == ZINF_OK && r < c->size; r++) {
        if (colors[r] != color) continue;
        if (r < c->rank) me++;
        sub->host_of[n] = c->host_of[r], sub->node_of[n] = c->node_of[r];
        n++;
    }
    free(colors);
    int hosts = st == ZINF_OK ? renumber(sub->host_of, n) : 0;
    sub->nodes = st == ZINF_OK ? renumber(sub->node_of, n) : 0;
    if (st == ZINF_OK && (hosts < 0 || sub->nodes < 0)) st = zinf_fail(ZINF_ERR_NOMEM, "comm split: out of memory");
    if (st == ZINF_OK && c->ops) {
        st = enter(c, op);
        if (st == ZINF_OK) {
            sub->ops = c->ops;
            st = leave(c, moved(c, c->ops->split(c, sub, color)));
        }
        if (st == ZINF_OK && (sub->rank != me || sub->size != n))
            st = zinf_fail(ZINF_ERR_INTERNAL, "comm %s: split gave rank %d of %d where the colors say %d of %d",
                           name(c), sub->rank, sub->size, me, n);
    }
    if (st == ZINF_OK) sub->rank = me, sub->size = n, find_local(sub);
    if (st != ZINF_OK) {
        if (!sub->impl) sub->ops = NULL; // the backend never opened it
        zinf_comm_destroy(sub);
        return st;
    }
    *out = sub;
    return ZINF_OK;
}
