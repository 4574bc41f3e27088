"""Helpers for the tests marked `mpi` (run under mpiexec).

Those tests run only when the process was started by mpiexec (MPICH's
PMI_SIZE, Open MPI's OMPI_COMM_WORLD_SIZE, PMIx's PMIX_RANK) or when
CONVSTENCIL_MPI_TESTS=1; a plain ``pytest tests`` skips them without
starting MPI.  Every test is bounded by a watchdog: a test that hangs
(a collective some rank never reached) dumps every thread's stack and
ends the process, which ends the whole mpiexec job.
"""
import faulthandler
import os

import pytest

TEST_SECONDS = int(os.environ.get("CONVSTENCIL_MPI_TEST_TIMEOUT", "120"))

_LAUNCH_VARS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK")
LAUNCHED = (any(v in os.environ for v in _LAUNCH_VARS)
            or os.environ.get("CONVSTENCIL_MPI_TESTS") == "1")

try:
    import mpi4py  # noqa: F401  (the package only: MPI starts later)
    HAVE_MPI4PY = True
except ImportError:
    HAVE_MPI4PY = False

# the marks of every mpi test module
MARKS = [pytest.mark.mpi,
         pytest.mark.skipif(not HAVE_MPI4PY,
                            reason="mpi4py not installed: pip install "
                                   "\".[mpi]\""),
         pytest.mark.skipif(not LAUNCHED,
                            reason="run under mpiexec, e.g. mpiexec -n 2 "
                                   "python -m pytest tests/"
                                   "test_distributed_mpi.py")]


@pytest.fixture(autouse=True)
def watchdog():
    """End the process if a test runs past TEST_SECONDS (no hang)."""
    faulthandler.dump_traceback_later(TEST_SECONDS, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture
def comm():
    from mpi4py import MPI
    world = MPI.COMM_WORLD
    world.Barrier()  # tests start together
    return world


@pytest.fixture
def shared_rng(comm):
    """A Generator seeded the same on every rank (seed from rank 0,
    printed on failure as `seed`)."""
    from conftest import SeededRng
    seed = comm.bcast(int.from_bytes(os.urandom(8), "little") >> 1
                      if comm.Get_rank() == 0 else None, root=0)
    env = os.environ.get("CONVSTENCIL_TEST_SEED")
    if env:
        seed = int(env)
    return SeededRng(seed)
