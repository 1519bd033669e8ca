/* Choice buffers of mpi_f08 as TS 29113 descriptors (MPI 5.0 §19.1.12, MPI_SUBARRAYS_SUPPORTED).
 *
 * mpi_f08 declares a choice buffer TYPE(*), DIMENSION(..) in a BIND(C) interface, so gfortran
 * passes the actual argument as it is, array section included, with a CFI descriptor instead of
 * making a contiguous copy. The entry points (mpi_send_f08ts_, written by gen.py) turn each
 * descriptor into what the C call takes:
 *   - contiguous (or a scalar, MPI_BOTTOM, MPI_IN_PLACE): its address, nothing else changes;
 *   - not contiguous, with a (count, datatype) of its own whose datatype spans one element
 *     (extent = element length, lower bound 0: MPI_REAL for REAL, a struct for a derived type)
 *     or has no gaps and a size that divides the element length (MPI_REAL for COMPLEX): a
 *     derived datatype that reaches the first count elements of the section where they are
 *     (hvectors by the descriptor's strides, as MPICH does), passed with count 1 and freed right
 *     after the call. ferry keeps a datatype alive for the communication that uses it, so
 *     nonblocking and persistent calls need nothing more: there is no temporary, the data moves
 *     from and to the section itself;
 *   - otherwise, for a call whose buffer is done with when it returns: a contiguous copy, copied
 *     back for output buffers (what gfortran does without descriptors);
 *   - otherwise (a nonblocking call, a window, a datatype that fits no element over a strided
 *     section): an error that says so, since a copy would be gone before the communication
 *     ends. */
#include "ferry_fortran.h"

#include <ISO_Fortran_binding.h>
#include <stdio.h>
#include <string.h>

/* The number of elements of a descriptor (1 for a scalar). */
static MPI_Count elements(const CFI_cdesc_t *d)
{
    MPI_Count n = 1;
    for (int i = 0; i < d->rank; i++)
        n *= (MPI_Count)d->dim[i].extent;
    return n;
}

/* Whether the elements follow each other in memory: every dimension of more than one element
 * strides by the elements below it (an empty array counts, and so does an assumed-size one,
 * whose last extent is -1). Checked here rather than by CFI_is_contiguous: it is on the path
 * of every call. */
static int contiguous(const CFI_cdesc_t *d)
{
    CFI_index_t expected = (CFI_index_t)d->elem_len;
    int fits = 1;
    for (int i = 0; i < d->rank; i++) {
        CFI_index_t ext = d->dim[i].extent;
        if (ext == 0)
            return 1;
        if (ext > 1 && d->dim[i].sm != expected)
            fits = 0;
        expected *= ext;
    }
    return fits;
}

/* Byte offset of element number k (array element order) from base_addr. */
static MPI_Aint offset_of(const CFI_cdesc_t *d, MPI_Count k)
{
    MPI_Aint off = 0;
    for (int i = 0; i < d->rank; i++) {
        MPI_Count ext = d->dim[i].extent;
        off += (MPI_Aint)(k % ext) * d->dim[i].sm;
        k /= ext;
    }
    return off;
}

/* A datatype of the first m elements of d in array element order, each element being `elem`;
 * full[i] covers all elements of dimensions below i (full[0] is one element). m = q*P + r with
 * P the elements of full[top] is q strided copies of full[top] and then the r that remain,
 * which start q strides further: a struct of the two, built the same way. */
static int section_type(const CFI_cdesc_t *d, MPI_Count m, const MPI_Datatype *full, const MPI_Count *per,
                        MPI_Datatype *out)
{
    int top = 0;
    while (top + 1 < d->rank && per[top + 1] <= m)
        top++;
    MPI_Count q = m / per[top], r = m % per[top];
    MPI_Datatype head;
    int rc = PMPI_Type_create_hvector_c(q, 1, d->dim[top].sm, full[top], &head);
    if (rc != MPI_SUCCESS || r == 0) {
        *out = head;
        return rc;
    }
    MPI_Datatype tail;
    rc = section_type(d, r, full, per, &tail);
    if (rc == MPI_SUCCESS) {
        MPI_Count blocks[2] = {1, 1};
        MPI_Count displs[2] = {0, q * (MPI_Count)d->dim[top].sm};
        MPI_Datatype types[2] = {head, tail};
        rc = PMPI_Type_create_struct_c(2, blocks, displs, types, out);
        PMPI_Type_free(&tail);
    }
    PMPI_Type_free(&head);
    return rc;
}

