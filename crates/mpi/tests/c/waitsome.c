/* MPI_Cancel of receives and MPI_Test_cancelled (MPI 4.1 §3.8.4), and Waitany, Waitsome,
 * Testany, Testsome, Testall with MPI_REQUEST_NULL entries (§3.7.5). Two processes. */
#include "mtest.h"

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int peer = rank ^ 1, flag, idx, out, idxs[4];
    MPI_Status st, sts[4];
    MPI_Request r[4];

    /* Cancel receives that can never match. */
    int x = -1;
    MPI_Request c;
    MPI_Irecv(&x, 1, MPI_INT, peer, 99, MPI_COMM_WORLD, &c);
    MPI_Cancel(&c);
    MPI_Wait(&c, &st);
    flag = 0;
    MPI_Test_cancelled(&st, &flag);
    CHECK(flag, "cancelled Irecv: Test_cancelled false");
    CHECK(c == MPI_REQUEST_NULL, "request not freed by Wait");
    MPI_Irecv(&x, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &c);
    MPI_Cancel(&c);
    flag = 0;
    while (!flag)
        MPI_Test(&c, &flag, &st);
    MPI_Test_cancelled(&st, &flag);
    CHECK(flag, "cancelled ANY_SOURCE Irecv: Test_cancelled false");
    /* Cancelled persistent receive: restartable. */
    MPI_Recv_init(&x, 1, MPI_INT, peer, 98, MPI_COMM_WORLD, &c);
    MPI_Start(&c);
    MPI_Cancel(&c);
    MPI_Wait(&c, &st);
    MPI_Test_cancelled(&st, &flag);
    CHECK(flag, "cancelled persistent receive");
    MPI_Barrier(MPI_COMM_WORLD);
    /* The cancelled receives did not take these messages. */
    int a = rank + 10, b = -1, d = -1;
    MPI_Request s;
    MPI_Isend(&a, 1, MPI_INT, peer, 99, MPI_COMM_WORLD, &s);
    MPI_Recv(&b, 1, MPI_INT, peer, 99, MPI_COMM_WORLD, &st);
    MPI_Test_cancelled(&st, &flag);
    CHECK(b == peer + 10 && !flag, "message after cancel got %d (cancelled %d)", b, flag);
    MPI_Wait(&s, MPI_STATUS_IGNORE);
    MPI_Isend(&a, 1, MPI_INT, peer, 98, MPI_COMM_WORLD, &s);
    MPI_Start(&c);
    MPI_Wait(&c, &st);
    MPI_Test_cancelled(&st, &flag);
    CHECK(x == peer + 10 && !flag, "restarted persistent receive got %d", x);
    MPI_Wait(&s, MPI_STATUS_IGNORE);
    MPI_Request_free(&c);
    (void)d;

    /* All-null arrays. */
    for (int i = 0; i < 4; i++)
        r[i] = MPI_REQUEST_NULL;
    MPI_Waitany(4, r, &idx, &st);
    CHECK(idx == MPI_UNDEFINED, "Waitany of nulls: index %d", idx);
    CHECK(st.MPI_SOURCE == MPI_ANY_SOURCE && st.MPI_TAG == MPI_ANY_TAG,
          "Waitany of nulls: status not empty (%d/%d)", st.MPI_SOURCE, st.MPI_TAG);
    flag = 0;
    MPI_Testany(4, r, &idx, &flag, &st);
    CHECK(flag && idx == MPI_UNDEFINED, "Testany of nulls: flag %d index %d", flag, idx);
    MPI_Waitsome(4, r, &out, idxs, sts);
    CHECK(out == MPI_UNDEFINED, "Waitsome of nulls: outcount %d", out);
    MPI_Testsome(4, r, &out, idxs, sts);
    CHECK(out == MPI_UNDEFINED, "Testsome of nulls: outcount %d", out);
    flag = 0;
    MPI_Testall(4, r, &flag, sts);
    CHECK(flag, "Testall of nulls: flag 0");
    MPI_Waitany(0, NULL, &idx, &st);
    CHECK(idx == MPI_UNDEFINED, "Waitany of none: index %d", idx);

    /* Mixed: [null, recv, null, send]. */
    int rv = -1, sv = rank * 7;
    r[1] = MPI_REQUEST_NULL;
    MPI_Irecv(&rv, 1, MPI_INT, peer, 5, MPI_COMM_WORLD, &r[1]);
    MPI_Isend(&sv, 1, MPI_INT, peer, 5, MPI_COMM_WORLD, &r[3]);
    int done = 0, seen[4] = {0};
    while (done < 2) {
        MPI_Waitany(4, r, &idx, &st);
        CHECK(idx == 1 || idx == 3, "Waitany index %d", idx);
        if (idx == 1 || idx == 3) {
            CHECK(!seen[idx], "Waitany gave %d twice", idx);
            seen[idx] = 1;
            CHECK(r[idx] == MPI_REQUEST_NULL, "Waitany did not free %d", idx);
            if (idx == 1)
                CHECK(st.MPI_SOURCE == peer && st.MPI_TAG == 5, "Waitany status %d/%d",
                      st.MPI_SOURCE, st.MPI_TAG);
        } else
            break;
        done++;
    }
    CHECK(rv == peer * 7, "Waitany data %d", rv);

    MPI_Irecv(&rv, 1, MPI_INT, peer, 6, MPI_COMM_WORLD, &r[0]);
    MPI_Isend(&sv, 1, MPI_INT, peer, 6, MPI_COMM_WORLD, &r[2]);
    done = 0;
    while (done < 2) {
        MPI_Waitsome(4, r, &out, idxs, sts);
        CHECK(out >= 1 && out <= 2, "Waitsome outcount %d", out);
        if (out < 1 || out > 2)
            break;
        for (int i = 0; i < out; i++) {
            CHECK(idxs[i] == 0 || idxs[i] == 2, "Waitsome index %d", idxs[i]);
            if (idxs[i] == 0)
                CHECK(sts[i].MPI_SOURCE == peer && sts[i].MPI_TAG == 6, "Waitsome status");
        }
        done += out;
    }
    CHECK(done == 2, "Waitsome completed %d", done);

    MPI_Irecv(&rv, 1, MPI_INT, peer, 7, MPI_COMM_WORLD, &r[3]);
    MPI_Isend(&sv, 1, MPI_INT, peer, 7, MPI_COMM_WORLD, &r[1]);
    done = 0;
    while (done < 2) {
        MPI_Testsome(4, r, &out, idxs, sts);
        CHECK(out != MPI_UNDEFINED && out >= 0, "Testsome outcount %d before all done", out);
        if (out == MPI_UNDEFINED || out < 0)
            break;
        done += out;
    }
    MPI_Testsome(4, r, &out, idxs, sts);
    CHECK(out == MPI_UNDEFINED, "Testsome after all done: outcount %d", out);

    MPI_Irecv(&rv, 1, MPI_INT, peer, 8, MPI_COMM_WORLD, &r[2]);
    MPI_Isend(&sv, 1, MPI_INT, peer, 8, MPI_COMM_WORLD, &r[0]);
    done = 0;
    while (done < 2) {
        flag = 0;
        MPI_Testany(4, r, &idx, &flag, &st);
        if (flag) {
            CHECK(idx == 0 || idx == 2, "Testany index %d", idx);
            if (idx != 0 && idx != 2)
                break;
            done++;
        }
    }
    MPI_Testany(4, r, &idx, &flag, &st);
    CHECK(flag && idx == MPI_UNDEFINED, "Testany after all done: %d %d", flag, idx);

    MPI_Irecv(&rv, 1, MPI_INT, peer, 9, MPI_COMM_WORLD, &r[2]);
    MPI_Isend(&sv, 1, MPI_INT, peer, 9, MPI_COMM_WORLD, &r[1]);
    flag = 0;
    while (!flag)
        MPI_Testall(4, r, &flag, sts);
    CHECK(sts[2].MPI_SOURCE == peer && sts[2].MPI_TAG == 9, "Testall status %d/%d",
          sts[2].MPI_SOURCE, sts[2].MPI_TAG);
    CHECK(sts[0].MPI_SOURCE == MPI_ANY_SOURCE && sts[0].MPI_TAG == MPI_ANY_TAG,
          "Testall: status of a null entry not empty (%d/%d)", sts[0].MPI_SOURCE,
          sts[0].MPI_TAG);
    CHECK(r[1] == MPI_REQUEST_NULL && r[2] == MPI_REQUEST_NULL, "Testall did not free");

    /* Small sends, done as they start (ferry keeps no table entry for them), behave as any
     * request: get_status, cancel (too late: not cancelled), free, Waitany/Testsome with
     * nothing else active. */
    int got[3] = {-1, -1, -1};
    MPI_Isend(&sv, 1, MPI_INT, peer, 10, MPI_COMM_WORLD, &r[0]);
    flag = 0;
    while (!flag)
        MPI_Request_get_status(r[0], &flag, &st);
    CHECK(r[0] != MPI_REQUEST_NULL, "Request_get_status freed the request");
    MPI_Recv(&got[0], 1, MPI_INT, peer, 10, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Barrier(MPI_COMM_WORLD); /* received: a cancel now comes too late */
    MPI_Cancel(&r[0]);
    MPI_Wait(&r[0], &st);
    MPI_Test_cancelled(&st, &flag);
    CHECK(!flag && r[0] == MPI_REQUEST_NULL, "cancel after delivery: cancelled %d", flag);
    MPI_Isend(&sv, 1, MPI_INT, peer, 11, MPI_COMM_WORLD, &r[1]);
    MPI_Request_free(&r[1]);
    CHECK(r[1] == MPI_REQUEST_NULL, "Request_free left the handle");
    MPI_Isend(&sv, 1, MPI_INT, peer, 12, MPI_COMM_WORLD, &r[3]);
    MPI_Waitany(4, r, &idx, &st);
    CHECK(idx == 3 && r[3] == MPI_REQUEST_NULL, "Waitany of one send: index %d", idx);
    MPI_Isend(&sv, 1, MPI_INT, peer, 13, MPI_COMM_WORLD, &r[2]);
    out = 0;
    while (out == 0)
        MPI_Testsome(4, r, &out, idxs, sts);
    CHECK(out == 1 && idxs[0] == 2, "Testsome of one send: %d at %d", out, idxs[0]);
    MPI_Recv(&got[1], 1, MPI_INT, peer, 11, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Recv(&got[2], 1, MPI_INT, peer, 12, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Recv(&got[0], 1, MPI_INT, peer, 13, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    CHECK(got[0] == peer * 7 && got[1] == peer * 7 && got[2] == peer * 7, "sends delivered %d %d %d",
          got[0], got[1], got[2]);
    return finish();
}
