// Gradient reduction. As backward finishes a module (the last op that adds to its
// gradient), its 16-bit gradient is widened into buckets of reduce_bucket_size elements
// (split where one fills, so that size bounds them); a full bucket goes to the
// communication stream, which sums it over the ranks in fp32 (all-reduce at stage 0,
// reduce-scatter into the owners' slices at 1-3) and adds each rank's part to its fp32
// gradient partition, while the compute stream goes on with backward (overlap_comm).
// Stages 0, 2 and 3 reduce every micro-batch's gradients and add the sums over the
// micro-batches; stage 1 adds each rank's micro-batches first and reduces once per step.
// The two orders agree where a step has one micro-batch per rank or one rank: there,
// for one world size, all stages accumulate bit-identical gradients.
#include "internal.h"

static zinf_status plan_buckets(zinf_engine *e) {
    int nf, nall;
    zinf_model_schedule(e->model, false, &nf);
    const zinf_model_op *ops = zinf_model_schedule(e->model, true, &nall);
    for (int i = 0; i < e->module_count; i++)
        e->grads.last_backward_op[i] = e->grads.first_piece[i] = e->grads.last_piece[i] = -1;
    for (int k = nf; k < nall; k++) {
        if (ops[k].pass != ZINF_PASS_BACKWARD) continue;
        e->grads.last_backward_op[ops[k].module] = k;
        int ext = zinf_model_module(e->model, ops[k].module)->external;
        if (ext >= 0)
            e->grads.last_backward_op[ext] = k > e->grads.last_backward_op[ext] ? k : e->grads.last_backward_op[ext];
    }
    // Buckets of up to reduce_bucket_size elements (world blocks of `per`), filled in the
    // order backward finishes the modules. A module (or tile) that a bucket of its own
    // holds is not split across two: it starts the next bucket when it does not fit what
    // is left of this one, so its final gradient reaches the host in one piece, whose
    // norms are taken in one pass (on the device where it lands). Two consecutive buckets
    // then hold more than `per`, so there are at most 2 ceil(total / per) + 1 of them;
    // a bucket's end splits at most one module, so there are at most modules + buckets
    // pieces, and one more for each tile a tiled module has; a tiled module is counted
    // twice, for a tied embedding's two reductions.
    size_t W = (size_t)e->partition.ranks, per = (size_t)e->cfg.zero.reduce_bucket_size / W, total = 0, tiles = 0;
    if (per == 0) per = 1;
    for (int i = 0; i < e->module_count; i++) {
        total += e->layout[i].slice * (e->layout[i].tile ? 2 : 1);
        zinf_tiling t = tiling_of(e, i);
        if (t.tile) tiles += 2 * zinf_tiling_count(&t) + 1;
    }
    size_t maxb = 2 * ((total + per - 1) / per) + 1, maxp = (size_t)e->module_count + maxb + tiles;
    e->grads.buckets = calloc(maxb, sizeof *e->grads.buckets);
    e->grads.pieces = calloc(maxp, sizeof *e->grads.pieces);
    int *first_op = malloc(((size_t)e->module_count + 1) * sizeof *first_op); // per module: its first reduction's op
    if (!e->grads.buckets || !e->grads.pieces || !first_op) {
        free(first_op);
        return zinf_fail(ZINF_ERR_NOMEM, "engine: out of memory");
    }
    for (int i = 0; i < e->module_count; i++)
        first_op[i] = -1;
    // At each op, first the tiled modules whose gradient tiles it reduces as it runs, then
    // the modules it finishes.
    for (int k = nf; k < nall; k++) {
        for (int j = 0; j < 2 * e->module_count; j++) {
            int i = j % e->module_count;
            bool tiled = e->layout[i].tile > 0, grad = false;
            if (tiled) zinf_model_tile_sweeps(e->model, &ops[k], i, &grad);
            if (!e->layout[i].padded || (j < e->module_count) != tiled ||
                (tiled ? !grad : e->grads.last_backward_op[i] != k))
                continue;
            e->grads.first_piece[i] = e->grads.piece_count;
            if (first_op[i] < 0) first_op[i] = k;
            // A tiled module's gradient comes tile by tile, the last first (zinf_tile_source):
            // its pieces are planned in that order, and none crosses a tile.
            zinf_tiling t = tiling_of(e, i);
            for (size_t s = tiled ? zinf_tiling_count(&t) : 1; s-- > 0;) {
                size_t lo = tiled ? s * t.tile : 0, end = tiled ? lo + zinf_tiling_len(&t, s) : e->layout[i].slice;
                for (bool whole = end - lo <= per; lo < end; whole = false) {
                    bucket *b = e->grads.bucket_count ? &e->grads.buckets[e->grads.bucket_count - 1] : NULL;
                    if (!b || b->block == per || (whole && b->block + (end - lo) > per)) {
                        b = &e->grads.buckets[e->grads.bucket_count++];
                        *b = (bucket){.first = e->grads.piece_count};
                    }
                    size_t n = end - lo < per - b->block ? end - lo : per - b->block;
                    e->grads.pieces[e->grads.piece_count++] = (piece){.mod = i,
                                                                      .bucket = (int)(b - e->grads.buckets),
                                                                      .op = k,
                                                                      .lo = lo,
                                                                      .n = n,
                                                                      .off = b->block,
                                                                      .first = first_op[i] == k};
                    b->count++;
                    b->block += n;
                    lo += n;
                    if (W * b->block > e->grads.bucket_capacity) e->grads.bucket_capacity = W * b->block;
                }
            }
        }
    }
    for (int k = 0; k < e->grads.piece_count; k++)
        e->grads.last_piece[e->grads.pieces[k].mod] = k;
    for (int b = 1; b < e->grads.bucket_count; b++)
        e->grads.buckets[b].at = e->grads.buckets[b - 1].at + W * e->grads.buckets[b - 1].block;
    free(first_op);
    return ZINF_OK;
}

