/* Every collective checks its arguments before it touches memory (MPI 4.1 §2.8, §8.3):
 * under MPI_ERRORS_RETURN a NULL buffer with a nonzero count, a negative count, an invalid
 * datatype, operation or communicator handle and an out-of-range root each return their
 * error class, in the blocking, nonblocking (I*), persistent (*_init) and neighbourhood forms,
 * on intra- and intercommunicators; the odd but legal arguments (NULL with count 0,
 * MPI_IN_PLACE, zero-size datatypes, MPI_ROOT and MPI_PROC_NULL) still work, and the job
 * then finishes normally. Every case is wrong on every process, so that no process waits in a
 * collective the others left. Two processes. */
#include "mtest.h"
#include <stdint.h>

#define BADT ((MPI_Datatype)(intptr_t)0x5a5a50)
#define BADOP ((MPI_Op)(intptr_t)0x5a5a60)
#define BADCOMM ((MPI_Comm)(intptr_t)0x5a5a70)

static int a[64], b[64];
static int cnt[2] = {1, 1}, dis[2] = {0, 1}, ncnt[2] = {-1, -1};
static MPI_Aint ndis[2] = {0, 4 * (MPI_Aint)sizeof(int)};
static MPI_Datatype ty[2] = {MPI_INT, MPI_INT}, badty[2] = {BADT, BADT};
static int wdis[2] = {0, (int)sizeof(int)};

/* ARGCHECK_TRACE=1 names each call before it is made (to find one that crashes). */
#define TRACE(text)                                                                        \
    do {                                                                                   \
        if (getenv("ARGCHECK_TRACE"))                                                      \
            fprintf(stderr, "[%d] %s\n", mt_rank(), text);                                 \
    } while (0)

