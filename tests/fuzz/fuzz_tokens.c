// libFuzzer target: zinf_tokens_open on token data in every data.format (tokens-u16,
// text-bytes, tokens-u32, megatron), then windows read with zinf_tokens_window into
// buffers of exactly seq_len tokens, checked against the tokens the file holds.
// Input: 4 bytes of settings, then the file (megatron: the .idx and the .bin).
//   byte 0, bits 0-1: the format: 0 tokens-u16, 1 text-bytes, 2 tokens-u32, 3 megatron
//           (so the ASCII digits '0' to '7' name the modes a seed starts with)
//     tokens-u16, text-bytes, tokens-u32:
//     bit 2: the file starts with an llm.c header (256 x int32) made here, whose version
//            and token count are the file's first 8 bytes (the header is 1 KiB of
//            mostly zeros, too large for a readable seed)
//     bit 3: that header carries the other llm.c kind's magic: Llama 3's 20240801 for
//            tokens-u16 and text-bytes, GPT-2's 20240520 for tokens-u32
//     megatron:
//     bit 2: the input is the .idx's size (4 bytes, little-endian), the .idx, then the
//            .bin, both as they are; else the .idx is made here (below)
//     bit 3: data.path names PREFIX.bin, else PREFIX
//   byte 1: seq_len - 1; bytes 2-3: vocab_size - 1, little-endian
// A made Megatron index, which a fuzzer could not find by flipping bytes (past the magic
// its counts, lengths and pointers must all agree with each other and the .bin), holds
// the .bin's tokens back to back as Megatron's builder writes them; then at most one
// field is made wrong. After the settings:
//   byte 0: the dtype code: below 0x80 a token code by bits 0-1 (1 uint8, 8 uint16,
//           4 int32, 5 int64), else the byte less 0x80 (mostly codes zinf refuses)
//   byte 1: S, the sequence count; byte 2: sequence i (0 < i < S) starts a document
//           when bit i % 8 is set
//   byte 3: the fault (enum fault; other values: none), byte 4 its index k, bytes 5-12
//           its value v (uint64, little-endian)
//   S - 1 bytes: the lengths of sequences 0 to S - 2 in tokens, each cut to the tokens
//           left; the last sequence holds the rest
//   the rest: the .bin, cut to whole tokens.
// Where the target knows the layout (all but a Megatron index given as it is, or made
// wrong), the file must open exactly when it is valid, with its token count, and a window
// must fail exactly when one of its tokens is outside the vocab.
// Seeds: tests/fuzz/corpus/tokens/.
#include <stdbool.h>

#include "fuzz.h"
#include "zinf_model.h"

enum {
    LLMC_HEADER_BYTES = 1024,
    GPT2_MAGIC = 20240520,
    LLAMA3_MAGIC = 20240801,
    MM_HEAD = 9 + 8 + 1 + 8 + 8, // magic, version, dtype code, sequence and document counts
    MM_GEN = 13,                 // the made index's bytes before the lengths
    MAX_WINDOWS = 16,
};

// A made Megatron index's one wrong field; S and D are the header's two counts.
enum fault {
    FAULT_MAGIC = 1, // magic byte k % 9 = v
    FAULT_VERSION,   // version = v
    FAULT_NSEQ,      // S = v
    FAULT_NDOC,      // D = v
    FAULT_NSEQ_FIT,  // S and D that still add up to the .idx's size, S from v: the arrays read shifted
    FAULT_LENGTH,    // length k % S = v (int32)
    FAULT_POINTER,   // pointer k % S = v
    FAULT_DOC,       // document index k % D = v
    FAULT_MODES,     // one byte more per sequence, as a multimodal index has
    FAULT_IDX_SIZE,  // the .idx cut or zero-padded to v % (its size + 64) bytes
    FAULT_BIN_SIZE,  // the .bin cut or zero-padded to v % (its size + 16) bytes
    FAULTS,
};

// What the reader must make of the file: count tokens of width bytes from base (signed:
// Megatron's int32 and int64), or a failure (count -1); count -2: not known here.
typedef struct expect {
    int64_t count;
    const uint8_t *base;
    int width;
    bool is_signed;
} expect;

static uint8_t file[1 << 20], idx[8192];
static int idx_fd = -1;
// A Megatron dataset is two files named PREFIX.bin and PREFIX.idx: links in a directory
// of the target's own to the memfd of fuzz_file and one more, so a run does no disk I/O.
static char dir[4096], prefix[4200], bin_link[4200], idx_link[4200];

