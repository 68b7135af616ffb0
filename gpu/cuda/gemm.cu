// The matrix product on cuBLASLt (cuBLASLt API reference: cublasLtMatmul, the
// heuristic query, the BIAS, GELU_AUX(_BIAS) and DGELU epilogues, strided batches).
// Always fp32 compute (CUBLAS_COMPUTE_32F, never TF32: fp32 runs are the reference
// runs) with fp32 alpha and beta; A, B and C in the storage type.
//
// Row-major to column-major: a row-major r x c matrix with leading dimension ld is, in
// memory, the column-major c x r matrix (its transpose) with the same ld. So the
// row-major C = op(A) op(B) is computed as the column-major C^T = op(B)^T op(A)^T:
// cuBLASLt's A is our B and its B is our A, with the same transpose flags, and D = C
// is n x m. Descriptors live for one call; the heuristic's answer is the device's to
// keep (cuda_device.lt_choices).
#include <string.h>

#include "cuda_backend.h"

#define LT_TRY(call)                                                                                                   \
    do {                                                                                                               \
        cublasStatus_t bs_ = (call);                                                                                   \
        if (bs_ != CUBLAS_STATUS_SUCCESS) {                                                                            \
            st = cublas_fail_at(bs_, #call, __FILE__, __LINE__);                                                       \
            goto done;                                                                                                 \
        }                                                                                                              \
    } while (0)

static cudaDataType_t lt_type(zinf_dtype dt) {
    switch (dt) {
    case ZINF_DTYPE_BF16: return CUDA_R_16BF;
    case ZINF_DTYPE_F16: return CUDA_R_16F;
    default: return CUDA_R_32F;
    }
}

// The largest power of two up to 256 that divides the address of every item's
// matrix. The heuristic assumes 256 unless told, and an algorithm picked for more
// alignment than the pointers have would fault or fail.
static uint32_t alignment(const void *p, int64_t stride, size_t esize, int batch) {
    uint64_t bits = (uint64_t)(uintptr_t)p;
    if (batch > 1) bits |= (uint64_t)stride * esize;
    uint32_t a = 256;
    while (a > 1 && (bits & (a - 1)))
        a >>= 1;
    return a;
}

static cublasStatus_t set_batch(cublasLtMatrixLayout_t l, int32_t batch, int64_t stride) {
    cublasStatus_t bs = cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch);
    if (bs != CUBLAS_STATUS_SUCCESS) return bs;
    return cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride);
}

// The epilogue of a product whose bias (if any) cuBLASLt takes: the bias, and the
// activation g->act with its input in g->aux. cuBLASLt's GELU is the tanh
// approximation (pytorch/pytorch#104061), zinf's own.
static uint32_t epilogue_of(const zinf_gemm_args *g, bool with_bias) {
    switch (g->act) {
    case ZINF_GEMM_GELU: return with_bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    case ZINF_GEMM_DGELU: return CUBLASLT_EPILOGUE_DGELU;
    default: return with_bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    }
}

