// CRC-32C (Castagnoli, RFC 3720's iSCSI checksum), the checksum of the swap store's
// blocks: the CPU's crc32 instruction (SSE4.2) where present, three blocks at a time so
// the instruction's three-cycle latency is hidden, else a table of 256 entries.
#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#include "zinf_internal.h"

#define POLY 0x82f63b78u // the Castagnoli polynomial, reflected

static uint32_t table[256];

static void make_table(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ POLY : c >> 1;
        table[i] = c;
    }
}

static uint32_t soft(uint32_t crc, const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t hard(uint32_t crc, const unsigned char *p, size_t n) {
    uint64_t c = crc;
    for (; n >= 8; p += 8, n -= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = __builtin_ia32_crc32di(c, v);
    }
    uint32_t c32 = (uint32_t)c;
    for (; n; p++, n--)
        c32 = __builtin_ia32_crc32qi(c32, *p);
    return c32;
}

// Three blocks' chains side by side; each block's own checksum, as hard() gives it.
__attribute__((target("sse4.2"))) static void hard3(const unsigned char *p, size_t block, uint32_t *out) {
    uint64_t a = 0xffffffffu, b = 0xffffffffu, c = 0xffffffffu;
    const unsigned char *q = p + block, *r = p + 2 * block;
    size_t i = 0;
    for (; i + 8 <= block; i += 8) {
        uint64_t x, y, z;
        memcpy(&x, p + i, 8), memcpy(&y, q + i, 8), memcpy(&z, r + i, 8);
        a = __builtin_ia32_crc32di(a, x);
        b = __builtin_ia32_crc32di(b, y);
        c = __builtin_ia32_crc32di(c, z);
    }
    out[0] = ~hard((uint32_t)a, p + i, block - i);
    out[1] = ~hard((uint32_t)b, q + i, block - i);
    out[2] = ~hard((uint32_t)c, r + i, block - i);
}
#endif

static bool use_hard;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void init(void) {
    make_table();
#if defined(__x86_64__)
    use_hard = __builtin_cpu_supports("sse4.2");
#endif
}

uint32_t zinf_crc32c(uint32_t crc, const void *data, size_t n) {
    pthread_once(&once, init);
    crc = ~crc;
#if defined(__x86_64__)
    if (use_hard) return ~hard(crc, data, n);
#endif
    return ~soft(crc, data, n);
}

void zinf_crc32c_blocks(const void *data, size_t nblocks, size_t block, uint32_t *out) {
    pthread_once(&once, init);
    const unsigned char *p = data;
    size_t i = 0;
#if defined(__x86_64__)
    if (use_hard)
        for (; i + 3 <= nblocks; i += 3)
            hard3(p + i * block, block, out + i);
#endif
    for (; i < nblocks; i++)
        out[i] = zinf_crc32c(0, p + i * block, block);
}

bool zinf_crc32c_hardware(void) {
    pthread_once(&once, init);
    return use_hard;
}