static uint64_t le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static void put(uint8_t *p, uint64_t v, int n) {
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void remove_links(void) {
    unlink(bin_link), unlink(idx_link);
    rmdir(dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    fuzz_init();
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/zinf-fuzz-tokens-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) FUZZ_FAIL("mkdtemp %s failed", dir);
    atexit(remove_links); // libFuzzer exits with exit(); after a crash (_Exit) the directory stays
    if ((idx_fd = memfd_create("zinf-fuzz-idx", MFD_CLOEXEC)) < 0) FUZZ_FAIL("memfd_create failed");
    char idx_fd_path[64];
    snprintf(idx_fd_path, sizeof idx_fd_path, "/proc/self/fd/%d", idx_fd);
    snprintf(prefix, sizeof prefix, "%s/d", dir);
    snprintf(bin_link, sizeof bin_link, "%s.bin", prefix);
    snprintf(idx_link, sizeof idx_link, "%s.idx", prefix);
    if (symlink(fuzz_file("", 0), bin_link) != 0 || symlink(idx_fd_path, idx_link) != 0)
        FUZZ_FAIL("symlink in %s failed", dir);
    return 0;
}

// bytes as the content of the .idx.
static void write_idx(const void *bytes, size_t n) {
    if (ftruncate(idx_fd, 0) != 0) FUZZ_FAIL("ftruncate failed");
    for (size_t at = 0; at < n;) {
        ssize_t w = pwrite(idx_fd, (const char *)bytes + at, n - at, (off_t)at);
        if (w <= 0) FUZZ_FAIL("pwrite failed");
        at += (size_t)w;
    }
}

// ---- what the reader must make of a file ----

// tokens-u16 / tokens-u32 (width 2 / 4), n bytes at f: an llm.c file when it starts with
// either kind's magic, else headerless ids.
static expect expect_ids(const uint8_t *f, size_t n, int width) {
    expect e = {-1, f, width, false};
    int32_t magic = n >= 4 ? (int32_t)le(f, 4) : 0;
    if (magic == GPT2_MAGIC || magic == LLAMA3_MAGIC) {
        int kind_width = magic == GPT2_MAGIC ? 2 : 4, version = magic == GPT2_MAGIC ? 1 : 7;
        if (kind_width != width || n < LLMC_HEADER_BYTES || (int32_t)le(f + 4, 4) != version) return e;
        int32_t count = (int32_t)le(f + 8, 4);
        if (count < 0 || (uint64_t)count * (uint64_t)width != n - LLMC_HEADER_BYTES) return e;
        e.count = count, e.base = f + LLMC_HEADER_BYTES;
    } else if (n > 0 && n % (size_t)width == 0) {
        e.count = (int64_t)(n / (size_t)width);
    }
    return e;
}

// Token i as the reader widens it: a uint32 stays positive, an int32 or int64 may not.
static int64_t token(const expect *e, int64_t i) {
    uint64_t v = le(e->base + i * e->width, e->width);
    return e->is_signed && e->width == 4 ? (int64_t)(int32_t)v : (int64_t)v;
}

// ---- Megatron ----

// The .idx and .bin as the input gives them (bit 2); *bin_n: the .bin's bytes.
static bool megatron_given(const uint8_t *d, size_t size, size_t *bin_n) {
    if (size < 4) return false;
    size_t idx_n = (size_t)le(d, 4);
    if (idx_n > size - 4 || size - 4 - idx_n > sizeof file) return false;
    write_idx(d + 4, idx_n);
    *bin_n = size - 4 - idx_n;
    memcpy(file, d + 4 + idx_n, *bin_n);
    return true;
}

// The .idx made from d (the layout in the top comment); the .bin into file (*bin_n bytes).
static bool megatron_made(const uint8_t *d, size_t size, size_t *bin_n, expect *e) {
    static const int token_codes[4] = {1, 8, 4, 5};
    if (size < MM_GEN) return false;
    int code = d[0] < 0x80 ? token_codes[d[0] & 3] : d[0] - 0x80, nseq = d[1], k = d[4];
    int width = code == 8 ? 2 : code == 4 ? 4 : code == 5 ? 8 : 1;
    bool token_code = code == 1 || code == 8 || code == 4 || code == 5;
    enum fault fault = d[3] < FAULTS ? (enum fault)d[3] : 0;
    uint64_t v = le(d + 5, 8);
    size_t nlen = nseq ? (size_t)nseq - 1 : 0;
    if (size - MM_GEN < nlen) return false;
    const uint8_t *lens_in = d + MM_GEN, *bin = lens_in + nlen;
    size_t n = size - MM_GEN - nlen;
    if (n > sizeof file - 16) return false;
    n -= n % (size_t)width;
    memcpy(file, bin, n);

    // Documents: [0, the sequences that start one, S], as the builder's document_indices.
    int ndoc = 2;
    for (int i = 1; i < nseq; i++)
        ndoc += d[2] >> (i % 8) & 1;
    size_t idx_n = MM_HEAD + 12 * (size_t)nseq + 8 * (size_t)ndoc;
    memset(idx, 0, sizeof idx);
    memcpy(idx, "MMIDIDX\0\0", 9);
    put(idx + 9, 1, 8);
    idx[17] = (uint8_t)code;
    put(idx + 18, (uint64_t)nseq, 8);
    put(idx + 26, (uint64_t)ndoc, 8);
    uint8_t *lens = idx + MM_HEAD, *ptrs = lens + 4 * nseq, *docs = ptrs + 8 * nseq;
    uint64_t left = n / (size_t)width, at = 0; // tokens
    for (int i = 0, doc = 1; i < nseq; i++) {
        uint64_t len = i < nseq - 1 && lens_in[i] < left ? lens_in[i] : left;
        put(lens + 4 * i, len, 4);
        put(ptrs + 8 * i, at * (uint64_t)width, 8);
        at += len, left -= len;
        if (i > 0 && (d[2] >> (i % 8) & 1)) put(docs + 8 * doc++, (uint64_t)i, 8);
    }
    put(docs + 8 * (ndoc - 1), (uint64_t)nseq, 8);

    switch (fault) {
    case FAULT_MAGIC: idx[k % 9] = (uint8_t)v; break;
    case FAULT_VERSION: put(idx + 9, v, 8); break;
    case FAULT_NSEQ: put(idx + 18, v, 8); break;
    case FAULT_NDOC: put(idx + 26, v, 8); break;
    case FAULT_NSEQ_FIT: {
        // idx_n - MM_HEAD = 12 S + 8 D: S of the same parity as the real one.
        uint64_t room = idx_n - MM_HEAD, s = v % (room / 12 + 1);
        if ((room - 12 * s) % 8) s = s ? s - 1 : 1;
        put(idx + 18, s, 8);
        put(idx + 26, (room - 12 * s) / 8, 8);
        break;
    }
    case FAULT_LENGTH:
        if (nseq) put(lens + 4 * (k % nseq), v, 4);
        break;
    case FAULT_POINTER:
        if (nseq) put(ptrs + 8 * (k % nseq), v, 8);
        break;
    case FAULT_DOC: put(docs + 8 * (k % ndoc), v, 8); break;
    case FAULT_MODES: idx_n += (size_t)nseq; break; // zeros: mode 0 for every sequence
    case FAULT_IDX_SIZE: idx_n = (size_t)(v % (idx_n + 64)); break;
    case FAULT_BIN_SIZE: {
        size_t m = (size_t)(v % (n + 16));
        if (m > n) memset(file + n, 0, m - n);
        n = m;
        break;
    }
    default: break;
    }
    write_idx(idx, idx_n);
    *bin_n = n;
    // Valid unless made wrong: a token code, a sequence to hold the tokens, and some
    // tokens (an empty .bin is refused).
    if (fault)
        *e = (expect){-2, file, width, false};
    else
        *e = (expect){token_code && nseq && n ? (int64_t)(n / (size_t)width) : -1, file, width, code == 4 || code == 5};
    return true;
}

// ---- the target ----

// Window w into buffers sized for it: ids within vocab and targets the inputs shifted;
// where e knows the tokens, they are the file's, and the window fails exactly when one
// of its seq_len + 1 tokens is outside [0, vocab). A failure names what.
static void window(const zinf_tokens *t, const expect *e, int64_t w, int seq_len, int vocab, const char *what) {
    int32_t *in = malloc((size_t)seq_len * sizeof *in), *tg = malloc((size_t)seq_len * sizeof *tg);
    if (!in || !tg) FUZZ_FAIL("out of memory");
    fuzz_clear_error();
    zinf_status s = zinf_tokens_window(t, w, seq_len, vocab, in, tg);
    if (s != ZINF_OK) fuzz_check_error(s, what);
    for (int i = 0; s == ZINF_OK && i < seq_len; i++) {
        if (in[i] < 0 || in[i] >= vocab || tg[i] < 0 || tg[i] >= vocab)
            FUZZ_FAIL("window %lld: token %d or %d outside vocab %d", (long long)w, in[i], tg[i], vocab);
        if (i > 0 && in[i] != tg[i - 1]) FUZZ_FAIL("window %lld: targets are not the inputs shifted", (long long)w);
    }
    if (e->count >= 0) {
        bool outside = false;
        for (int i = 0; i <= seq_len; i++) {
            int64_t id = token(e, w * seq_len + i);
            outside |= id < 0 || id >= vocab;
            if (s == ZINF_OK && (i < seq_len ? in[i] : tg[i - 1]) != id)
                FUZZ_FAIL("window %lld: token %d is %d, the file's is %lld", (long long)w, i,
                          i < seq_len ? in[i] : tg[i - 1], (long long)id);
        }
        if (outside != (s != ZINF_OK))
            FUZZ_FAIL("window %lld: %s, but %s of its tokens is outside vocab %d", (long long)w,
                      s == ZINF_OK ? "read" : "refused", outside ? "one" : "none", vocab);
    }
    free(in), free(tg);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const zinf_data_format formats[] = {ZINF_DATA_TOKENS_U16, ZINF_DATA_TEXT_BYTES, ZINF_DATA_TOKENS_U32,
                                               ZINF_DATA_MEGATRON};
    static const int min_width[] = {2, 1, 4, 1};
    if (size < 4) return 0;
    int format = data[0] & 3, seq_len = data[1] + 1, vocab = (data[2] | data[3] << 8) + 1;
    bool bit2 = data[0] & 4, bit3 = data[0] & 8;
    data += 4, size -= 4;
    size_t n; // bytes of the token file (megatron: the .bin)
    expect e;
    const char *path, *what; // what: the part of path every failure detail must name
    if (formats[format] == ZINF_DATA_MEGATRON) {
        if (bit2) {
            if (!megatron_given(data, size, &n)) return 0;
            e = (expect){-2, file, 1, false};
        } else if (!megatron_made(data, size, &n, &e)) {
            return 0;
        }
        fuzz_file(file, n);
        path = bit3 ? bin_link : prefix, what = prefix;
    } else {
        if (bit2) {
            if (size < 8 || size - 8 > sizeof file - LLMC_HEADER_BYTES) return 0;
            bool llama = (formats[format] == ZINF_DATA_TOKENS_U32) != bit3;
            memset(file, 0, LLMC_HEADER_BYTES);
            put(file, llama ? LLAMA3_MAGIC : GPT2_MAGIC, 4);
            memcpy(file + 4, data, 8);
            memcpy(file + LLMC_HEADER_BYTES, data + 8, size - 8);
            n = LLMC_HEADER_BYTES + size - 8;
        } else {
            if (size > sizeof file) return 0;
            memcpy(file, data, size);
            n = size;
        }
        path = what = fuzz_file(file, n);
        e = formats[format] == ZINF_DATA_TEXT_BYTES ? (expect){n ? (int64_t)n : -1, file, 1, false}
                                                    : expect_ids(file, n, min_width[format]);
    }

    zinf_tokens *t;
    fuzz_clear_error();
    zinf_status s = zinf_tokens_open(&t, path, formats[format]);
    if (e.count >= 0 && s != ZINF_OK)
        FUZZ_FAIL("a valid file of %lld tokens was refused: %s", (long long)e.count, zinf_last_error());
    if (e.count == -1 && s == ZINF_OK)
        FUZZ_FAIL("an invalid file opened with %lld tokens", (long long)zinf_tokens_count(t));
    if (s != ZINF_OK) {
        if (t) FUZZ_FAIL("a handle after a failure");
        fuzz_check_error(s, what);
        return 0;
    }
    int64_t count = zinf_tokens_count(t), nw = zinf_tokens_windows(t, seq_len);
    if (e.count >= 0 ? count != e.count : count < 0 || (uint64_t)count > n / (size_t)min_width[format])
        FUZZ_FAIL("%lld tokens in %zu bytes (expected %lld)", (long long)count, n, (long long)e.count);
    if (nw != (count > 0 ? (count - 1) / seq_len : 0))
        FUZZ_FAIL("%lld windows of %d + 1 of %lld tokens", (long long)nw, seq_len, (long long)count);
    // The first and the last windows: where an off-by-one would read past the data.
    for (int64_t w = 0; w < nw && w < MAX_WINDOWS; w++)
        window(t, &e, w, seq_len, vocab, what);
    for (int64_t w = nw - MAX_WINDOWS > MAX_WINDOWS ? nw - MAX_WINDOWS : MAX_WINDOWS; w < nw; w++)
        window(t, &e, w, seq_len, vocab, what);
    int32_t one[256];
    fuzz_clear_error();
    if ((s = zinf_tokens_window(t, nw, seq_len, vocab, one, one)) == ZINF_OK)
        FUZZ_FAIL("window %lld exists", (long long)nw);
    fuzz_check_error(s, what);
    if (zinf_tokens_window(t, -1, seq_len, vocab, one, one) == ZINF_OK) FUZZ_FAIL("window -1 exists");
    zinf_tokens_close(t);
    return 0;
}
