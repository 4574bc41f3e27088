"""Tensor cores (tc3d) against CUDA cores (cc3d) for the 3D kernels that
`auto` sends to cc3d: random cubes of side 3 and 5 (every tap) and
1-norm balls of side 5 and 7 (a 7-point star's fused powers).

Each kernel runs one step per pass on both paths (CONVSTENCIL_CUDA_MAX_DEPTH
=1), timed like bench_fusion_3d.py: the engine's step loop with CUDA
events, a warm-up, median of --repeat runs of at least --min-seconds,
random data, mode constant, 512^3 by default.  Before timing, both paths
are checked against the CPU engine on a small grid.

    python benchmarks/bench_paths_3d.py [--size 512x512x512]
        [--save h100_3d_paths]
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from bench_fusion_3d import median_rate  # noqa: E402

import convstencil as cs  # noqa: E402


def kernels(rng):
    """(name, weights) of the kernels compared; sum(|w|) == 1."""
    out = []
    for side, ball in ((3, False), (5, False), (5, True), (7, True)):
        w = rng.uniform(0.1, 1.0, (side, side, side))
        if ball:
            z, y, x = np.indices(w.shape) - side // 2
            w[np.abs(z) + np.abs(y) + np.abs(x) > side // 2] = 0.0
        out.append(("%s %dx%dx%d" % ("ball" if ball else "box", side, side,
                                     side), w / w.sum()))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", default="512x512x512")
    ap.add_argument("--min-seconds", type=float, default=1.0)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--save", default="")
    args = ap.parse_args()
    os.environ["CONVSTENCIL_CUDA_MAX_DEPTH"] = "1"
    shape = common.parse_shape(args.size)
    prov = common.provenance(common.device_name())
    rng = np.random.default_rng(0)
    grid = rng.random(shape)
    small = rng.random((19, 33, 70))
    records, lines = [], []
    for name, w in kernels(rng):
        want = cs.apply(small, weights=w, steps=2, backend="cpu")
        rates = {}
        for backend in ("cuda-tc", "cuda-core"):
            got = cs.apply(small, weights=w, steps=2, backend=backend)
            err = np.linalg.norm(got - want) / np.linalg.norm(want)
            if not err <= 1e-12:
                sys.exit("%s on %s: relative error %.2e" % (name, backend,
                                                            err))
            rate, steps, info = median_rate(grid, args.min_seconds,
                                            args.repeat, backend=backend,
                                            weights=w)
            rates[backend] = rate
            records.append(dict(prov, kernel=name, shape=list(shape),
                                system="convstencil-" + info["path"],
                                steps=steps, gstencils_per_s=rate))
        cs.apply(small, weights=w, backend="cuda")
        picked = cs.last_run_info()["path"]
        line = "| %s | %.1f | %.1f | %s |" % (name, rates["cuda-tc"],
                                             rates["cuda-core"], picked)
        print(line, flush=True)
        lines.append(line)
    text = "\n".join(
        ["# 3D kernels: tensor cores (tc3d) and CUDA cores (cc3d), %s"
         % args.size, "",
         "- device: %s" % prov["device"], "- date: %s" % prov["date"],
         "- commit: %s" % prov["commit"], "- command: `%s`" % prov["command"],
         "",
         "GStencils/s, one step per pass on both paths, mode constant, "
         "random data and random positive weights (both paths checked "
         "against the CPU engine first).",
         "",
         "| kernel | tensor cores | CUDA cores | auto picks |",
         "|---|---|---|---|"] + lines) + "\n"
    print(text)
    if args.save:
        common.write_results(args.save, records, text)


if __name__ == "__main__":
    main()
