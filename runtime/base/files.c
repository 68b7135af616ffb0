// Files written to survive a crash: whole and synced, directories synced after a
// rename, and trees removed (the checkpoint and the model export share them).
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <unistd.h>

#include "zinf_internal.h"

zinf_status zinf_file_write_synced(const char *path, const char *data, size_t len) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return zinf_fail_errno(errno, "%s", path);
    zinf_status s = ZINF_OK;
    for (size_t at = 0; s == ZINF_OK && at < len;) {
        int fault = zinf_fault_next(ZINF_FAULT_SAVE);
        ssize_t w = fault ? (errno = fault, -1) : write(fd, data + at, len - at);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0)
            s = zinf_fail_errno(w < 0 ? errno : EIO, "%s: write at offset %zu (%zu bytes)", path, at, len - at);
        else
            at += (size_t)w;
    }
    if (s == ZINF_OK && fsync(fd) != 0) s = zinf_fail_errno(errno, "%s: fsync", path);
    if (close(fd) != 0 && s == ZINF_OK) s = zinf_fail_errno(errno, "%s: close", path);
    return s;
}

zinf_status zinf_dir_sync(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    zinf_status s = fd < 0 || fsync(fd) != 0 ? zinf_fail_errno(errno, "%s: fsync", dir) : ZINF_OK;
    if (fd >= 0) close(fd);
    return s;
}

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *f) {
    (void)sb, (void)flag, (void)f;
    return remove(p);
}

zinf_status zinf_rm_tree(const char *path) {
    if (nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS) != 0 && errno != ENOENT)
        return zinf_fail_errno(errno, "removing %s", path);
    return ZINF_OK;
}
