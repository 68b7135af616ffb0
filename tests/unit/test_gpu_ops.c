// Every device op against a reference written here in double precision, in fp32, bf16
// and fp16 storage, on random inputs (never zeros) with outputs poisoned (all bits
// set: NaN in every dtype) before the op, so an element the op fails to write fails
// the comparison. The device optimizer must equal cpu_adam bit for bit. Under the CUDA
// emulation (ZINF_TEST_CUDA_EMU) the products also run on the fallback kernel.
// timeout: 10 san=30 cuda-emu=75 san-cuda-emu=445
#include <math.h>

#include "check.h"
#include "gpu_test.h"
#include "zinf_half.h"

#define LEN(a) (sizeof(a) / sizeof((a)[0]))

static zinf_device *dev;
static zinf_stream *S;
static uint64_t rng = 0x9e3779b97f4a7c15ull;
static double urand(void) { return test_urand(&rng); }

// n random values in [-scale, scale], away from zero, exactly representable in dt.
static float *randv(zinf_dtype dt, size_t n, double scale) {
    float *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++) {
        double u = 0.05 + 0.95 * urand();
        v[i] = test_rounded(dt, (float)(scale * (urand() < 0.5 ? -u : u)));
    }
    return v;
}

// Relative tolerance per storage type: fp32 sums in another order; 16-bit results are
// rounded once on the way out (half an ulp: 2^-9 bf16, 2^-12 fp16) after fp32 work.
static double rtol_of(zinf_dtype dt) { return dt == ZINF_DTYPE_F32 ? 2e-5 : dt == ZINF_DTYPE_BF16 ? 1.0 / 128 : 1.0 / 1024; }

// The device result (n elements of dt at d) against ref: |a - r| <= rtol (|r| + rms(ref)).
static void compare_rtol(const char *what, zinf_dtype dt, const void *d, const double *ref, size_t n, double rtol) {
    size_t es = zinf_dtype_size(dt);
    void *h = malloc(n * es);
    from_device(S, h, d, n * es);
    double rms = 0;
    for (size_t i = 0; i < n; i++)
        rms += ref[i] * ref[i];
    rms = sqrt(rms / (double)n);
    double worst = 0;
    size_t bad = 0, at = 0;
    for (size_t i = 0; i < n; i++) {
        double a = dt_load(h, dt, i), err = fabs(a - ref[i]), lim = rtol * (fabs(ref[i]) + rms);
        if (!(err <= lim)) {
            if (!bad) at = i;
            bad++;
        }
        if (err / (fabs(ref[i]) + rms) > worst || isnan(err)) worst = isnan(err) ? INFINITY : err / (fabs(ref[i]) + rms);
    }
    CHECK(bad == 0, "%s %s: %zu of %zu elements off, first at %zu: %g vs %g (worst rel %.3g, rtol %.3g)", what,
          zinf_dtype_name(dt), bad, n, at, dt_load(h, dt, at), ref[at], worst, rtol);
    free(h);
}

static void compare(const char *what, zinf_dtype dt, const void *d, const double *ref, size_t n) {
    compare_rtol(what, dt, d, ref, n, rtol_of(dt));
}

static void compare_f32(const char *what, const float *d, const double *ref, size_t n, double rtol) {
    float *h = malloc(n * sizeof *h);
    from_device(S, h, d, n * sizeof *h);
    size_t bad = 0, at = 0;
    for (size_t i = 0; i < n; i++)
        if (!(fabs(h[i] - ref[i]) <= rtol * (1 + fabs(ref[i])))) bad += !bad ? (at = i, 1) : 1;
    CHECK(bad == 0, "%s: %zu of %zu off, first at %zu: %g vs %g", what, bad, n, at, h[at], ref[at]);
    free(h);
}

static double gelu_ref(double x) { return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }

// ---- gemm ----

// residual: c's starting values come as the residual instead (beta 0), c poisoned.
static void test_gemm(zinf_dtype dt, bool ta, bool tb, bool bias, float beta, int batch, bool residual) {
    int m = 37, n = 29, k = 41, nb = batch > 1 ? batch : 1;
    size_t sa = (size_t)m * k, sb = (size_t)k * n, sc = (size_t)m * n;
    float *a = randv(dt, sa * nb, 1), *b = randv(dt, sb * nb, 1), *c = randv(dt, sc * nb, 1), *bv = randv(dt, n, 1);
    void *da = test_dev_of(dev, S, dt, a, sa * nb), *db = test_dev_of(dev, S, dt, b, sb * nb), *dbias = test_dev_of(dev, S, dt, bv, n);
    void *dc = beta != 0 ? test_dev_of(dev, S, dt, c, sc * nb) : test_dev_poisoned(dev, S, sc * nb * zinf_dtype_size(dt));
    void *dres = residual ? test_dev_of(dev, S, dt, c, sc) : NULL;
    zinf_gemm_args g = {.dt = dt, .trans_a = ta, .trans_b = tb, .m = m, .n = n, .k = k, .a = da, .lda = ta ? m : k,
                        .b = db, .ldb = tb ? k : n, .c = dc, .ldc = n, .bias = bias ? dbias : NULL, .alpha = 0.75f,
                        .beta = beta, .batch = batch, .stride_a = (int64_t)sa, .stride_b = (int64_t)sb,
                        .stride_c = (int64_t)sc, .residual = dres};
    TRY(zinf_gemm(S, &g));
    double *ref = malloc(sc * nb * sizeof *ref);
    for (int x = 0; x < nb; x++)
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++) {
                double sum = 0;
                for (int l = 0; l < k; l++)
                    sum += (double)a[x * sa + (ta ? (size_t)l * m + i : (size_t)i * k + l)] *
                           b[x * sb + (tb ? (size_t)j * k + l : (size_t)l * n + j)];
                ref[x * sc + (size_t)i * n + j] = 0.75 * sum + (residual ? 1 : beta) * c[x * sc + (size_t)i * n + j] +
                                                  (bias ? bv[j] : 0);
            }
    char what[80];
    snprintf(what, sizeof what, "gemm ta=%d tb=%d bias=%d beta=%g batch=%d residual=%d", ta, tb, bias, beta, batch,
             residual);
    compare(what, dt, dc, ref, sc * nb);
    if (residual) {
        g.beta = 1.0f;
        CHECK(zinf_gemm(S, &g) == ZINF_ERR_INVAL, "a residual with beta 1 accepted");
        CHECK_CONTAINS(zinf_last_error(), "a residual needs");
        g.beta = 0.0f, g.ldc = n + 1;
        CHECK(zinf_gemm(S, &g) == ZINF_ERR_INVAL, "a residual with rows not packed accepted");
        zinf_device_free(dev, dres);
    }
    zinf_device_free(dev, da), zinf_device_free(dev, db), zinf_device_free(dev, dc), zinf_device_free(dev, dbias);
    free(a), free(b), free(c), free(bv), free(ref);
}

// One product on pointers as the device gives them (256-byte aligned), then on A, B and
// C one element past: on CUDA the algorithm the first was given must not serve the
// second (cuBLASLt picks for the alignment it is told; the emulation refuses an
// algorithm chosen for more alignment than its pointers have).
static void test_gemm_alignment(zinf_dtype dt) {
    int m = 24, n = 16, k = 32;
    size_t es = zinf_dtype_size(dt), sa = (size_t)m * k, sb = (size_t)k * n, sc = (size_t)m * n;
    for (int shift = 0; shift <= 1; shift++) {
        float *a = randv(dt, sa + 1, 1), *b = randv(dt, sb + 1, 1);
        void *da = test_dev_of(dev, S, dt, a, sa + 1), *db = test_dev_of(dev, S, dt, b, sb + 1);
        void *dc = test_dev_poisoned(dev, S, (sc + 1) * es);
        zinf_gemm_args g = {.dt = dt,
                            .m = m,
                            .n = n,
                            .k = k,
                            .a = (char *)da + shift * es,
                            .lda = k,
                            .b = (char *)db + shift * es,
                            .ldb = n,
                            .c = (char *)dc + shift * es,
                            .ldc = n,
                            .alpha = 1.0f};
        TRY(zinf_gemm(S, &g));
        double *ref = malloc(sc * sizeof *ref);
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++) {
                double sum = 0;
                for (int l = 0; l < k; l++)
                    sum += (double)a[shift + (size_t)i * k + l] * b[shift + (size_t)l * n + j];
                ref[(size_t)i * n + j] = sum;
            }
        compare(shift ? "gemm on pointers one element past the device's alignment" : "gemm on aligned pointers", dt,
                g.c, ref, sc);
        zinf_device_free(dev, da), zinf_device_free(dev, db), zinf_device_free(dev, dc);
        free(a), free(b), free(ref);
    }
}

// A product with GELU in its epilogue (zinf_gemm_act), then the backward's product
// with GELU's derivative at the saved input. n = 32 takes cuBLASLt's epilogue on CUDA;
// 29 (rows not a multiple of 8) the backend's product and then its GELU kernels.
static void test_gemm_gelu(zinf_dtype dt, bool bias, int n) {
    int m = 37, k = 41;
    size_t es = zinf_dtype_size(dt), sc = (size_t)m * n;
    float *a = randv(dt, (size_t)m * k, 1), *b = randv(dt, (size_t)k * n, 1), *bv = randv(dt, n, 1);
    float *x = randv(dt, sc, 2); // DGELU's saved input
    void *da = test_dev_of(dev, S, dt, a, (size_t)m * k), *db = test_dev_of(dev, S, dt, b, (size_t)k * n);
    void *dbias = test_dev_of(dev, S, dt, bv, n), *dx = test_dev_of(dev, S, dt, x, sc);
    void *dc = test_dev_poisoned(dev, S, sc * es), *daux = test_dev_poisoned(dev, S, sc * es);
    zinf_gemm_args g = {.dt = dt,
                        .m = m,
                        .n = n,
                        .k = k,
                        .a = da,
                        .lda = k,
                        .b = db,
                        .ldb = n,
                        .c = dc,
                        .ldc = n,
                        .bias = bias ? dbias : NULL,
                        .alpha = 0.75f,
                        .act = ZINF_GEMM_GELU,
                        .aux = daux};
    TRY(zinf_gemm(S, &g));
    double *pre = malloc(sc * sizeof *pre), *ref = malloc(sc * sizeof *ref);
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double sum = 0;
            for (int l = 0; l < k; l++)
                sum += (double)a[(size_t)i * k + l] * b[(size_t)l * n + j];
            pre[(size_t)i * n + j] = 0.75 * sum + (bias ? bv[j] : 0);
            ref[(size_t)i * n + j] = gelu_ref(pre[(size_t)i * n + j]);
        }
    // Without the epilogue the input is rounded before GELU: twice the dtype's rtol.
    double rtol = dt == ZINF_DTYPE_F32 ? 1e-4 : 2 * rtol_of(dt);
    char what[80];
    snprintf(what, sizeof what, "gemm with GELU n=%d bias=%d: the input", n, bias);
    compare(what, dt, daux, pre, sc);
    snprintf(what, sizeof what, "gemm with GELU n=%d bias=%d", n, bias);
    compare_rtol(what, dt, dc, ref, sc, rtol);
    g.bias = NULL, g.act = ZINF_GEMM_DGELU, g.aux = dx; // the same product, times gelu'(x)
    TRY(zinf_gemm(S, &g));
    for (size_t i = 0; i < sc; i++)
        ref[i] = (pre[i] - (bias ? bv[i % n] : 0)) * (gelu_ref(x[i] + 1e-6) - gelu_ref(x[i] - 1e-6)) / 2e-6;
    snprintf(what, sizeof what, "gemm with GELU's derivative n=%d", n);
    compare_rtol(what, dt, dc, ref, sc, rtol);
    g.aux = NULL;
    CHECK(zinf_gemm(S, &g) == ZINF_ERR_INVAL, "a GELU epilogue without its input accepted");
    CHECK_CONTAINS(zinf_last_error(), "GELU epilogue needs aux");
    g.aux = dx, g.bias = dbias;
    CHECK(zinf_gemm(S, &g) == ZINF_ERR_INVAL, "GELU's derivative with a bias accepted");
    g.bias = NULL, g.act = (zinf_gemm_act)7;
    CHECK(zinf_gemm(S, &g) == ZINF_ERR_INVAL, "an unknown activation accepted");
    CHECK_CONTAINS(zinf_last_error(), "act is not a zinf_gemm_act");
    zinf_device_free(dev, da), zinf_device_free(dev, db), zinf_device_free(dev, dbias), zinf_device_free(dev, dx);
    zinf_device_free(dev, dc), zinf_device_free(dev, daux);
    free(a), free(b), free(bv), free(x), free(pre), free(ref);
}

