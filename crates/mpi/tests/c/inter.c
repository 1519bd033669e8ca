/* Intercommunicators beyond what MPICH's tests check (run on 5 processes): uneven groups (2 and
 * 3) whose rank order is not the world's, leaders other than rank 0 meeting on a peer
 * communicator other than MPI_COMM_WORLD; point-to-point naming remote ranks (MPI_ANY_SOURCE
 * and probes report remote ranks); the queries; comparison; attributes copied by dup; merge
 * order by `high`; split with a color missing on one side; create; split_type; every rooted
 * collective with MPI_ROOT / MPI_PROC_NULL and the others across uneven groups; nonblocking
 * barrier, bcast, reduce and allreduce in flight together; errors on the wrong kind. */
#include "mtest.h"

static int keyval_copies = 0;

static int copy_fn(MPI_Comm c, int k, void *extra, void *in, void *out, int *flag)
{
    (void) c;
    (void) k;
    (void) extra;
    keyval_copies++;
    *(void **) out = in;
    *flag = 1;
    return MPI_SUCCESS;
}

/* World ranks of the members of `g`, in group order. */
static void world_of(MPI_Group g, int n, int *out)
{
    MPI_Group world;
    int ranks[16];
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    for (int i = 0; i < n; i++)
        ranks[i] = i;
    MPI_Group_translate_ranks(g, n, ranks, world, out);
    MPI_Group_free(&world);
}

