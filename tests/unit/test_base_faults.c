// What the swap path's fault handling stands on. CRC-32C: RFC 3720's test vectors
// (B.4), and on random data of every length up to a few blocks the bits of a
// bit-at-a-time reference written from the polynomial, for one buffer, a buffer in
// pieces, and blocks three at a time (the interleaved chains). ZINF_FAULT's parser:
// good items, and each bad one refused naming what is wrong.
// timeout: 10 san=10 cuda-emu=10 san-cuda-emu=10
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "zinf_internal.h"

// One bit at a time, from the reflected Castagnoli polynomial: no table, no
// instruction, nothing shared with the code under test.
static uint32_t reference(const unsigned char *p, size_t n) {
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1)));
    }
    return ~c;
}

static void vectors(void) {
    unsigned char b[32];
    const struct {
        int fill; // -1 ascending, -2 descending, else the byte
        uint32_t want;
    } rfc[] = {{0x00, 0x8a9136aau}, {0xff, 0x62a8ab43u}, {-1, 0x46dd794eu}, {-2, 0x113fdb5cu}};
    for (size_t v = 0; v < ZINF_ARRAY_LEN(rfc); v++) {
        for (int i = 0; i < 32; i++)
            b[i] = (unsigned char)(rfc[v].fill == -1 ? i : rfc[v].fill == -2 ? 31 - i : rfc[v].fill);
        CHECK(zinf_crc32c(0, b, 32) == rfc[v].want, "RFC 3720 vector %zu: %08x, want %08x", v, zinf_crc32c(0, b, 32),
              rfc[v].want);
    }
    CHECK(zinf_crc32c(0, "123456789", 9) == 0xe3069283u, "\"123456789\": %08x", zinf_crc32c(0, "123456789", 9));
    CHECK(zinf_crc32c(0, b, 0) == 0, "the empty string: %08x", zinf_crc32c(0, b, 0));
}

static void random_data(void) {
    enum { MAX = 3 * 4096 + 40 };
    unsigned char *p = malloc(7 * MAX);
    uint64_t x = 12345;
    for (size_t i = 0; i < 7 * MAX; i++)
        p[i] = (unsigned char)((x = zinf_mix64(x + ZINF_GOLDEN64)) >> 56);
    for (size_t n = 0; n < MAX; n += n < 64 ? 1 : 97) {
        uint32_t want = reference(p + 1, n); // odd start: no alignment assumed
        CHECK(zinf_crc32c(0, p + 1, n) == want, "%zu bytes: %08x, want %08x", n, zinf_crc32c(0, p + 1, n), want);
        size_t cut = n / 3;
        uint32_t pieces = zinf_crc32c(zinf_crc32c(0, p + 1, cut), p + 1 + cut, n - cut);
        CHECK(pieces == want, "%zu bytes in two pieces: %08x, want %08x", n, pieces, want);
    }
    const size_t blocks[] = {8, 13, 4096, 4100};
    for (size_t bi = 0; bi < ZINF_ARRAY_LEN(blocks); bi++)
        for (size_t nb = 0; nb <= 7; nb++) {
            uint32_t got[7];
            size_t block = blocks[bi];
            zinf_crc32c_blocks(p + 3, nb, block, got);
            for (size_t k = 0; k < nb; k++)
                CHECK(got[k] == reference(p + 3 + k * block, block), "block %zu of %zu (%zu bytes each)", k, nb, block);
        }
    free(p);
}

static void fault_specs(void) {
    CHECK(zinf_fault_set("read:3:eio,write:1:enospc,save:2:eio,read:9:corrupt,write:4:short") == ZINF_OK, "%s",
          zinf_last_error());
    int seen[4] = {0};
    for (int i = 1; i <= 10; i++) {
        int f = zinf_fault_next(ZINF_FAULT_READ);
        if (i == 3)
            seen[0] = f;
        else if (i == 9)
            seen[1] = f;
        else
            CHECK(f == 0, "read %d: %d", i, f);
    }
    CHECK(seen[0] == EIO && seen[1] == ZINF_FAULT_CORRUPT, "reads 3 and 9: %d %d", seen[0], seen[1]);
    CHECK(zinf_fault_next(ZINF_FAULT_WRITE) == ENOSPC, "write 1");
    for (int i = 2; i <= 5; i++)
        CHECK(zinf_fault_next(ZINF_FAULT_WRITE) == (i == 4 ? ZINF_FAULT_SHORT : 0), "write %d", i);
    CHECK(zinf_fault_next(ZINF_FAULT_SAVE) == 0 && zinf_fault_next(ZINF_FAULT_SAVE) == EIO, "saves 1 and 2");
    // Another rank's fault (this process is rank 0) is not this one's.
    CHECK(zinf_fault_set("read:1:eio@1,read:2:eintr@0") == ZINF_OK, "%s", zinf_last_error());
    CHECK(zinf_fault_next(ZINF_FAULT_READ) == 0 && zinf_fault_next(ZINF_FAULT_READ) == EINTR, "rank filter");
    const struct {
        const char *spec, *says;
    } bad[] = {{"read:0:eio", "N from 1"},        {"read:x:eio", "KIND:N:WHAT"},
               {"fsync:1:eio", "kind \"fsync\""}, {"read:1:oops", "\"oops\" is none of"},
               {"save:1:short", "a save fails"},  {"write:1:corrupt", "only a read"},
               {"read:1:eio@", "KIND:N:WHAT"},    {"read:1:eio!", "KIND:N:WHAT"}};
    for (size_t i = 0; i < ZINF_ARRAY_LEN(bad); i++) {
        CHECK(zinf_fault_set(bad[i].spec) == ZINF_ERR_INVAL, "\"%s\" accepted", bad[i].spec);
        CHECK_CONTAINS(zinf_last_error(), bad[i].says);
        CHECK_CONTAINS(zinf_last_error(), "ZINF_FAULT");
    }
    CHECK(zinf_fault_set(NULL) == ZINF_OK && zinf_fault_next(ZINF_FAULT_READ) == 0, "no faults after NULL");
}

int main(void) {
    vectors();
    random_data();
    fault_specs();
    return check_exit("test_base_faults");
}
