// The host pool: every offload tier's host buffers, held to the pinned budget and to
// the host memory there is. Pinned buffers are page-aligned mappings, recorded so that
// they are pinned together once every tier has passed the budgets.
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "zinf_internal.h"
#include "zinf_offload.h"

// A mapping to be pinned, and whether it is yet.
typedef struct pinned_block {
    void *p;
    size_t bytes;
    bool pinned;
} pinned_block;

struct zinf_host_pool {
    zinf_device *dev;
    int64_t pinned_used, pinned_budget, host_used, host_budget;
    bool refused; // the last allocation was past a budget
    pinned_block *blocks;
    int nblocks, capblocks;
    bool pin_now;
};

const char *zinf_host_pool_hint(bool pinned) {
    return pinned
               ? "raise device.pinned_memory_limit (and `ulimit -l`), set offload_optimizer/offload_param.pin_memory "
                 "to false, or lower zero_optimization.sub_group_size, offload_param.buffer_count, buffer_size or "
                 "max_in_cpu"
               : "move a tier to nvme (zero_optimization.offload_optimizer/offload_param.device), lower "
                 "offload_param.max_in_cpu or zero_optimization.sub_group_size, or run fewer ranks per host";
}

zinf_host_budgets zinf_host_pool_budgets(const zinf_host_mem *hm, int local_ranks, bool host_backend,
                                         int64_t device_bytes, int64_t pinned_limit) {
    int64_t local = local_ranks > 0 ? local_ranks : 1;
    int64_t avail = (int64_t)(hm->available_bytes / (uint64_t)local) - (host_backend ? device_bytes : 0);
    zinf_host_budgets b = {.host = avail > 0 ? avail : 0};
    int64_t pin = b.host / 2;
    if (host_backend && !hm->lock_unlimited && hm->memlock_limit != UINT64_MAX &&
        (int64_t)(hm->memlock_limit / (uint64_t)local) < pin)
        pin = (int64_t)(hm->memlock_limit / (uint64_t)local);
    b.pinned = pinned_limit >= 0 ? pinned_limit : pin;
    return b;
}

// The budgets from the machine's memory now, and what the device holds by now.
static zinf_status budgets(zinf_host_pool *p, const zinf_host_pool_config *cfg) {
    zinf_host_mem hm;
    ZINF_CHECK(zinf_host_mem_probe(&hm));
    zinf_device_mem dm;
    zinf_device_get_mem(cfg->dev, &dm);
    bool host = zinf_device_get_caps(cfg->dev)->backend == ZINF_BACKEND_HOST;
    zinf_host_budgets b = zinf_host_pool_budgets(&hm, cfg->local_ranks, host, (int64_t)dm.in_use, cfg->pinned_limit);
    p->pinned_budget = b.pinned, p->host_budget = b.host;
    return ZINF_OK;
}

zinf_status zinf_host_pool_create(zinf_host_pool **out, const zinf_host_pool_config *cfg) {
    *out = NULL;
    zinf_host_pool *p = calloc(1, sizeof *p);
    if (!p) return zinf_fail(ZINF_ERR_NOMEM, "host pool: out of memory");
    p->dev = cfg->dev;
    zinf_status st = budgets(p, cfg);
    if (st != ZINF_OK) {
        free(p);
        return st;
    }
    *out = p;
    return ZINF_OK;
}

void zinf_host_pool_destroy(zinf_host_pool *p) {
    if (!p) return;
    while (p->nblocks)
        zinf_host_pool_free(p, p->blocks[0].p, true);
    free(p->blocks);
    free(p);
}

