// The host backend's ops (besides the matrix product, in blas.c), written after
// llm.c's CPU reference (train_gpt2.c) with every sum in fp32 and a fixed order, and
// the attention as a flash-attention-style pass that keeps only the log-sum-exp of
// each row (Dao et al. 2022) and recomputes the probabilities in the backward.
#include <math.h>
#include <stdlib.h>

#include "host.h"

float *host_scratch_get(host_scratch *s, int slot, size_t n) {
    if (n == 0) n = 1;
    if (s->cap[slot] < n) {
        float *p = realloc(s->buf[slot], n * sizeof *p);
        if (!p) {
            zinf_fail(ZINF_ERR_NOMEM, "host device: out of host memory for %zu staging floats", n);
            return NULL;
        }
        s->buf[slot] = p;
        s->cap[slot] = n;
    }
    return s->buf[slot];
}

void host_scratch_free(host_scratch *s) {
    for (int i = 0; i < SCRATCH_SLOTS; i++)
        free(s->buf[i]);
    memset(s, 0, sizeof *s);
}

// dst[i] += v[i] in dt, each element rounded once.
static void add_row(void *dst, zinf_dtype dt, size_t at, const float *v, size_t n) {
    for (size_t i = 0; i < n; i++)
        dt_store(dst, dt, at + i, dt_load(dst, dt, at + i) + v[i]);
}

// A gradient's sums into dst: written where first (dst not read), else added.
static void grad_row(void *dst, zinf_dtype dt, const float *v, size_t n, bool first) {
    (first ? st_row : add_row)(dst, dt, 0, v, n);
}

#define SCRATCH(var, slot, n)                                                                                          \
    float *var = host_scratch_get(s, slot, n);                                                                         \
    if (!var) return ZINF_ERR_NOMEM

// ---- layernorm ----

static zinf_status layernorm_fwd(zinf_dtype dt, const op_layernorm *a, host_scratch *s) {
    int C = a->C;
    SCRATCH(x, 0, C);
    SCRATCH(w, 1, C);
    SCRATCH(b, 2, C);
    ld_row(w, a->w, dt, 0, C);
    ld_row(b, a->b, dt, 0, C);
    for (int r = 0; r < a->rows; r++) {
        ld_row(x, a->x, dt, (size_t)r * C, C);
        float m = 0.0f;
        for (int i = 0; i < C; i++)
            m += x[i];
        m /= C;
        float v = 0.0f;
        for (int i = 0; i < C; i++)
            v += (x[i] - m) * (x[i] - m);
        v /= C;
        float rs = 1.0f / sqrtf(v + a->eps);
        for (int i = 0; i < C; i++)
            x[i] = (x[i] - m) * rs * w[i] + b[i];
        st_row(a->out, dt, (size_t)r * C, x, C);
        a->mean[r] = m;
        a->rstd[r] = rs;
    }
    return ZINF_OK;
}

static zinf_status layernorm_bwd(zinf_dtype dt, const op_layernorm *a, host_scratch *s) {
    int C = a->C;
    SCRATCH(x, 0, C);
    SCRATCH(w, 1, C);
    SCRATCH(dout, 2, C);
    SCRATCH(dx, 3, C);
    SCRATCH(dw, 4, 2 * (size_t)C);
    float *db = dw + C;
    memset(dw, 0, 2 * (size_t)C * sizeof *dw);
    ld_row(w, a->w, dt, 0, C);
    for (int r = 0; r < a->rows; r++) {
        ld_row(x, a->x, dt, (size_t)r * C, C);
        ld_row(dout, a->dout, dt, (size_t)r * C, C);
        float m = a->mean[r], rs = a->rstd[r];
        float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
        for (int i = 0; i < C; i++) {
            float norm = (x[i] - m) * rs, dnorm = w[i] * dout[i];
            dnorm_mean += dnorm;
            dnorm_norm_mean += dnorm * norm;
        }
        dnorm_mean /= C;
        dnorm_norm_mean /= C;
        ld_row(dx, a->dx, dt, (size_t)r * C, C);
        for (int i = 0; i < C; i++) {
            float norm = (x[i] - m) * rs, dnorm = w[i] * dout[i];
            db[i] += dout[i];
            dw[i] += norm * dout[i];
            dx[i] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * rs;
        }
        st_row(a->dx, dt, (size_t)r * C, dx, C);
    }
    grad_row(a->dw, dt, dw, C, a->first);
    grad_row(a->db, dt, db, C, a->first);
    return ZINF_OK;
}

