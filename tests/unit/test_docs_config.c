// docs/config.md against the config schema (runtime/config/schema.c): every key the
// schema accepts has exactly one table row `| `path` [alias `name`] | `default` | ...`,
// every row names a schema key, aliases agree, and each default (JSON) equals the
// schema's: the value for keys zinf reads, the only accepted value for keys it accepts
// only "off". Sections and keys with no meaning in zinf have no default to compare.
// timeout: 10 san=10 cuda-emu=10 san-cuda-emu=10
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "config/internal.h"

typedef struct row {
    char path[160];
    char alias[2][64]; // further `...` tokens of the first cell
    int naliases;
    char def[160]; // the first `...` of the second cell, or ""
    int line;
    bool used;
} row;

// The next `token` in [p, end) into out; returns the position after it, or NULL.
static const char *tick(const char *p, const char *end, char *out, size_t len) {
    const char *a = memchr(p, '`', (size_t)(end - p));
    if (!a) return NULL;
    const char *b = memchr(a + 1, '`', (size_t)(end - a - 1));
    if (!b) return NULL;
    snprintf(out, len, "%.*s", (int)(b - a - 1), a + 1);
    return b + 1;
}

static int read_rows(const char *text, row **out) {
    int n = 0, cap = 0, line = 0;
    row *rows = NULL;
    for (const char *p = text; *p; line++) {
        const char *eol = strchr(p, '\n');
        if (!eol) eol = p + strlen(p);
        if (strncmp(p, "| `", 3) == 0) {
            const char *c1 = p + 1, *c2 = memchr(c1, '|', (size_t)(eol - c1));
            const char *c3 = c2 ? memchr(c2 + 1, '|', (size_t)(eol - c2 - 1)) : NULL;
            CHECK(c3 != NULL, "line %d: a table row with fewer than two cells", line + 1);
            if (c3) {
                if (n == cap) {
                    row *more = realloc(rows, (size_t)(cap = cap ? 2 * cap : 64) * sizeof *rows);
                    if (!more) {
                        fprintf(stderr, "test_docs_config: out of memory\n");
                        exit(1);
                    }
                    rows = more;
                }
                row *r = &rows[n++];
                memset(r, 0, sizeof *r);
                r->line = line + 1;
                const char *q = tick(c1, c2, r->path, sizeof r->path);
                while (q && r->naliases < 2 && (q = tick(q, c2, r->alias[r->naliases], sizeof r->alias[0])))
                    r->naliases++;
                const char *d = c2 + 1;
                while (d < c3 && *d == ' ')
                    d++;
                if (*d == '`') tick(d, c3, r->def, sizeof r->def);
            }
        }
        p = *eol ? eol + 1 : eol;
    }
    *out = rows;
    return n;
}

// The schema's default of k as JSON, or NULL when it has none to compare.
static json_t *schema_default(const key *k) {
    switch (k->kind) {
    case K_BOOL: return json_boolean(k->def != 0);
    case K_INT:
    case K_BYTES: return k->def < 0 && (k->flags & F_NULL) ? json_null() : json_integer((json_int_t)k->def);
    case K_REAL: return k->def < 0 && (k->flags & F_NULL) ? json_null() : json_real(k->def);
    case K_REAL2: return json_pack("[ff]", k->def, k->def2);
    case K_ENUM: return k->names[(int)k->def][0] ? json_string(k->names[(int)k->def]) : json_null();
    case K_STRING:
    case K_PATHS: return json_null();
    case K_NAMES: return json_array();
    case K_OFF: return json_loads(k->off_json, JSON_DECODE_ANY, NULL);
    case K_SECTION:
    case K_INERT: return NULL;
    }
    return NULL;
}

// JSON values equal, numbers by value (5e8 is 500000000).
static bool same(json_t *a, json_t *b) {
    if (json_is_number(a) && json_is_number(b)) return json_number_value(a) == json_number_value(b);
    if (json_is_array(a) && json_is_array(b)) {
        if (json_array_size(a) != json_array_size(b)) return false;
        for (size_t i = 0; i < json_array_size(a); i++)
            if (!same(json_array_get(a, i), json_array_get(b, i))) return false;
        return true;
    }
    if (json_is_object(a) && json_is_object(b)) {
        const char *name;
        json_t *v;
        if (json_object_size(a) != json_object_size(b)) return false;
        json_object_foreach(a, name, v) {
            json_t *w = json_object_get(b, name);
            if (!w || !same(v, w)) return false;
        }
        return true;
    }
    return json_equal(a, b);
}

int main(void) {
    const char *doc = getenv("ZINF_DOCS_CONFIG") ? getenv("ZINF_DOCS_CONFIG") : "docs/config.md";
    FILE *f = fopen(doc, "rb");
    if (!f) {
        fprintf(stderr, "test_docs_config: cannot open %s (run from the repository root)\n", doc);
        return 1;
    }
    static char text[1 << 20];
    size_t len = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[len] = 0;
    CHECK(len < sizeof text - 1, "%s is larger than this test reads", doc);

    row *rows;
    int n = read_rows(text, &rows);
    CHECK(n > 0, "%s has no key rows", doc);
    for (int i = 0; i < n; i++) {
        row *r = &rows[i];
        const key *k = config_key_find(r->path);
        CHECK(k != NULL, "%s:%d: `%s` is not a key zinf accepts", doc, r->line, r->path);
        for (int j = 0; j < i; j++)
            CHECK(strcmp(rows[j].path, r->path) != 0, "%s:%d: `%s` is documented twice (also line %d)", doc, r->line,
                  r->path, rows[j].line);
        if (!k) continue;
        r->used = true;
        bool alias_ok = k->alias ? r->naliases == 1 && strcmp(r->alias[0], k->alias) == 0 : r->naliases == 0;
        CHECK(alias_ok, "%s:%d: `%s`: the row names alias(es) %s%s, the schema %s", doc, r->line, r->path,
              r->naliases ? r->alias[0] : "(none)", r->naliases > 1 ? " and more" : "", k->alias ? k->alias : "none");
        json_t *want = schema_default(k);
        if (!want) continue;
        json_t *got = r->def[0] ? json_loads(r->def, JSON_DECODE_ANY, NULL) : NULL;
        char *ws = json_dumps(want, JSON_ENCODE_ANY | JSON_COMPACT);
        CHECK(got != NULL, "%s:%d: `%s`: the default cell holds no JSON value in backticks (the schema's is %s)", doc,
              r->line, r->path, ws);
        if (got)
            CHECK(same(want, got), "%s:%d: `%s`: documented default %s, the schema's is %s", doc, r->line, r->path,
                  r->def, ws);
        free(ws);
        json_decref(want);
        json_decref(got);
    }
    for (size_t i = 0; i < zinf_config_nkeys; i++) {
        const char *path = zinf_config_keys[i].path;
        bool found = false;
        for (int j = 0; j < n && !found; j++)
            found = strcmp(rows[j].path, path) == 0;
        CHECK(found, "%s: the schema's key `%s` has no row", doc, path);
    }
    printf("test_docs_config: %d rows against %zu schema keys\n", n, zinf_config_nkeys);
    free(rows);
    return check_exit("test_docs_config");
}
