// The ops' front end: check the arguments (so a backend never sees a bad one and a
// mistake is reported where it was made, not as a fault on a stream's thread), then
// hand one op record to the stream's backend.
#include <limits.h>
#include <stdio.h>

#include "attention_plan.h"
#include "internal.h"

static bool storage_dtype(zinf_dtype dt) {
    return dt == ZINF_DTYPE_F32 || dt == ZINF_DTYPE_BF16 || dt == ZINF_DTYPE_F16;
}

static zinf_status bad(const char *op, const char *what) { return zinf_fail(ZINF_ERR_INVAL, "%s: %s", op, what); }

#define REQUIRE(cond, op, what)                                                                                        \
    do {                                                                                                               \
        if (!(cond)) return bad(op, what);                                                                             \
    } while (0)
#define REQUIRE_DT(dt, op) REQUIRE(storage_dtype(dt), op, "the dtype must be fp32, bf16 or fp16")

static zinf_status launch(zinf_stream *s, op_kind kind, zinf_dtype dt, op_record *r) {
    r->kind = kind;
    r->dt = dt;
    return s->dev->profile ? profile_launch(s, r) : s->dev->be->launch(s, r);
}

zinf_status zinf_gemm(zinf_stream *s, const zinf_gemm_args *a) {
    const char *op = "gemm";
    REQUIRE_DT(a->dt, op);
    REQUIRE(a->m > 0 && a->n > 0 && a->k > 0, op, "m, n and k must be positive");
    REQUIRE(a->a && a->b && a->c, op, "A, B and C are required");
    int acols = a->trans_a ? a->m : a->k, bcols = a->trans_b ? a->k : a->n;
    REQUIRE(a->lda >= acols && a->ldb >= bcols && a->ldc >= a->n, op, "a leading dimension is below its row length");
    if (a->batch > 1) REQUIRE(a->stride_a >= 0 && a->stride_b >= 0 && a->stride_c > 0, op, "batch strides must be set");
    REQUIRE(a->act >= ZINF_GEMM_PLAIN && a->act <= ZINF_GEMM_DGELU, op, "act is not a zinf_gemm_act");
    if (a->act != ZINF_GEMM_PLAIN)
        REQUIRE(a->aux && a->ldc == a->n && a->beta == 0.0f && a->batch <= 1 && !(a->act == ZINF_GEMM_DGELU && a->bias),
                op, "a GELU epilogue needs aux, ldc == n, beta 0 and one product (and DGELU no bias)");
    if (a->residual)
        REQUIRE(a->ldc == a->n && a->beta == 0.0f && a->act == ZINF_GEMM_PLAIN && a->batch <= 1, op,
                "a residual needs ldc == n, beta 0, no activation and one product");
    op_record r = {.u.gemm = *a};
    return launch(s, OP_GEMM, a->dt, &r);
}

zinf_status zinf_bias_grad(zinf_stream *s, zinf_dtype dt, void *dbias, const void *dout, int rows, int cols,
                           bool first) {
    REQUIRE_DT(dt, "bias_grad");
    REQUIRE(dbias && dout && rows > 0 && cols > 0, "bias_grad", "needs dbias, dout and positive sizes");
    op_record r = {.u.ew = {.out = dbias, .a = dout, .first = first, .n = (size_t)rows, .cols = cols}};
    return launch(s, OP_BIAS_GRAD, dt, &r);
}

zinf_status zinf_layernorm_fwd(zinf_stream *s, zinf_dtype dt, void *out, float *mean, float *rstd, const void *x,
                               const void *w, const void *b, int rows, int C, float eps) {
    REQUIRE_DT(dt, "layernorm");
    REQUIRE(out && mean && rstd && x && w && b, "layernorm", "a buffer is NULL");
    REQUIRE(rows > 0 && C > 0 && eps >= 0, "layernorm", "rows and C must be positive, eps >= 0");
    op_record r = {
        .u.ln = {.out = out, .mean = mean, .rstd = rstd, .x = x, .w = w, .b = b, .rows = rows, .C = C, .eps = eps}};
    return launch(s, OP_LAYERNORM_FWD, dt, &r);
}

