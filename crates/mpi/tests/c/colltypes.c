/* Collectives with non-contiguous datatypes (MPI 4.1 §6, type signatures must match, layouts
 * need not): Bcast of a vector, Gather/Scatter of matrix columns through a resized vector,
 * Allgather into columns, Alltoall of vectors against contiguous ints, the v-variants with
 * derived types, and Alltoallw with a different type per peer. Four processes. */
#include "mtest.h"

#define MAXP 8

int main(int argc, char **argv)
{
    int rank, size, root;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    root = size - 1;
    const int R = 3; /* rows of a R x size matrix, row-major */
    int mat[3 * MAXP], col[3];

    /* column type: R ints with stride size, resized to one int so that column j is at j */
    MPI_Datatype colv, column;
    MPI_Type_vector(R, 1, size, MPI_INT, &colv);
    MPI_Type_create_resized(colv, 0, sizeof(int), &column);
    MPI_Type_commit(&column);
    MPI_Type_commit(&colv);

    /* Bcast of a vector into contiguous on some ranks, vector on others (same signature). */
    for (int i = 0; i < R * size; i++)
        mat[i] = rank == root ? i : -1;
    if (rank % 2 == 0 && rank != root) {
        int flat[3] = {-1, -1, -1};
        MPI_Bcast(flat, R, MPI_INT, root, MPI_COMM_WORLD);
        for (int i = 0; i < R; i++)
            CHECK(flat[i] == i * size + 1, "Bcast vector->ints [%d] = %d", i, flat[i]);
    } else {
        MPI_Bcast(&mat[1], 1, colv, root, MPI_COMM_WORLD);
        for (int i = 0; i < R * size; i++)
            CHECK(mat[i] == (rank == root || i % size == 1 ? i : -1), "Bcast vector [%d] = %d",
                  i, mat[i]);
    }

    /* Gather column j from rank j. */
    for (int i = 0; i < R; i++)
        col[i] = rank * 10 + i;
    for (int i = 0; i < R * size; i++)
        mat[i] = -1;
    MPI_Gather(col, R, MPI_INT, mat, 1, column, root, MPI_COMM_WORLD);
    if (rank == root)
        for (int i = 0; i < R; i++)
            for (int j = 0; j < size; j++)
                CHECK(mat[i * size + j] == j * 10 + i, "Gather column: mat[%d][%d] = %d", i, j,
                      mat[i * size + j]);

    /* Scatter column j to rank j. */
    for (int i = 0; i < R * size; i++)
        mat[i] = rank == root ? 500 + i : -1;
    col[0] = col[1] = col[2] = -1;
    MPI_Scatter(mat, 1, column, col, R, MPI_INT, root, MPI_COMM_WORLD);
    for (int i = 0; i < R; i++)
        CHECK(col[i] == 500 + i * size + rank, "Scatter column [%d] = %d", i, col[i]);

    /* Allgather into columns. */
    for (int i = 0; i < R; i++)
        col[i] = rank * 10 + i;
    for (int i = 0; i < R * size; i++)
        mat[i] = -1;
    MPI_Allgather(col, R, MPI_INT, mat, 1, column, MPI_COMM_WORLD);
    for (int i = 0; i < R; i++)
        for (int j = 0; j < size; j++)
            CHECK(mat[i * size + j] == j * 10 + i, "Allgather column: mat[%d][%d] = %d", i, j,
                  mat[i * size + j]);

    /* Alltoall: send column j of my matrix to rank j, receive contiguous rows. */
    for (int i = 0; i < R * size; i++)
        mat[i] = rank * 1000 + i;
    int rows[3 * MAXP];
    MPI_Alltoall(mat, 1, column, rows, R, MPI_INT, MPI_COMM_WORLD);
    for (int j = 0; j < size; j++)
        for (int i = 0; i < R; i++)
            CHECK(rows[j * R + i] == j * 1000 + i * size + rank, "Alltoall from %d [%d] = %d", j,
                  i, rows[j * R + i]);
    /* and back: contiguous to columns (the transpose of a transpose) */
    int back[3 * MAXP];
    for (int i = 0; i < R * size; i++)
        back[i] = -1;
    MPI_Alltoall(rows, R, MPI_INT, back, 1, column, MPI_COMM_WORLD);
    for (int i = 0; i < R * size; i++)
        CHECK(back[i] == rank * 1000 + i, "Alltoall back [%d] = %d", i, back[i]);

    /* Gatherv/Scatterv/Allgatherv/Alltoallv with pairs of ints (contiguous derived type) and
     * columns at displacements. */
    MPI_Datatype pair;
    MPI_Type_contiguous(2, MPI_INT, &pair);
    MPI_Type_commit(&pair);
    int cnts[MAXP], displs[MAXP], big[64], mine[16];
    int total = 0;
    for (int r = 0; r < size; r++) {
        cnts[r] = r + 1;
        displs[r] = total;
        total += r + 1;
    }
    for (int i = 0; i < 2 * (rank + 1); i++)
        mine[i] = rank * 100 + i;
    for (int i = 0; i < 64; i++)
        big[i] = -1;
    MPI_Gatherv(mine, 2 * (rank + 1), MPI_INT, big, cnts, displs, pair, 0, MPI_COMM_WORLD);
    if (rank == 0)
        for (int r = 0; r < size; r++)
            for (int i = 0; i < 2 * (r + 1); i++)
                CHECK(big[2 * displs[r] + i] == r * 100 + i, "Gatherv pairs from %d [%d] = %d", r,
                      i, big[2 * displs[r] + i]);
    for (int i = 0; i < 64; i++)
        big[i] = -1;
    MPI_Allgatherv(mine, rank + 1, pair, big, cnts, displs, pair, MPI_COMM_WORLD);
    for (int r = 0; r < size; r++)
        for (int i = 0; i < 2 * (r + 1); i++)
            CHECK(big[2 * displs[r] + i] == r * 100 + i, "Allgatherv pairs from %d [%d] = %d", r,
                  i, big[2 * displs[r] + i]);
    for (int i = 0; i < 16; i++)
        mine[i] = -1;
    MPI_Scatterv(big, cnts, displs, pair, mine, 2 * (rank + 1), MPI_INT, 0, MPI_COMM_WORLD);
    for (int i = 0; i < 2 * (rank + 1); i++)
        CHECK(mine[i] == rank * 100 + i, "Scatterv pairs [%d] = %d", i, mine[i]);
    /* Alltoallv: one column (resized vector) to each peer at displacement j */
    int sc[MAXP], sd[MAXP], rc[MAXP], rd[MAXP];
    for (int j = 0; j < size; j++) {
        sc[j] = 1;
        sd[j] = j;
        rc[j] = R;
        rd[j] = j * R;
    }
    for (int i = 0; i < R * size; i++)
        mat[i] = rank * 1000 + i;
    MPI_Alltoallv(mat, sc, sd, column, rows, rc, rd, MPI_INT, MPI_COMM_WORLD);
    for (int j = 0; j < size; j++)
        for (int i = 0; i < R; i++)
            CHECK(rows[j * R + i] == j * 1000 + i * size + rank, "Alltoallv from %d [%d] = %d",
                  j, i, rows[j * R + i]);

    /* Alltoallw: to even peers one column, to odd peers R ints; receive R ints from each. */
    int wsc[MAXP], wsd[MAXP], wrc[MAXP], wrd[MAXP];
    MPI_Datatype wst[MAXP], wrt[MAXP];
    int flat[3 * MAXP];
    for (int j = 0; j < size; j++) {
        if (j % 2 == 0) {
            wst[j] = column;
            wsc[j] = 1;
            wsd[j] = j * (int)sizeof(int);
        } else {
            wst[j] = MPI_INT;
            wsc[j] = R;
            wsd[j] = (R * size + j * R) * (int)sizeof(int); /* a second area: 'flat' */
        }
        wrt[j] = MPI_INT;
        wrc[j] = R;
        wrd[j] = j * R * (int)sizeof(int);
    }
    int area[2 * 3 * MAXP];
    for (int i = 0; i < R * size; i++) {
        area[i] = rank * 1000 + i;
        flat[i] = -1;
    }
    for (int j = 0; j < size; j++)
        for (int i = 0; i < R; i++)
            area[R * size + j * R + i] = rank * 1000 + i * size + j; /* column j as ints */
    MPI_Alltoallw(area, wsc, wsd, wst, flat, wrc, wrd, wrt, MPI_COMM_WORLD);
    for (int j = 0; j < size; j++)
        for (int i = 0; i < R; i++)
            CHECK(flat[j * R + i] == j * 1000 + i * size + rank, "Alltoallw from %d [%d] = %d",
                  j, i, flat[j * R + i]);

    MPI_Type_free(&pair);
    MPI_Type_free(&column);
    MPI_Type_free(&colv);
    return finish();
}
