// zinf_aio_probe and zinf_aio_path_probe against independent sources: a ring set up
// here, the kernel version, statvfs/statfs, sysfs block sizes and an O_DIRECT open
// done here; and that the probe leaves no temporary files behind.
// timeout: 10 san=10 cuda-emu=10 san-cuda-emu=10
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "check.h"
#include "zinf.h"

static bool has_word(const char *list, const char *word) {
    size_t n = strlen(word);
    for (const char *p = list; (p = strstr(p, word)); p += n)
        if ((p == list || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0')) return true;
    return false;
}

static bool kernel_at_least(int major, int minor) {
    struct utsname u;
    int a = 0, b = 0;
    if (uname(&u) != 0 || sscanf(u.release, "%d.%d", &a, &b) != 2) return false;
    return a > major || (a == major && b >= minor);
}

// Probe files left in dir (and removed, so that the directory can go).
static int count_leftovers(const char *dir) {
    int n = 0;
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, ".zinf-probe", 11) != 0) continue;
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
        n++;
    }
    closedir(d);
    return n;
}

static void test_ring(void) {
    zinf_aio_caps caps;
    memset(&caps, 0x5a, sizeof caps);
    zinf_aio_probe(&caps);
    char names[512];
    zinf_aio_feature_names(caps.features, names, sizeof names);
    printf("io_uring %d (errno %d), features 0x%x: %s\n", caps.io_uring, caps.setup_errno, caps.features, names);
    printf("single_issuer %d defer_taskrun %d coop_taskrun %d sqpoll %d read %d write %d read_fixed %d fallocate %d\n",
           caps.single_issuer, caps.defer_taskrun, caps.coop_taskrun, caps.sqpoll, caps.op_read, caps.op_write,
           caps.op_read_fixed, caps.op_fallocate);
    // What an engine asks: the probe's answer, without its rings for each flag.
    CHECK(zinf_aio_uring_errno() == caps.setup_errno, "zinf_aio_uring_errno %d, the probe's errno %d",
          zinf_aio_uring_errno(), caps.setup_errno);
    // CI has io_uring; a probe that says otherwise is a failure, not a skip.
    CHECK(caps.io_uring, "io_uring unavailable: %s", strerror(caps.setup_errno));

    struct io_uring ring;
    struct io_uring_params p;
    memset(&p, 0, sizeof p);
    if (io_uring_queue_init_params(4, &ring, &p) == 0) {
        io_uring_queue_exit(&ring);
        CHECK(caps.features == p.features, "features 0x%x, a ring set up here reports 0x%x", caps.features, p.features);
    } else {
        CHECK(false, "io_uring setup fails here too");
    }

    // Names follow bits both ways.
    CHECK(has_word(names, "nodrop") == !!(caps.features & IORING_FEAT_NODROP), "nodrop vs bit: %s", names);
    CHECK(has_word(names, "single_mmap") == !!(caps.features & IORING_FEAT_SINGLE_MMAP), "single_mmap vs bit: %s",
          names);
    CHECK(has_word(names, "fast_poll") == !!(caps.features & IORING_FEAT_FAST_POLL), "fast_poll vs bit: %s", names);
    zinf_aio_feature_names(caps.features & ~IORING_FEAT_NODROP, names, sizeof names);
    CHECK(!has_word(names, "nodrop"), "nodrop named without its bit: %s", names);
    zinf_aio_feature_names(IORING_FEAT_SINGLE_MMAP | IORING_FEAT_FAST_POLL, names, sizeof names);
    CHECK(strcmp(names, "single_mmap fast_poll") == 0, "two bits gave \"%s\"", names);
    zinf_aio_feature_names(0, names, sizeof names);
    CHECK(strcmp(names, "") == 0, "no bits gave \"%s\"", names);
    zinf_aio_feature_names(1u << 31, names, sizeof names);
    CHECK(strcmp(names, "bit31") == 0, "an unnamed bit gave \"%s\"", names);
    // A short buffer keeps whole names only, NUL-terminated inside the buffer.
    char small[16];
    memset(small, 'x', sizeof small);
    zinf_aio_feature_names(IORING_FEAT_SINGLE_MMAP | IORING_FEAT_NODROP | IORING_FEAT_SUBMIT_STABLE, small,
                           sizeof small);
    CHECK(strcmp(small, "single_mmap") == 0, "short buffer gave \"%.16s\"", small);

    // Everything zinf asks of the kernel has been there since 6.1 (DEFER_TASKRUN).
    if (kernel_at_least(6, 1)) {
        CHECK(caps.single_issuer && caps.defer_taskrun && caps.coop_taskrun, "a kernel >= 6.1 refused a setup flag");
        CHECK(caps.op_read && caps.op_write && caps.op_read_fixed && caps.op_fallocate,
              "a kernel >= 6.1 lacks an opcode");
        if (geteuid() == 0) CHECK(caps.sqpoll, "SQPOLL refused to root on a kernel >= 6.1");
    }
}

