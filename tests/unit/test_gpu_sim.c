// The simulated device (ZINF_BACKEND_SIM) against its data sheets and by hand: the
// presets' peaks and the overrides that replace them; each op's modeled time, worked
// out here from its FLOPs or bytes and the rates (gemm compute- and memory-bound, bf16
// with aligned and unaligned sides and fp32; layernorm and add at their kernels'
// fractions of HBM peak, scale at the generic one; attention over every pair, its time
// the same with a window, grouped heads or another dtype, and with a head small enough
// that the scores' bytes outweigh the products, forward and backward), read back
// through timed events to the nanosecond, with stream_sync returning no earlier than the
// modeled end in wall time; copies at the PCIe rate from pinned (allocated or
// registered) and pageable host memory, D2H writing nothing, H2H really copying, D2D and
// memset at the memory rate; engines shared between streams (two gemms queue, gemms and
// copies overlap, a collective holds only the links, an event wait orders them) and the
// busy seconds they report; memory that is address space only (72 GiB on a smaller
// machine, RSS flat, a host touch faults), refused past the capacity with a message
// naming the sim device; a memory_limit past the modeled memory refused; the device's
// rates as its parameters give them; the host backend's busy seconds are zeros and the
// sim's entry points refuse it.
// Each timed run starts behind a gate (a host function the test opens once everything is
// submitted; a second stream waits on an event recorded behind it), so no stream waits
// on the submitting thread or on its own thread's wake-up, and the modeled times are
// exact whatever the scheduler does. Only the wall-time bounds depend on it.
// timeout: 10 san=10 cuda-emu=10 san-cuda-emu=10
#include <math.h>
#include <semaphore.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "gpu_test.h"

#define MiB (1ull << 20)
#define GiB (1ull << 30)

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

// Modeled times agree to the nanosecond rounding of each task, and a little more.
static bool same_time(double got, double want) { return fabs(got - want) <= 1e-6 * want + 2e-6; }

static zinf_device *sim_device(zinf_sim_params sp, int64_t limit) {
    zinf_device *d;
    zinf_device_params p = {.backend = ZINF_BACKEND_SIM, .memory_limit = limit, .sim = sp};
    if (zinf_device_create(&d, &p) != ZINF_OK) {
        fprintf(stderr, "cannot create the sim device: %s\n", zinf_last_error());
        exit(1);
    }
    return d;
}

// The rates the device models (the same as its parameters give).
static zinf_sim_rates rates_of(zinf_sim_params sp) {
    zinf_sim_rates r;
    zinf_sim_rates_of(&sp, &r);
    return r;
}

// A gate: a host function that holds its stream until the test opens it.
static sem_t gate;
static void gate_fn(void *arg) {
    (void)arg;
    while (sem_wait(&gate) != 0) {
    }
}

static double elapsed(zinf_event *a, zinf_event *b) {
    double s = -1;
    TRY(zinf_event_elapsed(a, b, &s));
    return s;
}

static zinf_event *timed_event(zinf_device *d) {
    zinf_event *e;
    TRY(zinf_event_create_timed(d, &e));
    return e;
}

static void check_busy(zinf_device *d, const zinf_device_busy *before, double compute, double h2d, double d2h,
                       double link, const char *what) {
    zinf_device_busy b;
    zinf_device_get_busy(d, &b);
    double dc = b.compute_s - before->compute_s, dh = b.h2d_s - before->h2d_s, dd = b.d2h_s - before->d2h_s,
           dl = b.link_s - before->link_s;
    CHECK(same_time(dc, compute) && same_time(dh, h2d) && same_time(dd, d2h) && same_time(dl, link),
          "%s: busy compute %.9f h2d %.9f d2h %.9f link %.9f s, expected %.9f %.9f %.9f %.9f", what, dc, dh, dd, dl,
          compute, h2d, d2h, link);
}

// ---- 1. presets and overrides ----

