// The Llama family (Llama 2/3.x, Mistral, Qwen2, SmolLM2) as Hugging Face's
// LlamaForCausalLM, MistralForCausalLM and Qwen2ForCausalLM compute it: pre-norm
// blocks with RMSNorm, rotary embeddings (rotate-half) on q and k, grouped-query
// attention with an optional sliding window, a SwiGLU MLP, Linear weights (out, in), a
// head tied to the embedding or its own. Modules and schedule are GPT-2's; q|k|v and
// gate|up sit back to back in the flat buffer, so each is one product.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_internal.h"

// Parameter indices: attn [ln, q, k, v, o, (q, k, v biases), (o bias)], mlp [ln, gate,
// up, down, (gate, up, down biases)]; the biases' indices depend on the shape.
enum { P_LN = 0, P_Q, P_K, P_V, P_O, P_QB };
enum { P_GATE = 1, P_UP, P_DOWN, P_GATE_B };

static bool qkv_bias(const zinf_model_shape *s) { return s->arch == ZINF_ARCH_QWEN2 || s->attention_bias; }
static int o_bias_idx(const zinf_model_shape *s) { return qkv_bias(s) ? P_QB + 3 : P_QB; }

// ---- tables ----

static int count(const zinf_model_shape *s) {
    int attn = 5 + (qkv_bias(s) ? 3 : 0) + (s->attention_bias ? 1 : 0), mlp = 4 + (s->mlp_bias ? 3 : 0);
    return 1 + s->n_layer * (attn + mlp) + 1 + (s->tied ? 0 : 1);
}

// Hugging Face's _init_weights: normal(0, initializer_range 0.02) for Linear weights
// and the embedding, zero biases, unit RMSNorm weights.
static void tables(zinf_model *m) {
    const zinf_model_shape *s = &m->p.shape;
    int L = s->n_layer;
    int64_t C = s->n_embd, q = (int64_t)s->n_head * s->head_dim, kv = (int64_t)s->n_kv_head * s->head_dim, F = s->ffn;
    zinf_param_info *next = m->params;
    char name[64];
#define ADD(aligned, init, d0, d1, ...)                                                                                \
    (snprintf(name, sizeof name, __VA_ARGS__), model_add_param(mod, next, name, d0, d1, aligned, init, 0.02))
    for (int i = 0; i < m->nmod; i++) {
        zinf_module_info *mod = &m->mods[i];
        mod->params = next;
        mod->external = -1;
        if (i == MOD_EMBEDDING) {
            snprintf(mod->name, sizeof mod->name, "embedding");
            if (s->tied)
                model_add_head_weight(mod, next, "model.embed_tokens.weight", s, ZINF_INIT_NORMAL, 0.02);
            else
                ADD(true, ZINF_INIT_NORMAL, s->vocab_size, C, "model.embed_tokens.weight");
            mod->tile_unit = s->tied ? (size_t)C : 1; // a tied head reads its rows
        } else if (i == mod_norm(L)) {
            snprintf(mod->name, sizeof mod->name, "norm");
            ADD(true, ZINF_INIT_ONE, C, 0, "model.norm.weight");
        } else if (i == mod_head(L)) {
            snprintf(mod->name, sizeof mod->name, "head");
            if (s->tied)
                mod->external = MOD_EMBEDDING;
            else
                model_add_head_weight(mod, next, "lm_head.weight", s, ZINF_INIT_NORMAL, 0.02);
            mod->tile_unit = s->tied ? 0 : (size_t)C; // whole rows: a block of the vocabulary
        } else if (i == mod_attn((i - 1) / 2)) {
            int l = (i - 1) / 2;
            snprintf(mod->name, sizeof mod->name, "layers.%d.attn", l);
            const char *at = "model.layers.%d.self_attn.%s";
            ADD(true, ZINF_INIT_ONE, C, 0, "model.layers.%d.input_layernorm.weight", l);
            ADD(true, ZINF_INIT_NORMAL, q, C, at, l, "q_proj.weight");
            ADD(false, ZINF_INIT_NORMAL, kv, C, at, l, "k_proj.weight");
            ADD(false, ZINF_INIT_NORMAL, kv, C, at, l, "v_proj.weight");
            ADD(true, ZINF_INIT_NORMAL, C, q, at, l, "o_proj.weight");
            if (qkv_bias(s)) {
                ADD(true, ZINF_INIT_ZERO, q, 0, at, l, "q_proj.bias");
                ADD(false, ZINF_INIT_ZERO, kv, 0, at, l, "k_proj.bias");
                ADD(false, ZINF_INIT_ZERO, kv, 0, at, l, "v_proj.bias");
            }
            if (s->attention_bias) ADD(true, ZINF_INIT_ZERO, C, 0, at, l, "o_proj.bias");
        } else {
            int l = (i - 2) / 2;
            snprintf(mod->name, sizeof mod->name, "layers.%d.mlp", l);
            const char *mp = "model.layers.%d.mlp.%s";
            ADD(true, ZINF_INIT_ONE, C, 0, "model.layers.%d.post_attention_layernorm.weight", l);
            ADD(true, ZINF_INIT_NORMAL, F, C, mp, l, "gate_proj.weight");
            ADD(false, ZINF_INIT_NORMAL, F, C, mp, l, "up_proj.weight");
            ADD(true, ZINF_INIT_NORMAL, C, F, mp, l, "down_proj.weight");
            if (s->mlp_bias) {
                ADD(true, ZINF_INIT_ZERO, F, 0, mp, l, "gate_proj.bias");
                ADD(false, ZINF_INIT_ZERO, F, 0, mp, l, "up_proj.bias");
                ADD(true, ZINF_INIT_ZERO, C, 0, mp, l, "down_proj.bias");
            }
            mod->tile_unit = 1; // in tiles of any runs (mlp_tiles.c), the norm in tile 0
            mod->tile_first = (size_t)C;
        }
#undef ADD
        next += mod->nparams;
    }
}

