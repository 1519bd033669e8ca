/* MPI_Comm_spawn from a group of 2 with root 1: the 3 children (this program with the argument
 * "child") form their own MPI_COMM_WORLD, find the parents with MPI_Comm_get_parent, and every
 * parent and child exchange messages of eager (8 ints) and rendezvous (1 MiB) size in both
 * directions; then an allreduce over the merged intercommunicator, an MPI_Comm_spawn_multiple
 * of two commands (MPI_APPNUM), and MPI_Comm_disconnect. Run on 2 processes; prints
 * " No Errors" from rank 0. (A program that does not exist: tests/c/ports.c.)
 * With the argument "die" the job must fail instead: a spawned process exits with code 3
 * while the parents wait for it.
 * Checked with Open MPI 4.1 (mpirun.openmpi --oversubscribe -n 2); Debian's MPICH 4.0.2 fails
 * every MPI_Comm_spawn on this machine ("Error in spawn call"), even of a one-line program. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NCHILD 3
#define SMALL 8
#define LARGE (256 * 1024)

static int errs;
#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            errs++;                                                                                \
        }                                                                                          \
    } while (0)

static void fill(int *buf, int n, int from, int to)
{
    for (int i = 0; i < n; i++)
        buf[i] = from * 1000003 + to * 1009 + i;
}

static int check(const int *buf, int n, int from, int to)
{
    for (int i = 0; i < n; i++)
        if (buf[i] != from * 1000003 + to * 1009 + i)
            return 0;
    return 1;
}

/* Every local process sends to and receives from every remote one, both sizes. The process with
 * `me` in the local group is `me`, remote rank r is `r + shift` in the tags' numbering. */
static void exchange(MPI_Comm inter, int me_id, int shift)
{
    int remote;
    MPI_Comm_remote_size(inter, &remote);
    int *out = malloc(sizeof(int) * LARGE), *in = malloc(sizeof(int) * LARGE);
    for (int r = 0; r < remote; r++) {
        int peer_id = r + shift;
        for (int big = 0; big < 2; big++) {
            int n = big ? LARGE : SMALL;
            fill(out, n, me_id, peer_id);
            memset(in, 0, sizeof(int) * n);
            MPI_Sendrecv(out, n, MPI_INT, r, big, in, n, MPI_INT, r, big, inter,
                         MPI_STATUS_IGNORE);
            CHECK(check(in, n, peer_id, me_id), "process %d: %d ints from %d are wrong", me_id, n,
                  peer_id);
        }
    }
    free(out);
    free(in);
}

