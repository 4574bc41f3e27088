"""convstencil.distributed with blocks on a GPU (marked gpu and mpi).

On a machine with one GPU, after ``pip install ".[test,mpi]"`` (and
``pip install nvidia-nccl-cu12`` for NCCL, unless CuPy or PyTorch
already brought it):

    mpiexec -n 1 python -m pytest tests/test_distributed_gpu.py -q -p no:cacheprovider
    mpiexec -n 2 python -m pytest tests/test_distributed_gpu.py -q -p no:cacheprovider

One rank exchanges with itself (wrap) through NCCL; two ranks share the
GPU, where NCCL refuses, and go through host staging.  Results are
compared with the CPU engine on the whole grid.
"""
import numpy as np
import pytest

import convstencil as cs
from conftest import assert_close, gpu
from mpi_support import MARKS, comm, shared_rng, watchdog  # noqa: F401

pytestmark = MARKS + gpu


def _csd():
    import convstencil.distributed as csd
    return csd


def _nccl_loadable(comm):
    from mpi4py import MPI
    from convstencil.distributed import _nccl
    try:
        _nccl.load()
        ok = 1
    except OSError:
        ok = 0
    return comm.allreduce(ok, op=MPI.MIN) == 1


def _run(comm, u, preset, mode, steps, **kw):
    csd = _csd()
    d = csd.scatter(u if comm.Get_rank() == 0 else None, comm=comm,
                    backend="cuda")
    assert d.on_device and "device" in repr(d)
    d1 = csd.apply(d, preset, steps=steps, mode=mode, cval=0.25, **kw)
    return csd.gather(d1), d1


@pytest.mark.parametrize("transport", ["auto", "staging"])
@pytest.mark.parametrize("mode", ["wrap", "constant", "reflect"])
@pytest.mark.parametrize("preset,shape", [("heat2d", (130, 97)),
                                          ("box2d49p", (96, 101)),
                                          ("heat3d", (30, 33, 34)),
                                          ("1d5p", (1001,))])
def test_device_blocks_equal_cpu(comm, shared_rng, preset, shape, mode,
                                 transport):
    u = shared_rng.uniform(-1, 1, shape)
    out, d1 = _run(comm, u, preset, mode, 11, halo_steps=4,
                   transport=transport)
    info = d1.info
    assert info["backend"] == "cuda"
    assert info["transport"] in ("nccl", "cuda-mpi", "staging")
    if transport == "staging":
        assert info["transport"] == "staging"
    if comm.Get_rank() == 0:
        ref = cs.apply(u, preset, steps=11, mode=mode, cval=0.25,
                       backend="cpu")
        assert_close(out, ref, dict(preset=preset, mode=mode,
                                    transport=info["transport"]))


def test_one_rank_self_exchange_through_nccl(comm, shared_rng):
    if comm.Get_size() != 1:
        pytest.skip("one rank exchanges with itself")
    if not _nccl_loadable(comm):
        pytest.skip("NCCL not found: pip install nvidia-nccl-cu12")
    u = shared_rng.random((256, 192))
    out, d1 = _run(comm, u, "heat2d", "wrap", 20, halo_steps=5,
                   transport="nccl", self_exchange=True)
    assert d1.info["transport"] == "nccl" and d1.info["bytes_sent"] > 0
    assert_close(out, cs.apply(u, "heat2d", steps=20, mode="wrap",
                               backend="cpu"))


def test_from_local_device_block(comm, shared_rng):
    csd = _csd()
    u = shared_rng.random((64, 80))
    where = csd.local_slices(u.shape, comm)
    block = cs.DeviceArray(u[where].shape)
    cs._core.to_device(block.ptr, np.ascontiguousarray(u[where]))
    d = csd.from_local(block, comm=comm)
    assert d.on_device
    out = csd.gather(csd.apply(d, "box2d9p", steps=7, mode="mirror"))
    if comm.Get_rank() == 0:
        assert_close(out, cs.apply(u, "box2d9p", steps=7, mode="mirror",
                                   backend="cpu"))


def test_device_memory_steady(comm, shared_rng):
    csd = _csd()
    u = shared_rng.random((512, 512))
    d = csd.scatter(u if comm.Get_rank() == 0 else None, comm=comm,
                    backend="cuda")

    def round_trip():
        d1 = csd.apply(d, "heat2d", steps=10, mode="wrap", halo_steps=3)
        csd.gather(d1)

    for _ in range(3):  # warm up: kept engine arenas, NCCL buffers
        round_trip()
    comm.Barrier()  # ranks sharing a GPU read it while all are idle
    free_before = cs._core.cuda_mem_info()[0]
    for _ in range(20):
        round_trip()
    comm.Barrier()
    free_after = cs._core.cuda_mem_info()[0]
    # two padded blocks of 2 MiB per call: a leak would lose 80 MiB
    assert free_before - free_after < 8 << 20, (free_before, free_after)
