// Self-test of the emulation's cuBLASLt (cublaslt.cpp), against a double-precision
// reference and the statuses of NVIDIA's cuBLASLt API reference: every pair of
// operations on fp32, bf16, fp16 and 16-bit-in/fp32-out data with padded leading
// dimensions and strided batches, alpha and beta (beta 0 not reading a C full of NaNs),
// the bias epilogue, in-place products, row order, the heuristic and its test hook,
// argument errors, several threads on one handle, and the fault of a product on memory
// the device cannot reach. Exits 0 when everything passed.
// timeout: 10 cuda-emu=10 san-cuda-emu=10
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>
#include <thread>
#include <vector>

static std::atomic<int> failures{0};

#define CHECK(cond, ...)                                                                                               \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            failures++;                                                                                                \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                                       \
            fprintf(stderr, __VA_ARGS__);                                                                              \
            fputc('\n', stderr);                                                                                       \
        }                                                                                                              \
    } while (0)

#define EXPECT(call, want)                                                                                             \
    do {                                                                                                               \
        cublasStatus_t got_ = (call);                                                                                  \
        CHECK(got_ == (want), "%s gave %s, expected %s", #call, cublasLtGetStatusName(got_),                           \
              cublasLtGetStatusName(want));                                                                            \
    } while (0)

static size_t esize(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : 2; }

// Host copies of matrices are bytes of their type.
static float get(cudaDataType_t t, const std::vector<unsigned char> &v, size_t i) {
    switch (t) {
    case CUDA_R_16BF: return __bfloat162float(((const __nv_bfloat16 *)v.data())[i]);
    case CUDA_R_16F: return __half2float(((const __half *)v.data())[i]);
    default: return ((const float *)v.data())[i];
    }
}

static void put(cudaDataType_t t, std::vector<unsigned char> &v, size_t i, float x) {
    switch (t) {
    case CUDA_R_16BF: ((__nv_bfloat16 *)v.data())[i] = __float2bfloat16_rn(x); break;
    case CUDA_R_16F: ((__half *)v.data())[i] = __float2half_rn(x); break;
    default: ((float *)v.data())[i] = x;
    }
}

static unsigned short bits16(cudaDataType_t t, float x) {
    return t == CUDA_R_16BF ? __float2bfloat16_rn(x).__x : __float2half_rn(x).__x;
}

// 16-bit patterns in the order of their values, so that neighbours differ by one.
static int ordered16(unsigned short x) { return x & 0x8000 ? -(int)(x & 0x7fff) : (int)x; }

struct rng {
    uint64_t s;
    float uniform() { // in [-1, 1)
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        return (float)((s >> 40) * 0x1p-23) - 1.0f;
    }
};

// One stored matrix: its layout and a host image of every item with the padding.
struct mat {
    cudaDataType_t type;
    int order, rows, cols;
    int64_t ld, stride;
    int batch;
    std::vector<unsigned char> host;
    void *dev = nullptr;

    mat(cudaDataType_t t, int ord, int r, int c, int pad, int b) : type(t), order(ord), rows(r), cols(c), batch(b) {
        ld = (ord == CUBLASLT_ORDER_COL ? r : c) + pad;
        stride = ld * (ord == CUBLASLT_ORDER_COL ? c : r) + 3;
        host.resize(stride * batch * esize(t));
    }
    size_t elems() const { return stride * batch; }
    size_t at(int item, int r, int c) const {
        return item * stride + (order == CUBLASLT_ORDER_COL ? r + c * ld : r * ld + c);
    }
    // Fills the matrix (rounded to its type) and the padding with `pad`.
    void fill(rng &g, float pad) {
        for (size_t i = 0; i < elems(); i++)
            put(type, host, i, pad);
        for (int b = 0; b < batch; b++)
            for (int r = 0; r < rows; r++)
                for (int c = 0; c < cols; c++)
                    put(type, host, at(b, r, c), g.uniform());
    }
    void upload() {
        if (!dev) CHECK(cudaMalloc(&dev, host.size()) == cudaSuccess, "cudaMalloc");
        CHECK(cudaMemcpy(dev, host.data(), host.size(), cudaMemcpyHostToDevice) == cudaSuccess, "upload");
    }
    std::vector<unsigned char> download() const {
        std::vector<unsigned char> v(host.size());
        CHECK(cudaMemcpy(v.data(), dev, v.size(), cudaMemcpyDeviceToHost) == cudaSuccess, "download");
        return v;
    }
    // The alignment its pointer and batch stride have, as the preference is told it
    // (up to 256 bytes, the preference's default).
    uint32_t alignment() const {
        uint64_t bits = (uint64_t)(uintptr_t)dev | (batch > 1 ? (uint64_t)stride * esize(type) : 0);
        uint32_t al = 256;
        while (al > 1 && bits % al)
            al >>= 1;
        return al;
    }
    // A layout describing it; batch attributes set even for one item.
    cublasLtMatrixLayout_t layout() const {
        cublasLtMatrixLayout_t l = nullptr;
        int32_t b = batch;
        EXPECT(cublasLtMatrixLayoutCreate(&l, type, rows, cols, ld), CUBLAS_STATUS_SUCCESS);
        EXPECT(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_ORDER, &order, sizeof order),
               CUBLAS_STATUS_SUCCESS);
        EXPECT(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &b, sizeof b),
               CUBLAS_STATUS_SUCCESS);
        EXPECT(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride),
               CUBLAS_STATUS_SUCCESS);
        return l;
    }
    ~mat() {
        if (dev) cudaFree(dev);
    }
};

