/* MPI_T events (MPI 4.1 §15.3.8) as ferry raises them, on 2 processes.
 *
 * Lists the event types and the source (names found again by MPI_T_event_get_index, element
 * datatypes and displacements, enumerations, categories), checks the error classes (before
 * MPI_T_init_thread, bad indices, names, handles, an instance read outside its callback), then
 * provokes and checks each event one host can give:
 *  - ferry_path_change: registered before MPI_Init, one per rank at the end of MPI_Init, from
 *    "none" to "self" for this rank and to the transport named by argv[1] ("shm" or "tcp":
 *    "direct") for the other;
 *  - ferry_unexpected_message: rank 1 sends before rank 0 posts the receive, a barrier between;
 *    the callback of the least restrictive safety level of four runs, told
 *    MPI_T_CB_REQUIRE_NONE, and may call MPI;
 *  - ferry_rendezvous_start: a 1 MiB send, on the sender, at the end of MPI_Send;
 *  - ferry_collective_algorithm: an allreduce of 1000 doubles;
 *  - dropped events: 2000 messages arrive unexpected within two MPI_Barrier calls of rank 0,
 *    far more than the 256 events ferry queues between two calls' ends: the dropped handler is
 *    told how many were lost, and those plus those delivered account for all 2000;
 *  - MPI_T_event_handle_free: the free callback runs at once, or, for a registration its own
 *    callback frees, after that callback has returned; the handle is then invalid.
 * Element values are read with MPI_T_event_read and checked against MPI_T_event_copy at the
 * displacements; timestamps are ordered and not past the source's time now. */
#include <mpi.h>
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

#define STR_SZ 1024
#define MAX_ELEMENTS 8
#define MAX_TYPES 64
#define MAX_SEEN 4096

enum { PATH, UNEXPECTED, RENDEZVOUS, COLLECTIVE, RAIL, NAMED };
static const char *names[NAMED] = {"ferry_path_change", "ferry_unexpected_message",
                                   "ferry_rendezvous_start", "ferry_collective_algorithm",
                                   "ferry_rail_failover"};
static int index_of[NAMED];

/* What MPI_T_event_get_info says of each type. */
static int num_elements[MAX_TYPES];
static MPI_Datatype types[MAX_TYPES][MAX_ELEMENTS];
static MPI_Aint displs[MAX_TYPES][MAX_ELEMENTS];
static MPI_T_enum enums[MAX_TYPES];

/* Every event a callback saw. */
struct seen {
    int type;
    long long element[MAX_ELEMENTS];
    MPI_Count time;
};
static struct seen seen[MAX_SEEN];
static int nseen = 0;

/* What a callback's user data points at. */
struct listener {
    int type;
    int level;
    int calls;
};

static long long dropped_count = 0;
static int dropped_calls = 0;

static long long element_value(int type, int i, const char *at)
{
    if (types[type][i] == MPI_INT) {
        int v;
        memcpy(&v, at, sizeof v);
        return v;
    }
    if (types[type][i] == MPI_COUNT) {
        MPI_Count v;
        memcpy(&v, at, sizeof v);
        return (long long)v;
    }
    CHECK(0, "element %d of event type %d has an unexpected datatype", i, type);
    return -1;
}

static void on_event(MPI_T_event_instance event, MPI_T_event_registration reg,
                     MPI_T_cb_safety safety, void *user_data)
{
    struct listener *l = user_data;
    l->calls++;
    CHECK(safety == MPI_T_CB_REQUIRE_NONE, "callback told safety %d", (int)safety);
    if (nseen == MAX_SEEN)
        return;
    struct seen *s = &seen[nseen++];
    s->type = l->type;
    char copy[256];
    memset(copy, 0, sizeof copy);
    CHECK(MPI_T_event_copy(event, copy) == MPI_SUCCESS, "event_copy");
    for (int i = 0; i < num_elements[l->type]; i++) {
        char buf[16];
        CHECK(MPI_T_event_read(event, i, buf) == MPI_SUCCESS, "event_read %d", i);
        s->element[i] = element_value(l->type, i, buf);
        CHECK(s->element[i] == element_value(l->type, i, copy + displs[l->type][i]),
              "element %d: read %lld, copied %lld", i, s->element[i],
              element_value(l->type, i, copy + displs[l->type][i]));
    }
    char buf[16];
    CHECK(MPI_T_event_read(event, num_elements[l->type], buf) == MPI_T_ERR_INVALID_INDEX,
          "event_read past the last element");
    int source = -1;
    CHECK(MPI_T_event_get_source(event, &source) == MPI_SUCCESS && source == 0,
          "event_get_source: %d", source);
    CHECK(MPI_T_event_get_timestamp(event, &s->time) == MPI_SUCCESS, "event_get_timestamp");
    /* MPI_T_CB_REQUIRE_NONE: any MPI call is allowed. */
    int rank = -1;
    CHECK(MPI_Initialized(&rank) == MPI_SUCCESS, "MPI_Initialized inside a callback");
    (void)reg;
}

