/* Shared helpers of ferry's MPI C test programs (as MPICH's mtest): CHECK counts a failed
 * condition and says where; finish() sums the counts, prints " No Errors" from rank 0 when
 * there are none, and makes the exit status non-zero otherwise. */
#ifndef FERRY_MTEST_H
#define FERRY_MTEST_H
#include <mpi.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int errs __attribute__((unused)) = 0;

static __attribute__((unused)) int mt_rank(void)
{
    int r = 0, f = 0;
    MPI_Initialized(&f);
    if (f)
        MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}

#define CHECK(cond, ...)                                                                   \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            errs++;                                                                        \
            fprintf(stderr, "[%d] %s:%d: %s: ", mt_rank(), __FILE__, __LINE__, #cond);     \
            fprintf(stderr, __VA_ARGS__);                                                  \
            fprintf(stderr, "\n");                                                         \
            fflush(stderr);                                                                \
        }                                                                                  \
    } while (0)

/* The MPI call returned an error of class `cls` (codes may differ between implementations). */
#define CHECK_CLASS(rc, cls, what)                                                         \
    do {                                                                                   \
        int c_ = -1;                                                                       \
        MPI_Error_class((rc), &c_);                                                        \
        CHECK(c_ == (cls), "%s: error class %d, expected %d (%s)", what, c_, (cls), #cls); \
    } while (0)

#define CHECK_OK(rc, what) CHECK((rc) == MPI_SUCCESS, "%s returned %d", what, (rc))

static __attribute__((unused)) int finish(void)
{
    int all = 0, rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Allreduce(&errs, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) {
        if (all == 0)
            printf(" No Errors\n");
        else
            printf(" Found %d errors\n", all);
        fflush(stdout);
    }
    MPI_Finalize();
    return all ? 1 : 0;
}
#endif
