/* More persistent requests: Bsend_init and Rsend_init restarted many times, Waitany/Testany/
 * Waitsome over started persistent requests (each reported once, then inactive), a persistent
 * receive with MPI_ANY_SOURCE/MPI_ANY_TAG seeing different senders each round, and
 * MPI_Request_free of a started persistent send. Three processes. */
#include "mtest.h"

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Status st;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    enum { ROUNDS = 50 };

    /* Bsend_init: 0 -> 1, with room for every round. */
    int psz;
    MPI_Pack_size(4, MPI_INT, MPI_COMM_WORLD, &psz);
    int bsize = ROUNDS * (psz + MPI_BSEND_OVERHEAD);
    char *bbuf = malloc(bsize);
    MPI_Buffer_attach(bbuf, bsize);
    int v[4];
    if (rank == 0) {
        MPI_Request r;
        MPI_Bsend_init(v, 4, MPI_INT, 1, 1, MPI_COMM_WORLD, &r);
        for (int it = 0; it < ROUNDS; it++) {
            for (int i = 0; i < 4; i++)
                v[i] = it * 4 + i;
            MPI_Start(&r);
            MPI_Wait(&r, MPI_STATUS_IGNORE);
        }
        MPI_Request_free(&r);
    } else if (rank == 1) {
        MPI_Barrier(MPI_COMM_SELF);
        for (int it = 0; it < ROUNDS; it++) {
            MPI_Recv(v, 4, MPI_INT, 0, 1, MPI_COMM_WORLD, &st);
            CHECK(v[0] == it * 4 && v[3] == it * 4 + 3, "Bsend_init round %d: %d", it, v[0]);
        }
    }
    void *back;
    int bs;
    MPI_Buffer_detach(&back, &bs);
    free(bbuf);

    /* Rsend_init: 1 -> 0, the receive posted before a barrier each round. */
    MPI_Request rs = MPI_REQUEST_NULL, rr = MPI_REQUEST_NULL;
    int x = 0, y = -1;
    if (rank == 1)
        MPI_Rsend_init(&x, 1, MPI_INT, 0, 2, MPI_COMM_WORLD, &rs);
    if (rank == 0)
        MPI_Recv_init(&y, 1, MPI_INT, 1, 2, MPI_COMM_WORLD, &rr);
    for (int it = 0; it < ROUNDS; it++) {
        if (rank == 0)
            MPI_Start(&rr);
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 1) {
            x = it * 3;
            MPI_Start(&rs);
            MPI_Wait(&rs, MPI_STATUS_IGNORE);
        }
        if (rank == 0) {
            MPI_Wait(&rr, MPI_STATUS_IGNORE);
            CHECK(y == it * 3, "Rsend_init round %d: %d", it, y);
        }
    }
    if (rank == 1)
        MPI_Request_free(&rs);
    if (rank == 0)
        MPI_Request_free(&rr);

    /* Waitany over persistent receives from everyone, ANY_TAG. */
    if (rank == 0) {
        MPI_Request r[8];
        int in[8];
        for (int s = 1; s < size; s++)
            MPI_Recv_init(&in[s - 1], 1, MPI_INT, s, MPI_ANY_TAG, MPI_COMM_WORLD, &r[s - 1]);
        for (int it = 0; it < 10; it++) {
            MPI_Startall(size - 1, r);
            int seen = 0;
            for (int k = 0; k < size - 1; k++) {
                int idx;
                MPI_Waitany(size - 1, r, &idx, &st);
                CHECK(idx >= 0 && idx < size - 1 && !(seen & (1 << idx)),
                      "round %d: Waitany index %d (seen %x)", it, idx, seen);
                if (idx < 0 || idx >= size - 1)
                    break;
                seen |= 1 << idx;
                CHECK(r[idx] != MPI_REQUEST_NULL, "Waitany freed a persistent request");
                CHECK(st.MPI_SOURCE == idx + 1 && st.MPI_TAG == it &&
                          in[idx] == (idx + 1) * 100 + it,
                      "round %d: from %d tag %d value %d", it, st.MPI_SOURCE, st.MPI_TAG,
                      in[idx]);
            }
            int idx;
            MPI_Waitany(size - 1, r, &idx, &st);
            CHECK(idx == MPI_UNDEFINED, "Waitany after all: %d", idx);
        }
        for (int s = 1; s < size; s++)
            MPI_Request_free(&r[s - 1]);
    } else {
        for (int it = 0; it < 10; it++) {
            int val = rank * 100 + it;
            MPI_Send(&val, 1, MPI_INT, 0, it, MPI_COMM_WORLD);
        }
    }

    /* Request_free of a started persistent send: the message is still delivered. */
    if (rank == 2 || (size == 2 && rank == 1)) {
        int z = 4242;
        MPI_Request r;
        MPI_Send_init(&z, 1, MPI_INT, 0, 9, MPI_COMM_WORLD, &r);
        MPI_Start(&r);
        MPI_Request_free(&r);
        MPI_Barrier(MPI_COMM_WORLD);
    } else if (rank == 0) {
        int z = 0;
        MPI_Recv(&z, 1, MPI_INT, MPI_ANY_SOURCE, 9, MPI_COMM_WORLD, &st);
        CHECK(z == 4242, "freed started persistent send delivered %d", z);
        MPI_Barrier(MPI_COMM_WORLD);
    } else
        MPI_Barrier(MPI_COMM_WORLD);
    return finish();
}
