#!/usr/bin/env python3
"""The ferry-mpi wheel as a new user gets it: build it, install it into a fresh venv, use it.

    python3 scripts/test-wheel.py    # after a release build of ferry-mpi, ferry-cli, ferry-bsplib

1. builds the wheel (scripts/wheel.py) from target/release and installs it into a new venv,
   <target>/wheel/venv, offline (`pip install --no-index`);
2. checks the layout (bin/, include/, lib/ as MPICH's wheel has them) and that no file of
   bin/ names the source tree: the venv must work alone;
3. builds a C program with the venv's `mpicc` and runs it at 2 processes with its `mpiexec`,
   with the source tree's variables (FERRY_BIN, FERRY_LIBDIR, CARGO_TARGET_DIR) unset; the
   same with a Fortran (mpi_f08) program and the venv's `mpifort`, when the wheel was built
   where gfortran was (then it carries the Fortran bindings);
4. builds mpi4py 4.1.2 from source with the venv's `mpicc` in mpi4py's MPI standard-ABI mode
   (`MPI4PY_BUILD_MPIABI=1 MPICC=<venv>/bin/mpicc pip install --no-binary mpi4py ...`), checks
   that it is built for the standard ABI (handles by MPI_*_toint, only libmpi_abi.so.1
   needed), and runs a 2-process mpi4py job (send/recv, Allreduce and pickled allreduce)
   with the venv's `mpiexec`.

Step 4 needs PyPI: without it the step prints why and is skipped (exit 0). Its build (minutes)
is kept as a wheel under <target>/wheel/mpi4py-<key>/, keyed by mpi4py's version, the build
mode, mpi.h and the venv's path (the extension's RUNPATH names <venv>/lib), and reused while
they stay the same. Exits 1 on any failure.
"""

import glob
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TARGET = os.environ.get("CARGO_TARGET_DIR") or os.path.join(ROOT, "target")
WORK = os.path.join(TARGET, "wheel")
VENV = os.path.join(WORK, "venv")
MPI4PY_VERSION = "4.1.2"
HEADER = os.path.join(ROOT, "crates", "mpi", "include", "mpi.h")
TIMEOUT = 300

EXPECTED = [
    "bin/ferry", "bin/mpicc", "bin/mpicxx", "bin/mpic++", "bin/mpicc_abi", "bin/mpicxx_abi",
    "bin/mpiexec", "bin/mpirun", "bin/bspcc", "bin/bspc++", "bin/bspcxx", "bin/bsprun",
    "include/mpi.h", "include/mpi_abi.h", "include/bsp.h", "include/bsp_settings.c",
    "lib/libmpi_abi.so.1", "lib/libmpi.so", "lib/libmpi_abi.so", "lib/libbsp.so",
]

HELLO_C = r"""
#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
    int rank, size, sum = 0, len;
    char library[MPI_MAX_LIBRARY_VERSION_STRING];
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Get_library_version(library, &len);
    printf("rank %d of %d: sum %d, %s\n", rank, size, sum, library);
    MPI_Finalize();
    return 0;
}
"""

MPI4PY_JOB = r"""
import array
from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
assert size == 2, size
if rank == 0:
    comm.Send([array.array("d", [1.5, 2.5, 3.5]), MPI.DOUBLE], dest=1, tag=7)
    comm.send({"hello": "from 0", "n": [1, 2, 3]}, dest=1, tag=8)
else:
    buf = array.array("d", [0.0] * 3)
    comm.Recv([buf, MPI.DOUBLE], source=0, tag=7)
    assert list(buf) == [1.5, 2.5, 3.5], buf
    msg = comm.recv(source=0, tag=8)
    assert msg == {"hello": "from 0", "n": [1, 2, 3]}, msg
total = array.array("i", [0])
comm.Allreduce([array.array("i", [rank + 1]), MPI.INT], [total, MPI.INT], op=MPI.SUM)
assert total[0] == 3, total
assert comm.allreduce(rank + 10) == 21
library = MPI.Get_library_version().strip()
print(f"mpi4py rank {rank} of {size}: send/recv and allreduce ok on {library}", flush=True)
"""


def log(*args):
    print("test-wheel:", *args, flush=True)


class Failed(Exception):
    """A check failed; the message says which and why."""


def run(cmd, env=None, cwd=None, timeout=TIMEOUT):
    try:
        done = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise Failed(f"{' '.join(cmd)}: no end after {timeout} s") from e
    return done


def must(cmd, what, **kw):
    done = run(cmd, **kw)
    if done.returncode != 0:
        raise Failed(f"{what} failed (exit {done.returncode}):\n{done.stdout[-3000:]}"
                     f"\n{done.stderr[-3000:]}")
    return done


