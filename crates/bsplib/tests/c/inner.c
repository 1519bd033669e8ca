/* Inner product of two distributed vectors (BSPlib 1998 style): each process sums its block,
 * puts its partial sum into every process, and all check the total against the formula. */
#include <bsp.h>
#include <stdio.h>
#include <stdlib.h>

#define N 100000

int main(int argc, char **argv) {
    bsp_begin(bsp_nprocs());
    int p = bsp_pid(), n = bsp_nprocs();
    int lo = (int)((long)N * p / n), hi = (int)((long)N * (p + 1) / n);
    double *partial = calloc(n, sizeof(double));
    bsp_push_reg(partial, n * sizeof(double));
    bsp_sync();
    double s = 0;
    for (int i = lo; i < hi; i++) s += (double)i * 2.0; /* x[i] = i, y[i] = 2 */
    for (int q = 0; q < n; q++) bsp_put(q, &s, partial, p * sizeof(double), sizeof(double));
    bsp_sync();
    double total = 0;
    for (int q = 0; q < n; q++) total += partial[q];
    double want = (double)N * (N - 1);
    if (total != want) bsp_abort("inner: process %d got %.1f, want %.1f\n", p, total, want);
    bsp_pop_reg(partial);
    bsp_sync();
    if (p == 0) printf("inner product %.0f ok\n", total);
    free(partial);
    bsp_end();
    return 0;
}
