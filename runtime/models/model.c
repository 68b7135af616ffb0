// What every model family shares: the module tables' bookkeeping, the schedule, the
// activations on the device, batches, and dispatch to the family's forward and
// backward (model_internal.h).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_internal.h"

void model_add_param(zinf_module_info *mod, zinf_param_info *table, const char *name, int64_t d0, int64_t d1,
                     bool aligned, zinf_param_init init, double std) {
    zinf_param_info *p = &table[mod->nparams++];
    snprintf(p->name, sizeof p->name, "%s", name);
    p->ndim = d1 ? 2 : 1;
    p->shape[0] = d0;
    p->shape[1] = d1;
    p->numel = (size_t)d0 * (size_t)(d1 ? d1 : 1);
    p->offset = aligned ? (mod->numel + 63) & ~(size_t)63 : mod->numel;
    p->init = init;
    p->std = std;
    mod->numel = p->offset + p->numel;
}

int zinf_model_vocab_padded(const zinf_model_shape *s) { return (s->vocab_size + 127) / 128 * 128; }

void model_add_head_weight(zinf_module_info *mod, zinf_param_info *table, const char *name, const zinf_model_shape *s,
                           zinf_param_init init, double std) {
    model_add_param(mod, table, name, s->vocab_size, s->n_embd, true, init, std);
    // The pad's rows: a gap of the flat buffer, so zero (zinf_model_vocab_padded).
    mod->numel += (size_t)(zinf_model_vocab_padded(s) - s->vocab_size) * (size_t)s->n_embd;
}

static zinf_status build_tables(zinf_model *m) {
    m->nmod = 3 + 2 * m->p.shape.n_layer;
    m->nparams = m->fam->count(&m->p.shape);
    m->mods = calloc((size_t)m->nmod, sizeof *m->mods);
    m->params = calloc((size_t)m->nparams + 1, sizeof *m->params);
    if (!m->mods || !m->params) return zinf_fail(ZINF_ERR_NOMEM, "%s: out of memory for the module tables", m->fam->name);
    m->fam->tables(m);
    return ZINF_OK;
}

// Forward in module order; the backward in reverse, each block recomputed (attn then
// mlp) right before its backward when activations are checkpointed.
static zinf_status build_schedule(zinf_model *m) {
    int L = m->p.shape.n_layer;
    m->sched = calloc(2 * (unsigned)m->nmod + 2 * (unsigned)L, sizeof *m->sched);
    if (!m->sched) return zinf_fail(ZINF_ERR_NOMEM, "%s: out of memory for the schedule", m->fam->name);
    int n = 0;
    for (int i = 0; i < m->nmod; i++)
        m->sched[n++] = (zinf_model_op){i, ZINF_PASS_FORWARD};
    m->n_fwd = n;
    m->sched[n++] = (zinf_model_op){mod_head(L), ZINF_PASS_BACKWARD};
    m->sched[n++] = (zinf_model_op){mod_norm(L), ZINF_PASS_BACKWARD};
    for (int l = L - 1; l >= 0; l--) {
        if (m->p.checkpoint_activations) {
            m->sched[n++] = (zinf_model_op){mod_attn(l), ZINF_PASS_RECOMPUTE};
            m->sched[n++] = (zinf_model_op){mod_mlp(l), ZINF_PASS_RECOMPUTE};
        }
        m->sched[n++] = (zinf_model_op){mod_mlp(l), ZINF_PASS_BACKWARD};
        m->sched[n++] = (zinf_model_op){mod_attn(l), ZINF_PASS_BACKWARD};
    }
    m->sched[n++] = (zinf_model_op){MOD_EMBEDDING, ZINF_PASS_BACKWARD};
    m->n_all = n;
    return ZINF_OK;
}

int64_t zinf_model_param_count(const zinf_model_shape *s) {
    zinf_model m = {.fam = family_of(s->arch), .p = {.shape = *s}};
    int64_t n = -1;
    if (build_tables(&m) == ZINF_OK) {
        n = 0;
        for (int i = 0; i < m.nparams; i++)
            n += (int64_t)m.params[i].numel;
    }
    free(m.mods), free(m.params);
    return n;
}

// ---- activations ----

// Rows of logits the head computes at once for a batch of BT tokens.
static int head_rows(const zinf_model *m, int BT) {
    return m->p.head_chunk > 0 && m->p.head_chunk < BT ? m->p.head_chunk : BT;
}

zinf_status model_dalloc(zinf_model *m, void **p, size_t elems, size_t es, const char *what) {
    if (m->dev) return zinf_device_alloc(m->dev, elems * es, what, p);
    m->planned_bytes += (int64_t)zinf_device_account_bytes(elems * es);
    return ZINF_OK;
}

zinf_status model_upload(zinf_model *m, void *dst, const void *src, size_t bytes) {
    zinf_stream *st = NULL;
    zinf_status rc = zinf_stream_create(m->dev, &st);
    if (rc == ZINF_OK) rc = zinf_copy_async(st, dst, src, bytes, ZINF_COPY_H2D);
    if (rc == ZINF_OK) rc = zinf_stream_sync(st);
    zinf_stream_destroy(st);
    return rc;
}

static zinf_status alloc_layer(zinf_model *m, layer_acts *a) {
    size_t BT = (size_t)m->p.batch * m->p.seq_len, C = (size_t)m->p.shape.n_embd, es = zinf_dtype_size(m->p.dtype);
    size_t NH = (size_t)m->p.shape.n_head;
    const act_widths *w = &m->w;
    ZINF_CHECK(model_dalloc(m, &a->ln1, BT * C, es, "activations: ln_1"));
    ZINF_CHECK(model_dalloc(m, &a->qkv, BT * (size_t)w->qkv, es, "activations: qkv"));
    ZINF_CHECK(model_dalloc(m, &a->atty, BT * (size_t)w->att, es, "activations: attention"));
    ZINF_CHECK(model_dalloc(m, &a->res2, BT * C, es, "activations: residual"));
    ZINF_CHECK(model_dalloc(m, &a->ln2, BT * C, es, "activations: ln_2"));
    ZINF_CHECK(model_dalloc(m, &a->fc, BT * (size_t)w->fc, es, "activations: mlp"));
    ZINF_CHECK(model_dalloc(m, &a->act, BT * (size_t)w->act, es, "activations: mlp activation"));
    if (w->layer_norm) ZINF_CHECK(model_dalloc(m, (void **)&a->ln1_mean, BT, 4, "activations: ln stats"));
    ZINF_CHECK(model_dalloc(m, (void **)&a->ln1_rstd, BT, 4, "activations: ln stats"));
    if (w->layer_norm) ZINF_CHECK(model_dalloc(m, (void **)&a->ln2_mean, BT, 4, "activations: ln stats"));
    ZINF_CHECK(model_dalloc(m, (void **)&a->ln2_rstd, BT, 4, "activations: ln stats"));
    ZINF_CHECK(model_dalloc(m, (void **)&a->lse, BT * NH, 4, "activations: attention lse"));
    return ZINF_OK;
}

