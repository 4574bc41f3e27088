"""convstencil.apply on device arrays, on grids small enough for the CPU
emulation of CUDA: convstencil.DeviceArray and a pure-Python producer of
the CUDA Array Interface (cai_support.StridedCAI: any dtype, strides of
either sign) in and out, out= (the grid itself included), every= with a
callback, progress=True, stream=, zero steps, and what last_run_info()
and explain() say after a device run.

Marked gpu_small: runs on a real GPU and on a build made with
CONVSTENCIL_CUDA=emulate (setup.py), where the engine's real CUDA
sources run on the CPU.  Every result is compared with the plain NumPy
reference (tests/reference.py).
"""
import io
import sys

import numpy as np
import pytest

import convstencil as cs
from convstencil import _apply, _core, _engine
from cai_support import StridedCAI, download, upload
from conftest import EMULATED_CUDA, assert_close, gpu_small
import reference

pytestmark = gpu_small

MODES = [("constant", 0.5), ("wrap", 0.0), ("nearest", 0.0),
         ("reflect", 0.0), ("mirror", 0.0)]
MODE_IDS = [m for m, _ in MODES]
# odd extents, several tiles of every kernel family, still quick on the
# emulation (its blocks run one at a time, their threads as OS threads)
SHAPES = {1: (61,), 2: (13, 19), 3: (6, 7, 9)}


def weights_of(name):
    return cs.Stencil(name).weights


def expected(host, name_or_w, steps, mode="constant", cval=0.0):
    w = weights_of(name_or_w) if isinstance(name_or_w, str) else name_or_w
    return reference.apply(np.asarray(host, dtype=np.float64), w, steps,
                           mode, cval)


def device_array(host):
    """A convstencil.DeviceArray holding the float64 values of `host`."""
    host = np.ascontiguousarray(host, dtype=np.float64)
    d = cs.DeviceArray(host.shape)
    _core.to_device(d.ptr, host)
    return d


# ---------------------------------------------------------------------------
# DeviceArray in, DeviceArray out

