// The GPT-2 family (Radford et al. 2019; Hugging Face's GPT2LMHeadModel for names and
// layouts): its parameter tables, and its modules' forward and backward as sequences
// of device ops on one stream (the structure of llm.c's train_gpt2.cu: pre-LN blocks,
// fused QKV, tanh GELU, a head tied to wte, cross-entropy fused with its gradient).
// Backward adds to the gradient buffers; the residual stream's gradient flows through
// m->dres.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model_internal.h"

#define param param_at

// Parameter indices inside each module's table.
enum { P_WTE = 0 };                                              // then wpe (model_embedding_fwd)
enum { P_LN_W = 0, P_LN_B, P_FC_W, P_FC_B, P_PROJ_W, P_PROJ_B }; // attn: c_attn as fc; mlp: c_fc
enum { P_LNF_W = 0, P_LNF_B };

// ---- tables ----

static int count(const zinf_model_shape *s) { return 4 + 12 * s->n_layer; }

// Hugging Face's _init_weights: normal(0, 0.02) for weights and embeddings, c_proj
// weights with std 0.02 / sqrt(2 n_layer), zero biases, unit layer-norm weights.
static void tables(zinf_model *m) {
    const zinf_model_shape *s = &m->p.shape;
    int L = s->n_layer;
    int64_t C = s->n_embd;
    double proj_std = 0.02 / sqrt(2.0 * L);
    zinf_param_info *next = m->params;
    char name[64];
#define ADD(n, d0, d1, init, std) model_add_param(mod, next, n, d0, d1, true, init, std)
    for (int i = 0; i < m->nmod; i++) {
        zinf_module_info *mod = &m->mods[i];
        mod->params = next;
        mod->external = -1;
        if (i == MOD_EMBEDDING) {
            snprintf(mod->name, sizeof mod->name, "embedding");
            model_add_head_weight(mod, next, "wte.weight", s, ZINF_INIT_NORMAL, 0.02);
            ADD("wpe.weight", s->block_size, C, ZINF_INIT_NORMAL, 0.02);
            mod->tile_unit = (size_t)C; // the head reads wte's rows
        } else if (i == mod_norm(L)) {
            snprintf(mod->name, sizeof mod->name, "ln_f");
            ADD("ln_f.weight", C, 0, ZINF_INIT_ONE, 0);
            ADD("ln_f.bias", C, 0, ZINF_INIT_ZERO, 0);
        } else if (i == mod_head(L)) {
            snprintf(mod->name, sizeof mod->name, "head");
            mod->external = MOD_EMBEDDING; // tied: the head is wte transposed
        } else {
            int l = (i - 1) / 2;
            bool attn = i == mod_attn(l);
            const char *sub = attn ? "attn" : "mlp", *ln = attn ? "ln_1" : "ln_2";
            snprintf(mod->name, sizeof mod->name, "h.%d.%s", l, sub);
            int64_t wide = attn ? 3 * C : 4 * C, in = attn ? C : 4 * C;
            snprintf(name, sizeof name, "h.%d.%s.weight", l, ln), ADD(name, C, 0, ZINF_INIT_ONE, 0);
            snprintf(name, sizeof name, "h.%d.%s.bias", l, ln), ADD(name, C, 0, ZINF_INIT_ZERO, 0);
            snprintf(name, sizeof name, "h.%d.%s.%s.weight", l, sub, attn ? "c_attn" : "c_fc");
            ADD(name, C, wide, ZINF_INIT_NORMAL, 0.02);
            snprintf(name, sizeof name, "h.%d.%s.%s.bias", l, sub, attn ? "c_attn" : "c_fc");
            ADD(name, wide, 0, ZINF_INIT_ZERO, 0);
            snprintf(name, sizeof name, "h.%d.%s.c_proj.weight", l, sub), ADD(name, in, C, ZINF_INIT_NORMAL, proj_std);
            snprintf(name, sizeof name, "h.%d.%s.c_proj.bias", l, sub), ADD(name, C, 0, ZINF_INIT_ZERO, 0);
            if (!attn) { // the MLP in tiles of any runs (mlp_tiles.c), ln_2 in tile 0
                mod->tile_unit = 1;
                mod->tile_first = mod->params[P_LN_B].offset + (size_t)C;
            }
        }
#undef ADD
        next += mod->nparams;
    }
}

static zinf_status check(const zinf_model_shape *s) {
    if (s->n_kv_head != s->n_head || s->head_dim * s->n_head != s->n_embd || s->ffn != 4 * s->n_embd || !s->tied)
        return zinf_fail(ZINF_ERR_INVAL, "gpt2: n_embd %d must be n_head %d x head_dim, with every head its own kv "
                                         "head, an MLP 4 x n_embd wide and the head tied",
                         s->n_embd, s->n_head);
    return ZINF_OK;
}

