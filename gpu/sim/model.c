// The sim device's model: GPU presets from the vendors' data sheets and the time each
// op class takes on them. Rates are peaks times the fraction of peak zinf's kernels
// reach, measured on an H100 (zinf device-bench) and carried to the other presets;
// each is given below with its source, and docs/performance.md lists them for users.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../attention_plan.h"
#include "sim.h"

typedef struct preset {
    const char *key, *name;
    double tflops16, tflops32, hbm_gbps, pcie_gbps, nvlink_gbps, net_gbps;
    uint64_t mib; // the card's memory as nvidia-smi reports it
} preset;

// Dense (no sparsity) bf16 tensor peaks with fp32 accumulation, fp32 non-tensor peaks
// (zinf's fp32 products never use TF32), memory bandwidth, the PCIe link's rate each
// way (Gen4 x16 32 GB/s, Gen5 x16 64 GB/s), NVLink each way (half the data sheet's
// bidirectional 900 and 600 GB/s; the RTX 4090 has none, its peers talk over PCIe), and
// the network adapter each GPU has in the DGX-class node it comes in (400 Gb/s NDR for
// H100 and H200, 200 Gb/s HDR for A100, 100 Gb/s for a workstation card).
static const preset presets[] = {
    [ZINF_SIM_H100] = {"h100", "H100 SXM5 80GB", 989.4, 66.9, 3350, 64, 450, 50, 81559},
    [ZINF_SIM_H200] = {"h200", "H200 SXM 141GB", 989.4, 66.9, 4800, 64, 450, 50, 143771},
    [ZINF_SIM_A100] = {"a100", "A100 SXM4 80GB", 312, 19.5, 2039, 32, 300, 25, 81920},
    [ZINF_SIM_RTX4090] = {"rtx4090", "GeForce RTX 4090", 165.2, 82.6, 1008, 32, 32, 12.5, 24564},
};

const char *zinf_sim_gpu_name(zinf_sim_gpu g) {
    return (unsigned)g < ZINF_ARRAY_LEN(presets) ? presets[g].key : "unknown";
}

void zinf_sim_rates_of(const zinf_sim_params *p, zinf_sim_rates *out) {
    const preset *k = &presets[(unsigned)p->gpu < ZINF_ARRAY_LEN(presets) ? p->gpu : ZINF_SIM_H100];
    bool custom = p->tflops > 0 || p->hbm_gbps > 0 || p->pcie_gbps > 0 || p->memory > 0 || p->nvlink_gbps > 0 ||
                  p->net_gbps > 0;
    double tf = p->tflops > 0 ? p->tflops : k->tflops16;
    *out = (zinf_sim_rates){
        .flops16 = tf * 1e12,
        .flops32 = k->tflops32 * (tf / k->tflops16) * 1e12,
        .hbm = (p->hbm_gbps > 0 ? p->hbm_gbps : k->hbm_gbps) * 1e9,
        .pcie = (p->pcie_gbps > 0 ? p->pcie_gbps : k->pcie_gbps) * 1e9,
        .nvlink = (p->nvlink_gbps > 0 ? p->nvlink_gbps : k->nvlink_gbps) * 1e9,
        .net = (p->net_gbps > 0 ? p->net_gbps : k->net_gbps) * 1e9,
        .memory = p->memory > 0 ? (uint64_t)p->memory : k->mib << 20,
        // zinf's own kernels as they ran on an H100 80GB HBM3 (zinf device-bench --shapes,
        // GPT-2 124M and large and Llama-3.2-1B at 8 x 1024 tokens, 2026-11-23): a 16-bit
        // product under cuBLASLt takes its FLOPs at a fraction of the dense peak plus 5 us
        // beyond the launch (within 10% from 10 to 550 GFLOP), an fp32 one 0.68 of the
        // fp32 peak, and a 16-bit product with a side that is not a multiple of 8 (GPT-2's
        // vocabulary of 50257) only 0.125, since cuBLASLt cannot use its fast tensor-core
        // kernels on such rows. The 16-bit fraction is 0.76: the three models' products
        // over parameters of a model's magnitude on an H200 (2026-11-27, commit ded3409),
        // as a training step runs them; over zeroed parameters, which draw less power,
        // they ran at 0.88.
        .matmul_eff = 0.76,
        .matmul_fixed_s = 5e-6,
        .matmul32_eff = 0.68,
        .unaligned_eff = 0.125,
        // Kernels bound by memory stream at about 80% of HBM peak; zinf's row kernels
        // reach less (kernel_hbm_frac below).
        .hbm_eff = 0.80,
        // Pinned copies of 1 GiB moved 55 GB/s each way on the H100's Gen5 x16 link (zinf
        // io-bench --h2d --d2h); pageable ones, staged by the driver through a pinned
        // buffer, 9.2 up and 13.3 down.
        .pcie_pinned_eff = 0.86,
        .pcie_pageable_eff = 0.17,
        // NCCL's bus bandwidth for large messages is about 80% of NVLink's and of the
        // network's rate.
        .link_eff = 0.80,
        // Back-to-back kernels on one stream start a few microseconds apart.
        .launch_s = 4e-6,
    };
    snprintf(out->name, sizeof out->name, "%s%s", k->name, custom ? " (custom rates)" : "");
}