// ---- RMSNorm ----

// v as dt stores it, widened back.
static float rounded(zinf_dtype dt, float v) {
    switch (dt) {
    case ZINF_DTYPE_BF16: return bf16_to_f32(f32_to_bf16(v));
    case ZINF_DTYPE_F16: return f16_to_f32(f32_to_f16(v));
    default: return v;
    }
}

static zinf_status rmsnorm_fwd(zinf_dtype dt, const op_layernorm *a, host_scratch *s) {
    int C = a->C;
    SCRATCH(x, 0, C);
    SCRATCH(w, 1, C);
    ld_row(w, a->w, dt, 0, C);
    for (int r = 0; r < a->rows; r++) {
        ld_row(x, a->x, dt, (size_t)r * C, C);
        float ss = 0.0f;
        for (int i = 0; i < C; i++)
            ss += x[i] * x[i];
        float rs = 1.0f / sqrtf(ss / C + a->eps);
        for (int i = 0; i < C; i++)
            x[i] = w[i] * rounded(dt, x[i] * rs);
        st_row(a->out, dt, (size_t)r * C, x, C);
        a->rstd[r] = rs;
    }
    return ZINF_OK;
}

// dx = rstd (dn - n mean(dn n)), dn = w dout; dw += sum over rows of dout n.
static zinf_status rmsnorm_bwd(zinf_dtype dt, const op_layernorm *a, host_scratch *s) {
    int C = a->C;
    SCRATCH(x, 0, C);
    SCRATCH(w, 1, C);
    SCRATCH(dout, 2, C);
    SCRATCH(dw, 3, C);
    memset(dw, 0, (size_t)C * sizeof *dw);
    ld_row(w, a->w, dt, 0, C);
    for (int r = 0; r < a->rows; r++) {
        ld_row(x, a->x, dt, (size_t)r * C, C);
        ld_row(dout, a->dout, dt, (size_t)r * C, C);
        float rs = a->rstd[r], dnn = 0.0f;
        for (int i = 0; i < C; i++)
            dnn += w[i] * dout[i] * (x[i] * rs);
        dnn /= C;
        for (int i = 0; i < C; i++) {
            float n = x[i] * rs;
            dw[i] += dout[i] * n;
            x[i] = rs * (w[i] * dout[i] - n * dnn);
        }
        add_row(a->dx, dt, (size_t)r * C, x, C);
    }
    grad_row(a->dw, dt, dw, C, a->first);
    return ZINF_OK;
}

// ---- elementwise ----

static void gelu_fwd(zinf_dtype dt, const op_elementwise *a) {
    for (size_t i = 0; i < a->n; i++)
        dt_store(a->out, dt, i, host_gelu(dt_load(a->a, dt, i)));
}

static void gelu_bwd(zinf_dtype dt, const op_elementwise *a) {
    for (size_t i = 0; i < a->n; i++)
        dt_store(a->out, dt, i, host_gelu_grad(dt_load(a->a, dt, i)) * dt_load(a->b, dt, i));
}

// ---- SwiGLU ----
// Element j of row r: gate gu[r][j], up gu[r][F + j]. The backward reads both before
// it writes both, so dgu may be gu.

static float sigmoid(float g) { return 1.0f / (1.0f + expf(-g)); }

static void swiglu_fwd(zinf_dtype dt, const op_elementwise *e) {
    size_t F = (size_t)e->cols;
    for (size_t r = 0; r < e->n; r++)
        for (size_t j = 0; j < F; j++) {
            float g = dt_load(e->a, dt, 2 * F * r + j), u = dt_load(e->a, dt, 2 * F * r + F + j);
            dt_store(e->out, dt, F * r + j, g * sigmoid(g) * u);
        }
}

