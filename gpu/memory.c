// Device memory with an account against the capacity, and pinned host memory: every
// allocation is listed (what it is for, how big), so an out-of-memory error can say
// what is in use, and destroy can give back what a caller forgot.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "internal.h"

typedef enum alloc_kind {
    ALLOC_DEVICE,
    ALLOC_PINNED,     // zinf_pinned_alloc: mmap + register
    ALLOC_REGISTERED, // the caller's memory, registered
} alloc_kind;

struct alloc_entry {
    void *p;
    size_t bytes; // as asked (device memory: the account rounds it, zinf_device_account_bytes)
    alloc_kind kind;
    char what[48];
    alloc_entry *next;
};

// What device memory holds, by purpose, the most first: "gradient buckets 786 MiB in 2,
// gathered parameters 600 MiB in 12". Grouping tells a full device apart from one big
// buffer, and names the knob to turn.
static void holders(const zinf_device *d, char *out, size_t len) {
    enum { MAX_GROUPS = 32, SHOWN = 4 };
    struct group {
        const char *what;
        size_t bytes, n;
    } g[MAX_GROUPS];
    int ng = 0;
    for (const alloc_entry *e = d->allocs; e; e = e->next) {
        if (e->kind != ALLOC_DEVICE) continue;
        int i = 0;
        while (i < ng && strcmp(g[i].what, e->what) != 0)
            i++;
        if (i == ng) {
            if (ng == MAX_GROUPS) continue;
            g[ng++] = (struct group){e->what, 0, 0};
        }
        g[i].bytes += zinf_device_account_bytes(e->bytes), g[i].n++;
    }
    size_t at = 0;
    out[0] = '\0';
    for (int k = 0; k < SHOWN && k < ng && at < len; k++) {
        int top = k; // selection: bring the next largest group to position k
        for (int i = k + 1; i < ng; i++)
            if (g[i].bytes > g[top].bytes) top = i;
        struct group t = g[k];
        g[k] = g[top], g[top] = t;
        char sz[32];
        at += (size_t)snprintf(out + at, len - at, "%s%s %s in %zu", k ? ", " : "", g[k].what,
                               zinf_size_format(g[k].bytes, sz, sizeof sz), g[k].n);
    }
}

static zinf_status out_of_memory(const zinf_device *d, size_t bytes, const char *what) {
    char want[32], used[32], cap[32], big[320], index[16] = "";
    holders(d, big, sizeof big);
    if (d->caps.index >= 0) snprintf(index, sizeof index, " %d", d->caps.index); // a CUDA device's
    return zinf_fail(
        ZINF_ERR_NOMEM,
        "device out of memory: %s for %s does not fit on %s device%s: %s of %s in use in %lld buffers%s%s",
        zinf_size_format(bytes, want, sizeof want), what, d->be->name, index,
        zinf_size_format(d->mem.in_use, used, sizeof used), zinf_size_format(d->mem.capacity, cap, sizeof cap),
        (long long)d->mem.allocations, big[0] ? ": " : "", big);
}

static alloc_entry *entry_new(void *p, size_t bytes, alloc_kind kind, const char *what) {
    alloc_entry *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    e->p = p;
    e->bytes = bytes;
    e->kind = kind;
    snprintf(e->what, sizeof e->what, "%s", what ? what : "unnamed");
    return e;
}

// Unlink and return the entry of p (NULL when p is not one of d's).
static alloc_entry *entry_take(zinf_device *d, void *p, alloc_kind kind) {
    for (alloc_entry **at = &d->allocs; *at; at = &(*at)->next) {
        if ((*at)->p == p && (*at)->kind == kind) {
            alloc_entry *e = *at;
            *at = e->next;
            return e;
        }
    }
    return NULL;
}

static void entry_push(zinf_device *d, alloc_entry *e) {
    pthread_mutex_lock(&d->lock);
    e->next = d->allocs;
    d->allocs = e;
    pthread_mutex_unlock(&d->lock);
}

// Rounded up so buffers stay 256-byte aligned in the account as on the card.
size_t zinf_device_account_bytes(size_t bytes) { return (bytes + 255) & ~(size_t)255; }

zinf_status zinf_device_alloc(zinf_device *d, size_t bytes, const char *what, void **out) {
    *out = NULL;
    if (!what) what = "unnamed";
    if (bytes == 0) return zinf_fail(ZINF_ERR_INVAL, "device alloc for %s: 0 bytes", what);
    size_t rounded = zinf_device_account_bytes(bytes);
    pthread_mutex_lock(&d->lock);
    if (rounded > d->mem.capacity - d->mem.in_use) {
        zinf_status st = out_of_memory(d, bytes, what);
        pthread_mutex_unlock(&d->lock);
        return st;
    }
    // Reserve first so that concurrent allocations cannot both pass the check.
    d->mem.in_use += rounded;
    pthread_mutex_unlock(&d->lock);

    // The backend gets the exact size: where its memory is the host's (the host backend,
    // the tests' CUDA emulation), ASan then sees a kernel read one element past the end.
    void *p = NULL;
    zinf_status st = d->be->mem_alloc(d, bytes, &p);
    alloc_entry *e = st == ZINF_OK ? entry_new(p, bytes, ALLOC_DEVICE, what) : NULL;
    pthread_mutex_lock(&d->lock);
    if (!e) {
        d->mem.in_use -= rounded;
        pthread_mutex_unlock(&d->lock);
        if (st == ZINF_OK) {
            d->be->mem_free(d, p, bytes, true);
            return zinf_fail(ZINF_ERR_NOMEM, "device alloc for %s: out of host memory for its account", what);
        }
        return st;
    }
    d->mem.allocations++;
    if (d->mem.in_use > d->mem.peak) d->mem.peak = d->mem.in_use;
    pthread_mutex_unlock(&d->lock);
    entry_push(d, e);
    *out = p;
    return ZINF_OK;
}