struct gemm_case {
    const char *name;
    cudaDataType_t in, out;
    int32_t ta, tb;
    int m, n, k, batch;
    float alpha, beta;
    bool bias, in_place;
    int order;
    int64_t bias_stride;
};

static float ref_op(const mat &x, bool t, int item, int r, int c) {
    return get(x.type, x.host, t ? x.at(item, c, r) : x.at(item, r, c));
}

// Runs one product as gemm.cu does (heuristic, then cublasLtMatmul with its algorithm,
// descriptors destroyed before the product has run) and checks every element of D and
// that D's padding is untouched.
static void run_case(cublasLtHandle_t h, cudaStream_t st, const gemm_case &gc, uint64_t seed) {
    rng g{seed};
    bool ta = gc.ta != CUBLAS_OP_N, tb = gc.tb != CUBLAS_OP_N;
    const int pad = 2;
    mat a(gc.in, gc.order, ta ? gc.k : gc.m, ta ? gc.m : gc.k, pad, gc.batch);
    mat b(gc.in, gc.order, tb ? gc.n : gc.k, tb ? gc.k : gc.n, pad, gc.batch);
    mat c(gc.out, gc.order, gc.m, gc.n, pad, gc.batch), d(gc.out, gc.order, gc.m, gc.n, pad, gc.batch);
    // NaN where nothing may be read: A's and B's padding, C's padding, all of C when
    // beta is 0. D's padding holds a sentinel that must survive.
    a.fill(g, NAN);
    b.fill(g, NAN);
    c.fill(g, gc.in_place ? 7.0f : NAN);
    if (gc.beta == 0.0f && !gc.in_place)
        for (size_t i = 0; i < c.elems(); i++)
            put(c.type, c.host, i, NAN);
    d.fill(g, 7.0f);
    if (gc.in_place) d.host = c.host;
    std::vector<unsigned char> bias((gc.bias_stride * (gc.batch - 1) + gc.m) * esize(gc.out));
    for (size_t i = 0; i < bias.size() / esize(gc.out); i++)
        put(gc.out, bias, i, g.uniform());
    void *dbias = nullptr;
    CHECK(cudaMalloc(&dbias, bias.size()) == cudaSuccess, "cudaMalloc");
    CHECK(cudaMemcpy(dbias, bias.data(), bias.size(), cudaMemcpyHostToDevice) == cudaSuccess, "upload");
    a.upload();
    b.upload();
    d.upload();
    if (!gc.in_place) c.upload();
    const mat &cm = gc.in_place ? d : c;

    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatmulPreference_t pref = nullptr;
    EXPECT(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
    EXPECT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &gc.ta, sizeof gc.ta),
           CUBLAS_STATUS_SUCCESS);
    EXPECT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &gc.tb, sizeof gc.tb),
           CUBLAS_STATUS_SUCCESS);
    if (gc.bias) {
        uint32_t epi = CUBLASLT_EPILOGUE_BIAS;
        EXPECT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi),
               CUBLAS_STATUS_SUCCESS);
        EXPECT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &dbias, sizeof dbias),
               CUBLAS_STATUS_SUCCESS);
        EXPECT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, &gc.bias_stride,
                                              sizeof gc.bias_stride),
               CUBLAS_STATUS_SUCCESS);
    }
    cublasLtMatrixLayout_t la = a.layout(), lb = b.layout(), lc = cm.layout(), ld = d.layout();
    EXPECT(cublasLtMatmulPreferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
    const cublasLtMatmulPreferenceAttributes_t align_attr[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    const mat *align_of[4] = {&a, &b, &cm, &d};
    for (int i = 0; i < 4; i++) {
        uint32_t al = align_of[i]->alignment();
        EXPECT(cublasLtMatmulPreferenceSetAttribute(pref, align_attr[i], &al, sizeof al), CUBLAS_STATUS_SUCCESS);
    }
    cublasLtMatmulHeuristicResult_t res;
    int found = -1;
    EXPECT(cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, lc, ld, pref, 1, &res, &found), CUBLAS_STATUS_SUCCESS);
    CHECK(found == 1 && res.state == CUBLAS_STATUS_SUCCESS && res.workspaceSize == 0, "%s: heuristic", gc.name);
    EXPECT(cublasLtMatmul(h, desc, &gc.alpha, a.dev, la, b.dev, lb, &gc.beta, cm.dev, lc, d.dev, ld, &res.algo, nullptr,
                          0, st),
           CUBLAS_STATUS_SUCCESS);
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatrixLayoutDestroy(ld);
    cublasLtMatmulDescDestroy(desc);
    CHECK(cudaStreamSynchronize(st) == cudaSuccess, "%s: cudaStreamSynchronize", gc.name);
    std::vector<unsigned char> got = d.download();
    cudaFree(dbias);

    int bad = 0;
    std::vector<bool> inside(d.elems());
    for (int item = 0; item < gc.batch; item++)
        for (int i = 0; i < gc.m; i++)
            for (int j = 0; j < gc.n; j++) {
                double s = 0, mag = 0;
                for (int l = 0; l < gc.k; l++) {
                    double p = (double)ref_op(a, ta, item, i, l) * ref_op(b, tb, item, l, j);
                    s += p;
                    mag += fabs(p);
                }
                double ref = gc.alpha * s,
                       cv = gc.beta != 0.0f ? gc.beta * (double)get(cm.type, cm.host, cm.at(item, i, j)) : 0;
                double bv = gc.bias ? get(gc.out, bias, item * gc.bias_stride + i) : 0;
                ref += cv + bv;
                mag = fabs(gc.alpha) * mag + fabs(cv) + fabs(bv);
                // fp32 accumulation of k products, then alpha, beta and the bias.
                double tol = (gc.k + 4) * 0x1p-24 * mag;
                size_t at = d.at(item, i, j);
                inside[at] = true;
                float x = get(gc.out, got, at);
                bool ok;
                if (gc.out == CUDA_R_32F) {
                    ok = fabs(x - ref) <= tol;
                } else {
                    // Rounded once from a value within tol of the reference; one
                    // pattern of slack for the reference's own rounding via float.
                    int gx = ordered16(((const unsigned short *)got.data())[at]);
                    ok = gx >= ordered16(bits16(gc.out, (float)(ref - tol))) - 1 &&
                         gx <= ordered16(bits16(gc.out, (float)(ref + tol))) + 1;
                }
                if (!ok && bad++ < 3)
                    CHECK(false, "%s: item %d D(%d,%d) = %.9g, reference %.9g (tolerance %.3g)", gc.name, item, i, j, x,
                          ref, tol);
            }
    for (size_t i = 0; i < d.elems(); i++)
        if (!inside[i] && memcmp(&got[i * esize(gc.out)], &d.host[i * esize(gc.out)], esize(gc.out)) != 0 && bad++ < 3)
            CHECK(false, "%s: padding element %zu of D was written", gc.name, i);
    if (bad > 3) CHECK(false, "%s: %d bad elements in all", gc.name, bad);
}

