// The CUDA backend's table: device, memory, pinned registration, streams, events,
// copies and the op dispatch (CUDA Runtime API reference; cuBLASLt reference).
// Every entry point makes the device current first: the engine and the CLI call in
// from worker threads, and the current device is per thread.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention_plan.h"
#include "cuda_backend.h"

// ---- errors ----

// `call` is the stringified call; its name is the text before the parenthesis.
static int call_name_len(const char *call) {
    const char *paren = strchr(call, '(');
    return paren ? (int)(paren - call) : (int)strlen(call);
}

zinf_status cuda_fail_at(cudaError_t err, const char *call, const char *file, int line) {
    cudaGetLastError(); // a non-sticky error must not be reported again by a launch check
    return zinf_fail(ZINF_ERR_CUDA, "cuda: %.*s failed (%s:%d): %s", call_name_len(call), call, file, line,
                     cudaGetErrorString(err));
}

zinf_status cublas_fail_at(cublasStatus_t st, const char *call, const char *file, int line) {
    return zinf_fail(ZINF_ERR_CUDA, "cuda: %.*s failed (%s:%d): %s", call_name_len(call), call, file, line,
                     cublasLtGetStatusString(st));
}

zinf_status cuda_bad_dtype(zinf_dtype dt, const char *op) {
    return zinf_fail(ZINF_ERR_INVAL, "cuda: %s: storage type %s is not fp32, bf16 or fp16", op, zinf_dtype_name(dt));
}

