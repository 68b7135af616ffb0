// A block's MLP in tiles (memory.tile_bound): the family's MLP (model_mlp) computed
// from tiles of its flat buffer [norm | linear 1 | linear 2 | biases]. Each rank's run
// of a tile is any range of the buffer: it holds a part of each parameter it touches,
// which is, in the parameter's rows as stored, a partial row, whole rows and a partial
// row. Each part's product is added into its layer's output, zeroed first.
//
// Forward: sweep 1 computes the norm (tile 0 comes first, and its first run holds the
// norm whole: zinf_module_info.tile_first), then linear 1's parts, and collects both
// biases; linear 1's bias and the activation follow; sweep 2 computes linear 2's parts,
// then its bias and the residual. Backward, both sweeps last tile first: sweep A forms
// linear 2's input gradient from its parts; the activation's backward and both biases'
// gradients (whole, as the plain op forms them) follow; sweep B, with the gradient
// tiles, adds each part's weight gradient, hands over the biases' gradients and forms
// linear 1's input gradient, and ends at tile 0, where that gradient is whole, with the
// norm's backward.
//
// Exactness: every weight gradient element is the plain op's sum over the tokens. An
// output element whose sum runs over a whole row (of an (out, in) weight in the
// forward, of an (in, out) one in the input gradient) is the plain op's where the
// backend's product gives it the same bits in any block; the other sums are cut at the
// runs' ends and rounded to the dtype after each part, and a bias is added after the
// products rather than with them: within rounding of the plain MLP.
#include <stdlib.h>

#include "model_internal.h"
#include "zinf_half.h"

typedef enum { FWD_1, FWD_2, BWD_A, BWD_B } mlp_phase;

// The layer's buffers: input x, output y, and their gradients.
typedef struct layer_bufs {
    char *x, *y, *dx, *dy;
} layer_bufs;

typedef struct mlp_run {
    zinf_model *m;
    zinf_stream *s;
    int l, mod;
    model_mlp d;
    layer_bufs lb[2];
    size_t es;
} mlp_run;

static zinf_status gemm(mlp_run *r, bool ta, bool tb, int m, int n, int k, const void *a, int lda, const void *b,
                        int ldb, void *c, int ldc) {
    zinf_gemm_args g = {.dt = r->m->p.dtype, .trans_a = ta, .trans_b = tb, .m = m, .n = n, .k = k, .a = a, .lda = lda,
                        .b = b, .ldb = ldb, .c = c, .ldc = ldc, .alpha = 1.0f, .beta = 1.0f};
    return zinf_gemm(r->s, &g);
}

// The products of a rectangle of layer L's weight: stored rows [r0, r0 + h) and columns
// [c0, c0 + w) of a matrix `cols` wide, at p (gradient at g), its outputs from column y0.
static zinf_status rect(mlp_run *r, mlp_phase ph, int L, int y0, size_t r0, size_t h, size_t c0, size_t w,
                        size_t cols, const char *p, char *g) {
    const layer_bufs *b = &r->lb[L];
    int BT = r->m->b * r->m->p.seq_len, IN = r->d.lin[L].in, OUT = r->d.lin[L].out, ld = (int)cols;
    bool io = r->d.in_out;
    size_t in0 = io ? r0 : c0, nin = io ? h : w, out0 = (size_t)y0 + (io ? c0 : r0), nout = io ? w : h, es = r->es;
    const char *x = b->x + in0 * es, *dy = b->dy + out0 * es;
    if (ph == FWD_1 || ph == FWD_2) // y[:, out] += x[:, in] W^T
        return gemm(r, false, !io, BT, (int)nout, (int)nin, x, IN, p, ld, b->y + out0 * es, OUT);
    if (ph == BWD_B) { // dW += dy[:, out]^T x[:, in] (as stored)
        if (io) ZINF_CHECK(gemm(r, true, false, (int)nin, (int)nout, BT, x, IN, dy, OUT, g, ld));
        else ZINF_CHECK(gemm(r, true, false, (int)nout, (int)nin, BT, dy, OUT, x, IN, g, ld));
        if (L == 1) return ZINF_OK; // linear 2's input gradient came in sweep A
    }
    return gemm(r, false, io, BT, (int)nin, (int)nout, dy, OUT, p, ld, b->dx + in0 * es, IN); // dx += dy W
}

