// The engine's step logic through the public API, on a small GPT with random data:
// - fp16: a forced overflow (loss scale 2^32) skips the step, leaves the weights and
//   the optimizer alone and halves the scale (hysteresis 1);
// - clipping: the reported norm is the norm of the full gradients get_full returns
//   (one of them set by hand after the backward), and the first AdamW step from them,
//   clipped as DeepSpeed clips, is what a direct computation in double gives;
// - the trace: a stage-3 run whose module order changes (an evaluation forward before
//   the training forward in steps 4-6) trains exactly as stage 0 does (whose lookups
//   read their rows ahead of the embedding's update), on GPT-2 and on a tied Llama,
//   the Llama also with two micro-batches a step (fp32 gradients), and says that
//   execution departed from its trace once per change;
// - a state set between backward and step (the NVMe tier has started reading the
//   next update's first sub-groups by then) is the one the step uses: optimizer on
//   NVMe gives the device tier's weights;
// - a gradient set right after a step, before the next forward (at stage 0 before the
//   embedding's deferred update has run, with fp32 gradients), trains as at stage 3;
// - checkpoints only between steps, and a saved state loads back whole;
// - held gradients (bf16 on one rank with the optimizer on the device: the step reads
//   the backward's own) read back, set by hand, and added to by a second backward
//   before the step as stage 3's fp32 ones, the weights the same bits;
// - stage 1 over 2 micro-batches refuses a step after the first backward alone;
// - stage 2 with the optimizer on cpu, on 1 rank and on 2 (mpirun; the test starts
//   itself), accumulating 2 micro-batches: the step returns before its update runs (the
//   first step reports no update time), a forward right after a step and every step's
//   loss are those of the optimizer on the device bit for bit, and a checkpoint saved
//   right after a step holds the updated weights;
// - zinf_engine_plan of a made engine is its memory and fits; one byte short of the
//   device's peak or the pinned bytes it does not; bad arguments are named.
// timeout: 10 san=10 cuda-emu=35 san-cuda-emu=90
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine_test.h"

enum { B = 2, T = 16, V = 64 };

// An engine taking steps of `micro` micro-batches of B sequences of a tiny GPT-2 (tied,
// learned positions) or with llama a tiny tied Llama (grouped heads): the lookup reads
// two tables or one.
static zinf_engine *make_model(zinf_comm *comm, zinf_config *cfg, int micro, bool llama, const char *extra) {
    char json[2048];
    snprintf(json, sizeof json,
             "{\"train_batch_size\": %d, \"train_micro_batch_size_per_gpu\": %d, \"seed\": 7,"
             " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 1e-2, \"weight_decay\": 0.1}},"
             " \"model\": {%s\"n_layer\": 2, \"n_head\": 2, \"n_embd\": 32, \"vocab_size\": %d, \"block_size\": %d},"
             " \"device\": {\"backend\": \"%s\"}%s}",
             micro * B, B,
             llama ? "\"arch\": \"llama\", \"n_kv_head\": 1, \"intermediate_size\": 64, \"tie_word_embeddings\": true, "
                   : "",
             V, T, getenv("ZINF_TEST_BACKEND") ? getenv("ZINF_TEST_BACKEND") : "host", extra);
    zinf_engine *e = NULL;
    CHECK(zinf_config_parse(cfg, json, "test config", &(zinf_config_options){.world_size = 1}) == ZINF_OK, "%s",
          zinf_last_error());
    CHECK(zinf_engine_create(&e, cfg, comm) == ZINF_OK, "create: %s", zinf_last_error());
    return e;
}

static zinf_engine *make_accumulating(zinf_comm *comm, zinf_config *cfg, int micro, const char *extra) {
    return make_model(comm, cfg, micro, false, extra);
}

static zinf_engine *make(zinf_comm *comm, zinf_config *cfg, const char *extra) {
    return make_model(comm, cfg, 1, false, extra);
}

static void batch(int step, int32_t *in, int32_t *tg) {
    for (int i = 0; i < B * T; i++) {
        in[i] = (step * 7 + i * 13) % V;
        tg[i] = (step * 5 + i * 3 + 1) % V;
    }
}

static bool fwd_bwd(zinf_engine *e, int step) {
    int32_t in[B * T], tg[B * T];
    double loss;
    batch(step, in, tg);
    bool ok = zinf_engine_forward(e, in, tg, B, &loss) == ZINF_OK && zinf_engine_backward(e) == ZINF_OK;
    CHECK(ok, "forward/backward: %s", zinf_last_error());
    return ok;
}

