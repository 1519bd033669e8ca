/* zero-count-loop [N]: N rounds (10000) of MPI_Allreduce, MPI_Bcast, MPI_Reduce, MPI_Allgather
 * and MPI_Alltoall of count 0 on MPI_COMM_WORLD, for instructions per call under callgrind:
 *
 *   crates/mpi/bin/mpicc -O2 bench/scripts/zero-count-loop.c -o zero-count-loop
 *   CGOUT=cg.out ferry run -n 2 bench/scripts/callgrind-rank0.sh ./zero-count-loop 10000
 *   callgrind_annotate --inclusive=yes cg.out | grep -E ':MPI_(Allreduce|Bcast|Reduce|Allgather|Alltoall) '
 *
 * (inclusive instructions of rank 0 divided by N). */
#include <mpi.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 10000, x = 0, y = 0;
    MPI_Init(&argc, &argv);
    for (int i = 0; i < n; i++) {
        MPI_Allreduce(&x, &y, 0, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        MPI_Bcast(&x, 0, MPI_INT, 0, MPI_COMM_WORLD);
        MPI_Reduce(&x, &y, 0, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
        MPI_Allgather(&x, 0, MPI_INT, &y, 0, MPI_INT, MPI_COMM_WORLD);
        MPI_Alltoall(&x, 0, MPI_INT, &y, 0, MPI_INT, MPI_COMM_WORLD);
    }
    MPI_Finalize();
    return 0;
}
