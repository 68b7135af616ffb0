// The model section's rules: a preset fills what the section leaves out, a model
// directory says what the model is, and the Llama family's keys get their defaults
// and checks (GPT-2 has none of them).
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "internal.h"

typedef struct preset {
    zinf_model_arch arch;
    int64_t n_layer, n_head, n_embd, n_kv_head, head_dim, intermediate_size, vocab_size, block_size;
    double norm_eps, rope_theta;
    zinf_rope_type rope_type;
    double rope_factor; // llama3: low 1, high 4, original 8192 for every Llama 3.x
    int64_t sliding_window;
    bool tied;
} preset;

// As the models' config.json files on the Hugging Face hub have them (base models).
static const preset presets[] = {
    [ZINF_PRESET_GPT2] = {.arch = ZINF_ARCH_GPT2, .n_layer = 12, .n_head = 12, .n_embd = 768},
    [ZINF_PRESET_GPT2_MEDIUM] = {.arch = ZINF_ARCH_GPT2, .n_layer = 24, .n_head = 16, .n_embd = 1024},
    [ZINF_PRESET_GPT2_LARGE] = {.arch = ZINF_ARCH_GPT2, .n_layer = 36, .n_head = 20, .n_embd = 1280},
    [ZINF_PRESET_GPT2_XL] = {.arch = ZINF_ARCH_GPT2, .n_layer = 48, .n_head = 25, .n_embd = 1600},
    [ZINF_PRESET_LLAMA_3_2_1B] = {ZINF_ARCH_LLAMA, 16, 32, 2048, 8, 64, 8192, 128256, 131072, 1e-5, 500000,
                                  ZINF_ROPE_LLAMA3, 32, -1, true},
    [ZINF_PRESET_LLAMA_3_2_3B] = {ZINF_ARCH_LLAMA, 28, 24, 3072, 8, 128, 8192, 128256, 131072, 1e-5, 500000,
                                  ZINF_ROPE_LLAMA3, 32, -1, true},
    [ZINF_PRESET_LLAMA_3_1_8B] = {ZINF_ARCH_LLAMA, 32, 32, 4096, 8, 128, 14336, 128256, 131072, 1e-5, 500000,
                                  ZINF_ROPE_LLAMA3, 8, -1, false},
    [ZINF_PRESET_MISTRAL_7B] = {ZINF_ARCH_MISTRAL, 32, 32, 4096, 8, 128, 14336, 32000, 32768, 1e-5, 10000,
                                ZINF_ROPE_DEFAULT, 1, 4096, false},
    [ZINF_PRESET_QWEN2_5_0_5B] = {ZINF_ARCH_QWEN2, 24, 14, 896, 2, 64, 4864, 151936, 32768, 1e-6, 1e6,
                                  ZINF_ROPE_DEFAULT, 1, -1, true},
    [ZINF_PRESET_QWEN2_5_7B] = {ZINF_ARCH_QWEN2, 28, 28, 3584, 4, 128, 18944, 152064, 131072, 1e-6, 1e6,
                                ZINF_ROPE_DEFAULT, 1, -1, false},
    [ZINF_PRESET_SMOLLM2_135M] = {ZINF_ARCH_LLAMA, 30, 9, 576, 3, 64, 1536, 49152, 8192, 1e-5, 100000,
                                  ZINF_ROPE_DEFAULT, 1, -1, true},
};

#define FILL(key, field, v)                                                                                            \
    do {                                                                                                               \
        if (!given(ctx, "model." key)) m->field = (v);                                                                 \
    } while (0)

static void apply_preset(zinf_model_config *m, const parse_ctx *ctx) {
    const preset *p = &presets[m->preset];
    FILL("arch", arch, p->arch);
    FILL("n_layer", n_layer, p->n_layer);
    FILL("n_head", n_head, p->n_head);
    FILL("n_embd", n_embd, p->n_embd);
    if (p->arch == ZINF_ARCH_GPT2) return; // GPT-2's vocabulary and block follow the data
    FILL("n_kv_head", n_kv_head, p->n_kv_head);
    FILL("head_dim", head_dim, p->head_dim);
    FILL("intermediate_size", intermediate_size, p->intermediate_size);
    FILL("vocab_size", vocab_size, p->vocab_size);
    FILL("block_size", block_size, p->block_size);
    FILL("norm_eps", norm_eps, p->norm_eps);
    FILL("rope_theta", rope_theta, p->rope_theta);
    FILL("rope_scaling.rope_type", rope_type, p->rope_type);
    FILL("rope_scaling.factor", rope_factor, p->rope_factor);
    if (p->rope_type == ZINF_ROPE_LLAMA3) FILL("rope_scaling.original_max_position_embeddings", rope_original_max_position, 8192);
    FILL("sliding_window", sliding_window, p->sliding_window);
    FILL("tie_word_embeddings", tie_word_embeddings, p->tied);
}

