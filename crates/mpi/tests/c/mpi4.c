/* MPI 4.0 additions: persistent collectives (MPI 4.1 §6.13) and large-count `_c` calls
 * (§2.5.8). Persistent collectives are started many times with new buffer contents, checked
 * each round; started in different orders on different ranks (they match by init order); mixed
 * with persistent point-to-point requests in one MPI_Startall; on an intercommunicator and on a
 * Cartesian ring (neighbourhood collectives); with a derived type and a user operation freed
 * right after init; freed while inactive. Large counts: `_c` point-to-point, collective,
 * datatype and pack calls give the int calls' results, and a count whose bytes do not fit the
 * address space is MPI_ERR_COUNT, not a truncated message. Generalized requests (§13.2): query, free and
 * cancel callbacks, alone and in a Waitall. Two to eight processes. */
#include "mtest.h"
#include <stdint.h>

#define N 6
#define ROUNDS 5

static void persistent_collectives(int rank, int size)
{
    int sbuf[N], rbuf[N], big[8], got[8], a = -1, a2 = -1, b = -1, c = -1;
    MPI_Request r[6];
    MPI_Bcast_init(sbuf, N, MPI_INT, 1 % size, MPI_COMM_WORLD, MPI_INFO_NULL, &r[0]);
    MPI_Allreduce_init(sbuf, rbuf, N, MPI_INT, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL, &r[1]);
    /* (Not gather or allgather here: MPICH 4.0.2's persistent ones send the send buffer's
     * contents at init time in every round.) */
    MPI_Scan_init(&a, &c, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL, &r[2]);
    MPI_Exscan_init(&a2, &b, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL, &r[3]);
    MPI_Alltoall_init(big, 1, MPI_INT, got, 1, MPI_INT, MPI_COMM_WORLD, MPI_INFO_NULL, &r[4]);
    MPI_Barrier_init(MPI_COMM_WORLD, MPI_INFO_NULL, &r[5]);
    for (int it = 0; it < ROUNDS; it++) {
        /* broadcast from rank 1: new contents each round */
        for (int i = 0; i < N; i++)
            sbuf[i] = rank == 1 % size ? it * 100 + i : -1;
        MPI_Start(&r[0]);
        MPI_Wait(&r[0], MPI_STATUS_IGNORE);
        CHECK(r[0] != MPI_REQUEST_NULL, "a persistent collective became MPI_REQUEST_NULL");
        for (int i = 0; i < N; i++)
            CHECK(sbuf[i] == it * 100 + i, "round %d bcast[%d] = %d", it, i, sbuf[i]);

        /* allreduce of the broadcast data plus the rank */
        for (int i = 0; i < N; i++)
            sbuf[i] = it + i + rank;
        MPI_Start(&r[1]);
        MPI_Wait(&r[1], MPI_STATUS_IGNORE);
        for (int i = 0; i < N; i++)
            CHECK(rbuf[i] == size * (it + i) + size * (size - 1) / 2, "round %d allreduce[%d] = %d",
                  it, i, rbuf[i]);

        /* scan and exscan in one Startall, alltoall with a Test loop */
        a = a2 = rank * 10 + it;
        MPI_Startall(2, &r[2]);
        MPI_Waitall(2, &r[2], MPI_STATUSES_IGNORE);
        CHECK(c == 10 * rank * (rank + 1) / 2 + (rank + 1) * it, "round %d scan = %d", it, c);
        if (rank > 0)
            CHECK(b == 10 * rank * (rank - 1) / 2 + rank * it, "round %d exscan = %d", it, b);
        for (int i = 0; i < size; i++)
            big[i] = rank * 1000 + i * 10 + it;
        MPI_Start(&r[4]);
        for (int flag = 0; !flag;)
            MPI_Test(&r[4], &flag, MPI_STATUS_IGNORE);
        for (int i = 0; i < size; i++)
            CHECK(got[i] == i * 1000 + rank * 10 + it, "round %d alltoall[%d] = %d", it, i, got[i]);
        MPI_Start(&r[5]);
        MPI_Wait(&r[5], MPI_STATUS_IGNORE);
    }
    /* Wait on an inactive persistent collective returns at once with an empty status. */
    MPI_Status st;
    st.MPI_SOURCE = 77;
    MPI_Wait(&r[5], &st);
    CHECK(st.MPI_SOURCE == MPI_ANY_SOURCE && r[5] != MPI_REQUEST_NULL, "inactive wait: source %d",
          st.MPI_SOURCE);
    for (int i = 0; i < 6; i++) {
        MPI_Request_free(&r[i]);
        CHECK(r[i] == MPI_REQUEST_NULL, "Request_free left request %d", i);
    }

    /* Matched by init order: the broadcast and the barrier started in opposite orders. */
    int x = -1;
    MPI_Request o[2];
    MPI_Bcast_init(&x, 1, MPI_INT, 0, MPI_COMM_WORLD, MPI_INFO_NULL, &o[0]);
    MPI_Barrier_init(MPI_COMM_WORLD, MPI_INFO_NULL, &o[1]);
    for (int it = 0; it < ROUNDS; it++) {
        x = rank == 0 ? 42 + it : -1;
        if (rank % 2 == 0) {
            MPI_Start(&o[0]);
            MPI_Start(&o[1]);
        } else {
            MPI_Start(&o[1]);
            MPI_Start(&o[0]);
        }
        MPI_Waitall(2, o, MPI_STATUSES_IGNORE);
        CHECK(x == 42 + it, "round %d: bcast started after the barrier gave %d", it, x);
    }
    MPI_Request_free(&o[0]);
    MPI_Request_free(&o[1]);
}

