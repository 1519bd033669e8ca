/* Data representations of MPI I/O (MPI 4.1 §14.5). Each rank writes ints, longs and doubles
 * through "external32" views with vector filetypes (its blocks interleaved with the other
 * ranks'), by write_all, iwrite_at and a split collective; rank 0 then checks
 * every byte of the file is big-endian external32 with MPI_LONG in 4 bytes, the layout of the
 * filetypes computed with external32 sizes; everyone reads the data back through external32
 * views (into a strided memory type too) and rank 0 through a native view. Then ints (and
 * longs) by write_ordered, read back, the bytes checked again. Also:
 * MPI_File_get_type_extent and MPI_File_get_view under external32, "internal", the error
 * classes of an unknown representation and of registering a predefined name, and a long that
 * does not fit in 4 bytes. With the argument "user", also a representation registered with
 * MPI_Register_datarep that stores an int in 8 big-endian bytes.
 *
 * MPICH 4.0.2 (ROMIO) passes the checks of ints and doubles, but not what the argument "strict"
 * adds (ferry runs with it): ROMIO lays out an external32 view's filetype with native extents
 * (MPI_LONG 8 bytes, so the longs land elsewhere and MPI_File_get_type_extent says 8), reads
 * external32 data wrongly with MPI_File_iread_at_all (and crashes in MPI_Wait on 3 ranks),
 * does not convert what MPI_File_read_ordered reads, treats "internal" as "native" (get_view
 * says "native"), lets a program register "external32", and writes a long of 2^40 without a
 * conversion error; and its MPI_Register_datarep returns an error, so "user" cannot run there
 * at all. The standard's rules (MPI 4.1 §14.5.2: MPI_LONG is 4 bytes in external32;
 * §14.5: displacements of portable filetypes scale to the file's sizes, and
 * MPI_File_get_type_extent gives the extent in the file) and ferry's own choice for
 * "internal" (external32, reported by its own name) are what "strict" checks.
 * Files live in a fresh directory under /tmp, removed at the end. Any number of processes. */
#include "mtest.h"
#include <stdint.h>
#include <unistd.h>

#define B 3  /* values per block */
#define NB 4 /* blocks per rank */
#define N (B * NB)

static int int_value(int rank, int i)
{
    return (rank + 1) * 0x01020304 + i;
}

static long long_value(int rank, int i)
{
    return -(long)(rank * 100000 + i * 7 + 1); /* negative, fits in 4 bytes */
}

static double double_value(int rank, int i)
{
    return rank + i / 8.0 + 0.25;
}

/* Big-endian bytes of the low `n` bytes of v. */
static void be(unsigned char *out, uint64_t v, int n)
{
    for (int k = 0; k < n; k++)
        out[k] = (unsigned char)(v >> (8 * (n - 1 - k)));
}

/* The rank and index of the value at position g of a region where each of `size` ranks has
 * NB blocks of B values, interleaved block by block. */
static void owner(int g, int size, int *rank, int *i)
{
    int blk = g / (B * size), within = g % (B * size);
    *rank = within / B;
    *i = blk * B + within % B;
}

/* Ordered access through an external32 view of `type` (MPI_INT or MPI_LONG, 4 bytes each in
 * external32) from file offset `disp`: rank r writes r + 1 values with write_ordered, reads
 * them back with read_ordered ("strict") or read_at_all, and rank 0 checks the bytes. Returns
 * where the data ends. */
