// The engine against PyTorch: 10 steps of fp32 AdamW with clipping on a small GPT-2,
// from the weights and data tests/ref/train_ref.py trained transformers'
// GPT2LMHeadModel on, driven through the public API as a C program would. Losses and
// gradient norms agree within a relative 2e-6 (floats summed in other orders: torch's
// products and zinf's kernels differ by a few ulps). Final weights agree within 1e-5,
// a hundredth of one step's lr: Adam turns the gradient's relative rounding error into
// the same relative error of an update of about lr, except where the true gradient is
// zero (the key bias: softmax ignores a shift shared by a row's scores), where both
// sides step on rounding noise, bounded by lr * |noise| / eps. Also: the same run as 2
// micro-batches of 2 (accumulation, at stage 3) agrees with the 1 x 4 run to the same
// bounds, and safe_get/set_full round-trip.
// timeout: 10 san=10 cuda-emu=10 san-cuda-emu=80
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "zinf.h"

enum { STEPS = 10, B = 4, T = 32 };

typedef struct ref {
    double loss[STEPS], norm[STEPS];
} ref;

static bool read_ref(const char *dir, ref *r) {
    char path[512];
    snprintf(path, sizeof path, "%s/train.bin", dir);
    FILE *f = fopen(path, "rb");
    char magic[8];
    uint32_t h[4];
    bool ok = f && fread(magic, 1, 8, f) == 8 && memcmp(magic, "ZINFTRN1", 8) == 0 && fread(h, 4, 4, f) == 4 &&
              h[0] == 1 && h[1] == STEPS && h[2] == B && h[3] == T && fread(r->loss, 8, STEPS, f) == STEPS &&
              fread(r->norm, 8, STEPS, f) == STEPS;
    if (f) fclose(f);
    if (!ok) fprintf(stderr, "%s: missing or not a version 1 reference; `make tests` writes it\n", path);
    return ok;
}

static zinf_status load_config(zinf_config *cfg, const char *dir, int micro, int stage) {
    char json[2048];
    snprintf(json, sizeof json,
             "{\"train_batch_size\": %d, \"train_micro_batch_size_per_gpu\": %d, \"gradient_clipping\": 1.0,"
             " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 1e-3, \"betas\": [0.9, 0.95],"
             " \"eps\": 1e-8, \"weight_decay\": 0.1}},"
             " \"zero_optimization\": {\"stage\": %d, \"stage3_param_persistence_threshold\": 0},"
             " \"model\": {\"n_layer\": 2, \"n_head\": 2, \"n_embd\": 64, \"vocab_size\": 256, \"block_size\": 32,"
             " \"init_from\": \"%s/train_init.safetensors\"},"
             " \"data\": {\"path\": \"%s/train.tokens\", \"format\": \"tokens-u16\", \"sampling\": \"sequential\"},"
             " \"device\": {\"backend\": \"%s\"}}",
             B, micro, stage, dir, dir, getenv("ZINF_TEST_BACKEND") ? getenv("ZINF_TEST_BACKEND") : "host");
    return zinf_config_parse(cfg, json, "test config", &(zinf_config_options){.world_size = 1});
}

// Train 10 steps with micro-batches of `micro`; losses, norms and the engine after.
static zinf_engine *train(const char *dir, int micro, int stage, zinf_comm *comm, zinf_config *cfg, double *loss,
                          double *norm) {
    zinf_engine *e = NULL;
    zinf_tokens *tok = NULL;
    CHECK(load_config(cfg, dir, micro, stage) == ZINF_OK, "config: %s", zinf_last_error());
    char path[512];
    snprintf(path, sizeof path, "%s/train.tokens", dir);
    CHECK(zinf_tokens_open(&tok, path, ZINF_DATA_TOKENS_U16) == ZINF_OK, "%s", zinf_last_error());
    CHECK(zinf_engine_create(&e, cfg, comm) == ZINF_OK, "create: %s", zinf_last_error());
    if (!e || !tok) return e;
    int32_t in[B * T], tg[B * T];
    for (int s = 0; s < STEPS; s++) {
        for (int m = 0; m < B / micro; m++) {
            for (int j = 0; j < micro; j++)
                zinf_tokens_window(tok, s * B + m * micro + j, T, 256, in + j * T, tg + j * T);
            double l;
            CHECK(zinf_engine_forward(e, in, tg, micro, &l) == ZINF_OK, "forward: %s", zinf_last_error());
            CHECK(zinf_engine_backward(e) == ZINF_OK, "backward: %s", zinf_last_error());
        }
        zinf_step_info si;
        CHECK(zinf_engine_step(e, &si) == ZINF_OK, "step: %s", zinf_last_error());
        CHECK(si.step == s + 1 && !si.skipped && si.lr == 1e-3, "step %lld lr %g", (long long)si.step, si.lr);
        loss[s] = si.loss, norm[s] = si.grad_norm;
    }
    zinf_tokens_close(tok);
    return e;
}

