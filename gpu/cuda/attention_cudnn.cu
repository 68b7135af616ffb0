// cuDNN's fused flash attention for the CUDA backend (device.attention "cudnn", or
// "auto" wherever cuDNN loads and an engine takes the shape: on an H100 it ran GPT-2's
// attention 2.6 to 3.8 times as fast as zinf's kernels; see docs/performance.md): the graphs cudnn-frontend's composite
// SDPA nodes build for a causal mask with an optional left bound (Mistral's window), written against cuDNN's backend
// API (cudnn_graph.h) so that zinf needs no C++ frontend and loads the library only at run time (cudnn_load.c). cuDNN
// recognizes these graphs and runs them as one fused kernel each way; the op sequence, the tensors' types and the
// layouts follow the frontend's (include/cudnn_frontend/node/
// scaled_dot_product_flash_attention.h, softmax.h, diagonal_band_mask.h), since that
// is what its engines are written to match. The backward is the frontend's
// deterministic form (dQ straight from dS K, no fp32 accumulation buffer with atomic
// adds): runs repeat bit for bit, as the rest of zinf does.
//
// The forward's stats are the scaled scores' log-sum-exp per query row, zinf's lse
// (B, NH, T): each backward runs from either forward. Plans are built once per shape
// and device and kept until it closes; one handle serves the device under a lock,
// which each execution holds only to enqueue.
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cudnn_graph.h>

#include "cuda_backend.h"

// ---- a graph's descriptors ----

// Every descriptor of one graph and its plan, destroyed together: the plan refers to
// its engine configuration, which refers to the operation graph and its tensors.
#define GRAPH_MAX_DESCRIPTORS 192
#define GRAPH_MAX_OPS         48
// Engine configurations tried from the heuristics' list, best first.
#define GRAPH_MAX_ENGINES 8

typedef struct graph {
    cudnnBackendDescriptor_t descriptors[GRAPH_MAX_DESCRIPTORS];
    int n_descriptors;
    cudnnBackendDescriptor_t ops[GRAPH_MAX_OPS];
    int n_ops;
    int64_t next_virtual_uid;
    cudnnStatus_t status; // the first failure; every call after it does nothing
    char error[320];      // what failed, with cuDNN's own reason
} graph;

// The tensors the caller binds at each execution; virtual ones are numbered after.
enum {
    UID_Q = 1,
    UID_K,
    UID_V,
    UID_O,
    UID_STATS,
    UID_DO,
    UID_DQ,
    UID_DK,
    UID_DV,
    UID_SOFTMAX_SUM, // the backward's rowsum(dO * O), in the workspace after cuDNN's own
    UID_SCALE,       // by value: hd^-0.5
    UID_NEG_INF,     // by value: what a masked score becomes
    UID_WINDOW,      // by value: the left bound, as a float
    UID_ONE,         // by value: the backward's dropout scale, 1 without dropout
    UID_FIRST_VIRTUAL = 100
};

static void graph_failed(graph *g, cudnnStatus_t st, const char *what) {
    if (g->status != CUDNN_STATUS_SUCCESS) return;
    char reason[256];
    cudnnGetLastErrorString(reason, sizeof reason);
    g->status = st;
    snprintf(g->error, sizeof g->error, "%s: %s%s%s", what, cudnnGetErrorString(st), reason[0] ? ": " : "", reason);
}

static cudnnBackendDescriptor_t create(graph *g, cudnnBackendDescriptorType_t type, const char *what) {
    cudnnBackendDescriptor_t d = NULL;
    if (g->status != CUDNN_STATUS_SUCCESS) return NULL;
    if (g->n_descriptors == GRAPH_MAX_DESCRIPTORS) {
        g->status = CUDNN_STATUS_INTERNAL_ERROR;
        snprintf(g->error, sizeof g->error, "%s: more than %d descriptors", what, GRAPH_MAX_DESCRIPTORS);
        return NULL;
    }
    cudnnStatus_t st = cudnnBackendCreateDescriptor(type, &d);
    if (st != CUDNN_STATUS_SUCCESS) {
        graph_failed(g, st, what);
        return NULL;
    }
    g->descriptors[g->n_descriptors++] = d;
    return d;
}