static zinf_status alloc_acts(zinf_model *m) {
    const zinf_model_shape *s = &m->p.shape;
    const act_widths *w = &m->w;
    size_t BT = (size_t)m->p.batch * m->p.seq_len, C = (size_t)s->n_embd, es = zinf_dtype_size(m->p.dtype);
    int L = s->n_layer, sets = m->p.checkpoint_activations ? 1 : L;
    m->h_tok = malloc(BT * sizeof *m->h_tok);
    m->h_targets = malloc(BT * sizeof *m->h_targets);
    m->h_order = malloc(BT * sizeof *m->h_order);
    m->h_token_starts = malloc(((size_t)s->vocab_size + 1) * sizeof *m->h_token_starts);
    m->h_losses = malloc(BT * sizeof *m->h_losses);
    m->res3 = calloc((size_t)L, sizeof *m->res3);
    m->layers = calloc((size_t)sets, sizeof *m->layers);
    if (!m->h_tok || !m->h_targets || !m->h_order || !m->h_token_starts || !m->h_losses || !m->res3 || !m->layers)
        return zinf_fail(ZINF_ERR_NOMEM, "%s: out of host memory", m->fam->name);
    if (m->dev) ZINF_CHECK(zinf_event_create(m->dev, &m->batch_copied));
    ZINF_CHECK(model_dalloc(m, (void **)&m->tok, BT, 4, "tokens"));
    ZINF_CHECK(model_dalloc(m, (void **)&m->targets, BT, 4, "targets"));
    ZINF_CHECK(model_dalloc(m, (void **)&m->order, BT, 4, "token order"));
    if (m->p.host_checkpoints) { // checkpoint j in slot j % CKPT_SLOTS
        for (int k = 0; k < CKPT_SLOTS; k++)
            ZINF_CHECK(model_dalloc(m, &m->slots[k], BT * C, es, "activations: checkpoint slots"));
        m->encoded = m->slots[0];
        for (int l = 0; l < L; l++)
            m->res3[l] = m->slots[(l + 1) % CKPT_SLOTS];
    } else {
        ZINF_CHECK(model_dalloc(m, &m->encoded, BT * C, es, "activations: embedding"));
        for (int l = 0; l < L; l++)
            ZINF_CHECK(model_dalloc(m, &m->res3[l], BT * C, es, "activations: block outputs"));
    }
    for (int i = 0; i < sets; i++)
        ZINF_CHECK(alloc_layer(m, &m->layers[i]));
    ZINF_CHECK(model_dalloc(m, &m->lnf, BT * C, es, "activations: ln_f"));
    if (w->layer_norm) ZINF_CHECK(model_dalloc(m, (void **)&m->lnf_mean, BT, 4, "activations: ln stats"));
    ZINF_CHECK(model_dalloc(m, (void **)&m->lnf_rstd, BT, 4, "activations: ln stats"));
    size_t logits = (size_t)head_rows(m, (int)BT) * (size_t)zinf_model_vocab_padded(s);
    ZINF_CHECK(model_dalloc(m, &m->logits, logits, es, "activations: logits"));
    ZINF_CHECK(model_dalloc(m, (void **)&m->losses, BT, 4, "losses"));
    if (m->p.training) ZINF_CHECK(model_dalloc(m, (void **)&m->lse, BT, 4, "log-sum-exps"));
    if (w->rope) {
        size_t half = (size_t)m->p.seq_len * (size_t)(s->head_dim / 2);
        ZINF_CHECK(model_dalloc(m, (void **)&m->rope_cos, half, 4, "rotary angles"));
        ZINF_CHECK(model_dalloc(m, (void **)&m->rope_sin, half, 4, "rotary angles"));
    }
    zinf_attention_args at = {.dt = m->p.dtype, .B = m->p.batch, .T = m->p.seq_len, .C = w->att, .NH = s->n_head,
                              .NKV = s->n_kv_head, .hd = s->head_dim, .window = s->window};
    // The device's own count where there is one: its attention may be cuDNN's, whose
    // plans say what they need; a plan takes that count from its params where given.
    size_t ws = m->dev                         ? zinf_attention_workspace(m->dev, &at)
                : m->p.attention_workspace > 0 ? (size_t)m->p.attention_workspace
                                               : zinf_backend_attention_workspace(m->backend, &at);
    m->att_ws_bytes = ws;
    if (ws) ZINF_CHECK(model_dalloc(m, &m->att_ws, ws, 1, "attention workspace"));
    ZINF_CHECK(model_mlp_tiles_alloc(m));
    if (!m->p.training) return ZINF_OK;
    ZINF_CHECK(model_dalloc(m, &m->dres, BT * C, es, "gradients: residual"));
    ZINF_CHECK(model_dalloc(m, &m->dln, BT * C, es, "gradients: layernorm"));
    ZINF_CHECK(model_dalloc(m, &m->dqkv, BT * (size_t)w->qkv, es, "gradients: qkv"));
    ZINF_CHECK(model_dalloc(m, &m->datty, BT * (size_t)w->att, es, "gradients: attention"));
    ZINF_CHECK(model_dalloc(m, &m->dfc, BT * (size_t)w->fc, es, "gradients: mlp"));
    if (w->layer_norm) return ZINF_OK;
    return model_dalloc(m, &m->dact, BT * (size_t)w->act, es, "gradients: mlp activation");
}

