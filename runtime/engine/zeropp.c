// ZeRO++ (Wang et al. 2023): stage-3 gathers of quantized weights (qwZ). A rank's
// 16-bit slice travels as int8 with one fp32 scale per group and every rank
// dequantizes the gathered buffer, its own slice included, so all ranks compute with
// the same weights; the stored slices, the master weights and the optimizer never see
// a quantized value.
#include "internal.h"

// Every slice is a whole number of SLICE_ALIGN elements, so groups of that size never
// straddle two ranks' slices and need no padding. 2048 is below DeepSpeed's 4K-8K
// groups: a finer scale for a little more traffic (4 bytes per 2048, 0.2 %).
enum { QW_GROUP = SLICE_ALIGN };

// One rank's quantized slice of n elements: n int8, then the groups' scales.
static size_t qw_bytes(size_t n) { return n + n / QW_GROUP * sizeof(float); }

zinf_status zeropp_create(zinf_engine *e) {
    e->qwz = e->stage == 3 && e->cfg.zero.quantized_weights && e->world > 1;
    if (e->cfg.zero.quantized_weights && e->world == 1 && !e->plan)
        ZINF_LOG_INFO("engine: zero_quantized_weights has no effect on one rank: nothing is gathered from others");
    if (!e->qwz) return ZINF_OK;
    size_t most = 0;
    for (int i = 0; i < e->nmod; i++)
        if ((size_t)e->world * qw_bytes(e->lay[i].slice) > most) most = (size_t)e->world * qw_bytes(e->lay[i].slice);
    // The communication stream runs the gathers one after another: one buffer serves all.
    return engine_take_device(e, most, "quantized gathers", &e->d_qw);
}

void zeropp_destroy(zinf_engine *e) {
    if (e->dev) zinf_device_free(e->dev, e->d_qw);
}

size_t zeropp_gather_bytes(const zinf_engine *e, int mod) {
    size_t n = e->lay[mod].slice;
    return e->qwz ? qw_bytes(n) : n * e->es;
}

zinf_status engine_gather_params(zinf_engine *e, const void *mine, bool mine_host, void *full, size_t bytes) {
    if (!e->qwz) return engine_allgather(e, mine, mine_host, full, bytes);
    const size_t n = bytes / e->es, qb = qw_bytes(n);
    char *q = e->d_qw, *qmine = q + (size_t)e->rank * qb;
    if (mine_host) { // quantized on the device: this rank's part goes up first, into its place
        char *place = (char *)full + (size_t)e->rank * bytes;
        ZINF_CHECK(zinf_copy_async(e->xs, place, mine, bytes, ZINF_COPY_H2D));
        mine = place;
    }
    ZINF_CHECK(zinf_quantize(e->xs, 8, e->dt, mine, n, QW_GROUP, qmine, (float *)(qmine + n)));
    ZINF_CHECK(engine_allgather(e, qmine, false, q, qb));
    for (size_t r = 0; r < (size_t)e->world; r++) {
        const char *qr = q + r * qb;
        ZINF_CHECK(zinf_dequantize(e->xs, 8, qr, (const float *)(qr + n), n, QW_GROUP, e->dt, (char *)full + r * bytes,
                                   false));
    }
    return ZINF_OK;
}
