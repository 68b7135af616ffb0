// zinf estimate: what each ZeRO stage and offload choice needs per rank (device, pinned
// and pageable host memory, NVMe) and moves per optimizer step (host <-> device, NVMe).
// Every figure is the engine's own plan (zinf_engine_plan: creation's code counting
// instead of allocating, and a replay of two steps); this file picks the rows and
// prints them. tests/cli/test_estimate.sh holds the plan to what `zinf train` measures.
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "io_measure.h"

static const char *sz(int64_t bytes, char *buf) { return zinf_size_format((uint64_t)bytes, buf, 32); }

static const char *const tier_name[] = {"none", "cpu", "nvme"};

// One row of the estimate: a config with a stage and two tiers, where it runs, and its plan.
typedef struct plan {
    zinf_config cfg; // the caller's, with the row's stage and tiers
    zinf_model_shape s;
    int seq_len;
    zinf_plan_target t;
    zinf_plan r;
    bool timed; // --time: tm holds the step's time on the modeled GPU
    zinf_step_time tm;
} plan;

// Where the rows run: world ranks, gpus_per_node of them sharing a host's memory. The
// estimate is for GPUs ("auto" counts as cuda, with NCCL between ranks, one GPU each),
// whose capacity is device.memory_limit's or not known; the host and sim backends' is
// the device's. Host memory is this machine's.
static zinf_status target_of(const zinf_config *cfg, int world, int gpus_per_node, zinf_plan_target *t) {
    zinf_backend b = cfg->device.backend;
    bool gpu = b == ZINF_BACKEND_AUTO || b == ZINF_BACKEND_CUDA;
    *t = (zinf_plan_target){.world = world,
                            .nodes = world / gpus_per_node,
                            .backend = gpu ? ZINF_BACKEND_CUDA : b,
                            .nccl = (gpu || b == ZINF_BACKEND_SIM) && world > 1,
                            .device_capacity = cfg->device.memory_limit > 0 ? cfg->device.memory_limit : -1,
                            .local_ranks = gpus_per_node};
    if (!gpu) {
        zinf_device_choice dc;
        zinf_device_params dp = {.backend = b,
                                 .memory_limit = cfg->device.memory_limit,
                                 .sim = cfg->device.sim,
                                 .attention = cfg->device.attention};
        ZINF_CHECK(zinf_device_choose(&dp, &dc));
        t->device_capacity = (int64_t)dc.capacity;
    }
    return zinf_host_mem_probe(&t->host);
}

static zinf_status plan_make(plan *p) { return zinf_engine_plan(&p->cfg, &p->t, &p->r); }

// ---- output ----

// true, false, or null where the device's capacity is not known and nothing else exceeds.
static json_t *fits_json(const zinf_plan *r) {
    return r->fit == ZINF_PLAN_FITS_UNKNOWN ? json_null() : json_boolean(r->fit == ZINF_PLAN_FITS);
}

static json_t *row_fields(const plan *p) {
    const zinf_engine_memory *m = &p->r.mem;
    return json_pack("{s:i, s:s, s:s, s:i, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:s, s:o}",
                     "stage", (int)p->cfg.zero.stage, "optimizer", tier_name[m->optimizer_tier], "params",
                     tier_name[m->params_tier], "world_size", p->t.world, "model_numel", (json_int_t)m->model_numel,
                     "partition_numel", (json_int_t)m->partition_numel, "device_bytes", (json_int_t)m->device_in_use,
                     "device_peak_bytes", (json_int_t)p->r.device_peak, "gathered_peak_bytes",
                     (json_int_t)p->r.gathered_peak, "pinned_bytes", (json_int_t)m->pinned, "pageable_bytes",
                     (json_int_t)(m->host_total - m->pinned), "nvme_bytes", (json_int_t)m->nvme, "activation_bytes",
                     (json_int_t)m->activations, "pcie_h2d_bytes", (json_int_t)p->r.h2d, "pcie_d2h_bytes",
                     (json_int_t)p->r.d2h, "nvme_read_bytes", (json_int_t)p->r.nvme_read, "nvme_write_bytes",
                     (json_int_t)p->r.nvme_write, "comm_bytes_intra", (json_int_t)p->r.comm_intra, "comm_bytes_inter",
                     (json_int_t)p->r.comm_inter, "tiled", p->r.tiled, "fits", fits_json(&p->r));
}

static json_t *time_json(const zinf_step_time *t) {
    return json_pack("{s:f, s:f, s:s, s:{s:f, s:f, s:f, s:f, s:f, s:f, s:f}}", "step_seconds", t->step,
                     "step_seconds_clipping", t->step_clipping, "bound", t->bound, "busy_s", "device_compute",
                     t->compute, "pcie_h2d", t->h2d, "pcie_d2h", t->d2h, "gpu_links", t->links, "nvme_read",
                     t->nvme_read, "nvme_write", t->nvme_write, "cpu_optimizer", t->cpu);
}