// A gradient the op adds to (first false), or writes over poison (first).
static void *grad_buffer(zinf_dtype dt, const float *v, size_t n, bool first) {
    return first ? test_dev_poisoned(dev, S, n * zinf_dtype_size(dt)) : test_dev_of(dev, S, dt, v, n);
}

// Columns past one block of the CUDA kernel's 32, and not a multiple of it; rows in one
// chunk of the CUDA column sums' 256, or in three, the last ragged.
static void test_bias_grad(zinf_dtype dt, int rows, int cols, bool first) {
    float *g = randv(dt, (size_t)rows * cols, 1), *b0 = randv(dt, cols, 1);
    void *dg = test_dev_of(dev, S, dt, g, (size_t)rows * cols), *db = grad_buffer(dt, b0, cols, first);
    TRY(zinf_bias_grad(S, dt, db, dg, rows, cols, first));
    double ref[136];
    for (int j = 0; j < cols; j++) {
        ref[j] = first ? 0 : b0[j];
        for (int i = 0; i < rows; i++)
            ref[j] += g[(size_t)i * cols + j];
    }
    compare("bias_grad", dt, db, ref, cols);
    zinf_device_free(dev, dg), zinf_device_free(dev, db), free(g), free(b0);
}

// ---- layernorm ----

static void test_layernorm(zinf_dtype dt, int R, int C, bool first) {
    size_t n = (size_t)R * C;
    float *x = randv(dt, n, 2), *w = randv(dt, C, 1), *b = randv(dt, C, 1), *dy = randv(dt, n, 1);
    float *dx0 = randv(dt, n, 1), *dw0 = randv(dt, C, 1), *db0 = randv(dt, C, 1);
    void *dx_ = test_dev_of(dev, S, dt, x, n), *dw_ = test_dev_of(dev, S, dt, w, C), *db_ = test_dev_of(dev, S, dt, b, C), *ddy = test_dev_of(dev, S, dt, dy, n);
    void *out = test_dev_poisoned(dev, S, n * zinf_dtype_size(dt));
    float *mean = test_dev_poisoned(dev, S, R * 4), *rstd = test_dev_poisoned(dev, S, R * 4);
    void *gx = test_dev_of(dev, S, dt, dx0, n), *gw = grad_buffer(dt, dw0, C, first),
         *gb = grad_buffer(dt, db0, C, first);
    TRY(zinf_layernorm_fwd(S, dt, out, mean, rstd, dx_, dw_, db_, R, C, 1e-5f));
    TRY(zinf_layernorm_bwd(S, dt, gx, gw, gb, ddy, dx_, dw_, mean, rstd, R, C, first));
    double *ref = malloc(n * sizeof *ref), *rgx = malloc(n * sizeof *rgx), *rgw = malloc(C * sizeof *rgw);
    double *rgb = malloc(C * sizeof *rgb), *rm = malloc(R * sizeof *rm), *rr = malloc(R * sizeof *rr);
    for (int j = 0; j < C; j++)
        rgw[j] = first ? 0 : dw0[j], rgb[j] = first ? 0 : db0[j];
    for (int i = 0; i < R; i++) {
        const float *xr = x + (size_t)i * C, *g = dy + (size_t)i * C;
        double m = 0, v = 0;
        for (int j = 0; j < C; j++)
            m += xr[j];
        m /= C;
        for (int j = 0; j < C; j++)
            v += (xr[j] - m) * (xr[j] - m);
        v /= C;
        double rs = 1 / sqrt(v + 1e-5), a = 0, bsum = 0;
        rm[i] = m, rr[i] = rs;
        for (int j = 0; j < C; j++) {
            double xh = (xr[j] - m) * rs;
            ref[(size_t)i * C + j] = xh * w[j] + b[j];
            a += g[j] * w[j];
            bsum += g[j] * w[j] * xh;
            rgw[j] += g[j] * xh;
            rgb[j] += g[j];
        }
        for (int j = 0; j < C; j++) {
            double xh = (xr[j] - m) * rs;
            rgx[(size_t)i * C + j] = dx0[(size_t)i * C + j] + rs * (g[j] * w[j] - a / C - xh * bsum / C);
        }
    }
    compare("layernorm", dt, out, ref, n);
    compare_f32("layernorm mean", mean, rm, R, 1e-5);
    compare_f32("layernorm rstd", rstd, rr, R, 1e-5);
    compare("layernorm backward dx", dt, gx, rgx, n);
    compare("layernorm backward dw", dt, gw, rgw, C);
    compare("layernorm backward db", dt, gb, rgb, C);
    void *bufs[] = {dx_, dw_, db_, ddy, out, mean, rstd, gx, gw, gb};
    for (size_t i = 0; i < LEN(bufs); i++)
        zinf_device_free(dev, bufs[i]);
    free(x), free(w), free(b), free(dy), free(dx0), free(dw0), free(db0), free(ref), free(rgx), free(rm), free(rr),
        free(rgw), free(rgb);
}

// Rows of small values, so that eps weighs in rstd (7% here), as Llama's RMSNorm.
static void test_rmsnorm(zinf_dtype dt, int R, int C, bool first) {
    size_t n = (size_t)R * C;
    const float eps = 1e-5f;
    float *x = randv(dt, n, 0.02), *w = randv(dt, C, 1), *dy = randv(dt, n, 1), *dw0 = randv(dt, C, 1);
    float *dx0 = randv(dt, n, 1); // the input gradient is added to it
    void *dx_ = test_dev_of(dev, S, dt, x, n), *dw_ = test_dev_of(dev, S, dt, w, C),
         *ddy = test_dev_of(dev, S, dt, dy, n), *gw = grad_buffer(dt, dw0, C, first);
    void *out = test_dev_poisoned(dev, S, n * zinf_dtype_size(dt)), *gx = test_dev_of(dev, S, dt, dx0, n);
    float *rstd = test_dev_poisoned(dev, S, R * 4);
    TRY(zinf_rmsnorm_fwd(S, dt, out, rstd, dx_, dw_, R, C, eps));
    TRY(zinf_rmsnorm_bwd(S, dt, gx, gw, ddy, dx_, dw_, rstd, R, C, first));
    double *ref = malloc(n * sizeof *ref), *rgx = malloc(n * sizeof *rgx), *rr = malloc(R * sizeof *rr);
    double *rgw = malloc(C * sizeof *rgw);
    for (int j = 0; j < C; j++)
        rgw[j] = first ? 0 : dw0[j];
    for (int i = 0; i < R; i++) {
        const float *xr = x + (size_t)i * C, *g = dy + (size_t)i * C;
        double ss = 0, dnn = 0;
        for (int j = 0; j < C; j++)
            ss += (double)xr[j] * xr[j];
        double rs = 1 / sqrt(ss / C + eps);
        rr[i] = rs;
        for (int j = 0; j < C; j++) {
            double xn = xr[j] * rs;
            ref[(size_t)i * C + j] = w[j] * (double)test_rounded(dt, (float)xn); // n in dt, then the weight
            dnn += g[j] * w[j] * xn;
            rgw[j] += g[j] * xn;
        }
        for (int j = 0; j < C; j++)
            rgx[(size_t)i * C + j] = dx0[(size_t)i * C + j] + rs * (g[j] * w[j] - xr[j] * rs * dnn / C);
    }
    compare("rmsnorm", dt, out, ref, n);
    compare_f32("rmsnorm rstd", rstd, rr, R, 1e-5);
    compare("rmsnorm backward dx", dt, gx, rgx, n);
    compare("rmsnorm backward dw", dt, gw, rgw, C);
    void *bufs[] = {dx_, dw_, ddy, gw, out, gx, rstd};
    for (size_t i = 0; i < LEN(bufs); i++)
        zinf_device_free(dev, bufs[i]);
    free(x), free(w), free(dy), free(dw0), free(dx0), free(ref), free(rgx), free(rr), free(rgw);
}

// ---- elementwise ----

static void test_elementwise(zinf_dtype dt) {
    size_t n = 1037;
    float *x = randv(dt, n, 3), *y = randv(dt, n, 1);
    void *dx = test_dev_of(dev, S, dt, x, n), *dy = test_dev_of(dev, S, dt, y, n), *out = test_dev_poisoned(dev, S, n * zinf_dtype_size(dt));
    double *ref = malloc(n * sizeof *ref);

    TRY(zinf_gelu_fwd(S, dt, out, dx, n));
    for (size_t i = 0; i < n; i++)
        ref[i] = gelu_ref(x[i]);
    compare("gelu", dt, out, ref, n);

    TRY(zinf_memset_async(S, out, 0xff, n * zinf_dtype_size(dt)));
    TRY(zinf_gelu_bwd(S, dt, out, dx, dy, n));
    for (size_t i = 0; i < n; i++) // central difference of the reference, in double
        ref[i] = (gelu_ref(x[i] + 1e-6) - gelu_ref(x[i] - 1e-6)) / 2e-6 * y[i];
    compare("gelu backward", dt, out, ref, n);

    TRY(zinf_memset_async(S, out, 0xff, n * zinf_dtype_size(dt)));
    TRY(zinf_add(S, dt, out, dx, dy, n));
    for (size_t i = 0; i < n; i++)
        ref[i] = (double)x[i] + y[i];
    compare("add", dt, out, ref, n);

    TRY(zinf_add(S, dt, dx, dx, dy, n)); // in place: x += y
    compare("add in place", dt, dx, ref, n);

    TRY(zinf_scale(S, dt, dy, -0.375f, n));
    for (size_t i = 0; i < n; i++)
        ref[i] = -0.375 * y[i];
    compare("scale", dt, dy, ref, n);

    // Views one element in: on CUDA, arrays not 16-byte aligned go one element at a time.
    size_t es = zinf_dtype_size(dt);
    TRY(zinf_memset_async(S, out, 0xff, n * es));
    TRY(zinf_add(S, dt, (char *)out + es, (char *)dx + es, (char *)dy + es, n - 1));
    TRY(zinf_scale(S, dt, (char *)out + es, 2.0f, n - 1));
    for (size_t i = 1; i < n; i++) // dx holds x + y, dy holds -0.375 y
        ref[i - 1] = 2.0 * (((double)x[i] + y[i]) - 0.375 * y[i]);
    compare("add and scale, unaligned", dt, (char *)out + es, ref, n - 1);

    zinf_device_free(dev, dx), zinf_device_free(dev, dy), zinf_device_free(dev, out);
    free(x), free(y), free(ref);
}

static double sigmoid_ref(double g) { return 1 / (1 + exp(-g)); }

