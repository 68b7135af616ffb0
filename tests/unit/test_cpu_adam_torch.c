// cpu_adam against PyTorch: the steps tests/ref/optim_ref.py recorded (torch.optim's
// Adam, AdamW, Adagrad; Lion and uncorrected Adam in torch ops) replayed through
// zinf_optim_step, each from torch's state before it, and compared after every step: weights and states within a
// relative 1e-6 per element (see compare), the 16-bit copies equal to torch's conversion of torch's weights wherever
// the fp32 weights agree bit for bit (and one unit apart at most elsewhere).
// timeout: 10 san=10 cuda-emu=10 san-cuda-emu=10
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "zinf.h"

typedef struct hdr {
    char name[48];
    uint32_t kind, bias_correction, n, steps, bf16_grads;
    double lr, beta1, beta2, eps, weight_decay, lr_decay;
    float grad_scale;
} __attribute__((packed)) hdr;

static bool read_all(FILE *f, void *p, size_t bytes) { return fread(p, 1, bytes, f) == bytes; }

// |got - want| <= 1e-6 |want|, where |want| counts as at least |before|, torch's value
// before the step: a weight that crosses zero (prev + update, nearly cancelling) carries
// the rounding error of those operands, which a bound relative to the small sum cannot
// hold.
static int compare(const char *what, const char *name, int step, const float *got, const float *want,
                   const float *before, size_t n, double *worst) {
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        double scale = fmax(fabs(want[i]), fabs(before[i])), err = fabs((double)got[i] - want[i]);
        if (err > 0 && err / scale > *worst) *worst = err / scale;
        if (!(err <= 1e-6 * scale) && bad++ < 3)
            CHECK(0, "%s step %d %s[%zu]: %.9g, torch %.9g (rel %.3g)", name, step, what, i, (double)got[i],
                  (double)want[i], err / fabs(want[i]));
    }
    return bad;
}

static uint16_t bf16_of(float x) {
    uint32_t b;
    memcpy(&b, &x, 4);
    return (uint16_t)(b >> 16);
}

int main(void) {
    const char *dir = getenv("ZINF_REF_DIR") ? getenv("ZINF_REF_DIR") : "build/ref";
    char path[512];
    snprintf(path, sizeof path, "%s/optim.bin", dir);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "%s: missing; `make tests` generates it with tests/ref/optim_ref.py\n", path);
        return 1;
    }
    char magic[8];
    uint32_t version, ncases;
    CHECK(read_all(f, magic, 8) && memcmp(magic, "ZINFOPT1", 8) == 0 && read_all(f, &version, 4) && version == 1 &&
              read_all(f, &ncases, 4) && ncases > 0,
          "%s: not a version 1 optimizer reference", path);
    zinf_cpu_pool *pool;
    CHECK(zinf_cpu_pool_create(&pool, 2) == ZINF_OK, "pool: %s", zinf_last_error());
    double worst = 0;
    for (uint32_t c = 0; c < ncases && !check_failures; c++) {
        hdr h;
        CHECK(read_all(f, &h, sizeof h), "%s: truncated header of case %u", path, c);
        size_t n = h.n;
        float *p = malloc(n * 4), *m = malloc(n * 4), *v = malloc(n * 4), *g = malloc(n * 4);
        float *tp = malloc(n * 4), *tm = malloc(n * 4), *tv = malloc(n * 4);
        float *bp = malloc(n * 4), *bm = malloc(n * 4), *bv = malloc(n * 4); // torch's values before the step
        uint16_t *g16 = malloc(n * 2), *out_bf = malloc(n * 2), *out_h = malloc(n * 2), *t_bf = malloc(n * 2),
                 *t_h = malloc(n * 2);
        CHECK(read_all(f, p, n * 4) && read_all(f, m, n * 4) && read_all(f, v, n * 4), "%s: truncated", h.name);
        memcpy(tp, p, n * 4), memcpy(tm, m, n * 4), memcpy(tv, v, n * 4);
        int bad = 0;
        for (uint32_t s = 1; s <= h.steps && !bad; s++) {
            memcpy(bp, tp, n * 4), memcpy(bm, tm, n * 4), memcpy(bv, tv, n * 4);
            // Each step starts from torch's state, so what is compared is the step
            // itself, not two trajectories drifting apart by rounding.
            memcpy(p, bp, n * 4), memcpy(m, bm, n * 4), memcpy(v, bv, n * 4);
            CHECK(read_all(f, g, n * 4) && read_all(f, tp, n * 4) && read_all(f, tm, n * 4) && read_all(f, tv, n * 4) &&
                      read_all(f, t_bf, n * 2) && read_all(f, t_h, n * 2),
                  "%s: truncated step %u", h.name, s);
            zinf_optim_hparams hp = {.kind = (zinf_optimizer)h.kind,
                                     .lr = h.lr,
                                     .beta1 = h.beta1,
                                     .beta2 = h.beta2,
                                     .eps = h.eps,
                                     .weight_decay = h.weight_decay,
                                     .lr_decay = h.lr_decay,
                                     .bias_correction = h.bias_correction,
                                     .step = s,
                                     .grad_scale = h.grad_scale};
            zinf_optim_tile t = {
                .param = p, .exp_avg = m, .exp_avg_sq = v, .grad = g, .grad_dtype = ZINF_DTYPE_F32, .n = n};
            if (h.bf16_grads) { // the same values read as bf16
                for (size_t i = 0; i < n; i++)
                    g16[i] = bf16_of(g[i]);
                t.grad = g16, t.grad_dtype = ZINF_DTYPE_BF16;
            }
            // Alternate the copy's dtype; check the other one by converting again.
            t.out = s % 2 ? out_bf : out_h;
            t.out_dtype = s % 2 ? ZINF_DTYPE_BF16 : ZINF_DTYPE_F16;
            CHECK(zinf_optim_step(pool, &hp, &t) == ZINF_OK, "%s: %s", h.name, zinf_last_error());
            bad += compare("param", h.name, (int)s, p, tp, bp, n, &worst);
            if (h.kind != 2) bad += compare("exp_avg", h.name, (int)s, m, tm, bm, n, &worst);
            if (h.kind != 3) bad += compare("exp_avg_sq", h.name, (int)s, v, tv, bv, n, &worst);
            const uint16_t *got16 = s % 2 ? out_bf : out_h, *want16 = s % 2 ? t_bf : t_h;
            for (size_t i = 0, shown = 0; i < n; i++) {
                bool same_p = memcmp(&p[i], &tp[i], 4) == 0;
                int d = abs((int)got16[i] - (int)want16[i]);
                if ((same_p ? d != 0 : d > 1) && shown++ < 3) {
                    bad++;
                    CHECK(0, "%s step %u %s copy[%zu] of %.9g: %#x, torch %#x", h.name, s, s % 2 ? "bf16" : "fp16", i,
                          (double)p[i], got16[i], want16[i]);
                }
            }
        }
        printf("%-28s %u steps of %zu: %s\n", h.name, h.steps, n, bad ? "DIFFERS" : "matches torch");
        free(p), free(m), free(v), free(g), free(tp), free(tm), free(tv), free(g16), free(out_bf), free(out_h);
        free(t_bf), free(t_h), free(bp), free(bm), free(bv);
    }
    printf("largest relative difference: %.3g\n", worst);
    zinf_cpu_pool_destroy(pool);
    fclose(f);
    return check_exit("test_cpu_adam_torch");
}