zinf_status zinf_layernorm_bwd(zinf_stream *s, zinf_dtype dt, void *dx, void *dw, void *db, const void *dout,
                               const void *x, const void *w, const float *mean, const float *rstd, int rows, int C,
                               bool first) {
    REQUIRE_DT(dt, "layernorm backward");
    REQUIRE(dx && dw && db && dout && x && w && mean && rstd, "layernorm backward", "a buffer is NULL");
    REQUIRE(rows > 0 && C > 0, "layernorm backward", "rows and C must be positive");
    op_record r = {.u.ln = {.dx = dx,
                            .dw = dw,
                            .db = db,
                            .dout = dout,
                            .x = x,
                            .w = w,
                            .mean = (float *)mean,
                            .rstd = (float *)rstd,
                            .rows = rows,
                            .C = C,
                            .first = first}};
    return launch(s, OP_LAYERNORM_BWD, dt, &r);
}

zinf_status zinf_rmsnorm_fwd(zinf_stream *s, zinf_dtype dt, void *out, float *rstd, const void *x, const void *w,
                             int rows, int C, float eps) {
    REQUIRE_DT(dt, "rmsnorm");
    REQUIRE(out && rstd && x && w, "rmsnorm", "out, rstd, x and w are required");
    REQUIRE(rows > 0 && C > 0 && eps >= 0, "rmsnorm", "rows and C must be positive, eps >= 0");
    op_record r = {.u.ln = {.out = out, .rstd = rstd, .x = x, .w = w, .rows = rows, .C = C, .eps = eps}};
    return launch(s, OP_RMSNORM_FWD, dt, &r);
}

zinf_status zinf_rmsnorm_bwd(zinf_stream *s, zinf_dtype dt, void *dx, void *dw, const void *dout, const void *x,
                             const void *w, const float *rstd, int rows, int C, bool first) {
    REQUIRE_DT(dt, "rmsnorm backward");
    REQUIRE(dx && dw && dout && x && w && rstd, "rmsnorm backward", "dx, dw, dout, x, w and rstd are required");
    REQUIRE(rows > 0 && C > 0, "rmsnorm backward", "rows and C must be positive");
    op_record r = {.u.ln = {.dx = dx,
                            .dw = dw,
                            .dout = dout,
                            .x = x,
                            .w = w,
                            .rstd = (float *)rstd,
                            .rows = rows,
                            .C = C,
                            .first = first}};
    return launch(s, OP_RMSNORM_BWD, dt, &r);
}

zinf_status zinf_gelu_fwd(zinf_stream *s, zinf_dtype dt, void *out, const void *x, size_t n) {
    REQUIRE_DT(dt, "gelu");
    REQUIRE(out && x, "gelu", "a buffer is NULL");
    op_record r = {.u.ew = {.out = out, .a = x, .n = n}};
    return launch(s, OP_GELU_FWD, dt, &r);
}

zinf_status zinf_gelu_bwd(zinf_stream *s, zinf_dtype dt, void *dx, const void *x, const void *dout, size_t n) {
    REQUIRE_DT(dt, "gelu backward");
    REQUIRE(dx && x && dout, "gelu backward", "a buffer is NULL");
    op_record r = {.u.ew = {.out = dx, .a = x, .b = dout, .n = n}};
    return launch(s, OP_GELU_BWD, dt, &r);
}

zinf_status zinf_swiglu_fwd(zinf_stream *s, zinf_dtype dt, void *out, const void *gu, int rows, int F) {
    REQUIRE_DT(dt, "swiglu");
    REQUIRE(out && gu, "swiglu", "out and gu are required");
    REQUIRE(rows > 0 && F > 0, "swiglu", "rows and F must be positive");
    op_record r = {.u.ew = {.out = out, .a = gu, .n = (size_t)rows, .cols = F}};
    return launch(s, OP_SWIGLU_FWD, dt, &r);
}

zinf_status zinf_swiglu_bwd(zinf_stream *s, zinf_dtype dt, void *dgu, const void *gu, const void *dout, int rows,
                            int F) {
    REQUIRE_DT(dt, "swiglu backward");
    REQUIRE(dgu && gu && dout, "swiglu backward", "dgu, gu and dout are required");
    REQUIRE(rows > 0 && F > 0, "swiglu backward", "rows and F must be positive");
    op_record r = {.u.ew = {.out = dgu, .a = gu, .b = dout, .n = (size_t)rows, .cols = F}};
    return launch(s, OP_SWIGLU_BWD, dt, &r);
}

