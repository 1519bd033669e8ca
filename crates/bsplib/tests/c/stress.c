/* Put/get stress: random sizes and offsets from a shared seed, so every process can model
 * every area; checked by checksum. The standard leaves open in which order puts to the same
 * bytes land, so no two puts of a superstep overlap: each source writes its own stripe of a
 * destination's area, at increasing random offsets. Gets read anywhere. */
#include <bsp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LEN 8192
#define OPS 60

static unsigned long long mix(unsigned long long x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static unsigned long long checksum(const unsigned char *b, int n) {
    unsigned long long h = 1469598103934665603ULL;
    for (int i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ULL;
    return h;
}

int main(int argc, char **argv) {
    int steps = argc > 1 ? atoi(argv[1]) : 5;
    bsp_begin(bsp_nprocs());
    int p = bsp_pid(), n = bsp_nprocs();
    if (n > 64) bsp_abort("stress: at most 64 processes\n");
    unsigned char *x = malloc(LEN), *got = malloc(LEN * 8), *data = malloc(LEN);
    unsigned char *model = malloc((size_t)n * LEN), *before = malloc((size_t)n * LEN);
    bsp_push_reg(x, LEN);
    bsp_sync();
    for (int step = 0; step < steps; step++) {
        for (int q = 0; q < n; q++)
            for (int i = 0; i < LEN; i++) model[q * LEN + i] = (unsigned char)mix(step * 1000003ULL + q * LEN + i);
        memcpy(x, model + p * LEN, LEN);
        memcpy(before, model, (size_t)n * LEN);
        bsp_sync();
        int at = 0, ngets = 0, stripe = LEN / n;
        int goff[OPS], glen[OPS], gsrc[OPS], gat[OPS];
        for (int src = 0; src < n; src++) {
            unsigned long long r = mix(((unsigned long long)step << 40) ^ src);
            int used[64] = {0}; /* per destination: bytes of src's stripe passed over */
            for (int k = 0; k < OPS; k++) {
                r = mix(r);
                int dst = (int)(r % n);
                int len = 1 + (int)((r >> 8) % (k % 10 == 0 ? 4000 : 100));
                int off = (int)((r >> 24) % (LEN - len));
                if (k % 3 != 0) { /* a put: the next piece of src's stripe, after a gap */
                    int gap = (int)((r >> 48) % 16), room = stripe - used[dst] - gap;
                    if (room <= 0) continue;
                    if (len > room) len = room;
                    off = src * stripe + used[dst] + gap;
                    used[dst] += gap + len;
                }
                for (int i = 0; i < len; i++) data[i] = (unsigned char)mix(r ^ i);
                if (k % 3 == 0) {
                    if (src == p) {
                        bsp_get(dst, x, off, got + at, len);
                        gsrc[ngets] = dst; goff[ngets] = off; glen[ngets] = len; gat[ngets] = at;
                        ngets++;
                        at += len;
                    }
                } else {
                    if (src == p) {
                        bsp_put(dst, data, x, off, len);
                    }
                    memcpy(model + dst * LEN + off, data, len);
                }
                /* put copies its source at call time: scribble over it */
                memset(data, 0xEE, len);
            }
        }
        bsp_sync();
        if (checksum(x, LEN) != checksum(model + p * LEN, LEN))
            bsp_abort("stress: process %d step %d: put checksum mismatch\n", p, step);
        for (int g = 0; g < ngets; g++)
            if (memcmp(got + gat[g], before + gsrc[g] * LEN + goff[g], glen[g]) != 0)
                bsp_abort("stress: process %d step %d: get %d mismatch\n", p, step, g);
    }
    bsp_pop_reg(x);
    bsp_sync();
    if (p == 0) printf("stress ok\n");
    bsp_end();
    return 0;
}
