"""convstencil.distributed with blocks on a GPU (marked gpu and mpi).

On a machine with one GPU, after ``pip install ".[test,mpi]"`` (and
``pip install nvidia-nccl-cu12`` for NCCL, unless CuPy or PyTorch
already brought it):

    mpiexec -n 1 python -m pytest tests/test_distributed_gpu.py -q -p no:cacheprovider
    mpiexec -n 2 python -m pytest tests/test_distributed_gpu.py -q -p no:cacheprovider

One rank exchanges with itself (wrap) through NCCL.  On a host with
several GPUs the ranks take one each (rank i on GPU i) and exchange
through NCCL; where they share a GPU, NCCL refuses and they go through
host staging.  Results are compared with the CPU engine and with the
single-GPU run on the whole grid (within the tolerance of the tensor-core
paths: a distributed run fuses its rounds of k steps, a whole-grid run
its own depth, so their roundings differ).  A multi-GPU machine (NVLink
multicast off, as NCCL_NVLS_ENABLE=0 asks):

    NCCL_NVLS_ENABLE=0 mpiexec -n 2 python -m pytest tests/test_distributed_gpu.py -q -p no:cacheprovider
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


def _ipc_usable(comm):
    """Whether every rank maps the others' device memory (CUDA IPC)."""
    from convstencil.distributed import _transport
    return _transport._ipc_usable(comm, cs._core.cuda_current_device())


def _run(comm, u, preset, mode, steps, **kw):
    csd = _csd()
    d = csd.scatter(u if comm.Get_rank() == 0 else None, comm=comm,
                    backend="cuda")
    assert d.on_device and "device" in repr(d)
    d1 = csd.apply(d, preset, steps=steps, mode=mode, cval=0.25, **kw)
    return csd.gather(d1), d1


@pytest.mark.parametrize("transport", ["auto", "cuda-ipc", "nccl", "staging"])
@pytest.mark.parametrize("mode", ["wrap", "constant", "reflect"])
@pytest.mark.parametrize("preset,shape", [("heat2d", (130, 97)),
                                          ("box2d49p", (96, 101)),
                                          ("heat3d", (30, 33, 34)),
                                          ("1d5p", (1001,))])
def test_device_blocks_equal_cpu(comm, shared_rng, preset, shape, mode,
                                 transport):
    if transport == "nccl" and not _nccl_loadable(comm):
        pytest.skip("NCCL not found: pip install nvidia-nccl-cu12")
    if transport == "cuda-ipc" and not _ipc_usable(comm):
        pytest.skip("CUDA IPC is not usable between these ranks")
    u = shared_rng.uniform(-1, 1, shape)
    out, d1 = _run(comm, u, preset, mode, 11, halo_steps=4,
                   transport=transport)
    info = d1.info
    assert info["backend"] == "cuda"
    assert info["transport"] in ("cuda-ipc", "nccl", "cuda-mpi", "staging")
    if transport != "auto":
        assert info["transport"] == transport
    if comm.Get_rank() == 0:
        ref = cs.apply(u, preset, steps=11, mode=mode, cval=0.25,
                       backend="cpu")
        assert_close(out, ref, dict(preset=preset, mode=mode,
                                    transport=info["transport"]))


PRESETS = ["heat1d", "1d5p", "heat2d", "box2d9p", "star2d13p", "box2d49p",
           "heat3d", "box3d27p"]
MODES = ["constant", "wrap", "nearest", "reflect", "mirror"]
# odd extents, several tensor-core tiles per block on 2 to 8 ranks
SHAPES = {1: (8191,), 2: (203, 157), 3: (37, 29, 34)}


def _gpus_per_rank(comm):
    """(this rank's index on its host, the host's ranks, visible GPUs)."""
    from convstencil.distributed import _gpus
    rank, size = _gpus.host_rank(comm)
    return rank, size, cs._core.cuda_info()[1]


