/* Volume: in one superstep every process puts 2000 blocks of 4 KiB and sends 2000 messages
 * of 100 bytes to every other process, and gets 1 MiB from its right neighbour, so early sends,
 * long closing messages and long replies are exercised. */
#include <bsp.h>
#include <stdio.h>
#include <stdlib.h>
int main(void) {
    /* The puts overwrite x many times over and are checked by count; the get by content. */
    bsp_begin(bsp_nprocs());
    int p = bsp_pid(), n = bsp_nprocs();
    char *x = malloc(1 << 20), *src = malloc(4096), *got = malloc(1 << 20);
    for (int i = 0; i < (1 << 20); i++) x[i] = (char)(p * 7 + i);
    for (int i = 0; i < 4096; i++) src[i] = (char)(p + i);
    bsp_push_reg(x, 1 << 20);
    bsp_sync();
    double t = bsp_time();
    bsp_get((p + 1) % n, x, 0, got, 1 << 20); /* 1 MiB: a reply too long to go eagerly */
    for (int r = 0; r < 2000; r++)
        for (int k = 1; k < n; k++) {
            bsp_put((p + k) % n, src, x, (r % 256) * 4096, 4096);
            bsp_send((p + k) % n, NULL, src, 100);
        }
    bsp_sync();
    int nm, nb; bsp_qsize(&nm, &nb);
    if (nm != 2000 * (n - 1)) bsp_abort("qsize %d\n", nm);
    for (int i = 0; i < (1 << 20); i++)
        if (got[i] != (char)(((p + 1) % n) * 7 + i)) bsp_abort("heavy: process %d got[%d] wrong\n", p, i);
    if (p == 0) printf("heavy ok %.3f s\n", bsp_time() - t);
    bsp_end();
    return 0;
}
