// zinf checkpoints on disk, a format other tools rely on:
//
//   ROOT/latest                     the name of the newest complete step directory
//   ROOT/global_step<N>/meta.json   what the step directory holds (below)
//   ROOT/global_step<N>/rank<R>.safetensors, R = 0 .. world_size - 1
//   ROOT/global_step<N>/hf/         with stage3_gather_16bit_weights_on_model_save: the
//                                   model as a Hugging Face directory (zinf_ckpt_export_dir)
//
// Rank R's file holds, for every module M of the model, elements [R * slice,
// min((R + 1) * slice, numel)) of M's flat buffer (the parameters laid end to end at
// the offsets meta.json gives) as the tensors "M.master", "M.exp_avg", "M.exp_avg_sq"
// (F32) and, when the model is stored in 16 bits, "M.params" (BF16 or F16). The slices
// do not depend on the ZeRO stage, so a checkpoint loads at any stage and, re-sliced,
// at any world size. Every tensor's CRC-32 is in its file's metadata. meta.json:
//   {"format": "zinf-checkpoint", "version": 1, "step": N, "steps_applied": N,
//    "world_size": W, "zero_stage": S, "dtype": "bf16",
//    "model": {"arch", "n_layer", "n_head", "n_embd", "vocab_size", "block_size", and
//              the Llama family's keys} (zinf_model_shape_to_json),
//    "modules": [{"name", "numel", "slice",
//                 "params": [{"name", "shape": [..], "offset"}]}],
//    "loss_scaler": {"scale", "cur_iter", "last_overflow_iter", "cur_hysteresis"},
//    "scheduler": {"steps_applied", "next_lr"},
//    "data": {"position", "seed", "sampling"}, "config": {the run's normalized config}}
//
// A step directory is written under a temporary name, synced, and renamed into place;
// `latest` is replaced (written aside, synced, renamed) only after that, so a crash at
// any moment leaves the previous checkpoint whole and `latest` naming it.
#ifndef ZINF_CHECKPOINT_H
#define ZINF_CHECKPOINT_H

#include <stdint.h>

#include "zinf_base.h"
#include "zinf_model.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { ZINF_CKPT_VERSION = 1 };

typedef enum zinf_ckpt_state {
    ZINF_CKPT_MASTER = 0,  // fp32 master weights
    ZINF_CKPT_EXP_AVG = 1, // Adam's moments
    ZINF_CKPT_EXP_AVG_SQ = 2,
    ZINF_CKPT_PARAMS = 3, // the 16-bit copy (16-bit models only)
    ZINF_CKPT_NSTATES = 4,
} zinf_ckpt_state;

typedef struct zinf_ckpt_module {
    char name[24];
    int64_t numel, slice;
    int nparams;
    zinf_param_info *params;
} zinf_ckpt_module;

// What meta.json says.
typedef struct zinf_ckpt_info {
    int64_t step, steps_applied;
    int world_size, zero_stage;
    zinf_dtype dtype; // F32, BF16 or F16
    zinf_model_shape shape;
    int nmod;
    zinf_ckpt_module *mods;
    double scale; // the loss scaler's state
    int64_t cur_iter, last_overflow_iter, cur_hysteresis;
    int64_t data_position; // training sequences consumed
    int64_t seed;
} zinf_ckpt_info;

typedef struct zinf_ckpt zinf_ckpt;

// Open a checkpoint: a root (its `latest` is followed) or one step directory. meta.json
// is read and checked, and every rank's file must be there; errors name the file and
// what is wrong. The rank files are opened as they are needed.
zinf_status zinf_ckpt_open(zinf_ckpt **out, const char *path);
void zinf_ckpt_close(zinf_ckpt *c); // NULL is a no-op
const zinf_ckpt_info *zinf_ckpt_info_of(const zinf_ckpt *c);
const char *zinf_ckpt_dir(const zinf_ckpt *c); // the step directory

// Elements [lo, hi) of module mod's flat buffer of one state, handed to fn in order
// (off: the flat index of p[0]; n elements of the state's dtype: F32, or the model's
// for PARAMS). Every rank tensor that overlaps the range is streamed whole through buf
// (buf_bytes) so that its CRC-32 is checked: a corrupted, truncated or misshapen
// tensor fails with ZINF_ERR_CORRUPT naming the file and the tensor.
typedef zinf_status (*zinf_ckpt_sink)(void *arg, size_t off, const void *p, size_t n);
zinf_status zinf_ckpt_read(zinf_ckpt *c, int mod, zinf_ckpt_state state, size_t lo, size_t hi, void *buf,
                           size_t buf_bytes, zinf_ckpt_sink fn, void *arg);

// The tensor name of a state ("master", "exp_avg", "exp_avg_sq", "params").
const char *zinf_ckpt_state_name(zinf_ckpt_state s);

// ---- the model out, as Hugging Face files ----
// The weights of state (MASTER, or the 16-bit PARAMS of a 16-bit model) in dtype dt
// (F32, BF16 or F16) with GPT2LMHeadModel's names and shapes, the tied lm_head left
// out as save_pretrained leaves it. Every tensor streams from the rank files through
// two 1 MiB buffers, checked against its checksum on the way.

// One safetensors file at path (written aside and renamed into place).
zinf_status zinf_ckpt_export_file(zinf_ckpt *c, const char *path, zinf_ckpt_state state, zinf_dtype dt);
// A model directory as save_pretrained writes it, which from_pretrained loads:
// config.json and model.safetensors, or past max_shard_bytes shards
// model-0000i-of-0000N.safetensors (greedy in state-dict order, a larger tensor alone)
// and model.safetensors.index.json. dir must be absent or empty; it is written aside
// and renamed into place, so it appears whole or not at all.
zinf_status zinf_ckpt_export_dir(zinf_ckpt *c, const char *dir, zinf_ckpt_state state, zinf_dtype dt,
                                 uint64_t max_shard_bytes);

#ifdef __cplusplus
}
#endif
#endif
