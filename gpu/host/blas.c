// The host backend's BLAS as it describes itself (OpenBLAS's own config query).
#include <cblas.h>

#include "zinf_gpu.h"

const char *zinf_gpu_host_blas_config(void) { return openblas_get_config(); }

int zinf_gpu_host_blas_threads(void) { return openblas_get_num_threads(); }
