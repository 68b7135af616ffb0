// The device as the engine relies on it: a capacity that really refuses (with a
// message naming the request and what is in use) and is known before the device is
// made (zinf_device_choose), an account that returns to zero,
// pinned memory, and stream/event ordering: a copy on one stream that another stream
// waits on is seen complete, and without the wait it is not (on the host backend,
// where the first stream is made slow on purpose); freeing waits for no stream, and a
// buffer freed unused is taken again at once.
// timeout: 10 san=10 cuda-emu=10 san-cuda-emu=20
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "gpu_test.h"

static void test_capacity(void) {
    zinf_device *d = test_device(1 << 20);
    zinf_device_mem m;
    void *a, *a2, *b, *c;
    CHECK(zinf_device_get_caps(d)->capacity == 1 << 20, "capacity %llu",
          (unsigned long long)zinf_device_get_caps(d)->capacity);
    TRY(zinf_device_alloc(d, 100 << 10, "grads", &c));
    TRY(zinf_device_alloc(d, 300 << 10, "activations", &a));
    TRY(zinf_device_alloc(d, 300 << 10, "activations", &a2));
    zinf_status st = zinf_device_alloc(d, 400 << 10, "gathered params", &b);
    CHECK(st == ZINF_ERR_NOMEM && b == NULL, "400 KiB more in 1 MiB: %s", zinf_status_str(st));
    const char *msg = zinf_last_error();
    CHECK_CONTAINS(msg, "400 KiB for gathered params");
    CHECK_CONTAINS(msg, "700 KiB of 1 MiB in use in 3 buffers");
    CHECK_CONTAINS(msg, "activations 600 KiB in 2, grads 100 KiB in 1"); // by purpose, the most first
    TRY(zinf_device_alloc(d, 300 << 10, "gathered params", &b)); // what is left still fits
    zinf_device_get_mem(d, &m);
    CHECK(m.in_use == 1000 << 10 && m.allocations == 4, "in use %llu in %lld", (unsigned long long)m.in_use,
          (long long)m.allocations);
    zinf_device_free(d, a);
    zinf_device_free(d, a2);
    zinf_device_free(d, b);
    TRY(zinf_device_alloc(d, 900 << 10, "gathered params", &b));
    zinf_device_free(d, b);
    zinf_device_free(d, c);
    zinf_device_get_mem(d, &m);
    CHECK(m.in_use == 0 && m.allocations == 0 && m.peak == 1000 << 10, "after frees: %llu in use, peak %llu",
          (unsigned long long)m.in_use, (unsigned long long)m.peak);
    CHECK(zinf_device_alloc(d, 0, "nothing", &a) == ZINF_ERR_INVAL, "a 0-byte allocation was accepted");

    // Pinned memory is host memory: not in the device account, usable by copies.
    void *h;
    TRY(zinf_pinned_alloc(d, 3 << 20, &h));
    memset(h, 0x5a, 3 << 20);
    zinf_device_get_mem(d, &m);
    CHECK(m.in_use == 0, "pinned memory counted as device memory");
    char *own = aligned_alloc(4096, 1 << 16);
    TRY(zinf_pinned_register(d, own, 1 << 16));
    zinf_pinned_unregister(d, own);
    free(own);
    zinf_pinned_free(d, h);
    zinf_device_destroy(d);

    zinf_device_params bad = {.backend = (zinf_backend)7};
    CHECK(zinf_device_create(&d, &bad) == ZINF_ERR_INVAL, "backend 7 accepted");
}

typedef struct slow_write {
    unsigned char *buf;
    size_t n;
    int value;
} slow_write;

// Stands in for a long kernel: the stream is busy, then the data changes.
static void slow_fill(void *arg) {
    slow_write *w = arg;
    nanosleep(&(struct timespec){0, 200 * 1000 * 1000}, NULL);
    memset(w->buf, w->value, w->n);
}

