/* 8 B ping-pong between ranks 0 and 1: pp ROUNDS OPEN PAUSE_US.
 * OPEN=1: every rank opens a port first (a TCP listener, as for MPI_Comm_accept), so it has TCP
 * as well as shared memory. PAUSE_US > 0: each rank sleeps that long before it sends, so that
 * the other waits long enough to sleep; rank 1 sends back how long its pause took, and rank 0
 * reports round trips less that pause (about two wake-ups). Times in microseconds. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rounds = argc > 1 ? atoi(argv[1]) : 1000;
    int open = argc > 2 ? atoi(argv[2]) : 0;
    int pause = argc > 3 ? atoi(argv[3]) : 0;
    int me;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    char port[MPI_MAX_PORT_NAME];
    if (open) MPI_Open_port(MPI_INFO_NULL, port);
    double buf = 0;
    double *t = malloc(sizeof(double) * rounds);
    MPI_Barrier(MPI_COMM_WORLD);
    for (int i = 0; i < rounds; i++) {
        if (me == 0) {
            if (pause) usleep(pause);
            double s = MPI_Wtime();
            MPI_Send(&buf, 8, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
            MPI_Recv(&buf, 8, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            t[i] = (MPI_Wtime() - s - buf) * 1e6;
        } else if (me == 1) {
            MPI_Recv(&buf, 8, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            double s = MPI_Wtime();
            if (pause) usleep(pause);
            buf = pause ? MPI_Wtime() - s : 0;
            MPI_Send(&buf, 8, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
        }
    }
    if (me == 0) {
        double sum = 0;
        for (int i = 0; i < rounds; i++) sum += t[i];
        qsort(t, rounds, sizeof(double), cmp);
        printf("open=%d pause_us=%d rounds=%d median_us=%.2f mean_us=%.2f p90_us=%.2f max_us=%.2f\n",
               open, pause, rounds, t[rounds / 2], sum / rounds, t[rounds * 9 / 10], t[rounds - 1]);
    }
    if (open) MPI_Close_port(port);
    MPI_Finalize();
    return 0;
}