// For the entry points that cannot return a status.
#define CUDA_WARN(call)                                                                                                \
    do {                                                                                                               \
        cudaError_t err_ = (call);                                                                                     \
        if (err_ != cudaSuccess) {                                                                                     \
            cuda_fail_at(err_, #call, __FILE__, __LINE__);                                                             \
            ZINF_LOG_WARN("%s", zinf_last_error());                                                                    \
        }                                                                                                              \
    } while (0)

// ---- device ----

static zinf_status cuda_describe(const zinf_device_params *p, char name[96], uint64_t *memory) {
    int index = p->index;
    cudaDeviceProp prop;
    cudaError_t err = cudaGetDeviceProperties(&prop, index);
    if (err != cudaSuccess) {
        cudaGetLastError();
        return zinf_fail(ZINF_ERR_CUDA, "cuda device %d: %s", index, cudaGetErrorString(err));
    }
    snprintf(name, 96, "%.95s", prop.name);
    *memory = prop.totalGlobalMem;
    return ZINF_OK;
}

// The device's memory pool and its two streams. Freed memory stays in the pool for the
// next allocation (the release threshold's default, 0, would hand it back to the driver
// at every synchronization, and the next step would map it again). An allocation takes
// only memory whose free has run: let to reuse a free still waiting on the device's
// work, the pool would make the allocation wait for that work, and the host with it.
static zinf_status pool_open(cuda_device *cd) {
    cudaMemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypeNone;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = cd->index;
    uint64_t keep = UINT64_MAX;
    int no = 0;
    ZINF_CUDA_CHECK(cudaMemPoolCreate(&cd->pool, &props));
    ZINF_CUDA_CHECK(cudaMemPoolSetAttribute(cd->pool, cudaMemPoolAttrReleaseThreshold, &keep));
    ZINF_CUDA_CHECK(cudaMemPoolSetAttribute(cd->pool, cudaMemPoolReuseAllowInternalDependencies, &no));
    ZINF_CUDA_CHECK(cudaStreamCreateWithFlags(&cd->alloc_stream, cudaStreamNonBlocking));
    ZINF_CUDA_CHECK(cudaStreamCreateWithFlags(&cd->free_stream, cudaStreamNonBlocking));
    return ZINF_OK;
}

// What cuda_open made, with the device current; the pool's frees run first.
static void release(cuda_device *cd) {
    cudaStream_t pool_streams[2] = {cd->alloc_stream, cd->free_stream};
    for (int i = 0; i < 2; i++) {
        if (!pool_streams[i]) continue;
        CUDA_WARN(cudaStreamSynchronize(pool_streams[i]));
        CUDA_WARN(cudaStreamDestroy(pool_streams[i]));
    }
    if (cd->pool) CUDA_WARN(cudaMemPoolDestroy(cd->pool));
    pthread_mutex_destroy(&cd->streams_lock);
    pthread_mutex_destroy(&cd->lt_lock);
    cudnn_attention_close(cd->dnn);
    cublasLtDestroy(cd->lt);
    free(cd);
}

static zinf_status cuda_open(zinf_device *d) {
    int index = d->params.index;
    cudaDeviceProp prop;
    cudaError_t err = cudaSetDevice(index);
    if (err == cudaSuccess) err = cudaGetDeviceProperties(&prop, index);
    if (err != cudaSuccess) {
        cudaGetLastError();
        return zinf_fail(ZINF_ERR_CUDA, "cuda device %d: %s", index, cudaGetErrorString(err));
    }
    cuda_device *cd = (cuda_device *)calloc(1, sizeof *cd);
    if (!cd) return zinf_fail(ZINF_ERR_NOMEM, "cuda device %d: out of host memory", index);
    cd->index = index;
    cublasStatus_t bs = cublasLtCreate(&cd->lt);
    if (bs != CUBLAS_STATUS_SUCCESS) {
        free(cd);
        return cublas_fail_at(bs, "cublasLtCreate", __FILE__, __LINE__);
    }
    pthread_mutex_init(&cd->streams_lock, NULL);
    pthread_mutex_init(&cd->lt_lock, NULL);
    zinf_status st = pool_open(cd);
    if (st == ZINF_OK && d->params.attention != ZINF_ATTENTION_ZINF)
        st = cudnn_attention_open(d->params.attention, &cd->dnn);
    if (st != ZINF_OK) {
        release(cd);
        return st;
    }
    d->impl = cd;
    d->caps.backend = ZINF_BACKEND_CUDA;
    d->caps.index = index;
    snprintf(d->caps.name, sizeof d->caps.name, "%.*s", (int)sizeof d->caps.name - 1, prop.name);
    d->caps.total_memory = prop.totalGlobalMem;
    d->caps.cc_major = prop.major;
    d->caps.cc_minor = prop.minor;
    d->caps.async_copy = true;
    d->caps.bf16_tensor = prop.major >= 8;
    return ZINF_OK;
}

static void cuda_close(zinf_device *d) {
    cuda_device *cd = cuda_dev_of(d);
    if (!cd) return;
    CUDA_WARN(cudaSetDevice(cd->index));
    release(cd);
    d->impl = NULL;
}

// ---- memory ----

static zinf_status cuda_mem_alloc(zinf_device *d, size_t bytes, void **out) {
    cuda_device *cd = cuda_dev_of(d);
    *out = NULL;
    ZINF_CUDA_CHECK(cudaSetDevice(cd->index));
    cudaError_t err = cudaMallocFromPoolAsync(out, bytes, cd->pool, cd->alloc_stream);
    if (err == cudaErrorMemoryAllocation) {
        // Once the frees queued so far on both streams have run, their memory, given back
        // to the driver, serves any size (the pool's blocks keep the sizes freed).
        cudaGetLastError();
        ZINF_CUDA_CHECK(cudaStreamSynchronize(cd->alloc_stream));
        ZINF_CUDA_CHECK(cudaStreamSynchronize(cd->free_stream));
        ZINF_CUDA_CHECK(cudaMemPoolTrimTo(cd->pool, 0));
        err = cudaMallocFromPoolAsync(out, bytes, cd->pool, cd->alloc_stream);
    }
    if (err != cudaSuccess) return cuda_fail_at(err, "cudaMallocFromPoolAsync", __FILE__, __LINE__);
    // Stream-ordered: usable on the allocating stream at once, on every other stream
    // once the allocation has run there (it waits for nothing else).
    err = cudaStreamSynchronize(cd->alloc_stream);
    if (err != cudaSuccess) {
        *out = NULL;
        return cuda_fail_at(err, "cudaStreamSynchronize", __FILE__, __LINE__);
    }
    return ZINF_OK;
}

// Given back on the allocating stream when no queued work uses it (its memory serves the
// next allocation at once); else on the free stream, once the work queued before the
// call on every stream of the device has run.
static void cuda_mem_free(zinf_device *d, void *p, size_t bytes, bool unused) {
    (void)bytes;
    cuda_device *cd = cuda_dev_of(d);
    CUDA_WARN(cudaSetDevice(cd->index));
    if (unused) {
        CUDA_WARN(cudaFreeAsync(p, cd->alloc_stream));
        return;
    }
    pthread_mutex_lock(&cd->streams_lock);
    for (cuda_stream *cs = cd->streams; cs; cs = cs->next) {
        CUDA_WARN(cudaEventRecord(cs->reached, cs->st));
        CUDA_WARN(cudaStreamWaitEvent(cd->free_stream, cs->reached, 0));
    }
    pthread_mutex_unlock(&cd->streams_lock);
    CUDA_WARN(cudaFreeAsync(p, cd->free_stream));
}

// Portable: the pages count as pinned for every device, not only this one.
static zinf_status cuda_host_register(zinf_device *d, void *p, size_t bytes) {
    ZINF_CUDA_CHECK(cudaSetDevice(cuda_dev_of(d)->index));
    ZINF_CUDA_CHECK(cudaHostRegister(p, bytes, cudaHostRegisterPortable));
    return ZINF_OK;
}

static void cuda_host_unregister(zinf_device *d, void *p, size_t bytes) {
    (void)bytes; // the runtime knows the registered range from its start
    CUDA_WARN(cudaSetDevice(cuda_dev_of(d)->index));
    CUDA_WARN(cudaHostUnregister(p));
}

// ---- streams ----

// Non-blocking: the streams never wait for work on the legacy default stream, which
// some library may use behind our back. An urgent stream takes the device's greatest
// priority (the numerically least); the others CUDA's default, its least.
static zinf_status cuda_stream_create(zinf_stream *s) {
    ZINF_CUDA_CHECK(cudaSetDevice(cuda_dev_of(s->dev)->index));
    int least = 0, greatest = 0;
    if (s->urgent) ZINF_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    cuda_stream *cs = (cuda_stream *)calloc(1, sizeof *cs);
    if (!cs) return zinf_fail(ZINF_ERR_NOMEM, "cuda stream: out of host memory");
    cudaError_t err = cudaStreamCreateWithPriority(&cs->st, cudaStreamNonBlocking, s->urgent ? greatest : least);
    if (err != cudaSuccess) {
        free(cs);
        return cuda_fail_at(err, "cudaStreamCreateWithPriority", __FILE__, __LINE__);
    }
    err = cudaMalloc(&cs->d_lt_ws, CUDA_LT_WORKSPACE);
    if (err == cudaSuccess) err = cudaEventCreateWithFlags(&cs->reached, cudaEventDisableTiming);
    if (err != cudaSuccess) {
        zinf_status st = cuda_fail_at(err, "the stream's cuBLASLt workspace and event", __FILE__, __LINE__);
        if (cs->d_lt_ws) cudaFree(cs->d_lt_ws);
        cudaStreamDestroy(cs->st);
        free(cs);
        return st;
    }
    cuda_device *cd = cuda_dev_of(s->dev);
    pthread_mutex_lock(&cd->streams_lock);
    cs->next = cd->streams;
    cd->streams = cs;
    pthread_mutex_unlock(&cd->streams_lock);
    s->impl = cs;
    return ZINF_OK;
}

static void cuda_stream_destroy(zinf_stream *s) {
    cuda_stream *cs = cuda_stream_of(s);
    if (!cs) return;
    cuda_device *cd = cuda_dev_of(s->dev);
    CUDA_WARN(cudaSetDevice(cd->index));
    pthread_mutex_lock(&cd->streams_lock);
    for (cuda_stream **at = &cd->streams; *at; at = &(*at)->next)
        if (*at == cs) {
            *at = cs->next;
            break;
        }
    pthread_mutex_unlock(&cd->streams_lock);
    CUDA_WARN(cudaStreamSynchronize(cs->st));
    if (cs->d_lt_ws) CUDA_WARN(cudaFree(cs->d_lt_ws));
    CUDA_WARN(cudaEventDestroy(cs->reached));
    CUDA_WARN(cudaStreamDestroy(cs->st));
    free(cs);
    s->impl = NULL;
}

static zinf_status cuda_stream_sync(zinf_stream *s) {
    ZINF_CUDA_CHECK(cudaSetDevice(cuda_dev_of(s->dev)->index));
    ZINF_CUDA_CHECK(cudaStreamSynchronize(cuda_stream_of(s)->st));
    return ZINF_OK;
}

static void *cuda_stream_native(zinf_stream *s) { return (void *)cuda_stream_of(s)->st; }

// ---- events ----
// e->impl is the cudaEvent_t itself. Without timing, recording and waiting are cheapest.

static zinf_status cuda_event_create(zinf_event *e) {
    cudaEvent_t ev;
    ZINF_CUDA_CHECK(cudaSetDevice(cuda_dev_of(e->dev)->index));
    ZINF_CUDA_CHECK(cudaEventCreateWithFlags(&ev, e->timed ? cudaEventDefault : cudaEventDisableTiming));
    e->impl = (void *)ev;
    return ZINF_OK;
}

static void cuda_event_destroy(zinf_event *e) {
    if (!e->impl) return;
    CUDA_WARN(cudaSetDevice(cuda_dev_of(e->dev)->index));
    CUDA_WARN(cudaEventDestroy((cudaEvent_t)e->impl));
    e->impl = NULL;
}

static zinf_status cuda_event_record(zinf_event *e, zinf_stream *s) {
    ZINF_CUDA_CHECK(cudaSetDevice(cuda_dev_of(s->dev)->index));
    ZINF_CUDA_CHECK(cudaEventRecord((cudaEvent_t)e->impl, cuda_stream_of(s)->st));
    return ZINF_OK;
}

static zinf_status cuda_stream_wait_event(zinf_stream *s, zinf_event *e) {
    ZINF_CUDA_CHECK(cudaSetDevice(cuda_dev_of(s->dev)->index));
    ZINF_CUDA_CHECK(cudaStreamWaitEvent(cuda_stream_of(s)->st, (cudaEvent_t)e->impl, 0));
    return ZINF_OK;
}

static zinf_status cuda_event_sync(zinf_event *e) {
    ZINF_CUDA_CHECK(cudaSetDevice(cuda_dev_of(e->dev)->index));
    ZINF_CUDA_CHECK(cudaEventSynchronize((cudaEvent_t)e->impl));
    return ZINF_OK;
}

static zinf_status cuda_event_elapsed(zinf_event *start, zinf_event *end, double *seconds) {
    float ms = 0;
    ZINF_CUDA_CHECK(cudaEventElapsedTime(&ms, (cudaEvent_t)start->impl, (cudaEvent_t)end->impl));
    *seconds = 1e-3 * (double)ms;
    return ZINF_OK;
}

// cudaSuccess also for an event never recorded. A failure other than "not ready"
// counts as done, so that a caller polling for it goes on to a sync, which reports it.
static bool cuda_event_done(zinf_event *e) {
    if (cudaSetDevice(cuda_dev_of(e->dev)->index) != cudaSuccess) {
        cudaGetLastError();
        return true;
    }
    cudaError_t err = cudaEventQuery((cudaEvent_t)e->impl);
    if (err == cudaSuccess) return true;
    cudaGetLastError(); // "not ready" is not a failure; keep it from a later launch check
    if (err == cudaErrorNotReady) return false;
    ZINF_LOG_WARN("cuda: cudaEventQuery failed: %s", cudaGetErrorString(err));
    return true;
}

// ---- copies ----
// cudaMemcpyDefault: with unified addressing the runtime tells the direction from the
// pointers, which also covers memory the caller mislabels.

static zinf_status cuda_copy(zinf_stream *s, void *dst, const void *src, size_t bytes, zinf_copy_kind kind) {
    (void)kind;
    ZINF_CUDA_CHECK(cudaSetDevice(cuda_dev_of(s->dev)->index));
    ZINF_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, cuda_stream_of(s)->st));
    return ZINF_OK;
}