static json_t *row_json(const plan *p) {
    const zinf_engine_memory *m = &p->r.mem;
    json_t *o = row_fields(p);
    // Each row's model states and buffers: where the device, pinned and pageable bytes go.
    json_t *states = json_pack(
        "{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "params16_bytes", (json_int_t)m->params16, "master_bytes",
        (json_int_t)m->master, "optim_states_bytes", (json_int_t)m->optim_states, "grads32_bytes",
        (json_int_t)m->grads32, "optimizer_device_numel", (json_int_t)m->optimizer_device_numel, "reduce_bucket_bytes",
        (json_int_t)m->reduce_bufs, "accumulated_grads_bytes", (json_int_t)m->accumulated_grads, "staging_bytes",
        (json_int_t)m->staging, "reduce_bucket_size",
        (json_int_t)(p->r.choice.reduce_bucket_size ? p->r.choice.reduce_bucket_size : p->cfg.zero.reduce_bucket_size));
    json_object_update(o, states);
    json_decref(states);
    if (p->timed) {
        json_t *t = time_json(&p->tm);
        json_object_update(o, t);
        json_decref(t);
    }
    return o;
}

// ---- the memory-centric features ----

// What each memory-centric feature does to the config's row: the row planned again
// with the feature switched the other way.
typedef struct features {
    int64_t tokens;     // of a micro-batch
    int64_t head_chunk; // the output layer's chunk in the row (tokens: at once)
    plan head_other;    // the row with the head at once where it is chunked, else in chunks
    bool ckpt;          // activation checkpointing is on: ckpt_other is the row with
    plan ckpt_other;    // cpu_checkpointing the other way
    bool tiles;         // tiling applies to the row (one of the two plans tiles): tiles_other
    plan tiles_other;   // is the row untiled where it tiles, else with an eighth of the embedding as the bound
} features;

static int features_of(const plan *own, features *f) {
    const zinf_config *c = &own->cfg;
    f->tokens = c->train_micro_batch_size_per_gpu * own->seq_len;
    int64_t chunk = own->r.choice.head_chunk_tokens ? own->r.choice.head_chunk_tokens : c->memory.head_chunk_tokens;
    f->head_chunk = chunk > 0 && chunk < f->tokens ? chunk : f->tokens;
    f->head_other = *own;
    // At once where it is chunked; else in chunks of a quarter of the tokens, to show
    // what chunking would save.
    f->head_other.cfg.memory.head_chunk_tokens = f->head_chunk < f->tokens ? f->tokens : (f->tokens + 3) / 4;
    if (plan_make(&f->head_other) != ZINF_OK) return cli_fail("estimate", CLI_FAIL);
    f->tiles_other = *own;
    // Untiled where the row tiles; else what an eighth of the embedding as the bound would do.
    int64_t eighth = (int64_t)own->s.vocab_size * own->s.n_embd / 8;
    f->tiles_other.cfg.memory.tile_bound = own->r.tiled[0] ? -1 : eighth > 2048 ? eighth : 2048;
    if (c->zero.stage == 3 && plan_make(&f->tiles_other) != ZINF_OK) return cli_fail("estimate", CLI_FAIL);
    f->tiles = c->zero.stage == 3 && (own->r.tiled[0] || f->tiles_other.r.tiled[0]);
    const zinf_activation_checkpointing_config *ac = &c->activation_checkpointing;
    f->ckpt = ac->enabled;
    if (!f->ckpt) return CLI_OK;
    f->ckpt_other = *own;
    f->ckpt_other.cfg.activation_checkpointing.cpu_checkpointing = !ac->cpu_checkpointing;
    return plan_make(&f->ckpt_other) == ZINF_OK ? CLI_OK : cli_fail("estimate", CLI_FAIL);
}

// The row's plan with the checkpoints in host memory and on the device.
static void ckpt_plans(const plan *own, const features *f, const plan **host, const plan **dev) {
    bool on = own->cfg.activation_checkpointing.cpu_checkpointing;
    *host = on ? own : &f->ckpt_other, *dev = on ? &f->ckpt_other : own;
}

static void print_features(const plan *own, const features *f) {
    char b[2][32];
    printf("  memory-centric features, the device peak of this row with and without each:\n");
    if (f->head_chunk < f->tokens)
        printf("    output layer in chunks of %lld tokens (memory.head_chunk_tokens): %s; all %lld at once: %s\n",
               (long long)f->head_chunk, sz(own->r.device_peak, b[0]), (long long)f->tokens,
               sz(f->head_other.r.device_peak, b[1]));
    else
        printf("    output layer, all %lld tokens at once: %s; in chunks of %lld (memory.head_chunk_tokens): %s\n",
               (long long)f->tokens, sz(own->r.device_peak, b[0]),
               (long long)f->head_other.cfg.memory.head_chunk_tokens, sz(f->head_other.r.device_peak, b[1]));
    if (f->tiles) {
        const plan *on = own->r.tiled[0] ? own : &f->tiles_other, *off = own->r.tiled[0] ? &f->tiles_other : own;
        printf("    %s (memory.tile_bound %lld): %s; gathered whole: %s\n", on->r.tiled,
               (long long)on->cfg.memory.tile_bound, sz(on->r.device_peak, b[0]), sz(off->r.device_peak, b[1]));
    }
    if (!f->ckpt) {
        printf("    activation checkpointing is off (the activation_checkpointing section turns it on)\n");
        return;
    }
    const plan *host, *dev;
    ckpt_plans(own, f, &host, &dev);
    char c[2][32];
    printf("    activation checkpoints in pinned host memory (activation_checkpointing.cpu_checkpointing): %s, "
           "pinned %s; on the device: %s, pinned %s\n",
           sz(host->r.device_peak, b[0]), sz(host->r.mem.pinned, c[0]), sz(dev->r.device_peak, b[1]),
           sz(dev->r.mem.pinned, c[1]));
}

