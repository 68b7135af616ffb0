// Causal self-attention on the CUDA backend, multi-head or grouped-query, with an
// optional sliding window, as tiled kernels with an online softmax that never hold the
// T x T scores: FlashAttention-2's scheme (Dao 2023, "FlashAttention-2: Faster Attention
// with Better Parallelism and Work Partitioning", algorithms 1 and 2; the online softmax
// of Milakov & Gimelshein 2018). bf16 and fp16 heads of 33 to 128 channels run their
// products on tensor cores (the *_mma_kernel family), forward and backward; other
// heads and fp32 run in fp32 on the CUDA cores. There are no atomics: every sum is one
// thread's, a fixed butterfly over the lanes of a row, or one mma's, in a fixed order,
// so the results repeat bit for bit.
//
// Forward, one block per (query tile, query head, batch item): the tile's queries stay
// in shared memory while the key and value tiles they see go by; each row keeps its
// running maximum m and sum l and its output in registers, rescaled by exp(m_old - m)
// when m grows. out = O / l, lse = m + log l (of the scaled scores).
// Backward, P recomputed from lse: D_i = dO_i . O_i (the forward's out) per query row in
// the workspace, then dS = P (dP - D), dP = dO V^T. One kernel per (key tile, kv head,
// batch item) sums dV = P^T dO and dK = scale dS^T Q over the G query heads of the
// group and their query tiles, in that order; another per (query tile, query head,
// batch item) sums dQ = scale dS K over the key tiles. Both write dqkv.
// Key tiles that no query of a tile sees (past the causal edge, or before the window)
// are skipped; within a tile a mask zeroes what a row does not see.
#include "attention_plan.h"
#include "cuda_backend.h"
#include "cp_async.h"
#include "mma.h"

// ---- tiles ----

enum { ATT_THREADS = 128 };

// A BR x BC tile of dot products over the threads: TY x TX threads, each SR rows (r =
// ty + TY i) by SC columns (c = tx + TX j). Strided rows and columns keep a warp's
// shared-memory reads on distinct banks (rows padded to HD + 1 floats). With fewer
// entries than threads the rest of the block idles here.
template <int BR, int BC> struct score_map {
    static constexpr int TX = BC >= 8 ? 8 : BC, SC = BC / TX;
    static constexpr int TY = BR < ATT_THREADS / TX ? BR : ATT_THREADS / TX, SR = BR / TY;
    static_assert(TX * SC == BC && TY * SR == BR && TX * TY <= ATT_THREADS, "tile does not map onto the block");
};

// s[i][j] = sum_{d < hd} a[r_i][d] b[c_j][d], a and b rows of lds floats.
template <int SR, int SC, int TY, int TX, int LDS>
static __device__ __forceinline__ void tile_dots(float (&s)[SR][SC], const float *a, const float *b, int hd, int ty,
                                                 int tx) {
#pragma unroll
    for (int i = 0; i < SR; i++)
#pragma unroll
        for (int j = 0; j < SC; j++)
            s[i][j] = 0.0f;
    for (int d = 0; d < hd; d++) {
        float av[SR], bv[SC];
#pragma unroll
        for (int i = 0; i < SR; i++)
            av[i] = a[(ty + TY * i) * LDS + d];
#pragma unroll
        for (int j = 0; j < SC; j++)
            bv[j] = b[(tx + TX * j) * LDS + d];
#pragma unroll
        for (int i = 0; i < SR; i++)
#pragma unroll
            for (int j = 0; j < SC; j++)
                s[i][j] += av[i] * bv[j];
    }
}

// Rows t0 .. t0 + ROWS of one head (head: its first channel at token 0, tokens ld
// elements apart) into sh, fp32, rows of lds floats: zeros past hd and past the
// sequence, so padded channels and rows add nothing. Consecutive threads read
// consecutive channels.
template <typename T, int HD, int ROWS, int LDS>
static __device__ __forceinline__ void load_rows(float *sh, const T *head, size_t ld, int t0, int seq, int hd) {
    for (int i = threadIdx.x; i < ROWS * HD; i += ATT_THREADS) {
        int r = i / HD, d = i % HD, t = t0 + r;
        sh[r * LDS + d] = t < seq && d < hd ? to_f32(head[(size_t)t * ld + d]) : 0.0f;
    }
}

// The first key query t sees (window 0: no limit).
static __device__ __forceinline__ int first_key(int t, int window) {
    return window > 0 && t >= window ? t - window + 1 : 0;
}

// Whether query t (maybe past the sequence, in a ragged last tile) sees key k.
static __device__ __forceinline__ bool sees(int t, int k, int seq, int window) {
    return t < seq && k <= t && (window == 0 || k > t - window);
}

// Whether queries q0 .. q0 + nq all see keys k0 .. k0 + nk: the tile needs no mask (most
// tiles of a long sequence; the test is the warp's, so the branch does not diverge).
static __device__ __forceinline__ bool tile_full(int q0, int nq, int k0, int nk, int seq, int window) {
    return q0 + nq <= seq && k0 + nk - 1 <= q0 && (window == 0 || k0 > q0 + nq - 1 - window);
}

// ---- forward ----

template <int HD> struct fwd_tile {
    static constexpr int BR = ATT_FWD_BR(HD), BC = ATT_FWD_BC(HD), LDS = HD + 1, LDP = BC + 1;
    static constexpr int TPR = ATT_THREADS / BR, NCH = HD / TPR; // threads per row, channels per thread
    static constexpr size_t SMEM = sizeof(float) * ((size_t)(BR + BC) * LDS + (size_t)BC * HD + (size_t)BR * LDP);
    static_assert(SMEM <= 48 * 1024, "forward tiles over 48 KiB of static shared memory");
    static_assert(TPR * BR == ATT_THREADS && TPR <= 32 && NCH * TPR == HD, "rows do not map onto the block");
};