static void set(graph *g, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                cudnnBackendAttributeType_t type, int64_t count, const void *elements, const char *what) {
    if (g->status != CUDNN_STATUS_SUCCESS) return;
    cudnnStatus_t st = cudnnBackendSetAttribute(d, name, type, count, elements);
    if (st != CUDNN_STATUS_SUCCESS) graph_failed(g, st, what);
}

static void finalize(graph *g, cudnnBackendDescriptor_t d, const char *what) {
    if (g->status != CUDNN_STATUS_SUCCESS) return;
    cudnnStatus_t st = cudnnBackendFinalize(d);
    if (st != CUDNN_STATUS_SUCCESS) graph_failed(g, st, what);
}

static void set_desc(graph *g, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                     cudnnBackendDescriptor_t value, const char *what) {
    set(g, d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &value, what);
}

static void add_op(graph *g, cudnnBackendDescriptor_t op, const char *what) {
    finalize(g, op, what);
    if (g->status != CUDNN_STATUS_SUCCESS) return;
    if (g->n_ops == GRAPH_MAX_OPS) {
        g->status = CUDNN_STATUS_INTERNAL_ERROR;
        snprintf(g->error, sizeof g->error, "%s: more than %d operations", what, GRAPH_MAX_OPS);
        return;
    }
    g->ops[g->n_ops++] = op;
}

// ---- tensors ----

// Four dimensions, as every tensor of these graphs has: (batch, head, row, column).
typedef struct layout {
    int64_t dims[4], strides[4];
} layout;

static cudnnBackendDescriptor_t tensor(graph *g, int64_t uid, cudnnDataType_t type, layout l, bool is_virtual,
                                       bool by_value) {
    cudnnBackendDescriptor_t t = create(g, CUDNN_BACKEND_TENSOR_DESCRIPTOR, "tensor");
    int64_t alignment = 16;
    set(g, t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, "tensor id");
    set(g, t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type, "tensor type");
    set(g, t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, l.dims, "tensor dimensions");
    set(g, t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, l.strides, "tensor strides");
    set(g, t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment, "tensor alignment");
    set(g, t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual, "tensor virtual");
    if (by_value) set(g, t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value, "tensor by value");
    finalize(g, t, "tensor");
    return t;
}

// An intermediate: cuDNN keeps it inside the fused kernel.
static cudnnBackendDescriptor_t virt(graph *g, cudnnDataType_t type, layout l) {
    return tensor(g, g->next_virtual_uid++, type, l, true, false);
}

static cudnnBackendDescriptor_t scalar(graph *g, int64_t uid) {
    layout one = {{1, 1, 1, 1}, {1, 1, 1, 1}};
    return tensor(g, uid, CUDNN_DATA_FLOAT, one, false, true);
}

// ---- operations ----

// y = mode(x, b, t) in math of type prec; b and t NULL where the mode takes fewer.
// axis: GEN_INDEX's dimension, else ignored.
static void pointwise(graph *g, cudnnPointwiseMode_t mode, cudnnDataType_t prec, cudnnBackendDescriptor_t x,
                      cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t t, cudnnBackendDescriptor_t y,
                      int64_t axis) {
    cudnnBackendDescriptor_t pw = create(g, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "pointwise");
    set(g, pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, "pointwise mode");
    set(g, pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec, "pointwise precision");
    if (mode == CUDNN_POINTWISE_GEN_INDEX) set(g, pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, "axis");
    finalize(g, pw, "pointwise");
    cudnnBackendDescriptor_t op = create(g, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "pointwise operation");
    set_desc(g, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw, "pointwise operation");
    set_desc(g, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x, "pointwise x");
    if (b) set_desc(g, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b, "pointwise b");
    if (t) set_desc(g, op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t, "pointwise t");
    set_desc(g, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y, "pointwise y");
    add_op(g, op, "pointwise operation");
}

// y = mode(x, b) for the float modes of the graphs.
static cudnnBackendDescriptor_t binary(graph *g, cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x,
                                       cudnnBackendDescriptor_t b, layout l) {
    cudnnBackendDescriptor_t y = virt(g, CUDNN_DATA_FLOAT, l);
    pointwise(g, mode, CUDNN_DATA_FLOAT, x, b, NULL, y, 0);
    return y;
}

