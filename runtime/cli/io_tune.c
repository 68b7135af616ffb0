// zinf io-tune: sweep block size x queue depth x threads over the --path directories
// and print the aio config section that reads and writes fastest.
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "io_measure.h"

enum { MAX_GRID = 16 };

// "256K,1M,4M" -> values within [lo, hi]; CLI_OK or a usage error naming opt.
static int parse_list(const char *opt, const char *arg, uint64_t lo, uint64_t hi, uint64_t *vals, int *n) {
    char *copy = strdup(arg), *save = NULL;
    int rc = CLI_OK;
    *n = 0;
    for (char *tok = strtok_r(copy, ",", &save); rc == CLI_OK && tok; tok = strtok_r(NULL, ",", &save)) {
        if (*n == MAX_GRID)
            rc = cli_usage("io-tune", "%s: at most %d values", opt, MAX_GRID);
        else
            rc = cli_parse_size("io-tune", opt, tok, lo, hi, &vals[(*n)++]);
    }
    if (rc == CLI_OK && *n == 0) rc = cli_usage("io-tune", "%s: no values", opt);
    free(copy);
    return rc;
}

int cli_io_tune(int argc, char **argv) {
    static const struct option opts[] = {
        {"path", required_argument, NULL, 'p'},
        {"size", required_argument, NULL, 's'},
        {"block-sizes", required_argument, NULL, 'b'},
        {"queue-depths", required_argument, NULL, 'q'},
        {"threads", required_argument, NULL, 't'},
        {"json", no_argument, NULL, 'j'},
        {NULL, 0, NULL, 0},
    };
    const char **dirs = calloc((size_t)argc, sizeof *dirs);
    uint64_t blocks[MAX_GRID] = {256 << 10, 1 << 20, 4 << 20, 8 << 20}, depths[MAX_GRID] = {4, 8, 16, 32},
             threads[MAX_GRID] = {1, 2};
    int nb = 4, nq = 4, nt = 2, ndirs = 0, c, rc = CLI_OK;
    uint64_t size = 256 << 20;
    bool json = false;
    opterr = 0;
    while (rc == CLI_OK && (c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'p':
            if (ndirs == IO_MAX_DIRS)
                rc = cli_usage("io-tune", "--path: at most %d directories", IO_MAX_DIRS);
            else
                dirs[ndirs++] = optarg;
            break;
        case 's': rc = cli_parse_size("io-tune", "--size", optarg, 4096, UINT64_MAX, &size); break;
        case 'b': rc = parse_list("--block-sizes", optarg, 4096, 1u << 30, blocks, &nb); break;
        case 'q': rc = parse_list("--queue-depths", optarg, 1, 4096, depths, &nq); break;
        case 't': rc = parse_list("--threads", optarg, 1, 256, threads, &nt); break;
        case 'j': json = true; break;
        default: rc = cli_usage("io-tune", "unknown option %s", argv[optind - 1]); break;
        }
    }
    if (rc == CLI_OK && optind < argc) rc = cli_usage("io-tune", "unexpected argument \"%s\"", argv[optind]);
    if (rc == CLI_OK && ndirs == 0) rc = cli_usage("io-tune", "--path DIR is required");
    for (int i = 0; rc == CLI_OK && i < nb; i++)
        if (blocks[i] % 4096) rc = cli_usage("io-tune", "--block-sizes: each must be a multiple of 4096");
    if (rc == CLI_OK && size % 4096) rc = cli_usage("io-tune", "--size must be a multiple of 4096");

    // The best setting moves the same bytes in and out in the least total time: what a
    // step that reads and writes back its optimizer states waits for.
    double best_time = 0;
    io_spec best = {0};
    if (rc == CLI_OK && !json) cli_print_io_header();
    zinf_progress progress; // a setting takes seconds; a grid of them, minutes
    zinf_progress_start(&progress, "io-tune: settings measured", (int64_t)nb * nq * nt, false);
    for (int b = 0; rc == CLI_OK && b < nb; b++) {
        for (int q = 0; rc == CLI_OK && q < nq; q++) {
            for (int t = 0; rc == CLI_OK && t < nt; t++) {
                io_spec s = {.dirs = dirs,
                             .ndirs = ndirs,
                             .size = size,
                             .block_size = (uint32_t)blocks[b],
                             .queue_depth = (uint32_t)depths[q],
                             .threads = (uint32_t)threads[t],
                             .read = true,
                             .write = true,
                             .loops = 1};
                io_result res[2];
                if (io_measure(&s, res) != 2) {
                    rc = cli_fail("io-tune", CLI_FAIL);
                    break;
                }
                for (int i = 0; i < 2; i++)
                    cli_print_io_result(&s, &res[i], json);
                double total = res[0].seconds + res[1].seconds;
                if (best_time == 0 || total < best_time) best_time = total, best = s;
                zinf_progress_add(&progress, 1);
            }
        }
    }
    if (rc == CLI_OK) zinf_progress_end(&progress);
    if (rc == CLI_OK) {
        json_t *aio = json_pack("{s:{s:I, s:I, s:I, s:b, s:b}}", "aio", "block_size", (json_int_t)best.block_size,
                                "queue_depth", (json_int_t)best.queue_depth, "intra_op_parallelism",
                                (json_int_t)best.threads, "single_submit", 0, "overlap_events", 1);
        if (json) {
            cli_print_json_line(aio);
        } else {
            char *text = json_dumps(aio, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
            printf("\nbest (%.3f GB/s read and write together); paste into the config:\n%s\n",
                   2.0 * (double)size / best_time / 1e9, text);
            free(text);
            json_decref(aio);
        }
    }
    free(dirs);
    return rc;
}
