/* Partitioned communication (MPI 4.1 §4.2) against the standard's rules: the two sides may cut
 * the same bytes into different partition counts (6 × 4 ints sent, received as 3 × 8 and as
 * 8 × 3); partitions made ready out of order (the last first) and through MPI_Pready_range and
 * MPI_Pready_list; many rounds of one pair of requests, each round's bytes in place and its
 * status counting the whole; MPI_Parrived polled on every receive partition until all report
 * arrival, before MPI_Wait; and the errors of MPI_Pready before MPI_Start, on a partition
 * already ready in the round, and on a receive request, each returned under
 * MPI_ERRORS_RETURN without spoiling the round. Two processes. */
#include "mtest.h"

enum { SEND_PARTS = 6, SEND_PER = 4, TOTAL = SEND_PARTS * SEND_PER, ROUNDS = 200 };

static int value(int round, int request, int i) { return 100000 * request + 100 * round + i; }

/* Readies the send partitions of round `round` in an order that depends on the round. */
static void ready_all(int round, MPI_Request req)
{
    switch (round % 3) {
    case 0: /* the last partition first, then the others downwards */
        for (int p = SEND_PARTS - 1; p >= 0; p--)
            MPI_Pready(p, req);
        break;
    case 1: /* the upper half as a range, then the lower half as a list out of order */
        MPI_Pready_range(SEND_PARTS / 2, SEND_PARTS - 1, req);
        {
            int list[SEND_PARTS / 2];
            for (int k = 0; k < SEND_PARTS / 2; k++)
                list[k] = SEND_PARTS / 2 - 1 - k;
            MPI_Pready_list(SEND_PARTS / 2, list, req);
        }
        break;
    default: /* odd partitions, then even ones */
        for (int p = 1; p < SEND_PARTS; p += 2)
            MPI_Pready(p, req);
        for (int p = 0; p < SEND_PARTS; p += 2)
            MPI_Pready(p, req);
    }
}

static void sender(void)
{
    int buf[2][TOTAL];
    MPI_Request req[2];
    for (int k = 0; k < 2; k++)
        MPI_Psend_init(buf[k], SEND_PARTS, SEND_PER, MPI_INT, 1, 5 + k, MPI_COMM_WORLD,
                       MPI_INFO_NULL, &req[k]);
    /* MPI_Pready before MPI_Start: the request is not active. */
    int rc = MPI_Pready(0, req[0]);
    CHECK(rc != MPI_SUCCESS, "MPI_Pready before MPI_Start succeeded");
    for (int round = 0; round < ROUNDS; round++) {
        for (int k = 0; k < 2; k++)
            for (int i = 0; i < TOTAL; i++)
                buf[k][i] = value(round, k, i);
        MPI_Startall(2, req);
        ready_all(round, req[0]);
        MPI_Pready(SEND_PARTS - 1, req[1]);
#ifndef MPICH_VERSION
        /* MPICH does not detect a partition made ready twice (the standard calls it erroneous
         * without naming an error) and asserts later; ferry returns an error. */
        if (round == 0) {
            /* The same partition twice in one round. */
            rc = MPI_Pready(SEND_PARTS - 1, req[1]);
            CHECK(rc != MPI_SUCCESS, "MPI_Pready of a partition already ready succeeded");
            int twice[2] = {0, 0};
            rc = MPI_Pready_list(2, twice, req[1]);
            CHECK(rc != MPI_SUCCESS, "MPI_Pready_list naming a partition twice succeeded");
            /* The first 0 of that list counts: the rest follow without it. */
            MPI_Pready_range(1, SEND_PARTS - 2, req[1]);
        } else
#endif
        {
            MPI_Pready_range(0, SEND_PARTS - 2, req[1]);
        }
        MPI_Waitall(2, req, MPI_STATUSES_IGNORE);
    }
    for (int k = 0; k < 2; k++)
        MPI_Request_free(&req[k]);
}

static void receiver(void)
{
    /* The first request receives 3 × 8 ints, the second 8 × 3. */
    const int parts[2] = {3, 8}, per[2] = {8, 3};
    int buf[2][TOTAL];
    MPI_Request req[2];
    for (int k = 0; k < 2; k++)
        MPI_Precv_init(buf[k], parts[k], per[k], MPI_INT, 0, 5 + k, MPI_COMM_WORLD,
                       MPI_INFO_NULL, &req[k]);
    int rc = MPI_Pready(0, req[0]);
    CHECK(rc != MPI_SUCCESS, "MPI_Pready on a receive request succeeded");
    for (int round = 0; round < ROUNDS; round++) {
        for (int k = 0; k < 2; k++)
            for (int i = 0; i < TOTAL; i++)
                buf[k][i] = -1;
        MPI_Startall(2, req);
        /* Every partition of the first request arrives while MPI_Parrived is polled. */
        int arrived = 0;
        while (arrived < parts[0]) {
            arrived = 0;
            for (int p = 0; p < parts[0]; p++) {
                int flag = 0;
                MPI_Parrived(req[0], p, &flag);
                arrived += flag != 0;
            }
        }
        MPI_Status st[2];
        MPI_Waitall(2, req, st);
        for (int k = 0; k < 2; k++) {
            int n = -1;
            MPI_Get_count(&st[k], MPI_INT, &n);
            CHECK(n == TOTAL && st[k].MPI_TAG == 5 + k && st[k].MPI_SOURCE == 0,
                  "round %d request %d: count %d tag %d source %d", round, k, n, st[k].MPI_TAG,
                  st[k].MPI_SOURCE);
            for (int i = 0; i < TOTAL; i++)
                CHECK(buf[k][i] == value(round, k, i), "round %d request %d: [%d] = %d, expected %d",
                      round, k, i, buf[k][i], value(round, k, i));
        }
    }
    for (int k = 0; k < 2; k++)
        MPI_Request_free(&req[k]);
}

int main(int argc, char **argv)
{
    int rank;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if (rank == 0)
        sender();
    else if (rank == 1)
        receiver();
    return finish();
}
