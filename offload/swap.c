// The swap store: one rank's NVMe-tier files under <nvme_path>/zinf-<run>/rank<R>/,
// preallocated and striped by the aio engine (aio/file.c), with aligned async IO for
// the pipelines and a bounce-buffered synchronous path for single tensors. The layout
// follows DeepSpeed's swap folders (runtime/swap_tensor), one file per state. Every
// 4 KiB block written has its CRC-32C kept in memory and checked when it is read back:
// the drive holds the only copy of the states between steps, and a wrong block must
// stop the run rather than train on. The table is this process's: a run that stops
// resumes from a checkpoint, never from the swap files.
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "zinf_internal.h"
#include "zinf_offload.h"

// Bounds: paths (drives) per store, files per store, name lengths, the bounce buffer
// the synchronous calls move data through; the checksummed block, and how many
// checksums a read's check computes at a time (on the stack; a multiple of the three
// blocks zinf_crc32c_blocks takes side by side).
enum {
    MAX_PATHS = 64,
    MAX_FILES = 256,
    MAX_NAME = 64,
    MAX_RUN = 128,
    BOUNCE_BYTES = 4 << 20,
    SUM_BLOCK = 4096,
    SUM_BATCH = 255,
};
// The largest O_DIRECT alignment the store takes (logical blocks are 512 B to 64 KiB).
#define MAX_ALIGN (1u << 20)

// The checksum of each SUM_BLOCK of a file as last written, in an allocation of its own
// that the aio engine's workers hold on to (the files' array moves as it grows).
typedef struct block_sums {
    uint8_t *written; // (n) 1 where a block was written: it has a sum
    uint32_t crc[];   // (n) CRC-32C
} block_sums;

typedef struct swap_file {
    char name[MAX_NAME + 1];
    zinf_aio_file *f;
    uint64_t size;      // logical bytes, a multiple of the alignment
    uint64_t allocated; // bytes preallocated over all paths (stripe rounding included)
    block_sums *sums;   // NULL without checksums
} swap_file;

struct zinf_swap {
    zinf_aio *aio; // borrowed
    int npaths;
    char **run_dirs;  // <path>/zinf-<run>
    char **rank_dirs; // <path>/zinf-<run>/rank<R>: the directories each file stripes over
    dev_t *devs;      // file system of each path, for the space check
    uint32_t align;
    bool direct;
    swap_file *files;
    int nfiles;
    pthread_mutex_t bounce_lock; // the synchronous calls share the bounce buffer
    unsigned char *h_bounce;     // BOUNCE_BYTES, aligned; made on first synchronous call
    bool checksums;              // keep and check the blocks' sums (aio.checksum)
};

// ---- helpers ----

// A plain, bounded name for a file or directory: no '/', no control characters, not
// "." or "..".
static bool plain_name(const char *s, size_t max) {
    size_t n = s ? strnlen(s, max + 1) : 0;
    if (n == 0 || n > max || strcmp(s, ".") == 0 || strcmp(s, "..") == 0) return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] == '/' || (unsigned char)s[i] < 0x20) return false;
    return true;
}

// An aio -errno as a status; the aio layer already wrote the detail.
static zinf_status from_aio(int ret) {
    zinf_status st = zinf_status_from_errno(-ret);
    return st == ZINF_OK ? ZINF_ERR_IO : st;
}

static const swap_file *file_of(const zinf_swap *s, int id) {
    if (!s || id < 0 || id >= s->nfiles) {
        zinf_fail(ZINF_ERR_INVAL, "swap: file id %d is unknown (%d file(s) in the store)", id, s ? s->nfiles : 0);
        return NULL;
    }
    return &s->files[id];
}

static zinf_status check_range(const zinf_swap *s, const swap_file *sf, const char *op, uint64_t off, size_t len) {
    if (off > sf->size || len > sf->size - off)
        return zinf_fail(ZINF_ERR_INVAL,
                         "swap %s %s/%s: offset %llu length %zu is beyond the end of the file (%llu bytes)", op,
                         s->rank_dirs[0], sf->name, (unsigned long long)off, len, (unsigned long long)sf->size);
    return ZINF_OK;
}

static zinf_status check_aligned(const zinf_swap *s, const swap_file *sf, const char *op, uint64_t off, const void *buf,
                                 size_t len) {
    uint32_t a = s->align;
    if (off % a || len % a || (uintptr_t)buf % a)
        return zinf_fail(ZINF_ERR_INVAL,
                         "swap %s %s/%s: offset %llu length %zu buffer %p: async IO needs all three to be "
                         "multiples of the alignment %u (use zinf_swap_pread/pwrite for unaligned ranges)",
                         op, s->rank_dirs[0], sf->name, (unsigned long long)off, len, buf, a);
    return ZINF_OK;
}