static zinf_status cuda_memset(zinf_stream *s, void *dst, int byte, size_t bytes) {
    ZINF_CUDA_CHECK(cudaSetDevice(cuda_dev_of(s->dev)->index));
    ZINF_CUDA_CHECK(cudaMemsetAsync(dst, byte, bytes, cuda_stream_of(s)->st));
    return ZINF_OK;
}

static zinf_status cuda_host_fn(zinf_stream *s, void (*fn)(void *arg), void *arg) {
    ZINF_CUDA_CHECK(cudaSetDevice(cuda_dev_of(s->dev)->index));
    ZINF_CUDA_CHECK(cudaLaunchHostFunc(cuda_stream_of(s)->st, fn, arg));
    return ZINF_OK;
}

// ---- ops ----

static zinf_status cuda_launch(zinf_stream *s, const op_record *op) {
    cuda_device *cd = cuda_dev_of(s->dev);
    cuda_stream *cs = cuda_stream_of(s);
    cudaStream_t st = cs->st;
    zinf_dtype dt = op->dt;
    ZINF_CUDA_CHECK(cudaSetDevice(cd->index));
    switch (op->kind) {
    case OP_GEMM: return cuda_gemm(cd, cs, &op->u.gemm);
    case OP_BIAS_GRAD: return cuda_bias_grad(cs, dt, &op->u.ew);
    case OP_LAYERNORM_FWD: return cuda_layernorm_fwd(st, dt, &op->u.ln);
    case OP_LAYERNORM_BWD: return cuda_layernorm_bwd(cs, dt, &op->u.ln);
    case OP_RMSNORM_FWD: return cuda_rmsnorm_fwd(st, dt, &op->u.ln);
    case OP_RMSNORM_BWD: return cuda_rmsnorm_bwd(cs, dt, &op->u.ln);
    case OP_GELU_FWD: return cuda_gelu_fwd(st, dt, &op->u.ew);
    case OP_GELU_BWD: return cuda_gelu_bwd(st, dt, &op->u.ew);
    case OP_SWIGLU_FWD: return cuda_swiglu_fwd(st, dt, &op->u.ew);
    case OP_SWIGLU_BWD: return cuda_swiglu_bwd(st, dt, &op->u.ew);
    case OP_ROPE_FWD: return cuda_rope(st, dt, &op->u.rope, false);
    case OP_ROPE_BWD: return cuda_rope(st, dt, &op->u.rope, true);
    case OP_ATTENTION_FWD: return cudnn_attention_run(cd->dnn, st, &op->u.attn, false);
    case OP_ATTENTION_BWD: return cudnn_attention_run(cd->dnn, st, &op->u.attn, true);
    case OP_CROSS_ENTROPY: return cuda_cross_entropy(st, dt, &op->u.xent);
    case OP_CROSS_ENTROPY_GRAD: return cuda_cross_entropy_grad(st, dt, &op->u.xgrad);
    case OP_EMBEDDING_FWD: return cuda_embedding_fwd(st, dt, &op->u.emb);
    case OP_EMBEDDING_BWD: return cuda_embedding_bwd(st, dt, &op->u.emb);
    case OP_ADD: return cuda_add(st, dt, &op->u.ew);
    case OP_SCALE: return cuda_scale(st, dt, &op->u.ew);
    case OP_CAST: return cuda_cast(st, dt, &op->u.ew);
    case OP_ACCUMULATE: return cuda_accumulate(st, &op->u.ew);
    case OP_SUMSQ: return cuda_sumsq(cs, dt, &op->u.sumsq);
    case OP_QUANTIZE: return cuda_quantize(st, dt, &op->u.quant);
    case OP_DEQUANTIZE: return cuda_dequantize(st, dt, &op->u.quant);
    case OP_OPTIM: return cuda_optim(st, &op->u.optim);
    case OP_OPTIM_ROWS: return cuda_optim_rows(st, &op->u.optim);
    case OP_COLLECTIVE: break; // the sim device's alone
    }
    return zinf_fail(ZINF_ERR_INTERNAL, "cuda: unknown op %d", (int)op->kind);
}

