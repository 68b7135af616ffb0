// CUDA emulation (tests only): the part of cuBLASLt that zinf uses (the matrix product,
// its descriptors and the heuristic query), with the names and values of NVIDIA's
// cuBLASLt API reference. What the emulation computes is said in cublaslt.cpp.
#ifndef CUDA_EMU_CUBLASLT_H
#define CUDA_EMU_CUBLASLT_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_ALLOC_FAILED = 3,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_ARCH_MISMATCH = 8,
    CUBLAS_STATUS_MAPPING_ERROR = 11,
    CUBLAS_STATUS_EXECUTION_FAILED = 13,
    CUBLAS_STATUS_INTERNAL_ERROR = 14,
    CUBLAS_STATUS_NOT_SUPPORTED = 15,
} cublasStatus_t;

// OP_C is OP_T on real data.
typedef enum {
    CUBLAS_OP_N = 0,
    CUBLAS_OP_T = 1,
    CUBLAS_OP_C = 2,
} cublasOperation_t;

typedef enum {
    CUBLAS_COMPUTE_16F = 64,
    CUBLAS_COMPUTE_16F_PEDANTIC = 65,
    CUBLAS_COMPUTE_32F = 68,
    CUBLAS_COMPUTE_32F_PEDANTIC = 69,
    CUBLAS_COMPUTE_64F = 70,
    CUBLAS_COMPUTE_64F_PEDANTIC = 71,
    CUBLAS_COMPUTE_32I = 72,
    CUBLAS_COMPUTE_32I_PEDANTIC = 73,
    CUBLAS_COMPUTE_32F_FAST_16F = 74,
    CUBLAS_COMPUTE_32F_FAST_16BF = 75,
    CUBLAS_COMPUTE_32F_FAST_TF32 = 77,
} cublasComputeType_t;

typedef struct cublasLtContext *cublasLtHandle_t;
typedef struct cublasLtMatmulDescOpaque *cublasLtMatmulDesc_t;
typedef struct cublasLtMatrixLayoutOpaque *cublasLtMatrixLayout_t;
typedef struct cublasLtMatmulPreferenceOpaque *cublasLtMatmulPreference_t;

// An algorithm as the heuristic returns it, passed back to cublasLtMatmul.
typedef struct {
    uint64_t data[8];
} cublasLtMatmulAlgo_t;

typedef struct {
    cublasLtMatmulAlgo_t algo;
    size_t workspaceSize; // bytes the algorithm needs
    cublasStatus_t state; // the other fields hold only when this is CUBLAS_STATUS_SUCCESS
    float wavesCount;     // device utilization: 1.0 fills the GPU once
    int reserved[4];
} cublasLtMatmulHeuristicResult_t;

typedef enum {
    CUBLASLT_POINTER_MODE_HOST = 0,
    CUBLASLT_POINTER_MODE_DEVICE = 1,
    CUBLASLT_POINTER_MODE_DEVICE_VECTOR = 2,
    CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_ZERO = 3,
    CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_HOST = 4,
} cublasLtPointerMode_t;

typedef enum {
    CUBLASLT_EPILOGUE_DEFAULT = 1,
    CUBLASLT_EPILOGUE_RELU = 2,
    CUBLASLT_EPILOGUE_BIAS = 4,
    CUBLASLT_EPILOGUE_RELU_BIAS = 6,
    CUBLASLT_EPILOGUE_GELU = 32,
    CUBLASLT_EPILOGUE_GELU_BIAS = 36,
    CUBLASLT_EPILOGUE_GELU_AUX = 160,      // GELU, its input stored in the aux matrix
    CUBLASLT_EPILOGUE_GELU_AUX_BIAS = 164, // the bias, then GELU_AUX
    CUBLASLT_EPILOGUE_DGELU = 192,         // D times GELU's derivative at the aux matrix
} cublasLtEpilogue_t;

typedef enum {
    CUBLASLT_ORDER_COL = 0,
    CUBLASLT_ORDER_ROW = 1,
} cublasLtOrder_t;

