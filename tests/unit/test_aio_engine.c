// The aio engine end to end on real files: bytes read equal bytes written across ring
// counts, queue depths, block sizes, stripes and the pread/pwrite fallback, with many
// tickets in flight; the on-disk layout checked with plain pread; and every error
// path made to happen for real (unaligned requests, missing or unwritable
// directories, a full file system, a file-size limit, a file cut short underneath, a
// file system that refuses O_DIRECT).
// timeout: 10 san=10 cuda-emu=10 san-cuda-emu=15
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "zinf.h"
#include "zinf_internal.h"

enum { ALIGN = 4096 };

static uint64_t rng = 88172645463325252ull;
static uint64_t next_rand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void *aligned(size_t n) {
    void *p = NULL;
    return posix_memalign(&p, ALIGN, n) ? NULL : p;
}

static void fill(unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)next_rand();
}

// The documented layout, computed here on its own: stripe unit u of the logical file
// lives in directory u % n at offset (u / n) * stripe.
static void check_layout(char **dirs, int n, const char *name, uint64_t stripe, const unsigned char *want,
                         size_t size) {
    unsigned char *got = aligned(size);
    int fds[4];
    for (int d = 0; d < n; d++) {
        char path[256];
        snprintf(path, sizeof path, "%s/%s", dirs[d], name);
        fds[d] = open(path, O_RDONLY);
        CHECK(fds[d] >= 0, "open %s", path);
    }
    for (uint64_t u = 0; u * stripe < size; u++) {
        ssize_t r = pread(fds[u % (uint64_t)n], got + u * stripe, stripe, (off_t)(u / (uint64_t)n * stripe));
        CHECK(r == (ssize_t)stripe, "pread unit %llu", (unsigned long long)u);
    }
    CHECK(memcmp(got, want, size) == 0, "on-disk layout differs from the stripe layout (%d dirs)", n);
    for (int d = 0; d < n; d++)
        close(fds[d]);
    free(got);
}

static bool uring_refused; // set where a seccomp filter refuses io_uring_setup

