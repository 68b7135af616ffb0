// The scalar kernels: the element functions of internal.h in a loop. They define the
// results, serve CPUs without AVX2, and finish the tails of the SIMD paths.
#include "internal.h"

void optim_scalar(const zinf_optim_consts *c, const zinf_optim_tile *t, size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; i++) {
        float g = dt_load(t->grad, t->grad_dtype, i);
        if (t->from_param) { // the same arithmetic on copies of the inputs
            t->param[i] = t->from_param[i];
            if (t->exp_avg) t->exp_avg[i] = t->from_exp_avg[i];
            if (t->exp_avg_sq) t->exp_avg_sq[i] = t->from_exp_avg_sq[i];
        }
        switch (c->kind) {
        case ZINF_OPTIM_ADAM:
        case ZINF_OPTIM_ADAMW: adam_elem(c, &t->param[i], &t->exp_avg[i], &t->exp_avg_sq[i], g); break;
        case ZINF_OPTIM_ADAGRAD: adagrad_elem(c, &t->param[i], &t->exp_avg_sq[i], g); break;
        case ZINF_OPTIM_LION: lion_elem(c, &t->param[i], &t->exp_avg[i], g); break;
        }
        out_at(t->out, t->out_dtype, i, t->param[i]);
    }
}

// With first the addition is 0 + src, dst never read: the same value, and -0 comes out
// +0 (the compiler keeps the addition: no -ffast-math).
void add_scalar(float *restrict dst, const float *restrict src, size_t n, bool first) {
    for (size_t i = 0; i < n; i++)
        dst[i] = (first ? 0.0f : dst[i]) + src[i];
}

double sumsq_scalar(const void *g, zinf_dtype dt, size_t n) {
    double lanes[STATS_LANES] = {0};
    for (size_t i = 0; i < n; i++) {
        double x = dt_load(g, dt, i);
        lanes[i % STATS_LANES] = fma(x, x, lanes[i % STATS_LANES]);
    }
    return fold_lanes(lanes);
}

// Element by element; the state arrays the
// optimizer does not use are not touched, as the update does not touch them.
void traffic_scalar(const zinf_optim_tile *t, size_t lo, size_t hi, uint32_t zero) {
    size_t gsize = zinf_dtype_size(t->grad_dtype), osize = zinf_dtype_size(t->out_dtype);
    for (size_t i = lo; i < hi; i++) {
        uint32_t g = 0;
        memcpy(&g, (const char *)t->grad + i * gsize, gsize);
        uint32_t p = f32_bits(t->param[i]) ^ (g & zero);
        t->param[i] = bits_f32(p);
        if (t->exp_avg) t->exp_avg[i] = bits_f32(f32_bits(t->exp_avg[i]) ^ (p & zero));
        if (t->exp_avg_sq) t->exp_avg_sq[i] = bits_f32(f32_bits(t->exp_avg_sq[i]) ^ (p & zero));
        if (osize) memcpy((char *)t->out + i * osize, &p, osize);
    }
}