// The heuristic's answer for problem p: the one remembered, else asked (and remembered
// while there is room). *found false: no algorithm. Not a failure either way.
static zinf_status lt_choose(cuda_device *cd, const lt_problem *p, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t la,
                             cublasLtMatrixLayout_t lb, cublasLtMatrixLayout_t lc, cublasLtMatmulPreference_t pref,
                             cublasLtMatmulAlgo_t *algo, bool *found) {
    pthread_mutex_lock(&cd->lt_lock);
    for (int i = 0; i < cd->lt_choice_count; i++)
        if (memcmp(&cd->lt_choices[i].problem, p, sizeof *p) == 0) {
            *algo = cd->lt_choices[i].algo, *found = cd->lt_choices[i].found;
            pthread_mutex_unlock(&cd->lt_lock);
            return ZINF_OK;
        }
    pthread_mutex_unlock(&cd->lt_lock);
    cublasLtMatmulHeuristicResult_t res;
    int n = 0;
    memset(&res, 0, sizeof res);
    cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(cd->lt, desc, la, lb, lc, lc, pref, 1, &res, &n);
    *found = hs == CUBLAS_STATUS_SUCCESS && n >= 1 && res.state == CUBLAS_STATUS_SUCCESS;
    if (hs != CUBLAS_STATUS_SUCCESS && hs != CUBLAS_STATUS_NOT_SUPPORTED)
        return cublas_fail_at(hs, "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__);
    *algo = res.algo;
    pthread_mutex_lock(&cd->lt_lock);
    if (cd->lt_choice_count < CUDA_LT_CHOICES) {
        lt_choice *c = &cd->lt_choices[cd->lt_choice_count++];
        c->problem = *p, c->algo = res.algo, c->found = *found;
    }
    pthread_mutex_unlock(&cd->lt_lock);
    return ZINF_OK;
}

// One cublasLtMatmul, the bias in the epilogue when with_bias (D = alpha AB + beta C +
// bias, bias shared by the items: its batch stride stays 0), and the activation when
// g->act asks for one. *no_algo when the heuristic offers nothing for this problem,
// which is not yet a failure.
static zinf_status lt_matmul(cuda_device *cd, cuda_stream *cs, const zinf_gemm_args *g, bool with_bias, bool *no_algo) {
    zinf_status st = ZINF_OK;
    cublasLtMatmulDesc_t desc = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulAlgo_t algo;
    bool found = false;
    lt_problem problem;
    cudaDataType_t ty = lt_type(g->dt);
    size_t es = zinf_dtype_size(g->dt);
    int32_t batch = g->batch > 1 ? g->batch : 1;
    // cuBLASLt's A is our B: stored k x n row-major (n x k column-major), or n x k
    // row-major when trans_b (k x n column-major, transposed back by the op).
    int32_t op_a = g->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    uint64_t a_rows = (uint64_t)(g->trans_b ? g->k : g->n), a_cols = (uint64_t)(g->trans_b ? g->n : g->k);
    // cuBLASLt's B is our A: stored m x k row-major (k x m column-major), or k x m
    // row-major when trans_a.
    int32_t op_b = g->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    uint64_t b_rows = (uint64_t)(g->trans_a ? g->m : g->k), b_cols = (uint64_t)(g->trans_a ? g->k : g->m);
    uint32_t epilogue = epilogue_of(g, with_bias);
    int64_t aux_ld = g->ldc; // the activation's input is packed as D is
    uint64_t ws_bytes = CUDA_LT_WORKSPACE;
    // A residual is cuBLASLt's C, read beside D with beta 1.
    const void *c_in = g->residual ? g->residual : g->c;
    float beta = g->residual ? 1.0f : g->beta;
    uint32_t al_a = alignment(g->b, g->stride_b, es, batch);
    uint32_t al_b = alignment(g->a, g->stride_a, es, batch);
    uint32_t al_c = alignment(c_in, g->stride_c, es, batch);
    uint32_t al_d = alignment(g->c, g->stride_c, es, batch);

    *no_algo = false;
    problem =
        (lt_problem){.type = ty,
                     .op_a = op_a,
                     .op_b = op_b,
                     .batch = batch,
                     .epilogue = epilogue,
                     .align = {al_a, al_b, al_c, al_d},
                     .bias_align = with_bias ? alignment(g->bias, 0, 1, 1) : 0,
                     .aux_align = g->act != ZINF_GEMM_PLAIN ? alignment(g->aux, 0, 1, 1) : 0,
                     .a_rows = a_rows,
                     .a_cols = a_cols,
                     .b_rows = b_rows,
                     .b_cols = b_cols,
                     .c_rows = (uint64_t)g->n,
                     .c_cols = (uint64_t)g->m,
                     .ld = {g->ldb, g->lda, g->ldc},
                     .stride = {batch > 1 ? g->stride_b : 0, batch > 1 ? g->stride_a : 0, batch > 1 ? g->stride_c : 0},
                     .aux_ld = g->act != ZINF_GEMM_PLAIN ? aux_ld : 0};
    LT_TRY(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    LT_TRY(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a));
    LT_TRY(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b));
    if (epilogue != CUBLASLT_EPILOGUE_DEFAULT)
        LT_TRY(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue));
    // One bias element per row of the column-major D, i.e. per column j of our C; its
    // type is D's. The heuristic reads the pointer's alignment, the aux pointer's too.
    if (with_bias)
        LT_TRY(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g->bias, sizeof g->bias));
    if (g->act != ZINF_GEMM_PLAIN) {
        LT_TRY(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &g->aux, sizeof g->aux));
        LT_TRY(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld));
    }
    LT_TRY(cublasLtMatrixLayoutCreate(&la, ty, a_rows, a_cols, g->ldb));
    LT_TRY(cublasLtMatrixLayoutCreate(&lb, ty, b_rows, b_cols, g->lda));
    LT_TRY(cublasLtMatrixLayoutCreate(&lc, ty, (uint64_t)g->n, (uint64_t)g->m, g->ldc));
    if (batch > 1) {
        LT_TRY(set_batch(la, batch, g->stride_b));
        LT_TRY(set_batch(lb, batch, g->stride_a));
        LT_TRY(set_batch(lc, batch, g->stride_c));
    }
    LT_TRY(cublasLtMatmulPreferenceCreate(&pref));
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                                sizeof ws_bytes));
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a));
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b));
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof al_c));
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof al_d));

    st = lt_choose(cd, &problem, desc, la, lb, lc, pref, &algo, &found);
    if (st != ZINF_OK) goto done;
    if (!found) {
        *no_algo = true;
        goto done;
    }
    // C and D are the same matrix with the same layout (cuBLASLt's in-place form; with
    // beta == 0 it does not read C), or C is the residual beside D.
    LT_TRY(cublasLtMatmul(cd->lt, desc, &g->alpha, g->b, la, g->a, lb, &beta, c_in, lc, g->c, lc, &algo, cs->d_lt_ws,
                          CUDA_LT_WORKSPACE, cs->st));

