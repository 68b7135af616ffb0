// The prefetcher (zinf_offload.h): stage 3's decisions over the recorded trace of
// module uses. Only element counts and the trace go into them, never timing.
#include <stdlib.h>
#include <string.h>

#include "zinf_internal.h"
#include "zinf_offload.h"

struct zinf_prefetch {
    zinf_prefetch_config c;
    size_t *numel, *padded; // owned copies
    char **names;
    bool *gathered;         // per module
    int *use_pos;           // per module: the trace position of its current use, or -1
    int *trace, ntrace;     // module uses of the recorded step
    int *next_use;          // per trace position: the next position of the same module, or -1
    int *rec, nrec, caprec; // uses of the running step
    int pos;                // position in the trace; -1 once execution departed from it
    bool have_trace;
    int64_t live, live_peak; // gathered elements
};

void zinf_prefetch_destroy(zinf_prefetch *p) {
    if (!p) return;
    for (int i = 0; p->names && i < p->c.nmod; i++)
        free(p->names[i]);
    free(p->names), free(p->numel), free(p->padded), free(p->gathered), free(p->use_pos);
    free(p->trace), free(p->next_use), free(p->rec);
    free(p);
}

zinf_status zinf_prefetch_create(zinf_prefetch **out, const zinf_prefetch_config *cfg) {
    *out = NULL;
    zinf_prefetch *p = calloc(1, sizeof *p);
    if (!p) return zinf_fail(ZINF_ERR_NOMEM, "prefetcher: out of memory");
    p->c = *cfg;
    size_t n = (size_t)cfg->nmod + 1;
    p->numel = malloc(n * sizeof *p->numel);
    p->padded = malloc(n * sizeof *p->padded);
    p->names = calloc(n, sizeof *p->names);
    p->gathered = calloc(n, sizeof *p->gathered);
    p->use_pos = malloc(n * sizeof *p->use_pos);
    bool ok = p->numel && p->padded && p->names && p->gathered && p->use_pos;
    for (int i = 0; ok && i < cfg->nmod; i++) {
        p->numel[i] = cfg->numel[i];
        p->padded[i] = cfg->padded[i];
        p->use_pos[i] = -1;
        p->names[i] = strdup(cfg->names && cfg->names[i] ? cfg->names[i] : "?");
        ok = p->names[i] != NULL;
    }
    if (!ok) {
        zinf_prefetch_destroy(p);
        return zinf_fail(ZINF_ERR_NOMEM, "prefetcher: out of memory");
    }
    *out = p;
    return ZINF_OK;
}

static zinf_status record(zinf_prefetch *p, int x) {
    if (p->nrec == p->caprec) {
        int cap = p->caprec ? 2 * p->caprec : 64;
        int *n = realloc(p->rec, (size_t)cap * sizeof *n);
        if (!n) return zinf_fail(ZINF_ERR_NOMEM, "prefetcher: out of memory");
        p->rec = n, p->caprec = cap;
    }
    p->rec[p->nrec++] = x;
    return ZINF_OK;
}

zinf_status zinf_prefetch_use(zinf_prefetch *p, int x) {
    if (x < 0 || x >= p->c.nmod || !p->numel[x]) return ZINF_OK;
    ZINF_CHECK(record(p, x));
    p->use_pos[x] = -1;
    if (!p->have_trace || p->pos < 0) return ZINF_OK;
    if (p->pos < p->ntrace && p->trace[p->pos] == x) {
        p->use_pos[x] = p->pos++;
        return ZINF_OK;
    }
    const char *want = p->pos < p->ntrace ? p->names[p->trace[p->pos]] : "the step";
    ZINF_LOG_INFO("stage 3: execution departed from the recorded module trace at use %d (expected %s, got %s); "
                  "gathering on demand and recording a new trace",
                  p->pos, want, p->names[x]);
    p->pos = -1;
    return ZINF_OK;
}

void zinf_prefetch_gathered(zinf_prefetch *p, int x) {
    if (p->gathered[x]) return;
    p->gathered[x] = true;
    p->live += (int64_t)p->padded[x];
    if (p->live > p->live_peak) p->live_peak = p->live;
}

void zinf_prefetch_released(zinf_prefetch *p, int x) {
    if (!p->gathered[x]) return;
    p->gathered[x] = false;
    p->live -= (int64_t)p->padded[x];
}

bool zinf_prefetch_is_gathered(const zinf_prefetch *p, int x) { return p->gathered[x]; }

int zinf_prefetch_ahead(zinf_prefetch *p, int *out) {
    int n = 0;
    if (!zinf_prefetch_following(p)) return 0;
    int64_t ahead = 0;
    for (int i = p->pos; i < p->ntrace; i++) {
        int x = p->trace[i];
        if (p->gathered[x]) continue;
        int64_t k = (int64_t)p->padded[x];
        ahead += k ? k : (int64_t)p->numel[x]; // a module in tiles comes in its op, but spans the window as whole
        if (ahead > p->c.bucket_size || p->live + k > p->c.max_live) break;
        if (!k) continue;
        zinf_prefetch_gathered(p, x);
        out[n++] = x;
    }
    return n;
}

bool zinf_prefetch_keep(const zinf_prefetch *p, int x) {
    if ((int64_t)p->numel[x] < p->c.persistence_threshold) return true;
    int u = p->use_pos[x];
    if (u < 0 || p->next_use[u] < 0) return false;
    int64_t dist = 0;
    for (int i = u + 1; i < p->next_use[u]; i++)
        dist += (int64_t)p->numel[p->trace[i]];
    return dist <= p->c.max_reuse_distance;
}

bool zinf_prefetch_following(const zinf_prefetch *p) { return p->have_trace && p->pos >= 0; }

int zinf_prefetch_upcoming(const zinf_prefetch *p, const int **uses) {
    *uses = NULL;
    if (!zinf_prefetch_following(p)) return 0;
    *uses = p->trace + p->pos;
    return p->ntrace - p->pos;
}

zinf_status zinf_prefetch_end_step(zinf_prefetch *p) {
    memset(p->gathered, 0, (size_t)p->c.nmod * sizeof *p->gathered);
    p->live = 0;
    bool same =
        p->have_trace && p->nrec == p->ntrace && memcmp(p->rec, p->trace, (size_t)p->nrec * sizeof *p->rec) == 0;
    if (!same) {
        int *next = malloc((size_t)(p->nrec ? p->nrec : 1) * sizeof *next);
        if (!next) return zinf_fail(ZINF_ERR_NOMEM, "prefetcher: out of memory");
        for (int i = 0; i < p->nrec; i++) {
            next[i] = -1;
            for (int j = i + 1; j < p->nrec && next[i] < 0; j++)
                if (p->rec[j] == p->rec[i]) next[i] = j;
        }
        free(p->trace), free(p->next_use);
        p->trace = p->rec, p->ntrace = p->nrec, p->next_use = next;
        p->rec = NULL, p->caprec = 0;
        p->have_trace = true;
    }
    p->nrec = 0;
    p->pos = 0;
    return ZINF_OK;
}

int64_t zinf_prefetch_live(const zinf_prefetch *p) { return p->live; }
int64_t zinf_prefetch_live_peak(const zinf_prefetch *p) { return p->live_peak; }
