"""convstencil.distributed under MPI: gather(apply(scatter(u))) equals
convstencil.apply(u) for every preset, random kernels, every mode, 1D to
3D, uneven and tiny blocks, several halo depths; errors reach every rank.

Run (CI runs both, .ci/run):

    mpiexec -n 2 python -m pytest tests/test_distributed_mpi.py -q -p no:cacheprovider
    mpiexec -n 4 python -m pytest tests/test_distributed_mpi.py -q -p no:cacheprovider

Every rank runs every test; collectives come first and assertions on the
gathered grid run on rank 0 only, so a failing assertion never leaves
another rank waiting.  Each test is bounded by a watchdog (mpi_support).
"""
import numpy as np
import pytest

import convstencil as cs
from conftest import assert_close, random_weights
from mpi_support import MARKS, comm, shared_rng, watchdog  # noqa: F401
import reference

pytestmark = MARKS

PRESETS = ["heat1d", "1d5p", "heat2d", "box2d9p", "star2d13p", "box2d49p",
           "heat3d", "box3d27p"]
MODES = ["constant", "wrap", "nearest", "reflect", "mirror"]
# uneven over 2, 3 and 4 ranks per axis, and not too slow for 4 ranks
# on 2 cores
SHAPES = {1: (53,), 2: (27, 22), 3: (13, 10, 11)}


def _csd():
    import convstencil.distributed as csd
    return csd


def run_both(comm, u, steps, mode, cval=0.0, root=0, dims=None, **kw):
    """(distributed result on root else None, whole-grid result on root)."""
    csd = _csd()
    d = csd.scatter(u if comm.Get_rank() == root else None, comm=comm,
                    root=root, dims=dims, backend="cpu")
    d1 = csd.apply(d, steps=steps, mode=mode, cval=cval, **kw)
    out = csd.gather(d1, root=root)
    if comm.Get_rank() != root:
        return None, None, d1
    single = kw.get("weights")
    ref = cs.apply(u, kw.get("stencil"), weights=single, steps=steps,
                   mode=mode, cval=cval, backend="cpu")
    return out, ref, d1


@pytest.mark.parametrize("overlap", [None, True])
@pytest.mark.parametrize("halo_steps", [1, 2, 5, None])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("preset", PRESETS)
def test_presets(comm, shared_rng, preset, mode, halo_steps, overlap):
    ndim = cs.Stencil(preset).weights.ndim
    u = shared_rng.uniform(-1, 1, SHAPES[ndim])
    out, ref, d1 = run_both(comm, u, 7, mode, cval=0.375, stencil=preset,
                            halo_steps=halo_steps, overlap=overlap)
    if overlap and d1.info["halo_steps"]:
        assert d1.info["overlap"]
    if out is not None:
        assert_close(out, ref, dict(preset=preset, mode=mode,
                                    halo_steps=halo_steps, dims=d1.dims,
                                    overlap=d1.info["overlap"],
                                    seed=shared_rng.seed))
        np.testing.assert_array_equal(out, ref)  # same engine, same sums


@pytest.mark.parametrize("overlap", [None, True])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_random_kernels(comm, shared_rng, ndim, mode, overlap):
    w = random_weights(shared_rng, ndim, 5 if ndim < 3 else 3)
    shape = SHAPES[ndim]
    u = shared_rng.uniform(-1, 1, shape)
    steps = int(shared_rng.integers(1, 12))
    halo = [1, 2, 5, None][int(shared_rng.integers(0, 4))]
    out, ref, d1 = run_both(comm, u, steps, mode, cval=-0.5, weights=w,
                            halo_steps=halo, overlap=overlap)
    if out is not None:
        ctx = dict(weights=w.shape, mode=mode, steps=steps, halo=halo,
                   dims=d1.dims, overlap=d1.info["overlap"],
                   seed=shared_rng.seed)
        assert_close(out, ref, ctx)
        # and the plain reference, independent of the engine
        assert_close(out, reference.apply(u, w, steps, mode, -0.5), ctx)


