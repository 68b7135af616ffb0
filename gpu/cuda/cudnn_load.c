// cuDNN, loaded when a CUDA device that may run its attention opens, never linked:
// zinf runs without it (device.attention "zinf", or "auto" where it is absent), and
// PyTorch's CUDA wheels carry it beside torch rather than in the toolkit. These
// functions take the library's names for the backend (graph) API calls zinf makes
// (hidden: libzinf.so does not export them) and forward to it. The CUDA emulation
// (BACKEND=cuda-emu) defines the same names itself, so this file is built only against
// the toolkit.
#include <cudnn_graph.h>
#include <pthread.h>
#include <stdio.h>

#include "zinf_internal.h"

#define STR_(x) #x
#define STR(x)  STR_(x)
// The soname of the major version the headers describe: its graph API is stable
// across the minor versions (cudnn_graph.h).
#define CUDNN_LIBRARY "libcudnn.so." STR(CUDNN_MAJOR)

// X(name, parameters, arguments) for every cuDNN call that returns a status.
#define CUDNN_CALLS(X)                                                                                                 \
    X(cudnnCreate, (cudnnHandle_t * handle), (handle))                                                                 \
    X(cudnnDestroy, (cudnnHandle_t handle), (handle))                                                                  \
    X(cudnnSetStream, (cudnnHandle_t handle, cudaStream_t stream), (handle, stream))                                   \
    X(cudnnBackendCreateDescriptor, (cudnnBackendDescriptorType_t type, cudnnBackendDescriptor_t * desc),              \
      (type, desc))                                                                                                    \
    X(cudnnBackendDestroyDescriptor, (cudnnBackendDescriptor_t desc), (desc))                                          \
    X(cudnnBackendFinalize, (cudnnBackendDescriptor_t desc), (desc))                                                   \
    X(cudnnBackendSetAttribute,                                                                                        \
      (cudnnBackendDescriptor_t desc, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,              \
       int64_t count, const void *elements),                                                                           \
      (desc, name, type, count, elements))                                                                             \
    X(cudnnBackendGetAttribute,                                                                                        \
      (cudnnBackendDescriptor_t const desc, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,        \
       int64_t requested, int64_t *count, void *elements),                                                             \
      (desc, name, type, requested, count, elements))                                                                  \
    X(cudnnBackendExecute, (cudnnHandle_t handle, cudnnBackendDescriptor_t plan, cudnnBackendDescriptor_t pack),       \
      (handle, plan, pack))

static struct {
    pthread_once_t once;
    char error[256]; // why the library did not load; empty once it did
#define POINTER(name, params, args) cudnnStatus_t(*name) params;
    CUDNN_CALLS(POINTER)
#undef POINTER
    size_t (*cudnnGetVersion)(void);
    const char *(*cudnnGetErrorString)(cudnnStatus_t status);
    void (*cudnnGetLastErrorString)(char *message, size_t max_size);
} L = {.once = PTHREAD_ONCE_INIT};

static void load(void) {
#define NAME(name, params, args) #name,
#define SLOT(name, params, args) (void **)&L.name,
    static const char *const names[] = {"cudnnGetVersion", "cudnnGetErrorString", "cudnnGetLastErrorString",
                                        CUDNN_CALLS(NAME)};
    void **const slots[] = {(void **)&L.cudnnGetVersion, (void **)&L.cudnnGetErrorString,
                            (void **)&L.cudnnGetLastErrorString, CUDNN_CALLS(SLOT)};
#undef NAME
#undef SLOT
    zinf_dl_load(CUDNN_LIBRARY, "cuDNN", names, slots, ZINF_ARRAY_LEN(names), L.error, sizeof L.error);
}

static int loaded(void) {
    pthread_once(&L.once, load);
    return L.error[0] == 0;
}

// Without the library every call fails as not initialized, and the last error's text,
// which every failure report asks for, says why.
#define FORWARD(name, params, args)                                                                                    \
    __attribute__((visibility("hidden"))) cudnnStatus_t name params {                                                  \
        return loaded() ? L.name args : CUDNN_STATUS_NOT_INITIALIZED;                                                  \
    }
CUDNN_CALLS(FORWARD)
#undef FORWARD

__attribute__((visibility("hidden"))) size_t cudnnGetVersion(void) { return loaded() ? L.cudnnGetVersion() : 0; }

__attribute__((visibility("hidden"))) const char *cudnnGetErrorString(cudnnStatus_t status) {
    return loaded() ? L.cudnnGetErrorString(status) : L.error;
}

__attribute__((visibility("hidden"))) void cudnnGetLastErrorString(char *message, size_t max_size) {
    if (loaded())
        L.cudnnGetLastErrorString(message, max_size);
    else
        snprintf(message, max_size, "%s", L.error);
}
