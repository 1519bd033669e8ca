/* Collectives whose ranks pass different counts: the receiver with the smaller buffer gets
 * MPI_ERR_TRUNCATE (with MPI_ERRORS_RETURN), not a hang or a crash, and the next collective
 * works. */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int buf[100] = {0};
    int count = rank == 0 ? 100 : 10;
    int rc = MPI_Bcast(buf, count, MPI_INT, 0, MPI_COMM_WORLD);
    int class = MPI_SUCCESS;
    if (rc != MPI_SUCCESS) MPI_Error_class(rc, &class);
    if (rank != 0 && class != MPI_ERR_TRUNCATE) {
        printf("rank %d: expected MPI_ERR_TRUNCATE, got class %d\n", rank, class);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    /* A reduction whose root expects fewer elements than the others send. */
    int sum[100] = {0};
    count = rank == 0 ? 10 : 100;
    rc = MPI_Reduce(buf, sum, count, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    class = MPI_SUCCESS;
    if (rc != MPI_SUCCESS) MPI_Error_class(rc, &class);
    if (rank == 0 && class != MPI_ERR_TRUNCATE) {
        printf("reduce: expected MPI_ERR_TRUNCATE at the root, got class %d\n", class);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    /* Long ones between two ranks, whose messages are pulled by the receiver (CMA) rather
     * than sent eagerly: a broadcast root that sends 128 KiB to a rank that expects 16 KiB,
     * and an allgather whose rank 0 gives 64 KiB where rank 1 gives 16 KiB, which fails on
     * both. (With more ranks on one host such counts can straddle a threshold of the shared
     * segment, and the ranks then take different paths: not caught yet.) */
    static int big[4][32768];
    if (size == 2) {
        count = rank == 0 ? 32768 : 4096;
        rc = MPI_Bcast(big[0], count, MPI_INT, 0, MPI_COMM_WORLD);
        class = MPI_SUCCESS;
        if (rc != MPI_SUCCESS) MPI_Error_class(rc, &class);
        if (rank != 0 && class != MPI_ERR_TRUNCATE) {
            printf("rank %d: long bcast: expected MPI_ERR_TRUNCATE, got class %d\n", rank, class);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        count = rank == 0 ? 16384 : 4096;
        rc = MPI_Allgather(big[3], count, MPI_INT, big[0], count, MPI_INT, MPI_COMM_WORLD);
        if (rc == MPI_SUCCESS) {
            printf("rank %d: allgather of different counts succeeded\n", rank);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
    int one = 1, ranks = 0;
    MPI_Allreduce(&one, &ranks, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (ranks != size) {
        printf("rank %d: allreduce after the errors gave %d\n", rank, ranks);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (rank == 0) printf(" No Errors\n");
    MPI_Finalize();
    return 0;
}
