/* SPMD as the standard allows: main starts with bsp_init, and its sequential part (here it
 * decides how many processes to ask for) runs on process 0 only; the other processes start in
 * spmd, where bsp_begin takes process 0's number. Each process sends its pid to process 0.
 * Uses the standard's typedefs bsp_pid_t, bsp_nprocs_t and bsp_size_t. */
#include <bsp.h>
#include <stdio.h>
#include <stdlib.h>

static int asked; /* set by process 0's sequential part only */

static void spmd(void) {
    bsp_begin(asked);
    bsp_pid_t p = bsp_pid();
    bsp_nprocs_t n = bsp_nprocs();
    bsp_send(0, NULL, &p, sizeof p);
    bsp_sync();
    if (p == 0) {
        bsp_size_t nm, nb;
        int seen = 0, v;
        bsp_qsize(&nm, &nb);
        if (nm != n) bsp_abort("spmd: %d messages for %d processes\n", nm, n);
        for (int i = 0; i < nm; i++) {
            bsp_move(&v, sizeof v);
            seen |= 1 << v;
        }
        if (seen != (1 << n) - 1) bsp_abort("spmd: pids seen %#x\n", seen);
    }
    bsp_end();
}

int main(int argc, char **argv) {
    bsp_init(spmd, argc, argv);
    printf("sequential part\n");
    asked = argc > 1 ? atoi(argv[1]) : bsp_nprocs();
    spmd();
    printf("spmd ok on %d\n", asked);
    return 0;
}
