// Token files as the design's data contract reads them: little-endian token ids, uint16
// (tokens-u16) or uint32 (tokens-u32), headerless as nanoGPT's memmaps or behind llm.c's
// 256 x int32 header, recognized by its magic (dev/data/data_common.py: GPT-2 files magic
// 20240520, version 1, uint16; Llama 3 files magic 20240801, version 7, uint32); text
// where every byte is a token; or a Megatron-LM indexed dataset, a .bin of tokens and a
// .idx of sequence lengths and byte pointers (megatron/core/datasets/indexed_dataset.py).
// One read-only mapping of the tokens; a Megatron .idx is mapped only while it is checked.
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "zinf_internal.h"
#include "zinf_model.h"

enum { LLMC_HEADER_BYTES = 256 * 4 };

// llm.c's two kinds of token file, told apart by the header's first int32.
typedef struct llmc_kind {
    int32_t magic, version;
    int width; // bytes per token
    const char *model, *format;
} llmc_kind;

static const llmc_kind llmc_kinds[] = {
    {20240520, 1, 2, "GPT-2", "tokens-u16"},
    {20240801, 7, 4, "Llama 3", "tokens-u32"},
};

struct zinf_tokens {
    char *path; // the file the tokens are in (a Megatron dataset's .bin)
    void *map;
    size_t map_size;
    const unsigned char *data; // first token
    int64_t count;
    int width;      // bytes per token: 1, 2, 4 or 8
    bool is_signed; // Megatron's int32 and int64: a negative id is an error, not a wrap
};

// Little-endian on any host, from any address: a Megatron index's arrays start at byte 34.
static uint64_t le(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static const char *uint_name(int width) { return width == 2 ? "uint16" : "uint32"; }

// path mapped read-only, whole. An empty file is an error: it has no tokens to map.
static zinf_status map_file(const char *path, void **map, size_t *size) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return zinf_fail_errno(errno, "data file %s", path);
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return zinf_fail_errno(e, "data file %s", path);
    }
    if (sb.st_size == 0) {
        close(fd);
        return zinf_fail(ZINF_ERR_INVAL, "data file %s is empty", path);
    }
    void *m = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (m == MAP_FAILED) return zinf_fail_errno(e, "data file %s: mmap", path);
    *map = m, *size = (size_t)sb.st_size;
    return ZINF_OK;
}

// ---- tokens-u16, tokens-u32 ----

// An llm.c file: the header says how many tokens follow; trust it only when the file
// holds exactly those, as llm.c's own loader does.
static zinf_status open_llmc(zinf_tokens *t, const llmc_kind *k, int width, const char *format) {
    const unsigned char *p = t->map;
    size_t size = t->map_size;
    if (k->width != width)
        return zinf_fail(ZINF_ERR_INVAL,
                         "data file %s is an llm.c %s file (magic %d, %s tokens); set data.format \"%s\", not \"%s\"",
                         t->path, k->model, k->magic, uint_name(k->width), k->format, format);
    if (size < LLMC_HEADER_BYTES)
        return zinf_fail(ZINF_ERR_CORRUPT,
                         "data file %s starts with llm.c's %s magic %d but has %zu bytes, less than the %d-byte "
                         "header: truncated",
                         t->path, k->model, k->magic, size, LLMC_HEADER_BYTES);
    int32_t version = (int32_t)le(p + 4, 4), n = (int32_t)le(p + 8, 4);
    if (version != k->version)
        return zinf_fail(ZINF_ERR_CORRUPT, "data file %s: llm.c %s header version %d; %s files are version %d", t->path,
                         k->model, version, k->model, k->version);
    size_t body = size - LLMC_HEADER_BYTES;
    if (n < 0 || (uint64_t)n * (uint64_t)width != body)
        return zinf_fail(ZINF_ERR_CORRUPT,
                         "data file %s: llm.c header (version %d) says %d tokens (%lld bytes), but %zu bytes follow "
                         "the header",
                         t->path, version, n, (long long)n * width, body);
    t->data += LLMC_HEADER_BYTES;
    t->width = width;
    t->count = n;
    return ZINF_OK;
}

