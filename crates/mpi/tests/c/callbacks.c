/* MPI calls from inside callbacks other than reduction ops: an error handler that asks for
 * the error string and the communicator's rank/size, attribute copy and delete callbacks that
 * query the communicator and other attributes, and a delete callback of a datatype's
 * communicator-free path. Two processes. */
#include "mtest.h"

static int handled, handler_ok;

static void handler(MPI_Comm *comm, int *code, ...)
{
    char s[MPI_MAX_ERROR_STRING];
    int len = 0, r = -1, n = -1, cls = -1;
    handled++;
    handler_ok = MPI_Error_string(*code, s, &len) == MPI_SUCCESS && len > 0 &&
                 MPI_Error_class(*code, &cls) == MPI_SUCCESS && cls == MPI_ERR_TAG &&
                 MPI_Comm_rank(*comm, &r) == MPI_SUCCESS && r == mt_rank() &&
                 MPI_Comm_size(*comm, &n) == MPI_SUCCESS && n >= 1;
}

static int copy_ok = 1, delete_ok = 1, copies, deletes;

static int copy_fn(MPI_Comm c, int key, void *extra, void *in, void *out, int *flag)
{
    (void)extra;
    int r = -1, fl = 0;
    void *v = NULL;
    copies++;
    if (MPI_Comm_rank(c, &r) != MPI_SUCCESS || r != mt_rank())
        copy_ok = 0;
    if (MPI_Comm_get_attr(c, key, &v, &fl) != MPI_SUCCESS || !fl || v != in)
        copy_ok = 0;
    *(void **)out = in;
    *flag = 1;
    return MPI_SUCCESS;
}

static int delete_fn(MPI_Comm c, int key, void *val, void *extra)
{
    (void)key;
    (void)val;
    (void)extra;
    int n = -1;
    deletes++;
    if (MPI_Comm_size(c, &n) != MPI_SUCCESS || n < 1)
        delete_ok = 0;
    return MPI_SUCCESS;
}

int main(int argc, char **argv)
{
    int rank, buf = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);

    MPI_Errhandler eh;
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    MPI_Comm_create_errhandler(handler, &eh);
    MPI_Comm_set_errhandler(dup, eh);
    MPI_Send(&buf, 1, MPI_INT, 0, -9, dup);
    CHECK(handled == 1 && handler_ok, "error handler calling MPI: called %d ok %d", handled,
          handler_ok);
    MPI_Errhandler_free(&eh);

    int key;
    MPI_Comm_create_keyval(copy_fn, delete_fn, &key, NULL);
    MPI_Comm_set_attr(dup, key, &buf);
    MPI_Comm d2;
    MPI_Comm_dup(dup, &d2);
    CHECK(copies == 1 && copy_ok, "copy callback calling MPI: copies %d ok %d", copies, copy_ok);
    MPI_Comm_free(&d2);
    MPI_Comm_delete_attr(dup, key);
    CHECK(deletes == 2 && delete_ok, "delete callback calling MPI: deletes %d ok %d", deletes,
          delete_ok);
    MPI_Comm_free_keyval(&key);
    MPI_Comm_free(&dup);
    return finish();
}
