// CUDA emulation (tests only): NCCL communicators and the collectives zinf uses, following
// NCCL's API reference. Ranks are processes on one machine that meet in a POSIX shared
// memory segment named by the unique id; a collective is work on the caller's stream.
#include <nccl.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "emu.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

namespace {

// Staging bytes per rank and half: large buffers go through in rounds of this size.
constexpr size_t CHUNK = 1 << 20;
constexpr size_t LINE = 64;
constexpr size_t SLOT = LINE + CHUNK; // a header line, then the data
// Bounds the segment (2 * CHUNK per rank) and keeps a reduce-scatter round at least one
// element per rank.
constexpr int MAX_RANKS = 4096;
constexpr unsigned CONFIG_MAGIC = 0xcafebeef;
constexpr char ID_MAGIC[16] = "cuda-emu-nccl";

struct id_body {
    char magic[16];
    unsigned long long ns, random;
    int pid;
    unsigned counter;
};
static_assert(sizeof(id_body) <= NCCL_UNIQUE_ID_BYTES, "the id must fit ncclUniqueId");

// The segment: a control line, one line per rank, then two slots per rank. Every field
// starts as zero, so whichever rank creates the segment need not initialize it.
struct ctrl {
    uint32_t nranks; // set by the first rank to join, checked by the others
    uint32_t joined; // futex word: ranks that have mapped the segment
    uint32_t bell;   // futex word: bumped whenever a rank posts a phase
};
struct rank_line {
    uint64_t posted;  // the last phase whose data this rank has written
    uint32_t present; // this rank number has joined
};
// Published with a collective's first round, so every rank can check that all ranks
// called the same collective.
struct header {
    uint64_t seq, count;
    int32_t kind, dtype, op, root;
};

enum kind { ALLREDUCE, REDUCESCATTER, ALLGATHER, BROADCAST, ALLTOALL };

struct call {
    kind k;
    const void *send;
    void *recv;
    size_t count; // per rank for reduce-scatter, all-gather and all-to-all, as in the API
    ncclDataType_t dtype;
    ncclRedOp_t op;
    int root;
    uint64_t seq;
};

template <typename T> T load(const T *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }

// Not FUTEX_PRIVATE: the words are shared between processes. The wait is bounded so
// that waiters see a local abort within 10 ms.
void futex_wait(uint32_t *w, uint32_t v) {
    struct timespec ts = {0, 10 * 1000 * 1000};
    syscall(SYS_futex, w, FUTEX_WAIT, v, &ts, nullptr, 0);
}
void futex_wake(uint32_t *w) { syscall(SYS_futex, w, FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0); }

constexpr size_t WHY = 512;
std::mutex global_mu;
char global_why[WHY]; // failures that have no communicator (ncclGetLastError(NULL))

} // namespace

struct ncclComm {
    int nranks, rank, device;
    bool blocking;
    std::string name;
    char *base = nullptr;
    size_t bytes = 0;
    std::shared_ptr<ncclComm> self; // the user's reference; queued work holds its own

    std::mutex issue_mu; // orders sequence numbers with enqueueing
    std::mutex mu;       // guards what follows
    std::condition_variable cv;
    bool joined = false, finalizing = false, busy = false;
    std::atomic<bool> aborted{false};
    uint64_t issued = 0, executed = 0; // collectives enqueued, and finished or skipped
    ncclResult_t error = ncclSuccess;
    char why[WHY] = "";

    uint64_t phase = 0; // only the running collective touches it

    ~ncclComm() {
        if (base) munmap(base, bytes);
    }
    ctrl *control() { return (ctrl *)base; }
    rank_line *line(int r) { return (rank_line *)(base + LINE * (1 + r)); }
    char *slot(int r, int half) { return base + LINE * (1 + nranks) + (2 * (size_t)r + half) * SLOT; }
    header *head(int r, int half) { return (header *)slot(r, half); }
    char *data(int r, int half) { return slot(r, half) + LINE; }
};

