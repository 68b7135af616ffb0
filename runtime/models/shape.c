// What a model is (zinf_model_shape): from the config's model section, from a weights
// file or model directory, and to and from checkpoints' meta.json. Nothing here calls
// into a family, so the checkpoint reader (and its fuzzer) links without the models.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "model_internal.h"

static const char *const arch_names[] = {"gpt2", "llama", "mistral", "qwen2"};
static const char *const rope_names[] = {"default", "linear", "dynamic", "llama3"};

zinf_model_shape zinf_model_shape_gpt2(int n_layer, int n_head, int n_embd, int vocab_size, int block_size) {
    return (zinf_model_shape){.arch = ZINF_ARCH_GPT2,
                              .n_layer = n_layer,
                              .n_head = n_head,
                              .n_embd = n_embd,
                              .vocab_size = vocab_size,
                              .block_size = block_size,
                              .n_kv_head = n_head,
                              .head_dim = n_head ? n_embd / n_head : 0,
                              .ffn = 4 * n_embd,
                              .norm_eps = 1e-5,
                              .tied = true};
}

// The schema holds a config's keys to these; a model directory or a weights file is held
// to them here, before a size becomes an int.
static zinf_status sizes_in_range(const zinf_model_config *mc) {
    const struct {
        const char *key;
        int64_t value, max;
    } sizes[] = {
        {"n_layer", mc->n_layer, ZINF_MODEL_MAX_LAYERS},
        {"n_head", mc->n_head, ZINF_MODEL_MAX_HEADS},
        {"n_embd", mc->n_embd, ZINF_MODEL_MAX_EMBD},
        {"vocab_size", mc->vocab_size, ZINF_MODEL_MAX_VOCAB},
        {"block_size", mc->block_size, ZINF_MODEL_MAX_BLOCK},
        {"n_kv_head", mc->n_kv_head, ZINF_MODEL_MAX_HEADS},
        {"head_dim", mc->head_dim, ZINF_MODEL_MAX_HEAD_DIM},
        {"intermediate_size", mc->intermediate_size, ZINF_MODEL_MAX_FFN},
        {"rope_scaling.original_max_position_embeddings", mc->rope_original_max_position, ZINF_MODEL_MAX_POSITIONS},
        {"sliding_window", mc->sliding_window, ZINF_MODEL_MAX_POSITIONS},
        {"max_window_layers", mc->max_window_layers, ZINF_MODEL_MAX_LAYERS}};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
        if (sizes[i].value > sizes[i].max)
            return zinf_fail(ZINF_ERR_UNSUPPORTED, "model.%s: %lld is above zinf's limit, %lld", sizes[i].key,
                             (long long)sizes[i].value, (long long)sizes[i].max);
    return ZINF_OK;
}

zinf_status zinf_model_shape_from_config(const zinf_model_config *mc, zinf_model_shape *out) {
    if (!mc->present) return zinf_fail(ZINF_ERR_INVAL, "model: the config has no model section");
    ZINF_CHECK(sizes_in_range(mc));
    zinf_model_shape s = {.arch = mc->arch,
                          .n_layer = (int)mc->n_layer,
                          .n_head = (int)mc->n_head,
                          .n_embd = (int)mc->n_embd,
                          .vocab_size = (int)mc->vocab_size,
                          .block_size = (int)mc->block_size};
    if (s.n_head < 1) return zinf_fail(ZINF_ERR_INVAL, "model.n_head: %d is not positive", s.n_head);
    if (mc->arch == ZINF_ARCH_GPT2) {
        s = zinf_model_shape_gpt2(s.n_layer, s.n_head, s.n_embd, s.vocab_size, s.block_size);
    } else {
        s.n_kv_head = (int)mc->n_kv_head, s.head_dim = (int)mc->head_dim, s.ffn = (int)mc->intermediate_size;
        s.norm_eps = mc->norm_eps, s.tied = mc->tie_word_embeddings;
        s.rope_type = mc->rope_type, s.rope_theta = mc->rope_theta;
        if (s.rope_type != ZINF_ROPE_DEFAULT) s.rope_factor = mc->rope_factor;
        if (s.rope_type == ZINF_ROPE_LLAMA3) {
            s.rope_low_freq_factor = mc->rope_low_freq_factor, s.rope_high_freq_factor = mc->rope_high_freq_factor;
            s.rope_original_max_position =
                (int)(mc->rope_original_max_position > 0 ? mc->rope_original_max_position : mc->block_size);
        }
        if (mc->sliding_window > 0) {
            s.window = (int)mc->sliding_window;
            s.window_from = mc->max_window_layers > 0 ? (int)mc->max_window_layers : 0;
        }
        s.attention_bias = mc->attention_bias, s.mlp_bias = mc->mlp_bias;
    }
    *out = s;
    return ZINF_OK;
}

