// Gradient reduction. As backward finishes a module (the last op that adds to its
// gradient), its 16-bit gradient is widened into buckets of reduce_bucket_size elements
// (split where one fills, so that size bounds them); a full bucket goes to the
// communication stream, which sums it over the ranks in fp32 (all-reduce at stages
// 0-1, reduce-scatter into the owners' slices at 2-3) and adds each rank's part to its
// fp32 gradient partition, while the compute stream goes on with backward
// (overlap_comm). Every stage forms the same sums in the same order, so for one world
// size all stages accumulate bit-identical gradients.
#include "internal.h"

static zinf_status plan_buckets(zinf_engine *e) {
    int nf, nall;
    zinf_model_schedule(e->model, false, &nf);
    const zinf_model_op *ops = zinf_model_schedule(e->model, true, &nall);
    for (int i = 0; i < e->nmod; i++)
        e->last_bwd[i] = e->first_piece[i] = -1;
    for (int k = nf; k < nall; k++) {
        if (ops[k].pass != ZINF_PASS_BACKWARD) continue;
        e->last_bwd[ops[k].module] = k;
        int ext = zinf_model_module(e->model, ops[k].module)->external;
        if (ext >= 0) e->last_bwd[ext] = k > e->last_bwd[ext] ? k : e->last_bwd[ext];
    }
    // Buckets of reduce_bucket_size elements (world blocks of `per`), filled in the order
    // backward finishes the modules; every bucket but the last is full, so there are
    // ceil(total / per) of them, and a bucket's end splits at most one module, so there
    // are at most modules + buckets pieces, and one more for each tile a tiled module has;
    // a tiled module is counted twice, for a tied embedding's two reductions.
    size_t W = (size_t)e->part_ranks, per = (size_t)e->cfg.zero.reduce_bucket_size / W, total = 0, tiles = 0;
    if (per == 0) per = 1;
    for (int i = 0; i < e->nmod; i++) {
        total += e->lay[i].slice * (e->lay[i].tile ? 2 : 1);
        zinf_tiling t = tiling_of(e, i);
        if (t.tile) tiles += 2 * zinf_tiling_count(&t) + 1;
    }
    size_t maxb = (total + per - 1) / per + 1, maxp = (size_t)e->nmod + maxb + tiles;
    e->buckets = calloc(maxb, sizeof *e->buckets);
    e->pieces = calloc(maxp, sizeof *e->pieces);
    if (!e->buckets || !e->pieces) return zinf_fail(ZINF_ERR_NOMEM, "engine: out of memory");
    // At each op, first the tiled modules whose gradient tiles it reduces as it runs, then
    // the modules it finishes.
    for (int k = nf; k < nall; k++) {
        for (int j = 0; j < 2 * e->nmod; j++) {
            int i = j % e->nmod;
            bool tiled = e->lay[i].tile > 0, grad = false;
            if (tiled) zinf_model_tile_sweeps(e->model, &ops[k], i, &grad);
            if (!e->lay[i].padded || (j < e->nmod) != tiled || (tiled ? !grad : e->last_bwd[i] != k)) continue;
            e->first_piece[i] = e->npieces;
            // A tiled module's gradient comes tile by tile, the last first (zinf_tile_source):
            // its pieces are planned in that order, and none crosses a tile.
            zinf_tiling t = tiling_of(e, i);
            for (size_t s = tiled ? zinf_tiling_count(&t) : 1; s-- > 0;) {
                size_t lo = tiled ? s * t.tile : 0, end = tiled ? lo + zinf_tiling_len(&t, s) : e->lay[i].slice;
                while (lo < end) {
                    bucket *b = e->nbuckets ? &e->buckets[e->nbuckets - 1] : NULL;
                    if (!b || b->block == per) {
                        b = &e->buckets[e->nbuckets++];
                        *b = (bucket){.first = e->npieces};
                    }
                    size_t n = end - lo < per - b->block ? end - lo : per - b->block;
                    e->pieces[e->npieces++] =
                        (piece){.mod = i, .bucket = (int)(b - e->buckets), .op = k, .lo = lo, .n = n, .off = b->block};
                    b->count++;
                    b->block += n;
                    lo += n;
                    if (W * b->block > e->bucket_cap) e->bucket_cap = W * b->block;
                }
            }
        }
    }
    return ZINF_OK;
}

