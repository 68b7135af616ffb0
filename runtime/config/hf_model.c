// The model section a Hugging Face model directory implies (zinf_config.h): its
// config.json read as transformers reads it, GPT2Config's defaults for what it leaves
// out, and refused where it asks for a model zinf would compute differently.
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

// An integer key, or GPT2Config's default when absent.
static zinf_status get_int(const char *file, json_t *o, const char *name, int64_t def, int64_t *out) {
    json_t *v = json_object_get(o, name);
    if (!v || json_is_null(v)) {
        *out = def;
        return ZINF_OK;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 1)
        return zinf_fail(ZINF_ERR_INVAL, "%s: %s: expected a positive integer", file, name);
    *out = json_integer_value(v);
    return ZINF_OK;
}

// What zinf's GPT-2 computes: the tanh GELU, layer norms with eps 1e-5, an MLP four
// times as wide, the head tied to the embedding, attention scaled by 1/sqrt(head size).
static zinf_status gpt2_computes_it(const char *file, json_t *o, int64_t n_embd) {
    const char *act = json_string_value(json_object_get(o, "activation_function"));
    if (act && strcmp(act, "gelu_new") != 0 && strcmp(act, "gelu_pytorch_tanh") != 0)
        return zinf_fail(ZINF_ERR_UNSUPPORTED, "%s: activation_function \"%s\": zinf's GPT-2 computes gelu_new", file,
                         act);
    json_t *eps = json_object_get(o, "layer_norm_epsilon");
    if (eps && !json_is_null(eps) && fabs(json_number_value(eps) - 1e-5) > 1e-12)
        return zinf_fail(ZINF_ERR_UNSUPPORTED, "%s: layer_norm_epsilon %g: zinf's GPT-2 normalizes with 1e-5", file,
                         json_number_value(eps));
    json_t *inner = json_object_get(o, "n_inner");
    if (inner && !json_is_null(inner) && json_integer_value(inner) != 4 * n_embd)
        return zinf_fail(ZINF_ERR_UNSUPPORTED, "%s: n_inner %lld: zinf's GPT-2 MLP is 4 x n_embd (%lld) wide", file,
                         (long long)json_integer_value(inner), (long long)(4 * n_embd));
    static const struct {
        const char *key;
        bool want;
    } flags[] = {
        {"tie_word_embeddings", true}, {"scale_attn_weights", true}, {"scale_attn_by_inverse_layer_idx", false}};
    for (size_t i = 0; i < sizeof flags / sizeof *flags; i++) {
        json_t *v = json_object_get(o, flags[i].key);
        if (v && json_is_boolean(v) && json_is_true(v) != flags[i].want)
            return zinf_fail(ZINF_ERR_UNSUPPORTED, "%s: %s %s: zinf's GPT-2 has it %s", file, flags[i].key,
                             flags[i].want ? "false" : "true", flags[i].want ? "true" : "false");
    }
    return ZINF_OK;
}

zinf_status zinf_config_model_from_hf(const char *dir, zinf_model_config *m) {
    char file[PATH_MAX];
    snprintf(file, sizeof file, "%s/config.json", dir);
    json_error_t err;
    json_t *o = json_load_file(file, 0, &err);
    if (!o) return zinf_fail(ZINF_ERR_INVAL, "%s: %s (a model directory holds config.json)", file, err.text);
    const char *type = json_string_value(json_object_get(o, "model_type"));
    zinf_status s = ZINF_OK;
    if (!type)
        s = zinf_fail(ZINF_ERR_INVAL, "%s: no \"model_type\"", file);
    else if (strcmp(type, "gpt2") != 0)
        s = zinf_fail(ZINF_ERR_UNSUPPORTED, "%s: model_type \"%s\": zinf trains GPT-2 (model_type \"gpt2\") so far",
                      file, type);
    // GPT2Config's own defaults, for a config.json that leaves a key out.
    static const struct {
        const char *key, *ours;
        int64_t def;
    } dims[] = {{"n_layer", "n_layer", 12},
                {"n_head", "n_head", 12},
                {"n_embd", "n_embd", 768},
                {"vocab_size", "vocab_size", 50257},
                {"n_positions", "block_size", 1024}};
    int64_t *fields[] = {&m->n_layer, &m->n_head, &m->n_embd, &m->vocab_size, &m->block_size};
    for (size_t i = 0; s == ZINF_OK && i < sizeof dims / sizeof *dims; i++) {
        int64_t v = 0;
        s = get_int(file, o, dims[i].key, dims[i].def, &v);
        if (s == ZINF_OK && *fields[i] >= 0 && *fields[i] != v)
            s = zinf_fail(ZINF_ERR_INVAL, "model.%s %lld differs from %s's %s %lld; leave it out or make them agree",
                          dims[i].ours, (long long)*fields[i], file, dims[i].key, (long long)v);
        if (s == ZINF_OK) *fields[i] = v;
    }
    if (s == ZINF_OK) s = gpt2_computes_it(file, o, m->n_embd);
    json_decref(o);
    return s;
}