done:
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (lc) cublasLtMatrixLayoutDestroy(lc);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (desc) cublasLtMatmulDescDestroy(desc);
    return st;
}

// C = beta * C + bias[j] on every row of every item; beta == 0 does not read C, and
// bias may be NULL. Serves k == 0 (no product to compute) and a bias the epilogue
// could not take (then beta is 1: C + bias).
template <typename T>
static __global__ void gemm_fixup_kernel(T *c, const T *bias, int m, int n, int ldc, int64_t stride_c, int batch,
                                         float beta) {
    size_t per_item = (size_t)m * n, total = per_item * batch;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        size_t item = i / per_item, r = (i % per_item) / n, j = i % n;
        T *p = c + item * stride_c + r * ldc + j;
        float v = beta == 0.0f ? 0.0f : beta * to_f32(*p);
        if (bias) v += to_f32(bias[j]);
        store_f32(p, v);
    }
}

template <typename T> static zinf_status gemm_fixup_t(cudaStream_t st, const zinf_gemm_args *g, float beta) {
    int batch = g->batch > 1 ? g->batch : 1;
    size_t total = (size_t)batch * g->m * g->n;
    gemm_fixup_kernel<T> CUDA_LAUNCH(ew_blocks(total), EW_THREADS, 0, st)((T *)g->c, (const T *)g->bias, g->m, g->n,
                                                                          g->ldc, g->stride_c, batch, beta);
    ZINF_CUDA_LAUNCHED("gemm_fixup_kernel");
    return ZINF_OK;
}

static zinf_status gemm_fixup(cudaStream_t st, const zinf_gemm_args *g, float beta) {
    CUDA_DT_SWITCH(g->dt, "gemm", gemm_fixup_t, st, g, beta);
}

// The fallback when cuBLASLt offers no algorithm (an alignment or shape it has no
// kernel for): one thread per element of C, the k products summed in order in fp32,
// then alpha, beta and the bias as the epilogue would.
template <typename T>
static __global__ void gemm_plain_kernel(const T *a, const T *b, T *c, const T *bias, int m, int n, int k, int lda,
                                         int ldb, int ldc, bool ta, bool tb, int64_t sa, int64_t sb, int64_t sc,
                                         int batch, float alpha, float beta) {
    size_t per_item = (size_t)m * n, total = per_item * batch;
    EW_LOOP(e, total) {
        size_t item = e / per_item, i = (e % per_item) / n, j = e % n;
        const T *ai = a + item * sa, *bi = b + item * sb;
        float sum = 0.0f;
        for (int l = 0; l < k; l++) {
            float x = to_f32(ta ? ai[(size_t)l * lda + i] : ai[i * lda + l]);
            float y = to_f32(tb ? bi[j * ldb + l] : bi[(size_t)l * ldb + j]);
            sum += x * y;
        }
        T *p = c + item * sc + i * ldc + j;
        float v = alpha * sum;
        if (beta != 0.0f) v += beta * to_f32(*p);
        if (bias) v += to_f32(bias[j]);
        store_f32(p, v);
    }
}

