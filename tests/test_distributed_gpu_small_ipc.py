"""convstencil.distributed on device blocks through the "cuda-ipc"
transport (the copy engines write each slab into the neighbour's block,
mapped through CUDA IPC), on grids small enough for the CPU emulation of
CUDA: the same bits as the "staging" transport and the plain NumPy
reference (tests/reference.py) for every mode, 1D to 3D, uneven blocks,
engine sessions (whole-plane spans) and one call per round, packed
slabs of every axis, a rank exchanging with itself; "auto" takes it
where NCCL is not usable and every rank can map the others' memory; the peers' memory is
mapped once for repeated runs and unmapped by clear_cache(); a copy
failing on one rank raises on every rank, none waits for ever.

Marked mpi and gpu_small, as test_distributed_gpu_small.py, whose
helpers it shares; the emulation maps another process's device memory
through /proc/PID/fd (tests/cuda_emu/emu.cpp).  CI runs it under
mpiexec -n 2 and -n 4 (.ci/run).
"""
import numpy as np
import pytest

import convstencil as cs
from conftest import assert_close, gpu_small, random_weights
from mpi_support import MARKS, comm, shared_rng, watchdog  # noqa: F401
import reference
from test_distributed_gpu_small import MODES, SHAPES, weights_of

pytestmark = MARKS + gpu_small


def _csd():
    import convstencil.distributed as csd
    return csd


def both(comm, u, steps, mode, dims=None, **kw):
    """(gathered result through cuda-ipc, through staging, on rank 0;
    the cuda-ipc run's grid)."""
    csd = _csd()
    d = csd.scatter(u if comm.Get_rank() == 0 else None, comm=comm,
                    dims=dims, backend="cuda")
    d1 = csd.apply(d, steps=steps, mode=mode, transport="cuda-ipc", **kw)
    assert d1.info["transport"] == "cuda-ipc"
    d2 = csd.apply(d, steps=steps, mode=mode, transport="staging", **kw)
    return csd.gather(d1), csd.gather(d2), d1


def check(comm, u, steps, mode, dims=None, **kw):
    ipc, staged, d1 = both(comm, u, steps, mode, dims, **kw)
    if comm.Get_rank() == 0:
        np.testing.assert_array_equal(ipc, staged)
        assert_close(ipc, reference.apply(u, weights_of(kw), steps, mode),
                     dict(mode=mode, steps=steps, dims=d1.dims,
                          info=d1.info))
    return d1


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_random_kernels_every_mode(comm, shared_rng, ndim, mode):
    w = random_weights(shared_rng, ndim, 5 if ndim < 3 else 3)
    u = shared_rng.uniform(-1, 1, SHAPES[ndim])
    check(comm, u, 7, mode, weights=w, halo_steps=2)


@pytest.mark.parametrize("halo_steps", [1, 3, None])
@pytest.mark.parametrize("ndim", [2, 3])
def test_session_rounds_move_whole_planes(comm, shared_rng, ndim,
                                          halo_steps):
    """Axis 0's slabs of an engine session's grid, written as whole
    planes into the neighbour's grid (the grid cut along axis 0 only)."""
    name = {2: "box2d9p", 3: "heat3d"}[ndim]
    u = shared_rng.uniform(-1, 1, {2: (23, 17), 3: (17, 7, 9)}[ndim])
    dims = (comm.Get_size(),) + (1,) * (ndim - 1)
    d1 = check(comm, u, 9, "wrap", dims=dims, stencil=name,
               halo_steps=halo_steps)
    if d1.info["halo_steps"] is not None and d1.info["rounds"] > 2:
        assert d1.info["session"] is True


@pytest.mark.parametrize("mode", ["wrap", "reflect"])
def test_every_axis_split(comm, shared_rng, mode):
    """Packed slabs (axes 1 and 2) land in the receiver's buffers."""
    size = comm.Get_size()
    u = shared_rng.random((8, 6, 7))
    for axis in range(3):
        dims = [1, 1, 1]
        dims[axis] = size
        check(comm, u, 4, mode, dims=dims, stencil="heat3d", halo_steps=2)


def test_self_exchange(comm, shared_rng):
    """A rank that is its own neighbour copies to its own block."""
    u = shared_rng.random((12, 13))
    check(comm, u, 6, "wrap", dims=(comm.Get_size(), 1), stencil="box2d9p",
          halo_steps=3, self_exchange=True)


def test_self_exchange_along_axis_0_splits_rounds(comm, shared_rng):
    """self_exchange=(0,): each rank its own neighbour along axis 0 alone,
    so one GPU runs a slab's split rounds (the bands first, the copy
    beside the interior)."""
    csd = _csd()
    # 20 rows a rank: tb2d's windows (16 rows at least, ghosts included)
    # and an interior between the two bands of 3 rows
    u = shared_rng.random((20 * comm.Get_size(), 20))
    d = csd.scatter(u if comm.Get_rank() == 0 else None, comm=comm,
                    backend="cuda", dims=(comm.Get_size(), 1))
    out = csd.apply(d, "heat2d", steps=12, mode="wrap", halo_steps=3,
                    self_exchange=(0,), transport="cuda-ipc")
    assert out.info["overlap"] and out.info["session"]
    assert out.info["split_bands"] == "lead"
    whole = csd.gather(out)
    if comm.Get_rank() == 0:
        assert_close(whole, reference.apply(u, cs.Stencil("heat2d").weights,
                                            12, "wrap"))


