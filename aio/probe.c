// What the aio engine checks before it sets up rings and opens swap files: the
// io_uring setup flags, features and opcodes the kernel grants (io_uring_setup(2),
// liburing's probe API), and whether a directory takes O_DIRECT IO and at what alignment.
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <liburing.h>
#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "internal.h"

// ---- io_uring ----

// 0 when the kernel accepts a small ring with these setup flags, else -errno.
static int try_flags(unsigned flags) {
    struct io_uring ring;
    struct io_uring_params p;
    memset(&p, 0, sizeof p);
    p.flags = flags;
    int ret = io_uring_queue_init_params(8, &ring, &p);
    if (ret == 0) io_uring_queue_exit(&ring);
    return ret;
}

int zinf_aio_uring_errno(void) { return -try_flags(0); }

void zinf_aio_probe(zinf_aio_caps *caps) {
    memset(caps, 0, sizeof *caps);
    struct io_uring ring;
    struct io_uring_params p;
    memset(&p, 0, sizeof p);
    int ret = io_uring_queue_init_params(8, &ring, &p);
    if (ret < 0) {
        // Kernel too old, io_uring_disabled sysctl, or a seccomp filter (containers).
        caps->setup_errno = -ret;
        return;
    }
    caps->io_uring = true;
    caps->features = p.features;
    struct io_uring_probe *probe = io_uring_get_probe_ring(&ring);
    if (probe) {
        caps->op_read = io_uring_opcode_supported(probe, IORING_OP_READ);
        caps->op_write = io_uring_opcode_supported(probe, IORING_OP_WRITE);
        caps->op_read_fixed = io_uring_opcode_supported(probe, IORING_OP_READ_FIXED);
        caps->op_fallocate = io_uring_opcode_supported(probe, IORING_OP_FALLOCATE);
        io_uring_free_probe(probe);
    }
    io_uring_queue_exit(&ring);

    // Each flag on its own ring: the kernel refuses unknown flags with EINVAL, and
    // SQPOLL may be refused for lack of privilege on older kernels (EPERM).
#ifdef IORING_SETUP_SINGLE_ISSUER
    caps->single_issuer = try_flags(IORING_SETUP_SINGLE_ISSUER) == 0;
#endif
#ifdef IORING_SETUP_DEFER_TASKRUN
    caps->defer_taskrun = try_flags(IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN) == 0;
#endif
#ifdef IORING_SETUP_COOP_TASKRUN
    caps->coop_taskrun = try_flags(IORING_SETUP_COOP_TASKRUN) == 0;
#endif
    caps->sqpoll = try_flags(IORING_SETUP_SQPOLL) == 0;
}

char *zinf_aio_feature_names(uint32_t features, char *buf, size_t len) {
    // IORING_FEAT_* by bit position, a stable kernel ABI, so bits newer than the
    // installed headers are named too; bits newer than this table show as "bitN".
    static const char *const names[] = {
        "single_mmap", "nodrop",          "submit_stable",   "rw_cur_pos",     "cur_personality", "fast_poll",
        "poll_32bits", "sqpoll_nonfixed", "ext_arg",         "native_workers", "rsrc_tags",       "cqe_skip",
        "linked_file", "reg_reg_ring",    "recvsend_bundle", "min_timeout",    "rw_attr",         "no_iowait",
    };
    if (len == 0) return buf;
    buf[0] = '\0';
    size_t used = 0;
    for (unsigned b = 0; b < 32; b++) {
        if (!(features & (1u << b))) continue;
        char unknown[8];
        const char *name = b < sizeof names / sizeof names[0] ? names[b] : unknown;
        if (name == unknown) snprintf(unknown, sizeof unknown, "bit%u", b);
        int n = snprintf(buf + used, len - used, "%s%s", used ? " " : "", name);
        if (n < 0 || (size_t)n >= len - used) {
            buf[used] = '\0'; // a name that does not fit is left out whole
            break;
        }
        used += (size_t)n;
    }
    return buf;
}

// ---- paths ----

// ext2 and ext3 share ext4's magic; zfs, lustre and gpfs are out of tree, so their
// magics are not in linux/magic.h.
static void fs_name(long type, char *out, size_t len) {
    static const struct {
        unsigned long magic;
        const char *name;
    } fs[] = {
        {EXT4_SUPER_MAGIC, "ext4"},
        {XFS_SUPER_MAGIC, "xfs"},
        {BTRFS_SUPER_MAGIC, "btrfs"},
        {TMPFS_MAGIC, "tmpfs"},
        {OVERLAYFS_SUPER_MAGIC, "overlayfs"},
        {NFS_SUPER_MAGIC, "nfs"},
        {0x2fc12fc1, "zfs"},
        {F2FS_SUPER_MAGIC, "f2fs"},
        {RAMFS_MAGIC, "ramfs"},
        {FUSE_SUPER_MAGIC, "fuse"},
        {0x0bd00bd0, "lustre"},
        {0x47504653, "gpfs"},
    };
    // f_type is a signed word; magics with the top bit set come back sign-extended.
    unsigned long magic = (unsigned long)type & 0xffffffffUL;
    for (size_t i = 0; i < sizeof fs / sizeof fs[0]; i++) {
        if (fs[i].magic == magic) {
            snprintf(out, len, "%s", fs[i].name);
            return;
        }
    }
    snprintf(out, len, "0x%lx", magic);
}

