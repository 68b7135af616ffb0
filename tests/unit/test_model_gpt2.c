// GPT-2 against Hugging Face's GPT2LMHeadModel in PyTorch (tests/ref/gpt2_ref.py):
// the same safetensors weights, tokens and targets; logits, loss and every parameter's
// gradient compared in fp32 and bf16. Also: the file without the `transformer.`
// prefix and with old mask buffers loads the same; activation checkpointing gives
// the same bits; written weights read back unchanged; wrong files fail by name; a
// plan (no device) has the same modules and schedule and counts to the byte what
// creating the model takes on the device.
// timeout: 10 san=10 cuda-emu=10 san-cuda-emu=30
#include <math.h>

#include "check.h"
#include "model_test.h"

typedef struct fixture {
    uint32_t L, NH, C, V, BS, B, T;
    torch_runs t;
} fixture;

static char dir[512];

static void load_fixture(fixture *fx) {
    char path[600];
    snprintf(path, sizeof path, "%s/gpt2.bin", dir);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "%s: missing; `make tests` generates it with tests/ref/gpt2_ref.py\n", path);
        exit(1);
    }
    char magic[8];
    uint32_t ver;
    fixture_read(f, magic, 8, path), fixture_read(f, &ver, 4, path);
    if (memcmp(magic, "ZINFGPT1", 8) || ver != 1) {
        fprintf(stderr, "%s: not a version 1 GPT-2 fixture\n", path);
        exit(1);
    }
    fixture_read(f, &fx->L, 4 * 7, path);
    torch_runs_read(f, path, (size_t)fx->B * fx->T, fx->V, &fx->t);
    fclose(f);
}

static void free_fixture(fixture *fx) { torch_runs_free(&fx->t); }

// The head in chunks of this many tokens where a test asks: 48 = 20 + 20 + 8.
enum { CHUNK = 20 };

static void gpt2_run_chunked(run *r, const fixture *fx, zinf_dtype dt, bool training, bool ckpt, const char *file,
                             int chunk) {
    zinf_model_params p = {.shape = zinf_model_shape_gpt2((int)fx->L, (int)fx->NH, (int)fx->C, (int)fx->V, (int)fx->BS),
                           .dtype = dt,
                           .batch = (int)fx->B,
                           .seq_len = (int)fx->T,
                           .training = training,
                           .checkpoint_activations = ckpt,
                           .head_chunk = chunk};
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    run_model(r, &p, path, fx->t.tok, fx->t.tgt);
}

static void gpt2_run(run *r, const fixture *fx, zinf_dtype dt, bool training, bool ckpt, const char *file) {
    gpt2_run_chunked(r, fx, dt, training, ckpt, file, 0);
}

