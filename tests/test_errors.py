"""Bad input: the right exception type, a message that says what was wrong
(loose keyword match), and the caller's arrays left untouched."""
import numpy as np
import pytest

import convstencil as cs
from conftest import HAVE_CUDA

G1 = (11,)
G2 = (9, 8)
G3 = (5, 6, 7)


def _grid(rng, shape=G2):
    return rng.standard_normal(shape)


# Each case: id -> (grid shape, kwargs builder, exception, match regex,
# words that must all appear in the message).  The builder gets rng and
# returns the keyword arguments of apply() besides the grid.
def _w(shape, value=0.1):
    return np.full(shape, value)


CASES = {
    # stencil / grid dimension mismatch
    "2d-grid-1d-preset": (G2, lambda r: dict(stencil="heat1d"),
                          ValueError, r"(?i)ndim|dimension|1d|2d", []),
    "1d-grid-2d-preset": (G1, lambda r: dict(stencil="box2d9p"),
                          ValueError, r"(?i)ndim|dimension|1d|2d", []),
    "3d-grid-2d-weights": (G3, lambda r: dict(weights=_w((3, 3))),
                           ValueError, r"(?i)ndim|dimension|2d|3d", []),
    "2d-grid-3d-weights": (G2, lambda r: dict(weights=_w((3, 3, 3))),
                           ValueError, r"(?i)ndim|dimension|2d|3d", []),
    "4d-grid": ((2, 3, 2, 3), lambda r: dict(weights=_w((3, 3, 3, 3))),
                ValueError, r"(?i)ndim|dimension|1d|3d|4", []),
    "0d-grid": ((), lambda r: dict(weights=_w((3,))),
                ValueError, r"(?i)ndim|dimension|1d|0", []),
    # weights shape
    "even-weights-1d": (G1, lambda r: dict(weights=_w((4,))),
                        ValueError, r"(?i)odd", []),
    "even-weights-2d": (G2, lambda r: dict(weights=_w((3, 4))),
                        ValueError, r"(?i)odd", []),
    "even-weights-3d": (G3, lambda r: dict(weights=_w((3, 3, 2))),
                        ValueError, r"(?i)odd", []),
    "empty-weights-1d": (G1, lambda r: dict(weights=np.zeros(0)),
                         ValueError, r"(?i)empty|odd|size", []),
    "empty-weights-2d": (G2, lambda r: dict(weights=np.zeros((0, 3))),
                         ValueError, r"(?i)empty|odd|size", []),
    "4d-weights-on-2d": (G2, lambda r: dict(weights=_w((1, 1, 3, 3))),
                         ValueError, r"(?i)ndim|dimension|1d|3d", []),
    # the size limit (radius 7, 15 per axis)
    "cpu-17x17": (G2, lambda r: dict(weights=_w((17, 17), 1 / 289),
                                     backend="cpu"),
                  ValueError, r"15", []),
    "cpu-17": (G1, lambda r: dict(weights=_w((17,), 1 / 17), backend="cpu"),
               ValueError, r"15", []),
    "cpu-3x17": (G2, lambda r: dict(weights=_w((3, 17), 1 / 51),
                                    backend="cpu"),
                 ValueError, r"15", []),
    "cpu-17x1x1": (G3, lambda r: dict(weights=_w((17, 1, 1), 1 / 17),
                                      backend="cpu"),
                   ValueError, r"15", []),
    "cpu-tc-9x9": (G2, lambda r: dict(weights=_w((9, 9), 1 / 81),
                                      backend="cpu-tc"),
                   ValueError, r"\b7\b", []),
    "cpu-tc-3x9": (G2, lambda r: dict(weights=_w((3, 9), 1 / 27),
                                      backend="cpu-tc"),
                   ValueError, r"\b7\b", []),
    "cpu-tc-33": (G1, lambda r: dict(weights=_w((33,), 1 / 33),
                                     backend="cpu-tc"),
                  ValueError, r"15", []),
    "cpu-tc-9x9x9": (G3, lambda r: dict(weights=_w((9, 9, 9), 1 / 729),
                                        backend="cpu-tc"),
                     ValueError, r"\b7\b", []),
    # weight values
    "nan-weights": (G2, lambda r: dict(weights=np.array(
        [[0, 0.1, 0], [0.1, np.nan, 0.1], [0, 0.1, 0]])),
        ValueError, r"(?i)finite|nan", []),
    "inf-weights": (G2, lambda r: dict(weights=np.array(
        [[0, 0.1, 0], [0.1, np.inf, 0.1], [0, 0.1, 0]])),
        ValueError, r"(?i)finite|inf", []),
    "neg-inf-weights-1d": (G1, lambda r: dict(weights=np.array(
        [0.5, -np.inf, 0.5])), ValueError, r"(?i)finite|inf", []),
    "complex-weights": (G2, lambda r: dict(weights=np.ones((3, 3)) * 1j),
                        TypeError, r"(?i)real|complex|dtype", []),
    "string-weights": (G1, lambda r: dict(weights=np.array(["a", "b", "c"])),
                       TypeError, r"(?i)real|numer|dtype|str", []),
    "object-weights": (G1, lambda r: dict(weights=np.array(
        [0.2, None, 0.2], dtype=object)),
        TypeError, r"(?i)real|numer|dtype|object", []),
    # stencil / weights: exactly one
    "both-stencil-and-weights": (G2, lambda r: dict(
        stencil="heat2d", weights=_w((3, 3))),
        TypeError, r"(?i)stencil|weights", []),
    "neither-stencil-nor-weights": (G2, lambda r: dict(),
                                    TypeError, r"(?i)stencil|weights", []),
    "stencil-is-a-number": (G2, lambda r: dict(stencil=3),
                            TypeError, r"(?i)stencil|preset|name", []),
    # steps
    "negative-steps": (G2, lambda r: dict(stencil="heat2d", steps=-1),
                       ValueError, r"(?i)steps", []),
    "float-steps": (G2, lambda r: dict(stencil="heat2d", steps=2.5),
                    TypeError, r"(?i)steps", []),
    "string-steps": (G2, lambda r: dict(stencil="heat2d", steps="3"),
                     TypeError, r"(?i)steps", []),
    "none-steps": (G2, lambda r: dict(stencil="heat2d", steps=None),
                   TypeError, r"(?i)steps", []),
    # unknown names
    "unknown-preset-box2d49": (G2, lambda r: dict(stencil="box2d49"),
                               ValueError, r"box2d49p", []),
    "unknown-preset-heat2": (G2, lambda r: dict(stencil="heat2"),
                             ValueError, r"heat2d", []),
    "unknown-preset-star2d13": (G2, lambda r: dict(stencil="star-2d-13"),
                                ValueError, r"star2d13p", []),
    "unknown-preset-nonsense": (G2, lambda r: dict(stencil="qwertyuiop"),
                                ValueError, r"(?i)preset|stencil|unknown",
                                []),
    "unknown-mode": (G2, lambda r: dict(stencil="heat2d", mode="circular"),
                     ValueError, r"(?i)mode",
                     ["constant", "wrap", "nearest", "reflect", "mirror"]),
    "scipy-grid-wrap-mode": (G2, lambda r: dict(stencil="heat2d",
                                                mode="grid-wrap"),
                             ValueError, r"(?i)mode", ["wrap"]),
    "unknown-backend": (G2, lambda r: dict(stencil="heat2d", backend="gpu"),
                        ValueError, r"(?i)backend", ["cpu", "cpu-tc", "cuda"]),
    # cval
    "string-cval": (G2, lambda r: dict(stencil="heat2d", cval="zero"),
                    (TypeError, ValueError), r"(?i)cval", []),
    # out=
    "out-wrong-shape": (G2, lambda r: dict(stencil="heat2d",
                                           out=np.zeros((8, 9))),
                        ValueError, r"(?i)out|shape", []),
    "out-wrong-size-1d": (G1, lambda r: dict(stencil="heat1d",
                                             out=np.zeros(12)),
                          ValueError, r"(?i)out|shape", []),
    "out-float32": (G2, lambda r: dict(stencil="heat2d",
                                       out=np.zeros(G2, np.float32)),
                    TypeError, r"(?i)out|dtype|float64", []),
    "out-int64": (G2, lambda r: dict(stencil="heat2d",
                                     out=np.zeros(G2, np.int64)),
                  TypeError, r"(?i)out|dtype|float64", []),
    "out-non-contiguous": (G2, lambda r: dict(stencil="heat2d",
                                              out=np.zeros((9, 16))[:, ::2]),
                           (TypeError, ValueError),
                           r"(?i)out|contiguous", []),
    "out-fortran": (G2, lambda r: dict(stencil="heat2d",
                                       out=np.zeros(G2, order="F")),
                    (TypeError, ValueError), r"(?i)out|contiguous", []),
    "out-read-only": (G2, lambda r: dict(stencil="heat2d",
                                         out=_read_only(np.zeros(G2))),
                      (TypeError, ValueError), r"(?i)out|writ|read", []),
    "out-is-a-list": (G1, lambda r: dict(stencil="heat1d",
                                         out=[0.0] * G1[0]),
                      TypeError, r"(?i)out|ndarray|array", []),
}


