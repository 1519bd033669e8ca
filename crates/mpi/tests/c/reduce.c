/* Reductions (MPI 4.1 §6.9-6.11): a non-commutative user op (2x2 integer matrix product) must be
 * applied in rank order in Reduce (two roots), Allreduce, Scan, Exscan, Reduce_scatter_block and
 * Reduce_local; MAXLOC/MINLOC pick the lowest index on ties (MPI_2INT, MPI_DOUBLE_INT);
 * Reduce_scatter with unequal counts; Scan/Exscan with builtin ops; a user op on a derived type.
 * Four processes, and two; the long ones are 8, 64 and 128 KiB. */
#include "mtest.h"

typedef struct {
    long a, b, c, d;
} mat;

static mat mul(mat x, mat y)
{
    mat r = {x.a * y.a + x.b * y.c, x.a * y.b + x.b * y.d, x.c * y.a + x.d * y.c,
             x.c * y.b + x.d * y.d};
    return r;
}

static int calls;

/* inout = in * inout (in comes from lower ranks) */
static void matmul(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    (void)dt;
    mat *x = in, *y = inout;
    calls++;
    for (int i = 0; i < *len; i++)
        y[i] = mul(x[i], y[i]);
}

static mat of(int r, int k)
{
    mat m = {1 + r, 2 + k, r % 3, 1 + (r + k) % 2};
    return m;
}

