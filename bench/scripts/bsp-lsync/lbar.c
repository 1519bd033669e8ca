#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int n = argc > 1 ? atoi(argv[1]) : 2000, me, p;
    MPI_Comm_rank(MPI_COMM_WORLD, &me); MPI_Comm_size(MPI_COMM_WORLD, &p);
    double *t = calloc(n, sizeof *t);
    for (int i = 0; i < n / 10; i++) MPI_Barrier(MPI_COMM_WORLD);
    for (int i = 0; i < n; i++) { double t0 = MPI_Wtime(); MPI_Barrier(MPI_COMM_WORLD); t[i] = (MPI_Wtime() - t0) * 1e6; }
    qsort(t, n, sizeof *t, cmp);
    if (me == 0) printf("%d %.3f %.3f %.3f\n", p, t[n / 2], t[n / 4], t[3 * n / 4]);
    MPI_Finalize();
    return 0;
}
