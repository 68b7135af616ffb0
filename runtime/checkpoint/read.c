// Reading a checkpoint (zinf_checkpoint.h): meta.json checked whole, the rank files
// opened as they are needed, and slices streamed with their checksums checked, so
// neither loading nor consolidation ever holds more than a buffer of it.
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "zinf_checkpoint.h"
#include "zinf_internal.h"

struct zinf_ckpt {
    char dir[PATH_MAX];
    zinf_ckpt_info info;
    zinf_safetensors **files; // per saved rank, NULL until needed
};

static const char *const state_names[ZINF_CKPT_NSTATES] = {"master", "exp_avg", "exp_avg_sq", "params"};

const char *zinf_ckpt_state_name(zinf_ckpt_state s) {
    return s >= 0 && s < ZINF_CKPT_NSTATES ? state_names[s] : "?";
}

void zinf_ckpt_close(zinf_ckpt *c) {
    if (!c) return;
    for (int r = 0; c->files && r < c->info.world_size; r++)
        zinf_safetensors_close(c->files[r]);
    for (int i = 0; c->info.mods && i < c->info.nmod; i++)
        free(c->info.mods[i].params);
    free(c->info.mods), free(c->files), free(c);
}

const zinf_ckpt_info *zinf_ckpt_info_of(const zinf_ckpt *c) { return &c->info; }
const char *zinf_ckpt_dir(const zinf_ckpt *c) { return c->dir; }

static bool is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

// path itself when it holds meta.json, else the step directory its `latest` names.
static zinf_status resolve(const char *path, char *dir) {
    char p[PATH_MAX + 16];
    snprintf(p, sizeof p, "%s/meta.json", path);
    if (access(p, F_OK) == 0) {
        if (snprintf(dir, PATH_MAX, "%s", path) >= PATH_MAX)
            return zinf_fail(ZINF_ERR_INVAL, "checkpoint %s: the path is too long", path);
        return ZINF_OK;
    }
    if (!is_dir(path)) return zinf_fail(ZINF_ERR_INVAL, "checkpoint %s: no such directory", path);
    snprintf(p, sizeof p, "%s/latest", path);
    FILE *f = fopen(p, "r");
    if (!f)
        return zinf_fail(ZINF_ERR_INVAL,
                         "checkpoint %s: neither a step directory (no meta.json) nor a checkpoint root (no latest "
                         "file)",
                         path);
    char tag[256] = "";
    bool ok = fgets(tag, sizeof tag, f) != NULL;
    fclose(f);
    tag[strcspn(tag, "\r\n")] = 0;
    if (!ok || !tag[0] || strchr(tag, '/'))
        return zinf_fail(ZINF_ERR_CORRUPT, "checkpoint %s: latest does not name a step directory", p);
    snprintf(p, sizeof p, "%s/%s", path, tag);
    if (!is_dir(p))
        return zinf_fail(ZINF_ERR_CORRUPT, "checkpoint %s: latest names %s, which is missing", path, tag);
    if (snprintf(dir, PATH_MAX, "%s", p) >= PATH_MAX)
        return zinf_fail(ZINF_ERR_INVAL, "checkpoint %s: the path is too long", p);
    return ZINF_OK;
}

// Fields of meta.json, each failure naming the key.
enum { MAX_RANKS = 1 << 20 }; // far past any run; a world size beyond it is damage
typedef struct meta_ctx {
    const char *path;
    zinf_status st;
} meta_ctx;

static json_t *get(meta_ctx *m, json_t *obj, const char *key, const char *where) {
    json_t *v = json_object_get(obj, key);
    if (!v && m->st == ZINF_OK)
        m->st = zinf_fail(ZINF_ERR_CORRUPT, "%s: %s%s is missing", m->path, where, key);
    return v;
}

// An integer from lo to hi; 0 when it is not (m->st says why).
static int64_t get_int(meta_ctx *m, json_t *obj, const char *key, const char *where, int64_t lo, int64_t hi) {
    json_t *v = get(m, obj, key, where);
    bool ok = v && json_is_integer(v) && json_integer_value(v) >= lo && json_integer_value(v) <= hi;
    if (v && !ok && m->st == ZINF_OK) {
        if (hi == INT64_MAX)
            m->st =
                zinf_fail(ZINF_ERR_CORRUPT, "%s: %s%s is not an integer >= %lld", m->path, where, key, (long long)lo);
        else
            m->st = zinf_fail(ZINF_ERR_CORRUPT, "%s: %s%s is not an integer from %lld to %lld", m->path, where, key,
                              (long long)lo, (long long)hi);
    }
    return ok ? json_integer_value(v) : 0;
}