@pytest.mark.parametrize("overlap", [False, True])
@pytest.mark.parametrize("mode", MODES)
def test_every_axis_split(comm, shared_rng, mode, overlap):
    """All ranks along one axis, for each axis of a 3D grid (with
    overlap: the interior's view is contiguous only along axis 0)."""
    size = comm.Get_size()
    for axis in range(3):
        dims = [1, 1, 1]
        dims[axis] = size
        u = shared_rng.random((9, 10, 11))
        out, ref, _ = run_both(comm, u, 4, mode, dims=dims,
                               stencil="box3d27p", halo_steps=3,
                               overlap=overlap)
        if out is not None:
            assert_close(out, ref, dict(dims=dims, mode=mode,
                                        overlap=overlap))


@pytest.mark.parametrize("overlap", [None, True])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("preset", ["heat1d", "1d5p", "star2d13p"])
def test_tiny_blocks(comm, shared_rng, preset, mode, overlap):
    """Blocks exactly as wide as the radius: k shrinks to 1, still exact,
    reflect and mirror at the global edges included; with overlap the
    interior is empty or a cell wide, and the strips do the rest."""
    w = cs.Stencil(preset).weights
    r = (w.shape[0] - 1) // 2
    size = comm.Get_size()
    shape = (size * r + (1 if size > 1 else 0),) + (7,) * (w.ndim - 1)
    dims = (size,) + (1,) * (w.ndim - 1)
    u = shared_rng.random(shape)
    out, ref, d1 = run_both(comm, u, 5, mode, dims=dims, stencil=preset,
                            halo_steps=None, overlap=overlap)
    assert d1.info["halo_steps"] in (None, 1)
    if overlap and d1.info["halo_steps"]:
        assert d1.info["overlap"]
    if out is not None:
        assert_close(out, ref, dict(preset=preset, mode=mode, shape=shape,
                                    overlap=overlap))


def test_block_thinner_than_radius_fails_everywhere(comm, shared_rng):
    csd = _csd()
    size = comm.Get_size()
    if size < 2:
        pytest.skip("one rank holds the whole grid: no block is thin")
    u = shared_rng.random((size * 2, 8))  # blocks of 2 rows, radius 3
    d = csd.scatter(u if comm.Get_rank() == 0 else None, comm=comm,
                    dims=(size, 1))
    with pytest.raises(ValueError, match="thinner than the stencil's radius"):
        csd.apply(d, "star2d13p", steps=3)


@pytest.mark.parametrize("overlap", [False, True])
@pytest.mark.parametrize("steps,halo_steps", [(0, None), (1, 5), (13, 5),
                                              (10, 2), (3, 1)])