static void test_presets(void) {
    static const struct {
        zinf_sim_gpu g;
        const char *key, *name;
        double tflops16, tflops32, hbm_gbps, pcie_gbps;
        uint64_t mib;
    } sheets[] = {
        {ZINF_SIM_H100, "h100", "H100 SXM5 80GB", 989.4, 66.9, 3350, 64, 81559},
        {ZINF_SIM_H200, "h200", "H200 SXM 141GB", 989.4, 66.9, 4800, 64, 143771},
        {ZINF_SIM_A100, "a100", "A100 SXM4 80GB", 312, 19.5, 2039, 32, 81920},
        {ZINF_SIM_RTX4090, "rtx4090", "GeForce RTX 4090", 165.2, 82.6, 1008, 32, 24564},
    };
    for (size_t i = 0; i < sizeof sheets / sizeof *sheets; i++) {
        zinf_sim_rates r = rates_of((zinf_sim_params){.gpu = sheets[i].g});
        CHECK(strcmp(zinf_sim_gpu_name(sheets[i].g), sheets[i].key) == 0, "gpu %d is named %s", (int)sheets[i].g,
              zinf_sim_gpu_name(sheets[i].g));
        CHECK(strcmp(r.name, sheets[i].name) == 0, "%s is named \"%s\"", sheets[i].key, r.name);
        CHECK(fabs(r.flops16 - sheets[i].tflops16 * 1e12) <= 1e3 && fabs(r.flops32 - sheets[i].tflops32 * 1e12) <= 1e3,
              "%s: %g / %g FLOP/s", sheets[i].key, r.flops16, r.flops32);
        CHECK(r.hbm == sheets[i].hbm_gbps * 1e9 && r.pcie == sheets[i].pcie_gbps * 1e9, "%s: hbm %g, pcie %g B/s",
              sheets[i].key, r.hbm, r.pcie);
        CHECK(r.memory == sheets[i].mib * MiB, "%s: %llu bytes", sheets[i].key, (unsigned long long)r.memory);
        // Fractions of peak and the fixed costs are the model's choice; they must be sane.
        double effs[] = {r.matmul_eff, r.matmul32_eff,    r.unaligned_eff,
                         r.hbm_eff,    r.pcie_pinned_eff, r.pcie_pageable_eff};
        for (size_t j = 0; j < sizeof effs / sizeof *effs; j++)
            CHECK(effs[j] > 0 && effs[j] <= 1, "%s: efficiency %zu is %g", sheets[i].key, j, effs[j]);
        CHECK(r.unaligned_eff < r.matmul_eff, "%s: products with unaligned sides are not slower", sheets[i].key);
        CHECK(r.pcie_pageable_eff < r.pcie_pinned_eff, "%s: pageable copies are not slower than pinned", sheets[i].key);
        CHECK(r.matmul_fixed_s >= 0 && r.matmul_fixed_s < 1e-4, "%s: a product's fixed cost is %g s", sheets[i].key,
              r.matmul_fixed_s);
        CHECK(r.launch_s > 0 && r.launch_s < 1e-4, "%s: launch %g s", sheets[i].key, r.launch_s);
    }
    CHECK(strcmp(zinf_sim_gpu_name((zinf_sim_gpu)99), "unknown") == 0, "gpu 99 is named %s",
          zinf_sim_gpu_name((zinf_sim_gpu)99));

    // Every override replaces its peak; fp32 scales with the 16-bit one.
    zinf_sim_rates r = rates_of((zinf_sim_params){
        .gpu = ZINF_SIM_A100, .tflops = 2, .hbm_gbps = 100, .pcie_gbps = 3, .memory = (int64_t)(5 * GiB)});
    CHECK(r.flops16 == 2e12 && fabs(r.flops32 - 2e12 * 19.5 / 312) <= 1, "overridden: %g / %g FLOP/s", r.flops16,
          r.flops32);
    CHECK(r.hbm == 100e9 && r.pcie == 3e9 && r.memory == 5 * GiB, "overridden: hbm %g, pcie %g, %llu bytes", r.hbm,
          r.pcie, (unsigned long long)r.memory);
    CHECK(strcmp(r.name, "A100 SXM4 80GB (custom rates)") == 0, "overridden A100 is named \"%s\"", r.name);
    // One override is enough to mark the rates custom; the rest stay the preset's.
    r = rates_of((zinf_sim_params){.gpu = ZINF_SIM_H200, .pcie_gbps = 32});
    CHECK(strcmp(r.name, "H200 SXM 141GB (custom rates)") == 0 && r.pcie == 32e9 && r.hbm == 4800e9 &&
              fabs(r.flops16 - 989.4e12) <= 1e3 && r.memory == 143771 * MiB,
          "H200 with pcie 32: \"%s\", pcie %g, hbm %g", r.name, r.pcie, r.hbm);
}

// ---- 2, 3. op times ----

// C (m x n) = A (m x k) B (k x n), packed rows.
static zinf_gemm_args gemm_of(zinf_dtype dt, int m, int n, int k, void *a, void *b, void *c) {
    return (zinf_gemm_args){
        .dt = dt, .m = m, .n = n, .k = k, .a = a, .lda = k, .b = b, .ldb = n, .c = c, .ldc = n, .alpha = 1};
}

// The tflops = 1, 100 GB/s device the op timings run on.
static const zinf_sim_params slow = {.gpu = ZINF_SIM_H100, .tflops = 1, .hbm_gbps = 100, .pcie_gbps = 1};
static const double F16 = 1e12, F32 = 1e12 * 66.9 / 989.4, HBM = 100e9, PCIE = 1e9;
// The fractions of HBM peak that model.c's table gives the memory-bound kernels timed
// here (zinf's own, measured on an H100 and an H200), stated so that a change to them is seen; ops
// outside the table, such as scale, stream at the generic hbm_eff.
static const double LN_FWD_FRAC = 0.58, LN_BWD_FRAC = 0.28, ADD_FRAC = 0.63;

// Ops on one stream behind a gate, a timed event between each two; each bracketed time
// must be the expected one, and the stream's sync must come no earlier than their sum.
typedef struct timeline {
    zinf_device *d;
    zinf_stream *s;
    zinf_event *ev[24];
    double want[24];
    char what[24][64];
    int n; // ops submitted
} timeline;

static void tl_begin(timeline *t, zinf_device *d) {
    memset(t, 0, sizeof *t);
    t->d = d;
    TRY(zinf_stream_create(d, &t->s));
    TRY(zinf_stream_host_fn(t->s, gate_fn, NULL));
    t->ev[0] = timed_event(d);
    TRY(zinf_event_record(t->ev[0], t->s));
}

// After submitting one op: its expected time.
static void tl_op(timeline *t, const char *what, double want) {
    t->n++;
    t->want[t->n] = want;
    snprintf(t->what[t->n], sizeof t->what[t->n], "%s", what);
    t->ev[t->n] = timed_event(t->d);
    TRY(zinf_event_record(t->ev[t->n], t->s));
}

static void tl_end(timeline *t) {
    double total = 0;
    for (int i = 1; i <= t->n; i++)
        total += t->want[i];
    double t0 = now_s();
    sem_post(&gate);
    TRY(zinf_stream_sync(t->s));
    double wall = now_s() - t0;
    for (int i = 1; i <= t->n; i++) {
        double got = elapsed(t->ev[i - 1], t->ev[i]);
        CHECK(same_time(got, t->want[i]), "%s took %.9f s modeled, expected %.9f", t->what[i], got, t->want[i]);
    }
    CHECK(wall >= total - 1e-6 && wall <= total + 0.03, "the stream synced after %.4f s; its work models %.4f s", wall,
          total);
    for (int i = 0; i <= t->n; i++)
        zinf_event_destroy(t->ev[i]);
    zinf_stream_destroy(t->s);
}

