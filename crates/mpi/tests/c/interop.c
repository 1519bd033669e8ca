/* Calls MPICH's test suite found missing or wrong: handle conversion to and from Fortran
 * integers (MPI_<handle>_c2f/_f2c), the large-count one-sided calls (MPI_Put_c ...,
 * MPI_Win_create_c, MPI_Win_allocate_c, MPI_Win_allocate_shared_c, MPI_Win_shared_query_c),
 * MPI_Op_create_c, the large-count datatype, external32 and file calls (MPI_Type_create_subarray_c,
 * _darray_c, _get_envelope_c, _get_contents_c, MPI_Pack_external_c ..., MPI_File_write_at_c ...),
 * MPI_Register_datarep_c (with the argument "user": MPICH 4.0.2's ROMIO refuses to register
 * representations), MPI_Comm_disconnect on an ordinary communicator, MPI_Reduce_local's buffer checks, the types MPI_Compare_and_swap takes, a lock inside an
 * MPI_Win_start epoch, and MPI_Win_free reporting to the window's error handler. Two processes
 * (or more). */
#include "mtest.h"
#include <unistd.h>

/* One file name for the whole job: rank 0's pid. */
static long getpid_of_rank0(void)
{
    long pid = (long) getpid();
    MPI_Bcast(&pid, 1, MPI_LONG, 0, MPI_COMM_WORLD);
    return pid;
}

static void noop(void *in, void *inout, int *len, MPI_Datatype *type)
{
    (void) in;
    (void) inout;
    (void) len;
    (void) type;
}