def test_steps_and_rounds(comm, shared_rng, steps, halo_steps, overlap):
    u = shared_rng.random((24, 18))
    out, ref, d1 = run_both(comm, u, steps, "wrap", stencil="heat2d",
                            halo_steps=halo_steps, overlap=overlap)
    info = d1.info
    k = info["halo_steps"]
    assert info["rounds"] == (0 if steps == 0 else -(-steps // k))
    assert info["transport"] == "mpi"
    if out is not None:
        assert_close(out, ref, dict(steps=steps, halo_steps=halo_steps))


def test_input_untouched_and_result_new(comm, shared_rng):
    csd = _csd()
    u = shared_rng.random((20, 21))
    keep = u.copy()
    d = csd.scatter(u if comm.Get_rank() == 0 else None, comm=comm)
    block = np.array(d.local, copy=True)
    d1 = csd.apply(d, "box2d9p", steps=6, mode="reflect")
    np.testing.assert_array_equal(d.local, block)
    assert not np.may_share_memory(d.local, d1.local)
    np.testing.assert_array_equal(u, keep)
    again = csd.gather(d)
    if comm.Get_rank() == 0:
        np.testing.assert_array_equal(again, u)


def test_scatter_gather_roundtrip(comm, shared_rng):
    csd = _csd()
    last = comm.Get_size() - 1
    u = shared_rng.integers(-5, 5, (17, 5, 6))
    d = csd.scatter(u if comm.Get_rank() == last else None, comm=comm,
                    root=last)
    assert d.local.dtype == np.float64
    assert d.local.shape == d.local_shape
    assert repr(d).startswith("DistributedGrid(shape=(17, 5, 6), rank %d"
                              % comm.Get_rank())
    assert "dims %s" % (d.dims,) in repr(d)
    back = csd.gather(d, root=last)
    if comm.Get_rank() == last:
        np.testing.assert_array_equal(back, u)
    else:
        assert back is None


def test_from_local(comm, shared_rng):
    csd = _csd()
    u = shared_rng.random((31, 12))  # every rank can make its own part
    where = csd.local_slices(u.shape, comm)
    d = csd.from_local(u[where], comm=comm, backend="cpu")
    assert d.shape == u.shape and d.slices == where
    out = csd.gather(csd.apply(d, "heat2d", steps=9, mode="mirror"))
    if comm.Get_rank() == 0:
        assert_close(out, cs.apply(u, "heat2d", steps=9, mode="mirror"))


def test_from_local_bad_tiling(comm):
    csd = _csd()
    if comm.Get_size() < 2:
        pytest.skip("needs two ranks")
    rows = 3 + comm.Get_rank()  # blocks along axis 1 must agree on rows
    with pytest.raises(ValueError, match="must tile the grid"):
        csd.from_local(np.ones((rows, 4)), comm=comm, dims=(1, comm.Get_size()))


def test_error_on_one_rank_reaches_all(comm):
    csd = _csd()
    d = csd.scatter(np.ones((8, 8)) if comm.Get_rank() == 0 else None,
                    comm=comm)
    steps = -1 if comm.Get_rank() == comm.Get_size() - 1 else 2
    with pytest.raises(ValueError, match="steps"):
        csd.apply(d, "heat2d", steps=steps)


def test_different_arguments_refused(comm):
    csd = _csd()
    if comm.Get_size() < 2:
        pytest.skip("needs two ranks")
    d = csd.scatter(np.ones((8, 8)) if comm.Get_rank() == 0 else None,
                    comm=comm)
    with pytest.raises(ValueError, match="same arguments on every rank"):
        csd.apply(d, "heat2d", steps=2 + comm.Get_rank())


def test_bad_arguments(comm):
    csd = _csd()
    with pytest.raises(TypeError, match="must be a real numeric array"):
        csd.scatter("grid" if comm.Get_rank() == 0 else None, comm=comm)
    with pytest.raises(ValueError, match="dims"):
        csd.scatter(np.ones((8, 8)) if comm.Get_rank() == 0 else None,
                    comm=comm, dims=(comm.Get_size() + 1, 1))
    if comm.Get_size() > 1:
        with pytest.raises(ValueError, match="fewer than the"):
            csd.scatter(np.ones((8, 1)) if comm.Get_rank() == 0 else None,
                        comm=comm, dims=(1, comm.Get_size()))
    d = csd.scatter(np.ones((8, 8)) if comm.Get_rank() == 0 else None,
                    comm=comm)
    with pytest.raises(ValueError, match="halo_steps"):
        csd.apply(d, "heat2d", halo_steps=0)
    with pytest.raises(TypeError, match="halo_steps"):
        csd.apply(d, "heat2d", halo_steps=1.5)
    with pytest.raises(ValueError, match="3D stencil"):
        csd.apply(d, "heat3d")
    with pytest.raises(TypeError, match="runs on the GPU"):
        csd.apply(d, "heat2d", backend="cuda")
    with pytest.raises(ValueError, match="transport"):
        csd.apply(d, "heat2d", transport="nccl")
    with pytest.raises(TypeError, match="DistributedGrid"):
        csd.apply(np.ones((8, 8)), "heat2d")
    with pytest.raises(ValueError, match="root"):
        csd.gather(d, root=comm.Get_size())


def test_device_argument_for_host_blocks(comm):
    """device= names a GPU: refused for host blocks, on every rank; a
    wrong type or a negative index is refused before anything moves."""
    csd = _csd()
    u = np.ones((8, 8)) if comm.Get_rank() == 0 else None
    with pytest.raises(ValueError, match="blocks are in host memory"):
        csd.scatter(u, comm=comm, backend="cpu", device=0)
    with pytest.raises(TypeError, match="device must be None or a GPU"):
        csd.scatter(u, comm=comm, backend="cpu", device="0")
    with pytest.raises(ValueError, match=">= 0"):
        csd.scatter(u, comm=comm, backend="cpu", device=-1)
    where = csd.local_slices((8, 8), comm)
    with pytest.raises(ValueError, match="blocks are in host memory"):
        csd.from_local(np.ones((8, 8))[where], comm=comm, backend="cpu",
                       device=1)
    d = csd.scatter(u, comm=comm, backend="cpu")
    assert d.device is None and "numpy" in repr(d)
    assert csd.info(csd.apply(d, "heat2d", steps=1))["device"] is None


def test_info_reports_exchange(comm, shared_rng):
    csd = _csd()
    u = shared_rng.random((40, 40))
    d = csd.scatter(u if comm.Get_rank() == 0 else None, comm=comm)
    d1 = csd.apply(d, "heat2d", steps=10, mode="wrap", halo_steps=4,
                   self_exchange=True)
    info = csd.info(d1)
    assert info == csd.info()
    assert info["halo_steps"] == 4 and info["rounds"] == 3
    assert info["ghost_depth"] == (4, 4)
    assert info["bytes_sent"] > 0  # wrap: every side exchanges
    assert info["exchange_seconds"] >= 0 and info["compute_seconds"] > 0
    assert 0 <= info["vote_seconds"] <= info["seconds"]
    assert (info["exchange_seconds"] + info["compute_seconds"]
            + info["vote_seconds"]) <= info["seconds"]
    assert info["backend"] == "cpu" and info["path"] is not None


@pytest.mark.parametrize("mode", ["wrap", "reflect"])
def test_unsplit_axes_need_no_exchange(comm, shared_rng, mode):
    """An unsplit axis runs on the engine's own mode (wrap included);
    self_exchange=True sends its halos through the transport instead,
    with the same result."""
    csd = _csd()
    u = shared_rng.random((36, 28))
    d = csd.scatter(u if comm.Get_rank() == 0 else None, comm=comm,
                    dims=(comm.Get_size(), 1))
    plain = csd.apply(d, "box2d9p", steps=9, mode=mode, halo_steps=3)
    forced = csd.apply(d, "box2d9p", steps=9, mode=mode, halo_steps=3,
                       self_exchange=True)
    assert plain.info["ghost_depth"][1] == 0
    assert forced.info["ghost_depth"][1] == (3 if mode == "wrap" else 0)
    a, b = csd.gather(plain), csd.gather(forced)
    if comm.Get_rank() == 0:
        ref = cs.apply(u, "box2d9p", steps=9, mode=mode, backend="cpu")
        assert_close(a, ref, dict(mode=mode))
        assert_close(b, ref, dict(mode=mode, self_exchange=True))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape,stencil", [((61,), "1d5p"),
                                           ((40, 37), "box2d9p"),
                                           ((20, 18, 17), "heat3d")])
