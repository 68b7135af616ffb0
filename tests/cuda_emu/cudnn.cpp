// CUDA emulation (tests only): cuDNN's backend (graph) API, the part zinf uses for the
// composite scaled-dot-product attention graphs that cudnn-frontend builds (matmuls,
// pointwise operations, reductions, reshapes), following NVIDIA's cuDNN Backend API
// reference ("cudnn_graph Library": the backend descriptor types, their attributes, and
// cudnnBackendSetAttribute/GetAttribute/Finalize/Execute) and the cudnn-frontend
// operation pages. Descriptors hold what was set, checked by type and element count;
// cudnnBackendFinalize checks what each descriptor type needs; an execution plan runs
// its graph on the handle's stream, in stream order, one operation after another in
// dependency order, each over every element of its output.
//
// Numbers: FLOAT, HALF and BFLOAT16 values are carried as fp32 and stored rounded to
// nearest even in their tensor's type, virtual tensors included (a virtual BFLOAT16
// tensor holds bf16 values); INT32 as int32; BOOLEAN as a byte 0 or 1. Pointwise math is
// fp32 whatever MATH_PREC says; matmuls and reductions accumulate in fp32 in a fixed
// order and round once.
//
// Not emulated (refused with CUDNN_STATUS_NOT_SUPPORTED, or not checked): descriptor
// types other than the fourteen of the attribute rules below; other pointwise modes and reduction operators;
// DOUBLE, INT8, INT64, FP8 and FP4 data; non-virtual BOOLEAN tensors (bit-packed in
// cuDNN); vectorized or reordered tensors; knob choices (only an empty list is taken);
// GEMM M/N/K override tensors; CUDA graphs; the engines' own limits on shapes, layouts
// and alignments (the emulation runs any graph it can compute, where a real engine may
// find none); overlap between tensors other than the workspace.
//
// cudnnGetLastErrorString gives the text of the calling thread's last failure (which
// descriptor, which attribute, what is wrong), kept until its next failure.
//
// Test hook: the library is absent unless CUDA_EMU_CUDNN=1 is set in the environment,
// read at each cudnnCreate: without it cudnnCreate fails with
// CUDNN_STATUS_NOT_INITIALIZED, as on a machine without libcudnn, so that zinf's default
// runs do not depend on cuDNN. A second hook, CUDA_EMU_CUDNN_NO_ENGINE=1, read at each
// heuristic query, makes the heuristics find no engine for any graph (0 results), as a
// real cuDNN may for a graph none of its engines takes, so that a caller's fallback runs.
//
// Workspace: a plan reports 256 bytes per operation of its graph (the emulated engine
// keeps its virtual tensors in host memory of its own); each execution checks that the
// variant pack's workspace is that much device memory and fills it with all bits set (a
// NaN in every float type), so a caller that shares the workspace with live data sees
// it overwritten.
#include <cudnn_graph.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <unordered_set>
#include <vector>

#include "emu.h"

// A handle only says where work goes: the device current at cudnnCreate and the stream
// of cudnnSetStream (NULL: that device's default stream).
struct cudnnContext {
    int device;
    cudaStream_t stream;
};

