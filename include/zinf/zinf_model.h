// zinf models: the GPT-2 model (modules with forward and backward over device
// tensors, Hugging Face names and layouts), its weights files (safetensors: an 8-byte
// little-endian header length, a JSON header naming each tensor's dtype, shape and
// byte range, then the bytes) and the token data it reads.
#ifndef ZINF_MODEL_H
#define ZINF_MODEL_H

#include <stdint.h>

#include "zinf_base.h"
#include "zinf_config.h"
#include "zinf_gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { ZINF_ST_MAX_DIMS = 8 };

typedef struct zinf_st_tensor {
    const char *name;
    zinf_dtype dtype; // F32, BF16 or F16 (the dtypes weights come in)
    int ndim;
    int64_t shape[ZINF_ST_MAX_DIMS];
    uint64_t nbytes;
    const void *data; // reading: inside the mapped file; writing: the caller's bytes
} zinf_st_tensor;

typedef struct zinf_safetensors zinf_safetensors;

// Map path and check it whole: header length within the file, a JSON object without
// duplicate names, known dtypes, shapes whose size matches the byte range, ranges
// inside the data that cover it without gaps or overlaps. Errors name the file and the
// tensor. "__metadata__" is allowed and ignored.
zinf_status zinf_safetensors_open(zinf_safetensors **out, const char *path);
void zinf_safetensors_close(zinf_safetensors *st); // NULL is a no-op
int zinf_safetensors_count(const zinf_safetensors *st);
// Tensors in file order (by offset); NULL past the end.
const zinf_st_tensor *zinf_safetensors_at(const zinf_safetensors *st, int i);
// NULL when there is no tensor of that name.
const zinf_st_tensor *zinf_safetensors_find(const zinf_safetensors *st, const char *name);

// The string the header's "__metadata__" holds for key, or NULL.
const char *zinf_safetensors_meta(const zinf_safetensors *st, const char *key);

// Tensor t's bytes (t from st), read in order through buf (buf_bytes, > 0) with pread,
// so that nothing of the file stays in memory, and handed to fn chunk by chunk (off:
// bytes of t before the chunk); fn's failure stops it. Then its CRC-32 (zlib's) is
// checked against the metadata's "crc32:<name>" where the file has one:
// ZINF_ERR_CORRUPT naming the file and the tensor.
typedef zinf_status (*zinf_st_sink)(void *arg, uint64_t off, const void *p, size_t n);
zinf_status zinf_safetensors_stream(const zinf_safetensors *st, const zinf_st_tensor *t, void *buf, size_t buf_bytes,
                                    zinf_st_sink fn, void *arg);

// Write a file whose bytes arrive in pieces: open with every tensor's name, dtype and
// shape (data is not read), append the tensors' bytes in order (any split), finish.
// The header's "__metadata__" holds "format": "pt" (Hugging Face's loader wants it),
// the caller's nmeta key/value string pairs (meta[2i], meta[2i+1]) and each tensor's
// CRC-32 as "crc32:<name>" (8 hex digits). Bytes go to disk with O_DIRECT through an
// 8 MiB staging buffer (buffered where the file system refuses O_DIRECT). The file is
// written under a temporary name,
// synced and renamed into place by finish; a failure, or abort, removes it, so a
// failed or interrupted write leaves no partial file. finish and abort free w.
typedef struct zinf_st_writer zinf_st_writer;
zinf_status zinf_st_writer_open(zinf_st_writer **out, const char *path, const zinf_st_tensor *tensors, int n,
                                const char *const *meta, int nmeta);
zinf_status zinf_st_writer_append(zinf_st_writer *w, const void *p, size_t bytes);
zinf_status zinf_st_writer_finish(zinf_st_writer *w);
void zinf_st_writer_abort(zinf_st_writer *w); // NULL is a no-op

// Write n tensors (with their data) to path in one go, as above.
zinf_status zinf_safetensors_write(const char *path, const zinf_st_tensor *tensors, int n);