static zinf_status rope(zinf_stream *s, op_kind kind, const char *op, zinf_dtype dt, void *qkv, const float *cos_tab,
                        const float *sin_tab, int B, int T, int NH, int NKV, int hd) {
    REQUIRE_DT(dt, op);
    REQUIRE(qkv && cos_tab && sin_tab, op, "qkv, cos_tab and sin_tab are required");
    REQUIRE(B > 0 && T > 0 && NH > 0 && NKV > 0, op, "B, T, NH and NKV must be positive");
    REQUIRE(hd > 0 && hd % 2 == 0, op, "hd must be positive and even");
    op_record r = {
        .u.rope = {.qkv = qkv, .cos_tab = cos_tab, .sin_tab = sin_tab, .B = B, .T = T, .NH = NH, .NKV = NKV, .hd = hd}};
    return launch(s, kind, dt, &r);
}

zinf_status zinf_rope_fwd(zinf_stream *s, zinf_dtype dt, void *qkv, const float *cos_tab, const float *sin_tab, int B,
                          int T, int NH, int NKV, int hd) {
    return rope(s, OP_ROPE_FWD, "rope", dt, qkv, cos_tab, sin_tab, B, T, NH, NKV, hd);
}

zinf_status zinf_rope_bwd(zinf_stream *s, zinf_dtype dt, void *dqkv, const float *cos_tab, const float *sin_tab, int B,
                          int T, int NH, int NKV, int hd) {
    return rope(s, OP_ROPE_BWD, "rope backward", dt, dqkv, cos_tab, sin_tab, B, T, NH, NKV, hd);
}

// a's sizes into *r with NKV and hd filled in where left 0; NULL, or what is wrong.
static const char *attention_shape(const zinf_attention_args *a, zinf_attention_args *r) {
    *r = *a;
    if (a->B <= 0 || a->T <= 0 || a->C <= 0 || a->NH <= 0) return "B, T, C and NH must be positive";
    if (a->NKV < 0 || a->hd < 0 || a->window < 0) return "NKV, hd and window must be >= 0";
    if (!a->NKV) r->NKV = a->NH;
    if (a->NH % r->NKV) return "NKV must divide NH";
    if (!a->hd) r->hd = a->C % a->NH ? 0 : a->C / a->NH;
    if (!r->hd || (int64_t)a->NH * r->hd != a->C) return "C must be NH * hd (with hd 0, a multiple of NH)";
    return NULL;
}

// The host attention keeps its rows in the stream's own scratch; CUDA's tiled kernels
// keep the backward's D, one fp32 per query row (O(T), never the scores), and the sim
// device takes what CUDA would.
static bool cuda_like(zinf_backend b) { return b == ZINF_BACKEND_CUDA || b == ZINF_BACKEND_SIM; }

size_t zinf_backend_attention_workspace(zinf_backend b, const zinf_attention_args *a) {
    zinf_attention_args r;
    if (!cuda_like(b) || attention_shape(a, &r)) return 0;
    return att_workspace_bytes(r.B, r.T, r.NH);
}

size_t zinf_attention_workspace(zinf_device *d, const zinf_attention_args *a) {
    zinf_attention_args r;
    if (!d->be->attention_workspace || attention_shape(a, &r))
        return zinf_backend_attention_workspace(zinf_device_get_caps(d)->backend, a);
    return d->be->attention_workspace(d, &r);
}

