// examples/train_loop: zinf embedded in a program of its own, through the public
// headers only. It loads a config, joins the job (one rank, or every rank mpirun
// starts), trains the config's model on its data for the config's steps (or argv[2]),
// saves a checkpoint, reads one tensor back whole and prints the weights digest. It
// feeds the data exactly as `zinf train` does, so both print the same losses and digest.
//
//   build/examples/train_loop CONFIG.json [STEPS]
//   mpirun -np 2 build/examples/train_loop CONFIG.json [STEPS]
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zinf_comm.h"
#include "zinf_config.h"
#include "zinf_engine.h"
#include "zinf_model.h"
#include "zinf_schedule.h"

// Every zinf call returns a status; on failure zinf_last_error() says what failed,
// on which key or file, and why.
#define TRY(call)                                                                                                      \
    do {                                                                                                               \
        zinf_status st_ = (call);                                                                                      \
        if (st_ != ZINF_OK) return st_;                                                                                \
    } while (0)

typedef struct run {
    zinf_config cfg;
    zinf_comm *comm;
    zinf_tokens *tok;
    zinf_sampler *sampler;
    zinf_engine *e;
    int64_t steps;    // the step the run ends at (counted from the first run of a job)
    int64_t position; // training sequences consumed so far
    int seq_len, micro;
    int32_t *in, *tg; // one micro-batch: (micro, seq_len) tokens and targets
    float *full;      // one parameter, gathered whole
} run;

// ---- data ----
// The sampling contract (zinf_model.h): training sequences are numbered from 0; in
// the next global batch rank r's micro-batch m holds positions position + (m*world +
// r)*micro ... and the sampler maps each position to a window of the token file.
static zinf_status load_micro(run *r, int m) {
    int world = zinf_comm_size(r->comm), rank = zinf_comm_rank(r->comm);
    int vocab = zinf_model_get_params(zinf_engine_model(r->e))->shape.vocab_size;
    int64_t first = r->position + ((int64_t)m * world + rank) * r->micro;
    for (int j = 0; j < r->micro; j++) {
        int64_t w;
        TRY(zinf_sampler_window(r->sampler, first + j, &w));
        size_t at = (size_t)j * r->seq_len;
        TRY(zinf_tokens_window(r->tok, w, r->seq_len, vocab, r->in + at, r->tg + at));
    }
    return ZINF_OK;
}

static zinf_status open_all(run *r) {
    // The comm is made before the engine and outlives it: the engine borrows it.
    TRY(zinf_comm_create(&r->comm, ZINF_COMM_AUTO, 0));
    TRY(zinf_tokens_open(&r->tok, r->cfg.data.path, r->cfg.data.format));
    zinf_model_shape shape;
    TRY(zinf_model_shape_from_config(&r->cfg.model, &shape));
    r->seq_len = r->cfg.data.seq_len > 0 ? (int)r->cfg.data.seq_len : shape.block_size;
    int64_t windows = zinf_tokens_windows(r->tok, r->seq_len);
    if (windows == 0) return zinf_fail(ZINF_ERR_INVAL, "%s: too short for one window", r->cfg.data.path);
    TRY(zinf_sampler_create(&r->sampler, windows, r->cfg.data.sampling, (uint64_t)r->cfg.seed));
    r->micro = (int)r->cfg.train_micro_batch_size_per_gpu;
    r->in = malloc((size_t)r->micro * r->seq_len * sizeof *r->in);
    r->tg = malloc((size_t)r->micro * r->seq_len * sizeof *r->tg);
    if (!r->in || !r->tg) return zinf_fail(ZINF_ERR_NOMEM, "train_loop: out of memory");
    return zinf_engine_create(&r->e, &r->cfg, r->comm);
}

