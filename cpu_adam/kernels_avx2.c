// The AVX2 + FMA + F16C kernels (8 floats per vector). The build compiles this file
// with -mavx2 -mfma -mf16c; dispatch calls it only where cpuid says the CPU has them.
#if defined(__x86_64__)
#include <immintrin.h>

#include "internal.h"

typedef __m256 VF;
enum { W = 8 };
#define SUFFIX avx2

static inline VF vset(float x) { return _mm256_set1_ps(x); }
static inline VF vld(const float *p) { return _mm256_loadu_ps(p); }
static inline void vst(float *p, VF x) { _mm256_storeu_ps(p, x); }
static inline void vst_nt(float *p, VF x) { _mm256_stream_ps(p, x); }
static inline VF vadd(VF a, VF b) { return _mm256_add_ps(a, b); }
static inline VF vsub(VF a, VF b) { return _mm256_sub_ps(a, b); }
static inline VF vmul(VF a, VF b) { return _mm256_mul_ps(a, b); }
static inline VF vdiv(VF a, VF b) { return _mm256_div_ps(a, b); }
static inline VF vfma(VF a, VF b, VF c) { return _mm256_fmadd_ps(a, b, c); }
static inline VF vsqrt(VF a) { return _mm256_sqrt_ps(a); }

static inline VF vsign(VF x) {
    VF one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
    return _mm256_sub_ps(_mm256_and_ps(_mm256_cmp_ps(x, zero, _CMP_GT_OQ), one),
                         _mm256_and_ps(_mm256_cmp_ps(x, zero, _CMP_LT_OQ), one));
}

static inline __m128i ld128(const void *p) { return _mm_loadu_si128((const __m128i *)p); }

static inline VF vgrad(const void *g, zinf_dtype dt, size_t i) {
    switch (dt) {
    case ZINF_DTYPE_BF16:
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(ld128((const uint16_t *)g + i)), 16));
    case ZINF_DTYPE_F16: return _mm256_cvtph_ps(ld128((const uint16_t *)g + i));
    default: return _mm256_loadu_ps((const float *)g + i);
    }
}

// f32_to_bf16 on 8 lanes: round to nearest even in 32-bit lanes, NaN made quiet, then
// the low halves packed (packus works per 128-bit lane, so qwords 0 and 2 hold them).
static inline __m128i to_bf16(VF x) {
    __m256i b = _mm256_castps_si256(x), hi = _mm256_srli_epi32(b, 16);
    __m256i bias = _mm256_add_epi32(_mm256_and_si256(hi, _mm256_set1_epi32(1)), _mm256_set1_epi32(0x7fff));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(b, bias), 16);
    __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
    r = _mm256_blendv_epi8(r, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), nan);
    return _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08));
}

static inline void vout(void *out, zinf_dtype dt, size_t i, VF x, bool stream) {
    if (dt == ZINF_DTYPE_NONE) return;
    __m128i h = dt == ZINF_DTYPE_BF16 ? to_bf16(x) : _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT);
    __m128i *at = (__m128i *)((uint16_t *)out + i);
    if (stream)
        _mm_stream_si128(at, h);
    else
        _mm_storeu_si128(at, h);
}

#include "simd_body.h"

// 16 elements per step into lanes 0-3, 4-7, 8-11, 12-15 of four fp64 accumulators.
double sumsq_avx2(const void *g, zinf_dtype dt, size_t n) {
    __m256d acc[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        for (int h = 0; h < 2; h++) {
            VF x = vgrad(g, dt, i + 8 * (size_t)h);
            __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(x)), hi = _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1));
            acc[2 * h] = _mm256_fmadd_pd(lo, lo, acc[2 * h]);
            acc[2 * h + 1] = _mm256_fmadd_pd(hi, hi, acc[2 * h + 1]);
        }
    }
    double lanes[STATS_LANES];
    for (int k = 0; k < 4; k++)
        _mm256_storeu_pd(lanes + 4 * k, acc[k]);
    for (size_t j = 0; i < n; i++, j++) {
        double x = dt_load(g, dt, i);
        lanes[j] = fma(x, x, lanes[j]);
    }
    return fold_lanes(lanes);
}

void traffic_avx2(const zinf_optim_tile *t, size_t lo, size_t hi, uint32_t zero) {
    const __m256i z = _mm256_set1_epi32((int)zero);
    size_t gsize = zinf_dtype_size(t->grad_dtype), osize = zinf_dtype_size(t->out_dtype);
    float *m = t->exp_avg, *v = t->exp_avg_sq;
    const bool stream = osize && (uintptr_t)((char *)t->out + lo * osize) % (W * 2) == 0; // as the update does
    size_t i = lo;
    for (; i + W <= hi; i += W) {
        const char *gp = (const char *)t->grad + i * gsize;
        __m256i g = gsize == 4 ? _mm256_loadu_si256((const __m256i *)gp) : _mm256_zextsi128_si256(ld128(gp));
        __m256i p = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(t->param + i)), _mm256_and_si256(g, z));
        _mm256_storeu_si256((__m256i *)(t->param + i), p);
        __m256i pz = _mm256_and_si256(p, z);
        if (m) _mm256_storeu_si256((__m256i *)(m + i), _mm256_xor_si256(_mm256_loadu_si256((__m256i *)(m + i)), pz));
        if (v) _mm256_storeu_si256((__m256i *)(v + i), _mm256_xor_si256(_mm256_loadu_si256((__m256i *)(v + i)), pz));
        __m128i *at = (__m128i *)((char *)t->out + i * osize);
        if (stream)
            _mm_stream_si128(at, _mm256_castsi256_si128(p));
        else if (osize)
            _mm_storeu_si128(at, _mm256_castsi256_si128(p));
    }
    if (stream) _mm_sfence();
    traffic_scalar(t, i, hi, zero);
}
#endif