// An llm.c file when the first int32 is one of its magics, else headerless ids.
static zinf_status open_ids(zinf_tokens *t, int width, const char *format) {
    int32_t magic = t->map_size >= 4 ? (int32_t)le(t->map, 4) : 0;
    for (size_t k = 0; k < sizeof llmc_kinds / sizeof llmc_kinds[0]; k++)
        if (magic == llmc_kinds[k].magic) return open_llmc(t, &llmc_kinds[k], width, format);
    if (t->map_size % (size_t)width)
        return zinf_fail(ZINF_ERR_INVAL,
                         "data file %s: %zu bytes is not a whole number of %s tokens (data.format %s; %s)", t->path,
                         t->map_size, uint_name(width), format,
                         width == 2 ? "use text-bytes for text" : "use tokens-u16 for uint16 ids");
    t->width = width;
    t->count = (int64_t)(t->map_size / (size_t)width);
    return ZINF_OK;
}

// ---- Megatron-LM indexed datasets ----
// The .idx: "MMIDIDX\0\0", u64 version 1, u8 dtype code, u64 sequence count S, u64
// document count D, then int32 lengths[S] (tokens), int64 pointers[S] (bytes into the
// .bin), int64 document indices[D] (the sequence each document starts at, and S last).

enum { MM_HEADER_BYTES = 9 + 8 + 1 + 8 + 8 };

// Megatron's DType codes. Width 0: not token ids zinf reads (the floats, and int8 and
// int16, which Megatron's builder never picks for tokens).
typedef struct mm_dtype {
    const char *name;
    int width;
    bool is_signed;
} mm_dtype;

static const mm_dtype mm_dtypes[] = {
    [1] = {"uint8", 1, false}, [2] = {"int8", 0, true},     [3] = {"int16", 0, true},    [4] = {"int32", 4, true},
    [5] = {"int64", 8, true},  [6] = {"float64", 0, false}, [7] = {"float32", 0, false}, [8] = {"uint16", 2, false},
};