static void on_dropped(MPI_Count count, MPI_T_event_registration reg, int source_index,
                       MPI_T_cb_safety safety, void *user_data)
{
    dropped_count += count;
    dropped_calls++;
    CHECK(source_index == 0 && safety == MPI_T_CB_REQUIRE_NONE, "dropped handler: %d %d",
          source_index, (int)safety);
    (void)reg;
    (void)user_data;
}

static int freed_calls = 0;
static MPI_T_event_registration freed_reg;

static void on_free(MPI_T_event_registration reg, MPI_T_cb_safety safety, void *user_data)
{
    freed_calls++;
    freed_reg = reg;
    CHECK(user_data == &freed_calls, "free callback's user data");
    CHECK(safety == MPI_T_CB_REQUIRE_NONE, "free callback told safety %d", (int)safety);
}

/* A registration whose callback frees it: the free callback must come after. */
static MPI_T_event_registration self_freeing;
static int in_self_freeing = 0, self_freeing_calls = 0, self_freed_after = 0;

static void on_self_freed(MPI_T_event_registration reg, MPI_T_cb_safety safety, void *user_data)
{
    self_freed_after += !in_self_freeing;
    (void)reg;
    (void)safety;
    (void)user_data;
}

static void frees_itself(MPI_T_event_instance event, MPI_T_event_registration reg,
                         MPI_T_cb_safety safety, void *user_data)
{
    in_self_freeing = 1;
    self_freeing_calls++;
    CHECK(MPI_T_event_handle_free(reg, NULL, on_self_freed) == MPI_SUCCESS,
          "handle_free inside its callback");
    CHECK(self_freed_after == 0, "the free callback ran while a callback of it ran");
    in_self_freeing = 0;
    (void)event;
    (void)safety;
    (void)user_data;
}

static int enum_value(MPI_T_enum e, const char *item)
{
    int num = 0;
    CHECK(MPI_T_enum_get_info(e, &num, NULL, NULL) == MPI_SUCCESS, "enum_get_info");
    for (int j = 0; j < num; j++) {
        int value, len = STR_SZ;
        char name[STR_SZ];
        if (MPI_T_enum_get_item(e, j, &value, name, &len) == MPI_SUCCESS && !strcmp(name, item))
            return value;
    }
    CHECK(0, "no enumeration item %s", item);
    return -1;
}