// out (B, T, NH hd), lse (B, NH, T). Thread (row, lane) of a row's TPR lanes keeps
// channels lane + TPR i of its row's output.
template <typename T, int HD>
static __global__ void __launch_bounds__(ATT_THREADS)
    flash_fwd_kernel(T *out, float *lse, const T *qkv, int seq, int NH, int NKV, int hd, int window, float scale) {
    using F = fwd_tile<HD>;
    constexpr int BR = F::BR, BC = F::BC, LDS = F::LDS, LDP = F::LDP, TPR = F::TPR, NCH = F::NCH;
    using M = score_map<BR, BC>;
    __shared__ float q_s[BR * LDS], k_s[BC * LDS], v_s[BC * HD], p_s[BR * LDP];
    SHARED_FRESH(q_s, k_s, v_s, p_s);
    const int h = blockIdx.y, b = blockIdx.z, q0 = blockIdx.x * BR, g = h / (NH / NKV);
    const size_t ld = (size_t)(NH + 2 * NKV) * hd;
    const T *x = qkv + (size_t)b * seq * ld;
    const int tid = threadIdx.x, row = tid / TPR, lane = tid % TPR, ty = tid / M::TX, tx = tid % M::TX;
    load_rows<T, HD, BR, LDS>(q_s, x + (size_t)h * hd, ld, q0, seq, hd);
    float acc[NCH];
#pragma unroll
    for (int i = 0; i < NCH; i++)
        acc[i] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    const int last = (q0 + BR < seq ? q0 + BR : seq) - 1;
    for (int kt = first_key(q0, window) / BC; kt <= last / BC; kt++) {
        const int k0 = kt * BC;
        __syncthreads(); // the previous tile's K, V and P are read
        load_rows<T, HD, BC, LDS>(k_s, x + (size_t)(NH + g) * hd, ld, k0, seq, hd);
        load_rows<T, HD, BC, HD>(v_s, x + (size_t)(NH + NKV + g) * hd, ld, k0, seq, hd);
        __syncthreads();
        if (ty < M::TY) {
            float s[M::SR][M::SC];
            tile_dots<M::SR, M::SC, M::TY, M::TX, LDS>(s, q_s, k_s, hd, ty, tx);
#pragma unroll
            for (int i = 0; i < M::SR; i++)
#pragma unroll
                for (int j = 0; j < M::SC; j++) {
                    int r = ty + M::TY * i, c = tx + M::TX * j;
                    p_s[r * LDP + c] = sees(q0 + r, k0 + c, seq, window) ? s[i][j] * scale : -INFINITY;
                }
        }
        __syncthreads();
        // The row's maximum and sum over the tile: its lanes are consecutive in one warp
        // and the xor butterfly leaves the same value in each.
        float *pr = p_s + row * LDP, mx = -INFINITY, sum = 0.0f;
        for (int c = lane; c < BC; c += TPR)
            mx = fmaxf(mx, pr[c]);
#pragma unroll
        for (int o = TPR / 2; o > 0; o >>= 1)
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        // mn stays -inf while the row has seen no key (a tile before its window, or a
        // row past the sequence): exp(-inf - -inf) would be NaN.
        const float mn = fmaxf(m, mx), corr = mn == -INFINITY ? 1.0f : expf(m - mn);
        for (int c = lane; c < BC; c += TPR) {
            float p = mn == -INFINITY ? 0.0f : expf(pr[c] - mn);
            pr[c] = p;
            sum += p;
        }
#pragma unroll
        for (int o = TPR / 2; o > 0; o >>= 1)
            sum += __shfl_xor_sync(0xffffffffu, sum, o);
        l = l * corr + sum;
        m = mn;
        __syncwarp(); // the row's P, written by its lanes, is read by all of them
#pragma unroll
        for (int i = 0; i < NCH; i++)
            acc[i] *= corr;
        for (int c = 0; c < BC; c++) {
            const float p = pr[c], *v = v_s + c * HD + lane;
#pragma unroll
            for (int i = 0; i < NCH; i++)
                acc[i] += p * v[TPR * i];
        }
    }
    const int t = q0 + row;
    if (t < seq) {
        const float inv = 1.0f / l;
        T *o = out + ((size_t)b * seq + t) * NH * hd + (size_t)h * hd;
#pragma unroll
        for (int i = 0; i < NCH; i++) {
            int d = lane + TPR * i;
            if (d < hd) store_f32(&o[d], acc[i] * inv);
        }
        if (lane == 0) lse[((size_t)b * NH + h) * seq + t] = m + logf(l);
    }
}

// ---- forward on tensor cores (bf16, fp16; head sizes up to 128) ----
// The same scheme with the two products on tensor cores (mma.h): S = Q K^T and O += P V
// as m16n8k16 tiles of 16-bit inputs summed in fp32, the online softmax in fp32 on the
// scores' fragments, and P rounded to the storage type for its product with V, as
// FlashAttention-2 does. A block of 4 warps takes 64 queries, 16 a warp, whose rows of Q
// (as A fragments), S, P and O stay in each warp's registers: a row's 4 lanes (one
// fragment group) share its maximum and sum by two shuffles. Key and value tiles come
// into shared memory by cp.async (cp_async.h), two of each, so that the next streams in
// while this one computes, as 16-bit rows padded by 8 values: the 8 rows each ldmatrix
// phase reads fall on distinct banks, and V's fragments come transposed by ldmatrix
// itself. The exponentials are base 2 with the scale and log2(e) folded into one
// multiply-add (exp2f is one special-function instruction with a fix-up, expf several
// more), as FlashAttention-2 does. The kernels take heads whose rows are 16-byte
// aligned, hd a multiple of 8 (mma_rows); others run on the CUDA cores.

template <int HD> struct mma_tile {
    static constexpr int BR = 64, BC = HD <= 64 ? 64 : 32; // queries, keys a tile
    static constexpr int LDK = HD + 8;                     // row stride, 16-bit values
    static constexpr int NS = BC / 8, NO = HD / 8;          // n-tiles of S (keys) and of O (channels)
    static_assert(HD % 16 == 0 && BC % 16 == 0, "tiles of whole m16n8k16 steps");
    static_assert(sizeof(uint16_t) * 4 * (size_t)BC * LDK <= 48 * 1024,
                  "tensor-core forward tiles over 48 KiB of static shared memory");
};

// log2(e): exp(x) = exp2(x log2(e)).
constexpr float LOG2E = 1.44269504088896341f;

// Rows t0 .. t0 + ROWS of one head copied into shared memory as 16-bit rows of ldr
// values by cp.async, zeros past hd and past the sequence; the caller commits and waits.
// Each copy is 16 bytes, 8 channels of a row, so the head's rows must be 16-byte aligned
// and hd a multiple of 8 (mma_rows); consecutive threads copy consecutive pieces of a row.
template <typename T, int HD, int ROWS>
static __device__ __forceinline__ void tile_async(uint16_t *rows_s, int ldr, const T *head, size_t ld, int t0, int seq,
                                                  int hd) {
    constexpr int PER_ROW = HD / 8, N = ROWS * PER_ROW / ATT_THREADS; // copies a row, a thread
    static_assert(N * ATT_THREADS == ROWS * PER_ROW, "a tile of whole copies for every thread");
#pragma unroll
    for (int k = 0; k < N; k++) {
        const int i = threadIdx.x + k * ATT_THREADS, r = i / PER_ROW, d0 = i % PER_ROW * 8, t = t0 + r;
        const bool in = t < seq && d0 < hd;
        cp_async_16(&rows_s[r * ldr + d0], in ? head + (size_t)t * ld + d0 : head, in ? 16 : 0);
    }
}