static void test_gemm(void) {
    zinf_device *d = sim_device(slow, 0);
    zinf_sim_rates r = rates_of(slow);
    void *a, *b, *c;
    TRY(zinf_device_alloc(d, 64 * MiB, "A", &a));
    TRY(zinf_device_alloc(d, 64 * MiB, "B", &b));
    TRY(zinf_device_alloc(d, 512 * MiB, "C", &c));
    zinf_device_busy before;
    zinf_device_get_busy(d, &before);
    timeline t;
    tl_begin(&t, d);
    double busy = 0;

    // bf16, compute-bound: 2 m n k FLOPs at matmul_eff of 1 TFLOP/s and the fixed cost,
    // about 20 ms.
    double aligned; // the time of this product, for the unaligned one below
    {
        double m = 2048, n = 2048, k = 2048;
        double want = 2 * m * n * k / (F16 * r.matmul_eff) + r.matmul_fixed_s + r.launch_s;
        double bytes_s = (m * k + k * n + m * n) * 2 / (HBM * r.hbm_eff);
        CHECK(bytes_s < 0.1 * want, "the bf16 gemm is not compute-bound (%g vs %g s)", bytes_s, want);
        CHECK(want > 0.015 && want < 0.025, "the bf16 gemm models %g s", want);
        double api = zinf_sim_matmul_s(&r, ZINF_DTYPE_BF16, m, n, k, 1);
        CHECK(fabs(api - want) <= 1e-12 * want, "zinf_sim_matmul_s says %.12f, by hand %.12f", api, want);
        zinf_gemm_args g = gemm_of(ZINF_DTYPE_BF16, 2048, 2048, 2048, a, b, c);
        TRY(zinf_gemm(t.s, &g));
        tl_op(&t, "bf16 gemm 2048^3", want);
        busy += want;
        aligned = want;
    }
    // bf16 with a side that is not a multiple of 8, whichever of the three: the FLOPs at
    // the far lower unaligned_eff, so a product of a fifth of the FLOPs above takes longer.
    {
        static const double shapes[][3] = {{1026, 1024, 1664}, {1024, 1026, 1664}, {1024, 1024, 1666}};
        double want[3];
        for (int i = 0; i < 3; i++) {
            double m = shapes[i][0], n = shapes[i][1], k = shapes[i][2];
            want[i] = 2 * m * n * k / (F16 * r.unaligned_eff) + r.matmul_fixed_s + r.launch_s;
            double api = zinf_sim_matmul_s(&r, ZINF_DTYPE_BF16, m, n, k, 1);
            CHECK(fabs(api - want[i]) <= 1e-12 * want[i], "zinf_sim_matmul_s %gx%gx%g says %.12f, by hand %.12f", m, n,
                  k, api, want[i]);
        }
        CHECK(want[2] > aligned, "the unaligned gemm models %g s, no slower than the aligned one's %g s", want[2],
              aligned);
        zinf_gemm_args g = gemm_of(ZINF_DTYPE_BF16, 1024, 1024, 1666, a, b, c);
        TRY(zinf_gemm(t.s, &g));
        tl_op(&t, "bf16 gemm 1024x1024x1666", want[2]);
        busy += want[2];
    }
    // bf16, memory-bound: k = 8 (the thinnest aligned side; 4 would take the unaligned
    // rate and be compute-bound), so the operands' bytes at hbm_eff of 100 GB/s win.
    {
        double m = 16384, n = 16384, k = 8;
        double want = (m * k + k * n + m * n) * 2 / (HBM * r.hbm_eff) + r.launch_s;
        double flops_s = 2 * m * n * k / (F16 * r.matmul_eff) + r.matmul_fixed_s;
        CHECK(flops_s < want - r.launch_s, "the thin gemm is not memory-bound (%g vs %g s)", flops_s, want);
        double api = zinf_sim_matmul_s(&r, ZINF_DTYPE_BF16, m, n, k, 1);
        CHECK(fabs(api - want) <= 1e-12 * want, "zinf_sim_matmul_s says %.12f, by hand %.12f", api, want);
        zinf_gemm_args g = gemm_of(ZINF_DTYPE_BF16, 16384, 16384, 8, a, b, c);
        TRY(zinf_gemm(t.s, &g));
        tl_op(&t, "bf16 gemm 16384x16384x8", want);
        busy += want;
    }
    // fp32, batched twice, transposed operands: the fp32 peak (which scales with the
    // 16-bit override) at matmul32_eff, the batch counted, no fixed cost.
    {
        double m = 512, n = 512, k = 512, batch = 2;
        double want = 2 * m * n * k * batch / (F32 * r.matmul32_eff) + r.launch_s;
        double bytes_s = (m * k + k * n + m * n) * 4 * batch / (HBM * r.hbm_eff);
        CHECK(bytes_s < 0.1 * want, "the fp32 gemm is not compute-bound (%g vs %g s)", bytes_s, want);
        double api = zinf_sim_matmul_s(&r, ZINF_DTYPE_F32, m, n, k, batch);
        CHECK(fabs(api - want) <= 1e-12 * want, "zinf_sim_matmul_s fp32 says %.12f, by hand %.12f", api, want);
        zinf_gemm_args g = gemm_of(ZINF_DTYPE_F32, 512, 512, 512, a, b, c);
        g.trans_a = g.trans_b = true;
        g.batch = 2;
        g.stride_a = g.stride_b = g.stride_c = 512 * 512;
        TRY(zinf_gemm(t.s, &g));
        tl_op(&t, "fp32 gemm 512^3 batch 2", want);
        busy += want;
    }
    tl_end(&t);
    check_busy(d, &before, busy, 0, 0, 0, "gemms");
    zinf_device_free(d, a);
    zinf_device_free(d, b);
    zinf_device_free(d, c);
    zinf_device_destroy(d);
}

// The workspace the device asks for (CUDA's, which the sim keeps the same), a device
// allocation like the operands; NULL when none is asked for.
static void *attention_ws(zinf_device *d, zinf_attention_args *a) {
    size_t n = zinf_attention_workspace(d, a);
    CHECK(n == zinf_backend_attention_workspace(ZINF_BACKEND_CUDA, a), "the sim asks %zu workspace bytes, CUDA %zu", n,
          zinf_backend_attention_workspace(ZINF_BACKEND_CUDA, a));
    a->ws = NULL;
    if (n) TRY(zinf_device_alloc(d, n, "attention workspace", &a->ws));
    return a->ws;
}