// c = a b over the last two dimensions, in fp32.
static void matmul(graph *g, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t c) {
    cudnnBackendDescriptor_t mm = create(g, CUDNN_BACKEND_MATMUL_DESCRIPTOR, "matmul");
    cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    set(g, mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32, "matmul type");
    finalize(g, mm, "matmul");
    cudnnBackendDescriptor_t op = create(g, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, "matmul operation");
    set_desc(g, op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, a, "matmul a");
    set_desc(g, op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, b, "matmul b");
    set_desc(g, op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, c, "matmul c");
    set_desc(g, op, CUDNN_ATTR_OPERATION_MATMUL_DESC, mm, "matmul operation");
    add_op(g, op, "matmul operation");
}

// y = x reduced over the dimensions where y has 1 (and over groups of heads, where
// y's head dimension divides x's).
static void reduction(graph *g, cudnnReduceTensorOp_t mode, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    cudnnBackendDescriptor_t r = create(g, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, "reduction");
    cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
    set(g, r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f32, "reduction type");
    set(g, r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode, "reduction operator");
    finalize(g, r, "reduction");
    cudnnBackendDescriptor_t op = create(g, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, "reduction operation");
    set_desc(g, op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x, "reduction x");
    set_desc(g, op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y, "reduction y");
    set_desc(g, op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, r, "reduction operation");
    add_op(g, op, "reduction operation");
}

// y: the elements of x seen through another layout (the transposes of the backward).
static void reshape(graph *g, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    cudnnBackendDescriptor_t op = create(g, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, "reshape operation");
    set_desc(g, op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x, "reshape x");
    set_desc(g, op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y, "reshape y");
    add_op(g, op, "reshape operation");
}

// ---- the attention graphs ----

typedef struct shape {
    bool backward;
    zinf_dtype dt;
    int B, T, NH, NKV, hd, window; // window < T, else 0
} shape;

typedef struct layouts {
    layout q, kt, k, v, vt, o, stats, scores, scores_t, head_rows, row_products;
} layouts;

static layouts layouts_of(const shape *s) {
    int64_t b = s->B, hq = s->NH, hk = s->NKV, t = s->T, d = s->hd;
    int64_t w = (hq + 2 * hk) * d, c = hq * d; // a token's qkv and out widths
    layouts l = {
        .q = {{b, hq, t, d}, {t * w, d, w, 1}},
        .kt = {{b, hk, d, t}, {t * w, d, 1, w}},
        .k = {{b, hk, t, d}, {t * w, d, w, 1}},
        .v = {{b, hk, t, d}, {t * w, d, w, 1}},
        .vt = {{b, hk, d, t}, {t * w, d, 1, w}},
        .o = {{b, hq, t, d}, {t * c, d, c, 1}},
        .stats = {{b, hq, t, 1}, {hq * t, t, 1, 1}},
        .scores = {{b, hq, t, t}, {hq * t * t, t * t, t, 1}},
        .scores_t = {{b, hq, t, t}, {hq * t * t, t * t, 1, t}},
        .head_rows = {{b, hq, t, d}, {hq * t * d, t * d, d, 1}},
        // The backward's dO * O before its row sums, laid out as O is. (The frontend
        // gives it strides {hq t d, t d, hq d, 1}, under which rows of different heads
        // share places: harmless where the fused kernel never stores it, wrong wherever
        // it is stored, as the emulation stores it.)
        .row_products = {{b, hq, t, d}, {hq * t * d, d, hq * d, 1}},
    };
    return l;
}