// Key tile kt's keys and values (rows of LD values) sent into buffer kt % 2 of k_s and
// v_s by cp.async, as one group: the forward's and dQ's loops over key tiles.
template <typename T, int HD, int BC, int LD>
static __device__ __forceinline__ void send_key_tile(uint16_t (&k_s)[2][BC * LD], uint16_t (&v_s)[2][BC * LD], int kt,
                                                     const T *keys, const T *values, size_t ld, int seq, int hd) {
    tile_async<T, HD, BC>(k_s[kt % 2], LD, keys, ld, kt * BC, seq, hd);
    tile_async<T, HD, BC>(v_s[kt % 2], LD, values, ld, kt * BC, seq, hd);
    cp_async_commit();
}

// The A fragments of rows r and r + 8 (t: r's token; zeros past the sequence and hd) of
// one head (rows ld elements apart, hd a multiple of 8), over its HD channels: a[kc] for
// channels kc 16 + ..
template <typename T, int HD>
static __device__ __forceinline__ void row_fragments(uint32_t (&a)[HD / 16][4], const T *head, size_t ld, int t,
                                                     int seq, int hd) {
    const int qd = threadIdx.x % 4;
#pragma unroll
    for (int kc = 0; kc < HD / 16; kc++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int tt = t + 8 * (i & 1), d = kc * 16 + 2 * qd + 8 * (i >> 1);
            a[kc][i] = tt < seq && d < hd ? load_as<uint32_t>(head + (size_t)tt * ld + d) : 0u;
        }
}

// B fragments from a tile in shared memory (rows of ld 16-bit values), one ldmatrix for
// two n-tiles (mma.h): those of n-tiles n0 / 8 and n0 / 8 + 1 (b[0..1], b[2..3]) over the
// 16 k values from k0, of B[k][n] = tile[n][k] (the tile's rows are B's columns).
static __device__ __forceinline__ void b_pair_of_rows(uint32_t (&b)[4], const uint16_t *tile, int ld, int n0, int k0) {
    const int lane = threadIdx.x % 32;
    ldmatrix_x4<false>(b, tile + (n0 + lane % 8 + lane / 16 * 8) * ld + k0 + lane / 8 % 2 * 8);
}

// The same of B[k][n] = tile[k][n]: the tile's rows are B's rows, transposed by ldmatrix.
static __device__ __forceinline__ void b_pair_of_cols(uint32_t (&b)[4], const uint16_t *tile, int ld, int n0, int k0) {
    const int lane = threadIdx.x % 32;
    ldmatrix_x4<true>(b, tile + (k0 + lane % 8 + lane / 8 % 2 * 8) * ld + n0 + lane / 16 * 8);
}

// One 16 x N product of this warp's rows (A: their fragments, row_fragments) with the
// rows of a tile in shared memory (B[k][n] = tile[n][k], rows of ldr): acc[j] for n-tile j.
template <typename T, int HD, int NT>
static __device__ __forceinline__ void rows_by_tile(float (&acc)[NT][4], const uint32_t (&a)[HD / 16][4],
                                                    const uint16_t *tile, int ldr) {
    static_assert(NT % 2 == 0, "n-tiles in pairs, an ldmatrix each");
#pragma unroll
    for (int j = 0; j < NT; j++)
        acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
#pragma unroll
    for (int kc = 0; kc < HD / 16; kc++)
#pragma unroll
        for (int j = 0; j < NT; j += 2) {
            uint32_t b[4];
            b_pair_of_rows(b, tile, ldr, j * 8, kc * 16);
            mma_16816<T>(acc[j], a[kc], {b[0], b[1]});
            mma_16816<T>(acc[j + 1], a[kc], {b[2], b[3]});
        }
}

// acc[j] += X Y for X the 16 x (16 NX) fragments x left as a product's (n-tiles 2c and
// 2c + 1 are A's 16 columns c), rounded to T, and Y a tile's rows (B[k][n] = tile[k][n],
// rows of ld).
template <typename T, int NX, int NO>
static __device__ __forceinline__ void fragments_by_tile(float (&acc)[NO][4], const float (&x)[NX][4],
                                                         const uint16_t *tile, int ld) {
    static_assert(NO % 2 == 0, "n-tiles in pairs, an ldmatrix each");
#pragma unroll
    for (int c = 0; c < NX / 2; c++) {
        const uint32_t a[4] = {pack_pair<T>(x[2 * c][0], x[2 * c][1]), pack_pair<T>(x[2 * c][2], x[2 * c][3]),
                               pack_pair<T>(x[2 * c + 1][0], x[2 * c + 1][1]),
                               pack_pair<T>(x[2 * c + 1][2], x[2 * c + 1][3])};
#pragma unroll
        for (int j = 0; j < NO; j += 2) {
            uint32_t b[4];
            b_pair_of_cols(b, tile, ld, j * 8, c * 16);
            mma_16816<T>(acc[j], a, {b[0], b[1]});
            mma_16816<T>(acc[j + 1], a, {b[2], b[3]});
        }
    }
}

// Rows of this warp (t, t + 8) of a 16 x HD fp32 fragment set into a head's rows of dqkv.
template <typename T, int NO>
static __device__ __forceinline__ void store_rows(T *head, size_t ld, int t, int seq, int hd,
                                                  const float (&acc)[NO][4]) {
    const int qd = threadIdx.x % 4;
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int tt = t + 8 * half;
        if (tt >= seq) continue;
#pragma unroll
        for (int j = 0; j < NO; j++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int d = j * 8 + 2 * qd + e;
                if (d < hd) store_f32(&head[(size_t)tt * ld + d], acc[j][2 * half + e]);
            }
    }
}

