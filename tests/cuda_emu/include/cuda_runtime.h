// CUDA emulation (tests only): the parts of the CUDA Runtime API and of CUDA C++ that
// zinf uses, written from NVIDIA's CUDA Runtime API reference and CUDA C++ Programming
// Guide, so that gpu/cuda/*.cu and runtime/comm/nccl.c build with a host compiler and run
// on the CPU. Device memory is host memory tagged with its device; each stream is a
// thread that runs its work in order; a kernel's blocks run one after another on their
// stream's thread, each block's threads as cooperative fibers, so __syncthreads,
// __shared__ memory and warp shuffles behave as on a GPU. The C part serves C files
// (nccl.c); device code needs C++.
#ifndef CUDA_EMU_RUNTIME_H
#define CUDA_EMU_RUNTIME_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda_emu_defs.h"

#ifdef __cplusplus
extern "C" {
#endif

// ---- types (values as in the Runtime API reference) ----

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInitializationError = 3,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidDevicePointer = 17,
    cudaErrorInvalidMemcpyDirection = 21,
    cudaErrorInsufficientDriver = 35,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorNoKernelImageForDevice = 209,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorNotReady = 600,
    cudaErrorIllegalAddress = 700,
    cudaErrorLaunchOutOfResources = 701,
    cudaErrorHostMemoryAlreadyRegistered = 712,
    cudaErrorHostMemoryNotRegistered = 713,
    cudaErrorLaunchFailure = 719,
    cudaErrorNotPermitted = 800,
    cudaErrorNotSupported = 801,
    cudaErrorUnknown = 999,
} cudaError_t;

typedef enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4,
} cudaMemcpyKind;

typedef enum cudaDataType_t {
    CUDA_R_16F = 2,
    CUDA_R_32F = 0,
    CUDA_R_64F = 1,
    CUDA_R_16BF = 14,
} cudaDataType_t;

#define cudaStreamDefault        0x00
#define cudaStreamNonBlocking    0x01
#define cudaEventDefault         0x00
#define cudaEventBlockingSync    0x01
#define cudaEventDisableTiming   0x02
#define cudaHostRegisterDefault  0x00
#define cudaHostRegisterPortable 0x01
#define cudaHostRegisterMapped   0x02

typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
typedef struct CUmemPoolHandle_st *cudaMemPool_t;

// Stream-ordered allocation (the Runtime API's memory pools), the parts zinf uses.
enum cudaMemAllocationType { cudaMemAllocationTypePinned = 0x1 };
enum cudaMemAllocationHandleType { cudaMemHandleTypeNone = 0x0 };
enum cudaMemLocationType { cudaMemLocationTypeDevice = 1 };
enum cudaMemPoolAttr {
    cudaMemPoolReuseFollowEventDependencies = 0x1,
    cudaMemPoolReuseAllowOpportunistic = 0x2,
    cudaMemPoolReuseAllowInternalDependencies = 0x3,
    cudaMemPoolAttrReleaseThreshold = 0x4,
};
struct cudaMemLocation {
    enum cudaMemLocationType type;
    int id;
};
struct cudaMemPoolProps {
    enum cudaMemAllocationType allocType;
    enum cudaMemAllocationHandleType handleTypes;
    struct cudaMemLocation location;
    void *win32SecurityAttributes;
    size_t maxSize;
    unsigned short usage;
    unsigned char reserved[54];
};
typedef void (*cudaHostFn_t)(void *userData);

typedef struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;
    size_t sharedMemPerBlock;      // without opting in: the most a launch may ask
    size_t sharedMemPerBlockOptin; // with cudaFuncAttributeMaxDynamicSharedMemorySize
    int regsPerBlock;
    int warpSize;
    int maxThreadsPerBlock;
    int maxThreadsDim[3];
    int maxGridSize[3];
    int major, minor;
    int multiProcessorCount;
    int maxThreadsPerMultiProcessor;
    int pciDomainID, pciBusID, pciDeviceID;
    int unifiedAddressing;
    int canMapHostMemory;
} cudaDeviceProp;

// ---- device management ----
cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int *device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int device);
cudaError_t cudaDeviceGetPCIBusId(char *pciBusId, int len, int device);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaRuntimeGetVersion(int *runtimeVersion);
cudaError_t cudaDriverGetVersion(int *driverVersion);

// ---- errors ----
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
const char *cudaGetErrorString(cudaError_t error);
const char *cudaGetErrorName(cudaError_t error);