static void test_fp16_overflow(zinf_comm *comm) {
    zinf_config cfg;
    zinf_engine *e =
        make(comm, &cfg, ", \"fp16\": {\"enabled\": true, \"initial_scale_power\": 32, \"hysteresis\": 1}");
    if (!e || !fwd_bwd(e, 0)) goto out;
    size_t n;
    float *before = engine_all_of(e, ZINF_STATE_PARAM, &n);
    zinf_step_info si;
    CHECK(zinf_engine_step(e, &si) == ZINF_OK, "%s", zinf_last_error());
    CHECK(si.skipped && si.loss_scale == 0x1p32, "skipped %d at scale %g", si.skipped, si.loss_scale);
    CHECK(zinf_engine_loss_scale(e) == 0x1p31, "scale after the overflow: %g", zinf_engine_loss_scale(e));
    float *after = engine_all_of(e, ZINF_STATE_PARAM, &n), *m = engine_all_of(e, ZINF_STATE_EXP_AVG, &n);
    CHECK(memcmp(before, after, n * sizeof *after) == 0, "a skipped step changed the weights");
    bool zero = true;
    for (size_t i = 0; i < n; i++)
        zero = zero && m[i] == 0;
    CHECK(zero, "a skipped step changed exp_avg");
    free(before), free(after), free(m);
    // The scale falls until the gradients fit in fp16; then steps apply.
    int skipped = 1;
    for (int s = 1; s < 40 && si.skipped; s++) {
        if (!fwd_bwd(e, s)) break;
        CHECK(zinf_engine_step(e, &si) == ZINF_OK, "%s", zinf_last_error());
        skipped += si.skipped;
    }
    CHECK(!si.skipped && si.loss_scale == ldexp(1, 32 - skipped) && isfinite(si.loss),
          "after %d skips: scale %g, loss %g", skipped, si.loss_scale, si.loss);
    printf("fp16: %d steps skipped from 2^32 down to a scale of %g\n", skipped, si.loss_scale);
out:
    zinf_engine_destroy(e);
    zinf_config_free(&cfg);
}

// Stage 1 reduces the gradients it summed in the step's last backward: a step before
// that is refused and changes nothing; after it the step runs.
static void test_stage1_step_early(zinf_comm *comm) {
    zinf_config cfg;
    zinf_engine *e = make_accumulating(comm, &cfg, 2, ", \"zero_optimization\": {\"stage\": 1}");
    zinf_step_info si;
    if (!e || !fwd_bwd(e, 0)) goto out;
    CHECK(zinf_engine_step(e, &si) == ZINF_ERR_INVAL, "a step after 1 of 2 backward passes ran");
    CHECK_CONTAINS(zinf_last_error(), "after 1 of gradient_accumulation_steps (2) backward passes");
    if (!fwd_bwd(e, 1)) goto out;
    CHECK(zinf_engine_step(e, &si) == ZINF_OK && !si.skipped && isfinite(si.grad_norm) && si.grad_norm > 0,
          "the step after both: %s", zinf_last_error());
out:
    zinf_engine_destroy(e);
    zinf_config_free(&cfg);
}

static void test_bf16_nan_skips(zinf_comm *comm) {
    zinf_config cfg;
    zinf_engine *e = make(comm, &cfg, ", \"bf16\": {\"enabled\": true}");
    float nan[32];
    for (int i = 0; i < 32; i++)
        nan[i] = NAN;
    CHECK(e && zinf_engine_set_full(e, "ln_f.bias", ZINF_STATE_PARAM, nan) == ZINF_OK, "%s", zinf_last_error());
    if (!e || !fwd_bwd(e, 0)) goto out;
    size_t n;
    float *before = engine_all_of(e, ZINF_STATE_PARAM, &n);
    zinf_step_info si;
    CHECK(zinf_engine_step(e, &si) == ZINF_OK, "%s", zinf_last_error());
    CHECK(si.skipped && isnan(si.loss) && si.loss_scale == 1, "skipped %d, loss %g", si.skipped, si.loss);
    float *after = engine_all_of(e, ZINF_STATE_PARAM, &n);
    CHECK(memcmp(before, after, n * sizeof *after) == 0, "a NaN step changed the weights");
    free(before), free(after);
out:
    zinf_engine_destroy(e);
    zinf_config_free(&cfg);
}

