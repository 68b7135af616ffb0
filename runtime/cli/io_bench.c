// zinf io-bench: read and write bandwidth of one or more directories through the aio
// engine, as offload will see it (like DeepSpeed's ds_io, with io_uring).
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"
#include "io_copy.h"
#include "io_measure.h"

void cli_print_io_result(const io_spec *s, const io_result *r, bool json) {
    if (json) {
        cli_print_json_line(json_pack("{s:s, s:I, s:f, s:f, s:I, s:I, s:I, s:i, s:b, s:b}", "op",
                                      r->op, "bytes", (json_int_t)r->bytes, "seconds", r->seconds,
                                      "bytes_per_s", r->bytes_per_s, "block_size", (json_int_t)s->block_size,
                                      "queue_depth", (json_int_t)s->queue_depth, "threads", (json_int_t)s->threads,
                                      "paths", s->ndirs, "direct", r->direct, "registered", r->registered));
        return;
    }
    char size[32], block[32];
    printf("%-6s %10s %10s %6u %8u %6d %7s %9.3f %9.3f\n", r->op,
           zinf_size_format(r->bytes, size, sizeof size), zinf_size_format(s->block_size, block, sizeof block),
           s->queue_depth, s->threads, s->ndirs, r->direct ? "yes" : "no", r->bytes_per_s / 1e9, r->seconds);
    fflush(stdout); // each result as it is measured, into a pipe too
}

void cli_print_io_header(void) {
    printf("%-6s %10s %10s %6s %8s %6s %7s %9s %9s\n", "op", "size", "block", "depth", "threads", "paths", "direct",
           "GB/s", "seconds");
}

int cli_io_bench(int argc, char **argv) {
    static const struct option opts[] = {
        {"path", required_argument, NULL, 'p'},
        {"size", required_argument, NULL, 's'},
        {"block-size", required_argument, NULL, 'b'},
        {"queue-depth", required_argument, NULL, 'q'},
        {"threads", required_argument, NULL, 't'},
        {"loops", required_argument, NULL, 'l'},
        {"read", no_argument, NULL, 'r'},
        {"write", no_argument, NULL, 'w'},
        {"mixed", no_argument, NULL, 'm'},
        {"validate", no_argument, NULL, 'v'},
        {"json", no_argument, NULL, 'j'},
        {"sqpoll", no_argument, NULL, 'S'},
        {"h2d", no_argument, NULL, 'H'},
        {"d2h", no_argument, NULL, 'D'},
        {NULL, 0, NULL, 0},
    };
    const char **dirs = calloc((size_t)argc, sizeof *dirs);
    io_spec s = {.dirs = dirs, .size = 1ull << 30, .block_size = 1u << 20, .queue_depth = 8, .threads = 1, .loops = 3};
    bool json = false, h2d = false, d2h = false, size_set = false;
    int c, rc = CLI_OK;
    uint64_t v;
    opterr = 0;
    while (rc == CLI_OK && (c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'p':
            if (s.ndirs == IO_MAX_DIRS)
                rc = cli_usage("io-bench", "--path: at most %d directories", IO_MAX_DIRS);
            else
                dirs[s.ndirs++] = optarg;
            break;
        case 's':
            rc = cli_parse_size("io-bench", "--size", optarg, 4096, UINT64_MAX, &s.size);
            size_set = true;
            break;
        case 'b':
            rc = cli_parse_size("io-bench", "--block-size", optarg, 4096, 1u << 30, &v);
            s.block_size = (uint32_t)v;
            break;
        case 'q':
            rc = cli_parse_size("io-bench", "--queue-depth", optarg, 1, 4096, &v);
            s.queue_depth = (uint32_t)v;
            break;
        case 't':
            rc = cli_parse_size("io-bench", "--threads", optarg, 1, 256, &v);
            s.threads = (uint32_t)v;
            break;
        case 'l':
            rc = cli_parse_size("io-bench", "--loops", optarg, 1, 1000, &v);
            s.loops = (int)v;
            break;
        case 'r': s.read = true; break;
        case 'w': s.write = true; break;
        case 'm': s.mixed = true; break;
        case 'v': s.validate = true; break;
        case 'S': s.sqpoll = true; break;
        case 'H': h2d = true; break;
        case 'D': d2h = true; break;
        case 'j': json = true; break;
        default: rc = cli_usage("io-bench", "unknown option %s", argv[optind - 1]); break;
        }
    }
    if (rc == CLI_OK && optind < argc) rc = cli_usage("io-bench", "unexpected argument \"%s\"", argv[optind]);
    if (rc == CLI_OK && (h2d || d2h)) {
        if (s.ndirs || s.read || s.write || s.mixed)
            rc = cli_usage("io-bench", "--h2d / --d2h measure the device link; --path, --read, --write and --mixed "
                                       "the disk: one or the other");
        // 256 MiB by default: enough to reach a PCIe link's plateau, and it fits the
        // host backend's default capacity with room to spare.
        io_copy_spec cs = {.h2d = h2d, .d2h = d2h, .json = json, .bytes = size_set ? s.size : 256u << 20,
                           .loops = s.loops};
        if (rc == CLI_OK) rc = cli_io_copy(&cs);
        free(dirs);
        return rc;
    }
    if (rc == CLI_OK && s.ndirs == 0) rc = cli_usage("io-bench", "--path DIR (or --h2d / --d2h) is required");
    if (rc == CLI_OK && s.block_size % 4096) rc = cli_usage("io-bench", "--block-size must be a multiple of 4096");
    if (rc == CLI_OK && s.size % 4096) rc = cli_usage("io-bench", "--size must be a multiple of 4096");
    if (rc == CLI_OK) {
        if (!s.read && !s.write && !s.mixed) s.read = s.write = true;
        s.progress = !json;
        io_result res[3];
        int n = io_measure(&s, res);
        if (n < 0) {
            rc = cli_fail("io-bench", CLI_FAIL);
        } else {
            if (!json) cli_print_io_header();
            for (int i = 0; i < n; i++)
                cli_print_io_result(&s, &res[i], json);
        }
    }
    free(dirs);
    return rc;
}