// The record gets a with NKV and hd filled in, so the backends never see a 0 there.
static zinf_status attention_check(zinf_stream *s, const zinf_attention_args *a, const char *op, bool backward,
                                   op_record *rec) {
    REQUIRE_DT(a->dt, op);
    const char *wrong = attention_shape(a, &rec->u.attn);
    REQUIRE(!wrong, op, wrong);
    REQUIRE(a->qkv && a->lse && a->out, op, "qkv, out and lse are required");
    REQUIRE(!backward || (a->dqkv && a->dout), op, "dqkv and dout are required");
    // The CUDA kernels' tiles hold a head padded to ATT_MAX_HD channels at most, and
    // their grid takes B and NH as its second and third dimensions (65535 at most).
    zinf_backend be = zinf_device_get_caps(s->dev)->backend;
    const zinf_attention_args *r = &rec->u.attn;
    if (cuda_like(be) && r->hd > ATT_MAX_HD)
        return zinf_fail(ZINF_ERR_UNSUPPORTED, "%s: head size %d is over the CUDA kernels' %d", op, r->hd, ATT_MAX_HD);
    if (cuda_like(be) && (r->B > 65535 || r->NH > 65535))
        return zinf_fail(ZINF_ERR_UNSUPPORTED, "%s: B %d or NH %d is over the CUDA grid's 65535", op, r->B, r->NH);
    size_t ws = zinf_attention_workspace(s->dev, a);
    REQUIRE(ws == 0 || a->ws, op, "this backend needs a workspace (zinf_attention_workspace bytes)");
    return ZINF_OK;
}

zinf_status zinf_attention_fwd(zinf_stream *s, const zinf_attention_args *a) {
    op_record r = {0};
    ZINF_CHECK(attention_check(s, a, "attention", false, &r));
    return launch(s, OP_ATTENTION_FWD, a->dt, &r);
}

zinf_status zinf_attention_bwd(zinf_stream *s, const zinf_attention_args *a) {
    op_record r = {0};
    ZINF_CHECK(attention_check(s, a, "attention backward", true, &r));
    return launch(s, OP_ATTENTION_BWD, a->dt, &r);
}

zinf_status zinf_cross_entropy(zinf_stream *s, zinf_dtype dt, float *losses, float *lse, void *dlogits,
                               const void *logits, const int32_t *targets, int rows, int V, int ld, float dscale) {
    REQUIRE_DT(dt, "cross_entropy");
    REQUIRE(losses && logits && targets, "cross_entropy", "losses, logits and targets are required");
    REQUIRE(rows > 0 && V > 0, "cross_entropy", "rows and V must be positive");
    REQUIRE(ld >= V, "cross_entropy", "the row length ld must be at least V");
    op_record r = {.u.xent = {.losses = losses,
                              .lse = lse,
                              .dlogits = dlogits,
                              .logits = logits,
                              .targets = targets,
                              .rows = rows,
                              .V = V,
                              .ld = ld,
                              .dscale = dscale}};
    return launch(s, OP_CROSS_ENTROPY, dt, &r);
}

zinf_status zinf_cross_entropy_grad(zinf_stream *s, zinf_dtype dt, void *dlogits, const void *logits,
                                    const int32_t *targets, const float *lse, int rows, int n, int v0, float dscale) {
    const char *op = "cross_entropy_grad";
    REQUIRE_DT(dt, op);
    REQUIRE(dlogits && logits && targets && lse, op, "dlogits, logits, targets and lse are required");
    REQUIRE(rows > 0 && n > 0, op, "rows and n must be positive");
    REQUIRE(v0 >= 0 && n <= INT_MAX - v0, op, "the columns [v0, v0 + n) must lie in [0, INT_MAX]");
    op_record r = {.u.xgrad = {.dlogits = dlogits,
                               .logits = logits,
                               .targets = targets,
                               .lse = lse,
                               .rows = rows,
                               .n = n,
                               .v0 = v0,
                               .dscale = dscale}};
    return launch(s, OP_CROSS_ENTROPY_GRAD, dt, &r);
}

// The windows a record carries: part's, checked, or without one the whole of each table
// given (the op does not know V: up to INT64_MAX elements) and nothing of one given
// NULL, so the backends look at the windows alone.
static zinf_status embedding_windows(const char *op, const zinf_embedding_part *part, const void *te, const void *pe,
                                     op_embedding *r) {
    if (!part) {
        r->part = (zinf_embedding_part){0, te ? INT64_MAX : 0, 0, pe ? INT64_MAX : 0};
        return ZINF_OK;
    }
    REQUIRE(part->wte_lo >= 0 && part->wte_n >= 0 && part->wpe_lo >= 0 && part->wpe_n >= 0, op,
            "a part's lo and n must not be negative");
    REQUIRE(part->wte_n <= INT64_MAX - part->wte_lo && part->wpe_n <= INT64_MAX - part->wpe_lo, op,
            "a part's window ends past INT64_MAX");
    REQUIRE((te || !part->wte_n) && (pe || !part->wpe_n), op, "a part's window with n > 0 needs its table");
    r->part = *part;
    return ZINF_OK;
}