def test_auto_takes_it_where_nccl_is_not_usable(comm, shared_rng,
                                                monkeypatch):
    from convstencil.distributed import _transport
    monkeypatch.setattr(_transport, "_nccl_comm", lambda comm, device: None)
    csd = _csd()
    d = csd.scatter(shared_rng.random((16, 9)) if comm.Get_rank() == 0
                    else None, comm=comm, backend="cuda")
    d1 = csd.apply(d, "heat2d", steps=4, mode="wrap", halo_steps=2)
    assert d1.info["transport"] == "cuda-ipc"


def test_mappings_kept_for_the_next_run(comm, shared_rng, monkeypatch):
    """A run maps each peer allocation it writes into once; the next run
    of the same grid maps nothing new; a run of another grid unmaps what
    the last one used and it does not; clear_cache() unmaps the rest."""
    from convstencil.distributed import _peer_memory
    cs.clear_cache()
    opened, closed = [], []
    real_open, real_close = cs._core.cuda_ipc_open, cs._core.cuda_ipc_close

    def counting_open(handle):
        here = real_open(handle)
        opened.append(here[0])
        return here

    def counting_close(here):
        closed.append(here)
        real_close(here)

    monkeypatch.setattr(_peer_memory._core, "cuda_ipc_open", counting_open)
    monkeypatch.setattr(_peer_memory._core, "cuda_ipc_close", counting_close)
    csd = _csd()
    d = csd.scatter(shared_rng.random((20, 11)) if comm.Get_rank() == 0
                    else None, comm=comm, dims=(comm.Get_size(), 1),
                    backend="cuda")
    for run in range(3):
        csd.apply(d, "heat2d", steps=6, mode="wrap", halo_steps=2,
                  transport="cuda-ipc")
        if run == 0:
            first = len(opened)
            # a session's two grids from each of two neighbours at most
            assert first <= 4
            assert first > 0 or comm.Get_size() == 1
        assert len(opened) == first and not closed, run
    e = csd.scatter(shared_rng.random((28, 9)) if comm.Get_rank() == 0
                    else None, comm=comm, dims=(comm.Get_size(), 1),
                    backend="cuda")
    csd.apply(e, "heat2d", steps=6, mode="wrap", halo_steps=2,
              transport="cuda-ipc")
    # the first grid's mappings went unless the new run used them too
    assert set(closed) <= set(opened[:first])
    cs.clear_cache()
    assert sorted(closed) == sorted(opened)
    assert not _peer_memory._MAPPED


def test_copy_failing_on_one_rank_reaches_all(comm, shared_rng, monkeypatch):
    csd = _csd()
    u = shared_rng.random((16, 10))
    d = csd.scatter(u if comm.Get_rank() == 0 else None, comm=comm,
                    backend="cuda")
    if comm.Get_rank() == comm.Get_size() - 1:
        def failing(copies):
            raise RuntimeError("copy failure on purpose")
        monkeypatch.setattr(cs._core, "device_copies", failing)
    with pytest.raises(RuntimeError, match="copy failure on purpose|failed "
                       "in this exchange"):
        csd.apply(d, "heat2d", steps=6, mode="wrap", halo_steps=2,
                  transport="cuda-ipc")
    monkeypatch.undo()
    out = csd.gather(csd.apply(d, "heat2d", steps=2, mode="wrap",
                               transport="cuda-ipc"))
    if comm.Get_rank() == 0:
        assert_close(out, reference.apply(u, cs.Stencil("heat2d").weights,
                                          2, "wrap"))


def test_refused_where_a_peer_cannot_be_mapped(comm, shared_rng,
                                               monkeypatch):
    """transport="cuda-ipc" raises, on every rank, where the probe finds
    a pair of ranks that cannot map each other's memory; "auto" then
    takes another transport."""
    from convstencil.distributed import _transport
    monkeypatch.setattr(_transport, "_IPC_USABLE", {})
    monkeypatch.setattr(_transport, "_nccl_comm", lambda comm, device: None)
    if comm.Get_rank() == 0:
        monkeypatch.setattr(cs._core, "cuda_can_access_peer",
                            lambda device, peer: False)
    csd = _csd()
    d = csd.scatter(shared_rng.random((12, 8)) if comm.Get_rank() == 0
                    else None, comm=comm, backend="cuda")
    if comm.Get_size() > 1:
        with pytest.raises(RuntimeError, match="CUDA IPC is not usable"):
            csd.apply(d, "heat2d", steps=2, mode="wrap",
                      transport="cuda-ipc")
        d1 = csd.apply(d, "heat2d", steps=2, mode="wrap")
        assert d1.info["transport"] != "cuda-ipc"
