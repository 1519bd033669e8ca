/* User-Level Failure Mitigation (a job run with ferry run --fault-tolerant, or Open MPI's
 * mpiexec --with-ft ulfm): the last rank kills itself (SIGKILL) after a barrier, and the
 * survivors, whose world has MPI_ERRORS_RETURN, see:
 * - a receive posted from it end with MPIX_ERR_PROC_FAILED; every survivor learns of the
 *   failure (MPIX_Comm_get_failed lists it) while it only polls;
 * - a send to it and a collective on the world fail with MPIX_ERR_PROC_FAILED;
 * - MPIX_Comm_ack_failed and MPIX_Comm_failure_get_acked count and list it;
 * - point-to-point between survivors still works (a ring of messages);
 * - MPIX_Comm_revoke of a duplicate made before the failure ends a receive another survivor
 *   had posted on it with MPIX_ERR_REVOKED, and every survivor sees it revoked;
 * - MPIX_Comm_agree over the survivors ANDs their flags, and MPIX_Comm_shrink makes a
 *   communicator of the survivors on which collectives work again.
 * Rank 0 prints " No Errors" once every survivor reported none (over the shrunk communicator).
 * Run on 3 or more processes. */
#include "mtest.h"
#include <mpi-ext.h>
#include <signal.h>
#include <unistd.h>

static int rank, size, victim;

/* Drives progress (a probe) until every failure is known here: `want` members of `comm`
 * failed. Gives up after 10 s. */
static int wait_for_failures(MPI_Comm comm, int want)
{
    for (int i = 0; i < 10000; i++) {
        MPI_Group failed;
        int n = -1, flag;
        MPIX_Comm_get_failed(comm, &failed);
        MPI_Group_size(failed, &n);
        MPI_Group_free(&failed);
        if (n >= want)
            return n;
        MPI_Iprobe(MPI_ANY_SOURCE, 999, MPI_COMM_SELF, &flag, MPI_STATUS_IGNORE);
        usleep(1000);
    }
    return -1;
}

/* A receive from any source while the failure is not acknowledged: a blocking one fails, a
 * nonblocking one's wait reports MPIX_ERR_PROC_FAILED_PENDING and the receive stays posted. */
