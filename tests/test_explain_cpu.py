"""explain() tells the truth on the CPU: for every preset on the issue's
grids and 1 to 1000 steps, the engine's measured call over the model's
prediction (last_run_info()["fraction_of_prediction"]) lies between 0.75
and 1.33 on a quiet machine (issue 38), and each case is held to that.

Each case runs once to warm up, then a few times into one result array
(out=: a fresh result's page faults vary several-fold on a virtual
machine, and are priced apart); the fraction is the median call's over
the median prediction.  The bound is for a quiet machine, and a virtual
machine is not always quiet: its host may slow a core for a second or
more without a sign inside, and its memory is shared with other machines
(the memory probe's calls took 4.1 to 6.4 ms back to back:
benchmarks/results/cpu2_scales.md).
A team's call outside the bound counts only where the machine's cores
then run in parallel (_team_gain: a team of two at least PARALLEL_GAIN
times one thread's rate); a case none of whose attempts had them is
skipped, saying so.
So a case outside the bound is measured again, up to five attempts, each
after the scales are settled afresh as a new process settles them
(_model.measure_cpu_scale: about 5 s), and the attempt nearest 1 counts
(a call of one thread then on each core in turn: a core of a virtual
machine ran such calls 1.5 times as long as the other for the whole life
of a process).  A wrong plan or a mispriced path misses the bound in
every attempt; the failure says how much CPU other processes used
meanwhile.  About 40 s on two cores.  benchmarks/bench_explain_cpu.py
measures the full table (benchmarks/results/cpu2_explain_fractions*.md).
"""
import os
import time

import numpy as np
import pytest

import convstencil as cs
from convstencil import _model

LOW, HIGH = 0.75, 1.33  # the bound
ATTEMPTS = 5

# (preset, shape, steps): every preset at the sizes (1D at the
# 2D grids' point counts), 1 to 1000 steps where a call takes under a
# second or so
CASES = []
for _name in cs.PRESETS:
    _ndim = cs.Stencil(_name).weights.ndim
    if _ndim == 1:
        CASES += [(_name, (1 << 16,), s) for s in (1, 10, 100, 1000)]
        CASES += [(_name, (1 << 22,), s) for s in (1, 10, 100)]
    elif _ndim == 2:
        CASES += [(_name, (256, 256), s) for s in (1, 10, 100, 1000)]
        CASES += [(_name, (2048, 2048), s) for s in (1, 10, 100)]
    else:
        CASES += [(_name, (64,) * 3, s) for s in (1, 10, 100, 1000)]
        CASES += [(_name, (128,) * 3, s) for s in (1, 10, 100)]
        CASES += [(_name, (256,) * 3, s) for s in (1, 10)]
CASES += [("heat2d", (2048, 2048), 1000), ("heat3d", (256,) * 3, 100)]


def _busy_seconds():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / os.sysconf(
        "SC_CLK_TCK")


def _own_seconds():
    t = os.times()
    return t.user + t.system


def _measure(u, name, steps, out):
    """(fraction, cores other processes used meanwhile, record)."""
    cs.apply(u, name, steps=steps, out=out)
    first = cs.last_run_info()["wall_seconds"]
    repeat = 5 if first < 0.05 else 3
    walls, predicted = [], []
    b0, o0, t0 = _busy_seconds(), _own_seconds(), time.perf_counter()
    for _ in range(repeat):
        cs.apply(u, name, steps=steps, out=out)
        info = cs.last_run_info()
        walls.append(info["wall_seconds"])
        predicted.append(info["predicted_seconds"])
    wall = time.perf_counter() - t0
    others = max((_busy_seconds() - b0) - (_own_seconds() - o0), 0.0) / wall
    return np.median(walls) / np.median(predicted), others, info


# A team of two on a quiet machine runs the probe below 1.8 to 1.9 times
# as fast as one thread; on the 2-core AMD virtual machine the two cores
# have run it at 0.86 times one thread's rate for minutes at a time (the
# host running both virtual cores on one physical core, no steal time
# shown), when a call of two threads takes twice the model's price
PARALLEL_GAIN = 1.4


def _team_gain():
    """How many times one thread's rate a team of all cores runs the
    row kernel now (a 5-point step on 512^2, direct path)."""
    from convstencil import _engine
    w = np.zeros((3, 3))
    w[1, :] = w[:, 1] = 0.2
    u = np.random.default_rng(0).random((512, 512))
    out = np.empty_like(u)

    def seconds(threads):
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            _engine.run_host(u, w, out, steps=8, mode="constant", cval=0.0,
                             backend="cpu", threads=threads)
            times.append(time.perf_counter() - t0)
        return min(times)
    seconds(1)
    return seconds(1) / seconds(0)


def _settle_scales():
    """The compute and memory scales settled afresh, as a new process
    settles them at its first predictions (readings 2 s apart: the
    fastest compute reading, the median memory one)."""
    _model._cpu_measured.update(scale=1.0, memory=1.0, readings=[],
                                tries=0, at=0.0)
    for _ in range(_model.CPU_SCALE_TRIES - 1):
        _model.measure_cpu_scale()
        time.sleep(_model.CPU_SCALE_INTERVAL)
    return _model.measure_cpu_scale()


@pytest.fixture(scope="module")
def settled_scale():
    """The scales settled before the first case: a reading in a slow
    moment prices every call too high."""
    return _settle_scales()


@pytest.mark.skipif(not os.path.exists("/proc/stat"),
                    reason="the quiet-machine check reads /proc/stat")
