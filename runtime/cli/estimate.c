// zinf estimate: what each ZeRO stage and offload choice needs per rank (device, pinned
// and pageable host memory, NVMe) and moves per optimizer step (host <-> device, NVMe),
// worked out without a device or an allocation by the engine's own rules: the flat
// layout (runtime/engine/layout.c), the parameter and optimizer tiers (param_tier.c,
// optim_tier.c), the gradient buckets and staging (reduce.c), the stage-3 coordinator
// (coordinator.c, replayed along the module trace) and GPT-2's modules, schedule and
// activations (runtime/models/gpt2.c, which has no allocation-free way to size them).
// Each figure names the engine code it mirrors: a change there must change it here;
// tests/cli/test_estimate.sh holds the two together against what `zinf train` measures.
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

enum { SLICE_ALIGN = 2048 }; // runtime/engine/internal.h: a rank's slice of a module is a multiple of it
enum { SWAP_ALIGN = 4096 };  // the swap store's alignment, the drive's logical block: 4 KiB assumed
enum { DEV_ALIGN = 256 };    // gpu/memory.c: device allocations are accounted in 256-byte units

static size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }
static int64_t dev_bytes(size_t bytes) { return (int64_t)round_up(bytes, DEV_ALIGN); }
static const char *sz(int64_t bytes, char *buf) { return zinf_size_format((uint64_t)bytes, buf, 32); }

static const char *const tier_name[] = {"none", "cpu", "nvme"};

// ---- the model: GPT-2's modules and schedule (gpt2.c build_tables, build_schedule) ----

typedef struct emod {
    size_t numel;                           // flat buffer elements, parameters at 64-element offsets
    size_t padded, slice, part_n, part_off; // layout.c
    int external;                           // the module whose parameters it also uses, or -1
    int last_bwd;                           // schedule index of its last backward use, or -1 (reduce.c)
} emod;

// One row of the estimate: a model, a world, a stage and two tiers, and what they need.
typedef struct plan {
    const zinf_config *cfg; // every other setting (sub_group_size, buffers, pin_memory, ...)
    zinf_gpt_shape s;
    int world, stage, micro, seq_len, ga;
    zinf_offload_device otier, ptier;
    zinf_dtype dt;
    size_t es;
    bool gpu;  // the cuda backend: its attention workspace, and NCCL between ranks
    bool nccl; // collectives on device buffers; else through pinned staging (reduce.c, engine.c)

    int nmod, nf, nall;
    emod *m;
    zinf_model_op *ops;
    size_t npart, bucket_cap;
    int64_t model_numel;

    // per rank, as zinf_engine_memory names them
    int64_t params16, params_host, param_buffer_bytes, master, optim_states, grads32;
    int params_resident, param_buffers, subgroups, nresident;
    int64_t subgroup_max, activations, reduce_bufs, staging, opt_host;
    int64_t device, device_peak, gathered_peak; // at the plan, at the busiest moment; gathered (stage 3)
    int64_t pinned, host_total, nvme;
    // per optimizer step, in steady state (the second step on: the first has no trace)
    int64_t h2d, d2h, nvme_read, nvme_write;
} plan;

// The parameters of one module in forward order: embedding, per layer attn and mlp,
// ln_f, head (tied to wte: no parameters of its own).
static size_t module_numel(const zinf_gpt_shape *s, int i) {
    size_t C = (size_t)s->n_embd, n = 0;
    int L = s->n_layer;
#define ADD(k) (n = round_up(n, 64) + (k))
    if (i == 0) {
        ADD((size_t)s->vocab_size * C), ADD((size_t)s->block_size * C);
    } else if (i == 1 + 2 * L) {
        ADD(C), ADD(C);
    } else if (i < 1 + 2 * L) { // ln, then attn: c_attn (C, 3C), c_proj (C, C); mlp: c_fc (C, 4C), c_proj (4C, C)
        bool attn = i % 2 == 1;
        size_t wide = attn ? 3 * C : 4 * C, in = attn ? C : 4 * C;
        ADD(C), ADD(C), ADD(C * wide), ADD(wide), ADD(in * C), ADD(C);
    }
#undef ADD
    return n;
}

static zinf_status build_model(plan *p) {
    int L = p->s.n_layer;
    p->nmod = 3 + 2 * L;
    p->m = calloc((size_t)p->nmod, sizeof *p->m);
    p->ops = calloc(2 * (size_t)p->nmod + 2 * (size_t)L, sizeof *p->ops);
    if (!p->m || !p->ops) return zinf_fail(ZINF_ERR_NOMEM, "estimate: out of memory");
    for (int i = 0; i < p->nmod; i++)
        p->m[i] = (emod){.numel = module_numel(&p->s, i), .external = i == 2 + 2 * L ? 0 : -1, .last_bwd = -1};
    int n = 0;
    for (int i = 0; i < p->nmod; i++)
        p->ops[n++] = (zinf_model_op){i, ZINF_PASS_FORWARD};
    p->nf = n;
    p->ops[n++] = (zinf_model_op){2 + 2 * L, ZINF_PASS_BACKWARD};
    p->ops[n++] = (zinf_model_op){1 + 2 * L, ZINF_PASS_BACKWARD};
    for (int l = L - 1; l >= 0; l--) {
        if (p->cfg->activation_checkpointing.enabled) {
            p->ops[n++] = (zinf_model_op){1 + 2 * l, ZINF_PASS_RECOMPUTE};
            p->ops[n++] = (zinf_model_op){2 + 2 * l, ZINF_PASS_RECOMPUTE};
        }
        p->ops[n++] = (zinf_model_op){2 + 2 * l, ZINF_PASS_BACKWARD};
        p->ops[n++] = (zinf_model_op){1 + 2 * l, ZINF_PASS_BACKWARD};
    }
    p->ops[n++] = (zinf_model_op){0, ZINF_PASS_BACKWARD};
    p->nall = n;
    for (int k = p->nf; k < p->nall; k++) {
        if (p->ops[k].pass != ZINF_PASS_BACKWARD) continue;
        emod *x = &p->m[p->ops[k].module];
        x->last_bwd = k;
        if (x->external >= 0 && k > p->m[x->external].last_bwd) p->m[x->external].last_bwd = k;
    }
    p->model_numel = zinf_gpt_param_count(&p->s);
    return ZINF_OK;
}

