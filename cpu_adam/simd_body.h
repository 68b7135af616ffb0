// The optimizer loop shared by the SIMD levels, written once over a small vector
// vocabulary that kernels_avx2.c and kernels_avx512.c define before including it:
//   VF, W (floats per vector), SUFFIX; vset vld vst vst_nt (a non-temporal store to an
//   aligned vector) vadd vsub vmul vdiv vfma vsqrt
//   (vfma(a, b, c) = a * b + c, rounded once), vsign (torch's sign, 0 for NaN),
//   vgrad(g, dtype, i) (W gradients as floats), vout(out, dtype, i, x, stream) (the
//   16-bit copy, with non-temporal stores when stream).
// Each line mirrors the element function of internal.h it is named after; the tail
// that does not fill a vector runs those functions themselves.
#define CAT_(a, b) a##_##b
#define CAT(a, b)  CAT_(a, b)

static inline void vput(float *q, VF x, bool nt) {
    if (nt)
        vst_nt(q, x);
    else
        vst(q, x);
}

void CAT(optim, SUFFIX)(const zinf_optim_consts *c, const zinf_optim_tile *t, size_t lo, size_t hi) {
    const VF scale = vset(c->scale), decay = vset(c->decay), l2 = vset(c->l2), b1 = vset(c->b1), b1c = vset(c->b1c),
             b2 = vset(c->b2), b2c = vset(c->b2c), ibc2 = vset(c->inv_bc2_sqrt), eps = vset(c->eps),
             nstep = vset(c->neg_step);
    const bool use_l2 = c->l2 != 0.0f, use_scale = c->scale != 1.0f;
    const zinf_dtype gt = t->grad_dtype, ot = t->out_dtype;
    float *p = t->param, *m = t->exp_avg, *v = t->exp_avg_sq;
    const bool away = t->from_param != NULL; // read the states from elsewhere
    const float *pf = away ? t->from_param : p, *mf = away ? t->from_exp_avg : m, *vf = away ? t->from_exp_avg_sq : v;
    // The copy is only written here (and read later by a device copy): stores that
    // bypass the cache skip reading each line first, 2 of the 32 bytes per parameter.
    // They need the copy aligned to a vector, which pool ranges (multiples of 64)
    // keep when the buffer starts aligned.
    const bool stream = ot != ZINF_DTYPE_NONE && (uintptr_t)((uint16_t *)t->out + lo) % (W * 2) == 0;
    // States written away from where they were read (a speculative update) are not in
    // the cache either: streamed, they skip reading 12 of 44 bytes per parameter.
    // A state the optimizer has not (NULL) is aligned.
#define VALIGNED(q) (((uintptr_t)(q) + lo * sizeof(float)) % (W * sizeof(float)) == 0)
    const bool nt = away && VALIGNED(p) && VALIGNED(m) && VALIGNED(v);
#undef VALIGNED
    size_t i = lo;
    switch (c->kind) {
    case ZINF_OPTIM_ADAM:
    case ZINF_OPTIM_ADAMW:
        for (; i + W <= hi; i += W) { // adam_elem
            VF g = vgrad(t->grad, gt, i);
            if (use_scale) g = vmul(g, scale);
            VF x = vmul(vld(pf + i), decay);
            if (use_l2) g = vfma(l2, x, g);
            VF mi = vld(mf + i);
            VF mm = vfma(b1c, vsub(g, mi), mi);
            VF vv = vfma(vmul(b2c, g), g, vmul(vld(vf + i), b2));
            VF den = vfma(vsqrt(vv), ibc2, eps);
            x = vadd(x, vdiv(vmul(nstep, mm), den));
            vput(p + i, x, nt);
            vput(m + i, mm, nt);
            vput(v + i, vv, nt);
            vout(t->out, ot, i, x, stream);
        }
        break;
    case ZINF_OPTIM_ADAGRAD:
        for (; i + W <= hi; i += W) { // adagrad_elem
            VF g = vgrad(t->grad, gt, i);
            if (use_scale) g = vmul(g, scale);
            VF x = vld(pf + i);
            if (use_l2) g = vfma(l2, x, g);
            VF vv = vfma(g, g, vld(vf + i));
            VF den = vadd(vsqrt(vv), eps);
            x = vadd(x, vdiv(vmul(nstep, g), den));
            vput(p + i, x, nt);
            vput(v + i, vv, nt);
            vout(t->out, ot, i, x, stream);
        }
        break;
    case ZINF_OPTIM_LION:
        for (; i + W <= hi; i += W) { // lion_elem
            VF g = vgrad(t->grad, gt, i);
            if (use_scale) g = vmul(g, scale);
            VF x = vmul(vld(pf + i), decay);
            VF mi = vld(mf + i);
            VF u = vsign(vfma(g, b1c, vmul(mi, b1)));
            x = vfma(nstep, u, x);
            vput(p + i, x, nt);
            vput(m + i, vfma(g, b2c, vmul(mi, b2)), nt);
            vout(t->out, ot, i, x, stream);
        }
        break;
    }
    if (stream || nt) _mm_sfence(); // streamed stores are weakly ordered: publish them before returning
    optim_scalar(c, t, i, hi);
}

// add_scalar's arithmetic, W lanes at a time.
void CAT(add, SUFFIX)(float *restrict dst, const float *restrict src, size_t n, bool first) {
    size_t i = 0;
    if (first) {
        const VF zero = vset(0.0f);
        for (; i + W <= n; i += W)
            vst(dst + i, vadd(zero, vld(src + i)));
    } else {
        for (; i + W <= n; i += W)
            vst(dst + i, vadd(vld(dst + i), vld(src + i)));
    }
    add_scalar(dst + i, src + i, n - i, first);
}
