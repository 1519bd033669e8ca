/* The calls MPICH 4 ships beyond ferry's MPI 4.1 set, for old and Fortran-interop programs:
 * the MPI-1 calls removed in MPI-3.0 (MPI_Address, MPI_Type_extent/_lb/_ub, MPI_Type_hvector,
 * _hindexed and _struct, MPI_Errhandler_create/_set/_get) against their modern replacements
 * and the bound markers MPI_LB/MPI_UB,
 * session error handlers (create, set, get, call, on a bad session), MPI_Type_create_f90_*
 * (the choice, the envelope and contents, one handle per arguments, no freeing, a message of
 * each, MPI_ERR_ARG when no type fits) and the status conversions c2f/f2c/c2f08/f082c/f082f/
 * f2f08 (round trips keep the count; the *_STATUS_IGNOREs are refused). Two or more processes.
 * Checked against MPICH with -DOLDAPI_NO_F08 (Debian's MPICH is built without the F08 calls). */
#include "mtest.h"

static int handler_calls = 0;
static int handler_code = 0;

static void count_calls(MPI_Comm *comm, int *code, ...)
{
    (void)comm;
    handler_calls++;
    handler_code = *code;
}

static void count_session_calls(MPI_Session *session, int *code, ...)
{
    (void)session;
    handler_calls++;
    handler_code = *code;
}

