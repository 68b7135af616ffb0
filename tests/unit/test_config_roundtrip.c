// Good configs: DeepSpeed's documented examples and defaults, aliases, overrides, and
// the normalized output parsing back to the identical config.
// timeout: 10 san=10 cuda-emu=10 san-cuda-emu=10
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "zinf.h"

// The ZeRO-3 examples of DeepSpeed's ZeRO documentation, made valid JSON (the pages
// elide the rest of the config with "..."; the batch size stands in for it).
static const char *const ds_examples[] = {
    "{ \"train_batch_size\": 8, \"zero_optimization\": { \"stage\": 3 }, \"fp16\": { \"enabled\": true }, "
    "\"optimizer\": { \"type\": \"AdamW\", \"params\": { \"lr\": 0.001, \"betas\": [ 0.8, 0.999 ], \"eps\": 1e-8, "
    "\"weight_decay\": 3e-7 } } }",
    "{ \"train_batch_size\": 8, \"zero_optimization\": { \"stage\": 3, \"offload_optimizer\": { \"device\": \"cpu\" } "
    "} }",
    "{ \"train_batch_size\": 8, \"zero_optimization\": { \"stage\": 3, \"offload_optimizer\": { \"device\": \"cpu\" }, "
    "\"offload_param\": { \"device\": \"cpu\" } } }",
    "{ \"train_batch_size\": 8, \"zero_optimization\": { \"stage\": 3, \"offload_optimizer\": { \"device\": \"nvme\", "
    "\"nvme_path\": \"/nvme_data\" }, \"offload_param\": { \"device\": \"nvme\", \"nvme_path\": \"/nvme_data\" } } }",
    "{ \"train_batch_size\": 8, \"zero_optimization\": { \"stage\": 3, \"mics_shard_size\": -1, "
    "\"mics_hierarchical_params_gather\": false } }",
    // A typical full DeepSpeed config: every section zinf reads, DeepSpeed spellings.
    "{ \"train_micro_batch_size_per_gpu\": 4, \"gradient_accumulation_steps\": 2, \"gradient_clipping\": 1.0, "
    "\"steps_per_print\": 100, \"wall_clock_breakdown\": false, \"zero_allow_untested_optimizer\": true, "
    "\"fp16\": { \"enabled\": true, \"loss_scale\": 0, \"initial_scale_power\": 12, \"loss_scale_window\": 500, "
    "\"hysteresis\": 2, \"min_loss_scale\": 1 }, "
    "\"optimizer\": { \"type\": \"Adam\", \"params\": { \"lr\": 3e-4, \"betas\": [0.9, 0.95], \"eps\": 1e-8, "
    "\"weight_decay\": 0.1 } }, "
    "\"scheduler\": { \"type\": \"WarmupDecayLR\", \"params\": { \"warmup_min_lr\": 0, \"warmup_max_lr\": 3e-4, "
    "\"warmup_num_steps\": 100, \"total_num_steps\": 1000, \"warmup_type\": \"linear\" } }, "
    "\"zero_optimization\": { \"stage\": 3, \"contiguous_gradients\": true, \"overlap_comm\": true, "
    "\"reduce_bucket_size\": 5e8, \"sub_group_size\": 1e9, \"stage3_prefetch_bucket_size\": 5e7, "
    "\"stage3_param_persistence_threshold\": 1e5, \"stage3_max_live_parameters\": 1e9, "
    "\"stage3_max_reuse_distance\": 1e9, \"stage3_gather_16bit_weights_on_model_save\": false, "
    "\"offload_optimizer\": { \"device\": \"nvme\", \"nvme_path\": \"/nvme_data\", \"buffer_count\": 4, "
    "\"pin_memory\": true, \"pipeline_read\": false, \"pipeline_write\": false, \"fast_init\": false }, "
    "\"offload_param\": { \"device\": \"nvme\", \"nvme_path\": \"/nvme_data\", \"buffer_count\": 5, "
    "\"buffer_size\": 1e8, \"max_in_cpu\": 1e9, \"pin_memory\": true } }, "
    "\"aio\": { \"block_size\": 1048576, \"queue_depth\": 8, \"thread_count\": 1, \"single_submit\": false, "
    "\"overlap_events\": true }, "
    "\"activation_checkpointing\": { \"partition_activations\": false, \"cpu_checkpointing\": false, "
    "\"contiguous_memory_optimization\": false, \"number_checkpoints\": null, \"synchronize_checkpoint_boundary\": "
    "false, \"profile\": false }, "
    "\"tensorboard\": { \"enabled\": false, \"output_path\": \"log/\" } }",
    // DeepSpeed-Chat's training config (get_train_ds_config), with round_robin_gradients
    // as DeepSpeed's stage 2 examples set it: both keys are accepted.
    "{ \"train_batch_size\": 8, \"train_micro_batch_size_per_gpu\": 4, \"steps_per_print\": 10, "
    "\"zero_optimization\": { \"stage\": 2, \"offload_param\": { \"device\": \"none\" }, "
    "\"offload_optimizer\": { \"device\": \"none\" }, \"stage3_param_persistence_threshold\": 1e4, "
    "\"stage3_max_live_parameters\": 3e7, \"stage3_prefetch_bucket_size\": 3e7, \"memory_efficient_linear\": false, "
    "\"round_robin_gradients\": true }, "
    "\"fp16\": { \"enabled\": true, \"loss_scale_window\": 100 }, \"gradient_clipping\": 1.0, "
    "\"prescale_gradients\": false, \"wall_clock_breakdown\": false, "
    "\"hybrid_engine\": { \"enabled\": false, \"max_out_tokens\": 512, \"inference_tp_size\": 1, "
    "\"release_inference_cache\": false, \"pin_parameters\": true, \"tp_gather_partition_size\": 8 } }",
};