static void free_store(zinf_swap *s) {
    for (int i = 0; i < s->npaths; i++) {
        if (s->rank_dirs) free(s->rank_dirs[i]);
        if (s->run_dirs) free(s->run_dirs[i]);
    }
    free(s->rank_dirs);
    free(s->run_dirs);
    free(s->devs);
    for (int i = 0; i < s->nfiles; i++)
        free(s->files[i].sums);
    free(s->files);
    free(s->h_bounce);
    pthread_mutex_destroy(&s->bounce_lock);
    free(s);
}

// Remove the rank directory and, once no other rank uses it, zinf-<run> (rmdir only
// takes empty directories, so a neighbour's files stay).
static void remove_dirs(zinf_swap *s, int n) {
    for (int i = 0; i < n; i++) {
        rmdir(s->rank_dirs[i]);
        rmdir(s->run_dirs[i]);
    }
}

// ---- open ----

// Probe one nvme_path: it must be a writable directory (made here when missing).
// Records its alignment, file system and whether it takes O_DIRECT.
static zinf_status probe_path(const char *path, zinf_aio_path_info *info) {
    if (!path || !path[0]) return zinf_fail(ZINF_ERR_INVAL, "swap: nvme_path: an empty path");
    if (strnlen(path, PATH_MAX) >= PATH_MAX - MAX_RUN - MAX_NAME - 32)
        return zinf_fail(ZINF_ERR_INVAL, "swap: nvme_path \"%.64s...\" is too long", path);
    // Missing or not a directory is a config error; anything the probe then refuses
    // (EACCES, EROFS, /proc's ENOENT for new files) means the directory is not writable.
    struct stat sb;
    if (stat(path, &sb) != 0 && errno == ENOENT && mkdir(path, 0755) == 0)
        ZINF_LOG_INFO("swap: made the nvme_path directory \"%s\"", path);
    if (stat(path, &sb) != 0)
        return zinf_fail(ZINF_ERR_INVAL, "swap: nvme_path \"%s\": %s; it must be a directory, or one that can be made",
                         path, strerror(errno));
    if (!S_ISDIR(sb.st_mode)) return zinf_fail(ZINF_ERR_INVAL, "swap: nvme_path \"%s\" is not a directory", path);
    int ret = zinf_aio_path_probe(path, info);
    if (ret) return zinf_fail(ZINF_ERR_IO, "swap: nvme_path \"%s\" is not writable: %s", path, strerror(-ret));
    if (info->dio_align < 4096 || info->dio_align > MAX_ALIGN || (info->dio_align & (info->dio_align - 1)))
        return zinf_fail(ZINF_ERR_UNSUPPORTED,
                         "swap: nvme_path \"%s\": O_DIRECT alignment %u is not a power of two "
                         "from 4 KiB to 1 MiB",
                         path, info->dio_align);
    return ZINF_OK;
}

static zinf_status make_dir(const char *path) {
    if (mkdir(path, 0700) == 0 || errno == EEXIST) {
        struct stat st;
        if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) return ZINF_OK;
        return zinf_fail(ZINF_ERR_IO, "swap: cannot make %s: a file of that name is in the way (nvme_path)", path);
    }
    return zinf_fail_errno(errno, "swap: cannot make %s (nvme_path)", path);
}

