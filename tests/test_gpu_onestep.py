"""One step between CuPy arrays: the one-step kernels (csrc/cuda/onestep.cu)
and the generic direct kernel they stand beside (csrc/cuda/direct.cu).

A ``steps=1`` call between distinct device arrays runs one kernel on the
arrays themselves: for float64 arrays with unit x stride and the kernels
onestep.cu is built for (1D kernels of 3, 5 and 7 points; planar pluses,
boxes and outer products of sides 3, 5 and 7; 3D stars of 7 points and
3 x 3 x 3 boxes, every tap of the shape a nonzero weight) one of its
kernels, for everything else direct.cu's.  Every kernel variant
(``CONVSTENCIL_ONESTEP``: unset, persist, blocks, l1, deep, generic) is
checked against tests/reference.py on random grids and weights, in every
mode, on odd and tiny grids, contiguous arrays and views with longer
rows, and against scipy.ndimage for NaN and infinities.  Marked ``gpu``.
"""
import numpy as np
import pytest

import convstencil as cs
import reference
from conftest import assert_close, exact_outer, gpu

pytestmark = gpu

MODES = [("constant", 0.5), ("wrap", 0.0), ("nearest", 0.0),
         ("reflect", 0.0), ("mirror", 0.0)]
MODE_IDS = [m for m, _ in MODES]
VARIANTS = [None, "persist", "blocks", "l1", "deep", "generic"]
VARIANT_IDS = ["default" if v is None else v for v in VARIANTS]
FAMILIES = ["1d3", "1d5", "1d7", "plus3", "plus5", "plus7", "box3", "box5",
            "box7", "outer5", "outer7", "star3d", "box3d"]
# odd grids with several tiles and blocks, and grids smaller than the
# kernel, per dimensionality
GRIDS = {1: [(9001,), (2,)], 2: [(131, 259), (2, 3)],
         3: [(19, 23, 67), (2, 3, 2)]}


@pytest.fixture(scope="module")
def cp():
    return pytest.importorskip("cupy")