// With registered, the source buffer and the first half of the destination are
// registered: writes go through WRITE_FIXED, reads mix READ_FIXED and plain reads.
static void integrity(bool threads_only, bool registered, uint32_t nthreads, uint32_t qd, uint32_t block, int ndirs,
                      char **dirs) {
    char what[128];
    snprintf(what, sizeof what, "%s%s threads=%u qd=%u block=%u dirs=%d", threads_only ? "pread" : "io_uring",
             registered ? " registered" : "", nthreads, qd, block, ndirs);
    zinf_aio *aio;
    zinf_aio_params cfg = {.block_size = block, .queue_depth = qd, .threads = nthreads, .use_threads = threads_only};
    if (zinf_aio_create(&aio, &cfg) != 0) {
        CHECK(0, "%s: create: %s", what, zinf_last_error());
        return;
    }
    bool ring = !threads_only && !uring_refused;
    CHECK(zinf_aio_uses_io_uring(aio) == ring, "%s: engine kind", what);
    const size_t size = 6 << 20;
    const uint64_t stripe = 2 * block;
    zinf_aio_file *f;
    zinf_aio_file_config fc = {.dirs = (const char *const *)dirs,
                               .ndirs = ndirs,
                               .name = "swap.bin",
                               .size = size,
                               .stripe_unit = stripe,
                               .keep = true};
    if (zinf_aio_file_open(aio, &f, &fc) != 0) {
        CHECK(0, "%s: open: %s", what, zinf_last_error());
        zinf_aio_destroy(aio);
        return;
    }
    CHECK(zinf_aio_file_direct(f), "%s: /tmp takes O_DIRECT", what);
    unsigned char *src = aligned(size), *dst = aligned(size);
    fill(src, size);
    memset(dst, 0xee, size); // poison
    if (registered) {
        CHECK(zinf_aio_register_buffer(aio, src, size) == 0, "%s: register: %s", what, zinf_last_error());
        CHECK(zinf_aio_register_buffer(aio, dst, size / 2) == 0, "%s: register: %s", what, zinf_last_error());
    }

    // Write in random-sized aligned pieces, all in flight at once.
    int64_t began = zinf_clock_ns();
    zinf_aio_ticket t[512];
    int nt = 0;
    for (size_t off = 0; off < size;) {
        size_t len = ((next_rand() % 48) + 1) * ALIGN;
        if (len > size - off) len = size - off;
        CHECK(zinf_aio_write(aio, f, off, src + off, len, &t[nt]) == 0, "%s: write: %s", what, zinf_last_error());
        nt++;
        off += len;
    }
    for (int i = 0; i < nt; i++)
        CHECK(zinf_aio_wait(aio, t[i]) == 0, "%s: wait write: %s", what, zinf_last_error());
    check_layout(dirs, ndirs, "swap.bin", stripe, src, size);

    // Read back with a different split; finish with wait_all and polling.
    nt = 0;
    for (size_t off = 0; off < size;) {
        size_t len = ((next_rand() % 97) + 1) * ALIGN;
        if (len > size - off) len = size - off;
        CHECK(zinf_aio_read(aio, f, off, dst + off, len, &t[nt++]) == 0, "%s: read: %s", what, zinf_last_error());
        off += len;
    }
    int polled = zinf_aio_poll(aio, t[0]);
    CHECK(polled == 0 || polled == 1, "%s: poll gives %d", what, polled);
    if (polled == 0) CHECK(zinf_aio_wait(aio, t[0]) == 0, "%s: wait after poll", what);
    CHECK(zinf_aio_wait(aio, t[0]) == -EINVAL, "%s: a released ticket must be refused", what);
    CHECK(zinf_aio_wait_all(aio) == 0, "%s: wait_all: %s", what, zinf_last_error());
    CHECK(memcmp(src, dst, size) == 0, "%s: bytes read differ from bytes written", what);

    zinf_aio_stats st;
    zinf_aio_get_stats(aio, &st);
    // Each byte counted once per direction; something was in flight for a while, never
    // longer than the whole exchange took.
    int64_t took = zinf_clock_ns() - began;
    CHECK(st.write_bytes == size && st.read_bytes == size, "%s: %llu bytes written and %llu read, want %zu each", what,
          (unsigned long long)st.write_bytes, (unsigned long long)st.read_bytes, size);
    CHECK(st.write_busy_ns > 0 && st.read_busy_ns > 0 && st.write_busy_ns + st.read_busy_ns <= took,
          "%s: busy %lld ns writing and %lld reading of %lld", what, (long long)st.write_busy_ns,
          (long long)st.read_busy_ns, (long long)took);
    if (!ring) {
        CHECK(st.requests == 0 && st.fixed_file == 0, "%s: threads issue no ring requests", what);
    } else {
        // Every request names the file by its fixed index; the registered buffers
        // cover all writes and about half the reads.
        CHECK(st.requests >= 2 * size / block && st.fixed_file == st.requests, "%s: %llu requests, %llu fixed files",
              what, (unsigned long long)st.requests, (unsigned long long)st.fixed_file);
        uint64_t lo = registered ? size / block + 1 : 0, hi = registered ? st.requests - 1 : 0;
        CHECK(st.fixed_buffer >= lo && st.fixed_buffer <= hi, "%s: %llu of %llu requests used a registered buffer",
              what, (unsigned long long)st.fixed_buffer, (unsigned long long)st.requests);
    }
    if (registered) {
        CHECK(zinf_aio_unregister_buffer(aio, src) == 0, "%s: unregister: %s", what, zinf_last_error());
        CHECK(zinf_aio_unregister_buffer(aio, dst) == 0, "%s: unregister: %s", what, zinf_last_error());
    }

    zinf_aio_file_close(f);
    zinf_aio_destroy(aio);
    for (int d = 0; d < ndirs; d++) {
        char path[256];
        snprintf(path, sizeof path, "%s/swap.bin", dirs[d]);
        unlink(path);
    }
    free(src);
    free(dst);
}