static void swiglu_bwd(zinf_dtype dt, const op_elementwise *e) {
    size_t F = (size_t)e->cols;
    for (size_t r = 0; r < e->n; r++)
        for (size_t j = 0; j < F; j++) {
            size_t at = 2 * F * r + j;
            float g = dt_load(e->a, dt, at), u = dt_load(e->a, dt, at + F), d = dt_load(e->b, dt, F * r + j);
            float sg = sigmoid(g);
            dt_store(e->out, dt, at, d * u * (sg * (1.0f + g * (1.0f - sg))));
            dt_store(e->out, dt, at + F, d * (g * sg));
        }
}

static zinf_status bias_grad(zinf_dtype dt, const op_elementwise *a, host_scratch *s) {
    int cols = a->cols;
    SCRATCH(sum, 0, cols);
    SCRATCH(row, 1, cols);
    memset(sum, 0, (size_t)cols * sizeof *sum);
    for (size_t r = 0; r < a->n; r++) {
        ld_row(row, a->a, dt, r * cols, cols);
        for (int j = 0; j < cols; j++)
            sum[j] += row[j];
    }
    grad_row(a->out, dt, sum, cols, a->first);
    return ZINF_OK;
}

// ---- rotary embedding ----
// The backward turns by the opposite angle: sin negated, which is exact.

static void rope(zinf_dtype dt, const op_rope *a, bool backward) {
    int half = a->hd / 2, heads = a->NH + a->NKV;
    size_t row = (size_t)(a->NH + 2 * a->NKV) * a->hd;
    float sign = backward ? -1.0f : 1.0f;
    for (int b = 0; b < a->B; b++)
        for (int t = 0; t < a->T; t++) {
            const float *c = a->cos_tab + (size_t)t * half, *sn = a->sin_tab + (size_t)t * half;
            for (int h = 0; h < heads; h++) {
                size_t base = ((size_t)b * a->T + t) * row + (size_t)h * a->hd;
                for (int i = 0; i < half; i++) {
                    float x1 = dt_load(a->qkv, dt, base + i), x2 = dt_load(a->qkv, dt, base + half + i);
                    float si = sign * sn[i];
                    dt_store(a->qkv, dt, base + i, x1 * c[i] - x2 * si);
                    dt_store(a->qkv, dt, base + half + i, x2 * c[i] + x1 * si);
                }
            }
        }
}

// ---- attention ----
// Per (batch, kv head): its k and v widened into T x hd fp32 rows, then for each query
// head of its group the q rows, row by row over the keys the query sees.

typedef struct head_view {
    float *q, *k, *v; // T x hd each: a query head, and its kv head
} head_view;

// The T rows of hd channels at channel off of each token of batch item b into dst.
static void load_rows(const zinf_attention_args *a, int b, size_t off, float *dst) {
    int T = a->T, hd = a->hd;
    size_t row = (size_t)(a->NH + 2 * a->NKV) * hd;
    for (int t = 0; t < T; t++)
        ld_row(dst + (size_t)t * hd, a->qkv, a->dt, ((size_t)b * T + t) * row + off, hd);
}

// The inverse of load_rows, into dqkv.
static void store_rows(const zinf_attention_args *a, int b, size_t off, const float *src) {
    int T = a->T, hd = a->hd;
    size_t row = (size_t)(a->NH + 2 * a->NKV) * hd;
    for (int t = 0; t < T; t++)
        st_row(a->dqkv, a->dt, ((size_t)b * T + t) * row + off, src + (size_t)t * hd, hd);
}

static void load_kv(const zinf_attention_args *a, int b, int g, head_view *hv) {
    load_rows(a, b, (size_t)(a->NH + g) * a->hd, hv->k);
    load_rows(a, b, (size_t)(a->NH + a->NKV + g) * a->hd, hv->v);
}

// The first key query t sees.
static int first_key(int t, int window) { return window > 0 && t >= window ? t - window + 1 : 0; }