static double rel(double a, double b) { return fabs(a - b) / fmax(fabs(b), 1e-30); }

// Every parameter's final value against torch's; returns the largest difference.
static double compare_weights(zinf_engine *e, const char *dir) {
    char path[512];
    snprintf(path, sizeof path, "%s/train_final.safetensors", dir);
    zinf_safetensors *st = NULL;
    CHECK(zinf_safetensors_open(&st, path) == ZINF_OK, "%s", zinf_last_error());
    double worst = 0;
    for (int i = 0; st && i < zinf_safetensors_count(st); i++) {
        const zinf_st_tensor *t = zinf_safetensors_at(st, i);
        size_t n = t->nbytes / 4;
        float *got = malloc(n * 4);
        const float *want = t->data;
        CHECK(zinf_engine_get_full(e, t->name, ZINF_STATE_PARAM, got) == ZINF_OK, "%s", zinf_last_error());
        double err = 0;
        for (size_t k = 0; k < n; k++)
            err = fmax(err, fabs((double)got[k] - want[k]));
        worst = fmax(worst, err);
        CHECK(err <= 1e-5, "%s: off by %.3g", t->name, err);
        free(got);
    }
    zinf_safetensors_close(st);
    return worst;
}

static void check_full_roundtrip(zinf_engine *e) {
    enum { N = 64 }; // h.1.ln_2.weight
    float v[N], back[N];
    for (int i = 0; i < N; i++)
        v[i] = 0.5f + (float)i / 128;
    for (zinf_state_kind k = ZINF_STATE_PARAM; k <= ZINF_STATE_EXP_AVG_SQ; k++) {
        CHECK(zinf_engine_set_full(e, "h.1.ln_2.weight", k, v) == ZINF_OK, "set_full %d: %s", k, zinf_last_error());
        CHECK(zinf_engine_get_full(e, "transformer.h.1.ln_2.weight", k, back) == ZINF_OK, "%s", zinf_last_error());
        CHECK(memcmp(v, back, sizeof v) == 0, "state %d does not round-trip", k);
    }
    CHECK(zinf_engine_get_full(e, "h.9.mlp.c_fc.weight", ZINF_STATE_PARAM, back) == ZINF_ERR_INVAL, "unknown name");
    CHECK_CONTAINS(zinf_last_error(), "h.9.mlp.c_fc.weight");
}

int main(void) {
    const char *dir = getenv("ZINF_REF_DIR") ? getenv("ZINF_REF_DIR") : "build/ref";
    ref r;
    if (!read_ref(dir, &r)) return 1;
    zinf_comm *comm;
    CHECK(zinf_comm_create(&comm, ZINF_COMM_SINGLE, 0) == ZINF_OK, "%s", zinf_last_error());

    double loss[STEPS], norm[STEPS], loss2[STEPS], norm2[STEPS], worst = 0;
    zinf_config cfg, cfg2;
    zinf_engine *e = train(dir, B, 0, comm, &cfg, loss, norm);
    for (int s = 0; s < STEPS; s++) {
        worst = fmax(worst, fmax(rel(loss[s], r.loss[s]), rel(norm[s], r.norm[s])));
        CHECK(rel(loss[s], r.loss[s]) < 2e-6, "step %d: loss %.9g, torch %.9g", s, loss[s], r.loss[s]);
        CHECK(rel(norm[s], r.norm[s]) < 2e-6, "step %d: grad norm %.9g, torch %.9g", s, norm[s], r.norm[s]);
    }
    printf("worst loss/norm relative error against torch: %.3g\n", worst);
    if (e) printf("largest weight difference from torch: %.3g\n", compare_weights(e, dir));

    // Two micro-batches of two, accumulated, at stage 3: the same batch in other sums.
    zinf_engine *e2 = train(dir, B / 2, 3, comm, &cfg2, loss2, norm2);
    for (int s = 0; s < STEPS; s++)
        CHECK(rel(loss2[s], loss[s]) < 2e-6 && rel(norm2[s], norm[s]) < 2e-6,
              "step %d accumulated: loss %.9g norm %.9g, one batch: %.9g %.9g", s, loss2[s], norm2[s], loss[s], norm[s]);
    if (e) check_full_roundtrip(e);
    if (e2) check_full_roundtrip(e2);
    zinf_engine_destroy(e);
    zinf_engine_destroy(e2);
    zinf_config_free(&cfg);
    zinf_config_free(&cfg2);
    zinf_comm_destroy(comm);
    return check_exit("test_engine_torch");
}