static int eq(mat x, mat y)
{
    return x.a == y.a && x.b == y.b && x.c == y.c && x.d == y.d;
}

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Datatype mt;
    MPI_Type_contiguous(4, MPI_LONG, &mt);
    MPI_Type_commit(&mt);
    MPI_Op op;
    MPI_Op_create(matmul, 0, &op);
    int comm = 1;
    MPI_Op_commutative(op, &comm);
    CHECK(!comm, "Op_commutative says a non-commutative op is commutative");

    const int K = 3;
    mat in[3], out[3], want[3], prefix[8][3];
    for (int k = 0; k < K; k++) {
        in[k] = of(rank, k);
        mat p = of(0, k);
        prefix[0][k] = p;
        for (int r = 1; r < size; r++) {
            p = mul(p, of(r, k));
            prefix[r][k] = p;
        }
        want[k] = p;
    }
    CHECK(!eq(mul(of(0, 0), of(1, 0)), mul(of(1, 0), of(0, 0))), "test matrices commute");

    for (int root = 0; root < size; root += size - 1) {
        memset(out, 0, sizeof out);
        MPI_Reduce(in, out, K, mt, op, root, MPI_COMM_WORLD);
        if (rank == root)
            for (int k = 0; k < K; k++)
                CHECK(eq(out[k], want[k]), "Reduce at %d [%d]: %ld %ld %ld %ld", root, k,
                      out[k].a, out[k].b, out[k].c, out[k].d);
        if (size == 1)
            break;
    }

    /* Long: 8 KiB, so that a root combines each message where it lies in the ring, and
     * 64 and 128 KiB, so that 3 ranks or more combine in the shared segment (a root folds
     * 64 KiB whole, 128 KiB in parts). */
    {
        enum { KL = 4096 };
        static mat lin[KL], lout[KL], lwant[KL];
        for (int k = 0; k < KL; k++) {
            lin[k] = of(rank, k);
            mat p = of(0, k);
            for (int r = 1; r < size; r++)
                p = mul(p, of(r, k));
            lwant[k] = p;
        }
        for (int kl = 256; kl <= KL; kl = kl == 256 ? 2048 : kl * 2) {
            for (int root = 0; root < size; root += size - 1) {
                memset(lout, 0, sizeof lout);
                MPI_Reduce(lin, lout, kl, mt, op, root, MPI_COMM_WORLD);
                if (rank == root)
                    for (int k = 0; k < kl; k++)
                        CHECK(eq(lout[k], lwant[k]), "long Reduce of %d at %d [%d]", kl, root, k);
                if (size == 1)
                    break;
            }
            memset(lout, 0, sizeof lout);
            MPI_Allreduce(lin, lout, kl, mt, op, MPI_COMM_WORLD);
            for (int k = 0; k < kl; k++)
                CHECK(eq(lout[k], lwant[k]), "long Allreduce of %d [%d]", kl, k);
            memcpy(lout, lin, sizeof lout);
            MPI_Allreduce(MPI_IN_PLACE, lout, kl, mt, op, MPI_COMM_WORLD);
            for (int k = 0; k < kl; k++)
                CHECK(eq(lout[k], lwant[k]), "long in-place Allreduce of %d [%d]", kl, k);
        }
    }
    memset(out, 0, sizeof out);
    MPI_Allreduce(in, out, K, mt, op, MPI_COMM_WORLD);
    for (int k = 0; k < K; k++)
        CHECK(eq(out[k], want[k]), "Allreduce [%d]: %ld %ld %ld %ld", k, out[k].a, out[k].b,
              out[k].c, out[k].d);
    MPI_Scan(in, out, K, mt, op, MPI_COMM_WORLD);
    for (int k = 0; k < K; k++)
        CHECK(eq(out[k], prefix[rank][k]), "Scan [%d]", k);
    MPI_Exscan(in, out, K, mt, op, MPI_COMM_WORLD);
    if (rank > 0)
        for (int k = 0; k < K; k++)
            CHECK(eq(out[k], prefix[rank - 1][k]), "Exscan [%d]", k);
    /* Reduce_scatter_block: element j of everyone's vector reduced to rank j */
    mat vin[8], vout;
    for (int j = 0; j < size; j++)
        vin[j] = of(rank, j);
    MPI_Reduce_scatter_block(vin, &vout, 1, mt, op, MPI_COMM_WORLD);
    mat p = of(0, rank);
    for (int r = 1; r < size; r++)
        p = mul(p, of(r, rank));
    CHECK(eq(vout, p), "Reduce_scatter_block non-commutative");
    /* Reduce_local: inout = in op inout */
    mat x = of(1, 1), y = of(2, 2);
    calls = 0;
    MPI_Reduce_local(&x, &y, 1, mt, op);
    CHECK(calls == 1 && eq(y, mul(of(1, 1), of(2, 2))), "Reduce_local order (calls %d)", calls);
    int li[3] = {1, 2, 3}, lo[3] = {10, 20, 30};
    MPI_Reduce_local(li, lo, 3, MPI_INT, MPI_SUM);
    CHECK(lo[0] == 11 && lo[2] == 33, "Reduce_local SUM %d %d", lo[0], lo[2]);
    MPI_Reduce_local(li, lo, 3, MPI_INT, MPI_MIN);
    CHECK(lo[0] == 1 && lo[2] == 3, "Reduce_local MIN %d %d", lo[0], lo[2]);

    /* MAXLOC / MINLOC with ties: the lowest index wins. */
    struct {
        int v, i;
    } a[3], b[3];
    a[0].v = 5; /* all tie */
    a[1].v = rank % 2 ? 9 : 1; /* odd ranks tie for max, even for min */
    a[2].v = rank == size - 1 ? 100 : 0;
    for (int k = 0; k < 3; k++)
        a[k].i = rank;
    MPI_Allreduce(a, b, 3, MPI_2INT, MPI_MAXLOC, MPI_COMM_WORLD);
    CHECK(b[0].v == 5 && b[0].i == 0, "MAXLOC all tie: %d at %d", b[0].v, b[0].i);
    if (size > 1)
        CHECK(b[1].v == 9 && b[1].i == 1, "MAXLOC tie among odd: %d at %d", b[1].v, b[1].i);
    CHECK(b[2].v == 100 && b[2].i == size - 1, "MAXLOC single: %d at %d", b[2].v, b[2].i);
    MPI_Allreduce(a, b, 3, MPI_2INT, MPI_MINLOC, MPI_COMM_WORLD);
    CHECK(b[0].v == 5 && b[0].i == 0, "MINLOC all tie: %d at %d", b[0].v, b[0].i);
    CHECK(b[1].v == 1 && b[1].i == 0, "MINLOC tie among even: %d at %d", b[1].v, b[1].i);
    /* tie with a non-rank index order: index = size - rank, all values equal */
    a[0].v = 3;
    a[0].i = size - rank;
    MPI_Reduce(a, b, 1, MPI_2INT, MPI_MAXLOC, size - 1, MPI_COMM_WORLD);
    if (rank == size - 1)
        CHECK(b[0].i == 1, "MAXLOC tie picks index %d, expected the lowest (1)", b[0].i);
    struct {
        double v;
        int i;
    } da, db;
    da.v = rank < 2 ? 2.5 : -1.0;
    da.i = 10 + rank;
    MPI_Allreduce(&da, &db, 1, MPI_DOUBLE_INT, MPI_MAXLOC, MPI_COMM_WORLD);
    CHECK(db.v == 2.5 && db.i == 10, "DOUBLE_INT MAXLOC %g at %d", db.v, db.i);
    MPI_Allreduce(&da, &db, 1, MPI_DOUBLE_INT, MPI_MINLOC, MPI_COMM_WORLD);
    CHECK(db.v == (size > 2 ? -1.0 : 2.5) && db.i == (size > 2 ? 12 : 10),
          "DOUBLE_INT MINLOC %g at %d", db.v, db.i);

    /* Reduce_scatter with counts 1, 2, ..., size */
    int cnts[8], total = 0;
    for (int r = 0; r < size; r++) {
        cnts[r] = r + 1;
        total += r + 1;
    }
    int vi[64], vo[8];
    for (int i = 0; i < total; i++)
        vi[i] = i * (rank + 1);
    MPI_Reduce_scatter(vi, vo, cnts, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    int start = rank * (rank + 1) / 2, ranksum = size * (size + 1) / 2;
    for (int i = 0; i <= rank; i++)
        CHECK(vo[i] == (start + i) * ranksum, "Reduce_scatter [%d] = %d", i, vo[i]);
    int blk[16], bo[2];
    for (int i = 0; i < 2 * size; i++)
        blk[i] = rank + i;
    MPI_Reduce_scatter_block(blk, bo, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    CHECK(bo[0] == size - 1 + 2 * rank && bo[1] == size + 2 * rank, "Reduce_scatter_block %d %d",
          bo[0], bo[1]);

    /* Scan/Exscan builtin */
    double d = rank + 0.5, ds = 0;
    MPI_Scan(&d, &ds, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    CHECK(ds == rank * (rank + 1) / 2.0 + 0.5 * (rank + 1), "Scan double %g", ds);
    int pi = rank + 2, po = -1;
    MPI_Exscan(&pi, &po, 1, MPI_INT, MPI_PROD, MPI_COMM_WORLD);
    int wp = 1;
    for (int r = 0; r < rank; r++)
        wp *= r + 2;
    if (rank > 0)
        CHECK(po == wp, "Exscan PROD %d, expected %d", po, wp);

    MPI_Op_free(&op);
    CHECK(op == MPI_OP_NULL, "Op_free did not set MPI_OP_NULL");
    MPI_Type_free(&mt);
    return finish();
}