double zinf_sim_memory_s(const zinf_sim_rates *r, double bytes) {
    return r->launch_s + bytes / (r->hbm * r->hbm_eff);
}

double zinf_sim_matmul_s(const zinf_sim_rates *r, zinf_dtype dt, double m, double n, double k, double batch) {
    double es = (double)zinf_dtype_size(dt);
    bool aligned = fmod(m, 8) == 0 && fmod(n, 8) == 0 && fmod(k, 8) == 0;
    double rate = dt == ZINF_DTYPE_F32 ? r->flops32 * r->matmul32_eff
                                       : r->flops16 * (aligned ? r->matmul_eff : r->unaligned_eff);
    double compute = 2 * m * n * k * batch / rate + (dt == ZINF_DTYPE_F32 ? 0 : r->matmul_fixed_s);
    double memory = (m * k + k * n + m * n) * es * batch / (r->hbm * r->hbm_eff);
    return r->launch_s + (compute > memory ? compute : memory);
}

// The fractions of the 16-bit tensor peak the tensor-core attention kernels (tiles by
// cp.async, fragments by ldmatrix) reached, counting the FLOPs of the pairs a query sees:
// GPT-2 124M 0.100 forward and 0.143 backward, GPT-2 large 0.111 and 0.148, Llama-3.2-1B
// 0.109 and 0.143 (8 x 1024, bf16, head size 64, zinf device-bench on an H200,
// 2026-11-27, commit ded3409); the means.
static const double attention_tensor_fwd_eff = 0.107, attention_tensor_bwd_eff = 0.145;

// cuDNN 9.19's fused attention, the same count and runs: GPT-2 124M 0.258 forward and
// 0.260 backward, GPT-2 large 0.276 and 0.276, Llama-3.2-1B 0.276 and 0.263; the means.
static const double attention_cudnn_fwd_eff = 0.270, attention_cudnn_bwd_eff = 0.266;

// The (query, key) pairs T queries see: T (T + 1) / 2 causal, fewer with a window.
static double seen_pairs(double T, double window) {
    if (window <= 0 || window >= T) return T * (T + 1) / 2;
    return window * (window + 1) / 2 + (T - window) * window; // the first window queries see t + 1 keys
}