// Check the index p (size bytes, from file idx) against t's .bin and take the token
// width from it. zinf reads the sequences as one stream in index order, which is
// document order, so it holds the index to the layout Megatron's builder writes:
// sequence i starts where i - 1 ends, the .bin is exactly the sequences, and the
// document indices rise through them.
static zinf_status megatron_check(zinf_tokens *t, const char *idx, const unsigned char *p, size_t size) {
    if (size < 9 || memcmp(p, "MMIDIDX\0\0", 9) != 0)
        return zinf_fail(ZINF_ERR_INVAL,
                         "Megatron index %s does not start with \"MMIDIDX\\0\\0\"; data.format \"megatron\" reads the "
                         ".bin and .idx Megatron-LM's preprocess_data.py writes",
                         idx);
    if (size < MM_HEADER_BYTES)
        return zinf_fail(ZINF_ERR_CORRUPT, "Megatron index %s: %zu bytes, less than its %d-byte header: truncated", idx,
                         size, MM_HEADER_BYTES);
    uint64_t version = le(p + 9, 8), code = p[17], nseq = le(p + 18, 8), ndoc = le(p + 26, 8);
    if (version != 1)
        return zinf_fail(ZINF_ERR_CORRUPT, "Megatron index %s: version %llu; Megatron's indexes are version 1", idx,
                         (unsigned long long)version);
    if (code == 0 || code >= sizeof mm_dtypes / sizeof mm_dtypes[0])
        return zinf_fail(ZINF_ERR_CORRUPT, "Megatron index %s: dtype code %llu is none of Megatron's (1 to 8)", idx,
                         (unsigned long long)code);
    const mm_dtype *dt = &mm_dtypes[code];
    if (!dt->width)
        return zinf_fail(ZINF_ERR_INVAL,
                         "Megatron index %s: dtype code %llu (%s) holds no token ids zinf reads; it reads codes 1 "
                         "(uint8), 8 (uint16), 4 (int32) and 5 (int64)%s",
                         idx, (unsigned long long)code, dt->name,
                         // DeepSpeed's copy of the builder (data_sampling) renumbered the codes past 5.
                         code == 6 || code == 7 ? " as Megatron-LM numbers them (DeepSpeed's data_sampling builder "
                                                  "writes uint16 and uint32 as 6 and 7; write the dataset with "
                                                  "Megatron-LM's tools/preprocess_data.py)"
                                                : "");
    // 12 bytes per sequence (an int32 length and an int64 pointer), 8 per document index.
    uint64_t need, docs;
    bool over = __builtin_mul_overflow(nseq, (uint64_t)12, &need) || __builtin_mul_overflow(ndoc, (uint64_t)8, &docs) ||
                __builtin_add_overflow(need, docs, &need) ||
                __builtin_add_overflow(need, (uint64_t)MM_HEADER_BYTES, &need);
    if (over || need != size)
        return zinf_fail(ZINF_ERR_CORRUPT,
                         "Megatron index %s: its %d-byte header, %llu sequences (12 bytes each) and %llu document "
                         "indices (8 bytes each) do not add up to its %zu bytes%s",
                         idx, MM_HEADER_BYTES, (unsigned long long)nseq, (unsigned long long)ndoc, size,
                         !over && need + nseq == size ? " (one byte more per sequence: a multimodal index with "
                                                        "sequence modes, which zinf does not read)"
                                                      : "");
    const unsigned char *lens = p + MM_HEADER_BYTES, *ptrs = lens + 4 * nseq, *docidx = ptrs + 8 * nseq;
    uint64_t at = 0; // bytes of the .bin that the sequences before i cover
    for (uint64_t i = 0; i < nseq; i++) {
        int32_t len = (int32_t)le(lens + 4 * i, 4);
        int64_t ptr = (int64_t)le(ptrs + 8 * i, 8);
        if (len < 0)
            return zinf_fail(ZINF_ERR_CORRUPT, "Megatron index %s: sequence %llu has length %d", idx,
                             (unsigned long long)i, len);
        if ((uint64_t)ptr != at)
            return zinf_fail(ZINF_ERR_CORRUPT,
                             "Megatron index %s: sequence %llu starts at byte %lld of %s, not at byte %llu where the "
                             "sequences before it end; zinf reads sequences stored back to back in index order",
                             idx, (unsigned long long)i, (long long)ptr, t->path, (unsigned long long)at);
        uint64_t bytes = (uint64_t)len * (uint64_t)dt->width;
        if (bytes > t->map_size - at)
            return zinf_fail(ZINF_ERR_CORRUPT,
                             "Megatron index %s: sequence %llu (%d tokens from byte %lld) runs past the end of %s (%zu "
                             "bytes)",
                             idx, (unsigned long long)i, len, (long long)ptr, t->path, t->map_size);
        at += bytes;
    }
    if (at != t->map_size)
        return zinf_fail(ZINF_ERR_CORRUPT,
                         "data file %s: %zu bytes, but its index %s gives its %llu sequences of %s tokens %llu bytes",
                         t->path, t->map_size, idx, (unsigned long long)nseq, dt->name, (unsigned long long)at);
    int64_t prev = 0;
    for (uint64_t j = 0; j < ndoc; j++) {
        int64_t d = (int64_t)le(docidx + 8 * j, 8);
        if (d < prev || (uint64_t)d > nseq)
            return zinf_fail(ZINF_ERR_CORRUPT,
                             "Megatron index %s: document index %llu is %lld; document indices never fall and stay "
                             "within 0 to the sequence count %llu",
                             idx, (unsigned long long)j, (long long)d, (unsigned long long)nseq);
        prev = d;
    }
    t->width = dt->width;
    t->is_signed = dt->is_signed;
    t->count = (int64_t)(t->map_size / (size_t)dt->width);
    return ZINF_OK;
}

