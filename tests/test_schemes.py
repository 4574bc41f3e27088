"""Schemes (convstencil.Scheme): the expression algebra, its errors, and
apply() on schemes against the plain reference loop
(reference.scheme_apply: SciPy correlate per stencil term, NumPy for the
monomials and coefficients), on random grids, weights and coefficients.
"""
import numpy as np
import pytest

import convstencil as cs
import reference
from conftest import assert_close

MODES = ["constant", "wrap", "nearest", "reflect", "mirror"]
SCHEME_BACKENDS = ["cpu"]


def random_stencil(rng, ndim, radius=1):
    shape = tuple(2 * rng.integers(0, radius + 1) + 1 for _ in range(ndim))
    if max(shape) == 1:
        shape = (3,) * ndim
    return cs.Stencil(weights=rng.uniform(-0.5, 0.5, shape))


def random_grids(rng, shape, k):
    return tuple(rng.uniform(0.5, 1.5, shape) for _ in range(k))


def check_scheme(rng, scheme, grids, steps, params=None, backend="cpu",
                 **kw):
    before = [g.copy() for g in grids]
    out = cs.apply(grids, scheme, steps=steps, params=params,
                   backend=backend, **kw)
    ref = reference.scheme_apply(grids, scheme, steps, params,
                                 kw.get("mode"), kw.get("cval"))
    assert isinstance(out, tuple) and len(out) == len(scheme.fields)
    for f, o, r in zip(scheme.fields, out, ref):
        assert o.dtype == np.float64 and o.shape == r.shape
        assert_close(o, r, dict(field=f.name, scheme=repr(scheme),
                                steps=steps, seed=rng.seed, **kw))
    for g, b in zip(grids, before):
        np.testing.assert_array_equal(g, b)  # inputs never modified
    return out


# ---------------------------------------------------------------------------
# the algebra

def test_fields_and_params():
    u, v = cs.fields("u v")
    assert (u.name, v.name) == ("u", "v") and u is not v
    w = cs.fields("w")
    assert isinstance(w, cs.Field)
    assert cs.fields("a, b,c")[2].name == "c"
    c = cs.param("c")
    assert isinstance(c, cs.Param) and c == cs.param("c")
    with pytest.raises(ValueError, match="identifiers"):
        cs.fields("u 2v")
    with pytest.raises(TypeError, match="one string"):
        cs.fields(["u", "v"])
    with pytest.raises(ValueError, match="at least one"):
        cs.fields("  ")


def test_scheme_fields_in_order_of_first_key_then_read_only():
    a, b, c, d = cs.fields("a b c d")
    L = cs.laplacian(1)
    s = cs.Scheme([{b: b + L(d)}, {a: a * b, b: c}])
    assert s.fields == (b, a, d, c)
    assert s.ndim == 1 and s.radius == (1,)


def test_expansion_merges_like_terms_in_order():
    u, v = cs.fields("u v")
    L = cs.laplacian(2)
    s = cs.Scheme({u: u + 0.5 * (L(u) - u * v ** 2 + 2 * (1 - u)),
                   v: (u + v) ** 2})
    (stage,) = s.updates()
    (_, tu), (_, tv) = stage
    # u's own coefficient, 1 - 0.5 * 2, is 0: the term is gone
    assert [t.coef for t in tu] == [0.5, -0.5, 1.0]
    assert [t.powers for t in tu if t.stencil is None] == [(1, 2), (0, 0)]
    # (u + v)**2 = u^2 + 2uv + v^2
    assert sorted((t.powers, t.coef) for t in tv) == [
        ((0, 2), 1.0), ((1, 1), 2.0), ((2, 0), 1.0)]


def test_linear_combination_inside_a_stencil_expands():
    u, v = cs.fields("u v")
    L = cs.laplacian(2)
    s = cs.Scheme({u: L(2 * u - v)})
    (stage,) = s.updates()
    terms = stage[0][1]
    assert [(t.field, t.coef) for t in terms] == [(0, 2.0), (1, -1.0)]