@pytest.mark.parametrize("mode,cval", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("name", list(cs.PRESETS))
def test_device_array_presets_every_mode(name, mode, cval, rng):
    host = rng.uniform(-1, 1, SHAPES[weights_of(name).ndim])
    grid = device_array(host)
    got = cs.apply(grid, name, steps=3, mode=mode, cval=cval)
    assert isinstance(got, cs.DeviceArray) and got is not grid
    assert got.shape == host.shape and got.dtype == np.float64
    info = cs.last_run_info()
    assert info["device_array"] and info["backend"] == "cuda"
    assert info["steps"] == 3 and info["mode"] == mode
    assert_close(got.get(), expected(host, name, 3, mode, cval),
                 dict(name=name, mode=mode, seed=rng.seed))
    np.testing.assert_array_equal(grid.get(), host)  # input untouched


@pytest.mark.parametrize("backend", ["cuda", "cuda-tc", "cuda-core"])
@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_device_array_on_each_gpu_backend(ndim, backend, rng):
    name = {1: "1d5p", 2: "box2d9p", 3: "heat3d"}[ndim]
    host = rng.uniform(-1, 1, SHAPES[ndim])
    got = cs.apply(device_array(host), name, steps=4, mode="reflect",
                   backend=backend)
    info = cs.last_run_info()
    want_path = {"cuda-tc": "tensor-core", "cuda-core": "cuda-core"}
    if backend in want_path:
        assert info["path"] == want_path[backend], info
    assert info["fused_depth"] >= 1
    assert_close(got.get(), expected(host, name, 4, "reflect"),
                 dict(backend=backend, info=info))


# ---------------------------------------------------------------------------
# a producer convstencil does not know: the interface only

LAYOUTS = ["C", "F", "flipped", "strided", "float32", "int32", "uint8",
           "bool", "float16", "int64"]


def host_layout(values, layout):
    """`values` (float64, 2D) as a NumPy view of `layout`, whose upload
    keeps it: its dtype and strides."""
    if layout == "C":
        return values
    if layout == "F":
        return np.asfortranarray(values)
    if layout == "flipped":
        return values[::-1, ::-1]
    if layout == "strided":  # a view with gaps and an offset into memory
        parent = np.full((2 * values.shape[0] + 1, 3 * values.shape[1] + 2),
                         np.nan)
        view = parent[1::2, 2::3]
        view[...] = values
        return view
    return values.astype(layout)


@pytest.mark.parametrize("backend", ["cuda", "cuda-tc", "cuda-core"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_cai_dtypes_and_strides(layout, backend, rng):
    host = host_layout(rng.random((11, 14)) * 10, layout)
    grid = upload(host)
    np.testing.assert_array_equal(download(grid), host)
    got = cs.apply(grid, "box2d9p", steps=3, mode="nearest",
                   backend=backend)
    # a producer convstencil does not know gets a DeviceArray
    assert isinstance(got, cs.DeviceArray)
    assert_close(got.get(), expected(host, "box2d9p", 3, "nearest"),
                 dict(layout=layout, backend=backend, seed=rng.seed))
    np.testing.assert_array_equal(download(grid), host)


def test_cai_negative_strides_in_3d(rng):
    host = rng.random(SHAPES[3])[::-1, :, ::-1]
    got = cs.apply(upload(host), "box3d27p", steps=2, mode="wrap")
    assert_close(got.get(), expected(host, "box3d27p", 2, "wrap"))


def test_cai_version_2_and_read_only_input(rng):
    host = rng.random((9, 12))
    grid = upload(host, readonly=True)

    class Version2:
        def __init__(self, cai):
            cai = dict(cai)
            cai["version"] = 2
            cai.pop("stream")
            self.__cuda_array_interface__ = cai

    for producer in (grid, Version2(grid.__cuda_array_interface__)):
        got = cs.apply(producer, "heat2d", steps=2)
        assert_close(got.get(), expected(host, "heat2d", 2))


# ---------------------------------------------------------------------------
# out=

@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_out_is_the_grid_another_array_or_a_strided_view(ndim, rng):
    name = {1: "heat1d", 2: "star2d13p", 3: "box3d27p"}[ndim]
    host = rng.random(SHAPES[ndim])
    want = expected(host, name, 4, "wrap")
    # the grid itself (a DeviceArray)
    grid = device_array(host)
    assert cs.apply(grid, name, steps=4, mode="wrap", out=grid) is grid
    assert_close(grid.get(), want, dict(out="grid"))
    # the grid itself (a StridedCAI, flipped)
    flipped = upload(host[::-1])
    view = flipped.view(ptr=flipped.ptr + (host.shape[0] - 1)
                        * flipped.strides[0],
                        strides=(-flipped.strides[0],)
                        + flipped.strides[1:])
    np.testing.assert_array_equal(download(view), host)
    assert cs.apply(view, name, steps=4, mode="wrap", out=view) is view
    assert_close(download(view), want, dict(out="flipped grid"))
    # another array, and a strided view of one (transposed memory)
    other = device_array(np.full(host.shape, np.nan))
    assert cs.apply(device_array(host), name, steps=4, mode="wrap",
                    out=other) is other
    assert_close(other.get(), want, dict(out="another array"))
    strided = upload(np.full(host.shape[::-1], np.nan).T)
    cs.apply(upload(host), name, steps=4, mode="wrap", out=strided)
    assert_close(download(strided), want, dict(out="transposed view"))


def test_out_overlapping_the_grid_in_another_layout(rng):
    """out= shares the grid's memory through another view of it: the
    engine reads the grid before writing (the result is still right)."""
    host = rng.random((12, 12))
    grid = upload(host)
    transposed = grid.view(strides=grid.strides[::-1])
    cs.apply(grid, "box2d9p", steps=3, mode="mirror", out=transposed)
    assert_close(download(transposed), expected(host, "box2d9p", 3,
                                                "mirror"))


def test_out_checks(rng):
    grid = device_array(rng.random((8, 9)))
    with pytest.raises(TypeError, match="float64"):
        cs.apply(grid, "heat2d",
                 out=upload(np.zeros((8, 9), dtype=np.float32)))
    with pytest.raises(ValueError, match="shape"):
        cs.apply(grid, "heat2d", out=cs.DeviceArray((9, 8)))
    with pytest.raises(ValueError, match="read-only"):
        cs.apply(grid, "heat2d", out=upload(np.zeros((8, 9)),
                                            readonly=True))
    with pytest.raises(TypeError, match="GPU array"):
        cs.apply(grid, "heat2d", out=np.zeros((8, 9)))
    with pytest.raises(TypeError, match="host memory"):
        cs.apply(grid, "heat2d", backend="cpu")
    with pytest.raises(TypeError, match="out is a GPU array"):
        cs.apply(np.zeros((8, 9)), "heat2d", out=grid)
    with pytest.raises(TypeError, match="stream= applies to GPU arrays"):
        cs.apply(np.zeros((8, 9)), "heat2d", stream=1)


# ---------------------------------------------------------------------------
# steps, callbacks, progress, streams

@pytest.mark.parametrize("kind", ["DeviceArray", "StridedCAI"])
def test_zero_steps_copies(kind, rng):
    host = rng.integers(-50, 50, (7, 10)).astype(np.int32)
    grid = (device_array(host) if kind == "DeviceArray"
            else upload(host[:, ::-1]))
    values = download(grid).astype(np.float64)
    got = cs.apply(grid, "heat2d", steps=0)
    assert got is not grid
    np.testing.assert_array_equal(got.get(), values)
    same = device_array(values)
    assert cs.apply(same, "heat2d", steps=0, out=same) is same
    np.testing.assert_array_equal(same.get(), values)


@pytest.mark.parametrize("layout", ["C", "flipped", "strided", "float32",
                                    "float16"])
def test_zero_steps_with_nonfinite_values(layout, rng):
    """A NaN or an infinity sends the grid to the masked path, whose
    zero-step copy reads the caller's array in its own dtype and strides
    (it once read any array as C-ordered float64: a strided view's values
    came out scrambled, convstencil.distributed's packed slabs with them)."""
    values = rng.random((9, 11))
    values[2, 3], values[6, 8] = np.nan, -np.inf
    host = host_layout(values, layout)
    want = host.astype(np.float64)
    got = cs.apply(upload(host), "heat2d", steps=0)
    assert cs.last_run_info()["nonfinite"] is True
    np.testing.assert_array_equal(got.get(), want)
    out = upload(np.full(values.shape[::-1], 7.0).T)  # strided out too
    cs.apply(upload(host), "heat2d", steps=0, out=out)
    np.testing.assert_array_equal(download(out), want)


@pytest.mark.parametrize("kind", ["DeviceArray", "StridedCAI"])
def test_every_with_a_callback(kind, rng):
    host = rng.random((12, 15))
    grid = device_array(host) if kind == "DeviceArray" else upload(
        np.asfortranarray(host))
    seen = []

    def callback(step, state):
        # a device array of the input's kind (a DeviceArray for a
        # producer convstencil does not know), valid during the call
        assert hasattr(state, "__cuda_array_interface__")
        seen.append((step, download(state)))

    got = cs.apply(grid, "box2d9p", steps=10, every=3, callback=callback,
                   mode="reflect")
    assert [s for s, _ in seen] == [3, 6, 9]
    for step, state in seen:
        assert_close(state, expected(host, "box2d9p", step, "reflect"),
                     dict(step=step))
    info = cs.last_run_info()
    assert info["segments"] == 4 and info["device_array"]
    assert_close(got.get(), expected(host, "box2d9p", 10, "reflect"))
    # the same bits with and without a callback: segments end the passes
    quiet = cs.apply(grid, "box2d9p", steps=10, every=3, mode="reflect")
    np.testing.assert_array_equal(got.get(), quiet.get())
    np.testing.assert_array_equal(download(grid), host)


class Stop(Exception):
    pass


def test_raising_callback_keeps_the_grid_that_is_out(rng):
    host = rng.random((10, 11))
    grid = device_array(host)

    def callback(step, state):
        if step == 4:
            raise Stop("stop")

    with pytest.raises(Stop):
        cs.apply(grid, "heat2d", steps=6, every=2, out=grid,
                 callback=callback)
    np.testing.assert_array_equal(grid.get(), host)
    # and with a callback that returns, out= the grid gets the result
    cs.apply(grid, "heat2d", steps=6, every=2, out=grid,
             callback=lambda step, state: None)
    assert_close(grid.get(), expected(host, "heat2d", 6))


def test_progress_counter(monkeypatch, rng):
    monkeypatch.setitem(sys.modules, "tqdm", None)
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    host = rng.random((9, 13))
    grid = device_array(host)
    steps = 7
    got = cs.apply(grid, "heat2d", steps=steps, progress=True)
    assert err.getvalue().endswith("%d/%d steps (100%%)\n" % (steps, steps))
    assert_close(got.get(), expected(host, "heat2d", steps))
    # with segments too
    err.truncate(0)
    got = cs.apply(grid, "heat2d", steps=steps, every=2, progress=True,
                   callback=lambda step, state: None)
    assert err.getvalue().endswith("%d/%d steps (100%%)\n" % (steps, steps))
    assert_close(got.get(), expected(host, "heat2d", steps))


class CupyLikeStream:
    """A stream object as CuPy gives it (`.ptr`); 0 names the legacy
    default stream."""

    def __init__(self, ptr):
        self.ptr = ptr


class TorchLikeStream:
    def __init__(self, handle):
        self.cuda_stream = handle


@pytest.mark.parametrize("stream", [1, 0, CupyLikeStream(0),
                                    TorchLikeStream(1)],
                         ids=["handle", "zero", "ptr", "cuda_stream"])
def test_stream_argument_queues_the_work(stream, rng):
    host = rng.random((10, 16))
    grid = device_array(host)
    out = cs.DeviceArray(host.shape)
    got = cs.apply(grid, "box2d49p", steps=3, stream=stream, out=out)
    assert got is out
    assert cs.last_run_info()["device_seconds"] is None  # not waited for
    _core.cuda_stream_synchronize(1)  # the legacy default stream
    assert_close(out.get(), expected(host, "box2d49p", 3))


def test_stream_argument_checks(rng):
    grid = device_array(rng.random((5, 5)))
    with pytest.raises(TypeError, match="stream must be a CUDA stream"):
        cs.apply(grid, "heat2d", stream="1")
    with pytest.raises(ValueError, match=">= 0"):
        cs.apply(grid, "heat2d", stream=-1)


def test_producer_stream_is_waited_for(rng):
    """A version 3 interface naming the producer's stream (the legacy
    default stream here): the engine waits for it first."""
    host = rng.random((11, 9))
    got = cs.apply(upload(host, stream=1), "heat2d", steps=2, mode="wrap")
    assert_close(got.get(), expected(host, "heat2d", 2, "wrap"))


def test_one_step_between_distinct_arrays_runs_direct(rng):
    host = rng.random(SHAPES[2])
    grid = device_array(host)
    got = cs.apply(grid, "star2d13p", steps=1, mode="mirror")
    assert cs.last_run_info()["path"] == "direct"
    assert_close(got.get(), expected(host, "star2d13p", 1, "mirror"))
    cs.apply(grid, "star2d13p", steps=1, mode="mirror", out=grid)
    assert cs.last_run_info()["path"] != "direct"
    assert_close(grid.get(), expected(host, "star2d13p", 1, "mirror"))


class _Version2(StridedCAI):
    """The same view through an interface of version 2."""

    @property
    def __cuda_array_interface__(self):
        return dict(super().__cuda_array_interface__, version=2)


@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_the_short_path_gives_the_full_paths_result(ndim, rng, monkeypatch):
    """One step between arrays of the plain kind (version 3, float64)
    runs through the engine's own reading of their interfaces
    (_apply._onestep_plain): its results and records are those of the
    full path, bit for bit, for fresh results, out= (strided, the grid
    itself) and every mode; other arrays take the full path."""
    name = {1: "1d5p", 2: "box2d49p", 3: "box3d27p"}[ndim]
    host = rng.uniform(-1, 1, SHAPES[ndim])
    flipped = host[(slice(None, None, -1),) * ndim]
    short = {"on": True, "calls": 0}
    plain, run_plain = _apply._onestep_plain, _engine.run_onestep_cai

    def counted(*args, **kwargs):
        short["calls"] += 1
        return run_plain(*args, **kwargs)
    monkeypatch.setattr(_apply, "_onestep_plain",
                        lambda *args: plain(*args) if short["on"] else None)
    monkeypatch.setattr(_engine, "run_onestep_cai", counted)

    def run(grid_of, out_of, mode, cval):
        grid = grid_of()
        got = cs.apply(grid, name, mode=mode, cval=cval, out=out_of(grid))
        info = cs.last_run_info()
        for measured in ("device_seconds", "fraction_of_prediction"):
            info.pop(measured)
        return download(got), info

    grids = {"DeviceArray": (lambda: device_array(host), host),
             "flipped": (lambda: upload(flipped), flipped)}
    outs = {"fresh": lambda g: None,
            "out": lambda g: device_array(np.zeros(host.shape)),
            "strided out": lambda g: upload(np.zeros(host.shape)[
                (slice(None, None, -1),) * ndim]),
            "in place": lambda g: g}
    for mode, cval in MODES:
        for grid_name, (grid_of, src) in grids.items():
            for out_name, out_of in outs.items():
                where = dict(mode=mode, grid=grid_name, out=out_name)
                calls = short["calls"]
                short["on"] = True
                got, info = run(grid_of, out_of, mode, cval)
                assert short["calls"] == calls + 1, where
                short["on"] = False
                want, want_info = run(grid_of, out_of, mode, cval)
                np.testing.assert_array_equal(got, want, err_msg=str(where))
                assert info == want_info, where
                assert_close(got, expected(src, name, 1, mode, cval), where)
    # not plain (float32; version 2): the full path reads them
    short["on"], calls = True, short["calls"]
    as_v2 = upload(host)
    for grid, values in ((upload(host.astype(np.float32)),
                          host.astype(np.float32)),
                         (_Version2(as_v2.owner, as_v2.ptr, as_v2.shape,
                                    as_v2.strides, as_v2.dtype), host)):
        got = cs.apply(grid, name, mode="wrap")
        assert_close(got.get(), expected(values, name, 1, "wrap"),
                     dict(dtype=grid.dtype, ndim=ndim))
    assert short["calls"] == calls


# ---------------------------------------------------------------------------
# the DeviceArray itself, and what the run says about itself

def test_device_array_protocols(rng):
    host = rng.random((4, 6))
    d = device_array(host)
    assert d.ndim == 2 and d.size == 24 and d.nbytes == 192
    assert "DeviceArray(shape=(4, 6)" in repr(d)
    cai = d.__cuda_array_interface__
    assert cai["data"] == (d.ptr, False) and cai["typestr"] == "<f8"
    np.testing.assert_array_equal(download(StridedCAI(d, d.ptr, d.shape,
                                                      None, np.float64)),
                                  host)
    assert d.__dlpack_device__() == (2, _core.cuda_current_device())
    info = _core.dlpack_info(d.__dlpack__())
    assert info["data"] == d.ptr and tuple(info["shape"]) == (4, 6)
    assert info["device_type"] == 2


def test_last_run_info_and_explain_after_device_runs(rng):
    host = rng.random(SHAPES[2])
    grid = device_array(host)
    cs.apply(grid, "heat2d", steps=6, mode="wrap")
    info = cs.last_run_info()
    assert info["device_array"] is True and info["backend"] == "cuda"
    assert info["path"] in ("tensor-core", "cuda-core")
    assert info["device_seconds"] is not None and info["device_seconds"] >= 0
    assert info["predicted_seconds"] > 0
    assert info["fraction_of_prediction"] is not None
    # explain() of the device grid: the plan the run followed
    e = cs.explain(grid, "heat2d", steps=6, mode="wrap")
    assert e.backend == "cuda" and e.path == info["path"]
    assert e.fused_depth == info["fused_depth"]
    assert e.transfer_seconds is None  # a GPU array stays on the device
    assert "CUDA" in e.device or "NVIDIA" in e.device
    if EMULATED_CUDA:
        # the emulation says what it is, and is priced as an H100
        assert "emulation" in e.device and e.device_assumed
        assert "emulation" in _core.cuda_info()[2]
    # a one-step direct run is recorded and priced too
    cs.apply(grid, "heat2d", steps=1)
    info = cs.last_run_info()
    assert info["path"] == "direct" and info["predicted_seconds"] > 0
    assert "device_array" in info and info["steps"] == 1
    text = str(e)
    assert "heat2d" in text and e.path in text


def test_the_cache_frees_the_block_given_back_longest_ago(rng, monkeypatch):
    """Over the limit of idle device blocks, the one given back longest
    ago goes, not the largest: the block a call just used stays for the
    next call of its shape (freeing the largest first freed it, so a
    larger grid after smaller ones allocated its block at every call)."""
    big, small = rng.random((60, 64)), rng.random((13, 19))

    def kept_alone(host):
        cs.clear_cache()
        cs.apply(upload(host), "heat2d", steps=4)
        info = cs.cache_info()
        assert info["blocks"] == 1
        return info["device_bytes"]

    big_bytes, small_bytes = kept_alone(big), kept_alone(small)
    assert big_bytes > 2 * small_bytes
    # room for the big block (and a lane's parameters), not for both
    monkeypatch.setenv("CONVSTENCIL_CACHE_BYTES", str(big_bytes))
    try:
        cs.clear_cache()
        cs.apply(upload(small), "heat2d", steps=4)
        out = cs.apply(upload(big), "heat2d", steps=4)
        info = cs.cache_info()
        # the big block stays (the lanes' parameters, also counted,
        # may have grown a little)
        assert info["blocks"] == 1
        assert info["device_bytes"] > (big_bytes + small_bytes) / 2
        assert_close(download(out), expected(big, "heat2d", 4))
    finally:
        cs.clear_cache()
