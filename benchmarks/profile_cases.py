"""One apply() per preset on the GPU, for Nsight Compute to profile.

    ncu --kernel-name regex:tc2d --launch-count 4 --section ... \\
        python benchmarks/profile_cases.py --size 4096x4096 --steps 3

Runs each named preset once on each of the given backends (random data),
so a profiler sees the kernels of a realistic launch without a
benchmark's repetitions.
"""
import argparse

import numpy as np

import convstencil as cs


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
        for backend in args.backends.split(","):
            cs.apply(grid, name, steps=args.steps, backend=backend)
            info = cs.last_run_info()
            print("%-10s %-9s %s depth %d: %.3f ms on the device"
                  % (name, backend, info["path"], info["fused_depth"],
                     1e3 * info["device_seconds"]), flush=True)


if __name__ == "__main__":
    main()