static char dir[64];

// Parse text with the doc's /nvme_data pointed at a real directory through --set.
static zinf_status parse(zinf_config *cfg, const char *text, int world) {
    char s1[128], s2[128];
    snprintf(s1, sizeof s1, "zero_optimization.offload_optimizer.nvme_path=%s", dir);
    snprintf(s2, sizeof s2, "zero_optimization.offload_param.nvme_path=%s", dir);
    const char *sets[] = {s1, s2};
    bool nvme = strstr(text, "/nvme_data") != NULL;
    zinf_config_options opts = {.sets = sets, .nsets = nvme ? 2 : 0, .world_size = world};
    return zinf_config_parse(cfg, text, "example.json", &opts);
}

// parse -> print -> parse -> print must give the same text: the normalized config is
// a complete config of its own.
static char *roundtrip(const char *text, int world) {
    zinf_config a, b;
    char *ja = NULL, *jb = NULL;
    if (parse(&a, text, world) != ZINF_OK) {
        CHECK(0, "%s: %s", text, zinf_last_error());
        return NULL;
    }
    CHECK(zinf_config_to_json(&a, &ja) == ZINF_OK, "print");
    zinf_config_options opts = {.world_size = world};
    CHECK(zinf_config_parse(&b, ja, "normalized", &opts) == ZINF_OK, "normalized output rejected: %s\n%s",
          zinf_last_error(), ja);
    CHECK(zinf_config_to_json(&b, &jb) == ZINF_OK, "print 2");
    CHECK(jb && strcmp(ja, jb) == 0, "normalized output changed on a second pass:\n%s\n---\n%s", ja, jb ? jb : "");
    zinf_config_free(&a);
    zinf_config_free(&b);
    free(jb);
    return ja;
}

static void logged(zinf_log_level level, int rank, const char *msg, void *user) {
    (void)rank;
    if (level <= ZINF_LOG_LEVEL_WARN) snprintf(user, 256, "%s", msg);
}