static void products(cublasLtHandle_t h, cudaStream_t st) {
    const cudaDataType_t types[5][2] = {{CUDA_R_32F, CUDA_R_32F},
                                        {CUDA_R_16BF, CUDA_R_16BF},
                                        {CUDA_R_16F, CUDA_R_16F},
                                        {CUDA_R_16F, CUDA_R_32F},
                                        {CUDA_R_16BF, CUDA_R_32F}};
    const char *names[5] = {"fp32", "bf16", "fp16", "fp16->fp32", "bf16->fp32"};
    const gemm_case base = {"",   CUDA_R_32F, CUDA_R_32F, CUBLAS_OP_N, CUBLAS_OP_N,        5, 7, 9, 3,
                            1.5f, 0.5f,       false,      false,       CUBLASLT_ORDER_COL, 0};
    char name[128];
    uint64_t seed = 1;
    for (int t = 0; t < 5; t++)
        for (int op = 0; op < 4; op++) {
            gemm_case gc = base;
            gc.name = name;
            gc.in = types[t][0];
            gc.out = types[t][1];
            gc.ta = op >> 1;
            gc.tb = op & 1;
            // Each pair of operations with another epilogue and beta: bias, beta 0 with
            // C all NaN, in place, beta 0 with bias.
            if (op == 0) gc.bias = true;
            if (op == 1) gc.beta = 0.0f;
            if (op == 2) gc.in_place = true;
            if (op == 3) gc.alpha = 1.0f, gc.beta = 0.0f, gc.bias = true;
            snprintf(name, sizeof name, "%s op %c%c bias %d beta %g in place %d", names[t], "NT"[gc.ta], "NT"[gc.tb],
                     gc.bias, gc.beta, gc.in_place);
            run_case(h, st, gc, seed++);
        }
    run_case(h, st,
             {"fp32 OP_C", CUDA_R_32F, CUDA_R_32F, CUBLAS_OP_C, CUBLAS_OP_N, 4, 6, 5, 2, 1.0f, 0.0f, false, false,
              CUBLASLT_ORDER_COL, 0},
             seed++);
    run_case(h, st,
             {"bf16 row order", CUDA_R_16BF, CUDA_R_16BF, CUBLAS_OP_T, CUBLAS_OP_N, 6, 5, 7, 3, 0.75f, 0.5f, true,
              false, CUBLASLT_ORDER_ROW, 0},
             seed++);
    run_case(h, st,
             {"fp32 per-item bias", CUDA_R_32F, CUDA_R_32F, CUBLAS_OP_N, CUBLAS_OP_T, 5, 4, 3, 3, 1.0f, 0.0f, true,
              false, CUBLASLT_ORDER_COL, 6},
             seed++);
    run_case(h, st,
             {"fp32 64x48x200", CUDA_R_32F, CUDA_R_32F, CUBLAS_OP_N, CUBLAS_OP_T, 64, 48, 200, 1, 1.0f, 0.0f, false,
              false, CUBLASLT_ORDER_COL, 0},
             seed++);
    run_case(h, st,
             {"bf16 40x24x300", CUDA_R_16BF, CUDA_R_16BF, CUBLAS_OP_T, CUBLAS_OP_N, 40, 24, 300, 2, 1.0f, 1.0f, false,
              true, CUBLASLT_ORDER_COL, 0},
             seed++);
}

