#!/usr/bin/env python3
"""Writes ferry's Fortran bindings from fortran/calls.txt and ferry's mpi.h.

    fortran/gen.py --mpi-h crates/mpi/include/mpi.h --out DIR

DIR receives:
  mpif.h          constants, sentinels and function types for `include 'mpif.h'`
  mpi.f90         module `mpi`: the same constants and explicit interfaces
  mpi_f08.f90     module `mpi_f08`: TYPE(MPI_Comm) etc., TYPE(MPI_Status), interfaces with an
                  optional ierror, bound to the same C entry points (`mpi_send_f08_`)
  mpi_fortran.c   the C entry points of libmpifort.so in gfortran's convention
                  (`pmpi_send_`, with `mpi_send_` and `mpi_send_f08_` as aliases)

Constants come from mpi.h (so the Fortran values are the C ABI's: a predefined handle's Fortran
integer is its C value); the calls from calls.txt (format described at its top). Anything in
either that this script cannot read is an error naming the line, not a silent omission.
"""

import argparse
import os
import re
import sys
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
HANDLES = ["Comm", "Datatype", "Group", "Request", "Op", "Info", "Errhandler", "Win", "File", "Message", "Session"]
NULLS = {
    "Comm": "MPI_COMM_NULL", "Datatype": "MPI_DATATYPE_NULL", "Group": "MPI_GROUP_NULL",
    "Request": "MPI_REQUEST_NULL", "Op": "MPI_OP_NULL", "Info": "MPI_INFO_NULL",
    "Errhandler": "MPI_ERRHANDLER_NULL", "Win": "MPI_WIN_NULL", "File": "MPI_FILE_NULL",
    "Message": "MPI_MESSAGE_NULL", "Session": "MPI_SESSION_NULL",
}
SCALARS = {"int": "MPI_Fint", "logical": "MPI_Fint", "index": "MPI_Fint", "aint": "MPI_Aint", "offset": "MPI_Offset", "count": "MPI_Count", "weights": "MPI_Fint"}
FKIND = {"int": "INTEGER", "logical": "LOGICAL", "weights": "INTEGER", "index": "INTEGER",
         "aint": "INTEGER(KIND=MPI_ADDRESS_KIND)", "offset": "INTEGER(KIND=MPI_OFFSET_KIND)",
         "count": "INTEGER(KIND=MPI_COUNT_KIND)"}
# Handle values below this are predefined: the MPI 5.0 ABI gives them small constants, and
# their Fortran integer is that value (MPI_Comm_c2f(MPI_COMM_WORLD) == 0x101 in ferry).
PREDEFINED_END = 0x400


class GenError(Exception):
    pass


@dataclass
class Arg:
    name: str
    intent: str
    base: str  # int, Comm, buffer, string, Status, ...
    array: bool
    length: str  # handle arrays: C expression of the element count; strings out: buffer size


@dataclass
class Call:
    name: str  # Send
    args: list
    custom: bool
    result: str  # "" (subroutine with ierror), "double" or "aint"
    origin: str

    @property
    def lower(self):
        return self.name.lower()

    @property
    def large_count(self):
        """A _c form: in mpi_f08's generic of its base name only."""
        return self.name.endswith("_c")

    def signature(self):
        """What tells two specifics of a generic apart: the type, kind and rank of every
        argument but the choice buffers (which take anything)."""
        kind8 = {"aint", "offset", "count"}
        return tuple(("i8" if a.base in kind8 else a.base if a.base not in ("index", "weights") else "int", a.array)
                     for a in self.args if a.base not in ("buffer", "cptr"))


def parse_calls(path):
    calls, seen = [], set()
    with open(path) as f:
        for no, raw in enumerate(f, 1):
            line = raw.split("#", 1)[0].split()
            if not line:
                continue
            origin = f"{path}:{no}"
            name, custom, result, args = line[0], False, "", []
            for w in line[1:]:
                if w.startswith("@custom"):
                    custom = True
                    result = w.partition("=")[2]
                    if result not in ("", "double", "aint"):
                        raise GenError(f"{origin}: unknown result type in {w!r}")
                    continue
                parts = w.split(":")
                if len(parts) != 3 or parts[1] not in ("in", "out", "inout"):
                    raise GenError(f"{origin}: expected name:intent:type, got {w!r}")
                an, intent, ty = parts
                m = re.fullmatch(r"(\w+)(?:\[(.*)\])?", ty)
                if not m:
                    raise GenError(f"{origin}: bad type {ty!r}")
                base, length = m.group(1), m.group(2)
                known = set(SCALARS) | set(HANDLES) | {"buffer", "cptr", "string", "strings", "strings2", "Status", "function"}
                if base not in known:
                    raise GenError(f"{origin}: unknown type {base!r} of {an}")
                array = length is not None and base != "string"
                if base in HANDLES and array and not length:
                    raise GenError(f"{origin}: an array of handles needs its length: {w!r}")
                if base == "string" and intent != "in" and not length and not custom:
                    raise GenError(f"{origin}: an output string needs its C buffer size: {w!r}")
                args.append(Arg(an, intent, base, array, length or ""))
            if name in seen:
                raise GenError(f"{origin}: {name} is listed twice")
            seen.add(name)
            calls.append(Call(name, args, custom, result, origin))
    return calls


# ---- Choice buffers as descriptors (mpi_f08, MPI_SUBARRAYS_SUPPORTED) ---------------------

