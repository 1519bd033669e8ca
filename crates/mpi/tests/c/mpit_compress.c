/* ferry's compression counters as MPI_T performance variables (ferry_compress_*), read after
 * a job sent compressible and incompressible data over TCP. Two processes: rank 0 sends four
 * 1 MiB messages of a smooth field of doubles (a parabola sampled at steps of 1e-3; no libm)
 * and then four of pseudo-random bytes to rank 1,
 * which checks every byte. The counter handles are started before the first message.
 * Argument `on` (the job runs with FERRY_COMPRESS=on): rank 0's payloads sent compressed are
 * counted, with fewer bytes after than before, and its random payloads are counted as sent
 * plain; rank 1 counts compressed payloads received. Argument `off`: every counter reads 0. */
#include <mpi.h>
#include <stdint.h>
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
            fflush(stderr);                                                                \
        }                                                                                  \
    } while (0)

#define MESSAGES 4
#define BYTES (1 << 20)

static const char *names[] = {
    "ferry_compress_frames_compressed",  "ferry_compress_bytes_before",
    "ferry_compress_bytes_after",        "ferry_compress_frames_sent_plain",
    "ferry_compress_frames_decompressed",
};
enum { COMPRESSED, BEFORE, AFTER, PLAIN, DECOMPRESSED, COUNTERS };

static void fill(unsigned char *buf, int message, int smooth)
{
    if (smooth) {
        double *d = (double *)buf;
        for (size_t i = 0; i < BYTES / sizeof(double); i++)
        {
            double x = ((double)message * (BYTES / sizeof(double)) + (double)i) * 1e-3;
            d[i] = 0.5 * x * x - 3.0 * x + 1.0;
        }
    } else {
        uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(message + 1);
        for (size_t i = 0; i < BYTES; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            buf[i] = (unsigned char)(x >> 32);
        }
    }
}

int main(int argc, char **argv)
{
    int provided, rank, size;
    MPI_T_init_thread(MPI_THREAD_SINGLE, &provided);
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int on = argc > 1 && strcmp(argv[1], "on") == 0;
    CHECK(size == 2, "needs 2 processes, has %d", size);

    MPI_T_pvar_session session;
    CHECK(MPI_T_pvar_session_create(&session) == MPI_SUCCESS, "pvar_session_create");
    MPI_T_pvar_handle handles[COUNTERS];
    for (int i = 0; i < COUNTERS; i++) {
        int index = -1, count = 0;
        CHECK(MPI_T_pvar_get_index(names[i], MPI_T_PVAR_CLASS_COUNTER, &index) == MPI_SUCCESS,
              "pvar_get_index(%s)", names[i]);
        CHECK(MPI_T_pvar_handle_alloc(session, index, NULL, &handles[i], &count) ==
                      MPI_SUCCESS && count == 1,
              "pvar_handle_alloc(%s)", names[i]);
        CHECK(MPI_T_pvar_start(session, handles[i]) == MPI_SUCCESS, "pvar_start(%s)", names[i]);
    }

    unsigned char *buf = malloc(BYTES), *want = malloc(BYTES);
    for (int smooth = 1; smooth >= 0; smooth--) {
        for (int m = 0; m < MESSAGES && size == 2; m++) {
            if (rank == 0) {
                fill(buf, m, smooth);
                MPI_Send(buf, BYTES, MPI_BYTE, 1, m, MPI_COMM_WORLD);
            } else {
                fill(want, m, smooth);
                memset(buf, 0, BYTES);
                MPI_Recv(buf, BYTES, MPI_BYTE, 0, m, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                CHECK(memcmp(buf, want, BYTES) == 0, "%s message %d arrived changed",
                      smooth ? "smooth" : "random", m);
            }
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);

    unsigned long long value[COUNTERS];
    for (int i = 0; i < COUNTERS; i++) {
        CHECK(MPI_T_pvar_read(session, handles[i], &value[i]) == MPI_SUCCESS, "pvar_read(%s)",
              names[i]);
        printf("rank %d: %s %llu\n", rank, names[i], value[i]);
    }
    fflush(stdout);
    if (!on) {
        for (int i = 0; i < COUNTERS; i++)
            CHECK(value[i] == 0, "rank %d: %s is %llu with compression off", rank, names[i],
                  value[i]);
    } else if (rank == 0) {
        CHECK(value[COMPRESSED] > 0, "no payload went compressed");
        CHECK(value[AFTER] * 8 <= value[BEFORE] * 7, "%llu bytes compressed into %llu",
              value[BEFORE], value[AFTER]);
        CHECK(value[PLAIN] > 0, "no random payload was counted as sent plain");
        CHECK(value[DECOMPRESSED] == 0, "rank 0 received %llu compressed payloads",
              value[DECOMPRESSED]);
    } else {
        CHECK(value[DECOMPRESSED] > 0, "rank 1 received no compressed payload");
        CHECK(value[COMPRESSED] == 0, "rank 1 sent %llu compressed payloads",
              value[COMPRESSED]);
    }
    for (int i = 0; i < COUNTERS; i++)
        MPI_T_pvar_handle_free(session, &handles[i]);
    MPI_T_pvar_session_free(&session);
    free(buf);
    free(want);

    int all = 0;
    MPI_Allreduce(&errs, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0 && all == 0)
        printf(" No Errors\n");
    MPI_Finalize();
    MPI_T_finalize();
    return all != 0;
}
