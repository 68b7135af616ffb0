// GPT-2 weights in safetensors files, by Hugging Face's names: read into module
// buffers of any storage dtype, and written as a GPT2LMHeadModel file (names with the
// `transformer.` prefix, the tied lm_head left out, as save_pretrained writes it).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gpt2_internal.h"
#include "zinf_half.h"

static void convert(void *dst, zinf_dtype ddt, const void *src, zinf_dtype sdt, size_t n) {
    if (ddt == sdt) {
        memcpy(dst, src, n * zinf_dtype_size(ddt));
        return;
    }
    for (size_t i = 0; i < n; i++)
        dt_store(dst, ddt, i, dt_load(src, sdt, i));
}

const zinf_param_info *zinf_model_find_param(const zinf_model *m, const char *name, int *mod) {
    if (!m || !name) return NULL;
    if (strncmp(name, "transformer.", 12) == 0) name += 12;
    for (int i = 0; i < m->nmod; i++)
        for (int j = 0; j < m->mods[i].nparams; j++)
            if (strcmp(m->mods[i].params[j].name, name) == 0) {
                if (mod) *mod = i;
                return &m->mods[i].params[j];
            }
    return NULL;
}

static void shape_str(char *out, size_t len, int ndim, const int64_t *shape) {
    size_t at = (size_t)snprintf(out, len, "(");
    for (int i = 0; i < ndim && at < len; i++)
        at += (size_t)snprintf(out + at, len - at, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (at < len) snprintf(out + at, len - at, ")");
}

zinf_status zinf_model_read_weights(const zinf_model *m, const char *path, zinf_dtype dt, void *const *bufs) {
    zinf_hf_weights *w;
    ZINF_CHECK(zinf_hf_weights_open(&w, path));
    int total = 0;
    for (int i = 0; i < m->nmod; i++)
        total += m->mods[i].nparams;
    bool *seen = calloc((size_t)total + 1, sizeof *seen);
    zinf_status rc = seen ? ZINF_OK : zinf_fail(ZINF_ERR_NOMEM, "%s: out of memory", path);
    const zinf_st_tensor *lm_head = NULL;
    for (int i = 0; rc == ZINF_OK && i < zinf_hf_weights_count(w); i++) {
        const char *file;
        const zinf_st_tensor *t = zinf_hf_weights_at(w, i, &file);
        const char *name = strncmp(t->name, "transformer.", 12) == 0 ? t->name + 12 : t->name;
        // Old files carry the causal mask as a buffer; zinf builds the mask into the op.
        if (zinf_ends_with(name, ".attn.bias") || zinf_ends_with(name, ".attn.masked_bias")) continue;
        if (strcmp(name, "lm_head.weight") == 0) {
            lm_head = t;
            continue;
        }
        int mod;
        const zinf_param_info *p = zinf_model_find_param(m, name, &mod);
        if (!p) {
            rc = zinf_fail(ZINF_ERR_INVAL, "%s: tensor %s is not a parameter of this GPT-2 (n_layer %d)", file, t->name,
                           m->p.shape.n_layer);
            break;
        }
        char want[64], got[64];
        shape_str(want, sizeof want, p->ndim, p->shape);
        shape_str(got, sizeof got, t->ndim, t->shape);
        if (t->dtype == ZINF_DTYPE_NONE) {
            rc = zinf_fail(ZINF_ERR_INVAL, "%s: tensor %s: dtype not F32, BF16 or F16", file, t->name);
        } else if (strcmp(want, got) != 0) {
            rc = zinf_fail(ZINF_ERR_INVAL, "%s: tensor %s has shape %s; the model's config needs %s", file, t->name,
                           got, want);
        } else {
            if (bufs[mod])
                convert((char *)bufs[mod] + p->offset * zinf_dtype_size(dt), dt, t->data, t->dtype, p->numel);
            seen[p - m->params] = true;
        }
    }
    for (int i = 0; rc == ZINF_OK && i < total; i++)
        if (!seen[i]) rc = zinf_fail(ZINF_ERR_INVAL, "%s: tensor %s is missing", path, m->params[i].name);
    // An untied head cannot be represented: accept lm_head.weight only as a copy of wte.
    if (rc == ZINF_OK && lm_head) {
        const zinf_st_tensor *wte = zinf_hf_weights_find(w, "transformer.wte.weight", NULL);
        if (!wte) wte = zinf_hf_weights_find(w, "wte.weight", NULL);
        if (!wte || wte->nbytes != lm_head->nbytes || wte->dtype != lm_head->dtype ||
            memcmp(wte->data, lm_head->data, wte->nbytes) != 0)
            rc = zinf_fail(ZINF_ERR_UNSUPPORTED,
                           "%s: lm_head.weight differs from wte.weight; zinf's GPT-2 ties the head to the embedding",
                           path);
    }
    free(seen);
    zinf_hf_weights_close(w);
    return rc;
}

zinf_status zinf_model_write_weights(const zinf_model *m, const char *path, zinf_dtype file_dt, zinf_dtype buf_dt,
                                     const void *const *bufs) {
    if (file_dt != ZINF_DTYPE_F32 && file_dt != ZINF_DTYPE_BF16 && file_dt != ZINF_DTYPE_F16)
        return zinf_fail(ZINF_ERR_INVAL, "%s: weights are written as fp32, bf16 or fp16", path);
    int total = 0;
    size_t bytes = 0;
    for (int i = 0; i < m->nmod; i++) {
        total += m->mods[i].nparams;
        for (int j = 0; j < m->mods[i].nparams; j++)
            bytes += m->mods[i].params[j].numel * zinf_dtype_size(file_dt);
    }
    zinf_st_tensor *t = calloc((size_t)total, sizeof *t);
    char(*names)[64] = calloc((size_t)total, sizeof *names);
    char *data = malloc(bytes);
    zinf_status rc = ZINF_OK;
    if (!t || !names || !data) {
        rc = zinf_fail(ZINF_ERR_NOMEM, "%s: out of memory for %zu bytes of weights", path, bytes);
        goto done;
    }
    char *at = data;
    int k = 0;
    for (int i = 0; i < m->nmod; i++) {
        for (int j = 0; j < m->mods[i].nparams; j++, k++) {
            const zinf_param_info *p = &m->mods[i].params[j];
            snprintf(names[k], sizeof names[k], "transformer.%s", p->name);
            convert(at, file_dt, (const char *)bufs[i] + p->offset * zinf_dtype_size(buf_dt), buf_dt, p->numel);
            t[k] = (zinf_st_tensor){.name = names[k],
                                    .dtype = file_dt,
                                    .ndim = p->ndim,
                                    .nbytes = p->numel * zinf_dtype_size(file_dt),
                                    .data = at};
            memcpy(t[k].shape, p->shape, sizeof p->shape);
            at += t[k].nbytes;
        }
    }
    rc = zinf_safetensors_write(path, t, total);
done:
    free(t), free(names), free(data);
    return rc;
}

zinf_status zinf_gpt_shape_from_file(const char *path, zinf_gpt_shape *out) {
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) { // a model directory: its config.json
        zinf_model_config mc = {
            .present = true, .n_layer = -1, .n_head = -1, .n_embd = -1, .vocab_size = -1, .block_size = -1};
        ZINF_CHECK(zinf_config_model_from_hf(path, &mc));
        return zinf_gpt_shape_from_config(&mc, out);
    }
    zinf_safetensors *st;
    ZINF_CHECK(zinf_safetensors_open(&st, path));
    const zinf_st_tensor *wte = NULL, *wpe = NULL;
    int layers = 0;
    for (int i = 0; i < zinf_safetensors_count(st); i++) {
        const zinf_st_tensor *t = zinf_safetensors_at(st, i);
        const char *name = strncmp(t->name, "transformer.", 12) == 0 ? t->name + 12 : t->name;
        int l;
        if (strcmp(name, "wte.weight") == 0) wte = t;
        if (strcmp(name, "wpe.weight") == 0) wpe = t;
        if (sscanf(name, "h.%d.", &l) == 1 && l >= layers) layers = l + 1;
    }
    zinf_status rc = ZINF_OK;
    if (!wte || !wpe || wte->ndim != 2 || wpe->ndim != 2 || layers == 0)
        rc = zinf_fail(ZINF_ERR_INVAL, "%s: not a GPT-2 weights file (needs wte.weight, wpe.weight and h.N blocks)",
                       path);
    else if (wte->shape[1] % 64)
        rc = zinf_fail(ZINF_ERR_INVAL,
                       "%s: n_embd %lld is not a multiple of 64; give the shape in the config's model section", path,
                       (long long)wte->shape[1]);
    else
        *out = (zinf_gpt_shape){layers, (int)(wte->shape[1] / 64), (int)wte->shape[1], (int)wte->shape[0],
                                (int)wpe->shape[0]};
    zinf_safetensors_close(st);
    return rc;
}