// Stream A: slow fill of a pinned buffer, then copy it to the device, then record.
// Stream B: (wait), then copy the device buffer back. Returns the byte B saw.
static int handoff(zinf_device *d, bool wait) {
    enum { N = 1 << 20 };
    zinf_stream *a, *b;
    zinf_event *e;
    unsigned char *src, *dst;
    void *dbuf;
    TRY(zinf_stream_create(d, &a));
    TRY(zinf_stream_create(d, &b));
    TRY(zinf_event_create(d, &e));
    TRY(zinf_pinned_alloc(d, N, (void **)&src));
    TRY(zinf_pinned_alloc(d, N, (void **)&dst));
    TRY(zinf_device_alloc(d, N, "handoff", &dbuf));
    memset(src, 1, N);
    TRY(zinf_copy_async(a, dbuf, src, N, ZINF_COPY_H2D));
    TRY(zinf_stream_sync(a)); // the device holds 1s
    CHECK(zinf_event_done(e), "an event never recorded is not done");

    slow_write w = {src, N, 2};
    TRY(zinf_stream_host_fn(a, slow_fill, &w));
    TRY(zinf_copy_async(a, dbuf, src, N, ZINF_COPY_H2D));
    TRY(zinf_event_record(e, a));
    if (wait) TRY(zinf_stream_wait_event(b, e));
    TRY(zinf_copy_async(b, dst, dbuf, N, ZINF_COPY_D2H));
    if (wait) CHECK(!zinf_event_done(e), "the event is done while its stream sleeps");
    TRY(zinf_stream_sync(b));
    int seen = dst[0];
    for (size_t i = 1; i < N; i++)
        if (dst[i] != seen) seen = -1; // torn: part old, part new
    TRY(zinf_event_sync(e));
    CHECK(zinf_event_done(e), "the event is not done after its sync");
    zinf_device_free(d, dbuf);
    zinf_pinned_free(d, src);
    zinf_pinned_free(d, dst);
    zinf_event_destroy(e);
    zinf_stream_destroy(a);
    zinf_stream_destroy(b);
    return seen;
}

// zinf_device_choose says what zinf_device_create makes, without making it.
static void test_choose(void) {
    int64_t limits[] = {0, 1 << 20};
    for (size_t i = 0; i < sizeof limits / sizeof *limits; i++) {
        zinf_device_params p = {.backend = test_backend(), .memory_limit = limits[i]};
        zinf_device_choice c;
        TRY(zinf_device_choose(&p, &c));
        zinf_device *d = test_device(limits[i]);
        const zinf_device_caps *caps = zinf_device_get_caps(d);
        CHECK(c.backend == caps->backend && c.capacity == caps->capacity, "chose %s with %llu, made %s with %llu",
              zinf_backend_name(c.backend), (unsigned long long)c.capacity, zinf_backend_name(caps->backend),
              (unsigned long long)caps->capacity);
        // A card refuses a limit past its memory, in the choice as in creation.
        if (caps->backend == ZINF_BACKEND_CUDA) {
            p.memory_limit = (int64_t)caps->total_memory + 1;
            CHECK(zinf_device_choose(&p, &c) == ZINF_ERR_INVAL, "a limit past the card's memory was chosen");
            CHECK_CONTAINS(zinf_last_error(), "device.memory_limit");
        }
        zinf_device_destroy(d);
    }
}