def user_env():
    """The environment of a user who activated the venv: no trace of the source tree."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("FERRY_BIN", "FERRY_LIBDIR", "CARGO_TARGET_DIR", "MPICC", "MPICXX",
                        "LD_LIBRARY_PATH", "PYTHONPATH", "MPI4PY_BUILD_MPIABI")}
    env["PATH"] = os.path.join(VENV, "bin") + os.pathsep + env.get("PATH", "")
    env["VIRTUAL_ENV"] = VENV
    return env


def build_and_install_wheel():
    out = os.path.join(WORK, "dist")
    shutil.rmtree(out, ignore_errors=True)
    built = must([sys.executable, os.path.join(HERE, "wheel.py"), "--out", out], "the wheel build")
    wheel = built.stdout.strip().splitlines()[-1]
    log(f"built {os.path.relpath(wheel, ROOT)} ({os.path.getsize(wheel) / 1e6:.1f} MB)")
    shutil.rmtree(VENV, ignore_errors=True)
    must([sys.executable, "-m", "venv", VENV], "python3 -m venv")
    must([os.path.join(VENV, "bin", "python"), "-m", "pip", "install", "--no-index",
          "--no-deps", "-q", wheel], "pip install of the wheel")
    log(f"installed into {os.path.relpath(VENV, ROOT)}")


def check_layout():
    missing = [f for f in EXPECTED if not os.path.exists(os.path.join(VENV, f))]
    if missing:
        raise Failed(f"the venv lacks {', '.join(missing)}")
    for path in glob.glob(os.path.join(VENV, "bin", "*")):
        if os.path.islink(path) or os.path.basename(path).startswith(("python", "pip", "activ")):
            continue
        with open(path, "rb") as f:
            data = f.read()
        if ROOT.encode() in data:
            raise Failed(f"{path} names the source tree {ROOT}")
    log("layout ok: " + " ".join(EXPECTED))


def c_program(tmp):
    env = user_env()
    src = os.path.join(tmp, "hello.c")
    with open(src, "w") as f:
        f.write(HELLO_C)
    show = must(["mpicc", "-show", src], "mpicc -show", env=env).stdout
    if f"-I{VENV}/include" not in show or f"-L{VENV}/lib" not in show:
        raise Failed(f"mpicc -show does not point into the venv: {show}")
    must(["mpicc", src, "-o", os.path.join(tmp, "hello")], "mpicc hello.c", env=env)
    out = must(["mpiexec", "-n", "2", "-timeout", "120", "./hello"], "mpiexec -n 2 ./hello",
               env=env, cwd=tmp).stdout
    for rank in (0, 1):
        if not re.search(rf"^rank {rank} of 2: sum 1, ferry ", out, re.M):
            raise Failed(f"mpiexec -n 2 ./hello printed:\n{out}")
    log("C: mpicc + mpiexec -n 2 ok")


HELLO_F08 = """\
program hello
  use mpi_f08
  integer :: rank, size, total
  call MPI_Init()
  call MPI_Comm_rank(MPI_COMM_WORLD, rank)
  call MPI_Comm_size(MPI_COMM_WORLD, size)
  call MPI_Allreduce(1, total, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD)
  print '(a,i0,a,i0,a,i0)', 'rank ', rank, ' of ', size, ': sum ', total
  call MPI_Finalize()