// Forward and backward of attention a (its dtype and sizes; on untouched device buffers
// x and f, its workspace into *ws), each held to its modeled time by hand.
static void attention_pair(timeline *t, zinf_device *d, zinf_attention_args a, void *x, float *f, void **ws,
                           const char *what, double fwd, double bwd) {
    a.qkv = x, a.out = x, a.lse = f, a.dqkv = x, a.dout = x;
    *ws = attention_ws(d, &a);
    char name[64];
    TRY(zinf_attention_fwd(t->s, &a));
    snprintf(name, sizeof name, "%s attention", what);
    tl_op(t, name, fwd);
    TRY(zinf_attention_bwd(t->s, &a));
    snprintf(name, sizeof name, "%s attention backward", what);
    tl_op(t, name, bwd);
}

static void test_norm_attention(void) {
    zinf_device *d = sim_device(slow, 0);
    zinf_sim_rates r = rates_of(slow);
    char *x;
    TRY(zinf_device_alloc(d, GiB, "scratch", (void **)&x)); // every operand lies in it, never touched
    float *f = (float *)x;
    zinf_device_busy before;
    zinf_device_get_busy(d, &before);
    timeline t;
    tl_begin(&t, d);
    double busy = 0;
    void *ws[3];

    // Layernorm reads x and writes out: 2 rows C elements, at its kernel's fraction of
    // HBM peak in either dtype; the backward 3, at its own.
    {
        double want = 2.0 * 4096 * 4096 * 2 / (HBM * LN_FWD_FRAC) + r.launch_s;
        TRY(zinf_layernorm_fwd(t.s, ZINF_DTYPE_BF16, x, f, f, x, x, x, 4096, 4096, 1e-5f));
        tl_op(&t, "bf16 layernorm 4096x4096", want);
        busy += want;
        want = 2.0 * 2048 * 4096 * 4 / (HBM * LN_FWD_FRAC) + r.launch_s;
        TRY(zinf_layernorm_fwd(t.s, ZINF_DTYPE_F32, x, f, f, x, x, x, 2048, 4096, 1e-5f));
        tl_op(&t, "fp32 layernorm 2048x4096", want);
        busy += want;
        want = 3.0 * 4096 * 4096 * 2 / (HBM * LN_BWD_FRAC) + r.launch_s;
        TRY(zinf_layernorm_bwd(t.s, ZINF_DTYPE_BF16, x, x, x, x, x, x, f, f, 4096, 4096, false));
        tl_op(&t, "bf16 layernorm backward 4096x4096", want);
        busy += want;
    }
    // Add reads two operands and writes one at its own fraction; scale, not in the
    // table, reads and writes one at the generic hbm_eff.
    {
        size_t n = 16 * MiB;
        double want = 3.0 * (double)n * 2 / (HBM * ADD_FRAC) + r.launch_s;
        TRY(zinf_add(t.s, ZINF_DTYPE_BF16, x, x, x, n));
        tl_op(&t, "bf16 add of 16 Mi", want);
        busy += want;
        want = 2.0 * (double)n * 2 / (HBM * r.hbm_eff) + r.launch_s;
        TRY(zinf_scale(t.s, ZINF_DTYPE_BF16, x, 0.5f, n));
        tl_op(&t, "bf16 scale of 16 Mi", want);
        busy += want;
    }
    // Attention counts 2 products of 2 hd FLOPs forward and 7 backward per (query, key)
    // pair a query sees. Under device.attention "auto" (this device's) a bf16 head of 64
    // runs as cuDNN's at the fractions of the 16-bit peak gpu/sim/model.c took from an
    // H200 (0.270 forward, 0.266 backward); zinf's kernels (test_attention_models) at those
    // from an H200 (0.107, 0.145); fp32 and heads cuDNN cannot take, zinf's, on CUDA cores
    // at matmul32_eff of the fp32 peak.
    {
        // Causal, B = 1, T = 512, NH = 16, hd 64 (NKV and hd left 0: NH and C / NH).
        double pairs = 512.0 * 513 / 2, heads = 16;
        double fwd = 2 * 2 * 64 * pairs * heads / (F16 * 0.270) + r.launch_s;
        double bwd = 7 * 2 * 64 * pairs * heads / (F16 * 0.266) + r.launch_s;
        double api = zinf_sim_attention_s(&r, ZINF_DTYPE_BF16, 1, 512, 16, 64, 0, false);
        CHECK(fabs(api - fwd) <= 1e-12 * fwd, "zinf_sim_attention_s says %.12f, by hand %.12f", api, fwd);
        api = zinf_sim_attention_s(&r, ZINF_DTYPE_BF16, 1, 512, 16, 64, 0, true);
        CHECK(fabs(api - bwd) <= 1e-12 * bwd, "zinf_sim_attention_s backward says %.12f, by hand %.12f", api, bwd);
        attention_pair(&t, d, (zinf_attention_args){.dt = ZINF_DTYPE_BF16, .B = 1, .T = 512, .C = 1024, .NH = 16}, x, f,
                       &ws[0], "causal", fwd, bwd);
        busy += fwd + bwd;
    }
    // fp32, a window of 128 keys and grouped heads (NKV 4): the first 128 queries see t + 1
    // keys, the rest 128, every query head its own.
    {
        double pairs = 128.0 * 129 / 2 + (512.0 - 128) * 128, heads = 16;
        double fwd = 2 * 2 * 64 * pairs * heads / (F32 * r.matmul32_eff) + r.launch_s;
        double bwd = 7 * 2 * 64 * pairs * heads / (F32 * r.matmul32_eff) + r.launch_s;
        zinf_attention_args a = {
            .dt = ZINF_DTYPE_F32, .B = 1, .T = 512, .C = 1024, .NH = 16, .NKV = 4, .hd = 64, .window = 128};
        attention_pair(&t, d, a, x, f, &ws[1], "windowed", fwd, bwd);
        busy += fwd + bwd;
    }
    // bf16 with a head of one channel, B = 8, T = 512, NH = 4: not cuDNN's; padded to 32
    // channels, as zinf's kernels pad it, on CUDA cores.
    {
        double pairs = 512.0 * 513 / 2, heads = 8.0 * 4;
        double fwd = 2 * 2 * 32 * pairs * heads / (F32 * r.matmul32_eff) + r.launch_s;
        double bwd = 7 * 2 * 32 * pairs * heads / (F32 * r.matmul32_eff) + r.launch_s;
        double api = zinf_sim_attention_s(&r, ZINF_DTYPE_BF16, 8, 512, 4, 1, 0, true);
        CHECK(fabs(api - bwd) <= 1e-12 * bwd, "zinf_sim_attention_s hd 1 backward says %.12f, by hand %.12f", api, bwd);
        attention_pair(&t, d, (zinf_attention_args){.dt = ZINF_DTYPE_BF16, .B = 8, .T = 512, .C = 4, .NH = 4}, x, f,
                       &ws[2], "hd 1", fwd, bwd);
        busy += fwd + bwd;
    }
    tl_end(&t);
    check_busy(d, &before, busy, 0, 0, 0, "norms and attention");
    for (int i = 0; i < 3; i++)
        zinf_device_free(d, ws[i]);
    zinf_device_free(d, x);
    zinf_device_destroy(d);
}

