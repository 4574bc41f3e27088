"""GPU arrays in and out: CuPy (CUDA Array Interface), PyTorch (DLPack),
and any other producer (a bare interface object gets a DeviceArray).

Every result is compared with the CPU engine on the same values as
float64 (itself checked against the plain reference elsewhere), and
checked to stay on the device, of the input's kind.  Marked ``gpu``:
skipped where no CUDA device is usable, or where CuPy / PyTorch are not
installed.
"""
import numpy as np
import pytest

import convstencil as cs
from conftest import assert_close, gpu
from convstencil import _core

pytestmark = gpu

MODES = [("constant", 0.5), ("wrap", 0.0), ("nearest", 0.0),
         ("reflect", 0.0), ("mirror", 0.0)]
MODE_IDS = [m for m, _ in MODES]
SHAPES = {1: (100003,), 2: (301, 517), 3: (37, 41, 45)}


@pytest.fixture(scope="module")
def cp():
    return pytest.importorskip("cupy")


@pytest.fixture(scope="module")
def torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch sees no CUDA device")
    return torch


def reference(host, name_or_w, steps, mode, cval):
    kw = ({"weights": name_or_w} if isinstance(name_or_w, np.ndarray)
          else {"stencil": name_or_w})
    return cs.apply(np.asarray(host, dtype=np.float64), steps=steps,
                    mode=mode, cval=cval, backend="cpu", **kw)


@pytest.mark.parametrize("mode,cval", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("name", list(cs.PRESETS))
def test_cupy_presets_every_mode(cp, name, mode, cval, rng):
    ndim = cs.Stencil(name).ndim
    host = rng.random(SHAPES[ndim])
    grid = cp.asarray(host)
    kept = grid.copy()
    got = cs.apply(grid, name, steps=5, mode=mode, cval=cval)
    assert type(got) is cp.ndarray and got.dtype == cp.float64
    assert got.device == grid.device and got.flags.c_contiguous
    info = cs.last_run_info()
    assert info["device_array"] and info["backend"] == "cuda"
    assert_close(cp.asnumpy(got), reference(host, name, 5, mode, cval),
                 dict(name=name, mode=mode))
    assert bool(cp.all(grid == kept))  # the input is never modified


@pytest.mark.parametrize("layout", ["C", "F", "float32", "int32", "uint8",
                                    "bool", "float16", "flipped",
                                    "strided"])
@pytest.mark.parametrize("backend", ["cuda", "cuda-tc", "cuda-core"])
def test_cupy_dtypes_and_layouts(cp, layout, backend, rng):
    host = rng.random((257, 130)) * 10
    if layout == "F":
        grid = cp.asfortranarray(cp.asarray(host))
    elif layout in ("float32", "int32", "uint8", "bool", "float16"):
        grid = cp.asarray(host).astype(layout)
    elif layout == "flipped":
        grid = cp.asarray(host)[::-1, ::-1]
    else:
        grid = cp.asarray(host)[::2, 1::3]
    values = cp.asnumpy(grid).astype(np.float64)
    got = cs.apply(grid, "box2d9p", steps=4, mode="reflect",
                   backend=backend)
    assert type(got) is cp.ndarray and got.dtype == cp.float64
    assert_close(cp.asnumpy(got), reference(values, "box2d9p", 4, "reflect",
                                            0.0), dict(layout=layout))


@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_cupy_out_is_the_grid_or_another_array(cp, ndim, rng):
    name = {1: "1d5p", 2: "star2d13p", 3: "box3d27p"}[ndim]
    host = rng.random(SHAPES[ndim])
    want = reference(host, name, 7, "wrap", 0.0)
    grid = cp.asarray(host)
    got = cs.apply(grid, name, steps=7, mode="wrap", out=grid)
    assert got is grid
    assert_close(cp.asnumpy(grid), want)
    other = cp.full(host.shape, cp.nan)
    got = cs.apply(cp.asarray(host), name, steps=7, mode="wrap", out=other)
    assert got is other
    assert_close(cp.asnumpy(other), want)
    # out with strides of its own: a transposed view
    base = cp.full(host.shape[::-1], cp.nan)
    view = base.T
    cs.apply(cp.asarray(host), name, steps=7, mode="wrap", out=view)
    assert_close(cp.asnumpy(view), want)


def test_cupy_out_checks(cp):
    grid = cp.zeros((8, 9))
    with pytest.raises(TypeError, match="float64"):
        cs.apply(grid, "heat2d", out=cp.zeros((8, 9), dtype=cp.float32))
    with pytest.raises(ValueError, match="shape"):
        cs.apply(grid, "heat2d", out=cp.zeros((9, 8)))
    with pytest.raises(TypeError, match="host memory"):
        cs.apply(grid, "heat2d", backend="cpu")
    with pytest.raises(TypeError, match="GPU array"):
        cs.apply(grid, "heat2d", out=np.zeros((8, 9)))


@pytest.mark.parametrize("mode,cval", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("name", list(cs.PRESETS))
def test_torch_presets_every_mode(torch, name, mode, cval, rng):
    ndim = cs.Stencil(name).ndim
    host = rng.random(SHAPES[ndim])
    grid = torch.from_numpy(host).cuda()
    got = cs.apply(grid, name, steps=3, mode=mode, cval=cval)
    assert isinstance(got, torch.Tensor) and got.is_cuda
    assert got.dtype == torch.float64 and got.device == grid.device
    assert_close(got.cpu().numpy(), reference(host, name, 3, mode, cval))


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16",
                                   "bfloat16", "int64", "int16", "bool"])
