// Every class of bad config input gives the right status and one message that names
// the key path (and the value or rule): malformed JSON, unknown keys with the nearest
// known key, wrong types, out of range, conflicts, paths, unsupported DeepSpeed keys.
// without-cuda: device.backend "cuda" is refused at parse time
// timeout: 10 san=10 cuda-emu=10 san-cuda-emu=10
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "config.h"
#include "zinf.h"

static char dir[64], file[96];

// "@DIR" and "@FILE" in the case text stand for a temporary directory and file.
static char *expand(const char *s) {
    size_t cap = strlen(s) * 2 + 256, n = 0;
    char *out = malloc(cap);
    while (*s) {
        const char *rep = strncmp(s, "@DIR", 4) == 0 ? dir : strncmp(s, "@FILE", 5) == 0 ? file : NULL;
        if (rep) {
            n += (size_t)sprintf(out + n, "%s", rep);
            s += rep == dir ? 4 : 5;
        } else {
            out[n++] = *s++;
        }
    }
    out[n] = '\0';
    return out;
}

typedef struct {
    const char *json;
    const char *set; // one --set override, or NULL
    int world;
    zinf_status st;
    const char *needles[3]; // each must appear in the message
} bad_case;

#define TB "\"train_batch_size\": 8, "

static const bad_case cases[] = {
    // ---- malformed JSON: file:line:column ----
    {"{\n  \"train_batch_size\": 8\n  \"steps\": 2\n}", NULL, 1, ZINF_ERR_INVAL, {"t.json:3:", "malformed JSON"}},
    // DeepSpeed's own documentation example, missing its comma between the sections
    {"{ \"zero_optimization\": { \"stage\": 3, \"offload_optimizer\": { \"device\": \"cpu\" } \"offload_param\": "
     "{ \"device\": \"cpu\" } } }",
     NULL,
     1,
     ZINF_ERR_INVAL,
     {"t.json:1:", "malformed JSON", "offload_param"}},
    {"{" TB "\"zero_optimization\": {\"stage\": 3,}}", NULL, 1, ZINF_ERR_INVAL, {"malformed JSON"}},
    {"{" TB "\"steps\": 1, \"steps\": 2}", NULL, 1, ZINF_ERR_INVAL, {"duplicate object key", "steps"}},
    {"[1, 2]", NULL, 1, ZINF_ERR_INVAL, {"must be a JSON object", "[1,2]"}},
    {"", NULL, 1, ZINF_ERR_INVAL, {"malformed JSON"}},
    // ---- unknown keys ----
    {"{" TB "\"zero_optimization\": {\"stage\": 3, \"offload_optimizer\": {\"devcie\": \"cpu\"}}}",
     NULL,
     1,
     ZINF_ERR_INVAL,
     {"zero_optimization.offload_optimizer.devcie: unknown key; did you mean \"device\"?"}},
    {"{" TB "\"zero_optimization\": {\"stage3_prefech_bucket_size\": 1}}",
     NULL,
     1,
     ZINF_ERR_INVAL,
     {"zero_optimization.stage3_prefech_bucket_size", "did you mean \"stage3_prefetch_bucket_size\""}},
    {"{" TB "\"stage\": 3}",
     NULL,
     1,
     ZINF_ERR_INVAL,
     {"stage: unknown key here; did you mean \"zero_optimization.stage\"?"}},
    {"{" TB "\"aio\": {\"turbo\": true}}",
     NULL,
     1,
     ZINF_ERR_INVAL,
     {"aio.turbo: unknown key", "block_size, queue_depth, intra_op_parallelism"}},
    {"{" TB "\"bfloat16\": {\"enabld\": true}}",
     NULL,
     1,
     ZINF_ERR_INVAL,
     {"bfloat16.enabld", "did you mean \"enabled\""}},
    // ---- wrong types ----
    {"{" TB "\"zero_optimization\": {\"stage\": \"3\"}}",
     NULL,
     1,
     ZINF_ERR_INVAL,
     {"zero_optimization.stage: expected an integer, got \"3\""}},
    {"{" TB "\"fp16\": {\"enabled\": \"yes\"}}", NULL, 1, ZINF_ERR_INVAL, {"fp16.enabled: expected true or false"}},
    {"{" TB "\"zero_optimization\": 3}", NULL, 1, ZINF_ERR_INVAL, {"zero_optimization: expected an object"}},
    {"{" TB "\"optimizer\": {\"params\": {\"betas\": 0.9}}}",
     NULL,
     1,
     ZINF_ERR_INVAL,
     {"optimizer.params.betas: expected two numbers"}},
    {"{" TB "\"optimizer\": {\"params\": {\"lr\": \"auto\"}}}",
     NULL,
     1,
     ZINF_ERR_INVAL,
     {"optimizer.params.lr: expected a number, got \"auto\"", "Hugging Face"}},
    {"{" TB "\"optimizer\": {\"type\": \"Lamb\"}}",
     NULL,
     1,
     ZINF_ERR_INVAL,
     {"optimizer.type: expected one of \"Adam\", \"AdamW\", got \"Lamb\""}},
    {"{" TB "\"zero_optimization\": {\"stage\": 3, \"offload_param\": {\"device\": \"nvme\", \"nvme_path\": [\"\"]}}}",
     NULL,
     1,
     ZINF_ERR_INVAL,
     {"zero_optimization.offload_param.nvme_path: expected a directory"}},
    {"{" TB "\"aio\": {\"block_size\": \"1X\"}}",
     NULL,
     1,
     ZINF_ERR_INVAL,
     {"aio.block_size: expected a byte count", "\"1X\""}},
    // ---- out of range ----
    {"{" TB "\"zero_optimization\": {\"stage\": 4}}",
     NULL,
     1,
     ZINF_ERR_INVAL,
     {"zero_optimization.stage: expected an integer from 0 to 3, got 4"}},
    {"{" TB "\"zero_optimization\": {\"stage\": 2.5}}", NULL, 1, ZINF_ERR_INVAL, {"zero_optimization.stage", "2.5"}},
    {"{" TB "\"optimizer\": {\"params\": {\"lr\": -0.1}}}",
     NULL,
     1,
     ZINF_ERR_INVAL,
     {"optimizer.params.lr: expected a number at least 0, got -0.1"}},
    {"{" TB "\"optimizer\": {\"params\": {\"betas\": [0.9, 1.0]}}}",
     NULL,
     1,
     ZINF_ERR_INVAL,
     {"optimizer.params.betas", "(excluded)", "[0.9,1.0]"}},
    {"{" TB "\"aio\": {\"queue_depth\": 0}}",
     NULL,
     1,
     ZINF_ERR_INVAL,
     {"aio.queue_depth: expected an integer from 1 to 4096"}},
    {"{" TB "\"aio\": {\"block_size\": 5000}}",
     NULL,
     1,
     ZINF_ERR_INVAL,
     {"aio.block_size: 5000 is not a multiple of 4096"}},
    {"{" TB "\"fp16\": {\"min_loss_scale\": 0}}", NULL, 1, ZINF_ERR_INVAL, {"fp16.min_loss_scale", "greater than 0"}},
    {"{\"train_batch_size\": 0}", NULL, 1, ZINF_ERR_INVAL, {"train_batch_size: expected an integer at least 1, got 0"}},
    {"{" TB "\"device\": {\"memory_limit\": \"512K\"}}",
     NULL,
     1,
     ZINF_ERR_INVAL,
     {"device.memory_limit: expected a byte count at least 1048576, got \"512K\""}},
    // ---- conflicts ----
    {"{" TB "\"fp16\": {\"enabled\": true}, \"bf16\": {\"enabled\": true}}",
     NULL,
     1,
     ZINF_ERR_INVAL,
     {"fp16.enabled and bf16.enabled are both true"}},
    {"{" TB "\"zero_optimization\": {\"stage\": 2, \"offload_param\": {\"device\": \"cpu\"}}}",
     NULL,
     1,
     ZINF_ERR_INVAL,
     {"zero_optimization.offload_param.device: \"cpu\" needs zero_optimization.stage 3 (stage is 2)"}},
    {"{" TB "\"zero_optimization\": {\"offload_optimizer\": {\"device\": \"cpu\"}}}",
     NULL,
     1,
     ZINF_ERR_INVAL,
     {"zero_optimization.offload_optimizer.device: \"cpu\" needs zero_optimization.stage 1, 2 or 3 (stage is 0)"}},
    {"{" TB "\"zero_optimization\": {\"stage\": 3, \"offload_optimizer\": {\"device\": \"nvme\"}}}",
     NULL,
     1,
     ZINF_ERR_INVAL,
     {"zero_optimization.offload_optimizer.nvme_path: missing"}},
    {"{" TB "\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"adam_w_mode\": false}}}",
     NULL,
     1,
     ZINF_ERR_INVAL,
     {"optimizer.params.adam_w_mode", "AdamW"}},
    {"{" TB "\"aio\": {\"thread_count\": 2, \"intra_op_parallelism\": 3}}",
     NULL,
     1,
     ZINF_ERR_INVAL,
     {"aio.intra_op_parallelism: given twice", "thread_count"}},
    {"{" TB "\"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"total_num_steps\": 5}}}",
     NULL,
     1,
     ZINF_ERR_INVAL,
     {"scheduler.params.total_num_steps: not a parameter of WarmupLR"}},
    {"{" TB "\"scheduler\": {\"type\": \"WarmupDecayLR\"}}",
     NULL,
     1,
     ZINF_ERR_INVAL,
     {"scheduler.params.total_num_steps: missing; WarmupDecayLR needs it"}},
    {"{" TB "\"scheduler\": {\"type\": \"WarmupCosineLR\", \"params\": {\"total_num_steps\": 10, \"warmup_num_steps\": "
     "20}}}",
     NULL,
     1,
     ZINF_ERR_INVAL,
     {"scheduler.params.warmup_num_steps: 20 is more than total_num_steps (10)"}},
    {"{" TB "\"scheduler\": {\"params\": {}}}", NULL, 1, ZINF_ERR_INVAL, {"scheduler.type: missing"}},
    {"{" TB "\"checkpoint\": {\"load\": \"latest\"}}",
     NULL,
     1,
     ZINF_ERR_INVAL,
     {"checkpoint.load: \"latest\" needs checkpoint.dir"}},
    {"{" TB "\"checkpoint\": {\"interval\": 100}}", NULL, 1, ZINF_ERR_INVAL, {"checkpoint.interval", "checkpoint.dir"}},
    // ---- paths ----
    // A missing nvme_path in an existing directory is made when the store opens; one
    // whose parent is missing too is refused.
    {"{" TB "\"zero_optimization\": {\"stage\": 3, \"offload_param\": {\"device\": \"nvme\", \"nvme_path\": "
     "\"@DIR/missing/deeper\"}}}",
     NULL,
     1,
     ZINF_ERR_INVAL,
     {"zero_optimization.offload_param.nvme_path", "/missing/deeper\"", "neither it nor its parent"}},
    {"{" TB "\"zero_optimization\": {\"stage\": 3, \"offload_param\": {\"device\": \"nvme\", \"nvme_path\": "
     "[\"@DIR\", \"@FILE\"]}}}",
     NULL,
     1,
     ZINF_ERR_INVAL,
     {"zero_optimization.offload_param.nvme_path", "is not a directory"}},
    // /proc takes no new files, even from root (access(W_OK) would say yes to root)
    {"{" TB "\"zero_optimization\": {\"stage\": 1, \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": "
     "\"/proc\"}}}",
     NULL,
     1,
     ZINF_ERR_INVAL,
     {"zero_optimization.offload_optimizer.nvme_path", "\"/proc\" is not writable"}},
    {"{" TB "\"data\": {\"path\": \"@DIR/none.bin\"}}", NULL, 1, ZINF_ERR_INVAL, {"data.path", "none.bin"}},
    {"{" TB "\"data\": {\"path\": \"@DIR\"}}", NULL, 1, ZINF_ERR_INVAL, {"data.path", "is not a regular file"}},
    // a Megatron dataset is a .bin and the .idx beside it (@FILE is data.bin)
    {"{" TB "\"data\": {\"path\": \"@FILE\", \"format\": \"megatron\"}}",
     NULL,
     1,
     ZINF_ERR_INVAL,
     {"data.path", "@DIR/data.idx"}},
    {"{" TB "\"data\": {\"path\": \"@FILE\", \"format\": \"tokens-u8\"}}",
     NULL,
     1,
     ZINF_ERR_INVAL,
     {"data.format: expected one of", "\"tokens-u32\", \"megatron\""}},
    {"{" TB "\"checkpoint\": {\"dir\": \"@FILE\"}}", NULL, 1, ZINF_ERR_INVAL, {"checkpoint.dir", "is not a directory"}},
    {"{" TB "\"model\": {\"preset\": \"gpt2\", \"init_from\": \"@DIR/w.safetensors\"}}",
     NULL,
     1,
     ZINF_ERR_INVAL,
     {"model.init_from", "w.safetensors"}},
    // ---- model and data ----
    {"{" TB "\"model\": {\"n_layer\": 2, \"n_head\": 2}}",
     NULL,
     1,
     ZINF_ERR_INVAL,
     {"model.n_embd: missing", "preset"}},
    {"{" TB "\"model\": {\"n_layer\": 2, \"n_head\": 3, \"n_embd\": 64}}",
     NULL,
     1,
     ZINF_ERR_INVAL,
     {"model.n_embd: 64 is not a multiple of model.n_head (3)"}},
    // the Llama family
    {"{" TB "\"model\": {\"preset\": \"gpt2\", \"n_kv_head\": 4}}",
     NULL,
     1,
     ZINF_ERR_INVAL,
     {"model.n_kv_head: a key of the Llama family", "model.arch"}},
    {"{" TB "\"model\": {\"arch\": \"llama\", \"n_layer\": 2, \"n_head\": 4, \"n_embd\": 64}}",
     NULL,
     1,
     ZINF_ERR_INVAL,
     {"model.intermediate_size: missing"}},
    {"{" TB "\"model\": {\"preset\": \"llama-3.2-1b\", \"n_kv_head\": 5}}",
     NULL,
     1,
     ZINF_ERR_INVAL,
     {"model.n_kv_head: 5 does not divide model.n_head (32)"}},
    {"{" TB "\"model\": {\"preset\": \"smollm2-135m\", \"head_dim\": 63}}",
     NULL,
     1,
     ZINF_ERR_INVAL,
     {"model.head_dim: 63 is odd"}},
    {"{" TB "\"model\": {\"preset\": \"llama-3.2-1b\", \"sliding_window\": 64}}",
     NULL,
     1,
     ZINF_ERR_INVAL,
     {"model.sliding_window", "mistral"}},
    {"{" TB "\"model\": {\"preset\": \"llama-3.1-8b\", \"rope_scaling\": {\"rope_type\": \"yarn\"}}}",
     NULL,
     1,
     ZINF_ERR_INVAL,
     {"model.rope_scaling.rope_type", "\"llama3\""}},
    {"{" TB "\"model\": {\"preset\": \"gpt3\"}}",
     NULL,
     1,
     ZINF_ERR_INVAL,
     {"model.preset: expected one of", "\"gpt2-xl\""}},
    {"{" TB
     "\"model\": {\"preset\": \"gpt2\", \"block_size\": 128}, \"data\": {\"path\": \"@FILE\", \"seq_len\": 256}}",
     NULL,
     1,
     ZINF_ERR_INVAL,
     {"data.seq_len: 256 is longer than model.block_size (128)"}},
    {"{" TB "\"model\": {\"preset\": \"gpt2\", \"vocab_size\": 100}, \"data\": {\"path\": \"@FILE\", \"format\": "
     "\"text-bytes\"}}",
     NULL,
     1,
     ZINF_ERR_INVAL,
     {"model.vocab_size: 100 is too small", "text-bytes"}},
    // ---- DeepSpeed features zinf refuses instead of ignoring ----
    {"{" TB "\"zero_optimization\": {\"stage\": 3, \"zero_quantized_nontrainable_weights\": true}}",
     NULL,
     1,
     ZINF_ERR_UNSUPPORTED,
     {"zero_optimization.zero_quantized_nontrainable_weights: true is not supported by zinf", "no frozen ones"}},
    {"{" TB "\"zero_optimization\": {\"stage\": 3, \"zero_quantized_gradients\": true, \"reduce_scatter\": false}}",
     NULL,
     2,
     ZINF_ERR_INVAL,
     {"zero_optimization.zero_quantized_gradients: true needs zero_optimization.reduce_scatter true"}},
    {"{" TB "\"zero_optimization\": {\"stage\": 3, \"zero_hpz_partition_size\": 3}}",
     NULL,
     4,
     ZINF_ERR_INVAL,
     {"zero_optimization.zero_hpz_partition_size: 3 does not divide the 4 ranks"}},
    {"{" TB "\"zero_optimization\": {\"stage\": 2, \"zero_hpz_partition_size\": 2}}",
     NULL,
     2,
     ZINF_ERR_INVAL,
     {"zero_optimization.zero_hpz_partition_size: 2 needs zero_optimization.stage 3 (stage is 2)"}},
    {"{" TB "\"zero_optimization\": {\"stage\": 2, \"zero_quantized_weights\": true}}",
     NULL,
     2,
     ZINF_ERR_INVAL,
     {"zero_optimization.zero_quantized_weights: true needs zero_optimization.stage 3 (stage is 2)"}},
    {"{" TB "\"zero_optimization\": {\"stage\": 3, \"mics_shard_size\": 3}}",
     NULL,
     4,
     ZINF_ERR_INVAL,
     {"zero_optimization.mics_shard_size: 3 does not divide the 4 ranks"}},
    {"{" TB "\"zero_optimization\": {\"stage\": 3, \"mics_shard_size\": 2, \"zero_hpz_partition_size\": 2}}",
     NULL,
     4,
     ZINF_ERR_INVAL,
     {"zero_optimization.mics_shard_size: MiCS does not combine with zero_optimization.zero_hpz_partition_size"}},
    // Partial offload: something offloaded, no MiCS.
    {"{" TB "\"zero_optimization\": {\"stage\": 3, \"offload_optimizer\": {\"device\": \"cpu\", \"ratio\": 0}}}",
     NULL,
     1,
     ZINF_ERR_INVAL,
     {"zero_optimization.offload_optimizer.ratio: 0 offloads nothing", "device to \"none\""}},
    {"{" TB "\"zero_optimization\": {\"stage\": 3, \"offload_optimizer\": {\"device\": \"cpu\", \"ratio\": 1.5}}}",
     NULL,
     1,
     ZINF_ERR_INVAL,
     {"zero_optimization.offload_optimizer.ratio"}},
    // DeepSpeed's deprecated name is the same key: with the current name too, it is given
    // twice (DeepSpeed refuses the pair as well)
    {"{" TB "\"zero_optimization\": {\"stage3_gather_16bit_weights_on_model_save\": true, "
     "\"stage3_gather_fp16_weights_on_model_save\": true}}",
     NULL,
     1,
     ZINF_ERR_INVAL,
     {"zero_optimization.stage3_gather_fp16_weights_on_model_save: given twice",
      "\"stage3_gather_16bit_weights_on_model_save\" and \"stage3_gather_fp16_weights_on_model_save\""}},
    {"{" TB "\"zero_optimization\": {\"sub_group_size\": -1}}",
     NULL,
     1,
     ZINF_ERR_INVAL,
     {"zero_optimization.sub_group_size: expected an integer at least 0, got -1"}},
    {"{" TB "\"wall_clock_breakdown\": \"yes\"}",
     NULL,
     1,
     ZINF_ERR_INVAL,
     {"wall_clock_breakdown: expected true or false"}},
    {"{" TB "\"zero_optimization\": {\"cpu_offload\": true}}",
     NULL,
     1,
     ZINF_ERR_UNSUPPORTED,
     {"zero_optimization.cpu_offload", "offload_optimizer.device"}},
    {"{" TB "\"wandb\": {\"enabled\": true, \"project\": \"x\"}}",
     NULL,
     1,
     ZINF_ERR_UNSUPPORTED,
     {"wandb:", "enable tensorboard or csv_monitor"}},
    {"{" TB "\"tensorboard\": {\"enabled\": true, \"job\": \"x\"}}", NULL, 1, ZINF_ERR_INVAL, {"tensorboard.job"}},
    {"{" TB "\"activation_checkpointing\": {\"partition_activations\": true}}",
     NULL,
     1,
     ZINF_ERR_UNSUPPORTED,
     {"activation_checkpointing.partition_activations", "model parallelism"}},
    {"{" TB "\"aio\": {\"use_gds\": true}}", NULL, 1, ZINF_ERR_UNSUPPORTED, {"aio.use_gds"}},
    {"{" TB "\"hybrid_engine\": {\"enabled\": true, \"max_out_tokens\": 512}}",
     NULL,
     1,
     ZINF_ERR_UNSUPPORTED,
     {"hybrid_engine: {\"enabled\":true,", "zinf has no hybrid (RLHF generation) engine"}},
    {"{" TB "\"zero_optimization\": {\"round_robin_gradients\": 1}}",
     NULL,
     1,
     ZINF_ERR_INVAL,
     {"zero_optimization.round_robin_gradients: expected true or false, got 1"}},
    // ---- batch sizes (DeepSpeed's triple) ----
    {"{\"steps\": 2}",
     NULL,
     1,
     ZINF_ERR_INVAL,
     {"train_batch_size or train_micro_batch_size_per_gpu: give at least one"}},
    {"{\"train_batch_size\": 8, \"train_micro_batch_size_per_gpu\": 3}",
     NULL,
     1,
     ZINF_ERR_INVAL,
     {"train_batch_size: 8 is not a multiple of train_micro_batch_size_per_gpu (3) x world size (1)"}},
    {"{\"train_batch_size\": 8, \"train_micro_batch_size_per_gpu\": 2, \"gradient_accumulation_steps\": 2}",
     NULL,
     1,
     ZINF_ERR_INVAL,
     {"train_batch_size: 8 is not", "= 4"}},
    {"{\"train_batch_size\": 8}", NULL, 3, ZINF_ERR_INVAL, {"train_batch_size: 8", "world size (3)"}},
    // 2^53 x 65536 ranks is 2^69, which wrapped to 0 in int64: tb % 0 killed the process
    {"{\"train_batch_size\": 8, \"train_micro_batch_size_per_gpu\": 9007199254740992}",
     NULL,
     65536,
     ZINF_ERR_INVAL,
     {"train_batch_size: 8 is not a multiple of train_micro_batch_size_per_gpu (9007199254740992) x world size "
      "(65536)"}},
    {"{\"train_batch_size\": 8, \"gradient_accumulation_steps\": 9007199254740992}",
     NULL,
     65536,
     ZINF_ERR_INVAL,
     {"train_batch_size: 8 is not a multiple of gradient_accumulation_steps (9007199254740992) x world size (65536)"}},
    // 4 x 2^36 x 65536 ranks fits in int64 but is past 2^53: the normalized config held a
    // train_batch_size it could not read back
    {"{\"train_micro_batch_size_per_gpu\": 4, \"gradient_accumulation_steps\": 68719476736}",
     NULL,
     65536,
     ZINF_ERR_INVAL,
     {"train_micro_batch_size_per_gpu (4) x gradient_accumulation_steps (68719476736) x world size (65536) makes "
      "train_batch_size past 2^53"}},
    {"{\"train_micro_batch_size_per_gpu\": 9007199254740992}",
     NULL,
     2,
     ZINF_ERR_INVAL,
     {"train_micro_batch_size_per_gpu (9007199254740992) x gradient_accumulation_steps (1) x world size (2)"}},
    // ---- --set ----
    {"{" TB "\"steps\": 2}", "steps.max=3", 1, ZINF_ERR_INVAL, {"--set \"steps.max=3\"", "\"steps\" is a value"}},
    {"{" TB "\"steps\": 2}", "=3", 1, ZINF_ERR_INVAL, {"--set \"=3\": expected key.path=value"}},
    {"{" TB "\"steps\": 2}", "steps", 1, ZINF_ERR_INVAL, {"--set \"steps\": expected key.path=value"}},
    {"{" TB "\"steps\": 2}", "zero_optimization..stage=1", 1, ZINF_ERR_INVAL, {"empty key name"}},
    {"{" TB "\"steps\": 2}", "zero_optimization.stage=9", 1, ZINF_ERR_INVAL, {"zero_optimization.stage", "got 9"}},
    {"{" TB "\"steps\": 2}",
     "zero_optimization.offload_optimizer.devcie=cpu",
     1,
     ZINF_ERR_INVAL,
     {"zero_optimization.offload_optimizer.devcie: unknown key; did you mean \"device\"?"}},
#ifndef ZINF_HAVE_CUDA
    {"{" TB "\"device\": {\"backend\": \"cuda\"}}",
     NULL,
     1,
     ZINF_ERR_UNSUPPORTED,
     {"device.backend", "no CUDA backend"}},
#endif
};

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/zinf-cfg-XXXXXX");
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    snprintf(file, sizeof file, "%s/data.bin", dir);
    FILE *f = fopen(file, "wb");
    fputs("hello", f);
    fclose(f);

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const bad_case *c = &cases[i];
        char *json = expand(c->json);
        zinf_config cfg;
        zinf_config_options opts = {.sets = &c->set, .nsets = c->set ? 1 : 0, .world_size = c->world};
        zinf_status st = zinf_config_parse(&cfg, json, "t.json", &opts);
        CHECK(st == c->st, "case %zu (%s): status %s, want %s; message: %s", i, json, zinf_status_str(st),
              zinf_status_str(c->st), zinf_last_error());
        for (int n = 0; n < 3 && c->needles[n]; n++) {
            char *needle = expand(c->needles[n]);
            CHECK(strstr(zinf_last_error(), needle) != NULL, "case %zu (%s): message \"%s\" lacks \"%s\"", i, json,
                  zinf_last_error(), needle);
            free(needle);
        }
        // A failed parse leaves nothing to free (the struct is zeroed).
        zinf_config zero;
        memset(&zero, 0, sizeof zero);
        CHECK(memcmp(&cfg, &zero, sizeof cfg) == 0, "case %zu: config not cleared after failure", i);
        free(json);
    }

    // A config file that cannot be read names the file.
    zinf_config cfg;
    char missing[128];
    snprintf(missing, sizeof missing, "%s/nope.json", dir);
    CHECK(zinf_config_load(&cfg, missing, NULL) != ZINF_OK, "missing file accepted");
    CHECK_CONTAINS(zinf_last_error(), "nope.json");
    CHECK(zinf_config_load(&cfg, file, NULL) == ZINF_ERR_INVAL, "a non-JSON file accepted");
    CHECK_CONTAINS(zinf_last_error(), "data.bin:1:");
    CHECK(zinf_config_load(&cfg, dir, NULL) != ZINF_OK, "a directory accepted as config");
    CHECK_CONTAINS(zinf_last_error(), dir);

    unlink(file);
    rmdir(dir);
    return check_exit("test_config_errors");
}