// The causal mask (a query sees the keys at or before it), then the left bound where
// there is a window: scores outside become -inf. The frontend's diagonal band masks:
// row >= column, then column + window > row.
static cudnnBackendDescriptor_t mask(graph *g, const shape *s, const layouts *l, cudnnBackendDescriptor_t x,
                                     cudnnBackendDescriptor_t neg_inf, cudnnBackendDescriptor_t window) {
    cudnnBackendDescriptor_t row = virt(g, CUDNN_DATA_INT32, l->scores), col = virt(g, CUDNN_DATA_INT32, l->scores);
    pointwise(g, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, x, NULL, NULL, row, 2);
    pointwise(g, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, x, NULL, NULL, col, 3);
    cudnnBackendDescriptor_t keep = virt(g, CUDNN_DATA_BOOLEAN, l->scores);
    pointwise(g, CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, row, col, NULL, keep, 0);
    cudnnBackendDescriptor_t y = virt(g, CUDNN_DATA_FLOAT, l->scores);
    pointwise(g, CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, x, neg_inf, keep, y, 0);
    if (!s->window) return y;
    row = virt(g, CUDNN_DATA_INT32, l->scores), col = virt(g, CUDNN_DATA_INT32, l->scores);
    pointwise(g, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, y, NULL, NULL, row, 2);
    pointwise(g, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, y, NULL, NULL, col, 3);
    cudnnBackendDescriptor_t shifted = binary(g, CUDNN_POINTWISE_ADD, col, window, l->scores);
    keep = virt(g, CUDNN_DATA_BOOLEAN, l->scores);
    pointwise(g, CUDNN_POINTWISE_CMP_GT, CUDNN_DATA_BOOLEAN, shifted, row, NULL, keep, 0);
    cudnnBackendDescriptor_t z = virt(g, CUDNN_DATA_FLOAT, l->scores);
    pointwise(g, CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, y, neg_inf, keep, z, 0);
    return z;
}

static cudnnDataType_t io_type(zinf_dtype dt) { return dt == ZINF_DTYPE_F16 ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16; }

// S = scale Q K^T, masked; P = softmax(S) in the input type; O = P V; stats =
// max + log(sum exp(S - max)) per row.
static void forward_graph(graph *g, const shape *s) {
    layouts l = layouts_of(s);
    cudnnDataType_t io = io_type(s->dt);
    cudnnBackendDescriptor_t q = tensor(g, UID_Q, io, l.q, false, false), kt = tensor(g, UID_K, io, l.kt, false, false),
                             v = tensor(g, UID_V, io, l.v, false, false), o = tensor(g, UID_O, io, l.o, false, false),
                             stats = tensor(g, UID_STATS, CUDNN_DATA_FLOAT, l.stats, false, false),
                             scale = scalar(g, UID_SCALE), neg_inf = scalar(g, UID_NEG_INF),
                             window = s->window ? scalar(g, UID_WINDOW) : NULL;
    cudnnBackendDescriptor_t scores = virt(g, CUDNN_DATA_FLOAT, l.scores);
    matmul(g, q, kt, scores);
    cudnnBackendDescriptor_t scaled = binary(g, CUDNN_POINTWISE_MUL, scores, scale, l.scores);
    cudnnBackendDescriptor_t masked = mask(g, s, &l, scaled, neg_inf, window);
    cudnnBackendDescriptor_t max = virt(g, CUDNN_DATA_FLOAT, l.stats);
    reduction(g, CUDNN_REDUCE_TENSOR_MAX, masked, max);
    cudnnBackendDescriptor_t shifted = binary(g, CUDNN_POINTWISE_SUB, masked, max, l.scores);
    cudnnBackendDescriptor_t exps = virt(g, CUDNN_DATA_FLOAT, l.scores);
    pointwise(g, CUDNN_POINTWISE_EXP, CUDNN_DATA_FLOAT, shifted, NULL, NULL, exps, 0);
    cudnnBackendDescriptor_t sum = virt(g, CUDNN_DATA_FLOAT, l.stats);
    reduction(g, CUDNN_REDUCE_TENSOR_ADD, exps, sum);
    cudnnBackendDescriptor_t log_sum = virt(g, CUDNN_DATA_FLOAT, l.stats);
    pointwise(g, CUDNN_POINTWISE_LOG, CUDNN_DATA_FLOAT, sum, NULL, NULL, log_sum, 0);
    pointwise(g, CUDNN_POINTWISE_ADD, CUDNN_DATA_FLOAT, max, log_sum, NULL, stats, 0);
    cudnnBackendDescriptor_t p = virt(g, io, l.scores);
    pointwise(g, CUDNN_POINTWISE_DIV, CUDNN_DATA_FLOAT, exps, sum, NULL, p, 0);
    matmul(g, p, v, o);
}

// The gradients of a kv head that serves several query heads: per query head in the
// input type, then summed over the group.
static void grouped_matmul(graph *g, const shape *s, const layouts *l, cudnnBackendDescriptor_t a,
                           cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t out) {
    if (s->NH == s->NKV) return matmul(g, a, b, out);
    cudnnBackendDescriptor_t per_head = virt(g, io_type(s->dt), l->head_rows);
    matmul(g, a, b, per_head);
    reduction(g, CUDNN_REDUCE_TENSOR_ADD, per_head, out);
}

