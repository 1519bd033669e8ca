/* The C half of the binding-cost benchmark: the loops of fortran_loop.f90, call for call. */
#include <mpi.h>
#include <stdio.h>
#include <time.h>

int main(int argc, char **argv)
{
    enum { warmup = 2000, iterations = 50000 };
    int rank, nranks;
    double x, y, t0 = 0, t1;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    x = rank;
    for (int i = 1; i <= warmup + iterations; i++) {
        if (i == warmup + 1)
            t0 = MPI_Wtime();
        if (rank == 0) {
            MPI_Send(&x, 1, MPI_DOUBLE, 1, 0, MPI_COMM_WORLD);
            MPI_Recv(&y, 1, MPI_DOUBLE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else if (rank == 1) {
            MPI_Recv(&y, 1, MPI_DOUBLE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(&x, 1, MPI_DOUBLE, 0, 0, MPI_COMM_WORLD);
        }
    }
    t1 = MPI_Wtime();
    if (rank == 0)
        printf("pingpong,8,%d,%d,%.3f\n", nranks, iterations, (t1 - t0) * 1e6 / iterations);
    MPI_Barrier(MPI_COMM_WORLD);
    for (int i = 1; i <= warmup + iterations; i++) {
        if (i == warmup + 1)
            t0 = MPI_Wtime();
        MPI_Allreduce(&x, &y, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    }
    t1 = MPI_Wtime();
    if (rank == 0)
        printf("allreduce,8,%d,%d,%.3f\n", nranks, iterations, (t1 - t0) * 1e6 / iterations);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Request requests[2];
    clock_t c0 = 0;
    for (int i = 1; i <= warmup + iterations; i++) {
        if (i == warmup + 1) {
            t0 = MPI_Wtime();
            c0 = clock();
        }
        MPI_Irecv(&y, 1, MPI_DOUBLE, 0, 0, MPI_COMM_SELF, &requests[0]);
        MPI_Isend(&x, 1, MPI_DOUBLE, 0, 0, MPI_COMM_SELF, &requests[1]);
        MPI_Waitall(2, requests, MPI_STATUSES_IGNORE);
    }
    t1 = MPI_Wtime();
    clock_t c1 = clock();
    if (rank == 0) {
        printf("self-isend-irecv-waitall,8,%d,%d,%.3f\n", nranks, iterations, (t1 - t0) * 1e6 / iterations);
        /* processor time, as Fortran's cpu_time: clock() */
        printf("self-isend-irecv-waitall-cpu,8,%d,%d,%.3f\n", nranks, iterations,
               (double)(c1 - c0) / CLOCKS_PER_SEC * 1e6 / iterations);
    }
    MPI_Finalize();
    return 0;
}
