/* L: median of single empty bsp_sync times (µs), printed by process 0. */
#include <bsp.h>
#include <stdio.h>
#include <stdlib.h>
static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }
int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 2000;
    bsp_begin(bsp_nprocs());
    double *t = calloc(n, sizeof *t);
    for (int i = 0; i < n / 10; i++) bsp_sync();
    for (int i = 0; i < n; i++) { double t0 = bsp_time(); bsp_sync(); t[i] = (bsp_time() - t0) * 1e6; }
    qsort(t, n, sizeof *t, cmp);
    if (bsp_pid() == 0) printf("%d %.3f %.3f %.3f\n", bsp_nprocs(), t[n / 2], t[n / 4], t[3 * n / 4]);
    bsp_end();
    return 0;
}