// fp32 against torch fp32: within 1e-5 of each tensor's scale. The logits come from an
// inference run (a training forward replaces them by their gradient).
static void test_fp32(const fixture *fx) {
    run inf, tr;
    size_t nl = (size_t)fx->B * fx->T * fx->V;
    gpt2_run(&inf, fx, ZINF_DTYPE_F32, false, false, "gpt2.safetensors");
    gpt2_run(&tr, fx, ZINF_DTYPE_F32, true, false, "gpt2.safetensors");
    check_fp32("gpt2", &inf, &tr, &fx->t, nl);

    // Checkpointing recomputes the same ops in the same order: the same bits.
    run ck;
    gpt2_run(&ck, fx, ZINF_DTYPE_F32, true, true, "gpt2-noprefix.safetensors");
    CHECK(ck.loss == tr.loss, "checkpointed loss %.9g vs %.9g", ck.loss, tr.loss);
    for (int i = 0; i < tr.nmod; i++) {
        size_t n = zinf_model_module(tr.m, i)->numel * 4;
        if (n)
            CHECK(!memcmp(ck.h_g[i], tr.h_g[i], n), "checkpointed gradients of %s differ",
                  zinf_model_module(tr.m, i)->name);
        if (n)
            CHECK(!memcmp(ck.h_w[i], tr.h_w[i], n), "the file without prefix gave other weights for %s",
                  zinf_model_module(tr.m, i)->name);
    }
    int n_fwd, n_all;
    zinf_model_schedule(ck.m, false, &n_fwd);
    zinf_model_schedule(ck.m, true, &n_all);
    CHECK(n_all - n_fwd == zinf_model_module_count(ck.m) + 2 * (int)fx->L, "checkpointed schedule has %d backward ops",
          n_all - n_fwd);

    // Written and read back: the same values; the noprefix writer is torch's.
    char path[600];
    snprintf(path, sizeof path, "%s/gpt2-zinf-written.safetensors", scratch_dir());
    TRY(zinf_model_write_weights(tr.m, path, ZINF_DTYPE_F32, ZINF_DTYPE_F32, (const void *const *)tr.h_w));
    for (int i = 0; i < tr.nmod; i++)
        if (tr.h_w[i]) memset(ck.h_w[i], 0x7f, zinf_model_module(tr.m, i)->numel * 4);
    TRY(zinf_model_read_weights(ck.m, path, ZINF_DTYPE_F32, ck.h_w));
    for (int i = 0; i < tr.nmod; i++) {
        const zinf_module_info *mod = zinf_model_module(tr.m, i);
        for (int j = 0; j < mod->nparams; j++)
            CHECK(!memcmp((float *)ck.h_w[i] + mod->params[j].offset, (float *)tr.h_w[i] + mod->params[j].offset,
                          mod->params[j].numel * 4),
                  "%s changed through write and read", mod->params[j].name);
    }
    // As bf16 and fp16: read back, every value is the original rounded to nearest even.
    const zinf_dtype half[] = {ZINF_DTYPE_BF16, ZINF_DTYPE_F16};
    for (int h = 0; h < 2; h++) {
        TRY(zinf_model_write_weights(tr.m, path, half[h], ZINF_DTYPE_F32, (const void *const *)tr.h_w));
        TRY(zinf_model_read_weights(ck.m, path, ZINF_DTYPE_F32, ck.h_w));
        size_t off = 0;
        for (int i = 0; i < tr.nmod; i++) {
            const zinf_module_info *mod = zinf_model_module(tr.m, i);
            for (int j = 0; j < mod->nparams; j++)
                for (size_t k = 0; k < mod->params[j].numel; k++) {
                    float x = ((float *)tr.h_w[i])[mod->params[j].offset + k];
                    float want = h ? f16_to_f32(f32_to_f16(x)) : bf16_to_f32(f32_to_bf16(x));
                    off += ((float *)ck.h_w[i])[mod->params[j].offset + k] != want;
                }
        }
        CHECK(off == 0, "%zu weights written as %s did not read back rounded", off, zinf_dtype_name(half[h]));
    }
    remove(path);
    run_free(&ck);
    gpt2_run_chunked(&ck, fx, ZINF_DTYPE_F32, true, false, "gpt2.safetensors", CHUNK);
    check_head_chunks("gpt2", &tr, &ck, ZINF_DTYPE_F32, 1e-6);
    run_free(&inf), run_free(&tr), run_free(&ck);
}

// bf16: no further from the fp32 truth than torch's own bf16 run allows (check_bf16).
static void test_bf16(const fixture *fx) {
    run inf, tr;
    gpt2_run(&inf, fx, ZINF_DTYPE_BF16, false, false, "gpt2.safetensors");
    gpt2_run(&tr, fx, ZINF_DTYPE_BF16, true, false, "gpt2.safetensors");
    check_bf16("gpt2", &inf, &tr, &fx->t, (size_t)fx->B * fx->T * fx->V);
    check_rows_read(&inf, zinf_model_get_params(inf.m));
    // Three chunks: the wte gradient is rounded to bf16 after each.
    run ch;
    gpt2_run_chunked(&ch, fx, ZINF_DTYPE_BF16, true, true, "gpt2.safetensors", CHUNK);
    check_head_chunks("gpt2", &tr, &ch, ZINF_DTYPE_BF16, 3.0 / 256);
    run_free(&inf), run_free(&tr), run_free(&ch);
    // cuDNN's attention in the model, where it loads, held to the same bound.
    if (!test_cudnn_begin()) return;
    gpt2_run(&inf, fx, ZINF_DTYPE_BF16, false, false, "gpt2.safetensors");
    gpt2_run(&tr, fx, ZINF_DTYPE_BF16, true, false, "gpt2.safetensors");
    check_bf16("gpt2 (cuDNN attention)", &inf, &tr, &fx->t, (size_t)fx->B * fx->T * fx->V);
    run_free(&inf), run_free(&tr);
    test_cudnn_end();
}

