// zinf_abi: the public structs' sizes and field offsets and the public enums' values as
// this library was compiled, by name. A binding that mirrors them (the Python package's
// ctypes structs) checks its copies against these when it loads the library, so a
// package and a library from different versions refuse to run instead of passing
// misplaced fields. The table lists what the Python package mirrors.
#include <stddef.h>
#include <string.h>

#include "zinf.h"

#define SIZE(type) {#type, sizeof(type)}
#define FIELD(type, field) {#type "." #field, offsetof(type, field)}
#define VALUE(constant) {#constant, constant}

static const struct {
    const char *name;
    int64_t value;
} entries[] = {
    SIZE(zinf_aio_params),
    FIELD(zinf_aio_params, block_size),
    FIELD(zinf_aio_params, queue_depth),
    FIELD(zinf_aio_params, threads),
    FIELD(zinf_aio_params, sqpoll),
    FIELD(zinf_aio_params, use_threads),
    SIZE(zinf_aio_file_config),
    FIELD(zinf_aio_file_config, dirs),
    FIELD(zinf_aio_file_config, ndirs),
    FIELD(zinf_aio_file_config, name),
    FIELD(zinf_aio_file_config, size),
    FIELD(zinf_aio_file_config, stripe_unit),
    FIELD(zinf_aio_file_config, strict_direct),
    FIELD(zinf_aio_file_config, keep),
    FIELD(zinf_aio_file_config, check),
    FIELD(zinf_aio_file_config, check_arg),
    SIZE(zinf_aio_stats),
    FIELD(zinf_aio_stats, requests),
    FIELD(zinf_aio_stats, fixed_buffer),
    FIELD(zinf_aio_stats, fixed_file),
    FIELD(zinf_aio_stats, resubmitted),
    FIELD(zinf_aio_stats, read_bytes),
    FIELD(zinf_aio_stats, write_bytes),
    FIELD(zinf_aio_stats, read_busy_ns),
    FIELD(zinf_aio_stats, write_busy_ns),
    SIZE(zinf_optim_hparams),
    FIELD(zinf_optim_hparams, kind),
    FIELD(zinf_optim_hparams, lr),
    FIELD(zinf_optim_hparams, beta1),
    FIELD(zinf_optim_hparams, beta2),
    FIELD(zinf_optim_hparams, eps),
    FIELD(zinf_optim_hparams, weight_decay),
    FIELD(zinf_optim_hparams, lr_decay),
    FIELD(zinf_optim_hparams, bias_correction),
    FIELD(zinf_optim_hparams, step),
    FIELD(zinf_optim_hparams, grad_scale),
    SIZE(zinf_optim_tile),
    FIELD(zinf_optim_tile, param),
    FIELD(zinf_optim_tile, exp_avg),
    FIELD(zinf_optim_tile, exp_avg_sq),
    FIELD(zinf_optim_tile, grad),
    FIELD(zinf_optim_tile, grad_dtype),
    FIELD(zinf_optim_tile, out),
    FIELD(zinf_optim_tile, out_dtype),
    FIELD(zinf_optim_tile, n),
    FIELD(zinf_optim_tile, from_param),
    FIELD(zinf_optim_tile, from_exp_avg),
    FIELD(zinf_optim_tile, from_exp_avg_sq),
    VALUE(ZINF_OK),
    VALUE(ZINF_DTYPE_NONE),
    VALUE(ZINF_DTYPE_F32),
    VALUE(ZINF_DTYPE_BF16),
    VALUE(ZINF_DTYPE_F16),
    VALUE(ZINF_OPTIM_ADAM),
    VALUE(ZINF_OPTIM_ADAMW),
    VALUE(ZINF_OPTIM_ADAGRAD),
    VALUE(ZINF_OPTIM_LION),
};

int64_t zinf_abi(const char *name) {
    for (size_t i = 0; name && i < sizeof entries / sizeof entries[0]; i++)
        if (!strcmp(entries[i].name, name)) return entries[i].value;
    return -1;
}
