/* A job started by a foreign process manager (MPICH's hydra: `mpiexec.hydra -n 4 pmi_job`):
 * messages around a ring, a reduction, a broadcast, MPI_APPNUM (which command of an MPMD
 * command line, `-n 2 pmi_job : -n 2 pmi_job`) and MPI_UNIVERSE_SIZE. Each rank prints its
 * appnum. With an argument: `abort` makes rank 1 call MPI_Abort(…, 7), `exit3` makes rank 2
 * exit with status 3 without MPI_Finalize; the others wait in a barrier for the end. */
#include "mtest.h"

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "ok";
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    if (strcmp(mode, "abort") == 0 || strcmp(mode, "exit3") == 0) {
        if (strcmp(mode, "abort") == 0 && rank == 1)
            MPI_Abort(MPI_COMM_WORLD, 7);
        if (strcmp(mode, "exit3") == 0 && rank == 2)
            exit(3);
        MPI_Barrier(MPI_COMM_WORLD);
        printf("rank %d survived\n", rank);
        MPI_Finalize();
        return 0;
    }

    int right = (rank + 1) % size, left = (rank + size - 1) % size, got = -1;
    MPI_Sendrecv(&rank, 1, MPI_INT, right, 0, &got, 1, MPI_INT, left, 0, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    CHECK(got == left, "ring: got %d from the left, expected %d", got, left);
    int sum = -1;
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    CHECK(sum == size * (size - 1) / 2, "allreduce: %d", sum);
    int root = size - 1, value = rank == root ? 4242 : 0;
    MPI_Bcast(&value, 1, MPI_INT, root, MPI_COMM_WORLD);
    CHECK(value == 4242, "bcast: %d", value);

    int *attr = NULL, flag = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_APPNUM, &attr, &flag);
    CHECK(flag && attr, "MPI_APPNUM is not set");
    int appnum = flag && attr ? *attr : -1;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_UNIVERSE_SIZE, &attr, &flag);
    CHECK(flag && attr && *attr >= size, "MPI_UNIVERSE_SIZE below the world's size");
    printf("rank %d of %d: appnum %d\n", rank, size, appnum);
    fflush(stdout);
    return finish();
}
