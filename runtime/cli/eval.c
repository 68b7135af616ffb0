// zinf eval: the mean loss of a model's weights over a token file's windows (the
// design's data contract: every complete window of seq_len + 1 tokens, every predicted
// token counted once).
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"

typedef struct eval_setup {
    zinf_model_shape shape;
    zinf_data_format format;
    int seq_len, batch;
    zinf_dtype dtype;
    zinf_device_params device;
} eval_setup;

// From the config when given, else from the weights file and the defaults.
static int setup_from(const char *config, const char *model, eval_setup *e) {
    *e = (eval_setup){.format = ZINF_DATA_TOKENS_U16, .batch = 8, .dtype = ZINF_DTYPE_F32};
    zinf_config cfg;
    bool have_cfg = config != NULL;
    if (have_cfg && zinf_config_load(&cfg, config, &(zinf_config_options){.world_size = 1}) != ZINF_OK)
        return cli_fail("eval", CLI_USAGE);
    int rc = CLI_OK;
    if (have_cfg && cfg.model.present) {
        zinf_model_shape_from_config(&cfg.model, &e->shape);
    } else if (zinf_model_shape_from_file(model, &e->shape) != ZINF_OK) {
        rc = cli_fail("eval", CLI_FAIL);
    }
    // A Llama's block is its whole context (131072 for Llama 3.x): too long a default.
    e->seq_len = e->shape.block_size < 1024 ? e->shape.block_size : 1024;
    if (have_cfg) {
        if (cfg.data.present) {
            e->format = cfg.data.format;
            if (cfg.data.seq_len > 0) e->seq_len = (int)cfg.data.seq_len;
        }
        e->batch = (int)cfg.train_micro_batch_size_per_gpu;
        e->dtype = cfg.bf16 ? ZINF_DTYPE_BF16 : cfg.fp16.enabled ? ZINF_DTYPE_F16 : ZINF_DTYPE_F32;
        e->device = (zinf_device_params){
            .backend = cfg.device.backend, .memory_limit = cfg.device.memory_limit, .attention = cfg.device.attention};
        zinf_config_free(&cfg);
    }
    if (rc == CLI_OK && e->seq_len > e->shape.block_size)
        rc = cli_usage("eval", "data.seq_len %d is longer than the model's block_size %d", e->seq_len,
                       e->shape.block_size);
    return rc;
}

typedef struct evaluator {
    zinf_device *dev;
    zinf_stream *s;
    zinf_model *m;
    int nmod;
    void **d_w;
} evaluator;

static zinf_status evaluator_open(evaluator *ev, const eval_setup *e, const char *model, int batch) {
    zinf_model_params mp = {.shape = e->shape, .dtype = e->dtype, .batch = batch, .seq_len = e->seq_len};
    zinf_status st = zinf_device_create(&ev->dev, &e->device);
    if (st == ZINF_OK) st = zinf_stream_create(ev->dev, &ev->s);
    if (st == ZINF_OK) st = zinf_model_create(&ev->m, ev->dev, &mp);
    if (st != ZINF_OK) return st;
    ev->nmod = zinf_model_module_count(ev->m);
    ev->d_w = calloc((size_t)ev->nmod, sizeof *ev->d_w);
    void **h_w = calloc((size_t)ev->nmod, sizeof *h_w);
    if (!ev->d_w || !h_w) st = zinf_fail(ZINF_ERR_NOMEM, "eval: out of memory");
    size_t es = zinf_dtype_size(e->dtype);
    for (int i = 0; st == ZINF_OK && i < ev->nmod; i++) {
        size_t n = zinf_model_module(ev->m, i)->numel * es;
        if (n && !(h_w[i] = calloc(1, n))) st = zinf_fail(ZINF_ERR_NOMEM, "eval: out of host memory for weights");
        if (st == ZINF_OK && n) st = zinf_device_alloc(ev->dev, n, "weights", &ev->d_w[i]);
    }
    if (st == ZINF_OK) st = zinf_model_read_weights(ev->m, model, e->dtype, h_w);
    for (int i = 0; st == ZINF_OK && i < ev->nmod; i++)
        if (ev->d_w[i]) st = zinf_copy_async(ev->s, ev->d_w[i], h_w[i], zinf_model_module(ev->m, i)->numel * es, ZINF_COPY_H2D);
    if (st == ZINF_OK) st = zinf_stream_sync(ev->s); // h_w is pageable and about to go
    for (int i = 0; h_w && i < ev->nmod; i++)
        free(h_w[i]);
    free(h_w);
    return st;
}

