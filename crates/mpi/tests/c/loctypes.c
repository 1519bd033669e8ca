/* Predefined reduction ops on every kind of predefined type (MPI 4.1 §6.9.2): MAXLOC/MINLOC on
 * all pair types (MPI_FLOAT_INT, MPI_LONG_INT, MPI_SHORT_INT, MPI_LONG_DOUBLE_INT with their C
 * padding), SUM/PROD on fixed-width, unsigned, complex and long double types, logical ops on
 * MPI_C_BOOL, bitwise ops on MPI_BYTE, and a user op on a struct type. Four processes. */
#include "mtest.h"
#include <complex.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct {
    float v;
    int i;
} fi_t;
typedef struct {
    long v;
    int i;
} li_t;
typedef struct {
    short v;
    int i;
} si_t;
typedef struct {
    long double v;
    int i;
} ldi_t;

#define LOC(T, MT, val_expr, what)                                                           \
    do {                                                                                     \
        T in[2], out[2];                                                                     \
        memset(in, 0, sizeof in);                                                            \
        memset(out, 0, sizeof out);                                                          \
        in[0].v = (val_expr);                                                                \
        in[0].i = rank;                                                                      \
        in[1].v = 7;                                                                         \
        in[1].i = size - rank;                                                               \
        MPI_Allreduce(in, out, 2, MT, MPI_MAXLOC, MPI_COMM_WORLD);                           \
        CHECK(out[0].v == (size - 1) % 3 + 1 || out[0].v == 3, what " MAXLOC value");        \
        CHECK(out[1].v == 7 && out[1].i == 1, what " MAXLOC tie index %d", out[1].i);        \
        MPI_Allreduce(in, out, 2, MT, MPI_MINLOC, MPI_COMM_WORLD);                           \
        CHECK(out[0].v == 1 && out[0].i == 0, what " MINLOC %d", out[0].i);                  \
        CHECK(out[1].v == 7 && out[1].i == 1, what " MINLOC tie index %d", out[1].i);        \
    } while (0)