# The (count, datatype) arguments a choice buffer may have, by the buffer's name.
CHOICE_PAIRS = {
    "buf": [("count", "datatype")], "buffer": [("count", "datatype")],
    "sendbuf": [("sendcount", "sendtype"), ("count", "datatype")],
    "recvbuf": [("recvcount", "recvtype"), ("count", "datatype")],
    "inbuf": [("incount", "datatype"), ("count", "datatype")], "inoutbuf": [("count", "datatype")],
    "outbuf": [("outcount", "datatype")],
    "origin_addr": [("origin_count", "origin_datatype")], "result_addr": [("result_count", "result_datatype")],
}
# Arguments a BIND(C) interface cannot take as they are passed today (CHARACTER lengths after
# the arguments, gfortran's LOGICAL, procedures).
NOT_INTEROPERABLE = {"string", "strings", "strings2", "function", "logical", "cptr"}


def descriptor_buffers(call):
    """Whether mpi_f08 passes this call's choice buffers as TS 29113 descriptors."""
    return (not call.custom and any(a.base == "buffer" for a in call.args)
            and not any(a.base in NOT_INTEROPERABLE for a in call.args))


def nonblocking(call):
    """Whether the call may use its buffers after it returns (requests, persistent and split
    operations, one-sided origin buffers and windows, attached buffers)."""
    n = call.name
    return bool(re.match(r"I[a-z]|File_i|R(put|get|accumulate|get_accumulate)$", n)) or n.endswith(
        ("_init", "_begin", "_end")) or n in ("Put", "Get", "Accumulate", "Get_accumulate", "Fetch_and_op",
                                              "Compare_and_swap", "Win_create", "Win_attach", "Win_detach")


def choice_groups(call):
    """The call's choice buffers by the (count, datatype) that describes them: a list of
    ((count, datatype) or None, [buffer names]); None: no scalar pair of its own (per-process
    counts, byte sizes, windows), each such buffer alone."""
    args = {a.name: a for a in call.args}
    groups, raw = {}, []
    for a in call.args:
        if a.base != "buffer":
            continue
        for c, t in CHOICE_PAIRS.get(a.name, []):
            if (c in args and t in args and args[c].base in ("int", "count") and not args[c].array
                    and args[t].base == "Datatype" and not args[t].array):
                groups.setdefault((c, t), []).append(a.name)
                break
        else:
            raw.append([a.name])
    return list(groups.items()) + [(None, r) for r in raw]


# ---- Constants from mpi.h ---------------------------------------------------------------------


@dataclass
class Const:
    name: str
    value: int
    kind: str  # "int", "offset" or a handle type


def parse_constants(mpi_h):
    """Every integer and handle constant of mpi.h (#define or enum member), MPI_T_ aside."""
    text = open(mpi_h).read()
    text = text.split("/* ---- Callback types", 1)[0]
    raw = {}
    for m in re.finditer(r"^#define\s+(MPIX?_\w+)[ \t]+(.+?)\s*(?:/\*.*)?$", text, re.M):
        raw[m.group(1)] = m.group(2).strip()
    for body in re.findall(r"enum\s*\{(.*?)\}", text, re.S):
        body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
        for item in body.split(","):
            item = item.strip()
            if item:
                n, _, v = item.partition("=")
                raw[n.strip()] = v.strip()
    consts = {}

    def value(name, depth=0):
        v = raw[name]
        m = re.fullmatch(r"\(\(MPI_(\w+)\)\s*(-?(?:0x[0-9a-fA-F]+|\d+))\)", v)
        if m and m.group(1) in HANDLES:
            return int(m.group(2), 0), m.group(1)
        if m and m.group(1) == "Offset":
            return int(m.group(2), 0), "offset"
        if re.fullmatch(r"-?(0x[0-9a-fA-F]+|\d+)", v):
            return int(v, 0), "int"
        if v in raw and depth < 4:
            return value(v, depth + 1)
        return None

    for name in raw:
        if name.startswith(("MPI_T_", "MPI_F_", "MPI_F08_", "MPIX_")) or not raw[name]:
            continue
        got = value(name)
        if got is None:
            continue  # pointer sentinels and function constants: Fortran has its own
        v, kind = got
        if kind in HANDLES and not 0 <= v < PREDEFINED_END:
            raise GenError(f"{mpi_h}: {name} = {v:#x} is not below {PREDEFINED_END:#x}, where the wrappers expect predefined handles")
        if kind == "int" and not -(2**31) <= v < 2**31:
            continue
        # C's string sizes count the NUL; Fortran's do not (MPI 4.1 §19.1.2... "one less").
        if re.fullmatch(r"MPI_MAX_\w+_(STRING|NAME|KEY|VAL|LEN)", name):
            v -= 1
        consts[name] = Const(name, v, kind)
    # MPI-1's Fortran combiners. ferry's MPI_TYPE_HVECTOR, _HINDEXED and _STRUCT of Fortran
    # make their types with the MPI-2 calls, so these name the same combiners.
    for old, new in (("MPI_COMBINER_HVECTOR_INTEGER", "MPI_COMBINER_HVECTOR"),
                     ("MPI_COMBINER_HINDEXED_INTEGER", "MPI_COMBINER_HINDEXED"),
                     ("MPI_COMBINER_STRUCT_INTEGER", "MPI_COMBINER_STRUCT")):
        if new in consts and old not in consts:
            consts[old] = Const(old, consts[new].value, "int")
    for n in ("MPI_COMM_WORLD", "MPI_INTEGER", "MPI_DOUBLE_PRECISION", "MPI_SUM", "MPI_SUCCESS", "MPI_ANY_SOURCE"):
        if n not in consts:
            raise GenError(f"{mpi_h}: {n} not found: is this ferry's mpi.h?")
    return list(consts.values())