// ---- memory ----
cudaError_t cudaMalloc(void **devPtr, size_t size);
cudaError_t cudaFree(void *devPtr);
cudaError_t cudaMemGetInfo(size_t *free, size_t *total);
cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned int flags);
cudaError_t cudaHostUnregister(void *ptr);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, cudaMemcpyKind kind, cudaStream_t stream);
cudaError_t cudaMemset(void *devPtr, int value, size_t count);
cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream);
cudaError_t cudaMemPoolCreate(cudaMemPool_t *memPool, const struct cudaMemPoolProps *poolProps);
cudaError_t cudaMemPoolDestroy(cudaMemPool_t memPool);
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void *value);
cudaError_t cudaMemPoolTrimTo(cudaMemPool_t memPool, size_t minBytesToKeep);
cudaError_t cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t memPool, cudaStream_t stream);
cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t hStream);

// ---- streams and events ----
cudaError_t cudaStreamCreate(cudaStream_t *pStream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags);
cudaError_t cudaStreamCreateWithPriority(cudaStream_t *pStream, unsigned int flags, int priority);
cudaError_t cudaStreamGetPriority(cudaStream_t hStream, int *priority);
cudaError_t cudaDeviceGetStreamPriorityRange(int *leastPriority, int *greatestPriority);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamQuery(cudaStream_t stream);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags);
cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *userData);
cudaError_t cudaEventCreate(cudaEvent_t *event);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end);

#ifdef __cplusplus
} // extern "C"

// ---- device code (C++) ----

#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

struct uint3 {
    unsigned x, y, z;
};

// CUDA's 16-byte vector type (CUDA C++ Programming Guide, "Built-in Vector Types":
// alignment 16).
struct alignas(16) uint4 {
    unsigned x, y, z, w;
};

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
};

namespace cuda_emu {

// What a running thread sees of itself; the scheduler points `self` at it before it
// resumes the thread.
struct thread_view {
    uint3 tid, bid;
    dim3 bdim, gdim;
};
extern thread_local const thread_view *self;

struct launch_config {
    dim3 grid, block;
    size_t smem;
    cudaStream_t stream;
};

// Checks the configuration as the runtime does (the error is the launch's, seen by
// cudaGetLastError) and enqueues `threads` blocks of `body` on the stream. ptrs are the
// pointer arguments, checked when the kernel runs: each must be null, memory of the
// stream's device or registered host memory, as the GPU could reach.
void launch(const launch_config &cfg, const void *kernel, std::function<void()> body, std::vector<const void *> ptrs);

// Warp-level exchange of 64-bit payloads (shuffles; __syncwarp) and the block barrier.
enum shfl_mode { SHFL_IDX, SHFL_UP, SHFL_DOWN, SHFL_XOR };
uint64_t warp_exchange(unsigned mask, uint64_t v, shfl_mode mode, int arg, int width);
void block_barrier();

template <typename... A> struct bound_launch {
    launch_config cfg;
    std::tuple<A...> args;
};

struct launcher {
    launch_config cfg;
    launcher(dim3 grid, dim3 block, size_t smem = 0, cudaStream_t stream = 0) : cfg{grid, block, smem, stream} {}
    template <typename... A> bound_launch<std::decay_t<A>...> operator()(A &&...a) const {
        return {cfg, std::tuple<std::decay_t<A>...>(std::forward<A>(a)...)};
    }
};

template <typename T> void add_if_pointer(std::vector<const void *> &out, const T &v) {
    if constexpr (std::is_pointer_v<T>) out.push_back((const void *)v);
}

template <typename Tuple, typename Args, size_t... I> Tuple convert(const Args &args, std::index_sequence<I...>) {
    return Tuple(std::get<I>(args)...);
}

// `kernel ->* launcher(grid, block, smem, stream)(args...)`: the arguments are converted
// to the kernel's parameter types when launched, as by a call, and every thread gets
// its own copy of them.
template <typename... P, typename... A> void operator->*(void (*kernel)(P...), bound_launch<A...> &&b) {
    static_assert(sizeof...(P) == sizeof...(A), "kernel launched with the wrong number of arguments");
    using params_t = std::tuple<std::decay_t<P>...>;
    params_t params = convert<params_t>(b.args, std::index_sequence_for<P...>{});
    std::vector<const void *> ptrs;
    std::apply([&](const auto &...p) { (add_if_pointer(ptrs, p), ...); }, params);
    launch(
        b.cfg, (const void *)kernel, [kernel, params]() { std::apply(kernel, params); }, std::move(ptrs));
}

} // namespace cuda_emu

// The launch syntax's stand-in, for the one macro in gpu/cuda/cuda_backend.h.
#define CUDA_EMU_LAUNCH(...) ->*::cuda_emu::launcher(__VA_ARGS__)

#define threadIdx (::cuda_emu::self->tid)
#define blockIdx  (::cuda_emu::self->bid)
#define blockDim  (::cuda_emu::self->bdim)
#define gridDim   (::cuda_emu::self->gdim)
constexpr int warpSize = 32;

// Block-shared: one object per block in flight. A block runs on one host thread from
// start to end and its threads are fibers of that thread, so a thread-local static is
// exactly one per block.
#define __shared__ static thread_local