static zinf_status open_megatron(zinf_tokens *t, const char *idx) {
    void *map;
    size_t size;
    ZINF_CHECK(map_file(idx, &map, &size));
    zinf_status st = megatron_check(t, idx, map, size);
    munmap(map, size);
    return st;
}

// ---- the reader ----

zinf_status zinf_tokens_open(zinf_tokens **out, const char *path, zinf_data_format format) {
    *out = NULL;
    char *file = NULL, *idx = NULL;
    if (format == ZINF_DATA_MEGATRON)
        ZINF_CHECK(zinf_data_megatron_files(path, &file, &idx));
    else if (!(file = strdup(path)))
        return zinf_fail(ZINF_ERR_NOMEM, "data file %s: out of memory", path);
    zinf_tokens *t = calloc(1, sizeof *t);
    if (!t) {
        free(file), free(idx);
        return zinf_fail(ZINF_ERR_NOMEM, "data file %s: out of memory", path);
    }
    t->path = file;
    zinf_status st = map_file(file, &t->map, &t->map_size);
    if (st == ZINF_OK) {
        t->data = t->map;
        switch (format) {
        case ZINF_DATA_TEXT_BYTES:
            t->width = 1;
            t->count = (int64_t)t->map_size;
            break;
        case ZINF_DATA_TOKENS_U16: st = open_ids(t, 2, "tokens-u16"); break;
        case ZINF_DATA_TOKENS_U32: st = open_ids(t, 4, "tokens-u32"); break;
        case ZINF_DATA_MEGATRON: st = open_megatron(t, idx); break;
        default: st = zinf_fail(ZINF_ERR_INVAL, "data file %s: unknown data format %d", path, (int)format);
        }
    }
    free(idx);
    if (st != ZINF_OK) {
        zinf_tokens_close(t);
        return st;
    }
    *out = t;
    return ZINF_OK;
}

void zinf_tokens_close(zinf_tokens *t) {
    if (!t) return;
    if (t->map) munmap(t->map, t->map_size);
    free(t->path);
    free(t);
}

int64_t zinf_tokens_count(const zinf_tokens *t) { return t->count; }

int64_t zinf_tokens_windows(const zinf_tokens *t, int seq_len) {
    return seq_len > 0 && t->count > seq_len ? (t->count - 1) / seq_len : 0;
}

// Token i widened to int64, so that neither a uint32 past INT32_MAX nor a negative
// int32 or int64 can wrap into the vocabulary on its way to the check.
static int64_t token_at(const zinf_tokens *t, int64_t i) {
    const unsigned char *p = t->data + i * t->width;
    switch (t->width) {
    case 1: return p[0];
    case 2: return p[0] | p[1] << 8;
    case 4: return t->is_signed ? (int64_t)(int32_t)le(p, 4) : (int64_t)le(p, 4);
    default: return (int64_t)le(p, 8); // Megatron's int64
    }
}

zinf_status zinf_tokens_window(const zinf_tokens *t, int64_t w, int seq_len, int vocab, int32_t *inputs,
                               int32_t *targets) {
    if (w < 0 || w >= zinf_tokens_windows(t, seq_len))
        return zinf_fail(ZINF_ERR_INVAL, "data file %s: no window %lld of %d tokens", t->path, (long long)w, seq_len);
    int64_t o = w * seq_len;
    for (int i = 0; i <= seq_len; i++) {
        int64_t id = token_at(t, o + i);
        if (id < 0)
            return zinf_fail(ZINF_ERR_INVAL, "data file %s: token %lld at position %lld is negative", t->path,
                             (long long)id, (long long)(o + i));
        if (id >= vocab)
            return zinf_fail(ZINF_ERR_INVAL, "data file %s: token %lld at position %lld is not below vocab_size %d",
                             t->path, (long long)id, (long long)(o + i), vocab);
        if (i < seq_len) inputs[i] = (int32_t)id;
        if (i > 0) targets[i - 1] = (int32_t)id;
    }
    return ZINF_OK;
}