// layout.c: each module padded to world * SLICE_ALIGN; rank r's optimizer part is its
// slice (stages 1-3) or the whole buffer (stage 0). Every rank's sizes are the same.
static void build_layout(plan *p) {
    size_t W = (size_t)p->world, off = 0;
    for (int i = 0; i < p->nmod; i++) {
        emod *x = &p->m[i];
        x->padded = round_up(x->numel, W * SLICE_ALIGN);
        x->slice = x->padded / W;
        x->part_n = p->stage == 0 ? x->padded : x->slice;
        x->part_off = off;
        off += x->part_n;
    }
    p->npart = off;
}

// reduce.c plan_buckets: buckets of reduce_bucket_size / world elements per rank block,
// filled in the order backward finishes the modules, split where one fills.
static void build_buckets(plan *p) {
    size_t W = (size_t)p->world, per = (size_t)p->cfg->zero.reduce_bucket_size / W, block = 0;
    bool open = false;
    if (per == 0) per = 1;
    for (int k = p->nf; k < p->nall; k++)
        for (int i = 0; i < p->nmod; i++) {
            if (p->m[i].last_bwd != k || !p->m[i].padded) continue;
            for (size_t lo = 0; lo < p->m[i].slice;) {
                if (!open || block == per) block = 0, open = true;
                size_t n = p->m[i].slice - lo < per - block ? p->m[i].slice - lo : per - block;
                block += n, lo += n;
                if (W * block > p->bucket_cap) p->bucket_cap = W * block;
            }
        }
}

// ---- device memory ----

// gpu/cuda/attention.cu cuda_attention_workspace: heads in chunks whose two T x T fp32
// score matrices stay within 1 GiB; seven (chunk, T, hs) and two (chunk, T, T) fp32
// buffers, each 256-byte aligned. The host backend needs none.
static size_t cuda_attention_workspace(int B, int T, int C, int NH) {
    size_t BH = (size_t)B * NH, score = (size_t)T * T, chunk = ((size_t)1 << 30) / (2 * score * sizeof(float));
    if (chunk < 1) chunk = 1;
    if (chunk > BH) chunk = BH;
    size_t head = round_up(chunk * T * (size_t)(C / NH) * sizeof(float), 256);
    return 7 * head + 2 * round_up(chunk * score * sizeof(float), 256);
}

// gpt2.c alloc_acts and alloc_layer, buffer by buffer (each accounted in 256-byte units):
// what zinf_model_create takes on the device for a training model.
static int64_t activation_bytes(const plan *p) {
    const zinf_gpt_shape *s = &p->s;
    size_t BT = (size_t)p->micro * p->seq_len, C = (size_t)s->n_embd, es = p->es, f = 4;
    int L = s->n_layer, sets = p->cfg->activation_checkpointing.enabled ? 1 : L;
    // ln1, atty, res2, ln2; qkv; fch, fch_gelu; four layernorm statistics; attention's lse
    int64_t layer = 4 * dev_bytes(BT * C * es) + dev_bytes(BT * 3 * C * es) + 2 * dev_bytes(BT * 4 * C * es) +
                    4 * dev_bytes(BT * f) + dev_bytes(BT * (size_t)s->n_head * f);
    int64_t total = dev_bytes(BT * f) * 3 + dev_bytes(BT * C * es) * (1 + L) + layer * sets; // tokens, encoded, res3
    total += dev_bytes(BT * C * es) + dev_bytes(BT * f) * 2 + dev_bytes(BT * (size_t)s->vocab_size * es) +
             dev_bytes(BT * f); // lnf, its stats, logits, losses
    size_t ws = p->gpu ? cuda_attention_workspace(p->micro, p->seq_len, s->n_embd, s->n_head) : 0;
    if (ws) total += dev_bytes(ws);
    total += dev_bytes(BT * C * es) * 3 + dev_bytes(BT * 3 * C * es) +
             dev_bytes(BT * 4 * C * es); // dres dln datty, dqkv, dfch
    return total;
}

// What is on the device once the engine is made (engine.c create): activations, the
// 16-bit parameters (param_tier.c), the states of the device optimizer (optim_tier.c),
// the gradient-norm scratch and the two gradient buckets (reduce.c).
static void device_resident(plan *p) {
    int64_t d = p->activations = activation_bytes(p);
    if (p->stage < 3) {
        for (int i = 0; i < p->nmod; i++)
            if (p->m[i].padded) d += dev_bytes(p->m[i].padded * p->es);
    } else if (p->ptier == ZINF_OFFLOAD_NONE) {
        d += dev_bytes(p->npart * p->es);
    }
    if (p->otier == ZINF_OFFLOAD_NONE) d += 4 * dev_bytes(p->npart * sizeof(float));
    d += dev_bytes((size_t)p->nmod * p->world * 2 * sizeof(double));
    d += 2 * dev_bytes(p->bucket_cap * sizeof(float));
    p->reduce_bufs = (int64_t)(2 * p->bucket_cap * sizeof(float));
    p->device = d;
}

