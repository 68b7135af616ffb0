// The CUDA backend's kernels besides the matrix product and the attention: the same
// arithmetic as the host backend (gpu/host/ops.c, after llm.c's train_gpt2.c) on
// storage of any type, loaded to fp32 and stored rounded to nearest even. Every
// reduction runs in an order fixed by the sizes alone (no float atomics), so results
// repeat bit for bit. The optimizer is cpu_adam's element functions (cpu_adam/
// internal.h) with every operation spelled as its rounding intrinsic.
#include "cuda_backend.h"

#define GELU_SCALING_FACTOR 0.7978845608028654f // sqrt(2 / pi)

// Column sums (bias and norm weight gradients) over the whole card: block (x, y) takes
// COL_LANES 16-byte chunks of columns (row_chunks) of the rows in chunk y, thread (x, y')
// summing rows y', y' + COL_Y, ... of the chunk in order, then one thread a column the
// COL_Y partials in order, into the chunk's row of fp32 partials; one more kernel adds
// each column's chunks into the gradient (col_finish_kernel). The chunks are set by the sizes
// alone, so results repeat bit for bit. With a block per column tile alone (C / 32
// blocks, 24 for GPT-2's 768) a fifth of an H100's SMs summed 8192 rows; with one value
// a thread a row, the sums ran at a third of its bandwidth. The partials live in the
// stream's cuBLASLt workspace, which no other kernel on the stream uses meanwhile.
enum { COL_LANES = 8, COL_Y = 32, COL_CHUNK_ROWS = 256 };

// Chunks of about COL_CHUNK_ROWS rows, as many as nout rows of cols partials fit in the
// workspace.
static unsigned col_chunks(size_t rows, int cols, int nout) {
    size_t want = (rows + COL_CHUNK_ROWS - 1) / COL_CHUNK_ROWS;
    size_t fit = CUDA_LT_WORKSPACE / ((size_t)cols * nout * sizeof(float));
    size_t n = want < fit ? want : fit; // fit >= 1: col_sums refuses wider rows
    return (unsigned)(n < 1 ? 1 : n > 65535 ? 65535 : n);
}

// term(r, c, vec, s) adds row r's terms of column chunk c (row_chunks<T>: VN columns,
// zeros past cols) into s[0 .. NOUT). partial: NOUT x chunks x cols.
template <typename T, int NOUT, typename Term>
static __global__ void __launch_bounds__(COL_LANES *COL_Y)
    col_partial_kernel(float *partial, Term term, size_t rows, int cols, bool vec) {
    constexpr int VN = row_chunks<T>::VN, W = COL_LANES * VN; // a block's columns
    __shared__ float part[NOUT][COL_Y][W];
    SHARED_FRESH(part);
    const int c = blockIdx.x * COL_LANES + threadIdx.x;
    const size_t chunk_rows = (rows + gridDim.y - 1) / gridDim.y, r0 = blockIdx.y * chunk_rows;
    const size_t r1 = r0 + chunk_rows < rows ? r0 + chunk_rows : rows;
    float s[NOUT][VN];
#pragma unroll
    for (int o = 0; o < NOUT; o++)
#pragma unroll
        for (int k = 0; k < VN; k++)
            s[o][k] = 0.0f;
    if (c < row_chunks<T>::count(cols))
        for (size_t r = r0 + threadIdx.y; r < r1; r += COL_Y)
            term(r, c, vec, s);
#pragma unroll
    for (int o = 0; o < NOUT; o++)
#pragma unroll
        for (int k = 0; k < VN; k++)
            part[o][threadIdx.y][threadIdx.x * VN + k] = s[o][k];
    __syncthreads();
    const int t = threadIdx.y * COL_LANES + threadIdx.x, o = t / W, jj = t % W, j = blockIdx.x * W + jj;
    if (o < NOUT && j < cols) {
        float sum = part[o][0][jj];
        for (int y = 1; y < COL_Y; y++)
            sum += part[o][y][jj];
        partial[((size_t)o * gridDim.y + blockIdx.y) * cols + j] = sum;
    }
}

// out_o[j] += the chunks' partials of column j (with first, = them: out not read).
// Block x takes 32 columns; thread (x, y) sums chunks y, y + FINISH_Y, ... in order,
// then thread (x, 0) the FINISH_Y sums in order: an order set by the chunk count alone,
// where a thread a column added every chunk one after another from L2 (the RMSNorm
// backward, 256 chunks of partials: 77 us a call at Llama-3.2-1B's 8 x 1024 tokens on
// an H200, 73 after, 2026-11-27).
enum { FINISH_Y = 8 };

template <typename T, int NOUT>
static __global__ void __launch_bounds__(32 * FINISH_Y)
    col_finish_kernel(T *out0, T *out1, const float *partial, int chunks, int cols, bool first) {
    __shared__ float part[NOUT][FINISH_Y][32];
    SHARED_FRESH(part);
    const int j = blockIdx.x * 32 + threadIdx.x;
#pragma unroll
    for (int o = 0; o < NOUT; o++) {
        float t = 0.0f;
        if (j < cols) {
            const float *p = partial + (size_t)o * chunks * cols + j;
            for (int c = threadIdx.y; c < chunks; c += FINISH_Y)
                t += p[(size_t)c * cols];
        }
        part[o][threadIdx.y][threadIdx.x] = t;
    }
    __syncthreads();
    if (threadIdx.y != 0 || j >= cols) return;
#pragma unroll
    for (int o = 0; o < NOUT; o++) {
        float t = part[o][0][threadIdx.x];
        for (int y = 1; y < FINISH_Y && y < chunks; y++)
            t += part[o][y][threadIdx.x];
        T *out = o == 0 ? out0 : out1;
        store_f32(&out[j], first ? t : to_f32(out[j]) + t);
    }
}

template <typename T, int NOUT>
static zinf_status col_finish(cudaStream_t st, T *out0, T *out1, const float *partial, int chunks, int cols,
                              bool first) {
    col_finish_kernel<T, NOUT> CUDA_LAUNCH((unsigned)((cols + 31) / 32), dim3(32, FINISH_Y), 0,
                                           st)(out0, out1, partial, chunks, cols, first);
    ZINF_CUDA_LAUNCHED("col_finish_kernel");
    return ZINF_OK;
}

// vec: the term's rows go in whole 16-byte chunks (rows_in_chunks over its arrays).
template <typename T, int NOUT, typename Term>
static zinf_status col_sums(cuda_stream *cs, T *out0, T *out1, Term term, size_t rows, int cols, bool vec, bool first) {
    static_assert(NOUT * COL_LANES * row_chunks<T>::VN <= COL_LANES * COL_Y, "a thread a column of partials");
    if ((size_t)cols * NOUT * sizeof(float) > CUDA_LT_WORKSPACE)
        return zinf_fail(ZINF_ERR_UNSUPPORTED, "column sums: %d columns are over the workspace's %zu bytes", cols,
                         CUDA_LT_WORKSPACE);
    const unsigned chunks = col_chunks(rows, cols, NOUT);
    const int W = COL_LANES * row_chunks<T>::VN;
    float *partial = (float *)cs->d_lt_ws;
    col_partial_kernel<T, NOUT, Term> CUDA_LAUNCH(dim3((unsigned)((cols + W - 1) / W), chunks), dim3(COL_LANES, COL_Y),
                                                  0, cs->st)(partial, term, rows, cols, vec);
    ZINF_CUDA_LAUNCHED("col_partial_kernel");
    return col_finish<T, NOUT>(cs->st, out0, out1, partial, (int)chunks, cols, first);
}

// ---- bias gradient ----

template <typename T> struct bias_term {
    const T *dout;
    int cols;
    static constexpr int VN = row_chunks<T>::VN;
    __device__ void operator()(size_t r, int c, bool vec, float (&s)[1][VN]) const {
        float d[VN];
        row_chunks<T>::load(d, dout + r * cols, c, cols, vec);
#pragma unroll
        for (int k = 0; k < VN; k++)
            s[0][k] += d[k];
    }
};

template <typename T> static zinf_status bias_grad_t(cuda_stream *cs, const op_elementwise *e) {
    const bool vec = rows_in_chunks<T>(e->cols, e->a, e->a, e->a, e->a);
    return col_sums<T, 1>(cs, (T *)e->out, (T *)nullptr, bias_term<T>{(const T *)e->a, e->cols}, e->n, e->cols, vec,
                          e->first);
}

zinf_status cuda_bias_grad(cuda_stream *cs, zinf_dtype dt, const op_elementwise *e) {
    if (e->n == 0 || e->cols <= 0) return ZINF_OK;
    CUDA_DT_SWITCH(dt, "bias_grad", bias_grad_t, cs, e);
}

// ---- the norms' backward in one pass ----
// LayerNorm's (LN) and RMSNorm's, where a row's P warps hold at most NORM_LANE_CHUNKS of
// its 16-byte chunks a lane (C up to 2048 in 16 bits, 1024 in fp32: Llama-3.2-1B's
// width) and rows go in whole chunks: block b takes rows [b, b + 1) * NORM_BWD_ROWS,
// ROW_WARPS / P at a time. Warp h of a row's P takes chunk groups h, h + P, ... of 32
// chunks. A lane asks for all its chunks of x, dout and dx at once, then sums; the P
// warps add their sums in order through shared memory; and each lane keeps the weight
// (and bias) gradient's terms of its columns over its rows in registers. The warps add
// theirs in warp order into the block's row of fp32 partials, which col_finish_kernel
// adds into dw (and db). So x and dout are read once where the column sums read them a
// second time, and the order is fixed by the sizes alone. (With a chunk's loads awaited
// before the next chunk's, the same kernel took as long as the two it replaced.) For
// RMSNorm at Llama-3.2-1B's width and 8 x 1024 tokens on an H200 (2026-11-27), two warps
// a row (124 registers, two blocks an SM) took 54 us a call with 32 rows a block, 64 with
// 64; one warp a row at eight chunks a lane (217 registers, one block an SM) 59 us with
// 64 rows a block (one wave), 73 with 32 and 95 with 16; the kernel and its column sums
// over dx and x, 81. LayerNorm keeps twice the terms, so its warps take at most two
// chunks a lane (P up to 4); not yet timed on a GPU.
enum { NORM_LANE_CHUNKS = 8, NORM_BWD_ROWS = 4 * ROW_WARPS };