// The config's own row: every figure of train's plan lines, in bytes.
// pace: the offload_optimizer.ratio that takes the CPU off the step's bound (NULL: none
// looked for or found).
static json_t *plan_json(const plan *p, const features *f, const plan *pace) {
    const zinf_engine_memory *m = &p->r.mem;
    json_t *o = row_json(p);
    json_t *more = json_pack(
        "{s:b, s:I, s:i, s:i, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:i, s:I}", "plan", 1, "params_host_bytes",
        (json_int_t)m->params_host, "params_resident", m->params_resident, "param_buffers", m->param_buffers,
        "param_buffer_bytes", (json_int_t)m->param_buffer_bytes, "optimizer_host_bytes", (json_int_t)m->host,
        "optim_output_bytes", (json_int_t)m->optim_output, "optim_swap_buffer_bytes",
        (json_int_t)m->optim_swap_buffers, "optim_speculation_bytes", (json_int_t)m->optim_speculation,
        "host_bytes", (json_int_t)m->host_total,
        "hpz_secondary_bytes", (json_int_t)m->secondary, "subgroups", m->subgroups, "subgroup_max", (json_int_t)m->subgroup_max);
    bool chunked = f->head_chunk < f->tokens;
    json_t *feat = json_pack("{s:I, s:I, s:I}", "head_chunk_tokens", (json_int_t)f->head_chunk,
                             "device_peak_head_chunked_bytes",
                             (json_int_t)(chunked ? p->r.device_peak : f->head_other.r.device_peak),
                             "device_peak_head_at_once_bytes",
                             (json_int_t)(chunked ? f->head_other.r.device_peak : p->r.device_peak));
    json_object_update(more, feat);
    json_decref(feat);
    if (f->tiles) {
        bool on = p->r.tiled[0];
        json_t *tl = json_pack("{s:I, s:I}", "device_peak_tiled_bytes",
                               (json_int_t)(on ? p->r.device_peak : f->tiles_other.r.device_peak),
                               "device_peak_untiled_bytes",
                               (json_int_t)(on ? f->tiles_other.r.device_peak : p->r.device_peak));
        json_object_update(more, tl);
        json_decref(tl);
    }
    if (f->ckpt) {
        const plan *host, *dev;
        ckpt_plans(p, f, &host, &dev);
        json_t *ck = json_pack("{s:I, s:I, s:I}", "activation_host_bytes", (json_int_t)p->r.mem.activation_host,
                               "device_peak_ckpt_host_bytes", (json_int_t)host->r.device_peak,
                               "device_peak_ckpt_device_bytes", (json_int_t)dev->r.device_peak);
        json_object_update(more, ck);
        json_decref(ck);
    }
    if (pace) {
        json_t *pj = json_pack("{s:f, s:f, s:I}", "pace_ratio", pace->cfg.zero.offload_optimizer.ratio,
                               "pace_ratio_step_seconds", pace->tm.step, "pace_ratio_device_peak_bytes",
                               (json_int_t)pace->r.device_peak);
        json_object_update(more, pj);
        json_decref(pj);
    }
    json_t *budgets =
        json_pack("{s:I, s:I, s:I}", "device_capacity_bytes", (json_int_t)p->r.device.have, "pinned_budget_bytes",
                  (json_int_t)p->r.pinned.have, "host_available_bytes", (json_int_t)p->r.host.have);
    json_object_update(more, budgets);
    json_decref(budgets);
    json_object_update(more, o); // "plan" first, then the row's keys
    json_decref(o);
    return more;
}

static void table_head(bool timed) {
    printf("%-5s %-9s %-6s | %10s %10s | %10s %10s | %10s | %10s %10s | %10s %10s | %10s %10s | %s", "stage",
           "optimizer", "params", "device", "dev. peak", "pinned", "pageable", "NVMe", "PCIe h2d", "PCIe d2h",
           "NVMe read", "NVMe write", "net node", "net across", "fits");
    if (timed) printf(" | %8s  %-14s", "step", "bound");
    printf("\n");
}

static void table_row(const plan *p, bool mark, bool fastest) {
    static const char *const fits[] = {"yes", "no", "?"}; // zinf_plan_fit
    const zinf_engine_memory *m = &p->r.mem;
    char b[11][32];
    printf("%-5d %-9s %-6s | %10s %10s | %10s %10s | %10s | %10s %10s | %10s %10s | %10s %10s | %-4s",
           (int)p->cfg.zero.stage, tier_name[m->optimizer_tier], tier_name[m->params_tier], sz(m->device_in_use, b[0]),
           sz(p->r.device_peak, b[1]), sz(m->pinned, b[2]), sz(m->host_total - m->pinned, b[3]), sz(m->nvme, b[4]),
           sz(p->r.h2d, b[5]), sz(p->r.d2h, b[6]), sz(p->r.nvme_read, b[7]), sz(p->r.nvme_write, b[8]),
           sz(p->r.comm_intra, b[9]), sz(p->r.comm_inter, b[10]), fits[p->r.fit]);
    if (p->timed) printf(" | %7.3fs  %-14s", p->tm.step, p->tm.bound);
    printf("%s%s\n", fastest ? "  <- fastest" : "", mark ? "  <- this config" : "");
}

