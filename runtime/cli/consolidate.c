// zinf consolidate: a checkpoint's fp32 master weights as Hugging Face GPT-2 files: one
// safetensors file, or a model directory that from_pretrained loads
// (zinf_ckpt_export_file / _dir: streamed, memory bounded whatever the model's size).
#include <dirent.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "cli.h"

// The bytes of the file, or of the files in the directory.
static int64_t file_bytes(const char *path) {
    struct stat sb;
    if (stat(path, &sb) != 0) return 0;
    if (!S_ISDIR(sb.st_mode)) return (int64_t)sb.st_size;
    int64_t sum = 0;
    DIR *d = opendir(path);
    char p[PATH_MAX + 256];
    for (struct dirent *de; d && (de = readdir(d));) {
        snprintf(p, sizeof p, "%s/%s", path, de->d_name);
        if (stat(p, &sb) == 0 && S_ISREG(sb.st_mode)) sum += (int64_t)sb.st_size;
    }
    if (d) closedir(d);
    return sum;
}

int cli_consolidate(int argc, char **argv) {
    static const struct option opts[] = {
        {"dtype", required_argument, NULL, 'd'},
        {"max-shard-size", required_argument, NULL, 'm'},
        {"json", no_argument, NULL, 'j'},
        {NULL, 0, NULL, 0},
    };
    zinf_dtype dt = ZINF_DTYPE_F32;
    uint64_t max_shard = 5000000000ull; // save_pretrained's "5GB" (decimal, as Hugging Face counts)
    bool json = false;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'd':
            if (strcmp(optarg, "fp32") == 0)
                dt = ZINF_DTYPE_F32;
            else if (strcmp(optarg, "bf16") == 0)
                dt = ZINF_DTYPE_BF16;
            else
                return cli_usage("consolidate", "--dtype: \"%s\"; use fp32 or bf16", optarg);
            break;
        case 'm':
            if (!cli_parse_hf_size(optarg, &max_shard))
                return cli_usage("consolidate", "--max-shard-size: \"%s\" is not a size like 5GB, 500MB or 2GiB",
                                 optarg);
            break;
        case 'j': json = true; break;
        default: return cli_usage("consolidate", "unknown option %s", argv[optind - 1]);
        }
    }
    if (argc - optind != 2)
        return cli_usage("consolidate",
                         argc - optind < 2 ? "needs CKPT_DIR and OUT (a .safetensors file or a directory)"
                                           : "unexpected argument \"%s\"",
                         argv[argc - 1]);
    const char *out = argv[optind + 1];
    size_t len = strlen(out);
    bool file = len > 12 && strcmp(out + len - 12, ".safetensors") == 0;
    double t0 = zinf_clock_s();
    zinf_ckpt *ck;
    if (zinf_ckpt_open(&ck, argv[optind]) != ZINF_OK) return cli_fail("consolidate", CLI_FAIL);
    const zinf_ckpt_info *in = zinf_ckpt_info_of(ck);
    int ntensors = 0;
    for (int i = 0; i < in->nmod; i++)
        ntensors += in->mods[i].nparams;
    zinf_status s = file ? zinf_ckpt_export_file(ck, out, ZINF_CKPT_MASTER, dt)
                         : zinf_ckpt_export_dir(ck, out, ZINF_CKPT_MASTER, dt, max_shard);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", zinf_ckpt_dir(ck));
    int64_t step = in->step;
    int world = in->world_size;
    zinf_ckpt_close(ck);
    if (s != ZINF_OK) return cli_fail("consolidate", CLI_FAIL);
    double secs = zinf_clock_s() - t0;
    int64_t bytes = file_bytes(out);
    struct rusage ru;
    int64_t peak = getrusage(RUSAGE_SELF, &ru) == 0 ? (int64_t)ru.ru_maxrss * 1024 : 0;
    if (json)
        cli_print_json_line(json_pack("{s:i, s:I, s:I, s:f}", "tensors", ntensors, "bytes", (json_int_t)bytes,
                                      "peak_rss_bytes", (json_int_t)peak, "seconds", secs));
    else
        printf("consolidated %s (step %lld, %d rank%s) into %s: %d tensors, %.1f MiB of %s in %.2f s, peak RSS %.1f "
               "MiB\n",
               dir, (long long)step, world, world == 1 ? "" : "s", out, ntensors, (double)bytes / 1048576,
               zinf_dtype_name(dt), secs, (double)peak / 1048576);
    return CLI_OK;
}
