"""convstencil.distributed with blocks in device memory, exchanged through
host staging, on grids small enough for the CPU emulation of CUDA:
gather(apply(scatter(u, backend="cuda"))) equals the plain NumPy
reference (tests/reference.py) for every preset and mode, 1D to 3D,
uneven blocks, halo_steps 1, 2, 5 and None (engine sessions and one
engine call per round both run), device grids in and out; an error on
one rank reaches every rank.

Marked mpi and gpu_small: runs under mpiexec, on a real GPU or on a
build made with CONVSTENCIL_CUDA=emulate (setup.py), where every rank
runs the CUDA engine's real sources on the CPU.  The emulation shows one
device unless EMU_DEVICES says more, so ranks share device 0 (as ranks
beyond a host's GPU count do) or, with EMU_DEVICES=2, take devices in
turn.  CI runs (.ci/run):

    mpiexec -n 2 python -m pytest tests/test_distributed_gpu_small.py -q -p no:cacheprovider
    EMU_DEVICES=2 mpiexec -n 4 python -m pytest tests/test_distributed_gpu_small.py -q -p no:cacheprovider

Every rank runs every test; collectives come first and assertions on the
gathered grid run on rank 0 only.  Each test is bounded by a watchdog
(mpi_support).
"""
import numpy as np
import pytest

import convstencil as cs
from cai_support import download
from conftest import (EMULATED_CUDA, assert_close, gpu_small,
                      random_weights)
from mpi_support import MARKS, comm, shared_rng, watchdog  # noqa: F401
import reference

pytestmark = MARKS + gpu_small

PRESETS = ["heat1d", "1d5p", "heat2d", "box2d9p", "star2d13p", "box2d49p",
           "heat3d", "box3d27p"]
MODES = ["constant", "wrap", "nearest", "reflect", "mirror"]
HALO_STEPS = [1, 2, 5, None]
# uneven over 2, 3 and 4 ranks per axis, and every block at least as
# wide as the largest radius (3) on 4 ranks
SHAPES = {1: (29,), 2: (13, 14), 3: (9, 7, 6)}


def _csd():
    import convstencil.distributed as csd
    return csd


def run_device(comm, u, steps, mode, cval=0.0, dims=None, **kw):
    """(the gathered result on rank 0, else None; the result's grid)."""
    csd = _csd()
    d = csd.scatter(u if comm.Get_rank() == 0 else None, comm=comm,
                    dims=dims, backend="cuda")
    assert d.on_device and d.device == cs._core.cuda_current_device()
    d1 = csd.apply(d, steps=steps, mode=mode, cval=cval,
                   transport="staging", **kw)
    assert d1.on_device and d1.device == d.device
    return csd.gather(d1), d1


def weights_of(kw):
    return kw["weights"] if "weights" in kw else cs.Stencil(
        kw["stencil"]).weights


def check(comm, u, steps, mode, cval=0.0, dims=None, ctx=None, **kw):
    out, d1 = run_device(comm, u, steps, mode, cval, dims, **kw)
    info = d1.info
    assert info["transport"] == "staging" and info["backend"] == "cuda"
    assert 0 <= info["vote_seconds"] <= info["seconds"]
    assert info["device"] == d1.device
    if info["rounds"]:  # "direct": one step between device arrays
        assert info["path"] in ("tensor-core", "cuda-core", "direct"), info
    if comm.Get_rank() == 0:
        ctx = dict(ctx or {}, mode=mode, steps=steps, dims=d1.dims,
                   halo_steps=info["halo_steps"], session=info["session"],
                   path=info["path"])
        assert_close(out, reference.apply(u, weights_of(kw), steps, mode,
                                          cval), ctx)
    return d1


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("preset", PRESETS)
def test_presets_every_mode(comm, shared_rng, preset, mode):
    ndim = cs.Stencil(preset).weights.ndim
    u = shared_rng.uniform(-1, 1, SHAPES[ndim])
    # halo_steps by the preset's place, so that each dimension meets
    # several; test_halo_steps takes every one on every dimension
    halo = HALO_STEPS[(PRESETS.index(preset) + MODES.index(mode)) % 4]
    check(comm, u, 5, mode, cval=0.375, stencil=preset, halo_steps=halo,
          ctx=dict(preset=preset, seed=shared_rng.seed))


