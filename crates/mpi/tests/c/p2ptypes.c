/* Non-contiguous point-to-point: vector, indexed and struct sends into contiguous receives and
 * the other way round (only the type signatures must match, MPI 4.1 §3.3.1), and
 * MPI_Sendrecv_replace with a vector type leaving the gaps alone. Two processes. */
#include "mtest.h"

int main(int argc, char **argv)
{
    int rank;
    MPI_Status st;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    int peer = rank ^ 1;

    /* vector(3 blocks of 2, stride 4) <-> 6 contiguous ints */
    MPI_Datatype vec, idx, str;
    MPI_Type_vector(3, 2, 4, MPI_INT, &vec);
    MPI_Type_commit(&vec);
    int bl[3] = {3, 1, 2}, dp[3] = {5, 0, 9};
    MPI_Type_indexed(3, bl, dp, MPI_INT, &idx);
    MPI_Type_commit(&idx);
    struct rec {
        char c;
        double d;
        int i[2];
    };
    int sbl[3] = {1, 1, 2};
    MPI_Aint sdp[3] = {offsetof(struct rec, c), offsetof(struct rec, d), offsetof(struct rec, i)};
    MPI_Datatype sty[3] = {MPI_CHAR, MPI_DOUBLE, MPI_INT}, tmp;
    MPI_Type_create_struct(3, sbl, sdp, sty, &tmp);
    MPI_Type_create_resized(tmp, 0, sizeof(struct rec), &str);
    MPI_Type_free(&tmp);
    MPI_Type_commit(&str);

    int big[24], flat[24];
    if (rank == 0) {
        for (int i = 0; i < 24; i++)
            big[i] = i;
        MPI_Send(big, 2, vec, 1, 1, MPI_COMM_WORLD); /* two vectors: extent 10 ints */
        MPI_Send(big, 1, idx, 1, 2, MPI_COMM_WORLD);
        for (int i = 0; i < 12; i++)
            flat[i] = 100 + i;
        MPI_Send(flat, 12, MPI_INT, 1, 3, MPI_COMM_WORLD);
        MPI_Send(flat, 6, MPI_INT, 1, 4, MPI_COMM_WORLD);
        struct rec r[3];
        for (int k = 0; k < 3; k++) {
            r[k].c = 'a' + k;
            r[k].d = k + 0.25;
            r[k].i[0] = 10 * k;
            r[k].i[1] = 10 * k + 1;
        }
        MPI_Send(r, 3, str, 1, 5, MPI_COMM_WORLD);
        MPI_Send(r, 3, str, 1, 6, MPI_COMM_WORLD);
    } else if (rank == 1) {
        int n;
        memset(flat, -1, sizeof flat);
        MPI_Recv(flat, 24, MPI_INT, 0, 1, MPI_COMM_WORLD, &st);
        MPI_Get_count(&st, MPI_INT, &n);
        int want1[12] = {0, 1, 4, 5, 8, 9, 10, 11, 14, 15, 18, 19};
        CHECK(n == 12, "2 vectors as ints: count %d", n);
        for (int i = 0; i < 12; i++)
            CHECK(flat[i] == want1[i], "2 vectors as ints: [%d] = %d, expected %d", i, flat[i],
                  want1[i]);
        MPI_Recv(flat, 24, MPI_INT, 0, 2, MPI_COMM_WORLD, &st);
        MPI_Get_count(&st, MPI_INT, &n);
        CHECK(n == 6 && flat[0] == 5 && flat[2] == 7 && flat[3] == 0 && flat[4] == 9 &&
                  flat[5] == 10,
              "indexed as ints: n %d: %d %d %d %d %d %d", n, flat[0], flat[1], flat[2], flat[3],
              flat[4], flat[5]);
        memset(big, -1, sizeof big);
        MPI_Recv(big, 2, vec, 0, 3, MPI_COMM_WORLD, &st);
        MPI_Get_count(&st, vec, &n);
        CHECK(n == 2, "ints as 2 vectors: count %d", n);
        for (int i = 0; i < 12; i++)
            CHECK(big[want1[i]] == 100 + i, "ints as vectors: [%d] = %d", want1[i],
                  big[want1[i]]);
        CHECK(big[2] == -1 && big[12] == -1 && big[20] == -1, "ints as vectors: gaps written");
        memset(big, -1, sizeof big);
        MPI_Recv(big, 1, idx, 0, 4, MPI_COMM_WORLD, &st);
        CHECK(big[5] == 100 && big[7] == 102 && big[0] == 103 && big[9] == 104 &&
                  big[10] == 105 && big[1] == -1 && big[8] == -1,
              "ints as indexed: %d %d %d %d %d", big[5], big[7], big[0], big[9], big[10]);
        /* struct array received as packed bytes then unpacked, and as plain pieces */
        char pk[256];
        MPI_Recv(pk, sizeof pk, MPI_PACKED, 0, 5, MPI_COMM_WORLD, &st);
        MPI_Get_count(&st, MPI_PACKED, &n);
        struct rec r[3];
        memset(r, 0, sizeof r);
        int pos = 0;
        MPI_Unpack(pk, n, &pos, r, 3, str, MPI_COMM_WORLD);
        CHECK(pos == n, "unpacked %d of %d bytes", pos, n);
        for (int k = 0; k < 3; k++)
            CHECK(r[k].c == 'a' + k && r[k].d == k + 0.25 && r[k].i[1] == 10 * k + 1,
                  "struct %d: %c %g %d", k, r[k].c, r[k].d, r[k].i[1]);
        /* into a tightly packed layout: char at 0, double at 1, ints at 9, extent 17 */
        MPI_Aint tdp[3] = {0, 1, 9};
        MPI_Datatype tight;
        MPI_Type_create_struct(3, sbl, tdp, sty, &tmp);
        MPI_Type_create_resized(tmp, 0, 17, &tight);
        MPI_Type_free(&tmp);
        MPI_Type_commit(&tight);
        unsigned char raw[3 * 17 + 1];
        memset(raw, 0, sizeof raw);
        MPI_Recv(raw, 3, tight, 0, 6, MPI_COMM_WORLD, &st);
        for (int k = 0; k < 3; k++) {
            double d;
            int i1;
            memcpy(&d, raw + 17 * k + 1, sizeof d);
            memcpy(&i1, raw + 17 * k + 13, sizeof i1);
            CHECK(raw[17 * k] == 'a' + k && d == k + 0.25 && i1 == 10 * k + 1,
                  "tight struct %d: %c %g %d", k, raw[17 * k], d, i1);
        }
        MPI_Type_free(&tight);
    }

    /* Sendrecv_replace with a vector: only the vector's elements change. */
    int a[12];
    for (int i = 0; i < 12; i++)
        a[i] = rank * 1000 + i;
    MPI_Sendrecv_replace(a, 1, vec, peer, 7, peer, 7, MPI_COMM_WORLD, &st);
    for (int i = 0; i < 12; i++) {
        int in_vec = (i % 4) < 2 && i < 10;
        int want = (in_vec ? peer : rank) * 1000 + i;
        CHECK(a[i] == want, "Sendrecv_replace: a[%d] = %d, expected %d", i, a[i], want);
    }
    int n = -1;
    MPI_Get_count(&st, vec, &n);
    CHECK(n == 1 && st.MPI_SOURCE == peer, "Sendrecv_replace status count %d source %d", n,
          st.MPI_SOURCE);
    MPI_Type_free(&vec);
    MPI_Type_free(&idx);
    MPI_Type_free(&str);
    return finish();
}