static void list_types(void)
{
    int nev = -1;
    CHECK(MPI_T_event_get_num(&nev) == MPI_SUCCESS && nev >= NAMED && nev <= MAX_TYPES,
          "event_get_num: %d", nev);
    for (int i = 0; i < nev && i < MAX_TYPES; i++) {
        char name[STR_SZ], desc[STR_SZ];
        int name_len = STR_SZ, desc_len = STR_SZ, verbosity = -1, bind = -1, back = -1;
        MPI_Info info = MPI_INFO_ENV;
        num_elements[i] = MAX_ELEMENTS;
        CHECK(MPI_T_event_get_info(i, name, &name_len, &verbosity, types[i], displs[i],
                                   &num_elements[i], &enums[i], &info, desc, &desc_len,
                                   &bind) == MPI_SUCCESS, "event_get_info %d", i);
        CHECK(name_len == (int)strlen(name) + 1 && desc_len == (int)strlen(desc) + 1,
              "string lengths of %s", name);
        CHECK(num_elements[i] >= 1 && num_elements[i] <= MAX_ELEMENTS, "%s: %d elements",
              name, num_elements[i]);
        CHECK(bind == MPI_T_BIND_NO_OBJECT, "%s binds to %d", name, bind);
        CHECK(info == MPI_INFO_NULL, "%s: hints", name);
        CHECK(verbosity >= MPI_T_VERBOSITY_USER_BASIC && verbosity <= MPI_T_VERBOSITY_MPIDEV_ALL,
              "%s: verbosity %d", name, verbosity);
        for (int j = 1; j < num_elements[i]; j++)
            CHECK(displs[i][j] > displs[i][j - 1], "%s: displacement %d", name, j);
        CHECK(MPI_T_event_get_index(name, &back) == MPI_SUCCESS && back == i,
              "event_get_index(%s) = %d", name, back);
        /* NULL arrays and a short num_elements: only the count comes back. */
        int n = 0;
        CHECK(MPI_T_event_get_info(i, NULL, NULL, NULL, NULL, NULL, &n, NULL, NULL, NULL, NULL,
                                   NULL) == MPI_SUCCESS && n == num_elements[i],
              "event_get_info with NULL arguments");
    }
    for (int k = 0; k < NAMED; k++) {
        index_of[k] = -1;
        CHECK(MPI_T_event_get_index(names[k], &index_of[k]) == MPI_SUCCESS, "no %s", names[k]);
    }
    CHECK(enums[index_of[PATH]] != MPI_T_ENUM_NULL, "ferry_path_change has no enumeration");

    /* Every event type is in one category. */
    int ncat = 0, in_categories = 0;
    MPI_T_category_get_num(&ncat);
    for (int c = 0; c < ncat; c++) {
        int n = -1, list[MAX_TYPES];
        CHECK(MPI_T_category_get_num_events(c, &n) == MPI_SUCCESS && n >= 0, "category %d", c);
        CHECK(MPI_T_category_get_events(c, MAX_TYPES, list) == MPI_SUCCESS, "category %d", c);
        for (int j = 0; j < n && j < MAX_TYPES; j++)
            CHECK(list[j] >= 0 && list[j] < nev, "category %d holds event %d", c, list[j]);
        in_categories += n;
    }
    CHECK(in_categories == nev, "%d event types in categories of %d", in_categories, nev);

    /* The source. */
    int nsrc = -1, ordering = -1, len = STR_SZ, dlen = STR_SZ;
    char name[STR_SZ], desc[STR_SZ];
    MPI_Count ticks = 0, max_ticks = 0, t0 = -1, t1 = -1;
    MPI_Info info = MPI_INFO_ENV;
    CHECK(MPI_T_source_get_num(&nsrc) == MPI_SUCCESS && nsrc == 1, "source_get_num: %d", nsrc);
    CHECK(MPI_T_source_get_info(0, name, &len, desc, &dlen, &ordering, &ticks, &max_ticks,
                                &info) == MPI_SUCCESS, "source_get_info");
    CHECK(ordering == MPI_T_SOURCE_ORDERED && ticks > 0 && max_ticks > 0 && len > 1,
          "source %s: ordering %d, %lld ticks/s", name, ordering, (long long)ticks);
    CHECK(MPI_T_source_get_timestamp(0, &t0) == MPI_SUCCESS &&
          MPI_T_source_get_timestamp(0, &t1) == MPI_SUCCESS && t0 >= 0 && t1 >= t0,
          "source timestamps %lld then %lld", (long long)t0, (long long)t1);
}