double zinf_sim_attention_s(const zinf_sim_rates *r, zinf_dtype dt, int B, int T, int NH, int hd, int window,
                            bool backward) {
    double pair_flops = (backward ? 7 : 2) * 2.0 * seen_pairs(T, window) * B * NH;
    bool cudnn = r->attention != ZINF_ATTENTION_ZINF && dt != ZINF_DTYPE_F32 && hd % 8 == 0 && hd <= 256 && T >= 2;
    if (cudnn)
        return r->launch_s +
               pair_flops * hd / (r->flops16 * (backward ? attention_cudnn_bwd_eff : attention_cudnn_fwd_eff));
    double flops = pair_flops * ATT_HD_PAD(hd);
    bool tensor = dt != ZINF_DTYPE_F32 && hd > 32 && hd <= 128 && hd % 8 == 0; // rows copied 16 bytes at a time
    double rate = tensor ? r->flops16 * (backward ? attention_tensor_bwd_eff : attention_tensor_fwd_eff)
                         : r->flops32 * r->matmul32_eff;
    return r->launch_s + flops / rate;
}

double zinf_sim_copy_s(const zinf_sim_rates *r, double bytes, bool pinned) {
    return bytes / (r->pcie * (pinned ? r->pcie_pinned_eff : r->pcie_pageable_eff));
}

double zinf_sim_collective_s(const zinf_sim_rates *r, double intra, double inter) {
    return r->launch_s + intra / (r->nvlink * r->link_eff) + inter / (r->net * r->link_eff);
}

// Bytes a memory-bound op reads and writes.
static double op_bytes(const op_record *op) {
    double es = (double)zinf_dtype_size(op->dt);
    switch (op->kind) {
    case OP_BIAS_GRAD: return ((double)op->u.ew.n * op->u.ew.cols + op->u.ew.cols) * es;
    case OP_LAYERNORM_FWD:
    case OP_RMSNORM_FWD: return 2.0 * op->u.ln.rows * op->u.ln.C * es;
    case OP_LAYERNORM_BWD:
    case OP_RMSNORM_BWD: return 3.0 * op->u.ln.rows * op->u.ln.C * es;
    case OP_GELU_FWD:
    case OP_SCALE: return 2.0 * (double)op->u.ew.n * es;
    case OP_GELU_BWD:
    case OP_ADD: return 3.0 * (double)op->u.ew.n * es;
    case OP_SWIGLU_FWD: return 3.0 * (double)op->u.ew.n * op->u.ew.cols * es;
    case OP_SWIGLU_BWD: return 5.0 * (double)op->u.ew.n * op->u.ew.cols * es;
    case OP_ROPE_FWD:
    case OP_ROPE_BWD: {
        const op_rope *p = &op->u.rope;
        return 2.0 * p->B * p->T * (p->NH + p->NKV) * p->hd * es;
    }
    case OP_CROSS_ENTROPY: // the logits read, and with the gradient a padded row written
        return ((double)op->u.xent.V + (op->u.xent.dlogits ? op->u.xent.ld : 0)) * op->u.xent.rows * es;
    case OP_CROSS_ENTROPY_GRAD: // the block's logits read and gradient written, a row's lse and target read
        return op->u.xgrad.rows * (2.0 * op->u.xgrad.n * es + 8.0);
    case OP_EMBEDDING_FWD:
    case OP_EMBEDDING_BWD: return 2.0 * op->u.emb.B * op->u.emb.T * op->u.emb.C * es;
    case OP_CAST: return (double)op->u.ew.n * (es + (double)zinf_dtype_size(op->u.ew.src_dt));
    case OP_ACCUMULATE: // the sums written, and read unless first
        return (double)op->u.ew.n * ((op->u.ew.first ? 1 : 2) * es + (double)zinf_dtype_size(op->u.ew.src_dt));
    case OP_SUMSQ: {
        double n = 0;
        for (int i = 0; i < op->u.sumsq.n; i++)
            n += (double)op->u.sumsq.pieces[i].n;
        return n * es;
    }
    case OP_QUANTIZE:
    case OP_DEQUANTIZE: {
        const op_quantize *q = &op->u.quant;
        double packed = (double)q->n * q->bits / 8, scales = 4.0 * (double)((q->n + q->group - 1) / q->group);
        double wide = (double)q->n * es * (op->kind == OP_DEQUANTIZE && q->accumulate ? 2 : 1);
        return packed + scales + wide;
    }
    case OP_OPTIM: { // fp32 weights and both moments read and written, the gradient read, the copy written
        const zinf_optim_tile *t = &op->u.optim.t;
        return (double)t->n * (24 + (double)zinf_dtype_size(t->grad_dtype) +
                               (t->out ? (double)zinf_dtype_size(t->out_dtype) : 0));
    }
    case OP_OPTIM_ROWS: { // the rows' fp32 weights and moments and gradients read, the copy written
        const zinf_optim_tile *t = &op->u.optim.t;
        return (double)op->u.optim.count * op->u.optim.row_len *
               (12 + (double)zinf_dtype_size(t->grad_dtype) + (double)zinf_dtype_size(t->out_dtype));
    }
    default: return 0;
    }
}

