/* MPI_IN_PLACE in every collective that allows it (MPI 4.1 §6): Reduce (root), Allreduce,
 * Gather/Gatherv (root), Scatter/Scatterv (root), Allgather/Allgatherv, Alltoall/Alltoallv/
 * Alltoallw, Reduce_scatter/Reduce_scatter_block, Scan, Exscan, and the nonblocking Iallreduce.
 * Four processes (works with any count up to 16). */
#include "mtest.h"

int main(int argc, char **argv)
{
    int rank, size, root = 1;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (root >= size)
        root = 0;
    int buf[64], cnts[16], displs[16], sum = size * (size - 1) / 2;

    /* Allreduce */
    for (int i = 0; i < 3; i++)
        buf[i] = rank + i;
    MPI_Allreduce(MPI_IN_PLACE, buf, 3, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    for (int i = 0; i < 3; i++)
        CHECK(buf[i] == sum + size * i, "Allreduce[%d] = %d", i, buf[i]);

    /* Reduce: in place at the root only */
    for (int i = 0; i < 3; i++)
        buf[i] = rank * (i + 1);
    if (rank == root) {
        MPI_Reduce(MPI_IN_PLACE, buf, 3, MPI_INT, MPI_MAX, root, MPI_COMM_WORLD);
        for (int i = 0; i < 3; i++)
            CHECK(buf[i] == (size - 1) * (i + 1), "Reduce[%d] = %d", i, buf[i]);
    } else
        MPI_Reduce(buf, NULL, 3, MPI_INT, MPI_MAX, root, MPI_COMM_WORLD);

    /* Gather: the root's own part is already in place */
    for (int i = 0; i < 2 * size; i++)
        buf[i] = -1;
    buf[2 * rank] = rank * 10;
    buf[2 * rank + 1] = rank * 10 + 1;
    if (rank == root) {
        MPI_Gather(MPI_IN_PLACE, 2, MPI_INT, buf, 2, MPI_INT, root, MPI_COMM_WORLD);
        for (int i = 0; i < 2 * size; i++)
            CHECK(buf[i] == (i / 2) * 10 + i % 2, "Gather[%d] = %d", i, buf[i]);
    } else
        MPI_Gather(&buf[2 * rank], 2, MPI_INT, NULL, 0, MPI_INT, root, MPI_COMM_WORLD);

    /* Gatherv: rank r gives r+1 ints at displacement r*(r+1)/2 */
    int total = 0;
    for (int r = 0; r < size; r++) {
        cnts[r] = r + 1;
        displs[r] = total;
        total += r + 1;
    }
    for (int i = 0; i < total; i++)
        buf[i] = -1;
    for (int i = 0; i <= rank; i++)
        buf[displs[rank] + i] = rank * 100 + i;
    if (rank == root) {
        MPI_Gatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, cnts, displs, MPI_INT, root,
                    MPI_COMM_WORLD);
        for (int r = 0; r < size; r++)
            for (int i = 0; i <= r; i++)
                CHECK(buf[displs[r] + i] == r * 100 + i, "Gatherv from %d [%d] = %d", r, i,
                      buf[displs[r] + i]);
    } else
        MPI_Gatherv(&buf[displs[rank]], rank + 1, MPI_INT, NULL, NULL, NULL, MPI_INT, root,
                    MPI_COMM_WORLD);

    /* Scatter: the root keeps its part where it is */
    for (int i = 0; i < 2 * size; i++)
        buf[i] = rank == root ? 1000 + i : -1;
    if (rank == root) {
        MPI_Scatter(buf, 2, MPI_INT, MPI_IN_PLACE, 2, MPI_INT, root, MPI_COMM_WORLD);
        for (int i = 0; i < 2 * size; i++)
            CHECK(buf[i] == 1000 + i, "Scatter changed the root's buffer at %d", i);
    } else {
        int two[2] = {-1, -1};
        MPI_Scatter(NULL, 0, MPI_INT, two, 2, MPI_INT, root, MPI_COMM_WORLD);
        CHECK(two[0] == 1000 + 2 * rank && two[1] == 1001 + 2 * rank, "Scatter got %d %d",
              two[0], two[1]);
    }

    /* Scatterv */
    for (int i = 0; i < total; i++)
        buf[i] = rank == root ? 2000 + i : -1;
    if (rank == root)
        MPI_Scatterv(buf, cnts, displs, MPI_INT, MPI_IN_PLACE, 0, MPI_INT, root, MPI_COMM_WORLD);
    else {
        int got[16];
        MPI_Scatterv(NULL, NULL, NULL, MPI_INT, got, rank + 1, MPI_INT, root, MPI_COMM_WORLD);
        for (int i = 0; i <= rank; i++)
            CHECK(got[i] == 2000 + displs[rank] + i, "Scatterv[%d] = %d", i, got[i]);
    }

    /* Allgather / Allgatherv */
    for (int i = 0; i < 2 * size; i++)
        buf[i] = -1;
    buf[2 * rank] = rank;
    buf[2 * rank + 1] = -rank;
    MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, 2, MPI_INT, MPI_COMM_WORLD);
    for (int r = 0; r < size; r++)
        CHECK(buf[2 * r] == r && buf[2 * r + 1] == -r, "Allgather from %d: %d %d", r, buf[2 * r],
              buf[2 * r + 1]);
    for (int i = 0; i < total; i++)
        buf[i] = -1;
    for (int i = 0; i <= rank; i++)
        buf[displs[rank] + i] = rank * 7 + i;
    MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, cnts, displs, MPI_INT,
                   MPI_COMM_WORLD);
    for (int r = 0; r < size; r++)
        for (int i = 0; i <= r; i++)
            CHECK(buf[displs[r] + i] == r * 7 + i, "Allgatherv from %d [%d] = %d", r, i,
                  buf[displs[r] + i]);

    /* Alltoall: block j goes to rank j */
    for (int j = 0; j < size; j++) {
        buf[2 * j] = rank * 100 + j;
        buf[2 * j + 1] = -(rank * 100 + j);
    }
    MPI_Alltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, 2, MPI_INT, MPI_COMM_WORLD);
    for (int j = 0; j < size; j++)
        CHECK(buf[2 * j] == j * 100 + rank && buf[2 * j + 1] == -(j * 100 + rank),
              "Alltoall from %d: %d %d", j, buf[2 * j], buf[2 * j + 1]);

    /* Alltoallv: rank i sends i+j+1... counts must be symmetric: c[i][j] = i + j + 1 */
    int rc[16], rd[16], off = 0;
    for (int j = 0; j < size; j++) {
        rc[j] = rank + j + 1;
        rd[j] = off;
        off += rc[j];
    }
    for (int j = 0; j < size; j++)
        for (int k = 0; k < rc[j]; k++)
            buf[rd[j] + k] = rank * 1000 + j * 10 + k;
    MPI_Alltoallv(MPI_IN_PLACE, NULL, NULL, MPI_DATATYPE_NULL, buf, rc, rd, MPI_INT,
                  MPI_COMM_WORLD);
    for (int j = 0; j < size; j++)
        for (int k = 0; k < rc[j]; k++)
            CHECK(buf[rd[j] + k] == j * 1000 + rank * 10 + k, "Alltoallv from %d [%d] = %d", j,
                  k, buf[rd[j] + k]);

    /* Alltoallw with byte displacements */
    MPI_Datatype types[16];
    int bd[16];
    for (int j = 0; j < size; j++) {
        types[j] = MPI_INT;
        bd[j] = rd[j] * (int)sizeof(int);
        for (int k = 0; k < rc[j]; k++)
            buf[rd[j] + k] = rank * 1000 + j * 10 + k + 5;
    }
    MPI_Alltoallw(MPI_IN_PLACE, NULL, NULL, NULL, buf, rc, bd, types, MPI_COMM_WORLD);
    for (int j = 0; j < size; j++)
        for (int k = 0; k < rc[j]; k++)
            CHECK(buf[rd[j] + k] == j * 1000 + rank * 10 + k + 5, "Alltoallw from %d [%d] = %d",
                  j, k, buf[rd[j] + k]);

    /* Reduce_scatter: rank r gets r+1 results */
    for (int i = 0; i < total; i++)
        buf[i] = rank + i;
    MPI_Reduce_scatter(MPI_IN_PLACE, buf, cnts, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    for (int i = 0; i <= rank; i++)
        CHECK(buf[i] == sum + size * (displs[rank] + i), "Reduce_scatter[%d] = %d", i, buf[i]);
    for (int i = 0; i < 2 * size; i++)
        buf[i] = rank * i;
    MPI_Reduce_scatter_block(MPI_IN_PLACE, buf, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    for (int i = 0; i < 2; i++)
        CHECK(buf[i] == sum * (2 * rank + i), "Reduce_scatter_block[%d] = %d", i, buf[i]);

    /* Scan / Exscan */
    buf[0] = rank + 1;
    buf[1] = 2;
    MPI_Scan(MPI_IN_PLACE, buf, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    CHECK(buf[0] == (rank + 1) * (rank + 2) / 2 && buf[1] == 2 * (rank + 1), "Scan %d %d",
          buf[0], buf[1]);
    buf[0] = rank + 1;
    buf[1] = -77;
    MPI_Exscan(MPI_IN_PLACE, buf, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank > 0)
        CHECK(buf[0] == rank * (rank + 1) / 2, "Exscan %d", buf[0]);
    CHECK(buf[1] == -77, "Exscan wrote past count");

    /* Iallreduce in place */
    MPI_Request r;
    buf[0] = rank;
    MPI_Iallreduce(MPI_IN_PLACE, buf, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &r);
    MPI_Wait(&r, MPI_STATUS_IGNORE);
    CHECK(buf[0] == sum, "Iallreduce %d", buf[0]);
    return finish();
}
