// zinf adam-bench: the CPU optimizer step against its own roofline, measured in the
// same run on the same buffers and threads: a pass that reads and writes exactly the
// bytes the update moves, with no arithmetic. Steps and passes alternate, so a
// machine whose speed drifts affects both; each figure is the median.
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "cli.h"

// Large buffers on transparent huge pages where the kernel has them (fewer TLB misses
// on a pass that touches every page once); placed by the pool's first touch.
static void *big_alloc(zinf_cpu_pool *pool, size_t n, size_t elem) {
    if (!elem) return NULL;
    size_t bytes = (n * elem + (2u << 20) - 1) & ~(size_t)((2u << 20) - 1);
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    madvise(p, bytes, MADV_HUGEPAGE);
    zinf_cpu_pool_touch(pool, p, n, elem);
    return p;
}

static void big_free(void *p, size_t n, size_t elem) {
    if (p) munmap(p, (n * elem + (2u << 20) - 1) & ~(size_t)((2u << 20) - 1));
}

// Weights near 1, moments and gradients of realistic size (no subnormals, which
// would measure the FPU's slow path instead of memory).
typedef struct init_job {
    zinf_cpu_pool *pool;
    zinf_optim_tile *t;
} init_job;

static void init_worker(void *arg, int i, int nthreads) {
    (void)nthreads;
    init_job *j = arg;
    zinf_optim_tile *t = j->t;
    size_t lo, hi;
    zinf_cpu_pool_range(j->pool, t->n, i, &lo, &hi);
    uint32_t x = 2463534242u + (uint32_t)lo;
    for (size_t k = lo; k < hi; k++) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        float r = (float)(x >> 8) * 0x1p-24f - 0.5f; // [-0.5, 0.5)
        t->param[k] = 1.0f + r;
        if (t->exp_avg) t->exp_avg[k] = 1e-3f * r;
        if (t->exp_avg_sq) t->exp_avg_sq[k] = 1e-6f * (r + 0.5f) + 1e-8f;
        float g = 1e-2f * r;
        if (t->grad_dtype == ZINF_DTYPE_F32) {
            ((float *)t->grad)[k] = g;
        } else {
            uint32_t b;
            memcpy(&b, &g, 4);
            ((uint16_t *)t->grad)[k] = t->grad_dtype == ZINF_DTYPE_BF16 ? (uint16_t)(b >> 16) : 0x2000; // 2^-7
        }
    }
}

static bool parse_dtype(const char *s, bool allow_none, zinf_dtype *out) {
    static const zinf_dtype all[] = {ZINF_DTYPE_NONE, ZINF_DTYPE_F32, ZINF_DTYPE_BF16, ZINF_DTYPE_F16};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (strcmp(s, zinf_dtype_name(all[i])) == 0 && (allow_none || all[i] != ZINF_DTYPE_NONE)) {
            *out = all[i];
            return true;
        }
    return false;
}

static const struct {
    const char *name;
    zinf_optimizer kind;
} optimizers[] = {
    {"adamw", ZINF_OPTIM_ADAMW}, {"adam", ZINF_OPTIM_ADAM}, {"adagrad", ZINF_OPTIM_ADAGRAD}, {"lion", ZINF_OPTIM_LION}};

static zinf_optim_hparams hparams_of(zinf_optimizer kind) {
    return (zinf_optim_hparams){.kind = kind,
                                .lr = 1e-3,
                                .beta1 = 0.9,
                                .beta2 = 0.999,
                                .eps = 1e-8,
                                .weight_decay = 0.01,
                                .lr_decay = 0,
                                .bias_correction = true};
}

