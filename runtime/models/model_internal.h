// The model object and the interface of a model family: model.c holds what every
// family shares (activations, schedule, batches), each family's file its modules'
// parameters, forward and backward, and its Hugging Face names and config.json.
#ifndef ZINF_MODEL_INTERNAL_H
#define ZINF_MODEL_INTERNAL_H

#include <jansson.h>

#include "zinf_internal.h"
#include "zinf_model.h"

// Modules in forward order, the same for every family: embedding, per layer attn then
// mlp, the final norm, head.
enum { MOD_EMBEDDING = 0 };
static inline int mod_attn(int l) { return 1 + 2 * l; }
static inline int mod_mlp(int l) { return 2 + 2 * l; }
static inline int mod_norm(int L) { return 1 + 2 * L; }
static inline int mod_head(int L) { return 2 + 2 * L; }

// One layer's saved activations (B, T, ...) in the storage dtype; statistics fp32.
// fc is the MLP's first product (GPT-2's c_fc, the Llama family's gate|up), act its
// activation (GELU, SwiGLU); ln*_mean only for GPT-2's layer norms.
typedef struct layer_acts {
    void *ln1, *qkv, *atty, *res2, *ln2, *fc, *act;
    float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd, *lse;
} layer_acts;

// Widths (channels per token) of the activations, which the family sets.
typedef struct act_widths {
    int qkv, att, fc, act; // (NH + 2 NKV) hd, NH hd, the MLP's first product, its activation
    // GPT-2's layer norms save their mean; both families' norms add their input
    // gradient. The Llama family's SwiGLU reads the down projection's input gradient,
    // which takes one more backward buffer.
    bool layer_norm;
    bool rope; // rotary angles (seq_len, head_dim / 2), made by the family's prepare
} act_widths;

typedef struct model_family model_family;

// A block's MLP as every family has it: a norm of the residual (x1 = ln2), linear 1
// into fc, the activation (act = f(fc)), linear 2 into the block's output, and the
// residual added; what mlp_tiles.c needs to compute it from tiles. A linear's weight
// is one or two parameters (gate and up: the first and second half of fc's columns),
// and its bias as many, or none.
typedef struct mlp_linear {
    int w[2], b[2]; // parameter indices; -1: none
    int in, out;    // widths
} mlp_linear;
typedef struct model_mlp {
    bool in_out;    // weights stored (in, out), as GPT-2's Conv1D; else (out, in), as nn.Linear
    bool dact;      // linear 2's input gradient goes to dact (SwiGLU's backward reads it); else to dfc
    mlp_linear lin[2];
    // The norm from the module's parameters w (and into its gradients g) at their flat
    // offsets; the activation forward, and backward into dfc. The whole MLP uses them too.
    zinf_status (*norm_fwd)(zinf_model *m, zinf_stream *s, int l, const void *w);
    zinf_status (*norm_bwd)(zinf_model *m, zinf_stream *s, int l, const void *w, void *g);
    zinf_status (*act_fwd)(zinf_model *m, zinf_stream *s, int l);
    zinf_status (*act_bwd)(zinf_model *m, zinf_stream *s, int l);
} model_mlp;

// With host checkpoints, the device slots the checkpoints pass through (model.c).
enum { CKPT_SLOTS = 3 };

struct zinf_model {
    const model_family *fam;
    zinf_device *dev;      // NULL for a plan: activations counted, not allocated
    zinf_backend backend;  // a plan's: sizes the attention workspace
    int64_t planned_bytes; // a plan's activations, as the device would account them
    zinf_model_params p;
    act_widths w;
    int nmod, nparams;
    zinf_module_info *mods;
    zinf_param_info *params; // every module's table, one array
    zinf_model_op *sched;    // forward ops first (n_fwd), then the backward's
    int n_fwd, n_all;

