// Copies from global into shared memory that do not pass through registers (cp.async,
// compute capability 8.0 and later; C++ only). A tile's copies are issued, committed as
// a group, and waited for before the tile is read (and a barrier, before other threads'
// copies are): the next tile streams in while this one computes, and the registers
// that held a tile in flight are free. Under the tests' CUDA emulation these are the
// emulation's, written from the PTX ISA (tests/cuda_emu).
#ifndef ZINF_CUDA_CP_ASYNC_H
#define ZINF_CUDA_CP_ASYNC_H

#include "cuda_backend.h"

// 16 bytes at dst (shared memory) from src_bytes (0 to 16) at src (global memory), the
// rest zeros; both 16-byte aligned. With src_bytes 0 nothing is read at src.
__device__ __forceinline__ void cp_async_16(void *dst, const void *src, int src_bytes) {
#ifdef CUDA_EMU_LAUNCH
    ::cuda_emu::cp_async_16(dst, src, src_bytes);
#else
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(src_bytes) : "memory");
#endif
}

// This thread's copies since the last commit, as one group.
__device__ __forceinline__ void cp_async_commit() {
#ifdef CUDA_EMU_LAUNCH
    ::cuda_emu::cp_async_commit();
#else
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// Returns once all but the PENDING most recent of this thread's groups have landed.
template <int PENDING> __device__ __forceinline__ void cp_async_wait() {
#ifdef CUDA_EMU_LAUNCH
    ::cuda_emu::cp_async_wait(PENDING);
#else
    asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING) : "memory");
#endif
}

#endif
