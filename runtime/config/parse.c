// Config parsing: JSON (jansson) -> zinf_config, driven by the schema table. Every
// bad input gets one error naming the key path, the value and the rule.
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "internal.h"

#define PATH_MAX_LEN 256

// ---- messages ----

// Compact JSON of v for messages, cut with "..." when long.
static const char *shown(json_t *v, char *buf, size_t len) {
    char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(15));
    snprintf(buf, len, "%s", s ? s : "?");
    if (s && strlen(s) >= len && len > 4) strcpy(buf + len - 4, "...");
    free(s);
    return buf;
}

static zinf_status bad_value(const parse_ctx *ctx, const char *path, json_t *v, const char *rule) {
    char val[96];
    const char *hint = json_is_string(v) && strcmp(json_string_value(v), "auto") == 0
                           ? " (\"auto\" is a placeholder the Hugging Face Trainer fills in; write the value itself)"
                           : "";
    return zinf_fail(ZINF_ERR_INVAL, "%s: %s: %s, got %s%s", ctx->name, path, rule, shown(v, val, sizeof val), hint);
}

// "an integer from 0 to 3", "a number greater than 0", ...
static const char *range_rule(const key *k, const char *what, char *buf, size_t len) {
    bool has_max = isfinite(k->max) && k->max < 9e15;
    const char *lo = (k->flags & F_GT_MIN) ? "greater than" : "at least";
    if (has_max)
        snprintf(buf, len, "expected %s from %.15g%s to %.15g%s", what, k->min,
                 (k->flags & F_GT_MIN) ? " (excluded)" : "", k->max, (k->flags & F_LT_MAX) ? " (excluded)" : "");
    else
        snprintf(buf, len, "expected %s %s %.15g", what, lo, k->min);
    return buf;
}

static bool in_range(const key *k, double v) {
    if ((k->flags & F_GT_MIN) ? !(v > k->min) : !(v >= k->min)) return false;
    if ((k->flags & F_LT_MAX) ? !(v < k->max) : !(v <= k->max)) return false;
    return true;
}

// Optimal string alignment distance (Levenshtein with adjacent transpositions),
// case-insensitive: "devcie" is one step from "device".
static int osa_distance(const char *a, const char *b) {
    size_t n = strlen(a), m = strlen(b);
    if (n > 63 || m > 63) return 99;
    int d[64][64];
    for (size_t i = 0; i <= n; i++)
        d[i][0] = (int)i;
    for (size_t j = 0; j <= m; j++)
        d[0][j] = (int)j;
    for (size_t i = 1; i <= n; i++) {
        for (size_t j = 1; j <= m; j++) {
            int cost = tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]);
            int best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
            if (d[i - 1][j - 1] + cost < best) best = d[i - 1][j - 1] + cost;
            if (i > 1 && j > 1 && tolower((unsigned char)a[i - 1]) == tolower((unsigned char)b[j - 2]) &&
                tolower((unsigned char)a[i - 2]) == tolower((unsigned char)b[j - 1]) && d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    }
    return d[n][m];
}

static bool is_child(const key *k, const char *parent) {
    size_t pl = strlen(parent);
    return config_key_parent_len(k->path) == pl && strncmp(k->path, parent, pl) == 0;
}

