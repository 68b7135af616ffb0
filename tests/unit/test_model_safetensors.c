// safetensors: the file the safetensors package wrote (tests/ref/safetensors_ref.py)
// read back value for value; zinf's own files read back the same; and every kind of
// malformed or truncated file refused with an error that names the file and tensor;
// files streamed in and out, with their checksums; model directories (shards and their
// index) read as one set of tensors.
// timeout: 10 san=10 cuda-emu=10 san-cuda-emu=10
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "zinf.h"

static float value(int k, size_t i) { return (float)(i % 17) * 0.5f - 4 + (float)k; }

static float elem(const zinf_st_tensor *t, size_t i) {
    uint16_t h;
    switch (t->dtype) {
    case ZINF_DTYPE_F32: return ((const float *)t->data)[i];
    case ZINF_DTYPE_BF16: {
        memcpy(&h, (const char *)t->data + 2 * i, 2);
        uint32_t b = (uint32_t)h << 16;
        float f;
        memcpy(&f, &b, 4);
        return f;
    }
    default: {
        _Float16 x;
        memcpy(&x, (const char *)t->data + 2 * i, 2);
        return (float)x;
    }
    }
}

static void from_package(const char *dir) {
    char path[512];
    snprintf(path, sizeof path, "%s/safetensors.bin", dir);
    zinf_safetensors *st;
    if (zinf_safetensors_open(&st, path) != ZINF_OK) {
        CHECK(0, "open %s: %s", path, zinf_last_error());
        return;
    }
    static const struct {
        const char *name;
        zinf_dtype dtype;
        int ndim;
        int64_t shape[3];
    } want[] = {
        {"transformer.wte.weight", ZINF_DTYPE_F32, 2, {7, 5}},
        {"h.0.attn.c_attn.weight", ZINF_DTYPE_BF16, 3, {3, 4, 2}},
        {"ln_f.bias", ZINF_DTYPE_F16, 1, {9}},
        {"scalar", ZINF_DTYPE_F32, 0, {0}},
        {"empty", ZINF_DTYPE_F32, 2, {0, 3}},
    };
    CHECK(zinf_safetensors_count(st) == 5, "%d tensors, want 5 (metadata is not one)", zinf_safetensors_count(st));
    for (int k = 0; k < 5; k++) {
        const zinf_st_tensor *t = zinf_safetensors_find(st, want[k].name);
        if (!t) {
            CHECK(0, "tensor %s missing", want[k].name);
            continue;
        }
        size_t n = 1;
        CHECK(t->dtype == want[k].dtype && t->ndim == want[k].ndim, "%s: dtype %s ndim %d", t->name,
              zinf_dtype_name(t->dtype), t->ndim);
        for (int d = 0; d < t->ndim; d++) {
            CHECK(t->shape[d] == want[k].shape[d], "%s: shape[%d] %lld", t->name, d, (long long)t->shape[d]);
            n *= (size_t)t->shape[d];
        }
        CHECK(t->nbytes == n * zinf_dtype_size(t->dtype), "%s: %llu bytes", t->name, (unsigned long long)t->nbytes);
        for (size_t i = 0; i < n; i++)
            if (elem(t, i) != value(k, i)) {
                CHECK(0, "%s[%zu] = %g, want %g", t->name, i, (double)elem(t, i), (double)value(k, i));
                break;
            }
    }
    CHECK(zinf_safetensors_find(st, "__metadata__") == NULL, "metadata listed as a tensor");
    CHECK(zinf_safetensors_find(st, "nope") == NULL && zinf_safetensors_at(st, 5) == NULL, "lookups past the end");

    // Written again by zinf, in file order: the same tensors and bytes.
    zinf_st_tensor all[5];
    for (int i = 0; i < 5; i++)
        all[i] = *zinf_safetensors_at(st, i);
    char out[] = "/tmp/zinf-st-XXXXXX";
    int fd = mkstemp(out);
    close(fd);
    CHECK(zinf_safetensors_write(out, all, 5) == ZINF_OK, "write: %s", zinf_last_error());
    zinf_safetensors *back;
    CHECK(zinf_safetensors_open(&back, out) == ZINF_OK, "reopen: %s", zinf_last_error());
    for (int i = 0; back && i < 5; i++) {
        const zinf_st_tensor *a = zinf_safetensors_at(st, i), *b = zinf_safetensors_find(back, a->name);
        CHECK(b && b->dtype == a->dtype && b->ndim == a->ndim && b->nbytes == a->nbytes &&
                  memcmp(b->shape, a->shape, sizeof a->shape) == 0 && memcmp(b->data, a->data, a->nbytes) == 0,
              "%s differs after a round trip", a->name);
    }
    zinf_safetensors_close(back);
    zinf_st_tensor dup[2] = {all[0], all[0]};
    CHECK(zinf_safetensors_write(out, dup, 2) == ZINF_ERR_INVAL, "duplicate names written");
    CHECK_CONTAINS(zinf_last_error(), all[0].name);
    CHECK_CONTAINS(zinf_last_error(), "given twice");
    zinf_st_tensor wrong = all[0];
    wrong.nbytes -= 4;
    CHECK(zinf_safetensors_write(out, &wrong, 1) == ZINF_ERR_INVAL, "a size that does not match the shape written");
    CHECK(zinf_safetensors_write("/nonexistent/dir/w.safetensors", all, 5) == ZINF_ERR_IO, "write to a missing dir");
    CHECK_CONTAINS(zinf_last_error(), "/nonexistent/dir/w.safetensors");
    unlink(out);
    zinf_safetensors_close(st);
}

