// The CUDA attention's plan: the tiles of its kernels for a head size and the bytes of
// its workspace. Plain arithmetic, shared by the kernels (gpu/cuda/attention.cu) and the
// front end, which sizes the workspace and refuses what the kernels cannot take for any
// backend without a device (the sim device takes what CUDA would).
#ifndef ZINF_GPU_ATTENTION_PLAN_H
#define ZINF_GPU_ATTENTION_PLAN_H

#include <stddef.h>

// The largest head size the kernels take: a head's channels are padded to the next of
// 32, 64, 128 or 256 (ATT_HD_PAD), and every tile of a kernel stays within the 48 KiB of
// static shared memory any launch may use, without opting in to more.
#define ATT_MAX_HD     256
#define ATT_HD_PAD(hd) ((hd) <= 32 ? 32 : (hd) <= 64 ? 64 : (hd) <= 128 ? 128 : 256)

// Queries (BR) and keys (BC) per tile, by padded head size. Forward: a query tile,
// a key tile and a value tile of fp32 rows and the BR x BC scores; backward: query,
// output-gradient, key and value tiles and two BR x BC tiles (P and dS).
#define ATT_FWD_BR(HD) ((HD) <= 128 ? 32 : 16)
#define ATT_FWD_BC(HD) ((HD) <= 64 ? 32 : (HD) <= 128 ? 16 : 8)
#define ATT_BWD_BR(HD) ((HD) <= 64 ? 32 : (HD) <= 128 ? 16 : 8)
#define ATT_BWD_BC(HD) ((HD) <= 64 ? 32 : (HD) <= 128 ? 16 : 8)

// The workspace, fp32: the backward's D = rowsum(dO * O), (B, NH, T), a number per
// query row (flash attention 2's D_i). O(T), never the T x T scores.
static inline size_t att_workspace_bytes(int B, int T, int NH) { return (size_t)B * NH * T * sizeof(float); }

#endif
