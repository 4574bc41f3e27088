"""Watching a run: every=N with a callback, and the progress bar.

The callback contract on every backend (CPU here, "cuda" on the device):
the states handed to the callback at steps N, 2N, ... equal the plain
reference run for that many steps; the result is identical, bit for bit,
with and without a callback; a callback that raises stops the run and
leaves the grid (also when it is `out`) as it was; `every` is checked.
"""
import io
import sys

import numpy as np
import pytest

import convstencil as cs
from conftest import BACKENDS, assert_close, random_weights
from reference import apply as apply_reference

MODES = [("constant", 0.5), ("wrap", 0.0), ("nearest", 0.0),
         ("reflect", 0.0), ("mirror", 0.0)]
MODE_IDS = [m for m, _ in MODES]


@pytest.mark.parametrize("mode,cval", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape,steps,every", [((37, 41), 10, 3),
                                               ((23, 19), 7, 7),
                                               ((300,), 9, 2),
                                               ((6, 7, 9), 5, 2)],
                         ids=["2d-10-by-3", "2d-7-by-7", "1d-9-by-2",
                              "3d-5-by-2"])
def test_callback_sees_each_state(shape, steps, every, backend, mode, cval,
                                  rng):
    grid = rng.standard_normal(shape)
    w = random_weights(rng, len(shape), 3, min_side=3)
    seen = []

    def callback(step, state):
        assert isinstance(state, np.ndarray)
        assert not state.flags.writeable
        seen.append((step, state.copy()))

    kept = grid.copy()
    got = cs.apply(grid, weights=w, steps=steps, mode=mode, cval=cval,
                   backend=backend, every=every, callback=callback)
    np.testing.assert_array_equal(grid, kept)
    assert [s for s, _ in seen] == list(range(every, steps + 1, every))
    for step, state in seen:
        assert_close(state, apply_reference(grid, w, step, mode, cval),
                     dict(backend=backend, step=step, mode=mode))
    assert_close(got, apply_reference(grid, w, steps, mode, cval),
                 dict(backend=backend, steps=steps, mode=mode))
    # the same segments without a callback: the same bits
    quiet = cs.apply(grid, weights=w, steps=steps, mode=mode, cval=cval,
                     backend=backend, every=every)
    np.testing.assert_array_equal(got, quiet)


@pytest.mark.parametrize("backend", BACKENDS)
def test_segments_equal_chained_calls(backend, rng):
    grid = rng.random((64, 70))
    got = cs.apply(grid, "heat2d", steps=14, every=4, backend=backend,
                   callback=lambda step, g: None)
    info = cs.last_run_info()
    assert info["steps"] == 14 and info["segments"] == 4
    if backend == "cuda":
        # "cuda" picks its path per call from the step count (a watched run
        # once, for all its segments); the chained calls must run that path
        # for the same bits, so they name it
        backend = {"tensor-core": "cuda-tc",
                   "cuda-core": "cuda-core"}[info["path"]]
    chained = grid
    for _ in range(3):
        chained = cs.apply(chained, "heat2d", steps=4, backend=backend)
    chained = cs.apply(chained, "heat2d", steps=2, backend=backend)
    np.testing.assert_array_equal(got, chained)


