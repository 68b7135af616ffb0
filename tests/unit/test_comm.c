// The communicator: single here, then mpi under mpirun with 1, 2 and 3 ranks (the
// test starts itself): every collective against sequential rank-order sums, bit for
// bit, at sizes 0, 1, odd and several MiB, also split into many small rounds; and a
// rank that stops makes the others fail within the timeout, then fail at once. Then
// 4 ranks as 2 nodes of 2 (ZINF_RANKS_PER_NODE): the node map, communicators split
// from it running the same suite, and the byte counts of every collective.
// timeout: 30 san=40 cuda-emu=25 san-cuda-emu=70
// without-cuda: the build has no NCCL, and a device communicator is refused naming it
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "comm/internal.h" // chunk_bytes, scratch_max: lowered to split every call
#include "zinf.h"

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

// Large values of opposite sign on ranks 0 and 1, small ones elsewhere: the sum depends
// on the order of the additions, so a sum formed in any other order shows.
static uint32_t mix(int r, size_t i) { return (uint32_t)(i * 2654435761u) ^ ((uint32_t)r * 40503u); }
static float val32(int r, size_t i) {
    float small = (float)(mix(r, i) % 997) * 0.013f + 0.5f;
    return r < 2 && i % 2 == 0 ? (r ? -1e8f : 1e8f) * (float)(1 + i % 5) + small : small;
}
static double val64(int r, size_t i) {
    double small = (double)(mix(r, i) % 997) * 0.013 + 0.5;
    return r < 2 && i % 2 == 0 ? (r ? -1e17 : 1e17) * (double)(1 + i % 5) + small : small;
}
static float sum32(int W, size_t i) {
    float s = val32(0, i);
    for (int r = 1; r < W; r++)
        s += val32(r, i);
    return s;
}
static double sum64(int W, size_t i) {
    double s = val64(0, i);
    for (int r = 1; r < W; r++)
        s += val64(r, i);
    return s;
}
static uint8_t pat(int r, size_t i) { return (uint8_t)(mix(r, i) >> 7); }

static void *barrier_thread(void *c) { return (void *)(intptr_t)zinf_comm_barrier(c); }