    int b;       // sequences in the current batch
    float dloss; // d objective / d mean loss
    // The batch's host side: the next set_batch waits for batch_copied, the last
    // batch's copies to the device, before it overwrites them (long done by then when a
    // loss was read), never for the stream's other work.
    int32_t *h_tok, *h_targets, *h_order;
    int32_t *h_token_starts; // vocab_size + 1: the counting sort's buckets
    zinf_event *batch_copied;
    float *h_losses;

    // device activations
    int32_t *tok, *targets, *order;
    void *encoded;      // embedding output (B, T, C)
    void **res3;        // each layer's output (B, T, C)
    layer_acts *layers; // L sets, or one shared set with checkpointing
    void *lnf;
    float *lnf_mean, *lnf_rstd;
    void *logits;  // (head rows, V): a chunk's; after a training forward, the last chunk's gradient
    float *losses; // (B, T)
    float *lse;    // (B, T) training: each row's log-sum-exp, which a head in tiles reads in its backward
    void *att_ws;
    size_t att_ws_bytes;        // as the device (or, planning, the backend or the params) counted it
    float *rope_cos, *rope_sin; // (T, hd / 2), the Llama family's
    // backward scratch
    void *dres, *dln, *dqkv, *datty, *dfc, *dact;

    // host_checkpoints: checkpoint j (the embedding's output for j = 0, else block j -
    // 1's) lives in the lent host buffer at j B T C elements and, on the device, in slot
    // j % CKPT_SLOTS, which encoded and res3 point into. The copy stream moves them.
    void *h_ckpt;
    void *slots[CKPT_SLOTS];
    int slot_of[CKPT_SLOTS];       // the checkpoint a slot holds; -1: none
    bool slot_loading[CKPT_SLOTS]; // its last copy brings the checkpoint in from host memory
    zinf_stream *cp;
    zinf_event *ev_copy[CKPT_SLOTS]; // a slot's last copy
    zinf_event *ev_compute;          // the compute stream's progress, for the copy stream

    const zinf_tile_source *tiles; // lent: where tiled modules come from (NULL: none are)
    // Where the MLP has biases, for an MLP in tiles: (B, T) ones and the two biases (or
    // their gradients) side by side (mlp_tiles.c).
    void *ones, *mlp_bias;
};

struct model_family {
    const char *name; // in messages: "gpt2", "llama"
    // The shape's checks beyond the generic ones; the activation widths.
    zinf_status (*check)(const zinf_model_shape *s);
    act_widths (*widths)(const zinf_model_shape *s);
    // Its MLP (above).
    void (*mlp)(const zinf_model_shape *s, model_mlp *out);
    // Fill m->mods and m->params (sized by count(), which returns the parameters).
    int (*count)(const zinf_model_shape *s);
    void (*tables)(zinf_model *m);
    // After the activations exist: tables the passes read (the rotary angles); NULL:
    // none.
    zinf_status (*prepare)(zinf_model *m);
    zinf_status (*forward)(zinf_model *m, zinf_stream *s, int mod, void *const *params);
    zinf_status (*backward)(zinf_model *m, zinf_stream *s, int mod, void *const *params, void *const *grads);
    // Hugging Face's files: the prefix the state dict puts before the table's names;
    // tensors of old files a reader skips (NULL: none); a parameter's place in the
    // state dict (NULL: the table's order is the state dict's); the config.json of a
    // shape.
    const char *hf_prefix;
    bool (*hf_skip)(const char *name);
    int64_t (*hf_rank)(const char *name);
    json_t *(*hf_config)(const zinf_model_shape *s, zinf_dtype dt);
};

extern const model_family zinf_gpt2_family, zinf_llama_family;
static inline const model_family *family_of(zinf_model_arch a) {
    return a == ZINF_ARCH_GPT2 ? &zinf_gpt2_family : &zinf_llama_family;
}

static inline layer_acts *acts_of(zinf_model *m, int l) { return &m->layers[m->p.checkpoint_activations ? 0 : l]; }
static inline void *block_input(zinf_model *m, int l) { return l == 0 ? m->encoded : m->res3[l - 1]; }

