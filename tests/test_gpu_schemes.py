"""PDE schemes on the GPU: ``_core.run_scheme_device`` on CuPy arrays,
against a plain loop over the same tables written here for clarity
(``scipy.ndimage.correlate`` for each stencil term, NumPy for the rest,
in csrc/scheme.h's order: ``acc = 0; acc += (coef * param) * value``).

Covered: each term kind, 1 to 4 fields (and 8), several stages,
parameter fields, every mode, 1D/2D/3D, tiny grids under wide stencils,
outs fresh, in place, swapped and mixed, steps 0, 1 and 5, NaN and
infinities placed where SciPy puts them, a queued call on a stream, a
progress callback that stops a run, and inputs that are no outputs
never written.  Marked ``gpu``: skipped without a CUDA device or CuPy.
The binding's argument checks, which need no device, are in
test_scheme_device_args.py.
"""
import numpy as np
import pytest
from scipy import ndimage

from conftest import assert_close, gpu
from convstencil import _core

pytestmark = gpu

MODES = ["constant", "wrap", "nearest", "reflect", "mirror"]
ALIASES = ["fresh", "inplace", "swapped", "mixed"]
SHAPES = {1: (5003,), 2: (61, 83), 3: (13, 17, 19)}


@pytest.fixture(scope="module")
def cp():
    return pytest.importorskip("cupy")


# ---------------------------------------------------------------------------
# A scheme's tables

class Tables:
    """The code tables of csrc/scheme.h, built term by term."""

    def __init__(self, fields, params=0):
        self.K, self.P = fields, params
        self.stencils, self.coefs, self.terms = [], [], []
        self.updates, self.stages = [], []

    def stencil(self, weights):
        self.stencils.append(np.ascontiguousarray(weights, dtype=np.float64))
        return len(self.stencils) - 1

    def stage(self, *updates):
        """updates: (target, [terms]); a term is ("s", coef, field,
        stencil[, param]) or ("m", coef, powers[, param])."""
        first = len(self.updates)
        for target, terms in updates:
            t0 = len(self.coefs)
            for term in terms:
                kind, coef = term[0], term[1]
                if kind == "s":
                    field, sten = term[2], term[3]
                    param = term[4] if len(term) > 4 else -1
                    row = [0, param, field, sten] + [0] * self.K
                else:
                    powers = list(term[2]) + [0] * (self.K - len(term[2]))
                    param = term[3] if len(term) > 3 else -1
                    row = [1, param, -1, -1] + powers
                self.coefs.append(float(coef))
                self.terms.append(row)
            self.updates.append([target, t0, len(self.coefs) - t0])
        self.stages.append([first, len(self.updates) - first])

    def arrays(self):
        return (np.array(self.coefs, dtype=np.float64).reshape(-1),
                np.array(self.terms, dtype=np.int32).reshape(-1, 4 + self.K),
                np.array(self.updates, dtype=np.int32).reshape(-1, 3),
                np.array(self.stages, dtype=np.int32).reshape(-1, 2))


def reference(tab, fields, params, steps, mode, cval):
    """The plain loop: every stage from the values it began with."""
    coefs, terms, updates, stages = tab.arrays()
    f = [np.array(x, dtype=np.float64) for x in fields]
    for _ in range(steps):
        for first, count in stages:
            old = [x.copy() for x in f]
            for target, t0, nt in updates[first:first + count]:
                acc = np.zeros_like(old[0])
                for t in range(t0, t0 + nt):
                    kind, param, field, sten = terms[t, :4]
                    if kind == 0:
                        value = ndimage.correlate(old[field],
                                                  tab.stencils[sten],
                                                  mode=mode, cval=cval)
                    else:
                        value = np.ones_like(acc)
                        for i, power in enumerate(terms[t, 4:]):
                            for _ in range(power):
                                value = value * old[i]
                    c = coefs[t] * (params[param] if param >= 0 else 1.0)
                    acc = acc + c * value
                f[target] = acc
    return f


