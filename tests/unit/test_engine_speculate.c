// The update under the backward (offload_optimizer cpu or nvme, super_offload):
// sub-groups are updated as the step's last backward makes their gradients final, on
// the guess that the step neither clips nor overflows, and updated again from the
// states they left when it does. At stages 1, 2 and 3 with the optimizer on cpu and
// at 1 and 3 on nvme, on 1 rank and on 2 (mpirun; the test starts itself; nvme at
// stage 3 only), and with offload_optimizer.ratio 0.5 at stages 1-3 on cpu and 3 on
// nvme (half the sub-groups updated on the device in the step, the rest on the tier),
// eight steps of 2 micro-batches end with the weights, both moments and every step's
// loss of the optimizer on the device at stage 0 (stage 1 on 2 ranks: at stage 1,
// whose sums take each rank's micro-batches first), bit for bit, with clipping never,
// always and sometimes (a threshold the device run crosses after a step under it), and
// under fp16 with a loss scale that overflows now and then; the step says how many
// sub-groups went under the backward and how many were redone, and both are what the
// clipping pattern calls for. After the steps no gradient reads back (offloaded, the
// host partition keeps it for the next backward to overwrite), and one parameter's
// gradient set reads back with every other zero. In the reduced matrix (ASan, the
// emulation) only the patterns that both keep and redo guesses run (sometimes, and
// fp16), each stage, tier and ratio on 1 rank or on 2.
// timeout: 60 san=90 cuda-emu=200 san-cuda-emu=300
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine_test.h"

enum { B = 2, T = 16, V = 64, STEPS = 8, GA = 2 };

typedef struct run_result {
    double loss[STEPS], norm[STEPS];
    bool clipped[STEPS], skipped[STEPS];
    int speculated[STEPS], rolled_back[STEPS];
    float *state[3]; // param, exp_avg, exp_avg_sq of every parameter (rank 0)
    size_t n;
} run_result;

// The optimizer's tier: none (on the device), cpu or nvme (in nvme_dir).
static const char *const tiers[] = {"none", "cpu", "nvme"};
static char nvme_dir[] = "/var/tmp/zinf-speculate-XXXXXX";

// ratio: offload_optimizer.ratio (1: the whole optimizer on the tier).
static zinf_engine *make(zinf_comm *comm, zinf_config *cfg, int stage, int tier, double ratio, double clip, bool fp16) {
    int W = zinf_comm_size(comm);
    char json[2048];
    snprintf(json, sizeof json,
             "{\"train_batch_size\": %d, \"train_micro_batch_size_per_gpu\": %d, \"seed\": 7,"
             " \"gradient_clipping\": %.17g, %s"
             " \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 1e-2, \"weight_decay\": 0.1}},"
             " \"zero_optimization\": {\"stage\": %d, \"sub_group_size\": 3000, \"reduce_bucket_size\": 4000,"
             " \"offload_optimizer\": {\"device\": \"%s\", \"ratio\": %g%s%s%s}},"
             " \"model\": {\"n_layer\": 2, \"n_head\": 2, \"n_embd\": 32, \"vocab_size\": %d, \"block_size\": %d},"
             " \"device\": {\"backend\": \"%s\"}}",
             GA * B * W, B, clip,
             fp16 ? "\"fp16\": {\"enabled\": true, \"initial_scale_power\": 20, \"loss_scale_window\": 2,"
                    " \"hysteresis\": 1},"
                  : "\"bf16\": {\"enabled\": true},",
             stage, tiers[tier], tier ? ratio : 1, tier == 2 ? ", \"super_offload\": true, \"nvme_path\": \"" : "",
             tier == 2 ? nvme_dir : "", tier == 2 ? "\"" : "", V, T,
             getenv("ZINF_TEST_BACKEND") ? getenv("ZINF_TEST_BACKEND") : "host");
    zinf_engine *e = NULL;
    CHECK(zinf_config_parse(cfg, json, "test config", &(zinf_config_options){.world_size = W}) == ZINF_OK, "%s",
          zinf_last_error());
    CHECK(zinf_engine_create(&e, cfg, comm) == ZINF_OK, "create: %s", zinf_last_error());
    return e;
}

