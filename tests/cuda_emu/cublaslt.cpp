// CUDA emulation (tests only): cuBLASLt's matrix product, its descriptors and the
// heuristic query, following NVIDIA's cuBLASLt API reference. The product runs when the
// stream reaches it: each item's A and B widened to fp32, multiplied by OpenBLAS (which
// accumulates in fp32), alpha, beta, the bias and the epilogue's GELU applied in fp32,
// each result rounded once to D's type (and the GELU input once to the aux type).
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <new>
#include <vector>

#include "emu.h"

// Streams and workspaces come with each call, so a handle holds nothing and serves
// any number of threads at once.
struct cublasLtContext {};

namespace {

// Where an attribute's value lives in a descriptor, and its size; p is null for an
// attribute the descriptor does not have.
struct field {
    void *p;
    size_t size;
};
template <typename T> field of(T &v) { return {&v, sizeof v}; }

bool known_type(int64_t t) { return t == CUDA_R_32F || t == CUDA_R_16F || t == CUDA_R_16BF || t == CUDA_R_64F; }
size_t type_size(int32_t t) { return t == CUDA_R_64F ? 8 : t == CUDA_R_32F ? 4 : 2; }
bool known_op(int32_t op) { return op >= CUBLAS_OP_N && op <= CUBLAS_OP_C; }
bool known_compute(int32_t c) {
    return c == CUBLAS_COMPUTE_16F || c == CUBLAS_COMPUTE_16F_PEDANTIC || c == CUBLAS_COMPUTE_32F_FAST_TF32 ||
           (c >= CUBLAS_COMPUTE_32F && c <= CUBLAS_COMPUTE_32F_FAST_16BF); // 68 to 75 are all taken
}

float load(const void *p, int32_t type, size_t i) {
    switch (type) {
    case CUDA_R_16BF: return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    case CUDA_R_16F: return __half2float(((const __half *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

// The GELU epilogues' function: the tanh approximation (pytorch/pytorch#104061 matches
// its own GELU to cuBLASLt's this way), and its derivative for DGELU.
float gelu_tanh(float x) { return 0.5f * x * (1.0f + tanhf(0.7978845608f * x * (1.0f + 0.044715f * x * x))); }
float gelu_tanh_grad(float x) {
    float u = 0.7978845608f * x * (1.0f + 0.044715f * x * x), t = tanhf(u);
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * 0.7978845608f * (1.0f + 3.0f * 0.044715f * x * x);
}

bool has_bias(uint32_t e) { return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS; }
// The epilogues with an aux matrix, the GELU input: written by GELU_AUX(_BIAS), read
// by DGELU.
bool has_aux(uint32_t e) {
    return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_DGELU;
}

void store(void *p, int32_t type, size_t i, float v) {
    switch (type) {
    case CUDA_R_16BF: ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v); break;
    case CUDA_R_16F: ((__half *)p)[i] = __float2half_rn(v); break;
    default: ((float *)p)[i] = v;
    }
}

// Test hook: CUDA_EMU_LT_NO_ALGO=1 makes the heuristic (and cublasLtMatmul's implicit
// one) find no algorithm, as for a shape or alignment no kernel takes, so that zinf's
// fallback (gemm_plain_kernel in gpu/cuda/gemm.cu) runs. Read at each call, so a test
// can switch it between products.
bool no_algo_hook() {
    const char *v = getenv("CUDA_EMU_LT_NO_ALGO");
    return v && strcmp(v, "1") == 0;
}

struct status_text {
    cublasStatus_t status;
    const char *name, *text;
};

const status_text *describe(cublasStatus_t s) {
    static const status_text all[] = {
        {CUBLAS_STATUS_SUCCESS, "CUBLAS_STATUS_SUCCESS", "success"},
        {CUBLAS_STATUS_NOT_INITIALIZED, "CUBLAS_STATUS_NOT_INITIALIZED", "the cuBLASLt handle is not initialized"},
        {CUBLAS_STATUS_ALLOC_FAILED, "CUBLAS_STATUS_ALLOC_FAILED", "resource allocation failed"},
        {CUBLAS_STATUS_INVALID_VALUE, "CUBLAS_STATUS_INVALID_VALUE", "an invalid value or conflicting arguments"},
        {CUBLAS_STATUS_ARCH_MISMATCH, "CUBLAS_STATUS_ARCH_MISMATCH", "the device does not support the operation"},
        {CUBLAS_STATUS_MAPPING_ERROR, "CUBLAS_STATUS_MAPPING_ERROR", "access to GPU memory failed"},
        {CUBLAS_STATUS_EXECUTION_FAILED, "CUBLAS_STATUS_EXECUTION_FAILED", "the GPU program failed to execute"},
        {CUBLAS_STATUS_INTERNAL_ERROR, "CUBLAS_STATUS_INTERNAL_ERROR", "an internal operation failed"},
        {CUBLAS_STATUS_NOT_SUPPORTED, "CUBLAS_STATUS_NOT_SUPPORTED", "the operation or configuration is not supported"},
    };
    for (const status_text &t : all)
        if (t.status == s) return &t;
    return nullptr;
}

// Marks an algorithm as the heuristic's; data[1] is the workspace it needs (none),
// data[2..5] the alignments of A, B, C and D it was chosen for.
const uint64_t ALGO_ID = 0x7a696e66'4c74454dull;

} // namespace

struct cublasLtMatmulDescOpaque {
    int32_t compute, scale;
    int32_t pointer_mode = CUBLASLT_POINTER_MODE_HOST;
    int32_t trans_a = CUBLAS_OP_N, trans_b = CUBLAS_OP_N, trans_c = CUBLAS_OP_N;
    uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    const void *bias = nullptr;
    int64_t bias_stride = 0;
    int32_t bias_type = -1;
    const void *aux = nullptr;
    int64_t aux_ld = 0;
    int32_t aux_type = -1;

    field at(int attr) {
        switch (attr) {
        case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: return of(compute);
        case CUBLASLT_MATMUL_DESC_SCALE_TYPE: return of(scale);
        case CUBLASLT_MATMUL_DESC_POINTER_MODE: return of(pointer_mode);
        case CUBLASLT_MATMUL_DESC_TRANSA: return of(trans_a);
        case CUBLASLT_MATMUL_DESC_TRANSB: return of(trans_b);
        case CUBLASLT_MATMUL_DESC_TRANSC: return of(trans_c);
        case CUBLASLT_MATMUL_DESC_EPILOGUE: return of(epilogue);
        case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return of(bias);
        case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE: return of(bias_stride);
        case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return of(bias_type);
        case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: return of(aux);
        case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: return of(aux_ld);
        case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE: return of(aux_type);
        default: return {nullptr, 0};
        }
    }
    // Values that mean something; whether the product supports them is the
    // heuristic's and cublasLtMatmul's question (NOT_SUPPORTED), as is the epilogue.
    bool valid() const {
        return known_compute(compute) && known_type(scale) && pointer_mode >= CUBLASLT_POINTER_MODE_HOST &&
               pointer_mode <= CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_HOST && known_op(trans_a) &&
               known_op(trans_b) && known_op(trans_c) && bias_stride >= 0 &&
               (bias_type == -1 || known_type(bias_type)) && aux_ld >= 0 && (aux_type == -1 || known_type(aux_type));
    }
};

struct cublasLtMatrixLayoutOpaque {
    uint32_t type;
    int32_t order = CUBLASLT_ORDER_COL;
    uint64_t rows, cols;
    int64_t ld;
    int32_t batch = 1;
    int64_t stride = 0;

    field at(int attr) {
        switch (attr) {
        case CUBLASLT_MATRIX_LAYOUT_TYPE: return of(type);
        case CUBLASLT_MATRIX_LAYOUT_ORDER: return of(order);
        case CUBLASLT_MATRIX_LAYOUT_ROWS: return of(rows);
        case CUBLASLT_MATRIX_LAYOUT_COLS: return of(cols);
        case CUBLASLT_MATRIX_LAYOUT_LD: return of(ld);
        case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: return of(batch);
        case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: return of(stride);
        default: return {nullptr, 0};
        }
    }
    // ld against rows or cols is checked when the layout is used: the attributes may
    // be set in any order.
    bool valid() const {
        return known_type(type) && (order == CUBLASLT_ORDER_COL || order == CUBLASLT_ORDER_ROW) && ld >= 0 &&
               batch >= 1 && stride >= 0;
    }
    // Elements along ld (a column in column order, a row in row order), and how many
    // such runs.
    uint64_t inner() const { return order == CUBLASLT_ORDER_COL ? rows : cols; }
    uint64_t outer() const { return order == CUBLASLT_ORDER_COL ? cols : rows; }
    size_t elem(size_t item, uint64_t r, uint64_t c) const {
        return item * stride + (order == CUBLASLT_ORDER_COL ? r + c * ld : r * ld + c);
    }
    // Bytes from the first element of the first item to past the last of the last.
    size_t bytes() const {
        if (!rows || !cols) return 0;
        return ((size_t)(batch - 1) * stride + (size_t)ld * (outer() - 1) + inner()) * type_size(type);
    }
    bool operator==(const cublasLtMatrixLayoutOpaque &o) const {
        return type == o.type && order == o.order && rows == o.rows && cols == o.cols && ld == o.ld &&
               batch == o.batch && stride == o.stride;
    }
};

struct cublasLtMatmulPreferenceOpaque {
    uint32_t search = CUBLASLT_SEARCH_BEST_FIT;
    uint64_t max_workspace = 0;
    uint32_t align[4] = {256, 256, 256, 256}; // A, B, C, D

    field at(int attr) {
        switch (attr) {
        case CUBLASLT_MATMUL_PREF_SEARCH_MODE: return of(search);
        case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: return of(max_workspace);
        case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: return of(align[0]);
        case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: return of(align[1]);
        case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: return of(align[2]);
        case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: return of(align[3]);
        default: return {nullptr, 0};
        }
    }
    bool valid() const { return search == CUBLASLT_SEARCH_BEST_FIT; }
};

namespace {

// Whether matrix l at p (its batch stride too) is aligned to `bytes`.
bool aligned_to(const void *p, const cublasLtMatrixLayoutOpaque &l, uint64_t bytes) {
    uint64_t bits = (uint64_t)(uintptr_t)p;
    if (l.batch > 1) bits |= (uint64_t)l.stride * type_size(l.type);
    return bits % bytes == 0;
}

template <typename D> cublasStatus_t create(D **out, const D &init) {
    if (!out || !init.valid()) return CUBLAS_STATUS_INVALID_VALUE;
    *out = new (std::nothrow) D(init);
    return *out ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

// Set on a copy, so that a value rejected leaves the descriptor as it was.
template <typename D> cublasStatus_t set_attr(D *d, int attr, const void *buf, size_t size) {
    if (!d || !buf) return CUBLAS_STATUS_INVALID_VALUE;
    D t = *d;
    field f = t.at(attr);
    if (!f.p || f.size != size) return CUBLAS_STATUS_INVALID_VALUE;
    memcpy(f.p, buf, size);
    if (!t.valid()) return CUBLAS_STATUS_INVALID_VALUE;
    *d = t;
    return CUBLAS_STATUS_SUCCESS;
}

// sizeInBytes 0 asks for the size only.
template <typename D> cublasStatus_t get_attr(D *d, int attr, void *buf, size_t size, size_t *written) {
    if (!d) return CUBLAS_STATUS_INVALID_VALUE;
    field f = d->at(attr);
    if (!f.p || (size == 0 && !written) || (size != 0 && (!buf || size != f.size))) return CUBLAS_STATUS_INVALID_VALUE;
    if (size) memcpy(buf, f.p, size);
    if (written) *written = f.size;
    return CUBLAS_STATUS_SUCCESS;
}

// One product, its descriptors copied: the caller may destroy them once the call
// returns, before the product runs.
struct problem {
    cublasLtMatmulDescOpaque op;
    cublasLtMatrixLayoutOpaque a, b, c, d;
    uint64_t m, n, k;
    int32_t bias_type, aux_type;
};

// Checks what the descriptors say, as the heuristic and cublasLtMatmul both do.
cublasStatus_t plan(problem *p, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                    cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d) {
    if (!op || !a || !b || !c || !d) return CUBLAS_STATUS_INVALID_VALUE;
    p->op = *op;
    p->a = *a;
    p->b = *b;
    p->c = *c;
    p->d = *d;
    // The rows of the reference's table of supported types this emulation computes:
    // fp32 compute and scale (the pedantic variant is the same here), A and B of one
    // type, C and D of one type, D of A's type or fp32. The fast TF32/16-bit compute
    // types are left out: the emulation does not reproduce their rounding.
    uint32_t in = p->a.type, out = p->d.type;
    if ((op->compute != CUBLAS_COMPUTE_32F && op->compute != CUBLAS_COMPUTE_32F_PEDANTIC) || op->scale != CUDA_R_32F ||
        p->b.type != in || p->c.type != out || (in != CUDA_R_32F && in != CUDA_R_16F && in != CUDA_R_16BF) ||
        (out != in && out != CUDA_R_32F))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (op->pointer_mode != CUBLASLT_POINTER_MODE_HOST || op->trans_c != CUBLAS_OP_N ||
        (op->epilogue != CUBLASLT_EPILOGUE_DEFAULT && !has_bias(op->epilogue) && !has_aux(op->epilogue)))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    // The bias and the GELU input have D's type for these types (the reference's
    // exceptions are for 8-bit types).
    p->bias_type = op->bias_type == -1 ? (int32_t)out : op->bias_type;
    p->aux_type = op->aux_type == -1 ? (int32_t)out : op->aux_type;
    if ((has_bias(op->epilogue) && p->bias_type != (int32_t)out) ||
        (has_aux(op->epilogue) && p->aux_type != (int32_t)out))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    // One product per call with an aux matrix: the emulation leaves out its batch stride.
    if (has_aux(op->epilogue) && d->batch > 1) return CUBLAS_STATUS_NOT_SUPPORTED;
    bool ta = op->trans_a != CUBLAS_OP_N, tb = op->trans_b != CUBLAS_OP_N;
    p->m = ta ? a->cols : a->rows;
    p->k = ta ? a->rows : a->cols;
    p->n = tb ? b->rows : b->cols;
    if ((tb ? b->cols : b->rows) != p->k || c->rows != p->m || c->cols != p->n || d->rows != p->m || d->cols != p->n)
        return CUBLAS_STATUS_INVALID_VALUE;
    for (const cublasLtMatrixLayoutOpaque *l : {a, b, c, d}) {
        if ((uint64_t)l->ld < l->inner() || l->batch != d->batch) return CUBLAS_STATUS_INVALID_VALUE;
        if (l->rows > INT_MAX || l->cols > INT_MAX || l->ld > INT_MAX) return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    // The GELU input's leading dimension: divisible by 8 and no less than D's rows (the
    // attribute's reference); the aux matrix is column-ordered as D.
    if (has_aux(op->epilogue) && (op->aux_ld % 8 || (uint64_t)op->aux_ld < p->m || d->order != CUBLASLT_ORDER_COL))
        return CUBLAS_STATUS_INVALID_VALUE;
    return CUBLAS_STATUS_SUCCESS;
}

// A GPU reaches memory of its own device and registered host memory; anything else
// faults the device, as an illegal address does, and the product does nothing more.
bool reachable(int dev, const char *what, const void *p, size_t bytes) {
    if (!bytes) return true;
    cuda_emu::region r = cuda_emu::classify(p, bytes);
    if (r.kind == cuda_emu::mem::registered || (r.kind == cuda_emu::mem::device && r.device == dev)) return true;
    cuda_emu::fault(dev, cudaErrorIllegalAddress,
                    "cublasLtMatmul: %s (%p, %zu bytes) is not memory that device %d can reach", what, p, bytes, dev);
    return false;
}

// An item of a stored matrix as fp32, packed in the same order; returns the leading
// dimension OpenBLAS gets.
int widen(const void *p, const cublasLtMatrixLayoutOpaque &l, size_t item, float *out) {
    for (uint64_t o = 0; o < l.outer(); o++)
        for (uint64_t i = 0; i < l.inner(); i++)
            out[o * l.inner() + i] = load(p, l.type, item * l.stride + o * l.ld + i);
    return (int)l.inner();
}

// A row-order matrix is, in memory, its transpose in column order: OpenBLAS (column
// order) gets it with the operation flipped.
CBLAS_TRANSPOSE cblas_op(int32_t op, const cublasLtMatrixLayoutOpaque &l) {
    return (op != CUBLAS_OP_N) != (l.order == CUBLASLT_ORDER_ROW) ? CblasTrans : CblasNoTrans;
}

void run(const problem &p, float alpha, float beta, const void *A, const void *B, const void *C, void *D, int dev) {
    uint32_t e = p.op.epilogue;
    bool with_bias = has_bias(e), with_aux = has_aux(e);
    size_t batch = p.d.batch;
    size_t bias_bytes = p.m ? ((batch - 1) * p.op.bias_stride + p.m) * type_size(p.bias_type) : 0;
    size_t aux_bytes = p.m && p.n ? ((size_t)p.op.aux_ld * (p.n - 1) + p.m) * type_size(p.aux_type) : 0;
    if (!reachable(dev, "A", A, p.a.bytes()) || !reachable(dev, "B", B, p.b.bytes()) ||
        (beta != 0.0f && !reachable(dev, "C", C, p.c.bytes())) || !reachable(dev, "D", D, p.d.bytes()) ||
        (with_bias && !reachable(dev, "the bias", p.op.bias, bias_bytes)) ||
        (with_aux && !reachable(dev, "the epilogue's aux matrix", p.op.aux, aux_bytes)))
        return;
    if (!p.m || !p.n) return;
    std::vector<float> a(p.m * p.k), b(p.k * p.n), t(p.m * p.n); // t stays 0 when k == 0
    for (size_t item = 0; item < batch; item++) {
        if (p.k) {
            int lda = widen(A, p.a, item, a.data()), ldb = widen(B, p.b, item, b.data());
            cblas_sgemm(CblasColMajor, cblas_op(p.op.trans_a, p.a), cblas_op(p.op.trans_b, p.b), (int)p.m, (int)p.n,
                        (int)p.k, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, t.data(), (int)p.m);
        }
        for (uint64_t j = 0; j < p.n; j++)
            for (uint64_t i = 0; i < p.m; i++) {
                float v = alpha * t[j * p.m + i];
                // beta == 0 does not read C, which may hold anything (NaNs included).
                if (beta != 0.0f) v += beta * load(C, p.c.type, p.c.elem(item, i, j));
                if (with_bias) v += load(p.op.bias, p.bias_type, item * p.op.bias_stride + i);
                size_t x = i + j * (size_t)p.op.aux_ld; // in the aux matrix
                if (e == CUBLASLT_EPILOGUE_DGELU) v *= gelu_tanh_grad(load(p.op.aux, p.aux_type, x));
                if (with_aux && e != CUBLASLT_EPILOGUE_DGELU) {
                    store((void *)p.op.aux, p.aux_type, x, v);
                    v = gelu_tanh(v);
                }
                store(D, p.d.type, p.d.elem(item, i, j), v);
            }
    }
}

} // namespace

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t *lightHandle) {
    if (!lightHandle) return CUBLAS_STATUS_INVALID_VALUE;
    // A product runs on its stream's thread, as a GPU runs it on its own cores: OpenBLAS
    // threads of its own would only spin against the other streams for the host's cores.
    openblas_set_num_threads(1);
    *lightHandle = new (std::nothrow) cublasLtContext;
    return *lightHandle ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle) {
    if (!lightHandle) return CUBLAS_STATUS_NOT_INITIALIZED;
    delete lightHandle;
    return CUBLAS_STATUS_SUCCESS;
}

const char *cublasLtGetStatusName(cublasStatus_t status) {
    const status_text *t = describe(status);
    return t ? t->name : "CUBLAS_STATUS_UNKNOWN";
}

const char *cublasLtGetStatusString(cublasStatus_t status) {
    const status_text *t = describe(status);
    return t ? t->text : "unknown cuBLAS status";
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *matmulDesc, cublasComputeType_t computeType,
                                        cudaDataType_t scaleType) {
    cublasLtMatmulDescOpaque init;
    init.compute = computeType;
    init.scale = scaleType;
    return create(matmulDesc, init);
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc) {
    delete matmulDesc;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr,
                                              const void *buf, size_t sizeInBytes) {
    return set_attr(matmulDesc, attr, buf, sizeInBytes);
}

cublasStatus_t cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr,
                                              void *buf, size_t sizeInBytes, size_t *sizeWritten) {
    return get_attr(matmulDesc, attr, buf, sizeInBytes, sizeWritten);
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *matLayout, cudaDataType_t type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
    cublasLtMatrixLayoutOpaque init;
    init.type = type;
    init.rows = rows;
    init.cols = cols;
    init.ld = ld;
    return create(matLayout, init);
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout) {
    delete matLayout;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t matLayout, cublasLtMatrixLayoutAttribute_t attr,
                                                const void *buf, size_t sizeInBytes) {
    return set_attr(matLayout, attr, buf, sizeInBytes);
}

cublasStatus_t cublasLtMatrixLayoutGetAttribute(cublasLtMatrixLayout_t matLayout, cublasLtMatrixLayoutAttribute_t attr,
                                                void *buf, size_t sizeInBytes, size_t *sizeWritten) {
    return get_attr(matLayout, attr, buf, sizeInBytes, sizeWritten);
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref) {
    return create(pref, cublasLtMatmulPreferenceOpaque());
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
    delete pref;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void *buf,
                                                    size_t sizeInBytes) {
    return set_attr(pref, attr, buf, sizeInBytes);
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc,
                                              cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                              cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                              cublasLtMatmulPreference_t preference, int requestedAlgoCount,
                                              cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
                                              int *returnAlgoCount) {
    if (!lightHandle) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!preference || requestedAlgoCount <= 0 || !heuristicResultsArray || !returnAlgoCount)
        return CUBLAS_STATUS_INVALID_VALUE;
    *returnAlgoCount = 0;
    problem p;
    cublasStatus_t st = plan(&p, operationDesc, Adesc, Bdesc, Cdesc, Ddesc);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    if (no_algo_hook()) return CUBLAS_STATUS_NOT_SUPPORTED;
    // The preferences say how aligned the pointers are (the bias pointer's own value
    // says it for the bias); no kernel takes a matrix less aligned than its element.
    const cublasLtMatrixLayoutOpaque *m[4] = {&p.a, &p.b, &p.c, &p.d};
    for (int i = 0; i < 4; i++)
        if (preference->align[i] < type_size(m[i]->type)) return CUBLAS_STATUS_NOT_SUPPORTED;
    if ((has_bias(p.op.epilogue) && (uintptr_t)p.op.bias % type_size(p.bias_type)) ||
        (has_aux(p.op.epilogue) && (uintptr_t)p.op.aux % type_size(p.aux_type)))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    // No workspace needed (data[1] and workspaceSize stay 0), so any
    // MAX_WORKSPACE_BYTES fits.
    cublasLtMatmulHeuristicResult_t *r = heuristicResultsArray;
    memset(r, 0, sizeof *r);
    r->algo.data[0] = ALGO_ID;
    for (int i = 0; i < 4; i++)
        r->algo.data[2 + i] = preference->align[i];
    r->state = CUBLAS_STATUS_SUCCESS;
    r->wavesCount = 1.0f;
    *returnAlgoCount = 1;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc, const void *alpha,
                              const void *A, cublasLtMatrixLayout_t Adesc, const void *B, cublasLtMatrixLayout_t Bdesc,
                              const void *beta, const void *C, cublasLtMatrixLayout_t Cdesc, void *D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t *algo, void *workspace,
                              size_t workspaceSizeInBytes, cudaStream_t stream) {
    (void)workspace; // the emulated algorithm needs none
    if (!lightHandle) return CUBLAS_STATUS_NOT_INITIALIZED;
    problem p;
    cublasStatus_t st = plan(&p, computeDesc, Adesc, Bdesc, Cdesc, Ddesc);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    if (!alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
    // Host pointer mode: alpha and beta are read now, not when the product runs.
    float al = *(const float *)alpha, be = *(const float *)beta;
    if (!A || !B || !D || (be != 0.0f && !C) || (has_bias(p.op.epilogue) && !p.op.bias) ||
        (has_aux(p.op.epilogue) && !p.op.aux))
        return CUBLAS_STATUS_INVALID_VALUE;
    // In place (C == D) only with one layout for both.
    if (C == D && !(p.c == p.d)) return CUBLAS_STATUS_INVALID_VALUE;
    // An algorithm must be the heuristic's, with the workspace it needs; none means an
    // implicit heuristic query.
    if (algo && (algo->data[0] != ALGO_ID || workspaceSizeInBytes < algo->data[1])) return CUBLAS_STATUS_INVALID_VALUE;
    // An algorithm chosen for more alignment than these pointers have: on the card its
    // vector loads fault; refused here, so that an algorithm reused for other pointers
    // (a cache keyed without their alignment) fails a test.
    const void *ptr[4] = {A, B, be != 0.0f ? C : D, D};
    const cublasLtMatrixLayoutOpaque *lay[4] = {&p.a, &p.b, &p.c, &p.d};
    for (int i = 0; algo && i < 4; i++)
        if (!aligned_to(ptr[i], *lay[i], algo->data[2 + i])) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (!algo && no_algo_hook()) return CUBLAS_STATUS_NOT_SUPPORTED;
    int dev = cuda_emu::stream_device(stream);
    cudaError_t err = cuda_emu::enqueue(stream, [p, al, be, A, B, C, D, dev] { run(p, al, be, A, B, C, D, dev); });
    return err == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

} // extern "C"
