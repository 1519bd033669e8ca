/* Messages of more than 2^31 elements through the MPI 4.0 large-count (`_c`) calls: 2^31 + 64
 * MPI_BYTEs (about 2.1 GB in one buffer per rank) through MPI_Send_c/MPI_Recv_c (with
 * MPI_Get_count_c and MPI_Get_elements_c giving the count, the int MPI_Get_count and
 * MPI_Get_elements MPI_UNDEFINED), MPI_Isend_c/MPI_Irecv_c, MPI_Bcast_c, MPI_Allreduce_c
 * (MPI_BXOR on the same 2^31 + 64 bytes, in place), MPI_Alltoallv_c with a count and
 * MPI_Gatherv_c with a displacement past 2^31, a type of MPI_Type_contiguous_c with that
 * count (its size and extent through the _c queries, MPI_UNDEFINED through MPI_Type_size) sent
 * with the int MPI_Send, and MPI_Put_c into a window of MPI_Win_create_c. Each step checks the
 * first and last 64 bytes and a byte in every 4 KiB page. A count whose bytes overflow is
 * MPI_ERR_COUNT before any memory is touched. Two processes. */
#include "mtest.h"
#include <stdint.h>

#define BIG (((MPI_Count)1 << 31) + 64)

/* The byte at `i` of the data written with `seed`. */
static unsigned char pattern(MPI_Count i, unsigned seed)
{
    uint64_t x = (uint64_t)i * 0x9e3779b97f4a7c15ull + seed;
    return (unsigned char)(x >> 56);
}

/* The positions written and checked: the first and last 64 bytes and every 4093rd byte between
 * (a prime stride, so the samples fall at every offset within the pages). */
#define STRIDE 4093
static MPI_Count next_sample(MPI_Count i)
{
    if (i < 64 || i >= BIG - 64)
        return i + 1;
    return i + STRIDE < BIG - 64 ? i + STRIDE : BIG - 64;
}

/* The whole buffer set (so that every page is written, as a program's data would be), then the
 * pattern of `seed` at the samples. */
static void fill(unsigned char *buf, unsigned seed)
{
    memset(buf, (int)seed, (size_t)BIG);
    for (MPI_Count i = 0; i < BIG; i = next_sample(i))
        buf[i] = pattern(i, seed);
}

/* Counts the samples of `buf` that do not hold the pattern of `seed` (XOR that of `seed2` if
 * not 0), and reports the first. */
static void mismatches(const unsigned char *buf, unsigned seed, unsigned seed2, const char *what)
{
    long bad = 0, checked = 0;
    MPI_Count first = -1;
    for (MPI_Count i = 0; i < BIG; i = next_sample(i)) {
        unsigned char want = pattern(i, seed);
        if (seed2)
            want ^= pattern(i, seed2);
        if (buf[i] != want && bad++ == 0)
            first = i;
        checked++;
    }
    CHECK(bad == 0, "%s: %ld of %ld samples wrong, the first at byte %lld", what, bad, checked,
          (long long)first);
}

