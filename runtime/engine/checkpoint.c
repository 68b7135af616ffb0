// Checkpoints (zinf_checkpoint.h): every rank of the partition streams its slices of
// every module from wherever they live (the device, host memory, the swap store) into
// its own file of a temporary step directory (with MiCS the first shard group writes:
// the other groups hold the same states, and the checkpoint is that of partition.ranks ranks); rank 0 adds meta.json,
// syncs, renames the directory into place and only then replaces `latest`. Loading streams back, from whichever saved
// ranks hold the elements this rank now owns, so any world size and stage can load it.
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "zinf_checkpoint.h"
#include "zinf_half.h"

// Bytes streamed at a time: what a checkpoint costs in host memory.
enum { CHUNK_BYTES = 8 << 20 };

static const char *const tmp_prefix = ".tmp-";

// Every rank's status becomes every rank's: this rank's own failure, or one saying
// that others failed (their own errors say why).
static zinf_status agree(zinf_engine *e, zinf_status st, const char *what) {
    double bad[2] = {st != ZINF_OK, st != ZINF_OK ? (double)e->rank : 0}; // failures, and the sum of their ranks
    zinf_status cs = zinf_comm_allreduce_f64(e->comm, bad, 2);
    if (st != ZINF_OK) return st;
    if (cs != ZINF_OK) return cs;
    if (bad[0] == 1) return zinf_fail(ZINF_ERR_IO, "%s: rank %.0f failed (see its error)", what, bad[1]);
    if (bad[0] > 1) return zinf_fail(ZINF_ERR_IO, "%s: %.0f ranks failed (see their errors)", what, bad[0]);
    return ZINF_OK;
}

static zinf_status between_steps(const zinf_engine *e, const char *what) {
    if (e->step.micro_batches || e->step.have_forward)
        return zinf_fail(ZINF_ERR_INVAL, "engine %s: only between steps (%d micro-batches since the last step)", what,
                         e->step.micro_batches);
    return ZINF_OK;
}

// A step directory's name, "global_step<N>": its N, or -1.
static int64_t step_of(const char *name) {
    char *end;
    if (strncmp(name, "global_step", 11) != 0 || name[11] < '0' || name[11] > '9') return -1;
    long long n = strtoll(name + 11, &end, 10);
    return *end ? -1 : n;
}

static void latest_tag(const char *root, char *tag, size_t len) {
    char p[PATH_MAX + 16];
    snprintf(p, sizeof p, "%s/latest", root);
    FILE *f = fopen(p, "r");
    snprintf(tag, len, "none");
    if (f && fgets(tag, (int)len, f)) tag[strcspn(tag, "\r\n")] = 0;
    if (f) fclose(f);
}

// ---- saving ----

// Rank r's slice of module i: elements [*a, *b) of its flat buffer (padding left out).
static void saved_range(const zinf_engine *e, int i, int r, size_t *a, size_t *b) {
    const mod_layout *l = &e->layout[i];
    *a = (size_t)r * l->slice < l->numel ? (size_t)r * l->slice : l->numel;
    *b = *a + l->slice < l->numel ? *a + l->slice : l->numel;
}

static int nstates(const zinf_engine *e) { return e->dtype == ZINF_DTYPE_F32 ? ZINF_CKPT_PARAMS : ZINF_CKPT_NSTATES; }

