/* mpi-ext.h of ferry: for programs written for Open MPI's extensions. ferry's extensions
 * (User-Level Failure Mitigation: MPIX_Comm_revoke, MPIX_Comm_shrink, MPIX_Comm_agree, ...)
 * are declared in mpi.h, as MPICH does; this header only includes it. */
#ifndef FERRY_MPI_EXT_H
#define FERRY_MPI_EXT_H
#include <mpi.h>
#endif
