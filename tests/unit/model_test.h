// Shared by the model tests (test_model_gpt2, test_model_llama): one batch through a
// model on the suite's device, weights read from Hugging Face files, and the error
// measure the comparisons with PyTorch use.
#ifndef ZINF_TEST_MODEL_H
#define ZINF_TEST_MODEL_H

#include <math.h>
#include <unistd.h>

#include "check.h"
#include "gpu_test.h"
#include "zinf_half.h"

// A directory of this run's own for the files a test writes: CI runs each model test
// under two seeds at once, over one directory of fixtures. Made on first use, removed
// at exit once the test has removed what it wrote there.
static char scratch_path[32];
static inline void scratch_remove(void) { rmdir(scratch_path); }
static inline const char *scratch_dir(void) {
    if (!scratch_path[0]) {
        snprintf(scratch_path, sizeof scratch_path, "/tmp/zinf-model-XXXXXX");
        if (!mkdtemp(scratch_path)) {
            perror(scratch_path);
            exit(1);
        }
        atexit(scratch_remove);
    }
    return scratch_path;
}

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

// What a PyTorch fixture (tests/ref/gpt2_ref.py, llama_ref.py) holds after its header:
// a batch, the parameters' names and sizes, and two runs, fp32 then bf16: the loss, the
// logits and every parameter's gradient.
typedef struct torch_runs {
    int32_t *tok, *tgt;
    uint32_t np;
    char (*names)[64];
    size_t *numel;
    float loss[2], *logits[2], **grads[2]; // [run][param]; run 0 fp32, 1 bf16
} torch_runs;

static inline void fixture_read(FILE *f, void *p, size_t n, const char *file) {
    if (fread(p, 1, n, f) != n) {
        fprintf(stderr, "%s: truncated; `make tests` regenerates it\n", file);
        exit(1);
    }
}

static inline void torch_runs_read(FILE *f, const char *file, size_t BT, size_t V, torch_runs *t) {
    t->tok = malloc(BT * 4), t->tgt = malloc(BT * 4);
    fixture_read(f, t->tok, BT * 4, file), fixture_read(f, t->tgt, BT * 4, file);
    fixture_read(f, &t->np, 4, file);
    t->names = calloc(t->np, sizeof *t->names);
    t->numel = calloc(t->np, sizeof *t->numel);
    for (uint32_t i = 0; i < t->np; i++) {
        uint32_t nd, d;
        fixture_read(f, t->names[i], 64, file), fixture_read(f, &nd, 4, file);
        t->numel[i] = 1;
        for (uint32_t j = 0; j < nd; j++)
            fixture_read(f, &d, 4, file), t->numel[i] *= d;
    }
    for (int r = 0; r < 2; r++) {
        fixture_read(f, &t->loss[r], 4, file);
        t->logits[r] = malloc(BT * V * 4);
        fixture_read(f, t->logits[r], BT * V * 4, file);
        t->grads[r] = calloc(t->np, sizeof(float *));
        for (uint32_t i = 0; i < t->np; i++) {
            t->grads[r][i] = malloc(t->numel[i] * 4);
            fixture_read(f, t->grads[r][i], t->numel[i] * 4, file);
        }
    }
}

static inline void torch_runs_free(torch_runs *t) {
    for (int r = 0; r < 2; r++) {
        for (uint32_t i = 0; i < t->np; i++)
            free(t->grads[r][i]);
        free(t->grads[r]), free(t->logits[r]);
    }
    free(t->tok), free(t->tgt), free(t->names), free(t->numel);
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

// The elements of each module's gradient no parameter covers (alignment, the head's pad
// rows) are zeros after the backward; the parameters' are checked against torch's.
static inline void check_gaps_zero(const run *r, size_t es) {
    for (int i = 0; i < r->nmod; i++) {
        const zinf_module_info *mod = zinf_model_module(r->m, i);
        size_t at = 0;
        for (int j = 0; j <= mod->nparams; j++) {
            size_t next = j < mod->nparams ? mod->params[j].offset : mod->numel;
            for (size_t k = at * es; k < next * es; k++)
                if (((const unsigned char *)r->h_g[i])[k]) {
                    CHECK(false, "module %s: gradient element %zu, which no parameter covers, is not zero", mod->name,
                          k / es);
                    break;
                }
            if (j < mod->nparams) at = next + mod->params[j].numel;
        }
    }
}

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
        // Poison: the backward writes every element (zinf_model_run).
        TRY(zinf_device_alloc(r->dev, n, "grads", &r->d_g[i]));
        TRY(zinf_memset_async(r->s, r->d_g[i], 0xff, n));
    }
    TRY(zinf_model_set_batch(r->m, r->s, tok, tgt, p->batch, 1.0f));
    int n, nall;
    const zinf_model_op *ops = zinf_model_schedule(r->m, false, &n);
    for (int i = 0; i < n; i++)
        TRY(zinf_model_run(r->m, r->s, &ops[i], r->d_w, r->d_g));
    if (p->head_chunk > 0 && p->head_chunk < p->batch * p->seq_len) { // only the last chunk's logits are kept
        CHECK(zinf_model_logits(r->m, r->s, NULL) == ZINF_ERR_UNSUPPORTED, "the logits of a chunked head were read");
        CHECK_CONTAINS(zinf_last_error(), "chunks of");
    } else {
        r->logits = malloc((size_t)p->batch * p->seq_len * p->shape.vocab_size * es);
        TRY(zinf_model_logits(r->m, r->s, r->logits));
    }
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
    check_gaps_zero(r, es);
}