def _read_only(a):
    a.flags.writeable = False
    return a


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input(case, rng):
    shape, build, exc, match, words = CASES[case]
    grid = _grid(rng, shape)
    kwargs = build(rng)
    grid_before = grid.copy()
    snapshots = {k: np.array(v, copy=True) for k, v in kwargs.items()
                 if isinstance(v, np.ndarray)}
    stencil = kwargs.pop("stencil", None)
    with pytest.raises(exc, match=match) as info:
        cs.apply(grid, stencil, **kwargs)
    message = str(info.value)
    for word in words:
        assert word in message, "%r not in message %r" % (word, message)
    np.testing.assert_array_equal(grid, grid_before)
    for key, before in snapshots.items():
        value = stencil if key == "stencil" else kwargs[key]
        np.testing.assert_array_equal(
            value, before, err_msg="%s= modified by a failed call" % key)


@pytest.mark.parametrize("shape", [(0,), (3, 0), (0, 0), (2, 0, 4)])
def test_empty_grid(shape):
    grid = np.zeros(shape)
    w = np.full((3,) * len(shape), 1.0 / 3 ** len(shape))
    with pytest.raises(ValueError, match=r"(?i)empty|size|element|zero"):
        cs.apply(grid, weights=w)
    assert grid.shape == shape