zinf_status reduce_create(zinf_engine *e) {
    size_t nm = (size_t)e->module_count;
    e->grads.last_backward_op = malloc(nm * sizeof *e->grads.last_backward_op);
    e->grads.first_piece = malloc(nm * sizeof *e->grads.first_piece);
    e->grads.last_piece = malloc(nm * sizeof *e->grads.last_piece);
    if (!e->grads.last_backward_op || !e->grads.first_piece || !e->grads.last_piece)
        return zinf_fail(ZINF_ERR_NOMEM, "engine: out of memory");
    ZINF_CHECK(plan_buckets(e));
    // Added straight into the fp32 gradients, the pieces need no buckets.
    for (int s = 0; s < 2 && !e->grads.direct; s++) {
        ZINF_CHECK(engine_take_device(e, e->grads.bucket_capacity * sizeof(float), "gradient buckets",
                                      (void **)&e->grads.device_buckets[s]));
        if (!e->plan) ZINF_CHECK(zinf_event_create(e->dev, &e->grads.bucket_free[s]));
    }
    if (e->grads.accumulate_locally && e->grads.bucket_count) {
        const bucket *last = &e->grads.buckets[e->grads.bucket_count - 1];
        e->grads.accumulated_bytes = (last->at + (size_t)e->partition.ranks * last->block) * sizeof(float);
        ZINF_CHECK(
            engine_take_device(e, e->grads.accumulated_bytes, "accumulated gradients", (void **)&e->grads.accumulated));
    }
    bool host_grads = e->optim.offload != ZINF_OFFLOAD_NONE, host_comm = e->world > 1 && !e->nccl;
    if (!host_grads && !host_comm) return ZINF_OK;
    // One pinned staging buffer serves every host collective and the gradients' way to
    // the host: the communication stream runs them one after another. A reduce-scatter
    // needs its input and one block of output; a gather one module's 16-bit buffer.
    // Without host collectives (NCCL, or one rank) it carries only the sums down to the
    // host partition: this rank's block of a bucket at stages 1-3 over several ranks
    // (flush), the whole bucket otherwise.
    size_t bytes = 0, block = e->grads.bucket_capacity / (size_t)e->partition.ranks;
    for (int i = 0; host_comm && i < e->module_count; i++)
        if (e->layout[i].padded * e->elem_size > bytes) bytes = e->layout[i].padded * e->elem_size;
    size_t sums = host_comm ? e->grads.bucket_capacity + block
                  : e->partition.split && e->partition.ranks > 1 ? block
                                                                 : e->grads.bucket_capacity;
    if (sums * sizeof(float) > bytes) bytes = sums * sizeof(float);
    ZINF_CHECK(engine_take_pinned(e, bytes, "communication staging", (void **)&e->staging));
    e->staging_bytes = bytes;
    return ZINF_OK;
}

