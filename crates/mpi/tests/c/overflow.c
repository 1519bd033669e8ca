/* count × extent and count × size that overflow the address space or the output are errors,
 * not crashes: a type resized to an extent of INT64_MAX sent, received, packed, broadcast or
 * placed by displacement returns MPI_ERR_COUNT before any memory is touched; a pack size that
 * does not fit its int returns MPI_ERR_VALUE_TOO_LARGE. The next calls work. Two processes. */
#include "mtest.h"
#include <limits.h>
#include <stdint.h>

#define E(cls, call) CHECK_CLASS((call), cls, #call)

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
    int peer = (rank + 1) % size;
    int buf[16] = {0}, out[16] = {0};
    char packed[256];
    MPI_Datatype huge, back;
    MPI_Type_create_resized(MPI_INT, 0, INT64_MAX, &huge);
    MPI_Type_commit(&huge);
    /* A negative extent walks down from the buffer: as far past the address space. */
    MPI_Type_create_resized(MPI_INT, 0, -INT64_MAX, &back);
    MPI_Type_commit(&back);
    MPI_Request req = MPI_REQUEST_NULL;
    int pos = 0, psize = 0;
    for (int k = 0; k < 2; k++) {
        MPI_Datatype t = k ? back : huge;
        E(MPI_ERR_COUNT, MPI_Send(buf, 3, t, peer, 0, MPI_COMM_WORLD));
        E(MPI_ERR_COUNT, MPI_Recv(buf, 3, t, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        E(MPI_ERR_COUNT, MPI_Isend(buf, 3, t, peer, 0, MPI_COMM_WORLD, &req));
        E(MPI_ERR_COUNT, MPI_Irecv(buf, 3, t, peer, 0, MPI_COMM_WORLD, &req));
        pos = 0;
        E(MPI_ERR_COUNT, MPI_Pack(buf, 3, t, packed, sizeof packed, &pos, MPI_COMM_WORLD));
        pos = 0;
        E(MPI_ERR_COUNT, MPI_Unpack(packed, sizeof packed, &pos, out, 3, t, MPI_COMM_WORLD));
        E(MPI_ERR_COUNT, MPI_Bcast(buf, 3, t, 0, MPI_COMM_WORLD));
    }
    /* One element of the huge type is fine: its data is one int. */
    pos = 0;
    E(MPI_SUCCESS, MPI_Pack(buf, 1, huge, packed, sizeof packed, &pos, MPI_COMM_WORLD));
    CHECK(pos == (int)sizeof(int), "one element packs to %d bytes", pos);
    /* A displacement of a v-collective times a huge extent (on one process: no peer is left
     * with a message the root refused). */
    int counts[1] = {1}, displs[1] = {2};
    E(MPI_ERR_COUNT, MPI_Gatherv(buf, 1, MPI_INT, out, counts, displs, huge, 0, MPI_COMM_SELF));
    E(MPI_ERR_COUNT, MPI_Scatterv(buf, counts, displs, huge, out, 1, MPI_INT, 0, MPI_COMM_SELF));
    /* A pack size beyond an int. */
    E(MPI_ERR_VALUE_TOO_LARGE, MPI_Pack_size(INT_MAX, MPI_DOUBLE, MPI_COMM_WORLD, &psize));
    MPI_Count csize = 0;
    E(MPI_SUCCESS, MPI_Pack_size_c(INT_MAX, MPI_DOUBLE, MPI_COMM_WORLD, &csize));
    CHECK(csize == (MPI_Count)INT_MAX * 8, "Pack_size_c gave %lld", (long long)csize);
    E(MPI_ERR_COUNT, MPI_Pack_size_c(INT64_MAX, MPI_DOUBLE, MPI_COMM_WORLD, &csize));
    MPI_Type_free(&huge);
    MPI_Type_free(&back);
    int v = 1, w = 0;
    int rc = MPI_Allreduce(&v, &w, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    CHECK(rc == MPI_SUCCESS && w == size, "Allreduce after the errors: %d", w);
    return finish();
}
