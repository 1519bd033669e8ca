/* Partitions travel as they are made ready (MPI 4.1 §4.2: MPI_Parrived reports a partition
 * once its bytes are in, which a runtime that sends each ready partition at once makes
 * possible before the others are ready). The sender readies partition 0 only, then waits for
 * the receiver's word on MPI_COMM_WORLD; the receiver polls MPI_Parrived on partition 0 until
 * it reports arrival (or a generous bound of polls passes), checks partition 1 has not, and
 * only then lets the sender ready partition 1. The receive is cut into twice the sender's
 * partitions, so receive partitions 0 and 1 are the bytes of send partition 0. Two
 * processes; ROUNDS rounds. The standard allows a partition to arrive as late as the whole
 * round, and MPICH 5.0.2 (ch4) reports none before: this checks ferry's behaviour, not a
 * rule. */
#include "mtest.h"

enum { PARTS = 2, PER = 1024, ROUNDS = 5 };
#define POLLS_BOUND 10000000L

int main(int argc, char **argv)
{
    int rank;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    static int buf[PARTS * PER];
    MPI_Request req;
    int go = 0;
    if (rank == 0) {
        MPI_Psend_init(buf, PARTS, PER, MPI_INT, 1, 3, MPI_COMM_WORLD, MPI_INFO_NULL, &req);
        /* Both requests exist before the first round (ferry's sender learns the receiver's
         * blocks from a word MPI_Precv_init sends: partitions readied before it came wait). */
        MPI_Barrier(MPI_COMM_WORLD);
        for (int round = 0; round < ROUNDS; round++) {
            for (int i = 0; i < PARTS * PER; i++)
                buf[i] = round * 10000 + i;
            MPI_Start(&req);
            MPI_Pready(0, req);
            MPI_Recv(&go, 1, MPI_INT, 1, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Pready(1, req);
            MPI_Wait(&req, MPI_STATUS_IGNORE);
        }
    } else if (rank == 1) {
        MPI_Precv_init(buf, 2 * PARTS, PER / 2, MPI_INT, 0, 3, MPI_COMM_WORLD, MPI_INFO_NULL,
                       &req);
        MPI_Barrier(MPI_COMM_WORLD);
        for (int round = 0; round < ROUNDS; round++) {
            for (int i = 0; i < PARTS * PER; i++)
                buf[i] = -1;
            MPI_Start(&req);
            int first = 0, second = 0;
            for (long polls = 0; polls < POLLS_BOUND && !(first && second); polls++) {
                if (!first)
                    MPI_Parrived(req, 0, &first);
                if (!second)
                    MPI_Parrived(req, 1, &second);
            }
            CHECK(first && second, "round %d: receive partitions 0 and 1 (send partition 0) "
                  "not reported arrived while send partition 1 waits", round);
            int later = 1;
            MPI_Parrived(req, 2, &later);
            CHECK(!later, "round %d: partition 2 arrived before the sender readied it", round);
            for (int i = 0; first && i < PER; i++)
                CHECK(buf[i] == round * 10000 + i, "round %d: [%d] = %d", round, i, buf[i]);
            MPI_Send(&go, 1, MPI_INT, 0, 4, MPI_COMM_WORLD);
            MPI_Wait(&req, MPI_STATUS_IGNORE);
            for (int i = 0; i < PARTS * PER; i++)
                CHECK(buf[i] == round * 10000 + i, "round %d: [%d] = %d after MPI_Wait", round, i,
                      buf[i]);
        }
    }
    MPI_Request_free(&req);
    return finish();
}