// At 64 channels four blocks share an SM: on an H200 the forward took 9-11% less time
// than at three (when a tile in flight took registers and four came to 128 of them).
template <typename T, int HD>
static __global__ void __launch_bounds__(ATT_THREADS, HD <= 64 ? 4 : 1)
    flash_fwd_mma_kernel(T *out, float *lse, const T *qkv, int seq, int NH, int NKV, int hd, int window, float scale) {
    using F = mma_tile<HD>;
    constexpr int BR = F::BR, BC = F::BC, LDK = F::LDK, NS = F::NS, NO = F::NO;
    __shared__ __align__(16) uint16_t k_s[2][BC * LDK], v_s[2][BC * LDK];
    SHARED_FRESH(k_s, v_s);
    const int h = blockIdx.y, b = blockIdx.z, q0 = blockIdx.x * BR, g = h / (NH / NKV);
    const size_t ld = (size_t)(NH + 2 * NKV) * hd;
    const T *x = qkv + (size_t)b * seq * ld;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gr = lane / 4, qd = lane % 4;
    const int r0 = warp * 16 + gr;      // this lane's rows of the tile: r0 and r0 + 8
    const float scale2 = scale * LOG2E; // the scores in the base-2 exponentials
    const int last = (q0 + BR < seq ? q0 + BR : seq) - 1, kt_first = first_key(q0, window) / BC, kt_last = last / BC;
    const T *keys = x + (size_t)(NH + g) * hd, *values = x + (size_t)(NH + NKV + g) * hd;
    send_key_tile<T, HD, BC, LDK>(k_s, v_s, kt_first, keys, values, ld, seq, hd);
    uint32_t aq[HD / 16][4]; // this warp's queries, while the first tile comes in
    row_fragments<T, HD>(aq, x + (size_t)h * hd, ld, q0 + r0, seq, hd);
    float o[NO][4];
#pragma unroll
    for (int j = 0; j < NO; j++)
        o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    for (int kt = kt_first; kt <= kt_last; kt++) {
        const int k0 = kt * BC, buf = kt % 2;
        cp_async_wait<0>(); // this tile's keys and values
        __syncthreads();    // ... every thread's, and every warp is done with the other buffers
        if (kt < kt_last) send_key_tile<T, HD, BC, LDK>(k_s, v_s, kt + 1, keys, values, ld, seq, hd);
        // S = Q K^T: this warp's 16 rows by the tile's BC keys.
        float s[NS][4];
        rows_by_tile<T, HD, NS>(s, aq, k_s[buf], LDK);
        // The online softmax of rows r0 (i = 0, 1) and r0 + 8 (i = 2, 3), m the maximum
        // of the unscaled scores (the scale is positive).
        const bool full = tile_full(q0, BR, k0, BC, seq, window);
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const int t = q0 + r0 + 8 * half;
            float mx = -INFINITY;
#pragma unroll
            for (int j = 0; j < NS; j++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    float &v = s[j][2 * half + e];
                    if (!full && !sees(t, k0 + j * 8 + 2 * qd + e, seq, window)) v = -INFINITY;
                    mx = fmaxf(mx, v);
                }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            // mn stays -inf while the row has seen no key: exp(-inf - -inf) would be NaN.
            const float mn = fmaxf(m[half], mx), mn2 = mn * scale2;
            const float corr = mn == -INFINITY ? 1.0f : exp2f(__fmaf_rn(m[half], scale2, -mn2));
            float sum = 0.0f;
#pragma unroll
            for (int j = 0; j < NS; j++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    float &v = s[j][2 * half + e];
                    v = mn == -INFINITY ? 0.0f : exp2f(__fmaf_rn(v, scale2, -mn2));
                    sum += v;
                }
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            sum += __shfl_xor_sync(0xffffffffu, sum, 2);
            l[half] = l[half] * corr + sum;
            m[half] = mn;
#pragma unroll
            for (int j = 0; j < NO; j++)
                o[j][2 * half] *= corr, o[j][2 * half + 1] *= corr;
        }
        // O += P V, P as S's fragments left it (rounded to T), V's fragments transposed.
        fragments_by_tile<T, NS, NO>(o, s, v_s[buf], LDK);
    }
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int t = q0 + r0 + 8 * half;
        if (t >= seq) continue;
        const float inv = 1.0f / l[half];
        T *dst = out + ((size_t)b * seq + t) * NH * hd + (size_t)h * hd;
#pragma unroll
        for (int j = 0; j < NO; j++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int d = j * 8 + 2 * qd + e;
                if (d < hd) store_f32(&dst[d], o[j][2 * half + e] * inv);
            }
        if (qd == 0) lse[((size_t)b * NH + h) * seq + t] = m[half] * scale + logf(l[half]);
    }
}

// ---- backward ----

// D[b][h][t] = sum_d dout * out over the head's channels, one warp per (b, t, h) row:
// out and dout are (B, T, NH hd), so row r's channels start at r hd.
template <typename T>
static __global__ void __launch_bounds__(ATT_THREADS)
    rowdot_kernel(float *D, const T *out, const T *dout, int seq, int NH, int hd, size_t rows) {
    const int lane = threadIdx.x % 32;
    const size_t step = (size_t)gridDim.x * (ATT_THREADS / 32);
    for (size_t r = (size_t)blockIdx.x * (ATT_THREADS / 32) + threadIdx.x / 32; r < rows; r += step) {
        const T *o = out + r * hd, *dy = dout + r * hd;
        float s = 0.0f;
        for (int d = lane; d < hd; d += 32)
            s += to_f32(dy[d]) * to_f32(o[d]);
        for (int w = 16; w > 0; w >>= 1)
            s += __shfl_xor_sync(0xffffffffu, s, w);
        if (lane == 0) {
            size_t bt = r / NH, b = bt / seq, t = bt % seq, h = r % NH;
            D[(b * NH + h) * seq + t] = s;
        }
    }
}

template <int HD> struct bwd_tile {
    static constexpr int BR = ATT_BWD_BR(HD), BC = ATT_BWD_BC(HD), LDS = HD + 1, LDP = BC + 1;
    static constexpr int TPR = ATT_THREADS / BR, NQ = HD / TPR; // dQ: threads per query row, channels each
    static constexpr int TPK = ATT_THREADS / BC, NK = HD / TPK; // dK, dV: threads per key row, channels each
    static_assert(TPR * BR == ATT_THREADS && NQ * TPR == HD && TPK * BC == ATT_THREADS && NK * TPK == HD,
                  "rows do not map onto the block");
};

// Both backward kernels' shared memory: a query tile (its Q, dO, lse and D), a key tile
// (K, V), and the tile's P (the dK/dV kernel's) and dS.
template <int HD> struct bwd_smem {
    using B = bwd_tile<HD>;
    float q[B::BR * B::LDS], dout[B::BR * B::LDS], k[B::BC * B::LDS], v[B::BC * B::LDS];
    float p[B::BR * B::LDP], ds[B::BR * B::LDP], lse[B::BR], D[B::BR];
};
static_assert(sizeof(bwd_smem<32>) <= 48 * 1024 && sizeof(bwd_smem<64>) <= 48 * 1024 &&
                  sizeof(bwd_smem<128>) <= 48 * 1024 && sizeof(bwd_smem<256>) <= 48 * 1024,
              "backward tiles over 48 KiB of static shared memory");

// The query tile at q0 of head h: Q, dO, and lse and D of its rows (0 past the sequence,
// where nothing is seen).
template <typename T, int HD>
static __device__ __forceinline__ void load_queries(bwd_smem<HD> &sm, const T *x, const T *dy, const float *lse,
                                                    const float *D, size_t ld, int C, int h, int q0, int seq, int hd) {
    using B = bwd_tile<HD>;
    load_rows<T, HD, B::BR, B::LDS>(sm.q, x + (size_t)h * hd, ld, q0, seq, hd);
    load_rows<T, HD, B::BR, B::LDS>(sm.dout, dy + (size_t)h * hd, (size_t)C, q0, seq, hd);
    for (int r = threadIdx.x; r < B::BR; r += ATT_THREADS) {
        bool in = q0 + r < seq;
        sm.lse[r] = in ? lse[q0 + r] : 0.0f;
        sm.D[r] = in ? D[q0 + r] : 0.0f;
    }
}

