// cpu_adam's SIMD levels against the scalar one, bit for bit: every optimizer, every
// gradient and copy dtype, odd lengths (vector tails), tiles that start unaligned, and
// gradients holding NaN and inf. The 16-bit conversions against references that do
// not share zinf's code (the compiler's _Float16, exact rounding in double). The
// gradient statistics against a long double sum, the same for every level and thread
// count; the pool against the single-threaded kernels, and its gradient accumulation
// against plain sums; bad arguments refused.
// timeout: 10 san=10 cuda-emu=10 san-cuda-emu=10
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "zinf.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next_rand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}
static float uniform(void) { return (float)((next_rand() >> 11) * 0x1p-53 * 2 - 1); }

static uint32_t bits(float x) {
    uint32_t b;
    memcpy(&b, &x, 4);
    return b;
}
static float from_bits(uint32_t b) {
    float x;
    memcpy(&x, &b, 4);
    return x;
}

static zinf_simd levels[3];
static int nlevels;

// ---- references for the conversions ----

// Round to nearest even onto the bf16 grid, in double: the two neighbours by
// truncation and the next value up, the nearer wins, a tie goes to the even one.
static uint16_t ref_bf16(float x) {
    uint32_t b = bits(x);
    if (isnan(x)) return 0; // callers compare NaN by class
    if (isinf(x)) return (uint16_t)(b >> 16);
    uint16_t lo = (uint16_t)(b >> 16), hi = (uint16_t)(lo + 1);
    double dl = fabs((double)x - (double)from_bits((uint32_t)lo << 16));
    double dh =
        isinf(from_bits((uint32_t)lo << 16)) ? INFINITY : fabs((double)from_bits((uint32_t)hi << 16) - (double)x);
    if ((hi & 0x7f80) == 0x7f80 && (lo & 0x7fff) == 0x7f7f) // the next value up is infinity
        dh = fabs(ldexp(1.0, 128) - fabs((double)x));       // as if the exponent went on
    if (dl < dh || (dl == dh && !(lo & 1))) return lo;
    return hi;
}

static uint16_t ref_f16(float x) {
    _Float16 h = (_Float16)x; // libgcc's correctly rounded conversion
    uint16_t u;
    memcpy(&u, &h, 2);
    return u;
}

static float ref_f16_to_f32(uint16_t u) {
    _Float16 h;
    memcpy(&h, &u, 2);
    return (float)h;
}

static bool nan16(uint16_t u, bool bf) {
    return bf ? (u & 0x7f80) == 0x7f80 && (u & 0x7f) : (u & 0x7c00) == 0x7c00 && (u & 0x3ff);
}

// ---- the conversions through the kernels ----

