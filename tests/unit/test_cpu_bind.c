// DeepSpeed's bind_cores_to_rank (zinf_cpu_bind_rank): core lists parse as DeepSpeed's
// launcher parses them ("0,2-4,6"; ranges ascending, not overlapping), bad ones are
// refused naming what is wrong, the cores are split evenly over the ranks (at least
// one each), and a rank runs on its share afterwards: its affinity, and the cores a
// CPU pool counts. A pool of one worker leaves the other cores spare (never the
// worker's CPU), and NVMe workers bound to them run there alone; a pool of every core
// leaves none.
// timeout: 10 san=10 cuda-emu=10 san-cuda-emu=10
#include <dirent.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "zinf.h"

static void record_cpu(void *arg, int i, int n) {
    (void)n;
    ((int *)arg)[i] = sched_getcpu();
}

// Threads of this process (/proc/self/task) allowed exactly the CPUs of `want`.
static int threads_allowed(const cpu_set_t *want) {
    DIR *d = opendir("/proc/self/task");
    int count = 0;
    for (struct dirent *t; d && (t = readdir(d));) {
        if (t->d_name[0] == '.') continue;
        pid_t tid = (pid_t)atoi(t->d_name);
        cpu_set_t set;
        if (sched_getaffinity(tid, sizeof set, &set) == 0 && CPU_EQUAL(&set, want)) count++;
    }
    if (d) closedir(d);
    return count;
}

// A pool of one worker leaves the other cores spare, and NVMe workers bound there run
// on them alone; a pool of every core leaves none.
static void spare_cores(int physical) {
    zinf_cpu_pool *pool = NULL;
    CHECK(zinf_cpu_pool_create(&pool, 1) == ZINF_OK, "%s", zinf_last_error());
    if (!pool) return;
    int on = -1;
    zinf_cpu_pool_run(pool, record_cpu, &on);
    const int *cpus;
    int n = zinf_cpu_pool_spare(pool, &cpus);
    CHECK(physical < 2 || n >= physical - 1, "%d spare CPUs beside one worker on %d cores", n, physical);
    cpu_set_t spare;
    CPU_ZERO(&spare);
    for (int i = 0; i < n; i++) {
        CHECK(cpus[i] != on, "spare CPU %d is the worker's", cpus[i]);
        CPU_SET(cpus[i], &spare);
    }
    if (n > 0) {
        zinf_aio *aio = NULL;
        CHECK(zinf_aio_create(&aio, &(zinf_aio_params){.threads = 2, .use_threads = true}) == 0, "%s",
              zinf_last_error());
        CHECK(aio && zinf_aio_bind(aio, cpus, 0) == -EINVAL, "a bind to no CPUs was taken");
        CHECK_CONTAINS(zinf_last_error(), "aio bind: no CPUs");
        CHECK(aio && zinf_aio_bind(aio, cpus, n) == 0, "%s", zinf_last_error());
        CHECK(threads_allowed(&spare) >= 2, "%d threads run on the spare CPUs alone, want the 2 workers",
              threads_allowed(&spare));
        zinf_aio_destroy(aio);
        printf("test_cpu_bind: a worker on CPU %d leaves %d CPUs to the NVMe workers\n", on, n);
    }
    zinf_cpu_pool_destroy(pool);
    CHECK(zinf_cpu_pool_create(&pool, physical) == ZINF_OK, "%s", zinf_last_error());
    CHECK(pool && zinf_cpu_pool_spare(pool, &cpus) == 0, "a pool of every core leaves CPUs spare");
    zinf_cpu_pool_destroy(pool);
}

static void parses(const char *list, const int *want, int nwant) {
    int cores[16], n = -1;
    CHECK(zinf_cpu_parse_cores(list, cores, 16, &n) == ZINF_OK, "\"%s\": %s", list, zinf_last_error());
    CHECK(n == nwant, "\"%s\": %d cores, want %d", list, n, nwant);
    for (int i = 0; i < n && i < nwant; i++)
        CHECK(cores[i] == want[i], "\"%s\": core %d is %d, want %d", list, i, cores[i], want[i]);
}

static void refused(const char *list, const char *says) {
    int cores[16], n;
    CHECK(zinf_cpu_parse_cores(list, cores, 16, &n) == ZINF_ERR_INVAL, "\"%s\" was accepted", list);
    CHECK_CONTAINS(zinf_last_error(), says);
}

int main(void) {
    parses("0,2-4,6", (const int[]){0, 2, 3, 4, 6}, 5);
    parses("7", (const int[]){7}, 1);
    parses("1-2,5-6", (const int[]){1, 2, 5, 6}, 4);
    refused("4-2", "\"4-2\" is not a core or a range");
    refused("0,2,2", "ascending order and must not overlap");
    refused("3,1", "ascending order and must not overlap");
    refused("0-3,2-5", "ascending order and must not overlap");
    refused("a", "\"a\" is not a core");
    refused("", "is not a core");
    refused("1,", "is not a core");
    refused("-1", "is not a core");
    refused("0 1", "is not a core");

    char desc[128];
    CHECK(zinf_cpu_bind_rank(0, 3, "0-1", desc, sizeof desc) == ZINF_ERR_INVAL, "3 ranks on 2 cores bound");
    CHECK_CONTAINS(zinf_last_error(), "at least one core needs to be assigned to each rank");
    CHECK(zinf_cpu_bind_rank(2, 2, "0-1", desc, sizeof desc) == ZINF_ERR_INVAL, "local rank 2 of 2 bound");
    CHECK(zinf_cpu_bind_rank(0, 1, "1000", desc, sizeof desc) != ZINF_OK, "bound to core 1000");
    CHECK_CONTAINS(zinf_last_error(), "cores 1000 for local rank 0");

    // The last of 2 ranks on cores 0-1 (every machine has them; the affinity may widen).
    cpu_set_t all;
    CHECK(sched_getaffinity(0, sizeof all, &all) == 0, "sched_getaffinity");
    if (!CPU_ISSET(0, &all) || !CPU_ISSET(1, &all)) {
        printf("test_cpu_bind: skipping the binding itself: this process may not run on cores 0 and 1\n");
        return check_exit("test_cpu_bind");
    }
    // Without a list: cores 0 to the physical cores - 1, as DeepSpeed takes them.
    zinf_cpu_info info;
    zinf_cpu_probe(&info);
    spare_cores(info.physical_cores);
    char want[32];
    snprintf(want, sizeof want, info.physical_cores > 1 ? "cores 0-%d" : "cores 0", info.physical_cores - 1);
    CHECK(zinf_cpu_bind_rank(0, 1, NULL, desc, sizeof desc) == ZINF_OK, "%s", zinf_last_error());
    CHECK_CONTAINS(desc, want);
    CHECK(zinf_cpu_bind_rank(0, 2, "0-1", desc, sizeof desc) == ZINF_OK, "%s", zinf_last_error());
    CHECK_CONTAINS(desc, "cores 0");
    CHECK(zinf_cpu_bind_rank(1, 2, "0-1", desc, sizeof desc) == ZINF_OK, "%s", zinf_last_error());
    CHECK_CONTAINS(desc, "cores 1");
    cpu_set_t set;
    CHECK(sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) == 1 && CPU_ISSET(1, &set),
          "after binding: %d cores allowed", CPU_COUNT(&set));
    CHECK(zinf_cpu_pool_cores() == 1, "a pool would count %d cores", zinf_cpu_pool_cores());
    return check_exit("test_cpu_bind");
}
