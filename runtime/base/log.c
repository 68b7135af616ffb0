// Leveled logging with a rank prefix; rank 0 alone speaks at INFO (NCCL/ggml style).
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "zinf_internal.h"

static struct {
    pthread_mutex_t lock; // one message at a time, so lines from threads never interleave
    int level;            // -1 until first use: then ZINF_LOG_LEVEL or INFO
    int rank, world;      // -1 until first use: then the launcher's
    zinf_log_fn fn;
    void *user;
} L = {PTHREAD_MUTEX_INITIALIZER, -1, -1, -1, NULL, NULL};

static const char *const names[] = {"error", "warning", "info", "debug"};

int zinf_log_level_parse(const char *s) {
    if (!s) return -1;
    for (int i = 0; i < (int)ZINF_ARRAY_LEN(names); i++)
        if (strcasecmp(s, names[i]) == 0 || (s[0] == '0' + i && s[1] == '\0')) return i;
    if (strcasecmp(s, "warn") == 0) return ZINF_LOG_LEVEL_WARN;
    return -1;
}

// Called with the lock held.
static void init_locked(void) {
    if (L.rank < 0) zinf_launcher_rank(&L.rank, &L.world);
    if (L.level < 0) {
        const char *v = zinf_env(ZINF_ENV_LOG_LEVEL);
        int lvl = zinf_log_level_parse(v);
        L.level = lvl >= 0 ? lvl : ZINF_LOG_LEVEL_INFO;
        if (v && lvl < 0)
            fprintf(stderr, "zinf: warning: ZINF_LOG_LEVEL=\"%s\" is not one of error, warn, info, debug; using info\n",
                    v);
    }
}

void zinf_log_set_level(zinf_log_level level) {
    pthread_mutex_lock(&L.lock);
    L.level = level;
    pthread_mutex_unlock(&L.lock);
}

zinf_log_level zinf_log_get_level(void) {
    pthread_mutex_lock(&L.lock);
    init_locked();
    int lvl = L.level;
    pthread_mutex_unlock(&L.lock);
    return (zinf_log_level)lvl;
}

void zinf_log_set_callback(zinf_log_fn fn, void *user) {
    pthread_mutex_lock(&L.lock);
    L.fn = fn;
    L.user = user;
    pthread_mutex_unlock(&L.lock);
}

void zinf_log_set_rank(int rank, int world_size) {
    pthread_mutex_lock(&L.lock);
    L.rank = rank;
    L.world = world_size;
    pthread_mutex_unlock(&L.lock);
}

void zinf_logv(zinf_log_level level, const char *fmt, va_list ap) {
    pthread_mutex_lock(&L.lock);
    init_locked();
    int pass = (int)level <= L.level && (level < ZINF_LOG_LEVEL_INFO || L.rank == 0 || L.level >= ZINF_LOG_LEVEL_DEBUG);
    if (pass) {
        char msg[2048];
        vsnprintf(msg, sizeof msg, fmt, ap);
        size_t n = strlen(msg);
        while (n && msg[n - 1] == '\n')
            msg[--n] = '\0';
        if (L.fn) {
            L.fn(level, L.rank, msg, L.user);
        } else if (L.world > 1) {
            fprintf(stderr, "zinf[rank %d]: %s: %s\n", L.rank, names[level], msg);
        } else {
            fprintf(stderr, "zinf: %s: %s\n", names[level], msg);
        }
    }
    pthread_mutex_unlock(&L.lock);
}

void zinf_log(zinf_log_level level, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    zinf_logv(level, fmt, ap);
    va_end(ap);
}