def test_torch_dtypes_and_views(torch, dtype, rng):
    host = rng.random((130, 257)) * 8
    grid = torch.from_numpy(host).cuda().to(getattr(torch, dtype))
    values = grid.double().cpu().numpy()
    got = cs.apply(grid, "heat2d", steps=3, mode="nearest")
    assert_close(got.cpu().numpy(), reference(values, "heat2d", 3,
                                              "nearest", 0.0))
    view = grid.t()  # non-contiguous
    got = cs.apply(view, "heat2d", steps=3, mode="nearest")
    assert_close(got.cpu().numpy(), reference(values.T, "heat2d", 3,
                                              "nearest", 0.0))
    out = torch.empty((130, 257), dtype=torch.float64, device="cuda")
    assert cs.apply(grid, "heat2d", steps=3, mode="nearest", out=out) is out


class BareCAI:
    """A producer convstencil does not know: only the interface."""

    def __init__(self, array):
        self.array = array
        self.__cuda_array_interface__ = array.__cuda_array_interface__


def test_unknown_producer_gets_a_device_array(cp, torch, rng):
    host = rng.random((64, 80))
    got = cs.apply(BareCAI(cp.asarray(host)), "box2d49p", steps=2)
    assert isinstance(got, cs.DeviceArray)
    want = reference(host, "box2d49p", 2, "constant", 0.0)
    assert_close(got.get(), want)
    assert_close(cp.asnumpy(cp.asarray(got)), want)         # CAI
    assert_close(torch.from_dlpack(got).cpu().numpy(), want)  # DLPack
    assert "DeviceArray" in repr(got)


def spin_kernel(cp):
    return cp.RawKernel(r"""
    extern "C" __global__ void spin(long long cycles) {
        long long t0 = clock64();
        while (clock64() - t0 < cycles) { }
    }""", "spin")


def test_cupy_work_on_another_stream_is_waited_for(cp, rng):
    host = rng.random((512, 512))
    spin = spin_kernel(cp)
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        grid = cp.zeros((512, 512))
        spin((1,), (1,), (np.int64(200_000_000),))  # ~0.1 s
        grid[...] = cp.asarray(host)
        got = cs.apply(grid, "heat2d", steps=2)  # CAI v3 names `stream`
    assert_close(cp.asnumpy(got), reference(host, "heat2d", 2, "constant",
                                            0.0))


def test_torch_work_on_another_stream_is_waited_for(torch, rng):
    host = rng.random((512, 512))
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        grid = torch.zeros((512, 512), dtype=torch.float64, device="cuda")
        torch.cuda._sleep(200_000_000)
        grid.copy_(torch.from_numpy(host).cuda(non_blocking=False))
        got = cs.apply(grid, "heat2d", steps=2)  # the DLPack exchange
    assert_close(got.cpu().numpy(), reference(host, "heat2d", 2, "constant",
                                              0.0))


def test_stream_argument_queues_without_waiting(cp, rng):
    host = rng.random((1024, 1024))
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        grid = cp.asarray(host)
        out = cp.empty_like(grid)
        got = cs.apply(grid, "box2d49p", steps=20, stream=stream, out=out)
        assert cs.last_run_info()["device_seconds"] is None
        stream.synchronize()
    assert got is out
    assert_close(cp.asnumpy(out), reference(host, "box2d49p", 20,
                                            "constant", 0.0))