// lr 0, no decay: the update leaves every weight as it was, so out is exactly the
// conversion of the weights. Values: every bf16 neighbourhood, halfway cases, the half
// range edges, subnormals, infinities, NaNs with payloads, random bit patterns.
static void copy_rounding(void) {
    enum { N = 1 << 18 };
    float *p = malloc(N * 4), *m = calloc(N, 4), *v = calloc(N, 4), *g = calloc(N, 4), *keep = malloc(N * 4);
    uint16_t *out = malloc(N * 2);
    for (size_t i = 0; i < N; i++) {
        uint32_t r = (uint32_t)next_rand();
        switch (i % 6) {
        case 0: p[i] = from_bits(r); break;                               // anything, NaNs included
        case 1: p[i] = from_bits((r & 0xffff0000u) | 0x8000u); break;     // bf16 ties
        case 2: p[i] = from_bits((r & 0xffffe000u) | 0x1000u); break;     // fp16 mantissa ties
        case 3: p[i] = from_bits(0x33000000u + (r % 0x14800000u)); break; // the fp16 range, subnormals up
        case 4: p[i] = from_bits((r & 0x80000000u) | (0x477fe000u + (r % 0x4000u))); break; // near 65504..65536
        default: p[i] = uniform() * 1e-6f; break;
        }
    }
    p[0] = INFINITY, p[1] = -INFINITY, p[2] = 0.0f, p[3] = -0.0f, p[4] = 65504.0f, p[5] = 65520.0f;
    p[6] = from_bits(0x7f800001u), p[7] = from_bits(0xffc12345u), p[8] = FLT_MAX, p[9] = 0x1p-25f;
    memcpy(keep, p, N * 4);
    zinf_optim_hparams h = {.kind = ZINF_OPTIM_ADAMW, .beta1 = 0.9, .beta2 = 0.999, .eps = 1, .step = 1};
    for (int l = 0; l < nlevels; l++) {
        for (int bf = 0; bf < 2; bf++) {
            memcpy(p, keep, N * 4);
            zinf_optim_tile t = {.param = p,
                                 .exp_avg = m,
                                 .exp_avg_sq = v,
                                 .grad = g,
                                 .grad_dtype = ZINF_DTYPE_F32,
                                 .out = out,
                                 .out_dtype = bf ? ZINF_DTYPE_BF16 : ZINF_DTYPE_F16,
                                 .n = N};
            CHECK(zinf_optim_update(&h, &t, levels[l]) == ZINF_OK, "update: %s", zinf_last_error());
            int bad = 0;
            for (size_t i = 0; i < N && bad < 5; i++) {
                float x = keep[i];
                bool ok = isnan(x) ? nan16(out[i], bf) && (out[i] >> 15) == (bits(x) >> 31)
                                   : out[i] == (bf ? ref_bf16(x) : ref_f16(x));
                if (!ok) {
                    bad++;
                    CHECK(0, "%s %s copy of %a (%#x): %#x, want %#x", zinf_simd_name(levels[l]), bf ? "bf16" : "fp16",
                          (double)x, bits(x), out[i], bf ? ref_bf16(x) : ref_f16(x));
                }
            }
        }
    }
    free(p), free(m), free(v), free(g), free(keep), free(out);
}

// Lion with beta2 0 stores the (scaled by 1) gradient as its new moment: every half and
// many bf16 patterns read through each level's conversion.
static void grad_reading(void) {
    enum { N = 1 << 16 };
    uint16_t *g = malloc(N * 2);
    float *p = calloc(N, 4), *m = calloc(N, 4);
    for (uint32_t i = 0; i < N; i++)
        g[i] = (uint16_t)i;
    zinf_optim_hparams h = {.kind = ZINF_OPTIM_LION, .beta1 = 0.9, .beta2 = 0, .step = 1};
    for (int l = 0; l < nlevels; l++)
        for (int bf = 0; bf < 2; bf++) {
            memset(m, 0, N * 4);
            zinf_optim_tile t = {
                .param = p, .exp_avg = m, .grad = g, .grad_dtype = bf ? ZINF_DTYPE_BF16 : ZINF_DTYPE_F16, .n = N};
            CHECK(zinf_optim_update(&h, &t, levels[l]) == ZINF_OK, "update: %s", zinf_last_error());
            int bad = 0;
            for (uint32_t i = 0; i < N && bad < 5; i++) {
                float want = bf ? from_bits(i << 16) : ref_f16_to_f32((uint16_t)i);
                bool ok = isnan(want) ? isnan(m[i]) : m[i] == want; // -0 reads as +0 here (-0 + 0)
                if (!ok) {
                    bad++;
                    CHECK(0, "%s reads %s %#x as %a, want %a", zinf_simd_name(levels[l]), bf ? "bf16" : "fp16", i,
                          (double)m[i], (double)want);
                }
            }
        }
    free(g), free(p), free(m);
}

// ---- SIMD levels against scalar ----

enum { CAP = 4099 + 16 };

typedef struct arrays {
    float p[CAP], m[CAP], v[CAP];
    float g[CAP]; // fp32, or 16-bit in the first half
    uint16_t out[CAP];
} arrays;

static void fill_state(arrays *a, size_t n, zinf_dtype gt) {
    for (size_t i = 0; i < n; i++) {
        a->p[i] = uniform();
        a->m[i] = uniform() * 1e-2f;
        a->v[i] = fabsf(uniform()) * 1e-4f;
        float g = uniform() * (i % 3 == 0 ? 1e-3f : i % 3 == 1 ? 1e3f : 1.0f);
        if (i % 37 == 5) g = i % 3 == 0 ? NAN : i % 3 == 1 ? INFINITY : -INFINITY;
        if (gt == ZINF_DTYPE_F32)
            a->g[i] = g;
        else
            ((uint16_t *)a->g)[i] = gt == ZINF_DTYPE_BF16 ? (uint16_t)(bits(g) >> 16) : ref_f16(g);
    }
}