// A weight's gradient: dw (p x q) = a^T b, a (rows x p) and b (rows x q) packed; written
// where first (the backward's first write of it: dw not read), else added to.
zinf_status model_weight_grad(zinf_stream *s, zinf_dtype dt, void *dw, const void *a, int p, const void *b, int q,
                              int rows, bool first);

// The output layer, the same for every family: logits = lnf W^T with W (V, C) (the
// head's weight, or the embedding it is tied to), then softmax cross-entropy, in chunks
// of m->p.head_chunk rows. The backward writes the weight's gradient into dw (the
// backward's first write of it) and the input's into m->dln.
zinf_status model_head_fwd(zinf_model *m, zinf_stream *s, const void *w);
zinf_status model_head_bwd(zinf_model *m, zinf_stream *s, const void *w, void *dw);

// The embedding's lookup: out = wte[tok] (+ wpe[t]) from module MOD_EMBEDDING, whose
// flat buffer is w, or tile by tile where it is tiled; and its backward into the flat
// gradient dw (or the tiles' gradients) from dout. The module holds wte, then wpe where
// the family has one (GPT-2's learned positions).
zinf_status model_embedding_fwd(zinf_model *m, zinf_stream *s, const void *w);
zinf_status model_embedding_bwd(zinf_model *m, zinf_stream *s, void *dw, const void *dout);

// ---- modules in tiles ----
// Whether module mod comes in tiles (zinf_model_lend_tiles).
static inline bool model_tiled(const zinf_model *m, int mod) { return m->tiles && m->tiles->tiling[mod].tile; }
// The part of parameter p (elements [o, o + n) of the flat buffer) inside the flat run
// [a, a + len): its first element, its count, and where the run holds it.
static inline void model_overlap(const zinf_param_info *p, size_t a, size_t len, int64_t *lo, int64_t *n, size_t *at) {
    size_t b = p->offset > a ? p->offset : a, e = p->offset + p->numel < a + len ? p->offset + p->numel : a + len;
    *lo = (int64_t)(b - p->offset), *n = e > b ? (int64_t)(e - b) : 0, *at = b - a;
}
// The MLP of block l from its tiles, forward or backward (mlp_tiles.c); the buffers it
// needs (at create, counted as activations).
zinf_status model_mlp_tiles_fwd(zinf_model *m, zinf_stream *s, int l);
zinf_status model_mlp_tiles_bwd(zinf_model *m, zinf_stream *s, int l);
zinf_status model_mlp_tiles_alloc(zinf_model *m);

// A device buffer of elems elements of es bytes, named what in an out-of-memory
// message; for a plan, counted and not allocated.
zinf_status model_dalloc(zinf_model *m, void **p, size_t elems, size_t es, const char *what);
// Copy bytes from host memory at src to the model's device buffer dst, and wait for it.
zinf_status model_upload(zinf_model *m, void *dst, const void *src, size_t bytes);

// Parameter idx of module mod inside the flat buffer buf.
static inline void *param_at(const zinf_model *m, int mod, void *buf, int idx) {
    return (char *)buf + m->mods[mod].params[idx].offset * zinf_dtype_size(m->p.dtype);
}

// Append a parameter to mod's table (table: where mod's entries start). aligned: at a
// 64-element offset (vector loads, cuBLASLt); else right after the previous one, so
// that consecutive parameters form one matrix (q|k|v, gate|up).
void model_add_param(zinf_module_info *mod, zinf_param_info *table, const char *name, int64_t d0, int64_t d1,
                     bool aligned, zinf_param_init init, double std);

// Append the head's weight (vocab_size rows of n_embd, aligned) and the pad's rows after
// it (zinf_model_vocab_padded), which no parameter covers.
void model_add_head_weight(zinf_module_info *mod, zinf_param_info *table, const char *name, const zinf_model_shape *s,
                           zinf_param_init init, double std);

// Hugging Face's dtype name for config.json ("float32", "bfloat16", "float16").
const char *model_torch_dtype(zinf_dtype dt);

#endif
