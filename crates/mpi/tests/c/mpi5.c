/* The calls MPI 5.0 added with its standard ABI: MPI_Abi_*, handles as ints, status fields,
 * MPI_Request_get_status_any/_all/_some, buffers of communicators and sessions (also
 * MPI_BUFFER_AUTOMATIC) with their flush calls, MPI_Remove_error_*, MPI_Type_get_value_index
 * and MPI_Get_hw_resource_info. Two processes. */
#include "mtest.h"

static void info_value(MPI_Info info, const char *key, char *value, int *flag)
{
    int len = MPI_MAX_INFO_VAL;
    MPI_Info_get_string(info, key, &len, value, flag);
}

static void abi_queries(void)
{
    int major = -1, minor = -1, v = 0, sv = 0, flag = 0;
    char value[MPI_MAX_INFO_VAL];
    MPI_Abi_get_version(&major, &minor);
    CHECK(major == MPI_ABI_VERSION && minor == MPI_ABI_SUBVERSION, "ABI %d.%d", major, minor);
    MPI_Get_version(&v, &sv);
    CHECK(v == 5 && sv == 0 && v == MPI_VERSION, "MPI %d.%d", v, sv);

    MPI_Info info;
    MPI_Abi_get_info(&info);
    info_value(info, "mpi_aint_size", value, &flag);
    CHECK(flag && atoi(value) == (int)sizeof(MPI_Aint), "mpi_aint_size %s", flag ? value : "-");
    info_value(info, "mpi_count_size", value, &flag);
    CHECK(flag && atoi(value) == (int)sizeof(MPI_Count), "mpi_count_size");
    info_value(info, "mpi_offset_size", value, &flag);
    CHECK(flag && atoi(value) == (int)sizeof(MPI_Offset), "mpi_offset_size");
    MPI_Info_free(&info);

    MPI_Abi_get_fortran_info(&info);
    info_value(info, "mpi_logical_size", value, &flag);
    CHECK(flag && strcmp(value, "4") == 0, "mpi_logical_size");
    MPI_Info_free(&info);
    MPI_Info_create(&info);
    MPI_Info_set(info, "mpi_logical_size", "8");
    MPI_Abi_set_fortran_info(info);
    MPI_Info_free(&info);
    MPI_Abi_get_fortran_info(&info);
    info_value(info, "mpi_logical_size", value, &flag);
    CHECK(flag && strcmp(value, "8") == 0, "mpi_logical_size after set: %s", value);
    info_value(info, "mpi_integer_size", value, &flag);
    CHECK(flag && strcmp(value, "4") == 0, "mpi_integer_size kept");
    MPI_Info_free(&info);

    int t = -1, f = -1, is_set = -1;
    MPI_Abi_get_fortran_booleans(4, &t, &f, &is_set);
    CHECK(is_set == 0, "booleans set before any set: %d", is_set);
    int mytrue = -1, myfalse = 0;
    MPI_Abi_set_fortran_booleans(4, &mytrue, &myfalse);
    MPI_Abi_get_fortran_booleans(4, &t, &f, &is_set);
    CHECK(is_set == 1 && t == -1 && f == 0, "booleans %d %d %d", is_set, t, f);
    int rc = MPI_Abi_set_fortran_booleans(3, &mytrue, &myfalse);
    CHECK_CLASS(rc, MPI_ERR_ARG, "logical_size 3");

    MPI_Get_hw_resource_info(&info);
    info_value(info, "mpi_shared_memory", value, &flag);
    CHECK(flag && strcmp(value, "true") == 0, "hw resource mpi_shared_memory");
    MPI_Info_free(&info);
}

static void handles_as_ints(void)
{
    MPI_Comm dup;
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    CHECK(MPI_Comm_fromint(MPI_Comm_toint(dup)) == dup, "Comm toint/fromint");
    CHECK(MPI_Comm_fromint(MPI_Comm_toint(MPI_COMM_WORLD)) == MPI_COMM_WORLD, "WORLD");
    CHECK(MPI_Type_fromint(MPI_Type_toint(MPI_INT)) == MPI_INT, "Type");
    CHECK(MPI_Op_fromint(MPI_Op_toint(MPI_SUM)) == MPI_SUM, "Op");
    CHECK(MPI_Info_toint(MPI_INFO_NULL) == MPI_Info_c2f(MPI_INFO_NULL), "same as c2f");
    MPI_Comm_free(&dup);
}

