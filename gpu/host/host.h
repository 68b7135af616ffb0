// The host backend's ops, run on a stream's thread: fp32 arithmetic over storage of
// any dtype, each value widened when loaded and rounded to nearest even when stored.
#ifndef ZINF_GPU_HOST_H
#define ZINF_GPU_HOST_H

#include <math.h>

#include "../internal.h"
#include "zinf_half.h"

// Growable fp32 staging buffers owned by one stream's thread (never shared).
enum { SCRATCH_SLOTS = 6 };
typedef struct host_scratch {
    float *buf[SCRATCH_SLOTS];
    size_t cap[SCRATCH_SLOTS];
} host_scratch;

// Slot i with room for n floats (contents undefined); NULL when memory is out, with
// the failure recorded.
float *host_scratch_get(host_scratch *s, int slot, size_t n);
void host_scratch_free(host_scratch *s);

zinf_status host_run_op(const op_record *op, host_scratch *s);
zinf_status host_gemm(const zinf_gemm_args *g, host_scratch *s);
void host_blas_fix_threads(void); // one OpenBLAS thread: the same bits on every machine

// n values from p (element offset at) into fp32 out.
static inline void ld_row(float *out, const void *p, zinf_dtype dt, size_t at, size_t n) {
    if (dt == ZINF_DTYPE_F32) {
        memcpy(out, (const float *)p + at, n * sizeof *out);
        return;
    }
    for (size_t i = 0; i < n; i++)
        out[i] = dt_load(p, dt, at + i);
}

static inline void st_row(void *p, zinf_dtype dt, size_t at, const float *v, size_t n) {
    if (dt == ZINF_DTYPE_F32) {
        memcpy((float *)p + at, v, n * sizeof *v);
        return;
    }
    for (size_t i = 0; i < n; i++)
        dt_store(p, dt, at + i, v[i]);
}

// GELU's tanh approximation and its derivative, for the elementwise ops and the
// products' epilogue.
#define GELU_SCALING_FACTOR 0.7978845608028654f // sqrt(2 / pi)
static inline float host_gelu(float x) {
    float cube = 0.044715f * x * x * x;
    return 0.5f * x * (1.0f + tanhf(GELU_SCALING_FACTOR * (x + cube)));
}
static inline float host_gelu_grad(float x) {
    float cube = 0.044715f * x * x * x, th = tanhf(GELU_SCALING_FACTOR * (x + cube));
    return 0.5f * (1.0f + th) + x * 0.5f * (1.0f - th * th) * GELU_SCALING_FACTOR * (1.0f + 3.0f * 0.044715f * x * x);
}

#endif
