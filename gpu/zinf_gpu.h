// zinf gpu: the device layer, one API over two backends (cuda, host). This header
// starts with device discovery: what `zinf info` reports and backend selection needs.
#ifndef ZINF_GPU_H
#define ZINF_GPU_H

#include <stdbool.h>
#include <stdint.h>

#include "zinf_base.h"

#ifdef __cplusplus
extern "C" {
#endif

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

// Facts about CUDA device `index` (0 <= index < device_count), including a test
// launch of one of this build's kernels. ZINF_ERR_CUDA with the runtime's text on
// failure, *out keeping what was learned before the failing step (name, memory, bus
// id); ZINF_ERR_UNSUPPORTED when the build has no CUDA backend.
zinf_status zinf_gpu_device_probe(int index, zinf_gpu_device_info *out);

// The host backend's BLAS as it describes itself, e.g. "OpenBLAS 0.3.21 DYNAMIC_ARCH
// Zen MAX_THREADS=64", and the number of threads it will use.
const char *zinf_gpu_host_blas_config(void);
int zinf_gpu_host_blas_threads(void);

#ifdef __cplusplus
}
#endif
#endif
