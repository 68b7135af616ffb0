// A checkpoint's model as Hugging Face files (zinf_checkpoint.h): one safetensors file,
// or a model directory as save_pretrained writes it (config.json, then the weights in
// one file or in shards with an index). Every tensor streams from the rank files a
// module at a time through two small buffers, so memory does not grow with the model.
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "zinf_checkpoint.h"
#include "zinf_half.h"
#include "zinf_internal.h"

enum { CHUNK_BYTES = 1 << 20 }; // each of the two buffers

// The model's tensors module by module, named and shaped as the family's state dict has
// them, the tied lm_head left out as save_pretrained leaves it; hf lists them in the
// state dict's order, which files and shards follow.
typedef struct exporter {
    zinf_ckpt *ck;
    const zinf_ckpt_info *in;
    zinf_ckpt_state state;
    zinf_dtype from, to; // the state's dtype in the checkpoint, and the files'
    int n;
    int *mod_of; // each tensor's module; its parameter is k - first tensor of that module
    int *first;  // each module's first tensor
    zinf_st_tensor *t;
    int *hf;
    char (*names)[96];
    void *buf, *conv;
    zinf_progress progress; // bytes written of the files' tensors
} exporter;

typedef struct out_ctx {
    exporter *x;
    zinf_st_writer *w;
    const zinf_ckpt_module *mod;
    int next, end; // the module's parameters [next, end) still to go out
} out_ctx;

static zinf_status append_as(exporter *x, zinf_st_writer *w, const char *src, size_t n) {
    size_t os = zinf_dtype_size(x->to), per = CHUNK_BYTES / os;
    zinf_progress_add(&x->progress, (int64_t)(n * os));
    if (x->from == x->to) return zinf_st_writer_append(w, src, n * os);
    for (size_t at = 0; at < n; at += per) {
        size_t m = n - at < per ? n - at : per;
        for (size_t i = 0; i < m; i++)
            dt_store(x->conv, x->to, i, dt_load(src, x->from, at + i));
        ZINF_CHECK(zinf_st_writer_append(w, x->conv, m * os));
    }
    return ZINF_OK;
}

// Elements [off, off + n) of the module's flat buffer arrive in order: the parts of
// its parameters among them go out, in order (the alignment gaps between them do not).
static zinf_status emit(void *arg, size_t off, const void *p, size_t n) {
    out_ctx *c = arg;
    size_t es = zinf_dtype_size(c->x->from);
    for (int j = c->next; j < c->end; j++) {
        const zinf_param_info *q = &c->mod->params[j];
        if (q->offset >= off + n) break;
        size_t a = q->offset > off ? q->offset : off,
               b = q->offset + q->numel < off + n ? q->offset + q->numel : off + n;
        if (a >= b) continue;
        ZINF_CHECK(append_as(c->x, c->w, (const char *)p + (a - off) * es, b - a));
        if (b == q->offset + q->numel) c->next = j + 1;
    }
    return ZINF_OK;
}

// Tensors idx[0 .. count) into the file at path, in that order; the metadata names the
// checkpoint's step. A run of consecutive tensors of one module streams in one read, so each
// rank tensor is read once.
static zinf_status write_file_of(exporter *x, const char *path, const int *idx, int count) {
    zinf_st_tensor *t = calloc((size_t)count + 1, sizeof *t);
    if (!t) return zinf_fail(ZINF_ERR_NOMEM, "export: out of memory");
    for (int i = 0; i < count; i++)
        t[i] = x->t[idx[i]];
    char step[32];
    snprintf(step, sizeof step, "%lld", (long long)x->in->step);
    const char *meta[] = {"zinf.checkpoint_step", step};
    zinf_st_writer *w;
    zinf_status s = zinf_st_writer_open(&w, path, t, count, meta, 1);
    free(t);
    ZINF_CHECK(s);
    for (int i = 0; s == ZINF_OK && i < count;) {
        int k = idx[i], mod = x->mod_of[k], run = 1;
        while (i + run < count && idx[i + run] == k + run && x->mod_of[k + run] == mod)
            run++;
        const zinf_ckpt_module *m = &x->in->mods[mod];
        int j0 = k - x->first[mod], j1 = j0 + run;
        out_ctx c = {x, w, m, j0, j1};
        size_t lo = m->params[j0].offset, hi = m->params[j1 - 1].offset + m->params[j1 - 1].numel;
        s = zinf_ckpt_read(x->ck, mod, x->state, lo, hi, x->buf, CHUNK_BYTES, emit, &c);
        i += run;
    }
    if (s != ZINF_OK) {
        zinf_st_writer_abort(w);
        return s;
    }
    return zinf_st_writer_finish(w);
}

static void exporter_free(exporter *x) {
    free(x->mod_of), free(x->first), free(x->t), free(x->hf), free(x->names), free(x->buf), free(x->conv);
}

