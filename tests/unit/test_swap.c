// The swap store on real files: the zinf-<run>/rank<R>/<name> layout while open and
// gone after close (zinf-<run> kept while another rank uses it); async aligned IO and
// synchronous pread/pwrite at odd offsets and lengths (partial blocks, stripe
// boundaries, more than one bounce window) checked against an in-memory model of each
// file, on one directory and striped over two; and the errors: missing, unwritable and
// repeated paths, bad names, out-of-range and unaligned IO, a file too big for the file
// system, a stale file on disk; a file system without O_DIRECT said once. Checksums: a
// byte changed on the drive behind the store's back fails the read that meets it
// (async and synchronous), naming the striped file and its offset, and goes unseen
// with aio.checksum off; faults on demand (ZINF_FAULT) on io_uring and on the
// pread/pwrite threads: EIO and ENOSPC fail naming path, operation and offset, EINTR,
// EAGAIN and short transfers are carried on to the same bytes, a flipped byte is
// caught by its checksum.
// timeout: 10 san=10 cuda-emu=10 san-cuda-emu=10
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "zinf.h"
#include "zinf_internal.h"

enum { BLOCK = 64 << 10 }; // the aio block size, so also the stripe unit

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next_rand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void fill(unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)next_rand();
}

static unsigned char *aligned(size_t n) {
    void *p = NULL;
    return posix_memalign(&p, 4096, n) ? NULL : p;
}

static bool is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool exists(const char *path) { return access(path, F_OK) == 0; }

// One random offset: mostly near a stripe or block boundary, else anywhere.
static uint64_t pick_offset(uint64_t size) {
    uint64_t off = next_rand() % size;
    if (next_rand() % 2) {
        uint64_t b = off / BLOCK * BLOCK + (next_rand() % 2 ? BLOCK : 0);
        off = b - (next_rand() % 9) + 4; // b-4 .. b+4
        if (off >= size) off = size - 1;
    }
    return off;
}

// pwrite and pread at random odd ranges against the model, then the whole file back
// through async IO (the pwrites must not have touched anything else).
static void sync_model(zinf_swap *s, int id, unsigned char *model, uint64_t size, const char *what) {
    unsigned char *buf = malloc(size), *got = malloc(size);
    for (int i = 0; i < 300; i++) {
        uint64_t off = pick_offset(size);
        uint64_t len = i % 50 == 7  ? (5u << 20) + next_rand() % 4096 // more than one bounce window
                       : i % 5 == 0 ? next_rand() % (3 * BLOCK)       // across stripes
                                    : 1 + next_rand() % 9000;         // small, partial blocks
        if (len > size - off) len = size - off;
        if (next_rand() % 2) {
            fill(buf, len);
            CHECK(zinf_swap_pwrite(s, id, off, buf, len) == ZINF_OK, "%s: pwrite %llu+%llu: %s", what,
                  (unsigned long long)off, (unsigned long long)len, zinf_last_error());
            memcpy(model + off, buf, len);
        } else {
            memset(got, 0xa5, len); // poison
            CHECK(zinf_swap_pread(s, id, off, got, len) == ZINF_OK, "%s: pread %llu+%llu: %s", what,
                  (unsigned long long)off, (unsigned long long)len, zinf_last_error());
            CHECK(memcmp(got, model + off, len) == 0, "%s: pread %llu+%llu differs from the model", what,
                  (unsigned long long)off, (unsigned long long)len);
        }
    }
    // The last byte and an empty range at the very end are in range.
    CHECK(zinf_swap_pread(s, id, size - 1, got, 1) == ZINF_OK && got[0] == model[size - 1], "%s: last byte", what);
    CHECK(zinf_swap_pread(s, id, size, got, 0) == ZINF_OK, "%s: empty read at the end", what);
    unsigned char *all = aligned(size);
    memset(all, 0x5a, size);
    zinf_aio_ticket t;
    CHECK(zinf_swap_read(s, id, 0, all, size, &t) == ZINF_OK && zinf_swap_wait(s, t) == ZINF_OK, "%s: read all: %s",
          what, zinf_last_error());
    CHECK(memcmp(all, model, size) == 0, "%s: file differs from the model after pwrites", what);
    free(all);
    free(buf);
    free(got);
}