// The fraction of HBM peak zinf's memory-bound kernels reached (bf16, the shapes above;
// 0: not measured, the generic hbm_eff), on an H200 at commit ded3409 (2026-11-27): the
// means over GPT-2 124M and large, or Llama-3.2-1B's for its own ops; the sum of squares
// in Llama-3.2-1B's training step (zinf train --op-profile). The cross-entropy's (the
// mean over GPT-2 124M and Llama-3.2-1B), SwiGLU's and the RMSNorm backward's are the
// kernels of 20b34a7, timed the same day. The row kernels reduce in
// fp32 over 16-bit rows, and the embedding's, the bias's and the norms' weight gradients
// reduce across rows, which streams well short of the bandwidth.
static const double kernel_hbm_frac[] = {
    [OP_ADD] = 0.63,
    [OP_GELU_FWD] = 0.46,
    [OP_GELU_BWD] = 0.57,
    [OP_SWIGLU_FWD] = 0.70,
    [OP_SWIGLU_BWD] = 0.76,
    [OP_LAYERNORM_FWD] = 0.58,
    [OP_LAYERNORM_BWD] = 0.28,
    [OP_RMSNORM_FWD] = 0.66,
    [OP_RMSNORM_BWD] = 0.42,
    [OP_BIAS_GRAD] = 0.51,
    [OP_CROSS_ENTROPY] = 0.54,
    [OP_EMBEDDING_FWD] = 0.14,
    [OP_EMBEDDING_BWD] = 0.15,
    [OP_ROPE_FWD] = 0.67,
    [OP_ROPE_BWD] = 0.67,
    [OP_SUMSQ] = 0.61,
    // The add's and GELU's are an H100's (2026-11-23): these models run neither alone
    // (the products' epilogues add the residual and apply GELU). The accumulation's is
    // the add's: the same loop over a second type.
    [OP_ACCUMULATE] = 0.63,
};

double sim_op_seconds(const zinf_sim_rates *r, const op_record *op) {
    switch (op->kind) {
    case OP_GEMM: {
        const zinf_gemm_args *g = &op->u.gemm;
        // A GELU epilogue writes (or DGELU reads) the activation's input as well, and a
        // residual is read.
        double aux = ((g->act != ZINF_GEMM_PLAIN) + (g->residual != NULL)) * (double)g->m * g->n *
                     (double)zinf_dtype_size(g->dt);
        return zinf_sim_matmul_s(r, g->dt, g->m, g->n, g->k, g->batch > 1 ? g->batch : 1) + aux / (r->hbm * r->hbm_eff);
    }
    case OP_COLLECTIVE: return op->u.seconds;
    case OP_ATTENTION_FWD:
    case OP_ATTENTION_BWD: {
        const zinf_attention_args *a = &op->u.attn;
        return zinf_sim_attention_s(r, a->dt, a->B, a->T, a->NH, a->hd, a->window, op->kind == OP_ATTENTION_BWD);
    }
    default: {
        double frac = (size_t)op->kind < ZINF_ARRAY_LEN(kernel_hbm_frac) ? kernel_hbm_frac[op->kind] : 0;
        return frac > 0 ? r->launch_s + op_bytes(op) / (r->hbm * frac) : zinf_sim_memory_s(r, op_bytes(op));
    }
    }
}
