// The plan zinf train prints before it allocates and zinf estimate prints without
// running: what lives where and how many bytes, per rank, what a step moves, and the
// budgets' verdict. One printer, so that the two say the same thing in the same words
// (tests/cli/test_estimate.sh compares them).
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const char *sz(int64_t bytes, char *buf) { return zinf_size_format((uint64_t)bytes, buf, 32); }

// "needs of has", and by how much it is over.
static void budget(FILE *f, const char *what, const zinf_plan_budget *x, const char *of, const char *unknown) {
    char a[32], b[32], c[32];
    if (x->have < 0) {
        fprintf(f, "%s %s of %s", what, sz(x->need, a), unknown);
        return;
    }
    fprintf(f, "%s %s of %s%s", what, sz(x->need, a), sz(x->have, b), of);
    if (x->need > x->have) fprintf(f, " (%s over)", sz(x->need - x->have, c));
}

static void print_verdict(FILE *f, const zinf_plan *r) {
    static const char *const says[] = {"fits", "does not fit", "fits as far as is known"};
    fprintf(f, "  verdict: %s: ", says[r->fit]);
    budget(f, "device peak", &r->device, "", "a capacity not known (set device.memory_limit)");
    budget(f, ", pinned", &r->pinned, " budgeted", "");
    budget(f, ", host", &r->host, " available", "");
    fprintf(f, "\n");
}