// Several threads, each with its own stream, sharing one handle.
static void threads(cublasLtHandle_t h) {
    cudaStream_t sts[4];
    std::vector<std::thread> ts;
    for (int t = 0; t < 4; t++) {
        CHECK(cudaStreamCreate(&sts[t]) == cudaSuccess, "cudaStreamCreate");
        ts.emplace_back([h, t, st = sts[t]] {
            for (int i = 0; i < 10; i++)
                run_case(h, st,
                         {"threaded fp32", CUDA_R_32F, CUDA_R_32F, CUBLAS_OP_N, CUBLAS_OP_T, 16, 12, 20, 2, 1.0f, 0.5f,
                          (i & 1) != 0, false, CUBLASLT_ORDER_COL, 0},
                         100 + t * 10 + i);
        });
    }
    for (std::thread &t : ts)
        t.join();
    for (cudaStream_t st : sts)
        cudaStreamDestroy(st);
}

// A valid 4x3 = (4x2)(2x3) fp32 problem whose descriptors each check breaks on a copy.
struct small {
    void *a, *b, *c, *bias;
    float one = 1.0f, zero = 0.0f;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulPreference_t pref;
    small() {
        cudaMalloc(&a, 64);
        cudaMalloc(&b, 64);
        cudaMalloc(&c, 64);
        cudaMalloc(&bias, 64);
        cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
        cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, 4, 2, 4);
        cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, 2, 3, 2);
        cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, 4, 3, 4);
        cublasLtMatmulPreferenceCreate(&pref);
    }
    ~small() {
        cublasLtMatmulDescDestroy(desc);
        cublasLtMatrixLayoutDestroy(la);
        cublasLtMatrixLayoutDestroy(lb);
        cublasLtMatrixLayoutDestroy(lc);
        cublasLtMatmulPreferenceDestroy(pref);
        cudaFree(a);
        cudaFree(b);
        cudaFree(c);
        cudaFree(bias);
    }
    cublasStatus_t heuristic(cublasLtHandle_t h, int *found = nullptr) {
        cublasLtMatmulHeuristicResult_t r;
        int n;
        return cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, lc, lc, pref, 1, &r, found ? found : &n);
    }
    cublasStatus_t matmul(cublasLtHandle_t h, cudaStream_t st) {
        return cublasLtMatmul(h, desc, &one, a, la, b, lb, &zero, c, lc, c, lc, nullptr, nullptr, 0, st);
    }
    // Both the heuristic and the product give want.
    void expect(cublasLtHandle_t h, cudaStream_t st, cublasStatus_t want, const char *what) {
        cublasStatus_t s1 = heuristic(h), s2 = matmul(h, st);
        CHECK(s1 == want && s2 == want, "%s: heuristic %s, matmul %s, expected %s", what, cublasLtGetStatusName(s1),
              cublasLtGetStatusName(s2), cublasLtGetStatusName(want));
    }
};

template <typename T> static void set_desc(small &s, cublasLtMatmulDescAttributes_t attr, T v) {
    EXPECT(cublasLtMatmulDescSetAttribute(s.desc, attr, &v, sizeof v), CUBLAS_STATUS_SUCCESS);
}
template <typename T> static void set_layout(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr, T v) {
    EXPECT(cublasLtMatrixLayoutSetAttribute(l, attr, &v, sizeof v), CUBLAS_STATUS_SUCCESS);
}

