/* Collectives of ranks on one host, at sizes on both sides of the shared segment's chunks
 * (8 B to 5 MiB with a 1 MiB segment, odd lengths): bcast from every root, allreduce (also in
 * place, and with a non-commutative user operation, which must be applied in rank order),
 * reduce to every root, allgather, alltoall and barrier, on MPI_COMM_WORLD, on a split half
 * and on a duplicate; a hundred short broadcasts from changing roots. A large send started before a barrier and waited for after it checks
 * that a rank waiting in a shared barrier still moves its other messages. With the argument
 * `quick`, only a few small calls (for many ranks on few cores). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int errors = 0;

#define CHECK(cond, ...)                                                                 \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            if (errors++ < 10) {                                                         \
                printf(__VA_ARGS__);                                                     \
                printf("\n");                                                            \
            }                                                                            \
        }                                                                                \
    } while (0)

/* A non-commutative, associative operation on 2x2 integer matrices (mod 2^32). */
static void matmul(void *in, void *inout, int *len, MPI_Datatype *dt) {
    (void)dt;
    unsigned *a = in, *b = inout;
    for (int i = 0; i < *len; i++, a += 4, b += 4) {
        unsigned r0 = a[0] * b[0] + a[1] * b[2], r1 = a[0] * b[1] + a[1] * b[3];
        unsigned r2 = a[2] * b[0] + a[3] * b[2], r3 = a[2] * b[1] + a[3] * b[3];
        b[0] = r0, b[1] = r1, b[2] = r2, b[3] = r3;
    }
}

static void rank_matrix(unsigned *m, int rank, int i) {
    m[0] = 1, m[1] = (unsigned)(rank + i), m[2] = 0, m[3] = 1 + (unsigned)(rank & 1);
}