def test_overlap_on_and_off_agree(comm, shared_rng, shape, stencil, mode):
    """Blocks with a real interior: overlap=True and False give the same
    grid, bit for bit, and the interior ran while messages were out."""
    csd = _csd()
    u = shared_rng.uniform(-1, 1, shape)
    d = csd.scatter(u if comm.Get_rank() == 0 else None, comm=comm,
                    backend="cpu")
    runs = [csd.apply(d, stencil, steps=11, mode=mode, cval=0.25,
                      halo_steps=3, overlap=flag) for flag in (False, True)]
    off, on = runs[0].info, runs[1].info
    assert not off["overlap"] and off["engine_calls_per_round"] == 1
    if on["halo_steps"]:  # something is exchanged
        assert on["overlap"] and on["engine_calls_per_round"] > 1
        assert on["wait_after_interior_seconds"] >= 0
        assert 0 <= on["overlap_seconds"] <= on["compute_seconds"]
    a, b = csd.gather(runs[0]), csd.gather(runs[1])
    if comm.Get_rank() == 0:
        np.testing.assert_array_equal(a, b)
        assert_close(b, cs.apply(u, stencil, steps=11, mode=mode, cval=0.25,
                                 backend="cpu"), dict(mode=mode))


def test_overlap_argument(comm):
    csd = _csd()
    d = csd.scatter(np.ones((8, 8)) if comm.Get_rank() == 0 else None,
                    comm=comm, backend="cpu")
    with pytest.raises(TypeError, match="overlap must be"):
        csd.apply(d, "heat2d", overlap="yes")
    if comm.Get_size() > 1:
        with pytest.raises(ValueError, match="same arguments on every rank"):
            csd.apply(d, "heat2d", overlap=comm.Get_rank() == 0)


