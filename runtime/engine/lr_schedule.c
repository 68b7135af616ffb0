// Learning-rate schedules: DeepSpeed 0.19's WarmupLR, WarmupDecayLR and WarmupCosineLR
// (deepspeed/runtime/lr_schedules.py) at the iteration its engine runs each step at.
// Every expression keeps DeepSpeed's operation order so the doubles come out the same.
#include <math.h>

#include "zinf_schedule.h"

// ---- DeepSpeed's schedules at last_batch_iteration it ----

// WarmupLR._get_gamma / WarmupCosineLR.get_lr_ratio in warmup (it < w): the fraction
// of the warmup done. inverse_log_warm_up is 1.0 / log(w), multiplied, not divided.
static double warmup_gamma(const zinf_scheduler_config *s, int64_t it, int64_t w) {
    if (s->warmup_type == ZINF_WARMUP_LOG) return (1.0 / log((double)w)) * log((double)(it + 1));
    return (double)it / (double)w;
}

// WarmupLR.get_lr / WarmupDecayLR (inherits it): min_lr + delta_lr * gamma.
static double warmup_lr(const zinf_optimizer_config *o, const zinf_scheduler_config *s, int64_t it, int64_t w) {
    double min_lr = s->warmup_min_lr;
    double max_lr = s->warmup_max_lr < 0 ? o->lr : s->warmup_max_lr; // None: the optimizer's lr
    if (it < 0) return min_lr;                                       // before the first scheduler.step(): min_lrs
    double gamma;
    if (it < w)
        gamma = warmup_gamma(s, it, w);
    else if (s->type == ZINF_SCHED_WARMUP_LR)
        gamma = 1.0;
    else // WarmupDecayLR._get_gamma
        gamma = fmax(0.0, (double)(s->total_num_steps - it) / fmax(1.0, (double)(s->total_num_steps - w)));
    return min_lr + (max_lr - min_lr) * gamma;
}

// WarmupCosineLR.get_lr: org_lr * get_lr_ratio().
static double cosine_lr(const zinf_optimizer_config *o, const zinf_scheduler_config *s, int64_t it, int64_t w) {
    if (it < 0) return 0.0; // before the first scheduler.step() get_lr() gives 0.0, not a ratio of lr
    double ratio;
    if (it < w) {
        ratio = warmup_gamma(s, it, w);
        ratio = s->warmup_min_ratio + ratio * (1. - s->warmup_min_ratio);
    } else {
        int64_t real_last_step = it - w + 1;
        int64_t real_total_steps = s->total_num_steps - w > 1 ? s->total_num_steps - w : 1;
        double progress = fmin(1.0, (double)real_last_step / (double)real_total_steps);
        ratio = (1 + cos(M_PI * progress)) / 2;
        ratio = fmax(0.0, s->cos_min_ratio + (1. - s->cos_min_ratio) * ratio);
    }
    return o->lr * ratio;
}

// ---- public ----

double zinf_lr_at(const zinf_optimizer_config *opt, const zinf_scheduler_config *sch, int64_t step) {
    // Applied step 1 runs at last_batch_iteration -1 (the value set when DeepSpeed
    // builds the scheduler), step k at k - 2: the engine calls scheduler.step() after
    // optimizer.step(), and not at all after a step skipped for overflow.
    int64_t it = step < 1 ? -1 : step - 2;
    int64_t w = sch->warmup_num_steps > 2 ? sch->warmup_num_steps : 2; // max(2, warmup_num_steps)
    switch (sch->type) {
    case ZINF_SCHED_WARMUP_LR:
    case ZINF_SCHED_WARMUP_DECAY_LR: return warmup_lr(opt, sch, it, w);
    case ZINF_SCHED_WARMUP_COSINE_LR: return cosine_lr(opt, sch, it, w);
    case ZINF_SCHED_NONE: break;
    }
    return opt->lr;
}

zinf_status zinf_schedule_check(const zinf_scheduler_config *sch) {
    static const char *const names[] = {"", "WarmupLR", "WarmupDecayLR", "WarmupCosineLR"};
    if (sch->type == ZINF_SCHED_NONE) return ZINF_OK;
    if ((unsigned)sch->type >= sizeof names / sizeof *names)
        return zinf_fail(ZINF_ERR_INVAL, "scheduler.type: unknown type %d", (int)sch->type);
    const char *type = names[sch->type];
    if (sch->warmup_num_steps <= 0)
        return zinf_fail(ZINF_ERR_INVAL,
                         "scheduler.params.warmup_num_steps: %lld is not a positive integer; DeepSpeed's %s refuses it "
                         "(the shortest warmup is 1, which DeepSpeed runs as 2 steps)",
                         (long long)sch->warmup_num_steps, type);
    if (sch->type != ZINF_SCHED_WARMUP_LR && sch->total_num_steps < 0)
        return zinf_fail(ZINF_ERR_INVAL, "scheduler.params.total_num_steps: missing; %s needs it", type);
    return ZINF_OK;
}
