/* The distributed dot product: every process adds up its own products and puts the partial
 * sum into its slot of process 0's table; process 0 adds the table up, and every process fetches
 * the total from process 0 with bsp_get. Three supersteps, each one word per process. */
#include <stdlib.h>
#include "vec.h"

int local_length(int n, int p, int s) {
    return n / p + (s < n % p ? 1 : 0);
}

double *new_vector(int len) {
    double *v = malloc((len > 0 ? len : 1) * sizeof *v);
    if (v == NULL) bsp_abort("new_vector: out of memory for %d elements\n", len);
    return v;
}

double dot(int n, const double *x, const double *y) {
    int p = bsp_nprocs(), s = bsp_pid(), i;
    double mine = 0.0, total = 0.0, *table = new_vector(p);

    bsp_push_reg(table, p * (int)sizeof *table);
    bsp_push_reg(&total, sizeof total);
    bsp_sync();
    for (i = 0; i < local_length(n, p, s); i++) mine += x[i] * y[i];
    bsp_put(0, &mine, table, s * (int)sizeof mine, sizeof mine);
    bsp_sync();
    if (s == 0)
        for (i = 0; i < p; i++) total += table[i];
    bsp_sync();
    if (s != 0) bsp_get(0, &total, 0, &total, sizeof total);
    bsp_sync();
    bsp_pop_reg(&total);
    bsp_pop_reg(table);
    bsp_sync();
    free(table);
    return total;
}