// The lines zinf train prints before it allocates (the same printer), for this plan;
// the data windows come from the data file.
static void print_plan(const plan *p) {
    const zinf_config *c = &p->cfg;
    cli_plan pl = {.cfg = c, .shape = p->s, .seq_len = p->seq_len, .windows = -1, .target = &p->t, .plan = &p->r};
    zinf_tokens *tok = NULL;
    if (c->data.present && c->data.path && zinf_tokens_open(&tok, c->data.path, c->data.format) == ZINF_OK)
        pl.windows = zinf_tokens_windows(tok, p->seq_len);
    zinf_tokens_close(tok);
    cli_print_plan(stdout, &pl);
}

// ---- the command ----

// A GPT-2-like shape for n parameters: GPT-2's vocabulary (50257), block size (1024)
// and head size (64), and of the n_layer and n_embd (a multiple of 64) with n_embd /
// n_layer from 48 to 80 (GPT-2 small's 64 in the middle) the pair whose count is
// nearest n; between equals, the aspect nearer 64.
static zinf_model_shape shape_for(uint64_t n) {
    // A model's count is linear in n_layer: per n_embd, the count at 0 layers and per
    // layer, from the model's own tables at 1 and 2 layers (computed once each).
    enum { MAX_L = 4096, MAX_C64 = 80 * MAX_L / 64 };
    static double base[MAX_C64 + 1], per_layer[MAX_C64 + 1];
    zinf_model_shape best = zinf_model_shape_gpt2(1, 1, 64, 50257, 1024);
    double best_err = INFINITY, best_aspect = INFINITY;
    for (int L = 1; L <= MAX_L; L++) {
        for (int C = (48 * L + 63) / 64 * 64; C <= 80 * L; C += 64) {
            if (!per_layer[C / 64]) {
                zinf_model_shape one = zinf_model_shape_gpt2(1, C / 64, C, 50257, 1024), two = one;
                two.n_layer = 2;
                double c1 = (double)zinf_model_param_count(&one), c2 = (double)zinf_model_param_count(&two);
                per_layer[C / 64] = c2 - c1, base[C / 64] = c1 - (c2 - c1);
            }
            double count = base[C / 64] + L * per_layer[C / 64], err = fabs(count - (double)n);
            double aspect = fabs((double)C / L - 64);
            if (err < best_err || (err == best_err && aspect < best_aspect))
                best = zinf_model_shape_gpt2(L, C / 64, C, 50257, 1024), best_err = err, best_aspect = aspect;
            if (C == (48 * L + 63) / 64 * 64 && count > 2.0 * (double)n) return best; // larger L only grow
        }
    }
    return best;
}

// The built-in config of --params: bf16, one sequence of block_size tokens per rank,
// every other setting zinf's default.
static int params_config(uint64_t n, int world, const char *const *sets, int nsets, zinf_config *cfg) {
    zinf_model_shape s = shape_for(n);
    char json[512];
    snprintf(json, sizeof json,
             "{\"train_micro_batch_size_per_gpu\": 1, \"bf16\": {\"enabled\": true}, \"model\": {\"n_layer\": %d, "
             "\"n_head\": %d, \"n_embd\": %d, \"vocab_size\": %d, \"block_size\": %d}}",
             s.n_layer, s.n_head, s.n_embd, s.vocab_size, s.block_size);
    zinf_config_options co = {.sets = sets, .nsets = nsets, .world_size = world};
    if (zinf_config_parse(cfg, json, "--params", &co) != ZINF_OK) return cli_usage("estimate", "%s", zinf_last_error());
    return CLI_OK;
}

typedef struct args {
    uint64_t params;
    const char *config;
    const char **sets;
    int nsets, gpus, nodes;
    bool json, have_params;
    bool time;                  // --time: each row's step time on the modeled GPU
    bool measure;               // --measure: the rates not given, measured on this machine
    const char *gpu;            // --gpu: the sim preset modeled (else the config's device.sim)
    zinf_host_rates rates;      // --nvme-read, --nvme-write, --adam (0: not given)
} args;

// A positive rate in units of unit (GB/s: 1e9; million elements/s: 1e6).
static int parse_rate(const char *opt, const char *arg, double unit, double *out) {
    char *end;
    double v = strtod(arg, &end);
    if (end == arg || *end || !(v > 0) || !isfinite(v))
        return cli_usage("estimate", "%s: \"%s\" is not a positive number", opt, arg);
    *out = v * unit;
    return CLI_OK;
}