/* A committed datatype for `count` of `dt` laid over the non-contiguous section d, or
 * MPI_ERR_TYPE when dt does not fit its elements (the caller then copies or refuses). */
static int strided_type(const CFI_cdesc_t *d, MPI_Count count, MPI_Datatype dt, MPI_Datatype *out)
{
    MPI_Count size, lb, extent, true_lb, true_extent;
    if (PMPI_Type_size_c(dt, &size) != MPI_SUCCESS || PMPI_Type_get_extent_c(dt, &lb, &extent) != MPI_SUCCESS ||
        PMPI_Type_get_true_extent_c(dt, &true_lb, &true_extent) != MPI_SUCCESS)
        return MPI_ERR_TYPE;
    MPI_Count elem_len = (MPI_Count)d->elem_len, per_elem;
    if (extent == elem_len && lb == 0 && true_lb >= 0 && true_lb + true_extent <= extent) {
        per_elem = 1; /* one datatype per element, gaps inside it included (a derived type's struct) */
    } else if (size > 0 && size == extent && size == true_extent && lb == 0 && true_lb == 0 && elem_len % size == 0) {
        per_elem = elem_len / size; /* several per element (MPI_REAL over COMPLEX) */
    } else {
        return MPI_ERR_TYPE;
    }
    if (count % per_elem != 0 || count / per_elem > elements(d))
        return MPI_ERR_TYPE;
    MPI_Datatype full[CFI_MAX_RANK + 1];
    MPI_Count per[CFI_MAX_RANK + 1];
    int made = 0, rc;
    if (per_elem == 1) {
        full[0] = dt;
    } else {
        rc = PMPI_Type_contiguous_c(per_elem, dt, &full[0]);
        if (rc != MPI_SUCCESS)
            return rc;
        made = 1;
    }
    per[0] = 1;
    rc = MPI_SUCCESS;
    int built = 0; /* full[1..built] were made here */
    for (int i = 0; i + 1 < d->rank && rc == MPI_SUCCESS; i++) {
        rc = PMPI_Type_create_hvector_c(d->dim[i].extent, 1, d->dim[i].sm, full[i], &full[i + 1]);
        if (rc == MPI_SUCCESS)
            built = i + 1;
        per[i + 1] = per[i] * d->dim[i].extent;
    }
    if (rc == MPI_SUCCESS)
        rc = section_type(d, count / per_elem, full, per, out);
    if (rc == MPI_SUCCESS)
        rc = PMPI_Type_commit(out);
    for (int i = 1; i <= built; i++)
        PMPI_Type_free(&full[i]);
    if (made)
        PMPI_Type_free(&full[0]);
    return rc;
}

/* Copies the section into (to_section = 0) or out of (1) the contiguous buffer flat. */
static void copy_section(const CFI_cdesc_t *d, char *flat, int to_section)
{
    MPI_Count n = elements(d);
    size_t len = d->elem_len;
    char *base = d->base_addr;
    for (MPI_Count k = 0; k < n; k++) {
        char *el = base + offset_of(d, k);
        if (to_section)
            memcpy(el, flat + (size_t)k * len, len);
        else
            memcpy(flat + (size_t)k * len, el, len);
    }
}

/* Whether count of dt stays inside a contiguous copy of d (a copy holds no more than the
 * section, where the user's array may have gone on). */
static int fits(const CFI_cdesc_t *d, MPI_Count count, MPI_Datatype dt)
{
    MPI_Count lb, extent, true_lb, true_extent;
    if (count <= 0)
        return 1;
    if (PMPI_Type_get_extent_c(dt, &lb, &extent) != MPI_SUCCESS ||
        PMPI_Type_get_true_extent_c(dt, &true_lb, &true_extent) != MPI_SUCCESS)
        return 1; /* not a datatype: the call itself says so */
    MPI_Count first = true_lb + (extent < 0 ? (count - 1) * extent : 0);
    MPI_Count end = true_lb + true_extent + (extent > 0 ? (count - 1) * extent : 0);
    return first >= 0 && end <= elements(d) * (MPI_Count)d->elem_len;
}

