/* 1^2 + 2^2 + ... + n^2 as the dot product of (1, 2, ..., n) with itself, in classic BSPlib:
 * main begins with bsp_init, and its sequential part on process 0 asks how many of the
 * processes started (bsp_nprocs() before bsp_begin) shall compute. Process 0 reads n and puts it
 * to every process; at the end every process tells process 0 by BSMP how many elements it
 * held, and process 0 checks the count. */
#include <stdio.h>
#include <stdlib.h>
#include "vec.h"

static int asked; /* processes to compute with, set by process 0's sequential part */

static void compute(void) {
    int p, s, n = 0, i, len, counted = 0, nmsgs, nbytes, tagsize = sizeof(int);
    double *x, sum, start, took;

    bsp_begin(asked);
    p = bsp_nprocs();
    s = bsp_pid();
    bsp_push_reg(&n, sizeof n);
    bsp_set_tagsize(&tagsize);
    bsp_sync();
    if (s == 0) {
        printf("Vector length n?\n");
        fflush(stdout);
        if (scanf("%d", &n) != 1 || n < 0) bsp_abort("sumsq: n must be a whole number >= 0\n");
        for (i = 1; i < p; i++) bsp_put(i, &n, &n, 0, sizeof n);
    }
    bsp_sync();
    bsp_pop_reg(&n);

    len = local_length(n, p, s);
    x = new_vector(len);
    for (i = 0; i < len; i++) x[i] = (double)i * p + s + 1;
    start = bsp_time();
    sum = dot(n, x, x);
    took = bsp_time() - start;

    bsp_send(0, &s, &len, sizeof len);
    bsp_sync();
    if (s == 0) {
        bsp_qsize(&nmsgs, &nbytes);
        for (i = 0; i < nmsgs; i++) {
            int size, from, count;
            bsp_get_tag(&size, &from);
            bsp_move(&count, sizeof count);
            if (size != (int)sizeof count || count != local_length(n, p, from))
                bsp_abort("sumsq: process %d held %d elements\n", from, count);
            counted += count;
        }
        if (nmsgs != p || counted != n)
            bsp_abort("sumsq: %d messages count %d elements\n", nmsgs, counted);
        printf("process 0: %d messages count the %d elements\n", nmsgs, counted);
    }
    printf("process %d: 1^2 + ... + %d^2 = %.0f\n", s, n, sum);
    if (s == 0) printf("process 0: the dot product took %.6f s\n", took);
    fflush(stdout);
    free(x);
    bsp_end();
}

int main(int argc, char **argv) {
    bsp_init(compute, argc, argv);
    printf("%d processes started\n", bsp_nprocs());
    printf("How many shall compute?\n");
    fflush(stdout);
    if (scanf("%d", &asked) != 1 || asked < 1) {
        printf("A number of processes, 1 or more, please.\n");
        return 1;
    }
    if (asked > bsp_nprocs()) {
        printf("Only %d processes were started.\n", bsp_nprocs());
        return 1;
    }
    compute();
    return 0;
}