// Scaled scores of row t against keys lo..t into p; returns their maximum.
static float scores(const head_view *hv, int t, int lo, int hd, float scale, float *p) {
    float mx = -INFINITY;
    const float *q = hv->q + (size_t)t * hd;
    for (int j = lo; j <= t; j++) {
        const float *k = hv->k + (size_t)j * hd;
        float dot = 0.0f;
        for (int i = 0; i < hd; i++)
            dot += q[i] * k[i];
        p[j] = dot * scale;
        if (p[j] > mx) mx = p[j];
    }
    return mx;
}

static zinf_status attention_fwd(const zinf_attention_args *a, host_scratch *s) {
    int T = a->T, C = a->C, NH = a->NH, hd = a->hd, group = NH / a->NKV;
    float scale = 1.0f / sqrtf((float)hd);
    SCRATCH(qkv, 0, 3 * (size_t)T * hd);
    SCRATCH(p, 1, T);
    SCRATCH(o, 2, hd);
    head_view hv = {qkv, qkv + (size_t)T * hd, qkv + 2 * (size_t)T * hd};
    for (int b = 0; b < a->B; b++) {
        for (int h = 0; h < NH; h++) {
            if (h % group == 0) load_kv(a, b, h / group, &hv);
            load_rows(a, b, (size_t)h * hd, hv.q);
            for (int t = 0; t < T; t++) {
                int lo = first_key(t, a->window);
                float mx = scores(&hv, t, lo, hd, scale, p), sum = 0.0f;
                for (int j = lo; j <= t; j++) {
                    p[j] = expf(p[j] - mx);
                    sum += p[j];
                }
                float inv = 1.0f / sum;
                memset(o, 0, (size_t)hd * sizeof *o);
                for (int j = lo; j <= t; j++) {
                    float pj = p[j] * inv;
                    const float *v = hv.v + (size_t)j * hd;
                    for (int i = 0; i < hd; i++)
                        o[i] += pj * v[i];
                }
                a->lse[((size_t)b * NH + h) * T + t] = mx + logf(sum);
                st_row(a->out, a->dt, ((size_t)b * T + t) * C + (size_t)h * hd, o, hd);
            }
        }
    }
    return ZINF_OK;
}

// dk and dv of a kv head sum over the query heads of its group, in head order.
static zinf_status attention_bwd(const zinf_attention_args *a, host_scratch *s) {
    int T = a->T, C = a->C, NH = a->NH, hd = a->hd, group = NH / a->NKV;
    float scale = 1.0f / sqrtf((float)hd);
    SCRATCH(qkv, 0, 3 * (size_t)T * hd);
    SCRATCH(dqkv, 1, 3 * (size_t)T * hd);
    SCRATCH(p, 2, 2 * (size_t)T);
    SCRATCH(dout, 3, hd);
    float *dp = p + T;
    head_view hv = {qkv, qkv + (size_t)T * hd, qkv + 2 * (size_t)T * hd};
    float *dq = dqkv, *dk = dqkv + (size_t)T * hd, *dv = dqkv + 2 * (size_t)T * hd;
    for (int b = 0; b < a->B; b++) {
        for (int h = 0; h < NH; h++) {
            if (h % group == 0) {
                load_kv(a, b, h / group, &hv);
                memset(dk, 0, 2 * (size_t)T * hd * sizeof *dk);
            }
            load_rows(a, b, (size_t)h * hd, hv.q);
            memset(dq, 0, (size_t)T * hd * sizeof *dq);
            for (int t = 0; t < T; t++) {
                int lo = first_key(t, a->window);
                float lse = a->lse[((size_t)b * NH + h) * T + t];
                scores(&hv, t, lo, hd, scale, p);
                ld_row(dout, a->dout, a->dt, ((size_t)b * T + t) * C + (size_t)h * hd, hd);
                float D = 0.0f;
                for (int j = lo; j <= t; j++) {
                    p[j] = expf(p[j] - lse);
                    const float *v = hv.v + (size_t)j * hd;
                    float d = 0.0f;
                    for (int i = 0; i < hd; i++)
                        d += dout[i] * v[i];
                    dp[j] = d;
                    D += p[j] * d;
                }
                const float *q = hv.q + (size_t)t * hd;
                float *dqt = dq + (size_t)t * hd;
                for (int j = lo; j <= t; j++) {
                    float ds = p[j] * (dp[j] - D) * scale;
                    const float *k = hv.k + (size_t)j * hd;
                    float *dkj = dk + (size_t)j * hd, *dvj = dv + (size_t)j * hd;
                    for (int i = 0; i < hd; i++) {
                        dqt[i] += ds * k[i];
                        dkj[i] += ds * q[i];
                        dvj[i] += p[j] * dout[i];
                    }
                }
            }
            store_rows(a, b, (size_t)h * hd, dq);
            if (h % group == group - 1) {
                int g = h / group;
                store_rows(a, b, (size_t)(NH + g) * hd, dk);
                store_rows(a, b, (size_t)(NH + a->NKV + g) * hd, dv);
            }
        }
    }
    return ZINF_OK;
}