static zinf_status train(run *r) {
    bool rank0 = zinf_comm_rank(r->comm) == 0;
    // ---- resume: checkpoint.load is "latest" of checkpoint.dir or a step directory ----
    // (which must exist; `zinf train` starts afresh when checkpoint.dir has no latest)
    int64_t first = 0;
    const zinf_checkpoint_config *k = &r->cfg.checkpoint;
    if (k->load) {
        zinf_ckpt_resume res;
        TRY(zinf_engine_load(r->e, strcmp(k->load, "latest") == 0 ? k->dir : k->load, &res));
        first = res.step;
        r->position = res.data_position;
        if (rank0) printf("resumed %s step %lld\n", res.dir, (long long)first);
    }

    // ---- the loop: forward and backward per micro-batch, a step per batch ----
    for (int64_t i = first; i < r->steps; i++) {
        for (int m = 0; m < r->cfg.gradient_accumulation_steps; m++) {
            double micro_loss;
            TRY(load_micro(r, m));
            TRY(zinf_engine_forward(r->e, r->in, r->tg, r->micro, &micro_loss));
            TRY(zinf_engine_backward(r->e));
        }
        zinf_step_info si;
        TRY(zinf_engine_step(r->e, &si));
        r->position += r->cfg.train_batch_size;
        if (rank0)
            printf("step %lld loss %.17g lr %.6g grad_norm %.6g\n", (long long)si.step, si.loss, si.lr, si.grad_norm);
    }

    // ---- checkpoint: collective, between steps ----
    // data_position (sequences consumed) and the seed come back from zinf_engine_load,
    // so a resumed run (`zinf train --set checkpoint.load=latest`) continues the data.
    if (k->dir) {
        TRY(zinf_engine_save(r->e, k->dir, k->keep, r->position, r->cfg.seed));
        if (rank0) printf("saved %s step %lld\n", k->dir, (long long)r->steps);
    }

    // ---- one tensor, gathered from every rank's partition: collective ----
    const char *name = "wte.weight";
    const zinf_param_info *p = zinf_model_find_param(zinf_engine_model(r->e), name, NULL);
    if (!p) return zinf_fail(ZINF_ERR_INTERNAL, "the model has no %s", name);
    r->full = malloc(p->numel * sizeof *r->full);
    if (!r->full) return zinf_fail(ZINF_ERR_NOMEM, "train_loop: out of memory");
    TRY(zinf_engine_get_full(r->e, name, ZINF_STATE_PARAM, r->full));
    double sum = 0;
    for (size_t j = 0; j < p->numel; j++)
        sum += r->full[j];
    if (rank0) printf("%s %zu values sum %.17g first %.9g\n", name, p->numel, sum, (double)r->full[0]);

    char digest[17];
    TRY(zinf_engine_weights_digest(r->e, digest)); // collective
    if (rank0) printf("weights_digest %s\n", digest);
    return ZINF_OK;
}

// A usage or config mistake: exit code 2, as `zinf train`.
__attribute__((format(printf, 1, 2))) static int usage_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "train_loop: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    return 2;
}

int main(int argc, char **argv) {
    if (argc < 2 || argc > 3) return usage_error("usage: train_loop CONFIG.json [STEPS]");
    run r = {0};
    // The batch sizes are resolved for the world size the launcher gives (mpirun).
    zinf_config_options opts = {0};
    if (zinf_config_load(&r.cfg, argv[1], &opts) != ZINF_OK) return usage_error("%s", zinf_last_error());
    r.steps = argc == 3 ? strtoll(argv[2], NULL, 10) : r.cfg.steps;
    int rc = 0;
    if (r.steps < 1)
        rc = usage_error("%s: set \"steps\" or pass STEPS", argv[1]);
    else if (!r.cfg.model.present || !r.cfg.data.path)
        rc = usage_error("%s: needs \"model\" and \"data\"", argv[1]);
    else if (zinf_schedule_check(&r.cfg.scheduler) != ZINF_OK)
        rc = usage_error("%s", zinf_last_error());
    else {
        zinf_status st = open_all(&r);
        if (st == ZINF_OK) st = train(&r);
        if (st != ZINF_OK) {
            fprintf(stderr, "train_loop: %s: %s\n", zinf_status_str(st), zinf_last_error());
            rc = 1;
        }
    }
    // The engine first, then what it borrowed; every destroy takes NULL.
    zinf_engine_destroy(r.e);
    zinf_sampler_destroy(r.sampler);
    zinf_tokens_close(r.tok);
    zinf_comm_destroy(r.comm);
    free(r.in), free(r.tg), free(r.full);
    zinf_config_free(&r.cfg);
    return rc;
}