// The tile's P = exp(scale q.k - lse) where the query sees the key, 0 elsewhere (into
// sm.p when want_p), and dS = P (dP - D) scale with dP = dO . v (into sm.ds): the forward's
// P, and the scores' gradient with the softmax's scale folded in.
template <int HD>
static __device__ __forceinline__ void probs_dscores(bwd_smem<HD> &sm, bool want_p, int q0, int k0, int seq, int window,
                                                     int hd, float scale) {
    using B = bwd_tile<HD>;
    using M = score_map<B::BR, B::BC>;
    const int ty = threadIdx.x / M::TX, tx = threadIdx.x % M::TX;
    if (ty >= M::TY) return;
    float s[M::SR][M::SC], dp[M::SR][M::SC];
    tile_dots<M::SR, M::SC, M::TY, M::TX, B::LDS>(s, sm.q, sm.k, hd, ty, tx);
    tile_dots<M::SR, M::SC, M::TY, M::TX, B::LDS>(dp, sm.dout, sm.v, hd, ty, tx);
#pragma unroll
    for (int i = 0; i < M::SR; i++)
#pragma unroll
        for (int j = 0; j < M::SC; j++) {
            int r = ty + M::TY * i, c = tx + M::TX * j;
            float p = sees(q0 + r, k0 + c, seq, window) ? expf(s[i][j] * scale - sm.lse[r]) : 0.0f;
            if (want_p) sm.p[r * B::LDP + c] = p;
            sm.ds[r * B::LDP + c] = p * (dp[i][j] - sm.D[r]) * scale;
        }
}

// dK and dV of the key tile at k0 of kv head g, summed over the group's query heads in
// order and, for each, over the query tiles that see the tile. Thread (key, lane) keeps
// channels lane + TPK i of its key's dK and dV.
template <typename T, int HD>
static __global__ void __launch_bounds__(ATT_THREADS)
    flash_bwd_dkv_kernel(T *dqkv, const T *qkv, const T *dout, const float *lse, const float *D, int seq, int NH,
                         int NKV, int hd, int window, float scale) {
    using B = bwd_tile<HD>;
    constexpr int BR = B::BR, BC = B::BC, LDS = B::LDS, LDP = B::LDP, TPK = B::TPK, NK = B::NK;
    __shared__ bwd_smem<HD> sm;
    SHARED_FRESH(sm);
    const int g = blockIdx.y, b = blockIdx.z, k0 = blockIdx.x * BC, G = NH / NKV, C = NH * hd;
    const size_t ld = (size_t)(NH + 2 * NKV) * hd;
    const T *x = qkv + (size_t)b * seq * ld, *dy = dout + (size_t)b * seq * C;
    const int key = threadIdx.x / TPK, lane = threadIdx.x % TPK;
    load_rows<T, HD, BC, LDS>(sm.k, x + (size_t)(NH + g) * hd, ld, k0, seq, hd);
    load_rows<T, HD, BC, LDS>(sm.v, x + (size_t)(NH + NKV + g) * hd, ld, k0, seq, hd);
    float dk[NK], dv[NK];
#pragma unroll
    for (int i = 0; i < NK; i++)
        dk[i] = dv[i] = 0.0f;
    // The last query that sees a key of the tile: the window's reach past its last key.
    const int klast = (k0 + BC < seq ? k0 + BC : seq) - 1;
    const int qlast = window > 0 && klast + window - 1 < seq - 1 ? klast + window - 1 : seq - 1;
    for (int h = g * G; h < (g + 1) * G; h++) {
        const size_t rows = ((size_t)b * NH + h) * seq;
        for (int qt = k0 / BR; qt <= qlast / BR; qt++) {
            const int q0 = qt * BR;
            __syncthreads(); // the previous query tile's rows, P and dS are read
            load_queries<T, HD>(sm, x, dy, lse + rows, D + rows, ld, C, h, q0, seq, hd);
            __syncthreads();
            probs_dscores<HD>(sm, true, q0, k0, seq, window, hd, scale);
            __syncthreads();
            for (int r = 0; r < BR; r++) {
                const float p = sm.p[r * LDP + key], ds = sm.ds[r * LDP + key];
                const float *dyr = sm.dout + r * LDS + lane, *qr = sm.q + r * LDS + lane;
#pragma unroll
                for (int i = 0; i < NK; i++) {
                    dv[i] += p * dyr[TPK * i];
                    dk[i] += ds * qr[TPK * i];
                }
            }
        }
    }
    const int k = k0 + key;
    if (k < seq) {
        T *dkr = dqkv + ((size_t)b * seq + k) * ld + (size_t)(NH + g) * hd, *dvr = dkr + (size_t)NKV * hd;
#pragma unroll
        for (int i = 0; i < NK; i++) {
            int d = lane + TPK * i;
            if (d < hd) {
                store_f32(&dkr[d], dk[i]);
                store_f32(&dvr[d], dv[i]);
            }
        }
    }
}

// dQ of the query tile at q0 of head h, summed over the key tiles it sees in order.
// Thread (row, lane) keeps channels lane + TPR i of its row's dQ.
template <typename T, int HD>
static __global__ void __launch_bounds__(ATT_THREADS)
    flash_bwd_dq_kernel(T *dqkv, const T *qkv, const T *dout, const float *lse, const float *D, int seq, int NH,
                        int NKV, int hd, int window, float scale) {
    using B = bwd_tile<HD>;
    constexpr int BR = B::BR, BC = B::BC, LDS = B::LDS, LDP = B::LDP, TPR = B::TPR, NQ = B::NQ;
    __shared__ bwd_smem<HD> sm;
    SHARED_FRESH(sm);
    const int h = blockIdx.y, b = blockIdx.z, q0 = blockIdx.x * BR, g = h / (NH / NKV), C = NH * hd;
    const size_t ld = (size_t)(NH + 2 * NKV) * hd, rows = ((size_t)b * NH + h) * seq;
    const T *x = qkv + (size_t)b * seq * ld, *dy = dout + (size_t)b * seq * C;
    const int row = threadIdx.x / TPR, lane = threadIdx.x % TPR;
    load_queries<T, HD>(sm, x, dy, lse + rows, D + rows, ld, C, h, q0, seq, hd);
    float dq[NQ];
#pragma unroll
    for (int i = 0; i < NQ; i++)
        dq[i] = 0.0f;
    const int last = (q0 + BR < seq ? q0 + BR : seq) - 1;
    for (int kt = first_key(q0, window) / BC; kt <= last / BC; kt++) {
        const int k0 = kt * BC;
        __syncthreads(); // the previous key tile and its dS are read
        load_rows<T, HD, BC, LDS>(sm.k, x + (size_t)(NH + g) * hd, ld, k0, seq, hd);
        load_rows<T, HD, BC, LDS>(sm.v, x + (size_t)(NH + NKV + g) * hd, ld, k0, seq, hd);
        __syncthreads();
        probs_dscores<HD>(sm, false, q0, k0, seq, window, hd, scale);
        __syncthreads();
        const float *dsr = sm.ds + row * LDP;
        for (int c = 0; c < BC; c++) {
            const float ds = dsr[c], *kr = sm.k + c * LDS + lane;
#pragma unroll
            for (int i = 0; i < NQ; i++)
                dq[i] += ds * kr[TPR * i];
        }
    }
    const int t = q0 + row;
    if (t < seq) {
        T *o = dqkv + ((size_t)b * seq + t) * ld + (size_t)h * hd;
#pragma unroll
        for (int i = 0; i < NQ; i++) {
            int d = lane + TPR * i;
            if (d < hd) store_f32(&o[d], dq[i]);
        }
    }
}

