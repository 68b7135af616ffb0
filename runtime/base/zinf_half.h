// zinf internals: fp32 <-> bf16 / fp16 conversions in plain C, rounding to nearest even
// and keeping NaN a NaN, bit for bit as F16C and the CUDA intrinsics convert finite
// values. Shared by cpu_adam's kernels, the host device backend and the weights files.
#ifndef ZINF_HALF_H
#define ZINF_HALF_H

#include <stdint.h>
#include <string.h>

#include "zinf_base.h"

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

// Element i of p, stored as dt (F32, BF16 or F16), as a float; and the reverse,
// rounding to nearest even.
static inline float dt_load(const void *p, zinf_dtype dt, size_t i) {
    switch (dt) {
    case ZINF_DTYPE_BF16: return bf16_to_f32(((const uint16_t *)p)[i]);
    case ZINF_DTYPE_F16: return f16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

static inline void dt_store(void *p, zinf_dtype dt, size_t i, float v) {
    switch (dt) {
    case ZINF_DTYPE_BF16: ((uint16_t *)p)[i] = f32_to_bf16(v); break;
    case ZINF_DTYPE_F16: ((uint16_t *)p)[i] = f32_to_f16(v); break;
    default: ((float *)p)[i] = v;
    }
}

#endif
