// Element types shared by the modules: names as the CLI and configs spell them.
#include "zinf_base.h"

const char *zinf_dtype_name(zinf_dtype t) {
    switch (t) {
    case ZINF_DTYPE_NONE: return "none";
    case ZINF_DTYPE_F32: return "fp32";
    case ZINF_DTYPE_BF16: return "bf16";
    case ZINF_DTYPE_F16: return "fp16";
    }
    return "unknown";
}

size_t zinf_dtype_size(zinf_dtype t) {
    switch (t) {
    case ZINF_DTYPE_F32: return 4;
    case ZINF_DTYPE_BF16:
    case ZINF_DTYPE_F16: return 2;
    case ZINF_DTYPE_NONE: break;
    }
    return 0;
}
