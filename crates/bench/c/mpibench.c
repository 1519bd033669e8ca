/* mpibench: one benchmark source for every MPI implementation that `ferry bench compare` runs
 * side by side (ferry, MPICH, Open MPI). Only MPI-1 calls (plus MPI-3's permission to send from
 * one buffer several times at once): Init, Comm_rank/size, Send/Recv, Isend/Irecv/Waitall,
 * Barrier, Bcast, Allreduce, Alltoall, Wtime, Finalize.
 *
 *   mpiexec -n N ./mpibench [-m modes] [-x max] [-s sizes] [-a sizes] [-b budget] [-t trial]
 *                           [-r reps] [-q]
 *
 *   -m  comma-separated modes: pingpong, bw, msgrate, barrier, bcast, allreduce, alltoall, or
 *       the groups p2p (pingpong,bw,msgrate), coll (the four collectives), all (default)
 *   -x  largest ping-pong/bw message in bytes (default 16M; the sweep is 1 B and each power of 2)
 *   -s  comma-separated collective sizes in bytes (default 8,65536,1048576)
 *   -a  comma-separated alltoall sizes in bytes (default: those of -s)
 *   -b  time budget per point in seconds (default 1.0): caps the repetitions so that an
 *       implementation which takes milliseconds per operation (busy-polling on oversubscribed
 *       cores) still ends in bounded time
 *   -t  target time of one trial in seconds (default 0.01)
 *   -r  trials per point (default 7); the median and the minimum are reported
 *   -q  quick smoke run: sizes 8 B and 64 KiB only, budget 0.02 s, 3 trials of 2 ms
 *
 * Output (stdout of rank 0): comment lines starting with '#', then CSV with the header
 *   op,ranks,bytes,usec,mbps,usec_min,busbw,reps
 * usec is the median over trials of the time per operation (ping-pong: half a round trip; bw:
 * one message of the window; msgrate: one 8 B message of a window of 64 nonblocking sends
 * answered by one reply, as osu_mbw_mr with one pair, so that its rate is 1/usec million
 * messages per second; collectives: the slowest rank's time per operation), usec_min the
 * fastest trial, mbps = bytes/usec (10^6 B/s; alltoall counts its whole send buffer,
 * bytes*ranks, as nccl-tests does), busbw the bus bandwidth of nccl-tests (allreduce
 * 2(n-1)/n, alltoall (n-1)/n, bcast 1, p2p 1), reps the timed calls per trial (a ping-pong call
 * is one round trip, a bw call one window of up to 64 messages).
 *
 * Every point moves data once with a known pattern and checks every received byte before it is
 * timed; a wrong byte makes every rank exit with status 1.
 *
 * Point-to-point modes run between ranks 0 and 1; other ranks only join the bookkeeping
 * collectives. Timing: one warm-up operation estimates the cost (the slowest rank's, so that all
 * ranks agree), a few more warm up, then trials of `reps` operations each, with reps chosen so
 * that a trial takes about -t seconds and all trials fit the budget.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_TRIALS 64
#define WINDOW 64
/* Receive buffers of one bw window, at most: larger messages get a smaller window. */
#define WINDOW_BYTES (64u << 20)
#define TAG_DATA 1
#define TAG_ACK 2

enum {
    PINGPONG = 1,
    BW = 2,
    BARRIER = 4,
    BCAST = 8,
    ALLREDUCE = 16,
    ALLTOALL = 32,
    MSGRATE = 64,
    REDUCE = 128,
    ALLGATHER = 256,
    ALL_MODES = 511
};
#define COLL_MODES (BARRIER | BCAST | ALLREDUCE | ALLTOALL | REDUCE | ALLGATHER)
/* The message rate's message size. */
#define MSGRATE_BYTES 8

static int rank, nranks;
static double budget = 1.0, trial_seconds = 0.01;
static int trials = 7;

static void die(const char *msg) {
    if (rank == 0) fprintf(stderr, "mpibench: %s\n", msg);
    MPI_Finalize();
    exit(2);
}

static unsigned char pattern(size_t i, int a, int b, size_t bytes) {
    return (unsigned char)((i * 131u + (size_t)a * 17u + (size_t)b * 7u + bytes) & 0xff);
}

/* All ranks learn whether any rank saw a wrong byte; if so, all exit with status 1. */
static void agree_ok(int bad, const char *op, size_t bytes) {
    int any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (any) {
        if (rank == 0) fprintf(stderr, "mpibench: %s %zu B: data check failed\n", op, bytes);
        MPI_Finalize();
        exit(1);
    }
}

