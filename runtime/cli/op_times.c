// The op profile's rows (zinf_device_profile_stop) as zinf device-bench and zinf train
// --op-profile print them: per op and dtype (or per shape), the device's time beside the
// sim model's, the longest first.
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int cli_sim_gpu(const char *cmd, const char *name, zinf_sim_gpu *out) {
    for (int g = 0; g <= ZINF_SIM_RTX4090; g++)
        if (strcmp(name, zinf_sim_gpu_name((zinf_sim_gpu)g)) == 0) {
            *out = (zinf_sim_gpu)g;
            return CLI_OK;
        }
    return cli_usage(cmd, "--gpu: \"%s\" is not a modeled GPU; expected h100, h200, a100 or rtx4090", name);
}

int cli_op_model(const char *cmd, const char *gpu, const zinf_config *cfg, const zinf_device_caps *caps,
                 zinf_sim_params *out) {
    *out = cfg->device.sim;
    out->virtual_time = false;
    if (gpu) {
        *out = (zinf_sim_params){0};
        return cli_sim_gpu(cmd, gpu, &out->gpu);
    } else if (caps->backend != ZINF_BACKEND_SIM) {
        static const struct {
            const char *in_name;
            zinf_sim_gpu gpu;
        } cards[] = {{"H200", ZINF_SIM_H200}, {"A100", ZINF_SIM_A100}, {"4090", ZINF_SIM_RTX4090}};
        *out = (zinf_sim_params){.gpu = ZINF_SIM_H100};
        for (size_t i = 0; i < ZINF_ARRAY_LEN(cards); i++)
            if (strstr(caps->name, cards[i].in_name)) out->gpu = cards[i].gpu;
    }
    return CLI_OK;
}

// One row per op and dtype, the shapes' times summed.
static int merge_shapes(zinf_op_time *rows, int n) {
    int m = 0;
    for (int i = 0; i < n; i++) {
        int j = 0;
        while (j < m && !(strcmp(rows[j].op, rows[i].op) == 0 && rows[j].dt == rows[i].dt))
            j++;
        if (j == m) {
            rows[m] = rows[i];
            memset(rows[m++].shape, 0, sizeof rows[0].shape);
        } else {
            rows[j].count += rows[i].count, rows[j].seconds += rows[i].seconds, rows[j].modeled_s += rows[i].modeled_s;
        }
    }
    return m;
}

static int cmp_seconds(const void *x, const void *y) {
    double a = ((const zinf_op_time *)x)->seconds, b = ((const zinf_op_time *)y)->seconds;
    return (a < b) - (a > b);
}

static int arrange(zinf_op_time *rows, int n, bool shapes) {
    if (!shapes) n = merge_shapes(rows, n);
    qsort(rows, (size_t)n, sizeof *rows, cmp_seconds);
    return n;
}

double cli_op_times_sum(const zinf_op_time *rows, int n, bool modeled) {
    double s = 0;
    for (int i = 0; i < n; i++)
        s += modeled ? rows[i].modeled_s : rows[i].seconds;
    return s;
}

int cli_print_op_times(FILE *f, zinf_op_time *rows, int n, double per, bool shapes) {
    n = arrange(rows, n, shapes);
    fprintf(f, "%-16s %-5s %-24s %6s %11s %11s %13s\n", "op", "dtype", shapes ? "shape" : "", "count", "device ms",
            "model ms", "device/model");
    for (int i = 0; i < n; i++) {
        char shape[64] = "";
        const int64_t *x = rows[i].shape;
        if (shapes)
            snprintf(shape, sizeof shape, "%lld %lld %lld %lld", (long long)x[0], (long long)x[1], (long long)x[2],
                     (long long)x[3]);
        fprintf(f, "%-16s %-5s %-24s %6.0f %11.3f %11.3f %13.2f\n", rows[i].op, zinf_dtype_name(rows[i].dt), shape,
                (double)rows[i].count / per, 1e3 * rows[i].seconds / per, 1e3 * rows[i].modeled_s / per,
                rows[i].modeled_s > 0 ? rows[i].seconds / rows[i].modeled_s : 0);
    }
    double dev = cli_op_times_sum(rows, n, false), model = cli_op_times_sum(rows, n, true);
    fprintf(f, "%-47s %11.3f %11.3f %13.2f\n", "ops (each timed)", 1e3 * dev / per, 1e3 * model / per,
            model > 0 ? dev / model : 0);
    return n;
}

int cli_op_times_json(zinf_op_time *rows, int n, bool shapes) {
    n = arrange(rows, n, shapes);
    for (int i = 0; i < n; i++)
        cli_print_json_line(json_pack("{s:s, s:s, s:[IIII], s:I, s:f, s:f}", "op", rows[i].op, "dtype",
                                      zinf_dtype_name(rows[i].dt), "shape", (json_int_t)rows[i].shape[0],
                                      (json_int_t)rows[i].shape[1], (json_int_t)rows[i].shape[2],
                                      (json_int_t)rows[i].shape[3], "count", (json_int_t)rows[i].count, "seconds",
                                      rows[i].seconds, "modeled_seconds", rows[i].modeled_s));
    return n;
}
