/* Process topologies and neighbourhood collectives, beyond what MPICH's tests check (its
 * coll/neighb_* tests do nothing under USE_STRICT_MPI): on a 2-D Cartesian grid (with edges and,
 * from 9 processes on, a periodic dimension) and periodic rings of 1 and 2, on a graph
 * with self loops, and on an asymmetric weighted distributed graph made by
 * MPI_Dist_graph_create from rank 0's edges alone. Every neighbourhood collective is checked
 * block by block against what the neighbours sent, the nonblocking forms are all started before
 * any is waited for, strided receive types exercise staging, blocks of MPI_PROC_NULL neighbours
 * must stay untouched, and argument errors give the classes MPICH gives. Any process count. */
#include "mtest.h"

#define UNTOUCHED -7
#define MAXN 64 /* room for neighbours' blocks */

/* What rank `from` puts in its block for its neighbour number `slot`, element `k`. */
static int val(int from, int slot, int k)
{
    return 10000 * (from + 1) + 100 * slot + k;
}


/* The position of the `occ`-th occurrence of `x` in a[0..n), or -1. */
static int nth(const int *a, int n, int x, int occ)
{
    for (int j = 0; j < n; j++)
        if (a[j] == x && occ-- == 0)
            return j;
    return -1;
}

/* How many times x occurs in a[0..i). */
static int before(const int *a, int i, int x)
{
    int c = 0;
    for (int j = 0; j < i; j++)
        c += a[j] == x;
    return c;
}

/* Neighbours of a topology communicator as sources and destinations (cart, graph, dist). */
static void neighbours(MPI_Comm c, int *indeg, int *src, int *outdeg, int *dst)
{
    int kind, me;
    MPI_Topo_test(c, &kind);
    MPI_Comm_rank(c, &me);
    if (kind == MPI_CART) {
        int nd;
        MPI_Cartdim_get(c, &nd);
        for (int d = 0; d < nd; d++)
            MPI_Cart_shift(c, d, 1, &src[2 * d], &src[2 * d + 1]);
        *indeg = *outdeg = 2 * nd;
        memcpy(dst, src, sizeof(int) * 2 * nd);
    } else if (kind == MPI_GRAPH) {
        MPI_Graph_neighbors_count(c, me, indeg);
        MPI_Graph_neighbors(c, me, MAXN, src);
        *outdeg = *indeg;
        memcpy(dst, src, sizeof(int) * *indeg);
    } else {
        int w;
        MPI_Dist_graph_neighbors_count(c, indeg, outdeg, &w);
        MPI_Dist_graph_neighbors(c, MAXN, src, MPI_UNWEIGHTED, MAXN, dst, MPI_UNWEIGHTED);
    }
}

static int world;

/* The distributed graph: i -> i+1 and i -> i+2 (mod world, once each: on one process, one self
 * loop). Not symmetric from 3 processes on. */
static int dist_dests(int r, int *d)
{
    d[0] = (r + 1) % world;
    d[1] = (r + 2) % world;
    return d[1] == d[0] ? 1 : 2;
}

/* How many edges of the distributed graph run from `from` to `to`. */
static int dist_edges(int from, int to)
{
    int d[2], n = dist_dests(from, d), c = 0;
    for (int k = 0; k < n; k++)
        c += d[k] == to;
    return c;
}

/* Which of source src[i]'s destination slots feeds my source slot i. */
static int sender_slot(MPI_Comm c, int kind, const int *src, int i)
{
    if (kind == MPI_CART)
        return i ^ 1; /* the block a neighbour sends towards +1 arrives from -1 */
    /* The k-th edge from s to me (in my source order) is the k-th in s's destination order. */
    int me, occ = before(src, i, src[i]);
    MPI_Comm_rank(c, &me);
    int d[MAXN], n;
    if (kind == MPI_GRAPH) {
        MPI_Graph_neighbors_count(c, src[i], &n);
        MPI_Graph_neighbors(c, src[i], MAXN, d);
    } else {
        /* Distributed graph: every process's destinations are known from the construction. */
        n = dist_dests(src[i], d);
    }
    return nth(d, n, me, occ);
}

#define K 2 /* elements per block */

