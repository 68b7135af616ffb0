// Config rules that span keys: derived defaults (presets, overlap_comm, seq_len), the
// DeepSpeed batch-size triple, conflicting settings, and paths that must exist.
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "internal.h"

bool given(const parse_ctx *ctx, const char *path) {
    const key *k = config_key_find(path);
    return k && ctx->given[k - zinf_config_keys];
}

static const char *enum_name(const char *path, int v) { return config_key_find(path)->names[v]; }

// ---- paths ----

// A directory zinf will write to: it must exist and take a new file.
static zinf_status check_dir(const parse_ctx *ctx, const char *keypath, const char *dir) {
    struct stat st;
    if (stat(dir, &st) != 0)
        return zinf_fail(ZINF_ERR_INVAL, "%s: %s: \"%s\": %s; create it or point %s at an existing directory",
                         ctx->name, keypath, dir, strerror(errno), config_key_name(keypath));
    if (!S_ISDIR(st.st_mode))
        return zinf_fail(ZINF_ERR_INVAL, "%s: %s: \"%s\" is not a directory", ctx->name, keypath, dir);
    // access(W_OK) says yes to root on a read-only mount; creating a file is the real test.
    char probe[4096];
    snprintf(probe, sizeof probe, "%s/.zinf-check-XXXXXX", dir);
    int fd = mkstemp(probe);
    if (fd < 0)
        return zinf_fail(ZINF_ERR_INVAL, "%s: %s: \"%s\" is not writable: %s", ctx->name, keypath, dir,
                         strerror(errno));
    close(fd);
    unlink(probe);
    return ZINF_OK;
}

// A directory the swap store goes in: an existing writable directory, or a missing one
// in an existing writable parent, which the store makes (as DeepSpeed makes its swap
// folders); a missing parent is more likely a typo than a wish.
static zinf_status check_swap_dir(const parse_ctx *ctx, const char *keypath, const char *dir) {
    struct stat st;
    if (stat(dir, &st) == 0 || errno != ENOENT) return check_dir(ctx, keypath, dir);
    char parent[4096];
    snprintf(parent, sizeof parent, "%s", dir);
    char *cut = strrchr(parent, '/');
    while (cut && cut > parent && cut[1] == '\0') { // "a/b/" names b
        *cut = '\0';
        cut = strrchr(parent, '/');
    }
    if (!cut)
        snprintf(parent, sizeof parent, ".");
    else if (cut == parent)
        parent[1] = '\0';
    else
        *cut = '\0';
    if (stat(parent, &st) != 0)
        return zinf_fail(ZINF_ERR_INVAL,
                         "%s: %s: \"%s\": neither it nor its parent \"%s\" exists; create it or point %s "
                         "at an existing directory",
                         ctx->name, keypath, dir, parent, config_key_name(keypath));
    return check_dir(ctx, keypath, parent);
}

// A file zinf will read: it must exist, be a regular file and open for reading.
zinf_status config_check_file(const parse_ctx *ctx, const char *keypath, const char *file) {
    struct stat st;
    int fd = open(file, O_RDONLY);
    if (fd < 0) return zinf_fail(ZINF_ERR_INVAL, "%s: %s: \"%s\": %s", ctx->name, keypath, file, strerror(errno));
    int ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    close(fd);
    if (!ok) return zinf_fail(ZINF_ERR_INVAL, "%s: %s: \"%s\" is not a regular file", ctx->name, keypath, file);
    return ZINF_OK;
}

// ---- sections ----

zinf_status zinf_data_megatron_files(const char *path, char **bin, char **idx) {
    size_t n = strlen(path);
    // "PREFIX.bin" names the data file itself; anything else is the prefix both share.
    if (n >= 4 && strcmp(path + n - 4, ".bin") == 0) n -= 4;
    *bin = malloc(n + 5), *idx = malloc(n + 5);
    if (!*bin || !*idx) {
        free(*bin), free(*idx);
        *bin = *idx = NULL;
        return zinf_fail(ZINF_ERR_NOMEM, "data file %s: out of memory", path);
    }
    snprintf(*bin, n + 5, "%.*s.bin", (int)n, path);
    snprintf(*idx, n + 5, "%.*s.idx", (int)n, path);
    return ZINF_OK;
}

