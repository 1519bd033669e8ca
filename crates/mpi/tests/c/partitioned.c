/* Partitioned communication (MPI 4.1 §4.2) beyond MPICH's part/ tests: two partitioned sends
 * to the same rank with the same tag, made ready in the opposite order of their
 * initialisation, must still match the receives in initialisation order; a strided (vector)
 * datatype; MPI_Test before the last MPI_Pready reports not done; statuses carry the user's
 * tag; partitioned traffic does not match ordinary receives of the same tag; and argument
 * errors (partition out of range, MPI_Parrived on a send) return errors under
 * MPI_ERRORS_RETURN. Two processes. */
#include "mtest.h"

enum { PARTS = 4, PER = 3, ROUNDS = 3 };

int main(int argc, char **argv)
{
    int rank;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);

    /* A vector type: PER ints taken every other int. */
    MPI_Datatype strided;
    MPI_Type_vector(PER, 1, 2, MPI_INT, &strided);
    MPI_Type_commit(&strided);

    int first[PARTS * PER * 2], second[PARTS * PER * 2];
    MPI_Request req[2];
    if (rank == 0) {
        MPI_Psend_init(first, PARTS, 1, strided, 1, 7, MPI_COMM_WORLD, MPI_INFO_NULL, &req[0]);
        MPI_Psend_init(second, PARTS, 1, strided, 1, 7, MPI_COMM_WORLD, MPI_INFO_NULL, &req[1]);
        for (int round = 0; round < ROUNDS; round++) {
            for (int i = 0; i < PARTS * PER * 2; i++) {
                first[i] = 1000 * round + i;
                second[i] = -(1000 * round + i);
            }
            /* An ordinary message with the same tag, sent before any partition is ready. */
            int plain = 42 + round;
            MPI_Send(&plain, 1, MPI_INT, 1, 7, MPI_COMM_WORLD);
            MPI_Startall(2, req);
            int flag = 1;
            MPI_Test(&req[1], &flag, MPI_STATUS_IGNORE);
            CHECK(!flag, "round %d: MPI_Test done before any MPI_Pready", round);
            /* The second request first: it must still land in the second receive. */
            MPI_Pready_range(0, PARTS - 1, req[1]);
            for (int p = PARTS - 1; p >= 0; p--)
                MPI_Pready(p, req[0]);
            MPI_Waitall(2, req, MPI_STATUSES_IGNORE);
        }
        /* Errors, on a started request. */
        MPI_Start(&req[0]);
        /* The standard names no class for these; MPICH says MPI_ERR_OTHER, ferry MPI_ERR_ARG. */
        int rc = MPI_Pready(PARTS, req[0]);
        CHECK(rc != MPI_SUCCESS, "MPI_Pready of partition PARTS succeeded");
        rc = MPI_Pready(-1, req[0]);
        CHECK(rc != MPI_SUCCESS, "MPI_Pready of partition -1 succeeded");
        int list[2] = {0, 1};
        MPI_Pready_list(2, list, req[0]);
        int flag;
        rc = MPI_Parrived(req[0], 0, &flag);
        CHECK(rc != MPI_SUCCESS, "MPI_Parrived on a send request succeeded");
        MPI_Pready_range(2, PARTS - 1, req[0]);
        MPI_Wait(&req[0], MPI_STATUS_IGNORE);
    } else if (rank == 1) {
        MPI_Precv_init(first, PARTS, 1, strided, 0, 7, MPI_COMM_WORLD, MPI_INFO_NULL, &req[0]);
        MPI_Precv_init(second, PARTS, 1, strided, 0, 7, MPI_COMM_WORLD, MPI_INFO_NULL, &req[1]);
        for (int round = 0; round < ROUNDS; round++) {
            for (int i = 0; i < PARTS * PER * 2; i++)
                first[i] = second[i] = -7;
            MPI_Startall(2, req);
            int plain = -1;
            MPI_Status st;
            MPI_Recv(&plain, 1, MPI_INT, 0, 7, MPI_COMM_WORLD, &st);
            CHECK(plain == 42 + round, "round %d: ordinary message %d, expected %d", round, plain, 42 + round);
            MPI_Status sts[2];
            MPI_Waitall(2, req, sts);
            for (int k = 0; k < 2; k++) {
                CHECK(sts[k].MPI_SOURCE == 0 && sts[k].MPI_TAG == 7,
                      "round %d: request %d status source %d tag %d", round, k, sts[k].MPI_SOURCE, sts[k].MPI_TAG);
                int n = -1;
                MPI_Get_count(&sts[k], strided, &n);
                CHECK(n == PARTS, "round %d: request %d got %d elements, expected %d", round, k, n, PARTS);
            }
            for (int i = 0; i < PARTS * PER * 2; i++) {
                /* Element e of the vector type covers ints 5e, 5e + 2 and 5e + 4 (extent 5). */
                int covered = i / 5 < PARTS && i % 5 % 2 == 0;
                int want1 = covered ? 1000 * round + i : -7;
                int want2 = covered ? -(1000 * round + i) : -7;
                CHECK(first[i] == want1, "round %d: first[%d] = %d, expected %d", round, i, first[i], want1);
                CHECK(second[i] == want2, "round %d: second[%d] = %d, expected %d", round, i, second[i], want2);
            }
        }
        MPI_Start(&req[0]);
        int flag = 0, rc = MPI_Parrived(req[0], PARTS, &flag);
        CHECK(rc != MPI_SUCCESS, "MPI_Parrived of partition PARTS succeeded");
        do {
            MPI_Parrived(req[0], PARTS - 1, &flag);
        } while (!flag);
        MPI_Wait(&req[0], MPI_STATUS_IGNORE);
    }
    MPI_Request_free(&req[0]);
    MPI_Request_free(&req[1]);
    MPI_Type_free(&strided);
    return finish();
}
