/* The tool information interface (MPI 4.1 chapter 15, MPI_T), as the standard says it behaves:
 * before MPI_T_init_thread every call is MPI_T_ERR_NOT_INITIALIZED; MPI_T works before MPI_Init
 * and after MPI_Finalize, and MPI_T_init_thread/MPI_T_finalize are counted. Lists every control
 * variable, performance variable, category and enumeration (names, the string-length rules,
 * get_index finding each name again), reads every control variable through a handle of the
 * count it gives, checks that a category's lists hold valid indices, and that a counter of
 * messages sent grows by at least the messages this rank sends (ferry's
 * ferry_p2p_messages_sent; an implementation without it skips that part), and that ferry's
 * unexpected-queue variables see messages sent before their receive is posted. Checks the error
 * classes of bad indices, names, sessions and handles, of starting a continuous variable and
 * writing a read-only one, and that there are no event types or sources beyond those counted.
 * Arguments NAME=VALUE: after MPI_Init control variable NAME must read VALUE (printed as its
 * datatype prints, enumerations as their number). Any number of processes (2 or more exchange
 * messages). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Not mtest.h's CHECK: that one asks MPI for the rank, which is wrong after MPI_Finalize. */
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

#define STR_SZ 256

static void check_string_rules(const char *what, int i, const char *name, int name_len)
{
    CHECK(name_len == (int)strlen(name) + 1, "%s %d: name length %d for \"%s\"", what, i,
          name_len, name);
}

static void list_enum(MPI_T_enum e, const char *var)
{
    int num = -1, len = STR_SZ;
    char name[STR_SZ];
    CHECK(MPI_T_enum_get_info(e, &num, name, &len) == MPI_SUCCESS, "enum of %s", var);
    CHECK(num > 0, "enum %s has %d items", name, num);
    for (int j = 0; j < num; j++) {
        int value = -1;
        char item[STR_SZ];
        len = STR_SZ;
        CHECK(MPI_T_enum_get_item(e, j, &value, item, &len) == MPI_SUCCESS, "item %d of %s", j,
              name);
        check_string_rules("enum item", j, item, len);
    }
    CHECK(MPI_T_enum_get_item(e, num, NULL, NULL, NULL) == MPI_T_ERR_INVALID_ITEM,
          "item %d of %s", num, name);
}

static void cvars(void)
{
    int num = -1;
    CHECK(MPI_T_cvar_get_num(&num) == MPI_SUCCESS && num >= 0, "cvar_get_num: %d", num);
    for (int i = 0; i < num; i++) {
        char name[STR_SZ], desc[STR_SZ];
        int name_len = STR_SZ, desc_len = STR_SZ, verbosity, bind, scope, full = 0;
        MPI_Datatype dt = MPI_DATATYPE_NULL;
        MPI_T_enum e = MPI_T_ENUM_NULL;
        CHECK(MPI_T_cvar_get_info(i, name, &name_len, &verbosity, &dt, &e, desc, &desc_len, &bind,
                                  &scope) == MPI_SUCCESS, "cvar_get_info %d", i);
        check_string_rules("cvar", i, name, name_len);
        CHECK(MPI_T_cvar_get_info(i, NULL, &full, NULL, NULL, NULL, NULL, NULL, NULL, NULL) ==
              MPI_SUCCESS && full == name_len, "cvar %d: length query gave %d", i, full);
        int index = -1;
        CHECK(MPI_T_cvar_get_index(name, &index) == MPI_SUCCESS && index == i,
              "cvar_get_index(%s) = %d", name, index);
        if (e != MPI_T_ENUM_NULL)
            list_enum(e, name);
        if (bind != MPI_T_BIND_NO_OBJECT)
            continue;
        MPI_T_cvar_handle h = MPI_T_CVAR_HANDLE_NULL;
        int count = -1;
        CHECK(MPI_T_cvar_handle_alloc(i, NULL, &h, &count) == MPI_SUCCESS && count >= 1,
              "cvar_handle_alloc %s: count %d", name, count);
        if (count < 1)
            continue;
        /* Large enough for count elements of any type a cvar may have. */
        void *buf = calloc((size_t)count, 16);
        CHECK(MPI_T_cvar_read(h, buf) == MPI_SUCCESS, "cvar_read %s", name);
        if (dt == MPI_CHAR)
            CHECK(strlen(buf) < (size_t)count, "%s: string of %zu bytes for count %d", name,
                  strlen(buf), count);
        if (scope == MPI_T_SCOPE_READONLY || scope == MPI_T_SCOPE_CONSTANT) {
            int rc = MPI_T_cvar_write(h, buf);
            CHECK(rc == MPI_T_ERR_CVAR_SET_NEVER || rc == MPI_T_ERR_CVAR_SET_NOT_NOW,
                  "writing read-only %s returned %d", name, rc);
        }
        free(buf);
        CHECK(MPI_T_cvar_handle_free(&h) == MPI_SUCCESS && h == MPI_T_CVAR_HANDLE_NULL,
              "cvar_handle_free %s", name);
    }
    CHECK(MPI_T_cvar_get_info(num, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL) ==
          MPI_T_ERR_INVALID_INDEX, "cvar_get_info past the end");
    CHECK(MPI_T_cvar_get_info(-1, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL) ==
          MPI_T_ERR_INVALID_INDEX, "cvar_get_info(-1)");
    MPI_T_cvar_handle h;
    int count;
    CHECK(MPI_T_cvar_handle_alloc(num, NULL, &h, &count) == MPI_T_ERR_INVALID_INDEX,
          "cvar_handle_alloc past the end");
    int index;
    CHECK(MPI_T_cvar_get_index("no such control variable", &index) == MPI_T_ERR_INVALID_NAME,
          "cvar_get_index of an unknown name");
}

