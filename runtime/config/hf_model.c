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

// A number key, or def when absent or null.
static zinf_status get_real(const char *file, json_t *o, const char *name, double def, double *out) {
    json_t *v = json_object_get(o, name);
    if (!v || json_is_null(v)) {
        *out = def;
        return ZINF_OK;
    }
    if (!json_is_number(v) || json_number_value(v) <= 0)
        return zinf_fail(ZINF_ERR_INVAL, "%s: %s: expected a positive number", file, name);
    *out = json_number_value(v);
    return ZINF_OK;
}

static bool get_bool(json_t *o, const char *name, bool def) {
    json_t *v = json_object_get(o, name);
    return v && json_is_boolean(v) ? json_is_true(v) : def;
}

typedef struct dim {
    const char *key, *ours;
    int64_t def;
} dim;

// The sizes, with the config class's defaults; a size the section gives must agree.
static zinf_status read_dims(const char *file, json_t *o, const dim *dims, int64_t *const *fields, size_t n) {
    for (size_t i = 0; i < n; i++) {
        int64_t v = 0;
        ZINF_CHECK(get_int(file, o, dims[i].key, dims[i].def, &v));
        if (*fields[i] >= 0 && *fields[i] != v)
            return zinf_fail(ZINF_ERR_INVAL, "model.%s %lld differs from %s's %s %lld; leave it out or make them agree",
                             dims[i].ours, (long long)*fields[i], file, dims[i].key, (long long)v);
        *fields[i] = v;
    }
    return ZINF_OK;
}

static zinf_status read_gpt2(const char *file, json_t *o, zinf_model_config *m) {
    // GPT2Config's own defaults, for a config.json that leaves a key out.
    static const dim dims[] = {{"n_layer", "n_layer", 12},
                               {"n_head", "n_head", 12},
                               {"n_embd", "n_embd", 768},
                               {"vocab_size", "vocab_size", 50257},
                               {"n_positions", "block_size", 1024}};
    int64_t *const fields[] = {&m->n_layer, &m->n_head, &m->n_embd, &m->vocab_size, &m->block_size};
    ZINF_CHECK(read_dims(file, o, dims, fields, 5));
    return gpt2_computes_it(file, o, m->n_embd);
}

// Rotary embeddings in either form: rope_parameters {rope_theta, rope_type, ...}
// (transformers 5), or rope_theta beside rope_scaling {"rope_type" or "type", ...}.
static zinf_status read_rope(const char *file, json_t *o, zinf_model_config *m) {
    json_t *params = json_object_get(o, "rope_parameters");
    bool newer = params && json_is_object(params);
    json_t *sc = newer ? params : json_object_get(o, "rope_scaling");
    const char *where = newer ? "rope_parameters" : "rope_scaling";
    ZINF_CHECK(get_real(file, newer ? params : o, "rope_theta", 10000, &m->rope_theta));
    m->rope_type = ZINF_ROPE_DEFAULT;
    if (!sc || json_is_null(sc)) return ZINF_OK;
    if (!json_is_object(sc)) return zinf_fail(ZINF_ERR_INVAL, "%s: %s: expected an object", file, where);
    const char *type = json_string_value(json_object_get(sc, "rope_type"));
    if (!type) type = json_string_value(json_object_get(sc, "type"));
    static const char *const names[] = {"default", "linear", "dynamic", "llama3"};
    int t = -1;
    for (int i = 0; type && i < 4; i++)
        if (strcmp(type, names[i]) == 0) t = i;
    if (!type) t = 0;
    if (t < 0)
        return zinf_fail(ZINF_ERR_UNSUPPORTED, "%s: %s.rope_type \"%s\": zinf computes default, linear, dynamic and "
                                               "llama3 rotary embeddings",
                         file, where, type);
    m->rope_type = (zinf_rope_type)t;
    ZINF_CHECK(get_real(file, sc, "factor", 1, &m->rope_factor));
    if (m->rope_type == ZINF_ROPE_LLAMA3) {
        ZINF_CHECK(get_real(file, sc, "low_freq_factor", 1, &m->rope_low_freq_factor));
        ZINF_CHECK(get_real(file, sc, "high_freq_factor", 4, &m->rope_high_freq_factor));
        ZINF_CHECK(get_int(file, sc, "original_max_position_embeddings", m->block_size, &m->rope_original_max_position));
    }
    return ZINF_OK;
}

// The attention window per layer: Mistral's on every layer when sliding_window is set;
// Qwen2's with use_sliding_window, from layer max_window_layers on. An explicit
// layer_types must be full layers first, then sliding ones.
static zinf_status read_window(const char *file, json_t *o, zinf_model_config *m) {
    json_t *w = json_object_get(o, "sliding_window");
    m->sliding_window = -1, m->max_window_layers = -1;
    bool on = m->arch == ZINF_ARCH_MISTRAL || (m->arch == ZINF_ARCH_QWEN2 && get_bool(o, "use_sliding_window", false));
    if (!on || !w || json_is_null(w)) return ZINF_OK;
    ZINF_CHECK(get_int(file, o, "sliding_window", 4096, &m->sliding_window));
    if (m->arch != ZINF_ARCH_QWEN2) return ZINF_OK;
    // Qwen2Config's default; 0 (every layer through the window) is as valid as any.
    json_t *from = json_object_get(o, "max_window_layers");
    m->max_window_layers = 28;
    if (from && !json_is_null(from)) {
        if (!json_is_integer(from) || json_integer_value(from) < 0)
            return zinf_fail(ZINF_ERR_INVAL, "%s: max_window_layers: expected an integer >= 0", file);
        m->max_window_layers = json_integer_value(from);
    }
    return ZINF_OK;
}

