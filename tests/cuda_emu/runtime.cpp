// CUDA emulation (tests only): the Runtime API (CUDA Runtime API reference: device
// management, error handling, memory, streams, events, and the "API synchronization
// behavior" notes). Devices are H100s (80 GiB, compute capability 9.0, 132 SMs) whose
// memory is host memory tagged with its device; CUDA_EMU_DEVICES sets how many
// (default 8), CUDA_EMU_MEMORY their memory (e.g. "2G"), CUDA_EMU_MAX_THREADS_PER_BLOCK
// their limit (default 1024; lower, to see launches refused), and CUDA_VISIBLE_DEVICES
// is honoured as the runtime documents. Every stream is a thread running its work in
// order; an error found while work runs ends the device's context, as a GPU fault does.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "emu.h"

// ---- objects ----

struct CUstream_st {
    int device;
    bool blocking; // synchronizes with the legacy default stream
    int priority = 0; // kept for cudaStreamGetPriority; every stream runs alike
    std::mutex mu;
    std::condition_variable work_cv; // the stream's thread waits on it for work
    std::condition_variable done_cv; // threads waiting for the stream's work to run
    std::deque<std::function<void()>> work;
    uint64_t enqueued = 0, done = 0; // work items, in order
    // The earliest ticket a thread waits for: the stream's thread wakes the waiters when
    // it is reached, not after every item (each wake is a futex call and a context switch
    // on both sides, and a synchronize behind 50 kernels would be woken 50 times).
    uint64_t wake_at = UINT64_MAX;
    bool stop = false;
    std::thread thread;
};

// One recording of an event: done once the work before it on its stream has run.
struct marker {
    std::atomic<bool> done{false};
    double time = 0; // seconds, when it ran
};

struct CUevent_st {
    int device;
    bool timed;
    std::mutex mu;
    std::shared_ptr<marker> last; // the latest cudaEventRecord; null: never recorded
};

// A memory pool. Its allocations are exact and its frees return memory at once (no
// block is kept for reuse), so the guards and AddressSanitizer still see every access
// to a freed buffer; what the pool keeps on a GPU is a matter of speed alone.
struct CUmemPoolHandle_st {
    int device;
    bool destroyed = false; // kept (machine::pools) so that a stale handle is refused
};

