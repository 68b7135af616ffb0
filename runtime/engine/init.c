// The starting weights of a rank's partition, one module at a time: read from
// model.init_from, or drawn as the model's family initializes itself (each
// parameter's init: normal(0, std), zeros or ones). The draws come from a
// counter-based generator keyed by (seed, module, element), so a value depends only on
// where it is in the model: every stage and world size starts identically and no rank
// computes more than it keeps.
#include <math.h>
#include <string.h>

#include "internal.h"
#include "zinf_half.h"

// A standard normal draw for element j of module mod (Box-Muller on two 53-bit uniforms).
static double normal_at(uint64_t seed, int mod, size_t j) {
    uint64_t k = zinf_mix64((zinf_mix64(seed + ZINF_GOLDEN64) ^ ((uint64_t)mod << 40) ^ (uint64_t)j) + ZINF_GOLDEN64);
    uint64_t k2 = zinf_mix64(k + ZINF_GOLDEN64);
    double u1 = ((double)(k >> 11) + 1.0) * 0x1p-53; // (0, 1]
    double u2 = (double)(k2 >> 11) * 0x1p-53;
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

// Flat elements [lo, lo + n) of module mod: from file (the module's numel values read
// from init_from) or drawn; padding is zero.
static void fill_range(const zinf_engine *e, int mod, const float *file, size_t lo, size_t n, float *out) {
    const zinf_module_info *mi = zinf_model_module(e->model, mod);
    memset(out, 0, n * sizeof *out);
    for (int p = 0; p < mi->nparams; p++) {
        const zinf_param_info *pi = &mi->params[p];
        size_t a = pi->offset > lo ? pi->offset : lo, b = pi->offset + pi->numel;
        if (b > lo + n) b = lo + n;
        if (a >= b) continue;
        for (size_t j = a; j < b; j++) {
            float v;
            if (file)
                v = file[j];
            else if (pi->init == ZINF_INIT_ZERO)
                v = 0.0f;
            else if (pi->init == ZINF_INIT_ONE)
                v = 1.0f;
            else
                v = (float)(pi->std * normal_at((uint64_t)e->cfg.seed, mod, j));
            out[j - lo] = v;
        }
    }
}

zinf_status init_partition(zinf_engine *e) {
    const char *from = e->cfg.model.init_from;
    size_t most = 0;
    for (int i = 0; i < e->module_count; i++)
        if (e->layout[i].padded > most) most = e->layout[i].padded;
    float *file = NULL, *vals = malloc(most * sizeof *vals);
    void *tmp = malloc(most * 4), **bufs = calloc((size_t)e->module_count, sizeof *bufs);
    if (from) file = malloc(most * sizeof *file);
    zinf_status st =
        vals && tmp && bufs && (file || !from) ? ZINF_OK : zinf_fail(ZINF_ERR_NOMEM, "engine init: out of memory");
    int reading = 0; // the modules with parameters of their own (a tied head has none)
    for (int i = 0; from && i < e->module_count; i++)
        reading += e->layout[i].numel > 0;
    zinf_progress progress; // a large model directory takes minutes to read
    zinf_progress_start(&progress, "engine: modules read from model.init_from", reading, false);
    for (int i = 0; st == ZINF_OK && i < e->module_count; i++) {
        const mod_layout *l = &e->layout[i];
        if (!l->numel) continue;
        if (from) {
            bufs[i] = file;
            st = zinf_model_read_weights(e->model, from, ZINF_DTYPE_F32, bufs);
            bufs[i] = NULL;
            if (st != ZINF_OK) break;
            zinf_progress_add(&progress, 1);
        }
        // The 16-bit parameters this rank holds: the whole buffer, or at stage 3 its slice.
        size_t lo = l->param_lo, n = l->param_n;
        fill_range(e, i, file, lo, n, vals);
        for (size_t j = 0; j < n; j++)
            dt_store(tmp, e->dtype, j, vals[j]);
        st = e->params.storage->write(e, i, lo, n, tmp);
        if (st == ZINF_OK) st = states_write(e, ZINF_TIER_MASTER, l->part_off, l->part_n, vals + (l->part_lo - lo));
    }
    if (st == ZINF_OK) zinf_progress_end(&progress);
    if (st == ZINF_OK) st = states_zero(e);
    free(vals), free(tmp), free(file), free(bufs);
    return st;
}
