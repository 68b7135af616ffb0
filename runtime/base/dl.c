// Libraries zinf opens when it first needs them (cuBLASLt, NCCL) instead of linking
// them: see zinf_dl_load.
#include <dlfcn.h>
#include <stdio.h>

#include "zinf_internal.h"

bool zinf_dl_load(const char *soname, const char *what, const char *const names[], void **const slots[], size_t n,
                  char *error, size_t error_size) {
    // dlopen searches the run path of the object that calls it, as the linker would
    // have: zinf's, which holds the toolkit's directory.
    void *lib = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(error, error_size, "%s did not load: %s", what, dlerror());
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        if (!(*slots[i] = dlsym(lib, names[i]))) {
            snprintf(error, error_size, "%s has no %s: %s", soname, names[i], dlerror());
            dlclose(lib);
            return false;
        }
    }
    error[0] = '\0';
    return true;
}