// ---- 4. copies ----

// A sim device with device.attention "zinf" models zinf's kernels where "auto" and
// "cudnn" model cuDNN's; the host backend alone refuses "cudnn".
static void test_attention_models(void) {
    const double pairs = 512.0 * 513 / 2, heads = 16;
    zinf_attention_args a = {.dt = ZINF_DTYPE_BF16, .B = 1, .T = 512, .C = 1024, .NH = 16};
    for (int impl = ZINF_ATTENTION_AUTO; impl <= ZINF_ATTENTION_ZINF; impl++) {
        zinf_device *d;
        zinf_device_params p = {.backend = ZINF_BACKEND_SIM, .sim = slow, .attention = (zinf_attention_impl)impl};
        TRY(zinf_device_create(&d, &p));
        zinf_sim_rates r = rates_of(slow);
        r.attention = (zinf_attention_impl)impl;
        bool zinf = impl == ZINF_ATTENTION_ZINF;
        double fwd = 2 * 2 * 64 * pairs * heads / (F16 * (zinf ? 0.107 : 0.270)) + r.launch_s;
        double bwd = 7 * 2 * 64 * pairs * heads / (F16 * (zinf ? 0.145 : 0.266)) + r.launch_s;
        double api = zinf_sim_attention_s(&r, ZINF_DTYPE_BF16, 1, 512, 16, 64, 0, true);
        CHECK(fabs(api - bwd) <= 1e-12 * bwd, "attention %d: zinf_sim_attention_s backward says %.12f, by hand %.12f",
              impl, api, bwd);
        char *x;
        TRY(zinf_device_alloc(d, 64 * MiB, "scratch", (void **)&x));
        void *ws;
        timeline t;
        tl_begin(&t, d);
        attention_pair(&t, d, a, x, (float *)x, &ws, zinf ? "zinf's" : "cuDNN's", fwd, bwd);
        tl_end(&t);
        zinf_device_free(d, ws), zinf_device_free(d, x);
        zinf_device_destroy(d);
    }
    zinf_device *d = NULL;
    zinf_device_params p = {.backend = ZINF_BACKEND_HOST, .attention = ZINF_ATTENTION_CUDNN};
    CHECK(zinf_device_create(&d, &p) == ZINF_ERR_INVAL && strstr(zinf_last_error(), "device.attention"),
          "device.attention cudnn on the host backend: %s", zinf_last_error());
}

