/* partitioned-pipeline: what partitioned communication overlaps. Rank 0 computes each of
 * PARTS partitions of BYTES bytes (busy-waits US microseconds) and marks it ready with
 * MPI_Pready; rank 1 waits for the whole round. Every round starts after a barrier; rank 1
 * prints the median and the mean time of a round (from the barrier to its MPI_Wait) over
 * ROUNDS rounds after WARMUP, and the computing alone (PARTS x US):
 *
 *   mpicc -O2 partitioned-pipeline.c -o partitioned-pipeline
 *   ferry run -n 2 ./partitioned-pipeline [ROUNDS [PARTS [BYTES [US]]]]   (200 8 262144 100)
 *   FERRY_TRANSPORT=tcp ferry run -n 2 ./partitioned-pipeline ...
 *
 * A runtime that sends each partition when it is ready ends a round about one partition's
 * transfer after the computing; one that sends the round whole, the whole transfer after. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

enum { WARMUP = 20 };

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void compute(double us)
{
    double until = MPI_Wtime() + us * 1e-6;
    while (MPI_Wtime() < until)
        ;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int rounds = argc > 1 ? atoi(argv[1]) : 200;
    int parts = argc > 2 ? atoi(argv[2]) : 8;
    long bytes = argc > 3 ? atol(argv[3]) : 262144;
    double us = argc > 4 ? atof(argv[4]) : 100;
    char *buf = calloc((size_t)parts, (size_t)bytes);
    double *times = calloc((size_t)rounds, sizeof(double));
    MPI_Request req = MPI_REQUEST_NULL;
    if (rank == 0)
        MPI_Psend_init(buf, parts, bytes, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_INFO_NULL, &req);
    else if (rank == 1)
        MPI_Precv_init(buf, parts, bytes, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_INFO_NULL, &req);
    for (int round = -WARMUP; round < rounds; round++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        if (rank == 0) {
            MPI_Start(&req);
            for (int p = 0; p < parts; p++) {
                compute(us);
                buf[(long)p * bytes] = (char)round;
                MPI_Pready(p, req);
            }
            MPI_Wait(&req, MPI_STATUS_IGNORE);
        } else if (rank == 1) {
            MPI_Start(&req);
            MPI_Wait(&req, MPI_STATUS_IGNORE);
            if (round >= 0)
                times[round] = MPI_Wtime() - t0;
        }
    }
    if (rank == 1) {
        double sum = 0;
        for (int i = 0; i < rounds; i++)
            sum += times[i];
        qsort(times, (size_t)rounds, sizeof(double), by_value);
        printf("parts %d x %ld B, %.0f us each: round median %.1f us, mean %.1f us "
               "(computing alone %.1f us)\n",
               parts, bytes, us, times[rounds / 2] * 1e6, sum / rounds * 1e6, parts * us);
    }
    if (req != MPI_REQUEST_NULL)
        MPI_Request_free(&req);
    free(buf);
    free(times);
    MPI_Finalize();
    return 0;
}