namespace {

// Records the text ncclGetLastError returns and gives back r.
ncclResult_t note(ncclComm *c, ncclResult_t r, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
ncclResult_t note(ncclComm *c, ncclResult_t r, const char *fmt, ...) {
    std::lock_guard<std::mutex> lk(c ? c->mu : global_mu);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c ? c->why : global_why, WHY, fmt, ap);
    va_end(ap);
    return r;
}

// Waits until done() holds, sleeping on a futex word that changes whenever done() may
// have become true; false if the communicator was aborted first.
template <typename F> bool wait_on(ncclComm *c, uint32_t *w, F done) {
    for (;;) {
        uint32_t v = load(w);
        if (done()) return true;
        if (c->aborted) return false;
        futex_wait(w, v);
    }
}

bool all_joined(ncclComm *c) { return load(&c->control()->joined) >= (uint32_t)c->nranks; }

// Bytes per element by ncclDataType_t; 0 for an invalid one.
size_t type_size(int t) {
    static const size_t size[ncclNumTypes] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
    return t >= 0 && t < ncclNumTypes ? size[t] : 0;
}

const char *name_of(const char *const *names, int n, int i) { return i >= 0 && i < n ? names[i] : "?"; }
const char *const KIND_NAMES[] = {"ncclAllReduce", "ncclReduceScatter", "ncclAllGather", "ncclBroadcast",
                                  "ncclAlltoAll"};
const char *const TYPE_NAMES[] = {"ncclInt8",   "ncclUint8",   "ncclInt32",   "ncclUint32",  "ncclInt64",
                                  "ncclUint64", "ncclFloat16", "ncclFloat32", "ncclFloat64", "ncclBfloat16"};
const char *const OP_NAMES[] = {"ncclSum", "ncclProd", "ncclMax", "ncclMin", "ncclAvg"};

std::string describe(const header &h) {
    char s[160];
    int n = snprintf(s, sizeof s, "#%llu %s(count=%llu, %s", (unsigned long long)h.seq, name_of(KIND_NAMES, 5, h.kind),
                     (unsigned long long)h.count, name_of(TYPE_NAMES, ncclNumTypes, h.dtype));
    if (h.kind == ALLREDUCE || h.kind == REDUCESCATTER)
        snprintf(s + n, sizeof s - n, ", %s)", name_of(OP_NAMES, ncclNumOps, h.op));
    else if (h.kind == BROADCAST)
        snprintf(s + n, sizeof s - n, ", root=%d)", h.root);
    else
        snprintf(s + n, sizeof s - n, ")");
    return s;
}

// Element types as reductions see them: fp16 and bf16 combine in float and round once
// when stored; integers wrap, as on a GPU.
template <typename T> struct num {
    using A = T;
    static A get(T v) { return v; }
    static T put(A a) { return a; }
};
template <> struct num<__half> {
    using A = float;
    static float get(__half v) { return __half2float(v); }
    static __half put(float a) { return __float2half_rn(a); }
};
template <> struct num<__nv_bfloat16> {
    using A = float;
    static float get(__nv_bfloat16 v) { return __bfloat162float(v); }
    static __nv_bfloat16 put(float a) { return __float2bfloat16_rn(a); }
};

template <typename A> A combine(ncclRedOp_t op, A a, A b) {
    if constexpr (std::is_integral_v<A>) {
        using U = std::make_unsigned_t<A>;
        if (op == ncclProd) return A(U(a) * U(b));
        if (op == ncclSum || op == ncclAvg) return A(U(a) + U(b));
    } else {
        if (op == ncclProd) return a * b;
        if (op == ncclSum || op == ncclAvg) return a + b;
    }
    return op == ncclMax ? (b > a ? b : a) : (b < a ? b : a);
}

// dst[i] = src[0][i] op src[1][i] op ... in rank order, so every rank gets the same bits;
// avg is that sum divided by nranks.
template <typename T> void reduce_as(ncclRedOp_t op, void *dst, const char *const *src, int nr, size_t n) {
    using N = num<T>;
    using A = typename N::A;
    for (size_t i = 0; i < n; i++) {
        A a = N::get(((const T *)src[0])[i]);
        for (int r = 1; r < nr; r++)
            a = combine<A>(op, a, N::get(((const T *)src[r])[i]));
        if (op == ncclAvg) a = A(a / nr);
        ((T *)dst)[i] = N::put(a);
    }
}

// By ncclDataType_t.
using reducer = void (*)(ncclRedOp_t, void *, const char *const *, int, size_t);
const reducer REDUCERS[ncclNumTypes] = {
    reduce_as<int8_t>,   reduce_as<uint8_t>, reduce_as<int32_t>, reduce_as<uint32_t>, reduce_as<int64_t>,
    reduce_as<uint64_t>, reduce_as<__half>,  reduce_as<float>,   reduce_as<double>,   reduce_as<__nv_bfloat16>};

void copy(void *dst, const void *src, size_t n) {
    if (n) memcpy(dst, src, n);
}

// The first round's headers must all be equal; every rank compares all of them, so
// all ranks reach the same verdict and stop after the same round.
bool agree(ncclComm &c, int half) {
    const header &h0 = *c.head(0, half);
    for (int r = 1; r < c.nranks; r++) {
        const header &h = *c.head(r, half);
        if (!memcmp(&h, &h0, sizeof h)) continue;
        char msg[480];
        snprintf(msg, sizeof msg,
                 "NCCL emulation (rank %d): ranks called different collectives: rank 0 called %s, rank %d called %s",
                 c.rank, describe(h0).c_str(), r, describe(h).c_str());
        {
            std::lock_guard<std::mutex> lk(c.mu);
            if (c.error == ncclSuccess) c.error = ncclInvalidUsage;
            snprintf(c.why, sizeof c.why, "%s", msg);
        }
        cuda_emu::fault(c.device, cudaErrorLaunchFailure, "%s", msg);
        return false;
    }
    return true;
}

// One collective, in rounds. Each round every rank writes its part into its slot of the
// current half and posts the round's phase; once all ranks have posted it, each reads
// what it needs. Halves alternate, so a rank writing round p + 1 overwrites round p - 1,
// which every rank finished reading before it posted round p: one wait per round.
void exchange(ncclComm &c, const call &k) {
    const size_t es = type_size(k.dtype), nr = c.nranks;
    const bool blocks = k.k == REDUCESCATTER || k.k == ALLTOALL; // a rank posts a block for every rank
    const size_t per = blocks ? CHUNK / (es * nr) : CHUNK / es;        // elements per round
    const size_t rounds = k.count ? (k.count + per - 1) / per : 1;            // count 0 still compares headers
    const char *send = (const char *)k.send;
    char *recv = (char *)k.recv;
    std::vector<const char *> src(nr);
    for (size_t i = 0, off = 0; i < rounds; i++, off += per) {
        const size_t n = std::min(per, k.count - off), b = n * es;
        const int half = c.phase % 2;
        char *mine = c.data(c.rank, half);
        if (i == 0) *c.head(c.rank, half) = header{k.seq, k.count, k.k, k.dtype, k.op, k.root};
        if (blocks)
            for (size_t d = 0; d < nr; d++)
                copy(mine + d * b, send + (d * k.count + off) * es, b);
        else if (k.k != BROADCAST || c.rank == k.root)
            copy(mine, send + off * es, b);

        c.phase++;
        __atomic_store_n(&c.line(c.rank)->posted, c.phase, __ATOMIC_RELEASE);
        __atomic_fetch_add(&c.control()->bell, 1, __ATOMIC_RELEASE);
        futex_wake(&c.control()->bell);
        bool ok = wait_on(&c, &c.control()->bell, [&] {
            for (size_t r = 0; r < nr; r++)
                if (load(&c.line(r)->posted) < c.phase) return false;
            return true;
        });
        if (!ok || (i == 0 && !agree(c, half))) return;

        if (k.k == ALLGATHER) {
            for (size_t r = 0; r < nr; r++)
                copy(recv + (r * k.count + off) * es, c.data(r, half), b);
        } else if (k.k == ALLTOALL) {
            for (size_t r = 0; r < nr; r++)
                copy(recv + (r * k.count + off) * es, c.data(r, half) + c.rank * b, b);
        } else if (k.k == BROADCAST) {
            copy(recv + off * es, c.data(k.root, half), b);
        } else {
            for (size_t r = 0; r < nr; r++)
                src[r] = c.data(r, half) + (k.k == REDUCESCATTER ? c.rank * b : 0);
            REDUCERS[k.dtype](k.op, recv + off * es, src.data(), c.nranks, n);
        }
    }
}

// Runs on the stream's thread. Collectives of one communicator run in the order this
// process issued them, whatever streams they are on, as all ranks must agree on it.
void run(const std::shared_ptr<ncclComm> &c, const call &k) {
    std::unique_lock<std::mutex> lk(c->mu);
    // After an error the rest are skipped, in any order, so that finalize ends.
    c->cv.wait(lk, [&] { return c->executed == k.seq || c->aborted || c->error != ncclSuccess; });
    if (c->aborted) return;
    // As on a GPU, nothing runs on a context that has faulted; the peers wait for this
    // rank until their watchdogs give up.
    if (c->error == ncclSuccess && cuda_emu::sticky(c->device)) {
        c->error = ncclUnhandledCudaError;
        snprintf(c->why, WHY, "%s #%llu did not run: device %d has faulted (%s)", KIND_NAMES[k.k],
                 (unsigned long long)k.seq, c->device, cudaGetErrorString(cuda_emu::sticky(c->device)));
    }
    if (c->error == ncclSuccess) {
        c->busy = true;
        lk.unlock();
        exchange(*c, k);
        lk.lock();
        c->busy = false;
    }
    c->executed++;
    c->cv.notify_all();
}

ncclResult_t launch(const std::shared_ptr<ncclComm> &c, call k, cudaStream_t stream) {
    // NCCL switches to the communicator's device itself; enqueue needs it current.
    const int prev = cuda_emu::current_device();
    if (prev != c->device) cudaSetDevice(c->device);
    cudaError_t e;
    {
        std::lock_guard<std::mutex> lk(c->issue_mu);
        {
            std::lock_guard<std::mutex> lk2(c->mu);
            k.seq = c->issued;
        }
        e = cuda_emu::enqueue(stream, [c, k] { run(c, k); });
        if (e == cudaSuccess) {
            std::lock_guard<std::mutex> lk2(c->mu);
            c->issued++;
        }
    }
    if (prev != c->device) cudaSetDevice(prev);
    if (e != cudaSuccess)
        return note(c.get(), ncclUnhandledCudaError, "%s: enqueueing on the stream failed: %s", KIND_NAMES[k.k],
                    cudaGetErrorString(e));
    return ncclSuccess;
}

struct pending {
    std::shared_ptr<ncclComm> c;
    call k;
    cudaStream_t stream;
};
thread_local int group_depth;
thread_local std::vector<pending> group_calls;

ncclResult_t check_buffer(ncclComm *c, const call &k, const char *what, const void *p, size_t bytes) {
    if (!bytes) return ncclSuccess;
    if (!p) return note(c, ncclInvalidArgument, "%s: %s is NULL", KIND_NAMES[k.k], what);
    cuda_emu::region r = cuda_emu::classify(p, bytes);
    if (r.kind != cuda_emu::mem::device || r.device != c->device)
        return note(c, ncclInvalidArgument, "%s: %s (%p, %zu bytes) is not memory of device %d, the communicator's",
                    KIND_NAMES[k.k], what, p, bytes, c->device);
    return ncclSuccess;
}

// Argument errors are reported here, at the call, as NCCL does; the rest happens on the
// stream.
ncclResult_t issue(ncclComm *c, call k, cudaStream_t stream) {
    if (!c) return note(nullptr, ncclInvalidArgument, "%s: comm is NULL", KIND_NAMES[k.k]);
    bool joined;
    ncclResult_t failed;
    {
        std::lock_guard<std::mutex> lk(c->mu);
        joined = c->joined = c->joined || all_joined(c);
        failed = c->error;
    }
    // As NCCL: a failed communicator answers with its error, one still joining with
    // ncclInvalidArgument.
    if (failed != ncclSuccess) return failed; // ncclGetLastError already says why
    if (!joined)
        return note(c, ncclInvalidArgument, "%s: used before ncclCommGetAsyncError reported the join done",
                    KIND_NAMES[k.k]);
    const size_t es = type_size(k.dtype);
    if (!es) return note(c, ncclInvalidArgument, "%s: invalid datatype %d", KIND_NAMES[k.k], (int)k.dtype);
    if ((k.k == ALLREDUCE || k.k == REDUCESCATTER) && (k.op < 0 || k.op >= ncclNumOps))
        return note(c, ncclInvalidArgument, "%s: invalid reduction %d", KIND_NAMES[k.k], (int)k.op);
    if (k.k == BROADCAST && (k.root < 0 || k.root >= c->nranks))
        return note(c, ncclInvalidArgument, "%s: root %d is not a rank of %d", KIND_NAMES[k.k], k.root, c->nranks);
    size_t one, all;
    if (__builtin_mul_overflow(k.count, es, &one) || __builtin_mul_overflow(one, (size_t)c->nranks, &all))
        return note(c, ncclInvalidArgument, "%s: count %zu is too large", KIND_NAMES[k.k], k.count);
    const size_t send_bytes = k.k == REDUCESCATTER || k.k == ALLTOALL    ? all
                              : k.k == BROADCAST && c->rank != k.root ? 0
                                                                        : one;
    const size_t recv_bytes = k.k == ALLGATHER || k.k == ALLTOALL ? all : one;
    ncclResult_t r = check_buffer(c, k, "sendbuff", k.send, send_bytes);
    if (r == ncclSuccess) r = check_buffer(c, k, "recvbuff", k.recv, recv_bytes);
    if (r != ncclSuccess) return r;
    if (stream && cuda_emu::stream_device(stream) != c->device)
        return note(c, ncclInvalidUsage, "%s: the stream belongs to device %d, the communicator to device %d",
                    KIND_NAMES[k.k], cuda_emu::stream_device(stream), c->device);
    if (k.k != ALLREDUCE && k.k != REDUCESCATTER) k.op = ncclSum; // ignored: keep headers comparable
    if (k.k != BROADCAST) k.root = 0;
    if (group_depth > 0) {
        group_calls.push_back({c->self, k, stream});
        return ncclSuccess;
    }
    return launch(c->self, k, stream);
}

ncclResult_t init(ncclComm_t *out, int nranks, const ncclUniqueId &id, int rank, bool blocking) {
    if (!out) return note(nullptr, ncclInvalidArgument, "ncclCommInitRank: comm is NULL");
    *out = nullptr;
    if (nranks < 1 || nranks > MAX_RANKS || rank < 0 || rank >= nranks)
        return note(nullptr, ncclInvalidArgument,
                    "ncclCommInitRank: rank %d of %d is invalid (the emulation allows up to %d ranks)", rank, nranks,
                    MAX_RANKS);
    id_body b;
    memcpy(&b, id.internal, sizeof b);
    if (memcmp(b.magic, ID_MAGIC, sizeof ID_MAGIC))
        return note(nullptr, ncclInvalidArgument, "ncclCommInitRank: the id was not made by ncclGetUniqueId");

    auto c = std::make_shared<ncclComm>();
    c->nranks = nranks;
    c->rank = rank;
    c->device = cuda_emu::current_device();
    c->blocking = blocking;
    char name[128];
    snprintf(name, sizeof name, "/cuda_emu_nccl.%d.%llx.%x.%llx", b.pid, b.ns, b.counter, b.random);
    c->name = name;
    c->bytes = LINE * (1 + nranks) + 2 * (size_t)nranks * SLOT;
    // Every rank creates or opens the segment and sizes it; ftruncate could shrink it under
    // a rank that asked for more, posix_fallocate only grows it, and reports a full
    // /dev/shm here rather than as SIGBUS later.
    int fd = shm_open(name, O_RDWR | O_CREAT, 0600);
    if (fd < 0) return note(nullptr, ncclSystemError, "ncclCommInitRank: shm_open(%s): %s", name, strerror(errno));
    int err = posix_fallocate(fd, 0, (off_t)c->bytes);
    if (!err) {
        void *p = mmap(nullptr, c->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED)
            err = errno;
        else
            c->base = (char *)p;
    }
    close(fd);
    if (err) {
        shm_unlink(name);
        return note(nullptr, ncclSystemError, "ncclCommInitRank: shared memory of %zu bytes: %s", c->bytes,
                    strerror(err));
    }
    ctrl *ctl = c->control();
    uint32_t first = 0;
    const char *bad = nullptr;
    if (!__atomic_compare_exchange_n(&ctl->nranks, &first, (uint32_t)nranks, false, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE) &&
        first != (uint32_t)nranks)
        bad = "another rank was given a different nranks";
    else if (__atomic_exchange_n(&c->line(rank)->present, 1u, __ATOMIC_ACQ_REL))
        bad = "another process joined as the same rank";
    if (bad) {
        shm_unlink(name);
        return note(nullptr, ncclInvalidUsage, "ncclCommInitRank (rank %d of %d): %s", rank, nranks, bad);
    }
    // The last to join removes the name: every rank has it mapped, and nothing is left
    // in /dev/shm however the processes end.
    if (__atomic_add_fetch(&ctl->joined, 1, __ATOMIC_ACQ_REL) == (uint32_t)nranks) shm_unlink(name);
    futex_wake(&ctl->joined);
    c->self = c;
    *out = c.get();
    if (!blocking) return ncclInProgress;
    wait_on(c.get(), &ctl->joined, [&] { return all_joined(c.get()); });
    c->joined = true;
    return ncclSuccess;
}

// Drops the user's reference; queued work keeps the object alive until it has run. A
// segment that not every rank joined is removed here, as no one else would.
void release(ncclComm *c) {
    std::shared_ptr<ncclComm> keep = std::move(c->self);
    if (!all_joined(c)) shm_unlink(c->name.c_str());
}

} // namespace