static int parse(args *a, int argc, char **argv) {
    static const struct option opts[] = {
        {"params", required_argument, NULL, 'n'},
        {"config", required_argument, NULL, 'c'},
        {"gpus-per-node", required_argument, NULL, 'g'},
        {"nodes", required_argument, NULL, 'k'},
        {"set", required_argument, NULL, 's'},
        {"json", no_argument, NULL, 'j'},
        {"time", no_argument, NULL, 't'},
        {"gpu", required_argument, NULL, 'G'},
        {"nvme-read", required_argument, NULL, 'r'},
        {"nvme-write", required_argument, NULL, 'w'},
        {"adam", required_argument, NULL, 'a'},
        {"measure", no_argument, NULL, 'm'},
        {NULL, 0, NULL, 0},
    };
    int c, rc = CLI_OK;
    uint64_t v;
    opterr = 0;
    while (rc == CLI_OK && (c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'n':
            if (!cli_parse_count(optarg, 1e13, &a->params))
                rc = cli_usage("estimate", "--params: \"%s\" is not a count from 1 (e.g. 124000000, 1.5e9, 124M, 1.5B)",
                               optarg);
            a->have_params = true;
            break;
        case 'c': a->config = optarg; break;
        case 'g':
            rc = cli_parse_size("estimate", "--gpus-per-node", optarg, 1, 4096, &v);
            a->gpus = (int)v;
            break;
        case 'k':
            rc = cli_parse_size("estimate", "--nodes", optarg, 1, 1 << 20, &v);
            a->nodes = (int)v;
            break;
        case 's': a->sets[a->nsets++] = optarg; break;
        case 'j': a->json = true; break;
        case 't': a->time = true; break;
        case 'G': a->gpu = optarg; break;
        case 'r': rc = parse_rate("--nvme-read", optarg, 1e9, &a->rates.nvme_read); break;
        case 'w': rc = parse_rate("--nvme-write", optarg, 1e9, &a->rates.nvme_write); break;
        case 'a': rc = parse_rate("--adam", optarg, 1e6, &a->rates.adam); break;
        case 'm': a->measure = true; break;
        default: rc = cli_usage("estimate", "unknown option %s", argv[optind - 1]); break;
        }
    }
    if (rc != CLI_OK) return rc;
    if (optind < argc) return cli_usage("estimate", "unexpected argument \"%s\"", argv[optind]);
    if (a->have_params == (a->config != NULL))
        return cli_usage("estimate", a->config ? "--params and --config: give one of them, not both"
                                               : "give --params N or --config CONFIG.json");
    if (!a->time && (a->gpu || a->measure || a->rates.nvme_read || a->rates.nvme_write || a->rates.adam))
        return cli_usage("estimate", "--gpu, --measure, --nvme-read, --nvme-write and --adam go with --time");
    if ((int64_t)a->gpus * a->nodes > 1 << 20)
        return cli_usage("estimate", "--gpus-per-node x --nodes: %lld ranks is too many",
                         (long long)a->gpus * a->nodes);
    return CLI_OK;
}

static zinf_dtype dtype_of(const zinf_config *cfg) {
    return cfg->bf16 ? ZINF_DTYPE_BF16 : cfg->fp16.enabled ? ZINF_DTYPE_F16 : ZINF_DTYPE_F32;
}

// The row of one stage and offload choice, every other setting from cfg.
static plan plan_of(const zinf_config *cfg, const zinf_model_shape *s, int seq_len, const zinf_plan_target *t, int stage,
                    zinf_offload_device otier, zinf_offload_device ptier) {
    plan p = {.cfg = *cfg, .s = *s, .seq_len = seq_len, .t = *t};
    p.cfg.zero.stage = stage;
    p.cfg.zero.offload_optimizer.device = otier;
    p.cfg.zero.offload_param.device = ptier;
    return p;
}

// The fastest row that fits, and the keys that choose it.
static void print_fastest(const plan *p) {
    if (!p) {
        printf("\nNo row fits; the step time is predicted for rows that fit.\n");
        return;
    }
    const zinf_step_time *t = &p->tm;
    const zinf_engine_memory *m = &p->r.mem;
    printf("\nFastest that fits: stage %d, optimizer %s, params %s: %.3f s per step, bound by %s\n",
           (int)p->cfg.zero.stage, tier_name[m->optimizer_tier], tier_name[m->params_tier], t->step, t->bound);
    printf("  busy per step: device compute %.3f s, pcie up %.3f s, down %.3f s, gpu links %.3f s, nvme read %.3f s, "
           "write %.3f s, cpu optimizer %.3f s\n",
           t->compute, t->h2d, t->d2h, t->links, t->nvme_read, t->nvme_write, t->cpu);
    // The keys as a config writes them: the row's, the sizes the plan chose or kept, and
    // those the row's tiers and stage use, as the config has them (or their defaults).
    const zinf_zero_config *z = &p->cfg.zero;
    const zinf_offload_param_config *op = &z->offload_param;
    const zinf_plan_choice *c = &p->r.choice;
    bool pnvme = m->params_tier == ZINF_OFFLOAD_NVME, onvme = m->optimizer_tier == ZINF_OFFLOAD_NVME;
    printf("  set: \"zero_optimization\": {\"stage\": %d, \"offload_optimizer\": {\"device\": \"%s\"", (int)z->stage,
           tier_name[m->optimizer_tier]);
    if (onvme) printf(", \"buffer_count\": %lld", (long long)z->offload_optimizer.buffer_count);
    printf("}, \"offload_param\": {\"device\": \"%s\"", tier_name[m->params_tier]);
    if (pnvme)
        printf(", \"max_in_cpu\": %lld, \"buffer_count\": %lld, \"buffer_size\": %lld", (long long)op->max_in_cpu,
               (long long)op->buffer_count, (long long)op->buffer_size);
    printf("}");
    if (m->reduce_bufs) // one rank with the optimizer on the device adds its gradients without buckets
        printf(", \"reduce_bucket_size\": %lld",
               (long long)(c->reduce_bucket_size ? c->reduce_bucket_size : z->reduce_bucket_size));
    printf(", \"sub_group_size\": %lld", (long long)(c->sub_group_size ? c->sub_group_size : z->sub_group_size));
    if (z->stage == 3)
        printf(", \"stage3_prefetch_bucket_size\": %lld, \"stage3_max_live_parameters\": %lld",
               (long long)z->prefetch_bucket_size, (long long)z->max_live_parameters);
    printf("}\n");
    if (pnvme || onvme)
        printf("       \"aio\": {\"block_size\": %lld, \"queue_depth\": %lld, \"intra_op_parallelism\": %lld}\n",
               (long long)p->cfg.aio.block_size, (long long)p->cfg.aio.queue_depth,
               (long long)p->cfg.aio.intra_op_parallelism);
}

