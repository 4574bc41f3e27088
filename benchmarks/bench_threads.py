"""The CPU engine's thread count: where a second thread starts to pay, and
how a small call behaves next to a CPU-bound process.

    python benchmarks/bench_threads.py crossover [--steps 1,10] [--save NAME]
    python benchmarks/bench_threads.py loaded [--calls 300] [--save NAME]

crossover: for grids around the engine's thresholds (csrc/cpu/threads.h),
the per-call median of the engine forced to one thread and to two
(the engine's own entry with an explicit thread count), interleaved in
blocks, and the ratio two / one; the "units" column is the work of one
step as the engine counts it (points x (row taps + CS_THREADS_POINT_TAPS),
the row taps from _core.plan_cpu where that exists).

loaded: starts one CPU-bound process (a Python busy loop), then times
`--calls` calls of one step of a 3x3 Laplacian on 256^2 (the issue's call)
with convstencil.apply and with scipy.ndimage.correlate, interleaved in
blocks, and a few larger calls with the engine's own thread count against
one thread; prints per-call median and mean, then stops the process.

Both print how much CPU other processes used during the run, so that a
figure taken on a shared machine can be judged.  --save NAME appends
what was printed, with the machine, date, commit and command, to
benchmarks/results/NAME.md.
"""
import argparse
import os
import subprocess
import sys
import time

import numpy as np
import scipy.ndimage as ndi

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

import convstencil as cs  # noqa: E402
from convstencil import _core, _engine  # noqa: E402

LAPLACIAN = np.array([[0, 1, 0], [1, -4, 1], [0, 1, 0]], float)


def machine_busy_seconds():
    """CPU seconds every process of the machine has used (/proc/stat)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / os.sysconf(
        "SC_CLK_TCK")


class OthersMeter:
    """CPU that processes other than this one (and `exclude`) used while
    it was open, in cores (1.0: one core busy all along)."""

    def __init__(self, exclude=()):
        self.exclude = exclude

    def _own(self):
        t = os.times()
        own = t.user + t.system
        for pid in self.exclude:
            with open("/proc/%d/stat" % pid) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            own += (int(fields[11]) + int(fields[12])) / os.sysconf(
                "SC_CLK_TCK")
        return own

    def __enter__(self):
        self.t0, self.b0, self.o0 = (time.perf_counter(),
                                     machine_busy_seconds(), self._own())
        return self

    def __exit__(self, *exc):
        wall = time.perf_counter() - self.t0
        others = (machine_busy_seconds() - self.b0) - (self._own() - self.o0)
        self.cores = max(others, 0.0) / wall
        return False


def per_call(fn, calls, blocks=5):
    """Per-call seconds of `calls` calls of each fn in `fn` (a dict),
    interleaved in `blocks` blocks after one call of each."""
    for f in fn.values():
        f()
    times = {k: [] for k in fn}
    for _ in range(blocks):
        for k, f in fn.items():
            for _ in range(max(calls // blocks, 1)):
                t0 = time.perf_counter()
                f()
                times[k].append(time.perf_counter() - t0)
    return {k: np.array(v) for k, v in times.items()}


def engine_call(u, w, out, steps, threads):
    return lambda: _engine.run_host(u, w, out, steps=steps, mode="constant",
                                    cval=0.0, backend="cpu",
                                    threads=threads)


def step_units(shape, w):
    """The engine's work of one step (csrc/cpu/threads.h)."""
    taps = float(np.count_nonzero(w))
    plan_cpu = getattr(_core, "plan_cpu", None)
    if plan_cpu is not None:
        taps = plan_cpu(tuple(shape), w, _core.MODE_CONSTANT, 1,
                        threads=1)["row_taps"]
    # 16: CS_THREADS_POINT_TAPS (csrc/cpu/threads.h)
    return float(np.prod(shape)) * (taps + getattr(
        _core, "THREADS_POINT_TAPS", 16.0))


CROSSOVER = [("heat2d", (n, n)) for n in (128, 181, 256, 362, 512, 724,
                                          1024)] \
    + [("box2d49p", (n, n)) for n in (128, 181, 256, 362, 512)] \
    + [("heat3d", (n, n, n)) for n in (24, 32, 48, 64, 80, 101)] \
    + [("heat1d", (n,)) for n in (1 << 14, 1 << 16, 1 << 18, 1 << 19,
                                   1 << 20)]