static void handles(void)
{
    MPI_Comm dup;
    MPI_Datatype vec;
    MPI_Group grp;
    MPI_Op op;
    MPI_Info info;
    MPI_Request req;
    int x = 0;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    MPI_Type_vector(2, 1, 2, MPI_INT, &vec);
    MPI_Comm_group(MPI_COMM_WORLD, &grp);
    MPI_Op_create(noop, 1, &op);
    MPI_Info_create(&info);
    MPI_Irecv(&x, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &req);

    CHECK(MPI_Comm_f2c(MPI_Comm_c2f(MPI_COMM_WORLD)) == MPI_COMM_WORLD, "COMM_WORLD round trip");
    CHECK(MPI_Comm_f2c(MPI_Comm_c2f(MPI_COMM_NULL)) == MPI_COMM_NULL, "COMM_NULL round trip");
    CHECK(MPI_Type_f2c(MPI_Type_c2f(MPI_DOUBLE)) == MPI_DOUBLE, "MPI_DOUBLE round trip");
    CHECK(MPI_Message_f2c(MPI_Message_c2f(MPI_MESSAGE_NULL)) == MPI_MESSAGE_NULL, "MESSAGE_NULL");
    CHECK(MPI_Comm_f2c(MPI_Comm_c2f(dup)) == dup, "created communicator round trip");
    CHECK(MPI_Comm_c2f(dup) == MPI_Comm_c2f(dup), "the same integer twice");
    CHECK(MPI_Comm_c2f(dup) != MPI_Comm_c2f(MPI_COMM_WORLD), "distinct integers");
    CHECK(PMPI_Type_f2c(PMPI_Type_c2f(vec)) == vec, "created datatype round trip (PMPI)");
    CHECK(MPI_Group_f2c(MPI_Group_c2f(grp)) == grp, "group round trip");
    CHECK(MPI_Info_f2c(MPI_Info_c2f(info)) == info, "info round trip");
    CHECK(MPI_Request_f2c(MPI_Request_c2f(req)) == req, "request round trip");
    CHECK(MPI_Errhandler_f2c(MPI_Errhandler_c2f(MPI_ERRORS_RETURN)) == MPI_ERRORS_RETURN,
          "errhandler round trip");
    CHECK(MPI_Op_f2c(MPI_Op_c2f(MPI_SUM)) == MPI_SUM, "predefined op round trip");
    CHECK(MPI_Op_f2c(MPI_Op_c2f(op)) == op, "user op round trip");

    /* A converted handle still works as one. */
    int size = 0, n = 0;
    MPI_Comm_size(MPI_Comm_f2c(MPI_Comm_c2f(dup)), &size);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    CHECK(size == n, "size through a converted handle: %d", size);

    /* An integer that no handle was converted to gives an invalid handle. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int rc = MPI_Comm_size(MPI_Comm_f2c(0x7ffffff0), &size);
    CHECK(rc != MPI_SUCCESS, "MPI_Comm_size on an unknown Fortran integer succeeded");

    MPI_Wait(&req, MPI_STATUS_IGNORE);
    MPI_Info_free(&info);
    MPI_Group_free(&grp);
    MPI_Type_free(&vec);
    MPI_Comm_free(&dup);
    MPI_Op_free(&op);
}

static void rma_large_count(int rank, int size)
{
    int *base, right = (rank + 1) % size, left = (rank + size - 1) % size;
    MPI_Win win;
    MPI_Aint wsize;
    MPI_Aint unit;
    int *mine;

    /* MPI_Win_allocate_c, then every _c communication call once. */
    MPI_Win_allocate_c(4 * sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    for (int i = 0; i < 4; i++)
        base[i] = -1;
    MPI_Win_fence(0, win);
    int val[2] = {rank, rank + 100};
    MPI_Put_c(val, (MPI_Count) 2, MPI_INT, right, 0, (MPI_Count) 2, MPI_INT, win);
    MPI_Win_fence(0, win);
    CHECK(base[0] == left && base[1] == left + 100, "MPI_Put_c: %d %d", base[0], base[1]);
    int got[2] = {-1, -1};
    MPI_Get_c(got, 2, MPI_INT, right, 0, 2, MPI_INT, win);
    MPI_Win_fence(0, win);
    CHECK(got[0] == rank && got[1] == rank + 100, "MPI_Get_c: %d %d", got[0], got[1]);
    int one = 1;
    MPI_Accumulate_c(&one, 1, MPI_INT, right, 2, 1, MPI_INT, MPI_REPLACE, win);
    MPI_Win_fence(0, win);
    int old = -5;
    MPI_Get_accumulate_c(&one, 1, MPI_INT, &old, 1, MPI_INT, right, 2, 1, MPI_INT, MPI_SUM, win);
    MPI_Win_fence(0, win);
    CHECK(old == 1 && base[2] == 2, "MPI_Get_accumulate_c: old %d, now %d", old, base[2]);

    MPI_Request r[4];
    int seven = 7, back = -1, prev = -1;
    MPI_Win_lock_all(0, win);
    MPI_Rput_c(&seven, 1, MPI_INT, right, 3, 1, MPI_INT, win, &r[0]);
    MPI_Wait(&r[0], MPI_STATUS_IGNORE);
    MPI_Win_flush(right, win);
    MPI_Raccumulate_c(&one, 1, MPI_INT, right, 3, 1, MPI_INT, MPI_SUM, win, &r[1]);
    MPI_Wait(&r[1], MPI_STATUS_IGNORE);
    MPI_Win_flush(right, win);
    MPI_Rget_accumulate_c(&one, 1, MPI_INT, &prev, 1, MPI_INT, right, 3, 1, MPI_INT, MPI_SUM, win,
                          &r[2]);
    MPI_Wait(&r[2], MPI_STATUS_IGNORE);
    MPI_Win_flush(right, win);
    MPI_Rget_c(&back, 1, MPI_INT, right, 3, 1, MPI_INT, win, &r[3]);
    MPI_Wait(&r[3], MPI_STATUS_IGNORE);
    MPI_Win_unlock_all(win);
    CHECK(prev == 8 && back == 9, "request-based _c calls: %d %d", prev, back);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_free(&win);

    /* A negative MPI_Count is MPI_ERR_COUNT. */
    MPI_Win_create_c(val, sizeof(val), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN);
    MPI_Win_fence(0, win);
    int rc = MPI_Put_c(val, (MPI_Count) -1, MPI_INT, right, 0, 1, MPI_INT, win);
    CHECK_CLASS(rc, MPI_ERR_COUNT, "MPI_Put_c with a negative count");
    MPI_Win_fence(0, win);
    MPI_Win_free(&win);

    /* MPI_Win_allocate_shared_c and MPI_Win_shared_query_c (one host: every rank). */
    MPI_Win_allocate_shared_c(sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &mine,
                              &win);
    *mine = 10 * rank;
    MPI_Barrier(MPI_COMM_WORLD);
    int *theirs = NULL;
    MPI_Win_shared_query_c(win, right, &wsize, &unit, &theirs);
    CHECK(wsize == sizeof(int) && unit == sizeof(int), "shared query: size %ld unit %ld",
          (long) wsize, (long) unit);
    CHECK(theirs && *theirs == 10 * right, "shared memory of the right neighbour");
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_free(&win);
}

static void rma_errors(int rank, int size)
{
    long long cell = 0, cmp = 0, res, v = 1;
    double d = 1.0, dres, dcmp = 0.0;
    MPI_Win win;
    MPI_Group world;
    MPI_Win_create(&cell, sizeof(cell), 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN);
    MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win);
    int rc = MPI_Compare_and_swap(&v, &cmp, &res, MPI_LONG_LONG, 0, 0, win);
    CHECK_OK(rc, "MPI_Compare_and_swap on MPI_LONG_LONG");
    rc = MPI_Compare_and_swap(&d, &dcmp, &dres, MPI_DOUBLE, 0, 0, win);
    CHECK_CLASS(rc, MPI_ERR_TYPE, "MPI_Compare_and_swap on MPI_DOUBLE");
    MPI_Win_unlock(0, win);

    /* Freeing a locked window reports to the window's handler (ERRORS_RETURN here). */
    MPI_Win_lock(MPI_LOCK_SHARED, 0, MPI_MODE_NOCHECK, win);
    rc = MPI_Win_free(&win);
    CHECK_CLASS(rc, MPI_ERR_RMA_SYNC, "MPI_Win_free with a lock held");
    MPI_Win_unlock(0, win);

    /* No lock inside an access epoch of MPI_Win_start. */
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    MPI_Win_post(world, 0, win);
    MPI_Win_start(world, 0, win);
    rc = MPI_Win_lock(MPI_LOCK_SHARED, 0, MPI_MODE_NOCHECK, win);
    CHECK_CLASS(rc, MPI_ERR_RMA_SYNC, "MPI_Win_lock inside MPI_Win_start");
    rc = MPI_Win_lock_all(MPI_MODE_NOCHECK, win);
    CHECK_CLASS(rc, MPI_ERR_RMA_SYNC, "MPI_Win_lock_all inside MPI_Win_start");
    MPI_Win_complete(win);
    MPI_Win_wait(win);
    MPI_Group_free(&world);
    CHECK_OK(MPI_Win_free(&win), "MPI_Win_free after the epochs closed");
    (void) rank;
    (void) size;
}