// A store over ndirs directories: layout, async round trip, pread/pwrite, close.
static void store(zinf_aio *aio, char **dirs, int ndirs) {
    char what[32];
    snprintf(what, sizeof what, "%d dir(s)", ndirs);
    zinf_swap *s = NULL;
    zinf_swap_config cfg = {.paths = (const char *const *)dirs, .npaths = ndirs, .run = "t1", .rank = 3, .aio = aio};
    if (zinf_swap_open(&s, &cfg) != ZINF_OK) {
        CHECK(0, "%s: open: %s", what, zinf_last_error());
        return;
    }
    uint32_t a = zinf_swap_alignment(s);
    CHECK(a >= 4096 && (a & (a - 1)) == 0, "%s: alignment %u", what, a);
    CHECK(zinf_swap_direct(s), "%s: /var/tmp takes O_DIRECT", what);
    CHECK(zinf_swap_bytes(s) == 0, "%s: an empty store holds bytes", what);

    const char *names[] = {"exp_avg", "params"};
    const uint64_t asked[] = {(6u << 20) + 123, 100000};
    int ids[2];
    uint64_t sizes[2];
    for (int k = 0; k < 2; k++) {
        CHECK(zinf_swap_add(s, names[k], asked[k], &ids[k]) == ZINF_OK, "%s: add %s: %s", what, names[k],
              zinf_last_error());
        CHECK(ids[k] == k, "%s: id %d for the file added %d-th", what, ids[k], k);
        sizes[k] = (asked[k] + a - 1) / a * a;
    }

    // The layout while open: every directory holds its stripe of every file.
    uint64_t on_disk = 0;
    for (int d = 0; d < ndirs; d++) {
        char path[512];
        snprintf(path, sizeof path, "%s/zinf-t1/rank3", dirs[d]);
        CHECK(is_dir(path), "%s: %s is missing", what, path);
        for (int k = 0; k < 2; k++) {
            snprintf(path, sizeof path, "%s/zinf-t1/rank3/%s", dirs[d], names[k]);
            struct stat st;
            CHECK(stat(path, &st) == 0, "%s: %s is missing", what, path);
            on_disk += (uint64_t)st.st_size;
            // Striped: a directory holds about 1/ndirs of the file (plus a stripe).
            if (ndirs > 1 && k == 0)
                CHECK((uint64_t)st.st_size <= sizes[k] / (uint64_t)ndirs + BLOCK, "%s: %s holds %lld bytes", what, path,
                      (long long)st.st_size);
        }
    }
    CHECK(zinf_swap_bytes(s) == on_disk && on_disk >= sizes[0] + sizes[1], "%s: %llu bytes reported, %llu on disk",
          what, (unsigned long long)zinf_swap_bytes(s), (unsigned long long)on_disk);

    // Async: both files written in random aligned pieces, all in flight, read back in
    // another split.
    unsigned char *model[2], *h_src[2], *h_dst[2];
    zinf_aio_ticket t[256];
    int nt = 0;
    for (int k = 0; k < 2; k++) {
        model[k] = malloc(sizes[k]);
        h_src[k] = aligned(sizes[k]);
        h_dst[k] = aligned(sizes[k]);
        fill(h_src[k], sizes[k]);
        memcpy(model[k], h_src[k], sizes[k]);
        memset(h_dst[k], 0xee, sizes[k]);
        for (uint64_t off = 0; off < sizes[k] && nt < 256;) {
            uint64_t len = (1 + next_rand() % 40) * a;
            if (len > sizes[k] - off) len = sizes[k] - off;
            CHECK(zinf_swap_write(s, ids[k], off, h_src[k] + off, len, &t[nt]) == ZINF_OK && t[nt] != 0,
                  "%s: write: %s", what, zinf_last_error());
            nt++;
            off += len;
        }
    }
    for (int i = 0; i < nt; i++)
        CHECK(zinf_swap_wait(s, t[i]) == ZINF_OK, "%s: wait write: %s", what, zinf_last_error());
    nt = 0;
    for (int k = 0; k < 2; k++) {
        for (uint64_t off = 0; off < sizes[k] && nt < 256;) {
            uint64_t len = (1 + next_rand() % 70) * a;
            if (len > sizes[k] - off) len = sizes[k] - off;
            CHECK(zinf_swap_read(s, ids[k], off, h_dst[k] + off, len, &t[nt]) == ZINF_OK, "%s: read: %s", what,
                  zinf_last_error());
            nt++;
            off += len;
        }
    }
    for (int i = 0; i < nt; i++)
        CHECK(zinf_swap_wait(s, t[i]) == ZINF_OK, "%s: wait read: %s", what, zinf_last_error());
    for (int k = 0; k < 2; k++)
        CHECK(memcmp(h_src[k], h_dst[k], sizes[k]) == 0, "%s: %s: bytes read differ from bytes written", what,
              names[k]);

    for (int k = 0; k < 2; k++)
        sync_model(s, ids[k], model[k], sizes[k], what);

    // A second rank of the same run shares zinf-t1 until both are closed.
    zinf_swap *other = NULL;
    cfg.rank = 4;
    CHECK(zinf_swap_open(&other, &cfg) == ZINF_OK, "%s: open rank 4: %s", what, zinf_last_error());
    int oid;
    CHECK(zinf_swap_add(other, "exp_avg", 4096, &oid) == ZINF_OK, "%s: rank 4 add: %s", what, zinf_last_error());
    zinf_swap_close(s);
    for (int d = 0; d < ndirs; d++) {
        char path[512];
        snprintf(path, sizeof path, "%s/zinf-t1/rank3", dirs[d]);
        CHECK(!exists(path), "%s: %s is left after close", what, path);
        snprintf(path, sizeof path, "%s/zinf-t1/rank4/exp_avg", dirs[d]);
        CHECK(exists(path), "%s: closing rank 3 removed %s", what, path);
    }
    zinf_swap_close(other);
    for (int d = 0; d < ndirs; d++) {
        char path[512];
        snprintf(path, sizeof path, "%s/zinf-t1", dirs[d]);
        CHECK(!exists(path), "%s: %s is left after both ranks closed", what, path);
        CHECK(is_dir(dirs[d]), "%s: close removed the nvme_path %s itself", what, dirs[d]);
    }
    for (int k = 0; k < 2; k++) {
        free(model[k]);
        free(h_src[k]);
        free(h_dst[k]);
    }
}