// Layer L's weight part j: parameter pi's elements [lo, lo + n) at p (gradient at g),
// in rectangles of whole rows where it has them.
static zinf_status weight_part(mlp_run *r, mlp_phase ph, int L, int j, const zinf_param_info *pi, size_t lo, size_t n,
                               const char *p, char *g) {
    size_t cols = (size_t)pi->shape[1], end = lo + n, es = r->es;
    int y0 = j * (r->d.lin[L].out / (r->d.lin[L].w[1] >= 0 ? 2 : 1));
    for (size_t at = lo; at < end;) {
        size_t row = at / cols, c = at % cols, h = 1, w = cols - c < end - at ? cols - c : end - at;
        if (c == 0 && end - at >= cols) h = (end - at) / cols, w = cols;
        size_t off = (at - lo) * es;
        ZINF_CHECK(rect(r, ph, L, y0, row, h, c, w, cols, p + off, g ? g + off : NULL));
        at += h * w;
    }
    return ZINF_OK;
}

// Where both layers' biases (or their gradients) sit in m->mlp_bias: part j of layer L's.
static size_t bias_at(const mlp_run *r, int L, int j) {
    const mlp_linear *lin = &r->d.lin[L];
    return (L ? (size_t)r->d.lin[0].out : 0) + (size_t)j * (size_t)(lin->out / (lin->b[1] >= 0 ? 2 : 1));
}

// One rank's run [a, a + n) of the flat buffer, at p (gradient at g): the phase's work
// on each parameter part it holds.
static zinf_status run(mlp_run *r, mlp_phase ph, size_t a, size_t n, const char *p, char *g) {
    const zinf_module_info *mi = &r->m->mods[r->mod];
    for (int L = 0; L < 2; L++)
        for (int j = 0; j < 2; j++)
            for (int bias = 0; bias < 2; bias++) {
                int idx = bias ? r->d.lin[L].b[j] : r->d.lin[L].w[j];
                if (idx < 0) continue;
                int64_t lo, cnt;
                size_t at;
                model_overlap(&mi->params[idx], a, n, &lo, &cnt, &at);
                if (!cnt) continue;
                const char *pp = p + at * r->es;
                char *gp = g ? g + at * r->es : NULL, *sc = (char *)r->m->mlp_bias + (bias_at(r, L, j) + lo) * r->es;
                size_t bytes = (size_t)cnt * r->es;
                if (!bias && (ph == BWD_B || (ph == FWD_1) == (L == 0))) // sweep A: linear 2's
                    ZINF_CHECK(weight_part(r, ph, L, j, &mi->params[idx], (size_t)lo, (size_t)cnt, pp, gp));
                else if (bias && ph == FWD_1)
                    ZINF_CHECK(zinf_copy_async(r->s, sc, pp, bytes, ZINF_COPY_D2D));
                else if (bias && ph == BWD_B)
                    ZINF_CHECK(zinf_copy_async(r->s, gp, sc, bytes, ZINF_COPY_D2D));
            }
    return ZINF_OK;
}

// One sweep over the module's tiles: ascending in the forward, last first in the
// backward; `then` is the tile the op asks for after it (-1: none).
static zinf_status sweep(mlp_run *r, mlp_phase ph, int then) {
    const zinf_tile_source *src = r->m->tiles;
    const zinf_tiling *t = &src->tiling[r->mod];
    int nt = (int)zinf_tiling_count(t);
    bool up = ph == FWD_1 || ph == FWD_2, grad = ph == BWD_B;
    for (int i = 0; i < nt; i++) {
        int k = up ? i : nt - 1 - i, next = i + 1 < nt ? (up ? k + 1 : k - 1) : then;
        size_t n = zinf_tiling_len(t, (size_t)k);
        char *p, *g = NULL;
        ZINF_CHECK(src->get(src->ctx, r->s, r->mod, k, next, false, (void **)&p));
        if (grad) ZINF_CHECK(src->get(src->ctx, r->s, r->mod, k, -1, true, (void **)&g));
        if (ph == FWD_1 && k == 0) ZINF_CHECK(r->d.norm_fwd(r->m, r->s, r->l, p));
        for (int rk = 0; rk < t->ranks; rk++) {
            size_t off = (size_t)rk * n * r->es;
            ZINF_CHECK(run(r, ph, (size_t)rk * t->slice + (size_t)k * t->tile, n, p + off, g ? g + off : NULL));
        }
        if (grad && k == 0) ZINF_CHECK(r->d.norm_bwd(r->m, r->s, r->l, p, g));
        if (grad) ZINF_CHECK(src->done(src->ctx, r->s, r->mod, k, true));
        ZINF_CHECK(src->done(src->ctx, r->s, r->mod, k, false));
    }
    return ZINF_OK;
}