zinf_status zinf_swap_open(zinf_swap **out, const zinf_swap_config *cfg) {
    if (!out) return zinf_fail(ZINF_ERR_INVAL, "swap: no place for the store");
    *out = NULL;
    if (!cfg || !cfg->aio) return zinf_fail(ZINF_ERR_INVAL, "swap: no config or no aio engine");
    if (cfg->npaths < 1 || cfg->npaths > MAX_PATHS || !cfg->paths)
        return zinf_fail(ZINF_ERR_INVAL, "swap: nvme_path: %d directories given, want 1 to %d", cfg->npaths, MAX_PATHS);
    if (!plain_name(cfg->run, MAX_RUN))
        return zinf_fail(ZINF_ERR_INVAL, "swap: run name \"%.*s\" must be 1 to %d characters without '/'", MAX_RUN,
                         cfg->run ? cfg->run : "", MAX_RUN);
    if (cfg->rank < 0) return zinf_fail(ZINF_ERR_INVAL, "swap: rank %d is negative", cfg->rank);

    int n = cfg->npaths;
    zinf_swap *s = calloc(1, sizeof *s);
    if (!s) return zinf_fail(ZINF_ERR_NOMEM, "swap: out of memory");
    pthread_mutex_init(&s->bounce_lock, NULL);
    s->aio = cfg->aio;
    s->checksums = !cfg->without_checksums;
    s->npaths = n;
    s->run_dirs = calloc((size_t)n, sizeof *s->run_dirs);
    s->rank_dirs = calloc((size_t)n, sizeof *s->rank_dirs);
    s->devs = calloc((size_t)n, sizeof *s->devs);
    if (!s->run_dirs || !s->rank_dirs || !s->devs) {
        free_store(s);
        return zinf_fail(ZINF_ERR_NOMEM, "swap: out of memory");
    }

    // Every path first, so a bad one fails before anything is made on the others.
    zinf_status st = ZINF_OK;
    ino_t *inos = calloc((size_t)n, sizeof *inos);
    char refused[512] = ""; // paths that run buffered, for the one warning
    size_t used = 0;
    s->align = 4096;
    s->direct = true;
    if (!inos) st = zinf_fail(ZINF_ERR_NOMEM, "swap: out of memory");
    for (int i = 0; st == ZINF_OK && i < n; i++) {
        const char *p = cfg->paths[i];
        zinf_aio_path_info info;
        if ((st = probe_path(p, &info)) != ZINF_OK) break;
        struct stat sb;
        if (stat(p, &sb) != 0) {
            st = zinf_fail_errno(errno, "swap: nvme_path \"%s\"", p);
            break;
        }
        s->devs[i] = sb.st_dev;
        inos[i] = sb.st_ino;
        // The same directory twice would put two stripes of a file in one file.
        for (int j = 0; j < i; j++)
            if (s->devs[j] == sb.st_dev && inos[j] == sb.st_ino)
                st = zinf_fail(ZINF_ERR_INVAL, "swap: nvme_path \"%s\" and \"%s\" are the same directory",
                               cfg->paths[j], p);
        if (info.dio_align > s->align) s->align = info.dio_align;
        if (!info.direct) {
            s->direct = false;
            if (used < sizeof refused) {
                int w = snprintf(refused + used, sizeof refused - used, "%s%s (%s: %s)", used ? ", " : "", p,
                                 info.fs_type, strerror(info.direct_errno));
                used += w > 0 ? (size_t)w : 0;
            }
        }
        char buf[PATH_MAX];
        snprintf(buf, sizeof buf, "%s/zinf-%s", p, cfg->run);
        s->run_dirs[i] = strdup(buf);
        snprintf(buf, sizeof buf, "%s/zinf-%s/rank%d", p, cfg->run, cfg->rank);
        s->rank_dirs[i] = strdup(buf);
        if (!s->run_dirs[i] || !s->rank_dirs[i]) st = zinf_fail(ZINF_ERR_NOMEM, "swap: out of memory");
    }
    free(inos);
    int made = 0;
    for (; st == ZINF_OK && made < n; made++) {
        st = make_dir(s->run_dirs[made]);
        if (st == ZINF_OK && (st = make_dir(s->rank_dirs[made])) != ZINF_OK) rmdir(s->run_dirs[made]);
    }
    if (st != ZINF_OK) {
        remove_dirs(s, made > 0 ? made - 1 : 0); // the failed one cleaned up after itself
        free_store(s);
        return st;
    }
    if (!s->direct)
        ZINF_LOG_WARN("swap: nvme_path %s%s refuses O_DIRECT: swap files there run buffered through the page cache "
                      "(slower, and they compete with pinned memory)",
                      refused, used >= sizeof refused ? "..." : "");
    ZINF_LOG_DEBUG("swap: rank %d stores under %s%s, alignment %u, %s, %s", cfg->rank, s->rank_dirs[0],
                   n > 1 ? " and more (striped)" : "", s->align, s->direct ? "O_DIRECT" : "buffered",
                   !s->checksums            ? "no checksums"
                   : zinf_crc32c_hardware() ? "CRC-32C on the CPU's instruction"
                                            : "CRC-32C from a table (no SSE4.2)");
    *out = s;
    return ZINF_OK;
}

// ---- checksums ----

