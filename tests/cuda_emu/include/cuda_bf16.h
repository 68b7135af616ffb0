// CUDA emulation (tests only): __nv_bfloat16 and its conversions, as the CUDA Math API
// documents them: float to bfloat16 rounds to nearest even (a NaN becomes the canonical
// NaN 0x7fff), bfloat16 to float is exact.
#ifndef CUDA_EMU_BF16_H
#define CUDA_EMU_BF16_H

#include <stdint.h>
#include <string.h>

#include "cuda_emu_defs.h"

typedef struct __nv_bfloat16 {
    unsigned short __x;
} __nv_bfloat16;

static inline __nv_bfloat16 __float2bfloat16_rn(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    __nv_bfloat16 b;
    if ((x & 0x7fffffffu) > 0x7f800000u) {
        b.__x = 0x7fff;
        return b;
    }
    // Adding 0x7fff plus the lowest kept bit rounds to nearest, ties to even; a carry
    // out of the fraction bumps the exponent, up to infinity, as it should.
    x += 0x7fffu + ((x >> 16) & 1u);
    b.__x = (unsigned short)(x >> 16);
    return b;
}

static inline float __bfloat162float(__nv_bfloat16 b) {
    uint32_t x = (uint32_t)b.__x << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

#endif