// A region larger than one table entry (1 GiB), its pieces and a request that
// straddles two of them; registration refused for overlap, unknown buffers, threads
// and a RLIMIT_MEMLOCK that is too small once CAP_IPC_LOCK is gone.
static void registration(char *dir) {
    zinf_aio *aio;
    CHECK(zinf_aio_create(&aio, &(zinf_aio_params){.block_size = 1 << 20, .queue_depth = 4}) == 0, "create: %s",
          zinf_last_error());
    const size_t big = (1u << 30) + (8u << 20);
    unsigned char *map = mmap(NULL, big, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    CHECK(map != MAP_FAILED, "mmap %zu", big);
    CHECK(zinf_aio_register_buffer(aio, map, big) == 0, "register 1 GiB + 8 MiB: %s", zinf_last_error());
    CHECK(zinf_aio_register_buffer(aio, map + big - 4096, 4096) == -EINVAL, "an overlapping region was accepted");
    CHECK_CONTAINS(zinf_last_error(), "overlaps");
    CHECK(zinf_aio_unregister_buffer(aio, map + 4096) == -EINVAL, "unregistering a non-region was accepted");
    CHECK_CONTAINS(zinf_last_error(), "not registered");
    // The region took two entries; small ones fill the rest, and one more finds it full.
    static char pages[300][4096] __attribute__((aligned(4096)));
    int taken = 0;
    while (taken < 300 && zinf_aio_register_buffer(aio, pages[taken], 4096) == 0)
        taken++;
    CHECK(taken == 254, "%d one-page regions fit beside the big one, want 254", taken);
    CHECK_CONTAINS(zinf_last_error(), "table is too full");
    for (int i = 0; i < taken; i++)
        CHECK(zinf_aio_unregister_buffer(aio, pages[i]) == 0, "unregister page %d", i);

    // 4 MiB at 1 GiB - 1 MiB - 512 KiB: block pieces on both sides of the entry
    // boundary are fixed, the one across it is not.
    zinf_aio_file *f;
    const char *dirs[] = {dir};
    zinf_aio_file_config fc = {.dirs = dirs, .ndirs = 1, .name = "reg.bin", .size = 4 << 20};
    CHECK(zinf_aio_file_open(aio, &f, &fc) == 0, "open: %s", zinf_last_error());
    unsigned char *at = map + (1u << 30) - (3u << 19);
    fill(at, 4 << 20);
    unsigned char *want = malloc(4 << 20);
    memcpy(want, at, 4 << 20);
    zinf_aio_ticket t;
    CHECK(zinf_aio_write(aio, f, 0, at, 4 << 20, &t) == 0 && zinf_aio_wait(aio, t) == 0, "write: %s",
          zinf_last_error());
    memset(at, 0, 4 << 20);
    CHECK(zinf_aio_read(aio, f, 0, at, 4 << 20, &t) == 0 && zinf_aio_wait(aio, t) == 0, "read: %s", zinf_last_error());
    CHECK(memcmp(at, want, 4 << 20) == 0, "bytes read across two registered entries differ");
    zinf_aio_stats st;
    zinf_aio_get_stats(aio, &st);
    CHECK(st.requests == 8 && st.fixed_buffer == 6, "%llu of %llu requests used a registered buffer (want 6 of 8)",
          (unsigned long long)st.fixed_buffer, (unsigned long long)st.requests);
    zinf_aio_file_close(f);
    CHECK(zinf_aio_unregister_buffer(aio, map) == 0, "unregister: %s", zinf_last_error());
    CHECK(zinf_aio_unregister_buffer(aio, map) == -EINVAL, "a second unregister was accepted");
    munmap(map, big);
    free(want);

    // Without CAP_IPC_LOCK registered pages count against RLIMIT_MEMLOCK.
    pid_t pid = fork();
    if (pid == 0) {
        struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
        struct __user_cap_data_struct d[2];
        syscall(SYS_capget, &h, d);
        d[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
        syscall(SYS_capset, &h, d);
        setrlimit(RLIMIT_MEMLOCK, &(struct rlimit){64 << 10, 64 << 10});
        void *b = aligned(1 << 20);
        zinf_aio *mine; // the parent's workers did not come along through fork
        int ret = zinf_aio_create(&mine, NULL);
        if (ret == 0) ret = zinf_aio_register_buffer(mine, b, 1 << 20);
        _exit(ret == -ENOMEM && strstr(zinf_last_error(), "RLIMIT_MEMLOCK") ? 0 : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "register past RLIMIT_MEMLOCK: not ENOMEM naming the limit");
    zinf_aio_destroy(aio);

    CHECK(zinf_aio_create(&aio, &(zinf_aio_params){.use_threads = true}) == 0, "create threads");
    void *b = aligned(4096);
    CHECK(zinf_aio_register_buffer(aio, b, 4096) == -EOPNOTSUPP, "threads accepted a registration");
    CHECK_CONTAINS(zinf_last_error(), "pread/pwrite threads");
    free(b);
    zinf_aio_destroy(aio);
}

// One directory has no stripes: a stripe unit below the block size does not cut its
// requests (zinf.aio gives single files the 4 KiB alignment as their unit).
static void unstriped(const char *dir) {
    zinf_aio *aio;
    zinf_aio_params cfg = {.block_size = 65536, .queue_depth = 4};
    CHECK(zinf_aio_create(&aio, &cfg) == 0, "create: %s", zinf_last_error());
    const char *dirs[] = {dir};
    zinf_aio_file_config fc = {.dirs = dirs, .ndirs = 1, .name = "one.bin", .size = 256 << 10, .stripe_unit = 4096};
    zinf_aio_file *f;
    CHECK(zinf_aio_file_open(aio, &f, &fc) == 0, "open: %s", zinf_last_error());
    unsigned char *buf = aligned(256 << 10);
    fill(buf, 256 << 10);
    zinf_aio_ticket t;
    CHECK(zinf_aio_write(aio, f, 0, buf, 256 << 10, &t) == 0 && zinf_aio_wait(aio, t) == 0, "write: %s",
          zinf_last_error());
    zinf_aio_stats st;
    zinf_aio_get_stats(aio, &st);
    CHECK(st.requests == 4, "256 KiB to one directory took %llu requests of at most 64 KiB, want 4",
          (unsigned long long)st.requests);
    check_layout((char *[]){(char *)dir}, 1, "one.bin", 4096, buf, 256 << 10);
    free(buf);
    zinf_aio_file_close(f);
    zinf_aio_destroy(aio);
}

static void errors(char *dir) {
    zinf_aio *aio = (zinf_aio *)1;
    CHECK(zinf_aio_create(&aio, &(zinf_aio_params){.block_size = 5000}) == -EINVAL && !aio, "block 5000 accepted");
    CHECK_CONTAINS(zinf_last_error(), "block_size 5000");
    CHECK(zinf_aio_create(&aio, &(zinf_aio_params){.queue_depth = 5000}) == -EINVAL && !aio, "depth 5000 accepted");
    CHECK_CONTAINS(zinf_last_error(), "queue_depth 5000");
    CHECK(zinf_aio_create(&aio, &(zinf_aio_params){.block_size = 64 << 10, .queue_depth = 4}) == 0, "create");
    zinf_aio_file *f;
    const char *dirs[] = {dir};
    zinf_aio_file_config fc = {.dirs = dirs, .ndirs = 1, .name = "err.bin", .size = 1 << 20};
    CHECK(zinf_aio_file_open(aio, &f, &fc) == 0, "open: %s", zinf_last_error());
    unsigned char *buf = aligned(2 << 20);
    fill(buf, 2 << 20);
    zinf_aio_ticket t;

    // Unaligned requests are refused up front and say which part is unaligned.
    CHECK(zinf_aio_write(aio, f, 100, buf, ALIGN, &t) == -EINVAL, "unaligned offset");
    CHECK_CONTAINS(zinf_last_error(), "offset");
    CHECK(zinf_aio_write(aio, f, 0, buf, 100, &t) == -EINVAL, "unaligned length");
    CHECK_CONTAINS(zinf_last_error(), "length");
    CHECK(zinf_aio_write(aio, f, 0, buf + 8, ALIGN, &t) == -EINVAL, "unaligned buffer");
    CHECK_CONTAINS(zinf_last_error(), "buffer");
    CHECK(zinf_aio_read(aio, f, 1 << 20, buf, ALIGN, &t) == -EINVAL, "beyond the end");
    CHECK_CONTAINS(zinf_last_error(), "beyond the end");
    CHECK(zinf_aio_wait(aio, 12345) == -EINVAL, "unknown ticket");

    // A file cut short underneath: the reads past its new end fail with EIO and
    // name the offset; the read before it still completes with the right bytes.
    zinf_aio_ticket w;
    CHECK(zinf_aio_write(aio, f, 0, buf, 1 << 20, &w) == 0 && zinf_aio_wait(aio, w) == 0, "write: %s",
          zinf_last_error());
    char path[256];
    snprintf(path, sizeof path, "%s/err.bin", dir);
    CHECK(truncate(path, 512 << 10) == 0, "truncate");
    unsigned char *back = aligned(1 << 20);
    memset(back, 0, 1 << 20);
    zinf_aio_ticket ok, bad;
    CHECK(zinf_aio_read(aio, f, 0, back, 256 << 10, &ok) == 0, "read ok");
    CHECK(zinf_aio_read(aio, f, 512 << 10, back + (512 << 10), 256 << 10, &bad) == 0, "read bad");
    CHECK(zinf_aio_wait(aio, bad) == -EIO, "read past the end must fail with EIO");
    CHECK_CONTAINS(zinf_last_error(), "err.bin at offset 524288");
    CHECK(zinf_aio_wait(aio, ok) == 0, "the other read is intact: %s", zinf_last_error());
    CHECK(memcmp(back, buf, 256 << 10) == 0, "the other read's bytes");

    // A file-size limit: writes past it fail with EFBIG (and only those).
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit old, lim = {256 << 10, RLIM_INFINITY};
    getrlimit(RLIMIT_FSIZE, &old);
    lim.rlim_max = old.rlim_max;
    CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0, "setrlimit");
    CHECK(zinf_aio_write(aio, f, 0, buf, 128 << 10, &ok) == 0, "write below the limit");
    CHECK(zinf_aio_write(aio, f, 512 << 10, buf, 128 << 10, &bad) == 0, "write past the limit");
    int r = zinf_aio_wait(aio, bad);
    CHECK(r == -EFBIG, "write past RLIMIT_FSIZE gives %d", r);
    CHECK_CONTAINS(zinf_last_error(), "write ");
    CHECK(zinf_aio_wait(aio, ok) == 0, "the write below the limit is intact: %s", zinf_last_error());
    setrlimit(RLIMIT_FSIZE, &old);
    zinf_aio_file_close(f);

    // Directories that cannot hold the file.
    char missing[256];
    snprintf(missing, sizeof missing, "%s/missing", dir);
    const char *bad_dirs[] = {missing, "/proc"};
    for (int i = 0; i < 2; i++) {
        zinf_aio_file_config bc = {.dirs = &bad_dirs[i], .ndirs = 1, .name = "x.bin", .size = 1 << 20};
        CHECK(zinf_aio_file_open(aio, &f, &bc) < 0 && !f, "open in %s must fail", bad_dirs[i]);
        CHECK_CONTAINS(zinf_last_error(), bad_dirs[i]);
    }

    // A full file system: a 1 MiB tmpfs cannot hold a 4 MiB swap file; the open says
    // so, and leaves nothing behind.
    char mnt[256];
    snprintf(mnt, sizeof mnt, "%s/small", dir);
    mkdir(mnt, 0700);
    if (mount("zinf-test", mnt, "tmpfs", 0, "size=1m") != 0) {
        CHECK(geteuid() != 0, "mount a 1 MiB tmpfs as root: %s", strerror(errno));
        printf("not root: the full-file-system case needs a mount and was not run\n");
    } else {
        const char *small[] = {mnt};
        zinf_aio_file_config sc = {.dirs = small, .ndirs = 1, .name = "big.bin", .size = 4 << 20};
        r = zinf_aio_file_open(aio, &f, &sc);
        CHECK(r == -ENOSPC, "preallocating 4 MiB on a 1 MiB file system gives %d", r);
        CHECK_CONTAINS(zinf_last_error(), "cannot preallocate 4 MiB");
        CHECK(zinf_aio_file_open(aio, &f, &sc) == -ENOSPC, "again");
        char leftover[300];
        snprintf(leftover, sizeof leftover, "%s/big.bin", mnt);
        CHECK(access(leftover, F_OK) != 0, "a failed open left %s behind", leftover);
        umount(mnt);
    }
    rmdir(mnt);
    zinf_aio_destroy(aio);
    free(buf);
    free(back);
}

static void warned(zinf_log_level level, int rank, const char *msg, void *user) {
    (void)rank;
    if (level == ZINF_LOG_LEVEL_WARN) snprintf(user, 256, "%s", msg);
}

// ramfs takes no O_DIRECT: the file runs buffered with one warning, or, when strict
// direct IO was asked for, the open fails naming the directory.
static void refused_direct(char *dir) {
    char mnt[256];
    snprintf(mnt, sizeof mnt, "%s/ramfs", dir);
    mkdir(mnt, 0700);
    if (mount("zinf-test", mnt, "ramfs", 0, NULL) != 0) {
        CHECK(geteuid() != 0, "mount ramfs as root: %s", strerror(errno));
        printf("not root: the refused-O_DIRECT case needs a mount and was not run\n");
        rmdir(mnt);
        return;
    }
    zinf_aio *aio;
    CHECK(zinf_aio_create(&aio, NULL) == 0, "create");
    const char *dirs[] = {mnt};
    zinf_aio_file_config fc = {.dirs = dirs, .ndirs = 1, .name = "buffered.bin", .size = 1 << 20};
    char warning[256] = "";
    zinf_log_set_callback(warned, warning);
    zinf_aio_file *f = NULL;
    CHECK(zinf_aio_file_open(aio, &f, &fc) == 0, "buffered fallback: %s", zinf_last_error());
    zinf_log_set_callback(NULL, NULL);
    CHECK_CONTAINS(warning, "does not take O_DIRECT");
    if (f) {
        CHECK(!zinf_aio_file_direct(f), "ramfs file claims O_DIRECT");
        unsigned char *a = aligned(1 << 20), *b = aligned(1 << 20);
        fill(a, 1 << 20);
        memset(b, 0, 1 << 20);
        zinf_aio_ticket t;
        CHECK(zinf_aio_write(aio, f, 0, a, 1 << 20, &t) == 0 && zinf_aio_wait(aio, t) == 0, "buffered write");
        CHECK(zinf_aio_read(aio, f, 0, b, 1 << 20, &t) == 0 && zinf_aio_wait(aio, t) == 0, "buffered read");
        CHECK(memcmp(a, b, 1 << 20) == 0, "buffered round trip");
        zinf_aio_file_close(f);
        free(a);
        free(b);
    }
    fc.strict_direct = true;
    CHECK(zinf_aio_file_open(aio, &f, &fc) == -EINVAL && !f, "strict direct IO on ramfs must fail");
    CHECK_CONTAINS(zinf_last_error(), "refuses O_DIRECT");
    CHECK_CONTAINS(zinf_last_error(), mnt);
    zinf_aio_destroy(aio);
    umount(mnt);
    rmdir(mnt);
}

static void count_warnings(zinf_log_level level, int rank, const char *msg, void *user) {
    (void)rank;
    (void)msg;
    if (level == ZINF_LOG_LEVEL_WARN) ++*(int *)user;
}

// A seccomp filter that refuses io_uring_setup, as container runtimes do: the engine
// runs on pread/pwrite threads, says so once, and moves the same bytes. In a child,
// since the filter cannot be lifted.
static void refused_io_uring(char *dir) {
    pid_t pid = fork();
    if (pid == 0) {
        struct sock_filter prog[] = {
            BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
            BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
            BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
            BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        };
        struct sock_fprog fprog = {.len = sizeof prog / sizeof prog[0], .filter = prog};
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fprog)) _exit(2);
        zinf_aio_caps caps;
        zinf_aio_probe(&caps);
        CHECK(!caps.io_uring && caps.setup_errno == EPERM, "probe under seccomp: io_uring %d errno %d", caps.io_uring,
              caps.setup_errno);
        uring_refused = true;
        int warnings = 0;
        zinf_log_set_callback(count_warnings, &warnings);
        char *dirs[] = {dir};
        integrity(false, false, 2, 4, 65536, 1, dirs); // asks for io_uring
        CHECK(warnings == 1, "%d warnings for the fallback, want exactly one", warnings);
        zinf_log_set_callback(NULL, NULL);
        _exit(check_exit("test_aio_engine (io_uring refused)"));
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "io_uring refused by seccomp: child exit status %#x", status);
}

