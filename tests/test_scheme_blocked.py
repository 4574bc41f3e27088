"""The CPU engine's blocked passes of schemes (csrc/cpu/scheme_blocked.c):
several steps a pass over overlapped tiles, against the plain reference
loop (reference.scheme_apply), on random grids, weights, coefficients
and parameter fields.

CONVSTENCIL_CPU_SCHEME_BLOCK forces a plan: "TxC0xC1" runs passes of T
steps over C0 x C1 tiles along the grid's first two axes (C0 = 1 for 2D
grids), so that small grids cut into many tiny tiles take every path a
large grid takes: internal sides with margins, edge sides that apply the
mode at every stage, wrap's periodic margins, an axis left whole, a last
pass shallower than the rest, and the kept grids between passes.
"""
import numpy as np
import pytest

import convstencil as cs
import reference
from convstencil import _engine
from conftest import assert_close

from test_schemes import (MODES, gray_scott, random_grids, random_scheme,
                          wave)

BLOCK = "CONVSTENCIL_CPU_SCHEME_BLOCK"


def check_blocked(rng, scheme, grids, steps, params=None, **kw):
    """apply() on the blocked passes against the reference; every field,
    the inputs untouched, and the run's record says it was blocked."""
    before = [g.copy() for g in grids]
    out = cs.apply(grids, scheme, steps=steps, params=params, backend="cpu",
                   **kw)
    info = cs.last_run_info()
    ref = reference.scheme_apply(grids, scheme, steps, params,
                                 kw.get("mode"), kw.get("cval"))
    what = dict(scheme=repr(scheme), steps=steps, shape=grids[0].shape,
                seed=rng.seed, **kw)
    for f, o, r in zip(scheme.fields, out, ref):
        assert_close(o, r, dict(field=f.name, **what))
    for g, b in zip(grids, before):
        np.testing.assert_array_equal(g, b)
    if steps > 0:
        assert info["path"] == "scheme-blocked", what
    return out, info


def heat_with_source(ndim):
    """A source and a conductivity field: two parameter fields."""
    u = cs.fields("u")
    k, q = cs.param("k"), cs.param("q")
    return cs.Scheme({u: u + 0.1 * k * cs.laplacian(ndim)(u) + 0.01 * q})


def split_stages(ndim):
    """Two stages of different radii (a Yee-like pair plus a 5-wide x
    difference): each stage shrinks a tile by its own radius."""
    h, e = cs.fields("h e")
    c = cs.param("c")
    shape = (1,) * (ndim - 1)
    dx = cs.Stencil(weights=np.array([0., -1., 1.]).reshape(shape + (3,)))
    dyb = cs.Stencil(weights=np.array([-1., 1., 0.]).reshape((3,) + shape))
    wide = cs.Stencil(weights=np.full((5,) * ndim, 0.2 / 5 ** ndim))
    return cs.Scheme([{h: h + c * dx(e) + wide(h)},
                      {e: e + 0.5 * c * dyb(h) - 0.1 * e * h}])


# (plan, shape, steps): tiles of the smallest size the modes allow, one
# tile along an axis, uneven tiles, a last pass shallower than the rest
PLANS_2D = [("3x1x4", (26, 19), 7), ("2x1x7", (29, 8), 6),
            ("4x1x1", (12, 33), 9), ("1x1x3", (9, 5), 2),
            ("5x1x2", (17, 40), 5)]
PLANS_3D = [("2x3x2", (13, 11, 9), 5), ("3x1x4", (7, 17, 6), 4),
            ("2x4x1", (15, 6, 10), 3), ("2x2x3", (8, 9, 12), 6)]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("plan, shape, steps", PLANS_2D + PLANS_3D)
def test_presets_like_schemes_every_mode(rng, monkeypatch, mode, plan, shape,
                                         steps):
    monkeypatch.setenv(BLOCK, plan)
    ndim = len(shape)
    cval = float(rng.uniform(-1, 1))
    # small values: Gray-Scott with dt = 1 stays bounded for these steps
    grids = tuple(0.3 * g for g in random_grids(rng, shape, 2))
    check_blocked(rng, gray_scott(ndim), grids, steps, mode=mode, cval=cval)
    c2 = {"c2": rng.uniform(0.0, 0.2, shape)}
    check_blocked(rng, wave(ndim, velocity=True), grids, steps, c2,
                  mode=mode, cval=cval)
    params = {"k": rng.uniform(0.5, 1.0, shape),
              "q": rng.uniform(-1, 1, shape)}
    check_blocked(rng, heat_with_source(ndim), grids[:1], steps, params,
                  mode=mode, cval=cval)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("ndim", [2, 3])
