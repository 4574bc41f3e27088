"""The GPU backends on NumPy grids ("cuda", "cuda-tc", "cuda-core"), on
grids small enough for the CPU emulation of CUDA: 1D, 2D and 3D, every
mode, the paths they report, out= the grid, every= with a callback, and
explain() / last_run_info() after the runs.

Marked gpu_small: runs on a real GPU and on a build made with
CONVSTENCIL_CUDA=emulate (setup.py).  Every result is compared with the
plain NumPy reference (tests/reference.py).
"""
import numpy as np
import pytest

import convstencil as cs
from conftest import (EMULATED_CUDA, assert_close, gpu_small,
                      random_weights)
import reference

pytestmark = gpu_small

GPU_BACKENDS = ("cuda", "cuda-tc", "cuda-core")
MODES = [("constant", 0.0), ("constant", 1.5), ("wrap", 0.0),
         ("nearest", 0.0), ("reflect", 0.0), ("mirror", 0.0)]
MODE_IDS = ["constant", "constant-cval", "wrap", "nearest", "reflect",
            "mirror"]
SHAPES = {1: (67,), 2: (14, 21), 3: (6, 9, 10)}
# a preset of each dimension whose tensor-core and CUDA-core paths both
# fuse several steps a pass (so the boundary band's fix-up runs)
NAMES = {1: "1d5p", 2: "heat2d", 3: "heat3d"}
PATHS = {"cuda-tc": "tensor-core", "cuda-core": "cuda-core"}


def run(grid, backend, **kw):
    """apply() into a NaN-filled `out` (an element no kernel wrote fails
    the comparison); returns it and last_run_info()."""
    out = np.full(np.shape(grid), np.nan)
    assert cs.apply(grid, backend=backend, out=out, **kw) is out
    return out, cs.last_run_info()


@pytest.fixture(autouse=True)
def poison_device_memory(monkeypatch):
    """Device memory NaN when allocated, and no fusion cap (as
    test_gpu.py runs)."""
    monkeypatch.setenv("CONVSTENCIL_CUDA_POISON", "1")
    monkeypatch.delenv("CONVSTENCIL_CUDA_MAX_DEPTH", raising=False)