/* A blocking call: the error class `cls`. */
#define E(cls, call)                                                                       \
    do {                                                                                   \
        TRACE(#call);                                                                      \
        CHECK_CLASS((call), cls, #call);                                                   \
    } while (0)

/* A nonblocking call: the error class `cls`; a request it made anyway is completed. */
#define EI(cls, call)                                                                      \
    do {                                                                                   \
        MPI_Request req_ = MPI_REQUEST_NULL;                                               \
        MPI_Request *r = &req_;                                                            \
        TRACE(#call);                                                                      \
        int rc_ = (call);                                                                  \
        CHECK_CLASS(rc_, cls, #call);                                                      \
        if (rc_ == MPI_SUCCESS && req_ != MPI_REQUEST_NULL)                                \
            MPI_Wait(&req_, MPI_STATUS_IGNORE);                                            \
    } while (0)

/* A persistent collective: init reports the error (as MPICH's does); a request made anyway
 * is started once and freed. */
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

/* A call that must succeed. */
#define OK(call)                                                                           \
    do {                                                                                   \
        TRACE(#call);                                                                      \
        CHECK_OK((call), #call);                                                           \
    } while (0)
#define OKI(call)                                                                          \
    do {                                                                                   \
        MPI_Request req_ = MPI_REQUEST_NULL;                                               \
        MPI_Request *r = &req_;                                                            \
        TRACE(#call);                                                                      \
        int rc_ = (call);                                                                  \
        CHECK_OK(rc_, #call);                                                              \
        if (rc_ == MPI_SUCCESS)                                                            \
            MPI_Wait(&req_, MPI_STATUS_IGNORE);                                            \
    } while (0)

/* The same error in the three forms of a collective X (X, IX, X_init), given as the
 * argument list without the communicator. */
#define ALL3(cls, X, IX, XI, ...)                                                          \
    do {                                                                                   \
        E(cls, X(__VA_ARGS__, MPI_COMM_WORLD));                                            \
        EI(cls, IX(__VA_ARGS__, MPI_COMM_WORLD, r));                                       \
        EP(cls, XI(__VA_ARGS__, MPI_COMM_WORLD, MPI_INFO_NULL, r));                        \
    } while (0)

#define BCAST(cls, ...) ALL3(cls, MPI_Bcast, MPI_Ibcast, MPI_Bcast_init, __VA_ARGS__)
#define REDUCE(cls, ...) ALL3(cls, MPI_Reduce, MPI_Ireduce, MPI_Reduce_init, __VA_ARGS__)
#define ALLRED(cls, ...) ALL3(cls, MPI_Allreduce, MPI_Iallreduce, MPI_Allreduce_init, __VA_ARGS__)
#define GATHER(cls, ...) ALL3(cls, MPI_Gather, MPI_Igather, MPI_Gather_init, __VA_ARGS__)
#define GATHERV(cls, ...) ALL3(cls, MPI_Gatherv, MPI_Igatherv, MPI_Gatherv_init, __VA_ARGS__)
#define SCATTER(cls, ...) ALL3(cls, MPI_Scatter, MPI_Iscatter, MPI_Scatter_init, __VA_ARGS__)
#define SCATTERV(cls, ...) ALL3(cls, MPI_Scatterv, MPI_Iscatterv, MPI_Scatterv_init, __VA_ARGS__)
#define ALLGATHER(cls, ...)                                                                \
    ALL3(cls, MPI_Allgather, MPI_Iallgather, MPI_Allgather_init, __VA_ARGS__)
#define ALLGATHERV(cls, ...)                                                               \
    ALL3(cls, MPI_Allgatherv, MPI_Iallgatherv, MPI_Allgatherv_init, __VA_ARGS__)
#define ALLTOALL(cls, ...) ALL3(cls, MPI_Alltoall, MPI_Ialltoall, MPI_Alltoall_init, __VA_ARGS__)
#define ALLTOALLV(cls, ...)                                                                \
    ALL3(cls, MPI_Alltoallv, MPI_Ialltoallv, MPI_Alltoallv_init, __VA_ARGS__)
#define ALLTOALLW(cls, ...)                                                                \
    ALL3(cls, MPI_Alltoallw, MPI_Ialltoallw, MPI_Alltoallw_init, __VA_ARGS__)
#define REDSCAT(cls, ...)                                                                  \
    ALL3(cls, MPI_Reduce_scatter, MPI_Ireduce_scatter, MPI_Reduce_scatter_init, __VA_ARGS__)
#define REDSCATB(cls, ...)                                                                 \
    ALL3(cls, MPI_Reduce_scatter_block, MPI_Ireduce_scatter_block,                        \
         MPI_Reduce_scatter_block_init, __VA_ARGS__)
#define SCAN(cls, ...) ALL3(cls, MPI_Scan, MPI_Iscan, MPI_Scan_init, __VA_ARGS__)
#define EXSCAN(cls, ...) ALL3(cls, MPI_Exscan, MPI_Iexscan, MPI_Exscan_init, __VA_ARGS__)

/* Every kind of error in every collective of MPI_COMM_WORLD. */
static void intracommunicator(int size)
{
    /* NULL buffers with a nonzero count */
    BCAST(MPI_ERR_BUFFER, NULL, 1, MPI_INT, 0);
    REDUCE(MPI_ERR_BUFFER, NULL, b, 1, MPI_INT, MPI_SUM, 0);
    ALLRED(MPI_ERR_BUFFER, NULL, b, 1, MPI_INT, MPI_SUM);
    ALLRED(MPI_ERR_BUFFER, a, NULL, 1, MPI_INT, MPI_SUM);
    ALLRED(MPI_ERR_BUFFER, MPI_IN_PLACE, NULL, 1, MPI_INT, MPI_SUM);
    GATHER(MPI_ERR_BUFFER, NULL, 1, MPI_INT, b, 1, MPI_INT, 0);
    GATHERV(MPI_ERR_BUFFER, NULL, 1, MPI_INT, b, cnt, dis, MPI_INT, 0);
    SCATTER(MPI_ERR_BUFFER, a, 1, MPI_INT, NULL, 1, MPI_INT, 0);
    SCATTERV(MPI_ERR_BUFFER, a, cnt, dis, MPI_INT, NULL, 1, MPI_INT, 0);
    ALLGATHER(MPI_ERR_BUFFER, NULL, 1, MPI_INT, b, 1, MPI_INT);
    ALLGATHER(MPI_ERR_BUFFER, a, 1, MPI_INT, NULL, 1, MPI_INT);
    ALLGATHERV(MPI_ERR_BUFFER, NULL, 1, MPI_INT, b, cnt, dis, MPI_INT);
    ALLGATHERV(MPI_ERR_BUFFER, a, 1, MPI_INT, NULL, cnt, dis, MPI_INT);
    ALLTOALL(MPI_ERR_BUFFER, NULL, 1, MPI_INT, b, 1, MPI_INT);
    ALLTOALL(MPI_ERR_BUFFER, a, 1, MPI_INT, NULL, 1, MPI_INT);
    ALLTOALLV(MPI_ERR_BUFFER, NULL, cnt, dis, MPI_INT, b, cnt, dis, MPI_INT);
    ALLTOALLV(MPI_ERR_BUFFER, a, cnt, dis, MPI_INT, NULL, cnt, dis, MPI_INT);
    ALLTOALLW(MPI_ERR_BUFFER, NULL, cnt, wdis, ty, b, cnt, wdis, ty);
    ALLTOALLW(MPI_ERR_BUFFER, a, cnt, wdis, ty, NULL, cnt, wdis, ty);
    REDSCAT(MPI_ERR_BUFFER, NULL, b, cnt, MPI_INT, MPI_SUM);
    REDSCAT(MPI_ERR_BUFFER, a, NULL, cnt, MPI_INT, MPI_SUM);
    REDSCATB(MPI_ERR_BUFFER, NULL, b, 1, MPI_INT, MPI_SUM);
    SCAN(MPI_ERR_BUFFER, NULL, b, 1, MPI_INT, MPI_SUM);
    SCAN(MPI_ERR_BUFFER, a, NULL, 1, MPI_INT, MPI_SUM);
    EXSCAN(MPI_ERR_BUFFER, NULL, b, 1, MPI_INT, MPI_SUM);

    /* negative counts */
    BCAST(MPI_ERR_COUNT, a, -1, MPI_INT, 0);
    REDUCE(MPI_ERR_COUNT, a, b, -1, MPI_INT, MPI_SUM, 0);
    ALLRED(MPI_ERR_COUNT, a, b, -1, MPI_INT, MPI_SUM);
    GATHER(MPI_ERR_COUNT, a, -1, MPI_INT, b, -1, MPI_INT, 0);
    GATHERV(MPI_ERR_COUNT, a, -1, MPI_INT, b, ncnt, dis, MPI_INT, 0);
    SCATTER(MPI_ERR_COUNT, a, -1, MPI_INT, b, -1, MPI_INT, 0);
    SCATTERV(MPI_ERR_COUNT, a, ncnt, dis, MPI_INT, b, -1, MPI_INT, 0);
    ALLGATHER(MPI_ERR_COUNT, a, -1, MPI_INT, b, 1, MPI_INT);
    ALLGATHER(MPI_ERR_COUNT, a, 1, MPI_INT, b, -1, MPI_INT);
    ALLGATHERV(MPI_ERR_COUNT, a, 1, MPI_INT, b, ncnt, dis, MPI_INT);
    ALLTOALL(MPI_ERR_COUNT, a, -1, MPI_INT, b, 1, MPI_INT);
    ALLTOALL(MPI_ERR_COUNT, a, 1, MPI_INT, b, -1, MPI_INT);
    ALLTOALLV(MPI_ERR_COUNT, a, ncnt, dis, MPI_INT, b, cnt, dis, MPI_INT);
    ALLTOALLV(MPI_ERR_COUNT, a, cnt, dis, MPI_INT, b, ncnt, dis, MPI_INT);
    ALLTOALLW(MPI_ERR_COUNT, a, ncnt, wdis, ty, b, cnt, wdis, ty);
    REDSCAT(MPI_ERR_COUNT, a, b, ncnt, MPI_INT, MPI_SUM);
    REDSCATB(MPI_ERR_COUNT, a, b, -1, MPI_INT, MPI_SUM);
    SCAN(MPI_ERR_COUNT, a, b, -1, MPI_INT, MPI_SUM);
    EXSCAN(MPI_ERR_COUNT, a, b, -1, MPI_INT, MPI_SUM);

    /* invalid datatypes: MPI_DATATYPE_NULL and a handle that names nothing */
    BCAST(MPI_ERR_TYPE, a, 1, MPI_DATATYPE_NULL, 0);
    BCAST(MPI_ERR_TYPE, a, 1, BADT, 0);
    REDUCE(MPI_ERR_TYPE, a, b, 1, BADT, MPI_SUM, 0);
    ALLRED(MPI_ERR_TYPE, a, b, 1, MPI_DATATYPE_NULL, MPI_SUM);
    ALLRED(MPI_ERR_TYPE, a, b, 1, BADT, MPI_SUM);
    GATHER(MPI_ERR_TYPE, a, 1, BADT, b, 1, BADT, 0);
    GATHERV(MPI_ERR_TYPE, a, 1, BADT, b, cnt, dis, BADT, 0);
    SCATTER(MPI_ERR_TYPE, a, 1, BADT, b, 1, BADT, 0);
    SCATTERV(MPI_ERR_TYPE, a, cnt, dis, BADT, b, 1, BADT, 0);
    ALLGATHER(MPI_ERR_TYPE, a, 1, BADT, b, 1, MPI_INT);
    ALLGATHERV(MPI_ERR_TYPE, a, 1, MPI_INT, b, cnt, dis, BADT);
    ALLTOALL(MPI_ERR_TYPE, a, 1, BADT, b, 1, MPI_INT);
    ALLTOALLV(MPI_ERR_TYPE, a, cnt, dis, MPI_INT, b, cnt, dis, BADT);
    ALLTOALLW(MPI_ERR_TYPE, a, cnt, wdis, badty, b, cnt, wdis, ty);
    REDSCAT(MPI_ERR_TYPE, a, b, cnt, BADT, MPI_SUM);
    REDSCATB(MPI_ERR_TYPE, a, b, 1, BADT, MPI_SUM);
    SCAN(MPI_ERR_TYPE, a, b, 1, BADT, MPI_SUM);
    EXSCAN(MPI_ERR_TYPE, a, b, 1, BADT, MPI_SUM);

    /* invalid operations */
    REDUCE(MPI_ERR_OP, a, b, 1, MPI_INT, MPI_OP_NULL, 0);
    REDUCE(MPI_ERR_OP, a, b, 1, MPI_INT, BADOP, 0);
    ALLRED(MPI_ERR_OP, a, b, 1, MPI_INT, BADOP);
    ALLRED(MPI_ERR_OP, a, b, 1, MPI_FLOAT, MPI_BXOR);
    REDSCAT(MPI_ERR_OP, a, b, cnt, MPI_INT, BADOP);
    REDSCATB(MPI_ERR_OP, a, b, 1, MPI_INT, MPI_OP_NULL);
    SCAN(MPI_ERR_OP, a, b, 1, MPI_INT, BADOP);
    EXSCAN(MPI_ERR_OP, a, b, 1, MPI_INT, MPI_OP_NULL);

    /* roots out of range */
    BCAST(MPI_ERR_ROOT, a, 1, MPI_INT, size);
    BCAST(MPI_ERR_ROOT, a, 1, MPI_INT, -7);
    BCAST(MPI_ERR_ROOT, a, 1, MPI_INT, MPI_ROOT);
    REDUCE(MPI_ERR_ROOT, a, b, 1, MPI_INT, MPI_SUM, size);
    GATHER(MPI_ERR_ROOT, a, 1, MPI_INT, b, 1, MPI_INT, -1);
    GATHERV(MPI_ERR_ROOT, a, 1, MPI_INT, b, cnt, dis, MPI_INT, size);
    SCATTER(MPI_ERR_ROOT, a, 1, MPI_INT, b, 1, MPI_INT, size);
    SCATTERV(MPI_ERR_ROOT, a, cnt, dis, MPI_INT, b, 1, MPI_INT, MPI_PROC_NULL);

    /* invalid communicators */
    E(MPI_ERR_COMM, MPI_Bcast(a, 1, MPI_INT, 0, BADCOMM));
    E(MPI_ERR_COMM, MPI_Allreduce(a, b, 1, MPI_INT, MPI_SUM, MPI_COMM_NULL));
    E(MPI_ERR_COMM, MPI_Allreduce(a, b, 1, MPI_INT, MPI_SUM, BADCOMM));
    E(MPI_ERR_COMM, MPI_Alltoall(a, 1, MPI_INT, b, 1, MPI_INT, BADCOMM));
    E(MPI_ERR_COMM, MPI_Barrier(BADCOMM));
    EI(MPI_ERR_COMM, MPI_Ibarrier(BADCOMM, r));
    EI(MPI_ERR_COMM, MPI_Ireduce(a, b, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_NULL, r));
    EI(MPI_ERR_COMM, MPI_Iscan(a, b, 1, MPI_INT, MPI_SUM, BADCOMM, r));
    EP(MPI_ERR_COMM, MPI_Barrier_init(BADCOMM, MPI_INFO_NULL, r));
    EP(MPI_ERR_COMM, MPI_Gather_init(a, 1, MPI_INT, b, 1, MPI_INT, 0, MPI_COMM_NULL,
                                     MPI_INFO_NULL, r));
    EP(MPI_ERR_COMM, MPI_Allreduce_init(a, b, 1, MPI_INT, MPI_SUM, BADCOMM, MPI_INFO_NULL, r));
}

/* What the standard allows must still work. */
static void legal(int rank, int size)
{
    MPI_Datatype empty;
    MPI_Type_contiguous(0, MPI_INT, &empty);
    MPI_Type_commit(&empty);
    int zero[2] = {0, 0};
    OK(MPI_Bcast(NULL, 0, MPI_INT, 0, MPI_COMM_WORLD));
    OKI(MPI_Ibcast(NULL, 0, MPI_INT, 0, MPI_COMM_WORLD, r));
    OK(MPI_Bcast(NULL, 3, empty, 0, MPI_COMM_WORLD));
    OK(MPI_Allreduce(NULL, NULL, 0, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    OKI(MPI_Iallreduce(NULL, NULL, 0, MPI_INT, MPI_SUM, MPI_COMM_WORLD, r));
    OK(MPI_Reduce(NULL, NULL, 0, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD));
    OK(MPI_Gather(NULL, 0, MPI_INT, NULL, 0, MPI_INT, 0, MPI_COMM_WORLD));
    OK(MPI_Gatherv(NULL, 0, MPI_INT, NULL, zero, zero, MPI_INT, 0, MPI_COMM_WORLD));
    OK(MPI_Alltoall(NULL, 0, MPI_INT, NULL, 0, MPI_INT, MPI_COMM_WORLD));
    OK(MPI_Alltoallv(NULL, zero, zero, MPI_INT, NULL, zero, zero, MPI_INT, MPI_COMM_WORLD));
    OK(MPI_Alltoallw(NULL, zero, zero, ty, NULL, zero, zero, ty, MPI_COMM_WORLD));
    OK(MPI_Scan(NULL, NULL, 0, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    OK(MPI_Reduce_scatter(NULL, NULL, zero, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    /* non-roots' receive buffers (and the root's send buffer of a scatter) are not used */
    a[0] = rank + 1;
    OK(MPI_Reduce(a, rank == 0 ? b : NULL, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD));
    CHECK(rank != 0 || b[0] == size * (size + 1) / 2, "Reduce: %d", b[0]);
    OK(MPI_Gather(a, 1, MPI_INT, rank == 0 ? b : NULL, 1, MPI_INT, 0, MPI_COMM_WORLD));
    OK(MPI_Gatherv(a, 1, MPI_INT, rank == 0 ? b : NULL, cnt, dis, MPI_INT, 0, MPI_COMM_WORLD));
    OK(MPI_Scatter(rank == 0 ? a : NULL, 1, MPI_INT, b, 1, MPI_INT, 0, MPI_COMM_WORLD));
    OK(MPI_Scatterv(rank == 0 ? a : NULL, rank == 0 ? cnt : NULL, rank == 0 ? dis : NULL,
                    MPI_INT, b, 1, MPI_INT, 0, MPI_COMM_WORLD));
    /* Exscan: rank 0's receive buffer is not used */
    OK(MPI_Exscan(a, rank == 0 ? NULL : b, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    /* MPI_IN_PLACE where it is allowed */
    b[0] = 1;
    OK(MPI_Allreduce(MPI_IN_PLACE, b, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    CHECK(b[0] == size, "Allreduce in place: %d", b[0]);
    OK(MPI_Reduce(rank == 0 ? MPI_IN_PLACE : a, rank == 0 ? b : NULL, 1, MPI_INT, MPI_SUM, 0,
                  MPI_COMM_WORLD));
    OK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, b, 1, MPI_INT, MPI_COMM_WORLD));
    OK(MPI_Alltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, b, 1, MPI_INT, MPI_COMM_WORLD));
    /* MPI_BOTTOM with absolute addresses */
    MPI_Aint at;
    MPI_Datatype abs_int;
    MPI_Get_address(&a[3], &at);
    MPI_Type_create_struct(1, (int[]){1}, &at, (MPI_Datatype[]){MPI_INT}, &abs_int);
    MPI_Type_commit(&abs_int);
    a[3] = rank == 0 ? 42 : -1;
    OK(MPI_Bcast(MPI_BOTTOM, 1, abs_int, 0, MPI_COMM_WORLD));
    CHECK(a[3] == 42, "Bcast from MPI_BOTTOM: %d", a[3]);
    MPI_Type_free(&abs_int);
    MPI_Type_free(&empty);
}

/* Neighbourhood collectives on a ring of the processes. */
static void neighbourhood(void)
{
    MPI_Comm ring;
    int dims[1] = {0}, periods[1] = {1};
    int size;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    dims[0] = size;
    MPI_Cart_create(MPI_COMM_WORLD, 1, dims, periods, 0, &ring);
    MPI_Comm_set_errhandler(ring, MPI_ERRORS_RETURN);
#define NB3(cls, X, IX, XI, ...)                                                           \
    do {                                                                                   \
        E(cls, X(__VA_ARGS__, ring));                                                      \
        EI(cls, IX(__VA_ARGS__, ring, r));                                                 \
        EP(cls, XI(__VA_ARGS__, ring, MPI_INFO_NULL, r));                                  \
    } while (0)
#define NAG(cls, ...)                                                                      \
    NB3(cls, MPI_Neighbor_allgather, MPI_Ineighbor_allgather, MPI_Neighbor_allgather_init,  \
        __VA_ARGS__)
#define NAGV(cls, ...)                                                                     \
    NB3(cls, MPI_Neighbor_allgatherv, MPI_Ineighbor_allgatherv,                           \
        MPI_Neighbor_allgatherv_init, __VA_ARGS__)
#define NA2A(cls, ...)                                                                     \
    NB3(cls, MPI_Neighbor_alltoall, MPI_Ineighbor_alltoall, MPI_Neighbor_alltoall_init,     \
        __VA_ARGS__)
#define NA2AV(cls, ...)                                                                    \
    NB3(cls, MPI_Neighbor_alltoallv, MPI_Ineighbor_alltoallv, MPI_Neighbor_alltoallv_init,  \
        __VA_ARGS__)
#define NA2AW(cls, ...)                                                                    \
    NB3(cls, MPI_Neighbor_alltoallw, MPI_Ineighbor_alltoallw, MPI_Neighbor_alltoallw_init,  \
        __VA_ARGS__)
    NAG(MPI_ERR_BUFFER, NULL, 1, MPI_INT, b, 1, MPI_INT);
    NAG(MPI_ERR_BUFFER, a, 1, MPI_INT, NULL, 1, MPI_INT);
    NAG(MPI_ERR_COUNT, a, -1, MPI_INT, b, 1, MPI_INT);
    NAG(MPI_ERR_TYPE, a, 1, BADT, b, 1, MPI_INT);
    NAGV(MPI_ERR_BUFFER, a, 1, MPI_INT, NULL, cnt, dis, MPI_INT);
    NAGV(MPI_ERR_COUNT, a, 1, MPI_INT, b, ncnt, dis, MPI_INT);
    NAGV(MPI_ERR_TYPE, a, 1, MPI_INT, b, cnt, dis, MPI_DATATYPE_NULL);
    NA2A(MPI_ERR_BUFFER, NULL, 1, MPI_INT, b, 1, MPI_INT);
    NA2A(MPI_ERR_BUFFER, a, 1, MPI_INT, NULL, 1, MPI_INT);
    NA2A(MPI_ERR_COUNT, a, 1, MPI_INT, b, -1, MPI_INT);
    NA2A(MPI_ERR_TYPE, a, 1, MPI_INT, b, 1, BADT);
    NA2AV(MPI_ERR_BUFFER, NULL, cnt, dis, MPI_INT, b, cnt, dis, MPI_INT);
    NA2AV(MPI_ERR_COUNT, a, cnt, dis, MPI_INT, b, ncnt, dis, MPI_INT);
    NA2AV(MPI_ERR_TYPE, a, cnt, dis, BADT, b, cnt, dis, MPI_INT);
    NA2AW(MPI_ERR_BUFFER, NULL, cnt, ndis, ty, b, cnt, ndis, ty);
    NA2AW(MPI_ERR_BUFFER, a, cnt, ndis, ty, NULL, cnt, ndis, ty);
    NA2AW(MPI_ERR_COUNT, a, ncnt, ndis, ty, b, cnt, ndis, ty);
    NA2AW(MPI_ERR_TYPE, a, cnt, ndis, ty, b, cnt, ndis, badty);
    /* not a communicator with a topology */
    E(MPI_ERR_TOPOLOGY, MPI_Neighbor_allgather(a, 1, MPI_INT, b, 1, MPI_INT, MPI_COMM_WORLD));
    E(MPI_ERR_COMM, MPI_Neighbor_alltoall(a, 1, MPI_INT, b, 1, MPI_INT, BADCOMM));
    OK(MPI_Neighbor_alltoall(a, 1, MPI_INT, b, 1, MPI_INT, ring));
    OK(MPI_Neighbor_allgather(NULL, 0, MPI_INT, NULL, 0, MPI_INT, ring));
    MPI_Comm_free(&ring);
}

/* An intercommunicator of two groups: roots are MPI_ROOT, MPI_PROC_NULL or a remote rank. */
static void intercommunicator(int rank)
{
    MPI_Comm half, inter;
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
    MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, rank % 2 ? 0 : 1, 7, &inter);
    MPI_Comm_set_errhandler(inter, MPI_ERRORS_RETURN);
    int lrank, group = rank % 2;
    MPI_Comm_rank(half, &lrank);
    /* group 0's process 0 is the root; group 1 names it as remote rank 0 */
    int root = group == 0 ? (lrank == 0 ? MPI_ROOT : MPI_PROC_NULL) : 0;
#define INTER3(cls, X, IX, XI, ...)                                                        \
    do {                                                                                   \
        E(cls, X(__VA_ARGS__, inter));                                                     \
        EI(cls, IX(__VA_ARGS__, inter, r));                                                \
        EP(cls, XI(__VA_ARGS__, inter, MPI_INFO_NULL, r));                                 \
    } while (0)
    INTER3(MPI_ERR_ROOT, MPI_Bcast, MPI_Ibcast, MPI_Bcast_init, a, 1, MPI_INT, 5);
    INTER3(MPI_ERR_ROOT, MPI_Reduce, MPI_Ireduce, MPI_Reduce_init, a, b, 1, MPI_INT, MPI_SUM,
           -9);
    INTER3(MPI_ERR_ROOT, MPI_Gather, MPI_Igather, MPI_Gather_init, a, 1, MPI_INT, b, 1,
           MPI_INT, 3);
    INTER3(MPI_ERR_ROOT, MPI_Scatter, MPI_Iscatter, MPI_Scatter_init, a, 1, MPI_INT, b, 1,
           MPI_INT, 3);
    INTER3(MPI_ERR_BUFFER, MPI_Bcast, MPI_Ibcast, MPI_Bcast_init, NULL, 1, MPI_INT, root);
    INTER3(MPI_ERR_COUNT, MPI_Bcast, MPI_Ibcast, MPI_Bcast_init, a, -1, MPI_INT, root);
    INTER3(MPI_ERR_TYPE, MPI_Bcast, MPI_Ibcast, MPI_Bcast_init, a, 1, BADT, root);
    INTER3(MPI_ERR_OP, MPI_Allreduce, MPI_Iallreduce, MPI_Allreduce_init, a, b, 1, MPI_INT,
           BADOP);
    INTER3(MPI_ERR_BUFFER, MPI_Allreduce, MPI_Iallreduce, MPI_Allreduce_init, NULL, b, 1,
           MPI_INT, MPI_SUM);
    INTER3(MPI_ERR_BUFFER, MPI_Allgather, MPI_Iallgather, MPI_Allgather_init, NULL, 1,
           MPI_INT, b, 1, MPI_INT);
    INTER3(MPI_ERR_BUFFER, MPI_Alltoall, MPI_Ialltoall, MPI_Alltoall_init, NULL, 1, MPI_INT,
           b, 1, MPI_INT);
    INTER3(MPI_ERR_BUFFER, MPI_Alltoall, MPI_Ialltoall, MPI_Alltoall_init, a, 1, MPI_INT,
           NULL, 1, MPI_INT);
    /* the legal roots still work */
    a[0] = 77;
    b[0] = 0;
    OK(MPI_Bcast(group == 0 ? a : b, 1, MPI_INT, root, inter));
    CHECK(group == 0 || b[0] == 77, "intercommunicator Bcast: %d", b[0]);
    OKI(MPI_Ibcast(group == 0 ? a : b, 1, MPI_INT, root, inter, r));
    MPI_Comm_free(&inter);
    MPI_Comm_free(&half);
}

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
    intracommunicator(size);
    legal(rank, size);
    neighbourhood();
    if (size > 1)
        intercommunicator(rank);
    /* the job still works */
    int v = 1, w = 0;
    int rc = MPI_Allreduce(&v, &w, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    CHECK(rc == MPI_SUCCESS && w == size, "Allreduce after the errors: %d", w);
    return finish();
}
