// safetensors files (the format Hugging Face weights come in): read through one
// read-only mapping, checked whole before any tensor is handed out, or streamed with
// pread; written in pieces through a temporary file that is synced and renamed into
// place, with a CRC-32 per tensor in the header's metadata.
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "zinf_internal.h"
#include "zinf_model.h"

// A header larger than this is not a weights file (the spec's own limit).
enum { MAX_HEADER = 100 << 20 };

struct zinf_safetensors {
    char *path;
    int fd;       // open for streaming
    json_t *meta; // __metadata__, or NULL
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
    if (st->fd >= 0) close(st->fd);
    json_decref(st->meta);
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
        if (strcmp(name, "__metadata__") == 0) {
            st->meta = json_incref(v);
            continue;
        }
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
    int fd = st->fd = open(path, O_RDONLY | O_CLOEXEC);
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
    if (s == ZINF_OK) s = parse(st);
    if (s != ZINF_OK) {
        zinf_safetensors_close(st);
        return s;
    }
    *out = st;
    return ZINF_OK;
}

const char *zinf_safetensors_meta(const zinf_safetensors *st, const char *key) {
    return st->meta ? json_string_value(json_object_get(st->meta, key)) : NULL;
}

// The metadata key of a tensor's CRC-32.
static void crc_key(char *key, size_t len, const char *name) { snprintf(key, len, "crc32:%s", name); }

zinf_status zinf_safetensors_stream(const zinf_safetensors *st, const zinf_st_tensor *t, void *buf, size_t buf_bytes,
                                    zinf_st_sink fn, void *arg) {
    char key[256];
    crc_key(key, sizeof key, t->name);
    const char *want = zinf_safetensors_meta(st, key);
    uint64_t at = (uint64_t)((const char *)t->data - (const char *)st->map); // bytes from the file's start
    uLong crc = crc32(0, NULL, 0);
    for (uint64_t done = 0; done < t->nbytes;) {
        // Whole chunks, so that the sink never sees part of an element.
        size_t n = t->nbytes - done < buf_bytes ? (size_t)(t->nbytes - done) : buf_bytes, got = 0;
        while (got < n) {
            ssize_t r = pread(st->fd, (char *)buf + got, n - got, (off_t)(at + done + got));
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0)
                return r < 0 ? zinf_fail_errno(errno, "%s: tensor \"%s\": read", st->path, t->name)
                             : zinf_fail(ZINF_ERR_CORRUPT, "%s: tensor \"%s\": the file ends early (truncated?)",
                                         st->path, t->name);
            got += (size_t)r;
        }
        // zlib's crc32 takes at most UINT_MAX bytes at a time.
        for (size_t c = 0; c < n; c += UINT_MAX)
            crc = crc32(crc, (const Bytef *)buf + c, (uInt)(n - c < UINT_MAX ? n - c : UINT_MAX));
        ZINF_CHECK(fn(arg, done, buf, n));
        done += n;
    }
    char got[16];
    snprintf(got, sizeof got, "%08lx", (unsigned long)crc);
    if (want && strcmp(want, got) != 0)
        return zinf_fail(ZINF_ERR_CORRUPT, "%s: tensor \"%s\": checksum %s, the file's header says %s (corrupted)",
                         st->path, t->name, got, want);
    return ZINF_OK;
}

// ---- writing ----

// Bytes go to disk with O_DIRECT from an aligned staging buffer: a checkpoint is gigabytes
// written once and not read back soon, and through the page cache its writes stall on
// dirty-page throttling (half of dd's bandwidth in a process that holds most of RAM
// pinned). Where the file system refuses O_DIRECT the file is written buffered.
enum { STAGE_BYTES = 8 << 20, DIRECT_ALIGN = 4096 };

struct zinf_st_writer {
    char *path, *tmp;
    int fd;  // the data's writes (O_DIRECT where allowed)
    int hfd; // buffered: the header's rewrite, fsync
    bool direct;
    unsigned char *stage; // direct: bytes not yet written, from file offset `at`
    size_t fill;
    uint64_t at;
    json_t *header; // rewritten with the CRCs at the end, at the same length
    size_t hlen;
    int n, cur;            // tensors, and the one being appended to
    uint64_t *nbytes, got; // each tensor's size, and the bytes of cur so far
    char **names;
    uLong crc;
};