// Every collective at sizes 0, 1, odd and big (floats), results poisoned first.
static void suite(zinf_comm *c, size_t big) {
    const int R = zinf_comm_rank(c), W = zinf_comm_size(c);
    const size_t sizes[] = {0, 1, 7, 1001, big};
    for (size_t k = 0; k < ZINF_ARRAY_LEN(sizes); k++) {
        size_t n = sizes[k], bad = 0;
        float *in = malloc((W * n + 1) * sizeof *in), *out = malloc((n + 1) * sizeof *out);
        for (size_t i = 0; i < W * n; i++)
            in[i] = val32(R, i);
        memset(out, 0xff, (n + 1) * sizeof *out);
        CHECK(zinf_comm_reduce_scatter_f32(c, in, out, n) == ZINF_OK, "reduce_scatter %zu: %s", n, zinf_last_error());
        CHECK(zinf_comm_reduce_scatter_f32(c, in, in + R * n, n) == ZINF_OK, "in place: %s", zinf_last_error());
        for (size_t j = 0; j < n; j++) {
            float want = sum32(W, R * n + j);
            bad += memcmp(&out[j], &want, 4) != 0 || memcmp(&in[R * n + j], &want, 4) != 0;
        }
        CHECK(bad == 0, "reduce_scatter_f32 of %zu: %zu wrong", n, bad);

        n += 1 + k % 2; // 1, 3, 8, 1003, big + 2: not multiples of 2 or 3 ranks
        float *buf = malloc(n * sizeof *buf);
        size_t reordered = 0;
        for (size_t i = 0; i < n; i++)
            buf[i] = val32(R, i);
        CHECK(zinf_comm_allreduce_f32(c, buf, n) == ZINF_OK, "allreduce_f32 %zu: %s", n, zinf_last_error());
        bad = 0;
        for (size_t i = 0; i < n; i++) {
            float want = sum32(W, i), back = val32(W - 1, i);
            for (int r = W - 2; r >= 0; r--)
                back += val32(r, i);
            reordered += back != want;
            bad += memcmp(&buf[i], &want, 4) != 0;
        }
        CHECK(bad == 0, "allreduce_f32 of %zu: %zu wrong", n, bad);
        if (W >= 3 && n > 100) CHECK(reordered > 0, "the values do not tell the order of the sum");

        double *d = malloc(n * sizeof *d);
        for (size_t i = 0; i < n; i++)
            d[i] = val64(R, i);
        CHECK(zinf_comm_allreduce_f64(c, d, n) == ZINF_OK, "allreduce_f64 %zu: %s", n, zinf_last_error());
        bad = 0;
        for (size_t i = 0; i < n; i++)
            bad += memcmp(&d[i], &(double){sum64(W, i)}, 8) != 0;
        CHECK(bad == 0, "allreduce_f64 of %zu: %zu wrong", n, bad);

        size_t bytes = sizes[k] * 4 + (k > 0); // 0, 5, 29, 4005, 4 big + 1
        uint8_t *g = malloc(W * bytes + 1), *mine = malloc(bytes + 1);
        for (size_t i = 0; i < bytes; i++)
            mine[i] = pat(R, i);
        for (int pass = 0; pass < 2; pass++) { // separate in, then in place
            for (size_t i = 0; i < W * bytes; i++)
                g[i] = (uint8_t)~pat((int)(i / bytes), i % bytes);
            if (pass) memcpy(g + R * bytes, mine, bytes);
            zinf_status st = zinf_comm_allgather(c, pass ? g + R * bytes : mine, g, bytes);
            CHECK(st == ZINF_OK, "allgather %zu: %s", bytes, zinf_last_error());
            bad = 0;
            for (size_t i = 0; i < W * bytes; i++)
                bad += g[i] != pat((int)(i / bytes), i % bytes);
            CHECK(bad == 0, "allgather of %zu (pass %d): %zu wrong", bytes, pass, bad);
        }
        // alltoall: rank r's block j lands on rank j at r * bytes.
        uint8_t *a2a = malloc(W * bytes + 1), *got = malloc(W * bytes + 1);
        for (int j = 0; j < W; j++)
            for (size_t i = 0; i < bytes; i++)
                a2a[j * bytes + i] = pat(R * W + j, i);
        memset(got, 0xee, W * bytes + 1);
        CHECK(zinf_comm_alltoall(c, a2a, got, bytes) == ZINF_OK, "alltoall %zu: %s", bytes, zinf_last_error());
        bad = 0;
        for (int r = 0; r < W; r++)
            for (size_t i = 0; i < bytes; i++)
                bad += got[r * bytes + i] != pat(r * W + R, i);
        CHECK(bad == 0, "alltoall of %zu: %zu wrong", bytes, bad);
        free(a2a), free(got);
        int root = (int)(k % W);
        for (size_t i = 0; i < bytes; i++)
            g[i] = R == root ? pat(root, i) : (uint8_t)~pat(root, i);
        CHECK(zinf_comm_broadcast(c, g, bytes, root) == ZINF_OK, "broadcast: %s", zinf_last_error());
        bad = 0;
        for (size_t i = 0; i < bytes; i++)
            bad += g[i] != pat(root, i);
        CHECK(bad == 0, "broadcast of %zu from %d: %zu wrong", bytes, root, bad);
        free(in), free(out), free(buf), free(d), free(g), free(mine);
    }
    // Calls may come from any thread, one at a time.
    pthread_t t;
    void *st;
    pthread_create(&t, NULL, barrier_thread, c);
    pthread_join(t, &st);
    CHECK((zinf_status)(intptr_t)st == ZINF_OK, "barrier from another thread: %s", zinf_last_error());
}

