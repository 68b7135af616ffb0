// Shared by the engine tests (test_engine_steps, test_engine_speculate): a model's full
// states read back through the public API, and the test program run again on 2 ranks.
#ifndef ZINF_TEST_ENGINE_H
#define ZINF_TEST_ENGINE_H

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "zinf.h"

// Every parameter's full state of kind k, concatenated in model order (the caller frees it).
static inline float *engine_all_of(zinf_engine *e, zinf_state_kind k, size_t *n) {
    const zinf_model *m = zinf_engine_model(e);
    size_t total = 0, at = 0;
    for (int i = 0; i < zinf_model_module_count(m); i++)
        for (int j = 0; j < zinf_model_module(m, i)->nparams; j++)
            total += zinf_model_module(m, i)->params[j].numel;
    float *v = malloc(total * sizeof *v);
    for (int i = 0; i < zinf_model_module_count(m); i++)
        for (int j = 0; j < zinf_model_module(m, i)->nparams; j++) {
            const zinf_param_info *p = &zinf_model_module(m, i)->params[j];
            CHECK(zinf_engine_get_full(e, p->name, k, v + at) == ZINF_OK, "%s", zinf_last_error());
            at += p->numel;
        }
    *n = total;
    return v;
}

// This program again under mpirun -np 2 with args (already quoted), its exit status
// checked; without MPI in the build it says so, naming what runs on 1 rank only.
static inline void engine_rerun_2_ranks(const char *test, const char *args, const char *one_rank_only) {
    zinf_comm_info info;
    zinf_comm_probe(&info);
    if (!info.mpi) {
        printf("%s: this build has no MPI: %s on 1 rank only\n", test, one_rank_only);
        return;
    }
    char exe[4096], cmd[4600];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    CHECK(len > 0, "cannot read /proc/self/exe");
    if (len <= 0) return;
    exe[len] = '\0';
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0); // tests/run sets these; so does this, for a run by hand
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
    setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 0);
    snprintf(cmd, sizeof cmd, "mpirun -np 2 '%s' %s", exe, args);
    fflush(stdout);
    int rc = system(cmd);
    CHECK(rc != -1 && WIFEXITED(rc) && WEXITSTATUS(rc) == 0, "%s: status %d", cmd, rc);
}

#endif
