/* The Fortran entry points that fortran/gen.py does not write (the calls marked @custom in
 * calls.txt): initialisation, functions, and every call that takes a Fortran procedure, which
 * C calls back through a trampoline that turns C handles into Fortran integers. Also the
 * common blocks whose addresses are MPI_BOTTOM, MPI_IN_PLACE, MPI_STATUS_IGNORE, ... */
#include "ferry_fortran.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

/* Defined here, zero-filled; the program's COMMON blocks of the same names resolve to these. */
struct ferry_f_bottom ferryfb_ __attribute__((aligned(16)));
struct ferry_f_statuses ferryfs_ __attribute__((aligned(16)));
struct ferry_f_statuses ferryf8_ __attribute__((aligned(16)));
struct ferry_f_ignores ferryfe_ __attribute__((aligned(16)));
struct ferry_f_argv ferryfa_ __attribute__((aligned(16)));

#define ALIASES(real, name)                                                                    \
    extern __typeof__(real) name##_ __attribute__((weak, alias(#real)));                       \
    extern __typeof__(real) name##_f08_ __attribute__((weak, alias(#real)));                   \
    extern __typeof__(real) p##name##_f08_ __attribute__((weak, alias(#real)));

static void set_ierror(MPI_Fint *ierror, int rc)
{
    if (ierror)
        *ierror = rc;
}

/* ---- Strings and arrays of the generated wrappers ------------------------------------------ */

static char *str_in(const char *s, size_t len, int leading)
{
    while (len > 0 && s[len - 1] == ' ')
        len--;
    while (leading && len > 0 && s[0] == ' ') {
        s++;
        len--;
    }
    char *c = malloc(len + 1);
    if (c) {
        memcpy(c, s, len);
        c[len] = 0;
    }
    return c;
}

char *ferry_f_str_in(const char *s, size_t len)
{
    return str_in(s, len, 0);
}

char *ferry_f_str_in_stripped(const char *s, size_t len)
{
    return str_in(s, len, 1);
}

char *ferry_f_str_buf(MPI_Aint n)
{
    char *c = malloc(n > 0 ? (size_t)n + 1 : 2);
    if (c)
        c[0] = 0;
    return c;
}

void ferry_f_str_out(char *f, size_t len, const char *c)
{
    size_t n = strlen(c);
    if (n > len)
        n = len;
    memcpy(f, c, n);
    memset(f + n, ' ', len - n);
}

void *ferry_f_handles(void *small, int n, size_t size)
{
    if (n <= FERRY_F_SMALL)
        return small;
    return malloc((size_t)n * size);
}

int ferry_f_peers(const MPI_Fint *comm, int which)
{
    MPI_Comm c = FERRY_F2C(Comm, *comm);
    int topo = MPI_UNDEFINED, n = 0, inter = 0;
    if (which != FERRY_F_ALL && MPI_Topo_test(c, &topo) == MPI_SUCCESS) {
        if (topo == MPI_CART) {
            MPI_Cartdim_get(c, &n);
            return 2 * n;
        }
        if (topo == MPI_GRAPH) {
            int rank;
            MPI_Comm_rank(c, &rank);
            MPI_Graph_neighbors_count(c, rank, &n);
            return n;
        }
        if (topo == MPI_DIST_GRAPH) {
            int in = 0, out = 0, weighted;
            MPI_Dist_graph_neighbors_count(c, &in, &out, &weighted);
            return which == FERRY_F_OUT ? out : in;
        }
    }
    if (MPI_Comm_test_inter(c, &inter) != MPI_SUCCESS)
        return 0;
    if (inter)
        MPI_Comm_remote_size(c, &n);
    else
        MPI_Comm_size(c, &n);
    return n;
}

/* ---- Requests ------------------------------------------------------------------------- */

/* A request's Fortran integer is REQUEST_BASE + its slot. Slots live in chunks that never
 * move, so a lookup needs no lock; handing out and giving back take one. Above REQUEST_BASE
 * so that no integer of libmpi's own conversions (which count up from 0x1000) is taken for one
 * of ours. */
#define REQUEST_BASE 0x40000000
#define REQUEST_CHUNK 4096
#define REQUEST_CHUNKS 4096 /* 16 Mi requests alive at once */
static _Atomic(MPI_Request *) request_chunks[REQUEST_CHUNKS];
static atomic_int request_slots; /* slots handed out so far */
static int *request_free;
static int request_nfree, request_free_cap;
static pthread_mutex_t request_lock = PTHREAD_MUTEX_INITIALIZER;

/* Each thread keeps a few free slots of its own, so that the common case (a request made and
 * ended by one thread) takes no lock; beyond that they go back to the shared list. A thread
 * that ends keeps its few: a bounded loss. */
#define REQUEST_CACHE 64
static _Thread_local int request_cache[REQUEST_CACHE] __attribute__((tls_model("initial-exec")));
static _Thread_local int request_cached __attribute__((tls_model("initial-exec")));

MPI_Fint ferry_f_request_new(MPI_Request c)
{
    if (request_cached > 0) {
        int i = request_cache[--request_cached];
        atomic_load(&request_chunks[i / REQUEST_CHUNK])[i % REQUEST_CHUNK] = c;
        return REQUEST_BASE + i;
    }
    pthread_mutex_lock(&request_lock);
    int i;
    if (request_nfree > 0) {
        i = request_free[--request_nfree];
    } else {
        i = atomic_load(&request_slots);
        MPI_Request *chunk = i < REQUEST_CHUNK * REQUEST_CHUNKS ? atomic_load(&request_chunks[i / REQUEST_CHUNK]) : NULL;
        if (i < REQUEST_CHUNK * REQUEST_CHUNKS && !chunk) {
            chunk = calloc(REQUEST_CHUNK, sizeof *chunk);
            atomic_store(&request_chunks[i / REQUEST_CHUNK], chunk);
        }
        if (!chunk) {
            /* Out of slots or memory: libmpi's own conversion still gives a valid integer. */
            pthread_mutex_unlock(&request_lock);
            return PMPI_Request_c2f(c);
        }
        atomic_store(&request_slots, i + 1);
    }
    atomic_load(&request_chunks[i / REQUEST_CHUNK])[i % REQUEST_CHUNK] = c;
    pthread_mutex_unlock(&request_lock);
    return REQUEST_BASE + i;
}

static MPI_Request *request_slot(MPI_Fint f)
{
    if (f < REQUEST_BASE || f - REQUEST_BASE >= atomic_load(&request_slots))
        return NULL;
    int i = f - REQUEST_BASE;
    return &atomic_load(&request_chunks[i / REQUEST_CHUNK])[i % REQUEST_CHUNK];
}

