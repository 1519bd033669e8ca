/* Sessions (MPI 4.1 §11.3) without MPI_Init, inside MPI_Init/MPI_Finalize when the first
 * argument is "world", or overlapping them ("late": MPI_Init after the first session,
 * MPI_Finalize before the sessions end): two sessions at once, the process sets mpi://WORLD and
 * mpi://SELF (their names, sizes and groups), communicators from their groups with string tags
 * (a reduction on one, a message to oneself on the other), the session info, MPI_Initialized
 * and MPI_Finalized, and errors for an unknown process set and set number. Any number of
 * processes. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int errs = 0;

#define CHECK(cond, ...)                                                                   \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            errs++;                                                                        \
            fprintf(stderr, "%s:%d: %s: ", __FILE__, __LINE__, #cond);                     \
            fprintf(stderr, __VA_ARGS__);                                                  \
            fprintf(stderr, "\n");                                                         \
        }                                                                                  \
    } while (0)

static MPI_Comm from_pset(MPI_Session s, const char *pset, const char *tag)
{
    MPI_Group g;
    MPI_Comm c = MPI_COMM_NULL;
    CHECK(MPI_Group_from_session_pset(s, pset, &g) == MPI_SUCCESS, "group of %s", pset);
    CHECK(MPI_Comm_create_from_group(g, tag, MPI_INFO_NULL, MPI_ERRORS_RETURN, &c) == MPI_SUCCESS,
          "communicator of %s", pset);
    MPI_Group_free(&g);
    return c;
}

int main(int argc, char **argv)
{
    int world = argc > 1 && strcmp(argv[1], "world") == 0;
    int late = argc > 1 && strcmp(argv[1], "late") == 0;
    int flag = -1;
    if (world)
        MPI_Init(&argc, &argv);
    MPI_Session s1 = MPI_SESSION_NULL, s2 = MPI_SESSION_NULL;
    CHECK(MPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_RETURN, &s1) == MPI_SUCCESS, "init 1");
    MPI_Initialized(&flag);
    CHECK(flag == world, "MPI_Initialized %d with a session open", flag);
    if (late)
        MPI_Init(&argc, &argv);
    CHECK(MPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_RETURN, &s2) == MPI_SUCCESS, "init 2");
    CHECK(s1 != MPI_SESSION_NULL && s2 != MPI_SESSION_NULL && s1 != s2, "session handles");

    MPI_Info info;
    char value[MPI_MAX_INFO_VAL];
    MPI_Session_get_info(s1, &info);
    MPI_Info_get(info, "thread_level", sizeof value, value, &flag);
    CHECK(flag && strncmp(value, "MPI_THREAD_", 11) == 0, "thread_level %s", flag ? value : "-");
    MPI_Info_free(&info);

    /* the process sets, by number: the length protocol, then the names */
    int n = 0, have_world = 0, have_self = 0;
    MPI_Session_get_num_psets(s1, MPI_INFO_NULL, &n);
    CHECK(n >= 2, "%d process sets", n);
    for (int i = 0; i < n; i++) {
        int len = 0;
        MPI_Session_get_nth_pset(s1, MPI_INFO_NULL, i, &len, NULL);
        char *name = malloc(len);
        MPI_Session_get_nth_pset(s1, MPI_INFO_NULL, i, &len, name);
        CHECK((int) strlen(name) + 1 == len, "length %d of %s", len, name);
        have_world |= strcmp(name, "mpi://WORLD") == 0;
        have_self |= strcmp(name, "mpi://SELF") == 0;
        free(name);
    }
    CHECK(have_world && have_self, "process sets mpi://WORLD and mpi://SELF");

    MPI_Comm wc = from_pset(s1, "mpi://WORLD", "org.ferry.test.world");
    int rank = -1, size = -1;
    MPI_Comm_rank(wc, &rank);
    MPI_Comm_size(wc, &size);
    MPI_Session_get_pset_info(s2, "mpi://WORLD", &info);
    MPI_Info_get(info, "mpi_size", sizeof value, value, &flag);
    CHECK(flag && atoi(value) == size, "mpi_size %s, communicator size %d", flag ? value : "-",
          size);
    MPI_Info_free(&info);
    int sum = -1;
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, wc);
    CHECK(sum == size * (size - 1) / 2, "allreduce %d", sum);

    /* mpi://self (any case) from the other session: a message to oneself */
    MPI_Comm sc = from_pset(s2, "mpi://self", "org.ferry.test.self");
    int one = -1, x = 42, y = 0;
    MPI_Comm_size(sc, &one);
    CHECK(one == 1, "self size %d", one);
    MPI_Request r;
    MPI_Irecv(&y, 1, MPI_INT, 0, 3, sc, &r);
    MPI_Send(&x, 1, MPI_INT, 0, 3, sc);
    MPI_Wait(&r, MPI_STATUS_IGNORE);
    CHECK(y == 42, "self message %d", y);
    MPI_Comm_free(&sc);

    /* errors, under the sessions' MPI_ERRORS_RETURN: an unknown process set, a set number out
     * of range (MPICH 4.0.2 aborts on these, so they are ferry's alone) */
#ifdef FERRY_MPI_H
    MPI_Group g = MPI_GROUP_NULL;
    int rc = MPI_Group_from_session_pset(s1, "mpi://NOWHERE", &g);
    CHECK(rc != MPI_SUCCESS, "group of an unknown process set");
    int len = 0;
    rc = MPI_Session_get_nth_pset(s1, MPI_INFO_NULL, n, &len, NULL);
    CHECK(rc != MPI_SUCCESS, "process set number %d of %d", n, n);
#endif

    if (late) {
        /* MPI_Finalize with sessions open: MPI is finalized, the sessions' objects still work */
        MPI_Finalize();
        MPI_Finalized(&flag);
        CHECK(flag == 1, "MPI_Finalized %d after MPI_Finalize", flag);
    }
    int all = 0;
    MPI_Allreduce(&errs, &all, 1, MPI_INT, MPI_SUM, wc);
    MPI_Comm_free(&wc);
    MPI_Session_finalize(&s2);
    CHECK(s2 == MPI_SESSION_NULL, "finalize resets the handle");
    MPI_Session_finalize(&s1);
    if (world)
        MPI_Finalize();
    if (rank == 0) {
        if (all + errs == 0)
            printf(" No Errors\n");
        else
            printf(" Found %d errors\n", all + errs);
    }
    return all + errs ? 1 : 0;
}