/* All five neighbourhood collectives, blocking and then nonblocking, checked block by block. */
static void exercise(MPI_Comm c, const char *what)
{
    int kind, me, indeg, outdeg, src[MAXN], dst[MAXN];
    MPI_Topo_test(c, &kind);
    MPI_Comm_rank(c, &me);
    neighbours(c, &indeg, src, &outdeg, dst);
    int sbuf[MAXN * K], rbuf[MAXN * 2 * K], rbuf2[MAXN * 2 * K];
    int scount[MAXN], sdisp[MAXN], rcount[MAXN], rdisp[MAXN];
    MPI_Aint sdispw[MAXN], rdispw[MAXN];
    MPI_Datatype stypes[MAXN], rtypes[MAXN], strided;
    /* K ints with a gap after each: exercises staging on the receive side. */
    MPI_Type_vector(K, 1, 2, MPI_INT, &strided);
    MPI_Type_commit(&strided);

    for (int j = 0; j < outdeg; j++)
        for (int k = 0; k < K; k++)
            sbuf[j * K + k] = val(me, j, k);

    /* alltoall (contiguous) and its nonblocking form */
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < MAXN * 2 * K; i++)
            rbuf[i] = UNTOUCHED;
        if (pass == 0) {
            MPI_Neighbor_alltoall(sbuf, K, MPI_INT, rbuf, K, MPI_INT, c);
        } else {
            MPI_Request r;
            MPI_Ineighbor_alltoall(sbuf, K, MPI_INT, rbuf, K, MPI_INT, c, &r);
            MPI_Wait(&r, MPI_STATUS_IGNORE);
        }
        for (int i = 0; i < indeg; i++)
            for (int k = 0; k < K; k++) {
                int want = src[i] == MPI_PROC_NULL ? UNTOUCHED : val(src[i], sender_slot(c, kind, src, i), k);
                CHECK(rbuf[i * K + k] == want, "%s alltoall pass %d: block %d[%d] = %d, want %d",
                      what, pass, i, k, rbuf[i * K + k], want);
            }
    }

    /* allgather into a strided receive type, blocking and nonblocking started together with
     * alltoallv */
    {
        int mine[K];
        for (int k = 0; k < K; k++)
            mine[k] = val(me, 99, k);
        for (int i = 0; i < MAXN * 2 * K; i++)
            rbuf[i] = rbuf2[i] = UNTOUCHED;
        MPI_Neighbor_allgather(mine, K, MPI_INT, rbuf, 1, strided, c);
        /* alltoallv: block j holds j % 3 elements, at reversed positions */
        int at = 0;
        for (int j = 0; j < outdeg; j++) {
            scount[j] = 0;
            sdisp[j] = 0;
        }
        for (int j = outdeg - 1; j >= 0; j--) {
            scount[j] = j % 3;
            sdisp[j] = at;
            for (int k = 0; k < scount[j]; k++)
                sbuf[at + k] = val(me, j, k);
            at += scount[j];
        }
        at = 0;
        for (int i = 0; i < indeg; i++) {
            rcount[i] = src[i] == MPI_PROC_NULL ? 0 : sender_slot(c, kind, src, i) % 3;
            rdisp[i] = at + 1; /* a gap before each block */
            at += rcount[i] + 1;
        }
        MPI_Request req[2];
        int gathered[MAXN * 2 * K];
        for (int i = 0; i < MAXN * 2 * K; i++)
            gathered[i] = UNTOUCHED;
        MPI_Ineighbor_allgather(mine, K, MPI_INT, gathered, 1, strided, c, &req[0]);
        MPI_Ineighbor_alltoallv(sbuf, scount, sdisp, MPI_INT, rbuf2, rcount, rdisp, MPI_INT, c, &req[1]);
        MPI_Waitall(2, req, MPI_STATUSES_IGNORE);
        MPI_Aint lb, ext;
        MPI_Type_get_extent(strided, &lb, &ext);
        int step = (int) (ext / sizeof(int));
        for (int i = 0; i < indeg; i++) {
            for (int k = 0; k < K; k++) {
                int want = src[i] == MPI_PROC_NULL ? UNTOUCHED : val(src[i], 99, k);
                CHECK(rbuf[i * step + 2 * k] == want, "%s allgather: block %d[%d] = %d, want %d",
                      what, i, k, rbuf[i * step + 2 * k], want);
                CHECK(gathered[i * step + 2 * k] == want, "%s iallgather: block %d[%d] = %d, want %d",
                      what, i, k, gathered[i * step + 2 * k], want);
            }
            CHECK(rbuf[i * step + 1] == UNTOUCHED, "%s allgather wrote a gap", what);
            CHECK(rbuf2[rdisp[i] - 1] == UNTOUCHED, "%s ialltoallv wrote a gap", what);
            for (int k = 0; k < rcount[i]; k++) {
                int want = val(src[i], sender_slot(c, kind, src, i), k);
                CHECK(rbuf2[rdisp[i] + k] == want, "%s ialltoallv: block %d[%d] = %d, want %d",
                      what, i, k, rbuf2[rdisp[i] + k], want);
            }
        }
    }

    /* allgatherv with displacements in reverse order */
    {
        int mine = val(me, 98, 0);
        int at = 0;
        for (int i = indeg - 1; i >= 0; i--) {
            rcount[i] = 1;
            rdisp[i] = at;
            at += 2;
        }
        for (int i = 0; i < MAXN * 2 * K; i++)
            rbuf[i] = UNTOUCHED;
        MPI_Neighbor_allgatherv(&mine, 1, MPI_INT, rbuf, rcount, rdisp, MPI_INT, c);
        for (int i = 0; i < indeg; i++) {
            int want = src[i] == MPI_PROC_NULL ? UNTOUCHED : val(src[i], 98, 0);
            CHECK(rbuf[rdisp[i]] == want, "%s allgatherv: block %d = %d, want %d", what, i,
                  rbuf[rdisp[i]], want);
        }
    }

    /* alltoallw: even blocks are K ints, odd ones one strided pair; byte displacements */
    {
        for (int j = 0; j < outdeg; j++) {
            scount[j] = j % 2 ? 1 : K;
            stypes[j] = j % 2 ? strided : MPI_INT;
            sdispw[j] = (MPI_Aint) (j * 2 * K * sizeof(int));
        }
        int big[MAXN * 2 * K];
        for (int j = 0; j < outdeg; j++)
            for (int k = 0; k < K; k++)
                big[j * 2 * K + (j % 2 ? 2 * k : k)] = val(me, j, k);
        /* every block arrives as K contiguous ints, whatever the sender's layout */
        for (int i = 0; i < indeg; i++) {
            rcount[i] = src[i] == MPI_PROC_NULL ? 0 : K;
            rtypes[i] = MPI_INT;
            rdispw[i] = (MPI_Aint) ((indeg - 1 - i) * K * sizeof(int));
        }
        for (int i = 0; i < MAXN * 2 * K; i++)
            rbuf[i] = UNTOUCHED;
        MPI_Request r;
        MPI_Ineighbor_alltoallw(big, scount, sdispw, stypes, rbuf, rcount, rdispw, rtypes, c, &r);
        MPI_Wait(&r, MPI_STATUS_IGNORE);
        for (int i = 0; i < indeg; i++)
            for (int k = 0; k < K; k++) {
                int at = (indeg - 1 - i) * K + k;
                int want = src[i] == MPI_PROC_NULL ? UNTOUCHED : val(src[i], sender_slot(c, kind, src, i), k);
                CHECK(rbuf[at] == want, "%s ialltoallw: block %d[%d] = %d, want %d", what, i, k,
                      rbuf[at], want);
            }
        for (int i = 0; i < MAXN * 2 * K; i++)
            rbuf2[i] = UNTOUCHED;
        MPI_Neighbor_alltoallw(big, scount, sdispw, stypes, rbuf2, rcount, rdispw, rtypes, c);
        CHECK(memcmp(rbuf, rbuf2, sizeof(rbuf)) == 0, "%s alltoallw differs from ialltoallw", what);
    }
    MPI_Type_free(&strided);
}

