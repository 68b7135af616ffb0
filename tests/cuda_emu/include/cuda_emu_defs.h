// CUDA emulation (tests only): the function qualifiers of CUDA C++, which mean nothing to
// a host compiler: device code is ordinary host code here, and a kernel is a function
// the emulator runs once per thread (cuda_runtime.h).
#ifndef CUDA_EMU_DEFS_H
#define CUDA_EMU_DEFS_H

#define __host__
#define __device__
#define __global__
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define CUDARTAPI

#endif