static void errors(zinf_aio *aio, char **dirs) {
    zinf_swap *s = (zinf_swap *)1;
    char missing[256], file[256];
    snprintf(missing, sizeof missing, "%s/missing/deeper", dirs[0]); // a missing parent too
    snprintf(file, sizeof file, "%s/plain-file", dirs[0]);
    FILE *fp = fopen(file, "w");
    if (fp) fclose(fp);

    // Paths that cannot hold a store; nothing is left on the good path beside them.
    const char *bad[][2] = {{dirs[0], missing}, {"/proc", NULL}, {file, NULL}, {dirs[0], dirs[0]}};
    const char *named[] = {missing, "/proc", file, dirs[0]};
    for (int i = 0; i < 4; i++) {
        zinf_swap_config c = {.paths = bad[i], .npaths = bad[i][1] ? 2 : 1, .run = "e", .aio = aio};
        zinf_status st = zinf_swap_open(&s, &c);
        CHECK((st == ZINF_ERR_INVAL || st == ZINF_ERR_IO) && s == NULL, "open on %s gives %d", named[i], st);
        CHECK_CONTAINS(zinf_last_error(), named[i]);
        CHECK_CONTAINS(zinf_last_error(), "nvme_path");
    }
    CHECK_CONTAINS(zinf_last_error(), "same directory");
    char leftover[300];
    snprintf(leftover, sizeof leftover, "%s/zinf-e", dirs[0]);
    CHECK(!exists(leftover), "a failed open left %s behind", leftover);
    unlink(file);

    // A missing nvme_path in an existing directory is made, and left empty at close.
    char made[256];
    snprintf(made, sizeof made, "%s/made", dirs[0]);
    const char *fresh[] = {made};
    zinf_swap_config mc = {.paths = fresh, .npaths = 1, .run = "m", .aio = aio};
    CHECK(zinf_swap_open(&s, &mc) == ZINF_OK, "open on a missing %s: %s", made, zinf_last_error());
    zinf_swap_close(s);
    s = NULL;
    CHECK(rmdir(made) == 0, "%s was not made, or not left empty: %s", made, strerror(errno));

    const char *one[] = {dirs[0]};
    zinf_swap_config c = {.paths = one, .npaths = 1, .run = "a/b", .aio = aio};
    CHECK(zinf_swap_open(&s, &c) == ZINF_ERR_INVAL, "run name with '/' accepted");
    CHECK_CONTAINS(zinf_last_error(), "run name");
    c.run = "e";
    c.rank = -1;
    CHECK(zinf_swap_open(&s, &c) == ZINF_ERR_INVAL, "rank -1 accepted");
    c.rank = 0;
    c.npaths = 0;
    CHECK(zinf_swap_open(&s, &c) == ZINF_ERR_INVAL, "no paths accepted");
    c.npaths = 1;
    c.aio = NULL;
    CHECK(zinf_swap_open(&s, &c) == ZINF_ERR_INVAL, "no aio engine accepted");
    c.aio = aio;

    CHECK(zinf_swap_open(&s, &c) == ZINF_OK, "open: %s", zinf_last_error());
    if (!s) return;
    int id = -1, id2 = -1;
    CHECK(zinf_swap_add(s, "master", 1 << 20, &id) == ZINF_OK, "add: %s", zinf_last_error());
    CHECK(zinf_swap_add(s, "master", 4096, &id2) == ZINF_ERR_INVAL && id2 == -1, "a second \"master\" accepted");
    CHECK(zinf_swap_add(s, "x/y", 4096, &id2) == ZINF_ERR_INVAL, "a name with '/' accepted");
    CHECK(zinf_swap_add(s, "..", 4096, &id2) == ZINF_ERR_INVAL, "\"..\" accepted");
    CHECK(zinf_swap_add(s, "empty", 0, &id2) == ZINF_ERR_INVAL, "0 bytes accepted");

    // 1 PiB cannot fit: said before anything is allocated, with the numbers and what
    // to do; the store goes on working.
    zinf_status st = zinf_swap_add(s, "huge", 1ull << 50, &id2);
    CHECK(st == ZINF_ERR_NOSPC && id2 == -1, "1 PiB gives %d", st);
    CHECK_CONTAINS(zinf_last_error(), dirs[0]);
    CHECK_CONTAINS(zinf_last_error(), "needs 1 PiB");
    CHECK_CONTAINS(zinf_last_error(), "free");
    CHECK_CONTAINS(zinf_last_error(), "nvme_path");
    CHECK_CONTAINS(zinf_last_error(), "cpu");
    snprintf(leftover, sizeof leftover, "%s/zinf-e/rank0/huge", dirs[0]);
    CHECK(!exists(leftover), "a failed add left %s behind", leftover);

    // A file already on disk is never shared.
    char stale[300];
    snprintf(stale, sizeof stale, "%s/zinf-e/rank0/stale", dirs[0]);
    fp = fopen(stale, "w");
    if (fp) fclose(fp);
    CHECK(zinf_swap_add(s, "stale", 4096, &id2) == ZINF_ERR_INVAL, "a stale file was taken over");
    CHECK_CONTAINS(zinf_last_error(), "already exists");
    unlink(stale);
    CHECK(zinf_swap_add(s, "params", 8192, &id2) == ZINF_OK && id2 == 1, "add after failures: %s", zinf_last_error());

    uint32_t a = zinf_swap_alignment(s);
    unsigned char *buf = aligned(2 << 20);
    memset(buf, 1, 2 << 20);
    zinf_aio_ticket t = 1;
    // Out of range, async and sync; the message names the file, offset and length.
    CHECK(zinf_swap_read(s, id, 1 << 20, buf, a, &t) == ZINF_ERR_INVAL && t == 0, "async read past the end");
    CHECK_CONTAINS(zinf_last_error(), "master");
    CHECK_CONTAINS(zinf_last_error(), "offset 1048576 length 4096");
    CHECK(zinf_swap_write(s, id, 0, buf, 2 << 20, &t) == ZINF_ERR_INVAL, "async write past the end");
    CHECK(zinf_swap_pread(s, id, (1 << 20) - 10, buf, 11) == ZINF_ERR_INVAL, "pread one byte past the end");
    CHECK_CONTAINS(zinf_last_error(), "offset 1048566 length 11");
    CHECK(zinf_swap_pwrite(s, id, UINT64_MAX - 3, buf, 8) == ZINF_ERR_INVAL, "pwrite at a wrapping offset");
    CHECK(zinf_swap_pread(s, id2, 8192, buf, 1) == ZINF_ERR_INVAL, "pread past a small file");
    CHECK_CONTAINS(zinf_last_error(), "params");
    // Unaligned async IO: offset, length, buffer.
    CHECK(zinf_swap_write(s, id, 100, buf, a, &t) == ZINF_ERR_INVAL && t == 0, "unaligned offset");
    CHECK_CONTAINS(zinf_last_error(), "offset 100");
    CHECK_CONTAINS(zinf_last_error(), "alignment");
    CHECK(zinf_swap_read(s, id, 0, buf, 100, &t) == ZINF_ERR_INVAL, "unaligned length");
    CHECK_CONTAINS(zinf_last_error(), "length 100");
    CHECK(zinf_swap_read(s, id, 0, buf + 8, a, &t) == ZINF_ERR_INVAL, "unaligned buffer");
    CHECK_CONTAINS(zinf_last_error(), "buffer");
    CHECK(zinf_swap_read(s, id, 0, NULL, a, &t) == ZINF_ERR_INVAL, "no buffer");
    // Unknown files and tickets.
    CHECK(zinf_swap_read(s, 7, 0, buf, a, &t) == ZINF_ERR_INVAL, "unknown id 7");
    CHECK_CONTAINS(zinf_last_error(), "id 7");
    CHECK(zinf_swap_pwrite(s, -1, 0, buf, 1) == ZINF_ERR_INVAL, "unknown id -1");
    CHECK(zinf_swap_wait(s, 12345) == ZINF_ERR_INVAL, "an unknown ticket was waited for");
    // After all that, IO still works.
    CHECK(zinf_swap_write(s, id, a, buf, a, &t) == ZINF_OK && zinf_swap_wait(s, t) == ZINF_OK, "write: %s",
          zinf_last_error());
    unsigned char b[3] = {0};
    CHECK(zinf_swap_pread(s, id, a + a - 2, b, 3) == ZINF_OK && b[0] == 1 && b[1] == 1 && b[2] == 0,
          "pread across the written block's end: %u %u %u", b[0], b[1], b[2]);
    zinf_swap_close(s);
    snprintf(leftover, sizeof leftover, "%s/zinf-e", dirs[0]);
    CHECK(!exists(leftover), "close left %s behind", leftover);
    zinf_swap_close(NULL);
    free(buf);
}

