#!/usr/bin/env python3
"""Same-run ping-pong comparison: ferry against NetPIPE's NPmpi on MPICH and Open MPI, and
raw NPtcp, on this host. Every tool runs --runs times; the table shows medians and ratios.

    python3 bench/scripts/netpipe-compare.py [--runs 3] [--max 16777216] [--out bench-results/netpipe]

Needs Debian's mpich, openmpi-bin, netpipe-mpich2, netpipe-openmpi and netpipe-tcp (installed
when missing and run as root) and a release build (scripts/setup.sh). Raw outputs stay in --out.
"""
import argparse, csv, datetime, os, shutil, statistics, subprocess, sys, time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FERRY = os.path.join(ROOT, "target", "release", "ferry")
SIZES = [8, 1024, 65536, 1 << 20, 16 << 20]
PACKAGES = {"NPmpich2": "netpipe-mpich2", "NPopenmpi": "netpipe-openmpi", "NPtcp": "netpipe-tcp",
            "mpiexec.mpich": "mpich", "mpiexec.openmpi": "openmpi-bin"}
OMPI_ROOT = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def ensure_tools():
    missing = sorted({pkg for tool, pkg in PACKAGES.items() if shutil.which(tool) is None})
    if missing and os.geteuid() == 0:
        subprocess.run(["apt-get", "update", "-qq"], check=True)
        subprocess.run(["apt-get", "install", "-y", "-qq", *missing], check=True,
                       env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
    missing = [t for t in PACKAGES if shutil.which(t) is None]
    if missing:
        sys.exit(f"netpipe-compare: missing {', '.join(missing)} (apt-get install {' '.join(PACKAGES[t] for t in missing)})")
    if not os.access(FERRY, os.X_OK):
        sys.exit("netpipe-compare: build ferry first: bash scripts/setup.sh")


def run(cmd, env=None, timeout=900):
    subprocess.run(cmd, check=True, timeout=timeout, env={**os.environ, **(env or {})},
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def read_netpipe(path):
    """NetPIPE output: bytes, Mbit/s, one-way seconds (half a round trip) per line."""
    out = {}
    for line in open(path):
        f = line.split()
        if len(f) >= 3:
            out[int(f[0])] = (float(f[2]) * 1e6, float(f[1]) / 8)
    return out


def read_ferry(path):
    out = {}
    with open(path) as fh:
        for row in csv.DictReader(l for l in fh if not l.startswith("#")):
            out[int(row["bytes"])] = (float(row["usec"]), float(row["mbps"]))
    return out


def netpipe_mpi(exe, launcher, out, maxb, env):
    cmd = [launcher, "-n", "2"] + (["--oversubscribe"] if "openmpi" in launcher else [])
    run(cmd + [exe, "-u", str(maxb), "-o", out], env)
    return read_netpipe(out)


def nptcp(out, maxb):
    receiver = subprocess.Popen(["NPtcp", "-u", str(maxb)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        run(["NPtcp", "-h", "127.0.0.1", "-u", str(maxb), "-o", out])
    finally:
        receiver.wait(timeout=60)
    return read_netpipe(out)


def ferry(transport, outdir, maxb):
    run([FERRY, "bench", "pingpong", "--transport", transport, "--min", "1", "--max", str(maxb), "--out", outdir])
    return read_ferry(os.path.join(outdir, f"pingpong-{transport}.csv"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--max", type=int, default=16 << 20)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench-results", "netpipe"))
    a = ap.parse_args()
    ensure_tools()
    os.makedirs(a.out, exist_ok=True)
    # The run's record (command, date, machine, commit, load), as every benchmark writes it.
    subprocess.run([FERRY, "bench", "record", "--out", os.path.abspath(a.out),
                    "--command", " ".join(sys.argv)], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    tcp_mpich = {"UCX_TLS": "tcp,self", "MPIR_CVAR_NOLOCAL": "1"}
    tcp_ompi = {**OMPI_ROOT, "OMPI_MCA_pml": "ob1", "OMPI_MCA_btl": "tcp,self"}
    peers = {
        "ferry shm": lambda i: ferry("shm", f"{a.out}/run{i}", a.max),
        "MPICH shm": lambda i: netpipe_mpi("NPmpich2", "mpiexec.mpich", f"{a.out}/mpich-shm-{i}.out", a.max, {}),
        "Open MPI shm": lambda i: netpipe_mpi("NPopenmpi", "mpiexec.openmpi", f"{a.out}/ompi-shm-{i}.out", a.max, OMPI_ROOT),
        "ferry tcp": lambda i: ferry("tcp", f"{a.out}/run{i}", a.max),
        "MPICH tcp": lambda i: netpipe_mpi("NPmpich2", "mpiexec.mpich", f"{a.out}/mpich-tcp-{i}.out", a.max, tcp_mpich),
        "Open MPI tcp": lambda i: netpipe_mpi("NPopenmpi", "mpiexec.openmpi", f"{a.out}/ompi-tcp-{i}.out", a.max, tcp_ompi),
        "NPtcp": lambda i: nptcp(f"{a.out}/nptcp-{i}.out", a.max),
    }
    results = {name: [] for name in peers}
    for i in range(a.runs):  # interleaved, so drift on a shared machine hits every peer alike
        for name, measure in peers.items():
            try:
                results[name].append(measure(i))
            except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
                print(f"netpipe-compare: {name} run {i} failed: {e}", file=sys.stderr)

    def med(name, size, col):
        vals = [r[size][col] for r in results[name] if size in r]
        return statistics.median(vals) if vals else float("nan")

    lines = [f"Ping-pong, 2 ranks on this host, median of {a.runs} interleaved runs, "
             f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC.", "",
             "| transport | bytes | ferry µs | MPICH µs | Open MPI µs | ferry/MPICH | ferry MB/s | MPICH MB/s | Open MPI MB/s | NPtcp MB/s | ferry/MPICH bw | ferry/NPtcp bw |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for t in ["shm", "tcp"]:
        for s in SIZES:
            f_l, m_l, o_l = med(f"ferry {t}", s, 0), med(f"MPICH {t}", s, 0), med(f"Open MPI {t}", s, 0)
            f_b, m_b, o_b = med(f"ferry {t}", s, 1), med(f"MPICH {t}", s, 1), med(f"Open MPI {t}", s, 1)
            n_b = med("NPtcp", s, 1) if t == "tcp" else float("nan")
            n_ratio = f"{f_b / n_b:.2f}" if t == "tcp" else "–"
            lines.append(f"| {t} | {s} | {f_l:.2f} | {m_l:.2f} | {o_l:.2f} | {f_l / m_l:.2f} | {f_b:.0f} | {m_b:.0f} | {o_b:.0f} | "
                         + (f"{n_b:.0f}" if t == "tcp" else "–") + f" | {f_b / m_b:.2f} | {n_ratio} |")
    table = "\n".join(lines)
    open(os.path.join(a.out, "table.md"), "w").write(table + "\n")
    print(table)


if __name__ == "__main__":
    main()