// RMSNorm: dx += rstd (dn - n mean(dn n)), dw += dout n, with dn = w dout, n = x rstd.
// LayerNorm: dx += rstd (dn - mean(dn) - n mean(dn n)), dw += dout n, db += dout, with
// n = (x - mean) rstd. The same expressions as the one-row kernels'.
template <typename T, int J, int P, bool LN>
static __global__ void __launch_bounds__(ROW_WARPS * 32)
    norm_bwd_kernel(T *dx, float *partial, const T *dout, const T *x, const T *w, const float *mean, const float *rstd,
                    size_t rows, int C) {
    using R = row_chunks<T>;
    constexpr int VN = R::VN, SLOTS = ROW_WARPS / P, NOUT = LN ? 2 : 1, NSUM = LN ? 2 : 1;
    __shared__ float block_dw[NOUT][P * J * 32 * VN];
    __shared__ float row_sums[2][NSUM][ROW_WARPS]; // by iteration parity: one barrier an iteration
    SHARED_FRESH(block_dw, row_sums);
    const int chunks = R::count(C), h = threadIdx.y % P, slot = threadIdx.y / P;
    float dw[NOUT][J][VN], xv[VN], dv[VN], wv[VN], gv[VN];
#pragma unroll
    for (int o = 0; o < NOUT; o++)
#pragma unroll
        for (int j = 0; j < J; j++)
#pragma unroll
            for (int k = 0; k < VN; k++)
                dw[o][j][k] = 0.0f;
    const size_t r0 = (size_t)blockIdx.x * NORM_BWD_ROWS;
    const size_t r1 = r0 + NORM_BWD_ROWS < rows ? r0 + NORM_BWD_ROWS : rows;
    // Every warp runs every iteration: the P warps of a row meet at its barrier.
    for (int it = 0; it < (NORM_BWD_ROWS + SLOTS - 1) / SLOTS; it++) {
        const size_t r = r0 + (size_t)it * SLOTS + slot;
        const bool active = r < r1;
        const T *xr = x + r * C, *dr = dout + r * C;
        T *dxr = dx + r * C;
        uint4 xu[J], du[J], gu[J];
#pragma unroll
        for (int j = 0; j < J; j++) {
            const int c = threadIdx.x + 32 * (P * j + h);
            if (active && c < chunks) {
                xu[j] = load_as<uint4>(xr + c * VN), du[j] = load_as<uint4>(dr + c * VN);
                gu[j] = load_as<uint4>(dxr + c * VN);
            }
        }
        const float rs = active ? rstd[r] : 0.0f, m = LN && active ? mean[r] : 0.0f;
        float sum[NSUM] = {};
#pragma unroll
        for (int j = 0; j < J; j++) {
            const int c = threadIdx.x + 32 * (P * j + h);
            if (!active || c >= chunks) continue;
            R::widen(xv, xu[j]), R::widen(dv, du[j]), R::load(wv, w, c, C, true);
#pragma unroll
            for (int k = 0; k < VN; k++)
                if constexpr (LN) {
                    const float norm = (xv[k] - m) * rs, dnorm = wv[k] * dv[k];
                    sum[0] += dnorm;
                    sum[NSUM - 1] += dnorm * norm;
                } else {
                    sum[0] += wv[k] * dv[k] * (xv[k] * rs);
                }
        }
#pragma unroll
        for (int q = 0; q < NSUM; q++)
            sum[q] = warp_sum(sum[q]);
        if (P > 1) {
            if (threadIdx.x == 0)
#pragma unroll
                for (int q = 0; q < NSUM; q++)
                    row_sums[it & 1][q][threadIdx.y] = sum[q];
            __syncthreads();
#pragma unroll
            for (int q = 0; q < NSUM; q++) {
                sum[q] = row_sums[it & 1][q][slot * P];
                for (int p = 1; p < P; p++)
                    sum[q] += row_sums[it & 1][q][slot * P + p];
            }
        }
        const float mean_dn = sum[0] / (float)C, mean_dnn = sum[NSUM - 1] / (float)C;
#pragma unroll
        for (int j = 0; j < J; j++) {
            const int c = threadIdx.x + 32 * (P * j + h);
            if (!active || c >= chunks) continue;
            R::widen(xv, xu[j]), R::widen(dv, du[j]), R::widen(gv, gu[j]), R::load(wv, w, c, C, true);
#pragma unroll
            for (int k = 0; k < VN; k++)
                if constexpr (LN) {
                    const float norm = (xv[k] - m) * rs, dnorm = wv[k] * dv[k];
                    gv[k] += (dnorm - mean_dn - norm * mean_dnn) * rs;
                    dw[0][j][k] += norm * dv[k];
                    dw[NOUT - 1][j][k] += dv[k];
                } else {
                    gv[k] += rs * (wv[k] * dv[k] - xv[k] * rs * mean_dnn);
                    dw[0][j][k] += dv[k] * (xv[k] * rs);
                }
            R::store(dxr, gv, c, C, true);
        }
    }
    // The warps of each h, in warp order.
    for (int y = 0; y < ROW_WARPS; y++) {
        if ((int)threadIdx.y == y)
#pragma unroll
            for (int o = 0; o < NOUT; o++)
#pragma unroll
                for (int j = 0; j < J; j++)
#pragma unroll
                    for (int k = 0; k < VN; k++) {
                        float &b = block_dw[o][(threadIdx.x + 32 * (P * j + h)) * VN + k];
                        b = y < P ? dw[o][j][k] : b + dw[o][j][k];
                    }
        __syncthreads();
    }
    for (int o = 0; o < NOUT; o++)
        for (int i = threadIdx.y * 32 + threadIdx.x; i < C; i += ROW_WARPS * 32)
            partial[((size_t)o * gridDim.x + blockIdx.x) * C + i] = block_dw[o][i];
}

template <typename T, int J, int P, bool LN> static zinf_status norm_bwd_fused(cuda_stream *cs, const op_layernorm *a) {
    const unsigned blocks = (unsigned)((a->rows + NORM_BWD_ROWS - 1) / NORM_BWD_ROWS);
    float *partial = (float *)cs->d_lt_ws;
    norm_bwd_kernel<T, J, P, LN> CUDA_LAUNCH(blocks, dim3(32, ROW_WARPS), 0,
                                             cs->st)((T *)a->dx, partial, (const T *)a->dout, (const T *)a->x,
                                                     (const T *)a->w, a->mean, a->rstd, (size_t)a->rows, a->C);
    ZINF_CUDA_LAUNCHED("norm_bwd_kernel");
    constexpr int NOUT = LN ? 2 : 1;
    return col_finish<T, NOUT>(cs->st, (T *)a->dw, LN ? (T *)a->db : (T *)nullptr, partial, (int)blocks, a->C,
                               a->first);
}

// The one-pass backward where it takes a (rows in whole chunks, few enough a lane, the
// partials within the workspace): true, its status in *st. LayerNorm keeps twice the
// terms a lane, so it spreads a row over twice the warps.
template <typename T, bool LN> static bool norm_bwd_one_pass(cuda_stream *cs, const op_layernorm *a, zinf_status *st) {
    const int lane_chunks = (a->C + 32 * row_chunks<T>::VN - 1) / (32 * row_chunks<T>::VN);
    const size_t blocks = ((size_t)a->rows + NORM_BWD_ROWS - 1) / NORM_BWD_ROWS;
    if (!rows_in_chunks<T>(a->C, a->dx, a->dout, a->x, a->w) || lane_chunks > NORM_LANE_CHUNKS ||
        blocks * (LN ? 2 : 1) * a->C * sizeof(float) > CUDA_LT_WORKSPACE)
        return false;
    constexpr int P = LN ? 4 : 2; // at NORM_LANE_CHUNKS
    *st = lane_chunks <= 1   ? norm_bwd_fused<T, 1, 1, LN>(cs, a)
          : lane_chunks <= 2 ? norm_bwd_fused<T, 2, 1, LN>(cs, a)
          : lane_chunks <= 4 ? (LN ? norm_bwd_fused<T, 2, 2, LN> : norm_bwd_fused<T, 4, 1, LN>)(cs, a)
                             : norm_bwd_fused<T, NORM_LANE_CHUNKS / P, P, LN>(cs, a);
    return true;
}

// ---- layernorm ----
// A warp per row; biased variance, rstd = 1 / sqrtf(var + eps) (IEEE division and
// square root: the build has no fast-math flags).

template <typename T>
static __global__ void __launch_bounds__(ROW_WARPS * 32)
    layernorm_fwd_kernel(T *out, float *mean, float *rstd, const T *x, const T *w, const T *b, size_t rows, int C,
                         float eps, bool vec) {
    using R = row_chunks<T>;
    constexpr int VN = R::VN;
    size_t r = (size_t)blockIdx.x * ROW_WARPS + threadIdx.y;
    if (r >= rows) return; // the whole warp: no lane is left waiting in a shuffle
    const T *xr = x + r * C;
    T *o = out + r * C;
    float s = 0.0f, xv[VN], wv[VN], bv[VN];
    for (int c = threadIdx.x; c < R::count(C); c += 32) {
        R::load(xv, xr, c, C, vec);
#pragma unroll
        for (int k = 0; k < VN; k++)
            s += xv[k]; // zeros past C
    }
    float m = warp_sum(s) / (float)C;
    float v = 0.0f;
    for (int c = threadIdx.x; c < R::count(C); c += 32) {
        R::load(xv, xr, c, C, vec);
#pragma unroll
        for (int k = 0; k < VN; k++) {
            float d = c * VN + k < C ? xv[k] - m : 0.0f;
            v += d * d;
        }
    }
    v = warp_sum(v) / (float)C;
    float rs = 1.0f / sqrtf(v + eps);
    // Each lane writes only the chunks it reads, after every read of the row's
    // statistics: out may be x.
    for (int c = threadIdx.x; c < R::count(C); c += 32) {
        R::load(xv, xr, c, C, vec), R::load(wv, w, c, C, vec), R::load(bv, b, c, C, vec);
#pragma unroll
        for (int k = 0; k < VN; k++)
            xv[k] = (xv[k] - m) * rs * wv[k] + bv[k];
        R::store(o, xv, c, C, vec);
    }
    if (threadIdx.x == 0) {
        mean[r] = m;
        rstd[r] = rs;
    }
}

template <typename T> static zinf_status layernorm_fwd_t(cudaStream_t st, const op_layernorm *a) {
    const bool vec = rows_in_chunks<T>(a->C, a->out, a->x, a->w, a->b);
    layernorm_fwd_kernel<T> CUDA_LAUNCH(row_blocks((size_t)a->rows), dim3(32, ROW_WARPS), 0,
                                        st)((T *)a->out, a->mean, a->rstd, (const T *)a->x, (const T *)a->w,
                                            (const T *)a->b, (size_t)a->rows, a->C, a->eps, vec);
    ZINF_CUDA_LAUNCHED("layernorm_fwd_kernel");
    return ZINF_OK;
}

