/* MPI_THREAD_MULTIPLE: threads of every rank call MPI at once.
 *
 * - the level is granted and MPI_Is_thread_main tells the threads apart;
 * - a thread blocked in a receive from its own rank lets another thread of the rank send it;
 * - per-thread ping-pong between ranks (tag = thread), eager and rendezvous sizes, checked;
 * - collectives and MPI_Comm_dup/free from every thread at once on communicators of their own;
 * - a generalized request completed by another thread while the main one waits on it;
 * - a partitioned send whose partitions other threads mark ready while the main one waits.
 * Prints " No Errors" from rank 0. */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NT 4
#define ROUNDS 200
#define BIG (256 * 1024)

static int rank, size, errs;
static MPI_Comm thread_comm[NT];

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "rank %d: ", rank);                                                    \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            __atomic_add_fetch(&errs, 1, __ATOMIC_SEQ_CST);                                        \
        }                                                                                          \
    } while (0)

static void *not_main(void *arg)
{
    int flag = -1;
    (void)arg;
    MPI_Is_thread_main(&flag);
    CHECK(flag == 0, "MPI_Is_thread_main is %d in a second thread", flag);
    return NULL;
}

static void *send_to_self_later(void *arg)
{
    int value = 42;
    (void)arg;
    usleep(20000);
    MPI_Send(&value, 1, MPI_INT, rank, 77, MPI_COMM_WORLD);
    return NULL;
}

/* Thread t of rank r plays ping-pong with thread t of rank r^1 (when there is one). */
static void *ping_pong(void *arg)
{
    int t = (int)(long)arg;
    int peer = rank ^ 1;
    char *buf = malloc(BIG);
    if (peer >= size) {
        free(buf);
        return NULL;
    }
    for (int i = 0; i < ROUNDS; i++) {
        int len = (i % 10 == 9) ? BIG : 8 + i;
        if (rank < peer) {
            memset(buf, (t * 31 + i) & 0xff, len);
            MPI_Send(buf, len, MPI_CHAR, peer, t, MPI_COMM_WORLD);
            MPI_Status st;
            MPI_Recv(buf, len, MPI_CHAR, peer, t, MPI_COMM_WORLD, &st);
            int got;
            MPI_Get_count(&st, MPI_CHAR, &got);
            CHECK(got == len && st.MPI_TAG == t, "round %d thread %d: %d bytes tag %d", i, t, got,
                  st.MPI_TAG);
            for (int k = 0; k < len; k++)
                if (buf[k] != (char)((t * 31 + i + 1) & 0xff)) {
                    CHECK(0, "round %d thread %d: byte %d is %d", i, t, k, buf[k]);
                    break;
                }
        } else {
            MPI_Recv(buf, len, MPI_CHAR, peer, t, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            for (int k = 0; k < len; k++)
                if (buf[k] != (char)((t * 31 + i) & 0xff)) {
                    CHECK(0, "round %d thread %d: byte %d is %d", i, t, k, buf[k]);
                    break;
                }
            memset(buf, (t * 31 + i + 1) & 0xff, len);
            MPI_Send(buf, len, MPI_CHAR, peer, t, MPI_COMM_WORLD);
        }
    }
    free(buf);
    return NULL;
}

/* Collectives and communicator creation on this thread's own communicator. */
static void *collectives(void *arg)
{
    int t = (int)(long)arg;
    MPI_Comm comm = thread_comm[t];
    for (int i = 0; i < 50; i++) {
        int in = rank + t + i, out = -1;
        MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_SUM, comm);
        int want = size * (size - 1) / 2 + size * (t + i);
        CHECK(out == want, "thread %d allreduce %d: %d, not %d", t, i, out, want);
        MPI_Comm dup;
        MPI_Comm_dup(comm, &dup);
        int root = i % size, v = (rank == root) ? 1000 * t + i : -1;
        MPI_Bcast(&v, 1, MPI_INT, root, dup);
        CHECK(v == 1000 * t + i, "thread %d bcast %d on a new communicator: %d", t, i, v);
        MPI_Barrier(dup);
        MPI_Comm_free(&dup);
    }
    return NULL;
}

