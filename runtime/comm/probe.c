// What communication libraries this build has, and their versions, for `zinf info`.
// MPI_Get_library_version is one of the few MPI calls allowed before MPI_Init.
#include <string.h>

#include "config.h"
#include "zinf_comm.h"

#ifdef ZINF_HAVE_MPI
#include <mpi.h>
#endif
#ifdef ZINF_HAVE_NCCL
#include <nccl.h>
#endif

void zinf_comm_probe(zinf_comm_info *out) {
    memset(out, 0, sizeof *out);
#ifdef ZINF_HAVE_MPI
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    out->mpi = true;
    if (MPI_Get_library_version(version, &len) == MPI_SUCCESS) {
        // Open MPI adds the repository revision and release date on later lines.
        version[len < (int)sizeof version ? len : (int)sizeof version - 1] = '\0';
        size_t first = strcspn(version, "\r\n");
        if (first >= sizeof out->mpi_version) first = sizeof out->mpi_version - 1;
        memcpy(out->mpi_version, version, first);
    }
#endif
#ifdef ZINF_HAVE_NCCL
    out->nccl = true;
    if (ncclGetVersion(&out->nccl_version) != ncclSuccess) out->nccl_version = 0;
#endif
}
