/* Synchronous sends complete only once the matching receive has started (MPI 4.1 §3.4):
 * process 0 Issends (empty, small and large, and to itself), both meet in a barrier, and
 * MPI_Test must say "not done" while process 1 has not posted its receive. Two processes. */
#include "mtest.h"
#include <unistd.h>

static void one(int rank, int count, int tag)
{
    int *buf = calloc(count ? count : 1, sizeof(int));
    MPI_Request req;
    int flag = 0;
    for (int i = 0; i < count; i++)
        buf[i] = i ^ tag;
    if (rank == 0) {
        MPI_Issend(buf, count, MPI_INT, 1, tag, MPI_COMM_WORLD, &req);
        MPI_Barrier(MPI_COMM_WORLD); /* process 1 has not posted its receive yet */
        for (int i = 0; i < 20 && !flag; i++) {
            MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
            usleep(1000);
        }
        CHECK(!flag, "Issend of %d ints completed before the receive was posted", count);
        MPI_Barrier(MPI_COMM_WORLD); /* now process 1 posts it */
        MPI_Wait(&req, MPI_STATUS_IGNORE);
    } else if (rank == 1) {
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
        memset(buf, 0, count * sizeof(int));
        MPI_Recv(buf, count, MPI_INT, 0, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        for (int i = 0; i < count; i++)
            if (buf[i] != (i ^ tag)) {
                CHECK(0, "Ssend data of %d ints wrong at %d", count, i);
                break;
            }
    } else {
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
    }
    free(buf);
}

int main(int argc, char **argv)
{
    int rank;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    one(rank, 0, 1);
    one(rank, 4, 2);
    one(rank, 1 << 18, 3);

    /* To itself: not complete until the receive is posted. */
    int x = 42, y = 0, flag = 0;
    MPI_Request req;
    MPI_Issend(&x, 1, MPI_INT, rank, 7, MPI_COMM_WORLD, &req);
    for (int i = 0; i < 5 && !flag; i++)
        MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
    CHECK(!flag, "Issend to self completed before the receive");
    MPI_Recv(&y, 1, MPI_INT, rank, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    CHECK(y == 42, "self Ssend got %d", y);

    /* Blocking Ssend matched by an early Irecv. */
    if (rank == 0) {
        MPI_Ssend(&x, 1, MPI_INT, 1, 8, MPI_COMM_WORLD);
    } else if (rank == 1) {
        MPI_Recv(&y, 1, MPI_INT, 0, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    return finish();
}
