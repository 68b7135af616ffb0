// zinf swap store: where the NVMe tier keeps one rank's optimizer states and stage-3
// parameters, as preallocated files on the aio engine (aio/zinf_aio.h). Layout (a
// contract other tools rely on): <nvme_path>/zinf-<run>/rank<R>/<name>, one file per
// state ("master", "exp_avg", "exp_avg_sq", "params"), striped over every nvme_path.
#ifndef ZINF_SWAP_H
#define ZINF_SWAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "zinf_aio.h"
#include "zinf_base.h"

#ifdef __cplusplus
extern "C" {
#endif

// Not thread-safe as a whole: add and close run alone. Async reads and writes on
// distinct ranges may come from any thread (the aio engine is); the synchronous
// pread/pwrite share one bounce buffer and take turns on it.
typedef struct zinf_swap zinf_swap;

typedef struct zinf_swap_config {
    const char *const *paths; // nvme_path directories (a missing one is made); several stripe every file
    int npaths;
    const char *run; // names the run's directory zinf-<run> (e.g. a pid or timestamp)
    int rank;
    zinf_aio *aio; // borrowed; outlives the store
} zinf_swap_config;

// Probes every path (a directory, made when missing; writable; O_DIRECT) and makes
// <path>/zinf-<run>/rank<R>/ in each; zinf-<run> may already exist (other ranks share
// it). A path that cannot be made or written, or the same directory given twice, fails naming the path and `nvme_path`. Where
// a file system refuses O_DIRECT (tmpfs before Linux 6.6) the files run buffered,
// said once here with ZINF_LOG_WARN.
zinf_status zinf_swap_open(zinf_swap **out, const zinf_swap_config *cfg);

// Add a preallocated file `name` (a plain name, unique in the store) of at least `bytes`
// (rounded up to the alignment); *id names it in later calls. Space is reserved now, so
// a full drive fails here and not in the middle of a step: ZINF_ERR_NOSPC naming the
// path, the bytes needed and free, and what to do (free space, add nvme_path entries, or
// move the tier to cpu). A file of that name already on disk (a crashed run with the same
// run name) is refused, never shared.
zinf_status zinf_swap_add(zinf_swap *s, const char *name, uint64_t bytes, int *id);

// Offsets, lengths and buffers of async IO: multiples of this (>= 4096, the largest
// O_DIRECT alignment among the paths). File sizes are multiples of it too.
uint32_t zinf_swap_alignment(const zinf_swap *s);

// Async, aligned: start a read into / write from buf (pinned, aligned), wait for the
// ticket with zinf_swap_wait; buf is untouchable until then. Out-of-range or unaligned
// requests fail with ZINF_ERR_INVAL naming the file, offset and length (*t = 0).
zinf_status zinf_swap_read(zinf_swap *s, int id, uint64_t off, void *buf, size_t len, zinf_aio_ticket *t);
zinf_status zinf_swap_write(zinf_swap *s, int id, uint64_t off, const void *buf, size_t len, zinf_aio_ticket *t);
// Wait for and release one ticket: ZINF_OK or the failure of its first request (path,
// offset and errno text in zinf_last_error()).
zinf_status zinf_swap_wait(zinf_swap *s, zinf_aio_ticket t);

// Synchronous, any offset/length/buffer, through an internal aligned bounce buffer of
// bounded size (4 MiB chunks; partial head and tail blocks are read, merged and written
// back on write): for setting or reading single tensors, initialization, digests. Must
// not overlap async IO in flight on the same blocks.
zinf_status zinf_swap_pread(zinf_swap *s, int id, uint64_t off, void *dst, size_t len);
zinf_status zinf_swap_pwrite(zinf_swap *s, int id, uint64_t off, const void *src, size_t len);

uint64_t zinf_swap_bytes(const zinf_swap *s); // bytes preallocated over all files and paths
bool zinf_swap_direct(const zinf_swap *s);    // every file runs O_DIRECT

// Closes and removes the files, the rank directory and zinf-<run> when it is left empty
// (wait for every ticket first). NULL is a no-op.
void zinf_swap_close(zinf_swap *s);

#ifdef __cplusplus
}
#endif
#endif