static int copy_in(struct ferry_f_choice *x, CFI_cdesc_t *d, int output)
{
    size_t bytes = (size_t)elements(d) * d->elem_len;
    x->copy = malloc(bytes ? bytes : 1);
    if (!x->copy)
        return MPI_ERR_NO_MEM;
    copy_section(d, x->copy, 0);
    x->base = x->copy;
    x->desc = d;
    x->copy_out = output;
    return MPI_SUCCESS;
}

static int refuse(const char *call, const char *why)
{
    fprintf(stderr, "ferry: %s: a non-contiguous array section as its buffer %s\n", call, why);
    return MPI_ERR_BUFFER;
}

int ferry_f_choice_typed(struct ferry_f_choice *xs, CFI_cdesc_t *const *ds, const int *flags, int n,
                         MPI_Count count, MPI_Datatype dt, const char *call)
{
    int strided = -1; /* the first non-contiguous buffer of the group */
    for (int i = 0; i < n; i++) {
        memset(&xs[i], 0, sizeof xs[i]);
        xs[i].count = count;
        xs[i].type = dt;
        xs[i].made = MPI_DATATYPE_NULL;
        xs[i].base = ferry_f_buf(ds[i]->base_addr);
        if (xs[i].base != MPI_IN_PLACE && !contiguous(ds[i]) && strided < 0)
            strided = i;
    }
    if (strided < 0)
        return MPI_SUCCESS;
    MPI_Count size;
    if (PMPI_Type_size_c(dt, &size) != MPI_SUCCESS)
        return MPI_SUCCESS; /* not a datatype: the call itself says so */
    /* One count and datatype serve every buffer of the group (MPI_Allreduce's send and receive
     * buffers): a made type fits when the others are MPI_IN_PLACE or sections of the same shape. */
    int same = 1;
    for (int i = 0; i < n; i++) {
        if (i == strided || xs[i].base == MPI_IN_PLACE)
            continue;
        const CFI_cdesc_t *a = ds[i], *b = ds[strided];
        same = same && a->rank == b->rank && a->elem_len == b->elem_len;
        for (int k = 0; same && k < a->rank; k++)
            same = a->dim[k].extent == b->dim[k].extent && a->dim[k].sm == b->dim[k].sm;
    }
    MPI_Datatype made;
    if (same && strided_type(ds[strided], count, dt, &made) == MPI_SUCCESS) {
        xs[0].made = made;
        for (int i = 0; i < n; i++) {
            xs[i].count = 1;
            xs[i].type = made;
        }
        return MPI_SUCCESS;
    }
    for (int i = 0; i < n; i++) {
        if (xs[i].base == MPI_IN_PLACE || contiguous(ds[i]))
            continue;
        if (!fits(ds[i], count, dt))
            return refuse(call, "holds fewer bytes than its count and datatype reach");
        if (!(flags[i] & FERRY_F_CHOICE_BLOCKING))
            return refuse(call, "takes a datatype of the element's extent, or one without gaps whose size "
                                "divides it (and, where buffers share one datatype, sections of one shape), so "
                                "that the communication can reach the section in place");
        int rc = copy_in(&xs[i], ds[i], flags[i] & FERRY_F_CHOICE_OUTPUT);
        if (rc != MPI_SUCCESS)
            return rc;
    }
    return MPI_SUCCESS;
}

int ferry_f_choice_raw(struct ferry_f_choice *x, CFI_cdesc_t *d, int flags, const char *call)
{
    memset(x, 0, sizeof *x);
    x->made = MPI_DATATYPE_NULL;
    x->base = ferry_f_buf(d->base_addr);
    if (contiguous(d) || (flags & FERRY_F_CHOICE_ADDRESS))
        return MPI_SUCCESS;
    if (flags & FERRY_F_CHOICE_BLOCKING)
        return copy_in(x, d, flags & FERRY_F_CHOICE_OUTPUT);
    return refuse(call, "must be contiguous here (counts per process, several buffers sharing one datatype, "
                        "or memory the library keeps using after the call)");
}

void ferry_f_choice_end(struct ferry_f_choice *x, int rc)
{
    if (x->copy) {
        if (x->copy_out && rc == MPI_SUCCESS)
            copy_section(x->desc, x->copy, 1);
        free(x->copy);
        x->copy = NULL;
    }
    if (x->made != MPI_DATATYPE_NULL)
        PMPI_Type_free(&x->made);
}
