// Progress lines for long work that would otherwise be silent (zinf_internal.h).
#include <stdio.h>
#include <stdlib.h>

#include "zinf_internal.h"

static const char *amount(const zinf_progress *p, int64_t n, char *buf) {
    if (p->bytes) return zinf_size_format((uint64_t)n, buf, 32);
    snprintf(buf, 32, "%lld", (long long)n);
    return buf;
}

void zinf_progress_start(zinf_progress *p, const char *what, int64_t total, bool bytes) {
    const char *v = zinf_env(ZINF_ENV_PROGRESS);
    char *end;
    double interval = v ? strtod(v, &end) : 10;
    if (!v || end == v || *end || !(interval >= 0)) interval = 10; // unset or not a number: the default
    *p = (zinf_progress){.what = what, .total = total, .bytes = bytes, .interval = interval};
    p->start = p->last = zinf_clock_s();
}

void zinf_progress_add(zinf_progress *p, int64_t n) {
    p->done += n;
    double now = zinf_clock_s();
    if (now - p->last < p->interval || p->done >= p->total) return;
    p->last = now;
    p->said = true;
    double secs = now - p->start, share = p->total > 0 ? (double)p->done / (double)p->total : 0;
    char a[32], b[32];
    ZINF_LOG_INFO("%s: %s of %s (%.0f%%), %.0f s, about %.0f s to go", p->what, amount(p, p->done, a),
                  amount(p, p->total, b), 100 * share, secs, share > 0 ? secs / share - secs : 0);
}

void zinf_progress_end(zinf_progress *p) {
    if (!p->said) return;
    char a[32];
    ZINF_LOG_INFO("%s: done, %s in %.0f s", p->what, amount(p, p->done, a), zinf_clock_s() - p->start);
}