# ---- C ---------------------------------------------------------------------------------------


def c2f_inout(h, before, after):
    """A handle that went in as `before` and came back as `after` (C), as a Fortran integer."""
    if h == "Request":
        return f"FERRY_C2F_INOUT_Request({before}, {after})"
    return f"FERRY_C2F_INOUT({h}, {before}, {after})"


def c_wrapper(call):
    params, post_len, pre, cargs, post, cleanup = [], [], [], [], [], []
    has_flag = any(a.name == "flag" and a.intent == "out" for a in call.args)
    for a in call.args:
        n = a.name
        if a.base == "buffer":
            params.append(f"void *{n}")
            cargs.append(f"ferry_f_buf({n})")
        elif a.base == "cptr":
            params.append(f"void *{n}")
            cargs.append(n)
        elif a.base in ("function", "strings", "strings2"):
            raise GenError(f"{call.origin}: {call.name} takes a procedure: mark it @custom")
        elif a.base == "string":
            params.append(f"char *{n}")
            post_len.append(f"size_t {n}_len")
            if a.intent == "in":
                conv = "ferry_f_str_in_stripped" if call.name.startswith("Info_") else "ferry_f_str_in"
                pre.append(f"char *{n}_c = {conv}({n}, {n}_len);")
                pre.append(f"if (!{n}_c) ok = 0;")
            else:
                # The size is a C expression over the entry point's own (pointer) arguments,
                # such as `*valuelen+1`, or a constant of mpi.h.
                pre.append(f"char *{n}_c = ferry_f_str_buf((MPI_Aint)({a.length}));")
                pre.append(f"if (!{n}_c) ok = 0;")
                cond = "rc == MPI_SUCCESS && *flag" if has_flag else "rc == MPI_SUCCESS"
                post.append(f"if ({cond}) ferry_f_str_out({n}, {n}_len, {n}_c);")
            cleanup.append(f"free({n}_c);")
            cargs.append(f"{n}_c")
        elif a.base == "Status":
            params.append(f"MPI_Fint *{n}")
            cargs.append(f"ferry_f_statuses({n})" if a.array else f"ferry_f_status({n})")
        elif a.base in HANDLES:
            params.append(f"MPI_Fint *{n}")
            h = a.base
            if a.array:
                length = a.length
                m = re.fullmatch(r"@(send|recv|size)\((\w+)\)", length)
                if m:
                    which = {"send": "FERRY_F_OUT", "recv": "FERRY_F_IN", "size": "FERRY_F_ALL"}[m.group(1)]
                    length = f"ferry_f_peers({m.group(2)}, {which})"
                elif re.fullmatch(r"\w+", length):
                    length = f"*{length}"
                pre.append(f"MPI_{h} {n}_s[FERRY_F_SMALL]; int {n}_n = {length};")
                pre.append(f"MPI_{h} *{n}_c = ferry_f_handles({n}_s, {n}_n, sizeof(MPI_{h}));")
                pre.append(f"if (!{n}_c) ok = 0;")
                if a.intent in ("in", "inout"):
                    pre.append(f"if ({n}_c) for (int i = 0; i < {n}_n; i++) {n}_c[i] = FERRY_F2C({h}, {n}[i]);")
                else:
                    pre.append(f"if ({n}_c) for (int i = 0; i < {n}_n; i++) {n}_c[i] = {NULLS[h]};")
                if a.intent == "inout":
                    post.append(f"if (ok) for (int i = 0; i < {n}_n; i++) {n}[i] = {c2f_inout(h, f'{n}[i]', f'{n}_c[i]')};")
                elif a.intent == "out":
                    post.append(f"if (rc == MPI_SUCCESS) for (int i = 0; i < {n}_n; i++) {n}[i] = FERRY_C2F({h}, {n}_c[i]);")
                cleanup.append(f"if ({n}_c != {n}_s) free({n}_c);")
                cargs.append(f"{n}_c")
            elif a.intent == "in":
                cargs.append(f"FERRY_F2C({h}, *{n})")
            else:
                init = f"FERRY_F2C({h}, *{n})" if a.intent == "inout" else NULLS[h]
                pre.append(f"MPI_{h} {n}_c = {init};")
                cargs.append(f"&{n}_c")
                if a.intent == "inout":
                    post.append(f"if (ok) *{n} = {c2f_inout(h, f'*{n}', f'{n}_c')};")
                else:
                    post.append(f"if (rc == MPI_SUCCESS) *{n} = FERRY_C2F({h}, {n}_c);")
        else:
            ctype = SCALARS[a.base]
            params.append(f"{ctype} *{n}")
            if a.base == "weights":
                cargs.append(f"ferry_f_weights({n})")
            elif a.base == "index":  # Fortran counts requests from 1
                cargs.append(n)
                if a.array:
                    post.append(f"if (rc == MPI_SUCCESS || rc == MPI_ERR_IN_STATUS) ferry_f_indices({n}, *{a.length});")
                else:
                    post.append(f"if (rc == MPI_SUCCESS || rc == MPI_ERR_IN_STATUS) ferry_f_indices({n}, 1);")
            elif a.array and n == "ranges":  # MPI_Group_range_incl/excl: int ranges[][3]
                cargs.append(f"(int (*)[3]){n}")
            elif a.array or a.intent != "in":
                cargs.append(n)
                if a.base == "logical" and not a.array:
                    post.append(f"if (rc == MPI_SUCCESS) *{n} = *{n} ? FERRY_F_TRUE : FERRY_F_FALSE;")
            else:
                cargs.append(f"*{n}")
    params.append("MPI_Fint *ierror")
    params += post_len
    name = f"pmpi_{call.lower}_"
    out = [f"void {name}({', '.join(params)})", "{"]
    if pre:
        out.append("    int ok = 1;")
        out += [f"    {p}" for p in pre]
        out.append(f"    int rc = ok ? MPI_{call.name}({', '.join(cargs)}) : MPI_ERR_NO_MEM;")
    else:
        out.append(f"    int rc = MPI_{call.name}({', '.join(cargs)});")
    out += [f"    {p}" for p in post + cleanup]
    out.append("    if (ierror)")
    out.append("        *ierror = rc;")
    out.append("}")
    return "\n".join(out)


