// The op profile: while it is on, every op launched on a device runs between two timed
// events on its stream, and is set beside the sim model's seconds for the same op on a
// given GPU. zinf device-bench uses it to hold the model (gpu/sim/model.c) to the device
// it runs on, op class by op class. Events are recorded in batches and read back when a
// batch is full, so a long run keeps a bounded number of them.
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "sim/sim.h"

#define PROFILE_BATCH 512

typedef struct op_key {
    op_kind kind;
    zinf_dtype dt;
    int64_t shape[4];
} op_key;

typedef struct pending_op {
    zinf_event *start, *end;
    op_key key;
    double modeled;
} pending_op;

typedef struct op_tally {
    op_key key;
    int64_t count;
    double seconds, modeled;
} op_tally;

struct op_profile {
    pthread_mutex_t lock; // ops may be launched from several threads
    zinf_sim_rates rates;
    pending_op ops[PROFILE_BATCH];
    int pending;
    op_tally *tally; // one per distinct key, in order of first launch
    int ntally, cap;
};

static const char *const op_names[] = {
    [OP_GEMM] = "gemm",
    [OP_BIAS_GRAD] = "bias_grad",
    [OP_LAYERNORM_FWD] = "layernorm_fwd",
    [OP_LAYERNORM_BWD] = "layernorm_bwd",
    [OP_RMSNORM_FWD] = "rmsnorm_fwd",
    [OP_RMSNORM_BWD] = "rmsnorm_bwd",
    [OP_GELU_FWD] = "gelu_fwd",
    [OP_GELU_BWD] = "gelu_bwd",
    [OP_SWIGLU_FWD] = "swiglu_fwd",
    [OP_SWIGLU_BWD] = "swiglu_bwd",
    [OP_ROPE_FWD] = "rope_fwd",
    [OP_ROPE_BWD] = "rope_bwd",
    [OP_ATTENTION_FWD] = "attention_fwd",
    [OP_ATTENTION_BWD] = "attention_bwd",
    [OP_CROSS_ENTROPY] = "cross_entropy",
    [OP_CROSS_ENTROPY_GRAD] = "cross_entropy_grad",
    [OP_EMBEDDING_FWD] = "embedding_fwd",
    [OP_EMBEDDING_BWD] = "embedding_bwd",
    [OP_ADD] = "add",
    [OP_SCALE] = "scale",
    [OP_CAST] = "cast",
    [OP_ACCUMULATE] = "accumulate",
    [OP_SUMSQ] = "sumsq",
    [OP_QUANTIZE] = "quantize",
    [OP_DEQUANTIZE] = "dequantize",
    [OP_OPTIM] = "optim",
    [OP_OPTIM_ROWS] = "optim_rows",
    [OP_COLLECTIVE] = "collective",
};

// The sizes that set an op's time: a product's m, n, k and batch; attention's B, T,
// heads and head size; a row kernel's rows and width; an elementwise op's elements.
static op_key key_of(const op_record *r) {
    op_key k = {.kind = r->kind, .dt = r->dt};
    int64_t *s = k.shape;
    switch (r->kind) {
    case OP_GEMM:
        s[0] = r->u.gemm.m, s[1] = r->u.gemm.n, s[2] = r->u.gemm.k, s[3] = r->u.gemm.batch > 1 ? r->u.gemm.batch : 1;
        break;
    case OP_ATTENTION_FWD:
    case OP_ATTENTION_BWD: s[0] = r->u.attn.B, s[1] = r->u.attn.T, s[2] = r->u.attn.NH, s[3] = r->u.attn.hd; break;
    case OP_LAYERNORM_FWD:
    case OP_LAYERNORM_BWD:
    case OP_RMSNORM_FWD:
    case OP_RMSNORM_BWD: s[0] = r->u.ln.rows, s[1] = r->u.ln.C; break;
    case OP_CROSS_ENTROPY: s[0] = r->u.xent.rows, s[1] = r->u.xent.V; break;
    case OP_CROSS_ENTROPY_GRAD: s[0] = r->u.xgrad.rows, s[1] = r->u.xgrad.n; break;
    case OP_EMBEDDING_FWD:
    case OP_EMBEDDING_BWD: s[0] = (int64_t)r->u.emb.B * r->u.emb.T, s[1] = r->u.emb.C; break;
    case OP_COLLECTIVE: break;
    case OP_QUANTIZE:
    case OP_DEQUANTIZE: s[0] = (int64_t)r->u.quant.n; break;
    case OP_OPTIM: s[0] = (int64_t)r->u.optim.t.n; break;
    case OP_OPTIM_ROWS: s[0] = (int64_t)r->u.optim.count, s[1] = r->u.optim.row_len; break;
    case OP_SUMSQ: // the elements in all, and the pieces
        for (int i = 0; i < r->u.sumsq.n; i++)
            s[0] += (int64_t)r->u.sumsq.pieces[i].n;
        s[1] = r->u.sumsq.n;
        break;
    default: s[0] = (int64_t)r->u.ew.n, s[1] = r->u.ew.cols; break;
    }
    return k;
}

