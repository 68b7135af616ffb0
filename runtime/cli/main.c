// zinf: the command-line front end. Dispatches to subcommands; each has --help.
#include <ctype.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <math.h>
#include <string.h>
#include <strings.h>

#include "cli.h"

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
    const char *usage;
} command;

static const command commands[] = {
    {"check", cli_check, "validate a config and print it normalized",
     "zinf check CONFIG.json [--world-size N] [--set key.path=value ...]\n"
     "  Validates CONFIG.json and prints it normalized (every default filled in) as JSON.\n"
     "  --world-size N   data-parallel ranks the batch sizes are resolved for\n"
     "                   (default: the launcher's, else 1)\n"
     "  --set k.p=v      override one key (v parsed as JSON, else taken as a string)\n"
     "  Exit 0 when valid, 2 with the error on stderr when not.\n"},
    {"info", cli_info, "hardware and capabilities",
     "zinf info [--path DIR ...] [--json]\n"
     "  Reports what the engine will use: CPU, SIMD level, NUMA, memory, locked-memory\n"
     "  limit, huge pages, io_uring, CUDA devices, MPI and NCCL.\n"
     "  --path DIR   also probe DIR for O_DIRECT, block size and free space (repeatable)\n"
     "  --json       one JSON object on stdout\n"},
    {"train", cli_train, "train a model",
     "zinf train CONFIG.json [--steps N] [--json] [--op-profile] [--set key.path=value ...]\n"
     "                  [--bind-cores-to-rank [--bind-core-list LIST]]\n"
     "  Trains the config's model on its data with its optimizer and ZeRO stage, on one\n"
     "  rank or on every rank mpirun starts (mpirun -np N zinf train ...). Prints the\n"
     "  plan (what lives where, in bytes, and whether it fits) before it allocates, and\n"
     "  stops there when it does not fit; then a log line every\n"
     "  steps_per_print steps: loss, lr, tokens/s, achieved TFLOPS, memory per tier.\n"
     "  --steps N overrides \"steps\" (the run's total optimizer steps). --set overrides\n"
     "  one config key (value parsed as JSON, else a string), e.g.\n"
     "  --set zero_optimization.stage=3. --json prints one object per step (step, loss,\n"
     "  lr, grad_norm, step_seconds, tokens_per_s, tflops, loss_scale, skipped, bytes per\n"
     "  tier) and a last one with \"final\": true, the totals and weights_digest (a hex\n"
     "  digest of the fp32 master weights: identical runs print identical digests);\n"
     "  the plan and logs then go to stderr. --op-profile: at the end, every device op of\n"
     "  the steps after the first, per step, beside the sim's model of it (as zinf\n"
     "  device-bench prints them; each op is timed alone, so streams no longer overlap).\n"
     "  --bind-cores-to-rank (DeepSpeed's launcher option): each rank on a host runs on\n"
     "  its own share of the cores, split evenly, its memory on their NUMA node;\n"
     "  --bind-core-list 0,2-4,6 the cores to split (default: 0 to physical cores - 1).\n"},
    {"eval", cli_eval, "mean loss of GPT-2 weights on a token file",
     "zinf eval --model FILE.safetensors|DIR --data FILE [--config CONFIG.json] [--json]\n"
     "  --model: a safetensors file, or a Hugging Face model directory (config.json and\n"
     "  model.safetensors, or model.safetensors.index.json and its shards).\n"
     "  Runs the model forward over every complete window of seq_len + 1 tokens of FILE\n"
     "  (offsets 0, T, 2T, ...; inputs tok[o:o+T], targets tok[o+1:o+T+1]) and prints the\n"
     "  mean loss over every predicted token. The config gives the model shape (model),\n"
     "  the data format and seq_len (data), the batch (train_micro_batch_size_per_gpu),\n"
     "  the precision (bf16 / fp16 sections; fp32 without them) and the device. Without\n"
     "  it: the shape from the directory's config.json, or from the weights file with head\n"
     "  size 64; tokens-u16 data,\n"
     "  seq_len = block_size up to 1024, batch 8, fp32, device auto.\n"
     "  --json prints {\"loss\":X,\"tokens\":N}.\n"},
    {"io-bench", cli_io_bench, "measure NVMe read/write bandwidth",
     "zinf io-bench --path DIR [--path DIR ...] [--size S] [--block-size B]\n"
     "              [--queue-depth Q] [--threads T] [--read | --write] [--mixed]\n"
     "              [--loops N] [--validate] [--sqpoll] [--json]\n"
     "       zinf io-bench --h2d | --d2h [--size S] [--loops N] [--json]\n"
     "  Writes then reads a file of --size bytes (default 1G) striped over the --path\n"
     "  directories with O_DIRECT through io_uring, --loops times (default 3) each, and\n"
     "  reports the median bandwidth. --block-size (default 1M) bytes per request,\n"
     "  --queue-depth (default 8) requests in flight per ring, --threads (default 1)\n"
     "  rings. --read / --write measure one direction only; --mixed reads half the file\n"
     "  while writing the other half, both in flight (the offloaded optimizer's pattern);\n"
     "  alone it measures only that. --validate checks every byte read back; --sqpoll\n"
     "  lets a kernel thread poll the submission queue; a registered buffer says so.\n"
     "  The test file is removed at the end, also when interrupted.\n"
     "  --json prints one object per op: op (write, read, mixed), bytes, seconds,\n"
     "  bytes_per_s, block_size, queue_depth, threads, paths, direct, registered.\n"
     "  --h2d / --d2h time host-to-device / device-to-host copies of --size bytes\n"
     "  (default 256M) from pinned and from pageable host memory on the default device;\n"
     "  --json prints op (h2d, d2h), bytes, seconds, bytes_per_s, pinned, backend, device\n"
     "  and memcpy (true on the host backend, where a copy is a memcpy in host memory).\n"},
    {"io-tune", cli_io_tune, "find the best aio settings for paths",
     "zinf io-tune --path DIR [--path DIR ...] [--size S] [--block-sizes LIST]\n"
     "             [--queue-depths LIST] [--threads LIST] [--json]\n"
     "  Measures write and read bandwidth (as io-bench, one pass each, --size default\n"
     "  256M) for every block size x queue depth x threads of the grid (defaults\n"
     "  256K,1M,4M,8M x 4,8,16,32 x 1,2), prints the table, then the aio config section\n"
     "  that moves the bytes in and out in the least total time. --json prints io-bench's\n"
     "  objects and, last, {\"aio\": {...}}. Test files never stay behind.\n"},
    {"adam-bench", cli_adam_bench, "measure CPU Adam against memory bandwidth",
     "zinf adam-bench [--params N] [--threads T] [--grad-dtype fp32|bf16|fp16]\n"
     "                [--out-dtype none|bf16|fp16] [--steps S] [--optimizer NAME] [--json]\n"
     "  Times the optimizer step over --params parameters (default 100M; 1e8, 100M and\n"
     "  1.5B are counts) with --threads workers (default one per physical core), and in\n"
     "  the same run its roofline: a pass over the same buffers and threads that reads\n"
     "  and writes exactly the bytes the step moves, with no arithmetic. Gradients\n"
     "  --grad-dtype (default fp32), 16-bit weight copy --out-dtype (default bf16),\n"
     "  --optimizer adamw (default), adam, adagrad or lion; medians of --steps (10).\n"
     "  --json prints one object: params, threads, params_per_s, bytes_per_param,\n"
     "  roofline_params_per_s, ratio_to_roofline and the settings.\n"},
    {"device-bench", cli_device_bench, "the model's kernels on the device beside the sim's model of them",
     "zinf device-bench --config CONFIG.json [--set key.path=value ...] [--gpu h100|h200|a100|rtx4090]\n"
     "                  [--seq-len T] [--passes N] [--shapes] [--json]\n"
     "  Runs one micro-batch's forward and backward of the config's model (its shape,\n"
     "  micro-batch, precision and activation checkpointing; --seq-len T tokens per\n"
     "  sequence, else data.seq_len, else block_size) on the config's device over\n"
     "  zeroed weights: --passes N (default 3), the last one timed, then one more with\n"
     "  every op timed on its own. Prints per op and dtype the count, the device's\n"
     "  milliseconds, the sim model's for the same ops (on --gpu, else the sim device's own\n"
     "  GPU, else the preset the card's name matches, else h100) and their ratio, and the\n"
     "  same for the whole pass. On a GPU it says how far zinf estimate --time's compute\n"
     "  is from the card for this model, and the host's time issuing the untimed pass: near\n"
     "  the pass's, the device waited on the host somewhere. --shapes: a row per shape of\n"
     "  each op. --json: one object per row (op, dtype, shape, count, seconds,\n"
     "  modeled_seconds), a last one with \"total\": true, device, model, pass_seconds,\n"
     "  issue_seconds, ops_seconds, modeled_seconds.\n"},
    {"estimate", cli_estimate, "memory, traffic and step time per stage and tier",
     "zinf estimate (--params N | --config CONFIG.json) [--gpus-per-node G] [--nodes K] [--json]\n"
     "              [--set key.path=value ...]\n"
     "              [--time [--gpu h100|h200|a100|rtx4090] [--measure]\n"
     "                      [--nvme-read GBPS] [--nvme-write GBPS] [--adam MPARAMS]]\n"
     "  For every ZeRO stage (0-3) and offload choice (offload_optimizer none/cpu/nvme from\n"
     "  stage 1, offload_param none/cpu/nvme at stage 3) on G x K ranks (default 1 x 1),\n"
     "  prints per rank the device bytes once the engine is made and at its busiest\n"
     "  moment (the least memory that runs), pinned and pageable host memory (tiers, swap\n"
     "  buffers, staging), the NVMe swap files, and per optimizer step the bytes copied\n"
     "  host->device and device->host (model states; the batch left out) and read from\n"
     "  and written to NVMe, and whether it fits (yes, no, ? when the device's capacity\n"
     "  is not known: set device.memory_limit; host memory is this machine's). Nothing\n"
     "  is allocated and no device is opened.\n"
     "  --params N (124M, 1.5B, 1.5e9, 1T): a GPT-2-like model (vocab 50257, block 1024,\n"
     "  head size 64, n_embd / n_layer from 48 to 80) whose count is nearest N (124M is\n"
     "  gpt2), bf16, one sequence of 1024 tokens per rank, no activation checkpointing,\n"
     "  zinf's defaults otherwise, on GPUs; --set sets any other key (device.memory_limit).\n"
     "  --config CONFIG.json: that model, batch and settings (--set overrides a key);\n"
     "  also prints the plan zinf train would print for the config, per rank. Device\n"
     "  backend auto counts as cuda (NCCL between ranks); \"host\" estimates the host\n"
     "  backend.\n"
     "  --json: one object per row (stage, optimizer, params, world_size, model_numel,\n"
     "  partition_numel, device_bytes, device_peak_bytes, gathered_peak_bytes,\n"
     "  pinned_bytes, pageable_bytes, nvme_bytes, activation_bytes, pcie_h2d_bytes,\n"
     "  pcie_d2h_bytes, nvme_read_bytes, nvme_write_bytes, fits) and with --config a\n"
     "  last one with \"plan\": true, the plan's figures in bytes and the budgets.\n"
     "  --time: also each row's step time on a simulated GPU (--gpu, else the config's\n"
     "  device.sim, else h100) with this machine's drives and CPU, the fastest row that\n"
     "  fits marked and its busy time per resource. --measure measures the drives under\n"
     "  the config's nvme_path and the optimizer's threads first (a few seconds);\n"
     "  --nvme-read / --nvme-write (GB/s) and --adam (M params/s) give rates instead.\n"
     "  --json rows add step_seconds, bound and busy_s.\n"},
    {"consolidate", cli_consolidate, "write a checkpoint's model as Hugging Face files",
     "zinf consolidate CKPT_DIR OUT [--dtype fp32|bf16] [--max-shard-size SIZE] [--json]\n"
     "  Writes the fp32 master weights of a checkpoint (CKPT_DIR: a checkpoint.dir, whose\n"
     "  latest is followed, or one global_step<N> directory) as Hugging Face GPT-2 files\n"
     "  (GPT2LMHeadModel's names; the tied lm_head left out), in fp32 (default) or bf16:\n"
     "  OUT ending in .safetensors is one file; any other OUT a model directory that\n"
     "  from_pretrained loads (config.json and model.safetensors, or shards and their\n"
     "  index past --max-shard-size, default 5GB, split as save_pretrained splits them;\n"
     "  OUT must be absent or empty). The rank files are streamed and their checksums\n"
     "  checked on the way, so memory stays at about 9 MiB whatever the model's size;\n"
     "  OUT appears only when whole.\n"
     "  --json prints {\"tensors\", \"bytes\" (OUT's size), \"peak_rss_bytes\", \"seconds\"}.\n"},
};

