// The keys a config leaves at DeepSpeed's defaults, or to zinf, that zinf chooses for
// the machine instead, and the plan says so. DeepSpeed's defaults make offload worse than it needs
// to be: reduce_bucket_size 5e8 keeps two 2 GB fp32 buckets on the device, and
// sub_group_size 1e9 makes the NVMe optimizer tier pin three states of a billion
// elements in swap buffers (more pinned memory than offloading to cpu takes).
#include <sys/statvfs.h>

#include "internal.h"

// The largest of these whose two fp32 buckets take at most 1/64 of the device: 5e8 on
// a card of 256 GB, 1e8 on 80 GB, 2e7 on the host backend's 4 GiB. Buckets this size
// still amortize a collective's fixed cost (NCCL reaches its bandwidth by ~64 MB).
static const int64_t bucket_sizes[] = {500000000, 200000000, 100000000, 50000000, 20000000};

// Sub-groups of an offloaded optimizer. On nvme 1e8 first: a state of a sub-group then
// moves in reads of 400 MB, far past what a drive needs for full speed. On cpu the
// first at most 1/16 of the partition: the next forward's first gather waits for its
// module's whole sub-group (DeepSpeed's 1e9 makes GPT-2 large's partition on one rank
// one sub-group, and the forward wait for the entire update). Either smaller where the
// sub-groups' pinned buffers would not fit the pinned budget.
static const int64_t sub_group_sizes[] = {100000000, 30000000, 10000000};
enum { CPU_SUBGROUPS = 16 };

// The output layer's chunk when the config leaves memory.head_chunk_tokens out: all of
// a micro-batch's tokens while the plan with them at once leaves an eighth of the device
// free (or their logits take at most 1/64 of it, when no plan is needed), else the most
// tokens (a multiple of 64, from 64 up) whose logits take 1/64. Chunks cost a product of
// the head per chunk but the last (recomputed in the backward): 4 ms of Llama-3.2-1B's
// step on an H100, whose 8192 tokens' 2.1 GB of logits fit its 80 GB many times over.
// A device of unknown capacity takes the tokens at once.
zinf_status engine_choose_head_chunk(zinf_config *cfg, const zinf_plan_target *t, int64_t *chosen) {
    *chosen = 0;
    if (cfg->memory.head_chunk_tokens > 0) return ZINF_OK;
    zinf_engine e0;
    engine_settings(&e0, cfg);
    zinf_model_params mp;
    ZINF_CHECK(engine_model_params(cfg, e0.dtype, &mp));
    int64_t capacity = t->device_capacity, tokens = (int64_t)mp.batch * mp.seq_len,
            row = (int64_t)zinf_model_vocab_padded(&mp.shape) * (int64_t)e0.elem_size;
    int64_t fit = capacity > 0 ? capacity / 64 / row : tokens;
    cfg->memory.head_chunk_tokens = tokens;
    if (fit >= tokens) return ZINF_OK;
    zinf_plan whole;
    ZINF_CHECK(zinf_engine_plan(cfg, t, &whole));
    if (whole.device_peak <= capacity - capacity / 8) return ZINF_OK;
    *chosen = fit >= 64 ? fit / 64 * 64 : fit > 0 ? fit : 1;
    cfg->memory.head_chunk_tokens = *chosen;
    return ZINF_OK;
}

// Bytes the drives of an nvme_path list hold free for files striped over them: the
// emptiest's free space once per path; -1 where not known (a path not made yet, or a
// file system that reports no blocks).
static int64_t nvme_free(const zinf_path_list *pl) {
    int64_t least = -1;
    for (int i = 0; i < pl->count; i++) {
        struct statvfs sv;
        if (statvfs(pl->paths[i], &sv) != 0 || sv.f_blocks == 0) return -1;
        int64_t free_bytes = (int64_t)sv.f_bavail * (int64_t)(sv.f_frsize ? sv.f_frsize : sv.f_bsize);
        if (least < 0 || free_bytes < least) least = free_bytes;
    }
    return least < 0 ? -1 : least * pl->count;
}

