/* Buffered sends (MPI 4.1 §3.6): MPI_Buffer_attach/detach, Bsend and Ibsend complete before
 * the receive is posted, detach waits for buffered messages and returns the buffer, and a
 * message that does not fit (or no buffer at all) is MPI_ERR_BUFFER. Also ready sends
 * (MPI_Rsend, MPI_Irsend) after the receive is known to be posted. Two processes. */
#include "mtest.h"

#define N 100

int main(int argc, char **argv)
{
    int rank, rc, size1;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Pack_size(N, MPI_INT, MPI_COMM_WORLD, &size1);
    int bufsize = 3 * (size1 + MPI_BSEND_OVERHEAD);
    char *bbuf = malloc(bufsize);
    int data[3][N];
    for (int m = 0; m < 3; m++)
        for (int i = 0; i < N; i++)
            data[m][i] = m * 1000 + i;

    if (rank == 0) {
        MPI_Buffer_attach(bbuf, bufsize);
        MPI_Request req;
        rc = MPI_Bsend(data[0], N, MPI_INT, 1, 0, MPI_COMM_WORLD);
        CHECK_OK(rc, "Bsend 0");
        rc = MPI_Bsend(data[1], N, MPI_INT, 1, 1, MPI_COMM_WORLD);
        CHECK_OK(rc, "Bsend 1");
        rc = MPI_Ibsend(data[2], N, MPI_INT, 1, 2, MPI_COMM_WORLD, &req);
        CHECK_OK(rc, "Ibsend 2");
        int flag = 0;
        for (int i = 0; i < 1000 && !flag; i++)
            MPI_Test(&req, &flag, MPI_STATUS_IGNORE);
        CHECK(flag, "Ibsend not complete though buffered");
        if (!flag)
            MPI_Wait(&req, MPI_STATUS_IGNORE);
        /* The user's data may be changed once Bsend returns. */
        memset(data, 0, sizeof data);
        MPI_Barrier(MPI_COMM_WORLD);
        void *back;
        int backsize;
        MPI_Buffer_detach(&back, &backsize);
        CHECK(back == bbuf && backsize == bufsize, "detach gave %p/%d, attached %p/%d", back,
              backsize, (void *)bbuf, bufsize);

        /* Too big for the buffer. */
        char small[64 + MPI_BSEND_OVERHEAD];
        MPI_Buffer_attach(small, sizeof small);
        int big[1000] = {0};
        rc = MPI_Bsend(big, 1000, MPI_INT, 1, 5, MPI_COMM_WORLD);
        CHECK_CLASS(rc, MPI_ERR_BUFFER, "Bsend larger than the attached buffer");
        MPI_Buffer_detach(&back, &backsize);
        CHECK(back == small && backsize == (int)sizeof small, "second detach");
        /* No buffer at all. */
        rc = MPI_Bsend(big, 10, MPI_INT, 1, 5, MPI_COMM_WORLD);
        CHECK_CLASS(rc, MPI_ERR_BUFFER, "Bsend without an attached buffer");
        /* The process 1 Irecv for tag 6 is posted (barrier): ready sends. */
        MPI_Barrier(MPI_COMM_WORLD);
        int r1 = 61, r2 = 62;
        rc = MPI_Rsend(&r1, 1, MPI_INT, 1, 6, MPI_COMM_WORLD);
        CHECK_OK(rc, "Rsend");
        rc = MPI_Irsend(&r2, 1, MPI_INT, 1, 7, MPI_COMM_WORLD, &req);
        CHECK_OK(rc, "Irsend");
        MPI_Wait(&req, MPI_STATUS_IGNORE);
    } else if (rank == 1) {
        MPI_Barrier(MPI_COMM_WORLD);
        int got[N];
        for (int m = 0; m < 3; m++) {
            MPI_Status st;
            MPI_Recv(got, N, MPI_INT, 0, m, MPI_COMM_WORLD, &st);
            int ok = 1;
            for (int i = 0; i < N; i++)
                ok &= got[i] == m * 1000 + i;
            CHECK(ok, "buffered message %d has wrong data", m);
        }
        int r1 = 0, r2 = 0;
        MPI_Request rq[2];
        MPI_Irecv(&r1, 1, MPI_INT, 0, 6, MPI_COMM_WORLD, &rq[0]);
        MPI_Irecv(&r2, 1, MPI_INT, 0, 7, MPI_COMM_WORLD, &rq[1]);
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Waitall(2, rq, MPI_STATUSES_IGNORE);
        CHECK(r1 == 61 && r2 == 62, "ready sends got %d %d", r1, r2);
    } else {
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
    }
    free(bbuf);
    return finish();
}