// ---- cross-entropy ----

static zinf_status cross_entropy(zinf_dtype dt, const op_cross_entropy *a, host_scratch *s) {
    int V = a->V, ld = a->ld;
    SCRATCH(x, 0, ld);
    for (int r = 0; r < a->rows; r++) {
        ld_row(x, a->logits, dt, (size_t)r * ld, V);
        float mx = -INFINITY, sum = 0.0f;
        for (int i = 0; i < V; i++)
            mx = x[i] > mx ? x[i] : mx;
        for (int i = 0; i < V; i++)
            sum += expf(x[i] - mx);
        float lse = mx + logf(sum);
        int tgt = a->targets[r];
        a->losses[r] = lse - x[tgt];
        if (a->lse) a->lse[r] = lse;
        if (!a->dlogits) continue;
        for (int i = 0; i < V; i++)
            x[i] = (expf(x[i] - lse) - (i == tgt ? 1.0f : 0.0f)) * a->dscale;
        for (int i = V; i < ld; i++)
            x[i] = 0.0f;
        st_row(a->dlogits, dt, (size_t)r * ld, x, ld);
    }
    return ZINF_OK;
}

// cross_entropy's gradient pass for columns [v0, v0 + n), the row's lse given: the same
// expression on the same floats, so a row's blocks give its bits.
static zinf_status cross_entropy_grad(zinf_dtype dt, const op_cross_entropy_grad *a, host_scratch *s) {
    int n = a->n;
    SCRATCH(x, 0, n);
    for (int r = 0; r < a->rows; r++) {
        ld_row(x, a->logits, dt, (size_t)r * n, n);
        float lse = a->lse[r];
        int64_t tgt = (int64_t)a->targets[r] - a->v0; // the target's column in the block, if there
        for (int i = 0; i < n; i++)
            x[i] = (expf(x[i] - lse) - (i == tgt ? 1.0f : 0.0f)) * a->dscale;
        st_row(a->dlogits, dt, (size_t)r * n, x, n);
    }
    return ZINF_OK;
}

// ---- embedding ----

// The channels [*c0, *c1) of a row that starts at element `from` of a whole table whose
// window [lo, lo + n) a buffer holds (the front end keeps lo + n within int64).
static void window_cols(int64_t from, int C, int64_t lo, int64_t n, int *c0, int *c1) {
    int64_t a = lo - from, b = lo + n - from;
    *c0 = (int)(a < 0 ? 0 : a > C ? C : a);
    *c1 = (int)(b < 0 ? 0 : b > C ? C : b);
}

