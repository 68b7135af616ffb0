// zinf consolidate: one Hugging Face GPT-2 safetensors file (GPT2LMHeadModel's names,
// the tied lm_head left out, as save_pretrained writes it) from a checkpoint's fp32
// master weights. Each module's slices are streamed from the rank files in order,
// checked against their checksums, and appended to the output as they come, so memory
// stays at two small buffers whatever the model's size.
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "cli.h"
#include "zinf_half.h"

enum { CHUNK_BYTES = 1 << 20 }; // what consolidation costs in memory, beside the process itself

typedef struct out_ctx {
    zinf_st_writer *w;
    const zinf_ckpt_module *mod;
    int next;       // the first parameter not yet complete
    zinf_dtype dt;  // F32 or BF16
    void *conv;     // CHUNK_BYTES / 2 for bf16
} out_ctx;

// Elements [off, off + n) of the module's flat buffer arrive in order: the parts of
// its parameters among them go out, in order (the alignment gaps between them do not).
static zinf_status emit(void *arg, size_t off, const void *p, size_t n) {
    out_ctx *c = arg;
    for (int j = c->next; j < c->mod->nparams; j++) {
        const zinf_param_info *q = &c->mod->params[j];
        size_t a = q->offset > off ? q->offset : off, b = q->offset + q->numel < off + n ? q->offset + q->numel : off + n;
        if (q->offset >= off + n) break;
        if (a >= b) continue;
        const float *src = (const float *)p + (a - off);
        if (c->dt == ZINF_DTYPE_F32) {
            ZINF_CHECK(zinf_st_writer_append(c->w, src, (b - a) * sizeof(float)));
        } else {
            for (size_t i = 0; i < b - a; i++)
                dt_store(c->conv, ZINF_DTYPE_BF16, i, src[i]);
            ZINF_CHECK(zinf_st_writer_append(c->w, c->conv, (b - a) * 2));
        }
        if (b == q->offset + q->numel) c->next = j + 1;
    }
    return ZINF_OK;
}

static zinf_status consolidate(zinf_ckpt *ck, const char *out, zinf_dtype dt, int *ntensors) {
    const zinf_ckpt_info *in = zinf_ckpt_info_of(ck);
    int n = 0;
    for (int i = 0; i < in->nmod; i++)
        n += in->mods[i].nparams;
    *ntensors = n;
    zinf_st_tensor *t = calloc((size_t)n, sizeof *t);
    char(*names)[64] = calloc((size_t)n, sizeof *names);
    void *buf = malloc(CHUNK_BYTES), *conv = malloc(CHUNK_BYTES / 2);
    zinf_status s = t && names && buf && conv ? ZINF_OK : zinf_fail(ZINF_ERR_NOMEM, "consolidate: out of memory");
    for (int i = 0, k = 0; s == ZINF_OK && i < in->nmod; i++)
        for (int j = 0; j < in->mods[i].nparams; j++, k++) {
            const zinf_param_info *q = &in->mods[i].params[j];
            snprintf(names[k], sizeof names[k], "transformer.%s", q->name);
            t[k] = (zinf_st_tensor){.name = names[k], .dtype = dt, .ndim = q->ndim,
                                    .nbytes = q->numel * zinf_dtype_size(dt)};
            memcpy(t[k].shape, q->shape, sizeof q->shape);
        }
    char step[32];
    snprintf(step, sizeof step, "%lld", (long long)in->step);
    const char *meta[] = {"zinf.checkpoint_step", step};
    zinf_st_writer *w = NULL;
    if (s == ZINF_OK) s = zinf_st_writer_open(&w, out, t, n, meta, 1);
    for (int i = 0; s == ZINF_OK && i < in->nmod; i++) {
        out_ctx c = {w, &in->mods[i], 0, dt, conv};
        s = zinf_ckpt_read(ck, i, ZINF_CKPT_MASTER, 0, (size_t)in->mods[i].numel, buf, CHUNK_BYTES, emit, &c);
    }
    if (s == ZINF_OK) s = zinf_st_writer_finish(w);
    else zinf_st_writer_abort(w);
    free(t), free(names), free(buf), free(conv);
    return s;
}

int cli_consolidate(int argc, char **argv) {
    static const struct option opts[] = {
        {"dtype", required_argument, NULL, 'd'},
        {"json", no_argument, NULL, 'j'},
        {NULL, 0, NULL, 0},
    };
    zinf_dtype dt = ZINF_DTYPE_F32;
    bool json = false;
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'd':
            if (strcmp(optarg, "fp32") == 0) dt = ZINF_DTYPE_F32;
            else if (strcmp(optarg, "bf16") == 0) dt = ZINF_DTYPE_BF16;
            else return cli_usage("consolidate", "--dtype: \"%s\"; use fp32 or bf16", optarg);
            break;
        case 'j': json = true; break;
        default: return cli_usage("consolidate", "unknown option %s", argv[optind - 1]);
        }
    }
    if (argc - optind != 2)
        return cli_usage("consolidate", argc - optind < 2 ? "needs CKPT_DIR and OUT.safetensors"
                                                          : "unexpected argument \"%s\"",
                         argv[argc - 1]);
    double t0 = zinf_clock_s();
    zinf_ckpt *ck;
    if (zinf_ckpt_open(&ck, argv[optind]) != ZINF_OK) return cli_fail("consolidate", CLI_FAIL);
    int ntensors = 0;
    zinf_status s = consolidate(ck, argv[optind + 1], dt, &ntensors);
    const zinf_ckpt_info *in = zinf_ckpt_info_of(ck);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", zinf_ckpt_dir(ck));
    int64_t step = in->step;
    int world = in->world_size;
    zinf_ckpt_close(ck);
    if (s != ZINF_OK) return cli_fail("consolidate", CLI_FAIL);
    double secs = zinf_clock_s() - t0;
    struct stat sb;
    int64_t bytes = stat(argv[optind + 1], &sb) == 0 ? (int64_t)sb.st_size : 0;
    struct rusage ru;
    int64_t peak = getrusage(RUSAGE_SELF, &ru) == 0 ? (int64_t)ru.ru_maxrss * 1024 : 0;
    if (json)
        cli_print_json_line(json_pack("{s:i, s:I, s:I, s:f}", "tensors", ntensors, "bytes", (json_int_t)bytes,
                                      "peak_rss_bytes", (json_int_t)peak, "seconds", secs));
    else
        printf("consolidated %s (step %lld, %d rank%s) into %s: %d tensors, %.1f MiB of %s in %.2f s, peak RSS %.1f "
               "MiB\n",
               dir, (long long)step, world, world == 1 ? "" : "s", argv[optind + 1], ntensors, (double)bytes / 1048576,
               zinf_dtype_name(dt), secs, (double)peak / 1048576);
    return CLI_OK;
}