// The backward also in place (dgu over gu), as a model saves the memory. On CUDA rows of
// 37 go one value at a time, rows of 64 in 16-byte chunks.
static void test_swiglu(zinf_dtype dt, int F) {
    enum { R = 7 };
    size_t ng = (size_t)R * 2 * F, no = (size_t)R * F;
    float *gu = randv(dt, ng, 4), *dy = randv(dt, no, 1);
    void *dgu_in = test_dev_of(dev, S, dt, gu, ng), *ddy = test_dev_of(dev, S, dt, dy, no), *inplace = test_dev_of(dev, S, dt, gu, ng);
    void *out = test_dev_poisoned(dev, S, no * zinf_dtype_size(dt)), *dgu = test_dev_poisoned(dev, S, ng * zinf_dtype_size(dt));
    TRY(zinf_swiglu_fwd(S, dt, out, dgu_in, R, F));
    TRY(zinf_swiglu_bwd(S, dt, dgu, dgu_in, ddy, R, F));
    TRY(zinf_swiglu_bwd(S, dt, inplace, inplace, ddy, R, F));
    double *ro = malloc(no * sizeof *ro), *rg = malloc(ng * sizeof *rg);
    for (int r = 0; r < R; r++)
        for (int j = 0; j < F; j++) {
            double g = gu[(size_t)r * 2 * F + j], u = gu[(size_t)r * 2 * F + F + j], d = dy[(size_t)r * F + j];
            double sg = sigmoid_ref(g);
            ro[(size_t)r * F + j] = g * sg * u;
            rg[(size_t)r * 2 * F + j] = d * u * sg * (1 + g * (1 - sg));
            rg[(size_t)r * 2 * F + F + j] = d * g * sg;
        }
    compare("swiglu", dt, out, ro, no);
    compare("swiglu backward", dt, dgu, rg, ng);
    compare("swiglu backward in place", dt, inplace, rg, ng);
    void *bufs[] = {dgu_in, ddy, inplace, out, dgu};
    for (size_t i = 0; i < LEN(bufs); i++)
        zinf_device_free(dev, bufs[i]);
    free(gu), free(dy), free(ro), free(rg);
}

static void test_cast(zinf_dtype from, zinf_dtype to) {
    size_t n = 515;
    float *x = randv(from, n, 100);
    void *dx = test_dev_of(dev, S, from, x, n), *out = test_dev_poisoned(dev, S, n * zinf_dtype_size(to));
    TRY(zinf_cast(S, out, to, dx, from, n));
    // Conversion is exact rounding: the result must be the nearest value, bit for bit.
    void *h = malloc(n * zinf_dtype_size(to)), *want = test_pack(to, x, n);
    from_device(S, h, out, n * zinf_dtype_size(to));
    CHECK(memcmp(h, want, n * zinf_dtype_size(to)) == 0, "cast %s -> %s is not round-to-nearest-even",
          zinf_dtype_name(from), zinf_dtype_name(to));
    // A view one element in (on CUDA, one element at a time): the same bits.
    size_t ef = zinf_dtype_size(from), et = zinf_dtype_size(to);
    TRY(zinf_memset_async(S, out, 0xff, n * et));
    TRY(zinf_cast(S, (char *)out + et, to, (char *)dx + ef, from, n - 1));
    from_device(S, h, out, n * et);
    CHECK(memcmp((char *)h + et, (char *)want + et, (n - 1) * et) == 0, "cast %s -> %s, unaligned, differs",
          zinf_dtype_name(from), zinf_dtype_name(to));
    zinf_device_free(dev, dx), zinf_device_free(dev, out), free(x), free(h), free(want);
}

// sums += x widened: bit for bit the fp32 sum of the two, -0 added to +0 included (as
// the cast and add it replaces give), on a length that ends mid-block. With first, the
// bits of adding x into zeros, whatever the sums held (a -0 becomes +0).
static void test_accumulate(zinf_dtype dt) {
    size_t n = 1029;
    float *x = randv(dt, n, 3), *sums = randv(ZINF_DTYPE_F32, n, 100), *want = malloc(n * sizeof *want);
    sums[7] = 0, x[7] = -0.0f;
    for (size_t i = 0; i < n; i++)
        want[i] = sums[i] + x[i];
    void *dx = test_dev_of(dev, S, dt, x, n);
    float *ds = test_dev_of(dev, S, ZINF_DTYPE_F32, sums, n), *h = malloc(n * sizeof *h);
    TRY(zinf_accumulate(S, ds, dx, dt, n, false));
    from_device(S, h, ds, n * sizeof *h);
    CHECK(memcmp(h, want, n * sizeof *h) == 0, "accumulate %s: not the fp32 sums' bits", zinf_dtype_name(dt));
    for (size_t i = 0; i < n; i++)
        want[i] = 0.0f + x[i];
    CHECK(signbit(want[7]) == 0, "0 + -0 is +0");
    TRY(zinf_accumulate(S, ds, dx, dt, n, true)); // over the sums just made: not read
    from_device(S, h, ds, n * sizeof *h);
    CHECK(memcmp(h, want, n * sizeof *h) == 0, "accumulate %s, first: not the bits of adding into zeros",
          zinf_dtype_name(dt));
    // Views one element in (on CUDA, one element at a time): sums + x again.
    size_t es = zinf_dtype_size(dt);
    TRY(zinf_accumulate(S, ds + 1, (char *)dx + es, dt, n - 1, false));
    from_device(S, h, ds, n * sizeof *h);
    int bad = 0;
    for (size_t i = 1; i < n; i++)
        bad += memcmp(&h[i], &(float){want[i] + x[i]}, sizeof *h) != 0;
    CHECK(bad == 0, "accumulate %s, unaligned: %d sums' bits differ", zinf_dtype_name(dt), bad);
    CHECK(zinf_accumulate(S, ds, NULL, dt, n, false) == ZINF_ERR_INVAL && strstr(zinf_last_error(), "accumulate"),
          "accumulate from NULL: %s", zinf_last_error());
    zinf_device_free(dev, dx), zinf_device_free(dev, ds), free(x), free(sums), free(want), free(h);
}

// Sizes: one tile's part, many blocks with a ragged end, and hundreds of blocks (the
// piece past the 1024 blocks a piece gets is test_sumsq_many's). The same values one
// element off their 16-byte alignment give the same bits: the order of the sum depends
// on n alone.
static void test_sumsq(zinf_dtype dt, size_t n) {
    const size_t es = zinf_dtype_size(dt);
    float *x = randv(dt, n + 1, 2);
    void *dx = test_dev_of(dev, S, dt, x, n), *doff = test_dev_of(dev, S, dt, x, n + 1);
    TRY(zinf_copy_async(S, (char *)doff + es, dx, n * es, ZINF_COPY_D2D));
    double *out = test_dev_poisoned(dev, S, 2 * sizeof(double)), h[2], off[2], ref = 0;
    for (size_t i = 0; i < n; i++)
        ref += (double)x[i] * x[i];
    TRY(zinf_sumsq(S, dt, dx, n, out));
    from_device(S, h, out, sizeof h);
    CHECK(fabs(h[0] - ref) <= 1e-12 * ref && h[1] == 0, "sumsq %s of %zu: %.17g (%g) vs %.17g", zinf_dtype_name(dt), n,
          h[0], h[1], ref);
    TRY(zinf_sumsq(S, dt, (char *)doff + es, n, out));
    from_device(S, off, out, sizeof off);
    CHECK(memcmp(off, h, sizeof h) == 0, "sumsq %s of %zu, unaligned: %.17g (%g) vs %.17g aligned", zinf_dtype_name(dt),
          n, off[0], off[1], h[0]);
    zinf_device_free(dev, doff);
    x[n / 2] = dt == ZINF_DTYPE_F32 ? NAN : INFINITY;
    zinf_device_free(dev, dx);
    dx = test_dev_of(dev, S, dt, x, n);
    TRY(zinf_sumsq(S, dt, dx, n, out));
    from_device(S, h, out, sizeof h);
    CHECK(h[1] == 1, "sumsq %s of %zu: a non-finite element not flagged (%g)", zinf_dtype_name(dt), n, h[1]);
    zinf_device_free(dev, dx), zinf_device_free(dev, out), free(x);
}

// Seven squares each under half an ulp of the eighth's, which only a sum that takes them
// before it keeps: the same bits at 16-byte alignment and one element off, where the
// order of the sum is the same.
static void test_sumsq_order(zinf_dtype dt) {
    const size_t es = zinf_dtype_size(dt);
    float x[9] = {0, 0x1p-13f, 0x1p-13f, 0x1p-13f, 0x1p-13f, 0x1p-13f, 0x1p-13f, 0x1p-13f, 0x1p14f};
    double h[2][2];
    void *aligned = test_dev_of(dev, S, dt, x + 1, 8), *off = test_dev_of(dev, S, dt, x, 9);
    double *out = test_dev_poisoned(dev, S, 2 * sizeof(double));
    for (int k = 0; k < 2; k++) {
        TRY(zinf_sumsq(S, dt, k ? (char *)off + es : aligned, 8, out));
        from_device(S, h[k], out, sizeof h[k]);
    }
    CHECK(h[0][0] > 0x1p28 && memcmp(h[0], h[1], sizeof h[0]) == 0,
          "sumsq %s: %.17g aligned, %.17g unaligned; want the same, over 2^28", zinf_dtype_name(dt), h[0][0], h[1][0]);
    zinf_device_free(dev, aligned), zinf_device_free(dev, off), zinf_device_free(dev, out);
}

// Pieces of every kind in one list longer than a launch takes (SUMSQ_PIECES, 16): empty,
// a few elements, unaligned, several blocks with a ragged end, and on CUDA more tiles
// (8192 elements) than the 1024 blocks a piece gets (so a block strides over its
// piece's tiles), one with an inf. Each piece's two doubles must be zinf_sumsq's own
// bits for it.
static void test_sumsq_many(zinf_dtype dt) {
    enum { PIECES = 19 };
    const size_t es = zinf_dtype_size(dt), sizes[] = {0, 5, 8, 4099, 100003, (size_t)1 << 20 | 3};
    size_t off[PIECES + 1] = {0}, n[PIECES];
    for (int p = 0; p < PIECES; p++) {
        n[p] = p == 16 && dt == ZINF_DTYPE_F32 ? (size_t)1 << 23 | 3 : sizes[p % LEN(sizes)];
        off[p + 1] = off[p] + n[p] + 1; // + 1: the next piece one element off
    }
    float *x = randv(dt, off[PIECES], 2);
    x[off[9] + n[9] / 2] = INFINITY;
    void *dx = test_dev_of(dev, S, dt, x, off[PIECES]);
    double *many = test_dev_poisoned(dev, S, PIECES * 2 * sizeof(double));
    double *one = test_dev_poisoned(dev, S, PIECES * 2 * sizeof(double));
    zinf_sumsq_piece pieces[PIECES];
    for (int p = 0; p < PIECES; p++) {
        pieces[p] = (zinf_sumsq_piece){.x = (char *)dx + off[p] * es, .n = n[p], .out = many + 2 * p};
        TRY(zinf_sumsq(S, dt, pieces[p].x, n[p], one + 2 * p));
    }
    TRY(zinf_sumsq_many(S, dt, pieces, PIECES));
    double h_many[2 * PIECES], h_one[2 * PIECES];
    from_device(S, h_many, many, sizeof h_many), from_device(S, h_one, one, sizeof h_one);
    for (int p = 0; p < PIECES; p++)
        CHECK(memcmp(h_many + 2 * p, h_one + 2 * p, 2 * sizeof(double)) == 0,
              "sumsq_many %s, piece %d of %zu: %.17g (%g), zinf_sumsq %.17g (%g)", zinf_dtype_name(dt), p, n[p],
              h_many[2 * p], h_many[2 * p + 1], h_one[2 * p], h_one[2 * p + 1]);
    CHECK(h_many[2 * 9 + 1] == 1 && h_many[2 * 10 + 1] == 0, "sumsq_many %s: the inf flagged in piece 9 alone",
          zinf_dtype_name(dt));
    CHECK(zinf_sumsq_many(S, dt, (zinf_sumsq_piece[]){{.x = NULL, .n = 1, .out = many}}, 1) == ZINF_ERR_INVAL &&
              strstr(zinf_last_error(), "every piece needs x and out"),
          "sumsq_many with a NULL piece: %s", zinf_last_error());
    zinf_device_free(dev, dx), zinf_device_free(dev, many), zinf_device_free(dev, one), free(x);
}

