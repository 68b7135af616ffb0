// The communication quantizers (zinf_quantize / zinf_dequantize, ZeRO++'s qwZ and qgZ)
// against a reference written here: the absmax in double, each q the integer nearest the
// exact x * Q / a (long double quotient, ties to even by hand), packed as the header
// says; dequantized values as the fp32 product rounded to the storage type. Codes and
// scales must match bit for bit, in fp32, bf16 and fp16, for bits 8 and 4, over group
// sizes and lengths that leave a short last group, with outputs poisoned first. Named
// cases: ties, the clipped +absmax, a zero group, groups holding inf or NaN, subnormal
// absmax, accumulation, the error bound and the arguments the front end refuses.
// timeout: 10 san=10 cuda-emu=10 san-cuda-emu=10
#include <math.h>

#include "check.h"
#include "gpu_test.h"
#include "zinf_half.h"

#define LEN(a) (sizeof(a) / sizeof((a)[0]))

static zinf_device *dev;
static zinf_stream *S;
static uint64_t rng = 0x2545f4914f6cdd1dull;
static double urand(void) { return test_urand(&rng); }

static bool same_f32(float a, float b) { return (isnan(a) && isnan(b)) || f32_bits(a) == f32_bits(b); }

// ---- reference ----

typedef struct quant_ref {
    uint8_t *q;   // packed as the op packs: n int8, or ceil(n / 2) bytes of nibbles
    float *scale; // ceil(n / group)
    int *code;    // n: the integer of each element
} quant_ref;

// The integer nearest t (ties to even), clamped to [-Q, Q - 1].
static int nearest_clamped(long double t, int Q) {
    long double f = floorl(t), d = t - f;
    long long k = (long long)f;
    if (d > 0.5L || (d == 0.5L && k % 2 != 0)) k++;
    return k < -Q ? -Q : k > Q - 1 ? Q - 1 : (int)k;
}

static quant_ref ref_quantize(int bits, const float *x, size_t n, size_t group) {
    int Q = 1 << (bits - 1);
    size_t groups = (n + group - 1) / group, bytes = bits == 8 ? n : (n + 1) / 2;
    quant_ref r = {calloc(bytes, 1), malloc(groups * sizeof(float)), malloc(n * sizeof(int))};
    for (size_t j = 0; j < groups; j++) {
        size_t lo = j * group, hi = lo + group < n ? lo + group : n;
        double a = 0;
        bool nonfinite = false;
        for (size_t i = lo; i < hi; i++) {
            nonfinite |= !isfinite(x[i]);
            a = fmax(a, fabs((double)x[i]));
        }
        r.scale[j] = nonfinite ? NAN : a == 0 ? 1.0f : (float)(a / Q); // one rounding of the exact a / Q
        for (size_t i = lo; i < hi; i++)
            r.code[i] = nonfinite || a == 0 ? 0 : nearest_clamped((long double)x[i] * Q / a, Q);
    }
    for (size_t i = 0; i < n; i++) {
        if (bits == 8)
            r.q[i] = (uint8_t)(int8_t)r.code[i];
        else
            r.q[i / 2] |= (uint8_t)((r.code[i] & 15) << (i % 2 ? 4 : 0));
    }
    return r;
}

static void ref_free(quant_ref *r) { free(r->q), free(r->scale), free(r->code); }

// ---- one case: quantize, then dequantize into dt and into fp32, added ----

typedef struct quant_out {
    uint8_t *q;
    float *scale;
    float *deq; // dequantized into the case's dt, widened
} quant_out;

