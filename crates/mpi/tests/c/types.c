/* Derived datatypes (MPI 4.1 §5): Pack/Unpack/Pack_size round trips (mixed types, positions
 * continuing across calls), Type_get_envelope/Type_get_contents for each constructor,
 * subarray (C and Fortran order), hindexed_block, Type_dup, resized types with a negative lower
 * bound, true extents, Type_size/Get_extent, and sending with them. Two processes. */
#include "mtest.h"

static void envelope(MPI_Datatype t, int ni, int na, int nd, int comb, const char *what)
{
    int i, a, d, c;
    MPI_Type_get_envelope(t, &i, &a, &d, &c);
    CHECK(i == ni && a == na && d == nd && c == comb,
          "%s envelope: ints %d addrs %d types %d combiner %d, expected %d %d %d %d", what, i, a,
          d, c, ni, na, nd, comb);
}

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    /* Pack a vector, a double and a char string; unpack; Pack_size bounds the packed size. */
    MPI_Datatype vec;
    MPI_Type_vector(3, 2, 5, MPI_SHORT, &vec);
    MPI_Type_commit(&vec);
    short s[15];
    for (int i = 0; i < 15; i++)
        s[i] = (short)(i * 3);
    double dv = 6.25;
    char str[5] = "ferr";
    int ps1, ps2, ps3;
    MPI_Pack_size(1, vec, MPI_COMM_WORLD, &ps1);
    MPI_Pack_size(1, MPI_DOUBLE, MPI_COMM_WORLD, &ps2);
    MPI_Pack_size(5, MPI_CHAR, MPI_COMM_WORLD, &ps3);
    CHECK(ps1 >= 12 && ps2 >= 8 && ps3 >= 5, "Pack_size %d %d %d", ps1, ps2, ps3);
    int cap = ps1 + ps2 + ps3;
    char *pk = malloc(cap);
    int pos = 0;
    MPI_Pack(s, 1, vec, pk, cap, &pos, MPI_COMM_WORLD);
    int p1 = pos;
    MPI_Pack(&dv, 1, MPI_DOUBLE, pk, cap, &pos, MPI_COMM_WORLD);
    MPI_Pack(str, 5, MPI_CHAR, pk, cap, &pos, MPI_COMM_WORLD);
    CHECK(p1 <= ps1 && pos <= cap && pos >= 25, "packed %d then %d of %d", p1, pos, cap);
    short s2[15];
    double dv2 = 0;
    char str2[5] = "";
    for (int i = 0; i < 15; i++)
        s2[i] = -1;
    int upos = 0;
    MPI_Unpack(pk, pos, &upos, s2, 1, vec, MPI_COMM_WORLD);
    MPI_Unpack(pk, pos, &upos, &dv2, 1, MPI_DOUBLE, MPI_COMM_WORLD);
    MPI_Unpack(pk, pos, &upos, str2, 5, MPI_CHAR, MPI_COMM_WORLD);
    CHECK(upos == pos, "unpacked %d of %d", upos, pos);
    for (int i = 0; i < 15; i++)
        CHECK(s2[i] == ((i % 5) < 2 && i < 12 ? i * 3 : -1), "Unpack vector [%d] = %d", i,
              s2[i]);
    CHECK(dv2 == 6.25 && !strcmp(str2, "ferr"), "Unpack %g '%s'", dv2, str2);
    /* The packed vector sent as MPI_PACKED and received as shorts. */
    if (size >= 2) {
        if (rank == 0)
            MPI_Send(pk, p1, MPI_PACKED, 1, 1, MPI_COMM_WORLD);
        else if (rank == 1) {
            short got[6];
            MPI_Status st;
            MPI_Recv(got, 6, MPI_SHORT, 0, 1, MPI_COMM_WORLD, &st);
            int n;
            MPI_Get_count(&st, MPI_SHORT, &n);
            CHECK(n == 6 && got[0] == 0 && got[2] == 15 && got[5] == 33,
                  "packed vector received as shorts: %d: %d %d %d", n, got[0], got[2], got[5]);
        }
    }
    (void)ps3;
    free(pk);
    /* The packed size of 0 elements is 0; Pack of count 0 leaves the position alone. */
    int z = -1;
    MPI_Pack_size(0, vec, MPI_COMM_WORLD, &z);
    CHECK(z == 0, "Pack_size of 0: %d", z);

    /* Envelopes and contents. */
    envelope(MPI_INT, 0, 0, 0, MPI_COMBINER_NAMED, "MPI_INT");
    envelope(vec, 3, 0, 1, MPI_COMBINER_VECTOR, "vector");
    int ints[8];
    MPI_Aint addrs[8];
    MPI_Datatype tys[4];
    MPI_Type_get_contents(vec, 3, 0, 1, ints, addrs, tys);
    CHECK(ints[0] == 3 && ints[1] == 2 && ints[2] == 5 && tys[0] == MPI_SHORT,
          "vector contents %d %d %d", ints[0], ints[1], ints[2]);
    MPI_Datatype hv;
    MPI_Type_create_hvector(2, 1, 24, vec, &hv);
    envelope(hv, 2, 1, 1, MPI_COMBINER_HVECTOR, "hvector");
    MPI_Type_get_contents(hv, 2, 1, 1, ints, addrs, tys);
    CHECK(ints[0] == 2 && ints[1] == 1 && addrs[0] == 24, "hvector contents");
    /* a derived type from get_contents is a new handle that must be freed */
    int c1, c2, c3, c4;
    MPI_Type_get_envelope(tys[0], &c1, &c2, &c3, &c4);
    CHECK(c4 == MPI_COMBINER_VECTOR, "hvector's old type combiner %d", c4);
    MPI_Type_free(&tys[0]);
    MPI_Datatype dup;
    MPI_Type_dup(vec, &dup);
    envelope(dup, 0, 0, 1, MPI_COMBINER_DUP, "dup");
    int sz1, sz2;
    MPI_Aint lb1, ex1, lb2, ex2;
    MPI_Type_size(vec, &sz1);
    MPI_Type_size(dup, &sz2);
    MPI_Type_get_extent(vec, &lb1, &ex1);
    MPI_Type_get_extent(dup, &lb2, &ex2);
    CHECK(sz1 == 12 && sz2 == 12 && lb1 == lb2 && ex1 == ex2 && ex1 == 24,
          "dup: size %d/%d extent %ld/%ld", sz1, sz2, (long)ex1, (long)ex2);
    MPI_Type_commit(&dup); /* a dup of a committed type is committed; commit again is allowed */
    int bl[3] = {1, 2, 1};
    MPI_Aint disp[3] = {0, 8, 32};
    MPI_Datatype ty3[3] = {MPI_INT, MPI_DOUBLE, MPI_CHAR}, st;
    MPI_Type_create_struct(3, bl, disp, ty3, &st);
    envelope(st, 4, 3, 3, MPI_COMBINER_STRUCT, "struct");
    MPI_Type_get_contents(st, 4, 3, 3, ints, addrs, tys);
    CHECK(ints[0] == 3 && ints[2] == 2 && addrs[1] == 8 && addrs[2] == 32 &&
              tys[1] == MPI_DOUBLE && tys[2] == MPI_CHAR,
          "struct contents");
    int hb_disp_n = 3;
    MPI_Aint hbd[3] = {0, 40, 16};
    MPI_Datatype hb;
    MPI_Type_create_hindexed_block(hb_disp_n, 2, hbd, MPI_INT, &hb);
    MPI_Type_commit(&hb);
    envelope(hb, 2, 3, 1, MPI_COMBINER_HINDEXED_BLOCK, "hindexed_block");
    MPI_Type_get_contents(hb, 2, 3, 1, ints, addrs, tys);
    CHECK(ints[0] == 3 && ints[1] == 2 && addrs[1] == 40 && tys[0] == MPI_INT,
          "hindexed_block contents");
    MPI_Type_size(hb, &sz1);
    MPI_Type_get_extent(hb, &lb1, &ex1);
    CHECK(sz1 == 24 && lb1 == 0 && ex1 == 48, "hindexed_block size %d lb %ld extent %ld", sz1,
          (long)lb1, (long)ex1);
    int hbuf[12], hp[6];
    for (int i = 0; i < 12; i++)
        hbuf[i] = i;
    pos = 0;
    MPI_Pack(hbuf, 1, hb, hp, sizeof hp, &pos, MPI_COMM_WORLD);
    CHECK(pos == 24 && hp[0] == 0 && hp[1] == 1 && hp[2] == 10 && hp[3] == 11 && hp[4] == 4 &&
              hp[5] == 5,
          "hindexed_block packs %d %d %d %d %d %d", hp[0], hp[1], hp[2], hp[3], hp[4], hp[5]);

    /* Subarray: 2x3 block at (1,1) of a 4x5 int array, C order; and Fortran order. */
    int sizes[2] = {4, 5}, subs[2] = {2, 3}, starts[2] = {1, 1};
    MPI_Datatype sa, saf;
    MPI_Type_create_subarray(2, sizes, subs, starts, MPI_ORDER_C, MPI_INT, &sa);
    MPI_Type_commit(&sa);
    MPI_Type_size(sa, &sz1);
    MPI_Type_get_extent(sa, &lb1, &ex1);
    CHECK(sz1 == 24 && lb1 == 0 && ex1 == 80, "subarray size %d lb %ld extent %ld", sz1,
          (long)lb1, (long)ex1);
    envelope(sa, 8, 0, 1, MPI_COMBINER_SUBARRAY, "subarray");
    int arr[20], out[6];
    for (int i = 0; i < 20; i++)
        arr[i] = i;
    pos = 0;
    MPI_Pack(arr, 1, sa, out, sizeof out, &pos, MPI_COMM_WORLD);
    int want[6] = {6, 7, 8, 11, 12, 13};
    for (int i = 0; i < 6; i++)
        CHECK(out[i] == want[i], "subarray C [%d] = %d, expected %d", i, out[i], want[i]);
    MPI_Type_create_subarray(2, sizes, subs, starts, MPI_ORDER_FORTRAN, MPI_INT, &saf);
    MPI_Type_commit(&saf);
    pos = 0;
    MPI_Pack(arr, 1, saf, out, sizeof out, &pos, MPI_COMM_WORLD);
    /* Fortran: dim 0 (size 4) varies fastest: elements (1..2, 1..3) at i + 4*j */
    int wantf[6] = {5, 6, 9, 10, 13, 14};
    for (int i = 0; i < 6; i++)
        CHECK(out[i] == wantf[i], "subarray Fortran [%d] = %d, expected %d", i, out[i],
              wantf[i]);
    /* Subarray as a receive type: only the block is written. */
    if (size >= 2 && rank < 2) {
        int blk[6] = {100, 101, 102, 103, 104, 105}, dst[20];
        for (int i = 0; i < 20; i++)
            dst[i] = -1;
        MPI_Sendrecv(blk, 6, MPI_INT, rank ^ 1, 2, dst, 1, sa, rank ^ 1, 2, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
        for (int i = 0; i < 20; i++) {
            int k = -1;
            for (int j = 0; j < 6; j++)
                if (want[j] == i)
                    k = j;
            CHECK(dst[i] == (k >= 0 ? 100 + k : -1), "subarray receive [%d] = %d", i, dst[i]);
        }
    }

    /* Resized with a negative lower bound: lb -4, extent 12 (ub 8), true extent of one int. */
    MPI_Datatype rz;
    MPI_Type_create_resized(MPI_INT, -4, 12, &rz);
    MPI_Type_commit(&rz);
    MPI_Aint tlb, tex;
    MPI_Type_get_extent(rz, &lb1, &ex1);
    MPI_Type_get_true_extent(rz, &tlb, &tex);
    CHECK(lb1 == -4 && ex1 == 12 && tlb == 0 && tex == 4, "resized: lb %ld extent %ld true %ld %ld",
          (long)lb1, (long)ex1, (long)tlb, (long)tex);
    envelope(rz, 0, 2, 1, MPI_COMBINER_RESIZED, "resized");
    MPI_Type_get_contents(rz, 0, 2, 1, ints, addrs, tys);
    CHECK(addrs[0] == -4 && addrs[1] == 12 && tys[0] == MPI_INT, "resized contents");
    /* three of them: ints at bytes 0, 12, 24 from the buffer pointer */
    int rb[9], rp[3];
    for (int i = 0; i < 9; i++)
        rb[i] = i;
    pos = 0;
    MPI_Pack(rb, 3, rz, rp, sizeof rp, &pos, MPI_COMM_WORLD);
    CHECK(pos == 12 && rp[0] == 0 && rp[1] == 3 && rp[2] == 6, "resized pack %d %d %d", rp[0],
          rp[1], rp[2]);
    /* a contiguous of it keeps the negative lb: lb -4, extent 36 */
    MPI_Datatype rc;
    MPI_Type_contiguous(3, rz, &rc);
    MPI_Type_commit(&rc);
    MPI_Type_get_extent(rc, &lb1, &ex1);
    MPI_Type_get_true_extent(rc, &tlb, &tex);
    CHECK(lb1 == -4 && ex1 == 36 && tlb == 0 && tex == 28, "contiguous of resized: %ld %ld %ld %ld",
          (long)lb1, (long)ex1, (long)tlb, (long)tex);
    /* sent with the resized type into contiguous ints */
    if (size >= 2 && rank < 2) {
        int got[3] = {-1, -1, -1};
        MPI_Sendrecv(rb, 3, rz, rank ^ 1, 3, got, 3, MPI_INT, rank ^ 1, 3, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
        CHECK(got[0] == 0 && got[1] == 3 && got[2] == 6, "resized send: %d %d %d", got[0],
              got[1], got[2]);
        /* and a negative-lb vector: vector of 2 blocks of 1 int, stride -2 */
        MPI_Datatype nv;
        MPI_Type_vector(2, 1, -2, MPI_INT, &nv);
        MPI_Type_commit(&nv);
        MPI_Type_get_extent(nv, &lb1, &ex1);
        CHECK(lb1 == -8 && ex1 == 12, "negative-stride vector: lb %ld extent %ld", (long)lb1,
              (long)ex1);
        got[0] = got[1] = -1;
        MPI_Sendrecv(&rb[4], 1, nv, rank ^ 1, 4, got, 2, MPI_INT, rank ^ 1, 4, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
        CHECK(got[0] == 4 && got[1] == 2, "negative-stride vector sent %d %d", got[0], got[1]);
        MPI_Type_free(&nv);
    }

    MPI_Type_free(&rc);
    MPI_Type_free(&rz);
    MPI_Type_free(&sa);
    MPI_Type_free(&saf);
    MPI_Type_free(&hb);
    MPI_Type_free(&st);
    MPI_Type_free(&dup);
    MPI_Type_free(&hv);
    MPI_Type_free(&vec);
    return finish();
}