// ---- rotary embedding ----

// The packed qkv with every q and k head of x turned by +angle (sign 1) or -angle (-1),
// the v heads as they were.
static void rope_ref(double *y, const float *x, const float *cs, const float *sn, int B, int T, int NH, int NKV, int hd,
                     double sign) {
    int half = hd / 2;
    size_t row = (size_t)(NH + 2 * NKV) * hd;
    for (size_t i = 0; i < (size_t)B * T * row; i++)
        y[i] = x[i];
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < NH + NKV; h++)
                for (int i = 0; i < half; i++) {
                    size_t at = ((size_t)b * T + t) * row + (size_t)h * hd + i;
                    double c = cs[t * half + i], s = sign * sn[t * half + i];
                    y[at] = x[at] * c - x[at + half] * s;
                    y[at + half] = x[at + half] * c + x[at] * s;
                }
}

// Tables as transformers makes them (fp32 inverse frequencies and angles); then the
// backward of a random gradient, and the backward undoing the forward. On CUDA heads of
// 10 go one value at a time, heads of 32 in 16-byte chunks (bf16, fp16: one a half).
static void test_rope(zinf_dtype dt, int HD) {
    enum { B = 2, T = 11, NH = 4, NKV = 2 };
    size_t n = (size_t)B * T * (NH + 2 * NKV) * HD;
    float *cs = malloc(T * HD / 2 * sizeof *cs), *sn = malloc(T * HD / 2 * sizeof *sn);
    for (int t = 0; t < T; t++)
        for (int i = 0; i < HD / 2; i++) {
            float inv = 1.0f / powf(10000.0f, (float)(2 * i) / HD), ang = (float)t * inv;
            cs[t * HD / 2 + i] = cosf(ang), sn[t * HD / 2 + i] = sinf(ang);
        }
    float *x = randv(dt, n, 2), *g = randv(dt, n, 1);
    void *dx = test_dev_of(dev, S, dt, x, n), *dg = test_dev_of(dev, S, dt, g, n);
    float *dcs = to_device(dev, S, cs, T * HD / 2 * sizeof *cs), *dsn = to_device(dev, S, sn, T * HD / 2 * sizeof *sn);
    double *ref = malloc(n * sizeof *ref), *orig = malloc(n * sizeof *orig);
    TRY(zinf_rope_fwd(S, dt, dx, dcs, dsn, B, T, NH, NKV, HD));
    rope_ref(ref, x, cs, sn, B, T, NH, NKV, HD, 1);
    compare("rope", dt, dx, ref, n);
    TRY(zinf_rope_bwd(S, dt, dg, dcs, dsn, B, T, NH, NKV, HD));
    rope_ref(ref, g, cs, sn, B, T, NH, NKV, HD, -1);
    compare("rope backward", dt, dg, ref, n);
    TRY(zinf_rope_bwd(S, dt, dx, dcs, dsn, B, T, NH, NKV, HD));
    for (size_t i = 0; i < n; i++)
        orig[i] = x[i];
    compare("rope backward of forward", dt, dx, orig, n);
    zinf_device_free(dev, dx), zinf_device_free(dev, dg), zinf_device_free(dev, dcs), zinf_device_free(dev, dsn);
    free(x), free(g), free(ref), free(orig), free(cs), free(sn);
}

// ---- attention ----

// GPT-2's multi-head attention (NKV and hd left 0: NH and C / NH), and grouped-query
// heads, with a sliding window shorter than the sequence or not. The backward runs
// twice and must repeat bit for bit.
static bool cudnn_only;         // dev's attention is device.attention "cudnn"
static bool on_cudnn;           // dev runs cuDNN's attention ("cudnn", or "auto" where cuDNN loads)
static uint64_t attention_bits; // FNV-1a of the last test_attention's input gradients

static void test_attention(zinf_dtype dt, int T, int NH, int NKV, int hd, int window) {
    enum { B = 2 };
    int nkv = NKV ? NKV : NH, hs = hd ? hd : 24 / NH, C = NH * hs, G = NH / nkv;
    if (cudnn_only && hs % 8) { // cuDNN refuses it, saying why
        zinf_attention_args a = {.dt = dt, .B = B, .T = T, .C = C, .NH = NH, .NKV = NKV, .hd = hd, .window = window};
        a.qkv = a.out = test_dev_poisoned(dev, S, (size_t)B * T * (NH + 2 * nkv) * hs * 2);
        a.lse = test_dev_poisoned(dev, S, (size_t)B * NH * T * 4);
        a.ws = test_dev_poisoned(dev, S, zinf_attention_workspace(dev, &a) + 1);
        CHECK(zinf_attention_fwd(S, &a) == ZINF_ERR_UNSUPPORTED && strstr(zinf_last_error(), "multiples of 8"),
              "cuDNN attention with head size %d: %s", hs, zinf_last_error());
        zinf_device_free(dev, (void *)a.qkv), zinf_device_free(dev, a.lse), zinf_device_free(dev, a.ws);
        return;
    }
    size_t row = (size_t)(NH + 2 * nkv) * hs, nq = (size_t)B * T * row, no = (size_t)B * T * C;
    float *qkv = randv(dt, nq, 1), *dout = randv(dt, no, 1);
    void *dq = test_dev_of(dev, S, dt, qkv, nq), *ddo = test_dev_of(dev, S, dt, dout, no), *out = test_dev_poisoned(dev, S, no * zinf_dtype_size(dt));
    void *dqkv = test_dev_poisoned(dev, S, nq * zinf_dtype_size(dt));
    float *lse = test_dev_poisoned(dev, S, (size_t)B * NH * T * 4);
    zinf_attention_args a = {.dt = dt, .B = B, .T = T, .C = C, .NH = NH, .NKV = NKV, .hd = hd, .window = window,
                             .qkv = dq, .out = out, .lse = lse, .dqkv = dqkv, .dout = ddo};
    size_t wsb = zinf_attention_workspace(dev, &a);
    a.ws = wsb ? test_dev_poisoned(dev, S, wsb) : NULL;
    TRY(zinf_attention_fwd(S, &a));
    TRY(zinf_attention_bwd(S, &a));
    size_t gbytes = nq * zinf_dtype_size(dt);
    void *first = malloc(gbytes), *again = malloc(gbytes);
    from_device(S, first, dqkv, gbytes);
    attention_bits = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < gbytes; i++)
        attention_bits = (attention_bits ^ ((unsigned char *)first)[i]) * 0x100000001b3ull;
    TRY(zinf_memset_async(S, dqkv, 0xff, gbytes));
    TRY(zinf_attention_bwd(S, &a));
    from_device(S, again, dqkv, gbytes);
    CHECK(memcmp(first, again, gbytes) == 0, "attention backward T=%d NH=%d NKV=%d hd=%d window=%d %s: a second run "
          "differs", T, NH, NKV, hd, window, zinf_dtype_name(dt));
    free(first), free(again);
    double *ro = calloc(no, sizeof *ro), *rg = calloc(nq, sizeof *rg), *rl = calloc((size_t)B * NH * T, sizeof *rl);
    double *p = malloc((size_t)T * sizeof *p), *dp = malloc((size_t)T * sizeof *dp), sc = 1 / sqrt(hs);
#define AT(b, t, h, i) (((size_t)(b) * T + (t)) * row + (size_t)(h) * hs + (i)) // head h of the packed row
#define Q(b, t, h, i) qkv[AT(b, t, h, i)]
#define K(b, t, g, i) qkv[AT(b, t, NH + (g), i)]
#define VV(b, t, g, i) qkv[AT(b, t, NH + nkv + (g), i)]
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                int g = h / G, lo = window && t >= window ? t - window + 1 : 0;
                double mx = -INFINITY, sum = 0, D = 0;
                for (int j = lo; j <= t; j++) {
                    double s = 0;
                    for (int i = 0; i < hs; i++)
                        s += (double)Q(b, t, h, i) * K(b, j, g, i);
                    p[j] = s * sc;
                    mx = fmax(mx, p[j]);
                }
                for (int j = lo; j <= t; j++)
                    sum += exp(p[j] - mx);
                rl[((size_t)b * NH + h) * T + t] = mx + log(sum);
                const float *gr = dout + ((size_t)b * T + t) * C + (size_t)h * hs;
                for (int j = lo; j <= t; j++) {
                    p[j] = exp(p[j] - mx) / sum;
                    dp[j] = 0;
                    for (int i = 0; i < hs; i++) {
                        ro[((size_t)b * T + t) * C + (size_t)h * hs + i] += p[j] * VV(b, j, g, i);
                        dp[j] += (double)gr[i] * VV(b, j, g, i);
                    }
                    D += p[j] * dp[j];
                }
                for (int j = lo; j <= t; j++) {
                    double ds = p[j] * (dp[j] - D) * sc;
                    for (int i = 0; i < hs; i++) {
                        rg[AT(b, t, h, i)] += ds * K(b, j, g, i);
                        rg[AT(b, j, NH + g, i)] += ds * Q(b, t, h, i);
                        rg[AT(b, j, NH + nkv + g, i)] += p[j] * gr[i];
                    }
                }
            }
#undef AT
#undef Q
#undef K
#undef VV
    char what[128];
    snprintf(what, sizeof what, "attention T=%d NH=%d NKV=%d hd=%d window=%d", T, NH, NKV, hd, window);
    // On tensor cores P is rounded to the storage type before P V, as FlashAttention-2
    // rounds it, and the output once more: up to 1.13 times bf16's rtol seen (T=80,
    // one kv head), so twice it.
    compare_rtol(what, dt, out, ro, no, dt == ZINF_DTYPE_F32 ? rtol_of(dt) : 2 * rtol_of(dt));
    snprintf(what, sizeof what, "attention lse T=%d NH=%d NKV=%d hd=%d window=%d", T, NH, NKV, hd, window);
    compare_f32(what, lse, rl, (size_t)B * NH * T, dt == ZINF_DTYPE_F32 ? 1e-5 : 1e-4);
    // The CUDA backward takes D_i = dO_i . O_i from out as stored (flash attention 2's
    // way), so in 16 bits its gradients carry O's rounding as well as their own; on
    // tensor cores (16-bit heads of 33 to 128 channels) also P's and dS's, rounded to the
    // storage type before their products as FlashAttention-2 rounds them: up to 4.4
    // times bf16's rtol in these cases, 3 times fp16's. cuDNN 9.19's on an H100: 6.2
    // times bf16's (one element of T=80, window 21).
    snprintf(what, sizeof what, "attention backward T=%d NH=%d NKV=%d hd=%d window=%d", T, NH, NKV, hd, window);
    compare_rtol(what, dt, dqkv, rg, nq, dt == ZINF_DTYPE_F32 ? rtol_of(dt) : (on_cudnn ? 8 : 6) * rtol_of(dt));
    void *bufs[] = {dq, ddo, out, dqkv, lse, a.ws};
    for (size_t i = 0; i < LEN(bufs); i++)
        zinf_device_free(dev, bufs[i]);
    free(qkv), free(dout), free(ro), free(rg), free(rl), free(p), free(dp);
}