/* Lists the performance variables; checks the errors of continuous and read-only ones. */
static void pvars(void)
{
    int num = -1;
    CHECK(MPI_T_pvar_get_num(&num) == MPI_SUCCESS && num >= 0, "pvar_get_num: %d", num);
    MPI_T_pvar_session s = MPI_T_PVAR_SESSION_NULL;
    CHECK(MPI_T_pvar_session_create(&s) == MPI_SUCCESS, "pvar_session_create");
    for (int i = 0; i < num; i++) {
        char name[STR_SZ], desc[STR_SZ];
        int name_len = STR_SZ, desc_len = STR_SZ, verbosity, cls, bind, ro, cont, atomic;
        MPI_Datatype dt;
        MPI_T_enum e;
        CHECK(MPI_T_pvar_get_info(i, name, &name_len, &verbosity, &cls, &dt, &e, desc, &desc_len,
                                  &bind, &ro, &cont, &atomic) == MPI_SUCCESS, "pvar_get_info %d",
              i);
        check_string_rules("pvar", i, name, name_len);
        int index = -1;
        CHECK(MPI_T_pvar_get_index(name, cls, &index) == MPI_SUCCESS && index == i,
              "pvar_get_index(%s) = %d", name, index);
        if (bind != MPI_T_BIND_NO_OBJECT)
            continue;
        MPI_T_pvar_handle h = MPI_T_PVAR_HANDLE_NULL;
        int count = -1;
        CHECK(MPI_T_pvar_handle_alloc(s, i, NULL, &h, &count) == MPI_SUCCESS && count >= 1,
              "pvar_handle_alloc %s: count %d", name, count);
        if (count < 1)
            continue;
        void *buf = calloc((size_t)count, 16);
        if (cont) {
            int rc = MPI_T_pvar_start(s, h);
            CHECK(rc == MPI_T_ERR_PVAR_NO_STARTSTOP, "starting continuous %s returned %d", name,
                  rc);
        } else {
            CHECK(MPI_T_pvar_start(s, h) == MPI_SUCCESS, "pvar_start %s", name);
        }
        CHECK(MPI_T_pvar_read(s, h, buf) == MPI_SUCCESS, "pvar_read %s", name);
        if (ro) {
            int rc = MPI_T_pvar_write(s, h, buf);
            CHECK(rc == MPI_T_ERR_PVAR_NO_WRITE, "writing read-only %s returned %d", name, rc);
            rc = MPI_T_pvar_reset(s, h);
            CHECK(rc == MPI_T_ERR_PVAR_NO_WRITE, "resetting read-only %s returned %d", name, rc);
        }
        if (!cont)
            CHECK(MPI_T_pvar_stop(s, h) == MPI_SUCCESS, "pvar_stop %s", name);
        free(buf);
        CHECK(MPI_T_pvar_handle_free(s, &h) == MPI_SUCCESS && h == MPI_T_PVAR_HANDLE_NULL,
              "pvar_handle_free %s", name);
    }
    /* Past the end, and -1. MPICH 4.0.2 without performance variables crashes on index num in
     * MPI_T_pvar_get_info and on any index in MPI_T_pvar_handle_alloc: those need one. */
    char name[STR_SZ], desc[STR_SZ];
    int name_len = STR_SZ, desc_len = STR_SZ, verbosity, cls, bind, ro, cont, atomic;
    MPI_Datatype dt;
    MPI_T_enum e;
    int bad[2] = {-1, num}, nbad = num > 0 ? 2 : 1;
    for (int k = 0; k < nbad; k++) {
        CHECK(MPI_T_pvar_get_info(bad[k], name, &name_len, &verbosity, &cls, &dt, &e, desc,
                                  &desc_len, &bind, &ro, &cont, &atomic) ==
              MPI_T_ERR_INVALID_INDEX, "pvar_get_info(%d)", bad[k]);
        MPI_T_pvar_handle h;
        int count;
        if (num > 0)
            CHECK(MPI_T_pvar_handle_alloc(s, bad[k], NULL, &h, &count) ==
                  MPI_T_ERR_INVALID_INDEX, "pvar_handle_alloc(%d)", bad[k]);
    }
    int index;
    CHECK(MPI_T_pvar_get_index("no such performance variable", MPI_T_PVAR_CLASS_COUNTER,
                               &index) == MPI_T_ERR_INVALID_NAME, "pvar_get_index of an unknown name");
    unsigned long long v;
    CHECK(MPI_T_pvar_read(s, MPI_T_PVAR_HANDLE_NULL, &v) == MPI_T_ERR_INVALID_HANDLE,
          "pvar_read of MPI_T_PVAR_HANDLE_NULL");
    CHECK(MPI_T_pvar_start(MPI_T_PVAR_SESSION_NULL, MPI_T_PVAR_ALL_HANDLES) ==
          MPI_T_ERR_INVALID_SESSION, "pvar_start in MPI_T_PVAR_SESSION_NULL");
    CHECK(MPI_T_pvar_session_free(&s) == MPI_SUCCESS && s == MPI_T_PVAR_SESSION_NULL,
          "pvar_session_free");
}