namespace cuda_emu {
namespace {

// Writes past an allocation land in a guard of this many bytes on each side, checked
// when it is freed. Under AddressSanitizer the allocation is exact instead, so that
// ASan reports the access itself.
#if defined(__SANITIZE_ADDRESS__)
constexpr size_t GUARD = 0;
#else
constexpr size_t GUARD = 256;
#endif
constexpr unsigned char GUARD_BYTE = 0xa5;

struct allocation {
    size_t size;
    int device;
    char *raw;                   // what posix_memalign gave; the caller's pointer is raw + GUARD
    bool freeing = false;        // cudaFreeAsync queued its release
};

struct device_state {
    cudaDeviceProp prop;
    size_t used = 0;                              // bytes allocated (machine::mu)
    std::atomic<cudaError_t> sticky{cudaSuccess}; // the fault that ended the context
    CUstream_st *legacy = nullptr;                // the NULL stream, made on first use
    std::vector<CUstream_st *> streams;           // live streams, the legacy one included
};

struct machine {
    std::mutex mu; // guards everything below but the streams' own queues
    std::vector<std::unique_ptr<device_state>> devs;
    std::map<uintptr_t, allocation> allocs;            // by the caller's pointer
    std::map<uintptr_t, size_t> registered;            // cudaHostRegister ranges
    std::vector<std::unique_ptr<CUstream_st>> retired; // destroyed streams (see cudaStreamDestroy)
    std::vector<std::unique_ptr<CUmemPoolHandle_st>> pools; // every pool made, destroyed ones too
    std::mutex marker_mu;                                   // with marker_cv: a marker (an event's record) ran
    std::condition_variable marker_cv;
};

thread_local cudaError_t last_error = cudaSuccess;
thread_local int current = 0;
thread_local bool in_host_fn = false; // a host function may not call the runtime

double now_s() {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

size_t parse_size(const char *s, size_t dflt) {
    if (!s || !*s) return dflt;
    char *end;
    double v = strtod(s, &end);
    double mult = *end == 'K' || *end == 'k'   ? 1024.0
                  : *end == 'M' || *end == 'm' ? 1048576.0
                  : *end == 'G' || *end == 'g' ? 1073741824.0
                                               : 1.0;
    return v > 0 ? (size_t)(v * mult) : dflt;
}

// CUDA_VISIBLE_DEVICES: a comma-separated list of device indices; the list ends at the
// first entry that is not a valid, unused index (as the CUDA documentation describes).
int visible_count(int physical) {
    const char *v = getenv("CUDA_VISIBLE_DEVICES");
    if (!v) return physical;
    std::vector<bool> used((size_t)physical, false);
    int n = 0;
    for (const char *p = v; *p;) {
        char *end;
        long i = strtol(p, &end, 10);
        if (end == p || i < 0 || i >= physical || used[(size_t)i]) break;
        used[(size_t)i] = true;
        n++;
        if (*end != ',') break;
        p = end + 1;
    }
    return n;
}

machine &M() {
    static machine *m = [] {
        machine *mm = new machine; // never destroyed: stream threads may outlive main's statics
        const char *dn = getenv("CUDA_EMU_DEVICES");
        int physical = dn ? atoi(dn) : 8;
        int n = visible_count(physical < 0 ? 0 : physical);
        size_t mem = parse_size(getenv("CUDA_EMU_MEMORY"), (size_t)80 << 30);
        const char *mt = getenv("CUDA_EMU_MAX_THREADS_PER_BLOCK");
        int max_threads = mt && atoi(mt) > 0 && atoi(mt) <= 1024 ? atoi(mt) : 1024;
        for (int i = 0; i < n; i++) {
            auto d = std::make_unique<device_state>();
            cudaDeviceProp &p = d->prop;
            memset(&p, 0, sizeof p);
            snprintf(p.name, sizeof p.name, "NVIDIA H100 80GB HBM3 (CPU emulation)");
            p.totalGlobalMem = mem;
            p.sharedMemPerBlock = 48 << 10;
            p.sharedMemPerBlockOptin = 227 << 10;
            p.regsPerBlock = 65536;
            p.warpSize = 32;
            p.maxThreadsPerBlock = max_threads;
            p.maxThreadsDim[0] = 1024, p.maxThreadsDim[1] = 1024, p.maxThreadsDim[2] = 64;
            p.maxGridSize[0] = 2147483647, p.maxGridSize[1] = 65535, p.maxGridSize[2] = 65535;
            p.major = 9, p.minor = 0;
            p.multiProcessorCount = 132;
            p.maxThreadsPerMultiProcessor = 2048;
            p.pciDomainID = 0, p.pciBusID = 0x18 + i, p.pciDeviceID = 0;
            p.unifiedAddressing = 1;
            p.canMapHostMemory = 1;
            mm->devs.push_back(std::move(d));
        }
        return mm;
    }();
    return *m;
}

bool valid_device(int d) { return d >= 0 && d < (int)M().devs.size(); }
device_state &dev(int d) { return *M().devs[(size_t)d]; }

// The allocation holding address p, or null (machine::mu held).
const allocation *holder(uintptr_t p, uintptr_t *base) {
    auto &a = M().allocs;
    auto it = a.upper_bound(p);
    if (it == a.begin()) return nullptr;
    --it;
    if (p >= it->first + it->second.size && !(it->second.size == 0 && p == it->first)) return nullptr;
    *base = it->first;
    return &it->second;
}

// ---- streams ----

void stream_main(CUstream_st *s) {
    std::unique_lock<std::mutex> lk(s->mu);
    for (;;) {
        s->work_cv.wait(lk, [s] { return s->stop || !s->work.empty(); });
        if (s->work.empty()) return; // stopped and drained
        std::function<void()> w = std::move(s->work.front());
        s->work.pop_front();
        lk.unlock();
        w();
        lk.lock();
        if (++s->done >= s->wake_at) {
            s->wake_at = UINT64_MAX; // the waiters still short of theirs set it again
            s->done_cv.notify_all();
        }
    }
}

CUstream_st *make_stream(int device, bool blocking) {
    CUstream_st *s = new CUstream_st;
    s->device = device;
    s->blocking = blocking;
    s->thread = std::thread(stream_main, s);
    std::lock_guard<std::mutex> g(M().mu);
    dev(device).streams.push_back(s);
    return s;
}

CUstream_st *legacy_stream(int device) {
    {
        std::lock_guard<std::mutex> g(M().mu);
        if (dev(device).legacy) return dev(device).legacy;
    }
    CUstream_st *s = make_stream(device, true);
    std::lock_guard<std::mutex> g(M().mu);
    if (!dev(device).legacy) dev(device).legacy = s; // a racing thread may have made one too: both live on
    return dev(device).legacy;
}

void push(CUstream_st *s, std::function<void()> w, uint64_t *ticket = nullptr) {
    std::lock_guard<std::mutex> g(s->mu);
    s->work.push_back(std::move(w));
    if (ticket) *ticket = s->enqueued + 1;
    s->enqueued++;
    s->work_cv.notify_one();
}

// Waits until the stream has run its first `ticket` work items.
void wait_ticket(CUstream_st *s, uint64_t ticket) {
    std::unique_lock<std::mutex> lk(s->mu);
    while (s->done < ticket) {
        s->wake_at = std::min(s->wake_at, ticket);
        s->done_cv.wait(lk);
    }
}

uint64_t tail(CUstream_st *s) {
    std::lock_guard<std::mutex> g(s->mu);
    return s->enqueued;
}

void drain(CUstream_st *s) { wait_ticket(s, tail(s)); }

// The legacy default stream waits for all blocking streams' earlier work, and they for
// its (CUDA Runtime API, "stream synchronization behavior").
void order_with_legacy(CUstream_st *s) {
    if (!s->blocking) return;
    std::vector<std::pair<CUstream_st *, uint64_t>> before;
    {
        std::lock_guard<std::mutex> g(M().mu);
        device_state &d = dev(s->device);
        for (CUstream_st *o : d.streams)
            if (o != s && o->blocking && (s == d.legacy || o == d.legacy)) before.push_back({o, 0});
    }
    for (auto &b : before)
        b.second = tail(b.first);
    for (auto &b : before)
        if (b.second) push(s, [b] { wait_ticket(b.first, b.second); });
}

void drain_device(int device) {
    std::vector<CUstream_st *> all;
    {
        std::lock_guard<std::mutex> g(M().mu);
        all = dev(device).streams;
    }
    for (CUstream_st *s : all)
        drain(s);
}

} // namespace

// ---- shared with the other files (emu.h) ----

int current_device() { return current; }

region classify(const void *p, size_t bytes) {
    uintptr_t a = (uintptr_t)p, base;
    std::lock_guard<std::mutex> g(M().mu);
    if (const allocation *al = holder(a, &base))
        return a + bytes <= base + al->size ? region{mem::device, al->device} : region{mem::none, -1};
    auto &r = M().registered;
    auto it = r.upper_bound(a);
    if (it != r.begin()) {
        --it;
        if (a >= it->first && a + bytes <= it->first + it->second) return {mem::registered, -1};
    }
    return {mem::none, -1};
}

cudaError_t fail(cudaError_t err) {
    if (err != cudaSuccess) last_error = err;
    return err;
}

cudaError_t sticky(int device) { return valid_device(device) ? dev(device).sticky.load() : cudaSuccess; }

void fault(int device, cudaError_t err, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "cuda emulation: device %d: %s: %s\n", device, cudaGetErrorString(err), msg);
    cudaError_t none = cudaSuccess;
    if (valid_device(device)) dev(device).sticky.compare_exchange_strong(none, err);
}

int stream_device(cudaStream_t s) { return s ? s->device : current; }

cudaError_t enqueue(cudaStream_t s, std::function<void()> work) {
    if (in_host_fn) return fail(cudaErrorNotPermitted);
    if (!valid_device(current)) return fail(cudaErrorInvalidDevice);
    if (!s) s = legacy_stream(current);
    if (s->device != current) return fail(cudaErrorInvalidResourceHandle);
    if (cudaError_t e = sticky(current)) return fail(e);
    order_with_legacy(s);
    push(s, std::move(work));
    return cudaSuccess;
}

} // namespace cuda_emu