def test_stages_of_different_radii(rng, monkeypatch, mode, ndim):
    shape = (23, 30) if ndim == 2 else (14, 12, 9)
    plan = "3x1x4" if ndim == 2 else "2x2x2"
    monkeypatch.setenv(BLOCK, plan)
    grids = tuple(0.3 * g for g in random_grids(rng, shape, 2))
    params = {"c": rng.uniform(0.1, 0.3, shape)}
    check_blocked(rng, split_stages(ndim), grids, 5, params, mode=mode,
                  cval=float(rng.uniform(-1, 1)))


@pytest.mark.parametrize("k", [1, 2, 3, 4])
@pytest.mark.parametrize("ndim", [2, 3])
def test_random_schemes(rng, monkeypatch, k, ndim):
    for trial in range(3):
        scheme = random_scheme(rng, k, ndim, int(rng.integers(1, 4)),
                               int(rng.integers(0, 3)))
        shape = ((int(rng.integers(20, 40)), int(rng.integers(5, 30)))
                 if ndim == 2 else
                 tuple(int(rng.integers(11, 18)) for _ in range(3)))
        # random stencils reach up to 2 a stage: a tile holds 3 rows
        c0 = 1 if ndim == 2 else int(rng.integers(1, 4))
        c1 = int(rng.integers(1, 4 if ndim == 3 else 6))
        depth = int(rng.integers(1, 4))
        monkeypatch.setenv(BLOCK, "%dx%dx%d" % (depth, c0, c1))
        # small values and few steps: random schemes are not stable
        grids = tuple(0.3 * g for g in random_grids(rng, shape,
                                                    len(scheme.fields)))
        params = {p: rng.uniform(-1, 1, shape) for p in scheme.params}
        mode = MODES[int(rng.integers(0, len(MODES)))]
        for steps in (1, depth + 1, 2 * depth + 1):
            check_blocked(rng, scheme, grids, steps, params, mode=mode,
                          cval=float(rng.uniform(-1, 1)))


def test_outs_in_place_and_swapped(rng, monkeypatch):
    """The last pass writes the outs only where nothing it reads is an
    out: in place over one pass (the ins) and over several."""
    scheme = gray_scott(2)
    grids = tuple(0.3 * g for g in random_grids(rng, (30, 24), 2))
    for plan, steps in (("4x1x3", 4), ("4x1x3", 3), ("2x1x3", 7)):
        monkeypatch.setenv(BLOCK, plan)
        ref = reference.scheme_apply(grids, scheme, steps)
        u, v = (g.copy() for g in grids)
        got = cs.apply((u, v), scheme, steps=steps, out=(u, v))
        assert got[0] is u and got[1] is v
        assert_close(u, ref[0], {"case": "u in place", "plan": plan})
        assert_close(v, ref[1], {"case": "v in place", "plan": plan})
        u, v = (g.copy() for g in grids)
        cs.apply((u, v), scheme, steps=steps, out=(v, u))
        assert_close(v, ref[0], {"case": "u into v", "plan": plan})
        assert_close(u, ref[1], {"case": "v into u", "plan": plan})


def test_nonfinite_land_where_the_reference_puts_them(rng, monkeypatch):
    monkeypatch.setenv(BLOCK, "3x1x3")
    u, v = cs.fields("u v")
    s = cs.Stencil(weights=np.array([[0, 1, 0], [1, -4, 1], [0, 0.5, 0]]))
    scheme = cs.Scheme({u: u + 0.1 * s(u) - u * v, v: v ** 2 * 0.5 + 0 * u})
    for mode in MODES:
        grids = random_grids(rng, (25, 12), 2)
        grids[0][3, 4] = np.nan
        grids[0][12, 0] = np.inf   # on a tile's margin, at the x edge
        grids[1][24, 6] = -np.inf
        out, _ = check_blocked_nonfinite(rng, scheme, grids, 5, mode)
        ref = reference.scheme_apply(grids, scheme, 5, mode=mode)
        for o, r in zip(out, ref):
            np.testing.assert_array_equal(np.isnan(o), np.isnan(r))
            np.testing.assert_array_equal(np.isposinf(o), np.isposinf(r))
            np.testing.assert_array_equal(np.isneginf(o), np.isneginf(r))
            fin = np.isfinite(r)
            assert_close(o[fin], r[fin], {"mode": mode})