static zinf_status parse_modules(meta_ctx *m, json_t *mods, zinf_ckpt_info *in) {
    if (!json_is_array(mods) || json_array_size(mods) == 0 || json_array_size(mods) > 100000)
        return zinf_fail(ZINF_ERR_CORRUPT, "%s: modules is not a list of modules", m->path);
    in->nmod = (int)json_array_size(mods);
    if (!(in->mods = calloc((size_t)in->nmod, sizeof *in->mods))) return zinf_fail(ZINF_ERR_NOMEM, "out of memory");
    for (int i = 0; i < in->nmod && m->st == ZINF_OK; i++) {
        json_t *mo = json_array_get(mods, (size_t)i), *ps;
        zinf_ckpt_module *d = &in->mods[i];
        const char *name = json_string_value(get(m, mo, "name", "modules[]."));
        d->numel = get_int(m, mo, "numel", "modules[].", 0, INT64_MAX);
        d->slice = get_int(m, mo, "slice", "modules[].", 0, INT64_MAX);
        ps = get(m, mo, "params", "modules[].");
        if (m->st != ZINF_OK) break;
        if (!name || strlen(name) >= sizeof d->name || !json_is_array(ps))
            return zinf_fail(ZINF_ERR_CORRUPT, "%s: modules[%d] is malformed", m->path, i);
        // The slices cover the module, and every rank's start, r * slice, is a number.
        int64_t covered;
        bool wraps = __builtin_mul_overflow(d->slice, (int64_t)in->world_size, &covered);
        if (wraps || covered < d->numel)
            return zinf_fail(ZINF_ERR_CORRUPT, "%s: module %s: slice %lld x world_size %d %s its %lld elements",
                             m->path, name, (long long)d->slice, in->world_size,
                             wraps ? "overflows, for" : "is fewer than", (long long)d->numel);
        snprintf(d->name, sizeof d->name, "%s", name);
        d->nparams = (int)json_array_size(ps);
        if (!(d->params = calloc((size_t)d->nparams + 1, sizeof *d->params)))
            return zinf_fail(ZINF_ERR_NOMEM, "out of memory");
        for (int j = 0; j < d->nparams && m->st == ZINF_OK; j++) {
            json_t *p = json_array_get(ps, (size_t)j), *shape = get(m, p, "shape", "params[].");
            zinf_param_info *q = &d->params[j];
            const char *pn = json_string_value(get(m, p, "name", "params[]."));
            q->offset = (size_t)get_int(m, p, "offset", "params[].", 0, INT64_MAX);
            if (m->st != ZINF_OK) break;
            size_t nd = json_array_size(shape);
            if (!pn || strlen(pn) >= sizeof q->name || nd < 1 || nd > 2)
                return zinf_fail(ZINF_ERR_CORRUPT, "%s: module %s: params[%d] is malformed", m->path, name, j);
            snprintf(q->name, sizeof q->name, "%s", pn);
            q->ndim = (int)nd;
            q->numel = 1;
            for (size_t k = 0; k < nd; k++) {
                json_int_t x = json_integer_value(json_array_get(shape, k));
                if (x <= 0) return zinf_fail(ZINF_ERR_CORRUPT, "%s: %s: a bad shape", m->path, pn);
                // Never more elements than the module holds, so the product cannot wrap.
                if ((uint64_t)x > (uint64_t)d->numel / q->numel)
                    return zinf_fail(ZINF_ERR_CORRUPT, "%s: %s has a shape larger than module %s (%lld elements)",
                                     m->path, pn, name, (long long)d->numel);
                q->shape[k] = x;
                q->numel *= (size_t)x;
            }
            if (q->offset + q->numel > (size_t)d->numel)
                return zinf_fail(ZINF_ERR_CORRUPT, "%s: %s lies outside module %s", m->path, pn, name);
        }
    }
    return m->st;
}

