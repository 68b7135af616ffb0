// zinf device-bench: the config's model on its device, op class by op class, beside
// the sim device's model of the same ops (gpu/sim/model.c). On a GPU this says how far
// the sim (and so zinf estimate --time) is from the card for this model; on sim it
// checks the model against itself.
#include <getopt.h>
#include <stdlib.h>

#include "cli.h"

typedef struct args {
    const char **sets;
    int nsets, passes, seq_len;
    const char *config, *gpu;
    bool json, shapes;
} args;

static int parse(args *a, int argc, char **argv) {
    static const struct option opts[] = {
        {"config", required_argument, NULL, 'c'},  {"set", required_argument, NULL, 's'},
        {"gpu", required_argument, NULL, 'g'},     {"passes", required_argument, NULL, 'p'},
        {"seq-len", required_argument, NULL, 't'}, {"json", no_argument, NULL, 'j'},
        {"shapes", no_argument, NULL, 'x'},        {NULL, 0, NULL, 0},
    };
    int c, rc = CLI_OK;
    opterr = 0;
    while (rc == CLI_OK && (c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        uint64_t v;
        switch (c) {
        case 'c': a->config = optarg; break;
        case 's': a->sets[a->nsets++] = optarg; break;
        case 'g': a->gpu = optarg; break;
        case 'p':
            rc = cli_parse_size("device-bench", "--passes", optarg, 1, 1000, &v);
            a->passes = (int)v;
            break;
        case 't':
            rc = cli_parse_size("device-bench", "--seq-len", optarg, 1, 1 << 20, &v);
            a->seq_len = (int)v;
            break;
        case 'j': a->json = true; break;
        case 'x': a->shapes = true; break;
        default: rc = cli_usage("device-bench", "unknown option %s", argv[optind - 1]); break;
        }
    }
    if (rc == CLI_OK && optind < argc) rc = cli_usage("device-bench", "unexpected argument \"%s\"", argv[optind]);
    if (rc == CLI_OK && !a->config) rc = cli_usage("device-bench", "--config CONFIG.json is required");
    return rc;
}

static int bench(const args *a, const zinf_config *cfg) {
    zinf_device_params dp = {.backend = cfg->device.backend,
                             .memory_limit = cfg->device.memory_limit,
                             .sim = cfg->device.sim,
                             .attention = cfg->device.attention};
    zinf_device *d = NULL;
    if (zinf_device_create(&d, &dp) != ZINF_OK) return cli_fail("device-bench", CLI_FAIL);
    const zinf_device_caps *caps = zinf_device_get_caps(d);
    zinf_sim_params model;
    zinf_sim_rates r;
    int rc = cli_op_model("device-bench", a->gpu, cfg, caps, &model);
    zinf_sim_rates_of(&model, &r);
    zinf_op_time rows[512];
    int n = 0;
    zinf_pass_time pass = {0}, profiled;
    // Warm-up and the untimed pass; then a pass with every op timed.
    zinf_status st = rc == CLI_OK ? zinf_model_pass(cfg, d, a->passes, &pass) : ZINF_OK;
    if (rc == CLI_OK && st == ZINF_OK) st = zinf_device_profile_start(d, &model);
    if (rc == CLI_OK && st == ZINF_OK) {
        st = zinf_model_pass(cfg, d, 1, &profiled);
        zinf_status st2 = zinf_device_profile_stop(d, rows, (int)ZINF_ARRAY_LEN(rows), &n);
        if (st == ZINF_OK) st = st2;
    }
    if (rc == CLI_OK && st != ZINF_OK) rc = cli_fail("device-bench", CLI_FAIL);
    if (rc == CLI_OK && a->json) {
        n = cli_op_times_json(rows, n, a->shapes);
        cli_print_json_line(json_pack("{s:b, s:s, s:s, s:f, s:f, s:f, s:f}", "total", 1, "device", caps->name, "model",
                                      r.name, "pass_seconds", pass.seconds, "issue_seconds", pass.issue_s,
                                      "ops_seconds", zinf_op_times_sum(rows, n, false), "modeled_seconds",
                                      zinf_op_times_sum(rows, n, true)));
    } else if (rc == CLI_OK) {
        printf("one micro-batch's forward and backward on %s, beside the sim's %s\n", caps->name, r.name);
        n = zinf_op_times_print(stdout, rows, n, 1, a->shapes);
        double model_s = zinf_op_times_sum(rows, n, true);
        printf("%-47s %11.3f %11.3f %13.2f\n", "pass (untimed)", 1e3 * pass.seconds, 1e3 * model_s,
               pass.seconds / model_s);
        // Near the pass's own time, the device waited on the host somewhere in it.
        printf("%-47s %11.3f\n", "the host issuing the pass", 1e3 * pass.issue_s);
    }
    zinf_device_destroy(d);
    return rc;
}

int cli_device_bench(int argc, char **argv) {
    args a = {.passes = 3, .sets = calloc((size_t)argc, sizeof(char *))};
    if (!a.sets) return cli_usage("device-bench", "out of memory");
    int rc = parse(&a, argc, argv);
    zinf_config cfg;
    zinf_config_options co = {.sets = a.sets, .nsets = a.nsets, .world_size = 1};
    if (rc == CLI_OK && zinf_config_load(&cfg, a.config, &co) != ZINF_OK)
        rc = cli_usage("device-bench", "--config: %s", zinf_last_error());
    else if (rc == CLI_OK) {
        if (!cfg.model.present)
            rc = cli_usage("device-bench",
                           "--config: %s: no \"model\" section; add e.g. {\"model\": {\"preset\": "
                           "\"gpt2\"}}",
                           a.config);
        if (a.seq_len) cfg.data.present = true, cfg.data.seq_len = a.seq_len; // the tokens per sequence
        if (rc == CLI_OK) rc = bench(&a, &cfg);
        zinf_config_free(&cfg);
    }
    free(a.sets);
    return rc;
}
