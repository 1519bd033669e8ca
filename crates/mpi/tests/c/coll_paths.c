/* Blocking collectives whose ranks pass counts on either side of a threshold where the
 * selection table sends the call through the shared segment on one rank and by messages on
 * another (erroneous in MPI): the job must end naming the call, not hang.
 *   coll_paths bcast-long   root 128 KiB through the segment, the others 16 KiB by messages
 *   coll_paths bcast-short  root 3 KiB through a post slot, the others 16 KiB by messages
 *   coll_paths reduce       root 64 KiB through the segment, the others 16 KiB by messages
 *   coll_paths allreduce    in place, rank 0 64 KiB through the segment, the others 16 KiB
 *   coll_paths alltoall     rank 0 blocks of 8 KiB by messages, the others 2 KiB through it
 *   coll_paths bcast-ahead N  as bcast-short, but the root posts N broadcasts (which do not
 *                           wait) and finalizes: it runs past the others' records
 *   coll_paths bcast-post   the last rank 4 KiB through a post slot, the others 64 KiB through
 *                           the segment in turns: two ways through the one segment
 * A barrier and one agreeing call come first, so that the segment exists already. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int data[32768], result[32768];

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    const char *what = argc > 1 ? argv[1] : "bcast-long";
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Bcast(data, 8, MPI_INT, 0, MPI_COMM_WORLD);
    int big = rank == 0;
    if (!strcmp(what, "bcast-long")) {
        MPI_Bcast(data, big ? 32768 : 4096, MPI_INT, 0, MPI_COMM_WORLD);
    } else if (!strcmp(what, "bcast-short")) {
        MPI_Bcast(data, big ? 768 : 4096, MPI_INT, 0, MPI_COMM_WORLD);
    } else if (!strcmp(what, "bcast-post")) {
        int size;
        MPI_Comm_size(MPI_COMM_WORLD, &size);
        MPI_Bcast(data, rank == size - 1 ? 1024 : 16384, MPI_INT, 0, MPI_COMM_WORLD);
    } else if (!strcmp(what, "reduce")) {
        MPI_Reduce(data, result, big ? 16384 : 4096, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    } else if (!strcmp(what, "allreduce")) {
        MPI_Allreduce(MPI_IN_PLACE, data, big ? 16384 : 4096, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    } else if (!strcmp(what, "bcast-ahead")) {
        int posts = argc > 2 ? atoi(argv[2]) : 60;
        for (int i = 0; i < (big ? posts : 1); i++)
            MPI_Bcast(data, big ? 768 : 4096, MPI_INT, 0, MPI_COMM_WORLD);
        MPI_Finalize();
        return 0;
    } else if (!strcmp(what, "alltoall")) {
        int block = big ? 2048 : 512;
        MPI_Alltoall(data, block, MPI_INT, result, block, MPI_INT, MPI_COMM_WORLD);
    }
    /* Whoever got through goes on to a call that needs everyone. */
    MPI_Barrier(MPI_COMM_WORLD);
    printf("rank %d: %s completed\n", rank, what);
    MPI_Finalize();
    return 0;
}
