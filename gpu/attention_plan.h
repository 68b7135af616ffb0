// The CUDA attention's workspace plan: how many heads a chunk takes and where each fp32
// buffer lies. Plain arithmetic, shared by the kernels (gpu/cuda/attention.cu) and the
// front end, which sizes the workspace for any backend without a device (a plan).
#ifndef ZINF_GPU_ATTENTION_PLAN_H
#define ZINF_GPU_ATTENTION_PLAN_H

#include <stddef.h>

// A chunk of query heads is processed at a time so that the scores, two T x T fp32
// matrices per head in the backward, stay within this budget. A chunk holds whole
// groups of the query heads that share a kv head (at least one group), so that one
// product over a group's stacked rows sums its kv head's gradient.
#define ATT_SCORES_BUDGET ((size_t)1 << 30)

typedef struct att_plan {
    int hd;             // channels per head
    int group;          // query heads per kv head, NH / NKV
    int BH;             // query heads in all, B * NH
    int chunk;          // query heads per chunk, a multiple of group
    size_t head_elems;  // T * hd
    size_t score_elems; // T * T
} att_plan;

static inline att_plan att_plan_of(int B, int T, int NH, int NKV, int hd) {
    att_plan p;
    p.hd = hd;
    p.group = NH / NKV;
    p.BH = B * NH;
    p.head_elems = (size_t)T * hd;
    p.score_elems = (size_t)T * T;
    size_t chunk = ATT_SCORES_BUDGET / (2 * p.score_elems * sizeof(float));
    chunk -= chunk % (size_t)p.group;
    if (chunk < (size_t)p.group) chunk = (size_t)p.group;
    if (chunk > (size_t)p.BH) chunk = (size_t)p.BH;
    p.chunk = (int)chunk;
    return p;
}

// The workspace, fp32, each buffer 256-byte aligned: three (chunk, T, hd) buffers of
// query heads, four (chunk / group, T, hd) of kv heads and two (chunk, T, T) of scores.
// The forward uses q, k, v, y (= dq) and s.
typedef struct att_ws {
    float *q, *dy, *dq;     // (chunk, T, hd)
    float *k, *v, *dk, *dv; // (chunk / group, T, hd)
    float *s, *dp;          // (chunk, T, T)
} att_ws;

static inline size_t round256(size_t bytes) { return (bytes + 255) & ~(size_t)255; }

// Bytes of the workspace; fills *w from base when w is given.
static inline size_t att_layout(const att_plan *p, void *base, att_ws *w) {
    size_t head = round256((size_t)p->chunk * p->head_elems * sizeof(float));
    size_t kv = round256((size_t)(p->chunk / p->group) * p->head_elems * sizeof(float));
    size_t score = round256((size_t)p->chunk * p->score_elems * sizeof(float));
    if (w) {
        char *b = (char *)base;
        w->q = (float *)b;
        w->k = (float *)(b + head);
        w->v = (float *)(b + head + kv);
        w->dy = (float *)(b + head + 2 * kv);
        w->dq = (float *)(b + 2 * head + 2 * kv);
        w->dk = (float *)(b + 3 * head + 2 * kv);
        w->dv = (float *)(b + 3 * head + 3 * kv);
        w->s = (float *)(b + 3 * head + 4 * kv);
        w->dp = (float *)(b + 3 * head + 4 * kv + score);
    }
    return 3 * head + 4 * kv + 2 * score;
}

#endif
