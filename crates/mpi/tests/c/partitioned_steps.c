/* Partitioned communication, partition by partition (MPI 4.1 §4.2): the sender readies its
 * partitions in steps (one MPI_Pready, a consecutive MPI_Pready_range, or an out-of-order
 * MPI_Pready_list per step, in an order that changes every round) and after each step waits
 * for the receiver's word on MPI_COMM_WORLD. Meanwhile the receiver, whose partition count
 * differs (coarser and finer), polls MPI_Parrived: every receive partition whose bytes lie in
 * send partitions readied so far must report arrival with its data in place before the sender
 * readies more, and no partition with a byte not readied yet may. Rounds of 16 KiB and of
 * 1 MiB (whose partitions go by rendezvous), a sender whose datatype is not contiguous (one
 * int in every two), and partition sizes that divide neither way, where only the second rule
 * is asked. Receives longer than the send. Then the errors: MPI_Parrived on a send request, MPI_Pready on a receive request
 * and on a round that completed, MPI_Pready_range with low above high, and (ferry only) a
 * receive that is shorter than what the sender sends. Two processes.
 *
 * The standard lets a partition arrive as late as the whole round; MPICH 5.0.2 (ch4) does
 * that, so built against it this program asks only the rules that hold either way. */
#include "mtest.h"

#ifdef MPICH_VERSION
enum { ARRIVES_EARLY = 0 };
#else
enum { ARRIVES_EARLY = 1 };
#endif

#define POLLS_BOUND 20000000L

typedef struct {
    int send_parts, recv_parts, total, strided, early, rounds;
} Config;

static const Config configs[] = {
    {8, 4, 4096, 0, 1, 9},      /* each receive partition is two send partitions */
    {8, 32, 4096, 0, 1, 9},     /* each send partition is four receive partitions */
    {4, 16, 262144, 0, 1, 3},   /* 256 KiB send partitions: rendezvous */
    {16, 4, 262144, 0, 1, 3},   /* 64 KiB send partitions into 256 KiB receive ones */
    {8, 16, 4096, 1, 1, 6},     /* the sender's ints are every other int of its buffer */
    {6, 4, 6 * 4 * 100, 0, 0, 6} /* 400-int and 600-int partitions */
};

static int value(int round, int i) { return round * 1000003 + i; }

/* Step k of round `round`: the send partitions it readies (into `out`), how many. The order
 * is a permutation that changes with the round; the step size is 1, 2 or 3 by round. */
static int step(const Config *c, int round, int k, int *out)
{
    int g = 1 + round % 3, n = 0;
    for (int j = k * g; j < (k + 1) * g && j < c->send_parts; j++)
        out[n++] = (j * 5 + round) % c->send_parts;
    return n;
}

static int steps(const Config *c, int round)
{
    int g = 1 + round % 3;
    return (c->send_parts + g - 1) / g;
}

/* Readies `parts` with the call a step of that shape calls for. */
static void ready(const int *parts, int n, MPI_Request req)
{
    int lo = parts[0], hi = parts[0], consecutive = 1;
    for (int i = 1; i < n; i++) {
        lo = parts[i] < lo ? parts[i] : lo;
        hi = parts[i] > hi ? parts[i] : hi;
    }
    consecutive = hi - lo + 1 == n;
    int rc;
    if (n == 1)
        rc = MPI_Pready(parts[0], req);
    else if (consecutive && parts[0] == lo)
        rc = MPI_Pready_range(lo, hi, req);
    else
        rc = MPI_Pready_list(n, (int *)parts, req);
    CHECK(rc == MPI_SUCCESS, "readying %d partitions from %d failed", n, parts[0]);
}

