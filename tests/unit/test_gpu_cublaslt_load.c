// cuBLASLt loads when it is first called (gpu/cuda/cublaslt_load.c), not with the
// process: a status's text through zinf's forwarding is the library's own, opened here
// directly; a missing entry point would show as the loader's message instead. Built
// against the emulation's headers (BACKEND=cuda-emu) the names are the emulation's, and
// only the texts' being told apart is held. Needs no GPU: the texts are host code.
// timeout: 10 san=10 cuda-emu=10 san-cuda-emu=10
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "check.h"

#ifdef ZINF_HAVE_CUDA
#include <cublasLt.h>

int main(void) {
    const cublasStatus_t statuses[] = {CUBLAS_STATUS_SUCCESS, CUBLAS_STATUS_NOT_SUPPORTED,
                                       CUBLAS_STATUS_INVALID_VALUE};
    const char *texts[3];
    for (int i = 0; i < 3; i++) {
        texts[i] = cublasLtGetStatusString(statuses[i]);
        printf("status %d: %s\n", (int)statuses[i], texts[i]);
        CHECK(texts[i] && texts[i][0], "status %d has no text", (int)statuses[i]);
        CHECK(!strstr(texts[i], "cuBLASLt did not load") && !strstr(texts[i], " has no "), "%s", texts[i]);
    }
    CHECK(strcmp(texts[0], texts[1]) && strcmp(texts[1], texts[2]), "statuses share a text");
#ifndef CUDA_EMU_CUBLASLT_H // the toolkit's header
    {
        char soname[64];
        snprintf(soname, sizeof soname, "libcublasLt.so.%d", CUBLAS_VER_MAJOR);
        void *lib = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
        CHECK(lib, "%s: %s", soname, dlerror());
        const char *(*own)(cublasStatus_t) = NULL;
        if (lib) *(void **)&own = dlsym(lib, "cublasLtGetStatusString");
        CHECK(own, "%s has no cublasLtGetStatusString", soname);
        for (int i = 0; own && i < 3; i++)
            CHECK(!strcmp(own(statuses[i]), texts[i]), "status %d: the library says \"%s\"", (int)statuses[i],
                  own(statuses[i]));
    }
#endif
    return check_exit("test_gpu_cublaslt_load");
}
#else
int main(void) {
    puts("test_gpu_cublaslt_load: this build has no CUDA backend (tests/run does not run it here)");
    return 0;
}
#endif