// The aio engine's check (zinf_aio_file_config.check), on its worker threads once a
// request completes: a write's blocks get their sums; a read's blocks are held to
// theirs (blocks never written have none: the drive's zeros are nobody's data).
static int check_blocks(void *arg, bool write, uint64_t off, const void *buf, size_t len) {
    block_sums *sums = arg;
    size_t first = off / SUM_BLOCK, n = len / SUM_BLOCK;
    if (write) {
        zinf_crc32c_blocks(buf, n, SUM_BLOCK, sums->crc + first);
        memset(sums->written + first, 1, n);
        return 0;
    }
    uint32_t got[SUM_BATCH];
    for (size_t i = 0; i < n; i += SUM_BATCH) {
        size_t k = n - i < SUM_BATCH ? n - i : SUM_BATCH;
        zinf_crc32c_blocks((const unsigned char *)buf + i * SUM_BLOCK, k, SUM_BLOCK, got);
        for (size_t j = 0; j < k; j++)
            if (sums->written[first + i + j] && got[j] != sums->crc[first + i + j]) return -EBADMSG;
    }
    return 0;
}

// ---- files ----

// Fail before preallocating when a file system clearly cannot hold its share: the
// message then names every number needed to act on it. Shares are estimated as an even
// split; the aio layer's own ENOSPC covers the stripe rounding on top.
static zinf_status check_space(const zinf_swap *s, const char *name, uint64_t size) {
    uint64_t share = (size / s->align + (uint64_t)s->npaths - 1) / (uint64_t)s->npaths * s->align;
    for (int i = 0; i < s->npaths; i++) {
        int same = 0; // paths on this file system, counted once at its first path
        bool first = true;
        for (int j = 0; j < s->npaths; j++) {
            if (s->devs[j] != s->devs[i]) continue;
            if (j < i) first = false;
            same++;
        }
        if (!first) continue;
        struct statvfs sv;
        if (statvfs(s->rank_dirs[i], &sv) != 0) return zinf_fail_errno(errno, "swap: statvfs %s", s->rank_dirs[i]);
        // ramfs (and some FUSE file systems) report no blocks at all: no limit known.
        if (sv.f_blocks == 0) continue;
        uint64_t free_bytes = (uint64_t)sv.f_bavail * (sv.f_frsize ? sv.f_frsize : sv.f_bsize);
        uint64_t need = share > UINT64_MAX / (uint64_t)same ? UINT64_MAX : share * (uint64_t)same;
        if (need <= free_bytes) continue;
        char need_s[32], free_s[32];
        return zinf_fail(ZINF_ERR_NOSPC,
                         "swap: %s needs %s in %s%s but only %s is free there: free space on that drive, add "
                         "nvme_path entries on other drives, or move this tier to cpu (device \"cpu\")",
                         name, zinf_size_format(need, need_s, sizeof need_s), s->rank_dirs[i],
                         same > 1 ? " (shared by several nvme_path entries)" : "",
                         zinf_size_format(free_bytes, free_s, sizeof free_s));
    }
    return ZINF_OK;
}

