// zinf train: the main job. Every rank reads the same config and data, drives its
// engine through the public API (forward and backward per micro-batch, a step per
// batch) on the micro-batches the sampling contract gives it, and rank 0 reports.
#include <getopt.h>
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cli.h"

#define TRY(call)                                                                                                      \
    do {                                                                                                               \
        zinf_status st_ = (call);                                                                                      \
        if (st_ != ZINF_OK) return st_;                                                                                \
    } while (0)

typedef struct trainer {
    zinf_config cfg;
    bool have_cfg, json, op_profile;
    bool bind_cores;          // --bind-cores-to-rank
    const char *core_list;    // --bind-core-list, or NULL
    zinf_sim_params op_model; // --op-profile: the GPU the ops are set beside
    int64_t steps;
    zinf_comm *comm;
    zinf_tokens *tok;
    zinf_sampler *sampler;
    zinf_engine *e;
    int seq_len, micro;
    int64_t first_step; // steps already taken when this run began (a resumed run)
    int64_t position;   // training sequences consumed so far
    int32_t *in, *tg;
    FILE *log;             // human output: stdout, or stderr under --json
    char save_error[1024]; // checkpoint.on_error "warn": why the last save failed, until one succeeds
} trainer;

static int parse(trainer *t, int argc, char **argv) {
    static const struct option opts[] = {
        {"steps", required_argument, NULL, 'n'},
        {"json", no_argument, NULL, 'j'},
        {"set", required_argument, NULL, 's'},
        {"op-profile", no_argument, NULL, 'o'},
        {"bind-cores-to-rank", no_argument, NULL, 'b'},
        {"bind-core-list", required_argument, NULL, 'l'},
        {NULL, 0, NULL, 0},
    };
    const char **sets = calloc((size_t)argc, sizeof *sets);
    zinf_config_options co = {.sets = sets};
    int c, rc = sets ? CLI_OK : cli_usage("train", "out of memory");
    t->steps = -1;
    opterr = 0;
    while (rc == CLI_OK && (c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        char *end;
        switch (c) {
        case 'n':
            t->steps = strtoll(optarg, &end, 10);
            if (*end || t->steps < 1) rc = cli_usage("train", "--steps: \"%s\" is not a positive integer", optarg);
            break;
        case 'j': t->json = true; break;
        case 'o': t->op_profile = true; break;
        case 'b': t->bind_cores = true; break;
        case 'l': t->core_list = optarg; break;
        case 's': sets[co.nsets++] = optarg; break;
        default: rc = cli_usage("train", "unknown option %s", argv[optind - 1]); break;
        }
    }
    if (rc == CLI_OK && t->core_list && !t->bind_cores)
        rc = cli_usage("train", "--bind-core-list needs --bind-cores-to-rank");
    int ncores, cores[1];
    if (rc == CLI_OK && t->core_list && zinf_cpu_parse_cores(t->core_list, cores, 1, &ncores) != ZINF_OK)
        rc = cli_fail("train", CLI_USAGE);
    if (rc == CLI_OK && optind != argc - 1)
        rc = cli_usage("train", optind == argc ? "missing CONFIG.json" : "unexpected argument \"%s\"", argv[argc - 1]);
    if (rc == CLI_OK) {
        if (zinf_config_load(&t->cfg, argv[optind], &co) != ZINF_OK)
            rc = cli_fail("train", CLI_USAGE);
        else
            t->have_cfg = true;
    }
    free(sets);
    if (rc != CLI_OK) return rc;
    if (t->steps < 0) t->steps = t->cfg.steps;
    if (t->steps < 0) return cli_usage("train", "%s: set \"steps\" in the config or pass --steps N", argv[optind]);
    if (!t->cfg.data.present || !t->cfg.data.path)
        return cli_usage("train",
                         "%s: no data.path: zinf train reads its tokens from a file; add {\"data\": {\"path\": FILE, "
                         "\"format\": ...}}",
                         argv[optind]);
    if (!t->cfg.model.present)
        return cli_usage("train", "%s: no \"model\" section; add e.g. {\"model\": {\"preset\": \"gpt2\"}}",
                         argv[optind]);
    if (t->op_profile && t->cfg.flops_profiler.enabled)
        return cli_usage("train", "--op-profile and flops_profiler.enabled both profile the device's ops; use one");
    if (zinf_schedule_check(&t->cfg.scheduler) != ZINF_OK) return cli_fail("train", CLI_USAGE);
    return CLI_OK;
}

// The engine's plan, printed by rank 0 before anything is allocated, and refused on
// every rank when a budget says no on any: the ranks on another host judge their own.
static zinf_status plan(trainer *t, const zinf_model_shape *shape) {
    zinf_plan_target target;
    zinf_plan pl;
    TRY(zinf_engine_target(&t->cfg, t->comm, &target));
    TRY(zinf_engine_plan(&t->cfg, &target, &pl));
    if (zinf_comm_rank(t->comm) == 0) {
        cli_plan p = {.cfg = &t->cfg,
                      .shape = *shape,
                      .seq_len = t->seq_len,
                      .windows = zinf_tokens_windows(t->tok, t->seq_len),
                      .target = &target,
                      .plan = &pl};
        cli_print_plan(t->log, &p);
        fflush(t->log);
    }
    zinf_status st = zinf_plan_verdict(&pl);
    double refused = st != ZINF_OK;
    TRY(zinf_comm_allreduce_f64(t->comm, &refused, 1));
    if (st != ZINF_OK) return st;
    if (refused > 0) return zinf_fail(ZINF_ERR_NOMEM, "the plan does not fit on another rank: see its error");
    return ZINF_OK;
}

static zinf_status open_all(trainer *t) {
    TRY(zinf_comm_create(&t->comm, ZINF_COMM_AUTO, 0));
    if (t->bind_cores) { // before the engine starts its threads and counts its cores
        char desc[320];
        TRY(zinf_cpu_bind_rank(zinf_comm_local_rank(t->comm), zinf_comm_local_size(t->comm), t->core_list, desc,
                               sizeof desc));
        ZINF_LOG_INFO("bind_cores_to_rank: local rank %d of %d on %s", zinf_comm_local_rank(t->comm),
                      zinf_comm_local_size(t->comm), desc);
    }
    TRY(zinf_tokens_open(&t->tok, t->cfg.data.path, t->cfg.data.format));
    zinf_model_shape shape;
    TRY(zinf_model_shape_from_config(&t->cfg.model, &shape));
    t->seq_len = t->cfg.data.seq_len > 0 ? (int)t->cfg.data.seq_len : shape.block_size;
    int64_t nw = zinf_tokens_windows(t->tok, t->seq_len);
    if (nw == 0)
        return zinf_fail(ZINF_ERR_INVAL, "%s: %lld tokens hold no window of data.seq_len %d + 1", t->cfg.data.path,
                         (long long)zinf_tokens_count(t->tok), t->seq_len);
    TRY(zinf_sampler_create(&t->sampler, nw, t->cfg.data.sampling, (uint64_t)t->cfg.seed));
    t->micro = (int)t->cfg.train_micro_batch_size_per_gpu;
    t->in = malloc((size_t)t->micro * t->seq_len * sizeof *t->in);
    t->tg = malloc((size_t)t->micro * t->seq_len * sizeof *t->tg);
    if (!t->in || !t->tg) return zinf_fail(ZINF_ERR_NOMEM, "train: out of memory");
    TRY(plan(t, &shape));
    return zinf_engine_create(&t->e, &t->cfg, t->comm);
}

static void close_all(trainer *t) {
    zinf_engine_destroy(t->e);
    zinf_sampler_destroy(t->sampler);
    zinf_tokens_close(t->tok);
    zinf_comm_destroy(t->comm);
    free(t->in), free(t->tg);
    if (t->have_cfg) zinf_config_free(&t->cfg);
}

static const char *sz(int64_t bytes, char *buf) { return zinf_size_format((uint64_t)bytes, buf, 32); }

// Rank r's micro-batch m of the next global batch (the sampling contract).
static zinf_status load_micro(trainer *t, int m) {
    int world = zinf_comm_size(t->comm), rank = zinf_comm_rank(t->comm);
    int vocab = zinf_model_get_params(zinf_engine_model(t->e))->shape.vocab_size;
    int64_t first = t->position + ((int64_t)m * world + rank) * t->micro;
    for (int j = 0; j < t->micro; j++) {
        int64_t w;
        TRY(zinf_sampler_window(t->sampler, first + j, &w));
        size_t at = (size_t)j * t->seq_len;
        TRY(zinf_tokens_window(t->tok, w, t->seq_len, vocab, t->in + at, t->tg + at));
    }
    return ZINF_OK;
}

// The resources a step's time can be bound by and how long each was busy in it: the
// device's engines and links as modeled (sim), the NVMe link as measured (some read or
// write in flight) and CPU Adam (the update's time).
typedef struct busy_row {
    const char *name, *key;
    double s;
} busy_row;

static int busy_rows(const zinf_step_info *si, busy_row rows[7]) {
    rows[0] = (busy_row){"device compute", "device_compute", si->device_compute_s};
    rows[1] = (busy_row){"pcie up", "pcie_h2d", si->pcie_h2d_s};
    rows[2] = (busy_row){"pcie down", "pcie_d2h", si->pcie_d2h_s};
    rows[3] = (busy_row){"gpu links", "gpu_links", si->gpu_link_s};
    rows[4] = (busy_row){"nvme read", "nvme_read", si->nvme_read_s};
    rows[5] = (busy_row){"nvme write", "nvme_write", si->nvme_write_s};
    rows[6] = (busy_row){"cpu adam", "cpu_adam", si->optim_s + si->optim_backward_s};
    return 7;
}

static void report(trainer *t, const zinf_step_info *si, double secs, double fpt) {
    zinf_engine_memory m;
    zinf_engine_memory_get(t->e, &m);
    double tokens = (double)t->cfg.train_batch_size * t->seq_len, tps = tokens / secs, tflops = tps * fpt / 1e12;
    busy_row rows[7];
    int nb = busy_rows(si, rows), bound = 0;
    for (int i = 1; i < nb; i++)
        if (rows[i].s > rows[bound].s) bound = i;
    if (t->json) {
        // A skipped step's norm is inf or NaN, which JSON cannot hold: null; a simulated
        // device's loss and norm mean nothing: null too.
        json_t *o = json_pack(
            "{s:I, s:o, s:f, s:o, s:f, s:f, s:f, s:f, s:b, s:I, s:I, s:I, s:I}", "step", (json_int_t)si->step, "loss",
            si->simulated ? json_null() : json_real(si->loss), "lr", si->lr, "grad_norm",
            isfinite(si->grad_norm) && !si->simulated ? json_real(si->grad_norm) : json_null(), "step_seconds", secs,
            "tokens_per_s", tps, "tflops", tflops, "loss_scale", si->loss_scale, "skipped", si->skipped, "device_bytes",
            (json_int_t)m.device_in_use, "device_peak_bytes", (json_int_t)m.device_peak, "pinned_bytes",
            (json_int_t)m.pinned, "nvme_bytes", (json_int_t)m.nvme);
        // The heap's bytes in use (all arenas and the chunks malloc mapped), at the same
        // point of every step: what a leak raises exactly, where resident memory also moves
        // with fragmentation and trimming.
        struct mallinfo2 heap = mallinfo2();
        json_object_set_new(o, "heap_bytes", json_integer((json_int_t)(heap.uordblks + heap.hblkhd)));
        json_object_set_new(o, "checkpoint_error", t->save_error[0] ? json_string(t->save_error) : json_null());
        json_t *times = json_pack(
            "{s:f, s:f, s:f, s:f, s:f, s:I, s:I, s:f, s:f, s:I, s:I, s:I}", "wait_params_s", si->wait_params_s,
            "wait_params_nvme_s", si->wait_params_nvme_s, "optim_s", si->optim_s, "optim_io_wait_s",
            si->optim_io_wait_s, "wait_optim_s", si->wait_optim_s, "nvme_read_bytes", (json_int_t)si->nvme_read_bytes,
            "nvme_write_bytes", (json_int_t)si->nvme_write_bytes, "nvme_read_s", si->nvme_read_s, "nvme_write_s",
            si->nvme_write_s, "comm_bytes_intra", (json_int_t)si->comm_bytes_intra, "comm_bytes_inter",
            (json_int_t)si->comm_bytes_inter, "param_handoff_bytes", (json_int_t)si->param_handoff_bytes);
        json_object_update(o, times);
        json_decref(times);
        json_t *spec = json_pack("{s:f, s:i, s:i}", "optim_backward_s", si->optim_backward_s, "optim_speculated",
                                 si->optim_speculated, "optim_rolled_back", si->optim_rolled_back);
        json_object_update(o, spec);
        json_decref(spec);
        if (si->simulated) {
            json_t *busy = json_object();
            for (int i = 0; i < nb; i++)
                json_object_set_new(busy, rows[i].key, json_real(rows[i].s));
            json_t *sim =
                json_pack("{s:b, s:o, s:s, s:f, s:f}", "simulated", 1, "busy_s", busy, "bound", rows[bound].key,
                          "bound_s", rows[bound].s, "step_over_bound", rows[bound].s > 0 ? secs / rows[bound].s : 0.0);
            json_object_update(o, sim);
            json_decref(sim);
        }
        cli_print_json_line(o);
    }
    if (si->step % t->cfg.steps_per_print == 0 || si->step == t->steps) {
        char b[4][32];
        fprintf(t->log, "step %lld/%lld", (long long)si->step, (long long)t->steps);
        if (si->simulated)
            fprintf(t->log, " | simulated device");
        else
            fprintf(t->log, " | loss %.4f", si->loss);
        fprintf(t->log, " | lr %.3e", si->lr);
        if (!si->simulated) fprintf(t->log, " | grad norm %.3f", si->grad_norm);
        fprintf(t->log, " | %.0f tok/s | %.3f TFLOPS | device %s (peak %s) | pinned %s | nvme %s", tps, tflops,
                sz(m.device_in_use, b[0]), sz(m.device_peak, b[1]), sz(m.pinned, b[2]), sz(m.nvme, b[3]));
        // Where the step's time went, for what is offloaded.
        if (t->cfg.zero.stage == 3)
            fprintf(t->log, " | waited for params %.3f s (nvme %.3f s)", si->wait_params_s, si->wait_params_nvme_s);
        // The offloaded update: under this step's backward (the sub-groups its gradients
        // made final, and those redone because the step clipped or overflowed), then under
        // the forward, and how long the forward stood waiting for it.
        if (m.optimizer_tier != ZINF_OFFLOAD_NONE)
            fprintf(t->log,
                    " | optimizer %.3f s under the backward (%d sub-groups, %d redone), %.3f s under the forward "
                    "(waiting on nvme %.3f s), the forward waited %.3f s for it",
                    si->optim_backward_s, si->optim_speculated, si->optim_rolled_back, si->optim_s, si->optim_io_wait_s,
                    si->wait_optim_s);
        else if (t->cfg.zero.stage < 3) // the device's update runs under the next forward
            fprintf(t->log, " | the forward waited %.3f s for the update", si->wait_optim_s);
        if (m.nvme)
            fprintf(t->log, " | nvme read %.2f GB/s, write %.2f GB/s",
                    si->nvme_read_s > 0 ? (double)si->nvme_read_bytes / si->nvme_read_s / 1e9 : 0.0,
                    si->nvme_write_s > 0 ? (double)si->nvme_write_bytes / si->nvme_write_s / 1e9 : 0.0);
        if (zinf_comm_size(t->comm) > 1)
            fprintf(t->log, " | received %s in node, %s across", sz(si->comm_bytes_intra, b[0]),
                    sz(si->comm_bytes_inter, b[1]));
        if (t->save_error[0]) fprintf(t->log, " | warning: %s", t->save_error);
        if (si->simulated) {
            fprintf(t->log, " | busy:");
            for (int i = 0; i < nb; i++)
                fprintf(t->log, "%s %s %.3f s", i ? "," : "", rows[i].name, rows[i].s);
            fprintf(t->log, " | bound: %s, step %.2fx it", rows[bound].name,
                    rows[bound].s > 0 ? secs / rows[bound].s : 0.0);
        }
        fprintf(t->log, "\n");
        fflush(t->log);
    }
}

// This process's peak resident memory, in bytes (getrusage gives KiB on Linux).
static int64_t peak_rss(void) {
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? (int64_t)ru.ru_maxrss * 1024 : 0;
}

// checkpoint.load: "latest" of checkpoint.dir (none there yet: a fresh start, so that
// one config serves the first run of a job and every restart), or a directory.
static zinf_status resume(trainer *t) {
    const zinf_checkpoint_config *k = &t->cfg.checkpoint;
    if (!k->load) return ZINF_OK;
    const char *path = k->load;
    if (strcmp(k->load, "latest") == 0) {
        char p[4096];
        snprintf(p, sizeof p, "%s/latest", k->dir);
        if (access(p, F_OK) != 0) {
            if (zinf_comm_rank(t->comm) == 0)
                fprintf(t->log, "checkpoint: none in %s yet; starting from step 0\n", k->dir);
            return ZINF_OK;
        }
        path = k->dir;
    }
    zinf_ckpt_resume r;
    TRY(zinf_engine_load(t->e, path, &r));
    t->first_step = r.step;
    t->position = r.data_position;
    if (zinf_comm_rank(t->comm) == 0) {
        fprintf(t->log, "checkpoint: resumed from %s at step %lld (saved by %d rank%s)\n", r.dir, (long long)r.step,
                r.world_size, r.world_size == 1 ? "" : "s");
        if (r.seed != t->cfg.seed)
            fprintf(t->log,
                    "checkpoint: warning: saved with seed %lld, this run has seed %lld: the data order "
                    "from here on is this run's\n",
                    (long long)r.seed, (long long)t->cfg.seed);
    }
    return ZINF_OK;
}

// A checkpoint of this step. One that cannot be written stops the run (the previous one
// stays whole), or with checkpoint.on_error "warn" is said and kept in every step line
// until a later one is written; the failed directory is gone either way.
static zinf_status save(trainer *t, int64_t step, int64_t *saved) {
    const zinf_checkpoint_config *k = &t->cfg.checkpoint;
    zinf_status st = zinf_engine_save(t->e, k->dir, k->keep, t->position, t->cfg.seed);
    if (st == ZINF_OK) {
        t->save_error[0] = 0;
        *saved = step;
        return ZINF_OK;
    }
    if (k->on_error == ZINF_CKPT_ON_ERROR_STOP) return st;
    snprintf(t->save_error, sizeof t->save_error, "%s", zinf_last_error());
    if (zinf_comm_rank(t->comm) == 0)
        fprintf(t->log, "checkpoint: warning: %s; training goes on (checkpoint.on_error \"warn\")\n", t->save_error);
    return ZINF_OK;
}

// After a run failed: where to resume from (a checkpoint that opens whole), for rank 0
// to say.
static void resume_hint(const trainer *t) {
    const char *dir = t->cfg.checkpoint.dir;
    if (!dir || zinf_comm_rank(t->comm) != 0) return;
    zinf_ckpt *ck;
    if (zinf_ckpt_open(&ck, dir) == ZINF_OK) {
        fprintf(stderr, "zinf train: the newest checkpoint is %s: resume from it with --set checkpoint.load=latest\n",
                zinf_ckpt_dir(ck));
        zinf_ckpt_close(ck);
    } else {
        fprintf(stderr, "zinf train: no checkpoint in %s to resume from (%s): a new run starts from step 0\n", dir,
                zinf_last_error());
    }
}

// --op-profile: every op of the steps after the first, timed on the device beside the
// sim model's time for it (rank 0 prints, per step).
static zinf_status op_profile_start(trainer *t) {
    zinf_device *d = zinf_engine_device(t->e);
    cli_op_model("train", NULL, &t->cfg, zinf_device_get_caps(d), &t->op_model); // no --gpu: cannot fail
    return zinf_device_profile_start(d, &t->op_model);
}

static zinf_status op_profile_report(trainer *t, int64_t steps) {
    zinf_device *d = zinf_engine_device(t->e);
    zinf_op_time rows[512];
    int n;
    TRY(zinf_device_profile_stop(d, rows, (int)ZINF_ARRAY_LEN(rows), &n));
    if (zinf_comm_rank(t->comm) != 0) return ZINF_OK;
    zinf_sim_rates r;
    zinf_sim_rates_of(&t->op_model, &r);
    fprintf(t->log, "op profile: per step over the last %lld, on %s, beside the sim's %s\n", (long long)steps,
            zinf_device_get_caps(d)->name, r.name);
    zinf_op_times_print(t->log, rows, n, (double)steps, false);
    return ZINF_OK;
}

static zinf_status train(trainer *t) {
    bool speak = zinf_comm_rank(t->comm) == 0;
    TRY(resume(t));
    const zinf_checkpoint_config *k = &t->cfg.checkpoint;
    double fpt = zinf_engine_flops_per_token(t->e), start = zinf_clock_s(), loss = NAN;
    bool simulated = false; // a simulated device's loss means nothing: none is reported
    // The step of the newest checkpoint in checkpoint.dir, as far as this run knows.
    int64_t saved = k->load && strcmp(k->load, "latest") == 0 ? t->first_step : -1;
    for (int64_t i = t->first_step; i < t->steps; i++) {
        double l;
        for (int m = 0; m < t->cfg.gradient_accumulation_steps; m++) {
            TRY(load_micro(t, m));
            TRY(zinf_engine_forward(t->e, t->in, t->tg, t->micro, &l));
            TRY(zinf_engine_backward(t->e));
        }
        zinf_step_info si;
        TRY(zinf_engine_step(t->e, &si));
        t->position += t->cfg.train_batch_size;
        loss = si.loss;
        simulated = si.simulated;
        if (speak) report(t, &si, si.step_seconds, fpt);
        if (k->dir && k->interval > 0 && si.step % k->interval == 0) TRY(save(t, si.step, &saved));
        if (t->op_profile && i == t->first_step) TRY(op_profile_start(t)); // the first step warms up
    }
    if (t->op_profile && t->steps > t->first_step + 1) TRY(op_profile_report(t, t->steps - t->first_step - 1));
    // The run's end is always kept when there is a checkpoint.dir.
    int64_t last = t->first_step > t->steps ? t->first_step : t->steps;
    if (k->dir && saved != last) TRY(save(t, last, &saved));
    char digest[17];
    TRY(zinf_engine_weights_digest(t->e, digest));
    int64_t ran = t->steps > t->first_step ? t->steps - t->first_step : 0;
    double secs = zinf_clock_s() - start, tokens = (double)ran * t->cfg.train_batch_size * t->seq_len;
    zinf_engine_memory m;
    zinf_engine_memory_get(t->e, &m);
    if (speak && t->json)
        cli_print_json_line(json_pack(
            "{s:b, s:I, s:o, s:f, s:f, s:f, s:I, s:I, s:I, s:s}", "final", 1, "steps", (json_int_t)t->steps, "loss",
            simulated ? json_null() : json_real(loss), "seconds", secs, "tokens", tokens, "tokens_per_s", tokens / secs,
            "device_peak_bytes", (json_int_t)m.device_peak, "gathered_peak_bytes", (json_int_t)m.gathered_max,
            "peak_rss_bytes", (json_int_t)peak_rss(), "weights_digest", digest));
    if (speak) {
        fprintf(t->log, "done: %lld steps, %.0f tokens in %.1f s (%.0f tok/s), ", (long long)t->steps, tokens, secs,
                tokens / secs);
        if (simulated)
            fprintf(t->log, "on a simulated device (no loss), weights %s\n", digest);
        else
            fprintf(t->log, "final loss %.4f, weights %s\n", loss, digest);
    }
    return ZINF_OK;
}

int cli_train(int argc, char **argv) {
    trainer t = {0};
    int rc = parse(&t, argc, argv);
    t.log = t.json ? stderr : stdout;
    if (rc == CLI_OK && open_all(&t) != ZINF_OK) rc = cli_fail("train", CLI_FAIL);
    if (rc == CLI_OK && train(&t) != ZINF_OK) {
        rc = cli_fail("train", CLI_FAIL);
        resume_hint(&t);
    }
    close_all(&t);
    return rc;
}