static op_tally *tally_of(op_profile *p, const op_key *k) {
    for (int i = 0; i < p->ntally; i++)
        if (memcmp(&p->tally[i].key, k, sizeof *k) == 0) return &p->tally[i];
    if (p->ntally == p->cap) {
        int cap = p->cap ? 2 * p->cap : 64;
        op_tally *t = realloc(p->tally, (size_t)cap * sizeof *t);
        if (!t) return NULL;
        p->tally = t, p->cap = cap;
    }
    p->tally[p->ntally] = (op_tally){.key = *k};
    return &p->tally[p->ntally++];
}

// Reads back every pending op's time (the caller holds the lock). Each op waits for
// its own end: ops launched on other streams may still run after the last one.
static zinf_status harvest(op_profile *p) {
    zinf_status st = ZINF_OK;
    for (int i = 0; st == ZINF_OK && i < p->pending; i++) {
        pending_op *q = &p->ops[i];
        double s;
        st = zinf_event_sync(q->end);
        if (st == ZINF_OK) st = zinf_event_elapsed(q->start, q->end, &s);
        op_tally *t = st == ZINF_OK ? tally_of(p, &q->key) : NULL;
        if (st == ZINF_OK && !t) st = zinf_fail(ZINF_ERR_NOMEM, "op profile: out of host memory");
        if (t) t->count++, t->seconds += s, t->modeled += q->modeled;
    }
    p->pending = 0;
    return st;
}

static void profile_free(op_profile *p) {
    for (int i = 0; i < PROFILE_BATCH; i++)
        zinf_event_destroy(p->ops[i].start), zinf_event_destroy(p->ops[i].end);
    free(p->tally);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

zinf_status zinf_device_profile_start(zinf_device *d, const zinf_sim_params *model) {
    if (!d || !model) return zinf_fail(ZINF_ERR_INVAL, "profile start: a device and a model are required");
    if (d->profile) return zinf_fail(ZINF_ERR_INVAL, "profile start: this device's ops are already profiled");
    op_profile *p = calloc(1, sizeof *p);
    if (!p) return zinf_fail(ZINF_ERR_NOMEM, "profile start: out of host memory");
    pthread_mutex_init(&p->lock, NULL);
    zinf_sim_rates_of(model, &p->rates);
    p->rates.attention = d->params.attention;
    zinf_status st = ZINF_OK;
    for (int i = 0; st == ZINF_OK && i < PROFILE_BATCH; i++) {
        st = zinf_event_create_timed(d, &p->ops[i].start);
        if (st == ZINF_OK) st = zinf_event_create_timed(d, &p->ops[i].end);
    }
    if (st != ZINF_OK) {
        profile_free(p);
        return st;
    }
    d->profile = p;
    return ZINF_OK;
}

zinf_status profile_launch(zinf_stream *s, const op_record *r) {
    op_profile *p = s->dev->profile;
    pthread_mutex_lock(&p->lock);
    zinf_status st = p->pending == PROFILE_BATCH ? harvest(p) : ZINF_OK;
    pending_op *q = &p->ops[p->pending];
    if (st == ZINF_OK) st = zinf_event_record(q->start, s);
    if (st == ZINF_OK) st = s->dev->be->launch(s, r);
    if (st == ZINF_OK) st = zinf_event_record(q->end, s);
    if (st == ZINF_OK) {
        q->key = key_of(r), q->modeled = sim_op_seconds(&p->rates, r);
        p->pending++;
    }
    pthread_mutex_unlock(&p->lock);
    return st;
}

zinf_status zinf_device_profile_stop(zinf_device *d, zinf_op_time *out, int max, int *n) {
    if (!d || !n || (max > 0 && !out)) return zinf_fail(ZINF_ERR_INVAL, "profile stop: device, out and n are required");
    *n = 0;
    op_profile *p = d->profile;
    if (!p) return zinf_fail(ZINF_ERR_INVAL, "profile stop: this device's ops are not being profiled");
    d->profile = NULL;
    zinf_status st = harvest(p);
    for (int i = 0; i < p->ntally && *n < max; i++, ++*n) {
        const op_tally *y = &p->tally[i];
        out[*n] = (zinf_op_time){.op = op_names[y->key.kind],
                                 .dt = y->key.dt,
                                 .count = y->count,
                                 .seconds = y->seconds,
                                 .modeled_s = y->modeled};
        memcpy(out[*n].shape, y->key.shape, sizeof out[*n].shape);
    }
    profile_free(p);
    return st;
}
