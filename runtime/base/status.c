// Status names and the per-thread failure detail (the errno pattern, with text).
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "zinf_internal.h"

// Long enough for a key path, a file path and an errno text; longer details are cut.
static _Thread_local char last_error[1024];

const char *zinf_status_str(zinf_status st) {
    switch (st) {
    case ZINF_OK: return "ok";
    case ZINF_ERR_INVAL: return "invalid argument";
    case ZINF_ERR_NOMEM: return "out of memory";
    case ZINF_ERR_IO: return "I/O error";
    case ZINF_ERR_NOSPC: return "no space left";
    case ZINF_ERR_CUDA: return "CUDA error";
    case ZINF_ERR_COMM: return "communication error";
    case ZINF_ERR_UNSUPPORTED: return "not supported";
    case ZINF_ERR_CORRUPT: return "corrupt data";
    case ZINF_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}

const char *zinf_last_error(void) { return last_error; }

zinf_status zinf_status_from_errno(int err) {
    switch (err) {
    case 0: return ZINF_OK;
    case ENOSPC:
    case EDQUOT:
    case EFBIG: return ZINF_ERR_NOSPC;
    case ENOMEM: return ZINF_ERR_NOMEM;
    case EBADMSG: return ZINF_ERR_CORRUPT; // aio: a request's bytes failed the file's check
    case EINVAL: return ZINF_ERR_INVAL;
    case ENOSYS:
    case EOPNOTSUPP: return ZINF_ERR_UNSUPPORTED;
    default: return ZINF_ERR_IO;
    }
}

zinf_status zinf_fail(zinf_status st, const char *fmt, ...) {
    // Through a copy: the arguments may hold zinf_last_error() itself, to add to it.
    char msg[sizeof last_error];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    memcpy(last_error, msg, sizeof msg);
    return st;
}

zinf_status zinf_fail_errno(int err, const char *fmt, ...) {
    char what[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    snprintf(last_error, sizeof last_error, "%s: %s", what, strerror(err));
    zinf_status st = zinf_status_from_errno(err);
    return st == ZINF_OK ? ZINF_ERR_IO : st;
}