static void removed_datatype_calls(int rank)
{
    struct {
        char c;
        double d[2];
        int i;
    } s[2];
    MPI_Aint base, a_d, a_i, ext = 0, lb = -1, ub = -1, lb2, ext2;
    CHECK_OK(MPI_Address(&s[0], &base), "MPI_Address");
    CHECK_OK(MPI_Address(&s[0].d, &a_d), "MPI_Address");
    CHECK_OK(MPI_Address(&s[0].i, &a_i), "MPI_Address");
    CHECK(a_d - base == (MPI_Aint)offsetof(__typeof__(s[0]), d), "MPI_Address offset %ld",
          (long)(a_d - base));
    MPI_Get_address(&s[0].i, &lb2);
    CHECK(a_i == lb2, "MPI_Address and MPI_Get_address differ");

    int bl[3] = {1, 2, 1};
    MPI_Aint disp[3] = {0, a_d - base, a_i - base};
    MPI_Datatype types[3] = {MPI_CHAR, MPI_DOUBLE, MPI_INT}, st, st2;
    CHECK_OK(MPI_Type_struct(3, bl, disp, types, &st), "MPI_Type_struct");
    CHECK_OK(MPI_Type_create_struct(3, bl, disp, types, &st2), "MPI_Type_create_struct");
    CHECK_OK(MPI_Type_extent(st, &ext), "MPI_Type_extent");
    CHECK_OK(MPI_Type_lb(st, &lb), "MPI_Type_lb");
    CHECK_OK(MPI_Type_ub(st, &ub), "MPI_Type_ub");
    MPI_Type_get_extent(st2, &lb2, &ext2);
    CHECK(ext == ext2 && lb == lb2 && ub == lb2 + ext2, "struct bounds %ld %ld %ld vs %ld %ld",
          (long)lb, (long)ext, (long)ub, (long)lb2, (long)ext2);
    CHECK(ext == (MPI_Aint)sizeof(s[0]), "struct extent %ld, sizeof %zu", (long)ext, sizeof(s[0]));
    int ni, na, nd, comb;
    MPI_Type_get_envelope(st, &ni, &na, &nd, &comb);
    CHECK(comb == MPI_COMBINER_STRUCT && nd == 3, "MPI_Type_struct combiner %d", comb);
    MPI_Type_commit(&st);

    /* Two structs from rank 0 to rank 1 with the old type. */
    memset(s, 0, sizeof s);
    if (rank == 0) {
        for (int k = 0; k < 2; k++) {
            s[k].c = (char)('a' + k);
            s[k].d[0] = 1.5 + k;
            s[k].d[1] = -2.5 - k;
            s[k].i = 40 + k;
        }
        MPI_Send(s, 2, st, 1, 5, MPI_COMM_WORLD);
    } else if (rank == 1) {
        MPI_Recv(s, 2, st, 0, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        for (int k = 0; k < 2; k++)
            CHECK(s[k].c == 'a' + k && s[k].d[0] == 1.5 + k && s[k].d[1] == -2.5 - k &&
                      s[k].i == 40 + k,
                  "struct %d received wrong", k);
    }
    MPI_Type_free(&st);
    MPI_Type_free(&st2);

    /* hvector and hindexed: the same type maps as the create_ versions. */
    MPI_Datatype hv, hv2, hi, hi2;
    CHECK_OK(MPI_Type_hvector(3, 2, 5 * sizeof(int), MPI_INT, &hv), "MPI_Type_hvector");
    MPI_Type_create_hvector(3, 2, 5 * sizeof(int), MPI_INT, &hv2);
    MPI_Type_extent(hv, &ext);
    MPI_Type_extent(hv2, &ext2);
    CHECK(ext == ext2 && ext == (MPI_Aint)(12 * sizeof(int)), "hvector extent %ld", (long)ext);
    int hbl[2] = {2, 1};
    MPI_Aint hd[2] = {4 * sizeof(int), -2 * (MPI_Aint)sizeof(int)};
    CHECK_OK(MPI_Type_hindexed(2, hbl, hd, MPI_INT, &hi), "MPI_Type_hindexed");
    MPI_Type_create_hindexed(2, hbl, hd, MPI_INT, &hi2);
    MPI_Type_lb(hi, &lb);
    MPI_Type_ub(hi, &ub);
    MPI_Type_get_extent(hi2, &lb2, &ext2);
    CHECK(lb == -2 * (MPI_Aint)sizeof(int) && lb == lb2 && ub == lb2 + ext2,
          "hindexed bounds %ld %ld", (long)lb, (long)ub);
    MPI_Type_get_envelope(hi, &ni, &na, &nd, &comb);
    CHECK(comb == MPI_COMBINER_HINDEXED, "MPI_Type_hindexed combiner %d", comb);
    MPI_Type_free(&hv);
    MPI_Type_free(&hv2);
    MPI_Type_free(&hi);
    MPI_Type_free(&hi2);

    /* MPI_LB and MPI_UB set the bounds: { (LB,-4), (int,0), (int,4), (UB,16) } has lb -4 and
     * extent 20, so two elements sent from a buffer take ints 1, 2, 6, 7. */
    int mbl[3] = {1, 2, 1};
    MPI_Aint md[3] = {-4, 0, 16};
    MPI_Datatype mt[3] = {MPI_LB, MPI_INT, MPI_UB}, marked;
    CHECK_OK(MPI_Type_struct(3, mbl, md, mt, &marked), "MPI_Type_struct with MPI_LB/MPI_UB");
    MPI_Type_lb(marked, &lb);
    MPI_Type_extent(marked, &ext);
    int msize = 0;
    MPI_Type_size(marked, &msize);
    CHECK(lb == -4 && ext == 20 && msize == 8, "marked struct lb %ld extent %ld size %d",
          (long)lb, (long)ext, msize);
    MPI_Type_commit(&marked);
    int mbuf[12], mout[4] = {0, 0, 0, 0};
    for (int k = 0; k < 12; k++)
        mbuf[k] = k;
    MPI_Sendrecv(mbuf + 1, 2, marked, 0, 3, mout, 4, MPI_INT, 0, 3, MPI_COMM_SELF,
                 MPI_STATUS_IGNORE);
    CHECK(mout[0] == 1 && mout[1] == 2 && mout[2] == 6 && mout[3] == 7,
          "marked struct sent %d %d %d %d", mout[0], mout[1], mout[2], mout[3]);
    MPI_Type_free(&marked);
    char mname[MPI_MAX_OBJECT_NAME];
    int mlen = 0;
    MPI_Type_get_name(MPI_UB, mname, &mlen);
    CHECK(strcmp(mname, "MPI_UB") == 0, "MPI_UB is called %s", mname);

    /* Argument errors. */
    CHECK_CLASS(MPI_Type_extent(MPI_INT, NULL), MPI_ERR_ARG, "MPI_Type_extent(NULL)");
    CHECK_CLASS(MPI_Type_lb(MPI_INT, NULL), MPI_ERR_ARG, "MPI_Type_lb(NULL)");
    CHECK_CLASS(MPI_Type_ub(MPI_INT, NULL), MPI_ERR_ARG, "MPI_Type_ub(NULL)");
    CHECK_CLASS(MPI_Address(&base, NULL), MPI_ERR_ARG, "MPI_Address(NULL)");
    CHECK_CLASS(MPI_Type_extent(MPI_DATATYPE_NULL, &ext), MPI_ERR_TYPE,
                "MPI_Type_extent(MPI_DATATYPE_NULL)");
    CHECK_CLASS(MPI_Type_hvector(-1, 1, 4, MPI_INT, &hv), MPI_ERR_COUNT, "MPI_Type_hvector(-1)");
    CHECK_CLASS(MPI_Type_struct(1, bl, disp, NULL, &st), MPI_ERR_ARG, "MPI_Type_struct(NULL)");
}

static void removed_errhandler_calls(void)
{
    MPI_Errhandler eh, got;
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    CHECK_OK(MPI_Errhandler_create(count_calls, &eh), "MPI_Errhandler_create");
    CHECK_OK(MPI_Errhandler_set(dup, eh), "MPI_Errhandler_set");
    CHECK_OK(MPI_Errhandler_get(dup, &got), "MPI_Errhandler_get");
    CHECK(got == eh, "MPI_Errhandler_get gave another handler");
    MPI_Comm_get_errhandler(dup, &got);
    CHECK(got == eh, "MPI_Comm_get_errhandler disagrees with MPI_Errhandler_set");
    handler_calls = 0;
    int rc = MPI_Send(&handler_code, 1, MPI_INT, 1 << 20, 0, dup);
    CHECK_CLASS(rc, MPI_ERR_RANK, "send to a rank out of range");
    CHECK(handler_calls == 1, "the handler ran %d times", handler_calls);
    MPI_Errhandler_free(&eh);
    CHECK_CLASS(MPI_Errhandler_set(dup, (MPI_Errhandler)0x7777), MPI_ERR_ARG,
                "MPI_Errhandler_set of no handler");
    MPI_Errhandler_set(dup, MPI_ERRORS_RETURN);
    CHECK_CLASS(MPI_Errhandler_create(NULL, &eh), MPI_ERR_ARG, "MPI_Errhandler_create(NULL)");
    CHECK_CLASS(MPI_Errhandler_get(dup, NULL), MPI_ERR_ARG, "MPI_Errhandler_get(NULL)");
    MPI_Comm_free(&dup);
}

/* `early` was made by MPI_Session_create_errhandler before MPI_Init (MPI allows that call
 * before initialization), and `early_rc` is what it returned. */
static void session_errhandlers(int early_rc, MPI_Errhandler early)
{
    MPI_Session session;
    MPI_Errhandler eh, got;
    CHECK_OK(early_rc, "MPI_Session_create_errhandler before MPI_Init");
#ifdef FERRY_MPI_H
    /* (MPICH 4.0.2 does not run the handler given to MPI_Session_init.) */
    CHECK_OK(MPI_Session_init(MPI_INFO_NULL, early, &session), "MPI_Session_init");
    handler_calls = 0;
    CHECK_OK(MPI_Session_call_errhandler(session, MPI_ERR_OTHER), "MPI_Session_call_errhandler");
    CHECK(handler_calls == 1, "the handler made before MPI_Init ran %d times", handler_calls);
    MPI_Session_finalize(&session);
#endif
    MPI_Errhandler_free(&early);

#ifdef FERRY_MPI_H
    /* (MPICH 4.0.2 refuses MPI_ERRHANDLER_NULL in MPI_Session_init.) */
    CHECK_OK(MPI_Session_init(MPI_INFO_NULL, MPI_ERRHANDLER_NULL, &session), "MPI_Session_init");
    CHECK_OK(MPI_Session_get_errhandler(session, &got), "MPI_Session_get_errhandler");
    CHECK(got == MPI_ERRORS_ARE_FATAL, "a session opened without a handler has another one");
    MPI_Session_finalize(&session);
#endif
    CHECK_OK(MPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_RETURN, &session), "MPI_Session_init");
#ifdef FERRY_MPI_H
    /* (MPICH 4.0.2 answers another handler here, and does not run a session's handler for an
     * error in a call on the session.) */
    CHECK_OK(MPI_Session_get_errhandler(session, &got), "MPI_Session_get_errhandler");
    CHECK(got == MPI_ERRORS_RETURN, "the session has another handler than it was opened with");
#endif
    CHECK_OK(MPI_Session_create_errhandler(count_session_calls, &eh),
             "MPI_Session_create_errhandler");
    CHECK_OK(MPI_Session_set_errhandler(session, eh), "MPI_Session_set_errhandler");
    MPI_Session_get_errhandler(session, &got);
    CHECK(got == eh, "MPI_Session_get_errhandler after set");

    handler_calls = 0;
    CHECK_OK(MPI_Session_call_errhandler(session, MPI_ERR_OTHER), "MPI_Session_call_errhandler");
    CHECK(handler_calls == 1 && handler_code == MPI_ERR_OTHER, "handler calls %d code %d",
          handler_calls, handler_code);
#ifdef FERRY_MPI_H
    /* An error in a call on the session goes to its handler. */
    int n = 0;
    int rc = MPI_Session_get_nth_pset(session, MPI_INFO_NULL, 99, &n, NULL);
    CHECK_CLASS(rc, MPI_ERR_ARG, "pset 99");
    CHECK(handler_calls == 2, "the session handler ran %d times", handler_calls);

    MPI_Session_set_errhandler(session, MPI_ERRORS_RETURN);
    /* MPI_ERRORS_RETURN returns: the call succeeds, as MPI_Comm_call_errhandler does. */
    CHECK_OK(MPI_Session_call_errhandler(session, MPI_ERR_COUNT),
             "MPI_Session_call_errhandler with MPI_ERRORS_RETURN");
    CHECK(handler_calls == 2, "a replaced handler ran");
#endif
    CHECK_CLASS(MPI_Session_set_errhandler(session, (MPI_Errhandler)0x7777), MPI_ERR_ARG,
                "MPI_Session_set_errhandler of no handler");
    CHECK_CLASS(MPI_Session_get_errhandler(session, NULL), MPI_ERR_ARG,
                "MPI_Session_get_errhandler(NULL)");
    CHECK_CLASS(MPI_Session_create_errhandler(NULL, &got), MPI_ERR_ARG,
                "MPI_Session_create_errhandler(NULL)");
    MPI_Errhandler_free(&eh);
    MPI_Session_finalize(&session);
#ifdef FERRY_MPI_H
    /* A finalized session is no session (the error goes to MPI_COMM_WORLD: errors return). */
    CHECK_CLASS(MPI_Session_get_errhandler(session, &got), MPI_ERR_SESSION, "MPI_SESSION_NULL");
    CHECK_CLASS(MPI_Session_call_errhandler(session, MPI_ERR_OTHER), MPI_ERR_SESSION,
                "call on MPI_SESSION_NULL");
#endif
}

