// The CUDA emulation's runtime and kernels against what the CUDA Runtime API reference
// and the Programming Guide say: device properties, cudaMalloc's limit, copy direction
// and range checks, launch limits, faults that end a context (a host pointer in a
// kernel, memory of another device, a write past an allocation), barriers and shuffles
// (and that a missing barrier or __syncwarp shows, even where the block before left the
// same values in shared memory or every lane wrote before leaving an exchange), mma.sync
// m16n8k16 in bf16 and fp16 against a product in double (fragments per the PTX ISA; a
// warp short of 32 lanes faults), ldmatrix x4 and x4.trans against the PTX ISA's
// layout (an address outside shared memory or misaligned faults), a vector load off its
// alignment (a fault), cp.async's copies,
// zeros and groups (a read before the wait shows; an address outside shared memory or
// misaligned, or a thread that exits before its wait, faults), streams,
// events, host functions, the pageable and pinned rules of cudaMemcpyAsync (host to
// host returns once done), memory pools and stream-ordered frees, and the 16-bit conversions against the CPU's
// own (F16C) and a double-precision reference. Each fault uses a device of its own,
// since a fault ends that device's context for the rest of the process.
// timeout: 10 cuda-emu=10 san-cuda-emu=20
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>
#include <chrono>
#include <thread>

static int failures;
#define CHECK(cond, ...)                                                                                               \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            printf("%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);                                            \
            printf(__VA_ARGS__);                                                                                       \
            printf("\n");                                                                                              \
            failures++;                                                                                                \
        }                                                                                                              \
    } while (0)