static zinf_status parse_meta(zinf_ckpt *c) {
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/meta.json", c->dir);
    json_error_t err;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &err);
    if (!root) return zinf_fail(ZINF_ERR_CORRUPT, "%s: %s (line %d)", path, err.text, err.line);
    meta_ctx m = {path, ZINF_OK};
    zinf_ckpt_info *in = &c->info;
    const char *fmt = json_string_value(json_object_get(root, "format"));
    if (!fmt || strcmp(fmt, "zinf-checkpoint") != 0) {
        m.st = zinf_fail(ZINF_ERR_CORRUPT, "%s: not a zinf checkpoint (\"format\" is not \"zinf-checkpoint\")", path);
    } else {
        int64_t v = get_int(&m, root, "version", "", 1, INT64_MAX);
        if (m.st == ZINF_OK && v > ZINF_CKPT_VERSION)
            m.st = zinf_fail(ZINF_ERR_UNSUPPORTED, "%s: format version %lld; this zinf reads version %d and older",
                             path, (long long)v, ZINF_CKPT_VERSION);
    }
    in->step = get_int(&m, root, "step", "", 0, INT64_MAX);
    in->steps_applied = get_int(&m, root, "steps_applied", "", 0, INT64_MAX);
    // Bounded before it sizes anything: a rank file per rank is opened and allocated for.
    in->world_size = (int)get_int(&m, root, "world_size", "", 1, MAX_RANKS);
    in->zero_stage = (int)get_int(&m, root, "zero_stage", "", 0, 3);
    const char *dt = json_string_value(get(&m, root, "dtype", ""));
    in->dtype = !dt ? ZINF_DTYPE_NONE
              : strcmp(dt, "fp32") == 0 ? ZINF_DTYPE_F32
              : strcmp(dt, "bf16") == 0 ? ZINF_DTYPE_BF16
              : strcmp(dt, "fp16") == 0 ? ZINF_DTYPE_F16
                                        : ZINF_DTYPE_NONE;
    if (m.st == ZINF_OK && in->dtype == ZINF_DTYPE_NONE)
        m.st = zinf_fail(ZINF_ERR_CORRUPT, "%s: dtype is not fp32, bf16 or fp16", path);
    json_t *model = get(&m, root, "model", "");
    char *shape = model ? json_dumps(model, JSON_COMPACT | JSON_REAL_PRECISION(17)) : NULL;
    if (m.st == ZINF_OK) m.st = shape ? zinf_model_shape_from_json(shape, path, &in->shape) : zinf_fail(ZINF_ERR_NOMEM, "%s: out of memory", path);
    free(shape);
    json_t *ls = get(&m, root, "loss_scaler", "");
    json_t *scale = get(&m, ls, "scale", "loss_scaler.");
    in->scale = json_number_value(scale);
    if (m.st == ZINF_OK && !(in->scale > 0))
        m.st = zinf_fail(ZINF_ERR_CORRUPT, "%s: loss_scaler.scale is not a positive number", path);
    in->cur_iter = get_int(&m, ls, "cur_iter", "loss_scaler.", 0, INT64_MAX);
    in->last_overflow_iter = get_int(&m, ls, "last_overflow_iter", "loss_scaler.", -1, INT64_MAX);
    in->cur_hysteresis = get_int(&m, ls, "cur_hysteresis", "loss_scaler.", 0, INT64_MAX);
    json_t *data = get(&m, root, "data", "");
    in->data_position = get_int(&m, data, "position", "data.", 0, INT64_MAX);
    in->seed = get_int(&m, data, "seed", "data.", INT64_MIN, INT64_MAX);
    json_t *mods = get(&m, root, "modules", "");
    if (m.st == ZINF_OK) m.st = parse_modules(&m, mods, in);
    json_decref(root);
    return m.st;
}

zinf_status zinf_ckpt_open(zinf_ckpt **out, const char *path) {
    *out = NULL;
    zinf_ckpt *c = calloc(1, sizeof *c);
    if (!c) return zinf_fail(ZINF_ERR_NOMEM, "checkpoint %s: out of memory", path);
    zinf_status s = resolve(path, c->dir);
    if (s == ZINF_OK) s = parse_meta(c);
    if (s == ZINF_OK && !(c->files = calloc((size_t)c->info.world_size, sizeof *c->files)))
        s = zinf_fail(ZINF_ERR_NOMEM, "checkpoint %s: out of memory", path);
    // Every rank's file, up front: a missing rank is named before anything is read.
    for (int r = 0; s == ZINF_OK && r < c->info.world_size; r++) {
        char f[PATH_MAX + 32];
        snprintf(f, sizeof f, "%s/rank%d.safetensors", c->dir, r);
        if (access(f, R_OK) != 0)
            s = zinf_fail(ZINF_ERR_CORRUPT, "checkpoint %s: %s is missing (the checkpoint was saved by %d ranks)",
                          c->dir, f, c->info.world_size);
    }
    if (s != ZINF_OK) {
        zinf_ckpt_close(c);
        return s;
    }
    *out = c;
    return ZINF_OK;
}