zinf_status zinf_swap_add(zinf_swap *s, const char *name, uint64_t bytes, int *id) {
    if (!s || !id) return zinf_fail(ZINF_ERR_INVAL, "swap add: no store or no id");
    *id = -1;
    if (!plain_name(name, MAX_NAME))
        return zinf_fail(ZINF_ERR_INVAL, "swap add: file name \"%.*s\" must be 1 to %d characters without '/'",
                         MAX_NAME, name ? name : "", MAX_NAME);
    if (bytes == 0 || bytes > UINT64_MAX - s->align)
        return zinf_fail(ZINF_ERR_INVAL, "swap add %s: size %llu bytes is out of range", name,
                         (unsigned long long)bytes);
    if (s->nfiles >= MAX_FILES)
        return zinf_fail(ZINF_ERR_INVAL, "swap add %s: the store holds at most %d files", name, MAX_FILES);
    for (int i = 0; i < s->nfiles; i++)
        if (strcmp(s->files[i].name, name) == 0)
            return zinf_fail(ZINF_ERR_INVAL, "swap add %s: the store already has a file of that name", name);
    // A file already there belongs to someone else (or a crashed run): never share it.
    for (int i = 0; i < s->npaths; i++) {
        char path[PATH_MAX];
        struct stat sb;
        snprintf(path, sizeof path, "%s/%s", s->rank_dirs[i], name);
        if (lstat(path, &sb) == 0)
            return zinf_fail(ZINF_ERR_INVAL,
                             "swap add: %s already exists (another process with this run name and rank, or left "
                             "by a crashed run: remove it)",
                             path);
    }
    uint64_t size = (bytes + s->align - 1) / s->align * s->align;
    ZINF_CHECK(check_space(s, name, size));

    swap_file *grown = realloc(s->files, (size_t)(s->nfiles + 1) * sizeof *grown);
    if (!grown) return zinf_fail(ZINF_ERR_NOMEM, "swap add %s: out of memory", name);
    s->files = grown;
    swap_file *sf = &s->files[s->nfiles];
    *sf = (swap_file){.size = size};
    snprintf(sf->name, sizeof sf->name, "%s", name);
    if (s->checksums) {
        size_t n = size / SUM_BLOCK;
        sf->sums = calloc(1, sizeof *sf->sums + n * (sizeof sf->sums->crc[0] + 1));
        if (!sf->sums)
            return zinf_fail(ZINF_ERR_NOMEM, "swap add %s: out of memory for the checksums of %zu blocks", name, n);
        sf->sums->written = (uint8_t *)(sf->sums->crc + n);
    }

    // Strict where every path took O_DIRECT in the probe: a refusal now is a surprise
    // worth failing on, not a silent fall back to the page cache.
    zinf_aio_file_config fc = {.dirs = (const char *const *)s->rank_dirs,
                               .ndirs = s->npaths,
                               .name = name,
                               .size = size,
                               .strict_direct = s->direct,
                               .check = sf->sums ? check_blocks : NULL,
                               .check_arg = sf->sums};
    int ret = zinf_aio_file_open(s->aio, &sf->f, &fc);
    if (ret) {
        free(sf->sums);
        char detail[768];
        snprintf(detail, sizeof detail, "%s", zinf_last_error());
        if (ret == -ENOSPC || ret == -EDQUOT || ret == -EFBIG)
            return zinf_fail(ZINF_ERR_NOSPC,
                             "swap add %s: %s; free space on that drive, add nvme_path entries on other drives, or "
                             "move this tier to cpu (device \"cpu\")",
                             name, detail);
        return zinf_fail(from_aio(ret), "swap add %s: %s", name, detail);
    }
    uint32_t fa = zinf_aio_file_alignment(sf->f);
    if (s->align % fa) {
        zinf_aio_file_close(sf->f);
        free(sf->sums);
        return zinf_fail(ZINF_ERR_UNSUPPORTED, "swap add %s: the file needs alignment %u, the paths promised %u", name,
                         fa, s->align);
    }
    for (int i = 0; i < s->npaths; i++) {
        char path[PATH_MAX];
        struct stat sb;
        snprintf(path, sizeof path, "%s/%s", s->rank_dirs[i], name);
        if (stat(path, &sb) == 0) sf->allocated += (uint64_t)sb.st_size;
    }
    if (!zinf_aio_file_direct(sf->f)) s->direct = false;
    *id = s->nfiles++;
    return ZINF_OK;
}

uint32_t zinf_swap_alignment(const zinf_swap *s) { return s ? s->align : 0; }

uint64_t zinf_swap_bytes(const zinf_swap *s) {
    uint64_t total = 0;
    for (int i = 0; s && i < s->nfiles; i++)
        total += s->files[i].allocated;
    return total;
}

bool zinf_swap_direct(const zinf_swap *s) { return s && s->direct; }

// ---- async IO ----

static zinf_status start(zinf_swap *s, int id, uint64_t off, void *buf, size_t len, zinf_aio_ticket *t, bool write) {
    const char *op = write ? "write" : "read";
    if (t) *t = 0;
    const swap_file *sf = file_of(s, id);
    if (!sf) return ZINF_ERR_INVAL;
    if (!t || (!buf && len)) return zinf_fail(ZINF_ERR_INVAL, "swap %s %s: no ticket or no buffer", op, sf->name);
    ZINF_CHECK(check_range(s, sf, op, off, len));
    ZINF_CHECK(check_aligned(s, sf, op, off, buf, len));
    int ret = write ? zinf_aio_write(s->aio, sf->f, off, buf, len, t) : zinf_aio_read(s->aio, sf->f, off, buf, len, t);
    return ret ? from_aio(ret) : ZINF_OK;
}

zinf_status zinf_swap_read(zinf_swap *s, int id, uint64_t off, void *buf, size_t len, zinf_aio_ticket *t) {
    return start(s, id, off, buf, len, t, false);
}

zinf_status zinf_swap_write(zinf_swap *s, int id, uint64_t off, const void *buf, size_t len, zinf_aio_ticket *t) {
    // The buffer is only read; start() serves both directions.
    return start(s, id, off, (void *)(uintptr_t)buf, len, t, true);
}

