// zinf check: validate a config and print it normalized (every default filled in).
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"

int cli_check(int argc, char **argv) {
    static const struct option opts[] = {
        {"set", required_argument, NULL, 's'},
        {"world-size", required_argument, NULL, 'w'},
        {NULL, 0, NULL, 0},
    };
    const char **sets = calloc((size_t)argc, sizeof *sets);
    zinf_config_options co = {.sets = sets};
    int c, rc = CLI_OK;
    opterr = 0;
    while (rc == CLI_OK && (c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        char *end;
        switch (c) {
        case 's': sets[co.nsets++] = optarg; break;
        case 'w':
            co.world_size = (int)strtol(optarg, &end, 10);
            if (*end || co.world_size < 1)
                rc = cli_usage("check", "--world-size: \"%s\" is not a positive integer", optarg);
            break;
        default: rc = cli_usage("check", "unknown option %s", argv[optind - 1]); break;
        }
    }
    if (rc == CLI_OK && optind != argc - 1)
        rc = cli_usage("check", optind == argc ? "missing CONFIG.json" : "unexpected argument \"%s\"", argv[argc - 1]);
    if (rc == CLI_OK) {
        zinf_config cfg;
        char *json = NULL;
        if (zinf_config_load(&cfg, argv[optind], &co) != ZINF_OK) {
            rc = cli_fail("check", CLI_USAGE);
        } else if (zinf_config_to_json(&cfg, &json) != ZINF_OK) {
            rc = cli_fail("check", CLI_FAIL);
        } else {
            puts(json);
        }
        free(json);
        zinf_config_free(&cfg);
    }
    free(sets);
    return rc;
}
