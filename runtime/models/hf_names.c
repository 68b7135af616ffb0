// What Hugging Face's files call a model of each family: its parameters' names and
// their order in the state dict, and its config.json (model_internal.h's hf_* entries).
#include <stdio.h>
#include <stdlib.h>

#include "model_internal.h"

void zinf_model_hf_name(const zinf_model_shape *s, const char *name, char *out, size_t len) {
    snprintf(out, len, "%s%s", family_of(s->arch)->hf_prefix, name);
}

int64_t zinf_model_hf_rank(const zinf_model_shape *s, const char *name) {
    const model_family *f = family_of(s->arch);
    return f->hf_rank ? f->hf_rank(name) : 0;
}

const char *model_torch_dtype(zinf_dtype dt) {
    return dt == ZINF_DTYPE_BF16 ? "bfloat16" : dt == ZINF_DTYPE_F16 ? "float16" : "float32";
}

zinf_status zinf_model_hf_config(const zinf_model_shape *s, zinf_dtype dt, char **json) {
    json_t *o = family_of(s->arch)->hf_config(s, dt);
    *json = o ? json_dumps(o, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(17)) : NULL;
    json_decref(o);
    return *json ? ZINF_OK : zinf_fail(ZINF_ERR_NOMEM, "model: out of memory for config.json");
}