// This rank's file: every module's slice of every state, streamed through buf.
static zinf_status write_rank(zinf_engine *e, const char *dir, void *buf) {
    int ns = nstates(e), n = e->module_count * ns;
    zinf_st_tensor *t = calloc((size_t)n, sizeof *t);
    char(*names)[64] = calloc((size_t)n, sizeof *names);
    if (!t || !names) {
        free(t), free(names);
        return zinf_fail(ZINF_ERR_NOMEM, "checkpoint: out of memory");
    }
    for (int i = 0; i < e->module_count; i++) {
        size_t a, b;
        saved_range(e, i, e->partition.rank, &a, &b);
        for (int s = 0; s < ns; s++) {
            zinf_st_tensor *x = &t[i * ns + s];
            snprintf(names[i * ns + s], sizeof names[0], "%s.%s", zinf_model_module(e->model, i)->name,
                     zinf_ckpt_state_name(s));
            x->name = names[i * ns + s];
            x->dtype = s == ZINF_CKPT_PARAMS ? e->dtype : ZINF_DTYPE_F32;
            x->ndim = 1;
            x->shape[0] = (int64_t)(b - a);
            x->nbytes = (b - a) * zinf_dtype_size(x->dtype);
        }
    }
    char path[PATH_MAX + 32], rank[16], world[16];
    snprintf(path, sizeof path, "%s/rank%d.safetensors", dir, e->partition.rank);
    snprintf(rank, sizeof rank, "%d", e->partition.rank);
    snprintf(world, sizeof world, "%d", e->partition.ranks);
    const char *meta[] = {"zinf.rank", rank, "zinf.world_size", world};
    zinf_st_writer *w;
    zinf_status st = zinf_st_writer_open(&w, path, t, n, meta, 2);
    for (int i = 0; st == ZINF_OK && i < e->module_count; i++) {
        const mod_layout *l = &e->layout[i];
        size_t a, b;
        saved_range(e, i, e->partition.rank, &a, &b);
        for (int s = 0; st == ZINF_OK && s < ns; s++) {
            size_t es = s == ZINF_CKPT_PARAMS ? e->elem_size : sizeof(float), step = CHUNK_BYTES / es;
            for (size_t x = a; st == ZINF_OK && x < b; x += step) {
                size_t k = b - x < step ? b - x : step;
                // ZINF_TIER_MASTER.. and ZINF_CKPT_MASTER.. are in the same order.
                st = s == ZINF_CKPT_PARAMS ? e->params.storage->copy_out(e, i, x, k, buf)
                                           : states_read(e, (zinf_tier_state)s, l->part_off + (x - l->part_lo), k, buf);
                if (st == ZINF_OK) st = zinf_st_writer_append(w, buf, k * es);
            }
        }
    }
    if (st == ZINF_OK)
        st = zinf_st_writer_finish(w);
    else
        zinf_st_writer_abort(w);
    free(t), free(names);
    return st;
}

static json_t *meta_json(zinf_engine *e, int64_t data_position, int64_t seed) {
    char *text = NULL;
    json_t *model = zinf_model_shape_to_json(&zinf_model_get_params(e->model)->shape, &text) == ZINF_OK
                      ? json_loads(text, 0, NULL)
                      : NULL;
    free(text);
    json_t *mods = json_array();
    for (int i = 0; mods && i < e->module_count; i++) {
        const zinf_module_info *mi = zinf_model_module(e->model, i);
        json_t *ps = json_array();
        for (int j = 0; ps && j < mi->nparams; j++) {
            const zinf_param_info *p = &mi->params[j];
            json_t *shape = p->ndim == 2 ? json_pack("[I, I]", (json_int_t)p->shape[0], (json_int_t)p->shape[1])
                                         : json_pack("[I]", (json_int_t)p->shape[0]);
            json_array_append_new(
                ps, json_pack("{s:s, s:o, s:I}", "name", p->name, "shape", shape, "offset", (json_int_t)p->offset));
        }
        json_array_append_new(mods, json_pack("{s:s, s:I, s:I, s:o}", "name", mi->name, "numel",
                                              (json_int_t)e->layout[i].numel, "slice", (json_int_t)e->layout[i].slice,
                                              "params", ps));
    }
    char *cfg = NULL;
    json_t *config = zinf_config_to_json(&e->cfg, &cfg) == ZINF_OK ? json_loads(cfg, 0, NULL) : NULL;
    free(cfg);
    const zinf_loss_scaler *ls = &e->step.scaler;
    return json_pack("{s:s, s:i, s:I, s:I, s:i, s:i, s:s, s:o, s:o, s:{s:f, s:I, s:I, s:I}, "
                     "s:{s:I, s:f}, s:{s:I, s:I, s:s}, s:o}",
                     "format", "zinf-checkpoint", "version", ZINF_CKPT_VERSION, "step", (json_int_t)e->step.steps_taken,
                     "steps_applied", (json_int_t)e->step.steps_applied, "world_size", e->partition.ranks, "zero_stage",
                     (json_int_t)e->cfg.zero.stage, "dtype", zinf_dtype_name(e->dtype), "model", model, "modules", mods,
                     "loss_scaler", "scale", ls->scale, "cur_iter", (json_int_t)ls->cur_iter, "last_overflow_iter",
                     (json_int_t)ls->last_overflow_iter, "cur_hysteresis", (json_int_t)ls->cur_hysteresis, "scheduler",
                     "steps_applied", (json_int_t)e->step.steps_applied, "next_lr",
                     zinf_lr_at(&e->cfg.optimizer, &e->cfg.scheduler, e->step.steps_applied + 1), "data", "position",
                     (json_int_t)data_position, "seed", (json_int_t)seed, "sampling",
                     e->cfg.data.sampling == ZINF_SAMPLING_SEQUENTIAL ? "sequential" : "random", "config",
                     config ? config : json_null());
}

