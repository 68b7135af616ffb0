// Causal self-attention on the CUDA backend, multi-head or grouped-query, with an
// optional sliding window: the heads are gathered into fp32 (head, T, hd) matrices in
// the workspace, the T x T scores come from strided-batched cuBLASLt products in fp32
// (never TF32), and row kernels do the softmax and its gradient (as llm.c's
// attention_forward/backward in train_gpt2.cu, with the probabilities recomputed in the
// backward from the saved log-sum-exp, as flash attention does, Dao et al. 2022).
// Every sum is a product in cuBLAS or a fixed-order block reduction: the results
// repeat bit for bit.
//
// Forward, per head: S = scale Q K^T, lse = logsumexp over the keys each row sees,
// P = exp(S - lse) (0 elsewhere), Y = P V.
// Backward: P recomputed; dV = P^T dY; dP = dY V^T; D_i = sum_j P_ij dP_ij;
// dS = P (dP - D); dQ = scale dS K; dK = scale dS^T Q. The full T x T products are
// computed; the masked entries of P and dS are exact zeros, so they add nothing.
// Grouped-query: the G query heads of a kv head lie one after another in the workspace,
// so their rows stacked are one (G T, hd) matrix against the kv head's K and V, one
// product per kv head: G T x T scores, and dK, dV summed over the group by the product
// itself (G = 1 is GPT-2's multi-head attention, the same products as before).
#include <string.h>

#include "attention_plan.h"
#include "cuda_backend.h"

// ---- kernels ----

// dst[hb][t][d] = src[b][t][off + h * hs + d] for the chunk's heads bh = bh0 + hb
// (b = bh / NH, h = bh % NH, NH the query or the kv heads of a token); src rows have ld
// elements. n = heads x seq x hs.
template <typename T>
static __global__ void gather_heads_kernel(float *dst, const T *src, int ld, int off, int bh0, int seq, int NH, int hs,
                                           size_t n) {
    EW_LOOP(i, n) {
        size_t d = i % hs, t = (i / hs) % seq, bh = bh0 + i / ((size_t)hs * seq);
        size_t b = bh / NH, h = bh % NH;
        dst[i] = to_f32(src[(b * seq + t) * ld + off + h * hs + d]);
    }
}

// The inverse of gather_heads_kernel, rounding to the storage type.
template <typename T>
static __global__ void scatter_heads_kernel(T *dst, const float *src, int ld, int off, int bh0, int seq, int NH, int hs,
                                            size_t n) {
    EW_LOOP(i, n) {
        size_t d = i % hs, t = (i / hs) % seq, bh = bh0 + i / ((size_t)hs * seq);
        size_t b = bh / NH, h = bh % NH;
        store_f32(&dst[(b * seq + t) * ld + off + h * hs + d], src[i]);
    }
}

// The first key query t sees (window 0: no limit).
static __device__ __forceinline__ int first_key(int t, int window) {
    return window > 0 && t >= window ? t - window + 1 : 0;
}

// One block per row (head hb, query t) of the chunk's scores: lse over lo <= j <= t,
// then the row becomes P = exp(S - lse), zero elsewhere. lse is (B, NH, T), so the
// chunk's rows start at bh0 * seq.
static __global__ void __launch_bounds__(ROW_THREADS)
    softmax_fwd_kernel(float *s, float *lse, int bh0, int seq, int window) {
    __shared__ float red[ROW_THREADS / 32];
    size_t row = blockIdx.x;
    int t = (int)(row % seq), lo = first_key(t, window);
    float *x = s + row * seq;
    float mx = -INFINITY;
    for (int j = lo + threadIdx.x; j <= t; j += ROW_THREADS)
        mx = fmaxf(mx, x[j]);
    mx = block_max<ROW_THREADS>(mx, red);
    float sum = 0.0f;
    for (int j = lo + threadIdx.x; j <= t; j += ROW_THREADS)
        sum += expf(x[j] - mx);
    float l = mx + logf(block_sum<ROW_THREADS>(sum, red));
    for (int j = threadIdx.x; j < seq; j += ROW_THREADS)
        x[j] = j >= lo && j <= t ? expf(x[j] - l) : 0.0f;
    if (threadIdx.x == 0) lse[(size_t)bh0 * seq + row] = l;
}

// The backward's P from the recomputed S and the saved lse: the same expression as
// the forward's on the same values, so the same probabilities.
static __global__ void probs_kernel(float *s, const float *lse, int bh0, int seq, int window, size_t n) {
    EW_LOOP(i, n) {
        size_t row = i / seq;
        int j = (int)(i % seq), t = (int)(row % seq);
        s[i] = j >= first_key(t, window) && j <= t ? expf(s[i] - lse[(size_t)bh0 * seq + row]) : 0.0f;
    }
}