static MPI_Offset ordered(MPI_File fh, const char *path, MPI_Offset disp, MPI_Datatype type,
                          int rank, int size, int strict)
{
    long lv[64], lb[64];
    int iv[64], ib[64], n = rank + 1, cnt;
    MPI_Status st;
    for (int i = 0; i < n; i++) {
        lv[i] = -(rank * 100 + i) - 5;
        iv[i] = (int)lv[i];
        lb[i] = ib[i] = 0;
    }
    void *buf = type == MPI_LONG ? (void *)lv : (void *)iv;
    void *back = type == MPI_LONG ? (void *)lb : (void *)ib;
    MPI_File_set_view(fh, disp, type, type, "external32", MPI_INFO_NULL);
    int rc = MPI_File_write_ordered(fh, buf, n, type, &st);
    CHECK(rc == MPI_SUCCESS, "write_ordered: %d", rc);
    MPI_Offset pos;
    MPI_File_get_position_shared(fh, &pos);
    CHECK(pos == size * (size + 1) / 2, "shared pointer after write_ordered: %lld",
          (long long)pos);
    if (strict) {
        /* Every rank has read the pointer before it moves. */
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_File_seek_shared(fh, 0, MPI_SEEK_SET);
        rc = MPI_File_read_ordered(fh, back, n, type, &st);
    } else {
        rc = MPI_File_read_at_all(fh, rank * (rank + 1) / 2, back, n, type, &st);
    }
    CHECK(rc == MPI_SUCCESS, "read back: %d", rc);
    MPI_Get_count(&st, type, &cnt);
    CHECK(cnt == n, "read back count %d", cnt);
    for (int i = 0; i < n; i++)
        CHECK(type == MPI_LONG ? lb[i] == lv[i] : ib[i] == iv[i], "ordered value %d: %ld %d, wrote %ld", i, lb[i], ib[i], lv[i]);
    MPI_File_sync(fh);
    MPI_Barrier(MPI_COMM_WORLD);
    int total = size * (size + 1) / 2;
    if (rank == 0) {
        unsigned char *file = malloc(4 * total), want[4];
        FILE *f = fopen(path, "rb");
        CHECK(f && fseek(f, (long)disp, SEEK_SET) == 0 &&
                  fread(file, 1, 4 * total, f) == (size_t)4 * total,
              "short file at %lld", (long long)disp);
        if (f)
            fclose(f);
        for (int r = 0, k = 0; r < size; r++)
            for (int i = 0; i <= r; i++, k++) {
                be(want, (uint32_t)(-(r * 100 + i) - 5), 4);
                CHECK(memcmp(file + 4 * k, want, 4) == 0, "ordered bytes of rank %d value %d", r,
                      i);
            }
        free(file);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    return disp + 4 * total;
}

/* ---- a user representation: an int is 8 big-endian bytes in the file ---- */
static int extent_calls;

static int wide_extent(MPI_Datatype dt, MPI_Aint *extent, void *state)
{
    (void)state;
    extent_calls++;
    if (dt != MPI_INT)
        return MPI_ERR_TYPE;
    *extent = 8;
    return MPI_SUCCESS;
}

static int wide_write(void *userbuf, MPI_Datatype dt, int count, void *filebuf, MPI_Offset position,
                      void *state)
{
    (void)state;
    if (dt != MPI_INT)
        return MPI_ERR_TYPE;
    const int *in = (const int *)userbuf + position;
    for (int k = 0; k < count; k++)
        be((unsigned char *)filebuf + 8 * k, (uint64_t)(int64_t)in[k], 8);
    return MPI_SUCCESS;
}

static int wide_read(void *userbuf, MPI_Datatype dt, int count, void *filebuf, MPI_Offset position,
                     void *state)
{
    (void)state;
    if (dt != MPI_INT)
        return MPI_ERR_TYPE;
    int *out = (int *)userbuf + position;
    const unsigned char *p = filebuf;
    for (int k = 0; k < count; k++) {
        uint64_t v = 0;
        for (int j = 0; j < 8; j++)
            v = v << 8 | p[8 * k + j];
        out[k] = (int)(int64_t)v;
    }
    return MPI_SUCCESS;
}

static void user_representation(const char *path, int rank, int size)
{
    MPI_File fh;
    MPI_Status st;
    int rc = MPI_Register_datarep("ferry-wide", wide_read, wide_write, wide_extent, NULL);
    CHECK(rc == MPI_SUCCESS, "MPI_Register_datarep: %d", rc);
    rc = MPI_Register_datarep("ferry-wide", wide_read, wide_write, wide_extent, NULL);
    CHECK_CLASS(rc, MPI_ERR_DUP_DATAREP, "registering ferry-wide twice");

    MPI_Datatype ft;
    MPI_Type_vector(NB, B, B * size, MPI_INT, &ft);
    MPI_Type_commit(&ft);
    int v[N], back[N];
    for (int i = 0; i < N; i++)
        v[i] = int_value(rank, i) * (i % 2 ? -1 : 1);
    MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh);
    rc = MPI_File_set_view(fh, (MPI_Offset)rank * B * 8, MPI_INT, ft, "ferry-wide", MPI_INFO_NULL);
    CHECK(rc == MPI_SUCCESS, "set_view ferry-wide: %d", rc);
    char rep[MPI_MAX_DATAREP_STRING];
    MPI_Offset disp;
    MPI_Datatype et, ft2;
    MPI_File_get_view(fh, &disp, &et, &ft2, rep);
    CHECK(strcmp(rep, "ferry-wide") == 0, "get_view datarep %s", rep);
    if (ft2 != MPI_INT)
        MPI_Type_free(&ft2);
    MPI_Aint ext;
    MPI_File_get_type_extent(fh, ft, &ext);
    CHECK(ext == (MPI_Aint)((NB - 1) * B * size + B) * 8, "type extent under ferry-wide: %ld",
          (long)ext);
    rc = MPI_File_write_all(fh, v, N, MPI_INT, &st);
    CHECK(rc == MPI_SUCCESS, "write_all ferry-wide: %d", rc);
    int cnt;
    MPI_Get_count(&st, MPI_INT, &cnt);
    CHECK(cnt == N, "write count %d", cnt);
    MPI_File_seek(fh, 0, MPI_SEEK_SET);
    memset(back, 0, sizeof back);
    rc = MPI_File_read_all(fh, back, N, MPI_INT, &st);
    CHECK(rc == MPI_SUCCESS, "read_all ferry-wide: %d", rc);
    for (int i = 0; i < N; i++)
        CHECK(back[i] == v[i], "ferry-wide value %d: %d, wrote %d", i, back[i], v[i]);
    MPI_File_close(&fh);
    CHECK(extent_calls > 0, "the extent function was never called");

    if (rank == 0) {
        int total = N * size;
        unsigned char *file = malloc(total * 8), want[8];
        FILE *f = fopen(path, "rb");
        CHECK(f && fread(file, 1, total * 8, f) == (size_t)total * 8, "short file");
        if (f)
            fclose(f);
        for (int g = 0; g < total; g++) {
            int r, i;
            owner(g, size, &r, &i);
            be(want, (uint64_t)(int64_t)(int_value(r, i) * (i % 2 ? -1 : 1)), 8);
            CHECK(memcmp(file + 8 * g, want, 8) == 0, "ferry-wide bytes of value %d", g);
        }
        free(file);
        unlink(path);
    }
    MPI_Type_free(&ft);
    MPI_Barrier(MPI_COMM_WORLD);
}