static int query(void *extra, MPI_Status *status)
{
    (void)extra;
    MPI_Status_set_elements(status, MPI_BYTE, 0);
    MPI_Status_set_cancelled(status, 0);
    status->MPI_SOURCE = MPI_UNDEFINED;
    status->MPI_TAG = MPI_UNDEFINED;
    return MPI_SUCCESS;
}
static int free_fn(void *extra)
{
    (void)extra;
    return MPI_SUCCESS;
}
static int cancel_fn(void *extra, int complete)
{
    (void)extra;
    (void)complete;
    return MPI_SUCCESS;
}

static void *complete_later(void *arg)
{
    usleep(20000);
    MPI_Grequest_complete(*(MPI_Request *)arg);
    return NULL;
}

static MPI_Request partitioned;
static void *ready_partition(void *arg)
{
    usleep(5000 * (int)(long)arg);
    MPI_Pready((int)(long)arg, partitioned);
    return NULL;
}

int main(int argc, char **argv)
{
    int provided, flag;
    pthread_t th[NT];
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(provided == MPI_THREAD_MULTIPLE, "provided %d", provided);
    MPI_Query_thread(&flag);
    CHECK(flag == MPI_THREAD_MULTIPLE, "MPI_Query_thread says %d", flag);
    MPI_Is_thread_main(&flag);
    CHECK(flag == 1, "MPI_Is_thread_main is %d in the main thread", flag);
    pthread_create(&th[0], NULL, not_main, NULL);
    pthread_join(th[0], NULL);

    /* The main thread blocks in a receive that only another thread can satisfy. */
    int got = 0;
    pthread_create(&th[0], NULL, send_to_self_later, NULL);
    MPI_Recv(&got, 1, MPI_INT, rank, 77, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    pthread_join(th[0], NULL);
    CHECK(got == 42, "self receive got %d", got);

    for (long t = 0; t < NT; t++)
        pthread_create(&th[t], NULL, ping_pong, (void *)t);
    for (int t = 0; t < NT; t++)
        pthread_join(th[t], NULL);

    for (int t = 0; t < NT; t++)
        MPI_Comm_dup(MPI_COMM_WORLD, &thread_comm[t]);
    for (long t = 0; t < NT; t++)
        pthread_create(&th[t], NULL, collectives, (void *)t);
    for (int t = 0; t < NT; t++)
        pthread_join(th[t], NULL);
    for (int t = 0; t < NT; t++)
        MPI_Comm_free(&thread_comm[t]);

    MPI_Request greq;
    MPI_Grequest_start(query, free_fn, cancel_fn, NULL, &greq);
    pthread_create(&th[0], NULL, complete_later, &greq);
    MPI_Wait(&greq, MPI_STATUS_IGNORE);
    pthread_join(th[0], NULL);

    /* Rank 0 sends NT partitions to the last rank; its threads mark them ready. */
    if (size > 1 && (rank == 0 || rank == size - 1)) {
        int part[NT * 16];
        if (rank == 0) {
            for (int i = 0; i < NT * 16; i++)
                part[i] = i * 3;
            MPI_Psend_init(part, NT, 16, MPI_INT, size - 1, 5, MPI_COMM_WORLD, MPI_INFO_NULL,
                           &partitioned);
            MPI_Start(&partitioned);
            for (long t = 0; t < NT; t++)
                pthread_create(&th[t], NULL, ready_partition, (void *)t);
            MPI_Wait(&partitioned, MPI_STATUS_IGNORE);
            for (int t = 0; t < NT; t++)
                pthread_join(th[t], NULL);
        } else {
            memset(part, 0, sizeof part);
            MPI_Precv_init(part, NT, 16, MPI_INT, 0, 5, MPI_COMM_WORLD, MPI_INFO_NULL,
                           &partitioned);
            MPI_Start(&partitioned);
            MPI_Wait(&partitioned, MPI_STATUS_IGNORE);
            for (int i = 0; i < NT * 16; i++)
                if (part[i] != i * 3) {
                    CHECK(0, "partition element %d is %d", i, part[i]);
                    break;
                }
        }
        MPI_Request_free(&partitioned);
    }

    int all;
    MPI_Allreduce(&errs, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0 && all == 0)
        printf(" No Errors\n");
    MPI_Finalize();
    return all != 0;
}