/* A persistent reduction whose derived datatype and user operation the program frees right
 * after init (MPI 4.1 §2.5.1): they live until the request is freed, under the same handle. */
static MPI_Datatype pair_type;
static int pair_calls, pair_bad_type;

static void pair_sum(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    int *a = in, *b = inout;
    pair_calls++;
    pair_bad_type += *dt != pair_type;
    for (int i = 0; i < 2 * *len; i++)
        b[i] += a[i];
}

static void freed_type_and_op(int rank, int size)
{
    MPI_Datatype pair;
    MPI_Op op;
    int in[4], out[4];
    MPI_Request r;
    MPI_Type_contiguous(2, MPI_INT, &pair);
    MPI_Type_commit(&pair);
    pair_type = pair;
    MPI_Op_create(pair_sum, 1, &op);
    MPI_Allreduce_init(in, out, 2, pair, op, MPI_COMM_WORLD, MPI_INFO_NULL, &r);
    MPI_Type_free(&pair);
    MPI_Op_free(&op);
    for (int it = 0; it < ROUNDS; it++) {
        for (int i = 0; i < 4; i++)
            in[i] = rank + i + it;
        MPI_Start(&r);
        MPI_Wait(&r, MPI_STATUS_IGNORE);
        for (int i = 0; i < 4; i++)
            CHECK(out[i] == size * (i + it) + size * (size - 1) / 2, "round %d pair sum[%d] = %d",
                  it, i, out[i]);
    }
    CHECK(pair_bad_type == 0, "the user operation saw another datatype handle %d times",
          pair_bad_type);
    int calls = 0;
    MPI_Allreduce(&pair_calls, &calls, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    CHECK(calls > 0, "the user operation never ran");
    MPI_Request_free(&r);
}

/* One MPI_Startall over persistent sends, receives and collectives (a ring exchange, a
 * reduction to the root and a gatherv). */
static void startall_mix(int rank, int size)
{
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    int out[2], in[2] = { -1, -1 }, v, sum = -1, counts[8], displs[8], g[16];
    MPI_Request r[5];
    for (int i = 0; i < size; i++) {
        counts[i] = i % 2 + 1;
        displs[i] = 2 * i;
    }
    MPI_Recv_init(in, 2, MPI_INT, left, 5, MPI_COMM_WORLD, &r[0]);
    MPI_Reduce_init(&v, &sum, 1, MPI_INT, MPI_SUM, size - 1, MPI_COMM_WORLD, MPI_INFO_NULL, &r[1]);
    MPI_Send_init(out, 2, MPI_INT, right, 5, MPI_COMM_WORLD, &r[2]);
    MPI_Gatherv_init(out, rank % 2 + 1, MPI_INT, g, counts, displs, MPI_INT, 0, MPI_COMM_WORLD,
                     MPI_INFO_NULL, &r[3]);
    MPI_Ssend_init(&v, 1, MPI_INT, rank, 6, MPI_COMM_WORLD, &r[4]);
    for (int it = 0; it < ROUNDS; it++) {
        int self = -1;
        MPI_Request rs;
        out[0] = rank * 7 + it;
        out[1] = -it;
        v = rank + it;
        for (int i = 0; i < 16; i++)
            g[i] = -1;
        MPI_Irecv(&self, 1, MPI_INT, rank, 6, MPI_COMM_WORLD, &rs);
        MPI_Startall(5, r);
        MPI_Waitall(5, r, MPI_STATUSES_IGNORE);
        MPI_Wait(&rs, MPI_STATUS_IGNORE);
        CHECK(in[0] == left * 7 + it && in[1] == -it, "round %d ring: %d %d", it, in[0], in[1]);
        CHECK(self == rank + it, "round %d self ssend: %d", it, self);
        if (rank == size - 1)
            CHECK(sum == size * (size - 1) / 2 + size * it, "round %d reduce: %d", it, sum);
        if (rank == 0)
            for (int i = 0; i < size; i++)
                for (int k = 0; k < counts[i]; k++) {
                    int want = k == 0 ? i * 7 + it : -it;
                    CHECK(g[displs[i] + k] == want, "round %d gatherv from %d[%d]: %d", it, i, k,
                          g[displs[i] + k]);
                }
    }
    for (int i = 0; i < 5; i++)
        MPI_Request_free(&r[i]);
}

/* A persistent allreduce and bcast on an intercommunicator (even ranks against odd ranks). */
static void persistent_inter(int rank, int size)
{
    if (size < 2)
        return;
    MPI_Comm half, inter;
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
    MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, rank % 2 ? 0 : 1, 9, &inter);
    int lrank, rsize;
    MPI_Comm_rank(half, &lrank);
    MPI_Comm_remote_size(inter, &rsize);
    int x, y = -1, z = -1;
    MPI_Request r[2];
    MPI_Allreduce_init(&x, &y, 1, MPI_INT, MPI_SUM, inter, MPI_INFO_NULL, &r[0]);
    int root = rank % 2 == 0 ? (lrank == 0 ? MPI_ROOT : MPI_PROC_NULL) : 0;
    MPI_Bcast_init(&z, 1, MPI_INT, root, inter, MPI_INFO_NULL, &r[1]);
    for (int it = 0; it < ROUNDS; it++) {
        x = rank + it;
        z = rank == 0 ? 500 + it : -1;
        MPI_Startall(2, r);
        MPI_Waitall(2, r, MPI_STATUSES_IGNORE);
        int want = 0;
        for (int i = (rank + 1) % 2; i < size; i += 2)
            want += i + it;
        CHECK(y == want, "round %d inter allreduce: %d, expected %d", it, y, want);
        if (rank % 2)
            CHECK(z == 500 + it, "round %d inter bcast: %d", it, z);
    }
    MPI_Request_free(&r[0]);
    MPI_Request_free(&r[1]);
    MPI_Comm_free(&inter);
    MPI_Comm_free(&half);
}