static zinf_status data_rules(zinf_config *c, const parse_ctx *ctx) {
    zinf_data_config *d = &c->data;
    if (!d->present) return ZINF_OK;
    // Without a path the program gives the tokens (zinf.Engine): only seq_len is read.
    if (d->path && d->format == ZINF_DATA_MEGATRON) {
        // data.path names the .bin or the prefix it shares with the .idx: both must be there.
        char *bin, *idx;
        ZINF_CHECK(zinf_data_megatron_files(d->path, &bin, &idx));
        zinf_status st = config_check_file(ctx, "data.path", bin);
        if (st == ZINF_OK) st = config_check_file(ctx, "data.path", idx);
        free(bin), free(idx);
        ZINF_CHECK(st);
    } else if (d->path) {
        ZINF_CHECK(config_check_file(ctx, "data.path", d->path));
    }
    if (d->seq_len < 0) d->seq_len = c->model.present ? c->model.block_size : 1024;
    if (!c->model.present) return ZINF_OK;
    if (d->seq_len > c->model.block_size)
        return zinf_fail(ZINF_ERR_INVAL, "%s: data.seq_len: %lld is longer than model.block_size (%lld)", ctx->name,
                         (long long)d->seq_len, (long long)c->model.block_size);
    if (d->format == ZINF_DATA_TEXT_BYTES && c->model.vocab_size < 256)
        return zinf_fail(ZINF_ERR_INVAL,
                         "%s: model.vocab_size: %lld is too small for data.format \"text-bytes\" (every byte is a "
                         "token: at least 256)",
                         ctx->name, (long long)c->model.vocab_size);
    // Not an error (the data may use part of the vocabulary), but likely the wrong format:
    // nanoGPT and llm.c write uint32 ids once the vocabulary passes what uint16 holds.
    if (d->format == ZINF_DATA_TOKENS_U16 && c->model.vocab_size > 65536)
        ZINF_LOG_WARN("%s: model.vocab_size %lld is more than uint16 ids reach (65536); data.format \"tokens-u32\" "
                      "holds larger ids",
                      ctx->name, (long long)c->model.vocab_size);
    return ZINF_OK;
}

static zinf_status optimizer_rules(zinf_config *c, const parse_ctx *ctx) {
    if (c->fp16.enabled && c->bf16)
        return zinf_fail(ZINF_ERR_INVAL, "%s: fp16.enabled and bf16.enabled are both true; enable one of them",
                         ctx->name);
    if (c->optimizer.type == ZINF_OPT_ADAMW && !c->optimizer.adam_w_mode)
        return zinf_fail(ZINF_ERR_INVAL,
                         "%s: optimizer.params.adam_w_mode: false contradicts optimizer.type \"AdamW\"; use type "
                         "\"Adam\" for L2 weight decay",
                         ctx->name);
    zinf_scheduler_config *s = &c->scheduler;
    if (s->type == ZINF_SCHED_NONE) return ZINF_OK;
    static const unsigned takes[] = {0, F_WLR, F_WDLR, F_WCLR};
    const char *type = enum_name("scheduler.type", s->type);
    for (size_t i = 0; i < zinf_config_nkeys; i++) {
        const key *k = &zinf_config_keys[i];
        if (ctx->given[i] && (k->flags & (F_WLR | F_WDLR | F_WCLR)) && !(k->flags & takes[s->type]))
            return zinf_fail(ZINF_ERR_INVAL, "%s: %s: not a parameter of %s", ctx->name, k->path, type);
    }
    if (s->type != ZINF_SCHED_WARMUP_LR) {
        if (s->total_num_steps < 0)
            return zinf_fail(ZINF_ERR_INVAL, "%s: scheduler.params.total_num_steps: missing; %s needs it", ctx->name,
                             type);
        if (s->warmup_num_steps > s->total_num_steps)
            return zinf_fail(ZINF_ERR_INVAL,
                             "%s: scheduler.params.warmup_num_steps: %lld is more than total_num_steps (%lld)",
                             ctx->name, (long long)s->warmup_num_steps, (long long)s->total_num_steps);
    }
    return ZINF_OK;
}