int main(void) {
    char *dirs[2];
    for (int i = 0; i < 2; i++) {
        dirs[i] = malloc(64);
        snprintf(dirs[i], 64, "/var/tmp/zinf-aio-XXXXXX");
        CHECK(mkdtemp(dirs[i]) != NULL, "mkdtemp");
    }
    static const struct {
        bool threads_only, registered;
        uint32_t nthreads, qd, block;
        int ndirs;
    } runs[] = {
        {false, false, 1, 1, 4096, 1}, {false, true, 1, 32, 65536, 1}, {false, false, 3, 8, 65536, 1},
        {false, true, 2, 8, 4096, 2},  {false, false, 3, 4, 65536, 2}, {false, true, 3, 4, 65536, 2},
        {true, false, 1, 1, 65536, 1}, {true, false, 3, 8, 4096, 2},
    };
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++)
        integrity(runs[i].threads_only, runs[i].registered, runs[i].nthreads, runs[i].qd, runs[i].block, runs[i].ndirs,
                  dirs);
    registration(dirs[0]);
    unstriped(dirs[0]);
    refused_io_uring(dirs[0]);
    errors(dirs[0]);
    refused_direct(dirs[0]);
    for (int i = 0; i < 2; i++) {
        rmdir(dirs[i]);
        free(dirs[i]);
    }
    return check_exit("test_aio_engine");
}
