/* More argument errors under MPI_ERRORS_RETURN: aliased send and receive buffers in
 * reductions (MPI_ERR_BUFFER), negative counts in collectives, datatype and
 * op errors in collectives and Reduce_local, freeing null handles, MPI_Get_count with
 * MPI_DATATYPE_NULL. The job must go
 * on normally afterwards. Two processes. */
#include "mtest.h"

int main(int argc, char **argv)
{
    int rank, size, rc, a[8] = {0}, b[8] = {0};
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);

    /* Freeing null handles. */
    MPI_Comm c, c_copy;
    MPI_Comm_dup(MPI_COMM_WORLD, &c);
    c_copy = c;
    MPI_Comm_free(&c);
    rc = MPI_Comm_free(&c);
    CHECK_CLASS(rc, MPI_ERR_COMM, "Comm_free of MPI_COMM_NULL");
    rc = MPI_Allreduce(a, a, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    CHECK_CLASS(rc, MPI_ERR_BUFFER, "Allreduce with aliased buffers");
    rc = MPI_Scan(a, a, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    CHECK_CLASS(rc, MPI_ERR_BUFFER, "Scan with aliased buffers");
    rc = MPI_Exscan(a, a, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    CHECK_CLASS(rc, MPI_ERR_BUFFER, "Exscan with aliased buffers");
    rc = MPI_Bcast(a, -1, MPI_INT, 0, MPI_COMM_WORLD);
    CHECK_CLASS(rc, MPI_ERR_COUNT, "Bcast count -1");
    rc = MPI_Gather(a, -1, MPI_INT, b, 1, MPI_INT, 0, MPI_COMM_WORLD);
    CHECK_CLASS(rc, MPI_ERR_COUNT, "Gather sendcount -1");
    rc = MPI_Bcast(a, 1, MPI_DATATYPE_NULL, 0, MPI_COMM_WORLD);
    CHECK_CLASS(rc, MPI_ERR_TYPE, "Bcast MPI_DATATYPE_NULL");
    rc = MPI_Alltoall(a, 1, MPI_INT, b, 1, MPI_DATATYPE_NULL, MPI_COMM_WORLD);
    CHECK_CLASS(rc, MPI_ERR_TYPE, "Alltoall recvtype MPI_DATATYPE_NULL");
    rc = MPI_Reduce_local(a, b, 1, MPI_FLOAT, MPI_BOR);
    CHECK_CLASS(rc, MPI_ERR_OP, "Reduce_local BOR on MPI_FLOAT");
    rc = MPI_Reduce_local(a, b, 1, MPI_INT, MPI_OP_NULL);
    CHECK_CLASS(rc, MPI_ERR_OP, "Reduce_local MPI_OP_NULL");
    rc = MPI_Scan(a, b, 1, MPI_INT, MPI_OP_NULL, MPI_COMM_WORLD);
    CHECK_CLASS(rc, MPI_ERR_OP, "Scan MPI_OP_NULL");
    rc = MPI_Barrier(MPI_COMM_NULL);
    CHECK_CLASS(rc, MPI_ERR_COMM, "Barrier MPI_COMM_NULL");

    MPI_Datatype t, t_copy;
    MPI_Type_contiguous(2, MPI_INT, &t);
    MPI_Type_commit(&t);
    t_copy = t;
    MPI_Type_free(&t);
    rc = MPI_Type_free(&t);
    CHECK_CLASS(rc, MPI_ERR_TYPE, "Type_free of MPI_DATATYPE_NULL");
    (void)t_copy;
    (void)c_copy;
    int sz;
    MPI_Group g;
    MPI_Comm_group(MPI_COMM_WORLD, &g);
    MPI_Group_free(&g);
    CHECK(g == MPI_GROUP_NULL, "Group_free did not set MPI_GROUP_NULL");
    rc = MPI_Group_size(g, &sz);
    CHECK_CLASS(rc, MPI_ERR_GROUP, "Group_size of MPI_GROUP_NULL");
    MPI_Status st;
    MPI_Recv(a, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &st);
    rc = MPI_Get_count(&st, MPI_DATATYPE_NULL, &sz);
    CHECK_CLASS(rc, MPI_ERR_TYPE, "Get_count with MPI_DATATYPE_NULL");
    /* Still fine. */
    int v = 1, w = 0;
    rc = MPI_Allreduce(&v, &w, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    CHECK(rc == MPI_SUCCESS && w == size, "Allreduce after the errors: %d", w);
    return finish();
}
