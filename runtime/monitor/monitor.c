// The monitors DeepSpeed's tensorboard and csv_monitor sections enable, in the places
// DeepSpeed puts them: output_path/job_name/ holds the event file, and one CSV per
// figure named after it with '/' and ' ' made '_' ("Train_Samples_train_loss.csv"),
// headed "step,<the name's last part>". A CSV that already has rows (a resumed run) is
// appended to without a second header.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "monitor.h"
#include "zinf_internal.h"

struct zinf_monitor {
    zinf_tfevents *tensorboard; // NULL: off
    char csv_dir[4096];         // "": off
};

// dir and the directories above it, as mkdir -p.
static zinf_status make_dirs(const char *what, const char *dir) {
    char p[4096];
    if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p)
        return zinf_fail(ZINF_ERR_INVAL, "%s: the path %s is too long", what, dir);
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s) continue;
        char c = *s;
        *s = 0;
        struct stat st;
        if (mkdir(p, 0755) != 0 && errno != EEXIST)
            return zinf_fail_errno(errno, "%s: making %s (output_path/job_name)", what, p);
        if (stat(p, &st) != 0 || !S_ISDIR(st.st_mode))
            return zinf_fail(ZINF_ERR_INVAL, "%s: %s is not a directory; set output_path or job_name elsewhere", what,
                             p);
        *s = c;
        if (!c) return ZINF_OK;
    }
}

static zinf_status place(const char *what, const zinf_monitor_config *m, char *dir, size_t size) {
    const char *job = m->job_name ? m->job_name : "DeepSpeedJobName";
    int n = m->output_path && m->output_path[0] ? snprintf(dir, size, "%s/%s", m->output_path, job)
                                                : snprintf(dir, size, "%s", job);
    if (n >= (int)size) return zinf_fail(ZINF_ERR_INVAL, "%s: output_path/job_name is too long", what);
    return make_dirs(what, dir);
}

zinf_status zinf_monitor_open(zinf_monitor **out, const zinf_config *cfg) {
    *out = NULL;
    if (!cfg->tensorboard.enabled && !cfg->csv_monitor.enabled) return ZINF_OK;
    zinf_monitor *m = calloc(1, sizeof *m);
    if (!m) return zinf_fail(ZINF_ERR_NOMEM, "monitor: out of memory");
    zinf_status st = ZINF_OK;
    if (cfg->tensorboard.enabled) {
        char dir[4096];
        st = place("tensorboard", &cfg->tensorboard, dir, sizeof dir);
        if (st == ZINF_OK) st = zinf_tfevents_open(&m->tensorboard, dir);
    }
    if (st == ZINF_OK && cfg->csv_monitor.enabled)
        st = place("csv_monitor", &cfg->csv_monitor, m->csv_dir, sizeof m->csv_dir);
    if (st != ZINF_OK) {
        zinf_monitor_close(m);
        return st;
    }
    *out = m;
    return ZINF_OK;
}

static zinf_status csv_row(const char *dir, int64_t samples, const zinf_monitor_event *ev) {
    char path[4096 + 256];
    int n = snprintf(path, sizeof path, "%s/", dir);
    for (const char *c = ev->name; *c && n < (int)sizeof path - 5; c++)
        path[n++] = *c == '/' || *c == ' ' ? '_' : *c;
    snprintf(path + n, sizeof path - (size_t)n, ".csv");
    FILE *f = fopen(path, "a");
    if (!f) return zinf_fail_errno(errno, "csv_monitor: opening %s", path);
    const char *header = strrchr(ev->name, '/') ? strrchr(ev->name, '/') + 1 : ev->name;
    bool ok = fseek(f, 0, SEEK_END) == 0 && (ftell(f) > 0 || fprintf(f, "step,%s\n", header) > 0) &&
              fprintf(f, "%lld,%.17g\n", (long long)samples, ev->value) > 0;
    if (fclose(f) != 0) ok = false;
    return ok ? ZINF_OK : zinf_fail_errno(errno ? errno : EIO, "csv_monitor: writing %s", path);
}

zinf_status zinf_monitor_write(zinf_monitor *m, int64_t samples, const zinf_monitor_event *events, int n) {
    if (!m) return ZINF_OK;
    if (m->tensorboard) ZINF_CHECK(zinf_tfevents_write(m->tensorboard, samples, events, n));
    for (int i = 0; m->csv_dir[0] && i < n; i++)
        ZINF_CHECK(csv_row(m->csv_dir, samples, &events[i]));
    return ZINF_OK;
}

void zinf_monitor_close(zinf_monitor *m) {
    if (!m) return;
    zinf_tfevents_close(m->tensorboard);
    free(m);
}
