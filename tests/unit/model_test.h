// Shared by the model tests (test_model_gpt2, test_model_llama): one batch through a
// model on the suite's device, weights read from Hugging Face files, and the error
// measure the comparisons with PyTorch use.
#ifndef ZINF_TEST_MODEL_H
#define ZINF_TEST_MODEL_H

#include <math.h>

#include "gpu_test.h"
#include "zinf_half.h"

// max |a - ref| / max |ref| over a tensor: its error relative to its own scale.
static inline double rel_err(zinf_dtype dt, const void *a, const float *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs(dt_load(a, dt, i) - ref[i]);
        num = isnan(e) || e > num ? (isnan(e) ? INFINITY : e) : num;
        den = fmax(den, fabs(ref[i]));
    }
    return num / den;
}

typedef struct run {
    zinf_device *dev;
    zinf_stream *s;
    zinf_model *m;
    int nmod;
    void **h_w, **d_w, **d_g, **h_g; // per module: weights and gradients, host and device
    double loss;
    void *logits; // a training run holds their gradient here
} run;

// Model p with the weights at path: the forward of one batch of p->batch sequences,
// and the backward when p->training (gradients copied back to h_g).
static inline void run_model(run *r, const zinf_model_params *p, const char *path, const int32_t *tok,
                             const int32_t *tgt) {
    memset(r, 0, sizeof *r);
    r->dev = test_device(0);
    TRY(zinf_stream_create(r->dev, &r->s));
    TRY(zinf_model_create(&r->m, r->dev, p));
    r->nmod = zinf_model_module_count(r->m);
    r->h_w = calloc(r->nmod, sizeof(void *)), r->d_w = calloc(r->nmod, sizeof(void *));
    r->d_g = calloc(r->nmod, sizeof(void *)), r->h_g = calloc(r->nmod, sizeof(void *));
    size_t es = zinf_dtype_size(p->dtype);
    for (int i = 0; i < r->nmod; i++) {
        size_t n = zinf_model_module(r->m, i)->numel;
        if (n) r->h_w[i] = calloc(n, es), r->h_g[i] = malloc(n * es);
    }
    TRY(zinf_model_read_weights(r->m, path, p->dtype, r->h_w));
    for (int i = 0; i < r->nmod; i++) {
        size_t n = zinf_model_module(r->m, i)->numel * es;
        if (!n) continue;
        r->d_w[i] = to_device(r->dev, r->s, r->h_w[i], n);
        TRY(zinf_device_alloc(r->dev, n, "grads", &r->d_g[i]));
        TRY(zinf_memset_async(r->s, r->d_g[i], 0, n));
    }
    TRY(zinf_model_set_batch(r->m, r->s, tok, tgt, p->batch, 1.0f));
    int n, nall;
    const zinf_model_op *ops = zinf_model_schedule(r->m, false, &n);
    for (int i = 0; i < n; i++)
        TRY(zinf_model_run(r->m, r->s, &ops[i], r->d_w, r->d_g));
    r->logits = malloc((size_t)p->batch * p->seq_len * p->shape.vocab_size * es);
    TRY(zinf_model_logits(r->m, r->s, r->logits));
    double sum;
    int64_t cnt;
    TRY(zinf_model_loss(r->m, r->s, &sum, &cnt));
    r->loss = sum / (double)cnt;
    if (!p->training) return;
    ops = zinf_model_schedule(r->m, true, &nall);
    for (int i = n; i < nall; i++)
        TRY(zinf_model_run(r->m, r->s, &ops[i], r->d_w, r->d_g));
    for (int i = 0; i < r->nmod; i++)
        if (r->d_g[i]) from_device(r->s, r->h_g[i], r->d_g[i], zinf_model_module(r->m, i)->numel * es);
}

static inline void run_free(run *r) {
    for (int i = 0; i < r->nmod; i++) {
        zinf_device_free(r->dev, r->d_w[i]), zinf_device_free(r->dev, r->d_g[i]);
        free(r->h_w[i]), free(r->h_g[i]);
    }
    free(r->h_w), free(r->d_w), free(r->d_g), free(r->h_g), free(r->logits);
    zinf_model_destroy(r->m);
    zinf_stream_destroy(r->s);
    zinf_device_destroy(r->dev);
}

#endif
