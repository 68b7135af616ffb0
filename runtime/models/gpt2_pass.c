// GPT-2's modules, forward and backward, as sequences of device ops on one stream
// (the structure of llm.c's train_gpt2.cu: pre-LN blocks, fused QKV, tanh GELU, a head
// tied to wte, cross-entropy fused with its gradient). Backward adds to the gradient
// buffers; the residual stream's gradient flows through m->dres.
#include "gpt2_internal.h"

// Parameter idx of module mod inside the flat buffer buf.
static void *param(const zinf_model *m, int mod, void *buf, int idx) {
    return (char *)buf + m->mods[mod].params[idx].offset * zinf_dtype_size(m->p.dtype);
}

// out (rows x n) = in (rows x k) @ w (k x n, as Conv1D stores it) + bias.
static zinf_status linear(zinf_stream *s, zinf_dtype dt, void *out, const void *in, const void *w, const void *bias,
                          int rows, int k, int n) {
    zinf_gemm_args g = {.dt = dt, .m = rows, .n = n, .k = k, .a = in, .lda = k, .b = w, .ldb = n, .c = out, .ldc = n,
                        .bias = bias, .alpha = 1.0f};
    return zinf_gemm(s, &g);
}

// The backward of linear: dw += in^T dout, dbias += column sums of dout, and din =
// dout w^T (written).
static zinf_status linear_bwd(zinf_stream *s, zinf_dtype dt, void *din, void *dw, void *dbias, const void *dout,
                              const void *in, const void *w, int rows, int k, int n) {
    zinf_gemm_args gw = {.dt = dt, .trans_a = true, .m = k, .n = n, .k = rows, .a = in, .lda = k, .b = dout, .ldb = n,
                         .c = dw, .ldc = n, .alpha = 1.0f, .beta = 1.0f};
    ZINF_CHECK(zinf_gemm(s, &gw));
    ZINF_CHECK(zinf_bias_grad(s, dt, dbias, dout, rows, n));
    zinf_gemm_args gx = {.dt = dt, .trans_b = true, .m = rows, .n = k, .k = n, .a = dout, .lda = n, .b = w, .ldb = n,
                         .c = din, .ldc = k, .alpha = 1.0f};
    return zinf_gemm(s, &gx);
}

static void *block_input(zinf_model *m, int l) { return l == 0 ? m->encoded : m->res3[l - 1]; }

static zinf_status attn_fwd(zinf_model *m, zinf_stream *s, int l, void *w) {
    zinf_dtype dt = m->p.dtype;
    int mod = mod_attn(l), BT = m->b * m->p.seq_len, C = m->p.shape.n_embd;
    layer_acts *a = acts_of(m, l);
    void *x = block_input(m, l);
    ZINF_CHECK(zinf_layernorm_fwd(s, dt, a->ln1, a->ln1_mean, a->ln1_rstd, x, param(m, mod, w, P_LN_W),
                                  param(m, mod, w, P_LN_B), BT, C, 1e-5f));
    ZINF_CHECK(linear(s, dt, a->qkv, a->ln1, param(m, mod, w, P_FC_W), param(m, mod, w, P_FC_B), BT, C, 3 * C));
    zinf_attention_args at = {.dt = dt, .B = m->b, .T = m->p.seq_len, .C = C, .NH = m->p.shape.n_head,
                              .qkv = a->qkv, .out = a->atty, .lse = a->lse, .ws = m->att_ws};
    ZINF_CHECK(zinf_attention_fwd(s, &at));
    ZINF_CHECK(linear(s, dt, a->res2, a->atty, param(m, mod, w, P_PROJ_W), param(m, mod, w, P_PROJ_B), BT, C, C));
    return zinf_add(s, dt, a->res2, a->res2, x, (size_t)BT * C);
}