using namespace cuda_emu;

// Every entry point that touches a device: not from a host function, a valid current
// device, and a context that has not faulted.
#define ENTER()                                                                                                        \
    do {                                                                                                               \
        if (in_host_fn) return fail(cudaErrorNotPermitted);                                                            \
        if (!valid_device(current)) return fail(M().devs.empty() ? cudaErrorNoDevice : cudaErrorInvalidDevice);        \
        if (cudaError_t e_ = sticky(current)) return fail(e_);                                                         \
    } while (0)

extern "C" {

// ---- device management ----

cudaError_t cudaGetDeviceCount(int *count) {
    if (!count) return fail(cudaErrorInvalidValue);
    *count = (int)M().devs.size();
    return *count ? cudaSuccess : fail(cudaErrorNoDevice);
}

cudaError_t cudaSetDevice(int device) {
    if (in_host_fn) return fail(cudaErrorNotPermitted);
    if (!valid_device(device)) return fail(M().devs.empty() ? cudaErrorNoDevice : cudaErrorInvalidDevice);
    current = device;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device) {
    if (!device) return fail(cudaErrorInvalidValue);
    *device = current;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int device) {
    if (!prop) return fail(cudaErrorInvalidValue);
    if (!valid_device(device)) return fail(cudaErrorInvalidDevice);
    *prop = dev(device).prop;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetPCIBusId(char *id, int len, int device) {
    if (!id || len <= 0) return fail(cudaErrorInvalidValue);
    if (!valid_device(device)) return fail(cudaErrorInvalidDevice);
    const cudaDeviceProp &p = dev(device).prop;
    snprintf(id, (size_t)len, "%08x:%02x:%02x.0", p.pciDomainID, p.pciBusID, p.pciDeviceID);
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
    ENTER();
    drain_device(current);
    return fail(sticky(current));
}

// The API version this emulation follows.
cudaError_t cudaRuntimeGetVersion(int *v) {
    if (!v) return fail(cudaErrorInvalidValue);
    *v = 12080;
    return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *v) {
    if (!v) return fail(cudaErrorInvalidValue);
    *v = 12080;
    return cudaSuccess;
}

// ---- errors ----

// The last error of this thread, reset; a fault of the current device is never reset.
cudaError_t cudaGetLastError(void) {
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    cudaError_t s = sticky(current);
    return s ? s : e;
}

cudaError_t cudaPeekAtLastError(void) {
    cudaError_t s = sticky(current);
    return s ? s : last_error;
}

const char *cudaGetErrorName(cudaError_t e) {
    switch (e) {
#define N(x)                                                                                                           \
    case x: return #x;
        N(cudaSuccess)
        N(cudaErrorInvalidValue) N(cudaErrorMemoryAllocation) N(cudaErrorInitializationError)
            N(cudaErrorInvalidConfiguration) N(cudaErrorInvalidDevicePointer) N(cudaErrorInvalidMemcpyDirection)
                N(cudaErrorInsufficientDriver) N(cudaErrorNoDevice) N(cudaErrorInvalidDevice)
                    N(cudaErrorNoKernelImageForDevice) N(cudaErrorInvalidResourceHandle) N(cudaErrorNotReady)
                        N(cudaErrorIllegalAddress) N(cudaErrorLaunchOutOfResources)
                            N(cudaErrorHostMemoryAlreadyRegistered) N(cudaErrorHostMemoryNotRegistered)
                                N(cudaErrorLaunchFailure) N(cudaErrorNotPermitted) N(cudaErrorNotSupported)
                                    N(cudaErrorUnknown)
#undef N
    }
    return "cudaErrorUnknown";
}

// The runtime's own wording.
const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorNoKernelImageForDevice: return "no kernel image is available for execution on the device";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    case cudaErrorHostMemoryAlreadyRegistered: return "part or all of the requested memory range is already mapped";
    case cudaErrorHostMemoryNotRegistered: return "pointer does not correspond to a registered memory region";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorNotPermitted: return "operation not permitted";
    case cudaErrorNotSupported: return "operation not supported";
    case cudaErrorUnknown: return "unknown error";
    }
    return "unrecognized error code";
}

