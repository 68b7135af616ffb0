// The comms logger (zinf_comm.h): a record per (kind, message size, ranks, path), with
// count and total seconds; a communicator split from a logged one adds to its log. The
// records are few (a step repeats the same collectives), so a list searched in order
// serves; memory stays bounded however long the run.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

const char *const zinf_comm_op_names[ZINF_COMM_OPS + 1] = ZINF_COMM_OP_NAMES;

typedef struct comm_record {
    zinf_comm_op op;
    size_t bytes;
    int ranks;
    const char *path;
    int64_t count;
    double seconds;
} comm_record;

struct comm_log {
    pthread_mutex_t lock; // collectives complete on several threads (a stream's, the caller's)
    unsigned ops;
    bool verbose;
    comm_record *records;
    int count, capacity;
};

zinf_status zinf_comm_log_start(zinf_comm *c, unsigned ops, bool verbose) {
    if (!c) return zinf_fail(ZINF_ERR_INVAL, "comm log: c is NULL");
    if (c->log) return zinf_fail(ZINF_ERR_INVAL, "comm log: already started");
    comm_log *l = calloc(1, sizeof *l);
    if (!l) return zinf_fail(ZINF_ERR_NOMEM, "comm log: out of memory");
    pthread_mutex_init(&l->lock, NULL);
    l->ops = ops, l->verbose = verbose;
    c->log = c->own_log = l;
    return ZINF_OK;
}

void zinf_comm_log_stop(zinf_comm *c) {
    if (!c || !c->own_log) return;
    comm_log_free(c->own_log);
    c->log = c->own_log = NULL;
}

void comm_log_free(comm_log *l) {
    if (!l) return;
    pthread_mutex_destroy(&l->lock);
    free(l->records);
    free(l);
}

bool comm_log_wants(const zinf_comm *c, zinf_comm_op op) { return c->log && (c->log->ops & (1u << op)); }

// nccl-tests' bandwidths of a collective of `bytes` per rank over `ranks` that took
// `seconds`, in Gbps as DeepSpeed prints them: the algorithm's (bytes the collective
// moves for the caller over the time) and the bus's (what each link carried).
static void bandwidths(zinf_comm_op op, size_t bytes, int ranks, double seconds, double *alg, double *bus) {
    double n = ranks, size = (double)bytes, a, b;
    switch (op) {
    case ZINF_COMM_ALL_REDUCE: a = 2 * size, b = size * 2 * (n - 1) / n; break;
    case ZINF_COMM_ALL_GATHER:
    case ZINF_COMM_REDUCE_SCATTER: a = size * n, b = size * (n - 1); break;
    case ZINF_COMM_ALL_TO_ALL: a = size, b = size * (n - 1) / n; break;
    default: a = b = size; break;
    }
    *alg = seconds > 0 ? a * 8 / seconds / 1e9 : 0;
    *bus = seconds > 0 ? b * 8 / seconds / 1e9 : 0;
}

// DeepSpeed's sizes: 1024-based units, two decimals at most ("4.0 KB", "3.91 MB").
static const char *size_text(size_t bytes, char *buf, size_t n) {
    static const char *const units[] = {"B", "KB", "MB", "GB", "TB"};
    if (!bytes) return snprintf(buf, n, "0B"), buf;
    int u = 0;
    double v = (double)bytes;
    while (v >= 1024 && u < 4)
        v /= 1024, u++;
    v = round(v * 100) / 100;
    snprintf(buf, n, fabs(v * 10 - round(v * 10)) < 1e-9 ? "%.1f %s" : "%.2f %s", v, units[u]);
    return buf;
}

void comm_log_record(zinf_comm *c, zinf_comm_op op, size_t bytes, const char *path, double seconds) {
    comm_log *l = c->log;
    if (!l || !(l->ops & (1u << op))) return;
    pthread_mutex_lock(&l->lock);
    comm_record *r = NULL;
    for (int i = 0; i < l->count && !r; i++) {
        comm_record *x = &l->records[i];
        if (x->op == op && x->bytes == bytes && x->ranks == c->size && !strcmp(x->path, path)) r = x;
    }
    if (!r && l->count == l->capacity) {
        int cap = l->capacity ? 2 * l->capacity : 16;
        comm_record *grown = realloc(l->records, (size_t)cap * sizeof *grown);
        if (grown) l->records = grown, l->capacity = cap;
    }
    if (!r && l->count < l->capacity) {
        r = &l->records[l->count++];
        *r = (comm_record){.op = op, .bytes = bytes, .ranks = c->size, .path = path};
    }
    if (r) r->count++, r->seconds += seconds; // out of memory: the record is lost, not the run
    pthread_mutex_unlock(&l->lock);
    if (l->verbose && c->rank == 0) {
        double alg, bus;
        char sz[32];
        bandwidths(op, bytes, c->size, seconds, &alg, &bus);
        ZINF_LOG_INFO("comm op: %s | time (ms): %.2f | msg size: %s | algbw (Gbps): %.2f | busbw (Gbps): %.2f | "
                      "ranks: %d | path: %s",
                      zinf_comm_op_names[op], seconds * 1e3, size_text(bytes, sz, sizeof sz), alg, bus, c->size, path);
    }
}

static int by_op_then_size(const void *a, const void *b) {
    const comm_record *x = a, *y = b;
    if (x->op != y->op) return x->op < y->op ? -1 : 1;
    if (x->bytes != y->bytes) return x->bytes < y->bytes ? -1 : 1;
    if (x->ranks != y->ranks) return x->ranks < y->ranks ? -1 : 1;
    return strcmp(x->path, y->path);
}

zinf_status zinf_comm_log_summary(const zinf_comm *c, char **out) {
    if (!c || !out) return zinf_fail(ZINF_ERR_INVAL, "comm log summary: c and out are required");
    *out = NULL;
    comm_log *l = c->log;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return zinf_fail(ZINF_ERR_NOMEM, "comm log summary: out of memory");
    if (l) {
        pthread_mutex_lock(&l->lock);
        comm_record *r = malloc((size_t)(l->count ? l->count : 1) * sizeof *r);
        int n = r ? l->count : 0;
        if (n) memcpy(r, l->records, (size_t)n * sizeof *r); // (no records yet: no array)
        pthread_mutex_unlock(&l->lock);
        if (n) qsort(r, (size_t)n, sizeof *r, by_op_then_size);
        if (n)
            fprintf(f, "%-20s%-20s%-20s%-20s%-20s%-20s%-20s%-8s%s\n", "Comm. Op", "Message Size", "Count",
                    "Total Latency(ms)", "Avg Latency(ms)", "tput_avg (Gbps)", "busbw_avg (Gbps)", "Ranks", "Path");
        for (int i = 0; i < n; i++) {
            if (i == 0 || r[i].op != r[i - 1].op) fprintf(f, "%s\n", zinf_comm_op_names[r[i].op]);
            double mean = r[i].seconds / (double)r[i].count, alg, bus;
            char sz[32];
            bandwidths(r[i].op, r[i].bytes, r[i].ranks, mean, &alg, &bus);
            fprintf(f, "%-20s%-20s%-20lld%-20.2f%-20.2f%-20.2f%-20.2f%-8d%s\n", "", size_text(r[i].bytes, sz, sizeof sz),
                    (long long)r[i].count, r[i].seconds * 1e3, mean * 1e3, alg, bus, r[i].ranks, r[i].path);
        }
        free(r);
    }
    if (fclose(f) != 0 || !text) {
        free(text);
        return zinf_fail(ZINF_ERR_NOMEM, "comm log summary: out of memory");
    }
    *out = text;
    return ZINF_OK;
}