static zinf_status mlp_fwd(zinf_model *m, zinf_stream *s, int l, void *w) {
    zinf_dtype dt = m->p.dtype;
    int mod = mod_mlp(l), BT = m->b * m->p.seq_len, C = m->p.shape.n_embd;
    layer_acts *a = acts_of(m, l);
    ZINF_CHECK(zinf_layernorm_fwd(s, dt, a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, param(m, mod, w, P_LN_W),
                                  param(m, mod, w, P_LN_B), BT, C, 1e-5f));
    ZINF_CHECK(linear(s, dt, a->fch, a->ln2, param(m, mod, w, P_FC_W), param(m, mod, w, P_FC_B), BT, C, 4 * C));
    ZINF_CHECK(zinf_gelu_fwd(s, dt, a->fch_gelu, a->fch, (size_t)BT * 4 * C));
    ZINF_CHECK(
        linear(s, dt, m->res3[l], a->fch_gelu, param(m, mod, w, P_PROJ_W), param(m, mod, w, P_PROJ_B), BT, 4 * C, C));
    return zinf_add(s, dt, m->res3[l], m->res3[l], a->res2, (size_t)BT * C);
}

zinf_status gpt2_forward(zinf_model *m, zinf_stream *s, int mod, void *const *params) {
    zinf_dtype dt = m->p.dtype;
    int L = m->p.shape.n_layer, T = m->p.seq_len, BT = m->b * T, C = m->p.shape.n_embd, V = m->p.shape.vocab_size;
    if (mod == MOD_EMBEDDING) {
        void *w = params[MOD_EMBEDDING];
        return zinf_embedding_fwd(s, dt, m->encoded, m->tok, param(m, mod, w, P_WTE), param(m, mod, w, P_WPE), m->b,
                                  T, C);
    }
    if (mod == mod_lnf(L))
        return zinf_layernorm_fwd(s, dt, m->lnf, m->lnf_mean, m->lnf_rstd, m->res3[L - 1],
                                  param(m, mod, params[mod], P_LNF_W), param(m, mod, params[mod], P_LNF_B), BT, C,
                                  1e-5f);
    if (mod == mod_head(L)) {
        const void *wte = param(m, MOD_EMBEDDING, params[MOD_EMBEDDING], P_WTE);
        zinf_gemm_args g = {.dt = dt, .trans_b = true, .m = BT, .n = V, .k = C, .a = m->lnf, .lda = C, .b = wte,
                            .ldb = C, .c = m->logits, .ldc = V, .alpha = 1.0f};
        ZINF_CHECK(zinf_gemm(s, &g));
        // Training turns the logits into their gradient right away (llm.c's fused
        // classifier): the mean over the batch's tokens, times dloss.
        return zinf_cross_entropy(s, dt, m->losses, m->p.training ? m->logits : NULL, m->logits, m->targets, BT, V,
                                  m->dloss / (float)BT);
    }
    int l = (mod - 1) / 2;
    return mod == mod_attn(l) ? attn_fwd(m, s, l, params[mod]) : mlp_fwd(m, s, l, params[mod]);
}

static zinf_status attn_bwd(zinf_model *m, zinf_stream *s, int l, void *w, void *g) {
    zinf_dtype dt = m->p.dtype;
    int mod = mod_attn(l), BT = m->b * m->p.seq_len, C = m->p.shape.n_embd;
    layer_acts *a = acts_of(m, l);
    void *x = block_input(m, l);
    ZINF_CHECK(linear_bwd(s, dt, m->datty, param(m, mod, g, P_PROJ_W), param(m, mod, g, P_PROJ_B), m->dres, a->atty,
                          param(m, mod, w, P_PROJ_W), BT, C, C));
    zinf_attention_args at = {.dt = dt, .B = m->b, .T = m->p.seq_len, .C = C, .NH = m->p.shape.n_head,
                              .qkv = a->qkv, .out = a->atty, .lse = a->lse, .dqkv = m->dqkv, .dout = m->datty,
                              .ws = m->att_ws};
    ZINF_CHECK(zinf_attention_bwd(s, &at));
    ZINF_CHECK(linear_bwd(s, dt, m->dln, param(m, mod, g, P_FC_W), param(m, mod, g, P_FC_B), m->dqkv, a->ln1,
                          param(m, mod, w, P_FC_W), BT, C, 3 * C));
    return zinf_layernorm_bwd(s, dt, m->dres, param(m, mod, g, P_LN_W), param(m, mod, g, P_LN_B), m->dln, x,
                              param(m, mod, w, P_LN_W), a->ln1_mean, a->ln1_rstd, BT, C);
}