#define EXPECT(call, want)                                                                                             \
    do {                                                                                                               \
        cudaError_t got_ = (call);                                                                                     \
        CHECK(got_ == (want), "%s returned %s", #call, cudaGetErrorName(got_));                                        \
    } while (0)
#define LAUNCH CUDA_EMU_LAUNCH

// ---- kernels ----

static __global__ void fill(int *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = i * 3 + 1;
}

// gpu/cuda's SHARED_FRESH: the emulation's start of a block's shared objects.
#define SHARED_FRESH(...) ::cuda_emu::shared_fresh_all(__VA_ARGS__)

// Each thread stores its index, then reads its neighbour's: right only with the barrier.
static __global__ void rotate(int *out, bool sync) {
    __shared__ int s[256];
    SHARED_FRESH(s);
    int t = threadIdx.x;
    s[t] = (int)blockIdx.x * 1000 + t;
    if (sync) __syncthreads();
    out[blockIdx.x * blockDim.x + t] = s[(t + 1) % blockDim.x];
}

// Every block loads the same tile, then each thread reads its neighbour's element:
// right only with the barrier, even when the block before left the same tile behind.
static __global__ void same_tile(int *out, bool sync) {
    __shared__ int s[256];
    SHARED_FRESH(s);
    int t = threadIdx.x;
    s[t] = 7 * t;
    if (sync) __syncthreads();
    out[blockIdx.x * blockDim.x + t] = s[(t + 1) % blockDim.x];
}

// Each warp writes its half and exchanges a value among its lanes, then reads the other
// warp's half: right only with the barrier, though every lane has written before it
// leaves the exchange.
static __global__ void other_warp(int *out, bool sync) {
    __shared__ int s[64];
    SHARED_FRESH(s);
    int t = threadIdx.x;
    s[t] = 1000 * (int)blockIdx.x + t;
    int mate = __shfl_xor_sync(0xffffffffu, t, 1);
    if (sync) __syncthreads();
    out[blockIdx.x * 64 + t] = s[(t + 32) % 64] + mate - (t ^ 1);
}

// Each warp reads the whole tile, an exchange after each read, then writes its half of
// the next tile: right only with a barrier between, since a warp far ahead overwrites
// what the other still reads (the race of a tile copied in for the next step).
static __global__ void overwrite(int *out, bool sync) {
    __shared__ int s[64];
    SHARED_FRESH(s);
    int t = threadIdx.x, b = (int)blockIdx.x;
    s[t] = t + b;
    __syncthreads();
    int sum = 0;
    for (int k = 0; k < 64; k++)
        sum = __shfl_xor_sync(0xffffffffu, sum + s[(t + k) % 64], 0);
    if (sync) __syncthreads();
    s[t] = -1;
    out[b * 64 + t] = sum;
}

// A warp's lanes write their slots, then each reads its neighbour's: right only with
// __syncwarp, even when the block before left the same values behind.
static __global__ void lanes(int *out, bool sync) {
    __shared__ int s[32];
    SHARED_FRESH(s);
    int l = threadIdx.x;
    s[l] = 3 * l;
    if (sync) __syncwarp();
    out[blockIdx.x * 32 + l] = s[l ^ 1];
}

// One m16n8k16 product: each lane builds its fragments of A (16 x 16, row-major), B
// (16 x 8, row-major here) and C from the PTX ISA's formulas, written out here on their
// own, and stores its fragment of D where they say.
static __global__ void mma_tile(const uint16_t *A, const uint16_t *B, const float *C, float *D, bool bf16) {
    int lane = threadIdx.x, g = lane >> 2, q = lane % 4;
    uint32_t a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
    float c[4], d[4];
    for (int i = 0; i < 8; i++) {
        int row = (i < 2 || (i >= 4 && i < 6)) ? g : g + 8, col = q * 2 + (i & 1) + (i >= 4 ? 8 : 0);
        a[i / 2] |= (uint32_t)A[row * 16 + col] << (16 * (i & 1));
    }
    for (int i = 0; i < 4; i++) {
        int row = q * 2 + (i & 1) + (i >= 2 ? 8 : 0), col = g;
        b[i / 2] |= (uint32_t)B[row * 8 + col] << (16 * (i & 1));
    }
    for (int i = 0; i < 4; i++)
        c[i] = C[(i < 2 ? g : g + 8) * 8 + q * 2 + (i & 1)];
    cuda_emu::mma_m16n8k16(d, a, b, c, bf16);
    for (int i = 0; i < 4; i++)
        D[(i < 2 ? g : g + 8) * 8 + q * 2 + (i & 1)] = d[i];
}

// ldmatrix x4 from a 32 x 24 tile of distinct values in shared memory: matrix i at rows
// 8 i .. 8 i + 8, columns 8 (i % 3) .., lane 8 i + r giving its row r; each lane's d[]
// goes to out[lane * 4 ..]. offset moves every row address by that many values, and
// from (when not null) is read instead of the tile.
static __global__ void ldmatrix_tile(uint32_t *out, bool trans, int offset, const uint16_t *from) {
    __shared__ __align__(16) uint16_t t[32 * 24];
    SHARED_FRESH(t);
    const int lane = threadIdx.x;
    for (int i = lane; i < 32 * 24; i += blockDim.x)
        t[i] = (uint16_t)(i * 7 + 1);
    __syncthreads();
    uint32_t d[4];
    const int at = (8 * (lane / 8) + lane % 8) * 24 + 8 * (lane / 8 % 3) + offset;
    cuda_emu::ldmatrix_x4(d, from ? from + at : t + at, trans);
    for (int i = 0; i < 4; i++)
        out[lane * 4 + i] = d[i];
}

// cp.async: thread t copies 2 (t % 9) bytes from src + 8 t (16-bit values) into row t of
// a shared tile, the rest of the row zeros, as group 0, then row t + 32 from src + 8 t + 256
// as group 1 (with step 1). How each step waits:
enum { CP_WAIT_ALL, CP_WAIT_OLDER, CP_READ_EARLY, CP_MISALIGNED, CP_TO_GLOBAL, CP_NO_WAIT, CP_TOO_MANY_BYTES };
static __global__ void cp_async_rows(uint16_t *out, const uint16_t *src, int how) {
    __shared__ __align__(16) uint16_t t[64 * 8];
    SHARED_FRESH(t);
    const int lane = threadIdx.x;
    uint16_t *dst = how == CP_TO_GLOBAL ? out + 8 * lane : t + 8 * lane + (how == CP_MISALIGNED ? 4 : 0);
    cuda_emu::cp_async_16(dst, src + 8 * lane, how == CP_TOO_MANY_BYTES ? 17 : 2 * (lane % 9));
    cuda_emu::cp_async_commit();
    if (how == CP_READ_EARLY) out[lane] = t[8 * lane]; // before the wait: the copy may not be there
    if (how == CP_NO_WAIT) return;
    if (how == CP_WAIT_OLDER) {
        cuda_emu::cp_async_16(t + 8 * (lane + 32), src + 8 * lane + 256, 16);
        cuda_emu::cp_async_commit();
        cuda_emu::cp_async_wait(1); // the first group only
        for (int k = 0; k < 8; k++)
            out[8 * lane + k] = t[8 * lane + k];
        cuda_emu::cp_async_wait(0);
        return;
    }
    cuda_emu::cp_async_wait(0);
    __syncthreads();
    if (how == CP_READ_EARLY) return;
    for (int k = 0; k < 8; k++)
        out[8 * lane + k] = t[8 * ((lane + 1) % 32) + k]; // another thread's row, after the barrier
}

// A 16-byte load at p, as gpu/cuda's load_as makes it.
static __global__ void load16(int *out, const char *p) {
    cuda_emu::vector_access(p, 16);
    memcpy(out, p, 16);
}

// Only the first half of the block reaches the barrier: undefined, so a fault.
static __global__ void half_barrier(int *out) {
    if (threadIdx.x < blockDim.x / 2) __syncthreads();
    out[threadIdx.x] = 1;
}

// Butterfly sum over the warp, then shuffles of each kind with width 16.
static __global__ void shuffles(int *out) {
    int lane = threadIdx.x;
    int sum = lane;
    for (int o = 16; o > 0; o >>= 1)
        sum += __shfl_xor_sync(0xffffffffu, sum, o);
    out[lane] = sum;
    out[32 + lane] = __shfl_up_sync(0xffffffffu, lane, 3, 16);
    out[64 + lane] = __shfl_down_sync(0xffffffffu, lane, 3, 16);
    out[96 + lane] = __shfl_sync(0xffffffffu, lane, 5, 16);
    out[128 + lane] = __shfl_xor_sync(0xffffffffu, lane, 16, 16);                // a later group: own value
    if (lane < 16) out[160 + lane] = __shfl_xor_sync(0x0000ffffu, lane * 10, 1); // half the warp takes part
}

static __global__ void bad_mask(int *out) { out[threadIdx.x] = __shfl_xor_sync(0x1u, 1, 1); }

#if !defined(__SANITIZE_ADDRESS__) // there ASan reports the write itself
static __global__ void overrun(char *p, int n) { p[n] = 7; }
#endif

// ---- helpers ----

static int *dev_ints(int n) {
    int *p = nullptr;
    EXPECT(cudaMalloc((void **)&p, n * sizeof(int)), cudaSuccess);
    return p;
}

static void test_devices() {
    int n = 0;
    EXPECT(cudaGetDeviceCount(&n), cudaSuccess);
    CHECK(n == 17, "%d devices (CUDA_EMU_DEVICES=17)", n);
    cudaDeviceProp p;
    EXPECT(cudaGetDeviceProperties(&p, 0), cudaSuccess);
    CHECK(p.major == 9 && p.minor == 0 && p.multiProcessorCount == 132 && p.maxThreadsPerBlock == 1024,
          "cc %d.%d, %d SMs", p.major, p.minor, p.multiProcessorCount);
    CHECK(p.totalGlobalMem == (size_t)1 << 30, "memory %zu (CUDA_EMU_MEMORY=1G)", p.totalGlobalMem);
    EXPECT(cudaGetDeviceProperties(&p, 17), cudaErrorInvalidDevice);
    EXPECT(cudaSetDevice(17), cudaErrorInvalidDevice);
    EXPECT(cudaGetLastError(), cudaErrorInvalidDevice);
    EXPECT(cudaGetLastError(), cudaSuccess); // read and reset
}

static void test_memory() {
    EXPECT(cudaSetDevice(0), cudaSuccess);
    void *big = nullptr;
    EXPECT(cudaMalloc(&big, (size_t)2 << 30), cudaErrorMemoryAllocation);
    cudaGetLastError();
    int *d = dev_ints(64), h[64], back[64];
    CHECK(((uintptr_t)d & 255) == 0, "cudaMalloc alignment %p", (void *)d);
    EXPECT(cudaMemcpy(back, d, sizeof back, cudaMemcpyDeviceToHost), cudaSuccess);
    CHECK(back[0] == -1 && back[63] == -1, "new memory not poisoned: %d", back[0]);
    for (int i = 0; i < 64; i++)
        h[i] = i;
    // The direction must match the pointers; device ranges must lie in an allocation.
    EXPECT(cudaMemcpy(d, h, sizeof h, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
    EXPECT(cudaMemcpy(h, d, sizeof h, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
    EXPECT(cudaMemcpy(d, d, sizeof h, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
    EXPECT(cudaMemcpy(d + 1, h, sizeof h, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
    EXPECT(cudaMemset(d + 60, 0, 5 * sizeof(int)), cudaErrorInvalidValue);
    EXPECT(cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice), cudaSuccess);
    EXPECT(cudaMemcpy(back, d, sizeof back, cudaMemcpyDefault), cudaSuccess);
    CHECK(memcmp(back, h, sizeof h) == 0, "round trip");
    EXPECT(cudaFree(h), cudaErrorInvalidValue);
    EXPECT(cudaFree(d), cudaSuccess);
    EXPECT(cudaFree(d), cudaErrorInvalidValue);                                        // twice
    EXPECT(cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice), cudaErrorInvalidValue); // freed
    EXPECT(cudaHostRegister(h, sizeof h, cudaHostRegisterPortable), cudaSuccess);
    EXPECT(cudaHostRegister(h, sizeof h, cudaHostRegisterPortable), cudaErrorHostMemoryAlreadyRegistered);
    EXPECT(cudaHostUnregister(h), cudaSuccess);
    EXPECT(cudaHostUnregister(h), cudaErrorHostMemoryNotRegistered);
    cudaGetLastError();
}

static void test_launches() {
    EXPECT(cudaSetDevice(0), cudaSuccess);
    int n = 1000, *d = dev_ints(n), h[1000];
    fill LAUNCH((n + 127) / 128, 128, 0, 0)(d, n);
    EXPECT(cudaGetLastError(), cudaSuccess);
    EXPECT(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost), cudaSuccess);
    bool ok = true;
    for (int i = 0; i < n; i++)
        ok = ok && h[i] == i * 3 + 1;
    CHECK(ok, "fill");
    // Past the limits: the launch fails, seen by cudaGetLastError, and nothing runs.
    fill LAUNCH(1, 1025, 0, 0)(d, n);
    EXPECT(cudaGetLastError(), cudaErrorInvalidConfiguration);
    fill LAUNCH(dim3(1, 65536), 32, 0, 0)(d, n);
    EXPECT(cudaGetLastError(), cudaErrorInvalidConfiguration);
    fill LAUNCH(1, dim3(1, 1, 65), 0, 0)(d, n);
    EXPECT(cudaGetLastError(), cudaErrorInvalidConfiguration);
    fill LAUNCH(1, 32, 48 * 1024 + 1, 0)(d, n);
    EXPECT(cudaGetLastError(), cudaErrorInvalidConfiguration);
    fill LAUNCH(0, 32, 0, 0)(d, n);
    EXPECT(cudaGetLastError(), cudaErrorInvalidConfiguration);
    cudaStream_t other;
    EXPECT(cudaSetDevice(1), cudaSuccess);
    EXPECT(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking), cudaSuccess);
    EXPECT(cudaSetDevice(0), cudaSuccess);
    fill LAUNCH(1, 32, 0, other)(d, n);
    EXPECT(cudaGetLastError(), cudaErrorInvalidResourceHandle);
    EXPECT(cudaSetDevice(1), cudaSuccess);
    EXPECT(cudaStreamDestroy(other), cudaSuccess);
    EXPECT(cudaSetDevice(0), cudaSuccess);
    EXPECT(cudaFree(d), cudaSuccess);
}

static void test_blocks() {
    EXPECT(cudaSetDevice(0), cudaSuccess);
    int nb = 3, nt = 256, *d = dev_ints(nb * nt), h[3 * 256];
    rotate LAUNCH(nb, nt, 0, 0)(d, true);
    EXPECT(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost), cudaSuccess);
    int bad = 0;
    for (int b = 0; b < nb; b++)
        for (int t = 0; t < nt; t++)
            bad += h[b * nt + t] != b * 1000 + (t + 1) % nt;
    CHECK(bad == 0, "rotate with __syncthreads: %d wrong", bad);
    // Without the barrier some thread reads its neighbour's slot before it is written.
    rotate LAUNCH(nb, nt, 0, 0)(d, false);
    EXPECT(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost), cudaSuccess);
    bad = 0;
    for (int b = 0; b < nb; b++)
        for (int t = 0; t < nt; t++)
            bad += h[b * nt + t] != b * 1000 + (t + 1) % nt;
    CHECK(bad > 0, "rotate without __syncthreads gave the right answer");
    // The races a GPU shows whatever a block's shared memory held before, and whichever
    // warp runs ahead: each launched twice (the second finds the first's values), right
    // with the barrier, wrong without it in some block.
    // Eight blocks: half of them (by the seed) run warp by warp, which other_warp and
    // overwrite need.
    const int nr = 8;
    int *r = dev_ints(nr * nt), hr[8 * 256];
    for (int k = 0; k < 8; k++) {
        bool sync = k % 2 == 0;
        const char *name = k < 2 ? "same_tile" : k < 4 ? "other_warp" : k < 6 ? "lanes" : "overwrite";
        int width = k < 2 ? nt : k < 4 ? 64 : k < 6 ? 32 : 64;
        for (int launch = 0; launch < 2; launch++) {
            if (k < 2)
                same_tile LAUNCH(nr, nt, 0, 0)(r, sync);
            else if (k < 4)
                other_warp LAUNCH(nr, 64, 0, 0)(r, sync);
            else if (k < 6)
                lanes LAUNCH(nr, 32, 0, 0)(r, sync);
            else
                overwrite LAUNCH(nr, 64, 0, 0)(r, sync);
            EXPECT(cudaMemcpy(hr, r, nr * width * sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess);
            bad = 0;
            for (int b = 0; b < nr; b++)
                for (int t = 0; t < width; t++) {
                    int want = k < 2   ? 7 * ((t + 1) % width)
                               : k < 4 ? 1000 * b + (t + 32) % 64
                               : k < 6 ? 3 * (t ^ 1)
                                       : 2016 + 64 * b;
                    bad += hr[b * width + t] != want;
                }
            if (sync)
                CHECK(bad == 0, "%s with its barrier, launch %d: %d wrong", name, launch + 1, bad);
            else
                CHECK(bad > 0, "%s without its barrier, launch %d, gave the right answer", name, launch + 1);
        }
    }

    int *s = dev_ints(192), hs[192];
    shuffles LAUNCH(1, 32, 0, 0)(s);
    EXPECT(cudaMemcpy(hs, s, sizeof hs, cudaMemcpyDeviceToHost), cudaSuccess);
    for (int l = 0; l < 32; l++) {
        int g = l & ~15;
        CHECK(hs[l] == 496, "xor sum lane %d: %d", l, hs[l]);
        CHECK(hs[32 + l] == (l - 3 >= g ? l - 3 : l), "up lane %d: %d", l, hs[32 + l]);
        CHECK(hs[64 + l] == (l + 3 < g + 16 ? l + 3 : l), "down lane %d: %d", l, hs[64 + l]);
        CHECK(hs[96 + l] == g + 5, "idx lane %d: %d", l, hs[96 + l]);
        CHECK(hs[128 + l] == (l < 16 ? l : l - 16), "xor past the group lane %d: %d", l, hs[128 + l]);
        if (l < 16) CHECK(hs[160 + l] == (l ^ 1) * 10, "half warp lane %d: %d", l, hs[160 + l]);
    }
    EXPECT(cudaFree(d), cudaSuccess);
    EXPECT(cudaFree(r), cudaSuccess);
    EXPECT(cudaFree(s), cudaSuccess);
}

// mma.sync's D = A B + C against a product in double, for bf16 and fp16 inputs; a warp
// short of 32 lanes faults.
static void test_mma() {
    EXPECT(cudaSetDevice(0), cudaSuccess);
    uint16_t A[256], B[128];
    float C[128], D[128];
    void *dA, *dB, *dC, *dD;
    EXPECT(cudaMalloc(&dA, sizeof A), cudaSuccess);
    EXPECT(cudaMalloc(&dB, sizeof B), cudaSuccess);
    EXPECT(cudaMalloc(&dC, sizeof C), cudaSuccess);
    EXPECT(cudaMalloc(&dD, sizeof D), cudaSuccess);
    for (int bf16 = 0; bf16 < 2; bf16++) {
        double a[256], b[128];
        // Small integers and halves, exact in both types: the sums are exact too.
        for (int i = 0; i < 256; i++) {
            float v = (float)((i * 37 % 17) - 8) * (i % 3 ? 1.0f : 0.5f);
            a[i] = v;
            A[i] = bf16 ? __float2bfloat16_rn(v).__x : __float2half_rn(v).__x;
        }
        for (int i = 0; i < 128; i++) {
            float v = (float)((i * 11 % 13) - 6);
            b[i] = v;
            B[i] = bf16 ? __float2bfloat16_rn(v).__x : __float2half_rn(v).__x;
            C[i] = (float)(i % 5) - 2.0f;
        }
        EXPECT(cudaMemcpy(dA, A, sizeof A, cudaMemcpyHostToDevice), cudaSuccess);
        EXPECT(cudaMemcpy(dB, B, sizeof B, cudaMemcpyHostToDevice), cudaSuccess);
        EXPECT(cudaMemcpy(dC, C, sizeof C, cudaMemcpyHostToDevice), cudaSuccess);
        mma_tile LAUNCH(1, 32, 0, 0)((const uint16_t *)dA, (const uint16_t *)dB, (const float *)dC, (float *)dD, bf16);
        EXPECT(cudaMemcpy(D, dD, sizeof D, cudaMemcpyDeviceToHost), cudaSuccess);
        int bad = 0;
        for (int r = 0; r < 16; r++)
            for (int c = 0; c < 8; c++) {
                double want = C[r * 8 + c];
                for (int k = 0; k < 16; k++)
                    want += a[r * 16 + k] * b[k * 8 + c];
                bad += D[r * 8 + c] != (float)want;
            }
        CHECK(bad == 0, "mma %s: %d of 128 elements of D wrong", bf16 ? "bf16" : "fp16", bad);
    }
    cudaFree(dA), cudaFree(dB), cudaFree(dC), cudaFree(dD);
}

// ldmatrix's fragments: lane 4 r + c gets in d[i] the values at row r, columns 2 c and
// 2 c + 1 of matrix i, the first in the low half; with .trans those at rows 2 c and
// 2 c + 1 of column r (PTX ISA, "ldmatrix").
static void test_ldmatrix() {
    EXPECT(cudaSetDevice(0), cudaSuccess);
    uint32_t *d_out = (uint32_t *)dev_ints(128), out[128];
    for (int trans = 0; trans < 2; trans++) {
        ldmatrix_tile LAUNCH(1, 32, 0, 0)(d_out, trans, 0, nullptr);
        EXPECT(cudaMemcpy(out, d_out, sizeof out, cudaMemcpyDeviceToHost), cudaSuccess);
        int bad = 0;
        for (int lane = 0; lane < 32; lane++)
            for (int i = 0; i < 4; i++) {
                auto m = [i](int row, int col) {
                    return (uint32_t)(uint16_t)(((8 * i + row) * 24 + 8 * (i % 3) + col) * 7 + 1);
                };
                int r = lane / 4, c = lane % 4;
                uint32_t want = trans ? m(2 * c, r) | m(2 * c + 1, r) << 16 : m(r, 2 * c) | m(r, 2 * c + 1) << 16;
                bad += out[lane * 4 + i] != want;
            }
        CHECK(bad == 0, "ldmatrix%s: %d of 128 registers wrong", trans ? ".trans" : "", bad);
    }
    EXPECT(cudaFree(d_out), cudaSuccess);
}

// cp.async: what lands is the source's bytes then zeros; wait_group(1) lands all but the
// newest group; a read before the wait sees what was there before for some copies (the
// emulation lands each at its issue or at its wait, drawn from the seed).
static void test_cp_async() {
    EXPECT(cudaSetDevice(0), cudaSuccess);
    uint16_t h_src[512], got[256];
    for (int i = 0; i < 512; i++)
        h_src[i] = (uint16_t)(i + 1);
    uint16_t *src = (uint16_t *)dev_ints(256), *out = (uint16_t *)dev_ints(128);
    EXPECT(cudaMemcpy(src, h_src, sizeof h_src, cudaMemcpyHostToDevice), cudaSuccess);
    for (int how = CP_WAIT_ALL; how <= CP_WAIT_OLDER; how++) {
        cp_async_rows LAUNCH(1, 32, 0, 0)(out, src, how);
        EXPECT(cudaMemcpy(got, out, sizeof got, cudaMemcpyDeviceToHost), cudaSuccess);
        int bad = 0;
        for (int lane = 0; lane < 32; lane++) {
            int from = how == CP_WAIT_ALL ? (lane + 1) % 32 : lane;
            for (int k = 0; k < 8; k++)
                bad += got[8 * lane + k] != (k < from % 9 ? h_src[8 * from + k] : 0);
        }
        CHECK(bad == 0, "cp.async %s: %d of 256 values wrong", how == CP_WAIT_ALL ? "waited for" : "of the older group",
              bad);
    }
    cp_async_rows LAUNCH(1, 32, 0, 0)(out, src, CP_READ_EARLY);
    EXPECT(cudaMemcpy(got, out, 64, cudaMemcpyDeviceToHost), cudaSuccess);
    int stale = 0;
    for (int lane = 1; lane < 32; lane++) // lane 0 copies no bytes: a zero either way
        stale += got[lane] == 0xffff;     // the shared tile's fresh contents, all bits set
    CHECK(stale > 0 && stale < 31, "cp.async read before its wait: %d of 31 copies not there yet", stale);
    cudaFree(src), cudaFree(out);
}

// Device 2..: each fault ends its device's context; every later call there returns it.
static void test_faults() {
    int h[64];
    EXPECT(cudaSetDevice(2), cudaSuccess);
    fill LAUNCH(1, 64, 0, 0)(h, 64); // a host pointer in a kernel
    EXPECT(cudaGetLastError(), cudaSuccess);
    EXPECT(cudaDeviceSynchronize(), cudaErrorIllegalAddress);
    int *d = nullptr;
    EXPECT(cudaMalloc((void **)&d, 64), cudaErrorIllegalAddress);
    EXPECT(cudaGetLastError(), cudaErrorIllegalAddress); // sticky: never reset
    EXPECT(cudaGetLastError(), cudaErrorIllegalAddress);

    EXPECT(cudaSetDevice(3), cudaSuccess);
    int *on3 = dev_ints(64);
    EXPECT(cudaSetDevice(4), cudaSuccess);
    fill LAUNCH(1, 64, 0, 0)(on3, 64); // memory of another device
    EXPECT(cudaDeviceSynchronize(), cudaErrorIllegalAddress);
    EXPECT(cudaSetDevice(3), cudaSuccess);
    EXPECT(cudaFree(on3), cudaSuccess); // device 3 is unharmed

    EXPECT(cudaSetDevice(5), cudaSuccess);
    int *d5 = dev_ints(32);
    half_barrier LAUNCH(1, 32, 0, 0)(d5);
    EXPECT(cudaDeviceSynchronize(), cudaErrorLaunchFailure);

    EXPECT(cudaSetDevice(6), cudaSuccess);
    int *d6 = dev_ints(32);
    bad_mask LAUNCH(1, 32, 0, 0)(d6);
    EXPECT(cudaDeviceSynchronize(), cudaErrorLaunchFailure);

    EXPECT(cudaSetDevice(1), cudaSuccess); // a warp of 16 lanes cannot take an mma
    void *m1;
    EXPECT(cudaMalloc(&m1, 1024), cudaSuccess);
    mma_tile LAUNCH(1, 16, 0, 0)((const uint16_t *)m1, (const uint16_t *)m1, (const float *)m1, (float *)m1, true);
    EXPECT(cudaDeviceSynchronize(), cudaErrorLaunchFailure);

    EXPECT(cudaSetDevice(8), cudaSuccess); // ldmatrix from rows 8 bytes off their alignment
    uint32_t *d8 = (uint32_t *)dev_ints(128);
    ldmatrix_tile LAUNCH(1, 32, 0, 0)(d8, false, 4, nullptr);
    EXPECT(cudaDeviceSynchronize(), cudaErrorLaunchFailure);

    EXPECT(cudaSetDevice(9), cudaSuccess); // ldmatrix from global memory
    uint32_t *d9 = (uint32_t *)dev_ints(128);
    const uint16_t *g9 = (const uint16_t *)dev_ints(32 * 24 / 2);
    ldmatrix_tile LAUNCH(1, 32, 0, 0)(d9, true, 0, g9);
    EXPECT(cudaDeviceSynchronize(), cudaErrorLaunchFailure);

    EXPECT(cudaSetDevice(10), cudaSuccess); // ldmatrix rows past the end of the tile
    uint32_t *d10 = (uint32_t *)dev_ints(128);
    ldmatrix_tile LAUNCH(1, 32, 0, 0)(d10, false, 8 * 24, nullptr);
    EXPECT(cudaDeviceSynchronize(), cudaErrorLaunchFailure);

    uint16_t *g = nullptr;
    const char *cp_faults[] = {"misaligned", "to global memory", "no wait", "of 17 bytes"};
    for (int i = 0; i < 4; i++) { // cp.async: a destination 8 bytes off, in global memory; an exit before the
                                  // wait; more source bytes than the copy's 16
        EXPECT(cudaSetDevice(11 + i), cudaSuccess);
        EXPECT(cudaMalloc((void **)&g, 1024), cudaSuccess);
        cp_async_rows LAUNCH(1, 32, 0, 0)(g, g, CP_MISALIGNED + i);
        CHECK(cudaDeviceSynchronize() == cudaErrorLaunchFailure, "cp.async %s: no fault", cp_faults[i]);
    }

    EXPECT(cudaSetDevice(15), cudaSuccess); // a 16-byte load 8 bytes off its alignment
    int *d15 = dev_ints(16);
    load16 LAUNCH(1, 1, 0, 0)(d15, (const char *)d15 + 16);
    EXPECT(cudaDeviceSynchronize(), cudaSuccess);
    load16 LAUNCH(1, 1, 0, 0)(d15, (const char *)d15 + 8);
    EXPECT(cudaDeviceSynchronize(), cudaErrorLaunchFailure);

    EXPECT(cudaSetDevice(16), cudaSuccess); // a warp of 16 lanes cannot take an ldmatrix
    uint32_t *d16 = (uint32_t *)dev_ints(128);
    ldmatrix_tile LAUNCH(1, 16, 0, 0)(d16, false, 0, nullptr);
    EXPECT(cudaDeviceSynchronize(), cudaErrorLaunchFailure);

#if !defined(__SANITIZE_ADDRESS__) // there ASan reports the write itself
    EXPECT(cudaSetDevice(7), cudaSuccess);
    char *c = nullptr;
    EXPECT(cudaMalloc((void **)&c, 100), cudaSuccess);
    overrun LAUNCH(1, 1, 0, 0)(c, 100);
    EXPECT(cudaFree(c), cudaErrorIllegalAddress);
#endif
    EXPECT(cudaSetDevice(0), cudaSuccess);
    cudaGetLastError();
}

static std::atomic<int> gate;
static std::atomic<bool> gate_opened_late;
static void wait_gate(void *) {
    while (!gate.load())
        std::this_thread::yield();
}
static void call_runtime(void *out) {
    void *p;
    *(cudaError_t *)out = cudaMalloc(&p, 4);
}

static void test_streams() {
    EXPECT(cudaSetDevice(0), cudaSuccess);
    cudaStream_t a, b;
    cudaEvent_t e, t0, t1, plain;
    EXPECT(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking), cudaSuccess);
    EXPECT(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking), cudaSuccess);
    EXPECT(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), cudaSuccess);
    EXPECT(cudaEventCreate(&t0), cudaSuccess);
    EXPECT(cudaEventCreate(&t1), cudaSuccess);
    EXPECT(cudaEventCreateWithFlags(&plain, cudaEventDisableTiming), cudaSuccess);
    float ms;
    EXPECT(cudaEventQuery(e), cudaSuccess); // never recorded
    EXPECT(cudaEventElapsedTime(&ms, t0, t1), cudaErrorInvalidResourceHandle);

    // b waits on an event recorded on a after a gate: its copy must see a's copy.
    int *d = dev_ints(4), *d2 = dev_ints(4), h[4] = {1, 2, 3, 4}, src[4] = {5, 6, 7, 8}, got[4];
    EXPECT(cudaHostRegister(src, sizeof src, cudaHostRegisterPortable), cudaSuccess);
    gate = 0;
    EXPECT(cudaEventRecord(t0, a), cudaSuccess);
    EXPECT(cudaLaunchHostFunc(a, wait_gate, nullptr), cudaSuccess);
    // A pageable source is taken at the call; a registered one when the copy runs.
    EXPECT(cudaMemcpyAsync(d, h, sizeof h, cudaMemcpyHostToDevice, a), cudaSuccess);
    EXPECT(cudaMemcpyAsync(d2, src, sizeof src, cudaMemcpyHostToDevice, a), cudaSuccess);
    EXPECT(cudaEventRecord(e, a), cudaSuccess);
    EXPECT(cudaEventRecord(t1, a), cudaSuccess);
    EXPECT(cudaStreamWaitEvent(b, e, 0), cudaSuccess);
    EXPECT(cudaMemcpyAsync(d2 + 1, d, sizeof(int), cudaMemcpyDeviceToDevice, b), cudaSuccess);
    h[0] = -1;
    src[3] = -8;
    cudaGetLastError();
    EXPECT(cudaEventQuery(e), cudaErrorNotReady);
    EXPECT(cudaGetLastError(), cudaSuccess); // not ready is not an error
    EXPECT(cudaStreamQuery(b), cudaErrorNotReady);
    EXPECT(cudaEventElapsedTime(&ms, t0, t1), cudaErrorNotReady);
    gate = 1;
    EXPECT(cudaStreamSynchronize(b), cudaSuccess);
    EXPECT(cudaMemcpy(got, d2, sizeof got, cudaMemcpyDeviceToHost), cudaSuccess);
    CHECK(got[0] == 5 && got[1] == 1 && got[2] == 7 && got[3] == -8, "ordering: %d %d %d %d", got[0], got[1], got[2],
          got[3]);
    EXPECT(cudaEventSynchronize(t1), cudaSuccess);
    EXPECT(cudaEventElapsedTime(&ms, t0, t1), cudaSuccess);
    CHECK(ms >= 0, "elapsed %g ms", ms);
    EXPECT(cudaEventRecord(plain, a), cudaSuccess);
    EXPECT(cudaStreamSynchronize(a), cudaSuccess);
    EXPECT(cudaEventElapsedTime(&ms, t0, plain), cudaErrorInvalidResourceHandle); // no timing

    cudaError_t from_fn = cudaSuccess;
    EXPECT(cudaLaunchHostFunc(a, call_runtime, &from_fn), cudaSuccess);
    EXPECT(cudaStreamSynchronize(a), cudaSuccess);
    EXPECT(from_fn, cudaErrorNotPermitted);

    // Host to host, even between registered buffers, returns once the copy is done: here
    // after the gated work before it on the stream.
    int pinned[4] = {0, 0, 0, 0};
    EXPECT(cudaHostRegister(pinned, sizeof pinned, cudaHostRegisterPortable), cudaSuccess);
    gate = 0;
    EXPECT(cudaLaunchHostFunc(a, wait_gate, nullptr), cudaSuccess);
    std::thread opener([] {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        gate = 1;
    });
    EXPECT(cudaMemcpyAsync(pinned, src, sizeof src, cudaMemcpyHostToHost, a), cudaSuccess);
    CHECK(pinned[0] == 5 && pinned[3] == -8, "a host-to-host cudaMemcpyAsync returned before its copy: %d %d",
          pinned[0], pinned[3]);
    opener.join();
    EXPECT(cudaHostUnregister(pinned), cudaSuccess);

    EXPECT(cudaHostUnregister(src), cudaSuccess);
    cudaFree(d), cudaFree(d2);
    cudaEventDestroy(e), cudaEventDestroy(t0), cudaEventDestroy(t1), cudaEventDestroy(plain);
    cudaStreamDestroy(a), cudaStreamDestroy(b);
}

// Stream priorities: a range with the greatest numerically below the least, a value
// outside it clamped into it, the default (and the legacy stream's) 0, bad flags refused.
static void test_priorities() {
    EXPECT(cudaSetDevice(0), cudaSuccess);
    int least = 1, greatest = 1, p = 1;
    EXPECT(cudaDeviceGetStreamPriorityRange(&least, &greatest), cudaSuccess);
    CHECK(greatest < least && least == 0, "priority range [%d, %d]", greatest, least);
    EXPECT(cudaDeviceGetStreamPriorityRange(nullptr, &greatest), cudaSuccess);
    cudaStream_t urgent, plain, beyond;
    EXPECT(cudaStreamCreateWithPriority(&urgent, cudaStreamNonBlocking, greatest), cudaSuccess);
    EXPECT(cudaStreamCreateWithPriority(&plain, cudaStreamDefault, least + 3), cudaSuccess);
    EXPECT(cudaStreamCreateWithPriority(&beyond, cudaStreamNonBlocking, greatest - 7), cudaSuccess);
    EXPECT(cudaStreamGetPriority(urgent, &p), cudaSuccess);
    CHECK(p == greatest, "urgent stream's priority %d, asked %d", p, greatest);
    EXPECT(cudaStreamGetPriority(plain, &p), cudaSuccess);
    CHECK(p == least, "a priority past the least came back as %d", p);
    EXPECT(cudaStreamGetPriority(beyond, &p), cudaSuccess);
    CHECK(p == greatest, "a priority past the greatest came back as %d", p);
    EXPECT(cudaStreamGetPriority(nullptr, &p), cudaSuccess);
    CHECK(p == 0, "the legacy stream's priority %d", p);
    EXPECT(cudaStreamGetPriority(urgent, nullptr), cudaErrorInvalidValue);
    cudaStream_t bad;
    EXPECT(cudaStreamCreateWithPriority(&bad, 0x10, greatest), cudaErrorInvalidValue);
    // Work on streams of different priorities still runs in each stream's order.
    int *d = dev_ints(2), got[2], one = 1, two = 2;
    EXPECT(cudaMemcpyAsync(d, &one, sizeof one, cudaMemcpyHostToDevice, plain), cudaSuccess);
    EXPECT(cudaMemcpyAsync(d, &two, sizeof two, cudaMemcpyHostToDevice, plain), cudaSuccess);
    EXPECT(cudaMemcpyAsync(d + 1, &one, sizeof one, cudaMemcpyHostToDevice, urgent), cudaSuccess);
    EXPECT(cudaStreamSynchronize(plain), cudaSuccess);
    EXPECT(cudaStreamSynchronize(urgent), cudaSuccess);
    EXPECT(cudaMemcpy(got, d, sizeof got, cudaMemcpyDeviceToHost), cudaSuccess);
    CHECK(got[0] == 2 && got[1] == 1, "copies on priority streams gave %d %d", got[0], got[1]);
    cudaFree(d);
    cudaStreamDestroy(urgent), cudaStreamDestroy(plain), cudaStreamDestroy(beyond);
}

// Stream-ordered allocation: cudaFreeAsync waits for nothing but its own stream (where
// cudaFree drains the device), its release runs in that stream's order, a second free is
// refused, and memory freed earlier on a stream serves the next allocation there.
static void test_pools() {
    EXPECT(cudaSetDevice(0), cudaSuccess);
    cudaMemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypeNone;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 99;
    cudaMemPool_t pool;
    EXPECT(cudaMemPoolCreate(&pool, &props), cudaErrorInvalidValue); // no such device
    props.location.id = 0;
    EXPECT(cudaMemPoolCreate(&pool, &props), cudaSuccess);
    uint64_t keep = UINT64_MAX;
    EXPECT(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep), cudaSuccess);
    int no = 0;
    EXPECT(cudaMemPoolSetAttribute(pool, cudaMemPoolReuseAllowInternalDependencies, &no), cudaSuccess);
    EXPECT(cudaMemPoolSetAttribute(pool, (cudaMemPoolAttr)99, &no), cudaErrorInvalidValue);
    cudaStream_t busy, ps;
    EXPECT(cudaStreamCreateWithFlags(&busy, cudaStreamNonBlocking), cudaSuccess);
    EXPECT(cudaStreamCreateWithFlags(&ps, cudaStreamNonBlocking), cudaSuccess);

    int *p = nullptr;
    EXPECT(cudaMallocFromPoolAsync((void **)&p, 64 * sizeof(int), pool, ps), cudaSuccess);
    EXPECT(cudaStreamSynchronize(ps), cudaSuccess);
    gate = 0;
    EXPECT(cudaLaunchHostFunc(busy, wait_gate, nullptr), cudaSuccess);
    gate_opened_late = false;
    std::thread opener([] {
        std::this_thread::sleep_for(std::chrono::milliseconds(2000));
        gate_opened_late = true;
        gate = 1;
    });
    EXPECT(cudaFreeAsync(p, ps), cudaSuccess);
    EXPECT(cudaFreeAsync(p, ps), cudaErrorInvalidValue); // twice
    EXPECT(cudaStreamSynchronize(ps), cudaSuccess);
    CHECK(!gate_opened_late, "cudaFreeAsync and its stream waited for another stream's work");
    int h = 0;
    EXPECT(cudaMemcpy(p, &h, sizeof h, cudaMemcpyHostToDevice), cudaErrorInvalidValue); // released
    gate = 1;
    opener.join();
    EXPECT(cudaStreamSynchronize(busy), cudaSuccess);

    // 1 GiB devices: 700 MiB freed on ps, then 700 MiB more asked of ps, before the
    // release has surely run.
    void *a = nullptr, *b = nullptr;
    EXPECT(cudaMallocFromPoolAsync(&a, (size_t)700 << 20, pool, ps), cudaSuccess);
    gate = 0;
    EXPECT(cudaLaunchHostFunc(ps, wait_gate, nullptr), cudaSuccess);
    EXPECT(cudaFreeAsync(a, ps), cudaSuccess);
    std::thread late([] {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        gate = 1;
    });
    EXPECT(cudaMallocFromPoolAsync(&b, (size_t)700 << 20, pool, ps), cudaSuccess);
    late.join();
    EXPECT(cudaFreeAsync(b, ps), cudaSuccess);
    EXPECT(cudaStreamSynchronize(ps), cudaSuccess);
    EXPECT(cudaMemPoolTrimTo(pool, 0), cudaSuccess);

    EXPECT(cudaMemPoolDestroy(pool), cudaSuccess);
    EXPECT(cudaMallocFromPoolAsync(&a, 16, pool, ps), cudaErrorInvalidValue); // destroyed
    EXPECT(cudaMemPoolDestroy(pool), cudaErrorInvalidValue);
    cudaGetLastError();
    cudaStreamDestroy(busy), cudaStreamDestroy(ps);
}

