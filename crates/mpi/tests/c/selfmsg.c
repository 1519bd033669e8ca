/* Messages to oneself and progress by polling alone: Sendrecv and Sendrecv_replace of 1 MiB
 * with the calling process as both peer, on MPI_COMM_WORLD and MPI_COMM_SELF; an Issend
 * completed by MPI_Test polling only, and a large message waited for by MPI_Iprobe polling
 * only, while the other process does the same (each needs the other's progress). Two
 * processes. */
#include "mtest.h"

#define BIG (1 << 18)

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Status st;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int *a = malloc(BIG * sizeof(int)), *b = malloc(BIG * sizeof(int));
    for (int i = 0; i < BIG; i++)
        a[i] = i + rank;

    MPI_Sendrecv(a, BIG, MPI_INT, rank, 1, b, BIG, MPI_INT, rank, 1, MPI_COMM_WORLD, &st);
    CHECK(b[BIG - 1] == BIG - 1 + rank && st.MPI_SOURCE == rank, "Sendrecv to self");
    MPI_Sendrecv(a, BIG, MPI_INT, 0, 2, b, BIG, MPI_INT, 0, 2, MPI_COMM_SELF, &st);
    CHECK(b[7] == 7 + rank && st.MPI_SOURCE == 0, "Sendrecv on MPI_COMM_SELF");
    MPI_Sendrecv_replace(a, BIG, MPI_INT, rank, 3, rank, 3, MPI_COMM_WORLD, &st);
    CHECK(a[BIG / 2] == BIG / 2 + rank, "Sendrecv_replace to self");
    MPI_Datatype every2;
    MPI_Type_vector(BIG / 2, 1, 2, MPI_INT, &every2);
    MPI_Type_commit(&every2);
    MPI_Sendrecv_replace(a, 1, every2, 0, 4, 0, 4, MPI_COMM_SELF, &st);
    CHECK(a[2] == 2 + rank && a[3] == 3 + rank, "strided Sendrecv_replace on MPI_COMM_SELF");
    MPI_Type_free(&every2);

    if (size >= 2 && rank < 2) {
        int peer = rank ^ 1, x = rank, y = -1, flag = 0;
        MPI_Request r;
        MPI_Issend(&x, 1, MPI_INT, peer, 5, MPI_COMM_WORLD, &r);
        MPI_Request rr;
        MPI_Irecv(&y, 1, MPI_INT, peer, 5, MPI_COMM_WORLD, &rr);
        while (!flag)
            MPI_Test(&r, &flag, MPI_STATUS_IGNORE);
        MPI_Wait(&rr, MPI_STATUS_IGNORE);
        CHECK(y == peer, "Issend by polling: %d", y);
        /* large messages both ways, receivers found by Iprobe polling */
        MPI_Request s;
        MPI_Isend(a, BIG, MPI_INT, peer, 6, MPI_COMM_WORLD, &s);
        flag = 0;
        while (!flag)
            MPI_Iprobe(peer, 6, MPI_COMM_WORLD, &flag, &st);
        int n;
        MPI_Get_count(&st, MPI_INT, &n);
        CHECK(n == BIG, "Iprobe count %d", n);
        MPI_Recv(b, BIG, MPI_INT, peer, 6, MPI_COMM_WORLD, &st);
        MPI_Wait(&s, MPI_STATUS_IGNORE);
        CHECK(b[BIG - 1] == BIG - 1 + peer, "large message after Iprobe");
    }
    free(a);
    free(b);
    return finish();
}
