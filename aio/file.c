// Swap files: one per directory, opened once with O_DIRECT (buffered where the file
// system refuses it, unless strict), preallocated to their final size, striped.
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "internal.h"

uint32_t zinf_aio_file_alignment(const zinf_aio_file *f) { return f->align; }
bool zinf_aio_file_direct(const zinf_aio_file *f) { return f->direct; }

void zinf_aio_file_close(zinf_aio_file *f) {
    if (!f) return;
    aio_file_unregister(f); // before the descriptors close
    for (int i = 0; i < f->n; i++) {
        if (f->fds[i] >= 0) close(f->fds[i]);
        if (f->paths[i] && !f->keep) unlink(f->paths[i]);
        free(f->paths[i]);
    }
    free(f->fds);
    free(f->fixed);
    free(f->paths);
    free(f);
}

// Open (creating) one file; a file system without O_DIRECT falls back to buffered IO
// once, with a warning, unless the caller asked for strict direct IO.
static int open_one(zinf_aio_file *f, int i, const char *dir, const zinf_aio_file_config *cfg) {
    struct stat st;
    if (stat(dir, &st) != 0) return -errno;
    if (!S_ISDIR(st.st_mode)) return -ENOTDIR;
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/%s", dir, cfg->name) >= (int)sizeof path) return -ENAMETOOLONG;
    if (!(f->paths[i] = strdup(path))) return -ENOMEM;
    int flags = O_RDWR | O_CREAT | O_CLOEXEC;
    int fd = open(path, flags | (f->direct ? O_DIRECT : 0), 0600);
    if (fd < 0 && errno == EINVAL && f->direct) {
        if (cfg->strict_direct) return -EINVAL;
        ZINF_LOG_WARN("aio: %s does not take O_DIRECT; %s runs buffered through the page cache", dir, cfg->name);
        f->direct = false;
        fd = open(path, flags, 0600);
    }
    if (fd < 0) return -errno;
    f->fds[i] = fd;
    if (fstat(fd, &st) != 0) return -errno;
    uint32_t lb = aio_logical_block(fd, st.st_dev);
    if (lb > f->align) f->align = lb;
    return 0;
}

// Reserve the blocks now, so a full disk fails here with a clear message and not in
// the middle of a training step; file systems without fallocate get a sparse size.
static int preallocate(zinf_aio_file *f, int i, uint64_t bytes) {
    // fallocate(2), not posix_fallocate: glibc would emulate a missing fallocate by
    // writing every block, which on a large swap file takes minutes.
    int ret = fallocate(f->fds[i], 0, 0, (off_t)bytes) ? errno : 0;
    if (ret == EOPNOTSUPP) ret = ftruncate(f->fds[i], (off_t)bytes) ? errno : 0;
    return -ret;
}

uint64_t zinf_aio_file_striped_bytes(uint64_t size, int ndirs, uint64_t stripe) {
    uint64_t n = ndirs > 0 ? (uint64_t)ndirs : 1, units = (size + stripe - 1) / stripe;
    return (units + n - 1) / n * stripe * n;
}

int zinf_aio_file_open(zinf_aio *aio, zinf_aio_file **out, const zinf_aio_file_config *cfg) {
    *out = NULL;
    if (!cfg || cfg->ndirs < 1 || !cfg->dirs || !cfg->name || !cfg->name[0] || strchr(cfg->name, '/') || !cfg->size) {
        zinf_fail(ZINF_ERR_INVAL, "aio: a file needs at least one directory, a plain file name and a size");
        return -EINVAL;
    }
    zinf_aio_file *f = calloc(1, sizeof *f);
    if (f) {
        f->check = cfg->check;
        f->check_arg = cfg->check_arg;
        f->fds = malloc((size_t)cfg->ndirs * sizeof *f->fds);
        f->fixed = malloc((size_t)cfg->ndirs * sizeof *f->fixed);
        f->paths = calloc((size_t)cfg->ndirs, sizeof *f->paths);
    }
    if (!f || !f->fds || !f->fixed || !f->paths) {
        if (f) free(f->fds), free(f->fixed), free(f->paths);
        free(f);
        zinf_fail(ZINF_ERR_NOMEM, "aio: out of memory");
        return -ENOMEM;
    }
    f->n = cfg->ndirs;
    f->aio = aio;
    f->size = cfg->size;
    f->stripe = cfg->stripe_unit ? cfg->stripe_unit : aio->cfg.block_size;
    f->align = 4096;
    f->direct = true;
    f->keep = cfg->keep;
    for (int i = 0; i < f->n; i++)
        f->fds[i] = f->fixed[i] = -1;

    int ret = 0, i = 0;
    for (; !ret && i < f->n; i++)
        ret = open_one(f, i, cfg->dirs[i], cfg);
    if (ret) {
        const char *dir = cfg->dirs[i - 1];
        if (ret == -EINVAL)
            zinf_fail(ZINF_ERR_INVAL, "aio: %s refuses O_DIRECT (strict direct IO was asked for)", dir);
        else
            zinf_fail(zinf_status_from_errno(-ret), "aio: cannot create %s in %s: %s", cfg->name, dir, strerror(-ret));
        goto fail;
    }
    if (f->stripe % f->align) {
        ret = -EINVAL;
        zinf_fail(ZINF_ERR_INVAL, "aio: stripe unit %llu is not a multiple of the alignment %u of %s",
                  (unsigned long long)f->stripe, f->align, f->paths[0]);
        goto fail;
    }
    uint64_t per_file = zinf_aio_file_striped_bytes(f->size, f->n, f->stripe) / (uint64_t)f->n;
    for (i = 0; i < f->n; i++) {
        if ((ret = preallocate(f, i, per_file)) == 0) continue;
        struct statvfs sv;
        unsigned long long free_bytes =
            statvfs(cfg->dirs[i], &sv) == 0 ? (unsigned long long)sv.f_bavail * sv.f_frsize : 0;
        char need[32], have[32];
        zinf_fail(zinf_status_from_errno(-ret), "aio: cannot preallocate %s for %s (%s free): %s",
                  zinf_size_format(per_file, need, sizeof need), f->paths[i],
                  zinf_size_format(free_bytes, have, sizeof have), strerror(-ret));
        goto fail;
    }
    aio_file_register(aio, f);
    *out = f;
    return 0;
fail:
    f->keep = false; // never leave a half-made swap file behind
    zinf_aio_file_close(f);
    return ret;
}