zinf_status zinf_swap_wait(zinf_swap *s, zinf_aio_ticket t) {
    if (!s) return zinf_fail(ZINF_ERR_INVAL, "swap wait: no store");
    int ret = zinf_aio_wait(s->aio, t);
    return ret ? from_aio(ret) : ZINF_OK;
}

// ---- synchronous IO through the bounce buffer ----

// Read [off, off+len) of an aligned range into the bounce buffer at h.
static zinf_status bounce_read(zinf_swap *s, const swap_file *sf, uint64_t off, unsigned char *h, size_t len) {
    zinf_aio_ticket t;
    int ret = zinf_aio_read(s->aio, sf->f, off, h, len, &t);
    if (!ret) ret = zinf_aio_wait(s->aio, t);
    return ret ? from_aio(ret) : ZINF_OK;
}

// Windows of at most BOUNCE_BYTES, aligned outward; only a window's partial first and
// last blocks are read before a write (whole blocks in between are overwritten).
static zinf_status sync_io(zinf_swap *s, int id, uint64_t off, unsigned char *mem, size_t len, bool write) {
    const char *op = write ? "pwrite" : "pread";
    const swap_file *sf = file_of(s, id);
    if (!sf) return ZINF_ERR_INVAL;
    if (!mem && len) return zinf_fail(ZINF_ERR_INVAL, "swap %s %s: no buffer", op, sf->name);
    ZINF_CHECK(check_range(s, sf, op, off, len));
    if (!len) return ZINF_OK;
    const uint64_t a = s->align, end = off + len;
    zinf_status st = ZINF_OK;
    pthread_mutex_lock(&s->bounce_lock);
    if (!s->h_bounce && posix_memalign((void **)&s->h_bounce, a, BOUNCE_BYTES) != 0) {
        s->h_bounce = NULL;
        st = zinf_fail(ZINF_ERR_NOMEM, "swap %s %s: out of memory for the %d MiB bounce buffer", op, sf->name,
                       BOUNCE_BYTES >> 20);
    }
    unsigned char *h = s->h_bounce;
    for (uint64_t pos = off; st == ZINF_OK && pos < end;) {
        // The file size is a multiple of a, so the rounded-up end stays inside it.
        uint64_t a0 = pos / a * a, a1 = (end + a - 1) / a * a;
        if (a1 - a0 > BOUNCE_BYTES) a1 = a0 + BOUNCE_BYTES;
        uint64_t hi = end < a1 ? end : a1;
        if (!write) {
            st = bounce_read(s, sf, a0, h, a1 - a0);
            if (st == ZINF_OK) memcpy(mem + (pos - off), h + (pos - a0), hi - pos);
        } else {
            if (pos > a0) st = bounce_read(s, sf, a0, h, a);
            if (st == ZINF_OK && hi < a1 && (a1 - a > a0 || pos == a0))
                st = bounce_read(s, sf, a1 - a, h + (a1 - a - a0), a);
            if (st == ZINF_OK) {
                memcpy(h + (pos - a0), mem + (pos - off), hi - pos);
                zinf_aio_ticket t;
                int ret = zinf_aio_write(s->aio, sf->f, a0, h, a1 - a0, &t);
                if (!ret) ret = zinf_aio_wait(s->aio, t);
                if (ret) st = from_aio(ret);
            }
        }
        pos = hi;
    }
    pthread_mutex_unlock(&s->bounce_lock);
    return st;
}

zinf_status zinf_swap_pread(zinf_swap *s, int id, uint64_t off, void *dst, size_t len) {
    return sync_io(s, id, off, dst, len, false);
}

zinf_status zinf_swap_pwrite(zinf_swap *s, int id, uint64_t off, const void *src, size_t len) {
    // src is only read; sync_io serves both directions.
    return sync_io(s, id, off, (unsigned char *)(uintptr_t)src, len, true);
}

// ---- close ----

void zinf_swap_close(zinf_swap *s) {
    if (!s) return;
    for (int i = 0; i < s->nfiles; i++)
        zinf_aio_file_close(s->files[i].f); // removes the files (keep is false)
    remove_dirs(s, s->npaths);
    free_store(s);
}

uint64_t zinf_swap_planned_bytes(uint64_t bytes, int npaths, uint64_t stripe) {
    uint64_t size = (bytes + 4095) / 4096 * 4096; // zinf_swap_add's rounding, at 4 KiB
    return zinf_aio_file_striped_bytes(size, npaths, stripe);
}
