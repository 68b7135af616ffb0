// cpu_adam internals: the per-call constants and the scalar element functions that
// define every optimizer's arithmetic. The SIMD paths (simd_body.h) repeat these
// operations in the same order with the same fused multiply-adds, and the build turns
// off floating-point contraction, so every path rounds identically.
#ifndef ZINF_CPU_ADAM_INTERNAL_H
#define ZINF_CPU_ADAM_INTERNAL_H

#include <math.h>
#include <string.h>

#include "zinf_adam.h"
#include "zinf_internal.h"

// The hyperparameters of one call as the float constants the kernels use. Computed in
// double and rounded once, as torch does with Python scalars.
typedef struct optim_consts {
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
} optim_consts;

// The physical package and core of a CPU, from sysfs; false when it does not say.
bool cpu_core_of(long cpu, long *package, long *core);

// Gradients are summed in blocks of this many elements, each in 16 fp64 lanes.
enum { STATS_BLOCK = 1 << 16, STATS_LANES = 16 };

// ---- 16-bit conversions (round to nearest even, NaN kept NaN) ----

static inline uint32_t f32_bits(float x) {
    uint32_t b;
    memcpy(&b, &x, 4);
    return b;
}

static inline float bits_f32(uint32_t b) {
    float x;
    memcpy(&x, &b, 4);
    return x;
}

static inline float bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

// IEEE half to float, exact; a NaN comes out quiet with its payload, as F16C does.
static inline float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    if (exp == 0x1f) return bits_f32(sign | 0x7f800000 | (mant << 13) | (mant ? 0x400000 : 0));
    if (exp) return bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
    return bits_f32(sign | f32_bits((float)mant * 0x1p-24f)); // subnormal or zero: exact
}

// A NaN keeps its sign and top payload bits and is made quiet (so rounding can never
// turn it into an infinity).
static inline uint16_t f32_to_bf16(float x) {
    uint32_t b = f32_bits(x);
    if ((b & 0x7fffffff) > 0x7f800000) return (uint16_t)((b >> 16) | 0x40);
    return (uint16_t)((b + 0x7fff + ((b >> 16) & 1)) >> 16);
}

// As the F16C instruction rounds to nearest even: the subnormal range through an
// exactly rounded float add, the rest by integer rounding whose carry can reach the
// exponent (and so overflow to infinity at 65520).
static inline uint16_t f32_to_f16(float x) {
    uint32_t b = f32_bits(x), sign = (b >> 16) & 0x8000, a = b & 0x7fffffff;
    if (a >= 0x47800000) // >= 65536, inf or NaN
        return (uint16_t)(sign | (a > 0x7f800000 ? 0x7e00 | ((a >> 13) & 0x3ff) : 0x7c00));
    if (a < 0x38800000) {             // below 2^-14: subnormal half or zero
        float r = bits_f32(a) + 0.5f; // 0.5 aligns the half's unit 2^-24 with the float's last bit
        return (uint16_t)(sign | (f32_bits(r) - 0x3f000000));
    }
    return (uint16_t)(sign | ((a - 0x38000000 + 0xfff + ((a >> 13) & 1)) >> 13));
}

static inline float grad_at(const void *g, zinf_dtype dt, size_t i) {
    switch (dt) {
    case ZINF_DTYPE_BF16: return bf16_to_f32(((const uint16_t *)g)[i]);
    case ZINF_DTYPE_F16: return f16_to_f32(((const uint16_t *)g)[i]);
    default: return ((const float *)g)[i];
    }
}

static inline void out_at(void *out, zinf_dtype dt, size_t i, float x) {
    if (dt == ZINF_DTYPE_BF16)
        ((uint16_t *)out)[i] = f32_to_bf16(x);
    else if (dt == ZINF_DTYPE_F16)
        ((uint16_t *)out)[i] = f32_to_f16(x);
}

// ---- the element updates: the definition every SIMD path reproduces ----
// Each follows torch.optim's single-tensor code, rounding where ATen's CPU kernels
// round (lerp_, add(alpha=) and addcmul_ as one fused multiply-add each, addcdiv_ as a
// multiply, a divide and an add), with one exception for speed: Adam's denominator
// multiplies by 1 / sqrt(1 - beta2^t) in a fused multiply-add instead of dividing,
// which leaves one division per element. Results stay within a few ulps of torch's.

static inline void adam_elem(const optim_consts *c, float *p, float *m, float *v, float g) {
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

static inline void adagrad_elem(const optim_consts *c, float *p, float *v, float g) {
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

static inline void lion_elem(const optim_consts *c, float *p, float *m, float g) {
    if (c->scale != 1.0f) g = g * c->scale;
    float x = *p * c->decay;
    float u = sign_of(fmaf(g, c->b1c, *m * c->b1)); // exp_avg * beta1 + grad * (1 - beta1)
    *p = fmaf(c->neg_step, u, x);
    *m = fmaf(g, c->b2c, *m * c->b2);
}

// ---- kernels per SIMD level: elements [lo, hi) of a tile ----

typedef void (*optim_fn)(const optim_consts *c, const zinf_optim_tile *t, size_t lo, size_t hi);
// Sum of squares of one block (n <= STATS_BLOCK elements) in 16 fp64 lanes, folded.
typedef double (*sumsq_fn)(const void *g, zinf_dtype dt, size_t n);
// The roofline pass: reads and writes exactly the bytes the update does, unchanged
// (zero is a run-time value the compiler cannot fold away).
typedef void (*traffic_fn)(const zinf_optim_tile *t, size_t lo, size_t hi, uint32_t zero);

void optim_scalar(const optim_consts *c, const zinf_optim_tile *t, size_t lo, size_t hi);
double sumsq_scalar(const void *g, zinf_dtype dt, size_t n);
void traffic_scalar(const zinf_optim_tile *t, size_t lo, size_t hi, uint32_t zero);
#if defined(__x86_64__)
void optim_avx2(const optim_consts *c, const zinf_optim_tile *t, size_t lo, size_t hi);
double sumsq_avx2(const void *g, zinf_dtype dt, size_t n);
void traffic_avx2(const zinf_optim_tile *t, size_t lo, size_t hi, uint32_t zero);
void optim_avx512(const optim_consts *c, const zinf_optim_tile *t, size_t lo, size_t hi);
double sumsq_avx512(const void *g, zinf_dtype dt, size_t n);
void traffic_avx512(const zinf_optim_tile *t, size_t lo, size_t hi, uint32_t zero);
#endif

// The 16 lanes folded in a fixed tree: lane j with j+8, then j+4, j+2, j+1.
static inline double fold_lanes(double *l) {
    for (int w = STATS_LANES / 2; w >= 1; w /= 2)
        for (int j = 0; j < w; j++)
            l[j] += l[j + w];
    return l[0];
}

#endif
