// Self-test of the emulation's cuDNN backend API (cudnn.cpp), against double-precision
// references and the statuses of NVIDIA's cuDNN Backend API reference: a batched matmul
// with a transposed operand and grouped heads; cudnn-frontend's composite SDPA forward
// (scale, causal mask, softmax with its stats, P x V) on grouped heads; the backward's
// reshape transpose into a matmul; reductions (grouped heads, every operator); the
// pointwise modes with broadcasting; the error paths with their last-error texts; the
// CUDA_EMU_CUDNN hook; stream order behind slow work, with by-value scalars copied at
// execute time; a stream of another device. Exits 0 when everything passed.
// timeout: 10 cuda-emu=10 san-cuda-emu=10
#include <cudnn_graph.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>
#include <chrono>
#include <string>
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

static std::string last_text() {
    char text[1024];
    cudnnGetLastErrorString(text, sizeof text);
    return text;
}

#define EXPECT(call, want)                                                                                             \
    do {                                                                                                               \
        cudnnStatus_t got_ = (call);                                                                                   \
        CHECK(got_ == (want), "%s gave %s, expected %s (last error: %s)", #call, cudnnGetErrorString(got_),            \
              cudnnGetErrorString(want), last_text().c_str());                                                         \
    } while (0)

// A failure with the status wanted, whose last-error text names what is wrong.
#define EXPECT_FAIL(call, want, needle)                                                                                \
    do {                                                                                                               \
        cudnnStatus_t got_ = (call);                                                                                   \
        std::string text_ = last_text();                                                                               \
        CHECK(got_ == (want) && text_.find(needle) != std::string::npos,                                               \
              "%s gave %s (\"%s\"), expected %s saying \"%s\"", #call, cudnnGetErrorString(got_), text_.c_str(),       \
              cudnnGetErrorString(want), needle);                                                                      \
    } while (0)

struct rng {
    uint64_t s;
    float uniform() { // in [-1, 1)
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        return (float)((s >> 40) * 0x1p-23) - 1.0f;
    }
};

