// zinf schedules: the learning rate of each optimizer step and the fp16 loss scale,
// as DeepSpeed 0.19 defines them (deepspeed/runtime/lr_schedules.py: WarmupLR,
// WarmupDecayLR, WarmupCosineLR; deepspeed/runtime/fp16/loss_scaler.py:
// DynamicLossScaler) and as its engine applies them (engine.py: _take_model_step).
#ifndef ZINF_SCHEDULE_H
#define ZINF_SCHEDULE_H

#include <stdbool.h>
#include <stdint.h>

#include "zinf_base.h"
#include "zinf_config.h"

#ifdef __cplusplus
extern "C" {
#endif

// ---- learning rate ----
// The lr that optimizer step `step` uses, where step counts the steps actually
// applied: 1 for the first, and a step skipped for an fp16 overflow does not count
// (call it with steps applied so far + 1; a skipped step's retry uses the same lr).
//
// DeepSpeed builds the scheduler with last_batch_iteration = -1, which sets the
// optimizer's lr to the schedule's value at -1, and calls scheduler.step() after each
// optimizer.step() that was not skipped. So applied step 1 runs at iteration -1 and
// step k >= 2 at iteration k - 2:
//   step 1: WarmupLR, WarmupDecayLR: warmup_min_lr; WarmupCosineLR: 0 (not
//           warmup_min_ratio * lr: DeepSpeed's first cosine step has lr 0).
//   step k: f(k - 2), with W = max(2, warmup_num_steps) and i = k - 2:
//     warmup (i < W): g = log(i + 1) / log(W) ("log", as (1 / log W) * log(i + 1))
//                     or i / W ("linear"); so steps 1 and 2 both use the minimum.
//     WarmupLR:       lr = min + (max - min) * (i < W ? g : 1)
//     WarmupDecayLR:  after warmup g = max(0, (T - i) / max(1, T - W)), T = total_num_steps
//     WarmupCosineLR: ratio = warmup_min_ratio + g * (1 - warmup_min_ratio) in warmup,
//                     then p = min(1, (i - W + 1) / max(1, T - W)),
//                     ratio = max(0, cos_min_ratio + (1 - cos_min_ratio) * (1 + cos(pi p)) / 2);
//                     lr = optimizer.lr * ratio.
// ZINF_SCHED_NONE: optimizer.lr for every step. A warmup_max_lr below 0 stands for
// DeepSpeed's None (WarmupLR's default): the optimizer's lr. Steps past
// total_num_steps keep the final value (WarmupDecayLR: warmup_min_lr; cosine:
// cos_min_ratio * lr). step <= 0 is treated as 1. The config must have passed
// zinf_schedule_check.
double zinf_lr_at(const zinf_optimizer_config *opt, const zinf_scheduler_config *sch, int64_t step);

// What DeepSpeed's schedule constructors refuse: warmup_num_steps must be positive
// (ValueError in WarmupLR and WarmupCosineLR, so also WarmupDecayLR), and
// WarmupDecayLR and WarmupCosineLR need total_num_steps. ZINF_ERR_INVAL naming the
// key. total_num_steps < warmup_num_steps is allowed, as DeepSpeed only warns.
zinf_status zinf_schedule_check(const zinf_scheduler_config *sch);

// ---- loss scaler ----
// fp16 loss scaling as DeepSpeed's ZeRO optimizers (stages 1-3) do it with
// CreateLossScaler: static when fp16.loss_scale > 0, scale 1 when fp16 is off
// (bf16, fp32), otherwise DynamicLossScaler. Every step whose gradients overflow is
// skipped, whatever the scaler; the scaler only decides the next scale. The fields
// are public so that checkpoints can save and restore them.
typedef struct zinf_loss_scaler {
    double scale;               // cur_scale: multiply the loss by it, divide the gradients
    bool dynamic;               // false: scale never changes
    int64_t cur_iter;           // updates so far (overflowed steps included)
    int64_t last_overflow_iter; // cur_iter of the last overflow; -1: none yet
    int64_t cur_hysteresis;     // overflows still tolerated before the scale drops
    // from the config
    double min_scale;            // fp16.min_loss_scale
    double factor;               // 2, as DeepSpeed's scale_factor
    int64_t window;              // fp16.loss_scale_window
    int64_t hysteresis;          // fp16.hysteresis (DeepSpeed's delayed_shift)
    bool consecutive_hysteresis; // refill cur_hysteresis after every good step
} zinf_loss_scaler;

// Initial scale 2^initial_scale_power when dynamic. The config is one
// zinf_config_load accepted (window >= 1, hysteresis >= 1, min_loss_scale > 0).
void zinf_loss_scaler_init(zinf_loss_scaler *s, const zinf_fp16_config *c);

// Record whether this step's gradients overflowed (inf or NaN on any rank); *skip
// (may be NULL) is set to overflow: the step must not be applied. DynamicLossScaler
// .update_scale: an overflow lowers the scale by 2 (not below min_scale) once
// cur_hysteresis is down to 1, else only lowers cur_hysteresis; a good step raises
// the scale by 2 when (cur_iter - last_overflow_iter - 1) is a positive multiple of
// window, refilling cur_hysteresis then (or after every good step with
// consecutive_hysteresis). An overflow with the scale already at min_scale and no
// hysteresis left is the one failure: DeepSpeed raises "Current loss scale already
// at minimum" and ends the run; here ZINF_ERR_INVAL naming fp16.min_loss_scale, and
// the scaler is left as it was.
zinf_status zinf_loss_scaler_update(zinf_loss_scaler *s, bool overflow, bool *skip);

#ifdef __cplusplus
}
#endif
#endif