end program
"""


def fortran_program(tmp):
    if not os.path.exists(os.path.join(VENV, "bin", "mpifort")):
        log("Fortran: the wheel has no mpifort (built without gfortran): skipped")
        return
    env = user_env()
    src = os.path.join(tmp, "hello.f90")
    with open(src, "w") as f:
        f.write(HELLO_F08)
    must(["mpifort", src, "-o", os.path.join(tmp, "hello_f")], "mpifort hello.f90", env=env)
    out = must(["mpiexec", "-n", "2", "-timeout", "120", "./hello_f"],
               "mpiexec -n 2 ./hello_f", env=env, cwd=tmp).stdout
    for rank in (0, 1):
        if not re.search(rf"^rank {rank} of 2: sum 2$", out, re.M):
            raise Failed(f"mpiexec -n 2 ./hello_f printed:\n{out}")
    log("Fortran: mpifort (use mpi_f08) + mpiexec -n 2 ok")


def mpi4py_cache_key():
    with open(HEADER, "rb") as f:
        header = f.read()
    key = hashlib.sha256(header + b"\0mpiabi\0" + VENV.encode()).hexdigest()[:12]
    return os.path.join(WORK, f"mpi4py-{MPI4PY_VERSION}-mpiabi-{key}")


def mpi4py_wheel(tmp):
    """mpi4py built against the venv's mpicc, in its standard-ABI mode: the cached wheel, or a
    new build. None when PyPI cannot be reached."""
    cache = mpi4py_cache_key()
    found = glob.glob(os.path.join(cache, "mpi4py-*.whl"))
    if found:
        log(f"mpi4py {MPI4PY_VERSION}: reusing the build in {os.path.relpath(cache, ROOT)}")
        return found[0]
    for old in glob.glob(os.path.join(WORK, "mpi4py-*")):
        shutil.rmtree(old, ignore_errors=True)
    env = user_env()
    pip = [os.path.join(VENV, "bin", "python"), "-m", "pip"]
    sdist_dir = os.path.join(tmp, "sdist")
    got = run(pip + ["download", "--no-deps", "--no-binary", "mpi4py",
                     f"mpi4py=={MPI4PY_VERSION}", "-d", sdist_dir], env=env)
    if got.returncode != 0:
        log(f"mpi4py step skipped: cannot download mpi4py {MPI4PY_VERSION} from PyPI (offline?):")
        print(got.stderr.strip()[-1500:], flush=True)
        return None
    sdist = glob.glob(os.path.join(sdist_dir, "mpi4py-*"))[0]
    log(f"building mpi4py {MPI4PY_VERSION} with {VENV}/bin/mpicc, MPI4PY_BUILD_MPIABI=1 "
        "(a few minutes)")
    env.update(MPICC=os.path.join(VENV, "bin", "mpicc"), MPI4PY_BUILD_MPIABI="1")
    started = time.monotonic()
    building = os.path.join(tmp, "built")
    must(pip + ["wheel", "--no-deps", "--no-cache-dir", "--no-binary", "mpi4py", "-w",
                building, sdist], "the mpi4py build", env=env, timeout=3600)
    log(f"built in {time.monotonic() - started:.0f} s")
    os.makedirs(cache, exist_ok=True)
    built = glob.glob(os.path.join(building, "mpi4py-*.whl"))[0]
    kept = os.path.join(cache, os.path.basename(built))
    shutil.copy(built, kept + ".partial")
    os.replace(kept + ".partial", kept)
    return kept


def check_standard_abi_build():
    """The extension took mpi4py's standard-ABI configuration (config/mpiabi.h: handles
    converted with MPI_Comm_toint and friends, never MPI_Comm_c2f) and needs the standard
    ABI's library name only, so any libmpi_abi.so.1 can serve it."""
    ext = glob.glob(os.path.join(VENV, "lib", "python*", "site-packages", "mpi4py", "MPI.*.so"))
    if not ext:
        raise Failed("mpi4py's MPI extension is missing from the venv")
    if shutil.which("nm") is None or shutil.which("readelf") is None:
        log("nm/readelf missing: the standard-ABI build is not checked")
        return
    nm = must(["nm", "-D", ext[0]], "nm -D").stdout
    imported = set(re.findall(r"^\s+U (\w+)$", nm, re.M))
    if "MPI_Comm_toint" not in imported or "MPI_Comm_c2f" in imported:
        raise Failed(f"{ext[0]} is not built for the standard ABI (MPI_Comm_toint missing or "
                     "MPI_Comm_c2f used)")
    dynamic = must(["readelf", "-d", ext[0]], "readelf -d").stdout
    needed = re.findall(r"\(NEEDED\).*\[(.*)\]", dynamic)
    mpi_libs = [n for n in needed if "mpi" in n]
    if mpi_libs != ["libmpi_abi.so.1"]:
        raise Failed(f"{ext[0]} needs {mpi_libs}, not libmpi_abi.so.1 alone")
    log(f"mpi4py: built for the standard ABI ({sum(n.startswith('MPI_') for n in imported)} "
        "MPI functions, handles by MPI_*_toint), needs libmpi_abi.so.1")


def mpi4py_job(tmp):
    """True when run, False when skipped (no PyPI)."""
    wheel = mpi4py_wheel(tmp)
    if wheel is None:
        return False
    python = os.path.join(VENV, "bin", "python")
    must([python, "-m", "pip", "install", "--no-index", "--no-deps", "-q", wheel],
         "pip install of the mpi4py build")
    check_standard_abi_build()
    script = os.path.join(tmp, "job.py")
    with open(script, "w") as f:
        f.write(MPI4PY_JOB)
    out = must(["mpiexec", "-n", "2", "-timeout", "120", python, script],
               "mpiexec -n 2 python job.py", env=user_env(), cwd=tmp).stdout
    for rank in (0, 1):
        if not re.search(rf"^mpi4py rank {rank} of 2: send/recv and allreduce ok on ferry ",
                         out, re.M):
            raise Failed(f"mpiexec -n 2 python job.py printed:\n{out}")
    log("mpi4py: mpiexec -n 2 python (send/recv, Allreduce, allreduce) ok")
    return True


def main():
    for need in ("ferry", "libmpi.so", "libbsp.so"):
        if not os.path.exists(os.path.join(TARGET, "release", need)):
            log(f"{need} is missing: "
                "cargo build --release -p ferry-cli -p ferry-mpi -p ferry-bsplib")
            return 1
    try:
        build_and_install_wheel()
        check_layout()
        with tempfile.TemporaryDirectory() as tmp:
            c_program(tmp)
            fortran_program(tmp)
            ran_mpi4py = mpi4py_job(tmp)
    except Failed as e:
        log(f"FAILED: {e}")
        return 1
    log("passed" if ran_mpi4py else "passed, but the mpi4py step was skipped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
