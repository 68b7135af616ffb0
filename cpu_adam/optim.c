// The optimizer front end: hyperparameters checked and turned into kernel constants
// (torch's formulas), the SIMD level picked, and tiles split over the thread pool.
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "internal.h"

// ---- SIMD level ----

static zinf_simd cpu_best, active;

static void pick_level(void) {
    zinf_cpu_info info;
    zinf_cpu_probe(&info);
    cpu_best = active = info.simd;
#if !defined(__x86_64__)
    cpu_best = active = ZINF_SIMD_SCALAR;
#endif
    const char *want = zinf_env(ZINF_ENV_SIMD);
    if (!want || !*want) return;
    for (zinf_simd s = ZINF_SIMD_SCALAR; s <= ZINF_SIMD_AVX512; s++)
        if (strcasecmp(want, zinf_simd_name(s)) == 0) {
            if (s < active) active = s;
            return;
        }
    ZINF_LOG_WARN("ZINF_SIMD=%s is not scalar, avx2 or avx512; using %s", want, zinf_simd_name(active));
}

static pthread_once_t level_once = PTHREAD_ONCE_INIT;

zinf_simd zinf_simd_active(void) {
    pthread_once(&level_once, pick_level);
    return active;
}

static zinf_status check_level(zinf_simd s) {
    pthread_once(&level_once, pick_level);
    if (s <= cpu_best) return ZINF_OK;
    return zinf_fail(ZINF_ERR_UNSUPPORTED, "cpu_adam: this CPU has no %s (best: %s)", zinf_simd_name(s),
                     zinf_simd_name(cpu_best));
}

typedef struct kernels {
    optim_fn optim;
    sumsq_fn sumsq;
    traffic_fn traffic;
    add_fn add;
} kernels;

static kernels kernels_for(zinf_simd s) {
#if defined(__x86_64__)
    if (s == ZINF_SIMD_AVX512) return (kernels){optim_avx512, sumsq_avx512, traffic_avx512, add_avx512};
    if (s == ZINF_SIMD_AVX2) return (kernels){optim_avx2, sumsq_avx2, traffic_avx2, add_avx2};
#endif
    (void)s;
    return (kernels){optim_scalar, sumsq_scalar, traffic_scalar, add_scalar};
}

// ---- hyperparameters ----

static const char *kind_name(zinf_optimizer k) {
    static const char *const names[] = {"Adam", "AdamW", "Adagrad", "Lion"};
    return (unsigned)k < ZINF_ARRAY_LEN(names) ? names[k] : "unknown optimizer";
}

static zinf_status bad(const zinf_optim_hparams *h, const char *what, double v, const char *rule) {
    return zinf_fail(ZINF_ERR_INVAL, "cpu_adam %s: %s %g %s", kind_name(h->kind), what, v, rule);
}

static bool finite_ge0(double x) { return isfinite(x) && x >= 0; }