// ---- host memory and the swap store ----

// engine.c engine_host_alloc: every tier buffer counts in host memory, and in pinned
// memory when pinned.
static void host_alloc(plan *p, size_t bytes, bool pinned) {
    p->host_total += (int64_t)bytes;
    if (pinned) p->pinned += (int64_t)bytes;
}

// aio/file.c: a swap file is its size rounded up to the alignment, striped in units of
// aio.block_size over the paths, each path's file preallocated to a whole number of units.
static int64_t swap_file_bytes(const plan *p, size_t bytes, int npaths) {
    size_t unit = (size_t)p->cfg->aio.block_size, n = npaths > 0 ? (size_t)npaths : 1;
    size_t units = (round_up(bytes, SWAP_ALIGN) + unit - 1) / unit;
    return (int64_t)(n * ((units + n - 1) / n * unit));
}

// param_tier.c ptier_create (stage 3): the slices on the device, in host memory, or with
// nvme the modules within max_in_cpu elements in host memory and the rest on disk, read
// through buffer_count buffers as large as the largest slice on disk.
static void param_tier(plan *p) {
    const zinf_offload_param_config *pc = &p->cfg->zero.offload_param;
    for (int i = 0; i < p->nmod; i++)
        p->params16 += (int64_t)((p->stage == 3 ? p->m[i].slice : p->m[i].padded) * p->es);
    p->nresident = p->nmod;
    if (p->stage < 3 || p->ptier == ZINF_OFFLOAD_NONE) return;
    if (p->ptier == ZINF_OFFLOAD_CPU) {
        p->params_host = (int64_t)(p->npart * p->es);
        host_alloc(p, p->npart * p->es, pc->pin_memory);
        return;
    }
    int n = 0;
    while (n < p->nmod && (int64_t)(p->m[n].part_off + p->m[n].part_n) <= pc->max_in_cpu)
        n++;
    size_t resident_n = n < p->nmod ? p->m[n].part_off : p->npart, most = 0;
    p->nresident = p->params_resident = n;
    p->params_host = (int64_t)(resident_n * p->es);
    host_alloc(p, resident_n * p->es, pc->pin_memory);
    for (int i = n; i < p->nmod; i++)
        if (p->m[i].slice > most) most = p->m[i].slice;
    if (!most) return; // everything fits in max_in_cpu
    p->nvme += swap_file_bytes(p, (p->npart - resident_n) * p->es, pc->nvme_path.count);
    p->param_buffers = (int)pc->buffer_count;
    p->param_buffer_bytes = (int64_t)(most * p->es);
    for (int b = 0; b < p->param_buffers; b++)
        host_alloc(p, most * p->es, pc->pin_memory);
}

static bool on_disk(const plan *p, int i) {
    return p->stage == 3 && p->ptier == ZINF_OFFLOAD_NVME && i >= p->nresident && p->m[i].slice;
}

// optim_tier.c tier_create: the fp32 gradient partition, two 16-bit output buffers of a
// sub-group, and the states (cpu) or 1 + pipeline_read + pipeline_write buffers of the
// three states of the largest sub-group (nvme, one swap file per state).
static void optim_tier(plan *p) {
    const zinf_offload_optimizer_config *oc = &p->cfg->zero.offload_optimizer;
    size_t bytes = p->npart * sizeof(float), cap = (size_t)p->cfg->zero.sub_group_size, g = 0, most = 0;
    p->master = p->grads32 = (int64_t)bytes;
    p->optim_states = 2 * p->master;
    if (p->otier == ZINF_OFFLOAD_NONE) return;
    bool open = false;
    for (int i = 0; i < p->nmod; i++) { // plan_subgroups: closed where the next module would pass the cap
        size_t n = p->m[i].part_n;
        if (!n) continue;
        if (!open || g + n > cap) p->subgroups++, g = 0, open = true;
        g += n;
        if (g > most) most = g;
    }
    p->subgroup_max = (int64_t)most;
    int64_t before = p->host_total;
    host_alloc(p, bytes, oc->pin_memory);
    for (int b = 0; b < 2; b++)
        host_alloc(p, most * (p->dt == ZINF_DTYPE_F32 ? sizeof(float) : p->es), oc->pin_memory);
    if (p->otier == ZINF_OFFLOAD_CPU) {
        for (int s = 0; s < 3; s++)
            host_alloc(p, bytes, oc->pin_memory);
    } else {
        for (int s = 0; s < 3; s++)
            p->nvme += swap_file_bytes(p, bytes, oc->nvme_path.count);
        for (int b = 0; b < 1 + oc->pipeline_read + oc->pipeline_write; b++)
            host_alloc(p, 3 * most * sizeof(float), oc->pin_memory);
    }
    p->opt_host = p->host_total - before;
}

