"""The CPU engine of PDE schemes, called directly: _core.run_scheme.

A scheme's code tables (csrc/scheme.h) are built here by hand and run by
the engine; `reference` evaluates the same tables with a plain loop
written for clarity: scipy.ndimage.correlate for every stencil term (the
scheme's mode and cval), NumPy for monomials and coefficients, each
update's terms summed in their order from 0, every update of a stage
reading the values the fields had when the stage began.  Every field
must agree to ||out - ref|| / ||ref|| <= 1e-12; NaN and infinities must
land exactly where the reference puts them.

Random schemes keep their values bounded over many steps: fields,
parameter fields and cval lie in [-1, 1], every stencil has
sum(|w|) == 1 and every update sum(|coef|) <= 1, so no value leaves
[-1, 1].  Weights are 0 or at least 0.1 in magnitude (SciPy drops weights
of magnitude below DBL_EPSILON, the engine exact zeros only).
"""
import _thread
import gc
import os
import sys
import threading
import tracemalloc

import numpy as np
import pytest
from scipy import ndimage

from convstencil import _core
from conftest import assert_close

MODES = {"constant": _core.MODE_CONSTANT, "wrap": _core.MODE_WRAP,
         "nearest": _core.MODE_NEAREST, "reflect": _core.MODE_REFLECT,
         "mirror": _core.MODE_MIRROR}
SHAPES = {1: [(1,), (2,), (3,), (57,), (40000,)],
          2: [(1, 1), (2, 3), (3, 1), (19, 23), (3, 2100), (45, 1500)],
          3: [(1, 1, 1), (2, 3, 2), (3, 1, 2), (7, 9, 11), (12, 30, 41)]}


# Every case runs on both of the engine's ways: the whole-grid passes
# (CONVSTENCIL_CPU_SCHEME_BLOCK=off) and its own plan, which cuts the
# larger grids into tiles (scheme-blocked; test_scheme_blocked.py forces
# tiles on small grids).
PLANS = {"off": ("scheme",), "": ("scheme", "scheme-blocked")}


@pytest.fixture(autouse=True, params=sorted(PLANS), ids=["auto", "whole"])
def engine_plan(request, monkeypatch):
    monkeypatch.setenv("CONVSTENCIL_CPU_SCHEME_BLOCK", request.param)
    return PLANS[request.param]


# ---------------------------------------------------------------------------
# Schemes as code tables

def stencil_term(coef, field, stencil, param=-1):
    """coef * [param] * correlate(field, stencils[stencil])."""
    return ("stencil", float(coef), int(param), int(field), int(stencil))


def monomial(coef, powers, param=-1):
    """coef * [param] * prod_f field_f ** powers[f]."""
    return ("monomial", float(coef), int(param), tuple(int(p) for p in powers))


class Tables:
    """The code tables of a scheme of k fields, given as a list of stages,
    each a list of (target, [term, ...]) updates."""

    def __init__(self, k, stages):
        self.k = k
        coefs, terms, updates, stage_rows = [], [], [], []
        for stage in stages:
            stage_rows.append([len(updates), len(stage)])
            for target, update_terms in stage:
                updates.append([target, len(terms), len(update_terms)])
                for term in update_terms:
                    coefs.append(term[1])
                    if term[0] == "stencil":
                        terms.append([0, term[2], term[3], term[4]]
                                     + [0] * k)
                    else:
                        terms.append([1, term[2], -1, -1] + list(term[3]))
        self.coefs = np.array(coefs, dtype=np.float64).reshape(-1)
        self.terms = np.array(terms, dtype=np.int32).reshape(-1, 4 + k)
        self.updates = np.array(updates, dtype=np.int32).reshape(-1, 3)
        self.stages = np.array(stage_rows, dtype=np.int32).reshape(-1, 2)

    def arrays(self):
        return self.coefs, self.terms, self.updates, self.stages


def reference(fields, params, stencils, tables, steps, mode, cval):
    """The scheme's `steps` steps, by the plain loop (see the module)."""
    fields = [np.array(f, dtype=np.float64, copy=True) for f in fields]
    shape = fields[0].shape
    with np.errstate(all="ignore"):
        for _ in range(steps):
            for first_update, update_count in tables.stages:
                old = list(fields)
                for target, first_term, term_count in tables.updates[
                        first_update:first_update + update_count]:
                    acc = np.zeros(shape)
                    for t in range(first_term, first_term + term_count):
                        kind, param, field, stencil = tables.terms[t, :4]
                        powers = tables.terms[t, 4:]
                        coef = tables.coefs[t]
                        if param >= 0:
                            coef = coef * params[param]
                        if kind == 0:
                            value = ndimage.correlate(
                                old[field], stencils[stencil], mode=mode,
                                cval=cval)
                        else:
                            value = np.ones(shape)
                            for f, power in enumerate(powers):
                                for _ in range(power):
                                    value = value * old[f]
                        acc = acc + coef * value
                    fields[target] = acc
    return fields