// tier: where the optimizer lives ("none", "cpu"), so the gradients are read from the
// device or from the host partition.
static void test_clipping(zinf_comm *comm, const char *tier, int micro, bool set) {
    zinf_config cfg;
    char extra[200];
    snprintf(extra, sizeof extra,
             ", \"gradient_clipping\": 0.05, \"zero_optimization\": {\"stage\": 2, \"offload_optimizer\": "
             "{\"device\": \"%s\"}}",
             tier);
    zinf_engine *e = make_accumulating(comm, &cfg, micro, extra);
    for (int k = 0; k < micro; k++)
        if (!e || !fwd_bwd(e, k)) goto out;
    // Without a set, the norms are those taken as the step's last backward's gradients
    // arrived: on the device held (one micro-batch) or in fp32 (two), or on the host. A
    // gradient set between backward and step is the one the step takes: those norms are
    // not.
    float value[32];
    for (int i = 0; i < 32; i++)
        value[i] = 0.25f;
    CHECK(!set || zinf_engine_set_full(e, "ln_f.bias", ZINF_STATE_GRAD, value) == ZINF_OK, "%s", zinf_last_error());
    size_t n;
    float *w = engine_all_of(e, ZINF_STATE_PARAM, &n), *g = engine_all_of(e, ZINF_STATE_GRAD, &n);
    double sumsq = 0;
    for (size_t i = 0; i < n; i++)
        sumsq += (double)g[i] * g[i];
    double norm = sqrt(sumsq), coef = 0.05 / (norm + 1e-6);
    zinf_step_info si;
    CHECK(zinf_engine_step(e, &si) == ZINF_OK, "%s", zinf_last_error());
    // Each is summed in fp64: a few units in the last place apart.
    CHECK(fabs(si.grad_norm - norm) <= 1e-12 * norm, "norm %.17g, direct %.17g", si.grad_norm, norm);
    CHECK(coef < 1, "the test means to clip: norm %g", norm);
    float *after = engine_all_of(e, ZINF_STATE_PARAM, &n);
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        // AdamW's first step: m = 0.1 gc, v = 0.001 gc^2, both bias-corrected back to gc, gc^2.
        double gc = g[i] * coef, want = w[i] * (1 - 1e-2 * 0.1) - 1e-2 * gc / (fabs(gc) + 1e-8);
        worst = fmax(worst, fabs(after[i] - want));
    }
    CHECK(worst <= 1e-6, "clipped step off by %.3g", worst);
    printf("clipping (optimizer tier %s, %d micro-batch%s, %s): norm %.6g, coefficient %.6g, step within %.3g of "
           "the direct computation\n",
           tier, micro, micro > 1 ? "es" : "", set ? "a gradient set" : "as the backward left them", norm, coef, worst);
    free(w), free(g), free(after);
out:
    zinf_engine_destroy(e);
    zinf_config_free(&cfg);
}

// Two steps with exp_avg of ln_f.bias set after the first backward, from tier `tier`
// (NVMe under dir); every weight after them in w (n of them).
static float *set_late(zinf_comm *comm, const char *tier, const char *dir, size_t *n) {
    zinf_config cfg;
    char extra[400];
    snprintf(extra, sizeof extra,
             ", \"zero_optimization\": {\"stage\": 3, \"offload_optimizer\": {\"device\": \"%s\", "
             "\"nvme_path\": \"%s\"}}",
             tier, dir);
    zinf_engine *e = make(comm, &cfg, extra);
    float *w = NULL, m[32];
    for (int i = 0; i < 32; i++)
        m[i] = 0.5f - 0.03f * (float)i;
    zinf_step_info si;
    for (int s = 0; e && s < 2; s++) {
        if (!fwd_bwd(e, s)) break;
        CHECK(s || zinf_engine_set_full(e, "ln_f.bias", ZINF_STATE_EXP_AVG, m) == ZINF_OK, "%s", zinf_last_error());
        CHECK(zinf_engine_step(e, &si) == ZINF_OK, "%s", zinf_last_error());
    }
    if (e) w = engine_all_of(e, ZINF_STATE_PARAM, n);
    zinf_engine_destroy(e);
    zinf_config_free(&cfg);
    return w;
}

static void test_state_set_late(zinf_comm *comm) {
    char dir[] = "/tmp/zinf-steps-XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    size_t n = 0, n2 = 0;
    float *want = set_late(comm, "none", dir, &n), *got = set_late(comm, "nvme", dir, &n2);
    CHECK(want && got && n == n2 && memcmp(want, got, n * sizeof *got) == 0,
          "exp_avg set between backward and step: optimizer on nvme trains differently from the device");
    free(want), free(got);
    rmdir(dir);
}

