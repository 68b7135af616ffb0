// The CUDA backend's internals, shared by its files (C++ only): the objects behind the
// front end's handles, CUDA/cuBLAS error conversion, storage-type helpers, fixed-order
// block reductions and the op entry points.
#ifndef ZINF_CUDA_BACKEND_H
#define ZINF_CUDA_BACKEND_H

#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "../internal.h"

// ---- objects ----

// attention_cudnn.cu's state: cuDNN's handle and the attention plans built on it.
typedef struct cudnn_attention cudnn_attention;

// d->impl. The cuBLASLt handle holds no per-call state (stream and workspace are
// arguments of each matmul), so every thread and stream of the device shares it.
typedef struct cuda_stream cuda_stream;

// What cuBLASLt's heuristic is told of a product (gemm.cu: the problem, with every
// pointer's alignment), and what it answered: asked once for each such product. Every
// field is eight bytes, so that no padding lies between them: problems compare as bytes.
typedef struct lt_problem {
    int64_t type, op_a, op_b, batch, epilogue;
    int64_t align[4], bias_align, aux_align; // A, B, C, D as cuBLASLt names them
    uint64_t a_rows, a_cols, b_rows, b_cols, c_rows, c_cols;
    int64_t ld[3], stride[3], aux_ld; // A, B, C
} lt_problem;

typedef struct lt_choice {
    lt_problem problem;
    cublasLtMatmulAlgo_t algo;
    bool found; // false: no algorithm for it (zinf's fallback runs)
} lt_choice;

// Distinct products a device remembers; a model has tens (every layer's are alike).
// Past them the heuristic is asked each time.
#define CUDA_LT_CHOICES 256

typedef struct cuda_device {
    int index; // CUDA device index, made current by every entry point
    cublasLtHandle_t lt;
    // The heuristic's answers so far: the query cost the host more than the rest of a
    // product's call, on every product of every pass, and for the same problem it gives
    // the same algorithm, so the bits stay those of asking each time.
    pthread_mutex_t lt_lock; // guards lt_choices and lt_choice_count
    lt_choice lt_choices[CUDA_LT_CHOICES];
    int lt_choice_count;
    cudnn_attention *dnn; // NULL: zinf's attention kernels only (device.attention, or no cuDNN)
    // The front end's buffers come from a memory pool of the device's own, taken on one
    // stream and given back on another: cudaMalloc and cudaFree synchronize every stream
    // of the device, and a step takes and frees gradient and gathered buffers module by
    // module. A free waits, on its stream, for the work queued on every stream of the
    // device before it, as cudaFree's synchronization did, without holding the host.
    cudaMemPool_t pool;
    cudaStream_t alloc_stream, free_stream;
    pthread_mutex_t streams_lock; // guards streams
    cuda_stream *streams;         // the device's live streams
} cuda_device;

// s->impl. Each stream has its own cuBLASLt workspace: two products running at once
// on different streams must not share one, and a private workspace is what keeps
// cuBLAS bit-reproducible with several streams active.
struct cuda_stream {
    cudaStream_t st;
    void *d_lt_ws;       // CUDA_LT_WORKSPACE bytes
    cudaEvent_t reached; // recorded by each free, for the free stream to wait on
    cuda_stream *next;   // in cuda_device.streams
};

// 32 MiB, what cuBLAS asks for on Hopper, one per stream, allocated with the stream
// (outside the front end's memory account, like the CUDA context and cuBLASLt's own).
#define CUDA_LT_WORKSPACE ((size_t)32 << 20)

static inline cuda_device *cuda_dev_of(zinf_device *d) { return (cuda_device *)d->impl; }
static inline cuda_stream *cuda_stream_of(zinf_stream *s) { return (cuda_stream *)s->impl; }

// ---- errors ----

// Record a CUDA failure with the call's name and where it was made; clears the
// runtime's last error so that a later launch check does not report it again.
zinf_status cuda_fail_at(cudaError_t err, const char *call, const char *file, int line);
zinf_status cublas_fail_at(cublasStatus_t st, const char *call, const char *file, int line);