zinf_status zinf_optim_consts_of(const zinf_optim_hparams *h, const zinf_optim_tile *t, zinf_optim_consts *c) {
    if ((unsigned)h->kind > ZINF_OPTIM_LION)
        return zinf_fail(ZINF_ERR_INVAL, "cpu_adam: unknown optimizer %d", h->kind);
    if (!finite_ge0(h->lr)) return bad(h, "lr", h->lr, "is not a finite number >= 0");
    if (!finite_ge0(h->weight_decay)) return bad(h, "weight_decay", h->weight_decay, "is not a finite number >= 0");
    bool betas = h->kind != ZINF_OPTIM_ADAGRAD;
    if (betas && !(h->beta1 >= 0 && h->beta1 < 1)) return bad(h, "beta1", h->beta1, "is not in [0, 1)");
    if (betas && !(h->beta2 >= 0 && h->beta2 < 1)) return bad(h, "beta2", h->beta2, "is not in [0, 1)");
    if (h->kind != ZINF_OPTIM_LION && !finite_ge0(h->eps)) return bad(h, "eps", h->eps, "is not a finite number >= 0");
    if (h->kind == ZINF_OPTIM_ADAGRAD && !finite_ge0(h->lr_decay))
        return bad(h, "lr_decay", h->lr_decay, "is not a finite number >= 0");
    if (h->step < 1) return bad(h, "step", (double)h->step, "is below 1 (the first step is 1)");
    if (!(isfinite(h->grad_scale) && h->grad_scale >= 0))
        return bad(h, "grad_scale", h->grad_scale, "is not a finite number >= 0");
    if (t->grad_dtype != ZINF_DTYPE_F32 && t->grad_dtype != ZINF_DTYPE_BF16 && t->grad_dtype != ZINF_DTYPE_F16)
        return zinf_fail(ZINF_ERR_INVAL, "cpu_adam: gradients must be fp32, bf16 or fp16, not %s",
                         zinf_dtype_name(t->grad_dtype));
    if (t->out_dtype != ZINF_DTYPE_NONE && t->out_dtype != ZINF_DTYPE_BF16 && t->out_dtype != ZINF_DTYPE_F16)
        return zinf_fail(ZINF_ERR_INVAL, "cpu_adam: the weight copy must be bf16 or fp16, not %s",
                         zinf_dtype_name(t->out_dtype));
    bool need_m = h->kind != ZINF_OPTIM_ADAGRAD, need_v = h->kind != ZINF_OPTIM_LION;
    if (t->n && (!t->param || !t->grad || (need_m && !t->exp_avg) || (need_v && !t->exp_avg_sq) ||
                 (t->out_dtype != ZINF_DTYPE_NONE && !t->out)))
        return zinf_fail(ZINF_ERR_INVAL, "cpu_adam %s: the tile lacks a buffer (param, grad,%s%s out)",
                         kind_name(h->kind), need_m ? " exp_avg," : "", need_v ? " exp_avg_sq," : "");
    if (t->n && t->from_param && ((need_m && !t->from_exp_avg) || (need_v && !t->from_exp_avg_sq)))
        return zinf_fail(ZINF_ERR_INVAL, "cpu_adam %s: from_param is set without from_%s", kind_name(h->kind),
                         need_m && !t->from_exp_avg ? "exp_avg" : "exp_avg_sq");

    double step = (double)h->step, lr = h->lr, wd = h->weight_decay;
    bool decoupled = h->kind == ZINF_OPTIM_ADAMW || h->kind == ZINF_OPTIM_LION;
    *c = (zinf_optim_consts){
        .kind = h->kind,
        .scale = h->grad_scale == 0 ? 1.0f : h->grad_scale,
        .decay = (float)(decoupled ? 1 - lr * wd : 1),
        .l2 = (float)(decoupled ? 0 : wd),
        .b1 = (float)h->beta1,
        .b1c = (float)(1 - h->beta1),
        .b2 = (float)h->beta2,
        .b2c = (float)(1 - h->beta2),
        .inv_bc2_sqrt = 1.0f,
        .eps = (float)h->eps,
    };
    switch (h->kind) {
    case ZINF_OPTIM_ADAM:
    case ZINF_OPTIM_ADAMW: {
        double bc1 = h->bias_correction ? 1 - pow(h->beta1, step) : 1;
        double bc2 = h->bias_correction ? 1 - pow(h->beta2, step) : 1;
        c->neg_step = (float)(-lr / bc1);
        c->inv_bc2_sqrt = (float)(1 / sqrt(bc2));
        break;
    }
    case ZINF_OPTIM_ADAGRAD: c->neg_step = (float)(-lr / (1 + (step - 1) * h->lr_decay)); break;
    case ZINF_OPTIM_LION: c->neg_step = (float)-lr; break;
    }
    return ZINF_OK;
}

// The arrays the kernel of this optimizer touches (the others NULL), so the traffic
// pass moves exactly the update's bytes.
static zinf_optim_tile used(const zinf_optim_hparams *h, const zinf_optim_tile *t) {
    zinf_optim_tile u = *t;
    if (h->kind == ZINF_OPTIM_ADAGRAD) u.exp_avg = NULL;
    if (h->kind == ZINF_OPTIM_LION) u.exp_avg_sq = NULL;
    if (u.out_dtype == ZINF_DTYPE_NONE) u.out = NULL;
    return u;
}

zinf_status zinf_optim_update(const zinf_optim_hparams *h, const zinf_optim_tile *t, zinf_simd simd) {
    zinf_optim_consts c;
    ZINF_CHECK(check_level(simd));
    ZINF_CHECK(zinf_optim_consts_of(h, t, &c));
    zinf_optim_tile u = used(h, t);
    kernels_for(simd).optim(&c, &u, 0, u.n);
    return ZINF_OK;
}

// ---- gradient statistics ----

static zinf_status check_grad(const void *grad, zinf_dtype dt, size_t n) {
    if (dt != ZINF_DTYPE_F32 && dt != ZINF_DTYPE_BF16 && dt != ZINF_DTYPE_F16)
        return zinf_fail(ZINF_ERR_INVAL, "cpu_adam: gradients must be fp32, bf16 or fp16, not %s", zinf_dtype_name(dt));
    if (n && !grad) return zinf_fail(ZINF_ERR_INVAL, "cpu_adam: no gradient buffer for %zu elements", n);
    return ZINF_OK;
}

