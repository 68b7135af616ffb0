// zinf_gpu_runtime_probe and zinf_gpu_device_probe against what the machine and the
// build say independently: /dev/nvidia0 (or ZINF_TEST_CUDA_EMU: the CPU emulation's
// devices, tests/cuda_emu), config.h, ZINF_TEST_BACKEND; and the host
// BLAS report against OpenBLAS's own name.
// without-cuda: the runtime reports no CUDA backend, and device probes are refused
// timeout: 10 san=10 cuda-emu=10 san-cuda-emu=10
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "check.h"
#include "zinf.h"

#ifdef ZINF_HAVE_CUDA
static const bool built = true;
#else
static const bool built = false;
#endif

// A failing probe must say so with a status and a text.
static void expect_device_fails(int index) {
    zinf_gpu_device_info d;
    zinf_fail(ZINF_OK, "%s", ""); // clear, so the text seen below is this call's
    zinf_status st = zinf_gpu_device_probe(index, &d);
    printf("device %d: %s: %s\n", index, zinf_status_str(st), zinf_last_error());
    CHECK(st != ZINF_OK, "device %d probed OK", index);
    CHECK(zinf_last_error()[0] != '\0', "device %d failed without a text", index);
    if (!built) CHECK(st == ZINF_ERR_UNSUPPORTED, "device %d without CUDA: %s", index, zinf_status_str(st));
}

int main(void) {
    const char *backend = getenv("ZINF_TEST_BACKEND");
    bool want_cuda = backend && strcmp(backend, "cuda") == 0;
    bool emulated = getenv("ZINF_TEST_CUDA_EMU") != NULL;
    bool have_dev = access("/dev/nvidia0", F_OK) == 0 || emulated;

    zinf_gpu_runtime_info rt;
    memset(&rt, 0x5a, sizeof rt);
    zinf_gpu_runtime_probe(&rt);
    printf("built %d, runtime %d, driver %d, devices %d, status \"%s\"; %s\n", rt.built, rt.runtime_version,
           rt.driver_version, rt.device_count, rt.status,
           emulated ? "emulated devices" : have_dev ? "/dev/nvidia0 present" : "/dev/nvidia0 absent");

    CHECK(rt.built == built, "built %d, config.h says %d", rt.built, built);
    CHECK(rt.status[0] != '\0', "empty status");
    if (!built) {
        CHECK(rt.device_count == 0 && rt.runtime_version == 0 && rt.driver_version == 0,
              "a build without CUDA reports versions or devices");
        CHECK(strstr(rt.status, "no CUDA backend") != NULL, "status \"%s\" without CUDA", rt.status);
    } else {
        CHECK(rt.runtime_version >= 11000, "runtime_version %d", rt.runtime_version);
    }
    if (!have_dev) {
        CHECK(rt.device_count == 0, "%d devices without /dev/nvidia0", rt.device_count);
        CHECK(strcmp(rt.status, "ok") != 0, "status \"ok\" without a device");
    } else if (built) {
        CHECK(rt.device_count >= 1, "no device with /dev/nvidia0 present (or emulated): %s", rt.status);
        CHECK(strcmp(rt.status, "ok") == 0, "status \"%s\" with devices", rt.status);
        CHECK(rt.driver_version > 0, "driver_version %d with a device", rt.driver_version);
    }
    if (want_cuda) CHECK(rt.device_count >= 1, "ZINF_TEST_BACKEND=cuda and no device: %s", rt.status);

    for (int i = 0; i < rt.device_count; i++) {
        zinf_gpu_device_info d;
        memset(&d, 0x5a, sizeof d);
        zinf_status st = zinf_gpu_device_probe(i, &d);
        printf("device %d: %s, %s, %llu bytes, cc %d.%d, %d SMs, %s gen %d x%d, kernels_run %d\n", i,
               zinf_status_str(st), d.name, (unsigned long long)d.memory_bytes, d.cc_major, d.cc_minor,
               d.multiprocessors, d.pci_bus_id, d.pcie_gen, d.pcie_width, d.kernels_run);
        CHECK(st == ZINF_OK, "device %d: %s", i, zinf_last_error());
        CHECK(d.index == i, "index %d for device %d", d.index, i);
        CHECK(d.kernels_run, "device %d: test kernel did not run", i);
        CHECK(d.memory_bytes > 0, "device %d: memory_bytes 0", i);
        CHECK(d.name[0] != '\0', "device %d: empty name", i);
        CHECK(d.cc_major >= 3 && d.multiprocessors > 0, "device %d: cc %d, %d SMs", i, d.cc_major, d.multiprocessors);
        CHECK(d.pcie_gen >= 0 && d.pcie_gen <= 7 && d.pcie_width >= 0, "device %d: PCIe gen %d x%d", i, d.pcie_gen,
              d.pcie_width);
    }
    expect_device_fails(-1);
    expect_device_fails(rt.device_count);

    const char *blas = zinf_gpu_host_blas_config();
    printf("blas \"%s\", %d threads\n", blas, zinf_gpu_host_blas_threads());
    CHECK(blas && strncmp(blas, "OpenBLAS", 8) == 0, "blas config \"%s\"", blas ? blas : "(null)");
    CHECK(zinf_gpu_host_blas_threads() >= 1, "blas threads %d", zinf_gpu_host_blas_threads());

    return check_exit("test_gpu_probe");
}