static void test_copies(void) {
    zinf_device *d = sim_device(slow, 0);
    zinf_sim_rates r = rates_of(slow);
    const size_t N = 8 * MiB;
    char *dev, *pinned, *pageable, *own;
    TRY(zinf_device_alloc(d, 64 * MiB, "copies", (void **)&dev));
    TRY(zinf_pinned_alloc(d, N, (void **)&pinned));
    pageable = malloc(2 * N);
    own = aligned_alloc(4096, 2 * N);
    TRY(zinf_pinned_register(d, own, N)); // only its first half
    memset(pinned, 0x11, N);
    memset(pageable, 0x22, 2 * N);
    memset(own, 0x33, 2 * N);

    double pin_s = N / (PCIE * r.pcie_pinned_eff), page_s = N / (PCIE * r.pcie_pageable_eff);
    CHECK(fabs(zinf_sim_copy_s(&r, (double)N, true) - pin_s) <= 1e-12 &&
              fabs(zinf_sim_copy_s(&r, (double)N, false) - page_s) <= 1e-12,
          "zinf_sim_copy_s says %.9f / %.9f, by hand %.9f / %.9f", zinf_sim_copy_s(&r, (double)N, true),
          zinf_sim_copy_s(&r, (double)N, false), pin_s, page_s);
    zinf_device_busy before;
    zinf_device_get_busy(d, &before);
    timeline t;
    tl_begin(&t, d);
    TRY(zinf_copy_async(t.s, dev, pinned, N, ZINF_COPY_H2D));
    tl_op(&t, "H2D from pinned memory", pin_s);
    TRY(zinf_copy_async(t.s, dev, pageable, N, ZINF_COPY_H2D));
    tl_op(&t, "H2D from malloc'd memory", page_s);
    TRY(zinf_copy_async(t.s, dev, own, N, ZINF_COPY_H2D));
    tl_op(&t, "H2D from registered memory", pin_s);
    TRY(zinf_copy_async(t.s, dev, own + N / 2, N, ZINF_COPY_H2D)); // half of it registered
    tl_op(&t, "H2D from partly registered memory", page_s);
    TRY(zinf_copy_async(t.s, pageable, dev, N, ZINF_COPY_D2H));
    tl_op(&t, "D2H to malloc'd memory", page_s);
    TRY(zinf_copy_async(t.s, pinned, dev, N / 2, ZINF_COPY_D2H));
    tl_op(&t, "D2H to pinned memory", pin_s / 2);
    // On the device: a copy reads and writes its bytes, a memset writes them.
    double d2d_s = 2.0 * 32 * MiB / (HBM * r.hbm_eff) + r.launch_s, set_s = 32.0 * MiB / (HBM * r.hbm_eff) + r.launch_s;
    TRY(zinf_copy_async(t.s, dev, dev + 32 * MiB, 32 * MiB, ZINF_COPY_D2D));
    tl_op(&t, "D2D", d2d_s);
    TRY(zinf_memset_async(t.s, dev, 0, 32 * MiB));
    tl_op(&t, "memset", set_s);
    tl_end(&t);
    check_busy(d, &before, d2d_s + set_s, 2 * pin_s + 2 * page_s, page_s + pin_s / 2, 0, "copies");

    // D2H moved no data: the host buffers keep their bytes.
    size_t changed = 0;
    for (size_t i = 0; i < 2 * N; i++)
        changed += pageable[i] != 0x22;
    for (size_t i = 0; i < N; i++)
        changed += pinned[i] != 0x11;
    CHECK(changed == 0, "D2H copies changed %zu host bytes", changed);

    // Unregistered, the memory copies at the pageable rate again.
    zinf_pinned_unregister(d, own);
    tl_begin(&t, d);
    TRY(zinf_copy_async(t.s, dev, own, N, ZINF_COPY_H2D));
    tl_op(&t, "H2D from unregistered memory", page_s);
    tl_end(&t);

    // H2H copies are real, in their place on the stream.
    zinf_stream *s;
    TRY(zinf_stream_create(d, &s));
    for (size_t i = 0; i < N; i++)
        pinned[i] = (char)(i * 7 + 3);
    TRY(zinf_copy_async(s, own, pinned, N, ZINF_COPY_H2H));
    TRY(zinf_copy_async(s, pageable + 1, own + 4096, N - 4096, ZINF_COPY_H2H));
    TRY(zinf_stream_sync(s));
    CHECK(memcmp(own, pinned, N) == 0, "H2H from pinned memory did not copy");
    CHECK(memcmp(pageable + 1, pinned + 4096, N - 4096) == 0 && pageable[0] == 0x22 && pageable[N - 4095] == 0x22,
          "H2H between malloc'd buffers did not copy exactly its bytes");
    zinf_stream_destroy(s);

    free(own);
    free(pageable);
    zinf_pinned_free(d, pinned);
    zinf_device_free(d, dev);
    zinf_device_destroy(d);
}

// ---- 5. engines shared between streams ----