// Three steps of h on a copy of init starting at element off, at level simd.
static void run_steps(const arrays *init, arrays *a, zinf_optim_hparams h, size_t off, size_t n, zinf_dtype gt,
                      zinf_dtype ot, zinf_simd simd) {
    memcpy(a, init, sizeof *a);
    memset(a->out, 0x5a, sizeof a->out); // poison
    size_t gs = gt == ZINF_DTYPE_F32 ? 4 : 2;
    for (h.step = 1; h.step <= 3; h.step++) {
        zinf_optim_tile t = {.param = a->p + off,
                             .exp_avg = a->m + off,
                             .exp_avg_sq = a->v + off,
                             .grad = (char *)a->g + off * gs,
                             .grad_dtype = gt,
                             .out = a->out + off,
                             .out_dtype = ot,
                             .n = n};
        CHECK(zinf_optim_update(&h, &t, simd) == ZINF_OK, "update: %s", zinf_last_error());
    }
}

static const zinf_optim_hparams hsets[] = {
    {.kind = ZINF_OPTIM_ADAMW,
     .lr = 1e-3,
     .beta1 = 0.9,
     .beta2 = 0.999,
     .eps = 1e-8,
     .weight_decay = 0.01,
     .bias_correction = true},
    {.kind = ZINF_OPTIM_ADAM,
     .lr = 3e-4,
     .beta1 = 0.8,
     .beta2 = 0.95,
     .eps = 1e-6,
     .weight_decay = 0.1,
     .bias_correction = true,
     .grad_scale = 1.0f / 1024},
    {.kind = ZINF_OPTIM_ADAMW, .lr = 1e-2, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8},
    {.kind = ZINF_OPTIM_ADAGRAD, .lr = 1e-2, .eps = 1e-10, .weight_decay = 0.05, .lr_decay = 0.01},
    {.kind = ZINF_OPTIM_LION, .lr = 1e-4, .beta1 = 0.9, .beta2 = 0.99, .weight_decay = 0.1, .grad_scale = 0.5f},
};

static void parity(void) {
    static const size_t lengths[] = {1, 7, 8, 15, 16, 17, 31, 33, 100, 1001, 4099};
    static const zinf_dtype gts[] = {ZINF_DTYPE_F32, ZINF_DTYPE_BF16, ZINF_DTYPE_F16};
    static const zinf_dtype ots[] = {ZINF_DTYPE_NONE, ZINF_DTYPE_BF16, ZINF_DTYPE_F16};
    arrays *init = malloc(sizeof *init), *ref = malloc(sizeof *ref), *got = malloc(sizeof *got);
    int cases = 0, bad = 0;
    for (size_t hi = 0; hi < sizeof hsets / sizeof hsets[0]; hi++)
        for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++)
            for (size_t gi = 0; gi < 3; gi++)
                for (size_t oi = 0; oi < 3; oi++) {
                    size_t n = lengths[li], off = (li * 5 + gi * 3 + oi) % 16; // any start in a cache line
                    fill_state(init, off + n, gts[gi]);
                    run_steps(init, ref, hsets[hi], off, n, gts[gi], ots[oi], ZINF_SIMD_SCALAR);
                    for (int l = 1; l < nlevels; l++) {
                        run_steps(init, got, hsets[hi], off, n, gts[gi], ots[oi], levels[l]);
                        cases++;
                        bool same = memcmp(ref->p, got->p, sizeof ref->p) == 0 &&
                                    memcmp(ref->m, got->m, sizeof ref->m) == 0 &&
                                    memcmp(ref->v, got->v, sizeof ref->v) == 0 &&
                                    memcmp(ref->out, got->out, sizeof ref->out) == 0;
                        if (!same && bad++ < 5)
                            CHECK(0, "%s differs from scalar: set %zu, n %zu at +%zu, grad %s, copy %s",
                                  zinf_simd_name(levels[l]), hi, n, off, zinf_dtype_name(gts[gi]),
                                  zinf_dtype_name(ots[oi]));
                    }
                }
    CHECK(bad == 0, "%d of %d cases differ", bad, cases);
    if (nlevels > 1) printf("parity: %d cases bit-identical to scalar\n", cases - bad);
    free(init), free(ref), free(got);
}