static quant_out run_case(const char *what, int bits, zinf_dtype dt, const float *x, size_t n, size_t group) {
    const char *dn = zinf_dtype_name(dt);
    size_t groups = (n + group - 1) / group, bytes = bits == 8 ? n : (n + 1) / 2, es = zinf_dtype_size(dt);
    quant_ref r = ref_quantize(bits, x, n, group);
    void *dx = test_dev_of(dev, S, dt, x, n), *dq = test_dev_poisoned(dev, S, bytes);
    float *ds = test_dev_poisoned(dev, S, groups * sizeof(float));
    TRY(zinf_quantize(S, bits, dt, dx, n, group, dq, ds));
    quant_out o = {malloc(bytes), malloc(groups * sizeof(float)), malloc(n * sizeof(float))};
    from_device(S, o.q, dq, bytes);
    from_device(S, o.scale, ds, groups * sizeof(float));

    size_t bad = 0, at = 0;
    for (size_t i = 0; i < bytes; i++)
        if (o.q[i] != r.q[i]) bad += !bad ? (at = i, 1) : 1;
    CHECK(bad == 0, "%s bits %d %s n %zu group %zu: %zu of %zu code bytes differ, first %zu: 0x%02x vs 0x%02x", what,
          bits, dn, n, group, bad, bytes, at, o.q[at], r.q[at]);
    bad = 0;
    for (size_t j = 0; j < groups; j++)
        if (!same_f32(o.scale[j], r.scale[j])) bad += !bad ? (at = j, 1) : 1;
    CHECK(bad == 0, "%s bits %d %s n %zu group %zu: %zu of %zu scales differ, first %zu: %a vs %a", what, bits, dn, n,
          group, bad, groups, at, o.scale[at], r.scale[at]);

    // Dequantized into dt: the fp32 product (q * scale is exact in double, rounded once
    // to float), then rounded to dt.
    void *dout = test_dev_poisoned(dev, S, n * es), *h = malloc(n * es);
    TRY(zinf_dequantize(S, bits, dq, ds, n, group, dt, dout, false));
    from_device(S, h, dout, n * es);
    bad = 0;
    for (size_t i = 0; i < n; i++) {
        o.deq[i] = dt_load(h, dt, i);
        float want = test_rounded(dt, (float)((double)r.code[i] * r.scale[i / group]));
        if (!same_f32(o.deq[i], want)) bad += !bad ? (at = i, 1) : 1;
    }
    CHECK(bad == 0, "%s bits %d %s n %zu group %zu: %zu of %zu dequantized differ, first %zu: %a vs %a", what, bits, dn,
          n, group, bad, n, at, o.deq[at], test_rounded(dt, (float)((double)r.code[at] * r.scale[at / group])));

    // Added into fp32: out + (float)(q * scale), two fp32 roundings.
    float *acc = malloc(n * sizeof *acc), *hacc = malloc(n * sizeof *hacc);
    for (size_t i = 0; i < n; i++)
        acc[i] = (float)(urand() * 4 - 2);
    void *dacc = test_dev_of(dev, S, ZINF_DTYPE_F32, acc, n);
    TRY(zinf_dequantize(S, bits, dq, ds, n, group, ZINF_DTYPE_F32, dacc, true));
    from_device(S, hacc, dacc, n * sizeof *hacc);
    bad = 0;
    for (size_t i = 0; i < n; i++) {
        float p = (float)((double)r.code[i] * r.scale[i / group]), want = acc[i] + p;
        if (!same_f32(hacc[i], want)) bad += !bad ? (at = i, 1) : 1;
    }
    CHECK(bad == 0, "%s bits %d %s n %zu group %zu: %zu of %zu accumulated differ, first %zu: %a vs %a", what, bits, dn,
          n, group, bad, n, at, hacc[at], acc[at] + (float)((double)r.code[at] * r.scale[at / group]));

    // The error bound on the device's own codes and scales, in exact double arithmetic:
    // |q scale - x| <= scale / 2, and <= scale where +absmax clipped to Q - 1.
    int Q = 1 << (bits - 1);
    bad = 0;
    for (size_t i = 0; i < n; i++) {
        double s = o.scale[i / group];
        if (!isfinite(s) || !isfinite(x[i]) || s < 0x1p-126) continue; // a subnormal scale is a rounded a / Q
        int c = r.code[i];
        bool clipped = c == Q - 1 && (double)x[i] > (Q - 0.5) * s;
        double err = fabs((double)c * s - x[i]);
        if (!(err <= (clipped ? s : s / 2))) bad += !bad ? (at = i, 1) : 1;
    }
    CHECK(bad == 0, "%s bits %d %s n %zu group %zu: %zu elements beyond the error bound, first %zu", what, bits, dn, n,
          group, bad, at);

    zinf_device_free(dev, dx), zinf_device_free(dev, dq), zinf_device_free(dev, ds);
    zinf_device_free(dev, dout), zinf_device_free(dev, dacc);
    free(h), free(acc), free(hacc);
    ref_free(&r);
    return o;
}