def run(fields, tables, steps, mode, cval=0.0, params=(), stencils=(),
        out=None, threads=0, interruptible=False, progress=None):
    """_core.run_scheme on the CPU backend; returns (outs, info)."""
    if out is None:
        out = tuple(np.full(f.shape, 7.25) for f in fields)
    info = _core.run_scheme(tuple(fields), tuple(out), tuple(params),
                            tuple(stencils), *tables.arrays(), steps,
                            MODES[mode], cval, _core.BACKEND_CPU, threads,
                            interruptible, progress)
    return out, info


def check(fields, tables, steps, mode, cval=0.0, params=(), stencils=(),
          threads=0, ctx=None):
    """Run the engine and the reference; every field agrees, no input
    changes.  Returns the engine's outputs."""
    before = [np.array(a, copy=True) for a in
              list(fields) + list(params) + list(stencils)]
    out, info = run(fields, tables, steps, mode, cval, params, stencils,
                    threads=threads)
    want = reference(fields, params, stencils, tables, steps, mode, cval)
    ctx = dict(ctx or {}, mode=mode, steps=steps, shape=fields[0].shape)
    for k, (got, ref) in enumerate(zip(out, want)):
        assert_close(got, ref, dict(ctx, field=k))
    after = list(fields) + list(params) + list(stencils)
    for a, b in zip(after, before):
        np.testing.assert_array_equal(a, b, "an input was written")
    assert info["backend"] == "cpu"
    assert info["path"] in PLANS[os.environ["CONVSTENCIL_CPU_SCHEME_BLOCK"]]
    if info["path"] == "scheme":
        assert info["unfused_steps"] == steps and info["fused_depth"] == 1
    else:
        assert info["unfused_steps"] == 0
        assert info["fused_passes"] == -(-steps // info["fused_depth"])
    return out


# ---------------------------------------------------------------------------
# Random data

def random_stencil(rng, ndim, max_radius, zeros=0.3):
    """Odd sides up to 2 * max_radius + 1 per axis, some weights exactly
    0, the rest of magnitude >= 0.1 and random sign, sum(|w|) == 1."""
    shape = tuple(2 * int(rng.integers(0, max_radius + 1)) + 1
                  for _ in range(ndim))
    w = rng.uniform(0.1, 1.0, shape) * rng.choice([-1.0, 1.0], shape)
    w[rng.random(shape) < zeros] = 0.0
    total = np.abs(w).sum()
    return w / total if total > 0 else w


def random_powers(rng, k):
    powers = rng.integers(1, 5, k)
    powers[rng.random(k) < 0.6] = 0
    return powers


def random_term(rng, k, p, s):
    param = int(rng.integers(-1, p)) if p else -1
    coef = rng.uniform(-1.0, 1.0)
    if s and rng.random() < 0.5:
        return stencil_term(coef, rng.integers(k), rng.integers(s), param)
    return monomial(coef, random_powers(rng, k), param)


def random_scheme(rng, k, p, s, stages, max_terms=4):
    """Random stages of updates with distinct targets; each update's
    sum(|coef|) is at most 1, so values stay in [-1, 1]."""
    out = []
    for _ in range(stages):
        targets = rng.permutation(k)[:rng.integers(1, k + 1)]
        updates = []
        for target in targets:
            terms = [random_term(rng, k, p, s)
                     for _ in range(rng.integers(1, max_terms + 1))]
            total = sum(abs(t[1]) for t in terms)
            terms = [(t[0], t[1] / max(1.0, total)) + t[2:] for t in terms]
            updates.append((int(target), terms))
        out.append(updates)
    return Tables(k, out)


def random_fields(rng, shape, count):
    return [rng.uniform(-1.0, 1.0, shape) for _ in range(count)]


def laplacian(ndim):
    w = np.zeros((3,) * ndim)
    centre = (1,) * ndim
    w[centre] = -2.0 * ndim
    for axis in range(ndim):
        for side in (0, 2):
            index = list(centre)
            index[axis] = side
            w[tuple(index)] = 1.0
    return w


# ---------------------------------------------------------------------------
# Each kind of term, alone

@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_stencil_term_alone(ndim, mode, rng):
    """One field, u <- coef * S(u): apply()'s semantics."""
    shape = SHAPES[ndim][3]
    w = random_stencil(rng, ndim, 2)
    tables = Tables(1, [[(0, [stencil_term(1.0, 0, 0)])]])
    for steps in (0, 1, 7):
        check(random_fields(rng, shape, 1), tables, steps, mode, cval=0.5,
              stencils=[w])
    # one step is scipy.ndimage.correlate itself
    u = rng.uniform(-1, 1, shape)
    out, _ = run([u], tables, 1, mode, 0.5, stencils=[w])
    assert_close(out[0], ndimage.correlate(u, w, mode=mode, cval=0.5))


@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_monomial_terms_alone(ndim, rng):
    """Products of fields with powers 0 to 4, coefficients, parameter
    fields: pointwise, so the mode plays no part."""
    shape = SHAPES[ndim][3]
    k = 3
    fields = random_fields(rng, shape, k)
    params = random_fields(rng, shape, 2)
    for powers in ([1, 0, 0], [0, 2, 0], [4, 0, 0], [1, 1, 1], [2, 3, 1],
                   [4, 4, 4], [0, 0, 0]):
        for param in (-1, 0, 1):
            tables = Tables(k, [[(1, [monomial(0.75, powers, param)])]])
            check(fields, tables, 1, "wrap", params=params,
                  ctx=dict(powers=powers, param=param))
            check(fields, tables, 3, "wrap", params=params,
                  ctx=dict(powers=powers, param=param))


@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_sources(ndim, rng):
    """A source: a monomial with every power 0 times a parameter field,
    with a constant and a stencil term (heat with a source)."""
    shape = SHAPES[ndim][3]
    lap = laplacian(ndim) * 0.05
    heat = Tables(1, [[(0, [monomial(1.0, [1]),
                            stencil_term(1.0, 0, 0),
                            monomial(0.01, [0], param=0),
                            monomial(-0.002, [0])])]])
    for mode in MODES:
        check(random_fields(rng, shape, 1), heat, 7, mode, cval=-0.25,
              params=random_fields(rng, shape, 1), stencils=[lap])


@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_empty_update_and_empty_stage(ndim, rng):
    """An update without terms sets its field to 0; a stage without
    updates, and fields no update targets, keep every value."""
    shape = SHAPES[ndim][3]
    tables = Tables(3, [[(1, [])], [], [(2, [monomial(0.5, [1, 0, 1])])]])
    check(random_fields(rng, shape, 3), tables, 2, "reflect")


# ---------------------------------------------------------------------------
# Schemes users write

@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_leapfrog_wave(ndim, mode, rng):
    """u <- 2u - u_prev + c * C * L(u), u_prev <- u (a copy), with and
    without a parameter field c."""
    shape = SHAPES[ndim][3]
    c2 = 0.1
    lap = laplacian(ndim)
    for param in (-1, 0):
        tables = Tables(2, [[(0, [monomial(2.0, [1, 0]),
                                  monomial(-1.0, [0, 1]),
                                  stencil_term(c2, 0, 0, param)]),
                             (1, [monomial(1.0, [1, 0])])]])
        fields = [rng.uniform(-1, 1, shape) * 0.1 for _ in range(2)]
        check(fields, tables, 7, mode, cval=0.01,
              params=[rng.uniform(0.5, 1.0, shape)], stencils=[lap],
              ctx=dict(param=param))


@pytest.mark.parametrize("ndim", [2, 3])
def test_gray_scott(ndim, rng):
    """u <- u + dt (Du L(u) - u v^2 + F (1 - u)),
    v <- v + dt (Dv L(v) + u v^2 - (F + k) v), both reading the old u, v."""
    shape = SHAPES[ndim][3]
    dt, du, dv, f, kk = 1.0, 0.16, 0.08, 0.035, 0.06
    lap = laplacian(ndim)
    tables = Tables(2, [[
        (0, [monomial(1.0, [1, 0]), stencil_term(dt * du, 0, 0),
             monomial(-dt, [1, 2]), monomial(dt * f, [0, 0]),
             monomial(-dt * f, [1, 0])]),
        (1, [monomial(1.0, [0, 1]), stencil_term(dt * dv, 1, 0),
             monomial(dt, [1, 2]), monomial(-dt * (f + kk), [0, 1])])]])
    fields = [rng.uniform(0.5, 1.0, shape), rng.uniform(0.0, 0.3, shape)]
    for mode in ("wrap", "nearest"):
        check(fields, tables, 7, mode, stencils=[lap])


def test_maxwell_yee_2d(rng):
    """TE Maxwell on a Yee grid, as two stages (H from E, then E from the
    new H), with one-sided difference stencils: three fields."""
    shape = (31, 37)
    dx = np.array([[0.0, -1.0, 1.0]])        # forward difference in x
    dy = dx.T.copy()                          # forward difference in y
    bx = np.array([[-1.0, 1.0, 0.0]])        # backward difference in x
    by = bx.T.copy()
    c = 0.4
    # fields: ez, hx, hy
    tables = Tables(3, [
        [(1, [monomial(1.0, [0, 1, 0]), stencil_term(-c, 0, 1)]),
         (2, [monomial(1.0, [0, 0, 1]), stencil_term(c, 0, 0)])],
        [(0, [monomial(1.0, [1, 0, 0]), stencil_term(c, 2, 2),
              stencil_term(-c, 1, 3)])]])
    for mode in MODES:
        check(random_fields(rng, shape, 3), tables, 7, mode,
              stencils=[dx, dy, bx, by])


# ---------------------------------------------------------------------------
# Random schemes: every mode, 1D to 3D, K = 1 to 4, several stages

@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("ndim", [1, 2, 3])
@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_random_schemes(k, ndim, mode, rng):
    for shape in SHAPES[ndim]:
        tiny = max(shape) <= 3
        p = int(rng.integers(0, 3))
        s = int(rng.integers(1, 4))
        stencils = [random_stencil(rng, ndim, 3 if tiny else 2)
                    for _ in range(s)]
        tables = random_scheme(rng, k, p, s, int(rng.integers(1, 4)))
        fields = random_fields(rng, shape, k)
        params = random_fields(rng, shape, p)
        cval = rng.uniform(-1, 1)
        for steps in ((0, 1, 7) if np.prod(shape) < 10 ** 5 else (1, 3)):
            check(fields, tables, steps, mode, cval, params, stencils,
                  ctx=dict(k=k, p=p, s=s))


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_tiny_grids_wide_stencils(ndim, mode, rng):
    """1, 2 and 3 points per axis with radius 1 to 3 stencils: halos wider
    than the grid, read through the mode's repeated reflections."""
    for _ in range(6):
        shape = tuple(int(n) for n in rng.integers(1, 4, ndim))
        radius = int(rng.integers(1, 4))
        stencils = [random_stencil(rng, ndim, radius, zeros=0.1),
                    np.full((2 * radius + 1,) * ndim,
                            1.0 / (2 * radius + 1) ** ndim)]
        tables = Tables(2, [[(0, [stencil_term(0.5, 0, 0),
                                  stencil_term(0.5, 1, 1)]),
                             (1, [stencil_term(1.0, 0, 1)])]])
        for steps in (1, 7):
            check(random_fields(rng, shape, 2), tables, steps, mode,
                  cval=0.75, stencils=stencils,
                  ctx=dict(radius=radius))


def test_steps_zero_copies(rng):
    fields = random_fields(rng, (5, 6), 2)
    tables = Tables(2, [[(0, [monomial(3.0, [1, 1])])]])
    out, info = run(fields, tables, 0, "wrap")
    for got, want in zip(out, fields):
        np.testing.assert_array_equal(got, want)
    assert info["unfused_steps"] == 0


@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_threads_agree(ndim, rng):
    """One thread and two give the same bits (grids large enough that the
    engine uses both)."""
    shape = SHAPES[ndim][-1]
    stencils = [random_stencil(rng, ndim, 2) for _ in range(2)]
    tables = random_scheme(rng, 3, 1, 2, 2)
    fields = random_fields(rng, shape, 3)
    params = random_fields(rng, shape, 1)
    one, info1 = run(fields, tables, 3, "mirror", 0.0, params, stencils,
                     threads=1)
    two, info2 = run(fields, tables, 3, "mirror", 0.0, params, stencils,
                     threads=2)
    assert info1["threads"] == 1
    assert info2["threads"] in (1, 2)
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("mode", list(MODES))
def test_rows_split_among_threads(mode, rng):
    """Grids of few long rows: the threads share pieces of each row, and
    every halo copy of a cell is written by the thread that writes it."""
    for ndim, shape in ((1, (100000,)), (2, (3, 30000)), (3, (2, 2, 20000))):
        stencils = [random_stencil(rng, ndim, 2, zeros=0.1)]
        tables = random_scheme(rng, 2, 1, 1, 2)
        fields = random_fields(rng, shape, 2)
        params = random_fields(rng, shape, 1)
        check(fields, tables, 3, mode, 0.5, params, stencils, threads=2,
              ctx=dict(ndim=ndim))


# ---------------------------------------------------------------------------
# Aliasing between ins and outs

def aliasing_case(rng, shape=(23, 29)):
    stencils = [random_stencil(rng, 2, 1, zeros=0.0)]
    tables = Tables(2, [[(0, [monomial(0.5, [1, 1]),
                              stencil_term(0.5, 1, 0)]),
                         (1, [stencil_term(1.0, 0, 0)])]])
    return stencils, tables, random_fields(rng, shape, 2)


@pytest.mark.parametrize("mode", list(MODES))
def test_in_place(mode, rng):
    stencils, tables, fields = aliasing_case(rng)
    want = reference(fields, (), stencils, tables, 7, mode, 0.5)
    _, info = run(fields, tables, 7, mode, 0.5, stencils=stencils,
                  out=fields)
    for got, ref in zip(fields, want):
        assert_close(got, ref)


def test_swapped(rng):
    """out[0] is in[1] and out[1] is in[0]."""
    stencils, tables, fields = aliasing_case(rng)
    want = reference(fields, (), stencils, tables, 3, "wrap", 0.0)
    run(fields, tables, 3, "wrap", stencils=stencils,
        out=(fields[1], fields[0]))
    assert_close(fields[1], want[0])
    assert_close(fields[0], want[1])


def test_swapped_steps_zero(rng):
    stencils, tables, fields = aliasing_case(rng)
    want = [f.copy() for f in fields]
    run(fields, tables, 0, "wrap", stencils=stencils,
        out=(fields[1], fields[0]))
    np.testing.assert_array_equal(fields[1], want[0])
    np.testing.assert_array_equal(fields[0], want[1])


def test_overlapping_views(rng):
    """An out that overlaps an in without being it (views of one buffer
    shifted by a row), and a parameter field that is an out."""
    base = rng.uniform(-1, 1, (41, 17))
    u, v = base[:20], base[20:40]
    w_in = base[1:21]
    stencils, tables, _ = aliasing_case(rng)
    fields = [w_in.copy(), v.copy()]
    want = reference(fields, (), stencils, tables, 3, "nearest", 0.0)
    run((w_in, v), tables, 3, "nearest", stencils=stencils, out=(u, v))
    assert_close(u, want[0])
    assert_close(v, want[1])

    # a parameter field that is also an out: read as it was
    c = rng.uniform(0, 1, (9, 8))
    f = rng.uniform(-1, 1, (9, 8))
    tables = Tables(1, [[(0, [monomial(0.5, [1], param=0)])]])
    want = reference([f], [c], (), tables, 2, "wrap", 0.0)
    run([f], tables, 2, "wrap", params=[c], out=[c])
    assert_close(c, want[0])


# ---------------------------------------------------------------------------
# NaN and infinities

def with_nonfinite(rng, shape):
    g = rng.uniform(-1, 1, shape)
    flat = g.reshape(-1)
    at = rng.permutation(flat.size)[:3]
    flat[at[0]] = np.nan
    if flat.size > 1:
        flat[at[1]] = np.inf
    if flat.size > 2:
        flat[at[2]] = -np.inf
    return g


def assert_same_nonfinite(got, want, ctx):
    for name, test in (("NaN", np.isnan), ("+Inf", np.isposinf),
                       ("-Inf", np.isneginf)):
        g, w = test(got), test(want)
        assert np.array_equal(g, w), (
            "%s masks differ: %d cells here, %d in the reference [%s]"
            % (name, g.sum(), w.sum(), ctx))
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-12,
                               atol=1e-300, err_msg=str(ctx))


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_nonfinite_placement(ndim, mode, rng):
    """NaN and infinities in fields and parameter fields, stencils with
    zero weights (skipped: they spread nothing), powers 0 (NaN ** 0 is
    1), a zero coefficient (0 * NaN is NaN)."""
    shape = {1: (40,), 2: (13, 17), 3: (6, 7, 9)}[ndim]
    for trial in range(3):
        stencils = [random_stencil(rng, ndim, 2, zeros=0.5)
                    for _ in range(2)]
        tables = random_scheme(rng, 3, 1, 2, 2)
        fields = [with_nonfinite(rng, shape) for _ in range(3)]
        params = [with_nonfinite(rng, shape)]
        for steps in (1, 2):
            out, _ = run(fields, tables, steps, mode, 0.25, params,
                         stencils)
            want = reference(fields, params, stencils, tables, steps, mode,
                             0.25)
            for k in range(3):
                assert_same_nonfinite(out[k], want[k],
                                      dict(trial=trial, steps=steps,
                                           field=k))
    # zero coefficient, zero weights beside a NaN, NaN ** 0
    u = rng.uniform(-1, 1, shape)
    u.reshape(-1)[u.size // 2] = np.nan
    w = np.zeros((3,) * ndim)
    w[(1,) * ndim] = 1.0                      # the centre only
    tables = Tables(2, [[(1, [stencil_term(1.0, 0, 0),
                              monomial(0.5, [0, 0]),
                              monomial(0.25, [0, 1])]),
                         (0, [stencil_term(0.0, 0, 0)])]])
    fields = [u, rng.uniform(-1, 1, shape)]
    out, _ = run(fields, tables, 1, mode, 0.0, stencils=[w])
    want = reference(fields, (), [w], tables, 1, mode, 0.0)
    assert np.isnan(out[0]).sum() == 1 and np.isnan(out[1]).sum() == 1
    for k in range(2):
        assert_same_nonfinite(out[k], want[k], dict(case="zeros", field=k))


def test_nan_cval(rng):
    w = laplacian(2) * 0.1
    tables = Tables(1, [[(0, [stencil_term(1.0, 0, 0)])]])
    fields = random_fields(rng, (9, 11), 1)
    out, _ = run(fields, tables, 3, "constant", np.nan, stencils=[w])
    want = reference(fields, (), [w], tables, 3, "constant", np.nan)
    assert_same_nonfinite(out[0], want[0], {})


# ---------------------------------------------------------------------------
# Interruption and progress

def long_run_args(rng):
    stencils = [laplacian(2) * 0.1]
    tables = Tables(1, [[(0, [stencil_term(1.0, 0, 0)])]])
    return [rng.uniform(-1, 1, (64, 64))], tables, stencils


def test_progress_is_called_and_may_stop_the_run(rng):
    fields, tables, stencils = long_run_args(rng)
    kept = fields[0].copy()
    seen = []

    def progress(done):
        seen.append(done)
        if len(seen) == 2:
            raise ZeroDivisionError("stop here")

    out = (np.full(kept.shape, 7.25),)
    with pytest.raises(ZeroDivisionError, match="stop here"):
        run(fields, tables, 10 ** 12, "wrap", stencils=stencils, out=out,
            progress=progress)
    assert len(seen) == 2 and 0 < seen[0] <= seen[1]
    np.testing.assert_array_equal(fields[0], kept)
    np.testing.assert_array_equal(out[0], 7.25)   # never written


def test_ctrl_c_interrupts(rng):
    fields, tables, stencils = long_run_args(rng)
    kept = fields[0].copy()
    timer = threading.Timer(0.3, _thread.interrupt_main)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            run(fields, tables, 10 ** 12, "wrap", stencils=stencils,
                out=fields, interruptible=True)
    finally:
        timer.cancel()
    np.testing.assert_array_equal(fields[0], kept)
    # still sound afterwards
    check(fields, tables, 2, "wrap", stencils=stencils)


# ---------------------------------------------------------------------------
# Bad calls: TypeError or ValueError, never a crash

ARGS = ("fields_in", "fields_out", "params", "stencils", "coefs", "terms",
        "updates", "stages", "steps", "mode", "cval", "backend", "threads",
        "interruptible", "progress")


def good_call():
    """Valid arguments (a fresh copy each time): two 2D fields, one
    parameter field, one stencil, two stages."""
    shape = (6, 7)
    u = np.linspace(-1, 1, 42).reshape(shape)
    v = u[::-1].copy()
    tables = Tables(2, [[(0, [monomial(0.5, [1, 1], param=0),
                              stencil_term(0.5, 1, 0)])],
                        [(1, [monomial(1.0, [1, 0])])]])
    return dict(fields_in=(u, v), fields_out=(np.zeros(shape),
                                              np.zeros(shape)),
                params=(np.ones(shape),), stencils=(laplacian(2) / 8,),
                coefs=tables.coefs, terms=tables.terms,
                updates=tables.updates, stages=tables.stages, steps=2,
                mode=_core.MODE_WRAP, cval=0.0, backend=_core.BACKEND_CPU,
                threads=0, interruptible=False, progress=None)


def table_with(name, row, col, value):
    def change(old):
        new = old.copy()
        new[row, col] = value
        return new
    return {name: change}


def strided(a):
    buf = np.empty(a.shape[:-1] + (2 * a.shape[-1],))
    view = buf[..., ::2]
    view[...] = a
    return view


def misaligned(a):
    raw = bytearray(a.nbytes + 1)
    view = np.frombuffer(raw, dtype=a.dtype, count=a.size,
                         offset=1).reshape(a.shape)
    view[...] = a
    return view


def read_only(a):
    a = a.copy()
    a.setflags(write=False)
    return a


def overlapping(shape):
    """Two arrays of `shape`, views of one buffer that share a row."""
    size = int(np.prod(shape))
    base = np.zeros(2 * size - shape[-1])
    return (base[:size].reshape(shape),
            base[size - shape[-1]:].reshape(shape))


def first(make):
    """Apply make to the first array of a tuple argument."""
    return lambda t: (make(t[0]),) + tuple(t[1:])


def replace(value):
    return lambda old: value


BAD_CALLS = [
    # arrays
    ("in-list", {"fields_in": lambda t: list(t)}, TypeError, "tuple"),
    ("in-float32", {"fields_in": first(lambda a: a.astype(np.float32))},
     TypeError, "float64"),
    ("in-big-endian", {"fields_in": first(lambda a: a.astype(">f8"))},
     TypeError, "native byte order"),
    ("in-strided", {"fields_in": first(strided)}, TypeError,
     "C-contiguous"),
    ("in-fortran", {"fields_in": first(np.asfortranarray)}, TypeError,
     "C-contiguous"),
    ("in-misaligned", {"fields_in": first(misaligned)}, TypeError,
     "aligned"),
    ("in-not-array", {"fields_in": first(lambda a: a.tolist())}, TypeError,
     "float64"),
    ("in-none", {"fields_in": first(lambda a: None)}, TypeError,
     "float64"),
    ("out-float32", {"fields_out": first(lambda a: a.astype(np.float32))},
     TypeError, "float64"),
    ("out-read-only", {"fields_out": first(read_only)}, ValueError,
     "read-only"),
    ("outs-alias", {"fields_out": lambda t: (t[0], t[0])}, ValueError,
     "overlap"),
    ("outs-overlap", {"fields_out": lambda t: overlapping((6, 7))},
     ValueError, "overlap"),
    ("param-int", {"params": first(lambda a: a.astype(np.int64))},
     TypeError, "float64"),
    ("stencil-float32", {"stencils": first(lambda a: a.astype(np.float32))},
     TypeError, "float64"),
    # counts and shapes
    ("no-fields", {"fields_in": replace(()), "fields_out": replace(())},
     ValueError, "fields_in"),
    ("nine-fields", {"fields_in": lambda t: t * 5,
                     "fields_out": lambda t: t * 5}, ValueError,
     "fields_in"),
    ("outs-count", {"fields_out": lambda t: t[:1]}, ValueError,
     "fields_out"),
    ("nine-params", {"params": lambda t: t * 9}, ValueError, "params"),
    ("out-shape", {"fields_out": first(lambda a: np.zeros((7, 6)))},
     ValueError, "one shape"),
    ("in-shape", {"fields_in": lambda t: (t[0], t[1][:5])}, ValueError,
     "one shape"),
    ("param-shape", {"params": first(lambda a: np.ones((6, 8)))},
     ValueError, "one shape"),
    ("ndim-4", {"fields_in": lambda t: tuple(np.zeros((1, 1, 6, 7))
                                             for _ in t),
                "fields_out": lambda t: tuple(np.zeros((1, 1, 6, 7))
                                              for _ in t)},
     ValueError, "axes"),
    ("ndim-0", {"fields_in": lambda t: tuple(np.array(1.0) for _ in t),
                "fields_out": lambda t: tuple(np.array(1.0) for _ in t)},
     ValueError, "axes"),
    ("empty", {"fields_in": lambda t: tuple(np.zeros((6, 0)) for _ in t),
               "fields_out": lambda t: tuple(np.zeros((6, 0)) for _ in t),
               "params": lambda t: tuple(np.zeros((6, 0)) for _ in t)},
     ValueError, "empty"),
    ("stencil-ndim", {"stencils": first(lambda a: np.ones(3))},
     ValueError, "axes"),
    ("stencil-even", {"stencils": first(lambda a: np.ones((3, 2)))},
     ValueError, "odd"),
    ("stencil-empty", {"stencils": first(lambda a: np.ones((3, 0)))},
     ValueError, "odd"),
    ("stencil-nan", {"stencils": first(lambda a: a * np.nan)}, ValueError,
     "finite"),
    # tables
    ("coefs-length", {"coefs": lambda a: a[:-1]}, ValueError, "shapes"),
    ("coefs-2d", {"coefs": lambda a: a[None]}, ValueError, "axes"),
    ("coefs-int", {"coefs": lambda a: a.astype(np.int32)}, TypeError,
     "float64"),
    ("terms-int64", {"terms": lambda a: a.astype(np.int64)}, TypeError,
     "int32"),
    ("terms-float", {"terms": lambda a: a.astype(np.float64)}, TypeError,
     "int32"),
    ("terms-columns", {"terms": lambda a: a[:, :-1].copy()}, ValueError,
     "shapes"),
    ("terms-1d", {"terms": lambda a: a.reshape(-1)}, ValueError, "axes"),
    ("terms-strided", {"terms": lambda a: np.repeat(a, 2, axis=0)[::2]},
     TypeError, "C-contiguous"),
    ("updates-columns", {"updates": lambda a: a[:, :2].copy()}, ValueError,
     "shapes"),
    ("stages-columns", {"stages": lambda a: np.zeros((2, 3), np.int32)},
     ValueError, "shapes"),
    ("no-stages", {"stages": lambda a: a[:0]}, ValueError, "stage"),
    ("kind", table_with("terms", 0, 0, 2), ValueError, "kind"),
    ("kind-negative", table_with("terms", 0, 0, -1), ValueError, "kind"),
    ("param-range", table_with("terms", 0, 1, 1), ValueError, "param"),
    ("param-negative", table_with("terms", 0, 1, -2), ValueError, "param"),
    ("field-range", table_with("terms", 1, 2, 2), ValueError, "field"),
    ("field-negative", table_with("terms", 1, 2, -1), ValueError, "field"),
    ("stencil-range", table_with("terms", 1, 3, 1), ValueError, "stencil"),
    ("stencil-negative", table_with("terms", 1, 3, -1), ValueError,
     "stencil"),
    ("power-5", table_with("terms", 0, 4, 5), ValueError, "power"),
    ("power-negative", table_with("terms", 0, 5, -1), ValueError, "power"),
    ("power-huge", table_with("terms", 0, 5, 2 ** 31 - 1), ValueError,
     "power"),
    ("power-of-stencil", table_with("terms", 1, 4, 1), ValueError,
     "power"),
    ("monomial-field", table_with("terms", 0, 2, 0), ValueError, "-1"),
    ("target-range", table_with("updates", 0, 0, 2), ValueError, "target"),
    ("target-negative", table_with("updates", 0, 0, -1), ValueError,
     "target"),
    ("first-term", table_with("updates", 1, 1, 3), ValueError, "terms"),
    ("first-term-negative", table_with("updates", 0, 1, -1), ValueError,
     "terms"),
    ("term-count", table_with("updates", 0, 2, 4), ValueError, "terms"),
    ("term-count-negative", table_with("updates", 0, 2, -1), ValueError,
     "terms"),
    ("term-count-huge", table_with("updates", 1, 2, 2 ** 31 - 1),
     ValueError, "terms"),
    ("first-update", table_with("stages", 1, 0, 2), ValueError, "updates"),
    ("update-count", table_with("stages", 0, 1, 3), ValueError, "updates"),
    ("update-count-negative", table_with("stages", 0, 1, -1), ValueError,
     "updates"),
    ("same-target", {"updates": lambda a: np.array([[0, 0, 2], [0, 2, 1]],
                                                   np.int32),
                     "stages": lambda a: np.array([[0, 2]], np.int32)},
     ValueError, "two updates"),
    # numbers and codes
    ("steps-negative", {"steps": replace(-1)}, ValueError, "steps"),
    ("mode-negative", {"mode": replace(-1)}, ValueError, "mode"),
    ("mode-past-last", {"mode": replace(_core.MODE_MIRROR + 1)},
     ValueError, "mode"),
    ("backend-unknown", {"backend": replace(99)}, ValueError, "backend"),
    ("backend-cuda", {"backend": replace(_core.BACKEND_CUDA)},
     RuntimeError, "not run schemes yet"),
    ("backend-cpu-tc", {"backend": replace(_core.BACKEND_CPU_TC)},
     RuntimeError, "not run schemes yet"),
    ("steps-float", {"steps": replace(1.5)}, TypeError, "integer"),
    ("cval-str", {"cval": replace("0")}, TypeError, "real number"),
]


def build(changes):
    args = good_call()
    for name, make in changes.items():
        args[name] = make(args[name])
    return tuple(args[name] for name in ARGS)


def flat_arrays(args):
    out = []
    for a in args:
        if isinstance(a, tuple):
            out.extend(x for x in a if isinstance(x, np.ndarray))
        elif isinstance(a, np.ndarray):
            out.append(a)
    return out


def test_good_call_runs():
    args = build({})
    info = _core.run_scheme(*args)
    assert info["backend"] == "cpu"
    assert info["path"] in PLANS[os.environ["CONVSTENCIL_CPU_SCHEME_BLOCK"]]


@pytest.mark.parametrize("changes, exc, fragment",
                         [pytest.param(c, e, f, id=i)
                          for i, c, e, f in BAD_CALLS])
def test_bad_calls(changes, exc, fragment):
    args = build(changes)
    arrays = flat_arrays(args)
    before = [np.array(a, copy=True) for a in arrays]
    refs = [sys.getrefcount(a) for a in arrays]
    with pytest.raises(exc) as info:
        _core.run_scheme(*args)
    if fragment is not None:
        assert fragment in str(info.value), str(info.value)
    del info
    assert [sys.getrefcount(a) for a in arrays] == refs
    for a, b in zip(arrays, before):
        if a.dtype != object:
            np.testing.assert_array_equal(a, b, "a failing call wrote")


def test_argument_count():
    args = build({})
    for count in (0, len(args) - 1, len(args) + 1):
        with pytest.raises(TypeError):
            _core.run_scheme(*(args + (None,))[:count])


@pytest.mark.parametrize("changes, exc", [
    pytest.param(c, e, id=i) for i, c, e, _ in BAD_CALLS
    if i in ("in-float32", "stencil-nan", "kind", "same-target",
             "out-read-only", "backend-cuda", "nine-params")] + [
    pytest.param({}, (), id="success")])
def test_no_leaks(changes, exc):
    """Reference counts and traced memory after many calls, failing and
    succeeding."""
    args = build(changes)
    arrays = flat_arrays(args)
    refs = [sys.getrefcount(a) for a in arrays]

    def calls(n):
        for _ in range(n):
            try:
                _core.run_scheme(*args)
            except exc:
                pass
    tracemalloc.start()
    try:
        calls(20)
        gc.collect()
        before = tracemalloc.take_snapshot()
        calls(300)
        gc.collect()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    growth = sum(s.size_diff for s in after.compare_to(before, "lineno"))
    assert growth < 32 * 1024, growth
    assert [sys.getrefcount(a) for a in arrays] == refs