@pytest.mark.parametrize("make, error, words", [
    (lambda u, v, c, L: u / v, TypeError, "denominator"),
    (lambda u, v, c, L: 1 / u, TypeError, "denominator"),
    (lambda u, v, c, L: u / c, TypeError, "denominator"),
    (lambda u, v, c, L: u ** -1, TypeError, "negative power"),
    (lambda u, v, c, L: u ** 5, ValueError, "above 4"),
    (lambda u, v, c, L: u ** 3 * v * u ** 2, ValueError, "above 4"),
    (lambda u, v, c, L: u ** 0.5, TypeError, "integers"),
    (lambda u, v, c, L: 2 ** u, TypeError, "exponent"),
    (lambda u, v, c, L: L(u * v), TypeError, "one field"),
    (lambda u, v, c, L: L(c), TypeError, "one field"),
    (lambda u, v, c, L: L(u + 1), TypeError, "one field"),
    (lambda u, v, c, L: L(u) * v, TypeError, "stencil term times a field"),
    (lambda u, v, c, L: L(u) * L(v), TypeError, "two stencil terms"),
    (lambda u, v, c, L: c * c * u, TypeError, "one parameter field"),
    (lambda u, v, c, L: u + "x", TypeError, "str"),
    (lambda u, v, c, L: u * float("nan"), ValueError, "finite"),
    (lambda u, v, c, L: u / 0, ZeroDivisionError, "by 0"),
])
def test_malformed_expressions_name_the_part(make, error, words):
    u, v = cs.fields("u v")
    c = cs.param("c")
    with pytest.raises(error, match=words):
        make(u, v, c, cs.laplacian(2))


def test_malformed_schemes():
    u, v = cs.fields("u v")
    with pytest.raises(TypeError, match="dict"):
        cs.Scheme(u + v)
    with pytest.raises(ValueError, match="at least one stage"):
        cs.Scheme([])
    with pytest.raises(ValueError, match="updates no field"):
        cs.Scheme([{u: v}, {}])
    with pytest.raises(TypeError, match="keys must be fields"):
        cs.Scheme({"u": v})
    with pytest.raises(TypeError, match="update of u"):
        cs.Scheme({u: "v"})
    with pytest.raises(ValueError, match="one number of dimensions"):
        cs.Scheme({u: cs.laplacian(2)(u) + cs.laplacian(1)(v)})
    with pytest.raises(ValueError, match="unknown mode"):
        cs.Scheme({u: v}, mode="periodicc")
    other_u = cs.fields("u")
    with pytest.raises(ValueError, match="named 'u'"):
        cs.Scheme({u: other_u})
    with pytest.raises(ValueError, match="both a field and a parameter"):
        cs.Scheme({u: cs.param("u") * v})
    many = cs.fields(" ".join("f%d" % i for i in range(9)))
    with pytest.raises(ValueError, match="at most 8 fields"):
        cs.Scheme({f: f for f in many})
    with pytest.raises(TypeError, match="truth value"):
        bool(u + v)


def test_print_shows_the_terms():
    u, v = cs.fields("u v")
    c = cs.param("c")
    s = cs.Scheme([{u: u + c * cs.laplacian(2)(v) - 0.5 * u * v ** 2},
                   {v: v + 1}], mode="wrap")
    text = str(s)
    assert "u <- u + c*S3x3(v) - 0.5*u*v**2" in text
    assert "v <- v + 1.0" in text and "stage 2" in text
    assert "parameter fields c" in text and "'wrap'" in text
    assert "S3x3 = Stencil(weights=<3x3 float64>)" in text
    assert "2 stages" in repr(s) and "parameters c" in repr(s)


def test_laplacian():
    np.testing.assert_array_equal(cs.laplacian(1).weights, [1, -2, 1])
    w = cs.laplacian(3, h=0.5).weights
    assert w.shape == (3, 3, 3) and w[1, 1, 1] == -24 and w[0, 1, 1] == 4
    assert w.sum() == 0
    with pytest.raises(ValueError, match="ndim"):
        cs.laplacian(4)
    with pytest.raises(ValueError, match="h > 0"):
        cs.laplacian(2, h=0)


# ---------------------------------------------------------------------------
# runs against the reference loop

SHAPES = {1: [(1,), (2,), (3,), (17,), (64,)],
          2: [(1, 1), (2, 3), (5, 4), (17, 13), (40, 33)],
          3: [(1, 2, 3), (3, 3, 3), (9, 7, 5), (12, 10, 11)]}


