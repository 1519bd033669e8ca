/* More datatype rules: absolute addresses with MPI_BOTTOM (MPI_Get_address, struct of
 * absolute displacements, in Send/Recv, Bcast and Pack), MPI_Aint_add/diff, freeing a type
 * (and a type it was built from) while a nonblocking operation still uses it, Get_elements of
 * partial struct messages, get_contents of indexed/hindexed/indexed_block/subarray, true
 * extent of negative displacements, _x query functions, and Scan with a user op on a
 * non-contiguous type. Two processes. */
#include "mtest.h"

static MPI_Datatype strided; /* vector(2, 2, 4, MPI_INT): ints 0, 1, 4, 5 of an extent of 6 */

/* The buffers are laid out as the datatype says (MPI 4.1 §6.9.5). */
static void addstrided(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    int *a = in, *b = inout;
    CHECK(*dt == strided, "user op got another datatype");
    for (int e = 0; e < *len; e++)
        for (int k = 0; k < 6; k++)
            if (k % 4 < 2)
                b[6 * e + k] += a[6 * e + k];
}

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Status st;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int peer = rank ^ 1;

    /* MPI_BOTTOM with absolute addresses: an int and a double that are not adjacent. */
    static int xi;
    static double xd;
    MPI_Aint ai, ad;
    MPI_Get_address(&xi, &ai);
    MPI_Get_address(&xd, &ad);
    CHECK(MPI_Aint_diff(ad, ai) == (char *)&xd - (char *)&xi, "Aint_diff");
    CHECK(MPI_Aint_add(ai, 8) == ai + 8, "Aint_add");
    int bl[2] = {1, 1};
    MPI_Aint disp[2] = {ai, ad};
    MPI_Datatype ty[2] = {MPI_INT, MPI_DOUBLE}, abs_t;
    MPI_Type_create_struct(2, bl, disp, ty, &abs_t);
    MPI_Type_commit(&abs_t);
    xi = rank + 5;
    xd = rank + 0.5;
    if (peer < size) {
        MPI_Sendrecv_replace(MPI_BOTTOM, 1, abs_t, peer, 1, peer, 1, MPI_COMM_WORLD, &st);
        CHECK(xi == peer + 5 && xd == peer + 0.5, "MPI_BOTTOM exchange: %d %g", xi, xd);
    }
    xi = rank == 0 ? 99 : 0;
    xd = rank == 0 ? 9.5 : 0;
    MPI_Bcast(MPI_BOTTOM, 1, abs_t, 0, MPI_COMM_WORLD);
    CHECK(xi == 99 && xd == 9.5, "MPI_BOTTOM Bcast: %d %g", xi, xd);
    int pos = 0;
#ifndef MPICH_VERSION /* MPICH 4.0 refuses MPI_BOTTOM in MPI_Pack ("Null pointer") */
    char pk[64];
    MPI_Pack(MPI_BOTTOM, 1, abs_t, pk, sizeof pk, &pos, MPI_COMM_WORLD);
    CHECK(pos == 12, "Pack from MPI_BOTTOM: %d bytes", pos);
    xi = 0;
    xd = 0;
    int upos = 0;
    MPI_Unpack(pk, pos, &upos, MPI_BOTTOM, 1, abs_t, MPI_COMM_WORLD);
    CHECK(xi == 99 && xd == 9.5, "Unpack to MPI_BOTTOM: %d %g", xi, xd);
