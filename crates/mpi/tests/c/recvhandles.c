/* Receive requests on MPI_COMM_WORLD (whose handles name the runtime's request itself) and on
 * a communicator with the ranks reversed (whose requests live in a table), used every way a
 * request can be: wait and test with statuses, any source, truncation, MPI_Request_get_status
 * before the wait, MPI_Cancel, MPI_Request_free of a receive still in flight, and a copy of a
 * completed handle, which must be an invalid request. Two processes. */
#include "mtest.h"

static void exercise(MPI_Comm comm, const char *name)
{
    int rank, other, rc, v[4] = {0, 0, 0, 0}, count = -1, flag = 0;
    MPI_Status st;
    MPI_Request r, copy, many[3];
    MPI_Comm_rank(comm, &rank);
    other = 1 - rank;

    /* statuses, through Wait, Test and Waitall */
    if (rank == 0) {
        for (int i = 0; i < 5; i++) {
            int x = 100 + i;
            MPI_Send(&x, 1, MPI_INT, other, 7 + i, comm);
        }
    } else {
        MPI_Irecv(&v[0], 1, MPI_INT, 0, 7, comm, &r);
        MPI_Wait(&r, &st);
        MPI_Get_count(&st, MPI_INT, &count);
        CHECK(r == MPI_REQUEST_NULL && v[0] == 100 && st.MPI_SOURCE == 0 && st.MPI_TAG == 7 &&
                  count == 1,
              "%s: Wait: value %d source %d tag %d count %d", name, v[0], st.MPI_SOURCE,
              st.MPI_TAG, count);
        MPI_Irecv(&v[0], 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, comm, &r);
        do
            MPI_Test(&r, &flag, &st);
        while (!flag);
        CHECK(v[0] == 101 && st.MPI_SOURCE == 0 && st.MPI_TAG == 8,
              "%s: Test, any source: value %d source %d tag %d", name, v[0], st.MPI_SOURCE,
              st.MPI_TAG);
        MPI_Status sts[3];
        for (int i = 0; i < 3; i++)
            MPI_Irecv(&v[i], 1, MPI_INT, MPI_ANY_SOURCE, 9 + i, comm, &many[i]);
        MPI_Waitall(3, many, sts);
        for (int i = 0; i < 3; i++)
            CHECK(many[i] == MPI_REQUEST_NULL && v[i] == 102 + i && sts[i].MPI_SOURCE == 0 &&
                      sts[i].MPI_TAG == 9 + i,
                  "%s: Waitall[%d]: value %d source %d tag %d", name, i, v[i],
                  sts[i].MPI_SOURCE, sts[i].MPI_TAG);
    }

    /* the status seen before the wait, then again by the wait; and a stale copy */
    if (rank == 1) {
        int x = 55;
        MPI_Send(&x, 1, MPI_INT, 0, 20, comm);
    } else {
        MPI_Irecv(&v[0], 1, MPI_INT, MPI_ANY_SOURCE, 20, comm, &r);
        copy = r;
        flag = 0;
        while (!flag)
            MPI_Request_get_status(r, &flag, &st);
        CHECK(st.MPI_SOURCE == 1 && st.MPI_TAG == 20 && v[0] == 55,
              "%s: get_status: source %d tag %d value %d", name, st.MPI_SOURCE, st.MPI_TAG, v[0]);
        MPI_Wait(&r, &st);
        CHECK(r == MPI_REQUEST_NULL && st.MPI_SOURCE == 1 && st.MPI_TAG == 20,
              "%s: Wait after get_status: source %d tag %d", name, st.MPI_SOURCE, st.MPI_TAG);
        rc = MPI_Wait(&copy, MPI_STATUS_IGNORE);
        CHECK_CLASS(rc, MPI_ERR_REQUEST, "a copy of a completed receive request");
    }

    /* truncation */
    if (rank == 0) {
        int two[2] = {1, 2};
        MPI_Send(two, 2, MPI_INT, other, 30, comm);
    } else {
        MPI_Irecv(&v[0], 1, MPI_INT, 0, 30, comm, &r);
        rc = MPI_Wait(&r, &st);
        CHECK_CLASS(rc, MPI_ERR_TRUNCATE, "a receive of 1 int where 2 came");
    }

    /* cancel of a receive that never matches, free of one still in flight */
    if (rank == 1) {
        MPI_Irecv(&v[0], 1, MPI_INT, 0, 40, comm, &r);
        MPI_Cancel(&r);
        MPI_Wait(&r, &st);
        MPI_Test_cancelled(&st, &flag);
        CHECK(flag, "%s: the cancelled receive is not marked cancelled", name);
        MPI_Irecv(&v[1], 1, MPI_INT, 0, 41, comm, &r);
        MPI_Request_free(&r);
        CHECK(r == MPI_REQUEST_NULL, "%s: Request_free left the handle", name);
    }
    MPI_Barrier(comm);
    if (rank == 0) {
        int x = 77;
        MPI_Send(&x, 1, MPI_INT, other, 41, comm);
        MPI_Send(&x, 1, MPI_INT, other, 42, comm);
    } else {
        /* the freed receive takes tag 41; this one the message after it */
        MPI_Recv(&v[2], 1, MPI_INT, 0, 42, comm, MPI_STATUS_IGNORE);
        CHECK(v[2] == 77, "%s: the receive after a freed one got %d", name, v[2]);
    }
    MPI_Barrier(comm);
}

int main(int argc, char **argv)
{
    int rank;
    MPI_Comm reversed;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    exercise(MPI_COMM_WORLD, "world");
    MPI_Comm_split(MPI_COMM_WORLD, 0, -rank, &reversed);
    MPI_Comm_set_errhandler(reversed, MPI_ERRORS_RETURN);
    exercise(reversed, "reversed");
    MPI_Comm_free(&reversed);
    return finish();
}
