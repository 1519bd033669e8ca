/* SPMD with bsp_init and bsp_begin(2) in a job of more processes: only 2 take part, the rest
 * end cleanly; only process 0 continues after bsp_end. */
#include <bsp.h>
#include <stdio.h>

static void spmd(void) {
    bsp_begin(2);
    int x = -1, p = bsp_pid();
    if (bsp_nprocs() != 2) bsp_abort("fewer: nprocs %d\n", bsp_nprocs());
    bsp_push_reg(&x, sizeof x);
    bsp_sync();
    bsp_put(1 - p, &p, &x, 0, sizeof p);
    bsp_sync();
    if (x != 1 - p) bsp_abort("fewer: process %d x=%d\n", p, x);
    bsp_end();
}

int main(int argc, char **argv) {
    bsp_init(spmd, argc, argv);
    spmd();
    printf("fewer ok\n");
    return 0;
}
