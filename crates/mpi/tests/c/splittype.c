/* MPI_Comm_split_type beyond MPI_COMM_TYPE_SHARED (MPI 4.1 §7.4.2): MPI_COMM_TYPE_HW_GUIDED
 * with info mpi_hw_resource_type = "mpi_shared_memory" gives the shared-memory communicator;
 * with an unknown resource type, MPI_COMM_NULL; MPI_COMM_TYPE_HW_UNGUIDED gives a strict
 * subset of the input communicator or MPI_COMM_NULL; the key orders ranks. Four processes. */
#include "mtest.h"

int main(int argc, char **argv)
{
    int rank, size, n, r, res;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Info info;
    MPI_Comm c;

    MPI_Info_create(&info);
    MPI_Info_set(info, "mpi_hw_resource_type", "mpi_shared_memory");
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_HW_GUIDED, size - rank, info, &c);
    CHECK(c != MPI_COMM_NULL, "HW_GUIDED mpi_shared_memory gave MPI_COMM_NULL");
    if (c != MPI_COMM_NULL) {
        MPI_Comm_size(c, &n);
        MPI_Comm_rank(c, &r);
        CHECK(n == size && r == size - 1 - rank, "HW_GUIDED shared: size %d rank %d", n, r);
        MPI_Comm_free(&c);
    }
    MPI_Info_set(info, "mpi_hw_resource_type", "ferry_no_such_resource");
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_HW_GUIDED, 0, info, &c);
    CHECK(c == MPI_COMM_NULL, "HW_GUIDED with an unknown resource gave a communicator");
    if (c != MPI_COMM_NULL)
        MPI_Comm_free(&c);
    MPI_Info_free(&info);

    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_HW_UNGUIDED, 0, MPI_INFO_NULL, &c);
    if (c != MPI_COMM_NULL) {
        MPI_Comm_size(c, &n);
        CHECK(n < size, "HW_UNGUIDED gave a communicator of %d, not a strict subset of %d", n,
              size);
        MPI_Comm_compare(c, MPI_COMM_WORLD, &res);
        CHECK(res == MPI_UNEQUAL || size == 1, "HW_UNGUIDED compare %d", res);
        MPI_Comm_free(&c);
    }
    return finish();
}
