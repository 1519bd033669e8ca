/* Collectives of count 0 (or of a datatype of size 0) between collectives that carry data:
 * MPI_Bcast, Reduce, Allreduce, Gather, Scatter, Allgather, Alltoall, Reduce_scatter_block,
 * Reduce_scatter, Scan, Exscan and the v-forms, blocking, nonblocking and persistent, on the
 * world and on a duplicate. Every call with data is checked for its result (a rank that skipped
 * a call another one did not would get wrong data or hang), every zero-count call leaves the
 * buffers alone, and the arguments of a zero-count call are still checked (root, datatype,
 * operation, communicator). On ferry, zero-count calls send no message (the MPI_T counter
 * ferry_p2p_messages_sent stays still over 1000 of them) and their nonblocking and persistent
 * forms are complete at once. Run on 2, 3 and 4 processes. */
#include "mtest.h"

#define N 4
#define SENTINEL (-7)

static int rank, size, on_ferry;

static void fill(int *v, int n, int value)
{
    for (int i = 0; i < n; i++)
        v[i] = value;
}

static int untouched(const int *v, int n)
{
    for (int i = 0; i < n; i++)
        if (v[i] != SENTINEL)
            return 0;
    return 1;
}

/* One round of every collective with data on `comm`, results checked; `salt` varies them. */
static void with_data(MPI_Comm comm, int salt)
{
    int send[N * 4], recv[N * 4], want;
    int root = salt % size;
    for (int i = 0; i < N; i++)
        send[i] = rank * 100 + i + salt;
    fill(recv, N * 4, SENTINEL);
    if (rank == root)
        memcpy(recv, send, sizeof(int) * N);
    CHECK_OK(MPI_Bcast(recv, N, MPI_INT, root, comm), "MPI_Bcast");
    CHECK(recv[N - 1] == root * 100 + N - 1 + salt, "bcast: %d", recv[N - 1]);

    CHECK_OK(MPI_Allreduce(send, recv, N, MPI_INT, MPI_SUM, comm), "MPI_Allreduce");
    want = 100 * size * (size - 1) / 2 + size * (1 + salt);
    CHECK(recv[1] == want, "allreduce: %d, want %d", recv[1], want);

    fill(recv, N, SENTINEL);
    CHECK_OK(MPI_Reduce(send, recv, N, MPI_INT, MPI_MAX, root, comm), "MPI_Reduce");
    if (rank == root)
        CHECK(recv[0] == (size - 1) * 100 + salt, "reduce: %d", recv[0]);

    CHECK_OK(MPI_Allgather(send, 1, MPI_INT, recv, 1, MPI_INT, comm), "MPI_Allgather");
    for (int r = 0; r < size; r++)
        CHECK(recv[r] == r * 100 + salt, "allgather[%d]: %d", r, recv[r]);

    int blocks[N * 4];
    for (int r = 0; r < size; r++)
        blocks[r] = rank * 1000 + r + salt;
    CHECK_OK(MPI_Alltoall(blocks, 1, MPI_INT, recv, 1, MPI_INT, comm), "MPI_Alltoall");
    for (int r = 0; r < size; r++)
        CHECK(recv[r] == r * 1000 + rank + salt, "alltoall[%d]: %d", r, recv[r]);

    fill(recv, N * 4, SENTINEL);
    CHECK_OK(MPI_Gather(send, 1, MPI_INT, recv, 1, MPI_INT, root, comm), "MPI_Gather");
    if (rank == root)
        for (int r = 0; r < size; r++)
            CHECK(recv[r] == r * 100 + salt, "gather[%d]: %d", r, recv[r]);

    int one = SENTINEL;
    CHECK_OK(MPI_Scatter(blocks, 1, MPI_INT, &one, 1, MPI_INT, root, comm), "MPI_Scatter");
    CHECK(one == root * 1000 + rank + salt, "scatter: %d", one);

    int mine = SENTINEL;
    CHECK_OK(MPI_Reduce_scatter_block(blocks, &mine, 1, MPI_INT, MPI_SUM, comm),
             "MPI_Reduce_scatter_block");
    want = 1000 * size * (size - 1) / 2 + size * (rank + salt);
    CHECK(mine == want, "reduce_scatter_block: %d, want %d", mine, want);

    int scanned = SENTINEL;
    CHECK_OK(MPI_Scan(&send[0], &scanned, 1, MPI_INT, MPI_SUM, comm), "MPI_Scan");
    want = 100 * rank * (rank + 1) / 2 + (rank + 1) * salt;
    CHECK(scanned == want, "scan: %d, want %d", scanned, want);
    scanned = SENTINEL;
    CHECK_OK(MPI_Exscan(&send[0], &scanned, 1, MPI_INT, MPI_SUM, comm), "MPI_Exscan");
    want = 100 * rank * (rank - 1) / 2 + rank * salt;
    if (rank > 0)
        CHECK(scanned == want, "exscan: %d, want %d", scanned, want);

    /* Nonblocking: started together, finished together. */
    MPI_Request rq[2];
    int b = rank == root ? 42 + salt : SENTINEL, sum = SENTINEL;
    CHECK_OK(MPI_Ibcast(&b, 1, MPI_INT, root, comm, &rq[0]), "MPI_Ibcast");
    CHECK_OK(MPI_Iallreduce(&send[0], &sum, 1, MPI_INT, MPI_SUM, comm, &rq[1]), "MPI_Iallreduce");
    CHECK_OK(MPI_Waitall(2, rq, MPI_STATUSES_IGNORE), "MPI_Waitall");
    CHECK(b == 42 + salt, "ibcast: %d", b);
    CHECK(sum == 100 * size * (size - 1) / 2 + size * salt, "iallreduce: %d", sum);
}