// With a part, out += each element the windows hold, an add rounded once. Why the parts
// give the plain op's bits: the caller zeroes out and the parts are disjoint and cover
// the tables, so each element gets one wte add and at most one wpe add; 0 + x is exact
// (but for a -0 in a table, which comes out +0), and round(round(x) + y) with x already
// representable is the plain op's round(x + y), whichever add comes first.
static zinf_status embedding_fwd_part(zinf_dtype dt, const op_embedding *a, host_scratch *s) {
    const zinf_embedding_part *p = &a->part;
    int C = a->C, c0, c1;
    SCRATCH(x, 0, C);
    for (int b = 0; b < a->B; b++) {
        for (int t = 0; t < a->T; t++) {
            size_t r = (size_t)b * a->T + t;
            int64_t te = (int64_t)a->tok[r] * C, pe = (int64_t)t * C;
            window_cols(te, C, p->wte_lo, p->wte_n, &c0, &c1);
            if (c0 < c1) {
                ld_row(x, a->wte, dt, (size_t)(te + c0 - p->wte_lo), (size_t)(c1 - c0));
                add_row(a->out, dt, r * C + c0, x, (size_t)(c1 - c0));
            }
            window_cols(pe, C, p->wpe_lo, p->wpe_n, &c0, &c1);
            if (c0 < c1) {
                ld_row(x, a->wpe, dt, (size_t)(pe + c0 - p->wpe_lo), (size_t)(c1 - c0));
                add_row(a->out, dt, r * C + c0, x, (size_t)(c1 - c0));
            }
        }
    }
    return ZINF_OK;
}

static zinf_status embedding_fwd(zinf_dtype dt, const op_embedding *a, host_scratch *s) {
    if (a->accumulate) return embedding_fwd_part(dt, a, s);
    int C = a->C;
    SCRATCH(x, 0, C);
    SCRATCH(y, 1, C);
    for (int b = 0; b < a->B; b++) {
        for (int t = 0; t < a->T; t++) {
            size_t r = (size_t)b * a->T + t;
            ld_row(x, a->wte, dt, (size_t)a->tok[r] * C, C);
            if (a->wpe) {
                ld_row(y, a->wpe, dt, (size_t)t * C, C);
                for (int i = 0; i < C; i++)
                    x[i] += y[i];
            }
            st_row(a->out, dt, r * C, x, C);
        }
    }
    return ZINF_OK;
}

// Only the channels inside the windows are summed and added; a channel's sum does not
// depend on the others, so a part's elements get the plain op's bits.
static zinf_status embedding_bwd(zinf_dtype dt, const op_embedding *a, host_scratch *s) {
    const zinf_embedding_part *p = &a->part;
    int C = a->C, N = a->B * a->T, c0, c1;
    SCRATCH(sum, 0, C);
    SCRATCH(row, 1, C);
    // wte: the positions in token order, each token's rows summed, added once.
    for (int i = 0; p->wte_n > 0 && i < N;) {
        int tok = a->tok[a->order[i]];
        window_cols((int64_t)tok * C, C, p->wte_lo, p->wte_n, &c0, &c1);
        memset(sum, 0, (size_t)C * sizeof *sum);
        for (; i < N && a->tok[a->order[i]] == tok; i++) {
            ld_row(row, a->dout, dt, (size_t)a->order[i] * C + c0, (size_t)(c1 - c0));
            for (int c = 0; c < c1 - c0; c++)
                sum[c] += row[c];
        }
        if (c0 < c1) add_row(a->dwte, dt, (size_t)((int64_t)tok * C + c0 - p->wte_lo), sum, (size_t)(c1 - c0));
    }
    for (int t = 0; p->wpe_n > 0 && t < a->T; t++) {
        window_cols((int64_t)t * C, C, p->wpe_lo, p->wpe_n, &c0, &c1);
        memset(sum, 0, (size_t)C * sizeof *sum);
        for (int b = 0; b < a->B; b++) {
            ld_row(row, a->dout, dt, ((size_t)b * a->T + t) * C + c0, (size_t)(c1 - c0));
            for (int c = 0; c < c1 - c0; c++)
                sum[c] += row[c];
        }
        if (c0 < c1) add_row(a->dwpe, dt, (size_t)((int64_t)t * C + c0 - p->wpe_lo), sum, (size_t)(c1 - c0));
    }
    return ZINF_OK;
}

// ---- communication quantizers (ZeRO++ qwZ, qgZ) ----
// Group by group: a = max |x| (a NaN is looked for on its own, since comparisons pass
// over it), then each q from the double quotient x * Q / a, which rounds once and so
// rint (half to even, the default rounding mode) gives the integer nearest the exact
// quotient. gpu/cuda/ops.cu computes the same expressions.

