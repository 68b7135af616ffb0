// zinf_dl_load, which opens cuBLASLt and NCCL when zinf first calls them: a library
// that is there gives every name; a missing library, or one without a name, fails
// saying which, and the failure reports of the calls forwarded to it show that text.
// timeout: 10 san=10 cuda-emu=10 san-cuda-emu=10
#include <string.h>

#include "check.h"
#include "zinf_internal.h"

int main(void) {
    char error[256] = "stale";
    double (*cosine)(double) = NULL, (*sine)(double) = NULL;
    void **const slots[] = {(void **)&cosine, (void **)&sine};
    const char *const names[] = {"cos", "sin"};
    CHECK(zinf_dl_load("libm.so.6", "libm", names, slots, 2, error, sizeof error), "%s", error);
    CHECK(error[0] == '\0', "error after a load: \"%s\"", error);
    CHECK(cosine && sine && cosine(0.0) == 1.0 && sine(0.0) == 0.0, "cos and sin did not resolve to libm's");

    CHECK(!zinf_dl_load("libzinf-absent.so.7", "Absent", names, slots, 2, error, sizeof error), "absent loaded");
    CHECK(strncmp(error, "Absent did not load: ", 21) == 0 && strstr(error, "libzinf-absent.so.7"), "\"%s\"", error);

    const char *const unknown[] = {"cos", "zinf_no_such_function"};
    CHECK(!zinf_dl_load("libm.so.6", "libm", unknown, slots, 2, error, sizeof error), "unknown name resolved");
    CHECK(strncmp(error, "libm.so.6 has no zinf_no_such_function: ", 40) == 0, "\"%s\"", error);
    return check_exit("test_base_dl");
}