template <typename T> static zinf_status gemm_plain_t(cudaStream_t st, const zinf_gemm_args *g) {
    int batch = g->batch > 1 ? g->batch : 1;
    size_t total = (size_t)batch * g->m * g->n;
    gemm_plain_kernel<T> CUDA_LAUNCH(ew_blocks(total), EW_THREADS, 0, st)(
        (const T *)g->a, (const T *)g->b, (T *)g->c, (const T *)g->bias, g->m, g->n, g->k, g->lda, g->ldb, g->ldc,
        g->trans_a, g->trans_b, g->stride_a, g->stride_b, g->stride_c, batch, g->alpha, g->beta);
    ZINF_CUDA_LAUNCHED("gemm_plain_kernel");
    return ZINF_OK;
}

static zinf_status gemm_plain(cudaStream_t st, const zinf_gemm_args *g) {
    ZINF_LOG_DEBUG("cuda: cuBLASLt has no algorithm for the %s product m=%d n=%d k=%d trans_a=%d trans_b=%d lda=%d "
                   "ldb=%d ldc=%d batch=%d; using the plain kernel",
                   zinf_dtype_name(g->dt), g->m, g->n, g->k, g->trans_a, g->trans_b, g->lda, g->ldb, g->ldc, g->batch);
    CUDA_DT_SWITCH(g->dt, "gemm", gemm_plain_t, st, g);
}

// An activation cuBLASLt's epilogue could not take: the product (and bias) rounded into
// aux, then GELU's kernel from it (ZINF_GEMM_GELU); or rounded into c, then GELU's
// backward kernel in place (ZINF_GEMM_DGELU). Each value rounded twice, not once.
static zinf_status gemm_then_act(cuda_device *cd, cuda_stream *cs, const zinf_gemm_args *g) {
    zinf_gemm_args plain = *g;
    plain.act = ZINF_GEMM_PLAIN;
    op_elementwise e = {};
    e.out = g->c, e.a = g->aux, e.b = g->c, e.n = (size_t)g->m * g->n;
    if (g->act == ZINF_GEMM_GELU) plain.c = g->aux;
    ZINF_CHECK(cuda_gemm(cd, cs, &plain));
    return g->act == ZINF_GEMM_GELU ? cuda_gelu_fwd(cs->st, g->dt, &e) : cuda_gelu_bwd(cs->st, g->dt, &e);
}

zinf_status cuda_gemm(cuda_device *cd, cuda_stream *cs, const zinf_gemm_args *g) {
    if (g->m <= 0 || g->n <= 0) return ZINF_OK;
    bool no_algo = false;
    if (g->act != ZINF_GEMM_PLAIN) {
        // cuBLASLt takes the GELU input's leading dimension in multiples of 8 only.
        bool fused = g->k > 0 && g->ldc % 8 == 0;
        if (fused) ZINF_CHECK(lt_matmul(cd, cs, g, g->bias != NULL, &no_algo));
        return fused && !no_algo ? ZINF_OK : gemm_then_act(cd, cs, g);
    }
    if (g->residual) {
        // c = AB + bias + residual, rounded once: cuBLASLt with the residual as its C.
        // Else the residual copied into c and the product added to it (beta 1).
        if (g->k > 0) ZINF_CHECK(lt_matmul(cd, cs, g, g->bias && g->alpha == 1.0f, &no_algo));
        if (g->k > 0 && !no_algo) return g->bias && g->alpha != 1.0f ? gemm_fixup(cs->st, g, 1.0f) : ZINF_OK;
        ZINF_CUDA_CHECK(cudaMemcpyAsync(g->c, g->residual, (size_t)g->m * g->n * zinf_dtype_size(g->dt),
                                        cudaMemcpyDeviceToDevice, cs->st));
        zinf_gemm_args in_c = *g;
        in_c.residual = NULL, in_c.beta = 1.0f;
        return cuda_gemm(cd, cs, &in_c);
    }
    if (g->k <= 0) return gemm_fixup(cs->st, g, g->beta); // alpha op(A) op(B) is the zero matrix
    // The epilogue takes the bias only for C = op(A) op(B) + bias (a linear layer's
    // forward), where how it combines with alpha and beta cannot matter.
    if (g->bias && g->alpha == 1.0f && g->beta == 0.0f) {
        ZINF_CHECK(lt_matmul(cd, cs, g, true, &no_algo));
        if (!no_algo) return ZINF_OK;
    }
    ZINF_CHECK(lt_matmul(cd, cs, g, false, &no_algo));
    if (no_algo) return gemm_plain(cs->st, g);
    // A bias the epilogue did not take: added after, the product rounded once before.
    return g->bias ? gemm_fixup(cs->st, g, 1.0f) : ZINF_OK;
}
