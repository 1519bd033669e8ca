/* bcast-loop: back-to-back MPI_Bcast of SIZE bytes from rank 0, for instruction counts under
 * callgrind (a fixed number of calls, no timing calibration) and quick A/B timings:
 *
 *   ferry run -n 2 ./bcast-loop CALLS [SIZE]
 *
 * Rank 0 prints the time per call (the root runs ahead by as much as the ring holds; the
 * closing barrier waits for the last receive). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    long iters = argc > 1 ? atol(argv[1]) : 1000;
    int size = argc > 2 ? atoi(argv[2]) : 8;
    char *buf = calloc(1, (size_t)size + 1);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (long i = 0; i < iters; i++)
        MPI_Bcast(buf, size, MPI_BYTE, 0, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    double t = MPI_Wtime() - t0;
    if (rank == 0)
        printf("bcast-loop: %ld x %d B: %.3f us each\n", iters, size, t / (double)iters * 1e6);
    free(buf);
    MPI_Finalize();
    return 0;
}