// A model's weights as Hugging Face keeps them: one safetensors file, or a model
// directory with model.safetensors, or model.safetensors.index.json and its shards
// (a single file wins over an index, as from_pretrained has it). Every file is opened
// and checked as above, and the index is held to its shards: a shard it names that is
// missing, or a tensor that is not where it says, fails naming the file and the tensor.
typedef struct zinf_hf_weights zinf_hf_weights;
zinf_status zinf_hf_weights_open(zinf_hf_weights **out, const char *path);
void zinf_hf_weights_close(zinf_hf_weights *w); // NULL is a no-op
int zinf_hf_weights_count(const zinf_hf_weights *w);
// Tensor i over all the files (file by file, each in file order), and its file; NULL
// past the end.
const zinf_st_tensor *zinf_hf_weights_at(const zinf_hf_weights *w, int i, const char **file);
// The tensor called name and its file, or NULL.
const zinf_st_tensor *zinf_hf_weights_find(const zinf_hf_weights *w, const char *name, const char **file);


// ---- models ----
// A model family is one file under runtime/models/ (gpt2.c; llama.c for Llama, Mistral
// and Qwen2): its modules, their parameters with Hugging Face's names, and each
// module's forward and backward through the device ops. Everything above this API is
// generic over the family.

// What a model is: the model section resolved (zinf_model_shape_from_config), with
// GPT-2's fixed choices spelled out (n_kv_head = n_head, head_dim = n_embd / n_head,
// ffn = 4 n_embd, norm_eps 1e-5, tied).
typedef struct zinf_model_shape {
    zinf_model_arch arch;
    int n_layer, n_head, n_embd, vocab_size, block_size;
    int n_kv_head, head_dim, ffn;
    double norm_eps;
    zinf_rope_type rope_type;
    double rope_theta, rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    int rope_original_max_position;
    int window, window_from; // keys a query sees (0: all), on layers >= window_from
    bool tied, attention_bias, mlp_bias; // Qwen2's q/k/v biases come with its arch
} zinf_model_shape;

// GPT-2 of these sizes.
zinf_model_shape zinf_model_shape_gpt2(int n_layer, int n_head, int n_embd, int vocab_size, int block_size);
// The shape a `model` config section gives; errors name the key.
zinf_status zinf_model_shape_from_config(const zinf_model_config *mc, zinf_model_shape *out);
// The shape of a model's weights: a model directory's is its config.json's
// (zinf_config_model_from_hf); a single GPT-2 safetensors file implies one: n_layer
// from the blocks present, n_embd and vocab_size from wte, block_size from wpe, and
// n_head = n_embd / 64 (the head size of every GPT-2). Errors name the file.
zinf_status zinf_model_shape_from_file(const char *path, zinf_model_shape *out);
// Parameters of the model (a tied head counted once): 124,439,808 for gpt2.
int64_t zinf_model_param_count(const zinf_model_shape *s);
// The head's width on the device: vocab_size rounded up to a multiple of 128 (GPT-2's
// 50257 to 50304), so that every product of the output layer has sides the tensor
// cores' fast kernels take. The head's weight is followed in its module by the pad's
// rows, always zero, and the logits rows are this wide; files and checkpoints hold
// vocab_size rows.
int zinf_model_vocab_padded(const zinf_model_shape *s);
bool zinf_model_shape_equal(const zinf_model_shape *a, const zinf_model_shape *b);
// The architecture and sizes in a few words ("GPT n_layer 12 n_head 12 n_embd 768
// vocab 50257"), for plans and errors.
void zinf_model_shape_describe(const zinf_model_shape *s, char *out, size_t len);

// The name Hugging Face's state dict gives the family's parameter `name`.
void zinf_model_hf_name(const zinf_model_shape *s, const char *name, char *out, size_t len);
// Where the family's parameter `name` comes in transformers' state dict (the order
// save_pretrained writes and shards in), as a sort key.
int64_t zinf_model_hf_rank(const zinf_model_shape *s, const char *name);
// The config.json from_pretrained reads for this shape with weights of dtype dt, as
// save_pretrained writes it (sorted keys, indent 2); *json is malloc'd.
zinf_status zinf_model_hf_config(const zinf_model_shape *s, zinf_dtype dt, char **json);
// The shape as a checkpoint's meta.json holds it (a JSON object with the model
// section's key names; *json malloc'd), and back; where names the file in errors. An
// object without "arch" is a GPT-2 (checkpoints before the Llama family).
zinf_status zinf_model_shape_to_json(const zinf_model_shape *s, char **json);
zinf_status zinf_model_shape_from_json(const char *json, const char *where, zinf_model_shape *out);

typedef enum zinf_param_init { ZINF_INIT_NORMAL = 0, ZINF_INIT_ZERO = 1, ZINF_INIT_ONE = 2 } zinf_param_init;