static void check_f90(MPI_Datatype t, int combiner, int p, int r, MPI_Datatype like)
{
    int ni = -1, na = -1, nd = -1, comb = -1, ints[2] = {0, 0};
    MPI_Type_get_envelope(t, &ni, &na, &nd, &comb);
    int want_ni = combiner == MPI_COMBINER_F90_INTEGER ? 1 : 2;
    CHECK(comb == combiner && ni == want_ni && na == 0 && nd == 0, "envelope %d %d %d %d", ni,
          na, nd, comb);
    CHECK_OK(MPI_Type_get_contents(t, 2, 0, 0, ints, NULL, NULL), "MPI_Type_get_contents");
    if (combiner == MPI_COMBINER_F90_INTEGER)
        CHECK(ints[0] == r, "contents r %d", ints[0]);
    else
        CHECK(ints[0] == p && ints[1] == r, "contents p %d r %d", ints[0], ints[1]);
    int s1 = 0, s2 = 0;
    MPI_Aint lb, e1, e2;
    MPI_Type_size(t, &s1);
    MPI_Type_size(like, &s2);
    MPI_Type_get_extent(t, &lb, &e1);
    MPI_Type_get_extent(like, &lb, &e2);
    CHECK(s1 == s2 && e1 == e2, "size %d extent %ld, expected %d %ld", s1, (long)e1, s2,
          (long)e2);
    unsigned char out[64], in[64];
    for (int i = 0; i < 64; i++) {
        out[i] = (unsigned char)i;
        in[i] = 0xff;
    }
    MPI_Sendrecv(out, 2, t, 0, 9, in, 2, t, 0, 9, MPI_COMM_SELF, MPI_STATUS_IGNORE);
    CHECK(memcmp(out, in, 2 * s1) == 0, "a message of the F90 type arrived changed");
}