// The unknown-key error: the nearest name in the same section, else the same name in
// another section, else the names this section knows.
static zinf_status unknown_key(const parse_ctx *ctx, const char *parent, const char *shown_path, const char *name) {
    const char *best = NULL;
    int best_d = 99;
    for (size_t i = 0; i < zinf_config_nkeys; i++) {
        const key *k = &zinf_config_keys[i];
        if (!is_child(k, parent)) continue;
        const char *cands[2] = {config_key_name(k->path), k->alias};
        for (int c = 0; c < 2; c++) {
            if (!cands[c]) continue;
            int d = osa_distance(name, cands[c]);
            if (d < best_d) best_d = d, best = cands[c];
        }
    }
    int limit = strlen(name) < 6 ? 1 : (int)strlen(name) / 3;
    if (best && best_d <= limit)
        return zinf_fail(ZINF_ERR_INVAL, "%s: %s: unknown key; did you mean \"%s\"?", ctx->name, shown_path, best);
    for (size_t i = 0; i < zinf_config_nkeys; i++) {
        const key *k = &zinf_config_keys[i];
        if (strcmp(config_key_name(k->path), name) == 0 || (k->alias && strcmp(k->alias, name) == 0))
            return zinf_fail(ZINF_ERR_INVAL, "%s: %s: unknown key here; did you mean \"%s\"?", ctx->name, shown_path,
                             k->path);
    }
    char known[512] = "";
    int count = 0;
    for (size_t i = 0; i < zinf_config_nkeys; i++) {
        const key *k = &zinf_config_keys[i];
        if (!is_child(k, parent) || k->kind == K_OFF || k->kind == K_INERT) continue;
        count++;
        size_t used = strlen(known);
        snprintf(known + used, sizeof known - used, "%s%s", used ? ", " : "", config_key_name(k->path));
    }
    if (count > 0 && count <= 16)
        return zinf_fail(ZINF_ERR_INVAL, "%s: %s: unknown key; %s takes: %s", ctx->name, shown_path,
                         *parent ? parent : "the top level", known);
    return zinf_fail(ZINF_ERR_INVAL, "%s: %s: unknown key", ctx->name, shown_path);
}

// ---- values ----

// Numbers compare by value (1 == 1.0); objects by the keys the "off" value names, so
// {"enabled": false, "output_path": "x"} is off like {"enabled": false}.
static bool off_matches(json_t *v, json_t *off) {
    if (json_is_number(off)) return json_is_number(v) && json_number_value(v) == json_number_value(off);
    if (json_is_object(off)) {
        if (!json_is_object(v)) return false;
        const char *name;
        json_t *want;
        json_object_foreach(off, name, want) {
            json_t *got = json_object_get(v, name);
            if (got && !off_matches(got, want)) return false;
        }
        return true;
    }
    return json_equal(v, off);
}

static bool integral(json_t *v, double *out) {
    if (json_is_integer(v)) {
        *out = (double)json_integer_value(v);
        return true;
    }
    // DeepSpeed configs write element counts as 5e8: a real with no fraction is fine.
    if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) && fabs(json_real_value(v)) < 9.3e18) {
        *out = json_real_value(v);
        return true;
    }
    return false;
}

static zinf_status set_number(zinf_config *cfg, const parse_ctx *ctx, const key *k, const char *path, json_t *v) {
    char rule[160];
    double d;
    if (k->kind == K_REAL) {
        if (!json_is_number(v)) return bad_value(ctx, path, v, "expected a number");
        d = json_number_value(v);
        if (!in_range(k, d)) return bad_value(ctx, path, v, range_rule(k, "a number", rule, sizeof rule));
        *(double *)config_field(cfg, k) = d;
        return ZINF_OK;
    }
    const char *what = k->kind == K_BYTES ? "a byte count" : "an integer";
    if (k->kind == K_BYTES && json_is_string(v) && strcmp(json_string_value(v), "auto") != 0) {
        uint64_t b;
        if (zinf_size_parse(json_string_value(v), &b) != ZINF_OK)
            return bad_value(ctx, path, v, "expected a byte count such as 1048576, \"64K\", \"1M\" or \"2G\"");
        d = (double)b;
    } else if (!integral(v, &d)) {
        return bad_value(ctx, path, v,
                         k->kind == K_BYTES ? "expected a byte count such as 1048576 or \"1M\""
                                            : "expected an integer");
    }
    if (!in_range(k, d)) return bad_value(ctx, path, v, range_rule(k, what, rule, sizeof rule));
    *(int64_t *)config_field(cfg, k) = (int64_t)d;
    return ZINF_OK;
}

static zinf_status set_enum(zinf_config *cfg, const parse_ctx *ctx, const key *k, const char *path, json_t *v) {
    if (json_is_string(v)) {
        for (int i = 0; k->names[i]; i++) {
            if (k->names[i][0] && strcasecmp(k->names[i], json_string_value(v)) == 0) {
                *(int *)config_field(cfg, k) = i;
                return ZINF_OK;
            }
        }
    }
    char rule[256] = "expected one of";
    for (int i = 0; k->names[i]; i++) {
        if (!k->names[i][0]) continue;
        size_t used = strlen(rule);
        snprintf(rule + used, sizeof rule - used, "%s \"%s\"", i > 1 || (i == 1 && k->names[0][0]) ? "," : "",
                 k->names[i]);
    }
    return bad_value(ctx, path, v, rule);
}

