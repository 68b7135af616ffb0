// The plan zinf train prints before step 1 and zinf estimate prints without running:
// what lives where and how many bytes, per rank. One printer, so that the two say the
// same thing in the same words (tests/cli/test_estimate.sh compares them).
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const char *sz(int64_t bytes, char *buf) { return zinf_size_format((uint64_t)bytes, buf, 32); }

void cli_print_plan(FILE *f, const cli_plan *p) {
    const zinf_config *c = p->cfg;
    const zinf_gpt_shape *s = &p->shape;
    const zinf_engine_memory m = p->mem;
    const char *dt = c->bf16 ? "bf16" : c->fp16.enabled ? "fp16" : "fp32";
    int stage = (int)c->zero.stage, world = p->world;
    char b[8][32];
    fprintf(f, "plan: GPT n_layer %d n_head %d n_embd %d vocab %d (%.2f M parameters), %s, ZeRO stage %d over %d "
                    "rank%s (%s)\n",
            s->n_layer, s->n_head, s->n_embd, s->vocab_size, (double)m.model_numel / 1e6, dt, stage, world,
            world > 1 ? "s" : "", p->comm);
    fprintf(f, "  batch %lld = micro %lld x accumulation %lld x %d rank%s, %d tokens each",
            (long long)c->train_batch_size, (long long)c->train_micro_batch_size_per_gpu,
            (long long)c->gradient_accumulation_steps, world, world > 1 ? "s" : "", p->seq_len);
    if (p->windows >= 0)
        fprintf(f, "; data %s (%lld windows, %s)", c->data.path, (long long)p->windows,
                c->data.sampling == ZINF_SAMPLING_SEQUENTIAL ? "sequential" : "random");
    fprintf(f, "\n");
    const zinf_offload_param_config *op = &c->zero.offload_param;
    const char *pin = op->pin_memory ? "pinned" : "pageable";
    switch (m.params_tier) {
    case ZINF_OFFLOAD_NONE:
        fprintf(f, "  per rank, parameters on the device: %s (%s)\n", sz(m.params16, b[0]),
                stage == 3 ? "its slices; modules gathered as they run" : "full");
        break;
    case ZINF_OFFLOAD_CPU:
        fprintf(f, "  per rank, parameters offloaded to cpu: %s (its slices, in %s host memory; modules copied to "
                        "the device and gathered as they run)\n",
                sz(m.params16, b[0]), pin);
        break;
    case ZINF_OFFLOAD_NVME:
        fprintf(f, "  per rank, parameters offloaded to nvme: %s (its slices): ", sz(m.params16, b[0]));
        if (m.params_resident)
            fprintf(f, "%s of the first %d module%s in %s host memory (max_in_cpu), ", sz(m.params_host, b[0]),
                    m.params_resident, m.params_resident == 1 ? "" : "s", pin);
        fprintf(f, "%s on NVMe read ahead through %d buffers of %s\n", sz(m.params16 - m.params_host, b[0]),
                m.param_buffers, sz(m.param_buffer_bytes, b[1]));
        break;
    }
    const zinf_offload_optimizer_config *oo = &c->zero.offload_optimizer;
    bool nvme = m.optimizer_tier == ZINF_OFFLOAD_NVME;
    if (m.optimizer_tier == ZINF_OFFLOAD_NONE)
        fprintf(f, "  per rank, optimizer on the device: %s fp32 master, %s optimizer states, %s fp32 gradients "
                        "(partition of %lld elements)\n",
                sz(m.master, b[0]), sz(m.optim_states, b[1]), sz(m.grads32, b[2]), (long long)m.partition_numel);
    else
        fprintf(f, "  per rank, optimizer offloaded to %s: %s fp32 master and %s optimizer states %s, %s fp32 "
                        "gradients in %s host memory (partition of %lld elements); %d sub-group%s of up to %lld "
                        "elements%s\n",
                nvme ? "nvme" : "cpu", sz(m.master, b[0]), sz(m.optim_states, b[1]),
                nvme ? "on NVMe" : oo->pin_memory ? "in pinned host memory" : "in host memory", sz(m.grads32, b[2]),
                oo->pin_memory ? "pinned" : "pageable", (long long)m.partition_numel, m.subgroups,
                m.subgroups == 1 ? "" : "s", (long long)m.subgroup_max,
                nvme ? (oo->pipeline_read && oo->pipeline_write ? ", reads and writes pipelined"
                        : oo->pipeline_read                     ? ", reads pipelined"
                        : oo->pipeline_write                    ? ", writes pipelined"
                                                                : ", not pipelined")
                     : "");
    fprintf(f, "  per rank, device: %s activations, %s gradient buckets; %s in use of %s\n", sz(m.activations, b[0]),
            sz(m.reduce_bufs, b[1]), sz(m.device_in_use, b[2]),
            m.device_capacity > 0 ? sz(m.device_capacity, b[3]) : "the GPU's memory");
    fprintf(f, "  per rank, host: %s, of which pinned %s", sz(m.host_total, b[0]), sz(m.pinned, b[1]));
    if (m.pinned_budget >= 0) fprintf(f, " of a %s budget", sz(m.pinned_budget, b[2]));
    fprintf(f, " (communication staging %s); NVMe: %s", sz(m.staging, b[3]), m.nvme ? sz(m.nvme, b[4]) : "none");
    // Each tier's paths, once.
    const zinf_path_list *lists[2] = {&oo->nvme_path, &op->nvme_path};
    bool used[2] = {nvme, m.params_tier == ZINF_OFFLOAD_NVME && m.param_buffers > 0};
    const char *sep = " under ";
    for (int l = 0; l < 2; l++)
        for (int i = 0; used[l] && i < lists[l]->count; i++) {
            bool seen = false;
            for (int k = 0; l == 1 && used[0] && k < lists[0]->count; k++)
                seen |= strcmp(lists[0]->paths[k], lists[1]->paths[i]) == 0;
            if (seen) continue;
            fprintf(f, "%s%s", sep, lists[l]->paths[i]);
            sep = ", ";
        }
    fprintf(f, "\n");
}
