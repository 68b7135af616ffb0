// zinf io-bench's host<->device copy measurement (--h2d / --d2h).
#ifndef ZINF_CLI_IO_COPY_H
#define ZINF_CLI_IO_COPY_H

#include <stdbool.h>
#include <stddef.h>

typedef struct io_copy_spec {
    bool h2d, d2h, json;
    size_t bytes;
    int loops;
} io_copy_spec;

// Copies of bytes each way asked for, from pinned then pageable memory; one line (or
// JSON object) per op and kind of memory. CLI_OK or CLI_FAIL (message printed).
int cli_io_copy(const io_copy_spec *c);

#endif