static void status_fields(void)
{
    MPI_Status st;
    int v = 0;
    MPI_Status_set_source(&st, 3);
    MPI_Status_set_tag(&st, 44);
    MPI_Status_set_error(&st, MPI_ERR_TAG);
    CHECK(st.MPI_SOURCE == 3 && st.MPI_TAG == 44 && st.MPI_ERROR == MPI_ERR_TAG, "set fields");
    MPI_Status_get_source(&st, &v);
    CHECK(v == 3, "source %d", v);
    MPI_Status_get_tag(&st, &v);
    CHECK(v == 44, "tag %d", v);
    MPI_Status_get_error(&st, &v);
    CHECK(v == MPI_ERR_TAG, "error %d", v);
}

static void request_queries(int rank)
{
    int peer = 1 - rank, x = rank, y = -1;
    MPI_Request reqs[3] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    int index = -2, flag = -1, outcount = -1, indices[3];
    MPI_Status st, sts[3];

    /* Only null requests: flag set, index and outcount MPI_UNDEFINED. */
    MPI_Request_get_status_any(3, reqs, &index, &flag, &st);
    CHECK(flag == 1 && index == MPI_UNDEFINED, "any of nulls: %d %d", flag, index);
    MPI_Request_get_status_some(3, reqs, &outcount, indices, sts);
    CHECK(outcount == MPI_UNDEFINED, "some of nulls: %d", outcount);
    MPI_Request_get_status_all(3, reqs, &flag, sts);
    CHECK(flag == 1, "all of nulls");

    /* A receive that cannot match until the peer sends after a barrier. */
    MPI_Irecv(&y, 1, MPI_INT, peer, 7, MPI_COMM_WORLD, &reqs[1]);
    MPI_Request_get_status_any(3, reqs, &index, &flag, &st);
    CHECK(flag == 0 && index == MPI_UNDEFINED, "any before the send: %d %d", flag, index);
    MPI_Request_get_status_all(3, reqs, &flag, sts);
    CHECK(flag == 0, "all before the send");
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Send(&x, 1, MPI_INT, peer, 7, MPI_COMM_WORLD);
    do {
        MPI_Request_get_status_any(3, reqs, &index, &flag, &st);
    } while (!flag);
    CHECK(index == 1 && st.MPI_SOURCE == peer && st.MPI_TAG == 7, "any: %d %d %d", index,
          st.MPI_SOURCE, st.MPI_TAG);
    CHECK(reqs[1] != MPI_REQUEST_NULL, "get_status_any freed the request");
    MPI_Request_get_status_some(3, reqs, &outcount, indices, sts);
    CHECK(outcount == 1 && indices[0] == 1 && sts[0].MPI_SOURCE == peer, "some: %d", outcount);
    MPI_Request_get_status_all(3, reqs, &flag, sts);
    CHECK(flag == 1 && sts[1].MPI_TAG == 7, "all after the send");
    MPI_Wait(&reqs[1], &st);
    CHECK(y == peer && st.MPI_SOURCE == peer, "received %d", y);
}