static void user_max(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    si_t *a = in, *b = inout;
    CHECK(*dt == MPI_SHORT_INT, "user op got another datatype");
    for (int k = 0; k < *len; k++)
        if (a[k].v > b[k].v)
            b[k] = a[k];
}

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    /* values 1, 2, 3, 1, 2, 3, ...: the max 3 first appears at rank 2 (or size-1 if < 3) */
    LOC(fi_t, MPI_FLOAT_INT, (float)(rank % 3 + 1), "FLOAT_INT");
    LOC(li_t, MPI_LONG_INT, (long)(rank % 3 + 1), "LONG_INT");
    LOC(si_t, MPI_SHORT_INT, (short)(rank % 3 + 1), "SHORT_INT");
    LOC(ldi_t, MPI_LONG_DOUBLE_INT, (long double)(rank % 3 + 1), "LONG_DOUBLE_INT");
    {
        si_t in = {(short)(rank % 3 + 1), rank}, out = {0, -1};
        MPI_Allreduce(&in, &out, 1, MPI_SHORT_INT, MPI_MAXLOC, MPI_COMM_WORLD);
        int wi = size >= 3 ? 2 : size - 1;
        CHECK(out.i == wi, "SHORT_INT MAXLOC index %d, expected %d", out.i, wi);
    }
    {
        int extent_ok;
        MPI_Aint lb, ex;
        MPI_Type_get_extent(MPI_SHORT_INT, &lb, &ex);
        extent_ok = ex == (MPI_Aint)sizeof(si_t);
        CHECK(extent_ok, "MPI_SHORT_INT extent %ld, sizeof %zu", (long)ex, sizeof(si_t));
        MPI_Type_get_extent(MPI_LONG_DOUBLE_INT, &lb, &ex);
        CHECK(ex == (MPI_Aint)sizeof(ldi_t), "MPI_LONG_DOUBLE_INT extent %ld, sizeof %zu",
              (long)ex, sizeof(ldi_t));
        MPI_Type_get_extent(MPI_LONG_INT, &lb, &ex);
        CHECK(ex == (MPI_Aint)sizeof(li_t), "MPI_LONG_INT extent %ld", (long)ex);
    }

    /* SUM and PROD across types */
    {
        int8_t a = (int8_t)(rank - 2), b = 0;
        MPI_Allreduce(&a, &b, 1, MPI_INT8_T, MPI_SUM, MPI_COMM_WORLD);
        int w = 0;
        for (int r = 0; r < size; r++)
            w += r - 2;
        CHECK(b == (int8_t)w, "INT8 SUM %d", b);
        uint64_t u = (uint64_t)1 << (60 + rank % 4), v = 0;
        MPI_Allreduce(&u, &v, 1, MPI_UINT64_T, MPI_BOR, MPI_COMM_WORLD);
        uint64_t wu = 0;
        for (int r = 0; r < size; r++)
            wu |= (uint64_t)1 << (60 + r % 4);
        CHECK(v == wu, "UINT64 BOR %llx", (unsigned long long)v);
        unsigned long long ull = 0xFFFFFFFFFFFFFFF0ULL + rank, ullo = 0;
        MPI_Allreduce(&ull, &ullo, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
        CHECK(ullo == 0xFFFFFFFFFFFFFFF0ULL + size - 1, "UNSIGNED_LONG_LONG MAX");
        double complex z = (rank + 1) + 1.0 * I, zo = 0;
        MPI_Allreduce(&z, &zo, 1, MPI_C_DOUBLE_COMPLEX, MPI_PROD, MPI_COMM_WORLD);
        double complex wz = 1;
        for (int r = 0; r < size; r++)
            wz *= (r + 1) + 1.0 * I;
        CHECK(creal(zo) == creal(wz) && cimag(zo) == cimag(wz), "C_DOUBLE_COMPLEX PROD %g%+gi, expected %g%+gi", creal(zo),
              cimag(zo), creal(wz), cimag(wz));
        float complex fz = rank + 2.0f * I, fzo = 0;
        MPI_Allreduce(&fz, &fzo, 1, MPI_C_FLOAT_COMPLEX, MPI_SUM, MPI_COMM_WORLD);
        CHECK(crealf(fzo) == size * (size - 1) / 2 && cimagf(fzo) == 2.0f * size,
              "C_FLOAT_COMPLEX SUM");
        long double ld = 1.0L + rank / 1024.0L, ldo = 0;
        MPI_Allreduce(&ld, &ldo, 1, MPI_LONG_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        long double wld = 0;
        for (int r = 0; r < size; r++)
            wld += 1.0L + r / 1024.0L;
        CHECK(ldo == wld, "LONG_DOUBLE SUM %Lg, expected %Lg", ldo, wld);
        bool t = rank % 2 == 0, to = 0;
        MPI_Allreduce(&t, &to, 1, MPI_C_BOOL, MPI_LXOR, MPI_COMM_WORLD);
        CHECK(to == (((size + 1) / 2) % 2 == 1), "C_BOOL LXOR %d", to);
        MPI_Allreduce(&t, &to, 1, MPI_C_BOOL, MPI_LAND, MPI_COMM_WORLD);
        CHECK(to == (size == 1), "C_BOOL LAND %d", to);
        unsigned char by = (unsigned char)(1 << rank), byo = 0;
        MPI_Allreduce(&by, &byo, 1, MPI_BYTE, MPI_BXOR, MPI_COMM_WORLD);
        CHECK(byo == (1 << size) - 1, "BYTE BXOR %d", byo);
        short sh = (short)(rank + 1), sho = 0;
        MPI_Reduce(&sh, &sho, 1, MPI_SHORT, MPI_PROD, 0, MPI_COMM_WORLD);
        short wsh = 1;
        for (int r = 0; r < size; r++)
            wsh = (short)(wsh * (r + 1));
        if (rank == 0)
            CHECK(sho == wsh, "SHORT PROD %d", sho);
        int li = rank, lo = -1;
        MPI_Allreduce(&li, &lo, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
        CHECK(lo == (size > 1), "INT LOR %d", lo);
        /* a count of 0 is allowed and leaves the buffer */
        lo = 99;
        MPI_Allreduce(&li, &lo, 0, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        CHECK(lo == 99, "count 0 changed the receive buffer");
    }

    /* A user op on the MPI_SHORT_INT pair type. */
    MPI_Op op;
    MPI_Op_create(user_max, 1, &op);
    si_t in = {(short)((rank * 5 + 1) % size), rank}, out;
    MPI_Allreduce(&in, &out, 1, MPI_SHORT_INT, op, MPI_COMM_WORLD);
    CHECK(out.v == size - 1, "user op on SHORT_INT: %d", out.v);
    MPI_Op_free(&op);
    return finish();
}