static void categories(void)
{
    int num = -1, ncvar = 0, npvar = 0;
    MPI_T_cvar_get_num(&ncvar);
    MPI_T_pvar_get_num(&npvar);
    CHECK(MPI_T_category_get_num(&num) == MPI_SUCCESS && num >= 0, "category_get_num: %d", num);
    for (int i = 0; i < num; i++) {
        char name[STR_SZ], desc[STR_SZ];
        int name_len = STR_SZ, desc_len = STR_SZ, nc = -1, np = -1, ncat = -1, nev = -1;
        CHECK(MPI_T_category_get_info(i, name, &name_len, desc, &desc_len, &nc, &np, &ncat) ==
              MPI_SUCCESS, "category_get_info %d", i);
        check_string_rules("category", i, name, name_len);
        int index = -1;
        CHECK(MPI_T_category_get_index(name, &index) == MPI_SUCCESS && index == i,
              "category_get_index(%s) = %d", name, index);
        int *idx = malloc(sizeof(int) * (size_t)(nc + np + ncat + 1));
        CHECK(MPI_T_category_get_cvars(i, nc, idx) == MPI_SUCCESS, "category_get_cvars %s", name);
        for (int j = 0; j < nc; j++)
            CHECK(idx[j] >= 0 && idx[j] < ncvar, "%s: cvar index %d", name, idx[j]);
        CHECK(MPI_T_category_get_pvars(i, np, idx) == MPI_SUCCESS, "category_get_pvars %s", name);
        for (int j = 0; j < np; j++)
            CHECK(idx[j] >= 0 && idx[j] < npvar, "%s: pvar index %d", name, idx[j]);
        CHECK(MPI_T_category_get_categories(i, ncat, idx) == MPI_SUCCESS,
              "category_get_categories %s", name);
        for (int j = 0; j < ncat; j++)
            CHECK(idx[j] >= 0 && idx[j] < num, "%s: category index %d", name, idx[j]);
        CHECK(MPI_T_category_get_num_events(i, &nev) == MPI_SUCCESS && nev >= 0,
              "category_get_num_events %s", name);
        free(idx);
    }
    int stamp = -1;
    CHECK(MPI_T_category_changed(&stamp) == MPI_SUCCESS, "category_changed");
    CHECK(MPI_T_category_get_info(num, NULL, NULL, NULL, NULL, NULL, NULL, NULL) ==
          MPI_T_ERR_INVALID_INDEX, "category_get_info past the end");
    int index;
    CHECK(MPI_T_category_get_index("no such category", &index) == MPI_T_ERR_INVALID_NAME,
          "category_get_index of an unknown name");
}