static zinf_status check(const zinf_model_shape *s) {
    if (s->head_dim % 2)
        return zinf_fail(ZINF_ERR_INVAL, "llama: head_dim %d is odd; rotary embeddings pair channels", s->head_dim);
    if (!(s->norm_eps > 0) || !(s->rope_theta > 0))
        return zinf_fail(ZINF_ERR_INVAL, "llama: norm_eps and rope_theta must be positive");
    if (s->rope_type != ZINF_ROPE_DEFAULT && !(s->rope_factor > 0))
        return zinf_fail(ZINF_ERR_INVAL, "llama: rope factor %g is not positive", s->rope_factor);
    if (s->rope_type == ZINF_ROPE_LLAMA3 &&
        !(s->rope_high_freq_factor > s->rope_low_freq_factor && s->rope_low_freq_factor > 0 &&
          s->rope_original_max_position > 0))
        return zinf_fail(ZINF_ERR_INVAL, "llama: llama3 rope needs 0 < low_freq_factor < high_freq_factor and an "
                                         "original_max_position_embeddings");
    return ZINF_OK;
}

static act_widths widths(const zinf_model_shape *s) {
    int q = s->n_head * s->head_dim;
    return (act_widths){
        .qkv = q + 2 * s->n_kv_head * s->head_dim, .att = q, .fc = 2 * s->ffn, .act = s->ffn, .rope = true};
}

// ---- rotary angles ----

// inv_freq as transformers computes it, in fp32 throughout (modeling_rope_utils.py):
// 1 / theta^(2i / d), then the rope type's rescaling. Positions never pass
// block_size (max_position_embeddings), where dynamic scaling is the default's.
static float inv_freq(const zinf_model_shape *s, int i) {
    float d = (float)s->head_dim;
    float inv = 1.0f / powf((float)s->rope_theta, (float)(2 * i) / d);
    float f = (float)s->rope_factor;
    if (s->rope_type == ZINF_ROPE_LINEAR) return inv / f;
    if (s->rope_type != ZINF_ROPE_LLAMA3) return inv;
    double L0 = s->rope_original_max_position, lo = s->rope_low_freq_factor, hi = s->rope_high_freq_factor;
    float wl = (float)(2 * M_PI) / inv;
    float scaled = wl > (float)(L0 / lo) ? inv / f : inv;
    if (wl < (float)(L0 / hi) || wl > (float)(L0 / lo)) return scaled;
    float sm = ((float)L0 / wl - (float)lo) / (float)(hi - lo);
    return (1.0f - sm) * scaled / f + sm * scaled;
}

