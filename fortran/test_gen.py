#!/usr/bin/env python3
"""Tests of fortran/gen.py: the table's format, the errors it gives on bad lines, and what it
writes for a few calls. `python3 fortran/test_gen.py` (no MPI needed)."""

import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gen  # noqa: E402

MPI_H = os.path.join(HERE, "..", "crates", "mpi", "include", "mpi.h")


def table(text):
    f = tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False)
    f.write(text)
    f.close()
    try:
        return gen.parse_calls(f.name)
    finally:
        os.unlink(f.name)


class Table(unittest.TestCase):
    def test_the_committed_table_reads(self):
        calls = gen.parse_calls(os.path.join(HERE, "calls.txt"))
        names = {c.name for c in calls}
        for n in ("Send", "Irecv", "Waitall", "Allreduce", "Comm_split", "Type_create_struct", "Win_fence", "Op_create"):
            self.assertIn(n, names)

    def test_bad_lines_name_the_problem(self):
        for text, words in [
            ("Send buf:sideways:buffer\n", "name:intent:type"),
            ("Send buf:in:nothing\n", "unknown type"),
            ("Waitall count:in:int r:inout:Request[]\n", "needs its length"),
            ("Comm_get_name comm:in:Comm name:out:string\n", "C buffer size"),
            ("Send\nSend\n", "listed twice"),
        ]:
            with self.assertRaises(gen.GenError) as e:
                table(text)
            self.assertIn(words, str(e.exception))
            self.assertIn(":1" if "twice" not in words else ":2", str(e.exception))

    def test_a_procedure_argument_needs_handwritten_code(self):
        calls = table("Op_create user_fn:in:function commute:in:logical op:out:Op\n")
        with self.assertRaises(gen.GenError):
            gen.c_wrapper(calls[0])


class Output(unittest.TestCase):
    def test_constants_are_the_c_abi_values(self):
        consts = {c.name: c for c in gen.parse_constants(MPI_H)}
        self.assertEqual(consts["MPI_COMM_WORLD"].value, 0x101)
        self.assertEqual(consts["MPI_COMM_WORLD"].kind, "Comm")
        self.assertEqual(consts["MPI_ANY_SOURCE"].value, -1)
        # Fortran's string sizes do not count C's NUL
        self.assertEqual(consts["MPI_MAX_PROCESSOR_NAME"].value, 255)

    def test_wrapper_converts_handles_indices_and_strings(self):
        calls = table(
            "Waitany count:in:int array_of_requests:inout:Request[count] index:out:index status:out:Status\n"
            "Comm_set_name comm:in:Comm comm_name:in:string\n"
        )
        waitany, set_name = (gen.c_wrapper(c) for c in calls)
        self.assertIn("void pmpi_waitany_(", waitany)
        self.assertIn("FERRY_C2F_INOUT_Request(", waitany)
        self.assertIn("ferry_f_indices(index, 1)", waitany)
        self.assertIn("ferry_f_status(status)", waitany)
        self.assertIn("size_t comm_name_len)", set_name)
        self.assertIn("ierror", set_name)

    def test_f08_interface_has_an_optional_ierror_and_handle_types(self):
        call = table("Comm_dup comm:in:Comm newcomm:out:Comm\n")[0]
        text = "\n".join(gen.f_interface(call, "f08", "MPI_Comm_dup_f08"))
        self.assertIn("TYPE(MPI_Comm), INTENT(OUT) :: newcomm", text)
        self.assertIn("INTEGER, OPTIONAL, INTENT(OUT) :: ierror", text)

    def test_f08_buffers_are_descriptors_with_their_own_count_and_type(self):
        isend, allreduce, gatherv, pack_ext = table(
            "Isend buf:in:buffer count:in:int datatype:in:Datatype dest:in:int tag:in:int comm:in:Comm request:out:Request\n"
            "Allreduce sendbuf:in:buffer recvbuf:out:buffer count:in:int datatype:in:Datatype op:in:Op comm:in:Comm\n"
            "Gatherv sendbuf:in:buffer sendcount:in:int sendtype:in:Datatype recvbuf:out:buffer recvcounts:in:int[] "
            "displs:in:int[] recvtype:in:Datatype root:in:int comm:in:Comm\n"
            "Pack_external datarep:in:string inbuf:in:buffer incount:in:int datatype:in:Datatype outbuf:out:buffer "
            "outsize:in:aint position:inout:aint\n"
        )
        text = "\n".join(gen.f_interface(isend, "f08", "MPI_Isend_f08"))
        self.assertIn('BIND(C, NAME="mpi_isend_f08ts_")', text)
        self.assertIn("TYPE(*), DIMENSION(..), ASYNCHRONOUS :: buf", text)
        c = gen.c_wrapper_descriptors(isend)
        self.assertIn("void pmpi_isend_f08ts_(CFI_cdesc_t *buf_d, MPI_Fint *count", c)
        self.assertIn("MPI_Isend(choice0[0].base, choice0[0].count, choice0[0].type,", c)
        self.assertNotIn("FERRY_F_CHOICE_BLOCKING", c)  # nonblocking: no copy may stand in
        self.assertIn("MPI_Comm_call_errhandler(FERRY_F2C(Comm, *comm), fail)", c)
        # One count and datatype for two buffers: one group, both get the same.
        c = gen.c_wrapper_descriptors(allreduce)
        self.assertIn("ferry_f_choice_typed(choice0, choice0_d, choice0_f, 2,", c)
        self.assertIn("FERRY_F_CHOICE_BLOCKING | FERRY_F_CHOICE_OUTPUT", c)
        # Per-process counts: the receive buffer has no count of its own.
        c = gen.c_wrapper_descriptors(gatherv)
        self.assertIn("ferry_f_choice_raw(choice1, choice1_d[0]", c)
        self.assertIn("recvcounts, displs, FERRY_F2C(Datatype, *recvtype)", c)
        # A CHARACTER argument keeps the call on the old interface (no BIND(C)).
        self.assertFalse(gen.descriptor_buffers(pack_ext))
        self.assertIn("DIMENSION(*)", "\n".join(gen.f_interface(pack_ext, "f08", "MPI_Pack_external_f08")))

    def test_mpif_h_reads_as_fixed_form(self):
        text = gen.mpif_h(gen.parse_constants(MPI_H), [])
        for line in text.splitlines():
            if not line.startswith("!"):
                self.assertLessEqual(len(line.rstrip("&").rstrip()), 72, line)
                self.assertTrue(line.startswith("      ") or line.startswith("     &"), line)


if __name__ == "__main__":
    unittest.main()