static act_widths widths(const zinf_model_shape *s) {
    int C = s->n_embd;
    return (act_widths){.qkv = 3 * C, .att = C, .fc = 4 * C, .act = 4 * C, .layer_norm = true};
}

// ---- passes ----

// What a linear's product does besides in @ w + bias: GELU (the MLP's fc and act in one
// product: act ZINF_GEMM_GELU, fc in aux), or the block's residual added.
typedef struct linear_extra {
    zinf_gemm_act act;
    void *aux;
    const void *residual;
} linear_extra;

// out (rows x n) = in (rows x k) @ w (k x n, as Conv1D stores it) + bias, and x.
static zinf_status linear(zinf_stream *s, zinf_dtype dt, void *out, const void *in, const void *w, const void *bias,
                          int rows, int k, int n, linear_extra x) {
    zinf_gemm_args g = {.dt = dt, .m = rows, .n = n, .k = k, .a = in, .lda = k, .b = w, .ldb = n, .c = out, .ldc = n,
                        .bias = bias, .alpha = 1.0f, .act = x.act, .aux = x.aux, .residual = x.residual};
    return zinf_gemm(s, &g);
}

// The backward of linear: dw = in^T dout, dbias = column sums of dout, and din = dout
// w^T, all written (each the backward's only write of it); with act ZINF_GEMM_DGELU,
// din = that times GELU's derivative at aux (the MLP's GELU backward in the same
// product).
static zinf_status linear_bwd(zinf_stream *s, zinf_dtype dt, void *din, void *dw, void *dbias, const void *dout,
                              const void *in, const void *w, int rows, int k, int n, zinf_gemm_act act,
                              const void *aux) {
    ZINF_CHECK(model_weight_grad(s, dt, dw, in, k, dout, n, rows, true));
    ZINF_CHECK(zinf_bias_grad(s, dt, dbias, dout, rows, n, true));
    zinf_gemm_args gx = {.dt = dt, .trans_b = true, .m = rows, .n = k, .k = n, .a = dout, .lda = n, .b = w, .ldb = n,
                         .c = din, .ldc = k, .alpha = 1.0f, .act = act, .aux = (void *)aux};
    return zinf_gemm(s, &gx);
}

static zinf_status attn_fwd(zinf_model *m, zinf_stream *s, int l, void *w) {
    zinf_dtype dt = m->p.dtype;
    int mod = mod_attn(l), BT = m->b * m->p.seq_len, C = m->p.shape.n_embd;
    layer_acts *a = acts_of(m, l);
    void *x = block_input(m, l);
    ZINF_CHECK(zinf_layernorm_fwd(s, dt, a->ln1, a->ln1_mean, a->ln1_rstd, x, param(m, mod, w, P_LN_W),
                                  param(m, mod, w, P_LN_B), BT, C, 1e-5f));
    ZINF_CHECK(linear(s, dt, a->qkv, a->ln1, param(m, mod, w, P_FC_W), param(m, mod, w, P_FC_B), BT, C, 3 * C,
                      (linear_extra){0}));
    zinf_attention_args at = {.dt = dt, .B = m->b, .T = m->p.seq_len, .C = C, .NH = m->p.shape.n_head,
                              .qkv = a->qkv, .out = a->atty, .lse = a->lse, .ws = m->att_ws};
    ZINF_CHECK(zinf_attention_fwd(s, &at));
    // c_proj with the residual x added in the product.
    return linear(s, dt, a->res2, a->atty, param(m, mod, w, P_PROJ_W), param(m, mod, w, P_PROJ_B), BT, C, C,
                  (linear_extra){.residual = x});
}

// The MLP's ln_2 from its parameters w, its GELU, and their backwards (model_mlp).
static zinf_status mlp_norm_fwd(zinf_model *m, zinf_stream *s, int l, const void *w) {
    int mod = mod_mlp(l);
    layer_acts *a = acts_of(m, l);
    void *pw = (void *)w;
    return zinf_layernorm_fwd(s, m->p.dtype, a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, param(m, mod, pw, P_LN_W),
                              param(m, mod, pw, P_LN_B), m->b * m->p.seq_len, m->p.shape.n_embd, 1e-5f);
}

static zinf_status mlp_norm_bwd(zinf_model *m, zinf_stream *s, int l, const void *w, void *g) {
    int mod = mod_mlp(l);
    layer_acts *a = acts_of(m, l);
    return zinf_layernorm_bwd(s, m->p.dtype, m->dres, param(m, mod, g, P_LN_W), param(m, mod, g, P_LN_B), m->dln,
                              a->res2, param(m, mod, (void *)w, P_LN_W), a->ln2_mean, a->ln2_rstd, m->b * m->p.seq_len,
                              m->p.shape.n_embd, true);
}