// ---- gradient statistics ----

static void stats(zinf_cpu_pool **pools, int npools) {
    const size_t n = 3 * 65536 + 4099;
    float *g = malloc(n * 4);
    uint16_t *h = malloc(n * 2);
    long double want = 0;
    for (size_t i = 0; i < n; i++) {
        g[i] = uniform() * (i % 2 ? 1e-3f : 10.0f);
        want += (long double)g[i] * g[i];
    }
    zinf_grad_stats base, s;
    CHECK(zinf_grad_stats_compute(g, ZINF_DTYPE_F32, n, ZINF_SIMD_SCALAR, &base) == ZINF_OK, "stats");
    CHECK(fabsl(base.sumsq - want) <= 1e-12L * want && !base.nonfinite, "sumsq %.17g, want %.17Lg", base.sumsq, want);
    for (int l = 1; l < nlevels; l++) {
        CHECK(zinf_grad_stats_compute(g, ZINF_DTYPE_F32, n, levels[l], &s) == ZINF_OK, "stats");
        CHECK(s.sumsq == base.sumsq, "%s sumsq %.17g != scalar %.17g", zinf_simd_name(levels[l]), s.sumsq, base.sumsq);
    }
    for (int k = 0; k < npools; k++) {
        CHECK(zinf_grad_stats_pool(pools[k], g, ZINF_DTYPE_F32, n, &s) == ZINF_OK, "stats pool");
        CHECK(s.sumsq == base.sumsq, "%d threads: sumsq %.17g != %.17g", zinf_cpu_pool_threads(pools[k]), s.sumsq,
              base.sumsq);
    }
    // 16-bit gradients: the sum of the values they hold.
    for (int bf = 0; bf < 2; bf++) {
        long double w = 0;
        for (size_t i = 0; i < n; i++) {
            h[i] = bf ? (uint16_t)(bits(g[i]) >> 16) : ref_f16(g[i]);
            float x = bf ? from_bits((uint32_t)h[i] << 16) : ref_f16_to_f32(h[i]);
            w += (long double)x * x;
        }
        for (int l = 0; l < nlevels; l++) {
            zinf_dtype dt = bf ? ZINF_DTYPE_BF16 : ZINF_DTYPE_F16;
            CHECK(zinf_grad_stats_compute(h, dt, n, levels[l], &s) == ZINF_OK, "stats");
            CHECK(fabsl(s.sumsq - w) <= 1e-12L * w, "%s %s sumsq %.17g, want %.17Lg", zinf_simd_name(levels[l]),
                  zinf_dtype_name(dt), s.sumsq, w);
        }
    }
    // One inf or NaN anywhere, also in a tail, is seen by every level.
    size_t where[] = {0, 65535, 65536, n - 1};
    for (size_t k = 0; k < 4; k++)
        for (int nan = 0; nan < 2; nan++) {
            float keep = g[where[k]];
            g[where[k]] = nan ? NAN : -INFINITY;
            for (int l = 0; l < nlevels; l++) {
                CHECK(zinf_grad_stats_compute(g, ZINF_DTYPE_F32, n, levels[l], &s) == ZINF_OK && s.nonfinite,
                      "%s misses %s at %zu", zinf_simd_name(levels[l]), nan ? "NaN" : "-inf", where[k]);
            }
            CHECK(zinf_grad_stats_pool(pools[npools - 1], g, ZINF_DTYPE_F32, n, &s) == ZINF_OK && s.nonfinite,
                  "the pool misses %s at %zu", nan ? "NaN" : "-inf", where[k]);
            g[where[k]] = keep;
        }
    free(g);
    free(h);
}

// ---- the pool ----