// Sort by the state dict's place, the table's order between equals.
static int by_rank(const void *a, const void *b, void *arg) {
    const exporter *x = arg;
    int i = *(const int *)a, j = *(const int *)b;
    int64_t ri = zinf_model_hf_rank(&x->in->shape, x->t[i].name), rj = zinf_model_hf_rank(&x->in->shape, x->t[j].name);
    return ri != rj ? (ri > rj) - (ri < rj) : (i > j) - (i < j);
}

static zinf_status exporter_init(exporter *x, zinf_ckpt *ck, zinf_ckpt_state state, zinf_dtype dt) {
    const zinf_ckpt_info *in = zinf_ckpt_info_of(ck);
    if (state != ZINF_CKPT_MASTER && state != ZINF_CKPT_PARAMS)
        return zinf_fail(ZINF_ERR_INVAL, "export: the weights are the master or the 16-bit parameters");
    if (state == ZINF_CKPT_PARAMS && in->dtype == ZINF_DTYPE_F32)
        return zinf_fail(ZINF_ERR_INVAL, "export: %s holds an fp32 model: no 16-bit parameters", zinf_ckpt_dir(ck));
    if (dt != ZINF_DTYPE_F32 && dt != ZINF_DTYPE_BF16 && dt != ZINF_DTYPE_F16)
        return zinf_fail(ZINF_ERR_INVAL, "export: dtype %s; use fp32, bf16 or fp16", zinf_dtype_name(dt));
    *x = (exporter){.ck = ck, .in = in, .state = state, .to = dt};
    x->from = state == ZINF_CKPT_MASTER ? ZINF_DTYPE_F32 : in->dtype;
    for (int i = 0; i < in->nmod; i++)
        x->n += in->mods[i].nparams;
    x->mod_of = calloc((size_t)x->n + 1, sizeof *x->mod_of);
    x->first = calloc((size_t)in->nmod + 1, sizeof *x->first);
    x->t = calloc((size_t)x->n, sizeof *x->t);
    x->hf = calloc((size_t)x->n + 1, sizeof *x->hf);
    x->names = calloc((size_t)x->n, sizeof *x->names);
    x->buf = malloc(CHUNK_BYTES), x->conv = malloc(CHUNK_BYTES);
    if (!x->mod_of || !x->first || !x->t || !x->hf || !x->names || !x->buf || !x->conv) {
        exporter_free(x);
        return zinf_fail(ZINF_ERR_NOMEM, "export: out of memory");
    }
    for (int i = 0, k = 0; i < in->nmod; i++) {
        x->first[i] = k;
        for (int j = 0; j < in->mods[i].nparams; j++, k++) {
            const zinf_param_info *q = &in->mods[i].params[j];
            x->mod_of[k] = i;
            zinf_model_hf_name(&in->shape, q->name, x->names[k], sizeof x->names[k]);
            x->t[k] = (zinf_st_tensor){
                .name = x->names[k], .dtype = dt, .ndim = q->ndim, .nbytes = q->numel * zinf_dtype_size(dt)};
            memcpy(x->t[k].shape, q->shape, sizeof q->shape);
            x->hf[k] = k;
        }
    }
    qsort_r(x->hf, (size_t)x->n, sizeof *x->hf, by_rank, x);
    int64_t total = 0;
    for (int k = 0; k < x->n; k++)
        total += (int64_t)x->t[k].nbytes;
    zinf_progress_start(&x->progress, "export: tensor bytes written", total, true);
    return ZINF_OK;
}

zinf_status zinf_ckpt_export_file(zinf_ckpt *c, const char *path, zinf_ckpt_state state, zinf_dtype dt) {
    if (!c || !path) return zinf_fail(ZINF_ERR_INVAL, "export: c and path are required");
    exporter x;
    ZINF_CHECK(exporter_init(&x, c, state, dt));
    zinf_status s = write_file_of(&x, path, x.hf, x.n);
    if (s == ZINF_OK) zinf_progress_end(&x.progress);
    exporter_free(&x);
    return s;
}

// ---- directories ----

// o as save_pretrained writes JSON (sorted keys, indent 2), synced.
static zinf_status write_json(const char *path, json_t *o) {
    char *text = o ? json_dumps(o, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(17)) : NULL;
    json_decref(o);
    if (!text) return zinf_fail(ZINF_ERR_NOMEM, "export: out of memory");
    zinf_status s = zinf_file_write_synced(path, text, strlen(text));
    free(text);
    return s;
}

// The config.json of the checkpoint's model, synced.
static zinf_status write_config(const exporter *x, const char *dir) {
    char p[PATH_MAX + 64], *text;
    snprintf(p, sizeof p, "%s/config.json", dir);
    ZINF_CHECK(zinf_model_hf_config(&x->in->shape, x->to, &text));
    zinf_status s = zinf_file_write_synced(p, text, strlen(text));
    free(text);
    return s;
}