zinf_status cuda_layernorm_fwd(cudaStream_t st, zinf_dtype dt, const op_layernorm *a) {
    if (a->rows <= 0 || a->C <= 0) return ZINF_OK;
    CUDA_DT_SWITCH(dt, "layernorm_fwd", layernorm_fwd_t, st, a);
}

// dx += (dnorm - mean(dnorm) - norm * mean(dnorm * norm)) * rstd, dnorm = w * dout; a row
// in 16-byte chunks (row_chunks).
template <typename T>
static __global__ void __launch_bounds__(ROW_WARPS * 32)
    layernorm_bwd_dx_kernel(T *dx, const T *dout, const T *x, const T *w, const float *mean, const float *rstd,
                            size_t rows, int C, bool vec) {
    using R = row_chunks<T>;
    constexpr int VN = R::VN;
    size_t r = (size_t)blockIdx.x * ROW_WARPS + threadIdx.y;
    if (r >= rows) return;
    const T *xr = x + r * C, *dr = dout + r * C;
    T *dxr = dx + r * C;
    const float m = mean[r], rs = rstd[r];
    float s1 = 0.0f, s2 = 0.0f, xv[VN], dv[VN], wv[VN], gv[VN];
    for (int c = threadIdx.x; c < R::count(C); c += 32) {
        R::load(xv, xr, c, C, vec), R::load(dv, dr, c, C, vec), R::load(wv, w, c, C, vec);
#pragma unroll
        for (int k = 0; k < VN; k++) {
            float norm = (xv[k] - m) * rs, dnorm = wv[k] * dv[k];
            s1 += dnorm;
            s2 += dnorm * norm;
        }
    }
    const float dnorm_mean = warp_sum(s1) / (float)C, dnorm_norm_mean = warp_sum(s2) / (float)C;
    for (int c = threadIdx.x; c < R::count(C); c += 32) {
        R::load(xv, xr, c, C, vec), R::load(dv, dr, c, C, vec), R::load(wv, w, c, C, vec), R::load(gv, dxr, c, C, vec);
#pragma unroll
        for (int k = 0; k < VN; k++) {
            float norm = (xv[k] - m) * rs, dnorm = wv[k] * dv[k];
            gv[k] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * rs;
        }
        R::store(dxr, gv, c, C, vec);
    }
}

// dw[c] += sum_r norm[r][c] * dout[r][c], db[c] += sum_r dout[r][c]: column sums.
template <typename T> struct layernorm_weight_terms {
    const T *dout, *x;
    const float *mean, *rstd;
    int C;
    static constexpr int VN = row_chunks<T>::VN;
    __device__ void operator()(size_t r, int c, bool vec, float (&s)[2][VN]) const {
        float d[VN], xv[VN];
        row_chunks<T>::load(d, dout + r * C, c, C, vec), row_chunks<T>::load(xv, x + r * C, c, C, vec);
        const float m = mean[r], rs = rstd[r];
#pragma unroll
        for (int k = 0; k < VN; k++) {
            s[0][k] += (xv[k] - m) * rs * d[k]; // past C: d 0
            s[1][k] += d[k];
        }
    }
};

template <typename T> static zinf_status layernorm_bwd_t(cuda_stream *cs, const op_layernorm *a) {
    const bool vec = rows_in_chunks<T>(a->C, a->dx, a->dout, a->x, a->w);
    zinf_status st;
    if (norm_bwd_one_pass<T, true>(cs, a, &st)) return st;
    layernorm_bwd_dx_kernel<T> CUDA_LAUNCH(row_blocks((size_t)a->rows), dim3(32, ROW_WARPS), 0, cs->st)(
        (T *)a->dx, (const T *)a->dout, (const T *)a->x, (const T *)a->w, a->mean, a->rstd, (size_t)a->rows, a->C, vec);
    ZINF_CUDA_LAUNCHED("layernorm_bwd_dx_kernel");
    const layernorm_weight_terms<T> terms = {(const T *)a->dout, (const T *)a->x, a->mean, a->rstd, a->C};
    return col_sums<T, 2>(cs, (T *)a->dw, (T *)a->db, terms, (size_t)a->rows, a->C, vec, a->first);
}

zinf_status cuda_layernorm_bwd(cuda_stream *cs, zinf_dtype dt, const op_layernorm *a) {
    if (a->rows <= 0 || a->C <= 0) return ZINF_OK;
    CUDA_DT_SWITCH(dt, "layernorm_bwd", layernorm_bwd_t, cs, a);
}

// ---- RMSNorm ----
// A warp per row as the layernorm; n = x * rstd is rounded to the storage type
// before the weight, as the host backend does.

// v as T stores it, widened back.
template <typename T> static __device__ __forceinline__ float rounded(float v) {
    T t;
    store_f32(&t, v);
    return to_f32(t);
}

// Chunk c of a row's output from its values x: w * (x * rs rounded to T).
template <typename T>
static __device__ __forceinline__ void rmsnorm_out_chunk(T *o, float (&x)[row_chunks<T>::VN], const T *w, float rs,
                                                         int c, int C, bool vec) {
    float wv[row_chunks<T>::VN];
    row_chunks<T>::load(wv, w, c, C, vec);
#pragma unroll
    for (int k = 0; k < row_chunks<T>::VN; k++)
        x[k] = wv[k] * rounded<T>(x[k] * rs);
    row_chunks<T>::store(o, x, c, C, vec);
}

// J > 0: a lane holds its J chunks of the row (C up to 32 J chunks), asked for at once,
// so a row costs one wait on memory where the loop below waits once a chunk, twice;
// J = 0: any width. The same sums in the same order either way.
template <typename T, int J>
static __global__ void __launch_bounds__(ROW_WARPS * 32)
    rmsnorm_fwd_kernel(T *out, float *rstd, const T *x, const T *w, size_t rows, int C, float eps, bool vec) {
    using R = row_chunks<T>;
    constexpr int VN = R::VN;
    size_t r = (size_t)blockIdx.x * ROW_WARPS + threadIdx.y;
    if (r >= rows) return;
    const T *xr = x + r * C;
    T *o = out + r * C;
    const int chunks = R::count(C);
    float s = 0.0f, xv[VN];
    if constexpr (J > 0) {
        uint4 xu[J];
#pragma unroll
        for (int j = 0; j < J; j++) {
            const int c = threadIdx.x + 32 * j;
            if (c < chunks) xu[j] = R::fetch(xr, c, C, vec);
        }
#pragma unroll
        for (int j = 0; j < J; j++) {
            if ((int)threadIdx.x + 32 * j >= chunks) continue;
            R::widen(xv, xu[j]);
#pragma unroll
            for (int k = 0; k < VN; k++)
                s += xv[k] * xv[k]; // zeros past C
        }
        const float rs = 1.0f / sqrtf(warp_sum(s) / (float)C + eps);
#pragma unroll
        for (int j = 0; j < J; j++) {
            const int c = threadIdx.x + 32 * j;
            if (c >= chunks) continue;
            R::widen(xv, xu[j]);
            rmsnorm_out_chunk(o, xv, w, rs, c, C, vec);
        }
        if (threadIdx.x == 0) rstd[r] = rs;
    } else {
        for (int c = threadIdx.x; c < chunks; c += 32) {
            R::load(xv, xr, c, C, vec);
#pragma unroll
            for (int k = 0; k < VN; k++)
                s += xv[k] * xv[k]; // zeros past C
        }
        const float rs = 1.0f / sqrtf(warp_sum(s) / (float)C + eps);
        // As the layernorm: each lane writes only the chunks it reads, so out may be x.
        for (int c = threadIdx.x; c < chunks; c += 32) {
            R::load(xv, xr, c, C, vec);
            rmsnorm_out_chunk(o, xv, w, rs, c, C, vec);
        }
        if (threadIdx.x == 0) rstd[r] = rs;
    }
}

// dx += rstd (dn - n mean(dn n)), dn = w dout, n = x rstd; a row in 16-byte chunks.
template <typename T>
static __global__ void __launch_bounds__(ROW_WARPS * 32)
    rmsnorm_bwd_dx_kernel(T *dx, const T *dout, const T *x, const T *w, const float *rstd, size_t rows, int C,
                          bool vec) {
    using R = row_chunks<T>;
    constexpr int VN = R::VN;
    size_t r = (size_t)blockIdx.x * ROW_WARPS + threadIdx.y;
    if (r >= rows) return;
    const T *xr = x + r * C, *dr = dout + r * C;
    T *dxr = dx + r * C;
    float rs = rstd[r], s = 0.0f, xv[VN], dv[VN], wv[VN], gv[VN];
    for (int c = threadIdx.x; c < R::count(C); c += 32) {
        R::load(xv, xr, c, C, vec), R::load(dv, dr, c, C, vec), R::load(wv, w, c, C, vec);
#pragma unroll
        for (int k = 0; k < VN; k++)
            s += wv[k] * dv[k] * (xv[k] * rs);
    }
    const float dnn = warp_sum(s) / (float)C;
    for (int c = threadIdx.x; c < R::count(C); c += 32) {
        R::load(xv, xr, c, C, vec), R::load(dv, dr, c, C, vec), R::load(wv, w, c, C, vec), R::load(gv, dxr, c, C, vec);
#pragma unroll
        for (int k = 0; k < VN; k++)
            gv[k] += rs * (wv[k] * dv[k] - xv[k] * rs * dnn);
        R::store(dxr, gv, c, C, vec);
    }
}

// dw[c] += sum_r n[r][c] * dout[r][c]: column sums, for rows norm_bwd_kernel does not take.
template <typename T> struct rmsnorm_weight_terms {
    const T *dout, *x;
    const float *rstd;
    int C;
    static constexpr int VN = row_chunks<T>::VN;
    __device__ void operator()(size_t r, int c, bool vec, float (&s)[1][VN]) const {
        float d[VN], xv[VN];
        row_chunks<T>::load(d, dout + r * C, c, C, vec), row_chunks<T>::load(xv, x + r * C, c, C, vec);
        const float rs = rstd[r];
#pragma unroll
        for (int k = 0; k < VN; k++)
            s[0][k] += d[k] * (xv[k] * rs);
    }
};

template <typename T, int J> static zinf_status rmsnorm_fwd_launch(cudaStream_t st, const op_layernorm *a, bool vec) {
    rmsnorm_fwd_kernel<T, J> CUDA_LAUNCH(row_blocks((size_t)a->rows), dim3(32, ROW_WARPS), 0, st)(
        (T *)a->out, a->rstd, (const T *)a->x, (const T *)a->w, (size_t)a->rows, a->C, a->eps, vec);
    ZINF_CUDA_LAUNCHED("rmsnorm_fwd_kernel");
    return ZINF_OK;
}

