// zinf offload: the CPU and NVMe tiers. This header starts with the host memory facts
// the pinned-buffer budget is planned from.
#ifndef ZINF_OFFLOAD_H
#define ZINF_OFFLOAD_H

#include <stdint.h>

#include "zinf_base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zinf_host_mem {
    uint64_t total_bytes;     // MemTotal
    uint64_t available_bytes; // MemAvailable: what can be allocated without swapping
    uint64_t memlock_limit;   // RLIMIT_MEMLOCK soft limit; UINT64_MAX when unlimited
    bool lock_unlimited;      // CAP_IPC_LOCK: mlock ignores that limit (root)
    char thp[16];             // transparent huge pages: "always", "madvise", "never", "unknown"
} zinf_host_mem;

// Fill *out from /proc and getrlimit. ZINF_ERR_IO with the file named when /proc
// cannot be read.
zinf_status zinf_host_mem_probe(zinf_host_mem *out);

#ifdef __cplusplus
}
#endif
#endif