@pytest.mark.parametrize("halo_steps", HALO_STEPS)
@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_halo_steps(comm, shared_rng, ndim, halo_steps):
    """Rounds of k steps and a last shorter round."""
    name = {1: "1d5p", 2: "star2d13p", 3: "box3d27p"}[ndim]
    u = shared_rng.uniform(-1, 1, SHAPES[ndim])
    steps = 11
    d1 = check(comm, u, steps, "wrap", stencil=name, halo_steps=halo_steps,
               ctx=dict(name=name, seed=shared_rng.seed))
    info = d1.info
    k = info["halo_steps"]
    if k is not None:
        assert info["rounds"] == -(-steps // k)
        assert info["bytes_sent"] > 0  # wrap: every side exchanges
        if halo_steps is not None:
            assert k <= halo_steps


@pytest.mark.parametrize("ndim", [2, 3])
def test_rounds_run_in_a_session(comm, shared_rng, ndim):
    """2D and 3D blocks with two whole rounds or more keep their grid in
    an engine session (loaded once, stored once)."""
    name = {2: "heat2d", 3: "heat3d"}[ndim]
    u = shared_rng.uniform(-1, 1, SHAPES[ndim])
    d1 = check(comm, u, 7, "wrap", stencil=name, halo_steps=2)
    assert d1.info["rounds"] == 4
    assert d1.info["session"] is True


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_random_kernels(comm, shared_rng, ndim, mode):
    w = random_weights(shared_rng, ndim, 5 if ndim < 3 else 3)
    u = shared_rng.uniform(-1, 1, SHAPES[ndim])
    steps = int(shared_rng.integers(1, 8))
    halo = HALO_STEPS[int(shared_rng.integers(0, 4))]
    check(comm, u, steps, mode, cval=-0.5, weights=w, halo_steps=halo,
          ctx=dict(weights=w.shape, seed=shared_rng.seed))


@pytest.mark.parametrize("mode", ["wrap", "reflect"])
def test_every_axis_split(comm, shared_rng, mode):
    """All ranks along one axis, for each axis of a 3D grid: the packed
    (strided) slabs of axes 1 and 2 and the contiguous ones of axis 0."""
    size = comm.Get_size()
    u = shared_rng.random((8, 6, 7))
    for axis in range(3):
        dims = [1, 1, 1]
        dims[axis] = size
        check(comm, u, 4, mode, dims=dims, stencil="heat3d", halo_steps=2,
              ctx=dict(axis=axis))


def test_self_exchange_through_staging(comm, shared_rng):
    """A periodic axis that is not split exchanges with the rank itself
    through the transport: the same grid as the engine's own wrap."""
    u = shared_rng.random((12, 13))
    d1 = check(comm, u, 6, "wrap", dims=(comm.Get_size(), 1),
               stencil="box2d9p", halo_steps=3, self_exchange=True)
    assert d1.info["ghost_depth"] == (3, 3)


# few and small: the emulation runs tb3d's blocks of 512 threads slowly
# (k = 4 took 100 s on 4 ranks, near the watchdog's 120); box2d9p's k = 9
# and heat3d's k = 3 at depth 1 (CONVSTENCIL_CUDA_MAX_DEPTH: three passes a
# round) cover passes before the last, test_distributed_gpu.py larger
# 3D ones
@pytest.mark.parametrize("name,shape,k,mode,max_depth", [
    ("heat2d", (67, 16), 2, "wrap", None),
    ("box2d9p", (70, 17), 9, "constant", None),
    ("heat3d", (26, 8, 8), 2, "reflect", None),
    ("heat3d", (26, 8, 8), 3, "constant", 1)])
def test_split_rounds_give_the_bits_of_whole_rounds(comm, shared_rng,
                                                   monkeypatch, name, shape,
                                                   k, mode, max_depth):
    """Grids cut along axis 0 whose sessions run tb2d or tb3d (at least
    16 rows and columns, 8 cells along every 3D axis): each pass writes
    only the planes the round still reads, and with overlap the last
    pass writes the planes the neighbours receive first, the exchange
    running beside the rest.  The bits of the rounds without the split
    and of one engine call per round, on uneven blocks; a block split
    where it holds more than the planes it sends."""
    if max_depth is not None:
        monkeypatch.setenv("CONVSTENCIL_CUDA_MAX_DEPTH", str(max_depth))
    size = comm.Get_size()
    dims = (size,) + (1,) * (len(shape) - 1)
    u = shared_rng.uniform(-1, 1, shape)
    steps = 3 * k  # 3 session rounds (info's path: the session's)
    out, d1 = run_device(comm, u, steps, mode, dims=dims, stencil=name,
                         halo_steps=k)
    whole, d2 = run_device(comm, u, steps, mode, dims=dims, stencil=name,
                           halo_steps=k, overlap=False)
    monkeypatch.setenv("CONVSTENCIL_DISTRIBUTED_SESSION", "0")
    calls, d3 = run_device(comm, u, steps, mode, dims=dims, stencil=name,
                           halo_steps=k)
    assert d1.info["session"] and d2.info["session"]
    assert d3.info["session"] is False
    assert d2.info["overlap"] is False and d3.info["overlap"] is False
    # planes this block sends: to each neighbour along axis 0; on these
    # grids the CUDA-core path is tb2d's or tb3d's (a single step may
    # go to the tensor cores)
    rank, periodic = comm.Get_rank(), mode == "wrap"
    sends = d1.info["ghost_depth"][0] * ((rank > 0 or periodic)
                                         + (rank < size - 1 or periodic))
    assert d1.info["overlap"] is (size > 1 and d1.local.shape[0] > sends
                                  and d1.info["path"] == "cuda-core"), (
        sends, d1.info["path"])
    if comm.Get_rank() == 0:
        np.testing.assert_array_equal(out, whole)
        if d3.info["path"] == d1.info["path"]:  # a call of one step may
            np.testing.assert_array_equal(out, calls)  # take another
        assert_close(out, reference.apply(u, cs.Stencil(name).weights,
                                          steps, mode))


@pytest.mark.parametrize("mode", ["wrap", "reflect"])
@pytest.mark.parametrize("ndim", [2, 3])
def test_session_rounds_equal_calls(comm, shared_rng, monkeypatch, ndim,
                                    mode):
    """Rounds in an engine session (the halo exchange packs and unpacks
    boxes of the session's grid) give the bits of one engine call per
    round; the rounds left over run as calls after it."""
    name = {2: "box2d9p", 3: "heat3d"}[ndim]
    u = shared_rng.uniform(-1, 1, SHAPES[ndim])
    steps, k = 7, 2  # 3 session rounds, then one of 1 step
    out, d1 = run_device(comm, u, steps, mode, stencil=name, halo_steps=k)
    monkeypatch.setenv("CONVSTENCIL_DISTRIBUTED_SESSION", "0")
    calls, d2 = run_device(comm, u, steps, mode, stencil=name, halo_steps=k)
    assert d2.info["session"] is False
    assert d1.info["session"] is (d1.info["halo_steps"] is not None)
    if comm.Get_rank() == 0:
        np.testing.assert_array_equal(out, calls)
        assert_close(out, reference.apply(u, cs.Stencil(name).weights,
                                          steps, mode))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", [
    (2, "box2d9p", (13, 14), None), (2, "star2d13p", (19, 9), "rows"),
    (3, "heat3d", (9, 8, 6), None), (3, "box3d27p", (11, 5, 6), "rows")])
