/* Dynamic processes within one job: ports, names, disconnect, and the errors of what is not
 * there (a port of another job, a program to spawn that does not exist). Needs an even number of processes (4 in the test): the lower half accepts on a port
 * published by name, the upper half looks it up and connects; both halves then exchange over
 * the intercommunicator, merge it, and disconnect. Prints " No Errors" from rank 0.
 * Unlike the other programs here it could not be checked with MPICH: Debian's MPICH runs no name
 * server (its MPI_Lookup_name fails), and it reports the port and spawn errors as
 * MPI_ERR_OTHER where the standard names MPI_ERR_PORT and MPI_ERR_SPAWN. MPICH's own spawn/
 * tests of ports, names and join run in conformance/dynamic.txt. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

static int errs;
#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            errs++;                                                                                \
        }                                                                                          \
    } while (0)

static int class_of(int rc)
{
    int c;
    MPI_Error_class(rc, &c);
    return c;
}

int main(int argc, char **argv)
{
    int rank, size, rc;
    char port[MPI_MAX_PORT_NAME];
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);

    /* Errors of this process alone. */
    rc = MPI_Lookup_name("ferry-test-nothing", MPI_INFO_NULL, port);
    CHECK(class_of(rc) == MPI_ERR_NAME, "lookup of an unpublished name: class %d", class_of(rc));
    rc = MPI_Close_port("not a port");
    CHECK(class_of(rc) == MPI_ERR_PORT, "closing a bad port name: class %d", class_of(rc));
    rc = MPI_Comm_connect("ferry-port:999999:0", MPI_INFO_NULL, 0, MPI_COMM_SELF,
                          &(MPI_Comm){MPI_COMM_NULL});
    CHECK(class_of(rc) == MPI_ERR_PORT, "connecting to another job's port: class %d",
          class_of(rc));
    int codes[2] = {0, 0};
    MPI_Comm child = MPI_COMM_WORLD;
    /* A program that does not exist: MPI_ERR_SPAWN, and the job goes on. */
    rc = MPI_Comm_spawn("./nothing", MPI_ARGV_NULL, 2, MPI_INFO_NULL, 0, MPI_COMM_SELF, &child,
                        codes);
    CHECK(class_of(rc) == MPI_ERR_SPAWN && child == MPI_COMM_NULL && codes[0] == MPI_ERR_SPAWN,
          "spawn: class %d, intercomm %s, code %d", class_of(rc),
          child == MPI_COMM_NULL ? "null" : "set", codes[0]);
    MPI_Open_port(MPI_INFO_NULL, port);
    CHECK(strncmp(port, "ferry-port:", 11) == 0, "port name %s", port);
    MPI_Close_port(port);
    rc = MPI_Close_port(port);
    CHECK(class_of(rc) == MPI_ERR_PORT, "closing a port twice: class %d", class_of(rc));

    /* The two halves of the world connect through a published port. */
    int upper = rank >= size / 2;
    MPI_Comm half, inter, merged;
    MPI_Comm_split(MPI_COMM_WORLD, upper, rank, &half);
    if (!upper) {
        if (rank == 0) {
            MPI_Open_port(MPI_INFO_NULL, port);
            MPI_Publish_name("ferry-test-service", MPI_INFO_NULL, port);
            rc = MPI_Publish_name("ferry-test-service", MPI_INFO_NULL, port);
            CHECK(class_of(rc) == MPI_ERR_SERVICE, "publishing twice: class %d", class_of(rc));
        }
        MPI_Barrier(MPI_COMM_WORLD); /* published */
        MPI_Comm_accept(port, MPI_INFO_NULL, 0, half, &inter);
    } else {
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == size / 2) {
            rc = MPI_Lookup_name("ferry-test-service", MPI_INFO_NULL, port);
            CHECK(rc == MPI_SUCCESS, "lookup failed");
        }
        MPI_Comm_connect(port, MPI_INFO_NULL, 0, half, &inter);
    }
    int flag, rsize;
    MPI_Comm_test_inter(inter, &flag);
    MPI_Comm_remote_size(inter, &rsize);
    CHECK(flag && rsize == size - size / 2, "intercomm: inter %d, remote size %d", flag, rsize);
    int mine = rank, sum = -1;
    /* Each side gets the sum of the other side's world ranks. */
    MPI_Allreduce(&mine, &sum, 1, MPI_INT, MPI_SUM, inter);
    int lo = (size / 2) * (size / 2 - 1) / 2, all = size * (size - 1) / 2;
    CHECK(sum == (upper ? lo : all - lo), "allreduce over the intercomm: %d", sum);
    MPI_Intercomm_merge(inter, upper, &merged);
    int mrank;
    MPI_Comm_rank(merged, &mrank);
    CHECK(mrank == rank, "merged rank %d, world rank %d", mrank, rank);
    MPI_Comm_free(&merged);
    MPI_Comm_disconnect(&inter);
    CHECK(inter == MPI_COMM_NULL, "disconnect leaves MPI_COMM_NULL");
    if (rank == 0) {
        MPI_Unpublish_name("ferry-test-service", MPI_INFO_NULL, port);
        rc = MPI_Lookup_name("ferry-test-service", MPI_INFO_NULL, port);
        CHECK(class_of(rc) == MPI_ERR_NAME, "lookup after unpublish: class %d", class_of(rc));
        MPI_Close_port(port);
    }
    MPI_Comm_free(&half);

    int total;
    MPI_Allreduce(&errs, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0 && total == 0)
        printf(" No Errors\n");
    MPI_Finalize();
    return total != 0;
}