static void sender(const Config *c, int tag)
{
    int per = c->total / c->send_parts, stride = c->strided ? 2 : 1;
    int *buf = malloc(sizeof(int) * c->total * stride);
    MPI_Datatype type = MPI_INT;
    if (c->strided) {
        MPI_Type_create_resized(MPI_INT, 0, 2 * sizeof(int), &type);
        MPI_Type_commit(&type);
    }
    MPI_Request req;
    MPI_Psend_init(buf, c->send_parts, per, type, 1, tag, MPI_COMM_WORLD, MPI_INFO_NULL, &req);
    /* Both requests exist before the first round (see partitioned_early.c). */
    MPI_Barrier(MPI_COMM_WORLD);
    for (int round = 0; round < c->rounds; round++) {
        for (int i = 0; i < c->total * stride; i++)
            buf[i] = i % stride ? -7 : value(round, i / stride);
        MPI_Start(&req);
        int parts[3], go;
        for (int k = 0; k < steps(c, round); k++) {
            ready(parts, step(c, round, k, parts), req);
            MPI_Recv(&go, 1, MPI_INT, 1, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        }
        int rc = MPI_Wait(&req, MPI_STATUS_IGNORE);
        CHECK(rc == MPI_SUCCESS, "sender round %d: MPI_Wait failed", round);
    }
    MPI_Request_free(&req);
    if (c->strided)
        MPI_Type_free(&type);
    free(buf);
}

/* Whether every byte of receive partition q lies in a send partition marked in `readied`. */
static int complete(const Config *c, const char *readied, int q)
{
    long rper = c->total / c->recv_parts, sper = c->total / c->send_parts;
    for (long p = q * rper / sper; p <= ((q + 1) * rper - 1) / sper; p++)
        if (!readied[p])
            return 0;
    return 1;
}

static void receiver(const Config *c, int tag)
{
    int per = c->total / c->recv_parts;
    int *buf = malloc(sizeof(int) * c->total);
    char *readied = malloc(c->send_parts), *seen = malloc(c->recv_parts);
    MPI_Request req;
    MPI_Precv_init(buf, c->recv_parts, per, MPI_INT, 0, tag, MPI_COMM_WORLD, MPI_INFO_NULL, &req);
    MPI_Barrier(MPI_COMM_WORLD);
    for (int round = 0; round < c->rounds; round++) {
        for (int i = 0; i < c->total; i++)
            buf[i] = -1;
        memset(readied, 0, c->send_parts);
        memset(seen, 0, c->recv_parts);
        MPI_Start(&req);
        int parts[3], go = 0;
        for (int k = 0; k < steps(c, round); k++) {
            int n = step(c, round, k, parts);
            for (int i = 0; i < n; i++)
                readied[parts[i]] = 1;
            for (int q = 0; q < c->recv_parts; q++) {
                int flag = 0;
                if (seen[q])
                    continue;
                if (!complete(c, readied, q)) {
                    MPI_Parrived(req, q, &flag);
                    CHECK(!flag, "%d/%d round %d step %d: partition %d arrived before all "
                          "its bytes were ready", c->send_parts, c->recv_parts, round, k, q);
                    continue;
                }
                if (!c->early || !ARRIVES_EARLY)
                    continue;
                for (long polls = 0; !flag && polls < POLLS_BOUND; polls++)
                    MPI_Parrived(req, q, &flag);
                CHECK(flag, "%d/%d round %d step %d: partition %d, all of whose bytes are "
                      "ready, did not arrive", c->send_parts, c->recv_parts, round, k, q);
                seen[q] = 1;
                int bad = 0;
                for (int i = q * per; flag && i < (q + 1) * per; i++)
                    bad += buf[i] != value(round, i);
                CHECK(!bad, "%d/%d round %d: partition %d reported arrived with %d wrong ints",
                      c->send_parts, c->recv_parts, round, q, bad);
            }
            MPI_Send(&go, 1, MPI_INT, 0, 99, MPI_COMM_WORLD);
        }
        MPI_Status st;
        int rc = MPI_Wait(&req, &st), count = -1;
        CHECK(rc == MPI_SUCCESS, "receiver round %d: MPI_Wait failed", round);
        MPI_Get_count(&st, MPI_INT, &count);
        CHECK(count == c->total && st.MPI_TAG == tag && st.MPI_SOURCE == 0,
              "round %d: count %d tag %d source %d", round, count, st.MPI_TAG, st.MPI_SOURCE);
        int bad = 0;
        for (int i = 0; i < c->total; i++)
            bad += buf[i] != value(round, i);
        CHECK(!bad, "%d/%d round %d: %d wrong ints after MPI_Wait", c->send_parts,
              c->recv_parts, round, bad);
    }
    MPI_Request_free(&req);
    free(buf);
    free(readied);
    free(seen);
}

/* Calls on requests that are not started, a bad range, and sizes that differ. */
static void errors(int rank)
{
    int buf[256], rc, flag = 0;
    MPI_Request req;
    if (rank == 0) {
        for (int i = 0; i < 100; i++)
            buf[i] = i;
        MPI_Psend_init(buf, 4, 25, MPI_INT, 1, 50, MPI_COMM_WORLD, MPI_INFO_NULL, &req);
        MPI_Start(&req);
        rc = MPI_Parrived(req, 0, &flag);
        CHECK(rc != MPI_SUCCESS, "MPI_Parrived on a send request succeeded");
        rc = MPI_Pready_range(2, 1, req);
        CHECK(rc != MPI_SUCCESS, "MPI_Pready_range(2, 1) succeeded");
        MPI_Pready_range(0, 3, req);
        MPI_Wait(&req, MPI_STATUS_IGNORE);
        rc = MPI_Pready(0, req);
        CHECK(rc != MPI_SUCCESS, "MPI_Pready on a completed round succeeded");
        MPI_Request_free(&req);
#ifndef MPICH_VERSION
        /* 100 ints sent into a receive of 64. */
        MPI_Psend_init(buf, 4, 25, MPI_INT, 1, 51, MPI_COMM_WORLD, MPI_INFO_NULL, &req);
        MPI_Start(&req);
        MPI_Pready_range(0, 3, req);
        rc = MPI_Wait(&req, MPI_STATUS_IGNORE);
        CHECK(rc == MPI_SUCCESS, "the sender of a round too long for its receiver failed");
        MPI_Request_free(&req);
#endif
    } else if (rank == 1) {
        MPI_Precv_init(buf, 4, 25, MPI_INT, 0, 50, MPI_COMM_WORLD, MPI_INFO_NULL, &req);
        rc = MPI_Pready(0, req);
        CHECK(rc != MPI_SUCCESS, "MPI_Pready on a receive request succeeded");
        MPI_Start(&req);
        MPI_Wait(&req, MPI_STATUS_IGNORE);
        for (int i = 0; i < 100; i++)
            CHECK(buf[i] == i, "errors: [%d] = %d", i, buf[i]);
        MPI_Request_free(&req);
#ifndef MPICH_VERSION
        MPI_Precv_init(buf, 4, 16, MPI_INT, 0, 51, MPI_COMM_WORLD, MPI_INFO_NULL, &req);
        MPI_Start(&req);
        rc = MPI_Wait(&req, MPI_STATUS_IGNORE);
        CHECK_CLASS(rc, MPI_ERR_TRUNCATE, "a partitioned receive shorter than the send");
        MPI_Request_free(&req);
#endif
    }
}

/* A receive longer than the send takes what came, and its status counts that: 64 ints into
 * 100, and 1 MiB into 4 MiB (whose blocks are four times the sender's own). MPICH 4.0.2's own
 * part/pingping expects this; MPICH 5.0.2 fails such a wait (MPI_ERR_OTHER), so it is not
 * asked there. */
static __attribute__((unused)) void longer_receives(int rank)
{
    const int sent[2] = {64, 1 << 18}, room[2] = {100, 1 << 20};
    for (int k = 0; k < 2; k++) {
        int *buf = malloc(sizeof(int) * room[k]);
        MPI_Request req;
        if (rank == 0) {
            for (int i = 0; i < sent[k]; i++)
                buf[i] = value(k, i);
            MPI_Psend_init(buf, 4, sent[k] / 4, MPI_INT, 1, 60 + k, MPI_COMM_WORLD,
                           MPI_INFO_NULL, &req);
        } else if (rank == 1) {
            for (int i = 0; i < room[k]; i++)
                buf[i] = -1;
            MPI_Precv_init(buf, 4, room[k] / 4, MPI_INT, 0, 60 + k, MPI_COMM_WORLD,
                           MPI_INFO_NULL, &req);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 0) {
            MPI_Start(&req);
            for (int p = 3; p >= 0; p--)
                MPI_Pready(p, req);
            MPI_Wait(&req, MPI_STATUS_IGNORE);
            MPI_Request_free(&req);
        } else if (rank == 1) {
            MPI_Status st;
            int count = -1, bad = 0;
            MPI_Start(&req);
            int rc = MPI_Wait(&req, &st);
            MPI_Get_count(&st, MPI_INT, &count);
            CHECK(rc == MPI_SUCCESS && count == sent[k], "%d ints into %d: rc %d, count %d",
                  sent[k], room[k], rc, count);
            for (int i = 0; i < room[k]; i++)
                bad += buf[i] != (i < sent[k] ? value(k, i) : -1);
            CHECK(!bad, "%d ints into %d: %d wrong", sent[k], room[k], bad);
            MPI_Request_free(&req);
        }
        free(buf);
    }
}

/* Partitions of no bytes (mpi4py's testRing with an empty buffer): not arrived before the
 * sender starts its round, arrived once it has readied them all. */
static void empty_partitions(int rank)
{
    int buf[1], flag = 1, go = 0;
    MPI_Request req;
    for (int round = 0; round < 3; round++) {
        if (rank == 0) {
            MPI_Psend_init(buf, 3, 0, MPI_INT, 1, 77, MPI_COMM_WORLD, MPI_INFO_NULL, &req);
            MPI_Recv(&go, 1, MPI_INT, 1, 78, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Start(&req);
            MPI_Pready_range(0, 2, req);
            MPI_Wait(&req, MPI_STATUS_IGNORE);
            MPI_Request_free(&req);
        } else if (rank == 1) {
            MPI_Precv_init(buf, 3, 0, MPI_INT, 0, 77, MPI_COMM_WORLD, MPI_INFO_NULL, &req);
            MPI_Start(&req);
            for (int p = 0; p < 3; p++) {
                MPI_Parrived(req, p, &flag);
                CHECK(!flag, "round %d: empty partition %d arrived before the send started",
                      round, p);
            }
            MPI_Send(&go, 1, MPI_INT, 0, 78, MPI_COMM_WORLD);
            for (int p = 0; p < 3; p++) {
                do
                    MPI_Parrived(req, p, &flag);
                while (!flag);
            }
            MPI_Wait(&req, MPI_STATUS_IGNORE);
            MPI_Request_free(&req);
        }
    }
}

int main(int argc, char **argv)
{
    int rank;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    for (size_t i = 0; i < sizeof configs / sizeof configs[0]; i++) {
        if (rank == 0)
            sender(&configs[i], (int)i);
        else if (rank == 1)
            receiver(&configs[i], (int)i);
    }
#ifndef MPICH_VERSION
    longer_receives(rank);
#endif
    empty_partitions(rank);
    errors(rank);
    return finish();
}
