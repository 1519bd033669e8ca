/* Init, a barrier, hold for argv[1] seconds (so the node daemons can be looked at), finalize. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Barrier(MPI_COMM_WORLD);
    sleep(argc > 1 ? atoi(argv[1]) : 3);
    if (rank == 0)
        printf("hello from %d ranks\n", size);
    MPI_Finalize();
    return 0;
}
