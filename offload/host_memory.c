// Host memory facts the pinned-buffer budget is planned from: /proc/meminfo, the
// locked-memory rlimit (pinned = locked) and whether it binds (CAP_IPC_LOCK), and the
// transparent huge page mode (proc(5)).
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#include "zinf_offload.h"

// The mode in use is the word in brackets: "always [madvise] never".
static void read_thp(char *out, size_t len) {
    snprintf(out, len, "unknown");
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (!f) return;
    char line[256];
    if (fgets(line, sizeof line, f)) {
        char *open = strchr(line, '['), *close = open ? strchr(open, ']') : NULL;
        if (close) snprintf(out, len, "%.*s", (int)(close - open - 1), open + 1);
    }
    fclose(f);
}

// Whether the effective capabilities (the CapEff line of /proc/self/status, a hex
// mask) hold CAP_IPC_LOCK, bit 14.
static bool read_cap_ipc_lock(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return false;
    char line[256];
    unsigned long long caps = 0;
    bool found = false;
    while (!found && fgets(line, sizeof line, f))
        found = sscanf(line, "CapEff: %llx", &caps) == 1;
    fclose(f);
    return found && (caps >> 14 & 1);
}

zinf_status zinf_host_mem_probe(zinf_host_mem *out) {
    memset(out, 0, sizeof *out);
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return zinf_fail_errno(errno, "cannot read /proc/meminfo");
    // MemAvailable appeared in Linux 3.14; MemFree stands in on older kernels.
    bool total = false, available = false;
    unsigned long long free_kib = 0;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        unsigned long long kib;
        if (sscanf(line, "MemTotal: %llu kB", &kib) == 1) {
            out->total_bytes = kib * 1024;
            total = true;
        } else if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1) {
            out->available_bytes = kib * 1024;
            available = true;
        } else if (sscanf(line, "MemFree: %llu kB", &kib) == 1) {
            free_kib = kib;
        }
    }
    fclose(f);
    if (!total) return zinf_fail(ZINF_ERR_IO, "cannot read /proc/meminfo: no MemTotal line");
    if (!available) out->available_bytes = free_kib * 1024;

    struct rlimit rl;
    if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0) return zinf_fail_errno(errno, "getrlimit(RLIMIT_MEMLOCK)");
    out->memlock_limit = rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX : (uint64_t)rl.rlim_cur;
    out->lock_unlimited = read_cap_ipc_lock();

    read_thp(out->thp, sizeof out->thp);
    return ZINF_OK;
}
