// zinf aio: the io_uring engine that streams swap files on NVMe. This header starts
// with what the engine checks before it sets up rings and opens files: which io_uring
// setup flags and features the kernel grants, and how a path takes O_DIRECT IO.
// Functions here return 0 or -errno, as liburing does.
#ifndef ZINF_AIO_H
#define ZINF_AIO_H

#include <stdbool.h>
#include <stdint.h>

#include "zinf_base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zinf_aio_caps {
    bool io_uring;          // a ring could be set up at all (kernel, seccomp, sysctl)
    int setup_errno;        // why not, when io_uring is false
    uint32_t features;      // IORING_FEAT_* bits the kernel reported
    bool single_issuer;     // IORING_SETUP_SINGLE_ISSUER accepted
    bool defer_taskrun;     // IORING_SETUP_DEFER_TASKRUN (with SINGLE_ISSUER) accepted
    bool coop_taskrun;      // IORING_SETUP_COOP_TASKRUN accepted
    bool sqpoll;            // IORING_SETUP_SQPOLL accepted
    bool op_read, op_write; // IORING_OP_READ / IORING_OP_WRITE supported
    bool op_read_fixed;     // IORING_OP_READ_FIXED (registered buffers)
    bool op_fallocate;      // IORING_OP_FALLOCATE
} zinf_aio_caps;

// Probe by setting up (and tearing down) small rings. Never fails: a refused ring is
// reported in caps.
void zinf_aio_probe(zinf_aio_caps *caps);
// 0 when a plain ring can be set up, else the errno that refused it: what an engine
// needs to know, without the probe's rings for each flag (an SQPOLL ring starts a
// kernel thread that polls while it lives).
int zinf_aio_uring_errno(void);

// Names of the IORING_FEAT_* bits set in features, e.g. "single_mmap nodrop ...",
// written to buf (space separated; bits zinf cannot name as "bitN"; a name that does
// not fit is left out whole, 512 bytes hold them all). Returns buf.
char *zinf_aio_feature_names(uint32_t features, char *buf, size_t len);

typedef struct zinf_aio_path_info {
    char fs_type[32];    // "ext4", "xfs", "tmpfs", ... or "0x<magic>"
    uint64_t free_bytes; // available to this user
    uint64_t total_bytes;
    uint32_t logical_block; // device logical block size (bytes), 0 when unknown
    uint32_t dio_align;     // alignment zinf uses for O_DIRECT: max(logical_block, 4096)
    bool direct;            // O_DIRECT open + aligned write + read back worked
    int direct_errno;       // why not, when direct is false (tmpfs: EINVAL before Linux 6.6)
    bool writable;          // a file could be created in the directory
} zinf_aio_path_info;

// Probe directory dir by creating, writing, reading and removing a small temporary
// file. 0 on success (facts in *out, including a refused O_DIRECT), -errno when dir
// cannot be used at all (missing, not a directory, not writable).
int zinf_aio_path_probe(const char *dir, zinf_aio_path_info *out);

// ---- the engine ----
// Workers each own one io_uring ring (set up with the best flags the kernel grants)
// and keep at most queue_depth requests in flight on it; a read or write is split into
// block_size requests spread over the workers. Where io_uring is refused, the same
// API runs on a pool of pread/pwrite threads (said once in the log).

typedef struct zinf_aio zinf_aio;
typedef struct zinf_aio_file zinf_aio_file;
// One read or write in flight; 0 is never a ticket.
typedef uint64_t zinf_aio_ticket;

typedef struct zinf_aio_params {
    uint32_t block_size;  // bytes per request, a multiple of 4096 (0: 1 MiB)
    uint32_t queue_depth; // requests in flight per ring (0: 8)
    uint32_t threads;     // workers, one ring each (0: 1)
    bool sqpoll;          // ask for kernel-side submission polling (IORING_SETUP_SQPOLL)
    bool use_threads;     // pread/pwrite threads instead of io_uring
} zinf_aio_params;

// 0 or -errno (detail in zinf_last_error()). cfg may be NULL for the defaults.
int zinf_aio_create(zinf_aio **out, const zinf_aio_params *cfg);
// Waits for everything still in flight. NULL is a no-op.
void zinf_aio_destroy(zinf_aio *aio);
// false when the engine runs on pread/pwrite threads.
bool zinf_aio_uses_io_uring(const zinf_aio *aio);
// Let the workers run on the n CPUs of cpus only (DeepSpeed's cores left to IO beside
// CPU Adam's). 0 or -errno.
int zinf_aio_bind(zinf_aio *aio, const int *cpus, int n);