template <typename T> static zinf_status rmsnorm_fwd_t(cudaStream_t st, const op_layernorm *a) {
    const bool vec = rows_in_chunks<T>(a->C, a->out, a->x, a->w, a->w);
    const int lane_chunks = (a->C + 32 * row_chunks<T>::VN - 1) / (32 * row_chunks<T>::VN);
    return lane_chunks <= 1                  ? rmsnorm_fwd_launch<T, 1>(st, a, vec)
           : lane_chunks <= 2                ? rmsnorm_fwd_launch<T, 2>(st, a, vec)
           : lane_chunks <= 4                ? rmsnorm_fwd_launch<T, 4>(st, a, vec)
           : lane_chunks <= NORM_LANE_CHUNKS ? rmsnorm_fwd_launch<T, NORM_LANE_CHUNKS>(st, a, vec)
                                             : rmsnorm_fwd_launch<T, 0>(st, a, vec);
}

template <typename T> static zinf_status rmsnorm_bwd_t(cuda_stream *cs, const op_layernorm *a) {
    const bool vec = rows_in_chunks<T>(a->C, a->dx, a->dout, a->x, a->w);
    zinf_status st;
    if (norm_bwd_one_pass<T, false>(cs, a, &st)) return st;
    rmsnorm_bwd_dx_kernel<T> CUDA_LAUNCH(row_blocks((size_t)a->rows), dim3(32, ROW_WARPS), 0, cs->st)(
        (T *)a->dx, (const T *)a->dout, (const T *)a->x, (const T *)a->w, a->rstd, (size_t)a->rows, a->C, vec);
    ZINF_CUDA_LAUNCHED("rmsnorm_bwd_dx_kernel");
    const rmsnorm_weight_terms<T> terms = {(const T *)a->dout, (const T *)a->x, a->rstd, a->C};
    return col_sums<T, 1>(cs, (T *)a->dw, (T *)nullptr, terms, (size_t)a->rows, a->C, vec, a->first);
}

zinf_status cuda_rmsnorm_fwd(cudaStream_t st, zinf_dtype dt, const op_layernorm *a) {
    if (a->rows <= 0 || a->C <= 0) return ZINF_OK;
    CUDA_DT_SWITCH(dt, "rmsnorm_fwd", rmsnorm_fwd_t, st, a);
}

zinf_status cuda_rmsnorm_bwd(cuda_stream *cs, zinf_dtype dt, const op_layernorm *a) {
    if (a->rows <= 0 || a->C <= 0) return ZINF_OK;
    CUDA_DT_SWITCH(dt, "rmsnorm_bwd", rmsnorm_bwd_t, cs, a);
}

// ---- GELU (tanh approximation) ----

template <typename T> static __global__ void gelu_fwd_kernel(T *out, const T *x, size_t n) {
    EW_LOOP(i, n) {
        float v = to_f32(x[i]), cube = 0.044715f * v * v * v;
        store_f32(&out[i], 0.5f * v * (1.0f + tanhf(GELU_SCALING_FACTOR * (v + cube))));
    }
}

template <typename T> static __global__ void gelu_bwd_kernel(T *dx, const T *x, const T *dout, size_t n) {
    EW_LOOP(i, n) {
        float v = to_f32(x[i]), cube = 0.044715f * v * v * v;
        float th = tanhf(GELU_SCALING_FACTOR * (v + cube));
        float local =
            0.5f * (1.0f + th) + v * 0.5f * (1.0f - th * th) * GELU_SCALING_FACTOR * (1.0f + 3.0f * 0.044715f * v * v);
        store_f32(&dx[i], local * to_f32(dout[i]));
    }
}

template <typename T> static zinf_status gelu_fwd_t(cudaStream_t st, const op_elementwise *e) {
    gelu_fwd_kernel<T> CUDA_LAUNCH(ew_blocks(e->n), EW_THREADS, 0, st)((T *)e->out, (const T *)e->a, e->n);
    ZINF_CUDA_LAUNCHED("gelu_fwd_kernel");
    return ZINF_OK;
}

template <typename T> static zinf_status gelu_bwd_t(cudaStream_t st, const op_elementwise *e) {
    gelu_bwd_kernel<T> CUDA_LAUNCH(ew_blocks(e->n), EW_THREADS, 0, st)((T *)e->out, (const T *)e->a, (const T *)e->b,
                                                                       e->n);
    ZINF_CUDA_LAUNCHED("gelu_bwd_kernel");
    return ZINF_OK;
}

zinf_status cuda_gelu_fwd(cudaStream_t st, zinf_dtype dt, const op_elementwise *e) {
    if (e->n == 0) return ZINF_OK;
    CUDA_DT_SWITCH(dt, "gelu_fwd", gelu_fwd_t, st, e);
}

zinf_status cuda_gelu_bwd(cudaStream_t st, zinf_dtype dt, const op_elementwise *e) {
    if (e->n == 0) return ZINF_OK;
    CUDA_DT_SWITCH(dt, "gelu_bwd", gelu_bwd_t, st, e);
}

// ---- SwiGLU ----
// A warp per row (ROW_WARPS rows a block), its lanes over the row's F columns in
// 16-byte chunks (row_chunks): the gate at gu[r][j], the up at gu[r][F + j]. A lane reads
// both chunks before it writes both, so dgu may be gu. No 64-bit division per element:
// one each an element left the H100's SwiGLU at half its bandwidth. A lane asking for
// two or four chunks of each input at once was slower on an H200 (2026-11-27, Llama-3.2-1B,
// 8 x 1024 tokens: 3.2 and 3.8 ms a backward pass against 3.0; forward 2.0 and 2.7
// against 2.0): the registers it takes cost more warps than the loads in flight gain.

static __device__ __forceinline__ float sigmoid(float g) { return 1.0f / (1.0f + expf(-g)); }

template <typename T>
static __global__ void __launch_bounds__(ROW_WARPS * 32)
    swiglu_fwd_kernel(T *out, const T *gu, size_t rows, int F, bool vec) {
    using R = row_chunks<T>;
    constexpr int VN = R::VN;
    size_t r = (size_t)blockIdx.x * ROW_WARPS + threadIdx.y;
    if (r >= rows) return;
    const T *gate = gu + r * 2 * F, *up = gate + F;
    T *o = out + r * F;
    float g[VN], u[VN], y[VN];
    for (int c = threadIdx.x; c < R::count(F); c += 32) {
        R::load(g, gate, c, F, vec), R::load(u, up, c, F, vec);
#pragma unroll
        for (int k = 0; k < VN; k++)
            y[k] = g[k] * sigmoid(g[k]) * u[k];
        R::store(o, y, c, F, vec);
    }
}

template <typename T>
static __global__ void __launch_bounds__(ROW_WARPS * 32)
    swiglu_bwd_kernel(T *dgu, const T *gu, const T *dout, size_t rows, int F, bool vec) {
    using R = row_chunks<T>;
    constexpr int VN = R::VN;
    size_t r = (size_t)blockIdx.x * ROW_WARPS + threadIdx.y;
    if (r >= rows) return;
    const T *gate = gu + r * 2 * F, *up = gate + F, *dy = dout + r * F;
    T *dgate = dgu + r * 2 * F, *dup = dgate + F;
    float g[VN], u[VN], d[VN];
    for (int c = threadIdx.x; c < R::count(F); c += 32) {
        R::load(g, gate, c, F, vec), R::load(u, up, c, F, vec), R::load(d, dy, c, F, vec);
#pragma unroll
        for (int k = 0; k < VN; k++) {
            float sg = sigmoid(g[k]), dg = d[k] * u[k] * (sg * (1.0f + g[k] * (1.0f - sg)));
            u[k] = d[k] * (g[k] * sg);
            g[k] = dg;
        }
        R::store(dgate, g, c, F, vec), R::store(dup, u, c, F, vec);
    }
}

template <typename T> static zinf_status swiglu_fwd_t(cudaStream_t st, const op_elementwise *e) {
    const bool vec = rows_in_chunks<T>(e->cols, e->out, e->a, e->a, e->a);
    swiglu_fwd_kernel<T> CUDA_LAUNCH(row_blocks(e->n), dim3(32, ROW_WARPS), 0, st)((T *)e->out, (const T *)e->a, e->n,
                                                                                   e->cols, vec);
    ZINF_CUDA_LAUNCHED("swiglu_fwd_kernel");
    return ZINF_OK;
}

template <typename T> static zinf_status swiglu_bwd_t(cudaStream_t st, const op_elementwise *e) {
    const bool vec = rows_in_chunks<T>(e->cols, e->out, e->a, e->b, e->b);
    swiglu_bwd_kernel<T> CUDA_LAUNCH(row_blocks(e->n), dim3(32, ROW_WARPS), 0, st)((T *)e->out, (const T *)e->a,
                                                                                   (const T *)e->b, e->n, e->cols, vec);
    ZINF_CUDA_LAUNCHED("swiglu_bwd_kernel");
    return ZINF_OK;
}

zinf_status cuda_swiglu_fwd(cudaStream_t st, zinf_dtype dt, const op_elementwise *e) {
    if (e->n == 0 || e->cols <= 0) return ZINF_OK;
    CUDA_DT_SWITCH(dt, "swiglu_fwd", swiglu_fwd_t, st, e);
}

zinf_status cuda_swiglu_bwd(cudaStream_t st, zinf_dtype dt, const op_elementwise *e) {
    if (e->n == 0 || e->cols <= 0) return ZINF_OK;
    CUDA_DT_SWITCH(dt, "swiglu_bwd", swiglu_bwd_t, st, e);
}

// ---- rotary embedding ----
// A warp per token row, its lanes over the row's (head, chunk) items: a chunk is a
// 16-byte run of a q or k head's first half and the run hd / 2 after it, the pairs (i,
// i + hd / 2) turned together (row_chunks, where hd / 2 is a whole number of chunks).
// The backward turns by the opposite angle: sin negated, which is exact.