static const char *block_at(const void *g, zinf_dtype dt, size_t b) {
    return (const char *)g + b * STATS_BLOCK * zinf_dtype_size(dt);
}

static size_t block_len(size_t n, size_t b) {
    size_t left = n - b * STATS_BLOCK;
    return left < STATS_BLOCK ? left : STATS_BLOCK;
}

// Blocks summed in order (as zinf_grad_stats_compute does): the same total whoever
// computed each block's sum.
static void finish(const double *sums, size_t nblocks, zinf_grad_stats *out) {
    double s = 0;
    for (size_t b = 0; b < nblocks; b++)
        s += sums[b];
    *out = (zinf_grad_stats){.sumsq = s, .nonfinite = !isfinite(s)};
}

zinf_status zinf_grad_stats_compute(const void *grad, zinf_dtype dt, size_t n, zinf_simd simd, zinf_grad_stats *out) {
    ZINF_CHECK(check_level(simd));
    ZINF_CHECK(check_grad(grad, dt, n));
    sumsq_fn f = kernels_for(simd).sumsq;
    double s = 0;
    for (size_t b = 0; b * STATS_BLOCK < n; b++)
        s += f(block_at(grad, dt, b), dt, block_len(n, b));
    *out = (zinf_grad_stats){.sumsq = s, .nonfinite = !isfinite(s)};
    return ZINF_OK;
}

// ---- over the pool ----

typedef struct step_job {
    zinf_cpu_pool *pool;
    kernels k;
    const zinf_optim_consts *c; // NULL: the traffic pass
    const zinf_optim_tile *t;
    uint32_t zero;
} step_job;

static void step_worker(void *arg, int i, int nthreads) {
    (void)nthreads;
    step_job *j = arg;
    size_t lo, hi;
    zinf_cpu_pool_range(j->pool, j->t->n, i, &lo, &hi);
    if (j->c)
        j->k.optim(j->c, j->t, lo, hi);
    else
        j->k.traffic(j->t, lo, hi, j->zero);
}

zinf_status zinf_optim_step(zinf_cpu_pool *pool, const zinf_optim_hparams *h, const zinf_optim_tile *t) {
    zinf_optim_consts c;
    ZINF_CHECK(zinf_optim_consts_of(h, t, &c));
    zinf_optim_tile u = used(h, t);
    step_job j = {.pool = pool, .k = kernels_for(zinf_simd_active()), .c = &c, .t = &u};
    zinf_cpu_pool_run(pool, step_worker, &j);
    return ZINF_OK;
}

// Read at run time so the compiler cannot prove the traffic pass changes nothing.
static volatile uint32_t traffic_zero;

zinf_status zinf_optim_traffic(zinf_cpu_pool *pool, const zinf_optim_hparams *h, const zinf_optim_tile *t) {
    zinf_optim_consts c;
    ZINF_CHECK(zinf_optim_consts_of(h, t, &c));
    zinf_optim_tile u = used(h, t);
    step_job j = {.pool = pool, .k = kernels_for(zinf_simd_active()), .t = &u, .zero = traffic_zero};
    zinf_cpu_pool_run(pool, step_worker, &j);
    return ZINF_OK;
}

size_t zinf_optim_bytes_per_param(const zinf_optim_hparams *h, const zinf_optim_tile *t) {
    size_t states = 1 + (h->kind != ZINF_OPTIM_ADAGRAD) + (h->kind != ZINF_OPTIM_LION); // param, m, v
    return 2 * 4 * states + zinf_dtype_size(t->grad_dtype) + zinf_dtype_size(t->out_dtype);
}

typedef struct stats_job {
    zinf_cpu_pool *pool;
    sumsq_fn f;
    const void *grad;
    zinf_dtype dt;
    size_t n, nblocks;
    double *sums;
} stats_job;

static void stats_worker(void *arg, int i, int nthreads) {
    (void)nthreads;
    stats_job *j = arg;
    size_t lo, hi;
    zinf_cpu_pool_range(j->pool, j->nblocks * 64, i, &lo, &hi); // 64 per block: ranges cut at whole blocks
    for (size_t b = lo / 64; b < hi / 64; b++)
        j->sums[b] = j->f(block_at(j->grad, j->dt, b), j->dt, block_len(j->n, b));
}

