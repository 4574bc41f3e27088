"""``_core.run_scheme_device``'s argument checks: every malformed table,
shape, pointer or code is a TypeError or a ValueError raised before the
engine is asked for, so these run on every machine (on a build without
the CUDA engine a well-formed call is a RuntimeError that says so; with
it, the fake pointers are refused by the engine as no device memory).
The runs themselves are in test_gpu_schemes.py."""
import sys

import numpy as np
import pytest

from convstencil import _core


def tables(K=2):
    """A leapfrog wave's tables: u <- 2u - up + 0.1 L(u), up <- u."""
    lap = np.array([[0, 1.0, 0], [1, -4, 1], [0, 1, 0]])
    coefs = np.array([2.0, -1.0, 0.1, 1.0])
    terms = np.array([[1, -1, -1, -1, 1, 0], [1, -1, -1, -1, 0, 1],
                      [0, -1, 0, 0, 0, 0], [1, -1, -1, -1, 1, 0]],
                     dtype=np.int32)
    updates = np.array([[0, 0, 3], [1, 3, 1]], dtype=np.int32)
    stages = np.array([[0, 2]], dtype=np.int32)
    return dict(fields_in=(1 << 20, 2 << 20), fields_out=(3 << 20, 4 << 20),
                params=(), shape=(20, 30), stencils=(lap,), coefs=coefs,
                terms=terms, updates=updates, stages=stages, steps=3,
                mode=_core.MODE_WRAP, cval=0.0, stream=0,
                interruptible=False, progress=None)


ORDER = ["fields_in", "fields_out", "params", "shape", "stencils", "coefs",
         "terms", "updates", "stages", "steps", "mode", "cval", "stream",
         "interruptible", "progress"]


def call(**changes):
    kw = tables()
    kw.update(changes)
    return _core.run_scheme_device(*(kw[name] for name in ORDER))


def test_a_well_formed_call_reaches_the_engine():
    # no CUDA engine: RuntimeError; with one, the fake pointers are no
    # device memory (ValueError), or no device is there (RuntimeError)
    with pytest.raises((RuntimeError, ValueError)) as e:
        call()
    assert "run_scheme_device" not in str(e.value)


def bad_terms(column, value):
    t = tables()["terms"].copy()
    t[2, column] = value
    return t


@pytest.mark.parametrize("changes,kind,match", [
    (dict(fields_in=[4096, 8192]), TypeError, "tuple"),
    (dict(fields_in=(4096, "x")), TypeError, "fields_in"),
    (dict(fields_in=(4096, -8)), ValueError, "fields_in"),
    (dict(fields_in=(4096, 0)), ValueError, "fields_in"),
    (dict(fields_out=(4096,)), ValueError, "fields"),
    (dict(fields_in=tuple(range(8, 80, 8)), fields_out=tuple(range(8, 80, 8))),
     ValueError, "fields"),
    (dict(params=tuple(range(8, 80, 8))), ValueError, "param"),
    (dict(shape=(20, 30, 4, 5)), ValueError, "shape"),
    (dict(shape=(20, -3)), ValueError, "shape"),
    (dict(shape=[20, 30]), ValueError, "shape"),
    (dict(stencils=(np.ones((3, 3), dtype=np.float32),)), TypeError,
     "float64"),
    (dict(stencils=(np.ones((3, 3, 3)),)), ValueError, "axes"),
    (dict(stencils=(np.ones((3, 4)),)), ValueError, "odd"),
    (dict(stencils=(np.full((3, 3), np.nan),)), ValueError, "finite"),
    (dict(stencils=(np.ones((5, 5))[::2, ::2],)), TypeError, "contiguous"),
    (dict(stencils=("weights",)), TypeError, "stencils"),
    (dict(coefs=np.ones(3)), ValueError, "shapes"),
    (dict(coefs=np.ones(4, dtype=np.float32)), TypeError, "float64"),
    (dict(terms=np.zeros((4, 6), dtype=np.int64)), TypeError, "int32"),
    (dict(terms=np.zeros((4, 5), dtype=np.int32)), ValueError, "shapes"),
    (dict(updates=np.zeros((2, 2), dtype=np.int32)), ValueError, "shapes"),
    (dict(stages=np.zeros((1, 3), dtype=np.int32)), ValueError, "shapes"),
    (dict(stages=np.zeros((0, 2), dtype=np.int32)), ValueError, "stage"),
    (dict(terms=bad_terms(0, 2)), ValueError, "kind"),
    (dict(terms=bad_terms(1, 0)), ValueError, "param"),
    (dict(terms=bad_terms(2, 5)), ValueError, "field"),
    (dict(terms=bad_terms(3, 1)), ValueError, "stencil"),
    (dict(terms=bad_terms(4, 1)), ValueError, "power"),
    (dict(updates=np.array([[0, 0, 3], [2, 3, 1]], dtype=np.int32)),
     ValueError, "target"),
    (dict(updates=np.array([[0, 0, 3], [1, 3, 2]], dtype=np.int32)),
     ValueError, "terms"),
    (dict(updates=np.array([[0, 0, 3], [0, 3, 1]], dtype=np.int32)),
     ValueError, "twice|two updates"),
    (dict(stages=np.array([[1, 2]], dtype=np.int32)), ValueError,
     "updates"),
    (dict(steps=-1), ValueError, "steps"),
    (dict(mode=9), ValueError, "mode"),
    (dict(stream=-1), ValueError, "stream"),
    (dict(stream="default"), TypeError, "stream"),
])
def test_bad_arguments(changes, kind, match):
    with pytest.raises(kind, match=match):
        call(**changes)


def test_monomial_power_range():
    t = tables()["terms"].copy()
    t[0, 4] = 5
    with pytest.raises(ValueError, match="power"):
        call(terms=t)
    t = tables()["terms"].copy()
    t[0, 2] = 0  # a monomial names no field
    with pytest.raises(ValueError, match="monomial"):
        call(terms=t)


def test_no_reference_leaks_on_errors():
    lap = tables()["stencils"][0]
    coefs = tables()["coefs"]
    before = (sys.getrefcount(lap), sys.getrefcount(coefs))
    for _ in range(200):
        with pytest.raises(ValueError):
            call(stencils=(lap,), coefs=coefs, mode=9)
        with pytest.raises(ValueError):
            call(stencils=(lap,), coefs=coefs,
                 stages=np.array([[1, 2]], dtype=np.int32))
    assert (sys.getrefcount(lap), sys.getrefcount(coefs)) == before