template <typename T>
static __global__ void __launch_bounds__(ROW_WARPS * 32)
    rope_kernel(T *qkv, const float *cos_tab, const float *sin_tab, size_t rows, int seq, int heads, int row, int hd,
                float sign, bool vec) {
    using R = row_chunks<T>;
    constexpr int VN = R::VN;
    size_t bt = (size_t)blockIdx.x * ROW_WARPS + threadIdx.y;
    if (bt >= rows) return;
    const int half = hd / 2, per_head = R::count(half);
    const size_t t = bt % (size_t)seq;
    const float *cr = cos_tab + t * half, *sr = sin_tab + t * half;
    float x1[VN], x2[VN];
    for (int item = threadIdx.x; item < heads * per_head; item += 32) {
        const int h = item / per_head, c = item % per_head;
        T *x = qkv + bt * row + (size_t)h * hd;
        R::load(x1, x, c, half, vec), R::load(x2, x + half, c, half, vec);
#pragma unroll
        for (int k = 0; k < VN; k++) {
            const int i = c * VN + k < half ? c * VN + k : half - 1; // past half: stored nowhere
            const float cv = cr[i], sv = sign * sr[i], a = x1[k], b = x2[k];
            x1[k] = a * cv - b * sv;
            x2[k] = b * cv + a * sv;
        }
        R::store(x, x1, c, half, vec), R::store(x + half, x2, c, half, vec);
    }
}

template <typename T> static zinf_status rope_t(cudaStream_t st, const op_rope *a, bool backward) {
    const int heads = a->NH + a->NKV, row = (a->NH + 2 * a->NKV) * a->hd;
    const size_t rows = (size_t)a->B * a->T;
    const bool vec = rows_in_chunks<T>(a->hd / 2, a->qkv, a->qkv, a->qkv, a->qkv); // hd / 2 whole chunks: rows too
    rope_kernel<T> CUDA_LAUNCH(row_blocks(rows), dim3(32, ROW_WARPS), 0, st)(
        (T *)a->qkv, a->cos_tab, a->sin_tab, rows, a->T, heads, row, a->hd, backward ? -1.0f : 1.0f, vec);
    ZINF_CUDA_LAUNCHED("rope_kernel");
    return ZINF_OK;
}

zinf_status cuda_rope(cudaStream_t st, zinf_dtype dt, const op_rope *a, bool backward) {
    if (a->B <= 0 || a->T <= 0 || a->hd < 2) return ZINF_OK;
    CUDA_DT_SWITCH(dt, "rope", rope_t, st, a, backward);
}

// ---- cross-entropy ----
// One block per row, the row in 16-byte chunks (row_chunks) over its padded length ld:
// each thread keeps a running maximum of its chunks and the sum of exp(x - max),
// rescaled when the maximum grows; the block combines them (lse = max + log(sum), saved
// when lse_out is given); the loss lse - x[target]; dlogits = (exp(x - lse) - onehot) *
// dscale, and zero in the row's pad [V, ld). Two passes over the row where the three of
// a maximum, a sum and the gradient pass one value a thread at a time were, and the pad
// never enters the sums. dlogits may be the logits: every read of another thread's
// element happens before the reductions' barriers, and the last pass has each thread
// read then write its own chunks. A target outside [0, V) gives a NaN loss and no
// one-hot instead of a stray read. A thread asks for XENT_CHUNKS chunks at once and holds
// them as loaded (uint4, half the registers of floats), then takes them in order. For
// Llama-3.2-1B's 8192 x 128256 logits on an H200 (2026-11-27): one chunk a load and a
// test an element, 0.46 of its bandwidth; four chunks as floats (74 registers), 2.18 ms;
// as loaded, 1.65 ms (blocks of 512 threads 1.8, 1024 1.9: the L2 that one block an SM
// would keep the row in did not pay).
enum { XENT_CHUNKS = 4, XENT_THREADS = 256 };

// Chunk c's values below V into the running maximum m and the sum s of exp(x - m);
// chunks wholly below V without a test an element.
template <int VN>
static __device__ __forceinline__ void softmax_chunk(const float (&v)[VN], int c, int V, float &m, float &s) {
    float cm = -INFINITY;
    if ((c + 1) * VN <= V) {
#pragma unroll
        for (int k = 0; k < VN; k++)
            cm = fmaxf(cm, v[k]);
        if (cm > m) {
            s *= expf(m - cm);
            m = cm;
        }
#pragma unroll
        for (int k = 0; k < VN; k++)
            s += expf(v[k] - m);
        return;
    }
#pragma unroll
    for (int k = 0; k < VN; k++)
        if (c * VN + k < V) cm = fmaxf(cm, v[k]);
    if (cm > m) {
        s *= expf(m - cm);
        m = cm;
    }
#pragma unroll
    for (int k = 0; k < VN; k++)
        if (c * VN + k < V) s += expf(v[k] - m);
}

template <typename T>
static __global__ void __launch_bounds__(XENT_THREADS)
    cross_entropy_kernel(float *losses, float *lse_out, T *dlogits, const T *logits, const int32_t *targets, int V,
                         int ld, float dscale, bool vec) {
    using R = row_chunks<T>;
    constexpr int VN = R::VN;
    __shared__ float red[XENT_THREADS / 32];
    SHARED_FRESH(red);
    size_t r = blockIdx.x;
    const T *x = logits + r * ld;
    const int chunks = R::count(ld);
    int tgt = targets[r];
    bool valid = tgt >= 0 && tgt < V;
    float x_tgt = valid ? to_f32(x[tgt]) : __int_as_float(0x7fc00000);
    float m = -INFINITY, s = 0.0f, f[VN];
    uint4 v[XENT_CHUNKS];
    for (int c0 = threadIdx.x; c0 < chunks; c0 += XENT_CHUNKS * XENT_THREADS) {
#pragma unroll
        for (int u = 0; u < XENT_CHUNKS; u++)
            if (c0 + u * XENT_THREADS < chunks) v[u] = R::fetch(x, c0 + u * XENT_THREADS, ld, vec);
#pragma unroll
        for (int u = 0; u < XENT_CHUNKS; u++)
            if (c0 + u * XENT_THREADS < chunks) R::widen(f, v[u]), softmax_chunk(f, c0 + u * XENT_THREADS, V, m, s);
    }
    const float mx = block_max<XENT_THREADS>(m, red);
    float lse = mx + logf(block_sum<XENT_THREADS>(m == -INFINITY ? 0.0f : s * expf(m - mx), red));
    if (threadIdx.x == 0) {
        losses[r] = lse - x_tgt;
        if (lse_out) lse_out[r] = lse;
    }
    if (!dlogits) return;
    T *d = dlogits + r * ld;
    for (int c0 = threadIdx.x; c0 < chunks; c0 += XENT_CHUNKS * XENT_THREADS) {
#pragma unroll
        for (int u = 0; u < XENT_CHUNKS; u++)
            if (c0 + u * XENT_THREADS < chunks) v[u] = R::fetch(x, c0 + u * XENT_THREADS, ld, vec);
#pragma unroll
        for (int u = 0; u < XENT_CHUNKS; u++) {
            const int c = c0 + u * XENT_THREADS;
            if (c >= chunks) break;
            R::widen(f, v[u]);
#pragma unroll
            for (int k = 0; k < VN; k++) {
                const int i = c * VN + k;
                f[k] = i < V ? (expf(f[k] - lse) - (i == tgt ? 1.0f : 0.0f)) * dscale : 0.0f;
            }
            R::store(d, f, c, ld, vec);
        }
    }
}

template <typename T> static zinf_status cross_entropy_t(cudaStream_t st, const op_cross_entropy *a) {
    const bool vec = rows_in_chunks<T>(a->ld, a->logits, a->dlogits ? a->dlogits : a->logits, a->logits, a->logits);
    cross_entropy_kernel<T> CUDA_LAUNCH((unsigned)a->rows, XENT_THREADS, 0, st)(
        a->losses, a->lse, (T *)a->dlogits, (const T *)a->logits, a->targets, a->V, a->ld, a->dscale, vec);
    ZINF_CUDA_LAUNCHED("cross_entropy_kernel");
    return ZINF_OK;
}

zinf_status cuda_cross_entropy(cudaStream_t st, zinf_dtype dt, const op_cross_entropy *a) {
    if (a->rows <= 0 || a->V <= 0) return ZINF_OK;
    CUDA_DT_SWITCH(dt, "cross_entropy", cross_entropy_t, st, a);
}

// cross_entropy_kernel's last pass for columns [v0, v0 + n) of rows whose lse is given,
// element by element: the same expression on the same floats, so a row's blocks give
// its bits. dlogits may be the logits: each thread reads then writes its own element.
template <typename T>
static __global__ void cross_entropy_grad_kernel(T *dlogits, const T *logits, const int32_t *targets, const float *lse,
                                                 int n, int v0, float dscale, size_t total) {
    EW_LOOP(i, total) {
        size_t r = i / n;
        int64_t j = (int64_t)(i % n);
        float p = expf(to_f32(logits[i]) - lse[r]);
        store_f32(&dlogits[i], (p - (v0 + j == targets[r] ? 1.0f : 0.0f)) * dscale);
    }
}

template <typename T> static zinf_status cross_entropy_grad_t(cudaStream_t st, const op_cross_entropy_grad *a) {
    size_t total = (size_t)a->rows * a->n;
    cross_entropy_grad_kernel<T> CUDA_LAUNCH(ew_blocks(total), EW_THREADS, 0, st)(
        (T *)a->dlogits, (const T *)a->logits, a->targets, a->lse, a->n, a->v0, a->dscale, total);
    ZINF_CUDA_LAUNCHED("cross_entropy_grad_kernel");
    return ZINF_OK;
}

zinf_status cuda_cross_entropy_grad(cudaStream_t st, zinf_dtype dt, const op_cross_entropy_grad *a) {
    if (a->rows <= 0 || a->n <= 0) return ZINF_OK;
    CUDA_DT_SWITCH(dt, "cross_entropy_grad", cross_entropy_grad_t, st, a);
}

// ---- embedding ----
// w: the windows of the whole tables that wte and wpe (or dwte and dwpe) hold, the whole
// of each without a part (gpu/internal.h); an element outside them is not touched.

// Plain: out = wte + wpe rounded once. accumulate (a part): out += each element the
// windows hold, an add rounded once (why parts give the plain op's bits: the host
// backend's embedding_fwd_part).
template <typename T>
static __global__ void embedding_fwd_kernel(T *out, const int32_t *tok, const T *wte, const T *wpe,
                                            zinf_embedding_part w, bool accumulate, int seq, int C, size_t n) {
    EW_LOOP(i, n) {
        size_t r = i / C, c = i % C, t = r % seq;
        int64_t e = (int64_t)tok[r] * C + (int64_t)c - w.wte_lo, f = (int64_t)(t * C + c) - w.wpe_lo;
        if (!accumulate) {
            float x = to_f32(wte[e]);
            store_f32(&out[i], wpe ? x + to_f32(wpe[f]) : x);
            continue;
        }
        if (e >= 0 && e < w.wte_n) store_f32(&out[i], to_f32(out[i]) + to_f32(wte[e]));
        if (f >= 0 && f < w.wpe_n) store_f32(&out[i], to_f32(out[i]) + to_f32(wpe[f]));
    }
}

