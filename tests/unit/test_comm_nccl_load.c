// NCCL loads when it is first called (runtime/comm/nccl_load.c), not with the process:
// the version and a result's text through zinf's forwarding are the library's own,
// opened here directly; a missing entry point would show as the loader's message
// instead. Built against the emulation's headers (BACKEND=cuda-emu) the names are the
// emulation's, and only the texts' being told apart is held. Needs no GPU.
// timeout: 10 san=10 cuda-emu=10 san-cuda-emu=10
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "check.h"

#ifdef ZINF_HAVE_NCCL
#include <nccl.h>

int main(void) {
    const ncclResult_t results[] = {ncclSuccess, ncclSystemError, ncclInvalidUsage};
    const char *texts[3];
    for (int i = 0; i < 3; i++) {
        texts[i] = ncclGetErrorString(results[i]);
        printf("result %d: %s\n", (int)results[i], texts[i]);
        CHECK(texts[i] && texts[i][0], "result %d has no text", (int)results[i]);
        CHECK(!strstr(texts[i], "NCCL did not load") && !strstr(texts[i], " has no "), "%s", texts[i]);
    }
    CHECK(strcmp(texts[0], texts[1]) && strcmp(texts[1], texts[2]), "results share a text");
    int version = 0;
    CHECK(ncclGetVersion(&version) == ncclSuccess && version > 0, "ncclGetVersion: %d", version);
#ifndef CUDA_EMU_NCCL_H // the toolkit's header
    char soname[64];
    snprintf(soname, sizeof soname, "libnccl.so.%d", NCCL_MAJOR);
    void *lib = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    CHECK(lib, "%s: %s", soname, dlerror());
    const char *(*own_text)(ncclResult_t) = NULL;
    ncclResult_t (*own_version)(int *) = NULL;
    if (lib) {
        *(void **)&own_text = dlsym(lib, "ncclGetErrorString");
        *(void **)&own_version = dlsym(lib, "ncclGetVersion");
    }
    CHECK(own_text && own_version, "%s lacks ncclGetErrorString or ncclGetVersion", soname);
    for (int i = 0; own_text && i < 3; i++)
        CHECK(!strcmp(own_text(results[i]), texts[i]), "result %d: the library says \"%s\"", (int)results[i],
              own_text(results[i]));
    int own = 0;
    if (own_version) own_version(&own);
    CHECK(own == version, "version %d through zinf, %d from the library", version, own);
#endif
    return check_exit("test_comm_nccl_load");
}
#else
int main(void) {
    puts("test_comm_nccl_load: this build has no NCCL (tests/run does not run it here)");
    return 0;
}
#endif
