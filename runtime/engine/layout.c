// The flat layout: each module's parameters are one buffer, padded so it splits into
// partition.ranks (the partition's ranks: the world, or MiCS's shard group) equal slices of a
// multiple of SLICE_ALIGN elements (for a module in tiles, of its tile unit too). Rank
// r's optimizer part of a module is its slice (stages 1-3) or the whole buffer (stage
// 0, where every rank steps the whole model); its partition is those parts in module
// order. Tiles cut a module's slices; checkpoints load across paddings as across world
// sizes.
#include "internal.h"

static size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

static size_t gcd(size_t a, size_t b) {
    while (b) {
        size_t r = a % b;
        a = b, b = r;
    }
    return a;
}

// memory.tile_bound: a module the model can compute in tiles whose gathered buffer
// exceeds the bound comes in tiles of at most the bound (one tile is no tiling). Each
// rank's part of a tile is a multiple of SLICE_ALIGN (so a tile of a slice on disk is an
// aligned read, and qwZ's groups stay whole) and of the model's unit (whole rows of the
// head's weight), so tiles and slices are multiples of both: the padding grows to that.
// A tile holds at least one such unit per rank, and the elements the model needs in
// tile 0 (tile_first: an MLP's norm), even where that passes the bound.
static void tile_layout(const zinf_engine *e, const zinf_module_info *mi, mod_layout *l) {
    int64_t bound = e->cfg.memory.tile_bound;
    if (!e->params.storage->sliced || bound <= 0 || !mi->tile_unit || l->padded <= (size_t)bound) return;
    size_t g = SLICE_ALIGN / gcd(SLICE_ALIGN, mi->tile_unit) * mi->tile_unit;
    size_t slice = round_up(l->numel, (size_t)e->partition.ranks * g) / (size_t)e->partition.ranks,
           t = (size_t)bound / (size_t)e->partition.ranks / g * g;
    if (t < mi->tile_first || t == 0) t = round_up(mi->tile_first ? mi->tile_first : 1, g);
    if (t >= slice) return;
    l->slice = slice, l->padded = slice * (size_t)e->partition.ranks, l->tile = t;
}

zinf_status layout_build(zinf_engine *e) {
    e->layout = calloc((size_t)e->module_count, sizeof *e->layout);
    if (!e->layout) return zinf_fail(ZINF_ERR_NOMEM, "engine: out of memory for the layout");
    size_t off = 0;
    e->model_numel = 0;
    for (int i = 0; i < e->module_count; i++) {
        mod_layout *l = &e->layout[i];
        const zinf_module_info *mi = zinf_model_module(e->model, i);
        l->numel = mi->numel;
        l->padded = round_up(l->numel, (size_t)e->partition.ranks * SLICE_ALIGN);
        l->slice = l->padded / (size_t)e->partition.ranks;
        tile_layout(e, mi, l);
        l->part_lo = e->partition.split ? (size_t)e->partition.rank * l->slice : 0;
        l->part_n = e->partition.split ? l->slice : l->padded;
        l->param_lo = e->params.storage->sliced ? (size_t)e->partition.rank * l->slice : 0;
        l->param_n = e->params.storage->sliced ? l->slice : l->padded;
        l->part_off = off;
        off += l->part_n;
        for (int j = 0; j < mi->nparams; j++)
            e->model_numel += (int64_t)mi->params[j].numel;
    }
    e->partition.numel = off;
    return ZINF_OK;
}