// cos and sin of position t times inv_freq[i], the product rounded to fp32 as
// transformers' fp32 matmul rounds it, for t < seq_len and i < head_dim / 2.
static zinf_status prepare(zinf_model *m) {
    const zinf_model_shape *s = &m->p.shape;
    int T = m->p.seq_len, half = s->head_dim / 2;
    size_t n = (size_t)T * half;
    float *c = malloc(2 * n * sizeof *c);
    if (!c) return zinf_fail(ZINF_ERR_NOMEM, "llama: out of memory for the rotary angles");
    for (int i = 0; i < half; i++) {
        float inv = inv_freq(s, i);
        for (int t = 0; t < T; t++) {
            float a = (float)t * inv;
            c[(size_t)t * half + i] = cosf(a);
            c[n + (size_t)t * half + i] = sinf(a);
        }
    }
    zinf_status rc = model_upload(m, m->rope_cos, c, n * 4);
    if (rc == ZINF_OK) rc = model_upload(m, m->rope_sin, c + n, n * 4);
    free(c);
    return rc;
}

// ---- passes ----

#define param param_at

// y (rows x out) = x (rows x in) W^T + bias (+ residual, the block's, added in the
// product; NULL: none), W (out, in) as nn.Linear keeps it.
static zinf_status linear(zinf_stream *s, zinf_dtype dt, void *y, const void *x, const void *w, const void *bias,
                          int rows, int in, int out, const void *residual) {
    zinf_gemm_args g = {.dt = dt, .trans_b = true, .m = rows, .n = out, .k = in, .a = x, .lda = in, .b = w,
                        .ldb = in, .c = y, .ldc = out, .bias = bias, .alpha = 1.0f, .residual = residual};
    return zinf_gemm(s, &g);
}

// Its backward: dW = dy^T x, dbias = column sums of dy (when there is a bias), dx = dy
// W, all written (each the backward's only write of it).
static zinf_status linear_bwd(zinf_stream *s, zinf_dtype dt, void *dx, void *dw, void *dbias, const void *dy,
                              const void *x, const void *w, int rows, int in, int out) {
    ZINF_CHECK(model_weight_grad(s, dt, dw, dy, out, x, in, rows, true));
    if (dbias) ZINF_CHECK(zinf_bias_grad(s, dt, dbias, dy, rows, out, true));
    zinf_gemm_args gx = {.dt = dt, .m = rows, .n = in, .k = out, .a = dy, .lda = out, .b = w, .ldb = in, .c = dx,
                         .ldc = in, .alpha = 1.0f};
    return zinf_gemm(s, &gx);
}

// The bias at idx, or NULL without one; buf is the module's params or grads.
static void *bias(const zinf_model *m, int mod, void *buf, int idx, bool has) {
    return has ? param(m, mod, buf, idx) : NULL;
}

static zinf_attention_args attention(const zinf_model *m, int l, layer_acts *a) {
    const zinf_model_shape *s = &m->p.shape;
    return (zinf_attention_args){.dt = m->p.dtype, .B = m->b, .T = m->p.seq_len, .C = m->w.att, .NH = s->n_head,
                                 .NKV = s->n_kv_head, .hd = s->head_dim,
                                 .window = l >= s->window_from ? s->window : 0, .qkv = a->qkv, .out = a->atty,
                                 .lse = a->lse, .ws = m->att_ws};
}

static zinf_status attn_fwd(zinf_model *m, zinf_stream *s, int l, void *w) {
    const zinf_model_shape *sh = &m->p.shape;
    zinf_dtype dt = m->p.dtype;
    int mod = mod_attn(l), BT = m->b * m->p.seq_len, C = sh->n_embd;
    layer_acts *a = acts_of(m, l);
    void *x = block_input(m, l);
    ZINF_CHECK(zinf_rmsnorm_fwd(s, dt, a->ln1, a->ln1_rstd, x, param(m, mod, w, P_LN), BT, C, (float)sh->norm_eps));
    ZINF_CHECK(linear(s, dt, a->qkv, a->ln1, param(m, mod, w, P_Q), bias(m, mod, w, P_QB, qkv_bias(sh)), BT, C,
                      m->w.qkv, NULL));
    ZINF_CHECK(zinf_rope_fwd(s, dt, a->qkv, m->rope_cos, m->rope_sin, m->b, m->p.seq_len, sh->n_head, sh->n_kv_head,
                             sh->head_dim));
    zinf_attention_args at = attention(m, l, a);
    ZINF_CHECK(zinf_attention_fwd(s, &at));
    return linear(s, dt, a->res2, a->atty, param(m, mod, w, P_O), bias(m, mod, w, o_bias_idx(sh), sh->attention_bias),
                  BT, m->w.att, C, x);
}