static void errors(void)
{
    int nev = 0, index;
    MPI_T_event_get_num(&nev);
    char name[STR_SZ];
    int len = STR_SZ, n = 0;
    CHECK(MPI_T_event_get_info(nev, name, &len, NULL, NULL, NULL, &n, NULL, NULL, NULL, NULL,
                               NULL) == MPI_T_ERR_INVALID_INDEX, "event_get_info past the end");
    CHECK(MPI_T_event_get_info(-1, name, &len, NULL, NULL, NULL, &n, NULL, NULL, NULL, NULL,
                               NULL) == MPI_T_ERR_INVALID_INDEX, "event_get_info(-1)");
    CHECK(MPI_T_event_get_index("no such event", &index) == MPI_T_ERR_INVALID_NAME,
          "event_get_index of an unknown name");
    MPI_T_event_registration reg;
    CHECK(MPI_T_event_handle_alloc(nev, NULL, MPI_INFO_NULL, &reg) == MPI_T_ERR_INVALID_INDEX,
          "event_handle_alloc past the end");
    CHECK(MPI_T_source_get_info(1, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL) ==
          MPI_T_ERR_INVALID_INDEX, "source_get_info(1)");
    MPI_Count t;
    CHECK(MPI_T_source_get_timestamp(1, &t) == MPI_T_ERR_INVALID_INDEX,
          "source_get_timestamp(1)");
    CHECK(MPI_T_event_handle_free((MPI_T_event_registration)0, NULL, NULL) ==
          MPI_T_ERR_INVALID_HANDLE, "handle_free of the null registration");
    CHECK(MPI_T_event_set_dropped_handler((MPI_T_event_registration)0, on_dropped) ==
          MPI_T_ERR_INVALID_HANDLE, "set_dropped_handler of the null registration");
    CHECK(MPI_T_event_read((MPI_T_event_instance)0, 0, name) == MPI_T_ERR_INVALID_HANDLE,
          "event_read outside a callback");
    CHECK(MPI_T_event_get_timestamp((MPI_T_event_instance)0, &t) == MPI_T_ERR_INVALID_HANDLE,
          "event_get_timestamp outside a callback");
    /* A bad safety level. */
    CHECK(MPI_T_event_handle_alloc(0, NULL, MPI_INFO_NULL, &reg) == MPI_SUCCESS, "alloc");
    CHECK(MPI_T_event_register_callback(reg, (MPI_T_cb_safety)7, MPI_INFO_NULL, NULL,
                                        on_event) == MPI_T_ERR_INVALID, "safety level 7");
    MPI_Info used = MPI_INFO_NULL;
    CHECK(MPI_T_event_handle_get_info(reg, &used) == MPI_SUCCESS && used != MPI_INFO_NULL,
          "handle_get_info");
    if (used != MPI_INFO_NULL)
        MPI_Info_free(&used);
    CHECK(MPI_T_event_callback_get_info(reg, MPI_T_CB_REQUIRE_THREAD_SAFE, &used) ==
          MPI_SUCCESS, "callback_get_info");
    if (used != MPI_INFO_NULL)
        MPI_Info_free(&used);
    CHECK(MPI_T_event_handle_set_info(reg, MPI_INFO_NULL) == MPI_SUCCESS, "handle_set_info");
    CHECK(MPI_T_event_handle_free(reg, &freed_calls, on_free) == MPI_SUCCESS, "handle_free");
    CHECK(freed_calls == 1 && freed_reg == reg, "the free callback ran %d times", freed_calls);
    CHECK(MPI_T_event_register_callback(reg, MPI_T_CB_REQUIRE_NONE, MPI_INFO_NULL, NULL,
                                        on_event) == MPI_T_ERR_INVALID_HANDLE,
          "register_callback on a freed registration");
}

static MPI_T_event_registration listen_to(int k, struct listener *l, int level)
{
    MPI_T_event_registration reg;
    l->type = index_of[k];
    l->level = level;
    l->calls = 0;
    CHECK(MPI_T_event_handle_alloc(index_of[k], NULL, MPI_INFO_NULL, &reg) == MPI_SUCCESS,
          "alloc %s", names[k]);
    CHECK(MPI_T_event_register_callback(reg, (MPI_T_cb_safety)level, MPI_INFO_NULL, l,
                                        on_event) == MPI_SUCCESS, "register on %s", names[k]);
    return reg;
}

static void unlisten(MPI_T_event_registration *reg)
{
    CHECK(MPI_T_event_handle_free(*reg, NULL, NULL) == MPI_SUCCESS, "handle_free");
}

/* The events of type k seen from `from` on whose element e is v. */
static int count_seen(int from, int k, int e, long long v)
{
    int n = 0;
    for (int i = from; i < nseen; i++)
        n += seen[i].type == index_of[k] && seen[i].element[e] == v;
    return n;
}

static struct seen *find_seen(int from, int k, int e, long long v)
{
    for (int i = from; i < nseen; i++)
        if (seen[i].type == index_of[k] && seen[i].element[e] == v)
            return &seen[i];
    return NULL;
}