static zinf_status offload_rules(const parse_ctx *ctx, const char *section, zinf_offload_device dev,
                                 const zinf_path_list *paths, int64_t stage, int64_t min_stage) {
    char devkey[96], pathkey[96];
    snprintf(devkey, sizeof devkey, "zero_optimization.%s.device", section);
    snprintf(pathkey, sizeof pathkey, "zero_optimization.%s.nvme_path", section);
    if (dev != ZINF_OFFLOAD_NONE && stage < min_stage)
        return zinf_fail(ZINF_ERR_INVAL, "%s: %s: \"%s\" needs zero_optimization.stage %s (stage is %lld)", ctx->name,
                         devkey, enum_name(devkey, dev), min_stage == 3 ? "3" : "1, 2 or 3", (long long)stage);
    if (dev == ZINF_OFFLOAD_NVME && paths->count == 0)
        return zinf_fail(ZINF_ERR_INVAL,
                         "%s: %s: missing; device \"nvme\" needs a directory on the NVMe drive(s) to swap to",
                         ctx->name, pathkey);
    if (dev != ZINF_OFFLOAD_NVME && paths->count > 0)
        ZINF_LOG_WARN("%s: %s is unused: %s is \"%s\"", ctx->name, pathkey, devkey, enum_name(devkey, dev));
    for (int i = 0; dev == ZINF_OFFLOAD_NVME && i < paths->count; i++)
        ZINF_CHECK(check_swap_dir(ctx, pathkey, paths->paths[i]));
    return ZINF_OK;
}

// MiCS: shard groups of mics_shard_size consecutive ranks, replicated across groups.
static zinf_status mics_rules(zinf_config *c, const parse_ctx *ctx) {
    zinf_zero_config *z = &c->zero;
    const char *k = "zero_optimization.mics_shard_size";
    if (z->mics_shard_size == 0 || z->mics_shard_size < -1)
        return zinf_fail(ZINF_ERR_INVAL, "%s: %s: %lld is not a number of ranks (or -1: off)", ctx->name, k,
                         (long long)z->mics_shard_size);
    if (z->mics_shard_size < 0) {
        if (z->mics_hierarchical_params_gather)
            ZINF_LOG_WARN("%s: zero_optimization.mics_hierarchical_params_gather is unused: %s is -1", ctx->name, k);
        return ZINF_OK;
    }
    if (z->stage != 3)
        return zinf_fail(ZINF_ERR_INVAL, "%s: %s: %lld needs zero_optimization.stage 3 (stage is %lld)", ctx->name, k,
                         (long long)z->mics_shard_size, (long long)z->stage);
    if (c->world_size > 1 && (z->mics_shard_size > c->world_size || c->world_size % z->mics_shard_size))
        return zinf_fail(ZINF_ERR_INVAL, "%s: %s: %lld does not divide the %d ranks", ctx->name, k,
                         (long long)z->mics_shard_size, c->world_size);
    // ZeRO++'s secondary partitions and int4 reduce-scatter are built on the world's
    // partition; MiCS has its own groups (DeepSpeed ignores them under MiCS: zinf says so).
    if (z->hpz_partition_size > 1 || z->quantized_gradients)
        return zinf_fail(ZINF_ERR_INVAL,
                         "%s: %s: MiCS does not combine with zero_optimization.%s; MiCS already keeps gathers inside "
                         "its shard groups",
                         ctx->name, k, z->hpz_partition_size > 1 ? "zero_hpz_partition_size" : "zero_quantized_gradients");
    return ZINF_OK;
}