/* Persistent neighbourhood collectives on a periodic ring. */
static void persistent_neighbours(int rank, int size)
{
    MPI_Comm ring;
    int dims = size, periods = 1, two[2], mine, w[2];
    MPI_Cart_create(MPI_COMM_WORLD, 1, &dims, &periods, 0, &ring);
    int left, right;
    MPI_Cart_shift(ring, 0, 1, &left, &right);
    MPI_Request r[2];
    int to[2], from[2] = { -1, -1 };
    MPI_Neighbor_allgather_init(&mine, 1, MPI_INT, two, 1, MPI_INT, ring, MPI_INFO_NULL, &r[0]);
    MPI_Neighbor_alltoall_init(to, 1, MPI_INT, from, 1, MPI_INT, ring, MPI_INFO_NULL, &r[1]);
    for (int it = 0; it < ROUNDS; it++) {
        mine = rank * 10 + it;
        to[0] = rank * 100 + it;     /* to the left (source 0 of the receiver on the right) */
        to[1] = rank * 100 + 50 + it; /* to the right */
        MPI_Startall(2, r);
        MPI_Waitall(2, r, MPI_STATUSES_IGNORE);
        CHECK(two[0] == left * 10 + it && two[1] == right * 10 + it,
              "round %d neighbour allgather %d %d", it, two[0], two[1]);
        w[0] = left * 100 + 50 + it;
        w[1] = right * 100 + it;
        CHECK(from[0] == w[0] && from[1] == w[1], "round %d neighbour alltoall %d %d", it, from[0],
              from[1]);
    }
    MPI_Request_free(&r[0]);
    MPI_Request_free(&r[1]);

    /* the same with MPI_Count counts and MPI_Aint displacements, blocking and persistent */
    MPI_Count cnt[2] = { 1, 1 };
    MPI_Aint dis[2] = { 1, 0 };
    mine = rank * 10 + 7;
    MPI_Neighbor_allgatherv_c(&mine, 1, MPI_INT, two, cnt, dis, MPI_INT, ring);
    CHECK(two[1] == left * 10 + 7 && two[0] == right * 10 + 7, "Neighbor_allgatherv_c %d %d",
          two[0], two[1]);
    MPI_Neighbor_alltoall_init_c(to, 1, MPI_INT, from, 1, MPI_INT, ring, MPI_INFO_NULL, &r[0]);
    for (int it = 0; it < ROUNDS; it++) {
        to[0] = rank * 100 + it;
        to[1] = rank * 100 + 50 + it;
        MPI_Start(&r[0]);
        MPI_Wait(&r[0], MPI_STATUS_IGNORE);
        CHECK(from[0] == left * 100 + 50 + it && from[1] == right * 100 + it,
              "round %d Neighbor_alltoall_init_c %d %d", it, from[0], from[1]);
    }
    MPI_Request_free(&r[0]);
    MPI_Comm_free(&ring);
}

