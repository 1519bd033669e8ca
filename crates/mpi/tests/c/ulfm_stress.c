/* User-Level Failure Mitigation under random failures (a job run with ferry run
 * --fault-tolerant, or Open MPI's mpiexec --with-ft ulfm): N ranks (3 or more) run a loop of
 * mixed operations on a communicator `work` (a duplicate of the world to start with), with
 * MPI_ERRORS_RETURN:
 *   a ring of small blocking sends and receives, a ring of > 64 KiB nonblocking ones
 *   (rendezvous), MPI_Allreduce, MPI_Bcast, MPI_Barrier, MPI_Iallreduce + MPI_Wait, a receive
 *   from MPI_ANY_SOURCE, MPIX_Comm_agree, and MPIX_Comm_shrink of a communicator without
 *   failures (the loop goes on on its result).
 * Victims chosen from a seed die (SIGKILL) at a seeded iteration and point, also in the middle
 * of an operation (between a send and its receive, with an Irecv posted, between
 * MPI_Iallreduce and its wait, inside MPIX_Comm_agree or MPIX_Comm_shrink). A survivor that
 * sees an error revokes `work`; every iteration ends with an agreement on whether every
 * survivor passed it: if not, the survivors acknowledge the failures, shrink `work`, free the
 * old one and go on on the new one from an iteration they agree on with MPIX_Comm_agree (the
 * minimum, as the AND of unary codes). Every operation that returns success is checked for
 * its result; the loop ends when the survivors agree that all of them passed a final
 * allreduce over the last communicator, which must hold
 * exactly the survivors. Rank 0 of that communicator prints " No Errors".
 *
 *   ulfm_stress SEED [MODE [ITERATIONS]]
 * MODE: one (a victim kills itself; the default), two (two victims at the same point),
 * agree / shrink (a survivor kills the victim with kill(2) while the others are in
 * MPIX_Comm_agree / MPIX_Comm_shrink; pids are exchanged at the start).
 * ITERATIONS: of the loop, 1 to 30 (24). */
#include "mtest.h"
#include <mpi-ext.h>
#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#define MAX_ITERS 30 /* the agreed iteration is a unary code in an int */
#define BIG (20 * 1024) /* ints: 80 KiB, past the eager limit */
#define MAX_RECOVERIES 16

/* Where a victim dies: before each step, and inside three of them. */
enum point {
    P_RING, P_RING_MID, P_BIG, P_BIG_MID, P_ALLREDUCE, P_BCAST, P_BARRIER, P_IALLREDUCE,
    P_IALLREDUCE_MID, P_ANY, P_ANY_MID, P_AGREE, P_SHRINK, N_POINTS
};

static int wrank, wsize, iters = 24;
static int victims[2] = {-1, -1}, nvictims, kill_iter, kill_point, killer = -1;
static pid_t *pids;
static int killed;
static int big_out[BIG], big_in[BIG];