def c_wrapper_descriptors(call):
    """mpi_f08's entry point of a call with descriptor buffers (pmpi_send_f08ts_): each buffer
    becomes an address, and a strided section a datatype or a copy (choice.c); then the same
    conversions as the other entry points."""
    base = c_wrapper(call)
    lines = base.split("\n")
    blocking = not nonblocking(call)
    pre, subst, cleanup = [], {}, []
    for gi, (pair, bufs) in enumerate(choice_groups(call)):
        x = f"choice{gi}"
        flags = []
        for b in bufs:
            a = next(a for a in call.args if a.name == b)
            f = ["FERRY_F_CHOICE_BLOCKING"] if blocking else []
            if a.intent != "in":
                f.append("FERRY_F_CHOICE_OUTPUT")
            if call.name == "Get_address":
                f.append("FERRY_F_CHOICE_ADDRESS")
            flags.append(" | ".join(f) or "0")
        pre.append(f"struct ferry_f_choice {x}[{len(bufs)}];")
        pre.append(f"CFI_cdesc_t *{x}_d[{len(bufs)}] = {{{', '.join(b + '_d' for b in bufs)}}};")
        if pair:
            c, t = pair
            pre.append(f"int {x}_f[{len(bufs)}] = {{{', '.join(flags)}}};")
            pre.append(f"int {x}_rc = ferry_f_choice_typed({x}, {x}_d, {x}_f, {len(bufs)}, (MPI_Count)*{c}, "
                       f"FERRY_F2C(Datatype, *{t}), \"MPI_{call.name}\");")
            subst[f"*{c}"] = f"{x}[0].count"
            subst[f"FERRY_F2C(Datatype, *{t})"] = f"{x}[0].type"
        else:
            pre.append(f"int {x}_rc = ferry_f_choice_raw({x}, {x}_d[0], {flags[0]}, \"MPI_{call.name}\");")
        pre.append(f"if ({x}_rc != MPI_SUCCESS && fail == MPI_SUCCESS) fail = {x}_rc;")
        for j, b in enumerate(bufs):
            subst[f"ferry_f_buf({b})"] = f"{x}[{j}].base"
        cleanup += [f"for (int i = 0; i < {len(bufs)}; i++) ferry_f_choice_end(&{x}[i], rc);"]
    # A buffer the call cannot take goes to the error handler of the call's object (of
    # MPI_COMM_SELF for calls without one), as the call's own errors do.
    handle = next((a for a in call.args if a.intent == "in" and not a.array and a.base in ("Comm", "File", "Win")), None)
    if handle is None:
        raise_on = "MPI_Comm_call_errhandler(MPI_COMM_SELF, "
    else:
        raise_on = f"MPI_{handle.base}_call_errhandler(FERRY_F2C({handle.base}, *{handle.name}), "
    out = []
    for line in lines:
        if line.startswith("void pmpi_"):
            head, _, params = line.partition("(")
            for a in call.args:
                if a.base == "buffer":
                    params = params.replace(f"void *{a.name},", f"CFI_cdesc_t *{a.name}_d,", 1)
            out.append(f"{head}f08ts_({params}")
        elif line == "{":
            out.append(line)
            out.append("    int fail = MPI_SUCCESS;")
            out += [f"    {p}" for p in pre]
        elif "int rc = " in line:
            call_at = line.index(f"MPI_{call.name}(")
            head, args = line[:call_at], line[call_at:]
            for k, v in subst.items():
                args = re.sub(re.escape(k) + r"(?!\w)", v, args)
            head = head.replace("int rc = ok ? ", "int rc = !ok ? MPI_ERR_NO_MEM : fail != MPI_SUCCESS ? fail : ")
            if "int rc = !ok" not in head:
                head = head.replace("int rc = ", "int rc = fail != MPI_SUCCESS ? fail : ")
            out.append(head + args.replace(" : MPI_ERR_NO_MEM;", ";"))
        elif line.strip() == "if (ierror)":
            out += [f"    {c}" for c in cleanup]
            out.append("    if (fail != MPI_SUCCESS && ok)" if "int ok = 1;" in base else "    if (fail != MPI_SUCCESS)")
            out.append(f"        {raise_on}fail);")
            out.append(line)
        else:
            out.append(line)
    return "\n".join(out)


def c_aliases(call):
    real = f"pmpi_{call.lower}_"
    return [
        f"extern __typeof__({real}) mpi_{call.lower}_ __attribute__((weak, alias(\"{real}\")));",
        f"extern __typeof__({real}) mpi_{call.lower}_f08_ __attribute__((weak, alias(\"{real}\")));",
    ]


