// cuBLASLt, loaded when the first CUDA device opens instead of with every zinf process.
// The library is 540 MB: mapping and relocating it cost 0.13 s of CPU at each start,
// for runs on the host backend and `zinf info` too. These functions take the library's
// names for the calls zinf makes (hidden: libzinf.so does not export them) and forward
// to it. The CUDA emulation (BACKEND=cuda-emu) defines the same names itself, so this
// file is built only against the toolkit.
#include <cublasLt.h>
#include <pthread.h>

#include "zinf_internal.h"

#define STR_(x) #x
#define STR(x) STR_(x)
// The soname of the major version the headers describe.
#define CUBLASLT_LIBRARY "libcublasLt.so." STR(CUBLAS_VER_MAJOR)

// X(name, parameters, arguments) for every cuBLASLt call that returns a status.
#define CUBLASLT_CALLS(X)                                                                                              \
    X(cublasLtCreate, (cublasLtHandle_t * handle), (handle))                                                           \
    X(cublasLtDestroy, (cublasLtHandle_t handle), (handle))                                                            \
    X(cublasLtMatmul,                                                                                                  \
      (cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void *alpha, const void *a,                           \
       cublasLtMatrixLayout_t a_layout, const void *b, cublasLtMatrixLayout_t b_layout, const void *beta,              \
       const void *c, cublasLtMatrixLayout_t c_layout, void *d, cublasLtMatrixLayout_t d_layout,                       \
       const cublasLtMatmulAlgo_t *algo, void *workspace, size_t workspace_bytes, cudaStream_t stream),                \
      (handle, desc, alpha, a, a_layout, b, b_layout, beta, c, c_layout, d, d_layout, algo, workspace,                 \
       workspace_bytes, stream))                                                                                       \
    X(cublasLtMatmulAlgoGetHeuristic,                                                                                  \
      (cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a_layout,                            \
       cublasLtMatrixLayout_t b_layout, cublasLtMatrixLayout_t c_layout, cublasLtMatrixLayout_t d_layout,              \
       cublasLtMatmulPreference_t preference, int requested, cublasLtMatmulHeuristicResult_t results[],                \
       int *returned),                                                                                                 \
      (handle, desc, a_layout, b_layout, c_layout, d_layout, preference, requested, results, returned))                \
    X(cublasLtMatmulDescCreate, (cublasLtMatmulDesc_t * desc, cublasComputeType_t compute, cudaDataType_t scale),      \
      (desc, compute, scale))                                                                                          \
    X(cublasLtMatmulDescDestroy, (cublasLtMatmulDesc_t desc), (desc))                                                  \
    X(cublasLtMatmulDescSetAttribute,                                                                                  \
      (cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const void *buf, size_t bytes),                 \
      (desc, attr, buf, bytes))                                                                                        \
    X(cublasLtMatmulPreferenceCreate, (cublasLtMatmulPreference_t * preference), (preference))                         \
    X(cublasLtMatmulPreferenceDestroy, (cublasLtMatmulPreference_t preference), (preference))                          \
    X(cublasLtMatmulPreferenceSetAttribute,                                                                            \
      (cublasLtMatmulPreference_t preference, cublasLtMatmulPreferenceAttributes_t attr, const void *buf,              \
       size_t bytes),                                                                                                  \
      (preference, attr, buf, bytes))                                                                                  \
    X(cublasLtMatrixLayoutCreate,                                                                                      \
      (cublasLtMatrixLayout_t * layout, cudaDataType type, uint64_t rows, uint64_t cols, int64_t ld),                  \
      (layout, type, rows, cols, ld))                                                                                  \
    X(cublasLtMatrixLayoutDestroy, (cublasLtMatrixLayout_t layout), (layout))                                          \
    X(cublasLtMatrixLayoutSetAttribute,                                                                                \
      (cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr, const void *buf, size_t bytes),            \
      (layout, attr, buf, bytes))

static struct {
    pthread_once_t once;
    char error[256]; // why the library did not load; empty once it did
#define POINTER(name, params, args) cublasStatus_t(*name) params;
    CUBLASLT_CALLS(POINTER)
#undef POINTER
    const char *(*cublasLtGetStatusString)(cublasStatus_t status);
} L = {.once = PTHREAD_ONCE_INIT};

static void load(void) {
#define NAME(name, params, args) #name,
#define SLOT(name, params, args) (void **)&L.name,
    static const char *const names[] = {"cublasLtGetStatusString", CUBLASLT_CALLS(NAME)};
    void **const slots[] = {(void **)&L.cublasLtGetStatusString, CUBLASLT_CALLS(SLOT)};
#undef NAME
#undef SLOT
    zinf_dl_load(CUBLASLT_LIBRARY, "cuBLASLt", names, slots, ZINF_ARRAY_LEN(names), L.error, sizeof L.error);
}

static int loaded(void) {
    pthread_once(&L.once, load);
    return L.error[0] == 0;
}

// Without the library every call fails as uninitialized, and the status's text, which
// every failure report asks for, says why.
#define FORWARD(name, params, args)                                                                                    \
    __attribute__((visibility("hidden"))) cublasStatus_t name params {                                                \
        return loaded() ? L.name args : CUBLAS_STATUS_NOT_INITIALIZED;                                                 \
    }
CUBLASLT_CALLS(FORWARD)
#undef FORWARD

__attribute__((visibility("hidden"))) const char *cublasLtGetStatusString(cublasStatus_t status) {
    return loaded() ? L.cublasLtGetStatusString(status) : L.error;
}