static zinf_status set_paths(zinf_config *cfg, const parse_ctx *ctx, const key *k, const char *path, json_t *v) {
    static const char rule[] = "expected a directory or an array of directories";
    zinf_path_list *pl = config_field(cfg, k);
    if (json_is_null(v)) return ZINF_OK;
    size_t n = json_is_array(v) ? json_array_size(v) : 1;
    if (!json_is_string(v) && (!json_is_array(v) || n == 0)) return bad_value(ctx, path, v, rule);
    pl->paths = calloc(n, sizeof *pl->paths);
    if (!pl->paths) return zinf_fail(ZINF_ERR_NOMEM, "%s: %s: out of memory", ctx->name, path);
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_is_array(v) ? json_array_get(v, i) : v;
        if (!json_is_string(s) || !json_string_value(s)[0]) return bad_value(ctx, path, v, rule);
        if (!(pl->paths[i] = strdup(json_string_value(s))))
            return zinf_fail(ZINF_ERR_NOMEM, "%s: %s: out of memory", ctx->name, path);
        pl->count = (int)i + 1;
    }
    return ZINF_OK;
}

static zinf_status set_names(zinf_config *cfg, const parse_ctx *ctx, const key *k, const char *path, json_t *v) {
    unsigned *bits = config_field(cfg, k);
    char rule[256] = "expected an array of";
    for (int i = 0; k->names[i]; i++) {
        size_t used = strlen(rule);
        snprintf(rule + used, sizeof rule - used, "%s \"%s\"", i ? "," : "", k->names[i]);
    }
    if (!json_is_array(v)) return bad_value(ctx, path, v, rule);
    *bits = 0;
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e) {
        int j = 0;
        while (k->names[j] && !(json_is_string(e) && strcmp(k->names[j], json_string_value(e)) == 0))
            j++;
        if (!k->names[j]) return bad_value(ctx, path, e, rule);
        *bits |= 1u << j;
    }
    return ZINF_OK;
}

static zinf_status set_value(zinf_config *cfg, const parse_ctx *ctx, const key *k, const char *path, json_t *v) {
    char val[96];
    if (json_is_null(v) && (k->flags & F_NULL) && k->kind != K_PATHS) {
        if (k->kind == K_INT || k->kind == K_BYTES) *(int64_t *)config_field(cfg, k) = -1;
        if (k->kind == K_REAL) *(double *)config_field(cfg, k) = -1;
        return ZINF_OK; // strings stay NULL
    }
    switch (k->kind) {
    case K_BOOL:
        if (!json_is_boolean(v)) return bad_value(ctx, path, v, "expected true or false");
        *(bool *)config_field(cfg, k) = json_is_true(v);
        return ZINF_OK;
    case K_INT:
    case K_BYTES:
    case K_REAL: return set_number(cfg, ctx, k, path, v);
    case K_REAL2: {
        char rule[160];
        if (!json_is_array(v) || json_array_size(v) != 2) return bad_value(ctx, path, v, "expected two numbers [a, b]");
        for (size_t i = 0; i < 2; i++) {
            json_t *e = json_array_get(v, i);
            if (!json_is_number(e) || !in_range(k, json_number_value(e)))
                return bad_value(ctx, path, v, range_rule(k, "two numbers each", rule, sizeof rule));
            ((double *)config_field(cfg, k))[i] = json_number_value(e);
        }
        return ZINF_OK;
    }
    case K_STRING: {
        if (!json_is_string(v) || (!json_string_value(v)[0] && !(k->flags & F_EMPTY)))
            return bad_value(ctx, path, v, "expected a non-empty string");
        char **dst = config_field(cfg, k);
        if (!(*dst = strdup(json_string_value(v)))) return zinf_fail(ZINF_ERR_NOMEM, "%s: out of memory", ctx->name);
        return ZINF_OK;
    }
    case K_ENUM: return set_enum(cfg, ctx, k, path, v);
    case K_PATHS: return set_paths(cfg, ctx, k, path, v);
    case K_NAMES: return set_names(cfg, ctx, k, path, v);
    case K_OFF: {
        json_error_t e;
        json_t *off = json_loads(k->off_json, JSON_DECODE_ANY, &e);
        bool ok = off && off_matches(v, off);
        json_decref(off);
        if (ok) return ZINF_OK;
        return zinf_fail(ZINF_ERR_UNSUPPORTED, "%s: %s: %s is not supported by zinf yet (only %s is accepted)%s%s",
                         ctx->name, path, shown(v, val, sizeof val), k->off_json, k->hint ? "; " : "",
                         k->hint ? k->hint : "");
    }
    case K_INERT: ZINF_LOG_INFO("%s: %s has no effect in zinf: %s", ctx->name, path, k->hint); return ZINF_OK;
    case K_SECTION: break;
    }
    return zinf_fail(ZINF_ERR_INTERNAL, "%s: %s: schema kind %d", ctx->name, path, (int)k->kind);
}