// Files that do not match the model fail with the file and tensor named.
static void test_bad_files(const fixture *fx) {
    zinf_device *d = test_device(0);
    char path[600];
    snprintf(path, sizeof path, "%s/gpt2.safetensors", dir);
    struct {
        int L, C;
        const char *needle;
    } cases[] = {{(int)fx->L + 1, (int)fx->C, "is missing"},
                 {(int)fx->L - 1, (int)fx->C, "is not a parameter"},
                 {(int)fx->L, (int)fx->C + (int)fx->NH, "has shape"}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        zinf_model *m;
        zinf_model_params p = {.shape =
                                   zinf_model_shape_gpt2(cases[c].L, (int)fx->NH, cases[c].C, (int)fx->V, (int)fx->BS),
                               .dtype = ZINF_DTYPE_F32,
                               .batch = 1,
                               .seq_len = 4};
        TRY(zinf_model_create(&m, d, &p));
        int nm = zinf_model_module_count(m);
        void **bufs = calloc(nm, sizeof *bufs);
        for (int i = 0; i < nm; i++)
            bufs[i] = calloc(zinf_model_module(m, i)->numel + 1, 4);
        zinf_status st = zinf_model_read_weights(m, path, ZINF_DTYPE_F32, bufs);
        CHECK(st == ZINF_ERR_INVAL, "case %zu: %s", c, zinf_status_str(st));
        CHECK_CONTAINS(zinf_last_error(), cases[c].needle);
        CHECK_CONTAINS(zinf_last_error(), "gpt2.safetensors");
        for (int i = 0; i < nm; i++)
            free(bufs[i]);
        free(bufs);
        zinf_model_destroy(m);
    }
    // A model too big for the device fails at create with the device's message.
    zinf_device *small = test_device(1 << 20);
    zinf_model *m;
    zinf_model_params p = {.shape = zinf_model_shape_gpt2(2, 4, 64, 101, 32),
                           .dtype = ZINF_DTYPE_F32,
                           .batch = 64,
                           .seq_len = 32,
                           .training = true};
    CHECK(zinf_model_create(&m, small, &p) == ZINF_ERR_NOMEM, "a 64 x 32 batch fit in 1 MiB");
    CHECK_CONTAINS(zinf_last_error(), "activations");
    zinf_device_mem mem;
    zinf_device_get_mem(small, &mem);
    CHECK(mem.in_use == 0, "a failed create left %llu bytes allocated", (unsigned long long)mem.in_use);
    zinf_device_destroy(small);
    zinf_device_destroy(d);
}