// One block per row: D = sum_{lo <= j <= t} P_j dP_j, then dS = P (dP - D) over P.
static __global__ void __launch_bounds__(ROW_THREADS) dscores_kernel(float *p, const float *dp, int seq, int window) {
    __shared__ float red[ROW_THREADS / 32];
    size_t row = blockIdx.x;
    int t = (int)(row % seq), lo = first_key(t, window);
    float *pr = p + row * seq;
    const float *dr = dp + row * seq;
    float s = 0.0f;
    for (int j = lo + threadIdx.x; j <= t; j += ROW_THREADS)
        s += pr[j] * dr[j];
    float D = block_sum<ROW_THREADS>(s, red);
    for (int j = threadIdx.x; j < seq; j += ROW_THREADS)
        pr[j] = j >= lo && j <= t ? pr[j] * (dr[j] - D) : 0.0f;
}

// ---- products ----

// C = alpha op(A) op(B) for each of `batch` heads, fp32, strides in elements.
static zinf_status head_gemm(cuda_device *cd, cuda_stream *cs, bool trans_a, bool trans_b, int m, int n, int k,
                             const float *A, int lda, int64_t sa, const float *B, int ldb, int64_t sb, float *C,
                             int ldc, int64_t sc, float alpha, int batch) {
    zinf_gemm_args g;
    memset(&g, 0, sizeof g);
    g.dt = ZINF_DTYPE_F32;
    g.trans_a = trans_a;
    g.trans_b = trans_b;
    g.m = m;
    g.n = n;
    g.k = k;
    g.a = A;
    g.lda = lda;
    g.b = B;
    g.ldb = ldb;
    g.c = C;
    g.ldc = ldc;
    g.alpha = alpha;
    g.beta = 0.0f;
    g.batch = batch;
    g.stride_a = sa;
    g.stride_b = sb;
    g.stride_c = sc;
    return cuda_gemm(cd, cs, &g);
}

// ---- forward and backward ----

template <typename T>
static zinf_status gather(cudaStream_t st, float *dst, const void *src, int ld, int off, int bh0, int nb, int seq,
                          int NH, int hs) {
    size_t n = (size_t)nb * seq * hs;
    gather_heads_kernel<T> CUDA_LAUNCH(ew_blocks(n), EW_THREADS, 0, st)(dst, (const T *)src, ld, off, bh0, seq, NH, hs,
                                                                        n);
    ZINF_CUDA_LAUNCHED("gather_heads_kernel");
    return ZINF_OK;
}

template <typename T>
static zinf_status scatter(cudaStream_t st, void *dst, const float *src, int ld, int off, int bh0, int nb, int seq,
                           int NH, int hs) {
    size_t n = (size_t)nb * seq * hs;
    scatter_heads_kernel<T> CUDA_LAUNCH(ew_blocks(n), EW_THREADS, 0, st)((T *)dst, src, ld, off, bh0, seq, NH, hs, n);
    ZINF_CUDA_LAUNCHED("scatter_heads_kernel");
    return ZINF_OK;
}

// Query heads bh0 .. bh0 + nb of the chunk (whole groups), and their nb / G kv heads.
template <typename T>
static zinf_status attention_fwd_t(cuda_device *cd, cuda_stream *cs, const zinf_attention_args *a) {
    att_plan p = att_plan_of(a->B, a->T, a->NH, a->NKV, a->hd);
    att_ws w;
    att_layout(&p, a->ws, &w);
    cudaStream_t st = cs->st;
    int seq = a->T, NH = a->NH, NKV = a->NKV, hd = a->hd, G = p.group, ld = (NH + 2 * NKV) * hd;
    float scale = 1.0f / sqrtf((float)hd);
    // strides of a group's stacked query rows and scores, and of a kv head
    int64_t sq = (int64_t)G * p.head_elems, ss = (int64_t)G * p.score_elems, skv = (int64_t)p.head_elems;
    float *y = w.dq; // the forward's output heads
    for (int bh0 = 0; bh0 < p.BH; bh0 += p.chunk) {
        int nb = p.BH - bh0 < p.chunk ? p.BH - bh0 : p.chunk, nkv = nb / G;
        ZINF_CHECK(gather<T>(st, w.q, a->qkv, ld, 0, bh0, nb, seq, NH, hd));
        ZINF_CHECK(gather<T>(st, w.k, a->qkv, ld, NH * hd, bh0 / G, nkv, seq, NKV, hd));
        ZINF_CHECK(gather<T>(st, w.v, a->qkv, ld, (NH + NKV) * hd, bh0 / G, nkv, seq, NKV, hd));
        // S = scale Q K^T: (G seq x hd) (hd x seq)
        ZINF_CHECK(
            head_gemm(cd, cs, false, true, G * seq, seq, hd, w.q, hd, sq, w.k, hd, skv, w.s, seq, ss, scale, nkv));
        softmax_fwd_kernel CUDA_LAUNCH((unsigned)nb * seq, ROW_THREADS, 0, st)(w.s, a->lse, bh0, seq, a->window);
        ZINF_CUDA_LAUNCHED("softmax_fwd_kernel");
        // Y = P V: (G seq x seq) (seq x hd)
        ZINF_CHECK(head_gemm(cd, cs, false, false, G * seq, hd, seq, w.s, seq, ss, w.v, hd, skv, y, hd, sq, 1.0f, nkv));
        ZINF_CHECK(scatter<T>(st, a->out, y, a->C, 0, bh0, nb, seq, NH, hd));
    }
    return ZINF_OK;
}