// Every attention case, for zinf's kernels and for cuDNN's.
static void attention_cases(zinf_dtype dt) {
    test_attention(dt, 13, 3, 0, 0, 0);
    test_attention(dt, 13, 4, 2, 6, 0);
    test_attention(dt, 13, 6, 2, 5, 4);
    test_attention(dt, 13, 4, 1, 8, 13);
    // Several tiles (gpu/attention_plan.h: 32 queries and keys a tile up to hd 64;
    // 32 x 16 forward and 16 x 16 backward for hd 128; 16 x 8 and 8 x 8 for 256)
    // with a ragged last one, windows that end inside a tile, groups of 2 to 4
    // query heads, and head sizes short of their padded width (20, 40).
    test_attention(dt, 80, 4, 1, 64, 0);
    test_attention(dt, 80, 4, 2, 64, 21);
    test_attention(dt, 75, 6, 2, 40, 37);
    test_attention(dt, 70, 2, 2, 20, 33);
    test_attention(dt, 40, 4, 2, 128, 0);
    test_attention(dt, 40, 2, 1, 128, 19);
    test_attention(dt, 21, 2, 1, 256, 10);
    // Rows no 16-byte copy can read (36 channels, tokens 180 values apart): in 16-bit
    // storage, the CUDA cores' kernels (the tensor-core ones take whole 16-byte pieces).
    test_attention(dt, 75, 3, 1, 36, 0);
    // Tiles that need no mask (queries 64 to 127 see all of keys 0 to 63), with a window
    // that masks them again.
    test_attention(dt, 130, 2, 1, 64, 0);
    test_attention(dt, 130, 2, 1, 64, 90);
}

// cuDNN's fused attention (device.attention), on a CUDA device that can load it: the
// emulation's (CUDA_EMU_CUDNN=1, off by default so that the rest of the suite runs
// zinf's kernels, as on a machine without cuDNN) or a real libcudnn 9. The same 16-bit
// cases against the same references, the backward repeating bit for bit (the
// deterministic graph); fp32 refused with the reason; "auto" running cuDNN's (its bits,
// not zinf's kernels') and zinf's where cuDNN cannot. Elsewhere "cudnn" is refused,
// naming the key.
static uint64_t fixed_case_bits(void) { // one case from a fixed seed: its gradients' bits on dev
    rng = 0x243f6a8885a308d3ull;
    test_attention(ZINF_DTYPE_BF16, 80, 4, 2, 64, 21);
    return attention_bits;
}

static void test_cudnn_attention(void) {
    zinf_backend be = zinf_device_get_caps(dev)->backend;
    zinf_device_params p = {.backend = be, .attention = ZINF_ATTENTION_CUDNN};
    zinf_device *d = NULL;
    if (be != ZINF_BACKEND_CUDA) {
        CHECK(zinf_device_create(&d, &p) == ZINF_ERR_INVAL && strstr(zinf_last_error(), "device.attention"),
              "device.attention cudnn on the %s backend: %s", zinf_backend_name(be), zinf_last_error());
        zinf_device_destroy(d);
        return;
    }
    bool emulated = getenv("ZINF_TEST_CUDA_EMU") != NULL;
    if (emulated) {
        unsetenv("CUDA_EMU_CUDNN");
        CHECK(zinf_device_create(&d, &p) == ZINF_ERR_UNSUPPORTED && strstr(zinf_last_error(), "LD_LIBRARY_PATH"),
              "device.attention cudnn without cuDNN: %s", zinf_last_error());
        zinf_device_destroy(d);
        setenv("CUDA_EMU_CUDNN", "1", 1);
    }
    if (zinf_device_create(&d, &p) != ZINF_OK) {
        CHECK(!emulated, "the emulated cuDNN: %s", zinf_last_error());
        printf("cuDNN's attention not checked: %s\n", zinf_last_error());
        return;
    }
    zinf_device *own = dev;
    zinf_stream *own_stream = S;
    uint64_t zinf_bits = fixed_case_bits(), cudnn_bits = 0;
    on_cudnn = true;
    for (int impl = ZINF_ATTENTION_CUDNN; impl >= ZINF_ATTENTION_AUTO; impl--) {
        if (impl == ZINF_ATTENTION_AUTO) {
            p.attention = ZINF_ATTENTION_AUTO;
            TRY(zinf_device_create(&d, &p));
        }
        dev = d;
        TRY(zinf_stream_create(dev, &S));
        if (impl == ZINF_ATTENTION_CUDNN) {
            cudnn_only = true;
            attention_cases(ZINF_DTYPE_BF16);
            attention_cases(ZINF_DTYPE_F16);
            cudnn_only = false;
            cudnn_bits = fixed_case_bits();
            float *x = test_dev_poisoned(dev, S, 2 * 4 * 72 * 4);
            zinf_attention_args a = {
                .dt = ZINF_DTYPE_F32, .B = 1, .T = 4, .C = 24, .NH = 1, .qkv = x, .out = x, .lse = x, .ws = x};
            CHECK(zinf_attention_fwd(S, &a) == ZINF_ERR_UNSUPPORTED && strstr(zinf_last_error(), "bf16 or fp16"),
                  "fp32 attention on cuDNN: %s", zinf_last_error());
            zinf_device_free(dev, x);
        } else {
            uint64_t auto_bits = fixed_case_bits();
            CHECK(auto_bits == cudnn_bits && auto_bits != zinf_bits,
                  "\"auto\" did not run cuDNN's attention where it loads (the same bits as \"cudnn\": %d, as zinf's "
                  "kernels: %d)",
                  auto_bits == cudnn_bits, auto_bits == zinf_bits);
            test_attention(ZINF_DTYPE_F16, 40, 2, 1, 128, 0);
        }
        // A head one element past a 16-byte boundary: "cudnn" refuses it, "auto" runs zinf's.
        unsigned char *x = test_dev_poisoned(dev, S, 4096);
        zinf_attention_args a = {.dt = ZINF_DTYPE_BF16,
                                 .B = 1,
                                 .T = 4,
                                 .C = 8,
                                 .NH = 1,
                                 .qkv = x + 2,
                                 .out = x + 1024,
                                 .lse = (float *)(x + 2048),
                                 .ws = x + 3072};
        zinf_status st = zinf_attention_fwd(S, &a);
        if (impl == ZINF_ATTENTION_CUDNN)
            CHECK(st == ZINF_ERR_UNSUPPORTED && strstr(zinf_last_error(), "16-byte aligned"),
                  "a misaligned head on cuDNN: %s", zinf_last_error());
        else
            CHECK(st == ZINF_OK, "a misaligned head under auto: %s", zinf_last_error());
        // No engine takes the graph (the emulation's hook: always a real cuDNN's verdict on a
        // GPU): "cudnn" says so with cuDNN's reason, "auto" runs zinf's kernels.
        if (emulated) {
            setenv("CUDA_EMU_CUDNN_NO_ENGINE", "1", 1);
            a.T = 6, a.qkv = x, a.ws = x + 3584;
            TRY(zinf_memset_async(S, x, 0, 512));
            st = zinf_attention_fwd(S, &a);
            if (impl == ZINF_ATTENTION_CUDNN)
                CHECK(st == ZINF_ERR_UNSUPPORTED && strstr(zinf_last_error(), "no engine of cuDNN"),
                      "a graph no engine takes under \"cudnn\": %s", zinf_last_error());
            else
                CHECK(st == ZINF_OK, "a graph no engine takes under auto: %s", zinf_last_error());
            unsetenv("CUDA_EMU_CUDNN_NO_ENGINE");
        }
        TRY(zinf_stream_sync(S));
        zinf_device_free(dev, x);
        zinf_stream_destroy(S);
        zinf_device_destroy(dev);
    }
    dev = own, S = own_stream, on_cudnn = false;
    if (emulated) unsetenv("CUDA_EMU_CUDNN");
}

// The front end refuses what the Llama family's ops cannot take, naming the argument.
static void test_bad_args(void) {
    void *x = (void *)256;
    CHECK(zinf_rmsnorm_fwd(S, ZINF_DTYPE_F32, x, x, x, x, 2, 8, -1e-5f) == ZINF_ERR_INVAL, "rmsnorm eps < 0 accepted");
    CHECK_CONTAINS(zinf_last_error(), "eps");
    CHECK(zinf_rmsnorm_bwd(S, ZINF_DTYPE_F32, x, NULL, x, x, x, x, 2, 8, false) == ZINF_ERR_INVAL,
          "rmsnorm no dw accepted");
    CHECK_CONTAINS(zinf_last_error(), "dw");
    CHECK(zinf_swiglu_fwd(S, ZINF_DTYPE_F32, x, x, 2, 0) == ZINF_ERR_INVAL, "swiglu F = 0 accepted");
    CHECK_CONTAINS(zinf_last_error(), "F must");
    CHECK(zinf_rope_fwd(S, ZINF_DTYPE_BF16, x, x, x, 1, 4, 4, 2, 7) == ZINF_ERR_INVAL, "rope odd hd accepted");
    CHECK_CONTAINS(zinf_last_error(), "hd");
    zinf_attention_args a = {
        .dt = ZINF_DTYPE_F32, .B = 1, .T = 4, .C = 32, .NH = 4, .NKV = 3, .qkv = x, .out = x, .lse = x, .ws = x};
    CHECK(zinf_attention_fwd(S, &a) == ZINF_ERR_INVAL, "NKV not dividing NH accepted");
    CHECK_CONTAINS(zinf_last_error(), "NKV");
    a.NKV = 2, a.hd = 6;
    CHECK(zinf_attention_fwd(S, &a) == ZINF_ERR_INVAL, "C other than NH * hd accepted");
    CHECK_CONTAINS(zinf_last_error(), "NH * hd");
    a.hd = 8, a.window = -1;
    CHECK(zinf_attention_fwd(S, &a) == ZINF_ERR_INVAL, "negative window accepted");
    CHECK_CONTAINS(zinf_last_error(), "window");
    CHECK(zinf_attention_workspace(dev, &a) == 0, "a workspace for a bad shape");
    a.window = 0;
    zinf_attention_args bwd = a;
    bwd.out = NULL, bwd.dqkv = x, bwd.dout = x;
    CHECK(zinf_attention_bwd(S, &bwd) == ZINF_ERR_INVAL, "backward without the forward's out accepted");
    CHECK_CONTAINS(zinf_last_error(), "out");
    // CUDA's tiles take a head of 256 channels at most; the host any.
    if (zinf_device_get_caps(dev)->backend == ZINF_BACKEND_CUDA) {
        a.C = 4 * 264, a.hd = 264;
        CHECK(zinf_attention_fwd(S, &a) == ZINF_ERR_UNSUPPORTED, "a head of 264 channels accepted by CUDA");
        CHECK_CONTAINS(zinf_last_error(), "head size 264");
        // Its column sums keep a row of fp32 partials in the 32 MiB workspace: a bias of
        // more than 8 Mi columns is refused before any launch (x is never touched).
        CHECK(zinf_bias_grad(S, ZINF_DTYPE_F32, x, x, 1, (8 << 20) + 1, false) == ZINF_ERR_UNSUPPORTED,
              "a bias of 8 Mi + 1 columns accepted by CUDA");
        CHECK_CONTAINS(zinf_last_error(), "8388609 columns are over the workspace");
    }
    zinf_embedding_part part = {.wte_lo = 0, .wte_n = -1};
    CHECK(zinf_embedding_fwd(S, ZINF_DTYPE_F32, x, x, x, NULL, 2, 4, 8, &part) == ZINF_ERR_INVAL,
          "embedding part with n < 0 accepted");
    CHECK_CONTAINS(zinf_last_error(), "embedding");
    CHECK(zinf_embedding_bwd(S, ZINF_DTYPE_F32, x, NULL, x, x, x, 2, 4, 8, &part) == ZINF_ERR_INVAL,
          "embedding backward part with n < 0 accepted");
    CHECK_CONTAINS(zinf_last_error(), "embedding backward");
    part = (zinf_embedding_part){.wte_n = 8, .wpe_n = 8};
    CHECK(zinf_embedding_fwd(S, ZINF_DTYPE_F32, x, x, x, NULL, 2, 4, 8, &part) == ZINF_ERR_INVAL,
          "embedding part with a wpe window and no wpe accepted");
    CHECK_CONTAINS(zinf_last_error(), "needs its table");
    TRY(zinf_stream_sync(S));
}