static zinf_status mlp_act_fwd(zinf_model *m, zinf_stream *s, int l) {
    layer_acts *a = acts_of(m, l);
    return zinf_gelu_fwd(s, m->p.dtype, a->act, a->fc, (size_t)m->b * m->p.seq_len * 4 * m->p.shape.n_embd);
}

static zinf_status mlp_act_bwd(zinf_model *m, zinf_stream *s, int l) { // in place
    return zinf_gelu_bwd(s, m->p.dtype, m->dfc, acts_of(m, l)->fc, m->dfc,
                         (size_t)m->b * m->p.seq_len * 4 * m->p.shape.n_embd);
}

static void mlp(const zinf_model_shape *s, model_mlp *d) {
    int C = s->n_embd;
    *d = (model_mlp){.in_out = true,
                     .lin = {{.w = {P_FC_W, -1}, .b = {P_FC_B, -1}, .in = C, .out = 4 * C},
                             {.w = {P_PROJ_W, -1}, .b = {P_PROJ_B, -1}, .in = 4 * C, .out = C}},
                     .norm_fwd = mlp_norm_fwd,
                     .norm_bwd = mlp_norm_bwd,
                     .act_fwd = mlp_act_fwd,
                     .act_bwd = mlp_act_bwd};
}

static zinf_status mlp_fwd(zinf_model *m, zinf_stream *s, int l, void *w) {
    zinf_dtype dt = m->p.dtype;
    int mod = mod_mlp(l), BT = m->b * m->p.seq_len, C = m->p.shape.n_embd;
    layer_acts *a = acts_of(m, l);
    if (model_tiled(m, mod)) return model_mlp_tiles_fwd(m, s, l);
    ZINF_CHECK(mlp_norm_fwd(m, s, l, w));
    // c_fc and GELU in one product: act = gelu(fc), fc kept for the backward.
    ZINF_CHECK(linear(s, dt, a->act, a->ln2, param(m, mod, w, P_FC_W), param(m, mod, w, P_FC_B), BT, C, 4 * C,
                      (linear_extra){.act = ZINF_GEMM_GELU, .aux = a->fc}));
    return linear(s, dt, m->res3[l], a->act, param(m, mod, w, P_PROJ_W), param(m, mod, w, P_PROJ_B), BT, 4 * C, C,
                  (linear_extra){.residual = a->res2});
}

static zinf_status forward(zinf_model *m, zinf_stream *s, int mod, void *const *params) {
    zinf_dtype dt = m->p.dtype;
    int L = m->p.shape.n_layer, T = m->p.seq_len, BT = m->b * T, C = m->p.shape.n_embd;
    if (mod == MOD_EMBEDDING) return model_embedding_fwd(m, s, params[mod]);
    if (mod == mod_norm(L))
        return zinf_layernorm_fwd(s, dt, m->lnf, m->lnf_mean, m->lnf_rstd, m->res3[L - 1],
                                  param(m, mod, params[mod], P_LNF_W), param(m, mod, params[mod], P_LNF_B), BT, C,
                                  1e-5f);
    if (mod == mod_head(L)) return model_head_fwd(m, s, param(m, MOD_EMBEDDING, params[MOD_EMBEDDING], P_WTE));
    int l = (mod - 1) / 2;
    return mod == mod_attn(l) ? attn_fwd(m, s, l, params[mod]) : mlp_fwd(m, s, l, params[mod]);
}

static zinf_status attn_bwd(zinf_model *m, zinf_stream *s, int l, void *w, void *g) {
    zinf_dtype dt = m->p.dtype;
    int mod = mod_attn(l), BT = m->b * m->p.seq_len, C = m->p.shape.n_embd;
    layer_acts *a = acts_of(m, l);
    void *x = block_input(m, l);
    ZINF_CHECK(linear_bwd(s, dt, m->datty, param(m, mod, g, P_PROJ_W), param(m, mod, g, P_PROJ_B), m->dres, a->atty,
                          param(m, mod, w, P_PROJ_W), BT, C, C, ZINF_GEMM_PLAIN, NULL));
    zinf_attention_args at = {.dt = dt, .B = m->b, .T = m->p.seq_len, .C = C, .NH = m->p.shape.n_head,
                              .qkv = a->qkv, .out = a->atty, .lse = a->lse, .dqkv = m->dqkv, .dout = m->datty,
                              .ws = m->att_ws};
    ZINF_CHECK(zinf_attention_bwd(s, &at));
    ZINF_CHECK(linear_bwd(s, dt, m->dln, param(m, mod, g, P_FC_W), param(m, mod, g, P_FC_B), m->dqkv, a->ln1,
                          param(m, mod, w, P_FC_W), BT, C, 3 * C, ZINF_GEMM_PLAIN, NULL));
    return zinf_layernorm_bwd(s, dt, m->dres, param(m, mod, g, P_LN_W), param(m, mod, g, P_LN_B), m->dln, x,
                              param(m, mod, w, P_LN_W), a->ln1_mean, a->ln1_rstd, BT, C, true);
}

