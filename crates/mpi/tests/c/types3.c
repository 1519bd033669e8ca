/* Datatype corner cases: empty types (count 0 vector, indexed with all-zero blocks, struct
 * with a zero-length block), their size/extent and use in messages, a struct mixing an empty
 * member, MPI_Type_create_resized of a resized type, extent of a struct with padding (the
 * "epsilon" alignment rule does not apply to explicit structs: extent = ub - lb), Type_dup of
 * a predefined type (combiner DUP, usable), contiguous of zero, vector with blocklength 0,
 * and Pack_size/Pack of empty types. Two processes. */
#include "mtest.h"

int main(int argc, char **argv)
{
    int rank, size, sz;
    MPI_Aint lb, ex;
    MPI_Status st;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int peer = rank ^ 1;

    MPI_Datatype v0, ix0, c0, vb0;
    MPI_Type_vector(0, 2, 3, MPI_INT, &v0);
    MPI_Type_commit(&v0);
    MPI_Type_size(v0, &sz);
    MPI_Type_get_extent(v0, &lb, &ex);
    CHECK(sz == 0 && ex == 0, "vector of 0: size %d extent %ld", sz, (long)ex);
    int bl[2] = {0, 0}, dp[2] = {4, 8};
    MPI_Type_indexed(2, bl, dp, MPI_DOUBLE, &ix0);
    MPI_Type_commit(&ix0);
    MPI_Type_size(ix0, &sz);
    CHECK(sz == 0, "indexed with zero blocks: size %d", sz);
    MPI_Type_contiguous(0, MPI_INT, &c0);
    MPI_Type_commit(&c0);
    MPI_Type_size(c0, &sz);
    MPI_Type_get_extent(c0, &lb, &ex);
    CHECK(sz == 0 && ex == 0, "contiguous of 0: size %d extent %ld", sz, (long)ex);
    MPI_Type_vector(3, 0, 2, MPI_INT, &vb0);
    MPI_Type_commit(&vb0);
    MPI_Type_size(vb0, &sz);
    CHECK(sz == 0, "vector with blocklength 0: size %d", sz);
    int ps = -1;
    MPI_Pack_size(5, v0, MPI_COMM_WORLD, &ps);
    CHECK(ps == 0, "Pack_size of empty types %d", ps);
    char pk[8];
    int pos = 0;
    int nothing = 0;
    MPI_Pack(&nothing, 3, c0, pk, sizeof pk, &pos, MPI_COMM_WORLD);
    CHECK(pos == 0, "Pack of an empty type moved to %d", pos);

    /* empty-type messages: count 0 of data, status count 0 */
    if (peer < size) {
        int dummy = 5, n = -1;
        MPI_Sendrecv(&dummy, 4, v0, peer, 1, &dummy, 4, ix0, peer, 1, MPI_COMM_WORLD, &st);
        MPI_Get_count(&st, MPI_INT, &n);
        CHECK(n == 0 && dummy == 5, "empty-type message: count %d", n);
        MPI_Get_count(&st, v0, &n);
        CHECK(n == 0, "Get_count in an empty type: %d", n);
    }

    /* struct {int, <empty>, double} */
    struct {
        int i;
        double d;
    } s;
    int sbl[3] = {1, 0, 1};
    MPI_Aint sdp[3] = {0, 4, offsetof(__typeof__(s), d)};
    MPI_Datatype sty[3] = {MPI_INT, MPI_CHAR, MPI_DOUBLE}, st3;
    MPI_Type_create_struct(3, sbl, sdp, sty, &st3);
    MPI_Type_commit(&st3);
    MPI_Type_size(st3, &sz);
    MPI_Type_get_extent(st3, &lb, &ex);
    CHECK(sz == 12 && lb == 0 && ex == (MPI_Aint)sizeof s,
          "struct with an empty member: size %d lb %ld extent %ld (sizeof %zu)", sz, (long)lb,
          (long)ex, sizeof s);
    if (peer < size) {
        s.i = rank + 1;
        s.d = rank + 0.5;
        MPI_Sendrecv_replace(&s, 1, st3, peer, 2, peer, 2, MPI_COMM_WORLD, &st);
        CHECK(s.i == peer + 1 && s.d == peer + 0.5, "struct with an empty member: %d %g", s.i,
              s.d);
    }

    /* resized of resized: the last one wins; true extent unchanged */
    MPI_Datatype r1, r2;
    MPI_Type_create_resized(MPI_INT, -8, 32, &r1);
    MPI_Type_create_resized(r1, 4, 12, &r2);
    MPI_Type_commit(&r2);
    MPI_Aint tlb, tex;
    MPI_Type_get_extent(r2, &lb, &ex);
    MPI_Type_get_true_extent(r2, &tlb, &tex);
    CHECK(lb == 4 && ex == 12 && tlb == 0 && tex == 4, "resized twice: %ld %ld %ld %ld",
          (long)lb, (long)ex, (long)tlb, (long)tex);

    /* Type_dup of a predefined type */
    MPI_Datatype d;
    MPI_Type_dup(MPI_DOUBLE, &d);
    int ni, na, nd, comb;
    MPI_Type_get_envelope(d, &ni, &na, &nd, &comb);
    CHECK(comb == MPI_COMBINER_DUP && nd == 1, "dup of MPI_DOUBLE: combiner %d", comb);
    MPI_Datatype inner;
    MPI_Type_get_contents(d, 0, 0, 1, NULL, NULL, &inner);
    CHECK(inner == MPI_DOUBLE, "contents of dup(MPI_DOUBLE)");
    if (peer < size) {
        double x = rank, y = -1;
        MPI_Sendrecv(&x, 1, d, peer, 3, &y, 1, MPI_DOUBLE, peer, 3, MPI_COMM_WORLD, &st);
        CHECK(y == peer, "dup of MPI_DOUBLE in a message: %g", y);
    }
    MPI_Type_free(&d);
    MPI_Type_free(&r1);
    MPI_Type_free(&r2);
    MPI_Type_free(&st3);
    MPI_Type_free(&v0);
    MPI_Type_free(&ix0);
    MPI_Type_free(&c0);
    MPI_Type_free(&vb0);
    return finish();
}