static void free_layer(zinf_device *d, layer_acts *a) {
    void *bufs[] = {a->ln1, a->qkv,      a->atty,     a->res2,     a->ln2,      a->fc,
                    a->act, a->ln1_mean, a->ln1_rstd, a->ln2_mean, a->ln2_rstd, a->lse};
    for (size_t i = 0; i < ZINF_ARRAY_LEN(bufs); i++)
        zinf_device_free(d, bufs[i]);
}

void zinf_model_destroy(zinf_model *m) {
    if (!m) return;
    zinf_device *d = m->dev;
    zinf_stream_destroy(m->cp); // its copies end first
    for (int k = 0; k < CKPT_SLOTS; k++)
        zinf_event_destroy(m->ev_copy[k]), zinf_device_free(d, m->slots[k]);
    zinf_event_destroy(m->ev_compute);
    if (m->p.host_checkpoints) m->encoded = NULL; // a slot's
    for (int l = 0; m->res3 && !m->p.host_checkpoints && l < m->p.shape.n_layer; l++)
        zinf_device_free(d, m->res3[l]);
    for (int i = 0; m->layers && i < (m->p.checkpoint_activations ? 1 : m->p.shape.n_layer); i++)
        free_layer(d, &m->layers[i]);
    void *bufs[] = {m->tok,    m->targets, m->order, m->encoded, m->lnf,      m->lnf_mean, m->lnf_rstd,
                    m->logits, m->losses,  m->lse,   m->att_ws,  m->rope_cos, m->rope_sin, m->dres,
                    m->dln,    m->dqkv,    m->datty, m->dfc,     m->dact,     m->ones,     m->mlp_bias};
    for (size_t i = 0; i < ZINF_ARRAY_LEN(bufs); i++)
        zinf_device_free(d, bufs[i]);
    free(m->res3), free(m->layers), free(m->h_tok), free(m->h_targets), free(m->h_order), free(m->h_token_starts);
    free(m->h_losses);
    zinf_event_destroy(m->batch_copied);
    free(m->mods), free(m->params), free(m->sched);
    free(m);
}

// ---- checkpoints in host memory ----
// With host_checkpoints the forward copies each checkpoint to the host buffer on the
// model's copy stream as soon as it is written, and the backward brings each back
// before its block's recompute, the next one (block l - 1's input) as block l's
// recompute starts, so the copy runs under block l's recompute and backward. Slot k
// holds checkpoints k, k + 3, ...: the forward writes checkpoint j once the copy out of
// j - 3 is done; the backward loads checkpoint l - 1 into the slot of l + 2, whose last
// reader and writer (block l + 1's recompute and backward) are queued before the load.
// The three checkpoints the forward leaves in the slots (L - 2 .. L) are not reloaded.
// Every copy goes through the one stream, in order, so a checkpoint's copy out of a
// micro-batch lands before any later copy of the same host bytes.

static zinf_status ckpt_create(zinf_model *m) {
    ZINF_CHECK(zinf_stream_create(m->dev, &m->cp));
    ZINF_CHECK(zinf_event_create(m->dev, &m->ev_compute));
    for (int k = 0; k < CKPT_SLOTS; k++) {
        ZINF_CHECK(zinf_event_create(m->dev, &m->ev_copy[k]));
        m->slot_of[k] = -1;
    }
    return ZINF_OK;
}

size_t zinf_model_checkpoint_bytes(const zinf_model_params *p) {
    if (!p->host_checkpoints) return 0;
    return (size_t)(p->shape.n_layer + 1) * (size_t)p->batch * (size_t)p->seq_len * (size_t)p->shape.n_embd *
           zinf_dtype_size(p->dtype);
}

zinf_status zinf_model_lend_checkpoints(zinf_model *m, void *h_buf) {
    if (!m->p.host_checkpoints || !m->dev || !h_buf)
        return zinf_fail(ZINF_ERR_INVAL, "%s: a host buffer is lent only to a model made with host_checkpoints",
                         m->fam->name);
    m->h_ckpt = h_buf;
    return ZINF_OK;
}

static size_t ckpt_bytes(const zinf_model *m) {
    return (size_t)m->b * m->p.seq_len * m->p.shape.n_embd * zinf_dtype_size(m->p.dtype);
}

static void *ckpt_host(const zinf_model *m, int j) {
    size_t full = (size_t)m->p.batch * m->p.seq_len * m->p.shape.n_embd * zinf_dtype_size(m->p.dtype);
    return (char *)m->h_ckpt + (size_t)j * full;
}

// The compute stream s is about to write checkpoint j: its slot's last copy must be over.
static zinf_status ckpt_before_write(zinf_model *m, zinf_stream *s, int j) {
    int k = j % CKPT_SLOTS;
    if (m->slot_of[k] >= 0) ZINF_CHECK(zinf_stream_wait_event(s, m->ev_copy[k]));
    return ZINF_OK;
}

// s wrote checkpoint j: copy it out once s gets there.
static zinf_status ckpt_save(zinf_model *m, zinf_stream *s, int j) {
    int k = j % CKPT_SLOTS;
    ZINF_CHECK(zinf_event_record(m->ev_compute, s));
    ZINF_CHECK(zinf_stream_wait_event(m->cp, m->ev_compute));
    ZINF_CHECK(zinf_copy_async(m->cp, ckpt_host(m, j), m->slots[k], ckpt_bytes(m), ZINF_COPY_D2H));
    ZINF_CHECK(zinf_event_record(m->ev_copy[k], m->cp));
    m->slot_of[k] = j, m->slot_loading[k] = false;
    return ZINF_OK;
}

// Bring checkpoint j into its slot unless it is there, after everything queued on s so far.
static zinf_status ckpt_load(zinf_model *m, zinf_stream *s, int j) {
    int k = j % CKPT_SLOTS;
    if (m->slot_of[k] == j) return ZINF_OK;
    ZINF_CHECK(zinf_event_record(m->ev_compute, s));
    ZINF_CHECK(zinf_stream_wait_event(m->cp, m->ev_compute));
    ZINF_CHECK(zinf_copy_async(m->cp, m->slots[k], ckpt_host(m, j), ckpt_bytes(m), ZINF_COPY_H2D));
    ZINF_CHECK(zinf_event_record(m->ev_copy[k], m->cp));
    m->slot_of[k] = j, m->slot_loading[k] = true;
    return ZINF_OK;
}