// reduce.c reduce_create: one pinned buffer stages every host collective and the
// gradients' way to the host: a bucket and one rank block, or one module's 16-bit buffer.
static void staging(plan *p) {
    bool host_grads = p->otier != ZINF_OFFLOAD_NONE, host_comm = p->world > 1 && !p->nccl;
    if (!host_grads && !host_comm) return;
    size_t bytes = 0, block = p->bucket_cap / (size_t)p->world;
    for (int i = 0; host_comm && i < p->nmod; i++)
        if (p->m[i].padded * p->es > bytes) bytes = p->m[i].padded * p->es;
    if ((p->bucket_cap + block) * sizeof(float) > bytes) bytes = (p->bucket_cap + block) * sizeof(float);
    p->staging = (int64_t)bytes;
    host_alloc(p, bytes, true);
}

// ---- a replay of the steps: what is on the device when, and what moves ----

// The engine's per-step device traffic beyond what is resident: the 16-bit gradient of
// each module from its first backward use to its reduction (engine.c need_grad,
// reduce.c), at stage 3 the gathered modules (coordinator.c: gathered on use and up
// to stage3_prefetch_bucket_size ahead along the trace within
// stage3_max_live_parameters, released after use unless smaller than
// stage3_param_persistence_threshold or used again within stage3_max_reuse_distance),
// and the scratch of the device optimizer's 16-bit output. Frees count at once: the
// engine frees after the stream passes, but waits for that before any allocation the
// device cannot hold, so this peak is the least memory that runs.
typedef struct sim {
    plan *p;
    bool *gathered, *grad;
    int *use_pos, *rec, nrec, *trace, ntrace, *next_use, pos;
    int *seen;       // per module: its next use walking the trace back
    int64_t *prefix; // numel of trace[0 .. i), for reuse distances
    bool have_trace;
    int64_t live, dev;
    int64_t *gathers; // per module, this step
} sim;

static void dev_take(sim *s, size_t bytes) {
    s->dev += dev_bytes(bytes);
    if (s->dev > s->p->device_peak) s->p->device_peak = s->dev;
}

static void gather(sim *s, int x) {
    plan *p = s->p;
    s->gathered[x] = true;
    s->live += (int64_t)p->m[x].padded;
    if (s->live * (int64_t)p->es > p->gathered_peak) p->gathered_peak = s->live * (int64_t)p->es;
    s->gathers[x]++;
    dev_take(s, p->m[x].padded * p->es);
}

static void use(sim *s, int x) {
    if (x < 0 || !s->p->m[x].padded) return;
    s->rec[s->nrec++] = x;
    s->use_pos[x] = -1;
    if (s->have_trace && s->pos >= 0) { // every step follows the trace: a departure is the engine's business
        if (s->pos < s->ntrace && s->trace[s->pos] == x)
            s->use_pos[x] = s->pos++;
        else
            s->pos = -1;
    }
    if (!s->gathered[x]) gather(s, x);
}

static bool keep(const sim *s, int x) {
    const zinf_zero_config *z = &s->p->cfg->zero;
    if ((int64_t)s->p->m[x].numel < z->param_persistence_threshold) return true;
    int at = s->use_pos[x];
    if (at < 0 || s->next_use[at] < 0) return false;
    return s->prefix[s->next_use[at]] - s->prefix[at + 1] <= z->max_reuse_distance;
}

static void release(sim *s, int x) {
    if (x < 0 || !s->gathered[x] || keep(s, x)) return;
    s->gathered[x] = false;
    s->live -= (int64_t)s->p->m[x].padded;
    s->dev -= dev_bytes(s->p->m[x].padded * s->p->es);
}

static void prefetch(sim *s) {
    const zinf_zero_config *z = &s->p->cfg->zero;
    int64_t ahead = 0;
    for (int i = s->pos; i < s->ntrace; i++) {
        int x = s->trace[i];
        if (s->gathered[x]) continue;
        int64_t n = (int64_t)s->p->m[x].padded;
        ahead += n;
        if (ahead > z->prefetch_bucket_size || s->live + n > z->max_live_parameters) break;
        gather(s, x);
    }
}

static void run_op(sim *s, const zinf_model_op *op) {
    if (s->p->stage < 3) return;
    int ext = s->p->m[op->module].external;
    use(s, op->module), use(s, ext);
    release(s, op->module), release(s, ext);
    if (s->have_trace && s->pos >= 0) prefetch(s);
}

static void need_grad(sim *s, int x) {
    if (x < 0 || s->grad[x] || !s->p->m[x].padded) return;
    s->grad[x] = true;
    dev_take(s, s->p->m[x].padded * s->p->es);
}

static void micro_batch(sim *s) {
    plan *p = s->p;
    for (int k = 0; k < p->nall; k++) {
        const zinf_model_op *op = &p->ops[k];
        if (op->pass == ZINF_PASS_BACKWARD) need_grad(s, op->module), need_grad(s, p->m[op->module].external);
        run_op(s, op);
        for (int i = 0; i < p->nmod; i++)
            if (p->m[i].last_bwd == k && s->grad[i]) {
                s->grad[i] = false;
                s->dev -= dev_bytes(p->m[i].padded * p->es);
            }
    }
}