// zinf_model_rows_read names all the lookup reads: the forward again with every other
// element of the embedding's buffer poisoned (NaN) for the lookup alone (the later ops,
// a tied head among them, get the real one) gives the same loss, bit for bit. The rows
// are read back from where the model says they are; only the lookup reads that way.
static inline void check_rows_read(run *r, const zinf_model_params *p) {
    int n, nall;
    const zinf_model_op *ops = zinf_model_schedule(r->m, true, &nall);
    zinf_model_schedule(r->m, false, &n);
    zinf_rows_read rows[ZINF_ROWS_READ_MAX];
    const zinf_module_info *emb = zinf_model_module(r->m, ops[0].module);
    int tables = zinf_model_rows_read(r->m, &ops[0], rows);
    CHECK(tables == emb->nparams, "the lookup reads rows of %d tables; the embedding has %d", tables, emb->nparams);
    for (int k = 1; k < nall; k++)
        CHECK(zinf_model_rows_read(r->m, &ops[k], rows + tables) == 0, "op %d (module %d, pass %d) reads rows", k,
              ops[k].module, ops[k].pass);
    size_t es = zinf_dtype_size(p->dtype), bytes = emb->numel * es;
    unsigned char *h = malloc(bytes);
    memset(h, 0xff, bytes);
    for (int t = 0; t < tables; t++) {
        int32_t *ids = malloc((size_t)rows[t].count * sizeof *ids);
        for (int i = 0; i < rows[t].count; i++)
            ids[i] = i;
        if (rows[t].rows) from_device(r->s, ids, rows[t].rows, (size_t)rows[t].count * sizeof *ids);
        for (int i = 0; i < rows[t].count; i++) {
            size_t at = (rows[t].offset + (size_t)ids[i] * rows[t].row_len) * es;
            memcpy(h + at, (const unsigned char *)r->h_w[ops[0].module] + at, (size_t)rows[t].row_len * es);
        }
        free(ids);
    }
    void **poisoned = malloc((size_t)r->nmod * sizeof *poisoned);
    memcpy(poisoned, r->d_w, (size_t)r->nmod * sizeof *poisoned);
    poisoned[ops[0].module] = to_device(r->dev, r->s, h, bytes);
    for (int k = 0; k < n; k++)
        TRY(zinf_model_run(r->m, r->s, &ops[k], k == 0 ? poisoned : r->d_w, r->d_g));
    double sum;
    int64_t cnt;
    TRY(zinf_model_loss(r->m, r->s, &sum, &cnt));
    CHECK(sum / (double)cnt == r->loss, "the lookup read past the rows it names: loss %.9g, %.9g with its whole table",
          sum / (double)cnt, r->loss);
    zinf_device_free(r->dev, poisoned[ops[0].module]);
    free(poisoned), free(h);
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

// The gradient of torch parameter i inside a run's host buffers; NULL (and a failed
// check) when zinf's model has no such parameter or another size.
static inline const void *torch_grad_of(const run *r, const torch_runs *t, uint32_t i, zinf_dtype dt) {
    int mod;
    const zinf_param_info *p = zinf_model_find_param(r->m, t->names[i], &mod);
    CHECK(p && p->numel == t->numel[i], "torch parameter %s (%zu elements) is not one of zinf's", t->names[i],
          t->numel[i]);
    return p && p->numel == t->numel[i] ? (const char *)r->h_g[mod] + p->offset * zinf_dtype_size(dt) : NULL;
}

// The output layer in chunks (ch) against one chunk (tr), both training runs of dtype
// dt: the loss within 1e-7 of itself and every gradient within tol of its scale. A
// row's logits and input gradient are products over C and over V alone, so they keep
// their bits wherever the backend's product gives a row the same bits for any number of
// rows; OpenBLAS's fp32 kernels for small products do not (they sum in another order),
// so fp32 may differ in the last bits. The head weight's gradient sums its rows chunk
// by chunk, rounded to dt after each.
static inline void check_head_chunks(const char *what, const run *tr, const run *ch, zinf_dtype dt, double tol) {
    CHECK(fabs(ch->loss - tr->loss) <= 1e-7 * tr->loss, "%s %s: loss %.9g in chunks, %.9g at once", what,
          zinf_dtype_name(dt), ch->loss, tr->loss);
    double worst = 0;
    int same = 0, n = 0;
    for (int i = 0; i < tr->nmod; i++) {
        const zinf_module_info *mod = zinf_model_module(tr->m, i);
        size_t es = zinf_dtype_size(dt);
        same += mod->numel && !memcmp(ch->h_g[i], tr->h_g[i], mod->numel * es);
        for (int j = 0; j < mod->nparams; j++, n++) {
            const zinf_param_info *p = &mod->params[j];
            float *ref = malloc(p->numel * sizeof *ref);
            for (size_t k = 0; k < p->numel; k++)
                ref[k] = (float)dt_load(tr->h_g[i], dt, p->offset + k);
            double e = rel_err(dt, (const char *)ch->h_g[i] + p->offset * es, ref, p->numel);
            free(ref);
            worst = fmax(worst, e);
            CHECK(e <= tol, "%s %s: gradient of %s in chunks off by %.3g of its scale (tolerance %.3g)", what,
                  zinf_dtype_name(dt), p->name, e, tol);
        }
    }
    printf("%s %s, head in chunks: loss %s; %d of %d modules' gradients the same bits, worst rel err %.2e over %d "
           "tensors\n",
           what, zinf_dtype_name(dt), ch->loss == tr->loss ? "the same bits" : "within 1e-7", same, tr->nmod, worst, n);
}

// fp32 against torch fp32: the logits (from an inference run inf: a training forward
// replaces them by their gradient) and the loss, and every gradient of the training
// run tr, within 1e-5 of each tensor's scale; tr's loss is inf's.
static inline void check_fp32(const char *what, const run *inf, const run *tr, const torch_runs *t, size_t nlogits) {
    double e = rel_err(ZINF_DTYPE_F32, inf->logits, t->logits[0], nlogits);
    printf("%s fp32: loss %.7f (torch %.7f), logits rel err %.2e\n", what, inf->loss, t->loss[0], e);
    CHECK(e <= 1e-5, "%s fp32 logits: rel err %.3g", what, e);
    CHECK(fabs(inf->loss - t->loss[0]) <= 1e-5 * t->loss[0], "%s fp32 loss %.8f vs torch %.8f", what, inf->loss,
          t->loss[0]);
    CHECK(tr->loss == inf->loss, "%s: training forward loss %.9g differs from inference %.9g", what, tr->loss,
          inf->loss);
    double worst = 0;
    for (uint32_t i = 0; i < t->np; i++) {
        const void *g = torch_grad_of(tr, t, i, ZINF_DTYPE_F32);
        if (!g) continue;
        double ge = rel_err(ZINF_DTYPE_F32, g, t->grads[0][i], t->numel[i]);
        worst = fmax(worst, ge);
        CHECK(ge <= 1e-5, "%s fp32 gradient of %s: rel err %.3g", what, t->names[i], ge);
    }
    printf("%s fp32: worst gradient rel err %.2e over %u tensors\n", what, worst, t->np);
}

// bf16 against torch bf16. Both round every stored activation and gradient to 8
// significant bits, but at different places (torch rounds inside attention and the
// softmax; zinf's fused ops keep those in fp32), so neither is the other's exact
// reference. The tolerance is torch's own bf16 error: zinf's bf16 result must be no
// further from the fp32 truth than 2x torch's bf16 result is (plus 2^-8 of the
// tensor's scale, one bf16 rounding, for tensors torch happens to get very close).
static inline void check_bf16(const char *what, const run *inf, const run *tr, const torch_runs *t, size_t nlogits) {
    double ez = rel_err(ZINF_DTYPE_BF16, inf->logits, t->logits[0], nlogits),
           et = rel_err(ZINF_DTYPE_F32, t->logits[1], t->logits[0], nlogits);
    printf("%s bf16: loss %.6f (torch bf16 %.6f, fp32 %.6f); logits vs fp32: zinf %.2e, torch %.2e\n", what, inf->loss,
           t->loss[1], t->loss[0], ez, et);
    CHECK(ez <= 2 * et + 1.0 / 256, "%s bf16 logits: %.3g from fp32, torch's bf16 %.3g", what, ez, et);
    CHECK(fabs(inf->loss - t->loss[0]) <= 2 * fabs(t->loss[1] - t->loss[0]) + 1e-3,
          "%s bf16 loss %.6f: further from fp32 %.6f than torch's %.6f allows", what, inf->loss, t->loss[0],
          t->loss[1]);
    double worst = 0, worst_torch = 0;
    for (uint32_t i = 0; i < t->np; i++) {
        const void *g = torch_grad_of(tr, t, i, ZINF_DTYPE_BF16);
        if (!g) continue;
        double gz = rel_err(ZINF_DTYPE_BF16, g, t->grads[0][i], t->numel[i]);
        double gt = rel_err(ZINF_DTYPE_F32, t->grads[1][i], t->grads[0][i], t->numel[i]);
        worst = fmax(worst, gz), worst_torch = fmax(worst_torch, gt);
        CHECK(gz <= 2 * gt + 1.0 / 256, "%s bf16 gradient of %s: %.3g from fp32; torch's bf16: %.3g", what, t->names[i],
              gz, gt);
    }
    printf("%s bf16: worst gradient error vs fp32: zinf %.2e, torch %.2e\n", what, worst, worst_torch);
}

#endif
