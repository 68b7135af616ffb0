// A checkpoint's meta.json as zinf_ckpt_open reads it: a well-formed one accepted
// field for field, and damaged ones (among them what fuzzing found: a world size that
// wrapped to int, a slice x world size that overflowed, a parameter shape whose element
// count wrapped, a model size whose 4 x n_embd overflowed an int) refused as corrupt
// with a message naming the file and the key.
// timeout: 10 san=10 cuda-emu=10 san-cuda-emu=10
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "zinf.h"

static char dir[64];

static void put(const char *name, const char *text) {
    char p[128];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
        fprintf(stderr, "cannot write %s\n", p);
        exit(1);
    }
}

#define MODEL "{\"n_layer\": 1, \"n_head\": 2, \"n_embd\": 8, \"vocab_size\": 256, \"block_size\": 16}"

// meta.json with `world`, `model`, `modules` and the rest as a real one has them.
static void put_meta(const char *world, const char *model, const char *modules) {
    char text[2048];
    snprintf(text, sizeof text,
             "{\"format\": \"zinf-checkpoint\", \"version\": 1, \"step\": 4, \"steps_applied\": 4, "
             "\"world_size\": %s, \"zero_stage\": 3, \"dtype\": \"bf16\", "
             "\"model\": %s, "
             "\"modules\": %s, "
             "\"loss_scaler\": {\"scale\": 1.0, \"cur_iter\": 4, \"last_overflow_iter\": -1, \"cur_hysteresis\": 2}, "
             "\"data\": {\"position\": 32, \"seed\": 42}}",
             world, model, modules);
    put("meta.json", text);
}

#define MODULE                                                                                                         \
    "[{\"name\": \"ln_f\", \"numel\": 16, \"slice\": 8, \"params\": "                                                  \
    "[{\"name\": \"w\", \"shape\": [8], \"offset\": 0}, {\"name\": \"b\", \"shape\": [8], \"offset\": 8}]}]"

typedef struct {
    const char *what, *world, *model, *modules;
    const char *needle; // in the message, besides the file
} bad_case;

static const bad_case cases[] = {
    {"world size past int", "4294967297", MODEL, MODULE, "world_size is not an integer from 1 to"},
    {"world size 2^32 (0 as an int)", "4294967296", MODEL,
     "[{\"name\": \"e\", \"numel\": 0, \"slice\": 0, \"params\": []}]", "world_size is not an integer from 1 to"},
    {"slice x world size overflows", "2", MODEL,
     "[{\"name\": \"e\", \"numel\": 16, \"slice\": 9223372036854775807, \"params\": []}]",
     "module e: slice 9223372036854775807 x world_size 2 overflows"},
    {"slices short of the module", "2", MODEL, "[{\"name\": \"e\", \"numel\": 16, \"slice\": 7, \"params\": []}]",
     "module e: slice 7 x world_size 2 is fewer than its 16 elements"},
    {"parameter shape wraps", "2", MODEL,
     "[{\"name\": \"e\", \"numel\": 16, \"slice\": 8, \"params\": "
     "[{\"name\": \"w\", \"shape\": [4294967296, 4294967296], \"offset\": 0}]}]",
     "w has a shape larger than module e"},
    {"parameter outside its module", "2", MODEL,
     "[{\"name\": \"e\", \"numel\": 16, \"slice\": 8, \"params\": [{\"name\": \"w\", \"shape\": [8], \"offset\": 9}]}]",
     "w lies outside module e"},
    {"a model size past the limit", "2",
     "{\"n_layer\": 1, \"n_head\": 2, \"n_embd\": 555555558, \"vocab_size\": 256, \"block_size\": 16}", MODULE,
     "the model object is malformed: n_embd"},
};

int main(void) {
    snprintf(dir, sizeof dir, "%s/zinf-ckpt-meta-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    put("rank0.safetensors", "");
    put("rank1.safetensors", "");

    // ---- well-formed ----
    put_meta("2", MODEL, MODULE);
    zinf_ckpt *c = NULL;
    zinf_status st = zinf_ckpt_open(&c, dir);
    CHECK(st == ZINF_OK, "open: %s", zinf_last_error());
    if (st == ZINF_OK) {
        const zinf_ckpt_info *in = zinf_ckpt_info_of(c);
        CHECK(in->world_size == 2 && in->zero_stage == 3 && in->nmod == 1 && in->step == 4 && in->seed == 42,
              "world %d stage %d nmod %d step %lld seed %lld", in->world_size, in->zero_stage, in->nmod,
              (long long)in->step, (long long)in->seed);
        CHECK(in->nmod == 1 && in->mods[0].nparams == 2 && in->mods[0].params[1].offset == 8 &&
                  in->mods[0].params[1].numel == 8,
              "the module's parameters");
    }
    zinf_ckpt_close(c);

    // ---- damaged ----
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        put_meta(cases[i].world, cases[i].model, cases[i].modules);
        c = NULL;
        st = zinf_ckpt_open(&c, dir);
        CHECK(st == ZINF_ERR_CORRUPT, "%s: status %s (%s)", cases[i].what, zinf_status_str(st), zinf_last_error());
        CHECK(c == NULL, "%s: a handle on failure", cases[i].what);
        CHECK_CONTAINS(zinf_last_error(), "meta.json");
        CHECK_CONTAINS(zinf_last_error(), cases[i].needle);
        zinf_ckpt_close(c);
    }

    char p[128];
    for (int r = 0; r < 2; r++) {
        snprintf(p, sizeof p, "%s/rank%d.safetensors", dir, r);
        unlink(p);
    }
    snprintf(p, sizeof p, "%s/meta.json", dir);
    unlink(p);
    rmdir(dir);
    return check_exit("test_checkpoint_meta");
}