zinf_status zinf_embedding_fwd(zinf_stream *s, zinf_dtype dt, void *out, const int32_t *tok, const void *wte,
                               const void *wpe, int B, int T, int C, const zinf_embedding_part *part) {
    REQUIRE_DT(dt, "embedding");
    REQUIRE(out && tok && (wte || part) && B > 0 && T > 0 && C > 0, "embedding", "needs out, tok, wte and sizes");
    op_record r = {
        .u.emb = {.out = out, .tok = tok, .wte = wte, .wpe = wpe, .B = B, .T = T, .C = C, .accumulate = part != NULL}};
    ZINF_CHECK(embedding_windows("embedding", part, wte, wpe, &r.u.emb));
    return launch(s, OP_EMBEDDING_FWD, dt, &r);
}

zinf_status zinf_embedding_bwd(zinf_stream *s, zinf_dtype dt, void *dwte, void *dwpe, const void *dout,
                               const int32_t *tok, const int32_t *order, int B, int T, int C,
                               const zinf_embedding_part *part) {
    REQUIRE_DT(dt, "embedding backward");
    REQUIRE((dwte || part) && dout && tok && order && B > 0 && T > 0 && C > 0, "embedding backward",
            "needs dwte, dout, tok, order and sizes");
    op_record r = {
        .u.emb = {.dwte = dwte, .dwpe = dwpe, .dout = dout, .tok = tok, .order = order, .B = B, .T = T, .C = C}};
    ZINF_CHECK(embedding_windows("embedding backward", part, dwte, dwpe, &r.u.emb));
    return launch(s, OP_EMBEDDING_BWD, dt, &r);
}

zinf_status zinf_add(zinf_stream *s, zinf_dtype dt, void *out, const void *a, const void *b, size_t n) {
    REQUIRE_DT(dt, "add");
    REQUIRE(out && a && b, "add", "a buffer is NULL");
    op_record r = {.u.ew = {.out = out, .a = a, .b = b, .n = n}};
    return launch(s, OP_ADD, dt, &r);
}

zinf_status zinf_scale(zinf_stream *s, zinf_dtype dt, void *x, float scale, size_t n) {
    REQUIRE_DT(dt, "scale");
    REQUIRE(x, "scale", "x is NULL");
    op_record r = {.u.ew = {.out = x, .scale = scale, .n = n}};
    return launch(s, OP_SCALE, dt, &r);
}

zinf_status zinf_cast(zinf_stream *s, void *dst, zinf_dtype dst_dt, const void *src, zinf_dtype src_dt, size_t n) {
    REQUIRE(storage_dtype(dst_dt) && storage_dtype(src_dt), "cast", "dtypes must be fp32, bf16 or fp16");
    REQUIRE(dst && src, "cast", "a buffer is NULL");
    op_record r = {.u.ew = {.out = dst, .a = src, .src_dt = src_dt, .n = n}};
    return launch(s, OP_CAST, dst_dt, &r);
}

zinf_status zinf_accumulate(zinf_stream *s, float *sums, const void *x, zinf_dtype dt, size_t n, bool first) {
    REQUIRE(storage_dtype(dt), "accumulate", "x's dtype must be fp32, bf16 or fp16");
    REQUIRE(sums && x, "accumulate", "a buffer is NULL");
    op_record r = {.u.ew = {.out = sums, .a = x, .src_dt = dt, .n = n, .first = first}};
    return launch(s, OP_ACCUMULATE, ZINF_DTYPE_F32, &r);
}

zinf_status zinf_sumsq(zinf_stream *s, zinf_dtype dt, const void *x, size_t n, double *out) {
    return zinf_sumsq_many(s, dt, &(zinf_sumsq_piece){.x = x, .n = n, .out = out}, 1);
}