// DeepSpeed's partial offload: the first sub-groups in forward order keep their states
// on the device (DeepSpeed's stage-3 split; zinf's stages 1-2 split alike).
static zinf_status ratio_rules(zinf_config *c, const parse_ctx *ctx) {
    zinf_zero_config *z = &c->zero;
    const char *k = "zero_optimization.offload_optimizer.ratio";
    double ratio = z->offload_optimizer.ratio;
    if (ratio == 1) return ZINF_OK;
    if (z->offload_optimizer.device == ZINF_OFFLOAD_NONE) {
        ZINF_LOG_WARN("%s: %s is unused: zero_optimization.offload_optimizer.device is \"none\"", ctx->name, k);
        z->offload_optimizer.ratio = 1;
        return ZINF_OK;
    }
    if (ratio == 0)
        return zinf_fail(ZINF_ERR_INVAL,
                         "%s: %s: 0 offloads nothing; for every state on the device set "
                         "zero_optimization.offload_optimizer.device to \"none\", else a ratio above 0",
                         ctx->name, k);
    return ZINF_OK;
}

static zinf_status zero_rules(zinf_config *c, const parse_ctx *ctx) {
    zinf_zero_config *z = &c->zero;
    // DeepSpeed overlaps gradient reduction with backward by default in stage 3 only.
    if (!given(ctx, "zero_optimization.overlap_comm")) z->overlap_comm = z->stage == 3;
    z->reduce_bucket_size_given = given(ctx, "zero_optimization.reduce_bucket_size");
    z->sub_group_size_given = given(ctx, "zero_optimization.sub_group_size");
    // On by default with cpu. Off with nvme unless asked for: there the update is the
    // drives' time, far past a backward's, and reading the last sub-groups first under
    // the backward left the next forward waiting longer for its first ones (GPT-2 large
    // on a 2-core VM's virtual disk: 9.9-11.0 s a step against 8.5-10.1 s).
    if (!given(ctx, "zero_optimization.offload_optimizer.super_offload"))
        z->offload_optimizer.super_offload = z->offload_optimizer.device != ZINF_OFFLOAD_NVME;
    // DeepSpeed partitions gradients finely over the ranks with it so that their copies to
    // host memory run in parallel (stages 1-2 with CPU offload); zinf reduces each bucket
    // straight into the partition of the rank that owns it, so there is nothing to spread.
    if (z->round_robin_gradients)
        ZINF_LOG_INFO("%s: zero_optimization.round_robin_gradients has no effect in zinf: zinf reduces gradients "
                      "bucket by bucket into each rank's partition already",
                      ctx->name);
    ZINF_CHECK(offload_rules(ctx, "offload_optimizer", z->offload_optimizer.device, &z->offload_optimizer.nvme_path,
                             z->stage, 1));
    ZINF_CHECK(offload_rules(ctx, "offload_param", z->offload_param.device, &z->offload_param.nvme_path, z->stage, 3));
    ZINF_CHECK(ratio_rules(c, ctx));
    if (z->quantized_weights && z->stage != 3)
        return zinf_fail(ZINF_ERR_INVAL,
                         "%s: zero_optimization.zero_quantized_weights: true needs zero_optimization.stage 3 (stage is "
                         "%lld): only stage 3 gathers weights",
                         ctx->name, (long long)z->stage);
    if (z->hpz_partition_size > 1 && z->stage != 3)
        return zinf_fail(ZINF_ERR_INVAL,
                         "%s: zero_optimization.zero_hpz_partition_size: %lld needs zero_optimization.stage 3 (stage is "
                         "%lld): only stage 3 gathers weights",
                         ctx->name, (long long)z->hpz_partition_size, (long long)z->stage);
    if (c->memory.tile_bound > 0 && z->stage != 3)
        return zinf_fail(ZINF_ERR_INVAL,
                         "%s: memory.tile_bound: %lld needs zero_optimization.stage 3 (stage is %lld): stages 0-2 keep "
                         "every module whole on the device",
                         ctx->name, (long long)c->memory.tile_bound, (long long)z->stage);
    if (z->quantized_gradients && z->stage != 3)
        return zinf_fail(ZINF_ERR_INVAL,
                         "%s: zero_optimization.zero_quantized_gradients: true needs zero_optimization.stage 3 (stage "
                         "is %lld)",
                         ctx->name, (long long)z->stage);
    if (z->quantized_gradients && !z->reduce_scatter)
        return zinf_fail(ZINF_ERR_INVAL,
                         "%s: zero_optimization.zero_quantized_gradients: true needs zero_optimization.reduce_scatter "
                         "true: qgZ replaces the reduce-scatter",
                         ctx->name);
    ZINF_CHECK(mics_rules(c, ctx));
    // One rank gathers nothing from others: there ZeRO++ has no effect (the engine says so).
    if (z->hpz_partition_size > 1 && c->world_size > 1 &&
        (z->hpz_partition_size > c->world_size || c->world_size % z->hpz_partition_size))
        return zinf_fail(ZINF_ERR_INVAL,
                         "%s: zero_optimization.zero_hpz_partition_size: %lld does not divide the %lld ranks; use the "
                         "ranks per node (or a divisor of them)",
                         ctx->name, (long long)z->hpz_partition_size, (long long)c->world_size);
    if (c->aio.block_size % 4096 != 0)
        return zinf_fail(ZINF_ERR_INVAL, "%s: aio.block_size: %lld is not a multiple of 4096 (O_DIRECT alignment)",
                         ctx->name, (long long)c->aio.block_size);
    return ZINF_OK;
}