namespace cuda_emu {
// A block's shared objects start undefined on a GPU; a thread-local static would keep
// the previous block's contents (and a block loading the same tile would hide a race).
// The first thread of a block to name an object here fills it with all bits set (a NaN
// in every float type), so a read of what no thread of this block wrote shows. Kernels
// name their __shared__ objects once, where they are declared (gpu/cuda's
// SHARED_FRESH); a check in the tests holds every declaration to it.
void shared_fresh(void *p, size_t bytes);

// mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32 d, a, b, c (PTX ISA,
// "Matrix Fragments for mma.m16n8k16 with floating point type"): every lane of a full
// warp brings its fragments of A (16 x 16, four registers of two 16-bit values, the
// lower element in the low half), B (16 x 8, two registers) and C (16 x 8, four
// floats) and gets its fragment of D = A B + C. Each element of D is its C plus the 16
// exact products, summed in double and rounded once to fp32 (the hardware's order of
// fp32 additions is not documented; kernels are held to the host backend within a
// tolerance).
void mma_m16n8k16(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4], bool bf16);

// ldmatrix.sync.aligned.m8n8.x4{.trans}.shared.b16 d, [row] (PTX ISA, "ldmatrix"):
// every lane of a full warp gives the shared-memory address of one row of 8 16-bit
// values, 16-byte aligned (lane 8 i + r: row r of matrix i), and gets in d[i] its
// fragment of matrix i as an mma takes it: row lane / 4, columns 2 (lane % 4) and
// 2 (lane % 4) + 1; with trans, of the matrix transposed.
void ldmatrix_x4(uint32_t d[4], const void *row, bool trans);

// cp.async.cg.shared.global [dst], [src], 16, src_bytes; cp.async.commit_group;
// cp.async.wait_group pending (PTX ISA, "cp.async"): a thread's copy of src_bytes from
// global memory into 16 bytes of shared memory, the rest zeros, both addresses 16-byte
// aligned; commit closes the thread's copies since the last commit into a group, and
// wait returns once all but the `pending` most recent groups have landed. Where a copy
// lands before its wait is not defined; a thread must not exit with copies not waited for.
void cp_async_16(void *dst, const void *src, int src_bytes);
void cp_async_commit();
void cp_async_wait(int pending);

// A load or store of `bytes` (2, 4, 8 or 16) at p in one access: a GPU faults where p is
// not aligned to its size (Programming Guide, "Device Memory Accesses"), and so does the
// emulation.
void vector_access(const void *p, size_t bytes);
template <typename... T> void shared_fresh_all(T &...objects) { (shared_fresh((void *)&objects, sizeof objects), ...); }
} // namespace cuda_emu

inline void __syncthreads() { cuda_emu::block_barrier(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { cuda_emu::warp_exchange(mask, 0, cuda_emu::SHFL_IDX, 0, 32); }

namespace cuda_emu {
template <typename T> T shfl(unsigned mask, T v, shfl_mode mode, int arg, int width) {
    static_assert(sizeof(T) <= 8, "shuffles move 4 or 8 bytes");
    uint64_t raw = 0;
    __builtin_memcpy(&raw, &v, sizeof v);
    raw = warp_exchange(mask, raw, mode, arg, width);
    T r;
    __builtin_memcpy(&r, &raw, sizeof r);
    return r;
}
} // namespace cuda_emu

template <typename T> T __shfl_sync(unsigned mask, T v, int srcLane, int width = 32) {
    return cuda_emu::shfl(mask, v, cuda_emu::SHFL_IDX, srcLane, width);
}
template <typename T> T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    return cuda_emu::shfl(mask, v, cuda_emu::SHFL_UP, (int)delta, width);
}
template <typename T> T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    return cuda_emu::shfl(mask, v, cuda_emu::SHFL_DOWN, (int)delta, width);
}
template <typename T> T __shfl_xor_sync(unsigned mask, T v, int laneMask, int width = 32) {
    return cuda_emu::shfl(mask, v, cuda_emu::SHFL_XOR, laneMask, width);
}

// ---- intrinsics: IEEE single operations rounded to nearest even ----
// The host build has no floating-point contraction (-ffp-contract=off), so each of
// these is exactly one IEEE operation.
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return sqrtf(a); }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
namespace cuda_emu {
template <typename To, typename From> To bits_as(From v) {
    static_assert(sizeof(To) == sizeof(From), "a reinterpretation keeps the size");
    To t;
    __builtin_memcpy(&t, &v, sizeof t);
    return t;
}
} // namespace cuda_emu
inline float __int_as_float(int i) { return cuda_emu::bits_as<float>(i); }
inline float __uint_as_float(unsigned i) { return cuda_emu::bits_as<float>(i); }
inline int __float_as_int(float f) { return cuda_emu::bits_as<int>(f); }
inline unsigned __float_as_uint(float f) { return cuda_emu::bits_as<unsigned>(f); }

#endif // __cplusplus
#endif