void reduce_destroy(zinf_engine *e) {
    for (int s = 0; s < 2; s++) {
        if (e->dev) zinf_device_free(e->dev, e->grads.device_buckets[s]);
        zinf_event_destroy(e->grads.bucket_free[s]);
    }
    if (e->dev) zinf_device_free(e->dev, e->grads.accumulated);
    if (e->host) zinf_host_pool_free(e->host, e->staging, true);
    free(e->grads.last_backward_op), free(e->grads.first_piece), free(e->grads.last_piece), free(e->grads.pieces),
        free(e->grads.buckets);
}

void reduce_bucket_sides(const zinf_engine *e, int b, bool *to_device, bool *to_host) {
    const bucket *bk = &e->grads.buckets[b];
    *to_device = *to_host = false;
    for (int k = bk->first; k < bk->first + bk->count; k++) {
        bool dev = states_on_device(e, e->grads.pieces[k].mod);
        *to_device |= dev, *to_host |= !dev;
    }
}

// Piece k is the last of its module's gradient on the device in the step's last
// backward: once it is added, the module's fp32 gradients there are final.
static bool arrived(const zinf_engine *e, int k) {
    int mod = e->grads.pieces[k].mod;
    return !e->plan && e->grads.norms_on_arrival && e->grads.last_piece[mod] == k && states_on_device(e, mod);
}

// Their norms then, on the communication stream after the addition (one rank leaves it
// idle; over several it goes on to the next bucket), under the rest of the backward
// instead of in the step: the pieces and the kernel of grad_stats, so the same bits.
static zinf_status arrival_norms(zinf_engine *e, int mod) {
    for (size_t r = 0; r < (size_t)e->partition.ranks; r++) {
        if (!partition_holds(e, r)) continue;
        zinf_sumsq_piece sp = states_device_grad_piece(e, mod, r);
        ZINF_CHECK(zinf_sumsq(e->comm_stream, ZINF_DTYPE_F32, sp.x, sp.n, sp.out));
    }
    e->grads.norms_taken[mod] = e->grads.backwards;
    return ZINF_OK;
}