def crossover(steps_list):
    print("%-9s %-12s %5s %10s %10s %10s %6s" % (
        "preset", "grid", "steps", "units", "1t ms", "2t ms", "2t/1t"))
    with OthersMeter() as meter:
        for name, shape in CROSSOVER:
            w = np.ascontiguousarray(cs.Stencil(name).weights)
            u = np.random.rand(*shape)
            out = np.empty_like(u)
            units = step_units(shape, w)
            for steps in steps_list:
                calls = int(min(200, max(10, 2e8 / (units * steps))))
                t = per_call({1: engine_call(u, w, out, steps, 1),
                              2: engine_call(u, w, out, steps, 2)}, calls)
                one, two = np.median(t[1]), np.median(t[2])
                print("%-9s %-12s %5d %10.3g %10.4f %10.4f %6.2f" % (
                    name, "x".join(map(str, shape)), steps, units,
                    1e3 * one, 1e3 * two, two / one), flush=True)
    print("other processes used %.2f cores meanwhile" % meter.cores)


LOADED = [("heat2d", (362, 362), 10), ("heat2d", (512, 512), 10),
          ("box2d49p", (256, 256), 10), ("heat3d", (64, 64, 64), 20),
          ("heat2d", (2048, 2048), 20)]


def loaded(calls):
    competitor = subprocess.Popen([sys.executable, "-c",
                                   "while True: pass"])
    try:
        time.sleep(0.5)
        with OthersMeter(exclude=(competitor.pid,)) as meter:
            u = np.random.rand(256, 256)
            t = per_call({
                "convstencil": lambda: cs.apply(u, weights=LAPLACIAN),
                "scipy": lambda: ndi.correlate(u, LAPLACIAN,
                                               mode="constant")}, calls)
            threads = cs.last_run_info()["threads"]
            print("one CPU-bound process running; %d calls each, per call:"
                  % calls)
            for k, v in t.items():
                print("  %-12s median %.3f ms  mean %.3f ms  90th %.3f ms"
                      % (k, 1e3 * np.median(v), 1e3 * v.mean(),
                         1e3 * np.percentile(v, 90)))
            print("  convstencil ran on %d thread(s); convstencil / scipy: "
                  "median %.2f, mean %.2f" % (
                      threads, np.median(t["convstencil"])
                      / np.median(t["scipy"]),
                      t["convstencil"].mean() / t["scipy"].mean()))
            print("%-9s %-12s %5s %8s %10s %10s" % (
                "preset", "grid", "steps", "threads", "own ms", "1t ms"))
            for name, shape, steps in LOADED:
                w = np.ascontiguousarray(cs.Stencil(name).weights)
                g = np.random.rand(*shape)
                out = np.empty_like(g)
                n = int(min(100, max(5, 2e8 / (g.size * 20 * steps))))
                t = per_call({0: engine_call(g, w, out, steps, 0),
                              1: engine_call(g, w, out, steps, 1)}, n)
                nt = _engine.run_host(g, w, out, steps=steps,
                                      mode="constant", cval=0.0,
                                      backend="cpu")["threads"]
                print("%-9s %-12s %5d %8d %10.3f %10.3f" % (
                    name, "x".join(map(str, shape)), steps, nt,
                    1e3 * np.median(t[0]), 1e3 * np.median(t[1])),
                      flush=True)
    finally:
        competitor.kill()
        competitor.wait()
    print("processes other than these two used %.2f cores meanwhile"
          % meter.cores)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("what", choices=("crossover", "loaded"))
    parser.add_argument("--steps", default="1,10",
                        help="crossover: step counts, comma-separated")
    parser.add_argument("--calls", type=int, default=300,
                        help="loaded: calls of each")
    parser.add_argument("--save", default="",
                        help="append the output to benchmarks/results/"
                        "NAME.md")
    args = parser.parse_args()
    if args.save:
        sys.stdout = Tee(sys.stdout)
    print("%d cores (%s), OMP_WAIT_POLICY=%s, OMP_NUM_THREADS=%s, "
          "convstencil %s" % (
              len(os.sched_getaffinity(0)), _cpu_model(),
              os.environ.get("OMP_WAIT_POLICY"),
              os.environ.get("OMP_NUM_THREADS"), cs.__file__))
    if args.what == "crossover":
        crossover([int(s) for s in args.steps.split(",")])
    else:
        loaded(args.calls)
    if args.save:
        save(args.save, args.what, sys.stdout.lines)


class Tee:
    """Standard output that also keeps what was written."""

    def __init__(self, stream):
        self.stream, self.lines = stream, []

    def write(self, text):
        self.lines.append(text)
        return self.stream.write(text)

    def flush(self):
        self.stream.flush()


def save(stem, what, lines):
    """Append one run's output to results/<stem>.md under its provenance."""
    prov = common.provenance("%s, %d cores" % (
        common.cpu_name(), len(os.sched_getaffinity(0))))
    path = os.path.join(common.RESULTS, stem + ".md")
    new = not os.path.exists(path)
    with open(path, "a") as f:
        if new:
            f.write("# The CPU engine's thread count (bench_threads.py)\n")
        f.write("\n## %s\n\n%s\n\n```\n%s```\n" % (
            what, common.provenance_sentence(prov), "".join(lines)))
    sys.stdout.stream.write("appended to %s\n" % path)


def _cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


if __name__ == "__main__":
    main()