// One bf16 step of `steps` with `backwards` backward passes before each, from a stage-0
// engine (one rank, optimizer on the device: its gradients held for the step) or a
// stage-3 one (fp32 gradients); the weights after, and after the first backward its
// gradients, memory and (with set) a gradient set by hand.
static float *held_run(zinf_comm *comm, int stage, int backwards, bool set, float **grads, size_t *n,
                       zinf_engine_memory *mem) {
    zinf_config cfg;
    char extra[160];
    snprintf(extra, sizeof extra,
             ", \"bf16\": {\"enabled\": true}, \"gradient_clipping\": 0.05, \"zero_optimization\": {\"stage\": %d}",
             stage);
    zinf_engine *e = make(comm, &cfg, extra);
    float *w = NULL;
    *grads = NULL;
    if (!e) goto out;
    zinf_engine_memory_get(e, mem);
    for (int s = 0; s < 2; s++) {
        for (int k = 0; k < backwards; k++) {
            if (!fwd_bwd(e, 2 * s + k)) goto out;
            if (s || k) continue;
            *grads = engine_all_of(e, ZINF_STATE_GRAD, n);
            if (!set) continue;
            float half[32];
            for (int i = 0; i < 32; i++)
                half[i] = 0.5f + (float)i / 1024; // not bf16 values: kept in fp32
            CHECK(zinf_engine_set_full(e, "ln_f.bias", ZINF_STATE_GRAD, half) == ZINF_OK, "%s", zinf_last_error());
        }
        zinf_step_info si;
        CHECK(zinf_engine_step(e, &si) == ZINF_OK, "%s", zinf_last_error());
    }
    w = engine_all_of(e, ZINF_STATE_PARAM, n);
out:
    zinf_engine_destroy(e);
    zinf_config_free(&cfg);
    return w;
}

// Held gradients are what fp32 ones would be: read back, set by hand, added to by a
// second backward before the step, each step's weights those of stage 3 bit for bit.
static void test_held_gradients(zinf_comm *comm) {
    for (int c = 0; c < 3; c++) {
        int backwards = c == 2 ? 2 : 1;
        bool set = c == 1;
        size_t n0 = 0, n3 = 0;
        float *g0, *g3;
        zinf_engine_memory m0, m3;
        float *w0 = held_run(comm, 0, backwards, set, &g0, &n0, &m0);
        float *w3 = held_run(comm, 3, backwards, set, &g3, &n3, &m3);
        CHECK(m0.grads32 == 0 && m3.grads32 > 0, "fp32 gradients: %lld bytes held, %lld at stage 3",
              (long long)m0.grads32, (long long)m3.grads32);
        CHECK(g0 && g3 && n0 == n3 && memcmp(g0, g3, n0 * sizeof *g0) == 0,
              "held gradients read back differ from stage 3's fp32 ones");
        CHECK(w0 && w3 && n0 == n3 && memcmp(w0, w3, n0 * sizeof *w0) == 0, "%s: the weights differ from stage 3's",
              c == 0 ? "held"
              : set  ? "a gradient set"
                     : "two backwards");
        free(g0), free(g3), free(w0), free(w3);
    }
    printf("held gradients: read back, set by hand and added to by a second backward as stage 3's fp32 ones\n");
}

static int departures;
static void count_departures(zinf_log_level level, int rank, const char *msg, void *user) {
    (void)level, (void)rank, (void)user;
    if (strstr(msg, "departed from the recorded module trace")) departures++;
}

// 8 steps of `micro` micro-batches; in steps 4-6 an evaluation forward comes before the
// training forward.
static void run_trace(zinf_engine *e, int micro, double *loss, char digest[17]) {
    for (int s = 0; s < 8; s++) {
        if (s >= 3 && s < 6) {
            int32_t in[B * T], tg[B * T];
            double l;
            batch(100 + s, in, tg);
            CHECK(zinf_engine_forward(e, in, tg, B, &l) == ZINF_OK, "%s", zinf_last_error());
        }
        for (int k = 0; k < micro; k++)
            if (!fwd_bwd(e, micro * s + k)) return;
        zinf_step_info si;
        CHECK(zinf_engine_step(e, &si) == ZINF_OK, "%s", zinf_last_error());
        loss[s] = si.loss;
    }
    CHECK(zinf_engine_weights_digest(e, digest) == ZINF_OK, "%s", zinf_last_error());
}

