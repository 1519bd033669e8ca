/* One-sided communication: error classes under MPI_ERRORS_RETURN (MPI_ERR_WIN, MPI_ERR_RANK,
 * MPI_ERR_RMA_RANGE, MPI_ERR_RMA_SYNC, MPI_ERR_LOCKTYPE), lock contention (every rank adds to
 * a counter on rank 0 many times by exclusive-lock read-modify-write with MPI_Get and MPI_Put:
 * the total must be exact), shared-lock accumulates, fence with a derived target type,
 * post/start/complete/wait, the window attributes, and a window error handler. */
#include "mtest.h"

#define ROUNDS 50

static int handler_calls = 0;
static void count_errors(MPI_Win *win, int *code, ...)
{
    (void)win;
    (void)code;
    handler_calls++;
}

int main(int argc, char **argv)
{
    int rank, size, rc;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    int *mem;
    MPI_Win win;
    rc = MPI_Win_allocate(4 * sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &mem, &win);
    CHECK_OK(rc, "MPI_Win_allocate");
    for (int i = 0; i < 4; i++)
        mem[i] = 0;
    MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Barrier(MPI_COMM_WORLD);

    /* Attributes. */
    void *base;
    MPI_Aint *wsize;
    int *unit, *flavor, *model, flag;
    MPI_Win_get_attr(win, MPI_WIN_BASE, &base, &flag);
    CHECK(flag && base == mem, "MPI_WIN_BASE");
    MPI_Win_get_attr(win, MPI_WIN_SIZE, &wsize, &flag);
    CHECK(flag && *wsize == 4 * (MPI_Aint)sizeof(int), "MPI_WIN_SIZE");
    MPI_Win_get_attr(win, MPI_WIN_DISP_UNIT, &unit, &flag);
    CHECK(flag && *unit == sizeof(int), "MPI_WIN_DISP_UNIT");
    MPI_Win_get_attr(win, MPI_WIN_CREATE_FLAVOR, &flavor, &flag);
    CHECK(flag && *flavor == MPI_WIN_FLAVOR_ALLOCATE, "MPI_WIN_CREATE_FLAVOR");
    MPI_Win_get_attr(win, MPI_WIN_MODEL, &model, &flag);
    CHECK(flag && (*model == MPI_WIN_UNIFIED || *model == MPI_WIN_SEPARATE), "MPI_WIN_MODEL");

    /* Errors. */
    int one = 1;
    rc = MPI_Put(&one, 1, MPI_INT, (rank + 1) % size, 0, 1, MPI_INT, win);
    CHECK_CLASS(rc, MPI_ERR_RMA_SYNC, "MPI_Put outside an epoch");
    rc = MPI_Win_unlock(0, win);
    CHECK_CLASS(rc, MPI_ERR_RMA_SYNC, "MPI_Win_unlock without a lock");
    rc = MPI_Win_flush(0, win);
    CHECK_CLASS(rc, MPI_ERR_RMA_SYNC, "MPI_Win_flush without a lock");
    rc = MPI_Win_lock(12345, 0, 0, win);
#ifdef MPICH_VERSION
    CHECK(rc != MPI_SUCCESS, "MPI_Win_lock with a bad lock type succeeded"); /* MPI_ERR_ARG */
#else
    CHECK_CLASS(rc, MPI_ERR_LOCKTYPE, "MPI_Win_lock with a bad lock type");
#endif
    MPI_Win_lock(MPI_LOCK_SHARED, (rank + 1) % size, 0, win);
#ifndef MPICH_VERSION
    /* MPICH does not check the target range at the origin (it writes past the window). */
    rc = MPI_Put(&one, 1, MPI_INT, (rank + 1) % size, 4, 1, MPI_INT, win);
    CHECK_CLASS(rc, MPI_ERR_RMA_RANGE, "MPI_Put past the end of the window");
    rc = MPI_Put(&one, 2, MPI_INT, (rank + 1) % size, 3, 2, MPI_INT, win);
    CHECK_CLASS(rc, MPI_ERR_RMA_RANGE, "MPI_Put across the end of the window");
    rc = MPI_Get(&one, 1, MPI_INT, (rank + 1) % size, -1, 1, MPI_INT, win);
    CHECK_CLASS(rc, MPI_ERR_RMA_RANGE, "MPI_Get before the window");
    rc = MPI_Accumulate(&one, 1, MPI_INT, (rank + 1) % size, 5, 1, MPI_INT, MPI_SUM, win);
    CHECK_CLASS(rc, MPI_ERR_RMA_RANGE, "MPI_Accumulate past the end of the window");
#endif
    rc = MPI_Put(&one, 1, MPI_INT, size, 0, 1, MPI_INT, win);
    CHECK_CLASS(rc, MPI_ERR_RANK, "MPI_Put to a rank outside the window");
    rc = MPI_Put(&one, 1, MPI_INT, MPI_PROC_NULL, 0, 1, MPI_INT, win);
    CHECK_OK(rc, "MPI_Put to MPI_PROC_NULL");
    rc = MPI_Win_lock(MPI_LOCK_SHARED, (rank + 1) % size, 0, win);
    CHECK_CLASS(rc, MPI_ERR_RMA_SYNC, "MPI_Win_lock of a locked rank");
    MPI_Win_unlock((rank + 1) % size, win);
    rc = MPI_Win_fence(0, MPI_WIN_NULL);
    CHECK_CLASS(rc, MPI_ERR_WIN, "MPI_Win_fence on MPI_WIN_NULL");
    rc = MPI_Put(&one, 1, MPI_INT, 0, 0, 1, MPI_INT, MPI_WIN_NULL);
    CHECK_CLASS(rc, MPI_ERR_WIN, "MPI_Put on MPI_WIN_NULL");

    /* A window error handler sees errors on its window. */
    MPI_Errhandler eh;
    MPI_Win_create_errhandler(count_errors, &eh);
    MPI_Win_set_errhandler(win, eh);
    rc = MPI_Win_unlock(0, win);
    CHECK(handler_calls == 1, "the window's handler ran %d times", handler_calls);
    MPI_Win_call_errhandler(win, MPI_ERR_OTHER);
    CHECK(handler_calls == 2, "MPI_Win_call_errhandler: the handler ran %d times", handler_calls);
    MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN);
    MPI_Errhandler_free(&eh);

    /* Lock contention: exclusive read-modify-write of a counter on rank 0. */
    MPI_Barrier(MPI_COMM_WORLD);
    for (int i = 0; i < ROUNDS; i++) {
        int v = -1;
        MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win);
        MPI_Get(&v, 1, MPI_INT, 0, 0, 1, MPI_INT, win);
        MPI_Win_flush(0, win);
        v += 1;
        MPI_Put(&v, 1, MPI_INT, 0, 0, 1, MPI_INT, win);
        MPI_Win_unlock(0, win);
    }
    /* Shared locks: accumulates to one location are atomic. */
    for (int i = 0; i < ROUNDS; i++) {
        int two = 2;
        MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win);
        MPI_Accumulate(&two, 1, MPI_INT, 0, 1, 1, MPI_INT, MPI_SUM, win);
        MPI_Win_unlock(0, win);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win);
        CHECK(mem[0] == ROUNDS * size, "counter %d, expected %d", mem[0], ROUNDS * size);
        CHECK(mem[1] == 2 * ROUNDS * size, "sum %d, expected %d", mem[1], 2 * ROUNDS * size);
        MPI_Win_unlock(0, win);
    }
    MPI_Barrier(MPI_COMM_WORLD);

    /* Fence with a strided target type: rank r writes r+1 into elements 0 and 2 of the next. */
    MPI_Datatype every_other;
    MPI_Type_vector(2, 1, 2, MPI_INT, &every_other);
    MPI_Type_commit(&every_other);
    int vals[2] = {rank + 1, rank + 1};
    MPI_Win_fence(0, win);
    MPI_Put(vals, 2, MPI_INT, (rank + 1) % size, 0, 1, every_other, win);
    MPI_Win_fence(0, win);
    int left = (rank + size - 1) % size + 1;
    CHECK(mem[0] == left && mem[2] == left, "fence put: %d %d, expected %d", mem[0], mem[2], left);
    int got[2] = {0, 0};
    MPI_Get(got, 2, MPI_INT, (rank + 1) % size, 0, 1, every_other, win);
    MPI_Win_fence(MPI_MODE_NOSUCCEED, win);
    CHECK(got[0] == rank + 1 && got[1] == rank + 1, "fence get: %d %d", got[0], got[1]);
    MPI_Type_free(&every_other);

    /* Post/start/complete/wait in a ring. */
    MPI_Group world, next, prev;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    int n = (rank + 1) % size, p = (rank + size - 1) % size;
    MPI_Group_incl(world, 1, &n, &next);
    MPI_Group_incl(world, 1, &p, &prev);
    MPI_Win_post(prev, 0, win);
    MPI_Win_start(next, 0, win);
    int mine = 100 + rank;
    MPI_Accumulate(&mine, 1, MPI_INT, n, 3, 1, MPI_INT, MPI_REPLACE, win);
    MPI_Win_complete(win);
    MPI_Win_wait(win);
    CHECK(mem[3] == 100 + p, "pscw: %d, expected %d", mem[3], 100 + p);
    MPI_Group_free(&next);
    MPI_Group_free(&prev);
    MPI_Group_free(&world);

    rc = MPI_Win_free(&win);
    CHECK_OK(rc, "MPI_Win_free");
    CHECK(win == MPI_WIN_NULL, "MPI_Win_free sets MPI_WIN_NULL");
    return finish();
}