/* inout = in * 10 + inout, so the order of operands shows. */
static void shift_c(void *in, void *inout, MPI_Count *len, MPI_Datatype *type)
{
    long long *a = in, *b = inout;
    CHECK(*type == MPI_LONG_LONG, "datatype passed to the MPI_Count function");
    for (MPI_Count i = 0; i < *len; i++)
        b[i] = a[i] * 10 + b[i];
}

static void op_create_c(int rank, int size)
{
    MPI_Op op;
    CHECK_OK(MPI_Op_create_c(shift_c, 0, &op), "MPI_Op_create_c");
    long long mine[2] = {rank + 1, rank + 1}, all[2] = {0, 0}, want = 0;
    MPI_Allreduce(mine, all, 2, MPI_LONG_LONG, op, MPI_COMM_WORLD);
    for (int r = 0; r < size; r++) /* ((1) op 2) op 3 ... with x op y = x * 10 + y */
        want = want * 10 + (r + 1);
    CHECK(all[0] == want && all[1] == want, "allreduce with an MPI_Count op: %lld, want %lld",
          all[0], want);
    int commute = 1;
    MPI_Op_commutative(op, &commute);
    CHECK(commute == 0, "MPI_Op_create_c(…, 0, …) is not commutative");
    long long x[3] = {1, 2, 3}, y[3] = {4, 5, 6};
    MPI_Reduce_local_c(x, y, 3, MPI_LONG_LONG, op);
    CHECK(y[0] == 14 && y[2] == 36, "MPI_Reduce_local_c with it: %lld %lld", y[0], y[2]);
    MPI_Op_free(&op);
}

