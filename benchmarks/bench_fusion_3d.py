"""What fusing time steps buys the 3D presets on CUDA cores (cc3d).

For each 3D preset and depth d = 1..--max-depth it runs the composed
kernel (the preset's kernel convolved with itself d times, the kernel a
fused pass applies) as a custom kernel on the CUDA-core path, one pass
per step, and reports GStencils/s counting d time steps per pass: the
rate of the fused pass alone, without the band fix-ups that an exact
fused run adds for non-periodic modes.  Then it times the engine's own
plan for each preset end to end (backend "cuda-core", mode "constant",
band fix-ups included), with the fused depth it chose.

CUDA events (the engine's step loop, last_run_info()["device_seconds"]),
a warm-up, median of --repeat runs of at least --min-seconds, random
data, 512^3 by default.

    python benchmarks/bench_fusion_3d.py [--size 512x512x512]
        [--max-depth 3] [--save h100_3d_depth_cuda_core]
"""
import argparse
import math
import os
import sys

import numpy as np
import scipy.signal

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

import convstencil as cs  # noqa: E402

PRESETS = ("heat3d", "box3d27p")


def compose(w, depth):
    """The kernel of `depth` steps of w: w convolved with itself (direct
    sums, so taps outside the composed support stay exactly zero)."""
    out = w
    for _ in range(depth - 1):
        out = scipy.signal.convolve(out, w, method="direct")
    return out


def median_rate(grid, min_seconds, repeat, steps_per_pass=1,
                backend="cuda-core", **kwargs):
    """GStencils/s of apply(grid, backend=backend, **kwargs)
    (steps_per_pass time steps per engine step) and the last run's info."""
    cs.apply(grid, steps=2, backend=backend, **kwargs)  # warm-up
    per = cs.last_run_info()["device_seconds"] / 2
    steps = max(2, math.ceil(min_seconds / max(per, 1e-9)))
    steps += steps % 2  # whole fused passes
    times = []
    for _ in range(repeat):
        cs.apply(grid, steps=steps, backend=backend, **kwargs)
        times.append(cs.last_run_info()["device_seconds"])
    rate = grid.size * steps * steps_per_pass / float(np.median(times)) / 1e9
    return rate, steps, cs.last_run_info()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", default="512x512x512")
    ap.add_argument("--max-depth", type=int, default=3)
    ap.add_argument("--min-seconds", type=float, default=1.0)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--save", default="")
    args = ap.parse_args()
    os.environ.pop("CONVSTENCIL_CUDA_MAX_DEPTH", None)
    shape = common.parse_shape(args.size)
    prov = common.provenance(common.device_name())
    grid = np.random.default_rng(0).random(shape)
    records, rows = [], {}
    for name in PRESETS:
        w = cs.Stencil(name).weights
        for depth in range(1, args.max_depth + 1):
            wd = compose(w, depth)
            # the composed kernel as it is: the engine must not fuse it
            # further (it would fuse a 7-point star's depth 1)
            os.environ["CONVSTENCIL_CUDA_MAX_DEPTH"] = "1"
            rate, steps, info = median_rate(grid, args.min_seconds,
                                            args.repeat, depth, weights=wd)
            del os.environ["CONVSTENCIL_CUDA_MAX_DEPTH"]
            print("%-9s depth %d (kernel %s, pass only): %.1f GStencils/s"
                  % (name, depth, "x".join(map(str, wd.shape)), rate),
                  flush=True)
            rows.setdefault(name, {})[depth] = rate
            records.append(dict(prov, preset=name, shape=list(shape),
                                system="convstencil-cudacore-pass",
                                depth=depth, steps=steps * depth,
                                gstencils_per_s=rate))
        rate, steps, info = median_rate(grid, args.min_seconds, args.repeat,
                                        stencil=name)
        print("%-9s engine plan: depth %d, %.1f GStencils/s"
              % (name, info["fused_depth"], rate), flush=True)
        rows[name]["plan"] = (info["fused_depth"], rate)
        records.append(dict(prov, preset=name, shape=list(shape),
                            system="convstencil-cudacore", steps=steps,
                            depth=info["fused_depth"], gstencils_per_s=rate))
    md = ["# 3D presets: fused depth on CUDA cores (cc3d), %s" % args.size, "",
          "- device: %s" % prov["device"], "- date: %s" % prov["date"],
          "- commit: %s" % prov["commit"],
          "- command: `%s`" % prov["command"], "",
          "GStencils/s, every time step counted.  Depth d: the composed "
          "kernel of d steps run as one pass per d steps (the fused pass "
          "alone, no band fix-up).  Engine plan: `apply(grid, preset, "
          "backend=\"cuda-core\")`, mode constant, band fix-ups included.",
          "",
          "| preset | " + " | ".join("depth %d" % d for d in
                                     range(1, args.max_depth + 1))
          + " | engine plan (depth) |",
          "|---|" + "---|" * (args.max_depth + 1)]
    for name in PRESETS:
        r = rows[name]
        md.append("| %s | " % name
                  + " | ".join("%.1f" % r[d] for d in
                               range(1, args.max_depth + 1))
                  + " | %.1f (%d) |" % (r["plan"][1], r["plan"][0]))
    text = "\n".join(md) + "\n"
    print(text)
    if args.save:
        common.write_results(args.save, records, text)


if __name__ == "__main__":
    main()