static unsigned long long mix(unsigned long long x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* A victim dies on reaching its point; in the agree and shrink modes the killer kills it
 * there instead, after a seeded pause that lets the others enter the call. */
static void point(int iter, enum point p)
{
    if (iter != kill_iter || (int)p != kill_point)
        return;
    if (killer < 0) {
        for (int i = 0; i < nvictims; i++)
            if (victims[i] == wrank)
                raise(SIGKILL);
    } else if (wrank == killer && !killed) {
        killed = 1;
        usleep(1000 + mix(kill_iter) % 20000);
        kill(pids[victims[0]], SIGKILL);
    }
}

#define TRY(call)                                                                         \
    do {                                                                                  \
        int rc_ = (call);                                                                 \
        if (rc_ != MPI_SUCCESS)                                                           \
            return rc_;                                                                   \
    } while (0)

static int ring(MPI_Comm work, int iter, int me, int n)
{
    int right = (me + 1) % n, left = (me + n - 1) % n, out = iter * 1000 + me, in = -1;
    point(iter, P_RING);
    TRY(MPI_Send(&out, 1, MPI_INT, right, 1, work));
    point(iter, P_RING_MID);
    TRY(MPI_Recv(&in, 1, MPI_INT, left, 1, work, MPI_STATUS_IGNORE));
    CHECK(in == iter * 1000 + left, "iteration %d: ring got %d from %d", iter, in, left);
    return MPI_SUCCESS;
}

static int big_ring(MPI_Comm work, int iter, int me, int n)
{
    int right = (me + 1) % n, left = (me + n - 1) % n, bad = 0;
    MPI_Request reqs[2];
    for (int i = 0; i < BIG; i++)
        big_out[i] = iter * 31 + me * 7 + i;
    point(iter, P_BIG);
    TRY(MPI_Irecv(big_in, BIG, MPI_INT, left, 2, work, &reqs[0]));
    point(iter, P_BIG_MID);
    int rc = MPI_Isend(big_out, BIG, MPI_INT, right, 2, work, &reqs[1]);
    if (rc != MPI_SUCCESS) {
        /* The receive is left to the revocation that follows. */
        return rc;
    }
    TRY(MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE));
    for (int i = 0; i < BIG; i++)
        bad += big_in[i] != iter * 31 + left * 7 + i;
    CHECK(bad == 0, "iteration %d: %d wrong ints in the large message from %d", iter, bad, left);
    return MPI_SUCCESS;
}

static int collectives(MPI_Comm work, int iter, int me, int n)
{
    int x = (me + 1) * (iter + 1), root = iter % n, b = me == root ? iter * 7 + root : -1;
    int want = n * (n + 1) / 2 * (iter + 1), y = -1;
    point(iter, P_ALLREDUCE);
    TRY(MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_SUM, work));
    CHECK(y == want, "iteration %d: MPI_Allreduce gave %d, expected %d", iter, y, want);
    point(iter, P_BCAST);
    TRY(MPI_Bcast(&b, 1, MPI_INT, root, work));
    CHECK(b == iter * 7 + root, "iteration %d: MPI_Bcast gave %d", iter, b);
    point(iter, P_BARRIER);
    TRY(MPI_Barrier(work));
    MPI_Request req;
    int z = -1;
    point(iter, P_IALLREDUCE);
    TRY(MPI_Iallreduce(&x, &z, 1, MPI_INT, MPI_SUM, work, &req));
    point(iter, P_IALLREDUCE_MID);
    TRY(MPI_Wait(&req, MPI_STATUS_IGNORE));
    CHECK(z == want, "iteration %d: MPI_Iallreduce gave %d, expected %d", iter, z, want);
    return MPI_SUCCESS;
}

static int any_source(MPI_Comm work, int iter, int me, int n)
{
    int right = (me + 1) % n, left = (me + n - 1) % n, out = iter * 1000 + me, in = -1;
    MPI_Status st;
    point(iter, P_ANY);
    TRY(MPI_Send(&out, 1, MPI_INT, right, 3, work));
    point(iter, P_ANY_MID);
    TRY(MPI_Recv(&in, 1, MPI_INT, MPI_ANY_SOURCE, 3, work, &st));
    CHECK(in == iter * 1000 + left && st.MPI_SOURCE == left,
          "iteration %d: MPI_ANY_SOURCE got %d from %d", iter, in, st.MPI_SOURCE);
    return MPI_SUCCESS;
}

/* The steps of an iteration, up to the first error. */
static int steps(MPI_Comm work, int iter)
{
    int me, n;
    MPI_Comm_rank(work, &me);
    MPI_Comm_size(work, &n);
    TRY(ring(work, iter, me, n));
    TRY(big_ring(work, iter, me, n));
    TRY(collectives(work, iter, me, n));
    return any_source(work, iter, me, n);
}