/* Generalized requests: callbacks as MPI 4.1 §13.2 says, alone and among other requests. */
struct greq_state {
    int queried, freed, cancelled, fail;
};

static int greq_query(void *extra, MPI_Status *status)
{
    struct greq_state *g = extra;
    g->queried++;
    status->MPI_SOURCE = 7;
    status->MPI_TAG = 8;
    MPI_Status_set_cancelled(status, 0);
    MPI_Status_set_elements(status, MPI_INT, 3);
    return g->fail;
}

static int greq_free(void *extra)
{
    ((struct greq_state *) extra)->freed++;
    return MPI_SUCCESS;
}

static int greq_cancel(void *extra, int complete)
{
    ((struct greq_state *) extra)->cancelled += complete ? 100 : 1;
    return MPI_SUCCESS;
}

static void generalized(int rank, int size)
{
    struct greq_state g = { 0, 0, 0, MPI_SUCCESS };
    MPI_Request r[2];
    MPI_Status st[2];
    int flag = 1, count = -1, x = rank, y = -1;
    MPI_Grequest_start(greq_query, greq_free, greq_cancel, &g, &r[0]);
    MPI_Test(&r[0], &flag, &st[0]);
    CHECK(!flag && g.queried == 0, "an incomplete generalized request tested complete");
    MPI_Cancel(&r[0]);
    CHECK(g.cancelled == 1, "cancel callback: %d", g.cancelled);
    MPI_Grequest_complete(r[0]);
    MPI_Request_get_status(r[0], &flag, &st[0]);
    CHECK(flag && g.queried == 1 && g.freed == 0, "get_status: flag %d queried %d freed %d", flag,
          g.queried, g.freed);
    MPI_Wait(&r[0], &st[0]);
    MPI_Get_count(&st[0], MPI_INT, &count);
    CHECK(r[0] == MPI_REQUEST_NULL && g.queried == 2 && g.freed == 1, "wait: queried %d freed %d",
          g.queried, g.freed);
    CHECK(st[0].MPI_SOURCE == 7 && st[0].MPI_TAG == 8 && count == 3, "status %d %d %d",
          st[0].MPI_SOURCE, st[0].MPI_TAG, count);

    /* in a Waitall with a message exchange */
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    MPI_Irecv(&y, 1, MPI_INT, left, 21, MPI_COMM_WORLD, &r[1]);
    MPI_Grequest_start(greq_query, greq_free, greq_cancel, &g, &r[0]);
    MPI_Send(&x, 1, MPI_INT, right, 21, MPI_COMM_WORLD);
    MPI_Grequest_complete(r[0]);
    MPI_Waitall(2, r, st);
    CHECK(y == left && g.queried == 3 && g.freed == 2 && st[0].MPI_TAG == 8,
          "waitall: y %d queried %d freed %d tag %d", y, g.queried, g.freed, st[0].MPI_TAG);

    /* freed before it completes: the free callback runs once it is complete too (§13.2: in
     * whichever of MPI_Request_free and MPI_Grequest_complete comes last; MPICH 4.0.2 runs it
     * in MPI_Request_free, so only the end is checked) */
    MPI_Request keep;
    MPI_Grequest_start(greq_query, greq_free, greq_cancel, &g, &keep);
    r[0] = keep;
    MPI_Request_free(&r[0]);
    MPI_Grequest_complete(keep);
    CHECK(g.freed == 3 && g.queried == 3, "free after completion: freed %d queried %d", g.freed,
          g.queried);

    /* the query callback's error is the request's */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    g.fail = MPI_ERR_OTHER;
    MPI_Grequest_start(greq_query, greq_free, greq_cancel, &g, &r[0]);
    MPI_Grequest_complete(r[0]);
    int rc = MPI_Wait(&r[0], &st[0]);
    CHECK_CLASS(rc, MPI_ERR_OTHER, "wait on a generalized request whose query fails");
    CHECK(g.freed == 4, "freed %d", g.freed);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
}

