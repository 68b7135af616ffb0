// A model's batch (zinf_model_set_batch) on the suite's device:
// - the positions come in token order, equal tokens in position order (what the
//   embedding's backward sums in), for random tokens with repeats and the vocabulary's
//   first and last, against a stable comparison sort;
// - it returns without waiting for the stream's earlier work (a host function holds the
//   stream until set_batch has returned, or gives up after 10 s and says so), and the
//   device gets the batch as it was though the caller overwrites its buffers at once;
// - a token outside the vocabulary is refused, naming it and its position.
// timeout: 20
#include <stdatomic.h>
#include <time.h>

#include "check.h"
#include "gpu_test.h"
#include "models/model_internal.h"

enum { B = 3, T = 64, V = 97 };

static int by_token(const void *a, const void *b, void *tok) {
    const int32_t *t = tok;
    int x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (t[x] != t[y]) return t[x] < t[y] ? -1 : 1;
    return (x > y) - (x < y);
}

static atomic_int returned, waited_out;

// Holds the stream until set_batch has returned, at most 10 s.
static void hold_stream(void *arg) {
    (void)arg;
    for (int i = 0; i < 10000 && !atomic_load(&returned); i++)
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    if (!atomic_load(&returned)) atomic_store(&waited_out, 1);
}

int main(void) {
    zinf_device *d = test_device(0);
    zinf_model_params p = {.shape = zinf_model_shape_gpt2(1, 2, 16, V, T),
                           .dtype = ZINF_DTYPE_F32,
                           .batch = B,
                           .seq_len = T,
                           .training = true};
    zinf_model *m = NULL;
    zinf_stream *s = NULL;
    CHECK(zinf_model_create(&m, d, &p) == ZINF_OK, "%s", zinf_last_error());
    CHECK(zinf_stream_create(d, &s) == ZINF_OK, "%s", zinf_last_error());
    if (!m || !s) return check_exit("test_model_batch");
    int n = B * T;
    int32_t tok[B * T], tgt[B * T], want[B * T], got[B * T], dev_tok[B * T], dev_tgt[B * T];
    srand(3);
    for (int i = 0; i < n; i++)
        tok[i] = i % 17 == 0 ? 0 : i % 19 == 0 ? V - 1 : rand() % 12, tgt[i] = (i * 5) % V;

    CHECK(zinf_model_set_batch(m, s, tok, tgt, B, 1.0f) == ZINF_OK, "%s", zinf_last_error());
    CHECK(zinf_copy_async(s, got, m->order, sizeof got, ZINF_COPY_D2H) == ZINF_OK && zinf_stream_sync(s) == ZINF_OK,
          "%s", zinf_last_error());
    for (int i = 0; i < n; i++)
        want[i] = i;
    qsort_r(want, (size_t)n, sizeof *want, by_token, tok);
    CHECK(memcmp(got, want, sizeof got) == 0, "the positions are not in token order, ties in position order");

    // The next batch while a host function holds the stream.
    int32_t tok2[B * T], tgt2[B * T];
    for (int i = 0; i < n; i++)
        tok2[i] = (tok[i] + 1) % V, tgt2[i] = (tgt[i] + 3) % V;
    memcpy(want, tok2, sizeof want);
    memcpy(got, tgt2, sizeof got);
    CHECK(zinf_stream_host_fn(s, hold_stream, NULL) == ZINF_OK, "%s", zinf_last_error());
    CHECK(zinf_model_set_batch(m, s, tok2, tgt2, B, 1.0f) == ZINF_OK, "%s", zinf_last_error());
    atomic_store(&returned, 1);
    memset(tok2, 0x7f, sizeof tok2), memset(tgt2, 0x7f, sizeof tgt2); // the caller reuses them
    CHECK(zinf_copy_async(s, dev_tok, m->tok, sizeof dev_tok, ZINF_COPY_D2H) == ZINF_OK &&
              zinf_copy_async(s, dev_tgt, m->targets, sizeof dev_tgt, ZINF_COPY_D2H) == ZINF_OK &&
              zinf_stream_sync(s) == ZINF_OK,
          "%s", zinf_last_error());
    CHECK(!atomic_load(&waited_out), "set_batch waited for the stream's earlier work");
    CHECK(memcmp(dev_tok, want, sizeof want) == 0 && memcmp(dev_tgt, got, sizeof got) == 0,
          "the device's batch is not the one given (the caller's buffers read after set_batch returned?)");

    tok[5] = V;
    CHECK(zinf_model_set_batch(m, s, tok, tgt, B, 1.0f) == ZINF_ERR_INVAL &&
              strstr(zinf_last_error(), "token 97 at position 5") != NULL,
          "a token outside the vocabulary: %s", zinf_last_error());
    zinf_stream_destroy(s);
    zinf_model_destroy(m);
    zinf_device_destroy(d);
    if (check_failures == 0) printf("set_batch: token order, no wait for the stream, the caller's memory copied\n");
    return check_exit("test_model_batch");
}