static void datatypes_c(void)
{
    MPI_Datatype sub, dar;
    MPI_Count sizes[2] = {4, 5}, subsizes[2] = {2, 3}, starts[2] = {1, 2};
    CHECK_OK(MPI_Type_create_subarray_c(2, sizes, subsizes, starts, MPI_ORDER_C, MPI_INT, &sub),
             "MPI_Type_create_subarray_c");
    MPI_Count size = 0, lb = 0, extent = 0;
    MPI_Type_size_c(sub, &size);
    MPI_Type_get_extent_c(sub, &lb, &extent);
    CHECK(size == 6 * sizeof(int) && extent == 20 * sizeof(int), "subarray_c size %lld extent %lld",
          (long long) size, (long long) extent);
    MPI_Count ni = -1, na = -1, nl = -1, nd = -1;
    int combiner = -1;
    MPI_Type_get_envelope_c(sub, &ni, &na, &nl, &nd, &combiner);
    CHECK(combiner == MPI_COMBINER_SUBARRAY && nd == 1 && ni + nl >= 8, "envelope_c: %d %lld %lld",
          combiner, (long long) ni, (long long) nl);
    int ints[16];
    MPI_Aint addrs[4];
    MPI_Count large[16];
    MPI_Datatype types[2];
    CHECK_OK(MPI_Type_get_contents_c(sub, 16, 4, 16, 2, ints, addrs, large, types),
             "MPI_Type_get_contents_c");
    CHECK(types[0] == MPI_INT, "contents_c names MPI_INT");

    MPI_Count gsizes[1] = {8};
    int distribs[1] = {MPI_DISTRIBUTE_BLOCK}, dargs[1] = {MPI_DISTRIBUTE_DFLT_DARG}, psizes[1] = {2};
    CHECK_OK(MPI_Type_create_darray_c(2, 1, 1, gsizes, distribs, dargs, psizes, MPI_ORDER_C,
                                      MPI_INT, &dar), "MPI_Type_create_darray_c");
    MPI_Type_size_c(dar, &size);
    CHECK(size == 4 * sizeof(int), "darray_c size %lld", (long long) size);
    MPI_Type_free(&dar);
    MPI_Type_free(&sub);

    int v[3] = {1, 0x01020304, -1}, back[3] = {0, 0, 0};
    char ext[12];
    MPI_Count pos = 0, need = 0;
    MPI_Pack_external_size_c("external32", 3, MPI_INT, &need);
    CHECK(need == 12, "MPI_Pack_external_size_c: %lld", (long long) need);
    CHECK_OK(MPI_Pack_external_c("external32", v, 3, MPI_INT, ext, sizeof(ext), &pos),
             "MPI_Pack_external_c");
    CHECK(pos == 12 && ext[4] == 1 && ext[7] == 4, "external32 is big-endian");
    pos = 0;
    CHECK_OK(MPI_Unpack_external_c("external32", ext, sizeof(ext), &pos, back, 3, MPI_INT),
             "MPI_Unpack_external_c");
    CHECK(back[1] == v[1] && back[2] == -1 && pos == 12, "MPI_Unpack_external_c round trip");
}