def write_c(calls):
    out = [
        "/* Generated by fortran/gen.py from fortran/calls.txt: do not edit. */",
        "/* The Fortran entry points of ferry (gfortran's convention: lower case, one trailing",
        " * underscore, arguments by reference, CHARACTER lengths appended as size_t). */",
        '#include "ferry_fortran.h"',
        "",
    ]
    for c in calls:
        if not c.custom:  # handwritten.c has those, aliases included
            out.append(c_wrapper(c))
            out += c_aliases(c)
            out.append("")
        if descriptor_buffers(c):
            out.append(c_wrapper_descriptors(c))
            real = f"pmpi_{c.lower}_f08ts_"
            out.append(f"extern __typeof__({real}) mpi_{c.lower}_f08ts_ __attribute__((weak, alias(\"{real}\")));")
            out.append("")
    return "\n".join(out)


# ---- Fortran ---------------------------------------------------------------------------------


def f_decl(a, flavor, descriptor=False, asynchronous=False):
    """The declaration of one dummy argument; flavor is "mpi" or "f08". descriptor: a choice
    buffer is assumed-rank (a TS 29113 descriptor, array sections as they are); asynchronous:
    the call may use it after it returns."""
    intent = f", INTENT({a.intent.upper()})" if a.base not in ("buffer", "function") else ""
    if a.base == "buffer" and descriptor:
        return [f"TYPE(*), DIMENSION(..){', ASYNCHRONOUS' if asynchronous else ''} :: {a.name}"]
    if a.base == "buffer":
        return [f"!GCC$ ATTRIBUTES NO_ARG_CHECK :: {a.name}", f"TYPE(*), DIMENSION(*) :: {a.name}"]
    if a.base == "cptr":
        return [f"!GCC$ ATTRIBUTES NO_ARG_CHECK :: {a.name}", f"TYPE(*) :: {a.name}"]
    if a.base == "function":
        return [f"EXTERNAL :: {a.name}"]
    if a.base == "string":
        return [f"CHARACTER(LEN=*){intent} :: {a.name}"]
    if a.base in ("strings", "strings2"):
        return [f"CHARACTER(LEN=*){intent} :: {a.name}({'count, ' if a.base == 'strings2' else ''}*)"]
    if a.base == "Status":
        if flavor == "f08":
            return [f"TYPE(MPI_Status){intent} :: {a.name}{'(*)' if a.array else ''}"]
        return [f"INTEGER{intent} :: {a.name}(MPI_STATUS_SIZE{', *' if a.array else ''})"]
    if a.base in HANDLES:
        t = f"TYPE(MPI_{a.base})" if flavor == "f08" else "INTEGER"
        return [f"{t}{intent} :: {a.name}{'(*)' if a.array else ''}"]
    return [f"{FKIND[a.base]}{intent} :: {a.name}{'(*)' if a.array else ''}"]


def wrap(line, indent):
    """Free-form lines under 132 columns, continued with &."""
    out = []
    while len(line) > 120:
        cut = line.rfind(",", 0, 100) + 1
        if cut <= 0:
            break
        out.append(line[:cut] + " &")
        line = " " * (indent + 4) + line[cut:].lstrip()
    out.append(line)
    return out


def f_interface(call, flavor, specific):
    args = [a.name for a in call.args] + ([] if call.result else ["ierror"])
    ind = "        "
    if call.result:
        rt = "DOUBLE PRECISION" if call.result == "double" else "INTEGER(KIND=MPI_ADDRESS_KIND)"
        head = f"    FUNCTION {specific}({', '.join(args)}) RESULT(res)"
    else:
        head = f"    SUBROUTINE {specific}({', '.join(args)})"
    descriptor = flavor == "f08" and descriptor_buffers(call)
    if descriptor:
        head += f' BIND(C, NAME="mpi_{call.lower}_f08ts_")'
    out = wrap(head, 4)
    out.append(f"{ind}IMPORT")
    out.append(f"{ind}IMPLICIT NONE")
    for a in call.args:
        out += [ind + d for d in f_decl(a, flavor, descriptor, nonblocking(call))]
    if call.result:
        out.append(f"{ind}{rt} :: res")
        out.append(f"    END FUNCTION {specific}")
    else:
        opt = ", OPTIONAL" if flavor == "f08" else ""
        out.append(f"{ind}INTEGER{opt}, INTENT(OUT) :: ierror")
        out.append(f"    END SUBROUTINE {specific}")
    return out


