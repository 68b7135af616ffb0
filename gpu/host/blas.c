// The host backend's matrix products through OpenBLAS: fp32 operands go to
// cblas_sgemm as they are; 16-bit ones are widened to fp32 first (exact), so every
// product and sum is fp32 as on a GPU's tensor cores, and the result is rounded once
// when stored. cblas_sbgemm takes bf16 directly where the OpenBLAS build has it.
#include <cblas.h>

#include "host.h"

const char *zinf_gpu_host_blas_config(void) { return openblas_get_config(); }

int zinf_gpu_host_blas_threads(void) { return openblas_get_num_threads(); }

// OpenBLAS's sgemm rounds differently with different thread counts (measured with
// OpenBLAS 0.3.21: one thread and two give different losses for the same step), and
// its default count follows the cores it may run on, which mpirun's binding changes.
// A device computes the same bits wherever it runs, so the host device uses one.
void host_blas_fix_threads(void) { openblas_set_num_threads(1); }

// The rows x cols matrix at p with leading dimension ld, widened into a dense fp32
// copy with leading dimension cols.
static void widen(float *out, const void *p, zinf_dtype dt, int rows, int cols, int ld) {
    for (int r = 0; r < rows; r++)
        ld_row(out + (size_t)r * cols, p, dt, (size_t)r * ld, (size_t)cols);
}

// Row i of the product, in fp32 with the bias added: the activation's epilogue
// (zinf_gemm_act), then rounded into c.
static void store_row(const zinf_gemm_args *g, void *c, int i, float *row) {
    size_t at = (size_t)i * g->ldc;
    if (g->act == ZINF_GEMM_GELU) {
        st_row(g->aux, g->dt, at, row, (size_t)g->n);
        for (int j = 0; j < g->n; j++)
            row[j] = host_gelu(row[j]);
    } else if (g->act == ZINF_GEMM_DGELU) {
        for (int j = 0; j < g->n; j++)
            row[j] *= host_gelu_grad(dt_load(g->aux, g->dt, at + (size_t)j));
    }
    if ((char *)row != (char *)c + at * zinf_dtype_size(g->dt))
        st_row(c, g->dt, at, row, (size_t)g->n); // fp32: c's own row
}

static zinf_status gemm_one(const zinf_gemm_args *g, const void *a, const void *b, void *c, host_scratch *s) {
    int ar = g->trans_a ? g->k : g->m, ac = g->trans_a ? g->m : g->k; // A as stored
    int br = g->trans_b ? g->n : g->k, bc = g->trans_b ? g->k : g->n;
    CBLAS_TRANSPOSE ta = g->trans_a ? CblasTrans : CblasNoTrans, tb = g->trans_b ? CblasTrans : CblasNoTrans;
    // A residual is C with beta 1: added in fp32 before the one rounding.
    float beta = g->residual ? 1.0f : g->beta;
    const void *cin = g->residual ? g->residual : c;
    if (g->dt == ZINF_DTYPE_F32) {
        if (g->residual) memcpy(c, g->residual, (size_t)g->m * g->n * sizeof(float)); // packed: ldc == n
        cblas_sgemm(CblasRowMajor, ta, tb, g->m, g->n, g->k, g->alpha, a, g->lda, b, g->ldb, beta, c, g->ldc);
        for (int i = 0; i < g->m; i++) {
            float *row = (float *)c + (size_t)i * g->ldc;
            if (g->bias)
                for (int j = 0; j < g->n; j++)
                    row[j] += ((const float *)g->bias)[j];
            if (g->act != ZINF_GEMM_PLAIN) store_row(g, c, i, row);
        }
        return ZINF_OK;
    }
    float *fc = host_scratch_get(s, 2, (size_t)g->m * g->n);
    if (!fc) return ZINF_ERR_NOMEM;
    if (beta != 0.0f) widen(fc, cin, g->dt, g->m, g->n, g->ldc);
#ifdef ZINF_HAVE_CBLAS_SBGEMM
    if (g->dt == ZINF_DTYPE_BF16) {
        cblas_sbgemm(CblasRowMajor, ta, tb, g->m, g->n, g->k, g->alpha, a, g->lda, b, g->ldb, beta, fc, g->n);
    } else
#endif
    {
        float *fa = host_scratch_get(s, 0, (size_t)ar * ac), *fb = host_scratch_get(s, 1, (size_t)br * bc);
        if (!fa || !fb) return ZINF_ERR_NOMEM;
        widen(fa, a, g->dt, ar, ac, g->lda);
        widen(fb, b, g->dt, br, bc, g->ldb);
        cblas_sgemm(CblasRowMajor, ta, tb, g->m, g->n, g->k, g->alpha, fa, ac, fb, bc, beta, fc, g->n);
    }
    for (int i = 0; i < g->m; i++) {
        float *row = fc + (size_t)i * g->n;
        if (g->bias)
            for (int j = 0; j < g->n; j++)
                row[j] += dt_load(g->bias, g->dt, (size_t)j);
        store_row(g, c, i, row);
    }
    return ZINF_OK;
}

zinf_status host_gemm(const zinf_gemm_args *g, host_scratch *s) {
    size_t es = zinf_dtype_size(g->dt);
    int batch = g->batch > 1 ? g->batch : 1;
    for (int i = 0; i < batch; i++) {
        const char *a = (const char *)g->a + (size_t)i * g->stride_a * es;
        const char *b = (const char *)g->b + (size_t)i * g->stride_b * es;
        char *c = (char *)g->c + (size_t)i * g->stride_c * es;
        ZINF_CHECK(gemm_one(g, a, b, c, s));
    }
    return ZINF_OK;
}