static void batch(int key, int32_t *in, int32_t *tg) {
    for (int i = 0; i < B * T; i++) {
        in[i] = (key * 7 + i * 13) % V;
        tg[i] = (key * 5 + i * 3 + 1) % V;
    }
}

// STEPS steps; between the last backward and the step a pause long enough for the
// optimizer thread to update every final sub-group (each takes microseconds here).
static bool run(zinf_comm *comm, int stage, int tier, double ratio, double clip, bool fp16, run_result *out) {
    zinf_config cfg;
    int rank = zinf_comm_rank(comm);
    memset(out, 0, sizeof *out);
    zinf_engine *e = make(comm, &cfg, stage, tier, ratio, clip, fp16);
    bool ok = e != NULL;
    for (int s = 0; ok && s < STEPS; s++) {
        for (int m = 0; ok && m < GA; m++) {
            int32_t in[B * T], tg[B * T];
            double loss;
            batch(100 * s + 10 * rank + m, in, tg);
            ok = zinf_engine_forward(e, in, tg, B, &loss) == ZINF_OK && zinf_engine_backward(e) == ZINF_OK;
        }
        if (ok && tier) usleep(5 * 1000);
        zinf_step_info si;
        ok = ok && zinf_engine_step(e, &si) == ZINF_OK;
        if (!ok) break;
        out->loss[s] = si.loss, out->norm[s] = si.grad_norm, out->skipped[s] = si.skipped;
        out->clipped[s] = !si.skipped && clip > 0 && (si.grad_norm + 1e-6) / clip > 1;
        out->speculated[s] = si.optim_speculated, out->rolled_back[s] = si.optim_rolled_back;
    }
    CHECK(ok, "stage %d optimizer on %s: %s", stage, tiers[tier], zinf_last_error());
    for (int k = 0; ok && k < 3; k++)
        out->state[k] = engine_all_of(
            e, (zinf_state_kind[]){ZINF_STATE_PARAM, ZINF_STATE_EXP_AVG, ZINF_STATE_EXP_AVG_SQ}[k], &out->n);
    // No gradient since the last step (offloaded, the host partition still holds it,
    // for the next backward to overwrite).
    size_t ng = 0, nonzero = 0;
    float *grad = ok ? engine_all_of(e, ZINF_STATE_GRAD, &ng) : NULL;
    for (size_t i = 0; i < ng; i++)
        nonzero += grad[i] != 0;
    CHECK(nonzero == 0, "stage %d optimizer on %s: %zu gradients after the step", stage, tiers[tier], nonzero);
    free(grad);
    // Setting one parameter's gradient then: it reads back, and every other stays zero
    // (not fp16, whose gradients are not set under a loss scale).
    if (ok && !fp16) {
        const zinf_param_info *first = &zinf_model_module(zinf_engine_model(e), 0)->params[0];
        float *ones = malloc(first->numel * sizeof *ones);
        for (size_t i = 0; i < first->numel; i++)
            ones[i] = 1.0f;
        CHECK(zinf_engine_set_full(e, first->name, ZINF_STATE_GRAD, ones) == ZINF_OK, "%s", zinf_last_error());
        grad = engine_all_of(e, ZINF_STATE_GRAD, &ng);
        size_t wrong = 0;
        for (size_t i = 0; i < ng; i++)
            wrong += grad[i] != (i < first->numel ? 1.0f : 0.0f);
        CHECK(wrong == 0, "stage %d optimizer on %s: %zu gradients wrong after setting %s's", stage, tiers[tier], wrong,
              first->name);
        free(grad), free(ones);
    }
    zinf_engine_destroy(e);
    zinf_config_free(&cfg);
    return ok;
}

static void drop(run_result *r) {
    for (int k = 0; k < 3; k++)
        free(r->state[k]), r->state[k] = NULL;
}

