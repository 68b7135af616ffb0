// The order training reads windows in: sequential, or a seeded permutation per epoch
// (Fisher-Yates over a counter-based generator, so the order depends only on the seed
// and the epoch). One epoch's permutation is kept; moving to another redraws it.
#include <stdlib.h>

#include "zinf_internal.h"
#include "zinf_model.h"

struct zinf_sampler {
    int64_t n;
    zinf_sampling sampling;
    uint64_t seed;
    int64_t epoch; // of perm; -1 before the first draw
    int64_t *perm;
};

zinf_status zinf_sampler_create(zinf_sampler **out, int64_t windows, zinf_sampling sampling, uint64_t seed) {
    if (!out || windows <= 0) return zinf_fail(ZINF_ERR_INVAL, "sampler: %lld windows; the data holds none", (long long)windows);
    zinf_sampler *s = malloc(sizeof *s);
    int64_t *perm = sampling == ZINF_SAMPLING_RANDOM ? malloc((size_t)windows * sizeof *perm) : NULL;
    if (!s || (sampling == ZINF_SAMPLING_RANDOM && !perm)) {
        free(s), free(perm);
        return zinf_fail(ZINF_ERR_NOMEM, "sampler: out of memory for %lld windows", (long long)windows);
    }
    *s = (zinf_sampler){.n = windows, .sampling = sampling, .seed = seed, .epoch = -1, .perm = perm};
    *out = s;
    return ZINF_OK;
}

void zinf_sampler_destroy(zinf_sampler *s) {
    if (!s) return;
    free(s->perm);
    free(s);
}

static void draw(zinf_sampler *s, int64_t epoch) {
    uint64_t state = s->seed * 0x2545f4914f6cdd1dull ^ (uint64_t)epoch;
    for (int64_t i = 0; i < s->n; i++)
        s->perm[i] = i;
    for (int64_t i = s->n - 1; i > 0; i--) {
        // Multiply-shift maps 64 random bits onto [0, i] (bias below 2^-32 here).
        int64_t j = (int64_t)(((unsigned __int128)zinf_mix64(state += ZINF_GOLDEN64) * (uint64_t)(i + 1)) >> 64);
        int64_t t = s->perm[i];
        s->perm[i] = s->perm[j], s->perm[j] = t;
    }
    s->epoch = epoch;
}

zinf_status zinf_sampler_window(zinf_sampler *s, int64_t p, int64_t *window) {
    if (!s || !window || p < 0) return zinf_fail(ZINF_ERR_INVAL, "sampler: position %lld", (long long)p);
    if (s->sampling == ZINF_SAMPLING_SEQUENTIAL) {
        *window = p % s->n;
        return ZINF_OK;
    }
    if (p / s->n != s->epoch) draw(s, p / s->n);
    *window = s->perm[p % s->n];
    return ZINF_OK;
}