// ---- cross-entropy ----

// n elements of dt at device memory d, in host memory the caller frees.
static unsigned char *host_copy(zinf_dtype dt, const void *d, size_t n) {
    unsigned char *h = malloc(n * zinf_dtype_size(dt));
    from_device(S, h, d, n * zinf_dtype_size(dt));
    return h;
}

// Rows ld apart (ld > V: a padded head): the pad's logits, random here, take no part
// in the loss and their gradient is zero, in place too.
static void test_cross_entropy(zinf_dtype dt, bool in_place, int V, int ld) {
    int R = 11;
    size_t n = (size_t)R * ld;
    float *x = randv(dt, n, 4);
    int32_t tgt[11];
    for (int i = 0; i < R; i++)
        tgt[i] = (int32_t)(urand() * V);
    void *dx = test_dev_of(dev, S, dt, x, n), *dt_ = to_device(dev, S, tgt, sizeof tgt);
    void *dl = in_place ? dx : test_dev_poisoned(dev, S, n * zinf_dtype_size(dt));
    float *loss = test_dev_poisoned(dev, S, R * 4);
    TRY(zinf_cross_entropy(S, dt, loss, NULL, dl, dx, dt_, R, V, ld, 0.125f));
    double rl[11], *rg = calloc(n, sizeof *rg);
    for (int i = 0; i < R; i++) {
        const float *xr = x + (size_t)i * ld;
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j < V; j++)
            mx = fmax(mx, xr[j]);
        for (int j = 0; j < V; j++)
            sum += exp(xr[j] - mx);
        rl[i] = mx + log(sum) - xr[tgt[i]];
        for (int j = 0; j < V; j++)
            rg[(size_t)i * ld + j] = (exp(xr[j] - mx) / sum - (j == tgt[i])) * 0.125;
    }
    char what[80];
    snprintf(what, sizeof what, "cross_entropy losses, rows %d apart", ld);
    compare_f32(what, loss, rl, R, dt == ZINF_DTYPE_F32 ? 1e-5 : 1e-4);
    snprintf(what, sizeof what, "cross_entropy dlogits%s, rows %d apart", in_place ? " in place" : "", ld);
    compare(what, dt, dl, rg, n);
    unsigned char *h = host_copy(dt, dl, n);
    for (int i = 0; i < R; i++)
        for (int j = V; j < ld; j++)
            CHECK(dt_load(h, dt, (size_t)i * ld + j) == 0.0, "%s %s: pad column %d of row %d is %g, not 0", what,
                  zinf_dtype_name(dt), j, i, dt_load(h, dt, (size_t)i * ld + j));
    free(h);
    if (ld > V) {
        CHECK(zinf_cross_entropy(S, dt, loss, NULL, dl, dx, dt_, R, ld, V, 0.125f) == ZINF_ERR_INVAL,
              "cross_entropy with rows shorter than V accepted");
        CHECK_CONTAINS(zinf_last_error(), "ld must be at least V");
    }
    zinf_device_free(dev, dx), zinf_device_free(dev, dt_), zinf_device_free(dev, loss);
    if (!in_place) zinf_device_free(dev, dl);
    free(x), free(rg);
}

// ---- embedding ----

static int cmp_pos(const void *a, const void *b, void *tok) {
    const int32_t *t = tok;
    int x = *(const int32_t *)a, y = *(const int32_t *)b;
    return t[x] != t[y] ? (t[x] > t[y]) - (t[x] < t[y]) : (x > y) - (x < y);
}

// positions: GPT-2's wpe table, or none (the Llama family: wpe and dwpe NULL).
static void test_embedding(zinf_dtype dt, bool positions) {
    enum { B = 3, T = 7, C = 10, V = 5 }; // few tokens: repeats, so rows really sum
    float *wte = randv(dt, V * C, 1), *wpe = randv(dt, T * C, 1), *dy = randv(dt, B * T * C, 1);
    float *gte0 = randv(dt, V * C, 1), *gpe0 = randv(dt, T * C, 1);
    int32_t tok[B * T], order[B * T];
    for (int i = 0; i < B * T; i++)
        tok[i] = (int32_t)(urand() * V), order[i] = i;
    qsort_r(order, B * T, sizeof *order, cmp_pos, tok);
    void *dte = test_dev_of(dev, S, dt, wte, V * C), *dpe = test_dev_of(dev, S, dt, wpe, T * C), *ddy = test_dev_of(dev, S, dt, dy, B * T * C);
    void *gte = test_dev_of(dev, S, dt, gte0, V * C), *gpe = test_dev_of(dev, S, dt, gpe0, T * C);
    void *dtok = to_device(dev, S, tok, sizeof tok), *dord = to_device(dev, S, order, sizeof order);
    void *out = test_dev_poisoned(dev, S, (size_t)B * T * C * zinf_dtype_size(dt));
    TRY(zinf_embedding_fwd(S, dt, out, dtok, dte, positions ? dpe : NULL, B, T, C, NULL));
    TRY(zinf_embedding_bwd(S, dt, gte, positions ? gpe : NULL, ddy, dtok, dord, B, T, C, NULL));
    double ro[B * T * C], rte[V * C], rpe[T * C];
    for (int i = 0; i < V * C; i++)
        rte[i] = gte0[i];
    for (int i = 0; i < T * C; i++)
        rpe[i] = gpe0[i];
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int c = 0; c < C; c++) {
                int r = b * T + t;
                ro[r * C + c] = (double)wte[tok[r] * C + c] + (positions ? wpe[t * C + c] : 0);
                rte[tok[r] * C + c] += dy[r * C + c];
                if (positions) rpe[t * C + c] += dy[r * C + c];
            }
    compare("embedding", dt, out, ro, B * T * C);
    compare("embedding backward wte", dt, gte, rte, V * C);
    compare("embedding backward wpe", dt, gpe, rpe, T * C);
    void *bufs[] = {dte, dpe, ddy, gte, gpe, dtok, dord, out};
    for (size_t i = 0; i < LEN(bufs); i++)
        zinf_device_free(dev, bufs[i]);
    free(wte), free(wpe), free(dy), free(gte0), free(gpe0);
}

// ---- embedding in parts ----
// Memory-centric tiling hands the embedding its tables window by window: the parts,
// applied one by one, must give the plain op's bits.

// The n elements of dt at device memory d have the bits of the n at host memory want.
static void same_bits(const char *what, zinf_dtype dt, const void *d, const void *want, size_t n) {
    size_t es = zinf_dtype_size(dt), at = 0;
    unsigned char *got = host_copy(dt, d, n);
    while (at < n && memcmp(got + at * es, (const char *)want + at * es, es) == 0)
        at++;
    CHECK(at == n, "%s %s: element %zu is %.9g, not %.9g", what, zinf_dtype_name(dt), at, dt_load(got, dt, at),
          dt_load(want, dt, at));
    free(got);
}

// The window [a, b) of the flat [wte | wpe], wte's VC elements first, as a part.
static zinf_embedding_part part_of(int64_t a, int64_t b, int64_t VC) {
    int64_t te = (b < VC ? b : VC) - a, pe = b - (a > VC ? a : VC);
    return (zinf_embedding_part){a, te > 0 ? te : 0, a > VC ? a - VC : 0, pe > 0 ? pe : 0};
}

// Element lo of the device table p, or NULL for an absent window (n 0).
static void *elem(void *p, zinf_dtype dt, int64_t lo, int64_t n) {
    return n ? (char *)p + lo * zinf_dtype_size(dt) : NULL;
}

static void embedding_part_fwd(zinf_dtype dt, void *out, const int32_t *tok, void *wte, void *wpe,
                               const zinf_embedding_part *p, int B, int T, int C) {
    TRY(zinf_embedding_fwd(S, dt, out, tok, elem(wte, dt, p->wte_lo, p->wte_n), elem(wpe, dt, p->wpe_lo, p->wpe_n), B,
                           T, C, p));
}

static void embedding_part_bwd(zinf_dtype dt, void *dwte, void *dwpe, const void *dout, const int32_t *tok,
                               const int32_t *order, const zinf_embedding_part *p, int B, int T, int C) {
    TRY(zinf_embedding_bwd(S, dt, elem(dwte, dt, p->wte_lo, p->wte_n), elem(dwpe, dt, p->wpe_lo, p->wpe_n), dout, tok,
                           order, B, T, C, p));
}

// positions: GPT-2's wpe, or none (the Llama family).
static void test_embedding_parts(zinf_dtype dt, bool positions) {
    enum { B = 2, T = 5, C = 48, V = 37, N = B * T }; // C: a block of the CUDA kernels' 32 and a ragged one
    const int64_t VC = V * C, W = VC + (positions ? T * C : 0);
    size_t es = zinf_dtype_size(dt);
    float *wte = randv(dt, VC, 1), *wpe = randv(dt, T * C, 1), *dy = randv(dt, N * C, 1);
    float *gte0 = randv(dt, VC, 1), *gpe0 = randv(dt, T * C, 1), *out0 = randv(dt, N * C, 1);
    int32_t tok[N], order[N];
    for (int i = 0; i < N; i++)
        tok[i] = (int32_t)(urand() * V), order[i] = i;
    tok[0] = tok[4] = tok[7] = 11, tok[2] = tok[9] = V - 1; // repeats, and the last row, which a window straddles
    qsort_r(order, N, sizeof *order, cmp_pos, tok);
    void *dte = test_dev_of(dev, S, dt, wte, VC), *dpe = positions ? test_dev_of(dev, S, dt, wpe, T * C) : NULL;
    void *ddy = test_dev_of(dev, S, dt, dy, N * C);
    void *dtok = to_device(dev, S, tok, sizeof tok), *dord = to_device(dev, S, order, sizeof order);

    // The plain op.
    void *out = test_dev_poisoned(dev, S, N * C * es), *gte = test_dev_of(dev, S, dt, gte0, VC);
    void *gpe = positions ? test_dev_of(dev, S, dt, gpe0, T * C) : NULL;
    TRY(zinf_embedding_fwd(S, dt, out, dtok, dte, dpe, B, T, C, NULL));
    TRY(zinf_embedding_bwd(S, dt, gte, gpe, ddy, dtok, dord, B, T, C, NULL));
    unsigned char *h_out = host_copy(dt, out, N * C), *h_gte = host_copy(dt, gte, VC);
    unsigned char *h_gpe = positions ? host_copy(dt, gpe, T * C) : NULL;

    // Windows cut at arbitrary offsets: inside a row, straddling wte | wpe (with
    // positions), presented last first. out starts zeroed, as the caller keeps it.
    int64_t cut[] = {0, 5 * C + 17, VC - 30, positions ? VC + 2 * C + 11 : VC, W};
    int nw = positions ? 4 : 3;
    void *pout, *pgte = test_dev_of(dev, S, dt, gte0, VC);
    void *pgpe = positions ? test_dev_of(dev, S, dt, gpe0, T * C) : NULL;
    TRY(zinf_device_alloc(dev, N * C * es, "output", &pout));
    TRY(zinf_memset_async(S, pout, 0, N * C * es));
    for (int j = 0; j < nw; j++) {
        int k = (j + nw - 1) % nw;
        zinf_embedding_part p = part_of(cut[k], cut[k + 1], VC);
        embedding_part_fwd(dt, pout, dtok, dte, dpe, &p, B, T, C);
        embedding_part_bwd(dt, pgte, pgpe, ddy, dtok, dord, &p, B, T, C);
    }
    same_bits("embedding in parts", dt, pout, h_out, N * C);
    same_bits("embedding backward in parts: wte", dt, pgte, h_gte, VC);
    if (positions) same_bits("embedding backward in parts: wpe", dt, pgpe, h_gpe, T * C);

    // One window alone, on buffers of random values: it adds into its own elements and
    // leaves every other one as it was.
    int64_t lo = 11 * C + 7, hi = positions ? VC + C + 5 : VC - 3;
    zinf_embedding_part p = part_of(lo, hi, VC);
    void *o1 = test_dev_of(dev, S, dt, out0, N * C), *g1 = test_dev_of(dev, S, dt, gte0, VC);
    void *q1 = positions ? test_dev_of(dev, S, dt, gpe0, T * C) : NULL;
    embedding_part_fwd(dt, o1, dtok, dte, dpe, &p, B, T, C);
    embedding_part_bwd(dt, g1, q1, ddy, dtok, dord, &p, B, T, C);
    float *want = malloc(N * C * sizeof *want);
    for (int i = 0; i < N; i++)
        for (int c = 0; c < C; c++) {
            int64_t e = (int64_t)tok[i] * C + c, f = VC + (int64_t)(i % T) * C + c;
            float v = out0[i * C + c];
            if (e >= lo && e < hi) v = test_rounded(dt, v + wte[e]);
            if (positions && f >= lo && f < hi) v = test_rounded(dt, v + wpe[f - VC]);
            want[i * C + c] = v;
        }
    unsigned char *want_out = test_pack(dt, want, N * C), *want_te = test_pack(dt, gte0, VC);
    unsigned char *want_pe = test_pack(dt, gpe0, T * C);
    memcpy(want_te + p.wte_lo * es, h_gte + p.wte_lo * es, p.wte_n * es);
    if (positions) memcpy(want_pe + p.wpe_lo * es, h_gpe + p.wpe_lo * es, p.wpe_n * es);
    same_bits("embedding, one window", dt, o1, want_out, N * C);
    same_bits("embedding backward, one window: wte", dt, g1, want_te, VC);
    if (positions) same_bits("embedding backward, one window: wpe", dt, q1, want_pe, T * C);

    void *bufs[] = {dte, dpe, ddy, dtok, dord, out, gte, gpe, pout, pgte, pgpe, o1, g1, q1};
    for (size_t i = 0; i < LEN(bufs); i++)
        zinf_device_free(dev, bufs[i]);
    free(wte), free(wpe), free(dy), free(gte0), free(gpe0), free(out0), free(want);
    free(h_out), free(h_gte), free(h_gpe), free(want_out), free(want_te), free(want_pe);
}

