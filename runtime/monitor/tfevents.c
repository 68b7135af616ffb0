// TensorBoard's event file, written without TensorFlow: TFRecords (a record's length,
// its masked CRC-32C, the bytes, their masked CRC-32C) around Event protobufs encoded
// here, as tensorflow/core/util/event.proto and framework/summary.proto define them:
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//   Summary { repeated Value value = 1; }
//   Value   { string tag = 1; float simple_value = 2; }
// The file is named as TensorBoard's readers look for it: events.out.tfevents.TIME.HOST.PID.
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "monitor.h"
#include "zinf_internal.h"

struct zinf_tfevents {
    FILE *f;
    char path[4096];
};

// A message being encoded, in a buffer of fixed size (a step's figures take a few
// hundred bytes); past it, `full` is set and nothing more is written.
typedef struct proto {
    uint8_t b[4096];
    size_t n;
    bool full;
} proto;

static void bytes(proto *p, const void *d, size_t n) {
    if (p->full || n > sizeof p->b - p->n) {
        p->full = true;
        return;
    }
    memcpy(p->b + p->n, d, n);
    p->n += n;
}

static void varint(proto *p, uint64_t v) {
    uint8_t b[10];
    size_t n = 0;
    for (; v >= 0x80; v >>= 7)
        b[n++] = (uint8_t)(v | 0x80);
    b[n++] = (uint8_t)v;
    bytes(p, b, n);
}

enum { VARINT = 0, FIXED64 = 1, LENGTH = 2, FIXED32 = 5 };
static void key(proto *p, int field, int wire) { varint(p, (uint64_t)field << 3 | (uint64_t)wire); }

static void field_bytes(proto *p, int field, const void *d, size_t n) {
    key(p, field, LENGTH);
    varint(p, n);
    bytes(p, d, n);
}

static void field_double(proto *p, int field, double v) { // little-endian, as x86 and ARM hold it
    key(p, field, FIXED64);
    bytes(p, &v, 8);
}

static void field_float(proto *p, int field, float v) {
    key(p, field, FIXED32);
    bytes(p, &v, 4);
}

static uint32_t masked_crc(const void *d, size_t n) {
    uint32_t c = zinf_crc32c(0, d, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

static double wall_time(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static zinf_status record(zinf_tfevents *t, const proto *event) {
    if (event->full)
        return zinf_fail(ZINF_ERR_INVAL, "tensorboard: %s: a step's figures take more than %zu bytes", t->path,
                         sizeof event->b);
    uint64_t len = event->n;
    uint32_t len_crc = masked_crc(&len, 8), data_crc = masked_crc(event->b, event->n);
    if (fwrite(&len, 8, 1, t->f) != 1 || fwrite(&len_crc, 4, 1, t->f) != 1 ||
        fwrite(event->b, 1, event->n, t->f) != event->n || fwrite(&data_crc, 4, 1, t->f) != 1 || fflush(t->f) != 0)
        return zinf_fail_errno(errno, "tensorboard: writing %s", t->path);
    return ZINF_OK;
}

zinf_status zinf_tfevents_open(zinf_tfevents **out, const char *dir) {
    *out = NULL;
    zinf_tfevents *t = calloc(1, sizeof *t);
    if (!t) return zinf_fail(ZINF_ERR_NOMEM, "tensorboard: out of memory");
    char host[256] = "localhost";
    gethostname(host, sizeof host - 1);
    snprintf(t->path, sizeof t->path, "%s/events.out.tfevents.%010lld.%s.%d", dir, (long long)time(NULL), host,
             (int)getpid());
    if (!(t->f = fopen(t->path, "wb"))) {
        zinf_status st = zinf_fail_errno(errno, "tensorboard: creating %s", t->path);
        free(t);
        return st;
    }
    proto p = {0};
    field_double(&p, 1, wall_time());
    static const char version[] = "brain.Event:2";
    field_bytes(&p, 3, version, sizeof version - 1);
    zinf_status st = record(t, &p);
    if (st != ZINF_OK) {
        zinf_tfevents_close(t);
        return st;
    }
    *out = t;
    return ZINF_OK;
}

zinf_status zinf_tfevents_write(zinf_tfevents *t, int64_t step, const zinf_monitor_event *events, int n) {
    proto summary = {0}, value, event = {0};
    for (int i = 0; i < n; i++) {
        value = (proto){0};
        field_bytes(&value, 1, events[i].name, strlen(events[i].name));
        field_float(&value, 2, (float)events[i].value);
        field_bytes(&summary, 1, value.b, value.n);
        summary.full |= value.full;
    }
    field_double(&event, 1, wall_time());
    key(&event, 2, VARINT);
    varint(&event, (uint64_t)step);
    field_bytes(&event, 5, summary.b, summary.n);
    event.full |= summary.full;
    return record(t, &event);
}

void zinf_tfevents_close(zinf_tfevents *t) {
    if (!t) return;
    if (t->f) fclose(t->f);
    free(t);
}