#define ZINF_CUDA_CHECK(call)                                                                                          \
    do {                                                                                                               \
        cudaError_t err_ = (call);                                                                                     \
        if (err_ != cudaSuccess) return cuda_fail_at(err_, #call, __FILE__, __LINE__);                                 \
    } while (0)

// After a kernel launch: a bad configuration or a missing kernel image shows here;
// faults during the run show at the next synchronization.
#define ZINF_CUDA_LAUNCHED(name)                                                                                       \
    do {                                                                                                               \
        cudaError_t err_ = cudaGetLastError();                                                                         \
        if (err_ != cudaSuccess) return cuda_fail_at(err_, name " launch", __FILE__, __LINE__);                        \
    } while (0)

zinf_status cuda_bad_dtype(zinf_dtype dt, const char *op);

// The body of a function that returns fn<T>(args...) for the storage type dt.
#define CUDA_DT_SWITCH(dt, op, fn, ...)                                                                                \
    switch (dt) {                                                                                                      \
    case ZINF_DTYPE_F32: return fn<float>(__VA_ARGS__);                                                                \
    case ZINF_DTYPE_BF16: return fn<__nv_bfloat16>(__VA_ARGS__);                                                       \
    case ZINF_DTYPE_F16: return fn<__half>(__VA_ARGS__);                                                               \
    default: return cuda_bad_dtype(dt, op);                                                                            \
    }

// ---- storage types: loaded to fp32, stored rounded to nearest even ----

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }

__device__ __forceinline__ void store_f32(float *p, float x) { *p = x; }
__device__ __forceinline__ void store_f32(__nv_bfloat16 *p, float x) { *p = __float2bfloat16_rn(x); }
__device__ __forceinline__ void store_f32(__half *p, float x) { *p = __float2half_rn(x); }

// ---- launches ----

// `kernel CUDA_LAUNCH(grid, block, smem, stream)(args...)` is the launch in both builds:
// nvcc's `kernel<<<grid, block, smem, stream>>>(args...)`, or the CPU emulation's that
// the tests build the same sources against (tests/cuda_emu), whose <cuda_runtime.h>
// defines CUDA_EMU_LAUNCH.
#ifdef CUDA_EMU_LAUNCH
#define CUDA_LAUNCH(grid, block, smem, stream) CUDA_EMU_LAUNCH(grid, block, smem, stream)
#else
#define CUDA_LAUNCH(grid, block, smem, stream) <<<grid, block, smem, stream>>>
#endif

// SHARED_FRESH(a, b, ...) follows every __shared__ declaration and names its objects: on
// a GPU nothing, under the emulation the block's first thread to reach it fills them
// with all bits set, as a block's shared memory is undefined when it starts
// (cuda_emu::shared_fresh), so a read of what no thread of the block wrote shows.
#ifdef CUDA_EMU_LAUNCH
#define SHARED_FRESH(...) ::cuda_emu::shared_fresh_all(__VA_ARGS__)
#else
#define SHARED_FRESH(...) ((void)0)
#endif

enum { EW_THREADS = 256, ROW_THREADS = 256 };

// Norms give each row a warp, ROW_WARPS rows a block (llm.c's layernorm kernels): a
// row's sums are the warp's shuffles alone, without shared memory or a barrier, and a
// model's widths (768 to 8192) give each lane 24 to 256 elements.
enum { ROW_WARPS = 8 };
static inline unsigned row_blocks(size_t rows) { return (unsigned)((rows + ROW_WARPS - 1) / ROW_WARPS); }

// Blocks for a grid-stride loop over n elements (n > 0).
static inline unsigned ew_blocks(size_t n) {
    size_t b = (n + EW_THREADS - 1) / EW_THREADS;
    return (unsigned)(b < 65536 ? b : 65536);
}

// Grid-stride loop over n elements.
#define EW_LOOP(i, n)                                                                                                  \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

// ---- vector loads and stores ----