// from_param and the rest: every optimizer at every level gives the bits of the update
// in place, whatever the destination held, and leaves its inputs as they were; with the
// destinations aligned to a vector (streamed stores) and not.
static void from_elsewhere(void) {
    enum { N = 1001, ROW = 1024 };
    static _Alignas(64) float src[3][ROW], kept[3][ROW], want[3][ROW], got[3][ROW], g[ROW];
    uint16_t out_want[N], out_got[N];
    for (size_t i = 0; i < N; i++)
        src[0][i] = uniform(), src[1][i] = uniform() * 1e-2f, src[2][i] = fabsf(uniform()) * 1e-4f, g[i] = uniform();
    memcpy(kept, src, sizeof kept);
    for (size_t hs = 0; hs < sizeof hsets / sizeof hsets[0]; hs++)
        for (int l = 0; l < nlevels; l++)
            for (size_t at = 0; at < 2; at++) { // got + at: aligned, then not
                zinf_optim_hparams h = hsets[hs];
                h.step = 3;
                memcpy(want, src, sizeof want);
                zinf_optim_tile t = {.param = want[0],
                                     .exp_avg = want[1],
                                     .exp_avg_sq = want[2],
                                     .grad = g,
                                     .grad_dtype = ZINF_DTYPE_F32,
                                     .out = out_want,
                                     .out_dtype = ZINF_DTYPE_BF16,
                                     .n = N};
                CHECK(zinf_optim_update(&h, &t, levels[l]) == ZINF_OK, "in place: %s", zinf_last_error());
                memset(got, 0x7f, sizeof got); // garbage the update must not read
                t.param = got[0] + at, t.exp_avg = got[1] + at, t.exp_avg_sq = got[2] + at, t.out = out_got;
                t.from_param = src[0], t.from_exp_avg = src[1], t.from_exp_avg_sq = src[2];
                CHECK(zinf_optim_update(&h, &t, levels[l]) == ZINF_OK, "from elsewhere: %s", zinf_last_error());
                bool m = h.kind != ZINF_OPTIM_ADAGRAD, v = h.kind != ZINF_OPTIM_LION;
                size_t bytes = N * sizeof(float);
                CHECK(memcmp(got[0] + at, want[0], bytes) == 0 && (!m || memcmp(got[1] + at, want[1], bytes) == 0) &&
                          (!v || memcmp(got[2] + at, want[2], bytes) == 0) &&
                          memcmp(out_got, out_want, sizeof out_got) == 0,
                      "hyperparameter set %zu at %s, destinations %saligned: an update from elsewhere differs from "
                      "one in place",
                      hs, zinf_simd_name(levels[l]), at ? "not " : "");
                CHECK(memcmp(src, kept, sizeof src) == 0, "hyperparameter set %zu at %s: the update wrote its sources",
                      hs, zinf_simd_name(levels[l]));
            }
}

static void pool_steps(zinf_cpu_pool **pools, int npools) {
    const size_t n = 100003;
    float *p0 = malloc(n * 4), *m0 = malloc(n * 4), *v0 = malloc(n * 4), *g = malloc(n * 4);
    float *p = malloc(n * 4), *m = malloc(n * 4), *v = malloc(n * 4), *p1 = malloc(n * 4);
    uint16_t *out = malloc(n * 2), *out1 = malloc(n * 2);
    for (size_t i = 0; i < n; i++)
        p0[i] = uniform(), m0[i] = uniform() * 1e-2f, v0[i] = fabsf(uniform()) * 1e-4f, g[i] = uniform();
    zinf_optim_hparams h = hsets[0];
    h.step = 7;
    for (int k = -1; k < npools; k++) {
        memcpy(p, p0, n * 4), memcpy(m, m0, n * 4), memcpy(v, v0, n * 4);
        zinf_optim_tile t = {.param = p,
                             .exp_avg = m,
                             .exp_avg_sq = v,
                             .grad = g,
                             .grad_dtype = ZINF_DTYPE_F32,
                             .out = k < 0 ? out1 : out,
                             .out_dtype = ZINF_DTYPE_BF16,
                             .n = n};
        if (k < 0) { // the reference: scalar, one thread
            CHECK(zinf_optim_update(&h, &t, ZINF_SIMD_SCALAR) == ZINF_OK, "update");
            memcpy(p1, p, n * 4);
            continue;
        }
        CHECK(zinf_optim_step(pools[k], &h, &t) == ZINF_OK, "step: %s", zinf_last_error());
        CHECK(memcmp(p, p1, n * 4) == 0 && memcmp(out, out1, n * 2) == 0, "%d threads differ from one",
              zinf_cpu_pool_threads(pools[k]));
        // The traffic pass leaves every buffer as it was.
        memcpy(p1, p, n * 4);
        CHECK(zinf_optim_traffic(pools[k], &h, &t) == ZINF_OK, "traffic");
        CHECK(memcmp(p, p1, n * 4) == 0, "the traffic pass changed the weights");
        // Ranges: contiguous, in order, covering [0, n), cut at multiples of 64.
        size_t at = 0;
        for (int i = 0; i < zinf_cpu_pool_threads(pools[k]); i++) {
            size_t lo, hi;
            zinf_cpu_pool_range(pools[k], n, i, &lo, &hi);
            CHECK(lo == at && hi >= lo && (hi == n || hi % 64 == 0), "worker %d range [%zu, %zu)", i, lo, hi);
            at = hi;
        }
        CHECK(at == n, "ranges end at %zu of %zu", at, n);
    }
    CHECK(zinf_optim_bytes_per_param(&h, &(zinf_optim_tile){.grad_dtype = ZINF_DTYPE_F32}) == 28, "AdamW fp32: 28 B");
    CHECK(zinf_optim_bytes_per_param(
              &h, &(zinf_optim_tile){.grad_dtype = ZINF_DTYPE_F32, .out_dtype = ZINF_DTYPE_BF16}) == 30,
          "AdamW fp32 + bf16 copy: 30 B");
    free(p0), free(m0), free(v0), free(g), free(p), free(m), free(v), free(p1), free(out), free(out1);
}