// zinf's kernels' workspace, or cuDNN's where its plans for the shape may run.
static size_t cuda_attention_workspace(zinf_device *d, const zinf_attention_args *a) {
    CUDA_WARN(cudaSetDevice(cuda_dev_of(d)->index)); // cuDNN builds its plans on the current device
    size_t own = att_workspace_bytes(a->B, a->T, a->NH), dnn = cudnn_attention_workspace(cuda_dev_of(d)->dnn, a);
    return dnn > own ? dnn : own;
}

extern "C" {

const backend_ops zinf_cuda_backend = {
    "cuda",
    cuda_describe,
    cuda_open,
    cuda_close,
    cuda_mem_alloc,
    cuda_mem_free,
    cuda_host_register,
    cuda_host_unregister,
    cuda_stream_create,
    cuda_stream_destroy,
    cuda_stream_sync,
    cuda_stream_native,
    cuda_event_create,
    cuda_event_destroy,
    cuda_event_record,
    cuda_stream_wait_event,
    cuda_event_sync,
    cuda_event_done,
    cuda_event_elapsed,
    cuda_copy,
    cuda_memset,
    cuda_host_fn,
    cuda_launch,
    nullptr, // busy: a real GPU's time is measured, not modeled
    cuda_attention_workspace,
};

} // extern "C"
