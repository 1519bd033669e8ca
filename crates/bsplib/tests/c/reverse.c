/* Reverses a block-distributed array with bsp_put (element i goes to position N-1-i). */
#include <bsp.h>
#include <stdio.h>
#include <stdlib.h>

#define B 1000 /* elements per process */

int main(int argc, char **argv) {
    bsp_begin(bsp_nprocs());
    int p = bsp_pid(), n = bsp_nprocs(), N = B * n;
    int *x = malloc(B * sizeof(int));
    bsp_push_reg(x, B * sizeof(int));
    for (int i = 0; i < B; i++) x[i] = p * B + i;
    bsp_sync();
    for (int i = 0; i < B; i++) {
        int v = p * B + i, j = N - 1 - v; /* global destination */
        bsp_put(j / B, &v, x, (j % B) * sizeof(int), sizeof(int));
    }
    bsp_sync();
    for (int i = 0; i < B; i++)
        if (x[i] != N - 1 - (p * B + i)) bsp_abort("reverse: process %d x[%d]=%d\n", p, i, x[i]);
    bsp_pop_reg(x);
    bsp_sync();
    if (p == 0) printf("reverse ok\n");
    free(x);
    bsp_end();
    return 0;
}