def check_blocked_nonfinite(rng, scheme, grids, steps, mode):
    out = cs.apply(grids, scheme, steps=steps, mode=mode, backend="cpu")
    info = cs.last_run_info()
    assert info["path"] == "scheme-blocked"
    return out, info


def test_a_raising_callback_leaves_the_grids(rng, monkeypatch):
    monkeypatch.setenv(BLOCK, "2x1x3")
    scheme = gray_scott(2)
    u, v = random_grids(rng, (30, 16), 2)
    before = (u.copy(), v.copy())

    def stop(step, state):
        raise RuntimeError("stop")

    with pytest.raises(RuntimeError, match="stop"):
        cs.apply((u, v), scheme, steps=10, every=5, callback=stop,
                 out=(u, v))
    np.testing.assert_array_equal(u, before[0])
    np.testing.assert_array_equal(v, before[1])


def test_the_record_names_the_passes(rng, monkeypatch):
    monkeypatch.setenv(BLOCK, "4x1x2")
    grids = tuple(0.3 * g for g in random_grids(rng, (40, 20), 2))
    cs.apply(grids, gray_scott(2), steps=10, backend="cpu")
    info = cs.last_run_info()
    assert (info["path"], info["fused_depth"], info["fused_passes"],
            info["unfused_steps"]) == ("scheme-blocked", 4, 3, 0)
    monkeypatch.setenv(BLOCK, "off")
    cs.apply(grids, gray_scott(2), steps=10, backend="cpu")
    info = cs.last_run_info()
    assert (info["path"], info["fused_depth"], info["unfused_steps"]) == (
        "scheme", 1, 10)


@pytest.mark.parametrize("text", ["3x2", "0x1x2", "17x1x1", "2x1x0",
                                  "2x2x1", "2x1x40", "2x1x2x", "deep"])
def test_a_bad_forced_plan_is_a_value_error(rng, monkeypatch, text):
    """2x2x1 cuts the one plane of a 2D grid; 2x1x40 makes tiles of fewer
    rows than the radius and one."""
    monkeypatch.setenv(BLOCK, text)
    grids = random_grids(rng, (40, 20), 2)
    with pytest.raises(ValueError, match=BLOCK):
        cs.apply(grids, gray_scott(2), steps=3, backend="cpu")


def test_the_planner_blocks_large_grids_and_not_small_ones(rng,
                                                           monkeypatch):
    """The engine's own plan: blocked passes for one step on a grid far
    larger than the cores' caches (they read the ins and write the outs
    directly, where the whole engine copies them into its padded buffers
    and out again), whole-grid passes for a grid that fits and for 1D
    grids; for several steps, whatever the planner says for the threads
    the run had (the choice depends on the machine's caches and cores)."""
    monkeypatch.delenv(BLOCK, raising=False)
    big = tuple(0.3 * g for g in random_grids(rng, (2048, 2048), 2))
    cs.apply(big, gray_scott(2), steps=1, backend="cpu")
    info = cs.last_run_info()
    assert (info["path"], info["fused_passes"]) == ("scheme-blocked", 1)
    for steps in (8, 64):
        scheme = wave(2)
        cs.apply(big, scheme, steps=steps, backend="cpu")
        info = cs.last_run_info()
        plan = _engine.plan_scheme_cpu(big[0].shape, scheme.tables(),
                                       fields=2, params=0, mode=scheme.mode,
                                       steps=steps, threads=info["threads"])
        assert (info["path"], info["fused_depth"]) == (
            plan["path"], plan["fused_depth"]), steps
        # a blocked plan says how much its tiles hold (explain() prices a
        # tile that spills from L2 higher); the whole-grid passes none
        assert isinstance(plan["tile_spills"], bool)
        assert (plan["tile_bytes"] > 0) == (plan["path"] == "scheme-blocked")
        assert plan["tile_bytes"] > 0 or not plan["tile_spills"]
    small = random_grids(rng, (64, 64), 2)
    cs.apply(small, gray_scott(2), steps=16, backend="cpu")
    assert cs.last_run_info()["path"] == "scheme"
    line = random_grids(rng, (1 << 20,), 2)
    cs.apply(line, gray_scott(1), steps=4, backend="cpu")
    assert cs.last_run_info()["path"] == "scheme"