// Argument errors are local: no rank enters a collective, so the others stay in step.
static void errors(zinf_comm *c) {
    const int R = zinf_comm_rank(c), W = zinf_comm_size(c);
    float f[4 * 3 + 1] = {0};
#define CHECK_INVAL(call, word)                                                                                        \
    do {                                                                                                               \
        CHECK((call) == ZINF_ERR_INVAL, "%s accepted", #call);                                                         \
        CHECK_CONTAINS(zinf_last_error(), word);                                                                       \
    } while (0)
    CHECK_INVAL(zinf_comm_broadcast(c, f, 4, W), "root");
    CHECK_INVAL(zinf_comm_broadcast(c, f, 4, -1), "root");
    CHECK_INVAL(zinf_comm_broadcast(c, NULL, 4, 0), "buf is NULL");
    CHECK_INVAL(zinf_comm_reduce_scatter_f32(c, NULL, f, 1), "in is NULL");
    CHECK_INVAL(zinf_comm_reduce_scatter_f32(c, f, NULL, 1), "out is NULL");
    CHECK_INVAL(zinf_comm_reduce_scatter_f32(c, f, f + 1, 4), "overlaps");
    CHECK_INVAL(zinf_comm_allreduce_f32(c, NULL, 3), "buf is NULL");
    CHECK_INVAL(zinf_comm_allreduce_f64(c, NULL, 3), "buf is NULL");
    CHECK_INVAL(zinf_comm_allgather(c, NULL, f, 4), "in is NULL");
    CHECK_INVAL(zinf_comm_allgather(c, f, NULL, 4), "out is NULL");
    CHECK_INVAL(zinf_comm_allgather(c, (char *)f + R * 4 + 1, f, 4), "overlaps");
    CHECK_INVAL(zinf_comm_alltoall(c, f, f, 4), "overlap");
    CHECK_INVAL(zinf_comm_alltoall(c, NULL, f, 4), "in is NULL");
    CHECK_INVAL(zinf_comm_barrier(NULL), "c is NULL");
    // Device collectives need an attached GPU; a host device is refused, naming it.
    zinf_device *d = NULL;
    CHECK(zinf_device_create(&d, &(zinf_device_params){.backend = ZINF_BACKEND_HOST}) == ZINF_OK, "%s",
          zinf_last_error());
    CHECK(zinf_comm_attach_device(c, d) == ZINF_ERR_UNSUPPORTED, "attached to the host device");
    zinf_comm_info info;
    zinf_comm_probe(&info);
    CHECK_CONTAINS(zinf_last_error(), info.nccl ? "host (" : "this build has no NCCL");
    CHECK(!zinf_comm_on_device(c), "on device after a refused attach");
    zinf_stream *s = NULL;
    CHECK(zinf_stream_create(d, &s) == ZINF_OK, "%s", zinf_last_error());
    CHECK(zinf_comm_device_allreduce_f32(c, s, f, 1) != ZINF_OK, "device allreduce without a device");
    CHECK(zinf_comm_device_allgather(c, s, f, f, 4) != ZINF_OK, "device allgather without a device");
    CHECK(zinf_comm_device_reduce_scatter_f32(c, s, f, f, 1) != ZINF_OK, "device reduce_scatter without a device");
    CHECK(zinf_comm_device_alltoall(c, s, f, f + 4, 4) != ZINF_OK, "device alltoall without a device");
    zinf_comm_detach_device(c); // not attached: nothing to do
    zinf_stream_destroy(s);
    zinf_device_destroy(d);
    CHECK(zinf_comm_status(c) == ZINF_OK, "status after refusals: %s", zinf_last_error());
    // Nothing to move: NULL is fine (every rank makes these calls).
    CHECK(zinf_comm_allgather(c, NULL, NULL, 0) == ZINF_OK, "empty allgather: %s", zinf_last_error());
    CHECK(zinf_comm_broadcast(c, NULL, 0, 0) == ZINF_OK, "empty broadcast: %s", zinf_last_error());
    CHECK(zinf_comm_allreduce_f32(c, NULL, 0) == ZINF_OK, "empty allreduce: %s", zinf_last_error());
}

// The counts' change over one call, against what its definition says: from each other
// rank of c, per_peer bytes, intra or inter by that rank's node.
static void expect_counts(zinf_comm *world, zinf_comm *c, zinf_comm_bytes *before, size_t per_peer, const char *what) {
    zinf_comm_bytes now, want = *before;
    for (int r = 0; r < zinf_comm_size(c); r++)
        if (r != zinf_comm_rank(c))
            *(zinf_comm_node_of(c, r) == zinf_comm_node(c) ? &want.intra : &want.inter) += (int64_t)per_peer;
    zinf_comm_get_bytes(world, &now);
    CHECK(now.intra == want.intra && now.inter == want.inter, "%s: counted %lld intra, %lld inter; want %lld, %lld",
          what, (long long)(now.intra - before->intra), (long long)(now.inter - before->inter),
          (long long)(want.intra - before->intra), (long long)(want.inter - before->inter));
    *before = now;
}

static void counts(zinf_comm *world, zinf_comm *c) {
    const int W = zinf_comm_size(c), R = zinf_comm_rank(c);
    zinf_comm_bytes b;
    zinf_comm_get_bytes(world, &b);
    float f[4 * 1000] = {0};
    double d[6] = {0};
    CHECK(zinf_comm_allgather(c, f + R * 100, f, 100 * sizeof *f) == ZINF_OK, "%s", zinf_last_error());
    expect_counts(world, c, &b, 400, "allgather of 400 B");
    CHECK(zinf_comm_reduce_scatter_f32(c, f, f + R * 250, 250) == ZINF_OK, "%s", zinf_last_error());
    expect_counts(world, c, &b, 1000, "reduce_scatter of 250 floats");
    CHECK(zinf_comm_allreduce_f32(c, f, (size_t)W * 100 + 3) == ZINF_OK, "%s", zinf_last_error());
    expect_counts(world, c, &b, 2 * 400 + 12, "allreduce of W 100 + 3 floats");
    CHECK(zinf_comm_allreduce_f64(c, d, 6) == ZINF_OK, "%s", zinf_last_error());
    expect_counts(world, c, &b, 48, "allreduce_f64 of 6");
    CHECK(zinf_comm_alltoall(c, f, f + 2000, 40) == ZINF_OK, "%s", zinf_last_error());
    expect_counts(world, c, &b, 40, "alltoall of 40 B");
    CHECK(zinf_comm_broadcast(c, f, 64, W - 1) == ZINF_OK, "%s", zinf_last_error());
    zinf_comm_bytes want = b;
    if (R != W - 1)
        *(zinf_comm_node_of(c, W - 1) == zinf_comm_node(c) ? &want.intra : &want.inter) += 64;
    expect_counts(world, c, &want, 0, "broadcast of 64 B");
    b = want;
    CHECK(zinf_comm_barrier(c) == ZINF_OK, "%s", zinf_last_error());
    expect_counts(world, c, &b, 0, "barrier");
}

// 4 ranks as 2 nodes of 2: the map, the node groups (intra only) and the cross-node
// pairs (inter only), each running the suite, and the counts of every collective.
static void nodes(zinf_comm *c) {
    const int R = zinf_comm_rank(c);
    CHECK(zinf_comm_nodes(c) == 2 && zinf_comm_node(c) == R / 2, "node %d of %d", zinf_comm_node(c),
          zinf_comm_nodes(c));
    for (int r = 0; r < 4; r++)
        CHECK(zinf_comm_node_of(c, r) == r / 2, "rank %d on node %d", r, zinf_comm_node_of(c, r));
    CHECK(zinf_comm_node_of(c, 4) == -1 && zinf_comm_node_of(c, -1) == -1, "node of a rank that is not");
    // One host: the GPU-taking local ranks stay the host's.
    CHECK(zinf_comm_local_rank(c) == R && zinf_comm_local_size(c) == 4, "local rank %d of %d",
          zinf_comm_local_rank(c), zinf_comm_local_size(c));
    counts(c, c);
    zinf_comm *node = NULL, *across = NULL, *bad = (zinf_comm *)&bad;
    CHECK(zinf_comm_split(c, -1, &bad) == ZINF_ERR_INVAL && !bad, "color -1 accepted");
    CHECK_CONTAINS(zinf_last_error(), "color -1");
    CHECK(zinf_comm_split(c, R / 2, &node) == ZINF_OK, "split by node: %s", zinf_last_error());
    CHECK(zinf_comm_split(c, R % 2, &across) == ZINF_OK, "split across: %s", zinf_last_error());
    if (!node || !across) return;
    CHECK(zinf_comm_size(node) == 2 && zinf_comm_rank(node) == R % 2 && zinf_comm_nodes(node) == 1, "node group %d of %d",
          zinf_comm_rank(node), zinf_comm_size(node));
    CHECK(zinf_comm_size(across) == 2 && zinf_comm_rank(across) == R / 2 && zinf_comm_nodes(across) == 2,
          "cross-node group: rank %d of %d, %d nodes", zinf_comm_rank(across), zinf_comm_size(across),
          zinf_comm_nodes(across));
    suite(node, 3001);
    suite(across, 3001);
    zinf_comm_bytes b0, b1;
    zinf_comm_get_bytes(c, &b0);
    counts(c, node);
    zinf_comm_get_bytes(c, &b1);
    CHECK(b1.inter == b0.inter && b1.intra > b0.intra, "a node group moved %lld bytes across nodes",
          (long long)(b1.inter - b0.inter));
    counts(c, across);
    zinf_comm_get_bytes(c, &b0);
    CHECK(b0.intra == b1.intra && b0.inter > b1.inter, "a cross-node group moved %lld bytes inside a node",
          (long long)(b0.intra - b1.intra));
    zinf_comm_destroy(across);
    zinf_comm_destroy(node);
}

// Under mpirun: "ranks" checks every collective, "nodes" 4 ranks as 2 nodes, "badnodes"
// a ZINF_RANKS_PER_NODE that does not divide the ranks, "stop" the bounded failure.
static int child(const char *mode) {
    int rank, world;
    zinf_launcher_rank(&rank, &world);
    bool stop = strcmp(mode, "stop") == 0;
    zinf_comm *c = NULL;
    zinf_status st = zinf_comm_create(&c, world > 1 ? ZINF_COMM_AUTO : ZINF_COMM_MPI, stop ? 2 : 60);
    if (strcmp(mode, "badnodes") == 0) {
        CHECK(st == ZINF_ERR_INVAL && !c, "ZINF_RANKS_PER_NODE=3 with %d ranks accepted", world);
        CHECK_CONTAINS(zinf_last_error(), "ZINF_RANKS_PER_NODE: \"3\" is not a number of ranks >= 1 that divides");
        return check_exit("test_comm badnodes");
    }
    CHECK(st == ZINF_OK, "create: %s", zinf_last_error());
    if (st != ZINF_OK) return 1;
    CHECK(strcmp(zinf_comm_name(c), "mpi") == 0, "name %s", zinf_comm_name(c));
    CHECK(zinf_comm_rank(c) == rank && zinf_comm_size(c) == world, "rank %d of %d", zinf_comm_rank(c),
          zinf_comm_size(c));
    // mpirun starts every rank on this host: local ranks are the ranks.
    CHECK(zinf_comm_local_rank(c) == rank && zinf_comm_local_size(c) == world, "local rank %d of %d",
          zinf_comm_local_rank(c), zinf_comm_local_size(c));
    char name[64];
    snprintf(name, sizeof name, "test_comm rank %d of %d (%s)", rank, world, mode);
    if (strcmp(mode, "nodes") == 0) {
        nodes(c);
        zinf_comm_destroy(c);
        return check_exit(name);
    }
    CHECK(zinf_comm_nodes(c) == 1 && zinf_comm_node(c) == 0, "one host: node %d of %d", zinf_comm_node(c),
          zinf_comm_nodes(c));
    if (!stop) {
        suite(c, (5u << 20) / 4 + 3); // 5 MiB of floats and more
        errors(c);
        c->chunk_bytes = 1000; // many rounds, strided MPI datatypes, tails
        c->scratch_max = 4096;
        suite(c, 3001);
        zinf_comm_destroy(c); // finalizes
        return check_exit(name);
    }
    CHECK(zinf_comm_barrier(c) == ZINF_OK, "barrier: %s", zinf_last_error());
    if (rank == world - 1) { // skip the allgather; mpirun ends this rank when the others leave
        printf("%s: stopping\n", name);
        fflush(stdout);
        sleep(30);
        _exit(0);
    }
    double t0 = now_s(), x = rank, out[8];
    st = zinf_comm_allgather(c, &x, out, sizeof x);
    double dt = now_s() - t0;
    CHECK(st == ZINF_ERR_COMM && dt >= 1.9 && dt < 5, "allgather gave %d after %.2f s", (int)st, dt);
    CHECK_CONTAINS(zinf_last_error(), "waited 2 s for allgather of 8 B with");
    t0 = now_s();
    st = zinf_comm_allreduce_f64(c, &x, 1);
    CHECK(st == ZINF_ERR_COMM && now_s() - t0 < 0.5, "later call gave %d after %.2f s", (int)st, now_s() - t0);
    CHECK_CONTAINS(zinf_last_error(), "allreduce_f64 refused: this communicator failed earlier: comm mpi: rank");
    t0 = now_s();
    zinf_comm_destroy(c); // must not finalize: that would wait for the stopped rank
    CHECK(now_s() - t0 < 1, "destroy took %.2f s", now_s() - t0);
    if (!check_failures) printf("%s: bounded failure ok\n", name);
    fflush(stdout);
    sleep(1); // leaving without MPI_Finalize ends the job: let the other survivors report first
    return check_exit(name);
}

int main(int argc, char **argv) {
    if (argc > 1) return child(argv[1]);
    setvbuf(stdout, NULL, _IOLBF, 0); // in order with the ranks' lines in the log
    zinf_comm *c = (zinf_comm *)&c;   // not NULL: a failed create must clear it
    CHECK(zinf_comm_create(NULL, ZINF_COMM_AUTO, 0) == ZINF_ERR_INVAL, "NULL out");
    CHECK(zinf_comm_create(&c, ZINF_COMM_AUTO, -1) == ZINF_ERR_INVAL && !c, "negative timeout");
    CHECK_CONTAINS(zinf_last_error(), "timeout_s");
    CHECK(zinf_comm_create(&c, ZINF_COMM_AUTO, NAN) == ZINF_ERR_INVAL, "NaN timeout");
    CHECK(zinf_comm_create(&c, (zinf_comm_kind)7, 0) == ZINF_ERR_INVAL, "kind 7");
    CHECK_CONTAINS(zinf_last_error(), "kind 7");
    zinf_comm_destroy(NULL);
    CHECK(zinf_comm_create(&c, ZINF_COMM_AUTO, 0) == ZINF_OK, "%s", zinf_last_error());
    CHECK(strcmp(zinf_comm_name(c), "single") == 0 && zinf_comm_rank(c) == 0 && zinf_comm_size(c) == 1, "%s",
          zinf_comm_name(c));
    CHECK(zinf_comm_local_rank(c) == 0 && zinf_comm_local_size(c) == 1, "single: local rank %d of %d",
          zinf_comm_local_rank(c), zinf_comm_local_size(c));
    suite(c, 3001);
    errors(c);
    zinf_comm_destroy(c);

    zinf_comm_info info;
    zinf_comm_probe(&info);
    if (!info.mpi) {
        CHECK(zinf_comm_create(&c, ZINF_COMM_MPI, 0) == ZINF_ERR_UNSUPPORTED, "mpi without MPI");
        CHECK_CONTAINS(zinf_last_error(), "this build has no MPI");
        printf("test_comm: this build has no MPI: single only\n");
        return check_exit("test_comm");
    }
    // tests/run sets these; so does this, for a run by hand.
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
    setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 0);
    char exe[4096], cmd[4300];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0) return fprintf(stderr, "test_comm: cannot read /proc/self/exe\n"), 1;
    exe[len] = '\0';
    for (int np = 1; np <= 3; np++) {
        snprintf(cmd, sizeof cmd, "mpirun -np %d '%s' ranks", np, exe);
        double t0 = now_s();
        int rc = system(cmd);
        CHECK(rc != -1 && WIFEXITED(rc) && WEXITSTATUS(rc) == 0, "%s: status %d", cmd, rc);
        printf("test_comm: %d rank(s): %.1f s\n", np, now_s() - t0);
    }
    const struct {
        const char *knob, *mode;
    } node_runs[] = {{"2", "nodes"}, {"3", "badnodes"}};
    for (size_t i = 0; i < ZINF_ARRAY_LEN(node_runs); i++) {
        snprintf(cmd, sizeof cmd, "ZINF_RANKS_PER_NODE=%s mpirun -np 4 -x ZINF_RANKS_PER_NODE '%s' %s",
                 node_runs[i].knob, exe, node_runs[i].mode);
        double t0 = now_s();
        int rc = system(cmd);
        CHECK(rc != -1 && WIFEXITED(rc) && WEXITSTATUS(rc) == 0, "%s: status %d", cmd, rc);
        printf("test_comm: 4 ranks, %s: %.1f s\n", node_runs[i].mode, now_s() - t0);
    }
    // The survivors leave without MPI_Finalize, so mpirun fails the job: each reports.
    printf("test_comm: next, mpirun's complaint about ranks that left without finalize is expected\n");
    snprintf(cmd, sizeof cmd, "mpirun -np 3 '%s' stop 2>&1", exe);
    double t0 = now_s();
    FILE *p = popen(cmd, "r");
    char line[1024];
    int ok = 0, sanitizer = 0;
    while (p && fgets(line, sizeof line, p)) {
        fputs(line, stdout);
        ok += strstr(line, "bounded failure ok") != NULL;
        sanitizer += strstr(line, "ERROR: AddressSanitizer") || strstr(line, "ERROR: LeakSanitizer") ||
                     strstr(line, "runtime error:");
    }
    if (p) pclose(p);
    CHECK(ok == 2 && !sanitizer, "%d of 2 survivors reported, %d sanitizer reports", ok, sanitizer);
    printf("test_comm: bounded failure: %.1f s\n", now_s() - t0);
    return check_exit("test_comm");
}