// Sum bucket b over the ranks and add this rank's parts to its gradient partition.
static zinf_status flush(zinf_engine *e, int b) {
    const bucket *bk = &e->grads.buckets[b];
    float *d = e->grads.device_buckets[b & 1], *h = e->staging;
    size_t blk = bk->block, W = (size_t)e->partition.ranks, R = (size_t)e->partition.rank;
    ZINF_CHECK(engine_comm_after_compute(e));
    bool to_device, to_host;
    reduce_bucket_sides(e, b, &to_device, &to_host);
    bool scattered = e->grads.scattered && W > 1;
    // With NCCL or qgZ a rank's reduced block stays on the device where its block was.
    bool in_place = e->nccl || e->zeropp.qgz;
    bool packed = scattered && !in_place; // the reduce-scatter's output holds this rank's block alone
    if (W > 1 && e->zeropp.qgz) {
        ZINF_CHECK(zeropp_reduce_scatter(e, d, blk));
    } else if (W > 1 && e->nccl) {
        if (scattered)
            ZINF_CHECK(
                zinf_comm_device_reduce_scatter_f32(e->partition.group.comm, e->comm_stream, d, d + R * blk, blk));
        else
            ZINF_CHECK(zinf_comm_device_allreduce_f32(e->partition.group.comm, e->comm_stream, d, W * blk));
    } else if (W > 1) {
        ZINF_CHECK(engine_copy(e, h, d, W * blk * sizeof *d, ZINF_COPY_D2H));
        if (scattered) {
            ZINF_CHECK(engine_comm(e, &e->partition.group, COMM_REDUCE_SCATTER, h, h + W * blk, blk));
            if (to_device) ZINF_CHECK(engine_copy(e, d, h + W * blk, blk * sizeof *d, ZINF_COPY_H2D));
        } else {
            ZINF_CHECK(engine_comm(e, &e->partition.group, COMM_ALLREDUCE, h, NULL, W * blk));
            if (to_device) ZINF_CHECK(engine_copy(e, d, h, W * blk * sizeof *d, ZINF_COPY_H2D));
        }
    }
    if (to_host) { // the sums go to the host partition, from pinned memory
        if (W == 1 || in_place) {
            // At stages 1-3 a rank's part of the sums is its own block: only that comes down.
            bool mine = e->partition.split && W > 1;
            const float *from = d + (mine ? R * blk : 0);
            if (states_grads_land(e, b)) {
                ZINF_CHECK(states_land_grads(e, b, from, mine));
            } else {
                ZINF_CHECK(engine_copy(e, h, from, (mine ? blk : W * blk) * sizeof *d, ZINF_COPY_D2H));
                ZINF_CHECK(states_add_grads(e, b, h, mine));
            }
        } else {
            ZINF_CHECK(states_add_grads(e, b, packed ? h + W * blk : h, packed));
        }
    }
    for (int k = bk->first; to_device && k < bk->first + bk->count; k++) {
        const piece *p = &e->grads.pieces[k];
        const mod_layout *l = &e->layout[p->mod];
        for (size_t r = 0; states_on_device(e, p->mod) && r < W; r++) {
            if (!partition_holds(e, r)) continue;
            const float *src = d + (packed ? 0 : r * blk) + p->off;
            float *dst = e->optim.grads32 + l->part_off + (r * l->slice - l->part_lo) + p->lo;
            // The step's first reduction of a module overwrites the last step's sums.
            ZINF_CHECK(zinf_accumulate(e->comm_stream, dst, src, ZINF_DTYPE_F32, p->n, p->first && e->grads.stale));
        }
    }
    ZINF_CHECK(zinf_event_record(e->grads.bucket_free[b & 1], e->comm_stream));
    // The norms read the fp32 gradients, not the bucket: after its buffer is free again.
    for (int k = bk->first; to_device && k < bk->first + bk->count; k++)
        if (arrived(e, k)) ZINF_CHECK(arrival_norms(e, e->grads.pieces[k].mod));
    return e->cfg.zero.overlap_comm ? ZINF_OK : engine_wait_streams(e);
}

// Bucket b's pieces are all in its buffer: reduce it, or at stage 1 before the step's
// last backward add it to this rank's sums so far (the first backward widened into
// them). The last backward's sums are the earlier ones plus its own, in that order.
static zinf_status bucket_full(zinf_engine *e, int b) {
    const bucket *bk = &e->grads.buckets[b];
    if (e->grads.accumulating) {
        float *acc = e->grads.accumulated + bk->at, *d = e->grads.device_buckets[b & 1];
        ZINF_CHECK(zinf_add(e->compute_stream, ZINF_DTYPE_F32, e->grads.last_backward ? d : acc, acc, d,
                            (size_t)e->partition.ranks * bk->block));
    }
    return e->grads.last_backward || !e->grads.accumulated ? flush(e, b) : ZINF_OK;
}