// save_pretrained's sharding (huggingface_hub's split_state_dict_into_shards): tensors
// in state-dict order fill the current shard until the next would take it past max; a
// tensor larger than max gets a shard of its own at once, and the current one goes on.
// order[] (x->n) lists the tensors shard by shard, ends[s] where shard s ends in it;
// cur (x->n) is scratch.
static int shard_plan(const exporter *x, uint64_t max, int *order, int *ends, int *cur) {
    int n = 0, at = 0, nb = 0;
    uint64_t size = 0;
    for (int q = 0; q < x->n; q++) {
        int k = x->hf[q];
        if (x->t[k].nbytes > max) {
            order[at++] = k, ends[n++] = at;
            continue;
        }
        if (size + x->t[k].nbytes > max) {
            for (int i = 0; i < nb; i++)
                order[at++] = cur[i];
            ends[n++] = at, nb = 0, size = 0;
        }
        cur[nb++] = k, size += x->t[k].nbytes;
    }
    for (int i = 0; i < nb; i++)
        order[at++] = cur[i];
    if (nb) ends[n++] = at;
    return n;
}

static zinf_status write_index(const exporter *x, const char *dir, const int *order, const int *ends, int nshards) {
    json_t *map = json_object();
    uint64_t total = 0;
    char name[64], p[PATH_MAX + 64];
    for (int s = 0, i = 0; map && s < nshards; s++)
        for (snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", s + 1, nshards); i < ends[s]; i++) {
            json_object_set_new(map, x->t[order[i]].name, json_string(name));
            total += x->t[order[i]].nbytes;
        }
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    return write_json(
        p, map ? json_pack("{s:{s:I}, s:o}", "metadata", "total_size", (json_int_t)total, "weight_map", map) : NULL);
}

static zinf_status write_dir(exporter *x, const char *dir, uint64_t max_shard) {
    ZINF_CHECK(write_config(x, dir));
    int *order = calloc(3 * (size_t)x->n + 1, sizeof *order), *ends = order + x->n, *cur = ends + x->n;
    if (!order) return zinf_fail(ZINF_ERR_NOMEM, "export: out of memory");
    int nshards = shard_plan(x, max_shard, order, ends, cur);
    char p[PATH_MAX + 64];
    zinf_status s = ZINF_OK;
    for (int i = 0; s == ZINF_OK && i < nshards; i++) {
        if (nshards == 1)
            snprintf(p, sizeof p, "%s/model.safetensors", dir);
        else
            snprintf(p, sizeof p, "%s/model-%05d-of-%05d.safetensors", dir, i + 1, nshards);
        int from = i ? ends[i - 1] : 0;
        s = write_file_of(x, p, order + from, ends[i] - from);
    }
    if (s == ZINF_OK && nshards > 1) s = write_index(x, dir, order, ends, nshards);
    free(order);
    return s;
}

// An empty or absent directory, so that nothing of the caller's is replaced.
static zinf_status check_target(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT) return ZINF_OK;
        return zinf_fail_errno(errno, "export: %s", dir);
    }
    int entries = 0;
    for (struct dirent *de; (de = readdir(d));)
        entries += strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0;
    closedir(d);
    if (entries) return zinf_fail(ZINF_ERR_INVAL, "export: %s is not empty; give a new or empty directory", dir);
    return ZINF_OK;
}

zinf_status zinf_ckpt_export_dir(zinf_ckpt *c, const char *dir, zinf_ckpt_state state, zinf_dtype dt,
                                 uint64_t max_shard_bytes) {
    if (!c || !dir || !max_shard_bytes)
        return zinf_fail(ZINF_ERR_INVAL, "export: c, dir and max_shard_bytes are required");
    char tmp[PATH_MAX], parent[PATH_MAX];
    if (strlen(dir) + 32 > sizeof tmp) return zinf_fail(ZINF_ERR_INVAL, "export: %s: the path is too long", dir);
    ZINF_CHECK(check_target(dir));
    exporter x;
    ZINF_CHECK(exporter_init(&x, c, state, dt));
    // Written aside and renamed into place: the directory appears whole or not at all.
    snprintf(tmp, sizeof tmp, "%s.tmp-%ld", dir, (long)getpid());
    zinf_status s = mkdir(tmp, 0755) == 0 ? ZINF_OK : zinf_fail_errno(errno, "export: %s", tmp);
    if (s == ZINF_OK) s = write_dir(&x, tmp, max_shard_bytes);
    if (s == ZINF_OK) s = zinf_dir_sync(tmp);
    if (s == ZINF_OK && rename(tmp, dir) != 0) s = zinf_fail_errno(errno, "export: renaming %s to %s", tmp, dir);
    if (s != ZINF_OK) zinf_rm_tree(tmp);
    // The rename is durable once the parent is synced.
    snprintf(parent, sizeof parent, "%s", dir);
    char *slash = strrchr(parent, '/');
    if (!slash)
        snprintf(parent, sizeof parent, ".");
    else
        slash[slash == parent] = '\0'; // "/x" -> "/", "a/b" -> "a"
    if (s == ZINF_OK) s = zinf_dir_sync(parent);
    if (s == ZINF_OK) zinf_progress_end(&x.progress);
    exporter_free(&x);
    return s;
}