static void large_counts(int rank, int size)
{
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    int sbuf[N], rbuf[N];
    MPI_Status st;
    MPI_Count c = -1;
    for (int i = 0; i < N; i++)
        sbuf[i] = rank * 10 + i;
    MPI_Sendrecv_c(sbuf, N, MPI_INT, right, 3, rbuf, N, MPI_INT, left, 3, MPI_COMM_WORLD, &st);
    MPI_Get_count_c(&st, MPI_INT, &c);
    CHECK(c == N, "Get_count_c %lld", (long long) c);
    MPI_Get_elements_c(&st, MPI_SHORT, &c);
    CHECK(c == (MPI_Count) (N * sizeof(int) / sizeof(short)), "Get_elements_c %lld", (long long) c);
    for (int i = 0; i < N; i++)
        CHECK(rbuf[i] == left * 10 + i, "Sendrecv_c[%d] = %d", i, rbuf[i]);

    MPI_Request r[2];
    MPI_Irecv_c(rbuf, N, MPI_INT, left, 4, MPI_COMM_WORLD, &r[0]);
    MPI_Isend_c(sbuf, N - 1, MPI_INT, right, 4, MPI_COMM_WORLD, &r[1]);
    MPI_Waitall(2, r, MPI_STATUSES_IGNORE);
    CHECK(rbuf[N - 2] == left * 10 + N - 2, "Isend_c/Irecv_c");
    if (rank == 0)
        MPI_Ssend_c(sbuf, 2, MPI_INT, right, 8, MPI_COMM_WORLD);
    if (rank == 1 % size) {
        MPI_Recv_c(rbuf, N, MPI_INT, 0, 8, MPI_COMM_WORLD, &st);
        MPI_Get_count_c(&st, MPI_INT, &c);
        CHECK(c == 2 && rbuf[1] == 1, "Ssend_c/Recv_c count %lld", (long long) c);
    }

    /* buffered send, nonblocking send-receive and local reduction with MPI_Count */
    char bbuf[256 + MPI_BSEND_OVERHEAD];
    void *got_buf = NULL;
    MPI_Count bsize = -1;
    MPI_Buffer_attach_c(bbuf, sizeof bbuf);
    MPI_Bsend_c(sbuf, 1, MPI_INT, right, 12, MPI_COMM_WORLD);
    MPI_Isendrecv_c(sbuf, 1, MPI_INT, left, 13, rbuf + 1, 1, MPI_INT, right, 13, MPI_COMM_WORLD,
                    &r[0]);
    MPI_Recv_c(rbuf, 1, MPI_INT, left, 12, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Wait(&r[0], MPI_STATUS_IGNORE);
    MPI_Buffer_detach_c(&got_buf, &bsize);
    CHECK(got_buf == bbuf && bsize == (MPI_Count) sizeof bbuf, "Buffer_detach_c %lld",
          (long long) bsize);
    CHECK(rbuf[0] == left * 10 && rbuf[1] == right * 10, "Bsend_c/Isendrecv_c %d %d", rbuf[0],
          rbuf[1]);
    int loc[3] = { 1, 2, 3 }, acc[3] = { 10, 20, 30 };
    MPI_Reduce_local_c(loc, acc, 3, MPI_INT, MPI_SUM);
    CHECK(acc[0] == 11 && acc[2] == 33, "Reduce_local_c %d %d", acc[0], acc[2]);

    /* collectives */
    int v = rank + 1, sum = -1;
    MPI_Allreduce_c(&v, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    CHECK(sum == size * (size + 1) / 2, "Allreduce_c %d", sum);
    int all[8] = { 0 };
    MPI_Allgather_c(&v, 1, MPI_INT, all, 1, MPI_INT, MPI_COMM_WORLD);
    for (int i = 0; i < size; i++)
        CHECK(all[i] == i + 1, "Allgather_c[%d] = %d", i, all[i]);
    MPI_Count counts[8];
    MPI_Aint displs[8];
    int g[16];
    for (int i = 0; i < size; i++) {
        counts[i] = 1;
        displs[i] = 2 * i;
        g[2 * i] = g[2 * i + 1] = -1;
    }
    MPI_Request q;
    MPI_Iallgatherv_c(&v, 1, MPI_INT, g, counts, displs, MPI_INT, MPI_COMM_WORLD, &q);
    MPI_Wait(&q, MPI_STATUS_IGNORE);
    for (int i = 0; i < size; i++)
        CHECK(g[2 * i] == i + 1 && g[2 * i + 1] == -1, "Iallgatherv_c[%d] = %d", i, g[2 * i]);
    int b = rank == 0 ? 99 : -1;
    MPI_Bcast_c(&b, 1, MPI_INT, 0, MPI_COMM_WORLD);
    CHECK(b == 99, "Bcast_c %d", b);

    /* persistent collectives with MPI_Count counts */
    MPI_Request pr[2];
    for (int i = 0; i < size; i++) {
        counts[i] = i % 2 + 1;
        displs[i] = 2 * (size - 1 - i);
    }
    int mine[2];
    MPI_Bcast_init_c(&b, 1, MPI_INT, size - 1, MPI_COMM_WORLD, MPI_INFO_NULL, &pr[0]);
    MPI_Allgatherv_init_c(mine, rank % 2 + 1, MPI_INT, g, counts, displs, MPI_INT, MPI_COMM_WORLD,
                          MPI_INFO_NULL, &pr[1]);
    for (int it = 0; it < 3; it++) {
        b = rank == size - 1 ? 1000 + it : -1;
        mine[0] = rank + it;
        mine[1] = -rank - it;
        MPI_Startall(2, pr);
        MPI_Waitall(2, pr, MPI_STATUSES_IGNORE);
        CHECK(b == 1000 + it, "round %d Bcast_init_c %d", it, b);
        for (int i = 0; i < size; i++) {
            CHECK(g[displs[i]] == i + it, "round %d Allgatherv_init_c from %d: %d", it, i,
                  g[displs[i]]);
            if (counts[i] == 2)
                CHECK(g[displs[i] + 1] == -i - it, "round %d Allgatherv_init_c from %d[1]", it, i);
        }
    }
    MPI_Request_free(&pr[0]);
    MPI_Request_free(&pr[1]);

    /* datatypes and packing */
    MPI_Datatype vec, big;
    MPI_Type_vector_c(3, 2, 4, MPI_INT, &vec);
    MPI_Type_commit(&vec);
    MPI_Count size_c = -1, lb = -1, extent = -1;
    MPI_Type_size_c(vec, &size_c);
    MPI_Type_get_extent_c(vec, &lb, &extent);
    CHECK(size_c == 6 * (MPI_Count) sizeof(int) && lb == 0 &&
              extent == 10 * (MPI_Count) sizeof(int),
          "vector_c size %lld lb %lld extent %lld", (long long) size_c, (long long) lb,
          (long long) extent);
    int src[12], dst[12];
    char packed[64];
    MPI_Count pos = 0, need = -1;
    for (int i = 0; i < 12; i++) {
        src[i] = i;
        dst[i] = -1;
    }
    MPI_Pack_size_c(1, vec, MPI_COMM_WORLD, &need);
    CHECK(need >= 6 * (MPI_Count) sizeof(int), "Pack_size_c %lld", (long long) need);
    MPI_Pack_c(src, 1, vec, packed, sizeof packed, &pos, MPI_COMM_WORLD);
    CHECK(pos == 6 * (MPI_Count) sizeof(int), "Pack_c position %lld", (long long) pos);
    pos = 0;
    MPI_Unpack_c(packed, sizeof packed, &pos, dst, 1, vec, MPI_COMM_WORLD);
    CHECK(dst[0] == 0 && dst[1] == 1 && dst[2] == -1 && dst[4] == 4 && dst[9] == 9,
          "Unpack_c %d %d %d %d %d", dst[0], dst[1], dst[2], dst[4], dst[9]);
    /* A type of more than 2^32 bytes describes itself with MPI_Count. */
    MPI_Type_contiguous_c((MPI_Count) 3 << 31, MPI_CHAR, &big);
    MPI_Type_size_c(big, &size_c);
    MPI_Type_get_true_extent_c(big, &lb, &extent);
    CHECK(size_c == (MPI_Count) 3 << 31 && lb == 0 && extent == size_c,
          "contiguous_c size %lld extent %lld", (long long) size_c, (long long) extent);
    int isize = 0;
    MPI_Type_size(big, &isize);
    CHECK(isize == MPI_UNDEFINED, "MPI_Type_size of a 6 GiB type gave %d", isize);
    MPI_Type_free(&big);
    MPI_Type_free(&vec);

    /* A negative count is MPI_ERR_COUNT everywhere, and in ferry so is a count whose bytes do
     * not fit the address space (counts past INT_MAX that do fit move: bigcount.c). */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int rc = MPI_Recv_c(rbuf, -1, MPI_INT, left, 11, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    CHECK_CLASS(rc, MPI_ERR_COUNT, "MPI_Recv_c of a negative count");
    rc = MPI_Send_c(sbuf, -5, MPI_INT, right, 11, MPI_COMM_WORLD);
    CHECK_CLASS(rc, MPI_ERR_COUNT, "MPI_Send_c of a negative count");
#ifdef FERRY_MPI_H
    MPI_Count huge = (MPI_Count) 1 << 62; /* 2^64 bytes of ints */
    rc = MPI_Send_c(sbuf, huge, MPI_INT, right, 11, MPI_COMM_WORLD);
    CHECK_CLASS(rc, MPI_ERR_COUNT, "MPI_Send_c of 2^62 ints");
    rc = MPI_Isend_c(sbuf, INT64_MAX, MPI_SHORT, right, 11, MPI_COMM_WORLD, &q);
    CHECK_CLASS(rc, MPI_ERR_COUNT, "MPI_Isend_c of INT64_MAX shorts");
    rc = MPI_Send_c(sbuf, INT64_MAX, MPI_INT, MPI_PROC_NULL, 11, MPI_COMM_WORLD);
    CHECK_CLASS(rc, MPI_ERR_COUNT, "MPI_Send_c of INT64_MAX ints");
    rc = MPI_Bcast_c(&b, huge, MPI_INT, 0, MPI_COMM_WORLD);
    CHECK_CLASS(rc, MPI_ERR_COUNT, "MPI_Bcast_c of 2^62 ints");
    for (int i = 0; i < size; i++)
        counts[i] = i == 0 ? huge : 1;
    rc = MPI_Allgatherv_c(&v, 1, MPI_INT, g, counts, displs, MPI_INT, MPI_COMM_WORLD);
    CHECK_CLASS(rc, MPI_ERR_COUNT, "MPI_Allgatherv_c with a count of 2^62");
#endif
    /* Nothing of the refused sends arrives: the next message on tag 11 is this one. */
    MPI_Sendrecv_c(sbuf, 1, MPI_INT, right, 11, rbuf, N, MPI_INT, left, 11, MPI_COMM_WORLD, &st);
    MPI_Get_count_c(&st, MPI_INT, &c);
    CHECK(c == 1, "after the refused sends, a message of %lld ints arrived", (long long) c);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
}

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size < 2 || size > 8) {
        if (rank == 0)
            fprintf(stderr, "needs 2 to 8 processes\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    persistent_collectives(rank, size);
    freed_type_and_op(rank, size);
    startall_mix(rank, size);
    persistent_inter(rank, size);
    persistent_neighbours(rank, size);
    generalized(rank, size);
    large_counts(rank, size);
    return finish();
}