// The quantized value of x in a group of absmax a (finite and nonzero).
static int quant_one(float x, int Q, float a) {
    double r = rint((double)x * Q / (double)a);
    return r < -Q ? -Q : r > Q - 1 ? Q - 1 : (int)r;
}

static void quantize(zinf_dtype dt, const op_quantize *a) {
    int Q = 1 << (a->bits - 1);
    int8_t *q8 = a->q;
    uint8_t *q4 = a->q;
    for (size_t g0 = 0, j = 0; g0 < a->n; g0 += a->group, j++) {
        size_t len = a->n - g0 < a->group ? a->n - g0 : a->group;
        float amax = 0.0f;
        bool bad = false;
        for (size_t i = 0; i < len; i++) {
            float v = fabsf(dt_load(a->x, dt, g0 + i));
            if (isnan(v))
                bad = true;
            else if (v > amax)
                amax = v;
        }
        bad |= isinf(amax);
        bool zero = bad || amax == 0.0f; // every q of the group is 0
        a->scale[j] = bad ? NAN : amax == 0.0f ? 1.0f : amax / (float)Q;
        if (a->bits == 8) {
            for (size_t i = 0; i < len; i++)
                q8[g0 + i] = (int8_t)(zero ? 0 : quant_one(dt_load(a->x, dt, g0 + i), Q, amax));
            continue;
        }
        // g0 is even (group is), so byte (g0 + i) / 2 holds elements i and i + 1 of this
        // group; an odd last element leaves the high nibble 0.
        for (size_t i = 0; i < len; i += 2) {
            int lo = zero ? 0 : quant_one(dt_load(a->x, dt, g0 + i), Q, amax);
            int hi = zero || i + 1 == len ? 0 : quant_one(dt_load(a->x, dt, g0 + i + 1), Q, amax);
            q4[(g0 + i) / 2] = (uint8_t)((lo & 15) | (hi & 15) << 4);
        }
    }
}

static void dequantize(zinf_dtype dt, const op_quantize *a) {
    const int8_t *q8 = a->q;
    const uint8_t *q4 = a->q;
    for (size_t g0 = 0, j = 0; g0 < a->n; g0 += a->group, j++) {
        size_t end = a->n - g0 < a->group ? a->n : g0 + a->group;
        float sc = a->scale[j];
        for (size_t i = g0; i < end; i++) {
            int q;
            if (a->bits == 8) {
                q = q8[i];
            } else {
                q = (q4[i / 2] >> (4 * (i & 1))) & 15;
                q = q >= 8 ? q - 16 : q; // two's complement nibble
            }
            float v = (float)q * sc;
            dt_store(a->out, dt, i, a->accumulate ? dt_load(a->out, dt, i) + v : v);
        }
    }
}

// ---- optimizer ----

// Each row updated by cpu_adam from the states where they are (from_*) into scratch,
// its new weights stored to out: the arithmetic of the whole tile's update, so its bits.
static zinf_status optim_rows(const op_optim *o, host_scratch *s) {
    const zinf_optim_tile *t = &o->t;
    size_t L = (size_t)o->row_len, gs = zinf_dtype_size(t->grad_dtype), os = zinf_dtype_size(t->out_dtype);
    SCRATCH(p, 0, L);
    SCRATCH(m, 1, L);
    SCRATCH(v, 2, L);
    for (int k = 0; k < o->count; k++) {
        int64_t r = o->rows ? o->rows[k] : k;
        if (r < 0 || (size_t)r >= t->n / L) continue; // not wholly inside the tile
        size_t at = (size_t)r * L;
        zinf_optim_tile u = {.param = p,
                             .exp_avg = t->exp_avg ? m : NULL,
                             .exp_avg_sq = t->exp_avg_sq ? v : NULL,
                             .grad = (const char *)t->grad + at * gs,
                             .grad_dtype = t->grad_dtype,
                             .out = (char *)t->out + at * os,
                             .out_dtype = t->out_dtype,
                             .n = L,
                             .from_param = t->param + at,
                             .from_exp_avg = t->exp_avg ? t->exp_avg + at : NULL,
                             .from_exp_avg_sq = t->exp_avg_sq ? t->exp_avg_sq + at : NULL};
        ZINF_CHECK(zinf_optim_update(&o->h, &u, zinf_simd_active()));
    }
    return ZINF_OK;
}