static void test_engines(void) {
    zinf_device *d = sim_device(slow, 0);
    zinf_sim_rates r = rates_of(slow);
    void *a, *b, *c, *dev, *host;
    TRY(zinf_device_alloc(d, 16 * MiB, "A", &a));
    TRY(zinf_device_alloc(d, 16 * MiB, "B", &b));
    TRY(zinf_device_alloc(d, 16 * MiB, "C", &c));
    TRY(zinf_device_alloc(d, 16 * MiB, "copy", &dev));
    TRY(zinf_pinned_alloc(d, 16 * MiB, &host));
    zinf_gemm_args g = gemm_of(ZINF_DTYPE_BF16, 2048, 2048, 2048, a, b, c);
    double gemm_s = 2.0 * 2048 * 2048 * 2048 / (F16 * r.matmul_eff) + r.matmul_fixed_s + r.launch_s;
    size_t copy_n = 16 * MiB;
    double copy_s = copy_n / (PCIE * r.pcie_pinned_eff); // about 20 ms, as the gemm
    zinf_stream *sa, *sb;
    TRY(zinf_stream_create(d, &sa));
    TRY(zinf_stream_create(d, &sb));
    zinf_event *a0 = timed_event(d), *a1 = timed_event(d), *b0 = timed_event(d), *b1 = timed_event(d);

    // Both streams start from a0 in modeled time: A records it behind the gate, B waits
    // on it. (Two gates opened together would start them a thread wake-up apart.)
    // Two gemms then take the compute engine one after the other.
    zinf_device_busy before;
    zinf_device_get_busy(d, &before);
    TRY(zinf_stream_host_fn(sa, gate_fn, NULL));
    TRY(zinf_event_record(a0, sa));
    TRY(zinf_stream_wait_event(sb, a0));
    TRY(zinf_event_record(b0, sb));
    TRY(zinf_gemm(sb, &g));
    TRY(zinf_event_record(b1, sb));
    TRY(zinf_gemm(sa, &g));
    TRY(zinf_event_record(a1, sa));
    double t0 = now_s();
    sem_post(&gate);
    TRY(zinf_stream_sync(sa));
    TRY(zinf_stream_sync(sb));
    double wall = now_s() - t0;
    CHECK(wall >= 2 * gemm_s - 1e-6 && wall <= 2 * gemm_s + 0.03, "two %.4f s gemms on two streams took %.4f s", gemm_s,
          wall);
    double ea = elapsed(a0, a1), eb = elapsed(a0, b1);
    CHECK(elapsed(a0, b0) == 0, "B started %.9f s after A", elapsed(a0, b0));
    CHECK(same_time(fmin(ea, eb), gemm_s) && same_time(fmax(ea, eb), 2 * gemm_s),
          "two gemms from one start on two streams ended after %.9f and %.9f s modeled, expected %.9f and %.9f", ea, eb,
          gemm_s, 2 * gemm_s);
    check_busy(d, &before, 2 * gemm_s, 0, 0, 0, "two streams' gemms");

    // Gemms and copies use different engines: two of each on two streams overlap (two,
    // so that the wall time tells max from sum by some 40 ms).
    zinf_device_get_busy(d, &before);
    TRY(zinf_stream_host_fn(sa, gate_fn, NULL));
    TRY(zinf_event_record(a0, sa));
    TRY(zinf_stream_wait_event(sb, a0));
    TRY(zinf_copy_async(sb, dev, host, copy_n, ZINF_COPY_H2D));
    TRY(zinf_copy_async(sb, dev, host, copy_n, ZINF_COPY_H2D));
    TRY(zinf_event_record(b1, sb));
    TRY(zinf_gemm(sa, &g));
    TRY(zinf_gemm(sa, &g));
    TRY(zinf_event_record(a1, sa));
    t0 = now_s();
    sem_post(&gate);
    TRY(zinf_stream_sync(sa));
    TRY(zinf_stream_sync(sb));
    wall = now_s() - t0;
    double longer = 2 * fmax(gemm_s, copy_s), sum = 2 * (gemm_s + copy_s);
    CHECK(wall >= longer - 1e-6 && wall < sum - 0.01,
          "two %.4f s gemms and two %.4f s copies on two streams took %.4f s: not overlapped", gemm_s, copy_s, wall);
    CHECK(same_time(elapsed(a0, a1), 2 * gemm_s) && same_time(elapsed(a0, b1), 2 * copy_s),
          "side by side from one start, the gemms ended after %.9f s and the copies after %.9f s modeled; alone %.9f "
          "and %.9f",
          elapsed(a0, a1), elapsed(a0, b1), 2 * gemm_s, 2 * copy_s);
    check_busy(d, &before, 2 * gemm_s, 2 * copy_s, 0, 0, "gemms beside copies");

    // A collective holds the links to other GPUs for the seconds given, beside the gemm.
    zinf_device_get_busy(d, &before);
    TRY(zinf_stream_host_fn(sa, gate_fn, NULL));
    TRY(zinf_event_record(a0, sa));
    TRY(zinf_stream_wait_event(sb, a0));
    TRY(zinf_sim_collective(sb, 0.015));
    TRY(zinf_event_record(b1, sb));
    TRY(zinf_gemm(sa, &g));
    TRY(zinf_event_record(a1, sa));
    sem_post(&gate);
    TRY(zinf_stream_sync(sa));
    TRY(zinf_stream_sync(sb));
    CHECK(same_time(elapsed(a0, a1), gemm_s) && same_time(elapsed(a0, b1), 0.015),
          "beside a collective of 15 ms the gemm ended after %.9f s, the collective after %.9f", elapsed(a0, a1),
          elapsed(a0, b1));
    check_busy(d, &before, gemm_s, 0, 0, 0.015, "a gemm beside a collective");

    // B waits on the end of A's gemm: its copy starts when the gemm ends.
    TRY(zinf_stream_host_fn(sa, gate_fn, NULL));
    TRY(zinf_event_record(a0, sa));
    TRY(zinf_gemm(sa, &g));
    TRY(zinf_event_record(a1, sa));
    TRY(zinf_stream_wait_event(sb, a1));
    TRY(zinf_copy_async(sb, dev, host, copy_n, ZINF_COPY_H2D));
    TRY(zinf_event_record(b1, sb));
    t0 = now_s();
    sem_post(&gate);
    TRY(zinf_stream_sync(sb));
    wall = now_s() - t0;
    double chained = elapsed(a0, b1);
    CHECK(same_time(chained, gemm_s + copy_s), "gemm then waited copy: %.9f s modeled, expected the sum %.9f", chained,
          gemm_s + copy_s);
    CHECK(wall >= gemm_s + copy_s - 1e-6 && wall <= gemm_s + copy_s + 0.03,
          "gemm then waited copy synced after %.4f s, modeled %.4f", wall, gemm_s + copy_s);
    TRY(zinf_stream_sync(sa));

    zinf_event *evs[] = {a0, a1, b0, b1};
    for (int i = 0; i < 4; i++)
        zinf_event_destroy(evs[i]);
    zinf_stream_destroy(sa);
    zinf_stream_destroy(sb);
    zinf_pinned_free(d, host);
    void *bufs[] = {a, b, c, dev};
    for (int i = 0; i < 4; i++)
        zinf_device_free(d, bufs[i]);
    zinf_device_destroy(d);
}

// ---- 6. memory ----

static long rss_kib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld", &kib) == 1) break;
    if (f) fclose(f);
    return kib;
}

