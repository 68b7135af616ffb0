// The sim device's model: GPU presets from the vendors' data sheets and the time each
// op class takes on them. Rates are peaks times the fraction of peak an op class
// reaches in practice, each chosen below with its reason; docs/performance.md lists
// them for users.
#include <math.h>
#include <stdio.h>
#include <string.h>

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
        // Large bf16 products under cuBLASLt run at about 70% of the dense peak on H100
        // and A100; smaller ones do worse, which the roofline below partly captures.
        .matmul_eff = 0.70,
        // FlashAttention-2 reaches up to 73% of peak forward and 63% backward on A100
        // at long sequences, and about 35-50% on H100; zinf models the middle.
        .attn_fwd_eff = 0.45,
        .attn_bwd_eff = 0.35,
        // Row kernels (norms, softmax, optimizer) stream at about 80% of HBM peak.
        .hbm_eff = 0.80,
        // Pinned copies reach about 82% of the link (26 GB/s on Gen4 x16, 52 on Gen5);
        // pageable ones are staged by the driver through a pinned buffer.
        .pcie_pinned_eff = 0.82,
        .pcie_pageable_eff = 0.40,
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
    double es = (double)zinf_dtype_size(dt), peak = dt == ZINF_DTYPE_F32 ? r->flops32 : r->flops16;
    double compute = 2 * m * n * k * batch / (peak * r->matmul_eff);
    double memory = (m * k + k * n + m * n) * es * batch / (r->hbm * r->hbm_eff);
    return r->launch_s + (compute > memory ? compute : memory);
}

// Visible (query, key) pairs of one head: T(T+1)/2 causal, fewer under a window.
static double visible_pairs(int T, int window) {
    double t = T, w = window > 0 && window < T ? window : T;
    return w * (w + 1) / 2 + (t - w) * w;
}

double zinf_sim_attention_s(const zinf_sim_rates *r, zinf_dtype dt, int B, int T, int NH, int NKV, int hd, int window,
                            bool backward) {
    double es = (double)zinf_dtype_size(dt), peak = dt == ZINF_DTYPE_F32 ? r->flops32 : r->flops16;
    double flops = 4.0 * hd * visible_pairs(T, window) * B * NH * (backward ? 2.5 : 1);
    double compute = flops / (peak * (backward ? r->attn_bwd_eff : r->attn_fwd_eff));
    // q, k, v in and out (and their gradients backward) cross memory once each.
    double qkv = (double)B * T * (NH + 2.0 * NKV) * hd * es, o = (double)B * T * NH * hd * es;
    double memory = (backward ? 2 * qkv + 2 * o : qkv + o) / (r->hbm * r->hbm_eff);
    return r->launch_s + (compute > memory ? compute : memory);
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
    case OP_CROSS_ENTROPY: return (op->u.xent.dlogits ? 2.0 : 1.0) * op->u.xent.rows * op->u.xent.V * es;
    case OP_EMBEDDING_FWD:
    case OP_EMBEDDING_BWD: return 2.0 * op->u.emb.B * op->u.emb.T * op->u.emb.C * es;
    case OP_CAST: return (double)op->u.ew.n * (es + (double)zinf_dtype_size(op->u.ew.src_dt));
    case OP_SUMSQ: return (double)op->u.ew.n * es;
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
    default: return 0;
    }
}

double sim_op_seconds(const zinf_sim_rates *r, const op_record *op) {
    switch (op->kind) {
    case OP_GEMM: {
        const zinf_gemm_args *g = &op->u.gemm;
        return zinf_sim_matmul_s(r, g->dt, g->m, g->n, g->k, g->batch > 1 ? g->batch : 1);
    }
    case OP_COLLECTIVE: return op->u.seconds;
    case OP_ATTENTION_FWD:
    case OP_ATTENTION_BWD: {
        const zinf_attention_args *a = &op->u.attn;
        return zinf_sim_attention_s(r, a->dt, a->B, a->T, a->NH, a->NKV, a->hd, a->window,
                                    op->kind == OP_ATTENTION_BWD);
    }
    default: return zinf_sim_memory_s(r, op_bytes(op));
    }
}
