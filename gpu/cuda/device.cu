// The CUDA backend's device discovery: runtime and driver versions, device properties,
// and a test launch of one of this build's kernels (CUDA Runtime API reference).
#include <stdint.h>
#include <stdio.h>

#include <cudnn_graph.h>

#include "cuda_backend.h"

int zinf_cuda_cudnn_version(char *why, size_t why_size) {
    size_t version = cudnnGetVersion(); // 0 where the loader could not load it
    if (!version) cudnnGetLastErrorString(why, why_size);
    return (int)version;
}

void zinf_cuda_runtime_probe(zinf_gpu_runtime_info *info) {
    info->built = true;
    cudaRuntimeGetVersion(&info->runtime_version);
    // The driver version is 0 when libcuda.so cannot be loaded at all.
    cudaDriverGetVersion(&info->driver_version);
    if (info->driver_version == 0) {
        snprintf(info->status, sizeof info->status, "no CUDA driver (libcuda not found)");
        return;
    }
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
        cudaGetLastError(); // the count is the only call that failed; don't leave it pending
        const char *why = err == cudaErrorNoDevice             ? "no CUDA device"
                          : err == cudaErrorInsufficientDriver ? "no CUDA driver or driver older than the runtime"
                                                               : cudaGetErrorString(err);
        snprintf(info->status, sizeof info->status, "%s", why);
        return;
    }
    info->device_count = n;
    snprintf(info->status, sizeof info->status, n > 0 ? "ok" : "no CUDA device");
}

// Index-dependent values, so a launch that did nothing, ran on too few threads or
// ran stale code cannot pass for one that worked.
static __device__ __host__ uint32_t probe_value(uint32_t i) { return i * 2654435761u ^ 0x5a5a5a5au; }

static __global__ void probe_kernel(uint32_t *d_out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) d_out[i] = probe_value((uint32_t)i);
}

#define CUDA_TRY(call, what)                                                                                           \
    do {                                                                                                               \
        cudaError_t err_ = (call);                                                                                     \
        if (err_ != cudaSuccess) {                                                                                     \
            cudaGetLastError();                                                                                        \
            st = zinf_fail(ZINF_ERR_CUDA, "device %d: %s: %s", index, what, cudaGetErrorString(err_));                 \
            goto done;                                                                                                 \
        }                                                                                                              \
    } while (0)

zinf_status zinf_cuda_device_probe(int index, zinf_gpu_device_info *out) {
    enum { N = 1000, THREADS = 128 }; // not a multiple of the block: exercises the bound
    zinf_status st = ZINF_OK;
    uint32_t h_out[N];
    uint32_t *d_out = NULL;
    int prev = -1;
    cudaDeviceProp prop;

    CUDA_TRY(cudaGetDeviceProperties(&prop, index), "cudaGetDeviceProperties");
    snprintf(out->name, sizeof out->name, "%.*s", (int)sizeof out->name - 1, prop.name);
    out->memory_bytes = prop.totalGlobalMem;
    out->cc_major = prop.major;
    out->cc_minor = prop.minor;
    out->multiprocessors = prop.multiProcessorCount;
    CUDA_TRY(cudaDeviceGetPCIBusId(out->pci_bus_id, (int)sizeof out->pci_bus_id, index), "cudaDeviceGetPCIBusId");

    for (int i = 0; i < N; i++)
        h_out[i] = ~probe_value((uint32_t)i); // poison

    // The probe must not move the caller's thread to another device.
    CUDA_TRY(cudaGetDevice(&prev), "cudaGetDevice");
    CUDA_TRY(cudaSetDevice(index), "cudaSetDevice");
    CUDA_TRY(cudaMalloc((void **)&d_out, sizeof h_out), "cudaMalloc");
    CUDA_TRY(cudaMemset(d_out, 0xff, sizeof h_out), "cudaMemset");
    probe_kernel CUDA_LAUNCH((N + THREADS - 1) / THREADS, THREADS, 0, 0)(d_out, N);
    // A build without code for this architecture fails here: "no kernel image is available".
    CUDA_TRY(cudaGetLastError(), "test kernel launch");
    CUDA_TRY(cudaMemcpy(h_out, d_out, sizeof h_out, cudaMemcpyDeviceToHost), "test kernel");
    for (int i = 0; i < N; i++) {
        if (h_out[i] != probe_value((uint32_t)i)) {
            st = zinf_fail(ZINF_ERR_CUDA, "device %d: test kernel wrote 0x%08x at element %d, expected 0x%08x", index,
                           h_out[i], i, probe_value((uint32_t)i));
            goto done;
        }
    }
    out->kernels_run = true;

done:
    if (d_out) cudaFree(d_out);
    if (prev >= 0) cudaSetDevice(prev);
    return st;
}
