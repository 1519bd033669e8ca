/* Collectives whose messages queue behind a flood of eager sends that the peer has not yet
 * received: each rank's contribution must arrive as it was at the call, whatever the
 * collective does to its buffers while the message waits for room. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define FLOOD 2048
#define MSG 2048

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    char *flood = calloc(FLOOD, MSG);
    MPI_Request *reqs = malloc(FLOOD * sizeof *reqs);
    int errors = 0;
    for (int round = 0; round < 4; round++) {
        /* Rank 0 floods rank 1, which receives the flood only after the collectives. */
        if (rank == 0)
            for (int i = 0; i < FLOOD; i++)
                MPI_Isend(flood + (size_t)i * MSG, MSG, MPI_BYTE, 1, 7, MPI_COMM_WORLD, &reqs[i]);
        long in = rank + 1, sum = 0;
        MPI_Allreduce(&in, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
        long expected = (long)size * (size + 1) / 2;
        if (sum != expected) {
            printf("rank %d round %d: allreduce gave %ld, expected %ld\n", rank, round, sum, expected);
            errors++;
        }
        double dv[4] = {rank, rank, rank, rank}, dsum[4] = {0};
        MPI_Reduce(dv, dsum, 4, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
        if (rank == 0 && dsum[3] != (double)size * (size - 1) / 2) {
            printf("round %d: reduce gave %g\n", round, dsum[3]);
            errors++;
        }
        int *all = calloc((size_t)size, sizeof(int));
        int mine = 100 + rank;
        MPI_Allgather(&mine, 1, MPI_INT, all, 1, MPI_INT, MPI_COMM_WORLD);
        for (int r = 0; r < size; r++)
            if (all[r] != 100 + r) {
                printf("rank %d round %d: allgather block %d is %d\n", rank, round, r, all[r]);
                errors++;
            }
        free(all);
        if (rank == 1)
            for (int i = 0; i < FLOOD; i++)
                MPI_Recv(flood + (size_t)i * MSG, MSG, MPI_BYTE, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        if (rank == 0) MPI_Waitall(FLOOD, reqs, MPI_STATUSES_IGNORE);
    }
    int total = 0;
    MPI_Allreduce(&errors, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0 && total == 0) printf(" No Errors\n");
    free(flood);
    free(reqs);
    MPI_Finalize();
    return total != 0;
}