// ---- the walk ----

// Names DeepSpeed still reads, with a deprecation warning, for a key zinf has under its
// current name: read as that key, so that both together are "given twice", as
// DeepSpeed refuses them together.
static const struct {
    const char *path, *key; // the old spelling's full path; the key it is read as
} deprecated[] = {
    {"zero_optimization.stage3_gather_fp16_weights_on_model_save",
     "zero_optimization.stage3_gather_16bit_weights_on_model_save"},
};

// The deprecated spelling of k, or NULL.
static const char *deprecated_name(const key *k) {
    for (size_t i = 0; k && i < sizeof deprecated / sizeof deprecated[0]; i++)
        if (strcmp(deprecated[i].key, k->path) == 0) return config_key_name(deprecated[i].path);
    return NULL;
}

// The schema key for member `name` of the section at canonical path `parent`,
// accepting the key's alias and its deprecated name. NULL when unknown.
static const key *child_key(const char *parent, const char *name) {
    for (size_t i = 0; i < zinf_config_nkeys; i++) {
        const key *k = &zinf_config_keys[i];
        if (is_child(k, parent) &&
            (strcmp(config_key_name(k->path), name) == 0 || (k->alias && strcmp(k->alias, name) == 0)))
            return k;
    }
    size_t pl = strlen(parent);
    for (size_t i = 0; i < sizeof deprecated / sizeof deprecated[0]; i++) {
        const char *old = deprecated[i].path;
        if (config_key_parent_len(old) == pl && strncmp(old, parent, pl) == 0 &&
            strcmp(config_key_name(old), name) == 0)
            return config_key_find(deprecated[i].key);
    }
    return NULL;
}

// parent: canonical path of obj; spelled: the same as the input spelled it.
static zinf_status walk(zinf_config *cfg, parse_ctx *ctx, json_t *obj, const char *parent, const char *spelled) {
    const char *name;
    json_t *v;
    json_object_foreach(obj, name, v) {
        char path[PATH_MAX_LEN];
        snprintf(path, sizeof path, "%s%s%s", spelled, *spelled ? "." : "", name);
        const key *k = child_key(parent, name);
        if (!k) return unknown_key(ctx, parent, path, name);
        size_t i = (size_t)(k - zinf_config_keys);
        if (ctx->given[i])
            return zinf_fail(ZINF_ERR_INVAL, "%s: %s: given twice, as \"%s\" and \"%s\"; keep one", ctx->name, path,
                             ctx->via[i], name);
        ctx->given[i] = true;
        ctx->via[i] = name;
        const char *dep = deprecated_name(k);
        if (dep && strcmp(dep, name) == 0)
            ZINF_LOG_INFO("%s: %s is DeepSpeed's deprecated name of %s; read as that", ctx->name, path,
                          config_key_name(k->path));
        if (k->kind != K_SECTION) {
            ZINF_CHECK(set_value(cfg, ctx, k, path, v));
            continue;
        }
        if (json_is_null(v) && (k->flags & F_NULL)) {
            ctx->given[i] = false; // null: as if absent, so defaults apply
            continue;
        }
        if (!json_is_object(v)) return bad_value(ctx, path, v, "expected an object {...}");
        if ((k->flags & F_OPTIONAL) && k->off >= 0) *(bool *)config_field(cfg, k) = true;
        ZINF_CHECK(walk(cfg, ctx, v, k->path, path));
    }
    return ZINF_OK;
}