# ---------------------------------------------------------------------------
# The engine called directly, on two threads

def test_two_threads_give_the_bits_of_one(rng, monkeypatch):
    """Tiles shared among two threads (dynamic scheduling, a barrier
    between passes) compute what one thread computes, bit for bit."""
    from test_scheme_engine import (random_fields, random_scheme,
                                    random_stencil, run)
    monkeypatch.setenv(BLOCK, "3x3x4")
    stencils = [random_stencil(rng, 3, 1) for _ in range(2)]
    tables = random_scheme(rng, 3, 1, 2, 2)
    fields = random_fields(rng, (20, 24, 33), 3)
    params = random_fields(rng, (20, 24, 33), 1)
    one, info1 = run(fields, tables, 7, "reflect", 0.0, params, stencils,
                     threads=1)
    two, info2 = run(fields, tables, 7, "reflect", 0.0, params, stencils,
                     threads=2)
    assert (info1["threads"], info2["threads"]) == (1, 2)
    assert info2["path"] == "scheme-blocked"
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a, b)


def test_progress_stops_the_passes_and_leaves_the_outs(rng, monkeypatch):
    """The run polls between passes (the steps done so far, a multiple of
    the depth); a callback's exception ends it with the outs unwritten."""
    from test_scheme_engine import long_run_args, run
    monkeypatch.setenv(BLOCK, "5x1x4")
    fields, tables, stencils = long_run_args(rng)
    kept = fields[0].copy()
    seen = []

    def progress(done):
        seen.append(done)
        if len(seen) == 3:
            raise ZeroDivisionError("stop here")

    out = (np.full(kept.shape, 7.25),)
    with pytest.raises(ZeroDivisionError, match="stop here"):
        run(fields, tables, 10 ** 12, "wrap", stencils=stencils, out=out,
            threads=2, progress=progress)
    # (the engine's poll reports at most every so often)
    assert len(seen) == 3 and 0 < seen[0] < seen[1] < seen[2]
    assert all(done % 5 == 0 for done in seen), seen
    np.testing.assert_array_equal(fields[0], kept)
    np.testing.assert_array_equal(out[0], 7.25)   # never written


def test_ctrl_c_leaves_the_grid_in_place(rng, monkeypatch):
    import _thread
    import threading
    from test_scheme_engine import long_run_args, run
    monkeypatch.setenv(BLOCK, "4x1x4")
    fields, tables, stencils = long_run_args(rng)
    kept = fields[0].copy()
    timer = threading.Timer(0.3, _thread.interrupt_main)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            run(fields, tables, 10 ** 12, "wrap", stencils=stencils,
                out=fields, threads=2, interruptible=True)
    finally:
        timer.cancel()
    np.testing.assert_array_equal(fields[0], kept)


def test_explain_names_the_plan_the_engine_runs(rng, monkeypatch):
    """explain() asks the engine's own planner (plan_scheme_cpu), so it
    names the passes the run takes, forced or chosen."""
    monkeypatch.delenv(BLOCK, raising=False)
    scheme = gray_scott(2)
    # cases whose plan holds for any number of threads the run may get
    for shape, steps in (((64, 64), 16), ((2048, 2048), 1)):
        e = cs.explain(shape, scheme, steps=steps, backend="cpu")
        grids = tuple(0.3 * g for g in random_grids(rng, shape, 2))
        cs.apply(grids, scheme, steps=steps, backend="cpu")
        info = cs.last_run_info()
        assert e.path == info["path"], (shape, steps)
        assert e.predicted_seconds > 0
    monkeypatch.setenv(BLOCK, "3x1x5")
    e = cs.explain((40, 30), scheme, steps=7, backend="cpu")
    assert (e.path, e.fused_depth, e.fused_passes) == ("scheme-blocked", 3,
                                                       3)
    assert any("5 tile(s)" in note for note in e.notes), e.notes