// Stage 0 (the optimizer on the device; with micro 1 its gradients held, with 2 in fp32)
// against stage 3.
static void test_trace_change(zinf_comm *comm, bool llama, int micro) {
    zinf_config c0, c3;
    double l0[8] = {0}, l3[8] = {0};
    char d0[17] = "", d3[17] = "";
    departures = 0;
    zinf_engine *e0 = make_model(comm, &c0, micro, llama, ", \"bf16\": {\"enabled\": true}");
    // Tiny prefetch and reuse budgets, so gathers and releases happen all along the trace.
    zinf_engine *e3 = make_model(comm, &c3, micro, llama,
                                 ", \"bf16\": {\"enabled\": true}, \"zero_optimization\": {\"stage\": 3,"
                                 " \"stage3_param_persistence_threshold\": 0, \"stage3_prefetch_bucket_size\": 5000,"
                                 " \"stage3_max_reuse_distance\": 0}");
    if (e0) run_trace(e0, micro, l0, d0);
    zinf_log_set_callback(count_departures, NULL);
    if (e3) run_trace(e3, micro, l3, d3);
    zinf_log_set_callback(NULL, NULL);
    CHECK(memcmp(l0, l3, sizeof l0) == 0 && strcmp(d0, d3) == 0,
          "%s, %d micro-batches: stage 3 %s, stage 0 %s; last losses %.9g %.9g", llama ? "llama" : "gpt2", micro, d3,
          d0, l3[7], l0[7]);
    CHECK(departures == 2, "%d departures logged; the order changed twice (steps 4 and 7)", departures);
    zinf_engine_destroy(e0);
    zinf_engine_destroy(e3);
    zinf_config_free(&c0);
    zinf_config_free(&c3);
}

// Two bf16 steps of two micro-batches from a tiny tied Llama at `stage`, a gradient set
// between them (before the next forward, so before the deferred embedding's update at
// stage 0 has run: the set must wait for it); the weights after in w (n of them).
static float *set_after_step(zinf_comm *comm, int stage, size_t *n) {
    zinf_config cfg;
    char extra[128];
    snprintf(extra, sizeof extra, ", \"bf16\": {\"enabled\": true}, \"zero_optimization\": {\"stage\": %d}", stage);
    zinf_engine *e = make_model(comm, &cfg, 2, true, extra);
    float *w = NULL, g[32];
    for (int i = 0; i < 32; i++)
        g[i] = 0.01f * (float)(i - 16);
    zinf_step_info si;
    for (int s = 0; e && s < 2; s++) {
        if (!fwd_bwd(e, 2 * s) || !fwd_bwd(e, 2 * s + 1)) break;
        CHECK(zinf_engine_step(e, &si) == ZINF_OK, "%s", zinf_last_error());
        CHECK(s || zinf_engine_set_full(e, "model.norm.weight", ZINF_STATE_GRAD, g) == ZINF_OK, "%s",
              zinf_last_error());
    }
    if (e) w = engine_all_of(e, ZINF_STATE_PARAM, n);
    zinf_engine_destroy(e);
    zinf_config_free(&cfg);
    return w;
}

static void test_set_after_step(zinf_comm *comm) {
    size_t n0 = 0, n3 = 0;
    float *w0 = set_after_step(comm, 0, &n0), *w3 = set_after_step(comm, 3, &n3);
    CHECK(w0 && w3 && n0 == n3 && memcmp(w0, w3, n0 * sizeof *w0) == 0,
          "a gradient set right after a step: stage 0 (its embedding's update deferred) trains differently from "
          "stage 3");
    free(w0), free(w3);
}

// Checkpoints through the API: only between steps (a save or load in the middle of
// accumulating micro-batches is refused and changes nothing), and a saved state
// loads into a fresh engine as it was, moments included.
static void test_checkpoint_api(zinf_comm *comm) {
    char root[] = "/tmp/zinf-ckpt-XXXXXX";
    CHECK(mkdtemp(root) != NULL, "mkdtemp");
    zinf_config cfg;
    zinf_engine *e = make(comm, &cfg, "");
    zinf_step_info si;
    CHECK(fwd_bwd(e, 0) && zinf_engine_step(e, &si) == ZINF_OK, "step: %s", zinf_last_error());
    CHECK(fwd_bwd(e, 1), "forward/backward");
    CHECK(zinf_engine_save(e, root, 0, 0, 7) == ZINF_ERR_INVAL, "a save between micro-batches passed");
    CHECK_CONTAINS(zinf_last_error(), "only between steps");
    zinf_ckpt_resume r;
    CHECK(zinf_engine_load(e, root, &r) == ZINF_ERR_INVAL, "a load between micro-batches passed");
    CHECK(zinf_engine_step(e, &si) == ZINF_OK, "step: %s", zinf_last_error());
    CHECK(zinf_engine_save(e, root, 0, 8, 7) == ZINF_OK, "save: %s", zinf_last_error());
    size_t n, n2;
    float *m1 = engine_all_of(e, ZINF_STATE_EXP_AVG_SQ, &n);
    char d1[17], d2[17];
    CHECK(zinf_engine_weights_digest(e, d1) == ZINF_OK, "digest");
    zinf_engine_destroy(e);
    zinf_config_free(&cfg);
    e = make(comm, &cfg, "");
    CHECK(zinf_engine_load(e, root, &r) == ZINF_OK, "load: %s", zinf_last_error());
    CHECK(r.step == 2 && r.data_position == 8 && r.seed == 7 && r.world_size == 1, "resume: step %lld position %lld",
          (long long)r.step, (long long)r.data_position);
    float *m2 = engine_all_of(e, ZINF_STATE_EXP_AVG_SQ, &n2);
    CHECK(zinf_engine_weights_digest(e, d2) == ZINF_OK && strcmp(d1, d2) == 0, "weights %s, saved %s", d2, d1);
    CHECK(n == n2 && memcmp(m1, m2, n * sizeof *m1) == 0, "exp_avg_sq differs after a load");
    free(m1), free(m2);
    zinf_engine_destroy(e);
    zinf_config_free(&cfg);
    char cmd[64];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    CHECK(system(cmd) == 0, "%s", cmd);
}

