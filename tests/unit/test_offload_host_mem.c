// zinf_host_mem_probe against /proc/meminfo read here with a different parser,
// getrlimit, and the bracketed transparent huge page mode.
// timeout: 10 san=10 cuda-emu=10 san-cuda-emu=10
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "check.h"
#include "zinf.h"

// The value of key in a "Key:   N kB" file, in bytes, located by strstr over the whole
// text; 0 when absent.
static unsigned long long meminfo_bytes(const char *text, const char *key) {
    char pat[64];
    snprintf(pat, sizeof pat, "\n%s:", key);
    const char *p = strncmp(text, pat + 1, strlen(pat + 1)) == 0 ? text : strstr(text, pat);
    if (!p) return 0;
    p = strchr(p, ':') + 1;
    char *end;
    unsigned long long v = strtoull(p, &end, 10);
    while (*end == ' ')
        end++;
    if (strncmp(end, "kB", 2) == 0) v *= 1024;
    return v;
}

int main(void) {
    static char text[65536];
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) {
        printf("skip: no /proc/meminfo\n");
        return 77;
    }
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';

    zinf_host_mem m;
    memset(&m, 0x5a, sizeof m);
    zinf_status st = zinf_host_mem_probe(&m);
    if (st != ZINF_OK) {
        printf("FAIL: zinf_host_mem_probe: %s: %s\n", zinf_status_str(st), zinf_last_error());
        return 1;
    }
    printf("total %llu, available %llu, memlock %llu, thp %s\n", (unsigned long long)m.total_bytes,
           (unsigned long long)m.available_bytes, (unsigned long long)m.memlock_limit, m.thp);

    unsigned long long total = meminfo_bytes(text, "MemTotal");
    CHECK(total > 0, "no MemTotal in /proc/meminfo");
    CHECK(m.total_bytes == total, "total_bytes %llu, /proc/meminfo says %llu", (unsigned long long)m.total_bytes,
          total);
    CHECK(m.available_bytes > 0 && m.available_bytes <= m.total_bytes, "available_bytes %llu of total %llu",
          (unsigned long long)m.available_bytes, (unsigned long long)m.total_bytes);
    // MemAvailable moves between the two reads; a unit mistake would be off 1024x.
    unsigned long long avail = meminfo_bytes(text, "MemAvailable");
    if (avail)
        CHECK(m.available_bytes > avail / 2 && m.available_bytes < avail * 2,
              "available_bytes %llu, /proc/meminfo said %llu a moment ago", (unsigned long long)m.available_bytes,
              avail);

    struct rlimit rl;
    getrlimit(RLIMIT_MEMLOCK, &rl);
    uint64_t want = rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX : (uint64_t)rl.rlim_cur;
    CHECK(m.memlock_limit == want, "memlock_limit %llu, getrlimit %llu", (unsigned long long)m.memlock_limit,
          (unsigned long long)want);

    char thp[64] = "unknown", buf[256];
    f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (f) {
        const char *open = fgets(buf, sizeof buf, f) ? strchr(buf, '[') : NULL;
        if (open) sscanf(open, "[%63[^]]", thp);
        fclose(f);
    }
    CHECK(strcmp(m.thp, thp) == 0, "thp \"%s\", sysfs \"%s\"", m.thp, thp);

    return check_exit("test_offload_host_mem");
}
