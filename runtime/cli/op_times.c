// The op profile's options: the modeled GPU (--gpu, or the device's own), and the rows
// as JSON lines (zinf_op_times_print prints the table).
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
    if (!gpu) {
        zinf_device_profile_model(caps, &cfg->device.sim, out);
        return CLI_OK;
    }
    *out = (zinf_sim_params){0};
    return cli_sim_gpu(cmd, gpu, &out->gpu);
}

int cli_op_times_json(zinf_op_time *rows, int n, bool shapes) {
    n = zinf_op_times_arrange(rows, n, shapes);
    for (int i = 0; i < n; i++)
        cli_print_json_line(json_pack("{s:s, s:s, s:[IIII], s:I, s:f, s:f}", "op", rows[i].op, "dtype",
                                      zinf_dtype_name(rows[i].dt), "shape", (json_int_t)rows[i].shape[0],
                                      (json_int_t)rows[i].shape[1], (json_int_t)rows[i].shape[2],
                                      (json_int_t)rows[i].shape[3], "count", (json_int_t)rows[i].count, "seconds",
                                      rows[i].seconds, "modeled_seconds", rows[i].modeled_s));
    return n;
}
