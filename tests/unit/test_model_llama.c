// The Llama family against Hugging Face transformers in PyTorch (tests/ref/llama_ref.py):
// three tiny models read from the directories save_pretrained wrote (a Llama with GQA,
// head_dim != n_embd / n_head, llama3 rope in all three bands, q/k/v/o and MLP biases
// and an untied head, from a sharded index; a tied Qwen2 with its q/k/v biases and
// linear rope; a Mistral with a sliding window shorter than the sequence). Logits,
// loss and every parameter's gradient in fp32 and bf16; the old config form reads to
// the same model; activation checkpointing gives the same bits; written weights read
// back unchanged; config.json written by zinf reads back to the same shape.
// timeout: 10 san=10 cuda-emu=25 san-cuda-emu=55
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "model_test.h"

typedef struct fixture {
    char name[16];
    uint32_t B, T, V;
    torch_runs t;
} fixture;

static char dir[512];

static void load_case(FILE *f, const char *path, fixture *fx) {
    fixture_read(f, fx->name, 16, path), fixture_read(f, &fx->B, 12, path);
    torch_runs_read(f, path, (size_t)fx->B * fx->T, fx->V, &fx->t);
}

static void model_dir(const fixture *fx, const char *suffix, char *out, size_t len) {
    snprintf(out, len, "%s/llama-%s%s", dir, fx->name, suffix);
}

// The head in chunks of this many tokens where a test asks: 24 = 7 + 7 + 7 + 3.
enum { CHUNK = 7 };

// The case's model, its shape from its directory's config.json; the head in chunks of
// `chunk` tokens (0: at once).
static void llama_run_chunked(run *r, const fixture *fx, zinf_dtype dt, bool training, bool ckpt, const char *suffix,
                              int chunk) {
    char path[600];
    model_dir(fx, suffix, path, sizeof path);
    zinf_model_params p = {.dtype = dt,
                           .batch = (int)fx->B,
                           .seq_len = (int)fx->T,
                           .training = training,
                           .checkpoint_activations = ckpt,
                           .head_chunk = chunk};
    TRY(zinf_model_shape_from_file(path, &p.shape));
    run_model(r, &p, path, fx->t.tok, fx->t.tgt);
}

static void llama_run(run *r, const fixture *fx, zinf_dtype dt, bool training, bool ckpt, const char *suffix) {
    llama_run_chunked(r, fx, dt, training, ckpt, suffix, 0);
}

static int zinf_param_total(const run *r) {
    int n = 0;
    for (int i = 0; i < r->nmod; i++)
        n += zinf_model_module(r->m, i)->nparams;
    return n;
}

static void test_fp32(const fixture *fx) {
    run inf, tr, ck;
    llama_run(&inf, fx, ZINF_DTYPE_F32, false, false, "");
    llama_run(&tr, fx, ZINF_DTYPE_F32, true, false, "");
    check_fp32(fx->name, &inf, &tr, &fx->t, (size_t)fx->B * fx->T * fx->V);
    CHECK(zinf_param_total(&inf) == (int)fx->t.np, "%s: zinf has %d parameters, torch %u", fx->name,
          zinf_param_total(&inf), fx->t.np);

    // Checkpointing recomputes the same ops in the same order: the same bits.
    llama_run(&ck, fx, ZINF_DTYPE_F32, true, true, "");
    CHECK(ck.loss == tr.loss, "%s: checkpointed loss %.9g vs %.9g", fx->name, ck.loss, tr.loss);
    for (int i = 0; i < tr.nmod; i++) {
        size_t n = zinf_model_module(tr.m, i)->numel * 4;
        if (n)
            CHECK(!memcmp(ck.h_g[i], tr.h_g[i], n), "%s: checkpointed gradients of %s differ", fx->name,
                  zinf_model_module(tr.m, i)->name);
    }

    // Written and read back: the same values, under the names transformers saved.
    char path[600];
    snprintf(path, sizeof path, "%s/llama-%s-zinf-written.safetensors", scratch_dir(), fx->name);
    TRY(zinf_model_write_weights(tr.m, path, ZINF_DTYPE_F32, ZINF_DTYPE_F32, (const void *const *)tr.h_w));
    for (int i = 0; i < tr.nmod; i++)
        if (ck.h_w[i]) memset(ck.h_w[i], 0x7f, zinf_model_module(tr.m, i)->numel * 4);
    TRY(zinf_model_read_weights(ck.m, path, ZINF_DTYPE_F32, ck.h_w));
    for (int i = 0; i < tr.nmod; i++) {
        const zinf_module_info *mod = zinf_model_module(tr.m, i);
        for (int j = 0; j < mod->nparams; j++)
            CHECK(!memcmp((float *)ck.h_w[i] + mod->params[j].offset, (float *)tr.h_w[i] + mod->params[j].offset,
                          mod->params[j].numel * 4),
                  "%s: %s changed through write and read", fx->name, mod->params[j].name);
    }
    remove(path);
    run_free(&ck);
    llama_run_chunked(&ck, fx, ZINF_DTYPE_F32, true, false, "", CHUNK);
    check_head_chunks(fx->name, &tr, &ck, ZINF_DTYPE_F32, 1e-6);
    run_free(&inf), run_free(&tr), run_free(&ck);
}