// ---- memory ----

} // extern "C"

namespace cuda_emu {
namespace {

// size bytes on device (machine::mu not held); false when they do not fit.
bool allocate(int device, size_t size, void **ptr) {
    device_state &d = dev(device);
    {
        std::lock_guard<std::mutex> g(M().mu);
        if (size > d.prop.totalGlobalMem - d.used) return false;
        d.used += size;
    }
    void *raw = nullptr;
    if (posix_memalign(&raw, 256, size + 2 * GUARD) != 0) {
        std::lock_guard<std::mutex> g(M().mu);
        d.used -= size;
        return false;
    }
    char *p = (char *)raw + GUARD;
    memset(raw, GUARD_BYTE, GUARD);
    memset(p + size, GUARD_BYTE, GUARD);
    // Device memory is not cleared: all bits set (a NaN in every float type) makes a
    // read of what was never written show.
    memset(p, 0xff, size);
    std::lock_guard<std::mutex> g(M().mu);
    M().allocs[(uintptr_t)p] = allocation{size, device, (char *)raw, false};
    *ptr = p;
    return true;
}

// Gives back the allocation at ptr, already taken out of machine::allocs. A guard byte
// changed means device work wrote past it: a fault.
void release(void *ptr, const allocation &a) {
    {
        std::lock_guard<std::mutex> g(M().mu);
        dev(a.device).used -= a.size;
    }
    for (size_t i = 0; i < GUARD; i++) {
        if ((unsigned char)a.raw[i] != GUARD_BYTE || (unsigned char)a.raw[GUARD + a.size + i] != GUARD_BYTE) {
            fault(a.device, cudaErrorIllegalAddress, "a write %s the %zu-byte allocation at %p",
                  a.raw[i] != (char)GUARD_BYTE ? "before" : "past", a.size, ptr);
            break;
        }
    }
    free(a.raw);
}

// Takes ptr's allocation out of machine::allocs; false when it is none, or one whose
// cudaFreeAsync is already queued.
bool take(void *ptr, allocation *out) {
    std::lock_guard<std::mutex> g(M().mu);
    auto it = M().allocs.find((uintptr_t)ptr);
    if (it == M().allocs.end() || it->second.freeing) return false;
    *out = it->second;
    M().allocs.erase(it);
    return true;
}

bool live_pool(cudaMemPool_t pool) {
    std::lock_guard<std::mutex> g(M().mu);
    for (auto &p : M().pools)
        if (p.get() == pool) return !p->destroyed;
    return false;
}

} // namespace
} // namespace cuda_emu

