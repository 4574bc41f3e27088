"""explain()'s CPU prediction against the measured call.

For every preset on the issue's grids (2D 256^2 and 2048^2; 3D 64^3,
128^3 and 256^3; 1D 2^16 and 2^22 points, as many as the 2D grids) and
1 to 1000 steps, random data, mode "constant": the median wall time of
the engine call (last_run_info()["wall_seconds"]) over --repeat calls
after a warm-up, against last_run_info()["predicted_seconds"] (the
model's price of the plan the engine ran, src/convstencil/_model.py).
The goal is a fraction (measured / predicted) between 0.75 and 1.33 on a
quiet machine; the CPU time that other processes used during each case
is printed beside it.

    python benchmarks/bench_explain_cpu.py [--repeat 5] [--fresh]
        [--steps 1,3,10,30,100,300,1000] [--save NAME] [--fit]
        [--load A.json,B.json]

By default each call writes into one result array (out=), so that the
figures do not depend on the page faults of a fresh result; --fresh lets
apply() allocate one every call (the model adds their first touch).
--fit fits the model's stored rates (_model.CPU_STORED) to the cases
measured (or to the rows of the saved runs --load names), in the units
of this process's scales, and prints them.  The engine chooses its team;
OMP_NUM_THREADS=1 in the environment measures one thread (the fit wants
both).
"""
import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

import convstencil as cs  # noqa: E402
from convstencil import _model  # noqa: E402

SIZES = {1: [(1 << 16,), (1 << 22,)], 2: [(256, 256), (2048, 2048)],
         3: [(64, 64, 64), (128, 128, 128), (256, 256, 256)]}
STEPS = (1, 3, 10, 30, 100, 300, 1000)


