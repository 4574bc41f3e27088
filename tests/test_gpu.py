"""The GPU engine's paths against the CPU engine, and its resource handling.

Every test here is marked ``gpu`` and skips where no CUDA device is
usable.  The CPU engine ("cpu"), itself checked against the plain
reference in test_backends.py, is the reference: it is fast enough for
the large grids (1023x1025, 4099x4097) and 50 steps.

Device memory is filled with NaN when allocated (CONVSTENCIL_CUDA_POISON)
and every `out` array is NaN before the run, so an element no kernel
wrote fails the comparison instead of passing by luck.  The fusion cap
CONVSTENCIL_CUDA_MAX_DEPTH is removed from the environment unless a test
sets it.
"""
import numpy as np
import pytest

import convstencil as cs
from convstencil import _backends, _core, _model
from convstencil._engine import MODE_CODES
from conftest import (TB2D_WIDE_DEPTH, assert_close, exact_outer, gpu,
                      random_weights)

pytestmark = gpu

PRESETS_2D = ("heat2d", "box2d9p", "star2d13p", "box2d49p")
PRESETS_3D = ("heat3d", "box3d27p")
GPU_BACKENDS = ("cuda", "cuda-tc", "cuda-core")
# (mode, cval): Dirichlet with a zero and a non-zero value, periodic, and
# the Neumann-like modes
MODES = [("constant", 0.0), ("constant", 1.5), ("wrap", 0.0),
         ("nearest", 0.0), ("reflect", 0.0), ("mirror", 0.0)]
MODE_IDS = ["constant", "constant-cval", "wrap", "nearest", "reflect",
            "mirror"]
# 1..7 and remainders of the fusion depth 3 (4, 5), and 50 = 16*3 + 2
STEPS = (1, 2, 3, 4, 5, 7, 50)


# 3D: Dirichlet with a non-zero value, and periodic
MODES_3D = [("constant", 1.5), ("wrap", 0.0)]
MODE_IDS_3D = ["constant-cval", "wrap"]
SHAPES_3D = [(1, 1, 1), (5, 7, 9), (129, 65, 257)]


@pytest.fixture(autouse=True)
def poison_device_memory(monkeypatch):
    monkeypatch.setenv("CONVSTENCIL_CUDA_POISON", "1")
    monkeypatch.delenv("CONVSTENCIL_CUDA_MAX_DEPTH", raising=False)


def run_poisoned(grid, backend, **kwargs):
    """apply() into a NaN-filled `out`; return it and last_run_info()."""
    out = np.full(np.shape(grid), np.nan)
    result = cs.apply(grid, backend=backend, out=out, **kwargs)
    assert result is out
    return out, cs.last_run_info()


def check_all_paths(grid, weights, steps, mode, cval, ctx, backends=None):
    """Every GPU path against the CPU engine on one problem."""
    grid_before = grid.copy()
    want = cs.apply(grid, weights=weights, steps=steps, mode=mode, cval=cval,
                    backend="cpu")
    def scale():
        return np.linalg.norm(cs.apply(np.abs(grid), weights=np.abs(weights),
                                       steps=steps, mode=mode,
                                       cval=abs(cval), backend="cpu"))
    infos = {}
    for backend in backends or GPU_BACKENDS:
        got, info = run_poisoned(grid, backend, weights=weights, steps=steps,
                                 mode=mode, cval=cval)
        assert_close(got, want, dict(ctx, backend=backend, info=info),
                     scale=scale)
        assert info["backend"] == "cuda", info
        assert info["device_seconds"] is not None, info
        assert info["device_seconds"] >= 0.0, info
        infos[backend] = info
    np.testing.assert_array_equal(grid, grid_before)
    return infos


def planned(weights, steps, shape, mode, path, max_depth=None):
    """The engine's plan (csrc/plan.c, tested on its own in test_plan.py)
    for this problem on this device: the GPU must run what it says."""
    w = np.ascontiguousarray(weights, dtype=np.float64)
    cc_major, smem_optin = _backends.cuda_plan_device()
    return _core.plan(tuple(shape), w, MODE_CODES[mode], steps, path,
                      cc_major=cc_major, max_depth=int(max_depth or 0),
                      smem_optin=smem_optin)


