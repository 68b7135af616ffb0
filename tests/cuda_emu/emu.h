// CUDA emulation (tests only): what the emulation's own files share (runtime.cpp,
// kernel.cpp, cublaslt.cpp, nccl.cpp). Not part of any emulated API.
#ifndef CUDA_EMU_INTERNAL_H
#define CUDA_EMU_INTERNAL_H

#include <cuda_runtime.h>

#include <functional>

namespace cuda_emu {

// The calling thread's current device (cudaSetDevice; 0 until set).
int current_device();

// What a range of addresses is: inside one live cudaMalloc allocation of `device`,
// inside one range registered with cudaHostRegister (reachable from every device), or
// neither (pageable host memory, freed memory, a range past an allocation's end).
enum class mem { none, device, registered };
struct region {
    mem kind;
    int device; // kind == device
};
region classify(const void *p, size_t bytes);

// Enqueues work on a stream (NULL: the legacy default stream of the current device),
// to run on the stream's thread after everything enqueued before it. Fails, recording
// the error as the thread's last error, for a destroyed stream, a stream of a device
// other than the current one, or a device whose context has faulted.
cudaError_t enqueue(cudaStream_t s, std::function<void()> work);
// The device a stream belongs to (NULL: the current device).
int stream_device(cudaStream_t s);

// A fault found while device work ran (an illegal address, a collective that went
// wrong): the device's context is unusable from now on and every later call on it
// returns err, as on a GPU. what is printed on stderr, so a test log says why.
void fault(int device, cudaError_t err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

// Records err as the calling thread's last error (cudaGetLastError) and returns it.
cudaError_t fail(cudaError_t err);

// The error that ended the device's context, or cudaSuccess.
cudaError_t sticky(int device);

} // namespace cuda_emu

#endif
