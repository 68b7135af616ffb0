// zinf internals shared by every module: the status propagation macros.
#ifndef ZINF_INTERNAL_H
#define ZINF_INTERNAL_H

#include "zinf_base.h"

// Propagate a non-OK status to the caller.
#define ZINF_CHECK(x)                                                                                                  \
    do {                                                                                                               \
        zinf_status st_ = (x);                                                                                         \
        if (st_ != ZINF_OK) return st_;                                                                                \
    } while (0)

// Store the status in st and jump to the one cleanup label on failure.
#define ZINF_CHECK_GOTO(x, st, label)                                                                                  \
    do {                                                                                                               \
        (st) = (x);                                                                                                    \
        if ((st) != ZINF_OK) goto label;                                                                               \
    } while (0)

#define ZINF_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#endif
