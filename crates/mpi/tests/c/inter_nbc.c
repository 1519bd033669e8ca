/* Nonblocking collectives on an intercommunicator (run on 5 processes: groups of 2 and 3):
 * every one of them is started before any completes, then each result is compared with the
 * blocking collective's on the same input. Some use a strided datatype, so staging is
 * exercised too. */
#include "mtest.h"

#define K 2   /* elements per block */
#define N 32  /* room per buffer */
#define NOPS 12

static void fill(int *b, int n, int base)
{
    for (int i = 0; i < n; i++)
        b[i] = base + i;
}

int main(int argc, char **argv)
{
    int wrank, wsize;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    MPI_Comm_size(MPI_COMM_WORLD, &wsize);
    if (wsize != 5) {
        if (wrank == 0)
            fprintf(stderr, "run on 5 processes\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int inA = wrank % 2; /* A = {1, 3}, B = {0, 2, 4} */
    MPI_Comm local, ic;
    MPI_Comm_split(MPI_COMM_WORLD, inA, wrank, &local);
    MPI_Intercomm_create(local, 0, MPI_COMM_WORLD, inA ? 0 : 1, 5, &ic);
    int lrank, lsize, rsize;
    MPI_Comm_rank(ic, &lrank);
    MPI_Comm_size(ic, &lsize);
    MPI_Comm_remote_size(ic, &rsize);

    /* Every other int: a strided type of K ints whose extent covers 2K. */
    MPI_Datatype strided;
    MPI_Type_vector(K, 1, 2, MPI_INT, &strided);
    MPI_Type_commit(&strided);

    static int in[NOPS][N], blk[NOPS][N], nbk[NOPS][N];
    for (int op = 0; op < NOPS; op++) {
        fill(in[op], N, 1000 * op + 100 * wrank);
        for (int i = 0; i < N; i++)
            blk[op][i] = nbk[op][i] = -1;
    }
    int counts[3] = {1, 2, 1}, displs[3] = {6, 0, 3}; /* per remote rank (first rsize used) */
    /* All-to-all-v: 1 or 2 elements between local ranks a and b, by the parity of a + b. */
    int rcounts[3], rdispls[3] = {0, 4, 8};
    for (int j = 0; j < 3; j++)
        rcounts[j] = 1 + (lrank + j) % 2;
    int wcounts[3], wdispls[3];
    MPI_Datatype wtypes[3] = {MPI_INT, MPI_INT, MPI_INT};
    for (int j = 0; j < 3; j++)
        wcounts[j] = K, wdispls[j] = (int) sizeof(int) * K * (2 - j);
    int rs_counts_A[2] = {3, 3}, rs_counts_B[3] = {2, 2, 2};
    int *rs_counts = inA ? rs_counts_A : rs_counts_B;

    /* Roots: A's rank 0 for gathers and B's rank 1 for the v-forms, etc. */
#define ROOT(groupA, r) ((inA == (groupA)) ? (lrank == (r) ? MPI_ROOT : MPI_PROC_NULL) : (r))
    for (int pass = 0; pass < 2; pass++) {
        int (*out)[N] = pass ? nbk : blk;
        MPI_Request rq[NOPS];
        for (int i = 0; i < NOPS; i++)
            rq[i] = MPI_REQUEST_NULL;
        int nb = pass == 1;
#define CALL(i, blocking, nonblocking) \
    do {                               \
        if (nb)                        \
            nonblocking;               \
        else                           \
            blocking;                  \
    } while (0)
        CALL(0, MPI_Gather(in[0], K, MPI_INT, out[0], K, MPI_INT, ROOT(1, 0), ic),
             MPI_Igather(in[0], K, MPI_INT, out[0], K, MPI_INT, ROOT(1, 0), ic, &rq[0]));
        CALL(1, MPI_Gatherv(in[1], lrank % 2 + 1, MPI_INT, out[1], counts, displs, MPI_INT, ROOT(0, 1), ic),
             MPI_Igatherv(in[1], lrank % 2 + 1, MPI_INT, out[1], counts, displs, MPI_INT, ROOT(0, 1), ic, &rq[1]));
        CALL(2, MPI_Scatter(in[2], K, MPI_INT, out[2], K, MPI_INT, ROOT(1, 1), ic),
             MPI_Iscatter(in[2], K, MPI_INT, out[2], K, MPI_INT, ROOT(1, 1), ic, &rq[2]));
        CALL(3, MPI_Scatterv(in[3], counts, displs, MPI_INT, out[3], lrank % 2 + 1, MPI_INT, ROOT(0, 0), ic),
             MPI_Iscatterv(in[3], counts, displs, MPI_INT, out[3], lrank % 2 + 1, MPI_INT, ROOT(0, 0), ic, &rq[3]));
        CALL(4, MPI_Allgather(in[4], K, MPI_INT, out[4], 1, strided, ic),
             MPI_Iallgather(in[4], K, MPI_INT, out[4], 1, strided, ic, &rq[4]));
        CALL(5, MPI_Allgatherv(in[5], lrank % 2 + 1, MPI_INT, out[5], counts, displs, MPI_INT, ic),
             MPI_Iallgatherv(in[5], lrank % 2 + 1, MPI_INT, out[5], counts, displs, MPI_INT, ic, &rq[5]));
        CALL(6, MPI_Alltoall(in[6], K, MPI_INT, out[6], K, MPI_INT, ic),
             MPI_Ialltoall(in[6], K, MPI_INT, out[6], K, MPI_INT, ic, &rq[6]));
        CALL(7, MPI_Alltoallv(in[7], rcounts, rdispls, MPI_INT, out[7], rcounts, displs, MPI_INT, ic),
             MPI_Ialltoallv(in[7], rcounts, rdispls, MPI_INT, out[7], rcounts, displs, MPI_INT, ic, &rq[7]));
        CALL(8, MPI_Alltoallw(in[8], wcounts, wdispls, wtypes, out[8], wcounts, wdispls, wtypes, ic),
             MPI_Ialltoallw(in[8], wcounts, wdispls, wtypes, out[8], wcounts, wdispls, wtypes, ic, &rq[8]));
        CALL(9, MPI_Reduce_scatter(in[9], out[9], rs_counts, MPI_INT, MPI_SUM, ic),
             MPI_Ireduce_scatter(in[9], out[9], rs_counts, MPI_INT, MPI_SUM, ic, &rq[9]));
        /* Both groups reduce 6 elements: 3 each for A's 2 processes, 2 each for B's 3. */
        CALL(10, MPI_Reduce_scatter_block(in[10], out[10], inA ? 3 : 2, MPI_INT, MPI_MAX, ic),
             MPI_Ireduce_scatter_block(in[10], out[10], inA ? 3 : 2, MPI_INT, MPI_MAX, ic, &rq[10]));
        /* Root 0: with root 1, MPICH 4.0.2's MPI_Ibcast on an intercommunicator delivered
         * nothing to the other group when this test was checked against it. */
        if (inA == 0 && lrank == 0)
            fill(out[11], N, 7000);
        CALL(11, MPI_Bcast(out[11], 3, strided, ROOT(0, 0), ic),
             MPI_Ibcast(out[11], 3, strided, ROOT(0, 0), ic, &rq[11]));
        if (nb) {
            /* Group A completes them newest first, B all at once. */
            if (inA)
                for (int i = NOPS - 1; i >= 0; i--)
                    MPI_Wait(&rq[i], MPI_STATUS_IGNORE);
            else
                MPI_Waitall(NOPS, rq, MPI_STATUSES_IGNORE);
        }
    }
    for (int op = 0; op < NOPS; op++)
        for (int i = 0; i < N; i++)
            CHECK(blk[op][i] == nbk[op][i], "op %d element %d: blocking %d, nonblocking %d", op, i, blk[op][i], nbk[op][i]);
    /* Spot checks that the blocking results are themselves right. */
    if (inA) {
        CHECK(blk[6][0] == 6000 + K * lrank && blk[6][K] == 6200 + K * lrank, "alltoall %d %d", blk[6][0], blk[6][K]);
        /* three strided elements: ints 0, 2 | 3, 5 | 6, 8 (extent 3 ints) */
        CHECK(blk[11][3] == 7003 && blk[11][4] == -1 && blk[11][8] == 7008, "bcast %d %d %d", blk[11][3], blk[11][4], blk[11][8]);
    }

    MPI_Type_free(&strided);
    MPI_Comm_free(&ic);
    MPI_Comm_free(&local);
    return finish();
}
