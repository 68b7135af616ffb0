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

#ifdef __cplusplus
}
#endif
#endif