static zinf_status run_rules(zinf_config *c, const parse_ctx *ctx) {
    // DeepSpeed times forward, backward and step with it; zinf train times every step
    // and reports the waits on parameters, the optimizer and NVMe without being asked.
    if (c->wall_clock_breakdown)
        ZINF_LOG_INFO("%s: wall_clock_breakdown has no effect in zinf: zinf train reports each step's time and "
                      "where it waited (on parameters, the optimizer, NVMe) anyway; --json for every step",
                      ctx->name);
#ifndef ZINF_HAVE_CUDA
    if (c->device.backend == ZINF_BACKEND_CUDA)
        return zinf_fail(ZINF_ERR_UNSUPPORTED,
                         "%s: device.backend: \"cuda\" but this build of zinf has no CUDA backend (built with "
                         "NO_CUDA=1 or without nvcc); use \"host\" or \"auto\"",
                         ctx->name);
#endif
    for (size_t i = 0; c->device.backend != ZINF_BACKEND_SIM && i < zinf_config_nkeys; i++)
        if ((zinf_config_keys[i].flags & F_SIM) && ctx->given[i])
            return zinf_fail(ZINF_ERR_INVAL,
                             "%s: %s describes the simulated device, but device.backend is \"%s\"; set "
                             "device.backend to \"sim\" or remove device.sim",
                             ctx->name, zinf_config_keys[i].path, enum_name("device.backend", (int)c->device.backend));
    zinf_checkpoint_config *k = &c->checkpoint;
    if (k->dir) {
        struct stat st;
        if (stat(k->dir, &st) == 0) ZINF_CHECK(check_dir(ctx, "checkpoint.dir", k->dir));
    } else if (k->load && strcmp(k->load, "latest") == 0) {
        return zinf_fail(ZINF_ERR_INVAL, "%s: checkpoint.load: \"latest\" needs checkpoint.dir", ctx->name);
    } else if (k->interval > 0 || k->keep > 0) {
        return zinf_fail(ZINF_ERR_INVAL, "%s: checkpoint.%s: set, but checkpoint.dir is not", ctx->name,
                         k->interval > 0 ? "interval" : "keep");
    }
    if (k->load && strcmp(k->load, "latest") != 0) {
        struct stat st;
        if (stat(k->load, &st) != 0 || !S_ISDIR(st.st_mode))
            return zinf_fail(ZINF_ERR_INVAL,
                             "%s: checkpoint.load: \"%s\" is neither \"latest\" nor a checkpoint directory", ctx->name,
                             k->load);
    }
    return ZINF_OK;
}