// The median seconds of the step over n parameters (*su) and of its roofline pass
// (*sr), alternating, steps of each, and the bytes the step moves per parameter.
static zinf_status adam_measure(zinf_cpu_pool *pool, zinf_optim_hparams *h, zinf_dtype gt, zinf_dtype ot, size_t n,
                                int steps, bool progress, double *su, double *sr, size_t *bpp) {
    bool need_m = h->kind != ZINF_OPTIM_ADAGRAD, need_v = h->kind != ZINF_OPTIM_LION;
    zinf_optim_tile t = {.param = big_alloc(pool, n, 4),
                         .exp_avg = need_m ? big_alloc(pool, n, 4) : NULL,
                         .exp_avg_sq = need_v ? big_alloc(pool, n, 4) : NULL,
                         .grad = big_alloc(pool, n, zinf_dtype_size(gt)),
                         .grad_dtype = gt,
                         .out = big_alloc(pool, n, zinf_dtype_size(ot)),
                         .out_dtype = ot,
                         .n = n};
    double *tu = calloc((size_t)steps, sizeof *tu), *tr = calloc((size_t)steps, sizeof *tr);
    zinf_status st = ZINF_OK;
    if (!t.param || (need_m && !t.exp_avg) || (need_v && !t.exp_avg_sq) || !t.grad || (ot && !t.out) || !tu || !tr) {
        st = zinf_fail(ZINF_ERR_NOMEM, "cannot allocate the buffers of %zu parameters", n);
        goto done;
    }
    zinf_cpu_pool_run(pool, init_worker, &(init_job){pool, &t});
    h->step = 1;
    zinf_optim_step(pool, h, &t); // warm up: page tables, caches, thread wake-up
    zinf_optim_traffic(pool, h, &t);
    for (int s = 0; s < steps; s++) {
        if (progress) fprintf(stderr, "\rzinf adam-bench: step %d/%d", s + 1, steps);
        h->step = 2 + s;
        double t0 = zinf_clock_s();
        zinf_optim_step(pool, h, &t);
        double t1 = zinf_clock_s();
        zinf_optim_traffic(pool, h, &t);
        tu[s] = t1 - t0;
        tr[s] = zinf_clock_s() - t1;
    }
    if (progress) fprintf(stderr, "\r%40s\r", "");
    *su = cli_median(tu, steps), *sr = cli_median(tr, steps);
    *bpp = zinf_optim_bytes_per_param(h, &t);
done:
    big_free(t.param, n, 4);
    big_free(t.exp_avg, n, 4);
    big_free(t.exp_avg_sq, n, 4);
    big_free((void *)t.grad, n, zinf_dtype_size(gt));
    big_free(t.out, n, zinf_dtype_size(ot));
    free(tu);
    free(tr);
    return st;
}

// The median seconds of AdamW over n parameters writing its states away from where it
// read them, as the update under the backward does: steps alternate between two places,
// each reading the one the last wrote.
static zinf_status away_measure(zinf_cpu_pool *pool, zinf_optim_hparams *h, size_t n, int steps, double *out) {
    zinf_optim_tile t = {.grad = big_alloc(pool, n, 4),
                         .grad_dtype = ZINF_DTYPE_F32,
                         .out = big_alloc(pool, n, 2),
                         .out_dtype = ZINF_DTYPE_BF16,
                         .n = n};
    float *place[2][3];
    bool ok = t.grad && t.out;
    for (int k = 0; k < 2; k++)
        for (int j = 0; j < 3; j++)
            ok = (place[k][j] = big_alloc(pool, n, 4)) && ok;
    double *ts = calloc((size_t)steps, sizeof *ts);
    zinf_status st = ZINF_OK;
    if (!ok || !ts) {
        st = zinf_fail(ZINF_ERR_NOMEM, "cannot allocate two places of states for %zu parameters", n);
        goto done;
    }
    t.param = place[0][0], t.exp_avg = place[0][1], t.exp_avg_sq = place[0][2];
    zinf_cpu_pool_run(pool, init_worker, &(init_job){pool, &t});
    for (int s = -1; s < steps && st == ZINF_OK; s++) { // step -1 warms up
        const int from = (s + 2) % 2, to = 1 - from;
        t.from_param = place[from][0], t.from_exp_avg = place[from][1], t.from_exp_avg_sq = place[from][2];
        t.param = place[to][0], t.exp_avg = place[to][1], t.exp_avg_sq = place[to][2];
        h->step = 2 + s;
        double t0 = zinf_clock_s();
        st = zinf_optim_step(pool, h, &t);
        if (s >= 0) ts[s] = zinf_clock_s() - t0;
    }
    if (st == ZINF_OK) *out = cli_median(ts, steps);
done:
    for (int k = 0; k < 2; k++)
        for (int j = 0; j < 3; j++)
            big_free(place[k][j], n, 4);
    big_free((void *)t.grad, n, 4);
    big_free(t.out, n, 2);
    free(ts);
    return st;
}