// bf16: no further from the fp32 truth than torch's own bf16 run allows (check_bf16).
static void test_bf16(const fixture *fx) {
    run inf, tr;
    llama_run(&inf, fx, ZINF_DTYPE_BF16, false, false, "");
    llama_run(&tr, fx, ZINF_DTYPE_BF16, true, false, "");
    check_bf16(fx->name, &inf, &tr, &fx->t, (size_t)fx->B * fx->T * fx->V);
    check_rows_read(&inf, zinf_model_get_params(inf.m));
    // Four chunks: the head weight's gradient is rounded to bf16 after each.
    run ch;
    llama_run_chunked(&ch, fx, ZINF_DTYPE_BF16, true, true, "", CHUNK);
    check_head_chunks(fx->name, &tr, &ch, ZINF_DTYPE_BF16, 4.0 / 256);
    run_free(&inf), run_free(&tr), run_free(&ch);
    // cuDNN's attention in the model (grouped heads; Mistral's and Qwen2's windows), where
    // it loads, held to the same bound.
    if (!test_cudnn_begin()) return;
    llama_run(&inf, fx, ZINF_DTYPE_BF16, false, false, "");
    llama_run(&tr, fx, ZINF_DTYPE_BF16, true, false, "");
    char what[80];
    snprintf(what, sizeof what, "%s (cuDNN attention)", fx->name);
    check_bf16(what, &inf, &tr, &fx->t, (size_t)fx->B * fx->T * fx->V);
    run_free(&inf), run_free(&tr);
    test_cudnn_end();
}

// The shape from the directory's config.json; the old config form (rope_theta beside
// rope_scaling) reads to the same shape; zinf's own config.json reads back to it.
static void test_configs(const fixture *fx) {
    char path[600], other[600];
    model_dir(fx, "", path, sizeof path);
    zinf_model_shape s, t;
    TRY(zinf_model_shape_from_file(path, &s));
    model_dir(fx, "-oldcfg", other, sizeof other);
    struct stat sb;
    if (stat(other, &sb) == 0) {
        TRY(zinf_model_shape_from_file(other, &t));
        CHECK(zinf_model_shape_equal(&s, &t), "%s: the old config form reads to another shape", fx->name);
        CHECK(s.rope_type == ZINF_ROPE_LLAMA3 && s.rope_original_max_position == 32, "%s: llama3 rope not read",
              fx->name);
    }
    char *json;
    TRY(zinf_model_hf_config(&s, ZINF_DTYPE_F32, &json));
    char d[600], f[700];
    snprintf(d, sizeof d, "%s/llama-%s-zinf-config", scratch_dir(), fx->name);
    mkdir(d, 0755);
    snprintf(f, sizeof f, "%s/config.json", d);
    FILE *o = fopen(f, "w");
    CHECK(o && fputs(json, o) >= 0 && fclose(o) == 0, "cannot write %s", f);
    free(json);
    TRY(zinf_model_shape_from_file(d, &t));
    CHECK(zinf_model_shape_equal(&s, &t), "%s: zinf's config.json reads back to another shape", fx->name);
    // And through a checkpoint's meta.json form.
    TRY(zinf_model_shape_to_json(&s, &json));
    TRY(zinf_model_shape_from_json(json, "meta", &t));
    CHECK(zinf_model_shape_equal(&s, &t), "%s: the meta.json form reads back to another shape", fx->name);
    free(json);
    remove(f), rmdir(d);
}