def gray_scott(ndim, mode="wrap"):
    u, v = cs.fields("u v")
    L = cs.laplacian(ndim)
    dt, du, dv, f, k = 1.0, 0.16, 0.08, 0.035, 0.065
    return cs.Scheme({u: u + dt * (du * L(u) - u * v ** 2 + f * (1 - u)),
                      v: v + dt * (dv * L(v) + u * v ** 2 - (f + k) * v)},
                     mode=mode)


def wave(ndim, velocity=False, mode="constant"):
    u, up = cs.fields("u up")
    L = cs.laplacian(ndim)
    coef = cs.param("c2") if velocity else 0.1
    return cs.Scheme({u: 2 * u - up + coef * L(u), up: u}, mode=mode)


@pytest.mark.parametrize("backend", SCHEME_BACKENDS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_gray_scott_and_wave_every_mode(rng, backend, mode, ndim):
    for shape in SHAPES[ndim]:
        grids = random_grids(rng, shape, 2)
        check_scheme(rng, gray_scott(ndim), grids, 5, backend=backend,
                     mode=mode)
        c2 = rng.uniform(0.0, 0.2, shape)
        check_scheme(rng, wave(ndim, velocity=True), grids, 7,
                     params={"c2": c2}, backend=backend, mode=mode,
                     cval=0.3)


def random_scheme(rng, k, ndim, stages, params):
    fs = cs.fields(" ".join("f%d" % i for i in range(k)))
    fs = fs if isinstance(fs, tuple) else (fs,)
    ps = [cs.param("p%d" % i) for i in range(params)]
    result = []
    for _ in range(stages):
        targets = rng.choice(k, size=rng.integers(1, k + 1), replace=False)
        stage = {}
        for t in targets:
            expr = 0.5 * fs[t]
            for _ in range(rng.integers(1, 4)):
                kind = rng.integers(0, 3)
                coef = float(rng.uniform(-0.3, 0.3))
                if ps and rng.integers(0, 2):
                    coef = coef * ps[rng.integers(0, len(ps))]
                if kind == 0:
                    s = random_stencil(rng, ndim, radius=2)
                    expr = expr + coef * s(fs[rng.integers(0, k)])
                elif kind == 1:
                    mono = 1
                    for f in rng.choice(k, size=rng.integers(1, 3)):
                        mono = mono * fs[f] ** int(rng.integers(1, 3))
                    expr = expr + coef * mono
                else:
                    expr = expr + coef  # a source (a number or a parameter)
            stage[fs[t]] = expr
        result.append(stage)
    return cs.Scheme(result)


@pytest.mark.parametrize("k", [1, 2, 3, 4])
@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_random_schemes(rng, k, ndim):
    for trial in range(3):
        stages = int(rng.integers(1, 4))
        scheme = random_scheme(rng, k, ndim, stages, int(rng.integers(0, 3)))
        shape = SHAPES[ndim][int(rng.integers(0, len(SHAPES[ndim])))]
        grids = random_grids(rng, shape, len(scheme.fields))
        params = {p: rng.uniform(-1, 1, shape) for p in scheme.params}
        mode = MODES[int(rng.integers(0, len(MODES)))]
        for steps in (0, 1, 4):
            check_scheme(rng, scheme, grids, steps, params, mode=mode,
                         cval=float(rng.uniform(-1, 1)))


def test_each_term_kind_alone(rng):
    u, v = cs.fields("u v")
    s = random_stencil(rng, 2)
    c = cs.param("c")
    grids = random_grids(rng, (11, 9), 2)
    cases = [{u: s(v), v: v}, {u: u * v ** 3, v: v}, {u: 3.0, v: v},
             {u: c, v: v}, {u: c * s(u), v: v}, {u: c * u ** 2 * v, v: u},
             {u: 0 * v, v: v}]
    for updates in cases:
        scheme = cs.Scheme(updates, mode="reflect")
        params = {"c": rng.uniform(-1, 1, (11, 9))} if scheme.params else None
        check_scheme(rng, scheme, grids, 3, params)


def test_one_field_scheme_equals_apply(rng):
    u = cs.fields("u")
    for name in ("heat2d", "box2d9p", "box2d49p"):
        s = cs.Stencil(name)
        grid = rng.uniform(0, 1, (37, 29))
        for mode in MODES:
            expected = cs.apply(grid, s, steps=6, mode=mode, cval=0.25)
            got = cs.apply(grid, cs.Scheme({u: s(u)}, mode=mode, cval=0.25),
                           steps=6)
            assert_close(got, expected, {"case": "%s %s" % (name, mode)})
            (got1,) = cs.apply((grid,), cs.Scheme({u: s(u)}), steps=6,
                               mode=mode, cval=0.25)
            assert_close(got1, expected, {"case": "%s %s, tuple" % (name, mode)})


def test_stages_read_what_the_stage_before_wrote(rng):
    h, e = cs.fields("h e")
    c = cs.param("c")
    dx = cs.Stencil(weights=[0., -1., 1.])
    dxb = cs.Stencil(weights=[-1., 1., 0.])
    yee = cs.Scheme([{h: h + c * dx(e)}, {e: e + c * dxb(h)}])
    grids = random_grids(rng, (50,), 2)
    params = {"c": rng.uniform(0.1, 0.5, 50)}
    check_scheme(rng, yee, grids, 9, params)
    # by hand, one step: h from e, then e from the new h
    h0, e0 = grids
    h1 = h0 + params["c"] * (np.append(e0[1:], 0) - e0)
    e1 = e0 + params["c"] * (h1 - np.insert(h1[:-1], 0, 0))
    got = cs.apply(grids, yee, params=params)
    assert_close(got[0], h1, {"case": "h"})
    assert_close(got[1], e1, {"case": "e"})


def test_nonfinite_land_where_the_reference_puts_them(rng):
    u, v = cs.fields("u v")
    s = cs.Stencil(weights=np.array([[0, 1, 0], [1, -4, 1], [0, 0.5, 0]]))
    scheme = cs.Scheme({u: u + 0.1 * s(u) - u * v, v: v ** 2 * 0.5 + 0 * u})
    for mode in MODES:
        grids = random_grids(rng, (13, 12), 2)
        grids[0][3, 4] = np.nan
        grids[0][10, 1] = np.inf
        grids[1][6, 6] = -np.inf
        out = cs.apply(grids, scheme, steps=3, mode=mode)
        ref = reference.scheme_apply(grids, scheme, 3, mode=mode)
        for o, r in zip(out, ref):
            np.testing.assert_array_equal(np.isnan(o), np.isnan(r))
            np.testing.assert_array_equal(np.isposinf(o), np.isposinf(r))
            np.testing.assert_array_equal(np.isneginf(o), np.isneginf(r))
            fin = np.isfinite(r)
            assert_close(o[fin], r[fin], {"mode": mode})


# ---------------------------------------------------------------------------
# the call

def test_out_tuple_in_place_and_swapped(rng):
    scheme = gray_scott(2)
    grids = random_grids(rng, (20, 21), 2)
    ref = reference.scheme_apply(grids, scheme, 4)
    u, v = (g.copy() for g in grids)
    got = cs.apply((u, v), scheme, steps=4, out=(u, v))
    assert got[0] is u and got[1] is v
    assert_close(u, ref[0], {"case": "u in place"})
    assert_close(v, ref[1], {"case": "v in place"})
    u, v = (g.copy() for g in grids)
    cs.apply((u, v), scheme, steps=4, out=(v, u))
    assert_close(v, ref[0], {"case": "u into v"})
    assert_close(u, ref[1], {"case": "v into u"})


def test_every_callback_gets_the_tuple(rng):
    scheme = gray_scott(2)
    grids = tuple(0.4 * g for g in random_grids(rng, (16, 16), 2))
    seen = []

    def look(step, state):
        assert isinstance(state, tuple) and len(state) == 2
        assert not state[0].flags.writeable
        seen.append((step, state[0].copy(), state[1].copy()))

    out = cs.apply(grids, scheme, steps=10, every=4, callback=look)
    assert [s for s, _, _ in seen] == [4, 8]
    ref4 = reference.scheme_apply(grids, scheme, 4)
    assert_close(seen[0][1], ref4[0], {"case": "u at step 4"})
    assert_close(seen[0][2], ref4[1], {"case": "v at step 4"})
    ref = reference.scheme_apply(grids, scheme, 10)
    assert_close(out[0], ref[0], {"case": "u at 10"})


def test_a_raising_callback_leaves_the_grids(rng):
    scheme = gray_scott(2)
    u, v = random_grids(rng, (16, 16), 2)
    before = (u.copy(), v.copy())

    def stop(step, state):
        raise RuntimeError("stop")

    with pytest.raises(RuntimeError, match="stop"):
        cs.apply((u, v), scheme, steps=10, every=3, callback=stop,
                 out=(u, v))
    np.testing.assert_array_equal(u, before[0])
    np.testing.assert_array_equal(v, before[1])


def test_progress_and_last_run_info(rng, capsys):
    scheme = gray_scott(1)
    grids = random_grids(rng, (300,), 2)
    cs.apply(grids, scheme, steps=20, progress=True, backend="cpu")
    info = cs.last_run_info()
    assert info["scheme"] is True and info["fields"] == 2
    assert info["steps"] == 20 and info["mode"] == "wrap"
    assert info["backend"] == "cpu"


@pytest.mark.parametrize("call, error, words", [
    (lambda g, s: cs.apply(g[0], s), TypeError, "as a tuple"),
    (lambda g, s: cs.apply(g[:1], s), ValueError, "takes 2 grids"),
    (lambda g, s: cs.apply((g[0], g[1][:-1]), s), ValueError, "one shape"),
    (lambda g, s: cs.apply((g[0], g[1].astype(complex)), s), TypeError,
     "field v"),
    (lambda g, s: cs.apply(g, s, out=(g[0], g[0])), ValueError,
     "share memory"),
    (lambda g, s: cs.apply(g, s, out=(g[0],)), ValueError, "takes 2 out"),
    (lambda g, s: cs.apply(g, s, out=[np.empty((3, 3)), g[1]]), ValueError,
     "out for field u"),
    (lambda g, s: cs.apply(g, s, params={"c": 1}), ValueError,
     "unknown parameter"),
    (lambda g, s: cs.apply(g, s, weights=np.ones(3)), TypeError,
     "not both"),
    (lambda g, s: cs.apply(g, s, backend="cpu-tc"), ValueError,
     "single stencils"),
    (lambda g, s: cs.apply(g, s, stream=1), TypeError, "stream"),
    (lambda g, s: cs.apply(g[0], "heat2d", params={}), TypeError,
     "params"),
    (lambda g, s: cs.apply((g[0][0], g[1][0]), s), ValueError, "2D"),
])
def test_bad_calls(rng, call, error, words):
    grids = random_grids(rng, (8, 9), 2)
    before = [g.copy() for g in grids]
    with pytest.raises(error, match=words):
        call(grids, gray_scott(2))
    for g, b in zip(grids, before):
        np.testing.assert_array_equal(g, b)


def test_bad_params(rng):
    scheme = wave(2, velocity=True)
    grids = random_grids(rng, (8, 9), 2)
    with pytest.raises(ValueError, match="'c2' is missing"):
        cs.apply(grids, scheme)
    with pytest.raises(ValueError, match="grids' shape"):
        cs.apply(grids, scheme, params={"c2": np.ones((9, 8))})
    with pytest.raises(TypeError, match="real numbers"):
        cs.apply(grids, scheme, params={"c2": np.ones((8, 9), complex)})
    with pytest.raises(TypeError, match="dict"):
        cs.apply(grids, scheme, params=[np.ones((8, 9))])
    # any real dtype is taken as float64
    a = cs.apply(grids, scheme, params={"c2": np.zeros((8, 9), np.int32)})
    b = cs.apply(grids, scheme, params={"c2": np.zeros((8, 9))})
    np.testing.assert_array_equal(a[0], b[0])


def test_one_field_bare_array_in_and_out(rng):
    phi = cs.fields("phi")
    scheme = cs.Scheme({phi: phi + 0.1 * (cs.laplacian(2)(phi) + phi
                                          - phi ** 3)}, mode="wrap")
    grid = rng.uniform(-1, 1, (24, 20))
    seen = []
    out = cs.apply(grid, scheme, steps=6, every=3,
                   callback=lambda step, g: seen.append(g.copy()))
    assert isinstance(out, np.ndarray)
    (ref,) = reference.scheme_apply((grid,), scheme, 6)
    assert_close(out, ref, {"case": "allen-cahn"})
    assert len(seen) == 2 and isinstance(seen[0], np.ndarray)
    (ref3,) = reference.scheme_apply((grid,), scheme, 3)
    assert_close(seen[0], ref3, {"case": "at step 3"})