typedef struct add_job {
    zinf_cpu_pool *pool;
    add_fn f;
    float *dst;
    const float *src;
    size_t n;
    bool first; // add to zeros, not to dst
} add_job;

static void add_worker(void *arg, int i, int nthreads) {
    (void)nthreads;
    const add_job *j = arg;
    size_t lo, hi;
    zinf_cpu_pool_range(j->pool, j->n, i, &lo, &hi);
    j->f(j->dst + lo, j->src + lo, hi - lo, j->first);
}

void zinf_cpu_add(zinf_cpu_pool *pool, float *dst, const float *src, size_t n) {
    add_job j = {pool, kernels_for(zinf_simd_active()).add, dst, src, n, false};
    zinf_cpu_pool_run(pool, add_worker, &j);
}

void zinf_cpu_add_first(zinf_cpu_pool *pool, float *dst, const float *src, size_t n) {
    add_job j = {pool, kernels_for(zinf_simd_active()).add, dst, src, n, true};
    zinf_cpu_pool_run(pool, add_worker, &j);
}

typedef struct add_stats_job {
    zinf_cpu_pool *pool;
    add_fn add;
    sumsq_fn f;
    float *dst;
    const float *src;
    size_t n, nblocks;
    bool first;
    double *sums;
} add_stats_job;

// Whole blocks of the norm's, each added (the add kernel) and then squared
// (stats_worker's kernel) while it is in cache.
static void add_stats_worker(void *arg, int i, int nthreads) {
    (void)nthreads;
    const add_stats_job *j = arg;
    size_t lo, hi;
    zinf_cpu_pool_range(j->pool, j->nblocks * 64, i, &lo, &hi);
    for (size_t b = lo / 64; b < hi / 64; b++) {
        float *d = j->dst + b * STATS_BLOCK;
        const float *s = j->src + b * STATS_BLOCK;
        size_t len = block_len(j->n, b);
        j->add(d, s, len, j->first);
        j->sums[b] = j->f(d, ZINF_DTYPE_F32, len);
    }
}

zinf_status zinf_cpu_add_stats(zinf_cpu_pool *pool, float *dst, const float *src, size_t n, bool first,
                               zinf_grad_stats *out) {
    ZINF_CHECK(check_grad(dst, ZINF_DTYPE_F32, n));
    size_t nblocks = (n + STATS_BLOCK - 1) / STATS_BLOCK;
    double *sums = malloc((nblocks ? nblocks : 1) * sizeof *sums);
    if (!sums) return zinf_fail(ZINF_ERR_NOMEM, "cpu_adam: out of memory for %zu block sums", nblocks);
    kernels k = kernels_for(zinf_simd_active());
    add_stats_job j = {.pool = pool,
                       .add = k.add,
                       .f = k.sumsq,
                       .dst = dst,
                       .src = src,
                       .n = n,
                       .nblocks = nblocks,
                       .first = first,
                       .sums = sums};
    zinf_cpu_pool_run(pool, add_stats_worker, &j);
    finish(sums, nblocks, out);
    free(sums);
    return ZINF_OK;
}

static void copy_worker(void *arg, int i, int nthreads) {
    (void)nthreads;
    const add_job *j = arg;
    size_t lo, hi;
    zinf_cpu_pool_range(j->pool, j->n, i, &lo, &hi);
    memcpy(j->dst + lo, j->src + lo, (hi - lo) * sizeof *j->dst);
}

void zinf_cpu_copy(zinf_cpu_pool *pool, float *dst, const float *src, size_t n) {
    add_job j = {.pool = pool, .dst = dst, .src = src, .n = n};
    zinf_cpu_pool_run(pool, copy_worker, &j);
}

zinf_status zinf_grad_stats_pool(zinf_cpu_pool *pool, const void *grad, zinf_dtype dt, size_t n, zinf_grad_stats *out) {
    ZINF_CHECK(check_grad(grad, dt, n));
    size_t nblocks = (n + STATS_BLOCK - 1) / STATS_BLOCK;
    double *sums = malloc((nblocks ? nblocks : 1) * sizeof *sums);
    if (!sums) return zinf_fail(ZINF_ERR_NOMEM, "cpu_adam: out of memory for %zu block sums", nblocks);
    stats_job j = {.pool = pool,
                   .f = kernels_for(zinf_simd_active()).sumsq,
                   .grad = grad,
                   .dt = dt,
                   .n = n,
                   .nblocks = nblocks,
                   .sums = sums};
    zinf_cpu_pool_run(pool, stats_worker, &j);
    finish(sums, nblocks, out);
    free(sums);
    return ZINF_OK;
}
