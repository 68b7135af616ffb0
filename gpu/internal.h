// zinf gpu internals: the table of functions each backend provides and the objects the
// front end (device.c, memory.c, ops.c) shares with them. Plain C, so nothing outside
// gpu/cuda sees CUDA types. The front end checks arguments, keeps the memory account
// and turns each public op into one `launch` of an op record.
#ifndef ZINF_GPU_INTERNAL_H
#define ZINF_GPU_INTERNAL_H

#include <pthread.h>

#include "zinf_gpu.h"
#include "config.h"
#include "zinf_internal.h"

#ifdef __cplusplus
extern "C" {
#endif

// ---- op records: one per public op, copied by value into the stream's queue ----

typedef enum op_kind {
    OP_GEMM,
    OP_BIAS_GRAD,
    OP_LAYERNORM_FWD,
    OP_LAYERNORM_BWD,
    OP_RMSNORM_FWD,
    OP_RMSNORM_BWD,
    OP_GELU_FWD,
    OP_GELU_BWD,
    OP_SWIGLU_FWD,
    OP_SWIGLU_BWD,
    OP_ROPE_FWD,
    OP_ROPE_BWD,
    OP_ATTENTION_FWD,
    OP_ATTENTION_BWD,
    OP_CROSS_ENTROPY,
    OP_CROSS_ENTROPY_GRAD,
    OP_EMBEDDING_FWD,
    OP_EMBEDDING_BWD,
    OP_ADD,
    OP_SCALE,
    OP_CAST,
    OP_ACCUMULATE,
    OP_SUMSQ,
    OP_QUANTIZE,
    OP_DEQUANTIZE,
    OP_OPTIM,
    OP_OPTIM_ROWS,
    OP_COLLECTIVE, // sim only: the links busy for u.seconds
} op_kind;

typedef struct op_layernorm { // layernorm and rmsnorm (which has no mean, b, db)
    void *out, *dx, *dw, *db; // fwd: out; bwd: dx, dw, db
    float *mean, *rstd;
    const void *x, *w, *b, *dout;
    int rows, C;
    float eps;
    bool first; // bwd: dw (and db) written, not read
} op_layernorm;

typedef struct op_elementwise { // gelu, swiglu, add, scale, cast, accumulate, bias_grad
    void *out;                  // gelu/swiglu/add/cast: output; gelu bwd: dx; swiglu bwd: dgu; scale: x;
                                // bias_grad: dbias
    const void *a, *b;          // gelu: x (a), dout (b); swiglu: gu (a), dout (b); add: a, b; cast: src (a)
    zinf_dtype src_dt;          // cast, accumulate: a's
    bool first;                 // accumulate: out = 0 + a; bias_grad: out = the sums; out not read
    float scale;
    size_t n; // elements; bias_grad, swiglu: rows
    int cols; // bias_grad; swiglu: F
} op_elementwise;

typedef struct op_rope {
    void *qkv;                      // fwd: qkv; bwd: dqkv (B, T, (NH + 2 NKV) hd), in place
    const float *cos_tab, *sin_tab; // (T, hd / 2)
    int B, T, NH, NKV, hd;
} op_rope;

typedef struct op_cross_entropy {
    float *losses;
    float *lse; // each row's logsumexp, or NULL
    void *dlogits;
    const void *logits;
    const int32_t *targets;
    int rows, V, ld; // ld: a row's length; columns [V, ld) of dlogits are zeroed
    float dscale;
} op_cross_entropy;

// Columns [v0, v0 + n) of each row: logits and dlogits rows x n (dlogits may be logits),
// lse each row's as zinf_cross_entropy saved it.
typedef struct op_cross_entropy_grad {
    void *dlogits;
    const void *logits;
    const int32_t *targets;
    const float *lse;
    int rows, n, v0;
    float dscale;
} op_cross_entropy_grad;

typedef struct op_embedding {
    void *out, *dwte, *dwpe;
    const void *wte, *wpe, *dout;
    const int32_t *tok, *order;
    int B, T, C;
    // The windows the tables (or their gradients) hold: a part's, or the whole of each
    // table given (wte_n or wpe_n INT64_MAX, 0 for a table given NULL).
    zinf_embedding_part part;
    bool accumulate; // forward: out += each element the windows hold (a part was given)
} op_embedding;

typedef struct op_quantize { // quantize and dequantize (zinf_quantize)
    const void *x;           // quantize: n elements of the record's dt
    void *q;                 // packed: n int8 (bits 8) or ceil(n / 2) bytes of nibbles (bits 4)
    float *scale;            // ceil(n / group)
    void *out;               // dequantize: n elements of the record's dt
    size_t n, group;
    int bits;        // 4 or 8
    bool accumulate; // dequantize: out += (F32 only)
} op_quantize;

// zinf_sumsq_many's pieces, SUMSQ_PIECES a record at most (it splits longer lists).
enum { SUMSQ_PIECES = 16 };
typedef struct op_sumsq {
    zinf_sumsq_piece pieces[SUMSQ_PIECES];
    int n;
} op_sumsq;

typedef struct op_optim {
    zinf_optim_hparams h;
    zinf_optim_consts c; // h as the kernels' float constants (zinf_optim_consts_of)
    zinf_optim_tile t;
    // OP_OPTIM_ROWS: the rows of row_len elements whose new weights go to t.out alone
    // (rows NULL: rows 0 to count - 1).
    const int32_t *rows;
    int count, row_len;
} op_optim;

typedef struct op_record {
    op_kind kind;
    zinf_dtype dt;
    union {
        zinf_gemm_args gemm;
        op_layernorm ln;
        op_elementwise ew;
        op_rope rope;
        zinf_attention_args attn;
        op_cross_entropy xent;
        op_cross_entropy_grad xgrad;
        op_embedding emb;
        op_optim optim;
        op_sumsq sumsq;
        op_quantize quant;
        double seconds;
    } u;
} op_record;

// ---- backends ----

typedef struct backend_ops {
    const char *name;
    // The name and memory of the device p names, without opening it (NULL: capacity is
    // not memory).
    zinf_status (*describe)(const zinf_device_params *p, char name[96], uint64_t *memory);
    // Fill d->caps (all but capacity) and d->impl. index is d->params.index.
    zinf_status (*open)(zinf_device *d);
    void (*close)(zinf_device *d);
    zinf_status (*mem_alloc)(zinf_device *d, size_t bytes, void **out);
    // bytes: as allocated. unused: no queued work uses p (zinf_device_free_unused), so it
    // may serve the next allocation at once; else it is given back after the work queued
    // on the device's streams before the call.
    void (*mem_free)(zinf_device *d, void *p, size_t bytes, bool unused);
    zinf_status (*host_register)(zinf_device *d, void *p, size_t bytes);
    void (*host_unregister)(zinf_device *d, void *p, size_t bytes);
    zinf_status (*stream_create)(zinf_stream *s); // fills s->impl
    void (*stream_destroy)(zinf_stream *s);
    zinf_status (*stream_sync)(zinf_stream *s);
    void *(*stream_native)(zinf_stream *s);     // the backend's own handle, or NULL
    zinf_status (*event_create)(zinf_event *e); // fills e->impl
    void (*event_destroy)(zinf_event *e);
    zinf_status (*event_record)(zinf_event *e, zinf_stream *s);
    zinf_status (*stream_wait_event)(zinf_stream *s, zinf_event *e);
    zinf_status (*event_sync)(zinf_event *e);
    bool (*event_done)(zinf_event *e);
    zinf_status (*event_elapsed)(zinf_event *start, zinf_event *end, double *seconds); // both timed
    zinf_status (*copy)(zinf_stream *s, void *dst, const void *src, size_t bytes, zinf_copy_kind kind);
    zinf_status (*memset)(zinf_stream *s, void *dst, int byte, size_t bytes);
    zinf_status (*host_fn)(zinf_stream *s, void (*fn)(void *arg), void *arg);
    // Enqueue one op; arguments were checked by the front end.
    zinf_status (*launch)(zinf_stream *s, const op_record *op);
    // Seconds each engine has been busy (NULL: the backend does not model its time).
    void (*busy)(zinf_device *d, zinf_device_busy *out);
    // Bytes of attention workspace for a (NKV and hd filled in) on this device, which may
    // run another attention than the backend's default (NULL: that default's).
    size_t (*attention_workspace)(zinf_device *d, const zinf_attention_args *a);
} backend_ops;

extern const backend_ops zinf_host_backend;
extern const backend_ops zinf_sim_backend;
#ifdef ZINF_HAVE_CUDA
extern const backend_ops zinf_cuda_backend;
#endif

typedef struct alloc_entry alloc_entry; // the account of one device allocation
typedef struct op_profile op_profile;   // gpu/profile.c

struct zinf_device {
    const backend_ops *be;
    zinf_device_params params;
    zinf_device_caps caps;
    void *impl;
    pthread_mutex_t lock; // guards the account below
    alloc_entry *allocs;  // live allocations (list), for free and the in-use report
    zinf_device_mem mem;
    op_profile *profile; // while zinf_device_profile_start is in force, else NULL
};

// Launch r on s between the profile's timed events (s->dev->profile is set).
zinf_status profile_launch(zinf_stream *s, const op_record *r);

struct zinf_stream {
    zinf_device *dev;
    void *impl;
    bool urgent; // made by zinf_stream_create_urgent
};

struct zinf_event {
    zinf_device *dev;
    void *impl;
    bool timed; // made by zinf_event_create_timed
};

// ---- discovery (CUDA backend) ----

// Versions and device count; info comes in zeroed and leaves with status set.
void zinf_cuda_runtime_probe(zinf_gpu_runtime_info *info);
// cuDNN's version where it loads, else 0 and why (zinf_gpu_cudnn_version).
int zinf_cuda_cudnn_version(char *why, size_t why_size);
// Properties, PCI bus id and a test kernel launch on device index; out comes in
// zeroed. On failure out keeps what was learned before the failing step.
zinf_status zinf_cuda_device_probe(int index, zinf_gpu_device_info *out);

#ifdef __cplusplus
}
#endif
#endif