extern "C" {

cudaError_t cudaMalloc(void **ptr, size_t size) {
    if (!ptr) return fail(cudaErrorInvalidValue);
    *ptr = nullptr;
    ENTER();
    if (size == 0) return cudaSuccess; // documented: a null pointer, no error
    return allocate(current, size, ptr) ? cudaSuccess : fail(cudaErrorMemoryAllocation);
}

// Frees after every stream of the device has finished (cudaFree synchronizes).
cudaError_t cudaFree(void *ptr) {
    if (!ptr) return cudaSuccess;
    if (in_host_fn) return fail(cudaErrorNotPermitted);
    int owner;
    {
        std::lock_guard<std::mutex> g(M().mu);
        auto it = M().allocs.find((uintptr_t)ptr);
        if (it == M().allocs.end() || it->second.freeing) return fail(cudaErrorInvalidValue);
        owner = it->second.device;
    }
    drain_device(owner);
    allocation a;
    if (!take(ptr, &a)) return fail(cudaErrorInvalidValue); // freed meanwhile
    release(ptr, a);
    return fail(sticky(owner));
}

// ---- stream-ordered allocation ----

cudaError_t cudaMemPoolCreate(cudaMemPool_t *pool, const struct cudaMemPoolProps *props) {
    if (!pool || !props) return fail(cudaErrorInvalidValue);
    ENTER();
    if (props->allocType != cudaMemAllocationTypePinned || props->handleTypes != cudaMemHandleTypeNone ||
        props->location.type != cudaMemLocationTypeDevice || !valid_device(props->location.id))
        return fail(cudaErrorInvalidValue);
    auto p = std::make_unique<CUmemPoolHandle_st>();
    p->device = props->location.id;
    std::lock_guard<std::mutex> g(M().mu);
    *pool = p.get();
    M().pools.push_back(std::move(p));
    return cudaSuccess;
}

// Allocations still out stay valid until freed, as the reference describes.
cudaError_t cudaMemPoolDestroy(cudaMemPool_t pool) {
    ENTER();
    if (!live_pool(pool)) return fail(cudaErrorInvalidValue);
    std::lock_guard<std::mutex> g(M().mu);
    pool->destroyed = true;
    return cudaSuccess;
}

// The reuse rules and the release threshold change only what the pool keeps of freed
// memory, and the emulated pool keeps none: each is checked and accepted.
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, enum cudaMemPoolAttr attr, void *value) {
    ENTER();
    if (!live_pool(pool) || !value) return fail(cudaErrorInvalidValue);
    switch (attr) {
    case cudaMemPoolReuseFollowEventDependencies:
    case cudaMemPoolReuseAllowOpportunistic:
    case cudaMemPoolReuseAllowInternalDependencies:
    case cudaMemPoolAttrReleaseThreshold: return cudaSuccess;
    }
    return fail(cudaErrorInvalidValue);
}

// Nothing to give back: the emulated pool keeps no freed memory.
cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t min_bytes_to_keep) {
    (void)min_bytes_to_keep;
    ENTER();
    return live_pool(pool) ? cudaSuccess : fail(cudaErrorInvalidValue);
}

// The allocation is made at once. Memory that frees queued earlier on the same stream
// will give back counts as free, as the pool reuses it in stream order: when the device
// is full, those frees run first.
cudaError_t cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t pool, cudaStream_t stream) {
    if (!ptr) return fail(cudaErrorInvalidValue);
    *ptr = nullptr;
    ENTER();
    if (!live_pool(pool)) return fail(cudaErrorInvalidValue);
    CUstream_st *s = stream ? stream : legacy_stream(current);
    if (size == 0) return cudaSuccess;
    if (allocate(pool->device, size, ptr)) return cudaSuccess;
    drain(s);
    return allocate(pool->device, size, ptr) ? cudaSuccess : fail(cudaErrorMemoryAllocation);
}

