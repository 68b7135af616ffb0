// cpu_adam internals: the per-call constants and the scalar element functions that
// define every optimizer's arithmetic. The SIMD paths (simd_body.h) repeat these
// operations in the same order with the same fused multiply-adds, and the build turns
// off floating-point contraction, so every path rounds identically.
#ifndef ZINF_CPU_ADAM_INTERNAL_H
#define ZINF_CPU_ADAM_INTERNAL_H

#include <math.h>
#include <string.h>

#include "zinf_adam.h"
#include "zinf_half.h"
#include "zinf_internal.h"

// The physical package and core of a CPU, from sysfs; false when it does not say.
bool cpu_core_of(long cpu, long *package, long *core);

// Gradients are summed in blocks of this many elements, each in 16 fp64 lanes.
enum { STATS_BLOCK = 1 << 16, STATS_LANES = 16 };

// The 16-bit copy of an updated weight; none when dt is NONE.
static inline void out_at(void *out, zinf_dtype dt, size_t i, float x) {
    if (dt != ZINF_DTYPE_NONE) dt_store(out, dt, i, x);
}

// ---- the element updates: the definition every SIMD path reproduces ----
// Each follows torch.optim's single-tensor code, rounding where ATen's CPU kernels
// round (lerp_, add(alpha=) and addcmul_ as one fused multiply-add each, addcdiv_ as a
// multiply, a divide and an add), with one exception for speed: Adam's denominator
// multiplies by 1 / sqrt(1 - beta2^t) in a fused multiply-add instead of dividing,
// which leaves one division per element. Results stay within a few ulps of torch's.

static inline void adam_elem(const zinf_optim_consts *c, float *p, float *m, float *v, float g) {
    if (c->scale != 1.0f) g = g * c->scale; // at 1 the same value: skipped, one op less
    float x = *p * c->decay;
    if (c->l2 != 0.0f) g = fmaf(c->l2, x, g);
    float mm = fmaf(c->b1c, g - *m, *m);                  // exp_avg.lerp_(grad, 1 - beta1)
    float vv = fmaf(c->b2c * g, g, *v * c->b2);           // exp_avg_sq.mul_(beta2).addcmul_(grad, grad, 1 - beta2)
    float den = fmaf(sqrtf(vv), c->inv_bc2_sqrt, c->eps); // (exp_avg_sq.sqrt() / bc2_sqrt).add_(eps)
    *p = x + (c->neg_step * mm) / den;                    // param.addcdiv_(exp_avg, denom, -step_size)
    *m = mm;
    *v = vv;
}

static inline void adagrad_elem(const zinf_optim_consts *c, float *p, float *v, float g) {
    if (c->scale != 1.0f) g = g * c->scale;
    float x = *p;
    if (c->l2 != 0.0f) g = fmaf(c->l2, x, g);
    float vv = fmaf(g, g, *v); // state_sum.addcmul_(grad, grad, 1)
    float den = sqrtf(vv) + c->eps;
    *p = x + (c->neg_step * g) / den; // param.addcdiv_(grad, std, -clr)
    *v = vv;
}

// sign() as torch has it: -1, 0 or 1, and 0 for NaN.
static inline float sign_of(float x) { return (float)((x > 0.0f) - (x < 0.0f)); }

static inline void lion_elem(const zinf_optim_consts *c, float *p, float *m, float g) {
    if (c->scale != 1.0f) g = g * c->scale;
    float x = *p * c->decay;
    float u = sign_of(fmaf(g, c->b1c, *m * c->b1)); // exp_avg * beta1 + grad * (1 - beta1)
    *p = fmaf(c->neg_step, u, x);
    *m = fmaf(g, c->b2c, *m * c->b2);
}

// ---- kernels per SIMD level: elements [lo, hi) of a tile ----

typedef void (*optim_fn)(const zinf_optim_consts *c, const zinf_optim_tile *t, size_t lo, size_t hi);
// Sum of squares of one block (n <= STATS_BLOCK elements) in 16 fp64 lanes, folded.
typedef double (*sumsq_fn)(const void *g, zinf_dtype dt, size_t n);
// dst = (first ? 0 : dst) + src for n elements; with first, dst is never read.
typedef void (*add_fn)(float *restrict dst, const float *restrict src, size_t n, bool first);
// The roofline pass: reads and writes exactly the bytes the update does, unchanged
// (zero is a run-time value the compiler cannot fold away).
typedef void (*traffic_fn)(const zinf_optim_tile *t, size_t lo, size_t hi, uint32_t zero);

void optim_scalar(const zinf_optim_consts *c, const zinf_optim_tile *t, size_t lo, size_t hi);
double sumsq_scalar(const void *g, zinf_dtype dt, size_t n);
void traffic_scalar(const zinf_optim_tile *t, size_t lo, size_t hi, uint32_t zero);
void add_scalar(float *restrict dst, const float *restrict src, size_t n, bool first);
#if defined(__x86_64__)
void optim_avx2(const zinf_optim_consts *c, const zinf_optim_tile *t, size_t lo, size_t hi);
double sumsq_avx2(const void *g, zinf_dtype dt, size_t n);
void traffic_avx2(const zinf_optim_tile *t, size_t lo, size_t hi, uint32_t zero);
void add_avx2(float *restrict dst, const float *restrict src, size_t n, bool first);
void optim_avx512(const zinf_optim_consts *c, const zinf_optim_tile *t, size_t lo, size_t hi);
double sumsq_avx512(const void *g, zinf_dtype dt, size_t n);
void traffic_avx512(const zinf_optim_tile *t, size_t lo, size_t hi, uint32_t zero);
void add_avx512(float *restrict dst, const float *restrict src, size_t n, bool first);
#endif

// The 16 lanes folded in a fixed tree: lane j with j+8, then j+4, j+2, j+1.
static inline double fold_lanes(double *l) {
    for (int w = STATS_LANES / 2; w >= 1; w /= 2)
        for (int j = 0; j < w; j++)
            l[j] += l[j + w];
    return l[0];
}

#endif