@pytest.mark.parametrize("backend", GPU_BACKENDS)
@pytest.mark.parametrize("mode,cval", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_every_dimension_mode_and_backend(ndim, mode, cval, backend, rng):
    host = rng.uniform(-1, 1, SHAPES[ndim])
    kept = host.copy()
    name = NAMES[ndim]
    got, info = run(host, backend, stencil=name, steps=5, mode=mode,
                    cval=cval)
    ctx = dict(ndim=ndim, mode=mode, backend=backend, info=info,
               seed=rng.seed)
    assert_close(got, reference.apply(host, cs.Stencil(name).weights, 5,
                                      mode, cval), ctx)
    assert info["backend"] == "cuda" and "device_array" not in info
    assert info["path"] == PATHS.get(backend, info["path"]), ctx
    assert info["path"] in ("tensor-core", "cuda-core"), ctx
    assert info["fused_depth"] * info["fused_passes"] \
        + info["unfused_steps"] == 5, ctx
    assert info["device_seconds"] is not None and info["device_seconds"] >= 0
    np.testing.assert_array_equal(host, kept)


@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_random_kernels(ndim, rng):
    w = random_weights(rng, ndim, 7 if ndim < 3 else 3)
    host = rng.uniform(-1, 1, SHAPES[ndim])
    mode = ["constant", "wrap", "nearest", "reflect", "mirror"][
        int(rng.integers(0, 5))]
    steps = int(rng.integers(1, 6))
    want = reference.apply(host, w, steps, mode, -0.25)
    for backend in ("cuda", "cuda-core"):
        got, info = run(host, backend, weights=w, steps=steps, mode=mode,
                        cval=-0.25)
        assert_close(got, want, dict(weights=w.shape, mode=mode, steps=steps,
                                     backend=backend, info=info,
                                     seed=rng.seed))


def test_input_dtypes_and_layouts(rng):
    """Host grids of other dtypes and strides go up as float64 copies."""
    values = rng.integers(-9, 9, (15, 12))
    want = reference.apply(values, cs.Stencil("box2d9p").weights, 3, "wrap")
    for grid in (values.astype(np.int16), values.astype(np.float32).T.T,
                 np.asfortranarray(values.astype(np.float64)),
                 values.astype(np.float64)[::-1][::-1]):
        got = cs.apply(grid, "box2d9p", steps=3, mode="wrap",
                       backend="cuda")
        assert got.dtype == np.float64 and got.flags.c_contiguous
        assert_close(got, want, dict(dtype=grid.dtype))


def test_out_is_the_grid(rng):
    host = rng.random(SHAPES[2])
    grid = host.copy()
    assert cs.apply(grid, "box2d49p", steps=2, mode="reflect", out=grid,
                    backend="cuda-tc") is grid
    assert_close(grid, reference.apply(host, cs.Stencil("box2d49p").weights,
                                       2, "reflect"))


def test_zero_steps(rng):
    host = rng.random(SHAPES[3])
    got = cs.apply(host, "box3d27p", steps=0, backend="cuda")
    np.testing.assert_array_equal(got, host)
    assert got is not host


def test_every_with_a_callback_on_the_device(rng):
    """A host grid in segments on the GPU: uploaded once, the state kept
    there, downloaded for each callback (read-only, host memory)."""
    host = rng.random(SHAPES[2])
    w = cs.Stencil("heat2d").weights
    seen = []

    def callback(step, state):
        assert isinstance(state, np.ndarray) and not state.flags.writeable
        seen.append((step, state.copy()))

    got = cs.apply(host, "heat2d", steps=8, every=3, callback=callback,
                   mode="mirror", backend="cuda")
    assert [s for s, _ in seen] == [3, 6]
    for step, state in seen:
        assert_close(state, reference.apply(host, w, step, "mirror"),
                     dict(step=step))
    assert_close(got, reference.apply(host, w, 8, "mirror"))
    info = cs.last_run_info()
    assert info["segments"] == 3 and info["backend"] == "cuda"
    quiet = cs.apply(host, "heat2d", steps=8, every=3, mode="mirror",
                     backend="cuda")
    np.testing.assert_array_equal(got, quiet)


class Stop(Exception):
    pass


def test_raising_callback_keeps_the_grid(rng):
    host = rng.random(SHAPES[2])
    grid = host.copy()

    def callback(step, state):
        raise Stop

    with pytest.raises(Stop):
        cs.apply(grid, "heat2d", steps=6, every=2, out=grid,
                 callback=callback, backend="cuda")
    np.testing.assert_array_equal(grid, host)


def test_nan_lands_where_scipy_puts_it(rng):
    """A NaN in the grid: the engine notices and takes its masked path,
    which keeps non-finite values where repeated SciPy correlates do."""
    host = rng.random((12, 15))
    host[4, 7] = np.nan
    w = cs.Stencil("heat2d").weights  # zero corners: SciPy skips them
    want = reference.scipy_apply(host, w, 3, "reflect")
    for backend in GPU_BACKENDS:
        got = cs.apply(host, weights=w, steps=3, mode="reflect",
                       backend=backend)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        finite = ~np.isnan(want)
        assert_close(np.where(finite, got, 0.0), np.where(finite, want, 0.0),
                     dict(backend=backend))


@pytest.mark.parametrize("backend", GPU_BACKENDS)
@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_explain_names_the_path_that_ran(ndim, backend, rng):
    host = rng.random(SHAPES[ndim])
    name = NAMES[ndim]
    e = cs.explain(host, name, steps=7, mode="nearest", backend=backend)
    got, info = run(host, backend, stencil=name, steps=7, mode="nearest")
    assert e.path == info["path"], (str(e), info)
    assert e.fused_depth == info["fused_depth"]
    assert e.fused_passes == info["fused_passes"]
    assert e.unfused_steps == info["unfused_steps"]
    assert e.transfer_seconds is not None  # a NumPy grid goes up and down
    assert info["predicted_seconds"] > 0
    assert info["fraction_of_prediction"] > 0
    if EMULATED_CUDA:
        assert "emulation" in e.device and e.device_assumed


def test_backends_and_device_description():
    status = cs.backends()
    assert all(status[b] == "available" for b in GPU_BACKENDS)
    built, count, message = cs._core.cuda_info()
    assert built and count >= 1
    caps = cs._core.cuda_device_caps()
    assert caps["cc_major"] >= 8 and caps["sms"] >= 1
    # the image the device runs: its own architecture's, or the PTX of an
    # older one (build_tools/cuda_arch.py); on sm_90 the full kernels
    assert 80 <= caps["image_arch"] <= 10 * caps["cc_major"] + 9
    if caps["cc_major"] == 9:
        assert caps["image_arch"] == 90
    free, total = cs._core.cuda_mem_info()
    assert 0 < free <= total
    if EMULATED_CUDA:
        assert message.startswith("CPU emulation of CUDA"), message
