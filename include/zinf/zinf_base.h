// zinf base: status codes, error details, logging, environment knobs and sizes.
// Every layer (aio, cpu_adam, gpu, offload, runtime) builds on this header alone.
#ifndef ZINF_BASE_H
#define ZINF_BASE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ZINF_VERSION "0.1.0"

// ---- status ----
typedef enum zinf_status {
    ZINF_OK = 0,
    ZINF_ERR_INVAL = 1,       // bad argument, config value or command line
    ZINF_ERR_NOMEM = 2,       // host, pinned or device memory exhausted
    ZINF_ERR_IO = 3,          // a file or device operation failed
    ZINF_ERR_NOSPC = 4,       // no space left on a device
    ZINF_ERR_CUDA = 5,        // the CUDA runtime or a library reported an error
    ZINF_ERR_COMM = 6,        // MPI or NCCL failed, or a peer rank went away
    ZINF_ERR_UNSUPPORTED = 7, // valid request this build, machine or version cannot do
    ZINF_ERR_CORRUPT = 8,     // data on disk failed a size or checksum check
    ZINF_ERR_INTERNAL = 9,    // a broken invariant inside zinf
} zinf_status;

// Short name of a status ("invalid argument", "no space left", ...).
const char *zinf_status_str(zinf_status st);

// The detail of the last failure on the calling thread: what failed, on which key,
// file or device, and why. Never NULL; "" when nothing failed yet. A thread-local
// text (like errno) rather than per object, so that create functions, which have no
// object to hang it on when they fail, report the same way as everything else.
const char *zinf_last_error(void);

// The status for an errno value (ENOSPC -> ZINF_ERR_NOSPC, ENOMEM -> NOMEM, ...).
zinf_status zinf_status_from_errno(int err);

// Record a failure detail for this thread and return st, for use as
// `return zinf_fail(ZINF_ERR_INVAL, "key %s: ...", k);`. Callers outside the library
// (programs embedding it) may use it to report their own failures the same way.
zinf_status zinf_fail(zinf_status st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// As zinf_fail, with ": <strerror(err)>" appended and the status taken from err.
zinf_status zinf_fail_errno(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

// The first failure of work running on other threads (a stream's host function, a
// background update), kept to be raised on the thread that owns the work.
typedef struct zinf_latch zinf_latch;
zinf_status zinf_latch_create(zinf_latch **out);
void zinf_latch_destroy(zinf_latch *l); // NULL is a no-op
// Keep st and zinf_last_error() unless a failure is already kept.
void zinf_latch_set(zinf_latch *l, zinf_status st);
bool zinf_latch_failed(zinf_latch *l);
// ZINF_OK, or the kept failure, its message made this thread's zinf_last_error().
zinf_status zinf_latch_raise(zinf_latch *l);

// ---- logging ----
typedef enum zinf_log_level {
    ZINF_LOG_LEVEL_ERROR = 0,
    ZINF_LOG_LEVEL_WARN = 1,
    ZINF_LOG_LEVEL_INFO = 2,
    ZINF_LOG_LEVEL_DEBUG = 3,
} zinf_log_level;

// Receives every message that passes the level and rank filters, without the prefix
// or a trailing newline. The default writes "zinf[ rank R]: level: msg" to stderr.
// It runs under the logger's lock (so lines never interleave) and must not log itself.
typedef void (*zinf_log_fn)(zinf_log_level level, int rank, const char *msg, void *user);

// The level comes from ZINF_LOG_LEVEL (error|warn|info|debug) unless set here.
void zinf_log_set_level(zinf_log_level level);
zinf_log_level zinf_log_get_level(void);
// NULL restores the default writer.
void zinf_log_set_callback(zinf_log_fn fn, void *user);
// Rank and world size for the prefix and for the INFO filter: at INFO only rank 0
// speaks, warnings and errors come from every rank, DEBUG shows everything. The
// default comes from the launcher's environment (mpirun, Slurm) until comm sets it.
void zinf_log_set_rank(int rank, int world_size);
void zinf_log(zinf_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void zinf_logv(zinf_log_level level, const char *fmt, va_list ap);
// Parse "error", "warn", "info", "debug" (or 0..3); -1 when s is none of them.
int zinf_log_level_parse(const char *s);

#define ZINF_LOG_ERROR(...) zinf_log(ZINF_LOG_LEVEL_ERROR, __VA_ARGS__)
#define ZINF_LOG_WARN(...)  zinf_log(ZINF_LOG_LEVEL_WARN, __VA_ARGS__)
#define ZINF_LOG_INFO(...)  zinf_log(ZINF_LOG_LEVEL_INFO, __VA_ARGS__)
#define ZINF_LOG_DEBUG(...) zinf_log(ZINF_LOG_LEVEL_DEBUG, __VA_ARGS__)

// ---- environment knobs ----
// Every environment variable zinf reads is declared in one table and read once.
typedef enum zinf_env_knob {
    ZINF_ENV_LOG_LEVEL = 0,
    ZINF_ENV_SIMD = 1,
    ZINF_ENV_COMM_TIMEOUT = 2,
    ZINF_ENV_RANKS_PER_NODE = 3,
    ZINF_ENV_FAULT = 4,
    ZINF_ENV_PROGRESS = 5,
    ZINF_ENV_COUNT = 6,
} zinf_env_knob;

// The value seen at first use (NULL when unset).
const char *zinf_env(zinf_env_knob k);
const char *zinf_env_name(zinf_env_knob k);
const char *zinf_env_doc(zinf_env_knob k);

// The rank and world size given by the launcher's environment (Open MPI, MPICH/PMI,
// PMIx, Slurm); 0 and 1 when started without one.
void zinf_launcher_rank(int *rank, int *world_size);

// ---- element types ----
typedef enum zinf_dtype {
    ZINF_DTYPE_NONE = 0, // "no such buffer", e.g. no 16-bit copy wanted
    ZINF_DTYPE_F32 = 1,
    ZINF_DTYPE_BF16 = 2,
    ZINF_DTYPE_F16 = 3,
} zinf_dtype;

const char *zinf_dtype_name(zinf_dtype t); // "none", "fp32", "bf16", "fp16"
size_t zinf_dtype_size(zinf_dtype t);      // bytes per element, 0 for none

// ---- sizes ----
// Parse a byte count: a plain integer or one with a binary suffix K, M, G, T
// (optionally followed by "iB" or "B", any case): "64K" = 65536. Errors name s.
zinf_status zinf_size_parse(const char *s, uint64_t *out);
// Human form with a binary unit, e.g. "1.5 GiB", "4 KiB", "512 B". Returns buf.
char *zinf_size_format(uint64_t bytes, char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