// One byte of a stripe file changed through the file system, not the store.
static void flip_on_disk(const char *path, uint64_t off) {
    int fd = open(path, O_RDWR);
    unsigned char b = 0;
    CHECK(fd >= 0 && pread(fd, &b, 1, (off_t)off) == 1, "open %s: %s", path, strerror(errno));
    b ^= 0x40;
    CHECK(fd >= 0 && pwrite(fd, &b, 1, (off_t)off) == 1 && fsync(fd) == 0, "write %s: %s", path, strerror(errno));
    if (fd >= 0) close(fd);
}

// A store striped over both directories in BLOCK units, a file written whole; a byte
// flipped on the drive at logical block 3 (the second directory's file, its second
// stripe unit) is caught by every read that covers it and by no other.
static void corruption(zinf_aio *aio, char **dirs, bool checksums) {
    const char *what = checksums ? "checksums" : "without checksums";
    zinf_swap_config c = {
        .paths = (const char *const *)dirs, .npaths = 2, .run = "c", .aio = aio, .without_checksums = !checksums};
    zinf_swap *s = NULL;
    int id = -1;
    CHECK(zinf_swap_open(&s, &c) == ZINF_OK && zinf_swap_add(s, "exp_avg", 8 * BLOCK, &id) == ZINF_OK, "%s: %s", what,
          zinf_last_error());
    if (!s || id < 0) return;
    size_t size = 8 * BLOCK;
    unsigned char *src = aligned(size), *got = aligned(size);
    fill(src, size);
    zinf_aio_ticket t;
    CHECK(zinf_swap_write(s, id, 0, src, 6 * BLOCK, &t) == ZINF_OK && zinf_swap_wait(s, t) == ZINF_OK, "%s: write: %s",
          what, zinf_last_error());
    char path[300];
    snprintf(path, sizeof path, "%s/zinf-c/rank0/exp_avg", dirs[1]);
    flip_on_disk(path, BLOCK + 777); // logical 3 * BLOCK + 777
    zinf_status st = zinf_swap_read(s, id, 0, got, size, &t);
    if (st == ZINF_OK) st = zinf_swap_wait(s, t);
    if (checksums) {
        CHECK(st == ZINF_ERR_CORRUPT, "%s: the whole file read back gives %d", what, st);
        CHECK_CONTAINS(zinf_last_error(), path);
        CHECK_CONTAINS(zinf_last_error(), "read");
        CHECK_CONTAINS(zinf_last_error(), "at offset 65536");
        CHECK_CONTAINS(zinf_last_error(), "checksum");
        CHECK(zinf_swap_pread(s, id, 3 * BLOCK + 700, got, 100) == ZINF_ERR_CORRUPT, "%s: pread over the byte", what);
        CHECK_CONTAINS(zinf_last_error(), "checksum");
    } else {
        CHECK(st == ZINF_OK && got[3 * BLOCK + 777] == (src[3 * BLOCK + 777] ^ 0x40), "%s: %d, the flip unseen", what,
              st);
    }
    // The blocks around it read back whole; never-written ones (the drive's zeros) too.
    CHECK(zinf_swap_read(s, id, 0, got, 3 * BLOCK, &t) == ZINF_OK && zinf_swap_wait(s, t) == ZINF_OK &&
              memcmp(got, src, 3 * BLOCK) == 0,
          "%s: the blocks before it: %s", what, zinf_last_error());
    CHECK(zinf_swap_read(s, id, 4 * BLOCK, got, 4 * BLOCK, &t) == ZINF_OK && zinf_swap_wait(s, t) == ZINF_OK &&
              memcmp(got, src + 4 * BLOCK, 2 * BLOCK) == 0 && got[7 * BLOCK] == 0,
          "%s: the blocks after it: %s", what, zinf_last_error());
    // Written again through the store, it is the store's again.
    CHECK(zinf_swap_pwrite(s, id, 3 * BLOCK, src + 3 * BLOCK, BLOCK) == ZINF_OK &&
              zinf_swap_pread(s, id, 3 * BLOCK, got, BLOCK) == ZINF_OK && memcmp(got, src + 3 * BLOCK, BLOCK) == 0,
          "%s: rewritten: %s", what, zinf_last_error());
    zinf_swap_close(s);
    free(src), free(got);
}

