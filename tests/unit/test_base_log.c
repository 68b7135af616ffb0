// Logging: level filter, rank filter (rank 0 alone at INFO), callback, ZINF_LOG_LEVEL.
// timeout: 10 san=10 cuda-emu=10 san-cuda-emu=10
#include <stdlib.h>

#include "check.h"
#include "zinf.h"

typedef struct {
    int count;
    zinf_log_level last_level;
    int last_rank;
    char last[256];
} sink;

static void capture(zinf_log_level level, int rank, const char *msg, void *user) {
    sink *s = user;
    s->count++;
    s->last_level = level;
    s->last_rank = rank;
    snprintf(s->last, sizeof s->last, "%s", msg);
}

int main(void) {
    // Read once at first use: set before anything logs.
    setenv("ZINF_LOG_LEVEL", "warn", 1);
    CHECK(zinf_log_get_level() == ZINF_LOG_LEVEL_WARN, "ZINF_LOG_LEVEL=warn gives %d", zinf_log_get_level());
    CHECK(zinf_log_level_parse("debug") == ZINF_LOG_LEVEL_DEBUG, "debug");
    CHECK(zinf_log_level_parse("ERROR") == ZINF_LOG_LEVEL_ERROR, "ERROR");
    CHECK(zinf_log_level_parse("2") == ZINF_LOG_LEVEL_INFO, "2");
    CHECK(zinf_log_level_parse("loud") == -1, "loud");

    sink s = {0};
    zinf_log_set_callback(capture, &s);
    zinf_log_set_rank(0, 1);
    ZINF_LOG_INFO("hidden at warn");
    CHECK(s.count == 0, "info passed a warn filter");
    ZINF_LOG_WARN("disk %s nearly full\n", "/nvme0");
    CHECK(s.count == 1 && s.last_level == ZINF_LOG_LEVEL_WARN, "warning dropped");
    CHECK(strcmp(s.last, "disk /nvme0 nearly full") == 0, "message \"%s\" (trailing newline must go)", s.last);

    zinf_log_set_level(ZINF_LOG_LEVEL_INFO);
    zinf_log_set_rank(1, 4);
    ZINF_LOG_INFO("rank 1 info");
    CHECK(s.count == 1, "INFO from rank 1 must be silent");
    ZINF_LOG_ERROR("rank 1 error");
    CHECK(s.count == 2 && s.last_rank == 1, "errors come from every rank");
    zinf_log_set_rank(0, 4);
    ZINF_LOG_INFO("rank 0 info");
    CHECK(s.count == 3 && s.last_rank == 0, "INFO from rank 0 passes");

    zinf_log_set_level(ZINF_LOG_LEVEL_DEBUG);
    zinf_log_set_rank(3, 4);
    ZINF_LOG_DEBUG("rank 3 debug");
    CHECK(s.count == 4, "DEBUG shows every rank");

    zinf_log_set_callback(NULL, NULL);
    int rank, world;
    setenv("OMPI_COMM_WORLD_RANK", "2", 1);
    setenv("OMPI_COMM_WORLD_SIZE", "3", 1);
    zinf_launcher_rank(&rank, &world);
    CHECK(rank == 2 && world == 3, "launcher rank %d/%d", rank, world);
    return check_exit("test_base_log");
}
