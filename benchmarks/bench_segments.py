"""tb2d's and tb3d's segments: the engine's choice against fixed counts.

tb2d (csrc/cuda/tb2d.cu) runs a 3 x 3 kernel `depth` steps per pass,
each warp streaming a 64-column strip down one segment of rows; tb3d
(csrc/cuda/tb3d.cu) a 3 x 3 x 3 one, each block streaming a tile of a
plane down one segment of planes.  How many segments a strip or tile is
cut into sets both the redundant rows or planes (2 depth per segment)
and how many rounds of warps or blocks the launch takes.  For each
grid, preset and depth this times one call of 30 passes on a CuPy array
of random data (the step loop's device time, CUDA events, median of
--repeat calls after a warm-up) with the engine's own choice and with
CONVSTENCIL_TB2D_SEGMENTS (CONVSTENCIL_TB3D_SEGMENTS) fixing the count,
and checks that every count gives the same numbers as the engine's
choice.

    python benchmarks/bench_segments.py --save h100_tb2d_segments
    python benchmarks/bench_segments.py --kernel tb3d --shapes 512x512x512 \
        --presets heat3d,box3d27p --depths 3 --counts 4,5,6,8,11 \
        --save h100_tb3d_segments
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import convstencil as cs  # noqa: E402
from convstencil import _model  # noqa: E402

PASSES = 30


def chosen_segments(kernel, shape, depth):
    """The count the engine picks for a radius-1 kernel (the model
    mirrors tb2d's choose_segments and tb3d's launch)."""
    if kernel == "tb3d":
        return _model.tb3d_segments(
            _model.tb3d_tiles(shape[1], shape[2], depth), shape[0], depth,
            _model.H100["sms"] * _model.TB3D_BLOCKS_PER_SM)
    own = _model.TB2D_STRIP - 2 * _model.tb2d_margin(depth, radius=1)
    strips = -(-shape[1] // own)
    resident = (_model.H100["sms"] * _model.TB2D_BLOCKS_PER_SM
                * _model.TB2D_WARPS)
    return _model.tb2d_segments(strips, shape[0], halo_rows=depth,
                                resident=resident)


def time_call(grid, out, name, steps, repeat, variable, segments):
    """Median device seconds and the run's record, segments fixed or not."""
    os.environ.pop(variable, None)
    if segments:
        os.environ[variable] = str(segments)
    try:
        cs.apply(grid, name, steps=steps, out=out, backend="cuda-core")
        seconds = []
        for _ in range(repeat):
            cs.apply(grid, name, steps=steps, out=out, backend="cuda-core")
            seconds.append(cs.last_run_info()["device_seconds"])
    finally:
        os.environ.pop(variable, None)
    return statistics.median(seconds), cs.last_run_info()


def measure(cp, kernel, shape, name, depth, counts, repeat):
    os.environ["CONVSTENCIL_CUDA_MAX_DEPTH"] = str(depth)
    grid = cp.random.random_sample(shape)
    steps = depth * PASSES
    out = cp.empty_like(grid)
    variable = "CONVSTENCIL_%s_SEGMENTS" % kernel.upper()
    t, info = time_call(grid, out, name, steps, repeat, variable, 0)
    if info["path"] != "cuda-core" or info["fused_depth"] != depth:
        raise RuntimeError("expected %s at depth %d, ran %r"
                           % (kernel, depth, info))
    want = out.copy()
    row = {"preset": name, "shape": list(shape), "depth": depth,
           "steps": steps, "chosen": chosen_segments(kernel, shape, depth),
           "chosen_gstencils": grid.size * steps / t / 1e9, "fixed": {}}
    for n in counts:
        t, _ = time_call(grid, out, name, steps, repeat, variable, n)
        if not bool(cp.array_equal(out, want)):
            raise RuntimeError("%d segments changed the result" % n)
        row["fixed"][str(n)] = grid.size * steps / t / 1e9
    os.environ.pop("CONVSTENCIL_CUDA_MAX_DEPTH", None)
    return row


def markdown(kernel, meta, counts, rows):
    unit = "tile" if kernel == "tb3d" else "strip"
    lines = ["# %s: segments per %s" % (kernel, unit), "",
             common.provenance_sentence(meta), "",
             "G stencils/s of the step loop (%d passes of `depth` steps on a "
             "CuPy array, device time, median of the repeats) with the "
             "engine's choice of segments per %s and with the count "
             "fixed; every count gave the engine's result bit for bit."
             % (PASSES, unit), "",
             "| grid | preset | depth | chosen (count) | "
             + " | ".join(str(n) for n in counts) + " | best fixed |",
             "|---" * (5 + len(counts)) + "|"]
    for r in rows:
        fixed = [r["fixed"][str(n)] for n in counts]
        best = max(range(len(counts)), key=lambda i: fixed[i])
        lines.append("| %s | %s | %d | %.0f (%d) | %s | %d |" % (
            "x".join(map(str, r["shape"])), r["preset"], r["depth"],
            r["chosen_gstencils"], r["chosen"],
            " | ".join("%.0f" % v for v in fixed), counts[best]))
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kernel", choices=("tb2d", "tb3d"), default="tb2d")
    parser.add_argument("--shapes", default="10240x10240,10000x10007,"
                        "4096x4096,2048x2048,1024x1024")
    parser.add_argument("--presets", default="heat2d,box2d9p")
    parser.add_argument("--depths", default="4,8")
    parser.add_argument("--counts", default="4,8,16,32,64,128,256")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--save", default="")
    args = parser.parse_args()
    import cupy as cp
    counts = [int(n) for n in args.counts.split(",")]
    rows = []
    for shape in (common.parse_shape(s) for s in args.shapes.split(",")):
        for name in args.presets.split(","):
            for depth in (int(d) for d in args.depths.split(",")):
                r = measure(cp, args.kernel, shape, name, depth, counts,
                            args.repeat)
                print("%-12s %-8s depth %d chosen %4d: %6.1f | %s" % (
                    "x".join(map(str, shape)), name, depth, r["chosen"],
                    r["chosen_gstencils"], " ".join(
                        "%d:%.0f" % (n, r["fixed"][str(n)]) for n in counts)),
                    flush=True)
                rows.append(r)
    meta = common.provenance(common.device_name())
    text = markdown(args.kernel, meta, counts, rows)
    print(text)
    if args.save:
        common.write_results(args.save, {"meta": meta, "rows": rows}, text)


if __name__ == "__main__":
    main()