/* Shrinks `work` (retrying while the shrink itself fails) and goes on on the result. */
static void shrink(MPI_Comm *work)
{
    MPI_Comm next;
    int rc, acked;
    for (int tries = 0; (rc = MPIX_Comm_shrink(*work, &next)) != MPI_SUCCESS; tries++) {
        CHECK(tries < MAX_RECOVERIES, "MPIX_Comm_shrink keeps failing (%d)", rc);
        if (tries >= MAX_RECOVERIES)
            MPI_Abort(MPI_COMM_WORLD, 3);
        MPIX_Comm_ack_failed(*work, wsize, &acked);
    }
    MPI_Comm_free(work);
    *work = next;
    MPI_Comm_set_errhandler(*work, MPI_ERRORS_RETURN);
}

/* After the survivors agreed that one of them failed: acknowledge, shrink, and agree on the
 * iteration to start again from (the smallest any survivor is at, as the AND of unary codes;
 * they are all at the same one here). A failure during the shrink or the agreement shows in
 * a later operation, which brings the survivors back here. */
static void recover(MPI_Comm *work, int *iter)
{
    int acked = 0;
    MPIX_Comm_ack_failed(*work, wsize, &acked);
    shrink(work);
    int code = (int)((1u << *iter) - 1u);
    MPIX_Comm_agree(*work, &code);
    int agreed = 0;
    while (agreed < 31 && (code >> agreed & 1))
        agreed++;
    CHECK(agreed == *iter, "agreed to start again at %d, from %d", agreed, *iter);
    *iter = agreed;
}

/* One iteration: its steps; a survivor that sees an error revokes `work`, which ends the
 * operations the others are blocked in. Then every survivor calls MPIX_Comm_agree on whether
 * all of them succeeded, and MPIX_Comm_shrink: after a failure to recover, else as a step of
 * the loop (a copy of `work` if no member failed meanwhile). Whether the iteration is done is
 * the agreed flag, the same at every survivor. */
static int iteration(MPI_Comm *work, int iter)
{
    int magic = 0x5a | (iter << 8);
    int ok = steps(*work, iter) == MPI_SUCCESS;
    if (!ok)
        MPIX_Comm_revoke(*work);
    int flag = ok ? magic : 0;
    point(iter, P_AGREE);
    MPIX_Comm_agree(*work, &flag);
    CHECK(flag == 0 || flag == magic, "iteration %d: MPIX_Comm_agree gave %#x", iter, flag);
    if (flag != magic) {
        recover(work, &iter);
        return 0;
    }
    point(iter, P_SHRINK);
    shrink(work);
    return 1;
}

/* Whether every survivor got the right sum of the world ranks of `work` (the survivors, if
 * every failure is known): the AND over them, agreed. */
static int final_check(MPI_Comm work)
{
    MPI_Group group, world;
    int n, sum = -1, want = 0;
    MPI_Comm_size(work, &n);
    MPI_Comm_group(work, &group);
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    for (int r = 0; r < n; r++) {
        int w = -1;
        MPI_Group_translate_ranks(group, 1, &r, world, &w);
        want += w;
    }
    MPI_Group_free(&group);
    MPI_Group_free(&world);
    int rc = MPI_Allreduce(&wrank, &sum, 1, MPI_INT, MPI_SUM, work);
    if (rc != MPI_SUCCESS)
        MPIX_Comm_revoke(work);
    int flag = rc == MPI_SUCCESS && sum == want;
    MPIX_Comm_agree(work, &flag);
    return flag;
}

/* Returns once every rank is through the setup's collectives: a collective that returned at
 * a victim may still be running at the others, and fail there if the victim died. Each rank
 * tells every other by a message, which stays receivable after its sender's death. */
