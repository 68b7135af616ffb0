// The optimizer tier (include/zinf/zinf_offload.h) over a synthetic partition, no model: at
// cpu and nvme, for sub-groups of one segment, a few and all, with the pipelines on and
// off, in the foreground and in the background, three updates give bit for bit what
// cpu_adam's zinf_optim_step gives over the whole partition at once, in the master
// weights, both moments and every 16-bit parameter handed to `store`. Also the
// synchronous reads and writes, zeroing, the "updated" waits, and the errors; what is
// pinned.
// Speculation (cpu, background): sub-groups updated as their segments are said final,
// in reverse order as a backward makes them, give the same bits when the guess was
// right, when it was wrong (restored and redone), and after a cancelled step's guess.
// timeout: 20 san=20 cuda-emu=25 san-cuda-emu=25
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "gpu_test.h"

// Segments as the engine makes them: multiples of 2048 elements, one empty.
static const size_t seg_n[] = {4096, 0, 8192, 2048, 6144, 2048, 10240};
enum { NSEG = sizeof seg_n / sizeof seg_n[0], STEPS = 3 };

static size_t total(void) {
    size_t n = 0;
    for (int i = 0; i < NSEG; i++)
        n += seg_n[i];
    return n;
}

// A value in [-0.5, 0.5) that depends only on key.
static float value(uint64_t key) {
    uint64_t z = key * 0x9e3779b97f4a7c15ull + 1;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (float)((double)((z ^ (z >> 31)) >> 11) / 9007199254740992.0 - 0.5);
}

static zinf_optim_hparams hparams(int step) {
    return (zinf_optim_hparams){.kind = ZINF_OPTIM_ADAMW,
                                .lr = 1e-2,
                                .beta1 = 0.9,
                                .beta2 = 0.999,
                                .eps = 1e-8,
                                .weight_decay = 0.1,
                                .bias_correction = true,
                                .step = step,
                                .grad_scale = 0.5f};
}

static void grads_of(int step, float *g, size_t n) {
    for (size_t i = 0; i < n; i++)
        g[i] = value(1000003u * (uint64_t)step + i);
}

// What `store` received, per element of the partition, in bf16.
typedef struct sink {
    uint16_t *out;
    size_t *off;
    int calls;
} sink;

static zinf_status store(void *ctx, int seg, const void *src) {
    sink *k = ctx;
    memcpy(k->out + k->off[seg], src, seg_n[seg] * sizeof(uint16_t));
    k->calls++;
    return ZINF_OK;
}

typedef struct reference {
    float *master, *m, *v;
    uint16_t *out;
} reference;

static void make_reference(zinf_cpu_pool *cpu, reference *r, size_t n) {
    r->master = malloc(n * sizeof(float)), r->m = calloc(n, sizeof(float)), r->v = calloc(n, sizeof(float));
    r->out = malloc(n * sizeof(uint16_t));
    float *g = malloc(n * sizeof *g);
    for (size_t i = 0; i < n; i++)
        r->master[i] = value(i);
    for (int s = 1; s <= STEPS; s++) {
        grads_of(s, g, n);
        zinf_optim_hparams h = hparams(s);
        zinf_optim_tile t = {.param = r->master,
                             .exp_avg = r->m,
                             .exp_avg_sq = r->v,
                             .grad = g,
                             .grad_dtype = ZINF_DTYPE_F32,
                             .out = r->out,
                             .out_dtype = ZINF_DTYPE_BF16,
                             .n = n};
        TRY(zinf_optim_step(cpu, &h, &t));
    }
    free(g);
}

typedef struct variant {
    zinf_offload_device where;
    int64_t sub_group;
    bool read, write, background;
    // 0: no; 1: every guess right; 2: step 2's guess wrong, step 3's first cancelled; 3
    // (nvme): every guess right, the step before any gradient is final
    int speculate;
    size_t room;   // speculate_elements: 0 for the whole partition
    int fits;      // the sub-groups that fit in it, the last first; 0: all
} variant;

static int groups(const zinf_optim_tier *t) {
    zinf_optim_tier_stats st;
    zinf_optim_tier_get_stats(t, &st);
    return st.subgroups;
}

// The sub-groups a backward's speculation updates: those that fit (va->fits), or all;
// on cpu all but the first, final last: once every sub-group is final the step's
// update does the rest, in place, faster than an update from elsewhere.
static int speculable(const zinf_optim_tier *t, const variant *va) {
    return va->fits ? va->fits : groups(t) - (va->where == ZINF_OFFLOAD_CPU);
}

