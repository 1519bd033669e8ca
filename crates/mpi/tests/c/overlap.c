/* Send-side overlap is allowed (only receive buffers must not overlap, MPI 4.1 §6.6): Scatterv
 * and Alltoallv reading the same send data for every process (all displacements 0), Alltoallw
 * with one send area for all peers, Allgatherv into displacements in reverse order, and
 * Gatherv/Scatterv whose block i is at a displacement given in bytes by a resized type.
 * Three processes. */
#include "mtest.h"

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int cnt[16], dsp[16], rcnt[16], rdsp[16], src[8] = {5, 6, 7, 8, 9, 10, 11, 12}, dst[64];

    for (int r = 0; r < size; r++) {
        cnt[r] = 3;
        dsp[r] = 0;
    }
    int three[3] = {-1, -1, -1};
    MPI_Scatterv(src, cnt, dsp, MPI_INT, three, 3, MPI_INT, 0, MPI_COMM_WORLD);
    CHECK(three[0] == 5 && three[2] == 7, "Scatterv with overlapping sends: %d %d", three[0],
          three[2]);

    for (int r = 0; r < size; r++) {
        cnt[r] = 2;
        dsp[r] = 1;
        rcnt[r] = 2;
        rdsp[r] = 2 * r;
    }
    for (int i = 0; i < 8; i++)
        src[i] = rank * 10 + i;
    MPI_Alltoallv(src, cnt, dsp, MPI_INT, dst, rcnt, rdsp, MPI_INT, MPI_COMM_WORLD);
    for (int r = 0; r < size; r++)
        CHECK(dst[2 * r] == r * 10 + 1 && dst[2 * r + 1] == r * 10 + 2,
              "Alltoallv with overlapping sends from %d: %d %d", r, dst[2 * r], dst[2 * r + 1]);

    MPI_Datatype ty[16];
    int bd[16], rbd[16];
    for (int r = 0; r < size; r++) {
        ty[r] = MPI_INT;
        bd[r] = 4;
        rbd[r] = 8 * r;
    }
    MPI_Alltoallw(src, cnt, bd, ty, dst, rcnt, rbd, ty, MPI_COMM_WORLD);
    for (int r = 0; r < size; r++)
        CHECK(dst[2 * r] == r * 10 + 1 && dst[2 * r + 1] == r * 10 + 2,
              "Alltoallw with overlapping sends from %d", r);

    for (int r = 0; r < size; r++) {
        rcnt[r] = 1;
        rdsp[r] = size - 1 - r;
    }
    MPI_Allgatherv(&rank, 1, MPI_INT, dst, rcnt, rdsp, MPI_INT, MPI_COMM_WORLD);
    for (int r = 0; r < size; r++)
        CHECK(dst[size - 1 - r] == r, "Allgatherv reversed: [%d] = %d", size - 1 - r,
              dst[size - 1 - r]);

    /* Gatherv of pairs into slots 3 ints apart via a type of extent 1 int */
    MPI_Datatype pair, pair1;
    MPI_Type_contiguous(2, MPI_INT, &pair);
    MPI_Type_create_resized(pair, 0, sizeof(int), &pair1);
    MPI_Type_commit(&pair1);
    for (int r = 0; r < size; r++) {
        rcnt[r] = 1;
        rdsp[r] = 3 * r;
    }
    for (int i = 0; i < 64; i++)
        dst[i] = -1;
    int mine[2] = {rank, -rank};
    MPI_Gatherv(mine, 2, MPI_INT, dst, rcnt, rdsp, pair1, size - 1, MPI_COMM_WORLD);
    if (rank == size - 1)
        for (int r = 0; r < size; r++)
            CHECK(dst[3 * r] == r && dst[3 * r + 1] == -r && dst[3 * r + 2] == -1,
                  "Gatherv with a resized pair from %d: %d %d %d", r, dst[3 * r], dst[3 * r + 1],
                  dst[3 * r + 2]);
    MPI_Scatterv(dst, rcnt, rdsp, pair1, mine, 2, MPI_INT, size - 1, MPI_COMM_WORLD);
    CHECK(mine[0] == rank && mine[1] == -rank, "Scatterv with a resized pair: %d %d", mine[0],
          mine[1]);
    MPI_Type_free(&pair);
    MPI_Type_free(&pair1);
    return finish();
}