// Each fault once, on a 4-block file in 1-block requests: what the store returns and
// what the bytes are afterwards.
static void faults(zinf_aio *aio, const char *dir, const char *kind) {
    const char *paths[] = {dir};
    zinf_swap_config c = {.paths = paths, .npaths = 1, .run = "f", .aio = aio};
    zinf_swap *s = NULL;
    int id = -1;
    CHECK(zinf_swap_open(&s, &c) == ZINF_OK && zinf_swap_add(s, "params", 4 * BLOCK, &id) == ZINF_OK, "%s: %s", kind,
          zinf_last_error());
    if (!s || id < 0) return;
    unsigned char *src = aligned(4 * BLOCK), *got = aligned(4 * BLOCK);
    fill(src, 4 * BLOCK);
    char path[300];
    snprintf(path, sizeof path, "%s/zinf-f/rank0/params", dir);
    const struct {
        const char *spec;
        bool write;
        zinf_status want;
        const char *says;
    } cases[] = {
        {"write:2:eio", true, ZINF_ERR_IO, "write"},
        {"write:3:enospc", true, ZINF_ERR_NOSPC, "No space left"},
        {"read:2:eio", false, ZINF_ERR_IO, "Input/output error"},
        {"read:4:corrupt", false, ZINF_ERR_CORRUPT, "checksum"},
        {"write:1:eintr", true, ZINF_OK, NULL},
        {"write:2:eagain", true, ZINF_OK, NULL},
        {"write:3:short", true, ZINF_OK, NULL},
        {"read:1:eintr", false, ZINF_OK, NULL},
        {"read:3:eagain", false, ZINF_OK, NULL},
        {"read:2:short", false, ZINF_OK, NULL},
    };
    for (size_t i = 0; i < ZINF_ARRAY_LEN(cases); i++) {
        // The bytes in place first (no fault), then the request the fault is for.
        zinf_fault_set(NULL);
        zinf_aio_ticket t;
        CHECK(zinf_swap_write(s, id, 0, src, 4 * BLOCK, &t) == ZINF_OK && zinf_swap_wait(s, t) == ZINF_OK, "%s: %s",
              kind, zinf_last_error());
        zinf_aio_stats before, after;
        zinf_aio_get_stats(aio, &before);
        CHECK(zinf_fault_set(cases[i].spec) == ZINF_OK, "%s", zinf_last_error());
        memset(got, 0x5c, 4 * BLOCK);
        zinf_status st = cases[i].write ? zinf_swap_write(s, id, 0, src, 4 * BLOCK, &t)
                                        : zinf_swap_read(s, id, 0, got, 4 * BLOCK, &t);
        if (st == ZINF_OK) st = zinf_swap_wait(s, t);
        zinf_aio_get_stats(aio, &after);
        zinf_fault_set(NULL);
        CHECK(st == cases[i].want, "%s: %s gives %d, want %d: %s", kind, cases[i].spec, st, cases[i].want,
              zinf_last_error());
        if (cases[i].says) {
            CHECK_CONTAINS(zinf_last_error(), path);
            CHECK_CONTAINS(zinf_last_error(), cases[i].says);
            CHECK_CONTAINS(zinf_last_error(), "at offset");
            continue;
        }
        CHECK(after.resubmitted > before.resubmitted, "%s: %s was not resubmitted", kind, cases[i].spec);
        if (!cases[i].write) {
            CHECK(memcmp(got, src, 4 * BLOCK) == 0, "%s: %s: other bytes read", kind, cases[i].spec);
        } else {
            CHECK(zinf_swap_pread(s, id, 0, got, 4 * BLOCK) == ZINF_OK && memcmp(got, src, 4 * BLOCK) == 0,
                  "%s: %s: other bytes written: %s", kind, cases[i].spec, zinf_last_error());
        }
    }
    zinf_swap_close(s);
    free(src), free(got);
}

