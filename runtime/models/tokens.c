// Token files as the design's data contract reads them: little-endian uint16 ids (an
// llm.c file is recognized by its 256 x int32 header, magic 20240520, version 1, then
// the token count), or text where every byte is a token. One read-only mapping.
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

enum { LLMC_MAGIC = 20240520, LLMC_HEADER_BYTES = 256 * 4 };

struct zinf_tokens {
    char *path;
    void *map;
    size_t map_size;
    const unsigned char *data; // first token
    int64_t count;
    bool bytes; // text-bytes: 1 byte per token, else uint16
};

zinf_status zinf_tokens_open(zinf_tokens **out, const char *path, zinf_data_format format) {
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return zinf_fail_errno(errno, "data file %s", path);
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return zinf_fail_errno(e, "data file %s", path);
    }
    size_t size = (size_t)sb.st_size;
    if (size == 0) {
        close(fd);
        return zinf_fail(ZINF_ERR_INVAL, "data file %s is empty", path);
    }
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (map == MAP_FAILED) return zinf_fail_errno(e, "data file %s: mmap", path);
    zinf_tokens *t = calloc(1, sizeof *t);
    char *p = strdup(path);
    if (!t || !p) {
        free(t), free(p);
        munmap(map, size);
        return zinf_fail(ZINF_ERR_NOMEM, "data file %s: out of memory", path);
    }
    *t = (zinf_tokens){.path = p, .map = map, .map_size = size, .data = map};
    zinf_status st = ZINF_OK;
    if (format == ZINF_DATA_TEXT_BYTES) {
        t->bytes = true;
        t->count = (int64_t)size;
    } else {
        int32_t h[3] = {0};
        if (size >= LLMC_HEADER_BYTES) memcpy(h, map, sizeof h);
        if (h[0] == LLMC_MAGIC) {
            // An llm.c file: the header says how many tokens follow; trust it only
            // when the file really holds them.
            if (h[1] != 1 || h[2] < 0 || (size - LLMC_HEADER_BYTES) / 2 < (size_t)h[2])
                st = zinf_fail(ZINF_ERR_CORRUPT,
                               "data file %s: llm.c header (version %d) says %d tokens; the file holds %zu", path, h[1],
                               h[2], (size - LLMC_HEADER_BYTES) / 2);
            t->data += LLMC_HEADER_BYTES;
            t->count = h[2];
        } else if (size % 2) {
            st = zinf_fail(ZINF_ERR_INVAL,
                           "data file %s: %zu bytes is not a whole number of uint16 tokens (data.format tokens-u16; "
                           "use text-bytes for text)",
                           path, size);
        } else {
            t->count = (int64_t)(size / 2);
        }
    }
    if (st != ZINF_OK) {
        zinf_tokens_close(t);
        return st;
    }
    *out = t;
    return ZINF_OK;
}

void zinf_tokens_close(zinf_tokens *t) {
    if (!t) return;
    munmap(t->map, t->map_size);
    free(t->path);
    free(t);
}

int64_t zinf_tokens_count(const zinf_tokens *t) { return t->count; }

int64_t zinf_tokens_windows(const zinf_tokens *t, int seq_len) {
    return seq_len > 0 && t->count > seq_len ? (t->count - 1) / seq_len : 0;
}

static int32_t token_at(const zinf_tokens *t, int64_t i) {
    if (t->bytes) return t->data[i];
    return (int32_t)(t->data[2 * i] | (t->data[2 * i + 1] << 8)); // little-endian on any host
}

zinf_status zinf_tokens_window(const zinf_tokens *t, int64_t w, int seq_len, int vocab, int32_t *inputs,
                               int32_t *targets) {
    if (w < 0 || w >= zinf_tokens_windows(t, seq_len))
        return zinf_fail(ZINF_ERR_INVAL, "data file %s: no window %lld of %d tokens", t->path, (long long)w, seq_len);
    int64_t o = w * seq_len;
    for (int i = 0; i <= seq_len; i++) {
        int32_t id = token_at(t, o + i);
        if (id >= vocab)
            return zinf_fail(ZINF_ERR_INVAL, "data file %s: token %d at position %lld is not below vocab_size %d",
                             t->path, id, (long long)(o + i), vocab);
        if (i < seq_len) inputs[i] = id;
        if (i > 0) targets[i - 1] = id;
    }
    return ZINF_OK;
}