zinf_status reduce_create(zinf_engine *e) {
    size_t nm = (size_t)e->nmod;
    e->last_bwd = malloc(nm * sizeof *e->last_bwd);
    e->first_piece = malloc(nm * sizeof *e->first_piece);
    if (!e->last_bwd || !e->first_piece) return zinf_fail(ZINF_ERR_NOMEM, "engine: out of memory");
    ZINF_CHECK(plan_buckets(e));
    for (int s = 0; s < 2; s++) {
        ZINF_CHECK(engine_take_device(e, e->bucket_cap * sizeof(float), "gradient buckets", (void **)&e->d_bucket[s]));
        if (!e->plan) ZINF_CHECK(zinf_event_create(e->dev, &e->bucket_free[s]));
    }
    bool host_grads = e->otier != ZINF_OFFLOAD_NONE, host_comm = e->world > 1 && !e->nccl;
    if (!host_grads && !host_comm) return ZINF_OK;
    // One pinned staging buffer serves every collective and the gradients' way to the
    // host: the communication stream runs them one after another. A reduce-scatter
    // needs its input and one block of output; a gather one module's 16-bit buffer.
    size_t bytes = 0, block = e->bucket_cap / (size_t)e->part_ranks;
    for (int i = 0; host_comm && i < e->nmod; i++)
        if (e->lay[i].padded * e->elem_size > bytes) bytes = e->lay[i].padded * e->elem_size;
    if ((e->bucket_cap + block) * sizeof(float) > bytes) bytes = (e->bucket_cap + block) * sizeof(float);
    ZINF_CHECK(engine_take_pinned(e, bytes, "communication staging", (void **)&e->h_comm));
    e->h_comm_bytes = bytes;
    return ZINF_OK;
}

void reduce_destroy(zinf_engine *e) {
    for (int s = 0; s < 2; s++) {
        if (e->dev) zinf_device_free(e->dev, e->d_bucket[s]);
        zinf_event_destroy(e->bucket_free[s]);
    }
    if (e->host) zinf_host_pool_free(e->host, e->h_comm, true);
    free(e->last_bwd), free(e->first_piece), free(e->pieces), free(e->buckets);
}

// Sum bucket b over the ranks and add this rank's parts to its gradient partition.
static zinf_status flush(zinf_engine *e, int b) {
    const bucket *bk = &e->buckets[b];
    float *d = e->d_bucket[b & 1], *h = e->h_comm;
    size_t blk = bk->block, W = (size_t)e->part_ranks, R = (size_t)e->part_rank;
    ZINF_CHECK(zinf_event_record(e->ev_cs, e->compute_stream));
    ZINF_CHECK(zinf_stream_wait_event(e->comm_stream, e->ev_cs));
    bool scattered = e->stage >= 2 && W > 1;
    // With NCCL or qgZ a rank's reduced block stays on the device where its block was.
    bool in_place = e->nccl || e->qgz;
    bool packed = scattered && !in_place; // the reduce-scatter's output holds this rank's block alone
    if (W > 1 && e->qgz) {
        ZINF_CHECK(zeropp_reduce_scatter(e, d, blk));
    } else if (W > 1 && e->nccl) {
        if (scattered)
            ZINF_CHECK(zinf_comm_device_reduce_scatter_f32(e->part_comm, e->comm_stream, d, d + R * blk, blk));
        else
            ZINF_CHECK(zinf_comm_device_allreduce_f32(e->part_comm, e->comm_stream, d, W * blk));
    } else if (W > 1) {
        ZINF_CHECK(zinf_copy_async(e->comm_stream, h, d, W * blk * sizeof *d, ZINF_COPY_D2H));
        bool back = e->otier == ZINF_OFFLOAD_NONE; // the sums are added on the device
        if (scattered) {
            ZINF_CHECK(engine_comm(e, e->part_comm, COMM_REDUCE_SCATTER, h, h + W * blk, blk));
            if (back) ZINF_CHECK(zinf_copy_async(e->comm_stream, d, h + W * blk, blk * sizeof *d, ZINF_COPY_H2D));
        } else {
            ZINF_CHECK(engine_comm(e, e->part_comm, COMM_ALLREDUCE, h, NULL, W * blk));
            if (back) ZINF_CHECK(zinf_copy_async(e->comm_stream, d, h, W * blk * sizeof *d, ZINF_COPY_H2D));
        }
    }
    if (e->otier != ZINF_OFFLOAD_NONE) { // the sums go to the host partition, from pinned memory
        if (W == 1 || in_place) {
            // At stages 1-3 a rank's part of the sums is its own block: only that comes down.
            bool mine = e->stage > 0 && W > 1;
            ZINF_CHECK(zinf_copy_async(e->comm_stream, h, d + (mine ? R * blk : 0),
                                       (mine ? blk : W * blk) * sizeof *d, ZINF_COPY_D2H));
            ZINF_CHECK(states_add_grads(e, b, h, mine));
        } else {
            ZINF_CHECK(states_add_grads(e, b, packed ? h + W * blk : h, packed));
        }
    } else {
        for (int k = bk->first; k < bk->first + bk->count; k++) {
            const piece *p = &e->pieces[k];
            const mod_layout *l = &e->lay[p->mod];
            for (size_t r = 0; r < W; r++) {
                if (e->stage > 0 && r != R) continue; // not this rank's part
                const float *src = d + (packed ? 0 : r * blk) + p->off;
                float *dst = e->grads32 + l->part_off + (r * l->slice - l->part_lo) + p->lo;
                ZINF_CHECK(zinf_add(e->comm_stream, ZINF_DTYPE_F32, dst, dst, src, p->n));
            }
        }
    }
    ZINF_CHECK(zinf_event_record(e->bucket_free[b & 1], e->comm_stream));
    return e->cfg.zero.overlap_comm ? ZINF_OK : engine_wait_streams(e);
}