static void f90_types(void)
{
    MPI_Datatype t, again, dup;
    CHECK_OK(MPI_Type_create_f90_real(3, 10, &t), "f90_real(3, 10)");
    check_f90(t, MPI_COMBINER_F90_REAL, 3, 10, MPI_REAL4);
    MPI_Type_create_f90_real(3, 10, &again);
    CHECK(t == again, "the same arguments gave another handle");
#ifdef FERRY_MPI_H
    /* Freeing one is erroneous (it is predefined); MPICH lets it pass. */
    CHECK_CLASS(MPI_Type_free(&again), MPI_ERR_TYPE, "freeing an F90 type");
#endif
    MPI_Type_dup(t, &dup);
    int ni, na, nd, comb;
    MPI_Type_get_envelope(dup, &ni, &na, &nd, &comb);
    CHECK(comb == MPI_COMBINER_DUP, "a dup of an F90 type has combiner %d", comb);
    MPI_Type_free(&dup);

    MPI_Type_create_f90_real(7, MPI_UNDEFINED, &t);
    check_f90(t, MPI_COMBINER_F90_REAL, 7, MPI_UNDEFINED, MPI_REAL8);
    MPI_Type_create_f90_real(MPI_UNDEFINED, 300, &t);
    check_f90(t, MPI_COMBINER_F90_REAL, MPI_UNDEFINED, 300, MPI_REAL8);
    CHECK_OK(MPI_Type_create_f90_complex(6, 37, &t), "f90_complex(6, 37)");
    check_f90(t, MPI_COMBINER_F90_COMPLEX, 6, 37, MPI_COMPLEX8);
    MPI_Type_create_f90_complex(15, MPI_UNDEFINED, &t);
    check_f90(t, MPI_COMBINER_F90_COMPLEX, 15, MPI_UNDEFINED, MPI_COMPLEX16);
    CHECK_OK(MPI_Type_create_f90_integer(9, &t), "f90_integer(9)");
    check_f90(t, MPI_COMBINER_F90_INTEGER, 0, 9, MPI_INTEGER4);
    MPI_Type_create_f90_integer(10, &t);
    check_f90(t, MPI_COMBINER_F90_INTEGER, 0, 10, MPI_INTEGER8);
    MPI_Type_create_f90_integer(2, &t);
    check_f90(t, MPI_COMBINER_F90_INTEGER, 0, 2, MPI_INTEGER1);

    /* A sum over an F90 integer type is a sum over its integers. */
    MPI_Type_create_f90_integer(9, &t);
    int one = 1, total = 0, size;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK_OK(MPI_Allreduce(&one, &total, 1, t, MPI_SUM, MPI_COMM_WORLD), "allreduce");
    CHECK(total == size, "sum %d over %d processes", total, size);

    /* No type fits: an error (MPICH's class is MPI_ERR_OTHER, ferry's MPI_ERR_ARG). */
    CHECK(MPI_Type_create_f90_real(40, 10, &t) != MPI_SUCCESS, "f90_real(40, 10)");
    CHECK(MPI_Type_create_f90_real(6, 5000, &t) != MPI_SUCCESS, "f90_real(6, 5000)");
    CHECK(MPI_Type_create_f90_complex(40, MPI_UNDEFINED, &t) != MPI_SUCCESS,
          "f90_complex(40, undefined)");
    CHECK(MPI_Type_create_f90_integer(100, &t) != MPI_SUCCESS, "f90_integer(100)");
#ifdef FERRY_MPI_H
    CHECK_CLASS(MPI_Type_create_f90_real(40, 10, &t), MPI_ERR_ARG, "f90_real(40, 10)");
    CHECK_CLASS(MPI_Type_create_f90_integer(100, &t), MPI_ERR_ARG, "f90_integer(100)");
    /* Both unspecified, and a NULL result: MPICH answers the first and crashes on the second. */
    CHECK_CLASS(MPI_Type_create_f90_real(MPI_UNDEFINED, MPI_UNDEFINED, &t), MPI_ERR_ARG,
                "f90_real(undefined, undefined)");
    CHECK_CLASS(MPI_Type_create_f90_integer(4, NULL), MPI_ERR_ARG, "f90_integer(NULL)");
#endif
}