int main(int argc, char **argv)
{
    int wrank, wsize;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    MPI_Comm_size(MPI_COMM_WORLD, &wsize);
    if (wsize != 5) {
        if (wrank == 0)
            fprintf(stderr, "run on 5 processes\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);

    /* Group A: odd world ranks {1, 3}; group B: even ones ordered {4, 2, 0}. */
    const int A[2] = {1, 3}, B[3] = {4, 2, 0};
    int inA = wrank % 2;
    const int *mine = inA ? A : B, *theirs = inA ? B : A;
    int nmine = inA ? 2 : 3, ntheirs = inA ? 3 : 2;
    MPI_Comm peer, local, ic;
    MPI_Comm_split(MPI_COMM_WORLD, 0, wsize - wrank, &peer); /* world reversed */
    MPI_Comm_split(MPI_COMM_WORLD, inA, inA ? wrank : -wrank, &local);
    int lrank, lsize;
    MPI_Comm_rank(local, &lrank);
    MPI_Comm_size(local, &lsize);
    CHECK(lsize == nmine && mine[lrank] == wrank, "local split: rank %d of %d", lrank, lsize);
    /* Leaders: A's local rank 1 (world 3), B's local rank 2 (world 0); ranks in `peer`. */
    int remote_leader_world = inA ? 0 : 3;
    CHECK_OK(MPI_Intercomm_create(local, inA ? 1 : 2, peer, wsize - 1 - remote_leader_world, 77, &ic),
             "MPI_Intercomm_create");

    /* Queries. */
    int flag = -1, n = -1, r = -1, result = -1;
    MPI_Comm_test_inter(ic, &flag);
    CHECK(flag == 1, "test_inter(ic) = %d", flag);
    MPI_Comm_test_inter(local, &flag);
    CHECK(flag == 0, "test_inter(local) = %d", flag);
    MPI_Comm_size(ic, &n);
    MPI_Comm_rank(ic, &r);
    CHECK(n == nmine && r == lrank, "size %d rank %d", n, r);
    MPI_Comm_remote_size(ic, &n);
    CHECK(n == ntheirs, "remote size %d", n);
    MPI_Group g, lg;
    int w[16];
    MPI_Comm_remote_group(ic, &g);
    world_of(g, ntheirs, w);
    for (int i = 0; i < ntheirs; i++)
        CHECK(w[i] == theirs[i], "remote group member %d is world %d", i, w[i]);
    MPI_Group_free(&g);
    MPI_Comm_group(ic, &g);
    MPI_Comm_group(local, &lg);
    MPI_Group_compare(g, lg, &result);
    CHECK(result == MPI_IDENT, "local group of ic vs local: %d", result);
    MPI_Group_free(&g);
    MPI_Group_free(&lg);

    /* Point-to-point: every process of A sends to every process of B, then back. */
    for (int round = 0; round < 2; round++) {
        int sending = round == 0 ? inA : !inA;
        if (sending) {
            for (int j = 0; j < ntheirs; j++) {
                int v = 100 * wrank + j;
                MPI_Send(&v, 1, MPI_INT, j, 5 + round, ic);
            }
        } else {
            int seen = 0;
            for (int k = 0; k < ntheirs; k++) {
                MPI_Status st;
                int v = -1;
                MPI_Probe(MPI_ANY_SOURCE, 5 + round, ic, &st);
                CHECK(st.MPI_SOURCE >= 0 && st.MPI_SOURCE < ntheirs, "probe source %d", st.MPI_SOURCE);
                MPI_Recv(&v, 1, MPI_INT, MPI_ANY_SOURCE, 5 + round, ic, &st);
                CHECK(st.MPI_SOURCE >= 0 && st.MPI_SOURCE < ntheirs, "source %d", st.MPI_SOURCE);
                if (st.MPI_SOURCE >= 0 && st.MPI_SOURCE < ntheirs) {
                    CHECK(v == 100 * theirs[st.MPI_SOURCE] + lrank, "from %d got %d", st.MPI_SOURCE, v);
                    seen |= 1 << st.MPI_SOURCE;
                }
            }
            CHECK(seen == (1 << ntheirs) - 1, "sources seen %#x", seen);
        }
    }
    /* MPI_PROC_NULL on an intercommunicator. */
    {
        MPI_Status st;
        int v = 0;
        MPI_Sendrecv(&v, 1, MPI_INT, MPI_PROC_NULL, 1, &v, 1, MPI_INT, MPI_PROC_NULL, 1, ic, &st);
        CHECK(st.MPI_SOURCE == MPI_PROC_NULL, "proc null source %d", st.MPI_SOURCE);
    }

    /* Comparison and dup (attributes copied). */
    int key;
    MPI_Comm dup;
    MPI_Comm_create_keyval(copy_fn, MPI_COMM_NULL_DELETE_FN, &key, NULL);
    MPI_Comm_set_attr(ic, key, &wrank);
    MPI_Comm_dup(ic, &dup);
    MPI_Comm_compare(ic, dup, &result);
    CHECK(result == MPI_CONGRUENT, "compare(ic, dup) = %d", result);
    MPI_Comm_compare(ic, ic, &result);
    CHECK(result == MPI_IDENT, "compare(ic, ic) = %d", result);
    MPI_Comm_compare(ic, local, &result);
    CHECK(result == MPI_UNEQUAL, "compare(ic, local) = %d", result);
    {
        int *v = NULL;
        MPI_Comm_get_attr(dup, key, &v, &flag);
        CHECK(flag && v == &wrank && keyval_copies == 1, "attribute on dup: flag %d copies %d", flag, keyval_copies);
    }
    /* The dup is a separate message space. */
    if (lrank == 0) {
        int a = wrank, b = -1, c = -1;
        MPI_Request rq[2];
        MPI_Irecv(&b, 1, MPI_INT, 0, 9, ic, &rq[0]);
        MPI_Irecv(&c, 1, MPI_INT, 0, 9, dup, &rq[1]);
        int x = a + 1000;
        MPI_Send(&x, 1, MPI_INT, 0, 9, dup);
        MPI_Send(&a, 1, MPI_INT, 0, 9, ic);
        MPI_Waitall(2, rq, MPI_STATUSES_IGNORE);
        CHECK(b == theirs[0] && c == theirs[0] + 1000, "ic got %d, dup got %d", b, c);
    }
    MPI_Comm_free(&dup);
    MPI_Comm_free_keyval(&key);

    /* Merge: B (high = 0) first, then A; then both high = 0: either order, groups contiguous. */
    MPI_Comm m;
    CHECK_OK(MPI_Intercomm_merge(ic, inA, &m), "MPI_Intercomm_merge");
    MPI_Comm_rank(m, &r);
    CHECK(r == (inA ? 3 + lrank : lrank), "merged rank %d", r);
    {
        int all[5];
        MPI_Allgather(&wrank, 1, MPI_INT, all, 1, MPI_INT, m);
        const int expect[5] = {4, 2, 0, 1, 3};
        for (int i = 0; i < 5; i++)
            CHECK(all[i] == expect[i], "merged member %d is world %d", i, all[i]);
    }
    MPI_Comm_free(&m);
    MPI_Intercomm_merge(ic, 0, &m);
    {
        int all[5];
        MPI_Allgather(&wrank, 1, MPI_INT, all, 1, MPI_INT, m);
        int a_first = all[0] == A[0];
        const int *first = a_first ? A : B, *second = a_first ? B : A;
        int nfirst = a_first ? 2 : 3;
        for (int i = 0; i < 5; i++)
            CHECK(all[i] == (i < nfirst ? first[i] : second[i - nfirst]), "merged (same high) member %d is %d", i, all[i]);
    }
    MPI_Comm_free(&m);

    /* Split: A's colors are its local ranks (color 1 has no partner in B); B is one color,
     * keys reversing its order. */
    MPI_Comm s;
    MPI_Comm_split(ic, inA ? lrank : 0, inA ? 0 : -lrank, &s);
    if (inA && lrank == 1) {
        CHECK(s == MPI_COMM_NULL, "split: color without remote partners gave a communicator");
    } else {
        CHECK(s != MPI_COMM_NULL, "split gave MPI_COMM_NULL");
        if (s != MPI_COMM_NULL) {
            int ls, rs;
            MPI_Comm_size(s, &ls);
            MPI_Comm_remote_size(s, &rs);
            CHECK(ls == (inA ? 1 : 3) && rs == (inA ? 3 : 1), "split sizes %d/%d", ls, rs);
            MPI_Comm_remote_group(s, &g);
            world_of(g, rs, w);
            MPI_Group_free(&g);
            if (inA)
                for (int i = 0; i < 3; i++)
                    CHECK(w[i] == B[2 - i], "split remote member %d is %d", i, w[i]);
            else
                CHECK(w[0] == A[0], "split remote member is %d", w[0]);
            int v = wrank, got = -1;
            if (inA) {
                for (int j = 0; j < 3; j++)
                    MPI_Send(&v, 1, MPI_INT, j, 3, s);
            } else {
                MPI_Recv(&got, 1, MPI_INT, 0, 3, s, MPI_STATUS_IGNORE);
                CHECK(got == A[0], "split message %d", got);
            }
            MPI_Comm_free(&s);
        }
    }

    /* Create: A keeps its local rank 1, B its local ranks 0 and 1. */
    {
        MPI_Group lgroup, sub;
        int keep[2] = {inA ? 1 : 0, 1};
        MPI_Comm_group(ic, &lgroup);
        MPI_Group_incl(lgroup, inA ? 1 : 2, keep, &sub);
        MPI_Comm c;
        CHECK_OK(MPI_Comm_create(ic, sub, &c), "MPI_Comm_create");
        int member = inA ? lrank == 1 : lrank <= 1;
        CHECK((c != MPI_COMM_NULL) == member, "create: member %d got %s", member, c == MPI_COMM_NULL ? "NULL" : "comm");
        if (c != MPI_COMM_NULL) {
            int rs;
            MPI_Comm_remote_size(c, &rs);
            CHECK(rs == (inA ? 2 : 1), "create remote size %d", rs);
            MPI_Comm_free(&c);
        }
        MPI_Group_free(&sub);
        MPI_Group_free(&lgroup);
    }

    /* Split by type: one host, so both whole groups again, as an intercommunicator. */
    {
        MPI_Comm t;
        int ls = -1, rs = -1;
        MPI_Comm_split_type(ic, MPI_COMM_TYPE_SHARED, -lrank, MPI_INFO_NULL, &t);
        MPI_Comm_test_inter(t, &flag);
        MPI_Comm_size(t, &ls);
        if (flag)
            MPI_Comm_remote_size(t, &rs);
        MPI_Comm_rank(t, &r);
        CHECK(flag && ls == nmine && rs == ntheirs && r == nmine - 1 - lrank,
              "split_type: inter %d sizes %d/%d rank %d", flag, ls, rs, r);
        MPI_Comm_free(&t);
        MPI_Comm_split_type(ic, MPI_UNDEFINED, 0, MPI_INFO_NULL, &t);
        CHECK(t == MPI_COMM_NULL, "split_type with MPI_UNDEFINED gave a communicator");
    }

    /* Rooted collectives: the root is A's local rank 1 or B's local rank 0. */
    {
        int buf[3] = {0, 0, 0};
        if (inA && lrank == 1)
            buf[0] = 7, buf[1] = 8, buf[2] = 9;
        MPI_Bcast(buf, 3, MPI_INT, inA ? (lrank == 1 ? MPI_ROOT : MPI_PROC_NULL) : 1, ic);
        if (inA)
            CHECK(buf[0] == (lrank == 1 ? 7 : 0), "bcast in root group: %d", buf[0]);
        else
            CHECK(buf[0] == 7 && buf[1] == 8 && buf[2] == 9, "bcast got %d %d %d", buf[0], buf[1], buf[2]);

        int sum = -1;
        MPI_Reduce(&wrank, &sum, 1, MPI_INT, MPI_SUM, inA ? 0 : (lrank == 0 ? MPI_ROOT : MPI_PROC_NULL), ic);
        if (!inA && lrank == 0)
            CHECK(sum == 4, "reduce at root %d", sum);

        MPI_Allreduce(&wrank, &sum, 1, MPI_INT, MPI_SUM, ic);
        CHECK(sum == (inA ? 6 : 4), "allreduce %d", sum);

        /* Gatherv at A's rank 0: B's local rank k sends k + 1 copies of its world rank, placed
         * in reverse order. */
        int gv[16], counts[3] = {1, 2, 3}, displs[3] = {5, 3, 0}, out[3];
        for (int i = 0; i < 16; i++)
            gv[i] = -1;
        for (int i = 0; i < 3; i++)
            out[i] = wrank;
        int groot = inA ? (lrank == 0 ? MPI_ROOT : MPI_PROC_NULL) : 0;
        MPI_Gatherv(out, inA ? 0 : lrank + 1, MPI_INT, gv, counts, displs, MPI_INT, groot, ic);
        if (inA && lrank == 0) {
            const int expect[6] = {0, 0, 0, 2, 2, 4};
            for (int i = 0; i < 6; i++)
                CHECK(gv[i] == expect[i], "gatherv[%d] = %d", i, gv[i]);
        }

        /* Scatter from B's rank 2 (world 0) to A: two ints each. */
        int sc[4] = {10, 11, 12, 13}, got[2] = {-1, -1};
        int sroot = inA ? 2 : (lrank == 2 ? MPI_ROOT : MPI_PROC_NULL);
        MPI_Scatter(sc, 2, MPI_INT, got, 2, MPI_INT, sroot, ic);
        if (inA)
            CHECK(got[0] == 10 + 2 * lrank && got[1] == 11 + 2 * lrank, "scatter got %d %d", got[0], got[1]);

        int ag[3] = {-1, -1, -1};
        MPI_Allgather(&wrank, 1, MPI_INT, ag, 1, MPI_INT, ic);
        for (int j = 0; j < ntheirs; j++)
            CHECK(ag[j] == theirs[j], "allgather[%d] = %d", j, ag[j]);

        int a2a_out[3], a2a_in[3];
        for (int j = 0; j < ntheirs; j++)
            a2a_out[j] = 1000 * wrank + j, a2a_in[j] = -1;
        MPI_Alltoall(a2a_out, 1, MPI_INT, a2a_in, 1, MPI_INT, ic);
        for (int j = 0; j < ntheirs; j++)
            CHECK(a2a_in[j] == 1000 * theirs[j] + lrank, "alltoall[%d] = %d", j, a2a_in[j]);

        /* Reduce_scatter: both groups reduce 6 elements; A scatters 3 + 3, B 2 + 2 + 2. */
        int rs_in[6], rs_out[3] = {-1, -1, -1};
        int rcA[2] = {3, 3}, rcB[3] = {2, 2, 2};
        for (int i = 0; i < 6; i++)
            rs_in[i] = wrank + i;
        MPI_Reduce_scatter(rs_in, rs_out, inA ? rcA : rcB, MPI_INT, MPI_SUM, ic);
        for (int i = 0; i < (inA ? 3 : 2); i++) {
            int e = inA ? 3 * lrank + i : 2 * lrank + i;
            int expect = inA ? 6 + 3 * e : 4 + 2 * e;
            CHECK(rs_out[i] == expect, "reduce_scatter[%d] = %d, expected %d", i, rs_out[i], expect);
        }
        MPI_Barrier(ic);
    }

    /* Nonblocking collectives, all started before any completes; A waits in reverse order. */
    {
        MPI_Request rq[4];
        int bb[2] = {0, 0}, rsum = -1, amax = -1;
        if (!inA && lrank == 0)
            bb[0] = 42, bb[1] = 43;
        int broot = inA ? 0 : (lrank == 0 ? MPI_ROOT : MPI_PROC_NULL);
        int rroot = inA ? (lrank == 0 ? MPI_ROOT : MPI_PROC_NULL) : 0;
        MPI_Ibcast(bb, 2, MPI_INT, broot, ic, &rq[0]);
        MPI_Ireduce(&wrank, &rsum, 1, MPI_INT, MPI_SUM, rroot, ic, &rq[1]);
        MPI_Iallreduce(&wrank, &amax, 1, MPI_INT, MPI_MAX, ic, &rq[2]);
        MPI_Ibarrier(ic, &rq[3]);
        if (inA)
            for (int i = 3; i >= 0; i--)
                MPI_Wait(&rq[i], MPI_STATUS_IGNORE);
        else
            MPI_Waitall(4, rq, MPI_STATUSES_IGNORE);
        if (inA)
            CHECK(bb[0] == 42 && bb[1] == 43, "ibcast got %d %d", bb[0], bb[1]);
        if (inA && lrank == 0)
            CHECK(rsum == 6, "ireduce at root %d", rsum);
        CHECK(amax == (inA ? 4 : 3), "iallreduce max %d", amax);
    }

    /* Errors on the wrong kind of communicator, and bad roots. (MPICH answers
     * MPI_Comm_remote_size of an intracommunicator and asserts in MPI_Intercomm_merge of one,
     * so ferry's MPI_ERR_COMM for those is not checked here.) */
    {
        int rc, x = 0, y = 0;
        rc = MPI_Bcast(&x, 1, MPI_INT, 5, ic);
        CHECK_CLASS(rc, MPI_ERR_ROOT, "bcast with root 5 on an intercommunicator");
        rc = MPI_Scan(&x, &y, 1, MPI_INT, MPI_SUM, ic);
        CHECK_CLASS(rc, MPI_ERR_COMM, "scan on an intercommunicator");
        rc = MPI_Exscan(&x, &y, 1, MPI_INT, MPI_SUM, ic);
        CHECK_CLASS(rc, MPI_ERR_COMM, "exscan on an intercommunicator");
        MPI_Request req;
        rc = MPI_Iscan(&x, &y, 1, MPI_INT, MPI_SUM, ic, &req);
        CHECK_CLASS(rc, MPI_ERR_COMM, "iscan on an intercommunicator");
        rc = MPI_Allreduce(MPI_IN_PLACE, &y, 1, MPI_INT, MPI_SUM, ic);
        CHECK_CLASS(rc, MPI_ERR_BUFFER, "MPI_IN_PLACE on an intercommunicator");
        MPI_Group lg2;
        MPI_Comm c2;
        MPI_Comm_group(local, &lg2);
        rc = MPI_Comm_create_group(ic, lg2, 0, &c2);
        CHECK_CLASS(rc, MPI_ERR_COMM, "create_group on an intercommunicator");
        MPI_Group_free(&lg2);
        rc = MPI_Comm_test_inter(MPI_COMM_NULL, &flag);
        CHECK_CLASS(rc, MPI_ERR_COMM, "test_inter of MPI_COMM_NULL");
        rc = MPI_Intercomm_merge(MPI_COMM_NULL, 0, &m);
        CHECK_CLASS(rc, MPI_ERR_COMM, "merge of MPI_COMM_NULL");
        rc = MPI_Intercomm_create(local, 99, peer, 0, 78, &c2);
        CHECK_CLASS(rc, MPI_ERR_RANK, "intercomm_create with local leader 99");
        int dims[1] = {0}, periods[1] = {0};
        MPI_Comm cart;
        rc = MPI_Cart_create(ic, 1, dims, periods, 0, &cart);
        CHECK_CLASS(rc, MPI_ERR_COMM, "cart_create on an intercommunicator");
    }

    MPI_Comm_free(&ic);
    MPI_Comm_free(&local);
    MPI_Comm_free(&peer);
    return finish();
}
