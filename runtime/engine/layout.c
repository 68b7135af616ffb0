// The flat layout: each module's parameters are one buffer, padded so it splits into
// pw (the partition's ranks: the world, or MiCS's shard group) equal slices of a multiple of SLICE_ALIGN elements. Rank r's optimizer part
// of a module is its slice (stages 1-3) or the whole buffer (stage 0, where every rank
// steps the whole model); its partition is those parts in module order. Tiles cut a
// module's slices, never the layout.
#include "internal.h"

static size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

// memory.tile_bound: a module the model can compute in tiles whose gathered buffer
// exceeds the bound comes in tiles of at most the bound, each rank's part a multiple
// of SLICE_ALIGN (so a tile of a slice on disk is an aligned read, and qwZ's groups
// stay whole); one tile is no tiling.
static size_t tile_of(const zinf_engine *e, const zinf_module_info *mi, const mod_layout *l) {
    int64_t bound = e->cfg.memory.tile_bound;
    if (e->stage != 3 || bound <= 0 || !mi->tileable || l->padded <= (size_t)bound) return 0;
    size_t t = (size_t)bound / (size_t)e->pw / SLICE_ALIGN * SLICE_ALIGN;
    if (t < SLICE_ALIGN) t = SLICE_ALIGN;
    return t < l->slice ? t : 0;
}

zinf_status layout_build(zinf_engine *e) {
    e->lay = calloc((size_t)e->nmod, sizeof *e->lay);
    if (!e->lay) return zinf_fail(ZINF_ERR_NOMEM, "engine: out of memory for the layout");
    size_t off = 0;
    e->model_numel = 0;
    for (int i = 0; i < e->nmod; i++) {
        mod_layout *l = &e->lay[i];
        const zinf_module_info *mi = zinf_model_module(e->m, i);
        l->numel = mi->numel;
        l->padded = round_up(l->numel, (size_t)e->pw * SLICE_ALIGN);
        l->slice = l->padded / (size_t)e->pw;
        l->part_lo = e->stage == 0 ? 0 : (size_t)e->pr * l->slice;
        l->part_n = e->stage == 0 ? l->padded : l->slice;
        l->part_off = off;
        l->tile = tile_of(e, mi, l);
        off += l->part_n;
        for (int j = 0; j < mi->nparams; j++)
            e->model_numel += (int64_t)mi->params[j].numel;
    }
    e->npart = off;
    return ZINF_OK;
}