def test_tune_halo_steps_measures_each_candidate(comm, shared_rng,
                                                 monkeypatch):
    """tune_halo_steps runs every candidate (a k deeper than the blocks
    allow under the k that ran), returns the one with the least measured
    time, the same on every rank, and leaves the grid as it was; the
    tuned k gives the reference's grid."""
    from convstencil.distributed import _tune
    csd = _csd()
    u = shared_rng.random((24, 10))
    d = csd.scatter(u if comm.Get_rank() == 0 else None, comm=comm,
                    dims=(comm.Get_size(), 1))
    before = d.local.copy()
    k, times = csd.tune_halo_steps(d, "heat2d", steps=8, mode="wrap",
                                   candidates=[1, 2, 3, 400], repeat=1)
    assert np.array_equal(d.local, before)
    deepest = min(d.extents[0])  # heat2d: radius 1, so k <= the block
    assert set(times) == {1, 2, 3, min(400, deepest, 8)}
    assert k == min(times, key=times.get)
    assert comm.allgather((k, times)) == [(k, times)] * comm.Get_size()
    # the least time wins: the measured seconds decide, not the model
    fake = {1: 3.0, 2: 1.0, 3: 2.0}
    monkeypatch.setattr(_tune, "_seconds",
                        lambda comm, run: (run(), fake.get(
                            csd.info()["halo_steps"], 9.0))[1])
    k, times = csd.tune_halo_steps(d, "heat2d", steps=8, mode="wrap",
                                   candidates=[1, 2, 3])
    assert k == 2 and times == fake
    out = csd.gather(csd.apply(d, "heat2d", steps=8, mode="wrap",
                               halo_steps=k))
    if comm.Get_rank() == 0:
        assert_close(out, reference.apply(u, cs.Stencil("heat2d").weights,
                                          8, "wrap"))


def test_tune_halo_steps_defaults_and_bad_arguments(comm, shared_rng):
    csd = _csd()
    u = shared_rng.random((40, 12))
    d = csd.scatter(u if comm.Get_rank() == 0 else None, comm=comm,
                    dims=(comm.Get_size(), 1))
    model = csd.info(csd.apply(d, "heat2d", steps=20, mode="wrap"))
    k, times = csd.tune_halo_steps(d, "heat2d", steps=20, mode="wrap",
                                   repeat=1)
    # the model's k and the powers of two from 4 to the steps, as ran
    assert model["halo_steps"] in times and k in times
    assert len(times) >= 2
    for bad in ([], [0], [2.5], ["a"], [True]):
        with pytest.raises(ValueError, match="candidates"):
            csd.tune_halo_steps(d, "heat2d", steps=4, candidates=bad)
    with pytest.raises(ValueError, match="repeat"):
        csd.tune_halo_steps(d, "heat2d", steps=4, repeat=0)
    # nothing to exchange (each rank its own whole grid): no k to tune
    from mpi4py import MPI
    alone = csd.scatter(u, comm=MPI.COMM_SELF)
    assert csd.tune_halo_steps(alone, "heat2d", steps=4,
                               mode="wrap") == (None, {})
