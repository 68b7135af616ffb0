// The AVX-512 (F + BW + VL) kernels, 16 floats per vector. Built with -mavx512f
// -mavx512bw -mavx512vl -mf16c; dispatch calls it only where cpuid and the OS's
// XSAVE state allow. Lane for lane the same operations as the AVX2 file.
#if defined(__x86_64__)
#include <immintrin.h>

#include "internal.h"

typedef __m512 VF;
enum { W = 16 };
#define SUFFIX avx512

static inline VF vset(float x) { return _mm512_set1_ps(x); }
static inline VF vld(const float *p) { return _mm512_loadu_ps(p); }
static inline void vst(float *p, VF x) { _mm512_storeu_ps(p, x); }
static inline void vst_nt(float *p, VF x) { _mm512_stream_ps(p, x); }
static inline VF vadd(VF a, VF b) { return _mm512_add_ps(a, b); }
static inline VF vsub(VF a, VF b) { return _mm512_sub_ps(a, b); }
static inline VF vmul(VF a, VF b) { return _mm512_mul_ps(a, b); }
static inline VF vdiv(VF a, VF b) { return _mm512_div_ps(a, b); }
static inline VF vfma(VF a, VF b, VF c) { return _mm512_fmadd_ps(a, b, c); }
static inline VF vsqrt(VF a) { return _mm512_sqrt_ps(a); }

static inline VF vsign(VF x) {
    VF one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps();
    return _mm512_sub_ps(_mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, zero, _CMP_GT_OQ), one),
                         _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, zero, _CMP_LT_OQ), one));
}

static inline __m256i ld256(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }

static inline VF vgrad(const void *g, zinf_dtype dt, size_t i) {
    switch (dt) {
    case ZINF_DTYPE_BF16:
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(ld256((const uint16_t *)g + i)), 16));
    case ZINF_DTYPE_F16: return _mm512_cvtph_ps(ld256((const uint16_t *)g + i));
    default: return _mm512_loadu_ps((const float *)g + i);
    }
}

static inline __m256i to_bf16(VF x) {
    __m512i b = _mm512_castps_si512(x), hi = _mm512_srli_epi32(b, 16);
    __m512i bias = _mm512_add_epi32(_mm512_and_si512(hi, _mm512_set1_epi32(1)), _mm512_set1_epi32(0x7fff));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(b, bias), 16);
    __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    r = _mm512_mask_blend_epi32(nan, r, _mm512_or_si512(hi, _mm512_set1_epi32(0x40)));
    return _mm512_cvtepi32_epi16(r);
}

static inline void vout(void *out, zinf_dtype dt, size_t i, VF x, bool stream) {
    if (dt == ZINF_DTYPE_NONE) return;
    __m256i h = dt == ZINF_DTYPE_BF16 ? to_bf16(x) : _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT);
    __m256i *at = (__m256i *)((uint16_t *)out + i);
    if (stream)
        _mm256_stream_si256(at, h);
    else
        _mm256_storeu_si256(at, h);
}

#include "simd_body.h"

// 16 elements per step into lanes 0-7 and 8-15 of two fp64 accumulators.
double sumsq_avx512(const void *g, zinf_dtype dt, size_t n) {
    __m512d acc[2] = {_mm512_setzero_pd(), _mm512_setzero_pd()};
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        VF x = vgrad(g, dt, i);
        __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(x));
        __m512d hi = _mm512_cvtps_pd(_mm256_castsi256_ps(_mm512_extracti64x4_epi64(_mm512_castps_si512(x), 1)));
        acc[0] = _mm512_fmadd_pd(lo, lo, acc[0]);
        acc[1] = _mm512_fmadd_pd(hi, hi, acc[1]);
    }
    double lanes[STATS_LANES];
    _mm512_storeu_pd(lanes, acc[0]);
    _mm512_storeu_pd(lanes + 8, acc[1]);
    for (size_t j = 0; i < n; i++, j++) {
        double x = dt_load(g, dt, i);
        lanes[j] = fma(x, x, lanes[j]);
    }
    return fold_lanes(lanes);
}

void traffic_avx512(const zinf_optim_tile *t, size_t lo, size_t hi, uint32_t zero) {
    const __m512i z = _mm512_set1_epi32((int)zero);
    size_t gsize = zinf_dtype_size(t->grad_dtype), osize = zinf_dtype_size(t->out_dtype);
    float *m = t->exp_avg, *v = t->exp_avg_sq;
    const bool stream = osize && (uintptr_t)((char *)t->out + lo * osize) % (W * 2) == 0; // as the update does
    size_t i = lo;
    for (; i + W <= hi; i += W) {
        const char *gp = (const char *)t->grad + i * gsize;
        __m512i g = gsize == 4 ? _mm512_loadu_si512(gp) : _mm512_zextsi256_si512(ld256(gp));
        __m512i p = _mm512_xor_si512(_mm512_loadu_si512(t->param + i), _mm512_and_si512(g, z));
        _mm512_storeu_si512(t->param + i, p);
        __m512i pz = _mm512_and_si512(p, z);
        if (m) _mm512_storeu_si512(m + i, _mm512_xor_si512(_mm512_loadu_si512(m + i), pz));
        if (v) _mm512_storeu_si512(v + i, _mm512_xor_si512(_mm512_loadu_si512(v + i), pz));
        __m256i *at = (__m256i *)((char *)t->out + i * osize);
        if (stream)
            _mm256_stream_si256(at, _mm512_castsi512_si256(p));
        else if (osize)
            _mm256_storeu_si256(at, _mm512_castsi512_si256(p));
    }
    if (stream) _mm_sfence();
    traffic_scalar(t, i, hi, zero);
}
#endif
