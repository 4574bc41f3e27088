"""Every backend against the reference: presets, modes, steps, sizes, kernels.

The same parametrized suite runs on "cpu", "cpu-tc" and (where a GPU is
visible) "cuda".  Each case checks the result against tests/reference.py
(relative error <= 1e-12), the output's type/shape/layout, and that the
caller's grid is unchanged.
"""
import numpy as np
import pytest

import convstencil as cs
import reference as ref
from conftest import BACKENDS, assert_close, gpu, random_weights

# (mode, cval): "constant" both with the default cval and a non-zero one
MODES = [("constant", 0.0), ("constant", -1.25), ("wrap", 0.0),
         ("nearest", 0.0), ("reflect", 0.0), ("mirror", 0.0)]
MODE_IDS = ["constant", "constant-cval", "wrap", "nearest", "reflect",
            "mirror"]

# Grid sizes per ndim: one point, smaller than the kernel, odd, prime,
# not a multiple of any tile.  `small` ones also run 50 steps.
SIZES = {
    1: [(1,), (2,), (7,), (13,), (1000,)],
    2: [(1, 1), (2, 3), (5, 4), (7, 9), (31, 37), (129, 131)],
    3: [(1, 1, 1), (2, 3, 2), (5, 7, 9), (17, 19, 13)],
}
STEPS = (0, 1, 2, 7, 50)
MAX_POINTS_FOR_50_STEPS = 5000


def _cases():
    for name in ref.PRESET_SHAPES:
        ndim = ref.PRESET_SHAPES[name][0]
        for shape in SIZES[ndim]:
            for steps in STEPS:
                if steps == 50 and np.prod(shape) > MAX_POINTS_FOR_50_STEPS:
                    continue
                yield pytest.param(
                    name, shape, steps,
                    id="%s-%s-s%d" % (name, "x".join(map(str, shape)), steps))


def check_apply(backend, grid, weights_or_stencil, steps, mode, cval, rng,
                kernel_label=None, **kwargs):
    """Run apply() on `backend`, compare with the reference, check basics."""
    grid_before = np.array(grid, copy=True)
    if isinstance(weights_or_stencil, cs.Stencil):
        w = weights_or_stencil.weights
        out = cs.apply(grid, weights_or_stencil, steps=steps, mode=mode,
                       cval=cval, backend=backend, **kwargs)
    else:
        w = np.asarray(weights_or_stencil)
        out = cs.apply(grid, weights=w, steps=steps, mode=mode, cval=cval,
                       backend=backend, **kwargs)
    ctx = dict(backend=backend, shape=np.shape(grid),
               kernel=kernel_label or w.shape, mode=mode, cval=cval,
               steps=steps, seed=rng.seed)
    assert isinstance(out, np.ndarray), ctx
    assert out.dtype == np.float64, ctx
    assert out.flags.c_contiguous, ctx
    assert out.shape == np.shape(grid), ctx
    assert out is not grid, ctx
    np.testing.assert_array_equal(grid, grid_before,
                                  err_msg="input modified [%s]" % ctx)
    want = ref.apply(grid_before, w, steps, mode, cval)
    assert_close(out, want, ctx, scale=lambda: np.linalg.norm(ref.apply(
        np.abs(grid_before), np.abs(w), steps, mode, abs(cval))))
    return out