// Fields one by one: the struct has padding, which memcmp would compare.
bool zinf_model_shape_equal(const zinf_model_shape *a, const zinf_model_shape *b) {
    return a->arch == b->arch && a->n_layer == b->n_layer && a->n_head == b->n_head && a->n_embd == b->n_embd &&
           a->vocab_size == b->vocab_size && a->block_size == b->block_size && a->n_kv_head == b->n_kv_head &&
           a->head_dim == b->head_dim && a->ffn == b->ffn && a->norm_eps == b->norm_eps &&
           a->rope_type == b->rope_type && a->rope_theta == b->rope_theta && a->rope_factor == b->rope_factor &&
           a->rope_low_freq_factor == b->rope_low_freq_factor &&
           a->rope_high_freq_factor == b->rope_high_freq_factor &&
           a->rope_original_max_position == b->rope_original_max_position && a->window == b->window &&
           a->window_from == b->window_from && a->tied == b->tied && a->attention_bias == b->attention_bias &&
           a->mlp_bias == b->mlp_bias;
}

void zinf_model_shape_describe(const zinf_model_shape *s, char *out, size_t len) {
    if (s->arch == ZINF_ARCH_GPT2) {
        snprintf(out, len, "GPT n_layer %d n_head %d n_embd %d vocab %d", s->n_layer, s->n_head, s->n_embd,
                 s->vocab_size);
        return;
    }
    char window[32] = "";
    if (s->window) snprintf(window, sizeof window, " window %d", s->window);
    snprintf(out, len, "%s n_layer %d n_head %d kv %d head_dim %d n_embd %d ffn %d vocab %d rope %s%s%s",
             arch_names[s->arch], s->n_layer, s->n_head, s->n_kv_head, s->head_dim, s->n_embd, s->ffn, s->vocab_size,
             rope_names[s->rope_type], window, s->tied ? " tied" : "");
}

// ---- checkpoints ----
// The model section's names; GPT-2's five sizes alone (what older checkpoints hold).

zinf_status zinf_model_shape_to_json(const zinf_model_shape *s, char **json) {
    json_t *o = json_pack("{s:s, s:i, s:i, s:i, s:i, s:i}", "arch", arch_names[s->arch], "n_layer", s->n_layer,
                          "n_head", s->n_head, "n_embd", s->n_embd, "vocab_size", s->vocab_size, "block_size",
                          s->block_size);
    if (o && s->arch != ZINF_ARCH_GPT2) {
        json_t *rope = json_pack("{s:s, s:f, s:f, s:f, s:i}", "rope_type", rope_names[s->rope_type], "factor",
                                 s->rope_factor, "low_freq_factor", s->rope_low_freq_factor, "high_freq_factor",
                                 s->rope_high_freq_factor, "original_max_position_embeddings",
                                 s->rope_original_max_position);
        json_t *more = json_pack("{s:i, s:i, s:i, s:f, s:f, s:o, s:i, s:i, s:b, s:b, s:b}", "n_kv_head", s->n_kv_head,
                                 "head_dim", s->head_dim, "intermediate_size", s->ffn, "norm_eps", s->norm_eps,
                                 "rope_theta", s->rope_theta, "rope_scaling", rope, "sliding_window", s->window,
                                 "max_window_layers", s->window_from, "tie_word_embeddings", s->tied,
                                 "attention_bias", s->attention_bias, "mlp_bias", s->mlp_bias);
        if (!more || json_object_update(o, more) != 0) json_decref(o), o = NULL;
        json_decref(more);
    }
    *json = o ? json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(17)) : NULL;
    json_decref(o);
    return *json ? ZINF_OK : zinf_fail(ZINF_ERR_NOMEM, "model: out of memory");
}