// The MLP's post-attention norm from its parameters w, and its SwiGLU (model_mlp).
static zinf_status mlp_norm_fwd(zinf_model *m, zinf_stream *s, int l, const void *w) {
    layer_acts *a = acts_of(m, l);
    return zinf_rmsnorm_fwd(s, m->p.dtype, a->ln2, a->ln2_rstd, a->res2, param(m, mod_mlp(l), (void *)w, P_LN),
                            m->b * m->p.seq_len, m->p.shape.n_embd, (float)m->p.shape.norm_eps);
}

static zinf_status mlp_act_fwd(zinf_model *m, zinf_stream *s, int l) {
    layer_acts *a = acts_of(m, l);
    return zinf_swiglu_fwd(s, m->p.dtype, a->act, a->fc, m->b * m->p.seq_len, m->p.shape.ffn);
}

static zinf_status mlp_fwd(zinf_model *m, zinf_stream *s, int l, void *w) {
    const zinf_model_shape *sh = &m->p.shape;
    zinf_dtype dt = m->p.dtype;
    int mod = mod_mlp(l), BT = m->b * m->p.seq_len, C = sh->n_embd, F = sh->ffn;
    layer_acts *a = acts_of(m, l);
    if (model_tiled(m, mod)) return model_mlp_tiles_fwd(m, s, l);
    ZINF_CHECK(mlp_norm_fwd(m, s, l, w));
    ZINF_CHECK(linear(s, dt, a->fc, a->ln2, param(m, mod, w, P_GATE), bias(m, mod, w, P_GATE_B, sh->mlp_bias), BT, C,
                      2 * F, NULL));
    ZINF_CHECK(mlp_act_fwd(m, s, l));
    return linear(s, dt, m->res3[l], a->act, param(m, mod, w, P_DOWN), bias(m, mod, w, P_GATE_B + 2, sh->mlp_bias), BT,
                  F, C, a->res2);
}

// The head's weight: lm_head, or the embedding it is tied to.
static void *head_weight(const zinf_model *m, void *const *bufs) {
    int L = m->p.shape.n_layer;
    return m->p.shape.tied ? param(m, MOD_EMBEDDING, bufs[MOD_EMBEDDING], 0) : param(m, mod_head(L), bufs[mod_head(L)], 0);
}

static zinf_status forward(zinf_model *m, zinf_stream *s, int mod, void *const *params) {
    const zinf_model_shape *sh = &m->p.shape;
    zinf_dtype dt = m->p.dtype;
    int L = sh->n_layer, T = m->p.seq_len, BT = m->b * T, C = sh->n_embd;
    if (mod == MOD_EMBEDDING) return model_embedding_fwd(m, s, params[mod]);
    if (mod == mod_norm(L))
        return zinf_rmsnorm_fwd(s, dt, m->lnf, m->lnf_rstd, m->res3[L - 1], param(m, mod, params[mod], 0), BT, C,
                                (float)sh->norm_eps);
    if (mod == mod_head(L)) return model_head_fwd(m, s, head_weight(m, params));
    int l = (mod - 1) / 2;
    return mod == mod_attn(l) ? attn_fwd(m, s, l, params[mod]) : mlp_fwd(m, s, l, params[mod]);
}

// RMSNorm's backward adds its input gradient into the residual's and writes its weight's.
static zinf_status norm_bwd(zinf_model *m, zinf_stream *s, void *dw, const void *x, const void *w, const float *rstd) {
    return zinf_rmsnorm_bwd(s, m->p.dtype, m->dres, dw, m->dln, x, w, rstd, m->b * m->p.seq_len, m->p.shape.n_embd,
                            true);
}

// The MLP's norm and SwiGLU backward (model_mlp).
static zinf_status mlp_norm_bwd(zinf_model *m, zinf_stream *s, int l, const void *w, void *g) {
    int mod = mod_mlp(l);
    layer_acts *a = acts_of(m, l);
    return norm_bwd(m, s, param(m, mod, g, P_LN), a->res2, param(m, mod, (void *)w, P_LN), a->ln2_rstd);
}

static zinf_status mlp_act_bwd(zinf_model *m, zinf_stream *s, int l) {
    return zinf_swiglu_bwd(s, m->p.dtype, m->dfc, acts_of(m, l)->fc, m->dact, m->b * m->p.seq_len, m->p.shape.ffn);
}

