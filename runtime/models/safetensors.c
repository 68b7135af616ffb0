// safetensors files (the format Hugging Face weights come in): read through one
// read-only mapping, checked whole before any tensor is handed out; written through a
// temporary file that is synced and renamed into place.
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "zinf_internal.h"
#include "zinf_model.h"

// A header larger than this is not a weights file (the spec's own limit).
enum { MAX_HEADER = 100 << 20 };

struct zinf_safetensors {
    char *path;
    void *map;
    size_t size;
    int n;
    zinf_st_tensor *t; // sorted by offset
};

static const struct {
    const char *name;
    zinf_dtype dtype; // NONE: a dtype of the format that zinf does not load
} dtypes[] = {
    {"F32", ZINF_DTYPE_F32},   {"BF16", ZINF_DTYPE_BF16},    {"F16", ZINF_DTYPE_F16},      {"F64", ZINF_DTYPE_NONE},
    {"I64", ZINF_DTYPE_NONE},  {"I32", ZINF_DTYPE_NONE},     {"I16", ZINF_DTYPE_NONE},     {"I8", ZINF_DTYPE_NONE},
    {"U8", ZINF_DTYPE_NONE},   {"U16", ZINF_DTYPE_NONE},     {"U32", ZINF_DTYPE_NONE},     {"U64", ZINF_DTYPE_NONE},
    {"BOOL", ZINF_DTYPE_NONE}, {"F8_E4M3", ZINF_DTYPE_NONE}, {"F8_E5M2", ZINF_DTYPE_NONE},
};

static const char *dtype_tag(zinf_dtype t) {
    for (size_t i = 0; i < ZINF_ARRAY_LEN(dtypes); i++)
        if (dtypes[i].dtype == t && t != ZINF_DTYPE_NONE) return dtypes[i].name;
    return NULL;
}

void zinf_safetensors_close(zinf_safetensors *st) {
    if (!st) return;
    for (int i = 0; i < st->n; i++)
        free((char *)st->t[i].name);
    free(st->t);
    if (st->map) munmap(st->map, st->size);
    free(st->path);
    free(st);
}

int zinf_safetensors_count(const zinf_safetensors *st) { return st->n; }

const zinf_st_tensor *zinf_safetensors_at(const zinf_safetensors *st, int i) {
    return i >= 0 && i < st->n ? &st->t[i] : NULL;
}

const zinf_st_tensor *zinf_safetensors_find(const zinf_safetensors *st, const char *name) {
    for (int i = 0; i < st->n; i++)
        if (strcmp(st->t[i].name, name) == 0) return &st->t[i];
    return NULL;
}

// By start, then size: an empty tensor sits before a non-empty one at the same offset.
static int by_offset(const void *a, const void *b) {
    const zinf_st_tensor *x = a, *y = b;
    if (x->data != y->data) return (x->data > y->data) - (x->data < y->data);
    return (x->nbytes > y->nbytes) - (x->nbytes < y->nbytes);
}

// One header entry into *t (data as an offset from the data section for now).
static zinf_status parse_entry(const char *path, const char *name, json_t *v, uint64_t data_len, zinf_st_tensor *t) {
    json_t *dt = json_object_get(v, "dtype"), *shape = json_object_get(v, "shape"),
           *offs = json_object_get(v, "data_offsets");
    if (!json_is_object(v) || !json_is_string(dt) || !json_is_array(shape) || !json_is_array(offs) ||
        json_array_size(offs) != 2 || !json_is_integer(json_array_get(offs, 0)) ||
        !json_is_integer(json_array_get(offs, 1)))
        return zinf_fail(ZINF_ERR_CORRUPT, "%s: tensor \"%s\": needs \"dtype\", \"shape\" and two \"data_offsets\"",
                         path, name);
    const char *tag = json_string_value(dt);
    size_t k = 0;
    while (k < ZINF_ARRAY_LEN(dtypes) && strcmp(dtypes[k].name, tag) != 0)
        k++;
    if (k == ZINF_ARRAY_LEN(dtypes))
        return zinf_fail(ZINF_ERR_CORRUPT, "%s: tensor \"%s\": unknown dtype \"%s\"", path, name, tag);
    if (dtypes[k].dtype == ZINF_DTYPE_NONE)
        return zinf_fail(ZINF_ERR_UNSUPPORTED, "%s: tensor \"%s\": dtype %s; zinf loads F32, BF16 and F16 weights",
                         path, name, tag);
    t->dtype = dtypes[k].dtype;
    if (json_array_size(shape) > ZINF_ST_MAX_DIMS)
        return zinf_fail(ZINF_ERR_UNSUPPORTED, "%s: tensor \"%s\": %zu dimensions (at most %d)", path, name,
                         json_array_size(shape), ZINF_ST_MAX_DIMS);
    t->ndim = (int)json_array_size(shape);
    uint64_t count = 1;
    for (int d = 0; d < t->ndim; d++) {
        json_t *e = json_array_get(shape, (size_t)d);
        json_int_t x = json_is_integer(e) ? json_integer_value(e) : -1;
        if (x < 0) return zinf_fail(ZINF_ERR_CORRUPT, "%s: tensor \"%s\": shape[%d] is not a size", path, name, d);
        t->shape[d] = x;
        if (x && count > UINT64_MAX / (uint64_t)x / 4)
            return zinf_fail(ZINF_ERR_CORRUPT, "%s: tensor \"%s\": the shape is too large", path, name);
        count *= (uint64_t)x;
    }
    json_int_t b = json_integer_value(json_array_get(offs, 0)), e = json_integer_value(json_array_get(offs, 1));
    if (b < 0 || e < b || (uint64_t)e > data_len)
        return zinf_fail(ZINF_ERR_CORRUPT, "%s: tensor \"%s\": bytes %lld..%lld are outside the %llu data bytes%s",
                         path, name, (long long)b, (long long)e, (unsigned long long)data_len,
                         (uint64_t)e > data_len ? " (truncated file?)" : "");
    t->nbytes = (uint64_t)(e - b);
    if (t->nbytes != count * zinf_dtype_size(t->dtype))
        return zinf_fail(ZINF_ERR_CORRUPT, "%s: tensor \"%s\": %llu bytes for %llu %s elements", path, name,
                         (unsigned long long)t->nbytes, (unsigned long long)count, tag);
    t->data = (const void *)(uintptr_t)b;
    return ZINF_OK;
}