def test_whole_plane_spans_give_the_packed_result(comm, shared_rng,
                                                  monkeypatch, case, mode):
    """Axis 0's slabs of an engine session's grid move as whole planes
    (rows in 2D), the engine's halo cells and row padding along: the
    bits of the rounds that pack and unpack them, and of the reference.
    `rows`: every rank along axis 0 (only spans); else the default
    dims (axis 1 split too on 4 ranks: packed slabs besides, and spans
    where every rank's session has the same layout, (9, 8, 6))."""
    from convstencil.distributed import _run
    ndim, name, shape, split = case
    dims = (comm.Get_size(),) + (1,) * (ndim - 1) if split else None
    u = shared_rng.uniform(-1, 1, shape)
    steps, k = 7, 2  # 3 session rounds, then one call of 1 step
    spans = []
    plain_span = _run._SessionGrid.span

    def counted(self, starts, sizes):
        found = plain_span(self, starts, sizes)
        spans.append(found is not None)
        return found

    monkeypatch.setattr(_run._SessionGrid, "span", counted)
    out, d1 = run_device(comm, u, steps, mode, dims=dims, stencil=name,
                         halo_steps=k)
    assert d1.info["session"] is True
    if split:  # axis 0 split, the others whole: one layout everywhere
        assert comm.allreduce(int(any(spans))) > 0
    monkeypatch.setattr(_run._SessionGrid, "span", lambda *_: None)
    packed, d2 = run_device(comm, u, steps, mode, dims=dims, stencil=name,
                            halo_steps=k)
    if comm.Get_rank() == 0:
        np.testing.assert_array_equal(out, packed)
        assert_close(out, reference.apply(u, cs.Stencil(name).weights,
                                          steps, mode),
                     dict(case=case, mode=mode))