// ---- the update under the next forward (stages 1-2) ----

typedef struct bg_result {
    double loss[3], eval[2]; // per step; forwards right after steps 2 and 3
    double optim_s[3], wait_optim_s[3];
    char digest[17];
} bg_result;

// Stage 2 on comm's ranks with the optimizer on `tier`, 2 micro-batches per step. A
// vocabulary of 2048 makes the embedding, the first module updated and the first used,
// large enough that the forward after a step reaches it well before its update ends;
// sub-groups of 20000 elements cut the update into many, so the forward follows it
// module by module.
static zinf_engine *make_bg(zinf_comm *comm, zinf_config *cfg, const char *tier) {
    int W = zinf_comm_size(comm);
    char json[2048];
    snprintf(
        json, sizeof json,
        "{\"train_batch_size\": %d, \"train_micro_batch_size_per_gpu\": %d, \"seed\": 7, \"bf16\": {\"enabled\": true},"
        " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 1e-2, \"weight_decay\": 0.1}},"
        " \"zero_optimization\": {\"stage\": 2, \"sub_group_size\": 20000, \"offload_optimizer\": {\"device\": "
        "\"%s\"}},"
        " \"model\": {\"n_layer\": 2, \"n_head\": 2, \"n_embd\": 64, \"vocab_size\": 2048, \"block_size\": %d},"
        " \"device\": {\"backend\": \"%s\"}}",
        2 * B * W, B, tier, T, getenv("ZINF_TEST_BACKEND") ? getenv("ZINF_TEST_BACKEND") : "host");
    zinf_engine *e = NULL;
    CHECK(zinf_config_parse(cfg, json, "test config", &(zinf_config_options){.world_size = W}) == ZINF_OK, "%s",
          zinf_last_error());
    CHECK(zinf_engine_create(&e, cfg, comm) == ZINF_OK, "create: %s", zinf_last_error());
    return e;
}

static bool eval(zinf_engine *e, int step, double *loss) {
    int32_t in[B * T], tg[B * T];
    batch(step, in, tg);
    bool ok = zinf_engine_forward(e, in, tg, B, loss) == ZINF_OK;
    CHECK(ok, "forward: %s", zinf_last_error());
    return ok;
}

// Three steps; a forward right after the second; after the third a checkpoint under
// root (when given), then a forward.
static void bg_run(zinf_comm *comm, const char *tier, const char *root, bg_result *out) {
    zinf_config cfg;
    zinf_engine *e = make_bg(comm, &cfg, tier);
    int rank = zinf_comm_rank(comm);
    memset(out, 0, sizeof *out);
    for (int s = 0; e && s < 3; s++) {
        if (!fwd_bwd(e, 10 * s + 2 * rank) || !fwd_bwd(e, 10 * s + 2 * rank + 1)) goto out;
        zinf_step_info si;
        CHECK(zinf_engine_step(e, &si) == ZINF_OK, "%s", zinf_last_error());
        out->loss[s] = si.loss, out->optim_s[s] = si.optim_s, out->wait_optim_s[s] = si.wait_optim_s;
        if (s == 1 && !eval(e, 100 + rank, &out->eval[0])) goto out;
    }
    CHECK(!e || !root || zinf_engine_save(e, root, 0, 0, 7) == ZINF_OK, "save: %s", zinf_last_error());
    if (e && eval(e, 200 + rank, &out->eval[1]))
        CHECK(zinf_engine_weights_digest(e, out->digest) == ZINF_OK, "%s", zinf_last_error());
out:
    zinf_engine_destroy(e);
    zinf_config_free(&cfg);
}