// GPT-2 computes none of the Llama family's options: a key that sets one is an error.
static zinf_status gpt2_has_none(const parse_ctx *ctx) {
    for (size_t i = 0; i < zinf_config_nkeys; i++)
        if ((zinf_config_keys[i].flags & F_LLAMA) && ctx->given[i])
            return zinf_fail(ZINF_ERR_INVAL,
                             "%s: %s: a key of the Llama family; set model.arch (llama, mistral or qwen2) or leave "
                             "the key out for GPT-2",
                             ctx->name, zinf_config_keys[i].path);
    return ZINF_OK;
}

static zinf_status llama_rules(zinf_model_config *m, const parse_ctx *ctx) {
    if (m->n_kv_head < 0) m->n_kv_head = m->n_head;
    if (m->head_dim < 0) {
        if (m->n_embd % m->n_head)
            return zinf_fail(ZINF_ERR_INVAL,
                             "%s: model.n_embd: %lld is not a multiple of model.n_head (%lld); give model.head_dim",
                             ctx->name, (long long)m->n_embd, (long long)m->n_head);
        m->head_dim = m->n_embd / m->n_head;
    }
    if (m->n_head % m->n_kv_head)
        return zinf_fail(ZINF_ERR_INVAL, "%s: model.n_kv_head: %lld does not divide model.n_head (%lld)", ctx->name,
                         (long long)m->n_kv_head, (long long)m->n_head);
    if (m->head_dim % 2)
        return zinf_fail(ZINF_ERR_INVAL, "%s: model.head_dim: %lld is odd; rotary embeddings pair channels",
                         ctx->name, (long long)m->head_dim);
    if (m->intermediate_size < 0)
        return zinf_fail(ZINF_ERR_INVAL, "%s: model.intermediate_size: missing; the Llama family's MLP width", ctx->name);
    if (m->rope_type == ZINF_ROPE_LLAMA3 && m->rope_high_freq_factor <= m->rope_low_freq_factor)
        return zinf_fail(ZINF_ERR_INVAL,
                         "%s: model.rope_scaling.high_freq_factor: %g must be above low_freq_factor (%g)", ctx->name,
                         m->rope_high_freq_factor, m->rope_low_freq_factor);
    if (m->rope_type != ZINF_ROPE_LLAMA3) m->rope_original_max_position = -1; // only llama3 reads it
    if (m->arch == ZINF_ARCH_LLAMA && m->sliding_window >= 0)
        return zinf_fail(ZINF_ERR_INVAL, "%s: model.sliding_window: Llama attends to every earlier key; use model.arch "
                                         "\"mistral\" for a sliding window",
                         ctx->name);
    return ZINF_OK;
}

zinf_status config_model_rules(zinf_config *c, const parse_ctx *ctx) {
    zinf_model_config *m = &c->model;
    if (!m->present) return ZINF_OK;
    if (m->preset != ZINF_PRESET_NONE) apply_preset(m, ctx);
    // A model directory says what the model is (its config.json); a file only holds tensors.
    struct stat sb;
    if (m->init_from && stat(m->init_from, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        zinf_status st = zinf_config_model_from_hf(m->init_from, m);
        if (st != ZINF_OK) return zinf_fail(st, "%s: model.init_from: %s", ctx->name, zinf_last_error());
    } else if (m->init_from) {
        ZINF_CHECK(config_check_file(ctx, "model.init_from", m->init_from));
    }
    const char *dims[] = {"model.n_layer", "model.n_head", "model.n_embd"};
    int64_t vals[] = {m->n_layer, m->n_head, m->n_embd};
    for (int i = 0; i < 3; i++)
        if (vals[i] < 0)
            return zinf_fail(ZINF_ERR_INVAL,
                             "%s: %s: missing; give model.preset (gpt2, llama-3.2-1b, ...; docs/config.md lists them), "
                             "n_layer, n_head and n_embd, or a model directory as model.init_from",
                             ctx->name, dims[i]);
    if (m->vocab_size < 0) m->vocab_size = c->data.present && c->data.format == ZINF_DATA_TEXT_BYTES ? 256 : 50257;
    if (m->block_size < 0) m->block_size = 1024;
    if (m->arch != ZINF_ARCH_GPT2) return llama_rules(m, ctx);
    ZINF_CHECK(gpt2_has_none(ctx));
    if (m->n_embd % m->n_head != 0)
        return zinf_fail(ZINF_ERR_INVAL, "%s: model.n_embd: %lld is not a multiple of model.n_head (%lld)", ctx->name,
                         (long long)m->n_embd, (long long)m->n_head);
    return ZINF_OK;
}
