// Tiny assertion helpers for zinf's unit tests: count failures, keep going, and exit 1
// at the end if any check failed (never print a failure and exit 0).
#ifndef ZINF_TEST_CHECK_H
#define ZINF_TEST_CHECK_H

#include <stdio.h>
#include <string.h>

static int check_failures;

#define CHECK(cond, ...)                                                                                               \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            check_failures++;                                                                                          \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);                                   \
            fprintf(stderr, __VA_ARGS__);                                                                              \
            fputc('\n', stderr);                                                                                       \
        }                                                                                                              \
    } while (0)

#define CHECK_CONTAINS(haystack, needle)                                                                               \
    CHECK(strstr((haystack), (needle)) != NULL, "\"%s\" does not contain \"%s\"", (haystack), (needle))

static inline int check_exit(const char *name) {
    if (check_failures)
        fprintf(stderr, "%s: %d check(s) failed\n", name, check_failures);
    else
        printf("%s: all checks passed\n", name);
    return check_failures ? 1 : 0;
}

#endif
