/* Collectives on large buffers (pipelined/segmented paths): Bcast and Allgather of a strided
 * type over 4 MiB, Allreduce of 512 Ki doubles in place, a non-commutative user op over a
 * large count (segment order must stay rank order), Reduce_scatter_block and Alltoallv with
 * large and zero counts mixed, Scan of a large vector. Four processes, and two. */
#include "mtest.h"

#define N (1 << 19)

static void lastwins(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    /* (a, b) op (c, d) = (a, d): non-commutative, associative; per element pair of ints */
    (void)dt;
    int *x = in, *y = inout;
    for (int i = 0; i < *len; i++)
        y[2 * i] = x[2 * i];
}

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int *a = malloc(2 * N * sizeof(int)), *b = malloc(2 * N * sizeof(int));
    double *d = malloc(N * sizeof(double));

    /* Bcast of every other int of 2N (4 MiB of data moved) from the last rank */
    MPI_Datatype every2;
    MPI_Type_vector(N, 1, 2, MPI_INT, &every2);
    MPI_Type_commit(&every2);
    for (int i = 0; i < 2 * N; i++)
        a[i] = rank == size - 1 ? i : -1;
    MPI_Bcast(a, 1, every2, size - 1, MPI_COMM_WORLD);
    int bad = 0;
    for (int i = 0; i < 2 * N; i++)
        bad += a[i] != (i % 2 == 0 || rank == size - 1 ? i : -1);
    CHECK(!bad, "strided Bcast: %d wrong", bad);

    /* Allgather of N/size ints each into a strided layout (resized to one int) */
    MPI_Datatype one_of_two, ot;
    MPI_Type_vector(N / size, 1, 2, MPI_INT, &ot);
    MPI_Type_create_resized(ot, 0, (MPI_Aint)(N / size) * 2 * sizeof(int), &one_of_two);
    MPI_Type_commit(&one_of_two);
    for (int i = 0; i < N / size; i++)
        b[i] = rank * N + i;
    for (int i = 0; i < 2 * N; i++)
        a[i] = -1;
    MPI_Allgather(b, N / size, MPI_INT, a, 1, one_of_two, MPI_COMM_WORLD);
    bad = 0;
    for (int r = 0; r < size; r++)
        for (int i = 0; i < N / size; i++) {
            int at = r * (N / size) * 2 + 2 * i;
            bad += a[at] != r * N + i || a[at + 1] != -1;
        }
    CHECK(!bad, "strided Allgather: %d wrong", bad);

    /* Allreduce in place of many doubles */
    for (int i = 0; i < N; i++)
        d[i] = rank + i * 0.5;
    MPI_Allreduce(MPI_IN_PLACE, d, N, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    bad = 0;
    for (int i = 0; i < N; i++)
        bad += d[i] != size * (size - 1) / 2 + size * i * 0.5;
    CHECK(!bad, "large Allreduce: %d wrong", bad);

    /* Non-commutative op over N pairs: the result is the first rank's value everywhere. */
    MPI_Datatype pair;
    MPI_Type_contiguous(2, MPI_INT, &pair);
    MPI_Type_commit(&pair);
    MPI_Op op;
    MPI_Op_create(lastwins, 0, &op);
    for (int i = 0; i < N; i++) {
        a[2 * i] = rank * 1000 + i % 1000;
        a[2 * i + 1] = 0;
    }
    MPI_Allreduce(a, b, N, pair, op, MPI_COMM_WORLD);
    bad = 0;
    for (int i = 0; i < N; i++)
        bad += b[2 * i] != i % 1000;
    CHECK(!bad, "large non-commutative Allreduce: %d wrong (first %d)", bad, b[0]);
    MPI_Reduce(a, b, N, pair, op, size - 1, MPI_COMM_WORLD);
    if (rank == size - 1) {
        bad = 0;
        for (int i = 0; i < N; i++)
            bad += b[2 * i] != i % 1000;
        CHECK(!bad, "large non-commutative Reduce: %d wrong", bad);
    }
    MPI_Scan(a, b, N, pair, op, MPI_COMM_WORLD);
    bad = 0;
    for (int i = 0; i < N; i++)
        bad += b[2 * i] != i % 1000;
    CHECK(!bad, "large non-commutative Scan: %d wrong", bad);
    MPI_Op_free(&op);
    MPI_Type_free(&pair);

    /* Reduce_scatter_block of N/size each */
    for (int i = 0; i < N; i++)
        a[i] = i + rank;
    MPI_Reduce_scatter_block(a, b, N / size, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    bad = 0;
    for (int i = 0; i < N / size; i++)
        bad += b[i] != size * (rank * (N / size) + i) + size * (size - 1) / 2;
    CHECK(!bad, "large Reduce_scatter_block: %d wrong", bad);

    /* Alltoallv: to rank j send j == rank+1 ? big : (j == rank ? 0 : 3) */
    int sc[16], sd[16], rc[16], rd[16], off = 0, roff = 0;
    int bigc = N / 4;
    for (int j = 0; j < size; j++) {
        sc[j] = j == (rank + 1) % size ? bigc : (j == rank ? 0 : 3);
        sd[j] = off;
        off += sc[j];
        rc[j] = rank == (j + 1) % size ? bigc : (j == rank ? 0 : 3);
        rd[j] = roff;
        roff += rc[j];
    }
    if (size == 1)
        sc[0] = rc[0] = bigc;
    for (int j = 0; j < size; j++)
        for (int k = 0; k < sc[j]; k++)
            a[sd[j] + k] = rank * 7 + j + k;
    MPI_Alltoallv(a, sc, sd, MPI_INT, b, rc, rd, MPI_INT, MPI_COMM_WORLD);
    bad = 0;
    for (int j = 0; j < size; j++)
        for (int k = 0; k < rc[j]; k++)
            bad += b[rd[j] + k] != j * 7 + rank + k;
    CHECK(!bad, "mixed Alltoallv: %d wrong", bad);

    MPI_Type_free(&every2);
    MPI_Type_free(&one_of_two);
    MPI_Type_free(&ot);
    free(a);
    free(b);
    free(d);
    return finish();
}