# Sentinels are variables in common blocks: the wrappers compare the address they get with
# these (as MPICH's do), so MPI_BOTTOM, MPI_IN_PLACE, ... can be passed where data goes.
COMMONS_F77 = [
    ("INTEGER MPI_BOTTOM, MPI_IN_PLACE", "COMMON /FERRYFB/ MPI_BOTTOM, MPI_IN_PLACE"),
    ("INTEGER MPI_STATUS_IGNORE(MPI_STATUS_SIZE)", None),
    ("INTEGER MPI_STATUSES_IGNORE(MPI_STATUS_SIZE,1)", "COMMON /FERRYFS/ MPI_STATUS_IGNORE, MPI_STATUSES_IGNORE"),
    ("INTEGER MPI_ERRCODES_IGNORE(1), MPI_UNWEIGHTED(1)", None),
    ("INTEGER MPI_WEIGHTS_EMPTY(1)", "COMMON /FERRYFE/ MPI_ERRCODES_IGNORE, MPI_UNWEIGHTED, MPI_WEIGHTS_EMPTY"),
    ("CHARACTER*1 MPI_ARGV_NULL(1), MPI_ARGVS_NULL(1,1)", "COMMON /FERRYFA/ MPI_ARGV_NULL, MPI_ARGVS_NULL"),
]
KINDS = [("MPI_ADDRESS_KIND", 8), ("MPI_OFFSET_KIND", 8), ("MPI_COUNT_KIND", 8), ("MPI_INTEGER_KIND", 4)]
STATUS = [("MPI_STATUS_SIZE", 8), ("MPI_SOURCE", 1), ("MPI_TAG", 2), ("MPI_ERROR", 3)]
# Predefined callbacks (C functions of libmpifort with these Fortran names).
CALLBACKS = ["MPI_NULL_COPY_FN", "MPI_NULL_DELETE_FN", "MPI_DUP_FN",
             "MPI_COMM_NULL_COPY_FN", "MPI_COMM_NULL_DELETE_FN", "MPI_COMM_DUP_FN",
             "MPI_TYPE_NULL_COPY_FN", "MPI_TYPE_NULL_DELETE_FN", "MPI_TYPE_DUP_FN",
             "MPI_WIN_NULL_COPY_FN", "MPI_WIN_NULL_DELETE_FN", "MPI_WIN_DUP_FN",
             "MPI_CONVERSION_FN_NULL"]


def fixed(stmt):
    """A statement that reads the same in fixed and free form: columns 7-72, `&` continuation in
    column 73 and column 6 (free form sees the trailing & ; fixed form ignores column 73 on)."""
    lines, first = [], True
    while stmt:
        room = 66 if first else 60
        if len(stmt) <= room:
            piece, stmt = stmt, ""
        else:
            cut = stmt.rfind(",", 0, room) + 1 or room
            piece, stmt = stmt[:cut], stmt[cut:]
        prefix = "      " if first else "     &"
        line = prefix + piece
        if stmt:
            line = line.ljust(72) + "&"
        lines.append(line)
        first = False
    return lines


def mpif_h(consts, calls):
    out = ["! mpif.h of ferry: generated by fortran/gen.py from ferry's mpi.h. Do not edit.",
           "! Reads the same as fixed- and free-form source."]
    for n, v in KINDS:
        out += fixed(f"INTEGER {n}") + fixed(f"PARAMETER ({n}={v})")
    for n, v in STATUS:
        out += fixed(f"INTEGER {n}") + fixed(f"PARAMETER ({n}={v})")
    for c in consts:
        t = "INTEGER(KIND=MPI_OFFSET_KIND)" if c.kind == "offset" else "INTEGER"
        out += fixed(f"{t} {c.name}") + fixed(f"PARAMETER ({c.name}={c.value})")
    out += fixed("LOGICAL MPI_SUBARRAYS_SUPPORTED, MPI_ASYNC_PROTECTS_NONBLOCKING")
    out += fixed("PARAMETER (MPI_SUBARRAYS_SUPPORTED=.FALSE.)")
    out += fixed("PARAMETER (MPI_ASYNC_PROTECTS_NONBLOCKING=.FALSE.)")
    for decl, common in COMMONS_F77:
        out += fixed(decl)
        if common:
            out += fixed(common)
    out += fixed("EXTERNAL " + ", ".join(CALLBACKS))
    # MPI_WTIME and MPI_WTICK only: programs declare MPI_AINT_ADD/MPI_AINT_DIFF themselves
    # (MPICH's mpif.h does not), and a second declaration would be an error.
    for c in calls:
        if c.result == "double":
            out += fixed(f"DOUBLE PRECISION MPI_{c.name.upper()}, PMPI_{c.name.upper()}")
            out += fixed(f"EXTERNAL MPI_{c.name.upper()}, PMPI_{c.name.upper()}")
    return "\n".join(out) + "\n"


# MPI_SIZEOF (MPI 4.1 §19.1.9): a generic over the intrinsic types, any rank, in both modules.
SIZEOF_KINDS = [("INTEGER", k) for k in ("INT8", "INT16", "INT32", "INT64")] + \
    [("REAL", k) for k in ("REAL32", "REAL64", "REAL128")] + \
    [("COMPLEX", k) for k in ("REAL32", "REAL64", "REAL128")] + \
    [("LOGICAL", k) for k in ("INT8", "INT16", "INT32", "INT64")] + [("CHARACTER", "")]


def sizeof_generic():
    names = [f"ferry_sizeof_{ty.lower()}_{k.lower() or 'default'}" for ty, k in SIZEOF_KINDS]
    spec = ["    INTERFACE MPI_SIZEOF"] + [f"        MODULE PROCEDURE {n}" for n in names] + ["    END INTERFACE"]
    spec.append("    PRIVATE :: " + ", ".join(names))
    body = []
    for (ty, k), n in zip(SIZEOF_KINDS, names):
        decl = f"{ty}(KIND={k})" if k else f"{ty}(LEN=*)"
        body += [f"    SUBROUTINE {n}(x, size, ierror)"]
        if k:
            body.append(f"        USE, INTRINSIC :: ISO_FORTRAN_ENV, ONLY : {k}")
        body += [f"        {decl}, DIMENSION(..), INTENT(IN) :: x",
                 "        INTEGER, INTENT(OUT) :: size",
                 "        INTEGER, OPTIONAL, INTENT(OUT) :: ierror",
                 "        size = STORAGE_SIZE(x) / 8",
                 "        IF (PRESENT(ierror)) ierror = 0",
                 f"    END SUBROUTINE {n}"]
    return spec, body