// The release runs when the stream reaches it; until then the buffer stays the
// caller's, and a second free of it is refused.
cudaError_t cudaFreeAsync(void *ptr, cudaStream_t stream) {
    ENTER();
    if (!ptr) return fail(cudaErrorInvalidValue);
    {
        std::lock_guard<std::mutex> g(M().mu);
        auto it = M().allocs.find((uintptr_t)ptr);
        if (it == M().allocs.end() || it->second.freeing) return fail(cudaErrorInvalidValue);
        it->second.freeing = true;
    }
    cudaError_t e = enqueue(stream, [ptr] {
        allocation a;
        {
            std::lock_guard<std::mutex> g(M().mu);
            auto it = M().allocs.find((uintptr_t)ptr);
            a = it->second;
            M().allocs.erase(it);
        }
        release(ptr, a);
    });
    if (e != cudaSuccess) {
        std::lock_guard<std::mutex> g(M().mu);
        M().allocs[(uintptr_t)ptr].freeing = false;
    }
    return e;
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total) {
    if (!free_bytes || !total) return fail(cudaErrorInvalidValue);
    ENTER();
    std::lock_guard<std::mutex> g(M().mu);
    *total = dev(current).prop.totalGlobalMem;
    *free_bytes = *total - dev(current).used;
    return cudaSuccess;
}

cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned int flags) {
    ENTER();
    if (!ptr || size == 0 || (flags & ~(unsigned)(cudaHostRegisterPortable | cudaHostRegisterMapped)))
        return fail(cudaErrorInvalidValue);
    uintptr_t a = (uintptr_t)ptr;
    std::lock_guard<std::mutex> g(M().mu);
    auto &r = M().registered;
    auto it = r.upper_bound(a + size - 1);
    if (it != r.begin() && std::prev(it)->first + std::prev(it)->second > a)
        return fail(cudaErrorHostMemoryAlreadyRegistered);
    uintptr_t base;
    if (holder(a, &base)) return fail(cudaErrorInvalidValue); // device memory is not host memory
    r[a] = size;
    return cudaSuccess;
}

cudaError_t cudaHostUnregister(void *ptr) {
    ENTER();
    std::lock_guard<std::mutex> g(M().mu);
    if (M().registered.erase((uintptr_t)ptr) == 0) return fail(cudaErrorHostMemoryNotRegistered);
    return cudaSuccess;
}

namespace {

// The side of a copy: device memory (a range inside one allocation), host memory, or
// an error for a range that starts in an allocation and runs past its end.
enum side { HOST, DEVICE, BAD };

side side_of(const void *p, size_t n, int *device) {
    uintptr_t a = (uintptr_t)p, base;
    std::lock_guard<std::mutex> g(M().mu);
    const allocation *al = holder(a, &base);
    if (!al) return HOST;
    *device = al->device;
    return a + n <= base + al->size ? DEVICE : BAD;
}

// Checks a copy as the runtime does: the direction must match the pointers
// (cudaMemcpyDefault infers it), and device ranges must lie inside an allocation.
cudaError_t check_copy(void *dst, const void *src, size_t n, cudaMemcpyKind kind, side *ds, side *ss) {
    int dd = -1, sd = -1;
    *ds = side_of(dst, n, &dd);
    *ss = side_of(src, n, &sd);
    if (!dst || !src || *ds == BAD || *ss == BAD) return cudaErrorInvalidValue;
    switch (kind) {
    case cudaMemcpyHostToHost: return *ds == HOST && *ss == HOST ? cudaSuccess : cudaErrorInvalidValue;
    case cudaMemcpyHostToDevice: return *ds == DEVICE && *ss == HOST ? cudaSuccess : cudaErrorInvalidValue;
    case cudaMemcpyDeviceToHost: return *ds == HOST && *ss == DEVICE ? cudaSuccess : cudaErrorInvalidValue;
    case cudaMemcpyDeviceToDevice: return *ds == DEVICE && *ss == DEVICE ? cudaSuccess : cudaErrorInvalidValue;
    case cudaMemcpyDefault: return cudaSuccess;
    }
    return cudaErrorInvalidMemcpyDirection;
}

bool registered(const void *p, size_t n) { return classify(p, n).kind == mem::registered; }

// When the copy runs: its device ranges must still be allocated (a fault otherwise).
void copy_now(int device, void *dst, const void *src, size_t n, side ds, side ss) {
    if (sticky(device)) return;
    if ((ds == DEVICE && classify(dst, n).kind != mem::device) ||
        (ss == DEVICE && classify(src, n).kind != mem::device)) {
        fault(device, cudaErrorIllegalAddress, "a copy of %zu bytes from %p to %p touches freed memory", n, src, dst);
        return;
    }
    memmove(dst, src, n);
}

// The copy enqueued on s, with the host-side rules for pageable memory: the source of a
// copy to the device is taken at the call, and a copy into pageable memory, or from any
// host memory to any host memory, returns once it is done (Runtime API, "API
// synchronization behavior").
cudaError_t copy_on(CUstream_st *s, void *dst, const void *src, size_t n, cudaMemcpyKind kind, bool sync) {
    side ds, ss;
    if (cudaError_t e = check_copy(dst, src, n, kind, &ds, &ss)) return fail(e);
    if (n == 0) return cudaSuccess;
    int device = s->device;
    cudaError_t e;
    if (ss == HOST && !registered(src, n) && !sync) {
        auto staged = std::make_shared<std::vector<char>>((const char *)src, (const char *)src + n);
        e = enqueue(s, [=] { copy_now(device, dst, staged->data(), n, ds, HOST); });
    } else {
        e = enqueue(s, [=] { copy_now(device, dst, src, n, ds, ss); });
    }
    if (e) return e;
    if (sync || (ds == HOST && (ss == HOST || !registered(dst, n)))) drain(s);
    return fail(sticky(device));
}

} // namespace

cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, cudaMemcpyKind kind) {
    ENTER();
    return copy_on(legacy_stream(current), dst, src, count, kind, true);
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, cudaMemcpyKind kind, cudaStream_t stream) {
    ENTER();
    CUstream_st *s = stream ? stream : legacy_stream(current);
    if (s->device != current) return fail(cudaErrorInvalidResourceHandle);
    return copy_on(s, dst, src, count, kind, false);
}

static cudaError_t memset_on(CUstream_st *s, void *p, int value, size_t count, bool sync) {
    if (count == 0) return cudaSuccess;
    if (classify(p, count).kind != mem::device) return fail(cudaErrorInvalidValue);
    int device = s->device;
    if (cudaError_t e = enqueue(s, [=] {
            if (sticky(device)) return;
            if (classify(p, count).kind != mem::device)
                fault(device, cudaErrorIllegalAddress, "a memset of %zu bytes at %p touches freed memory", count, p);
            else
                memset(p, value, count);
        }))
        return e;
    if (sync) drain(s);
    return fail(sticky(device));
}

cudaError_t cudaMemset(void *p, int value, size_t count) {
    ENTER();
    return memset_on(legacy_stream(current), p, value, count, true);
}

cudaError_t cudaMemsetAsync(void *p, int value, size_t count, cudaStream_t stream) {
    ENTER();
    CUstream_st *s = stream ? stream : legacy_stream(current);
    if (s->device != current) return fail(cudaErrorInvalidResourceHandle);
    return memset_on(s, p, value, count, false);
}

// ---- streams ----

cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, cudaStreamDefault); }

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags) {
    if (!s || (flags & ~(unsigned)cudaStreamNonBlocking)) return fail(cudaErrorInvalidValue);
    ENTER();
    *s = make_stream(current, !(flags & cudaStreamNonBlocking));
    return cudaSuccess;
}

// Stream priorities (cudaDeviceGetStreamPriorityRange, cudaStreamCreateWithPriority):
// lower numbers are greater priorities, 0 is the default, and a value outside
// [greatest, least] is clamped into it. The scheduler's preference for pending work of
// greater priority changes no result, so every stream here runs alike and only the
// value is kept.
static const int least_priority = 0, greatest_priority = -5;

cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest) {
    ENTER();
    if (least) *least = least_priority;
    if (greatest) *greatest = greatest_priority;
    return cudaSuccess;
}

cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned int flags, int priority) {
    cudaError_t err = cudaStreamCreateWithFlags(s, flags);
    if (err == cudaSuccess) (*s)->priority = std::min(least_priority, std::max(greatest_priority, priority));
    return err;
}

// The legacy default stream (NULL) has the default priority.
cudaError_t cudaStreamGetPriority(cudaStream_t s, int *priority) {
    if (!priority) return fail(cudaErrorInvalidValue);
    ENTER();
    *priority = s ? s->priority : 0;
    return cudaSuccess;
}

// Work already enqueued still runs (the runtime documents that destroying a stream
// with pending work returns at once and releases it when done); the thread ends then.
// The object itself is kept, drained and idle: other threads may still hold it (a
// cudaFree draining the device, a stream waiting for it behind the legacy stream).
cudaError_t cudaStreamDestroy(cudaStream_t s) {
    if (in_host_fn) return fail(cudaErrorNotPermitted);
    if (!s) return fail(cudaErrorInvalidResourceHandle);
    {
        std::lock_guard<std::mutex> g(M().mu);
        auto &v = dev(s->device).streams;
        auto it = std::find(v.begin(), v.end(), s);
        if (it == v.end() || s == dev(s->device).legacy) return fail(cudaErrorInvalidResourceHandle);
        v.erase(it);
    }
    {
        std::lock_guard<std::mutex> g(s->mu);
        s->stop = true;
        s->work_cv.notify_one();
    }
    s->thread.join();
    std::lock_guard<std::mutex> g(M().mu);
    M().retired.emplace_back(s);
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
    ENTER();
    CUstream_st *s = stream ? stream : legacy_stream(current);
    drain(s);
    return fail(sticky(s->device));
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
    ENTER();
    CUstream_st *s = stream ? stream : legacy_stream(current);
    std::lock_guard<std::mutex> g(s->mu);
    return s->done == s->enqueued ? cudaSuccess : cudaErrorNotReady;
}