static void errors(cublasLtHandle_t h, cudaStream_t st) {
    {
        small s;
        s.expect(h, st, CUBLAS_STATUS_SUCCESS, "valid problem");
        int found = 0;
        setenv("CUDA_EMU_LT_NO_ALGO", "1", 1);
        EXPECT(s.heuristic(h, &found), CUBLAS_STATUS_NOT_SUPPORTED);
        CHECK(found == 0, "no algorithm reported, yet %d found", found);
        EXPECT(s.matmul(h, st), CUBLAS_STATUS_NOT_SUPPORTED); // the implicit heuristic finds nothing either
        setenv("CUDA_EMU_LT_NO_ALGO", "0", 1);
        EXPECT(s.heuristic(h, &found), CUBLAS_STATUS_SUCCESS);
        CHECK(found == 1, "heuristic found %d", found);
        unsetenv("CUDA_EMU_LT_NO_ALGO");
        cublasLtMatmulHeuristicResult_t r[2];
        EXPECT(cublasLtMatmulAlgoGetHeuristic(h, s.desc, s.la, s.lb, s.lc, s.lc, s.pref, 0, r, &found),
               CUBLAS_STATUS_INVALID_VALUE);
        EXPECT(cublasLtMatmulAlgoGetHeuristic(h, s.desc, s.la, s.lb, s.lc, s.lc, nullptr, 1, r, &found),
               CUBLAS_STATUS_INVALID_VALUE);
        EXPECT(cublasLtMatmulAlgoGetHeuristic(h, s.desc, s.la, s.lb, s.lc, s.lc, s.pref, 2, r, &found),
               CUBLAS_STATUS_SUCCESS);
        CHECK(found == 1 && r[0].state == CUBLAS_STATUS_SUCCESS && r[0].workspaceSize == 0, "heuristic of 2");
        cublasLtMatmulAlgo_t bogus = {};
        EXPECT(cublasLtMatmul(h, s.desc, &s.one, s.a, s.la, s.b, s.lb, &s.zero, s.c, s.lc, s.c, s.lc, &bogus, nullptr,
                              0, st),
               CUBLAS_STATUS_INVALID_VALUE);
        EXPECT(cublasLtMatmul(h, s.desc, &s.one, s.a, s.la, s.b, s.lb, &s.zero, s.c, s.lc, s.c, s.lc, &r[0].algo,
                              nullptr, 0, st),
               CUBLAS_STATUS_SUCCESS);
        // The algorithm was chosen for 256-byte alignment (the preference's default): A
        // one float past it is refused, as a card would fault on it.
        EXPECT(cublasLtMatmul(h, s.desc, &s.one, (float *)s.a + 1, s.la, s.b, s.lb, &s.zero, s.c, s.lc, s.c, s.lc,
                              &r[0].algo, nullptr, 0, st),
               CUBLAS_STATUS_NOT_SUPPORTED);
        // Alignment below one element: no algorithm; exactly one element: fine.
        uint32_t al = 2;
        EXPECT(cublasLtMatmulPreferenceSetAttribute(s.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al, sizeof al),
               CUBLAS_STATUS_SUCCESS);
        EXPECT(s.heuristic(h), CUBLAS_STATUS_NOT_SUPPORTED);
        al = 4;
        EXPECT(cublasLtMatmulPreferenceSetAttribute(s.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al, sizeof al),
               CUBLAS_STATUS_SUCCESS);
        EXPECT(s.heuristic(h), CUBLAS_STATUS_SUCCESS);
        EXPECT(cublasLtMatmulPreferenceSetAttribute(s.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al, 8),
               CUBLAS_STATUS_INVALID_VALUE);
        uint32_t mode = 1;
        EXPECT(cublasLtMatmulPreferenceSetAttribute(s.pref, CUBLASLT_MATMUL_PREF_SEARCH_MODE, &mode, sizeof mode),
               CUBLAS_STATUS_INVALID_VALUE);
        // Null arguments.
        EXPECT(cublasLtMatmulAlgoGetHeuristic(nullptr, s.desc, s.la, s.lb, s.lc, s.lc, s.pref, 1, r, &found),
               CUBLAS_STATUS_NOT_INITIALIZED);
        EXPECT(cublasLtMatmul(nullptr, s.desc, &s.one, s.a, s.la, s.b, s.lb, &s.zero, s.c, s.lc, s.c, s.lc, nullptr,
                              nullptr, 0, st),
               CUBLAS_STATUS_NOT_INITIALIZED);
        EXPECT(cublasLtMatmul(h, s.desc, &s.one, nullptr, s.la, s.b, s.lb, &s.zero, s.c, s.lc, s.c, s.lc, nullptr,
                              nullptr, 0, st),
               CUBLAS_STATUS_INVALID_VALUE);
        EXPECT(cublasLtMatmul(h, s.desc, nullptr, s.a, s.la, s.b, s.lb, &s.zero, s.c, s.lc, s.c, s.lc, nullptr, nullptr,
                              0, st),
               CUBLAS_STATUS_INVALID_VALUE);
        EXPECT(cublasLtMatmul(h, s.desc, &s.one, s.a, s.la, s.b, s.lb, &s.one, nullptr, s.lc, s.c, s.lc, nullptr,
                              nullptr, 0, st),
               CUBLAS_STATUS_INVALID_VALUE);
        EXPECT(cublasLtMatmul(h, s.desc, &s.one, s.a, s.la, s.b, s.lb, &s.zero, nullptr, s.lc, s.c, s.lc, nullptr,
                              nullptr, 0, st),
               CUBLAS_STATUS_SUCCESS); // beta 0: C is not needed
        EXPECT(cublasLtMatmul(h, s.desc, &s.one, s.a, s.la, s.b, nullptr, &s.zero, s.c, s.lc, s.c, s.lc, nullptr,
                              nullptr, 0, st),
               CUBLAS_STATUS_INVALID_VALUE);
        // In place with another layout for D.
        cublasLtMatrixLayout_t ld5;
        EXPECT(cublasLtMatrixLayoutCreate(&ld5, CUDA_R_32F, 4, 3, 5), CUBLAS_STATUS_SUCCESS);
        EXPECT(cublasLtMatmul(h, s.desc, &s.one, s.a, s.la, s.b, s.lb, &s.zero, s.c, s.lc, s.c, ld5, nullptr, nullptr,
                              0, st),
               CUBLAS_STATUS_INVALID_VALUE);
        cublasLtMatrixLayoutDestroy(ld5);
    }
    {
        small s; // bad dimensions: op(A) 4x2, B 3x3
        cublasLtMatrixLayoutDestroy(s.lb);
        cublasLtMatrixLayoutCreate(&s.lb, CUDA_R_32F, 3, 3, 3);
        s.expect(h, st, CUBLAS_STATUS_INVALID_VALUE, "k of A and B differ");
    }
    {
        small s; // op(A) is 2x4 with TRANSA
        set_desc(s, CUBLASLT_MATMUL_DESC_TRANSA, (int32_t)CUBLAS_OP_T);
        s.expect(h, st, CUBLAS_STATUS_INVALID_VALUE, "transposed A does not fit");
    }
    {
        small s;
        set_layout(s.la, CUBLASLT_MATRIX_LAYOUT_LD, (int64_t)3);
        s.expect(h, st, CUBLAS_STATUS_INVALID_VALUE, "ld < rows");
    }
    {
        small s;
        set_layout(s.lb, CUBLASLT_MATRIX_LAYOUT_ORDER, (int32_t)CUBLASLT_ORDER_ROW); // 2x3, ld 2
        s.expect(h, st, CUBLAS_STATUS_INVALID_VALUE, "row order, ld < cols");
    }
    {
        small s;
        set_layout(s.la, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, (int32_t)2);
        s.expect(h, st, CUBLAS_STATUS_INVALID_VALUE, "batch counts differ");
    }
    {
        small s; // fp32 in, bf16 out is not in the table
        set_layout(s.lc, CUBLASLT_MATRIX_LAYOUT_TYPE, (uint32_t)CUDA_R_16BF);
        s.expect(h, st, CUBLAS_STATUS_NOT_SUPPORTED, "fp32 A/B with bf16 C/D");
    }
    {
        small s;
        set_layout(s.la, CUBLASLT_MATRIX_LAYOUT_TYPE, (uint32_t)CUDA_R_16BF);
        set_layout(s.lb, CUBLASLT_MATRIX_LAYOUT_TYPE, (uint32_t)CUDA_R_16F);
        s.expect(h, st, CUBLAS_STATUS_NOT_SUPPORTED, "bf16 A with fp16 B");
    }
    {
        small s;
        set_layout(s.la, CUBLASLT_MATRIX_LAYOUT_TYPE, (uint32_t)CUDA_R_64F);
        set_layout(s.lb, CUBLASLT_MATRIX_LAYOUT_TYPE, (uint32_t)CUDA_R_64F);
        set_layout(s.lc, CUBLASLT_MATRIX_LAYOUT_TYPE, (uint32_t)CUDA_R_64F);
        s.expect(h, st, CUBLAS_STATUS_NOT_SUPPORTED, "fp64 with fp32 compute");
    }
    const int32_t computes[3] = {CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_COMPUTE_16F, CUBLAS_COMPUTE_64F};
    for (int32_t ct : computes) {
        small s;
        set_desc(s, CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, ct);
        s.expect(h, st, CUBLAS_STATUS_NOT_SUPPORTED, "another compute type");
    }
    {
        small s;
        set_desc(s, CUBLASLT_MATMUL_DESC_EPILOGUE, (uint32_t)CUBLASLT_EPILOGUE_RELU);
        s.expect(h, st, CUBLAS_STATUS_NOT_SUPPORTED, "ReLU epilogue");
    }
    {
        small s;
        set_desc(s, CUBLASLT_MATMUL_DESC_POINTER_MODE, (int32_t)CUBLASLT_POINTER_MODE_DEVICE);
        s.expect(h, st, CUBLAS_STATUS_NOT_SUPPORTED, "device pointer mode");
    }
    {
        small s;
        set_desc(s, CUBLASLT_MATMUL_DESC_EPILOGUE, (uint32_t)CUBLASLT_EPILOGUE_BIAS);
        EXPECT(s.matmul(h, st), CUBLAS_STATUS_INVALID_VALUE); // without a bias
        set_desc(s, CUBLASLT_MATMUL_DESC_BIAS_POINTER, (const void *)((char *)s.bias + 2));
        EXPECT(s.heuristic(h), CUBLAS_STATUS_NOT_SUPPORTED); // bias less aligned than its element
        set_desc(s, CUBLASLT_MATMUL_DESC_BIAS_POINTER, (const void *)s.bias);
        s.expect(h, st, CUBLAS_STATUS_SUCCESS, "bias epilogue");
        set_desc(s, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, (int32_t)CUDA_R_16BF);
        s.expect(h, st, CUBLAS_STATUS_NOT_SUPPORTED, "bf16 bias with fp32 D");
    }
    for (uint32_t epi : {CUBLASLT_EPILOGUE_GELU_AUX, CUBLASLT_EPILOGUE_DGELU}) {
        // The GELU input matrix: required, its leading dimension divisible by 8 and no
        // less than D's rows (4 here), its type D's.
        small s;
        void *aux = nullptr;
        CHECK(cudaMalloc(&aux, 128) == cudaSuccess, "cudaMalloc");
        set_desc(s, CUBLASLT_MATMUL_DESC_EPILOGUE, epi);
        set_desc(s, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, (int64_t)8);
        EXPECT(s.matmul(h, st), CUBLAS_STATUS_INVALID_VALUE); // without its matrix
        set_desc(s, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, (const void *)aux);
        s.expect(h, st, CUBLAS_STATUS_SUCCESS, "GELU epilogue");
        set_desc(s, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, (int64_t)4);
        s.expect(h, st, CUBLAS_STATUS_INVALID_VALUE, "GELU input's ld not divisible by 8");
        set_desc(s, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, (int64_t)8);
        set_desc(s, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, (int32_t)CUDA_R_16BF);
        s.expect(h, st, CUBLAS_STATUS_NOT_SUPPORTED, "bf16 GELU input with fp32 D");
        CHECK(cudaStreamSynchronize(st) == cudaSuccess && cudaFree(aux) == cudaSuccess, "GELU epilogue products");
    }
    CHECK(cudaStreamSynchronize(st) == cudaSuccess, "products of the argument checks");

    // Attribute sizes and values: rejected without changing the descriptor.
    small s;
    int64_t big = 1;
    int32_t v = 7;
    size_t n = 0;
    EXPECT(cublasLtMatmulDescSetAttribute(s.desc, CUBLASLT_MATMUL_DESC_TRANSA, &big, sizeof big),
           CUBLAS_STATUS_INVALID_VALUE);
    EXPECT(cublasLtMatmulDescSetAttribute(s.desc, CUBLASLT_MATMUL_DESC_TRANSA, &v, sizeof v),
           CUBLAS_STATUS_INVALID_VALUE);
    EXPECT(cublasLtMatmulDescSetAttribute(s.desc, CUBLASLT_MATMUL_DESC_TRANSA, nullptr, sizeof v),
           CUBLAS_STATUS_INVALID_VALUE);
    EXPECT(cublasLtMatmulDescSetAttribute(s.desc, (cublasLtMatmulDescAttributes_t)999, &v, sizeof v),
           CUBLAS_STATUS_INVALID_VALUE);
    EXPECT(cublasLtMatmulDescGetAttribute(s.desc, CUBLASLT_MATMUL_DESC_TRANSA, nullptr, 0, &n), CUBLAS_STATUS_SUCCESS);
    CHECK(n == 4, "TRANSA is %zu bytes", n);
    EXPECT(cublasLtMatmulDescGetAttribute(s.desc, CUBLASLT_MATMUL_DESC_TRANSA, &v, sizeof v, &n),
           CUBLAS_STATUS_SUCCESS);
    CHECK(v == CUBLAS_OP_N, "TRANSA changed by rejected values: %d", v);
    EXPECT(cublasLtMatmulDescGetAttribute(s.desc, CUBLASLT_MATMUL_DESC_TRANSA, nullptr, 0, nullptr),
           CUBLAS_STATUS_INVALID_VALUE);
    EXPECT(cublasLtMatmulDescGetAttribute(s.desc, CUBLASLT_MATMUL_DESC_TRANSA, &big, sizeof big, &n),
           CUBLAS_STATUS_INVALID_VALUE);
    uint32_t small_rows = 4;
    int64_t neg = -1;
    EXPECT(cublasLtMatrixLayoutSetAttribute(s.la, CUBLASLT_MATRIX_LAYOUT_ROWS, &small_rows, sizeof small_rows),
           CUBLAS_STATUS_INVALID_VALUE);
    EXPECT(cublasLtMatrixLayoutSetAttribute(s.la, CUBLASLT_MATRIX_LAYOUT_LD, &neg, sizeof neg),
           CUBLAS_STATUS_INVALID_VALUE);
    EXPECT(cublasLtMatrixLayoutSetAttribute(s.la, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &neg, sizeof neg),
           CUBLAS_STATUS_INVALID_VALUE);
    v = 0;
    EXPECT(cublasLtMatrixLayoutSetAttribute(s.la, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &v, sizeof v),
           CUBLAS_STATUS_INVALID_VALUE);
    v = 5;
    EXPECT(cublasLtMatrixLayoutSetAttribute(s.la, CUBLASLT_MATRIX_LAYOUT_ORDER, &v, sizeof v),
           CUBLAS_STATUS_INVALID_VALUE);
    uint32_t ty = 99;
    EXPECT(cublasLtMatrixLayoutSetAttribute(s.la, CUBLASLT_MATRIX_LAYOUT_TYPE, &ty, sizeof ty),
           CUBLAS_STATUS_INVALID_VALUE);
    uint64_t rows = 0;
    EXPECT(cublasLtMatrixLayoutGetAttribute(s.la, CUBLASLT_MATRIX_LAYOUT_ROWS, &rows, sizeof rows, &n),
           CUBLAS_STATUS_SUCCESS);
    CHECK(rows == 4 && n == 8, "ROWS read back as %llu (%zu bytes)", (unsigned long long)rows, n);
    uint32_t ws32 = 0;
    EXPECT(cublasLtMatmulPreferenceSetAttribute(s.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws32, sizeof ws32),
           CUBLAS_STATUS_INVALID_VALUE);
    s.expect(h, st, CUBLAS_STATUS_SUCCESS, "after rejected attributes");

    cublasLtMatrixLayout_t l = nullptr;
    cublasLtMatmulDesc_t d = nullptr;
    EXPECT(cublasLtMatrixLayoutCreate(&l, CUDA_R_32F, 4, 4, -1), CUBLAS_STATUS_INVALID_VALUE);
    EXPECT(cublasLtMatrixLayoutCreate(nullptr, CUDA_R_32F, 4, 4, 4), CUBLAS_STATUS_INVALID_VALUE);
    EXPECT(cublasLtMatmulDescCreate(&d, (cublasComputeType_t)1234, CUDA_R_32F), CUBLAS_STATUS_INVALID_VALUE);
    EXPECT(cublasLtCreate(nullptr), CUBLAS_STATUS_INVALID_VALUE);
    EXPECT(cublasLtDestroy(nullptr), CUBLAS_STATUS_NOT_INITIALIZED);
    CHECK(strcmp(cublasLtGetStatusName(CUBLAS_STATUS_NOT_SUPPORTED), "CUBLAS_STATUS_NOT_SUPPORTED") == 0,
          "status name");
    CHECK(strcmp(cublasLtGetStatusName((cublasStatus_t)99), "CUBLAS_STATUS_UNKNOWN") == 0, "unknown status name");
    CHECK(cublasLtGetStatusString(CUBLAS_STATUS_EXECUTION_FAILED)[0] != 0, "status string");
    CHECK(cudaStreamSynchronize(st) == cudaSuccess, "products of the attribute checks");
}

