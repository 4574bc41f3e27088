"""The engine's sessions (_core.session_open / run / view / copy / close)
as convstencil.distributed drives them on device blocks: a padded block
loaded once into the engine's layout, rounds of k steps, boxes read out
of and written into the current grid between rounds (the halo exchange's
pack and unpack), the grid stored once; on grids small enough for the
CPU emulation of CUDA.

Marked gpu_small: runs on a real GPU and on a build made with
CONVSTENCIL_CUDA=emulate (setup.py).  Each round equals k steps of the
plain NumPy reference (tests/reference.py) on what the grid held.
"""
import numpy as np
import pytest

import convstencil as cs
from convstencil import _core
from cai_support import StridedCAI, download
from conftest import assert_close, gpu_small
import reference

pytestmark = gpu_small

MODES = {"constant": _core.MODE_CONSTANT, "wrap": _core.MODE_WRAP,
         "nearest": _core.MODE_NEAREST, "reflect": _core.MODE_REFLECT,
         "mirror": _core.MODE_MIRROR}
PATHS = {"auto": _core.PATH_AUTO, "tensor-core": _core.PATH_TENSOR_CORE,
         "cuda-core": _core.PATH_CUDA_CORE}


def c_strides(shape):
    strides, step = [], 8
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


def lead3(values, fill):
    """`values` with leading `fill` entries up to 3 (the engine's 3D
    view of a 2D grid)."""
    return (fill,) * (3 - len(values)) + tuple(values)


def device_array(host):
    host = np.ascontiguousarray(host, dtype=np.float64)
    d = cs.DeviceArray(host.shape)
    _core.to_device(d.ptr, host)
    return d


class Session:
    """The calls convstencil.distributed makes (its _run._Session)."""

    def __init__(self, grid, w, k, mode, cval=0.0, path="auto", padded=None,
                 at=None, ends=0):
        """A session on `grid`, or with `padded` on a grid of that shape
        with `grid` (the block) at `at`, loaded at its ends only where
        ends > 0 (the first round reads the rest from `grid`)."""
        self.ndim = len(grid.shape)
        shape = grid.shape if padded is None else padded
        at = (0,) * self.ndim if at is None else at
        self.handle, self.path = _core.session_open(
            grid.ptr, lead3(c_strides(grid.shape), 0), lead3(shape, 1),
            np.ascontiguousarray(w, dtype=np.float64), k, MODES[mode], cval,
            PATHS[path], lead3(at, 0), lead3(grid.shape, 1), ends)

    def view(self):
        """The current grid as a StridedCAI (its interior)."""
        ptr, strides, shape = _core.session_view(self.handle)
        lead = 3 - self.ndim
        return StridedCAI(self, ptr, shape[lead:], strides[lead:],
                          np.float64)

    def get(self, starts, sizes):
        buf = cs.DeviceArray(sizes)
        _core.session_copy(self.handle, lead3(starts, 0), lead3(sizes, 1),
                           buf.ptr, False)
        return buf.get()

    def put(self, starts, values):
        buf = device_array(values)
        _core.session_copy(self.handle, lead3(starts, 0),
                           lead3(values.shape, 1), buf.ptr, True)

    def run(self, out=None):
        """A round; with `out` (a DeviceArray of the grid's shape) the
        last one, its result written there."""
        if out is None:
            _core.session_run(self.handle)
        else:
            _core.session_run(self.handle, None,
                              (out.ptr, lead3(c_strides(out.shape), 0)))

    def close(self, out):
        return _core.session_close(self.handle, out.ptr,
                                   lead3(c_strides(out.shape), 0))


CASES = [("heat2d", (14, 17)), ("box2d49p", (16, 15)),
         ("star2d13p", (13, 18)), ("heat3d", (5, 7, 8)),
         ("box3d27p", (5, 6, 7))]