static void files_c(int rank, int size)
{
    char name[64];
    MPI_File fh;
    MPI_Status st;
    MPI_Request req;
    MPI_Count n = 0;
    int mine[2] = {rank, 10 * rank}, got[2] = {-1, -1};
    snprintf(name, sizeof(name), "/tmp/ferry-interop-%d.dat", (int) getpid_of_rank0());
    MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_CREATE | MPI_MODE_RDWR | MPI_MODE_DELETE_ON_CLOSE,
                  MPI_INFO_NULL, &fh);
    MPI_File_set_errhandler(fh, MPI_ERRORS_RETURN);
    CHECK_OK(MPI_File_write_at_c(fh, rank * sizeof(mine), mine, 2, MPI_INT, &st),
             "MPI_File_write_at_c");
    MPI_Get_count_c(&st, MPI_INT, &n);
    CHECK(n == 2, "MPI_File_write_at_c wrote %lld", (long long) n);
    MPI_File_sync(fh);
    MPI_Barrier(MPI_COMM_WORLD);
    int other = (rank + 1) % size;
    CHECK_OK(MPI_File_iread_at_c(fh, other * sizeof(mine), got, 2, MPI_INT, &req),
             "MPI_File_iread_at_c");
    MPI_Wait(&req, &st);
    CHECK(got[0] == other && got[1] == 10 * other, "MPI_File_iread_at_c: %d %d", got[0], got[1]);
    CHECK_OK(MPI_File_read_at_all_c(fh, 0, got, 2, MPI_INT, &st), "MPI_File_read_at_all_c");
    CHECK(got[0] == 0 && got[1] == 0, "MPI_File_read_at_all_c: %d %d", got[0], got[1]);
    MPI_Count fext = 0;
    MPI_File_get_type_extent_c(fh, MPI_DOUBLE, &fext);
    CHECK(fext == 8, "MPI_File_get_type_extent_c: %lld", (long long) fext);
    int rc = MPI_File_read_at_c(fh, 0, got, -1, MPI_INT, &st);
    CHECK_CLASS(rc, MPI_ERR_COUNT, "MPI_File_read_at_c with a negative count");
    MPI_File_close(&fh);
}

/* ---- MPI_Register_datarep_c: an int is 8 big-endian bytes in the file ---- */
static int wide_extent(MPI_Datatype dt, MPI_Aint *extent, void *state)
{
    (void) state;
    *extent = dt == MPI_INT ? 8 : 0;
    return dt == MPI_INT ? MPI_SUCCESS : MPI_ERR_TYPE;
}

static int wide_write_c(void *userbuf, MPI_Datatype dt, MPI_Count count, void *filebuf,
                        MPI_Offset position, void *state)
{
    (void) state;
    const int *in = (const int *) userbuf + position;
    unsigned char *out = filebuf;
    for (MPI_Count k = 0; k < count; k++) {
        long long v = in[k];
        for (int j = 0; j < 8; j++)
            out[8 * k + j] = (unsigned char) ((unsigned long long) v >> (8 * (7 - j)));
    }
    return dt == MPI_INT ? MPI_SUCCESS : MPI_ERR_TYPE;
}

static int wide_read_c(void *userbuf, MPI_Datatype dt, MPI_Count count, void *filebuf,
                       MPI_Offset position, void *state)
{
    (void) state;
    int *out = (int *) userbuf + position;
    const unsigned char *in = filebuf;
    for (MPI_Count k = 0; k < count; k++) {
        unsigned long long v = 0;
        for (int j = 0; j < 8; j++)
            v = v << 8 | in[8 * k + j];
        out[k] = (int) (long long) v;
    }
    return dt == MPI_INT ? MPI_SUCCESS : MPI_ERR_TYPE;
}

