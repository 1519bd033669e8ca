/* ScaLAPACK and BLACS stand-ins for MUMPS: MUMPS calls them only to factor the root node of
 * the elimination tree in parallel (KEEP(38) set), which conformance/mumps turns off with
 * ICNTL(13)=1 because ScaLAPACK's source is not at hand here. Should one be called after all,
 * the job stops saying which, instead of computing something wrong. */
#include <mpi.h>
#include <stdio.h>

static void refuse(const char *name)
{
    fprintf(stderr, "mumps test: %s called, but this build has no ScaLAPACK (run with ICNTL(13)=1)\n", name);
    MPI_Abort(MPI_COMM_WORLD, 3);
}

#define STUB(name)                                                                             \
    void name##_(void) { refuse(#name); }
STUB(blacs_gridinit)
STUB(blacs_gridinfo)
STUB(blacs_gridexit)
STUB(descinit)
STUB(pdgetrf)
STUB(pdgetrs)
STUB(pdpotrf)
STUB(pdpotrs)

int numroc_(void)
{
    refuse("numroc");
    return 0;
}