def run(cp, tab, fins, fouts, params, steps, mode, cval, stream=0,
        progress=None):
    coefs, terms, updates, stages = tab.arrays()
    shape = tuple(fins[0].shape)
    return _core.run_scheme_device(
        tuple(a.data.ptr for a in fins), tuple(a.data.ptr for a in fouts),
        tuple(a.data.ptr for a in params), shape, tuple(tab.stencils),
        coefs, terms, updates, stages, steps,
        getattr(_core, "MODE_" + mode.upper()), cval, stream, False,
        progress)


def outs_for(cp, fins, alias):
    K = len(fins)
    if alias == "inplace":
        return list(fins)
    if alias == "swapped":
        return [fins[(k + 1) % K] for k in range(K)]
    if alias == "mixed":
        return [fins[k] if k % 2 else cp.empty_like(fins[k])
                for k in range(K)]
    return [cp.full_like(x, np.nan) for x in fins]


def check(cp, tab, host, host_params, steps, mode, cval, alias, ctx,
          nonfinite=False):
    """Run on the device with `alias` outs; compare with the reference;
    inputs that are no outs unchanged; the run record."""
    fins = [cp.asarray(h) for h in host]
    params = [cp.asarray(h) for h in host_params]
    fouts = outs_for(cp, fins, alias)
    info = run(cp, tab, fins, fouts, params, steps, mode, cval)
    cp.cuda.Device().synchronize()
    want = reference(tab, host, host_params, steps, mode, cval)
    ctx = dict(ctx, mode=mode, steps=steps, alias=alias, cval=cval)
    for k in range(tab.K):
        got = cp.asnumpy(fouts[k])
        if nonfinite:
            finite = np.isfinite(want[k])
            np.testing.assert_array_equal(np.isnan(got), np.isnan(want[k]),
                                          err_msg=repr(ctx))
            np.testing.assert_array_equal(got[np.isinf(want[k])],
                                          want[k][np.isinf(want[k])],
                                          err_msg=repr(ctx))
            assert_close(got[finite], want[k][finite], dict(ctx, field=k))
        else:
            assert_close(got, want[k], dict(ctx, field=k))
    outs = {id(o) for o in fouts}
    for k, x in enumerate(fins):
        if id(x) not in outs:
            np.testing.assert_array_equal(cp.asnumpy(x), host[k])
    assert info["backend"] == "cuda"
    if info["path"] in ("scheme-blocked", "scheme-streamed"):
        depth = info["fused_depth"]  # several steps a pass
        assert depth >= 1 and info["unfused_steps"] == 0
        assert info["fused_passes"] == -(-steps // depth)
    else:
        assert info["path"] == "scheme"
        assert info["fused_depth"] == 1 and info["unfused_steps"] == steps
    assert info["device_seconds"] is None or info["device_seconds"] >= 0
    return info


def random_fields(rng, K, shape):
    return [rng.uniform(0.2, 1.2, shape) for _ in range(K)]


# ---------------------------------------------------------------------------
# Schemes

def laplacian(ndim):
    w = np.zeros((3,) * ndim)
    centre = (1,) * ndim
    w[centre] = -2.0 * ndim
    for a in range(ndim):
        for d in (0, 2):
            idx = list(centre)
            idx[a] = d
            w[tuple(idx)] = 1.0
    return w


def wave(ndim, velocity=False):
    """u <- 2u - up + C L(u) (C a parameter field c2 with velocity=True),
    up <- u: a leapfrog wave, its time level shifted by a rename."""
    tab = Tables(2, 1 if velocity else 0)
    L = tab.stencil(laplacian(ndim))
    lap = ("s", 0.1, 0, L, 0) if velocity else ("s", 0.15, 0, L)
    tab.stage((0, [("m", 2.0, [1, 0]), ("m", -1.0, [0, 1]), lap]),
              (1, [("m", 1.0, [1, 0])]))
    return tab


def gray_scott(ndim, dt=0.5, Du=0.2, Dv=0.1, F=0.04, k=0.06):
    tab = Tables(2)
    L = tab.stencil(laplacian(ndim))
    tab.stage((0, [("m", 1.0, [1, 0]), ("s", dt * Du, 0, L),
                   ("m", -dt, [1, 2]), ("m", dt * F, [0, 0]),
                   ("m", -dt * F, [1, 0])]),
              (1, [("m", 1.0, [0, 1]), ("s", dt * Dv, 1, L),
                   ("m", dt, [1, 2]), ("m", -dt * (F + k), [0, 1])]))
    return tab


def heun(ndim, dt=0.1):
    """Two stages (Heun's method for u' = c L(u) - u^3) through a helper
    field w."""
    tab = Tables(2, 1)
    L = tab.stencil(laplacian(ndim))
    tab.stage((1, [("m", 1.0, [1, 0]), ("s", dt, 0, L, 0),
                   ("m", -dt, [3, 0])]))
    tab.stage((0, [("m", 0.5, [1, 0]), ("m", 0.5, [0, 1]),
                   ("s", 0.5 * dt, 1, L, 0), ("m", -0.5 * dt, [0, 3])]))
    return tab


def random_tables(rng, ndim, K, P, stages, max_radius):
    """Random stencils (some zero weights), sums of stencil terms and
    monomials (powers 0..4, total at most 4), parameters, renames."""
    tab = Tables(K, P)
    for _ in range(int(rng.integers(1, 4))):
        shape = tuple(2 * int(rng.integers(0, max_radius + 1)) + 1
                      for _ in range(ndim))
        w = rng.uniform(0.2, 1.2, shape) * rng.choice([1, -0.5], shape)
        w[rng.random(shape) < 0.3] = 0.0
        tab.stencil(w / max(np.abs(w).sum(), 1e-300))
    S = len(tab.stencils)
    for g in range(stages):
        updates = []
        for f in range(K):
            if g > 0 and rng.random() < 0.25:
                continue  # kept through the stage
            if K > 1 and rng.random() < 0.2:
                powers = [0] * K
                powers[int(rng.integers(K))] = 1
                updates.append((f, [("m", 1.0, powers)]))  # a rename
                continue
            terms = [("m", 0.5, [int(i == f) for i in range(K)])]
            nt = int(rng.integers(1, 4))
            for _ in range(nt):
                param = int(rng.integers(P)) if P and rng.random() < 0.4 \
                    else -1
                if rng.random() < 0.5:
                    terms.append(("s", 0.3 / nt, int(rng.integers(K)),
                                  int(rng.integers(S)), param))
                else:
                    powers, budget = [], 4
                    for _ in range(K):
                        p = int(rng.integers(0, budget + 1)) \
                            if rng.random() < 0.5 else 0
                        powers.append(p)
                        budget -= p
                    terms.append(("m", 0.1 / nt, powers, param))
            updates.append((f, terms))
        tab.stage(*updates)
    return tab


# ---------------------------------------------------------------------------
# Tests

@pytest.mark.parametrize("steps", [0, 1, 2, 5])
@pytest.mark.parametrize("alias", ALIASES)
@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_leapfrog_wave(cp, rng, ndim, alias, steps):
    mode = MODES[(steps + ndim) % 5]
    host = random_fields(rng, 2, SHAPES[ndim])
    check(cp, wave(ndim), host, [], steps, mode, 0.25, alias,
          dict(scheme="wave", ndim=ndim, seed=rng.seed))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_velocity_field_and_two_stages(cp, rng, ndim, mode):
    shape = SHAPES[ndim]
    c2 = [rng.uniform(0.5, 1.5, shape)]
    ctx = dict(ndim=ndim, seed=rng.seed)
    check(cp, wave(ndim, velocity=True), random_fields(rng, 2, shape), c2, 5,
          mode, -0.5, ALIASES[MODES.index(mode) % 4],
          dict(ctx, scheme="wave-c2"))
    check(cp, heun(ndim), random_fields(rng, 2, shape), c2, 3, mode, 0.75,
          ALIASES[(MODES.index(mode) + 1) % 4], dict(ctx, scheme="heun"))


@pytest.mark.parametrize("alias", ALIASES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("ndim", [2, 3])
def test_gray_scott(cp, rng, ndim, mode, alias):
    host = random_fields(rng, 2, SHAPES[ndim])
    for steps in (1, 4):
        check(cp, gray_scott(ndim), host, [], steps, mode, 0.5, alias,
              dict(scheme="gray-scott", ndim=ndim, seed=rng.seed))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("K", [1, 2, 3, 4])
def test_each_term_kind(cp, rng, K, mode):
    """A stencil term alone, a monomial of each power 0..4 alone, and a
    parameter times each, on every field."""
    shape = SHAPES[2]
    tab = Tables(K, 1)
    s3 = tab.stencil(rng.uniform(-1, 1, (3, 3)) / 9)
    s5 = tab.stencil(rng.uniform(-1, 1, (1, 5)) / 5)
    updates = []
    for f in range(K):
        power = [0] * K
        power[f] = f % 5
        power[(f + 1) % K] += 1
        updates.append((f, [("s", 0.7, (f + 1) % K, s3),
                            ("m", 0.2, power),
                            ("s", -0.3, f, s5, 0),
                            ("m", 0.1, [0] * K, 0),
                            ("m", 0.05, [4 if i == f else 0
                                         for i in range(K)])]))
    tab.stage(*updates)
    check(cp, tab, random_fields(rng, K, shape),
          [rng.uniform(0.5, 1.5, shape)], 2, mode, 1.25,
          ALIASES[K % 4], dict(scheme="terms", K=K, seed=rng.seed))


@pytest.mark.parametrize("ndim", [1, 2, 3])
@pytest.mark.parametrize("K", [1, 2, 3, 4])
def test_random_schemes(cp, rng, K, ndim):
    for r in range(4):
        tab = random_tables(rng, ndim, K, r % 3, 1 + (r + K) % 3,
                            1 if ndim == 3 else 2)
        host = random_fields(rng, K, SHAPES[ndim])
        params = [rng.uniform(0.5, 1.5, SHAPES[ndim]) for _ in range(tab.P)]
        check(cp, tab, host, params, [0, 1, 5][(r + ndim) % 3],
              MODES[(r + K + ndim) % 5], 0.3, ALIASES[(r + K) % 4],
              dict(scheme="random", K=K, ndim=ndim, round=r, seed=rng.seed))


def test_eight_fields_and_many_taps(cp, rng):
    tab = random_tables(rng, 2, 8, 2, 2, 3)
    host = random_fields(rng, 8, (70, 90))
    params = [rng.uniform(0.5, 1.5, (70, 90)) for _ in range(2)]
    check(cp, tab, host, params, 3, "constant", 0.1, "mixed",
          dict(scheme="random-K8", seed=rng.seed))
    big = Tables(1)
    w = rng.uniform(-1, 1, (13, 13))
    w[rng.random(w.shape) < 0.1] = 0.0
    s = big.stencil(w / np.abs(w).sum())
    big.stage((0, [("m", 0.5, [1]), ("s", 0.5, 0, s)]))
    check(cp, big, random_fields(rng, 1, (50, 60)), [], 2, "mirror", 0.0,
          "inplace", dict(scheme="13x13", seed=rng.seed))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("n", [1, 2, 3])
def test_tiny_grids_wide_stencils(cp, rng, n, mode):
    for ndim, shape in ((1, (n,)), (2, (n, n + 1)), (3, (n, 2, n + 2))):
        tab = random_tables(rng, ndim, 2, 1, 2, 3 if ndim < 3 else 2)
        host = random_fields(rng, 2, shape)
        check(cp, tab, host, [rng.uniform(0.5, 1.5, shape)], 3, mode, 1.5,
              ALIASES[(n + ndim) % 4],
              dict(scheme="tiny", ndim=ndim, n=n, seed=rng.seed))


@pytest.mark.parametrize("alias", ["fresh", "inplace"])
def test_nonfinite_values_land_where_scipy_puts_them(cp, rng, alias):
    shape = (40, 50)
    host = random_fields(rng, 2, shape)
    host[0][0, 0] = np.nan
    host[0][17, 25] = np.inf
    host[1][30, 49] = -np.inf
    host[1][39, 0] = np.nan
    check(cp, wave(2), host, [], 3, "constant", 0.0, alias,
          dict(scheme="wave", seed=rng.seed), nonfinite=True)
    check(cp, gray_scott(2), host, [], 2, "wrap", 0.0, alias,
          dict(scheme="gray-scott", seed=rng.seed), nonfinite=True)
    # zero weights never meet the NaN beside them (as scipy.ndimage)
    tab = Tables(1)
    s = tab.stencil([[0, 0, 0], [0, 1.0, 0.5], [0, 0, 0]])
    tab.stage((0, [("s", 1.0, 0, s)]))
    one = [rng.uniform(0.2, 1.2, (10, 10))]
    one[0][4, 4] = np.nan
    check(cp, tab, one, [], 1, "constant", 0.0, alias,
          dict(scheme="zero-weights", seed=rng.seed), nonfinite=True)


def test_queued_on_a_stream(cp, rng):
    tab = gray_scott(2)
    host = random_fields(rng, 2, (300, 301))
    fins = [cp.asarray(h) for h in host]
    fouts = [cp.empty_like(x) for x in fins]
    stream = cp.cuda.Stream(non_blocking=True)
    cp.cuda.Device().synchronize()
    info = run(cp, tab, fins, fouts, [], 7, "wrap", 0.0, stream=stream.ptr)
    stream.synchronize()
    assert info["device_seconds"] is None
    want = reference(tab, host, [], 7, "wrap", 0.0)
    for k in range(2):
        assert_close(cp.asnumpy(fouts[k]), want[k],
                     dict(scheme="gray-scott", stream=True, field=k))


def test_progress_stops_a_run(cp, rng):
    tab = wave(2)
    fins = [cp.asarray(h) for h in random_fields(rng, 2, (2048, 2048))]
    kept = [x.copy() for x in fins]
    fouts = [cp.empty_like(x) for x in fins]
    seen = []

    def progress(steps_done):
        seen.append(steps_done)
        raise RuntimeError("stop here")

    with pytest.raises(RuntimeError, match="stop here"):
        run(cp, tab, fins, fouts, [], 100000, "wrap", 0.0,
            progress=progress)
    assert seen and 0 <= seen[0] < 100000
    cp.cuda.Device().synchronize()
    for x, y in zip(fins, kept):
        assert bool(cp.all(x == y))  # inputs that are no outs untouched
    info = run(cp, tab, fins, fouts, [], 1, "wrap", 0.0)  # usable after
    assert info["path"] in ("scheme", "scheme-streamed")


def test_engine_errors(cp, rng):
    tab = wave(2)
    a, b, c = (cp.asarray(rng.random((20, 30))) for _ in range(3))
    coefs, terms, updates, stages = tab.arrays()

    def call(fins, fouts, params=(), stencils=None):
        return _core.run_scheme_device(
            tuple(fins), tuple(fouts), tuple(params), (20, 30),
            tuple(tab.stencils if stencils is None else stencils), coefs,
            terms, updates, stages, 2, _core.MODE_WRAP, 0.0, 0, False, None)

    with pytest.raises(ValueError, match="overlaps"):
        call([a.data.ptr, b.data.ptr], [c.data.ptr, c.data.ptr])
    with pytest.raises(ValueError, match="overlaps"):
        call([a.data.ptr, b.data.ptr], [a.data.ptr + 8, c.data.ptr])
    host = np.zeros((20, 30))
    with pytest.raises(ValueError):
        call([host.ctypes.data, b.data.ptr], [c.data.ptr, a.data.ptr])
    big = Tables(1)
    s = big.stencil(np.ones((25, 25)) / 625)  # 625 taps in one stage
    big.stage((0, [("s", 1.0, 0, s)]))
    bc, bt, bu, bs = big.arrays()
    with pytest.raises(ValueError, match="at most"):
        _core.run_scheme_device((a.data.ptr,), (c.data.ptr,), (), (20, 30),
                                tuple(big.stencils), bc, bt, bu, bs, 1,
                                _core.MODE_WRAP, 0.0, 0, False, None)