static void buffers(int rank)
{
    int peer = 1 - rank, x = 5, y = 0, two[2] = {1, 2}, rc, size = -1;
    char small[MPI_BSEND_OVERHEAD + sizeof(int)];
    void *addr = NULL;
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);

    /* No buffer anywhere: MPI_ERR_BUFFER. */
    rc = MPI_Bsend(&x, 1, MPI_INT, peer, 1, comm);
    CHECK_CLASS(rc, MPI_ERR_BUFFER, "Bsend without a buffer");

    /* A communicator's buffer holds a message of one int, not of two. */
    MPI_Comm_attach_buffer(comm, small, sizeof small);
    rc = MPI_Bsend(&x, 1, MPI_INT, peer, 1, comm);
    CHECK(rc == MPI_SUCCESS, "Bsend on the comm buffer: %d", rc);
    rc = MPI_Bsend(two, 2, MPI_INT, peer, 1, comm);
    CHECK_CLASS(rc, MPI_ERR_BUFFER, "two ints overrun the comm buffer");
    MPI_Recv(&y, 1, MPI_INT, peer, 1, comm, MPI_STATUS_IGNORE);
    MPI_Comm_flush_buffer(comm);
    MPI_Comm_detach_buffer(comm, &addr, &size);
    CHECK(addr == small && size == (int)sizeof small, "comm detach: %p %d", addr, size);

    /* MPI_BUFFER_AUTOMATIC: as many as the sends need. */
    MPI_Comm_attach_buffer(comm, MPI_BUFFER_AUTOMATIC, 0);
    for (int i = 0; i < 20; i++) {
        rc = MPI_Bsend(&x, 1, MPI_INT, peer, 2, comm);
        CHECK(rc == MPI_SUCCESS, "automatic Bsend %d: %d", i, rc);
    }
    for (int i = 0; i < 20; i++)
        MPI_Recv(&y, 1, MPI_INT, peer, 2, comm, MPI_STATUS_IGNORE);
    MPI_Request req;
    MPI_Comm_iflush_buffer(comm, &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    MPI_Comm_detach_buffer(comm, &addr, &size);
    CHECK(addr == MPI_BUFFER_AUTOMATIC, "automatic detach gives MPI_BUFFER_AUTOMATIC");

    /* The process's buffer, flushed. */
    MPI_Buffer_attach(MPI_BUFFER_AUTOMATIC, 0);
    MPI_Bsend(&x, 1, MPI_INT, peer, 3, comm);
    MPI_Recv(&y, 1, MPI_INT, peer, 3, comm, MPI_STATUS_IGNORE);
    MPI_Buffer_flush();
    MPI_Buffer_iflush(&req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    MPI_Buffer_detach(&addr, &size);
    CHECK(addr == MPI_BUFFER_AUTOMATIC, "process detach");
    MPI_Comm_free(&comm);

    /* A session's buffer serves communicators made from its groups. */
    MPI_Session session;
    MPI_Group group;
    MPI_Comm scomm;
    MPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_RETURN, &session);
    MPI_Group_from_session_pset(session, "mpi://WORLD", &group);
    MPI_Comm_create_from_group(group, "mpi5-buffers", MPI_INFO_NULL, MPI_ERRORS_RETURN, &scomm);
    MPI_Session_attach_buffer(session, small, sizeof small);
    rc = MPI_Bsend(&x, 1, MPI_INT, peer, 4, scomm);
    CHECK(rc == MPI_SUCCESS, "Bsend on the session's buffer: %d", rc);
    rc = MPI_Bsend(two, 2, MPI_INT, peer, 4, scomm);
    CHECK_CLASS(rc, MPI_ERR_BUFFER, "two ints overrun the session buffer");
    MPI_Recv(&y, 1, MPI_INT, peer, 4, scomm, MPI_STATUS_IGNORE);
    MPI_Session_flush_buffer(session);
    MPI_Session_iflush_buffer(session, &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    MPI_Session_detach_buffer(session, &addr, &size);
    CHECK(addr == small && size == (int)sizeof small, "session detach");
    MPI_Comm_free(&scomm);
    MPI_Group_free(&group);
    MPI_Session_finalize(&session);
}

static void error_removal(void)
{
    int cls, code, len, rc;
    char text[MPI_MAX_ERROR_STRING];
    MPI_Add_error_class(&cls);
    MPI_Add_error_code(cls, &code);
    MPI_Add_error_string(code, "a code to remove");
    rc = MPI_Remove_error_class(cls);
    CHECK_CLASS(rc, MPI_ERR_ARG, "class with a code left");
    MPI_Remove_error_string(code);
    MPI_Error_string(code, text, &len);
    CHECK(len == 0, "string left after removal: %s", text);
    rc = MPI_Remove_error_string(code);
    CHECK_CLASS(rc, MPI_ERR_ARG, "second string removal");
    CHECK(MPI_Remove_error_code(code) == MPI_SUCCESS, "remove code");
    rc = MPI_Error_class(code, &len);
    CHECK_CLASS(rc, MPI_ERR_ARG, "removed code still known");
    CHECK(MPI_Remove_error_class(cls) == MPI_SUCCESS, "remove class");
    rc = MPI_Remove_error_class(MPI_ERR_TAG);
    CHECK_CLASS(rc, MPI_ERR_ARG, "predefined class");
}

static void value_index(void)
{
    MPI_Datatype t;
    MPI_Type_get_value_index(MPI_DOUBLE, MPI_INT, &t);
    CHECK(t == MPI_DOUBLE_INT, "DOUBLE, INT");
    MPI_Type_get_value_index(MPI_INT, MPI_INT, &t);
    CHECK(t == MPI_2INT, "INT, INT");
    MPI_Type_get_value_index(MPI_INTEGER, MPI_INTEGER, &t);
    CHECK(t == MPI_2INTEGER, "INTEGER, INTEGER");
    MPI_Type_get_value_index(MPI_CHAR, MPI_INT, &t);
    CHECK(t == MPI_DATATYPE_NULL, "CHAR, INT has no pair type");
}

int main(int argc, char **argv)
{
    int rank;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    /* Calls not on a communicator report to MPI_COMM_WORLD's handler. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    abi_queries();
    handles_as_ints();
    status_fields();
    request_queries(rank);
    buffers(rank);
    error_removal();
    value_index();
    return finish();
}
