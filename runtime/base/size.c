// Byte counts with binary suffixes, as the command line and config accept them.
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

#include "zinf_internal.h"

zinf_status zinf_size_parse(const char *s, uint64_t *out) {
    static const char rule[] = "expected a byte count: an integer with an optional binary "
                               "suffix K, M, G or T (e.g. 64K, 1M, 2G)";
    if (!s || !isdigit((unsigned char)s[0]))
        return zinf_fail(ZINF_ERR_INVAL, "invalid size \"%s\": %s", s ? s : "", rule);
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno == ERANGE) return zinf_fail(ZINF_ERR_INVAL, "invalid size \"%s\": too large", s);
    unsigned shift = 0;
    switch (toupper((unsigned char)*end)) {
    case '\0': break;
    case 'K': shift = 10; break;
    case 'M': shift = 20; break;
    case 'G': shift = 30; break;
    case 'T': shift = 40; break;
    default: return zinf_fail(ZINF_ERR_INVAL, "invalid size \"%s\": %s", s, rule);
    }
    if (shift) {
        end++;
        if (strcasecmp(end, "") != 0 && strcasecmp(end, "B") != 0 && strcasecmp(end, "iB") != 0)
            return zinf_fail(ZINF_ERR_INVAL, "invalid size \"%s\": %s", s, rule);
    }
    if (shift && v > (UINT64_MAX >> shift)) return zinf_fail(ZINF_ERR_INVAL, "invalid size \"%s\": too large", s);
    *out = (uint64_t)v << shift;
    return ZINF_OK;
}

char *zinf_size_format(uint64_t bytes, char *buf, size_t len) {
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    unsigned u = 0;
    double v = (double)bytes;
    while (v >= 1024.0 && u + 1 < ZINF_ARRAY_LEN(units)) {
        v /= 1024.0;
        u++;
    }
    if (u == 0 || v == (double)(uint64_t)v)
        snprintf(buf, len, "%.0f %s", v, units[u]);
    else
        snprintf(buf, len, "%.1f %s", v, units[u]);
    return buf;
}
