// Device discovery, backend-independent: forwards to the CUDA backend when the build
// has one and reads the PCIe link from sysfs (Documentation/ABI/testing/sysfs-bus-pci).
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "internal.h"

#ifdef ZINF_HAVE_CUDA

// sysfs names the link speed in GT/s per lane ("16.0 GT/s PCIe"; older kernels
// write "8 GT/s"); each generation has one rate.
static int pcie_gen_from_speed(double gts) {
    static const struct {
        double gts;
        int gen;
    } gens[] = {{2.5, 1}, {5, 2}, {8, 3}, {16, 4}, {32, 5}, {64, 6}, {128, 7}};
    for (size_t i = 0; i < sizeof gens / sizeof gens[0]; i++)
        if (gts > gens[i].gts - 0.01 && gts < gens[i].gts + 0.01) return gens[i].gen;
    return 0;
}

static bool read_double(const char *path, double *v) {
    FILE *f = fopen(path, "r");
    if (!f) return false;
    bool ok = fscanf(f, "%lf", v) == 1;
    fclose(f);
    return ok;
}

// The current link, which an idle GPU may have trained down to save power; 0 when
// sysfs does not say (containers without /sys/bus/pci, unusual bus ids).
static void pcie_link(const char *bus_id, int *gen, int *width) {
    unsigned domain, bus, dev, fn;
    if (sscanf(bus_id, "%x:%x:%x.%x", &domain, &bus, &dev, &fn) != 4) return;
    // The runtime may print an 8-digit domain and upper case; sysfs uses 4 and lower.
    char dir[96], path[160];
    snprintf(dir, sizeof dir, "/sys/bus/pci/devices/%04x:%02x:%02x.%x", domain & 0xffff, bus, dev, fn);
    double v;
    snprintf(path, sizeof path, "%s/current_link_speed", dir);
    if (read_double(path, &v)) *gen = pcie_gen_from_speed(v);
    snprintf(path, sizeof path, "%s/current_link_width", dir);
    if (read_double(path, &v) && v > 0 && v <= 64) *width = (int)v;
}

#endif

void zinf_gpu_runtime_probe(zinf_gpu_runtime_info *info) {
    memset(info, 0, sizeof *info);
#ifdef ZINF_HAVE_CUDA
    zinf_cuda_runtime_probe(info);
#else
    snprintf(info->status, sizeof info->status,
             "this build has no CUDA backend (built with NO_CUDA=1 or without nvcc)");
#endif
}

zinf_status zinf_gpu_device_probe(int index, zinf_gpu_device_info *out) {
    memset(out, 0, sizeof *out);
    out->index = index;
#ifdef ZINF_HAVE_CUDA
    zinf_status st = zinf_cuda_device_probe(index, out);
    if (out->pci_bus_id[0]) pcie_link(out->pci_bus_id, &out->pcie_gen, &out->pcie_width);
    return st;
#else
    return zinf_fail(ZINF_ERR_UNSUPPORTED,
                     "device %d: this build has no CUDA backend (built with NO_CUDA=1 or without nvcc)", index);
#endif
}
