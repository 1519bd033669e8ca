/* MPI I/O (MPI 4.1 chapter 14): each rank writes a strided pattern through a vector filetype
 * view and every rank reads the whole file back through another view (and into a strided
 * memory type); write_ordered/read_ordered and write_shared; individual file pointers and
 * seeks; nonblocking reads and writes; sizes, atomic mode, split and nonblocking collectives,
 * the file's group, info and a user error handler; MPI_MODE_DELETE_ON_CLOSE; and the error
 * classes of a missing file, a bad access mode, an exclusive create of an existing file, a
 * write to a read-only file and a read from a write-only one (files return errors by default). Files live in a fresh directory under /tmp,
 * removed at the end. Any number of processes. */
#include "mtest.h"
#include <unistd.h>

#define BLK 3  /* ints per block */
#define NBLK 4 /* blocks per filetype element */
#define TILES 2

static int handler_calls, handler_code;

static void count_calls(MPI_File *fh, int *code, ...)
{
    (void)fh;
    handler_calls++;
    handler_code = *code;
}

static int value(int rank, int i)
{
    return rank * 1000 + i;
}

int main(int argc, char **argv)
{
    int rank, size, rc;
    char dir[64] = "", path[128], other[128];
    MPI_File fh;
    MPI_Status st;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    if (rank == 0) {
        strcpy(dir, "/tmp/ferry-fileio-XXXXXX");
        if (!mkdtemp(dir)) {
            perror("mkdtemp");
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
    MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
    snprintf(path, sizeof path, "%s/strided", dir);
    snprintf(other, sizeof other, "%s/ordered", dir);

    /* ---- a strided pattern through a vector filetype ---- */
    int n = TILES * NBLK * BLK;
    int *mine = malloc(n * sizeof(int));
    for (int i = 0; i < n; i++)
        mine[i] = value(rank, i);
    MPI_Datatype vec, filetype;
    MPI_Type_vector(NBLK, BLK, BLK * size, MPI_INT, &vec);
    MPI_Type_create_resized(vec, 0, (MPI_Aint)NBLK * BLK * size * sizeof(int), &filetype);
    MPI_Type_commit(&filetype);
    rc = MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh);
    CHECK(rc == MPI_SUCCESS, "open %s: rc %d", path, rc);
    rc = MPI_File_set_view(fh, (MPI_Offset)rank * BLK * sizeof(int), MPI_INT, filetype, "native",
                           MPI_INFO_NULL);
    CHECK(rc == MPI_SUCCESS, "set_view: rc %d", rc);
    {
        MPI_Offset disp;
        MPI_Datatype et, ft;
        char rep[MPI_MAX_DATAREP_STRING];
        MPI_File_get_view(fh, &disp, &et, &ft, rep);
        CHECK(disp == (MPI_Offset)rank * BLK * (int)sizeof(int), "get_view disp %lld", (long long)disp);
        CHECK(et == MPI_INT, "get_view etype");
        CHECK(strcmp(rep, "native") == 0, "get_view datarep %s", rep);
        if (ft != MPI_INT)
            MPI_Type_free(&ft);
        /* Etype BLK (the first int of the second block) is BLK ints of every rank further on. */
        MPI_Offset byte;
        MPI_File_get_byte_offset(fh, BLK, &byte);
        CHECK(byte == disp + (MPI_Offset)BLK * size * sizeof(int), "byte offset %lld", (long long)byte);
    }
    /* Half with an individual pointer, half collectively. */
    rc = MPI_File_write(fh, mine, n / 2, MPI_INT, &st);
    CHECK(rc == MPI_SUCCESS, "write: rc %d", rc);
    {
        int c = -1;
        MPI_Get_count(&st, MPI_INT, &c);
        CHECK(c == n / 2, "write count %d", c);
        MPI_Offset pos;
        MPI_File_get_position(fh, &pos);
        CHECK(pos == n / 2, "position %lld after writing %d ints", (long long)pos, n / 2);
    }
    rc = MPI_File_write_all(fh, mine + n / 2, n - n / 2, MPI_INT, &st);
    CHECK(rc == MPI_SUCCESS, "write_all: rc %d", rc);
    MPI_File_sync(fh);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_File_sync(fh);
    {
        MPI_Offset sz;
        MPI_File_get_size(fh, &sz);
        CHECK(sz == (MPI_Offset)n * size * sizeof(int), "size %lld", (long long)sz);
    }
    /* Read back through a plain view: every int of every rank. */
    MPI_File_set_view(fh, 0, MPI_INT, MPI_INT, "native", MPI_INFO_NULL);
    int total = n * size;
    int *all = malloc(total * sizeof(int));
    for (int i = 0; i < total; i++)
        all[i] = -1;
    rc = MPI_File_read_at_all(fh, 0, all, total, MPI_INT, &st);
    CHECK(rc == MPI_SUCCESS, "read_at_all: rc %d", rc);
    {
        int c = -1;
        MPI_Get_count(&st, MPI_INT, &c);
        CHECK(c == total, "read count %d of %d", c, total);
    }
    int bad = 0;
    for (int p = 0; p < total; p++) {
        int b = p / BLK, owner = b % size, i = (b / size) * BLK + p % BLK;
        if (all[p] != value(owner, i) && bad++ < 5)
            CHECK(0, "int %d is %d, expected %d", p, all[p], value(owner, i));
    }
    /* Into a strided memory type: every second int of a buffer. */
    {
        MPI_Datatype every2;
        MPI_Type_vector(total, 1, 2, MPI_INT, &every2);
        MPI_Type_commit(&every2);
        int *spread = malloc(2 * total * sizeof(int));
        for (int i = 0; i < 2 * total; i++)
            spread[i] = -7;
        rc = MPI_File_read_at(fh, 0, spread, 1, every2, &st);
        CHECK(rc == MPI_SUCCESS, "read_at into a vector: rc %d", rc);
        for (int i = 0; i < total; i++) {
            if ((spread[2 * i] != all[i] || spread[2 * i + 1] != -7) && bad++ < 5)
                CHECK(0, "strided read: int %d is %d/%d", i, spread[2 * i], spread[2 * i + 1]);
        }
        free(spread);
        MPI_Type_free(&every2);
    }
    /* Reading past the end gives what is there. */
    {
        int tail[4] = {-1, -1, -1, -1}, c = -1;
        MPI_File_read_at(fh, total - 2, tail, 4, MPI_INT, &st);
        MPI_Get_count(&st, MPI_INT, &c);
        CHECK(c == 2, "read at the end: count %d, expected 2", c);
        CHECK(tail[0] == all[total - 2] && tail[1] == all[total - 1] && tail[2] == -1, "tail data");
    }
    /* Individual pointer: seek and read. */
    {
        int x = -1;
        MPI_File_seek(fh, 5, MPI_SEEK_SET);
        MPI_File_seek(fh, 2, MPI_SEEK_CUR);
        MPI_File_read(fh, &x, 1, MPI_INT, &st);
        CHECK(x == all[7], "read after seeks: %d, expected %d", x, all[7]);
        MPI_File_seek(fh, -1, MPI_SEEK_END);
        MPI_File_read(fh, &x, 1, MPI_INT, &st);
        CHECK(x == all[total - 1], "read at SEEK_END-1: %d", x);
        MPI_Offset pos;
        MPI_File_get_position(fh, &pos);
        CHECK(pos == total, "position %lld at the end", (long long)pos);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    /* Nonblocking: each rank rewrites its own int at offset total + rank, then reads it. */
    {
        MPI_Request rq;
        int w = value(rank, 99), r = -1, c = -1;
        MPI_File_iwrite_at(fh, total + rank, &w, 1, MPI_INT, &rq);
        MPI_Wait(&rq, &st);
        MPI_File_iread_at(fh, total + rank, &r, 1, MPI_INT, &rq);
        MPI_Wait(&rq, &st);
        MPI_Get_count(&st, MPI_INT, &c);
        CHECK(r == w && c == 1, "iread_at got %d (count %d), expected %d", r, c, w);
    }
    rc = MPI_File_close(&fh);
    CHECK(rc == MPI_SUCCESS && fh == MPI_FILE_NULL, "close: rc %d", rc);
    free(all);
    free(mine);
    MPI_Type_free(&vec);
    MPI_Type_free(&filetype);

    /* ---- ordered and shared-pointer access ---- */
    rc = MPI_File_open(MPI_COMM_WORLD, other, MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh);
    CHECK(rc == MPI_SUCCESS, "open %s: rc %d", other, rc);
    char text[64];
    memset(text, 'a' + rank % 26, sizeof text);
    int len = rank % 5 + 1, sum = 0, before = 0;
    for (int r = 0; r < size; r++) {
        if (r < rank)
            before += r % 5 + 1;
        sum += r % 5 + 1;
    }
    rc = MPI_File_write_ordered(fh, text, len, MPI_CHAR, &st);
    CHECK(rc == MPI_SUCCESS, "write_ordered: rc %d", rc);
    MPI_Barrier(MPI_COMM_WORLD); /* the last rank may move the pointer after the others return */
    if (rank == 0) { /* MPICH 4.0.2 reports 0 on the other ranks here */
        MPI_Offset sh;
        MPI_File_get_position_shared(fh, &sh);
        CHECK(sh == sum, "shared position %lld after write_ordered, expected %d", (long long)sh, sum);
    }
    MPI_File_seek_shared(fh, 0, MPI_SEEK_SET);
    char back[64];
    memset(back, 0, sizeof back);
    rc = MPI_File_read_ordered(fh, back, len, MPI_CHAR, &st);
    CHECK(rc == MPI_SUCCESS, "read_ordered: rc %d", rc);
    CHECK(memcmp(back, text, len) == 0, "read_ordered got \"%.*s\"", len, back);
    {
        char *whole = calloc(sum + 1, 1);
        MPI_File_read_at(fh, 0, whole, sum, MPI_CHAR, &st);
        for (int i = 0; i < len; i++)
            CHECK(whole[before + i] == 'a' + rank % 26, "ordered byte %d is %c", before + i, whole[before + i]);
        free(whole);
    }
    /* write_shared: one int per rank somewhere after the ordered part. */
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_File_set_view(fh, 0, MPI_INT, MPI_INT, "native", MPI_INFO_NULL); /* shared pointer: 0 */
    MPI_File_seek_shared(fh, 64, MPI_SEEK_SET);
    rc = MPI_File_write_shared(fh, &rank, 1, MPI_INT, &st);
    CHECK(rc == MPI_SUCCESS, "write_shared: rc %d", rc);
    MPI_File_sync(fh);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_File_sync(fh);
    {
        int *seen = calloc(size, sizeof(int)), *got = malloc(size * sizeof(int));
        MPI_File_read_at(fh, 64, got, size, MPI_INT, &st);
        for (int i = 0; i < size; i++)
            if (got[i] >= 0 && got[i] < size)
                seen[got[i]]++;
        for (int i = 0; i < size; i++)
            CHECK(seen[i] == 1, "rank %d's int appears %d times", i, seen[i]);
        free(seen);
        free(got);
        MPI_Offset sh;
        MPI_File_get_position_shared(fh, &sh);
        CHECK(sh == 64 + size, "shared position %lld", (long long)sh);
    }
    MPI_File_close(&fh);

    /* ---- sizes, atomicity, split and nonblocking collectives, group, info, handlers ---- */
    char misc[128];
    snprintf(misc, sizeof misc, "%s/misc", dir);
    rc = MPI_File_open(MPI_COMM_WORLD, misc, MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh);
    CHECK(rc == MPI_SUCCESS, "open %s: rc %d", misc, rc);
    {
        /* Each size change is collective; the barriers keep one rank's next change from
         * overtaking another's query. */
        MPI_Offset sz = -1;
        MPI_File_set_size(fh, 100);
        MPI_File_get_size(fh, &sz);
        CHECK(sz == 100, "size %lld after set_size(100)", (long long)sz);
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_File_preallocate(fh, 50);
        MPI_File_get_size(fh, &sz);
        CHECK(sz == 100, "size %lld after preallocate(50)", (long long)sz);
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_File_preallocate(fh, 200);
        MPI_File_get_size(fh, &sz);
        CHECK(sz == 200, "size %lld after preallocate(200)", (long long)sz);
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_File_set_size(fh, 0);
        MPI_File_get_size(fh, &sz);
        CHECK(sz == 0, "size %lld after set_size(0)", (long long)sz);
        MPI_Barrier(MPI_COMM_WORLD);
    }
    {
        int flag = -1, v = value(rank, 5), r = -1, c = -1;
        MPI_File_set_atomicity(fh, 1);
        MPI_File_get_atomicity(fh, &flag);
        CHECK(flag == 1, "atomicity %d", flag);
        MPI_File_write_at_all_begin(fh, (MPI_Offset)rank * sizeof(int), &v, 1, MPI_INT);
        MPI_File_write_at_all_end(fh, &v, &st);
        MPI_Get_count(&st, MPI_INT, &c);
        CHECK(c == 1, "write_at_all_end count %d", c);
        MPI_File_set_view(fh, 0, MPI_INT, MPI_INT, "native", MPI_INFO_NULL);
        MPI_File_seek(fh, rank, MPI_SEEK_SET);
        MPI_File_read_all_begin(fh, &r, 1, MPI_INT);
        MPI_File_read_all_end(fh, &r, &st);
        CHECK(r == v, "read_all_end got %d, expected %d", r, v);
        MPI_Request rq;
        MPI_File_iread_at_all(fh, (rank + 1) % size, &r, 1, MPI_INT, &rq);
        MPI_Wait(&rq, &st);
        CHECK(r == value((rank + 1) % size, 5), "iread_at_all got %d", r);
        MPI_File_set_atomicity(fh, 0);
        MPI_File_get_atomicity(fh, &flag);
        CHECK(flag == 0, "atomicity %d", flag);
        MPI_Aint ext = -1;
        MPI_File_get_type_extent(fh, MPI_INT, &ext);
        CHECK(ext == sizeof(int), "type extent %ld", (long)ext);
    }
    {
        MPI_Group g, w;
        int cmp = -1;
        MPI_File_get_group(fh, &g);
        MPI_Comm_group(MPI_COMM_WORLD, &w);
        MPI_Group_compare(g, w, &cmp);
        CHECK(cmp == MPI_IDENT, "file group compares %d", cmp);
        MPI_Group_free(&g);
        MPI_Group_free(&w);
        MPI_Info info, used;
        MPI_Info_create(&info);
        MPI_Info_set(info, "access_style", "read_once");
        rc = MPI_File_set_info(fh, info);
        CHECK(rc == MPI_SUCCESS, "set_info: rc %d", rc);
        rc = MPI_File_get_info(fh, &used);
        CHECK(rc == MPI_SUCCESS && used != MPI_INFO_NULL, "get_info: rc %d", rc);
        MPI_Info_free(&used);
        MPI_Info_free(&info);
    }
    {
        MPI_Errhandler eh, got;
        MPI_File_get_errhandler(fh, &got);
        CHECK(got == MPI_ERRORS_RETURN, "a file's default error handler is not MPI_ERRORS_RETURN");
        MPI_File_create_errhandler(count_calls, &eh);
        MPI_File_set_errhandler(fh, eh);
        MPI_Errhandler_free(&eh);
        MPI_File_call_errhandler(fh, MPI_ERR_OTHER);
        CHECK(handler_calls == 1 && handler_code == MPI_ERR_OTHER, "handler called %d times, code %d",
              handler_calls, handler_code);
    }
    MPI_File_close(&fh);

    /* ---- errors: files return them by default ---- */
    rc = MPI_File_open(MPI_COMM_WORLD, path, MPI_MODE_CREATE | MPI_MODE_EXCL | MPI_MODE_RDWR,
                       MPI_INFO_NULL, &fh);
    CHECK_CLASS(rc, MPI_ERR_FILE_EXISTS, "collective EXCL open of an existing file");
    if (rank == 0) {
        char missing[160];
        snprintf(missing, sizeof missing, "%s/missing", dir);
        rc = MPI_File_open(MPI_COMM_SELF, missing, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh);
        CHECK_CLASS(rc, MPI_ERR_NO_SUCH_FILE, "open of a missing file");
        rc = MPI_File_open(MPI_COMM_SELF, path, MPI_MODE_RDONLY | MPI_MODE_CREATE, MPI_INFO_NULL, &fh);
        CHECK_CLASS(rc, MPI_ERR_AMODE, "RDONLY|CREATE");
        rc = MPI_File_open(MPI_COMM_SELF, path, MPI_MODE_CREATE | MPI_MODE_EXCL | MPI_MODE_WRONLY,
                           MPI_INFO_NULL, &fh);
        CHECK_CLASS(rc, MPI_ERR_FILE_EXISTS, "EXCL on an existing file");
        rc = MPI_File_delete(missing, MPI_INFO_NULL);
        CHECK_CLASS(rc, MPI_ERR_NO_SUCH_FILE, "delete of a missing file");
        rc = MPI_File_open(MPI_COMM_SELF, path, MPI_MODE_RDONLY, MPI_INFO_NULL, &fh);
        CHECK(rc == MPI_SUCCESS, "open read-only: rc %d", rc);
        int amode = 0;
        MPI_File_get_amode(fh, &amode);
        CHECK(amode == MPI_MODE_RDONLY, "amode %d", amode);
        rc = MPI_File_write_at(fh, 0, &rank, 1, MPI_INT, &st);
        CHECK_CLASS(rc, MPI_ERR_READ_ONLY, "write to a read-only file");
        MPI_File_close(&fh);
        rc = MPI_File_open(MPI_COMM_SELF, misc, MPI_MODE_WRONLY, MPI_INFO_NULL, &fh);
        CHECK(rc == MPI_SUCCESS, "open write-only: rc %d", rc);
        int x;
        rc = MPI_File_read_at(fh, 0, &x, 1, MPI_INT, &st);
        CHECK_CLASS(rc, MPI_ERR_ACCESS, "read from a write-only file");
        MPI_File_close(&fh);
        /* DELETE_ON_CLOSE */
        char temp[160];
        snprintf(temp, sizeof temp, "%s/temp", dir);
        rc = MPI_File_open(MPI_COMM_SELF, temp, MPI_MODE_CREATE | MPI_MODE_WRONLY | MPI_MODE_DELETE_ON_CLOSE,
                           MPI_INFO_NULL, &fh);
        CHECK(rc == MPI_SUCCESS, "open DELETE_ON_CLOSE: rc %d", rc);
        MPI_File_write(fh, "x", 1, MPI_CHAR, &st);
        MPI_File_close(&fh);
        CHECK(access(temp, F_OK) != 0, "%s is still there after close", temp);
    }

    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        MPI_File_delete(path, MPI_INFO_NULL);
        MPI_File_delete(other, MPI_INFO_NULL);
        MPI_File_delete(misc, MPI_INFO_NULL);
        CHECK(rmdir(dir) == 0, "rmdir %s: something was left in it", dir);
    }
    return finish();
}
