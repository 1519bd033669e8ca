/* Message order with MPI_ANY_SOURCE/MPI_ANY_TAG (non-overtaking, MPI 4.1 §3.5), Probe/Iprobe
 * then Recv with the probed size, Mprobe/Mrecv, and Get_count/Get_elements of messages that do
 * not fill whole elements of the receive type. Three processes. */
#include "mtest.h"

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Status st;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    /* Order: each sender's messages arrive in the order sent, whatever the tag. */
    enum { M = 30 };
    if (rank == 0) {
        int next[16] = {0}, v[2];
        for (int i = 0; i < M * (size - 1); i++) {
            MPI_Recv(v, 2, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
            int s = st.MPI_SOURCE;
            CHECK(s >= 1 && s < size && v[0] == s, "ANY_SOURCE: source %d data %d", s, v[0]);
            if (s < 1 || s >= size)
                break;
            CHECK(v[1] == next[s], "from %d: got message %d, expected %d", s, v[1], next[s]);
            CHECK(st.MPI_TAG == v[1] % 7, "from %d: tag %d for message %d", s, st.MPI_TAG,
                  v[1]);
            next[s] = v[1] + 1;
        }
    } else {
        for (int i = 0; i < M; i++) {
            int v[2] = {rank, i};
            MPI_Send(v, 2, MPI_INT, 0, i % 7, MPI_COMM_WORLD);
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        /* Same source, ANY_TAG after a specific tag: the earlier message first. */
        int a = -1;
        MPI_Recv(&a, 1, MPI_INT, 1, 101, MPI_COMM_WORLD, &st);
        CHECK(a == 2, "tag 101 got %d", a);
        MPI_Recv(&a, 1, MPI_INT, 1, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
        CHECK(a == 1 && st.MPI_TAG == 100, "ANY_TAG got %d tag %d", a, st.MPI_TAG);
        MPI_Recv(&a, 1, MPI_INT, 1, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
        CHECK(a == 3 && st.MPI_TAG == 102, "ANY_TAG got %d tag %d", a, st.MPI_TAG);
    } else if (rank == 1) {
        {
            for (int i = 1; i <= 3; i++)
                MPI_Send(&i, 1, MPI_INT, 0, 99 + i, MPI_COMM_WORLD);
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);

    /* Probe, then receive exactly the probed size from the probed source and tag. */
    if (rank == 0) {
        for (int i = 0; i < 2 * (size - 1); i++) {
            int n = -1;
            if (i % 2)
                MPI_Probe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
            else {
                int flag = 0;
                while (!flag)
                    MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st);
            }
            MPI_Get_count(&st, MPI_DOUBLE, &n);
            int expect = st.MPI_SOURCE * 100 + st.MPI_TAG;
            CHECK(n == expect, "probed %d doubles from %d tag %d, expected %d", n,
                  st.MPI_SOURCE, st.MPI_TAG, expect);
            if (n != expect)
                break;
            double *d = malloc((n > 0 ? n : 1) * sizeof(double));
            MPI_Status rs;
            MPI_Recv(d, n, MPI_DOUBLE, st.MPI_SOURCE, st.MPI_TAG, MPI_COMM_WORLD, &rs);
            int m = -1;
            MPI_Get_count(&rs, MPI_DOUBLE, &m);
            CHECK(m == n && rs.MPI_SOURCE == st.MPI_SOURCE && rs.MPI_TAG == st.MPI_TAG,
                  "received %d from %d tag %d after probing %d", m, rs.MPI_SOURCE, rs.MPI_TAG, n);
            CHECK(n < 1 || d[n - 1] == n - 1, "last value %g", n > 0 ? d[n - 1] : 0.0);
            free(d);
        }
    } else {
        for (int t = rank; t <= rank + 1; t++) {
            int n = rank * 100 + t;
            double *d = malloc(n * sizeof(double));
            for (int i = 0; i < n; i++)
                d[i] = i;
            MPI_Send(d, n, MPI_DOUBLE, 0, t, MPI_COMM_WORLD);
            free(d);
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);

    /* Mprobe/Mrecv: the matched message can no longer be received by anyone else. */
    if (rank == 0) {
        MPI_Message msg;
        MPI_Mprobe(1, 50, MPI_COMM_WORLD, &msg, &st);
        int n = -1, first = -1;
        MPI_Get_count(&st, MPI_INT, &n);
        CHECK(n == 3, "Mprobe count %d", n);
        MPI_Recv(&first, 1, MPI_INT, 1, 50, MPI_COMM_WORLD, &st);
        CHECK(first == 9, "second tag-50 message gave %d", first);
        int three[3] = {0};
        MPI_Mrecv(three, 3, MPI_INT, &msg, &st);
        CHECK(three[0] == 5 && three[2] == 7, "Mrecv data %d..%d", three[0], three[2]);
    } else if (rank == 1) {
        int three[3] = {5, 6, 7}, nine = 9;
        MPI_Send(three, 3, MPI_INT, 0, 50, MPI_COMM_WORLD);
        MPI_Send(&nine, 1, MPI_INT, 0, 50, MPI_COMM_WORLD);
    }
    MPI_Barrier(MPI_COMM_WORLD);

    /* Partial elements: 5 ints received as pairs of ints, 3 ints as {int, double} structs. */
    if (rank == 0) {
        int five[5] = {1, 2, 3, 4, 5};
        MPI_Send(five, 5, MPI_INT, 1, 60, MPI_COMM_WORLD);
        MPI_Send(five, 3, MPI_INT, 1, 61, MPI_COMM_WORLD);
        double dd[2] = {1.5, 2.5};
        MPI_Send(dd, 1, MPI_DOUBLE, 1, 62, MPI_COMM_WORLD);
    } else if (rank == 1) {
        MPI_Datatype pair;
        MPI_Type_contiguous(2, MPI_INT, &pair);
        MPI_Type_commit(&pair);
        int got[8] = {0}, n = -2;
        MPI_Recv(got, 4, pair, 0, 60, MPI_COMM_WORLD, &st);
        MPI_Get_count(&st, pair, &n);
        CHECK(n == MPI_UNDEFINED, "5 ints as pairs: Get_count %d, expected MPI_UNDEFINED", n);
        MPI_Get_elements(&st, pair, &n);
        CHECK(n == 5, "5 ints as pairs: Get_elements %d", n);
        MPI_Count nc = -1;
        MPI_Get_elements_x(&st, pair, &nc);
        CHECK(nc == 5, "Get_elements_x %lld", (long long)nc);
        MPI_Get_count(&st, MPI_INT, &n);
        CHECK(n == 5, "Get_count(MPI_INT) %d", n);
        CHECK(got[4] == 5 && got[5] == 0, "data %d %d", got[4], got[5]);

        struct {
            int i;
            double d;
        } s[2];
        int bl[2] = {1, 1};
        MPI_Aint disp[2] = {0, (char *)&s[0].d - (char *)&s[0]};
        MPI_Datatype ty[2] = {MPI_INT, MPI_INT}, st2;
        /* {int, int} at the offsets of {int, double}: 3 ints fill one and a half. */
        MPI_Type_create_struct(2, bl, disp, ty, &st2);
        MPI_Type_commit(&st2);
        MPI_Recv(s, 2, st2, 0, 61, MPI_COMM_WORLD, &st);
        MPI_Get_count(&st, st2, &n);
        CHECK(n == MPI_UNDEFINED, "3 ints as struct pairs: Get_count %d", n);
        MPI_Get_elements(&st, st2, &n);
        CHECK(n == 3, "3 ints as struct pairs: Get_elements %d", n);
        MPI_Type_free(&st2);

        /* A message of 8 bytes counted in ints is 2, in doubles 1, in pairs 1. */
        double dd = 0;
        MPI_Recv(&dd, 1, MPI_DOUBLE, 0, 62, MPI_COMM_WORLD, &st);
        MPI_Get_count(&st, MPI_BYTE, &n);
        CHECK(n == 8, "Get_count(MPI_BYTE) of a double: %d", n);
        MPI_Type_free(&pair);
    }
    return finish();
}
