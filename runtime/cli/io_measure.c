// Measuring what offload will see: timed reads and writes of one (striped) file
// through the aio engine, shared by `zinf io-bench` and `zinf io-tune`. The test
// files are removed at exit and on SIGINT/SIGTERM, so no run leaves one behind.
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "io_measure.h"

// ---- test files, removed even when interrupted ----

static char victims[IO_MAX_DIRS][PATH_MAX]; // written before the handler can see them
static volatile sig_atomic_t nvictims;

static void on_signal(int sig) {
    for (int i = 0; i < nvictims; i++)
        unlink(victims[i]); // async-signal-safe
    signal(sig, SIG_DFL);
    raise(sig);
}

static void guard_files(const char *const *dirs, int ndirs, const char *name) {
    for (int i = 0; i < ndirs; i++)
        snprintf(victims[i], sizeof victims[i], "%s/%s", dirs[i], name);
    nvictims = ndirs;
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
}

static void unguard_files(void) { nvictims = 0; }

// ---- measuring ----

static void pattern(unsigned char *p, size_t n, uint64_t seed) {
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < n; i += 8) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        memcpy(p + i, &x, n - i < 8 ? n - i : 8);
    }
}

// The median of loops passes of spec->size bytes as a result.
static io_result result_of(const io_spec *spec, const char *op, double *times, int loops, zinf_aio_file *f,
                           bool registered) {
    double median = cli_median(times, loops);
    return (io_result){.op = op,
                       .bytes = spec->size,
                       .seconds = median,
                       .bytes_per_s = (double)spec->size / median,
                       .direct = zinf_aio_file_direct(f),
                       .registered = registered};
}

// loops passes in one direction; the median time goes into *res when res is non-NULL.
static zinf_status passes(const io_spec *spec, zinf_aio *aio, zinf_aio_file *f, unsigned char *buf,
                          const unsigned char *ref, bool write, int loops, double *times, bool registered,
                          io_result *res) {
    for (int l = 0; l < loops; l++) {
        if (!write) memset(buf, 0, spec->size);
        zinf_aio_ticket t;
        double t0 = zinf_clock_s();
        int ret =
            write ? zinf_aio_write(aio, f, 0, buf, spec->size, &t) : zinf_aio_read(aio, f, 0, buf, spec->size, &t);
        if (ret == 0) ret = zinf_aio_wait(aio, t);
        times[l] = zinf_clock_s() - t0;
        if (ret) return zinf_status_from_errno(-ret);
        if (!write && ref && memcmp(buf, ref, spec->size) != 0)
            return zinf_fail(ZINF_ERR_CORRUPT, "--validate: the bytes read back differ from the bytes written");
        if (spec->progress)
            fprintf(stderr, "zinf: %s pass %d/%d: %.2f GB/s\n", write ? "write" : "read", l + 1, loops,
                    (double)spec->size / times[l] / 1e9);
    }
    if (res) *res = result_of(spec, write ? "write" : "read", times, loops, f, registered);
    return ZINF_OK;
}

// loops passes that read the file's first half while writing its second, both in flight
// at once as the offloaded optimizer's pipeline keeps them; the median into *res.
static zinf_status mixed_passes(const io_spec *spec, zinf_aio *aio, zinf_aio_file *f, unsigned char *buf,
                                double *times, bool registered, io_result *res) {
    uint64_t half = spec->size / 2 / zinf_aio_file_alignment(f) * zinf_aio_file_alignment(f);
    for (int l = 0; l < spec->loops; l++) {
        zinf_aio_ticket r, w;
        double t0 = zinf_clock_s();
        int ret = zinf_aio_read(aio, f, 0, buf, half, &r);
        if (ret == 0) ret = zinf_aio_write(aio, f, half, buf + half, spec->size - half, &w);
        if (ret == 0) ret = zinf_aio_wait(aio, r);
        if (ret == 0) ret = zinf_aio_wait(aio, w);
        times[l] = zinf_clock_s() - t0;
        if (ret) return zinf_status_from_errno(-ret);
        if (spec->progress)
            fprintf(stderr, "zinf: mixed pass %d/%d: %.2f GB/s\n", l + 1, spec->loops,
                    (double)spec->size / times[l] / 1e9);
    }
    *res = result_of(spec, "mixed", times, spec->loops, f, registered);
    return ZINF_OK;
}

int io_measure(const io_spec *spec, io_result *out) {
    zinf_aio *aio = NULL;
    zinf_aio_file *f = NULL;
    unsigned char *buf = NULL, *ref = NULL;
    double *times = calloc((size_t)spec->loops, sizeof *times);
    zinf_status st = ZINF_OK;
    int n = 0, ret;
    bool registered = false;
    char name[64];
    snprintf(name, sizeof name, ".zinf-io-bench-%d.bin", (int)getpid());
    zinf_aio_params params = {.block_size = spec->block_size,
                              .queue_depth = spec->queue_depth,
                              .threads = spec->threads,
                              .sqpoll = spec->sqpoll};
    if (!times) return -(int)zinf_fail(ZINF_ERR_NOMEM, "out of memory");
    if ((ret = zinf_aio_create(&aio, &params)) != 0) {
        st = zinf_status_from_errno(-ret);
        goto done;
    }
    guard_files(spec->dirs, spec->ndirs, name);
    zinf_aio_file_config fc = {.dirs = spec->dirs, .ndirs = spec->ndirs, .name = name, .size = spec->size};
    if ((ret = zinf_aio_file_open(aio, &f, &fc)) != 0) {
        st = zinf_status_from_errno(-ret);
        goto done;
    }
    if (posix_memalign((void **)&buf, zinf_aio_file_alignment(f), spec->size) ||
        (spec->validate && !(ref = malloc(spec->size)))) {
        st = zinf_fail(ZINF_ERR_NOMEM, "cannot allocate %llu bytes of IO buffer", (unsigned long long)spec->size);
        goto done;
    }
    // Offload registers its pinned pool; so does the benchmark, where the kernel lets it.
    registered = zinf_aio_register_buffer(aio, buf, spec->size) == 0;
    if (!registered) ZINF_LOG_WARN("io: the buffer runs unregistered: %s", zinf_last_error());
    pattern(buf, spec->size, 1);
    if (ref) memcpy(ref, buf, spec->size);
    // Reads need data on disk: without measured writes, one unmeasured write primes it.
    ZINF_CHECK_GOTO(passes(spec, aio, f, buf, ref, true, spec->write ? spec->loops : 1, times, registered,
                           spec->write ? &out[n] : NULL),
                    st, done);
    n += spec->write;
    if (spec->read)
        ZINF_CHECK_GOTO(passes(spec, aio, f, buf, ref, false, spec->loops, times, registered, &out[n++]), st, done);
    if (spec->mixed) ZINF_CHECK_GOTO(mixed_passes(spec, aio, f, buf, times, registered, &out[n++]), st, done);
done:
    if (registered) zinf_aio_unregister_buffer(aio, buf);
    zinf_aio_file_close(f);
    unguard_files();
    zinf_aio_destroy(aio);
    free(buf);
    free(ref);
    free(times);
    return st == ZINF_OK ? n : -(int)st;
}