static void test_ordering(void) {
    zinf_device *d = test_device(0);
    int seen = handoff(d, true);
    CHECK(seen == 2, "stream B waited on the event and saw %d, not the new data (2)", seen);
    // The control: without the wait, B runs while A sleeps. On a GPU the outcome of
    // a race is not certain, so only the host backend, whose timing is, checks it.
    if (zinf_device_get_caps(d)->backend == ZINF_BACKEND_HOST) {
        seen = handoff(d, false);
        CHECK(seen == 1, "without the wait, stream B saw %d; the old data (1) was expected", seen);
    }

    // Many small ops in order on one stream: each copy sees the one before it.
    zinf_stream *s;
    TRY(zinf_stream_create(d, &s));
    enum { STEPS = 1000 };
    int32_t *h, *dv;
    TRY(zinf_pinned_alloc(d, STEPS * sizeof *h, (void **)&h));
    TRY(zinf_device_alloc(d, STEPS * sizeof *h, "chain", (void **)&dv));
    for (int i = 0; i < STEPS; i++)
        h[i] = i + 1;
    TRY(zinf_memset_async(s, dv, 0, STEPS * sizeof *h));
    TRY(zinf_copy_async(s, dv, h, sizeof *h, ZINF_COPY_H2D));
    for (int i = 1; i < STEPS; i++) // dv[i] = dv[i-1]: a chain only ordered execution completes
        TRY(zinf_copy_async(s, dv + i, dv + i - 1, sizeof *h, ZINF_COPY_D2D));
    TRY(zinf_stream_sync(s)); // h is the source of the first copy until it has run
    memset(h, 0, STEPS * sizeof *h);
    TRY(zinf_copy_async(s, h, dv, STEPS * sizeof *h, ZINF_COPY_D2H));
    TRY(zinf_stream_sync(s));
    int wrong = 0;
    for (int i = 0; i < STEPS; i++)
        wrong += h[i] != 1;
    CHECK(wrong == 0, "%d of %d chained copies out of order", wrong, STEPS);
    zinf_device_free(d, dv);
    zinf_pinned_free(d, h);
    zinf_stream_destroy(s);
    zinf_device_destroy(d);
}

static double seconds_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static atomic_bool free_gate;

// Stands in for a kernel that runs until the test lets it end (10 s at most).
static void run_until_gate(void *arg) {
    double t0 = seconds_now();
    while (!atomic_load(&free_gate) && seconds_now() - t0 < 10)
        nanosleep(&(struct timespec){0, 1000 * 1000}, NULL);
    *(double *)arg = seconds_now() - t0;
}

static void *open_gate_later(void *arg) {
    (void)arg;
    nanosleep(&(struct timespec){0, 200 * 1000 * 1000}, NULL);
    atomic_store(&free_gate, true);
    return NULL;
}

// A buffer freed and another taken while a stream's work runs wait for none of it: a
// step frees and takes gradient and gathered buffers module by module under its
// kernels (cudaFree would drain every stream of the device).
static void test_free_beside_work(void) {
    zinf_device *d = test_device(0);
    zinf_stream *s;
    TRY(zinf_stream_create(d, &s));
    void *buf, *again;
    TRY(zinf_device_alloc(d, 1 << 20, "freed", &buf));
    double ran = -1;
    atomic_store(&free_gate, false);
    TRY(zinf_stream_host_fn(s, run_until_gate, &ran));
    double t0 = seconds_now();
    zinf_device_free(d, buf);
    TRY(zinf_device_alloc(d, 1 << 20, "taken again", &again));
    double took = seconds_now() - t0;
    atomic_store(&free_gate, true);
    TRY(zinf_stream_sync(s));
    CHECK(took < 5 && ran < 9, "freeing and allocating took %.2f s while the stream's work ran (%.2f s): they "
          "waited for it", took, ran);
    zinf_device_mem m;
    zinf_device_get_mem(d, &m);
    CHECK(m.allocations == 1, "%lld buffers in the account, 1 expected", (long long)m.allocations);
    zinf_device_free(d, again);

    // A buffer freed unused serves the next allocation at once, where the device holds
    // only one of the two (the emulated one has 1 GiB) and a stream's work runs; freed
    // with zinf_device_free, it would wait for that work.
    void *big, *big2;
    TRY(zinf_device_alloc(d, (size_t)600 << 20, "freed unused", &big));
    atomic_store(&free_gate, false);
    TRY(zinf_stream_host_fn(s, run_until_gate, &ran));
    t0 = seconds_now();
    zinf_device_free_unused(d, big);
    TRY(zinf_device_alloc(d, (size_t)600 << 20, "taken again", &big2));
    took = seconds_now() - t0;
    atomic_store(&free_gate, true);
    TRY(zinf_stream_sync(s));
    CHECK(took < 5 && ran < 9,
          "a buffer freed unused served the next allocation after %.2f s, while the stream's "
          "work ran (%.2f s)",
          took, ran);

    // Freed the waiting way, it is given back once that work has run: an allocation that
    // does not fit meanwhile waits for the frees queued, and then fits.
    atomic_store(&free_gate, false);
    TRY(zinf_stream_host_fn(s, run_until_gate, &ran));
    zinf_device_free(d, big2);
    pthread_t opener;
    pthread_create(&opener, NULL, open_gate_later, NULL);
    zinf_status st = zinf_device_alloc(d, (size_t)600 << 20, "after the queued free", &big);
    pthread_join(opener, NULL);
    TRY(zinf_stream_sync(s));
    CHECK(st == ZINF_OK, "an allocation the queued free makes room for failed: %s", zinf_last_error());
    if (st == ZINF_OK) zinf_device_free(d, big);
    zinf_stream_destroy(s);
    zinf_device_destroy(d);
}