def family_weights(rng, family):
    """Random signed weights of a family, every tap of its shape nonzero."""
    def signed(shape):
        w = rng.uniform(0.2, 1.0, shape)
        w[rng.random(shape) < 0.25] *= -0.5
        return w / np.abs(w).sum()

    if family.startswith("1d"):
        return signed((int(family[2]),))
    if family in ("star3d", "box3d"):
        w = signed((3, 3, 3))
        if family == "star3d":
            keep = np.zeros((3, 3, 3), bool)
            keep[1, 1, :] = keep[1, :, 1] = keep[:, 1, 1] = True
            w[~keep] = 0.0
        return w
    k = int(family[-1])
    if family.startswith("outer"):
        return exact_outer(rng, k)
    w = signed((k, k))
    if family.startswith("plus"):
        keep = np.zeros((k, k), bool)
        keep[k // 2, :] = keep[:, k // 2] = True
        w[~keep] = 0.0
    return w


def run(cp, grid, w, mode, cval, monkeypatch, variant, **kw):
    if variant is None:
        monkeypatch.delenv("CONVSTENCIL_ONESTEP", raising=False)
    else:
        monkeypatch.setenv("CONVSTENCIL_ONESTEP", variant)
    got = cs.apply(grid, weights=w, steps=1, mode=mode, cval=cval, **kw)
    info = cs.last_run_info()
    assert info["path"] == "direct" and info["device_array"]
    return got, info


@pytest.mark.parametrize("variant", VARIANTS, ids=VARIANT_IDS)
@pytest.mark.parametrize("mode,cval", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_mode_and_variant(cp, family, mode, cval, variant,
                                       monkeypatch, rng):
    w = family_weights(rng, family)
    for shape in GRIDS[w.ndim]:
        host = rng.random(shape) - 0.3
        grid = cp.asarray(host)
        kept = grid.copy()
        got, info = run(cp, grid, w, mode, cval, monkeypatch, variant)
        assert type(got) is cp.ndarray and got.flags.c_contiguous
        assert info["nonfinite"] is False
        assert_close(cp.asnumpy(got),
                     reference.correlate_once(host, w, mode, cval),
                     dict(family=family, mode=mode, variant=variant,
                          shape=shape, seed=rng.seed))
        assert bool(cp.all(grid == kept))


@pytest.mark.parametrize("mode,cval", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("name", list(cs.PRESETS))
def test_presets_on_large_odd_grids(cp, name, mode, cval, rng):
    shape = {1: (1000003,), 2: (1001, 1533), 3: (67, 129, 131)}[
        cs.Stencil(name).ndim]
    host = rng.random(shape)
    w = cs.Stencil(name).weights
    got = cs.apply(cp.asarray(host), name, mode=mode, cval=cval)
    assert cs.last_run_info()["path"] == "direct"
    assert_close(cp.asnumpy(got), reference.correlate_once(host, w, mode,
                                                           cval),
                 dict(name=name, mode=mode, seed=rng.seed))


@pytest.mark.parametrize("layout", ["rows", "planes", "shifted", "out",
                                    "fortran", "flipped", "float32"])
@pytest.mark.parametrize("family", ["1d3", "1d5", "plus3", "box3", "plus7",
                                    "outer7", "box7", "star3d", "box3d"])
def test_layouts(cp, family, layout, monkeypatch, rng):
    """Views with longer rows (and planes), a 1D view one element in (not
    16-byte aligned), a result into out= with longer rows: the one-step
    kernels; F order, a flipped axis, float32: the generic kernel.  Both
    against the reference."""
    w = family_weights(rng, family)
    shape = {1: (5003,), 2: (77, 141), 3: (11, 13, 70)}[w.ndim]
    host = rng.random(shape)
    out = None
    if layout in ("rows", "planes"):
        pad = [(0, 3)] * w.ndim if layout == "planes" else (
            [(0, 0)] * (w.ndim - 1) + [(0, 5)])
        big = cp.asarray(np.pad(host, pad, constant_values=np.nan))
        grid = big[tuple(slice(0, n) for n in shape)]
    elif layout == "shifted":
        flat = cp.asarray(np.r_[np.nan, host.ravel()])
        grid = flat[1:].reshape(shape)
    elif layout == "out":
        grid = cp.asarray(host)
        big = cp.full(tuple(n + 2 for n in shape), np.nan)
        out = big[tuple(slice(1, n + 1) for n in shape)]
    elif layout == "fortran":
        grid = cp.asfortranarray(cp.asarray(host))
    elif layout == "flipped":
        grid = cp.asarray(host)[..., ::-1]
        host = host[..., ::-1]
    else:
        grid = cp.asarray(host).astype(cp.float32)
        host = cp.asnumpy(grid).astype(np.float64)
    monkeypatch.delenv("CONVSTENCIL_ONESTEP", raising=False)
    got = cs.apply(grid, weights=w, mode="reflect", out=out)
    assert cs.last_run_info()["path"] == "direct"
    if out is not None:
        assert got is out
        inner = cp.asnumpy(big)
        ring = np.ones(inner.shape, bool)
        ring[tuple(slice(1, n + 1) for n in shape)] = False
        assert np.isnan(inner[ring]).all()  # nothing written outside out
    assert_close(cp.asnumpy(got),
                 reference.correlate_once(host, w, "reflect"),
                 dict(family=family, layout=layout, seed=rng.seed))


def scipy_once(host, w, mode, cval):
    ndi = pytest.importorskip("scipy.ndimage")
    with np.errstate(all="ignore"):
        return ndi.correlate(host, w, mode=mode, cval=cval)


@pytest.mark.parametrize("variant", [None, "blocks", "generic"],
                         ids=["default", "blocks", "generic"])
@pytest.mark.parametrize("mode,cval", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("family", FAMILIES)
def test_nonfinite_as_scipy(cp, family, mode, cval, variant, monkeypatch,
                            rng):
    """NaN, +Inf and -Inf where scipy.ndimage puts them (a zero weight of a
    plus or a star never meets one), finite values to 1e-12, and
    last_run_info()["nonfinite"] True."""
    w = family_weights(rng, family)
    shape = {1: (3001,), 2: (61, 133), 3: (9, 21, 66)}[w.ndim]
    host = rng.random(shape)
    flat = host.reshape(-1)
    picks = rng.choice(flat.size, 12, replace=False)
    flat[picks[:4]] = np.nan
    flat[picks[4:8]] = np.inf
    flat[picks[8:]] = -np.inf
    flat[0] = np.nan  # at an edge too
    got, info = run(cp, cp.asarray(host), w, mode, cval, monkeypatch,
                    variant)
    assert info["nonfinite"] is True
    got = cp.asnumpy(got)
    want = scipy_once(host, w, mode, cval)
    for name, test in (("NaN", np.isnan), ("+Inf", np.isposinf),
                       ("-Inf", np.isneginf)):
        assert np.array_equal(test(got), test(want)), (name, family, mode)
    finite = np.isfinite(want)
    assert_close(got[finite], want[finite], dict(family=family, mode=mode))


@pytest.mark.parametrize("family", ["1d3", "plus3", "outer7", "star3d"])
def test_on_a_stream(cp, family, rng):
    """With stream= the step is queued on the caller's stream (no flag
    read: nonfinite None) and is complete once it has run."""
    w = family_weights(rng, family)
    shape = {1: (70001,), 2: (301, 517), 3: (37, 41, 45)}[w.ndim]
    host = rng.random(shape)
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        grid = cp.asarray(host)
        out = cp.empty_like(grid)
        got = cs.apply(grid, weights=w, mode="wrap", out=out, stream=stream)
        info = cs.last_run_info()
        stream.synchronize()
    assert got is out and info["path"] == "direct"
    assert info["nonfinite"] is None
    assert_close(cp.asnumpy(out), reference.correlate_once(host, w, "wrap"))


def test_zero_weights_take_the_generic_kernel(cp, monkeypatch, rng):
    """A box with a zero weight is no box of the one-step kernels: the
    generic kernel skips the zero, so a NaN it would meet stays out."""
    w = family_weights(rng, "box3")
    w[0, 0] = 0.0
    host = rng.random((40, 50))
    host[10, 10] = np.nan
    got, info = run(cp, cp.asarray(host), w, "constant", 0.0, monkeypatch,
                    None)
    got = cp.asnumpy(got)
    want = scipy_once(host, w, "constant", 0.0)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    assert np.isnan(got).sum() == 8


def test_bad_variant_is_a_value_error(cp, monkeypatch):
    monkeypatch.setenv("CONVSTENCIL_ONESTEP", "fastest")
    with pytest.raises(ValueError, match="CONVSTENCIL_ONESTEP"):
        cs.apply(cp.ones((20, 30)), "heat2d")