namespace {

const int64_t WORKSPACE_BYTES_PER_OPERATION = 256;

// ---- the calling thread's last failure ----

// The function the thread is in, named at the start of each failure's text.
thread_local const char *current_call = "cudnn";
thread_local std::string last_error;

cudnnStatus_t fail(cudnnStatus_t status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
cudnnStatus_t fail(cudnnStatus_t status, const char *fmt, ...) {
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    last_error = std::string(current_call) + ": " + text;
    return status;
}

// Propagates a failure (its text already recorded).
#define CHECK_STATUS(call)                                                                                             \
    do {                                                                                                               \
        cudnnStatus_t status_ = (call);                                                                                \
        if (status_ != CUDNN_STATUS_SUCCESS) return status_;                                                           \
    } while (0)

// ---- names, for the failures' texts ----

const char *descriptor_type_name(int t) {
    static const char *const names[] = {"CUDNN_BACKEND_POINTWISE_DESCRIPTOR",
                                        "CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR",
                                        "CUDNN_BACKEND_ENGINE_DESCRIPTOR",
                                        "CUDNN_BACKEND_ENGINECFG_DESCRIPTOR",
                                        "CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR",
                                        "CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR",
                                        "CUDNN_BACKEND_INTERMEDIATE_INFO_DESCRIPTOR",
                                        "CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR",
                                        "CUDNN_BACKEND_KNOB_INFO_DESCRIPTOR",
                                        "CUDNN_BACKEND_LAYOUT_INFO_DESCRIPTOR",
                                        "CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR",
                                        "CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR",
                                        "CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR",
                                        "CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR",
                                        "CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR",
                                        "CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR",
                                        "CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR",
                                        "CUDNN_BACKEND_TENSOR_DESCRIPTOR",
                                        "CUDNN_BACKEND_MATMUL_DESCRIPTOR",
                                        "CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR",
                                        "CUDNN_BACKEND_OPERATION_BN_FINALIZE_STATISTICS_DESCRIPTOR",
                                        "CUDNN_BACKEND_REDUCTION_DESCRIPTOR",
                                        "CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR",
                                        "CUDNN_BACKEND_OPERATION_BN_BWD_WEIGHTS_DESCRIPTOR",
                                        "CUDNN_BACKEND_RESAMPLE_DESCRIPTOR",
                                        "CUDNN_BACKEND_OPERATION_RESAMPLE_FWD_DESCRIPTOR",
                                        "CUDNN_BACKEND_OPERATION_RESAMPLE_BWD_DESCRIPTOR",
                                        "CUDNN_BACKEND_OPERATION_CONCAT_DESCRIPTOR",
                                        "CUDNN_BACKEND_OPERATION_SIGNAL_DESCRIPTOR",
                                        "CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR",
                                        "CUDNN_BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR",
                                        "CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR",
                                        "CUDNN_BACKEND_RNG_DESCRIPTOR",
                                        "CUDNN_BACKEND_OPERATION_RNG_DESCRIPTOR",
                                        "CUDNN_BACKEND_KERNEL_CACHE_DESCRIPTOR",
                                        "CUDNN_BACKEND_OPERATION_PAGED_CACHE_LOAD_DESCRIPTOR",
                                        "CUDNN_BACKEND_OPERATION_BLOCK_SCALE_QUANTIZE_DESCRIPTOR",
                                        "CUDNN_BACKEND_OPERATION_BLOCK_SCALE_DEQUANTIZE_DESCRIPTOR",
                                        "CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR",
                                        "CUDNN_BACKEND_OPERATION_EXPAND_BAND_MATRIX_DESCRIPTOR",
                                        "CUDNN_BACKEND_OPERATION_CONTRACT_BAND_MATRIX_DESCRIPTOR",
                                        "CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR",
                                        "CUDNN_BACKEND_OPERATION_MOE_GROUPED_MATMUL_DESCRIPTOR",
                                        "CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR"};
    return t >= 0 && t < (int)(sizeof names / sizeof names[0]) ? names[t] : "an unknown descriptor type";
}

const char *attribute_type_name(int t) {
    static const char *const names[] = {"CUDNN_TYPE_HANDLE",
                                        "CUDNN_TYPE_DATA_TYPE",
                                        "CUDNN_TYPE_BOOLEAN",
                                        "CUDNN_TYPE_INT64",
                                        "CUDNN_TYPE_FLOAT",
                                        "CUDNN_TYPE_DOUBLE",
                                        "CUDNN_TYPE_VOID_PTR",
                                        "CUDNN_TYPE_CONVOLUTION_MODE",
                                        "CUDNN_TYPE_HEUR_MODE",
                                        "CUDNN_TYPE_KNOB_TYPE",
                                        "CUDNN_TYPE_NAN_PROPOGATION",
                                        "CUDNN_TYPE_NUMERICAL_NOTE",
                                        "CUDNN_TYPE_LAYOUT_TYPE",
                                        "CUDNN_TYPE_ATTRIB_NAME",
                                        "CUDNN_TYPE_POINTWISE_MODE",
                                        "CUDNN_TYPE_BACKEND_DESCRIPTOR",
                                        "CUDNN_TYPE_GENSTATS_MODE",
                                        "CUDNN_TYPE_BN_FINALIZE_STATS_MODE",
                                        "CUDNN_TYPE_REDUCTION_OPERATOR_TYPE",
                                        "CUDNN_TYPE_BEHAVIOR_NOTE",
                                        "CUDNN_TYPE_TENSOR_REORDERING_MODE",
                                        "CUDNN_TYPE_RESAMPLE_MODE",
                                        "CUDNN_TYPE_PADDING_MODE",
                                        "CUDNN_TYPE_INT32",
                                        "CUDNN_TYPE_CHAR",
                                        "CUDNN_TYPE_SIGNAL_MODE",
                                        "CUDNN_TYPE_FRACTION",
                                        "CUDNN_TYPE_NORM_MODE",
                                        "CUDNN_TYPE_NORM_FWD_PHASE",
                                        "CUDNN_TYPE_RNG_DISTRIBUTION",
                                        "CUDNN_TYPE_MOE_GROUPED_MATMUL_MODE"};
    return t >= 0 && t < (int)(sizeof names / sizeof names[0]) ? names[t] : "an unknown attribute type";
}

const char *data_type_name(int t) {
    switch (t) {
    case CUDNN_DATA_FLOAT: return "FLOAT";
    case CUDNN_DATA_HALF: return "HALF";
    case CUDNN_DATA_BFLOAT16: return "BFLOAT16";
    case CUDNN_DATA_INT32: return "INT32";
    case CUDNN_DATA_BOOLEAN: return "BOOLEAN";
    default: return "a data type the emulation leaves out";
    }
}

// ---- data types ----

bool known_data_type(int64_t t) {
    return t == CUDNN_DATA_FLOAT || t == CUDNN_DATA_HALF || t == CUDNN_DATA_BFLOAT16 || t == CUDNN_DATA_INT32 ||
           t == CUDNN_DATA_BOOLEAN;
}
bool float_type(cudnnDataType_t t) { return t == CUDNN_DATA_FLOAT || t == CUDNN_DATA_HALF || t == CUDNN_DATA_BFLOAT16; }
// Bytes per element in memory; BOOLEAN only for virtual tensors, a byte each here.
size_t type_size(cudnnDataType_t t) {
    return t == CUDNN_DATA_FLOAT || t == CUDNN_DATA_INT32 ? 4 : t == CUDNN_DATA_BOOLEAN ? 1 : 2;
}

float load(cudnnDataType_t t, const void *base, size_t at) {
    switch (t) {
    case CUDNN_DATA_HALF: return __half2float(((const __half *)base)[at]);
    case CUDNN_DATA_BFLOAT16: return __bfloat162float(((const __nv_bfloat16 *)base)[at]);
    case CUDNN_DATA_INT32: return (float)((const int32_t *)base)[at];
    case CUDNN_DATA_BOOLEAN: return ((const unsigned char *)base)[at] ? 1.0f : 0.0f;
    default: return ((const float *)base)[at];
    }
}

// Float to INT32 truncates toward zero, as a C cast does; what no int32 holds (NaN
// included) becomes INT32_MIN rather than undefined behaviour.
void store(cudnnDataType_t t, void *base, size_t at, float v) {
    switch (t) {
    case CUDNN_DATA_HALF: ((__half *)base)[at] = __float2half_rn(v); break;
    case CUDNN_DATA_BFLOAT16: ((__nv_bfloat16 *)base)[at] = __float2bfloat16_rn(v); break;
    case CUDNN_DATA_INT32:
        ((int32_t *)base)[at] = v > -2147483904.0f && v < 2147483648.0f ? (int32_t)v : INT32_MIN;
        break;
    case CUDNN_DATA_BOOLEAN: ((unsigned char *)base)[at] = v != 0.0f; break;
    default: ((float *)base)[at] = v;
    }
}

// ---- descriptors ----

struct descriptor;

// A tensor as its finalized descriptor describes it.
struct tensor_info {
    int64_t uid = 0;
    cudnnDataType_t type = CUDNN_DATA_FLOAT;
    std::vector<int64_t> dims, strides;
    int64_t alignment = 0; // bytes
    bool is_virtual = false, by_value = false;

    size_t elements() const {
        size_t n = 1;
        for (int64_t d : dims)
            n *= (size_t)d;
        return n;
    }
    // Elements from the first to past the last, gaps between them included.
    size_t extent() const {
        size_t last = 0;
        for (size_t d = 0; d < dims.size(); d++)
            last += (size_t)(dims[d] - 1) * (size_t)strides[d];
        return last + 1;
    }
    size_t bytes() const { return extent() * type_size(type); }
    bool operator==(const tensor_info &o) const {
        return uid == o.uid && type == o.type && dims == o.dims && strides == o.strides && is_virtual == o.is_virtual &&
               by_value == o.by_value;
    }
};

std::string shape_text(const tensor_info &t) {
    std::string s = "[";
    for (size_t d = 0; d < t.dims.size(); d++)
        s += (d ? "," : "") + std::to_string(t.dims[d]);
    s += "] strides [";
    for (size_t d = 0; d < t.strides.size(); d++)
        s += (d ? "," : "") + std::to_string(t.strides[d]);
    return s + "] " + data_type_name(t.type);
}

enum class op_kind { pointwise, matmul, reduction, reshape };

// An operation as its finalized descriptor describes it. inputs: the pointwise
// operation's x, b and t as its mode takes them, a matmul's A and B, a reduction's or
// reshape's X.
struct operation_info {
    op_kind kind = op_kind::pointwise;
    std::string label; // for the failures' texts
    cudnnPointwiseMode_t mode = CUDNN_POINTWISE_IDENTITY;
    float alpha1 = 1.0f, alpha2 = 1.0f;
    int64_t axis = -1;
    cudnnReduceTensorOp_t reduce = CUDNN_REDUCE_TENSOR_ADD;
    std::vector<tensor_info> inputs;
    tensor_info output;
};

// A finalized operation graph: its distinct tensors and its operations in the order
// they run, each naming its tensors by index.
struct program {
    struct step {
        operation_info operation;
        std::vector<size_t> inputs;
        size_t output;
    };
    std::vector<tensor_info> tensors;
    std::vector<step> steps;
};

// What one attribute holds: its elements as the caller gave them, or, for descriptors,
// copies of the finalized descriptors (taken when set, so the caller may change or
// destroy its own afterwards, and immutable, so copies share them).
struct value {
    cudnnBackendAttributeType_t type;
    int64_t count = 0;
    std::vector<unsigned char> bytes;
    std::vector<std::shared_ptr<const descriptor>> descriptors;
};

struct descriptor {
    cudnnBackendDescriptorType_t type;
    bool finalized = false;
    std::map<int, value> values; // by attribute name
    // Worked out by cudnnBackendFinalize:
    tensor_info tensor;                           // TENSOR
    operation_info operation;                     // OPERATION_*
    std::shared_ptr<const program> graph_program; // OPERATIONGRAPH and what refers to one
    int64_t workspace_bytes = 0;                  // EXECUTION_PLAN

    explicit descriptor(cudnnBackendDescriptorType_t t) : type(t) {}
};

const char *type_name(const descriptor &d) { return descriptor_type_name(d.type); }

// Live descriptors and handles, so that a stale or foreign pointer is refused rather
// than followed.
std::mutex registry_mutex;
std::unordered_set<const void *> live_descriptors, live_handles;

bool live_descriptor(const void *p) {
    std::lock_guard<std::mutex> g(registry_mutex);
    return p && live_descriptors.count(p);
}
bool live_handle(const void *p) {
    std::lock_guard<std::mutex> g(registry_mutex);
    return p && live_handles.count(p);
}

// ---- attributes ----

// A descriptor element of any operation type.
const int ANY_OPERATION = -2;
const int64_t UNLIMITED = INT64_MAX;

// The attributes each descriptor type takes (cuDNN Backend API reference, "Backend
// Descriptor Types"): the type, how many elements a set takes, whether finalize needs
// it, for descriptor elements the descriptor type, and whether it is computed (for
// cudnnBackendGetAttribute only).
struct rule {
    cudnnBackendDescriptorType_t owner;
    cudnnBackendAttributeName_t name;
    const char *text;
    cudnnBackendAttributeType_t type;
    int64_t min_count, max_count;
    bool required;
    int element; // descriptor type of the elements, ANY_OPERATION, or -1
    bool read_only;
};

#define NAME(n) n, #n
const rule rules[] = {
    {CUDNN_BACKEND_TENSOR_DESCRIPTOR, NAME(CUDNN_ATTR_TENSOR_UNIQUE_ID), CUDNN_TYPE_INT64, 1, 1, true, -1, false},
    {CUDNN_BACKEND_TENSOR_DESCRIPTOR, NAME(CUDNN_ATTR_TENSOR_DATA_TYPE), CUDNN_TYPE_DATA_TYPE, 1, 1, true, -1, false},
    {CUDNN_BACKEND_TENSOR_DESCRIPTOR, NAME(CUDNN_ATTR_TENSOR_DIMENSIONS), CUDNN_TYPE_INT64, 1, CUDNN_DIM_MAX, true, -1,
     false},
    {CUDNN_BACKEND_TENSOR_DESCRIPTOR, NAME(CUDNN_ATTR_TENSOR_STRIDES), CUDNN_TYPE_INT64, 1, CUDNN_DIM_MAX, true, -1,
     false},
    {CUDNN_BACKEND_TENSOR_DESCRIPTOR, NAME(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT), CUDNN_TYPE_INT64, 1, 1, true, -1, false},
    {CUDNN_BACKEND_TENSOR_DESCRIPTOR, NAME(CUDNN_ATTR_TENSOR_IS_VIRTUAL), CUDNN_TYPE_BOOLEAN, 1, 1, false, -1, false},
    {CUDNN_BACKEND_TENSOR_DESCRIPTOR, NAME(CUDNN_ATTR_TENSOR_IS_BY_VALUE), CUDNN_TYPE_BOOLEAN, 1, 1, false, -1, false},

    {CUDNN_BACKEND_POINTWISE_DESCRIPTOR, NAME(CUDNN_ATTR_POINTWISE_MODE), CUDNN_TYPE_POINTWISE_MODE, 1, 1, true, -1,
     false},
    {CUDNN_BACKEND_POINTWISE_DESCRIPTOR, NAME(CUDNN_ATTR_POINTWISE_MATH_PREC), CUDNN_TYPE_DATA_TYPE, 1, 1, true, -1,
     false},
    {CUDNN_BACKEND_POINTWISE_DESCRIPTOR, NAME(CUDNN_ATTR_POINTWISE_AXIS), CUDNN_TYPE_INT64, 1, 1, false, -1, false},

    {CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, NAME(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR),
     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, true, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, false},
    {CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, NAME(CUDNN_ATTR_OPERATION_POINTWISE_XDESC),
     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, true, CUDNN_BACKEND_TENSOR_DESCRIPTOR, false},
    {CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, NAME(CUDNN_ATTR_OPERATION_POINTWISE_BDESC),
     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, false, CUDNN_BACKEND_TENSOR_DESCRIPTOR, false},
    {CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, NAME(CUDNN_ATTR_OPERATION_POINTWISE_TDESC),
     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, false, CUDNN_BACKEND_TENSOR_DESCRIPTOR, false},
    {CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, NAME(CUDNN_ATTR_OPERATION_POINTWISE_YDESC),
     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, true, CUDNN_BACKEND_TENSOR_DESCRIPTOR, false},
    {CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, NAME(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1), CUDNN_TYPE_FLOAT, 1, 1,
     false, -1, false},
    {CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, NAME(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2), CUDNN_TYPE_FLOAT, 1, 1,
     false, -1, false},

    {CUDNN_BACKEND_MATMUL_DESCRIPTOR, NAME(CUDNN_ATTR_MATMUL_COMP_TYPE), CUDNN_TYPE_DATA_TYPE, 1, 1, true, -1, false},
    {CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, NAME(CUDNN_ATTR_OPERATION_MATMUL_ADESC), CUDNN_TYPE_BACKEND_DESCRIPTOR,
     1, 1, true, CUDNN_BACKEND_TENSOR_DESCRIPTOR, false},
    {CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, NAME(CUDNN_ATTR_OPERATION_MATMUL_BDESC), CUDNN_TYPE_BACKEND_DESCRIPTOR,
     1, 1, true, CUDNN_BACKEND_TENSOR_DESCRIPTOR, false},
    {CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, NAME(CUDNN_ATTR_OPERATION_MATMUL_CDESC), CUDNN_TYPE_BACKEND_DESCRIPTOR,
     1, 1, true, CUDNN_BACKEND_TENSOR_DESCRIPTOR, false},
    {CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, NAME(CUDNN_ATTR_OPERATION_MATMUL_DESC), CUDNN_TYPE_BACKEND_DESCRIPTOR,
     1, 1, true, CUDNN_BACKEND_MATMUL_DESCRIPTOR, false},

    {CUDNN_BACKEND_REDUCTION_DESCRIPTOR, NAME(CUDNN_ATTR_REDUCTION_OPERATOR), CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, 1,
     true, -1, false},
    {CUDNN_BACKEND_REDUCTION_DESCRIPTOR, NAME(CUDNN_ATTR_REDUCTION_COMP_TYPE), CUDNN_TYPE_DATA_TYPE, 1, 1, true, -1,
     false},
    {CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, NAME(CUDNN_ATTR_OPERATION_REDUCTION_XDESC),
     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, true, CUDNN_BACKEND_TENSOR_DESCRIPTOR, false},
    {CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, NAME(CUDNN_ATTR_OPERATION_REDUCTION_YDESC),
     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, true, CUDNN_BACKEND_TENSOR_DESCRIPTOR, false},
    {CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, NAME(CUDNN_ATTR_OPERATION_REDUCTION_DESC),
     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, true, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, false},

    {CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, NAME(CUDNN_ATTR_OPERATION_RESHAPE_XDESC),
     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, true, CUDNN_BACKEND_TENSOR_DESCRIPTOR, false},
    {CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, NAME(CUDNN_ATTR_OPERATION_RESHAPE_YDESC),
     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, true, CUDNN_BACKEND_TENSOR_DESCRIPTOR, false},

    // cuDNN 9 deprecates the handle attributes for DEVICEPROP descriptors, which the
    // emulation leaves out: without either, nothing says which device the graph is for.
    {CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, NAME(CUDNN_ATTR_OPERATIONGRAPH_HANDLE), CUDNN_TYPE_HANDLE, 1, 1, true, -1,
     false},
    {CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, NAME(CUDNN_ATTR_OPERATIONGRAPH_OPS), CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
     UNLIMITED, true, ANY_OPERATION, false},
    {CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, NAME(CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT), CUDNN_TYPE_INT64, 0,
     0, false, -1, true},

    {CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, NAME(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH), CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
     1, true, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, false},
    {CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, NAME(CUDNN_ATTR_ENGINEHEUR_MODE), CUDNN_TYPE_HEUR_MODE, 1, 1, true, -1,
     false},
    {CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, NAME(CUDNN_ATTR_ENGINEHEUR_RESULTS), CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, 0,
     false, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, true},

    {CUDNN_BACKEND_ENGINE_DESCRIPTOR, NAME(CUDNN_ATTR_ENGINE_OPERATION_GRAPH), CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1,
     true, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, false},
    {CUDNN_BACKEND_ENGINE_DESCRIPTOR, NAME(CUDNN_ATTR_ENGINE_GLOBAL_INDEX), CUDNN_TYPE_INT64, 1, 1, true, -1, false},

    {CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, NAME(CUDNN_ATTR_ENGINECFG_ENGINE), CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, true,
     CUDNN_BACKEND_ENGINE_DESCRIPTOR, false},
    // The emulated engine has no knobs; knob choice descriptors cannot be created here,
    // so only an empty list gets through.
    {CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, NAME(CUDNN_ATTR_ENGINECFG_KNOB_CHOICES), CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
     UNLIMITED, false, CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, false},

    {CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, NAME(CUDNN_ATTR_EXECUTION_PLAN_HANDLE), CUDNN_TYPE_HANDLE, 1, 1, true, -1,
     false},
    {CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, NAME(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG),
     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, 1, true, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, false},
    {CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, NAME(CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE), CUDNN_TYPE_INT64, 0, 0,
     false, -1, true},

    {CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, NAME(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS), CUDNN_TYPE_INT64, 0, UNLIMITED,
     true, -1, false},
    {CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, NAME(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS), CUDNN_TYPE_VOID_PTR, 0,
     UNLIMITED, true, -1, false},
    {CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, NAME(CUDNN_ATTR_VARIANT_PACK_WORKSPACE), CUDNN_TYPE_VOID_PTR, 1, 1, false,
     -1, false},
};
#undef NAME

// The attribute numbers each descriptor type's attributes take in the real header: a
// number in its range that the table lacks is an attribute the emulation leaves out
// (NOT_SUPPORTED); one outside is not an attribute of that descriptor (BAD_PARAM).
struct attribute_range {
    cudnnBackendDescriptorType_t owner;
    int first, last;
};
const attribute_range ranges[] = {
    {CUDNN_BACKEND_POINTWISE_DESCRIPTOR, 0, 99},
    {CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, 200, 299},
    {CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, 300, 399},
    {CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, 400, 499},
    {CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, 750, 769},
    {CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, 800, 899},
    {CUDNN_BACKEND_TENSOR_DESCRIPTOR, 900, 999},
    {CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, 1000, 1099},
    {CUDNN_BACKEND_ENGINE_DESCRIPTOR, 1300, 1399},
    {CUDNN_BACKEND_MATMUL_DESCRIPTOR, 1500, 1519},
    {CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, 1520, 1599},
    {CUDNN_BACKEND_REDUCTION_DESCRIPTOR, 1600, 1609},
    {CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, 1610, 1619},
    {CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, 2200, 2249},
};

bool emulated_type(cudnnBackendDescriptorType_t t) {
    for (const attribute_range &r : ranges)
        if (r.owner == t) return true;
    return false;
}

const rule *find_rule(cudnnBackendDescriptorType_t owner, int name) {
    for (const rule &r : rules)
        if (r.owner == owner && r.name == name) return &r;
    return nullptr;
}

const char *attribute_name(int name) {
    for (const rule &r : rules)
        if (r.name == name) return r.text;
    static thread_local char text[32];
    snprintf(text, sizeof text, "attribute %d", name);
    return text;
}

// The rule for an attribute of d, or the failure (recorded) when there is none.
cudnnStatus_t rule_for(const descriptor &d, int name, const rule **out) {
    *out = find_rule(d.type, name);
    if (*out) return CUDNN_STATUS_SUCCESS;
    for (const attribute_range &r : ranges)
        if (r.owner == d.type && name >= r.first && name <= r.last)
            return fail(CUDNN_STATUS_NOT_SUPPORTED, "%s of a %s is an attribute the emulation leaves out",
                        attribute_name(name), type_name(d));
    return fail(CUDNN_STATUS_BAD_PARAM, "%s is not an attribute of a %s", attribute_name(name), type_name(d));
}

// Bytes per element of each attribute type the rules use (the C types of the reference's
// table of cudnnBackendAttributeType_t).
size_t element_size(cudnnBackendAttributeType_t t) {
    switch (t) {
    case CUDNN_TYPE_HANDLE: return sizeof(cudnnHandle_t);
    case CUDNN_TYPE_DATA_TYPE: return sizeof(cudnnDataType_t);
    case CUDNN_TYPE_BOOLEAN: return sizeof(bool);
    case CUDNN_TYPE_INT64: return sizeof(int64_t);
    case CUDNN_TYPE_FLOAT: return sizeof(float);
    case CUDNN_TYPE_VOID_PTR: return sizeof(void *);
    case CUDNN_TYPE_HEUR_MODE: return sizeof(cudnnBackendHeurMode_t);
    case CUDNN_TYPE_POINTWISE_MODE: return sizeof(cudnnPointwiseMode_t);
    case CUDNN_TYPE_REDUCTION_OPERATOR_TYPE: return sizeof(cudnnReduceTensorOp_t);
    case CUDNN_TYPE_BACKEND_DESCRIPTOR: return sizeof(cudnnBackendDescriptor_t);
    default: return 0;
    }
}

const char *pointwise_mode_name(int m) {
    switch (m) {
    case CUDNN_POINTWISE_ADD: return "ADD";
    case CUDNN_POINTWISE_SUB: return "SUB";
    case CUDNN_POINTWISE_MUL: return "MUL";
    case CUDNN_POINTWISE_DIV: return "DIV";
    case CUDNN_POINTWISE_MAX: return "MAX";
    case CUDNN_POINTWISE_MIN: return "MIN";
    case CUDNN_POINTWISE_EXP: return "EXP";
    case CUDNN_POINTWISE_LOG: return "LOG";
    case CUDNN_POINTWISE_NEG: return "NEG";
    case CUDNN_POINTWISE_IDENTITY: return "IDENTITY";
    case CUDNN_POINTWISE_CMP_EQ: return "CMP_EQ";
    case CUDNN_POINTWISE_CMP_NEQ: return "CMP_NEQ";
    case CUDNN_POINTWISE_CMP_GT: return "CMP_GT";
    case CUDNN_POINTWISE_CMP_GE: return "CMP_GE";
    case CUDNN_POINTWISE_CMP_LT: return "CMP_LT";
    case CUDNN_POINTWISE_CMP_LE: return "CMP_LE";
    case CUDNN_POINTWISE_GEN_INDEX: return "GEN_INDEX";
    case CUDNN_POINTWISE_BINARY_SELECT: return "BINARY_SELECT";
    default: return "?";
    }
}

const char *reduction_name(int op) {
    switch (op) {
    case CUDNN_REDUCE_TENSOR_ADD: return "ADD";
    case CUDNN_REDUCE_TENSOR_MUL: return "MUL";
    case CUDNN_REDUCE_TENSOR_MIN: return "MIN";
    case CUDNN_REDUCE_TENSOR_MAX: return "MAX";
    case CUDNN_REDUCE_TENSOR_AMAX: return "AMAX";
    default: return "?";
    }
}

bool pointwise_unary(int m) {
    return m == CUDNN_POINTWISE_EXP || m == CUDNN_POINTWISE_LOG || m == CUDNN_POINTWISE_NEG ||
           m == CUDNN_POINTWISE_IDENTITY || m == CUDNN_POINTWISE_GEN_INDEX;
}
bool pointwise_comparison(int m) { return m >= CUDNN_POINTWISE_CMP_EQ && m <= CUDNN_POINTWISE_CMP_LE; }
bool pointwise_binary(int m) {
    return m == CUDNN_POINTWISE_ADD || m == CUDNN_POINTWISE_SUB || m == CUDNN_POINTWISE_MUL ||
           m == CUDNN_POINTWISE_DIV || m == CUDNN_POINTWISE_MAX || m == CUDNN_POINTWISE_MIN || pointwise_comparison(m);
}
bool pointwise_emulated(int m) {
    return pointwise_unary(m) || pointwise_binary(m) || m == CUDNN_POINTWISE_BINARY_SELECT;
}

bool reduction_emulated(int op) {
    return op == CUDNN_REDUCE_TENSOR_ADD || op == CUDNN_REDUCE_TENSOR_MUL || op == CUDNN_REDUCE_TENSOR_MIN ||
           op == CUDNN_REDUCE_TENSOR_MAX || op == CUDNN_REDUCE_TENSOR_AMAX;
}

// Checks the values of enumerated attributes as they are set: a value the real header
// lacks is a bad parameter, one it has that the emulation leaves out is not supported
// (cudnnBackendSetAttribute's NOT_SUPPORTED: "the values to which the attributes are
// being set are not supported").
cudnnStatus_t check_elements(const rule &r, int64_t count, const void *elements) {
    for (int64_t i = 0; i < count; i++) {
        int32_t e = 0;
        if (r.type == CUDNN_TYPE_DATA_TYPE || r.type == CUDNN_TYPE_POINTWISE_MODE || r.type == CUDNN_TYPE_HEUR_MODE ||
            r.type == CUDNN_TYPE_REDUCTION_OPERATOR_TYPE)
            memcpy(&e, (const char *)elements + i * element_size(r.type), sizeof e);
        switch (r.type) {
        case CUDNN_TYPE_DATA_TYPE:
            if (e < CUDNN_DATA_FLOAT || e > CUDNN_DATA_COMPLEX_FP64)
                return fail(CUDNN_STATUS_BAD_PARAM, "%s: %d is not a cudnnDataType_t", r.text, e);
            if (!known_data_type(e))
                return fail(CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE,
                            "%s: data type %d is one the emulation leaves out (it has FLOAT, HALF, BFLOAT16, INT32 and "
                            "BOOLEAN)",
                            r.text, e);
            break;
        case CUDNN_TYPE_POINTWISE_MODE:
            if (!pointwise_emulated(e))
                return fail(CUDNN_STATUS_NOT_SUPPORTED, "%s: pointwise mode %d is one the emulation leaves out", r.text,
                            e);
            break;
        case CUDNN_TYPE_HEUR_MODE:
            if (e < CUDNN_HEUR_MODE_INSTANT || e >= CUDNN_HEUR_MODES_COUNT)
                return fail(CUDNN_STATUS_BAD_PARAM, "%s: %d is not a cudnnBackendHeurMode_t", r.text, e);
            break;
        case CUDNN_TYPE_REDUCTION_OPERATOR_TYPE:
            if (e < CUDNN_REDUCE_TENSOR_ADD || e > CUDNN_REDUCE_TENSOR_MUL_NO_ZEROS)
                return fail(CUDNN_STATUS_BAD_PARAM, "%s: %d is not a cudnnReduceTensorOp_t", r.text, e);
            if (!reduction_emulated(e))
                return fail(
                    CUDNN_STATUS_NOT_SUPPORTED,
                    "%s: reduction operator %d is one the emulation leaves out (it has ADD, MUL, MIN, MAX and AMAX)",
                    r.text, e);
            break;
        case CUDNN_TYPE_HANDLE: {
            cudnnHandle_t h;
            memcpy(&h, (const char *)elements + i * sizeof h, sizeof h);
            if (!live_handle(h)) return fail(CUDNN_STATUS_BAD_PARAM, "%s: %p is not a live cudnnHandle_t", r.text, h);
            break;
        }
        default: break;
        }
    }
    return CUDNN_STATUS_SUCCESS;
}

// ---- reading what a descriptor holds ----

const value *find(const descriptor &d, cudnnBackendAttributeName_t name) {
    auto it = d.values.find(name);
    return it == d.values.end() ? nullptr : &it->second;
}

template <typename T> T scalar(const descriptor &d, cudnnBackendAttributeName_t name, T otherwise) {
    const value *v = find(d, name);
    if (!v || v->count < 1) return otherwise;
    T x;
    memcpy(&x, v->bytes.data(), sizeof x);
    return x;
}

template <typename T> std::vector<T> array(const descriptor &d, cudnnBackendAttributeName_t name) {
    const value *v = find(d, name);
    std::vector<T> out(v ? (size_t)v->count : 0);
    if (!out.empty()) memcpy(out.data(), v->bytes.data(), out.size() * sizeof(T));
    return out;
}

// The one descriptor an attribute holds, or null.
const descriptor *child(const descriptor &d, cudnnBackendAttributeName_t name) {
    const value *v = find(d, name);
    return v && v->count == 1 ? v->descriptors[0].get() : nullptr;
}

void put(descriptor &d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, const void *element) {
    value &v = d.values[name];
    v.type = type;
    v.count = 1;
    v.bytes.assign((const unsigned char *)element, (const unsigned char *)element + element_size(type));
}

void put_descriptor(descriptor &d, cudnnBackendAttributeName_t name, std::shared_ptr<const descriptor> element) {
    value &v = d.values[name];
    v.type = CUDNN_TYPE_BACKEND_DESCRIPTOR;
    v.count = 1;
    v.descriptors = {std::move(element)};
}

// ---- finalize, per descriptor type ----

cudnnStatus_t finalize_tensor(descriptor &d) {
    tensor_info &t = d.tensor;
    t.uid = scalar<int64_t>(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, 0);
    t.type = scalar<cudnnDataType_t>(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_DATA_FLOAT);
    t.dims = array<int64_t>(d, CUDNN_ATTR_TENSOR_DIMENSIONS);
    t.strides = array<int64_t>(d, CUDNN_ATTR_TENSOR_STRIDES);
    t.alignment = scalar<int64_t>(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, 0);
    t.is_virtual = scalar<bool>(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, false);
    t.by_value = scalar<bool>(d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, false);
    if (t.dims.size() != t.strides.size())
        return fail(CUDNN_STATUS_BAD_PARAM, "tensor UID %lld: %zu dimensions but %zu strides", (long long)t.uid,
                    t.dims.size(), t.strides.size());
    for (size_t i = 0; i < t.dims.size(); i++)
        if (t.dims[i] < 1 || t.strides[i] < 1)
            return fail(CUDNN_STATUS_BAD_PARAM,
                        "tensor UID %lld: dimension %zu is %lld with stride %lld; both must be positive",
                        (long long)t.uid, i, (long long)t.dims[i], (long long)t.strides[i]);
    if (t.alignment < 1)
        return fail(CUDNN_STATUS_BAD_PARAM, "tensor UID %lld: byte alignment %lld is not positive", (long long)t.uid,
                    (long long)t.alignment);
    if (t.is_virtual && t.by_value)
        return fail(CUDNN_STATUS_BAD_PARAM, "tensor UID %lld is both virtual and by value", (long long)t.uid);
    // The reference's cudnnDataType_t packs BOOLEAN data eight elements to a byte; the
    // emulation keeps booleans in virtual tensors only.
    if (t.type == CUDNN_DATA_BOOLEAN && !t.is_virtual)
        return fail(CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE,
                    "tensor UID %lld: non-virtual BOOLEAN tensors (bit-packed in cuDNN) are left out of the emulation",
                    (long long)t.uid);
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t finalize_pointwise(descriptor &d) {
    if (scalar<cudnnPointwiseMode_t>(d, CUDNN_ATTR_POINTWISE_MODE, CUDNN_POINTWISE_IDENTITY) ==
            CUDNN_POINTWISE_GEN_INDEX &&
        !find(d, CUDNN_ATTR_POINTWISE_AXIS))
        return fail(CUDNN_STATUS_BAD_PARAM, "CUDNN_POINTWISE_GEN_INDEX needs CUDNN_ATTR_POINTWISE_AXIS");
    return CUDNN_STATUS_SUCCESS;
}

// Inputs of a pointwise operation broadcast to its output: same rank, each dimension
// the output's or 1.
cudnnStatus_t check_broadcast(const operation_info &op, const tensor_info &in, const char *role) {
    const tensor_info &y = op.output;
    bool fits = in.dims.size() == y.dims.size();
    for (size_t i = 0; fits && i < in.dims.size(); i++)
        fits = in.dims[i] == y.dims[i] || in.dims[i] == 1;
    if (!fits)
        return fail(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH,
                    "%s: %s (UID %lld, %s) does not broadcast to Y (UID %lld, %s)", op.label.c_str(), role,
                    (long long)in.uid, shape_text(in).c_str(), (long long)y.uid, shape_text(y).c_str());
    return CUDNN_STATUS_SUCCESS;
}

// Whether every element of t has a place of its own: with the dimensions of more than
// one element ordered by stride, each stride reaches past the span of the ones before.
bool places_distinct(const tensor_info &t) {
    std::vector<size_t> order;
    for (size_t i = 0; i < t.dims.size(); i++)
        if (t.dims[i] > 1) order.push_back(i);
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return t.strides[a] < t.strides[b]; });
    int64_t span = 1;
    for (size_t i : order) {
        if (t.strides[i] < span) return false;
        span = t.strides[i] * t.dims[i];
    }
    return true;
}

// An operation's output is written, so it cannot be a by-value input, and no two of its
// elements may share a place (where one would overwrite the other: on a GPU the fused
// kernel may never store a virtual tensor, here each is stored as its strides say).
cudnnStatus_t check_output(const operation_info &op) {
    if (op.output.by_value)
        return fail(CUDNN_STATUS_BAD_PARAM, "%s: its output, tensor UID %lld, is by value (an input only)",
                    op.label.c_str(), (long long)op.output.uid);
    if (!places_distinct(op.output))
        return fail(CUDNN_STATUS_BAD_PARAM,
                    "%s: its output, tensor UID %lld (%s), has strides that put two "
                    "elements in one place",
                    op.label.c_str(), (long long)op.output.uid, shape_text(op.output).c_str());
    return CUDNN_STATUS_SUCCESS;
}

// Pointwise operation (reference, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR):
// Y = op(alpha1 * X) or Y = op(alpha1 * X, alpha2 * B), alphas 1 unless set; the
// ternary BINARY_SELECT takes its condition from TDESC.
cudnnStatus_t finalize_operation_pointwise(descriptor &d) {
    operation_info &op = d.operation;
    const descriptor *pw = child(d, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR);
    const descriptor *x = child(d, CUDNN_ATTR_OPERATION_POINTWISE_XDESC);
    const descriptor *b = child(d, CUDNN_ATTR_OPERATION_POINTWISE_BDESC);
    const descriptor *t = child(d, CUDNN_ATTR_OPERATION_POINTWISE_TDESC);
    op.kind = op_kind::pointwise;
    op.mode = scalar<cudnnPointwiseMode_t>(*pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_POINTWISE_IDENTITY);
    op.axis = scalar<int64_t>(*pw, CUDNN_ATTR_POINTWISE_AXIS, -1);
    op.alpha1 = scalar<float>(d, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, 1.0f);
    op.alpha2 = scalar<float>(d, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, 1.0f);
    op.output = child(d, CUDNN_ATTR_OPERATION_POINTWISE_YDESC)->tensor;
    op.label =
        std::string("pointwise ") + pointwise_mode_name(op.mode) + " writing UID " + std::to_string(op.output.uid);
    op.inputs = {x->tensor};
    int wants = pointwise_unary(op.mode) ? 1 : pointwise_binary(op.mode) ? 2 : 3;
    if ((wants >= 2) != (b != nullptr))
        return fail(CUDNN_STATUS_BAD_PARAM, "%s: CUDNN_ATTR_OPERATION_POINTWISE_BDESC is %s for a mode of %d input(s)",
                    op.label.c_str(), b ? "set" : "missing", wants);
    if ((wants == 3) != (t != nullptr))
        return fail(CUDNN_STATUS_BAD_PARAM, "%s: CUDNN_ATTR_OPERATION_POINTWISE_TDESC is %s for a mode of %d input(s)",
                    op.label.c_str(), t ? "set" : "missing", wants);
    if (b) op.inputs.push_back(b->tensor);
    if (t) op.inputs.push_back(t->tensor);
    static const char *const roles[] = {"X", "B", "T"};
    for (size_t i = 0; i < op.inputs.size(); i++)
        CHECK_STATUS(check_broadcast(op, op.inputs[i], roles[i]));
    if (op.mode == CUDNN_POINTWISE_GEN_INDEX && (op.axis < 0 || op.axis >= (int64_t)op.output.dims.size()))
        return fail(CUDNN_STATUS_BAD_PARAM, "%s: GEN_INDEX axis %lld is not a dimension of Y (rank %zu)",
                    op.label.c_str(), (long long)op.axis, op.output.dims.size());
    return check_output(op);
}

// Matmul (reference, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR): C = A B over the last
// two dimensions, A [batch..., M, K], B [batch..., K, N], C [batch..., M, N]. A batch
// dimension of A or B is C's, 1, or a divisor of C's: C's index i then reads the
// operand's i / (C's / the operand's) (grouped-query attention's K and V heads).
cudnnStatus_t finalize_operation_matmul(descriptor &d) {
    operation_info &op = d.operation;
    op.kind = op_kind::matmul;
    const tensor_info &a = child(d, CUDNN_ATTR_OPERATION_MATMUL_ADESC)->tensor;
    const tensor_info &b = child(d, CUDNN_ATTR_OPERATION_MATMUL_BDESC)->tensor;
    op.output = child(d, CUDNN_ATTR_OPERATION_MATMUL_CDESC)->tensor;
    op.inputs = {a, b};
    const tensor_info &c = op.output;
    op.label = "matmul writing UID " + std::to_string(c.uid);
    cudnnDataType_t comp = scalar<cudnnDataType_t>(*child(d, CUDNN_ATTR_OPERATION_MATMUL_DESC),
                                                   CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_DATA_FLOAT);
    if (comp != CUDNN_DATA_FLOAT)
        return fail(CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE,
                    "%s: compute type %s; the emulation accumulates in FLOAT only", op.label.c_str(),
                    data_type_name(comp));
    for (const tensor_info *t : {&a, &b, &c})
        if (!float_type(t->type))
            return fail(CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE,
                        "%s: tensor UID %lld is %s; matmul operands are FLOAT, HALF or BFLOAT16 here", op.label.c_str(),
                        (long long)t->uid, data_type_name(t->type));
    size_t r = c.dims.size();
    bool fits = r >= 2 && a.dims.size() == r && b.dims.size() == r && a.dims[r - 2] == c.dims[r - 2] &&
                b.dims[r - 1] == c.dims[r - 1] && a.dims[r - 1] == b.dims[r - 2];
    for (size_t i = 0; fits && i + 2 < r; i++)
        fits = c.dims[i] % a.dims[i] == 0 && c.dims[i] % b.dims[i] == 0;
    if (!fits)
        return fail(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH,
                    "%s: A %s times B %s does not make C %s (A [batch..., M, K], B [batch..., K, N], each batch "
                    "dimension of A and B C's, 1 or a divisor of C's)",
                    op.label.c_str(), shape_text(a).c_str(), shape_text(b).c_str(), shape_text(c).c_str());
    return check_output(op);
}

// Reduction (reference, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR): each dimension of
// Y is X's or 1 (reduced); here also a divisor of X's, each element of Y then combining
// a run of X's dimension / Y's consecutive indices (dK and dV of grouped-query
// attention: query heads h*g .. h*g+g-1 into key head h).
cudnnStatus_t finalize_operation_reduction(descriptor &d) {
    operation_info &op = d.operation;
    op.kind = op_kind::reduction;
    const tensor_info &x = child(d, CUDNN_ATTR_OPERATION_REDUCTION_XDESC)->tensor;
    op.output = child(d, CUDNN_ATTR_OPERATION_REDUCTION_YDESC)->tensor;
    op.inputs = {x};
    const tensor_info &y = op.output;
    const descriptor &rd = *child(d, CUDNN_ATTR_OPERATION_REDUCTION_DESC);
    op.reduce = scalar<cudnnReduceTensorOp_t>(rd, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_REDUCE_TENSOR_ADD);
    op.label = std::string("reduction ") + reduction_name(op.reduce) + " writing UID " + std::to_string(y.uid);
    cudnnDataType_t comp = scalar<cudnnDataType_t>(rd, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_DATA_FLOAT);
    if (comp != CUDNN_DATA_FLOAT)
        return fail(CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE, "%s: compute type %s; the emulation reduces in FLOAT only",
                    op.label.c_str(), data_type_name(comp));
    if (!float_type(x.type) || !float_type(y.type))
        return fail(CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE,
                    "%s: X is %s and Y %s; reductions are on FLOAT, HALF or BFLOAT16 here", op.label.c_str(),
                    data_type_name(x.type), data_type_name(y.type));
    bool fits = x.dims.size() == y.dims.size();
    for (size_t i = 0; fits && i < x.dims.size(); i++)
        fits = y.dims[i] <= x.dims[i] && x.dims[i] % y.dims[i] == 0;
    if (!fits)
        return fail(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH,
                    "%s: Y %s is not X %s reduced (each dimension of Y X's, 1 or a divisor of X's)", op.label.c_str(),
                    shape_text(y).c_str(), shape_text(x).c_str());
    return check_output(op);
}

// The offset of an index in a tensor's memory.
size_t offset_of(const std::vector<int64_t> &index, const std::vector<int64_t> &strides) {
    size_t at = 0;
    for (size_t i = 0; i < index.size(); i++)
        at += (size_t)index[i] * (size_t)strides[i];
    return at;
}

// Calls f(index) for every index of dims, the last dimension fastest.
template <typename F> void for_each_index(const std::vector<int64_t> &dims, F f) {
    std::vector<int64_t> index(dims.size(), 0);
    size_t total = 1;
    for (int64_t n : dims)
        total *= (size_t)n;
    for (size_t n = 0; n < total; n++) {
        f(index);
        for (size_t i = dims.size(); i-- > 0;) {
            if (++index[i] < dims[i]) break;
            index[i] = 0;
        }
    }
}

// Reshape, as cudnn-frontend's reshape uses it (frontend "Reshape": another logical
// shape and stride over the same elements; its default VIEW_ONLY mode is a view of the
// same layout): Y's element at index i is the element of X stored at Y's offset of i,
// both strides describing one storage. SDPA's backward uses it for transposes ([b, h,
// s_q, s_kv] with strides {.., s_kv, 1} viewed as [b, h, s_kv, s_q] with strides
// {.., 1, s_kv}). Every element of Y must be an element of X, and no two the same; a
// change of data type rounds (FLOAT to BFLOAT16 between virtual tensors).
cudnnStatus_t finalize_operation_reshape(descriptor &d) {
    operation_info &op = d.operation;
    op.kind = op_kind::reshape;
    const tensor_info &x = child(d, CUDNN_ATTR_OPERATION_RESHAPE_XDESC)->tensor;
    op.output = child(d, CUDNN_ATTR_OPERATION_RESHAPE_YDESC)->tensor;
    op.inputs = {x};
    const tensor_info &y = op.output;
    op.label = "reshape writing UID " + std::to_string(y.uid);
    if (x.type != y.type && !(float_type(x.type) && float_type(y.type)))
        return fail(CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE, "%s: X is %s and Y %s; only float types convert",
                    op.label.c_str(), data_type_name(x.type), data_type_name(y.type));
    bool fits = x.elements() == y.elements() && y.extent() <= x.extent();
    if (fits) {
        std::vector<bool> of_x(x.extent()), seen(x.extent());
        for_each_index(x.dims, [&](const std::vector<int64_t> &i) { of_x[offset_of(i, x.strides)] = true; });
        for_each_index(y.dims, [&](const std::vector<int64_t> &i) {
            size_t at = offset_of(i, y.strides);
            fits = fits && of_x[at] && !seen[at];
            seen[at] = true;
        });
    }
    if (!fits)
        return fail(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH, "%s: Y %s does not view the elements of X %s one for one",
                    op.label.c_str(), shape_text(y).c_str(), shape_text(x).c_str());
    return check_output(op);
}

// The operation graph: its tensors by UID (one UID, one tensor), each written by at most
// one operation, every virtual tensor by exactly one, nothing writing a by-value tensor,
// and no cycle. Its operations run in dependency order, ties in the order given.
// Non-virtual tensors that no operation writes are the graph's inputs, the others its
// outputs.
cudnnStatus_t finalize_graph(descriptor &d) {
    auto prog = std::make_shared<program>();
    const std::vector<std::shared_ptr<const descriptor>> &ops = find(d, CUDNN_ATTR_OPERATIONGRAPH_OPS)->descriptors;
    std::map<int64_t, size_t> by_uid;
    std::vector<int> writer; // per tensor: the operation writing it, or -1
    auto intern = [&](const tensor_info &t, const operation_info &op, size_t *index) {
        auto it = by_uid.find(t.uid);
        if (it == by_uid.end()) {
            *index = prog->tensors.size();
            by_uid[t.uid] = *index;
            prog->tensors.push_back(t);
            writer.push_back(-1);
            return CUDNN_STATUS_SUCCESS;
        }
        *index = it->second;
        const tensor_info &first = prog->tensors[*index];
        if (first == t) return CUDNN_STATUS_SUCCESS;
        return fail(CUDNN_STATUS_BAD_PARAM_DUPLICATED_ENTRIES,
                    "UID %lld names two different tensors: %s%s%s, and %s%s%s in the %s", (long long)t.uid,
                    shape_text(first).c_str(), first.is_virtual ? " virtual" : "", first.by_value ? " by value" : "",
                    shape_text(t).c_str(), t.is_virtual ? " virtual" : "", t.by_value ? " by value" : "",
                    op.label.c_str());
    };
    std::vector<program::step> given;
    for (const std::shared_ptr<const descriptor> &o : ops) {
        program::step s{o->operation, {}, 0};
        for (const tensor_info &t : s.operation.inputs) {
            size_t index;
            CHECK_STATUS(intern(t, s.operation, &index));
            s.inputs.push_back(index);
        }
        CHECK_STATUS(intern(s.operation.output, s.operation, &s.output));
        if (writer[s.output] != -1)
            return fail(CUDNN_STATUS_BAD_PARAM, "tensor UID %lld is written by two operations: the %s and the %s",
                        (long long)s.operation.output.uid, given[(size_t)writer[s.output]].operation.label.c_str(),
                        s.operation.label.c_str());
        writer[s.output] = (int)given.size();
        given.push_back(std::move(s));
    }
    for (const program::step &s : given)
        for (size_t i : s.inputs)
            if (prog->tensors[i].is_virtual && writer[i] == -1)
                return fail(CUDNN_STATUS_BAD_PARAM,
                            "virtual tensor UID %lld is read by the %s but no operation writes it",
                            (long long)prog->tensors[i].uid, s.operation.label.c_str());
    std::vector<bool> done(given.size()), written(prog->tensors.size());
    for (size_t n = 0; n < given.size(); n++) {
        size_t next = 0;
        for (; next < given.size(); next++) {
            if (done[next]) continue;
            bool ready = true;
            for (size_t i : given[next].inputs)
                ready = ready && (writer[i] == -1 || written[i]);
            if (ready) break;
        }
        if (next == given.size()) {
            size_t stuck = 0;
            while (done[stuck])
                stuck++;
            return fail(CUDNN_STATUS_BAD_PARAM, "the graph has a cycle: no operation left can run, the %s among them",
                        given[stuck].operation.label.c_str());
        }
        done[next] = true;
        written[given[next].output] = true;
        prog->steps.push_back(given[next]);
    }
    d.graph_program = prog;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t finalize_engine(descriptor &d) {
    int64_t index = scalar<int64_t>(d, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, -1);
    if (index != 0)
        return fail(CUDNN_STATUS_BAD_PARAM_OUT_OF_BOUND,
                    "engine global index %lld: the emulation has one engine per graph (global index 0)",
                    (long long)index);
    d.graph_program = child(d, CUDNN_ATTR_ENGINE_OPERATION_GRAPH)->graph_program;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t finalize_variant_pack(descriptor &d) {
    std::vector<int64_t> uids = array<int64_t>(d, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS);
    size_t pointers = (size_t)find(d, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS)->count;
    if (uids.size() != pointers)
        return fail(CUDNN_STATUS_BAD_PARAM, "%zu unique IDs but %zu data pointers", uids.size(), pointers);
    std::sort(uids.begin(), uids.end());
    for (size_t i = 1; i < uids.size(); i++)
        if (uids[i] == uids[i - 1])
            return fail(CUDNN_STATUS_BAD_PARAM_DUPLICATED_ENTRIES, "UID %lld appears twice", (long long)uids[i]);
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t finalize(descriptor &d) {
    for (const rule &r : rules)
        if (r.owner == d.type && r.required && !find(d, r.name))
            return fail(CUDNN_STATUS_BAD_PARAM, "a %s needs %s, which is not set", type_name(d), r.text);
    switch (d.type) {
    case CUDNN_BACKEND_TENSOR_DESCRIPTOR: return finalize_tensor(d);
    case CUDNN_BACKEND_POINTWISE_DESCRIPTOR: return finalize_pointwise(d);
    case CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR: return finalize_operation_pointwise(d);
    case CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR: return finalize_operation_matmul(d);
    case CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR: return finalize_operation_reduction(d);
    case CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR: return finalize_operation_reshape(d);
    case CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR: return finalize_graph(d);
    case CUDNN_BACKEND_ENGINE_DESCRIPTOR: return finalize_engine(d);
    case CUDNN_BACKEND_ENGINECFG_DESCRIPTOR:
        d.graph_program = child(d, CUDNN_ATTR_ENGINECFG_ENGINE)->graph_program;
        return CUDNN_STATUS_SUCCESS;
    case CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR:
        d.graph_program = child(d, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG)->graph_program;
        d.workspace_bytes = WORKSPACE_BYTES_PER_OPERATION * (int64_t)d.graph_program->steps.size();
        return CUDNN_STATUS_SUCCESS;
    case CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR: return finalize_variant_pack(d);
    default: return CUDNN_STATUS_SUCCESS; // the others' values were checked when set
    }
}

// The heuristic's one result: a finalized engine configuration of engine 0 of the graph.
descriptor heuristic_result(const descriptor &heuristic) {
    std::shared_ptr<const descriptor> graph = find(heuristic, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH)->descriptors[0];
    auto engine = std::make_shared<descriptor>(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    int64_t index = 0;
    put_descriptor(*engine, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, graph);
    put(*engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, &index);
    engine->graph_program = graph->graph_program;
    engine->finalized = true;
    descriptor config(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    put_descriptor(config, CUDNN_ATTR_ENGINECFG_ENGINE, engine);
    config.graph_program = graph->graph_program;
    config.finalized = true;
    return config;
}

// ---- execution ----

// One execution, its pointers bound: runs on the stream's thread.
struct execution {
    std::shared_ptr<const program> graph_program;
    std::vector<void *> data;                         // per tensor; virtual ones set when run
    std::vector<std::vector<unsigned char>> by_value; // copies of the by-value tensors' host values
    void *workspace = nullptr;
    size_t workspace_bytes = 0;
    int device = 0;

    void run();
    void pointwise(const program::step &s) const;
    void matmul(const program::step &s) const;
    void reduction(const program::step &s) const;
    void reshape(const program::step &s) const;
};

// A tensor's strides with those of its dimensions of 1 zeroed, so that the output's
// index reads the broadcast element.
std::vector<int64_t> broadcast_strides(const tensor_info &t) {
    std::vector<int64_t> s = t.strides;
    for (size_t i = 0; i < s.size(); i++)
        if (t.dims[i] == 1) s[i] = 0;
    return s;
}

// Pointwise modes (reference, cudnnPointwiseMode_t): comparisons give 1 or 0 (BOOLEAN
// outputs hold them as such), BINARY_SELECT is y = t ? x : b (cudnn-frontend's causal
// mask passes the scores as x, the mask value as b and the row >= column condition as
// t), GEN_INDEX is y = the element's index along AXIS of Y's dimensions. Math in fp32
// with C's functions, so EXP and LOG of -inf are expf's 0 and logf's -inf.
float pointwise_value(cudnnPointwiseMode_t mode, float x, float b, float t, int64_t index) {
    switch (mode) {
    case CUDNN_POINTWISE_ADD: return x + b;
    case CUDNN_POINTWISE_SUB: return x - b;
    case CUDNN_POINTWISE_MUL: return x * b;
    case CUDNN_POINTWISE_DIV: return x / b;
    case CUDNN_POINTWISE_MAX: return fmaxf(x, b);
    case CUDNN_POINTWISE_MIN: return fminf(x, b);
    case CUDNN_POINTWISE_EXP: return expf(x);
    case CUDNN_POINTWISE_LOG: return logf(x);
    case CUDNN_POINTWISE_NEG: return -x;
    case CUDNN_POINTWISE_CMP_EQ: return x == b;
    case CUDNN_POINTWISE_CMP_NEQ: return x != b;
    case CUDNN_POINTWISE_CMP_GT: return x > b;
    case CUDNN_POINTWISE_CMP_GE: return x >= b;
    case CUDNN_POINTWISE_CMP_LT: return x < b;
    case CUDNN_POINTWISE_CMP_LE: return x <= b;
    case CUDNN_POINTWISE_BINARY_SELECT: return t != 0.0f ? x : b;
    case CUDNN_POINTWISE_GEN_INDEX: return (float)index;
    default: return x; // IDENTITY
    }
}

void execution::pointwise(const program::step &s) const {
    const operation_info &op = s.operation;
    const tensor_info &y = graph_program->tensors[s.output];
    std::vector<std::vector<int64_t>> strides;
    for (size_t i : s.inputs)
        strides.push_back(broadcast_strides(graph_program->tensors[i]));
    auto input = [&](size_t k, const std::vector<int64_t> &index) {
        size_t i = s.inputs[k];
        return load(graph_program->tensors[i].type, data[i], offset_of(index, strides[k]));
    };
    size_t n = s.inputs.size();
    for_each_index(y.dims, [&](const std::vector<int64_t> &index) {
        float x = op.alpha1 * input(0, index);
        float b = n > 1 ? op.alpha2 * input(1, index) : 0.0f;
        float t = n > 2 ? input(2, index) : 0.0f;
        int64_t along = op.mode == CUDNN_POINTWISE_GEN_INDEX ? index[(size_t)op.axis] : 0;
        store(y.type, data[s.output], offset_of(index, y.strides), pointwise_value(op.mode, x, b, t, along));
    });
}

void execution::matmul(const program::step &s) const {
    const tensor_info &a = graph_program->tensors[s.inputs[0]], &b = graph_program->tensors[s.inputs[1]];
    const tensor_info &c = graph_program->tensors[s.output];
    const void *pa = data[s.inputs[0]], *pb = data[s.inputs[1]];
    size_t r = c.dims.size();
    int64_t k_count = a.dims[r - 1];
    for_each_index(c.dims, [&](const std::vector<int64_t> &index) {
        size_t at_a = (size_t)index[r - 2] * (size_t)a.strides[r - 2];
        size_t at_b = (size_t)index[r - 1] * (size_t)b.strides[r - 1];
        for (size_t i = 0; i + 2 < r; i++) {
            at_a += (size_t)(index[i] / (c.dims[i] / a.dims[i])) * (size_t)a.strides[i];
            at_b += (size_t)(index[i] / (c.dims[i] / b.dims[i])) * (size_t)b.strides[i];
        }
        float sum = 0.0f;
        for (int64_t k = 0; k < k_count; k++)
            sum += load(a.type, pa, at_a + (size_t)k * (size_t)a.strides[r - 1]) *
                   load(b.type, pb, at_b + (size_t)k * (size_t)b.strides[r - 2]);
        store(c.type, data[s.output], offset_of(index, c.strides), sum);
    });
}

// Each element of Y combines its run of X's elements in X's index order, from ADD's 0,
// MUL's 1, MAX's -inf, MIN's +inf or AMAX's 0; a NaN carries through MAX, MIN and AMAX.
void execution::reduction(const program::step &s) const {
    const tensor_info &x = graph_program->tensors[s.inputs[0]], &y = graph_program->tensors[s.output];
    const void *px = data[s.inputs[0]];
    std::vector<int64_t> group(x.dims.size()), at(x.dims.size());
    for (size_t i = 0; i < group.size(); i++)
        group[i] = x.dims[i] / y.dims[i];
    cudnnReduceTensorOp_t op = s.operation.reduce;
    float start = op == CUDNN_REDUCE_TENSOR_MUL   ? 1.0f
                  : op == CUDNN_REDUCE_TENSOR_MAX ? -INFINITY
                  : op == CUDNN_REDUCE_TENSOR_MIN ? INFINITY
                                                  : 0.0f;
    for_each_index(y.dims, [&](const std::vector<int64_t> &index) {
        float acc = start;
        for_each_index(group, [&](const std::vector<int64_t> &within) {
            for (size_t i = 0; i < at.size(); i++)
                at[i] = index[i] * group[i] + within[i];
            float v = load(x.type, px, offset_of(at, x.strides));
            switch (op) {
            case CUDNN_REDUCE_TENSOR_ADD: acc += v; break;
            case CUDNN_REDUCE_TENSOR_MUL: acc *= v; break;
            case CUDNN_REDUCE_TENSOR_MAX: acc = v > acc || isnan(v) ? v : acc; break;
            case CUDNN_REDUCE_TENSOR_MIN: acc = v < acc || isnan(v) ? v : acc; break;
            default: acc = fabsf(v) > acc || isnan(v) ? fabsf(v) : acc; break; // AMAX
            }
        });
        store(y.type, data[s.output], offset_of(index, y.strides), acc);
    });
}

void execution::reshape(const program::step &s) const {
    const tensor_info &x = graph_program->tensors[s.inputs[0]], &y = graph_program->tensors[s.output];
    for_each_index(y.dims, [&](const std::vector<int64_t> &index) {
        size_t at = offset_of(index, y.strides);
        store(y.type, data[s.output], at, load(x.type, data[s.inputs[0]], at));
    });
}

void execution::run() {
    // A faulted context runs nothing more. The memory checked at cudnnBackendExecute is
    // still there: cudaFree waits for the device's work to finish.
    if (cuda_emu::sticky(device)) return;
    memset(workspace, 0xff, workspace_bytes);
    // Virtual tensors start as all bits set too: an element no operation wrote reads NaN.
    std::vector<std::vector<unsigned char>> virtual_memory(graph_program->tensors.size());
    for (size_t i = 0; i < graph_program->tensors.size(); i++)
        if (graph_program->tensors[i].is_virtual) {
            virtual_memory[i].assign(graph_program->tensors[i].bytes(), 0xff);
            data[i] = virtual_memory[i].data();
        }
    for (const program::step &s : graph_program->steps) {
        switch (s.operation.kind) {
        case op_kind::pointwise: pointwise(s); break;
        case op_kind::matmul: matmul(s); break;
        case op_kind::reduction: reduction(s); break;
        case op_kind::reshape: reshape(s); break;
        }
    }
}

// Binds the variant pack's pointers to the plan's tensors, checking each (reference,
// cudnnBackendExecute: BAD_PARAM "an incorrect or inconsistent value is encountered,
// for example a required data pointer is invalid").
cudnnStatus_t bind(const descriptor &plan, const descriptor &pack, int device, execution *job) {
    job->graph_program = plan.graph_program;
    job->device = device;
    const std::vector<tensor_info> &tensors = job->graph_program->tensors;
    std::vector<int64_t> uids = array<int64_t>(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS);
    std::vector<void *> pointers = array<void *>(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS);
    job->data.assign(tensors.size(), nullptr);
    job->by_value.resize(tensors.size());
    for (size_t i = 0; i < tensors.size(); i++) {
        const tensor_info &t = tensors[i];
        if (t.is_virtual) continue;
        auto found = std::find(uids.begin(), uids.end(), t.uid);
        if (found == uids.end())
            return fail(CUDNN_STATUS_BAD_PARAM, "tensor UID %lld (%s) of the graph has no pointer in the variant pack",
                        (long long)t.uid, shape_text(t).c_str());
        void *p = pointers[(size_t)(found - uids.begin())];
        if (!p)
            return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "tensor UID %lld: the variant pack's pointer is NULL",
                        (long long)t.uid);
        if (t.by_value) {
            // The frontend passes scalars (the attention scale, -inf) by value: a host
            // pointer, read now, so the caller's variable may change once this returns.
            if (cuda_emu::classify(p, 1).kind == cuda_emu::mem::device)
                return fail(
                    CUDNN_STATUS_BAD_PARAM,
                    "by-value tensor UID %lld: %p is device memory; a by-value tensor's value(s) come from host memory",
                    (long long)t.uid, p);
            job->by_value[i].assign((const unsigned char *)p, (const unsigned char *)p + t.bytes());
            job->data[i] = job->by_value[i].data();
            continue;
        }
        cuda_emu::region r = cuda_emu::classify(p, t.bytes());
        if (r.kind != cuda_emu::mem::device || r.device != device)
            return fail(CUDNN_STATUS_BAD_PARAM,
                        "tensor UID %lld: %p is not %zu bytes (%s) inside one allocation of device %d's memory",
                        (long long)t.uid, p, t.bytes(), shape_text(t).c_str(), device);
        if ((uintptr_t)p % (uintptr_t)t.alignment)
            return fail(CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER,
                        "tensor UID %lld: %p is not aligned to the tensor's byte alignment %lld", (long long)t.uid, p,
                        (long long)t.alignment);
        job->data[i] = p;
    }
    job->workspace = scalar<void *>(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, nullptr);
    job->workspace_bytes = (size_t)plan.workspace_bytes;
    if (job->workspace_bytes) {
        cuda_emu::region r = cuda_emu::classify(job->workspace, job->workspace_bytes);
        if (r.kind != cuda_emu::mem::device || r.device != device)
            return fail(CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT,
                        "the workspace %p is not %zu bytes of device %d's memory (the plan's workspace size; too "
                        "small, freed, or not device memory)",
                        job->workspace, job->workspace_bytes, device);
        uintptr_t w = (uintptr_t)job->workspace, w_end = w + job->workspace_bytes;
        for (size_t i = 0; i < tensors.size(); i++) {
            uintptr_t p = (uintptr_t)job->data[i], p_end = p + tensors[i].bytes();
            if (!tensors[i].is_virtual && !tensors[i].by_value && p < w_end && w < p_end)
                return fail(CUDNN_STATUS_BAD_PARAM, "the workspace %p overlaps tensor UID %lld's memory (%p)",
                            job->workspace, (long long)tensors[i].uid, job->data[i]);
        }
    }
    return CUDNN_STATUS_SUCCESS;
}

// ---- status names ----

const char *status_name(cudnnStatus_t s) {
    switch (s) {
#define CASE(x)                                                                                                        \
    case x: return #x;
        CASE(CUDNN_STATUS_SUCCESS)
        CASE(CUDNN_STATUS_NOT_INITIALIZED)
        CASE(CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH)
        CASE(CUDNN_STATUS_SERIALIZATION_VERSION_MISMATCH)
        CASE(CUDNN_STATUS_DEPRECATED)
        CASE(CUDNN_STATUS_LICENSE_ERROR)
        CASE(CUDNN_STATUS_RUNTIME_IN_PROGRESS)
        CASE(CUDNN_STATUS_RUNTIME_FP_OVERFLOW)
        CASE(CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED)
        CASE(CUDNN_STATUS_BAD_PARAM)
        CASE(CUDNN_STATUS_BAD_PARAM_NULL_POINTER)
        CASE(CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER)
        CASE(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED)
        CASE(CUDNN_STATUS_BAD_PARAM_OUT_OF_BOUND)
        CASE(CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT)
        CASE(CUDNN_STATUS_BAD_PARAM_STREAM_MISMATCH)
        CASE(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH)
        CASE(CUDNN_STATUS_BAD_PARAM_DUPLICATED_ENTRIES)
        CASE(CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE)
        CASE(CUDNN_STATUS_BAD_PARAM_CUDA_GRAPH_MISMATCH)
        CASE(CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE)
        CASE(CUDNN_STATUS_NOT_SUPPORTED)
        CASE(CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN)
        CASE(CUDNN_STATUS_NOT_SUPPORTED_SHAPE)
        CASE(CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE)
        CASE(CUDNN_STATUS_NOT_SUPPORTED_LAYOUT)
        CASE(CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDA_DRIVER)
        CASE(CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDART)
        CASE(CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH)
        CASE(CUDNN_STATUS_NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING)
        CASE(CUDNN_STATUS_NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE)
        CASE(CUDNN_STATUS_NOT_SUPPORTED_SHARED_MEMORY_INSUFFICIENT)
        CASE(CUDNN_STATUS_NOT_SUPPORTED_PADDING)
        CASE(CUDNN_STATUS_NOT_SUPPORTED_BAD_LAUNCH_PARAM)
        CASE(CUDNN_STATUS_NOT_SUPPORTED_CUDA_GRAPH_NATIVE_API)
        CASE(CUDNN_STATUS_NOT_SUPPORTED_INVALID_DYNAMIC_SHAPE)
        CASE(CUDNN_STATUS_INTERNAL_ERROR)
        CASE(CUDNN_STATUS_INTERNAL_ERROR_COMPILATION_FAILED)
        CASE(CUDNN_STATUS_INTERNAL_ERROR_UNEXPECTED_VALUE)
        CASE(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED)
        CASE(CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED)
        CASE(CUDNN_STATUS_INTERNAL_ERROR_BAD_LAUNCH_PARAM)
        CASE(CUDNN_STATUS_INTERNAL_ERROR_TEXTURE_CREATION_FAILED)
        CASE(CUDNN_STATUS_EXECUTION_FAILED)
        CASE(CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER)
        CASE(CUDNN_STATUS_EXECUTION_FAILED_CUBLAS)
        CASE(CUDNN_STATUS_EXECUTION_FAILED_CUDART)
        CASE(CUDNN_STATUS_EXECUTION_FAILED_CURAND)
#undef CASE
    }
    return "CUDNN_UNKNOWN_STATUS";
}

// The emulated library is there only when CUDA_EMU_CUDNN=1 (see the top of this file).
bool enabled_hook() {
    const char *v = getenv("CUDA_EMU_CUDNN");
    return v && strcmp(v, "1") == 0;
}

bool no_engine_hook() {
    const char *v = getenv("CUDA_EMU_CUDNN_NO_ENGINE");
    return v && strcmp(v, "1") == 0;
}

// The descriptor a cudnnBackendDescriptor_t names, or the failure (recorded).
cudnnStatus_t descriptor_of(cudnnBackendDescriptor_t p, descriptor **out) {
    if (!live_descriptor(p))
        return fail(CUDNN_STATUS_BAD_PARAM, "%p is not a live backend descriptor (never created, or destroyed)", p);
    *out = (descriptor *)p;
    return CUDNN_STATUS_SUCCESS;
}

} // namespace

extern "C" {

// Off, the library is absent, and zinf's loader (gpu/cuda/cudnn_load.c) answers 0 for a
// library it could not load, with the reason as the last error: so does the emulation.
size_t cudnnGetVersion(void) {
    current_call = "cudnnGetVersion";
    if (!enabled_hook()) {
        fail(CUDNN_STATUS_NOT_INITIALIZED, "the emulated cuDNN is off (CUDA_EMU_CUDNN is not 1), as on a machine "
                                           "without libcudnn; set CUDA_EMU_CUDNN=1 to turn it on");
        return 0;
    }
    return CUDNN_VERSION;
}

const char *cudnnGetErrorString(cudnnStatus_t status) { return status_name(status); }

void cudnnGetLastErrorString(char *message, size_t max_size) {
    if (!message || !max_size) return;
    size_t n = std::min(last_error.size(), max_size - 1);
    memcpy(message, last_error.data(), n);
    message[n] = 0;
}

cudnnStatus_t cudnnCreate(cudnnHandle_t *handle) {
    current_call = "cudnnCreate";
    if (!enabled_hook())
        return fail(CUDNN_STATUS_NOT_INITIALIZED, "the emulated cuDNN is off (CUDA_EMU_CUDNN is not 1), as on a "
                                                  "machine without libcudnn; set CUDA_EMU_CUDNN=1 to turn it on");
    if (!handle) return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "handle is NULL");
    cudnnContext *h = new (std::nothrow) cudnnContext{cuda_emu::current_device(), nullptr};
    if (!h) return fail(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED, "out of host memory");
    std::lock_guard<std::mutex> g(registry_mutex);
    live_handles.insert(h);
    *handle = h;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroy(cudnnHandle_t handle) {
    current_call = "cudnnDestroy";
    {
        std::lock_guard<std::mutex> g(registry_mutex);
        if (!handle || !live_handles.erase(handle))
            return fail(CUDNN_STATUS_BAD_PARAM, "%p is not a live cudnnHandle_t", (void *)handle);
    }
    delete handle;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t streamId) {
    current_call = "cudnnSetStream";
    if (!live_handle(handle)) return fail(CUDNN_STATUS_BAD_PARAM, "%p is not a live cudnnHandle_t", (void *)handle);
    handle->stream = streamId;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetStream(cudnnHandle_t handle, cudaStream_t *streamId) {
    current_call = "cudnnGetStream";
    if (!live_handle(handle)) return fail(CUDNN_STATUS_BAD_PARAM, "%p is not a live cudnnHandle_t", (void *)handle);
    if (!streamId) return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "streamId is NULL");
    *streamId = handle->stream;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t descriptorType,
                                           cudnnBackendDescriptor_t *descriptor_out) {
    current_call = "cudnnBackendCreateDescriptor";
    if (!descriptor_out) return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "descriptor is NULL");
    if (!emulated_type(descriptorType))
        return fail(CUDNN_STATUS_NOT_SUPPORTED, "%s (%d) is a descriptor type the emulation leaves out",
                    descriptor_type_name(descriptorType), (int)descriptorType);
    descriptor *d = new (std::nothrow) descriptor(descriptorType);
    if (!d) return fail(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED, "out of host memory");
    std::lock_guard<std::mutex> g(registry_mutex);
    live_descriptors.insert(d);
    *descriptor_out = d;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t descriptor_in) {
    current_call = "cudnnBackendDestroyDescriptor";
    {
        std::lock_guard<std::mutex> g(registry_mutex);
        if (!descriptor_in || !live_descriptors.erase(descriptor_in))
            return fail(CUDNN_STATUS_BAD_PARAM, "%p is not a live backend descriptor (never created, or destroyed)",
                        descriptor_in);
    }
    delete (descriptor *)descriptor_in;
    return CUDNN_STATUS_SUCCESS;
}

// Reference, cudnnBackendSetAttribute: NOT_INITIALIZED once the descriptor is finalized;
// BAD_PARAM for an attribute the descriptor lacks, the wrong attribute type, an
// unexpected element count or invalid values; NOT_SUPPORTED for values this version
// does not support. A descriptor element must be finalized (BAD_PARAM_NOT_FINALIZED):
// its finalized state is what the attribute keeps.
cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t descriptor_in,
                                       cudnnBackendAttributeName_t attributeName,
                                       cudnnBackendAttributeType_t attributeType, int64_t elementCount,
                                       const void *arrayOfElements) {
    current_call = "cudnnBackendSetAttribute";
    descriptor *d;
    CHECK_STATUS(descriptor_of(descriptor_in, &d));
    if (d->finalized)
        return fail(CUDNN_STATUS_NOT_INITIALIZED, "the %s is finalized; %s can no longer change", type_name(*d),
                    attribute_name(attributeName));
    const rule *r;
    CHECK_STATUS(rule_for(*d, attributeName, &r));
    if (r->read_only)
        return fail(CUDNN_STATUS_BAD_PARAM, "%s of a %s is computed, to be read only", r->text, type_name(*d));
    if (attributeType != r->type)
        return fail(CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE, "%s of a %s is %s, not %s", r->text, type_name(*d),
                    attribute_type_name(r->type), attribute_type_name(attributeType));
    if (elementCount < r->min_count || elementCount > r->max_count)
        return fail(CUDNN_STATUS_BAD_PARAM, "%s of a %s takes %lld to %lld elements, not %lld", r->text, type_name(*d),
                    (long long)r->min_count, (long long)r->max_count, (long long)elementCount);
    if (elementCount && !arrayOfElements)
        return fail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER, "%s: arrayOfElements is NULL", r->text);
    CHECK_STATUS(check_elements(*r, elementCount, arrayOfElements));
    value v;
    v.type = attributeType;
    v.count = elementCount;
    if (r->type == CUDNN_TYPE_BACKEND_DESCRIPTOR) {
        for (int64_t i = 0; i < elementCount; i++) {
            descriptor *e;
            CHECK_STATUS(descriptor_of(((const cudnnBackendDescriptor_t *)arrayOfElements)[i], &e));
            bool operation = e->type == CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR ||
                             e->type == CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR ||
                             e->type == CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR ||
                             e->type == CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR;
            if (r->element == ANY_OPERATION ? !operation : e->type != r->element)
                return fail(CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE, "%s element %lld is a %s, not %s", r->text,
                            (long long)i, type_name(*e),
                            r->element == ANY_OPERATION ? "an operation" : descriptor_type_name(r->element));
            if (!e->finalized)
                return fail(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED, "%s element %lld, a %s, is not finalized", r->text,
                            (long long)i, type_name(*e));
            v.descriptors.push_back(std::make_shared<const descriptor>(*e));
        }
    } else {
        v.bytes.assign((const unsigned char *)arrayOfElements,
                       (const unsigned char *)arrayOfElements + elementCount * element_size(r->type));
    }
    d->values[attributeName] = std::move(v);
    return CUDNN_STATUS_SUCCESS;
}

// Reference, cudnnBackendGetAttribute: NOT_INITIALIZED before the descriptor is
// finalized; *elementCount is the attribute's number of elements, and the least of that
// and requestedElementCount are written. Descriptor elements are descriptors the caller
// created beforehand, of the attribute's descriptor type; each gets a finalized copy.
cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t const descriptor_in,
                                       cudnnBackendAttributeName_t attributeName,
                                       cudnnBackendAttributeType_t attributeType, int64_t requestedElementCount,
                                       int64_t *elementCount, void *arrayOfElements) {
    current_call = "cudnnBackendGetAttribute";
    descriptor *d;
    CHECK_STATUS(descriptor_of(descriptor_in, &d));
    const rule *r;
    CHECK_STATUS(rule_for(*d, attributeName, &r));
    if (!d->finalized)
        return fail(CUDNN_STATUS_NOT_INITIALIZED, "the %s is not finalized; its attributes can be read once it is",
                    type_name(*d));
    if (attributeType != r->type)
        return fail(CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE, "%s of a %s is %s, not %s", r->text, type_name(*d),
                    attribute_type_name(r->type), attribute_type_name(attributeType));
    if (requestedElementCount < 0 || (requestedElementCount > 0 && !arrayOfElements))
        return fail(CUDNN_STATUS_BAD_PARAM, "%s: %lld elements requested into %p", r->text,
                    (long long)requestedElementCount, arrayOfElements);
    // What the attribute holds: computed for the read-only ones.
    value computed;
    const value *v = find(*d, attributeName);
    if (attributeName == CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT ||
        attributeName == CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE) {
        int64_t n = attributeName == CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE ? d->workspace_bytes : 1;
        computed.type = CUDNN_TYPE_INT64;
        computed.count = 1;
        computed.bytes.assign((const unsigned char *)&n, (const unsigned char *)&n + sizeof n);
        v = &computed;
    } else if (attributeName == CUDNN_ATTR_ENGINEHEUR_RESULTS) {
        computed.type = CUDNN_TYPE_BACKEND_DESCRIPTOR;
        computed.count = no_engine_hook() ? 0 : 1;
        if (computed.count) computed.descriptors = {std::make_shared<const descriptor>(heuristic_result(*d))};
        v = &computed;
    }
    int64_t count = v ? v->count : 0, n = std::min(count, requestedElementCount);
    if (r->type == CUDNN_TYPE_BACKEND_DESCRIPTOR) {
        for (int64_t i = 0; i < n; i++) {
            descriptor *e;
            CHECK_STATUS(descriptor_of(((cudnnBackendDescriptor_t *)arrayOfElements)[i], &e));
            if (e->type != v->descriptors[(size_t)i]->type)
                return fail(CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE, "%s element %lld: a %s to fill, not a %s", r->text,
                            (long long)i, descriptor_type_name(v->descriptors[(size_t)i]->type), type_name(*e));
        }
        for (int64_t i = 0; i < n; i++)
            *(descriptor *)((cudnnBackendDescriptor_t *)arrayOfElements)[i] = *v->descriptors[(size_t)i];
    } else if (n) {
        memcpy(arrayOfElements, v->bytes.data(), (size_t)n * element_size(r->type));
    }
    if (elementCount) *elementCount = count;
    return CUDNN_STATUS_SUCCESS;
}

// Reference, cudnnBackendFinalize: BAD_PARAM for invalid attribute values or
// combinations (a required attribute missing among them), NOT_SUPPORTED for values the
// version does not support. A failed finalize leaves the descriptor unfinalized.
cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t descriptor_in) {
    current_call = "cudnnBackendFinalize";
    descriptor *d;
    CHECK_STATUS(descriptor_of(descriptor_in, &d));
    if (d->finalized) return fail(CUDNN_STATUS_BAD_PARAM, "the %s is already finalized", type_name(*d));
    CHECK_STATUS(finalize(*d));
    d->finalized = true;
    return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendExecute(cudnnHandle_t handle, cudnnBackendDescriptor_t executionPlan,
                                  cudnnBackendDescriptor_t variantPack) {
    current_call = "cudnnBackendExecute";
    if (!live_handle(handle)) return fail(CUDNN_STATUS_BAD_PARAM, "%p is not a live cudnnHandle_t", (void *)handle);
    descriptor *plan, *pack;
    CHECK_STATUS(descriptor_of(executionPlan, &plan));
    CHECK_STATUS(descriptor_of(variantPack, &pack));
    if (plan->type != CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR || pack->type != CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR)
        return fail(CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE, "a %s and a %s, not an execution plan and a variant pack",
                    type_name(*plan), type_name(*pack));
    if (!plan->finalized || !pack->finalized)
        return fail(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED, "the execution plan is %sfinalized, the variant pack %s",
                    plan->finalized ? "" : "not ", pack->finalized ? "finalized" : "not finalized");
    int device = cuda_emu::stream_device(handle->stream);
    if (device != handle->device)
        return fail(CUDNN_STATUS_BAD_PARAM_STREAM_MISMATCH,
                    "the handle's stream is device %d's, the handle device %d's", device, handle->device);
    auto job = std::make_shared<execution>();
    CHECK_STATUS(bind(*plan, *pack, device, job.get()));
    cudaError_t err = cuda_emu::enqueue(handle->stream, [job] { job->run(); });
    if (err != cudaSuccess)
        return fail(CUDNN_STATUS_EXECUTION_FAILED, "the stream took no work: %s", cudaGetErrorName(err));
    return CUDNN_STATUS_SUCCESS;
}

} // extern "C"
