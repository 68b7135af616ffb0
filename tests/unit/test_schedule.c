// lr schedules and the loss scaler against DeepSpeed: the values tests/ref/schedule_ref.py
// recorded from DeepSpeed's WarmupLR, WarmupDecayLR, WarmupCosineLR and DynamicLossScaler
// (driven as its engine drives them, overflowed steps included) replayed through
// zinf_lr_at and zinf_loss_scaler_update; the schedule params DeepSpeed refuses give
// ZINF_ERR_INVAL naming the key, from a struct and from a parsed config.
// timeout: 10 san=10 cuda-emu=10 san-cuda-emu=10
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"
#include "zinf.h"
#include "zinf_schedule.h"

typedef struct lr_hdr {
    char name[48];
    uint32_t type, warmup_type;
    int64_t warmup_num_steps, total_num_steps;
    double lr, warmup_min_lr, warmup_max_lr, warmup_min_ratio, cos_min_ratio;
    uint32_t steps;
} __attribute__((packed)) lr_hdr;

typedef struct lr_row {
    uint8_t overflow;
    double lr;
} __attribute__((packed)) lr_row;

typedef struct scaler_hdr {
    char name[48];
    uint32_t enabled;
    double loss_scale;
    int64_t initial_scale_power, loss_scale_window, hysteresis;
    uint32_t consecutive_hysteresis;
    double min_loss_scale;
    uint32_t steps;
} __attribute__((packed)) scaler_hdr;

typedef struct scaler_row {
    uint8_t overflow, raised;
    double before, after;
    int64_t cur_hysteresis, last_overflow_iter, cur_iter;
} __attribute__((packed)) scaler_row;

typedef struct rejected_case {
    char name[48];
    uint32_t type;
    int64_t warmup_num_steps, total_num_steps;
} __attribute__((packed)) rejected_case;

static bool read_all(FILE *f, void *p, size_t bytes) { return fread(p, 1, bytes, f) == bytes; }

// Relative 1e-12, not equality: zinf evaluates DeepSpeed's expressions in the same
// order (no contraction), but log and cos come from the C library, Python's math
// module from its own build's; on one machine they are the same functions and the
// values agree to the bit (the test prints how many do), a reference made elsewhere
// may differ in the last bit or two.
static bool lr_close(double got, double want, double *worst) {
    double err = fabs(got - want);
    if (want != 0 && err / fabs(want) > *worst) *worst = err / fabs(want);
    return err <= 1e-12 * fabs(want);
}

static int lr_cases(FILE *f, uint32_t n) {
    double worst = 0;
    long values = 0, exact = 0;
    for (uint32_t c = 0; c < n; c++) {
        lr_hdr h;
        if (!read_all(f, &h, sizeof h)) {
            CHECK(0, "truncated lr case %u", c);
            return 1;
        }
        zinf_optimizer_config o = {.type = ZINF_OPT_ADAMW, .lr = h.lr};
        zinf_scheduler_config s = {.type = (zinf_scheduler_type)h.type,
                                   .warmup_min_lr = h.warmup_min_lr,
                                   .warmup_max_lr = h.warmup_max_lr,
                                   .warmup_num_steps = h.warmup_num_steps,
                                   .warmup_type = (zinf_warmup_type)h.warmup_type,
                                   .total_num_steps = h.total_num_steps,
                                   .warmup_min_ratio = h.warmup_min_ratio,
                                   .cos_min_ratio = h.cos_min_ratio};
        CHECK(zinf_schedule_check(&s) == ZINF_OK, "%s: DeepSpeed accepts it: %s", h.name, zinf_last_error());
        int64_t applied = 0;
        int bad = 0;
        for (uint32_t i = 0; i < h.steps; i++) {
            lr_row r;
            if (!read_all(f, &r, sizeof r)) {
                CHECK(0, "%s: truncated at step %u", h.name, i);
                return 1;
            }
            double got = zinf_lr_at(&o, &s, applied + 1);
            values++, exact += got == r.lr;
            if (!lr_close(got, r.lr, &worst) && bad++ < 3)
                CHECK(0, "%s: attempt %u (applied step %lld): lr %.17g, DeepSpeed %.17g", h.name, i + 1,
                      (long long)applied + 1, got, r.lr);
            if (!r.overflow) applied++; // a skipped step does not advance the schedule
        }
        printf("%-28s %4u steps (%4lld applied): %s\n", h.name, h.steps, (long long)applied,
               bad ? "DIFFERS" : "matches DeepSpeed");
    }
    printf("lr: %ld values, %ld equal to the bit, largest relative difference %.3g\n", values, exact, worst);
    return 0;
}