def expected_depth(weights, steps, shape, mode, max_depth=None):
    """The fusion depth of the tensor-core path."""
    return planned(weights, steps, shape, mode, _core.PATH_TENSOR_CORE,
                   max_depth)["fused_depth"]


def expected_cuda_core_depth(weights, steps, shape, mode, max_depth=None):
    """The fusion depth of the CUDA-core path."""
    return planned(weights, steps, shape, mode, _core.PATH_CUDA_CORE,
                   max_depth)["fused_depth"]


def in_diamond(side):
    """The taps of a side^3 kernel within side // 2 of the centre in the
    1-norm (a 7-point star and its powers)."""
    z, y, x = np.indices((side, side, side)) - side // 2
    return np.abs(z) + np.abs(y) + np.abs(x) <= side // 2


def assert_auto_path(info, weights, shape, mode, steps):
    """Backend "cuda" took the path the performance model predicts fastest
    on this device (test_explain.py checks the choice itself)."""
    cc_major, smem_optin = _backends.cuda_plan_device()
    want = _model.auto_gpu_path(shape, weights, mode, steps, cc_major, 0,
                                smem_optin)
    assert info["path"] == want, (want, info)


def check_cuda_core_depth(shape, w, steps, mode, cval, top, rng):
    """The CUDA-core path on a random grid of `shape` against the CPU
    engine, fused `top` steps a pass (fewer when there are fewer)."""
    infos = check_all_paths(rng.uniform(-1.0, 1.0, shape), w, steps, mode,
                            cval, dict(shape=shape, steps=steps,
                                       seed=rng.seed),
                            backends=("cuda-core",))
    cc = infos["cuda-core"]
    assert cc["fused_depth"] == min(top, steps), cc


# ---------------------------------------------------------------------------
# presets: every path, mode and step count on small and medium grids

