// zinf cpu_adam: optimizer kernels over host memory. This header starts with what the
// kernels dispatch on: the CPU's SIMD level, read from cpuid at run time, and its
// NUMA layout, which the thread pool splits work by.
#ifndef ZINF_ADAM_H
#define ZINF_ADAM_H

#include <stdbool.h>

#include "zinf_base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum zinf_simd {
    ZINF_SIMD_SCALAR = 0,
    ZINF_SIMD_AVX2,   // AVX2 + FMA + F16C
    ZINF_SIMD_AVX512, // AVX-512 F + BW + VL (and the AVX2 set)
} zinf_simd;

typedef struct zinf_cpu_info {
    char model[128];    // "AMD EPYC 7763 64-Core Processor"
    int logical_cpus;   // online logical CPUs
    int physical_cores; // distinct (package, core) pairs; logical_cpus when unknown
    int numa_nodes;     // configured NUMA nodes (1 without libnuma support)
    zinf_simd simd;     // best level both the CPU and the OS (XSAVE state) enable
    // The three below also need the OS to enable their register state (XCR0), as
    // the kernel checks before listing them in /proc/cpuinfo.
    bool avx512_bf16; // AVX512_BF16: native bf16 dot products / conversion
    bool amx_bf16;    // AMX-BF16 tiles
    bool f16c;        // fp16 <-> fp32 conversion instructions
} zinf_cpu_info;

// Fill *out for the machine this process runs on. Cannot fail.
void zinf_cpu_probe(zinf_cpu_info *out);
const char *zinf_simd_name(zinf_simd s); // "scalar", "avx2", "avx512"

#ifdef __cplusplus
}
#endif
#endif