static void count_swap_warnings(zinf_log_level level, int rank, const char *msg, void *user) {
    (void)rank;
    if (level == ZINF_LOG_LEVEL_WARN && strncmp(msg, "swap:", 5) == 0) ++*(int *)user;
}

// ramfs takes no O_DIRECT: striped with a directory that does, the store runs
// buffered, says so once (however many files), and moves the same bytes.
static void buffered(zinf_aio *aio, char *dir) {
    char mnt[256];
    snprintf(mnt, sizeof mnt, "%s/ramfs", dir);
    mkdir(mnt, 0700);
    if (mount("zinf-test", mnt, "ramfs", 0, NULL) != 0) {
        CHECK(geteuid() != 0, "mount ramfs as root: %s", strerror(errno));
        printf("not root: the buffered (no O_DIRECT) case needs a mount and was not run\n");
        rmdir(mnt);
        return;
    }
    const char *paths[] = {mnt, dir};
    zinf_swap_config c = {.paths = paths, .npaths = 2, .run = "b", .aio = aio};
    int warnings = 0;
    zinf_log_set_callback(count_swap_warnings, &warnings);
    zinf_swap *s = NULL;
    CHECK(zinf_swap_open(&s, &c) == ZINF_OK, "open on ramfs: %s", zinf_last_error());
    int ids[3] = {-1, -1, -1};
    const char *names[] = {"master", "exp_avg", "exp_avg_sq"};
    for (int k = 0; s && k < 3; k++)
        CHECK(zinf_swap_add(s, names[k], 300000, &ids[k]) == ZINF_OK, "add %s: %s", names[k], zinf_last_error());
    zinf_log_set_callback(NULL, NULL);
    CHECK(warnings == 1, "%d swap warnings for a path without O_DIRECT, want exactly one", warnings);
    if (s) {
        CHECK(!zinf_swap_direct(s), "a store on ramfs claims O_DIRECT");
        unsigned char src[10000], got[10000];
        fill(src, sizeof src);
        CHECK(zinf_swap_pwrite(s, ids[2], 70001, src, sizeof src) == ZINF_OK, "pwrite: %s", zinf_last_error());
        CHECK(zinf_swap_pread(s, ids[2], 70001, got, sizeof got) == ZINF_OK, "pread: %s", zinf_last_error());
        CHECK(memcmp(src, got, sizeof src) == 0, "buffered round trip");
    }
    zinf_swap_close(s);
    for (int d = 0; d < 2; d++) {
        char run[300];
        snprintf(run, sizeof run, "%s/zinf-b", paths[d]);
        CHECK(!exists(run), "close left %s behind", run);
    }
    CHECK(umount(mnt) == 0, "umount %s: %s", mnt, strerror(errno));
    rmdir(mnt);
}