static zinf_status mlp_bwd(zinf_model *m, zinf_stream *s, int l, void *w, void *g) {
    zinf_dtype dt = m->p.dtype;
    int mod = mod_mlp(l), BT = m->b * m->p.seq_len, C = m->p.shape.n_embd;
    size_t n4 = (size_t)BT * 4 * C;
    layer_acts *a = acts_of(m, l);
    ZINF_CHECK(linear_bwd(s, dt, m->dfch, param(m, mod, g, P_PROJ_W), param(m, mod, g, P_PROJ_B), m->dres,
                          a->fch_gelu, param(m, mod, w, P_PROJ_W), BT, 4 * C, C));
    ZINF_CHECK(zinf_gelu_bwd(s, dt, m->dfch, a->fch, m->dfch, n4));
    ZINF_CHECK(linear_bwd(s, dt, m->dln, param(m, mod, g, P_FC_W), param(m, mod, g, P_FC_B), m->dfch, a->ln2,
                          param(m, mod, w, P_FC_W), BT, C, 4 * C));
    return zinf_layernorm_bwd(s, dt, m->dres, param(m, mod, g, P_LN_W), param(m, mod, g, P_LN_B), m->dln, a->res2,
                              param(m, mod, w, P_LN_W), a->ln2_mean, a->ln2_rstd, BT, C);
}

zinf_status gpt2_backward(zinf_model *m, zinf_stream *s, int mod, void *const *params, void *const *grads) {
    zinf_dtype dt = m->p.dtype;
    int L = m->p.shape.n_layer, T = m->p.seq_len, BT = m->b * T, C = m->p.shape.n_embd, V = m->p.shape.vocab_size;
    size_t es = zinf_dtype_size(dt);
    if (mod == mod_head(L)) {
        // logits = lnf wte^T: dwte += dlogits^T lnf, dlnf = dlogits wte (into dln).
        void *gwte = param(m, MOD_EMBEDDING, grads[MOD_EMBEDDING], P_WTE);
        const void *wte = param(m, MOD_EMBEDDING, params[MOD_EMBEDDING], P_WTE);
        zinf_gemm_args gw = {.dt = dt, .trans_a = true, .m = V, .n = C, .k = BT, .a = m->logits, .lda = V,
                             .b = m->lnf, .ldb = C, .c = gwte, .ldc = C, .alpha = 1.0f, .beta = 1.0f};
        ZINF_CHECK(zinf_gemm(s, &gw));
        zinf_gemm_args gx = {.dt = dt, .m = BT, .n = C, .k = V, .a = m->logits, .lda = V, .b = wte, .ldb = C,
                             .c = m->dln, .ldc = C, .alpha = 1.0f};
        return zinf_gemm(s, &gx);
    }
    if (mod == mod_lnf(L)) {
        ZINF_CHECK(zinf_memset_async(s, m->dres, 0, (size_t)BT * C * es));
        return zinf_layernorm_bwd(s, dt, m->dres, param(m, mod, grads[mod], P_LNF_W),
                                  param(m, mod, grads[mod], P_LNF_B), m->dln, m->res3[L - 1],
                                  param(m, mod, params[mod], P_LNF_W), m->lnf_mean, m->lnf_rstd, BT, C);
    }
    if (mod == MOD_EMBEDDING)
        return zinf_embedding_bwd(s, dt, param(m, mod, grads[mod], P_WTE), param(m, mod, grads[mod], P_WPE), m->dres,
                                  m->tok, m->order, m->b, T, C);
    int l = (mod - 1) / 2;
    return mod == mod_attn(l) ? attn_bwd(m, s, l, params[mod], grads[mod]) : mlp_bwd(m, s, l, params[mod], grads[mod]);
}