def test_one_gpu_per_rank(comm, shared_rng):
    """Ranks take the host's GPUs in turn: rank i on GPU i when there are
    enough, each GPU current on its rank, and NCCL between them, or CUDA
    IPC where the rounds exchange beside their interior (slabs in an
    engine session) or NCCL is missing."""
    rank, size, count = _gpus_per_rank(comm)
    u = shared_rng.random((64, 48))
    out, d1 = _run(comm, u, "heat2d", "wrap", 5, halo_steps=2)
    assert d1.device == rank % count == cs._core.cuda_current_device()
    assert d1.info["device"] == d1.device
    assert "device %d" % d1.device in repr(d1)
    devices = comm.allgather(d1.device)
    if size <= count:
        assert len(set(devices)) == len(devices), devices
        copies_first = (d1.info["session"]
                        and all(n == 1 for n in d1.info["dims"][1:]))
        order = (("cuda-ipc", "nccl") if copies_first
                 else ("nccl", "cuda-ipc"))
        usable = {"nccl": _nccl_loadable(comm), "cuda-ipc": _ipc_usable(comm)}
        expected = next((t for t in order if usable[t]), None)
        if comm.Get_size() > 1 and expected is not None:
            assert d1.info["transport"] == expected
    if comm.Get_rank() == 0:
        assert_close(out, cs.apply(u, "heat2d", steps=5, mode="wrap",
                                   backend="cpu"))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_and_mode_equals_one_gpu(comm, shared_rng, preset,
                                              mode):
    """Blocks on the ranks' GPUs give the single-GPU run's grid (and the
    CPU engine's) for every preset and mode, at the depth the cost model
    picks and at a shallow one."""
    ndim = cs.Stencil(preset).weights.ndim
    u = shared_rng.uniform(-1, 1, SHAPES[ndim])
    steps = 13
    results = []
    for halo_steps in (None, 2):
        out, d1 = _run(comm, u, preset, mode, steps, halo_steps=halo_steps)
        assert d1.info["backend"] == "cuda"
        results.append((out, d1.info))
    if comm.Get_rank() != 0:
        return
    one_gpu = cs.apply(u, preset, steps=steps, mode=mode, cval=0.25,
                       backend="cuda")
    ref = cs.apply(u, preset, steps=steps, mode=mode, cval=0.25,
                   backend="cpu")
    for out, info in results:
        ctx = dict(preset=preset, mode=mode, transport=info["transport"],
                   halo_steps=info["halo_steps"], ranks=info["ranks"])
        assert_close(out, one_gpu, dict(ctx, against="one GPU"))
        assert_close(out, ref, dict(ctx, against="cpu"))


@pytest.mark.parametrize("preset,shape", [("heat2d", (203, 157)),
                                          ("box2d49p", (96, 101)),
                                          ("heat3d", (37, 29, 34))])
@pytest.mark.parametrize("mode", ["wrap", "reflect"])
def test_session_rounds_equal_calls(comm, shared_rng, monkeypatch, preset,
                                    shape, mode):
    """2D and 3D device blocks keep their grid in an engine session for
    the whole rounds (no load and store per round): the result of one
    engine call per round; the rounds left over run as calls after it."""
    u = shared_rng.uniform(-1, 1, shape)
    steps, k = 17, 4  # 4 session rounds, then one of 1 step
    out, d1 = _run(comm, u, preset, mode, steps, halo_steps=k)
    monkeypatch.setenv("CONVSTENCIL_DISTRIBUTED_SESSION", "0")
    calls, d2 = _run(comm, u, preset, mode, steps, halo_steps=k)
    assert d2.info["session"] is False
    # one rank exchanges nothing: one call, no rounds, no session
    assert d1.info["session"] is (d1.info["halo_steps"] is not None)
    if comm.Get_rank() == 0:
        # to the contract's 1e-12, not bit for bit: a session plans the
        # block's k steps itself and may take another path than an engine
        # call on the device arrays (on two H200s heat3d in wrap differed
        # in the last bit at 35% of the points once the session's ghosts
        # were exchanged before it loads them; before, ghosts of reused
        # device memory holding NaN sent such runs back to calls)
        assert_close(out, calls, dict(preset=preset, mode=mode,
                                      against="one call per round"))
        assert_close(out, cs.apply(u, preset, steps=steps, mode=mode,
                                   cval=0.25, backend="cpu"))