def round_cases():
    """Every case, mode and path, but 3D on tensor cores in two modes:
    its tiles are the emulation's slowest (test_gpu_small_backends runs
    every mode there)."""
    for name, shape in CASES:
        for mode in MODES:
            for path in PATHS:
                if (len(shape) == 3 and path == "tensor-core"
                        and mode not in ("wrap", "reflect")):
                    continue
                yield pytest.param(name, shape, mode, path,
                                   id="%s-%s-%s" % (name, mode, path))


@pytest.mark.parametrize("name,shape,mode,path", list(round_cases()))
def test_rounds_with_exchanges_between(name, shape, mode, path, rng):
    """Three rounds of k steps; before each round after the first, a box
    of the grid is read out (a halo exchange's send) and another one
    overwritten (its receive): every round is k steps of the reference
    on what the grid held, and the session's view shows the grid."""
    w = cs.Stencil(name).weights
    k, cval = 2, 0.25
    host = rng.uniform(-1, 1, shape)
    grid = device_array(host)
    s = Session(grid, w, k, mode, cval, path)
    if path != "auto":
        assert s.path == path
    assert s.path in ("tensor-core", "cuda-core")
    want = host
    starts = (1,) * len(shape)
    sizes = (2,) + tuple(n - 2 for n in shape[1:])
    for round_ in range(3):
        if round_:
            sent = s.get(starts, sizes)
            box = tuple(slice(a, a + n) for a, n in zip(starts, sizes))
            np.testing.assert_array_equal(sent, download(s.view())[box])
            assert_close(sent, want[box])
            ghosts = rng.uniform(-1, 1, sizes)
            s.put(starts, ghosts)
            want = want.copy()
            want[box] = ghosts
        s.run()
        want = reference.apply(want, w, k, mode, cval)
        assert_close(download(s.view()), want,
                     dict(name=name, mode=mode, path=path, round=round_,
                          seed=rng.seed))
    out = cs.DeviceArray(shape)
    assert s.close(out) is False
    assert_close(out.get(), want, dict(name=name, mode=mode, path=path))
    np.testing.assert_array_equal(grid.get(), host)  # loaded, not touched
    with pytest.raises(ValueError, match="closed"):
        s.run()


def test_session_equals_one_apply_per_round(rng):
    """The same arithmetic as the engine call per round that a run
    without a session makes (CONVSTENCIL_DISTRIBUTED_SESSION=0): the
    same bits."""
    host = rng.uniform(-1, 1, (15, 16))
    s = Session(device_array(host), cs.Stencil("box2d9p").weights, 3,
                "reflect")
    calls = device_array(host)
    backend = {"tensor-core": "cuda-tc", "cuda-core": "cuda-core"}[s.path]
    for _ in range(2):
        s.run()
        calls = cs.apply(calls, "box2d9p", steps=3, mode="reflect",
                         backend=backend)
    out = cs.DeviceArray(host.shape)
    s.close(out)
    np.testing.assert_array_equal(out.get(), calls.get())


@pytest.mark.parametrize("name,shape,mode,path", [
    ("heat2d", (14, 17), "wrap", "cuda-core"),
    ("box2d49p", (16, 15), "reflect", "auto"),
    ("star2d13p", (13, 18), "constant", "tensor-core"),
    ("heat3d", (9, 7, 8), "nearest", "cuda-core"),
    ("box3d27p", (7, 6, 5), "mirror", "auto")])
def test_last_round_writes_the_result(name, shape, mode, path, rng):
    """The last round given the result's array (session_run's out, which
    the distributed layer's last round passes) leaves there the bits that
    the round and a store at close would: its last pass writes them where
    the passes take windows (tb2d, tb3d), else the grid is stored.  No
    round may follow, and close takes that array alone."""
    w = cs.Stencil(name).weights
    host = rng.uniform(-1, 1, shape)
    stored = Session(device_array(host), w, 3, mode, 0.25, path)
    written = Session(device_array(host), w, 3, mode, 0.25, path)
    for s in (stored, written):
        s.run()
    stored.run()
    want = cs.DeviceArray(shape)
    assert stored.close(want) is False
    out = device_array(np.full(shape, 7.0))
    written.run(out)
    with pytest.raises(ValueError, match="last round has run"):
        written.run()
    assert written.close(out) is False
    np.testing.assert_array_equal(out.get(), want.get())
    assert_close(out.get(), reference.apply(host, w, 6, mode, 0.25),
                 dict(name=name, mode=mode, path=path))
    # close given another array than the last round's
    other = Session(device_array(host), w, 3, mode, 0.25, path)
    kept = device_array(host)  # alive: no new array takes its address
    other.run(kept)
    with pytest.raises(ValueError, match="another array"):
        other.close(cs.DeviceArray(shape))


