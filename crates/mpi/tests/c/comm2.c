/* Communicator corner cases: Comm_create_group on overlapping groups called one after the
 * other (a process of the second group may start before the others finish the first),
 * nonblocking collectives on two communicators started in opposite orders on different
 * processes, predefined attributes (MPI_APPNUM, MPI_UNIVERSE_SIZE, MPI_HOST) and keyval
 * errors (setting a predefined attribute, an invalid keyval). Four processes. */
#include "mtest.h"

int main(int argc, char **argv)
{
    int rank, size, rc;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    /* Overlapping create_group: A = {0, 1, 2}, B = {1, 2, 3}, same tag. */
    MPI_Group world, ga, gb;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    int ra[3] = {0, 1, 2}, rb[3] = {1, 2, 3};
    MPI_Group_incl(world, 3, ra, &ga);
    MPI_Group_incl(world, 3, rb, &gb);
    MPI_Comm ca = MPI_COMM_NULL, cb = MPI_COMM_NULL;
    if (rank <= 2)
        MPI_Comm_create_group(MPI_COMM_WORLD, ga, 0, &ca);
    if (rank >= 1)
        MPI_Comm_create_group(MPI_COMM_WORLD, gb, 0, &cb);
    if (ca != MPI_COMM_NULL) {
        int n, s = 0;
        MPI_Comm_size(ca, &n);
        MPI_Allreduce(&rank, &s, 1, MPI_INT, MPI_SUM, ca);
        CHECK(n == 3 && s == 3, "group A: size %d sum %d", n, s);
    }
    if (cb != MPI_COMM_NULL) {
        int n, s = 0;
        MPI_Comm_size(cb, &n);
        MPI_Allreduce(&rank, &s, 1, MPI_INT, MPI_SUM, cb);
        CHECK(n == 3 && s == 6, "group B: size %d sum %d", n, s);
    }

    /* Ibcast on A and B in opposite orders on processes 1 and 2. */
    if (ca != MPI_COMM_NULL && cb != MPI_COMM_NULL) {
        int x = -1, y = -1;
        MPI_Request r[2];
        if (rank == 1) {
            MPI_Ibcast(&x, 1, MPI_INT, 0, ca, &r[0]);
            MPI_Ibcast(&y, 1, MPI_INT, 2, cb, &r[1]);
        } else {
            MPI_Ibcast(&y, 1, MPI_INT, 2, cb, &r[1]);
            MPI_Ibcast(&x, 1, MPI_INT, 0, ca, &r[0]);
        }
        MPI_Waitall(2, r, MPI_STATUSES_IGNORE);
        CHECK(x == 100 && y == 300, "opposite-order Ibcasts: %d %d", x, y);
    } else if (ca != MPI_COMM_NULL) { /* nonblocking: it does not match a blocking Bcast */
        int x = 100;
        MPI_Request r;
        MPI_Ibcast(&x, 1, MPI_INT, 0, ca, &r);
        MPI_Wait(&r, MPI_STATUS_IGNORE);
    } else if (cb != MPI_COMM_NULL) {
        int y = 300;
        MPI_Request r;
        MPI_Ibcast(&y, 1, MPI_INT, 2, cb, &r);
        MPI_Wait(&r, MPI_STATUS_IGNORE);
    }
    if (ca != MPI_COMM_NULL)
        MPI_Comm_free(&ca);
    if (cb != MPI_COMM_NULL)
        MPI_Comm_free(&cb);
    MPI_Group_free(&ga);
    MPI_Group_free(&gb);
    MPI_Group_free(&world);

    /* Predefined attributes. */
    int *p, flag;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_APPNUM, &p, &flag);
    CHECK(!flag || *p == 0, "MPI_APPNUM %d", flag ? *p : -1);
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_UNIVERSE_SIZE, &p, &flag);
    CHECK(!flag || *p >= size, "MPI_UNIVERSE_SIZE %d", flag ? *p : -1);
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_HOST, &p, &flag);
    CHECK(!flag || *p == MPI_PROC_NULL || (*p >= 0 && *p < size), "MPI_HOST %d",
          flag ? *p : -1);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    rc = MPI_Comm_set_attr(MPI_COMM_WORLD, MPI_TAG_UB, &flag);
    CHECK(rc != MPI_SUCCESS, "setting MPI_TAG_UB succeeded");
    rc = MPI_Comm_delete_attr(MPI_COMM_WORLD, MPI_TAG_UB);
    CHECK(rc != MPI_SUCCESS, "deleting MPI_TAG_UB succeeded");
    rc = MPI_Comm_get_attr(MPI_COMM_WORLD, 987654, &p, &flag);
    CHECK_CLASS(rc, MPI_ERR_KEYVAL, "get_attr of an invalid keyval");
    int k = MPI_TAG_UB;
    rc = MPI_Comm_free_keyval(&k);
    CHECK(rc != MPI_SUCCESS, "freeing the MPI_TAG_UB keyval succeeded");
    return finish();
}