// --measure: the host's rates not given, on this machine: the drives under the
// config's nvme_path (a 256 MiB file written, read, then half read while half is
// written, the median of five passes each, with the config's aio settings) and the
// optimizer's threads over 16M elements. Rates given stay. A few seconds; the rates
// are printed.
static int measure(const zinf_config *cfg, zinf_host_rates *h, bool json) {
    const zinf_path_list *pl = cfg->zero.offload_optimizer.nvme_path.count ? &cfg->zero.offload_optimizer.nvme_path
                                                                            : &cfg->zero.offload_param.nvme_path;
    zinf_aio_params ap = zinf_config_aio_params(cfg);
    if (pl->count && (!h->nvme_read || !h->nvme_write)) {
        io_spec s = {.dirs = (const char *const *)pl->paths,
                     .ndirs = pl->count,
                     .size = 256u << 20, // five passes of each: drives vary, the median steadies
                     .block_size = ap.block_size,
                     .queue_depth = ap.queue_depth,
                     .threads = ap.threads,
                     .read = true,
                     .write = true,
                     .mixed = true,
                     .loops = 5};
        io_result r[3];
        int n = io_measure(&s, r);
        if (n != 3) return cli_fail("estimate", CLI_FAIL);
        if (!h->nvme_write) h->nvme_write = r[0].bytes_per_s;
        if (!h->nvme_read) h->nvme_read = r[1].bytes_per_s;
        h->nvme_mixed = r[2].bytes_per_s;
    }
    size_t n = 0; // the elements the optimizer's rates are measured over; 0: --adam gave them
    if (!h->adam) {
        cli_cpu_rates_t c;
        n = cli_cpu_rates_elements();
        if (cli_cpu_rates(n, &c) != ZINF_OK) return cli_fail("estimate", CLI_FAIL);
        h->adam = c.adam, h->adam_away = c.adam_away, h->grad_add = c.add, h->grad_norm = c.norm;
    }
    if (json) return CLI_OK;
    printf("Rates: NVMe read %.2f GB/s, write %.2f GB/s, both at once %.2f GB/s%s; optimizer threads: ",
           h->nvme_read / 1e9, h->nvme_write / 1e9, h->nvme_mixed / 1e9, pl->count ? "" : " (no nvme_path: given)");
    if (n)
        printf("Adam %.0f M (writing its states to a second place, as under the backward: %.0f M), gradient "
               "accumulation %.0f M, norm %.0f M elements/s (over %zu M elements)\n",
               h->adam / 1e6, h->adam_away / 1e6, h->grad_add / 1e6, h->grad_norm / 1e6, n >> 20);
    else
        printf("Adam %.0f M elements/s (given)\n", h->adam / 1e6);
    return CLI_OK;
}

// With --time, the row's step on the modeled GPU when it fits.
static int time_row(plan *p, const zinf_host_rates *h) {
    if (p->r.fit == ZINF_PLAN_EXCEEDS) return CLI_OK;
    const zinf_engine_memory *m = &p->r.mem;
    if ((p->r.nvme_read && !h->nvme_read) || (p->r.nvme_write && !h->nvme_write))
        return cli_usage("estimate", "--time: stage %d with NVMe offload needs the drives' rates: give --nvme-read "
                                     "and --nvme-write (GB/s; zinf io-bench measures them)",
                         (int)p->cfg.zero.stage);
    if (m->optimizer_tier != ZINF_OFFLOAD_NONE && !h->adam)
        return cli_usage("estimate", "--time: an offloaded optimizer needs CPU Adam's rate: give --adam (million "
                                     "parameters/s; zinf adam-bench measures it)");
    if (zinf_plan_time(&p->cfg, &p->t, &p->r, h, &p->tm) != ZINF_OK) return cli_fail("estimate", CLI_FAIL);
    p->timed = true;
    return CLI_OK;
}

// The config's row is timed and bound by its offloaded optimizer's CPU work.
static bool cpu_bound(const plan *own) {
    return own->timed && own->r.mem.optimizer_tier != ZINF_OFFLOAD_NONE && strcmp(own->tm.bound, "cpu optimizer") == 0;
}