static zinf_status check_layer_types(const char *file, json_t *o, const zinf_model_config *m) {
    json_t *lt = json_object_get(o, "layer_types");
    if (!lt || json_is_null(lt)) return ZINF_OK;
    if (!json_is_array(lt) || (int64_t)json_array_size(lt) != m->n_layer)
        return zinf_fail(ZINF_ERR_INVAL, "%s: layer_types: expected %lld entries", file, (long long)m->n_layer);
    int64_t from = m->sliding_window < 0 ? m->n_layer : m->max_window_layers < 0 ? 0 : m->max_window_layers;
    for (size_t i = 0; i < json_array_size(lt); i++) {
        const char *t = json_string_value(json_array_get(lt, i));
        const char *want = (int64_t)i < from ? "full_attention" : "sliding_attention";
        if (!t || strcmp(t, want) != 0)
            return zinf_fail(ZINF_ERR_UNSUPPORTED, "%s: layer_types[%zu] is \"%s\"; zinf's window rule gives \"%s\"",
                             file, i, t ? t : "?", want);
    }
    return ZINF_OK;
}

static zinf_status read_llama(const char *file, json_t *o, zinf_model_config *m) {
    // LlamaConfig's, MistralConfig's and Qwen2Config's defaults.
    bool mistral = m->arch == ZINF_ARCH_MISTRAL, qwen = m->arch == ZINF_ARCH_QWEN2;
    const dim dims[] = {{"num_hidden_layers", "n_layer", 32},
                        {"num_attention_heads", "n_head", 32},
                        {"hidden_size", "n_embd", 4096},
                        {"vocab_size", "vocab_size", qwen ? 151936 : 32000},
                        {"max_position_embeddings", "block_size", mistral ? 131072 : qwen ? 32768 : 2048},
                        {"intermediate_size", "intermediate_size", mistral ? 14336 : qwen ? 22016 : 11008}};
    int64_t *const fields[] = {&m->n_layer, &m->n_head, &m->n_embd, &m->vocab_size, &m->block_size,
                               &m->intermediate_size};
    ZINF_CHECK(read_dims(file, o, dims, fields, 6));
    const dim kv[] = {{"num_key_value_heads", "n_kv_head", mistral ? 8 : m->n_head},
                      {"head_dim", "head_dim", m->n_head ? m->n_embd / m->n_head : 0}};
    int64_t *const kvf[] = {&m->n_kv_head, &m->head_dim};
    ZINF_CHECK(read_dims(file, o, kv, kvf, qwen ? 1 : 2)); // Qwen2 has no head_dim key
    if (qwen) m->head_dim = m->n_embd / m->n_head;
    const char *act = json_string_value(json_object_get(o, "hidden_act"));
    if (act && strcmp(act, "silu") != 0)
        return zinf_fail(ZINF_ERR_UNSUPPORTED, "%s: hidden_act \"%s\": zinf's Llama family computes silu", file, act);
    ZINF_CHECK(get_real(file, o, "rms_norm_eps", 1e-6, &m->norm_eps));
    ZINF_CHECK(read_rope(file, o, m));
    ZINF_CHECK(read_window(file, o, m));
    ZINF_CHECK(check_layer_types(file, o, m));
    m->tie_word_embeddings = get_bool(o, "tie_word_embeddings", false);
    m->attention_bias = m->arch == ZINF_ARCH_LLAMA && get_bool(o, "attention_bias", false);
    m->mlp_bias = m->arch == ZINF_ARCH_LLAMA && get_bool(o, "mlp_bias", false);
    return ZINF_OK;
}

zinf_status zinf_config_model_from_hf(const char *dir, zinf_model_config *m) {
    char file[PATH_MAX];
    snprintf(file, sizeof file, "%s/config.json", dir);
    json_error_t err;
    json_t *o = json_load_file(file, 0, &err);
    if (!o) return zinf_fail(ZINF_ERR_INVAL, "%s: %s (a model directory holds config.json)", file, err.text);
    const char *type = json_string_value(json_object_get(o, "model_type"));
    static const char *const types[] = {"gpt2", "llama", "mistral", "qwen2"};
    zinf_status s = ZINF_OK;
    int arch = -1;
    for (int i = 0; type && i < 4; i++)
        if (strcmp(type, types[i]) == 0) arch = i;
    if (!type)
        s = zinf_fail(ZINF_ERR_INVAL, "%s: no \"model_type\"", file);
    else if (arch < 0)
        s = zinf_fail(ZINF_ERR_UNSUPPORTED, "%s: model_type \"%s\": zinf trains gpt2, llama, mistral and qwen2", file,
                      type);
    if (s == ZINF_OK) {
        m->arch = (zinf_model_arch)arch;
        s = arch == ZINF_ARCH_GPT2 ? read_gpt2(file, o, m) : read_llama(file, o, m);
    }
    json_decref(o);
    return s;
}