// s is about to read checkpoint j: in its slot, and the copy that brought it there over.
static zinf_status ckpt_before_read(zinf_model *m, zinf_stream *s, int j) {
    int k = j % CKPT_SLOTS;
    ZINF_CHECK(ckpt_load(m, s, j));
    return m->slot_loading[k] ? zinf_stream_wait_event(s, m->ev_copy[k]) : ZINF_OK;
}

// The copies around op: module op->module of block l writes checkpoint l + 1 (the MLP,
// in forward and recompute) or reads checkpoint l (the attention's recompute; the final
// norm's backward reads checkpoint L); the embedding writes checkpoint 0.
static zinf_status ckpt_around(zinf_model *m, zinf_stream *s, const zinf_model_op *op, bool after) {
    int L = m->p.shape.n_layer, mod = op->module, l = (mod - 1) / 2;
    bool embedding = mod == MOD_EMBEDDING, mlp = l < L && mod == mod_mlp(l); // mod_mlp(L) is the head
    switch (op->pass) {
    case ZINF_PASS_FORWARD:
        if (!embedding && !mlp) return ZINF_OK;
        return after ? ckpt_save(m, s, embedding ? 0 : l + 1) : ckpt_before_write(m, s, embedding ? 0 : l + 1);
    case ZINF_PASS_RECOMPUTE:
        if (after) return ZINF_OK;
        if (mlp) return ckpt_before_write(m, s, l + 1); // the same values again
        ZINF_CHECK(ckpt_before_read(m, s, l));
        return l > 0 ? ckpt_load(m, s, l - 1) : ZINF_OK; // ahead, under this block
    case ZINF_PASS_BACKWARD:
        return !after && mod == mod_norm(L) ? ckpt_before_read(m, s, L) : ZINF_OK;
    }
    return ZINF_OK;
}

static zinf_status check_params(const model_family *f, const zinf_model_params *p) {
    const zinf_model_shape *s = &p->shape;
    if (s->n_layer < 1 || s->n_head < 1 || s->n_embd < 1 || s->vocab_size < 1 || s->block_size < 1)
        return zinf_fail(ZINF_ERR_INVAL, "%s: n_layer, n_head, n_embd, vocab_size and block_size must be positive",
                         f->name);
    if (s->n_kv_head < 1 || s->n_head % s->n_kv_head || s->head_dim < 1 || s->ffn < 1)
        return zinf_fail(ZINF_ERR_INVAL, "%s: n_kv_head %d must divide n_head %d; head_dim %d and ffn %d positive",
                         f->name, s->n_kv_head, s->n_head, s->head_dim, s->ffn);
    ZINF_CHECK(f->check(s));
    if (p->seq_len < 1 || p->seq_len > s->block_size)
        return zinf_fail(ZINF_ERR_INVAL, "%s: seq_len %d is not in 1..block_size (%d)", f->name, p->seq_len,
                         s->block_size);
    if (p->batch < 1) return zinf_fail(ZINF_ERR_INVAL, "%s: batch %d is below 1", f->name, p->batch);
    if (p->dtype != ZINF_DTYPE_F32 && p->dtype != ZINF_DTYPE_BF16 && p->dtype != ZINF_DTYPE_F16)
        return zinf_fail(ZINF_ERR_INVAL, "%s: dtype must be fp32, bf16 or fp16", f->name);
    if (p->host_checkpoints && !(p->checkpoint_activations && p->training))
        return zinf_fail(ZINF_ERR_INVAL, "%s: checkpoints in host memory need a training model with activation "
                                         "checkpointing",
                         f->name);
    return ZINF_OK;
}

static zinf_status create(zinf_model **out, zinf_device *dev, zinf_backend backend, const zinf_model_params *p) {
    *out = NULL;
    const model_family *f = family_of(p->shape.arch);
    ZINF_CHECK(check_params(f, p));
    zinf_model *m = calloc(1, sizeof *m);
    if (!m) return zinf_fail(ZINF_ERR_NOMEM, "%s: out of host memory", f->name);
    m->fam = f;
    m->w = f->widths(&p->shape);
    m->dev = dev;
    m->backend = backend;
    m->p = *p;
    zinf_status st;
    ZINF_CHECK_GOTO(build_tables(m), st, fail);
    ZINF_CHECK_GOTO(build_schedule(m), st, fail);
    ZINF_CHECK_GOTO(alloc_acts(m), st, fail);
    if (dev && f->prepare) ZINF_CHECK_GOTO(f->prepare(m), st, fail);
    if (dev && p->host_checkpoints) ZINF_CHECK_GOTO(ckpt_create(m), st, fail);
    *out = m;
    return ZINF_OK;
fail:
    zinf_model_destroy(m);
    return st;
}

zinf_status zinf_model_create(zinf_model **out, zinf_device *dev, const zinf_model_params *p) {
    if (!dev) return zinf_fail(ZINF_ERR_INVAL, "model: a device is required (zinf_model_plan makes one without)");
    return create(out, dev, zinf_device_get_caps(dev)->backend, p);
}

zinf_status zinf_model_plan(zinf_model **out, zinf_backend backend, const zinf_model_params *p,
                            int64_t *activation_bytes) {
    ZINF_CHECK(create(out, NULL, backend, p));
    *activation_bytes = (*out)->planned_bytes;
    return ZINF_OK;
}

const zinf_model_params *zinf_model_get_params(const zinf_model *m) { return &m->p; }
size_t zinf_model_attention_workspace(const zinf_model *m) { return m->att_ws_bytes; }
int zinf_model_module_count(const zinf_model *m) { return m->nmod; }
const zinf_module_info *zinf_model_module(const zinf_model *m, int i) {
    return i >= 0 && i < m->nmod ? &m->mods[i] : NULL;
}

const zinf_model_op *zinf_model_schedule(const zinf_model *m, bool backward, int *n) {
    *n = backward ? m->n_all : m->n_fwd;
    return m->sched;
}

// ---- batches ----

