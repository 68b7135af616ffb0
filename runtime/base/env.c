// The table of environment knobs zinf reads, each read once, and the launcher's rank.
#include <pthread.h>
#include <stdlib.h>

#include "zinf_internal.h"

static const struct {
    const char *name;
    const char *doc;
} knobs[ZINF_ENV_COUNT] = {
    [ZINF_ENV_LOG_LEVEL] = {"ZINF_LOG_LEVEL", "log level: error, warn, info (default) or debug"},
    [ZINF_ENV_COMM_TIMEOUT] = {"ZINF_COMM_TIMEOUT", "seconds a rank waits in a collective before it gives up on the others (default 300)"},
    [ZINF_ENV_RANKS_PER_NODE] = {"ZINF_RANKS_PER_NODE", "treat every K consecutive ranks as one node (ZeRO++ and the communication counters; default: the ranks on one host)"},
    [ZINF_ENV_SIMD] = {"ZINF_SIMD", "cap the CPU kernels' SIMD level: scalar, avx2 or avx512 (default: the best the CPU has)"},
    [ZINF_ENV_PROGRESS] = {"ZINF_PROGRESS", "seconds between the progress lines of long work (reading init_from, exports and consolidate, io-tune; default 10; 0: every step of it)"},
    [ZINF_ENV_FAULT] = {"ZINF_FAULT", "for tests: make requests fail, KIND:N:WHAT[@RANK],... (the Nth read, write or save of this process fails with eio, enospc, eintr, eagain, short or corrupt; docs/fault-tolerance.md)"},
};

static const char *values[ZINF_ENV_COUNT];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void read_all(void) {
    for (int k = 0; k < ZINF_ENV_COUNT; k++)
        values[k] = getenv(knobs[k].name);
}

const char *zinf_env(zinf_env_knob k) {
    pthread_once(&once, read_all);
    return (unsigned)k < ZINF_ENV_COUNT ? values[k] : NULL;
}

const char *zinf_env_name(zinf_env_knob k) { return (unsigned)k < ZINF_ENV_COUNT ? knobs[k].name : "?"; }
const char *zinf_env_doc(zinf_env_knob k) { return (unsigned)k < ZINF_ENV_COUNT ? knobs[k].doc : "?"; }

// Launchers each name rank and size their own way; the first pair found wins.
void zinf_launcher_rank(int *rank, int *world_size) {
    static const char *const pairs[][2] = {
        {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
        {"PMIX_RANK", "PMIX_SIZE"},
        {"PMI_RANK", "PMI_SIZE"},
        {"SLURM_PROCID", "SLURM_NTASKS"},
    };
    *rank = 0;
    *world_size = 1;
    for (size_t i = 0; i < ZINF_ARRAY_LEN(pairs); i++) {
        const char *r = getenv(pairs[i][0]), *n = getenv(pairs[i][1]);
        if (r && n && atoi(n) > 0) {
            *rank = atoi(r);
            *world_size = atoi(n);
            return;
        }
    }
}
