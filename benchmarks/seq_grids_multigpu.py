# Distributed apply() on device blocks, grid after grid in one process:
# per run the wall time, info()'s parts (ms), the engine's cache and the
# peers' allocations this rank keeps mapped.
#   mpiexec -n 2 python benchmarks/seq_grids_multigpu.py
import time
import numpy as np
import convstencil as cs
import convstencil.distributed as csd
from convstencil.distributed import _peer_memory
from mpi4py import MPI

comm = MPI.COMM_WORLD
KEYS = ("setup_seconds", "load_seconds", "exchange_seconds",
        "exchange_move_seconds")


def grid(shape):
    u = np.random.default_rng(0).random(shape) if comm.rank == 0 else None
    return csd.scatter(u, comm=comm, dims=(comm.size, 1, 1), backend="cuda")


def run(d, steps, k):
    comm.Barrier()
    t = time.perf_counter()
    r = csd.apply(d, "heat3d", steps=steps, mode="wrap", halo_steps=k)
    comm.Barrier()
    s = time.perf_counter() - t
    i = csd.info(r)
    del r
    c = cs.cache_info()
    if comm.rank == 0:
        print("%-16s k=%-4s %7.1f ms %-8s %s | cache %5.1f GB %d blocks | "
              "mapped %d" % (
                  "x".join(map(str, d.shape)), k, s * 1e3, i["transport"],
                  " ".join("%s %.1f" % (x.replace("_seconds", ""),
                                        i[x] * 1e3) for x in KEYS),
                  c["device_bytes"] / 1e9, c["blocks"],
                  len(_peer_memory._MAPPED)), flush=True)


for shape, steps, ks in [((1024, 1024, 1024), 60, [6] * 3),
                         ((1024, 512, 512), 300, [None] * 3),
                         ((1024, 1024, 1024), 60, [6] * 4),
                         ((1024, 1024, 1024), 60, [3, 3, 6, 6, 9, 9, 6, 6])]:
    d = grid(shape)
    for k in ks:
        run(d, steps, k)
    del d