static void begin(mlp_run *r, zinf_model *m, zinf_stream *s, int l) {
    layer_acts *a = acts_of(m, l);
    *r = (mlp_run){.m = m, .s = s, .l = l, .mod = mod_mlp(l), .es = zinf_dtype_size(m->p.dtype)};
    m->fam->mlp(&m->p.shape, &r->d);
    r->lb[0] = (layer_bufs){.x = a->ln2, .y = a->fc, .dx = m->dln, .dy = m->dfc};
    r->lb[1] = (layer_bufs){.x = a->act, .y = m->res3[l], .dx = r->d.dact ? m->dact : m->dfc, .dy = m->dres};
}

static bool has_bias(const model_mlp *d) { return d->lin[0].b[0] >= 0; }

// y (BT x out) += ones (BT x 1) bias (1 x out): layer L's bias on every token.
static zinf_status add_bias(mlp_run *r, int L) {
    if (!has_bias(&r->d)) return ZINF_OK;
    int BT = r->m->b * r->m->p.seq_len, out = r->d.lin[L].out;
    return gemm(r, false, false, BT, out, 1, r->m->ones, 1, (char *)r->m->mlp_bias + bias_at(r, L, 0) * r->es, out,
                r->lb[L].y, out);
}

static zinf_status zero(mlp_run *r, void *p, int width) {
    return zinf_memset_async(r->s, p, 0, (size_t)r->m->b * r->m->p.seq_len * (size_t)width * r->es);
}

zinf_status model_mlp_tiles_fwd(zinf_model *m, zinf_stream *s, int l) {
    mlp_run r;
    begin(&r, m, s, l);
    ZINF_CHECK(zero(&r, r.lb[0].y, r.d.lin[0].out));
    ZINF_CHECK(sweep(&r, FWD_1, 0));
    ZINF_CHECK(add_bias(&r, 0));
    ZINF_CHECK(r.d.act_fwd(m, s, l));
    ZINF_CHECK(zero(&r, r.lb[1].y, r.d.lin[1].out));
    ZINF_CHECK(sweep(&r, FWD_2, -1));
    ZINF_CHECK(add_bias(&r, 1));
    layer_acts *a = acts_of(m, l);
    return zinf_add(s, m->p.dtype, m->res3[l], m->res3[l], a->res2, (size_t)m->b * m->p.seq_len * m->p.shape.n_embd);
}

zinf_status model_mlp_tiles_bwd(zinf_model *m, zinf_stream *s, int l) {
    mlp_run r;
    begin(&r, m, s, l);
    int BT = m->b * m->p.seq_len, nt = (int)zinf_tiling_count(&m->tiles->tiling[r.mod]);
    ZINF_CHECK(zero(&r, r.lb[1].dx, r.d.lin[1].in));
    ZINF_CHECK(sweep(&r, BWD_A, nt - 1));
    ZINF_CHECK(r.d.act_bwd(m, s, l));
    if (has_bias(&r.d)) { // the biases' gradients as the plain op sums them
        int n0 = r.d.lin[0].out, n1 = r.d.lin[1].out;
        ZINF_CHECK(zinf_bias_grad(s, m->p.dtype, m->mlp_bias, r.lb[0].dy, BT, n0, true));
        ZINF_CHECK(zinf_bias_grad(s, m->p.dtype, (char *)m->mlp_bias + (size_t)n0 * r.es, r.lb[1].dy, BT, n1, true));
    }
    ZINF_CHECK(zero(&r, r.lb[0].dx, r.d.lin[0].in));
    return sweep(&r, BWD_B, -1);
}

zinf_status model_mlp_tiles_alloc(zinf_model *m) {
    model_mlp d;
    m->fam->mlp(&m->p.shape, &d);
    if (!has_bias(&d)) return ZINF_OK;
    size_t BT = (size_t)m->p.batch * m->p.seq_len, es = zinf_dtype_size(m->p.dtype);
    ZINF_CHECK(model_dalloc(m, &m->ones, BT, es, "mlp tiles: ones"));
    ZINF_CHECK(model_dalloc(m, &m->mlp_bias, (size_t)(d.lin[0].out + d.lin[1].out), es, "mlp tiles: biases"));
    if (!m->dev) return ZINF_OK;
    void *h = malloc(BT * es);
    if (!h) return zinf_fail(ZINF_ERR_NOMEM, "%s: out of host memory", m->fam->name);
    for (size_t i = 0; i < BT; i++)
        dt_store(h, m->p.dtype, i, 1.0f);
    zinf_status rc = model_upload(m, m->ones, h, BT * es);
    free(h);
    return rc;
}