static void evaluator_close(evaluator *ev) {
    if (!ev->dev) return;
    for (int i = 0; ev->d_w && i < ev->nmod; i++)
        zinf_device_free(ev->dev, ev->d_w[i]);
    free(ev->d_w);
    zinf_model_destroy(ev->m);
    zinf_stream_destroy(ev->s);
    zinf_device_destroy(ev->dev);
}

// The sum of the losses over every window, in window order.
static zinf_status eval_windows(evaluator *ev, const zinf_tokens *tok, const eval_setup *e, int batch, bool progress,
                                double *sum, int64_t *count) {
    int64_t nw = zinf_tokens_windows(tok, e->seq_len);
    size_t per = (size_t)batch * e->seq_len;
    int32_t *in = malloc(per * sizeof *in), *tg = malloc(per * sizeof *tg);
    zinf_status st = in && tg ? ZINF_OK : zinf_fail(ZINF_ERR_NOMEM, "eval: out of memory");
    int nops;
    const zinf_model_op *ops = zinf_model_schedule(ev->m, false, &nops);
    double last = zinf_clock_s();
    *sum = 0, *count = 0;
    for (int64_t w = 0; st == ZINF_OK && w < nw; w += batch) {
        int b = (int)(nw - w < batch ? nw - w : batch);
        for (int i = 0; st == ZINF_OK && i < b; i++)
            st = zinf_tokens_window(tok, w + i, e->seq_len, e->shape.vocab_size, in + (size_t)i * e->seq_len,
                                    tg + (size_t)i * e->seq_len);
        if (st == ZINF_OK) st = zinf_model_set_batch(ev->m, ev->s, in, tg, b, 1.0f);
        for (int i = 0; st == ZINF_OK && i < nops; i++)
            st = zinf_model_run(ev->m, ev->s, &ops[i], ev->d_w, NULL);
        double s;
        int64_t n;
        if (st == ZINF_OK) st = zinf_model_loss(ev->m, ev->s, &s, &n);
        if (st == ZINF_OK) *sum += s, *count += n;
        if (progress && zinf_clock_s() - last > 5) {
            fprintf(stderr, "eval: %lld of %lld windows\n", (long long)(w + b), (long long)nw);
            last = zinf_clock_s();
        }
    }
    free(in), free(tg);
    return st;
}

int cli_eval(int argc, char **argv) {
    static const struct option opts[] = {
        {"model", required_argument, NULL, 'm'},
        {"data", required_argument, NULL, 'd'},
        {"config", required_argument, NULL, 'c'},
        {"json", no_argument, NULL, 'j'},
        {NULL, 0, NULL, 0},
    };
    const char *model = NULL, *data = NULL, *config = NULL;
    bool json = false;
    int c, rc = CLI_OK;
    opterr = 0;
    while (rc == CLI_OK && (c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'm': model = optarg; break;
        case 'd': data = optarg; break;
        case 'c': config = optarg; break;
        case 'j': json = true; break;
        default: rc = cli_usage("eval", "unknown option %s", argv[optind - 1]); break;
        }
    }
    if (rc == CLI_OK && optind < argc) rc = cli_usage("eval", "unexpected argument \"%s\"", argv[optind]);
    if (rc == CLI_OK && (!model || !data)) rc = cli_usage("eval", "--model FILE and --data FILE are required");
    eval_setup e;
    if (rc == CLI_OK) rc = setup_from(config, model, &e);
    if (rc != CLI_OK) return rc;

    zinf_tokens *tok = NULL;
    if (zinf_tokens_open(&tok, data, e.format) != ZINF_OK) return cli_fail("eval", CLI_FAIL);
    int64_t nw = zinf_tokens_windows(tok, e.seq_len);
    if (nw == 0) {
        long long n = (long long)zinf_tokens_count(tok);
        zinf_tokens_close(tok);
        return cli_usage("eval", "%s: %lld tokens hold no window of %d + 1", data, n, e.seq_len);
    }
    int batch = nw < e.batch ? (int)nw : e.batch;
    evaluator ev = {0};
    double sum = 0;
    int64_t count = 0;
    zinf_status st = evaluator_open(&ev, &e, model, batch);
    if (st == ZINF_OK) st = eval_windows(&ev, tok, &e, batch, !json, &sum, &count);
    if (st != ZINF_OK) rc = cli_fail("eval", CLI_FAIL);
    evaluator_close(&ev);
    zinf_tokens_close(tok);
    if (rc != CLI_OK) return rc;
    double loss = sum / (double)count;
    if (json)
        cli_print_json_line(json_pack("{s:f, s:I}", "loss", loss, "tokens", (json_int_t)count));
    else
        printf("loss %.6f over %lld tokens (%lld windows of %d, %s)\n", loss, (long long)count, (long long)nw,
               e.seq_len, zinf_dtype_name(e.dtype));
    return CLI_OK;
}