// dwte: one block per position of `order` (the positions sorted by token); the block
// at the first position of each token's run sums the run's rows in order, channel by
// channel, and adds the sum once. The same order as the host backend's. A channel's sum
// does not depend on the others, so the window's channels get the plain op's bits.
template <typename T>
static __global__ void embedding_bwd_wte_kernel(T *dwte, const T *dout, const int32_t *tok, const int32_t *order, int N,
                                                int C, int64_t lo, int64_t wn) {
    int p = blockIdx.x;
    int token = tok[order[p]];
    if (p > 0 && tok[order[p - 1]] == token) return; // inside a run: its first block does it
    int64_t from = (int64_t)token * C - lo;          // dwte's index of the row's channel 0
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        if (from + c < 0 || from + c >= wn) continue;
        float s = 0.0f;
        for (int q = p; q < N && tok[order[q]] == token; q++)
            s += to_f32(dout[(size_t)order[q] * C + c]);
        T *w = dwte + from + c;
        store_f32(w, to_f32(*w) + s);
    }
}

// dwpe[t][c] += sum over b of dout[b][t][c], b in order.
template <typename T>
static __global__ void embedding_bwd_wpe_kernel(T *dwpe, const T *dout, int B, int seq, int C, int64_t lo, int64_t wn) {
    size_t n = (size_t)seq * C;
    EW_LOOP(i, n) {
        int64_t e = (int64_t)i - lo;
        if (e < 0 || e >= wn) continue;
        float s = 0.0f;
        for (int b = 0; b < B; b++)
            s += to_f32(dout[(size_t)b * n + i]);
        store_f32(&dwpe[e], to_f32(dwpe[e]) + s);
    }
}

template <typename T> static zinf_status embedding_fwd_t(cudaStream_t st, const op_embedding *a) {
    size_t n = (size_t)a->B * a->T * a->C;
    embedding_fwd_kernel<T> CUDA_LAUNCH(ew_blocks(n), EW_THREADS, 0, st)(
        (T *)a->out, a->tok, (const T *)a->wte, (const T *)a->wpe, a->part, a->accumulate, a->T, a->C, n);
    ZINF_CUDA_LAUNCHED("embedding_fwd_kernel");
    return ZINF_OK;
}

template <typename T> static zinf_status embedding_bwd_t(cudaStream_t st, const op_embedding *a) {
    int N = a->B * a->T;
    const zinf_embedding_part *w = &a->part;
    if (w->wte_n > 0) {
        embedding_bwd_wte_kernel<T> CUDA_LAUNCH((unsigned)N, ROW_THREADS, 0, st)(
            (T *)a->dwte, (const T *)a->dout, a->tok, a->order, N, a->C, w->wte_lo, w->wte_n);
        ZINF_CUDA_LAUNCHED("embedding_bwd_wte_kernel");
    }
    if (w->wpe_n > 0) {
        embedding_bwd_wpe_kernel<T> CUDA_LAUNCH(ew_blocks((size_t)a->T * a->C), EW_THREADS, 0, st)(
            (T *)a->dwpe, (const T *)a->dout, a->B, a->T, a->C, w->wpe_lo, w->wpe_n);
        ZINF_CUDA_LAUNCHED("embedding_bwd_wpe_kernel");
    }
    return ZINF_OK;
}

zinf_status cuda_embedding_fwd(cudaStream_t st, zinf_dtype dt, const op_embedding *a) {
    if (a->B <= 0 || a->T <= 0 || a->C <= 0) return ZINF_OK;
    CUDA_DT_SWITCH(dt, "embedding_fwd", embedding_fwd_t, st, a);
}

zinf_status cuda_embedding_bwd(cudaStream_t st, zinf_dtype dt, const op_embedding *a) {
    if (a->B <= 0 || a->T <= 0 || a->C <= 0) return ZINF_OK;
    CUDA_DT_SWITCH(dt, "embedding_bwd", embedding_bwd_t, st, a);
}

// ---- add, scale, cast, accumulate ----
// Eight elements a thread a step (flat8: one 16-byte load of 16-bit values, two of
// fp32) where every array is 16-byte aligned, as buffers from the device are; the last
// n % 8 elements, and arrays that are not aligned, one at a time. Each element's
// arithmetic is the same either way, so the bits are too.

template <typename T> struct flat8 {
    static constexpr int PER = 16 / (int)sizeof(T); // values a 16-byte load

    static __device__ __forceinline__ void load(float (&f)[8], const T *p) {
#pragma unroll
        for (int h = 0; h < 8 / PER; h++) {
            uint4 u = load_as<uint4>(p + h * PER);
            T t[PER];
            memcpy(t, &u, 16);
#pragma unroll
            for (int k = 0; k < PER; k++)
                f[h * PER + k] = to_f32(t[k]);
        }
    }

    static __device__ __forceinline__ void store(T *p, const float (&f)[8]) {
#pragma unroll
        for (int h = 0; h < 8 / PER; h++) {
            T t[PER];
#pragma unroll
            for (int k = 0; k < PER; k++)
                store_f32(&t[k], f[h * PER + k]);
            uint4 u;
            memcpy(&u, t, 16);
            store_as(p + h * PER, u);
        }
    }
};