// One parameter inside its module's flat buffer; names and shapes as Hugging Face's
// files have them (GPT-2's without the `transformer.` prefix, its Conv1D weights (in,
// out); the Llama family's Linear weights (out, in)). A fresh model draws it as its
// family's _init_weights does: normal(0, std), zeros or ones.
typedef struct zinf_param_info {
    char name[64];
    int ndim;
    int64_t shape[2];
    size_t offset; // elements from the start of the module's flat buffer
    size_t numel;
    zinf_param_init init;
    double std;
} zinf_param_info;

// The unit of fetch and release. `external` is the module whose parameters this one
// also uses (the head uses the embedding's wte), or -1.
typedef struct zinf_module_info {
    char name[24]; // "embedding", "h.3.attn", "h.3.mlp", "ln_f", "head"; "layers.3.attn", "norm"
    int nparams;
    const zinf_param_info *params;
    size_t numel; // flat buffer elements (parameters at 64-element aligned offsets)
    int external;
    // The model can compute it from tiles (zinf_model_lend_tiles) whose runs are whole
    // multiples of this many elements: 1 for an untied embedding and an MLP, a row of
    // the weight for the head's (the head's own, or the embedding it is tied to); 0: it
    // is gathered whole.
    size_t tile_unit;
    // Elements at the start of its flat buffer that tile 0 must hold whole: an MLP's
    // norm, which its op needs before its products and after their gradients.
    size_t tile_first;
} zinf_module_info;

typedef enum zinf_pass { ZINF_PASS_FORWARD = 0, ZINF_PASS_RECOMPUTE = 1, ZINF_PASS_BACKWARD = 2 } zinf_pass;
typedef struct zinf_model_op {
    int module;
    zinf_pass pass;
} zinf_model_op;

typedef struct zinf_model_params {
    zinf_model_shape shape;
    zinf_dtype dtype; // storage of weights, activations and gradients: F32, BF16 or F16
    int batch;        // most sequences per call
    int seq_len;      // tokens per sequence, <= block_size
    bool training;    // allocate what the backward needs
    bool checkpoint_activations; // keep only block inputs; recompute each block in backward
    // Tokens whose logits the head computes at once (0: all of the batch): the head and
    // the cross-entropy run chunk by chunk, and training recomputes every chunk's logits
    // but the last in the backward. Losses and every gradient but the head weight's are
    // bit for bit those of one chunk; the head weight's gradient is summed chunk by chunk
    // (rounded to the dtype after each).
    int head_chunk;
    // With checkpoint_activations and training: the L + 1 checkpoints (the embedding's
    // output and every block's) live in pinned host memory the caller lends
    // (zinf_model_lend_checkpoints), and the device keeps three of them.
    bool host_checkpoints;
    // A plan (no device): the bytes of attention workspace the run's device asks, as the
    // model made on it says (zinf_model_attention_workspace: a CUDA device running
    // cuDNN's attention counts its plans'); 0: the backend's own count.
    int64_t attention_workspace;
} zinf_model_params;

typedef struct zinf_model zinf_model;

// Allocates the activations on dev (accounted: a model that does not fit fails here
// with the device's out-of-memory message). Weights and gradients are the caller's.
zinf_status zinf_model_create(zinf_model **out, zinf_device *dev, const zinf_model_params *p);
// The same model without a device: its modules and schedule, and the bytes its
// activations would take on a device of that backend, as the device accounts them. It
// allocates nothing on a device and serves the queries below, never a batch or a run.
zinf_status zinf_model_plan(zinf_model **out, zinf_backend backend, const zinf_model_params *p,
                            int64_t *activation_bytes);
void zinf_model_destroy(zinf_model *m); // NULL is a no-op
// Bytes of pinned host memory a model with p's host_checkpoints needs (0 without).
size_t zinf_model_checkpoint_bytes(const zinf_model_params *p);
// Lend a model made with host_checkpoints its pinned host buffer of
// zinf_model_checkpoint_bytes (the caller keeps it, and frees it after the model);
// required before its first forward.
zinf_status zinf_model_lend_checkpoints(zinf_model *m, void *h_buf);