static MPI_Request wildcard_pending(int *y)
{
    MPI_Request req = MPI_REQUEST_NULL;
    int rc;
    if (rank == 0) {
        rc = MPI_Recv(y, 1, MPI_INT, MPI_ANY_SOURCE, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        CHECK_CLASS(rc, MPIX_ERR_PROC_FAILED, "MPI_Recv from any source, failure not acknowledged");
        MPI_Irecv(y, 1, MPI_INT, MPI_ANY_SOURCE, 3, MPI_COMM_WORLD, &req);
        rc = MPI_Wait(&req, MPI_STATUS_IGNORE);
        CHECK_CLASS(rc, MPIX_ERR_PROC_FAILED_PENDING, "MPI_Wait of a receive from any source");
        CHECK(req != MPI_REQUEST_NULL, "the pending receive was freed");
        /* The same from the calls that wait for several: a finished request beside it
         * completes, the pending one stays active and says why in its status. */
        MPI_Request two[2];
        MPI_Status st[2];
        int idx[2], out = -1, index = -1, z = 7, w = 0;
        two[0] = req;
        MPI_Irecv(&w, 1, MPI_INT, 0, 9, MPI_COMM_WORLD, &two[1]);
        MPI_Send(&z, 1, MPI_INT, 0, 9, MPI_COMM_WORLD);
        rc = MPI_Waitall(2, two, st);
        CHECK_CLASS(rc, MPI_ERR_IN_STATUS, "MPI_Waitall with a pending receive from any source");
        CHECK(st[0].MPI_ERROR == MPIX_ERR_PROC_FAILED_PENDING, "MPI_Waitall: status error %d",
              st[0].MPI_ERROR);
        CHECK(st[1].MPI_ERROR == MPI_SUCCESS && w == 7, "MPI_Waitall: the finished receive");
        CHECK(two[0] == req && two[1] == MPI_REQUEST_NULL, "MPI_Waitall: which stay active");
        rc = MPI_Waitany(1, &req, &index, MPI_STATUS_IGNORE);
        CHECK_CLASS(rc, MPIX_ERR_PROC_FAILED_PENDING, "MPI_Waitany of a receive from any source");
        CHECK(index == 0 && req != MPI_REQUEST_NULL, "MPI_Waitany: index %d", index);
        rc = MPI_Waitsome(1, &req, &out, idx, st);
        CHECK_CLASS(rc, MPI_ERR_IN_STATUS, "MPI_Waitsome of a receive from any source");
        CHECK(out == 1 && idx[0] == 0 && st[0].MPI_ERROR == MPIX_ERR_PROC_FAILED_PENDING,
              "MPI_Waitsome: %d done, status error %d", out, st[0].MPI_ERROR);
        CHECK(req != MPI_REQUEST_NULL, "MPI_Waitsome freed the pending receive");
    }
    return req;
}

/* After the acknowledgement the pending receive gets rank 1's message. */
static void wildcard_after_ack(MPI_Request req, int *y)
{
    int go = 0;
    if (rank == 0) {
        MPI_Status st;
        MPI_Send(&go, 1, MPI_INT, 1, 4, MPI_COMM_WORLD);
        CHECK_OK(MPI_Wait(&req, &st), "MPI_Wait of the receive from any source after the ack");
        CHECK(*y == 42 && st.MPI_SOURCE == 1, "received %d from %d", *y, st.MPI_SOURCE);
    } else if (rank == 1) {
        int v = 42;
        MPI_Recv(&go, 1, MPI_INT, 0, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(&v, 1, MPI_INT, 0, 3, MPI_COMM_WORLD);
    }
}

static void point_to_point(void)
{
    int x = 0, rc;
    if (rank == 0) {
        MPI_Status st;
        rc = MPI_Recv(&x, 1, MPI_INT, victim, 0, MPI_COMM_WORLD, &st);
        CHECK_CLASS(rc, MPIX_ERR_PROC_FAILED, "MPI_Recv from the dead rank");
    }
    CHECK(wait_for_failures(MPI_COMM_WORLD, 1) == 1, "the failure was not learned");
    rc = MPI_Send(&x, 1, MPI_INT, victim, 0, MPI_COMM_WORLD);
    CHECK_CLASS(rc, MPIX_ERR_PROC_FAILED, "MPI_Send to the dead rank");
    rc = MPI_Barrier(MPI_COMM_WORLD);
    CHECK_CLASS(rc, MPIX_ERR_PROC_FAILED, "MPI_Barrier with a dead member");
    rc = MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    CHECK_CLASS(rc, MPIX_ERR_PROC_FAILED, "MPI_Allreduce with a dead member");

    int y = -1;
    MPI_Request pending = wildcard_pending(&y);
    MPI_Group world, failed, acked;
    int n = -1, acked_n = -1, dead = -1;
    MPIX_Comm_get_failed(MPI_COMM_WORLD, &failed);
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    MPI_Group_translate_ranks(failed, 1, (int[]){0}, world, &dead);
    CHECK(dead == victim, "MPIX_Comm_get_failed lists rank %d, not %d", dead, victim);
    CHECK_OK(MPIX_Comm_ack_failed(MPI_COMM_WORLD, 0, &n), "MPIX_Comm_ack_failed(0)");
    CHECK(n == 0, "%d acknowledged after acknowledging none", n);
    CHECK_OK(MPIX_Comm_ack_failed(MPI_COMM_WORLD, size, &n), "MPIX_Comm_ack_failed(size)");
    CHECK(n == 1, "%d acknowledged, expected 1", n);
    MPIX_Comm_failure_get_acked(MPI_COMM_WORLD, &acked);
    MPI_Group_size(acked, &acked_n);
    CHECK(acked_n == 1, "MPIX_Comm_failure_get_acked has %d members", acked_n);
    MPI_Group_free(&failed);
    MPI_Group_free(&acked);
    MPI_Group_free(&world);
    wildcard_after_ack(pending, &y);

    /* The survivors pass a token around their ring. */
    int alive = size - 1, token = -1, mine = rank * 10;
    rc = MPI_Sendrecv(&mine, 1, MPI_INT, (rank + 1) % alive, 1, &token, 1, MPI_INT,
                      (rank + alive - 1) % alive, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    CHECK_OK(rc, "MPI_Sendrecv between survivors");
    CHECK(token == ((rank + alive - 1) % alive) * 10, "token %d", token);
}

static void revocation(MPI_Comm dup)
{
    int x = 0, flag = 0, rc;
    if (rank == 1) {
        MPI_Request req;
        MPI_Irecv(&x, 1, MPI_INT, 0, 5, dup, &req);
        MPI_Send(&x, 1, MPI_INT, 0, 6, MPI_COMM_WORLD); /* the receive is posted */
        rc = MPI_Wait(&req, MPI_STATUS_IGNORE);
        CHECK_CLASS(rc, MPIX_ERR_REVOKED, "a receive posted before MPIX_Comm_revoke");
    }
    if (rank == 0) {
        MPI_Recv(&x, 1, MPI_INT, 1, 6, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        CHECK_OK(MPIX_Comm_revoke(dup), "MPIX_Comm_revoke");
    }
    for (int i = 0; i < 10000 && !flag; i++) {
        MPIX_Comm_is_revoked(dup, &flag);
        if (!flag) {
            MPI_Iprobe(MPI_ANY_SOURCE, 999, MPI_COMM_SELF, &x, MPI_STATUS_IGNORE);
            usleep(1000);
        }
    }
    CHECK(flag, "the revocation did not arrive");
    rc = MPI_Send(&x, 1, MPI_INT, 0, 7, dup);
    CHECK_CLASS(rc, MPIX_ERR_REVOKED, "MPI_Send on a revoked communicator");
    rc = MPI_Barrier(dup);
    CHECK_CLASS(rc, MPIX_ERR_REVOKED, "MPI_Barrier on a revoked communicator");
}

/* Agreement over the survivors (also on the revoked duplicate), then a shrink. */
static MPI_Comm recovery(MPI_Comm revoked)
{
    int flag = 1 | (rank == 0 ? 2 : 6), rc;
    rc = MPIX_Comm_agree(MPI_COMM_WORLD, &flag);
    CHECK_OK(rc, "MPIX_Comm_agree with the failure acknowledged");
    CHECK(flag == 3, "MPIX_Comm_agree gave %d, expected 3", flag);
    flag = rank + 1;
    rc = MPIX_Comm_agree(revoked, &flag);
    CHECK_CLASS(rc, MPIX_ERR_PROC_FAILED, "MPIX_Comm_agree with the failure not acknowledged");
    CHECK(flag == 0, "MPIX_Comm_agree on the revoked duplicate gave %d", flag);

    MPI_Request req;
    flag = 5;
    CHECK_OK(MPIX_Comm_iagree(MPI_COMM_WORLD, &flag, &req), "MPIX_Comm_iagree");
    CHECK_OK(MPI_Wait(&req, MPI_STATUS_IGNORE), "MPI_Wait of MPIX_Comm_iagree");
    CHECK(flag == 5, "MPIX_Comm_iagree gave %d", flag);

    MPI_Comm shrunk;
    int n = -1, me = -1;
    CHECK_OK(MPIX_Comm_shrink(revoked, &shrunk), "MPIX_Comm_shrink of the revoked duplicate");
    MPI_Comm_size(shrunk, &n);
    MPI_Comm_rank(shrunk, &me);
    CHECK(n == size - 1, "the shrunk communicator has %d ranks", n);
    CHECK(me == rank, "rank %d in the shrunk communicator", me);
    int sum = 0;
    CHECK_OK(MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, shrunk), "MPI_Allreduce after shrink");
    CHECK(sum == (size - 1) * (size - 2) / 2, "sum %d over the survivors", sum);
    CHECK_OK(MPI_Barrier(shrunk), "MPI_Barrier after shrink");
    return shrunk;
}

int main(int argc, char **argv)
{
    MPI_Comm dup;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    victim = size - 1;
    if (size < 3) {
        if (rank == 0)
            fprintf(stderr, "ulfm: needs 3 or more processes\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
    MPI_Group failed;
    int n = -1;
    MPIX_Comm_get_failed(MPI_COMM_WORLD, &failed);
    MPI_Group_size(failed, &n);
    CHECK(n == 0, "%d failed before any did", n);
    MPI_Group_free(&failed);
    CHECK_OK(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier before the failure");
    /* The victim dies once every rank is out of the barrier: a collective running when a
     * member fails may fail at any member. */
    int out = 1;
    if (rank == victim) {
        for (int r = 0; r < victim; r++)
            MPI_Recv(&out, 1, MPI_INT, r, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        raise(SIGKILL);
    }
    MPI_Send(&out, 1, MPI_INT, victim, 8, MPI_COMM_WORLD);

    point_to_point();
    revocation(dup);

    MPI_Comm shrunk = recovery(dup);

    /* Every survivor's count of errors, summed over the survivors. */
    int all = -1;
    CHECK_OK(MPI_Allreduce(&errs, &all, 1, MPI_INT, MPI_SUM, shrunk), "MPI_Allreduce of errors");
    if (rank == 0) {
        printf(all == 0 ? " No Errors\n" : " Found %d errors\n", all);
        fflush(stdout);
    }
    MPI_Comm_free(&shrunk);
    MPI_Comm_free(&dup);
    MPI_Finalize();
    return all ? 1 : 0;
}