// ---- backward on tensor cores (bf16, fp16; head sizes up to 128) ----
// The same two kernels with every product an m16n8k16 tile: each warp owns 16 rows (keys
// in the dK/dV kernel, queries in the dQ kernel) and takes their A fragments straight
// from memory, and the tile it pairs them with comes into shared memory by cp.async, two
// of each so that the next streams in while this one computes, as rows that ldmatrix
// transposes for the product that sums over the tile. P and dS leave the score
// fragments as A fragments rounded to the storage type, and P is a base-2 exponential,
// as in the forward.

template <int HD> struct mma_bwd_tile {
    static constexpr int KEYS = 64, QUERIES = HD <= 64 ? 64 : 32; // dK/dV: a block's keys, a query tile
    static constexpr int BR = 64, BC = HD <= 64 ? 64 : 32;        // dQ: a block's queries, a key tile
    static constexpr int LDR = HD + 8;
    static_assert(sizeof(uint16_t) * 4 * (size_t)QUERIES * LDR + 4 * QUERIES * sizeof(float) <= 48 * 1024 &&
                      sizeof(uint16_t) * 4 * (size_t)BC * LDR <= 48 * 1024,
                  "tensor-core backward tiles over 48 KiB of static shared memory");
};

// dK and dV of the 64 keys at k0 of kv head g, 16 a warp: S^T = K Q^T and dP^T = V dO^T
// per query tile, then dV += P^T dO and dK += dS^T Q, over the group's query heads in
// order and each head's query tiles that see the keys.
template <typename T, int HD>
static __global__ void __launch_bounds__(ATT_THREADS)
    flash_bwd_dkv_mma_kernel(T *dqkv, const T *qkv, const T *dout, const float *lse, const float *D, int seq, int NH,
                             int NKV, int hd, int window, float scale) {
    using M = mma_bwd_tile<HD>;
    constexpr int KEYS = M::KEYS, QN = M::QUERIES, LDR = M::LDR, NQ = QN / 8, NO = HD / 8;
    __shared__ __align__(16) uint16_t q_s[2][QN * LDR], do_s[2][QN * LDR];
    __shared__ float lse_s[2][QN], D_s[2][QN]; // lse in base 2: lse log2(e)
    SHARED_FRESH(q_s, do_s, lse_s, D_s);
    const float scale2 = scale * LOG2E;
    const int g = blockIdx.y, b = blockIdx.z, k0 = blockIdx.x * KEYS, G = NH / NKV, C = NH * hd;
    const size_t ld = (size_t)(NH + 2 * NKV) * hd;
    const T *x = qkv + (size_t)b * seq * ld, *dy = dout + (size_t)b * seq * C;
    const int gr = threadIdx.x % 32 / 4, qd = threadIdx.x % 4, kr = k0 + threadIdx.x / 32 * 16 + gr;
    const int klast = (k0 + KEYS < seq ? k0 + KEYS : seq) - 1;
    const int qlast = window > 0 && klast + window - 1 < seq - 1 ? klast + window - 1 : seq - 1;
    // The (query head, query tile) pairs in order: query tiles k0 / QN .. qlast / QN of
    // heads g G .. (g + 1) G. Pair (h, qt) goes to buffer buf: Q and dO by cp.async; lse
    // and D (a float a row, their rows not 16-byte aligned) through registers, stored
    // once the other buffer's products are done.
    const int qt_first = k0 / QN, qt_last = qlast / QN;
    float lse_n = 0.0f, D_n = 0.0f; // thread r < QN: row r's
    auto issue = [&](int h, int qt, int buf) {
        const int q0 = qt * QN, r = threadIdx.x;
        tile_async<T, HD, QN>(q_s[buf], LDR, x + (size_t)h * hd, ld, q0, seq, hd);
        tile_async<T, HD, QN>(do_s[buf], LDR, dy + (size_t)h * hd, (size_t)C, q0, seq, hd);
        cp_async_commit();
        const size_t rows = ((size_t)b * NH + h) * seq;
        const bool in = r < QN && q0 + r < seq;
        lse_n = in ? lse[rows + q0 + r] * LOG2E : 0.0f, D_n = in ? D[rows + q0 + r] : 0.0f;
    };
    auto put_stats = [&](int buf) {
        if (threadIdx.x < QN) lse_s[buf][threadIdx.x] = lse_n, D_s[buf][threadIdx.x] = D_n;
    };
    issue(g * G, qt_first, 0);
    put_stats(0);
    float dk[NO][4], dv[NO][4];
#pragma unroll
    for (int j = 0; j < NO; j++)
#pragma unroll
        for (int i = 0; i < 4; i++)
            dk[j][i] = dv[j][i] = 0.0f;
    uint32_t ak[HD / 16][4], av[HD / 16][4]; // this warp's keys and values, fixed over the loops
    row_fragments<T, HD>(ak, x + (size_t)(NH + g) * hd, ld, kr, seq, hd);
    row_fragments<T, HD>(av, x + (size_t)(NH + NKV + g) * hd, ld, kr, seq, hd);
    for (int h = g * G, qt = qt_first, buf = 0; h < (g + 1) * G; buf = 1 - buf) {
        const int q0 = qt * QN;
        cp_async_wait<0>(); // this pair's tiles
        __syncthreads();    // ... every thread's, and every warp is done with the other buffer
        if (++qt > qt_last) h++, qt = qt_first;
        const bool next = h < (g + 1) * G;
        if (next) issue(h, qt, 1 - buf);
        float p[NQ][4], ds[NQ][4];
        rows_by_tile<T, HD, NQ>(p, ak, q_s[buf], LDR);
        rows_by_tile<T, HD, NQ>(ds, av, do_s[buf], LDR);
        const bool full = tile_full(q0, QN, k0, KEYS, seq, window);
#pragma unroll
        for (int j = 0; j < NQ; j++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int key = kr + 8 * (i >> 1), c = j * 8 + 2 * qd + (i & 1);
                const float pr =
                    full || sees(q0 + c, key, seq, window) ? exp2f(__fmaf_rn(p[j][i], scale2, -lse_s[buf][c])) : 0.0f;
                p[j][i] = pr;
                ds[j][i] = pr * (ds[j][i] - D_s[buf][c]) * scale;
            }
        fragments_by_tile<T, NQ, NO>(dv, p, do_s[buf], LDR);
        fragments_by_tile<T, NQ, NO>(dk, ds, q_s[buf], LDR);
        if (next) put_stats(1 - buf);
    }
    store_rows<T, NO>(dqkv + (size_t)b * seq * ld + (size_t)(NH + g) * hd, ld, kr, seq, hd, dk);
    store_rows<T, NO>(dqkv + (size_t)b * seq * ld + (size_t)(NH + NKV + g) * hd, ld, kr, seq, hd, dv);
}

