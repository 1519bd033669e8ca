/* Volume: in one superstep every process puts 2000 blocks of 4 KiB and sends 2000 messages
 * of 100 bytes to every other process, so early sends and flow control are exercised. */
#include <bsp.h>
#include <stdio.h>
#include <stdlib.h>
int main(void) {
    /* x is overwritten 8 times over per destination: only the counts are checked. */
    bsp_begin(bsp_nprocs());
    int p = bsp_pid(), n = bsp_nprocs();
    char *x = malloc(1 << 20), *src = malloc(4096);
    for (int i = 0; i < 4096; i++) src[i] = (char)(p + i);
    bsp_push_reg(x, 1 << 20);
    bsp_sync();
    double t = bsp_time();
    for (int r = 0; r < 2000; r++)
        for (int k = 1; k < n; k++) { bsp_put((p + k) % n, src, x, (r % 256) * 4096, 4096); bsp_send((p+k)%n, NULL, src, 100); }
    bsp_sync();
    int nm, nb; bsp_qsize(&nm, &nb);
    if (nm != 2000 * (n - 1)) bsp_abort("qsize %d\n", nm);
    if (p == 0) printf("heavy ok %.3f s\n", bsp_time() - t);
    bsp_end();
    return 0;
}
