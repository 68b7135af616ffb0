// The host pool (include/zinf/zinf_offload.h): allocations held to the pinned budget and to
// the host memory available, refused with the budget, the buffer and what to change
// named; buffers mapped before zinf_host_pool_pin are pinned then, later ones at once;
// page alignment; the usage counts; freeing a buffer that is not the pool's; and the
// budgets' rule (zinf_host_pool_budgets) on a made-up machine.
// timeout: 10 san=10 cuda-emu=10 san-cuda-emu=10
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "gpu_test.h"

// The budgets' rule on a made-up machine: 8 GiB available, 2 ranks, 1 GiB locked at most.
static void test_budgets(void) {
    const int64_t G = 1 << 30;
    zinf_host_mem hm = {.available_bytes = 8ull << 30, .memlock_limit = 1ull << 30};
    zinf_host_budgets b = zinf_host_pool_budgets(&hm, 2, true, G, -1); // the device's 1 GiB is host memory
    CHECK(b.host == 3 * G && b.pinned == G / 2, "host backend: %lld host, %lld pinned", (long long)b.host,
          (long long)b.pinned);
    b = zinf_host_pool_budgets(&hm, 2, false, G, -1); // CUDA's driver pins past the locked-memory limit
    CHECK(b.host == 4 * G && b.pinned == 2 * G, "cuda: %lld host, %lld pinned", (long long)b.host, (long long)b.pinned);
    hm.lock_unlimited = true;
    b = zinf_host_pool_budgets(&hm, 2, true, G, -1);
    CHECK(b.pinned == 3 * G / 2, "CAP_IPC_LOCK: %lld pinned", (long long)b.pinned);
    b = zinf_host_pool_budgets(&hm, 1, true, 9 * G, 12345); // the limit set; the device holds it all
    CHECK(b.host == 0 && b.pinned == 12345, "limit: %lld host, %lld pinned", (long long)b.host, (long long)b.pinned);
}

int main(void) {
    test_budgets();
    zinf_device *dev = test_device(0);
    zinf_host_pool *p;
    TRY(zinf_host_pool_create(&p, &(zinf_host_pool_config){.dev = dev, .local_ranks = 1, .pinned_limit = 1 << 20}));
    zinf_host_pool_usage u;
    zinf_host_pool_get_usage(p, &u);
    CHECK(u.pinned_budget == 1 << 20 && u.host_budget > 0 && u.pinned == 0, "budgets %lld, %lld",
          (long long)u.pinned_budget, (long long)u.host_budget);

    void *a = NULL, *b = NULL, *c = NULL, *d = NULL;
    TRY(zinf_host_pool_alloc(p, 600 << 10, true, "first", &a));
    CHECK(a && (uintptr_t)a % 4096 == 0, "pinned buffer %p not page-aligned", a);
    memset(a, 1, 600 << 10);
    // 600 KiB + 600 KiB passes the 1 MiB budget: refused, naming it and what to change.
    CHECK(zinf_host_pool_alloc(p, 600 << 10, true, "second buffers", &b) == ZINF_ERR_NOMEM && !b, "over budget");
    CHECK_CONTAINS(zinf_last_error(), "second buffers");
    CHECK_CONTAINS(zinf_last_error(), "pinned budget");
    CHECK_CONTAINS(zinf_last_error(), "device.pinned_memory_limit");
    CHECK(zinf_host_pool_refused(p), "a budget refusal not flagged");
    // Pageable memory does not count against the pinned budget.
    TRY(zinf_host_pool_alloc(p, 600 << 10, false, "pageable", &c));
    CHECK(c && (uintptr_t)c % 4096 == 0 && !zinf_host_pool_refused(p), "pageable buffer");
    TRY(zinf_host_pool_pin(p));
    TRY(zinf_host_pool_alloc(p, 100 << 10, true, "after pinning", &d)); // pinned at once
    zinf_host_pool_get_usage(p, &u);
    CHECK(u.pinned == (700 << 10) && u.host == (1300 << 10), "usage: %lld pinned, %lld host", (long long)u.pinned,
          (long long)u.host);
    // Past the host memory there is: refused with the host budget's advice.
    void *e = NULL;
    CHECK(zinf_host_pool_alloc(p, (size_t)u.host_budget, false, "too much", &e) == ZINF_ERR_NOMEM && !e,
          "past the host budget");
    CHECK_CONTAINS(zinf_last_error(), "move a tier to nvme");
    zinf_host_pool_free(p, a, true);
    zinf_host_pool_free(p, c, false);
    int x;
    zinf_host_pool_free(p, &x, true); // not the pool's: said, nothing freed
    zinf_host_pool_destroy(p);        // gives back d
    zinf_device_destroy(dev);
    return check_exit("test_offload_host_pool");
}
