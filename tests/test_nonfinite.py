"""NaN and infinities: exactly where SciPy puts them, on every backend.

``scipy.ndimage.correlate`` repeated `steps` times is the reference: its
NaN, +Inf and -Inf masks must be reproduced exactly and its finite values
to 1e-12, on every path (the CPU engine; the tensor-core emulation and
the GPU's tensor cores, fused and unfused; CUDA cores; the one-step
direct kernel; folded 1D grids; 3D planes), for every mode.  The paths
whose padded weights would spread them say that the masked path ran
(``last_run_info()["nonfinite"] is True``); finite grids keep the fast
path (False).  GPU cases are marked ``gpu``.
"""
import numpy as np
import pytest
import scipy.ndimage as ndi

import convstencil as cs
from conftest import gpu

MODES = ["constant", "wrap", "nearest", "reflect", "mirror"]
GPU = ["cuda", "cuda-tc", "cuda-core"]
BACKENDS = ["cpu", "cpu-tc"] + [pytest.param(b, marks=gpu) for b in GPU]
# what last_run_info()["nonfinite"] says where a grid holds one
MASKED = {"cpu": None, "cpu-tc": True, "cuda": True, "cuda-tc": True,
          "cuda-core": True}
SHAPES = {1: (5000,), 2: (37, 70), 3: (9, 12, 20)}


def scipy_steps(grid, w, steps, mode, cval):
    out = np.array(grid, dtype=np.float64)
    with np.errstate(all="ignore"):
        for _ in range(steps):
            out = ndi.correlate(out, w, mode=mode, cval=cval)
    return out


def assert_same_nonfinite(got, want, ctx):
    got = np.asarray(got)
    for name, test in (("NaN", np.isnan), ("+Inf", np.isposinf),
                       ("-Inf", np.isneginf)):
        g, w = test(got), test(want)
        assert np.array_equal(g, w), (
            "%s masks differ: %d cells here, %d in SciPy, %d disagree [%s]"
            % (name, g.sum(), w.sum(), (g != w).sum(), ctx))
    finite = np.isfinite(want)
    err = np.linalg.norm(got[finite] - want[finite])
    norm = np.linalg.norm(want[finite])
    assert err <= 1e-12 * max(norm, 1e-300), (err, norm, ctx)