// A step speculates unless the one before clipped or overflowed; the sub-groups it
// updated under its backward are redone when it clips or overflows itself. A step that
// may speculate can still update none: the backward of these tiny models may end
// before the tier's thread takes its first sub-group (seen on a loaded 2-core machine),
// so each such step may count 0, but not all of them. Returns the sub-groups redone in
// all.
static int check_pattern(const run_result *r, const char *what) {
    int redone = 0, guesses = 0, took = 0;
    for (int s = 0; s < STEPS; s++) {
        bool guessed = s == 0 || !(r->clipped[s - 1] || r->skipped[s - 1]), missed = r->clipped[s] || r->skipped[s];
        // Speculated sub-groups are counted in the step whose backward ran them.
        CHECK(guessed || r->speculated[s] == 0,
              "%s: step %d speculated %d sub-groups after a step that clipped or "
              "overflowed",
              what, s + 1, r->speculated[s]);
        guesses += guessed, took += guessed && r->speculated[s] > 0;
        CHECK(r->rolled_back[s] == (guessed && missed ? r->speculated[s] : 0),
              "%s: step %d (clipped %d, skipped %d) redid %d of %d speculated sub-groups", what, s + 1, r->clipped[s],
              r->skipped[s], r->rolled_back[s], r->speculated[s]);
        redone += r->rolled_back[s];
    }
    CHECK(took > 0, "%s: none of the %d steps that could speculate updated a sub-group under its backward", what,
          guesses);
    return redone;
}

// The reduced matrix (ZINF_TEST_MATRIX=reduced: tests/run, under ASan and the emulation).
static bool reduced_matrix(void) {
    const char *matrix = getenv("ZINF_TEST_MATRIX");
    return matrix && strcmp(matrix, "reduced") == 0;
}

static void compare(zinf_comm *comm, const run_result *ref, double clip, bool fp16, const char *mode) {
    int W = zinf_comm_size(comm), rank = zinf_comm_rank(comm);
    // The nvme tier's speculation is the same code at every stage: stages 1 and 3 on
    // 1 rank, 3 on 2 (its stores are stage 3's parameter tier or stages 1-2's store
    // stream, as on cpu).
    // With offload_optimizer.ratio 0.5 the first half of the sub-groups are updated on
    // the device in the step and the rest on the tier, speculating.
    static const struct {
        int stage, tier;
        double ratio;
    } runs[] = {{1, 1, 1},   {2, 1, 1},   {3, 1, 1},   {3, 2, 1}, {1, 1, 0.5},
                {2, 1, 0.5}, {3, 1, 0.5}, {3, 2, 0.5}, {1, 2, 1}};
    for (int r = 0; r < (W == 1 ? 9 : 8); r++) {
        // The reduced matrix takes each run once: on 2 ranks the even ones (stage 1's own
        // reference among them), on 1 the odd ones and the last.
        if (reduced_matrix() && r < 8 && r % 2 == (W == 1 ? 0 : 1)) continue;
        int stage = runs[r].stage, tier = runs[r].tier;
        char what[160];
        snprintf(what, sizeof what, "%s, stage %d, optimizer on %s (ratio %g), %d rank(s)", mode, stage, tiers[tier],
                 runs[r].ratio, W);
        run_result got, own = {0};
        // Stage 1 over several ranks sums each rank's micro-batches first: its own
        // device run is the reference there.
        const run_result *want = ref;
        if (stage == 1 && W > 1) {
            if (!run(comm, 1, 0, 1, clip, fp16, &own)) continue;
            want = &own;
        }
        if (!run(comm, stage, tier, runs[r].ratio, clip, fp16, &got)) {
            drop(&own);
            continue;
        }
        CHECK(memcmp(got.loss, want->loss, sizeof got.loss) == 0, "%s: step losses differ from the device's", what);
        const char *names[] = {"weights", "exp_avg", "exp_avg_sq"};
        for (int k = 0; k < 3; k++)
            CHECK(got.n == want->n && memcmp(got.state[k], want->state[k], got.n * sizeof(float)) == 0,
                  "%s: %s differ from the device's", what, names[k]);
        drop(&own);
        int redone = check_pattern(&got, what), speculated = 0;
        for (int s = 0; s < STEPS; s++)
            speculated += got.speculated[s];
        if (rank == 0)
            printf("%s: %d sub-groups updated under the backward, %d redone; the device's bits\n", what, speculated,
                   redone);
        drop(&got);
    }
}

