// The normalized config: every key with its value (defaults filled in), in schema
// order, as JSON that parses back to the same config.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

// Optional sections print only when present: absence is their default.
static bool section_present(const zinf_config *cfg, const key *k) {
    if (k->flags & F_LLAMA) return cfg->model.arch != ZINF_ARCH_GPT2;
    if (k->flags & F_SIM) return cfg->device.backend == ZINF_BACKEND_SIM;
    if (!(k->flags & F_OPTIONAL)) return true;
    if (strcmp(k->path, "scheduler") == 0) return cfg->scheduler.type != ZINF_SCHED_NONE;
    return *(const bool *)((const char *)cfg + k->off);
}

static bool printed(const zinf_config *cfg, const key *k) {
    static const unsigned takes[] = {0, F_WLR, F_WDLR, F_WCLR};
    if (k->kind == K_OFF || k->kind == K_INERT) return false;
    if ((k->flags & F_LLAMA) && cfg->model.arch == ZINF_ARCH_GPT2) return false;
    if ((k->flags & F_SIM) && cfg->device.backend != ZINF_BACKEND_SIM) return false;
    if ((k->flags & (F_WLR | F_WDLR | F_WCLR)) && !(k->flags & takes[cfg->scheduler.type])) return false;
    if (k->kind == K_ENUM && !k->names[*(const int *)((const char *)cfg + k->off)][0]) return false; // no preset
    return true;
}

static json_t *value_json(const zinf_config *cfg, const key *k) {
    const void *f = (const char *)cfg + k->off;
    switch (k->kind) {
    case K_BOOL: return json_boolean(*(const bool *)f);
    case K_INT:
    case K_BYTES: {
        int64_t v = *(const int64_t *)f;
        return v < 0 && (k->flags & F_NULL) ? json_null() : json_integer(v);
    }
    case K_REAL: return *(const double *)f < 0 && (k->flags & F_NULL) ? json_null() : json_real(*(const double *)f);
    case K_REAL2: return json_pack("[ff]", ((const double *)f)[0], ((const double *)f)[1]);
    case K_STRING: return *(char *const *)f ? json_string(*(char *const *)f) : json_null();
    case K_ENUM: return json_string(k->names[*(const int *)f]);
    case K_PATHS: {
        // As DeepSpeed spells it: null or one path; several (striping) as an array.
        const zinf_path_list *pl = f;
        if (pl->count <= 1) return pl->count ? json_string(pl->paths[0]) : json_null();
        json_t *a = json_array();
        for (int i = 0; i < pl->count; i++)
            json_array_append_new(a, json_string(pl->paths[i]));
        return a;
    }
    case K_NAMES: {
        json_t *a = json_array();
        for (int i = 0; k->names[i]; i++)
            if (*(const unsigned *)f & (1u << i)) json_array_append_new(a, json_string(k->names[i]));
        return a;
    }
    default: return NULL;
    }
}

// The fewest significant digits (<= 17) that print every real in the tree exactly, so
// 3e-4 prints as 0.0003 and not 0.00029999999999999997, yet everything round-trips.
static int real_precision(json_t *j, int p) {
    if (json_is_real(j)) {
        double v = json_real_value(j);
        char buf[40];
        int need = 1;
        for (; need < 17; need++) {
            snprintf(buf, sizeof buf, "%.*g", need, v);
            if (strtod(buf, NULL) == v) break;
        }
        return need > p ? need : p;
    }
    size_t i;
    const char *name;
    json_t *v;
    if (json_is_array(j)) json_array_foreach(j, i, v) p = real_precision(v, p);
    if (json_is_object(j)) json_object_foreach(j, name, v) p = real_precision(v, p);
    return p;
}

zinf_status zinf_config_to_json(const zinf_config *cfg, char **out) {
    json_t *root = json_object();
    for (size_t i = 0; i < zinf_config_nkeys; i++) {
        const key *k = &zinf_config_keys[i];
        // Find the parent object; a missing one belongs to an absent optional section.
        json_t *parent = root;
        char part[128];
        const char *p = k->path, *dot;
        while (parent && (dot = strchr(p, '.'))) {
            snprintf(part, sizeof part, "%.*s", (int)(dot - p), p);
            parent = json_object_get(parent, part);
            p = dot + 1;
        }
        if (!parent) continue;
        if (k->kind == K_SECTION) {
            if (section_present(cfg, k)) json_object_set_new(parent, p, json_object());
        } else if (printed(cfg, k)) {
            json_object_set_new(parent, p, value_json(cfg, k));
        }
    }
    *out = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(real_precision(root, 1)));
    json_decref(root);
    return *out ? ZINF_OK : zinf_fail(ZINF_ERR_NOMEM, "cannot print the config: out of memory");
}