// Register [buf, buf+len) with every ring, so reads and writes that fall inside it run
// as READ_FIXED/WRITE_FIXED and the kernel does not pin its pages on every request:
// meant for the long-lived pinned pool offload swaps through. Regions must not
// overlap. 0, or -errno with the reason in zinf_last_error(): -EOPNOTSUPP on
// pread/pwrite threads or a kernel without sparse tables, -ENOMEM past
// RLIMIT_MEMLOCK, -ENOSPC when the table is full. IO from an unregistered buffer
// works the same, only with more kernel work per request.
int zinf_aio_register_buffer(zinf_aio *aio, void *buf, size_t len);
// Drop the registration made at buf (before freeing it: registered pages stay pinned).
// Requests already in flight finish normally. 0 or -EINVAL for an unknown buf.
int zinf_aio_unregister_buffer(zinf_aio *aio, void *buf);

// Requests issued so far (block_size pieces and resubmissions), how many of them used a
// registered buffer or a fixed file, and the bytes and busy time per direction.
typedef struct zinf_aio_stats {
    uint64_t requests;
    uint64_t fixed_buffer;
    uint64_t fixed_file;
    uint64_t resubmitted; // short transfers continued, EAGAIN/EINTR retried
    // Bytes read and written, and the time at least one read (write) was in flight:
    // bytes / busy time is what the link gave while it was in use.
    uint64_t read_bytes, write_bytes;
    int64_t read_busy_ns, write_busy_ns;
} zinf_aio_stats;
void zinf_aio_get_stats(zinf_aio *aio, zinf_aio_stats *out);

typedef struct zinf_aio_file_config {
    const char *const *dirs; // one file per directory; several stripe the file
    int ndirs;
    const char *name;     // the file's name inside each directory
    uint64_t size;        // logical bytes, preallocated up front
    uint64_t stripe_unit; // bytes per directory in turn (0: block_size); aligned
    bool strict_direct;   // fail where O_DIRECT is refused instead of buffering
    bool keep;            // leave the files on close (default: removed)
    // Optional: called on a worker thread with each request's bytes and their offset in
    // the (logical, unstriped) file once the request has completed whole (a write's
    // bytes as they went out: the buffer is the caller's until its ticket completes),
    // after the worker has handed the drive its next requests, so a check runs beside
    // the IO in flight. 0, or -errno to fail the request: -EBADMSG for bytes that fail
    // the check (the ticket's error then names the path and offset on the drive).
    int (*check)(void *arg, bool write, uint64_t offset, const void *buf, size_t len);
    void *check_arg;
} zinf_aio_file_config;

// Open (creating) and preallocate the file in every directory; its descriptors are
// registered with the rings as fixed files where the kernel allows. 0 or -errno with the
// directory named: ENOSPC when the preallocation does not fit, EINVAL for a refused
// O_DIRECT under strict_direct.
int zinf_aio_file_open(zinf_aio *aio, zinf_aio_file **out, const zinf_aio_file_config *cfg);
// Bytes a file of size bytes preallocates over ndirs directories in stripe-byte units:
// each directory's file is a whole number of units, the same for all.
uint64_t zinf_aio_file_striped_bytes(uint64_t size, int ndirs, uint64_t stripe);
// Closes (and unless keep, removes) the files; the caller waits for its tickets
// first. NULL is a no-op.
void zinf_aio_file_close(zinf_aio_file *f);
// Offsets, lengths and buffers must be multiples of this (>= 4096).
uint32_t zinf_aio_file_alignment(const zinf_aio_file *f);
// false when a directory refused O_DIRECT and the file runs buffered.
bool zinf_aio_file_direct(const zinf_aio_file *f);

// Start a read into buf / write from buf of len bytes at offset. 0 with *ticket set,
// or -EINVAL naming what is unaligned or out of range. buf stays the caller's and
// must not be touched until the ticket is waited for.
int zinf_aio_read(zinf_aio *aio, zinf_aio_file *f, uint64_t offset, void *buf, size_t len, zinf_aio_ticket *ticket);
int zinf_aio_write(zinf_aio *aio, zinf_aio_file *f, uint64_t offset, const void *buf, size_t len,
                   zinf_aio_ticket *ticket);
// Wait for one ticket and release it: 0, or -errno of its first failed request with
// the path, offset and errno text in zinf_last_error(). Other tickets are unaffected.
int zinf_aio_wait(zinf_aio *aio, zinf_aio_ticket ticket);
// 0 while in flight; otherwise release it and return 1 (done) or -errno (failed).
int zinf_aio_poll(zinf_aio *aio, zinf_aio_ticket ticket);
// Wait for and release every ticket not yet waited for: 0 or the first -errno.
int zinf_aio_wait_all(zinf_aio *aio);

#ifdef __cplusplus
}
#endif
#endif