def module_mpi(consts, calls):
    out = ["! Module mpi of ferry: generated by fortran/gen.py. Do not edit.", "MODULE mpi", "    IMPLICIT NONE"]
    for n, v in KINDS + STATUS:
        out.append(f"    INTEGER, PARAMETER :: {n} = {v}")
    for c in consts:
        t = "INTEGER(KIND=MPI_OFFSET_KIND)" if c.kind == "offset" else "INTEGER"
        out.append(f"    {t}, PARAMETER :: {c.name} = {c.value}")
    out.append("    LOGICAL, PARAMETER :: MPI_SUBARRAYS_SUPPORTED = .FALSE.")
    out.append("    LOGICAL, PARAMETER :: MPI_ASYNC_PROTECTS_NONBLOCKING = .FALSE.")
    for decl, common in COMMONS_F77:
        out.append("    " + decl)
        if common:
            out.append("    " + common)
    out.append("    EXTERNAL :: " + ", ".join(CALLBACKS))
    out.append("    INTERFACE")
    for c in calls:
        if c.large_count:
            continue
        out += f_interface(c, "mpi", f"MPI_{c.name.upper()}")
        if c.result:  # a function must be declared to be called: PMPI_WTIME too
            out += f_interface(c, "mpi", f"PMPI_{c.name.upper()}")
    out.append("    END INTERFACE")
    spec, body = sizeof_generic()
    out += spec
    out.append("CONTAINS")
    out += body
    out.append("END MODULE mpi")
    return "\n".join(w for line in out for w in wrap(line, 4)) + "\n"


# The procedure types of mpi_f08 (MPI 4.1 §19.3.7, the forms without _c), for programs that
# declare their callbacks with PROCEDURE(...). libmpifort calls them as the f77 forms: the same
# bytes (handles are one integer, TYPE(C_PTR), VALUE is an address).
F08_CALLBACKS = """\
    ABSTRACT INTERFACE
    SUBROUTINE MPI_User_function(invec, inoutvec, len, datatype)
        USE, INTRINSIC :: ISO_C_BINDING, ONLY : C_PTR
        IMPORT :: MPI_Datatype
        TYPE(C_PTR), VALUE :: invec, inoutvec
        INTEGER :: len
        TYPE(MPI_Datatype) :: datatype
    END SUBROUTINE
""" + "".join(f"""\
    SUBROUTINE MPI_{h}_copy_attr_function(old{l}, {l}_keyval, extra_state, attribute_val_in, &
            attribute_val_out, flag, ierror)
        IMPORT :: MPI_{t}, MPI_ADDRESS_KIND
        TYPE(MPI_{t}) :: old{l}
        INTEGER :: {l}_keyval, ierror
        INTEGER(KIND=MPI_ADDRESS_KIND) :: extra_state, attribute_val_in, attribute_val_out
        LOGICAL :: flag
    END SUBROUTINE
    SUBROUTINE MPI_{h}_delete_attr_function({l}, {l}_keyval, attribute_val, extra_state, ierror)
        IMPORT :: MPI_{t}, MPI_ADDRESS_KIND
        TYPE(MPI_{t}) :: {l}
        INTEGER :: {l}_keyval, ierror
        INTEGER(KIND=MPI_ADDRESS_KIND) :: attribute_val, extra_state
    END SUBROUTINE
""" for h, l, t in (("Comm", "comm", "Comm"), ("Type", "type", "Datatype"), ("Win", "win", "Win"))) + "".join(f"""\
    SUBROUTINE MPI_{h}_errhandler_function({l}, error_code)
        IMPORT :: MPI_{h}
        TYPE(MPI_{h}) :: {l}
        INTEGER :: error_code
    END SUBROUTINE
""" for h, l in (("Comm", "comm"), ("Win", "win"), ("File", "file"), ("Session", "session"))) + """\
    SUBROUTINE MPI_Grequest_query_function(extra_state, status, ierror)
        IMPORT :: MPI_Status, MPI_ADDRESS_KIND
        INTEGER(KIND=MPI_ADDRESS_KIND) :: extra_state
        TYPE(MPI_Status) :: status
        INTEGER :: ierror
    END SUBROUTINE
    SUBROUTINE MPI_Grequest_free_function(extra_state, ierror)
        IMPORT :: MPI_ADDRESS_KIND
        INTEGER(KIND=MPI_ADDRESS_KIND) :: extra_state
        INTEGER :: ierror
    END SUBROUTINE
    SUBROUTINE MPI_Grequest_cancel_function(extra_state, complete, ierror)
        IMPORT :: MPI_ADDRESS_KIND
        INTEGER(KIND=MPI_ADDRESS_KIND) :: extra_state
        LOGICAL :: complete
        INTEGER :: ierror
    END SUBROUTINE
    END INTERFACE
"""