static void status_conversion(int rank)
{
    MPI_Status st, back;
    MPI_Fint f[MPI_F_STATUS_SIZE];
#ifndef OLDAPI_NO_F08
    MPI_F08_status f08, f08b;
#endif
    int n = -1;
    if (rank == 0) {
        double d[3] = {1, 2, 3};
        MPI_Send(d, 3, MPI_DOUBLE, 1, 17, MPI_COMM_WORLD);
    } else if (rank == 1) {
        double d[4];
        MPI_Recv(d, 4, MPI_DOUBLE, 0, 17, MPI_COMM_WORLD, &st);
        CHECK_OK(MPI_Status_c2f(&st, f), "MPI_Status_c2f");
        CHECK(f[MPI_F_SOURCE] == 0 && f[MPI_F_TAG] == 17 && f[MPI_F_ERROR] == st.MPI_ERROR,
              "Fortran status %d %d %d", f[MPI_F_SOURCE], f[MPI_F_TAG], f[MPI_F_ERROR]);
        memset(&back, 0, sizeof back);
        CHECK_OK(MPI_Status_f2c(f, &back), "MPI_Status_f2c");
        MPI_Get_count(&back, MPI_DOUBLE, &n);
        CHECK(n == 3 && back.MPI_SOURCE == 0 && back.MPI_TAG == 17, "round trip count %d", n);

#ifndef OLDAPI_NO_F08
        CHECK_OK(MPI_Status_c2f08(&st, &f08), "MPI_Status_c2f08");
        CHECK(f08.MPI_SOURCE == 0 && f08.MPI_TAG == 17, "F08 status %d %d", f08.MPI_SOURCE,
              f08.MPI_TAG);
        memset(f, 0, sizeof f);
        CHECK_OK(MPI_Status_f082f(&f08, f), "MPI_Status_f082f");
        memset(&f08b, 0, sizeof f08b);
        CHECK_OK(MPI_Status_f2f08(f, &f08b), "MPI_Status_f2f08");
        memset(&back, 0, sizeof back);
        CHECK_OK(MPI_Status_f082c(&f08b, &back), "MPI_Status_f082c");
        n = -1;
        MPI_Get_count(&back, MPI_DOUBLE, &n);
        CHECK(n == 3 && back.MPI_TAG == 17, "round trip through F08 count %d", n);
#endif
    }
    /* The ignore values are no statuses (MPICH: MPI_ERR_OTHER, and a crash for the third). */
    CHECK(MPI_Status_c2f(MPI_STATUS_IGNORE, f) != MPI_SUCCESS, "c2f(MPI_STATUS_IGNORE)");
    CHECK(MPI_Status_f2c(MPI_F_STATUS_IGNORE, &back) != MPI_SUCCESS, "f2c(MPI_F_STATUS_IGNORE)");
#ifdef FERRY_MPI_H
    CHECK_CLASS(MPI_Status_c2f(MPI_STATUS_IGNORE, f), MPI_ERR_ARG, "c2f(MPI_STATUS_IGNORE)");
    CHECK_CLASS(MPI_Status_f2c(MPI_F_STATUS_IGNORE, &back), MPI_ERR_ARG,
                "f2c(MPI_F_STATUS_IGNORE)");
    CHECK_CLASS(MPI_Status_f2c(f, MPI_STATUS_IGNORE), MPI_ERR_ARG, "f2c to MPI_STATUS_IGNORE");
#endif
#if defined(FERRY_MPI_H) && !defined(OLDAPI_NO_F08)
    CHECK_CLASS(MPI_Status_f082c(MPI_F08_STATUS_IGNORE, &back), MPI_ERR_ARG,
                "f082c(MPI_F08_STATUS_IGNORE)");
#endif
}

int main(int argc, char **argv)
{
    int rank;
    MPI_Errhandler early = MPI_ERRHANDLER_NULL;
#ifdef FERRY_MPI_H
    /* MPI lists this call among those allowed before initialization (MPICH 4.0.2 aborts). */
    int early_rc = MPI_Session_create_errhandler(count_session_calls, &early);
    MPI_Init(&argc, &argv);
#else
    MPI_Init(&argc, &argv);
    int early_rc = MPI_Session_create_errhandler(count_session_calls, &early);
#endif
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    removed_datatype_calls(rank);
    removed_errhandler_calls();
    session_errhandlers(early_rc, early);
    f90_types();
    status_conversion(rank);
    return finish();
}