static void test_modes(zinf_comm *comm) {
    run_result ref;
    // Never and always. The reduced matrix leaves them out: they run no code that
    // "sometimes" and the overflows do not (guesses kept, guesses redone), and with them
    // the test took 250-300 s of the 2-core machine's cores under ASan and the
    // emulation, starving the tests beside it past their limits.
    if (!reduced_matrix()) {
        if (run(comm, 0, 0, 1, 0, false, &ref)) compare(comm, &ref, 0, false, "clipping never");
        drop(&ref);
        if (run(comm, 0, 0, 1, 1e-4, false, &ref)) compare(comm, &ref, 1e-4, false, "clipping always");
        drop(&ref);
    }
    // Sometimes: the first threshold, among the norms of an unclipped run, at which the
    // device run clips right after a step that did not.
    run_result free_run;
    if (!run(comm, 0, 0, 1, 0, false, &free_run)) return;
    double sorted[STEPS];
    memcpy(sorted, free_run.norm, sizeof sorted);
    for (int i = 0; i < STEPS; i++)
        for (int j = i + 1; j < STEPS; j++)
            if (sorted[j] < sorted[i]) {
                double x = sorted[i];
                sorted[i] = sorted[j], sorted[j] = x;
            }
    drop(&free_run);
    bool found = false;
    for (int i = 0; !found && i < STEPS - 1; i++) {
        double clip = 0.5 * (sorted[i] + sorted[i + 1]);
        if (!run(comm, 0, 0, 1, clip, false, &ref)) return;
        for (int s = 1; s < STEPS; s++)
            found |= !ref.clipped[s - 1] && ref.clipped[s];
        if (found) compare(comm, &ref, clip, false, "clipping sometimes");
        drop(&ref);
    }
    CHECK(found, "no clipping threshold gives a clipped step after an unclipped one");
    // fp16: the scale doubles every 2 good steps, until it overflows again.
    if (run(comm, 0, 0, 1, 0, true, &ref)) {
        int skips = 0;
        for (int s = 0; s < STEPS; s++)
            skips += ref.skipped[s] && s > 0 && !ref.skipped[s - 1];
        CHECK(skips > 0, "fp16: no overflow after a good step in %d steps", STEPS);
        compare(comm, &ref, 0, true, "fp16 overflows");
    }
    drop(&ref);
}

// Under mpirun: every mode on 2 ranks.
static int child(void) {
    CHECK(mkdtemp(nvme_dir) != NULL, "mkdtemp %s", nvme_dir);
    zinf_comm *comm;
    CHECK(zinf_comm_create(&comm, ZINF_COMM_MPI, 0) == ZINF_OK, "%s", zinf_last_error());
    test_modes(comm);
    zinf_comm_destroy(comm);
    rmdir(nvme_dir);
    return check_exit("test_engine_speculate (mpi)");
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "ranks") == 0) return child();
    setvbuf(stdout, NULL, _IOLBF, 0);
    CHECK(mkdtemp(nvme_dir) != NULL, "mkdtemp %s", nvme_dir);
    zinf_comm *comm;
    CHECK(zinf_comm_create(&comm, ZINF_COMM_SINGLE, 0) == ZINF_OK, "%s", zinf_last_error());
    test_modes(comm);
    zinf_comm_destroy(comm);
    rmdir(nvme_dir);
    engine_rerun_2_ranks("test_engine_speculate", "ranks", "every mode");
    return check_exit("test_engine_speculate");
}