// The step: step.c update's 16-bit scratch (a device optimizer writing slices that live
// in host memory), then coord_end_step: every gathered buffer goes, and the step's uses
// become the trace.
static void end_step(sim *s) {
    plan *p = s->p;
    if (p->stage == 3 && p->ptier != ZINF_OFFLOAD_NONE && p->otier == ZINF_OFFLOAD_NONE && p->dt != ZINF_DTYPE_F32)
        for (int i = 0; i < p->nmod; i++)
            if (p->m[i].padded) dev_take(s, p->m[i].part_n * p->es), s->dev -= dev_bytes(p->m[i].part_n * p->es);
    for (int i = 0; i < p->nmod; i++)
        if (s->gathered[i]) s->gathered[i] = false, s->dev -= dev_bytes(p->m[i].padded * p->es);
    s->live = 0;
    for (int i = 0; i < p->nmod; i++)
        s->seen[i] = -1;
    for (int i = s->nrec - 1; i >= 0; i--) {
        s->next_use[i] = s->seen[s->rec[i]];
        s->seen[s->rec[i]] = i;
    }
    s->prefix[0] = 0;
    for (int i = 0; i < s->nrec; i++) {
        s->trace[i] = s->rec[i];
        s->prefix[i + 1] = s->prefix[i] + (int64_t)p->m[s->rec[i]].numel;
    }
    s->ntrace = s->nrec, s->nrec = 0, s->pos = 0, s->have_trace = true;
}

// Two steps: the first gathers on demand and records the trace, the second (like every
// later one) follows it; gathers[] ends with the second step's gathers per module. The
// trace holds every use of the step's micro-batches, as the engine's does.
static zinf_status simulate(plan *p, int64_t *gathers) {
    size_t n = (size_t)p->nmod, uses = 2 * (size_t)p->nall * (size_t)p->ga;
    sim s = {.p = p, .gathers = gathers, .dev = p->device};
    s.gathered = calloc(n, sizeof *s.gathered), s.grad = calloc(n, sizeof *s.grad);
    s.use_pos = calloc(n, sizeof *s.use_pos), s.seen = calloc(n, sizeof *s.seen), s.rec = calloc(uses, sizeof *s.rec);
    s.trace = calloc(uses, sizeof *s.trace), s.next_use = calloc(uses, sizeof *s.next_use);
    s.prefix = calloc(uses + 1, sizeof *s.prefix);
    zinf_status st = s.gathered && s.grad && s.use_pos && s.seen && s.rec && s.trace && s.next_use && s.prefix
                         ? ZINF_OK
                         : zinf_fail(ZINF_ERR_NOMEM, "estimate: out of memory");
    p->device_peak = p->device;
    for (int step = 0; st == ZINF_OK && step < 2; step++) {
        memset(gathers, 0, n * sizeof *gathers);
        for (int k = 0; k < p->ga; k++)
            micro_batch(&s);
        end_step(&s);
    }
    free(s.gathered), free(s.grad), free(s.use_pos), free(s.seen), free(s.rec), free(s.trace), free(s.next_use);
    free(s.prefix);
    return st;
}

// Bytes moved per optimizer step, following the engine's copies: stage-3 gathers
// (engine.c engine_allgather: a slice in host memory goes up once, or through the
// staging buffer world-fold without NCCL), each micro-batch's gradient buckets to the
// host (reduce.c flush: the whole bucket, every rank's block, where a host collective
// needs it or at stage 0; with NCCL at stages 1-3 this rank's block), the new 16-bit
// parameters (optim_tier.c update_group, step.c update), the stage-1/2 all-gather
// without NCCL (step.c share_params), and on NVMe the three optimizer states read and
// written once, each gather of a slice on disk read once, and every slice on disk
// written once. The batch's tokens and losses (a few bytes per token) are left out.
static void traffic(plan *p, const int64_t *gathers) {
    size_t W = (size_t)p->world, pad4 = 0, slice4 = 0;
    bool staged = W > 1 && !p->nccl, offloaded = p->otier != ZINF_OFFLOAD_NONE;
    for (int i = 0; i < p->nmod; i++) {
        const emod *x = &p->m[i];
        size_t sb = x->slice * p->es;
        pad4 += x->padded * sizeof(float), slice4 += x->slice * sizeof(float);
        if (p->ptier != ZINF_OFFLOAD_NONE)
            p->h2d += gathers[i] * (int64_t)(staged ? W * sb : sb);
        else if (staged)
            p->d2h += gathers[i] * (int64_t)sb, p->h2d += gathers[i] * (int64_t)(W * sb);
        if (on_disk(p, i)) p->nvme_read += gathers[i] * (int64_t)sb, p->nvme_write += (int64_t)sb;
        if (p->stage >= 1 && p->stage <= 2 && staged && sb) p->d2h += (int64_t)sb, p->h2d += (int64_t)(W * sb);
    }
    if (staged) p->d2h += (int64_t)pad4 * p->ga;
    else if (offloaded) p->d2h += (int64_t)(p->stage > 0 && W > 1 ? slice4 : pad4) * p->ga;
    if (staged && !offloaded) p->h2d += (int64_t)(p->stage >= 2 ? slice4 : pad4) * p->ga;
    if (offloaded && (p->stage < 3 || p->ptier == ZINF_OFFLOAD_NONE)) p->h2d += (int64_t)(p->npart * p->es);
    if (!offloaded && p->stage == 3 && p->ptier != ZINF_OFFLOAD_NONE) p->d2h += (int64_t)(p->npart * p->es);
    if (p->otier == ZINF_OFFLOAD_NVME) {
        p->nvme_read += (int64_t)(3 * p->npart * sizeof(float));
        p->nvme_write += (int64_t)(3 * p->npart * sizeof(float));
    }
}

static zinf_status plan_make(plan *p) {
    p->es = zinf_dtype_size(p->dt);
    p->nccl = p->gpu && p->world > 1;
    ZINF_CHECK(build_model(p));
    build_layout(p);
    build_buckets(p);
    device_resident(p);
    param_tier(p);
    optim_tier(p);
    staging(p);
    int64_t *gathers = calloc((size_t)p->nmod, sizeof *gathers);
    if (!gathers) return zinf_fail(ZINF_ERR_NOMEM, "estimate: out of memory");
    zinf_status st = simulate(p, gathers);
    if (st == ZINF_OK) traffic(p, gathers);
    free(gathers);
    return st;
}