def test_ranks_take_the_devices_in_turn(comm, shared_rng):
    """Rank i of a host on device i % count (count: the visible devices;
    EMU_DEVICES on the emulation), current when its blocks are touched."""
    from mpi4py import MPI
    host = comm.Split_type(MPI.COMM_TYPE_SHARED)
    rank_on_host = host.Get_rank()
    host.Free()
    count = cs._core.cuda_info()[1]
    u = shared_rng.random(SHAPES[2])
    d1 = check(comm, u, 3, "wrap", stencil="heat2d", halo_steps=1)
    assert d1.device == rank_on_host % count
    assert cs._core.cuda_current_device() == d1.device
    assert "device %d" % d1.device in repr(d1)


def test_steps_zero_and_one(comm, shared_rng):
    u = shared_rng.random(SHAPES[2])
    d1 = check(comm, u, 0, "nearest", stencil="heat2d")
    assert d1.info["rounds"] == 0
    check(comm, u, 1, "mirror", stencil="heat2d", halo_steps=5)


def test_nan_runs_again_without_a_session(comm, shared_rng):
    """A NaN: the session reports it when it stores and the rounds run
    again one engine call each (the masked path keeps NaN where SciPy
    does)."""
    u = shared_rng.uniform(-1, 1, (12, 12))
    u[5, 6] = np.nan
    out, d1 = run_device(comm, u, 6, "wrap", stencil="heat2d", halo_steps=2)
    assert d1.info["session"] is False
    if comm.Get_rank() == 0:
        want = reference.scipy_apply(u, cs.Stencil("heat2d").weights, 6,
                                     "wrap")
        np.testing.assert_array_equal(np.isnan(out), np.isnan(want))
        finite = ~np.isnan(want)
        assert_close(np.where(finite, out, 0.0), np.where(finite, want, 0.0))


def test_device_grid_in_and_out(comm, shared_rng):
    """A device grid scattered from rank 0, device blocks from_local, and
    the blocks of the result read as device arrays."""
    csd = _csd()
    u = shared_rng.random((11, 10))
    grid = None
    if comm.Get_rank() == 0:
        grid = cs.DeviceArray(u.shape)
        cs._core.to_device(grid.ptr, u)
    d = csd.scatter(grid, comm=comm)  # "auto": a device grid stays there
    assert d.on_device
    d1 = csd.apply(d, "box2d9p", steps=4, mode="reflect", halo_steps=2,
                   transport="staging")
    block = download(d1.local)  # a strided view of the padded block
    want = reference.apply(u, cs.Stencil("box2d9p").weights, 4, "reflect")
    assert_close(block, want[d1.slices])
    where = csd.local_slices(u.shape, comm)
    local = cs.DeviceArray(u[where].shape)
    cs._core.to_device(local.ptr, np.ascontiguousarray(u[where]))
    d2 = csd.from_local(local, comm=comm)
    assert d2.on_device
    out = csd.gather(csd.apply(d2, "box2d9p", steps=4, mode="reflect",
                               halo_steps=2, transport="staging"))
    if comm.Get_rank() == 0:
        assert_close(out, want)


