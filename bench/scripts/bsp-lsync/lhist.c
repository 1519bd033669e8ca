#include <bsp.h>
#include <stdio.h>
#include <stdlib.h>
#include <sched.h>
int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 2000;
    bsp_begin(bsp_nprocs());
    double *t = calloc(n, sizeof *t); int *c = calloc(n, sizeof *c);
    for (int i = 0; i < n / 10; i++) bsp_sync();
    for (int i = 0; i < n; i++) { double t0 = bsp_time(); bsp_sync(); t[i] = (bsp_time() - t0) * 1e6; c[i] = sched_getcpu(); }
    int h[8] = {0}; int same = 0;
    for (int i = 0; i < n; i++) { double x = t[i]; int b = x < 0.5 ? 0 : x < 1 ? 1 : x < 2 ? 2 : x < 4 ? 3 : x < 8 ? 4 : x < 16 ? 5 : x < 64 ? 6 : 7; h[b]++; }
    printf("pid %d: <0.5:%d <1:%d <2:%d <4:%d <8:%d <16:%d <64:%d more:%d cpu0=%d cpu_last=%d\n", bsp_pid(), h[0],h[1],h[2],h[3],h[4],h[5],h[6],h[7], c[0], c[n-1]);
    bsp_end();
    return 0;
}