// ---- bad arguments ----

static void errors(void) {
    float x[8] = {0};
    zinf_optim_tile t = {.param = x, .exp_avg = x, .exp_avg_sq = x, .grad = x, .grad_dtype = ZINF_DTYPE_F32, .n = 8};
    struct {
        zinf_optim_hparams h;
        const char *says;
    } bad[] = {
        {{.kind = ZINF_OPTIM_ADAMW, .lr = -1, .beta1 = 0.9, .beta2 = 0.999, .step = 1}, "lr -1"},
        {{.kind = ZINF_OPTIM_ADAMW, .lr = 1, .beta1 = 1, .beta2 = 0.999, .step = 1}, "beta1 1 is not in [0, 1)"},
        {{.kind = ZINF_OPTIM_ADAM, .lr = 1, .beta1 = 0.9, .beta2 = NAN, .step = 1}, "beta2 nan"},
        {{.kind = ZINF_OPTIM_ADAMW, .lr = 1, .beta1 = 0.9, .beta2 = 0.9, .step = 0}, "step 0 is below 1"},
        {{.kind = ZINF_OPTIM_ADAGRAD, .lr = 1, .eps = -1, .step = 1}, "eps -1"},
        {{.kind = ZINF_OPTIM_ADAMW, .lr = 1, .beta2 = 0.9, .weight_decay = INFINITY, .step = 1}, "weight_decay inf"},
        {{.kind = ZINF_OPTIM_LION, .lr = 1, .beta2 = 0.9, .step = 1, .grad_scale = -2}, "grad_scale -2"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(zinf_optim_update(&bad[i].h, &t, ZINF_SIMD_SCALAR) == ZINF_ERR_INVAL, "case %zu accepted", i);
        CHECK_CONTAINS(zinf_last_error(), bad[i].says);
    }
    zinf_optim_hparams ok = {.kind = ZINF_OPTIM_ADAMW, .lr = 1, .beta2 = 0.9, .step = 1};
    zinf_optim_tile no_v = t;
    no_v.exp_avg_sq = NULL;
    CHECK(zinf_optim_update(&ok, &no_v, ZINF_SIMD_SCALAR) == ZINF_ERR_INVAL, "missing exp_avg_sq accepted");
    CHECK_CONTAINS(zinf_last_error(), "lacks a buffer");
    zinf_optim_tile f32_out = t;
    f32_out.out = x, f32_out.out_dtype = ZINF_DTYPE_F32;
    CHECK(zinf_optim_update(&ok, &f32_out, ZINF_SIMD_SCALAR) == ZINF_ERR_INVAL, "fp32 copy accepted");
    CHECK_CONTAINS(zinf_last_error(), "must be bf16 or fp16, not fp32");
    zinf_cpu_info info;
    zinf_cpu_probe(&info);
    if (info.simd < ZINF_SIMD_AVX512) {
        CHECK(zinf_optim_update(&ok, &t, ZINF_SIMD_AVX512) == ZINF_ERR_UNSUPPORTED, "AVX-512 on a CPU without it");
        CHECK_CONTAINS(zinf_last_error(), "has no avx512");
    }
    zinf_grad_stats gs;
    CHECK(zinf_grad_stats_compute(x, ZINF_DTYPE_NONE, 8, ZINF_SIMD_SCALAR, &gs) == ZINF_ERR_INVAL,
          "statistics of a gradient without a dtype");
    CHECK_CONTAINS(zinf_last_error(), "must be fp32, bf16 or fp16, not none");
    zinf_cpu_pool *pool;
    CHECK(zinf_cpu_pool_create(&pool, -1) == ZINF_ERR_INVAL && !pool, "-1 threads accepted");
    // A pool made with 0 has a thread per core zinf_cpu_pool_cores counts.
    CHECK(zinf_cpu_pool_create(&pool, 0) == ZINF_OK && zinf_cpu_pool_threads(pool) == zinf_cpu_pool_cores(),
          "a pool of 0 has %d threads, zinf_cpu_pool_cores says %d", pool ? zinf_cpu_pool_threads(pool) : -1,
          zinf_cpu_pool_cores());
    zinf_cpu_pool_destroy(pool);
}

// zinf_cpu_add_stats: the same dst and the same norm, to the bit, as zinf_cpu_add (or
// _first) followed by zinf_grad_stats_pool, over lengths of several blocks with ragged
// ends, on every pool; an inf in the sums is flagged the same way.
static void pool_add_stats(zinf_cpu_pool **pools, int npools) {
    const size_t lens[] = {0, 1, 37, 65536, 65537, 3 * 65536 + 4099};
    size_t nlens = sizeof lens / sizeof lens[0], most = lens[nlens - 1];
    float *a = malloc(most * sizeof *a), *b = malloc(most * sizeof *b), *src = malloc(most * sizeof *src);
    CHECK(a && b && src, "out of memory");
    for (int k = 0; a && b && src && k < npools; k++)
        for (size_t li = 0; li < nlens; li++)
            for (int first = 0; first < 2; first++) {
                size_t n = lens[li];
                for (size_t i = 0; i < n; i++) {
                    a[i] = b[i] = 0x1p-8f * (float)(i % 1013) - 1.0f;
                    src[i] = 0x1p-12f * (float)((i * 7) % 509) - 0.06f;
                }
                if (n > 70000) src[70000] = INFINITY;
                zinf_grad_stats want, got;
                if (first)
                    zinf_cpu_add_first(pools[k], a, src, n);
                else
                    zinf_cpu_add(pools[k], a, src, n);
                CHECK(zinf_grad_stats_pool(pools[k], a, ZINF_DTYPE_F32, n, &want) == ZINF_OK, "%s", zinf_last_error());
                CHECK(zinf_cpu_add_stats(pools[k], b, src, n, first, &got) == ZINF_OK, "%s", zinf_last_error());
                CHECK(memcmp(a, b, n * sizeof *a) == 0, "add_stats of %zu (first %d) on %d threads: other values", n,
                      first, k + 1);
                CHECK(memcmp(&want.sumsq, &got.sumsq, sizeof want.sumsq) == 0 && want.nonfinite == got.nonfinite,
                      "add_stats of %zu (first %d) on %d threads: norm %a (%d), want %a (%d)", n, first, k + 1,
                      got.sumsq, got.nonfinite, want.sumsq, want.nonfinite);
            }
    free(a), free(b), free(src);
}

// zinf_cpu_copy: every element, whatever the pool's split of odd lengths, and none past.
static void pool_copy(zinf_cpu_pool **pools, int npools) {
    for (int k = 0; k < npools; k++)
        for (size_t n = 0; n < 300; n += 37) {
            float dst[300] = {0}, src[300];
            for (size_t i = 0; i < 300; i++)
                src[i] = 1.0f + (float)i;
            zinf_cpu_copy(pools[k], dst, src, n);
            for (size_t i = 0; i < 300; i++)
                CHECK(dst[i] == (i < n ? src[i] : 0.0f), "copy of %zu on %d threads: element %zu is %g", n, k + 1, i,
                      dst[i]);
        }
}

// zinf_cpu_add: every element's fp32 sum, whatever the pool's split of odd lengths.
static void pool_add(zinf_cpu_pool **pools, int npools) {
    for (int k = 0; k < npools; k++) {
        for (size_t n = 0; n < 300; n += 37) {
            float dst[300], src[300], want[300];
            for (size_t i = 0; i < n; i++) {
                dst[i] = 1.0f + 0x1p-20f * (float)i, src[i] = 0x1p-24f * (float)(i % 7) - 3.0f;
                want[i] = dst[i] + src[i];
            }
            dst[n < 300 ? n : 299] = 42.0f; // past the end: untouched
            zinf_cpu_add(pools[k], dst, src, n);
            for (size_t i = 0; i < n; i++)
                CHECK(dst[i] == want[i], "add of %zu on %d threads: element %zu %g, want %g", n, k + 1, i, dst[i],
                      want[i]);
            if (n < 300) CHECK(dst[n] == 42.0f, "add of %zu wrote past its end", n);
        }
        // zinf_cpu_add_first: the bits of adding to zeros whatever dst held, -0 to +0
        // and a NaN kept, over more than a vector and a tail, and nothing past its end.
        const float special[8] = {1.5f, -0.0f, 0.0f, -3.0f, NAN, 0x1p-149f, -0x1p-149f, 7.0f};
        float dst[40], src[40];
        for (int i = 0; i < 40; i++)
            dst[i] = 99.0f, src[i] = special[i % 8];
        zinf_cpu_add_first(pools[k], dst, src, 39);
        for (int i = 0; i < 39; i++) {
            float want = 0.0f + src[i];
            CHECK(memcmp(&dst[i], &want, sizeof want) == 0, "add_first on %d threads: element %d %a, want %a", k + 1, i,
                  dst[i], want);
            if (src[i] == 0.0f) CHECK(!signbit(dst[i]), "add_first kept a -0 at %d", i);
        }
        CHECK(dst[39] == 99.0f, "add_first wrote past its end");
    }
}

// The pools run the level ZINF_SIMD picks once per process: each level below this
// CPU's best gets a child of its own that runs the pool additions with it.
static void pool_add_levels(zinf_simd best) {
    for (zinf_simd s = ZINF_SIMD_SCALAR; s < best; s++) {
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            setenv("ZINF_SIMD", zinf_simd_name(s), 1);
            zinf_cpu_pool *pools[3];
            for (int k = 0; k < 3; k++)
                CHECK(zinf_cpu_pool_create(&pools[k], k + 1) == ZINF_OK, "pool of %d: %s", k + 1, zinf_last_error());
            CHECK(zinf_simd_active() == s, "ZINF_SIMD=%s ran %s", zinf_simd_name(s),
                  zinf_simd_name(zinf_simd_active()));
            pool_add(pools, 3);
            pool_add_stats(pools, 3);
            _exit(check_exit(zinf_simd_name(s)));
        }
        int st = 0;
        CHECK(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0,
              "the pool additions at %s failed", zinf_simd_name(s));
    }
}

int main(void) {
    zinf_cpu_info info;
    zinf_cpu_probe(&info);
    for (zinf_simd s = ZINF_SIMD_SCALAR; s <= info.simd; s++)
        levels[nlevels++] = s;
    if (info.simd < ZINF_SIMD_AVX512)
        printf("note: this CPU has no AVX-512 (best: %s); that level's kernels were not run\n",
               zinf_simd_name(info.simd));
    pool_add_levels(info.simd); // first: the level is picked at the first use
    zinf_cpu_pool *pools[3];
    for (int k = 0; k < 3; k++)
        CHECK(zinf_cpu_pool_create(&pools[k], k + 1) == ZINF_OK, "pool of %d: %s", k + 1, zinf_last_error());
    copy_rounding();
    grad_reading();
    parity();
    stats(pools, 3);
    pool_steps(pools, 3);
    pool_add(pools, 3);
    pool_add_stats(pools, 3);
    pool_copy(pools, 3);
    from_elsewhere();
    errors();
    for (int k = 0; k < 3; k++)
        zinf_cpu_pool_destroy(pools[k]);
    return check_exit("test_cpu_adam_simd");
}
