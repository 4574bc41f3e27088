"""One apply() per scheme preset on the GPU, for Nsight Compute to profile.

    ncu --kernel-name regex:sst_kernel --launch-skip 2 --launch-count 1 \\
        --section SpeedOfLight --section ComputeWorkloadAnalysis \\
        --section InstructionStats --section WarpStateStats \\
        python benchmarks/profile_schemes.py --size 4096x4096 --steps 16

Runs each named preset of bench_schemes.py (the schemes as a user writes
them, on CuPy arrays of random data) twice as a warm-up and once more,
so that a profiler skipping the first launches sees a realistic one
without a benchmark's repetitions.  Prints the path and depth each ran.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_schemes  # noqa: E402

import convstencil as cs  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--presets",
                        default="wave2d,wave2d-velocity,gray-scott2d")
    parser.add_argument("--size", default="4096x4096")
    parser.add_argument("--steps", type=int, default=16)
    args = parser.parse_args()
    import cupy as cp
    shape = tuple(int(v) for v in args.size.split("x"))
    rng = cp.random.default_rng(7)
    for name in args.presets.split(","):
        scheme = bench_schemes.public_scheme(name)
        fields = tuple(rng.uniform(0.2, 1.2, shape)
                       for _ in scheme.fields)
        params = {p: rng.uniform(0.5, 1.5, shape)
                  for p in scheme.params} or None
        for _ in range(3):
            fields = cs.apply(fields, scheme, steps=args.steps,
                              params=params)
        cp.cuda.Device().synchronize()
        info = cs.last_run_info()
        print("%-16s %s depth %s" % (name, info.get("path"),
                                     info.get("fused_depth")), flush=True)


if __name__ == "__main__":
    main()