static void test_background_update(zinf_comm *comm, const char *root) {
    int W = zinf_comm_size(comm), rank = zinf_comm_rank(comm), failures = check_failures;
    bg_result dev, cpu;
    bg_run(comm, "none", NULL, &dev);
    bg_run(comm, "cpu", root, &cpu);
    // The first step hands its update to the optimizer thread and returns: it has no
    // update of its own to report (one inside the step would be reported by it). The
    // second reports the first's, which ran under its forward.
    CHECK(cpu.optim_s[0] == 0 && cpu.optim_s[1] > 0 && cpu.optim_s[2] > 0,
          "%d rank(s): optim_s per step %g %g %g: the update ran inside the step", W, cpu.optim_s[0], cpu.optim_s[1],
          cpu.optim_s[2]);
    // Both updates run under the next forward, whose waits for them are times.
    CHECK(dev.wait_optim_s[1] >= 0 && cpu.wait_optim_s[1] >= 0, "wait_optim_s: device %g, cpu %g", dev.wait_optim_s[1],
          cpu.wait_optim_s[1]);
    CHECK(memcmp(dev.loss, cpu.loss, sizeof dev.loss) == 0,
          "%d rank(s): step losses on cpu %.9g %.9g %.9g, on the device %.9g %.9g %.9g", W, cpu.loss[0], cpu.loss[1],
          cpu.loss[2], dev.loss[0], dev.loss[1], dev.loss[2]);
    CHECK(dev.eval[0] == cpu.eval[0] && dev.eval[1] == cpu.eval[1] && strcmp(dev.digest, cpu.digest) == 0,
          "%d rank(s): forward right after a step on cpu %.9g, %.9g (weights %s), on the device %.9g, %.9g (%s)", W,
          cpu.eval[0], cpu.eval[1], cpu.digest, dev.eval[0], dev.eval[1], dev.digest);
    // The checkpoint saved right after the third step holds its update: loaded with the
    // optimizer on the device, the same weights and the same forward.
    zinf_config cfg;
    zinf_engine *e = make_bg(comm, &cfg, "none");
    zinf_ckpt_resume r;
    double loss = 0;
    char d[17] = "";
    CHECK(e && zinf_engine_load(e, root, &r) == ZINF_OK, "load: %s", zinf_last_error());
    CHECK(e && eval(e, 200 + rank, &loss) && zinf_engine_weights_digest(e, d) == ZINF_OK, "%s", zinf_last_error());
    CHECK(loss == dev.eval[1] && strcmp(d, dev.digest) == 0,
          "%d rank(s): saved right after a step: forward %.9g, weights %s; the device run's %.9g, %s", W, loss, d,
          dev.eval[1], dev.digest);
    zinf_engine_destroy(e);
    zinf_config_free(&cfg);
    if (rank == 0 && check_failures == failures)
        printf("stage 2, optimizer on cpu, %d rank(s): the update ran under the next forward (%.4f s, the forward "
               "waited %.4f s for it); losses, a forward right after a step and a checkpoint saved right after a step "
               "are the device's bit for bit\n",
               W, cpu.optim_s[1], cpu.wait_optim_s[1]);
}