static void everyone_set_up(void)
{
    MPI_Request *reqs = calloc(wsize, sizeof *reqs);
    int token = 1, got = 0;
    for (int r = 0; r < wsize; r++)
        reqs[r] = MPI_REQUEST_NULL;
    for (int r = 0; r < wsize; r++)
        if (r != wrank)
            MPI_Isend(&token, 1, MPI_INT, r, 9, MPI_COMM_WORLD, &reqs[r]);
    for (int r = 0; r < wsize; r++)
        if (r != wrank)
            CHECK_OK(MPI_Recv(&got, 1, MPI_INT, r, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
                     "MPI_Recv of a rank's end of the setup");
    CHECK_OK(MPI_Waitall(wsize, reqs, MPI_STATUSES_IGNORE), "MPI_Waitall of the setup's sends");
    free(reqs);
}

static void choose(unsigned long long seed, const char *mode)
{
    unsigned long long h = mix(seed);
    kill_point = (int)(seed % N_POINTS);
    kill_iter = (int)(h % iters);
    victims[0] = (int)(mix(h) % wsize);
    nvictims = 1;
    if (!strcmp(mode, "two")) {
        victims[1] = (victims[0] + 1 + (int)(mix(h + 1) % (wsize - 1))) % wsize;
        nvictims = 2;
    } else if (!strcmp(mode, "agree") || !strcmp(mode, "shrink")) {
        kill_point = !strcmp(mode, "agree") ? P_AGREE : P_SHRINK;
        killer = (victims[0] + 1 + (int)(mix(h + 2) % (wsize - 1))) % wsize;
    } else if (strcmp(mode, "one")) {
        if (wrank == 0)
            fprintf(stderr, "ulfm_stress: unknown mode %s (one, two, agree, shrink)\n", mode);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    MPI_Comm_size(MPI_COMM_WORLD, &wsize);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if (wsize < 3 || argc < 2) {
        if (wrank == 0)
            fprintf(stderr, "usage: ulfm_stress SEED [one|two|agree|shrink [ITERATIONS]], on 3+ processes\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    if (argc > 3)
        iters = atoi(argv[3]);
    if (iters < 1 || iters > MAX_ITERS) {
        if (wrank == 0)
            fprintf(stderr, "ulfm_stress: ITERATIONS must be 1 to %d\n", MAX_ITERS);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    choose(strtoull(argv[1], NULL, 10), argc > 2 ? argv[2] : "one");
    pids = calloc(wsize, sizeof *pids);
    pid_t mine = getpid();
    CHECK_OK(MPI_Allgather(&mine, sizeof mine, MPI_BYTE, pids, sizeof mine, MPI_BYTE,
                           MPI_COMM_WORLD), "MPI_Allgather of the pids");
    if (wrank == 0)
        printf("seed %s: %s %d (and %d) at iteration %d, point %d%s\n", argv[1],
               killer < 0 ? "victim" : "killed", victims[0], victims[1], kill_iter,
               kill_point, killer < 0 ? "" : " by another rank");
    fflush(stdout);

    MPI_Comm work;
    CHECK_OK(MPI_Comm_dup(MPI_COMM_WORLD, &work), "MPI_Comm_dup of the world");
    MPI_Comm_set_errhandler(work, MPI_ERRORS_RETURN);
    everyone_set_up();
    int iter = 0, recoveries = 0;
    for (;;) {
        while (iter < iters) {
            if (iteration(&work, iter))
                iter++;
            else if (++recoveries > MAX_RECOVERIES) {
                CHECK(0, "%d recoveries", recoveries);
                MPI_Abort(MPI_COMM_WORLD, 3);
            }
        }
        if (final_check(work))
            break;
        recover(&work, &iter);
        if (++recoveries > MAX_RECOVERIES) {
            CHECK(0, "%d recoveries", recoveries);
            MPI_Abort(MPI_COMM_WORLD, 3);
        }
    }

    int n = -1, me = -1, all = -1;
    MPI_Comm_size(work, &n);
    MPI_Comm_rank(work, &me);
    CHECK(n == wsize - nvictims, "%d ranks in the last communicator, expected %d", n,
          wsize - nvictims);
    CHECK_OK(MPI_Allreduce(&errs, &all, 1, MPI_INT, MPI_SUM, work), "MPI_Allreduce of errors");
    if (me == 0) {
        printf(all == 0 ? " No Errors\n" : " Found %d errors\n", all);
        fflush(stdout);
    }
    MPI_Comm_free(&work);
    free(pids);
    MPI_Finalize();
    return all ? 1 : 0;
}