static void events(void)
{
    int nev = -1, nsrc = -1, index;
    CHECK(MPI_T_event_get_num(&nev) == MPI_SUCCESS && nev >= 0, "event_get_num: %d", nev);
    CHECK(MPI_T_source_get_num(&nsrc) == MPI_SUCCESS && nsrc >= 0, "source_get_num: %d", nsrc);
    char name[STR_SZ], desc[STR_SZ];
    int name_len = STR_SZ, desc_len = STR_SZ, verbosity, nelem, bind;
    MPI_Datatype types[16];
    MPI_Aint displs[16];
    MPI_T_enum e;
    MPI_Info info;
    CHECK(MPI_T_event_get_info(nev, name, &name_len, &verbosity, types, displs, &nelem, &e, &info,
                               desc, &desc_len, &bind) == MPI_T_ERR_INVALID_INDEX,
          "event_get_info past the end");
    MPI_T_event_registration r;
    CHECK(MPI_T_event_handle_alloc(nev, NULL, MPI_INFO_NULL, &r) == MPI_T_ERR_INVALID_INDEX,
          "event_handle_alloc past the end");
    CHECK(MPI_T_event_get_index("no such event", &index) == MPI_T_ERR_INVALID_NAME,
          "event_get_index of an unknown name");
    MPI_Count ts;
    CHECK(MPI_T_source_get_timestamp(nsrc, &ts) == MPI_T_ERR_INVALID_INDEX,
          "source_get_timestamp past the end");
}

/* Each argument NAME=VALUE: control variable NAME reads VALUE. */
static void check_values(int argc, char **argv)
{
    for (int a = 1; a < argc; a++) {
        char want[STR_SZ], got[STR_SZ] = "";
        snprintf(want, sizeof want, "%s", argv[a]);
        char *eq = strchr(want, '=');
        if (!eq)
            continue;
        *eq = 0;
        int index = -1, count = 0;
        MPI_Datatype dt;
        MPI_T_cvar_handle h;
        CHECK(MPI_T_cvar_get_index(want, &index) == MPI_SUCCESS, "no control variable %s", want);
        if (index < 0)
            continue;
        MPI_T_cvar_get_info(index, NULL, NULL, NULL, &dt, NULL, NULL, NULL, NULL, NULL);
        MPI_T_cvar_handle_alloc(index, NULL, &h, &count);
        char buf[STR_SZ] = "";
        if (count < 1 || count > STR_SZ || MPI_T_cvar_read(h, buf) != MPI_SUCCESS)
            CHECK(0, "cvar_read %s (count %d)", want, count);
        else if (dt == MPI_UNSIGNED_LONG)
            snprintf(got, sizeof got, "%lu", *(unsigned long *)(void *)buf);
        else if (dt == MPI_UNSIGNED)
            snprintf(got, sizeof got, "%u", *(unsigned *)(void *)buf);
        else if (dt == MPI_INT)
            snprintf(got, sizeof got, "%d", *(int *)(void *)buf);
        else if (dt == MPI_CHAR)
            snprintf(got, sizeof got, "%s", buf);
        CHECK(strcmp(got, eq + 1) == 0, "%s reads \"%s\", expected \"%s\"", want, got, eq + 1);
        MPI_T_cvar_handle_free(&h);
    }
}

/* ferry_p2p_messages_sent grows by at least the messages sent while its handle runs, and stops
 * with its handle. Returns its final value (0 without the variable). */