// A page-aligned mapping for a buffer to be pinned, recorded; pinned now once
// zinf_host_pool_pin has run.
static zinf_status map_block(zinf_host_pool *p, size_t bytes, const char *what, void **out) {
    char a[32];
    if (p->nblocks == p->capblocks) {
        int cap = p->capblocks ? 2 * p->capblocks : 16;
        pinned_block *n = realloc(p->blocks, (size_t)cap * sizeof *n);
        if (!n) return zinf_fail(ZINF_ERR_NOMEM, "host pool: out of memory");
        p->blocks = n, p->capblocks = cap;
    }
    void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return zinf_fail_errno(errno, "engine: mapping %s of host memory for %s", zinf_size_format(bytes, a, sizeof a),
                               what);
    pinned_block *b = &p->blocks[p->nblocks++];
    *b = (pinned_block){m, bytes, false};
    *out = m;
    if (!p->pin_now) return ZINF_OK;
    zinf_status st = zinf_pinned_register(p->dev, m, bytes);
    if (st != ZINF_OK) {
        *out = NULL;
        munmap(m, bytes);
        p->nblocks--;
        return st;
    }
    b->pinned = true;
    return ZINF_OK;
}

zinf_status zinf_host_pool_alloc(zinf_host_pool *p, size_t bytes, bool pinned, const char *what, void **out) {
    char a[32], b[32], c[32];
    *out = NULL;
    bool past_pinned = pinned && p->pinned_used + (int64_t)bytes > p->pinned_budget;
    bool past_host = p->host_used + (int64_t)bytes > p->host_budget;
    p->refused = past_pinned || past_host;
    if (past_pinned)
        return zinf_fail(ZINF_ERR_NOMEM,
                         "engine: %s need %s of pinned host memory, but %s of the %s pinned budget "
                         "is left; %s",
                         what, zinf_size_format(bytes, a, sizeof a),
                         zinf_size_format((uint64_t)(p->pinned_budget - p->pinned_used), b, sizeof b),
                         zinf_size_format((uint64_t)p->pinned_budget, c, sizeof c), zinf_host_pool_hint(true));
    if (past_host)
        return zinf_fail(ZINF_ERR_NOMEM,
                         "engine: %s need %s of host memory, but this rank's share of the memory "
                         "available is %s and %s is taken; %s",
                         what, zinf_size_format(bytes, a, sizeof a),
                         zinf_size_format((uint64_t)p->host_budget, b, sizeof b),
                         zinf_size_format((uint64_t)p->host_used, c, sizeof c), zinf_host_pool_hint(false));
    if (pinned) {
        ZINF_CHECK(map_block(p, bytes ? bytes : 4096, what, out));
        p->pinned_used += (int64_t)bytes;
    } else if (posix_memalign(out, 4096, bytes ? bytes : 4096) != 0) {
        *out = NULL;
        return zinf_fail(ZINF_ERR_NOMEM, "engine: out of host memory for %s (%s)", what,
                         zinf_size_format(bytes, a, sizeof a));
    }
    p->host_used += (int64_t)bytes;
    return ZINF_OK;
}

void zinf_host_pool_free(zinf_host_pool *p, void *buf, bool pinned) {
    if (!buf || !pinned) {
        free(buf);
        return;
    }
    for (int i = 0; i < p->nblocks; i++) {
        pinned_block *b = &p->blocks[i];
        if (b->p != buf) continue;
        if (b->pinned) zinf_pinned_unregister(p->dev, buf);
        munmap(buf, b->bytes);
        *b = p->blocks[--p->nblocks];
        return;
    }
    ZINF_LOG_ERROR("zinf_host_pool_free: %p is not a pinned buffer of this pool", buf); // a broken invariant
}

zinf_status zinf_host_pool_pin(zinf_host_pool *p) {
    p->pin_now = true;
    for (int i = 0; i < p->nblocks; i++) {
        pinned_block *b = &p->blocks[i];
        if (b->pinned) continue;
        ZINF_CHECK(zinf_pinned_register(p->dev, b->p, b->bytes));
        b->pinned = true;
    }
    return ZINF_OK;
}

bool zinf_host_pool_refused(const zinf_host_pool *p) { return p && p->refused; }

void zinf_host_pool_get_usage(const zinf_host_pool *p, zinf_host_pool_usage *out) {
    memset(out, 0, sizeof *out);
    if (!p) return;
    *out = (zinf_host_pool_usage){.pinned = p->pinned_used,
                                  .pinned_budget = p->pinned_budget,
                                  .host = p->host_used,
                                  .host_budget = p->host_budget};
}
