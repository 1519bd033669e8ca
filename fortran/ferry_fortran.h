/* Helpers shared by the generated Fortran entry points (mpi_fortran.c) and the hand-written
 * ones (handwritten.c) of libmpifort.so. Fortran passes everything by reference; MPI_Fint is
 * C int; a Fortran status is the C status's eight ints. */
#ifndef FERRY_FORTRAN_H
#define FERRY_FORTRAN_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

/* Helpers of the library itself: not exported, so calls to them inside it are direct. */
#define FERRY_F_INTERNAL __attribute__((visibility("hidden")))

/* gfortran's LOGICAL: .TRUE. is 1, .FALSE. is 0. */
#define FERRY_F_TRUE 1
#define FERRY_F_FALSE 0

/* Handle arrays up to this length are converted on the stack. */
#define FERRY_F_SMALL 16

/* Predefined handles are small constants in the MPI 5.0 ABI and keep their value as Fortran
 * integers (fortran/gen.py checks every one of mpi.h is below this), so the common case
 * converts without a call; created handles go through MPI_X_f2c / MPI_X_c2f. */
#define FERRY_F_PREDEFINED_END 0x400

#define FERRY_F_CONVERT(H, f2c, c2f)                                                           \
    static inline MPI_##H ferry_f2c_##H(MPI_Fint f)                                            \
    {                                                                                          \
        return f >= 0 && f < FERRY_F_PREDEFINED_END ? (MPI_##H)(intptr_t)f : f2c(f);           \
    }                                                                                          \
    static inline MPI_Fint ferry_c2f_##H(MPI_##H c)                                            \
    {                                                                                          \
        return (uintptr_t)c < FERRY_F_PREDEFINED_END ? (MPI_Fint)(intptr_t)c : c2f(c);         \
    }
FERRY_F_CONVERT(Comm, MPI_Comm_f2c, MPI_Comm_c2f)
FERRY_F_CONVERT(Datatype, MPI_Type_f2c, MPI_Type_c2f)
FERRY_F_CONVERT(Group, MPI_Group_f2c, MPI_Group_c2f)
FERRY_F_CONVERT(Op, MPI_Op_f2c, MPI_Op_c2f)
FERRY_F_CONVERT(Info, MPI_Info_f2c, MPI_Info_c2f)
FERRY_F_CONVERT(Errhandler, MPI_Errhandler_f2c, MPI_Errhandler_c2f)
FERRY_F_CONVERT(Win, MPI_Win_f2c, MPI_Win_c2f)
FERRY_F_CONVERT(File, MPI_File_f2c, MPI_File_c2f)
FERRY_F_CONVERT(Message, MPI_Message_f2c, MPI_Message_c2f)
FERRY_F_CONVERT(Session, MPI_Session_f2c, MPI_Session_c2f)
/* Requests are made and completed by the million, so they get Fortran integers of their own
 * (handwritten.c): a slot from the first request that needs one until the call that ends it
 * (a wait or test that completes it, MPI_Request_free) gives the slot back. */
FERRY_F_INTERNAL MPI_Fint ferry_f_request_new(MPI_Request c);
FERRY_F_INTERNAL MPI_Request ferry_f_request_get(MPI_Fint f);
FERRY_F_INTERNAL MPI_Fint ferry_f_request_update(MPI_Fint before, MPI_Request after);
static inline MPI_Request ferry_f2c_Request(MPI_Fint f)
{
    return f >= 0 && f < FERRY_F_PREDEFINED_END ? (MPI_Request)(intptr_t)f : ferry_f_request_get(f);
}
static inline MPI_Fint ferry_c2f_Request(MPI_Request c)
{
    return (uintptr_t)c < FERRY_F_PREDEFINED_END ? (MPI_Fint)(intptr_t)c : ferry_f_request_new(c);
}

#define FERRY_F2C(H, f) ferry_f2c_##H(f)
#define FERRY_C2F(H, c) ferry_c2f_##H(c)
/* An argument that goes in and comes back (MPI_Wait's request, MPI_Comm_free's comm): only a
 * request's integer depends on what it was. */
#define FERRY_C2F_INOUT(H, before, after) ferry_c2f_##H(after)
#define FERRY_C2F_INOUT_Request(before, after) ferry_f_request_update(before, after)

/* The common blocks of mpif.h and the modules whose addresses are the sentinels. */
struct ferry_f_bottom { MPI_Fint bottom, in_place; };
struct ferry_f_statuses { MPI_Fint status_ignore[8], statuses_ignore[8]; };
struct ferry_f_ignores { MPI_Fint errcodes_ignore, unweighted, weights_empty; };
struct ferry_f_argv { char argv_null, argvs_null; };
extern struct ferry_f_bottom ferryfb_;
extern struct ferry_f_statuses ferryfs_; /* mpif.h and `use mpi` */
extern struct ferry_f_statuses ferryf8_; /* mpi_f08's TYPE(MPI_Status) ones */
extern struct ferry_f_ignores ferryfe_;
extern struct ferry_f_argv ferryfa_;

static inline void *ferry_f_buf(void *p)
{
    if (p == (void *)&ferryfb_.bottom)
        return MPI_BOTTOM;
    if (p == (void *)&ferryfb_.in_place)
        return MPI_IN_PLACE;
    return p;
}

static inline MPI_Status *ferry_f_status(MPI_Fint *s)
{
    if (s == ferryfs_.status_ignore || s == ferryf8_.status_ignore)
        return MPI_STATUS_IGNORE;
    return (MPI_Status *)s;
}

static inline MPI_Status *ferry_f_statuses(MPI_Fint *s)
{
    if (s == ferryfs_.statuses_ignore || s == ferryf8_.statuses_ignore)
        return MPI_STATUSES_IGNORE;
    return (MPI_Status *)s;
}

static inline int *ferry_f_weights(MPI_Fint *w)
{
    if (w == &ferryfe_.unweighted)
        return MPI_UNWEIGHTED;
    if (w == &ferryfe_.weights_empty)
        return MPI_WEIGHTS_EMPTY;
    return w;
}

/* C's 0-based request indices as Fortran's 1-based ones (MPI_UNDEFINED stays). */
static inline void ferry_f_indices(MPI_Fint *idx, int n)
{
    for (int i = 0; i < n; i++)
        if (idx[i] != MPI_UNDEFINED && idx[i] >= 0)
            idx[i] += 1;
}

/* A Fortran string as a new C string without its trailing blanks (an argument of
 * MPI_Comm_spawn keeps its leading ones); NULL when out of memory. */
FERRY_F_INTERNAL char *ferry_f_str_in(const char *s, size_t len);
/* The same without leading blanks either: info keys and values (MPI 4.1 §10), and the
 * arguments of MPI_COMM_SPAWN in mpif.h and `use mpi`. */
FERRY_F_INTERNAL char *ferry_f_str_in_stripped(const char *s, size_t len);
/* A NUL-terminated buffer of n bytes (at least 1) for a C call to fill. */
FERRY_F_INTERNAL char *ferry_f_str_buf(MPI_Aint n);
/* A C string into a Fortran one: truncated to len, padded with blanks. */
FERRY_F_INTERNAL void ferry_f_str_out(char *f, size_t len, const char *c);
/* Room for n handles: the small stack array, or malloc'd (NULL when out of memory). */
FERRY_F_INTERNAL void *ferry_f_handles(void *small, int n, size_t size);

enum { FERRY_F_ALL, FERRY_F_IN, FERRY_F_OUT };
/* How many datatypes an alltoallw takes on *comm: its (remote) size for FERRY_F_ALL, its
 * neighbourhood's in or out degree; 0 if comm is not valid (the call then says so). */
FERRY_F_INTERNAL int ferry_f_peers(const MPI_Fint *comm, int which);

/* Choice buffers of mpi_f08 (choice.c): a TS 29113 descriptor made into the address, count and
 * datatype a C call takes; ferry_f_choice_end after the call copies back and frees. */
#include <ISO_Fortran_binding.h>
enum {
    FERRY_F_CHOICE_BLOCKING = 1, /* the buffer is done with when the call returns */
    FERRY_F_CHOICE_OUTPUT = 2,   /* the call writes into it */
    FERRY_F_CHOICE_ADDRESS = 4,  /* only its address counts (MPI_Get_address) */
};
struct ferry_f_choice {
    void *base;         /* the buffer the C call gets */
    MPI_Count count;    /* the count it gets (1 with a made type) */
    MPI_Datatype type;  /* the datatype it gets */
    MPI_Datatype made;  /* a datatype made for a strided section, freed after the call */
    void *copy;         /* a contiguous copy of the section, or NULL */
    CFI_cdesc_t *desc;  /* the section the copy came from */
    int copy_out;       /* copy back after the call */
};
/* The n buffers that one count and datatype describe (usually one; MPI_Allreduce's two): all
 * get the same count and type. Returns an MPI error code, and says why on stderr. */
FERRY_F_INTERNAL int ferry_f_choice_typed(struct ferry_f_choice *xs, CFI_cdesc_t *const *ds, const int *flags,
                                          int n, MPI_Count count, MPI_Datatype dt, const char *call);
/* A buffer without one of its own (per-process counts, a shared datatype, a window). */
FERRY_F_INTERNAL int ferry_f_choice_raw(struct ferry_f_choice *x, CFI_cdesc_t *d, int flags, const char *call);
FERRY_F_INTERNAL void ferry_f_choice_end(struct ferry_f_choice *x, int rc);

#endif