template <typename T>
static zinf_status attention_bwd_t(cuda_device *cd, cuda_stream *cs, const zinf_attention_args *a) {
    att_plan p = att_plan_of(a->B, a->T, a->NH, a->NKV, a->hd);
    att_ws w;
    att_layout(&p, a->ws, &w);
    cudaStream_t st = cs->st;
    int seq = a->T, NH = a->NH, NKV = a->NKV, hd = a->hd, G = p.group, ld = (NH + 2 * NKV) * hd;
    float scale = 1.0f / sqrtf((float)hd);
    int64_t sq = (int64_t)G * p.head_elems, ss = (int64_t)G * p.score_elems, skv = (int64_t)p.head_elems;
    for (int bh0 = 0; bh0 < p.BH; bh0 += p.chunk) {
        int nb = p.BH - bh0 < p.chunk ? p.BH - bh0 : p.chunk, nkv = nb / G;
        size_t ns = (size_t)nb * p.score_elems;
        ZINF_CHECK(gather<T>(st, w.q, a->qkv, ld, 0, bh0, nb, seq, NH, hd));
        ZINF_CHECK(gather<T>(st, w.k, a->qkv, ld, NH * hd, bh0 / G, nkv, seq, NKV, hd));
        ZINF_CHECK(gather<T>(st, w.v, a->qkv, ld, (NH + NKV) * hd, bh0 / G, nkv, seq, NKV, hd));
        ZINF_CHECK(gather<T>(st, w.dy, a->dout, a->C, 0, bh0, nb, seq, NH, hd));
        // P, recomputed: S = scale Q K^T, then exp(S - lse)
        ZINF_CHECK(
            head_gemm(cd, cs, false, true, G * seq, seq, hd, w.q, hd, sq, w.k, hd, skv, w.s, seq, ss, scale, nkv));
        probs_kernel CUDA_LAUNCH(ew_blocks(ns), EW_THREADS, 0, st)(w.s, a->lse, bh0, seq, a->window, ns);
        ZINF_CUDA_LAUNCHED("probs_kernel");
        // dV = P^T dY: (G seq x seq)^T (G seq x hd), the sum over the group's heads
        ZINF_CHECK(
            head_gemm(cd, cs, true, false, seq, hd, G * seq, w.s, seq, ss, w.dy, hd, sq, w.dv, hd, skv, 1.0f, nkv));
        // dP = dY V^T: (G seq x hd) (hd x seq)
        ZINF_CHECK(
            head_gemm(cd, cs, false, true, G * seq, seq, hd, w.dy, hd, sq, w.v, hd, skv, w.dp, seq, ss, 1.0f, nkv));
        dscores_kernel CUDA_LAUNCH((unsigned)nb * seq, ROW_THREADS, 0, st)(w.s, w.dp, seq, a->window);
        ZINF_CUDA_LAUNCHED("dscores_kernel");
        // dQ = scale dS K; dK = scale dS^T Q, summed over the group like dV
        ZINF_CHECK(
            head_gemm(cd, cs, false, false, G * seq, hd, seq, w.s, seq, ss, w.k, hd, skv, w.dq, hd, sq, scale, nkv));
        ZINF_CHECK(
            head_gemm(cd, cs, true, false, seq, hd, G * seq, w.s, seq, ss, w.q, hd, sq, w.dk, hd, skv, scale, nkv));
        ZINF_CHECK(scatter<T>(st, a->dqkv, w.dq, ld, 0, bh0, nb, seq, NH, hd));
        ZINF_CHECK(scatter<T>(st, a->dqkv, w.dk, ld, NH * hd, bh0 / G, nkv, seq, NKV, hd));
        ZINF_CHECK(scatter<T>(st, a->dqkv, w.dv, ld, (NH + NKV) * hd, bh0 / G, nkv, seq, NKV, hd));
    }
    return ZINF_OK;
}

zinf_status cuda_attention_fwd(cuda_device *cd, cuda_stream *cs, const zinf_attention_args *a) {
    if (a->B <= 0 || a->T <= 0 || a->NH <= 0 || a->NKV <= 0 || a->hd <= 0) return ZINF_OK;
    CUDA_DT_SWITCH(a->dt, "attention_fwd", attention_fwd_t, cd, cs, a);
}

zinf_status cuda_attention_bwd(cuda_device *cd, cuda_stream *cs, const zinf_attention_args *a) {
    if (a->B <= 0 || a->T <= 0 || a->NH <= 0 || a->NKV <= 0 || a->hd <= 0) return ZINF_OK;
    CUDA_DT_SWITCH(a->dt, "attention_bwd", attention_bwd_t, cd, cs, a);
}