static zinf_status attn_bwd(zinf_model *m, zinf_stream *s, int l, void *w, void *g) {
    const zinf_model_shape *sh = &m->p.shape;
    zinf_dtype dt = m->p.dtype;
    int mod = mod_attn(l), BT = m->b * m->p.seq_len, C = sh->n_embd, ob = o_bias_idx(sh);
    layer_acts *a = acts_of(m, l);
    ZINF_CHECK(linear_bwd(s, dt, m->datty, param(m, mod, g, P_O), bias(m, mod, g, ob, sh->attention_bias), m->dres,
                          a->atty, param(m, mod, w, P_O), BT, m->w.att, C));
    zinf_attention_args at = attention(m, l, a);
    at.dqkv = m->dqkv, at.dout = m->datty;
    ZINF_CHECK(zinf_attention_bwd(s, &at));
    ZINF_CHECK(zinf_rope_bwd(s, dt, m->dqkv, m->rope_cos, m->rope_sin, m->b, m->p.seq_len, sh->n_head, sh->n_kv_head,
                             sh->head_dim));
    ZINF_CHECK(linear_bwd(s, dt, m->dln, param(m, mod, g, P_Q), bias(m, mod, g, P_QB, qkv_bias(sh)), m->dqkv, a->ln1,
                          param(m, mod, w, P_Q), BT, C, m->w.qkv));
    return norm_bwd(m, s, param(m, mod, g, P_LN), block_input(m, l), param(m, mod, w, P_LN), a->ln1_rstd);
}

static zinf_status mlp_bwd(zinf_model *m, zinf_stream *s, int l, void *w, void *g) {
    const zinf_model_shape *sh = &m->p.shape;
    zinf_dtype dt = m->p.dtype;
    int mod = mod_mlp(l), BT = m->b * m->p.seq_len, C = sh->n_embd, F = sh->ffn;
    layer_acts *a = acts_of(m, l);
    if (model_tiled(m, mod)) return model_mlp_tiles_bwd(m, s, l);
    ZINF_CHECK(linear_bwd(s, dt, m->dact, param(m, mod, g, P_DOWN), bias(m, mod, g, P_GATE_B + 2, sh->mlp_bias),
                          m->dres, a->act, param(m, mod, w, P_DOWN), BT, F, C));
    ZINF_CHECK(mlp_act_bwd(m, s, l));
    ZINF_CHECK(linear_bwd(s, dt, m->dln, param(m, mod, g, P_GATE), bias(m, mod, g, P_GATE_B, sh->mlp_bias), m->dfc,
                          a->ln2, param(m, mod, w, P_GATE), BT, C, 2 * F));
    return mlp_norm_bwd(m, s, l, w, g);
}

static void mlp(const zinf_model_shape *s, model_mlp *d) {
    int C = s->n_embd, F = s->ffn, b = s->mlp_bias ? P_GATE_B : -1;
    *d = (model_mlp){.dact = true,
                     .lin = {{.w = {P_GATE, P_UP}, .b = {b, b < 0 ? -1 : b + 1}, .in = C, .out = 2 * F},
                             {.w = {P_DOWN, -1}, .b = {b < 0 ? -1 : b + 2, -1}, .in = F, .out = C}},
                     .norm_fwd = mlp_norm_fwd,
                     .norm_bwd = mlp_norm_bwd,
                     .act_fwd = mlp_act_fwd,
                     .act_bwd = mlp_act_bwd};
}

static zinf_status backward(zinf_model *m, zinf_stream *s, int mod, void *const *params, void *const *grads) {
    const zinf_model_shape *sh = &m->p.shape;
    zinf_dtype dt = m->p.dtype;
    int L = sh->n_layer, T = m->p.seq_len, BT = m->b * T, C = sh->n_embd;
    if (mod == mod_head(L)) return model_head_bwd(m, s, head_weight(m, params), head_weight(m, grads));
    if (mod == mod_norm(L)) { // the residual's gradient starts here
        ZINF_CHECK(zinf_memset_async(s, m->dres, 0, (size_t)BT * C * zinf_dtype_size(dt)));
        return zinf_rmsnorm_bwd(s, dt, m->dres, param(m, mod, grads[mod], 0), m->dln, m->res3[L - 1],
                                param(m, mod, params[mod], 0), m->lnf_rstd, BT, C, true);
    }
    if (mod == MOD_EMBEDDING) return model_embedding_bwd(m, s, grads[mod], m->dres);
    int l = (mod - 1) / 2;
    return mod == mod_attn(l) ? attn_bwd(m, s, l, params[mod], grads[mod]) : mlp_bwd(m, s, l, params[mod], grads[mod]);
}

// ---- Hugging Face's files ----