class Stop(Exception):
    pass


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("out_kind", ["new", "grid", "other"])
@pytest.mark.parametrize("stop_at", [2, 6])
def test_raising_callback_stops_and_keeps_the_grid(backend, out_kind,
                                                   stop_at, rng):
    grid = rng.random((40, 44))
    kept = grid.copy()
    out = {"new": None, "grid": grid, "other": np.zeros_like(grid)}[out_kind]
    calls = []

    def callback(step, state):
        calls.append(step)
        if step == stop_at:
            raise Stop("stop at %d" % step)

    with pytest.raises(Stop):
        cs.apply(grid, "heat2d", steps=6, every=2, backend=backend, out=out,
                 callback=callback)
    assert calls == list(range(2, stop_at + 1, 2))
    # the grid is left as it was, also when it is `out` and the callback
    # raised at the last step
    np.testing.assert_array_equal(grid, kept)
    # the process is still sound
    want = cs.apply(grid, "heat2d", steps=2, backend="cpu")
    assert_close(cs.apply(grid, "heat2d", steps=2, backend=backend), want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_out_gets_the_result_of_a_watched_run(backend, rng):
    grid = rng.random((33, 35))
    out = np.full_like(grid, np.nan)
    got = cs.apply(grid, "box2d9p", steps=9, every=4, backend=backend,
                   out=out, callback=lambda s, g: None)
    assert got is out
    assert_close(out, apply_reference(grid, cs.Stencil("box2d9p").weights,
                                      9, "constant", 0.0))
    # in place: out is the grid
    inplace = grid.copy()
    cs.apply(inplace, "box2d9p", steps=9, every=4, backend=backend,
             out=inplace, callback=lambda s, g: None)
    np.testing.assert_array_equal(inplace, out)


def test_steps_zero_calls_no_callback(rng):
    grid = rng.random((10, 10))
    calls = []
    got = cs.apply(grid, "heat2d", steps=0, every=3,
                   callback=lambda s, g: calls.append(s))
    assert calls == []
    np.testing.assert_array_equal(got, grid)


@pytest.mark.parametrize("every,exc", [(0, ValueError), (-2, ValueError),
                                       (1.5, TypeError), ("3", TypeError),
                                       (True, TypeError)])
def test_every_is_checked(every, exc):
    with pytest.raises(exc, match="every"):
        cs.apply(np.zeros((5, 5)), "heat2d", every=every,
                 callback=lambda s, g: None)


def test_callback_is_checked():
    with pytest.raises(TypeError, match="callable"):
        cs.apply(np.zeros((5, 5)), "heat2d", every=2, callback=3)
    with pytest.raises(TypeError, match="every"):
        cs.apply(np.zeros((5, 5)), "heat2d", callback=lambda s, g: None)
    with pytest.raises(TypeError, match="progress"):
        cs.apply(np.zeros((5, 5)), "heat2d", progress="yes")


def test_progress_counter_on_stderr(monkeypatch, rng):
    # the plain counter (tqdm hidden), on a run long enough to be polled
    monkeypatch.setitem(sys.modules, "tqdm", None)
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    grid = rng.random((200, 200))
    steps = 400
    got = cs.apply(grid, "heat2d", steps=steps, progress=True, backend="cpu")
    text = err.getvalue()
    assert text.endswith("%d/%d steps (100%%)\n" % (steps, steps))
    counts = [int(part.split("/")[0].split()[-1])
              for part in text.strip().split("\r") if part]
    assert counts == sorted(counts) and counts[-1] == steps
    # progress changes nothing
    np.testing.assert_array_equal(
        got, cs.apply(grid, "heat2d", steps=steps, backend="cpu"))


def test_progress_counter_shows_every_segment_end(monkeypatch, rng):
    # fast segments end between the engine's reports: each end is shown
    monkeypatch.setitem(sys.modules, "tqdm", None)
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    cs.apply(rng.random((16, 16)), "heat2d", steps=100, every=25,
             callback=lambda s, g: None, progress=True, backend="cpu")
    counts = [int(part.split("/")[0].split()[-1])
              for part in err.getvalue().strip().split("\r") if part]
    assert [c for c in counts if c % 25 == 0] == [25, 50, 75, 100]


def test_no_progress_output_unless_asked(monkeypatch, capsys, rng):
    cs.apply(rng.random((50, 50)), "heat2d", steps=20, backend="cpu")
    captured = capsys.readouterr()
    assert captured.err == "" and captured.out == ""


def test_progress_function_that_raises_stops_the_run(monkeypatch, rng):
    # a progress bar that fails (closed terminal, say) stops the run like
    # Ctrl-C: the exception propagates, the grid is kept
    from convstencil import _watch

    class Broken(_watch.Progress):
        def update(self, done):
            raise Stop("progress")

    monkeypatch.setattr(_watch, "Progress", Broken)
    grid = rng.random((300, 300))
    kept = grid.copy()
    with pytest.raises(Stop):
        cs.apply(grid, "heat2d", steps=10**6, progress=True, backend="cpu",
                 out=grid)
    np.testing.assert_array_equal(grid, kept)