// DeepSpeed's rule: train_batch_size = micro × accumulation × world size; any two
// determine the third, one alone sets accumulation to 1.
static zinf_status batch_rules(zinf_config *c, const parse_ctx *ctx, int world) {
    int64_t tb = c->train_batch_size, mb = c->train_micro_batch_size_per_gpu, ga = c->gradient_accumulation_steps;
    c->world_size = world;
    const char *name = ctx->name;
    if (tb < 0 && mb < 0)
        return zinf_fail(ZINF_ERR_INVAL, "%s: train_batch_size or train_micro_batch_size_per_gpu: give at least one",
                         name);
    if (tb > 0 && mb > 0 && ga > 0) {
        // all three given: checked below
    } else if (tb > 0 && mb > 0) {
        // A product past int64 is past tb too: not a multiple (and never a division by
        // its wrapped value, which can be 0).
        int64_t step;
        if (__builtin_mul_overflow(mb, (int64_t)world, &step) || tb % step != 0)
            return zinf_fail(ZINF_ERR_INVAL,
                             "%s: train_batch_size: %lld is not a multiple of train_micro_batch_size_per_gpu (%lld) "
                             "x world size (%d)",
                             name, (long long)tb, (long long)mb, world);
        ga = tb / step;
    } else if (tb > 0) {
        if (ga < 0) ga = 1;
        int64_t micro;
        if (__builtin_mul_overflow(ga, (int64_t)world, &micro) || tb % micro != 0)
            return zinf_fail(ZINF_ERR_INVAL,
                             "%s: train_batch_size: %lld is not a multiple of gradient_accumulation_steps (%lld) x "
                             "world size (%d)",
                             name, (long long)tb, (long long)ga, world);
        mb = tb / micro;
    } else {
        if (ga < 0) ga = 1;
        if (__builtin_mul_overflow(mb, ga, &tb) || __builtin_mul_overflow(tb, (int64_t)world, &tb) ||
            tb > CONFIG_INT_MAX)
            return zinf_fail(ZINF_ERR_INVAL,
                             "%s: train_micro_batch_size_per_gpu (%lld) x gradient_accumulation_steps (%lld) x world "
                             "size (%d) makes train_batch_size past 2^53; give smaller values",
                             name, (long long)mb, (long long)ga, world);
    }
    int64_t prod;
    if (__builtin_mul_overflow(mb, ga, &prod) || __builtin_mul_overflow(prod, (int64_t)world, &prod) || prod != tb)
        return zinf_fail(ZINF_ERR_INVAL,
                         "%s: train_batch_size: %lld is not train_micro_batch_size_per_gpu (%lld) x "
                         "gradient_accumulation_steps (%lld) x world size (%d) = %lld",
                         name, (long long)tb, (long long)mb, (long long)ga, world, (long long)prod);
    c->train_batch_size = tb;
    c->train_micro_batch_size_per_gpu = mb;
    c->gradient_accumulation_steps = ga;
    return ZINF_OK;
}

zinf_status config_apply_rules(zinf_config *cfg, const parse_ctx *ctx, int world_size) {
    ZINF_CHECK(batch_rules(cfg, ctx, world_size));
    ZINF_CHECK(optimizer_rules(cfg, ctx));
    ZINF_CHECK(zero_rules(cfg, ctx));
    ZINF_CHECK(config_model_rules(cfg, ctx));
    ZINF_CHECK(data_rules(cfg, ctx));
    ZINF_CHECK(run_rules(cfg, ctx));
    return ZINF_OK;
}
