// The aio section of a config drives the engine: DeepSpeed's spelling (thread_count)
// and zinf's (intra_op_parallelism) give the same rings, the defaults are the
// engine's, and an engine made from the section moves bytes.
// timeout: 10 san=10 cuda-emu=10 san-cuda-emu=10
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "zinf.h"

static zinf_aio_params params_of(const char *json) {
    zinf_config cfg;
    zinf_aio_params p = {0};
    if (zinf_config_parse(&cfg, json, "test.json", NULL) != ZINF_OK) {
        CHECK(0, "parse %s: %s", json, zinf_last_error());
        return p;
    }
    p = zinf_config_aio_params(&cfg);
    zinf_config_free(&cfg);
    return p;
}

int main(void) {
    zinf_aio_params ds = params_of("{\"train_batch_size\": 1, \"aio\": {\"block_size\": 262144, \"queue_depth\": 16, "
                                   "\"thread_count\": 3, \"single_submit\": true, \"overlap_events\": false}}");
    CHECK(ds.block_size == 262144 && ds.queue_depth == 16 && ds.threads == 3 && !ds.sqpoll && !ds.use_threads,
          "DeepSpeed aio section: block %u depth %u threads %u", ds.block_size, ds.queue_depth, ds.threads);
    zinf_aio_params own =
        params_of("{\"train_batch_size\": 1, \"aio\": {\"block_size\": \"256K\", \"intra_op_parallelism\": 3, "
                  "\"queue_depth\": 16}}");
    CHECK(memcmp(&own, &ds, sizeof own) == 0, "intra_op_parallelism and thread_count give different engines");
    zinf_aio_params def = params_of("{\"train_batch_size\": 1}");
    CHECK(def.block_size == 1u << 20 && def.queue_depth == 8 && def.threads == 1,
          "defaults: block %u depth %u threads %u", def.block_size, def.queue_depth, def.threads);

    zinf_aio *aio;
    CHECK(zinf_aio_create(&aio, &ds) == 0, "engine from the section: %s", zinf_last_error());
    char dir[] = "/var/tmp/zinf-cfgaio-XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    const char *dirs[] = {dir};
    zinf_aio_file *f;
    zinf_aio_file_config fc = {.dirs = dirs, .ndirs = 1, .name = "swap.bin", .size = 1 << 20};
    CHECK(zinf_aio_file_open(aio, &f, &fc) == 0, "open: %s", zinf_last_error());
    unsigned char *a, *b;
    CHECK(posix_memalign((void **)&a, 4096, 1 << 20) == 0 && posix_memalign((void **)&b, 4096, 1 << 20) == 0, "alloc");
    for (int i = 0; i < 1 << 20; i++)
        a[i] = (unsigned char)(i * 7 + 3);
    zinf_aio_ticket t;
    CHECK(zinf_aio_write(aio, f, 0, a, 1 << 20, &t) == 0 && zinf_aio_wait(aio, t) == 0, "write: %s",
          zinf_last_error());
    CHECK(zinf_aio_read(aio, f, 0, b, 1 << 20, &t) == 0 && zinf_aio_wait(aio, t) == 0, "read: %s", zinf_last_error());
    CHECK(memcmp(a, b, 1 << 20) == 0, "bytes read differ");
    zinf_aio_stats st;
    zinf_aio_get_stats(aio, &st);
    CHECK(st.requests == 8, "1 MiB in 256 KiB blocks is 8 requests, got %llu", (unsigned long long)st.requests);
    zinf_aio_file_close(f);
    zinf_aio_destroy(aio);
    rmdir(dir);
    free(a);
    free(b);
    return check_exit("test_config_aio");
}
