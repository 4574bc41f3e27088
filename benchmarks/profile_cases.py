"""One apply() per preset on the GPU, for Nsight Compute to profile.

    ncu --kernel-name regex:tc2d --launch-count 4 --section ... \\
        python benchmarks/profile_cases.py --size 4096x4096 --steps 3

Runs each named preset (or "randomKxK", a full-rank K x K kernel of
random weights: common.kernel_of) once on each of the given backends
(random data), so a profiler sees the kernels of a realistic launch
without a benchmark's repetitions.
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

import convstencil as cs  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--presets",
                        default="heat2d,box2d9p,star2d13p,box2d49p")
    parser.add_argument("--backends", default="cuda-tc,cuda-core")
    parser.add_argument("--size", default="4096x4096")
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()
    shape = tuple(int(v) for v in args.size.split("x"))
    grid = np.random.default_rng().random(shape)
    for name in args.presets.split(","):
        weights = common.kernel_of(name)[0]
        for backend in args.backends.split(","):
            cs.apply(grid, weights=weights, steps=args.steps,
                     backend=backend)
            info = cs.last_run_info()
            seconds = info.get("device_seconds")
            print("%-10s %-9s %s depth %d%s" % (
                name, backend, info["path"], info["fused_depth"],
                "" if seconds is None
                else ": %.3f ms on the device" % (1e3 * seconds)),
                flush=True)


if __name__ == "__main__":
    main()