static void plan_free(plan *p) { free(p->m), free(p->ops); }

// ---- output ----

static json_t *row_json(const plan *p) {
    return json_pack("{s:i, s:s, s:s, s:i, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}", "stage",
                     p->stage, "optimizer", tier_name[p->otier], "params", tier_name[p->ptier], "world_size", p->world,
                     "model_numel", (json_int_t)p->model_numel, "partition_numel", (json_int_t)p->npart, "device_bytes",
                     (json_int_t)p->device, "device_peak_bytes", (json_int_t)p->device_peak, "gathered_peak_bytes",
                     (json_int_t)p->gathered_peak, "pinned_bytes", (json_int_t)p->pinned, "pageable_bytes",
                     (json_int_t)(p->host_total - p->pinned), "nvme_bytes", (json_int_t)p->nvme, "activation_bytes",
                     (json_int_t)p->activations, "pcie_h2d_bytes", (json_int_t)p->h2d, "pcie_d2h_bytes",
                     (json_int_t)p->d2h, "nvme_read_bytes", (json_int_t)p->nvme_read, "nvme_write_bytes",
                     (json_int_t)p->nvme_write);
}

// The config's own row: every figure of train's plan lines, in bytes.
static json_t *plan_json(const plan *p) {
    json_t *o = row_json(p);
    json_t *more = json_pack(
        "{s:b, s:I, s:I, s:i, s:i, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:i, s:I}", "plan", 1, "params16_bytes",
        (json_int_t)p->params16, "params_host_bytes", (json_int_t)p->params_host, "params_resident", p->params_resident,
        "param_buffers", p->param_buffers, "param_buffer_bytes", (json_int_t)p->param_buffer_bytes, "master_bytes",
        (json_int_t)p->master, "optim_states_bytes", (json_int_t)p->optim_states, "grads32_bytes",
        (json_int_t)p->grads32, "reduce_bucket_bytes", (json_int_t)p->reduce_bufs, "staging_bytes",
        (json_int_t)p->staging, "optimizer_host_bytes", (json_int_t)p->opt_host, "host_bytes",
        (json_int_t)p->host_total, "subgroups", p->subgroups, "subgroup_max", (json_int_t)p->subgroup_max);
    json_object_update(more, o); // "plan" first, then the row's keys
    json_decref(o);
    return more;
}

static void table_head(void) {
    printf("%-5s %-9s %-6s | %10s %10s | %10s %10s | %10s | %10s %10s | %10s %10s\n", "stage", "optimizer", "params",
           "device", "dev. peak", "pinned", "pageable", "NVMe", "PCIe h2d", "PCIe d2h", "NVMe read", "NVMe write");
}

static void table_row(const plan *p, bool mark) {
    char b[10][32];
    printf("%-5d %-9s %-6s | %10s %10s | %10s %10s | %10s | %10s %10s | %10s %10s%s\n", p->stage, tier_name[p->otier],
           tier_name[p->ptier], sz(p->device, b[0]), sz(p->device_peak, b[1]), sz(p->pinned, b[2]),
           sz(p->host_total - p->pinned, b[3]), sz(p->nvme, b[4]), sz(p->h2d, b[5]), sz(p->d2h, b[6]),
           sz(p->nvme_read, b[7]), sz(p->nvme_write, b[8]), mark ? "  <- this config" : "");
}

// zinf_comm_name of the run: one rank alone, NCCL on GPUs, else MPI through host memory.
static const char *comm_name(const plan *p) { return p->world == 1 ? "single" : p->nccl ? "nccl" : "mpi"; }

// The lines zinf train prints before step 1 (the same printer), for this plan. The
// device's capacity and the pinned budget depend on the machine unless the config sets
// them (device.memory_limit, device.pinned_memory_limit); the data windows come from
// the data file.
static void print_plan(const plan *p) {
    const zinf_config *c = p->cfg;
    char b[6][32];
    int64_t cap = c->device.memory_limit > 0 ? c->device.memory_limit
                  : p->gpu                   ? -1
                                             : (int64_t)ZINF_HOST_DEVICE_DEFAULT_LIMIT;
    cli_plan pl = {.cfg = c, .shape = p->s, .world = p->world, .seq_len = p->seq_len, .comm = comm_name(p),
                   .windows = -1};
    pl.mem = (zinf_engine_memory){
        .params_tier = p->ptier, .params16 = p->params16, .params_host = p->params_host,
        .params_resident = p->params_resident, .param_buffers = p->param_buffers,
        .param_buffer_bytes = p->param_buffer_bytes, .optimizer_tier = p->otier, .master = p->master,
        .optim_states = p->optim_states, .grads32 = p->grads32, .activations = p->activations,
        .reduce_bufs = p->reduce_bufs, .staging = p->staging, .pinned = p->pinned,
        .pinned_budget = c->device.pinned_memory_limit, .host_total = p->host_total, .nvme = p->nvme,
        .subgroups = p->subgroups, .subgroup_max = p->subgroup_max, .device_in_use = p->device,
        .device_capacity = cap, .partition_numel = (int64_t)p->npart, .model_numel = p->model_numel};
    zinf_tokens *tok = NULL;
    if (c->data.present && c->data.path && zinf_tokens_open(&tok, c->data.path, c->data.format) == ZINF_OK)
        pl.windows = zinf_tokens_windows(tok, p->seq_len);
    zinf_tokens_close(tok);
    cli_print_plan(stdout, &pl);
    // What the plan lines leave out: the busiest moment, and the traffic of a step.
    printf("  per rank, per step: device peak %s (%s gathered parameters at most); host<->device %s up, %s down; "
           "NVMe %s read, %s written\n",
           sz(p->device_peak, b[0]), sz(p->gathered_peak, b[1]), sz(p->h2d, b[2]), sz(p->d2h, b[3]),
           sz(p->nvme_read, b[4]), sz(p->nvme_write, b[5]));
}