int main(int argc, char **argv)
{
    int rank, size, rc;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if (size != 2) {
        fprintf(stderr, "bigcount needs 2 processes\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    int peer = 1 - rank;
    unsigned char *buf = malloc((size_t)BIG);
    if (!buf) {
        fprintf(stderr, "[%d] cannot allocate %lld bytes\n", rank, (long long)BIG);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    MPI_Status st;
    MPI_Count n = -1;
    int ni = 0;

    /* MPI_Send_c / MPI_Recv_c, 0 -> 1; the counts of the status. */
    if (rank == 0) {
        fill(buf, 1);
        rc = MPI_Send_c(buf, BIG, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
        CHECK_OK(rc, "MPI_Send_c of 2^31 + 64 bytes");
    } else {
        memset(buf, 0, (size_t)BIG);
        rc = MPI_Recv_c(buf, BIG, MPI_BYTE, 0, 1, MPI_COMM_WORLD, &st);
        CHECK_OK(rc, "MPI_Recv_c of 2^31 + 64 bytes");
        mismatches(buf, 1, 0, "MPI_Send_c/MPI_Recv_c");
        MPI_Get_count_c(&st, MPI_BYTE, &n);
        CHECK(n == BIG, "MPI_Get_count_c gave %lld", (long long)n);
        MPI_Get_elements_c(&st, MPI_BYTE, &n);
        CHECK(n == BIG, "MPI_Get_elements_c gave %lld", (long long)n);
        MPI_Get_count(&st, MPI_BYTE, &ni);
        CHECK(ni == MPI_UNDEFINED, "MPI_Get_count of 2^31 + 64 bytes gave %d", ni);
        MPI_Get_elements(&st, MPI_BYTE, &ni);
        CHECK(ni == MPI_UNDEFINED, "MPI_Get_elements of 2^31 + 64 bytes gave %d", ni);
        MPI_Get_count_c(&st, MPI_SHORT, &n);
        CHECK(n == BIG / 2, "MPI_Get_count_c in shorts gave %lld", (long long)n);
    }

    /* MPI_Isend_c / MPI_Irecv_c, 1 -> 0. */
    MPI_Request req;
    if (rank == 1) {
        fill(buf, 2);
        rc = MPI_Isend_c(buf, BIG, MPI_BYTE, 0, 2, MPI_COMM_WORLD, &req);
        CHECK_OK(rc, "MPI_Isend_c");
    } else {
        memset(buf, 0, (size_t)BIG);
        rc = MPI_Irecv_c(buf, BIG, MPI_BYTE, 1, 2, MPI_COMM_WORLD, &req);
        CHECK_OK(rc, "MPI_Irecv_c");
    }
    rc = MPI_Wait(&req, &st);
    CHECK_OK(rc, "MPI_Wait of MPI_Isend_c/MPI_Irecv_c");
    if (rank == 0) {
        mismatches(buf, 2, 0, "MPI_Isend_c/MPI_Irecv_c");
        MPI_Get_count_c(&st, MPI_BYTE, &n);
        CHECK(n == BIG, "MPI_Get_count_c after MPI_Irecv_c gave %lld", (long long)n);
    }

    /* MPI_Bcast_c from 0. */
    if (rank == 0)
        fill(buf, 3);
    else
        memset(buf, 0, (size_t)BIG);
    rc = MPI_Bcast_c(buf, BIG, MPI_BYTE, 0, MPI_COMM_WORLD);
    CHECK_OK(rc, "MPI_Bcast_c");
    if (rank == 1)
        mismatches(buf, 3, 0, "MPI_Bcast_c");

    /* MPI_Allreduce_c, in place: every byte is the XOR of both ranks' bytes. */
    fill(buf, 4 + rank);
    rc = MPI_Allreduce_c(MPI_IN_PLACE, buf, BIG, MPI_BYTE, MPI_BXOR, MPI_COMM_WORLD);
    CHECK_OK(rc, "MPI_Allreduce_c");
    mismatches(buf, 4, 5, "MPI_Allreduce_c");

    /* MPI_Alltoallv_c with MPI_Count counts: 2^31 + 64 bytes from 0 to 1, nothing else. */
    unsigned char small[64] = {0};
    MPI_Count acounts[2][2] = {{0, BIG}, {0, 0}}, none[2] = {0, 0};
    MPI_Aint adispls[2] = {0, 0};
    if (rank == 0)
        fill(buf, 8);
    else
        memset(buf, 0, (size_t)BIG);
    rc = MPI_Alltoallv_c(rank == 0 ? (void *)buf : small, rank == 0 ? acounts[0] : none, adispls,
                         MPI_BYTE, rank == 1 ? (void *)buf : small,
                         rank == 1 ? (MPI_Count[]){BIG, 0} : acounts[1], adispls, MPI_BYTE,
                         MPI_COMM_WORLD);
    CHECK_OK(rc, "MPI_Alltoallv_c of 2^31 + 64 bytes");
    if (rank == 1)
        mismatches(buf, 8, 0, "MPI_Alltoallv_c");

    /* MPI_Gatherv_c with an MPI_Aint displacement past 2^31: rank 1's 64 bytes land at the end
     * of rank 0's buffer, rank 0's own 64 at its start. */
    MPI_Count gcounts[2] = {64, 64};
    MPI_Aint gdispls[2] = {0, (MPI_Aint)(BIG - 64)};
    fill(buf, 9);
    if (rank == 0)
        memset(buf + BIG - 64, 0, 64);
    rc = MPI_Gatherv_c(rank == 0 ? MPI_IN_PLACE : (void *)(buf + BIG - 64), 64, MPI_BYTE, buf,
                       gcounts, gdispls, MPI_BYTE, 0, MPI_COMM_WORLD);
    CHECK_OK(rc, "MPI_Gatherv_c to a displacement past 2^31");
    if (rank == 0)
        mismatches(buf, 9, 0, "MPI_Gatherv_c");

    /* A type of 2^31 + 64 bytes from MPI_Type_contiguous_c, sent with the int MPI_Send. */
    MPI_Datatype whole;
    rc = MPI_Type_contiguous_c(BIG, MPI_BYTE, &whole);
    CHECK_OK(rc, "MPI_Type_contiguous_c");
    MPI_Type_commit(&whole);
    MPI_Count tsize = -1, lb = -1, extent = -1;
    MPI_Type_size_c(whole, &tsize);
    CHECK(tsize == BIG, "MPI_Type_size_c gave %lld", (long long)tsize);
    MPI_Type_get_extent_c(whole, &lb, &extent);
    CHECK(lb == 0 && extent == BIG, "MPI_Type_get_extent_c gave %lld, %lld", (long long)lb,
          (long long)extent);
    int isize = 0;
    MPI_Type_size(whole, &isize);
    CHECK(isize == MPI_UNDEFINED, "MPI_Type_size of 2^31 + 64 bytes gave %d", isize);
    if (rank == 0) {
        fill(buf, 6);
        rc = MPI_Send(buf, 1, whole, 1, 6, MPI_COMM_WORLD);
        CHECK_OK(rc, "MPI_Send of one MPI_Type_contiguous_c element");
    } else {
        memset(buf, 0, (size_t)BIG);
        rc = MPI_Recv(buf, 1, whole, 0, 6, MPI_COMM_WORLD, &st);
        CHECK_OK(rc, "MPI_Recv of one MPI_Type_contiguous_c element");
        mismatches(buf, 6, 0, "MPI_Type_contiguous_c");
        MPI_Get_count_c(&st, whole, &n);
        CHECK(n == 1, "MPI_Get_count_c in the big type gave %lld", (long long)n);
        MPI_Get_elements_c(&st, whole, &n);
        CHECK(n == BIG, "MPI_Get_elements_c in the big type gave %lld", (long long)n);
    }
    MPI_Type_free(&whole);

    /* MPI_Put_c of 2^31 + 64 bytes into rank 1's window. */
    MPI_Win win;
    if (rank == 1)
        memset(buf, 0, (size_t)BIG);
    else
        fill(buf, 7);
    rc = MPI_Win_create_c(buf, rank == 1 ? BIG : 0, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    CHECK_OK(rc, "MPI_Win_create_c");
    MPI_Win_fence(0, win);
    if (rank == 0) {
        rc = MPI_Put_c(buf, BIG, MPI_BYTE, 1, 0, BIG, MPI_BYTE, win);
        CHECK_OK(rc, "MPI_Put_c of 2^31 + 64 bytes");
    }
    MPI_Win_fence(0, win);
    MPI_Win_free(&win);
    if (rank == 1)
        mismatches(buf, 7, 0, "MPI_Put_c");

    /* Counts whose bytes do not fit the address space: an error, nothing touched. */
    MPI_Count huge = (MPI_Count)1 << 62;
    rc = MPI_Send_c(buf, huge, MPI_DOUBLE, peer, 8, MPI_COMM_WORLD);
    CHECK_CLASS(rc, MPI_ERR_COUNT, "MPI_Send_c of 2^62 doubles");
    rc = MPI_Recv_c(buf, huge, MPI_DOUBLE, peer, 8, MPI_COMM_WORLD, &st);
    CHECK_CLASS(rc, MPI_ERR_COUNT, "MPI_Recv_c of 2^62 doubles");
    rc = MPI_Bcast_c(buf, huge, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    CHECK_CLASS(rc, MPI_ERR_COUNT, "MPI_Bcast_c of 2^62 doubles");
    rc = MPI_Send_c(buf, -1, MPI_BYTE, peer, 8, MPI_COMM_WORLD);
    CHECK_CLASS(rc, MPI_ERR_COUNT, "MPI_Send_c of count -1");
    rc = MPI_Status_set_elements_c(&st, MPI_DOUBLE, huge);
    CHECK_CLASS(rc, MPI_ERR_VALUE_TOO_LARGE, "MPI_Status_set_elements_c of 2^62 doubles");

    free(buf);
    return finish();
}