zinf_status zinf_sumsq_many(zinf_stream *s, zinf_dtype dt, const zinf_sumsq_piece *pieces, int n) {
    REQUIRE_DT(dt, "sumsq");
    REQUIRE(n >= 0 && (pieces || n == 0), "sumsq", "pieces is NULL");
    for (int i = 0; i < n; i++)
        REQUIRE(pieces[i].x && pieces[i].out, "sumsq", "every piece needs x and out");
    for (int i = 0; i < n; i += SUMSQ_PIECES) {
        op_record r = {.u.sumsq.n = n - i < SUMSQ_PIECES ? n - i : SUMSQ_PIECES};
        memcpy(r.u.sumsq.pieces, pieces + i, (size_t)r.u.sumsq.n * sizeof *pieces);
        ZINF_CHECK(launch(s, OP_SUMSQ, dt, &r));
    }
    return ZINF_OK;
}

// Checks shared by both directions; n == 0 passes them and then does nothing.
static zinf_status quant_check(const char *op, int bits, zinf_dtype dt, size_t group) {
    REQUIRE(bits == 4 || bits == 8, op, "bits must be 4 or 8");
    REQUIRE_DT(dt, op);
    REQUIRE(group > 0, op, "group must be positive");
    // With an even group no byte of nibbles holds elements of two groups, so each
    // group's bytes are written by one hand.
    REQUIRE(bits == 8 || group % 2 == 0, op, "group must be even with bits 4");
    return ZINF_OK;
}

zinf_status zinf_quantize(zinf_stream *s, int bits, zinf_dtype dt, const void *x, size_t n, size_t group, void *q,
                          float *scale) {
    ZINF_CHECK(quant_check("quantize", bits, dt, group));
    if (n == 0) return ZINF_OK;
    REQUIRE(x && q && scale, "quantize", "x, q and scale are required");
    op_record r = {.u.quant = {.x = x, .q = q, .scale = scale, .n = n, .group = group, .bits = bits}};
    return launch(s, OP_QUANTIZE, dt, &r);
}

zinf_status zinf_dequantize(zinf_stream *s, int bits, const void *q, const float *scale, size_t n, size_t group,
                            zinf_dtype dt, void *out, bool accumulate) {
    ZINF_CHECK(quant_check("dequantize", bits, dt, group));
    REQUIRE(!accumulate || dt == ZINF_DTYPE_F32, "dequantize", "accumulate needs an fp32 out");
    if (n == 0) return ZINF_OK;
    REQUIRE(q && scale && out, "dequantize", "q, scale and out are required");
    op_record r = {.u.quant = {.q = (void *)q,
                               .scale = (float *)scale,
                               .out = out,
                               .n = n,
                               .group = group,
                               .bits = bits,
                               .accumulate = accumulate}};
    return launch(s, OP_DEQUANTIZE, dt, &r);
}

// The record of an optimizer op, checked: the same checks and constants as cpu_adam, so
// a bad hyperparameter fails here.
static zinf_status optim_record(const zinf_optim_hparams *h, const zinf_optim_tile *t, op_record *r) {
    r->u.optim.h = *h, r->u.optim.t = *t;
    ZINF_CHECK(zinf_optim_consts_of(h, t, &r->u.optim.c));
    if (t->from_param)
        return zinf_fail(ZINF_ERR_UNSUPPORTED, "device optimizer: updates in place only (from_param set)");
    return ZINF_OK;
}

zinf_status zinf_device_optim(zinf_stream *s, const zinf_optim_hparams *h, const zinf_optim_tile *t) {
    op_record r = {0};
    ZINF_CHECK(optim_record(h, t, &r));
    return launch(s, OP_OPTIM, t->grad_dtype, &r);
}

zinf_status zinf_device_optim_rows(zinf_stream *s, const zinf_optim_hparams *h, const zinf_optim_tile *t,
                                   const int32_t *rows, int count, int row_len) {
    REQUIRE(count >= 0 && row_len > 0, "optim_rows", "count must not be negative and row_len must be positive");
    REQUIRE(t->out_dtype == ZINF_DTYPE_BF16 || t->out_dtype == ZINF_DTYPE_F16, "optim_rows",
            "the new weights go to a 16-bit out (out_dtype bf16 or fp16)");
    op_record r = {.u.optim = {.rows = rows, .count = count, .row_len = row_len}};
    ZINF_CHECK(optim_record(h, t, &r));
    if (count == 0) return ZINF_OK;
    return launch(s, OP_OPTIM_ROWS, t->grad_dtype, &r);
}
