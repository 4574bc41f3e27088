"""The step loop's rate in every boundary mode.

The other GPU benchmarks run mode "constant" (the one CuPy and PyTorch
share).  This one times each preset in each mode through the public API,
as a user calls it: a GPU array of the end-to-end benchmark's size
(heat1d and 1d5p 2^27 points, 2D 10240^2, 3D 512^3), random data, 100
steps, backend "cuda"; the step loop's device time (CUDA events,
last_run_info()'s device_seconds), median of --repeat calls after a
warm-up.  The edges cost each mode differently (constant resets the
cells outside the grid, nearest, reflect and mirror map them, wrap reads
the periodic cells), so the table shows each mode's rate and its ratio
to constant's.

    python benchmarks/bench_modes.py --repeat 5 --save h100_modes

Needs CuPy (the arrays stay on the GPU, so no transfer is timed).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import convstencil as cs  # noqa: E402

MODES = ("constant", "wrap", "nearest", "reflect", "mirror")
STEPS = 100


def measure(cp, grid, name, mode, repeat):
    """One record: the median step-loop rate of `name` in `mode`."""
    out = cp.empty_like(grid)
    median, info = common.median_step_loop(
        lambda: cs.apply(grid, name, steps=STEPS, mode=mode, out=out),
        repeat)
    return {"preset": name, "shape": list(grid.shape), "steps": STEPS,
            "mode": mode, "path": info["path"],
            "fused_depth": info["fused_depth"], "device_seconds": median,
            "gstencils_per_s": grid.size * STEPS / median / 1e9}


def markdown(records, prov):
    lines = common.markdown_head(
        "Step-loop rate in every boundary mode", prov,
        "GStencils/s of 100 steps on a GPU array, backend \"cuda\", "
        "median of the repeats (in brackets: the ratio to mode "
        "constant's).", ["preset", "grid", "path (depth)"] + list(MODES))
    by_preset = {}
    for r in records:
        by_preset.setdefault(r["preset"], {})[r["mode"]] = r
    for name, modes in by_preset.items():
        base = modes["constant"]["gstencils_per_s"]
        cells = ["%.1f (%.2f)" % (modes[m]["gstencils_per_s"],
                                  modes[m]["gstencils_per_s"] / base)
                 for m in MODES]
        first = modes["constant"]
        lines.append("| %s | %s | %s (%d) | %s |" % (
            name, "x".join(map(str, first["shape"])), first["path"],
            first["fused_depth"], " | ".join(cells)))
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--presets", default=",".join(cs.PRESETS))
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--save", default="",
                        help="write results/NAME.json and NAME.md")
    args = parser.parse_args()
    import cupy as cp

    prov = common.provenance(common.device_name())
    records = []
    for name in args.presets.split(","):
        shape = common.GPU_SIZES[cs.Stencil(name).weights.ndim]
        grid = cp.random.random_sample(shape)
        for mode in MODES:
            rec = measure(cp, grid, name, mode, args.repeat)
            rec.update(prov)
            records.append(rec)
            print("%-10s %-9s %-12s depth %2d  %8.1f GStencils/s" % (
                name, mode, rec["path"], rec["fused_depth"],
                rec["gstencils_per_s"]), flush=True)
        del grid
    text = markdown(records, prov)
    print(text)
    if args.save:
        common.write_results(args.save, records, text)


if __name__ == "__main__":
    main()