// Write header h (and data bytes of data_len) as a file; open it; expect status and
// a message containing says.
static void refused(const char *h, size_t data_len, zinf_status want, const char *says) {
    char path[] = "/tmp/zinf-st-bad-XXXXXX";
    int fd = mkstemp(path);
    uint64_t len = strlen(h);
    unsigned char len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (unsigned char)(len >> (8 * i));
    CHECK(write(fd, len8, 8) == 8 && write(fd, h, len) == (ssize_t)len, "write");
    char *zeros = calloc(1, data_len + 1);
    CHECK(write(fd, zeros, data_len) == (ssize_t)data_len, "write");
    free(zeros);
    close(fd);
    zinf_safetensors *st = (zinf_safetensors *)1;
    zinf_status s = zinf_safetensors_open(&st, path);
    CHECK(s == want && st == NULL, "%s: status %s, want %s", h, zinf_status_str(s), zinf_status_str(want));
    CHECK_CONTAINS(zinf_last_error(), says);
    CHECK_CONTAINS(zinf_last_error(), path);
    unlink(path);
}

static void malformed(void) {
    const char *ok = "\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":";
    char h[512];
    refused("{", 0, ZINF_ERR_CORRUPT, "header");
    refused("[1,2]", 0, ZINF_ERR_CORRUPT, "not a JSON object");
    snprintf(h, sizeof h, "{\"a\":{%s[0,8]},\"a\":{%s[8,16]}}", ok, ok);
    refused(h, 16, ZINF_ERR_CORRUPT, "duplicate");
    refused("{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, ZINF_ERR_CORRUPT, "\"a\": needs");
    refused("{\"w\":{\"dtype\":\"Q4\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, ZINF_ERR_CORRUPT,
            "unknown dtype \"Q4\"");
    refused("{\"ids\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8, ZINF_ERR_UNSUPPORTED,
            "\"ids\": dtype I64");
    refused("{\"w\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, ZINF_ERR_CORRUPT, "shape[0]");
    refused("{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, ZINF_ERR_CORRUPT,
            "\"w\": 8 bytes for 3 F32 elements");
    snprintf(h, sizeof h, "{\"w\":{%s[0,8]}}", ok);
    refused(h, 4, ZINF_ERR_CORRUPT, "\"w\": bytes 0..8 are outside the 4 data bytes (truncated file?)");
    snprintf(h, sizeof h, "{\"a\":{%s[0,8]},\"b\":{%s[4,12]}}", ok, ok);
    refused(h, 12, ZINF_ERR_CORRUPT, "overlaps");
    snprintf(h, sizeof h, "{\"a\":{%s[0,8]},\"b\":{%s[12,20]}}", ok, ok);
    refused(h, 20, ZINF_ERR_CORRUPT, "a gap before it");
    snprintf(h, sizeof h, "{\"a\":{%s[0,8]}}", ok);
    refused(h, 12, ZINF_ERR_CORRUPT, "trailing bytes");
    // A header length pointing past the end (a truncated file), and a tiny file.
    char path[] = "/tmp/zinf-st-short-XXXXXX";
    int fd = mkstemp(path);
    unsigned char big[12] = {0xff, 0xff, 0, 0, 0, 0, 0, 0, '{', '}', ' ', ' '};
    CHECK(write(fd, big, sizeof big) == (ssize_t)sizeof big, "write");
    close(fd);
    zinf_safetensors *st;
    CHECK(zinf_safetensors_open(&st, path) == ZINF_ERR_CORRUPT, "a header past the end accepted");
    CHECK_CONTAINS(zinf_last_error(), "does not fit");
    CHECK(truncate(path, 5) == 0, "truncate");
    CHECK(zinf_safetensors_open(&st, path) == ZINF_ERR_CORRUPT, "a 5-byte file accepted");
    CHECK_CONTAINS(zinf_last_error(), "too short");
    unlink(path);
    CHECK(zinf_safetensors_open(&st, "/nonexistent/w.safetensors") == ZINF_ERR_IO, "a missing file opened");
    CHECK_CONTAINS(zinf_last_error(), "/nonexistent/w.safetensors");
}

typedef struct gathered {
    unsigned char bytes[4096];
    size_t n, calls;
} gathered;

static zinf_status gather(void *arg, uint64_t off, const void *p, size_t n) {
    gathered *g = arg;
    CHECK(off == g->n, "chunk at %llu, want %zu", (unsigned long long)off, g->n);
    memcpy(g->bytes + g->n, p, n);
    g->n += n;
    g->calls++;
    return ZINF_OK;
}

// The streaming writer: bytes appended in odd pieces across tensor boundaries, the
// caller's metadata and each tensor's CRC-32 in the header; streaming reads give the
// bytes back in chunks and catch a flipped byte; a write stopped half way leaves nothing.
static void streaming(void) {
    float a[300], b[7];
    for (int i = 0; i < 300; i++)
        a[i] = (float)i * 0.25f;
    for (int i = 0; i < 7; i++)
        b[i] = -(float)i;
    zinf_st_tensor t[3] = {
        {.name = "a", .dtype = ZINF_DTYPE_F32, .ndim = 2, .shape = {20, 15}, .nbytes = sizeof a},
        {.name = "empty", .dtype = ZINF_DTYPE_F32, .ndim = 1, .shape = {0}, .nbytes = 0},
        {.name = "b", .dtype = ZINF_DTYPE_F32, .ndim = 1, .shape = {7}, .nbytes = sizeof b},
    };
    unsigned char all[sizeof a + sizeof b];
    memcpy(all, a, sizeof a);
    memcpy(all + sizeof a, b, sizeof b);
    char out[] = "/tmp/zinf-st-stream-XXXXXX";
    close(mkstemp(out));
    const char *meta[] = {"zinf.rank", "3"};
    zinf_st_writer *w;
    CHECK(zinf_st_writer_open(&w, out, t, 3, meta, 1) == ZINF_OK, "open: %s", zinf_last_error());
    for (size_t at = 0, k = 1; at < sizeof all; at += k, k = k * 3 + 1) {
        size_t n = sizeof all - at < k ? sizeof all - at : k;
        CHECK(zinf_st_writer_append(w, all + at, n) == ZINF_OK, "append: %s", zinf_last_error());
    }
    CHECK(zinf_st_writer_append(w, all, 1) == ZINF_ERR_INVAL, "a byte past the last tensor taken");
    CHECK(zinf_st_writer_finish(w) == ZINF_OK, "finish: %s", zinf_last_error());
    zinf_safetensors *st;
    CHECK(zinf_safetensors_open(&st, out) == ZINF_OK, "open: %s", zinf_last_error());
    if (!st) return;
    CHECK(zinf_safetensors_count(st) == 3, "%d tensors", zinf_safetensors_count(st));
    const char *rank = zinf_safetensors_meta(st, "zinf.rank"), *fmt = zinf_safetensors_meta(st, "format");
    CHECK(rank && strcmp(rank, "3") == 0 && fmt && strcmp(fmt, "pt") == 0, "metadata: rank %s format %s",
          rank ? rank : "-", fmt ? fmt : "-");
    // zlib's CRC-32 of the 7 floats of b, computed with Python's zlib.crc32.
    const char *crc = zinf_safetensors_meta(st, "crc32:b");
    CHECK(crc && strcmp(crc, "85fc29ff") == 0, "crc32:b is %s", crc ? crc : "missing");
    gathered g = {0};
    unsigned char buf[64];
    CHECK(zinf_safetensors_stream(st, zinf_safetensors_find(st, "a"), buf, sizeof buf, gather, &g) == ZINF_OK,
          "stream: %s", zinf_last_error());
    CHECK(g.n == sizeof a && g.calls == (sizeof a + 63) / 64 && memcmp(g.bytes, a, sizeof a) == 0,
          "streamed %zu bytes in %zu calls", g.n, g.calls);
    uint64_t at = (uint64_t)((const char *)zinf_safetensors_find(st, "a")->data - (const char *)zinf_safetensors_at(st, 0)->data);
    zinf_safetensors_close(st);
    // Flip a byte of a: its checksum no longer matches.
    FILE *f = fopen(out, "r+b");
    unsigned char len8[8];
    CHECK(f && fread(len8, 1, 8, f) == 8, "read");
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | len8[i];
    fseek(f, (long)(8 + hlen + at + 100), SEEK_SET);
    fputc(0x5a, f);
    fclose(f);
    CHECK(zinf_safetensors_open(&st, out) == ZINF_OK, "open: %s", zinf_last_error());
    g = (gathered){0};
    CHECK(zinf_safetensors_stream(st, zinf_safetensors_find(st, "a"), buf, sizeof buf, gather, &g) == ZINF_ERR_CORRUPT,
          "a flipped byte passed");
    CHECK_CONTAINS(zinf_last_error(), "tensor \"a\": checksum");
    CHECK_CONTAINS(zinf_last_error(), out);
    zinf_safetensors_close(st);
    // Aborted half way: neither the file nor its temporary stays.
    unlink(out);
    CHECK(zinf_st_writer_open(&w, out, t, 3, NULL, 0) == ZINF_OK, "open: %s", zinf_last_error());
    CHECK(zinf_st_writer_append(w, all, 100) == ZINF_OK, "append");
    CHECK(zinf_st_writer_finish(w) == ZINF_ERR_INTERNAL, "a file with missing bytes finished");
    CHECK_CONTAINS(zinf_last_error(), "tensor \"a\" got 100 of its 1200 bytes");
    CHECK(access(out, F_OK) != 0, "a partial file stayed");
    char tmp[64];
    snprintf(tmp, sizeof tmp, "%s.tmp-%d", out, (int)getpid());
    CHECK(access(tmp, F_OK) != 0, "its temporary stayed");
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    CHECK(f && fputs(text, f) >= 0 && fclose(f) == 0, "writing %s", path);
}

// A model directory: shards and their index read as one set; the index held to them;
// a single file preferred over an index.
static void directories(void) {
    char dir[] = "/tmp/zinf-hf-XXXXXX", p[600];
    CHECK(mkdtemp(dir), "mkdtemp");
    float a[3] = {1, 2, 3}, b[2] = {4, 5};
    zinf_st_tensor ta = {.name = "a", .dtype = ZINF_DTYPE_F32, .ndim = 1, .shape = {3}, .nbytes = 12, .data = a};
    zinf_st_tensor tb = {.name = "b", .dtype = ZINF_DTYPE_F32, .ndim = 1, .shape = {2}, .nbytes = 8, .data = b};
    snprintf(p, sizeof p, "%s/s1.safetensors", dir);
    CHECK(zinf_safetensors_write(p, &ta, 1) == ZINF_OK, "%s", zinf_last_error());
    snprintf(p, sizeof p, "%s/s2.safetensors", dir);
    CHECK(zinf_safetensors_write(p, &tb, 1) == ZINF_OK, "%s", zinf_last_error());
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    write_text(p, "{\"metadata\": {}, \"weight_map\": {\"a\": \"s1.safetensors\", \"b\": \"s2.safetensors\"}}");
    zinf_hf_weights *w;
    CHECK(zinf_hf_weights_open(&w, dir) == ZINF_OK, "%s", zinf_last_error());
    const char *file = NULL;
    const zinf_st_tensor *t = zinf_hf_weights_find(w, "b", &file);
    CHECK(zinf_hf_weights_count(w) == 2 && t && ((const float *)t->data)[1] == 5 && strstr(file, "s2.safetensors"),
          "the shards as one set");
    CHECK(zinf_hf_weights_at(w, 0, NULL) && !zinf_hf_weights_at(w, 2, NULL), "at");
    zinf_hf_weights_close(w);
    // The index puts a tensor where it is not, or leaves out one a shard holds.
    write_text(p, "{\"weight_map\": {\"a\": \"s2.safetensors\", \"b\": \"s2.safetensors\"}}");
    CHECK(zinf_hf_weights_open(&w, dir) == ZINF_ERR_INVAL && !w, "a tensor in the wrong shard");
    CHECK_CONTAINS(zinf_last_error(), "tensor a is not in");
    zinf_st_tensor both[2] = {ta, tb};
    snprintf(p, sizeof p, "%s/s12.safetensors", dir);
    CHECK(zinf_safetensors_write(p, both, 2) == ZINF_OK, "%s", zinf_last_error());
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    write_text(p, "{\"weight_map\": {\"a\": \"s12.safetensors\"}}");
    CHECK(zinf_hf_weights_open(&w, dir) == ZINF_ERR_INVAL, "a shard's tensor left out of the index");
    CHECK_CONTAINS(zinf_last_error(), "holds tensor b");
    write_text(p, "{\"weight_map\": {\"a\": \"s1.safetensors\", \"b\": \"s3.safetensors\"}}");
    CHECK(zinf_hf_weights_open(&w, dir) == ZINF_ERR_INVAL, "a missing shard");
    CHECK_CONTAINS(zinf_last_error(), "s3.safetensors for b, which is missing");
    // model.safetensors wins over the (now broken) index, as from_pretrained has it.
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    CHECK(zinf_safetensors_write(p, &ta, 1) == ZINF_OK, "%s", zinf_last_error());
    CHECK(zinf_hf_weights_open(&w, dir) == ZINF_OK && zinf_hf_weights_count(w) == 1, "the single file");
    zinf_hf_weights_close(w);
    snprintf(p, sizeof p, "rm -rf %s", dir);
    CHECK(system(p) == 0, "%s", p);
}

int main(void) {
    directories();
    const char *dir = getenv("ZINF_REF_DIR") ? getenv("ZINF_REF_DIR") : "build/ref";
    from_package(dir);
    malformed();
    streaming();
    return check_exit("test_model_safetensors");
}