def test_input_untouched_and_result_new(comm, shared_rng):
    csd = _csd()
    u = shared_rng.random((10, 12))
    d = csd.scatter(u if comm.Get_rank() == 0 else None, comm=comm,
                    backend="cuda")
    before = download(d.local)
    d1 = csd.apply(d, "heat2d", steps=3, mode="mirror", transport="staging")
    np.testing.assert_array_equal(download(d.local), before)
    assert download(d1.local).shape == before.shape
    again = csd.gather(d)
    if comm.Get_rank() == 0:
        np.testing.assert_array_equal(again, u)


def _apply_staged(comm, u, steps, k):
    csd = _csd()
    d = csd.scatter(u if comm.Get_rank() == 0 else None, comm=comm,
                    backend="cuda")
    return csd.apply(d, "box2d9p", steps=steps, mode="wrap", halo_steps=k,
                     transport="staging")


def test_padded_blocks_are_pooled_and_reused_exactly(comm, shared_rng):
    """A run pools the padded block it did not return at once and the
    result's when the result goes; the next run of that padded shape
    takes them (cudaMalloc and cudaFree cost milliseconds a run); a
    result alive keeps its block, the stale values a pooled block holds
    change no result, the pool holds at most KEEP blocks, and
    clear_cache() frees them."""
    import gc
    import weakref
    from convstencil.distributed import _pads
    csd = _csd()
    w = cs.Stencil("box2d9p").weights
    cs.clear_cache()
    assert not _pads.PADS.pooled()
    grids = [shared_rng.uniform(-1, 1, (14, 13)) for _ in range(3)]
    first = _apply_staged(comm, grids[0], 6, 2)
    lease = first.local.base
    assert isinstance(lease, _pads.Lease)
    (spare,) = _pads.PADS.pooled()
    assert spare.ptr != lease.ptr
    kept = download(first.local)
    # a live result's block is not handed out: the next run takes the
    # spare and a new one, and the first result stays as it was
    second = _apply_staged(comm, grids[1], 7, 2)
    assert second.local.base.ptr != lease.ptr
    np.testing.assert_array_equal(download(first.local), kept)
    ptrs = {lease.ptr, second.local.base.ptr} | {
        p.ptr for p in _pads.PADS.pooled()}
    gone = weakref.ref(lease)
    del first, lease
    gc.collect()
    assert gone() is None, gc.get_referrers(gone())
    assert len(_pads.PADS.pooled()) == 2  # the first result's came back
    third = _apply_staged(comm, grids[2], 4, 2)
    assert third.local.base.ptr in ptrs
    assert all(p.ptr in ptrs for p in _pads.PADS.pooled())
    for u, steps, d1 in ((grids[1], 7, second), (grids[2], 4, third)):
        out = csd.gather(d1)
        if comm.Get_rank() == 0:
            assert_close(out, reference.apply(u, w, steps, "wrap"),
                         dict(steps=steps))
    del second, third
    gc.collect()
    assert len(_pads.PADS.pooled()) == _pads.PADS.keep
    nbytes = sum(p.nbytes for p in _pads.PADS.pooled())
    assert cs.clear_cache() >= nbytes
    assert not _pads.PADS.pooled()