// Rank 0, before the ranks write: the root, no leftovers of interrupted saves, and an
// empty temporary directory.
static zinf_status prepare(const char *root, const char *tmp) {
    if (mkdir(root, 0755) != 0 && errno != EEXIST)
        return zinf_fail_errno(errno, "checkpoint.dir %s: cannot make it (its parent must exist)", root);
    DIR *d = opendir(root);
    if (!d) return zinf_fail_errno(errno, "checkpoint.dir %s", root);
    zinf_status s = ZINF_OK;
    for (struct dirent *de; s == ZINF_OK && (de = readdir(d));) {
        if (strncmp(de->d_name, tmp_prefix, strlen(tmp_prefix)) != 0) continue;
        char p[PATH_MAX + 256];
        snprintf(p, sizeof p, "%s/%s", root, de->d_name);
        s = zinf_rm_tree(p);
    }
    closedir(d);
    if (s == ZINF_OK && mkdir(tmp, 0755) != 0) s = zinf_fail_errno(errno, "checkpoint: %s", tmp);
    return s;
}

// zero_optimization.stage3_gather_16bit_weights_on_model_save: the whole model in its
// training dtype (the 16-bit copy, or the fp32 master of an fp32 model) as a Hugging
// Face directory hf/ inside the step directory, streamed back from the rank files just
// written, so memory stays bounded and it is published with the rest.
static zinf_status write_model(zinf_engine *e, const char *tmp) {
    char p[PATH_MAX + 64];
    snprintf(p, sizeof p, "%s/hf", tmp);
    zinf_ckpt *ck;
    ZINF_CHECK(zinf_ckpt_open(&ck, tmp));
    zinf_status s = zinf_ckpt_export_dir(ck, p, e->dtype == ZINF_DTYPE_F32 ? ZINF_CKPT_MASTER : ZINF_CKPT_PARAMS, e->dtype,
                                         5000000000ull); // save_pretrained's 5GB shards
    zinf_ckpt_close(ck);
    return s;
}

// Rank 0, once every rank's file is synced: meta.json (and the model directory), the
// directory into place, then latest.
static zinf_status publish(zinf_engine *e, const char *root, const char *tmp, const char *tag, int64_t data_position,
                           int64_t seed) {
    char p[PATH_MAX + 64], q[PATH_MAX + 64];
    json_t *meta = meta_json(e, data_position, seed);
    char *text = meta ? json_dumps(meta, JSON_INDENT(1) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17)) : NULL;
    json_decref(meta);
    if (!text) return zinf_fail(ZINF_ERR_NOMEM, "checkpoint: out of memory for meta.json");
    snprintf(p, sizeof p, "%s/meta.json", tmp);
    zinf_status s = zinf_file_write_synced(p, text, strlen(text));
    free(text);
    ZINF_CHECK(s);
    if (e->cfg.zero.gather_16bit_weights_on_model_save) ZINF_CHECK(write_model(e, tmp));
    ZINF_CHECK(zinf_dir_sync(tmp));
    snprintf(p, sizeof p, "%s/%s", root, tag);
    struct stat sb;
    if (stat(p, &sb) == 0) {
        // This step was saved before: swap the two in one step, then drop the old one.
        if (renameat2(AT_FDCWD, tmp, AT_FDCWD, p, RENAME_EXCHANGE) != 0)
            return zinf_fail_errno(errno, "checkpoint: replacing %s", p);
        ZINF_CHECK(zinf_dir_sync(root));
        ZINF_CHECK(zinf_rm_tree(tmp));
    } else if (rename(tmp, p) != 0) {
        return zinf_fail_errno(errno, "checkpoint: renaming %s to %s", tmp, p);
    }
    ZINF_CHECK(zinf_dir_sync(root));
    snprintf(q, sizeof q, "%s/%slatest", root, tmp_prefix);
    snprintf(p, sizeof p, "%s\n", tag);
    ZINF_CHECK(zinf_file_write_synced(q, p, strlen(p)));
    snprintf(p, sizeof p, "%s/latest", root);
    if (rename(q, p) != 0) return zinf_fail_errno(errno, "checkpoint: renaming %s to %s", q, p);
    return zinf_dir_sync(root);
}

