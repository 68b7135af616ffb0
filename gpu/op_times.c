// The op profile's rows (zinf_device_profile_stop) as zinf device-bench, zinf train
// --op-profile and the engine's flops_profiler print them: per op and dtype (or per
// shape), the device's time beside the sim model's, the longest first; and the modeled
// GPU a profile sets a device beside.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zinf_gpu.h"

void zinf_device_profile_model(const zinf_device_caps *caps, const zinf_sim_params *sim, zinf_sim_params *out) {
    *out = *sim;
    out->virtual_time = false;
    if (caps->backend == ZINF_BACKEND_SIM) return;
    static const struct {
        const char *in_name;
        zinf_sim_gpu gpu;
    } cards[] = {{"H200", ZINF_SIM_H200}, {"A100", ZINF_SIM_A100}, {"4090", ZINF_SIM_RTX4090}};
    *out = (zinf_sim_params){.gpu = ZINF_SIM_H100};
    for (size_t i = 0; i < sizeof cards / sizeof cards[0]; i++)
        if (strstr(caps->name, cards[i].in_name)) out->gpu = cards[i].gpu;
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

int zinf_op_times_arrange(zinf_op_time *rows, int n, bool shapes) {
    if (!shapes) n = merge_shapes(rows, n);
    qsort(rows, (size_t)n, sizeof *rows, cmp_seconds);
    return n;
}

double zinf_op_times_sum(const zinf_op_time *rows, int n, bool modeled) {
    double s = 0;
    for (int i = 0; i < n; i++)
        s += modeled ? rows[i].modeled_s : rows[i].seconds;
    return s;
}

int zinf_op_times_print(FILE *f, zinf_op_time *rows, int n, double per, bool shapes) {
    n = zinf_op_times_arrange(rows, n, shapes);
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
    double dev = zinf_op_times_sum(rows, n, false), model = zinf_op_times_sum(rows, n, true);
    fprintf(f, "%-47s %11.3f %11.3f %13.2f\n", "ops (each timed)", 1e3 * dev / per, 1e3 * model / per,
            model > 0 ? dev / model : 0);
    return n;
}
