// Timed reads and writes through the aio engine, for io-bench and io-tune.
#ifndef ZINF_CLI_IO_MEASURE_H
#define ZINF_CLI_IO_MEASURE_H

#include <stdbool.h>
#include <stdint.h>

#include "zinf.h"
#include "zinf_internal.h"

// Test files the signal handler can remove: one per directory.
enum { IO_MAX_DIRS = 16 };

typedef struct io_spec {
    const char *const *dirs; // the file is striped over these
    int ndirs;
    uint64_t size; // bytes per pass
    uint32_t block_size, queue_depth, threads;
    bool sqpoll;      // kernel-side submission polling
    bool read, write; // which directions to measure
    bool mixed;       // also read one half of the file while writing the other, together
    int loops;        // passes per direction; the median is reported
    bool validate;    // compare every byte read with what was written
    bool progress;    // a line per pass on stderr
} io_spec;

typedef struct io_result {
    const char *op; // "write", "read" or "mixed" (bytes: read and written together)
    uint64_t bytes;
    double seconds;     // median pass
    double bytes_per_s; // bytes / median pass
    bool direct;        // O_DIRECT (false: some directory runs buffered)
    bool registered;    // the buffer was registered with the rings
} io_result;

// Measure the directions spec asks for (write, read, mixed) into out[0..2]. Returns
// how many results, or -zinf_status with zinf_last_error() set.
int io_measure(const io_spec *spec, io_result *out);

// One result as a table row or as io-bench's JSON object; the table's header.
void cli_print_io_result(const io_spec *spec, const io_result *res, bool json);
void cli_print_io_header(void);

#endif