// Widen one reduction's pieces (consecutive from first: one module, one op) whose run
// starts in [lo, hi) of every slice into their buckets, from grad, where rank r's run
// [lo, hi) starts at element r stride; flush each bucket its last piece fills.
static zinf_status widen(zinf_engine *e, int first, size_t lo, size_t hi, const void *grad, size_t stride) {
    const piece *f = &e->grads.pieces[first];
    for (int k = first; k < e->grads.piece_count && e->grads.pieces[k].mod == f->mod && e->grads.pieces[k].op == f->op;
         k++) {
        const piece *p = &e->grads.pieces[k];
        if (p->lo < lo || p->lo >= hi) continue;
        if (e->grads.direct) { // where flush would add the bucket's copy of it; the step's first overwrites
            const mod_layout *l = &e->layout[p->mod];
            ZINF_CHECK(zinf_accumulate(e->compute_stream, e->optim.grads32 + l->part_off + (p->lo - l->part_lo),
                                       (const char *)grad + (p->lo - lo) * e->elem_size, e->dtype, p->n,
                                       p->first && e->grads.stale));
            if (arrived(e, k)) {
                ZINF_CHECK(engine_comm_after_compute(e));
                ZINF_CHECK(arrival_norms(e, p->mod));
            }
            continue;
        }
        int b = p->bucket;
        const bucket *bk = &e->grads.buckets[b];
        // A stage-1 step's first backward (of several) widens into the sums themselves.
        bool into_sums = e->grads.accumulated && !e->grads.last_backward && !e->grads.accumulating;
        float *d = into_sums ? e->grads.accumulated + bk->at : e->grads.device_buckets[b & 1];
        // The bucket's buffer is reused once the communication stream is done with it.
        if (k == bk->first) ZINF_CHECK(zinf_stream_wait_event(e->compute_stream, e->grads.bucket_free[b & 1]));
        for (int r = 0; r < e->partition.ranks; r++)
            ZINF_CHECK(zinf_cast(e->compute_stream, d + (size_t)r * bk->block + p->off, ZINF_DTYPE_F32,
                                 (const char *)grad + ((size_t)r * stride + p->lo - lo) * e->elem_size, e->dtype, p->n));
        if (k == bk->first + bk->count - 1) ZINF_CHECK(bucket_full(e, b));
    }
    return ZINF_OK;
}

// A held gradient stays where the backward wrote it for the step to read. In the step's
// last backward it is final here, and its norms are taken now on the communication
// stream, which one rank leaves idle, under the rest of the backward instead of in the
// step: the bits zinf_sumsq_many gives the step (grad_stats).
static zinf_status held_norms(zinf_engine *e, int mod) {
    if (e->plan || !e->grads.norms_on_arrival || !e->grads.buffers16[mod] || !states_on_device(e, mod)) return ZINF_OK;
    ZINF_CHECK(engine_comm_after_compute(e));
    ZINF_CHECK(zinf_sumsq(e->comm_stream, e->dtype, e->grads.buffers16[mod], e->layout[mod].padded,
                          e->grads.device_norms + 2 * mod));
    e->grads.norms_taken[mod] = e->grads.backwards;
    return ZINF_OK;
}

zinf_status reduce_module_ready(zinf_engine *e, int mod) {
    const mod_layout *l = &e->layout[mod];
    if (!l->padded || l->tile) return ZINF_OK; // a tiled module's tiles went as the model finished them
    if (grads_read_held(e)) return held_norms(e, mod);
    ZINF_CHECK(widen(e, e->grads.first_piece[mod], 0, l->slice, e->grads.buffers16[mod], l->slice));
    ZINF_CHECK(engine_free_after(e, e->grads.buffers16[mod], e->compute_stream));
    e->grads.buffers16[mod] = NULL;
    return ZINF_OK;
}

zinf_status reduce_tile_ready(zinf_engine *e, int mod, int k, const void *grad) {
    zinf_tiling t = tiling_of(e, mod);
    size_t a = (size_t)k * t.tile, n = zinf_tiling_len(&t, (size_t)k);
    int first = 0; // this op's reduction of mod
    while (first < e->grads.piece_count &&
           (e->grads.pieces[first].mod != mod || e->grads.pieces[first].op != e->grads.current_op))
        first++;
    if (first == e->grads.piece_count)
        return zinf_fail(ZINF_ERR_INTERNAL, "engine: no reduction of %s's gradient tiles at op %d", e->names[mod],
                         e->grads.current_op);
    return widen(e, first, a, a + n, grad, n);
}
