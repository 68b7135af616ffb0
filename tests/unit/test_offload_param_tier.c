// The parameter tier (include/zinf/zinf_offload.h) with synthetic slices, no model, on one
// rank (a gather is the slice itself): on the device, in host memory, and on nvme with
// a resident prefix and a pool of three buffers. Along a trace with uses repeated, reads
// run ahead while more than one buffer is free, never more than the pool holds, and
// every gather gives the slice's latest bytes, including after stores from host memory
// queued on the tier's stream. Those stores hand the first slices on disk to the pool
// while more than one buffer is free, and the next pass reads exactly the rest from
// disk. Also the synchronous writes and reads at an offset (a write drops the slice's
// handoff), the stats, and reading with the pool exhausted.
// timeout: 10 san=10 cuda-emu=10 san-cuda-emu=10
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "gpu_test.h"

static const size_t slice[] = {2048, 4096, 0, 2048, 6144, 2048, 4096};
static const char *const names[] = {"m0", "m1", "m2", "m3", "m4", "m5", "m6"};
enum { NMOD = 7, POOL = 3 };

typedef struct lender {
    zinf_stream *comm;
    int gathers;
} lender;

// One rank: the gathered buffer is the slice.
static zinf_status gather(void *ctx, const void *mine, bool mine_host, void *full, size_t bytes) {
    lender *l = ctx;
    l->gathers++;
    return zinf_copy_async(l->comm, full, mine, bytes, mine_host ? ZINF_COPY_H2D : ZINF_COPY_D2D);
}

static uint16_t elem(int mod, size_t i, int version) { return (uint16_t)(mod * 7919 + i * 31 + version * 101); }

static void fill(uint16_t *p, int mod, int version) {
    for (size_t i = 0; i < slice[mod]; i++)
        p[i] = elem(mod, i, version);
}