def busy_seconds():
    """CPU seconds every process of the machine has used (/proc/stat)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / os.sysconf(
        "SC_CLK_TCK")


def own_seconds():
    t = os.times()
    return t.user + t.system


def measure(u, name, steps, repeat, fresh, budget):
    """(median wall seconds, median predicted, record, others' cores)."""
    out = None if fresh else np.empty_like(u)
    cs.apply(u, name, steps=steps, out=out)
    first = cs.last_run_info()["wall_seconds"]
    repeat = int(max(1, min(repeat, budget / max(first, 1e-6))))
    walls, preds = [], []
    b0, o0, t0 = busy_seconds(), own_seconds(), time.perf_counter()
    for _ in range(repeat):
        cs.apply(u, name, steps=steps, out=out)
        info = cs.last_run_info()
        walls.append(info["wall_seconds"])
        preds.append(info["predicted_seconds"])
    wall = time.perf_counter() - t0
    others = max((busy_seconds() - b0) - (own_seconds() - o0), 0.0) / wall
    return (float(np.median(walls)), float(np.median(preds)), info, others,
            walls)


def run_cases(args):
    rows = []
    steps_list = [int(s) for s in args.steps.split(",")]
    for name in cs.PRESETS:
        w = cs.Stencil(name).weights
        for shape in SIZES[w.ndim]:
            u = np.random.default_rng(0).random(shape)
            for steps in steps_list:
                wall, pred, info, others, walls = measure(
                    u, name, steps, args.repeat, args.fresh, args.budget)
                r = {"preset": name, "shape": list(shape), "steps": steps,
                     "path": info["path"], "fused_depth":
                     info["fused_depth"], "threads": info["threads"],
                     "measured_seconds": wall, "predicted_seconds": pred,
                     "fraction": wall / pred, "others_cores": others,
                     "walls": walls, "fresh_out": args.fresh}
                rows.append(r)
                print("%-9s %-13s %5d %-23s T=%-3d nt=%d measured %9.3g "
                      "predicted %9.3g fraction %5.2f  others %.2f" % (
                          name, "x".join(map(str, shape)), steps,
                          info["path"], info["fused_depth"],
                          info["threads"], wall, pred, wall / pred,
                          others), flush=True)
                if wall * len(walls) > args.budget * 4:
                    break
    return rows


def fit(rows):
    """The stored rates that fit `rows` best (least squares on the log of
    the fraction, soft outliers), on this machine (its compute scale
    taken as 1); fresh_seconds_per_byte is kept unless a row allocated
    a fresh result.  Rows of one thread and of a team both belong in the
    fit (--threads 1 measures the first)."""
    from scipy.optimize import least_squares
    rates = _model.cpu_rates({"compute_scale": 1.0, "memory_scale": 1.0})
    keys = [(k, d) for k in ("setup_seconds", "point_seconds",
                             "ring_point_seconds", "spill_factor")
            for d in (1, 2, 3)]
    # the memory probe is 1D: the other dimensions' traffic against it
    keys += [("memory_dim_factor", 2), ("memory_dim_factor", 3)]
    keys += [(k, None) for k in ("call_seconds", "tap_seconds",
                                 "ring_tap_seconds", "thread_gain",
                                 "memory_thread_gain",
                                 "row_radius_seconds", "sync_seconds",
                                 "cache_bandwidth", "bandwidth")]
    if any(r["fresh_out"] for r in rows):
        keys.append(("fresh_seconds_per_byte", None))
    cases = []
    for r in rows:
        w = cs.Stencil(r["preset"]).weights
        plan = _model.cpu_plan(r["shape"], w, "constant", r["steps"],
                               r["threads"])
        cases.append((plan, r))

    def unpack(x):
        trial = dict(rates)
        for (k, d), v in zip(keys, np.exp(x)):
            if d is None:
                trial[k] = v
            else:
                trial[k] = dict(trial[k])
                trial[k][d] = v
        return trial

    def residuals(x):
        trial = unpack(x)
        return [np.log(_model.cpu_time(plan, r["shape"], r["steps"], trial,
                                       r["fresh_out"]).seconds
                       / r["measured_seconds"]) for plan, r in cases]

    x0 = np.log([rates[k] if d is None else rates[k][d] for k, d in keys])
    best = least_squares(residuals, x0, loss="soft_l1", f_scale=0.1)
    return unpack(best.x), np.exp(-np.array(best.fun))


def markdown(meta, rows, args):
    lines = common.markdown_head(
        "explain() on the CPU: predicted against measured calls", meta,
        "Each call's engine time (last_run_info()['wall_seconds'], median"
        " of up to %d calls after a warm-up) against the model's price of"
        " the plan the engine ran; the goal is a fraction between 0.75 and"
        " 1.33. %s 'others': cores other processes used meanwhile."
        % (args.repeat, "apply() allocated a fresh result every call."
           if args.fresh else "Every call wrote into one result (out=)."),
        ["preset", "grid", "steps", "path", "T", "threads", "predicted ms",
         "measured ms", "fraction", "others"])
    for r in rows:
        lines.append("| %s | %s | %d | %s | %d | %d | %.3g | %.3g | %.2f "
                     "| %.2f |" % (
                         r["preset"], "x".join(map(str, r["shape"])),
                         r["steps"], r["path"], r["fused_depth"],
                         r["threads"], 1e3 * r["predicted_seconds"],
                         1e3 * r["measured_seconds"], r["fraction"],
                         r["others_cores"]))
    f = [r["fraction"] for r in rows]
    inside = sum(0.75 <= x <= 1.33 for x in f)
    lines += ["", "Fractions: %.2f to %.2f (median %.2f); %d of %d within "
              "0.75 to 1.33." % (min(f), max(f), float(np.median(f)),
                                 inside, len(f)), ""]
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--budget", type=float, default=3.0,
                        help="seconds of calls a case at most (fewer "
                        "repeats for long calls)")
    parser.add_argument("--steps", default=",".join(map(str, STEPS)))
    parser.add_argument("--fresh", action="store_true")
    parser.add_argument("--save", default="")
    parser.add_argument("--fit", action="store_true")
    parser.add_argument("--load", default="",
                        help="fit the rows of a saved JSON instead")
    args = parser.parse_args()
    scale = _model.measure_cpu_scale()
    print("this machine's compute scale against the stored one: %.3f"
          % scale)
    if args.load:
        rows = []
        for path in args.load.split(","):
            with open(path) as f:
                rows += json.load(f)["rows"]
    else:
        rows = run_cases(args)
    if args.fit:
        rates, fractions = fit(rows)
        print("fitted (on this machine):")
        for k in _model.CPU_STORED:
            v = rates[k]
            print("    %r: %s," % (k, {d: float("%.3g" % x) for d, x in
                                       v.items()} if isinstance(v, dict)
                                   else "%.3g" % v))
        print("fractions after the fit: %.2f to %.2f"
              % (fractions.min(), fractions.max()))
    meta = common.provenance("%s, %d cores" % (
        common.cpu_name(), len(os.sched_getaffinity(0))))
    meta["compute_scale"] = scale
    meta["memory_scale"] = _model.cpu_memory_scale()
    text = markdown(meta, rows, args)
    print(text)
    if args.save:
        common.write_results(args.save, {"meta": meta, "rows": rows}, text)


if __name__ == "__main__":
    main()