def test_last_round_notes_a_result_that_is_not_finite(rng):
    """Written by the last pass, a result that became infinite is still
    reported (the store's check, made by the pass)."""
    for path in ("cuda-core", "auto"):
        s = Session(device_array(np.full((10, 11), 1e300)),
                    np.full((3, 3), 1e10), 1, "wrap", path=path)
        out = cs.DeviceArray((10, 11))
        s.run(out)
        assert s.close(out) is True


@pytest.mark.parametrize("bands", ["lead", "apart"])
@pytest.mark.parametrize("name,shape,mode", [
    ("heat2d", (21, 17), "wrap"), ("star2d13p", (23, 18), "reflect"),
    ("heat3d", (13, 9, 8), "wrap"), ("box3d27p", (12, 8, 9), "constant")])
def test_split_rounds_equal_whole_ones(name, shape, mode, bands, rng,
                                       monkeypatch):
    """Rounds whose last pass is split (session_run's bands: the planes
    the neighbours receive first, in the pass's own launch (lead) or in
    launches of their own (CONVSTENCIL_SPLIT_BANDS=apart)) leave the bits
    of whole rounds, each round waited for as the distributed layer waits
    (session_wait_bands, session_exchanged)."""
    if bands == "apart":
        monkeypatch.setenv("CONVSTENCIL_SPLIT_BANDS", "apart")
    w = cs.Stencil(name).weights
    k = 3
    depth = k * (w.shape[0] // 2)
    host = rng.uniform(-1, 1, shape)
    whole = Session(device_array(host), w, k, mode, 0.5, "cuda-core")
    split = Session(device_array(host), w, k, mode, 0.5, "cuda-core")
    for _ in range(3):
        whole.run()
        assert _core.session_run(split.handle, (depth, depth)) is True
        _core.session_wait_bands(split.handle)
        _core.session_exchanged(split.handle)
    whole.run()
    split.run()
    got, want = cs.DeviceArray(shape), cs.DeviceArray(shape)
    assert whole.close(want) is False
    assert split.close(got) is False
    np.testing.assert_array_equal(got.get(), want.get())
    assert_close(got.get(), reference.apply(host, w, 4 * k, mode, 0.5),
                 dict(name=name, mode=mode, bands=bands))


def ghosted_block(name, k, rng):
    """(weights, ghost depth g, the padded shape, the block's place, the
    block): a slab's block with g ghost planes (rows) on each side, as
    the distributed layer opens its session on."""
    w = cs.Stencil(name).weights
    g = k * (w.shape[0] // 2)
    plane = (17,) if w.ndim == 2 else (9, 8)
    box = (3 * g + 1,) + plane
    padded = (box[0] + 2 * g,) + plane
    at = (g,) + (0,) * len(plane)
    return w, g, padded, at, rng.uniform(-1, 1, box)


def put_ghosts(s, g, padded, rng):
    """A halo exchange's receive: both ghost slabs of session s."""
    zeros = (0,) * (len(padded) - 1)
    for start in (0, padded[0] - g):
        s.put((start,) + zeros, rng.uniform(-1, 1, (g,) + padded[1:]))


@pytest.mark.parametrize("name,k,mode", [
    ("heat2d", 12, "wrap"), ("box2d9p", 10, "reflect"),
    ("heat3d", 6, "wrap"), ("heat3d", 4, "nearest"),
    ("box3d27p", 5, "constant")])
def test_first_round_reads_the_block_loaded_at_its_ends(name, k, mode, rng):
    """A session opened with ends (the distributed layer's: the planes its
    first exchange sends) loads only those planes of the block, and the
    first round's first pass reads the rest from the block itself: the
    middle of the block, written here after the open, is what the first
    round read.  Rounds with ghost slabs received between them, split and
    whole, the last one writing the result, leave the bits of a session
    loaded whole; the block is left as it was."""
    w, g, padded, at, host = ghosted_block(name, k, rng)
    block = device_array(host)
    ends = Session(block, w, k, mode, 0.5, "cuda-core", padded, at, ends=g)
    host[g:-g] = rng.uniform(-1, 1, host[g:-g].shape)
    _core.to_device(block.ptr, host)
    whole = Session(device_array(host), w, k, mode, 0.5, "cuda-core",
                    padded, at)
    results = []
    for s in (ends, whole):
        ghosts = np.random.default_rng(rng.seed)  # the same for both
        for round_ in range(3):
            put_ghosts(s, g, padded, ghosts)
            if round_ < 2:
                assert _core.session_run(s.handle, (g, g)) is True
                _core.session_wait_bands(s.handle)
                _core.session_exchanged(s.handle)
        out = device_array(np.zeros(padded))
        s.run(out)
        assert s.close(out) is False
        results.append(out.get())
    np.testing.assert_array_equal(results[0], results[1])
    np.testing.assert_array_equal(block.get(), host)


def test_block_loaded_at_its_ends_is_whole_for_copies_and_close(rng):
    """Before the first round, a copy that reads the block's middle out of
    the grid or writes into the block, and a close without a round, see
    the block whole (the session loads the rest first); a value that is
    not finite in the middle is reported (the first pass checks what it
    reads)."""
    k = 6
    w, g, padded, at, host = ghosted_block("heat3d", k, rng)
    mid = (g + 8, 0, 0)
    # (each block stays alive until its session's first round or close)
    block = device_array(host)
    s = Session(block, w, k, "wrap", 0.0, "cuda-core", padded, at, ends=g)
    np.testing.assert_array_equal(s.get(mid, (3, 9, 8)), host[8:11])
    out = cs.DeviceArray(padded)
    assert s.close(out) is False
    np.testing.assert_array_equal(out.get()[g:-g], host)
    # a close without a round stores the block whole
    s = Session(block, w, k, "wrap", 0.0, "cuda-core", padded, at, ends=g)
    out = cs.DeviceArray(padded)
    assert s.close(out) is False
    np.testing.assert_array_equal(out.get()[g:-g], host)
    # a box written into the block before the first round is read by it
    values = rng.uniform(-1, 1, (2, 9, 8))
    results = []
    for ends in (g, 0):
        s = Session(block, w, k, "wrap", 0.0, "cuda-core", padded, at,
                    ends=ends)
        put_ghosts(s, g, padded, np.random.default_rng(3))
        s.put(mid, values)
        s.run()
        out = cs.DeviceArray(padded)
        assert s.close(out) is False
        results.append(out.get()[g:-g])
    np.testing.assert_array_equal(results[0], results[1])
    # non-finite in the middle, which only the first pass reads
    bad = host.copy()
    bad[10, 4, 4] = np.nan
    block = device_array(bad)
    s = Session(block, w, k, "wrap", 0.0, "cuda-core", padded, at, ends=g)
    put_ghosts(s, g, padded, rng)
    s.run()
    assert s.close(cs.DeviceArray(padded)) is True


def test_nonfinite_is_reported_when_stored(rng):
    host = rng.random((12, 13))
    host[5, 6] = np.nan
    s = Session(device_array(host), cs.Stencil("heat2d").weights, 2, "wrap")
    s.run()
    assert s.close(cs.DeviceArray(host.shape)) is True
    # a value that becomes infinite on the way is reported too
    s = Session(device_array(np.full((10, 11), 1e300)),
                np.full((3, 3), 1e10), 1, "wrap")
    s.run()
    assert s.close(cs.DeviceArray((10, 11))) is True


def test_session_errors(rng):
    grid = device_array(rng.random((9, 10)))
    w = cs.Stencil("heat2d").weights
    with pytest.raises(ValueError, match="round_steps"):
        Session(grid, w, 0, "wrap")
    s = Session(grid, w, 1, "wrap")
    out = cs.DeviceArray((9, 10))
    s.close(out)
    for call in (s.run, s.view, lambda: s.get((0, 0), (1, 1)),
                 lambda: s.close(out)):
        with pytest.raises(ValueError, match="closed"):
            call()
    # the last round exchanges nothing: no bands; its array is float64's
    s = Session(grid, w, 1, "wrap")
    with pytest.raises(ValueError, match="no exchange after it"):
        _core.session_run(s.handle, (1, 1), (out.ptr, (0, 80, 8)))
    with pytest.raises(TypeError, match=r"\(out_ptr, out_strides\)"):
        _core.session_run(s.handle, None, out.ptr)
    with pytest.raises(TypeError, match=r"\(low, high\)"):
        _core.session_run(s.handle, 1)
    s.close(out)
    # a session dropped without closing frees itself
    Session(grid, w, 1, "wrap")
    cs.clear_cache()


@pytest.mark.parametrize("shape, starts, sizes", [
    ((7, 9, 10), (2, 1, 3), (3, 5, 4)),     # a box inside: pitched rows
    ((9, 6, 5), (2, 0, 0), (4, 6, 5)),      # whole planes: one run
    ((1, 12, 11), (0, 2, 0), (1, 5, 11)),   # 2D rows
    ((6, 5, 4), (0, 0, 1), (6, 5, 1))])     # one column: rows of one
def test_device_block_copies_are_exact(rng, shape, starts, sizes):
    """The distributed layer's block copies (_device_blocks.copy: one
    pitched cudaMemcpy3D where the rows are contiguous, a zero-step
    engine call otherwise) move a box out of a block and into another
    block's box exactly, touching nothing else."""
    from convstencil.distributed import _device_blocks
    host = rng.uniform(-1, 1, shape)
    where = tuple(slice(a, a + n) for a, n in zip(starts, sizes))
    block = _device_blocks.upload(host)
    box = cs.DeviceArray(sizes)
    _device_blocks.copy(_device_blocks.region(block, starts, sizes), box)
    np.testing.assert_array_equal(box.get(), host[where])
    other = _device_blocks.upload(np.full(shape, 7.0))
    _device_blocks.copy(box, _device_blocks.region(other, starts, sizes))
    want = np.full(shape, 7.0)
    want[where] = host[where]
    np.testing.assert_array_equal(other.get(), want)
    np.testing.assert_array_equal(block.get(), host)


def test_pitched_copy_refuses_what_it_cannot_express(rng):
    """_core.device_copy_pitched copies views of contiguous rows whose
    planes are whole numbers of rows apart, and refuses (False, nothing
    written) the rest: the caller then copies through the engine."""
    host = rng.uniform(-1, 1, (4, 6, 8))
    src = cs.DeviceArray(host.shape)
    _core.to_device(src.ptr, host)
    dst = cs.DeviceArray(host.shape)
    _core.to_device(dst.ptr, np.zeros(host.shape))
    strides = c_strides(host.shape)
    every_other = (strides[0], strides[1], 16)    # rows not contiguous
    ragged = (strides[0] + 8, strides[1], 8)      # planes between rows
    for bad in (every_other, ragged):
        assert _core.device_copy_pitched(dst.ptr, strides, src.ptr, bad,
                                         (4, 6, 4)) is False
        assert _core.device_copy_pitched(dst.ptr, bad, src.ptr, strides,
                                         (4, 6, 4)) is False
    assert not dst.get().any()
    assert _core.device_copy_pitched(dst.ptr, strides, src.ptr, strides,
                                     host.shape) is True
    np.testing.assert_array_equal(dst.get(), host)
