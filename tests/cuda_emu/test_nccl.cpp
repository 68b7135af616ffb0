// CUDA emulation (tests only): checks the NCCL emulation against NCCL's API reference.
// Each case forks its ranks; each rank uses device = rank, its own stream and buffers.
// timeout: 10 cuda-emu=10 san-cuda-emu=15
#include <nccl.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

int g_rank = -1, g_failures; // in a child

// One write per failure, so that lines from ranks running at once do not interleave.
void report(int line, const char *cond, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void report(int line, const char *cond, const char *fmt, ...) {
    char msg[512];
    int n = snprintf(msg, sizeof msg, "rank %d: line %d: failed: %s", g_rank, line, cond);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg + n, sizeof msg - n, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s\n", msg);
    g_failures++;
}
#define CHECK(cond, ...)                                                                                               \
    do {                                                                                                               \
        if (!(cond)) report(__LINE__, #cond, " " __VA_ARGS__);                                                         \
    } while (0)

// The emulation stages 1 MiB per rank and round; the large counts below need 2 or 3 rounds.
constexpr size_t BIG_F32 = 600000, RS_COUNT = 100003, AG_BYTES = (1 << 20) + 12345, BC_COUNT = 300001;

double now() {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

uint32_t mix(uint32_t x) {
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    return x ^ (x >> 16);
}

// Magnitudes from 2^-12 to 2^12 with both signs, so that float sums depend on order.
float fval(int r, size_t i) {
    uint32_t h = mix((uint32_t)(i * 8 + r) + 12345u);
    float m = ldexpf(1.0f + (float)(h & 0xfffff) / (float)(1 << 20), (int)((h >> 20) % 25) - 12);
    return (h >> 31) ? -m : m;
}
int32_t ival(int r, size_t i) { return (int32_t)(mix((uint32_t)(i * 8 + r) + 777u) % 2000001u) - 1000000; }
__nv_bfloat16 bval(int r, size_t i) {
    if (i == 0) return __float2bfloat16_rn(r == 0 ? 1.0f : 0x1p-8f); // a tie at each step, not in one
    return __float2bfloat16_rn(fval(r, i));
}

template <typename T> T *upload(const std::vector<T> &h) {
    void *p = nullptr;
    CHECK(cudaMalloc(&p, std::max<size_t>(h.size() * sizeof(T), 1)) == cudaSuccess);
    CHECK(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess);
    return (T *)p;
}
template <typename T> std::vector<T> download(cudaStream_t s, const T *d, size_t n) {
    CHECK(cudaStreamSynchronize(s) == cudaSuccess);
    std::vector<T> h(n);
    CHECK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
    return h;
}
// Bit for bit.
template <typename T> void same(const std::vector<T> &got, const std::vector<T> &want, const char *what) {
    size_t i = 0;
    while (i < got.size() && i < want.size() && !memcmp(&got[i], &want[i], sizeof(T)))
        i++;
    CHECK(got.size() == want.size() && i == got.size(), "%s: first difference at element %zu", what, i);
}

cudaStream_t open_stream(int rank) {
    cudaStream_t s = nullptr;
    CHECK(cudaSetDevice(rank) == cudaSuccess, "(each rank uses device = rank)");
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
    return s;
}

ncclResult_t poll_async(ncclComm_t c, bool *saw_progress) {
    ncclResult_t r = ncclInProgress;
    for (double end = now() + 3; r == ncclInProgress && now() < end; usleep(1000)) {
        CHECK(ncclCommGetAsyncError(c, &r) == ncclSuccess);
        if (r == ncclInProgress && saw_progress) *saw_progress = true;
    }
    return r;
}

void sleep_100ms(void *) { usleep(100000); }

// Nonblocking init, every collective and datatype family, groups, ordering, argument
// errors, finalize.
void collectives(int rank, int n, const ncclUniqueId &id) {
    cudaStream_t s = open_stream(rank);
    if (rank > 0) usleep(250000); // rank 0 must see the join in progress
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclComm_t comm = nullptr;
    CHECK(ncclCommInitRankConfig(&comm, n, id, rank, &cfg) == ncclInProgress);
    bool saw_progress = false;
    CHECK(poll_async(comm, &saw_progress) == ncclSuccess);
    CHECK(rank != 0 || saw_progress, "rank 0 joined first and must have seen ncclInProgress");
    int v = -1;
    CHECK(ncclCommCount(comm, &v) == ncclSuccess && v == n);
    CHECK(ncclCommUserRank(comm, &v) == ncclSuccess && v == rank);
    CHECK(ncclCommCuDevice(comm, &v) == ncclSuccess && v == rank);
    CHECK(ncclGetVersion(&v) == ncclSuccess && v == NCCL_VERSION_CODE);
    CHECK(ncclAllReduce(nullptr, nullptr, 0, ncclFloat32, ncclSum, comm, s) == ncclSuccess, "count 0 is a no-op");

    // AllReduce sum, float32: the rank-order sum, bit for bit, out of place and in place.
    std::vector<float> fin(BIG_F32), fsum(BIG_F32);
    size_t order_matters = 0;
    for (size_t i = 0; i < BIG_F32; i++) {
        fin[i] = fval(rank, i);
        float e = fval(0, i), back = fval(n - 1, i);
        for (int r = 1; r < n; r++)
            e = e + fval(r, i);
        for (int r = n - 2; r >= 0; r--)
            back = back + fval(r, i);
        fsum[i] = e;
        order_matters += memcmp(&e, &back, 4) != 0;
    }
    CHECK(n < 3 || order_matters > 1000, "the inputs must make the summation order visible");
    float *fsend = upload(fin), *frecv = upload(std::vector<float>(BIG_F32, -1.0f));
    CHECK(ncclAllReduce(fsend, frecv, BIG_F32, ncclFloat32, ncclSum, comm, s) == ncclSuccess);
    same(download(s, frecv, BIG_F32), fsum, "allreduce float32 sum");
    CHECK(ncclAllReduce(fsend, fsend, BIG_F32, ncclFloat32, ncclSum, comm, s) == ncclSuccess);
    same(download(s, fsend, BIG_F32), fsum, "allreduce float32 sum in place");

    // AllReduce max and avg, int32 (avg: the sum divided by nranks); avg, fp16 (in float,
    // rounded once).
    const size_t ni = 5000;
    std::vector<int32_t> iin(ni), imax(ni), iavg(ni);
    std::vector<__half> hin(ni), havg(ni);
    for (size_t i = 0; i < ni; i++) {
        iin[i] = ival(rank, i);
        hin[i] = __float2half_rn(fval(rank, i));
        int32_t m = ival(0, i), sum = 0;
        float hs = 0;
        for (int r = 0; r < n; r++) {
            m = std::max(m, ival(r, i));
            sum += ival(r, i);
            hs = r ? hs + __half2float(__float2half_rn(fval(r, i))) : __half2float(__float2half_rn(fval(r, i)));
        }
        imax[i] = m;
        iavg[i] = sum / n;
        havg[i] = __float2half_rn(hs / (float)n);
    }
    int32_t *isend = upload(iin), *irecv = upload(iin);
    CHECK(ncclAllReduce(isend, irecv, ni, ncclInt32, ncclMax, comm, s) == ncclSuccess);
    same(download(s, irecv, ni), imax, "allreduce int32 max");
    CHECK(ncclAllReduce(isend, irecv, ni, ncclInt32, ncclAvg, comm, s) == ncclSuccess);
    same(download(s, irecv, ni), iavg, "allreduce int32 avg");
    __half *hbuf = upload(hin);
    CHECK(ncclAllReduce(hbuf, hbuf, ni, ncclFloat16, ncclAvg, comm, s) == ncclSuccess);
    same(download(s, hbuf, ni), havg, "allreduce fp16 avg");

    // bf16 sum: combined in float, rounded once. Element 0 is 1 + 2^-8 + 2^-8 ...: one
    // rounding of 1 + 2^-7 keeps it (3 ranks); 1 + 2^-8 alone is a tie to even 1 (2 ranks).
    std::vector<__nv_bfloat16> bin(ni), bsum(ni);
    for (size_t i = 0; i < ni; i++) {
        bin[i] = bval(rank, i);
        float e = __bfloat162float(bval(0, i));
        for (int r = 1; r < n; r++)
            e = e + __bfloat162float(bval(r, i));
        bsum[i] = __float2bfloat16_rn(e);
    }
    __nv_bfloat16 *bbuf = upload(bin);
    CHECK(ncclAllReduce(bbuf, bbuf, ni, ncclBfloat16, ncclSum, comm, s) == ncclSuccess);
    std::vector<__nv_bfloat16> bgot = download(s, bbuf, ni);
    same(bgot, bsum, "allreduce bf16 sum");
    CHECK(bgot[0].__x == (n == 3 ? 0x3f81 : 0x3f80), "bf16 element 0 is 0x%04x", bgot[0].__x);

    // ReduceScatter: rank r gets the sum of everyone's block r; in place, recvbuff is
    // sendbuff + rank * recvcount.
    std::vector<float> rsin(RS_COUNT * n), rswant(RS_COUNT);
    for (size_t i = 0; i < RS_COUNT * n; i++)
        rsin[i] = fval(rank, i);
    for (size_t j = 0; j < RS_COUNT; j++) {
        float e = fval(0, rank * RS_COUNT + j);
        for (int r = 1; r < n; r++)
            e = e + fval(r, rank * RS_COUNT + j);
        rswant[j] = e;
    }
    float *rssend = upload(rsin), *rsrecv = upload(std::vector<float>(RS_COUNT));
    CHECK(ncclReduceScatter(rssend, rsrecv, RS_COUNT, ncclFloat32, ncclSum, comm, s) == ncclSuccess);
    same(download(s, rsrecv, RS_COUNT), rswant, "reduce-scatter");
    CHECK(ncclReduceScatter(rssend, rssend + rank * RS_COUNT, RS_COUNT, ncclFloat32, ncclSum, comm, s) == ncclSuccess);
    same(download(s, rssend + rank * RS_COUNT, RS_COUNT), rswant, "reduce-scatter in place");

    // AllGather of bytes, as zinf uses it; in place, sendbuff is recvbuff + rank * sendcount.
    auto byte = [](int r, size_t i) { return (uint8_t)(r * 31 + i * 7 + (i >> 9)); };
    std::vector<uint8_t> agin(AG_BYTES), agwant(AG_BYTES * n), agmine(AG_BYTES * n, 0xee);
    for (size_t i = 0; i < AG_BYTES; i++) {
        agin[i] = byte(rank, i);
        agmine[rank * AG_BYTES + i] = byte(rank, i);
        for (int r = 0; r < n; r++)
            agwant[r * AG_BYTES + i] = byte(r, i);
    }
    uint8_t *agsend = upload(agin), *agrecv = upload(std::vector<uint8_t>(AG_BYTES * n)), *agbuf = upload(agmine);
    CHECK(ncclAllGather(agsend, agrecv, AG_BYTES, ncclUint8, comm, s) == ncclSuccess);
    same(download(s, agrecv, AG_BYTES * n), agwant, "all-gather");
    CHECK(ncclAllGather(agbuf + rank * AG_BYTES, agbuf, AG_BYTES, ncclUint8, comm, s) == ncclSuccess);
    same(download(s, agbuf, AG_BYTES * n), agwant, "all-gather in place");

    // AlltoAll of bytes: rank r's block j lands on rank j at r * count; past one round.
    std::vector<uint8_t> atin(AG_BYTES * n), atwant(AG_BYTES * n);
    for (int j = 0; j < n; j++)
        for (size_t i = 0; i < AG_BYTES; i++) {
            atin[j * AG_BYTES + i] = byte(rank * n + j, i);
            atwant[j * AG_BYTES + i] = byte(j * n + rank, i);
        }
    uint8_t *atsend = upload(atin), *atrecv = upload(std::vector<uint8_t>(AG_BYTES * n));
    CHECK(ncclAlltoAll(atsend, atrecv, AG_BYTES, ncclUint8, comm, s) == ncclSuccess);
    same(download(s, atrecv, AG_BYTES * n), atwant, "all-to-all");

    // Broadcast from the last rank; sendbuff matters on the root only.
    const int root = n - 1;
    std::vector<int64_t> bcwant(BC_COUNT), bcmine(BC_COUNT, -7);
    for (size_t i = 0; i < BC_COUNT; i++)
        bcwant[i] = (int64_t)mix((uint32_t)i) << 20 | (int64_t)i;
    int64_t *bcsend = rank == root ? upload(bcwant) : nullptr, *bcrecv = upload(bcmine);
    CHECK(ncclBroadcast(bcsend, bcrecv, BC_COUNT, ncclInt64, root, comm, s) == ncclSuccess);
    same(download(s, bcrecv, BC_COUNT), bcwant, "broadcast");
    int64_t *bcbuf = upload(rank == root ? bcwant : bcmine);
    CHECK(ncclBroadcast(bcbuf, bcbuf, BC_COUNT, ncclInt64, root, comm, s) == ncclSuccess);
    same(download(s, bcbuf, BC_COUNT), bcwant, "broadcast in place");

    // Nested groups: the calls are issued at the outermost end, in order.
    const size_t ng = 1000;
    std::vector<uint64_t> pin(ng), pwant(ng, 1);
    std::vector<double> din(ng), dwant(ng);
    for (size_t i = 0; i < ng; i++) {
        pin[i] = (uint64_t)(rank + 2) * (i % 5 + 1);
        din[i] = fval(rank, i);
        dwant[i] = fval(0, i);
        for (int r = 0; r < n; r++) {
            pwant[i] *= (uint64_t)(r + 2) * (i % 5 + 1);
            dwant[i] = std::min(dwant[i], (double)fval(r, i));
        }
    }
    uint64_t *pbuf = upload(pin);
    double *dbuf = upload(din);
    CHECK(ncclGroupStart() == ncclSuccess);
    CHECK(ncclGroupStart() == ncclSuccess);
    CHECK(ncclAllReduce(pbuf, pbuf, ng, ncclUint64, ncclProd, comm, s) == ncclSuccess);
    CHECK(ncclGroupEnd() == ncclSuccess);
    CHECK(ncclAllReduce(dbuf, dbuf, ng, ncclFloat64, ncclMin, comm, s) == ncclSuccess);
    CHECK(ncclGroupEnd() == ncclSuccess);
    same(download(s, pbuf, ng), pwant, "grouped uint64 prod");
    same(download(s, dbuf, ng), dwant, "grouped float64 min");

    // Issue order holds across streams: rank 0 holds up its first stream and the others
    // their second, so that without it the ranks would meet different collectives.
    cudaStream_t s2 = open_stream(rank);
    CHECK(cudaLaunchHostFunc(rank == 0 ? s : s2, sleep_100ms, nullptr) == cudaSuccess);
    CHECK(ncclAllReduce(isend, irecv, ni, ncclInt32, ncclMax, comm, s) == ncclSuccess);
    CHECK(ncclAllReduce(fsend, frecv, 1000, ncclFloat32, ncclSum, comm, s2) == ncclSuccess);
    CHECK(cudaStreamSynchronize(s2) == cudaSuccess);
    same(download(s, irecv, ni), imax, "ordered int32 max");
    std::vector<float> fwant(1000);
    for (size_t i = 0; i < 1000; i++) { // fsend holds fsum on every rank
        fwant[i] = fsum[i];
        for (int r = 1; r < n; r++)
            fwant[i] = fwant[i] + fsum[i];
    }
    same(download(s2, frecv, 1000), fwant, "ordered float32 sum");

    // Argument errors fail at the call and issue nothing, so the ranks stay in step.
    void *host = malloc(64);
    void *other = nullptr;
    cudaStream_t other_stream = nullptr;
    int devices = 0;
    CHECK(cudaGetDeviceCount(&devices) == cudaSuccess && devices > 1);
    CHECK(cudaSetDevice((rank + 1) % devices) == cudaSuccess);
    CHECK(cudaMalloc(&other, 64) == cudaSuccess && cudaStreamCreate(&other_stream) == cudaSuccess);
    CHECK(cudaSetDevice(rank) == cudaSuccess);
    CHECK(ncclAllReduce(nullptr, frecv, 4, ncclFloat32, ncclSum, comm, s) == ncclInvalidArgument);
    CHECK(strlen(ncclGetLastError(comm)) > 0);
    CHECK(ncclAllReduce(host, frecv, 4, ncclFloat32, ncclSum, comm, s) == ncclInvalidArgument);
    CHECK(ncclAllReduce(other, frecv, 4, ncclFloat32, ncclSum, comm, s) == ncclInvalidArgument);
    CHECK(ncclAllReduce(fsend, frecv, BIG_F32 + 1, ncclFloat32, ncclSum, comm, s) == ncclInvalidArgument);
    CHECK(ncclAllReduce(fsend, frecv, 4, ncclNumTypes, ncclSum, comm, s) == ncclInvalidArgument);
    CHECK(ncclAllReduce(fsend, frecv, 4, ncclFloat32, ncclNumOps, comm, s) == ncclInvalidArgument);
    CHECK(ncclBroadcast(fsend, frecv, 4, ncclFloat32, n, comm, s) == ncclInvalidArgument);
    CHECK(ncclAllReduce(fsend, frecv, 4, ncclFloat32, ncclSum, comm, other_stream) == ncclInvalidUsage);
    free(host);

    // Nonblocking finalize ends once the issued work is done.
    CHECK(ncclAllReduce(isend, irecv, ni, ncclInt32, ncclMax, comm, s) == ncclSuccess);
    CHECK(ncclCommFinalize(comm) == ncclInProgress);
    CHECK(poll_async(comm, nullptr) == ncclSuccess);
    same(download(s, irecv, ni), imax, "int32 max before finalize");
    CHECK(ncclCommDestroy(comm) == ncclSuccess);
}

// Ranks that disagree on count: reported by every rank, nothing written past a buffer.
void mismatch(int rank, int n, const ncclUniqueId &id) {
    cudaStream_t s = open_stream(rank);
    ncclComm_t comm = nullptr;
    CHECK(ncclCommInitRank(&comm, n, id, rank) == ncclSuccess);
    const size_t count = 100 + rank, cap = 100 + n + 16;
    float *buf = upload(std::vector<float>(cap, 2.0f));

    fflush(stderr);
    FILE *log = tmpfile();
    int saved = dup(2);
    dup2(fileno(log), 2);
    CHECK(ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, comm, s) == ncclSuccess);
    cudaError_t e = cudaStreamSynchronize(s);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    std::string text(4096, '\0');
    rewind(log);
    text.resize(fread(&text[0], 1, text.size(), log));
    fclose(log);
    fputs(text.c_str(), stderr); // keep it in the test's log

    CHECK(e == cudaErrorLaunchFailure, "the device faults; stream synchronize gave %d", (int)e);
    ncclResult_t r = ncclSuccess;
    CHECK(ncclCommGetAsyncError(comm, &r) == ncclSuccess && r == ncclInvalidUsage, "async error %d", (int)r);
    CHECK(text.find("count=100") != std::string::npos && text.find("count=101") != std::string::npos,
          "stderr must name both counts");
    CHECK(strstr(ncclGetLastError(comm), "count=101") != nullptr);
    // The faulted device refuses copies; its memory is host memory in the emulation.
    for (size_t i = count; i < cap; i++)
        CHECK(buf[i] == 2.0f, "written past the buffer at %zu", i);
    CHECK(ncclCommAbort(comm) == ncclSuccess);
}

// A rank that never calls the collective: the other's stream moves on once the comm is
// aborted from another thread, and work queued behind it does nothing.
void abort_blocked(int rank, int n, const ncclUniqueId &id) {
    cudaStream_t s = open_stream(rank);
    ncclComm_t comm = nullptr;
    CHECK(ncclCommInitRank(&comm, n, id, rank) == ncclSuccess);
    if (rank == 1) {
        CHECK(ncclCommDestroy(comm) == ncclSuccess);
        return;
    }
    float *buf = upload(std::vector<float>(1000, 1.0f));
    CHECK(ncclAllReduce(buf, buf, 1000, ncclFloat32, ncclSum, comm, s) == ncclSuccess);
    CHECK(ncclAllReduce(buf, buf, 1000, ncclFloat32, ncclMax, comm, s) == ncclSuccess);
    usleep(100000);
    CHECK(cudaStreamQuery(s) == cudaErrorNotReady, "the collective must wait for rank 1");
    double aborted_at = 0;
    ncclResult_t r = ncclInternalError;
    std::thread watchdog([&] {
        usleep(100000);
        aborted_at = now();
        r = ncclCommAbort(comm);
    });
    cudaError_t e = cudaStreamSynchronize(s);
    double synced_at = now();
    watchdog.join();
    CHECK(e == cudaSuccess && r == ncclSuccess);
    CHECK(synced_at - aborted_at < 0.5, "the stream took %.3f s after the abort", synced_at - aborted_at);
    std::vector<float> h(1000);
    CHECK(cudaMemcpy(h.data(), buf, sizeof(float) * 1000, cudaMemcpyDeviceToHost) == cudaSuccess);
}

// Aborting while a peer has not joined removes the segment.
void abort_joining(int rank, int n, const ncclUniqueId &id) {
    open_stream(rank);
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclComm_t comm = nullptr;
    CHECK(ncclCommInitRankConfig(&comm, n + 1, id, rank, &cfg) == ncclInProgress);
    CHECK(ncclAllReduce(nullptr, nullptr, 0, ncclFloat32, ncclSum, comm, nullptr) == ncclInvalidArgument,
          "used before the join completed");
    usleep(50000);
    ncclResult_t r = ncclSuccess;
    CHECK(ncclCommGetAsyncError(comm, &r) == ncclSuccess && r == ncclInProgress);
    CHECK(ncclCommAbort(comm) == ncclSuccess);
}

// Forks the ranks; a rank fails by its exit status or by running past the deadline.
bool run_case(const char *name, int n, void (*body)(int, int, const ncclUniqueId &)) {
    ncclUniqueId id;
    if (ncclGetUniqueId(&id) != ncclSuccess) return false;
    fflush(stdout);
    fflush(stderr);
    std::vector<pid_t> pids;
    for (int r = 0; r < n; r++) {
        pid_t p = fork();
        if (p == 0) {
            alarm(20); // a hung rank ends even if the parent is gone
            g_rank = r;
            body(r, n, id);
            fflush(stderr);
            _exit(g_failures ? 1 : 0);
        }
        pids.push_back(p);
    }
    bool ok = true;
    int left = n;
    for (double end = now() + 8; left && now() < end; usleep(5000))
        for (pid_t &p : pids) {
            int st;
            if (p <= 0 || waitpid(p, &st, WNOHANG) != p) continue;
            if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) ok = false;
            p = 0;
            left--;
        }
    for (pid_t p : pids)
        if (p > 0) {
            kill(p, SIGKILL);
            waitpid(p, nullptr, 0);
            ok = false;
        }
    printf("%s: %s (%d ranks)%s\n", ok ? "pass" : "FAIL", name, n, left ? ", timed out" : "");
    return ok;
}

} // namespace

int main() {
    setvbuf(stdout, nullptr, _IOLBF, 0);
    bool ok = run_case("collectives", 2, collectives);
    ok = run_case("collectives", 3, collectives) && ok;
    ok = run_case("count mismatch", 2, mismatch) && ok;
    ok = run_case("abort while blocked", 2, abort_blocked) && ok;
    ok = run_case("abort while joining", 1, abort_joining) && ok;

    // Segments are named after the process that made the id: none may be left.
    char prefix[64];
    snprintf(prefix, sizeof prefix, "cuda_emu_nccl.%d.", (int)getpid());
    if (DIR *d = opendir("/dev/shm")) {
        while (struct dirent *e = readdir(d))
            if (!strncmp(e->d_name, prefix, strlen(prefix))) {
                printf("FAIL: /dev/shm/%s was left behind\n", e->d_name);
                ok = false;
            }
        closedir(d);
    }
    printf("%s\n", ok ? "test_nccl: all passed" : "test_nccl: FAILED");
    return ok ? 0 : 1;
}