@pytest.mark.parametrize("name", ["heat2d", "box2d49p", "heat3d", "heat1d"])
@pytest.mark.parametrize("mode,cval", MODES, ids=MODE_IDS)
def test_one_step_on_device_arrays_runs_in_place(cp, name, mode, cval, rng):
    """A steps=1 call between distinct device arrays (a scheme's many small
    calls) runs the direct kernel on the arrays themselves, whatever path
    the model would price for the padded layout; out= the grid cannot."""
    host = rng.random(SHAPES[cs.Stencil(name).weights.ndim])
    grid = cp.asarray(host)
    got = cs.apply(grid, name, steps=1, mode=mode, cval=cval)
    assert cs.last_run_info()["path"] == "direct"
    assert_close(cp.asnumpy(got), reference(host, name, 1, mode, cval))
    cs.apply(grid, name, steps=1, mode=mode, cval=cval, out=grid)
    assert cs.last_run_info()["path"] != "direct"
    np.testing.assert_allclose(cp.asnumpy(grid), cp.asnumpy(got),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kind", ["cupy", "numpy"])
def test_callback_on_device_and_host_grids(cp, kind, rng):
    host = rng.random((200, 300))
    grid = cp.asarray(host) if kind == "cupy" else host
    seen = []

    def callback(step, state):
        if kind == "cupy":
            assert type(state) is cp.ndarray
            seen.append((step, cp.asnumpy(state)))
        else:
            assert isinstance(state, np.ndarray) and not state.flags.writeable
            seen.append((step, state.copy()))

    got = cs.apply(grid, "heat2d", steps=11, every=3, callback=callback,
                   mode="mirror")
    assert [s for s, _ in seen] == [3, 6, 9]
    for step, state in seen:
        assert_close(state, reference(host, "heat2d", step, "mirror", 0.0))
    host_got = cp.asnumpy(got) if kind == "cupy" else got
    assert_close(host_got, reference(host, "heat2d", 11, "mirror", 0.0))
    quiet = cs.apply(grid, "heat2d", steps=11, every=3, mode="mirror")
    quiet = cp.asnumpy(quiet) if kind == "cupy" else quiet
    np.testing.assert_array_equal(host_got, quiet)


def test_raising_callback_keeps_a_device_grid(cp, rng):
    grid = cp.asarray(rng.random((100, 120)))
    kept = grid.copy()

    def callback(step, state):
        if step == 6:
            raise RuntimeError("stop")

    with pytest.raises(RuntimeError, match="stop"):
        cs.apply(grid, "heat2d", steps=6, every=2, out=grid,
                 callback=callback)
    assert bool(cp.all(grid == kept))


def test_memory_returns_after_clear_cache(cp, rng):
    pool = cp.get_default_memory_pool()
    for name in ("heat2d", "box2d49p", "star2d13p"):  # kernels loaded
        cs.apply(cp.asarray(rng.random((40, 40))), name, steps=4)
        cs.apply(rng.random((40, 40)), name, steps=4)
    cs.clear_cache()
    pool.free_all_blocks()
    free0, _ = _core.cuda_mem_info()
    for i in range(1000):
        n = 16 + (i * 37) % 300
        grid = cp.asarray(rng.random((n, n + i % 7)))
        name = ("heat2d", "box2d49p", "star2d13p")[i % 3]
        cs.apply(grid, name, steps=1 + i % 4)
        if i % 100 == 0:
            cs.apply(rng.random((n, n)), "heat2d")  # host grids too
    del grid
    assert cs.cache_info()["lanes"] >= 1
    cs.clear_cache()
    pool.free_all_blocks()
    free1, _ = _core.cuda_mem_info()
    assert abs(free1 - free0) <= 4 << 20, (free0, free1)
    info = cs.cache_info()
    assert info["device_bytes"] == 0 and info["blocks"] == 0


def test_numpy_calls_reuse_the_cache(rng):
    cs.clear_cache()
    host = rng.random((2000, 3000))
    a = cs.apply(host, "heat2d", steps=3)
    info = cs.cache_info()
    assert info["blocks"] == 1 and info["pinned_bytes"] > 0
    b = cs.apply(host[:1000], "heat2d", steps=3)  # smaller: same block
    assert cs.cache_info()["blocks"] == 1
    assert_close(a, reference(host, "heat2d", 3, "constant", 0.0))
    assert_close(b, reference(host[:1000], "heat2d", 3, "constant", 0.0))


def test_device_grid_larger_than_the_card_is_a_memory_error(cp):
    _, total = _core.cuda_mem_info()
    n = int((total // 8) ** 0.5) + 1024  # a grid past the card's memory
    fake = BareCAI.__new__(BareCAI)
    fake.__cuda_array_interface__ = {
        "version": 3, "shape": (n, n), "typestr": "<f8",
        "data": (cp.zeros(1).data.ptr, False), "strides": (0, 0),
        "stream": None}
    # a broadcast view: one element seen as n x n; the engine's grids of
    # that size cannot exist
    with pytest.raises(MemoryError, match="device memory"):
        cs.apply(fake, "heat2d")
    assert_close(cp.asnumpy(cs.apply(cp.ones((5, 5)), "heat2d")),
                 reference(np.ones((5, 5)), "heat2d", 1, "constant", 0.0))