static void datarep_c(int rank)
{
    char name[64];
    MPI_File fh;
    MPI_Status st;
    MPI_Offset bytes = 0;
    int v[3] = {1, -2, 300000}, back[3] = {0, 0, 0};
    CHECK_OK(MPI_Register_datarep_c("ferry-wide-c", wide_read_c, wide_write_c, wide_extent, NULL),
             "MPI_Register_datarep_c");
    snprintf(name, sizeof(name), "/tmp/ferry-interop-rep-%ld.dat", getpid_of_rank0());
    MPI_File_open(MPI_COMM_WORLD, name, MPI_MODE_CREATE | MPI_MODE_RDWR | MPI_MODE_DELETE_ON_CLOSE,
                  MPI_INFO_NULL, &fh);
    MPI_File_set_view(fh, 0, MPI_INT, MPI_INT, "ferry-wide-c", MPI_INFO_NULL);
    if (rank == 0)
        CHECK_OK(MPI_File_write_at(fh, 0, v, 3, MPI_INT, &st), "write through ferry-wide-c");
    MPI_File_sync(fh);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_File_sync(fh);
    MPI_File_get_size(fh, &bytes);
    CHECK(bytes == 24, "3 ints take %lld bytes under ferry-wide-c", (long long) bytes);
    CHECK_OK(MPI_File_read_at(fh, 0, back, 3, MPI_INT, &st), "read through ferry-wide-c");
    CHECK(back[0] == 1 && back[1] == -2 && back[2] == 300000, "ferry-wide-c values %d %d %d",
          back[0], back[1], back[2]);
    MPI_File_close(&fh);
}

static void disconnect(int rank, int size)
{
    MPI_Comm dup;
    MPI_Request req;
    int x = rank, y = -1;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    MPI_Irecv(&y, 1, MPI_INT, (rank + size - 1) % size, 0, dup, &req);
    MPI_Send(&x, 1, MPI_INT, (rank + 1) % size, 0, dup);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    CHECK_OK(MPI_Comm_disconnect(&dup), "MPI_Comm_disconnect");
    CHECK(dup == MPI_COMM_NULL, "MPI_Comm_disconnect leaves MPI_COMM_NULL");
    CHECK(y == (rank + size - 1) % size, "message before the disconnect: %d", y);
}

static void reduce_local(void)
{
    int a[3] = {1, 2, 3}, b[3] = {10, 20, 30};
    CHECK_OK(MPI_Reduce_local(a, b, 3, MPI_INT, MPI_SUM), "MPI_Reduce_local");
    CHECK(b[0] == 11 && b[2] == 33, "MPI_Reduce_local result %d %d", b[0], b[2]);
    int rc = MPI_Reduce_local(MPI_IN_PLACE, b, 3, MPI_INT, MPI_SUM);
    CHECK_CLASS(rc, MPI_ERR_BUFFER, "MPI_IN_PLACE as inbuf");
    rc = MPI_Reduce_local(a, MPI_IN_PLACE, 3, MPI_INT, MPI_SUM);
    CHECK_CLASS(rc, MPI_ERR_BUFFER, "MPI_IN_PLACE as inoutbuf");
    rc = MPI_Reduce_local(b, b, 3, MPI_INT, MPI_SUM);
    CHECK_CLASS(rc, MPI_ERR_BUFFER, "the same buffer twice");
    CHECK_OK(MPI_Reduce_local(b, b, 0, MPI_INT, MPI_SUM), "zero elements, same buffer");
}

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    handles();
    rma_large_count(rank, size);
    rma_errors(rank, size);
    op_create_c(rank, size);
    datatypes_c();
    files_c(rank, size);
    if (argc > 1 && strcmp(argv[1], "user") == 0)
        datarep_c(rank);
    disconnect(rank, size);
    reduce_local();
    return finish();
}