def test_error_on_one_rank_reaches_all(comm, monkeypatch):
    csd = _csd()
    last = comm.Get_size() - 1
    d = csd.scatter(np.ones((8, 8)) if comm.Get_rank() == 0 else None,
                    comm=comm, backend="cuda")
    # a bad argument on one rank
    steps = -1 if comm.Get_rank() == last else 2
    with pytest.raises(ValueError, match="steps"):
        csd.apply(d, "heat2d", steps=steps, transport="staging")
    # a failing engine call in the middle of the rounds on one rank: every
    # rank stops at the same round and raises, none waits forever
    if comm.Get_rank() == last:
        def failing(handle, *bands):
            raise RuntimeError("engine failure on purpose")
        monkeypatch.setattr(cs._core, "session_run", failing)
    with pytest.raises(RuntimeError, match="engine failure on purpose"):
        csd.apply(d, "heat2d", steps=6, mode="wrap", halo_steps=2,
                  transport="staging")
    monkeypatch.undo()
    # and the grid still runs afterwards
    out = csd.gather(csd.apply(d, "heat2d", steps=2, mode="wrap",
                               transport="staging"))
    if comm.Get_rank() == 0:
        assert_close(out, reference.apply(np.ones((8, 8)),
                                          cs.Stencil("heat2d").weights, 2,
                                          "wrap"))


@pytest.mark.skipif(not EMULATED_CUDA, reason="the emulation's memory "
                    "limit (EMU_MALLOC_LIMIT) runs one rank out of memory")
def test_device_out_of_memory_on_one_rank(comm, monkeypatch):
    csd = _csd()
    d = csd.scatter(np.ones((8, 8)) if comm.Get_rank() == 0 else None,
                    comm=comm, backend="cuda")
    if comm.Get_rank() == comm.Get_size() - 1:
        cs.clear_cache()
        monkeypatch.setenv("EMU_MALLOC_LIMIT", "1")
    with pytest.raises(MemoryError):
        csd.apply(d, "heat2d", steps=3, transport="staging")


def test_tune_defaults_on_device_blocks_run_whole_passes(comm, shared_rng):
    """Device blocks: info() says how many steps a pass of the engine
    fuses at most on a round's block, and tune_halo_steps' default k
    (beyond the model's) are multiples of it; host blocks have none."""
    csd = _csd()
    u = shared_rng.uniform(-1, 1, (64, 24))
    d = csd.scatter(u if comm.Get_rank() == 0 else None, comm=comm,
                    dims=(comm.Get_size(), 1), backend="cuda")
    model = csd.info(csd.apply(d, "heat2d", steps=12, mode="wrap",
                               transport="staging"))
    depth = model["fused_depth"]
    assert isinstance(depth, int) and depth >= 1
    k, times = csd.tune_halo_steps(d, "heat2d", steps=12, mode="wrap",
                                   repeat=1, transport="staging")
    assert k in times and model["halo_steps"] in times
    assert all(kk == model["halo_steps"] or kk % depth == 0
               for kk in times), (depth, times)
    host = csd.scatter(u if comm.Get_rank() == 0 else None, comm=comm,
                       dims=(comm.Get_size(), 1), backend="cpu")
    assert not host.on_device and csd.info(csd.apply(host, "heat2d", steps=4,
                              mode="wrap"))["fused_depth"] is None


def test_tune_halo_steps_on_device_blocks(comm, shared_rng):
    """tune_halo_steps on device blocks: every candidate runs, the grid
    is left as it was, and the tuned k gives the reference's grid."""
    csd = _csd()
    u = shared_rng.uniform(-1, 1, (22, 9))
    d = csd.scatter(u if comm.Get_rank() == 0 else None, comm=comm,
                    dims=(comm.Get_size(), 1), backend="cuda")
    before = download(d.local)
    k, times = csd.tune_halo_steps(d, "box2d9p", steps=6, mode="reflect",
                                   candidates=[1, 2, 3], repeat=1,
                                   transport="staging")
    assert set(times) == {1, 2, 3} and k in times
    np.testing.assert_array_equal(download(d.local), before)
    out = csd.gather(csd.apply(d, "box2d9p", steps=6, mode="reflect",
                               halo_steps=k, transport="staging"))
    if comm.Get_rank() == 0:
        assert_close(out, reference.apply(u, cs.Stencil("box2d9p").weights,
                                          6, "reflect"))
