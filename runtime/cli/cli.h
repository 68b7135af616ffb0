// The zinf command line: one binary, subcommands, the exit codes of the design
// (0 success, 1 runtime failure, 2 usage or config error).
#ifndef ZINF_CLI_H
#define ZINF_CLI_H

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>

#include "zinf.h"
#include "zinf_internal.h"

enum { CLI_OK = 0, CLI_FAIL = 1, CLI_USAGE = 2 };

// A usage mistake: prints "zinf CMD: message" and a pointer to --help; returns 2.
int cli_usage(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// A failed library call: prints "zinf CMD: error: <last error>"; returns code.
int cli_fail(const char *cmd, int code);
// Print obj as one line of JSON on stdout (the --json contract) and release it.
void cli_print_json_line(json_t *obj);
// Parse option opt's value arg as a size (binary suffixes allowed) within [lo, hi];
// CLI_OK, or a usage error naming the option.
int cli_parse_size(const char *cmd, const char *opt, const char *arg, uint64_t lo, uint64_t hi, uint64_t *out);

// What the plan lines say: the run's config, model and data, where it runs, and the
// engine's plan (zinf_engine_plan, the same for zinf train and zinf estimate).
typedef struct cli_plan {
    const zinf_config *cfg;
    zinf_model_shape shape;
    int seq_len;
    int64_t windows; // of the data file, or -1 without one
    const zinf_plan_target *target;
    const zinf_plan *plan;
} cli_plan;
void cli_print_plan(FILE *f, const cli_plan *p);

// A count like 100000000, 1e8, 124M, 1.5B or 1T (decimal suffixes: parameters, not
// bytes) between 1 and max; false when arg is not one.
bool cli_parse_count(const char *arg, double max, uint64_t *out);

// A size as Hugging Face writes max_shard_size: bytes, or an integer with KB, MB, GB,
// TB (decimal) or KiB, MiB, GiB, TiB (binary), any case; false when arg is not one or 0.
bool cli_parse_hf_size(const char *arg, uint64_t *out);

// The median of v[0..n) (sorts v).
double cli_median(double *v, int n);

// The modeled GPU named name (--gpu: h100, h200, a100, rtx4090); a usage error otherwise.
int cli_sim_gpu(const char *cmd, const char *name, zinf_sim_gpu *out);
// The op profile's rows (zinf_device_profile_stop). The GPU they are modeled on: --gpu
// (gpu, else NULL), else zinf_device_profile_model's; a usage error for an unknown gpu.
int cli_op_model(const char *cmd, const char *gpu, const zinf_config *cfg, const zinf_device_caps *caps,
                 zinf_sim_params *out);
// The rows as zinf_op_times_print arranges them, one JSON line each (--json); returns
// the rows now in rows.
int cli_op_times_json(zinf_op_time *rows, int n, bool shapes);

int cli_adam_bench(int argc, char **argv);
// The offloaded optimizer's host work over n elements with a thread per physical core,
// in elements per second: CPU AdamW as it runs it (fp32 gradients, a bf16 copy written),
// in place and writing its states to a second place (the update under the backward),
// the gradient accumulation (zinf_cpu_add), and the gradient norm with the zeroing after
// the step. About a second for 16M.
typedef struct cli_cpu_rates_t {
    double adam, adam_away, add, norm;
} cli_cpu_rates_t;
zinf_status cli_cpu_rates(size_t n, cli_cpu_rates_t *out);
// The n those rates are measured over: buffers four times this machine's last-level
// caches (18 bytes an element: master, moments, gradients, the bf16 copy), from 16M to
// 256M (4.5 GiB of buffers; 7.5 GiB with the second place's states).
// A smaller n would time the cache: on a 16-core host with 300 MiB of it, 16M elements
// ran 1.4x faster than the 774M of GPT-2 large's partition.
size_t cli_cpu_rates_elements(void);
int cli_check(int argc, char **argv);
int cli_consolidate(int argc, char **argv);
int cli_device_bench(int argc, char **argv);
int cli_estimate(int argc, char **argv);
int cli_eval(int argc, char **argv);
int cli_info(int argc, char **argv);
int cli_io_bench(int argc, char **argv);
int cli_io_tune(int argc, char **argv);
int cli_train(int argc, char **argv);

#endif