// Every line at INFO, appended.
static void logged_info(zinf_log_level level, int rank, const char *msg, void *user) {
    (void)rank;
    size_t used = strlen(user);
    if (level == ZINF_LOG_LEVEL_INFO) snprintf((char *)user + used, 1024 - used, "%s\n", msg);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/zinf-nvme-XXXXXX");
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    for (size_t i = 0; i < sizeof ds_examples / sizeof ds_examples[0]; i++)
        free(roundtrip(ds_examples[i], 1));
    // The Llama family's keys print, and print back the same; a preset's values are kept
    // and a key beside it wins.
    char *lj = roundtrip("{\"train_batch_size\": 1, \"model\": {\"preset\": \"mistral-7b\", \"n_layer\": 2}}", 1);
    CHECK(lj && strstr(lj, "\"sliding_window\": 4096") && strstr(lj, "\"n_layer\": 2") &&
              strstr(lj, "\"arch\": \"mistral\"") && strstr(lj, "\"tie_word_embeddings\": false"),
          "mistral-7b printed as:\n%s", lj ? lj : "");
    free(lj);
    lj = roundtrip("{\"train_batch_size\": 1, \"model\": {\"preset\": \"gpt2\"}}", 1);
    CHECK(lj && !strstr(lj, "rope_theta") && !strstr(lj, "n_kv_head"), "GPT-2 printed Llama keys:\n%s", lj ? lj : "");
    free(lj);

    zinf_config c;
    // The documented example's values land where they belong.
    CHECK(parse(&c, ds_examples[0], 1) == ZINF_OK, "%s", zinf_last_error());
    CHECK(c.zero.stage == 3 && c.fp16.enabled && c.optimizer.type == ZINF_OPT_ADAMW, "example 0");
    CHECK(c.optimizer.betas[0] == 0.8 && c.optimizer.betas[1] == 0.999 && c.optimizer.weight_decay == 3e-7, "betas");
    CHECK(c.zero.overlap_comm, "stage 3 overlaps communication by default (DeepSpeed)");
    zinf_config_free(&c);
    CHECK(parse(&c, ds_examples[3], 1) == ZINF_OK, "%s", zinf_last_error());
    CHECK(c.zero.offload_optimizer.device == ZINF_OFFLOAD_NVME && c.zero.offload_param.device == ZINF_OFFLOAD_NVME,
          "nvme tiers");
    CHECK(c.zero.offload_param.nvme_path.count == 1 && strcmp(c.zero.offload_param.nvme_path.paths[0], dir) == 0,
          "nvme_path overridden by --set");
    zinf_config_free(&c);
    CHECK(parse(&c, ds_examples[5], 2) == ZINF_OK, "%s", zinf_last_error());
    CHECK(c.train_batch_size == 16 && c.gradient_accumulation_steps == 2, "micro 4 x accum 2 x world 2 = %lld",
          (long long)c.train_batch_size);
    CHECK(c.optimizer.type == ZINF_OPT_ADAM && c.optimizer.adam_w_mode, "DeepSpeed's Adam decays decoupled by default");
    CHECK(c.scheduler.type == ZINF_SCHED_WARMUP_DECAY_LR && c.scheduler.warmup_type == ZINF_WARMUP_LINEAR &&
              c.scheduler.total_num_steps == 1000,
          "scheduler");
    CHECK(c.zero.reduce_bucket_size == 500000000 && c.zero.offload_param.buffer_size == 100000000, "5e8 / 1e8");
    CHECK(c.fp16.initial_scale_power == 12 && c.fp16.loss_scale_window == 500, "fp16");
    CHECK(c.activation_checkpointing.enabled && c.aio.intra_op_parallelism == 1, "sections");
    CHECK(!c.zero.offload_optimizer.pipeline_read, "explicit false kept");
    zinf_config_free(&c);

    // DeepSpeed's defaults (and zinf's own where it has no key).
    CHECK(zinf_config_parse(&c, "{\"train_batch_size\": 8}", "d", &(zinf_config_options){.world_size = 1}) == ZINF_OK,
          "%s", zinf_last_error());
    CHECK(c.train_micro_batch_size_per_gpu == 8 && c.gradient_accumulation_steps == 1, "batch alone");
    CHECK(c.zero.stage == 0 && !c.zero.overlap_comm && c.zero.contiguous_gradients && c.zero.reduce_scatter, "zero");
    CHECK(c.zero.reduce_bucket_size == 500000000 && c.zero.allgather_bucket_size == 500000000, "buckets");
    CHECK(c.zero.prefetch_bucket_size == 50000000 && c.zero.param_persistence_threshold == 100000, "stage3 prefetch");
    CHECK(c.zero.max_live_parameters == 1000000000 && c.zero.max_reuse_distance == 1000000000, "stage3 live");
    CHECK(c.zero.sub_group_size == 1000000000, "sub_group_size");
    CHECK(c.zero.offload_optimizer.buffer_count == 4 && c.zero.offload_param.buffer_count == 5, "buffer counts");
    CHECK(c.zero.offload_param.max_in_cpu == 1000000000, "max_in_cpu");
    CHECK(c.fp16.initial_scale_power == 16 && c.fp16.loss_scale_window == 1000 && c.fp16.hysteresis == 2 &&
              c.fp16.min_loss_scale == 1.0,
          "fp16 defaults");
    CHECK(c.optimizer.type == ZINF_OPT_ADAMW && c.optimizer.lr == 1e-3 && c.optimizer.eps == 1e-8 &&
              c.optimizer.betas[1] == 0.999 && c.optimizer.bias_correction,
          "optimizer defaults");
    CHECK(c.aio.block_size == 1048576 && c.aio.queue_depth == 8 && c.aio.intra_op_parallelism == 1, "aio");
    CHECK(c.steps_per_print == 10 && c.steps == -1 && c.scheduler.type == ZINF_SCHED_NONE, "run");
    CHECK(!c.model.present && !c.data.present && !c.activation_checkpointing.enabled, "optional sections absent");
    zinf_config_free(&c);

    // Aliases, case-insensitive names, suffixed sizes, integral reals, --set.
    const char *sets[] = {"aio.intra_op_parallelism=4", "zero_optimization.prefetch_bucket_size=123",
                          "optimizer.params.betas=[0.5,0.6]", "steps=7", "device.memory_limit=2G"};
    zinf_config_options opts = {.sets = sets, .nsets = 5, .world_size = 1};
    CHECK(zinf_config_parse(&c,
                            "{\"train_micro_batch_size_per_gpu\": 2, \"aio\": {\"thread_count\": 2, \"block_size\": "
                            "\"64K\"}, \"zero_optimization\": {\"stage3_prefetch_bucket_size\": 1e6}, "
                            "\"bfloat16\": {\"enabled\": true}, \"optimizer\": {\"type\": \"adamw\"}}",
                            "a", &opts) == ZINF_OK,
          "%s", zinf_last_error());
    CHECK(c.aio.intra_op_parallelism == 4, "--set replaced the alias spelling: %lld",
          (long long)c.aio.intra_op_parallelism);
    CHECK(c.zero.prefetch_bucket_size == 123, "--set through the short alias");
    CHECK(c.aio.block_size == 65536 && c.bf16 && c.optimizer.type == ZINF_OPT_ADAMW, "suffix, bfloat16, adamw");
    CHECK(c.optimizer.betas[0] == 0.5 && c.steps == 7 && c.device.memory_limit == 2147483648LL, "sets");
    zinf_config_free(&c);

    // Presets fill the model; explicit keys override; text-bytes defaults to 256 tokens.
    char data[96], text[512];
    snprintf(data, sizeof data, "%s/tiny.txt", dir);
    FILE *f = fopen(data, "w");
    fputs("hello zinf", f);
    fclose(f);
    snprintf(
        text, sizeof text,
        "{\"train_batch_size\": 4, \"model\": {\"n_layer\": 2, \"n_head\": 4, \"n_embd\": 64, \"block_size\": 128},"
        " \"data\": {\"path\": \"%s\", \"format\": \"text-bytes\", \"sampling\": \"sequential\"}}",
        data);
    CHECK(zinf_config_parse(&c, text, "m", &(zinf_config_options){.world_size = 1}) == ZINF_OK, "%s",
          zinf_last_error());
    CHECK(c.model.vocab_size == 256 && c.data.seq_len == 128 && c.data.sampling == ZINF_SAMPLING_SEQUENTIAL, "model");
    free(roundtrip(text, 1));
    zinf_config_free(&c);
    CHECK(zinf_config_parse(&c, "{\"train_batch_size\": 4, \"model\": {\"preset\": \"gpt2-xl\", \"n_layer\": 2}}", "p",
                            &(zinf_config_options){.world_size = 1}) == ZINF_OK,
          "%s", zinf_last_error());
    CHECK(c.model.n_layer == 2 && c.model.n_head == 25 && c.model.n_embd == 1600 && c.model.vocab_size == 50257 &&
              c.model.block_size == 1024,
          "gpt2-xl preset with n_layer override");
    zinf_config_free(&c);

    // Decimals print as written, not as their binary expansion, and still round-trip.
    char *j =
        roundtrip("{\"train_batch_size\": 1, \"optimizer\": {\"params\": {\"lr\": 3e-4, \"betas\": [0.9, 0.95]}}}", 1);
    CHECK(j && strstr(j, "\"lr\": 0.0003,") && strstr(j, "0.95"), "decimal printing:\n%s", j ? j : "");
    free(j);

    // A path given while its tier is not nvme is said out loud, not silently dropped.
    char warning[256] = "";
    zinf_log_set_callback(logged, warning);
    snprintf(text, sizeof text,
             "{\"train_batch_size\": 1, \"zero_optimization\": {\"stage\": 2, \"offload_optimizer\": {\"device\": "
             "\"cpu\", \"nvme_path\": \"%s\"}}}",
             dir);
    CHECK(zinf_config_parse(&c, text, "w", NULL) == ZINF_OK, "%s", zinf_last_error());
    CHECK_CONTAINS(warning, "zero_optimization.offload_optimizer.nvme_path is unused");
    zinf_config_free(&c);
    zinf_log_set_callback(NULL, NULL);

    // round_robin_gradients: true is said to change nothing, in one log line; false is
    // DeepSpeed's default and says nothing.
    char info[1024] = "";
    zinf_log_level level = zinf_log_get_level();
    zinf_log_set_level(ZINF_LOG_LEVEL_INFO);
    zinf_log_set_callback(logged_info, info);
    CHECK(parse(&c, ds_examples[6], 1) == ZINF_OK, "%s", zinf_last_error());
    CHECK(c.zero.round_robin_gradients && c.zero.stage == 2 && c.fp16.loss_scale_window == 100, "DeepSpeed-Chat");
    zinf_config_free(&c);
    const char *rr = strstr(info, "zero_optimization.round_robin_gradients has no effect in zinf");
    CHECK(rr && !strstr(strchr(rr, '\n'), "round_robin_gradients"), "one log line for round_robin_gradients:\n%s",
          info);
    info[0] = '\0';
    CHECK(parse(&c, "{\"train_batch_size\": 1, \"zero_optimization\": {\"round_robin_gradients\": false}}", 1) ==
              ZINF_OK,
          "%s", zinf_last_error());
    CHECK(!c.zero.round_robin_gradients && !strstr(info, "round_robin"), "false logged:\n%s", info);
    zinf_config_free(&c);

    // wall_clock_breakdown likewise (Megatron-DeepSpeed's ZeRO-3 example sets it true).
    info[0] = '\0';
    CHECK(parse(&c, "{\"train_batch_size\": 64, \"wall_clock_breakdown\": true}", 8) == ZINF_OK, "%s",
          zinf_last_error());
    CHECK(c.wall_clock_breakdown && c.train_batch_size == 64 && c.train_micro_batch_size_per_gpu == 8, "wall clock");
    zinf_config_free(&c);
    CHECK_CONTAINS(info, "wall_clock_breakdown has no effect in zinf");
    info[0] = '\0';
    CHECK(parse(&c, "{\"train_batch_size\": 1, \"wall_clock_breakdown\": false}", 1) == ZINF_OK, "%s",
          zinf_last_error());
    CHECK(!c.wall_clock_breakdown && !strstr(info, "wall_clock"), "false logged:\n%s", info);
    zinf_config_free(&c);
    free(roundtrip("{\"train_batch_size\": 1, \"wall_clock_breakdown\": true}", 1));

    // DeepSpeed's deprecated stage3_gather_fp16_weights_on_model_save (transformers'
    // tests/deepspeed configs) is the current key under its old name, said so once; the
    // normalized config spells it the current way, and --set of the current name
    // replaces the old spelling instead of giving the key twice.
    const char *fp16_name = "{\"train_batch_size\": 2, \"bfloat16\": {\"enabled\": true}, \"zero_optimization\": "
                            "{\"stage\": 3, \"stage3_gather_fp16_weights_on_model_save\": true}}";
    info[0] = '\0';
    CHECK(parse(&c, fp16_name, 2) == ZINF_OK, "%s", zinf_last_error());
    CHECK(c.zero.gather_16bit_weights_on_model_save && c.bf16, "the deprecated name read as the current key");
    zinf_config_free(&c);
    CHECK_CONTAINS(info, "zero_optimization.stage3_gather_fp16_weights_on_model_save is DeepSpeed's deprecated name "
                         "of stage3_gather_16bit_weights_on_model_save");
    j = roundtrip(fp16_name, 2);
    CHECK(j && strstr(j, "\"stage3_gather_16bit_weights_on_model_save\": true") && !strstr(j, "fp16_weights"),
          "normalized spelling:\n%s", j ? j : "");
    free(j);
    const char *save_off[] = {"zero_optimization.stage3_gather_16bit_weights_on_model_save=false"};
    CHECK(zinf_config_parse(&c, fp16_name, "s",
                            &(zinf_config_options){.sets = save_off, .nsets = 1, .world_size = 2}) == ZINF_OK,
          "%s", zinf_last_error());
    CHECK(!c.zero.gather_16bit_weights_on_model_save, "--set through the deprecated spelling");
    zinf_config_free(&c);
    zinf_log_set_callback(NULL, NULL);
    zinf_log_set_level(level);

    // sub_group_size 0 (axolotl's ZeRO-3 configs): DeepSpeed's minimum, every module a
    // sub-group of its own.
    CHECK(parse(&c, "{\"train_batch_size\": 1, \"zero_optimization\": {\"stage\": 3, \"sub_group_size\": 0}}", 1) ==
              ZINF_OK,
          "%s", zinf_last_error());
    CHECK(c.zero.sub_group_size == 0, "sub_group_size 0");
    zinf_config_free(&c);
    free(roundtrip("{\"train_batch_size\": 1, \"zero_optimization\": {\"sub_group_size\": 0}}", 1));

    // A vocabulary past uint16 with uint16 data is likely the wrong format: a warning.
    static const char *const fmts[] = {"tokens-u16", "tokens-u32"};
    for (int i = 0; i < 2; i++) {
        warning[0] = '\0';
        zinf_log_set_callback(logged, warning);
        snprintf(text, sizeof text,
                 "{\"train_batch_size\": 1, \"model\": {\"n_layer\": 1, \"n_head\": 1, \"n_embd\": 8, "
                 "\"vocab_size\": 128256}, \"data\": {\"path\": \"%s\", \"format\": \"%s\"}}",
                 data, fmts[i]);
        CHECK(zinf_config_parse(&c, text, "v", NULL) == ZINF_OK, "%s", zinf_last_error());
        zinf_config_free(&c);
        zinf_log_set_callback(NULL, NULL);
        if (i == 0)
            CHECK_CONTAINS(warning, "model.vocab_size 128256 is more than uint16 ids reach");
        else
            CHECK(!warning[0], "tokens-u32 warned: %s", warning);
    }

    unlink(data);
    rmdir(dir);
    return check_exit("test_config_roundtrip");
}