// Rank r's file, opened and checked (header, rank, world size) on first use.
static zinf_status rank_file(zinf_ckpt *c, int r, zinf_safetensors **out) {
    if (!c->files[r]) {
        char f[PATH_MAX + 32];
        snprintf(f, sizeof f, "%s/rank%d.safetensors", c->dir, r);
        ZINF_CHECK(zinf_safetensors_open(&c->files[r], f));
        const char *rk = zinf_safetensors_meta(c->files[r], "zinf.rank");
        const char *ws = zinf_safetensors_meta(c->files[r], "zinf.world_size");
        if (!rk || !ws || atoi(rk) != r || atoi(ws) != c->info.world_size) {
            zinf_safetensors_close(c->files[r]);
            c->files[r] = NULL;
            return zinf_fail(ZINF_ERR_CORRUPT, "%s: not rank %d of %d of this checkpoint (its metadata says rank %s of %s)",
                             f, r, c->info.world_size, rk ? rk : "?", ws ? ws : "?");
        }
    }
    *out = c->files[r];
    return ZINF_OK;
}

typedef struct span {
    zinf_ckpt_sink fn;
    void *arg;
    size_t first;         // flat index of the tensor's element 0
    size_t lo, hi;        // the range wanted
    size_t es;
} span;

// The part of a streamed chunk inside [lo, hi).
static zinf_status clip(void *arg, uint64_t off, const void *p, size_t n) {
    span *s = arg;
    size_t a = s->first + (size_t)off / s->es, b = a + n / s->es;
    size_t x = a > s->lo ? a : s->lo, y = b < s->hi ? b : s->hi;
    return x < y ? s->fn(s->arg, x, (const char *)p + (x - a) * s->es, y - x) : ZINF_OK;
}

zinf_status zinf_ckpt_read(zinf_ckpt *c, int mod, zinf_ckpt_state state, size_t lo, size_t hi, void *buf,
                           size_t buf_bytes, zinf_ckpt_sink fn, void *arg) {
    const zinf_ckpt_info *in = &c->info;
    if (mod < 0 || mod >= in->nmod || state < 0 || state >= ZINF_CKPT_NSTATES || hi > (size_t)in->mods[mod].numel)
        return zinf_fail(ZINF_ERR_INVAL, "checkpoint %s: no module %d / state %d / range [%zu, %zu)", c->dir, mod,
                         (int)state, lo, hi);
    zinf_dtype dt = state == ZINF_CKPT_PARAMS ? in->dtype : ZINF_DTYPE_F32;
    if (state == ZINF_CKPT_PARAMS && dt == ZINF_DTYPE_F32)
        return zinf_fail(ZINF_ERR_INVAL, "checkpoint %s: an fp32 model has no 16-bit parameters", c->dir);
    const zinf_ckpt_module *m = &in->mods[mod];
    size_t es = zinf_dtype_size(dt), slice = (size_t)m->slice, numel = (size_t)m->numel;
    // Every element of a buffer chunk is whole.
    buf_bytes -= buf_bytes % es;
    char name[64];
    snprintf(name, sizeof name, "%s.%s", m->name, state_names[state]);
    for (int r = 0; r < in->world_size && lo < hi; r++) {
        size_t a = (size_t)r * slice < numel ? (size_t)r * slice : numel;
        size_t b = a + slice < numel ? a + slice : numel;
        if (b <= lo || a >= hi) continue;
        zinf_safetensors *f;
        ZINF_CHECK(rank_file(c, r, &f));
        const zinf_st_tensor *t = zinf_safetensors_find(f, name);
        char key[96];
        snprintf(key, sizeof key, "crc32:%s", name);
        if (!t || !zinf_safetensors_meta(f, key))
            return zinf_fail(ZINF_ERR_CORRUPT, "%s/rank%d.safetensors: tensor \"%s\" is missing%s", c->dir, r, name,
                             t ? " its checksum" : "");
        if (t->dtype != dt || t->nbytes != (b - a) * es)
            return zinf_fail(ZINF_ERR_CORRUPT,
                             "%s/rank%d.safetensors: tensor \"%s\": %llu bytes of %s, want %zu elements of %s "
                             "(elements %zu..%zu of the module)",
                             c->dir, r, name, (unsigned long long)t->nbytes, zinf_dtype_name(t->dtype), b - a,
                             zinf_dtype_name(dt), a, b);
        span s = {fn, arg, a, lo, hi, es};
        ZINF_CHECK(zinf_safetensors_stream(f, t, buf, buf_bytes, clip, &s));
    }
    return ZINF_OK;
}
