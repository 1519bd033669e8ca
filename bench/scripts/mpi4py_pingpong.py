"""mpi4py ping-pong and allreduce: the same script on every MPI library mpi4py is built for.

    mpiexec -n 2 python bench/scripts/mpi4py_pingpong.py [--quick]

Rank 0 prints CSV lines `library,test,bytes,ranks,iterations,usec` where usec is the median of
five timed batches: half a round trip for the ping-pongs (buffer `Send`/`Recv` on bytearrays,
and pickled `send`/`recv` of a small object), one call for `Allreduce` (doubles, MPI_SUM) and
the pickled `allreduce` of an int. Uses only the standard library (no numpy).
"""

import statistics
import sys
import time

from mpi4py import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
quick = "--quick" in sys.argv
library = MPI.Get_library_version().split()[0:3]
name = "ferry" if "ferry" in " ".join(library).lower() else " ".join(library[:2])
if "MPICH" in name:
    name = "mpich-" + MPI.Get_library_version().split("Version:")[1].split()[0]
elif "Open" in name:
    name = "openmpi-" + MPI.Get_library_version().split()[2].lstrip("v").rstrip(",")


def iterations(nbytes):
    n = 2000 if nbytes <= 1024 else 500 if nbytes <= 65536 else 50
    return max(5, n // 10) if quick else n


def timed(body, n):
    """Median over five batches of `n` calls of `body`, in microseconds per call."""
    body(max(1, n // 10))  # warm up (connections, buffers)
    samples = []
    for _ in range(5):
        comm.Barrier()
        t0 = MPI.Wtime()
        body(n)
        samples.append((MPI.Wtime() - t0) / n * 1e6)
    return statistics.median(samples)


def report(test, nbytes, n, usec):
    if rank == 0:
        print(f"{name},{test},{nbytes},{size},{n},{usec:.3f}", flush=True)


def pingpong(nbytes):
    buf = bytearray(nbytes)
    peer = 1 - rank

    def body(n):
        for _ in range(n):
            if rank == 0:
                comm.Send(buf, peer, 7)
                comm.Recv(buf, peer, 7)
            elif rank == 1:
                comm.Recv(buf, peer, 7)
                comm.Send(buf, peer, 7)

    n = iterations(nbytes)
    report("pingpong", nbytes, n, timed(body, n) / 2)


def pingpong_pickle():
    obj = {"step": 1, "value": 2.5}
    peer = 1 - rank

    def body(n):
        for _ in range(n):
            if rank == 0:
                comm.send(obj, peer, 8)
                comm.recv(source=peer, tag=8)
            elif rank == 1:
                comm.recv(source=peer, tag=8)
                comm.send(obj, peer, 8)

    n = iterations(8)
    report("pingpong-pickle", len(MPI.pickle.dumps(obj)), n, timed(body, n) / 2)


def allreduce(count):
    import array

    send = array.array("d", [1.0] * count)
    recv = array.array("d", [0.0] * count)

    def body(n):
        for _ in range(n):
            comm.Allreduce(send, recv, MPI.SUM)

    n = iterations(8 * count)
    report("allreduce", 8 * count, n, timed(body, n))


def allreduce_pickle():
    def body(n):
        for _ in range(n):
            comm.allreduce(rank)

    n = iterations(8)
    report("allreduce-pickle", 8, n, timed(body, n))


if size >= 2:
    for nbytes in (8, 1024, 65536, 1 << 20):
        pingpong(nbytes)
    pingpong_pickle()
for count in (1, 128, 131072):
    allreduce(count)
allreduce_pickle()