// ---- modules in tiles ----
// A module too big to gather whole (memory.tile_bound) comes in tiles: its flat buffer
// splits into `ranks` slices of `slice` elements, and tile k holds elements
// [k tile, k tile + n) of every slice (n = tile; the last tile has the rest), rank after
// rank: element j of slice r's part at r n + j, which is element r slice + k tile + j
// of the flat buffer.
typedef struct zinf_tiling {
    int ranks;
    size_t slice;
    size_t tile; // 0: the module is gathered whole
} zinf_tiling;

// What the caller lends a model for its tiled modules. get gives tile k of module mod
// once the compute stream s may use it: its gathered parameters, or with grad a zeroed
// buffer for its gradient; done says that everything using it is queued on s (the
// gradient is then the caller's to reduce). An op sweeps the parameter tiles once or
// several times (zinf_model_tile_sweeps), each sweep every tile once, one get and one
// done each; a get of parameters names the tile the op asks for next (-1: none), whose
// gather may then run under this one's compute. An op that takes gradient tiles takes
// each once, last tile first (k = n - 1, ..., 0): the order the caller plans their
// reduction in.
typedef struct zinf_tile_source {
    const zinf_tiling *tiling; // per module
    zinf_status (*get)(void *ctx, zinf_stream *s, int mod, int k, int next, bool grad, void **buf);
    zinf_status (*done)(void *ctx, zinf_stream *s, int mod, int k, bool grad);
    void *ctx;
} zinf_tile_source;

// From now on a module with tiling[mod].tile > 0 runs from src's tiles, and
// zinf_model_run reads neither params[mod] nor grads[mod]; src is borrowed. A tile of a
// module without a tile_unit, whose runs (tile and slice) are not whole units, or
// smaller than its tile_first, is refused, naming the module.
zinf_status zinf_model_lend_tiles(zinf_model *m, const zinf_tile_source *src);
// How often op sweeps module mod's tiles of parameters (the output layer: once per
// chunk of tokens in the forward), and whether it takes gradient tiles; what a plan
// counts.
int zinf_model_tile_sweeps(const zinf_model *m, const zinf_model_op *op, int mod, bool *grad);
// Tiles of a module under t (0 when it is gathered whole), and elements of each slice in
// tile k.
static inline size_t zinf_tiling_count(const zinf_tiling *t) { return t->tile ? (t->slice + t->tile - 1) / t->tile : 0; }
static inline size_t zinf_tiling_len(const zinf_tiling *t, size_t k) {
    return t->slice - k * t->tile < t->tile ? t->slice - k * t->tile : t->tile;
}

const zinf_model_params *zinf_model_get_params(const zinf_model *m);
// The bytes of attention workspace the model took (its device's count, or its plan's).
size_t zinf_model_attention_workspace(const zinf_model *m);
int zinf_model_module_count(const zinf_model *m);
const zinf_module_info *zinf_model_module(const zinf_model *m, int i);
// The order modules run in: forward only, or forward, (recompute and) backward.
const zinf_model_op *zinf_model_schedule(const zinf_model *m, bool backward, int *n);

// Upload a batch of `batch` sequences (<= the model's batch) of seq_len tokens and
// targets on stream s; ids outside the vocabulary are rejected. dloss is the gradient
// of the objective with respect to this batch's mean loss (1, or a loss scale).
zinf_status zinf_model_set_batch(zinf_model *m, zinf_stream *s, const int32_t *tokens, const int32_t *targets,
                                 int batch, float dloss);
// The parameter called name (as in its files) and its module, or NULL.
const zinf_param_info *zinf_model_find_param(const zinf_model *m, const char *name, int *mod);

// Run one op of the schedule on s. params[i] / grads[i]: module i's flat buffers on
// the device (grads only for backward); entries for modules other than op's and its
// external one are not read. A backward writes its gradients over whatever the buffers
// held, never adding to an earlier backward's: once module i's own backward op is
// queued, every element of grads[i]'s numel is set (those no parameter covers to zero).
zinf_status zinf_model_run(zinf_model *m, zinf_stream *s, const zinf_model_op *op, void *const *params,
                           void *const *grads);
