// zinf internals shared by every module: the status propagation macros.
#ifndef ZINF_INTERNAL_H
#define ZINF_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "zinf_base.h"

// Propagate a non-OK status to the caller.
#define ZINF_CHECK(x)                                                                                                  \
    do {                                                                                                               \
        zinf_status st_ = (x);                                                                                         \
        if (st_ != ZINF_OK) return st_;                                                                                \
    } while (0)

// Store the status in st and jump to the one cleanup label on failure.
#define ZINF_CHECK_GOTO(x, st, label)                                                                                  \
    do {                                                                                                               \
        (st) = (x);                                                                                                    \
        if ((st) != ZINF_OK) goto label;                                                                               \
    } while (0)

#define ZINF_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

// splitmix64's output function: 64 well-mixed bits from a counter, for the seeded
// draws (initialization, sampling) that must depend only on their key.
static inline uint64_t zinf_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
#define ZINF_GOLDEN64 0x9e3779b97f4a7c15ull // splitmix64's counter step

// Open the shared library soname (what: its name in messages) and look up names[i]
// into *slots[i] (dl.c). False when it is missing or lacks a name; error then says
// which ("NCCL did not load: ...", "libnccl.so.2 has no ncclAllGather: ...").
bool zinf_dl_load(const char *soname, const char *what, const char *const names[], void **const slots[], size_t n,
                  char *error, size_t error_size);

// Files that survive a crash (files.c): path written whole and synced; a directory
// synced (after a rename in it); a tree removed (absent is fine).
zinf_status zinf_file_write_synced(const char *path, const char *data, size_t len);
zinf_status zinf_dir_sync(const char *dir);
zinf_status zinf_rm_tree(const char *path);

// Progress of long, otherwise silent work (progress.c): logged at info level every
// ZINF_PROGRESS seconds (default 10; 0: every add) as "what: done of total (P%), T s,
// about R s to go", counted in bytes or in items; work shorter than one interval
// logs nothing, and a last line with the total when any line was logged.
typedef struct zinf_progress {
    const char *what;
    int64_t total, done;
    bool bytes;
    double start, last, interval;
    bool said;
} zinf_progress;
void zinf_progress_start(zinf_progress *p, const char *what, int64_t total, bool bytes);
void zinf_progress_add(zinf_progress *p, int64_t n);
void zinf_progress_end(zinf_progress *p);

// CRC-32C (crc32c.c) over n bytes, continuing crc (0 to start): the CPU's instruction
// where it has one. _blocks: nblocks independent checksums of block bytes each, one per
// block of data, into out (three at a time on the instruction).
uint32_t zinf_crc32c(uint32_t crc, const void *data, size_t n);
void zinf_crc32c_blocks(const void *data, size_t nblocks, size_t block, uint32_t *out);
bool zinf_crc32c_hardware(void);

// Faults on demand for tests (fault.c): the requests of a kind that ZINF_FAULT (or the
// last zinf_fault_set) names fail. zinf_fault_next counts one request of the kind and
// says what to do to it: 0 nothing, a positive errno to fail it with, or one of these.
typedef enum zinf_fault_kind {
    ZINF_FAULT_READ,  // a block_size request reading a swap file (any aio file)
    ZINF_FAULT_WRITE, // a block_size request writing one
    ZINF_FAULT_SAVE,  // a write() of a checkpoint or export file
    ZINF_FAULT_KINDS,
} zinf_fault_kind;
enum { ZINF_FAULT_SHORT = -1, ZINF_FAULT_CORRUPT = -2 }; // a short transfer; a read's byte flipped
int zinf_fault_next(zinf_fault_kind kind);
// Replace the faults with spec ("KIND:N:WHAT[@RANK],...", NULL for none) and restart
// the counts: ZINF_ERR_INVAL naming a bad item.
zinf_status zinf_fault_set(const char *spec);

static inline bool zinf_ends_with(const char *s, const char *tail) {
    size_t a = strlen(s), b = strlen(tail);
    return a >= b && strcmp(s + a - b, tail) == 0;
}

// The monotonic clock, for durations.
static inline int64_t zinf_clock_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}
static inline double zinf_clock_s(void) { return 1e-9 * (double)zinf_clock_ns(); }

#endif
