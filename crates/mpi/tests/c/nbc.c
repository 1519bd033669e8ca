/* Nonblocking collectives (MPI 4.1 §6.12): Ibarrier, Ibcast, Iallreduce, Ireduce, Igather,
 * Iscatter, Iallgather, Ialltoall all outstanding at once on one communicator (matched in
 * order of the calls), overlapped with a point-to-point ring on the same communicator,
 * completed with Waitall/Testall/Waitany; then nonblocking and blocking collectives on split
 * and dup communicators interleaved. Four processes. */
#include "mtest.h"

#define MAXP 8

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int right = (rank + 1) % size, left = (rank + size - 1) % size, root = size / 2;

    for (int round = 0; round < 20; round++) {
        MPI_Request r[12];
        int bc[4], ar[2], red = -1, gat[MAXP], sca = -1, scs[MAXP], ag[MAXP], a2s[MAXP],
                       a2r[MAXP], bc2 = -1, ring_in = -1, ring_out = rank * 100 + round;
        for (int i = 0; i < 4; i++)
            bc[i] = rank == root ? round * 4 + i : -1;
        int arin[2] = {rank, round};
        for (int j = 0; j < size; j++) {
            scs[j] = rank == 0 ? 10 * j + round : -1;
            a2s[j] = rank * 100 + j;
            gat[j] = ag[j] = a2r[j] = -1;
        }
        int n = 0;
        MPI_Irecv(&ring_in, 1, MPI_INT, left, round, MPI_COMM_WORLD, &r[n++]);
        MPI_Ibarrier(MPI_COMM_WORLD, &r[n++]);
        MPI_Ibcast(bc, 4, MPI_INT, root, MPI_COMM_WORLD, &r[n++]);
        MPI_Iallreduce(arin, ar, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &r[n++]);
        MPI_Ireduce(&rank, &red, 1, MPI_INT, MPI_MAX, root, MPI_COMM_WORLD, &r[n++]);
        MPI_Isend(&ring_out, 1, MPI_INT, right, round, MPI_COMM_WORLD, &r[n++]);
        MPI_Igather(&rank, 1, MPI_INT, gat, 1, MPI_INT, 0, MPI_COMM_WORLD, &r[n++]);
        MPI_Iscatter(scs, 1, MPI_INT, &sca, 1, MPI_INT, 0, MPI_COMM_WORLD, &r[n++]);
        MPI_Iallgather(&rank, 1, MPI_INT, ag, 1, MPI_INT, MPI_COMM_WORLD, &r[n++]);
        MPI_Ialltoall(a2s, 1, MPI_INT, a2r, 1, MPI_INT, MPI_COMM_WORLD, &r[n++]);
        int bsrc = (round * 7) % size;
        if (rank == bsrc)
            bc2 = round;
        MPI_Ibcast(&bc2, 1, MPI_INT, bsrc, MPI_COMM_WORLD, &r[n++]);
        if (round % 3 == 0)
            MPI_Waitall(n, r, MPI_STATUSES_IGNORE);
        else if (round % 3 == 1) {
            int flag = 0;
            while (!flag)
                MPI_Testall(n, r, &flag, MPI_STATUSES_IGNORE);
        } else {
            for (int k = 0; k < n; k++) {
                int idx;
                MPI_Waitany(n, r, &idx, MPI_STATUS_IGNORE);
                CHECK(idx != MPI_UNDEFINED, "Waitany gave MPI_UNDEFINED after %d", k);
            }
        }
        CHECK(ring_in == left * 100 + round, "round %d ring got %d", round, ring_in);
        for (int i = 0; i < 4; i++)
            CHECK(bc[i] == round * 4 + i, "round %d Ibcast [%d] = %d", round, i, bc[i]);
        CHECK(ar[0] == size * (size - 1) / 2 && ar[1] == size * round, "round %d Iallreduce",
              round);
        if (rank == root)
            CHECK(red == size - 1, "round %d Ireduce %d", round, red);
        CHECK(sca == 10 * rank + round, "round %d Iscatter %d", round, sca);
        CHECK(bc2 == round, "round %d second Ibcast %d", round, bc2);
        for (int j = 0; j < size; j++) {
            if (rank == 0)
                CHECK(gat[j] == j, "round %d Igather [%d] = %d", round, j, gat[j]);
            CHECK(ag[j] == j, "round %d Iallgather [%d] = %d", round, j, ag[j]);
            CHECK(a2r[j] == j * 100 + rank, "round %d Ialltoall [%d] = %d", round, j, a2r[j]);
        }
        if (errs)
            break;
    }

    /* Split and dup communicators, collectives interleaved. */
    MPI_Comm half, dup, dup_half;
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    MPI_Comm_dup(half, &dup_half);
    int hrank, hsize;
    MPI_Comm_rank(half, &hrank);
    MPI_Comm_size(half, &hsize);
    for (int round = 0; round < 10; round++) {
        MPI_Request q[3];
        int a = rank == 0 ? round : -1, b = -1, c = -1, d = -1, e = -1;
        MPI_Ibcast(&a, 1, MPI_INT, 0, dup, &q[0]);
        MPI_Iallreduce(&rank, &b, 1, MPI_INT, MPI_SUM, half, &q[1]);
        MPI_Allreduce(&hrank, &c, 1, MPI_INT, MPI_MAX, dup_half);
        MPI_Iallreduce(&rank, &d, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD, &q[2]);
        MPI_Allreduce(&rank, &e, 1, MPI_INT, MPI_SUM, dup);
        MPI_Waitall(3, q, MPI_STATUSES_IGNORE);
        int hsum = 0;
        for (int r = rank % 2; r < size; r += 2)
            hsum += r;
        CHECK(a == round && b == hsum && c == hsize - 1 && d == 0 &&
                  e == size * (size - 1) / 2,
              "round %d interleaved: %d %d %d %d %d", round, a, b, c, d, e);
        MPI_Barrier(half);
    }
    MPI_Comm_free(&dup_half);
    MPI_Comm_free(&dup);
    MPI_Comm_free(&half);
    return finish();
}