// What an op reads of its own module's parameters where it reads only some rows of
// them: each table (at element `offset` of the module's flat buffer, rows of row_len
// elements) as the rows it reads: rows[0 .. count) (device memory, set by the batch; a
// row may repeat) or, with rows NULL, rows 0 to count - 1.
typedef struct zinf_rows_read {
    size_t offset;
    int row_len;
    const int32_t *rows;
    int count;
} zinf_rows_read;
enum { ZINF_ROWS_READ_MAX = 2 };
// How many tables op reads that way, written to out: the forward's lookup reads the
// batch's tokens' rows of wte, and rows 0 to seq_len - 1 of GPT-2's wpe; 0 for an op
// that reads its module whole, reads none of it, or runs from tiles. What a caller that
// has only some rows ready can give it (runtime/engine/step.c). Valid until the next
// zinf_model_set_batch.
int zinf_model_rows_read(const zinf_model *m, const zinf_model_op *op, zinf_rows_read out[ZINF_ROWS_READ_MAX]);

// The batch's losses after the head's forward: their sum (fp64, in order) and count.
zinf_status zinf_model_loss(zinf_model *m, zinf_stream *s, double *sum, int64_t *count);

// Copy the batch's logits (batch x seq_len x vocab, the model's dtype) to host memory
// h_out after the head's forward. A training forward turns them into their gradient.
// ZINF_ERR_UNSUPPORTED when the head ran in more than one chunk (no longer all there).
zinf_status zinf_model_logits(zinf_model *m, zinf_stream *s, void *h_out);

// Read weights (a safetensors file or a model directory, as zinf_hf_weights_open
// takes them) into module buffers of dtype dt in host memory (bufs[i]:
// numel elements of module i, or NULL to skip the module, so a caller can hold one
// module at a time; padding left as it is). Names with or without the family's
// prefix (GPT-2's `transformer.`); old GPT-2 files' `attn.bias`/`attn.masked_bias`
// buffers are skipped, and a tied model's lm_head.weight is accepted when it equals
// the embedding. A missing, unknown or misshapen tensor is an error naming the file
// and the tensor.
zinf_status zinf_model_read_weights(const zinf_model *m, const char *path, zinf_dtype dt, void *const *bufs);
// Write module buffers (dtype buf_dt) as a Hugging Face file (the state dict's names,
// a tied head left out) with tensors of file_dt (F32, BF16 or F16).
zinf_status zinf_model_write_weights(const zinf_model *m, const char *path, zinf_dtype file_dt, zinf_dtype buf_dt,
                                     const void *const *bufs);

// ---- token data ----
// The design's data contract: a file of tokens read as consecutive non-overlapping
// windows of seq_len + 1 tokens at offsets 0, T, 2T, ...

typedef struct zinf_tokens zinf_tokens;

// tokens-u16 / tokens-u32: little-endian ids, headerless, or behind llm.c's 256 x int32
// header (recognized by its magic; its token count must match the file's size).
// text-bytes: every byte a token. megatron: path names PREFIX.bin or PREFIX, and the
// PREFIX.idx beside it is checked whole against the .bin; the tokens are the sequences
// in index order. A header or index that disagrees with the files is ZINF_ERR_CORRUPT,
// a file that is not of the format ZINF_ERR_INVAL, each naming the file and the fault.
zinf_status zinf_tokens_open(zinf_tokens **out, const char *path, zinf_data_format format);
void zinf_tokens_close(zinf_tokens *t); // NULL is a no-op
int64_t zinf_tokens_count(const zinf_tokens *t);
// Complete windows of seq_len + 1 tokens.
int64_t zinf_tokens_windows(const zinf_tokens *t, int seq_len);
// Window w as inputs and targets (seq_len each); an id outside [0, vocab) is an error
// naming the file and the position.
zinf_status zinf_tokens_window(const zinf_tokens *t, int64_t w, int seq_len, int vocab, int32_t *inputs,
                               int32_t *targets);

// Which window each training sequence reads (the design's sampling contract). The
// sequences of the run are numbered 0, 1, 2, ...: global batch i (B =
// train_batch_size) is positions i*B ... i*B+B-1, and in it rank r's micro-batch m
// holds (m*world + r)*micro ... +micro-1. Sequential sampling reads window p mod nw
// for position p; random sampling reads the windows of epoch p / nw in a permutation
// drawn from the seed and the epoch, so every rank computes the same order.
typedef struct zinf_sampler zinf_sampler;

zinf_status zinf_sampler_create(zinf_sampler **out, int64_t windows, zinf_sampling sampling, uint64_t seed);
void zinf_sampler_destroy(zinf_sampler *s); // NULL is a no-op
// The window of sequence position p (>= 0).
zinf_status zinf_sampler_window(zinf_sampler *s, int64_t p, int64_t *window);

#ifdef __cplusplus
}
#endif
#endif