static int by_step_desc(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x < y) - (x > y);
}

// Rank 0, after latest names the new one: all but the newest `keep` step directories go.
static zinf_status prune(const char *root, int64_t keep, int64_t current) {
    if (keep <= 0) return ZINF_OK;
    DIR *d = opendir(root);
    if (!d) return zinf_fail_errno(errno, "checkpoint.dir %s", root);
    int64_t *steps = NULL;
    size_t n = 0, cap = 0;
    for (struct dirent *de; (de = readdir(d));) {
        int64_t k = step_of(de->d_name);
        if (k < 0) continue;
        if (n == cap) {
            int64_t *g = realloc(steps, (cap = cap ? 2 * cap : 16) * sizeof *steps);
            if (!g) break;
            steps = g;
        }
        steps[n++] = k;
    }
    closedir(d);
    qsort(steps, n, sizeof *steps, by_step_desc);
    zinf_status s = ZINF_OK;
    for (size_t i = (size_t)keep; s == ZINF_OK && i < n; i++) {
        if (steps[i] == current) continue;
        char p[PATH_MAX + 32];
        snprintf(p, sizeof p, "%s/global_step%lld", root, (long long)steps[i]);
        s = zinf_rm_tree(p);
    }
    free(steps);
    return s;
}

zinf_status zinf_engine_save(zinf_engine *e, const char *root, int64_t keep, int64_t data_position, int64_t seed) {
    if (!e || !root) return zinf_fail(ZINF_ERR_INVAL, "engine save: e and root are required");
    ZINF_CHECK(between_steps(e, "save"));
    zinf_optim_tier_join(e->optim.tier);
    ZINF_CHECK(engine_sync(e));
    char tag[64], tmp[PATH_MAX], what[96];
    snprintf(tag, sizeof tag, "global_step%lld", (long long)e->step.steps_taken);
    snprintf(tmp, sizeof tmp, "%s/%s%s", root, tmp_prefix, tag);
    snprintf(what, sizeof what, "checkpoint %s", tag);
    double t0 = zinf_clock_s();
    zinf_status st = agree(e, e->rank == 0 ? prepare(root, tmp) : ZINF_OK, what);
    void *buf = NULL;
    if (st == ZINF_OK) {
        buf = aligned_alloc(4096, CHUNK_BYTES);
        st = !buf                           ? zinf_fail(ZINF_ERR_NOMEM, "checkpoint: out of memory")
             : e->rank < e->partition.ranks ? write_rank(e, tmp, buf)
                                            : ZINF_OK;
        free(buf);
        st = agree(e, st, what);
    }
    if (st == ZINF_OK && e->rank == 0) st = publish(e, root, tmp, tag, data_position, seed);
    st = agree(e, st, what);
    if (st != ZINF_OK) {
        char msg[1024], prev[64];
        snprintf(msg, sizeof msg, "%s", zinf_last_error());
        if (e->rank == 0) zinf_rm_tree(tmp);
        latest_tag(root, prev, sizeof prev);
        return zinf_fail(st, "%s was not saved: %s; %s/latest still names %s, which is whole", tag, msg, root, prev);
    }
    if (e->rank == 0) {
        if (prune(root, keep, e->step.steps_taken) != ZINF_OK)
            ZINF_LOG_WARN("checkpoint.keep: %s (the new checkpoint is saved)", zinf_last_error());
        ZINF_LOG_INFO("checkpoint %s/%s saved in %.2f s", root, tag, zinf_clock_s() - t0);
    }
    return ZINF_OK;
}

// ---- loading ----

