/* Rank order in derived communicators: Comm_split breaks key ties by the rank in the parent
 * communicator (not the world rank), Comm_create orders by the group's order, Comm_dup keeps
 * the parent's order, Group_translate_ranks between reordered communicators, and messages and
 * collectives address processes by their rank in the derived communicator. Four processes. */
#include "mtest.h"

int main(int argc, char **argv)
{
    int rank, size, r, w;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    MPI_Comm rev, tie, dup, created;
    MPI_Comm_split(MPI_COMM_WORLD, 0, size - rank, &rev);
    MPI_Comm_rank(rev, &r);
    CHECK(r == size - 1 - rank, "reversed split: %d", r);
    MPI_Comm_split(rev, 0, 0, &tie);
    MPI_Comm_rank(tie, &r);
    CHECK(r == size - 1 - rank, "equal keys in a split of the reversed comm: rank %d, expected %d",
          r, size - 1 - rank);
    MPI_Comm_dup(rev, &dup);
    MPI_Comm_rank(dup, &r);
    CHECK(r == size - 1 - rank, "dup of the reversed comm: rank %d", r);

    /* group {rev rank 1, rev rank 0, ...}: swap the first two */
    MPI_Group g, sub;
    MPI_Comm_group(rev, &g);
    int order[16];
    for (int i = 0; i < size; i++)
        order[i] = i;
    order[0] = 1;
    order[1] = 0;
    MPI_Group_incl(g, size, order, &sub);
    MPI_Comm_create(rev, sub, &created);
    MPI_Comm_rank(created, &r);
    int rr = size - 1 - rank, want = rr == 0 ? 1 : rr == 1 ? 0 : rr;
    CHECK(r == want, "Comm_create with a reordered group: rank %d, expected %d", r, want);

    /* translate: rank 0 of created is world rank size-2 */
    MPI_Group cg, wg;
    MPI_Comm_group(created, &cg);
    MPI_Comm_group(MPI_COMM_WORLD, &wg);
    int zero = 0, tw = -1;
    MPI_Group_translate_ranks(cg, 1, &zero, wg, &tw);
    CHECK(tw == size - 2, "rank 0 of created is world %d, expected %d", tw, size - 2);

    /* send to rank 0 of created: it must be world rank size-2 */
    int x = rank, y = -1;
    MPI_Status st;
    if (r != 0)
        MPI_Send(&x, 1, MPI_INT, 0, 1, created);
    else
        for (int i = 1; i < size; i++) {
            MPI_Recv(&y, 1, MPI_INT, MPI_ANY_SOURCE, 1, created, &st);
            int src_world = -1;
            MPI_Group_translate_ranks(cg, 1, &st.MPI_SOURCE, wg, &src_world);
            CHECK(y == src_world, "status source %d is world %d but the sender says %d",
                  st.MPI_SOURCE, src_world, y);
        }
    if (r == 0)
        CHECK(rank == size - 2, "rank 0 of created is world %d", rank);
    /* gather in created's order */
    int all[16];
    MPI_Gather(&rank, 1, MPI_INT, all, 1, MPI_INT, 0, created);
    if (r == 0)
        for (int i = 0; i < size; i++) {
            int ww = -1;
            MPI_Group_translate_ranks(cg, 1, &i, wg, &ww);
            CHECK(all[i] == ww, "Gather in created: [%d] = %d, expected %d", i, all[i], ww);
        }
    w = -1;
    MPI_Allreduce(&r, &w, 1, MPI_INT, MPI_MAX, tie);
    CHECK(w == size - 1, "allreduce on tie: %d", w);
    MPI_Group_free(&g);
    MPI_Group_free(&sub);
    MPI_Group_free(&cg);
    MPI_Group_free(&wg);
    MPI_Comm_free(&created);
    MPI_Comm_free(&dup);
    MPI_Comm_free(&tie);
    MPI_Comm_free(&rev);
    return finish();
}
