/* Resource reuse: thousands of communicator dup/free and split/free cycles (context ids must
 * be recycled), hundreds of live communicators, thousands of outstanding requests, datatypes,
 * ops, groups and keyvals created and freed in loops. Two processes. */
#include "mtest.h"

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    for (int i = 0; i < 3000; i++) {
        MPI_Comm c;
        if (i % 2)
            MPI_Comm_dup(MPI_COMM_WORLD, &c);
        else
            MPI_Comm_split(MPI_COMM_WORLD, 0, -rank, &c);
        if (i % 500 == 0) {
            int v = 1, w = 0;
            MPI_Allreduce(&v, &w, 1, MPI_INT, MPI_SUM, c);
            CHECK(w == size, "dup/split cycle %d: allreduce %d", i, w);
        }
        MPI_Comm_free(&c);
        if (errs)
            break;
    }

    enum { LIVE = 300 };
    static MPI_Comm live[LIVE];
    for (int i = 0; i < LIVE; i++)
        MPI_Comm_dup(i ? live[i - 1] : MPI_COMM_WORLD, &live[i]);
    for (int i = 0; i < LIVE; i += 37) {
        int v = rank + i, w = -1;
        MPI_Allreduce(&v, &w, 1, MPI_INT, MPI_MAX, live[i]);
        CHECK(w == size - 1 + i, "live comm %d: %d", i, w);
    }
    /* a message on one communicator is not received on another */
    int x = 7, y = -1, flag = 1;
    if (rank == 0 && size > 1)
        MPI_Send(&x, 1, MPI_INT, 1, 0, live[10]);
    if (rank == 1) {
        MPI_Recv(&y, 1, MPI_INT, 0, 0, live[10], MPI_STATUS_IGNORE);
        MPI_Iprobe(0, 0, live[11], &flag, MPI_STATUS_IGNORE);
        CHECK(!flag && y == 7, "cross-communicator match");
    }
    for (int i = LIVE - 1; i >= 0; i--)
        MPI_Comm_free(&live[i]);

    enum { NREQ = 4000 };
    static MPI_Request reqs[2 * NREQ];
    static int in[NREQ], out[NREQ];
    int peer = (rank + 1) % size, from = (rank + size - 1) % size;
    for (int i = 0; i < NREQ; i++) {
        out[i] = rank * NREQ + i;
        MPI_Irecv(&in[i], 1, MPI_INT, from, i % 100, MPI_COMM_WORLD, &reqs[i]);
    }
    for (int i = 0; i < NREQ; i++)
        MPI_Isend(&out[i], 1, MPI_INT, peer, i % 100, MPI_COMM_WORLD, &reqs[NREQ + i]);
    MPI_Waitall(2 * NREQ, reqs, MPI_STATUSES_IGNORE);
    int bad = 0;
    for (int i = 0; i < NREQ; i++)
        bad += in[i] != from * NREQ + i;
    CHECK(!bad, "%d of %d outstanding messages wrong", bad, NREQ);

    for (int i = 0; i < 5000; i++) {
        MPI_Datatype t, u;
        MPI_Type_vector(2, 1, 3, MPI_INT, &t);
        MPI_Type_create_resized(t, 0, 8, &u);
        MPI_Type_commit(&u);
        MPI_Type_free(&t);
        MPI_Type_free(&u);
        MPI_Group g;
        MPI_Comm_group(MPI_COMM_WORLD, &g);
        MPI_Group_free(&g);
        int k;
        MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, MPI_COMM_NULL_DELETE_FN, &k, NULL);
        MPI_Comm_free_keyval(&k);
        MPI_Info info;
        MPI_Info_create(&info);
        MPI_Info_free(&info);
    }
    return finish();
}