// ---- the command ----

// A GPT-2-like shape for n parameters: GPT-2's vocabulary (50257), block size (1024)
// and head size (64), and of the n_layer and n_embd (a multiple of 64) with n_embd /
// n_layer from 48 to 80 (GPT-2 small's 64 in the middle) the pair whose count is
// nearest n; between equals, the aspect nearer 64.
static zinf_gpt_shape shape_for(uint64_t n) {
    zinf_gpt_shape best = {1, 1, 64, 50257, 1024};
    double best_err = INFINITY, best_aspect = INFINITY;
    for (int L = 1; L <= 4096; L++) {
        zinf_gpt_shape s = {L, 0, 0, 50257, 1024};
        for (int C = (48 * L + 63) / 64 * 64; C <= 80 * L; C += 64) {
            s.n_embd = C, s.n_head = C / 64;
            double count = (double)zinf_gpt_param_count(&s), err = fabs(count - (double)n);
            double aspect = fabs((double)C / L - 64);
            if (err < best_err || (err == best_err && aspect < best_aspect))
                best = s, best_err = err, best_aspect = aspect;
            if (C == (48 * L + 63) / 64 * 64 && count > 2.0 * (double)n) return best; // larger L only grow
        }
    }
    return best;
}

// The built-in config of --params: bf16, one sequence of block_size tokens per rank,
// every other setting zinf's default.
static int params_config(uint64_t n, int world, zinf_config *cfg) {
    zinf_gpt_shape s = shape_for(n);
    char json[512];
    snprintf(json, sizeof json,
             "{\"train_micro_batch_size_per_gpu\": 1, \"bf16\": {\"enabled\": true}, \"model\": {\"n_layer\": %d, "
             "\"n_head\": %d, \"n_embd\": %d, \"vocab_size\": %d, \"block_size\": %d}}",
             s.n_layer, s.n_head, s.n_embd, s.vocab_size, s.block_size);
    if (zinf_config_parse(cfg, json, "--params", &(zinf_config_options){.world_size = world}) != ZINF_OK)
        return cli_fail("estimate", CLI_FAIL);
    return CLI_OK;
}

typedef struct args {
    uint64_t params;
    const char *config;
    const char **sets;
    int nsets, gpus, nodes;
    bool json, have_params;
} args;

static int parse(args *a, int argc, char **argv) {
    static const struct option opts[] = {
        {"params", required_argument, NULL, 'n'},
        {"config", required_argument, NULL, 'c'},
        {"gpus-per-node", required_argument, NULL, 'g'},
        {"nodes", required_argument, NULL, 'k'},
        {"set", required_argument, NULL, 's'},
        {"json", no_argument, NULL, 'j'},
        {NULL, 0, NULL, 0},
    };
    int c, rc = CLI_OK;
    uint64_t v;
    opterr = 0;
    while (rc == CLI_OK && (c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'n':
            if (!cli_parse_count(optarg, 1e13, &a->params))
                rc = cli_usage("estimate", "--params: \"%s\" is not a count from 1 (e.g. 124000000, 1.5e9, 124M, 1.5B)",
                               optarg);
            a->have_params = true;
            break;
        case 'c': a->config = optarg; break;
        case 'g':
            rc = cli_parse_size("estimate", "--gpus-per-node", optarg, 1, 4096, &v);
            a->gpus = (int)v;
            break;
        case 'k':
            rc = cli_parse_size("estimate", "--nodes", optarg, 1, 1 << 20, &v);
            a->nodes = (int)v;
            break;
        case 's': a->sets[a->nsets++] = optarg; break;
        case 'j': a->json = true; break;
        default: rc = cli_usage("estimate", "unknown option %s", argv[optind - 1]); break;
        }
    }
    if (rc != CLI_OK) return rc;
    if (optind < argc) return cli_usage("estimate", "unexpected argument \"%s\"", argv[optind]);
    if (a->have_params == (a->config != NULL))
        return cli_usage("estimate", a->config ? "--params and --config: give one of them, not both"
                                               : "give --params N or --config CONFIG.json");
    if (a->nsets && !a->config) return cli_usage("estimate", "--set: overrides a key of --config; there is none");
    if ((int64_t)a->gpus * a->nodes > 1 << 20)
        return cli_usage("estimate", "--gpus-per-node x --nodes: %lld ranks is too many",
                         (long long)a->gpus * a->nodes);
    return CLI_OK;
}

static zinf_dtype dtype_of(const zinf_config *cfg) {
    return cfg->bf16 ? ZINF_DTYPE_BF16 : cfg->fp16.enabled ? ZINF_DTYPE_F16 : ZINF_DTYPE_F32;
}