static void out_free(quant_out *o) { free(o->q), free(o->scale), free(o->deq); }

// ---- cases ----

// Random values exactly representable in dt, with magnitudes that change every 97
// elements (so groups differ in scale) and a few exact zeros.
static void test_random(int bits, zinf_dtype dt, size_t n, size_t group) {
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) {
        double mag = ldexp(1, (int)((i / 97) % 9) - 4), u = urand();
        x[i] = u < 0.02 ? 0.0f : test_rounded(dt, (float)(mag * (urand() * 2 - 1)));
    }
    quant_out o = run_case("random", bits, dt, x, n, group);
    out_free(&o);
    free(x);
}

// Ties round to even; +absmax clips to Q - 1, -absmax gives -Q.
static void test_ties(zinf_dtype dt) {
    const float x8[] = {128, 2.5f, 3.5f, -2.5f, -128, 0.5f, 1.5f, -3.5f, 126.5f, -127.5f};
    const int want8[] = {127, 2, 4, -2, -128, 0, 2, -4, 126, -128};
    quant_out o = run_case("ties", 8, dt, x8, LEN(x8), 16);
    for (size_t i = 0; i < LEN(x8); i++)
        CHECK((int8_t)o.q[i] == want8[i], "bits 8 %s: %g quantized to %d, not %d", zinf_dtype_name(dt), x8[i],
              (int8_t)o.q[i], want8[i]);
    CHECK(o.scale[0] == 1.0f, "bits 8 %s: absmax 128 gives scale %g", zinf_dtype_name(dt), o.scale[0]);
    out_free(&o);

    const float x4[] = {8, 0.5f, 1.5f, -8, 2.5f, -0.5f, -1.5f, 7, 6.5f};
    const int want4[] = {7, 0, 2, -8, 2, 0, -2, 7, 6};
    o = run_case("ties", 4, dt, x4, LEN(x4), 10);
    for (size_t i = 0; i < LEN(x4); i++) {
        int c = (o.q[i / 2] >> (i % 2 ? 4 : 0)) & 15;
        c = c >= 8 ? c - 16 : c;
        CHECK(c == want4[i], "bits 4 %s: %g quantized to %d, not %d", zinf_dtype_name(dt), x4[i], c, want4[i]);
    }
    CHECK(o.q[4] >> 4 == 0, "bits 4 %s: the high nibble after an odd n is 0x%x", zinf_dtype_name(dt), o.q[4] >> 4);
    out_free(&o);
}

// Groups of 16: random, zeros, one +inf, random, one NaN, one -inf, random (short).
static void test_special(int bits, zinf_dtype dt) {
    size_t group = 16, n = 6 * group + 5;
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++)
        x[i] = test_rounded(dt, (float)(urand() * 6 - 3));
    for (size_t i = group; i < 2 * group; i++)
        x[i] = (i % 2) ? -0.0f : 0.0f;
    x[2 * group + 7] = INFINITY;
    x[4 * group] = NAN;
    x[5 * group + 15] = -INFINITY;
    quant_out o = run_case("special", bits, dt, x, n, group);
    const char *dn = zinf_dtype_name(dt);
    CHECK(o.scale[1] == 1.0f, "bits %d %s: a zero group has scale %g", bits, dn, o.scale[1]);
    for (size_t j = 2; j <= 5; j++)
        if (j != 3) CHECK(isnan(o.scale[j]), "bits %d %s: non-finite group %zu has scale %g", bits, dn, j, o.scale[j]);
    for (size_t i = 0; i < n; i++) {
        size_t j = i / group;
        if (j == 1) CHECK(o.deq[i] == 0, "bits %d %s: zero group dequantizes %zu to %g", bits, dn, i, o.deq[i]);
        if (j == 2 || j == 4 || j == 5)
            CHECK(isnan(o.deq[i]), "bits %d %s: element %zu of a non-finite group gives %g", bits, dn, i, o.deq[i]);
        else
            CHECK(isfinite(o.deq[i]), "bits %d %s: element %zu of a finite group gives %g", bits, dn, i, o.deq[i]);
    }
    out_free(&o);
    free(x);
}