// A bad op is refused when submitted, with its name, and the stream goes on.
static void test_bad_args(void) {
    zinf_device *d = test_device(0);
    zinf_stream *s;
    TRY(zinf_stream_create(d, &s));
    zinf_gemm_args g = {.dt = ZINF_DTYPE_F32, .m = 4, .n = 4, .k = 0};
    CHECK(zinf_gemm(s, &g) == ZINF_ERR_INVAL, "gemm with k = 0 accepted");
    CHECK_CONTAINS(zinf_last_error(), "gemm");
    CHECK(zinf_gelu_fwd(s, ZINF_DTYPE_NONE, (void *)8, (void *)8, 1) == ZINF_ERR_INVAL, "gelu of dtype none accepted");
    zinf_attention_args a = {.dt = ZINF_DTYPE_F32, .B = 1, .T = 4, .C = 10, .NH = 3};
    CHECK(zinf_attention_fwd(s, &a) == ZINF_ERR_INVAL, "C not a multiple of NH accepted");
    zinf_optim_hparams h = {.kind = ZINF_OPTIM_ADAMW, .lr = -1, .beta1 = 0.9, .beta2 = 0.99, .step = 1};
    zinf_optim_tile t = {.grad_dtype = ZINF_DTYPE_F32};
    CHECK(zinf_device_optim(s, &h, &t) == ZINF_ERR_INVAL, "lr -1 accepted");
    CHECK_CONTAINS(zinf_last_error(), "lr");
    TRY(zinf_stream_sync(s));
    zinf_stream_destroy(s);
    zinf_device_destroy(d);
}

// Timed events bracket the 200 ms host function a stream runs between them; untimed
// ones and events not yet reached are refused.
static void test_elapsed(void) {
    zinf_device *d = test_device(0);
    zinf_stream *s;
    zinf_event *a, *b, *plain;
    TRY(zinf_stream_create(d, &s));
    TRY(zinf_event_create_timed(d, &a));
    TRY(zinf_event_create_timed(d, &b));
    TRY(zinf_event_create(d, &plain));
    unsigned char byte;
    slow_write w = {&byte, 1, 3};
    TRY(zinf_event_record(a, s));
    TRY(zinf_stream_host_fn(s, slow_fill, &w));
    TRY(zinf_event_record(b, s));
    double secs = -1;
    CHECK(zinf_event_elapsed(a, b, &secs) == ZINF_ERR_INVAL, "elapsed before the stream reached the end event");
    TRY(zinf_stream_sync(s));
    TRY(zinf_event_elapsed(a, b, &secs));
    CHECK(secs >= 0.19 && secs < 5, "the events bracket a 200 ms sleep but are %.3f s apart", secs);
    TRY(zinf_event_record(plain, s));
    TRY(zinf_stream_sync(s));
    CHECK(zinf_event_elapsed(a, plain, &secs) == ZINF_ERR_INVAL, "an untimed event has no time");
    zinf_event_destroy(a);
    zinf_event_destroy(b);
    zinf_event_destroy(plain);
    zinf_stream_destroy(s);
    zinf_device_destroy(d);
}

int main(void) {
    setenv("CUDA_EMU_MEMORY", "1G", 0); // the emulated device's memory (test_free_beside_work)
    test_capacity();
    test_choose();
    test_ordering();
    test_elapsed();
    test_free_beside_work();
    test_bad_args();
    return check_exit("test_gpu_device");
}
