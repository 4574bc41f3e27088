"""Reference counts and memory over many calls (like bottleneck's
memory_test): no reference kept or dropped, no buffer leaked, on the
success paths and on the error paths."""
import gc
import sys
import tracemalloc

import numpy as np
import pytest

import convstencil as cs
from conftest import BACKENDS

N_REFCOUNT_CALLS = 1000
N_TRACE_CALLS = 200
# A leak of one grid-sized buffer per call would be N_TRACE_CALLS * 32 KiB
# = 6.4 MB; allow a little for caches, interned strings, the frame.
TRACE_GROWTH_LIMIT = 256 * 1024

GRIDS = {1: (64,), 2: (12, 11), 3: (5, 4, 6)}
PRESET = {1: "1d5p", 2: "box2d49p", 3: "box3d27p"}


def _refs(*objects):
    return [sys.getrefcount(o) for o in objects]


@pytest.mark.parametrize("ndim", [1, 2, 3])
@pytest.mark.parametrize("backend", BACKENDS)
def test_refcounts_success_paths(backend, ndim, rng):
    grid = rng.standard_normal(GRIDS[ndim])
    weights = rng.uniform(0.1, 1.0, (3,) * ndim) / 3 ** ndim
    stencil = cs.Stencil(PRESET[ndim])
    out = np.empty_like(grid)
    inplace = grid.copy()
    mode = "wrap"
    cval = 0.5
    # one warm-up call of each kind (lazy imports, caches)
    cs.apply(grid, stencil, steps=2, backend=backend)
    cs.apply(grid, weights=weights, steps=2, backend=backend)
    watched = (grid, weights, stencil, stencil.weights, out, inplace, mode,
               cval)
    before = _refs(*watched)
    for i in range(N_REFCOUNT_CALLS // 4):  # 4 calls per round
        steps = i % 3
        r1 = cs.apply(grid, stencil, steps=steps, mode=mode, cval=cval,
                      backend=backend)
        r2 = cs.apply(grid, weights=weights, steps=steps, backend=backend)
        r3 = cs.apply(grid, stencil, steps=steps, out=out, backend=backend)
        r4 = cs.apply(inplace, weights=weights, steps=1, out=inplace,
                      backend=backend)
        assert r3 is out and r4 is inplace
        del r1, r2, r3, r4
    after = _refs(*watched)
    assert after == before, list(zip(
        ("grid", "weights", "stencil", "stencil.weights", "out", "inplace",
         "mode", "cval"), before, after))


@pytest.mark.parametrize("backend", BACKENDS)
def test_result_holds_no_extra_reference(backend, rng):
    grid = rng.standard_normal((10, 9))
    for steps in (0, 1, 3):
        result = cs.apply(grid, "heat2d", steps=steps, backend=backend)
        # one reference here, one for getrefcount's argument
        assert sys.getrefcount(result) == 2, steps
        # and nothing else keeps the private input copy alive as its base
        assert result.base is None or sys.getrefcount(result.base) <= 3


@pytest.mark.parametrize("backend", BACKENDS)
def test_list_input_result_refcount(backend):
    result = cs.apply([[1.0, 2.0, 3.0]] * 4, "box2d9p", backend=backend)
    assert sys.getrefcount(result) == 2


# Error paths: each raises after some arguments were converted.
def _bad_calls(grid1, grid2, grid3, out):
    return [
        (ValueError, lambda: cs.apply(grid2, "heat2d", steps=-1)),
        (ValueError, lambda: cs.apply(grid2, weights=np.ones((2, 2)))),
        (ValueError, lambda: cs.apply(grid2, "box2d49")),
        (ValueError, lambda: cs.apply(grid2, "heat2d", mode="circular")),
        (ValueError, lambda: cs.apply(grid2, "heat2d", backend="gpu")),
        (ValueError, lambda: cs.apply(grid1, "heat2d")),
        (ValueError, lambda: cs.apply(grid3, weights=np.ones((3, 3)))),
        (ValueError, lambda: cs.apply(grid2, weights=np.full((3, 3),
                                                             np.nan))),
        (ValueError, lambda: cs.apply(grid2, weights=np.ones((17, 17)))),
        (ValueError, lambda: cs.apply(grid2, weights=np.ones((9, 9)),
                                      backend="cpu-tc")),
        (ValueError, lambda: cs.apply(grid2, "heat2d", out=out[:-1])),
        (ValueError, lambda: cs.apply(np.zeros((0, 4)), "heat2d")),
        (TypeError, lambda: cs.apply(grid2, "heat2d",
                                     out=out.astype(np.float32))),
        (TypeError, lambda: cs.apply(grid2, "heat2d", steps=2.5)),
        (TypeError, lambda: cs.apply(grid2, "heat2d", weights=np.ones(3))),
        (TypeError, lambda: cs.apply(grid2)),
        (TypeError, lambda: cs.apply(grid2.astype(complex), "heat2d")),
        (TypeError, lambda: cs.apply(grid2, weights=np.ones((3, 3)) * 1j)),
    ]


def test_refcounts_error_paths(rng):
    grid1 = rng.standard_normal(50)
    grid2 = rng.standard_normal((64, 64))
    grid3 = rng.standard_normal((4, 5, 6))
    out = np.zeros_like(grid2)
    calls = _bad_calls(grid1, grid2, grid3, out)
    watched = (grid1, grid2, grid3, out)
    for exc, call in calls:  # warm-up, and each really raises
        with pytest.raises(exc):
            call()
    before = _refs(*watched)
    for _ in range(N_REFCOUNT_CALLS // len(calls) + 1):
        for exc, call in calls:
            try:
                call()
            except exc:
                pass
            else:
                raise AssertionError("no %s raised" % exc.__name__)
    assert _refs(*watched) == before


def _traced_growth(run, repeats):
    """Traced memory growth (bytes) over `repeats` calls of run()."""
    for _ in range(5):  # warm-up: caches, lazy imports, free lists
        run()
    gc.collect()
    tracemalloc.start()
    try:
        run()
        gc.collect()
        start, _ = tracemalloc.get_traced_memory()
        for _ in range(repeats):
            run()
        gc.collect()
        end, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return end - start


@pytest.mark.parametrize("backend", BACKENDS)
def test_tracemalloc_success_paths(backend, rng):
    grid2 = rng.standard_normal((64, 64))  # 32 KiB
    grid1 = rng.standard_normal(4096)
    grid3 = rng.standard_normal((16, 16, 16))
    out = np.empty_like(grid2)
    w2 = rng.uniform(0.1, 1, (5, 3))
    w2 /= w2.sum()

    def run():
        cs.apply(grid2, "box2d49p", steps=3, mode="reflect", backend=backend)
        cs.apply(grid2, weights=w2, steps=2, mode="wrap", backend=backend)
        cs.apply(grid2, "heat2d", steps=5, out=out, backend=backend)
        cs.apply(grid1, "1d5p", steps=2, backend=backend)
        cs.apply(grid3, "heat3d", steps=2, cval=1.0, backend=backend)
        cs.apply(grid2.astype(np.float32), "box2d9p", backend=backend)
        cs.apply(grid2[::2, ::2], "heat2d", steps=0, backend=backend)
        cs.last_run_info()
        cs.backends()

    growth = _traced_growth(run, N_TRACE_CALLS)
    assert growth < TRACE_GROWTH_LIMIT, "%d bytes retained over %d calls" % (
        growth, N_TRACE_CALLS)


def test_tracemalloc_error_paths(rng):
    grid1 = rng.standard_normal(4096)
    grid2 = rng.standard_normal((64, 64))
    grid3 = rng.standard_normal((16, 16, 16))
    out = np.zeros_like(grid2)
    calls = _bad_calls(grid1, grid2, grid3, out)

    def run():
        for exc, call in calls:
            try:
                call()
            except exc:
                pass

    growth = _traced_growth(run, N_TRACE_CALLS)
    assert growth < TRACE_GROWTH_LIMIT, "%d bytes retained over %d x %d " \
        "failing calls" % (growth, N_TRACE_CALLS, len(calls))


def test_tracemalloc_detects_a_leak(rng):
    # the measurement itself must be able to fail: keep every result
    grid = rng.standard_normal((64, 64))
    kept = []

    def run():
        kept.append(cs.apply(grid, "heat2d", backend="cpu"))

    assert _traced_growth(run, N_TRACE_CALLS) > TRACE_GROWTH_LIMIT


@pytest.mark.parametrize("backend", BACKENDS)
def test_stencil_objects_do_not_leak(backend, rng):
    grid = rng.standard_normal((20, 20))

    def run():
        s = cs.Stencil("heat2d", alpha=0.1)
        cs.apply(grid, s, steps=2, backend=backend)
        s = cs.Stencil(weights=np.full((3, 5), 1 / 15))
        cs.apply(grid, s, backend=backend)
        try:
            cs.Stencil("nonexistent")
        except ValueError:
            pass

    growth = _traced_growth(run, N_TRACE_CALLS)
    assert growth < TRACE_GROWTH_LIMIT, growth