typedef struct sink_ctx {
    zinf_engine *e;
    int mod, state;  // ZINF_TIER_* for the optimizer's states, or -1 for the 16-bit copy
    zinf_dtype from; // the checkpoint's dtype for the 16-bit copy: e->dtype, or F32 (cast)
    void *conv;      // CHUNK_BYTES for casting
    int64_t shift;   // where an element of the checkpoint's module is in this one's, less where it was
} sink_ctx;

static zinf_status to_engine(void *arg, size_t at, const void *p, size_t n) {
    sink_ctx *c = arg;
    zinf_engine *e = c->e;
    size_t off = (size_t)((int64_t)at + c->shift);
    const mod_layout *l = &e->layout[c->mod];
    if (c->state >= 0) return states_write(e, (zinf_tier_state)c->state, l->part_off + (off - l->part_lo), n, p);
    if (c->from == e->dtype) return e->params.storage->write(e, c->mod, off, n, p);
    for (size_t i = 0; i < n; i++)
        dt_store(c->conv, e->dtype, i, ((const float *)p)[i]);
    return e->params.storage->write(e, c->mod, off, n, c->conv);
}

// The checkpoint's model must be this one: the same shape, modules and parameters. Where
// they lie in a module may differ (a zinf that did not pad the head wrote its
// checkpoints so); the load moves each parameter to its place here.
static zinf_status same_model(const zinf_engine *e, const zinf_ckpt *ck) {
    const zinf_ckpt_info *in = zinf_ckpt_info_of(ck);
    const zinf_model_shape *a = &zinf_model_get_params(e->model)->shape, *b = &in->shape;
    if (!zinf_model_shape_equal(a, b)) {
        char was[256], is[256];
        zinf_model_shape_describe(b, was, sizeof was);
        zinf_model_shape_describe(a, is, sizeof is);
        return zinf_fail(ZINF_ERR_INVAL, "checkpoint %s: saved from a %s block %d, but this run's model is a %s block %d",
                         zinf_ckpt_dir(ck), was, b->block_size, is, a->block_size);
    }
    if (in->nmod != e->module_count)
        return zinf_fail(ZINF_ERR_CORRUPT, "checkpoint %s: %d modules, this model has %d", zinf_ckpt_dir(ck), in->nmod,
                         e->module_count);
    for (int i = 0; i < e->module_count; i++) {
        const zinf_ckpt_module *c = &in->mods[i];
        const zinf_module_info *m = zinf_model_module(e->model, i);
        if (strcmp(c->name, m->name) != 0 || c->nparams != m->nparams)
            return zinf_fail(ZINF_ERR_CORRUPT, "checkpoint %s: module %d is %s of %d parameters, here %s of %d",
                             zinf_ckpt_dir(ck), i, c->name, c->nparams, m->name, m->nparams);
        for (int j = 0; j < m->nparams; j++)
            if (strcmp(c->params[j].name, m->params[j].name) != 0 || c->params[j].numel != m->params[j].numel)
                return zinf_fail(ZINF_ERR_CORRUPT,
                                 "checkpoint %s: module %s's parameter %d is %s of %zu elements, here %s of %zu",
                                 zinf_ckpt_dir(ck), m->name, j, c->params[j].name, c->params[j].numel,
                                 m->params[j].name, m->params[j].numel);
    }
    return ZINF_OK;
}

// Whether module i's parameters lie where the checkpoint has them.
static bool same_places(const zinf_engine *e, const zinf_ckpt_module *c, int i) {
    const zinf_module_info *m = zinf_model_module(e->model, i);
    bool same = (size_t)c->numel == e->layout[i].numel;
    for (int j = 0; same && j < m->nparams; j++)
        same = c->params[j].offset == m->params[j].offset;
    return same;
}

// Elements [lo, hi) of module i's flat buffer here from the checkpoint's state into the
// sink: one read where the parameters lie as saved, else one per parameter, moved to
// its place (the gaps between them keep their zeros).
static zinf_status read_range(zinf_engine *e, zinf_ckpt *ck, int i, zinf_ckpt_state state, size_t lo, size_t hi,
                              void *buf, sink_ctx *c) {
    const zinf_ckpt_module *cm = &zinf_ckpt_info_of(ck)->mods[i];
    c->shift = 0;
    if (same_places(e, cm, i)) return zinf_ckpt_read(ck, i, state, lo, hi, buf, CHUNK_BYTES, to_engine, c);
    const zinf_module_info *m = zinf_model_module(e->model, i);
    for (int j = 0; j < m->nparams; j++) {
        size_t o = m->params[j].offset, end = o + m->params[j].numel, was = cm->params[j].offset;
        size_t a = o > lo ? o : lo, b = end < hi ? end : hi;
        if (a >= b) continue;
        c->shift = (int64_t)o - (int64_t)was;
        ZINF_CHECK(zinf_ckpt_read(ck, i, state, a - o + was, b - o + was, buf, CHUNK_BYTES, to_engine, c));
    }
    return ZINF_OK;
}