// P = exp(scale Q K^T - stats), masked; dV = P^T dO; dS = P (dO V^T - rowsum(dO O))
// scale; dK = dS^T Q; dQ = dS K.
static void backward_graph(graph *g, const shape *s) {
    layouts l = layouts_of(s);
    cudnnDataType_t io = io_type(s->dt);
    cudnnBackendDescriptor_t q = tensor(g, UID_Q, io, l.q, false, false), kt = tensor(g, UID_K, io, l.kt, false, false),
                             vt = tensor(g, UID_V, io, l.vt, false, false), o = tensor(g, UID_O, io, l.o, false, false),
                             d_o = tensor(g, UID_DO, io, l.o, false, false),
                             stats = tensor(g, UID_STATS, CUDNN_DATA_FLOAT, l.stats, false, false),
                             dq = tensor(g, UID_DQ, io, l.q, false, false),
                             dk = tensor(g, UID_DK, io, l.k, false, false),
                             dv = tensor(g, UID_DV, io, l.v, false, false),
                             softmax_sum = tensor(g, UID_SOFTMAX_SUM, CUDNN_DATA_FLOAT, l.stats, false, false),
                             scale = scalar(g, UID_SCALE), neg_inf = scalar(g, UID_NEG_INF), one = scalar(g, UID_ONE),
                             window = s->window ? scalar(g, UID_WINDOW) : NULL;
    cudnnBackendDescriptor_t products = binary(g, CUDNN_POINTWISE_MUL, d_o, o, l.row_products);
    cudnnBackendDescriptor_t rows = virt(g, CUDNN_DATA_FLOAT, l.stats);
    reduction(g, CUDNN_REDUCE_TENSOR_ADD, products, rows);
    pointwise(g, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, rows, one, NULL, softmax_sum, 0);

    cudnnBackendDescriptor_t scores = virt(g, CUDNN_DATA_FLOAT, l.scores);
    matmul(g, q, kt, scores);
    cudnnBackendDescriptor_t scaled = binary(g, CUDNN_POINTWISE_MUL, scores, scale, l.scores);
    cudnnBackendDescriptor_t centered = binary(g, CUDNN_POINTWISE_SUB, scaled, stats, l.scores);
    cudnnBackendDescriptor_t masked = mask(g, s, &l, centered, neg_inf, window);
    cudnnBackendDescriptor_t p = virt(g, CUDNN_DATA_FLOAT, l.scores);
    pointwise(g, CUDNN_POINTWISE_EXP, CUDNN_DATA_FLOAT, masked, NULL, NULL, p, 0);
    cudnnBackendDescriptor_t p_t = virt(g, io, l.scores_t);
    reshape(g, p, p_t);
    grouped_matmul(g, s, &l, p_t, d_o, dv);

    cudnnBackendDescriptor_t dp = virt(g, CUDNN_DATA_FLOAT, l.scores);
    matmul(g, d_o, vt, dp);
    cudnnBackendDescriptor_t dp_centered = binary(g, CUDNN_POINTWISE_SUB, dp, softmax_sum, l.scores);
    cudnnBackendDescriptor_t ds_unscaled = binary(g, CUDNN_POINTWISE_MUL, dp_centered, p, l.scores);
    cudnnBackendDescriptor_t ds = binary(g, CUDNN_POINTWISE_MUL, ds_unscaled, scale, l.scores);
    cudnnBackendDescriptor_t ds_t = virt(g, io, l.scores_t);
    reshape(g, ds, ds_t);
    grouped_matmul(g, s, &l, ds_t, q, dk);

    cudnnBackendDescriptor_t k = virt(g, CUDNN_DATA_FLOAT, l.k);
    reshape(g, kt, k);
    matmul(g, ds, k, dq);
}

// ---- plans ----

typedef struct plan {
    shape key;
    graph g;                          // the graph's descriptors; g.error set where it has no plan
    cudnnBackendDescriptor_t execute; // the execution plan
    int64_t workspace;                // cuDNN's own bytes
} plan;