@pytest.mark.parametrize("mode,cval", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("shape", [(1, 1), (7, 9), (64, 130), (1023, 1025)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", PRESETS_2D)
def test_presets_every_path(name, shape, mode, cval, rng):
    check_preset_every_step(name, rng.uniform(-1.0, 1.0, shape), mode, cval,
                            rng)


def check_preset_every_step(name, grid, mode, cval, rng):
    """A preset on every GPU path for each of STEPS: the values against
    the CPU engine, the path each backend took, and the tensor-core
    path's fusion plan."""
    w = cs.Stencil(name).weights
    for steps in STEPS:
        infos = check_all_paths(grid, w, steps, mode, cval,
                                dict(preset=name, shape=grid.shape,
                                     mode=mode, cval=cval, steps=steps,
                                     seed=rng.seed))
        tc = infos["cuda-tc"]
        cc = infos["cuda-core"]
        assert tc["path"] == "tensor-core", tc
        assert_auto_path(infos["cuda"], w, grid.shape, mode, steps)
        assert cc["path"] == "cuda-core"
        assert tc["fused_depth"] == expected_depth(
            w, steps, grid.shape, mode), tc
        assert cc["fused_depth"] == expected_cuda_core_depth(
            w, steps, grid.shape, mode), cc
        for info in (tc, cc):
            assert info["fused_depth"] * info["fused_passes"] \
                + info["unfused_steps"] == steps, info


@pytest.mark.parametrize("name", ["heat2d", "box2d9p"])
def test_small_kernels_fuse_three_steps(name, rng):
    grid = rng.uniform(-1.0, 1.0, (256, 300))
    w = cs.Stencil(name).weights
    infos = check_all_paths(grid, w, 10, "constant", 0.5,
                            dict(preset=name, seed=rng.seed),
                            backends=("cuda-tc",))
    info = infos["cuda-tc"]
    assert (info["fused_depth"], info["fused_passes"],
            info["unfused_steps"]) == (3, 3, 1), info


@pytest.mark.parametrize("mode,cval", [("constant", -0.75), ("wrap", 0.0)],
                         ids=["constant-cval", "wrap"])
@pytest.mark.parametrize("name", PRESETS_2D)
def test_presets_4099x4097(name, mode, cval, rng):
    grid = rng.uniform(-1.0, 1.0, (4099, 4097))
    w = cs.Stencil(name).weights
    for steps in (1, 5, 50):
        check_all_paths(grid, w, steps, mode, cval,
                        dict(preset=name, shape=grid.shape, mode=mode,
                             cval=cval, steps=steps, seed=rng.seed))


# ---------------------------------------------------------------------------
# random kernels: every odd shape up to 7x7 on tensor cores, larger ones
# on CUDA cores

KERNEL_SHAPES = [(ky, kx) for ky in (1, 3, 5, 7) for kx in (1, 3, 5, 7)]


@pytest.mark.parametrize("mode,cval", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("kshape", KERNEL_SHAPES,
                         ids=lambda s: "%dx%d" % s)
def test_random_kernels_tensor_core(kshape, mode, cval, rng):
    w = random_weights(rng, 2, 0, shape=kshape)
    for shape in [(1, 1), (7, 9), (33, 200), (1023, 1025)]:
        grid = rng.standard_normal(shape)
        for steps in (1, 2, 3, 4, int(rng.integers(5, 51))):
            infos = check_all_paths(grid, w, steps, mode, cval,
                                    dict(kernel=kshape, shape=shape,
                                         mode=mode, cval=cval, steps=steps,
                                         seed=rng.seed))
            tc = infos["cuda-tc"]
            assert tc["path"] == "tensor-core", tc
            assert_auto_path(infos["cuda"], w, shape, mode, steps)
            assert tc["fused_depth"] == expected_depth(w, steps, shape,
                                                      mode), tc


def plus_kernel(rng, side, planes=0):
    """Random signed weights on the centre row and column of a side x side
    kernel (a "plus", as star2d13p); of shape (1, side, side) when
    `planes` is 1."""
    w = np.zeros((side, side))
    w[side // 2, :] = rng.uniform(0.1, 1.0, side)
    w[:, side // 2] = rng.uniform(0.1, 1.0, side)
    w[rng.random(w.shape) < 0.3] *= -0.5
    w /= np.abs(w).sum()
    return w[None] if planes else w


@pytest.mark.parametrize("mode,cval", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("side", [3, 5, 7])
def test_plus_kernels_2d(side, mode, cval, rng):
    """Plus-shaped kernels, which the CUDA-core path runs with their
    nonzero taps only, on 2D grids and on every plane of a 3D grid, tiles
    whole, partial and many (the blocks walk several tiles each)."""
    for shape in [(1, 1), (7, 9), (64, 128), (130, 1031), (3, 70, 260)]:
        w = plus_kernel(rng, side, planes=len(shape) == 3)
        grid = rng.standard_normal(shape)
        for steps in (1, 2, 5):
            infos = check_all_paths(grid, w, steps, mode, cval,
                                    dict(kernel=w.shape, shape=shape,
                                         mode=mode, cval=cval, steps=steps,
                                         seed=rng.seed))
            assert_auto_path(infos["cuda"], w, shape, mode, steps)


def rank1_kernel(rng, side, nudge=0.0, planes=0):
    """A side x side kernel that is an outer product col (x) row of random
    signed factors with some zeros (box2d49p is one), which the CUDA-core
    path computes as a pass along x and one along y; `nudge` added to one
    corner makes it full rank (the direct taps)."""
    col, row = (rng.uniform(0.2, 1.2, side) * np.where(
        rng.random(side) < 0.3, -0.4, 1.0) * (rng.random(side) > 0.2)
        for _ in range(2))
    col[side // 2] = row[side // 2] = 1.0
    w = np.outer(col, row)
    w /= np.abs(w).sum()
    w[0, 0] += nudge
    return w[None] if planes else w


@pytest.mark.parametrize("mode,cval", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("side", [3, 5, 7])
def test_rank1_kernels_2d(side, mode, cval, rng):
    """Outer-product kernels on 2D grids and every plane of a 3D grid, and
    the same kernels nudged by 1e-9 off rank one: computed as two 1D passes
    the nudged ones would be off by about 1e-9, so they check that only
    true outer products take that route."""
    for shape in [(1, 1), (7, 9), (64, 128), (130, 1031), (3, 70, 260)]:
        for nudge in (0.0, 1e-9):
            w = rank1_kernel(rng, side, nudge, planes=len(shape) == 3)
            grid = rng.standard_normal(shape)
            for steps in (1, 2, 5):
                infos = check_all_paths(grid, w, steps, mode, cval,
                                        dict(kernel=w.shape, shape=shape,
                                             nudge=nudge, mode=mode,
                                             cval=cval, steps=steps,
                                             seed=rng.seed))
                assert_auto_path(infos["cuda"], w, shape, mode, steps)


@pytest.mark.parametrize("mode,cval", [("constant", 2.0), ("wrap", 0.0),
                                       ("reflect", 0.0)],
                         ids=["constant-cval", "wrap", "reflect"])
@pytest.mark.parametrize("kshape", [(9, 9), (9, 3), (1, 11), (15, 15)],
                         ids=lambda s: "%dx%d" % s)
def test_large_kernels_run_on_cuda_cores(kshape, mode, cval, rng):
    w = random_weights(rng, 2, 0, shape=kshape)
    for shape in [(1, 1), (7, 9), (1023, 1025)]:
        grid = rng.standard_normal(shape)
        for steps in (1, 3, 7):
            infos = check_all_paths(grid, w, steps, mode, cval,
                                    dict(kernel=kshape, shape=shape,
                                         mode=mode, cval=cval, steps=steps,
                                         seed=rng.seed),
                                    backends=("cuda", "cuda-core"))
            assert infos["cuda"]["path"] == "cuda-core"
    with pytest.raises(ValueError, match=r"7 x 7"):
        cs.apply(np.zeros((16, 16)), weights=w, backend="cuda-tc")


def test_tensor_core_path_refuses_kernels_past_7_and_says_why():
    for kshape in [(9, 3, 3), (3, 9, 3), (3, 3, 9), (1, 1, 9)]:
        w = np.full(kshape, 1.0 / np.prod(kshape))
        grid = np.zeros((12, 13, 14))
        with pytest.raises(ValueError, match=r"(?i)tensor-core") as info:
            cs.apply(grid, weights=w, backend="cuda-tc")
        message = str(info.value)
        assert "7 per axis" in message, message
        assert "%d x %d x %d" % kshape in message, message
        # the other GPU backends run it on CUDA cores
        out = cs.apply(grid, weights=w, backend="cuda")
        assert cs.last_run_info()["path"] == "cuda-core"
        np.testing.assert_array_equal(out, grid)


# ---------------------------------------------------------------------------
# 3D on tensor cores: a sum of 2D stencil2row tiles over the z-planes

@pytest.mark.parametrize("mode,cval", MODES_3D, ids=MODE_IDS_3D)
@pytest.mark.parametrize("shape", SHAPES_3D,
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", PRESETS_3D)
def test_presets_3d_every_path(name, shape, mode, cval, rng):
    check_preset_every_step(name, rng.uniform(-1.0, 1.0, shape), mode, cval,
                            rng)


# every odd side 1..7 on some axis, cubes and flat, thin and long boxes
KERNEL_SHAPES_3D = [(1, 1, 1), (3, 3, 3), (3, 5, 7), (7, 7, 7), (5, 1, 3),
                    (7, 3, 1), (1, 5, 5), (3, 1, 1), (5, 5, 5), (7, 1, 7)]


@pytest.mark.parametrize("mode,cval", MODES_3D, ids=MODE_IDS_3D)
@pytest.mark.parametrize("kshape", KERNEL_SHAPES_3D,
                         ids=lambda s: "%dx%dx%d" % s)
def test_random_kernels_3d_tensor_core(kshape, mode, cval, rng):
    w = random_weights(rng, 3, 0, shape=kshape)
    for shape in SHAPES_3D:
        grid = rng.standard_normal(shape)
        # 1..5 cover depths 1..3 with remainders; a long run on the
        # smaller grids (the CPU reference of a 7x7x7 kernel on the large
        # grid for 50 steps would take minutes)
        steps_list = [1, 2, 3, 5]
        if np.prod(shape) < 1000:
            steps_list.append(int(rng.integers(6, 51)))
        for steps in steps_list:
            infos = check_all_paths(grid, w, steps, mode, cval,
                                    dict(kernel=kshape, shape=shape,
                                         mode=mode, cval=cval, steps=steps,
                                         seed=rng.seed))
            tc = infos["cuda-tc"]
            assert tc["path"] == "tensor-core", tc
            assert_auto_path(infos["cuda"], w, shape, mode, steps)
            assert tc["fused_depth"] == expected_depth(w, steps, shape,
                                                      mode), tc


@pytest.mark.parametrize("mode,cval", MODES_3D, ids=MODE_IDS_3D)
@pytest.mark.parametrize("side", [3, 5, 7])
def test_diamond_kernels_3d(side, mode, cval, rng):
    """Cubic kernels whose weights lie within side // 2 of the centre in
    the 1-norm (a 7-point star and its powers, as fused heat3d passes
    are), on every path: the CUDA-core path streams them along z with
    only those taps."""
    w = rng.uniform(0.1, 1.0, (side, side, side))
    w[rng.random(w.shape) < 0.2] *= -0.5
    w[~in_diamond(side)] = 0.0
    w /= np.abs(w).sum()
    for shape in SHAPES_3D + [(70, 40, 33)]:
        grid = rng.standard_normal(shape)
        for steps in (1, 2, 3):
            check_all_paths(grid, w, steps, mode, cval,
                            dict(kernel=w.shape, shape=shape, mode=mode,
                                 cval=cval, steps=steps, seed=rng.seed))


@pytest.mark.parametrize("mode,cval", MODES, ids=MODE_IDS)
def test_cuda_core_fused_band_every_mode(mode, cval, rng):
    """A 7-point star fused two steps per pass on CUDA cores: the band
    within one point of each edge is recomputed in place from the pass's
    input, in every mode (with different weights on every tap, so a wrong
    neighbour or a mirrored index shows), on the smallest grids that fuse,
    thin ones (one axis at the minimum) and a larger odd one, with odd step
    counts (an unfused remainder). Every grid has an extent under 8: on
    larger ones tb3d takes the star (test_tb3d_*)."""
    w = rng.uniform(0.1, 1.0, (3, 3, 3))
    w[rng.random(w.shape) < 0.3] *= -0.5
    w[~in_diamond(3)] = 0.0
    w /= np.abs(w).sum()
    for shape in [(6, 6, 6), (6, 7, 9), (7, 130, 6), (40, 6, 70),
                  (33, 7, 67)]:
        grid = rng.standard_normal(shape)
        for steps in (2, 3, 6):
            infos = check_all_paths(grid, w, steps, mode, cval,
                                    dict(shape=shape, mode=mode, cval=cval,
                                         steps=steps, seed=rng.seed),
                                    backends=("cuda-core",))
            info = infos["cuda-core"]
            assert (info["fused_depth"], info["fused_passes"],
                    info["unfused_steps"]) == (2, steps // 2, steps % 2), info


def planes_kernel(rng, kind, ky, kx):
    """A 3D kernel whose z-plane dz is dense ("d": random signed), a
    point ("p": one weight, off the centre) or zero ("0"), as kind[dz]
    says; sum(|w|) == 1."""
    w = np.zeros((len(kind), ky, kx))
    for dz, c in enumerate(kind):
        if c == "d":
            w[dz] = rng.uniform(0.1, 1.0, (ky, kx))
            w[dz][rng.random((ky, kx)) < 0.2] *= -0.5
        elif c == "p":
            w[dz, int(rng.integers(ky)), int(rng.integers(kx))] = \
                rng.uniform(0.5, 1.0)
    return w / np.abs(w).sum()


@pytest.mark.parametrize("mode,cval", MODES_3D, ids=MODE_IDS_3D)
@pytest.mark.parametrize("kind,ky,kx", [("pd0", 3, 3), ("p0d0p", 5, 7),
                                        ("ppp", 3, 3), ("0d0", 7, 5),
                                        ("d0p0d0d", 3, 3), ("0p0", 5, 5)],
                         ids=lambda v: str(v))
@pytest.mark.parametrize("max_depth", [None, "3"], ids=["unfused", "fused"])
def test_point_and_zero_planes(kind, ky, kx, mode, cval, max_depth,
                               monkeypatch, rng):
    """Point planes (CUDA cores inside the tensor-core kernel) and zero
    planes (skipped), unfused (the default in 3D) and under fusion (which
    fills them in; CONVSTENCIL_CUDA_MAX_DEPTH asks for it)."""
    if max_depth is not None:
        monkeypatch.setenv("CONVSTENCIL_CUDA_MAX_DEPTH", max_depth)
    w = planes_kernel(rng, kind, ky, kx)
    for shape in [(5, 7, 9), (40, 33, 130)]:
        grid = rng.standard_normal(shape)
        for steps in (1, 2, 3, 7):
            check_all_paths(grid, w, steps, mode, cval,
                            dict(kernel=kind, ky=ky, kx=kx, shape=shape,
                                 mode=mode, cval=cval, steps=steps,
                                 max_depth=max_depth, seed=rng.seed),
                            backends=("cuda-tc",))


@pytest.mark.parametrize("max_depth", [1, 2, 3])
def test_max_depth_caps_fusion(max_depth, monkeypatch, rng):
    monkeypatch.setenv("CONVSTENCIL_CUDA_MAX_DEPTH", str(max_depth))
    grid = rng.standard_normal((40, 50, 140))
    for name in PRESETS_3D:
        w = cs.Stencil(name).weights
        for mode, cval in MODES_3D:
            infos = check_all_paths(grid, w, 7, mode, cval,
                                    dict(preset=name, mode=mode,
                                         max_depth=max_depth,
                                         seed=rng.seed),
                                    backends=("cuda-tc", "cuda-core"))
            tc = infos["cuda-tc"]
            assert tc["fused_depth"] == expected_depth(
                w, 7, grid.shape, mode, max_depth), tc
            cc = infos["cuda-core"]
            assert cc["fused_depth"] == expected_cuda_core_depth(
                w, 7, grid.shape, mode, max_depth), cc
    # 2D kernels are capped too
    infos = check_all_paths(grid[0], cs.Stencil("heat2d").weights, 7,
                            "wrap", 0.0, dict(seed=rng.seed),
                            backends=("cuda-tc",))
    assert infos["cuda-tc"]["fused_depth"] == min(3, max_depth)


@pytest.mark.parametrize("value", ["0", "-1", "two", "2.5"])
def test_max_depth_must_be_a_positive_integer(value, monkeypatch):
    monkeypatch.setenv("CONVSTENCIL_CUDA_MAX_DEPTH", value)
    with pytest.raises(ValueError, match=r"CONVSTENCIL_CUDA_MAX_DEPTH"):
        cs.apply(np.zeros((12, 12, 12)), "heat3d", steps=3,
                 backend="cuda-tc")


# ---------------------------------------------------------------------------
# values: non-finite input stays local on CUDA cores; aliasing; cval

@pytest.mark.parametrize("shape,name", [((300, 301), "box2d49p"),
                                        ((30, 40, 150), "heat3d")],
                         ids=["2d", "3d"])
def test_out_may_alias_the_grid(shape, name, rng):
    grid = rng.standard_normal(shape)
    want = cs.apply(grid, name, steps=4, backend="cpu")
    for backend in GPU_BACKENDS:
        work = grid.copy()
        result = cs.apply(work, name, steps=4, backend=backend, out=work)
        assert result is work
        assert_close(work, want, dict(backend=backend, seed=rng.seed))


def test_steps_zero_is_a_copy(rng):
    grid = rng.standard_normal((17, 19))
    for backend in GPU_BACKENDS:
        out, info = run_poisoned(grid, backend, stencil="heat2d", steps=0)
        np.testing.assert_array_equal(out, grid)


# ---------------------------------------------------------------------------
# resources: no leak, clear out-of-memory errors

def device_free_bytes():
    return cs._core.cuda_mem_info()[0]


def test_no_device_memory_leak_over_1000_calls(rng):
    grid = rng.standard_normal((96, 200))
    cs.apply(grid, "heat2d", steps=4, backend="cuda")  # context, warm-up
    before = device_free_bytes()
    for i in range(1000):
        backend = GPU_BACKENDS[i % 3]
        cs.apply(grid, "heat2d", steps=4, mode="constant", backend=backend)
    after = device_free_bytes()
    # one leaked arena per call would be 1000 x ~0.5 MiB
    assert before - after < (1 << 20), (before, after)


def test_failed_calls_free_device_memory(rng):
    grid = rng.standard_normal((64, 64))
    cs.apply(grid, "heat2d", backend="cuda")
    before = device_free_bytes()
    for _ in range(200):
        with pytest.raises(ValueError):
            cs.apply(grid, weights=np.ones((9, 9)), backend="cuda-tc")
    assert before - device_free_bytes() < (1 << 20)


def test_out_of_device_memory_is_a_memory_error():
    free, total = cs._core.cuda_mem_info()
    # two padded grids of this size do not fit in what is free
    points = free // 8 // 2 + (64 << 20)
    grid = np.zeros(points // 4096 * 4096).reshape(-1, 4096)
    try:
        # refused before any allocation, naming the sizes
        with pytest.raises(MemoryError, match=r"MiB of device memory"):
            cs.apply(grid, "heat2d", backend="cuda")
    finally:
        del grid
    # and the device is still fine afterwards
    small = np.ones((8, 8))
    out = cs.apply(small, "heat2d", backend="cuda", mode="wrap")
    np.testing.assert_allclose(out, small, rtol=1e-15)
    assert free - device_free_bytes() < (1 << 20)


# ---------------------------------------------------------------------------
# tb2d: planar 3 x 3 kernels, pluses and outer products temporally blocked
# on CUDA cores

@pytest.mark.parametrize("mode,cval", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("shape", [(16, 16), (17, 300), (301, 129),
                                   (3, 40, 50), (1000, 1100)],
                         ids=lambda s: "x".join(map(str, s)))
def test_tb2d_random_kernels(shape, mode, cval, rng):
    """Random signed 3 x 3 kernels (a box, a plus, an asymmetric one) on
    grids of one tile, many tiles with the far tiles moved back, and
    several planes; steps in one pass, passes plus a tail pass."""
    w2 = random_weights(rng, 2, 3, shape=(3, 3))
    plus = w2.copy()
    plus[0, 0] = plus[0, 2] = plus[2, 0] = plus[2, 2] = 0.0
    for w in (w2, plus, preset_weights_3x3(rng)):
        if len(shape) == 3:
            w = w[None]
        for steps in (1, 8, 13):
            check_cuda_core_depth(shape, w, steps, mode, cval, 8, rng)


def random_plus(rng, side):
    """Random signed weights on the centre row and column (star2d13p's
    shape)."""
    r = side // 2
    w = np.zeros((side, side))
    w[r, :] = rng.uniform(-0.5, 1.0, side)
    w[:, r] = rng.uniform(-0.5, 1.0, side)
    return w / np.abs(w).sum()


def random_box(rng, side):
    """A random signed full-rank box (every weight set, a few negative)."""
    return random_weights(rng, 2, side, shape=(side, side))


@pytest.mark.parametrize("mode,cval", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("shape", [(16, 16), (17, 300), (301, 129),
                                   (3, 40, 50), (1000, 1100)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("side", [5, 7])
@pytest.mark.parametrize("kind,make", [("plus", random_plus),
                                       ("outer", exact_outer),
                                       ("box", random_box)],
                         ids=["plus", "outer", "box"])
def test_tb2d_random_pluses_outer_products_and_boxes(kind, make, side, shape,
                                                     mode, cval, rng):
    """Random pluses, outer products and full-rank boxes of sides 5 and 7
    on the grids above (an outer product's rows filtered once, a box's
    every tap): one pass, passes plus a tail pass of every kind."""
    w = make(rng, side)
    top = TB2D_WIDE_DEPTH[kind, side]
    if len(shape) == 3:
        w = w[None]
    for steps in sorted({1, 2, top, 2 * top + 1, 13}):
        check_cuda_core_depth(shape, w, steps, mode, cval, top, rng)


def preset_weights_3x3(rng):
    """An asymmetric kernel: every weight different, a few negative."""
    return rng.uniform(-0.3, 1.0, (3, 3)) / 4.0


# ---------------------------------------------------------------------------
# tb3d: 3 x 3 x 3 stars and outer products temporally blocked on CUDA cores

def random_star_3d(rng):
    """Random signed weights on the centre and its six neighbours
    (heat3d's shape)."""
    w = np.zeros((3, 3, 3))
    for i in [(1, 1, 1), (0, 1, 1), (2, 1, 1), (1, 0, 1), (1, 2, 1),
              (1, 1, 0), (1, 1, 2)]:
        w[i] = rng.uniform(-0.5, 1.0)
    return w / np.abs(w).sum()


def exact_outer_3d(rng):
    """A random signed 3 x 3 x 3 outer product, exact in floating point
    (conftest's exact_outer times a dyadic vector along z)."""
    w = (rng.integers(1, 9, 3) / 8.0)[:, None, None] * exact_outer(rng, 3)
    return w / 2.0 ** np.ceil(np.log2(np.abs(w).sum()))


@pytest.mark.parametrize("mode,cval", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("shape", [(8, 8, 8), (9, 37, 70), (13, 61, 131),
                                   (101, 29, 67), (11, 127, 263)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("make", [random_star_3d, exact_outer_3d],
                         ids=["star", "outer"])
def test_tb3d_random_stars_and_outer_products(make, shape, mode, cval, rng):
    """Grids of the least extent, of one tile, of many tiles with the far
    ones moved back (tiles inside the grid beside tiles at its edges),
    and of many segments of planes: one pass, passes plus a tail pass of
    either depth."""
    w = make(rng)
    for steps in (1, 3, 7, 8):
        assert planned(w, steps, shape, mode,
                       _core.PATH_CUDA_CORE)["pass"] == "tb3d"
        check_cuda_core_depth(shape, w, steps, mode, cval, 3, rng)


@pytest.mark.parametrize("mode", ["wrap", "constant", "reflect"])
@pytest.mark.parametrize("shape", [(109, 29, 34), (40, 61, 131)],
                         ids=lambda s: "x".join(map(str, s)))
def test_tb3d_bits_do_not_depend_on_its_segments(shape, mode, monkeypatch,
                                                 rng):
    """The last tile along y and x, moved back to end at the edge,
    computes cells the tile before it stores too, at rows of another
    parity in its threads, which add their neighbours in another order:
    only one of the two stores them.  Before, the block that wrote last
    won, and with 29 rows (wrap, constant) the bits changed with the
    segments of planes (an H100, 3 steps)."""
    u = rng.uniform(-1.0, 1.0, shape)
    assert planned(cs.Stencil("heat3d").weights, 3, shape, mode,
                   _core.PATH_CUDA_CORE)["pass"] == "tb3d"
    runs = []
    for segments in ("", "1", "2", "3", "7"):
        monkeypatch.setenv("CONVSTENCIL_TB3D_SEGMENTS", segments)
        runs.append(cs.apply(u, "heat3d", steps=3, mode=mode, cval=0.25,
                             backend="cuda-core"))
    for out in runs[1:]:
        np.testing.assert_array_equal(out, runs[0])


@pytest.mark.parametrize("preset", ["heat2d", "box2d9p"])
@pytest.mark.parametrize("mode", ["wrap", "constant", "reflect"])
@pytest.mark.parametrize("shape", [(57, 61), (90, 301), (33, 1000)],
                         ids=lambda s: "x".join(map(str, s)))
def test_tb2d_bits_do_not_depend_on_its_segments(preset, shape, mode,
                                                 monkeypatch, rng):
    """tb2d's last strip along x is moved back to end at the edge, as
    tb3d's last tile is (test above), and computes columns the strip
    before it stores too: the result must not depend on which block
    writes them last, whatever the segments of rows.  (61 columns: a
    strip of 64 stores 56 or 52 at depths 3 and 5, so the second is
    moved back.)"""
    u = rng.uniform(-1.0, 1.0, shape)
    w = cs.Stencil(preset).weights
    for steps in (3, 5):
        assert planned(w, steps, shape, mode,
                       _core.PATH_CUDA_CORE)["pass"] == "tb2d"
        runs = []
        for segments in ("", "1", "2", "3", "7", ""):
            monkeypatch.setenv("CONVSTENCIL_TB2D_SEGMENTS", segments)
            runs.append(cs.apply(u, preset, steps=steps, mode=mode,
                                 cval=0.25, backend="cuda-core"))
        for out in runs[1:]:
            np.testing.assert_array_equal(out, runs[0])


def test_tb3d_leaves_other_kernels_and_small_grids_to_cc3d(rng):
    """A full-rank 3 x 3 x 3 kernel, and a star on a grid under 8 planes,
    run as before (and still match)."""
    full = random_weights(rng, 3, 3, shape=(3, 3, 3))
    for w, shape in ((full, (20, 30, 40)), (random_star_3d(rng), (7, 30, 40))):
        assert planned(w, 4, shape, "reflect",
                       _core.PATH_CUDA_CORE)["pass"] != "tb3d"
        check_all_paths(rng.uniform(-1.0, 1.0, shape), w, 4, "reflect", 0.0,
                        dict(shape=shape), backends=("cuda-core",))