static const command *find(const char *name) {
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(commands[i].name, name) == 0) return &commands[i];
    return NULL;
}

static void usage(FILE *f) {
    fprintf(f, "usage: zinf <command> [options]   (zinf <command> --help for its options)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-12s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\nSizes take binary suffixes (64K, 1M, 2G). Exit codes: 0 success, 1 runtime "
               "failure, 2 usage or config error.\n\nenvironment:\n");
    for (int k = 0; k < ZINF_ENV_COUNT; k++)
        fprintf(f, "  %-16s %s\n", zinf_env_name(k), zinf_env_doc(k));
}

int cli_usage(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "zinf %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\nTry 'zinf %s --help'.\n", cmd);
    va_end(ap);
    return CLI_USAGE;
}

int cli_fail(const char *cmd, int code) {
    fprintf(stderr, "zinf %s: error: %s\n", cmd, zinf_last_error());
    return code;
}

bool cli_parse_hf_size(const char *s, uint64_t *out) {
    static const struct {
        const char *suffix;
        uint64_t unit;
    } units[] = {{"", 1},
                 {"KB", 1000},
                 {"MB", 1000000},
                 {"GB", 1000000000},
                 {"TB", 1000000000000ull},
                 {"KIB", 1ull << 10},
                 {"MIB", 1ull << 20},
                 {"GIB", 1ull << 30},
                 {"TIB", 1ull << 40}};
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || !isdigit((unsigned char)s[0]) || errno == ERANGE || v == 0) return false;
    for (size_t i = 0; i < sizeof units / sizeof *units; i++)
        if (strcasecmp(end, units[i].suffix) == 0 && v <= UINT64_MAX / units[i].unit) {
            *out = v * units[i].unit;
            return true;
        }
    return false;
}