// The type each attribute's value has is in the comment; SetAttribute takes exactly
// that many bytes.
typedef enum {
    CUBLASLT_MATMUL_DESC_COMPUTE_TYPE = 0,            // int32_t, cublasComputeType_t
    CUBLASLT_MATMUL_DESC_SCALE_TYPE = 1,              // int32_t, cudaDataType_t of alpha and beta
    CUBLASLT_MATMUL_DESC_POINTER_MODE = 2,            // int32_t, cublasLtPointerMode_t; default HOST
    CUBLASLT_MATMUL_DESC_TRANSA = 3,                  // int32_t, cublasOperation_t; default N
    CUBLASLT_MATMUL_DESC_TRANSB = 4,                  // int32_t, cublasOperation_t; default N
    CUBLASLT_MATMUL_DESC_TRANSC = 5,                  // int32_t, cublasOperation_t; only N is supported
    CUBLASLT_MATMUL_DESC_EPILOGUE = 7,                // uint32_t, cublasLtEpilogue_t; default DEFAULT
    CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,            // const void *, one element per row of D
    CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE = 10,      // int64_t elements between the items' biases; default 0
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER = 11,   // void *, the GELU input matrix (column order, as D)
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = 12,        // int64_t; divisible by 8, at least D's rows
    CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE = 22, // int32_t, cudaDataType_t; default -1: D's type
    CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = 26,         // int32_t, cudaDataType_t; default -1: D's type
} cublasLtMatmulDescAttributes_t;

typedef enum {
    CUBLASLT_MATRIX_LAYOUT_TYPE = 0,                 // uint32_t, cudaDataType_t
    CUBLASLT_MATRIX_LAYOUT_ORDER = 1,                // int32_t, cublasLtOrder_t; default COL
    CUBLASLT_MATRIX_LAYOUT_ROWS = 2,                 // uint64_t
    CUBLASLT_MATRIX_LAYOUT_COLS = 3,                 // uint64_t
    CUBLASLT_MATRIX_LAYOUT_LD = 4,                   // int64_t, at least rows (COL) or cols (ROW)
    CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT = 5,          // int32_t; default 1
    CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET = 6, // int64_t elements between items; default 0
} cublasLtMatrixLayoutAttribute_t;

// The emulation has one search mode.
typedef enum {
    CUBLASLT_SEARCH_BEST_FIT = 0,
} cublasLtMatmulSearch_t;

typedef enum {
    CUBLASLT_MATMUL_PREF_SEARCH_MODE = 0,           // uint32_t, cublasLtMatmulSearch_t
    CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,   // uint64_t; default 0
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5, // uint32_t, the alignment A's pointers have; default 256
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6, // uint32_t; default 256
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7, // uint32_t; default 256
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8, // uint32_t; default 256
} cublasLtMatmulPreferenceAttributes_t;

cublasStatus_t cublasLtCreate(cublasLtHandle_t *lightHandle);
cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle);
const char *cublasLtGetStatusName(cublasStatus_t status);
const char *cublasLtGetStatusString(cublasStatus_t status);

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *matmulDesc, cublasComputeType_t computeType,
                                        cudaDataType_t scaleType);
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc);
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr,
                                              const void *buf, size_t sizeInBytes);
cublasStatus_t cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr,
                                              void *buf, size_t sizeInBytes, size_t *sizeWritten);

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *matLayout, cudaDataType_t type, uint64_t rows,
                                          uint64_t cols, int64_t ld);
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout);
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t matLayout, cublasLtMatrixLayoutAttribute_t attr,
                                                const void *buf, size_t sizeInBytes);
cublasStatus_t cublasLtMatrixLayoutGetAttribute(cublasLtMatrixLayout_t matLayout, cublasLtMatrixLayoutAttribute_t attr,
                                                void *buf, size_t sizeInBytes, size_t *sizeWritten);

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref);
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref);
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void *buf,
                                                    size_t sizeInBytes);

// Writes at most one result: the emulation has one algorithm.
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc,
                                              cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                              cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                              cublasLtMatmulPreference_t preference, int requestedAlgoCount,
                                              cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
                                              int *returnAlgoCount);

// D = alpha op(A) op(B) + beta C, then the epilogue; enqueued on stream.
cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc, const void *alpha,
                              const void *A, cublasLtMatrixLayout_t Adesc, const void *B, cublasLtMatrixLayout_t Bdesc,
                              const void *beta, const void *C, cublasLtMatrixLayout_t Cdesc, void *D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t *algo, void *workspace,
                              size_t workspaceSizeInBytes, cudaStream_t stream);

#ifdef __cplusplus
} // extern "C"
#endif

#endif