// Within the config's limits (ZINF_MODEL_MAX_*), so that what a checkpoint holds is a
// model the config could have given.
// Each sets *bad to its key when it fails, for the message.
static bool int_key(const char **bad, json_t *o, const char *k, int min, int max, int *out) {
    json_t *v = json_object_get(o, k);
    if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max) return *bad = k, false;
    *out = (int)json_integer_value(v);
    return true;
}

static bool real_key(const char **bad, json_t *o, const char *k, double *out) {
    json_t *v = json_object_get(o, k);
    if (!json_is_number(v)) return *bad = k, false;
    *out = json_number_value(v);
    return true;
}

static bool name_key(const char **bad, json_t *o, const char *k, const char *const *names, int n, int *out) {
    const char *v = json_string_value(json_object_get(o, k));
    for (int i = 0; v && i < n; i++)
        if (strcmp(v, names[i]) == 0) return *out = i, true;
    return *bad = k, false;
}

static bool bool_key(const char **bad, json_t *o, const char *k, bool *out) {
    json_t *v = json_object_get(o, k);
    if (!json_is_boolean(v)) return *bad = k, false;
    *out = json_is_true(v);
    return true;
}

zinf_status zinf_model_shape_from_json(const char *json, const char *where, zinf_model_shape *out) {
    json_t *o = json_loads(json, 0, NULL);
    zinf_model_shape s = {0};
    int arch = ZINF_ARCH_GPT2;
    const char *bad = "its text";
    bool ok = o && json_is_object(o) &&
              (!json_object_get(o, "arch") || name_key(&bad, o, "arch", arch_names, 4, &arch)) &&
              int_key(&bad, o, "n_layer", 1, ZINF_MODEL_MAX_LAYERS, &s.n_layer) &&
              int_key(&bad, o, "n_head", 1, ZINF_MODEL_MAX_HEADS, &s.n_head) &&
              int_key(&bad, o, "n_embd", 1, ZINF_MODEL_MAX_EMBD, &s.n_embd) &&
              int_key(&bad, o, "vocab_size", 1, ZINF_MODEL_MAX_VOCAB, &s.vocab_size) &&
              int_key(&bad, o, "block_size", 1, ZINF_MODEL_MAX_BLOCK, &s.block_size);
    s.arch = (zinf_model_arch)arch;
    if (ok && arch == ZINF_ARCH_GPT2) {
        s = zinf_model_shape_gpt2(s.n_layer, s.n_head, s.n_embd, s.vocab_size, s.block_size);
    } else if (ok) {
        json_t *r = json_object_get(o, "rope_scaling");
        int rt = 0;
        ok = int_key(&bad, o, "n_kv_head", 1, ZINF_MODEL_MAX_HEADS, &s.n_kv_head) &&
             int_key(&bad, o, "head_dim", 1, ZINF_MODEL_MAX_HEAD_DIM, &s.head_dim) &&
             int_key(&bad, o, "intermediate_size", 1, ZINF_MODEL_MAX_FFN, &s.ffn) &&
             real_key(&bad, o, "norm_eps", &s.norm_eps) && real_key(&bad, o, "rope_theta", &s.rope_theta) &&
             name_key(&bad, r, "rope_type", rope_names, 4, &rt) && real_key(&bad, r, "factor", &s.rope_factor) &&
             real_key(&bad, r, "low_freq_factor", &s.rope_low_freq_factor) &&
             real_key(&bad, r, "high_freq_factor", &s.rope_high_freq_factor) &&
             int_key(&bad, r, "original_max_position_embeddings", 0, ZINF_MODEL_MAX_POSITIONS,
                     &s.rope_original_max_position) &&
             int_key(&bad, o, "sliding_window", 0, ZINF_MODEL_MAX_POSITIONS, &s.window) &&
             int_key(&bad, o, "max_window_layers", 0, ZINF_MODEL_MAX_LAYERS, &s.window_from) &&
             bool_key(&bad, o, "tie_word_embeddings", &s.tied) &&
             bool_key(&bad, o, "attention_bias", &s.attention_bias) && bool_key(&bad, o, "mlp_bias", &s.mlp_bias);
        s.rope_type = (zinf_rope_type)rt;
    }
    json_decref(o);
    if (!ok) return zinf_fail(ZINF_ERR_CORRUPT, "%s: the model object is malformed: %s", where, bad);
    *out = s;
    return ZINF_OK;
}