// The logical block size sysfs gives for the device under dir; 0 when it has none.
static unsigned sysfs_block(const char *dir) {
    struct stat st;
    if (stat(dir, &st) != 0) return 0;
    static const char *const rel[] = {"queue", "../queue"};
    for (int i = 0; i < 2; i++) {
        char path[128];
        snprintf(path, sizeof path, "/sys/dev/block/%u:%u/%s/logical_block_size", major(st.st_dev), minor(st.st_dev),
                 rel[i]);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        unsigned v = 0;
        if (fscanf(f, "%u", &v) != 1) v = 0;
        fclose(f);
        return v;
    }
    return 0;
}

static void test_disk_path(void) {
    char dir[] = "/tmp/zinf-aio-test-XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(false, "mkdtemp %s: %s", dir, strerror(errno));
        return;
    }
    zinf_aio_path_info info;
    memset(&info, 0x5a, sizeof info);
    int ret = zinf_aio_path_probe(dir, &info);
    printf("%s: ret %d, fs %s, free %llu of %llu, block %u, dio_align %u, direct %d (%s), writable %d\n", dir, ret,
           info.fs_type, (unsigned long long)info.free_bytes, (unsigned long long)info.total_bytes, info.logical_block,
           info.dio_align, info.direct, info.direct ? "-" : strerror(info.direct_errno), info.writable);
    CHECK(ret == 0, "probe of %s returned %d", dir, ret);
    CHECK(info.writable, "not writable");
    CHECK(info.direct, "O_DIRECT refused on %s: %s", dir, strerror(info.direct_errno));
    CHECK(info.dio_align >= 4096 && (info.dio_align & (info.dio_align - 1)) == 0, "dio_align %u", info.dio_align);
    CHECK(info.fs_type[0], "empty fs_type");

    struct statfs sf;
    if (statfs(dir, &sf) == 0) {
        if (sf.f_type == EXT4_SUPER_MAGIC) CHECK(strcmp(info.fs_type, "ext4") == 0, "fs_type %s on ext4", info.fs_type);
        if (sf.f_type == XFS_SUPER_MAGIC) CHECK(strcmp(info.fs_type, "xfs") == 0, "fs_type %s on xfs", info.fs_type);
    }
    struct statvfs sv;
    if (statvfs(dir, &sv) == 0) {
        double avail = (double)sv.f_bavail * sv.f_frsize, total = (double)sv.f_blocks * sv.f_frsize;
        CHECK(info.free_bytes > 0, "free_bytes 0");
        CHECK((double)info.free_bytes > avail * 0.99 && (double)info.free_bytes < avail * 1.01 + 1,
              "free_bytes %llu, statvfs %.0f", (unsigned long long)info.free_bytes, avail);
        CHECK((double)info.total_bytes == total, "total_bytes %llu, statvfs %.0f", (unsigned long long)info.total_bytes,
              total);
    }
    unsigned block = sysfs_block(dir);
    if (block) CHECK(info.logical_block == block, "logical_block %u, sysfs %u", info.logical_block, block);
    CHECK(info.dio_align == (info.logical_block > 4096 ? info.logical_block : 4096), "dio_align %u for block %u",
          info.dio_align, info.logical_block);

    int left = count_leftovers(dir);
    CHECK(left == 0, "%d probe file(s) left in %s", left, dir);
    if (rmdir(dir) != 0) CHECK(false, "rmdir %s: %s", dir, strerror(errno));

    // The same directory, gone, and a regular file in its place.
    memset(&info, 0x5a, sizeof info);
    ret = zinf_aio_path_probe(dir, &info);
    CHECK(ret == -ENOENT, "missing dir returned %d, want %d", ret, -ENOENT);
    int fd = open(dir, O_CREAT | O_EXCL | O_WRONLY, 0600);
    if (fd >= 0) {
        close(fd);
        ret = zinf_aio_path_probe(dir, &info);
        CHECK(ret == -ENOTDIR, "regular file returned %d, want %d", ret, -ENOTDIR);
        unlink(dir);
    }

    // /proc takes no new files, even from root.
    memset(&info, 0x5a, sizeof info);
    ret = zinf_aio_path_probe("/proc", &info);
    CHECK(ret < 0 && !info.writable, "/proc returned %d, writable %d", ret, info.writable);
}