int main(void) {
    char *dirs[2];
    for (int i = 0; i < 2; i++) {
        dirs[i] = malloc(64);
        snprintf(dirs[i], 64, "/var/tmp/zinf-swap-XXXXXX");
        CHECK(mkdtemp(dirs[i]) != NULL, "mkdtemp");
    }
    zinf_aio *aio = NULL;
    zinf_aio_params p = {.block_size = BLOCK, .queue_depth = 8, .threads = 2};
    CHECK(zinf_aio_create(&aio, &p) == 0, "aio: %s", zinf_last_error());
    if (aio) {
        store(aio, dirs, 1);
        store(aio, dirs, 2);
        errors(aio, dirs);
        buffered(aio, dirs[0]);
        corruption(aio, dirs, true);
        corruption(aio, dirs, false);
        faults(aio, dirs[0], "io_uring");
        zinf_aio_destroy(aio);
    }
    zinf_aio_params threads = {.block_size = BLOCK, .threads = 2, .use_threads = true};
    CHECK(zinf_aio_create(&aio, &threads) == 0, "aio on threads: %s", zinf_last_error());
    if (aio) {
        faults(aio, dirs[0], "pread/pwrite threads");
        zinf_aio_destroy(aio);
    }
    for (int i = 0; i < 2; i++) {
        CHECK(rmdir(dirs[i]) == 0, "%s is not empty at the end: %s", dirs[i], strerror(errno));
        free(dirs[i]);
    }
    return check_exit("test_swap");
}
