/* Point-to-point, one-sided, request and local calls check their arguments before they touch
 * memory, as the collectives do (argcheck.c): under MPI_ERRORS_RETURN a NULL buffer with a
 * nonzero count, a negative count, invalid handles, ranks and tags each return their class,
 * a call that fails leaves nothing behind (no receive posted by a failed MPI_Sendrecv takes a
 * later message), and a request handle freed or completed before is an invalid request
 * whether the send finished at once (shared memory) or not (TCP). Two processes. */
#include "mtest.h"
#include <stdint.h>

#define BADT ((MPI_Datatype)(intptr_t)0x5a5a50)
#define BADOP ((MPI_Op)(intptr_t)0x5a5a60)
#define BADCOMM ((MPI_Comm)(intptr_t)0x5a5a70)

#define E(cls, call)                                                                       \
    do {                                                                                   \
        if (getenv("ARGCHECK_TRACE"))                                                      \
            fprintf(stderr, "[%d] %s\n", mt_rank(), #call);                                \
        CHECK_CLASS((call), cls, #call);                                                   \
    } while (0)

/* A nonblocking call: the error class `cls`; a request it made anyway is completed. */
#define EI(cls, call)                                                                      \
    do {                                                                                   \
        MPI_Request req_ = MPI_REQUEST_NULL;                                               \
        MPI_Request *r = &req_;                                                            \
        int rc_ = (call);                                                                  \
        CHECK_CLASS(rc_, cls, #call);                                                      \
        if (rc_ == MPI_SUCCESS && req_ != MPI_REQUEST_NULL)                                \
            MPI_Wait(&req_, MPI_STATUS_IGNORE);                                            \
    } while (0)

/* A persistent request: init reports the error; a request made anyway is started and freed. */
#define EP(cls, call)                                                                      \
    do {                                                                                   \
        MPI_Request req_ = MPI_REQUEST_NULL;                                               \
        MPI_Request *r = &req_;                                                            \
        int rc_ = (call);                                                                  \
        CHECK_CLASS(rc_, cls, #call);                                                      \
        if (rc_ == MPI_SUCCESS && req_ != MPI_REQUEST_NULL) {                              \
            if (MPI_Start(&req_) == MPI_SUCCESS)                                           \
                MPI_Wait(&req_, MPI_STATUS_IGNORE);                                        \
            MPI_Request_free(&req_);                                                       \
        }                                                                                  \
    } while (0)

static int a[16], b[16];

static void point_to_point(int rank, int size)
{
    int peer = (rank + 1) % size;
    MPI_Status st;
    E(MPI_ERR_BUFFER, MPI_Send(NULL, 1, MPI_INT, peer, 0, MPI_COMM_WORLD));
    E(MPI_ERR_BUFFER, MPI_Ssend(NULL, 1, MPI_INT, peer, 0, MPI_COMM_WORLD));
    E(MPI_ERR_BUFFER, MPI_Rsend(NULL, 1, MPI_INT, peer, 0, MPI_COMM_WORLD));
    E(MPI_ERR_BUFFER, MPI_Recv(NULL, 1, MPI_INT, peer, 0, MPI_COMM_WORLD, &st));
    E(MPI_ERR_BUFFER, MPI_Send(MPI_IN_PLACE, 1, MPI_INT, peer, 0, MPI_COMM_WORLD));
    E(MPI_ERR_COUNT, MPI_Send(a, -1, MPI_INT, peer, 0, MPI_COMM_WORLD));
    E(MPI_ERR_COUNT, MPI_Recv(a, -1, MPI_INT, peer, 0, MPI_COMM_WORLD, &st));
    E(MPI_ERR_TYPE, MPI_Send(a, 1, BADT, peer, 0, MPI_COMM_WORLD));
    E(MPI_ERR_TYPE, MPI_Recv(a, 1, MPI_DATATYPE_NULL, peer, 0, MPI_COMM_WORLD, &st));
    E(MPI_ERR_RANK, MPI_Send(a, 1, MPI_INT, size, 0, MPI_COMM_WORLD));
    E(MPI_ERR_RANK, MPI_Send(a, 1, MPI_INT, -5, 0, MPI_COMM_WORLD));
    E(MPI_ERR_RANK, MPI_Recv(a, 1, MPI_INT, size + 3, 0, MPI_COMM_WORLD, &st));
    E(MPI_ERR_TAG, MPI_Send(a, 1, MPI_INT, peer, -3, MPI_COMM_WORLD));
    E(MPI_ERR_TAG, MPI_Recv(a, 1, MPI_INT, peer, -3, MPI_COMM_WORLD, &st));
    E(MPI_ERR_COMM, MPI_Send(a, 1, MPI_INT, peer, 0, BADCOMM));
    E(MPI_ERR_COMM, MPI_Recv(a, 1, MPI_INT, peer, 0, MPI_COMM_NULL, &st));
    EI(MPI_ERR_BUFFER, MPI_Isend(NULL, 1, MPI_INT, peer, 0, MPI_COMM_WORLD, r));
    EI(MPI_ERR_BUFFER, MPI_Irecv(NULL, 1, MPI_INT, peer, 0, MPI_COMM_WORLD, r));
    EI(MPI_ERR_COUNT, MPI_Issend(a, -2, MPI_INT, peer, 0, MPI_COMM_WORLD, r));
    EI(MPI_ERR_RANK, MPI_Irecv(a, 1, MPI_INT, 99, 0, MPI_COMM_WORLD, r));
    EP(MPI_ERR_BUFFER, MPI_Send_init(NULL, 1, MPI_INT, peer, 0, MPI_COMM_WORLD, r));
    EP(MPI_ERR_BUFFER, MPI_Recv_init(NULL, 1, MPI_INT, peer, 0, MPI_COMM_WORLD, r));
    E(MPI_ERR_RANK, MPI_Probe(size, 0, MPI_COMM_WORLD, &st));
    /* Sendrecv whose send is wrong: no receive may stay posted */
    E(MPI_ERR_BUFFER, MPI_Sendrecv(NULL, 1, MPI_INT, peer, 5, b, 1, MPI_INT, peer, 5,
                                   MPI_COMM_WORLD, &st));
    E(MPI_ERR_RANK, MPI_Sendrecv(a, 1, MPI_INT, size, 5, b, 1, MPI_INT, peer, 5,
                                 MPI_COMM_WORLD, &st));
    E(MPI_ERR_BUFFER, MPI_Sendrecv_replace(NULL, 1, MPI_INT, peer, 5, peer, 5, MPI_COMM_WORLD,
                                           &st));
    E(MPI_ERR_RANK, MPI_Sendrecv_replace(a, 1, MPI_INT, peer, 5, size, 5, MPI_COMM_WORLD, &st));
    a[0] = 100 + rank;
    b[0] = -1;
    CHECK_OK(MPI_Sendrecv(a, 1, MPI_INT, peer, 5, b, 1, MPI_INT, peer, 5, MPI_COMM_WORLD, &st),
             "Sendrecv after the errors");
    CHECK(b[0] == 100 + peer, "Sendrecv after the errors got %d", b[0]);
    /* legal: NULL with count 0, MPI_PROC_NULL */
    CHECK_OK(MPI_Sendrecv(NULL, 0, MPI_INT, peer, 6, NULL, 0, MPI_INT, peer, 6, MPI_COMM_WORLD,
                          &st),
             "Sendrecv of nothing");
    CHECK_OK(MPI_Send(a, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD), "Send to MPI_PROC_NULL");
}

static void requests(int rank, int size)
{
    int peer = (rank + 1) % size;
    MPI_Request r, copy;
    /* a small send, done when it starts on shared memory */
    a[0] = rank;
    MPI_Isend(a, 1, MPI_INT, peer, 9, MPI_COMM_WORLD, &r);
    copy = r;
    CHECK_OK(MPI_Request_free(&r), "Request_free");
    CHECK(r == MPI_REQUEST_NULL, "Request_free did not set MPI_REQUEST_NULL");
    E(MPI_ERR_REQUEST, MPI_Request_free(&copy));
    E(MPI_ERR_REQUEST, MPI_Request_free(&r));
    MPI_Recv(b, 1, MPI_INT, peer, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    CHECK(b[0] == peer, "message of the freed send: %d", b[0]);
    /* a completed request's copy */
    MPI_Isend(a, 1, MPI_INT, peer, 10, MPI_COMM_WORLD, &r);
    copy = r;
    MPI_Recv(b, 1, MPI_INT, peer, 10, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    CHECK_OK(MPI_Wait(&r, MPI_STATUS_IGNORE), "Wait");
    E(MPI_ERR_REQUEST, MPI_Request_free(&copy));
    /* a receive freed while it waits for its message, then its copy */
    MPI_Irecv(b, 1, MPI_INT, peer, 11, MPI_COMM_WORLD, &r);
    copy = r;
    CHECK_OK(MPI_Request_free(&r), "Request_free of a pending receive");
    E(MPI_ERR_REQUEST, MPI_Request_free(&copy));
    MPI_Send(a, 1, MPI_INT, peer, 11, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
}

static void one_sided(int rank, int size)
{
    int peer = (rank + 1) % size, win_mem[8] = {0}, got = 0, old = 0;
    MPI_Win win;
    MPI_Win_create(win_mem, sizeof win_mem, sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN);
    MPI_Win_fence(0, win);
    E(MPI_ERR_BUFFER, MPI_Put(NULL, 1, MPI_INT, peer, 0, 1, MPI_INT, win));
    E(MPI_ERR_BUFFER, MPI_Get(NULL, 1, MPI_INT, peer, 0, 1, MPI_INT, win));
    E(MPI_ERR_BUFFER, MPI_Accumulate(NULL, 1, MPI_INT, peer, 0, 1, MPI_INT, MPI_SUM, win));
    E(MPI_ERR_BUFFER, MPI_Get_accumulate(a, 1, MPI_INT, NULL, 1, MPI_INT, peer, 0, 1, MPI_INT,
                                         MPI_SUM, win));
    E(MPI_ERR_BUFFER, MPI_Fetch_and_op(a, NULL, MPI_INT, peer, 0, MPI_SUM, win));
    E(MPI_ERR_BUFFER, MPI_Compare_and_swap(NULL, a, b, MPI_INT, peer, 0, win));
    E(MPI_ERR_BUFFER, MPI_Compare_and_swap(a, a, NULL, MPI_INT, peer, 0, win));
    E(MPI_ERR_COUNT, MPI_Put(a, -1, MPI_INT, peer, 0, 1, MPI_INT, win));
    E(MPI_ERR_COUNT, MPI_Get(a, 1, MPI_INT, peer, 0, -1, MPI_INT, win));
    E(MPI_ERR_TYPE, MPI_Put(a, 1, BADT, peer, 0, 1, MPI_INT, win));
    E(MPI_ERR_RANK, MPI_Put(a, 1, MPI_INT, size, 0, 1, MPI_INT, win));
    E(MPI_ERR_OP, MPI_Accumulate(a, 1, MPI_INT, peer, 0, 1, MPI_INT, BADOP, win));
    E(MPI_ERR_WIN, MPI_Put(a, 1, MPI_INT, peer, 0, 1, MPI_INT, MPI_WIN_NULL));
    {
        MPI_Request req = MPI_REQUEST_NULL;
        int rc = MPI_Rput(NULL, 1, MPI_INT, peer, 0, 1, MPI_INT, win, &req);
        CHECK_CLASS(rc, MPI_ERR_BUFFER, "Rput NULL");
        if (rc == MPI_SUCCESS)
            MPI_Wait(&req, MPI_STATUS_IGNORE);
    }
    /* the epoch still works */
    a[0] = 7 + rank;
    CHECK_OK(MPI_Put(a, 1, MPI_INT, peer, 2, 1, MPI_INT, win), "Put after the errors");
    MPI_Win_fence(0, win);
    CHECK(win_mem[2] == 7 + peer, "window after the put: %d", win_mem[2]);
    CHECK_OK(MPI_Fetch_and_op(a, &got, MPI_INT, peer, 2, MPI_NO_OP, win), "Fetch_and_op");
    CHECK_OK(MPI_Compare_and_swap(a, &old, &got, MPI_INT, MPI_PROC_NULL, 0, win),
             "Compare_and_swap with MPI_PROC_NULL");
    MPI_Win_fence(0, win);
    MPI_Win_free(&win);
}

static void local_calls(void)
{
    char packed[64];
    int pos = 0;
    MPI_Datatype t;
    E(MPI_ERR_BUFFER, MPI_Reduce_local(NULL, b, 1, MPI_INT, MPI_SUM));
    E(MPI_ERR_BUFFER, MPI_Reduce_local(a, NULL, 1, MPI_INT, MPI_SUM));
    E(MPI_ERR_COUNT, MPI_Reduce_local(a, b, -1, MPI_INT, MPI_SUM));
    E(MPI_ERR_OP, MPI_Reduce_local(a, b, 1, MPI_INT, BADOP));
    E(MPI_ERR_TYPE, MPI_Reduce_local(a, b, 1, BADT, MPI_SUM));
    CHECK_OK(MPI_Reduce_local(NULL, NULL, 0, MPI_INT, MPI_SUM), "Reduce_local of nothing");
    E(MPI_ERR_BUFFER, MPI_Pack(NULL, 1, MPI_INT, packed, sizeof packed, &pos, MPI_COMM_WORLD));
    pos = 0;
    E(MPI_ERR_COUNT, MPI_Pack(a, -1, MPI_INT, packed, sizeof packed, &pos, MPI_COMM_WORLD));
    pos = 0;
    MPI_Pack(a, 1, MPI_INT, packed, sizeof packed, &pos, MPI_COMM_WORLD);
    pos = 0;
    E(MPI_ERR_BUFFER, MPI_Unpack(packed, sizeof packed, &pos, NULL, 1, MPI_INT, MPI_COMM_WORLD));
    E(MPI_ERR_COUNT, MPI_Type_contiguous(-1, MPI_INT, &t));
    E(MPI_ERR_TYPE, MPI_Type_contiguous(2, BADT, &t));
    E(MPI_ERR_COMM, MPI_Comm_size(BADCOMM, &pos));
}

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
    point_to_point(rank, size);
    requests(rank, size);
    one_sided(rank, size);
    local_calls();
    int v = 1, w = 0;
    int rc = MPI_Allreduce(&v, &w, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    CHECK(rc == MPI_SUCCESS && w == size, "Allreduce after the errors: %d", w);
    return finish();
}
