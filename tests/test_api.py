"""The public API: presets, Stencil, out=, steps=0, input conversion,
input preservation, backends() and last_run_info()."""
import numpy as np
import pytest

import convstencil as cs
import reference as ref
from conftest import BACKENDS, HAVE_CUDA, assert_close, random_weights

SMALL = {1: (40,), 2: (13, 16), 3: (6, 7, 5)}


def _grid_for(name, rng, shape=None):
    ndim = ref.PRESET_SHAPES[name][0]
    return rng.uniform(-1, 1, shape or SMALL[ndim])


# ---------------------------------------------------------------------------
# Presets

def test_presets_tuple():
    assert isinstance(cs.PRESETS, tuple)
    assert len(cs.PRESETS) == 8
    assert set(cs.PRESETS) == set(ref.PRESET_SHAPES)


@pytest.mark.parametrize("name", sorted(ref.PRESET_SHAPES))
def test_preset_default_weights(name):
    ndim, shape = ref.PRESET_SHAPES[name]
    s = cs.Stencil(name)
    w = s.weights
    assert s.name == name
    assert isinstance(w, np.ndarray)
    assert w.dtype == np.float64
    assert w.shape == shape
    assert s.shape == shape
    assert s.ndim == ndim
    assert s.radius == tuple((n - 1) // 2 for n in shape)
    assert isinstance(s.radius, tuple)
    # positive on its footprint, zero elsewhere, summing to 1
    footprint = ref.preset_footprint(name)
    assert np.count_nonzero(w) == ref.PRESET_POINTS[name]
    assert np.all(w[footprint] > 0), w
    assert np.all(w[~footprint] == 0), w
    assert abs(w.sum() - 1.0) <= 1e-14, w.sum()


@pytest.mark.parametrize("name", sorted(ref.HEAT_ALPHA))
def test_heat_default_alpha(name):
    ndim = ref.PRESET_SHAPES[name][0]
    want = ref.heat_weights(ndim, ref.HEAT_ALPHA[name])
    np.testing.assert_allclose(cs.Stencil(name).weights, want, rtol=0,
                               atol=1e-15)


@pytest.mark.parametrize("alpha", [0.0, 0.05, 0.1, 1 / 6])
@pytest.mark.parametrize("name", sorted(ref.HEAT_ALPHA))
def test_heat_alpha(name, alpha):
    ndim = ref.PRESET_SHAPES[name][0]
    s = cs.Stencil(name, alpha=alpha)
    np.testing.assert_allclose(s.weights, ref.heat_weights(ndim, alpha),
                               rtol=0, atol=1e-15)
    assert s.name == name


@pytest.mark.parametrize("name", sorted(ref.HEAT_ALPHA))
def test_heat_alpha_stability_limit(name):
    ndim = ref.PRESET_SHAPES[name][0]
    limit = 1.0 / (2 * ndim)
    cs.Stencil(name, alpha=limit)  # the limit itself is stable
    for alpha in (limit * 1.01, -0.01):
        with pytest.raises(ValueError, match="unstable=True"):
            cs.Stencil(name, alpha=alpha)
        s = cs.Stencil(name, alpha=alpha, unstable=True)
        np.testing.assert_allclose(s.weights, ref.heat_weights(ndim, alpha),
                                   rtol=0, atol=1e-15)


@pytest.mark.parametrize("spelling,name", [
    ("Box-2D49P", "box2d49p"), ("BOX2D49P", "box2d49p"),
    ("box_2d_49p", "box2d49p"), ("box 2d 49p", "box2d49p"),
    ("Heat-2D", "heat2d"), ("HEAT_1D", "heat1d"), ("heat 3d", "heat3d"),
    ("1D5P", "1d5p"), ("1d-5p", "1d5p"), ("Star_2D_13P", "star2d13p"),
    ("Box-3D-27P", "box3d27p"), ("box2d9p", "box2d9p"),
])
def test_preset_aliases(spelling, name, rng):
    s = cs.Stencil(spelling)
    assert s.name == name
    np.testing.assert_array_equal(s.weights, cs.Stencil(name).weights)
    grid = _grid_for(name, rng)
    np.testing.assert_array_equal(cs.apply(grid, spelling, steps=2),
                                  cs.apply(grid, name, steps=2))


@pytest.mark.parametrize("name", sorted(ref.PRESET_SHAPES))
def test_preset_with_weights(name, rng):
    # a preset with weights= takes that dense array (here: random positive
    # weights on the preset's footprint)
    footprint = ref.preset_footprint(name)
    w = np.where(footprint, rng.uniform(0.1, 1.0, footprint.shape), 0.0)
    w /= w.sum()
    before = w.copy()
    s = cs.Stencil(name, weights=w)
    assert s.name == name
    np.testing.assert_array_equal(s.weights, w)
    np.testing.assert_array_equal(w, before)
    grid = _grid_for(name, rng)
    assert_close(cs.apply(grid, s, steps=3), ref.apply(grid, w, 3),
                 dict(kernel=name, seed=rng.seed))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("mode,cval", [("constant", 0.0), ("constant", -3.0),
                                       ("wrap", 0.0), ("mirror", 0.0)],
                         ids=["constant", "constant-cval-3", "wrap",
                              "mirror"])
@pytest.mark.parametrize("name", sorted(ref.PRESET_SHAPES))
def test_preset_stable_2000_steps(name, mode, cval, backend, rng):
    # default weights are a weighted average: values stay within
    # max(|u0|, |cval|) for any number of steps
    ndim = ref.PRESET_SHAPES[name][0]
    shape = {1: (33,), 2: (12, 11), 3: (6, 5, 7)}[ndim]
    u0 = rng.uniform(-1, 1, shape)
    out = cs.apply(u0, name, steps=2000, mode=mode, cval=cval,
                   backend=backend)
    bound = max(np.abs(u0).max(), abs(cval) if mode == "constant" else 0.0)
    assert np.all(np.isfinite(out))
    assert np.abs(out).max() <= bound * (1 + 1e-12), (
        np.abs(out).max(), bound, name, mode, backend, rng.seed)
    if mode == "constant":
        # 2000 averaging steps with a fixed boundary converge towards cval
        assert np.abs(out - cval).max() < np.abs(u0 - cval).max()


# ---------------------------------------------------------------------------
# Stencil objects

def test_stencil_custom_attributes():
    w = np.arange(21, dtype=float).reshape(3, 7) / 210.0
    s = cs.Stencil(weights=w)
    assert s.ndim == 2
    assert s.shape == (3, 7)
    assert s.radius == (1, 3)
    np.testing.assert_array_equal(s.weights, w)
    assert s.weights.dtype == np.float64


def test_stencil_weights_read_only():
    for s in (cs.Stencil("box2d9p"), cs.Stencil(weights=np.ones((3, 5)))):
        with pytest.raises(ValueError):
            s.weights[0, 0] = 5.0
    # and the preset's defaults are not changed by anyone's attempt
    assert abs(cs.Stencil("box2d9p").weights.sum() - 1.0) <= 1e-14


def test_stencil_weights_dense_zeros_included():
    s = cs.Stencil("star2d13p")
    assert s.weights.shape == (7, 7)
    assert s.weights[0, 0] == 0.0
    assert s.weights[3, 3] > 0.0


@pytest.mark.parametrize("weights,shape", [
    ([1, 2, 1], (3,)),
    ([[0, 1, 0], [1, 4, 1], [0, 1, 0]], (3, 3)),
    (np.ones((1, 3, 5), dtype=np.int32), (1, 3, 5)),
    (np.ones((3, 3), dtype=np.float32) / 9, (3, 3)),
    (np.ones((5,), dtype=bool), (5,)),
], ids=["int-list", "nested-list", "int32-3d", "float32", "bool"])
def test_stencil_from_array_likes(weights, shape):
    s = cs.Stencil(weights=weights)
    assert s.shape == shape
    assert s.weights.dtype == np.float64
    np.testing.assert_array_equal(s.weights, np.asarray(weights, np.float64))


@pytest.mark.parametrize("backend", BACKENDS)
def test_stencil_object_equals_weights(backend, rng):
    w = random_weights(rng, 2, 0, shape=(5, 3))
    grid = rng.standard_normal((20, 21))
    a = cs.apply(grid, cs.Stencil(weights=w), steps=3, backend=backend)
    b = cs.apply(grid, weights=w, steps=3, backend=backend)
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("view", ["transpose", "reversed", "strided"])
def test_non_contiguous_weights(backend, view, rng):
    # the engine must read weights by index, not by memory order
    base = random_weights(rng, 2, 0, shape=(5, 7))
    w = {"transpose": base.T, "reversed": base[::-1, ::-1],
         "strided": np.repeat(base, 2, axis=1)[:, ::2]}[view]
    grid = rng.standard_normal((17, 19))
    out = cs.apply(grid, weights=w, steps=2, mode="reflect", backend=backend)
    assert_close(out, ref.apply(grid, np.ascontiguousarray(w), 2, "reflect"),
                 dict(backend=backend, view=view, seed=rng.seed))


# ---------------------------------------------------------------------------
# out=, steps=0

@pytest.mark.parametrize("backend", BACKENDS)
def test_out_receives_result(backend, rng):
    grid = rng.standard_normal((21, 19))
    before = grid.copy()
    out = np.full(grid.shape, np.nan)
    got = cs.apply(grid, "box2d9p", steps=4, mode="wrap", out=out,
                   backend=backend)
    assert got is out
    assert_close(out, ref.apply(before, cs.Stencil("box2d9p").weights, 4,
                                "wrap"),
                 dict(backend=backend, seed=rng.seed))
    np.testing.assert_array_equal(grid, before)


@pytest.mark.parametrize("steps", [0, 1, 2, 5])
@pytest.mark.parametrize("name", ["heat1d", "1d5p", "heat2d", "box2d49p",
                                  "star2d13p", "box3d27p"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_out_aliases_input(backend, name, steps, rng):
    grid = _grid_for(name, rng, {1: (50,), 2: (24, 23), 3: (9, 8, 7)}[
        ref.PRESET_SHAPES[name][0]])
    before = grid.copy()
    got = cs.apply(grid, name, steps=steps, mode="nearest", out=grid,
                   backend=backend)
    assert got is grid
    assert_close(grid, ref.apply(before, cs.Stencil(name).weights, steps,
                                 "nearest"),
                 dict(backend=backend, kernel=name, steps=steps,
                      seed=rng.seed))


def test_out_aliases_a_view_of_a_larger_array(rng):
    # out= a C-contiguous block inside a bigger buffer: only it changes
    buf = rng.standard_normal((30, 16))
    grid = buf[5:20]
    assert grid.flags.c_contiguous
    before_buf = buf.copy()
    cs.apply(grid, "heat2d", steps=3, out=grid)
    np.testing.assert_array_equal(buf[:5], before_buf[:5])
    np.testing.assert_array_equal(buf[20:], before_buf[20:])
    assert_close(buf[5:20], ref.apply(before_buf[5:20],
                                      cs.Stencil("heat2d").weights, 3),
                 dict(seed=rng.seed))


def test_out_with_steps_zero_copies(rng):
    grid = rng.standard_normal((6, 7))
    out = np.zeros_like(grid)
    got = cs.apply(grid, "heat2d", steps=0, out=out)
    assert got is out
    np.testing.assert_array_equal(out, grid)


@pytest.mark.parametrize("backend", BACKENDS)
def test_steps_zero_returns_copy(backend, rng):
    grid = rng.standard_normal((9, 10))
    out = cs.apply(grid, "box2d49p", steps=0, backend=backend)
    assert out is not grid
    assert not np.shares_memory(out, grid)
    np.testing.assert_array_equal(out, grid)
    out[0, 0] += 1.0
    assert out[0, 0] != grid[0, 0]


@pytest.mark.parametrize("steps", [np.int64(3), np.int32(3), np.uint8(3),
                                   np.int16(3)],
                         ids=["int64", "int32", "uint8", "int16"])
def test_numpy_integer_steps(steps, rng):
    grid = rng.standard_normal((11, 12))
    np.testing.assert_array_equal(cs.apply(grid, "heat2d", steps=steps),
                                  cs.apply(grid, "heat2d", steps=3))


def test_steps_is_keyword_only(rng):
    with pytest.raises(TypeError):
        cs.apply(rng.standard_normal((5, 5)), "heat2d", 3)


def test_integer_cval(rng):
    grid = rng.standard_normal((7, 8))
    np.testing.assert_array_equal(cs.apply(grid, "heat2d", cval=2),
                                  cs.apply(grid, "heat2d", cval=2.0))


# ---------------------------------------------------------------------------
# Input conversion and preservation

@pytest.mark.parametrize("kind", ["int64", "int32", "int8", "uint16",
                                  "float32", "bool", "big-endian",
                                  "list", "tuple"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_dtype_conversion(backend, kind, rng):
    base = rng.integers(-50, 50, (12, 13))
    grid = {
        "int64": base.astype(np.int64),
        "int32": base.astype(np.int32),
        "int8": base.astype(np.int8),
        "uint16": (base + 50).astype(np.uint16),
        "float32": rng.standard_normal((12, 13)).astype(np.float32),
        "bool": base > 0,
        "big-endian": rng.standard_normal((12, 13)).astype(">f8"),
        "list": base.tolist(),
        "tuple": tuple(tuple(row) for row in base.tolist()),
    }[kind]
    as_float = np.array(grid, dtype=np.float64)
    before = np.array(grid, copy=True)
    out = cs.apply(grid, "box2d9p", steps=2, mode="mirror", backend=backend)
    assert out.dtype == np.float64
    assert out.flags.c_contiguous
    assert out.shape == (12, 13)
    np.testing.assert_array_equal(
        out, cs.apply(as_float, "box2d9p", steps=2, mode="mirror",
                      backend=backend))
    assert_close(out, ref.apply(as_float, cs.Stencil("box2d9p").weights, 2,
                                "mirror"),
                 dict(backend=backend, kind=kind, seed=rng.seed))
    if isinstance(grid, np.ndarray):
        assert grid.dtype == before.dtype
        np.testing.assert_array_equal(grid, before)


def test_1d_list_and_scalar_weights_list(rng):
    out = cs.apply([1, 2, 3, 4, 5], weights=[0.25, 0.5, 0.25])
    np.testing.assert_allclose(out, [1.0, 2.0, 3.0, 4.0, 3.5], rtol=0,
                               atol=1e-15)


@pytest.mark.parametrize("view", ["every-other", "transposed", "fortran",
                                  "reversed", "column", "3d-slab",
                                  "3d-transposed"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_non_contiguous_and_fortran_input(backend, view, rng):
    base2 = rng.standard_normal((40, 42))
    base3 = rng.standard_normal((10, 12, 14))
    grid, w = {
        "every-other": (base2[::2, ::3], "box2d49p"),
        "transposed": (base2.T, "star2d13p"),
        "fortran": (np.asfortranarray(base2[:17, :19]), "heat2d"),
        "reversed": (base2[::-1, ::-1], "box2d9p"),
        "column": (base2[:, 5], "1d5p"),
        "3d-slab": (base3[1:8, ::2, 3:12], "box3d27p"),
        "3d-transposed": (base3.transpose(2, 0, 1), "heat3d"),
    }[view]
    base_before = (base2.copy(), base3.copy())
    want = ref.apply(np.array(grid), cs.Stencil(w).weights, 3, "reflect")
    out = cs.apply(grid, w, steps=3, mode="reflect", backend=backend)
    assert out.shape == grid.shape
    assert out.flags.c_contiguous
    assert_close(out, want, dict(backend=backend, view=view, kernel=w,
                                 seed=rng.seed))
    np.testing.assert_array_equal(base2, base_before[0])
    np.testing.assert_array_equal(base3, base_before[1])


@pytest.mark.parametrize("backend", BACKENDS)
def test_input_unchanged_every_mode(backend, rng):
    for mode in ("constant", "wrap", "periodic", "nearest", "reflect",
                 "mirror"):
        grid = rng.standard_normal((16, 15))
        before = grid.copy()
        out = cs.apply(grid, "box2d49p", steps=4, mode=mode, cval=1.0,
                       backend=backend)
        np.testing.assert_array_equal(grid, before, err_msg=mode)
        assert not np.shares_memory(out, grid)


def test_read_only_input_accepted(rng):
    grid = rng.standard_normal((10, 10))
    grid.flags.writeable = False
    out = cs.apply(grid, "heat2d", steps=2)
    assert_close(out, ref.apply(grid, cs.Stencil("heat2d").weights, 2),
                 dict(seed=rng.seed))


def test_auto_backend(rng):
    grid = rng.standard_normal((31, 29))
    out = cs.apply(grid, "star2d13p", steps=3, mode="wrap")
    assert_close(out, ref.apply(grid, cs.Stencil("star2d13p").weights, 3,
                                "wrap"),
                 dict(backend="auto", seed=rng.seed))
    used = cs.last_run_info()["backend"]
    assert cs.backends()[used] == "available"
    assert used == ("cuda" if HAVE_CUDA else "cpu")


# ---------------------------------------------------------------------------
# backends(), last_run_info()

def test_backends_contents():
    b = cs.backends()
    assert isinstance(b, dict)
    assert {"cpu", "cpu-tc", "cuda"} <= set(b)
    assert all(isinstance(k, str) and isinstance(v, str) and v
               for k, v in b.items())
    assert b["cpu"] == "available"
    assert b["cpu-tc"] == "available"
    if b["cuda"] != "available":
        assert len(b["cuda"]) > 5  # a reason, not an empty word


@pytest.mark.parametrize("backend", BACKENDS)
def test_last_run_info_contents(backend, rng):
    cs.apply(rng.standard_normal((32, 33)), "heat2d", steps=6,
             backend=backend)
    info = cs.last_run_info()
    assert isinstance(info, dict)
    for key in ("backend", "path", "fused_depth", "fused_passes",
                "unfused_steps"):
        assert key in info, (key, info)
    assert info["backend"] == backend
    assert isinstance(info["path"], str) and info["path"]
    for key in ("fused_depth", "fused_passes", "unfused_steps"):
        assert isinstance(info[key], (int, np.integer)), (key, info)
        assert info[key] >= 0
    # it describes the *last* call
    cs.apply(rng.standard_normal(20), "heat1d", steps=1, backend="cpu")
    assert cs.last_run_info()["backend"] == "cpu"


def test_last_run_info_is_a_copy(rng):
    cs.apply(rng.standard_normal((8, 8)), "heat2d", backend="cpu")
    info = cs.last_run_info()
    info["backend"] = "tampered"
    assert cs.last_run_info()["backend"] == "cpu"


def test_main_job_runs_and_checks_itself(monkeypatch, capsys):
    """python -m convstencil: the heat check passes and every preset is
    timed (on small grids here: the sizes are the job's, not the test's)."""
    from convstencil import __main__ as job
    small = {1: (5000,), 2: (40, 50), 3: (9, 10, 11)}
    monkeypatch.setattr(job, "SIZES", {"cpu": small, "cuda": small})
    assert job.main(["--backend", "cpu", "--steps", "3"]) == 0
    out = capsys.readouterr().out
    assert "relative error" in out
    for name in cs.PRESETS:
        assert name in out