// ---- cross-entropy in column blocks ----
// Memory-centric tiling of the output layer: the forward runs the fused op on whole rows
// and saves each row's lse; the backward recomputes one block of the vocabulary's logits
// at a time and turns them into their gradient with that lse. The blocks must give the
// fused op's bits.

// Columns [v0, v0 + n) of the rows x V elements of dt at host memory x, packed rows x n
// in host memory the caller frees.
static unsigned char *columns(zinf_dtype dt, const unsigned char *x, int rows, int V, int v0, int n) {
    size_t es = zinf_dtype_size(dt);
    unsigned char *h = malloc((size_t)rows * n * es);
    for (int r = 0; r < rows; r++)
        memcpy(h + (size_t)r * n * es, x + ((size_t)r * V + v0) * es, (size_t)n * es);
    return h;
}

static void test_cross_entropy_blocks(zinf_dtype dt) {
    enum { R = 5, V = 53 };
    const float dscale = 0.37f;
    size_t es = zinf_dtype_size(dt);
    float *x = randv(dt, R * V, 4);
    // The first and last columns, and each edge of the blocks below (17 alone in its own).
    int32_t tgt[R] = {0, V - 1, 17, 16, 18};
    unsigned char *hx = test_pack(dt, x, R * V);
    void *dx = to_device(dev, S, hx, R * V * es), *dtg = to_device(dev, S, tgt, sizeof tgt);

    // The fused op without and with lse: the same losses and gradient, and lse[r] the
    // very float the loss came from.
    float *loss0 = test_dev_poisoned(dev, S, R * 4), *loss1 = test_dev_poisoned(dev, S, R * 4);
    float *lse = test_dev_poisoned(dev, S, R * 4);
    void *g0 = test_dev_poisoned(dev, S, R * V * es), *g1 = test_dev_poisoned(dev, S, R * V * es);
    TRY(zinf_cross_entropy(S, dt, loss0, NULL, g0, dx, dtg, R, V, V, dscale));
    TRY(zinf_cross_entropy(S, dt, loss1, lse, g1, dx, dtg, R, V, V, dscale));
    float h_loss0[R], h_loss1[R], h_lse[R];
    from_device(S, h_loss0, loss0, sizeof h_loss0);
    from_device(S, h_loss1, loss1, sizeof h_loss1);
    from_device(S, h_lse, lse, sizeof h_lse);
    CHECK(memcmp(h_loss0, h_loss1, sizeof h_loss0) == 0, "cross_entropy %s: the losses differ with lse",
          zinf_dtype_name(dt));
    unsigned char *want = host_copy(dt, g0, R * V);
    same_bits("cross_entropy with lse: dlogits", dt, g1, want, R * V);
    double rl[R];
    for (int r = 0; r < R; r++) {
        const float *xr = x + r * V;
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j < V; j++)
            mx = fmax(mx, xr[j]);
        for (int j = 0; j < V; j++)
            sum += exp(xr[j] - mx);
        rl[r] = mx + log(sum);
        float loss = h_lse[r] - xr[tgt[r]];
        CHECK(memcmp(&loss, &h_loss1[r], 4) == 0, "cross_entropy %s row %d: loss %g is not lse %g - x[target] %g",
              zinf_dtype_name(dt), r, h_loss1[r], h_lse[r], xr[tgt[r]]);
    }
    compare_f32("cross_entropy lse", lse, rl, R, 1e-5);

    // The gradient block by block, out of place and in place.
    int cut[] = {0, 17, 18, V};
    for (int k = 0; k + 1 < (int)LEN(cut); k++) {
        int v0 = cut[k], n = cut[k + 1] - v0;
        unsigned char *bx = columns(dt, hx, R, V, v0, n), *bw = columns(dt, want, R, V, v0, n);
        void *dbx = to_device(dev, S, bx, R * n * es), *dbg = test_dev_poisoned(dev, S, R * n * es);
        char what[80];
        snprintf(what, sizeof what, "cross_entropy_grad columns [%d, %d)", v0, v0 + n);
        TRY(zinf_cross_entropy_grad(S, dt, dbg, dbx, dtg, lse, R, n, v0, dscale));
        same_bits(what, dt, dbg, bw, R * n);
        snprintf(what, sizeof what, "cross_entropy_grad columns [%d, %d) in place", v0, v0 + n);
        TRY(zinf_cross_entropy_grad(S, dt, dbx, dbx, dtg, lse, R, n, v0, dscale));
        same_bits(what, dt, dbx, bw, R * n);
        zinf_device_free(dev, dbx), zinf_device_free(dev, dbg);
        free(bx), free(bw);
    }

    // Refusals, on real buffers so that one let through shows as a wrong status.
    CHECK(zinf_cross_entropy_grad(S, dt, g1, dx, dtg, lse, R, 0, 0, dscale) == ZINF_ERR_INVAL,
          "cross_entropy_grad with n = 0 accepted");
    CHECK_CONTAINS(zinf_last_error(), "cross_entropy_grad");
    CHECK(zinf_cross_entropy_grad(S, dt, g1, dx, dtg, lse, R, V, -1, dscale) == ZINF_ERR_INVAL,
          "cross_entropy_grad with v0 < 0 accepted");
    CHECK_CONTAINS(zinf_last_error(), "cross_entropy_grad");
    CHECK(zinf_cross_entropy_grad(S, dt, g1, dx, dtg, NULL, R, V, 0, dscale) == ZINF_ERR_INVAL,
          "cross_entropy_grad without lse accepted");
    CHECK_CONTAINS(zinf_last_error(), "cross_entropy_grad");
    TRY(zinf_stream_sync(S));

    void *bufs[] = {dx, dtg, loss0, loss1, lse, g0, g1};
    for (size_t i = 0; i < LEN(bufs); i++)
        zinf_device_free(dev, bufs[i]);
    free(x), free(hx), free(want);
}

// ---- device optimizer ----

// Every hyperparameter away from its default (Adagrad's lr_decay too).
static zinf_optim_hparams optim_hparams(zinf_optimizer kind) {
    return (zinf_optim_hparams){.kind = kind,
                                .lr = 1e-3,
                                .beta1 = 0.9,
                                .beta2 = 0.95,
                                .eps = 1e-8,
                                .weight_decay = 0.1,
                                .lr_decay = 0.01,
                                .bias_correction = true,
                                .step = 3,
                                .grad_scale = 0.5f};
}

// An optimizer's n inputs, random (the second moments not negative), on the host (the
// gradients also packed as grad_dt in gp) and copied to the device.
typedef struct optim_inputs {
    float *p, *m, *v, *g, *dp, *dm, *dv;
    void *gp, *dg;
} optim_inputs;

static optim_inputs optim_inputs_make(zinf_dtype grad_dt, size_t n) {
    optim_inputs in = {.p = randv(ZINF_DTYPE_F32, n, 1),
                       .m = randv(ZINF_DTYPE_F32, n, 0.1),
                       .v = randv(ZINF_DTYPE_F32, n, 0.1),
                       .g = randv(grad_dt, n, 1)};
    for (size_t i = 0; i < n; i++)
        in.v[i] = fabsf(in.v[i]);
    in.gp = test_pack(grad_dt, in.g, n);
    in.dp = to_device(dev, S, in.p, n * 4), in.dm = to_device(dev, S, in.m, n * 4);
    in.dv = to_device(dev, S, in.v, n * 4), in.dg = to_device(dev, S, in.gp, n * zinf_dtype_size(grad_dt));
    return in;
}

static void optim_inputs_free(optim_inputs *in) {
    zinf_device_free(dev, in->dp), zinf_device_free(dev, in->dm), zinf_device_free(dev, in->dv);
    zinf_device_free(dev, in->dg);
    free(in->p), free(in->m), free(in->v), free(in->g), free(in->gp);
}

// n = 4099: eight elements a thread and the last three; with off, every array one
// element past its 16-byte alignment, one element a thread.
static void test_optim(zinf_optimizer kind, zinf_dtype grad_dt, zinf_dtype out_dt, int off) {
    size_t n = 4099;
    optim_inputs in = optim_inputs_make(grad_dt, n);
    float *p = in.p, *m = in.m, *v = in.v, *dp = in.dp, *dm = in.dm, *dv = in.dv;
    void *gp = in.gp, *dg = in.dg;
    void *dout = out_dt ? test_dev_poisoned(dev, S, n * 2) : NULL, *hout = out_dt ? malloc(n * 2) : NULL;
    void *want_out = out_dt ? malloc(n * 2) : NULL;
    zinf_optim_hparams h = optim_hparams(kind);
    const size_t gs = zinf_dtype_size(grad_dt);
    zinf_optim_tile dtile = {dp + off, dm + off,
                             dv + off, (char *)dg + off * gs,
                             grad_dt,  out_dt ? (char *)dout + off * 2 : NULL,
                             out_dt,   n - off,
                             NULL,     NULL,
                             NULL},
                    htile = {p + off, m + off,
                             v + off, (char *)gp + off * gs,
                             grad_dt, want_out ? (char *)want_out + off * 2 : NULL,
                             out_dt,  n - off,
                             NULL,    NULL,
                             NULL};
    TRY(zinf_device_optim(S, &h, &dtile));
    TRY(zinf_optim_update(&h, &htile, ZINF_SIMD_SCALAR));
    float *hp = malloc(n * 4), *hm = malloc(n * 4), *hv = malloc(n * 4);
    from_device(S, hp, dp, n * 4), from_device(S, hm, dm, n * 4), from_device(S, hv, dv, n * 4);
    bool same = memcmp(hp, p, n * 4) == 0 && (kind == ZINF_OPTIM_ADAGRAD || memcmp(hm, m, n * 4) == 0) &&
                (kind == ZINF_OPTIM_LION || memcmp(hv, v, n * 4) == 0);
    if (out_dt) {
        from_device(S, hout, dout, n * 2);
        same = same && memcmp((char *)hout + off * 2, (char *)want_out + off * 2, (n - off) * 2) == 0;
    }
    CHECK(same, "device optimizer %d (grads %s, copy %s%s) differs from cpu_adam", kind, zinf_dtype_name(grad_dt),
          zinf_dtype_name(out_dt), off ? ", unaligned" : "");
    optim_inputs_free(&in);
    zinf_device_free(dev, dout);
    free(hp), free(hm), free(hv), free(hout), free(want_out);
}