struct cudnn_attention {
    pthread_mutex_t lock; // the handle's stream, and the plans
    cudnnHandle_t handle;
    zinf_attention_impl want; // AUTO or CUDNN
    plan **plans;
    int n_plans;
};

// Operation graph, heuristics, then the first engine configuration that makes a plan.
static void make_plan(cudnnHandle_t handle, plan *p) {
    graph *g = &p->g;
    cudnnBackendDescriptor_t og = create(g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph");
    set(g, og, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle, "operation graph handle");
    set(g, og, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, g->n_ops, g->ops, "operation graph ops");
    finalize(g, og, "operation graph");
    cudnnBackendDescriptor_t heur = create(g, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "engine heuristics");
    cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    set_desc(g, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, og, "engine heuristics graph");
    set(g, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "engine heuristics mode");
    finalize(g, heur, "engine heuristics");
    cudnnBackendDescriptor_t configs[GRAPH_MAX_ENGINES];
    for (int i = 0; i < GRAPH_MAX_ENGINES; i++)
        configs[i] = create(g, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine configuration");
    int64_t n = 0;
    if (g->status == CUDNN_STATUS_SUCCESS) {
        cudnnStatus_t st = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                                    GRAPH_MAX_ENGINES, &n, configs);
        if (st != CUDNN_STATUS_SUCCESS) graph_failed(g, st, "engine heuristics results");
    }
    if (g->status != CUDNN_STATUS_SUCCESS) return;
    char first_error[320] = "";
    for (int64_t i = 0; i < n && i < GRAPH_MAX_ENGINES; i++) {
        cudnnBackendDescriptor_t ep = create(g, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, "execution plan");
        set(g, ep, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle, "execution plan handle");
        set_desc(g, ep, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, configs[i], "execution plan engine");
        finalize(g, ep, "execution plan");
        int64_t count = 0;
        if (g->status == CUDNN_STATUS_SUCCESS) {
            cudnnStatus_t st = cudnnBackendGetAttribute(ep, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64,
                                                        1, &count, &p->workspace);
            if (st != CUDNN_STATUS_SUCCESS) graph_failed(g, st, "execution plan workspace");
        }
        if (g->status == CUDNN_STATUS_SUCCESS) {
            p->execute = ep;
            return;
        }
        // This engine does not take the graph; the next may.
        if (!first_error[0]) snprintf(first_error, sizeof first_error, "%s", g->error);
        g->status = CUDNN_STATUS_SUCCESS;
        g->error[0] = '\0';
    }
    g->status = CUDNN_STATUS_NOT_SUPPORTED;
    snprintf(g->error, sizeof g->error, "no engine of cuDNN %zu runs this attention graph%s%.200s", cudnnGetVersion(),
             first_error[0] ? "; the first one tried: " : "", first_error);
}

static void plan_destroy(plan *p) {
    for (int i = p->g.n_descriptors - 1; i >= 0; i--)
        cudnnBackendDestroyDescriptor(p->g.descriptors[i]);
    free(p);
}

static bool aligned(const void *p) { return ((uintptr_t)p & 15) == 0; }

// Why cuDNN's fused attention cannot take a, or NULL. Its tensors are declared 16-byte
// aligned (as the frontend declares them), so every buffer must be.
static const char *refusal(const zinf_attention_args *a) {
    if (a->dt != ZINF_DTYPE_BF16 && a->dt != ZINF_DTYPE_F16) return "it takes bf16 or fp16 only";
    if (a->hd % 8 || a->hd > 256) return "it takes head sizes that are multiples of 8 up to 256";
    if (a->T < 2) return "it takes sequences of 2 tokens or more";
    if (!aligned(a->qkv) || !aligned(a->out) || !aligned(a->lse) || !aligned(a->dqkv) || !aligned(a->dout) ||
        !aligned(a->ws))
        return "it takes buffers that start 16-byte aligned";
    return NULL;
}

static shape shape_of(const zinf_attention_args *a, bool backward) {
    shape s = {backward, a->dt, a->B, a->T, a->NH, a->NKV, a->hd, a->window < a->T ? a->window : 0};
    return s;
}

static bool same_shape(const shape *x, const shape *y) {
    return x->backward == y->backward && x->dt == y->dt && x->B == y->B && x->T == y->T && x->NH == y->NH &&
           x->NKV == y->NKV && x->hd == y->hd && x->window == y->window;
}

// The plan for a's shape, built at first use (l->lock held). NULL only when out of
// host memory; a plan whose graph no engine runs carries the reason in g.error.
static plan *plan_for(cudnn_attention *l, const zinf_attention_args *a, bool backward) {
    shape key = shape_of(a, backward);
    for (int i = 0; i < l->n_plans; i++)
        if (same_shape(&l->plans[i]->key, &key)) return l->plans[i];
    plan **grown = (plan **)realloc(l->plans, (size_t)(l->n_plans + 1) * sizeof *grown);
    plan *p = (plan *)calloc(1, sizeof *p);
    if (grown) l->plans = grown;
    if (!grown || !p) {
        free(p);
        return NULL;
    }
    p->key = key;
    p->g.next_virtual_uid = UID_FIRST_VIRTUAL;
    (backward ? backward_graph : forward_graph)(&p->g, &key);
    make_plan(l->handle, p);
    if (!p->execute && l->want == ZINF_ATTENTION_AUTO)
        ZINF_LOG_INFO("attention%s B %d T %d heads %d/%d head size %d: zinf's kernels run it, since %s",
                      backward ? " backward" : "", a->B, a->T, a->NH, a->NKV, a->hd, p->g.error);
    l->plans[l->n_plans++] = p;
    return p;
}

// ---- the device's part ----

zinf_status cudnn_attention_open(zinf_attention_impl want, cudnn_attention **out) {
    *out = NULL;
    cudnnHandle_t handle;
    cudnnStatus_t st = cudnnCreate(&handle);
    if (st != CUDNN_STATUS_SUCCESS) {
        if (want != ZINF_ATTENTION_CUDNN) return ZINF_OK; // auto: zinf's kernels, as on a machine without it
        char reason[256];
        cudnnGetLastErrorString(reason, sizeof reason);
        return zinf_fail(ZINF_ERR_UNSUPPORTED,
                         "device.attention is \"cudnn\" but cuDNN did not start: %s%s%s; install libcudnn 9 (PyTorch's "
                         "CUDA wheels carry it: put its lib directory on LD_LIBRARY_PATH), or set device.attention to "
                         "\"auto\" or \"zinf\"",
                         cudnnGetErrorString(st), reason[0] ? ": " : "", reason);
    }
    cudnn_attention *l = (cudnn_attention *)calloc(1, sizeof *l);
    if (!l) {
        cudnnDestroy(handle);
        return zinf_fail(ZINF_ERR_NOMEM, "cuDNN attention: out of host memory");
    }
    pthread_mutex_init(&l->lock, NULL);
    l->handle = handle;
    l->want = want;
    *out = l;
    return ZINF_OK;
}

void cudnn_attention_close(cudnn_attention *l) {
    if (!l) return;
    for (int i = 0; i < l->n_plans; i++)
        plan_destroy(l->plans[i]);
    free(l->plans);
    cudnnDestroy(l->handle);
    pthread_mutex_destroy(&l->lock);
    free(l);
}

static size_t align_up(size_t n) { return (n + 255) & ~(size_t)255; }

size_t cudnn_attention_workspace(cudnn_attention *l, const zinf_attention_args *a) {
    if (!l || refusal(a)) return 0;
    pthread_mutex_lock(&l->lock);
    plan *f = plan_for(l, a, false), *b = plan_for(l, a, true);
    size_t bytes = 0;
    if (f && f->execute) bytes = (size_t)f->workspace;
    if (b && b->execute) {
        size_t softmax_sum = (size_t)a->B * a->NH * a->T * sizeof(float);
        size_t backward = align_up((size_t)b->workspace) + softmax_sum;
        if (backward > bytes) bytes = backward;
    }
    pthread_mutex_unlock(&l->lock);
    return bytes;
}

// Enqueue p on st for a's buffers (l->lock held).
static zinf_status execute(cudnn_attention *l, plan *p, cudaStream_t st, const zinf_attention_args *a) {
    size_t es = 2, hd = (size_t)a->hd, q_width = (size_t)a->NH * hd, kv_width = (size_t)a->NKV * hd;
    const char *qkv = (const char *)a->qkv;
    // What a masked score becomes: -inf, or before cuDNN 9.10 the lowest float, as the
    // frontend gives each (attn_score_modifiers.h: older versions prefer it).
    float neg_inf = cudnnGetVersion() >= 91000 ? -INFINITY : -FLT_MAX;
    float scale = 1.0f / sqrtf((float)a->hd), one = 1.0f, window = (float)p->key.window;
    int64_t uids[14];
    void *ptrs[14];
    int n = 0;
#define BIND(uid, ptr) (uids[n] = (uid), ptrs[n] = (void *)(ptr), n++)
    BIND(UID_Q, qkv);
    BIND(UID_K, qkv + q_width * es);
    BIND(UID_V, qkv + (q_width + kv_width) * es);
    BIND(UID_O, a->out);
    BIND(UID_STATS, a->lse);
    BIND(UID_SCALE, &scale);
    BIND(UID_NEG_INF, &neg_inf);
    if (p->key.window) BIND(UID_WINDOW, &window);
    if (p->key.backward) {
        char *dqkv = (char *)a->dqkv;
        BIND(UID_DO, a->dout);
        BIND(UID_DQ, dqkv);
        BIND(UID_DK, dqkv + q_width * es);
        BIND(UID_DV, dqkv + (q_width + kv_width) * es);
        BIND(UID_SOFTMAX_SUM, (char *)a->ws + align_up((size_t)p->workspace));
        BIND(UID_ONE, &one);
    }
#undef BIND
    graph g; // the pack alone, and the failure's report
    memset(&g, 0, sizeof g);
    cudnnBackendDescriptor_t pack = create(&g, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, "variant pack");
    set(&g, pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids, "variant pack ids");
    set(&g, pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs, "variant pack pointers");
    set(&g, pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &a->ws, "variant pack workspace");
    finalize(&g, pack, "variant pack");
    if (g.status == CUDNN_STATUS_SUCCESS) {
        cudnnStatus_t cs = cudnnSetStream(l->handle, st);
        if (cs == CUDNN_STATUS_SUCCESS) cs = cudnnBackendExecute(l->handle, p->execute, pack);
        if (cs != CUDNN_STATUS_SUCCESS) graph_failed(&g, cs, "cudnnBackendExecute");
    }
    if (pack) cudnnBackendDestroyDescriptor(pack);
    if (g.status != CUDNN_STATUS_SUCCESS)
        return zinf_fail(ZINF_ERR_CUDA, "cuDNN attention%s: %s", p->key.backward ? " backward" : "", g.error);
    return ZINF_OK;
}

static zinf_status run_zinf(cudaStream_t st, const zinf_attention_args *a, bool backward) {
    return backward ? cuda_attention_bwd(st, a) : cuda_attention_fwd(st, a);
}

zinf_status cudnn_attention_run(cudnn_attention *l, cudaStream_t st, const zinf_attention_args *a, bool backward) {
    if (!l) return run_zinf(st, a, backward);
    const char *why = refusal(a);
    if (why && l->want == ZINF_ATTENTION_CUDNN)
        return zinf_fail(ZINF_ERR_UNSUPPORTED,
                         "device.attention is \"cudnn\" but cuDNN's fused attention cannot run this %s attention, "
                         "head size %d: %s; set device.attention to \"auto\" or \"zinf\"",
                         zinf_dtype_name(a->dt), a->hd, why);
    if (why) return run_zinf(st, a, backward);
    // "auto" runs cuDNN wherever it has a plan, not whichever a timing favours, so that
    // a run repeats bit for bit and every rank runs the same kernels.
    pthread_mutex_lock(&l->lock);
    plan *p = plan_for(l, a, backward);
    zinf_status rc = ZINF_OK;
    bool zinf_runs = false;
    if (!p)
        rc = zinf_fail(ZINF_ERR_NOMEM, "cuDNN attention: out of host memory");
    else if (p->execute)
        rc = execute(l, p, st, a);
    else if (l->want == ZINF_ATTENTION_CUDNN)
        rc = zinf_fail(ZINF_ERR_UNSUPPORTED, "device.attention is \"cudnn\" but %s; set it to \"auto\" or \"zinf\"",
                       p->g.error);
    else
        zinf_runs = true;
    pthread_mutex_unlock(&l->lock);
    return zinf_runs ? run_zinf(st, a, backward) : rc;
}