// super_offload: the backward updates sub-groups as their gradients become final, their
// new states written to a second place (12 bytes per element: spare host memory on cpu,
// spare swap files on nvme) and their new 16-bit parameters held (pinned with
// pin_memory) until the step says the guess was right. Room for the whole partition
// where half of what the plan leaves free holds it, else for what that half holds: of
// the host (and pinned) budget, and on nvme of the drives once the swap files of the
// node's ranks are there; the other half is the user's. Less than a sub-group's room
// is none.
static zinf_status choose_speculation(zinf_config *cfg, const zinf_plan_target *t, zinf_plan_choice *out) {
    zinf_offload_optimizer_config *oc = &cfg->zero.offload_optimizer;
    if (oc->speculate_elements_chosen) return ZINF_OK;
    oc->speculate_elements = 0;
    oc->speculate_elements_chosen = true; // the plan below is made without it
    if (!oc->super_offload || oc->device == ZINF_OFFLOAD_NONE) return ZINF_OK;
    zinf_plan p;
    ZINF_CHECK(zinf_engine_plan(cfg, t, &p));
    zinf_engine e0;
    engine_settings(&e0, cfg);
    bool nvme = oc->device == ZINF_OFFLOAD_NVME;
    int64_t out_es = e0.dtype == ZINF_DTYPE_F32 ? 4 : (int64_t)e0.elem_size,
            n = p.mem.partition_numel - p.mem.optimizer_device_numel; // offloaded
    int64_t room = (p.host.have - p.host.need) / 2 / ((nvme ? 0 : 3 * 4) + out_es);
    if (oc->pin_memory && p.pinned.have >= 0) {
        int64_t pinned_room = (p.pinned.have - p.pinned.need) / 2 / out_es;
        if (pinned_room < room) room = pinned_room;
    }
    int64_t disk = nvme ? nvme_free(&oc->nvme_path) : -1, ranks = t->local_ranks > 0 ? t->local_ranks : 1;
    if (disk >= 0) {
        int64_t disk_room = (disk - ranks * p.mem.nvme) / 2 / ranks / (3 * 4);
        if (disk_room < room) room = disk_room;
    }
    if (room > n) room = n;
    int64_t sub_group = cfg->zero.sub_group_size < n ? cfg->zero.sub_group_size : n;
    oc->speculate_elements = room >= sub_group ? room : 0;
    out->speculate_elements = oc->speculate_elements, out->partition_numel = n;
    return ZINF_OK;
}

zinf_status engine_choose(zinf_config *cfg, const zinf_plan_target *t, zinf_plan_choice *out) {
    zinf_zero_config *z = &cfg->zero;
    *out = (zinf_plan_choice){0};
    // Gradients added straight into the fp32 ones use no buckets: nothing to choose.
    if (!z->reduce_bucket_size_given && t->device_capacity > 0 && !policy_grads_direct(cfg, t->world)) {
        size_t i = 0;
        while (i + 1 < ZINF_ARRAY_LEN(bucket_sizes) && 2 * bucket_sizes[i] * 4 > t->device_capacity / 64)
            i++;
        if (bucket_sizes[i] != z->reduce_bucket_size) out->reduce_bucket_size = z->reduce_bucket_size = bucket_sizes[i];
    }
    z->reduce_bucket_size_given = true;
    // With the buckets chosen: the plan of the tokens at once holds those.
    ZINF_CHECK(engine_choose_head_chunk(cfg, t, &out->head_chunk_tokens));
    if (!z->sub_group_size_given && z->offload_optimizer.device != ZINF_OFFLOAD_NONE) {
        size_t i = 0, last = ZINF_ARRAY_LEN(sub_group_sizes) - 1;
        int64_t partition_numel = INT64_MAX;
        if (z->offload_optimizer.device == ZINF_OFFLOAD_CPU) {
            zinf_engine_memory m;
            ZINF_CHECK(engine_plan_memory(cfg, t, &m));
            partition_numel = m.partition_numel;
            while (i < last && sub_group_sizes[i] * CPU_SUBGROUPS > partition_numel)
                i++;
        }
        for (; i < last; i++) {
            zinf_config c = *cfg;
            c.zero.sub_group_size = sub_group_sizes[i];
            c.zero.sub_group_size_given = true;
            zinf_plan p;
            ZINF_CHECK(zinf_engine_plan(&c, t, &p));
            if (p.pinned.need <= p.pinned.have) break;
        }
        // A partition no larger than the pick is one sub-group either way: nothing to choose.
        if (sub_group_sizes[i] < z->sub_group_size && sub_group_sizes[i] < partition_numel)
            out->sub_group_size = z->sub_group_size = sub_group_sizes[i];
    }
    z->sub_group_size_given = true;
    return choose_speculation(cfg, t, out);
}