static zinf_status write_at(int fd, const void *buf, size_t len, uint64_t off, const char *path) {
    const char *p = buf;
    while (len) {
        int fault = zinf_fault_next(ZINF_FAULT_SAVE);
        ssize_t w = fault ? (errno = fault, -1) : pwrite(fd, p, len, (off_t)off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0)
            return zinf_fail_errno(w < 0 ? errno : EIO, "%s: write at offset %llu (%zu bytes)", path,
                                   (unsigned long long)off, len);
        p += w, off += (uint64_t)w;
        len -= (size_t)w;
    }
    return ZINF_OK;
}

// The file's next n bytes.
static zinf_status put(zinf_st_writer *w, const void *p, size_t n) {
    const unsigned char *b = p;
    if (!w->direct) {
        ZINF_CHECK(write_at(w->fd, b, n, w->at, w->tmp));
        w->at += n;
        return ZINF_OK;
    }
    while (n) {
        size_t k = STAGE_BYTES - w->fill < n ? STAGE_BYTES - w->fill : n;
        memcpy(w->stage + w->fill, b, k);
        w->fill += k, b += k, n -= k;
        if (w->fill == STAGE_BYTES) {
            ZINF_CHECK(write_at(w->fd, w->stage, STAGE_BYTES, w->at, w->tmp));
            w->at += STAGE_BYTES, w->fill = 0;
        }
    }
    return ZINF_OK;
}

// The staged tail, as whole blocks (zeros after the end), then the file cut to its size.
static zinf_status put_tail(zinf_st_writer *w) {
    if (!w->direct || !w->fill) return ZINF_OK;
    size_t n = (w->fill + DIRECT_ALIGN - 1) / DIRECT_ALIGN * DIRECT_ALIGN;
    memset(w->stage + w->fill, 0, n - w->fill);
    ZINF_CHECK(write_at(w->fd, w->stage, n, w->at, w->tmp));
    if (ftruncate(w->fd, (off_t)(w->at + w->fill)) != 0) return zinf_fail_errno(errno, "%s: truncate", w->tmp);
    w->at += w->fill, w->fill = 0;
    return ZINF_OK;
}

