/* Communicator construction (MPI 4.1 §7.4): Comm_split with MPI_UNDEFINED and keys, Comm_create
 * with a subset group (non-members get MPI_COMM_NULL), Comm_create_group, Comm_split_type
 * (MPI_COMM_TYPE_SHARED), Comm_compare, Group_compare/translate, MPI_TAG_UB, communicator names,
 * and collectives on the results. Four processes. */
#include "mtest.h"

int main(int argc, char **argv)
{
    int rank, size, res, n, r;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    /* Even ranks in reverse order; odd ranks get MPI_COMM_NULL. */
    MPI_Comm even;
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2 ? MPI_UNDEFINED : 0, -rank, &even);
    if (rank % 2) {
        CHECK(even == MPI_COMM_NULL, "MPI_UNDEFINED colour did not give MPI_COMM_NULL");
    } else {
        MPI_Comm_size(even, &n);
        MPI_Comm_rank(even, &r);
        CHECK(n == (size + 1) / 2, "even comm size %d", n);
        CHECK(r == n - 1 - rank / 2, "even comm: world %d has rank %d", rank, r);
        int sum = 0;
        MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, even);
        CHECK(sum == (size / 2) * (size / 2 - 1 + (size % 2)) || sum >= 0, "sum");
        int root_world = -1;
        if (r == 0)
            root_world = rank;
        MPI_Bcast(&root_world, 1, MPI_INT, 0, even);
        CHECK(root_world == 2 * (n - 1), "rank 0 of even comm is world %d", root_world);
        MPI_Comm_free(&even);
        CHECK(even == MPI_COMM_NULL, "Comm_free did not set MPI_COMM_NULL");
    }

    /* Same colour, same key: ordered by world rank. */
    MPI_Comm same;
    MPI_Comm_split(MPI_COMM_WORLD, 0, 0, &same);
    MPI_Comm_rank(same, &r);
    CHECK(r == rank, "split with equal keys: rank %d -> %d", rank, r);
    MPI_Comm_compare(MPI_COMM_WORLD, same, &res);
    CHECK(res == MPI_CONGRUENT, "world vs split(0,0): %d", res);
    MPI_Comm_free(&same);

    /* Comm_create with {0, 2}: non-members get MPI_COMM_NULL. */
    MPI_Group world, sub;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    int members[2] = {2, 0};
    MPI_Group_incl(world, 2, members, &sub);
    MPI_Comm created;
    MPI_Comm_create(MPI_COMM_WORLD, sub, &created);
    if (rank == 0 || rank == 2) {
        CHECK(created != MPI_COMM_NULL, "member got MPI_COMM_NULL");
        MPI_Comm_rank(created, &r);
        CHECK(r == (rank == 2 ? 0 : 1), "created comm: world %d has rank %d", rank, r);
        int v = rank, w = -1;
        MPI_Allreduce(&v, &w, 1, MPI_INT, MPI_MAX, created);
        CHECK(w == 2, "created comm allreduce %d", w);
        MPI_Comm_compare(MPI_COMM_WORLD, created, &res);
        CHECK(res == MPI_UNEQUAL, "world vs created: %d", res);
        MPI_Group g;
        MPI_Comm_group(created, &g);
        MPI_Group_compare(g, sub, &res);
        CHECK(res == MPI_IDENT, "group of created comm vs sub: %d", res);
        int from[2] = {0, 1}, to[2];
        MPI_Group_translate_ranks(g, 2, from, world, to);
        CHECK(to[0] == 2 && to[1] == 0, "translate: %d %d", to[0], to[1]);
        MPI_Group_free(&g);
        MPI_Comm_free(&created);
    } else {
        CHECK(created == MPI_COMM_NULL, "non-member of Comm_create got a communicator");
    }
    /* Comm_create_group: only members call. */
    if (rank == 0 || rank == 2) {
        MPI_Comm cg;
        MPI_Comm_create_group(MPI_COMM_WORLD, sub, 5, &cg);
        MPI_Comm_size(cg, &n);
        CHECK(n == 2, "Comm_create_group size %d", n);
        int v = 1, w = 0;
        MPI_Allreduce(&v, &w, 1, MPI_INT, MPI_SUM, cg);
        CHECK(w == 2, "Comm_create_group allreduce %d", w);
        MPI_Comm_free(&cg);
    }
    MPI_Group_free(&sub);

    /* Group compare: same members in another order is SIMILAR. */
    int rev[64];
    for (int i = 0; i < size; i++)
        rev[i] = size - 1 - i;
    MPI_Group rg;
    MPI_Group_incl(world, size, rev, &rg);
    MPI_Group_compare(world, rg, &res);
    CHECK(res == (size > 1 ? MPI_SIMILAR : MPI_IDENT), "group vs reversed group: %d", res);
    MPI_Group_free(&rg);
    MPI_Group_free(&world);

    /* Split type shared: one node here, so everyone. */
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
    MPI_Comm_size(node, &n);
    CHECK(n == size, "shared comm size %d", n);
    MPI_Comm_compare(MPI_COMM_WORLD, node, &res);
    CHECK(res == MPI_CONGRUENT, "world vs shared comm: %d", res);
    MPI_Comm_free(&node);
    MPI_Comm_split_type(MPI_COMM_WORLD, rank == 1 ? MPI_UNDEFINED : MPI_COMM_TYPE_SHARED, 0,
                        MPI_INFO_NULL, &node);
    if (rank == 1)
        CHECK(node == MPI_COMM_NULL, "split_type MPI_UNDEFINED gave a communicator");
    else {
        MPI_Comm_size(node, &n);
        CHECK(n == size - 1, "shared comm without rank 1: size %d", n);
        MPI_Comm_free(&node);
    }

    /* Comm_compare. */
    MPI_Comm dup, revc;
    MPI_Comm_compare(MPI_COMM_WORLD, MPI_COMM_WORLD, &res);
    CHECK(res == MPI_IDENT, "world vs world: %d", res);
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    MPI_Comm_compare(MPI_COMM_WORLD, dup, &res);
    CHECK(res == MPI_CONGRUENT, "world vs dup: %d", res);
    MPI_Comm_split(MPI_COMM_WORLD, 0, size - rank, &revc);
    MPI_Comm_compare(MPI_COMM_WORLD, revc, &res);
    CHECK(res == (size > 1 ? MPI_SIMILAR : MPI_CONGRUENT), "world vs reversed: %d", res);
    MPI_Comm_compare(MPI_COMM_SELF, MPI_COMM_WORLD, &res);
    CHECK(res == (size > 1 ? MPI_UNEQUAL : MPI_CONGRUENT), "self vs world: %d", res);

    /* Attributes of MPI_COMM_WORLD. */
    int *ub, flag = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
    CHECK(flag && *ub >= 32767, "MPI_TAG_UB: flag %d value %d", flag, flag ? *ub : 0);
    MPI_Comm_get_attr(dup, MPI_TAG_UB, &ub, &flag);
    CHECK(flag && *ub >= 32767, "MPI_TAG_UB on a dup: flag %d", flag);
    int big = flag ? *ub : 32767, x = rank, y = -1;
    MPI_Sendrecv(&x, 1, MPI_INT, (rank + 1) % size, big, &y, 1, MPI_INT,
                 (rank + size - 1) % size, big, dup, MPI_STATUS_IGNORE);
    CHECK(y == (rank + size - 1) % size, "message with tag MPI_TAG_UB got %d", y);
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_WTIME_IS_GLOBAL, &ub, &flag);
    CHECK(!flag || *ub == 0 || *ub == 1, "MPI_WTIME_IS_GLOBAL");

    /* Names. */
    char name[MPI_MAX_OBJECT_NAME];
    int len;
    MPI_Comm_get_name(MPI_COMM_WORLD, name, &len);
    CHECK(!strcmp(name, "MPI_COMM_WORLD") && len == 14, "world name '%s' (%d)", name, len);
    MPI_Comm_get_name(MPI_COMM_SELF, name, &len);
    CHECK(!strcmp(name, "MPI_COMM_SELF"), "self name '%s'", name);
    MPI_Comm_get_name(dup, name, &len);
    CHECK(len == 0 && name[0] == 0, "a dup has name '%s'", name);
    MPI_Comm_set_name(dup, "my dup");
    MPI_Comm_get_name(dup, name, &len);
    CHECK(!strcmp(name, "my dup") && len == 6, "set name gave '%s'", name);
    MPI_Comm dup2;
    MPI_Comm_dup(dup, &dup2);
    MPI_Comm_get_name(dup2, name, &len);
    CHECK(len == 0, "the name was copied by Comm_dup: '%s'", name);
    MPI_Comm_set_name(MPI_COMM_WORLD, "renamed world");
    MPI_Comm_get_name(MPI_COMM_WORLD, name, &len);
    CHECK(!strcmp(name, "renamed world"), "renamed world is '%s'", name);

    /* Interleaved collectives on world, dup, dup2 and the reversed comm. */
    int a = rank, b[4] = {0};
    MPI_Request q;
    MPI_Ibcast(&a, 1, MPI_INT, 0, dup, &q);
    MPI_Allreduce(&rank, &b[0], 1, MPI_INT, MPI_SUM, revc);
    MPI_Allreduce(&rank, &b[1], 1, MPI_INT, MPI_MAX, dup2);
    MPI_Bcast(&b[2], 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Wait(&q, MPI_STATUS_IGNORE);
    CHECK(a == 0 && b[0] == size * (size - 1) / 2 && b[1] == size - 1, "interleaved: %d %d %d",
          a, b[0], b[1]);
    MPI_Comm_free(&dup2);
    MPI_Comm_free(&dup);
    MPI_Comm_free(&revc);
    return finish();
}
