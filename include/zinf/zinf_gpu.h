// zinf gpu: the device layer, one API over three backends. `cuda` runs on an NVIDIA GPU;
// `host` is plain C + OpenBLAS and behaves as a device (a memory capacity, streams that
// run their work in order on their own threads, events between them), so every path of
// the engine runs on a machine without a GPU; `sim` models a GPU's time and memory
// without computing anything, so offload can be measured at GPU speed on real disks and
// CPUs. No CUDA types appear here: devices, streams and events are opaque handles.
#ifndef ZINF_GPU_H
#define ZINF_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "zinf_adam.h"
#include "zinf_base.h"

#ifdef __cplusplus
extern "C" {
#endif

// ---- discovery ----

typedef struct zinf_gpu_device_info {
    int index;
    char name[96];          // "NVIDIA H100 80GB HBM3"
    uint64_t memory_bytes;  // total device memory
    int cc_major, cc_minor; // compute capability
    int multiprocessors;
    char pci_bus_id[32]; // "0000:3b:00.0"
    int pcie_gen;        // current PCIe link generation (from sysfs), 0 unknown
    int pcie_width;      // current PCIe link width, 0 unknown
    bool kernels_run;    // a kernel of this build launched and completed on it
} zinf_gpu_device_info;

typedef struct zinf_gpu_runtime_info {
    bool built;          // this build has the CUDA backend
    int runtime_version; // CUDA runtime version (e.g. 13000), 0 when not built
    int driver_version;  // CUDA driver version, 0 when no driver
    int device_count;    // usable CUDA devices (0 when none or no driver)
    char status[160];    // why device_count is 0 ("no CUDA driver", ...) or "ok"
} zinf_gpu_runtime_info;

// What the CUDA backend finds on this machine. Never fails: a missing driver or
// device is reported in info->status.
void zinf_gpu_runtime_probe(zinf_gpu_runtime_info *info);

// cuDNN's version (e.g. 91900) where this build has the CUDA backend and libcudnn 9
// loads (device.attention can run its fused attention), else 0 with the reason in why.
// Loads the library, so only zinf info asks.
int zinf_gpu_cudnn_version(char *why, size_t why_size);

// Facts about CUDA device `index` (0 <= index < device_count), including a test
// launch of one of this build's kernels. ZINF_ERR_CUDA with the runtime's text on
// failure, *out keeping what was learned before the failing step (name, memory, bus
// id); ZINF_ERR_UNSUPPORTED when the build has no CUDA backend.
zinf_status zinf_gpu_device_probe(int index, zinf_gpu_device_info *out);

// The host backend's BLAS as it describes itself, e.g. "OpenBLAS 0.3.21 DYNAMIC_ARCH
// Zen MAX_THREADS=64", and the number of threads it will use.
const char *zinf_gpu_host_blas_config(void);
int zinf_gpu_host_blas_threads(void);

// ---- devices ----

typedef enum zinf_backend {
    ZINF_BACKEND_AUTO = 0,
    ZINF_BACKEND_HOST = 1,
    ZINF_BACKEND_CUDA = 2,
    ZINF_BACKEND_SIM = 3
} zinf_backend;

// Which attention a CUDA device runs (the config key device.attention). AUTO: cuDNN's
// fused attention wherever libcudnn 9 loads and an engine takes the shape, otherwise
// zinf's own kernels (a rule, not a timing, so that runs repeat bit for bit). CUDNN:
// cuDNN's, or an error saying why it cannot run.
// ZINF: zinf's kernels. The sim device models the one this names (AUTO as cuDNN's, what
// a GPU with PyTorch's CUDA wheels runs); the host backend runs its own and refuses CUDNN.
typedef enum zinf_attention_impl {
    ZINF_ATTENTION_AUTO = 0,
    ZINF_ATTENTION_CUDNN = 1,
    ZINF_ATTENTION_ZINF = 2
} zinf_attention_impl;
const char *zinf_backend_name(zinf_backend b); // "auto", "host", "cuda", "sim"

// ---- the simulated device ----
// A GPU from its data sheet: every op on a stream takes its modeled time and computes
// nothing; copies between host and device take their bytes' time on the PCIe link and
// move no data (host to host copies are real); device memory is accounted against the
// modeled capacity and reserved without being backed, so the device's contents are
// meaningless and a touch from the host faults. Each engine (compute, PCIe each way)
// runs one thing at a time; streams queue for it in the order their work arrives.

typedef enum zinf_sim_gpu {
    ZINF_SIM_H100 = 0,
    ZINF_SIM_H200 = 1,
    ZINF_SIM_A100 = 2,
    ZINF_SIM_RTX4090 = 3
} zinf_sim_gpu;
const char *zinf_sim_gpu_name(zinf_sim_gpu g); // "h100", "h200", "a100", "rtx4090"

typedef struct zinf_sim_params {
    zinf_sim_gpu gpu;
    double tflops;    // > 0: dense 16-bit tensor peak in TFLOP/s instead of the preset's (fp32 scales with it)
    double hbm_gbps;  // > 0: memory bandwidth in GB/s
    double pcie_gbps; // > 0: host link in GB/s each way (the link's rate, before protocol overhead)
    int64_t memory;   // > 0: bytes of device memory
    double nvlink_gbps; // > 0: GPU to GPU within a node, GB/s each way per GPU
    double net_gbps;    // > 0: GPU to GPU across nodes (its network adapter), GB/s each way
    bool virtual_time;  // streams never wait for the clock: work is timed, not paced (a plan's
                        // dry run: the busy times come out at once, events hold modeled times)
} zinf_sim_params;

// Peaks in SI units and the fractions of them each op class reaches (zinf_sim_rates_of
// documents where they come from), and whose attention the modeled card runs.
typedef struct zinf_sim_rates {
    char name[64];                // "H100 SXM5 80GB"
    double flops16, flops32;      // dense tensor bf16/fp16 and fp32 peaks, FLOP/s
    double hbm, pcie;             // bytes/s: memory, host link each way
    double nvlink, net;           // bytes/s each way per GPU: within a node, across nodes
    uint64_t memory;              // bytes
    double matmul_eff, matmul32_eff, unaligned_eff; // 16-bit products, fp32 ones, 16-bit with a side % 8 != 0
    double matmul_fixed_s;                          // added to a 16-bit product beyond the launch
    double hbm_eff, pcie_pinned_eff, pcie_pageable_eff, link_eff;
    double launch_s;              // added to every kernel and collective
    zinf_attention_impl attention; // device.attention: AUTO (zinf_sim_rates_of's) and CUDNN model
                                   // cuDNN's where it takes the shape, ZINF zinf's kernels
} zinf_sim_rates;
void zinf_sim_rates_of(const zinf_sim_params *p, zinf_sim_rates *out);

// Modeled seconds of the op classes, for the sim device and for plans made from it.
// A product of m x k by k x n, batch times: its FLOPs at the matmul rate or its operands'
// bytes at the memory rate, whichever is longer.
double zinf_sim_matmul_s(const zinf_sim_rates *r, zinf_dtype dt, double m, double n, double k, double batch);
// A kernel bound by memory: bytes read and written at the memory rate.
double zinf_sim_memory_s(const zinf_sim_rates *r, double bytes);
// Attention: 2 products of 2 hd FLOPs forward and 7 backward for each (query, key) pair
// a query sees (causal, within the window; 0: none), per query head, at the fraction of
// the 16-bit peak the attention r->attention names reached on a GPU. cuDNN's fused
// attention takes bf16 and fp16 heads whose size is a multiple of 8 up to 256 (2 tokens
// or more); zinf's tiled kernels run the rest, with hd padded as they pad it: bf16 and
// fp16 heads of 33 to 128 channels on tensor cores, fp32 and other heads on CUDA cores at
// matmul32_eff of the fp32 peak (not yet measured on a GPU). The scores stay on chip: no
// memory term.
double zinf_sim_attention_s(const zinf_sim_rates *r, zinf_dtype dt, int B, int T, int NH, int hd, int window,
                            bool backward);
// Bytes over the PCIe link from pinned or pageable host memory (no launch cost).
double zinf_sim_copy_s(const zinf_sim_rates *r, double bytes, bool pinned);
// A collective in which this GPU receives intra bytes from GPUs on its node and inter
// bytes from other nodes: each byte at the rate of the link it crosses.
double zinf_sim_collective_s(const zinf_sim_rates *r, double intra, double inter);

// The host backend's capacity when none is configured: a set amount, so that "does
// not fit on the device" happens on a machine with plenty of RAM too.
#define ZINF_HOST_DEVICE_DEFAULT_LIMIT (4ull << 30)

typedef struct zinf_device_params {
    zinf_backend backend; // AUTO: cuda when this build has it and a GPU is present, else host
    int index;            // CUDA device index
    int64_t memory_limit; // bytes the device may hold; <= 0: the card's memory (cuda, sim),
                          // ZINF_HOST_DEVICE_DEFAULT_LIMIT (host)
    zinf_sim_params sim;  // the modeled GPU (sim)
    zinf_attention_impl attention;
} zinf_device_params;

typedef struct zinf_device zinf_device;
typedef struct zinf_stream zinf_stream;
typedef struct zinf_event zinf_event;

typedef struct zinf_device_caps {
    zinf_backend backend;  // HOST, CUDA or SIM, never AUTO
    int index;             // the CUDA device index; -1 on host and sim
    char name[96];         // "NVIDIA H100 80GB HBM3", "host (OpenBLAS ...)", "simulated H100 SXM5 80GB"
    uint64_t total_memory; // the card's memory (cuda) or the machine's RAM (host)
    uint64_t capacity;     // what zinf may allocate: the limit in force
    int cc_major, cc_minor;
    bool async_copy;  // copies overlap compute (streams run concurrently)
    bool bf16_tensor; // bf16 matmul in hardware (tensor cores; AVX512_BF16 on host)
} zinf_device_caps;

typedef struct zinf_device_mem {
    uint64_t capacity;
    uint64_t in_use; // bytes allocated through zinf_device_alloc, not yet freed
    uint64_t peak;   // the most in_use has been
    int64_t allocations;
} zinf_device_mem;

// What zinf_device_create(p) makes, found without making it: the backend AUTO comes to
// and the capacity. Fails as zinf_device_create would, short of opening the device.
typedef struct zinf_device_choice {
    zinf_backend backend; // HOST, CUDA or SIM
    uint64_t capacity;    // what zinf may allocate on it (zinf_device_caps.capacity)
} zinf_device_choice;
zinf_status zinf_device_choose(const zinf_device_params *p, zinf_device_choice *out);

zinf_status zinf_device_create(zinf_device **out, const zinf_device_params *p);
// Frees what is still allocated on it (streams, events and buffers must be gone).
void zinf_device_destroy(zinf_device *d); // NULL is a no-op
const zinf_device_caps *zinf_device_get_caps(const zinf_device *d);
void zinf_device_get_mem(zinf_device *d, zinf_device_mem *out);

// Seconds each engine of the device has been busy since it was opened: kernels, the
// PCIe link each way, and the links to other GPUs (collectives). The sim device models
// them; other backends report zeros.
typedef struct zinf_device_busy {
    double compute_s, h2d_s, d2h_s, link_s;
} zinf_device_busy;
void zinf_device_get_busy(zinf_device *d, zinf_device_busy *out);
// The modeled GPU of a sim device; ZINF_ERR_UNSUPPORTED on other backends.
zinf_status zinf_device_sim_rates(const zinf_device *d, zinf_sim_rates *out);
// On a sim device's stream, in stream order: the links to other GPUs are busy for
// `seconds` (a collective, whose bytes the caller has counted). ZINF_ERR_UNSUPPORTED on
// other backends.
zinf_status zinf_sim_collective(zinf_stream *s, double seconds);

// The op profile: from start to stop, every op launched on d is timed on its stream
// (between two timed events, so ops no longer overlap across streams) and set beside the
// sim model's seconds for the same op on `model`'s GPU. Start and stop while no other
// thread launches on d. Stop waits for the profiled ops and fills out[0..*n) with one row
// per op, dtype and shape launched (at most max rows). zinf device-bench prints them.
typedef struct zinf_op_time {
    const char *op; // "gemm", "attention_fwd", ...
    zinf_dtype dt;
    int64_t shape[4]; // gemm: m, n, k, batch; attention: B, T, heads, head size; norms and
                      // cross entropy: rows, width; embedding: tokens, width; others: elements
    int64_t count;
    double seconds, modeled_s; // on the device; the model's
} zinf_op_time;
zinf_status zinf_device_profile_start(zinf_device *d, const zinf_sim_params *model);
zinf_status zinf_device_profile_stop(zinf_device *d, zinf_op_time *out, int max, int *n);
// The GPU a profile sets a device beside: a sim device's own model (sim, real time);
// else the preset the card's name matches (H200, A100, RTX 4090), an H100 otherwise.
void zinf_device_profile_model(const zinf_device_caps *caps, const zinf_sim_params *sim, zinf_sim_params *out);
// The rows in printing order: one per op and dtype (with shapes, per shape too), the
// longest first; returns how many.
int zinf_op_times_arrange(zinf_op_time *rows, int n, bool shapes);
// Arranged and printed as a table: per op the count, device and model ms and their
// ratio, each divided by `per` (steps), and a total line; returns the rows printed.
int zinf_op_times_print(FILE *f, zinf_op_time *rows, int n, double per, bool shapes);
double zinf_op_times_sum(const zinf_op_time *rows, int n, bool modeled); // seconds, or the model's

// Device memory, accounted against the capacity. `what` names the buffer in errors
// and in the in-use report. Beyond the capacity: ZINF_ERR_NOMEM saying how many bytes
// were asked for what, how many are in use in how many buffers, and what holds them
// (bytes and buffers per `what`, the most first).
// Allocations are aligned to 256 bytes.
zinf_status zinf_device_alloc(zinf_device *d, size_t bytes, const char *what, void **out);
// What an allocation of bytes counts in the account (a plan sums these).
size_t zinf_device_account_bytes(size_t bytes);
// Given back once the work queued on the device's streams before the call has run;
// the caller need not wait for it. NULL is a no-op.
void zinf_device_free(zinf_device *d, void *p);
// The same for a buffer no queued work uses (the caller has waited for its last use):
// its memory may serve the next allocation at once.
void zinf_device_free_unused(zinf_device *d, void *p);

// Pinned (page-locked) host memory on the calling thread's NUMA node, usable by
// async copies at full speed and registered with the device (cudaHostRegister on
// CUDA; mlock on host, where it only warns once when the lock is refused).
zinf_status zinf_pinned_alloc(zinf_device *d, size_t bytes, void **out);
void zinf_pinned_free(zinf_device *d, void *p); // NULL is a no-op
// Pin memory the caller owns (page-aligned) for the life of the registration.
zinf_status zinf_pinned_register(zinf_device *d, void *p, size_t bytes);
void zinf_pinned_unregister(zinf_device *d, void *p);

// ---- streams and events ----
// Work on one stream runs in submission order; work on different streams may run
// concurrently. An event recorded on a stream completes when the work submitted to
// that stream before it has finished; a stream told to wait on an event runs nothing
// submitted after the wait until then. Submitting never blocks on the device.

zinf_status zinf_stream_create(zinf_device *d, zinf_stream **out);
// A stream whose work the device starts ahead of other streams' where both wait for room
// on it (CUDA's greatest stream priority: a hint to its scheduler, which changes no
// result; elsewhere an ordinary stream). Work beside such streams fills what they leave
// idle instead of holding them back.
zinf_status zinf_stream_create_urgent(zinf_device *d, zinf_stream **out);
void zinf_stream_destroy(zinf_stream *s); // waits for its work; NULL is a no-op
// Wait for everything submitted so far; returns the first failure of that work.
zinf_status zinf_stream_sync(zinf_stream *s);
// The backend's own handle, for a library that enqueues its work on the stream (NCCL):
// the cudaStream_t on CUDA, NULL on host.
void *zinf_stream_native(zinf_stream *s);

zinf_status zinf_event_create(zinf_device *d, zinf_event **out);
void zinf_event_destroy(zinf_event *e); // NULL is a no-op
zinf_status zinf_event_record(zinf_event *e, zinf_stream *s);
zinf_status zinf_stream_wait_event(zinf_stream *s, zinf_event *e);
zinf_status zinf_event_sync(zinf_event *e);
bool zinf_event_done(zinf_event *e); // true also when never recorded
// An event that also notes when the stream reached it (recording costs a little more
// on CUDA); the seconds from start's last completed record to end's, both completed.
zinf_status zinf_event_create_timed(zinf_device *d, zinf_event **out);
zinf_status zinf_event_elapsed(zinf_event *start, zinf_event *end, double *seconds);

typedef enum zinf_copy_kind {
    ZINF_COPY_H2D = 0,
    ZINF_COPY_D2H = 1,
    ZINF_COPY_D2D = 2,
    ZINF_COPY_H2H = 3
} zinf_copy_kind;
// Async copy; host memory that is not pinned makes the copy synchronous on CUDA
// (the runtime stages it), as cudaMemcpyAsync does.
zinf_status zinf_copy_async(zinf_stream *s, void *dst, const void *src, size_t bytes, zinf_copy_kind kind);
zinf_status zinf_memset_async(zinf_stream *s, void *dst, int byte, size_t bytes);
// Run fn(arg) on a host thread once the stream's earlier work is done; later work on
// the stream waits for it (cudaLaunchHostFunc). fn must not call the device API.
zinf_status zinf_stream_host_fn(zinf_stream *s, void (*fn)(void *arg), void *arg);

// ---- ops ----
// Device pointers; `dt` is the storage type of activations, weights and their
// gradients (F32, BF16 or F16); arithmetic and accumulation are fp32, statistics
// (layernorm mean/rstd, attention log-sum-exp, losses) are fp32 arrays. Row-major
// throughout. "+=" below means the op accumulates into its output.

// C = alpha * op(A) op(B) + beta * C (+ bias[j] on every row j when bias != NULL),
// op(A) m x k, op(B) k x n, C m x n; beta == 0 never reads C. With batch > 1, item i
// uses A + i*stride_a and likewise for B and C (strides in elements; bias shared).
// The GELU (tanh approximation, as zinf_gelu_fwd) a product's epilogue applies, as
// cuBLASLt's GELU_AUX_BIAS and DGELU epilogues do. With x = alpha op(A) op(B) (+ bias)
// in fp32: ZINF_GEMM_GELU stores c = gelu(x) and aux = x (the input the backward
// reads); ZINF_GEMM_DGELU stores c = x * gelu'(aux) (no bias). Each is rounded once.
// Either needs aux (m x n in the storage type, packed like c), ldc == n, beta == 0 and
// one product.
typedef enum zinf_gemm_act { ZINF_GEMM_PLAIN = 0, ZINF_GEMM_GELU, ZINF_GEMM_DGELU } zinf_gemm_act;

typedef struct zinf_gemm_args {
    zinf_dtype dt;
    bool trans_a, trans_b;
    int m, n, k;
    const void *a;
    int lda;
    const void *b;
    int ldb;
    void *c;
    int ldc;
    const void *bias; // n elements, or NULL
    float alpha, beta;
    int batch; // 0 or 1: one product
    int64_t stride_a, stride_b, stride_c;
    zinf_gemm_act act;
    void *aux; // the activation's input: written by ZINF_GEMM_GELU, read by ZINF_GEMM_DGELU
    // NULL, or m x n packed like c (ldc == n) added before the one rounding: c = alpha
    // op(A) op(B) + bias + residual (a block's residual connection; cuBLASLt's C input
    // beside its output D). Needs beta 0, no activation and one product.
    const void *residual;
} zinf_gemm_args;
zinf_status zinf_gemm(zinf_stream *s, const zinf_gemm_args *a);

// dbias[j] += sum over rows i of dout[i][j]; dout rows x cols. first: dbias = the sums,
// dbias not read (a backward's first write of a gradient, over whatever it held).
zinf_status zinf_bias_grad(zinf_stream *s, zinf_dtype dt, void *dbias, const void *dout, int rows, int cols,
                           bool first);

// out = (x - mean) * rstd * w + b per row of C; mean, rstd saved (fp32, rows).
zinf_status zinf_layernorm_fwd(zinf_stream *s, zinf_dtype dt, void *out, float *mean, float *rstd, const void *x,
                               const void *w, const void *b, int rows, int C, float eps);
// dx += , dw += , db += from dout; first: dw and db written, not read (dx still added).
zinf_status zinf_layernorm_bwd(zinf_stream *s, zinf_dtype dt, void *dx, void *dw, void *db, const void *dout,
                               const void *x, const void *w, const float *mean, const float *rstd, int rows, int C,
                               bool first);

// RMSNorm of Llama per row of C: rstd = 1 / sqrt(mean(x^2) + eps), saved (fp32, rows);
// out = w * n with n = x * rstd rounded to dt first (transformers casts n back to the
// input's dtype before the weight).
zinf_status zinf_rmsnorm_fwd(zinf_stream *s, zinf_dtype dt, void *out, float *rstd, const void *x, const void *w,
                             int rows, int C, float eps);
// dx += , dw += from dout (rows x C), with n = x * rstd in fp32: the input gradient is
// added, as zinf_layernorm_bwd adds it, so a block's norm feeds the residual's gradient
// with no add of its own. first: dw written, not read.
zinf_status zinf_rmsnorm_bwd(zinf_stream *s, zinf_dtype dt, void *dx, void *dw, const void *dout, const void *x,
                             const void *w, const float *rstd, int rows, int C, bool first);

// GELU, tanh approximation: out = gelu(x); dx = gelu'(x) * dout (written, not added).
zinf_status zinf_gelu_fwd(zinf_stream *s, zinf_dtype dt, void *out, const void *x, size_t n);
zinf_status zinf_gelu_bwd(zinf_stream *s, zinf_dtype dt, void *dx, const void *x, const void *dout, size_t n);

// SwiGLU of Llama's MLP on the fused gate|up product gu (rows, 2F), F the intermediate
// size: gate in columns [0, F) and up in [F, 2F) of each row; out (rows, F) = silu(gate) * up.
zinf_status zinf_swiglu_fwd(zinf_stream *s, zinf_dtype dt, void *out, const void *gu, int rows, int F);
// dgu (rows, 2F) = [dout * up * silu'(gate), dout * silu(gate)] (written; dgu may be gu).
zinf_status zinf_swiglu_bwd(zinf_stream *s, zinf_dtype dt, void *dgu, const void *gu, const void *dout, int rows,
                            int F);

// Rotary position embedding of Llama, rotate-half (element i of a head pairs with
// i + hd/2), in place on the q and k heads of a packed qkv (B, T, (NH + 2 NKV) hd): NH q
// heads, NKV k heads, then NKV v heads, left alone. At position t, with c = cos_tab[t][i]
// and s = sin_tab[t][i]: y_i = x_i c - x_{i+hd/2} s, y_{i+hd/2} = x_{i+hd/2} c + x_i s.
// cos_tab, sin_tab (T, hd/2) fp32.
zinf_status zinf_rope_fwd(zinf_stream *s, zinf_dtype dt, void *qkv, const float *cos_tab, const float *sin_tab, int B,
                          int T, int NH, int NKV, int hd);
// The backward: dqkv (the same layout) turned back by the same angles, in place.
zinf_status zinf_rope_bwd(zinf_stream *s, zinf_dtype dt, void *dqkv, const float *cos_tab, const float *sin_tab, int B,
                          int T, int NH, int NKV, int hd);

// Causal self-attention: GPT-2's multi-head, or grouped-query heads with an optional
// sliding window (Llama, Mistral, Qwen2). qkv (B, T, (NH + 2 NKV) hd): along the channels
// of a token NH query heads, NKV key heads, NKV value heads, hd channels each (GPT-2's
// (B, T, 3C) when NKV = NH); query head h uses kv head h / (NH / NKV). Scores are scaled
// by hd^-0.5; query t sees keys k with t - window < k <= t (every k <= t when window is
// 0). out (B, T, C) with the heads side by side; lse (B, NH, T) fp32, the log-sum-exp of
// each softmax row (scaled scores), saved for the backward, which recomputes the
// probabilities from it; the backward also reads out, the forward's output. ws: a
// workspace of zinf_attention_workspace() bytes (the backend's scratch: on CUDA
// B NH T floats, O(T), never the T x T scores). CUDA takes hd up to 256.
typedef struct zinf_attention_args {
    zinf_dtype dt;
    int B, T, C, NH; // C = NH hd: the width of out
    int NKV;         // key/value heads, dividing NH; 0: NH
    int hd;          // channels per head; 0: C / NH
    int window;      // a query sees at most this many keys, itself included; 0: no limit
    const void *qkv;
    void *out;        // written by the forward, read by the backward
    float *lse;
    void *dqkv;       // backward: written, the layout of qkv; a kv head's sums over its query heads
    const void *dout; // backward: (B, T, C)
    void *ws;
} zinf_attention_args;
// Bytes of workspace for a's sizes (the buffers are not read).
size_t zinf_attention_workspace(zinf_device *d, const zinf_attention_args *a);
// The same for a backend, without a device (a plan).
size_t zinf_backend_attention_workspace(zinf_backend b, const zinf_attention_args *a);
zinf_status zinf_attention_fwd(zinf_stream *s, const zinf_attention_args *a);
zinf_status zinf_attention_bwd(zinf_stream *s, const zinf_attention_args *a);

// Softmax cross-entropy over rows of V logits, each row ld elements after the last
// (ld >= V), fused with its gradient: losses[i] = logsumexp(logits[i]) -
// logits[i][targets[i]] (fp32); when dlogits != NULL (rows ld apart too; it may be
// logits itself), dlogits = (softmax(logits) - onehot(targets)) * dscale, and columns
// [V, ld) of each row are set to zero: a head padded past its vocabulary masks the
// pad's logits out of the loss and out of the products its gradient goes through.
// lse != NULL: lse[i] = the row's logsumexp as the op computed it (fp32), for
// zinf_cross_entropy_grad; NULL: not wanted.
zinf_status zinf_cross_entropy(zinf_stream *s, zinf_dtype dt, float *losses, float *lse, void *dlogits,
                               const void *logits, const int32_t *targets, int rows, int V, int ld, float dscale);
// The fused op's logit gradient for columns [v0, v0 + n) of rows whose log-sum-exp is
// known: dlogits[r][j] = (exp(logits[r][j] - lse[r]) - (v0 + j == targets[r])) * dscale,
// exactly as zinf_cross_entropy computes it, so a row's column blocks give its bits (no 1
// is subtracted for a target outside the block). For an output layer gathered tile by tile.
// logits and dlogits: rows x n, row-major (dlogits may be logits); lse: the fused op's.
zinf_status zinf_cross_entropy_grad(zinf_stream *s, zinf_dtype dt, void *dlogits, const void *logits,
                                    const int32_t *targets, const float *lse, int rows, int n, int v0, float dscale);

// Part of the tables, for an embedding gathered tile by tile: wte holds elements
// [wte_lo, wte_lo + wte_n) of the whole table (rows of C, row-major), wpe elements
// [wpe_lo, wpe_lo + wpe_n) of its; a part with n 0 is absent (its pointer may be NULL).
typedef struct zinf_embedding_part {
    int64_t wte_lo, wte_n, wpe_lo, wpe_n;
} zinf_embedding_part;

// out[b, t] = wte[tok[b, t]] + wpe[t], rows of C; wpe NULL: no position table (the
// Llama family's rotary positions live in attention).
// part != NULL: out += each element the part's windows hold (wte and wpe point at the
// windows' first elements), each add rounded once; the rest of out is left as it is.
// Disjoint parts covering the tables, applied in any order to a zeroed out, give the
// plain op's bits.
zinf_status zinf_embedding_fwd(zinf_stream *s, zinf_dtype dt, void *out, const int32_t *tok, const void *wte,
                               const void *wpe, int B, int T, int C, const zinf_embedding_part *part);
// dwte[tok] += dout, dwpe[t] += dout (dwpe NULL: none), each row's sum formed in fp32
// and added once.
// order: the B*T positions sorted by token id (stably), so the sums are deterministic.
// part != NULL: dwte and dwpe hold the part's windows, and only their elements get
// their sums (the plain op's), so disjoint parts covering the tables give its bits.
zinf_status zinf_embedding_bwd(zinf_stream *s, zinf_dtype dt, void *dwte, void *dwpe, const void *dout,
                               const int32_t *tok, const int32_t *order, int B, int T, int C,
                               const zinf_embedding_part *part);

// out = a + b (out may be a or b); x *= scale; dst = src converted (round to nearest even).
zinf_status zinf_add(zinf_stream *s, zinf_dtype dt, void *out, const void *a, const void *b, size_t n);
zinf_status zinf_scale(zinf_stream *s, zinf_dtype dt, void *x, float scale, size_t n);
zinf_status zinf_cast(zinf_stream *s, void *dst, zinf_dtype dst_dt, const void *src, zinf_dtype src_dt, size_t n);
// sums += x widened to fp32: the bits of a cast to fp32 and an fp32 add, in one pass.
// With first, sums = 0 + x instead, not read: the bits of accumulating into zeros (a
// -0 becomes +0), without the zeroing pass.
zinf_status zinf_accumulate(zinf_stream *s, float *sums, const void *x, zinf_dtype dt, size_t n, bool first);

// out[0] = sum of x^2 (fp64, in an order fixed for each backend and n); out[1] = 1 when
// some element is inf or NaN, else 0. out: two doubles in device memory.
zinf_status zinf_sumsq(zinf_stream *s, zinf_dtype dt, const void *x, size_t n, double *out);
// zinf_sumsq of each of n pieces, each out the bits zinf_sumsq gives its piece, in a few
// launches where zinf_sumsq makes one a piece (a step's gradient norm: a piece a module).
typedef struct zinf_sumsq_piece {
    const void *x;
    size_t n;
    double *out;
} zinf_sumsq_piece;
zinf_status zinf_sumsq_many(zinf_stream *s, zinf_dtype dt, const zinf_sumsq_piece *pieces, int n);

// Symmetric group-wise quantization for communication (ZeRO++'s qwZ: bits 8, qgZ: bits 4).
// x (n elements of dt) splits into groups of `group` elements, the last one possibly
// shorter; group j gets a = max |x| over it, scale[j] = a / Q (fp32) with Q = 2^(bits-1),
// and each element q = clamp(round_half_even(x * Q / a), -Q, Q - 1), the quotient formed
// in double so q is the correctly rounded value of the exact x·Q/a (the same bits on
// every backend). A group of zeros: scale 1, q 0. A group holding inf or NaN: scale NaN,
// q 0, so it dequantizes to NaN and the overflow check sees it.
// bits 8: q holds n int8; bits 4: two per byte, element 2i in the low nibble and 2i + 1
// in the high one (two's complement nibbles), ceil(n / 2) bytes; group must then be even.
// scale: ceil(n / group) floats. All device memory.
zinf_status zinf_quantize(zinf_stream *s, int bits, zinf_dtype dt, const void *x, size_t n, size_t group, void *q,
                          float *scale);
// out = q * scale[j], the product in fp32 rounded once to dt (round to nearest even);
// with accumulate (dt must be F32), out += that product instead.
zinf_status zinf_dequantize(zinf_stream *s, int bits, const void *q, const float *scale, size_t n, size_t group,
                            zinf_dtype dt, void *out, bool accumulate);

// The optimizer step on device memory (tile pointers are device pointers): the same
// arithmetic as cpu_adam, bit for bit.
zinf_status zinf_device_optim(zinf_stream *s, const zinf_optim_hparams *h, const zinf_optim_tile *t);
// Some rows of that step ahead of it: element j of row r (r = rows[k] for k < count, or
// k itself with rows NULL) is the tile's element r row_len + j, whose new weight is
// written to t->out alone, with the bits zinf_device_optim gives it; the states are read,
// not written. For a reader that needs a few rows of a module before the module's
// update runs (the next forward's lookup, runtime/engine/step.c). rows is device
// memory; a row may repeat (it is written with the same bits each time), and a row not
// wholly inside the tile is skipped. t->out_dtype must be BF16 or F16.
zinf_status zinf_device_optim_rows(zinf_stream *s, const zinf_optim_hparams *h, const zinf_optim_tile *t,
                                   const int32_t *rows, int count, int row_len);

#ifdef __cplusplus
}
#endif
#endif