bool cli_parse_count(const char *s, double max, uint64_t *out) {
    char *end;
    double v = strtod(s, &end);
    double mult = *end == 'K' || *end == 'k'   ? 1e3
                  : *end == 'M'                ? 1e6
                  : *end == 'B' || *end == 'G' ? 1e9
                  : *end == 'T'                ? 1e12
                                               : 1;
    if (mult != 1) end++;
    if (end == s || *end || !(v * mult >= 1) || v * mult > max) return false;
    *out = (uint64_t)llround(v * mult);
    return true;
}

int cli_parse_size(const char *cmd, const char *opt, const char *arg, uint64_t lo, uint64_t hi, uint64_t *out) {
    if (zinf_size_parse(arg, out) != ZINF_OK) return cli_usage(cmd, "%s: %s", opt, zinf_last_error());
    if (*out < lo || *out > hi)
        return cli_usage(cmd, "%s: %s is out of range (%llu to %llu)", opt, arg, (unsigned long long)lo,
                         (unsigned long long)hi);
    return CLI_OK;
}

void cli_print_json_line(json_t *obj) {
    // %.17g keeps every double exact on the way back in (the --json contract).
    char *s = json_dumps(obj, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
    if (s) puts(s);
    free(s);
    json_decref(obj);
    fflush(stdout);
}

int main(int argc, char **argv) {
    // A write past a file-size limit should fail with EFBIG and a message, not kill
    // the process with SIGXFSZ.
    signal(SIGXFSZ, SIG_IGN);
    if (argc < 2) {
        usage(stderr);
        return CLI_USAGE;
    }
    const char *name = argv[1];
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0 || strcmp(name, "help") == 0) {
        const command *c = argc > 2 ? find(argv[2]) : NULL;
        if (c)
            fputs(c->usage, stdout);
        else
            usage(stdout);
        return CLI_OK;
    }
    if (strcmp(name, "--version") == 0) {
        printf("zinf %s\n", ZINF_VERSION);
        return CLI_OK;
    }
    const command *c = find(name);
    if (!c) {
        fprintf(stderr, "zinf: unknown command \"%s\"\n", name);
        usage(stderr);
        return CLI_USAGE;
    }
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0) break;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(c->usage, stdout);
            return CLI_OK;
        }
    }
    return c->run(argc - 1, argv + 1);
}
