// zinf cpu_adam: optimizer kernels over host memory. Adam, AdamW, Adagrad and Lion on
// fp32 master weights and fp32 states, gradients in fp32/bf16/fp16, fused with the
// gradient unscale and the 16-bit copy of the updated weights; AVX-512, AVX2 and
// scalar paths chosen at run time that give bit-identical results; a persistent,
// pinned, NUMA-aware thread pool. The header starts with what the kernels dispatch
// on: the CPU's SIMD level and its core and NUMA layout.
#ifndef ZINF_ADAM_H
#define ZINF_ADAM_H

#include <stdbool.h>

#include "zinf_base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum zinf_simd {
    ZINF_SIMD_SCALAR = 0,
    ZINF_SIMD_AVX2 = 1,   // AVX2 + FMA + F16C
    ZINF_SIMD_AVX512 = 2, // AVX-512 F + BW + VL (and the AVX2 set)
} zinf_simd;

typedef struct zinf_cpu_info {
    char model[128];    // "AMD EPYC 7763 64-Core Processor"
    int logical_cpus;   // online logical CPUs
    int physical_cores; // distinct (package, core) pairs; logical_cpus when unknown
    int numa_nodes;     // configured NUMA nodes (1 without libnuma support)
    // The last-level caches of all online CPUs together (lscpu's total), 0 when sysfs
    // does not say: a buffer several times larger measures memory, not the cache.
    int64_t last_level_cache_bytes;
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
// The level the kernels use: the CPU's best, capped by ZINF_SIMD when set.
zinf_simd zinf_simd_active(void);

// ---- optimizer kernels ----

typedef enum zinf_optimizer {
    ZINF_OPTIM_ADAM = 0,    // torch.optim.Adam: weight decay as L2 (added to the gradient)
    ZINF_OPTIM_ADAMW = 1,   // torch.optim.AdamW: decoupled weight decay
    ZINF_OPTIM_ADAGRAD = 2, // torch.optim.Adagrad (initial accumulator 0)
    ZINF_OPTIM_LION = 3,    // Lion (Chen et al. 2023): sign update, decoupled weight decay
} zinf_optimizer;

typedef struct zinf_optim_hparams {
    zinf_optimizer kind;
    double lr;
    double beta1, beta2;  // Adam/AdamW/Lion
    double eps;           // Adam/AdamW/Adagrad
    double weight_decay;  // 0: none
    double lr_decay;      // Adagrad
    bool bias_correction; // Adam/AdamW (torch always corrects; DeepSpeed can turn it off)
    int64_t step;         // the step being taken, 1 for the first (the group's counter)
    // Gradients are multiplied by this first: 1 / loss scale x clip coefficient, in
    // one multiply. 0 means 1.
    float grad_scale;
} zinf_optim_hparams;

// One range of a parameter group: n elements at the same index in every array.
typedef struct zinf_optim_tile {
    float *param;      // fp32 master weights, updated in place
    float *exp_avg;    // Adam/AdamW/Lion first moment
    float *exp_avg_sq; // Adam/AdamW second moment; Adagrad's sum of squares
    const void *grad;  // gradients, grad_dtype elements
    zinf_dtype grad_dtype;
    void *out;            // 16-bit copy of the updated weights (round to nearest even);
    zinf_dtype out_dtype; // ZINF_DTYPE_NONE for no copy, else BF16 or F16
    size_t n;
    // The states before the update, when not where it writes them (all three, or NULL:
    // in place): an update that leaves its inputs as they were (cpu_adam only).
    const float *from_param, *from_exp_avg, *from_exp_avg_sq;
} zinf_optim_tile;

// The hyperparameters of one call as the float constants the kernels use, computed in
// double and rounded once, as torch does with Python scalars. Public so that kernels
// elsewhere (the device optimizer) round exactly as these do.
typedef struct zinf_optim_consts {
    zinf_optimizer kind;
    float scale;        // gradient multiplier (1 / loss scale x clip coefficient)
    float decay;        // 1 - lr * weight_decay for decoupled decay (AdamW, Lion), else 1
    float l2;           // weight decay added to the gradient (Adam, Adagrad), else 0
    float b1, b1c;      // beta1 and 1 - beta1
    float b2, b2c;      // beta2 and 1 - beta2
    float inv_bc2_sqrt; // 1 / sqrt(1 - beta2^step), 1 without bias correction
    float eps;
    float neg_step; // -lr / (1 - beta1^step) (Adam/AdamW), -lr / (1 + (step-1) lr_decay)
                    // (Adagrad), -lr (Lion)
} zinf_optim_consts;

// Check h and the tile's dtypes and buffers (ZINF_ERR_INVAL naming the value) and
// compute the constants.
zinf_status zinf_optim_consts_of(const zinf_optim_hparams *h, const zinf_optim_tile *t, zinf_optim_consts *c);

// Update one tile on the calling thread with SIMD level simd. Results do not depend on
// simd, alignment or where the tile starts. ZINF_ERR_INVAL for bad hyperparameters or
// dtypes, ZINF_ERR_UNSUPPORTED for a level this CPU lacks.
zinf_status zinf_optim_update(const zinf_optim_hparams *h, const zinf_optim_tile *t, zinf_simd simd);

typedef struct zinf_grad_stats {
    double sumsq;   // sum of squares, summed in fp64 in a fixed order
    bool nonfinite; // some element is inf or NaN
} zinf_grad_stats;

// Sum of squares and inf/NaN check of n gradients, on the calling thread. The sum is
// the same for every SIMD level and thread count (fixed 64Ki-element blocks, each
// summed in 16 fp64 lanes, then the blocks in order).
zinf_status zinf_grad_stats_compute(const void *grad, zinf_dtype dtype, size_t n, zinf_simd simd, zinf_grad_stats *out);

// ---- thread pool ----
// Persistent worker threads, each pinned to its own core (one per physical core
// first, ordered by NUMA node), woken per call. Work is split into contiguous ranges,
// the same for the same n on every call, so memory first touched through
// zinf_cpu_pool_touch stays local to the thread that updates it.

typedef struct zinf_cpu_pool zinf_cpu_pool;

// threads 0: one per physical core this process may run on.
zinf_status zinf_cpu_pool_create(zinf_cpu_pool **out, int threads);
void zinf_cpu_pool_destroy(zinf_cpu_pool *pool);
int zinf_cpu_pool_threads(const zinf_cpu_pool *pool);
// The CPUs of this process's cores that no worker is pinned to (their SMT siblings
// left out), for the threads that move data and feed the device; returns how many
// (0 when the workers take every core, or are not pinned). *cpus stays the pool's.
int zinf_cpu_pool_spare(const zinf_cpu_pool *pool, const int **cpus);
// The physical cores this process may run on: the threads of a pool made with 0.
int zinf_cpu_pool_cores(void);
// Run fn(arg, i, nthreads) on every worker i and wait for all of them.
void zinf_cpu_pool_run(zinf_cpu_pool *pool, void (*fn)(void *arg, int i, int nthreads), void *arg);
// Worker i's share of n elements: [*lo, *hi), cut at multiples of 64 elements.
void zinf_cpu_pool_range(const zinf_cpu_pool *pool, size_t n, int i, size_t *lo, size_t *hi);
// Zero bytes of each of the buffers, each worker its share (elements of elem_size),
// so the pages are placed on the NUMA node of the worker that will use them.
void zinf_cpu_pool_touch(zinf_cpu_pool *pool, void *buf, size_t n, size_t elem_size);

// DeepSpeed's bind_cores_to_rank: bind this process, and the threads it starts from
// now on, to local_rank's share of core_list ("0,2-4,6": ascending ranges that do not
// overlap; NULL: cores 0 to the machine's physical cores - 1) split evenly over the
// local_ranks ranks on this host (at least one core each), with memory bound to the
// NUMA node that holds all of its cores, where one does. desc (may be NULL) gets
// "cores 2-3, memory on NUMA node 0".
zinf_status zinf_cpu_bind_rank(int local_rank, int local_ranks, const char *core_list, char *desc, size_t desc_size);
// The cores of such a list (at most max of them, *n), or ZINF_ERR_INVAL naming what is
// wrong with it.
zinf_status zinf_cpu_parse_cores(const char *list, int *cores, int max, int *n);

// zinf_optim_update and zinf_grad_stats_compute over the pool at zinf_simd_active().
zinf_status zinf_optim_step(zinf_cpu_pool *pool, const zinf_optim_hparams *h, const zinf_optim_tile *t);
zinf_status zinf_grad_stats_pool(zinf_cpu_pool *pool, const void *grad, zinf_dtype dtype, size_t n,
                                 zinf_grad_stats *out);

// dst[i] = dst[i] + src[i] for i < n, in fp32, each worker its share (the offloaded
// optimizer's gradient accumulation; the same additions as the device's zinf_add).
void zinf_cpu_add(zinf_cpu_pool *pool, float *dst, const float *src, size_t n);
// dst[i] = 0 + src[i]: zinf_cpu_add into zeros, the same bits (a -0 comes out +0),
// without zeroing dst first or reading it.
void zinf_cpu_add_first(zinf_cpu_pool *pool, float *dst, const float *src, size_t n);
// zinf_cpu_add (zinf_cpu_add_first with first) and then zinf_grad_stats_pool of dst, in
// one pass: each block of the norm's is added and then squared while it is in cache.
// The same bits as the two calls.
zinf_status zinf_cpu_add_stats(zinf_cpu_pool *pool, float *dst, const float *src, size_t n, bool first,
                               zinf_grad_stats *out);
// dst[i] = src[i] for i < n, each worker its share (one pass a single thread would take
// several times as long over).
void zinf_cpu_copy(zinf_cpu_pool *pool, float *dst, const float *src, size_t n);

// The roofline of zinf_optim_step: one pass over the same buffers and threads that
// reads and writes exactly the bytes the update moves, with no arithmetic, and leaves
// every buffer as it was. adam-bench measures the update against it.
zinf_status zinf_optim_traffic(zinf_cpu_pool *pool, const zinf_optim_hparams *h, const zinf_optim_tile *t);
// Bytes zinf_optim_step reads plus writes per element: 28 for AdamW with fp32
// gradients and no copy, 30 with a bf16 copy.
size_t zinf_optim_bytes_per_param(const zinf_optim_hparams *h, const zinf_optim_tile *t);

#ifdef __cplusplus
}
#endif
#endif
