/* Environment and small objects: Init_thread/Query_thread/Is_thread_main, Get_version,
 * Get_library_version, Get_processor_name, Wtime/Wtick, Info objects (set/get/delete/dup/
 * nkeys/nthkey), group set operations and range_incl/excl, datatype names, collectives with
 * zero counts (some or all ranks), Scatterv/Gatherv with out-of-order displacements, and
 * attribute deletion on MPI_COMM_SELF at the start of MPI_Finalize. Three processes. */
#include "mtest.h"

static int self_deleted;

static int self_delete(MPI_Comm c, int key, void *val, void *extra)
{
    (void)c;
    (void)key;
    (void)val;
    (void)extra;
    /* MPI is still usable here (MPI 4.1 §11.2.2) */
    int fin = 1;
    MPI_Finalized(&fin);
    self_deleted = fin ? -1 : 1;
    return MPI_SUCCESS;
}

int main(int argc, char **argv)
{
    int rank, size, provided = -1, v, sv;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(provided >= MPI_THREAD_SINGLE && provided <= MPI_THREAD_MULTIPLE, "provided %d",
          provided);
    int q = -1, main_thread = 0;
    MPI_Query_thread(&q);
    CHECK(q == provided, "Query_thread %d, Init_thread provided %d", q, provided);
    MPI_Is_thread_main(&main_thread);
    CHECK(main_thread, "Is_thread_main false on the main thread");
    MPI_Get_version(&v, &sv);
    CHECK(v == MPI_VERSION && sv == MPI_SUBVERSION, "Get_version %d.%d", v, sv);
    char lib[MPI_MAX_LIBRARY_VERSION_STRING], proc[MPI_MAX_PROCESSOR_NAME];
    int len = -1;
    MPI_Get_library_version(lib, &len);
    CHECK(len > 0 && (int)strlen(lib) == len, "Get_library_version length %d", len);
    MPI_Get_processor_name(proc, &len);
    CHECK(len > 0 && (int)strlen(proc) == len, "Get_processor_name length %d", len);
    double t0 = MPI_Wtime(), tick = MPI_Wtick();
    CHECK(tick > 0 && tick < 1, "Wtick %g", tick);
    CHECK(MPI_Wtime() >= t0, "Wtime went back");

    /* Info */
    MPI_Info info, dup;
    MPI_Info_create(&info);
    MPI_Info_set(info, "alpha", "1");
    MPI_Info_set(info, "beta", "two");
    MPI_Info_set(info, "alpha", "one"); /* replaces */
    int nkeys = -1, flag = 0;
    MPI_Info_get_nkeys(info, &nkeys);
    CHECK(nkeys == 2, "Info nkeys %d", nkeys);
    char val[MPI_MAX_INFO_VAL], key[MPI_MAX_INFO_KEY];
    MPI_Info_get(info, "alpha", MPI_MAX_INFO_VAL - 1, val, &flag);
    CHECK(flag && !strcmp(val, "one"), "Info alpha '%s'", val);
    MPI_Info_get(info, "gamma", MPI_MAX_INFO_VAL - 1, val, &flag);
    CHECK(!flag, "Info gamma found");
    MPI_Info_get_nthkey(info, 1, key);
    CHECK(!strcmp(key, "beta"), "Info key 1 '%s'", key);
    MPI_Info_dup(info, &dup);
    MPI_Info_delete(info, "alpha");
    MPI_Info_get_nkeys(info, &nkeys);
    CHECK(nkeys == 1, "Info nkeys after delete %d", nkeys);
    MPI_Info_get_nkeys(dup, &nkeys);
    CHECK(nkeys == 2, "Info dup nkeys %d", nkeys);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
    int rc = MPI_Info_delete(info, "alpha");
    CHECK_CLASS(rc, MPI_ERR_INFO_NOKEY, "deleting a missing info key");
    MPI_Info_free(&info);
    MPI_Info_free(&dup);
    CHECK(info == MPI_INFO_NULL, "Info_free did not set MPI_INFO_NULL");

    /* Groups */
    MPI_Group world, a, b, u, in, diff, ex, rg;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    int ra[2] = {0, 1}, rb[2] = {2, 1};
    MPI_Group_incl(world, size >= 3 ? 2 : 1, ra, &a);
    MPI_Group_incl(world, size >= 3 ? 2 : 1, rb, &b);
    MPI_Group_union(a, b, &u);
    MPI_Group_intersection(a, b, &in);
    MPI_Group_difference(a, b, &diff);
    int n;
    if (size >= 3) {
        MPI_Group_size(u, &n);
        CHECK(n == 3, "union size %d", n);
        int from[3] = {0, 1, 2}, to[3];
        MPI_Group_translate_ranks(u, 3, from, world, to);
        CHECK(to[0] == 0 && to[1] == 1 && to[2] == 2, "union order %d %d %d", to[0], to[1],
              to[2]);
        MPI_Group_size(in, &n);
        MPI_Group_translate_ranks(in, 1, from, world, to);
        CHECK(n == 1 && to[0] == 1, "intersection size %d first %d", n, to[0]);
        MPI_Group_size(diff, &n);
        MPI_Group_translate_ranks(diff, 1, from, world, to);
        CHECK(n == 1 && to[0] == 0, "difference size %d first %d", n, to[0]);
        MPI_Group_rank(b, &n);
        CHECK(n == (rank == 2 ? 0 : rank == 1 ? 1 : MPI_UNDEFINED), "rank in b %d", n);
        int range[1][3] = {{size - 1, 0, -1}};
        MPI_Group_range_incl(world, 1, range, &rg);
        MPI_Group_translate_ranks(rg, 1, from, world, to);
        CHECK(to[0] == size - 1, "range_incl reversed first %d", to[0]);
        int range2[1][3] = {{0, size - 1, 2}};
        MPI_Group_range_excl(world, 1, range2, &ex);
        MPI_Group_size(ex, &n);
        CHECK(n == size / 2, "range_excl of evens: size %d", n);
        int odd = 1;
        MPI_Group_translate_ranks(world, 1, &odd, ex, to);
        CHECK(to[0] == 0, "rank 1 in the odd group is %d", to[0]);
        int zero = 0;
        MPI_Group_translate_ranks(world, 1, &zero, ex, to);
        CHECK(to[0] == MPI_UNDEFINED, "rank 0 in the odd group is %d", to[0]);
        MPI_Group_free(&rg);
        MPI_Group_free(&ex);
    }
    MPI_Group e;
    MPI_Group_excl(world, size, (int[]){0, 1, 2, 3, 4, 5, 6, 7}, &e);
    int res;
    MPI_Group_compare(e, MPI_GROUP_EMPTY, &res);
    CHECK(res == MPI_IDENT, "excluding all gives a group not IDENT to MPI_GROUP_EMPTY: %d", res);
    MPI_Group_size(MPI_GROUP_EMPTY, &n);
    CHECK(n == 0, "MPI_GROUP_EMPTY size %d", n);
    MPI_Group_free(&e);
    MPI_Group_free(&a);
    MPI_Group_free(&b);
    MPI_Group_free(&u);
    MPI_Group_free(&in);
    MPI_Group_free(&diff);
    MPI_Group_free(&world);

    /* Datatype names */
    char name[MPI_MAX_OBJECT_NAME];
    MPI_Type_get_name(MPI_DOUBLE, name, &len);
    CHECK(!strcmp(name, "MPI_DOUBLE"), "name of MPI_DOUBLE '%s'", name);
    MPI_Datatype t;
    MPI_Type_contiguous(3, MPI_INT, &t);
    MPI_Type_get_name(t, name, &len);
    CHECK(len == 0, "a new type has name '%s'", name);
    MPI_Type_set_name(t, "triple");
    MPI_Type_get_name(t, name, &len);
    CHECK(!strcmp(name, "triple") && len == 6, "set type name '%s'", name);
    MPI_Type_free(&t);

    /* Zero counts */
    int buf[8] = {1, 2, 3, 4, 5, 6, 7, 8}, out[8];
    for (int i = 0; i < 8; i++)
        out[i] = -1;
    MPI_Bcast(buf, 0, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Allreduce(buf, out, 0, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allgather(buf, 0, MPI_INT, out, 0, MPI_INT, MPI_COMM_WORLD);
    MPI_Alltoall(buf, 0, MPI_INT, out, 0, MPI_INT, MPI_COMM_WORLD);
    MPI_Reduce_scatter_block(buf, out, 0, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    CHECK(out[0] == -1, "a zero-count collective wrote the buffer");
    /* Gatherv where only rank 1 contributes, displacements reversed */
    int cnts[8], displs[8];
    for (int r = 0; r < size; r++) {
        cnts[r] = r == 1 ? 2 : 0;
        displs[r] = 6 - 2 * r;
    }
    int mine[2] = {rank * 10, rank * 10 + 1};
    MPI_Gatherv(mine, cnts[rank], MPI_INT, out, cnts, displs, MPI_INT, 0, MPI_COMM_WORLD);
    if (rank == 0 && size > 1)
        CHECK(out[4] == 10 && out[5] == 11 && out[0] == -1 && out[6] == -1,
              "Gatherv one contributor: %d %d", out[4], out[5]);
    /* Scatterv with reversed displacements */
    for (int r = 0; r < size; r++) {
        cnts[r] = 1;
        displs[r] = size - 1 - r;
    }
    int one = -1;
    MPI_Scatterv(buf, cnts, displs, MPI_INT, &one, 1, MPI_INT, 0, MPI_COMM_WORLD);
    CHECK(one == buf[size - 1 - rank], "Scatterv reversed got %d", one);
    /* Allgatherv with a zero count in the middle */
    int total = 0;
    for (int r = 0; r < size; r++) {
        cnts[r] = r == 1 ? 0 : 1;
        displs[r] = total;
        total += cnts[r];
    }
    for (int i = 0; i < 8; i++)
        out[i] = -1;
    MPI_Allgatherv(&rank, cnts[rank], MPI_INT, out, cnts, displs, MPI_INT, MPI_COMM_WORLD);
    for (int r = 0, k = 0; r < size; r++)
        if (cnts[r])
            CHECK(out[k++] == r, "Allgatherv with a zero count: [%d] = %d", k - 1, out[k - 1]);

    /* An attribute on MPI_COMM_SELF is deleted first thing in MPI_Finalize. */
    int skey;
    MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, self_delete, &skey, NULL);
    MPI_Comm_set_attr(MPI_COMM_SELF, skey, NULL);
    int all = 0;
    MPI_Allreduce(&errs, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Finalize();
    if (self_deleted != 1) {
        fprintf(stderr, "[%d] MPI_COMM_SELF attribute: delete callback %s\n", rank,
                self_deleted ? "ran after MPI was finalized" : "did not run in MPI_Finalize");
        return 1;
    }
    if (rank == 0 && all == 0)
        printf(" No Errors\n");
    return all ? 1 : 0;
}
