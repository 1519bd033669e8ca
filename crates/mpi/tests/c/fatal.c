/* MPI_ERRORS_ARE_FATAL (the default) ends the job: `fatal send` sends to an invalid rank from
 * process 0, `fatal bcast` calls MPI_Bcast with an invalid root everywhere, `fatal errhandler`
 * sets MPI_ERRORS_RETURN and then MPI_ERRORS_ARE_FATAL back before the bad call, and
 * `fatal abort` has process 1 call MPI_Abort(MPI_COMM_WORLD, 7) while process 0 waits in a
 * barrier, `fatal file` makes MPI_ERRORS_ARE_FATAL the handler of MPI_FILE_NULL (files
 * return errors by default) before opening a file that does not exist, and `fatal exit1` and
 * `fatal exit0` have process 1 call exit(1) or exit(0) without MPI_Finalize while process 0
 * waits in a barrier (the job must end, naming the process, not hang in a finalize). */
#include "mtest.h"

int main(int argc, char **argv)
{
    int rank, size, buf = 0, out = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *c = argc > 1 ? argv[1] : "send";
    if (!strcmp(c, "send")) {
        if (rank == 0)
            MPI_Send(&buf, 1, MPI_INT, size + 3, 0, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
    } else if (!strcmp(c, "bcast")) {
        MPI_Bcast(&buf, 1, MPI_INT, size, MPI_COMM_WORLD);
    } else if (!strcmp(c, "abort")) {
        if (rank == 1)
            MPI_Abort(MPI_COMM_WORLD, 7);
        MPI_Barrier(MPI_COMM_WORLD);
    } else if (!strcmp(c, "errhandler")) {
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
        MPI_Allreduce(&buf, &out, 1, MPI_INT, MPI_OP_NULL, MPI_COMM_WORLD);
    } else if (!strcmp(c, "exit1") || !strcmp(c, "exit0")) {
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 1)
            exit(c[4] == '1');
        MPI_Barrier(MPI_COMM_WORLD);
    } else if (!strcmp(c, "file")) {
        MPI_File fh;
        MPI_File_set_errhandler(MPI_FILE_NULL, MPI_ERRORS_ARE_FATAL);
        MPI_File_open(MPI_COMM_WORLD, "/nonexistent-ferry-dir/file", MPI_MODE_RDONLY, MPI_INFO_NULL, &fh);
    }
    printf("survived %s\n", c);
    MPI_Finalize();
    return 0;
}