// ---- 16-bit conversions ----

__attribute__((target("f16c"))) static unsigned short f16c_from(float f) {
    return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
}
__attribute__((target("f16c"))) static float f16c_to(unsigned short h) { return _cvtsh_ss(h); }

static void test_conversions() {
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    int bad_h = 0, bad_b = 0;
    for (int i = 0; i < 2000000; i++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        float f = __uint_as_float((uint32_t)rng);
        if (f != f) continue;
        // fp16: the CPU's own IEEE conversion (F16C) is the reference.
        unsigned short want = f16c_from(f);
        bad_h += __float2half_rn(f).__x != want;
        __half h;
        h.__x = want;
        bad_h += __float_as_uint(__half2float(h)) != __float_as_uint(f16c_to(want));
        // bf16: the nearer of the two neighbours in magnitude, the even one on a tie, in
        // double; past the largest finite value the upper neighbour stands for 2^128
        // (IEEE rounds as if the exponent were unbounded, then overflows to infinity).
        uint32_t mag = __float_as_uint(f) & 0x7fffffffu, lo = mag & 0xffff0000u, hi = lo + 0x10000u;
        double a = fabs((double)f), vl = __uint_as_float(lo),
               vh = hi == 0x7f800000u ? ldexp(1.0, 128) : __uint_as_float(hi);
        uint32_t near = a - vl < vh - a || (a - vl == vh - a && !(lo & 0x10000u)) ? lo : hi;
        if (lo == 0x7f800000u) near = lo; // infinity stays
        near |= __float_as_uint(f) & 0x80000000u;
        bad_b += __float2bfloat16_rn(f).__x != (unsigned short)(near >> 16);
    }
    CHECK(bad_h == 0, "%d fp16 conversions differ from F16C", bad_h);
    CHECK(bad_b == 0, "%d bf16 conversions are not round-to-nearest-even", bad_b);
    CHECK(__float2half_rn(__uint_as_float(0x7fc00001u)).__x == 0x7fff, "fp16 NaN");
    CHECK(__float2bfloat16_rn(__uint_as_float(0xffc00001u)).__x == 0x7fff, "bf16 NaN");
    CHECK(__float2half_rn(65520.0f).__x == 0x7c00 && __float2half_rn(65519.0f).__x == 0x7bff, "fp16 overflow");
}

int main() {
    setenv("CUDA_EMU_MEMORY", "1G", 1);
    setenv("CUDA_EMU_DEVICES", "17", 1); // one device for each fault

    unsetenv("CUDA_VISIBLE_DEVICES");
    test_devices();
    test_memory();
    test_launches();
    test_blocks();
    test_mma();
    test_ldmatrix();
    test_cp_async();
    test_faults();
    test_streams();
    test_priorities();
    test_pools();
    test_conversions();
    if (failures)
        printf("test_runtime: %d check(s) failed\n", failures);
    else
        printf("test_runtime: all checks passed\n");
    return failures ? 1 : 0;
}
