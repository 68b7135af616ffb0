// NCCL, loaded when zinf first calls it instead of with libzinf: a process that loaded
// the toolkit's libnccl.so.2 first forces it on every later library of that soname, so
// `import zinf` ahead of `import torch` left PyTorch, built against a newer NCCL,
// missing symbols (ncclCommResume). These functions take NCCL's names for the calls zinf
// makes (hidden: libzinf.so does not export them) and forward to it. The CUDA emulation
// (BACKEND=cuda-emu) defines the same names itself, so this file is built only against
// the toolkit.
#include <nccl.h>
#include <pthread.h>

#include "zinf_internal.h"

#define STR_(x) #x
#define STR(x) STR_(x)
// The soname of the major version the header describes.
#define NCCL_LIBRARY "libnccl.so." STR(NCCL_MAJOR)

// X(name, parameters, arguments) for every NCCL call that returns a result.
#define NCCL_CALLS(X)                                                                                                  \
    X(ncclGetVersion, (int *version), (version))                                                                       \
    X(ncclGetUniqueId, (ncclUniqueId * id), (id))                                                                      \
    X(ncclCommInitRankConfig, (ncclComm_t * comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t *config),       \
      (comm, nranks, id, rank, config))                                                                                \
    X(ncclCommFinalize, (ncclComm_t comm), (comm))                                                                     \
    X(ncclCommDestroy, (ncclComm_t comm), (comm))                                                                      \
    X(ncclCommAbort, (ncclComm_t comm), (comm))                                                                        \
    X(ncclCommGetAsyncError, (ncclComm_t comm, ncclResult_t * error), (comm, error))                                   \
    X(ncclAllReduce,                                                                                                   \
      (const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm,              \
       cudaStream_t stream),                                                                                           \
      (send, recv, count, type, op, comm, stream))                                                                     \
    X(ncclReduceScatter,                                                                                               \
      (const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm,              \
       cudaStream_t stream),                                                                                           \
      (send, recv, count, type, op, comm, stream))                                                                     \
    X(ncclAllGather,                                                                                                   \
      (const void *send, void *recv, size_t count, ncclDataType_t type, ncclComm_t comm, cudaStream_t stream),        \
      (send, recv, count, type, comm, stream))                                                                         \
    X(ncclAlltoAll,                                                                                                    \
      (const void *send, void *recv, size_t count, ncclDataType_t type, ncclComm_t comm, cudaStream_t stream),        \
      (send, recv, count, type, comm, stream))

static struct {
    pthread_once_t once;
    char error[256]; // why the library did not load; empty once it did
#define POINTER(name, params, args) ncclResult_t(*name) params;
    NCCL_CALLS(POINTER)
#undef POINTER
    const char *(*ncclGetErrorString)(ncclResult_t result);
    const char *(*ncclGetLastError)(ncclComm_t comm);
} L = {.once = PTHREAD_ONCE_INIT};

static void load(void) {
#define NAME(name, params, args) #name,
#define SLOT(name, params, args) (void **)&L.name,
    static const char *const names[] = {"ncclGetErrorString", "ncclGetLastError", NCCL_CALLS(NAME)};
    void **const slots[] = {(void **)&L.ncclGetErrorString, (void **)&L.ncclGetLastError, NCCL_CALLS(SLOT)};
#undef NAME
#undef SLOT
    zinf_dl_load(NCCL_LIBRARY, "NCCL", names, slots, ZINF_ARRAY_LEN(names), L.error, sizeof L.error);
}

static int loaded(void) {
    pthread_once(&L.once, load);
    return L.error[0] == 0;
}

// Without the library every call fails as a system error, and the texts that every
// failure report asks for say why.
#define FORWARD(name, params, args)                                                                                    \
    __attribute__((visibility("hidden"))) ncclResult_t name params { return loaded() ? L.name args : ncclSystemError; }
NCCL_CALLS(FORWARD)
#undef FORWARD

__attribute__((visibility("hidden"))) const char *ncclGetErrorString(ncclResult_t result) {
    return loaded() ? L.ncclGetErrorString(result) : L.error;
}

__attribute__((visibility("hidden"))) const char *ncclGetLastError(ncclComm_t comm) {
    return loaded() ? L.ncclGetLastError(comm) : L.error;
}