static zinf_status load_states(zinf_engine *e, zinf_ckpt *ck, void *buf, void *conv) {
    const zinf_ckpt_info *in = zinf_ckpt_info_of(ck);
    ZINF_CHECK(same_model(e, ck));
    for (int i = 0; i < e->module_count; i++) {
        const mod_layout *l = &e->layout[i];
        size_t lo = l->part_lo, hi = l->part_lo + l->part_n < l->numel ? l->part_lo + l->part_n : l->numel;
        for (int s = 0; s <= ZINF_TIER_EXP_AVG_SQ; s++) {
            sink_ctx c = {e, i, s, ZINF_DTYPE_F32, conv, 0};
            ZINF_CHECK(read_range(e, ck, i, (zinf_ckpt_state)s, lo, hi, buf, &c));
        }
        // The 16-bit copy: the whole buffer at stages 0-2, this rank's slice at 3; cast
        // from the master weights when the checkpoint's model was stored otherwise.
        size_t a = l->param_lo, b = l->param_lo + l->param_n < l->numel ? l->param_lo + l->param_n : l->numel;
        bool same = in->dtype == e->dtype && e->dtype != ZINF_DTYPE_F32;
        sink_ctx c = {e, i, -1, same ? e->dtype : ZINF_DTYPE_F32, conv, 0};
        ZINF_CHECK(read_range(e, ck, i, same ? ZINF_CKPT_PARAMS : ZINF_CKPT_MASTER, a, b, buf, &c));
    }
    return zinf_stream_sync(e->compute_stream);
}

zinf_status zinf_engine_load(zinf_engine *e, const char *path, zinf_ckpt_resume *out) {
    if (!e || !path || !out) return zinf_fail(ZINF_ERR_INVAL, "engine load: e, path and out are required");
    ZINF_CHECK(between_steps(e, "load"));
    zinf_optim_tier_join(e->optim.tier);
    ZINF_CHECK(engine_sync(e));
    double t0 = zinf_clock_s();
    zinf_ckpt *ck = NULL;
    zinf_status st = zinf_ckpt_open(&ck, path);
    void *buf = aligned_alloc(4096, CHUNK_BYTES), *conv = aligned_alloc(4096, CHUNK_BYTES);
    if (st == ZINF_OK && (!buf || !conv)) st = zinf_fail(ZINF_ERR_NOMEM, "checkpoint: out of memory");
    if (st == ZINF_OK) st = load_states(e, ck, buf, conv);
    free(buf), free(conv);
    zinf_param_tier_forget_reads(e->params.tier);
    if (st == ZINF_OK) {
        const zinf_ckpt_info *in = zinf_ckpt_info_of(ck);
        e->step.steps_taken = in->step;
        e->step.steps_applied = in->steps_applied;
        e->step.scaler.scale = in->scale;
        e->step.scaler.cur_iter = in->cur_iter;
        e->step.scaler.last_overflow_iter = in->last_overflow_iter;
        e->step.scaler.cur_hysteresis = in->cur_hysteresis;
        *out = (zinf_ckpt_resume){
            .step = in->step, .data_position = in->data_position, .seed = in->seed, .world_size = in->world_size};
        snprintf(out->dir, sizeof out->dir, "%s", zinf_ckpt_dir(ck));
    }
    zinf_ckpt_close(ck);
    st = agree(e, st, "checkpoint load");
    if (st == ZINF_OK && e->rank == 0)
        ZINF_LOG_INFO("checkpoint %s loaded in %.2f s: step %lld, saved by %d rank%s", out->dir, zinf_clock_s() - t0,
                      (long long)out->step, out->world_size, out->world_size == 1 ? "" : "s");
    return st;
}
