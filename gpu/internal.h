// zinf gpu internals: what the backend-independent front end (device.c) calls in the
// CUDA backend. Plain C declarations, so nothing outside gpu/cuda sees CUDA types.
#ifndef ZINF_GPU_INTERNAL_H
#define ZINF_GPU_INTERNAL_H

#include "zinf_gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

// Versions and device count; info comes in zeroed and leaves with status set.
void zinf_cuda_runtime_probe(zinf_gpu_runtime_info *info);
// Properties, PCI bus id and a test kernel launch on device index; out comes in
// zeroed. On failure out keeps what was learned before the failing step.
zinf_status zinf_cuda_device_probe(int index, zinf_gpu_device_info *out);

#ifdef __cplusplus
}
#endif
#endif