// Every segment final, the last first, as a backward makes them, 20 ms apart and
// 100 ms before the first (which makes every sub-group final): long enough for the
// thread to update each sub-group as it is final (tens of microseconds each), which the
// times then say it did.
static void all_final(zinf_optim_tier *t, const variant *va, const char *what) {
    for (int i = NSEG; i-- > 0;) {
        usleep(i == 0 ? 100 * 1000 : 20 * 1000);
        zinf_optim_tier_grads_final(t, i);
    }
    usleep(20 * 1000);
    zinf_optim_tier_stop_speculating(t, NULL);
    zinf_optim_tier_times tt;
    zinf_optim_tier_take_times(t, &tt);
    int want = speculable(t, va);
    CHECK(tt.speculated == want && tt.speculated_ns > 0, "%s: %d of %d sub-groups speculated in %lld ns, want %d",
          what, tt.speculated, groups(t), (long long)tt.speculated_ns, want);
}

static void speculate(zinf_optim_tier *t, const variant *va, int step, const zinf_optim_hparams *h, const char *what) {
    zinf_optim_hparams guess = *h;
    if (va->speculate == 3) { // the sub-groups read ahead by then are updated (on the thread), not read again
        TRY(zinf_optim_tier_speculate(t, &guess));
        usleep(100 * 1000);
        zinf_optim_tier_stop_speculating(t, h);
        zinf_optim_tier_times tt;
        zinf_optim_tier_take_times(t, &tt);
        int want = 1 + va->read < groups(t) ? 1 + va->read : groups(t);
        CHECK(tt.speculated == want, "%s: step %d: %d sub-groups updated at the stop, want %d", what, step,
              tt.speculated, want);
        return;
    }
    if (va->speculate == 2 && step == 3) { // a step that overflowed: its guess is undone, the step skipped
        guess.grad_scale = 2.0f;
        TRY(zinf_optim_tier_speculate(t, &guess));
        all_final(t, va, what);
        int restored;
        TRY(zinf_optim_tier_cancel(t, &restored));
        CHECK(restored == speculable(t, va), "%s: %d sub-groups restored", what, restored);
        guess = *h;
    }
    if (va->speculate == 2 && step == 2) guess.grad_scale = 0.25f; // the step clipped
    TRY(zinf_optim_tier_speculate(t, &guess));
    all_final(t, va, what);
}

// An update reads and writes each state of the partition once on nvme, its early reads
// and speculation counted with it, none wasted (when the guess was right); nothing on
// cpu.
static void update_io(zinf_optim_tier *t, const variant *va, size_t n, int step, const char *what) {
    zinf_optim_tier_times tt;
    zinf_optim_tier_take_times(t, &tt);
    int64_t want = va->where == ZINF_OFFLOAD_NVME ? (int64_t)(12 * n) : 0;
    CHECK(tt.update_io_bytes[0] == want && tt.update_io_bytes[1] == want,
          "%s: step %d: the update read %lld and wrote %lld swap bytes, want %lld", what, step,
          (long long)tt.update_io_bytes[0], (long long)tt.update_io_bytes[1], (long long)want);
}