// transformers' order: the embedding; per layer self_attn (q, k, v, o, each weight then
// bias), mlp (gate, up, down), input_layernorm, post_attention_layernorm; the final
// norm; lm_head.
static int64_t hf_rank(const char *name) {
    static const char *const in_layer[] = {
        "self_attn.q_proj.weight", "self_attn.q_proj.bias", "self_attn.k_proj.weight", "self_attn.k_proj.bias",
        "self_attn.v_proj.weight", "self_attn.v_proj.bias", "self_attn.o_proj.weight", "self_attn.o_proj.bias",
        "mlp.gate_proj.weight",    "mlp.gate_proj.bias",    "mlp.up_proj.weight",      "mlp.up_proj.bias",
        "mlp.down_proj.weight",    "mlp.down_proj.bias",    "input_layernorm.weight",  "post_attention_layernorm.weight"};
    enum { PER_LAYER = sizeof in_layer / sizeof *in_layer, END = 1 << 30 };
    int l, at = 0;
    if (sscanf(name, "model.layers.%d.%n", &l, &at) == 1 && at > 0)
        for (int i = 0; i < PER_LAYER; i++)
            if (strcmp(name + at, in_layer[i]) == 0) return 1 + (int64_t)l * PER_LAYER + i;
    if (strcmp(name, "model.norm.weight") == 0) return END;
    if (strcmp(name, "lm_head.weight") == 0) return END + 1;
    return 0; // model.embed_tokens.weight
}

static const char *const architectures[] = {"", "LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM"};
static const char *const model_types[] = {"", "llama", "mistral", "qwen2"};
static const char *const rope_types[] = {"default", "linear", "dynamic", "llama3"};

// The config save_pretrained writes in transformers 5 (rope_parameters, dtype), with
// what this model computes spelled out rather than left to the class's defaults.
static json_t *hf_config(const zinf_model_shape *s, zinf_dtype dt) {
    json_t *rope = json_pack("{s:s, s:f}", "rope_type", rope_types[s->rope_type], "rope_theta", s->rope_theta);
    if (rope && s->rope_type != ZINF_ROPE_DEFAULT) json_object_set_new(rope, "factor", json_real(s->rope_factor));
    if (rope && s->rope_type == ZINF_ROPE_LLAMA3) {
        json_object_set_new(rope, "low_freq_factor", json_real(s->rope_low_freq_factor));
        json_object_set_new(rope, "high_freq_factor", json_real(s->rope_high_freq_factor));
        json_object_set_new(rope, "original_max_position_embeddings", json_integer(s->rope_original_max_position));
    }
    json_t *o = json_pack("{s:[s], s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:s, s:f, s:o, s:b, s:f, s:f, s:s}",
                          "architectures", architectures[s->arch], "model_type", model_types[s->arch], "vocab_size",
                          s->vocab_size, "hidden_size", s->n_embd, "intermediate_size", s->ffn, "num_hidden_layers",
                          s->n_layer, "num_attention_heads", s->n_head, "num_key_value_heads", s->n_kv_head,
                          "max_position_embeddings", s->block_size, "hidden_act", "silu", "rms_norm_eps",
                          s->norm_eps, "rope_parameters", rope, "tie_word_embeddings", s->tied, "attention_dropout",
                          0.0, "initializer_range", 0.02, "dtype", model_torch_dtype(dt));
    if (!o) return NULL;
    if (s->arch != ZINF_ARCH_QWEN2) json_object_set_new(o, "head_dim", json_integer(s->head_dim));
    if (s->arch == ZINF_ARCH_LLAMA) {
        json_object_set_new(o, "attention_bias", json_boolean(s->attention_bias));
        json_object_set_new(o, "mlp_bias", json_boolean(s->mlp_bias));
    }
    if (s->arch == ZINF_ARCH_MISTRAL) json_object_set_new(o, "sliding_window", s->window ? json_integer(s->window) : json_null());
    if (s->arch == ZINF_ARCH_QWEN2) {
        json_object_set_new(o, "use_sliding_window", json_boolean(s->window > 0));
        json_object_set_new(o, "sliding_window", s->window ? json_integer(s->window) : json_null());
        json_object_set_new(o, "max_window_layers", json_integer(s->window ? s->window_from : s->n_layer));
    }
    return o;
}

const model_family zinf_llama_family = {
    .name = "llama",
    .check = check,
    .widths = widths,
    .mlp = mlp,
    .count = count,
    .tables = tables,
    .prepare = prepare,
    .forward = forward,
    .backward = backward,
    .hf_prefix = "",
    .hf_rank = hf_rank,
    .hf_config = hf_config,
};
