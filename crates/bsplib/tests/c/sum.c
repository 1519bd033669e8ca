/* Prefix sums by the logarithmic method with bsp_get, then a total with bsp_send. */
#include <bsp.h>
#include <stdio.h>

int main(int argc, char **argv) {
    bsp_begin(bsp_nprocs());
    int p = bsp_pid(), n = bsp_nprocs();
    int x = p + 1, left;
    bsp_push_reg(&x, sizeof x);
    bsp_sync();
    for (int k = 1; k < n; k *= 2) {
        if (p >= k) bsp_get(p - k, &x, 0, &left, sizeof left);
        bsp_sync();
        if (p >= k) x += left;
        bsp_sync();
    }
    if (x != (p + 1) * (p + 2) / 2) bsp_abort("sum: process %d prefix %d\n", p, x);
    bsp_send(0, NULL, &x, sizeof x);
    bsp_sync();
    if (p == 0) {
        int nmsg, bytes, total = 0, v;
        bsp_qsize(&nmsg, &bytes);
        if (nmsg != n || bytes != n * (int)sizeof(int)) bsp_abort("sum: qsize %d %d\n", nmsg, bytes);
        for (int i = 0; i < nmsg; i++) {
            bsp_move(&v, sizeof v);
            total += v;
        }
        int want = 0;
        for (int q = 0; q < n; q++) want += (q + 1) * (q + 2) / 2;
        if (total != want) bsp_abort("sum: total %d, want %d\n", total, want);
        printf("sum ok %d\n", total);
    }
    bsp_pop_reg(&x);
    bsp_sync();
    bsp_end();
    return 0;
}
