/* MPI 4.1 rules that Python bindings (mpi4py) lean on, each checked as the standard states it:
 *  - persistent collectives bind their count, displacement and type arrays at init: the
 *    program may overwrite or free them before MPI_Start (int and MPI_Count forms);
 *  - MPI_Comm/Type/Win_get_name accept the null handles and answer "MPI_COMM_NULL", ...;
 *  - a call on MPI_SESSION_NULL fails with MPI_ERR_SESSION;
 *  - MPI_Win_shared_query works on MPI_Win_allocate windows: this process's own part, and
 *    size 0 / NULL for parts it cannot reach;
 *  - MPI_Type_get_envelope_c/get_contents_c report counts beyond INT_MAX as large counts, and
 *    the int forms refuse such a type with MPI_ERR_TYPE;
 *  - a process that spins on its own window memory with MPI_Win_sync lets the other ranks'
 *    passive-target operations land (progress inside MPI_Win_sync). */
#include "mtest.h"

static void persistent_arrays_bound_at_init(void)
{
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int *counts = malloc(sizeof(int) * size), *displs = malloc(sizeof(int) * size);
    MPI_Count *ccounts = malloc(sizeof(MPI_Count) * size);
    MPI_Aint *cdispls = malloc(sizeof(MPI_Aint) * size);
    int *recv = malloc(sizeof(int) * 2 * size), *crecv = malloc(sizeof(int) * 2 * size);
    int send[2] = {rank, rank};
    for (int i = 0; i < size; i++) {
        counts[i] = 2, displs[i] = 2 * i;
        ccounts[i] = 2, cdispls[i] = 2 * i;
    }
    MPI_Request req[3];
    MPI_Allgatherv_init(send, 2, MPI_INT, recv, counts, displs, MPI_INT, MPI_COMM_WORLD,
                        MPI_INFO_NULL, &req[0]);
    MPI_Allgatherv_init_c(send, 2, MPI_INT, crecv, ccounts, cdispls, MPI_INT, MPI_COMM_WORLD,
                          MPI_INFO_NULL, &req[1]);
    int rsrecv = -1;
    int *rscounts = malloc(sizeof(int) * size);
    int *rssend = malloc(sizeof(int) * size);
    for (int i = 0; i < size; i++)
        rscounts[i] = 1, rssend[i] = rank + 1;
    MPI_Reduce_scatter_init(rssend, &rsrecv, rscounts, MPI_INT, MPI_SUM, MPI_COMM_WORLD,
                            MPI_INFO_NULL, &req[2]);
    /* The arrays are garbage (and gone) by the time the operations start. */
    for (int i = 0; i < size; i++) {
        counts[i] = -7, displs[i] = -7, ccounts[i] = -7, cdispls[i] = -7, rscounts[i] = -7;
    }
    free(counts), free(displs), free(ccounts), free(cdispls), free(rscounts);
    for (int round = 0; round < 2; round++) {
        memset(recv, 0xff, sizeof(int) * 2 * size);
        memset(crecv, 0xff, sizeof(int) * 2 * size);
        MPI_Startall(3, req);
        MPI_Waitall(3, req, MPI_STATUSES_IGNORE);
        for (int i = 0; i < 2 * size; i++) {
            CHECK(recv[i] == i / 2, "Allgatherv_init: recv[%d] = %d", i, recv[i]);
            CHECK(crecv[i] == i / 2, "Allgatherv_init_c: recv[%d] = %d", i, crecv[i]);
        }
        CHECK(rsrecv == size * (size + 1) / 2, "Reduce_scatter_init: %d", rsrecv);
    }
    for (int i = 0; i < 3; i++)
        MPI_Request_free(&req[i]);
    free(recv), free(crecv), free(rssend);
}

static void null_handle_names(void)
{
    char name[MPI_MAX_OBJECT_NAME];
    int len = -1;
    CHECK_OK(MPI_Comm_get_name(MPI_COMM_NULL, name, &len), "Comm_get_name(MPI_COMM_NULL)");
    CHECK(strcmp(name, "MPI_COMM_NULL") == 0 && len == 13, "comm null name %s", name);
    CHECK_OK(MPI_Type_get_name(MPI_DATATYPE_NULL, name, &len), "Type_get_name(NULL)");
    CHECK(strcmp(name, "MPI_DATATYPE_NULL") == 0, "datatype null name %s", name);
    CHECK_OK(MPI_Win_get_name(MPI_WIN_NULL, name, &len), "Win_get_name(MPI_WIN_NULL)");
    CHECK(strcmp(name, "MPI_WIN_NULL") == 0, "win null name %s", name);
    /* Naming a null handle stays an error. */
    CHECK(MPI_Comm_set_name(MPI_COMM_NULL, "x") != MPI_SUCCESS, "Comm_set_name(MPI_COMM_NULL)");
}