static void run(zinf_offload_device where, zinf_device *dev, zinf_aio *aio, const char *dir) {
    const char *what = where == ZINF_OFFLOAD_NONE ? "device" : where == ZINF_OFFLOAD_CPU ? "cpu" : "nvme";
    zinf_host_pool *host;
    TRY(zinf_host_pool_create(&host, &(zinf_host_pool_config){.dev = dev, .local_ranks = 1, .pinned_limit = -1}));
    zinf_latch *failure;
    TRY(zinf_latch_create(&failure));
    zinf_stream *cs, *xs;
    TRY(zinf_stream_create(dev, &cs));
    TRY(zinf_stream_create(dev, &xs));
    lender l = {.comm = xs};
    const char *paths[] = {dir};
    zinf_param_tier_config c = {.device = where,
                                .slice = slice,
                                .names = names,
                                .nmod = NMOD,
                                .dtype = ZINF_DTYPE_BF16,
                                .pin_memory = true,
                                .max_in_cpu = 6144,
                                .buffer_size = 1024,
                                .buffer_count = POOL,
                                .swap = {.paths = paths, .npaths = 1, .run = "param-tier-test", .rank = 0, .aio = aio},
                                .dev = dev,
                                .compute = cs,
                                .comm = xs,
                                .host = host,
                                .failure = failure,
                                .gather = gather,
                                .gather_ctx = &l};
    zinf_param_tier *t;
    TRY(zinf_param_tier_create(&t, &c));
    TRY(zinf_host_pool_pin(host));
    zinf_param_tier_stats st;
    zinf_param_tier_get_stats(t, &st);
    if (where == ZINF_OFFLOAD_NVME) {
        // m0, m1 and the empty m2 fit in 6144 elements; the pool's buffers hold the
        // largest slice on disk.
        CHECK(st.resident == 3 && st.buffers == POOL && st.buffer_bytes == 6144 * 2 && st.nvme_bytes >= 14336 * 2,
              "%s: resident %d, %d buffers of %lld bytes, %lld on disk", what, st.resident, st.buffers,
              (long long)st.buffer_bytes, (long long)st.nvme_bytes);
        CHECK(!zinf_param_tier_on_disk(t, 1) && zinf_param_tier_on_disk(t, 3) && !zinf_param_tier_on_disk(t, 2),
              "%s: on disk wrong", what);
    }
    CHECK((st.host_bytes > 0) == (where != ZINF_OFFLOAD_NONE), "%s: %lld host bytes", what, (long long)st.host_bytes);
    CHECK((zinf_param_tier_device_slice(t, 0) != NULL) == (where == ZINF_OFFLOAD_NONE), "%s: device slice", what);

    uint16_t *h = malloc(6144 * sizeof *h), *got = malloc(6144 * sizeof *got);
    void *full;
    TRY(zinf_device_alloc(dev, 6144 * sizeof *h, "gathered", &full));
    for (int m = 0; m < NMOD; m++) {
        fill(h, m, 0);
        TRY(zinf_param_tier_write(t, m, 0, slice[m], h));
    }
    // Two passes along a trace with repeats; between them every slice gets a new
    // version by a store from host memory (the optimizer's way), which must land first.
    const int trace[] = {0, 1, 3, 4, 5, 6, 5, 4, 3, 1, 0};
    int ntrace = sizeof trace / sizeof trace[0];
    uint16_t *stores[NMOD];
    for (int version = 0; version < 2; version++) {
        zinf_aio_stats before, after;
        zinf_aio_get_stats(aio, &before);
        for (int i = 0; i < ntrace; i++) {
            int most = 0;
            for (int j = i; j < ntrace && zinf_param_tier_free_buffers(t) > 1; j++) {
                int x = trace[j];
                if (zinf_param_tier_on_disk(t, x) && !zinf_param_tier_has_read(t, x)) TRY(zinf_param_tier_read(t, x));
            }
            for (int m = 0; m < NMOD; m++)
                most += zinf_param_tier_has_read(t, m);
            CHECK(most <= POOL, "%s: %d reads in flight with a pool of %d", what, most, POOL);
            int x = trace[i];
            TRY(zinf_param_tier_gather(t, x, full));
            TRY(zinf_copy_async(xs, got, full, slice[x] * sizeof *got, ZINF_COPY_D2H));
            TRY(zinf_stream_sync(xs));
            fill(h, x, version);
            CHECK(memcmp(got, h, slice[x] * sizeof *h) == 0, "%s: version %d: gather of m%d at use %d is wrong", what,
                  version, x, i);
        }
        // Every use of a slice on disk (m3, m4, m5 twice, m6 once: 24576 elements) is
        // read, but for the first uses of m3 and m4, handed over by the last stores.
        zinf_aio_get_stats(aio, &after);
        uint64_t reads = where == ZINF_OFFLOAD_NVME ? 2 * (24576 - (version ? 2048 + 6144 : 0)) : 0;
        CHECK(after.read_bytes - before.read_bytes == reads, "%s: version %d: %llu bytes read from disk, want %llu",
              what, version, (unsigned long long)(after.read_bytes - before.read_bytes), (unsigned long long)reads);
        zinf_param_tier_forget_reads(t);
        CHECK(zinf_param_tier_free_buffers(t) == (where == ZINF_OFFLOAD_NVME ? POOL : 0), "%s: %d buffers free", what,
              zinf_param_tier_free_buffers(t));
        for (int m = 0; m < NMOD; m++) {
            CHECK(posix_memalign((void **)&stores[m], 4096, slice[m] * sizeof *h + 1) == 0, "posix_memalign");
            fill(stores[m], m, version + 1);
            if (slice[m]) TRY(zinf_param_tier_store(t, m, stores[m], true));
        }
        TRY(zinf_stream_sync(zinf_param_tier_stream(t)));
        for (int m = 0; m < NMOD; m++)
            free(stores[m]);
        // The stores handed m3 and m4 over (the pool keeps its last buffer for a read on
        // demand) and wrote every slice on disk.
        bool nvme = where == ZINF_OFFLOAD_NVME;
        zinf_param_tier_get_stats(t, &st);
        CHECK(st.handoff_bytes == (nvme ? 2 * (2048 + 6144) * (version + 1) : 0), "%s: %lld bytes handed over", what,
              (long long)st.handoff_bytes);
        CHECK(zinf_param_tier_has_read(t, 3) == nvme && zinf_param_tier_has_read(t, 4) == nvme &&
                  !zinf_param_tier_has_read(t, 5) && !zinf_param_tier_has_read(t, 6),
              "%s: the handed-over slices", what);
    }
    // A range at an offset inside a slice, written and read synchronously.
    for (size_t i = 0; i < 100; i++)
        h[i] = (uint16_t)(60000 + i);
    TRY(zinf_param_tier_write(t, 4, 1000, 100, h));
    TRY(zinf_param_tier_copy_out(t, 4, 999, 102, got));
    CHECK(got[0] == elem(4, 999, 2) && memcmp(got + 1, h, 200) == 0 && got[101] == elem(4, 1100, 2),
          "%s: a written range reads back wrong", what);
    // The write dropped m4's handoff: its gather reads the written slice.
    CHECK(!zinf_param_tier_has_read(t, 4), "%s: m4's handoff outlived a write", what);
    TRY(zinf_param_tier_gather(t, 4, full));
    TRY(zinf_copy_async(xs, got, full, slice[4] * sizeof *got, ZINF_COPY_D2H));
    TRY(zinf_stream_sync(xs));
    CHECK(got[999] == elem(4, 999, 2) && memcmp(got + 1000, h, 200) == 0 && got[1100] == elem(4, 1100, 2),
          "%s: the gather after a write is wrong", what);
    zinf_param_tier_forget_reads(t); // m3's handoff, as at a step's end
    // A module in tiles: m4's slice in parts of 2048 elements, last first; on disk it is
    // read once, at the first part, and its buffer stays taken until the release.
    zinf_aio_stats before, after;
    zinf_aio_get_stats(aio, &before);
    for (int k = 2; k >= 0; k--) {
        TRY(zinf_param_tier_gather_part(t, 4, (size_t)k * 2048, 2048, full));
        TRY(zinf_copy_async(xs, got, full, 2048 * sizeof *got, ZINF_COPY_D2H));
        TRY(zinf_stream_sync(xs));
        size_t a = (size_t)k * 2048;
        bool ok = true;
        for (size_t i = 0; i < 2048; i++)
            ok &= got[i] == (a + i >= 1000 && a + i < 1100 ? h[a + i - 1000] : elem(4, a + i, 2));
        CHECK(ok, "%s: part %d of m4 is wrong", what, k);
        CHECK(zinf_param_tier_free_buffers(t) == (where == ZINF_OFFLOAD_NVME ? POOL - 1 : 0),
              "%s: %d buffers free during m4's parts", what, zinf_param_tier_free_buffers(t));
    }
    TRY(zinf_param_tier_release(t, 4));
    zinf_aio_get_stats(aio, &after);
    CHECK(after.read_bytes - before.read_bytes == (where == ZINF_OFFLOAD_NVME ? 6144 * 2 : 0),
          "%s: m4's parts read %llu bytes from disk", what, (unsigned long long)(after.read_bytes - before.read_bytes));
    CHECK(zinf_param_tier_free_buffers(t) == (where == ZINF_OFFLOAD_NVME ? POOL : 0), "%s: %d buffers free after "
          "m4's release", what, zinf_param_tier_free_buffers(t));
    CHECK(zinf_latch_raise(failure) == ZINF_OK, "%s: %s", what, zinf_last_error());
    if (where == ZINF_OFFLOAD_NVME) {
        for (int m = 3; m < 6; m++)
            TRY(zinf_param_tier_read(t, m));
        CHECK(zinf_param_tier_read(t, 6) == ZINF_ERR_INTERNAL, "%s: a read past the pool was taken", what);
        CHECK_CONTAINS(zinf_last_error(), "m6");
        TRY(zinf_stream_sync(zinf_param_tier_stream(t)));
        zinf_param_tier_forget_reads(t);
    }
    zinf_device_free(dev, full);
    zinf_param_tier_destroy(t);
    zinf_stream_destroy(cs), zinf_stream_destroy(xs);
    zinf_latch_destroy(failure);
    zinf_host_pool_destroy(host);
    free(h), free(got);
}

int main(void) {
    zinf_device *dev = test_device(0);
    zinf_aio *aio;
    CHECK(zinf_aio_create(&aio, NULL) == 0, "aio: %s", zinf_last_error());
    char dir[] = "/var/tmp/zinf-param-tier-XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    run(ZINF_OFFLOAD_NONE, dev, aio, dir);
    run(ZINF_OFFLOAD_CPU, dev, aio, dir);
    run(ZINF_OFFLOAD_NVME, dev, aio, dir);
    rmdir(dir);
    zinf_aio_destroy(aio);
    zinf_device_destroy(dev);
    return check_exit("test_offload_param_tier");
}