// zinf_model_plan against zinf_model_create on the suite's device: the activation bytes
// are what the device's account grew by, and the tables and schedule are the same.
static void test_plan(void) {
    zinf_device *d = test_device(0);
    zinf_backend be = zinf_device_get_caps(d)->backend;
    for (int c = 0; c < 6; c++) {
        zinf_model_params p = {.shape = zinf_model_shape_gpt2(3, 4, 64, 101, 32),
                               .dtype = c & 1 ? ZINF_DTYPE_BF16 : ZINF_DTYPE_F32,
                               .batch = 3,
                               .seq_len = 17,
                               .training = c < 3 || c >= 4,
                               .checkpoint_activations = c == 2 || c == 5,
                               .head_chunk = c == 4 ? 10 : 0,
                               .host_checkpoints = c == 5};
        zinf_device_mem before, after;
        zinf_device_get_mem(d, &before);
        zinf_model *m, *pm;
        int64_t planned = -1;
        TRY(zinf_model_create(&m, d, &p));
        zinf_device_get_mem(d, &after);
        // Only a model made with host checkpoints takes a buffer, and never NULL.
        char buf[64];
        CHECK(zinf_model_lend_checkpoints(m, c == 5 ? NULL : buf) == ZINF_ERR_INVAL, "case %d: a bad lend accepted", c);
        CHECK_CONTAINS(zinf_last_error(), "host_checkpoints");
        CHECK((zinf_model_checkpoint_bytes(&p) > 0) == (c == 5), "case %d: checkpoint bytes", c);
        // Tiles: the embedding (its rows, which the tied head reads) and the MLPs may come
        // in them, an MLP's tile 0 holding its ln_2 (weight and bias: 128 elements).
        zinf_tiling tiling[64] = {{0}};
        zinf_tile_source src = {.tiling = tiling};
        tiling[1] = (zinf_tiling){.ranks = 1, .slice = 4096, .tile = 2048};
        CHECK(zinf_model_lend_tiles(m, &src) == ZINF_ERR_UNSUPPORTED, "case %d: h.0.attn in tiles accepted", c);
        CHECK_CONTAINS(zinf_last_error(), "h.0.attn");
        tiling[1].tile = 0, tiling[0] = (zinf_tiling){.ranks = 1, .slice = 64 * 100, .tile = 64 * 30 + 1};
        CHECK(zinf_model_lend_tiles(m, &src) == ZINF_ERR_UNSUPPORTED, "case %d: tiles cutting rows accepted", c);
        CHECK_CONTAINS(zinf_last_error(), "embedding");
        tiling[0].tile = 0, tiling[2] = (zinf_tiling){.ranks = 2, .slice = 20000, .tile = 127};
        CHECK(zinf_model_lend_tiles(m, &src) == ZINF_ERR_UNSUPPORTED, "case %d: h.0.mlp's ln_2 cut", c);
        CHECK_CONTAINS(zinf_last_error(), "h.0.mlp");
        tiling[2].tile = 128;
        TRY(zinf_model_lend_tiles(m, &src));
        TRY(zinf_model_lend_tiles(m, NULL));
        TRY(zinf_model_plan(&pm, be, &p, &planned));
        CHECK(planned == (int64_t)(after.in_use - before.in_use), "case %d: planned %lld activation bytes, took %llu",
              c, (long long)planned, (unsigned long long)(after.in_use - before.in_use));
        int n = zinf_model_module_count(m), na, nb;
        CHECK(zinf_model_module_count(pm) == n, "case %d: module counts differ", c);
        for (int i = 0; i < n && i < zinf_model_module_count(pm); i++)
            CHECK(zinf_model_module(pm, i)->numel == zinf_model_module(m, i)->numel &&
                      zinf_model_module(pm, i)->external == zinf_model_module(m, i)->external,
                  "case %d: module %d differs", c, i);
        const zinf_model_op *a = zinf_model_schedule(m, true, &na), *b = zinf_model_schedule(pm, true, &nb);
        CHECK(na == nb && memcmp(a, b, (size_t)na * sizeof *a) == 0, "case %d: schedules differ", c);
        zinf_model_destroy(pm);
        zinf_model_destroy(m);
    }
    zinf_model *m = NULL;
    zinf_model_params p = {
        .shape = zinf_model_shape_gpt2(1, 1, 64, 101, 32), .dtype = ZINF_DTYPE_F32, .batch = 1, .seq_len = 4};
    CHECK(zinf_model_create(&m, NULL, &p) == ZINF_ERR_INVAL && !m, "a model without a device was made");
    CHECK_CONTAINS(zinf_last_error(), "zinf_model_plan");
    zinf_device_destroy(d);
}

int main(void) {
    test_plan();
    snprintf(dir, sizeof dir, "%s", getenv("ZINF_REF_DIR") ? getenv("ZINF_REF_DIR") : "build/ref");
    fixture fx;
    load_fixture(&fx);
    zinf_model_shape sh = zinf_model_shape_gpt2((int)fx.L, (int)fx.NH, (int)fx.C, (int)fx.V, (int)fx.BS);
    int64_t total = 0;
    for (uint32_t i = 0; i < fx.t.np; i++)
        total += (int64_t)fx.t.numel[i];
    CHECK(zinf_model_param_count(&sh) == total, "param count %lld, torch %lld", (long long)zinf_model_param_count(&sh),
          (long long)total);
    zinf_model_shape g2 = zinf_model_shape_gpt2(12, 12, 768, 50257, 1024);
    CHECK(zinf_model_param_count(&g2) == 124439808, "gpt2 has %lld parameters", (long long)zinf_model_param_count(&g2));
    test_fp32(&fx);
    test_bf16(&fx);
    test_bad_files(&fx);
    free_fixture(&fx);
    return check_exit("test_model_gpt2");
}