/* Every zero-count blocking collective on `comm`, with a datatype `dt` of `count` elements
 * (count 0, or a type of size 0): no error, buffers left alone. `v_forms` adds the gatherv,
 * scatterv and alltoallv of zero counts, which still communicate (a rank cannot tell from its
 * own arguments that the others send nothing). */
static void without_data(MPI_Comm comm, MPI_Datatype dt, int count, int reductions, int v_forms)
{
    int send[N * 4], recv[N * 4], counts[16] = {0}, displs[16] = {0};
    fill(send, N * 4, 1);
    fill(recv, N * 4, SENTINEL);
    CHECK_OK(MPI_Bcast(recv, count, dt, 0, comm), "MPI_Bcast 0");
    CHECK_OK(MPI_Gather(send, count, dt, recv, count, dt, size - 1, comm), "MPI_Gather 0");
    CHECK_OK(MPI_Scatter(send, count, dt, recv, count, dt, 0, comm), "MPI_Scatter 0");
    CHECK_OK(MPI_Allgather(send, count, dt, recv, count, dt, comm), "MPI_Allgather 0");
    CHECK_OK(MPI_Alltoall(send, count, dt, recv, count, dt, comm), "MPI_Alltoall 0");
    CHECK_OK(MPI_Allgatherv(send, 0, dt, recv, counts, displs, dt, comm), "MPI_Allgatherv 0");
    if (v_forms) {
        CHECK_OK(MPI_Gatherv(send, 0, dt, recv, counts, displs, dt, 0, comm), "MPI_Gatherv 0");
        CHECK_OK(MPI_Scatterv(send, counts, displs, dt, recv, 0, dt, size - 1, comm),
                 "MPI_Scatterv 0");
        CHECK_OK(MPI_Alltoallv(send, counts, displs, dt, recv, counts, displs, dt, comm),
                 "MPI_Alltoallv 0");
    }
    if (reductions) {
        CHECK_OK(MPI_Reduce(send, recv, count, dt, MPI_SUM, 0, comm), "MPI_Reduce 0");
        CHECK_OK(MPI_Allreduce(send, recv, count, dt, MPI_SUM, comm), "MPI_Allreduce 0");
        CHECK_OK(MPI_Allreduce(MPI_IN_PLACE, recv, count, dt, MPI_SUM, comm),
                 "MPI_Allreduce 0 in place");
        CHECK_OK(MPI_Reduce_scatter_block(send, recv, count, dt, MPI_SUM, comm),
                 "MPI_Reduce_scatter_block 0");
        CHECK_OK(MPI_Reduce_scatter(send, recv, counts, dt, MPI_SUM, comm), "MPI_Reduce_scatter 0");
        CHECK_OK(MPI_Scan(send, recv, count, dt, MPI_SUM, comm), "MPI_Scan 0");
        CHECK_OK(MPI_Exscan(send, recv, count, dt, MPI_SUM, comm), "MPI_Exscan 0");
    }
    CHECK(untouched(recv, N * 4), "a zero-count call wrote into the receive buffer");
}