def module_f08(consts, calls):
    out = ["! Module mpi_f08 of ferry: generated by fortran/gen.py. Do not edit.",
           "! Handles are TYPE(MPI_X) holding the Fortran integer (MPI_VAL); TYPE(MPI_Status) is the",
           "! same eight integers as a C status, so the interfaces bind to libmpifort's C entry",
           "! points (mpi_send_f08_) with no copy; an absent ierror arrives as a null pointer.",
           "MODULE mpi_f08", "    IMPLICIT NONE"]
    for n, v in KINDS:
        out.append(f"    INTEGER, PARAMETER :: {n} = {v}")
    for h in HANDLES:
        out += [f"    TYPE, BIND(C) :: MPI_{h}", "        INTEGER :: MPI_VAL", f"    END TYPE MPI_{h}"]
    out += ["    TYPE, BIND(C) :: MPI_Status",
            "        INTEGER :: MPI_SOURCE, MPI_TAG, MPI_ERROR",
            "        INTEGER :: ferry_internal(5)",
            "    END TYPE MPI_Status"]
    for n, v in STATUS:
        out.append(f"    INTEGER, PARAMETER :: {n} = {v}")
    for c in consts:
        if c.kind in HANDLES:
            out.append(f"    TYPE(MPI_{c.kind}), PARAMETER :: {c.name} = MPI_{c.kind}({c.value})")
        else:
            t = "INTEGER(KIND=MPI_OFFSET_KIND)" if c.kind == "offset" else "INTEGER"
            out.append(f"    {t}, PARAMETER :: {c.name} = {c.value}")
    # Choice buffers are descriptors (array sections reach the call as they are) and those of
    # nonblocking calls are ASYNCHRONOUS dummies (MPI 5.0 §19.1.12, §19.1.17).
    out.append("    LOGICAL, PARAMETER :: MPI_SUBARRAYS_SUPPORTED = .TRUE.")
    out.append("    LOGICAL, PARAMETER :: MPI_ASYNC_PROTECTS_NONBLOCKING = .TRUE.")
    out += ["    INTEGER :: MPI_BOTTOM, MPI_IN_PLACE", "    COMMON /FERRYFB/ MPI_BOTTOM, MPI_IN_PLACE",
            "    INTEGER :: MPI_ERRCODES_IGNORE(1), MPI_UNWEIGHTED(1), MPI_WEIGHTS_EMPTY(1)",
            "    COMMON /FERRYFE/ MPI_ERRCODES_IGNORE, MPI_UNWEIGHTED, MPI_WEIGHTS_EMPTY",
            "    CHARACTER*1 :: MPI_ARGV_NULL(1), MPI_ARGVS_NULL(1,1)",
            "    COMMON /FERRYFA/ MPI_ARGV_NULL, MPI_ARGVS_NULL",
            "    TYPE(MPI_Status) :: MPI_STATUS_IGNORE, MPI_STATUSES_IGNORE(1)",
            "    COMMON /FERRYF8/ MPI_STATUS_IGNORE, MPI_STATUSES_IGNORE",
            "    EXTERNAL :: " + ", ".join(CALLBACKS)]
    # == and /= on handles (MPI 4.1 §19.3.5 asks for both).
    ops = []
    for h in HANDLES:
        ops.append((f"ferry_eq_{h.lower()}", f"ferry_ne_{h.lower()}", h))
    out.append("    INTERFACE OPERATOR(==)")
    out += [f"        MODULE PROCEDURE {eq}" for eq, _, _ in ops]
    out.append("    END INTERFACE")
    out.append("    INTERFACE OPERATOR(/=)")
    out += [f"        MODULE PROCEDURE {ne}" for _, ne, _ in ops]
    out.append("    END INTERFACE")
    out.append("    PRIVATE :: " + ", ".join(f"{eq}, {ne}" for eq, ne, _ in ops))
    out += F08_CALLBACKS.splitlines()
    by_name = {c.name: c for c in calls}
    for c in calls:
        specific = f"MPI_{c.name}_f08"
        generic = c.name
        if c.large_count:
            base = by_name.get(c.name[:-2])
            if base is None or base.signature() == c.signature():
                continue  # no generic to join, or one it cannot be told apart from
            generic = base.name
        out.append(f"    INTERFACE MPI_{generic}")
        out += f_interface(c, "f08", specific)
        out.append("    END INTERFACE")
        if c.result:
            out.append(f"    INTERFACE PMPI_{c.name}")
            out += f_interface(c, "f08", f"PMPI_{c.name}_f08")
            out.append("    END INTERFACE")
    spec, body = sizeof_generic()
    out += spec
    out.append("CONTAINS")
    out += body
    for eq, ne, h in ops:
        for fn, op in ((eq, "=="), (ne, "/=")):
            out += [f"    ELEMENTAL LOGICAL FUNCTION {fn}(a, b)",
                    f"        TYPE(MPI_{h}), INTENT(IN) :: a, b",
                    f"        {fn} = a%MPI_VAL {op} b%MPI_VAL",
                    f"    END FUNCTION {fn}"]
    out.append("END MODULE mpi_f08")
    return "\n".join(w for line in out for w in wrap(line, 4)) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mpi-h", required=True, help="ferry's mpi.h")
    ap.add_argument("--calls", default=os.path.join(HERE, "calls.txt"))
    ap.add_argument("--out", required=True, help="directory for the generated files")
    a = ap.parse_args()
    try:
        calls = parse_calls(a.calls)
        consts = parse_constants(a.mpi_h)
        files = {
            "mpif.h": mpif_h(consts, calls),
            "mpi.f90": module_mpi(consts, calls),
            "mpi_f08.f90": module_f08(consts, calls),
            "mpi_fortran.c": write_c(calls),
        }
    except (GenError, OSError) as e:
        print(f"fortran/gen.py: {e}", file=sys.stderr)
        sys.exit(1)
    os.makedirs(a.out, exist_ok=True)
    for name, text in files.items():
        with open(os.path.join(a.out, name), "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