// The V (uint32_t, uint4) at p, aligned to its size, in one load, or stored in one
// store; under the emulation a memcpy, which C++ allows through any pointer, that faults
// where p is not aligned, as the GPU does.
template <typename V> __device__ __forceinline__ V load_as(const void *p) {
#ifdef CUDA_EMU_LAUNCH
    ::cuda_emu::vector_access(p, sizeof(V));
    V v;
    memcpy(&v, p, sizeof v);
    return v;
#else
    return *(const V *)p;
#endif
}

template <typename V> __device__ __forceinline__ void store_as(void *p, V v) {
#ifdef CUDA_EMU_LAUNCH
    ::cuda_emu::vector_access(p, sizeof(V));
    memcpy(p, &v, sizeof v);
#else
    *(V *)p = v;
#endif
}

// A row's elements in chunks of 16 bytes (VN of T): lane l of a warp takes chunks l,
// l + 32, ... of a row. With vec (the row's length a whole number of chunks and every
// row 16-byte aligned) a chunk is one load or store, else VN guarded ones that read
// zeros past C. A warp then keeps 16 bytes a lane in flight per load, where one value
// a lane left an H100's norm backwards at a tenth of its bandwidth.
template <typename T> struct row_chunks {
    static constexpr int VN = 16 / (int)sizeof(T);

    static __device__ __forceinline__ int count(int C) { return (C + VN - 1) / VN; }

    // A chunk's 16 bytes, loaded already, as floats.
    static __device__ __forceinline__ void widen(float (&f)[VN], uint4 u) {
        T t[VN];
        memcpy(t, &u, 16);
#pragma unroll
        for (int k = 0; k < VN; k++)
            f[k] = to_f32(t[k]);
    }

    // A chunk's 16 bytes as stored, zeros past C: what load widens. A kernel that asks
    // for several chunks at once holds them so, at half the registers of floats.
    static __device__ __forceinline__ uint4 fetch(const T *row, int chunk, int C, bool vec) {
        const int i0 = chunk * VN;
        if (vec) return load_as<uint4>(row + i0);
        T t[VN];
#pragma unroll
        for (int k = 0; k < VN; k++)
            if (i0 + k < C)
                t[k] = row[i0 + k];
            else
                store_f32(&t[k], 0.0f);
        uint4 u;
        memcpy(&u, t, 16);
        return u;
    }

    static __device__ __forceinline__ void load(float (&f)[VN], const T *row, int chunk, int C, bool vec) {
        widen(f, fetch(row, chunk, C, vec));
    }

    static __device__ __forceinline__ void store(T *row, const float (&f)[VN], int chunk, int C, bool vec) {
        const int i0 = chunk * VN;
        if (vec) {
            T t[VN];
#pragma unroll
            for (int k = 0; k < VN; k++)
                store_f32(&t[k], f[k]);
            uint4 u;
            memcpy(&u, t, 16);
            store_as(row + i0, u);
            return;
        }
#pragma unroll
        for (int k = 0; k < VN; k++)
            if (i0 + k < C) store_f32(&row[i0 + k], f[k]);
    }
};

// Whether rows of C elements at these bases can go 16 bytes at a time.
template <typename T>
static inline bool rows_in_chunks(int C, const void *a, const void *b, const void *c, const void *d) {
    return C % row_chunks<T>::VN == 0 && ((uintptr_t)a | (uintptr_t)b | (uintptr_t)c | (uintptr_t)d) % 16 == 0;
}

// ---- reductions over a warp, and over a one-dimensional block of NT threads ----
// Lanes combine by xor butterfly (every lane ends with the same value); a block's
// threads then add the warps' results in warp order: a fixed order for a fixed NT, so
// results never depend on scheduling. red: NT / 32 floats of shared memory.

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

template <int NT> __device__ __forceinline__ float block_sum(float v, float *red) {
    v = warp_sum(v);
    __syncthreads(); // red may still be read by the previous reduction
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    float r = red[0];
    for (int w = 1; w < NT / 32; w++)
        r += red[w];
    return r;
}

