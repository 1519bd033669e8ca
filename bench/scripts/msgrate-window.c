/* msgrate-window: the message-rate pattern of osu_mbw_mr with one pair, for instruction counts
 * under callgrind (a fixed number of windows, no timing calibration):
 *
 *   ferry run -n 2 ./msgrate-window WINDOWS [SIZE [SETTLE]]
 *
 * Rank 0 posts 64 MPI_Isend of SIZE bytes (default 8) and MPI_Waitall, then waits for a 1-byte
 * ack; rank 1 posts 64 MPI_Irecv and MPI_Waitall, then sends the ack. Rank 0 prints the rate.
 * With SETTLE 1, rank 0 also sends a token after its window and rank 1 receives it before its
 * MPI_Waitall: the token's MPI_Recv then reads the whole window, and no MPI_Waitall waits, so
 * that callgrind's counts per call hold no spinning (which depends on timing). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define WINDOW 64

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    long windows = argc > 1 ? atol(argv[1]) : 1000;
    int size = argc > 2 ? atoi(argv[2]) : 8;
    int settle = argc > 3 ? atoi(argv[3]) : 0;
    char *buf = calloc((size_t)WINDOW, (size_t)size + 1);
    MPI_Request req[WINDOW];
    char ack = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (long i = 0; i < windows; i++) {
        if (rank == 0) {
            for (int w = 0; w < WINDOW; w++)
                MPI_Isend(buf, size, MPI_BYTE, 1, 1, MPI_COMM_WORLD, &req[w]);
            MPI_Waitall(WINDOW, req, MPI_STATUSES_IGNORE);
            if (settle) MPI_Send(&ack, 1, MPI_BYTE, 1, 3, MPI_COMM_WORLD);
            MPI_Recv(&ack, 1, MPI_BYTE, 1, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else if (rank == 1) {
            for (int w = 0; w < WINDOW; w++)
                MPI_Irecv(buf + (size_t)w * size, size, MPI_BYTE, 0, 1, MPI_COMM_WORLD, &req[w]);
            if (settle) MPI_Recv(&ack, 1, MPI_BYTE, 0, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Waitall(WINDOW, req, MPI_STATUSES_IGNORE);
            MPI_Send(&ack, 1, MPI_BYTE, 0, 2, MPI_COMM_WORLD);
        }
    }
    double t = MPI_Wtime() - t0;
    if (rank == 0)
        printf("msgrate-window: %ld windows of %d x %d B: %.3f M messages/s\n", windows, WINDOW,
               size, (double)windows * WINDOW / t / 1e6);
    free(buf);
    MPI_Finalize();
    return 0;
}