// The batch's positions ordered by token, equal tokens in position order (what the
// embedding's backward sums in): a counting sort, stable by construction, O(n + vocab).
static void order_by_token(zinf_model *m, int n) {
    int V = m->p.shape.vocab_size;
    int32_t *start = m->h_token_starts;
    memset(start, 0, ((size_t)V + 1) * sizeof *start);
    for (int i = 0; i < n; i++)
        start[m->h_tok[i] + 1]++;
    for (int v = 0; v < V; v++)
        start[v + 1] += start[v];
    for (int i = 0; i < n; i++)
        m->h_order[start[m->h_tok[i]]++] = i;
}

zinf_status zinf_model_set_batch(zinf_model *m, zinf_stream *s, const int32_t *tokens, const int32_t *targets,
                                 int batch, float dloss) {
    if (batch < 1 || batch > m->p.batch)
        return zinf_fail(ZINF_ERR_INVAL, "%s: batch of %d sequences; the model was made for 1..%d", m->fam->name, batch,
                         m->p.batch);
    int n = batch * m->p.seq_len, V = m->p.shape.vocab_size;
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= V || targets[i] < 0 || targets[i] >= V)
            return zinf_fail(ZINF_ERR_INVAL, "%s: token %d at position %d is outside the vocabulary (0..%d)", m->fam->name,
                             tokens[i] < 0 || tokens[i] >= V ? tokens[i] : targets[i], i, V - 1);
    // The stream's work goes on: only the last batch's copies are waited for, and the
    // caller's memory is copied here, never read by the stream.
    ZINF_CHECK(zinf_event_sync(m->batch_copied));
    memcpy(m->h_tok, tokens, (size_t)n * sizeof *tokens);
    memcpy(m->h_targets, targets, (size_t)n * sizeof *targets);
    order_by_token(m, n);
    ZINF_CHECK(zinf_copy_async(s, m->tok, m->h_tok, (size_t)n * 4, ZINF_COPY_H2D));
    ZINF_CHECK(zinf_copy_async(s, m->targets, m->h_targets, (size_t)n * 4, ZINF_COPY_H2D));
    ZINF_CHECK(zinf_copy_async(s, m->order, m->h_order, (size_t)n * 4, ZINF_COPY_H2D));
    ZINF_CHECK(zinf_event_record(m->batch_copied, s));
    m->b = batch;
    m->dloss = dloss;
    return ZINF_OK;
}

// The elements of module mod's flat gradient g that no parameter covers (the 64-element
// alignment, the head's pad rows), zeroed: the backward's ops write the parameters'.
static zinf_status zero_gaps(zinf_model *m, zinf_stream *s, int mod, void *g) {
    const zinf_module_info *mi = &m->mods[mod];
    size_t es = zinf_dtype_size(m->p.dtype), at = 0;
    for (int j = 0; j <= mi->nparams; j++) {
        size_t next = j < mi->nparams ? mi->params[j].offset : mi->numel;
        if (next > at) ZINF_CHECK(zinf_memset_async(s, (char *)g + at * es, 0, (next - at) * es));
        if (j < mi->nparams) at = next + mi->params[j].numel;
    }
    return ZINF_OK;
}

static zinf_status run_op(zinf_model *m, zinf_stream *s, const zinf_model_op *op, void *const *params,
                          void *const *grads) {
    if (op->pass != ZINF_PASS_BACKWARD) return m->fam->forward(m, s, op->module, params);
    int mod = op->module;
    if (!model_tiled(m, mod) && grads[mod]) ZINF_CHECK(zero_gaps(m, s, mod, grads[mod]));
    return m->fam->backward(m, s, mod, params, grads);
}

zinf_status zinf_model_run(zinf_model *m, zinf_stream *s, const zinf_model_op *op, void *const *params,
                           void *const *grads) {
    if (op->module < 0 || op->module >= m->nmod) return zinf_fail(ZINF_ERR_INVAL, "%s: no module %d", m->fam->name, op->module);
    if (m->b == 0) return zinf_fail(ZINF_ERR_INVAL, "%s: run before zinf_model_set_batch", m->fam->name);
    if (op->pass == ZINF_PASS_BACKWARD && !m->p.training)
        return zinf_fail(ZINF_ERR_INVAL, "%s: backward of a model made without training", m->fam->name);
    if (!m->p.host_checkpoints) return run_op(m, s, op, params, grads);
    if (!m->h_ckpt)
        return zinf_fail(ZINF_ERR_INVAL, "%s: lend the checkpoints' host buffer first (zinf_model_lend_checkpoints)",
                         m->fam->name);
    ZINF_CHECK(ckpt_around(m, s, op, false));
    ZINF_CHECK(run_op(m, s, op, params, grads));
    return ckpt_around(m, s, op, true);
}

zinf_status zinf_model_loss(zinf_model *m, zinf_stream *s, double *sum, int64_t *count) {
    int n = m->b * m->p.seq_len;
    ZINF_CHECK(zinf_copy_async(s, m->h_losses, m->losses, (size_t)n * sizeof *m->h_losses, ZINF_COPY_D2H));
    ZINF_CHECK(zinf_stream_sync(s));
    double t = 0;
    for (int i = 0; i < n; i++)
        t += m->h_losses[i];
    *sum = t;
    *count = n;
    return ZINF_OK;
}

zinf_status zinf_model_logits(zinf_model *m, zinf_stream *s, void *h_out) {
    int BT = m->b * m->p.seq_len;
    if (head_rows(m, BT) < BT)
        return zinf_fail(ZINF_ERR_UNSUPPORTED, "%s: the head ran in chunks of %d tokens; only the last chunk's logits "
                                               "are kept (make the model with head_chunk 0 to read them)",
                         m->fam->name, m->p.head_chunk);
    // Each row without the pad.
    size_t V = (size_t)m->p.shape.vocab_size, Vp = (size_t)zinf_model_vocab_padded(&m->p.shape);
    size_t es = zinf_dtype_size(m->p.dtype);
    for (size_t r = 0; r < (size_t)BT; r++)
        ZINF_CHECK(
            zinf_copy_async(s, (char *)h_out + r * V * es, (char *)m->logits + r * Vp * es, V * es, ZINF_COPY_D2H));
    return zinf_stream_sync(s);
}

