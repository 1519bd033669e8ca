/* A Monte Carlo estimate of pi that survives the death of ranks (ULFM).
 *
 *   mpicc -O2 examples/c/ft_pi.c -o ft_pi
 *   ferry run --fault-tolerant -n 4 ./ft_pi --kill 2 --after 10
 *
 * The samples are cut into batches; batch b belongs to rank b % size and its samples come from
 * a generator seeded with b, so the estimate does not depend on who computes a batch. Every
 * round, each rank computes the next batch it owns and the ranks exchange (batch, hits) with
 * MPI_Allgather, then agree (MPIX_Comm_agree) on whether every rank got every result: only an
 * agreed round counts. When a rank dies, the round fails; the survivors revoke the
 * communicator, shrink it to the ranks still alive, hand the dead rank's remaining batches to
 * the survivors in turn, and go on. The estimate uses every sample exactly once.
 *
 * Options: --batches N (default 400), --samples N per batch (default 20000), --kill R (rank R
 * dies, by SIGKILL), --after K (once K rounds have been agreed; default 5), --seed S.
 * The rank that is 0 among the survivors prints the estimate and how many ranks survived.
 */
#include <mpi.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct options {
    long long batches, samples, seed;
    int kill_rank, kill_after;
};

/* splitmix64: a small generator whose streams are independent for different seeds. */
static uint64_t next_random(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* How many of the batch's points (x, y) in [0,1)^2 fall inside the quarter circle. */
static long long batch_hits(const struct options *o, long long batch)
{
    uint64_t state = (uint64_t)o->seed * 0x100000001b3ULL ^ (uint64_t)batch;
    long long hits = 0;
    for (long long i = 0; i < o->samples; i++) {
        double x = (double)(next_random(&state) >> 11) * 0x1.0p-53;
        double y = (double)(next_random(&state) >> 11) * 0x1.0p-53;
        hits += x * x + y * y < 1.0;
    }
    return hits;
}

static long long parse_count(const char *name, const char *value, long long min)
{
    char *end = NULL;
    long long v = value ? strtoll(value, &end, 10) : 0;
    if (!value || *value == '\0' || *end != '\0' || v < min) {
        fprintf(stderr, "ft_pi: %s needs a whole number >= %lld, not '%s'\n", name, min,
                value ? value : "");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    return v;
}

static struct options parse_options(int argc, char **argv, int size)
{
    struct options o = {400, 20000, 1, -1, 5};
    for (int i = 1; i < argc; i++) {
        const char *value = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--batches"))
            o.batches = parse_count(argv[i], value, 1);
        else if (!strcmp(argv[i], "--samples"))
            o.samples = parse_count(argv[i], value, 1);
        else if (!strcmp(argv[i], "--seed"))
            o.seed = parse_count(argv[i], value, 0);
        else if (!strcmp(argv[i], "--kill"))
            o.kill_rank = (int)parse_count(argv[i], value, 0);
        else if (!strcmp(argv[i], "--after"))
            o.kill_after = (int)parse_count(argv[i], value, 0);
        else {
            fprintf(stderr, "ft_pi: unknown option '%s' (--batches, --samples, --seed, "
                            "--kill, --after)\n", argv[i]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        i++;
    }
    if (o.kill_rank >= size || (o.kill_rank >= 0 && size < 2)) {
        fprintf(stderr, "ft_pi: --kill %d needs a rank that is not the only one, below %d\n",
                o.kill_rank, size);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    return o;
}

static void check(int rc, const char *what)
{
    if (rc != MPI_SUCCESS) {
        char text[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(rc, text, &len);
        fprintf(stderr, "ft_pi: %s failed: %s\n", what, text);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
}

/* The batch this rank computes next: the first it owns that is not done, or -1. */
static long long next_batch(const int *owner, const char *done, long long batches, int me)
{
    for (long long b = 0; b < batches; b++)
        if (owner[b] == me && !done[b])
            return b;
    return -1;
}

/* After a shrink: which ranks of the world are still in `comm`. */
static void find_alive(MPI_Comm comm, int world_size, char *alive)
{
    MPI_Group world_group, group;
    int n = 0;
    MPI_Comm_group(MPI_COMM_WORLD, &world_group);
    MPI_Comm_group(comm, &group);
    MPI_Group_size(group, &n);
    int *ranks = malloc(sizeof(int) * (size_t)n), *world_ranks = malloc(sizeof(int) * (size_t)n);
    if (!ranks || !world_ranks)
        check(MPI_ERR_NO_MEM, "allocating the rank lists");
    for (int i = 0; i < n; i++)
        ranks[i] = i;
    MPI_Group_translate_ranks(group, n, ranks, world_group, world_ranks);
    memset(alive, 0, (size_t)world_size);
    for (int i = 0; i < n; i++)
        alive[world_ranks[i]] = 1;
    free(ranks);
    free(world_ranks);
    MPI_Group_free(&group);
    MPI_Group_free(&world_group);
}

/* Deals the remaining batches of ranks that died to the survivors, in turn; returns how many
 * batches moved. Every survivor computes the same owners from the same agreed state. */
static long long redistribute(int *owner, const char *done, long long batches, const char *alive,
                              int world_size)
{
    long long moved = 0;
    int next = 0;
    for (long long b = 0; b < batches; b++) {
        if (done[b] || alive[owner[b]])
            continue;
        while (!alive[next])
            next = (next + 1) % world_size;
        owner[b] = next;
        next = (next + 1) % world_size;
        moved++;
    }
    return moved;
}

int main(int argc, char **argv)
{
    int world_rank, world_size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    struct options o = parse_options(argc, argv, world_size);

    int *owner = malloc(sizeof(int) * (size_t)o.batches);
    char *done = calloc((size_t)o.batches, 1), *alive = malloc((size_t)world_size);
    long long mine[2], *round = malloc(sizeof(long long) * 2 * (size_t)world_size);
    if (!owner || !done || !alive || !round)
        check(MPI_ERR_NO_MEM, "allocating the batch tables");
    for (long long b = 0; b < o.batches; b++)
        owner[b] = (int)(b % world_size);

    MPI_Comm comm;
    check(MPI_Comm_dup(MPI_COMM_WORLD, &comm), "MPI_Comm_dup");
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    long long hits = 0, batches_done = 0, rounds = 0;
    int size = world_size;

    while (batches_done < o.batches) {
        if (world_rank == o.kill_rank && rounds == o.kill_after) {
            printf("ft_pi: rank %d dies after %lld rounds\n", world_rank, rounds);
            fflush(stdout);
            raise(SIGKILL);
        }
        mine[0] = next_batch(owner, done, o.batches, world_rank);
        mine[1] = mine[0] >= 0 ? batch_hits(&o, mine[0]) : 0;
        int ok = MPI_Allgather(mine, 2, MPI_LONG_LONG, round, 2, MPI_LONG_LONG, comm)
                 == MPI_SUCCESS;
        /* Some members may have their results while others saw the failure: only a round
         * that every survivor completed counts. The flag agreed on is the same everywhere,
         * also when the call reports a failure it has not acknowledged yet. */
        int rc = MPIX_Comm_agree(comm, &ok), error_class = MPI_SUCCESS;
        MPI_Error_class(rc, &error_class);
        if (error_class != MPIX_ERR_PROC_FAILED)
            check(rc, "MPIX_Comm_agree");
        if (ok) {
            for (int i = 0; i < size; i++) {
                if (round[2 * i] >= 0 && !done[round[2 * i]]) {
                    done[round[2 * i]] = 1;
                    hits += round[2 * i + 1];
                    batches_done++;
                }
            }
            rounds++;
            continue;
        }
        /* A member died: end whatever is pending on `comm` everywhere, carry on with the ones
         * left, and give them the dead ranks' batches. */
        MPIX_Comm_revoke(comm);
        MPI_Comm shrunk;
        check(MPIX_Comm_shrink(comm, &shrunk), "MPIX_Comm_shrink");
        MPI_Comm_free(&comm);
        comm = shrunk;
        MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
        MPI_Comm_size(comm, &size);
        find_alive(comm, world_size, alive);
        long long moved = redistribute(owner, done, o.batches, alive, world_size);
        int rank = -1;
        MPI_Comm_rank(comm, &rank);
        if (rank == 0)
            printf("ft_pi: %d of %d ranks left; %lld remaining batches handed to them\n", size,
                   world_size, moved);
    }

    int rank = -1;
    MPI_Comm_rank(comm, &rank);
    if (rank == 0) {
        long long samples = batches_done * o.samples;
        printf("ft_pi: pi ~ %.8f from %lld samples (%lld hits, %lld batches of %lld); "
               "%d of %d ranks survived\n",
               4.0 * (double)hits / (double)samples, samples, hits, batches_done, o.samples,
               size, world_size);
    }
    MPI_Comm_free(&comm);
    free(owner);
    free(done);
    free(alive);
    free(round);
    MPI_Finalize();
    return 0;
}
