// Shared by the device-layer tests: the device the suite runs on (ZINF_TEST_BACKEND,
// host unless `make test BACKEND=cuda`), and copies between test memory and it.
#ifndef ZINF_TEST_GPU_H
#define ZINF_TEST_GPU_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zinf.h"
#include "zinf_half.h"

static inline zinf_backend test_backend(void) {
    const char *b = getenv("ZINF_TEST_BACKEND");
    return b && strcmp(b, "cuda") == 0 ? ZINF_BACKEND_CUDA : ZINF_BACKEND_HOST;
}

// The attention test_device's devices run (device.attention): zinf's kernels, which
// "auto" would leave unchecked on a GPU where cuDNN loads; test_cudnn_begin sets it.
static zinf_attention_impl test_attention_impl = ZINF_ATTENTION_ZINF;

// The suite's device with the given capacity (0: the default); exits 1 when it cannot
// be made, since every backend the suite is asked to run on must work.
static inline zinf_device *test_device(int64_t limit) {
    zinf_device *d;
    zinf_device_params p = {.backend = test_backend(), .memory_limit = limit, .attention = test_attention_impl};
    if (zinf_device_create(&d, &p) != ZINF_OK) {
        fprintf(stderr, "cannot create the %s device: %s\n", zinf_backend_name(p.backend), zinf_last_error());
        exit(1);
    }
    return d;
}

// From here test_device's devices run cuDNN's attention, where the suite runs on CUDA
// and cuDNN loads: the emulation's (CUDA_EMU_CUDNN=1, off otherwise so that the rest of
// the suite runs zinf's kernels), which must, or a real libcudnn 9. False, having said
// why, where it does not (then there is nothing to end).
static inline bool test_cudnn_begin(void) {
    if (test_backend() != ZINF_BACKEND_CUDA) return false;
    bool emulated = getenv("ZINF_TEST_CUDA_EMU") != NULL;
    if (emulated) setenv("CUDA_EMU_CUDNN", "1", 1);
    zinf_device *d;
    zinf_device_params p = {.backend = ZINF_BACKEND_CUDA, .attention = ZINF_ATTENTION_CUDNN};
    if (zinf_device_create(&d, &p) != ZINF_OK) {
        fprintf(stderr, "cuDNN's attention not checked: %s\n", zinf_last_error());
        if (emulated) exit(1);
        return false;
    }
    zinf_device_destroy(d);
    test_attention_impl = ZINF_ATTENTION_CUDNN;
    return true;
}

static inline void test_cudnn_end(void) {
    test_attention_impl = ZINF_ATTENTION_ZINF;
    unsetenv("CUDA_EMU_CUDNN");
}

#define TRY(x)                                                                                                         \
    do {                                                                                                               \
        zinf_status st_ = (x);                                                                                         \
        if (st_ != ZINF_OK) {                                                                                          \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, zinf_last_error());                             \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)

// A device copy of n bytes of h.
static inline void *to_device(zinf_device *d, zinf_stream *s, const void *h, size_t n) {
    void *p;
    TRY(zinf_device_alloc(d, n, "test", &p));
    TRY(zinf_copy_async(s, p, h, n, ZINF_COPY_H2D));
    TRY(zinf_stream_sync(s));
    return p;
}

static inline void from_device(zinf_stream *s, void *h, const void *p, size_t n) {
    TRY(zinf_copy_async(s, h, p, n, ZINF_COPY_D2H));
    TRY(zinf_stream_sync(s));
}

// Uniform in [0, 1), from a xorshift state.
static inline double test_urand(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return (double)(*s >> 11) * 0x1p-53;
}

// x as dt holds it (round to nearest even), back in fp32.
static inline float test_rounded(zinf_dtype dt, float x) {
    return dt == ZINF_DTYPE_BF16 ? bf16_to_f32(f32_to_bf16(x)) : dt == ZINF_DTYPE_F16 ? f16_to_f32(f32_to_f16(x)) : x;
}

// n values of v stored as dt, in host memory the caller frees.
static inline void *test_pack(zinf_dtype dt, const float *v, size_t n) {
    char *p = malloc(n * zinf_dtype_size(dt));
    for (size_t i = 0; i < n; i++)
        dt_store(p, dt, i, v[i]);
    return p;
}

// The same on the device.
static inline void *test_dev_of(zinf_device *d, zinf_stream *s, zinf_dtype dt, const float *v, size_t n) {
    void *h = test_pack(dt, v, n);
    void *p = to_device(d, s, h, n * zinf_dtype_size(dt));
    free(h);
    return p;
}

// bytes of device memory, every byte 0xff: a result that is not written shows.
static inline void *test_dev_poisoned(zinf_device *d, zinf_stream *s, size_t bytes) {
    void *p;
    TRY(zinf_device_alloc(d, bytes, "output", &p));
    TRY(zinf_memset_async(s, p, 0xff, bytes));
    return p;
}

#endif