static void give_back(zinf_device *d, void *p, bool unused) {
    if (!p) return;
    pthread_mutex_lock(&d->lock);
    alloc_entry *e = entry_take(d, p, ALLOC_DEVICE);
    if (e) {
        d->mem.in_use -= zinf_device_account_bytes(e->bytes);
        d->mem.allocations--;
    }
    pthread_mutex_unlock(&d->lock);
    // Freeing what this device never gave out is a broken invariant in the caller.
    if (!e) {
        ZINF_LOG_ERROR("zinf_device_free: %p is not an allocation of this device", p);
        return;
    }
    d->be->mem_free(d, p, e->bytes, unused);
    free(e);
}

void zinf_device_free(zinf_device *d, void *p) { give_back(d, p, false); }

void zinf_device_free_unused(zinf_device *d, void *p) { give_back(d, p, true); }

void zinf_device_get_mem(zinf_device *d, zinf_device_mem *out) {
    pthread_mutex_lock(&d->lock);
    *out = d->mem;
    pthread_mutex_unlock(&d->lock);
}

// ---- pinned host memory ----
// mmap gives page-aligned memory that no allocator shares; registering it (mlock or
// cudaHostRegister) faults every page in from the calling thread, so under the default
// first-touch policy the pages land on that thread's NUMA node.

zinf_status zinf_pinned_alloc(zinf_device *d, size_t bytes, void **out) {
    *out = NULL;
    if (bytes == 0) return zinf_fail(ZINF_ERR_INVAL, "pinned alloc: 0 bytes");
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        char sz[32];
        return zinf_fail_errno(errno, "pinned alloc of %s", zinf_size_format(bytes, sz, sizeof sz));
    }
    zinf_status st = d->be->host_register(d, p, bytes);
    alloc_entry *e = st == ZINF_OK ? entry_new(p, bytes, ALLOC_PINNED, "pinned") : NULL;
    if (!e) {
        if (st == ZINF_OK) {
            d->be->host_unregister(d, p, bytes);
            st = zinf_fail(ZINF_ERR_NOMEM, "pinned alloc: out of host memory for its account");
        }
        munmap(p, bytes);
        return st;
    }
    entry_push(d, e);
    *out = p;
    return ZINF_OK;
}

void zinf_pinned_free(zinf_device *d, void *p) {
    if (!p) return;
    pthread_mutex_lock(&d->lock);
    alloc_entry *e = entry_take(d, p, ALLOC_PINNED);
    pthread_mutex_unlock(&d->lock);
    if (!e) {
        ZINF_LOG_ERROR("zinf_pinned_free: %p is not a pinned allocation of this device", p);
        return;
    }
    d->be->host_unregister(d, p, e->bytes);
    munmap(p, e->bytes);
    free(e);
}

zinf_status zinf_pinned_register(zinf_device *d, void *p, size_t bytes) {
    if (!p || bytes == 0) return zinf_fail(ZINF_ERR_INVAL, "pinned register: empty region");
    alloc_entry *e = entry_new(p, bytes, ALLOC_REGISTERED, "registered");
    if (!e) return zinf_fail(ZINF_ERR_NOMEM, "pinned register: out of host memory for its account");
    zinf_status st = d->be->host_register(d, p, bytes);
    if (st != ZINF_OK) {
        free(e);
        return st;
    }
    entry_push(d, e);
    return ZINF_OK;
}

void zinf_pinned_unregister(zinf_device *d, void *p) {
    if (!p) return;
    pthread_mutex_lock(&d->lock);
    alloc_entry *e = entry_take(d, p, ALLOC_REGISTERED);
    pthread_mutex_unlock(&d->lock);
    if (!e) {
        ZINF_LOG_ERROR("zinf_pinned_unregister: %p was not registered with this device", p);
        return;
    }
    d->be->host_unregister(d, p, e->bytes);
    free(e);
}

void zinf_device_destroy(zinf_device *d) {
    if (!d) return;
    int rows;
    if (d->profile) zinf_device_profile_stop(d, NULL, 0, &rows); // its events go before the device
    alloc_entry *e = d->allocs;
    if (e) ZINF_LOG_WARN("device destroyed with %lld buffers still allocated", (long long)d->mem.allocations);
    while (e) {
        alloc_entry *next = e->next;
        if (e->kind == ALLOC_DEVICE) {
            d->be->mem_free(d, e->p, e->bytes, false);
        } else {
            d->be->host_unregister(d, e->p, e->bytes);
            if (e->kind == ALLOC_PINNED) munmap(e->p, e->bytes);
        }
        free(e);
        e = next;
    }
    d->be->close(d);
    pthread_mutex_destroy(&d->lock);
    free(d);
}