// The offloaded optimizer's gradient passes over n fp32 elements: the accumulation
// (zinf_cpu_add) and the norm (zinf_grad_stats_pool), median of three each.
static zinf_status grad_measure(zinf_cpu_pool *pool, size_t n, double *add_s, double *norm_s) {
    float *g = big_alloc(pool, n, 4), *src = big_alloc(pool, n, 4);
    zinf_status st = g && src ? ZINF_OK : zinf_fail(ZINF_ERR_NOMEM, "cannot allocate 2 x %zu floats", n);
    double ta[3], tn[3];
    for (int k = 0; st == ZINF_OK && k < 3; k++) {
        double t0 = zinf_clock_s();
        zinf_cpu_add(pool, g, src, n);
        double t1 = zinf_clock_s();
        zinf_grad_stats gs;
        st = zinf_grad_stats_pool(pool, g, ZINF_DTYPE_F32, n, &gs);
        ta[k] = t1 - t0, tn[k] = zinf_clock_s() - t1;
    }
    if (st == ZINF_OK) *add_s = cli_median(ta, 3), *norm_s = cli_median(tn, 3);
    big_free(g, n, 4);
    big_free(src, n, 4);
    return st;
}

size_t cli_cpu_rates_elements(void) {
    zinf_cpu_info c;
    zinf_cpu_probe(&c);
    size_t n = (size_t)(4 * c.last_level_cache_bytes / 18), least = 16u << 20, most = 256u << 20;
    n = n > least ? (n + least - 1) / least * least : least;
    return n < most ? n : most;
}

zinf_status cli_cpu_rates(size_t n, cli_cpu_rates_t *out) {
    zinf_cpu_pool *pool;
    ZINF_CHECK(zinf_cpu_pool_create(&pool, 0));
    zinf_optim_hparams h = hparams_of(ZINF_OPTIM_ADAMW);
    double su = 0, sr = 0, sw = 0, sa = 0, sn = 0;
    size_t bpp = 0;
    zinf_status st = adam_measure(pool, &h, ZINF_DTYPE_F32, ZINF_DTYPE_BF16, n, 3, false, &su, &sr, &bpp);
    if (st == ZINF_OK) st = away_measure(pool, &h, n, 3, &sw);
    if (st == ZINF_OK) st = grad_measure(pool, n, &sa, &sn);
    zinf_cpu_pool_destroy(pool);
    if (st != ZINF_OK) return st;
    *out = (cli_cpu_rates_t){
        .adam = (double)n / su, .adam_away = (double)n / sw, .add = (double)n / sa, .norm = (double)n / sn};
    return ZINF_OK;
}