static int scaler_cases(FILE *f, uint32_t n) {
    for (uint32_t c = 0; c < n; c++) {
        scaler_hdr h;
        if (!read_all(f, &h, sizeof h)) {
            CHECK(0, "truncated scaler case %u", c);
            return 1;
        }
        zinf_fp16_config fc = {.enabled = h.enabled,
                               .loss_scale = h.loss_scale,
                               .initial_scale_power = h.initial_scale_power,
                               .loss_scale_window = h.loss_scale_window,
                               .hysteresis = h.hysteresis,
                               .consecutive_hysteresis = h.consecutive_hysteresis,
                               .min_loss_scale = h.min_loss_scale};
        zinf_loss_scaler s;
        zinf_loss_scaler_init(&s, &fc);
        int bad = 0, raised = 0;
        for (uint32_t i = 0; i < h.steps && bad < 3; i++) {
            scaler_row r;
            if (!read_all(f, &r, sizeof r)) {
                CHECK(0, "%s: truncated at step %u", h.name, i);
                return 1;
            }
            // Scales are exact (powers of 2 times the floor), so compare exactly.
            if (s.scale != r.before && ++bad)
                CHECK(0, "%s: step %u: scale %.17g before the update, DeepSpeed %.17g", h.name, i + 1, s.scale,
                      r.before);
            bool skip = !r.overflow;
            zinf_status st = zinf_loss_scaler_update(&s, r.overflow, &skip);
            if (r.raised) {
                raised = 1;
                if (st != ZINF_ERR_INVAL && ++bad)
                    CHECK(0, "%s: step %u: DeepSpeed raised at the minimum scale; zinf returned %s", h.name, i + 1,
                          zinf_status_str(st));
                else
                    CHECK_CONTAINS(zinf_last_error(), "fp16.min_loss_scale");
            } else if (st != ZINF_OK && ++bad) {
                CHECK(0, "%s: step %u: %s", h.name, i + 1, zinf_last_error());
            }
            if (skip != (bool)r.overflow && ++bad)
                CHECK(0, "%s: step %u: skip %d for overflow %d", h.name, i + 1, skip, r.overflow);
            if (s.scale != r.after && ++bad)
                CHECK(0, "%s: step %u: scale %.17g after the update, DeepSpeed %.17g", h.name, i + 1, s.scale, r.after);
            if (s.dynamic &&
                (s.cur_hysteresis != r.cur_hysteresis || s.last_overflow_iter != r.last_overflow_iter ||
                 s.cur_iter != r.cur_iter) &&
                ++bad)
                CHECK(0,
                      "%s: step %u: cur_hysteresis %lld, last_overflow_iter %lld, cur_iter %lld; DeepSpeed %lld, "
                      "%lld, %lld",
                      h.name, i + 1, (long long)s.cur_hysteresis, (long long)s.last_overflow_iter,
                      (long long)s.cur_iter, (long long)r.cur_hysteresis, (long long)r.last_overflow_iter,
                      (long long)r.cur_iter);
        }
        if (bad) return 1; // the rest of the case is unread
        CHECK(s.dynamic == (h.enabled && h.loss_scale == 0), "%s: dynamic %d", h.name, s.dynamic);
        printf("%-28s %4u steps%s: matches DeepSpeed, final scale %g\n", h.name, h.steps,
               raised ? " (raises at the minimum)" : "", s.scale);
    }
    return 0;
}