static void set_defaults(zinf_config *cfg, const parse_ctx *ctx) {
    for (size_t i = 0; i < zinf_config_nkeys; i++) {
        const key *k = &zinf_config_keys[i];
        if (ctx->given[i] || k->off < 0) continue;
        switch (k->kind) {
        case K_BOOL: *(bool *)config_field(cfg, k) = k->def != 0; break;
        case K_INT:
        case K_BYTES: *(int64_t *)config_field(cfg, k) = (int64_t)k->def; break;
        case K_REAL: *(double *)config_field(cfg, k) = k->def; break;
        case K_REAL2:
            ((double *)config_field(cfg, k))[0] = k->def;
            ((double *)config_field(cfg, k))[1] = k->def2;
            break;
        case K_ENUM: *(int *)config_field(cfg, k) = (int)k->def; break;
        default: break; // strings, paths: NULL / empty; sections: absent
        }
    }
}

static zinf_status check_required(const parse_ctx *ctx) {
    for (size_t i = 0; i < zinf_config_nkeys; i++) {
        const key *k = &zinf_config_keys[i];
        if (!(k->flags & F_REQUIRED) || ctx->given[i]) continue;
        char parent[PATH_MAX_LEN];
        snprintf(parent, sizeof parent, "%.*s", (int)config_key_parent_len(k->path), k->path);
        const key *p = config_key_find(parent);
        if (p && ctx->given[p - zinf_config_keys])
            return zinf_fail(ZINF_ERR_INVAL, "%s: %s: missing; the %s section needs it", ctx->name, k->path, parent);
    }
    return ZINF_OK;
}

// ---- --set overrides ----

// Apply "a.b.c=value" to the JSON tree: value is JSON when it parses, else a string.
// Sections on the way are created; a key spelled by its alias in the file is replaced.
static zinf_status apply_set(json_t *root, const char *set) {
    const char *eq = strchr(set, '=');
    char keypath[PATH_MAX_LEN], canon[PATH_MAX_LEN] = "";
    if (!eq || eq == set || (size_t)(eq - set) >= sizeof keypath)
        return zinf_fail(ZINF_ERR_INVAL, "--set \"%s\": expected key.path=value", set);
    snprintf(keypath, sizeof keypath, "%.*s", (int)(eq - set), set);
    if (keypath[0] == '.' || keypath[strlen(keypath) - 1] == '.' || strstr(keypath, ".."))
        return zinf_fail(ZINF_ERR_INVAL, "--set \"%s\": empty key name in \"%s\"", set, keypath);
    json_error_t e;
    json_t *v = json_loads(eq + 1, JSON_DECODE_ANY, &e);
    if (!v) v = json_string(eq + 1);
    if (!v) return zinf_fail(ZINF_ERR_INVAL, "--set \"%s\": the value is not valid UTF-8", set);
    json_t *obj = root;
    char *save = NULL;
    for (char *comp = strtok_r(keypath, ".", &save); comp; comp = strtok_r(NULL, ".", &save)) {
        const key *k = child_key(canon, comp);
        // Use the spelling already in the file (canonical, alias or deprecated) for this key.
        const char *names[3] = {k ? config_key_name(k->path) : comp, k ? k->alias : NULL, deprecated_name(k)};
        for (int i = 0; i < 3; i++)
            if (names[i] && strcmp(names[i], comp) != 0 && json_object_get(obj, names[i])) comp = (char *)names[i];
        if (k) snprintf(canon, sizeof canon, "%s", k->path);
        if (!save || !*save) {
            json_object_set_new(obj, comp, v);
            return ZINF_OK;
        }
        json_t *next = json_object_get(obj, comp);
        if (!next || json_is_null(next)) {
            next = json_object();
            json_object_set_new(obj, comp, next);
        } else if (!json_is_object(next)) {
            json_decref(v);
            return zinf_fail(ZINF_ERR_INVAL, "--set \"%s\": \"%s\" is a value, not a section", set, comp);
        }
        obj = next;
    }
    json_decref(v);
    return zinf_fail(ZINF_ERR_INVAL, "--set \"%s\": expected key.path=value", set);
}

// ---- entry points ----

