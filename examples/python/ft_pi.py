"""A Monte Carlo estimate of pi that survives the death of ranks (ULFM), with mpi4py.

    ferry run --fault-tolerant -n 4 python examples/python/ft_pi.py --kill 2 --after 10

The same program as examples/c/ft_pi.c: batch b belongs to rank b % size and its samples come
from a generator seeded with b; every round each rank computes its next batch, the ranks
exchange (batch, hits) and agree on whether every rank got every result. When a rank dies the
survivors revoke the communicator, shrink it, hand the dead rank's remaining batches to the
survivors in turn, and go on. Needs an mpi4py whose Comm.Agree/Revoke/Shrink call ferry's
MPIX_ functions (docs/fault-tolerance.md says how to build one).
"""

import argparse
import os
import random
import signal
import sys
from array import array

from mpi4py import MPI


def batch_hits(seed, batch, samples):
    """How many of the batch's points in [0,1)^2 fall inside the quarter circle."""
    rng = random.Random(seed * 1_000_003 + batch)
    return sum(rng.random() ** 2 + rng.random() ** 2 < 1.0 for _ in range(samples))


def agree(comm, ok):
    """The AND of `ok` over the members that do not fail, the same at all of them. Iagree
    writes the agreed flag into the buffer also when it reports a failure, which Agree's
    exception would lose."""
    flag = array("i", [1 if ok else 0])
    request = comm.Iagree(flag)
    try:
        request.Wait()
    except MPI.Exception as exc:
        if exc.Get_error_class() != MPI.ERR_PROC_FAILED:
            raise
    return bool(flag[0])


def main():
    world = MPI.COMM_WORLD
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--samples", type=int, default=5000, help="samples per batch")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--kill", type=int, default=-1, metavar="RANK", help="this rank dies")
    parser.add_argument("--after", type=int, default=5, metavar="K",
                        help="once K rounds have been agreed")
    args = parser.parse_args()
    if args.batches < 1 or args.samples < 1 or args.kill >= world.size:
        parser.error(f"--batches and --samples need 1 or more, --kill a rank below {world.size}")

    owner = [b % world.size for b in range(args.batches)]
    done = [False] * args.batches
    comm = world.Dup()
    comm.Set_errhandler(MPI.ERRORS_RETURN)
    hits = batches_done = rounds = 0
    while batches_done < args.batches:
        if world.rank == args.kill and rounds == args.after:
            print(f"ft_pi: rank {world.rank} dies after {rounds} rounds", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        mine = next((b for b in range(args.batches)
                     if owner[b] == world.rank and not done[b]), -1)
        result = (mine, batch_hits(args.seed, mine, args.samples) if mine >= 0 else 0)
        try:
            results, ok = comm.allgather(result), True
        except MPI.Exception:
            results, ok = None, False
        if agree(comm, ok):
            for batch, batch_hits_ in results:
                if batch >= 0 and not done[batch]:
                    done[batch] = True
                    hits += batch_hits_
                    batches_done += 1
            rounds += 1
            continue
        # A member died: end what is pending on comm everywhere, go on with the survivors and
        # give them the dead ranks' batches, in turn.
        comm.Revoke()
        shrunk = comm.Shrink()
        comm.Free()
        comm = shrunk
        comm.Set_errhandler(MPI.ERRORS_RETURN)
        group, world_group = comm.Get_group(), world.Get_group()
        alive = sorted(MPI.Group.Translate_ranks(group, list(range(comm.size)), world_group))
        group.Free()
        world_group.Free()
        moved = 0
        for b in range(args.batches):
            if not done[b] and owner[b] not in alive:
                owner[b] = alive[moved % len(alive)]
                moved += 1
        if comm.rank == 0:
            print(f"ft_pi: {comm.size} of {world.size} ranks left; "
                  f"{moved} remaining batches handed to them", flush=True)
    if comm.rank == 0:
        samples = batches_done * args.samples
        print(f"ft_pi: pi ~ {4.0 * hits / samples:.8f} from {samples} samples ({hits} hits, "
              f"{batches_done} batches of {args.samples}); "
              f"{comm.size} of {world.size} ranks survived", flush=True)
    comm.Free()
    return 0


if __name__ == "__main__":
    sys.exit(main())