// --time with --config, the config's row bound by its offloaded optimizer's CPU work:
// the offload_optimizer.ratio below the config's, in tenths, that keeps the least of the
// optimizer on the device for a step within 10% of the fastest those ratios give while
// the row fits (a lower ratio takes more of the device); what keeping the first
// sub-groups' states on the device buys. *found is false where no ratio makes the step
// 5% faster.
static int pace_ratio(const plan *own, const zinf_host_rates *h, plan *out, bool *found) {
    *found = false;
    if (!cpu_bound(own)) return CLI_OK;
    enum { TENTHS = 10 };
    double step[TENTHS] = {0}, best = own->tm.step;
    int top = (int)ceil(own->cfg.zero.offload_optimizer.ratio * TENTHS) - 1;
    for (int tenths = top; tenths >= 1; tenths--) {
        *out = *own;
        out->cfg.zero.offload_optimizer.ratio = (double)tenths / TENTHS;
        out->timed = false;
        if (plan_make(out) != ZINF_OK) return cli_fail("estimate", CLI_FAIL);
        if (out->r.fit == ZINF_PLAN_EXCEEDS) break;
        int rc = time_row(out, h);
        if (rc != CLI_OK) return rc;
        step[tenths] = out->tm.step;
        if (step[tenths] < best) best = step[tenths];
    }
    if (best > 0.95 * own->tm.step) return CLI_OK;
    int pick = top; // the highest within 10% of the best, which is one of them
    while (step[pick] == 0 || step[pick] > 1.1 * best)
        pick--;
    *out = *own;
    out->cfg.zero.offload_optimizer.ratio = (double)pick / TENTHS;
    out->timed = false;
    if (plan_make(out) != ZINF_OK) return cli_fail("estimate", CLI_FAIL);
    int rc = time_row(out, h);
    *found = rc == CLI_OK;
    return rc;
}

// What clipping costs the config's step: a step that clips updates nothing under the
// backward.
static void print_clipping(const plan *own) {
    const zinf_step_time *t = &own->tm;
    if (!own->timed || t->step_clipping <= t->step * 1.005) return;
    printf("  a step that clips (gradient_clipping %g, as most do early in training) updates nothing under the "
           "backward: %.3f s, against %.3f s for one that does not\n",
           own->cfg.gradient_clipping, t->step_clipping, t->step);
}

static void print_pace(const plan *own, const plan *pace, bool found) {
    char b[2][32];
    if (!cpu_bound(own)) return;
    if (!found) {
        printf("  the CPU's optimizer bounds the step, and no offload_optimizer.ratio down to 0.1 that fits the "
               "device makes it 5%% faster\n");
        return;
    }
    const zinf_engine_memory *m = &pace->r.mem;
    printf("  the CPU's optimizer bounds the step (%.3f s): offload_optimizer.ratio %g keeps the first %d sub-group%s "
           "(%lld elements) on the device, device peak %s (%s more), and the step is %.3f s, bound by %s (lower "
           "ratios gain under 10%%)\n",
           own->tm.step, pace->cfg.zero.offload_optimizer.ratio, m->subgroups_on_device,
           m->subgroups_on_device == 1 ? "" : "s", (long long)m->optimizer_device_numel, sz(pace->r.device_peak, b[0]),
           sz(pace->r.device_peak - own->r.device_peak, b[1]), pace->tm.step, pace->tm.bound);
}

// The header; reduce_bucket_size as the rows use it: the config's, or the one zinf chose
// for the device where the config leaves it out (every row has the same device, so the
// first row's choice is every row's).
static void print_head(const zinf_config *cfg, const zinf_model_shape *s, int seq_len, const zinf_plan_target *t,
                       const args *a, int64_t chosen_bucket) {
    char b[3][32], what[256];
    int world = t->world;
    zinf_model_shape_describe(s, what, sizeof what);
    printf("%s block %d (%lld parameters), %s, micro-batch %lld x %d "
           "tokens, accumulation %lld, %d rank%s (%d per node x %d node%s), %s backend\n",
           what, s->block_size, (long long)zinf_model_param_count(s),
           zinf_dtype_name(dtype_of(cfg)), (long long)cfg->train_micro_batch_size_per_gpu, seq_len,
           (long long)cfg->gradient_accumulation_steps, world, world > 1 ? "s" : "", a->gpus, a->nodes,
           a->nodes > 1 ? "s" : "", zinf_backend_name(t->backend));
    printf("Per rank; traffic per optimizer step; sub_group_size %lld, reduce_bucket_size %lld%s, aio block %s%s\n",
           (long long)cfg->zero.sub_group_size, (long long)(chosen_bucket ? chosen_bucket : cfg->zero.reduce_bucket_size),
           chosen_bucket ? " (chosen for this device: the config leaves it out)" : "", sz(cfg->aio.block_size, b[0]),
           cfg->activation_checkpointing.enabled ? ", activation checkpointing" : "");
    printf("Fits: a device of %s; this machine's host memory (%s available) shared by %d rank%s, pinned %s\n\n",
           t->device_capacity > 0 ? sz(t->device_capacity, b[1]) : "unknown capacity (set device.memory_limit)",
           sz((int64_t)t->host.available_bytes, b[2]), t->local_ranks, t->local_ranks > 1 ? "s" : "",
           cfg->device.pinned_memory_limit >= 0 ? "up to device.pinned_memory_limit" : "up to half of it");
}