extern "C" {

ncclResult_t ncclGetVersion(int *version) {
    if (!version) return ncclInvalidArgument;
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId) {
    static std::atomic<unsigned> counter{0};
    if (!uniqueId) return note(nullptr, ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
    id_body b;
    memcpy(b.magic, ID_MAGIC, sizeof b.magic);
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    b.ns = (unsigned long long)t.tv_sec * 1000000000ull + (unsigned long long)t.tv_nsec;
    std::random_device rd;
    b.random = (unsigned long long)rd() << 32 | rd();
    b.pid = (int)getpid();
    b.counter = counter++;
    memset(uniqueId, 0, sizeof *uniqueId);
    memcpy(uniqueId->internal, &b, sizeof b);
    return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank) {
    return init(comm, nranks, commId, rank, true);
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t *config) {
    if (config && config->magic != CONFIG_MAGIC)
        return note(nullptr, ncclInvalidArgument,
                    "ncclCommInitRankConfig: config was not set from NCCL_CONFIG_INITIALIZER");
    bool blocking = !config || config->blocking == NCCL_CONFIG_UNDEF_INT || config->blocking != 0;
    return init(comm, nranks, commId, rank, blocking);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError) {
    if (!comm || !asyncError) return note(comm, ncclInvalidArgument, "ncclCommGetAsyncError: NULL argument");
    std::lock_guard<std::mutex> lk(comm->mu);
    if (!comm->joined) comm->joined = all_joined(comm);
    if (comm->error != ncclSuccess)
        *asyncError = comm->error;
    else if (!comm->joined || (comm->finalizing && comm->executed < comm->issued))
        *asyncError = ncclInProgress;
    else
        *asyncError = ncclSuccess;
    return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
    if (!comm) return note(nullptr, ncclInvalidArgument, "ncclCommFinalize: comm is NULL");
    std::unique_lock<std::mutex> lk(comm->mu);
    comm->finalizing = true;
    if (!comm->blocking) return ncclInProgress; // ncclCommGetAsyncError says when it is done
    comm->cv.wait(lk, [&] { return comm->executed == comm->issued || comm->error != ncclSuccess; });
    return comm->error;
}

// As NCCL documents: without a finalize first, destroy finalizes (waits for issued work).
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    if (!comm) return note(nullptr, ncclInvalidArgument, "ncclCommDestroy: comm is NULL");
    {
        std::unique_lock<std::mutex> lk(comm->mu);
        comm->cv.wait(lk, [&] { return comm->executed == comm->issued || comm->error != ncclSuccess; });
    }
    release(comm);
    return ncclSuccess;
}

// Safe from another thread while a collective waits for a peer: waiting work sees the
// flag within 10 ms and ends, and later work does nothing, so every stream moves on.
ncclResult_t ncclCommAbort(ncclComm_t comm) {
    if (!comm) return ncclSuccess;
    {
        std::unique_lock<std::mutex> lk(comm->mu);
        comm->aborted = true;
        comm->cv.notify_all();
        futex_wake(&comm->control()->bell);
        comm->cv.wait(lk, [&] { return !comm->busy; });
    }
    release(comm);
    return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int *count) {
    if (!comm || !count) return note(comm, ncclInvalidArgument, "ncclCommCount: NULL argument");
    *count = comm->nranks;
    return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device) {
    if (!comm || !device) return note(comm, ncclInvalidArgument, "ncclCommCuDevice: NULL argument");
    *device = comm->device;
    return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank) {
    if (!comm || !rank) return note(comm, ncclInvalidArgument, "ncclCommUserRank: NULL argument");
    *rank = comm->rank;
    return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t result) {
    switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}

// A copy per thread, so that a failure recorded meanwhile does not change it under the caller.
const char *ncclGetLastError(ncclComm_t comm) {
    thread_local char copy[WHY];
    std::lock_guard<std::mutex> lk(comm ? comm->mu : global_mu);
    memcpy(copy, comm ? comm->why : global_why, WHY);
    return copy;
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
    return issue(comm, call{ALLREDUCE, sendbuff, recvbuff, count, datatype, op, 0, 0}, stream);
}

ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
    return issue(comm, call{REDUCESCATTER, sendbuff, recvbuff, recvcount, datatype, op, 0, 0}, stream);
}

ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
    return issue(comm, call{ALLGATHER, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0, 0}, stream);
}

ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
    return issue(comm, call{BROADCAST, sendbuff, recvbuff, count, datatype, ncclSum, root, 0}, stream);
}

ncclResult_t ncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                          ncclComm_t comm, cudaStream_t stream) {
    return issue(comm, call{ALLTOALL, sendbuff, recvbuff, count, datatype, ncclSum, 0, 0}, stream);
}

ncclResult_t ncclGroupStart(void) {
    group_depth++;
    return ncclSuccess;
}

// The calls made since the outermost ncclGroupStart are issued now, in order.
ncclResult_t ncclGroupEnd(void) {
    if (group_depth == 0) return note(nullptr, ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
    if (--group_depth > 0) return ncclSuccess;
    std::vector<pending> calls;
    calls.swap(group_calls);
    ncclResult_t first = ncclSuccess;
    for (pending &p : calls) {
        ncclResult_t r = launch(p.c, p.k, p.stream);
        if (first == ncclSuccess) first = r;
    }
    return first;
}

} // extern "C"