// fp32 groups whose absmax is subnormal: the scale may round, the codes may not.
static void test_subnormal(int bits) {
    size_t n = 40, group = 8;
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)((urand() * 2 - 1) * ldexp(1, -126 - (int)(i / group) * 5));
    quant_out o = run_case("subnormal", bits, ZINF_DTYPE_F32, x, n, group);
    out_free(&o);
    free(x);
}

static void test_bad_args(void) {
    void *p = (void *)256;
    float *f = (float *)256;
    CHECK(zinf_quantize(S, 3, ZINF_DTYPE_F32, p, 8, 8, p, f) == ZINF_ERR_INVAL, "bits 3 accepted");
    CHECK_CONTAINS(zinf_last_error(), "bits");
    CHECK(zinf_dequantize(S, 16, p, f, 8, 8, ZINF_DTYPE_F32, p, false) == ZINF_ERR_INVAL, "bits 16 accepted");
    CHECK(zinf_quantize(S, 4, ZINF_DTYPE_BF16, p, 8, 7, p, f) == ZINF_ERR_INVAL, "odd group with bits 4 accepted");
    CHECK_CONTAINS(zinf_last_error(), "even");
    CHECK(zinf_quantize(S, 8, ZINF_DTYPE_F32, p, 8, 0, p, f) == ZINF_ERR_INVAL, "group 0 accepted");
    CHECK(zinf_quantize(S, 8, ZINF_DTYPE_NONE, p, 8, 8, p, f) == ZINF_ERR_INVAL, "dtype none accepted");
    CHECK(zinf_dequantize(S, 8, p, f, 8, 8, ZINF_DTYPE_BF16, p, true) == ZINF_ERR_INVAL,
          "accumulate into bf16 accepted");
    CHECK_CONTAINS(zinf_last_error(), "accumulate");
    CHECK(zinf_quantize(S, 8, ZINF_DTYPE_F32, NULL, 8, 8, p, f) == ZINF_ERR_INVAL, "x NULL accepted");
    CHECK(zinf_dequantize(S, 4, p, f, 8, 8, ZINF_DTYPE_F16, NULL, false) == ZINF_ERR_INVAL, "out NULL accepted");
    CHECK(zinf_quantize(S, 8, ZINF_DTYPE_F32, NULL, 0, 8, NULL, NULL) == ZINF_OK, "n 0 is not a no-op");
    CHECK(zinf_dequantize(S, 4, NULL, NULL, 0, 8, ZINF_DTYPE_F32, NULL, true) == ZINF_OK, "n 0 is not a no-op");
    TRY(zinf_stream_sync(S));
}

int main(void) {
    dev = test_device(0);
    TRY(zinf_stream_create(dev, &S));
    printf("backend %s: %s\n", zinf_backend_name(zinf_device_get_caps(dev)->backend), zinf_device_get_caps(dev)->name);
    const zinf_dtype dts[] = {ZINF_DTYPE_F32, ZINF_DTYPE_BF16, ZINF_DTYPE_F16};
    // 2048: a block per group on CUDA; 1026, 64, 2: a warp per group. Lengths: one
    // element, odd (a lone low nibble), shorter than a group, not a multiple of one.
    const size_t groups[] = {2048, 1026, 64, 2}, ns[] = {1, 7, 64, 131, 2048, 4099};
    for (int b = 0; b < 2; b++) {
        int bits = b ? 4 : 8;
        for (size_t d = 0; d < LEN(dts); d++) {
            for (size_t g = 0; g < LEN(groups); g++)
                for (size_t k = 0; k < LEN(ns); k++)
                    test_random(bits, dts[d], ns[k], groups[g]);
            test_special(bits, dts[d]);
        }
        test_subnormal(bits);
    }
    for (size_t d = 0; d < LEN(dts); d++)
        test_ties(dts[d]);
    test_bad_args();
    zinf_device_mem mem;
    zinf_device_get_mem(dev, &mem);
    CHECK(mem.in_use == 0 && mem.allocations == 0, "%lld buffers (%llu bytes) leaked", (long long)mem.allocations,
          (unsigned long long)mem.in_use);
    zinf_stream_destroy(S);
    zinf_device_destroy(dev);
    return check_exit("test_gpu_quantize");
}
