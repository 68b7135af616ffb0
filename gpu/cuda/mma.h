// Tensor cores from CUDA C++ (C++ only): the warp-wide m16n8k16 product of 16-bit
// matrices into fp32 (mma.sync, compute capability 8.0 and later), the warp-wide load
// of its fragments from shared memory (ldmatrix, 7.5 and later) and the packing of
// 16-bit fragments. Under the tests' CUDA emulation the product and the load are the
// emulation's, written from the PTX ISA's fragment layouts (tests/cuda_emu).
//
// Fragments, with g = lane / 4 and q = lane % 4 (PTX ISA, "Matrix Fragments for
// mma.m16n8k16 with floating point type"):
//   A (16 x 16, row-major): a[0] = A[g][2q, 2q+1], a[1] = A[g+8][2q, 2q+1],
//                           a[2] = A[g][2q+8, 2q+9], a[3] = A[g+8][2q+8, 2q+9];
//   B (16 x 8, by column):  b[0] = B[2q, 2q+1][g], b[1] = B[2q+8, 2q+9][g];
//   C, D (16 x 8, fp32):    c[0], c[1] = C[g][2q, 2q+1], c[2], c[3] = C[g+8][2q, 2q+1];
// a register holds two 16-bit values, the lower-numbered in its low half.
#ifndef ZINF_CUDA_MMA_H
#define ZINF_CUDA_MMA_H

#include <stdint.h>
#include <string.h>

#include <type_traits>

#include "cuda_backend.h"

// x rounded to T (bf16 or fp16), as its bits.
template <typename T> __device__ __forceinline__ uint16_t bits_of(float x) {
    T v;
    store_f32(&v, x);
    uint16_t u;
    memcpy(&u, &v, 2);
    return u;
}

template <typename T> __device__ __forceinline__ uint32_t pack_pair(float lo, float hi) {
    return (uint32_t)bits_of<T>(lo) | (uint32_t)bits_of<T>(hi) << 16;
}

// d += A B for one m16n8k16 tile, the warp's lanes each with their fragments; every
// lane of the warp must take part.
template <typename T> __device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4],
                                                                 const uint32_t (&b)[2]) {
    static_assert(sizeof(T) == 2, "tensor-core products take bf16 or fp16");
#ifdef CUDA_EMU_LAUNCH
    ::cuda_emu::mma_m16n8k16(d, a, b, d, std::is_same<T, __nv_bfloat16>::value);
#else
    if constexpr (std::is_same<T, __nv_bfloat16>::value)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

// Four 8 x 8 matrices of 16-bit values from shared memory as fragments, in one
// instruction for the warp (ldmatrix.sync.aligned.m8n8.x4): lane 8 i + r gives `row`,
// the address of row r of matrix i (8 values, 16-byte aligned), and gets in d[i] the two
// values of matrix i at row lane / 4, columns 2 (lane % 4) and 2 (lane % 4) + 1 (an A or
// B fragment register above); with TRANS, of matrix i transposed. Every lane of the
// warp must take part. Where 32-bit loads took two shared-memory instructions for
// each B fragment, this takes one for two fragments' pairs.
template <bool TRANS> __device__ __forceinline__ void ldmatrix_x4(uint32_t (&d)[4], const uint16_t *row) {
#ifdef CUDA_EMU_LAUNCH
    ::cuda_emu::ldmatrix_x4(d, row, TRANS);
#else
    const unsigned addr = (unsigned)__cvta_generic_to_shared(row);
    if constexpr (TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
                     : "r"(addr));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
                     : "r"(addr));
#endif
}

#endif