static void test_memory(void) {
    zinf_device *d = sim_device((zinf_sim_params){.gpu = ZINF_SIM_H100}, 0);
    const zinf_device_caps *caps = zinf_device_get_caps(d);
    CHECK(caps->backend == ZINF_BACKEND_SIM && caps->index == -1 && caps->async_copy, "caps: backend %s, index %d",
          zinf_backend_name(caps->backend), caps->index);
    CHECK(strncmp(caps->name, "simulated H100", 14) == 0, "the device is named \"%s\"", caps->name);
    CHECK(caps->capacity == 81559 * MiB && caps->total_memory == 81559 * MiB, "capacity %llu of %llu",
          (unsigned long long)caps->capacity, (unsigned long long)caps->total_memory);
    zinf_sim_rates r, want = rates_of((zinf_sim_params){.gpu = ZINF_SIM_H100});
    TRY(zinf_device_sim_rates(d, &r));
    CHECK(strcmp(r.name, want.name) == 0 && r.flops16 == want.flops16 && r.flops32 == want.flops32 &&
              r.hbm == want.hbm && r.pcie == want.pcie && r.memory == want.memory && r.matmul_eff == want.matmul_eff &&
              r.matmul32_eff == want.matmul32_eff && r.unaligned_eff == want.unaligned_eff &&
              r.matmul_fixed_s == want.matmul_fixed_s && r.hbm_eff == want.hbm_eff &&
              r.pcie_pinned_eff == want.pcie_pinned_eff && r.pcie_pageable_eff == want.pcie_pageable_eff &&
              r.launch_s == want.launch_s,
          "the device models \"%s\", its parameters \"%s\"", r.name, want.name);
    zinf_device_choice choice;
    zinf_device_params p = {.backend = ZINF_BACKEND_SIM};
    TRY(zinf_device_choose(&p, &choice));
    CHECK(choice.backend == ZINF_BACKEND_SIM && choice.capacity == 81559 * MiB, "chose %s with %llu",
          zinf_backend_name(choice.backend), (unsigned long long)choice.capacity);

    // 72 GiB of device memory on a machine that may have less: address space only.
    long rss0 = rss_kib();
    void *big[9];
    for (int i = 0; i < 8; i++)
        TRY(zinf_device_alloc(d, 9 * GiB, "layers", &big[i]));
    long rss1 = rss_kib();
    CHECK(rss0 > 0 && rss1 - rss0 < 64 * 1024, "72 GiB of sim memory grew RSS by %ld KiB", rss1 - rss0);
    zinf_device_mem m;
    zinf_device_get_mem(d, &m);
    CHECK(m.in_use == 72 * GiB && m.allocations == 8, "in use %llu in %lld", (unsigned long long)m.in_use,
          (long long)m.allocations);
    zinf_status st = zinf_device_alloc(d, 9 * GiB, "one more layer", &big[8]);
    CHECK(st == ZINF_ERR_NOMEM && big[8] == NULL, "81 GiB on an 80 GB H100: %s", zinf_status_str(st));
    CHECK_CONTAINS(zinf_last_error(), "sim device");
    CHECK_CONTAINS(zinf_last_error(), "9 GiB for one more layer");
    CHECK_CONTAINS(zinf_last_error(), "layers 72 GiB in 8");

    // Device memory is not host memory: a touch from the host faults.
    pid_t pid = fork();
    if (pid == 0) {
        struct sigaction dfl = {.sa_handler = SIG_DFL};
        sigaction(SIGSEGV, &dfl, NULL);
        sigaction(SIGBUS, &dfl, NULL);
        volatile char c = *(volatile char *)big[3];
        (void)c;
        _exit(0);
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid, "fork failed");
    CHECK(!(WIFEXITED(status) && WEXITSTATUS(status) == 0), "the host read sim device memory without a fault");
    CHECK(WIFSIGNALED(status), "the child reading device memory was not killed by a signal (status %#x)", status);

    for (int i = 0; i < 8; i++)
        zinf_device_free(d, big[i]);
    zinf_device_get_mem(d, &m);
    CHECK(m.in_use == 0 && m.allocations == 0 && m.peak == 72 * GiB, "after frees %llu in use, peak %llu",
          (unsigned long long)m.in_use, (unsigned long long)m.peak);
    zinf_device_destroy(d);

    // A limit caps the capacity below the modeled memory; past it, it is refused.
    d = sim_device((zinf_sim_params){.gpu = ZINF_SIM_RTX4090}, (int64_t)(10 * GiB));
    caps = zinf_device_get_caps(d);
    CHECK(caps->capacity == 10 * GiB && caps->total_memory == 24564 * MiB, "limited 4090: capacity %llu of %llu",
          (unsigned long long)caps->capacity, (unsigned long long)caps->total_memory);
    zinf_device_destroy(d);
    p = (zinf_device_params){.backend = ZINF_BACKEND_SIM, .memory_limit = (int64_t)(81559 * MiB + 1)};
    CHECK(zinf_device_create(&d, &p) == ZINF_ERR_INVAL && d == NULL, "a limit past the H100's memory was accepted");
    CHECK_CONTAINS(zinf_last_error(), "device.memory_limit");
    CHECK(zinf_device_choose(&p, &choice) == ZINF_ERR_INVAL, "a limit past the H100's memory was chosen");
    // The memory override is the modeled memory the limit is held to.
    p = (zinf_device_params){
        .backend = ZINF_BACKEND_SIM, .memory_limit = (int64_t)(2 * GiB), .sim.memory = (int64_t)GiB};
    CHECK(zinf_device_create(&d, &p) == ZINF_ERR_INVAL, "a 2 GiB limit on a 1 GiB sim device was accepted");
    p.memory_limit = 0;
    TRY(zinf_device_create(&d, &p));
    caps = zinf_device_get_caps(d);
    CHECK(caps->capacity == GiB && strcmp(caps->name, "simulated H100 SXM5 80GB (custom rates)") == 0,
          "1 GiB H100: capacity %llu, name \"%s\"", (unsigned long long)caps->capacity, caps->name);
    zinf_device_destroy(d);
}

// ---- 7. other backends model no time ----

static void test_host_busy(void) {
    zinf_device *d;
    zinf_device_params p = {.backend = ZINF_BACKEND_HOST};
    TRY(zinf_device_create(&d, &p));
    zinf_stream *s;
    void *x;
    TRY(zinf_stream_create(d, &s));
    TRY(zinf_device_alloc(d, MiB, "x", &x));
    TRY(zinf_memset_async(s, x, 0, MiB));
    TRY(zinf_stream_sync(s));
    zinf_device_busy b = {.compute_s = 7, .h2d_s = 7, .d2h_s = 7, .link_s = 7};
    zinf_device_get_busy(d, &b);
    CHECK(b.compute_s == 0 && b.h2d_s == 0 && b.d2h_s == 0 && b.link_s == 0,
          "the host backend reports busy %g %g %g %g", b.compute_s, b.h2d_s, b.d2h_s, b.link_s);
    // The sim's own entry points refuse another backend.
    zinf_sim_rates r;
    CHECK(zinf_device_sim_rates(d, &r) == ZINF_ERR_UNSUPPORTED, "a host device gave sim rates");
    CHECK(zinf_sim_collective(s, 0.001) == ZINF_ERR_UNSUPPORTED, "a host stream took a sim collective");
    zinf_device_free(d, x);
    zinf_stream_destroy(s);
    zinf_device_destroy(d);
}

int main(void) {
    sem_init(&gate, 0, 0);
    test_presets();
    test_gemm();
    test_norm_attention();
    test_attention_models();
    test_copies();
    test_engines();
    test_memory();
    test_host_busy();
    sem_destroy(&gate);
    return check_exit("test_gpu_sim");
}