@pytest.mark.parametrize("transport", ["nccl", "cuda-ipc", "staging"])
@pytest.mark.parametrize("mode", ["wrap", "constant", "reflect"])
@pytest.mark.parametrize("preset,shape,k", [("heat2d", (1203, 157), 9),
                                            ("heat2d", (803, 330), 40),
                                            ("heat3d", (203, 29, 34), 4),
                                            ("box3d27p", (150, 40, 33), 7)])
def test_split_rounds_equal_whole_rounds(comm, shared_rng, preset, shape, k,
                                         mode, transport):
    """Slabs along axis 0 whose sessions run tb2d or tb3d: each round's
    last pass writes the planes the neighbours receive first, and the
    exchange runs beside the rest of it (queued on the session's
    exchange stream for NCCL, started once those planes are written for
    the others).  The bits of the rounds without the split, ten rounds
    in a row, and the CPU engine's result."""
    if transport == "nccl" and not _nccl_loadable(comm):
        pytest.skip("NCCL not found: pip install nvidia-nccl-cu12")
    if transport == "cuda-ipc" and not _ipc_usable(comm):
        pytest.skip("CUDA IPC is not usable between these ranks")
    csd = _csd()
    size = comm.Get_size()
    u = shared_rng.uniform(-1, 1, shape)
    d = csd.scatter(u if comm.Get_rank() == 0 else None, comm=comm,
                    dims=(size,) + (1,) * (len(shape) - 1), backend="cuda")
    steps = 10 * k
    runs = [csd.apply(d, preset, steps=steps, mode=mode, cval=0.25,
                      halo_steps=k, transport=transport, overlap=overlap)
            for overlap in (None, False)]
    split, whole = (r.info for r in runs)
    assert split["session"] and whole["session"]
    assert whole["overlap"] is False
    assert split["overlap"] is (size > 1 and split["path"] == "cuda-core")
    out, ref = (csd.gather(r) for r in runs)
    if comm.Get_rank() == 0:
        np.testing.assert_array_equal(out, ref)
        assert_close(out, cs.apply(u, preset, steps=steps, mode=mode,
                                   cval=0.25, backend="cpu"),
                     dict(preset=preset, mode=mode, transport=transport))


def test_session_with_nan_runs_again_as_calls(comm, shared_rng):
    """A NaN in the grid: the session reports it when it stores, and the
    rounds run again one call each (the masked path keeps NaN where
    SciPy does), as the single-process engine does."""
    u = shared_rng.uniform(-1, 1, (130, 97))
    u[40, 50] = np.nan
    out, d1 = _run(comm, u, "heat2d", "wrap", 12, halo_steps=3)
    assert d1.info["session"] is False
    if comm.Get_rank() == 0:
        ref = cs.apply(u, "heat2d", steps=12, mode="wrap", cval=0.25,
                       backend="cpu")
        np.testing.assert_array_equal(np.isnan(out), np.isnan(ref))
        finite = ~np.isnan(ref)
        assert_close(np.where(finite, out, 0.0), np.where(finite, ref, 0.0))


def test_device_argument(comm, shared_rng):
    """device= puts this rank's block on that GPU; a GPU that is not
    visible is a ValueError on every rank."""
    rank, _, count = _gpus_per_rank(comm)
    csd = _csd()
    u = shared_rng.random((40, 36))
    want = (rank + 1) % count
    d = csd.scatter(u if comm.Get_rank() == 0 else None, comm=comm,
                    backend="cuda", device=want)
    assert d.device == want and cs._core.cuda_current_device() == want
    out = csd.gather(csd.apply(d, "box2d9p", steps=4, mode="reflect"))
    if comm.Get_rank() == 0:
        assert_close(out, cs.apply(u, "box2d9p", steps=4, mode="reflect",
                                   backend="cpu"))
    with pytest.raises(ValueError, match="not visible"):
        csd.scatter(u if comm.Get_rank() == 0 else None, comm=comm,
                    backend="cuda", device=count)


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