// A product with A at `a` on the current device's default stream faults the device.
static void expect_fault(cublasLtHandle_t h, small &s, const void *a, const char *what) {
    EXPECT(cublasLtMatmul(h, s.desc, &s.one, a, s.la, s.b, s.lb, &s.zero, s.c, s.lc, s.c, s.lc, nullptr, nullptr, 0,
                          nullptr),
           CUBLAS_STATUS_SUCCESS);
    cudaError_t e = cudaStreamSynchronize(nullptr);
    CHECK(e == cudaErrorIllegalAddress, "%s: cudaStreamSynchronize gave %s", what, cudaGetErrorName(e));
}

// A device reaches its own memory and registered host memory. Anything else faults it
// and leaves its context unusable, so each fault has a device of its own (devices 1
// and 2 when there are three) and device 0's comes last.
static void reach(cublasLtHandle_t h) {
    int n = 0;
    cudaGetDeviceCount(&n);
    if (n >= 3) {
        CHECK(cudaSetDevice(1) == cudaSuccess, "cudaSetDevice");
        small s1;
        CHECK(cudaSetDevice(2) == cudaSuccess, "cudaSetDevice");
        small s2;
        expect_fault(h, s2, s1.a, "A on another device");
        CHECK(cudaSetDevice(1) == cudaSuccess, "cudaSetDevice");
        set_layout(s1.la, CUBLASLT_MATRIX_LAYOUT_LD, (int64_t)20); // 96 bytes from a 64-byte allocation
        expect_fault(h, s1, s1.a, "A past its allocation's end");
    } else {
        printf("test_cublaslt: %d device(s): faults on other devices and past an allocation not checked\n", n);
    }
    CHECK(cudaSetDevice(0) == cudaSuccess, "cudaSetDevice");
    small s;
    std::vector<float> host(8, 1.0f), out(12);
    CHECK(cudaHostRegister(host.data(), host.size() * sizeof(float), cudaHostRegisterDefault) == cudaSuccess,
          "cudaHostRegister");
    std::vector<float> twos(6, 2.0f);
    cudaMemcpy(s.b, twos.data(), twos.size() * sizeof(float), cudaMemcpyHostToDevice);
    EXPECT(cublasLtMatmul(h, s.desc, &s.one, host.data(), s.la, s.b, s.lb, &s.zero, s.c, s.lc, s.c, s.lc, nullptr,
                          nullptr, 0, nullptr),
           CUBLAS_STATUS_SUCCESS);
    CHECK(cudaStreamSynchronize(nullptr) == cudaSuccess, "product on registered memory");
    cudaMemcpy(out.data(), s.c, out.size() * sizeof(float), cudaMemcpyDeviceToHost);
    for (float x : out)
        CHECK(x == 4.0f, "product on registered memory gave %g, expected 4", x);
    cudaHostUnregister(host.data());
    expect_fault(h, s, host.data(), "A in pageable host memory");
}

int main() {
    setenv("CUDA_EMU_DEVICES", "3", 0); // the fault checks want three devices; a setting already made wins
    cublasLtHandle_t h = nullptr;
    cudaStream_t st = nullptr;
    EXPECT(cublasLtCreate(&h), CUBLAS_STATUS_SUCCESS);
    CHECK(cudaStreamCreate(&st) == cudaSuccess, "cudaStreamCreate");
    products(h, st);
    threads(h);
    errors(h, st);
    reach(h);
    cublasLtDestroy(h);
    if (failures) {
        fprintf(stderr, "test_cublaslt: %d failures\n", failures.load());
        return 1;
    }
    printf("test_cublaslt: all passed\n");
    return 0;
}
