/* Non-overtaking across protocols (MPI 4.1 §3.5): a large (rendezvous) message followed by
 * small (eager) ones on the same tag, or any tag, must be matched in the order sent, also when
 * the receives are posted late, with probes (Probe, Improbe/Imrecv) of large messages, and
 * between a synchronous and a standard send. Two processes. */
#include "mtest.h"

#define BIG (1 << 18)

int main(int argc, char **argv)
{
    int rank;
    MPI_Status st;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int *big = malloc(BIG * sizeof(int)), *got = malloc(BIG * sizeof(int));
    for (int i = 0; i < BIG; i++)
        big[i] = i;

    for (int late = 0; late < 2; late++) {
        if (rank == 0) {
            MPI_Request r[4];
            int one = 1, two = 2;
            MPI_Isend(big, BIG, MPI_INT, 1, 5, MPI_COMM_WORLD, &r[0]);
            MPI_Isend(&one, 1, MPI_INT, 1, 5, MPI_COMM_WORLD, &r[1]);
            MPI_Isend(big, BIG / 2, MPI_INT, 1, 6, MPI_COMM_WORLD, &r[2]);
            MPI_Isend(&two, 1, MPI_INT, 1, 7, MPI_COMM_WORLD, &r[3]);
            if (late)
                MPI_Barrier(MPI_COMM_WORLD);
            MPI_Waitall(4, r, MPI_STATUSES_IGNORE);
        } else if (rank == 1) {
            if (late)
                MPI_Barrier(MPI_COMM_WORLD); /* everything is sent or announced first */
            int n;
            MPI_Recv(got, BIG, MPI_INT, 0, 5, MPI_COMM_WORLD, &st);
            MPI_Get_count(&st, MPI_INT, &n);
            CHECK(n == BIG, "late %d: first tag-5 message has %d ints, expected the large one",
                  late, n);
            MPI_Recv(got, BIG, MPI_INT, 0, 5, MPI_COMM_WORLD, &st);
            MPI_Get_count(&st, MPI_INT, &n);
            CHECK(n == 1 && got[0] == 1, "late %d: second tag-5 message has %d ints", late, n);
            MPI_Recv(got, BIG, MPI_INT, 0, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
            MPI_Get_count(&st, MPI_INT, &n);
            CHECK(n == BIG / 2 && st.MPI_TAG == 6, "late %d: ANY_TAG got tag %d with %d ints",
                  late, st.MPI_TAG, n);
            MPI_Recv(got, BIG, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
            CHECK(st.MPI_TAG == 7 && got[0] == 2, "late %d: last message tag %d", late,
                  st.MPI_TAG);
        } else if (late)
            MPI_Barrier(MPI_COMM_WORLD);
    }

    /* Probes of large messages: the count is known before the data is moved. */
    if (rank == 0) {
        MPI_Request r[3];
        MPI_Isend(big, BIG - 3, MPI_INT, 1, 8, MPI_COMM_WORLD, &r[0]);
        MPI_Isend(big, BIG - 5, MPI_INT, 1, 9, MPI_COMM_WORLD, &r[1]);
        MPI_Isend(big, 3, MPI_INT, 1, 9, MPI_COMM_WORLD, &r[2]);
        MPI_Waitall(3, r, MPI_STATUSES_IGNORE);
    } else if (rank == 1) {
        int n;
        MPI_Probe(0, 8, MPI_COMM_WORLD, &st);
        MPI_Get_count(&st, MPI_INT, &n);
        CHECK(n == BIG - 3, "Probe of a large message: %d", n);
        MPI_Recv(got, n, MPI_INT, 0, 8, MPI_COMM_WORLD, &st);
        CHECK(got[n - 1] == n - 1, "large message after Probe");
        MPI_Message m = MPI_MESSAGE_NULL;
        int flag = 0;
        while (!flag)
            MPI_Improbe(0, 9, MPI_COMM_WORLD, &flag, &m, &st);
        MPI_Get_count(&st, MPI_INT, &n);
        CHECK(n == BIG - 5, "Improbe of a large message: %d", n);
        int small[3];
        MPI_Recv(small, 3, MPI_INT, 0, 9, MPI_COMM_WORLD, &st); /* the second tag-9 message */
        CHECK(small[2] == 2, "the message after an Improbe-matched one");
        MPI_Request r;
        MPI_Imrecv(got, n, MPI_INT, &m, &r);
        CHECK(m == MPI_MESSAGE_NULL, "Imrecv did not set MPI_MESSAGE_NULL");
        MPI_Wait(&r, &st);
        MPI_Get_count(&st, MPI_INT, &n);
        CHECK(n == BIG - 5 && got[n - 1] == n - 1, "Imrecv of a large message: %d", n);
    }

    /* Ssend then Send on one tag: the Ssend's message first. */
    if (rank == 0) {
        int a = 1, b = 2;
        MPI_Request r;
        MPI_Issend(&a, 1, MPI_INT, 1, 10, MPI_COMM_WORLD, &r);
        MPI_Send(&b, 1, MPI_INT, 1, 10, MPI_COMM_WORLD);
        MPI_Wait(&r, MPI_STATUS_IGNORE);
    } else if (rank == 1) {
        int a = 0, b = 0;
        MPI_Recv(&a, 1, MPI_INT, 0, 10, MPI_COMM_WORLD, &st);
        MPI_Recv(&b, 1, MPI_INT, 0, 10, MPI_COMM_WORLD, &st);
        CHECK(a == 1 && b == 2, "Ssend/Send order: %d %d", a, b);
    }
    free(big);
    free(got);
    return finish();
}