// ---- the output layer ----
// The batch's BT rows go through the head in chunks of head_rows, so that one chunk's
// logits (rows x V) exist at a time (Liger's fused linear cross-entropy keeps none; zinf
// keeps one chunk, so that a single chunk is the plain head). The gradient of the mean
// loss is dloss / BT per row whatever the chunk. Training turns the last chunk's logits
// into their gradient in the forward; the backward uses it first, then recomputes the
// other chunks' logits one by one: one more product of the head per chunk but the last.
// Each row's logits, loss and input gradient are products over C or V alone, the same
// for any chunk; the weight's gradient sums over the rows, chunk by chunk.

// logits (rows, Vp) = lnf[r0 .. r0 + rows) W^T over the padded head (W's pad rows
// are zero), then the rows' losses over the V real columns (and their gradient, in
// place, when grad, with the pad's columns zeroed).
static zinf_status head_chunk_fwd(zinf_model *m, zinf_stream *s, const void *w, int r0, int rows, bool grad) {
    zinf_dtype dt = m->p.dtype;
    int C = m->p.shape.n_embd, V = m->p.shape.vocab_size, Vp = zinf_model_vocab_padded(&m->p.shape);
    int BT = m->b * m->p.seq_len;
    size_t es = zinf_dtype_size(dt);
    zinf_gemm_args g = {.dt = dt, .trans_b = true, .m = rows, .n = Vp, .k = C, .a = (char *)m->lnf + (size_t)r0 * C * es,
                        .lda = C, .b = w, .ldb = C, .c = m->logits, .ldc = Vp, .alpha = 1.0f};
    ZINF_CHECK(zinf_gemm(s, &g));
    return zinf_cross_entropy(s, dt, m->losses + r0, NULL, grad ? m->logits : NULL, m->logits, m->targets + r0, rows, V,
                              Vp, m->dloss / (float)BT);
}

zinf_status model_weight_grad(zinf_stream *s, zinf_dtype dt, void *dw, const void *a, int p, const void *b, int q,
                              int rows, bool first) {
    zinf_gemm_args g = {.dt = dt,
                        .trans_a = true,
                        .m = p,
                        .n = q,
                        .k = rows,
                        .a = a,
                        .lda = p,
                        .b = b,
                        .ldb = q,
                        .c = dw,
                        .ldc = q,
                        .alpha = 1.0f,
                        .beta = first ? 0.0f : 1.0f};
    return zinf_gemm(s, &g);
}

// From the chunk's logit gradient: dw += dlogits^T lnf[r0 ..] (written by the first
// chunk), dln[r0 ..] = dlogits W, over the padded head (the pad's gradient columns are
// zero, so are its rows of dw).
static zinf_status head_chunk_bwd(zinf_model *m, zinf_stream *s, const void *w, void *dw, int r0, int rows,
                                  bool first) {
    zinf_dtype dt = m->p.dtype;
    int C = m->p.shape.n_embd, Vp = zinf_model_vocab_padded(&m->p.shape);
    size_t off = (size_t)r0 * C * zinf_dtype_size(dt);
    ZINF_CHECK(model_weight_grad(s, dt, dw, m->logits, Vp, (char *)m->lnf + off, C, rows, first));
    zinf_gemm_args gx = {.dt = dt, .m = rows, .n = C, .k = Vp, .a = m->logits, .lda = Vp, .b = w, .ldb = C,
                         .c = (char *)m->dln + off, .ldc = C, .alpha = 1.0f};
    return zinf_gemm(s, &gx);
}

// The module whose flat buffer starts with the head's weight (V rows of C): the head, or
// the embedding it is tied to.
static int head_weights(const zinf_model *m) {
    int h = mod_head(m->p.shape.n_layer);
    return m->mods[h].external >= 0 ? m->mods[h].external : h;
}
static zinf_status head_tiles_fwd(zinf_model *m, zinf_stream *s, int mod);
static zinf_status head_tiles_bwd(zinf_model *m, zinf_stream *s, int mod);

zinf_status model_head_fwd(zinf_model *m, zinf_stream *s, const void *w) {
    int BT = m->b * m->p.seq_len, n = head_rows(m, BT);
    if (model_tiled(m, head_weights(m))) return head_tiles_fwd(m, s, head_weights(m));
    for (int r0 = 0; r0 < BT; r0 += n) {
        int rows = BT - r0 < n ? BT - r0 : n;
        ZINF_CHECK(head_chunk_fwd(m, s, w, r0, rows, m->p.training && r0 + rows == BT));
    }
    return ZINF_OK;
}

zinf_status model_head_bwd(zinf_model *m, zinf_stream *s, const void *w, void *dw) {
    int BT = m->b * m->p.seq_len, n = head_rows(m, BT), last = (BT - 1) / n * n;
    if (model_tiled(m, head_weights(m))) return head_tiles_bwd(m, s, head_weights(m));
    ZINF_CHECK(head_chunk_bwd(m, s, w, dw, last, BT - last, true));
    for (int r0 = 0; r0 < last; r0 += n) {
        ZINF_CHECK(head_chunk_fwd(m, s, w, r0, n, true));
        ZINF_CHECK(head_chunk_bwd(m, s, w, dw, r0, n, false));
    }
    return ZINF_OK;
}

// ---- the embedding, whole or in tiles ----
// A tiled embedding comes as pieces of its flat buffer: each tile holds one run of every
// rank's slice. A run may start or end inside a row, or straddle wte and wpe; the ops
// take the elements of each table it holds (zinf_embedding_part). The forward adds each
// run into a zeroed output, which gives the plain op's bits in any order (gpu/ops.c);
// the backward forms each element's sum as the plain op does, so each tile's gradient
// holds exactly the plain gradient's elements.

zinf_status zinf_model_lend_tiles(zinf_model *m, const zinf_tile_source *src) {
    for (int i = 0; src && i < m->nmod; i++)
        if (src->tiling[i].tile && (!m->mods[i].tile_unit || src->tiling[i].tile % m->mods[i].tile_unit ||
                                    src->tiling[i].slice % m->mods[i].tile_unit ||
                                    src->tiling[i].tile < m->mods[i].tile_first))
            return zinf_fail(ZINF_ERR_UNSUPPORTED, "%s: module %s cannot be computed in tiles of %zu elements",
                             m->fam->name, m->mods[i].name, src->tiling[i].tile);
    m->tiles = src;
    return ZINF_OK;
}

// The embedding module's tables: wte, then wpe where the family has one (-1: none).
enum { P_WTE = 0 };
static int embedding_wpe(const zinf_model *m) { return m->mods[MOD_EMBEDDING].nparams > 1 ? 1 : -1; }

