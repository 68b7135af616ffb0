// The fp16 loss scaler of DeepSpeed 0.19's ZeRO optimizers: CreateLossScaler and
// DynamicLossScaler.update_scale (deepspeed/runtime/fp16/loss_scaler.py), configured
// as DeepSpeedFP16Config.dynamic_loss_scale_args (deepspeed/runtime/precision_config.py).
#include <math.h>

#include "zinf_schedule.h"

void zinf_loss_scaler_init(zinf_loss_scaler *s, const zinf_fp16_config *c) {
    // CreateLossScaler: a DynamicLossScaler only for fp16 with loss_scale 0; a static
    // LossScaler with fp16.loss_scale, or 1.0 when fp16 is off (bf16, fp32).
    *s = (zinf_loss_scaler){
        .scale = !c->enabled         ? 1.0
                 : c->loss_scale > 0 ? c->loss_scale
                                     : ldexp(1.0, (int)c->initial_scale_power),
        .dynamic = c->enabled && c->loss_scale == 0,
        .cur_iter = 0,
        .last_overflow_iter = -1,
        .cur_hysteresis = c->hysteresis,
        .min_scale = c->min_loss_scale,
        .factor = 2.0,
        .window = c->loss_scale_window,
        .hysteresis = c->hysteresis,
        .consecutive_hysteresis = c->consecutive_hysteresis,
    };
}

zinf_status zinf_loss_scaler_update(zinf_loss_scaler *s, bool overflow, bool *skip) {
    // An overflowed step is skipped whatever the scaler: the ZeRO optimizer's step()
    // returns before the update and the engine does not advance the lr schedule.
    if (skip) *skip = overflow;
    if (!s->dynamic) {
        // LossScalerBase.update_scale only says so.
        if (overflow) ZINF_LOG_WARN("OVERFLOW! Skipping step. Gradients are non-finite, weights were not updated.");
        return ZINF_OK;
    }
    if (overflow) {
        if (s->hysteresis == 1 || s->cur_hysteresis == 1) {
            // Exact comparison, as DeepSpeed's: halving from 2^p with a floor of
            // min_scale lands on min_scale exactly.
            if (s->scale == s->min_scale)
                return zinf_fail(ZINF_ERR_INVAL,
                                 "fp16.min_loss_scale: gradients overflow at the minimum loss scale %g; the loss "
                                 "scale cannot go lower (DeepSpeed ends the run here too: \"Current loss scale already "
                                 "at minimum\")",
                                 s->scale);
            double next = fmax(s->scale / s->factor, s->min_scale);
            ZINF_LOG_INFO("OVERFLOW! Skipping step. Attempted loss scale: %.0f, reducing to %.0f", s->scale, next);
            s->scale = next;
        } else {
            ZINF_LOG_INFO("OVERFLOW! Skipping step. Attempted loss scale: %.0f, but hysteresis is %lld. Reducing "
                          "hysteresis to %lld",
                          s->scale, (long long)s->cur_hysteresis, (long long)s->cur_hysteresis - 1);
            s->cur_hysteresis--;
        }
        s->last_overflow_iter = s->cur_iter;
    } else {
        if (s->consecutive_hysteresis) s->cur_hysteresis = s->hysteresis;
        int64_t stable_interval = s->cur_iter - s->last_overflow_iter - 1;
        if (stable_interval > 0 && stable_interval % s->window == 0) {
            if (!s->consecutive_hysteresis) s->cur_hysteresis = s->hysteresis;
            s->scale *= s->factor;
        }
    }
    s->cur_iter++;
    return ZINF_OK;
}