MPI_Request ferry_f_request_get(MPI_Fint f)
{
    MPI_Request *slot = request_slot(f);
    return slot ? *slot : PMPI_Request_f2c(f);
}

static void request_release(MPI_Fint f)
{
    MPI_Request *slot = request_slot(f);
    if (!slot)
        return;
    *slot = MPI_REQUEST_NULL;
    if (request_cached < REQUEST_CACHE) {
        request_cache[request_cached++] = f - REQUEST_BASE;
        return;
    }
    pthread_mutex_lock(&request_lock);
    if (request_nfree == request_free_cap) {
        int cap = request_free_cap ? 2 * request_free_cap : 256;
        int *grown = realloc(request_free, (size_t)cap * sizeof *grown);
        if (!grown) { /* the slot stays unused: a leak, not an error */
            pthread_mutex_unlock(&request_lock);
            return;
        }
        request_free = grown;
        request_free_cap = cap;
    }
    request_free[request_nfree++] = f - REQUEST_BASE;
    pthread_mutex_unlock(&request_lock);
}

MPI_Fint ferry_f_request_update(MPI_Fint before, MPI_Request after)
{
    if (after == MPI_REQUEST_NULL) {
        request_release(before);
        return (MPI_Fint)(intptr_t)MPI_REQUEST_NULL;
    }
    if (ferry_f2c_Request(before) == after)
        return before; /* still the same request (not complete, or persistent) */
    request_release(before);
    return ferry_c2f_Request(after);
}

/* C code of a Fortran program (linked with libmpifort ahead of libmpi, so this takes the place
 * of libmpi's) reads the Fortran integers of requests made in Fortran. Its MPI_Request_c2f
 * stays libmpi's, which gives one request the same integer each time (the standard's rule);
 * those integers convert back here too. */
MPI_Request MPI_Request_f2c(MPI_Fint request)
{
    return ferry_f2c_Request(request);
}

/* ---- Start, time, addresses ------------------------------------------------------------ */

void pmpi_init_(MPI_Fint *ierror)
{
    set_ierror(ierror, MPI_Init(NULL, NULL));
}
ALIASES(pmpi_init_, mpi_init)

void pmpi_init_thread_(MPI_Fint *required, MPI_Fint *provided, MPI_Fint *ierror)
{
    set_ierror(ierror, MPI_Init_thread(NULL, NULL, *required, provided));
}
ALIASES(pmpi_init_thread_, mpi_init_thread)

double pmpi_wtime_(void)
{
    return MPI_Wtime();
}
ALIASES(pmpi_wtime_, mpi_wtime)

double pmpi_wtick_(void)
{
    return MPI_Wtick();
}
ALIASES(pmpi_wtick_, mpi_wtick)

MPI_Aint pmpi_aint_add_(MPI_Aint *base, MPI_Aint *disp)
{
    return MPI_Aint_add(*base, *disp);
}
ALIASES(pmpi_aint_add_, mpi_aint_add)

MPI_Aint pmpi_aint_diff_(MPI_Aint *addr1, MPI_Aint *addr2)
{
    return MPI_Aint_diff(*addr1, *addr2);
}
ALIASES(pmpi_aint_diff_, mpi_aint_diff)

void pmpi_pcontrol_(MPI_Fint *level, MPI_Fint *ierror)
{
    set_ierror(ierror, MPI_Pcontrol(*level));
}
ALIASES(pmpi_pcontrol_, mpi_pcontrol)

void pmpi_info_create_env_(MPI_Fint *info, MPI_Fint *ierror)
{
    MPI_Info c = MPI_INFO_NULL;
    int rc = MPI_Info_create_env(0, NULL, &c);
    if (rc == MPI_SUCCESS)
        *info = FERRY_C2F(Info, c);
    set_ierror(ierror, rc);
}
ALIASES(pmpi_info_create_env_, mpi_info_create_env)

/* Fortran gets the size only: the address of the buffer is the program's own variable. */
void pmpi_buffer_detach_(void *buffer_addr, MPI_Fint *size, MPI_Fint *ierror)
{
    (void)buffer_addr;
    void *addr = NULL;
    set_ierror(ierror, MPI_Buffer_detach(&addr, size));
}
ALIASES(pmpi_buffer_detach_, mpi_buffer_detach)

/* ---- User reduction operations --------------------------------------------------------- */

/* C calls an operation with its arguments only, so each Fortran function gets a trampoline of
 * its own from a fixed pool. */
typedef void (*ferry_f_user_fn)(void *, void *, MPI_Fint *, MPI_Fint *);
#define OP_SLOTS 80
static ferry_f_user_fn op_fns[OP_SLOTS];

#define OP_TRAMPOLINE(i)                                                                       \
    static void op_trampoline_##i(void *in, void *inout, int *len, MPI_Datatype *dt)           \
    {                                                                                          \
        MPI_Fint fdt = FERRY_C2F(Datatype, *dt);                                               \
        op_fns[i](in, inout, len, &fdt);                                                       \
    }