/* Nonblocking and persistent zero-count calls: complete (at once on ferry), buffers alone. */
static void without_data_nonblocking(MPI_Comm comm)
{
    int send[N], recv[N], flag = 0;
    MPI_Request rq[6];
    MPI_Status st;
    fill(send, N, 1);
    fill(recv, N, SENTINEL);
    CHECK_OK(MPI_Ibcast(recv, 0, MPI_INT, 0, comm, &rq[0]), "MPI_Ibcast 0");
    CHECK_OK(MPI_Iallreduce(send, recv, 0, MPI_INT, MPI_SUM, comm, &rq[1]), "MPI_Iallreduce 0");
    CHECK_OK(MPI_Ireduce(send, recv, 0, MPI_INT, MPI_SUM, size - 1, comm, &rq[2]), "MPI_Ireduce 0");
    CHECK_OK(MPI_Iallgather(send, 0, MPI_INT, recv, 0, MPI_INT, comm, &rq[3]), "MPI_Iallgather 0");
    CHECK_OK(MPI_Ialltoall(send, 0, MPI_INT, recv, 0, MPI_INT, comm, &rq[4]), "MPI_Ialltoall 0");
    CHECK_OK(MPI_Iscan(send, recv, 0, MPI_INT, MPI_SUM, comm, &rq[5]), "MPI_Iscan 0");
    if (on_ferry) {
        for (int i = 0; i < 6; i++) {
            flag = 0;
            CHECK_OK(MPI_Test(&rq[i], &flag, &st), "MPI_Test");
            CHECK(flag && rq[i] == MPI_REQUEST_NULL, "zero-count request %d not complete", i);
        }
    } else {
        CHECK_OK(MPI_Waitall(6, rq, MPI_STATUSES_IGNORE), "MPI_Waitall");
    }
    MPI_Request p;
    CHECK_OK(MPI_Allreduce_init(send, recv, 0, MPI_INT, MPI_SUM, comm, MPI_INFO_NULL, &p),
             "MPI_Allreduce_init 0");
    for (int k = 0; k < 3; k++) {
        CHECK_OK(MPI_Start(&p), "MPI_Start");
        if (on_ferry) {
            flag = 0;
            CHECK_OK(MPI_Test(&p, &flag, &st), "MPI_Test persistent");
            CHECK(flag, "zero-count persistent allreduce not complete at its start");
        } else {
            CHECK_OK(MPI_Wait(&p, &st), "MPI_Wait persistent");
        }
    }
    CHECK_OK(MPI_Request_free(&p), "MPI_Request_free");
    CHECK(untouched(recv, N), "a zero-count nonblocking call wrote into the receive buffer");
}

/* Errors a zero-count call still reports. */
static void errors_without_data(void)
{
    int send[N], recv[N];
    int rc = MPI_Bcast(recv, 0, MPI_INT, size, MPI_COMM_WORLD);
    CHECK_CLASS(rc, MPI_ERR_ROOT, "bcast of 0 to root = size");
    rc = MPI_Reduce(send, recv, 0, MPI_INT, MPI_SUM, -1, MPI_COMM_WORLD);
    CHECK_CLASS(rc, MPI_ERR_ROOT, "reduce of 0 to root -1");
    rc = MPI_Gather(send, 0, MPI_INT, recv, 0, MPI_INT, size + 3, MPI_COMM_WORLD);
    CHECK_CLASS(rc, MPI_ERR_ROOT, "gather of 0 to root size+3");
    if (on_ferry) {
        /* MPICH 5.0.2 stops at an assertion instead. */
        rc = MPI_Allreduce(send, recv, 0, MPI_DATATYPE_NULL, MPI_SUM, MPI_COMM_WORLD);
        CHECK_CLASS(rc, MPI_ERR_TYPE, "allreduce of 0 MPI_DATATYPE_NULL");
    }
    rc = MPI_Allreduce(send, recv, 0, MPI_INT, MPI_OP_NULL, MPI_COMM_WORLD);
    CHECK_CLASS(rc, MPI_ERR_OP, "allreduce of 0 with MPI_OP_NULL");
    /* Open MPI 5.0.11 returns MPI_SUCCESS here; MPICH 5.0.2 and ferry report the communicator. */
    rc = MPI_Allgather(send, 0, MPI_INT, recv, 0, MPI_INT, MPI_COMM_NULL);
    CHECK_CLASS(rc, MPI_ERR_COMM, "allgather of 0 on MPI_COMM_NULL");
    rc = MPI_Alltoall(send, -1, MPI_INT, recv, -1, MPI_INT, MPI_COMM_WORLD);
    CHECK_CLASS(rc, MPI_ERR_COUNT, "alltoall of count -1");
    MPI_Request rq = MPI_REQUEST_NULL;
    rc = MPI_Ibcast(recv, 0, MPI_INT, -2, MPI_COMM_WORLD, &rq);
    CHECK_CLASS(rc, MPI_ERR_ROOT, "ibcast of 0 to root -2");
}