@pytest.mark.parametrize("grid", [
    np.array([1 + 2j, 3, 4]),
    np.array(["a", "b", "c"]),
    np.array([1.0, None, 2.0], dtype=object),
    "abc",
    np.array([np.datetime64("2020-01-01")] * 3),
], ids=["complex", "str-array", "object", "python-str", "datetime"])
def test_non_real_grid(grid):
    before = np.array(grid, copy=True)
    with pytest.raises(TypeError, match=r"(?i)real|numer|dtype|complex|str"):
        cs.apply(grid, "heat1d")
    np.testing.assert_array_equal(np.asarray(grid), before)


def test_ragged_list_grid():
    with pytest.raises((TypeError, ValueError)):
        cs.apply([[1.0, 2.0], [3.0]], "heat2d")


@pytest.mark.skipif(HAVE_CUDA, reason="a GPU is visible here")
def test_cuda_without_device_says_why(rng):
    reason = cs.backends()["cuda"]
    assert reason != "available"
    grid = rng.standard_normal((8, 8))
    before = grid.copy()
    with pytest.raises(RuntimeError, match=r"(?i)cuda") as info:
        cs.apply(grid, "heat2d", backend="cuda")
    assert reason in str(info.value), (reason, str(info.value))
    np.testing.assert_array_equal(grid, before)
    # "auto" does not fail: it falls back to the CPU
    cs.apply(grid, "heat2d", backend="auto")
    assert cs.last_run_info()["backend"] != "cuda"


# ---------------------------------------------------------------------------
# Stencil(...)

STENCIL_CASES = {
    "no-arguments": (lambda: cs.Stencil(), TypeError,
                     r"(?i)name|weights"),
    "unknown-preset": (lambda: cs.Stencil("box2d49"), ValueError,
                       r"box2d49p"),
    "preset-not-a-str": (lambda: cs.Stencil(7), TypeError,
                         r"(?i)name|str|preset"),
    "preset-weights-wrong-shape": (
        lambda: cs.Stencil("heat2d", weights=np.full((5, 5), 0.04)),
        ValueError, r"(?i)shape|3"),
    "preset-weights-wrong-ndim": (
        lambda: cs.Stencil("box2d9p", weights=np.full(9, 1 / 9)),
        ValueError, r"(?i)shape|ndim|3"),
    "custom-even": (lambda: cs.Stencil(weights=np.ones((2, 3))),
                    ValueError, r"(?i)odd"),
    "custom-empty": (lambda: cs.Stencil(weights=np.ones((0,))),
                     ValueError, r"(?i)empty|odd|size"),
    "custom-nan": (lambda: cs.Stencil(weights=np.array([0.5, np.nan, 0.5])),
                   ValueError, r"(?i)finite|nan"),
    "custom-complex": (lambda: cs.Stencil(weights=np.ones(3) * 1j),
                       TypeError, r"(?i)real|complex|dtype"),
    "custom-too-wide": (lambda: cs.Stencil(weights=np.ones((3, 17))),
                        ValueError, r"15"),
    "custom-4d": (lambda: cs.Stencil(weights=np.ones((3, 3, 3, 3))),
                  ValueError, r"(?i)ndim|dimension|1d|3d"),
    "alpha-on-a-box": (lambda: cs.Stencil("box2d9p", alpha=0.1),
                       (TypeError, ValueError), r"(?i)alpha"),
    "alpha-unstable": (lambda: cs.Stencil("heat2d", alpha=0.3),
                       ValueError, "stability limit 0 <= alpha <= 0.25"),
    "alpha-negative": (lambda: cs.Stencil("heat3d", alpha=-0.01),
                       ValueError, "unstable=True"),
    "alpha-nan": (lambda: cs.Stencil("heat2d", alpha=float("nan")),
                  ValueError, r"(?i)alpha|finite"),
}


@pytest.mark.parametrize("case", list(STENCIL_CASES))
def test_bad_stencil(case):
    build, exc, match = STENCIL_CASES[case]
    with pytest.raises(exc, match=match):
        build()


def test_custom_weights_not_modified_by_stencil():
    w = np.array([[0.0, 0.1, 0.0], [0.1, 0.6, 0.1], [0.0, 0.1, 0.0]])
    before = w.copy()
    s = cs.Stencil(weights=w)
    w[1, 1] = 99.0  # the Stencil holds its own copy
    assert s.weights[1, 1] == before[1, 1]
    w[1, 1] = before[1, 1]
    cs.apply(np.ones((4, 4)), weights=w)
    np.testing.assert_array_equal(w, before)