#endif
    MPI_Type_free(&abs_t);

    /* Free types while a nonblocking receive and send still use them. */
    if (peer < size) {
        MPI_Datatype base, vec;
        MPI_Type_contiguous(2, MPI_INT, &base);
        MPI_Type_vector(3, 1, 2, base, &vec);
        MPI_Type_commit(&vec);
        MPI_Type_free(&base); /* vec still works */
        int out[12], in[12];
        for (int i = 0; i < 12; i++) {
            out[i] = rank * 100 + i;
            in[i] = -1;
        }
        MPI_Request r[2];
        MPI_Irecv(in, 1, vec, peer, 2, MPI_COMM_WORLD, &r[0]);
        MPI_Isend(out, 1, vec, peer, 2, MPI_COMM_WORLD, &r[1]);
        MPI_Type_free(&vec);
        CHECK(vec == MPI_DATATYPE_NULL, "Type_free did not set MPI_DATATYPE_NULL");
        MPI_Waitall(2, r, MPI_STATUSES_IGNORE);
        for (int i = 0; i < 10; i++) {
            int used = (i / 2) % 2 == 0;
            CHECK(in[i] == (used ? peer * 100 + i : -1), "freed vector receive [%d] = %d", i,
                  in[i]);
        }
    }

    /* Get_elements of a struct {int, double} message cut after the int of the 2nd element. */
    struct {
        int i;
        double d;
    } s2[2];
    MPI_Aint sd[2] = {0, (char *)&s2[0].d - (char *)&s2[0]};
    MPI_Datatype st_t, st_r;
    MPI_Type_create_struct(2, bl, sd, ty, &st_t);
    MPI_Type_create_resized(st_t, 0, sizeof s2[0], &st_r);
    MPI_Type_commit(&st_r);
    if (rank == 0 && size > 1) {
        char raw[16];
        int one = 1;
        double two = 2.0;
        pos = 0;
        MPI_Pack(&one, 1, MPI_INT, raw, 16, &pos, MPI_COMM_WORLD);
        MPI_Pack(&two, 1, MPI_DOUBLE, raw, 16, &pos, MPI_COMM_WORLD);
        MPI_Pack(&one, 1, MPI_INT, raw, 16, &pos, MPI_COMM_WORLD);
        MPI_Send(raw, pos, MPI_PACKED, 1, 3, MPI_COMM_WORLD);
    } else if (rank == 1) {
        MPI_Recv(s2, 2, st_r, 0, 3, MPI_COMM_WORLD, &st);
        int n = -1;
        MPI_Get_count(&st, st_r, &n);
        CHECK(n == MPI_UNDEFINED, "1.5 structs: Get_count %d", n);
        MPI_Get_elements(&st, st_r, &n);
        CHECK(n == 3, "1.5 structs: Get_elements %d, expected 3", n);
        MPI_Count nx = -1;
        MPI_Get_elements_x(&st, st_r, &nx);
        CHECK(nx == 3, "Get_elements_x %lld", (long long)nx);
        CHECK(s2[0].i == 1 && s2[0].d == 2.0 && s2[1].i == 1, "1.5 structs data");
    }
    MPI_Type_free(&st_t);
    MPI_Type_free(&st_r);

    /* get_contents of the indexed family and subarray. */
    int ints[16];
    MPI_Aint addrs[8];
    MPI_Datatype tys[4];
    int ni, na, nd, comb;
    int ibl[3] = {2, 0, 1}, idp[3] = {4, 1, -2};
    MPI_Datatype ix;
    MPI_Type_indexed(3, ibl, idp, MPI_INT, &ix);
    MPI_Type_get_envelope(ix, &ni, &na, &nd, &comb);
    CHECK(ni == 7 && na == 0 && nd == 1 && comb == MPI_COMBINER_INDEXED, "indexed envelope");
    MPI_Type_get_contents(ix, 7, 0, 1, ints, addrs, tys);
    CHECK(ints[0] == 3 && ints[1] == 2 && ints[2] == 0 && ints[3] == 1 && ints[4] == 4 &&
              ints[6] == -2,
          "indexed contents %d %d %d %d %d %d %d", ints[0], ints[1], ints[2], ints[3], ints[4],
          ints[5], ints[6]);
    MPI_Aint lb, ex, tlb, tex;
    MPI_Type_get_extent(ix, &lb, &ex);
    MPI_Type_get_true_extent(ix, &tlb, &tex);
    CHECK(lb == -8 && ex == 32 && tlb == -8 && tex == 32, "indexed with a negative disp: %ld %ld",
          (long)lb, (long)ex);
    MPI_Count lbx, exx, szx;
    MPI_Type_get_extent_x(ix, &lbx, &exx);
    MPI_Type_get_true_extent_x(ix, &lbx, &exx);
    MPI_Type_size_x(ix, &szx);
    CHECK(lbx == -8 && exx == 32 && szx == 12, "_x queries %lld %lld %lld", (long long)lbx,
          (long long)exx, (long long)szx);
    MPI_Type_free(&ix);
    MPI_Aint hdp[2] = {16, 0};
    int hbl[2] = {1, 2};
    MPI_Datatype hx;
    MPI_Type_create_hindexed(2, hbl, hdp, MPI_SHORT, &hx);
    MPI_Type_get_envelope(hx, &ni, &na, &nd, &comb);
    CHECK(ni == 3 && na == 2 && nd == 1 && comb == MPI_COMBINER_HINDEXED, "hindexed envelope");
    MPI_Type_get_contents(hx, 3, 2, 1, ints, addrs, tys);
    CHECK(ints[0] == 2 && ints[2] == 2 && addrs[0] == 16 && tys[0] == MPI_SHORT,
          "hindexed contents");
    MPI_Type_free(&hx);
    int ibd[3] = {3, 0, 6};
    MPI_Datatype ib;
    MPI_Type_create_indexed_block(3, 2, ibd, MPI_FLOAT, &ib);
    MPI_Type_get_envelope(ib, &ni, &na, &nd, &comb);
    CHECK(ni == 5 && comb == MPI_COMBINER_INDEXED_BLOCK, "indexed_block envelope %d %d", ni,
          comb);
    MPI_Type_get_contents(ib, 5, 0, 1, ints, addrs, tys);
    CHECK(ints[0] == 3 && ints[1] == 2 && ints[2] == 3 && ints[4] == 6, "indexed_block contents");
    MPI_Type_free(&ib);
    int sizes[3] = {4, 5, 6}, subs[3] = {2, 3, 4}, starts[3] = {1, 2, 0};
    MPI_Datatype sa;
    MPI_Type_create_subarray(3, sizes, subs, starts, MPI_ORDER_FORTRAN, MPI_DOUBLE, &sa);
    MPI_Type_get_envelope(sa, &ni, &na, &nd, &comb);
    CHECK(ni == 11 && comb == MPI_COMBINER_SUBARRAY, "subarray envelope %d", ni);
    MPI_Type_get_contents(sa, 11, 0, 1, ints, addrs, tys);
    CHECK(ints[0] == 3 && ints[1] == 4 && ints[4] == 2 && ints[7] == 1 && ints[9] == 0 &&
              ints[10] == MPI_ORDER_FORTRAN,
          "subarray contents");
    MPI_Type_free(&sa);

    /* Scan with a user op over a strided type (every other pair of ints). */
    MPI_Type_vector(2, 2, 4, MPI_INT, &strided);
    MPI_Type_commit(&strided);
    MPI_Op op;
    MPI_Op_create(addstrided, 1, &op);
    int in8[8], out8[8];
    for (int i = 0; i < 8; i++) {
        in8[i] = rank * 10 + i;
        out8[i] = -1;
    }
    MPI_Scan(in8, out8, 1, strided, op, MPI_COMM_WORLD);
    for (int i = 0; i < 8; i++) {
        int used = i % 4 < 2, want = 0;
        for (int r = 0; r <= rank; r++)
            want += r * 10 + i;
        CHECK(out8[i] == (used ? want : -1), "strided Scan [%d] = %d, expected %d", i, out8[i],
              used ? want : -1);
    }
    MPI_Op_free(&op);
    MPI_Type_free(&strided);
    return finish();
}
