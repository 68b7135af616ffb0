// Faults on demand, for the tests of what zinf does when a drive fails: ZINF_FAULT
// (or zinf_fault_set) names requests that fail, e.g. "read:12:eio" makes the 12th read
// of the swap store's drives fail with EIO. The aio engine asks for each request it
// issues, the checkpoint writers for each write(); nothing is asked for otherwise.
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zinf_internal.h"

enum { MAX_FAULTS = 8 };

typedef struct fault {
    zinf_fault_kind kind;
    uint64_t nth; // 1-based, of the requests of its kind this process makes
    int what;     // errno, or ZINF_FAULT_SHORT / ZINF_FAULT_CORRUPT
} fault;

static const char *const kind_names[ZINF_FAULT_KINDS] = {"read", "write", "save"};
static const struct {
    const char *name;
    int what;
} whats[] = {{"eio", EIO},       {"enospc", ENOSPC},          {"eintr", EINTR},
             {"eagain", EAGAIN}, {"short", ZINF_FAULT_SHORT}, {"corrupt", ZINF_FAULT_CORRUPT}};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static bool loaded; // the environment's faults read (or replaced by zinf_fault_set)
static fault faults[MAX_FAULTS];
static int nfaults;
static uint64_t counts[ZINF_FAULT_KINDS];

// One "KIND:N:WHAT[@RANK]"; a fault for another rank is dropped.
static zinf_status parse_one(const char *item, int rank, fault *f, bool *mine) {
    char kind[16], what[16];
    unsigned long long nth;
    int on_rank = -1, used = 0;
    if (sscanf(item, "%15[a-z]:%llu:%15[a-z]%n", kind, &nth, what, &used) != 3 ||
        (item[used] && sscanf(item + used, "@%d%n", &on_rank, &used) != 1) || nth == 0)
        return zinf_fail(ZINF_ERR_INVAL, "ZINF_FAULT item \"%s\": want KIND:N:WHAT[@RANK], N from 1", item);
    f->kind = ZINF_FAULT_KINDS;
    for (int k = 0; k < ZINF_FAULT_KINDS; k++)
        if (strcmp(kind, kind_names[k]) == 0) f->kind = (zinf_fault_kind)k;
    if (f->kind == ZINF_FAULT_KINDS)
        return zinf_fail(ZINF_ERR_INVAL, "ZINF_FAULT item \"%s\": kind \"%s\" is none of read, write, save", item,
                         kind);
    f->what = 0;
    for (size_t i = 0; i < ZINF_ARRAY_LEN(whats); i++)
        if (strcmp(what, whats[i].name) == 0) f->what = whats[i].what;
    if (!f->what)
        return zinf_fail(ZINF_ERR_INVAL,
                         "ZINF_FAULT item \"%s\": \"%s\" is none of eio, enospc, eintr, eagain, short, corrupt", item,
                         what);
    if (f->kind == ZINF_FAULT_SAVE && (f->what == ZINF_FAULT_SHORT || f->what == ZINF_FAULT_CORRUPT))
        return zinf_fail(ZINF_ERR_INVAL, "ZINF_FAULT item \"%s\": a save fails with an errno, not %s", item, what);
    if (f->what == ZINF_FAULT_CORRUPT && f->kind != ZINF_FAULT_READ)
        return zinf_fail(ZINF_ERR_INVAL, "ZINF_FAULT item \"%s\": only a read returns corrupt data", item);
    f->nth = nth;
    *mine = on_rank < 0 || on_rank == rank;
    return ZINF_OK;
}

static zinf_status parse(const char *spec, fault *out, int *n) {
    int rank, world;
    zinf_launcher_rank(&rank, &world);
    *n = 0;
    char buf[512];
    if (strlen(spec) >= sizeof buf) return zinf_fail(ZINF_ERR_INVAL, "ZINF_FAULT: longer than %zu bytes", sizeof buf);
    snprintf(buf, sizeof buf, "%s", spec);
    char *save = NULL;
    for (char *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        if (*n == MAX_FAULTS) return zinf_fail(ZINF_ERR_INVAL, "ZINF_FAULT: at most %d faults", MAX_FAULTS);
        bool mine;
        ZINF_CHECK(parse_one(item, rank, &out[*n], &mine));
        if (mine) (*n)++;
    }
    return ZINF_OK;
}

zinf_status zinf_fault_set(const char *spec) {
    fault parsed[MAX_FAULTS];
    int n = 0;
    if (spec) ZINF_CHECK(parse(spec, parsed, &n));
    pthread_mutex_lock(&mu);
    memcpy(faults, parsed, sizeof parsed);
    nfaults = n;
    memset(counts, 0, sizeof counts);
    loaded = true;
    pthread_mutex_unlock(&mu);
    return ZINF_OK;
}

int zinf_fault_next(zinf_fault_kind kind) {
    pthread_mutex_lock(&mu);
    if (!loaded) {
        loaded = true;
        const char *spec = zinf_env(ZINF_ENV_FAULT);
        if (spec && parse(spec, faults, &nfaults) != ZINF_OK) {
            // A test asked for faults it will not get: say so loudly, it then fails.
            ZINF_LOG_ERROR("%s; no fault is injected", zinf_last_error());
            nfaults = 0;
        }
    }
    int what = 0;
    if (nfaults) {
        uint64_t nth = ++counts[kind];
        for (int i = 0; i < nfaults; i++)
            if (faults[i].kind == kind && faults[i].nth == nth) what = faults[i].what;
    }
    pthread_mutex_unlock(&mu);
    return what;
}