// The plan of a made engine is its memory, and bad arguments are named.
// super_offload off: its room is chosen from the budgets left, so a budget a byte short
// would be met with less of it.
static void test_plan(zinf_comm *comm) {
    zinf_config cfg;
    zinf_engine *e = make(comm, &cfg,
                          ", \"zero_optimization\": {\"stage\": 3, \"offload_optimizer\": {\"device\": \"cpu\", "
                          "\"super_offload\": false}}");
    zinf_engine_memory m;
    zinf_engine_memory_get(e, &m);
    zinf_plan p;
    zinf_plan_target t;
    CHECK(zinf_engine_target(&cfg, comm, &t) == ZINF_OK, "target: %s", zinf_last_error());
    CHECK(zinf_engine_plan(&cfg, &t, &p) == ZINF_OK, "plan: %s", zinf_last_error());
    CHECK(t.world == 1 && !t.nccl && p.mem.device_capacity == m.device_capacity, "target: world %d, capacity %lld",
          t.world, (long long)p.mem.device_capacity);
    CHECK(p.fit == ZINF_PLAN_FITS && zinf_plan_verdict(&p) == ZINF_OK, "the made engine's plan does not fit: %s",
          zinf_last_error());
    CHECK(p.mem.device_in_use == m.device_in_use && p.mem.pinned == m.pinned && p.mem.host_total == m.host_total &&
              p.mem.partition_numel == m.partition_numel && p.device_peak >= p.mem.device_in_use,
          "plan %lld/%lld/%lld vs engine %lld/%lld/%lld", (long long)p.mem.device_in_use, (long long)p.mem.pinned,
          (long long)p.mem.host_total, (long long)m.device_in_use, (long long)m.pinned, (long long)m.host_total);
    // One byte short of the device's peak or of the pinned bytes: refused, naming the budget.
    zinf_config short_cfg = cfg;
    short_cfg.device.memory_limit = p.device_peak - 1;
    // The output layer at once, as the plan took it: on a device this small the chooser
    // would compute it in chunks, which need less.
    short_cfg.memory.head_chunk_tokens = B * T;
    zinf_plan q;
    CHECK(zinf_engine_target(&short_cfg, comm, &t) == ZINF_OK && zinf_engine_plan(&short_cfg, &t, &q) == ZINF_OK,
          "plan: %s", zinf_last_error());
    CHECK(q.fit == ZINF_PLAN_EXCEEDS && zinf_plan_verdict(&q) == ZINF_ERR_NOMEM, "a device 1 byte short fits");
    CHECK_CONTAINS(zinf_last_error(), "the device's peak");
    short_cfg = cfg;
    short_cfg.device.pinned_memory_limit = p.mem.pinned - 1;
    CHECK(zinf_engine_target(&short_cfg, comm, &t) == ZINF_OK && zinf_engine_plan(&short_cfg, &t, &q) == ZINF_OK,
          "plan: %s", zinf_last_error());
    CHECK(q.fit == ZINF_PLAN_EXCEEDS && zinf_plan_verdict(&q) == ZINF_ERR_NOMEM, "a pinned budget 1 byte short fits");
    CHECK_CONTAINS(zinf_last_error(), "pinned host memory");
    CHECK(zinf_engine_plan(NULL, &t, &p) == ZINF_ERR_INVAL, "a NULL config was planned");
    t.world = 0;
    CHECK(zinf_engine_plan(&cfg, &t, &p) == ZINF_ERR_INVAL, "world 0 was planned");
    CHECK_CONTAINS(zinf_last_error(), "world 0");
    zinf_engine_destroy(e);
    zinf_config_free(&cfg);
}

// Under mpirun: the background update on every rank, the checkpoint under root.
static int child(const char *root) {
    zinf_comm *comm;
    CHECK(zinf_comm_create(&comm, ZINF_COMM_MPI, 0) == ZINF_OK, "%s", zinf_last_error());
    test_background_update(comm, root);
    zinf_comm_destroy(comm);
    return check_exit("test_engine_steps (mpi)");
}

static char *tmpdir(char *buf, size_t n) {
    snprintf(buf, n, "/tmp/zinf-bg-XXXXXX");
    CHECK(mkdtemp(buf) != NULL, "mkdtemp");
    return buf;
}

static void rm_tree(const char *dir) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0, "%s", cmd);
}

// The background update on 2 ranks: this program again under mpirun.
static void background_2_ranks(void) {
    char root[64], args[128];
    snprintf(args, sizeof args, "bg '%s'", tmpdir(root, sizeof root));
    engine_rerun_2_ranks("test_engine_steps", args, "the background update");
    rm_tree(root);
}

int main(int argc, char **argv) {
    if (argc > 2 && strcmp(argv[1], "bg") == 0) return child(argv[2]);
    setvbuf(stdout, NULL, _IOLBF, 0); // in order with the ranks' lines in the log
    zinf_comm *comm;
    CHECK(zinf_comm_create(&comm, ZINF_COMM_SINGLE, 0) == ZINF_OK, "%s", zinf_last_error());
    char root[64];
    test_background_update(comm, tmpdir(root, sizeof root));
    rm_tree(root);
    background_2_ranks();
    test_fp16_overflow(comm);
    test_bf16_nan_skips(comm);
    test_stage1_step_early(comm);
    for (int c = 0; c < 6; c++)
        test_clipping(comm, c % 2 ? "cpu" : "none", c < 4 ? 1 + c / 2 : 1, c >= 4);
    test_held_gradients(comm);
    test_trace_change(comm, false, 1);
    test_trace_change(comm, true, 1);
    test_trace_change(comm, true, 2);
    test_state_set_late(comm);
    test_set_after_step(comm);
    test_checkpoint_api(comm);
    test_plan(comm);
    zinf_comm_destroy(comm);
    return check_exit("test_engine_steps");
}
