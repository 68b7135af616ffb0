// The sampling contract: sequential sampling reads window p mod n; random sampling reads
// every window exactly once per epoch, in an order that the seed and the epoch decide
// (the same for every sampler built alike: every rank computes it itself), and that
// differs between epochs and seeds. Bad arguments are errors.
// timeout: 10 san=10 cuda-emu=10 san-cuda-emu=10
#include <stdlib.h>

#include "check.h"
#include "zinf.h"

enum { N = 1000 };

static void windows(zinf_sampler *s, int64_t from, int64_t *out) {
    for (int i = 0; i < N; i++)
        CHECK(zinf_sampler_window(s, from + i, &out[i]) == ZINF_OK, "%s", zinf_last_error());
}

int main(void) {
    zinf_sampler *seq, *a, *b, *c;
    CHECK(zinf_sampler_create(&seq, N, ZINF_SAMPLING_SEQUENTIAL, 1) == ZINF_OK, "%s", zinf_last_error());
    CHECK(zinf_sampler_create(&a, N, ZINF_SAMPLING_RANDOM, 1) == ZINF_OK, "%s", zinf_last_error());
    CHECK(zinf_sampler_create(&b, N, ZINF_SAMPLING_RANDOM, 1) == ZINF_OK, "%s", zinf_last_error());
    CHECK(zinf_sampler_create(&c, N, ZINF_SAMPLING_RANDOM, 2) == ZINF_OK, "%s", zinf_last_error());
    static int64_t w[N], e0[N], e1[N], other[N], again[N];
    windows(seq, 2 * N + 5, w);
    bool wraps = true;
    for (int i = 0; i < N; i++)
        wraps = wraps && w[i] == (5 + i) % N;
    CHECK(wraps, "sequential position 2N+5+i reads window %lld at i = 0", (long long)w[0]);

    windows(a, 0, e0);
    windows(a, N, e1);
    windows(b, N, again); // a sampler that saw no earlier epoch draws the same order
    windows(c, 0, other);
    static int seen[N];
    bool perm = true, same_e = true, same_again = true, same_seed = true;
    for (int i = 0; i < N; i++) {
        perm = perm && e0[i] >= 0 && e0[i] < N && seen[e0[i]]++ == 0;
        same_e = same_e && e0[i] == e1[i];
        same_again = same_again && e1[i] == again[i];
        same_seed = same_seed && e0[i] == other[i];
    }
    CHECK(perm, "epoch 0 is not a permutation of the windows");
    CHECK(!same_e, "epochs 0 and 1 read the windows in the same order");
    CHECK(same_again, "two samplers with the same seed disagree on epoch 1");
    CHECK(!same_seed, "seeds 1 and 2 give the same order");

    int64_t x;
    CHECK(zinf_sampler_window(a, -1, &x) == ZINF_ERR_INVAL, "negative position");
    zinf_sampler *none = NULL;
    CHECK(zinf_sampler_create(&none, 0, ZINF_SAMPLING_RANDOM, 1) == ZINF_ERR_INVAL && !none, "no windows");
    CHECK_CONTAINS(zinf_last_error(), "0 windows");
    zinf_sampler_destroy(seq), zinf_sampler_destroy(a), zinf_sampler_destroy(b), zinf_sampler_destroy(c);
    return check_exit("test_sampler");
}
