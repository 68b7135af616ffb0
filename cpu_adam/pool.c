// The CPU thread pool: persistent workers pinned one per physical core (NUMA node by
// node, SMT siblings last), woken per call with a generation counter. Contiguous,
// repeatable ranges keep each worker on the memory it first touched.
#include <errno.h>
#include <numa.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

#include "internal.h"

struct zinf_cpu_pool {
    int n;
    pthread_t *threads;
    int *cpu; // the CPU worker i is pinned to, -1 when not pinned
    // The CPUs of the cores no worker is pinned to (SMT siblings of pinned ones left out):
    // where the threads that move data and feed the device run beside the pool.
    int *spare, nspare;
    pthread_mutex_t lock;
    pthread_cond_t wake, done;
    pthread_mutex_t run_lock; // one zinf_cpu_pool_run at a time
    uint64_t gen;             // bumped per run
    int pending;              // workers still in this run
    bool stop;
    void (*fn)(void *, int, int);
    void *arg;
};

typedef struct worker_arg {
    zinf_cpu_pool *pool;
    int i;
} worker_arg;

static void *worker(void *p) {
    worker_arg a = *(worker_arg *)p;
    free(p);
    zinf_cpu_pool *pool = a.pool;
    uint64_t seen = 0;
    pthread_mutex_lock(&pool->lock);
    for (;;) {
        while (pool->gen == seen && !pool->stop)
            pthread_cond_wait(&pool->wake, &pool->lock);
        if (pool->stop) break;
        seen = pool->gen;
        void (*fn)(void *, int, int) = pool->fn;
        void *arg = pool->arg;
        pthread_mutex_unlock(&pool->lock);
        fn(arg, a.i, pool->n);
        pthread_mutex_lock(&pool->lock);
        if (--pool->pending == 0) pthread_cond_signal(&pool->done);
    }
    pthread_mutex_unlock(&pool->lock);
    return NULL;
}

// ---- which CPUs ----

typedef struct cpu_key {
    int cpu, node;
    long package, core; // -1 when sysfs does not say
    bool sibling;       // a later hardware thread of a core already listed
} cpu_key;

static int by_placement(const void *a, const void *b) {
    const cpu_key *x = a, *y = b;
    if (x->sibling != y->sibling) return x->sibling - y->sibling;
    if (x->node != y->node) return x->node - y->node;
    return x->cpu - y->cpu;
}

// The CPUs this process may run on, one per physical core first (by NUMA node), then
// the other hardware threads. Returns how many; *physical gets the core count.
static int placement(cpu_key **out, int *physical) {
    cpu_set_t set;
    *out = NULL;
    *physical = 0;
    if (sched_getaffinity(0, sizeof set, &set) != 0) return 0;
    int n = CPU_COUNT(&set), k = 0;
    cpu_key *keys = calloc((size_t)n, sizeof *keys);
    if (!keys) return 0;
    bool numa = numa_available() >= 0;
    for (int c = 0; c < CPU_SETSIZE && k < n; c++) {
        if (!CPU_ISSET(c, &set)) continue;
        keys[k] = (cpu_key){.cpu = c, .node = numa ? numa_node_of_cpu(c) : 0};
        if (!cpu_core_of(c, &keys[k].package, &keys[k].core)) keys[k].package = keys[k].core = -1;
        for (int j = 0; j < k; j++)
            if (keys[j].core >= 0 && keys[j].package == keys[k].package && keys[j].core == keys[k].core)
                keys[k].sibling = true;
        *physical += !keys[k].sibling;
        k++;
    }
    qsort(keys, (size_t)k, sizeof *keys, by_placement);
    *out = keys;
    return k;
}

static bool same_core(const cpu_key *a, const cpu_key *b) {
    return a->core >= 0 ? a->package == b->package && a->core == b->core : a->cpu == b->cpu;
}

// ---- the pool ----

static void stop_all(zinf_cpu_pool *pool, int started) {
    pthread_mutex_lock(&pool->lock);
    pool->stop = true;
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->lock);
    for (int i = 0; i < started; i++)
        pthread_join(pool->threads[i], NULL);
}

static void free_pool(zinf_cpu_pool *pool) {
    pthread_mutex_destroy(&pool->lock);
    pthread_mutex_destroy(&pool->run_lock);
    pthread_cond_destroy(&pool->wake);
    pthread_cond_destroy(&pool->done);
    free(pool->threads);
    free(pool->cpu);
    free(pool->spare);
    free(pool);
}

