// A model's weights in safetensors files, by Hugging Face's names: read into module
// buffers of any storage dtype, and written with the state dict's names (the family's
// prefix, a tied lm_head left out, as save_pretrained writes them).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_internal.h"
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
    size_t pre = strlen(m->fam->hf_prefix);
    if (pre && strncmp(name, m->fam->hf_prefix, pre) == 0) name += pre;
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
        if (m->fam->hf_skip && m->fam->hf_skip(t->name)) continue;
        if (m->p.shape.tied && strcmp(t->name, "lm_head.weight") == 0) {
            lm_head = t;
            continue;
        }
        int mod;
        const zinf_param_info *p = zinf_model_find_param(m, t->name, &mod);
        if (!p) {
            rc = zinf_fail(ZINF_ERR_INVAL, "%s: tensor %s is not a parameter of this %s (n_layer %d%s)", file, t->name,
                           m->fam->name, m->p.shape.n_layer, m->p.shape.tied ? ", tied head" : "");
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
    // A tied model has no head of its own: accept lm_head.weight only as a copy of the
    // embedding (some files store both).
    if (rc == ZINF_OK && lm_head) {
        const char *emb = m->mods[MOD_EMBEDDING].params[0].name;
        char full[96];
        zinf_model_hf_name(&m->p.shape, emb, full, sizeof full);
        const zinf_st_tensor *e = zinf_hf_weights_find(w, full, NULL);
        if (!e) e = zinf_hf_weights_find(w, emb, NULL);
        if (!e || e->nbytes != lm_head->nbytes || e->dtype != lm_head->dtype ||
            memcmp(e->data, lm_head->data, e->nbytes) != 0)
            rc = zinf_fail(ZINF_ERR_UNSUPPORTED,
                           "%s: lm_head.weight differs from %s, but the model ties its head to the embedding%s", path,
                           full, m->p.shape.arch == ZINF_ARCH_GPT2 ? " (every GPT-2 does)" : " (tie_word_embeddings)");
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
    char(*names)[96] = calloc((size_t)total, sizeof *names);
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
            zinf_model_hf_name(&m->p.shape, p->name, names[k], sizeof names[k]);
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