/* Ten at a time: a##0 .. a##9 with a = (none), 1, ..., 7 make 0 .. 79. */
#define OP10(a)                                                                                \
    OP_TRAMPOLINE(a##0) OP_TRAMPOLINE(a##1) OP_TRAMPOLINE(a##2) OP_TRAMPOLINE(a##3)            \
    OP_TRAMPOLINE(a##4) OP_TRAMPOLINE(a##5) OP_TRAMPOLINE(a##6) OP_TRAMPOLINE(a##7)            \
    OP_TRAMPOLINE(a##8) OP_TRAMPOLINE(a##9)
OP10() OP10(1) OP10(2) OP10(3) OP10(4) OP10(5) OP10(6) OP10(7)
#define OPREF10(a)                                                                             \
    op_trampoline_##a##0, op_trampoline_##a##1, op_trampoline_##a##2, op_trampoline_##a##3,    \
        op_trampoline_##a##4, op_trampoline_##a##5, op_trampoline_##a##6, op_trampoline_##a##7, \
        op_trampoline_##a##8, op_trampoline_##a##9
static MPI_User_function *const op_trampolines[OP_SLOTS] = {
    OPREF10(), OPREF10(1), OPREF10(2), OPREF10(3), OPREF10(4), OPREF10(5), OPREF10(6), OPREF10(7),
};

/* Which trampolines are taken, by which operation: MPI_OP_FREE gives its slot back. */
static MPI_Op op_handles[OP_SLOTS];
static pthread_mutex_t op_lock = PTHREAD_MUTEX_INITIALIZER;

/* A limit of this library, not a fault of the program's arguments: said on stderr, then the
 * error handler of MPI_COMM_WORLD decides (fatal unless the program asked otherwise). */
static int library_limit(const char *what)
{
    fprintf(stderr, "ferry libmpifort: %s\n", what);
    MPI_Comm_call_errhandler(MPI_COMM_WORLD, MPI_ERR_INTERN);
    return MPI_ERR_INTERN;
}

void pmpi_op_create_(ferry_f_user_fn user_fn, MPI_Fint *commute, MPI_Fint *op, MPI_Fint *ierror)
{
    pthread_mutex_lock(&op_lock);
    int slot = 0;
    while (slot < OP_SLOTS && op_fns[slot])
        slot++;
    if (slot == OP_SLOTS) {
        pthread_mutex_unlock(&op_lock);
        set_ierror(ierror, library_limit("MPI_OP_CREATE: 80 Fortran reduction operations exist already (free some with MPI_OP_FREE)"));
        return;
    }
    op_fns[slot] = user_fn;
    MPI_Op c = MPI_OP_NULL;
    int rc = MPI_Op_create(op_trampolines[slot], *commute, &c);
    if (rc == MPI_SUCCESS) {
        op_handles[slot] = c;
        *op = FERRY_C2F(Op, c);
    } else {
        op_fns[slot] = NULL;
    }
    pthread_mutex_unlock(&op_lock);
    set_ierror(ierror, rc);
}
ALIASES(pmpi_op_create_, mpi_op_create)

/* An operation still in use by a nonblocking or persistent reduction when it is freed keeps
 * its trampoline only until another MPI_OP_CREATE: freeing it after the reduction completes
 * (as programs do) is safe. */
void pmpi_op_free_(MPI_Fint *op, MPI_Fint *ierror)
{
    MPI_Op c = FERRY_F2C(Op, *op), before = c;
    int rc = MPI_Op_free(&c);
    if (rc == MPI_SUCCESS) {
        pthread_mutex_lock(&op_lock);
        for (int slot = 0; slot < OP_SLOTS; slot++)
            if (op_fns[slot] && op_handles[slot] == before)
                op_fns[slot] = NULL;
        pthread_mutex_unlock(&op_lock);
        *op = FERRY_C2F(Op, c);
    }
    set_ierror(ierror, rc);
}
ALIASES(pmpi_op_free_, mpi_op_free)

/* ---- Attribute keys -------------------------------------------------------------------- */

/* Fortran copy and delete functions with what they need, passed to C as the extra state. */
typedef void (*ferry_f_copy_fn)(MPI_Fint *, MPI_Fint *, void *, void *, void *, MPI_Fint *, MPI_Fint *);
typedef void (*ferry_f_delete_fn)(MPI_Fint *, MPI_Fint *, void *, void *, MPI_Fint *);
struct keyval {
    ferry_f_copy_fn copy;
    ferry_f_delete_fn del;
    MPI_Aint extra;
    int mpi1; /* MPI_Keyval_create: INTEGER values and extra state */
};

/* The predefined callbacks, callable from Fortran too. */
#define NULL_COPY(name, valtype)                                                               \
    void name(MPI_Fint *old, MPI_Fint *key, valtype *extra, valtype *in, valtype *out,         \
              MPI_Fint *flag, MPI_Fint *ierr)                                                  \
    {                                                                                          \
        (void)old, (void)key, (void)extra, (void)in, (void)out;                                \
        *flag = FERRY_F_FALSE;                                                                 \
        *ierr = MPI_SUCCESS;                                                                   \
    }
#define DUP(name, valtype)                                                                     \
    void name(MPI_Fint *old, MPI_Fint *key, valtype *extra, valtype *in, valtype *out,         \
              MPI_Fint *flag, MPI_Fint *ierr)                                                  \
    {                                                                                          \
        (void)old, (void)key, (void)extra;                                                     \
        *out = *in;                                                                            \
        *flag = FERRY_F_TRUE;                                                                  \
        *ierr = MPI_SUCCESS;                                                                   \
    }
#define NULL_DELETE(name, valtype)                                                             \
    void name(MPI_Fint *h, MPI_Fint *key, valtype *val, valtype *extra, MPI_Fint *ierr)         \
    {                                                                                          \
        (void)h, (void)key, (void)val, (void)extra;                                            \
        *ierr = MPI_SUCCESS;                                                                   \
    }
NULL_COPY(mpi_null_copy_fn_, MPI_Fint)
DUP(mpi_dup_fn_, MPI_Fint)
NULL_DELETE(mpi_null_delete_fn_, MPI_Fint)
NULL_COPY(mpi_comm_null_copy_fn_, MPI_Aint)
DUP(mpi_comm_dup_fn_, MPI_Aint)
NULL_DELETE(mpi_comm_null_delete_fn_, MPI_Aint)
NULL_COPY(mpi_type_null_copy_fn_, MPI_Aint)
DUP(mpi_type_dup_fn_, MPI_Aint)
NULL_DELETE(mpi_type_null_delete_fn_, MPI_Aint)
NULL_COPY(mpi_win_null_copy_fn_, MPI_Aint)
DUP(mpi_win_dup_fn_, MPI_Aint)
NULL_DELETE(mpi_win_null_delete_fn_, MPI_Aint)
void mpi_conversion_fn_null_(void) {}

static int is_null_copy(void *fn)
{
    return fn == (void *)mpi_null_copy_fn_ || fn == (void *)mpi_comm_null_copy_fn_ ||
           fn == (void *)mpi_type_null_copy_fn_ || fn == (void *)mpi_win_null_copy_fn_;
}
static int is_dup(void *fn)
{
    return fn == (void *)mpi_dup_fn_ || fn == (void *)mpi_comm_dup_fn_ ||
           fn == (void *)mpi_type_dup_fn_ || fn == (void *)mpi_win_dup_fn_;
}
static int is_null_delete(void *fn)
{
    return fn == (void *)mpi_null_delete_fn_ || fn == (void *)mpi_comm_null_delete_fn_ ||
           fn == (void *)mpi_type_null_delete_fn_ || fn == (void *)mpi_win_null_delete_fn_;
}

/* An attribute value set from Fortran is kept in a box of its own and the attribute is the
 * box's address: C code that reads it gets a pointer to the value, as MPI 4.1 §19.3.7 asks,
 * and Fortran, which reads C's attributes as addresses, finds its own boxes in this table and
 * reads them as values. A box lives as long as its attribute: the delete callbacks of keyvals
 * made in Fortran free it (one made in C leaves it behind). */
struct box {
    MPI_Aint value; /* first: the box's address is the value's */
    struct box *next;
};
#define BOX_BUCKETS 1024
static struct box *boxes[BOX_BUCKETS];
static pthread_mutex_t box_lock = PTHREAD_MUTEX_INITIALIZER;

static size_t box_bucket(const void *p)
{
    return ((uintptr_t)p >> 4) % BOX_BUCKETS;
}

/* A new box holding v, or NULL when out of memory. */
static void *box_new(MPI_Aint v)
{
    struct box *b = malloc(sizeof *b);
    if (!b)
        return NULL;
    b->value = v;
    pthread_mutex_lock(&box_lock);
    b->next = boxes[box_bucket(b)];
    boxes[box_bucket(b)] = b;
    pthread_mutex_unlock(&box_lock);
    return b;
}

static struct box **box_find(const void *p)
{
    struct box **at = &boxes[box_bucket(p)];
    while (*at && (void *)*at != p)
        at = &(*at)->next;
    return at;
}

/* What Fortran reads of the C attribute value p: a box's value, else p as an address. */
static MPI_Aint attr_from_c(void *p)
{
    pthread_mutex_lock(&box_lock);
    struct box *b = *box_find(p);
    MPI_Aint v = b ? b->value : (MPI_Aint)(intptr_t)p;
    pthread_mutex_unlock(&box_lock);
    return v;
}

static void box_free(void *p)
{
    pthread_mutex_lock(&box_lock);
    struct box **at = box_find(p), *b = *at;
    if (b)
        *at = b->next;
    pthread_mutex_unlock(&box_lock);
    free(b);
}

static int copy_through(struct keyval *k, MPI_Fint fold, int keyval, void *in, void *out, int *flag)
{
    MPI_Fint fkey = keyval, fflag = FERRY_F_FALSE, ierr = MPI_SUCCESS;
    MPI_Aint vout = 0;
    if (k->mpi1) {
        MPI_Fint extra = (MPI_Fint)k->extra, vin = (MPI_Fint)attr_from_c(in), out1 = 0;
        k->copy(&fold, &fkey, &extra, &vin, &out1, &fflag, &ierr);
        vout = out1;
    } else {
        MPI_Aint vin = attr_from_c(in);
        k->copy(&fold, &fkey, &k->extra, &vin, &vout, &fflag, &ierr);
    }
    *flag = fflag != 0;
    if (*flag && ierr == MPI_SUCCESS) {
        void *b = box_new(vout);
        if (!b)
            return MPI_ERR_NO_MEM;
        *(void **)out = b;
    }
    return ierr;
}

static int delete_through(struct keyval *k, MPI_Fint fh, int keyval, void *val)
{
    MPI_Fint fkey = keyval, ierr = MPI_SUCCESS;
    if (k->mpi1) {
        MPI_Fint extra = (MPI_Fint)k->extra, v = (MPI_Fint)attr_from_c(val);
        k->del(&fh, &fkey, &v, &extra, &ierr);
    } else {
        MPI_Aint v = attr_from_c(val);
        k->del(&fh, &fkey, &v, &k->extra, &ierr);
    }
    if (ierr == MPI_SUCCESS)
        box_free(val);
    return ierr;
}

/* MPI_*_DUP_FN and MPI_*_NULL_DELETE_FN of Fortran keyvals: C's would share or leave the box. */
static int dup_box(void *in, void *out, int *flag)
{
    MPI_Aint v = attr_from_c(in);
    void *b = box_new(v);
    if (!b)
        return MPI_ERR_NO_MEM;
    *(void **)out = b;
    *flag = 1;
    return MPI_SUCCESS;
}

#define KEYVAL_KIND(H, N, lower, NULLCOPY)                                                     \
    static int lower##_copy_trampoline(MPI_##H old, int keyval, void *extra, void *in,         \
                                       void *out, int *flag)                                   \
    {                                                                                          \
        return copy_through(extra, FERRY_C2F(H, old), keyval, in, out, flag);                  \
    }                                                                                          \
    static int lower##_delete_trampoline(MPI_##H h, int keyval, void *val, void *extra)        \
    {                                                                                          \
        return delete_through(extra, FERRY_C2F(H, h), keyval, val);                            \
    }                                                                                          \
    static int lower##_dup_box(MPI_##H old, int keyval, void *extra, void *in, void *out,      \
                               int *flag)                                                      \
    {                                                                                          \
        (void)old, (void)keyval, (void)extra;                                                  \
        return dup_box(in, out, flag);                                                         \
    }                                                                                          \
    static int lower##_free_box(MPI_##H h, int keyval, void *val, void *extra)                 \
    {                                                                                          \
        (void)h, (void)keyval, (void)extra;                                                    \
        box_free(val);                                                                         \
        return MPI_SUCCESS;                                                                    \
    }                                                                                          \
    static int lower##_keyval(void *copy, void *del, MPI_Aint extra, int mpi1, MPI_Fint *key)  \
    {                                                                                          \
        struct keyval *k = malloc(sizeof *k);                                                  \
        if (!k)                                                                                \
            return MPI_ERR_NO_MEM;                                                             \
        *k = (struct keyval){(ferry_f_copy_fn)copy, (ferry_f_delete_fn)del, extra, mpi1};      \
        int rc = MPI_##N##_create_keyval(                                                      \
            is_null_copy(copy) ? NULLCOPY : is_dup(copy) ? lower##_dup_box : lower##_copy_trampoline, \
            is_null_delete(del) ? lower##_free_box : lower##_delete_trampoline, key, k);       \
        if (rc != MPI_SUCCESS)                                                                 \
            free(k);                                                                           \
        return rc;                                                                             \
    }
KEYVAL_KIND(Comm, Comm, comm, MPI_COMM_NULL_COPY_FN)
KEYVAL_KIND(Datatype, Type, type, MPI_TYPE_NULL_COPY_FN)
KEYVAL_KIND(Win, Win, win, MPI_WIN_NULL_COPY_FN)

void pmpi_comm_create_keyval_(void *copy, void *del, MPI_Fint *key, MPI_Aint *extra, MPI_Fint *ierror)
{
    set_ierror(ierror, comm_keyval(copy, del, *extra, 0, key));
}
ALIASES(pmpi_comm_create_keyval_, mpi_comm_create_keyval)
void pmpi_type_create_keyval_(void *copy, void *del, MPI_Fint *key, MPI_Aint *extra, MPI_Fint *ierror)
{
    set_ierror(ierror, type_keyval(copy, del, *extra, 0, key));
}
ALIASES(pmpi_type_create_keyval_, mpi_type_create_keyval)
void pmpi_win_create_keyval_(void *copy, void *del, MPI_Fint *key, MPI_Aint *extra, MPI_Fint *ierror)
{
    set_ierror(ierror, win_keyval(copy, del, *extra, 0, key));
}
ALIASES(pmpi_win_create_keyval_, mpi_win_create_keyval)
void pmpi_keyval_create_(void *copy, void *del, MPI_Fint *key, MPI_Fint *extra, MPI_Fint *ierror)
{
    set_ierror(ierror, comm_keyval(copy, del, *extra, 1, key));
}
ALIASES(pmpi_keyval_create_, mpi_keyval_create)

/* What Fortran reads of an attribute: the value stored for its own keys; for the predefined
 * ones, which C holds as pointers to the value, the value itself (MPI 4.1 §7.7.2). */
static MPI_Aint comm_attr_value(int key, void *v)
{
    switch (key) {
    case MPI_TAG_UB: case MPI_IO: case MPI_HOST: case MPI_WTIME_IS_GLOBAL:
    case MPI_APPNUM: case MPI_LASTUSEDCODE: case MPI_UNIVERSE_SIZE:
        return *(int *)v;
    default:
        return attr_from_c(v);
    }
}
static MPI_Aint win_attr_value(int key, void *v)
{
    switch (key) {
    case MPI_WIN_SIZE:
        return *(MPI_Aint *)v;
    case MPI_WIN_DISP_UNIT: case MPI_WIN_CREATE_FLAVOR: case MPI_WIN_MODEL:
        return *(int *)v;
    case MPI_WIN_BASE: /* the address itself */
        return (MPI_Aint)(intptr_t)v;
    default:
        return attr_from_c(v);
    }
}
static MPI_Aint type_attr_value(int key, void *v)
{
    (void)key;
    return attr_from_c(v);
}

/* Sets a Fortran value as an attribute (in a box; see above). */
static int set_boxed(int (*set)(void *h, int key, void *val), void *h, int key, MPI_Aint v)
{
    void *b = box_new(v);
    if (!b)
        return MPI_ERR_NO_MEM;
    int rc = set(h, key, b);
    if (rc != MPI_SUCCESS)
        box_free(b);
    return rc;
}
#define SETTER(fname, H)                                                                       \
    static int set_##fname(void *h, int key, void *val)                                        \
    {                                                                                          \
        return MPI_##fname##_set_attr((MPI_##H)h, key, val);                                   \
    }
SETTER(Comm, Comm)
SETTER(Type, Datatype)
SETTER(Win, Win)

#define ATTR_KIND(H, lower, fname)                                                             \
    void pmpi_##lower##_set_attr_(MPI_Fint *h, MPI_Fint *key, MPI_Aint *val, MPI_Fint *ierror) \
    {                                                                                          \
        set_ierror(ierror, set_boxed(set_##fname, (void *)FERRY_F2C(H, *h), *key, *val));      \
    }                                                                                          \
    ALIASES(pmpi_##lower##_set_attr_, mpi_##lower##_set_attr)                                  \
    void pmpi_##lower##_get_attr_(MPI_Fint *h, MPI_Fint *key, MPI_Aint *val, MPI_Fint *flag,   \
                                  MPI_Fint *ierror)                                            \
    {                                                                                          \
        void *v = NULL;                                                                        \
        int found = 0;                                                                         \
        int rc = MPI_##fname##_get_attr(FERRY_F2C(H, *h), *key, &v, &found);                   \
        if (rc == MPI_SUCCESS) {                                                               \
            *flag = found ? FERRY_F_TRUE : FERRY_F_FALSE;                                      \
            if (found)                                                                         \
                *val = lower##_attr_value(*key, v);                                            \
        }                                                                                      \
        set_ierror(ierror, rc);                                                                \
    }                                                                                          \
    ALIASES(pmpi_##lower##_get_attr_, mpi_##lower##_get_attr)
ATTR_KIND(Comm, comm, Comm)
ATTR_KIND(Datatype, type, Type)
ATTR_KIND(Win, win, Win)

void pmpi_attr_put_(MPI_Fint *comm, MPI_Fint *key, MPI_Fint *val, MPI_Fint *ierror)
{
    set_ierror(ierror, set_boxed(set_Comm, (void *)FERRY_F2C(Comm, *comm), *key, *val));
}
ALIASES(pmpi_attr_put_, mpi_attr_put)

void pmpi_attr_get_(MPI_Fint *comm, MPI_Fint *key, MPI_Fint *val, MPI_Fint *flag, MPI_Fint *ierror)
{
    void *v = NULL;
    int found = 0;
    int rc = MPI_Comm_get_attr(FERRY_F2C(Comm, *comm), *key, &v, &found);
    if (rc == MPI_SUCCESS) {
        *flag = found ? FERRY_F_TRUE : FERRY_F_FALSE;
        if (found)
            *val = (MPI_Fint)comm_attr_value(*key, v);
    }
    set_ierror(ierror, rc);
}
ALIASES(pmpi_attr_get_, mpi_attr_get)

/* ---- Error handlers -------------------------------------------------------------------- */

/* Like operations, a handler is called with the object and the code only: one trampoline per
 * Fortran handler, from a pool per kind. */
typedef void (*ferry_f_handler_fn)(MPI_Fint *, MPI_Fint *);
#define HANDLER_SLOTS 16

#define HANDLER_KIND(H, lower, cname)                                                          \
    static ferry_f_handler_fn lower##_handlers[HANDLER_SLOTS];                                 \
    static atomic_int lower##_handlers_used;                                                   \
    static void lower##_handler_call(int i, MPI_##H *h, int *code)                             \
    {                                                                                          \
        MPI_Fint fh = FERRY_C2F(H, *h), fcode = *code;                                         \
        lower##_handlers[i](&fh, &fcode);                                                      \
    }                                                                                          \
    HANDLER_TRAMPOLINES(H, lower)                                                              \
    void pmpi_##lower##_create_errhandler_(ferry_f_handler_fn fn, MPI_Fint *errhandler,        \
                                           MPI_Fint *ierror)                                   \
    {                                                                                          \
        int slot = atomic_fetch_add(&lower##_handlers_used, 1);                                \
        if (slot >= HANDLER_SLOTS) {                                                           \
            set_ierror(ierror, library_limit("MPI_" #H "_CREATE_ERRHANDLER: a program may make "    \
                                             "16 Fortran error handlers of each kind"));       \
            return;                                                                            \
        }                                                                                      \
        lower##_handlers[slot] = fn;                                                           \
        MPI_Errhandler c = MPI_ERRHANDLER_NULL;                                                \
        int rc = cname(lower##_handler_trampolines[slot], &c);                                 \
        if (rc == MPI_SUCCESS)                                                                 \
            *errhandler = FERRY_C2F(Errhandler, c);                                            \
        set_ierror(ierror, rc);                                                                \
    }                                                                                          \
    ALIASES(pmpi_##lower##_create_errhandler_, mpi_##lower##_create_errhandler)

#define HANDLER_TRAMPOLINE(H, lower, i)                                                        \
    static void lower##_handler_##i(MPI_##H *h, int *code, ...) { lower##_handler_call(i, h, code); }
#define HANDLER_TRAMPOLINES(H, lower)                                                          \
    HANDLER_TRAMPOLINE(H, lower, 0) HANDLER_TRAMPOLINE(H, lower, 1)                            \
    HANDLER_TRAMPOLINE(H, lower, 2) HANDLER_TRAMPOLINE(H, lower, 3)                            \
    HANDLER_TRAMPOLINE(H, lower, 4) HANDLER_TRAMPOLINE(H, lower, 5)                            \
    HANDLER_TRAMPOLINE(H, lower, 6) HANDLER_TRAMPOLINE(H, lower, 7)                            \
    HANDLER_TRAMPOLINE(H, lower, 8) HANDLER_TRAMPOLINE(H, lower, 9)                            \
    HANDLER_TRAMPOLINE(H, lower, 10) HANDLER_TRAMPOLINE(H, lower, 11)                          \
    HANDLER_TRAMPOLINE(H, lower, 12) HANDLER_TRAMPOLINE(H, lower, 13)                          \
    HANDLER_TRAMPOLINE(H, lower, 14) HANDLER_TRAMPOLINE(H, lower, 15)                          \
    static MPI_##H##_errhandler_function *const lower##_handler_trampolines[HANDLER_SLOTS] = { \
        lower##_handler_0, lower##_handler_1, lower##_handler_2, lower##_handler_3,            \
        lower##_handler_4, lower##_handler_5, lower##_handler_6, lower##_handler_7,            \
        lower##_handler_8, lower##_handler_9, lower##_handler_10, lower##_handler_11,          \
        lower##_handler_12, lower##_handler_13, lower##_handler_14, lower##_handler_15};

HANDLER_KIND(Comm, comm, MPI_Comm_create_errhandler)
HANDLER_KIND(Win, win, MPI_Win_create_errhandler)
HANDLER_KIND(File, file, MPI_File_create_errhandler)
HANDLER_KIND(Session, session, MPI_Session_create_errhandler)

/* MPI-1's name for MPI_Comm_create_errhandler. */
void pmpi_errhandler_create_(ferry_f_handler_fn fn, MPI_Fint *errhandler, MPI_Fint *ierror)
{
    pmpi_comm_create_errhandler_(fn, errhandler, ierror);
}
ALIASES(pmpi_errhandler_create_, mpi_errhandler_create)

/* ---- Generalized requests -------------------------------------------------------------- */

typedef void (*ferry_f_query_fn)(MPI_Aint *, MPI_Fint *, MPI_Fint *);
typedef void (*ferry_f_free_fn)(MPI_Aint *, MPI_Fint *);
typedef void (*ferry_f_cancel_fn)(MPI_Aint *, MPI_Fint *, MPI_Fint *);
/* The extra state is the program's variable itself (its address), as MPICH passes it: the
 * callbacks may change it and the program see the change. */
struct grequest {
    ferry_f_query_fn query;
    ferry_f_free_fn free;
    ferry_f_cancel_fn cancel;
    MPI_Aint *extra;
};

static int grequest_query(void *extra, MPI_Status *status)
{
    struct grequest *g = extra;
    MPI_Fint ierr = MPI_SUCCESS;
    g->query(g->extra, (MPI_Fint *)status, &ierr);
    return ierr;
}

static int grequest_free(void *extra)
{
    struct grequest *g = extra;
    MPI_Fint ierr = MPI_SUCCESS;
    g->free(g->extra, &ierr);
    free(g);
    return ierr;
}

static int grequest_cancel(void *extra, int complete)
{
    struct grequest *g = extra;
    MPI_Fint fcomplete = complete ? FERRY_F_TRUE : FERRY_F_FALSE, ierr = MPI_SUCCESS;
    g->cancel(g->extra, &fcomplete, &ierr);
    return ierr;
}

void pmpi_grequest_start_(ferry_f_query_fn query, ferry_f_free_fn freefn, ferry_f_cancel_fn cancel,
                          MPI_Aint *extra, MPI_Fint *request, MPI_Fint *ierror)
{
    struct grequest *g = malloc(sizeof *g);
    if (!g) {
        set_ierror(ierror, MPI_ERR_NO_MEM);
        return;
    }
    *g = (struct grequest){query, freefn, cancel, extra};
    MPI_Request c = MPI_REQUEST_NULL;
    int rc = MPI_Grequest_start(grequest_query, grequest_free, grequest_cancel, g, &c);
    if (rc == MPI_SUCCESS)
        *request = FERRY_C2F(Request, c);
    else
        free(g);
    set_ierror(ierror, rc);
}
ALIASES(pmpi_grequest_start_, mpi_grequest_start)

/* ---- Strings of a length the program chooses ------------------------------------------- */

/* MPI_Info_get_string: buflen is the room in value (Fortran has no terminating NUL) and comes
 * back as the value's length; with buflen 0 only the length is asked for. */
void pmpi_info_get_string_(MPI_Fint *info, char *key, MPI_Fint *buflen, char *value, MPI_Fint *flag,
                           MPI_Fint *ierror, size_t key_len, size_t value_len)
{
    char *key_c = ferry_f_str_in_stripped(key, key_len);
    size_t room = *buflen > 0 && (size_t)*buflen < value_len ? (size_t)*buflen : value_len;
    char *value_c = ferry_f_str_buf((MPI_Aint)room);
    int rc = MPI_ERR_NO_MEM;
    if (key_c && value_c) {
        int cbuflen = *buflen > 0 ? (int)room + 1 : 0, found = 0;
        rc = MPI_Info_get_string(FERRY_F2C(Info, *info), key_c, &cbuflen, value_c, &found);
        if (rc == MPI_SUCCESS) {
            *flag = found ? FERRY_F_TRUE : FERRY_F_FALSE;
            if (found && *buflen > 0)
                ferry_f_str_out(value, value_len, value_c);
            if (found)
                *buflen = cbuflen > 0 ? cbuflen - 1 : 0;
        }
    }
    free(key_c);
    free(value_c);
    set_ierror(ierror, rc);
}
ALIASES(pmpi_info_get_string_, mpi_info_get_string)

/* ---- MPI-1 datatype calls with INTEGER displacements ---------------------------------- */

/* An address or extent as a default INTEGER: MPI_ERR_ARG when it does not fit, rather than
 * a wrong number. */
static int to_fint(MPI_Aint v, MPI_Fint *out, int rc)
{
    if (rc != MPI_SUCCESS)
        return rc;
    if (v != (MPI_Fint)v)
        return MPI_ERR_ARG;
    *out = (MPI_Fint)v;
    return MPI_SUCCESS;
}

void pmpi_address_(void *location, MPI_Fint *address, MPI_Fint *ierror)
{
    MPI_Aint a = 0;
    int rc = MPI_Get_address(ferry_f_buf(location), &a);
    set_ierror(ierror, to_fint(a, address, rc));
}
ALIASES(pmpi_address_, mpi_address)

void pmpi_type_extent_(MPI_Fint *datatype, MPI_Fint *extent, MPI_Fint *ierror)
{
    MPI_Aint lb = 0, ext = 0;
    int rc = MPI_Type_get_extent(FERRY_F2C(Datatype, *datatype), &lb, &ext);
    set_ierror(ierror, to_fint(ext, extent, rc));
}
ALIASES(pmpi_type_extent_, mpi_type_extent)

void pmpi_type_lb_(MPI_Fint *datatype, MPI_Fint *displacement, MPI_Fint *ierror)
{
    MPI_Aint lb = 0, ext = 0;
    int rc = MPI_Type_get_extent(FERRY_F2C(Datatype, *datatype), &lb, &ext);
    set_ierror(ierror, to_fint(lb, displacement, rc));
}
ALIASES(pmpi_type_lb_, mpi_type_lb)

void pmpi_type_ub_(MPI_Fint *datatype, MPI_Fint *displacement, MPI_Fint *ierror)
{
    MPI_Aint lb = 0, ext = 0;
    int rc = MPI_Type_get_extent(FERRY_F2C(Datatype, *datatype), &lb, &ext);
    set_ierror(ierror, to_fint(lb + ext, displacement, rc));
}
ALIASES(pmpi_type_ub_, mpi_type_ub)

void pmpi_type_hvector_(MPI_Fint *count, MPI_Fint *blocklength, MPI_Fint *stride, MPI_Fint *oldtype,
                        MPI_Fint *newtype, MPI_Fint *ierror)
{
    MPI_Datatype c = MPI_DATATYPE_NULL;
    int rc = MPI_Type_create_hvector(*count, *blocklength, *stride, FERRY_F2C(Datatype, *oldtype), &c);
    if (rc == MPI_SUCCESS)
        *newtype = FERRY_C2F(Datatype, c);
    set_ierror(ierror, rc);
}
ALIASES(pmpi_type_hvector_, mpi_type_hvector)

/* The displacements (and types) widened into C arrays; NULL when out of memory. */
static MPI_Aint *widen(const MPI_Fint *v, int n)
{
    MPI_Aint *a = malloc((n > 0 ? (size_t)n : 1) * sizeof *a);
    for (int i = 0; a && i < n; i++)
        a[i] = v[i];
    return a;
}

void pmpi_type_hindexed_(MPI_Fint *count, MPI_Fint *blocklengths, MPI_Fint *displacements,
                         MPI_Fint *oldtype, MPI_Fint *newtype, MPI_Fint *ierror)
{
    MPI_Aint *disp = widen(displacements, *count);
    MPI_Datatype c = MPI_DATATYPE_NULL;
    int rc = disp ? MPI_Type_create_hindexed(*count, blocklengths, disp, FERRY_F2C(Datatype, *oldtype), &c)
                  : MPI_ERR_NO_MEM;
    if (rc == MPI_SUCCESS)
        *newtype = FERRY_C2F(Datatype, c);
    free(disp);
    set_ierror(ierror, rc);
}
ALIASES(pmpi_type_hindexed_, mpi_type_hindexed)

void pmpi_type_struct_(MPI_Fint *count, MPI_Fint *blocklengths, MPI_Fint *displacements,
                       MPI_Fint *types, MPI_Fint *newtype, MPI_Fint *ierror)
{
    int n = *count > 0 ? *count : 0;
    MPI_Aint *disp = widen(displacements, n);
    MPI_Datatype *ctypes = malloc((n > 0 ? (size_t)n : 1) * sizeof *ctypes);
    MPI_Datatype c = MPI_DATATYPE_NULL;
    int rc = MPI_ERR_NO_MEM;
    if (disp && ctypes) {
        for (int i = 0; i < n; i++)
            ctypes[i] = FERRY_F2C(Datatype, types[i]);
        rc = MPI_Type_create_struct(*count, blocklengths, disp, ctypes, &c);
    }
    if (rc == MPI_SUCCESS)
        *newtype = FERRY_C2F(Datatype, c);
    free(disp);
    free(ctypes);
    set_ierror(ierror, rc);
}
ALIASES(pmpi_type_struct_, mpi_type_struct)

/* ---- Spawning: arrays of blank-padded strings ------------------------------------------ */

static int blank(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (s[i] != ' ')
            return 0;
    return 1;
}

/* The NULL-terminated argv of a Fortran CHARACTER array whose elements are len long, ended
 * by an all-blank element; elements `stride` apart (2-D arrays of MPI_Comm_spawn_multiple).
 * Sets *ok to 0 when out of memory. */
static char **argv_f2c(const char *a, size_t len, size_t stride, int keep_leading, int *ok)
{
    size_t n = 0;
    while (!blank(a + n * stride * len, len))
        n++;
    char **argv = calloc(n + 1, sizeof *argv);
    if (!argv) {
        *ok = 0;
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        if (!(argv[i] = (keep_leading ? ferry_f_str_in : ferry_f_str_in_stripped)(a + i * stride * len, len)))
            *ok = 0;
    return argv;
}

static void argv_free(char **argv)
{
    for (size_t i = 0; argv && argv[i]; i++)
        free(argv[i]);
    free(argv);
}

static int *errcodes_f2c(MPI_Fint *errcodes)
{
    return errcodes == &ferryfe_.errcodes_ignore ? MPI_ERRCODES_IGNORE : errcodes;
}

static void comm_spawn(char *command, char *argv, MPI_Fint *maxprocs, MPI_Fint *info, MPI_Fint *root,
                       MPI_Fint *comm, MPI_Fint *intercomm, MPI_Fint *errcodes, MPI_Fint *ierror,
                       size_t command_len, size_t argv_len, int keep_leading)
{
    int ok = 1;
    char *cmd = ferry_f_str_in(command, command_len);
    char **cargv = argv == &ferryfa_.argv_null ? MPI_ARGV_NULL : argv_f2c(argv, argv_len, 1, keep_leading, &ok);
    MPI_Comm c = MPI_COMM_NULL;
    int rc = MPI_ERR_NO_MEM;
    if (cmd && ok)
        rc = MPI_Comm_spawn(cmd, cargv, *maxprocs, FERRY_F2C(Info, *info), *root,
                            FERRY_F2C(Comm, *comm), &c, errcodes_f2c(errcodes));
    if (rc == MPI_SUCCESS)
        *intercomm = FERRY_C2F(Comm, c);
    free(cmd);
    argv_free(cargv);
    set_ierror(ierror, rc);
}

/* An argument's leading blanks: mpif.h and `use mpi` drop them, mpi_f08 keeps them (MPICH's
 * tests ask for each). */
void pmpi_comm_spawn_(char *command, char *argv, MPI_Fint *maxprocs, MPI_Fint *info, MPI_Fint *root,
                      MPI_Fint *comm, MPI_Fint *intercomm, MPI_Fint *errcodes, MPI_Fint *ierror,
                      size_t command_len, size_t argv_len)
{
    comm_spawn(command, argv, maxprocs, info, root, comm, intercomm, errcodes, ierror, command_len, argv_len, 0);
}
extern __typeof__(pmpi_comm_spawn_) mpi_comm_spawn_ __attribute__((weak, alias("pmpi_comm_spawn_")));

void pmpi_comm_spawn_f08_(char *command, char *argv, MPI_Fint *maxprocs, MPI_Fint *info, MPI_Fint *root,
                          MPI_Fint *comm, MPI_Fint *intercomm, MPI_Fint *errcodes, MPI_Fint *ierror,
                          size_t command_len, size_t argv_len)
{
    comm_spawn(command, argv, maxprocs, info, root, comm, intercomm, errcodes, ierror, command_len, argv_len, 1);
}
extern __typeof__(pmpi_comm_spawn_f08_) mpi_comm_spawn_f08_ __attribute__((weak, alias("pmpi_comm_spawn_f08_")));

static void comm_spawn_multiple(MPI_Fint *count, char *commands, char *argvs, MPI_Fint *maxprocs,
                                MPI_Fint *infos, MPI_Fint *root, MPI_Fint *comm, MPI_Fint *intercomm,
                                MPI_Fint *errcodes, MPI_Fint *ierror, size_t commands_len,
                                size_t argvs_len, int keep_leading)
{
    int n = *count > 0 ? *count : 0, ok = 1;
    char **cmds = calloc((size_t)n + 1, sizeof *cmds);
    char ***cargvs = argvs == &ferryfa_.argvs_null ? MPI_ARGVS_NULL : calloc((size_t)n + 1, sizeof *cargvs);
    MPI_Info *cinfos = calloc((size_t)n + 1, sizeof *cinfos);
    if (!cmds || !cinfos || (argvs != &ferryfa_.argvs_null && !cargvs))
        ok = 0;
    for (int i = 0; ok && i < n; i++) {
        if (!(cmds[i] = ferry_f_str_in(commands + (size_t)i * commands_len, commands_len)))
            ok = 0;
        cinfos[i] = FERRY_F2C(Info, infos[i]);
        /* ARRAY_OF_ARGV(COUNT, *): command i's arguments are i, i + count, ... */
        if (cargvs)
            cargvs[i] = argv_f2c(argvs + (size_t)i * argvs_len, argvs_len, (size_t)n, keep_leading, &ok);
    }
    MPI_Comm c = MPI_COMM_NULL;
    int rc = MPI_ERR_NO_MEM;
    if (ok)
        rc = MPI_Comm_spawn_multiple(*count, cmds, cargvs, maxprocs, cinfos, *root,
                                     FERRY_F2C(Comm, *comm), &c, errcodes_f2c(errcodes));
    if (rc == MPI_SUCCESS)
        *intercomm = FERRY_C2F(Comm, c);
    for (int i = 0; cmds && i < n; i++)
        free(cmds[i]);
    for (int i = 0; cargvs && i < n; i++)
        argv_free(cargvs[i]);
    free(cmds);
    free(cargvs);
    free(cinfos);
    set_ierror(ierror, rc);
}

void pmpi_comm_spawn_multiple_(MPI_Fint *count, char *commands, char *argvs, MPI_Fint *maxprocs,
                               MPI_Fint *infos, MPI_Fint *root, MPI_Fint *comm, MPI_Fint *intercomm,
                               MPI_Fint *errcodes, MPI_Fint *ierror, size_t commands_len, size_t argvs_len)
{
    comm_spawn_multiple(count, commands, argvs, maxprocs, infos, root, comm, intercomm, errcodes,
                        ierror, commands_len, argvs_len, 0);
}
extern __typeof__(pmpi_comm_spawn_multiple_) mpi_comm_spawn_multiple_
    __attribute__((weak, alias("pmpi_comm_spawn_multiple_")));

void pmpi_comm_spawn_multiple_f08_(MPI_Fint *count, char *commands, char *argvs, MPI_Fint *maxprocs,
                                   MPI_Fint *infos, MPI_Fint *root, MPI_Fint *comm, MPI_Fint *intercomm,
                                   MPI_Fint *errcodes, MPI_Fint *ierror, size_t commands_len,
                                   size_t argvs_len)
{
    comm_spawn_multiple(count, commands, argvs, maxprocs, infos, root, comm, intercomm, errcodes,
                        ierror, commands_len, argvs_len, 1);
}
extern __typeof__(pmpi_comm_spawn_multiple_f08_) mpi_comm_spawn_multiple_f08_
    __attribute__((weak, alias("pmpi_comm_spawn_multiple_f08_")));