static void run(const variant *va, const reference *r, zinf_device *dev, zinf_cpu_pool *cpu, zinf_aio *aio,
                const char *dir) {
    size_t n = total();
    char what[128];
    snprintf(what, sizeof what, "%s sub_group %lld read %d write %d background %d speculate %d",
             va->where == ZINF_OFFLOAD_CPU ? "cpu" : "nvme", (long long)va->sub_group, va->read, va->write,
             va->background, va->speculate);
    zinf_host_pool *host;
    TRY(zinf_host_pool_create(&host, &(zinf_host_pool_config){.dev = dev, .local_ranks = 1, .pinned_limit = -1}));
    zinf_latch *failure;
    TRY(zinf_latch_create(&failure));
    zinf_stream *ss;
    TRY(zinf_stream_create(dev, &ss));
    sink k = {.out = calloc(n, sizeof(uint16_t)), .off = calloc(NSEG, sizeof(size_t))};
    for (int i = 1; i < NSEG; i++)
        k.off[i] = k.off[i - 1] + seg_n[i - 1];
    const char *paths[] = {dir};
    zinf_optim_tier_config c = {.device = va->where,
                                .seg_n = seg_n,
                                .nseg = NSEG,
                                .sub_group_size = va->sub_group,
                                .param_dtype = ZINF_DTYPE_BF16,
                                .pin_memory = true,
                                .pipeline_read = va->read,
                                .pipeline_write = va->write,
                                .background = va->background,
                                .speculate_elements = !va->speculate ? 0
                                                      : va->room     ? va->room
                                                                     : n,
                                .swap = {.paths = paths, .npaths = 1, .run = "optim-tier-test", .rank = 0, .aio = aio},
                                .dev = dev,
                                .host = host,
                                .cpu = cpu,
                                .failure = failure,
                                .store = store,
                                .store_ctx = &k,
                                .store_stream = ss};
    zinf_optim_tier *t;
    TRY(zinf_optim_tier_create(&t, &c));
    TRY(zinf_host_pool_pin(host));

    float *buf = malloc(n * sizeof *buf), *got = malloc(n * sizeof *got);
    for (size_t i = 0; i < n; i++)
        buf[i] = value(i);
    TRY(zinf_optim_tier_write(t, ZINF_TIER_MASTER, 0, n, buf));
    TRY(zinf_optim_tier_zero_states(t));
    for (int s = 1; s <= STEPS; s++) {
        if (!va->speculate) TRY(zinf_optim_tier_preread(t)); // as backward starts, as the engine
        grads_of(s, zinf_optim_tier_grads(t), n);
        zinf_optim_hparams h = hparams(s);
        if (!va->background) {
            TRY(zinf_optim_tier_update(t, &h));
            update_io(t, va, n, s, what);
            continue;
        }
        int redone, wrong = va->speculate == 2 && s == 2;
        if (va->speculate) speculate(t, va, s, &h, what);
        TRY(zinf_optim_tier_start(t, &h, &redone));
        CHECK(redone == (wrong ? speculable(t, va) : 0), "%s: step %d: %d sub-groups redone", what, s, redone);
        for (int i = 0; i < NSEG; i++) // in forward order, as the next step's gathers would
            TRY(zinf_optim_tier_wait_updated(t, i, ss));
        for (int i = 0; i < NSEG; i++)
            CHECK(zinf_optim_tier_updated(t, i), "%s: segment %d not updated after its wait", what, i);
        zinf_optim_tier_join(t);
        if (va->speculate != 2 || s == 1) update_io(t, va, n, s, what); // a wrong guess reads again
        TRY(zinf_stream_sync(ss));
        zinf_optim_tier_settled(t);
        CHECK(zinf_latch_raise(failure) == ZINF_OK, "%s: %s", what, zinf_last_error());
        // The update reads the gradients and leaves them (the engine's next backward
        // overwrites them).
        TRY(zinf_optim_tier_read(t, ZINF_TIER_GRAD, 0, n, got));
        grads_of(s, buf, n);
        CHECK(memcmp(got, buf, n * sizeof *got) == 0, "%s: step %d: the update changed the gradients", what, s);
    }
    TRY(zinf_stream_sync(ss));
    const float *want[] = {r->master, r->m, r->v};
    const char *names[] = {"master", "exp_avg", "exp_avg_sq"};
    for (int s = 0; s < 3; s++) {
        TRY(zinf_optim_tier_read(t, (zinf_tier_state)s, 0, n, got));
        CHECK(memcmp(got, want[s], n * sizeof *got) == 0, "%s: %s differs from cpu_adam's", what, names[s]);
    }
    CHECK(memcmp(k.out, r->out, n * sizeof *k.out) == 0, "%s: the stored bf16 parameters differ", what);
    CHECK(k.calls == STEPS * (NSEG - 1), "%s: store called %d times, want %d", what, k.calls, STEPS * (NSEG - 1));
    zinf_optim_tier_stats st;
    zinf_optim_tier_get_stats(t, &st);
    int want_groups = va->sub_group <= 1 ? NSEG - 1 : va->sub_group >= (int64_t)n ? 1 : 0;
    if (want_groups) CHECK(st.subgroups == want_groups, "%s: %d sub-groups, want %d", what, st.subgroups, want_groups);
    CHECK((st.nvme_bytes > 0) == (va->where == ZINF_OFFLOAD_NVME), "%s: %lld swap bytes", what,
          (long long)st.nvme_bytes);
    // Pinned: what the device copies (the gradients, the 16-bit parameters on their way
    // out and held, the swap buffers), never the states in host memory, nor their spares.
    int64_t states = va->where == ZINF_OFFLOAD_CPU ? 12 * (int64_t)(n + c.speculate_elements) : 0;
    CHECK(st.pinned_bytes == st.host_bytes - states, "%s: %lld of %lld host bytes pinned, want all but %lld", what,
          (long long)st.pinned_bytes, (long long)st.host_bytes, (long long)states);

    // A range written alone reads back, and leaves the rest.
    for (size_t i = 0; i < 100; i++)
        buf[i] = (float)i;
    TRY(zinf_optim_tier_write(t, ZINF_TIER_EXP_AVG, 5000, 100, buf));
    TRY(zinf_optim_tier_read(t, ZINF_TIER_EXP_AVG, 4999, 102, got));
    CHECK(got[0] == r->m[4999] && memcmp(got + 1, buf, 100 * sizeof *got) == 0 && got[101] == r->m[5100],
          "%s: a written range reads back wrong", what);
    zinf_optim_tier_destroy(t);
    zinf_stream_destroy(ss);
    zinf_latch_destroy(failure);
    zinf_host_pool_destroy(host);
    free(k.out), free(k.off), free(buf), free(got);
}

