/* Fault-tolerance timings of an MPI with ULFM (ferry run --fault-tolerant, Open MPI's
 * mpiexec --with-ft ulfm), on one host:
 *   agree    median of MPIX_Comm_agree over REPS calls on the world, nobody failed (µs)
 *   shrink   median of MPIX_Comm_shrink of the world, nobody failed (µs)
 *   detect   the last rank writes CLOCK_MONOTONIC into a file and kills itself while rank 0
 *            waits in MPI_Recv from it: time until that receive returns (µs)
 *   shrink_after  MPIX_Comm_shrink of the world after that failure, acknowledged (µs, rank 0)
 * Prints one line from rank 0: "ranks=N agree_us=… shrink_us=… detect_us=… shrink_after_us=…".
 * Usage: ulfm-bench FILE (a path every rank can write, e.g. under /dev/shm). */
#include <mpi.h>
#include <mpi-ext.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define REPS 200

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, n, sizeof *v, cmp);
    return v[n / 2];
}

int main(int argc, char **argv)
{
    int rank, size;
    static double t[REPS];
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if (argc < 2 || size < 2) {
        if (rank == 0)
            fprintf(stderr, "usage: ulfm-bench FILE (2 or more ranks)\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    for (int i = 0; i < REPS; i++) {
        int flag = 1;
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = now_us();
        MPIX_Comm_agree(MPI_COMM_WORLD, &flag);
        t[i] = now_us() - t0;
    }
    double agree = median(t, REPS);
    for (int i = 0; i < 20; i++) {
        MPI_Comm s;
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = now_us();
        MPIX_Comm_shrink(MPI_COMM_WORLD, &s);
        t[i] = now_us() - t0;
        MPI_Comm_free(&s);
    }
    double shrink = median(t, 20);

    int victim = size - 1, x = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == victim) {
        usleep(20000); /* rank 0 is in its receive by now */
        FILE *f = fopen(argv[1], "w");
        fprintf(f, "%.3f\n", now_us());
        fclose(f);
        raise(SIGKILL);
    }
    double detect = -1;
    if (rank == 0) {
        MPI_Recv(&x, 1, MPI_INT, victim, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        double back = now_us(), died = 0;
        FILE *f = fopen(argv[1], "r");
        if (f && fscanf(f, "%lf", &died) == 1)
            detect = back - died;
        if (f)
            fclose(f);
    }
    int acked;
    MPIX_Comm_ack_failed(MPI_COMM_WORLD, size, &acked);
    MPI_Comm s;
    double t0 = now_us();
    MPIX_Comm_shrink(MPI_COMM_WORLD, &s);
    double shrink_after = now_us() - t0;
    MPI_Barrier(s);
    if (rank == 0)
        printf("ranks=%d agree_us=%.1f shrink_us=%.1f detect_us=%.1f shrink_after_us=%.1f\n", size,
               agree, shrink, detect, shrink_after);
    MPI_Comm_free(&s);
    MPI_Finalize();
    return 0;
}