// The op over the embedding's tiles: with dout the backward, else the forward.
static zinf_status embedding_tiles(zinf_model *m, zinf_stream *s, const void *dout) {
    const int mod = MOD_EMBEDDING, pwte = P_WTE, pwpe = embedding_wpe(m);
    const zinf_tiling *t = &m->tiles->tiling[mod];
    const zinf_module_info *mi = &m->mods[mod];
    zinf_dtype dt = m->p.dtype;
    size_t es = zinf_dtype_size(dt), nt = zinf_tiling_count(t);
    int T = m->p.seq_len, C = m->p.shape.n_embd;
    bool grad = dout != NULL;
    if (!grad) ZINF_CHECK(zinf_memset_async(s, m->encoded, 0, (size_t)m->b * T * C * es));
    for (size_t i = 0; i < nt; i++) { // the forward's tiles in order, the gradient's last first
        size_t k = grad ? nt - 1 - i : i, n = zinf_tiling_len(t, k);
        void *buf;
        ZINF_CHECK(m->tiles->get(m->tiles->ctx, s, mod, (int)k, !grad && k + 1 < nt ? (int)k + 1 : -1, grad, &buf));
        for (int r = 0; r < t->ranks; r++) {
            size_t a = (size_t)r * t->slice + k * t->tile, at_wte = 0, at_wpe = 0;
            char *run = (char *)buf + (size_t)r * n * es;
            zinf_embedding_part part = {0};
            model_overlap(&mi->params[pwte], a, n, &part.wte_lo, &part.wte_n, &at_wte);
            if (pwpe >= 0) model_overlap(&mi->params[pwpe], a, n, &part.wpe_lo, &part.wpe_n, &at_wpe);
            if (!part.wte_n && !part.wpe_n) continue;
            void *wte = part.wte_n ? run + at_wte * es : NULL, *wpe = part.wpe_n ? run + at_wpe * es : NULL;
            if (grad)
                ZINF_CHECK(zinf_embedding_bwd(s, dt, wte, wpe, dout, m->tok, m->order, m->b, T, C, &part));
            else
                ZINF_CHECK(zinf_embedding_fwd(s, dt, m->encoded, m->tok, wte, wpe, m->b, T, C, &part));
        }
        ZINF_CHECK(m->tiles->done(m->tiles->ctx, s, mod, (int)k, grad));
    }
    return ZINF_OK;
}

zinf_status model_embedding_fwd(zinf_model *m, zinf_stream *s, const void *w) {
    const int mod = MOD_EMBEDDING, pwpe = embedding_wpe(m);
    if (model_tiled(m, mod)) return embedding_tiles(m, s, NULL);
    return zinf_embedding_fwd(s, m->p.dtype, m->encoded, m->tok, param_at(m, mod, (void *)w, P_WTE),
                              pwpe >= 0 ? param_at(m, mod, (void *)w, pwpe) : NULL, m->b, m->p.seq_len,
                              m->p.shape.n_embd, NULL);
}

int zinf_model_rows_read(const zinf_model *m, const zinf_model_op *op, zinf_rows_read out[ZINF_ROWS_READ_MAX]) {
    if (op->module != MOD_EMBEDDING || op->pass == ZINF_PASS_BACKWARD || model_tiled(m, MOD_EMBEDDING) || m->b < 1)
        return 0;
    const zinf_param_info *p = m->mods[MOD_EMBEDDING].params;
    int C = m->p.shape.n_embd, T = m->p.seq_len, pwpe = embedding_wpe(m), n = 0;
    out[n++] = (zinf_rows_read){.offset = p[P_WTE].offset, .row_len = C, .rows = m->tok, .count = m->b * T};
    if (pwpe >= 0) out[n++] = (zinf_rows_read){.offset = p[pwpe].offset, .row_len = C, .count = T};
    return n;
}

// The lookup's backward adds each position's gradient into its rows of the tables: from
// zeros, but for wte where the head tied to it wrote it first.
zinf_status model_embedding_bwd(zinf_model *m, zinf_stream *s, void *dw, const void *dout) {
    const int mod = MOD_EMBEDDING, pwte = P_WTE, pwpe = embedding_wpe(m);
    if (model_tiled(m, mod)) return embedding_tiles(m, s, dout);
    const zinf_param_info *p = m->mods[mod].params;
    size_t es = zinf_dtype_size(m->p.dtype);
    if (m->mods[mod_head(m->p.shape.n_layer)].external != mod)
        ZINF_CHECK(zinf_memset_async(s, param_at(m, mod, dw, pwte), 0, p[pwte].numel * es));
    if (pwpe >= 0) ZINF_CHECK(zinf_memset_async(s, param_at(m, mod, dw, pwpe), 0, p[pwpe].numel * es));
    return zinf_embedding_bwd(s, m->p.dtype, param_at(m, mod, dw, pwte), pwpe >= 0 ? param_at(m, mod, dw, pwpe) : NULL,
                              dout, m->tok, m->order, m->b, m->p.seq_len, m->p.shape.n_embd, NULL);
}

int zinf_model_tile_sweeps(const zinf_model *m, const zinf_model_op *op, int mod, bool *grad) {
    int BT = m->p.batch * m->p.seq_len, n = head_rows(m, BT);
    bool bwd = op->pass == ZINF_PASS_BACKWARD, head = op->module == mod_head(m->p.shape.n_layer);
    *grad = false;
    if (head && mod == head_weights(m)) { // the output layer: once per chunk in the forward
        *grad = bwd;
        return bwd ? 1 : (BT + n - 1) / n;
    }
    if (op->module != mod) return 0;
    *grad = bwd;
    if (mod == MOD_EMBEDDING) return bwd ? 0 : 1; // the embedding's backward reads no parameters
    return 2;                                     // an MLP: twice each way (mlp_tiles.c)
}