// One row per stage and offload choice (offload_optimizer from stage 1, offload_param
// at stage 3); with mark, the config's own is marked (and *own points at it); with
// --time, the fastest that fits too.
static int rows(const zinf_config *cfg, const zinf_model_shape *s, int seq_len, const zinf_plan_target *t,
                const args *a, bool mark, const plan **own) {
    enum { MAX_ROWS = 1 + 2 * 3 + 3 * 3 };
    static plan ps[MAX_ROWS]; // large: a config each
    const zinf_zero_config *z = &cfg->zero;
    int n = 0, mine = -1, fastest = -1;
    for (int stage = 0; stage <= 3; stage++)
        for (int o = 0; o < (stage ? 3 : 1); o++)
            for (int q = 0; q < (stage == 3 ? 3 : 1); q++) {
                plan *p = &ps[n];
                *p = plan_of(cfg, s, seq_len, t, stage, (zinf_offload_device)o, (zinf_offload_device)q);
                if (plan_make(p) != ZINF_OK) return cli_fail("estimate", CLI_FAIL);
                int rc = a->time ? time_row(p, &a->rates) : CLI_OK;
                if (rc != CLI_OK) return rc;
                if (p->timed && (fastest < 0 || p->tm.step < ps[fastest].tm.step)) fastest = n;
                if (stage == z->stage && o == (int)z->offload_optimizer.device && q == (int)z->offload_param.device)
                    mine = n;
                n++;
            }
    if (!a->json) { // the rows' plans chose the bucket size the header names (those with buckets)
        int64_t chosen = 0;
        for (int i = 0; i < n && !chosen; i++)
            chosen = ps[i].r.choice.reduce_bucket_size;
        print_head(cfg, s, seq_len, t, a, chosen);
        table_head(a->time);
    }
    for (int i = 0; i < n; i++) {
        if (a->json) {
            cli_print_json_line(row_json(&ps[i]));
        } else {
            table_row(&ps[i], mark && i == mine, a->time && i == fastest);
        }
    }
    if (a->time && !a->json) print_fastest(fastest >= 0 ? &ps[fastest] : NULL);
    *own = mine >= 0 ? &ps[mine] : NULL;
    return CLI_OK;
}

static int estimate(args *a, zinf_config *cfg) {
    int rc;
    zinf_model_shape s;
    zinf_plan_target t;
    if (zinf_model_shape_from_config(&cfg->model, &s) != ZINF_OK) return cli_fail("estimate", CLI_USAGE);
    int seq_len = cfg->data.present && cfg->data.seq_len > 0 ? (int)cfg->data.seq_len : s.block_size;
    if (seq_len > s.block_size)
        return cli_usage("estimate", "--config: data.seq_len %d is longer than the model's block_size %d", seq_len,
                         s.block_size);
    if (a->time) { // the rows run on the modeled GPU: its memory is the capacity they are judged by
        cfg->device.backend = ZINF_BACKEND_SIM;
        if (a->gpu && (rc = cli_sim_gpu("estimate", a->gpu, &cfg->device.sim.gpu)) != CLI_OK) return rc;
    }
    if (target_of(cfg, a->gpus * a->nodes, a->gpus, &t) != ZINF_OK) return cli_fail("estimate", CLI_FAIL);
    // The rates: measured, or the gradient passes' from Adam's by the bytes they move.
    if (a->measure && (rc = measure(cfg, &a->rates, a->json)) != CLI_OK) return rc;
    if (!a->rates.grad_add) a->rates.grad_add = a->rates.adam * 30 / 12;
    if (!a->rates.grad_norm) a->rates.grad_norm = a->rates.adam * 30 / 4;
    // The machine's drives and cores are shared by the ranks on it.
    double *r[] = {&a->rates.nvme_read, &a->rates.nvme_write, &a->rates.nvme_mixed, &a->rates.adam,
                   &a->rates.adam_away, &a->rates.grad_add,   &a->rates.grad_norm};
    for (size_t i = 0; i < ZINF_ARRAY_LEN(r); i++)
        *r[i] /= t.local_ranks;
    const plan *own = NULL; // the config's stage and tiers are always one of the rows
    rc = rows(cfg, &s, seq_len, &t, a, a->config != NULL, &own);
    if (rc != CLI_OK || !a->config) return rc;
    if (!own) return cli_usage("estimate", "--config: stage %lld with those offload tiers is not a row zinf plans",
                               (long long)cfg->zero.stage);
    static features f; // three plans: large
    if ((rc = features_of(own, &f)) != CLI_OK) return rc;
    static plan pace; // large: a config
    bool found;
    if ((rc = pace_ratio(own, &a->rates, &pace, &found)) != CLI_OK) return rc;
    if (a->json) {
        cli_print_json_line(plan_json(own, &f, found ? &pace : NULL));
    } else {
        printf("\n");
        print_plan(own);
        print_features(own, &f);
        print_clipping(own);
        print_pace(own, &pace, found);
    }
    return CLI_OK;
}

// The config the rows come from: --config's (with --set), or --params' built-in one.
static int load(const args *a, zinf_config *cfg) {
    if (!a->config) return params_config(a->params, a->gpus * a->nodes, a->sets, a->nsets, cfg);
    zinf_config_options co = {.sets = a->sets, .nsets = a->nsets, .world_size = a->gpus * a->nodes};
    if (zinf_config_load(cfg, a->config, &co) != ZINF_OK)
        return cli_usage("estimate", "--config: %s", zinf_last_error());
    if (cfg->model.present) return CLI_OK;
    zinf_config_free(cfg);
    return cli_usage("estimate", "--config: %s: no \"model\" section; add e.g. {\"model\": {\"preset\": \"gpt2\"}}",
                     a->config);
}

int cli_estimate(int argc, char **argv) {
    args a = {.gpus = 1, .nodes = 1, .sets = calloc((size_t)argc, sizeof(char *))};
    if (!a.sets) return cli_usage("estimate", "out of memory");
    zinf_config cfg;
    int rc = parse(&a, argc, argv);
    if (rc == CLI_OK) rc = load(&a, &cfg);
    if (rc == CLI_OK) {
        rc = estimate(&a, &cfg);
        zinf_config_free(&cfg);
    }
    free(a.sets);
    return rc;
}
