#define _GNU_SOURCE
#include <mpi.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank; MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    cpu_set_t set; CPU_ZERO(&set); CPU_SET(0, &set);
    sched_setaffinity(0, sizeof set, &set);  /* the scheduler's choice, forced: one core for both */
    int iters = argc > 1 ? atoi(argv[1]) : 2000;
    char buf[8] = {0};
    MPI_Barrier(MPI_COMM_WORLD);
    double t = MPI_Wtime();
    for (int i = 0; i < iters; i++) {
        if (rank == 0) { MPI_Send(buf, 8, MPI_BYTE, 1, 0, MPI_COMM_WORLD); MPI_Recv(buf, 8, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE); }
        else { MPI_Recv(buf, 8, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE); MPI_Send(buf, 8, MPI_BYTE, 0, 0, MPI_COMM_WORLD); }
    }
    t = MPI_Wtime() - t;
    if (rank == 0) printf("%.2f us one-way\n", t / iters / 2 * 1e6);
    MPI_Finalize();
}