// ---- weights files ----

zinf_status zinf_model_shape_from_file(const char *path, zinf_model_shape *out) {
    struct stat sb;
    zinf_model_config mc = {.present = true,
                            .n_layer = -1,
                            .n_head = -1,
                            .n_embd = -1,
                            .vocab_size = -1,
                            .block_size = -1,
                            .n_kv_head = -1,
                            .head_dim = -1,
                            .intermediate_size = -1,
                            .rope_original_max_position = -1,
                            .sliding_window = -1,
                            .max_window_layers = -1};
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) { // a model directory: its config.json
        ZINF_CHECK(zinf_config_model_from_hf(path, &mc));
        zinf_status rc = zinf_model_shape_from_config(&mc, out);
        return rc == ZINF_OK ? rc : zinf_fail(rc, "%s/config.json: %s", path, zinf_last_error());
    }
    zinf_safetensors *st;
    ZINF_CHECK(zinf_safetensors_open(&st, path));
    const zinf_st_tensor *wte = NULL, *wpe = NULL;
    int64_t layers = 0;
    for (int i = 0; i < zinf_safetensors_count(st); i++) {
        const zinf_st_tensor *t = zinf_safetensors_at(st, i);
        const char *name = strncmp(t->name, "transformer.", 12) == 0 ? t->name + 12 : t->name;
        int l;
        if (strcmp(name, "wte.weight") == 0) wte = t;
        if (strcmp(name, "wpe.weight") == 0) wpe = t;
        if (sscanf(name, "h.%d.", &l) == 1 && l >= layers) layers = (int64_t)l + 1;
    }
    zinf_status rc = ZINF_OK;
    if (!wte || !wpe || wte->ndim != 2 || wpe->ndim != 2 || layers == 0)
        rc = zinf_fail(ZINF_ERR_INVAL,
                       "%s: not a GPT-2 weights file (needs wte.weight, wpe.weight and h.N blocks); a Llama-family "
                       "model comes as a directory with its config.json",
                       path);
    else if (wte->shape[1] % 64)
        rc = zinf_fail(ZINF_ERR_INVAL,
                       "%s: n_embd %lld is not a multiple of 64; give the shape in the config's model section", path,
                       (long long)wte->shape[1]);
    if (rc == ZINF_OK) {
        mc.n_layer = layers, mc.n_head = wte->shape[1] / 64, mc.n_embd = wte->shape[1];
        mc.vocab_size = wte->shape[0], mc.block_size = wpe->shape[0];
        rc = zinf_model_shape_from_config(&mc, out);
        if (rc != ZINF_OK) rc = zinf_fail(rc, "%s: %s", path, zinf_last_error());
    }
    zinf_safetensors_close(st);
    return rc;
}