int main(int argc, char **argv)
{
    int rank, size, rc;
    char dir[64] = "", path[128];
    MPI_File fh;
    MPI_Status st;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (rank == 0) {
        strcpy(dir, "/tmp/ferry-datarep-XXXXXX");
        if (!mkdtemp(dir)) {
            perror("mkdtemp");
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
    MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
    snprintf(path, sizeof path, "%s/e32", dir);
    int strict = 0, user = 0;
    for (int a = 1; a < argc; a++) {
        strict |= strcmp(argv[a], "strict") == 0;
        user |= strcmp(argv[a], "user") == 0;
    }

    int ints[N], back_i[N];
    long longs[N], back_l[N];
    double doubles[2 * N], back_d[2 * N]; /* every second one (a strided memory type) */
    for (int i = 0; i < N; i++) {
        ints[i] = int_value(rank, i);
        longs[i] = long_value(rank, i);
        doubles[2 * i] = double_value(rank, i);
        doubles[2 * i + 1] = -1;
    }
    MPI_Datatype ft_int, ft_long, ft_double, every_second;
    MPI_Type_vector(NB, B, B * size, MPI_INT, &ft_int);
    MPI_Type_vector(NB, B, B * size, MPI_LONG, &ft_long);
    MPI_Type_vector(NB, B, B * size, MPI_DOUBLE, &ft_double);
    MPI_Type_vector(N, 1, 2, MPI_DOUBLE, &every_second);
    MPI_Type_commit(&ft_int);
    MPI_Type_commit(&ft_long);
    MPI_Type_commit(&ft_double);
    MPI_Type_commit(&every_second);

    /* external32 sizes: int 4, long 4, double 8. Regions one after the other. */
    const MPI_Offset total = (MPI_Offset)N * size;
    const MPI_Offset r_int = 0, r_long = r_int + 4 * total, r_double = r_long + 4 * total;
    const MPI_Offset end = r_double + 8 * total;

    rc = MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh);
    CHECK(rc == MPI_SUCCESS, "open: %d", rc);

    /* Queries under external32. */
    rc = MPI_File_set_view(fh, 0, MPI_BYTE, MPI_BYTE, "no-such-representation", MPI_INFO_NULL);
    CHECK_CLASS(rc, MPI_ERR_UNSUPPORTED_DATAREP, "an unknown data representation");
    rc = MPI_File_set_view(fh, r_long + 4 * B * rank, MPI_LONG, ft_long, "external32", MPI_INFO_NULL);
    CHECK(rc == MPI_SUCCESS, "set_view external32: %d", rc);
    MPI_Aint ext;
    MPI_File_get_type_extent(fh, MPI_INT, &ext);
    CHECK(ext == 4, "MPI_INT extent in external32: %ld", (long)ext);
    MPI_File_get_type_extent(fh, ft_int, &ext);
    CHECK(ext == (MPI_Aint)((NB - 1) * B * size + B) * 4, "vector of ints in external32: %ld",
          (long)ext);
    if (strict) {
        MPI_File_get_type_extent(fh, MPI_LONG, &ext);
        CHECK(ext == 4, "MPI_LONG extent in external32: %ld", (long)ext);
        MPI_File_get_type_extent(fh, ft_long, &ext);
        CHECK(ext == (MPI_Aint)((NB - 1) * B * size + B) * 4,
              "vector of longs in external32: %ld", (long)ext);
    }
    char rep[MPI_MAX_DATAREP_STRING];
    MPI_Offset disp;
    MPI_Datatype et, ft;
    MPI_File_get_view(fh, &disp, &et, &ft, rep);
    CHECK(strcmp(rep, "external32") == 0 && disp == r_long + 4 * B * rank && et == MPI_LONG,
          "get_view: %s %lld", rep, (long long)disp);
    MPI_Type_free(&ft);

    /* Longs at an explicit offset, nonblocking. */
    MPI_Request req;
    rc = MPI_File_iwrite_at(fh, 0, longs, N, MPI_LONG, &req);
    CHECK(rc == MPI_SUCCESS, "iwrite_at longs: %d", rc);
    MPI_Wait(&req, &st);
    int cnt;
    MPI_Get_count(&st, MPI_LONG, &cnt);
    CHECK(cnt == N, "iwrite_at count %d", cnt);

    /* Ints collectively through the individual pointer. */
    MPI_File_set_view(fh, r_int + 4 * B * rank, MPI_INT, ft_int, "external32", MPI_INFO_NULL);
    rc = MPI_File_write_all(fh, ints, N / 2, MPI_INT, &st);
    CHECK(rc == MPI_SUCCESS, "write_all ints: %d", rc);
    MPI_Offset pos;
    MPI_File_get_position(fh, &pos);
    CHECK(pos == N / 2, "position after write_all: %lld", (long long)pos);
    rc = MPI_File_write_all_begin(fh, ints + N / 2, N - N / 2, MPI_INT);
    CHECK(rc == MPI_SUCCESS, "write_all_begin ints: %d", rc);
    MPI_File_write_all_end(fh, ints + N / 2, &st);

    /* Doubles from a strided memory type. */
    MPI_File_set_view(fh, r_double + 8 * B * rank, MPI_DOUBLE, ft_double, "external32",
                      MPI_INFO_NULL);
    rc = MPI_File_write_at_all(fh, 0, doubles, 1, every_second, &st);
    CHECK(rc == MPI_SUCCESS, "write_at_all doubles: %d", rc);
    MPI_Get_count(&st, MPI_DOUBLE, &cnt);
    CHECK(cnt == N, "write_at_all count %d", cnt);
    MPI_File_sync(fh);
    MPI_Barrier(MPI_COMM_WORLD);

    /* Rank 0: the file's bytes are external32, exactly. */
    if (rank == 0) {
        unsigned char *file = calloc(end + 1, 1), want[8];
        MPI_Offset size_now;
        MPI_File_get_size(fh, &size_now);
        CHECK(size_now == end, "file size %lld, want %lld", (long long)size_now, (long long)end);
        FILE *f = fopen(path, "rb");
        CHECK(f && fread(file, 1, end, f) == (size_t)end, "short file");
        if (f)
            fclose(f);
        for (int g = 0; g < total; g++) {
            int r, i;
            owner(g, size, &r, &i);
            be(want, (uint32_t)int_value(r, i), 4);
            CHECK(memcmp(file + r_int + 4 * g, want, 4) == 0, "bytes of int %d", g);
            be(want, (uint32_t)(int32_t)long_value(r, i), 4);
            CHECK(!strict || memcmp(file + r_long + 4 * g, want, 4) == 0, "bytes of long %d", g);
            double d = double_value(r, i);
            uint64_t bits;
            memcpy(&bits, &d, 8);
            be(want, bits, 8);
            CHECK(memcmp(file + r_double + 8 * g, want, 8) == 0, "bytes of double %d", g);
        }
        free(file);
    }

    /* Everyone reads back through external32 views. */
    MPI_File_set_view(fh, r_int + 4 * B * rank, MPI_INT, ft_int, "external32", MPI_INFO_NULL);
    memset(back_i, 0, sizeof back_i);
    rc = MPI_File_read_all(fh, back_i, N, MPI_INT, &st);
    CHECK(rc == MPI_SUCCESS, "read_all ints: %d", rc);
    MPI_Get_count(&st, MPI_INT, &cnt);
    CHECK(cnt == N, "read_all count %d", cnt);
    MPI_File_set_view(fh, r_long + 4 * B * rank, MPI_LONG, ft_long, "external32", MPI_INFO_NULL);
    memset(back_l, 0, sizeof back_l);
    rc = MPI_File_read_at(fh, 0, back_l, N, MPI_LONG, &st);
    CHECK(rc == MPI_SUCCESS, "read_at longs: %d", rc);
    MPI_File_set_view(fh, r_double + 8 * B * rank, MPI_DOUBLE, ft_double, "external32",
                      MPI_INFO_NULL);
    for (int i = 0; i < 2 * N; i++)
        back_d[i] = -1;
    /* Nonblocking into the strided memory type ("strict"), or blocking into contiguous
     * memory. */
    int step = strict ? 2 : 1;
    if (strict) {
        rc = MPI_File_iread_at_all(fh, 0, back_d, 1, every_second, &req);
        CHECK(rc == MPI_SUCCESS, "iread_at_all doubles: %d", rc);
        MPI_Wait(&req, &st);
    } else {
        rc = MPI_File_read_at_all(fh, 0, back_d, N, MPI_DOUBLE, &st);
        CHECK(rc == MPI_SUCCESS, "read_at_all doubles: %d", rc);
    }
    for (int i = 0; i < N; i++) {
        CHECK(back_i[i] == ints[i], "int %d: %d, wrote %d", i, back_i[i], ints[i]);
        CHECK(!strict || back_l[i] == longs[i], "long %d: %ld, wrote %ld", i, back_l[i],
              longs[i]);
        CHECK(back_d[step * i] == doubles[2 * i], "double %d: %g, wrote %g", i,
              back_d[step * i], doubles[2 * i]);
        CHECK(!strict || back_d[2 * i + 1] == -1, "the hole after double %d was written", i);
    }

    /* Rank 0 reads the ints through a native view: big-endian values. */
    MPI_File_set_view(fh, 0, MPI_INT, MPI_INT, "native", MPI_INFO_NULL);
    if (rank == 0) {
        int *raw = malloc(total * sizeof(int));
        rc = MPI_File_read_at(fh, r_int / 4, raw, (int)total, MPI_INT, &st);
        CHECK(rc == MPI_SUCCESS, "native read: %d", rc);
        for (int g = 0; g < total; g++) {
            int r, i;
            unsigned char want[4];
            owner(g, size, &r, &i);
            be(want, (uint32_t)int_value(r, i), 4);
            CHECK(memcmp(&raw[g], want, 4) == 0, "native view of int %d", g);
        }
        free(raw);
    }

    /* Ordered access (the shared file pointer), ints and ("strict") longs. */
    MPI_Offset after = ordered(fh, path, end, MPI_INT, rank, size, strict);
    if (strict)
        after = ordered(fh, path, after, MPI_LONG, rank, size, strict);

    /* A long that does not fit in external32's 4 bytes. */
    MPI_File_set_view(fh, after + 4 * rank, MPI_LONG, MPI_LONG, "external32", MPI_INFO_NULL);
    long big = 1L << 40;
    rc = MPI_File_write_at(fh, 0, &big, 1, MPI_LONG, &st);
    CHECK(!strict || rc != MPI_SUCCESS, "a long of 2^40 was written in 4 bytes");

    /* "internal" is accepted and reported. */
    rc = MPI_File_set_view(fh, 0, MPI_INT, MPI_INT, "internal", MPI_INFO_NULL);
    CHECK(rc == MPI_SUCCESS, "set_view internal: %d", rc);
    MPI_File_get_view(fh, &disp, &et, &ft, rep);
    CHECK(!strict || strcmp(rep, "internal") == 0, "get_view datarep %s", rep);
    MPI_File_close(&fh);

    rc = MPI_Register_datarep("external32", NULL, NULL, wide_extent, NULL);
    if (strict)
        CHECK_CLASS(rc, MPI_ERR_DUP_DATAREP, "registering external32");

    MPI_Barrier(MPI_COMM_WORLD);
    if (user) {
        snprintf(path, sizeof path, "%s/wide", dir);
        user_representation(path, rank, size);
    }

    MPI_Type_free(&ft_int);
    MPI_Type_free(&ft_long);
    MPI_Type_free(&ft_double);
    MPI_Type_free(&every_second);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        snprintf(path, sizeof path, "%s/e32", dir);
        unlink(path);
        rmdir(dir);
    }
    finish();
    return 0;
}