static void session_null(void)
{
    int n = -1;
    MPI_Errhandler eh;
    CHECK_CLASS(MPI_Session_get_num_psets(MPI_SESSION_NULL, MPI_INFO_NULL, &n), MPI_ERR_SESSION,
                "Session_get_num_psets(MPI_SESSION_NULL)");
    CHECK_CLASS(MPI_Session_get_errhandler(MPI_SESSION_NULL, &eh), MPI_ERR_SESSION,
                "Session_get_errhandler(MPI_SESSION_NULL)");
}

static void shared_query_on_allocated_window(void)
{
    int rank, size, *base = NULL;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Win win;
    MPI_Win_allocate(4 * sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    for (int r = 0; r < size; r++) {
        MPI_Aint bytes = -1;
        int unit = -1;
        void *p = (void *)1;
        CHECK_OK(MPI_Win_shared_query(win, r, &bytes, &unit, &p), "Win_shared_query");
        if (r == rank)
            CHECK(bytes == 4 * sizeof(int) && unit == sizeof(int) && p == base,
                  "own part: %ld bytes, unit %d", (long)bytes, unit);
        else if (bytes != 0)
            CHECK(bytes == 4 * sizeof(int) && p != NULL, "reachable part of rank %d", r);
        else
            CHECK(p == NULL, "unreachable part of rank %d has an address", r);
    }
    MPI_Win_free(&win);
    MPI_Win dyn;
    MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &dyn);
    MPI_Win_set_errhandler(dyn, MPI_ERRORS_RETURN);
    MPI_Aint bytes;
    int unit;
    void *p;
    CHECK_CLASS(MPI_Win_shared_query(dyn, rank, &bytes, &unit, &p), MPI_ERR_RMA_FLAVOR,
                "Win_shared_query on a dynamic window");
    MPI_Win_free(&dyn);
}

static void large_count_contents(void)
{
    MPI_Count big = (MPI_Count)INT_MAX + 1000;
    MPI_Datatype t;
    MPI_Type_contiguous_c(big, MPI_BYTE, &t);
    MPI_Count ni, na, nc, nd;
    int combiner;
    CHECK_OK(MPI_Type_get_envelope_c(t, &ni, &na, &nc, &nd, &combiner), "get_envelope_c");
    CHECK(ni == 0 && na == 0 && nc == 1 && nd == 1 && combiner == MPI_COMBINER_CONTIGUOUS,
          "envelope_c %ld %ld %ld %ld", (long)ni, (long)na, (long)nc, (long)nd);
    MPI_Count count = 0;
    MPI_Datatype old = MPI_DATATYPE_NULL;
    CHECK_OK(MPI_Type_get_contents_c(t, 0, 0, 1, 1, NULL, NULL, &count, &old), "contents_c");
    CHECK(count == big && old == MPI_BYTE, "contents_c count %ld", (long)count);
    int i1, i2, i3;
    CHECK_CLASS(MPI_Type_get_envelope(t, &i1, &i2, &i3, &combiner), MPI_ERR_TYPE,
                "get_envelope of a type with a count beyond INT_MAX");
    MPI_Type_free(&t);
    /* A type whose counts fit an int keeps the int layout in the _c form too. */
    MPI_Type_contiguous_c(5, MPI_INT, &t);
    MPI_Type_get_envelope_c(t, &ni, &na, &nc, &nd, &combiner);
    CHECK(ni == 1 && nc == 0, "small envelope_c %ld %ld", (long)ni, (long)nc);
    MPI_Type_free(&t);
}

/* Rank 1 puts a flag into rank 0's window under MPI_Win_lock_all; rank 0 only spins on its
 * memory with MPI_Win_sync (as mpi4py.util.sync's locks do). */
static void win_sync_spin_sees_remote_put(void)
{
    int rank, size, *base = NULL;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size < 2)
        return;
    MPI_Win win;
    MPI_Win_allocate(sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    *base = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_lock_all(0, win);
    if (rank == 1) {
        int one = 1;
        MPI_Accumulate(&one, 1, MPI_INT, 0, 0, 1, MPI_INT, MPI_REPLACE, win);
        MPI_Win_flush(0, win);
    } else if (rank == 0) {
        volatile int *flag = base;
        double until = MPI_Wtime() + 30;
        while (*flag == 0 && MPI_Wtime() < until)
            MPI_Win_sync(win);
        CHECK(*flag == 1, "the put never landed while rank 0 spun on MPI_Win_sync");
    }
    MPI_Win_unlock_all(win);
    MPI_Win_free(&win);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    persistent_arrays_bound_at_init();
    null_handle_names();
    session_null();
    shared_query_on_allocated_window();
    large_count_contents();
    win_sync_spin_sees_remote_put();
    return finish();
}