// The header as written: compact JSON, then spaces that align the data to 8 bytes, as
// the format allows.
static char *dump_header(json_t *h, size_t *len) {
    char *s = json_dumps(h, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!s) return NULL;
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

static zinf_status check_tensors(const char *path, const zinf_st_tensor *t, int n) {
    for (int i = 0; i < n; i++) {
        uint64_t count = 1;
        for (int d = 0; d < t[i].ndim && d < ZINF_ST_MAX_DIMS; d++)
            count *= (uint64_t)t[i].shape[d];
        if (!t[i].name || strlen(t[i].name) > 200 || !dtype_tag(t[i].dtype) || t[i].ndim < 0 ||
            t[i].ndim > ZINF_ST_MAX_DIMS || count * zinf_dtype_size(t[i].dtype) != t[i].nbytes)
            return zinf_fail(ZINF_ERR_INVAL,
                             "%s: tensor %d (\"%s\"): needs a name (at most 200 bytes), F32/BF16/F16, and bytes "
                             "matching its shape",
                             path, i, t[i].name ? t[i].name : "");
        for (int j = 0; j < i; j++)
            if (strcmp(t[i].name, t[j].name) == 0)
                return zinf_fail(ZINF_ERR_INVAL, "%s: tensor name \"%s\" given twice", path, t[i].name);
    }
    return ZINF_OK;
}

void zinf_st_writer_abort(zinf_st_writer *w) {
    if (!w) return;
    if (w->hfd >= 0) close(w->hfd);
    if (w->fd >= 0) {
        close(w->fd);
        unlink(w->tmp); // never leave a partial file behind
    }
    free(w->stage);
    for (int i = 0; w->names && i < w->n; i++)
        free(w->names[i]);
    json_decref(w->header);
    free(w->names), free(w->nbytes), free(w->path), free(w->tmp), free(w);
}

// Header entries, in file order: __metadata__ (format "pt", as Hugging Face's loader
// wants, the caller's pairs and a placeholder CRC per tensor), then the tensors.
static json_t *build_header(const zinf_st_tensor *t, int n, const char *const *meta, int nmeta) {
    json_t *h = json_object(), *md = json_object();
    if (!h || !md || json_object_set_new(h, "__metadata__", md) != 0) {
        json_decref(h);
        return NULL;
    }
    int bad = json_object_set_new(md, "format", json_string("pt"));
    for (int i = 0; i < nmeta; i++)
        bad |= json_object_set_new(md, meta[2 * i], json_string(meta[2 * i + 1]));
    char key[256];
    for (int i = 0; i < n; i++) {
        crc_key(key, sizeof key, t[i].name);
        bad |= json_object_set_new(md, key, json_string("00000000"));
    }
    uint64_t at = 0;
    for (int i = 0; i < n; i++) {
        json_t *shape = json_array();
        for (int d = 0; d < t[i].ndim; d++)
            bad |= json_array_append_new(shape, json_integer(t[i].shape[d]));
        bad |= json_object_set_new(h, t[i].name,
                                   json_pack("{s:s, s:o, s:[I, I]}", "dtype", dtype_tag(t[i].dtype), "shape", shape,
                                             "data_offsets", (json_int_t)at, (json_int_t)(at + t[i].nbytes)));
        at += t[i].nbytes;
    }
    if (bad) {
        json_decref(h);
        return NULL;
    }
    return h;
}

zinf_status zinf_st_writer_open(zinf_st_writer **out, const char *path, const zinf_st_tensor *t, int n,
                                const char *const *meta, int nmeta) {
    *out = NULL;
    ZINF_CHECK(check_tensors(path, t, n));
    zinf_st_writer *w = calloc(1, sizeof *w);
    if (!w) return zinf_fail(ZINF_ERR_NOMEM, "%s: out of memory", path);
    w->fd = w->hfd = -1;
    w->n = n;
    w->path = strdup(path);
    w->tmp = malloc(strlen(path) + 32);
    w->nbytes = calloc((size_t)n + 1, sizeof *w->nbytes);
    w->names = calloc((size_t)n + 1, sizeof *w->names);
    w->header = build_header(t, n, meta, nmeta);
    bool ok = w->path && w->tmp && w->nbytes && w->names && w->header;
    for (int i = 0; ok && i < n; i++) {
        w->nbytes[i] = t[i].nbytes;
        ok = (w->names[i] = strdup(t[i].name)) != NULL;
    }
    if (!ok) {
        zinf_st_writer_abort(w);
        return zinf_fail(ZINF_ERR_NOMEM, "%s: out of memory", path);
    }
    sprintf(w->tmp, "%s.tmp-%d", path, (int)getpid());
    char *hdr = dump_header(w->header, &w->hlen);
    zinf_status s = hdr ? ZINF_OK : zinf_fail(ZINF_ERR_NOMEM, "%s: out of memory for the header", path);
    if (s == ZINF_OK && (w->hfd = open(w->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0)
        s = zinf_fail_errno(errno, "%s", w->tmp);
    if (s == ZINF_OK) {
        w->fd = open(w->tmp, O_WRONLY | O_DIRECT | O_CLOEXEC);
        w->direct = w->fd >= 0;
        if (!w->direct && (w->fd = dup(w->hfd)) < 0) s = zinf_fail_errno(errno, "%s", w->tmp);
    }
    if (s == ZINF_OK && w->direct && !(w->stage = aligned_alloc(DIRECT_ALIGN, STAGE_BYTES)))
        s = zinf_fail(ZINF_ERR_NOMEM, "%s: out of memory", path);
    unsigned char len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (unsigned char)((uint64_t)w->hlen >> (8 * i));
    if (s == ZINF_OK) s = put(w, len8, 8);
    if (s == ZINF_OK) s = put(w, hdr, w->hlen);
    free(hdr);
    w->crc = crc32(0, NULL, 0);
    while (w->cur < w->n && w->nbytes[w->cur] == 0) // empty tensors need no append
        w->cur++;
    if (s != ZINF_OK) {
        zinf_st_writer_abort(w);
        return s;
    }
    *out = w;
    return ZINF_OK;
}

// Tensor cur is complete: its CRC goes into the header.
static void close_tensor(zinf_st_writer *w) {
    char key[256], v[16];
    crc_key(key, sizeof key, w->names[w->cur]);
    snprintf(v, sizeof v, "%08lx", (unsigned long)w->crc);
    json_object_set_new(json_object_get(w->header, "__metadata__"), key, json_string(v));
    w->crc = crc32(0, NULL, 0);
    w->got = 0;
    do
        w->cur++;
    while (w->cur < w->n && w->nbytes[w->cur] == 0);
}

zinf_status zinf_st_writer_append(zinf_st_writer *w, const void *p, size_t bytes) {
    const unsigned char *b = p;
    while (bytes) {
        if (w->cur >= w->n) return zinf_fail(ZINF_ERR_INVAL, "%s: %zu bytes past the last tensor", w->path, bytes);
        uint64_t left = w->nbytes[w->cur] - w->got;
        size_t k = bytes < left ? bytes : (size_t)left;
        ZINF_CHECK(put(w, b, k));
        for (size_t c = 0; c < k; c += UINT_MAX)
            w->crc = crc32(w->crc, b + c, (uInt)(k - c < UINT_MAX ? k - c : UINT_MAX));
        w->got += k, b += k, bytes -= k;
        if (w->got == w->nbytes[w->cur]) close_tensor(w);
    }
    return ZINF_OK;
}

zinf_status zinf_st_writer_finish(zinf_st_writer *w) {
    zinf_status s = ZINF_OK;
    if (w->cur < w->n)
        s = zinf_fail(ZINF_ERR_INTERNAL, "%s: tensor \"%s\" got %llu of its %llu bytes", w->path, w->names[w->cur],
                      (unsigned long long)w->got, (unsigned long long)w->nbytes[w->cur]);
    size_t len = 0;
    char *hdr = s == ZINF_OK ? dump_header(w->header, &len) : NULL;
    if (s == ZINF_OK && (!hdr || len != w->hlen))
        s = zinf_fail(ZINF_ERR_INTERNAL, "%s: the header changed size with its checksums", w->path);
    if (s == ZINF_OK) s = put_tail(w);
    // The header's block was written directly; its rewrite through the page cache reads
    // it back from the disk first, so the two never disagree.
    if (s == ZINF_OK) s = write_at(w->hfd, hdr, len, 8, w->tmp);
    free(hdr);
    if (s == ZINF_OK && fsync(w->hfd) != 0) s = zinf_fail_errno(errno, "%s: fsync", w->tmp);
    int fd = w->fd, hfd = w->hfd;
    w->fd = w->hfd = -1;
    if (close(fd) != 0 && s == ZINF_OK) s = zinf_fail_errno(errno, "%s: close", w->tmp);
    if (close(hfd) != 0 && s == ZINF_OK) s = zinf_fail_errno(errno, "%s: close", w->tmp);
    if (s == ZINF_OK && rename(w->tmp, w->path) != 0) s = zinf_fail_errno(errno, "%s: rename to %s", w->tmp, w->path);
    if (s != ZINF_OK) unlink(w->tmp);
    zinf_st_writer_abort(w); // frees what is left
    return s;
}

zinf_status zinf_safetensors_write(const char *path, const zinf_st_tensor *t, int n) {
    for (int i = 0; i < n; i++)
        if (t[i].nbytes && !t[i].data)
            return zinf_fail(ZINF_ERR_INVAL, "%s: tensor %d (\"%s\"): no data", path, i, t[i].name ? t[i].name : "");
    zinf_st_writer *w;
    ZINF_CHECK(zinf_st_writer_open(&w, path, t, n, NULL, 0));
    for (int i = 0; i < n; i++) {
        zinf_status s = zinf_st_writer_append(w, t[i].data, t[i].nbytes);
        if (s != ZINF_OK) {
            zinf_st_writer_abort(w);
            return s;
        }
    }
    return zinf_st_writer_finish(w);
}