def grid_with(rng, shape, kind):
    g = rng.random(shape)
    mid = tuple(n // 2 for n in shape)
    if kind == "nan-middle":
        g[mid] = np.nan
    elif kind == "inf-edges":
        g[(0,) * len(shape)] = np.inf
        g[tuple(n - 1 for n in shape)] = -np.inf
        g[mid] = np.nan
    elif kind == "nan-column":
        g[..., shape[-1] // 3] = np.nan  # a column (2D), a plane (3D)
    elif kind == "nan-row":
        g[shape[0] // 3] = np.nan  # a row (2D), a plane (3D), a point (1D)
    return g


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", ["nan-middle", "inf-edges", "nan-column",
                                  "nan-row"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", list(cs.PRESETS))
def test_presets_nonfinite(name, mode, kind, backend, rng):
    w = cs.Stencil(name).weights
    grid = grid_with(rng, SHAPES[w.ndim], kind)
    for steps in (1, 3, 7):
        want = scipy_steps(grid, w, steps, mode, 0.25)
        got = cs.apply(grid, name, steps=steps, mode=mode, cval=0.25,
                       backend=backend)
        info = cs.last_run_info()
        assert info["nonfinite"] is MASKED[backend], (backend, info)
        assert_same_nonfinite(got, want, dict(backend=backend, name=name,
                                              steps=steps, mode=mode,
                                              kind=kind))


@pytest.mark.parametrize("steps", [1, 4])
@pytest.mark.parametrize("backend", BACKENDS)
def test_random_kernels_with_zeros(backend, steps, rng):
    for ndim, side in ((2, 3), (2, 5), (2, 7), (3, 3), (1, 5)):
        w = rng.uniform(0.1, 1.0, (side,) * ndim)
        w[rng.random(w.shape) < 0.4] = 0.0
        w /= w.sum() or 1.0
        grid = grid_with(rng, SHAPES[ndim], "inf-edges")
        want = scipy_steps(grid, w, steps, "reflect", 0.0)
        got = cs.apply(grid, weights=w, steps=steps, mode="reflect",
                       backend=backend)
        assert_same_nonfinite(got, want, dict(backend=backend, side=side,
                                              ndim=ndim))


@pytest.mark.parametrize("backend", BACKENDS)
def test_nan_cval(backend, rng):
    grid = rng.random((30, 40))
    want = scipy_steps(grid, cs.Stencil("box2d9p").weights, 3, "constant",
                       np.nan)
    got = cs.apply(grid, "box2d9p", steps=3, cval=np.nan, backend=backend)
    assert cs.last_run_info()["nonfinite"] is MASKED[backend]
    assert_same_nonfinite(got, want, {})


@pytest.mark.parametrize("backend", BACKENDS)
def test_overflow_midrun_is_caught(backend, rng):
    # finite input, weights summing to 2: the values pass DBL_MAX
    grid = rng.uniform(1e306, 2e306, (40, 50))
    w = cs.Stencil("box2d9p").weights * 2.0
    want = scipy_steps(grid, w, 8, "nearest", 0.0)  # up to 256 times
    assert np.isinf(want).any()
    got = cs.apply(grid, weights=w, steps=8, mode="nearest",
                   backend=backend)
    assert cs.last_run_info()["nonfinite"] is MASKED[backend]
    assert_same_nonfinite(got, want, {})


@pytest.mark.parametrize("backend", BACKENDS)
def test_finite_grids_keep_the_fast_path(backend, rng):
    cs.apply(rng.random((64, 70)), "heat2d", steps=6, backend=backend)
    info = cs.last_run_info()
    assert info["nonfinite"] is (None if backend == "cpu" else False)
    assert info["path"] in ("tensor-core", "cuda-core", "dual-tessellation",
                            "direct", "direct-temporal-blocked")


def test_large_cpu_grids_every_path(rng):
    # the CPU engine's blocked and rank-one paths on grids past its
    # direct-path size
    for name, shape in (("box2d49p", (600, 700)), ("heat2d", (600, 700)),
                        ("box3d27p", (60, 70, 80))):
        w = cs.Stencil(name).weights
        grid = grid_with(rng, shape, "inf-edges")
        want = scipy_steps(grid, w, 4, "reflect", 0.0)
        got = cs.apply(grid, name, steps=4, mode="reflect", backend="cpu")
        assert_same_nonfinite(got, want, dict(name=name))


def cupy_on_device():
    """CuPy, where a CUDA device is usable and CuPy is there (else the
    test skips)."""
    if not cs.backends()["cuda"] == "available":
        pytest.skip("no usable CUDA device")
    return pytest.importorskip("cupy")


@pytest.mark.gpu
def test_device_arrays(rng):
    cp = cupy_on_device()
    host = grid_with(rng, (50, 60), "inf-edges")
    for steps in (1, 4):  # the direct kernel; the padded path's rerun
        want = scipy_steps(host, cs.Stencil("heat2d").weights, steps,
                           "wrap", 0.0)
        got = cs.apply(cp.asarray(host), "heat2d", steps=steps, mode="wrap")
        assert cs.last_run_info()["nonfinite"] is True
        assert_same_nonfinite(cp.asnumpy(got), want, dict(steps=steps))
        # in place: the rerun reads the input, which out= is
        grid = cp.asarray(host)
        cs.apply(grid, "heat2d", steps=steps, mode="wrap", out=grid)
        assert_same_nonfinite(cp.asnumpy(grid), want, dict(steps=steps,
                                                           inplace=True))
    cs.apply(cp.asarray(rng.random((50, 60))), "heat2d")
    assert cs.last_run_info()["nonfinite"] is False


def check_masked_device_run(cp, grid, host, w, steps, mode, cval, backend,
                            ctx):
    """A run on the device array `grid` (holding `host`, which has a
    value that is not finite) takes the masked path, gives SciPy's
    result and leaves the grid as it was."""
    want = scipy_steps(host, w, steps, mode, cval)
    got = cs.apply(grid, weights=w, steps=steps, mode=mode, cval=cval,
                   backend=backend)
    info = cs.last_run_info()
    assert info["nonfinite"] is True, info
    assert_same_nonfinite(cp.asnumpy(got), want, ctx)
    assert_same_nonfinite(cp.asnumpy(grid), host, ctx)


def check_overflow_noted(cp, host, w, steps, mode, backend):
    """Finite input whose result passes DBL_MAX: the run that writes the
    result notes it, and the masked path gives SciPy's infinities."""
    want = scipy_steps(host, w, steps, mode, 0.0)
    assert np.isinf(want).any()
    got = cs.apply(cp.asarray(host), weights=w, steps=steps, mode=mode,
                   backend=backend)
    assert cs.last_run_info()["nonfinite"] is True
    assert_same_nonfinite(cp.asnumpy(got), want, dict(mode=mode))


def check_padded_device_runs(cp, rng, names, shape, kinds, steps_list,
                             mode):
    """Each preset on device grids of `shape` whose rows are padded by 10
    elements (read as they are), holding each kind of non-finite value:
    masked runs, as check_masked_device_run says."""
    for name in names:
        w = cs.Stencil(name).weights
        for kind in kinds:
            host = grid_with(rng, shape, kind)
            for steps in steps_list:
                wide = cp.asarray(rng.random(shape[:-1] + (shape[-1] + 10,)))
                grid = wide[..., :shape[-1]]
                grid[...] = cp.asarray(host)
                check_masked_device_run(
                    cp, grid, host, w, steps, mode, 0.25, "cuda-core",
                    dict(name=name, kind=kind, steps=steps, mode=mode))


def check_finite_device_run(cp, host, name, steps, mode, cval=0.0,
                            backend="cuda-core"):
    """Finite all along: the fast path's result stands, and the run says
    so (no non-finite value noted); the run's info."""
    got = cs.apply(cp.asarray(host), name, steps=steps, mode=mode,
                   cval=cval, backend=backend)
    info = cs.last_run_info()
    assert info["nonfinite"] is False, (name, mode, info)
    assert_same_nonfinite(cp.asnumpy(got), scipy_steps(
        host, cs.Stencil(name).weights, steps, mode, cval),
        dict(name=name, steps=steps, mode=mode))
    return info


@pytest.mark.gpu
@pytest.mark.parametrize("mode", MODES)
def test_tb2d_between_device_arrays(mode, rng):
    # tb2d reads a float64 device grid and writes the result in place of
    # the padded layout's load and store (tests/cuda_emu asserts that no
    # load or store runs), noting non-finite values as they would: the
    # masked path must still run, from the caller's input
    cp = cupy_on_device()
    # steps: one pass; two passes of depths 8 and 3
    check_padded_device_runs(cp, rng, ("heat2d", "box2d9p"), (70, 150),
                             ("nan-middle", "inf-edges", "nan-row"), (4, 11),
                             mode)
    # finite input, a result past DBL_MAX: the last pass notes it
    check_overflow_noted(cp, rng.uniform(1e306, 2e306, (40, 50)),
                         cs.Stencil("box2d9p").weights * 2.0, 11, mode,
                         "cuda-core")
    check_finite_device_run(cp, rng.random((40, 50)), "heat2d", 11, mode)


@pytest.mark.gpu
@pytest.mark.parametrize("mode", MODES)
def test_tb3d_between_device_arrays(mode, rng):
    # tb3d, like tb2d, reads a float64 device grid and writes the result
    # without the padded layout, noting non-finite values as they would:
    # the masked path must still run, from the caller's input
    cp = cupy_on_device()
    # steps: one pass; passes of depth 3 and a tail
    check_padded_device_runs(cp, rng, ("heat3d", "box3d27p"), (12, 40, 70),
                             ("nan-middle", "inf-edges", "nan-column"),
                             (3, 7), mode)
    # finite input, a result past DBL_MAX: the last pass notes it
    check_overflow_noted(cp, rng.uniform(1e306, 2e306, (10, 20, 30)),
                         cs.Stencil("box3d27p").weights * 2.0, 7, mode,
                         "cuda-core")
    for name in ("heat3d", "box3d27p"):
        check_finite_device_run(cp, rng.random((12, 40, 70)), name, 7, mode)


def check_fold_between_device_arrays(cp, rng, n, name, steps, mode):
    """A CuPy grid of n points holding each kind of non-finite value runs
    the masked path; a finite one keeps the fast path, whose first pass
    reads the array and last step writes the result."""
    w = cs.Stencil(name).weights
    for kind in ("nan-middle", "inf-edges", "nan-row"):
        host = grid_with(rng, (n,), kind)
        check_masked_device_run(
            cp, cp.asarray(host), host, w, steps, mode, 0.25, "cuda-tc",
            dict(n=n, name=name, kind=kind, steps=steps, mode=mode))
    info = check_finite_device_run(cp, rng.random(n), name, steps, mode,
                                   0.25, "cuda-tc")
    assert info["fused_passes"] >= 1 and info["unfused_steps"] >= 1, info


@pytest.mark.gpu
@pytest.mark.parametrize("mode", MODES)
def test_fold_between_device_arrays(mode, rng):
    # a folded 1D grid between float64 device arrays: the first tc1d pass
    # reads the caller's array and the last unfused step writes the result
    # (tests/cuda_emu asserts that no load or store runs), noting
    # non-finite values as the load and the store would
    cp = cupy_on_device()
    # 3 rows of the fold (every tile at an end of the array) and 49 (the
    # tiles between read it as plain loads: tc1d.cu, tc1d_flat_inside)
    for n in (10007, 200_003):
        for name, steps in (("heat1d", 17), ("1d5p", 16), ("heat1d", 100)):
            check_fold_between_device_arrays(cp, rng, n, name, steps, mode)
    # finite input, a result past DBL_MAX: the last step notes it
    check_overflow_noted(cp, rng.uniform(1e306, 2e306, 10007),
                         cs.Stencil("heat1d").weights * 2.0, 17, mode,
                         "cuda-tc")