int main(void) {
    zinf_device *dev = test_device(0);
    zinf_cpu_pool *cpu;
    TRY(zinf_cpu_pool_create(&cpu, 0));
    zinf_aio *aio;
    CHECK(zinf_aio_create(&aio, NULL) == 0, "aio: %s", zinf_last_error());
    char dir[] = "/var/tmp/zinf-optim-tier-XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    reference r;
    make_reference(cpu, &r, total());
    const variant vs[] = {
        {ZINF_OFFLOAD_CPU, 1, false, false, false, 0, 0, 0},
        {ZINF_OFFLOAD_CPU, 12000, false, false, true, 0, 0, 0},
        {ZINF_OFFLOAD_NVME, 1, true, true, false, 0, 0, 0},
        {ZINF_OFFLOAD_NVME, 12000, true, false, false, 0, 0, 0},
        {ZINF_OFFLOAD_NVME, 12000, false, true, true, 0, 0, 0},
        {ZINF_OFFLOAD_NVME, 1 << 30, false, false, false, 0, 0, 0},
        {ZINF_OFFLOAD_NVME, 1, true, true, true, 0, 0, 0},
        {ZINF_OFFLOAD_CPU, 1, false, false, true, 1, 0, 0},
        {ZINF_OFFLOAD_CPU, 12000, false, false, true, 2, 0, 0},
        // Sub-groups of 4096, 10240, 8192 and 10240 elements: the last two fit in 19000.
        {ZINF_OFFLOAD_CPU, 12000, false, false, true, 2, 19000, 2},
        // nvme: through one buffer, three (read ahead, write behind), and two.
        {ZINF_OFFLOAD_NVME, 1, false, false, true, 1, 0, 0},
        {ZINF_OFFLOAD_NVME, 12000, true, true, true, 2, 0, 0},
        {ZINF_OFFLOAD_NVME, 12000, true, false, true, 2, 19000, 2},
        {ZINF_OFFLOAD_NVME, 1, true, true, true, 3, 0, 0},
    };
    for (size_t i = 0; i < sizeof vs / sizeof vs[0]; i++)
        run(&vs[i], &r, dev, cpu, aio, dir);

    // The device tier is the engine's own, never this object's.
    zinf_optim_tier *t = NULL;
    zinf_optim_tier_config bad = {.device = ZINF_OFFLOAD_NONE, .seg_n = seg_n, .nseg = NSEG};
    CHECK(zinf_optim_tier_create(&t, &bad) == ZINF_ERR_INVAL && !t, "a device tier was accepted");
    CHECK_CONTAINS(zinf_last_error(), "cpu or nvme");
    // Without a thread nothing starts in the background; NULL tiers are done at once.
    CHECK(zinf_optim_tier_updated(NULL, 0), "a NULL tier is not updated");
    CHECK(zinf_optim_tier_wait_updated(NULL, 0, NULL) == ZINF_OK, "waiting on a NULL tier failed");

    rmdir(dir);
    free(r.master), free(r.m), free(r.v), free(r.out);
    zinf_aio_destroy(aio);
    zinf_cpu_pool_destroy(cpu);
    zinf_device_destroy(dev);
    return check_exit("test_offload_optim_tier");
}
