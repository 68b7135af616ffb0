// CUDA emulation (tests only): __half and its conversions, as the CUDA Math API documents
// them: float to half rounds to nearest even (subnormals kept, overflow to infinity, a
// NaN becomes the canonical NaN 0x7fff), half to float is exact.
#ifndef CUDA_EMU_FP16_H
#define CUDA_EMU_FP16_H

#include <stdint.h>
#include <string.h>

#include "cuda_emu_defs.h"

typedef struct __half {
    unsigned short __x;
} __half;

static inline __half __float2half_rn(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u, mag = x & 0x7fffffffu;
    __half h;
    if (mag > 0x7f800000u) { // NaN
        h.__x = 0x7fff;
        return h;
    }
    if (mag >= 0x477ff000u) { // rounds to 65536 or more: infinity
        h.__x = (unsigned short)(sign | 0x7c00u);
        return h;
    }
    uint32_t e = mag >> 23;
    if (e < 113) {     // below 2^-14: a subnormal half (or zero), in units of 2^-24
        if (e < 101) { // below 2^-26: rounds to zero (2^-25 exactly is a tie to even zero)
            h.__x = (unsigned short)sign;
            return h;
        }
        uint32_t m = (mag & 0x7fffffu) | 0x800000u, shift = 126 - e; // value = m * 2^(e-150)
        uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half_ulp = 1u << (shift - 1);
        if (rem > half_ulp || (rem == half_ulp && (q & 1))) q++;
        h.__x = (unsigned short)(sign | q);
        return h;
    }
    // Normal: rebias the exponent, round the 23-bit fraction to 10 bits; a carry moves
    // into the exponent, which is the right result (up to infinity, handled above).
    uint32_t r = ((e - 112) << 10) | ((mag >> 13) & 0x3ffu), rem = mag & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1))) r++;
    h.__x = (unsigned short)(sign | r);
    return h;
}

static inline float __half2float(__half h) {
    uint32_t sign = (uint32_t)(h.__x & 0x8000u) << 16, e = (h.__x >> 10) & 0x1fu, m = h.__x & 0x3ffu, x;
    if (e == 31) {
        x = sign | 0x7f800000u | (m << 13);
    } else if (e == 0) { // zero or subnormal: m * 2^-24, exact in float
        float v = (float)m * 0x1p-24f;
        memcpy(&x, &v, 4);
        x |= sign;
    } else {
        x = sign | ((e + 112) << 23) | (m << 13);
    }
    float f;
    memcpy(&f, &x, 4);
    return f;
}

#endif
