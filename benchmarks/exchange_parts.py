"""Where one distributed run's exchange time goes, by transport: weak
heat3d (512^3 per rank, axis 0 cut, wrap, 300 steps, the model's k) with
cuda-ipc and nccl, twice each, six runs a time; prints the median wall
time and the last run's info() seconds (ms) per rank, cuda-ipc's move in
its parts (ready, where, copies, landed).

    mpiexec -n 4 python benchmarks/exchange_parts.py
"""
import time, numpy as np
from mpi4py import MPI
import convstencil.distributed as csd
comm = MPI.COMM_WORLD; r = comm.Get_rank(); n = comm.Get_size()
u = np.full((512 * n, 512, 512), 0.5) if r == 0 else None
d = csd.scatter(u, comm=comm, dims=(n, 1, 1), backend="cuda")
for t in ("cuda-ipc", "nccl", "cuda-ipc", "nccl"):
    walls = []
    for i in range(6):
        comm.Barrier(); t0 = time.perf_counter()
        out = csd.apply(d, "heat3d", steps=300, mode="wrap", transport=t)
        comm.Barrier(); walls.append(time.perf_counter() - t0)
        info = csd.info(out); del out
    parts = {k[:-8]: round(v * 1e3, 2) for k, v in info.items() if k.endswith("_seconds")}
    allp = comm.gather(parts)
    if r == 0:
        print(t, "n=%d" % n, "wall ms median", round(sorted(walls[1:])[2] * 1e3, 1))
        for q, p in enumerate(allp):
            print("  rank", q, p)