// zinf_device_optim_rows against cpu_adam's update of the whole tile: the rows asked
// for (one twice, one past the tile, one negative: skipped) get the whole update's new
// weights, bit for bit; every other element of out keeps its poison, and the states are
// what they were. row_len 24 (CUDA: eight elements a thread) and 13 (one at a time).
static void test_optim_rows(zinf_optimizer kind, zinf_dtype grad_dt, zinf_dtype out_dt, int row_len) {
    const int R = 9, rows[] = {4, 0, 7, 4, 9, -1, 8};
    const int count = (int)LEN(rows);
    size_t n = (size_t)R * row_len;
    optim_inputs in = optim_inputs_make(grad_dt, n);
    float *p = in.p, *m = in.m, *v = in.v, *dp = in.dp, *dm = in.dm, *dv = in.dv;
    void *dout = test_dev_poisoned(dev, S, n * 2);
    int32_t *drows = to_device(dev, S, rows, sizeof rows);
    unsigned char *want = malloc(n * 2), *got = malloc(n * 2);
    float *hp = malloc(n * 4), *hm = malloc(n * 4), *hv = malloc(n * 4);
    memset(want, 0xff, n * 2);
    zinf_optim_hparams h = optim_hparams(kind);
    zinf_optim_tile dtile = {.param = dp,
                             .exp_avg = dm,
                             .exp_avg_sq = dv,
                             .grad = in.dg,
                             .grad_dtype = grad_dt,
                             .out = dout,
                             .out_dtype = out_dt,
                             .n = n};
    TRY(zinf_device_optim_rows(S, &h, &dtile, drows, count, row_len));
    from_device(S, got, dout, n * 2);
    from_device(S, hp, dp, n * 4), from_device(S, hm, dm, n * 4), from_device(S, hv, dv, n * 4);
    bool kept = memcmp(hp, p, n * 4) == 0 && memcmp(hm, m, n * 4) == 0 && memcmp(hv, v, n * 4) == 0;
    // The whole tile's update on the host, its copy of the rows asked for kept.
    unsigned char *all = malloc(n * 2);
    zinf_optim_tile htile = dtile;
    htile.param = p, htile.exp_avg = m, htile.exp_avg_sq = v, htile.grad = in.gp, htile.out = all;
    TRY(zinf_optim_update(&h, &htile, ZINF_SIMD_SCALAR));
    for (int k = 0; k < count; k++)
        if (rows[k] >= 0 && rows[k] < R)
            memcpy(want + (size_t)rows[k] * row_len * 2, all + (size_t)rows[k] * row_len * 2, (size_t)row_len * 2);
    CHECK(memcmp(got, want, n * 2) == 0, "optim_rows %d (grads %s, copy %s, rows of %d) differs from cpu_adam's rows",
          kind, zinf_dtype_name(grad_dt), zinf_dtype_name(out_dt), row_len);
    CHECK(kept, "optim_rows %d wrote the states", kind);
    // Rows NULL: rows 0 to count - 1.
    TRY(zinf_memset_async(S, dout, 0xff, n * 2));
    TRY(zinf_device_optim_rows(S, &h, &dtile, NULL, 2, row_len));
    from_device(S, got, dout, n * 2);
    memset(want, 0xff, n * 2);
    memcpy(want, all, (size_t)2 * row_len * 2);
    CHECK(memcmp(got, want, n * 2) == 0, "optim_rows %d without rows differs from cpu_adam's first two rows", kind);
    zinf_optim_tile f32 = dtile;
    f32.out = NULL, f32.out_dtype = ZINF_DTYPE_NONE;
    CHECK(zinf_device_optim_rows(S, &h, &f32, drows, count, row_len) == ZINF_ERR_INVAL,
          "optim_rows without out accepted");
    CHECK_CONTAINS(zinf_last_error(), "optim_rows");
    CHECK(zinf_device_optim_rows(S, &h, &dtile, drows, count, 0) == ZINF_ERR_INVAL,
          "optim_rows with row_len 0 accepted");
    CHECK(zinf_device_optim_rows(S, &h, &dtile, drows, -1, row_len) == ZINF_ERR_INVAL,
          "optim_rows with count -1 accepted");
    CHECK_CONTAINS(zinf_last_error(), "count must not be negative");
    // The device updates in place: states given apart (from_*) are refused by both ops.
    zinf_optim_tile apart = dtile;
    apart.from_param = dp, apart.from_exp_avg = dm, apart.from_exp_avg_sq = dv;
    CHECK(zinf_device_optim(S, &h, &apart) == ZINF_ERR_UNSUPPORTED, "device optimizer with from_param accepted");
    CHECK(zinf_device_optim_rows(S, &h, &apart, drows, count, row_len) == ZINF_ERR_UNSUPPORTED,
          "optim_rows with from_param accepted");
    CHECK_CONTAINS(zinf_last_error(), "from_param");
    optim_inputs_free(&in);
    zinf_device_free(dev, dout), zinf_device_free(dev, drows);
    free(want), free(got), free(all), free(hp), free(hm), free(hv);
}

// dev and S anew: a CUDA device remembers cuBLASLt's answer for each product, so the
// round in which cuBLASLt has no algorithm, and the ops after it, each need their own.
static void fresh_device(void) {
    zinf_stream_destroy(S);
    zinf_device_destroy(dev);
    // zinf's own attention kernels; cuDNN's are checked apart (test_cudnn_attention).
    zinf_device_params params = {.backend = test_backend(), .attention = ZINF_ATTENTION_ZINF};
    TRY(zinf_device_create(&dev, &params));
    TRY(zinf_stream_create(dev, &S));
}

int main(void) {
    fresh_device();
    printf("backend %s: %s\n", zinf_backend_name(zinf_device_get_caps(dev)->backend), zinf_device_get_caps(dev)->name);
    const zinf_dtype dts[] = {ZINF_DTYPE_F32, ZINF_DTYPE_BF16, ZINF_DTYPE_F16};
    for (int i = 0; i < 3; i++) {
        zinf_dtype dt = dts[i];
        // Under the CUDA emulation the products run a second time with cuBLASLt offering
        // no algorithm, so that the backend's own fallback kernel is checked too.
        for (int plain = 0; plain <= (getenv("ZINF_TEST_CUDA_EMU") != NULL); plain++) {
            if (plain) setenv("CUDA_EMU_LT_NO_ALGO", "1", 1);
            if (plain) fresh_device();
            test_gemm_alignment(dt);
            for (int t = 0; t < 4; t++)
                test_gemm(dt, t & 1, t & 2, false, 0, 1, false);
            test_gemm(dt, false, false, true, 0, 1, false);
            test_gemm(dt, false, true, true, 0.5f, 1, false);
            test_gemm(dt, true, false, false, 1, 3, false);
            test_gemm(dt, false, true, true, 0, 1, true);
            test_gemm(dt, true, false, false, 0, 1, true);
            for (int n = 29; n <= 32; n += 3) {
                test_gemm_gelu(dt, true, n);
                test_gemm_gelu(dt, false, n);
            }
            unsetenv("CUDA_EMU_LT_NO_ALGO");
            if (plain) fresh_device();
        }
        // Rows of 33, 45 and 75 values go one value at a time on CUDA, rows of 64 and 136 in
        // 16-byte chunks (the column sums: 136 over three blocks of columns in 16 bits);
        // 2391 rows are ten chunks of rows, past the eight threads that add a column's. The
        // weight gradients added to, and written (a backward's first write, over poison).
        for (size_t k = 0; k < 3; k++) {
            const int rows = (int[]){9, 700, 2391}[k];
            test_bias_grad(dt, rows, rows < 100 ? 75 : 136, k == 1);
            test_layernorm(dt, rows, rows < 100 ? 33 : 64, k != 1);
            test_rmsnorm(dt, rows, rows < 100 ? 45 : 64, k == 1);
        }
        // A row of Llama-3.2-1B's width: the CUDA backward's one pass in 16 bits (two warps
        // a row at four chunks a lane, rows that end a block part way, more blocks than the
        // eight threads that add a column's partials), the column sums in fp32; and one
        // chunk a lane wider, the column sums in every type.
        test_rmsnorm(dt, 600, 2048, true);
        test_rmsnorm(dt, 9, 2056, false);
        // GPT-2's widths: the CUDA layernorm backward's one pass with two warps a row (768
        // in 16 bits) and four (1280 in 16 bits, 768 in fp32); 1280 in fp32, the column sums.
        test_layernorm(dt, 600, 768, true);
        test_layernorm(dt, 300, 1280, false);
        test_elementwise(dt);
        test_swiglu(dt, 37);
        test_swiglu(dt, 64);
        test_swiglu(dt, 1288); // past a chunk a lane on CUDA
        for (size_t k = 0; k < 3; k++)
            test_sumsq(dt, (size_t[]){5, 100003, (size_t)3 << 20 | 7}[k]);
        test_sumsq_order(dt);
        test_sumsq_many(dt);
        test_rope(dt, 10);
        test_rope(dt, 32);
        attention_cases(dt);
        test_cross_entropy(dt, false, 53, 53);
        test_cross_entropy(dt, true, 53, 53);
        test_cross_entropy(dt, false, 53, 64);
        test_cross_entropy(dt, true, 53, 64);
        // Rows past one 16-byte chunk for each of the CUDA kernel's 256 threads: a thread's
        // running maximum grows over its chunks.
        test_cross_entropy(dt, false, 9001, 9008);
        // Past the chunks a CUDA thread loads at once (4 x 256 of 16 bytes), in place.
        test_cross_entropy(dt, true, 40001, 40008);
        test_embedding(dt, true);
        test_embedding(dt, false);
        test_embedding_parts(dt, true);
        test_embedding_parts(dt, false);
        test_cross_entropy_blocks(dt);
        for (int j = 0; j < 3; j++)
            test_cast(dt, dts[j]);
        test_accumulate(dt);
    }
    test_bad_args();
    test_cudnn_attention();
    for (int k = ZINF_OPTIM_ADAM; k <= ZINF_OPTIM_LION; k++) {
        for (int off = 0; off < 2; off++) {
            test_optim(k, ZINF_DTYPE_F32, ZINF_DTYPE_NONE, off);
            test_optim(k, ZINF_DTYPE_BF16, ZINF_DTYPE_BF16, off);
            test_optim(k, ZINF_DTYPE_F16, ZINF_DTYPE_F16, off);
        }
        test_optim_rows(k, ZINF_DTYPE_BF16, ZINF_DTYPE_BF16, 24);
        test_optim_rows(k, ZINF_DTYPE_F32, ZINF_DTYPE_F16, 13);
    }
    zinf_device_mem mem;
    zinf_device_get_mem(dev, &mem);
    CHECK(mem.in_use == 0 && mem.allocations == 0, "%lld buffers (%llu bytes) leaked", (long long)mem.allocations,
          (unsigned long long)mem.in_use);
    zinf_stream_destroy(S);
    zinf_device_destroy(dev);
    return check_exit("test_gpu_ops");
}