static float bf16_round(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

static std::vector<__nv_bfloat16> to_bf16(const std::vector<float> &v) {
    std::vector<__nv_bfloat16> out(v.size());
    for (size_t i = 0; i < v.size(); i++)
        out[i] = __float2bfloat16_rn(v[i]);
    return out;
}

static std::vector<int64_t> packed(const std::vector<int64_t> &dims) {
    std::vector<int64_t> s(dims.size(), 1);
    for (size_t i = dims.size() - 1; i-- > 0;)
        s[i] = s[i + 1] * dims[i + 1];
    return s;
}

// Device memory, freed with the object.
struct dev_buffer {
    void *p = nullptr;
    size_t bytes;
    explicit dev_buffer(size_t n) : bytes(n) { CHECK(cudaMalloc(&p, n) == cudaSuccess, "cudaMalloc(%zu)", n); }
    template <typename T> explicit dev_buffer(const std::vector<T> &v) : dev_buffer(v.size() * sizeof(T)) {
        CHECK(cudaMemcpy(p, v.data(), bytes, cudaMemcpyHostToDevice) == cudaSuccess, "upload");
    }
    template <typename T> std::vector<T> download() const {
        std::vector<T> v(bytes / sizeof(T));
        CHECK(cudaMemcpy(v.data(), p, bytes, cudaMemcpyDeviceToHost) == cudaSuccess, "download");
        return v;
    }
    ~dev_buffer() {
        if (p) cudaFree(p);
    }
};

// The descriptors of one graph, built as zinf builds them and destroyed together.
struct graph {
    std::vector<cudnnBackendDescriptor_t> made;
    ~graph() {
        for (cudnnBackendDescriptor_t d : made)
            cudnnBackendDestroyDescriptor(d);
    }

    cudnnBackendDescriptor_t create(cudnnBackendDescriptorType_t type) {
        cudnnBackendDescriptor_t d = nullptr;
        EXPECT(cudnnBackendCreateDescriptor(type, &d), CUDNN_STATUS_SUCCESS);
        made.push_back(d);
        return d;
    }
    template <typename T>
    void set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, T v) {
        EXPECT(cudnnBackendSetAttribute(d, name, type, 1, &v), CUDNN_STATUS_SUCCESS);
    }
    void finalize(cudnnBackendDescriptor_t d) { EXPECT(cudnnBackendFinalize(d), CUDNN_STATUS_SUCCESS); }

    // Packed unless strides are given.
    cudnnBackendDescriptor_t tensor(int64_t uid, cudnnDataType_t type, std::vector<int64_t> dims,
                                    std::vector<int64_t> strides = {}, bool is_virtual = false, bool by_value = false) {
        if (strides.empty()) strides = packed(dims);
        cudnnBackendDescriptor_t t = create(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
        set(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, uid);
        set(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, type);
        EXPECT(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, (int64_t)dims.size(),
                                        dims.data()),
               CUDNN_STATUS_SUCCESS);
        EXPECT(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, (int64_t)strides.size(),
                                        strides.data()),
               CUDNN_STATUS_SUCCESS);
        set(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, (int64_t)16);
        if (is_virtual) set(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, true);
        if (by_value) set(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, true);
        finalize(t);
        return t;
    }
    cudnnBackendDescriptor_t virt(int64_t uid, cudnnDataType_t type, std::vector<int64_t> dims,
                                  std::vector<int64_t> strides = {}) {
        return tensor(uid, type, dims, strides, true);
    }
    cudnnBackendDescriptor_t scalar(int64_t uid) {
        return tensor(uid, CUDNN_DATA_FLOAT, {1, 1, 1, 1}, {}, false, true);
    }

    cudnnBackendDescriptor_t pointwise(cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x,
                                       cudnnBackendDescriptor_t y, cudnnBackendDescriptor_t b = nullptr,
                                       cudnnBackendDescriptor_t t = nullptr, int64_t axis = -1,
                                       cudnnDataType_t precision = CUDNN_DATA_FLOAT, float alpha1 = 1.0f,
                                       float alpha2 = 1.0f) {
        cudnnBackendDescriptor_t pw = create(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
        set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, mode);
        set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, precision);
        if (axis >= 0) set(pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, axis);
        finalize(pw);
        cudnnBackendDescriptor_t op = create(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
        set(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, pw);
        set(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, x);
        if (b) set(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, b);
        if (t) set(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, t);
        set(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, y);
        if (alpha1 != 1.0f) set(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, alpha1);
        if (alpha2 != 1.0f) set(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, alpha2);
        finalize(op);
        return op;
    }
    cudnnBackendDescriptor_t matmul(cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
                                    cudnnBackendDescriptor_t c) {
        cudnnBackendDescriptor_t mm = create(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
        set(mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_FLOAT);
        finalize(mm);
        cudnnBackendDescriptor_t op = create(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
        set(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, a);
        set(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, b);
        set(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, c);
        set(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, mm);
        finalize(op);
        return op;
    }
    cudnnBackendDescriptor_t reduction(cudnnReduceTensorOp_t how, cudnnBackendDescriptor_t x,
                                       cudnnBackendDescriptor_t y) {
        cudnnBackendDescriptor_t rd = create(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
        set(rd, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, how);
        set(rd, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_FLOAT);
        finalize(rd);
        cudnnBackendDescriptor_t op = create(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
        set(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, x);
        set(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, y);
        set(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, rd);
        finalize(op);
        return op;
    }
    cudnnBackendDescriptor_t reshape(cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
        cudnnBackendDescriptor_t op = create(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
        set(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, x);
        set(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, y);
        finalize(op);
        return op;
    }

    // The operation graph of ops, unfinalized.
    cudnnBackendDescriptor_t op_graph(cudnnHandle_t h, const std::vector<cudnnBackendDescriptor_t> &ops) {
        cudnnBackendDescriptor_t g = create(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
        set(g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, h);
        EXPECT(cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                        (int64_t)ops.size(), ops.data()),
               CUDNN_STATUS_SUCCESS);
        return g;
    }

    // The execution plan of ops, as cudnn-frontend makes it: graph, heuristic, its first
    // engine configuration, plan; *workspace gets the plan's workspace size.
    cudnnBackendDescriptor_t plan(cudnnHandle_t h, const std::vector<cudnnBackendDescriptor_t> &ops,
                                  int64_t *workspace) {
        cudnnBackendDescriptor_t g = op_graph(h, ops);
        finalize(g);
        int64_t engines = 0, n = 0;
        EXPECT(cudnnBackendGetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT, CUDNN_TYPE_INT64, 1, &n,
                                        &engines),
               CUDNN_STATUS_SUCCESS);
        CHECK(engines == 1 && n == 1, "ENGINE_GLOBAL_COUNT %lld (%lld elements)", (long long)engines, (long long)n);
        cudnnBackendDescriptor_t heur = create(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
        set(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, g);
        set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, CUDNN_HEUR_MODE_A);
        finalize(heur);
        EXPECT(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &n,
                                        nullptr),
               CUDNN_STATUS_SUCCESS);
        CHECK(n == 1, "the heuristic has %lld results", (long long)n);
        cudnnBackendDescriptor_t configs[2] = {create(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR),
                                               create(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR)};
        EXPECT(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 2, &n,
                                        configs),
               CUDNN_STATUS_SUCCESS);
        CHECK(n == 1, "2 results asked, %lld given", (long long)n);
        cudnnBackendDescriptor_t p = create(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
        set(p, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, h);
        set(p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, configs[0]);
        finalize(p);
        EXPECT(
            cudnnBackendGetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, workspace),
            CUDNN_STATUS_SUCCESS);
        CHECK(*workspace == 256 * (int64_t)ops.size(), "workspace %lld for %zu operations", (long long)*workspace,
              ops.size());
        return p;
    }

    // A finalized variant pack.
    cudnnBackendDescriptor_t pack(const std::vector<int64_t> &uids, const std::vector<void *> &pointers,
                                  void *workspace) {
        cudnnBackendDescriptor_t v = create(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
        EXPECT(cudnnBackendSetAttribute(v, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, (int64_t)uids.size(),
                                        uids.data()),
               CUDNN_STATUS_SUCCESS);
        EXPECT(cudnnBackendSetAttribute(v, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
                                        (int64_t)pointers.size(), pointers.data()),
               CUDNN_STATUS_SUCCESS);
        set(v, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, workspace);
        finalize(v);
        return v;
    }
};

// |got - ref| within tol, NaN matching NaN.
static bool close(double got, double ref, double tol) {
    if (isnan(ref) || isnan(got)) return isnan(ref) && isnan(got);
    if (isinf(ref)) return got == ref;
    return fabs(got - ref) <= tol;
}

// ---- (a) a batched matmul: transposed operand, grouped and broadcast batch dims ----

// Q [2, 4, 5, 3] bf16 times K^T, K stored [1, 2, 6, 3] and read as [1, 2, 3, 6] with
// swapped strides: batch 1 broadcasts, head h reads K's head h / 2. C is FLOAT with
// rows padded to 8; the padding must survive.
static void test_matmul(cudnnHandle_t h) {
    const int B = 2, HQ = 4, HK = 2, M = 5, N = 6, K = 3, LDC = 8;
    rng g{11};
    std::vector<float> q(B * HQ * M * K), k(HK * N * K);
    for (float &x : q)
        x = bf16_round(g.uniform());
    for (float &x : k)
        x = bf16_round(g.uniform());
    dev_buffer dq(to_bf16(q)), dk(to_bf16(k)), dc(std::vector<float>(B * HQ * M * LDC, 7.0f));
    int64_t ws_bytes = 0;
    graph gr;
    auto a = gr.tensor(1, CUDNN_DATA_BFLOAT16, {B, HQ, M, K});
    auto b = gr.tensor(2, CUDNN_DATA_BFLOAT16, {1, HK, K, N}, {HK * N * K, N * K, 1, K});
    auto c = gr.tensor(3, CUDNN_DATA_FLOAT, {B, HQ, M, N}, {HQ * M * LDC, M * LDC, LDC, 1});
    auto plan = gr.plan(h, {gr.matmul(a, b, c)}, &ws_bytes);
    dev_buffer ws((size_t)ws_bytes);
    EXPECT(cudnnBackendExecute(h, plan, gr.pack({1, 2, 3}, {dq.p, dk.p, dc.p}, ws.p)), CUDNN_STATUS_SUCCESS);
    CHECK(cudaDeviceSynchronize() == cudaSuccess, "matmul ran");
    std::vector<float> got = dc.download<float>();
    int bad = 0;
    for (int bi = 0; bi < B; bi++)
        for (int hi = 0; hi < HQ; hi++)
            for (int i = 0; i < M; i++) {
                for (int j = 0; j < N; j++) {
                    double s = 0, mag = 0;
                    for (int l = 0; l < K; l++) {
                        double p = (double)q[((bi * HQ + hi) * M + i) * K + l] * k[((hi / 2) * N + j) * K + l];
                        s += p;
                        mag += fabs(p);
                    }
                    float x = got[((bi * HQ + hi) * M + i) * LDC + j];
                    if (!close(x, s, K * 0x1p-24 * mag) && bad++ < 3)
                        CHECK(false, "matmul C[%d,%d,%d,%d] = %.9g, reference %.9g", bi, hi, i, j, x, s);
                }
                for (int j = N; j < LDC; j++)
                    if (got[((bi * HQ + hi) * M + i) * LDC + j] != 7.0f && bad++ < 3)
                        CHECK(false, "matmul wrote C's padding at [%d,%d,%d,%d]", bi, hi, i, j);
            }
}

// ---- (b) the composite SDPA forward of cudnn-frontend ----

// UIDs of the graph's non-virtual tensors.
enum { Q_UID = 1, K_UID, V_UID, SCALE_UID, NEG_INF_UID, O_UID, STATS_UID };

// O = softmax(causal(scale Q K^T)) V and stats = max + log(sum of exp), on
// [b=2, h=4, s=5, d=8] with K and V on 2 heads (grouped-query attention). The
// operations are given in reverse so that the engine's dependency order is what runs
// them. The by-value scalars are read at execute time: *scale may change right after.
struct sdpa {
    static constexpr int B = 2, HQ = 4, HK = 2, S = 5, D = 8;
    graph gr;
    cudnnBackendDescriptor_t plan;
    int64_t ws_bytes = 0;

    explicit sdpa(cudnnHandle_t h) {
        const std::vector<int64_t> scores = {B, HQ, S, S}, rows = {B, HQ, S, 1};
        auto q = gr.tensor(Q_UID, CUDNN_DATA_BFLOAT16, {B, HQ, S, D});
        auto kt = gr.tensor(K_UID, CUDNN_DATA_BFLOAT16, {B, HK, D, S}, {HK * S * D, S * D, 1, D});
        auto v = gr.tensor(V_UID, CUDNN_DATA_BFLOAT16, {B, HK, S, D});
        auto scale = gr.scalar(SCALE_UID), neg_inf = gr.scalar(NEG_INF_UID);
        auto o = gr.tensor(O_UID, CUDNN_DATA_BFLOAT16, {B, HQ, S, D});
        auto stats = gr.tensor(STATS_UID, CUDNN_DATA_FLOAT, rows);
        auto s = gr.virt(101, CUDNN_DATA_FLOAT, scores), scaled = gr.virt(102, CUDNN_DATA_FLOAT, scores);
        auto row = gr.virt(103, CUDNN_DATA_INT32, scores), col = gr.virt(104, CUDNN_DATA_INT32, scores);
        auto keep = gr.virt(105, CUDNN_DATA_BOOLEAN, scores), masked = gr.virt(106, CUDNN_DATA_FLOAT, scores);
        auto max = gr.virt(107, CUDNN_DATA_FLOAT, rows), sub = gr.virt(108, CUDNN_DATA_FLOAT, scores);
        auto e = gr.virt(109, CUDNN_DATA_FLOAT, scores), sum = gr.virt(110, CUDNN_DATA_FLOAT, rows);
        auto log = gr.virt(111, CUDNN_DATA_FLOAT, rows), p = gr.virt(112, CUDNN_DATA_BFLOAT16, scores);
        std::vector<cudnnBackendDescriptor_t> ops = {
            gr.matmul(q, kt, s),
            gr.pointwise(CUDNN_POINTWISE_MUL, s, scaled, scale),
            gr.pointwise(CUDNN_POINTWISE_GEN_INDEX, scaled, row, nullptr, nullptr, 2, CUDNN_DATA_INT32),
            gr.pointwise(CUDNN_POINTWISE_GEN_INDEX, scaled, col, nullptr, nullptr, 3, CUDNN_DATA_INT32),
            gr.pointwise(CUDNN_POINTWISE_CMP_GE, row, keep, col, nullptr, -1, CUDNN_DATA_BOOLEAN),
            gr.pointwise(CUDNN_POINTWISE_BINARY_SELECT, scaled, masked, neg_inf, keep),
            gr.reduction(CUDNN_REDUCE_TENSOR_MAX, masked, max),
            gr.pointwise(CUDNN_POINTWISE_SUB, masked, sub, max),
            gr.pointwise(CUDNN_POINTWISE_EXP, sub, e),
            gr.reduction(CUDNN_REDUCE_TENSOR_ADD, e, sum),
            gr.pointwise(CUDNN_POINTWISE_LOG, sum, log),
            gr.pointwise(CUDNN_POINTWISE_ADD, max, stats, log),
            gr.pointwise(CUDNN_POINTWISE_DIV, e, p, sum),
            gr.matmul(p, v, o),
        };
        std::vector<cudnnBackendDescriptor_t> reversed(ops.rbegin(), ops.rend());
        plan = gr.plan(h, reversed, &ws_bytes);
    }

    struct data {
        std::vector<float> q, k, v; // bf16 values
        dev_buffer dq, dk, dv, o, stats;
        explicit data(uint64_t seed)
            : q(fill(seed, B * HQ * S * D)), k(fill(seed + 1, B * HK * S * D)), v(fill(seed + 2, B * HK * S * D)),
              dq(to_bf16(q)), dk(to_bf16(k)), dv(to_bf16(v)), o(B * HQ * S * D * 2), stats(B * HQ * S * 4) {}
        static std::vector<float> fill(uint64_t seed, size_t n) {
            rng g{seed};
            std::vector<float> out(n);
            for (float &x : out)
                x = bf16_round(2.0f * g.uniform());
            return out;
        }
    };

    cudnnStatus_t execute(cudnnHandle_t h, data &d, const float *scale, const float *neg_inf, void *ws) {
        return cudnnBackendExecute(h, plan,
                                   gr.pack({Q_UID, K_UID, V_UID, SCALE_UID, NEG_INF_UID, O_UID, STATS_UID},
                                           {d.dq.p, d.dk.p, d.dv.p, (void *)scale, (void *)neg_inf, d.o.p, d.stats.p},
                                           ws));
    }

    // Checks O and the stats against a double reference for this scale.
    static void check(const char *what, const data &d, float scale) {
        std::vector<__nv_bfloat16> o = d.o.download<__nv_bfloat16>();
        std::vector<float> stats = d.stats.download<float>();
        int bad = 0;
        for (int b = 0; b < B; b++)
            for (int h = 0; h < HQ; h++)
                for (int i = 0; i < S; i++) {
                    int hk = h / (HQ / HK);
                    double x[S], max = -INFINITY, sum = 0;
                    for (int j = 0; j < S; j++) {
                        double s = 0;
                        for (int l = 0; l < D; l++)
                            s += (double)d.q[((b * HQ + h) * S + i) * D + l] * d.k[((b * HK + hk) * S + j) * D + l];
                        x[j] = j <= i ? s * scale : -INFINITY;
                        max = fmax(max, x[j]);
                    }
                    for (int j = 0; j < S; j++)
                        sum += exp(x[j] - max);
                    double ref_stats = max + log(sum), got_stats = stats[(b * HQ + h) * S + i];
                    if (!close(got_stats, ref_stats, 1e-5 * (fabs(ref_stats) + 1)) && bad++ < 3)
                        CHECK(false, "%s: stats[%d,%d,%d] = %.9g, reference %.9g", what, b, h, i, got_stats, ref_stats);
                    for (int l = 0; l < D; l++) {
                        double ref = 0, mag = 0;
                        for (int j = 0; j < S; j++) {
                            double pv = exp(x[j] - max) / sum * d.v[((b * HK + hk) * S + j) * D + l];
                            ref += pv;
                            mag += fabs(pv);
                        }
                        // P and O are each rounded to bf16 (a relative 2^-9 at most), the
                        // rest is fp32.
                        double tol = 0x1p-8 * (mag + fabs(ref)) + 1e-6;
                        double got = __bfloat162float(o[((b * HQ + h) * S + i) * D + l]);
                        if (!close(got, ref, tol) && bad++ < 3)
                            CHECK(false, "%s: O[%d,%d,%d,%d] = %.9g, reference %.9g (tolerance %.3g)", what, b, h, i, l,
                                  got, ref, tol);
                    }
                }
    }
};

static void test_sdpa_forward(cudnnHandle_t h) {
    sdpa graph_of(h);
    sdpa::data d(21);
    dev_buffer ws((size_t)graph_of.ws_bytes);
    float scale = 1.0f / sqrtf((float)sdpa::D), neg_inf = -INFINITY;
    EXPECT(graph_of.execute(h, d, &scale, &neg_inf, ws.p), CUDNN_STATUS_SUCCESS);
    CHECK(cudaDeviceSynchronize() == cudaSuccess, "SDPA forward ran");
    sdpa::check("SDPA forward", d, scale);
    // The workspace is overwritten with all bits set, whatever it held.
    std::vector<unsigned char> w = ws.download<unsigned char>();
    bool all_set = true;
    for (unsigned char byte : w)
        all_set = all_set && byte == 0xff;
    CHECK(all_set, "the workspace was not filled with the NaN pattern");
}

// ---- (c) the backward's reshape transpose into a matmul ----

// dV = P^T dO: P FLOAT [2, 3, 5, 7] goes through IDENTITY into a virtual FLOAT tensor,
// is reshaped into a virtual BFLOAT16 [2, 3, 7, 5] with transposed strides (rounding
// each element) and multiplied by dO [2, 3, 5, 4].
static void test_reshape_transpose(cudnnHandle_t h) {
    const int B = 2, H = 3, SQ = 5, SKV = 7, D = 4;
    rng g{31};
    std::vector<float> p(B * H * SQ * SKV), dout(B * H * SQ * D);
    for (float &x : p)
        x = g.uniform();
    for (float &x : dout)
        x = bf16_round(g.uniform());
    dev_buffer dp(p), ddo(to_bf16(dout)), ddv(B * H * SKV * D * 4);
    graph gr;
    auto pin = gr.tensor(1, CUDNN_DATA_FLOAT, {B, H, SQ, SKV});
    auto go = gr.tensor(2, CUDNN_DATA_BFLOAT16, {B, H, SQ, D});
    auto dv = gr.tensor(3, CUDNN_DATA_FLOAT, {B, H, SKV, D});
    auto pv = gr.virt(101, CUDNN_DATA_FLOAT, {B, H, SQ, SKV});
    auto pt = gr.virt(102, CUDNN_DATA_BFLOAT16, {B, H, SKV, SQ}, {H * SQ * SKV, SQ * SKV, 1, SKV});
    int64_t ws_bytes = 0;
    auto plan = gr.plan(h, {gr.pointwise(CUDNN_POINTWISE_IDENTITY, pin, pv), gr.reshape(pv, pt), gr.matmul(pt, go, dv)},
                        &ws_bytes);
    dev_buffer ws((size_t)ws_bytes);
    EXPECT(cudnnBackendExecute(h, plan, gr.pack({1, 2, 3}, {dp.p, ddo.p, ddv.p}, ws.p)), CUDNN_STATUS_SUCCESS);
    CHECK(cudaDeviceSynchronize() == cudaSuccess, "reshape and matmul ran");
    std::vector<float> got = ddv.download<float>();
    int bad = 0;
    for (int b = 0; b < B; b++)
        for (int hh = 0; hh < H; hh++)
            for (int i = 0; i < SKV; i++)
                for (int l = 0; l < D; l++) {
                    double ref = 0, mag = 0;
                    for (int j = 0; j < SQ; j++) {
                        double t = (double)bf16_round(p[((b * H + hh) * SQ + j) * SKV + i]) *
                                   dout[((b * H + hh) * SQ + j) * D + l];
                        ref += t;
                        mag += fabs(t);
                    }
                    float x = got[((b * H + hh) * SKV + i) * D + l];
                    if (!close(x, ref, SQ * 0x1p-24 * mag) && bad++ < 3)
                        CHECK(false, "P^T dO [%d,%d,%d,%d] = %.9g, reference %.9g", b, hh, i, l, x, ref);
                }
}

// ---- (d) reductions ----

// dK of grouped-query attention: [2, 6, 3, 4] (X laid out as [b, s, h, d]) summed over
// runs of 3 query heads into [2, 2, 3, 4].
static void test_grouped_reduction(cudnnHandle_t h) {
    const int B = 2, HQ = 6, HK = 2, S = 3, D = 4, G = HQ / HK;
    rng g{41};
    std::vector<float> x(B * S * HQ * D); // stored [b, s, h, d]
    for (float &v : x)
        v = g.uniform();
    dev_buffer dx(x), dy(B * HK * S * D * 4);
    graph gr;
    auto tx = gr.tensor(1, CUDNN_DATA_FLOAT, {B, HQ, S, D}, {S * HQ * D, D, HQ * D, 1});
    auto ty = gr.tensor(2, CUDNN_DATA_FLOAT, {B, HK, S, D});
    int64_t ws_bytes = 0;
    auto plan = gr.plan(h, {gr.reduction(CUDNN_REDUCE_TENSOR_ADD, tx, ty)}, &ws_bytes);
    dev_buffer ws((size_t)ws_bytes);
    EXPECT(cudnnBackendExecute(h, plan, gr.pack({1, 2}, {dx.p, dy.p}, ws.p)), CUDNN_STATUS_SUCCESS);
    CHECK(cudaDeviceSynchronize() == cudaSuccess, "grouped reduction ran");
    std::vector<float> got = dy.download<float>();
    for (int b = 0; b < B; b++)
        for (int k = 0; k < HK; k++)
            for (int s = 0; s < S; s++)
                for (int l = 0; l < D; l++) {
                    double ref = 0, mag = 0;
                    for (int q = k * G; q < k * G + G; q++) {
                        ref += x[((b * S + s) * HQ + q) * D + l];
                        mag += fabs(x[((b * S + s) * HQ + q) * D + l]);
                    }
                    float v = got[((b * HK + k) * S + s) * D + l];
                    CHECK(close(v, ref, G * 0x1p-24 * mag), "grouped sum [%d,%d,%d,%d] = %.9g, reference %.9g", b, k, s,
                          l, v, ref);
                }
}

// Every operator over the last dimension of [1, 2, 3, 4], into [1, 2, 3, 1].
static void test_reduction_operators(cudnnHandle_t h) {
    const cudnnReduceTensorOp_t ops[] = {CUDNN_REDUCE_TENSOR_ADD, CUDNN_REDUCE_TENSOR_MUL, CUDNN_REDUCE_TENSOR_MIN,
                                         CUDNN_REDUCE_TENSOR_MAX, CUDNN_REDUCE_TENSOR_AMAX};
    rng g{51};
    std::vector<float> x(24);
    for (float &v : x)
        v = 4.0f * g.uniform();
    dev_buffer dx(x), dy(6 * 4);
    for (cudnnReduceTensorOp_t op : ops) {
        graph gr;
        auto tx = gr.tensor(1, CUDNN_DATA_FLOAT, {1, 2, 3, 4}), ty = gr.tensor(2, CUDNN_DATA_FLOAT, {1, 2, 3, 1});
        int64_t ws_bytes = 0;
        auto plan = gr.plan(h, {gr.reduction(op, tx, ty)}, &ws_bytes);
        dev_buffer ws((size_t)ws_bytes);
        EXPECT(cudnnBackendExecute(h, plan, gr.pack({1, 2}, {dx.p, dy.p}, ws.p)), CUDNN_STATUS_SUCCESS);
        std::vector<float> got = dy.download<float>();
        for (int r = 0; r < 6; r++) {
            double ref = op == CUDNN_REDUCE_TENSOR_MUL   ? 1
                         : op == CUDNN_REDUCE_TENSOR_MAX ? -INFINITY
                         : op == CUDNN_REDUCE_TENSOR_MIN ? INFINITY
                                                         : 0;
            double mag = 0;
            for (int i = 0; i < 4; i++) {
                double v = x[r * 4 + i];
                switch (op) {
                case CUDNN_REDUCE_TENSOR_ADD: ref += v; break;
                case CUDNN_REDUCE_TENSOR_MUL: ref *= v; break;
                case CUDNN_REDUCE_TENSOR_MIN: ref = fmin(ref, v); break;
                case CUDNN_REDUCE_TENSOR_MAX: ref = fmax(ref, v); break;
                default: ref = fmax(ref, fabs(v)); break;
                }
                mag += fabs(v);
            }
            double tol = op == CUDNN_REDUCE_TENSOR_MUL ? 4 * 0x1p-24 * fabs(ref) : 4 * 0x1p-24 * mag;
            CHECK(close(got[r], ref, tol), "reduction operator %d, row %d: %.9g, reference %.9g", (int)op, r, got[r],
                  ref);
        }
    }
}

// ---- the pointwise modes, with broadcasting ----

// y = mode(alpha1 x, alpha2 b) on x [1, 2, 3, 4] and b [1, 2, 1, 4] (broadcast along
// dimension 2), each mode against the same fp32 math done here.
static void test_pointwise_modes(cudnnHandle_t h) {
    struct mode_case {
        cudnnPointwiseMode_t mode;
        bool binary;
        float alpha1, alpha2;
    };
    const mode_case cases[] = {
        {CUDNN_POINTWISE_ADD, true, 1, 1},       {CUDNN_POINTWISE_ADD, true, 2, 0.5f},
        {CUDNN_POINTWISE_SUB, true, 1, 1},       {CUDNN_POINTWISE_MUL, true, 1, 1},
        {CUDNN_POINTWISE_DIV, true, 1, 1},       {CUDNN_POINTWISE_MAX, true, 1, 1},
        {CUDNN_POINTWISE_MIN, true, 1, 1},       {CUDNN_POINTWISE_CMP_EQ, true, 1, 1},
        {CUDNN_POINTWISE_CMP_NEQ, true, 1, 1},   {CUDNN_POINTWISE_CMP_GT, true, 1, 1},
        {CUDNN_POINTWISE_CMP_GE, true, 1, 1},    {CUDNN_POINTWISE_CMP_LT, true, 1, 1},
        {CUDNN_POINTWISE_CMP_LE, true, 1, 1},    {CUDNN_POINTWISE_EXP, false, 1, 1},
        {CUDNN_POINTWISE_LOG, false, 1, 1},      {CUDNN_POINTWISE_NEG, false, 1, 1},
        {CUDNN_POINTWISE_IDENTITY, false, 1, 1},
    };
    rng g{61};
    std::vector<float> x(24), b(8);
    for (float &v : x)
        v = 3.0f * g.uniform();
    for (float &v : b)
        v = 3.0f * g.uniform();
    x[0] = -INFINITY; // expf and logf of -inf: 0 and -inf
    x[1] = 0.0f;
    x[5] = b[1]; // equal, for the comparisons
    dev_buffer dx(x), db(b), dy(24 * 4);
    for (const mode_case &mc : cases) {
        graph gr;
        auto tx = gr.tensor(1, CUDNN_DATA_FLOAT, {1, 2, 3, 4}), tb = gr.tensor(2, CUDNN_DATA_FLOAT, {1, 2, 1, 4});
        auto ty = gr.tensor(3, CUDNN_DATA_FLOAT, {1, 2, 3, 4});
        int64_t ws_bytes = 0;
        auto plan = gr.plan(h,
                            {gr.pointwise(mc.mode, tx, ty, mc.binary ? tb : nullptr, nullptr, -1, CUDNN_DATA_FLOAT,
                                          mc.alpha1, mc.alpha2)},
                            &ws_bytes);
        dev_buffer ws((size_t)ws_bytes);
        std::vector<int64_t> uids = {1, 3};
        std::vector<void *> ptrs = {dx.p, dy.p};
        if (mc.binary) uids.push_back(2), ptrs.push_back(db.p);
        EXPECT(cudnnBackendExecute(h, plan, gr.pack(uids, ptrs, ws.p)), CUDNN_STATUS_SUCCESS);
        std::vector<float> got = dy.download<float>();
        for (int c = 0; c < 2; c++)
            for (int r = 0; r < 3; r++)
                for (int l = 0; l < 4; l++) {
                    float xv = mc.alpha1 * x[(c * 3 + r) * 4 + l], bv = mc.alpha2 * b[c * 4 + l], ref;
                    switch (mc.mode) {
                    case CUDNN_POINTWISE_ADD: ref = xv + bv; break;
                    case CUDNN_POINTWISE_SUB: ref = xv - bv; break;
                    case CUDNN_POINTWISE_MUL: ref = xv * bv; break;
                    case CUDNN_POINTWISE_DIV: ref = xv / bv; break;
                    case CUDNN_POINTWISE_MAX: ref = fmaxf(xv, bv); break;
                    case CUDNN_POINTWISE_MIN: ref = fminf(xv, bv); break;
                    case CUDNN_POINTWISE_CMP_EQ: ref = xv == bv; break;
                    case CUDNN_POINTWISE_CMP_NEQ: ref = xv != bv; break;
                    case CUDNN_POINTWISE_CMP_GT: ref = xv > bv; break;
                    case CUDNN_POINTWISE_CMP_GE: ref = xv >= bv; break;
                    case CUDNN_POINTWISE_CMP_LT: ref = xv < bv; break;
                    case CUDNN_POINTWISE_CMP_LE: ref = xv <= bv; break;
                    case CUDNN_POINTWISE_EXP: ref = expf(xv); break;
                    case CUDNN_POINTWISE_LOG: ref = logf(xv); break;
                    case CUDNN_POINTWISE_NEG: ref = -xv; break;
                    default: ref = xv;
                    }
                    float v = got[(c * 3 + r) * 4 + l];
                    CHECK(close(v, ref, 0), "pointwise mode %d (alphas %g, %g) at [0,%d,%d,%d]: %.9g, expected %.9g",
                          (int)mc.mode, mc.alpha1, mc.alpha2, c, r, l, v, ref);
                }
    }
    // GEN_INDEX along dimension 1 into a non-virtual INT32 tensor.
    graph gr;
    auto tx = gr.tensor(1, CUDNN_DATA_FLOAT, {1, 2, 3, 4}), ti = gr.tensor(2, CUDNN_DATA_INT32, {1, 2, 3, 4});
    int64_t ws_bytes = 0;
    auto plan =
        gr.plan(h, {gr.pointwise(CUDNN_POINTWISE_GEN_INDEX, tx, ti, nullptr, nullptr, 1, CUDNN_DATA_INT32)}, &ws_bytes);
    dev_buffer ws((size_t)ws_bytes);
    EXPECT(cudnnBackendExecute(h, plan, gr.pack({1, 2}, {dx.p, dy.p}, ws.p)), CUDNN_STATUS_SUCCESS);
    std::vector<int32_t> index = dy.download<int32_t>();
    for (int i = 0; i < 24; i++)
        CHECK(index[i] == i / 12, "GEN_INDEX axis 1 at %d: %d", i, index[i]);
}

// ---- (e) error paths ----

static void test_attribute_errors(cudnnHandle_t h) {
    graph gr;
    cudnnBackendDescriptor_t t = gr.create(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    int32_t small = 1;
    int64_t uid = 5, two[2] = {1, 2}, nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    EXPECT_FAIL(
        cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT32, 1, &small),
        CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE,
        "CUDNN_ATTR_TENSOR_UNIQUE_ID of a CUDNN_BACKEND_TENSOR_DESCRIPTOR is CUDNN_TYPE_INT64, not CUDNN_TYPE_INT32");
    CHECK(CUDNN_STATUS_CATEGORY(CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE) == CUDNN_STATUS_BAD_PARAM, "status category");
    EXPECT_FAIL(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 2, two),
                CUDNN_STATUS_BAD_PARAM, "takes 1 to 1 elements, not 2");
    EXPECT_FAIL(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 9, nine),
                CUDNN_STATUS_BAD_PARAM, "CUDNN_ATTR_TENSOR_DIMENSIONS");
    EXPECT_FAIL(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, nullptr),
                CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "arrayOfElements is NULL");
    EXPECT_FAIL(cudnnBackendSetAttribute(t, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &small),
                CUDNN_STATUS_BAD_PARAM, "is not an attribute of a CUDNN_BACKEND_TENSOR_DESCRIPTOR");
    EXPECT_FAIL(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_VECTOR_COUNT, CUDNN_TYPE_INT64, 1, &uid),
                CUDNN_STATUS_NOT_SUPPORTED, "leaves out");
    cudnnDataType_t dbl = CUDNN_DATA_DOUBLE;
    EXPECT_FAIL(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dbl),
                CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE, "CUDNN_ATTR_TENSOR_DATA_TYPE");
    // Finalize with STRIDES missing, then with them: a failed finalize leaves it open.
    gr.set(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, uid);
    gr.set(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_FLOAT);
    gr.set(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, (int64_t)4);
    EXPECT(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 2, two), CUDNN_STATUS_SUCCESS);
    int64_t n = 0;
    EXPECT_FAIL(cudnnBackendGetAttribute(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &n, &uid),
                CUDNN_STATUS_NOT_INITIALIZED, "not finalized");
    EXPECT_FAIL(cudnnBackendFinalize(t), CUDNN_STATUS_BAD_PARAM,
                "a CUDNN_BACKEND_TENSOR_DESCRIPTOR needs CUDNN_ATTR_TENSOR_STRIDES, which is not set");
    EXPECT(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 1, two), CUDNN_STATUS_SUCCESS);
    EXPECT_FAIL(cudnnBackendFinalize(t), CUDNN_STATUS_BAD_PARAM, "2 dimensions but 1 strides");
    int64_t strides[2] = {2, 1};
    EXPECT(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 2, strides), CUDNN_STATUS_SUCCESS);
    EXPECT(cudnnBackendFinalize(t), CUDNN_STATUS_SUCCESS);
    EXPECT_FAIL(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid),
                CUDNN_STATUS_NOT_INITIALIZED, "is finalized");
    EXPECT_FAIL(cudnnBackendFinalize(t), CUDNN_STATUS_BAD_PARAM, "already finalized");
    int64_t read[8] = {0};
    EXPECT(cudnnBackendGetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 8, &n, read),
           CUDNN_STATUS_SUCCESS);
    CHECK(n == 2 && read[0] == 1 && read[1] == 2, "DIMENSIONS read back as %lld elements %lld %lld", (long long)n,
          (long long)read[0], (long long)read[1]);
    EXPECT(cudnnBackendGetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 1, &n, read),
           CUDNN_STATUS_SUCCESS);
    CHECK(n == 2, "a short read still counts every element: %lld", (long long)n);

    // Descriptor elements: of the right type, finalized.
    cudnnBackendDescriptor_t pw = gr.create(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    cudnnPointwiseMode_t cos = CUDNN_POINTWISE_COS;
    EXPECT_FAIL(cudnnBackendSetAttribute(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &cos),
                CUDNN_STATUS_NOT_SUPPORTED, "pointwise mode 12");
    cudnnBackendDescriptor_t op = gr.create(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    EXPECT_FAIL(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR,
                                         CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw),
                CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED, "is not finalized");
    EXPECT_FAIL(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR,
                                         CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t),
                CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE,
                "is a CUDNN_BACKEND_TENSOR_DESCRIPTOR, not CUDNN_BACKEND_POINTWISE_DESCRIPTOR");
    gr.set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, CUDNN_POINTWISE_GEN_INDEX);
    gr.set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_FLOAT);
    EXPECT_FAIL(cudnnBackendFinalize(pw), CUDNN_STATUS_BAD_PARAM, "GEN_INDEX needs CUDNN_ATTR_POINTWISE_AXIS");
    // A binary mode without its B.
    auto x = gr.tensor(1, CUDNN_DATA_FLOAT, {1, 2}), y = gr.tensor(2, CUDNN_DATA_FLOAT, {1, 2});
    cudnnBackendDescriptor_t add = gr.create(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    gr.set(add, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, CUDNN_POINTWISE_ADD);
    gr.set(add, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_FLOAT);
    gr.finalize(add);
    gr.set(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, add);
    gr.set(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, x);
    gr.set(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, y);
    EXPECT_FAIL(cudnnBackendFinalize(op), CUDNN_STATUS_BAD_PARAM, "BDESC is missing");
    // Shapes that do not multiply, and GEMM overrides.
    cudnnBackendDescriptor_t mm = gr.create(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    gr.set(mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_FLOAT);
    gr.finalize(mm);
    cudnnBackendDescriptor_t mop = gr.create(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    auto a = gr.tensor(3, CUDNN_DATA_FLOAT, {1, 2, 3}), b = gr.tensor(4, CUDNN_DATA_FLOAT, {1, 4, 5}),
         c = gr.tensor(5, CUDNN_DATA_FLOAT, {1, 2, 5});
    gr.set(mop, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, a);
    gr.set(mop, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, b);
    gr.set(mop, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, c);
    gr.set(mop, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, mm);
    EXPECT_FAIL(
        cudnnBackendSetAttribute(mop, CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                 1, &a),
        CUDNN_STATUS_NOT_SUPPORTED,
        "attribute 1525 of a CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR is an attribute the emulation leaves out");
    EXPECT_FAIL(cudnnBackendFinalize(mop), CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH, "does not make C");
    // The engine of another global index, and reading back an engine configuration's
    // engine into a descriptor created for it.
    cudnnBackendDescriptor_t engine = gr.create(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    cudnnBackendDescriptor_t g = gr.op_graph(h, {gr.pointwise(CUDNN_POINTWISE_NEG, x, y)});
    gr.finalize(g);
    gr.set(engine, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, g);
    gr.set(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, (int64_t)1);
    EXPECT_FAIL(cudnnBackendFinalize(engine), CUDNN_STATUS_BAD_PARAM_OUT_OF_BOUND, "global index 1");
    gr.set(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, (int64_t)0);
    gr.finalize(engine);
    cudnnBackendDescriptor_t config = gr.create(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    gr.set(config, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, engine);
    EXPECT(
        cudnnBackendSetAttribute(config, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, nullptr),
        CUDNN_STATUS_SUCCESS);
    gr.finalize(config);
    cudnnBackendDescriptor_t back = gr.create(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    EXPECT_FAIL(cudnnBackendGetAttribute(config, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &t),
                CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE, "a CUDNN_BACKEND_ENGINE_DESCRIPTOR to fill");
    EXPECT(cudnnBackendGetAttribute(config, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &back),
           CUDNN_STATUS_SUCCESS);
    int64_t index = -1;
    EXPECT(cudnnBackendGetAttribute(back, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, &index),
           CUDNN_STATUS_SUCCESS);
    CHECK(n == 1 && index == 0, "the engine read back has global index %lld", (long long)index);
    EXPECT_FAIL(cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT, CUDNN_TYPE_INT64, 1, &uid),
                CUDNN_STATUS_NOT_INITIALIZED, "is finalized");

    // Descriptors that are not (any more).
    cudnnBackendDescriptor_t gone = nullptr;
    EXPECT(cudnnBackendCreateDescriptor(CUDNN_BACKEND_TENSOR_DESCRIPTOR, &gone), CUDNN_STATUS_SUCCESS);
    EXPECT(cudnnBackendDestroyDescriptor(gone), CUDNN_STATUS_SUCCESS);
    EXPECT_FAIL(cudnnBackendFinalize(gone), CUDNN_STATUS_BAD_PARAM, "not a live backend descriptor");
    EXPECT_FAIL(cudnnBackendDestroyDescriptor(gone), CUDNN_STATUS_BAD_PARAM, "not a live backend descriptor");
    EXPECT_FAIL(cudnnBackendCreateDescriptor(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, &gone), CUDNN_STATUS_NOT_SUPPORTED,
                "CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR");
    // Booleans live in virtual tensors only.
    cudnnBackendDescriptor_t flags = gr.create(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    gr.set(flags, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, uid);
    gr.set(flags, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_BOOLEAN);
    gr.set(flags, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, (int64_t)16);
    EXPECT(cudnnBackendSetAttribute(flags, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 2, two),
           CUDNN_STATUS_SUCCESS);
    EXPECT(cudnnBackendSetAttribute(flags, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 2, strides),
           CUDNN_STATUS_SUCCESS);
    EXPECT_FAIL(cudnnBackendFinalize(flags), CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE, "non-virtual BOOLEAN");
}

static void test_graph_errors(cudnnHandle_t h) {
    {
        graph gr; // one UID, two tensors
        auto x = gr.tensor(1, CUDNN_DATA_FLOAT, {1, 4}), y = gr.tensor(2, CUDNN_DATA_FLOAT, {1, 4});
        auto x2 = gr.tensor(1, CUDNN_DATA_FLOAT, {1, 8}), y2 = gr.tensor(3, CUDNN_DATA_FLOAT, {1, 8});
        auto g = gr.op_graph(h, {gr.pointwise(CUDNN_POINTWISE_NEG, x, y), gr.pointwise(CUDNN_POINTWISE_NEG, x2, y2)});
        EXPECT_FAIL(cudnnBackendFinalize(g), CUDNN_STATUS_BAD_PARAM_DUPLICATED_ENTRIES, "UID 1 names two different");
    }
    {
        graph gr; // a virtual tensor nobody writes
        auto v = gr.virt(1, CUDNN_DATA_FLOAT, {1, 4}), y = gr.tensor(2, CUDNN_DATA_FLOAT, {1, 4});
        auto g = gr.op_graph(h, {gr.pointwise(CUDNN_POINTWISE_NEG, v, y)});
        EXPECT_FAIL(cudnnBackendFinalize(g), CUDNN_STATUS_BAD_PARAM, "virtual tensor UID 1 is read by");
    }
    {
        graph gr; // a tensor written twice
        auto x = gr.tensor(1, CUDNN_DATA_FLOAT, {1, 4}), y = gr.tensor(2, CUDNN_DATA_FLOAT, {1, 4});
        auto g = gr.op_graph(h, {gr.pointwise(CUDNN_POINTWISE_NEG, x, y), gr.pointwise(CUDNN_POINTWISE_EXP, x, y)});
        EXPECT_FAIL(cudnnBackendFinalize(g), CUDNN_STATUS_BAD_PARAM, "tensor UID 2 is written by two operations");
    }
    {
        graph gr; // v1 = x + v2, v2 = -v1
        auto x = gr.tensor(1, CUDNN_DATA_FLOAT, {1, 4});
        auto v1 = gr.virt(2, CUDNN_DATA_FLOAT, {1, 4}), v2 = gr.virt(3, CUDNN_DATA_FLOAT, {1, 4});
        auto g =
            gr.op_graph(h, {gr.pointwise(CUDNN_POINTWISE_ADD, x, v1, v2), gr.pointwise(CUDNN_POINTWISE_NEG, v1, v2)});
        EXPECT_FAIL(cudnnBackendFinalize(g), CUDNN_STATUS_BAD_PARAM, "cycle");
    }
    {
        graph gr; // writing a by-value tensor
        auto x = gr.tensor(1, CUDNN_DATA_FLOAT, {1, 1, 1, 1});
        cudnnBackendDescriptor_t pw = gr.create(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
        gr.set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, CUDNN_POINTWISE_NEG);
        gr.set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_FLOAT);
        gr.finalize(pw);
        cudnnBackendDescriptor_t op = gr.create(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
        gr.set(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, pw);
        gr.set(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, x);
        gr.set(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, gr.scalar(2));
        EXPECT_FAIL(cudnnBackendFinalize(op), CUDNN_STATUS_BAD_PARAM, "is by value");
    }
    {
        graph gr; // an output whose strides put two elements in one place
        auto x = gr.tensor(1, CUDNN_DATA_FLOAT, {1, 2, 3}), y = gr.tensor(2, CUDNN_DATA_FLOAT, {1, 2, 3}, {6, 1, 1});
        cudnnBackendDescriptor_t pw = gr.create(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
        gr.set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, CUDNN_POINTWISE_NEG);
        gr.set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, CUDNN_DATA_FLOAT);
        gr.finalize(pw);
        cudnnBackendDescriptor_t op = gr.create(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
        gr.set(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, pw);
        gr.set(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, x);
        gr.set(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, y);
        EXPECT_FAIL(cudnnBackendFinalize(op), CUDNN_STATUS_BAD_PARAM, "put two elements in one place");
    }
    {
        graph gr; // a reshape that is not a view of X's elements
        auto x = gr.tensor(1, CUDNN_DATA_FLOAT, {1, 2, 3}), y = gr.tensor(2, CUDNN_DATA_FLOAT, {1, 3, 2}, {6, 1, 1});
        cudnnBackendDescriptor_t op = gr.create(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
        gr.set(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, x);
        gr.set(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, y);
        EXPECT_FAIL(cudnnBackendFinalize(op), CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH, "one for one");
    }
    {
        graph gr; // variant packs
        cudnnBackendDescriptor_t v = gr.create(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
        int64_t uids[2] = {4, 4};
        void *ptrs[2] = {nullptr, nullptr};
        EXPECT(cudnnBackendSetAttribute(v, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 2, uids),
               CUDNN_STATUS_SUCCESS);
        EXPECT(cudnnBackendSetAttribute(v, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 1, ptrs),
               CUDNN_STATUS_SUCCESS);
        EXPECT_FAIL(cudnnBackendFinalize(v), CUDNN_STATUS_BAD_PARAM, "2 unique IDs but 1 data pointers");
        EXPECT(cudnnBackendSetAttribute(v, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 2, ptrs),
               CUDNN_STATUS_SUCCESS);
        EXPECT_FAIL(cudnnBackendFinalize(v), CUDNN_STATUS_BAD_PARAM_DUPLICATED_ENTRIES, "UID 4 appears twice");
    }
}

// Execute's checks of the variant pack, on y = x * scale over [1, 4, 8] FLOAT (two
// operations: workspace 512 bytes).
static void test_execute_errors(cudnnHandle_t h) {
    graph gr;
    auto x = gr.tensor(1, CUDNN_DATA_FLOAT, {1, 4, 8}), y = gr.tensor(2, CUDNN_DATA_FLOAT, {1, 4, 8});
    auto v = gr.virt(3, CUDNN_DATA_FLOAT, {1, 4, 8});
    auto scale = gr.tensor(4, CUDNN_DATA_FLOAT, {1, 1, 1}, {}, false, true);
    int64_t ws_bytes = 0;
    auto plan = gr.plan(
        h, {gr.pointwise(CUDNN_POINTWISE_MUL, x, v, scale), gr.pointwise(CUDNN_POINTWISE_IDENTITY, v, y)}, &ws_bytes);
    CHECK(ws_bytes == 512, "workspace %lld", (long long)ws_bytes);
    dev_buffer dx(std::vector<float>(32, 1.5f)), dy(32 * 4), small(31 * 4), ws(512), big(32 * 4 + 512);
    std::vector<float> host(32);
    float s = 2.0f;
    EXPECT_FAIL(cudnnBackendExecute(h, plan, gr.pack({1, 4}, {dx.p, &s}, ws.p)), CUDNN_STATUS_BAD_PARAM,
                "tensor UID 2 ([1,4,8] strides [32,8,1] FLOAT) of the graph has no pointer");
    EXPECT_FAIL(cudnnBackendExecute(h, plan, gr.pack({1, 2, 4}, {dx.p, nullptr, &s}, ws.p)),
                CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "tensor UID 2: the variant pack's pointer is NULL");
    EXPECT_FAIL(cudnnBackendExecute(h, plan, gr.pack({1, 2, 4}, {dx.p, host.data(), &s}, ws.p)), CUDNN_STATUS_BAD_PARAM,
                "is not 128 bytes ([1,4,8] strides [32,8,1] FLOAT) inside one allocation");
    EXPECT_FAIL(cudnnBackendExecute(h, plan, gr.pack({1, 2, 4}, {dx.p, small.p, &s}, ws.p)), CUDNN_STATUS_BAD_PARAM,
                "tensor UID 2");
    EXPECT_FAIL(cudnnBackendExecute(h, plan, gr.pack({1, 2, 4}, {dx.p, (char *)dy.p + 4, &s}, ws.p)),
                CUDNN_STATUS_BAD_PARAM, "tensor UID 2");
    EXPECT_FAIL(cudnnBackendExecute(h, plan, gr.pack({1, 2, 4}, {(char *)big.p + 4, dy.p, &s}, ws.p)),
                CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER, "byte alignment 16");
    EXPECT_FAIL(cudnnBackendExecute(h, plan, gr.pack({1, 2, 4}, {dx.p, dy.p, ws.p}, ws.p)), CUDNN_STATUS_BAD_PARAM,
                "by-value tensor UID 4");
    EXPECT_FAIL(cudnnBackendExecute(h, plan, gr.pack({1, 2, 4}, {dx.p, dy.p, &s}, small.p)),
                CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT, "is not 512 bytes");
    EXPECT_FAIL(cudnnBackendExecute(h, plan, gr.pack({1, 2, 4}, {dx.p, dy.p, &s}, nullptr)),
                CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT, "is not 512 bytes");
    EXPECT_FAIL(cudnnBackendExecute(h, plan, gr.pack({1, 2, 4}, {dx.p, big.p, &s}, (char *)big.p + 64)),
                CUDNN_STATUS_BAD_PARAM, "overlaps tensor UID 2");
    cudnnBackendDescriptor_t open = gr.create(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    EXPECT_FAIL(cudnnBackendExecute(h, plan, open), CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED, "the variant pack not");
    EXPECT_FAIL(cudnnBackendExecute(h, open, open), CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE, "not an execution plan");
    // And then right: y = 1.5 * 2, the extra UID in the pack ignored.
    EXPECT(cudnnBackendExecute(h, plan, gr.pack({1, 2, 4, 99}, {dx.p, dy.p, &s, host.data()}, ws.p)),
           CUDNN_STATUS_SUCCESS);
    std::vector<float> got = dy.download<float>();
    for (float g : got)
        CHECK(g == 3.0f, "y = %g, expected 3", g);
}

// The hook: without CUDA_EMU_CUDNN=1 there is no cuDNN.
static void test_hook() {
    cudnnHandle_t h = nullptr;
    unsetenv("CUDA_EMU_CUDNN");
    EXPECT_FAIL(cudnnCreate(&h), CUDNN_STATUS_NOT_INITIALIZED, "the emulated cuDNN is off");
    CHECK(last_text().find("CUDA_EMU_CUDNN=1") != std::string::npos, "the text says how to turn it on: %s",
          last_text().c_str());
    setenv("CUDA_EMU_CUDNN", "0", 1);
    EXPECT(cudnnCreate(&h), CUDNN_STATUS_NOT_INITIALIZED);
    setenv("CUDA_EMU_CUDNN", "1", 1);
    EXPECT(cudnnCreate(&h), CUDNN_STATUS_SUCCESS);
    EXPECT(cudnnDestroy(h), CUDNN_STATUS_SUCCESS);
    EXPECT_FAIL(cudnnDestroy(h), CUDNN_STATUS_BAD_PARAM, "not a live cudnnHandle_t");
    CHECK(cudnnGetVersion() == 91900 && CUDNN_VERSION == 91900, "version %zu", cudnnGetVersion());
    CHECK(strcmp(cudnnGetErrorString(CUDNN_STATUS_BAD_PARAM_NULL_POINTER), "CUDNN_STATUS_BAD_PARAM_NULL_POINTER") == 0,
          "status name");
    char tiny[4];
    cudnnGetLastErrorString(tiny, sizeof tiny);
    CHECK(strlen(tiny) == 3, "cudnnGetLastErrorString truncates to its buffer");
    unsetenv("CUDA_EMU_CUDNN");
    CHECK(cudnnGetVersion() == 0 && last_text().find("CUDA_EMU_CUDNN=1") != std::string::npos,
          "off, the version is 0 with the reason (as zinf's loader gives it): %s", last_text().c_str());
    setenv("CUDA_EMU_CUDNN", "1", 1);
}

// CUDA_EMU_CUDNN_NO_ENGINE=1: the heuristics find no engine for a graph that has one.
static void test_no_engine_hook(cudnnHandle_t h) {
    graph gr;
    auto x = gr.tensor(1, CUDNN_DATA_FLOAT, {1, 1, 4}), y = gr.tensor(2, CUDNN_DATA_FLOAT, {1, 1, 4});
    cudnnBackendDescriptor_t g = gr.op_graph(h, {gr.pointwise(CUDNN_POINTWISE_NEG, x, y)});
    gr.finalize(g);
    for (int hook = 0; hook <= 1; hook++) {
        if (hook) setenv("CUDA_EMU_CUDNN_NO_ENGINE", "1", 1);
        cudnnBackendDescriptor_t heur = gr.create(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
        gr.set(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, g);
        gr.set(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, CUDNN_HEUR_MODE_A);
        gr.finalize(heur);
        int64_t n = -1;
        EXPECT(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &n,
                                        nullptr),
               CUDNN_STATUS_SUCCESS);
        CHECK(n == 1 - hook, "with the no-engine hook %s the heuristic has %lld results", hook ? "on" : "off",
              (long long)n);
    }
    unsetenv("CUDA_EMU_CUDNN_NO_ENGINE");
}

// ---- (f) stream order ----

static std::atomic<int> gate{0};
static void wait_gate(void *) {
    while (!gate.load())
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

// The SDPA forward enqueued behind a gated host function and the upload of its inputs
// on the same stream: it must see the uploaded inputs (the device buffers hold NaN
// before) and the scale as it was at cudnnBackendExecute, changed right after.
static void test_stream_order(cudnnHandle_t h) {
    cudaStream_t st;
    CHECK(cudaStreamCreate(&st) == cudaSuccess, "cudaStreamCreate");
    EXPECT(cudnnSetStream(h, st), CUDNN_STATUS_SUCCESS);
    cudaStream_t back = nullptr;
    EXPECT(cudnnGetStream(h, &back), CUDNN_STATUS_SUCCESS);
    CHECK(back == st, "cudnnGetStream");
    sdpa graph_of(h);
    sdpa::data d(71);
    std::vector<__nv_bfloat16> q = to_bf16(d.q);
    CHECK(cudaHostRegister(q.data(), q.size() * 2, cudaHostRegisterDefault) == cudaSuccess, "cudaHostRegister");
    CHECK(cudaMemset(d.dq.p, 0xff, d.dq.bytes) == cudaSuccess, "cudaMemset");
    dev_buffer ws((size_t)graph_of.ws_bytes);
    gate = 0;
    CHECK(cudaLaunchHostFunc(st, wait_gate, nullptr) == cudaSuccess, "cudaLaunchHostFunc");
    CHECK(cudaMemcpyAsync(d.dq.p, q.data(), d.dq.bytes, cudaMemcpyHostToDevice, st) == cudaSuccess, "upload");
    float scale = 0.5f, neg_inf = -INFINITY;
    EXPECT(graph_of.execute(h, d, &scale, &neg_inf, ws.p), CUDNN_STATUS_SUCCESS);
    scale = 100.0f;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    gate = 1;
    CHECK(cudaStreamSynchronize(st) == cudaSuccess, "stream");
    sdpa::check("SDPA forward behind slow work", d, 0.5f);
    CHECK(cudaHostUnregister(q.data()) == cudaSuccess, "cudaHostUnregister");
    EXPECT(cudnnSetStream(h, nullptr), CUDNN_STATUS_SUCCESS);
    cudaStreamDestroy(st);
}

// A handle of device 1 with a stream of device 2 is refused.
static void test_stream_mismatch() {
    int n = 0;
    cudaGetDeviceCount(&n);
    if (n < 2) {
        printf("test_cudnn: %d device: stream mismatch not checked\n", n);
        return;
    }
    CHECK(cudaSetDevice(1) == cudaSuccess, "cudaSetDevice");
    cudaStream_t st;
    CHECK(cudaStreamCreate(&st) == cudaSuccess, "cudaStreamCreate");
    CHECK(cudaSetDevice(0) == cudaSuccess, "cudaSetDevice");
    cudnnHandle_t h;
    EXPECT(cudnnCreate(&h), CUDNN_STATUS_SUCCESS);
    {
        graph gr;
        auto x = gr.tensor(1, CUDNN_DATA_FLOAT, {1, 8}), y = gr.tensor(2, CUDNN_DATA_FLOAT, {1, 8});
        int64_t ws_bytes = 0;
        auto plan = gr.plan(h, {gr.pointwise(CUDNN_POINTWISE_NEG, x, y)}, &ws_bytes);
        dev_buffer dx(32), dy(32), ws((size_t)ws_bytes);
        EXPECT(cudnnSetStream(h, st), CUDNN_STATUS_SUCCESS);
        EXPECT_FAIL(cudnnBackendExecute(h, plan, gr.pack({1, 2}, {dx.p, dy.p}, ws.p)),
                    CUDNN_STATUS_BAD_PARAM_STREAM_MISMATCH, "the handle's stream is device 1's, the handle device 0's");
    }
    cudnnDestroy(h);
    cudaStreamDestroy(st);
}

int main() {
    setenv("CUDA_EMU_DEVICES", "2", 0); // the stream mismatch wants two; a setting already made wins
    test_hook();
    cudnnHandle_t h = nullptr;
    EXPECT(cudnnCreate(&h), CUDNN_STATUS_SUCCESS);
    test_matmul(h);
    test_sdpa_forward(h);
    test_reshape_transpose(h);
    test_grouped_reduction(h);
    test_reduction_operators(h);
    test_pointwise_modes(h);
    test_attribute_errors(h);
    test_graph_errors(h);
    test_execute_errors(h);
    test_stream_order(h);
    test_no_engine_hook(h);
    cudnnDestroy(h);
    test_stream_mismatch();
    if (failures) {
        fprintf(stderr, "test_cudnn: %d failures\n", failures.load());
        return 1;
    }
    printf("test_cudnn: all passed\n");
    return 0;
}