// The row of one stage and offload choice, every other setting from cfg.
static plan plan_of(const zinf_config *cfg, const zinf_gpt_shape *s, int world, int seq_len, bool gpu, int stage,
                    zinf_offload_device otier, zinf_offload_device ptier) {
    return (plan){.cfg = cfg,
                  .s = *s,
                  .world = world,
                  .stage = stage,
                  .otier = otier,
                  .ptier = ptier,
                  .dt = dtype_of(cfg),
                  .micro = (int)cfg->train_micro_batch_size_per_gpu,
                  .seq_len = seq_len,
                  .ga = (int)cfg->gradient_accumulation_steps,
                  .gpu = gpu};
}

// One row per stage and offload choice (offload_optimizer from stage 1, offload_param
// at stage 3); with mark, the config's own is marked.
static int rows(const zinf_config *cfg, const zinf_gpt_shape *s, int world, int seq_len, bool gpu, bool json,
                bool mark) {
    const zinf_zero_config *z = &cfg->zero;
    if (!json) table_head();
    for (int stage = 0; stage <= 3; stage++)
        for (int o = 0; o < (stage ? 3 : 1); o++)
            for (int q = 0; q < (stage == 3 ? 3 : 1); q++) {
                plan p = plan_of(cfg, s, world, seq_len, gpu, stage, (zinf_offload_device)o, (zinf_offload_device)q);
                zinf_status st = plan_make(&p);
                if (st == ZINF_OK && json) cli_print_json_line(row_json(&p));
                if (st == ZINF_OK && !json)
                    table_row(&p, mark && stage == z->stage && p.otier == z->offload_optimizer.device &&
                                      p.ptier == z->offload_param.device);
                plan_free(&p);
                if (st != ZINF_OK) return cli_fail("estimate", CLI_FAIL);
            }
    return CLI_OK;
}

static int estimate(const args *a, zinf_config *cfg) {
    int world = a->gpus * a->nodes;
    zinf_gpt_shape s;
    if (zinf_gpt_shape_from_config(&cfg->model, &s) != ZINF_OK) return cli_fail("estimate", CLI_USAGE);
    int seq_len = cfg->data.present && cfg->data.seq_len > 0 ? (int)cfg->data.seq_len : s.block_size;
    if (seq_len > s.block_size)
        return cli_usage("estimate", "--config: data.seq_len %d is longer than the model's block_size %d", seq_len,
                         s.block_size);
    // The estimate is for GPUs: "auto" counts as cuda (NCCL between ranks, one GPU each).
    bool gpu = cfg->device.backend != ZINF_BACKEND_HOST;
    const char *dt = zinf_dtype_name(dtype_of(cfg));
    char b[32];
    if (!a->json) {
        printf("GPT n_layer %d n_head %d n_embd %d vocab %d block %d (%lld parameters), %s, micro-batch %lld x %d "
               "tokens, accumulation %lld, %d rank%s (%d per node x %d node%s), %s backend\n",
               s.n_layer, s.n_head, s.n_embd, s.vocab_size, s.block_size, (long long)zinf_gpt_param_count(&s), dt,
               (long long)cfg->train_micro_batch_size_per_gpu, seq_len, (long long)cfg->gradient_accumulation_steps,
               world, world > 1 ? "s" : "", a->gpus, a->nodes, a->nodes > 1 ? "s" : "", gpu ? "cuda" : "host");
        printf("Per rank; traffic per optimizer step; sub_group_size %lld, reduce_bucket_size %lld, aio block %s%s\n\n",
               (long long)cfg->zero.sub_group_size, (long long)cfg->zero.reduce_bucket_size, sz(cfg->aio.block_size, b),
               cfg->activation_checkpointing.enabled ? ", activation checkpointing" : "");
    }
    int rc = rows(cfg, &s, world, seq_len, gpu, a->json, a->config != NULL);
    if (rc != CLI_OK || !a->config) return rc;
    const zinf_zero_config *z = &cfg->zero;
    plan p = plan_of(cfg, &s, world, seq_len, gpu, (int)z->stage, z->offload_optimizer.device, z->offload_param.device);
    zinf_status st = plan_make(&p);
    if (st == ZINF_OK && a->json) cli_print_json_line(plan_json(&p));
    if (st == ZINF_OK && !a->json) {
        printf("\n");
        print_plan(&p);
    }
    plan_free(&p);
    return st == ZINF_OK ? CLI_OK : cli_fail("estimate", CLI_FAIL);
}

// The config the rows come from: --config's (with --set), or --params' built-in one.
static int load(const args *a, zinf_config *cfg) {
    if (!a->config) return params_config(a->params, a->gpus * a->nodes, cfg);
    zinf_config_options co = {.sets = a->sets, .nsets = a->nsets, .world_size = a->gpus * a->nodes};
    if (zinf_config_load(cfg, a->config, &co) != ZINF_OK)
        return cli_usage("estimate", "--config: %s", zinf_last_error());
    if (cfg->model.present) return CLI_OK;
    zinf_config_free(cfg);
    return cli_usage("estimate", "--config: %s: no \"model\" section; add e.g. {\"model\": {\"preset\": \"gpt2\"}}",
                     a->config);
}

int cli_estimate(int argc, char **argv) {
    args a = {.gpus = 1, .nodes = 1, .sets = calloc((size_t)argc, sizeof(char *))};
    if (!a.sets) return cli_usage("estimate", "out of memory");
    zinf_config cfg;
    int rc = parse(&a, argc, argv);
    if (rc == CLI_OK) rc = load(&a, &cfg);
    if (rc == CLI_OK) {
        rc = estimate(&a, &cfg);
        zinf_config_free(&cfg);
    }
    free(a.sets);
    return rc;
}
