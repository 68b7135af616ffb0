// The prefetcher (include/zinf/zinf_offload.h) on synthetic traces, no model and no device:
// no decisions before a trace exists; along a recorded trace the gathers ahead stop at
// the bucket and live budgets; a module stays gathered when it persists or is used again
// within the reuse distance; a departure stops every decision for the rest of the step
// and its uses become the next step's trace; the live counts and their peak; a module
// in tiles is a use that is never gathered and spans the window by its elements.
// timeout: 10 san=10 cuda-emu=10 san-cuda-emu=10
#include <stdlib.h>

#include "check.h"
#include "zinf.h"

static const size_t numel[] = {100, 1000, 1000, 50};
static const size_t padded[] = {2048, 2048, 4096, 2048}, tiled[] = {2048, 2048, 0, 2048}; // tiled: m2 in tiles
static const char *const names[] = {"m0", "m1", "m2", "m3"};

static zinf_prefetch *make_with(const size_t *pad, int64_t bucket, int64_t live, int64_t persist, int64_t reuse) {
    zinf_prefetch *p = NULL;
    zinf_prefetch_config c = {.nmod = 4,
                              .numel = numel,
                              .padded = pad,
                              .names = names,
                              .bucket_size = bucket,
                              .max_live = live,
                              .persistence_threshold = persist,
                              .max_reuse_distance = reuse};
    CHECK(zinf_prefetch_create(&p, &c) == ZINF_OK, "create: %s", zinf_last_error());
    return p;
}

static zinf_prefetch *make(int64_t bucket, int64_t live, int64_t persist, int64_t reuse) {
    return make_with(padded, bucket, live, persist, reuse);
}

// What the coordinator does for one use: the use, an on-demand gather, then the release
// unless kept, and the decisions ahead, which it returns (as digits, -1 terminated).
static int use(zinf_prefetch *p, int x, int *ahead) {
    CHECK(zinf_prefetch_use(p, x) == ZINF_OK, "use %d", x);
    if (!zinf_prefetch_is_gathered(p, x)) zinf_prefetch_gathered(p, x);
    if (!zinf_prefetch_keep(p, x)) zinf_prefetch_released(p, x);
    return zinf_prefetch_ahead(p, ahead);
}

static void step(zinf_prefetch *p, const int *trace, int n, const int *const *want_ahead, const char *what) {
    int ahead[4];
    for (int i = 0; i < n; i++) {
        int k = use(p, trace[i], ahead);
        const int *w = want_ahead[i];
        int wn = 0;
        while (w[wn] >= 0)
            wn++;
        bool same = k == wn;
        for (int j = 0; same && j < k; j++)
            same = ahead[j] == w[j];
        CHECK(same, "%s: after use %d (module %d): %d gathers ahead, want %d (first %d, want %d)", what, i, trace[i], k,
              wn, k ? ahead[0] : -1, wn ? w[0] : -1);
    }
    CHECK(zinf_prefetch_end_step(p) == ZINF_OK, "end_step");
}

int main(void) {
    static const int none[] = {-1}, a1[] = {1, -1}, a2[] = {2, -1}, a3[] = {3, -1};
    const int trace[] = {0, 1, 2, 1, 3};

    // bucket 5000, live 7000, persistence 60 (module 3 persists), reuse distance 1500
    // (module 1's two uses are 1000 apart: kept between them).
    zinf_prefetch *p = make(5000, 7000, 60, 1500);
    CHECK(!zinf_prefetch_following(p), "following before any trace");
    const int *const first[] = {none, none, none, none, none};
    step(p, trace, 5, first, "first step (recording)");
    CHECK(zinf_prefetch_following(p), "not following the recorded trace");
    const int *uses;
    CHECK(zinf_prefetch_upcoming(p, &uses) == 5 && uses[0] == 0 && uses[4] == 3, "the trace is not the recorded one");
    // After m0: m1 (2048 ahead); m2 would make 6144 > 5000. After m1 (kept): m2, live
    // 6144. After m2 (released): m3. After m1's last use (released): nothing left.
    const int *const second[] = {a1, a2, a3, none, none};
    step(p, trace, 5, second, "second step");
    CHECK(zinf_prefetch_live_peak(p) == 6144, "live peak %lld, want 6144", (long long)zinf_prefetch_live_peak(p));
    CHECK(zinf_prefetch_live(p) == 0, "live %lld after the step", (long long)zinf_prefetch_live(p));

    // A departure: m2 where the trace has m1. No decisions for the rest of the step, and
    // the next step follows the new trace.
    int ahead[4];
    CHECK(use(p, 0, ahead) == 1 && ahead[0] == 1, "first use of the third step");
    use(p, 2, ahead);
    CHECK(!zinf_prefetch_following(p), "still following after a departure");
    CHECK(use(p, 3, ahead) == 0, "a decision after the departure");
    CHECK(zinf_prefetch_upcoming(p, &uses) == 0, "upcoming uses after a departure");
    CHECK(zinf_prefetch_end_step(p) == ZINF_OK, "end_step");
    CHECK(zinf_prefetch_upcoming(p, &uses) == 3 && uses[0] == 0 && uses[1] == 2 && uses[2] == 3,
          "the departed step's uses are not the new trace");
    zinf_prefetch_destroy(p);

    // The live budget binds before the bucket: 4096 live at most, so after m0 (released)
    // m1 (2048) and not m2 (4096 more).
    p = make(1 << 30, 4096, 0, 0);
    step(p, trace, 5, first, "recording");
    int k = use(p, 0, ahead);
    CHECK(k == 1 && ahead[0] == 1, "live 4096: %d ahead", k);
    zinf_prefetch_destroy(p);

    // No persistence and no reuse: nothing is kept.
    p = make(1 << 30, 1 << 30, 0, 0);
    step(p, trace, 5, first, "recording");
    CHECK(zinf_prefetch_use(p, 0) == ZINF_OK, "use");
    zinf_prefetch_gathered(p, 0);
    CHECK(!zinf_prefetch_keep(p, 0), "m0 kept without persistence or reuse");
    zinf_prefetch_use(p, 1);
    CHECK(!zinf_prefetch_keep(p, 1), "m1 kept with a reuse distance of 0");
    zinf_prefetch_destroy(p);

    // m2 in tiles, bucket 2500: after m0, m1 (2048) and then m2's 1000 elements pass the
    // bucket; after m1, m2's 1000 and m1's 2048 again do: nothing ahead (were m2 not
    // counted, m1 would come back here); after m2, m1; after m1, m3. m2 itself is never
    // gathered ahead, and using it follows the trace.
    p = make_with(tiled, 2500, 1 << 30, 0, 0);
    step(p, trace, 5, first, "recording with m2 in tiles");
    const int *const tiles[] = {a1, none, a1, a3, none};
    step(p, trace, 5, tiles, "m2 in tiles");
    CHECK(zinf_prefetch_following(p), "m2's use departed from the trace");
    zinf_prefetch_destroy(p);
    return check_exit("test_offload_prefetch");
}
