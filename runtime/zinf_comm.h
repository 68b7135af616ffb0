// zinf comm: communication between data-parallel ranks (single, MPI, NCCL). This
// header starts with what the build can use, for `zinf info` and backend selection.
#ifndef ZINF_COMM_H
#define ZINF_COMM_H

#include <stdbool.h>

#include "zinf_base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zinf_comm_info {
    bool mpi;              // built with MPI
    char mpi_version[160]; // MPI_Get_library_version, first line
    bool nccl;             // built with NCCL
    int nccl_version;      // ncclGetVersion, e.g. 22703
} zinf_comm_info;

void zinf_comm_probe(zinf_comm_info *out);

#ifdef __cplusplus
}
#endif
#endif