void cli_print_plan(FILE *f, const cli_plan *p) {
    const zinf_config *c = p->cfg;
    const zinf_model_shape *s = &p->shape;
    const zinf_plan *r = p->plan;
    const zinf_engine_memory m = r->mem;
    const char *dt = c->bf16 ? "bf16" : c->fp16.enabled ? "fp16" : "fp32";
    int stage = (int)c->zero.stage, world = p->target->world;
    const char *comm = world == 1                                 ? "single"
                       : p->target->backend == ZINF_BACKEND_SIM ? "sim: modeled links" // zinf_comm_name, once made
                       : p->target->nccl                          ? "nccl"
                                                                  : "mpi";
    char b[8][32], what[256];
    zinf_model_shape_describe(s, what, sizeof what);
    fprintf(f, "plan: %s (%.2f M parameters), %s, ZeRO stage %d over %d rank%s (%s)\n", what,
            (double)m.model_numel / 1e6, dt, stage, world, world > 1 ? "s" : "", comm);
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
        fprintf(f,
                "  per rank, parameters offloaded to cpu: %s (its slices, in %s host memory; modules copied to "
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
    if (m.hpz_ranks > 1)
        fprintf(f, "  per rank, hpZ secondary partition: %s %s (gathers after a module's first in a step stay in groups "
                   "of %d ranks)\n",
                sz(m.secondary, b[0]), m.params_tier == ZINF_OFFLOAD_NONE ? "on the device" : "in pinned host memory",
                m.hpz_ranks);
    const zinf_offload_optimizer_config *oo = &c->zero.offload_optimizer;
    bool nvme = m.optimizer_tier == ZINF_OFFLOAD_NVME;
    if (m.optimizer_tier == ZINF_OFFLOAD_NONE)
        fprintf(f,
                "  per rank, optimizer on the device: %s fp32 master, %s optimizer states, %s%s (partition of %lld "
                "elements)\n",
                sz(m.master, b[0]), sz(m.optim_states, b[1]), m.grads32 ? sz(m.grads32, b[2]) : "",
                m.grads32 ? " fp32 gradients" : "no fp32 gradients: the step reads the backward's",
                (long long)m.partition_numel);
    else
        fprintf(f,
                "  per rank, optimizer offloaded to %s: %s fp32 master and %s optimizer states %s, %s fp32 "
                "gradients in %s host memory (partition of %lld elements); %d sub-group%s of up to %lld "
                "elements%s; also in host memory: 16-bit output buffers %s%s%s\n",
                nvme ? "nvme" : "cpu", sz(m.master, b[0]), sz(m.optim_states, b[1]),
                nvme             ? "on NVMe"
                : oo->pin_memory ? "in pinned host memory"
                                 : "in host memory",
                sz(m.grads32, b[2]), oo->pin_memory ? "pinned" : "pageable", (long long)m.partition_numel, m.subgroups,
                m.subgroups == 1 ? "" : "s", (long long)m.subgroup_max,
                nvme ? (oo->pipeline_read && oo->pipeline_write ? ", reads and writes pipelined"
                        : oo->pipeline_read                     ? ", reads pipelined"
                        : oo->pipeline_write                    ? ", writes pipelined"
                                                                : ", not pipelined")
                     : "",
                sz(m.optim_output, b[3]), nvme ? ", swap buffers " : "", nvme ? sz(m.optim_swap_buffers, b[4]) : "");
    if (m.optimizer_device_numel)
        fprintf(
            f,
            "  per rank, offload_optimizer.ratio %g: the first %d sub-group%s (%lld elements of the partition) keep "
            "their fp32 master, optimizer states and fp32 gradients on the device (%s), updated there in the "
            "step; the rest above are offloaded\n",
            oo->ratio, m.subgroups_on_device, m.subgroups_on_device == 1 ? "" : "s",
            (long long)m.optimizer_device_numel, sz(16 * m.optimizer_device_numel, b[0]));
    zinf_sim_rates sim;
    zinf_sim_rates_of(&c->device.sim, &sim);
    fprintf(f, "  per rank, device: %s activations", sz(m.activations, b[0]));
    if (m.reduce_bufs) fprintf(f, ", %s gradient buckets", sz(m.reduce_bufs, b[1]));
    if (m.accumulated_grads) fprintf(f, ", %s accumulated gradients (stage 1)", sz(m.accumulated_grads, b[0]));
    fprintf(f, "; %s in use of %s%s%s\n", sz(m.device_in_use, b[2]),
            m.device_capacity > 0 ? sz(m.device_capacity, b[3]) : "the GPU's memory",
            p->target->backend == ZINF_BACKEND_SIM ? " on a simulated " : "",
            p->target->backend == ZINF_BACKEND_SIM ? sim.name : "");
    fprintf(f, "  per rank, host: %s, of which pinned %s", sz(m.host_total, b[0]), sz(m.pinned, b[1]));
    if (m.pinned_budget >= 0) fprintf(f, " of a %s budget", sz(m.pinned_budget, b[2]));
    fprintf(f, " (communication staging %s", sz(m.staging, b[3]));
    if (m.activation_host) fprintf(f, "; activation checkpoints %s", sz(m.activation_host, b[5]));
    fprintf(f, "); NVMe: %s", m.nvme ? sz(m.nvme, b[4]) : "none");
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
    fprintf(f,
            "  per rank, per step: device peak %s (%s gathered parameters at most); host<->device %s up, %s down; "
            "NVMe %s read, %s written\n",
            sz(r->device_peak, b[0]), sz(r->gathered_peak, b[1]), sz(r->h2d, b[2]), sz(r->d2h, b[3]),
            sz(r->nvme_read, b[4]), sz(r->nvme_write, b[5]));
    if (r->tiled[0]) fprintf(f, "  gathered and computed tile by tile (memory.tile_bound): %s\n", r->tiled);
    if (r->comm_intra || r->comm_inter)
        fprintf(f, "  from the other ranks, per rank and step: %s in its node, %s across nodes\n",
                sz(r->comm_intra, b[0]), sz(r->comm_inter, b[1]));
    const zinf_plan_choice *ch = &r->choice;
    // The cores are this process's: under mpirun each rank's may be fewer (bound to its cores).
    if (m.optimizer_tier != ZINF_OFFLOAD_NONE)
        fprintf(f, "  CPU Adam: %d thread%s (cpuadam_cores_perc %g of this process's cores)\n", m.optimizer_threads,
                m.optimizer_threads == 1 ? "" : "s", oo->cpuadam_cores_perc);
    if (oo->device != ZINF_OFFLOAD_NONE && oo->super_offload) {
        // The second place of the sub-groups' states (12 bytes an element) and their held
        // 16-bit (or fp32) parameters.
        int64_t es = c->bf16 || c->fp16.enabled ? 2 : 4, n = ch->speculate_elements;
        const char *budget = nvme ? "the host memory and the drives" : "the host memory";
        if (n)
            fprintf(f,
                    "  update under the backward (super_offload): sub-groups of up to %lld elements at once, %.0f%% of "
                    "the partition (%s of spare states %s, %s of held parameters in host memory%s%s%s)\n",
                    (long long)n, 100.0 * (double)n / (double)ch->partition_numel, sz(n * 12, b[0]),
                    nvme ? "in swap files" : "in host memory", sz(n * es, b[1]),
                    n < ch->partition_numel ? "; half of what the plan leaves free of " : "",
                    n < ch->partition_numel ? budget : "", n < ch->partition_numel ? " holds no more" : "");
        else
            fprintf(f,
                    "  update under the backward (super_offload): none, half of what the plan leaves free of %s "
                    "holds no sub-group's second place\n",
                    budget);
    }
    if (ch->reduce_bucket_size || ch->sub_group_size || ch->head_chunk_tokens) {
        fprintf(f, "  chosen for this machine (the config leaves them out):");
        const char *semi = "";
        if (ch->reduce_bucket_size)
            fprintf(f, " reduce_bucket_size %lld (DeepSpeed's 5e8 would keep %s of fp32 buckets on the device)",
                    (long long)ch->reduce_bucket_size, sz(2 * (int64_t)500000000 * 4, b[0])), semi = ";";
        if (ch->sub_group_size)
            fprintf(f, "%s sub_group_size %lld (%s)", semi, (long long)ch->sub_group_size,
                    c->zero.offload_optimizer.device == ZINF_OFFLOAD_NVME
                        ? "1e9 would pin three states of up to a billion elements in swap buffers"
                        : "with 1e9 the next forward would wait for the whole update, not just its first sub-group"),
                semi = ";";
        if (ch->head_chunk_tokens) {
            int64_t tokens = c->train_micro_batch_size_per_gpu * p->seq_len, es = c->bf16 || c->fp16.enabled ? 2 : 4;
            fprintf(
                f,
                "%s memory.head_chunk_tokens %lld (the logits of all %lld tokens at once would take %s, leaving less "
                "than an eighth of the device free)",
                semi, (long long)ch->head_chunk_tokens, (long long)tokens,
                sz(tokens * zinf_model_vocab_padded(s) * es, b[1]));
        }
        fprintf(f, "\n");
    }
    print_verdict(f, r);
}