static unsigned long long counter_after_sends(int rank, int size)
{
    int index;
    if (MPI_T_pvar_get_index("ferry_p2p_messages_sent", MPI_T_PVAR_CLASS_COUNTER, &index) !=
        MPI_SUCCESS)
        return 0;
    MPI_T_pvar_session s;
    MPI_T_pvar_handle h;
    int count;
    unsigned long long before = 1, after = 0, later = 0;
    CHECK(MPI_T_pvar_session_create(&s) == MPI_SUCCESS, "pvar_session_create");
    CHECK(MPI_T_pvar_handle_alloc(s, index, NULL, &h, &count) == MPI_SUCCESS && count == 1,
          "pvar_handle_alloc");
    CHECK(MPI_T_pvar_read(s, h, &before) == MPI_SUCCESS && before == 0,
          "a counter not yet started reads %llu", before);
    CHECK(MPI_T_pvar_start(s, MPI_T_PVAR_ALL_HANDLES) == MPI_SUCCESS, "pvar_start all");
    const int n = 10;
    int peer = (rank + 1) % size, from = (rank + size - 1) % size, x = rank;
    for (int k = 0; k < n; k++)
        MPI_Sendrecv_replace(&x, 1, MPI_INT, peer, k, from, k, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    CHECK(MPI_T_pvar_stop(s, h) == MPI_SUCCESS, "pvar_stop");
    CHECK(MPI_T_pvar_read(s, h, &after) == MPI_SUCCESS && after >= (unsigned long long)n,
          "%d sends counted as %llu", n, after);
    MPI_Barrier(MPI_COMM_WORLD);
    CHECK(MPI_T_pvar_read(s, h, &later) == MPI_SUCCESS && later == after,
          "a stopped counter moved from %llu to %llu", after, later);
    CHECK(MPI_T_pvar_readreset(s, h, &later) == MPI_SUCCESS && later == after, "pvar_readreset");
    CHECK(MPI_T_pvar_read(s, h, &later) == MPI_SUCCESS && later == 0,
          "after a reset the counter reads %llu", later);
    unsigned long long seven = 7;
    CHECK(MPI_T_pvar_write(s, h, &seven) == MPI_SUCCESS, "pvar_write");
    CHECK(MPI_T_pvar_read(s, h, &later) == MPI_SUCCESS && later == 7, "written 7, read %llu",
          later);
    CHECK(MPI_T_pvar_session_free(&s) == MPI_SUCCESS, "pvar_session_free");
    return after;
}

/* Reads continuous ferry variable `name` (class `cls`) through a new handle of session `s`. */
static unsigned long long read_continuous(MPI_T_pvar_session s, const char *name, int cls)
{
    int index = -1, count;
    unsigned long long v = 0;
    MPI_T_pvar_handle h;
    CHECK(MPI_T_pvar_get_index(name, cls, &index) == MPI_SUCCESS, "no %s", name);
    CHECK(MPI_T_pvar_handle_alloc(s, index, NULL, &h, &count) == MPI_SUCCESS, "handle of %s",
          name);
    CHECK(MPI_T_pvar_read(s, h, &v) == MPI_SUCCESS, "pvar_read %s", name);
    MPI_T_pvar_handle_free(s, &h);
    return v;
}

/* Messages rank 0 sends to rank 1 before rank 1 receives them wait on its unexpected queue:
 * ferry_p2p_unexpected_queued counts them, ferry_p2p_unexpected_length holds them until they
 * are received, ferry_p2p_unexpected_peak remembers them. Rank 0 sends once rank 1's counter
 * runs; the token sent after the messages arrives after them (message order), so they are
 * queued once rank 1 has it. The other ranks send nothing until rank 1 is done. */
static void unexpected_queue(int rank, int size)
{
    int index;
    if (size < 2 ||
        MPI_T_pvar_get_index("ferry_p2p_unexpected_queued", MPI_T_PVAR_CLASS_COUNTER, &index) !=
        MPI_SUCCESS)
        return;
    const int n = 3;
    int x = 0;
    if (rank != 1) {
        if (rank == 0) {
            MPI_Recv(&x, 1, MPI_INT, 1, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            for (int k = 0; k < n; k++)
                MPI_Send(&k, 1, MPI_INT, 1, 5, MPI_COMM_WORLD);
            MPI_Send(&x, 1, MPI_INT, 1, 6, MPI_COMM_WORLD);
        }
        MPI_Recv(&x, 1, MPI_INT, 1, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        return;
    }
    MPI_T_pvar_session s;
    MPI_T_pvar_handle h;
    int count;
    unsigned long long queued = 0;
    CHECK(MPI_T_pvar_session_create(&s) == MPI_SUCCESS, "pvar_session_create");
    CHECK(MPI_T_pvar_handle_alloc(s, index, NULL, &h, &count) == MPI_SUCCESS, "handle");
    CHECK(MPI_T_pvar_start(s, h) == MPI_SUCCESS, "pvar_start");
    MPI_Send(&x, 1, MPI_INT, 0, 4, MPI_COMM_WORLD);
    MPI_Recv(&x, 1, MPI_INT, 0, 6, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    CHECK(MPI_T_pvar_read(s, h, &queued) == MPI_SUCCESS && queued >= (unsigned long long)n,
          "%d unexpected messages counted as %llu", n, queued);
    unsigned long long before =
        read_continuous(s, "ferry_p2p_unexpected_length", MPI_T_PVAR_CLASS_LEVEL);
    CHECK(before >= (unsigned long long)n, "unexpected queue length %llu, expected %d", before, n);
    for (int k = 0; k < n; k++) {
        MPI_Recv(&x, 1, MPI_INT, 0, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        CHECK(x == k, "message %d is %d", k, x);
    }
    unsigned long long after =
        read_continuous(s, "ferry_p2p_unexpected_length", MPI_T_PVAR_CLASS_LEVEL);
    CHECK(after + n <= before, "unexpected queue length %llu after receiving %d of %llu", after,
          n, before);
    unsigned long long peak =
        read_continuous(s, "ferry_p2p_unexpected_peak", MPI_T_PVAR_CLASS_HIGHWATERMARK);
    CHECK(peak >= (unsigned long long)n, "unexpected queue peak %llu, expected %d", peak, n);
    CHECK(MPI_T_pvar_session_free(&s) == MPI_SUCCESS, "pvar_session_free");
    for (int r = 0; r < size; r++)
        if (r != 1)
            MPI_Send(&x, 1, MPI_INT, r, 7, MPI_COMM_WORLD);
}

int main(int argc, char **argv)
{
    int num, provided = -1;
    CHECK(MPI_T_cvar_get_num(&num) == MPI_T_ERR_NOT_INITIALIZED, "cvar_get_num before init");
    CHECK(MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) == MPI_SUCCESS, "MPI_T_init_thread");
    CHECK(MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) == MPI_SUCCESS, "MPI_T_init_thread");
    CHECK(MPI_T_finalize() == MPI_SUCCESS, "MPI_T_finalize of the second init");
    /* Before MPI_Init. */
    cvars();
    categories();

    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    cvars();
    pvars();
    categories();
    events();
    check_values(argc, argv);
    unsigned long long sent = counter_after_sends(rank, size);
    unexpected_queue(rank, size);
    CHECK(MPI_T_cvar_read(MPI_T_CVAR_HANDLE_NULL, &num) == MPI_T_ERR_INVALID_HANDLE,
          "cvar_read of MPI_T_CVAR_HANDLE_NULL");
    /* MPI_T error classes are error classes: MPI_Error_class and MPI_Error_string know them. */
    int cls = -1, len = 0;
    char text[MPI_MAX_ERROR_STRING] = "";
    CHECK(MPI_Error_class(MPI_T_ERR_INVALID_HANDLE, &cls) == MPI_SUCCESS &&
          cls == MPI_T_ERR_INVALID_HANDLE, "MPI_Error_class(MPI_T_ERR_INVALID_HANDLE) = %d", cls);
    CHECK(MPI_Error_string(MPI_T_ERR_INVALID_INDEX, text, &len) == MPI_SUCCESS && len > 0,
          "MPI_Error_string(MPI_T_ERR_INVALID_INDEX)");

    int all = 0;
    MPI_Allreduce(&errs, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    int counted = errs;
    MPI_Finalize();

    /* After MPI_Finalize: still usable; the counter keeps its final total. */
    cvars();
    if (sent > 0) {
        int index, count;
        unsigned long long total = 0;
        MPI_T_pvar_session s;
        MPI_T_pvar_handle h;
        MPI_T_pvar_get_index("ferry_p2p_messages_sent", MPI_T_PVAR_CLASS_COUNTER, &index);
        CHECK(MPI_T_pvar_session_create(&s) == MPI_SUCCESS, "session after MPI_Finalize");
        CHECK(MPI_T_pvar_handle_alloc(s, index, NULL, &h, &count) == MPI_SUCCESS, "handle");
        CHECK(MPI_T_pvar_start(s, h) == MPI_SUCCESS, "start after MPI_Finalize");
        CHECK(MPI_T_pvar_read(s, h, &total) == MPI_SUCCESS && total == 0,
              "no sends after MPI_Finalize, counted %llu", total);
        MPI_T_pvar_session_free(&s);
    }
    CHECK(MPI_T_finalize() == MPI_SUCCESS, "MPI_T_finalize");
    CHECK(MPI_T_finalize() == MPI_T_ERR_NOT_INITIALIZED, "one MPI_T_finalize too many");
    CHECK(MPI_T_cvar_get_num(&num) == MPI_T_ERR_NOT_INITIALIZED, "cvar_get_num after finalize");
    /* Errors after MPI_Finalize are this rank's own: they make its exit status non-zero. */
    int total = all + errs - counted;
    if (rank == 0 && total == 0)
        printf(" No Errors\n");
    else if (rank == 0)
        printf(" Found %d errors\n", total);
    return total ? 1 : 0;
}
