// Streams, events and copies, backend-independent: argument checks, then the backend.
#include <stdlib.h>

#include "internal.h"

static zinf_status stream_create(zinf_device *d, bool urgent, zinf_stream **out) {
    *out = NULL;
    zinf_stream *s = calloc(1, sizeof *s);
    if (!s) return zinf_fail(ZINF_ERR_NOMEM, "stream: out of host memory");
    s->dev = d;
    s->urgent = urgent;
    zinf_status st = d->be->stream_create(s);
    if (st != ZINF_OK) {
        free(s);
        return st;
    }
    *out = s;
    return ZINF_OK;
}

zinf_status zinf_stream_create(zinf_device *d, zinf_stream **out) { return stream_create(d, false, out); }

zinf_status zinf_stream_create_urgent(zinf_device *d, zinf_stream **out) { return stream_create(d, true, out); }

void zinf_stream_destroy(zinf_stream *s) {
    if (!s) return;
    s->dev->be->stream_destroy(s);
    free(s);
}

zinf_status zinf_stream_sync(zinf_stream *s) { return s->dev->be->stream_sync(s); }

void *zinf_stream_native(zinf_stream *s) { return s->dev->be->stream_native(s); }

static zinf_status event_create(zinf_device *d, bool timed, zinf_event **out) {
    *out = NULL;
    zinf_event *e = calloc(1, sizeof *e);
    if (!e) return zinf_fail(ZINF_ERR_NOMEM, "event: out of host memory");
    e->dev = d;
    e->timed = timed;
    zinf_status st = d->be->event_create(e);
    if (st != ZINF_OK) {
        free(e);
        return st;
    }
    *out = e;
    return ZINF_OK;
}

zinf_status zinf_event_create(zinf_device *d, zinf_event **out) { return event_create(d, false, out); }

zinf_status zinf_event_create_timed(zinf_device *d, zinf_event **out) { return event_create(d, true, out); }

zinf_status zinf_event_elapsed(zinf_event *start, zinf_event *end, double *seconds) {
    *seconds = 0;
    if (!start->timed || !end->timed || start->dev != end->dev)
        return zinf_fail(ZINF_ERR_INVAL, "event elapsed: both events must be timed and on one device");
    if (!zinf_event_done(start) || !zinf_event_done(end))
        return zinf_fail(ZINF_ERR_INVAL, "event elapsed: an event has not completed");
    return start->dev->be->event_elapsed(start, end, seconds);
}

void zinf_event_destroy(zinf_event *e) {
    if (!e) return;
    e->dev->be->event_destroy(e);
    free(e);
}

static zinf_status same_device(const zinf_stream *s, const zinf_event *e, const char *what) {
    if (s->dev != e->dev) return zinf_fail(ZINF_ERR_INVAL, "%s: the event and the stream are on different devices", what);
    return ZINF_OK;
}

zinf_status zinf_event_record(zinf_event *e, zinf_stream *s) {
    ZINF_CHECK(same_device(s, e, "event record"));
    return s->dev->be->event_record(e, s);
}

zinf_status zinf_stream_wait_event(zinf_stream *s, zinf_event *e) {
    ZINF_CHECK(same_device(s, e, "stream wait"));
    return s->dev->be->stream_wait_event(s, e);
}

zinf_status zinf_event_sync(zinf_event *e) { return e->dev->be->event_sync(e); }

bool zinf_event_done(zinf_event *e) { return e->dev->be->event_done(e); }

zinf_status zinf_copy_async(zinf_stream *s, void *dst, const void *src, size_t bytes, zinf_copy_kind kind) {
    if (bytes == 0) return ZINF_OK;
    if (!dst || !src) return zinf_fail(ZINF_ERR_INVAL, "copy of %zu bytes: NULL %s", bytes, dst ? "source" : "destination");
    if ((unsigned)kind > ZINF_COPY_H2H) return zinf_fail(ZINF_ERR_INVAL, "copy: unknown kind %d", kind);
    return s->dev->be->copy(s, dst, src, bytes, kind);
}

zinf_status zinf_memset_async(zinf_stream *s, void *dst, int byte, size_t bytes) {
    if (bytes == 0) return ZINF_OK;
    if (!dst) return zinf_fail(ZINF_ERR_INVAL, "memset of %zu bytes: NULL destination", bytes);
    return s->dev->be->memset(s, dst, byte, bytes);
}

zinf_status zinf_stream_host_fn(zinf_stream *s, void (*fn)(void *arg), void *arg) {
    if (!fn) return zinf_fail(ZINF_ERR_INVAL, "stream host function: NULL");
    return s->dev->be->host_fn(s, fn, arg);
}