/* ferry's count of messages this rank sent, if it has one (-1 elsewhere). */
static MPI_T_pvar_session session = MPI_T_PVAR_SESSION_NULL;
static MPI_T_pvar_handle sent_handle = MPI_T_PVAR_HANDLE_NULL;

static void open_counter(void)
{
    int index, count;
    if (MPI_T_pvar_get_index("ferry_p2p_messages_sent", MPI_T_PVAR_CLASS_COUNTER, &index) !=
        MPI_SUCCESS) {
        CHECK(!on_ferry, "ferry has no ferry_p2p_messages_sent");
        return;
    }
    CHECK_OK(MPI_T_pvar_session_create(&session), "pvar_session_create");
    CHECK_OK(MPI_T_pvar_handle_alloc(session, index, NULL, &sent_handle, &count), "handle_alloc");
    CHECK_OK(MPI_T_pvar_start(session, sent_handle), "pvar_start");
}

static long long messages_sent(void)
{
    unsigned long long v = 0;
    if (sent_handle == MPI_T_PVAR_HANDLE_NULL)
        return -1;
    CHECK_OK(MPI_T_pvar_read(session, sent_handle, &v), "pvar_read");
    return (long long)v;
}

int main(int argc, char **argv)
{
    int provided;
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int len;
    MPI_Init(&argc, &argv);
    MPI_T_init_thread(MPI_THREAD_SINGLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
    MPI_Get_library_version(version, &len);
    on_ferry = strncmp(version, "ferry", 5) == 0;
    open_counter();

    MPI_Datatype empty;
    MPI_Type_contiguous(0, MPI_INT, &empty);
    MPI_Type_commit(&empty);
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);

    for (int round = 0; round < 4; round++) {
        MPI_Comm comm = round % 2 ? dup : MPI_COMM_WORLD;
        without_data(comm, MPI_INT, 0, 1, 1);
        with_data(comm, round);
        without_data(comm, empty, 3, 0, 1);
        without_data_nonblocking(comm);
        with_data(comm, round + 10);
        errors_without_data();
        with_data(comm, round + 20);
    }

    /* 1000 zero-count calls of each kind send nothing. */
    long long before = messages_sent();
    for (int i = 0; i < 1000; i++) {
        int x = SENTINEL;
        MPI_Allreduce(MPI_IN_PLACE, &x, 0, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        MPI_Bcast(&x, 0, MPI_INT, i % size, dup);
        without_data(MPI_COMM_WORLD, MPI_INT, 0, 1, 0);
        without_data_nonblocking(dup);
    }
    long long after = messages_sent();
    if (on_ferry)
        CHECK(after == before, "zero-count calls sent %lld messages", after - before);
    with_data(MPI_COMM_WORLD, 99);
    with_data(dup, 98);
    if (on_ferry)
        CHECK(messages_sent() > after, "calls with data sent no message");

    if (sent_handle != MPI_T_PVAR_HANDLE_NULL) {
        MPI_T_pvar_handle_free(session, &sent_handle);
        MPI_T_pvar_session_free(&session);
    }
    MPI_Type_free(&empty);
    MPI_Comm_free(&dup);
    MPI_T_finalize();
    return finish();
}
