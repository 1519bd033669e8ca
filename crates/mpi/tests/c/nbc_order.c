/* A nonblocking collective started before a blocking one on some ranks and after it on others
 * (mpi4py's ULFM fallback does this with MPI_Iallreduce and MPI_Barrier). MPI calls the order
 * erroneous, but MPICH and Open MPI complete it, each call matching its own kind; so must we.
 * Also: several nonblocking collectives in flight across blocking ones. */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size, errs = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    for (int round = 0; round < 20; round++) {
        int in = rank + round, sum = -1;
        MPI_Request req;
        if (rank % 2 == 0) {
            MPI_Iallreduce(&in, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &req);
            MPI_Barrier(MPI_COMM_WORLD);
        } else {
            MPI_Barrier(MPI_COMM_WORLD);
            MPI_Iallreduce(&in, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &req);
        }
        MPI_Wait(&req, MPI_STATUS_IGNORE);
        int want = size * (size - 1) / 2 + size * round;
        if (sum != want) {
            errs++;
            printf("round %d: rank %d got %d, expected %d\n", round, rank, sum, want);
        }
    }
    /* Two in flight, a blocking bcast between them, completed in reverse order. */
    int a = rank, b = 2 * rank, ra = -1, rb = -1, root = size - 1;
    MPI_Request r[2];
    MPI_Iallreduce(&a, &ra, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD, &r[0]);
    int value = rank == root ? 42 : 0;
    MPI_Bcast(&value, 1, MPI_INT, root, MPI_COMM_WORLD);
    MPI_Iallreduce(&b, &rb, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &r[1]);
    MPI_Wait(&r[1], MPI_STATUS_IGNORE);
    MPI_Wait(&r[0], MPI_STATUS_IGNORE);
    if (value != 42 || ra != size - 1 || rb != size * (size - 1)) {
        errs++;
        printf("rank %d: bcast %d, max %d, sum %d\n", rank, value, ra, rb);
    }
    int total = 0;
    MPI_Reduce(&errs, &total, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0 && total == 0)
        printf(" No Errors\n");
    MPI_Finalize();
    return 0;
}