template <int NT> __device__ __forceinline__ float block_max(float v, float *red) {
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    __syncthreads();
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    float r = red[0];
    for (int w = 1; w < NT / 32; w++)
        r = fmaxf(r, red[w]);
    return r;
}

// ---- ops (arguments checked by the front end) ----

// gemm.cu
zinf_status cuda_gemm(cuda_device *cd, cuda_stream *cs, const zinf_gemm_args *g);

// ops.cu
zinf_status cuda_bias_grad(cuda_stream *cs, zinf_dtype dt, const op_elementwise *e);
zinf_status cuda_layernorm_fwd(cudaStream_t st, zinf_dtype dt, const op_layernorm *a);
zinf_status cuda_layernorm_bwd(cuda_stream *cs, zinf_dtype dt, const op_layernorm *a);
zinf_status cuda_gelu_fwd(cudaStream_t st, zinf_dtype dt, const op_elementwise *e);
zinf_status cuda_gelu_bwd(cudaStream_t st, zinf_dtype dt, const op_elementwise *e);
zinf_status cuda_rmsnorm_fwd(cudaStream_t st, zinf_dtype dt, const op_layernorm *a);
zinf_status cuda_rmsnorm_bwd(cuda_stream *cs, zinf_dtype dt, const op_layernorm *a);
zinf_status cuda_swiglu_fwd(cudaStream_t st, zinf_dtype dt, const op_elementwise *e);
zinf_status cuda_swiglu_bwd(cudaStream_t st, zinf_dtype dt, const op_elementwise *e);
zinf_status cuda_rope(cudaStream_t st, zinf_dtype dt, const op_rope *a, bool backward); // backward: turned back
zinf_status cuda_cross_entropy(cudaStream_t st, zinf_dtype dt, const op_cross_entropy *a);
zinf_status cuda_cross_entropy_grad(cudaStream_t st, zinf_dtype dt, const op_cross_entropy_grad *a);
zinf_status cuda_embedding_fwd(cudaStream_t st, zinf_dtype dt, const op_embedding *a);
zinf_status cuda_embedding_bwd(cudaStream_t st, zinf_dtype dt, const op_embedding *a);
zinf_status cuda_add(cudaStream_t st, zinf_dtype dt, const op_elementwise *e);
zinf_status cuda_scale(cudaStream_t st, zinf_dtype dt, const op_elementwise *e);
zinf_status cuda_cast(cudaStream_t st, zinf_dtype dst_dt, const op_elementwise *e);
zinf_status cuda_accumulate(cudaStream_t st, const op_elementwise *e);
zinf_status cuda_sumsq(cuda_stream *cs, zinf_dtype dt, const op_sumsq *o);
zinf_status cuda_quantize(cudaStream_t st, zinf_dtype dt, const op_quantize *a);
zinf_status cuda_dequantize(cudaStream_t st, zinf_dtype dt, const op_quantize *a);
zinf_status cuda_optim(cudaStream_t st, const op_optim *o);
zinf_status cuda_optim_rows(cudaStream_t st, const op_optim *o);

// attention.cu
zinf_status cuda_attention_fwd(cudaStream_t st, const zinf_attention_args *a);
zinf_status cuda_attention_bwd(cudaStream_t st, const zinf_attention_args *a); // ws: (B, NH, T) fp32

// attention_cudnn.cu: cuDNN's fused attention, or zinf's kernels where it is absent,
// cannot take the shape, or (device.attention "auto") is the slower.
// want AUTO or CUDNN; *out stays NULL where cuDNN does not start and want is AUTO.
zinf_status cudnn_attention_open(zinf_attention_impl want, cudnn_attention **out);
void cudnn_attention_close(cudnn_attention *l); // NULL is a no-op
// Bytes of workspace cuDNN's plans for a's shape need (0: it will not run them).
size_t cudnn_attention_workspace(cudnn_attention *l, const zinf_attention_args *a);
zinf_status cudnn_attention_run(cudnn_attention *l, cudaStream_t st, const zinf_attention_args *a, bool backward);

#endif