// out[i] = f(a[i], b[i]), or f(a[i], 0) with b null, in fp32 and rounded once to O: in
// chunks of eight where every array is 16-byte aligned, then the last n % 8 (or all of
// them) one at a time.
template <typename O, typename A, typename B, typename F>
static __global__ void flat_kernel(O *out, const A *a, const B *b, size_t n, size_t n8, F f) {
    EW_LOOP(c, n8) {
        float x[8], y[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        flat8<A>::load(x, a + 8 * c);
        if (b) flat8<B>::load(y, b + 8 * c);
#pragma unroll
        for (int k = 0; k < 8; k++)
            x[k] = f(x[k], y[k]);
        flat8<O>::store(out + 8 * c, x);
    }
    EW_LOOP(i, n - 8 * n8) {
        const size_t j = 8 * n8 + i;
        store_f32(&out[j], f(to_f32(a[j]), b ? to_f32(b[j]) : 0.0f));
    }
}

template <typename O, typename A, typename B, typename F>
static zinf_status flat_t(cudaStream_t st, O *out, const A *a, const B *b, size_t n, F f, const char *launch) {
    const bool vec = ((uintptr_t)out | (uintptr_t)a | (uintptr_t)b) % 16 == 0;
    const size_t n8 = vec ? n / 8 : 0;
    flat_kernel<O, A, B, F> CUDA_LAUNCH(ew_blocks(n8 + (n - 8 * n8)), EW_THREADS, 0, st)(out, a, b, n, n8, f);
    cudaError_t err = cudaGetLastError(); // as ZINF_CUDA_LAUNCHED, with the op's name
    return err == cudaSuccess ? ZINF_OK : cuda_fail_at(err, launch, __FILE__, __LINE__);
}

struct add_op {
    __device__ float operator()(float x, float y) const { return x + y; }
};
struct scale_op {
    float scale;
    __device__ float operator()(float x, float) const { return x * scale; }
};
struct cast_op { // widening to fp32 is exact: one rounding, at the store
    __device__ float operator()(float x, float) const { return x; }
};
struct accumulate_op { // the sum (0 for the first) plus x
    __device__ float operator()(float x, float sum) const { return sum + x; }
};

template <typename T> static zinf_status add_t(cudaStream_t st, const op_elementwise *e) {
    return flat_t(st, (T *)e->out, (const T *)e->a, (const T *)e->b, e->n, add_op{}, "add launch");
}

template <typename T> static zinf_status scale_t(cudaStream_t st, const op_elementwise *e) {
    return flat_t(st, (T *)e->out, (const T *)e->out, (const T *)nullptr, e->n, scale_op{e->scale}, "scale launch");
}

template <typename D, typename S> static zinf_status cast_t(cudaStream_t st, const op_elementwise *e) {
    return flat_t(st, (D *)e->out, (const S *)e->a, (const S *)nullptr, e->n, cast_op{}, "cast launch");
}

template <typename D> static zinf_status cast_to(cudaStream_t st, const op_elementwise *e) {
    switch (e->src_dt) {
    case ZINF_DTYPE_F32: return cast_t<D, float>(st, e);
    case ZINF_DTYPE_BF16: return cast_t<D, __nv_bfloat16>(st, e);
    case ZINF_DTYPE_F16: return cast_t<D, __half>(st, e);
    default: return cuda_bad_dtype(e->src_dt, "cast");
    }
}

template <typename S> static zinf_status accumulate_t(cudaStream_t st, const op_elementwise *e) {
    const float *sums = e->first ? nullptr : (const float *)e->out; // the first's sums are not read
    return flat_t(st, (float *)e->out, (const S *)e->a, sums, e->n, accumulate_op{}, "accumulate launch");
}

zinf_status cuda_accumulate(cudaStream_t st, const op_elementwise *e) {
    if (e->n == 0) return ZINF_OK;
    CUDA_DT_SWITCH(e->src_dt, "accumulate", accumulate_t, st, e);
}

zinf_status cuda_add(cudaStream_t st, zinf_dtype dt, const op_elementwise *e) {
    if (e->n == 0) return ZINF_OK;
    CUDA_DT_SWITCH(dt, "add", add_t, st, e);
}

zinf_status cuda_scale(cudaStream_t st, zinf_dtype dt, const op_elementwise *e) {
    if (e->n == 0) return ZINF_OK;
    CUDA_DT_SWITCH(dt, "scale", scale_t, st, e);
}

zinf_status cuda_cast(cudaStream_t st, zinf_dtype dst_dt, const op_elementwise *e) {
    if (e->n == 0) return ZINF_OK;
    CUDA_DT_SWITCH(dst_dt, "cast", cast_to, st, e);
}

// ---- sum of squares ----
// In fp64, where a float's square is exact. The elements go in groups of eight (one
// 16-byte load of 16-bit values, two of fp32: flat8), SUMSQ_UNROLL groups a thread a
// tile, all loaded before any is summed, so that a thread keeps 64 bytes in flight
// (with two bytes a load the sums ran at a third of the H200's bandwidth). A piece of n
// elements gets G blocks, G set by n alone; its block b sums tiles b, b + G, b + 2G,
// ...; thread t the groups t, t + SUMSQ_THREADS, ... of each, element by element, in
// that order; then the block's threads fold in a fixed tree, and one more block a piece
// sums its G partials in order. So a piece's result repeats bit for bit whatever pieces
// share its launch, at any alignment: a group that is not 16-byte aligned, or the last,
// shorter one, goes one element at a time in the same order. The pieces of a launch
// (up to SUMSQ_PIECES: a step's modules in two or three launches, not two each) take
// consecutive blocks. The partials live in the stream's cuBLASLt workspace, which no
// other kernel on the stream uses meanwhile.
enum { SUMSQ_THREADS = 256, SUMSQ_UNROLL = 4, SUMSQ_TILE = 8 * SUMSQ_UNROLL * SUMSQ_THREADS, SUMSQ_BLOCKS = 1024 };

// A launch's pieces, by value: piece p's blocks are [first_block[p], first_block[p + 1]).
typedef struct sumsq_pieces {
    const void *x[SUMSQ_PIECES];
    size_t n[SUMSQ_PIECES];
    double *out[SUMSQ_PIECES];
    int first_block[SUMSQ_PIECES + 1];
    int count;
} sumsq_pieces;

static __device__ __forceinline__ int not_finite(float v) { return (__float_as_uint(v) & 0x7f800000u) == 0x7f800000u; }

// The block's sum of s and or of bad, in a fixed tree over the block's shared part and
// flag (NT each); thread 0's return values.
template <int NT> static __device__ __forceinline__ double block_sum(double s, int *bad, double *part, int *flag) {
    int t = threadIdx.x;
    part[t] = s;
    flag[t] = *bad;
    __syncthreads();
    for (int w = NT / 2; w > 0; w >>= 1) {
        if (t < w) {
            part[t] += part[t + w];
            flag[t] |= flag[t + w];
        }
        __syncthreads();
    }
    *bad = flag[0];
    return part[0];
}

template <typename T>
static __global__ void __launch_bounds__(SUMSQ_THREADS)
    sumsq_blocks_kernel(sumsq_pieces ps, double *partial, int *partial_bad) {
    __shared__ double part[SUMSQ_THREADS];
    __shared__ int flag[SUMSQ_THREADS];
    SHARED_FRESH(part, flag);
    int p = 0;
    while (p + 1 < ps.count && (int)blockIdx.x >= ps.first_block[p + 1])
        p++;
    const T *x = (const T *)ps.x[p];
    const size_t n = ps.n[p];
    const int b = (int)blockIdx.x - ps.first_block[p], blocks = ps.first_block[p + 1] - ps.first_block[p];
    const bool vec = (uintptr_t)x % 16 == 0; // every whole group can go as flat8 loads
    double s = 0.0;
    int nonfinite = 0;
    for (size_t tile = b; tile * SUMSQ_TILE < n; tile += blocks) {
        float v[SUMSQ_UNROLL][8];
#pragma unroll
        for (int k = 0; k < SUMSQ_UNROLL; k++) {
            const size_t i0 = tile * SUMSQ_TILE + 8 * ((size_t)k * SUMSQ_THREADS + threadIdx.x);
            if (vec && i0 + 8 <= n)
                flat8<T>::load(v[k], x + i0);
            else
#pragma unroll
                for (int e = 0; e < 8; e++)
                    v[k][e] = i0 + e < n ? to_f32(x[i0 + e]) : 0.0f; // a zero adds nothing
        }
#pragma unroll
        for (int k = 0; k < SUMSQ_UNROLL; k++)
#pragma unroll
            for (int e = 0; e < 8; e++) {
                s = fma((double)v[k][e], (double)v[k][e], s);
                nonfinite |= not_finite(v[k][e]);
            }
    }
    s = block_sum<SUMSQ_THREADS>(s, &nonfinite, part, flag);
    if (threadIdx.x == 0) partial[blockIdx.x] = s, partial_bad[blockIdx.x] = nonfinite;
}

// Block p: piece p's partials.
static __global__ void __launch_bounds__(SUMSQ_BLOCKS)
    sumsq_total_kernel(sumsq_pieces ps, const double *partial, const int *partial_bad) {
    __shared__ double part[SUMSQ_BLOCKS];
    __shared__ int flag[SUMSQ_BLOCKS];
    SHARED_FRESH(part, flag);
    const int p = blockIdx.x, t = threadIdx.x, first = ps.first_block[p], blocks = ps.first_block[p + 1] - first;
    int nonfinite = t < blocks ? partial_bad[first + t] : 0;
    double s = block_sum<SUMSQ_BLOCKS>(t < blocks ? partial[first + t] : 0.0, &nonfinite, part, flag);
    if (t == 0) {
        ps.out[p][0] = s;
        ps.out[p][1] = nonfinite ? 1.0 : 0.0;
    }
}

template <typename T> static zinf_status sumsq_t(cuda_stream *cs, const op_sumsq *o) {
    sumsq_pieces ps = {};
    ps.count = o->n;
    for (int p = 0; p < o->n; p++) {
        size_t tiles = (o->pieces[p].n + SUMSQ_TILE - 1) / SUMSQ_TILE;
        int blocks = tiles == 0 ? 1 : tiles < SUMSQ_BLOCKS ? (int)tiles : SUMSQ_BLOCKS; // n == 0 still writes its zeros
        ps.x[p] = o->pieces[p].x, ps.n[p] = o->pieces[p].n, ps.out[p] = o->pieces[p].out;
        ps.first_block[p + 1] = ps.first_block[p] + blocks;
    }
    double *partial = (double *)cs->d_lt_ws;
    int *partial_bad = (int *)(partial + SUMSQ_PIECES * SUMSQ_BLOCKS);
    sumsq_blocks_kernel<T> CUDA_LAUNCH((unsigned)ps.first_block[o->n], SUMSQ_THREADS, 0, cs->st)(ps, partial,
                                                                                                 partial_bad);
    ZINF_CUDA_LAUNCHED("sumsq_blocks_kernel");
    sumsq_total_kernel CUDA_LAUNCH((unsigned)o->n, SUMSQ_BLOCKS, 0, cs->st)(ps, partial, partial_bad);
    ZINF_CUDA_LAUNCHED("sumsq_total_kernel");
    return ZINF_OK;
}

zinf_status cuda_sumsq(cuda_stream *cs, zinf_dtype dt, const op_sumsq *o) {
    if (o->n == 0) return ZINF_OK;
    CUDA_DT_SWITCH(dt, "sumsq", sumsq_t, cs, o);
}

// ---- communication quantizers (ZeRO++ qwZ, qgZ) ----
// The host backend's arithmetic (gpu/host/ops.c), one group per tile of threads: a warp
// for groups of up to QUANT_WARP_MAX elements, the whole block for larger ones, each
// tile striding over the groups. The absmax is a max over the bit patterns of |x|,
// which order as the values do for non-negative floats and put inf (0x7f800000) and
// every NaN above them: one exact reduction that also finds the non-finite groups.
// Double division rounds correctly in CUDA (only fp32 division has an approximate
// mode), and -fmad=false keeps the dequantize product and sum two roundings, as in C.

enum { QUANT_THREADS = 256, QUANT_WARP_MAX = 1024 };

// The max of v over a tile of NT threads: 32 (a warp, no barrier, so warps may run
// different groups) or QUANT_THREADS (the block). red: QUANT_THREADS / 32 of shared memory.
template <int NT> static __device__ __forceinline__ unsigned tile_max(unsigned v, unsigned *red) {
    for (int o = 16; o > 0; o >>= 1) {
        unsigned u = __shfl_xor_sync(0xffffffffu, v, o);
        v = u > v ? u : v;
    }
    if constexpr (NT == 32) {
        (void)red;
        return v;
    } else {
        __syncthreads(); // red may still be read by the previous group's reduction
        if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
        __syncthreads();
        unsigned r = red[0];
        for (int w = 1; w < NT / 32; w++)
            r = red[w] > r ? red[w] : r;
        return r;
    }
}

// The quantized value of x in a group of absmax a (finite and nonzero).
static __device__ __forceinline__ int quant_one(float x, int Q, float a) {
    double r = rint((double)x * Q / (double)a);
    return r < -Q ? -Q : r > Q - 1 ? Q - 1 : (int)r;
}

template <typename T, int NT>
static __global__ void __launch_bounds__(QUANT_THREADS)
    quantize_kernel(const T *x, size_t n, size_t group, int bits, void *q, float *scale) {
    __shared__ unsigned red[QUANT_THREADS / 32];
    SHARED_FRESH(red);
    const int tiles = QUANT_THREADS / NT;
    int lane = threadIdx.x % NT, Q = 1 << (bits - 1);
    size_t groups = (n + group - 1) / group;
    for (size_t j = (size_t)blockIdx.x * tiles + threadIdx.x / NT; j < groups; j += (size_t)gridDim.x * tiles) {
        size_t g0 = j * group, len = n - g0 < group ? n - g0 : group;
        unsigned m = 0;
        for (size_t i = lane; i < len; i += NT) {
            unsigned b = __float_as_uint(to_f32(x[g0 + i])) & 0x7fffffffu;
            m = b > m ? b : m;
        }
        m = tile_max<NT>(m, red);
        bool bad = m >= 0x7f800000u, zero = bad || m == 0;
        float a = __uint_as_float(m);
        if (lane == 0) scale[j] = bad ? __uint_as_float(0x7fc00000u) : m == 0 ? 1.0f : __fdiv_rn(a, (float)Q);
        if (bits == 8) {
            for (size_t i = lane; i < len; i += NT)
                ((int8_t *)q)[g0 + i] = (int8_t)(zero ? 0 : quant_one(to_f32(x[g0 + i]), Q, a));
            continue;
        }
        // One thread per byte: elements i and i + 1 of the group (g0 is even); an odd
        // last element leaves the high nibble 0.
        for (size_t i = 2 * (size_t)lane; i < len; i += 2 * (size_t)NT) {
            int lo = zero ? 0 : quant_one(to_f32(x[g0 + i]), Q, a);
            int hi = zero || i + 1 == len ? 0 : quant_one(to_f32(x[g0 + i + 1]), Q, a);
            ((uint8_t *)q)[(g0 + i) / 2] = (uint8_t)((lo & 15) | (hi & 15) << 4);
        }
    }
}

template <typename T>
static __global__ void dequantize_kernel(const void *q, const float *scale, size_t n, size_t group, int bits, T *out,
                                         bool accumulate) {
    EW_LOOP(i, n) {
        int v;
        if (bits == 8) {
            v = ((const int8_t *)q)[i];
        } else {
            v = (((const uint8_t *)q)[i / 2] >> (4 * (i & 1))) & 15;
            v = v >= 8 ? v - 16 : v; // two's complement nibble
        }
        float p = __fmul_rn((float)v, scale[i / group]);
        store_f32(&out[i], accumulate ? __fadd_rn(to_f32(out[i]), p) : p);
    }
}

template <typename T, int NT> static zinf_status quantize_nt(cudaStream_t st, const op_quantize *a) {
    size_t groups = (a->n + a->group - 1) / a->group, tiles = QUANT_THREADS / NT;
    size_t blocks = (groups + tiles - 1) / tiles;
    unsigned grid = (unsigned)(blocks < 65536 ? blocks : 65536); // the tiles stride over the rest
    quantize_kernel<T, NT> CUDA_LAUNCH(grid, QUANT_THREADS, 0, st)((const T *)a->x, a->n, a->group, a->bits, a->q,
                                                                   a->scale);
    ZINF_CUDA_LAUNCHED("quantize_kernel");
    return ZINF_OK;
}

template <typename T> static zinf_status quantize_t(cudaStream_t st, const op_quantize *a) {
    return a->group <= QUANT_WARP_MAX ? quantize_nt<T, 32>(st, a) : quantize_nt<T, QUANT_THREADS>(st, a);
}

template <typename T> static zinf_status dequantize_t(cudaStream_t st, const op_quantize *a) {
    dequantize_kernel<T> CUDA_LAUNCH(ew_blocks(a->n), EW_THREADS, 0, st)(a->q, a->scale, a->n, a->group, a->bits,
                                                                         (T *)a->out, a->accumulate);
    ZINF_CUDA_LAUNCHED("dequantize_kernel");
    return ZINF_OK;
}

zinf_status cuda_quantize(cudaStream_t st, zinf_dtype dt, const op_quantize *a) {
    if (a->n == 0) return ZINF_OK;
    CUDA_DT_SWITCH(dt, "quantize", quantize_t, st, a);
}

zinf_status cuda_dequantize(cudaStream_t st, zinf_dtype dt, const op_quantize *a) {
    if (a->n == 0) return ZINF_OK;
    CUDA_DT_SWITCH(dt, "dequantize", dequantize_t, st, a);
}

// ---- optimizer ----
// adam_elem, adagrad_elem and lion_elem of cpu_adam/internal.h, operation for
// operation. nvcc contracts a * b + c into an fma by default (--fmad=true), which
// the host build forbids (-ffp-contract=off); the _rn intrinsics are never contracted,
// so each operation rounds exactly where the C code rounds.

static __device__ __forceinline__ float sign_of(float x) { return (float)((x > 0.0f) - (x < 0.0f)); } // 0 for NaN

static __device__ __forceinline__ void adam_elem(const zinf_optim_consts &c, float &p, float &m, float &v, float g) {
    if (c.scale != 1.0f) g = __fmul_rn(g, c.scale);
    float x = __fmul_rn(p, c.decay);
    if (c.l2 != 0.0f) g = __fmaf_rn(c.l2, x, g);
    float mm = __fmaf_rn(c.b1c, __fsub_rn(g, m), m);
    float vv = __fmaf_rn(__fmul_rn(c.b2c, g), g, __fmul_rn(v, c.b2));
    float den = __fmaf_rn(__fsqrt_rn(vv), c.inv_bc2_sqrt, c.eps);
    p = __fadd_rn(x, __fdiv_rn(__fmul_rn(c.neg_step, mm), den));
    m = mm;
    v = vv;
}

static __device__ __forceinline__ void adagrad_elem(const zinf_optim_consts &c, float &p, float &v, float g) {
    if (c.scale != 1.0f) g = __fmul_rn(g, c.scale);
    float x = p;
    if (c.l2 != 0.0f) g = __fmaf_rn(c.l2, x, g);
    float vv = __fmaf_rn(g, g, v);
    float den = __fadd_rn(__fsqrt_rn(vv), c.eps);
    p = __fadd_rn(x, __fdiv_rn(__fmul_rn(c.neg_step, g), den));
    v = vv;
}

static __device__ __forceinline__ void lion_elem(const zinf_optim_consts &c, float &p, float &m, float g) {
    if (c.scale != 1.0f) g = __fmul_rn(g, c.scale);
    float x = __fmul_rn(p, c.decay);
    float u = sign_of(__fmaf_rn(g, c.b1c, __fmul_rn(m, c.b1)));
    p = __fmaf_rn(c.neg_step, u, x);
    m = __fmaf_rn(g, c.b2c, __fmul_rn(m, c.b2));
}

// Elements [i, i + W) of every array the optimizer uses (the others are not touched:
// they may be NULL), W = 8 as flat8 loads and stores, W = 1 one at a time; without
// States, the new weights' 16-bit copy alone is stored.
template <typename G, int W, bool States = true>
static __device__ __forceinline__ void optim_step(const zinf_optim_consts &c, const zinf_optim_tile &t, size_t i) {
    float g[W], p[W], m[W], v[W];
    const bool moment = c.kind != ZINF_OPTIM_ADAGRAD, square = c.kind != ZINF_OPTIM_LION;
    if constexpr (W == 8) {
        flat8<G>::load(g, (const G *)t.grad + i), flat8<float>::load(p, t.param + i);
        if (moment) flat8<float>::load(m, t.exp_avg + i);
        if (square) flat8<float>::load(v, t.exp_avg_sq + i);
    } else {
        g[0] = to_f32(((const G *)t.grad)[i]), p[0] = t.param[i];
        if (moment) m[0] = t.exp_avg[i];
        if (square) v[0] = t.exp_avg_sq[i];
    }
#pragma unroll
    for (int k = 0; k < W; k++)
        switch (c.kind) {
        case ZINF_OPTIM_ADAM:
        case ZINF_OPTIM_ADAMW: adam_elem(c, p[k], m[k], v[k], g[k]); break;
        case ZINF_OPTIM_ADAGRAD: adagrad_elem(c, p[k], v[k], g[k]); break;
        case ZINF_OPTIM_LION: lion_elem(c, p[k], m[k], g[k]); break;
        }
    if constexpr (W == 8) {
        if constexpr (States) {
            flat8<float>::store(t.param + i, p);
            if (moment) flat8<float>::store(t.exp_avg + i, m);
            if (square) flat8<float>::store(t.exp_avg_sq + i, v);
        }
        if (t.out_dtype == ZINF_DTYPE_BF16) flat8<__nv_bfloat16>::store((__nv_bfloat16 *)t.out + i, p);
        if (t.out_dtype == ZINF_DTYPE_F16) flat8<__half>::store((__half *)t.out + i, p);
    } else {
        if constexpr (States) {
            t.param[i] = p[0];
            if (moment) t.exp_avg[i] = m[0];
            if (square) t.exp_avg_sq[i] = v[0];
        }
        if (t.out_dtype == ZINF_DTYPE_BF16) ((__nv_bfloat16 *)t.out)[i] = __float2bfloat16_rn(p[0]);
        if (t.out_dtype == ZINF_DTYPE_F16) ((__half *)t.out)[i] = __float2half_rn(p[0]);
    }
}

// Eight elements a thread a step where every array is 16-byte aligned, as buffers from
// the device are, in 16-byte loads and stores as the flat kernels take them (one element
// a thread left the H200 at 79% of its bandwidth on Llama-3.2-1B's 1.2 billion,
// 2026-11-27); the last n % 8, and arrays that are not aligned, one at a time. Each
// element's arithmetic is the same either way, so the bits are too.
template <typename G> static __global__ void optim_kernel(zinf_optim_consts c, zinf_optim_tile t, size_t n8) {
    EW_LOOP(q, n8) optim_step<G, 8>(c, t, 8 * q);
    EW_LOOP(i, t.n - 8 * n8) optim_step<G, 1>(c, t, 8 * n8 + i);
}

// Every array 16-byte aligned: the flat8 loads and stores may be used.
static bool optim_aligned(const zinf_optim_tile &t) {
    return ((uintptr_t)t.param | (uintptr_t)t.exp_avg | (uintptr_t)t.exp_avg_sq | (uintptr_t)t.grad |
            (uintptr_t)t.out) %
               16 ==
           0;
}

template <typename G> static zinf_status optim_t(cudaStream_t st, const op_optim *o) {
    const zinf_optim_tile &t = o->t;
    const size_t n8 = optim_aligned(t) ? t.n / 8 : 0;
    optim_kernel<G> CUDA_LAUNCH(ew_blocks(n8 + (t.n - 8 * n8)), EW_THREADS, 0, st)(o->c, t, n8);
    ZINF_CUDA_LAUNCHED("optim_kernel");
    return ZINF_OK;
}

zinf_status cuda_optim(cudaStream_t st, const op_optim *o) {
    if (o->t.n == 0) return ZINF_OK;
    CUDA_DT_SWITCH(o->t.grad_dtype, "optim", optim_t, st, o);
}

// The new weights of the given rows alone, W elements a thread a step (8 where rows
// of whole 16-byte chunks start aligned): per element the kernel above's arithmetic.
template <typename G, int W>
static __global__ void optim_rows_kernel(zinf_optim_consts c, zinf_optim_tile t, const int32_t *rows, int count,
                                         int row_len) {
    const size_t per_row = (size_t)row_len / W, rows_in_tile = t.n / row_len;
    EW_LOOP(q, (size_t)count * per_row) {
        size_t k = q / per_row;
        int64_t r = rows ? rows[k] : (int64_t)k;
        if (r < 0 || (size_t)r >= rows_in_tile) continue; // not wholly inside the tile
        optim_step<G, W, false>(c, t, (size_t)r * row_len + W * (q % per_row));
    }
}

template <typename G> static zinf_status optim_rows_t(cudaStream_t st, const op_optim *o) {
    const bool vec = optim_aligned(o->t) && o->row_len % 8 == 0;
    const size_t items = (size_t)o->count * (vec ? o->row_len / 8 : o->row_len);
    if (vec)
        optim_rows_kernel<G, 8> CUDA_LAUNCH(ew_blocks(items), EW_THREADS, 0, st)(o->c, o->t, o->rows, o->count,
                                                                                 o->row_len);
    else
        optim_rows_kernel<G, 1> CUDA_LAUNCH(ew_blocks(items), EW_THREADS, 0, st)(o->c, o->t, o->rows, o->count,
                                                                                 o->row_len);
    ZINF_CUDA_LAUNCHED("optim_rows_kernel");
    return ZINF_OK;
}

zinf_status cuda_optim_rows(cudaStream_t st, const op_optim *o) {
    CUDA_DT_SWITCH(o->t.grad_dtype, "optim_rows", optim_rows_t, st, o);
}
