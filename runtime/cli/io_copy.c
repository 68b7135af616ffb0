// zinf io-bench --h2d / --d2h: host<->device copy bandwidth, the second of the three
// links offload depends on, from pinned and from pageable host memory (a copy from
// pageable memory is staged by the runtime, which is why offload pins its buffers).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "io_copy.h"

// The median seconds of loops copies of bytes in direction kind on one stream.
static zinf_status time_copies(zinf_stream *s, void *dst, const void *src, size_t bytes, zinf_copy_kind kind,
                               int loops, double *seconds) {
    double *t = calloc((size_t)loops, sizeof *t);
    if (!t) return zinf_fail(ZINF_ERR_NOMEM, "io-bench: out of memory");
    zinf_status st = ZINF_OK;
    for (int i = 0; st == ZINF_OK && i < loops; i++) {
        double t0 = zinf_clock_s();
        st = zinf_copy_async(s, dst, src, bytes, kind);
        if (st == ZINF_OK) st = zinf_stream_sync(s);
        t[i] = zinf_clock_s() - t0;
    }
    if (st == ZINF_OK) *seconds = cli_median(t, loops);
    free(t);
    return st;
}

static void report(const char *op, bool pinned, size_t bytes, double seconds, const zinf_device_caps *caps, bool json) {
    bool memcpy_only = caps->backend == ZINF_BACKEND_HOST;
    if (json) {
        cli_print_json_line(json_pack("{s:s, s:I, s:f, s:f, s:b, s:s, s:s, s:b}", "op", op, "bytes", (json_int_t)bytes,
                                      "seconds", seconds, "bytes_per_s", bytes / seconds, "pinned", pinned, "backend",
                                      zinf_backend_name(caps->backend), "device", caps->name, "memcpy", memcpy_only));
        return;
    }
    char size[32];
    printf("%-4s %-8s %10s %9.3f %9.4f%s\n", op, pinned ? "pinned" : "pageable", zinf_size_format(bytes, size, sizeof size),
           bytes / seconds / 1e9, seconds, memcpy_only ? "  (host backend: a memcpy in host memory)" : "");
}

int cli_io_copy(const io_copy_spec *c) {
    zinf_device *dev = NULL;
    zinf_stream *s = NULL;
    void *d_buf = NULL, *pinned = NULL, *pageable = NULL;
    int rc = CLI_FAIL;
    zinf_device_params dp = {.backend = ZINF_BACKEND_AUTO};
    if (zinf_device_create(&dev, &dp) != ZINF_OK || zinf_stream_create(dev, &s) != ZINF_OK ||
        zinf_device_alloc(dev, c->bytes, "io-bench copy buffer", &d_buf) != ZINF_OK ||
        zinf_pinned_alloc(dev, c->bytes, &pinned) != ZINF_OK)
        goto done;
    pageable = malloc(c->bytes);
    if (!pageable) {
        zinf_fail(ZINF_ERR_NOMEM, "io-bench: out of host memory for a %zu-byte pageable buffer", c->bytes);
        goto done;
    }
    // Touch every page first (device memory too: on the host backend it is host
    // memory), so the copies do not time page faults.
    memset(pinned, 1, c->bytes);
    memset(pageable, 1, c->bytes);
    if (zinf_memset_async(s, d_buf, 0, c->bytes) != ZINF_OK || zinf_stream_sync(s) != ZINF_OK) goto done;
    const zinf_device_caps *caps = zinf_device_get_caps(dev);
    if (!c->json) printf("%-4s %-8s %10s %9s %9s\n", "op", "host", "size", "GB/s", "seconds");
    for (int dir = 0; dir < 2; dir++) {
        bool h2d = dir == 0;
        if (h2d ? !c->h2d : !c->d2h) continue;
        for (int p = 0; p < 2; p++) {
            void *host = p == 0 ? pinned : pageable;
            double sec;
            zinf_status st = h2d ? time_copies(s, d_buf, host, c->bytes, ZINF_COPY_H2D, c->loops, &sec)
                                 : time_copies(s, host, d_buf, c->bytes, ZINF_COPY_D2H, c->loops, &sec);
            if (st != ZINF_OK) goto done;
            report(h2d ? "h2d" : "d2h", p == 0, c->bytes, sec, caps, c->json);
        }
    }
    rc = CLI_OK;
done:
    if (rc != CLI_OK) cli_fail("io-bench", CLI_FAIL);
    free(pageable);
    if (dev) {
        zinf_pinned_free(dev, pinned);
        zinf_device_free(dev, d_buf);
    }
    zinf_stream_destroy(s);
    zinf_device_destroy(dev);
    return rc;
}