static uint32_t read_u32(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    unsigned v = 0;
    if (fscanf(f, "%u", &v) != 1) v = 0;
    fclose(f);
    return v;
}

// The logical block size of the block device behind dev, from sysfs: a whole disk has
// queue/ itself, a partition shares its parent's (sysfs resolves ".." after the
// symlink, so it lands in the disk's directory). 0 for devices with no queue (tmpfs,
// btrfs and NFS report anonymous device numbers).
static uint32_t sysfs_logical_block(dev_t dev) {
    char path[128];
    unsigned maj = major(dev), min = minor(dev);
    snprintf(path, sizeof path, "/sys/dev/block/%u:%u/partition", maj, min);
    bool partition = access(path, F_OK) == 0;
    snprintf(path, sizeof path, "/sys/dev/block/%u:%u/%squeue/logical_block_size", maj, min, partition ? "../" : "");
    return read_u32(path);
}

// The offset alignment O_DIRECT needs on this file. statx(STATX_DIOALIGN) (Linux 6.1)
// asks the file system itself, which also covers stacked and network file systems;
// sysfs is the fallback for kernels or file systems that do not answer.
uint32_t aio_logical_block(int fd, dev_t dev) {
#ifdef STATX_DIOALIGN
    struct statx sx;
    if (statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) == 0 && (sx.stx_mask & STATX_DIOALIGN) &&
        sx.stx_dio_offset_align > 0)
        return sx.stx_dio_offset_align;
#else
    (void)fd;
#endif
    return sysfs_logical_block(dev);
}

// Write one aligned block with O_DIRECT and read it back: some file systems accept
// the open flag and then fail or silently buffer, so only a round trip counts.
static void try_direct(const char *path, zinf_aio_path_info *out) {
    size_t n = out->dio_align;
    int fd = open(path, O_RDWR | O_DIRECT | O_CLOEXEC);
    if (fd < 0) {
        out->direct_errno = errno; // EINVAL: the file system has no O_DIRECT
        return;
    }
    unsigned char *buf = NULL;
    int err = posix_memalign((void **)&buf, n, 2 * n);
    if (err) {
        out->direct_errno = err;
        close(fd);
        return;
    }
    unsigned char *h_write = buf, *h_read = buf + n;
    for (size_t i = 0; i < n; i++)
        h_write[i] = (unsigned char)(i * 131 + 7);
    memset(h_read, 0, n);
    ssize_t w = pwrite(fd, h_write, n, 0);
    if (w != (ssize_t)n) {
        out->direct_errno = w < 0 ? errno : EIO;
    } else {
        ssize_t r = pread(fd, h_read, n, 0);
        if (r != (ssize_t)n)
            out->direct_errno = r < 0 ? errno : EIO;
        else if (memcmp(h_write, h_read, n) != 0)
            out->direct_errno = EIO;
        else
            out->direct = true;
    }
    free(buf);
    close(fd);
}

int zinf_aio_path_probe(const char *dir, zinf_aio_path_info *out) {
    memset(out, 0, sizeof *out);
    struct stat st;
    if (stat(dir, &st) != 0) return -errno;
    if (!S_ISDIR(st.st_mode)) return -ENOTDIR;

    struct statfs sf;
    if (statfs(dir, &sf) != 0) return -errno;
    fs_name((long)sf.f_type, out->fs_type, sizeof out->fs_type);
    // Block counts are in fragment units; f_frsize is 0 only on very old kernels.
    uint64_t unit = sf.f_frsize ? (uint64_t)sf.f_frsize : (uint64_t)sf.f_bsize;
    out->free_bytes = (uint64_t)sf.f_bavail * unit;
    out->total_bytes = (uint64_t)sf.f_blocks * unit;

    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/.zinf-probe-XXXXXX", dir) >= (int)sizeof path) return -ENAMETOOLONG;
    int fd = mkostemp(path, O_CLOEXEC);
    if (fd < 0) return -errno;
    out->writable = true;

    out->logical_block = aio_logical_block(fd, st.st_dev);
    out->dio_align = out->logical_block > 4096 ? out->logical_block : 4096;
    close(fd);
    try_direct(path, out);
    unlink(path);
    return 0;
}