// Widen one reduction's pieces (consecutive from first: one module, one op) whose run
// starts in [lo, hi) of every slice into their buckets, from grad, where rank r's run
// [lo, hi) starts at element r stride; flush each bucket its last piece fills.
static zinf_status widen(zinf_engine *e, int first, size_t lo, size_t hi, const void *grad, size_t stride) {
    const piece *f = &e->pieces[first];
    for (int k = first; k < e->npieces && e->pieces[k].mod == f->mod && e->pieces[k].op == f->op; k++) {
        const piece *p = &e->pieces[k];
        if (p->lo < lo || p->lo >= hi) continue;
        int b = p->bucket;
        const bucket *bk = &e->buckets[b];
        float *d = e->d_bucket[b & 1];
        // The bucket's buffer is reused once the communication stream is done with it.
        if (k == bk->first) ZINF_CHECK(zinf_stream_wait_event(e->compute_stream, e->bucket_free[b & 1]));
        for (int r = 0; r < e->part_ranks; r++)
            ZINF_CHECK(zinf_cast(e->compute_stream, d + (size_t)r * bk->block + p->off, ZINF_DTYPE_F32,
                                 (const char *)grad + ((size_t)r * stride + p->lo - lo) * e->elem_size, e->dtype, p->n));
        if (k == bk->first + bk->count - 1) ZINF_CHECK(flush(e, b));
    }
    return ZINF_OK;
}

zinf_status reduce_module_ready(zinf_engine *e, int mod) {
    const mod_layout *l = &e->lay[mod];
    if (!l->padded || l->tile) return ZINF_OK; // a tiled module's tiles went as the model finished them
    ZINF_CHECK(widen(e, e->first_piece[mod], 0, l->slice, e->grads16[mod], l->slice));
    ZINF_CHECK(engine_free_after(e, e->grads16[mod], e->compute_stream));
    e->grads16[mod] = NULL;
    return ZINF_OK;
}

zinf_status reduce_tile_ready(zinf_engine *e, int mod, int k, const void *grad) {
    zinf_tiling t = tiling_of(e, mod);
    size_t a = (size_t)k * t.tile, n = zinf_tiling_len(&t, (size_t)k);
    int first = 0; // this op's reduction of mod
    while (first < e->npieces && (e->pieces[first].mod != mod || e->pieces[first].op != e->cur_op))
        first++;
    if (first == e->npieces)
        return zinf_fail(ZINF_ERR_INTERNAL, "engine: no reduction of %s's gradient tiles at op %d", e->names[mod],
                         e->cur_op);
    return widen(e, first, a, a + n, grad, n);
}