static zinf_status mlp_bwd(zinf_model *m, zinf_stream *s, int l, void *w, void *g) {
    zinf_dtype dt = m->p.dtype;
    int mod = mod_mlp(l), BT = m->b * m->p.seq_len, C = m->p.shape.n_embd;
    layer_acts *a = acts_of(m, l);
    if (model_tiled(m, mod)) return model_mlp_tiles_bwd(m, s, l);
    // c_proj's input gradient and GELU's backward in one product: dfc = (dres W^T) gelu'(fc).
    ZINF_CHECK(linear_bwd(s, dt, m->dfc, param(m, mod, g, P_PROJ_W), param(m, mod, g, P_PROJ_B), m->dres, a->act,
                          param(m, mod, w, P_PROJ_W), BT, 4 * C, C, ZINF_GEMM_DGELU, a->fc));
    ZINF_CHECK(linear_bwd(s, dt, m->dln, param(m, mod, g, P_FC_W), param(m, mod, g, P_FC_B), m->dfc, a->ln2,
                          param(m, mod, w, P_FC_W), BT, C, 4 * C, ZINF_GEMM_PLAIN, NULL));
    return mlp_norm_bwd(m, s, l, w, g);
}

static zinf_status backward(zinf_model *m, zinf_stream *s, int mod, void *const *params, void *const *grads) {
    zinf_dtype dt = m->p.dtype;
    int L = m->p.shape.n_layer, T = m->p.seq_len, BT = m->b * T, C = m->p.shape.n_embd;
    size_t es = zinf_dtype_size(dt);
    if (mod == mod_head(L)) // tied: the head's weight is wte
        return model_head_bwd(m, s, param(m, MOD_EMBEDDING, params[MOD_EMBEDDING], P_WTE),
                              param(m, MOD_EMBEDDING, grads[MOD_EMBEDDING], P_WTE));
    if (mod == mod_norm(L)) {
        ZINF_CHECK(zinf_memset_async(s, m->dres, 0, (size_t)BT * C * es));
        return zinf_layernorm_bwd(s, dt, m->dres, param(m, mod, grads[mod], P_LNF_W),
                                  param(m, mod, grads[mod], P_LNF_B), m->dln, m->res3[L - 1],
                                  param(m, mod, params[mod], P_LNF_W), m->lnf_mean, m->lnf_rstd, BT, C, true);
    }
    if (mod == MOD_EMBEDDING) return model_embedding_bwd(m, s, grads[mod], m->dres);
    int l = (mod - 1) / 2;
    return mod == mod_attn(l) ? attn_bwd(m, s, l, params[mod], grads[mod]) : mlp_bwd(m, s, l, params[mod], grads[mod]);
}

// ---- Hugging Face's files ----

// Old files carry the causal mask as a buffer; zinf builds the mask into the op.
static bool hf_skip(const char *name) {
    return zinf_ends_with(name, ".attn.bias") || zinf_ends_with(name, ".attn.masked_bias");
}

// GPT2LMHeadModel's config. zinf trains without dropout, so the probabilities are 0:
// the model as trained, not GPT2Config's defaults.
static json_t *hf_config(const zinf_model_shape *s, zinf_dtype dt) {
    return json_pack("{s:[s], s:s, s:i, s:i, s:i, s:i, s:i, s:s, s:f, s:f, s:f, s:f, s:b, s:s}", "architectures",
                     "GPT2LMHeadModel", "model_type", "gpt2", "vocab_size", s->vocab_size, "n_positions",
                     s->block_size, "n_embd", s->n_embd, "n_layer", s->n_layer, "n_head", s->n_head,
                     "activation_function", "gelu_new", "layer_norm_epsilon", 1e-5, "resid_pdrop", 0.0, "embd_pdrop",
                     0.0, "attn_pdrop", 0.0, "tie_word_embeddings", 1, "dtype", model_torch_dtype(dt));
}

const model_family zinf_gpt2_family = {
    .name = "gpt2",
    .check = check,
    .widths = widths,
    .mlp = mlp,
    .count = count,
    .tables = tables,
    .forward = forward,
    .backward = backward,
    .hf_prefix = "transformer.",
    .hf_skip = hf_skip,
    .hf_config = hf_config,
};
