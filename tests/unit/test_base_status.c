// Status names, the per-thread error detail, errno mapping, and size parsing.
// timeout: 10 san=10 cuda-emu=10 san-cuda-emu=10
#include <errno.h>
#include <pthread.h>
#include <stdint.h>

#include "check.h"
#include "zinf.h"

static void *other_thread(void *arg) {
    (void)arg;
    // A fresh thread starts with no error, and its failures stay its own.
    CHECK(zinf_last_error()[0] == '\0', "new thread sees \"%s\"", zinf_last_error());
    zinf_fail(ZINF_ERR_IO, "thread failure");
    return NULL;
}

int main(void) {
    for (int s = ZINF_OK; s <= ZINF_ERR_INTERNAL; s++) {
        const char *name = zinf_status_str((zinf_status)s);
        CHECK(name && name[0] && strcmp(name, "unknown status") != 0, "status %d has no name", s);
        for (int t = ZINF_OK; t < s; t++)
            CHECK(strcmp(name, zinf_status_str((zinf_status)t)) != 0, "statuses %d and %d share a name", s, t);
    }
    CHECK(strcmp(zinf_status_str((zinf_status)999), "unknown status") == 0, "out-of-range status");

    CHECK(zinf_fail(ZINF_ERR_INVAL, "key %s: bad %d", "a.b", 7) == ZINF_ERR_INVAL, "zinf_fail returns its status");
    CHECK(strcmp(zinf_last_error(), "key a.b: bad 7") == 0, "detail is \"%s\"", zinf_last_error());
    // A failure that repeats or extends the last one's detail keeps it.
    zinf_fail(ZINF_ERR_NOMEM, "%s", zinf_last_error());
    CHECK(strcmp(zinf_last_error(), "key a.b: bad 7") == 0, "repeated detail is \"%s\"", zinf_last_error());
    zinf_fail(ZINF_ERR_NOMEM, "engine: %s; lower it", zinf_last_error());
    CHECK(strcmp(zinf_last_error(), "engine: key a.b: bad 7; lower it") == 0, "extended detail is \"%s\"",
          zinf_last_error());
    CHECK(zinf_fail_errno(ENOSPC, "write %s", "/x") == ZINF_ERR_NOSPC, "ENOSPC maps to NOSPC");
    CHECK_CONTAINS(zinf_last_error(), "write /x: ");
    CHECK_CONTAINS(zinf_last_error(), strerror(ENOSPC));
    CHECK(zinf_status_from_errno(ENOMEM) == ZINF_ERR_NOMEM, "ENOMEM");
    CHECK(zinf_status_from_errno(EIO) == ZINF_ERR_IO, "EIO");
    CHECK(zinf_status_from_errno(EFBIG) == ZINF_ERR_NOSPC, "EFBIG (file size limit) is a space problem");
    CHECK(zinf_fail_errno(0, "odd") == ZINF_ERR_IO, "errno 0 still reports a failure");

    zinf_fail(ZINF_ERR_INVAL, "main failure");
    pthread_t t;
    pthread_create(&t, NULL, other_thread, NULL);
    pthread_join(t, NULL);
    CHECK(strcmp(zinf_last_error(), "main failure") == 0, "another thread's failure leaked: \"%s\"", zinf_last_error());

    // ---- sizes ----
    static const struct {
        const char *s;
        uint64_t v;
    } good[] = {{"0", 0},           {"4096", 4096},
                {"64K", 65536},     {"64k", 65536},
                {"1M", 1048576},    {"1MiB", 1048576},
                {"1mb", 1048576},   {"2G", 2147483648ULL},
                {"3T", 3ULL << 40}, {"16777215T", 16777215ULL << 40}};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        uint64_t v = 1234;
        CHECK(zinf_size_parse(good[i].s, &v) == ZINF_OK && v == good[i].v, "\"%s\" -> %llu", good[i].s,
              (unsigned long long)v);
    }
    static const char *const bad[] = {"",          "K", "-1", "1.5G", "12Q", "1KB2", "1 M", "99999999999999999999",
                                      "16777216T", " 1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint64_t v;
        zinf_status st = zinf_size_parse(bad[i], &v);
        CHECK(st == ZINF_ERR_INVAL, "\"%s\" accepted", bad[i]);
        if (st != ZINF_OK) CHECK_CONTAINS(zinf_last_error(), "invalid size");
    }
    char buf[32];
    CHECK(strcmp(zinf_size_format(512, buf, sizeof buf), "512 B") == 0, "%s", buf);
    CHECK(strcmp(zinf_size_format(4096, buf, sizeof buf), "4 KiB") == 0, "%s", buf);
    CHECK(strcmp(zinf_size_format(3ULL << 29, buf, sizeof buf), "1.5 GiB") == 0, "%s", buf);
    return check_exit("test_base_status");
}