@pytest.mark.parametrize("mode,cval", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("name,shape,steps", list(_cases()))
@pytest.mark.parametrize("backend", BACKENDS)
def test_preset(backend, name, shape, steps, mode, cval, rng):
    grid = rng.uniform(-1.0, 1.0, shape)
    check_apply(backend, grid, cs.Stencil(name), steps, mode, cval, rng,
                kernel_label=name)


@pytest.mark.parametrize("backend", BACKENDS)
def test_preset_by_name_equals_stencil(backend, rng):
    grid = rng.standard_normal((23, 17))
    for name in ("heat2d", "box2d49p", "Box-2D49P"):
        by_name = cs.apply(grid, name, steps=3, backend=backend)
        by_obj = cs.apply(grid, cs.Stencil(name), steps=3, backend=backend)
        by_w = cs.apply(grid, weights=cs.Stencil(name).weights, steps=3,
                        backend=backend)
        np.testing.assert_array_equal(by_name, by_obj)
        np.testing.assert_array_equal(by_name, by_w)


# ---------------------------------------------------------------------------
# Random custom kernels

KERNEL_SHAPES = {
    1: [(1,), (3,), (5,), (7,), (9,), (11,), (13,), (15,)],
    2: [(1, 1), (1, 3), (3, 1), (3, 3), (1, 7), (7, 1), (3, 5), (5, 3),
        (5, 5), (7, 3), (5, 7), (7, 7)],
    3: [(1, 1, 1), (3, 3, 3), (1, 3, 5), (5, 3, 1), (3, 5, 3), (3, 1, 3),
        (5, 5, 5)],
}
CUSTOM_SIZES = {
    1: [(1,), (4,), (37,), (257,)],
    2: [(1, 1), (3, 2), (11, 13), (67, 41)],
    3: [(1, 1, 1), (2, 4, 3), (9, 6, 11)],
}


def _kernel_cases():
    for ndim, shapes in KERNEL_SHAPES.items():
        for kshape in shapes:
            yield pytest.param(kshape, id="k" + "x".join(map(str, kshape)))


@pytest.mark.parametrize("mode,cval", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("kshape", list(_kernel_cases()))
@pytest.mark.parametrize("backend", BACKENDS)
def test_random_weights(backend, kshape, mode, cval, rng):
    ndim = len(kshape)
    w = random_weights(rng, ndim, 0, shape=kshape)
    for shape in CUSTOM_SIZES[ndim]:
        grid = rng.standard_normal(shape)
        for steps in (1, 2, 7):
            check_apply(backend, grid, w, steps, mode, cval, rng)


@pytest.mark.parametrize("mode,cval", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("ndim", [1, 2, 3])
@pytest.mark.parametrize("backend", BACKENDS)
def test_random_weights_random_shapes(backend, ndim, mode, cval, rng):
    # random odd kernel shapes (often non-square), signs and grid sizes
    max_side = {1: 15, 2: 7, 3: 5}[ndim]
    max_n = {1: 300, 2: 40, 3: 12}[ndim]
    for _ in range(4):
        w = random_weights(rng, ndim, max_side)
        shape = tuple(int(n) for n in rng.integers(1, max_n, ndim))
        grid = rng.standard_normal(shape)
        check_apply(backend, grid, w, int(rng.integers(1, 6)), mode, cval,
                    rng)


@pytest.mark.parametrize("mode,cval", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("kshape", [(15, 15), (15, 3), (1, 15), (9, 9, 9),
                                    (15, 1, 3)],
                         ids=lambda s: "k" + "x".join(map(str, s)))
def test_cpu_large_radius(kshape, mode, cval, rng):
    # the plain CPU engine takes any radius up to 7 on every axis
    w = random_weights(rng, len(kshape), 0, shape=kshape)
    sizes = {2: [(3, 4), (20, 33)], 3: [(2, 3, 4), (12, 10, 11)]}
    for shape in sizes[len(kshape)]:
        grid = rng.standard_normal(shape)
        check_apply("cpu", grid, w, 2, mode, cval, rng)


@pytest.mark.parametrize("kshape", [(7, 7, 7), (7, 3, 5), (1, 7, 1)],
                         ids=lambda s: "k" + "x".join(map(str, s)))
@pytest.mark.parametrize("backend", BACKENDS)
def test_3d_kernels_up_to_7(backend, kshape, rng):
    # cpu-tc's 3D limit is 7x7x7: the largest allowed kernels must work
    w = random_weights(rng, 3, 0, shape=kshape)
    for shape in [(3, 2, 4), (9, 8, 10)]:
        grid = rng.standard_normal(shape)
        for mode, cval in (("constant", 0.5), ("wrap", 0.0),
                           ("mirror", 0.0)):
            check_apply(backend, grid, w, 2, mode, cval, rng)


def test_cpu_1d_radius_7(rng):
    w = random_weights(rng, 1, 0, shape=(15,))
    for mode, cval in MODES:
        check_apply("cpu", rng.standard_normal(50), w, 3, mode, cval, rng)
        check_apply("cpu-tc", rng.standard_normal(50), w, 3, mode, cval, rng)


CANCELLING = {
    "highpass-1d": np.array([-0.25, 0.5, -0.25]),
    "laplace-2d": np.array([[0.0, -0.125, 0.0], [-0.125, 0.5, -0.125],
                            [0.0, -0.125, 0.0]]),
    "near-zero-sum-1d": np.array([-0.47, 0.2, 0.33]),
    "random-signs-2d": None,
    "random-signs-3d": None,
}


@pytest.mark.parametrize("mode,cval", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("kernel", list(CANCELLING))
@pytest.mark.parametrize("backend", BACKENDS)
def test_cancelling_weights(backend, kernel, mode, cval, rng):
    # Kernels that (nearly) cancel themselves shrink the result far below
    # the input's scale, so a relative error says little (see
    # conftest.random_weights); the error must still be tiny against the
    # input's scale: ||out - ref|| <= 1e-12 * sqrt(N) * max(|u0|, |cval|)
    # (sum|w| <= 1, so no intermediate value exceeds that bound).
    w = CANCELLING[kernel]
    if w is None:
        ndim = int(kernel[-2])
        w = rng.uniform(0.1, 1.0, (3, 5, 3)[:ndim]) * rng.choice(
            [-1.0, 1.0], (3, 5, 3)[:ndim])
        w /= np.abs(w).sum()
    shapes = {1: [(1,), (2,), (50,)], 2: [(1, 1), (2, 3), (30, 31)],
              3: [(1, 1, 1), (9, 10, 8)]}[w.ndim]
    for shape in shapes:
        grid = rng.uniform(-1, 1, shape)
        scale = max(np.abs(grid).max(), abs(cval)) * np.sqrt(grid.size)
        for steps in (1, 3, 7, 12):
            out = cs.apply(grid, weights=w, steps=steps, mode=mode,
                           cval=cval, backend=backend)
            want = ref.apply(grid, w, steps, mode, cval)
            err = np.linalg.norm((out - want).ravel())
            assert err <= 1e-12 * scale, dict(
                backend=backend, kernel=kernel, shape=shape, mode=mode,
                cval=cval, steps=steps, err=err, scale=scale, seed=rng.seed,
                info=cs.last_run_info())


@pytest.mark.parametrize("backend", BACKENDS)
def test_periodic_alias(backend, rng):
    grid = rng.standard_normal((19, 21))
    w = random_weights(rng, 2, 5)
    a = cs.apply(grid, weights=w, steps=4, mode="periodic", backend=backend)
    b = cs.apply(grid, weights=w, steps=4, mode="wrap", backend=backend)
    np.testing.assert_array_equal(a, b)
    assert_close(a, ref.apply(grid, w, 4, "wrap"),
                 dict(backend=backend, mode="periodic", seed=rng.seed))


@pytest.mark.parametrize("backend", BACKENDS)
def test_cval_read_at_every_step(backend):
    # a zero grid with cval=1 and a weighted-average stencil: the edge band
    # grows by r per step; a backend that pads once would get this wrong
    grid = np.zeros((15, 15))
    w = np.full((3, 3), 1.0 / 9.0)
    for steps in (1, 2, 3, 6):
        out = cs.apply(grid, weights=w, steps=steps, cval=1.0,
                       backend=backend)
        want = ref.apply(grid, w, steps, "constant", 1.0)
        assert_close(out, want, dict(backend=backend, steps=steps, cval=1.0))
        # the centre is 8 cells from the outside: untouched for 6 steps
        assert out[7, 7] == 0.0
        assert out[0, 0] > 0


# ---------------------------------------------------------------------------
# Temporal fusion: fused passes must equal step-by-step everywhere

FUSED_PRESETS = ["heat1d", "heat2d", "box2d9p", "heat3d", "box3d27p"]
FUSED_SHAPES = {1: (300,), 2: (64, 64), 3: (20, 18, 22)}


@pytest.mark.parametrize("steps", [3, 4, 5])
@pytest.mark.parametrize("mode,cval", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("name", FUSED_PRESETS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_fused_equals_step_by_step(backend, name, mode, cval, steps, rng):
    s = cs.Stencil(name)
    grid = rng.uniform(-1, 1, FUSED_SHAPES[s.ndim])
    fused = cs.apply(grid, s, steps=steps, mode=mode, cval=cval,
                     backend=backend)
    one = grid
    for _ in range(steps):
        one = cs.apply(one, s, steps=1, mode=mode, cval=cval,
                       backend=backend)
    ctx = dict(backend=backend, kernel=name, mode=mode, cval=cval,
               steps=steps, shape=grid.shape, seed=rng.seed)
    assert_close(fused, one, dict(ctx, vs="step-by-step"))
    assert_close(fused, ref.apply(grid, s.weights, steps, mode, cval),
                 dict(ctx, vs="reference"))


@pytest.mark.parametrize("mode", ["constant", "wrap", "nearest", "reflect",
                                  "mirror"])
@pytest.mark.parametrize("steps", [3, 4, 5, 9])
def test_cpu_tc_fuses_heat2d(steps, mode, rng):
    grid = rng.uniform(-1, 1, (64, 64))
    out = cs.apply(grid, "heat2d", steps=steps, mode=mode, cval=0.5,
                   backend="cpu-tc")
    info = cs.last_run_info()
    assert info["backend"] == "cpu-tc", info
    assert info["fused_depth"] > 1, info
    assert info["fused_passes"] >= 1, info
    assert_close(out, ref.apply(grid, cs.Stencil("heat2d").weights, steps,
                                mode, 0.5),
                 dict(backend="cpu-tc", kernel="heat2d", mode=mode,
                      steps=steps, seed=rng.seed, info=info))


@pytest.mark.parametrize("steps", [1, 2, 3, 7, 12])
@pytest.mark.parametrize("backend", BACKENDS)
def test_run_info_accounts_for_every_step(backend, steps, rng):
    # every step runs either inside a fused pass or on its own
    cs.apply(rng.uniform(-1, 1, (64, 64)), "heat2d", steps=steps,
             backend=backend)
    info = cs.last_run_info()
    depth, passes, rest = (info["fused_depth"], info["fused_passes"],
                           info["unfused_steps"])
    assert min(depth, passes, rest) >= 0, info
    if passes:
        assert depth * passes + rest == steps, info
    else:
        assert rest == steps, info


# ---------------------------------------------------------------------------
# GPU only: the big sizes

def _cuda_large_cases():
    for name in ("heat2d", "box2d9p", "star2d13p", "box2d49p"):
        for (mode, cval), mode_id in zip(MODES, MODE_IDS):
            for shape, steps_list in (((1023, 1025), (1, 3, 8)),
                                      ((4099, 4097), (3,))):
                for steps in steps_list:
                    yield pytest.param(
                        name, mode, cval, shape, steps,
                        id="%s-%s-%s-s%d" % (name, mode_id,
                                             "x".join(map(str, shape)), steps))


@pytest.mark.parametrize("name,mode,cval,shape,steps",
                         list(_cuda_large_cases()))
@pytest.mark.parametrize("backend", [pytest.param("cuda", marks=gpu)])
def test_cuda_large(backend, name, mode, cval, shape, steps, rng):
    grid = rng.uniform(-1, 1, shape)
    w = cs.Stencil(name).weights
    out = cs.apply(grid, name, steps=steps, mode=mode, cval=cval,
                   backend=backend)
    want = ref.scipy_apply(grid, w, steps, mode, cval)
    assert_close(out, want, dict(backend=backend, shape=shape, kernel=name,
                                 mode=mode, cval=cval, steps=steps,
                                 seed=rng.seed))


@pytest.mark.parametrize("shape", [(1023, 1025), (4099, 4097)],
                         ids=["1023x1025", "4099x4097"])
@pytest.mark.parametrize("backend", [pytest.param("cuda", marks=gpu)])
def test_cuda_large_random_weights(backend, shape, rng):
    for kshape in [(3, 5), (7, 7), (5, 1), (15, 15)]:
        w = random_weights(rng, 2, 0, shape=kshape)
        grid = rng.standard_normal(shape)
        out = cs.apply(grid, weights=w, steps=2, mode="wrap",
                       backend=backend)
        assert_close(out, ref.scipy_apply(grid, w, 2, "wrap"),
                     dict(backend=backend, shape=shape, kernel=kshape,
                          seed=rng.seed))


def test_devices_lists_the_usable_gpus():
    found = cs.devices()
    assert isinstance(found, list)
    if cs.backends()["cuda"] != "available":
        assert found == []
    else:
        assert found and found[0]["index"] == 0
        assert set(found[0]) == {"index", "description", "cc_major", "sms"}


def test_no_driver_is_said_plainly(monkeypatch):
    """A build with the CUDA engine on a machine with no NVIDIA driver:
    the static runtime calls the missing driver "insufficient"; the
    status says that no driver was found."""
    from convstencil import _backends

    class NoDriverCore:
        def __getattr__(self, name):
            return getattr(_backends._core, name)

        def cuda_info(self):
            return (True, -1, "no usable CUDA device: CUDA driver version "
                    "is insufficient for CUDA runtime version")

    monkeypatch.setattr(_backends, "_core", NoDriverCore())
    monkeypatch.setattr(_backends, "_cuda_status", None)
    monkeypatch.setattr(_backends, "_driver_present", lambda: False)
    status = _backends.cuda_status()
    assert "no NVIDIA GPU driver found" in status
    assert "insufficient" not in status
    monkeypatch.setattr(_backends, "_cuda_status", None)
    monkeypatch.setattr(_backends, "_driver_present", lambda: True)
    assert "insufficient" in _backends.cuda_status()  # an old driver