static int check(const unsigned char *buf, size_t bytes, int a, int b, const char *op) {
    for (size_t i = 0; i < bytes; i++) {
        if (buf[i] != pattern(i, a, b, bytes)) {
            fprintf(stderr, "mpibench: rank %d: %s %zu B: byte %zu is %u, expected %u\n", rank, op,
                    bytes, i, buf[i], pattern(i, a, b, bytes));
            return 1;
        }
    }
    return 0;
}

static void fill(unsigned char *buf, size_t bytes, int a, int b) {
    for (size_t i = 0; i < bytes; i++) buf[i] = pattern(i, a, b, bytes);
}

static double max_all(double mine) {
    double out = 0;
    MPI_Allreduce(&mine, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return out;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef void (*op_fn)(size_t bytes, void *ctx);

/* Times `op` on every rank (ranks outside `active` skip it but keep step) and prints one row.
 * `per_op` operations happen in one call of `op`; `data_factor` scales bytes for mbps. */
static void measure(const char *name, size_t bytes, int active, double per_op, double data_factor,
                    double bus_factor, op_fn op, void *ctx) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    if (active) op(bytes, ctx);
    double est = max_all(MPI_Wtime() - t0);
    if (est < 1e-7) est = 1e-7;
    /* Warm-up: up to 10 more calls, within a tenth of the budget. */
    long warm = (long)(budget * 0.1 / est);
    if (warm > 10) warm = 10;
    if (warm > 0) {
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = MPI_Wtime();
        for (long i = 0; active && i < warm; i++) op(bytes, ctx);
        est = max_all((MPI_Wtime() - t0) / (double)warm);
        if (est < 1e-7) est = 1e-7;
    }
    int n = trials;
    long reps = (long)(trial_seconds / est);
    if (reps < 1) reps = 1;
    if (reps > 1000000) reps = 1000000;
    /* Fit all trials into what is left of the budget: fewer repetitions, then fewer trials. */
    double left = budget * 0.9;
    if ((double)n * (double)reps * est > left) reps = (long)(left / ((double)n * est));
    if (reps < 1) {
        reps = 1;
        n = (int)(left / est);
        if (n < 3) n = 3;
        if (n > trials) n = trials;
    }
    double per[MAX_TRIALS];
    for (int t = 0; t < n; t++) {
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = MPI_Wtime();
        for (long i = 0; active && i < reps; i++) op(bytes, ctx);
        double mine = active ? (MPI_Wtime() - t0) / ((double)reps * per_op) : 0.0;
        per[t] = max_all(mine) * 1e6;
    }
    qsort(per, (size_t)n, sizeof per[0], cmp_double);
    double usec = per[n / 2];
    if (rank == 0) {
        double mbps = usec > 0 ? (double)bytes * data_factor / usec : 0.0;
        printf("%s,%d,%zu,%.4f,%.3f,%.4f,%.3f,%ld\n", name, nranks, bytes, usec, mbps, per[0],
               mbps * bus_factor, reps);
        fflush(stdout);
    }
}

/* ---- point to point ---- */

struct p2p {
    unsigned char *send, *arena;
    int window;
};

static void pingpong_op(size_t bytes, void *ctx) {
    struct p2p *c = ctx;
    if (rank == 0) {
        MPI_Send(c->send, (int)bytes, MPI_BYTE, 1, TAG_DATA, MPI_COMM_WORLD);
        MPI_Recv(c->arena, (int)bytes, MPI_BYTE, 1, TAG_DATA, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
        MPI_Recv(c->arena, (int)bytes, MPI_BYTE, 0, TAG_DATA, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(c->send, (int)bytes, MPI_BYTE, 0, TAG_DATA, MPI_COMM_WORLD);
    }
}

static void bw_op(size_t bytes, void *ctx) {
    struct p2p *c = ctx;
    MPI_Request req[WINDOW];
    char ack = 0;
    if (rank == 0) {
        /* One send buffer for the whole window, as osu_bw does (allowed since MPI-3). */
        for (int w = 0; w < c->window; w++)
            MPI_Isend(c->send, (int)bytes, MPI_BYTE, 1, TAG_DATA, MPI_COMM_WORLD, &req[w]);
        MPI_Waitall(c->window, req, MPI_STATUSES_IGNORE);
        MPI_Recv(&ack, 1, MPI_BYTE, 1, TAG_ACK, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
        /* Distinct receive buffers, side by side in one arena. */
        for (int w = 0; w < c->window; w++)
            MPI_Irecv(c->arena + (size_t)w * bytes, (int)bytes, MPI_BYTE, 0, TAG_DATA,
                      MPI_COMM_WORLD, &req[w]);
        MPI_Waitall(c->window, req, MPI_STATUSES_IGNORE);
        MPI_Send(&ack, 1, MPI_BYTE, 0, TAG_ACK, MPI_COMM_WORLD);
    }
}

static int window_for(size_t bytes) {
    size_t w = bytes ? WINDOW_BYTES / bytes : WINDOW;
    if (w > WINDOW) w = WINDOW;
    return w < 1 ? 1 : (int)w;
}

static void run_p2p(int modes, const size_t *sizes, int nsizes) {
    if (nranks < 2) die("point-to-point modes need at least 2 ranks");
    int active = rank < 2;
    int peer = 1 - rank;
    size_t max = MSGRATE_BYTES, arena = MSGRATE_BYTES * WINDOW;
    for (int i = 0; i < nsizes; i++) {
        size_t need = sizes[i] * (size_t)window_for(sizes[i]);
        if (sizes[i] > max) max = sizes[i];
        if (need > arena) arena = need;
    }
    struct p2p c;
    c.send = malloc(max);
    c.arena = malloc(arena);
    if (!c.send || !c.arena) die("out of memory");
    for (int pass = 0; pass < 3; pass++) {
        int mode = pass == 0 ? PINGPONG : pass == 1 ? BW : MSGRATE;
        if (!(modes & mode)) continue;
        const char *name = mode == PINGPONG ? "pingpong" : mode == BW ? "bw" : "msgrate";
        /* The message rate is one point: full windows of 8 B messages. */
        const size_t rate_size = MSGRATE_BYTES;
        const size_t *these = mode == MSGRATE ? &rate_size : sizes;
        int count = mode == MSGRATE ? 1 : nsizes;
        for (int i = 0; i < count; i++) {
            size_t bytes = these[i];
            c.window = mode == PINGPONG ? 1 : mode == MSGRATE ? WINDOW : window_for(bytes);
            int bad = 0;
            if (active) {
                /* Check once: the data of this point arrives intact, then time it. */
                fill(c.send, bytes, rank, peer);
                memset(c.arena, 0, bytes * (size_t)c.window);
                if (mode == PINGPONG) {
                    pingpong_op(bytes, &c);
                    bad = check(c.arena, bytes, peer, rank, name);
                } else {
                    bw_op(bytes, &c);
                    for (int w = 0; rank == 1 && w < c.window && !bad; w++)
                        bad = check(c.arena + (size_t)w * bytes, bytes, peer, rank, name);
                }
            }
            agree_ok(bad, name, bytes);
            measure(name, bytes, active, mode == PINGPONG ? 2.0 : (double)c.window, 1.0, 1.0,
                    mode == PINGPONG ? pingpong_op : bw_op, &c);
        }
    }
    free(c.send);
    free(c.arena);
}

/* ---- collectives ---- */

struct coll {
    unsigned char *a, *b;
    double *x, *y;
};

static void barrier_op(size_t bytes, void *ctx) {
    (void)bytes;
    (void)ctx;
    MPI_Barrier(MPI_COMM_WORLD);
}

static void bcast_op(size_t bytes, void *ctx) {
    struct coll *c = ctx;
    MPI_Bcast(c->a, (int)bytes, MPI_BYTE, 0, MPI_COMM_WORLD);
}

static void allreduce_op(size_t bytes, void *ctx) {
    struct coll *c = ctx;
    int n = (int)(bytes / sizeof(double));
    MPI_Allreduce(c->x, c->y, n > 0 ? n : 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
}

static void reduce_op(size_t bytes, void *ctx) {
    struct coll *c = ctx;
    int n = (int)(bytes / sizeof(double));
    MPI_Reduce(c->x, c->y, n > 0 ? n : 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
}

static void allgather_op(size_t bytes, void *ctx) {
    struct coll *c = ctx;
    MPI_Allgather(c->a, (int)bytes, MPI_BYTE, c->b, (int)bytes, MPI_BYTE, MPI_COMM_WORLD);
}

static void alltoall_op(size_t bytes, void *ctx) {
    struct coll *c = ctx;
    MPI_Alltoall(c->a, (int)bytes, MPI_BYTE, c->b, (int)bytes, MPI_BYTE, MPI_COMM_WORLD);
}

static void run_coll(int modes, const size_t *sizes, int nsizes, const size_t *a2a_sizes,
                     int na2a) {
    size_t max = 8;
    for (int i = 0; i < nsizes; i++)
        if (sizes[i] > max) max = sizes[i];
    for (int i = 0; i < na2a; i++)
        if (a2a_sizes[i] > max) max = a2a_sizes[i];
    struct coll c;
    c.a = malloc(max * (size_t)nranks);
    c.b = malloc(max * (size_t)nranks);
    c.x = malloc(max);
    c.y = malloc(max);
    if (!c.a || !c.b || !c.x || !c.y) die("out of memory");
    double n = nranks;
    if (modes & BARRIER) {
        agree_ok(0, "barrier", 0);
        measure("barrier", 0, 1, 1.0, 0.0, 0.0, barrier_op, &c);
    }
    for (int i = 0; i < nsizes; i++) {
        size_t bytes = sizes[i];
        int bad = 0;
        if (modes & BCAST) {
            if (rank == 0)
                fill(c.a, bytes, 0, 0);
            else
                memset(c.a, 0, bytes);
            bcast_op(bytes, &c);
            bad = check(c.a, bytes, 0, 0, "bcast");
            agree_ok(bad, "bcast", bytes);
            measure("bcast", bytes, 1, 1.0, 1.0, 1.0, bcast_op, &c);
        }
        if (modes & ALLREDUCE) {
            size_t words = bytes / sizeof(double) ? bytes / sizeof(double) : 1;
            for (size_t k = 0; k < words; k++) c.x[k] = (double)((rank + 1) * (int)(k % 97 + 1));
            allreduce_op(bytes, &c);
            double want_scale = n * (n + 1) / 2;
            for (size_t k = 0; k < words && !bad; k++) {
                if (c.y[k] != want_scale * (double)(k % 97 + 1)) {
                    fprintf(stderr, "mpibench: rank %d: allreduce %zu B: element %zu is %g, expected %g\n",
                            rank, bytes, k, c.y[k], want_scale * (double)(k % 97 + 1));
                    bad = 1;
                }
            }
            agree_ok(bad, "allreduce", bytes);
            measure("allreduce", bytes, 1, 1.0, 1.0, 2.0 * (n - 1) / n, allreduce_op, &c);
        }
        if (modes & REDUCE) {
            size_t words = bytes / sizeof(double) ? bytes / sizeof(double) : 1;
            for (size_t k = 0; k < words; k++) c.x[k] = (double)((rank + 1) * (int)(k % 89 + 1));
            reduce_op(bytes, &c);
            double want_scale = n * (n + 1) / 2;
            for (size_t k = 0; k < words && !bad && rank == 0; k++) {
                if (c.y[k] != want_scale * (double)(k % 89 + 1)) {
                    fprintf(stderr, "mpibench: rank %d: reduce %zu B: element %zu is %g, expected %g\n",
                            rank, bytes, k, c.y[k], want_scale * (double)(k % 89 + 1));
                    bad = 1;
                }
            }
            agree_ok(bad, "reduce", bytes);
            measure("reduce", bytes, 1, 1.0, 1.0, 1.0, reduce_op, &c);
        }
        if (modes & ALLGATHER) {
            fill(c.a, bytes, rank, 0);
            memset(c.b, 0, bytes * (size_t)nranks);
            allgather_op(bytes, &c);
            for (int s = 0; s < nranks && !bad; s++)
                bad = check(c.b + (size_t)s * bytes, bytes, s, 0, "allgather");
            agree_ok(bad, "allgather", bytes);
            measure("allgather", bytes, 1, 1.0, n, (n - 1) / n, allgather_op, &c);
        }
    }
    /* All-to-all has sizes of its own: at 8 ranks a megabyte to each costs seconds per point. */
    for (int i = 0; i < na2a; i++) {
        size_t bytes = a2a_sizes[i];
        int bad = 0;
        if (modes & ALLTOALL) {
            for (int d = 0; d < nranks; d++) fill(c.a + (size_t)d * bytes, bytes, rank, d);
            memset(c.b, 0, bytes * (size_t)nranks);
            alltoall_op(bytes, &c);
            for (int s = 0; s < nranks && !bad; s++)
                bad = check(c.b + (size_t)s * bytes, bytes, s, rank, "alltoall");
            agree_ok(bad, "alltoall", bytes);
            measure("alltoall", bytes, 1, 1.0, n, (n - 1) / n, alltoall_op, &c);
        }
    }
    free(c.a);
    free(c.b);
    free(c.x);
    free(c.y);
}

static int parse_modes(const char *text) {
    int modes = 0;
    char *copy = strdup(text), *save = NULL;
    for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (!strcmp(t, "pingpong")) modes |= PINGPONG;
        else if (!strcmp(t, "bw")) modes |= BW;
        else if (!strcmp(t, "barrier")) modes |= BARRIER;
        else if (!strcmp(t, "bcast")) modes |= BCAST;
        else if (!strcmp(t, "allreduce")) modes |= ALLREDUCE;
        else if (!strcmp(t, "alltoall")) modes |= ALLTOALL;
        else if (!strcmp(t, "reduce")) modes |= REDUCE;
        else if (!strcmp(t, "allgather")) modes |= ALLGATHER;
        else if (!strcmp(t, "msgrate")) modes |= MSGRATE;
        else if (!strcmp(t, "p2p")) modes |= PINGPONG | BW | MSGRATE;
        else if (!strcmp(t, "coll")) modes |= COLL_MODES;
        else if (!strcmp(t, "all")) modes |= ALL_MODES;
        else {
            free(copy);
            return -1;
        }
    }
    free(copy);
    return modes;
}

static int parse_sizes(const char *text, size_t *out, int cap) {
    int n = 0;
    char *copy = strdup(text), *save = NULL;
    for (char *t = strtok_r(copy, ",", &save); t && n < cap; t = strtok_r(NULL, ",", &save)) {
        char *end;
        unsigned long long v = strtoull(t, &end, 10);
        if (*end == 'K' || *end == 'k') v <<= 10, end++;
        else if (*end == 'M' || *end == 'm') v <<= 20, end++;
        if (*end || v > (1ull << 30)) {
            free(copy);
            return -1;
        }
        out[n++] = (size_t)v;
    }
    free(copy);
    return n;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    int modes = ALL_MODES, nsizes = 3, na2a = -1, np2p = 0, opt;
    size_t max = 16u << 20, sizes[32] = {8, 65536, 1048576}, a2a[32], p2p[64];
    while ((opt = getopt(argc, argv, "m:x:s:a:b:t:r:q")) != -1) {
        switch (opt) {
        case 'm':
            if ((modes = parse_modes(optarg)) <= 0) die("bad -m (modes)");
            break;
        case 'x':
            if (parse_sizes(optarg, &max, 1) != 1) die("bad -x (largest p2p message)");
            break;
        case 's':
            if ((nsizes = parse_sizes(optarg, sizes, 32)) <= 0) die("bad -s (collective sizes)");
            break;
        case 'a':
            if ((na2a = parse_sizes(optarg, a2a, 32)) <= 0) die("bad -a (alltoall sizes)");
            break;
        case 'b':
            budget = atof(optarg);
            break;
        case 't':
            trial_seconds = atof(optarg);
            break;
        case 'r':
            trials = atoi(optarg);
            break;
        case 'q':
            p2p[0] = 8;
            p2p[1] = 65536;
            np2p = 2;
            nsizes = 2;
            budget = 0.02;
            trials = 3;
            trial_seconds = 0.002;
            break;
        default:
            die("usage: mpibench [-m modes] [-x max] [-s sizes] [-a sizes] [-b budget] [-t trial] "
                "[-r trials] [-q]");
        }
    }
    if (budget <= 0 || trial_seconds <= 0 || trials < 1 || trials > MAX_TRIALS) die("bad -b, -t or -r");
    if (rank == 0) {
        printf("# mpibench ranks=%d budget=%g trial=%g trials=%d\n", nranks, budget, trial_seconds,
               trials);
        printf("op,ranks,bytes,usec,mbps,usec_min,busbw,reps\n");
        fflush(stdout);
    }
    if (np2p == 0) { /* 1 B and every power of two up to -x */
        for (size_t b = 1; b <= max && np2p < 64; b *= 2) p2p[np2p++] = b;
    }
    if (na2a < 0) { /* alltoall at the sizes of the other collectives */
        na2a = nsizes;
        memcpy(a2a, sizes, sizeof sizes[0] * (size_t)nsizes);
    }
    if (modes & (PINGPONG | BW | MSGRATE)) run_p2p(modes, p2p, np2p);
    if (modes & COLL_MODES)
        run_coll(modes, sizes, nsizes, a2a, na2a);
    MPI_Finalize();
    return 0;
}