// ---- dispatch ----

zinf_status host_run_op(const op_record *op, host_scratch *s) {
    zinf_dtype dt = op->dt;
    const op_elementwise *e = &op->u.ew;
    switch (op->kind) {
    case OP_GEMM: return host_gemm(&op->u.gemm, s);
    case OP_BIAS_GRAD: return bias_grad(dt, e, s);
    case OP_LAYERNORM_FWD: return layernorm_fwd(dt, &op->u.ln, s);
    case OP_LAYERNORM_BWD: return layernorm_bwd(dt, &op->u.ln, s);
    case OP_RMSNORM_FWD: return rmsnorm_fwd(dt, &op->u.ln, s);
    case OP_RMSNORM_BWD: return rmsnorm_bwd(dt, &op->u.ln, s);
    case OP_GELU_FWD: gelu_fwd(dt, e); return ZINF_OK;
    case OP_GELU_BWD: gelu_bwd(dt, e); return ZINF_OK;
    case OP_SWIGLU_FWD: swiglu_fwd(dt, e); return ZINF_OK;
    case OP_SWIGLU_BWD: swiglu_bwd(dt, e); return ZINF_OK;
    case OP_ROPE_FWD: rope(dt, &op->u.rope, false); return ZINF_OK;
    case OP_ROPE_BWD: rope(dt, &op->u.rope, true); return ZINF_OK;
    case OP_ATTENTION_FWD: return attention_fwd(&op->u.attn, s);
    case OP_ATTENTION_BWD: return attention_bwd(&op->u.attn, s);
    case OP_CROSS_ENTROPY: return cross_entropy(dt, &op->u.xent, s);
    case OP_CROSS_ENTROPY_GRAD: return cross_entropy_grad(dt, &op->u.xgrad, s);
    case OP_EMBEDDING_FWD: return embedding_fwd(dt, &op->u.emb, s);
    case OP_EMBEDDING_BWD: return embedding_bwd(dt, &op->u.emb, s);
    case OP_ADD:
        for (size_t i = 0; i < e->n; i++)
            dt_store(e->out, dt, i, dt_load(e->a, dt, i) + dt_load(e->b, dt, i));
        return ZINF_OK;
    case OP_SCALE:
        for (size_t i = 0; i < e->n; i++)
            dt_store(e->out, dt, i, dt_load(e->out, dt, i) * e->scale);
        return ZINF_OK;
    case OP_CAST:
        for (size_t i = 0; i < e->n; i++)
            dt_store(e->out, dt, i, dt_load(e->a, e->src_dt, i));
        return ZINF_OK;
    case OP_ACCUMULATE:
        for (size_t i = 0; i < e->n; i++)
            ((float *)e->out)[i] = (e->first ? 0.0f : ((float *)e->out)[i]) + dt_load(e->a, e->src_dt, i);
        return ZINF_OK;
    case OP_SUMSQ:
        for (int i = 0; i < op->u.sumsq.n; i++) {
            const zinf_sumsq_piece *p = &op->u.sumsq.pieces[i];
            zinf_grad_stats gs;
            ZINF_CHECK(zinf_grad_stats_compute(p->x, dt, p->n, zinf_simd_active(), &gs));
            p->out[0] = gs.sumsq;
            p->out[1] = gs.nonfinite ? 1.0 : 0.0;
        }
        return ZINF_OK;
    case OP_QUANTIZE: quantize(dt, &op->u.quant); return ZINF_OK;
    case OP_DEQUANTIZE: dequantize(dt, &op->u.quant); return ZINF_OK;
    case OP_OPTIM: return zinf_optim_update(&op->u.optim.h, &op->u.optim.t, zinf_simd_active());
    case OP_OPTIM_ROWS: return optim_rows(&op->u.optim, s);
    case OP_COLLECTIVE: break; // the sim device's alone
    }
    return zinf_fail(ZINF_ERR_INTERNAL, "host device: unknown op %d", op->kind);
}