static void wait_marker(const std::shared_ptr<marker> &m) {
    std::unique_lock<std::mutex> lk(M().marker_mu);
    M().marker_cv.wait(lk, [&] { return m->done.load(); });
}

// The stream waits for the work the event's latest record captured; an event never
// recorded is no wait. Events of other devices are allowed (cross-device waits).
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t ev, unsigned int flags) {
    ENTER();
    if (!ev || flags) return fail(cudaErrorInvalidValue);
    std::shared_ptr<marker> m;
    {
        std::lock_guard<std::mutex> g(ev->mu);
        m = ev->last;
    }
    if (!m) return cudaSuccess;
    return enqueue(stream, [m] { wait_marker(m); });
}

// fn runs on the stream's thread; it may not call the runtime (cudaErrorNotPermitted
// there), and it is not called once the context has faulted.
cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *arg) {
    ENTER();
    if (!fn) return fail(cudaErrorInvalidValue);
    int device = stream_device(stream);
    return enqueue(stream, [=] {
        if (sticky(device)) return;
        in_host_fn = true;
        fn(arg);
        in_host_fn = false;
    });
}

// ---- events ----

cudaError_t cudaEventCreate(cudaEvent_t *ev) { return cudaEventCreateWithFlags(ev, cudaEventDefault); }

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *ev, unsigned int flags) {
    if (!ev || (flags & ~(unsigned)(cudaEventBlockingSync | cudaEventDisableTiming)))
        return fail(cudaErrorInvalidValue);
    ENTER();
    *ev = new CUevent_st;
    (*ev)->device = current;
    (*ev)->timed = !(flags & cudaEventDisableTiming);
    return cudaSuccess;
}

// Pending records complete on their own: the markers outlive the event.
cudaError_t cudaEventDestroy(cudaEvent_t ev) {
    if (in_host_fn) return fail(cudaErrorNotPermitted);
    if (!ev) return fail(cudaErrorInvalidResourceHandle);
    delete ev;
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t stream) {
    ENTER();
    if (!ev) return fail(cudaErrorInvalidResourceHandle);
    if (stream_device(stream) != ev->device) return fail(cudaErrorInvalidResourceHandle);
    auto m = std::make_shared<marker>();
    bool timed = ev->timed;
    if (cudaError_t e = enqueue(stream, [m, timed] {
            if (timed) m->time = now_s();
            {
                std::lock_guard<std::mutex> g(M().marker_mu);
                m->done = true;
            }
            M().marker_cv.notify_all();
        }))
        return e;
    std::lock_guard<std::mutex> g(ev->mu);
    ev->last = m;
    return cudaSuccess;
}

// "Not ready" is a state, not an error: it does not become the thread's last error.
cudaError_t cudaEventQuery(cudaEvent_t ev) {
    ENTER();
    if (!ev) return fail(cudaErrorInvalidResourceHandle);
    std::lock_guard<std::mutex> g(ev->mu);
    return !ev->last || ev->last->done ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t ev) {
    ENTER();
    if (!ev) return fail(cudaErrorInvalidResourceHandle);
    std::shared_ptr<marker> m;
    {
        std::lock_guard<std::mutex> g(ev->mu);
        m = ev->last;
    }
    if (m) wait_marker(m);
    return fail(sticky(ev->device));
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end) {
    ENTER();
    if (!ms) return fail(cudaErrorInvalidValue);
    if (!start || !end || !start->timed || !end->timed) return fail(cudaErrorInvalidResourceHandle);
    std::shared_ptr<marker> a, b;
    {
        std::lock_guard<std::mutex> g(start->mu);
        a = start->last;
    }
    {
        std::lock_guard<std::mutex> g(end->mu);
        b = end->last;
    }
    if (!a || !b) return fail(cudaErrorInvalidResourceHandle);
    if (!a->done || !b->done) return fail(cudaErrorNotReady);
    *ms = (float)((b->time - a->time) * 1e3);
    return cudaSuccess;
}

} // extern "C"
