/* The MPI side of the BSP probe, for a same-run comparison with examples/bsp_probe.rs:
 * L = MPI_Barrier time, g = slope of the least-squares fit of MPI_Alltoall time against h,
 * where every process sends h 8-byte words in total, h/(p-1) to each other process. Every
 * operation is timed on its own and the median taken (as ferry bench bsp does for supersteps):
 * robust against the process losing its core now and then on a shared machine.
 *   mpicc.mpich -O2 mpi_probe.c -o mpi_probe && mpiexec.mpich -n 4 ./mpi_probe 100
 * Prints p,L_us,g_us_per_word,fit_L_us from rank 0. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, n, sizeof *v, cmp);
    return v[n / 2];
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int reps = argc > 1 ? atoi(argv[1]) : 200, me, p;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &p);
    int hs[] = {0, 64, 256, 1024, 2048, 4096}, nh = 6;
    double *sbuf = calloc(4096 + p, sizeof(double)), *rbuf = calloc(4096 * 2 + p, sizeof(double));
    double xs[6], ys[6], L, *each = calloc(reps > 0 ? reps : 1, sizeof(double));
    for (int i = 0; i < reps / 10; i++) MPI_Barrier(MPI_COMM_WORLD);
    for (int i = 0; i < reps; i++) {
        double t0 = MPI_Wtime();
        MPI_Barrier(MPI_COMM_WORLD);
        each[i] = (MPI_Wtime() - t0) * 1e6;
    }
    L = median(each, reps);
    for (int k = 0; k < nh; k++) {
        int per = p > 1 ? hs[k] / (p - 1) : 0;
        for (int i = 0; i < reps / 10; i++)
            MPI_Alltoall(sbuf, per, MPI_DOUBLE, rbuf, per, MPI_DOUBLE, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
        for (int i = 0; i < reps; i++) {
            double t0 = MPI_Wtime();
            MPI_Alltoall(sbuf, per, MPI_DOUBLE, rbuf, per, MPI_DOUBLE, MPI_COMM_WORLD);
            each[i] = (MPI_Wtime() - t0) * 1e6;
        }
        xs[k] = hs[k];
        ys[k] = median(each, reps);
    }
    if (me == 0) {
        double sx = 0, sy = 0, sxx = 0, sxy = 0;
        for (int k = 0; k < nh; k++) sx += xs[k], sy += ys[k], sxx += xs[k] * xs[k], sxy += xs[k] * ys[k];
        double g = (nh * sxy - sx * sy) / (nh * sxx - sx * sx), l = (sy - g * sx) / nh;
        printf("%d,%.2f,%.4f,%.2f\n", p, L, g, l);
    }
    MPI_Finalize();
    return 0;
}