static void rejected_cases(FILE *f, uint32_t n) {
    for (uint32_t c = 0; c < n; c++) {
        rejected_case r;
        if (!read_all(f, &r, sizeof r)) {
            CHECK(0, "truncated rejected case %u", c);
            return;
        }
        zinf_scheduler_config s = {.type = (zinf_scheduler_type)r.type,
                                   .warmup_max_lr = 1e-3,
                                   .warmup_num_steps = r.warmup_num_steps,
                                   .total_num_steps = r.total_num_steps,
                                   .cos_min_ratio = 1e-4};
        zinf_status st = zinf_schedule_check(&s);
        CHECK(st == ZINF_ERR_INVAL, "%s: DeepSpeed refuses it; zinf: %s", r.name, zinf_status_str(st));
        CHECK_CONTAINS(zinf_last_error(), r.warmup_num_steps <= 0 ? "scheduler.params.warmup_num_steps"
                                                                  : "scheduler.params.total_num_steps");
        printf("%-28s refused: %s\n", r.name, zinf_last_error());
    }
}

// The path the engine takes: a parsed config, then zinf_schedule_check. Either step
// may be the one that refuses warmup_num_steps 0; the message names the key.
static void config_level(void) {
    static const char *const bad[] = {
        "{\"train_batch_size\": 8, \"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_num_steps\": 0}}}",
        "{\"train_batch_size\": 8, \"scheduler\": {\"type\": \"WarmupCosineLR\", \"params\": {\"warmup_num_steps\": "
        "0, \"total_num_steps\": 100}}}",
    };
    zinf_config_options opts = {.world_size = 1};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        zinf_config cfg;
        zinf_status st = zinf_config_parse(&cfg, bad[i], "t.json", &opts);
        if (st == ZINF_OK) {
            st = zinf_schedule_check(&cfg.scheduler);
            zinf_config_free(&cfg);
        }
        CHECK(st == ZINF_ERR_INVAL, "config %zu: warmup_num_steps 0 accepted (%s)", i, zinf_status_str(st));
        CHECK_CONTAINS(zinf_last_error(), "scheduler.params.warmup_num_steps");
    }

    // A parsed config's fp16 defaults give DeepSpeed's DynamicLossScaler arguments.
    zinf_config cfg;
    zinf_status st =
        zinf_config_parse(&cfg, "{\"train_batch_size\": 8, \"fp16\": {\"enabled\": true}}", "t.json", &opts);
    CHECK(st == ZINF_OK, "fp16 config: %s", zinf_last_error());
    if (st != ZINF_OK) return;
    zinf_loss_scaler s;
    zinf_loss_scaler_init(&s, &cfg.fp16);
    CHECK(s.dynamic && s.scale == 65536 && s.window == 1000 && s.hysteresis == 2 && s.cur_hysteresis == 2 &&
              !s.consecutive_hysteresis && s.min_scale == 1 && s.factor == 2 && s.last_overflow_iter == -1,
          "fp16 defaults: scale %g window %lld hysteresis %lld min %g", s.scale, (long long)s.window,
          (long long)s.hysteresis, s.min_scale);
    CHECK(zinf_schedule_check(&cfg.scheduler) == ZINF_OK &&
              zinf_lr_at(&cfg.optimizer, &cfg.scheduler, 7) == cfg.optimizer.lr,
          "no scheduler: the optimizer's lr");
    zinf_config_free(&cfg);
}

int main(void) {
    zinf_log_set_level(ZINF_LOG_LEVEL_ERROR); // the scaler reports every overflow, as DeepSpeed does
    const char *dir = getenv("ZINF_REF_DIR") ? getenv("ZINF_REF_DIR") : "build/ref";
    char path[512];
    snprintf(path, sizeof path, "%s/schedule.bin", dir);
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "%s: missing; `make tests` generates it with tests/ref/schedule_ref.py\n", path);
        return 1;
    }
    char magic[8];
    uint32_t version, nlr, nscaler, nrejected;
    bool ok = read_all(f, magic, 8) && memcmp(magic, "ZINFSCH1", 8) == 0 && read_all(f, &version, 4) && version == 1 &&
              read_all(f, &nlr, 4) && read_all(f, &nscaler, 4) && read_all(f, &nrejected, 4) && nlr > 0 &&
              nscaler > 0 && nrejected > 0;
    CHECK(ok, "%s: not a version 1 schedule reference", path);
    if (ok && lr_cases(f, nlr) == 0 && scaler_cases(f, nscaler) == 0) {
        rejected_cases(f, nrejected);
        char extra;
        CHECK(fread(&extra, 1, 1, f) == 0, "%s: data after the last case", path);
    }
    fclose(f);
    config_level();
    return check_exit("test_schedule");
}
