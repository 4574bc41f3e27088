"""explain()'s predicted step-loop time against the measured one.

For every preset, on a GPU array of the end-to-end benchmark's size
(heat1d and 1d5p 2^27 points, 2D 10240^2, 3D 512^3), random data, 100
steps: the step loop's device time (CUDA events, last_run_info()'s
device_seconds) of --repeat calls after a warm-up, median, against
convstencil.explain()'s prediction for the same call.  The goal: within
25% (a fraction of the prediction between 0.75 and 1.25).

    python benchmarks/bench_explain.py --repeat 5 --save h100_explain

Needs CuPy (the arrays stay on the GPU, so no transfer is timed).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import convstencil as cs  # noqa: E402


def measure(cp, name, steps, repeat):
    shape = common.GPU_SIZES[cs.Stencil(name).weights.ndim]
    grid = cp.random.random_sample(shape)
    out = cp.empty_like(grid)
    measured, info = common.median_step_loop(
        lambda: cs.apply(grid, name, steps=steps, out=out), repeat)
    plan = cs.explain(shape, name, steps=steps, backend="cuda")
    return {"preset": name, "shape": list(shape), "steps": steps,
            "path": info["path"], "fused_depth": info["fused_depth"],
            "measured_seconds": measured,
            "predicted_seconds": plan.predicted_seconds,
            "bound": plan.bound,
            "fraction": measured / plan.predicted_seconds}


def markdown(meta, rows):
    lines = common.markdown_head(
        "explain(): predicted against measured step loops", meta,
        "Step loop of one 100-step call on a CuPy array (device time,"
        " median of the repeats) against explain()'s prediction; the"
        " goal is a fraction between 0.75 and 1.25.",
        ["preset", "grid", "path", "depth", "predicted ms", "measured ms",
         "fraction", "bound"])
    for r in rows:
        lines.append("| %s | %s | %s | %d | %.2f | %.2f | %.2f | %s |" % (
            r["preset"], "x".join(map(str, r["shape"])), r["path"],
            r["fused_depth"], 1e3 * r["predicted_seconds"],
            1e3 * r["measured_seconds"], r["fraction"], r["bound"]))
    worst = max(rows, key=lambda r: abs(r["fraction"] - 1.0))
    lines += ["", "Farthest from its prediction: %s at %.2f." % (
        worst["preset"], worst["fraction"]), ""]
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--save", default="")
    args = parser.parse_args()
    import cupy as cp
    rows = []
    for name in cs.PRESETS:
        r = measure(cp, name, args.steps, args.repeat)
        print("%-10s predicted %8.2f ms measured %8.2f ms fraction %.2f %s"
              % (name, 1e3 * r["predicted_seconds"],
                 1e3 * r["measured_seconds"], r["fraction"], r["bound"]))
        rows.append(r)
    meta = common.provenance(common.device_name())
    text = markdown(meta, rows)
    print(text)
    if args.save:
        common.write_results(args.save, {"meta": meta, "rows": rows}, text)


if __name__ == "__main__":
    main()
