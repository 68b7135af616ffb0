// Token files in every data.format, written here byte by byte: headerless uint16 and
// uint32 ids, llm.c files with their real 256 x int32 headers (GPT-2: magic 20240520,
// version 1, uint16; Llama 3: magic 20240801, version 7, uint32), text bytes, and
// Megatron-LM .bin/.idx pairs laid out as its MMapIndexedDatasetBuilder writes them.
// Counts, windows and targets come out right, also on datasets DeepSpeed's copy of that
// builder writes (build/pyenv); every lying header or index, a file of another format,
// and an id outside [0, vocab) are errors naming the file and the fault.
// timeout: 15 san=15 cuda-emu=25 san-cuda-emu=30
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "zinf.h"

static char dir[64];

static void put(unsigned char *p, uint64_t v, int n) {
    for (int i = 0; i < n; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static const char *path_of(const char *name) {
    static char p[4][128];
    static int next;
    char *s = p[next++ % 4];
    snprintf(s, sizeof p[0], "%s/%s", dir, name);
    return s;
}

static void write_file(const char *name, const void *data, size_t n) {
    FILE *f = fopen(path_of(name), "wb");
    CHECK(f && fwrite(data, 1, n, f) == n && fclose(f) == 0, "writing %s", name);
}

// n ids of width bytes, little-endian, behind an llm.c header when magic is non-zero.
static void write_ids(const char *name, const int64_t *ids, int n, int width, int32_t magic, int32_t version,
                      int32_t count) {
    size_t head = magic ? 1024 : 0, size = head + (size_t)n * (size_t)width;
    unsigned char *b = calloc(1, size);
    if (magic) {
        put(b, (uint32_t)magic, 4);
        put(b + 4, (uint32_t)version, 4);
        put(b + 8, (uint32_t)count, 4);
    }
    for (int i = 0; i < n; i++)
        put(b + head + (size_t)i * width, (uint64_t)ids[i], width);
    write_file(name, b, size);
    free(b);
}

// Open path and check its count and every window against the ids expected.
static void expect_tokens(const char *path, zinf_data_format format, const int64_t *ids, int n, int seq_len) {
    zinf_tokens *t;
    zinf_status st = zinf_tokens_open(&t, path, format);
    CHECK(st == ZINF_OK, "%s: %s", path, zinf_last_error());
    if (st != ZINF_OK) return;
    CHECK(zinf_tokens_count(t) == n, "%s: %lld tokens, want %d", path, (long long)zinf_tokens_count(t), n);
    int64_t nw = zinf_tokens_windows(t, seq_len);
    CHECK(nw == (n - 1) / seq_len, "%s: %lld windows of %d", path, (long long)nw, seq_len);
    int32_t in[64], tg[64];
    for (int64_t w = 0; w < nw; w++) {
        CHECK(zinf_tokens_window(t, w, seq_len, 1 << 24, in, tg) == ZINF_OK, "%s", zinf_last_error());
        for (int i = 0; i < seq_len; i++) {
            CHECK(in[i] == ids[w * seq_len + i], "%s: window %lld input %d is %d, want %lld", path, (long long)w, i,
                  in[i], (long long)ids[w * seq_len + i]);
            CHECK(tg[i] == ids[w * seq_len + i + 1], "%s: window %lld target %d is %d", path, (long long)w, i, tg[i]);
        }
    }
    CHECK(zinf_tokens_window(t, nw, seq_len, 1 << 24, in, tg) == ZINF_ERR_INVAL, "window past the end");
    zinf_tokens_close(t);
}

// Opening fails with st and a message holding each needle.
static void expect_open_error(const char *path, zinf_data_format format, zinf_status st, const char *n1,
                              const char *n2) {
    zinf_tokens *t = NULL;
    zinf_status got = zinf_tokens_open(&t, path, format);
    CHECK(got == st, "%s: status %s, want %s (%s)", path, zinf_status_str(got), zinf_status_str(st), zinf_last_error());
    CHECK(t == NULL, "%s: a handle after a failure", path);
    if (got == ZINF_OK) zinf_tokens_close(t);
    CHECK_CONTAINS(zinf_last_error(), n1);
    if (n2) CHECK_CONTAINS(zinf_last_error(), n2);
}

// Window 0 (seq_len tokens + 1) fails naming the file, the id and its position.
static void expect_window_error(const char *path, zinf_data_format format, int seq_len, int vocab, const char *n1,
                                const char *n2) {
    zinf_tokens *t;
    zinf_status st = zinf_tokens_open(&t, path, format);
    CHECK(st == ZINF_OK, "%s", zinf_last_error());
    if (st != ZINF_OK) return;
    int32_t in[64], tg[64];
    CHECK(zinf_tokens_window(t, 0, seq_len, vocab, in, tg) == ZINF_ERR_INVAL, "%s: a bad id passed", path);
    CHECK_CONTAINS(zinf_last_error(), path);
    CHECK_CONTAINS(zinf_last_error(), n1);
    CHECK_CONTAINS(zinf_last_error(), n2);
    zinf_tokens_close(t);
}

// ---- Megatron ----

enum { MM_HEAD = 34 };

typedef struct mm_set {
    unsigned char idx[4096];
    size_t idx_len;
    unsigned char bin[4096];
    size_t bin_len;
    int nseq;
} mm_set;

// A dataset as Megatron's builder writes it: each document's sequences (lens[i] tokens
// each, the ids in order) back to back, pointers in bytes, and document indices 0, the
// first sequence of each later document, nseq. doc_start[d]: document d's first sequence.
static void mm_build(mm_set *m, int code, int width, const int *lens, int nseq, const int *doc_start, int ndoc,
                     const int64_t *ids) {
    memset(m, 0, sizeof *m);
    unsigned char *p = m->idx;
    memcpy(p, "MMIDIDX\0\0", 9);
    put(p + 9, 1, 8);
    p[17] = (unsigned char)code;
    put(p + 18, (uint64_t)nseq, 8);
    put(p + 26, (uint64_t)ndoc + 1, 8);
    int64_t ptr = 0, k = 0;
    for (int i = 0; i < nseq; i++) {
        put(p + MM_HEAD + 4 * i, (uint32_t)lens[i], 4);
        put(p + MM_HEAD + 4 * nseq + 8 * i, (uint64_t)ptr, 8);
        for (int j = 0; j < lens[i]; j++, k++)
            put(m->bin + ptr + (int64_t)j * width, (uint64_t)ids[k], width);
        ptr += (int64_t)lens[i] * width;
    }
    for (int d = 0; d < ndoc; d++)
        put(p + MM_HEAD + 12 * nseq + 8 * d, (uint64_t)doc_start[d], 8);
    put(p + MM_HEAD + 12 * nseq + 8 * ndoc, (uint64_t)nseq, 8);
    m->idx_len = MM_HEAD + 12 * (size_t)nseq + 8 * ((size_t)ndoc + 1);
    m->bin_len = (size_t)ptr;
    m->nseq = nseq;
}

static void mm_write(const mm_set *m, const char *prefix) {
    char name[64];
    snprintf(name, sizeof name, "%s.bin", prefix);
    write_file(name, m->bin, m->bin_len);
    snprintf(name, sizeof name, "%s.idx", prefix);
    write_file(name, m->idx, m->idx_len);
}

static void test_megatron(void) {
    // Three documents of one, two and one sequences: 15 tokens in all.
    static const int lens[] = {5, 3, 4, 3};
    static const int docs[] = {0, 1, 3};
    int64_t ids[15];
    for (int i = 0; i < 15; i++)
        ids[i] = 1000 + 37 * i;
    mm_set m;
    static const struct { int code, width; } dtypes[] = {{8, 2}, {4, 4}, {5, 8}};
    for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++) {
        mm_build(&m, dtypes[d].code, dtypes[d].width, lens, 4, docs, 3, ids);
        mm_write(&m, "mm");
        expect_tokens(path_of("mm"), ZINF_DATA_MEGATRON, ids, 15, 4);     // the prefix
        expect_tokens(path_of("mm.bin"), ZINF_DATA_MEGATRON, ids, 15, 7); // the .bin
    }
    int64_t bytes[15];
    for (int i = 0; i < 15; i++)
        bytes[i] = 7 * i + 3;
    mm_build(&m, 1, 1, lens, 4, docs, 3, bytes);
    mm_write(&m, "mm8");
    expect_tokens(path_of("mm8"), ZINF_DATA_MEGATRON, bytes, 15, 2);

    char *bin, *idx;
    CHECK(zinf_data_megatron_files("d/x.bin", &bin, &idx) == ZINF_OK, "%s", zinf_last_error());
    CHECK(strcmp(bin, "d/x.bin") == 0 && strcmp(idx, "d/x.idx") == 0, "PREFIX.bin: %s %s", bin, idx);
    free(bin), free(idx);
    CHECK(zinf_data_megatron_files("d/x", &bin, &idx) == ZINF_OK, "%s", zinf_last_error());
    CHECK(strcmp(bin, "d/x.bin") == 0 && strcmp(idx, "d/x.idx") == 0, "PREFIX: %s %s", bin, idx);
    free(bin), free(idx);

    // Signed dtypes: a negative id, and an int64 id past any vocabulary.
    int64_t neg[15];
    memcpy(neg, ids, sizeof neg);
    neg[6] = -5;
    mm_build(&m, 4, 4, lens, 4, docs, 3, neg);
    mm_write(&m, "neg");
    expect_window_error(path_of("neg.bin"), ZINF_DATA_MEGATRON, 8, 50000, "token -5 at position 6", "negative");
    neg[6] = (int64_t)1 << 40;
    mm_build(&m, 5, 8, lens, 4, docs, 3, neg);
    mm_write(&m, "big");
    expect_window_error(path_of("big.bin"), ZINF_DATA_MEGATRON, 8, 50000, "token 1099511627776 at position 6",
                        "not below vocab_size 50000");
    mm_build(&m, 8, 2, lens, 4, docs, 3, ids);
    mm_write(&m, "vocab");
    expect_window_error(path_of("vocab.bin"), ZINF_DATA_MEGATRON, 4, 1100, "token 1111 at position 3",
                        "not below vocab_size 1100");

    // Lying indexes, each from the good one with one fault.
    static const struct {
        const char *name;
        int off;    // byte of the .idx to set (-1: none)
        uint64_t v; // its new value
        int n;      // bytes
        int idx_delta, bin_delta;
        zinf_status st;
        const char *n1, *n2;
    } bad[] = {
        {"magic", 3, 'X', 1, 0, 0, ZINF_ERR_INVAL, "does not start with \"MMIDIDX", NULL},
        {"version", 9, 2, 8, 0, 0, ZINF_ERR_CORRUPT, "version 2", NULL},
        {"float32", 17, 7, 1, 0, 0, ZINF_ERR_INVAL, "dtype code 7 (float32)", NULL},
        {"float64", 17, 6, 1, 0, 0, ZINF_ERR_INVAL, "dtype code 6 (float64)", "DeepSpeed's data_sampling builder"},
        {"int8", 17, 2, 1, 0, 0, ZINF_ERR_INVAL, "dtype code 2 (int8)", NULL},
        {"code9", 17, 9, 1, 0, 0, ZINF_ERR_CORRUPT, "dtype code 9", NULL},
        {"code0", 17, 0, 1, 0, 0, ZINF_ERR_CORRUPT, "dtype code 0", NULL},
        {"nseq", 18, 5, 8, 0, 0, ZINF_ERR_CORRUPT, "5 sequences", "do not add up"},
        {"nseq_huge", 18, UINT64_MAX / 4, 8, 0, 0, ZINF_ERR_CORRUPT, "do not add up", NULL},
        {"ndoc", 26, 3, 8, 0, 0, ZINF_ERR_CORRUPT, "3 document indices", "do not add up"},
        {"short", -1, 0, 0, -1, 0, ZINF_ERR_CORRUPT, "do not add up", NULL},
        {"modes", -1, 0, 0, 4, 0, ZINF_ERR_CORRUPT, "multimodal", NULL},
        {"header", -1, 0, 0, -(int)(MM_HEAD + 12 * 4 + 8 * 4 - 20), 0, ZINF_ERR_CORRUPT, "less than its 34-byte header",
         NULL},
        {"neglen", MM_HEAD + 4, UINT32_MAX, 4, 0, 0, ZINF_ERR_CORRUPT, "sequence 1 has length -1", NULL},
        {"gap", MM_HEAD + 16 + 8 * 2, 18, 8, 0, 0, ZINF_ERR_CORRUPT, "sequence 2 starts at byte 18", "back to back"},
        {"first", MM_HEAD + 16, 2, 8, 0, 0, ZINF_ERR_CORRUPT, "sequence 0 starts at byte 2", NULL},
        {"past", MM_HEAD + 12, 4, 4, 0, 0, ZINF_ERR_CORRUPT, "sequence 3 (4 tokens from byte 24) runs past", NULL},
        {"binlong", -1, 0, 0, 0, 2, ZINF_ERR_CORRUPT, "32 bytes", "gives its 4 sequences of uint16 tokens 30 bytes"},
        {"binshort", -1, 0, 0, 0, -2, ZINF_ERR_CORRUPT, "sequence 3 (3 tokens from byte 24) runs past", NULL},
        {"docdown", MM_HEAD + 48 + 16, 0, 8, 0, 0, ZINF_ERR_CORRUPT, "document index 2 is 0", "never fall"},
        {"docpast", MM_HEAD + 48 + 24, 5, 8, 0, 0, ZINF_ERR_CORRUPT, "document index 3 is 5", NULL},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        mm_build(&m, 8, 2, lens, 4, docs, 3, ids);
        if (bad[i].off >= 0) put(m.idx + bad[i].off, bad[i].v, bad[i].n);
        m.idx_len = (size_t)((int)m.idx_len + bad[i].idx_delta);
        m.bin_len = (size_t)((int)m.bin_len + bad[i].bin_delta);
        mm_write(&m, bad[i].name);
        char idx_name[64], bin_name[64];
        snprintf(idx_name, sizeof idx_name, "%s.idx", bad[i].name);
        snprintf(bin_name, sizeof bin_name, "%s.bin", bad[i].name);
        expect_open_error(path_of(bin_name), ZINF_DATA_MEGATRON, bad[i].st, bad[i].n1, bad[i].n2);
        // The message names the file at fault: the .bin when its size is wrong, else the .idx.
        CHECK_CONTAINS(zinf_last_error(), path_of(strstr(bad[i].name, "binlong") ? bin_name : idx_name));
    }

    // A missing .idx or .bin is named.
    mm_build(&m, 8, 2, lens, 4, docs, 3, ids);
    write_file("lone.bin", m.bin, m.bin_len);
    expect_open_error(path_of("lone"), ZINF_DATA_MEGATRON, ZINF_ERR_IO, "lone.idx", NULL);
    write_file("orphan.idx", m.idx, m.idx_len);
    expect_open_error(path_of("orphan"), ZINF_DATA_MEGATRON, ZINF_ERR_IO, "orphan.bin", NULL);
}

// ---- tokens-u16, tokens-u32, text-bytes ----

static void test_ids(void) {
    int64_t ids[23];
    for (int i = 0; i < 23; i++)
        ids[i] = (i * 2731) % 65536;
    write_ids("plain16", ids, 23, 2, 0, 0, 0);
    expect_tokens(path_of("plain16"), ZINF_DATA_TOKENS_U16, ids, 23, 5);
    write_ids("gpt2", ids, 23, 2, 20240520, 1, 23);
    expect_tokens(path_of("gpt2"), ZINF_DATA_TOKENS_U16, ids, 23, 3);

    int64_t big[23];
    for (int i = 0; i < 23; i++)
        big[i] = 60000 + i * 3001; // past uint16 from the third on
    write_ids("plain32", big, 23, 4, 0, 0, 0);
    expect_tokens(path_of("plain32"), ZINF_DATA_TOKENS_U32, big, 23, 5);
    write_ids("llama3", big, 23, 4, 20240801, 7, 23);
    expect_tokens(path_of("llama3"), ZINF_DATA_TOKENS_U32, big, 23, 11);
    big[4] = 128256; // Llama 3's vocabulary is 0 ... 128255
    write_ids("llama3_vocab", big, 23, 4, 20240801, 7, 23);
    expect_window_error(path_of("llama3_vocab"), ZINF_DATA_TOKENS_U32, 8, 128256, "token 128256 at position 4",
                        "not below vocab_size 128256");
    big[4] = 0x80000001; // wraps negative as an int32: must still fail as too large
    write_ids("wrap", big, 23, 4, 0, 0, 0);
    expect_window_error(path_of("wrap"), ZINF_DATA_TOKENS_U32, 8, 128256, "token 2147483649 at position 4",
                        "not below");
    write_ids("u16_vocab", ids, 23, 2, 20240520, 1, 23);
    expect_window_error(path_of("u16_vocab"), ZINF_DATA_TOKENS_U16, 8, 8000, "token 8193 at position 3",
                        "not below vocab_size 8000");

    // Headers that lie, files of the other format, sizes that are not whole tokens.
    static const struct {
        const char *name;
        int width;
        int32_t magic, version, count;
        int n; // tokens written after the header
        zinf_data_format format;
        zinf_status st;
        const char *n1, *n2;
    } bad[] = {
        {"gpt2_more", 2, 20240520, 1, 24, 23, ZINF_DATA_TOKENS_U16, ZINF_ERR_CORRUPT, "says 24 tokens",
         "46 bytes follow"},
        {"gpt2_less", 2, 20240520, 1, 22, 23, ZINF_DATA_TOKENS_U16, ZINF_ERR_CORRUPT, "says 22 tokens", NULL},
        {"gpt2_neg", 2, 20240520, 1, -1, 23, ZINF_DATA_TOKENS_U16, ZINF_ERR_CORRUPT, "says -1 tokens", NULL},
        {"gpt2_v2", 2, 20240520, 2, 23, 23, ZINF_DATA_TOKENS_U16, ZINF_ERR_CORRUPT, "version 2", "version 1"},
        {"llama3_v1", 4, 20240801, 1, 23, 23, ZINF_DATA_TOKENS_U32, ZINF_ERR_CORRUPT, "version 1", "version 7"},
        {"llama3_more", 4, 20240801, 7, 30, 23, ZINF_DATA_TOKENS_U32, ZINF_ERR_CORRUPT, "says 30 tokens (120 bytes)",
         "92 bytes follow"},
        {"llama3_as16", 4, 20240801, 7, 23, 23, ZINF_DATA_TOKENS_U16, ZINF_ERR_INVAL, "llm.c Llama 3 file",
         "data.format \"tokens-u32\""},
        {"gpt2_as32", 2, 20240520, 1, 23, 23, ZINF_DATA_TOKENS_U32, ZINF_ERR_INVAL, "llm.c GPT-2 file",
         "data.format \"tokens-u16\""},
        {"odd16", 1, 0, 0, 0, 23, ZINF_DATA_TOKENS_U16, ZINF_ERR_INVAL, "23 bytes", "uint16"},
        {"odd32", 2, 0, 0, 0, 23, ZINF_DATA_TOKENS_U32, ZINF_ERR_INVAL, "46 bytes", "uint32"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_ids(bad[i].name, ids, bad[i].n, bad[i].width, bad[i].magic, bad[i].version, bad[i].count);
        expect_open_error(path_of(bad[i].name), bad[i].format, bad[i].st, bad[i].n1, bad[i].n2);
        CHECK_CONTAINS(zinf_last_error(), path_of(bad[i].name));
    }
    // A file cut inside its llm.c header.
    unsigned char cut[600] = {0};
    put(cut, 20240801, 4);
    put(cut + 4, 7, 4);
    write_file("cut", cut, sizeof cut);
    expect_open_error(path_of("cut"), ZINF_DATA_TOKENS_U32, ZINF_ERR_CORRUPT, "600 bytes", "truncated");
    write_file("empty", "", 0);
    expect_open_error(path_of("empty"), ZINF_DATA_TOKENS_U32, ZINF_ERR_INVAL, "is empty", NULL);

    static const char text[] = "the quick brown fox";
    int64_t bytes[sizeof text - 1];
    for (size_t i = 0; i < sizeof text - 1; i++)
        bytes[i] = (unsigned char)text[i];
    write_file("text", text, sizeof text - 1);
    expect_tokens(path_of("text"), ZINF_DATA_TEXT_BYTES, bytes, (int)sizeof text - 1, 6);
}

// ---- DeepSpeed's copy of Megatron-LM's builder, the reference nobody here wrote ----
// deepspeed/runtime/data_pipeline/data_sampling/indexed_dataset.py (pinned in
// tests/ref/requirements.txt) writes the .bin and .idx, and its MMapIndexedDataset reads
// the sequences back; zinf must read the same stream. Only the dtype codes the two
// projects share are used: DeepSpeed's copy renumbered 6-8 (uint16, uint32, uint64),
// which Megatron-LM reads as float64, float32 and uint16.
static const char ref_py[] =
    "import sys, numpy as np, torch\n"
    "out, sys.stdout = sys.stdout, sys.stderr  # DeepSpeed's own prints stay out of the stream\n"
    "from deepspeed.runtime.data_pipeline.data_sampling import indexed_dataset as ds\n"
    "rng = np.random.default_rng(7)\n"
    "for dt, hi in ((np.uint8, 256), (np.int32, 50000), (np.int64, 50000)):\n"
    "    prefix = '%s/ds_%s' % (sys.argv[1], np.dtype(dt).name)\n"
    "    b = ds.MMapIndexedDatasetBuilder(prefix + '.bin', dtype=dt)\n"
    "    for doc in range(5):\n"
    "        for _ in range(1 + doc % 3):\n"
    "            b.add_item(torch.from_numpy(rng.integers(0, hi, size=int(rng.integers(1, 40)))))\n"
    "        b.end_document()\n"
    "    b.finalize(prefix + '.idx')\n"
    "    r = ds.MMapIndexedDataset(prefix)\n"
    "    toks = np.concatenate([r[i] for i in range(len(r))])\n"
    "    print('stream', np.dtype(dt).name, len(toks), *toks.tolist(), file=out)\n";

static void test_deepspeed_reference(void) {
    const char *py = getenv("ZINF_PY") ? getenv("ZINF_PY") : "build/pyenv/bin/python";
    write_file("ref.py", ref_py, sizeof ref_py - 1);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s %s %s", py, path_of("ref.py"), dir);
    FILE *f = popen(cmd, "r");
    CHECK(f != NULL, "%s", cmd);
    if (!f) return;
    int streams = 0;
    char name[16];
    int n;
    static int64_t ids[4096];
    while (fscanf(f, " stream %15s %d", name, &n) == 2) {
        CHECK(n > 1 && n <= 4096, "%s: %d tokens", name, n);
        for (int i = 0; i < n && i < 4096; i++)
            CHECK(fscanf(f, "%lld", (long long *)&ids[i]) == 1, "%s: token %d unreadable", name, i);
        char prefix[32];
        snprintf(prefix, sizeof prefix, "ds_%s", name);
        expect_tokens(path_of(prefix), ZINF_DATA_MEGATRON, ids, n, 5);
        streams++;
    }
    CHECK(pclose(f) == 0 && streams == 3, "%s: %d of 3 datasets compared; it needs build/pyenv (make tests)", cmd,
          streams);
}

// data.format "megatron" in a config: data.path may be the prefix; both files must exist.
static void test_config(void) {
    static const char *const good[] = {"mm", "mm.bin"};
    for (int i = 0; i < 2; i++) {
        char text[512];
        snprintf(text, sizeof text, "{\"train_batch_size\": 1, \"data\": {\"path\": \"%s\", \"format\": \"megatron\"}}",
                 path_of(good[i]));
        zinf_config c;
        CHECK(zinf_config_parse(&c, text, "t.json", &(zinf_config_options){.world_size = 1}) == ZINF_OK, "%s: %s",
              good[i], zinf_last_error());
        CHECK(c.data.format == ZINF_DATA_MEGATRON, "format");
        zinf_config_free(&c);
    }
    char text[512];
    snprintf(text, sizeof text, "{\"train_batch_size\": 1, \"data\": {\"path\": \"%s\", \"format\": \"megatron\"}}",
             path_of("lone"));
    zinf_config c;
    CHECK(zinf_config_parse(&c, text, "t.json", &(zinf_config_options){.world_size = 1}) == ZINF_ERR_INVAL,
          "a dataset without its .idx passed");
    CHECK_CONTAINS(zinf_last_error(), "data.path");
    CHECK_CONTAINS(zinf_last_error(), "lone.idx");
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/zinf-tokens-XXXXXX");
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    test_ids();
    test_megatron();
    test_deepspeed_reference();
    test_config();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0, "%s", cmd);
    return check_exit("test_tokens");
}