int cli_adam_bench(int argc, char **argv) {
    static const struct option opts[] = {
        {"params", required_argument, NULL, 'n'},
        {"threads", required_argument, NULL, 't'},
        {"grad-dtype", required_argument, NULL, 'g'},
        {"out-dtype", required_argument, NULL, 'o'},
        {"steps", required_argument, NULL, 's'},
        {"optimizer", required_argument, NULL, 'O'},
        {"json", no_argument, NULL, 'j'},
        {NULL, 0, NULL, 0},
    };
    uint64_t params = 100000000, v;
    int threads = 0, steps = 10, rc = CLI_OK, c, kind = 0;
    zinf_dtype gt = ZINF_DTYPE_F32, ot = ZINF_DTYPE_BF16;
    bool json = false;
    opterr = 0;
    while (rc == CLI_OK && (c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'n':
            if (!cli_parse_count(optarg, 1e12, &params))
                rc = cli_usage("adam-bench", "--params: \"%s\" is not a count from 1 (e.g. 100000000, 1e8, 100M)",
                               optarg);
            break;
        case 't':
            rc = cli_parse_size("adam-bench", "--threads", optarg, 1, 4096, &v);
            threads = (int)v;
            break;
        case 's':
            rc = cli_parse_size("adam-bench", "--steps", optarg, 1, 100000, &v);
            steps = (int)v;
            break;
        case 'g':
            if (!parse_dtype(optarg, false, &gt))
                rc = cli_usage("adam-bench", "--grad-dtype: \"%s\" is not fp32, bf16 or fp16", optarg);
            break;
        case 'o':
            if (!parse_dtype(optarg, true, &ot) || ot == ZINF_DTYPE_F32)
                rc = cli_usage("adam-bench", "--out-dtype: \"%s\" is not none, bf16 or fp16", optarg);
            break;
        case 'O':
            kind = -1;
            for (int k = 0; k < (int)(sizeof optimizers / sizeof optimizers[0]); k++)
                if (strcmp(optarg, optimizers[k].name) == 0) kind = k;
            if (kind < 0)
                rc = cli_usage("adam-bench", "--optimizer: \"%s\" is not adamw, adam, adagrad or lion", optarg);
            break;
        case 'j': json = true; break;
        default: rc = cli_usage("adam-bench", "unknown option %s", argv[optind - 1]); break;
        }
    }
    if (rc == CLI_OK && optind < argc) rc = cli_usage("adam-bench", "unexpected argument \"%s\"", argv[optind]);
    if (rc != CLI_OK) return rc;

    zinf_cpu_pool *pool;
    if (zinf_cpu_pool_create(&pool, threads) != ZINF_OK) return cli_fail("adam-bench", CLI_FAIL);
    threads = zinf_cpu_pool_threads(pool);
    zinf_optim_hparams h = hparams_of(optimizers[kind].kind);
    size_t n = params;
    size_t bpp = 0;
    double su, sr;
    if (adam_measure(pool, &h, gt, ot, n, steps, !json, &su, &sr, &bpp) != ZINF_OK) {
        rc = cli_fail("adam-bench", CLI_FAIL);
        goto done;
    }
    double pps = (double)n / su, rps = (double)n / sr;
    if (json) {
        cli_print_json_line(json_pack(
            "{s:I, s:i, s:f, s:I, s:f, s:f, s:s, s:s, s:s, s:s, s:i, s:f, s:f, s:f}", "params", (json_int_t)n,
            "threads", threads, "params_per_s", pps, "bytes_per_param", (json_int_t)bpp, "roofline_params_per_s", rps,
            "ratio_to_roofline", pps / rps, "optimizer", optimizers[kind].name, "grad_dtype", zinf_dtype_name(gt),
            "out_dtype", zinf_dtype_name(ot), "simd", zinf_simd_name(zinf_simd_active()), "steps", steps, "seconds", su,
            "roofline_seconds", sr, "bytes_per_s", pps * (double)bpp));
    } else {
        printf("adam-bench: %s, %llu params, %s gradients, %s copy, %d thread(s), %s, %zu bytes/param\n",
               optimizers[kind].name, (unsigned long long)n, zinf_dtype_name(gt), zinf_dtype_name(ot), threads,
               zinf_simd_name(zinf_simd_active()), bpp);
        printf("  update    %8.4f s/step %8.1f M params/s %7.2f GB/s\n", su, pps / 1e6, pps * (double)bpp / 1e9);
        printf("  roofline  %8.4f s/pass %8.1f M params/s %7.2f GB/s  (the same bytes, no arithmetic)\n", sr, rps / 1e6,
               rps * (double)bpp / 1e9);
        printf("  ratio to roofline: %.3f  (median of %d)\n", pps / rps, steps);
    }
done:
    zinf_cpu_pool_destroy(pool);
    return rc;
}
