/* Errors reported by the completion calls (MPI 4.1 §3.7.5, §9.3): a truncated receive among
 * others makes Waitall/Testall/Waitsome/Testsome return MPI_ERR_IN_STATUS with the error in
 * that request's status (and MPI_SUCCESS in the completed others), Waitany/Testany return the
 * error itself, and MPI_Wait/MPI_Test return it too. Two processes. */
#include "mtest.h"

static void sends(int n, int tag)
{
    int two[2] = {1, 2};
    for (int i = 0; i < n; i++)
        MPI_Send(two, i == 1 ? 2 : 1, MPI_INT, 1, tag + i, MPI_COMM_WORLD);
}

int main(int argc, char **argv)
{
    int rank, rc, v[3];
    MPI_Request r[3];
    MPI_Status st[3], s1;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);

    /* message 1 of each group of three is too long */
    for (int round = 0; round < 6; round++) {
        int tag = 10 * round;
        if (rank == 0) {
            sends(3, tag);
            continue;
        }
        if (rank != 1)
            continue;
        for (int i = 0; i < 3; i++) {
            MPI_Irecv(&v[i], 1, MPI_INT, 0, tag + i, MPI_COMM_WORLD, &r[i]);
            st[i].MPI_ERROR = -12345;
        }
        MPI_Barrier(MPI_COMM_SELF);
        if (round == 0) {
            rc = MPI_Waitall(3, r, st);
            CHECK_CLASS(rc, MPI_ERR_IN_STATUS, "Waitall");
            CHECK_CLASS(st[1].MPI_ERROR, MPI_ERR_TRUNCATE, "Waitall status[1]");
            /* MPICH stops at the error and leaves later requests MPI_ERR_PENDING */
            CHECK(st[0].MPI_ERROR == MPI_SUCCESS &&
                      (st[2].MPI_ERROR == MPI_SUCCESS || st[2].MPI_ERROR == MPI_ERR_PENDING),
                  "Waitall other statuses %d %d", st[0].MPI_ERROR, st[2].MPI_ERROR);
            if (st[2].MPI_ERROR == MPI_ERR_PENDING)
                MPI_Wait(&r[2], MPI_STATUS_IGNORE);
        } else if (round == 1) {
            int flag = 0;
            rc = MPI_SUCCESS;
            while (!flag && rc == MPI_SUCCESS)
                rc = MPI_Testall(3, r, &flag, st);
            CHECK_CLASS(rc, MPI_ERR_IN_STATUS, "Testall");
            CHECK_CLASS(st[1].MPI_ERROR, MPI_ERR_TRUNCATE, "Testall status[1]");
            if (!flag)
                MPI_Waitall(3, r, MPI_STATUSES_IGNORE);
        } else if (round == 2 || round == 3) {
            int done = 0, saw = 0, idx[3];
            while (done < 3) {
                int out;
                rc = round == 2 ? MPI_Waitsome(3, r, &out, idx, st)
                                : MPI_Testsome(3, r, &out, idx, st);
                if (out == MPI_UNDEFINED)
                    break;
                for (int k = 0; k < out; k++) {
                    if (idx[k] == 1) {
                        saw = 1;
                        CHECK_CLASS(rc, MPI_ERR_IN_STATUS, round == 2 ? "Waitsome" : "Testsome");
                        CHECK_CLASS(st[k].MPI_ERROR, MPI_ERR_TRUNCATE, "...some status");
                    }
                }
                if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS)
                    break;
                done += out;
            }
            CHECK(saw, "round %d: the truncated receive was never reported", round);
        } else if (round == 4) {
            int seen = 0;
            for (int k = 0; k < 3; k++) {
                int idx = -1;
                rc = MPI_Waitany(3, r, &idx, &s1);
                if (idx == 1) {
                    seen = 1;
                    CHECK_CLASS(rc, MPI_ERR_TRUNCATE, "Waitany");
                } else
                    CHECK(rc == MPI_SUCCESS, "Waitany of %d returned %d", idx, rc);
            }
            CHECK(seen, "Waitany never gave index 1");
        } else {
            rc = MPI_Wait(&r[0], &s1);
            CHECK(rc == MPI_SUCCESS, "Wait[0] %d", rc);
            int flag = 0;
            rc = MPI_SUCCESS;
            while (!flag && rc == MPI_SUCCESS)
                rc = MPI_Test(&r[1], &flag, &s1);
            CHECK_CLASS(rc, MPI_ERR_TRUNCATE, "Test on the truncated receive");
            CHECK(r[1] == MPI_REQUEST_NULL, "the failed request was not freed");
            MPI_Wait(&r[2], &s1);
        }
    }
    return finish();
}
