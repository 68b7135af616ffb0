// A model's weights as Hugging Face keeps them (zinf_model.h): one safetensors file, or
// a model directory with model.safetensors, or model.safetensors.index.json and the
// shards its weight_map names. The index is held to its shards: every shard it names
// exists and holds exactly the tensors the index gives it.
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "zinf_internal.h"
#include "zinf_model.h"

struct zinf_hf_weights {
    int nfiles;
    zinf_safetensors **files;
    char **paths;
    int n;         // tensors in all
    int *file_of;  // per tensor, in file order then tensor order
    int *index_in; // the tensor's index in its file
};

static bool is_dir(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static bool exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

void zinf_hf_weights_close(zinf_hf_weights *w) {
    if (!w) return;
    for (int i = 0; i < w->nfiles; i++) {
        zinf_safetensors_close(w->files[i]);
        free(w->paths[i]);
    }
    free(w->files), free(w->paths), free(w->file_of), free(w->index_in);
    free(w);
}

static zinf_status add_file(zinf_hf_weights *w, const char *path) {
    zinf_safetensors **f = realloc(w->files, (size_t)(w->nfiles + 1) * sizeof *f);
    if (f) w->files = f;
    char **p = realloc(w->paths, (size_t)(w->nfiles + 1) * sizeof *p);
    if (p) w->paths = p;
    if (!f || !p || !(w->paths[w->nfiles] = strdup(path))) return zinf_fail(ZINF_ERR_NOMEM, "%s: out of memory", path);
    w->files[w->nfiles] = NULL;
    w->nfiles++;
    return zinf_safetensors_open(&w->files[w->nfiles - 1], path);
}

// The index's shards, each once, in the order the index first names them; then each
// tensor must be where the index says and nowhere else.
static zinf_status open_index(zinf_hf_weights *w, const char *dir, const char *index) {
    json_error_t err;
    json_t *root = json_load_file(index, 0, &err);
    if (!root) return zinf_fail(ZINF_ERR_INVAL, "%s: not JSON (line %d: %s)", index, err.line, err.text);
    json_t *map = json_object_get(root, "weight_map");
    zinf_status s = json_is_object(map) && json_object_size(map) > 0
                        ? ZINF_OK
                        : zinf_fail(ZINF_ERR_INVAL, "%s: no \"weight_map\" object naming the tensors' files", index);
    const char *name;
    json_t *file;
    char path[PATH_MAX];
    json_object_foreach(map, name, file) {
        if (s != ZINF_OK) break;
        const char *f = json_string_value(file);
        if (!f || strchr(f, '/')) {
            s = zinf_fail(ZINF_ERR_INVAL, "%s: weight_map[\"%s\"] is not a file name in the directory", index, name);
            break;
        }
        snprintf(path, sizeof path, "%s/%s", dir, f);
        bool seen = false;
        for (int i = 0; i < w->nfiles && !seen; i++)
            seen = strcmp(w->paths[i], path) == 0;
        if (seen) continue;
        if (!exists(path))
            s = zinf_fail(ZINF_ERR_INVAL, "%s names the shard %s for %s, which is missing", index, path, name);
        else
            s = add_file(w, path);
    }
    // Both ways: what the index says is in each shard, and what each shard holds.
    json_object_foreach(map, name, file) {
        if (s != ZINF_OK) break;
        snprintf(path, sizeof path, "%s/%s", dir, json_string_value(file));
        for (int i = 0; i < w->nfiles; i++)
            if (strcmp(w->paths[i], path) == 0 && !zinf_safetensors_find(w->files[i], name))
                s = zinf_fail(ZINF_ERR_INVAL, "%s: tensor %s is not in %s, where the index puts it", index, name, path);
    }
    for (int i = 0; s == ZINF_OK && i < w->nfiles; i++)
        for (int j = 0; s == ZINF_OK && j < zinf_safetensors_count(w->files[i]); j++) {
            const char *t = zinf_safetensors_at(w->files[i], j)->name;
            const char *f = json_string_value(json_object_get(map, t));
            snprintf(path, sizeof path, "%s/%s", dir, f ? f : "");
            if (!f || strcmp(path, w->paths[i]) != 0)
                s = zinf_fail(ZINF_ERR_INVAL, "%s holds tensor %s, which %s does not put there", w->paths[i], t, index);
        }
    json_decref(root);
    return s;
}

zinf_status zinf_hf_weights_open(zinf_hf_weights **out, const char *path) {
    *out = NULL;
    zinf_hf_weights *w = calloc(1, sizeof *w);
    if (!w) return zinf_fail(ZINF_ERR_NOMEM, "%s: out of memory", path);
    char single[PATH_MAX], index[PATH_MAX];
    snprintf(single, sizeof single, "%s/model.safetensors", path);
    snprintf(index, sizeof index, "%s/model.safetensors.index.json", path);
    zinf_status s;
    if (!is_dir(path))
        s = add_file(w, path);
    else if (exists(single)) // from_pretrained's order: a single file wins over an index
        s = add_file(w, single);
    else if (exists(index))
        s = open_index(w, path, index);
    else
        s = zinf_fail(ZINF_ERR_INVAL,
                      "%s: a model directory needs model.safetensors or model.safetensors.index.json and its shards",
                      path);
    for (int i = 0; s == ZINF_OK && i < w->nfiles; i++)
        w->n += zinf_safetensors_count(w->files[i]);
    if (s == ZINF_OK) {
        w->file_of = calloc((size_t)w->n + 1, sizeof *w->file_of);
        w->index_in = calloc((size_t)w->n + 1, sizeof *w->index_in);
        if (!w->file_of || !w->index_in) s = zinf_fail(ZINF_ERR_NOMEM, "%s: out of memory", path);
    }
    for (int i = 0, k = 0; s == ZINF_OK && i < w->nfiles; i++)
        for (int j = 0; j < zinf_safetensors_count(w->files[i]); j++, k++)
            w->file_of[k] = i, w->index_in[k] = j;
    if (s != ZINF_OK) {
        zinf_hf_weights_close(w);
        return s;
    }
    *out = w;
    return ZINF_OK;
}

int zinf_hf_weights_count(const zinf_hf_weights *w) { return w->n; }

const zinf_st_tensor *zinf_hf_weights_at(const zinf_hf_weights *w, int i, const char **file) {
    if (i < 0 || i >= w->n) return NULL;
    if (file) *file = w->paths[w->file_of[i]];
    return zinf_safetensors_at(w->files[w->file_of[i]], w->index_in[i]);
}

const zinf_st_tensor *zinf_hf_weights_find(const zinf_hf_weights *w, const char *name, const char **file) {
    for (int i = 0; i < w->nfiles; i++) {
        const zinf_st_tensor *t = zinf_safetensors_find(w->files[i], name);
        if (t) {
            if (file) *file = w->paths[i];
            return t;
        }
    }
    return NULL;
}