zinf_status zinf_cpu_pool_create(zinf_cpu_pool **out, int threads) {
    *out = NULL;
    if (threads < 0 || threads > 4096)
        return zinf_fail(ZINF_ERR_INVAL, "cpu pool: %d threads (0 for one per core, at most 4096)", threads);
    cpu_key *cpus;
    int physical, ncpu = placement(&cpus, &physical);
    if (threads == 0) threads = physical > 0 ? physical : 1;
    zinf_cpu_pool *pool = calloc(1, sizeof *pool);
    if (pool) {
        pool->threads = calloc((size_t)threads, sizeof *pool->threads);
        pool->cpu = malloc((size_t)threads * sizeof *pool->cpu);
        pool->spare = malloc(((size_t)ncpu + 1) * sizeof *pool->spare);
    }
    if (!pool || !pool->threads || !pool->cpu || !pool->spare) {
        if (pool) free(pool->threads), free(pool->cpu), free(pool->spare);
        free(pool);
        free(cpus);
        return zinf_fail(ZINF_ERR_NOMEM, "cpu pool: out of memory");
    }
    pool->n = threads;
    pthread_mutex_init(&pool->lock, NULL);
    pthread_mutex_init(&pool->run_lock, NULL);
    pthread_cond_init(&pool->wake, NULL);
    pthread_cond_init(&pool->done, NULL);
    // More workers than CPUs would only share them: then nobody is pinned.
    for (int i = 0; i < threads; i++)
        pool->cpu[i] = threads <= ncpu ? cpus[i].cpu : -1;
    for (int j = 0; threads <= ncpu && j < ncpu; j++) {
        bool taken = false;
        for (int i = 0; i < threads && !taken; i++)
            taken = same_core(&cpus[i], &cpus[j]);
        if (!taken) pool->spare[pool->nspare++] = cpus[j].cpu;
    }
    free(cpus);

    int started = 0, err = 0;
    for (; started < threads; started++) {
        worker_arg *a = malloc(sizeof *a);
        if (!a) {
            err = ENOMEM;
            break;
        }
        *a = (worker_arg){pool, started};
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        if (pool->cpu[started] >= 0) {
            cpu_set_t one;
            CPU_ZERO(&one);
            CPU_SET(pool->cpu[started], &one);
            pthread_attr_setaffinity_np(&attr, sizeof one, &one); // pinned before it runs
        }
        err = pthread_create(&pool->threads[started], &attr, worker, a);
        pthread_attr_destroy(&attr);
        if (err) {
            free(a);
            break;
        }
    }
    if (err) {
        stop_all(pool, started);
        free_pool(pool);
        return zinf_fail(zinf_status_from_errno(err), "cpu pool: cannot start %d threads: %s", threads, strerror(err));
    }
    *out = pool;
    return ZINF_OK;
}

void zinf_cpu_pool_destroy(zinf_cpu_pool *pool) {
    if (!pool) return;
    stop_all(pool, pool->n);
    free_pool(pool);
}

int zinf_cpu_pool_threads(const zinf_cpu_pool *pool) { return pool->n; }

int zinf_cpu_pool_spare(const zinf_cpu_pool *pool, const int **cpus) {
    *cpus = pool->spare;
    return pool->nspare;
}

int zinf_cpu_pool_cores(void) {
    cpu_key *cpus;
    int physical;
    placement(&cpus, &physical);
    free(cpus);
    return physical > 0 ? physical : 1;
}

void zinf_cpu_pool_run(zinf_cpu_pool *pool, void (*fn)(void *, int, int), void *arg) {
    pthread_mutex_lock(&pool->run_lock);
    pthread_mutex_lock(&pool->lock);
    pool->fn = fn;
    pool->arg = arg;
    pool->pending = pool->n;
    pool->gen++;
    pthread_cond_broadcast(&pool->wake);
    while (pool->pending)
        pthread_cond_wait(&pool->done, &pool->lock);
    pthread_mutex_unlock(&pool->lock);
    pthread_mutex_unlock(&pool->run_lock);
}

void zinf_cpu_pool_range(const zinf_cpu_pool *pool, size_t n, int i, size_t *lo, size_t *hi) {
    size_t units = (n + 63) / 64, t = (size_t)pool->n;
    *lo = units * (size_t)i / t * 64;
    *hi = units * ((size_t)i + 1) / t * 64;
    if (*lo > n) *lo = n;
    if (*hi > n) *hi = n;
}

typedef struct touch_job {
    zinf_cpu_pool *pool;
    char *buf;
    size_t n, size;
} touch_job;

static void touch_worker(void *arg, int i, int nthreads) {
    (void)nthreads;
    touch_job *j = arg;
    size_t lo, hi;
    zinf_cpu_pool_range(j->pool, j->n, i, &lo, &hi);
    memset(j->buf + lo * j->size, 0, (hi - lo) * j->size);
}

void zinf_cpu_pool_touch(zinf_cpu_pool *pool, void *buf, size_t n, size_t elem_size) {
    touch_job j = {pool, buf, n, elem_size};
    zinf_cpu_pool_run(pool, touch_worker, &j);
}