zinf_status zinf_config_parse(zinf_config *cfg, const char *text, const char *name, const zinf_config_options *opts) {
    memset(cfg, 0, sizeof *cfg);
    json_error_t err;
    json_t *root = json_loads(text, JSON_REJECT_DUPLICATES, &err);
    if (!root) return zinf_fail(ZINF_ERR_INVAL, "%s:%d:%d: malformed JSON: %s", name, err.line, err.column, err.text);
    zinf_status st = ZINF_OK;
    parse_ctx ctx = {.name = name,
                     .given = calloc(zinf_config_nkeys, sizeof(bool)),
                     .via = calloc(zinf_config_nkeys, sizeof(char *))};
    if (!ctx.given || !ctx.via) {
        st = zinf_fail(ZINF_ERR_NOMEM, "%s: out of memory", name);
        goto done;
    }
    if (!json_is_object(root)) {
        char val[96];
        st = zinf_fail(ZINF_ERR_INVAL, "%s: the config must be a JSON object {...}, got %s", name,
                       shown(root, val, sizeof val));
        goto done;
    }
    for (int i = 0; opts && i < opts->nsets; i++)
        ZINF_CHECK_GOTO(apply_set(root, opts->sets[i]), st, done);
    ZINF_CHECK_GOTO(walk(cfg, &ctx, root, "", ""), st, done);
    ZINF_CHECK_GOTO(check_required(&ctx), st, done);
    set_defaults(cfg, &ctx);
    int world = opts ? opts->world_size : 0;
    if (world <= 0) {
        int rank;
        zinf_launcher_rank(&rank, &world);
    }
    ZINF_CHECK_GOTO(config_apply_rules(cfg, &ctx, world), st, done);
done:
    if (st != ZINF_OK) zinf_config_free(cfg);
    free(ctx.given);
    free(ctx.via);
    json_decref(root);
    return st;
}

zinf_status zinf_config_load(zinf_config *cfg, const char *path, const zinf_config_options *opts) {
    memset(cfg, 0, sizeof *cfg);
    FILE *f = fopen(path, "rb");
    if (!f) return zinf_fail_errno(errno, "cannot open config %s", path);
    // Configs are small; anything larger than this is not a config file. The buffer
    // grows as the file is read (a pipe has no size to ask for), so that a config of a
    // few hundred bytes costs a few KiB, not 16 MiB.
    enum { MAX_CONFIG = 16 << 20 };
    char *text = NULL;
    size_t n = 0, cap = 0;
    int rerr = 0;
    bool nomem = false;
    while (n <= MAX_CONFIG) {
        if (n == cap) {
            size_t want = cap ? 2 * cap : 4096;
            if (want > MAX_CONFIG + 1) want = MAX_CONFIG + 1;
            char *more = realloc(text, want + 1);
            if (!more) {
                nomem = true;
                break;
            }
            text = more, cap = want;
        }
        size_t got = fread(text + n, 1, cap - n, f);
        n += got;
        if (got == 0) {
            rerr = ferror(f) ? errno : 0;
            break;
        }
    }
    fclose(f);
    zinf_status st;
    if (nomem)
        st = zinf_fail(ZINF_ERR_NOMEM, "cannot read config %s: out of memory", path);
    else if (rerr)
        st = zinf_fail_errno(rerr, "cannot read config %s", path);
    else if (n > MAX_CONFIG)
        st = zinf_fail(ZINF_ERR_INVAL, "%s: larger than 16 MiB; not a config file", path);
    else {
        text[n] = '\0';
        if (strlen(text) != n)
            st = zinf_fail(ZINF_ERR_INVAL, "%s: contains a NUL byte; not a JSON file", path);
        else
            st = zinf_config_parse(cfg, text, path, opts);
    }
    free(text);
    return st;
}

static void free_paths(zinf_path_list *pl) {
    for (int i = 0; i < pl->count; i++)
        free(pl->paths[i]);
    free(pl->paths);
}

void zinf_config_free(zinf_config *cfg) {
    if (!cfg) return;
    free_paths(&cfg->zero.offload_optimizer.nvme_path);
    free_paths(&cfg->zero.offload_param.nvme_path);
    free(cfg->model.init_from);
    free(cfg->data.path);
    free(cfg->checkpoint.dir);
    free(cfg->checkpoint.load);
    free(cfg->flops_profiler.output_file);
    zinf_monitor_config *monitors[] = {&cfg->tensorboard, &cfg->csv_monitor};
    for (int i = 0; i < 2; i++)
        free(monitors[i]->output_path), free(monitors[i]->job_name);
    memset(cfg, 0, sizeof *cfg);
}