static void run(MPI_Comm comm, const char *name, int quick) {
    int rank, size;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    const int sizes_full[] = {1, 2, 13, 1000, 16384 + 3, 262144 + 5, 1310720 + 7};
    const int sizes_quick[] = {1, 13};
    const int *sizes = quick ? sizes_quick : sizes_full;
    int nsizes = quick ? 2 : 7;
    for (int s = 0; s < nsizes; s++) {
        int n = sizes[s]; /* ints */
        int *buf = malloc((size_t)n * sizeof(int) * (size_t)size);
        int *out = malloc((size_t)n * sizeof(int) * (size_t)size);
        /* bcast from every root (two roots when quick) */
        for (int root = 0; root < size; root += quick ? size - 1 : 1) {
            for (int i = 0; i < n; i++) buf[i] = rank == root ? i * 7 + root : -1;
            MPI_Bcast(buf, n, MPI_INT, root, comm);
            for (int i = 0; i < n; i++)
                CHECK(buf[i] == i * 7 + root, "%s: bcast n=%d root=%d [%d]=%d", name, n, root, i,
                      buf[i]);
            if (quick) break;
        }
        /* allreduce sum, out of place and in place */
        for (int i = 0; i < n; i++) buf[i] = rank + i;
        MPI_Allreduce(buf, out, n, MPI_INT, MPI_SUM, comm);
        for (int i = 0; i < n; i++)
            CHECK(out[i] == size * (size - 1) / 2 + size * i, "%s: allreduce n=%d [%d]=%d", name, n,
                  i, out[i]);
        MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_INT, MPI_SUM, comm);
        for (int i = 0; i < n; i++)
            CHECK(buf[i] == size * (size - 1) / 2 + size * i, "%s: allreduce in place n=%d [%d]=%d",
                  name, n, i, buf[i]);
        /* doubles, max */
        double *d = malloc((size_t)n * sizeof(double)), *dout = malloc((size_t)n * sizeof(double));
        for (int i = 0; i < n; i++) d[i] = (double)((rank * 31 + i) % size);
        MPI_Allreduce(d, dout, n, MPI_DOUBLE, MPI_MAX, comm);
        for (int i = 0; i < n; i++) {
            double want = 0;
            for (int r = 0; r < size; r++)
                if ((double)((r * 31 + i) % size) > want) want = (double)((r * 31 + i) % size);
            CHECK(dout[i] == want, "%s: allreduce max n=%d [%d]=%g", name, n, i, dout[i]);
        }
        free(d);
        free(dout);
        /* reduce to two roots */
        for (int root = 0; root < size; root += size > 1 ? size - 1 : 1) {
            for (int i = 0; i < n; i++) buf[i] = rank * 3 + i, out[i] = -5;
            MPI_Reduce(buf, out, n, MPI_INT, MPI_SUM, root, comm);
            if (rank == root)
                for (int i = 0; i < n; i++)
                    CHECK(out[i] == 3 * size * (size - 1) / 2 + size * i, "%s: reduce n=%d root=%d [%d]=%d",
                          name, n, root, i, out[i]);
            if (size == 1) break;
        }
        /* allgather of n ints */
        if (n <= 262144 + 5) {
            for (int i = 0; i < n; i++) buf[i] = rank * 1000003 + i;
            MPI_Allgather(buf, n, MPI_INT, out, n, MPI_INT, comm);
            for (int r = 0; r < size; r++)
                for (int i = 0; i < n; i++)
                    CHECK(out[r * n + i] == r * 1000003 + i, "%s: allgather n=%d from %d [%d]=%d", name,
                          n, r, i, out[r * n + i]);
        }
        /* alltoall of n ints a pair */
        if (n <= 16384 + 3) {
            for (int r = 0; r < size; r++)
                for (int i = 0; i < n; i++) buf[r * n + i] = rank * 100000 + r * 1000 + i % 1000;
            MPI_Alltoall(buf, n, MPI_INT, out, n, MPI_INT, comm);
            for (int r = 0; r < size; r++)
                for (int i = 0; i < n; i++)
                    CHECK(out[r * n + i] == r * 100000 + rank * 1000 + i % 1000,
                          "%s: alltoall n=%d from %d [%d]=%d", name, n, r, i, out[r * n + i]);
        }
        free(buf);
        free(out);
    }
    /* many short broadcasts in a row, roots taking turns: post slots are reused */
    for (int i = 0; i < 100; i++) {
        int root = (i * 7) % size, v[3] = {-1, -1, -1};
        if (rank == root) v[0] = i, v[1] = root, v[2] = i * i;
        MPI_Bcast(v, 3, MPI_INT, root, comm);
        CHECK(v[0] == i && v[1] == root && v[2] == i * i, "%s: short bcast %d from %d", name, i, root);
    }
    /* a non-commutative operation, applied in rank order */
    MPI_Datatype mat;
    MPI_Type_contiguous(4, MPI_UNSIGNED, &mat);
    MPI_Type_commit(&mat);
    MPI_Op op;
    MPI_Op_create(matmul, 0, &op);
    const int counts[] = {1, 3, 70000};
    for (int c = 0; c < (quick ? 1 : 3); c++) {
        int n = counts[c];
        unsigned *m = malloc((size_t)n * 16), *res = malloc((size_t)n * 16);
        for (int i = 0; i < n; i++) rank_matrix(m + 4 * i, rank, i);
        MPI_Allreduce(m, res, n, mat, op, comm);
        for (int i = 0; i < n; i++) {
            unsigned want[4], next[4];
            rank_matrix(want, 0, i);
            for (int r = 1; r < size; r++) {
                rank_matrix(next, r, i);
                int one = 1;
                MPI_Datatype t = mat;
                /* want = want * next: matmul computes inout = in * inout */
                matmul(want, next, &one, &t);
                memcpy(want, next, sizeof want);
            }
            CHECK(memcmp(want, res + 4 * i, sizeof want) == 0, "%s: non-commutative n=%d [%d]", name, n,
                  i);
        }
        free(m);
        free(res);
    }
    MPI_Op_free(&op);
    MPI_Type_free(&mat);
    /* a large send pending across a barrier: the waiting receiver needs the sender's progress */
    if (size >= 2 && rank < 2) {
        int n = 1 << 20;
        char *big = malloc((size_t)n);
        memset(big, rank + 1, (size_t)n);
        if (rank == 0) {
            MPI_Request req;
            MPI_Isend(big, n, MPI_CHAR, 1, 77, comm, &req);
            MPI_Barrier(comm);
            MPI_Wait(&req, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(big, n, MPI_CHAR, 0, 77, comm, MPI_STATUS_IGNORE);
            CHECK(big[n - 1] == 1, "%s: message across a barrier", name);
            MPI_Barrier(comm);
        }
        free(big);
    } else {
        MPI_Barrier(comm);
    }
    for (int i = 0; i < 20; i++) MPI_Barrier(comm);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int quick = argc > 1 && strcmp(argv[1], "quick") == 0;
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    run(MPI_COMM_WORLD, "world", quick);
    MPI_Comm half, dup;
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, size - rank, &half);
    run(half, "half", quick);
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    run(dup, "dup", quick);
    MPI_Comm_free(&half);
    MPI_Comm_free(&dup);
    int all;
    MPI_Allreduce(&errors, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) {
        if (all == 0)
            printf(" No Errors\n");
        else
            printf(" Found %d errors\n", all);
    }
    MPI_Finalize();
    return all != 0;
}
