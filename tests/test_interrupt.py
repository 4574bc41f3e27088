"""Ctrl-C during a long apply(): KeyboardInterrupt soon after, the grid
left as it was (also when it is `out`, or a view of it), and the process
still sound.

Each case runs in a child process: the main thread starts a run of a
billion steps and a timer thread simulates Ctrl-C (_thread.interrupt_main)
half a second later.  A run that ignored it would never end; the parent
kills the child after CHILD_TIMEOUT seconds and the test fails.
"""
import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import convstencil as cs
from conftest import gpu

CHILD_TIMEOUT = 120

CHILD = r"""
import _thread, json, sys, threading, time
import numpy as np
import convstencil as cs

backend, shape, out_kind, probe_steps = (sys.argv[1], tuple(
    json.loads(sys.argv[2])), sys.argv[3], int(sys.argv[4]))
rng = np.random.default_rng(0)
base = rng.random(shape)
kept = base.copy()
# "overlap": the grid is a flipped view of `out`, which the engine cannot
# write through; every other kind reads `base` itself
grid = base[::-1] if out_kind == "overlap" else base
# the path a long run takes (the CPU engine's blocked path needs a grid
# past its direct-path size and several steps)
cs.apply(grid, "box2d49p", steps=probe_steps, backend=backend)
path = cs.last_run_info()["path"]
out = {"new": None, "grid": base, "overlap": base,
       "other": np.zeros(shape)}[out_kind]

fired = []
def ctrl_c():
    fired.append(time.monotonic())
    _thread.interrupt_main()
threading.Timer(0.5, ctrl_c).start()
try:
    cs.apply(grid, "box2d49p", steps=10**9, backend=backend, out=out)
    outcome, delay = "finished", None
except KeyboardInterrupt:
    outcome, delay = "interrupted", time.monotonic() - fired[0]

# the process is still sound: a run after the interrupt is right
small = rng.random((40, 50))
again = cs.apply(small, "heat2d", steps=3, backend=backend)
want = cs.apply(small, "heat2d", steps=3, backend="cpu")
print(json.dumps({
    "outcome": outcome, "delay": delay, "path": path,
    "grid_kept": bool(np.array_equal(base, kept)),
    "after_ok": bool(np.allclose(again, want, rtol=1e-12, atol=0)),
}))
"""


def run_child(backend, shape, out_kind, probe_steps, cwd):
    # the package this process imported, first: the child runs in an
    # empty folder, so a source checkout without the built module is not
    # on its path
    env = dict(os.environ)
    here = os.path.dirname(os.path.dirname(os.path.abspath(cs.__file__)))
    env["PYTHONPATH"] = os.pathsep.join([here] + [p for p in sys.path if p])
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, backend, json.dumps(shape), out_kind,
         str(probe_steps)],
        capture_output=True, text=True, timeout=CHILD_TIMEOUT, env=env,
        cwd=cwd)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


CASES = [
    # backend, grid, the path the long run takes, steps that show it
    ("cpu", [256, 256], "direct", 1),
    ("cpu", [1024, 1024], "direct-temporal-blocked", 20),
    ("cpu-tc", [64, 64], "dual-tessellation", 1),
    pytest.param("cuda", [2048, 2048], None, 1, marks=gpu, id="cuda"),
]


@pytest.mark.parametrize("out_kind", ["new", "grid", "overlap", "other"])
@pytest.mark.parametrize("backend,shape,path,probe_steps", CASES,
                         ids=["cpu-direct", "cpu-blocked", "cpu-tc", "cuda"])
def test_ctrl_c_stops_the_run_and_keeps_the_grid(backend, shape, path,
                                                 probe_steps, out_kind,
                                                 tmp_path):
    got = run_child(backend, shape, out_kind, probe_steps, str(tmp_path))
    assert got["outcome"] == "interrupted", got
    # polled every tenth of a second; a GPU run also waits for the
    # passes already queued
    assert got["delay"] < 5.0, got
    assert got["grid_kept"], got
    assert got["after_ok"], got
    if path is not None:
        assert got["path"] == path, got


@pytest.mark.parametrize("backend", ["cpu", "cpu-tc"])
def test_runs_in_other_threads_end_and_agree(backend):
    # only the main thread runs signal handlers, so apply() asks the
    # engine to poll only there; a run in another thread ends, with the
    # main thread's numbers
    grid = np.random.default_rng(3).random((300, 200))
    want = cs.apply(grid, "box2d49p", steps=30, backend=backend)
    got = []
    worker = threading.Thread(target=lambda: got.append(
        cs.apply(grid, "box2d49p", steps=30, backend=backend)))
    worker.start()
    worker.join(timeout=CHILD_TIMEOUT)
    assert not worker.is_alive()
    assert np.array_equal(got[0], want)