int main(int argc, char **argv)
{
    MPI_Comm parent, inter, merged;
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_get_parent(&parent);

    if (parent != MPI_COMM_NULL && argc > 1 && strcmp(argv[1], "dying") == 0) {
        if (rank == 1)
            exit(3);
        MPI_Comm_disconnect(&parent);
        MPI_Finalize();
        return 0;
    }
    if (parent == MPI_COMM_NULL && argc > 1 && strcmp(argv[1], "die") == 0) {
        char *dying[] = {"dying", NULL};
        int x = 0;
        MPI_Comm_spawn(argv[0], dying, 2, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &inter,
                       MPI_ERRCODES_IGNORE);
        /* Never sent: the launcher ends the job when the child exits. */
        MPI_Recv(&x, 1, MPI_INT, 1, 0, inter, MPI_STATUS_IGNORE);
        MPI_Finalize();
        return 0;
    }
    if (parent != MPI_COMM_NULL) {
        /* A child: ids 10.. in the exchange, parents 0.. */
        char name[MPI_MAX_OBJECT_NAME];
        int len, remote, *appnum, flag;
        MPI_Comm_get_name(parent, name, &len);
        CHECK(strcmp(name, "MPI_COMM_PARENT") == 0, "parent's name %s", name);
        MPI_Comm_remote_size(parent, &remote);
        CHECK(remote == 2, "child: %d parents", remote);
        MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_APPNUM, &appnum, &flag);
        int expected_app = (argc > 2) ? atoi(argv[2]) : 0;
        CHECK(flag && *appnum == expected_app, "child: appnum %d, expected %d", flag ? *appnum : -1,
              expected_app);
        if (argc > 1 && strcmp(argv[1], "multi") == 0) {
            /* From MPI_Comm_spawn_multiple: report errors to parent 0 and go. */
            MPI_Send(&errs, 1, MPI_INT, 0, 7, parent);
            MPI_Comm_disconnect(&parent);
            MPI_Finalize();
            return 0;
        }
        CHECK(size == NCHILD && argc > 1 && strcmp(argv[1], "child") == 0,
              "child: world of %d, argument %s", size, argc > 1 ? argv[1] : "(none)");
        /* The children's own world works. */
        int sum = 0;
        MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        CHECK(sum == NCHILD * (NCHILD - 1) / 2, "child: sum of ranks %d", sum);
        exchange(parent, 10 + rank, 0);
        MPI_Intercomm_merge(parent, 1, &merged);
        int mrank, all = 0;
        MPI_Comm_rank(merged, &mrank);
        CHECK(mrank == 2 + rank, "child %d: rank %d in the merged communicator", rank, mrank);
        MPI_Allreduce(&mrank, &all, 1, MPI_INT, MPI_SUM, merged);
        CHECK(all == 10, "child: merged sum %d", all);
        MPI_Comm_free(&merged);
        MPI_Send(&errs, 1, MPI_INT, 0, 5, parent);
        MPI_Comm_disconnect(&parent);
        MPI_Finalize();
        return 0;
    }

    if (size != 2) {
        if (rank == 0)
            fprintf(stderr, "run on 2 processes\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    char *args[] = {"child", NULL};
    int codes[NCHILD] = {-1, -1, -1};
    /* Only the root's command, arguments and count matter. */
    MPI_Comm_spawn(rank == 1 ? argv[0] : "ignored", rank == 1 ? args : MPI_ARGV_NULL,
                   rank == 1 ? NCHILD : 0, MPI_INFO_NULL, 1, MPI_COMM_WORLD, &inter, codes);
    /* The codes are the root's (Open MPI leaves the others' untouched). */
    for (int i = 0; rank == 1 && i < NCHILD; i++)
        CHECK(codes[i] == MPI_SUCCESS, "root: errcode %d of child %d", codes[i], i);
    int remote, is_inter;
    MPI_Comm_remote_size(inter, &remote);
    MPI_Comm_test_inter(inter, &is_inter);
    CHECK(remote == NCHILD && is_inter, "parent %d: %d children", rank, remote);
    exchange(inter, rank, 10);
    MPI_Intercomm_merge(inter, 0, &merged);
    int mrank, all = 0;
    MPI_Comm_rank(merged, &mrank);
    CHECK(mrank == rank, "parent %d: rank %d in the merged communicator", rank, mrank);
    MPI_Allreduce(&mrank, &all, 1, MPI_INT, MPI_SUM, merged);
    CHECK(all == 10, "parent: merged sum %d", all);
    MPI_Comm_free(&merged);
    if (rank == 0) {
        for (int i = 0; i < NCHILD; i++) {
            int theirs;
            MPI_Recv(&theirs, 1, MPI_INT, i, 5, inter, MPI_STATUS_IGNORE);
            errs += theirs;
        }
    }
    MPI_Comm_disconnect(&inter);

    /* Two commands, one new world: MPI_APPNUM tells them apart. */
    char *cmds[2] = {argv[0], argv[0]};
    char *argv0[] = {"multi", "0", NULL}, *argv1[] = {"multi", "1", NULL};
    char **argvs[2] = {argv0, argv1};
    int np[2] = {1, 2};
    MPI_Info infos[2] = {MPI_INFO_NULL, MPI_INFO_NULL};
    int codes3[3];
    MPI_Comm_spawn_multiple(2, cmds, argvs, np, infos, 0, MPI_COMM_WORLD, &inter, codes3);
    MPI_Comm_remote_size(inter, &remote);
    CHECK(remote == 3, "spawn_multiple: %d processes", remote);
    if (rank == 0) {
        for (int i = 0; i < remote; i++) {
            int theirs;
            MPI_Recv(&theirs, 1, MPI_INT, i, 7, inter, MPI_STATUS_IGNORE);
            errs += theirs;
        }
    }
    MPI_Comm_disconnect(&inter);

    int total = 0;
    MPI_Reduce(&errs, &total, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0 && total == 0)
        printf(" No Errors\n");
    MPI_Finalize();
    return total != 0;
}
