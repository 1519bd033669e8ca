/* MPI calls from inside a user reduction function (MPI 4.1 §6.9.5): the function gets the
 * datatype handle so that it can query it (`opcallback query`: Type_size, Type_get_envelope,
 * Type_get_extent inside the op, in Allreduce, Reduce, Scan and Reduce_local), and "MPI_ABORT
 * may be called inside the function in case of an error" (`opcallback abort`: the job must
 * end with an error, cleanly). Two or more processes. */
#include "mtest.h"

static int queries_ok = 1, abort_mode;

static void op(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    if (abort_mode)
        MPI_Abort(MPI_COMM_WORLD, 3);
    int sz = -1, ni, na, nd, comb;
    MPI_Aint lb, ex;
    MPI_Type_size(*dt, &sz);
    MPI_Type_get_envelope(*dt, &ni, &na, &nd, &comb);
    MPI_Type_get_extent(*dt, &lb, &ex);
    if (sz != 2 * (int)sizeof(int) || comb != MPI_COMBINER_CONTIGUOUS || ex != sz)
        queries_ok = 0;
    int *a = in, *b = inout;
    for (int i = 0; i < 2 * *len; i++)
        b[i] += a[i];
}

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    abort_mode = argc > 1 && !strcmp(argv[1], "abort");
    MPI_Datatype pair;
    MPI_Type_contiguous(2, MPI_INT, &pair);
    MPI_Type_commit(&pair);
    MPI_Op o;
    MPI_Op_create(op, 1, &o);
    int in[2] = {rank, 1}, out[2] = {0, 0};
    MPI_Allreduce(in, out, 1, pair, o, MPI_COMM_WORLD);
    if (abort_mode) {
        printf("survived abort\n");
        MPI_Finalize();
        return 0;
    }
    CHECK(out[0] == size * (size - 1) / 2 && out[1] == size, "Allreduce %d %d", out[0], out[1]);
    MPI_Reduce(in, out, 1, pair, o, 0, MPI_COMM_WORLD);
    MPI_Scan(in, out, 1, pair, o, MPI_COMM_WORLD);
    CHECK(out[1] == rank + 1, "Scan %d", out[1]);
    int x[2] = {1, 2};
    MPI_Reduce_local(in, x, 1, pair, o);
    CHECK(x[0] == rank + 1 && x[1] == 3, "Reduce_local %d %d", x[0], x[1]);
    CHECK(queries_ok, "datatype queries inside the op gave wrong answers");
    MPI_Op_free(&o);
    MPI_Type_free(&pair);
    return finish();
}