@pytest.mark.parametrize("name, shape, steps", CASES)
def test_cpu_prediction_within_bounds(settled_scale, name, shape, steps):
    u = np.random.default_rng(0).random(shape)
    out = np.empty_like(u)
    # the attempt nearest 1 of up to ATTEMPTS; each after the first with
    # the scales settled afresh, and a call of one thread on each core in
    # turn, since a virtual machine's core may run slowly for seconds and
    # the scheduler keeps a process on the core it ran on
    best = last = None
    gains = []
    try:
        cores = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = []
    for attempt in range(ATTEMPTS):
        if attempt > 0:
            _settle_scales()
        pin = attempt > 0 and last[2]["threads"] == 1 and len(cores) > 1
        if pin:
            os.sched_setaffinity(0, {cores[attempt % len(cores)]})
        try:
            fraction, others, info = _measure(u, name, steps, out)
        finally:
            if pin:
                os.sched_setaffinity(0, cores)
        last = (fraction, others, info)
        if LOW <= fraction <= HIGH:
            best = last
            break
        # a team's call counts only where the cores ran in parallel
        if info["threads"] > 1:
            gains.append(_team_gain())
            if gains[-1] < PARALLEL_GAIN:
                continue
        if best is None or abs(np.log(fraction)) < abs(np.log(best[0])):
            best = last
    if best is None:
        pytest.skip("%s on %s, %d steps: in none of %d attempts did the "
                    "machine's cores run in parallel (a team ran %s times "
                    "one thread's rate; a quiet machine: 1.8 or more), and "
                    "the bound is for a quiet machine (the calls: measured / "
                    "predicted %.2f at best)"
                    % (name, shape, steps, ATTEMPTS,
                       ", ".join("%.2f" % g for g in gains), last[0]))
    fraction, others, info = best
    assert LOW <= fraction <= HIGH, (
        "%s on %s, %d steps: measured / predicted %.2f (path %s, depth %d, "
        "%d thread(s)); other processes used %.2f cores meanwhile"
        % (name, shape, steps, fraction, info["path"], info["fused_depth"],
           info["threads"], others))


def test_compute_scale_settles_on_the_fastest_reading(monkeypatch):
    """The compute scale is read again at later predictions, 2 s apart at
    the soonest and 3 times in all, and the fastest reading counts: one
    slow moment of a virtual machine does not price a process's runs.
    The memory scale is read at the same moments and settles on their
    median (memory's noise runs both ways)."""
    readings = iter([1.4, 0.95, 1.1, 0.5])
    memory = iter([1.2, 1.3, 0.8, 0.3])
    clock = [100.0]
    monkeypatch.setattr(_model, "_scale_on_cores", lambda: next(readings))
    monkeypatch.setattr(_model, "_memory_reading", lambda kc: next(memory))
    monkeypatch.setattr(_model, "_clock", lambda: clock[0])
    # readings in the units of the first stored machine's probe
    monkeypatch.setattr(_model, "cpu_stored", lambda: _model.CPU_STORED)
    monkeypatch.setattr(_model, "_cpu_measured",
                        {"scale": 1.0, "memory": 1.0, "readings": [],
                         "tries": 0, "at": 0.0})
    seen = []
    for advance in (0.0, 0.5, 2.0, 2.0, 2.0):
        clock[0] += advance
        seen.append((_model.measure_cpu_scale(), _model.cpu_memory_scale()))
    assert seen == [(1.4, 1.2), (1.4, 1.2), (0.95, 1.25), (0.95, 1.2),
                    (0.95, 1.2)]
    rates = _model.cpu_rates()
    assert (rates["compute_scale"], rates["memory_scale"]) == (0.95, 1.2)
    rates = _model.cpu_rates({"compute_scale": 2.0, "memory_scale": 1.5})
    assert (rates["compute_scale"], rates["memory_scale"]) == (2.0, 1.5)


def test_memory_reading_prices_the_probe(monkeypatch):
    """A memory reading is the probe's measured call over the model's
    price of it, its memory part alone scaled, within the bounds."""
    cost = _model.CpuCost(seconds=0.010, bound="memory", call=0.0,
                          setup=0.0, compute=0.002, memory=0.008, fresh=0.0)
    monkeypatch.setattr(_model, "cpu_time", lambda *a, **k: cost)
    for measured, want in ((0.010, 1.0), (0.008, 0.75), (0.1, 2.5),
                           (0.0, 0.4)):
        monkeypatch.setattr(_model, "_median_seconds",
                            lambda fn, repeat, m=measured: m)
        assert _model._memory_reading(1.0) == pytest.approx(want)

    def no_memory(*args, **kwargs):
        raise MemoryError
    monkeypatch.setattr(_model.np, "full", no_memory)
    assert _model._memory_reading(1.0) == 1.0


def test_stored_rates_follow_the_machine_kind(monkeypatch):
    """The model's stored rates are those fitted on this machine's kind
    (vendor and CPU family), the first stored ones for any other, and
    every kind's table prices the same keys."""
    assert _model.cpu_kind() == _model.cpu_kind.__wrapped__()
    for kind, table in _model.CPU_KINDS.items():
        assert set(table) == set(_model.CPU_STORED), kind
        monkeypatch.setattr(_model, "cpu_kind", lambda k=kind: k)
        assert _model.cpu_stored() is table
        rates = _model.cpu_rates({"compute_scale": 1.0, "memory_scale": 1.0})
        assert rates["tap_seconds"] == table["tap_seconds"]
    monkeypatch.setattr(_model, "cpu_kind", lambda: ("GenuineIntel", 6))
    assert _model.cpu_stored() is _model.CPU_STORED
    monkeypatch.setattr(_model, "cpu_kind", lambda: (None, None))
    assert _model.cpu_stored() is _model.CPU_STORED
