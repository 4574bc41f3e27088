"""convstencil.distributed: one grid over many MPI processes, exact.

    >>> from mpi4py import MPI
    >>> import convstencil.distributed as csd
    >>> d = csd.scatter(u if rank == 0 else None, comm=MPI.COMM_WORLD)
    >>> d = csd.apply(d, "heat2d", steps=1000, mode="wrap")
    >>> u1 = csd.gather(d, root=0)       # the whole grid on rank 0, else None

The grid is cut into one block per rank over a Cartesian grid of
processes (`dims`, as ``MPI.Compute_dims`` gives unless the caller
chooses).  Every `halo_steps` (k) steps each rank exchanges k*r ghost
layers with its neighbours, then runs k steps of the single-process
engine on its block and ghosts; the result equals ``convstencil.apply``
on the whole grid for every mode.  Host blocks may compute their
interior while the ghosts travel (`overlap`, where the cost model says
it pays).  Blocks live in host memory (NumPy) or on a GPU (`backend`);
``info(d)`` says which transport ran, the bytes exchanged, the time in
exchange and compute, and whether the compute overlapped the exchange.
``tune_halo_steps`` picks k from measurement instead of the cost model.

Needs mpi4py and an MPI library: ``pip install "convstencil[mpi]"``.
"""
try:
    from mpi4py import MPI as _MPI  # noqa: F401  (checked here, once)
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError(
        "convstencil.distributed needs mpi4py and an MPI library: "
        "pip install \"convstencil[mpi]\" (or pip install mpi4py mpich); "
        "import failed: %s" % exc) from exc

from ._grid import DistributedGrid, from_local, gather, local_slices, scatter
from ._run import apply, info
from ._tune import tune_halo_steps

__all__ = ["scatter", "gather", "apply", "from_local", "info",
           "local_slices", "tune_halo_steps", "DistributedGrid"]
