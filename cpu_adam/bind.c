// DeepSpeed's bind_cores_to_rank: each of the ranks on a host bound to its own share
// of the cores, so that their CPU Adam threads do not share cores (and, where its
// cores lie in one NUMA node, its memory on that node). The rules are those of
// DeepSpeed's launcher: a core list "0,2-4,6" in ascending, non-overlapping ranges, or
// cores 0 to the physical core count - 1; total / ranks cores each, at least one;
// rank i the i-th run of them.
#include <errno.h>
#include <numa.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>

#include "internal.h"

zinf_status zinf_cpu_parse_cores(const char *list, int *cores, int max, int *n) {
    int last = -1;
    *n = 0;
    for (const char *s = list;;) {
        char *end;
        errno = 0;
        long lo = strtol(s, &end, 10), hi = lo;
        bool ok = end != s && errno == 0 && lo >= 0;
        if (ok && *end == '-') {
            const char *h = end + 1;
            hi = strtol(h, &end, 10);
            ok = end != h && errno == 0 && hi >= lo;
        }
        ok = ok && (*end == ',' || *end == '\0') && hi < CPU_SETSIZE;
        if (!ok)
            return zinf_fail(ZINF_ERR_INVAL,
                             "core list \"%s\": \"%.*s\" is not a core or a range of cores (\"2\" or \"2-4\", "
                             "ascending, below %d)",
                             list, (int)strcspn(s, ","), s, CPU_SETSIZE);
        if (lo <= last)
            return zinf_fail(ZINF_ERR_INVAL,
                             "core list \"%s\": the ranges must be in ascending order and must not overlap", list);
        for (long c = lo; c <= hi && *n < max; c++)
            cores[(*n)++] = (int)c;
        last = (int)hi;
        if (*end == '\0') return ZINF_OK;
        s = end + 1;
    }
}

// "0-3,8" of n ascending cores.
static void format_list(const int *cores, int n, char *out, size_t size) {
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; i < n && used < size; i++) {
        int j = i;
        while (j + 1 < n && cores[j + 1] == cores[j] + 1)
            j++;
        used += (size_t)snprintf(out + used, size - used, j > i ? "%s%d-%d" : "%s%d", i ? "," : "", cores[i], cores[j]);
        i = j;
    }
}

// The NUMA node holding every one of the cores, or -1.
static int node_of_all(const int *cores, int n) {
    if (numa_available() < 0) return -1;
    int node = numa_node_of_cpu(cores[0]);
    for (int i = 1; i < n && node >= 0; i++)
        if (numa_node_of_cpu(cores[i]) != node) node = -1;
    return node;
}

zinf_status zinf_cpu_bind_rank(int local_rank, int local_ranks, const char *core_list, char *desc, size_t desc_size) {
    if (local_ranks < 1 || local_rank < 0 || local_rank >= local_ranks)
        return zinf_fail(ZINF_ERR_INVAL, "bind cores: local rank %d of %d", local_rank, local_ranks);
    int *cores = malloc(CPU_SETSIZE * sizeof *cores), total = 0;
    if (!cores) return zinf_fail(ZINF_ERR_NOMEM, "bind cores: out of memory");
    if (core_list) {
        zinf_status st = zinf_cpu_parse_cores(core_list, cores, CPU_SETSIZE, &total);
        if (st != ZINF_OK) {
            free(cores);
            return st;
        }
    } else { // as DeepSpeed: cores 0 to the machine's physical cores - 1 (the first
             // hardware thread of each, as Linux numbers them), whatever mpirun bound
        zinf_cpu_info info;
        zinf_cpu_probe(&info);
        for (total = 0; total < info.physical_cores && total < CPU_SETSIZE; total++)
            cores[total] = total;
    }
    int each = total / local_ranks;
    if (each < 1) {
        free(cores);
        return zinf_fail(ZINF_ERR_INVAL,
                         "bind cores: %d core(s) for %d ranks on this host: at least one core needs to be assigned to "
                         "each rank (fewer ranks, or a longer core list)",
                         total, local_ranks);
    }
    const int *mine = cores + (size_t)each * (size_t)local_rank;
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int i = 0; i < each; i++)
        CPU_SET(mine[i], &set);
    char list[256];
    format_list(mine, each, list, sizeof list);
    zinf_status st = ZINF_OK;
    if (sched_setaffinity(0, sizeof set, &set) != 0)
        st = zinf_fail_errno(errno,
                             "bind cores: cores %s for local rank %d (are they online, and among the cores "
                             "this process may use?)",
                             list, local_rank);
    int node = st == ZINF_OK ? node_of_all(mine, each) : -1;
    if (node >= 0) {
        struct bitmask *nodes = numa_allocate_nodemask();
        numa_bitmask_setbit(nodes, (unsigned)node);
        numa_set_membind(nodes);
        numa_bitmask_free(nodes);
    }
    if (st == ZINF_OK && desc) {
        if (node >= 0)
            snprintf(desc, desc_size, "cores %s, memory on NUMA node %d", list, node);
        else
            snprintf(desc, desc_size, "cores %s", list);
    }
    free(cores);
    return st;
}