static zinf_status parse(zinf_safetensors *st) {
    const unsigned char *p = st->map;
    if (st->size < 8)
        return zinf_fail(ZINF_ERR_CORRUPT, "%s: %zu bytes, too short for a safetensors file", st->path, st->size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | p[i];
    if (hlen > MAX_HEADER || hlen > st->size - 8)
        return zinf_fail(ZINF_ERR_CORRUPT,
                         "%s: header length %llu does not fit the %zu-byte file (not safetensors, "
                         "or truncated)",
                         st->path, (unsigned long long)hlen, st->size);
    json_error_t err;
    json_t *h = json_loadb((const char *)p + 8, hlen, JSON_REJECT_DUPLICATES, &err);
    if (!h) return zinf_fail(ZINF_ERR_CORRUPT, "%s: header: %s (at byte %d)", st->path, err.text, err.position + 8);
    zinf_status s = ZINF_OK;
    if (!json_is_object(h)) s = zinf_fail(ZINF_ERR_CORRUPT, "%s: the header is not a JSON object", st->path);
    size_t n = json_is_object(h) ? json_object_size(h) : 0;
    st->t = calloc(n ? n : 1, sizeof *st->t);
    if (!st->t) s = zinf_fail(ZINF_ERR_NOMEM, "%s: out of memory", st->path);
    uint64_t data_len = st->size - 8 - hlen;
    const char *name;
    json_t *v;
    json_object_foreach(h, name, v) {
        if (s != ZINF_OK) break;
        if (strcmp(name, "__metadata__") == 0) continue;
        zinf_st_tensor *t = &st->t[st->n];
        if ((s = parse_entry(st->path, name, v, data_len, t)) != ZINF_OK) break;
        if (!(t->name = strdup(name))) s = zinf_fail(ZINF_ERR_NOMEM, "%s: out of memory", st->path);
        st->n++;
    }
    json_decref(h);
    if (s != ZINF_OK) return s;
    // The data must be covered exactly once, in some order: no gaps, no overlaps.
    qsort(st->t, (size_t)st->n, sizeof *st->t, by_offset);
    uint64_t at = 0;
    for (int i = 0; i < st->n; i++) {
        uint64_t b = (uint64_t)(uintptr_t)st->t[i].data;
        if (b != at)
            return zinf_fail(ZINF_ERR_CORRUPT, "%s: tensor \"%s\" starts at data byte %llu, not %llu (%s)", st->path,
                             st->t[i].name, (unsigned long long)b, (unsigned long long)at,
                             b < at ? "it overlaps the one before" : "a gap before it");
        at = b + st->t[i].nbytes;
        st->t[i].data = p + 8 + hlen + b;
    }
    if (at != data_len)
        return zinf_fail(ZINF_ERR_CORRUPT, "%s: the tensors end at data byte %llu of %llu (trailing bytes)", st->path,
                         (unsigned long long)at, (unsigned long long)data_len);
    return ZINF_OK;
}

zinf_status zinf_safetensors_open(zinf_safetensors **out, const char *path) {
    *out = NULL;
    zinf_safetensors *st = calloc(1, sizeof *st);
    if (!st || !(st->path = strdup(path))) {
        free(st);
        return zinf_fail(ZINF_ERR_NOMEM, "%s: out of memory", path);
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    zinf_status s = ZINF_OK;
    if (fd < 0 || fstat(fd, &sb) != 0) {
        s = zinf_fail_errno(errno, "%s", path);
    } else if (!S_ISREG(sb.st_mode)) {
        s = zinf_fail(ZINF_ERR_INVAL, "%s: not a regular file", path);
    } else {
        st->size = (size_t)sb.st_size;
        st->map = st->size ? mmap(NULL, st->size, PROT_READ, MAP_PRIVATE, fd, 0) : NULL;
        if (st->map == MAP_FAILED) {
            st->map = NULL;
            s = zinf_fail_errno(errno, "%s: mmap", path);
        }
    }
    if (fd >= 0) close(fd);
    if (s == ZINF_OK) s = parse(st);
    if (s != ZINF_OK) {
        zinf_safetensors_close(st);
        return s;
    }
    *out = st;
    return ZINF_OK;
}

// ---- writing ----

static zinf_status write_all(int fd, const void *buf, size_t len, const char *path) {
    const char *p = buf;
    while (len) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return zinf_fail_errno(w < 0 ? errno : EIO, "%s: write", path);
        p += w;
        len -= (size_t)w;
    }
    return ZINF_OK;
}

static char *header_of(const zinf_st_tensor *t, int n, size_t *len) {
    json_t *h = json_object();
    uint64_t at = 0;
    for (int i = 0; h && i < n; i++) {
        json_t *shape = json_array();
        for (int d = 0; d < t[i].ndim; d++)
            json_array_append_new(shape, json_integer(t[i].shape[d]));
        json_object_set_new(h, t[i].name,
                            json_pack("{s:s, s:o, s:[I, I]}", "dtype", dtype_tag(t[i].dtype), "shape", shape,
                                      "data_offsets", (json_int_t)at, (json_int_t)(at + t[i].nbytes)));
        at += t[i].nbytes;
    }
    char *s = h ? json_dumps(h, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(h);
    if (!s) return NULL;
    // Spaces after the JSON align the data to 8 bytes, as the format allows.
    size_t raw = strlen(s), padded = (raw + 7) & ~(size_t)7;
    char *out = realloc(s, padded + 1);
    if (!out) {
        free(s);
        return NULL;
    }
    memset(out + raw, ' ', padded - raw);
    out[padded] = 0;
    *len = padded;
    return out;
}

zinf_status zinf_safetensors_write(const char *path, const zinf_st_tensor *t, int n) {
    for (int i = 0; i < n; i++) {
        uint64_t count = 1;
        for (int d = 0; d < t[i].ndim; d++)
            count *= (uint64_t)t[i].shape[d];
        if (!t[i].name || !dtype_tag(t[i].dtype) || t[i].ndim < 0 || t[i].ndim > ZINF_ST_MAX_DIMS ||
            count * zinf_dtype_size(t[i].dtype) != t[i].nbytes || (t[i].nbytes && !t[i].data))
            return zinf_fail(ZINF_ERR_INVAL,
                             "%s: tensor %d (\"%s\"): needs a name, F32/BF16/F16, and bytes matching "
                             "its shape",
                             path, i, t[i].name ? t[i].name : "");
    }
    for (int i = 0; i < n; i++)
        for (int j = 0; j < i; j++)
            if (strcmp(t[i].name, t[j].name) == 0)
                return zinf_fail(ZINF_ERR_INVAL, "%s: tensor name \"%s\" given twice", path, t[i].name);
    size_t hlen;
    char *header = header_of(t, n, &hlen);
    if (!header) return zinf_fail(ZINF_ERR_NOMEM, "%s: out of memory for the header", path);
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp-%d", path, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    zinf_status s = fd < 0 ? zinf_fail_errno(errno, "%s", tmp) : ZINF_OK;
    unsigned char len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    if (s == ZINF_OK) s = write_all(fd, len8, 8, tmp);
    if (s == ZINF_OK) s = write_all(fd, header, hlen, tmp);
    for (int i = 0; s == ZINF_OK && i < n; i++)
        s = write_all(fd, t[i].data, t[i].nbytes, tmp);
    if (s == ZINF_OK && fsync(fd) != 0) s = zinf_fail_errno(errno, "%s: fsync", tmp);
    if (fd >= 0 && close(fd) != 0 && s == ZINF_OK) s = zinf_fail_errno(errno, "%s: close", tmp);
    if (s == ZINF_OK && rename(tmp, path) != 0) s = zinf_fail_errno(errno, "%s: rename to %s", tmp, path);
    if (s != ZINF_OK && fd >= 0) unlink(tmp); // never leave a partial file behind
    free(header);
    return s;
}
