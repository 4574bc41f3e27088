"""The CPU model's two measured scales, read many times: how much they move.

explain() on the CPU scales its stored rates by two figures it measures
in the running process (src/convstencil/_model.py): the compute scale
(a short run of the engine's row kernel on each of up to four cores, the
fastest kept) and the memory scale (a memory-bound probe, a 3-point
stencil over 2^22 points, one step, against the model's price of it).
Their noise is what the model and tests/test_explain_cpu.py are built
around; this measures it, in one process and across fresh ones:

  probe calls        the probe's call back to back (--calls), wall ms each
  readings           _model._scale_on_cores() and _model._memory_reading()
                     at the same moments, --readings times, --gap s apart
  processes          the scales as a fresh process settles them
                     (_model.cpu_rates() after the settling readings),
                     in --processes processes, --gap s apart

    python benchmarks/bench_cpu_scales.py [--calls 40] [--readings 10]
        [--gap 2] [--processes 5] [--save NAME]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

from convstencil import _engine, _model  # noqa: E402

SETTLED = """
import json, time
from convstencil import _model
for _ in range(_model.CPU_SCALE_TRIES - 1):
    _model.measure_cpu_scale()
    time.sleep(_model.CPU_SCALE_INTERVAL)
rates = _model.cpu_rates()
print(json.dumps({"compute_scale": rates["compute_scale"],
                  "memory_scale": rates["memory_scale"]}))
"""


def probe_calls(calls):
    """Wall seconds of each of `calls` back-to-back calls of the memory
    probe (after one that maps its pages)."""
    w = np.array([0.25, 0.5, 0.25])
    u = np.full(_model.CPU_MEMORY_PROBE_POINTS, 0.5)
    out = np.empty_like(u)

    def run():
        _engine.run_host(u, w, out, steps=1, mode="constant", cval=0.0,
                         backend="cpu", threads=0)
    run()
    return _model._call_seconds(run, calls)


def readings(count, gap):
    """(compute, memory) readings at `count` moments `gap` s apart."""
    got = []
    for i in range(count):
        if i:
            time.sleep(gap)
        compute = _model._scale_on_cores()
        got.append((compute, _model._memory_reading(compute)))
    return got


def settled_in_processes(count, gap):
    got = []
    for i in range(count):
        if i:
            time.sleep(gap)
        out = subprocess.run([sys.executable, "-c", SETTLED],
                             capture_output=True, text=True, check=True)
        got.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return got


def spread(values):
    return "%.3g / %.3g / %.3g" % (min(values), statistics.median(values),
                                   max(values))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--readings", type=int, default=10)
    parser.add_argument("--gap", type=float, default=2.0)
    parser.add_argument("--processes", type=int, default=5)
    parser.add_argument("--save", default="")
    args = parser.parse_args()

    prov = common.provenance(common.cpu_name())
    calls = probe_calls(args.calls)
    read = readings(args.readings, args.gap)
    settled = settled_in_processes(args.processes, args.gap)
    compute = [c for c, _ in read]
    memory = [m for _, m in read]
    records = [
        dict(prov, system="cpu-memory-probe", calls_seconds=calls),
        dict(prov, system="cpu-scale-readings", compute=compute,
             memory=memory, gap_seconds=args.gap),
        dict(prov, system="cpu-scales-settled", processes=settled,
             gap_seconds=args.gap)]
    lines = common.markdown_head(
        "The CPU model's measured scales, read again and again", prov,
        "The memory probe's call back to back (%d calls, after one that "
        "maps its pages); the compute and memory readings at %d moments "
        "%.0f s apart in one process; the scales as %d fresh processes "
        "settle them (%d readings %.0f s apart each), %.0f s apart.  "
        "min / median / max." % (args.calls, args.readings, args.gap,
                                 args.processes, _model.CPU_SCALE_TRIES,
                                 _model.CPU_SCALE_INTERVAL, args.gap),
        ["what", "min / median / max", "each"])
    lines.append("| probe call, ms | %s | %s |" % (
        spread([1e3 * s for s in calls]),
        " ".join("%.2f" % (1e3 * s) for s in calls)))
    lines.append("| compute reading | %s | %s |" % (
        spread(compute), " ".join("%.3f" % v for v in compute)))
    lines.append("| memory reading | %s | %s |" % (
        spread(memory), " ".join("%.3f" % v for v in memory)))
    for key in ("compute_scale", "memory_scale"):
        values = [p[key] for p in settled]
        lines.append("| %s, settled in a process | %s | %s |" % (
            key.replace("_", " "), spread(values),
            " ".join("%.3f" % v for v in values)))
    md = "\n".join(lines) + "\n"
    print(md)
    if args.save:
        common.write_results(args.save, records, md)


if __name__ == "__main__":
    main()