// ---- the output layer in tiles ----
// A head too big to gather whole (its own weight, or the embedding it is tied to, whose
// flat buffer starts with the weight) comes in tiles of whole rows of the weight:
// each rank's run of a tile is a block of the vocabulary. The forward goes chunk by
// chunk as above, each chunk's logits made block by block (so each chunk sweeps the
// tiles once), then the cross-entropy on whole rows as before, keeping each row's
// log-sum-exp. The backward goes tile by tile, each swept once and its gradient then
// reduced: for every chunk, in the plain backward's order (the last first), a block's
// logits again, their gradient from the kept log-sum-exp (zinf_cross_entropy_grad,
// the fused op's bits), the block's weight gradient added, and its share of the input
// gradient added into dln. So the losses and the weight gradient are the plain head's
// bits where the backend's product gives an element the same bits in any block of
// rows or columns; the input gradient sums over the vocabulary block by block, rounded
// to the dtype after each: within rounding of the plain one.

// Rank r's run of tile k as rows of the vocabulary: [*v0, *v0 + *nv) (none past V: the
// pad's rows, zero, are left out of the products).
static void head_run(const zinf_model *m, const zinf_tiling *t, size_t k, int r, int *v0, int *nv) {
    size_t C = (size_t)m->p.shape.n_embd, V = (size_t)m->p.shape.vocab_size;
    size_t a = ((size_t)r * t->slice + k * t->tile) / C, e = a + zinf_tiling_len(t, k) / C;
    *v0 = (int)a, *nv = a < V ? (int)((e < V ? e : V) - a) : 0;
}

static zinf_status head_tiles_fwd(zinf_model *m, zinf_stream *s, int mod) {
    const zinf_tiling *t = &m->tiles->tiling[mod];
    zinf_dtype dt = m->p.dtype;
    int C = m->p.shape.n_embd, V = m->p.shape.vocab_size, Vp = zinf_model_vocab_padded(&m->p.shape);
    int BT = m->b * m->p.seq_len, n = head_rows(m, BT);
    size_t es = zinf_dtype_size(dt), nt = zinf_tiling_count(t);
    for (int r0 = 0; r0 < BT; r0 += n) {
        int rows = BT - r0 < n ? BT - r0 : n;
        for (size_t k = 0; k < nt; k++) {
            void *w;
            int next = k + 1 < nt ? (int)k + 1 : r0 + rows < BT ? 0 : -1; // the next chunk's first
            ZINF_CHECK(m->tiles->get(m->tiles->ctx, s, mod, (int)k, next, false, &w));
            for (int r = 0; r < t->ranks; r++) {
                int v0, nv;
                head_run(m, t, k, r, &v0, &nv);
                if (!nv) continue;
                zinf_gemm_args g = {.dt = dt, .trans_b = true, .m = rows, .n = nv, .k = C,
                                    .a = (char *)m->lnf + (size_t)r0 * C * es, .lda = C,
                                    .b = (char *)w + (size_t)r * zinf_tiling_len(t, k) * es, .ldb = C,
                                    .c = (char *)m->logits + (size_t)v0 * es, .ldc = Vp, .alpha = 1.0f};
                ZINF_CHECK(zinf_gemm(s, &g));
            }
            ZINF_CHECK(m->tiles->done(m->tiles->ctx, s, mod, (int)k, false));
        }
        ZINF_CHECK(zinf_cross_entropy(s, dt, m->losses + r0, m->p.training ? m->lse + r0 : NULL, NULL, m->logits,
                                      m->targets + r0, rows, V, Vp, m->dloss / (float)BT));
    }
    return ZINF_OK;
}

static zinf_status head_tiles_bwd(zinf_model *m, zinf_stream *s, int mod) {
    const zinf_tiling *t = &m->tiles->tiling[mod];
    zinf_dtype dt = m->p.dtype;
    int C = m->p.shape.n_embd, BT = m->b * m->p.seq_len, n = head_rows(m, BT), last = (BT - 1) / n * n;
    size_t es = zinf_dtype_size(dt), nt = zinf_tiling_count(t);
    ZINF_CHECK(zinf_memset_async(s, m->dln, 0, (size_t)BT * C * es));
    for (size_t k = nt; k-- > 0;) { // gradient tiles come last first
        void *w, *dw;
        ZINF_CHECK(m->tiles->get(m->tiles->ctx, s, mod, (int)k, k ? (int)k - 1 : -1, false, &w));
        ZINF_CHECK(m->tiles->get(m->tiles->ctx, s, mod, (int)k, -1, true, &dw));
        for (int i = 0; i * n < BT; i++) { // the last chunk first, then the others in order
            int r0 = i == 0 ? last : (i - 1) * n, rows = BT - r0 < n ? BT - r0 : n;
            char *x = (char *)m->lnf + (size_t)r0 * C * es, *dx = (char *)m->dln + (size_t)r0 * C * es;
            for (int r = 0; r < t->ranks; r++) {
                int v0, nv;
                head_run(m, t, k, r, &v0, &nv);
                if (!nv) continue;
                size_t run = (size_t)r * zinf_tiling_len(t, k) * es;
                zinf_gemm_args g = {.dt = dt, .trans_b = true, .m = rows, .n = nv, .k = C, .a = x, .lda = C,
                                    .b = (char *)w + run, .ldb = C, .c = m->logits, .ldc = nv, .alpha = 1.0f};
                ZINF_CHECK(zinf_gemm(s, &g));
                ZINF_CHECK(zinf_cross_entropy_grad(s, dt, m->logits, m->logits, m->targets + r0, m->lse + r0, rows, nv,
                                                   v0, m->dloss / (float)BT));
                zinf_gemm_args gw = {.dt = dt, .trans_a = true, .m = nv, .n = C, .k = rows, .a = m->logits, .lda = nv,
                                     .b = x, .ldb = C, .c = (char *)dw + run, .ldc = C, .alpha = 1.0f, .beta = 1.0f};
                ZINF_CHECK(zinf_gemm(s, &gw));
                zinf_gemm_args gx = {.dt = dt, .m = rows, .n = C, .k = nv, .a = m->logits, .lda = nv,
                                     .b = (char *)w + run, .ldb = C, .c = dx, .ldc = C, .alpha = 1.0f,
                                     .beta = 1.0f};
                ZINF_CHECK(zinf_gemm(s, &gx));
            }
        }
        ZINF_CHECK(m->tiles->done(m->tiles->ctx, s, mod, (int)k, true));
        ZINF_CHECK(m->tiles->done(m->tiles->ctx, s, mod, (int)k, false));
    }
    return ZINF_OK;
}
