/* Large (rendezvous-sized) messages: truncation of a 1 MiB message into a small buffer
 * (MPI_ERR_TRUNCATE, the connection stays usable), ANY_SOURCE receives of large messages from
 * several senders, a large non-contiguous send, a large Isend to self, Request_get_status
 * (does not free), Status_set_elements/Status_set_cancelled, cancelling a send that can never
 * be received (Test_cancelled true and the message never arrives, or false and it does), and
 * an inactive persistent request in Waitsome. Three processes. */
#include "mtest.h"

#define BIG (1 << 18) /* ints: 1 MiB */

int main(int argc, char **argv)
{
    int rank, size, rc;
    MPI_Status st;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int *big = malloc(BIG * sizeof(int)), *got = malloc(BIG * sizeof(int));
    for (int i = 0; i < BIG; i++)
        big[i] = i ^ rank;

    /* Truncation of a large message, then the same pair goes on. */
    if (rank == 0) {
        MPI_Send(big, BIG, MPI_INT, 1, 1, MPI_COMM_WORLD);
        MPI_Send(big, BIG, MPI_INT, 1, 2, MPI_COMM_WORLD);
    } else if (rank == 1) {
        int small[16];
        rc = MPI_Recv(small, 16, MPI_INT, 0, 1, MPI_COMM_WORLD, &st);
        CHECK_CLASS(rc, MPI_ERR_TRUNCATE, "1 MiB into 64 bytes");
        rc = MPI_Recv(got, BIG, MPI_INT, 0, 2, MPI_COMM_WORLD, &st);
        CHECK_OK(rc, "large receive after a truncation");
        int bad = 0;
        for (int i = 0; i < BIG; i++)
            bad |= got[i] != i;
        CHECK(!bad, "large message after a truncation has wrong data");
    }
    MPI_Barrier(MPI_COMM_WORLD);

    /* ANY_SOURCE large receives from everyone else. */
    if (rank == 0) {
        int seen = 0;
        for (int k = 1; k < size; k++) {
            MPI_Recv(got, BIG, MPI_INT, MPI_ANY_SOURCE, 3, MPI_COMM_WORLD, &st);
            int s = st.MPI_SOURCE, n;
            MPI_Get_count(&st, MPI_INT, &n);
            CHECK(s > 0 && s < size && !(seen & (1 << s)) && n == BIG - s, "from %d: %d ints",
                  s, n);
            seen |= 1 << s;
            int bad = 0;
            for (int i = 0; i < n; i++)
                bad |= got[i] != (i ^ s);
            CHECK(!bad, "large ANY_SOURCE message from %d has wrong data", s);
        }
    } else
        MPI_Send(big, BIG - rank, MPI_INT, 0, 3, MPI_COMM_WORLD);

    /* A large strided send (every other int) into a contiguous receive. */
    MPI_Datatype every2;
    MPI_Type_vector(BIG / 2, 1, 2, MPI_INT, &every2);
    MPI_Type_commit(&every2);
    if (rank == 1)
        MPI_Send(big, 1, every2, 0, 4, MPI_COMM_WORLD);
    else if (rank == 0) {
        MPI_Recv(got, BIG / 2, MPI_INT, 1, 4, MPI_COMM_WORLD, &st);
        int bad = 0;
        for (int i = 0; i < BIG / 2; i++)
            bad |= got[i] != ((2 * i) ^ 1);
        CHECK(!bad, "large strided message has wrong data");
    }
    MPI_Type_free(&every2);

    /* Large Isend to self, then Recv, then Wait. */
    MPI_Request r;
    MPI_Isend(big, BIG, MPI_INT, rank, 5, MPI_COMM_WORLD, &r);
    int flag = 0;
    MPI_Request_get_status(r, &flag, &st);
    MPI_Recv(got, BIG, MPI_INT, rank, 5, MPI_COMM_WORLD, &st);
    MPI_Wait(&r, MPI_STATUS_IGNORE);
    CHECK(got[BIG - 1] == ((BIG - 1) ^ rank), "large self message");

    /* Request_get_status does not free the request. */
    int x = rank, y = -1;
    MPI_Request rr;
    MPI_Irecv(&y, 1, MPI_INT, rank, 6, MPI_COMM_WORLD, &rr);
    MPI_Send(&x, 1, MPI_INT, rank, 6, MPI_COMM_WORLD);
    flag = 0;
    while (!flag)
        MPI_Request_get_status(rr, &flag, &st);
    CHECK(rr != MPI_REQUEST_NULL && st.MPI_SOURCE == rank && st.MPI_TAG == 6,
          "Request_get_status: source %d tag %d", st.MPI_SOURCE, st.MPI_TAG);
    MPI_Wait(&rr, &st);
    CHECK(rr == MPI_REQUEST_NULL && y == rank, "Wait after Request_get_status");
    MPI_Request_get_status(MPI_REQUEST_NULL, &flag, &st);
    CHECK(flag && st.MPI_SOURCE == MPI_ANY_SOURCE, "Request_get_status of MPI_REQUEST_NULL");

    /* Status setters. */
    MPI_Status_set_elements(&st, MPI_INT, 7);
    int n = -1;
    MPI_Get_count(&st, MPI_INT, &n);
    CHECK(n == 7, "Status_set_elements then Get_count: %d", n);
    MPI_Get_elements(&st, MPI_INT, &n);
    CHECK(n == 7, "Status_set_elements then Get_elements: %d", n);
    MPI_Get_count(&st, MPI_BYTE, &n);
    CHECK(n == 7 * (int)sizeof(int), "... in bytes: %d", n);
    MPI_Status_set_cancelled(&st, 1);
    MPI_Test_cancelled(&st, &flag);
    CHECK(flag, "Status_set_cancelled");
    MPI_Status_set_cancelled(&st, 0);
    MPI_Test_cancelled(&st, &flag);
    CHECK(!flag, "Status_set_cancelled(0)");

    /* Cancel a send nobody receives: either cancelled (and never delivered) or not. */
    int cval = 1234, cancelled = 0;
    if (rank == 0) {
        MPI_Request cs;
        MPI_Isend(&cval, 1, MPI_INT, 1, 77, MPI_COMM_WORLD, &cs);
        MPI_Cancel(&cs);
        MPI_Wait(&cs, &st);
        MPI_Test_cancelled(&st, &cancelled);
    }
    MPI_Bcast(&cancelled, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (rank == 1) {
        int v = -1;
        flag = 0;
        MPI_Iprobe(0, 77, MPI_COMM_WORLD, &flag, &st);
        if (cancelled)
            CHECK(!flag, "a cancelled send is still there");
        else {
            MPI_Recv(&v, 1, MPI_INT, 0, 77, MPI_COMM_WORLD, &st);
            CHECK(v == 1234, "uncancelled send delivered %d", v);
        }
    }

    /* An inactive persistent request counts as null in Waitsome/Waitany. */
    MPI_Request pr[2];
    MPI_Recv_init(&y, 1, MPI_INT, rank, 8, MPI_COMM_WORLD, &pr[0]);
    pr[1] = MPI_REQUEST_NULL;
    int outc = 0, idx[2];
    MPI_Waitsome(2, pr, &outc, idx, MPI_STATUSES_IGNORE);
    CHECK(outc == MPI_UNDEFINED, "Waitsome of an inactive persistent request: %d", outc);
    int one;
    MPI_Waitany(2, pr, &one, &st);
    CHECK(one == MPI_UNDEFINED, "Waitany of an inactive persistent request: %d", one);
    MPI_Request_free(&pr[0]);

    free(big);
    free(got);
    return finish();
}