int main(int argc, char **argv)
{
    const char *transport = argc > 1 ? argv[1] : "shm";
    int provided, num;
    CHECK(MPI_T_event_get_num(&num) == MPI_T_ERR_NOT_INITIALIZED, "event_get_num before init");
    CHECK(MPI_T_source_get_num(&num) == MPI_T_ERR_NOT_INITIALIZED, "source_get_num before init");
    CHECK(MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) == MPI_SUCCESS, "MPI_T_init_thread");
    list_types();

    /* Paths are set up inside MPI_Init: listen before it. */
    struct listener paths;
    MPI_T_event_registration path_reg = listen_to(PATH, &paths, MPI_T_CB_REQUIRE_NONE);
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_T_enum path_enum = enums[index_of[PATH]];
    CHECK(paths.calls == size, "%d path events for %d ranks", paths.calls, size);
    for (int r = 0; r < size; r++) {
        struct seen *p = find_seen(0, PATH, 0, r);
        const char *want = r == rank ? "self" : !strcmp(transport, "tcp") ? "direct" : "shm";
        CHECK(p && p->element[1] == enum_value(path_enum, "none") &&
              p->element[2] == enum_value(path_enum, want),
              "path to rank %d: from %lld to %lld, not %s", r, p ? p->element[1] : -1,
              p ? p->element[2] : -1, want);
    }
    unlisten(&path_reg);
    errors();

    /* An unexpected message: callbacks at every safety level, the least restrictive runs. */
    struct listener levels[4];
    int level_of[4] = {MPI_T_CB_REQUIRE_NONE, MPI_T_CB_REQUIRE_MPI_RESTRICTED,
                       MPI_T_CB_REQUIRE_THREAD_SAFE, MPI_T_CB_REQUIRE_ASYNC_SIGNAL_SAFE};
    MPI_T_event_registration unexpected = listen_to(UNEXPECTED, &levels[0], level_of[0]);
    for (int l = 1; l < 4; l++) {
        levels[l] = levels[0];
        levels[l].level = level_of[l];
        levels[l].calls = 0;
        CHECK(MPI_T_event_register_callback(unexpected, (MPI_T_cb_safety)level_of[l],
                                            MPI_INFO_NULL, &levels[l], on_event) == MPI_SUCCESS,
              "register at level %d", level_of[l]);
    }
    /* Each rank listens before the other sends: a barrier after the registration. */
    int from = nseen, data[3] = {1, 2, 3};
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 1)
        MPI_Send(data, 3, MPI_INT, 0, 4242, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        struct seen *u = find_seen(from, UNEXPECTED, 1, 4242);
        CHECK(u && u->element[0] == 1 && u->element[3] == (long long)sizeof data,
              "unexpected message: source %lld, bytes %lld", u ? u->element[0] : -1,
              u ? u->element[3] : -1);
        CHECK(levels[0].calls >= 1 && levels[1].calls + levels[2].calls + levels[3].calls == 0,
              "callbacks by level: %d %d %d %d", levels[0].calls, levels[1].calls,
              levels[2].calls, levels[3].calls);
        MPI_Recv(data, 3, MPI_INT, 1, 4242, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    /* With the NONE callback removed, the next level's runs. */
    CHECK(MPI_T_event_register_callback(unexpected, MPI_T_CB_REQUIRE_NONE, MPI_INFO_NULL, NULL,
                                        NULL) == MPI_SUCCESS, "removing a callback");
    from = nseen;
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 1)
        MPI_Send(data, 3, MPI_INT, 0, 4243, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        CHECK(find_seen(from, UNEXPECTED, 1, 4243) && levels[1].calls >= 1,
              "after removing the NONE callback: %d calls at MPI_RESTRICTED", levels[1].calls);
        MPI_Recv(data, 3, MPI_INT, 1, 4243, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }

    /* Dropped events: 2000 unexpected arrivals inside rank 0's two barriers (one of them sees
     * at least 1000, while 256 wait at most between two calls' ends). */
    CHECK(MPI_T_event_set_dropped_handler(unexpected, on_dropped) == MPI_SUCCESS,
          "set_dropped_handler");
    enum { FLOOD = 2000, QUEUED = 256 };
    from = nseen;
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 1)
        for (int i = 0; i < FLOOD; i++)
            MPI_Send(&i, 1, MPI_INT, 0, 5555, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        int got = count_seen(from, UNEXPECTED, 1, 5555);
        CHECK(dropped_calls >= 1 && dropped_count >= FLOOD - 2 * QUEUED &&
                  got + dropped_count >= FLOOD,
              "%d delivered, %lld dropped (told %d times)", got, dropped_count, dropped_calls);
        for (int i = 0; i < FLOOD; i++)
            MPI_Recv(data, 1, MPI_INT, 1, 5555, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    unlisten(&unexpected);

    /* A rendezvous: 1 MiB, seen by the sender as its MPI_Send returns. */
    struct listener rdv;
    MPI_T_event_registration rdv_reg = listen_to(RENDEZVOUS, &rdv, MPI_T_CB_REQUIRE_NONE);
    enum { BIG = 1 << 20 };
    char *big = calloc(BIG, 1);
    from = nseen;
    if (rank == 0) {
        MPI_Send(big, BIG, MPI_CHAR, 1, 77, MPI_COMM_WORLD);
        struct seen *r = find_seen(from, RENDEZVOUS, 1, 77);
        MPI_T_enum route_enum = enums[index_of[RENDEZVOUS]];
        long long route = r ? r->element[3] : -1;
        int fits = !strcmp(transport, "tcp")
                       ? route == enum_value(route_enum, "tcp")
                       : route == enum_value(route_enum, "shm_cma") ||
                             route == enum_value(route_enum, "shm_copy");
        CHECK(r && r->element[0] == 1 && r->element[2] == BIG && fits,
              "rendezvous: peer %lld, bytes %lld, route %lld", r ? r->element[0] : -1,
              r ? r->element[2] : -1, route);
    } else {
        MPI_Recv(big, BIG, MPI_CHAR, 0, 77, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    free(big);
    unlisten(&rdv_reg);

    /* A collective's algorithm; a second registration frees itself in its callback. */
    struct listener coll;
    MPI_T_event_registration coll_reg = listen_to(COLLECTIVE, &coll, MPI_T_CB_REQUIRE_NONE);
    CHECK(MPI_T_event_handle_alloc(index_of[COLLECTIVE], NULL, MPI_INFO_NULL, &self_freeing) ==
          MPI_SUCCESS, "alloc");
    CHECK(MPI_T_event_register_callback(self_freeing, MPI_T_CB_REQUIRE_THREAD_SAFE,
                                        MPI_INFO_NULL, NULL, frees_itself) == MPI_SUCCESS,
          "register");
    double in[1000], out[1000];
    for (int i = 0; i < 1000; i++)
        in[i] = i;
    from = nseen;
    MPI_Allreduce(in, out, 1000, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    struct seen *c = find_seen(from, COLLECTIVE, 3, 8000);
    int nalg = 0;
    MPI_T_enum_get_info(enums[index_of[COLLECTIVE]], &nalg, NULL, NULL);
    CHECK(c && c->element[0] == 3 && c->element[2] == size && c->element[1] >= 0 &&
              c->element[1] < nalg,
          "allreduce: collective %lld, algorithm %lld, ranks %lld", c ? c->element[0] : -1,
          c ? c->element[1] : -1, c ? c->element[2] : -1);
    CHECK(self_freeing_calls == 1 && self_freed_after == 1,
          "self-freeing registration: %d calls, free callback after: %d", self_freeing_calls,
          self_freed_after);
    CHECK(MPI_T_event_handle_free(self_freeing, NULL, NULL) == MPI_T_ERR_INVALID_HANDLE,
          "a registration freed in its callback is invalid");
    unlisten(&coll_reg);

    /* Events came in time order, none after now. */
    MPI_Count now = 0;
    MPI_T_source_get_timestamp(0, &now);
    for (int i = 1; i < nseen; i++)
        CHECK(seen[i].time >= seen[i - 1].time, "event %d before event %d", i, i - 1);
    CHECK(nseen == 0 || seen[nseen - 1].time <= now, "an event after now");

    /* Nobody listens any more: no callback runs. */
    int before = nseen;
    MPI_Allreduce(in, out, 999, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    CHECK(nseen == before, "%d events after every registration was freed", nseen - before);

    CHECK(MPI_T_finalize() == MPI_SUCCESS, "MPI_T_finalize");
    CHECK(MPI_T_event_get_num(&num) == MPI_T_ERR_NOT_INITIALIZED, "event_get_num after");
    int all = 0;
    MPI_Allreduce(&errs, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0 && all == 0)
        printf(" No Errors\n");
    MPI_Finalize();
    return all != 0;
}