int main(int argc, char **argv)
{
    int rank, t;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);

    /* Cartesian: 2-D, dimension 1 periodic where its extent is 3 or more. (With extent 1 or 2
     * a process's -1 and +1 neighbours are the same process; MPICH 4.0.2 then pairs the blocks
     * as MPI 4.1 says in MPI_Neighbor_alltoall only, so that case is checked below for it.) */
    {
        int dims[2] = { 0, 0 }, periods[2] = { 0, 0 };
        MPI_Comm cart, dup;
        MPI_Dims_create(world, 2, dims);
        periods[1] = dims[1] >= 3;
        MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 0, &cart);
        exercise(cart, "cart");
        MPI_Comm_dup(cart, &dup);
        MPI_Topo_test(dup, &t);
        CHECK(t == MPI_CART, "a dup of a Cartesian communicator is %d", t);
        exercise(dup, "cart dup");
        MPI_Comm_free(&dup);
        MPI_Comm_free(&cart);
    }

    /* A periodic ring of 1 or 2 processes: the block sent towards +1 arrives from -1 */
    {
        int n = world < 2 ? world : 2, period = 1;
        MPI_Comm ring;
        MPI_Cart_create(MPI_COMM_WORLD, 1, &n, &period, 0, &ring);
        if (ring != MPI_COMM_NULL) {
            int sb[2] = { -1 - rank, 1 + rank }, rb[2] = { 0, 0 }, from = n == 2 ? 1 - rank : rank;
            MPI_Request r;
            MPI_Neighbor_alltoall(sb, 1, MPI_INT, rb, 1, MPI_INT, ring);
            CHECK(rb[0] == 1 + from && rb[1] == -1 - from, "ring of %d: got %d %d", n, rb[0], rb[1]);
            rb[0] = rb[1] = 0;
            MPI_Ineighbor_alltoall(sb, 1, MPI_INT, rb, 1, MPI_INT, ring, &r);
            MPI_Wait(&r, MPI_STATUS_IGNORE);
            CHECK(rb[0] == 1 + from && rb[1] == -1 - from, "ring of %d (nonblocking): got %d %d",
                  n, rb[0], rb[1]);
            MPI_Comm_free(&ring);
        }
    }

    /* Graph: a ring both ways (from 3 processes on; fewer have just a self loop, as edges
     * repeated between two processes pair up differently in MPICH 4.0.2), plus a self loop on
     * even ranks, listed before the ring on rank 2 */
    {
        int index[MAXN], edges[4 * MAXN], e = 0;
        for (int i = 0; i < world; i++) {
            if (i == 2)
                edges[e++] = i;
            if (world > 2) {
                edges[e++] = (i + world - 1) % world;
                edges[e++] = (i + 1) % world;
            }
            if (i % 2 == 0 && i != 2)
                edges[e++] = i;
            index[i] = e;
        }
        MPI_Comm g, dup;
        MPI_Graph_create(MPI_COMM_WORLD, world, index, edges, 0, &g);
        MPI_Topo_test(g, &t);
        CHECK(t == MPI_GRAPH, "graph topology is %d", t);
        int nn, ne;
        MPI_Graphdims_get(g, &nn, &ne);
        CHECK(nn == world && ne == e, "graphdims %d %d, want %d %d", nn, ne, world, e);
        int gi[MAXN], ge[4 * MAXN];
        MPI_Graph_get(g, MAXN, 4 * MAXN, gi, ge);
        CHECK(memcmp(gi, index, world * sizeof(int)) == 0 && memcmp(ge, edges, e * sizeof(int)) == 0,
              "MPI_Graph_get differs from the graph given");
        exercise(g, "graph");
        MPI_Comm_dup(g, &dup);
        MPI_Topo_test(dup, &t);
        CHECK(t == MPI_GRAPH, "a dup of a graph communicator is %d", t);
        exercise(dup, "graph dup");
        MPI_Comm_free(&dup);
        MPI_Comm_free(&g);
    }

    /* Distributed graph from rank 0 alone, weighted: edge weight = 1 + source */
    {
        int srcs[MAXN], degs[MAXN], dsts[2 * MAXN], ws[2 * MAXN], n = rank == 0 ? world : 0, e = 0;
        for (int i = 0; i < n; i++) {
            srcs[i] = i;
            degs[i] = dist_dests(i, &dsts[e]);
            for (int k = 0; k < degs[i]; k++)
                ws[e++] = 1 + i;
        }
        MPI_Comm d;
        MPI_Dist_graph_create(MPI_COMM_WORLD, n, srcs, degs, dsts, ws, MPI_INFO_NULL, 0, &d);
        MPI_Topo_test(d, &t);
        CHECK(t == MPI_DIST_GRAPH, "distributed graph topology is %d", t);
        int indeg, outdeg, weighted, in[MAXN], inw[MAXN], out[MAXN], outw[MAXN], mine[2];
        int nmine = dist_dests(rank, mine), nin = 0;
        for (int v = 0; v < world; v++)
            nin += dist_edges(v, rank);
        MPI_Dist_graph_neighbors_count(d, &indeg, &outdeg, &weighted);
        CHECK(indeg == nin && outdeg == nmine && weighted, "degrees %d %d weighted %d, want %d %d",
              indeg, outdeg, weighted, nin, nmine);
        MPI_Dist_graph_neighbors(d, MAXN, in, inw, MAXN, out, outw);
        /* neighbours as sets (their order is the implementation's) */
        for (int v = 0; v < world && indeg == nin && outdeg == nmine; v++) {
            int a = 0, c = 0;
            for (int k = 0; k < outdeg; k++)
                a += out[k] == v;
            for (int k = 0; k < indeg; k++)
                c += in[k] == v;
            CHECK(a == dist_edges(rank, v), "rank %d appears %d times among destinations", v, a);
            CHECK(c == dist_edges(v, rank), "rank %d appears %d times among sources", v, c);
        }
        for (int k = 0; k < indeg; k++)
            CHECK(inw[k] == 1 + in[k], "source %d has weight %d", in[k], inw[k]);
        for (int k = 0; k < outdeg; k++)
            CHECK(outw[k] == 1 + rank, "destination %d has weight %d", out[k], outw[k]);
        exercise(d, "dist graph");
        MPI_Comm_free(&d);
    }

    /* An adjacent distributed graph (each rank sends to the next) and MPI_UNWEIGHTED */
    {
        int to = (rank + 1) % world, from = (rank + world - 1) % world;
        MPI_Comm d;
        MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, 1, &from, MPI_UNWEIGHTED, 1, &to,
                                       MPI_UNWEIGHTED, MPI_INFO_NULL, 0, &d);
        int indeg, outdeg, weighted;
        MPI_Dist_graph_neighbors_count(d, &indeg, &outdeg, &weighted);
        CHECK(indeg == 1 && outdeg == 1 && !weighted, "adjacent: %d %d %d", indeg, outdeg, weighted);
        int got = UNTOUCHED;
        MPI_Neighbor_allgather(&rank, 1, MPI_INT, &got, 1, MPI_INT, d);
        CHECK(got == from, "adjacent ring: got %d from %d", got, from);
        MPI_Comm_free(&d);
    }

    /* Argument errors */
    {
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        int x = 0, y = 0, cls, rc;
        rc = MPI_Neighbor_allgather(&x, 1, MPI_INT, &y, 1, MPI_INT, MPI_COMM_WORLD);
        MPI_Error_class(rc, &cls);
        CHECK(cls == MPI_ERR_TOPOLOGY, "neighbour collective without topology: class %d", cls);
        MPI_Topo_test(MPI_COMM_WORLD, &t);
        CHECK(t == MPI_UNDEFINED, "MPI_COMM_WORLD has topology %d", t);
        rc = MPI_Graphdims_get(MPI_COMM_WORLD, &x, &y);
        MPI_Error_class(rc, &cls);
        CHECK(cls == MPI_ERR_TOPOLOGY, "graphdims without a graph: class %d", cls);
        MPI_Comm d;
        int one = 0;
        rc = MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, -1, &one, MPI_UNWEIGHTED, 0, &one,
                                            MPI_UNWEIGHTED, MPI_INFO_NULL, 0, &d);
        MPI_Error_class(rc, &cls);
        CHECK(cls == MPI_ERR_ARG, "negative indegree: class %d", cls);
        MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
        int idx = 1, edge = 5, nb;
        MPI_Comm g;
        rc = MPI_Graph_create(MPI_COMM_SELF, 1, &idx, &edge, 0, &g);
        MPI_Error_class(rc, &cls);
        CHECK(cls == MPI_ERR_ARG, "graph edge off the graph: class %d", cls);
        edge = 0;
        MPI_Graph_create(MPI_COMM_SELF, 1, &idx, &edge, 0, &g);
        MPI_Comm_set_errhandler(g, MPI_ERRORS_RETURN);
        rc = MPI_Graph_neighbors_count(g, 1, &nb);
        MPI_Error_class(rc, &cls);
        CHECK(cls == MPI_ERR_RANK, "graph neighbours of a rank off the graph: class %d", cls);
        rc = MPI_Dist_graph_neighbors_count(g, &x, &y, &nb);
        MPI_Error_class(rc, &cls);
        CHECK(cls == MPI_ERR_TOPOLOGY, "distributed graph degrees of a graph: class %d", cls);
        rc = MPI_Cart_shift(g, 0, 1, &x, &y);
        MPI_Error_class(rc, &cls);
        CHECK(cls == MPI_ERR_TOPOLOGY, "MPI_Cart_shift on a graph: class %d", cls);
        MPI_Comm_free(&g);
        MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_ARE_FATAL);
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    }

    return finish();
}