static void test_tmpfs_path(void) {
    struct statfs sf;
    if (statfs("/dev/shm", &sf) != 0 || sf.f_type != TMPFS_MAGIC) {
        printf("NOTE: /dev/shm is not tmpfs here; the tmpfs part of this test did not run\n");
        return;
    }
    char dir[] = "/dev/shm/zinf-aio-test-XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(false, "mkdtemp %s: %s", dir, strerror(errno));
        return;
    }
    // tmpfs took O_DIRECT in Linux 6.6; ask this kernel directly what it does.
    char probe[64];
    snprintf(probe, sizeof probe, "%s/direct", dir);
    int fd = open(probe, O_CREAT | O_RDWR | O_DIRECT, 0600);
    int open_errno = fd < 0 ? errno : 0;
    if (fd >= 0) close(fd);
    unlink(probe);

    zinf_aio_path_info info;
    memset(&info, 0x5a, sizeof info);
    int ret = zinf_aio_path_probe(dir, &info);
    printf("%s: ret %d, fs %s, block %u, dio_align %u, direct %d (%s); open(O_DIRECT) here: %s\n", dir, ret,
           info.fs_type, info.logical_block, info.dio_align, info.direct,
           info.direct ? "-" : strerror(info.direct_errno), open_errno ? strerror(open_errno) : "ok");
    CHECK(ret == 0, "probe of %s returned %d", dir, ret);
    CHECK(strcmp(info.fs_type, "tmpfs") == 0, "fs_type \"%s\" on tmpfs", info.fs_type);
    if (open_errno == EINVAL) {
        CHECK(!info.direct && info.direct_errno == EINVAL, "direct %d errno %d on a tmpfs without O_DIRECT",
              info.direct, info.direct_errno);
    } else {
        CHECK(open_errno == 0, "open(O_DIRECT) on tmpfs: %s", strerror(open_errno));
        CHECK(info.direct, "direct refused (%s) where this kernel's tmpfs takes O_DIRECT", strerror(info.direct_errno));
    }
    int left = count_leftovers(dir);
    CHECK(left == 0, "%d probe file(s) left in %s", left, dir);
    if (rmdir(dir) != 0) CHECK(false, "rmdir %s: %s", dir, strerror(errno));
}

int main(void) {
    test_ring();
    test_disk_path();
    test_tmpfs_path();
    return check_exit("test_aio_probe");
}