// dQ of the 64 queries at q0 of head h, 16 a warp: S = Q K^T and dP = dO V^T per key tile,
// then dQ += dS K, over the key tiles the queries see, in order. At 64 channels three
// blocks share an SM: on an H200 that was 3-4% faster than two with a tile in flight in
// registers (now cp.async holds it, in shared memory).
template <typename T, int HD>
static __global__ void __launch_bounds__(ATT_THREADS, HD <= 64 ? 3 : 1)
    flash_bwd_dq_mma_kernel(T *dqkv, const T *qkv, const T *dout, const float *lse, const float *D, int seq, int NH,
                            int NKV, int hd, int window, float scale) {
    using M = mma_bwd_tile<HD>;
    constexpr int BR = M::BR, BC = M::BC, LDR = M::LDR, NS = BC / 8, NO = HD / 8;
    __shared__ __align__(16) uint16_t k_s[2][BC * LDR], v_s[2][BC * LDR];
    SHARED_FRESH(k_s, v_s);
    const int h = blockIdx.y, b = blockIdx.z, q0 = blockIdx.x * BR, g = h / (NH / NKV), C = NH * hd;
    const size_t ld = (size_t)(NH + 2 * NKV) * hd, rows = ((size_t)b * NH + h) * seq;
    const T *x = qkv + (size_t)b * seq * ld, *dy = dout + (size_t)b * seq * C;
    const int gr = threadIdx.x % 32 / 4, qd = threadIdx.x % 4, tr = q0 + threadIdx.x / 32 * 16 + gr;
    const int last = (q0 + BR < seq ? q0 + BR : seq) - 1, kt_first = first_key(q0, window) / BC, kt_last = last / BC;
    const T *keys = x + (size_t)(NH + g) * hd, *values = x + (size_t)(NH + NKV + g) * hd;
    send_key_tile<T, HD, BC, LDR>(k_s, v_s, kt_first, keys, values, ld, seq, hd);
    const float scale2 = scale * LOG2E;
    float lse_r[2], D_r[2]; // lse in base 2: lse log2(e)
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int t = tr + 8 * half;
        lse_r[half] = t < seq ? lse[rows + t] * LOG2E : 0.0f;
        D_r[half] = t < seq ? D[rows + t] : 0.0f;
    }
    float dq[NO][4];
#pragma unroll
    for (int j = 0; j < NO; j++)
        dq[j][0] = dq[j][1] = dq[j][2] = dq[j][3] = 0.0f;
    uint32_t aq[HD / 16][4], ado[HD / 16][4]; // this warp's queries and output gradients
    row_fragments<T, HD>(aq, x + (size_t)h * hd, ld, tr, seq, hd);
    row_fragments<T, HD>(ado, dy + (size_t)h * hd, (size_t)C, tr, seq, hd);
    for (int kt = kt_first; kt <= kt_last; kt++) {
        const int k0 = kt * BC, buf = kt % 2;
        cp_async_wait<0>(); // this tile's keys and values
        __syncthreads();    // ... every thread's, and every warp is done with the other buffers
        if (kt < kt_last) send_key_tile<T, HD, BC, LDR>(k_s, v_s, kt + 1, keys, values, ld, seq, hd);
        float s[NS][4], ds[NS][4];
        rows_by_tile<T, HD, NS>(s, aq, k_s[buf], LDR);
        rows_by_tile<T, HD, NS>(ds, ado, v_s[buf], LDR);
        const bool full = tile_full(q0, BR, k0, BC, seq, window);
#pragma unroll
        for (int j = 0; j < NS; j++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int half = i >> 1, key = k0 + j * 8 + 2 * qd + (i & 1);
                const float pr = full || sees(tr + 8 * half, key, seq, window)
                                     ? exp2f(__fmaf_rn(s[j][i], scale2, -lse_r[half]))
                                     : 0.0f;
                ds[j][i] = pr * (ds[j][i] - D_r[half]) * scale;
            }
        fragments_by_tile<T, NS, NO>(dq, ds, k_s[buf], LDR);
    }
    store_rows<T, NO>(dqkv + (size_t)b * seq * ld + (size_t)h * hd, ld, tr, seq, hd, dq);
}

// ---- launches ----

static unsigned tiles(int n, int per) { return (unsigned)((n + per - 1) / per); }

template <typename T, int HD> static zinf_status fwd_hd(cudaStream_t st, const zinf_attention_args *a, float scale) {
    dim3 grid(tiles(a->T, ATT_FWD_BR(HD)), (unsigned)a->NH, (unsigned)a->B);
    flash_fwd_kernel<T, HD> CUDA_LAUNCH(grid, ATT_THREADS, 0, st)((T *)a->out, a->lse, (const T *)a->qkv, a->T, a->NH,
                                                                  a->NKV, a->hd, a->window, scale);
    ZINF_CUDA_LAUNCHED("flash_fwd_kernel");
    return ZINF_OK;
}

template <typename T, int HD> static zinf_status bwd_hd(cudaStream_t st, const zinf_attention_args *a, float scale) {
    const float *D = (const float *)a->ws;
    dim3 gkv(tiles(a->T, ATT_BWD_BC(HD)), (unsigned)a->NKV, (unsigned)a->B);
    flash_bwd_dkv_kernel<T, HD> CUDA_LAUNCH(gkv, ATT_THREADS, 0, st)(
        (T *)a->dqkv, (const T *)a->qkv, (const T *)a->dout, a->lse, D, a->T, a->NH, a->NKV, a->hd, a->window, scale);
    ZINF_CUDA_LAUNCHED("flash_bwd_dkv_kernel");
    dim3 gq(tiles(a->T, ATT_BWD_BR(HD)), (unsigned)a->NH, (unsigned)a->B);
    flash_bwd_dq_kernel<T, HD> CUDA_LAUNCH(gq, ATT_THREADS, 0, st)(
        (T *)a->dqkv, (const T *)a->qkv, (const T *)a->dout, a->lse, D, a->T, a->NH, a->NKV, a->hd, a->window, scale);
    ZINF_CUDA_LAUNCHED("flash_bwd_dq_kernel");
    return ZINF_OK;
}

