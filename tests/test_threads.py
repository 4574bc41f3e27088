"""The CPU engines' threads (csrc/cpu/threads.h): how many a call gets
(small work runs on one, OMP_NUM_THREADS is the ceiling, an explicit
request is taken as it is, a busy machine cuts a team that meets often),
the wait policy convstencil sets, and the step barrier's results."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import convstencil as cs
from convstencil import _core, _engine
from convstencil._stencil import resolve_weights

# the folder holding the convstencil this run imports (see
# test_distributed_unit.py)
PACKAGE_HOME = os.path.dirname(os.path.dirname(os.path.abspath(
    cs.__file__)))

# what the engine's thread choice reads from the environment
_THREAD_ENV = ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "OMP_DYNAMIC",
               "GOMP_SPINCOUNT")


def _run_python(code, **env_vars):
    """`code` in a fresh interpreter whose environment has none of the
    thread variables but `env_vars`; returns its last line, parsed as
    JSON."""
    env = {k: v for k, v in os.environ.items() if k not in _THREAD_ENV}
    env.update(env_vars, PYTHONPATH=PACKAGE_HOME)
    done = subprocess.run([sys.executable, "-c", code], cwd=PACKAGE_HOME,
                          env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def _weights(name):
    return np.ascontiguousarray(resolve_weights(name, None),
                                dtype=np.float64)


def _run(u, name, steps, threads, mode="constant"):
    out = np.empty_like(u)
    info = _engine.run_host(u, _weights(name), out, steps=steps, mode=mode,
                            cval=0.0, backend="cpu", threads=threads)
    return out, info


# ---------------------------------------------------------------------------
# the rule

@pytest.mark.parametrize("ceiling, idle, work, per, close, want", [
    (2, -1, 1e5, 2e6, 0, 1),      # little work: one thread
    (2, -1, 3e6, 2e6, 0, 1),      # 1.5 threads' worth: one
    (2, -1, 4e6, 2e6, 0, 2),      # enough for two
    (8, -1, 7e6, 2e6, 0, 3),      # cut to the work
    (2, -1, 1e9, 2e6, 0, 2),      # the ceiling (OMP_NUM_THREADS)
    (2, 1, 1e9, 2e6, 1, 1),       # a busy machine, barriers close
    (2, 1, 1e9, 2e6, 0, 2),       # a busy machine, barriers far apart
    (4, 0, 1e9, 2e6, 1, 1),       # no idle core: still one thread
    (4, -1, 1e9, 2e6, 1, 4),      # idle not known: the work decides
    (0, -1, 1e9, 2e6, 0, 1),      # a ceiling below one is one
])
def test_fit_rule(ceiling, idle, work, per, close, want):
    assert _core.threads_fit(ceiling, idle, work, per, close) == want


def test_idle_cores_is_a_count():
    idle = _core.threads_idle()
    assert isinstance(idle, int)
    assert idle == -1 or 0 <= idle <= (os.cpu_count() or 1)


def test_omp_dynamic_false_turns_off_the_load_check():
    got = _run_python("from convstencil import _core; "
                      "print(_core.threads_idle())", OMP_DYNAMIC="false")
    assert got == -1


# ---------------------------------------------------------------------------
# what a call gets

def test_small_calls_run_on_one_thread(rng):
    """The issue's call: one step of a 3x3 Laplacian on 256^2; and many
    steps of heat2d on 256^2 (a step of 1.4e6 units)."""
    u = rng.random((256, 256))
    lap = np.array([[0, 1, 0], [1, -4, 1], [0, 1, 0]], float)
    cs.apply(u, weights=lap)
    assert cs.last_run_info()["threads"] == 1
    cs.apply(u, "heat2d", steps=100)
    assert cs.last_run_info()["threads"] == 1
    cs.apply(rng.random((32, 32, 32)), "heat3d", steps=10)
    assert cs.last_run_info()["threads"] == 1


def test_explicit_request_is_taken(rng):
    """threads > 0 at the engine's entry is used as given, on a grid far
    too small for two, with the same bits as one thread."""
    u = rng.random((40, 50))
    one, info1 = _run(u, "box2d9p", 7, 1)
    two, info2 = _run(u, "box2d9p", 7, 2)
    three, info3 = _run(u, "box2d9p", 7, 3)
    assert (info1["threads"], info2["threads"], info3["threads"]) == (1, 2, 3)
    np.testing.assert_array_equal(one, two)
    np.testing.assert_array_equal(one, three)


_LARGE_CALL = (
    "import json, numpy as np, convstencil as cs\n"
    "cs.apply(np.random.rand(1024, 1024), 'heat2d', steps=10)\n"
    "print(json.dumps(cs.last_run_info()['threads']))\n")


@pytest.mark.parametrize("omp, want", [("1", 1), ("2", 2), ("3", 3)])
def test_omp_num_threads_is_the_ceiling(omp, want):
    """A call with work for many threads gets OMP_NUM_THREADS of them
    (with OMP_DYNAMIC=false, so that a busy test machine does not cut
    the team)."""
    assert _run_python(_LARGE_CALL, OMP_NUM_THREADS=omp,
                       OMP_DYNAMIC="false") == want


# ---------------------------------------------------------------------------
# the wait policy

_POLICY = (
    "import json, os, convstencil as cs\n"
    "from convstencil import _core\n"
    "print(json.dumps([os.environ.get('OMP_WAIT_POLICY'), "
    "_core.barrier_spin(), _core.BARRIER_SPIN_NS]))\n")


def test_wait_policy_default_is_passive_with_a_short_spin():
    policy, spin, default = _run_python(_POLICY)
    assert policy == "PASSIVE"
    assert spin == default > 0


@pytest.mark.parametrize("given, spin", [("active", -1), ("PASSIVE", 0),
                                         ("Passive", 0)])
def test_wait_policy_of_the_user_is_kept(given, spin):
    policy, got, _ = _run_python(_POLICY, OMP_WAIT_POLICY=given)
    assert policy == given
    assert got == spin


def test_gomp_spincount_of_the_user_is_kept():
    policy, spin, default = _run_python(_POLICY, GOMP_SPINCOUNT="1000")
    assert policy is None
    assert spin == default


# ---------------------------------------------------------------------------
# the barrier

@pytest.fixture
def barrier_spin():
    """Set the step barrier's spin for a test, and put it back."""
    before = _core.barrier_spin()
    yield _core.barrier_spin
    _core.barrier_spin(before)


@pytest.mark.parametrize("spin", [0, 2000, -1])
@pytest.mark.parametrize("name, shape", [("heat1d", (5000,)),
                                         ("heat2d", (70, 90)),
                                         ("box3d27p", (12, 13, 14))])
def test_barrier_steps_agree(barrier_spin, spin, name, shape, rng):
    """Many steps on two and three threads, the barrier sleeping at once,
    after a short spin and spinning only: the bits of one thread."""
    barrier_spin(spin)
    u = rng.random(shape)
    for mode in ("constant", "wrap"):
        one, _ = _run(u, name, 60, 1, mode)
        for nt in (2, 3):
            many, info = _run(u, name, 60, nt, mode)
            assert info["threads"] == nt
            np.testing.assert_array_equal(one, many)


def test_barrier_blocked_passes_agree(barrier_spin, rng):
    """The blocked path's passes (a barrier between two) on two threads,
    the barrier sleeping at once."""
    barrier_spin(0)
    u = rng.random((700, 800))
    one, info = _run(u, "heat2d", 40, 1)
    two, info2 = _run(u, "heat2d", 40, 2)
    assert info["path"] == info2["path"] == "direct-temporal-blocked"
    np.testing.assert_array_equal(one, two)
