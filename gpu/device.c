// Devices, backend-independent: discovery (forwarded to the CUDA backend when the build
// has one; the PCIe link from sysfs, Documentation/ABI/testing/sysfs-bus-pci), backend
// choice and the capacity in force.
#include <stdio.h>
#include <stdlib.h>
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

int zinf_gpu_cudnn_version(char *why, size_t why_size) {
#ifdef ZINF_HAVE_CUDA
    return zinf_cuda_cudnn_version(why, why_size);
#else
    snprintf(why, why_size, "this build has no CUDA backend");
    return 0;
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

// ---- devices ----

const char *zinf_backend_name(zinf_backend b) {
    static const char *const names[] = {"auto", "host", "cuda", "sim"};
    return (unsigned)b < ZINF_ARRAY_LEN(names) ? names[b] : "unknown";
}

// AUTO takes CUDA when this build has it and the runtime sees a device.
static zinf_status pick_backend(zinf_backend want, const backend_ops **out) {
    zinf_gpu_runtime_info rt;
    if (want == ZINF_BACKEND_HOST || want == ZINF_BACKEND_SIM) {
        *out = want == ZINF_BACKEND_HOST ? &zinf_host_backend : &zinf_sim_backend;
        return ZINF_OK;
    }
    if (want != ZINF_BACKEND_AUTO && want != ZINF_BACKEND_CUDA)
        return zinf_fail(ZINF_ERR_INVAL, "device.backend: unknown backend %d; expected auto, host, cuda or sim", want);
    zinf_gpu_runtime_probe(&rt);
#ifdef ZINF_HAVE_CUDA
    if (rt.device_count > 0) {
        *out = &zinf_cuda_backend;
        return ZINF_OK;
    }
#endif
    if (want == ZINF_BACKEND_CUDA)
        return zinf_fail(ZINF_ERR_UNSUPPORTED, "device.backend is cuda but %s; use \"auto\" or \"host\"", rt.status);
    *out = &zinf_host_backend;
    return ZINF_OK;
}

// The host backend's capacity is a set amount (its memory is the machine's); a card's
// is its memory, or the limit within it.
static zinf_status capacity_of(const backend_ops *be, const zinf_device_params *p, uint64_t *out) {
    uint64_t limit = p->memory_limit > 0 ? (uint64_t)p->memory_limit : 0;
    if (!be->describe) {
        *out = limit ? limit : ZINF_HOST_DEVICE_DEFAULT_LIMIT;
        return ZINF_OK;
    }
    char name[96], a[32], b[32];
    uint64_t memory;
    ZINF_CHECK(be->describe(p, name, &memory));
    if (limit > memory)
        return zinf_fail(ZINF_ERR_INVAL, "device.memory_limit %s exceeds %s's %s", zinf_size_format(limit, a, sizeof a),
                         name, zinf_size_format(memory, b, sizeof b));
    *out = limit ? limit : memory;
    return ZINF_OK;
}

// cuDNN's attention runs on a CUDA device, and the sim device models it; the host
// backend has one attention.
static zinf_status check_attention(const backend_ops *be, const zinf_device_params *p) {
    if (p->attention < ZINF_ATTENTION_AUTO || p->attention > ZINF_ATTENTION_ZINF)
        return zinf_fail(ZINF_ERR_INVAL, "device.attention: unknown value %d; expected auto, cudnn or zinf",
                         (int)p->attention);
#ifdef ZINF_HAVE_CUDA
    bool cuda = be == &zinf_cuda_backend;
#else
    bool cuda = false;
#endif
    if (p->attention == ZINF_ATTENTION_CUDNN && !cuda && be != &zinf_sim_backend)
        return zinf_fail(ZINF_ERR_INVAL,
                         "device.attention is \"cudnn\" but the device is the %s backend, which runs its own "
                         "attention; use \"auto\" or \"zinf\", or device.backend \"cuda\" or \"sim\"",
                         be->name);
    return ZINF_OK;
}

zinf_status zinf_device_choose(const zinf_device_params *p, zinf_device_choice *out) {
    const backend_ops *be = NULL;
    ZINF_CHECK(pick_backend(p->backend, &be));
    ZINF_CHECK(check_attention(be, p));
    out->backend = be == &zinf_host_backend  ? ZINF_BACKEND_HOST
                   : be == &zinf_sim_backend ? ZINF_BACKEND_SIM
                                             : ZINF_BACKEND_CUDA;
    return capacity_of(be, p, &out->capacity);
}

zinf_status zinf_device_create(zinf_device **out, const zinf_device_params *p) {
    *out = NULL;
    const backend_ops *be = NULL;
    uint64_t capacity;
    ZINF_CHECK(pick_backend(p->backend, &be));
    ZINF_CHECK(check_attention(be, p));
    ZINF_CHECK(capacity_of(be, p, &capacity));
    zinf_device *d = calloc(1, sizeof *d);
    if (!d) return zinf_fail(ZINF_ERR_NOMEM, "device: out of host memory");
    d->be = be;
    d->params = *p;
    pthread_mutex_init(&d->lock, NULL);
    zinf_status st = be->open(d);
    if (st != ZINF_OK) {
        pthread_mutex_destroy(&d->lock);
        free(d);
        return st;
    }
    d->caps.capacity = d->mem.capacity = capacity;
    *out = d;
    return ZINF_OK;
}

const zinf_device_caps *zinf_device_get_caps(const zinf_device *d) { return &d->caps; }

void zinf_device_get_busy(zinf_device *d, zinf_device_busy *out) {
    *out = (zinf_device_busy){0};
    if (d->be->busy) d->be->busy(d, out);
}