// The presets have the parameters of the models on the Hugging Face hub (counted by
// transformers from their config.json files).
static void test_presets(void) {
    static const struct {
        const char *name;
        int64_t params;
    } presets[] = {{"llama-3.2-1b", 1235814400}, {"llama-3.2-3b", 3212749824}, {"llama-3.1-8b", 8030261248},
                   {"mistral-7b", 7241732096},   {"qwen2.5-0.5b", 494032768},  {"qwen2.5-7b", 7615616512},
                   {"smollm2-135m", 134515008},  {"gpt2", 124439808}};
    for (size_t i = 0; i < sizeof presets / sizeof *presets; i++) {
        char json[160];
        snprintf(json, sizeof json, "{\"train_batch_size\": 1, \"model\": {\"preset\": \"%s\"}}", presets[i].name);
        zinf_config cfg;
        zinf_model_shape s;
        TRY(zinf_config_parse(&cfg, json, "preset", &(zinf_config_options){.world_size = 1}));
        TRY(zinf_model_shape_from_config(&cfg.model, &s));
        CHECK(zinf_model_param_count(&s) == presets[i].params, "%s: %lld parameters, the hub's model %lld",
              presets[i].name, (long long)zinf_model_param_count(&s), (long long)presets[i].params);
        zinf_config_free(&cfg);
    }
}

// A config.json zinf would compute differently from transformers is refused, naming the
// file and the key.
static void test_bad_configs(void) {
    static const struct {
        const char *json, *needle;
    } bad[] = {
        {"{\"model_type\": \"phi\"}", "model_type \"phi\""},
        {"{\"model_type\": \"llama\", \"hidden_act\": \"gelu\"}", "hidden_act \"gelu\""},
        {"{\"model_type\": \"llama\", \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4}}",
         "rope_scaling.rope_type \"yarn\""},
        {"{\"model_type\": \"llama\", \"rope_parameters\": {\"rope_type\": \"longrope\", \"rope_theta\": 1e4}}",
         "rope_parameters.rope_type \"longrope\""},
        {"{\"model_type\": \"qwen2\", \"num_hidden_layers\": 2, \"use_sliding_window\": true, \"sliding_window\": 8,"
         " \"max_window_layers\": 1, \"layer_types\": [\"sliding_attention\", \"full_attention\"]}",
         "layer_types[0] is \"sliding_attention\""},
        {"{\"model_type\": \"mistral\", \"num_attention_heads\": -4}", "num_attention_heads: expected a positive"},
        {"{\"model_type\": \"llama\", \"intermediate_size\": 1099511627776}",
         "model.intermediate_size: 1099511627776 is above zinf's limit"},
    };
    char d[600], f[700];
    snprintf(d, sizeof d, "%s/llama-bad-config", scratch_dir());
    mkdir(d, 0755);
    snprintf(f, sizeof f, "%s/config.json", d);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        FILE *o = fopen(f, "w");
        CHECK(o && fputs(bad[i].json, o) >= 0 && fclose(o) == 0, "cannot write %s", f);
        zinf_model_shape s;
        CHECK(zinf_model_shape_from_file(d, &s) != ZINF_OK, "accepted %s", bad[i].json);
        CHECK_CONTAINS(zinf_last_error(), bad[i].needle);
        CHECK_CONTAINS(zinf_last_error(), "config.json");
    }
    remove(f), rmdir(d);
}

int main(void) {
    test_presets();
    const char *ref = getenv("ZINF_REF_DIR");
    snprintf(dir, sizeof dir, "%s", ref ? ref : "build/ref");
    char path[600];
    snprintf(path, sizeof path, "%s/llama.bin", dir);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "%s: missing; `make tests` generates it with tests/ref/llama_ref.py\n", path);
        return 1;
    }
    char magic[8];
    uint32_t ver, ncases;
    fixture_read(f, magic, 8, path), fixture_read(f, &ver, 4, path), fixture_read(f, &ncases, 4, path);
    if (memcmp(magic, "ZINFLLM1", 8) || ver != 1) {
        fprintf(stderr, "%s: not a version 1 Llama fixture\n", path);
        return 1;
    }
    test_bad_configs();
    for (uint32_t c = 0; c < ncases; c++) {
        fixture fx = {0};
        load_case(f, path, &fx);
        test_configs(&fx);
        test_fp32(&fx);
        test_bf16(&fx);
        torch_runs_free(&fx.t);
    }
    fclose(f);
    CHECK(ncases == 4, "%u cases, expected llama, qwen2, mistral and qwen2w", ncases);
    return check_exit("test_model_llama");
}