template <typename T, int HD> static zinf_status bwd_mma_hd(cudaStream_t st, const zinf_attention_args *a, float scale) {
    using M = mma_bwd_tile<HD>;
    const float *D = (const float *)a->ws;
    dim3 gkv(tiles(a->T, M::KEYS), (unsigned)a->NKV, (unsigned)a->B);
    flash_bwd_dkv_mma_kernel<T, HD> CUDA_LAUNCH(gkv, ATT_THREADS, 0, st)(
        (T *)a->dqkv, (const T *)a->qkv, (const T *)a->dout, a->lse, D, a->T, a->NH, a->NKV, a->hd, a->window, scale);
    ZINF_CUDA_LAUNCHED("flash_bwd_dkv_mma_kernel");
    dim3 gq(tiles(a->T, M::BR), (unsigned)a->NH, (unsigned)a->B);
    flash_bwd_dq_mma_kernel<T, HD> CUDA_LAUNCH(gq, ATT_THREADS, 0, st)(
        (T *)a->dqkv, (const T *)a->qkv, (const T *)a->dout, a->lse, D, a->T, a->NH, a->NKV, a->hd, a->window, scale);
    ZINF_CUDA_LAUNCHED("flash_bwd_dq_mma_kernel");
    return ZINF_OK;
}

// The front end refuses these shapes first (gpu/ops.c); checked again here so that no
// launch is ever made with a grid the device would not take.
static zinf_status unsupported(const zinf_attention_args *a, const char *op) {
    if (a->hd > ATT_MAX_HD)
        return zinf_fail(ZINF_ERR_UNSUPPORTED, "%s: head size %d is over the CUDA kernels' %d", op, a->hd, ATT_MAX_HD);
    if (a->B > 65535 || a->NH > 65535)
        return zinf_fail(ZINF_ERR_UNSUPPORTED, "%s: B %d or NH %d is over the CUDA grid's 65535", op, a->B, a->NH);
    return ZINF_OK;
}

template <typename T, int HD> static zinf_status fwd_mma_hd(cudaStream_t st, const zinf_attention_args *a, float scale) {
    dim3 grid(tiles(a->T, mma_tile<HD>::BR), (unsigned)a->NH, (unsigned)a->B);
    flash_fwd_mma_kernel<T, HD> CUDA_LAUNCH(grid, ATT_THREADS, 0, st)((T *)a->out, a->lse, (const T *)a->qkv, a->T,
                                                                      a->NH, a->NKV, a->hd, a->window, scale);
    ZINF_CUDA_LAUNCHED("flash_fwd_mma_kernel");
    return ZINF_OK;
}

// Whether the tensor-core kernels take these heads: rows they copy 16 bytes at a time
// (qkv, and dout in the backward, 16-byte aligned; hd a multiple of 8, as every model's).
static bool mma_rows(const zinf_attention_args *a, bool backward) {
    return a->hd % 8 == 0 && (uintptr_t)a->qkv % 16 == 0 && (!backward || (uintptr_t)a->dout % 16 == 0);
}

template <typename T> static zinf_status attention_fwd_t(cudaStream_t st, const zinf_attention_args *a) {
    float scale = 1.0f / sqrtf((float)a->hd);
    // 16-bit storage with heads of 33 to 128 channels: on tensor cores.
    if constexpr (sizeof(T) == 2) {
        if (mma_rows(a, false)) {
            if (ATT_HD_PAD(a->hd) == 64) return fwd_mma_hd<T, 64>(st, a, scale);
            if (ATT_HD_PAD(a->hd) == 128) return fwd_mma_hd<T, 128>(st, a, scale);
        }
    }
    switch (ATT_HD_PAD(a->hd)) {
    case 32: return fwd_hd<T, 32>(st, a, scale);
    case 64: return fwd_hd<T, 64>(st, a, scale);
    case 128: return fwd_hd<T, 128>(st, a, scale);
    default: return fwd_hd<T, 256>(st, a, scale);
    }
}

template <typename T> static zinf_status attention_bwd_t(cudaStream_t st, const zinf_attention_args *a) {
    float scale = 1.0f / sqrtf((float)a->hd);
    size_t rows = (size_t)a->B * a->T * a->NH;
    size_t blocks = (rows + ATT_THREADS / 32 - 1) / (ATT_THREADS / 32);
    rowdot_kernel<T> CUDA_LAUNCH((unsigned)(blocks < 65536 ? blocks : 65536), ATT_THREADS, 0,
                                 st)((float *)a->ws, (const T *)a->out, (const T *)a->dout, a->T, a->NH, a->hd, rows);
    ZINF_CUDA_LAUNCHED("rowdot_kernel");
    if constexpr (sizeof(T) == 2) { // as the forward: 16-bit heads of 33 to 128 channels on tensor cores
        if (mma_rows(a, true)) {
            if (ATT_HD_PAD(a->hd) == 64) return bwd_mma_hd<T, 64>(st, a, scale);
            if (ATT_HD_PAD(a->hd) == 128) return bwd_mma_hd<T, 128>(st, a, scale);
        }
    }
    switch (ATT_HD_PAD(a->hd)) {
    case 32: return bwd_hd<T, 32>(st, a, scale);
    case 64: return bwd_hd<T, 64>(st, a, scale);
    case 128: return bwd_hd<T, 128>(st, a, scale);
    default: return bwd_hd<T, 256>(st, a, scale);
    }
}

zinf_status cuda_attention_fwd(cudaStream_t st, const zinf_attention_args *a) {
    if (a->B <= 0 || a->T <= 0 || a->NH <= 0 || a->NKV <= 0 || a->hd <= 0) return ZINF_OK;
    ZINF_CHECK(unsupported(a, "attention"));
    CUDA_DT_SWITCH(a->dt, "attention_fwd", attention_fwd_t, st, a);
}

zinf_status cuda_attention_bwd(cudaStream_t st, const zinf_attention_args *a) {
    if (a->B <= 0 || a->T <= 0 || a->NH <= 0 || a->NKV <= 0 || a->hd <= 0) return ZINF_OK;
    ZINF_CHECK(unsupported(a, "attention backward"));
    CUDA_DT_SWITCH(a->dt, "attention_bwd", attention_bwd_t, st, a);
}
