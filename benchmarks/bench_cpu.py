"""CPU benchmark: convstencil's C engine against scipy.ndimage.correlate.

For each of the 8 presets (2D 4096^2, 3D 256^3, 1D 2^24 points, steps=10,
mode "constant", random data) it times, in one run on this machine:
  - convstencil backend "cpu" (median of --repeat runs after a warm-up),
  - scipy.ndimage.correlate applied `steps` times (one run: it is slow),
and prints GStencils/s = points * steps / seconds / 1e9, the speed-up, and
for every preset the memory floor: measured copy bandwidth / 16 bytes per
point per step (one read, one write).

    python benchmarks/bench_cpu.py [--steps 10] [--repeat 5] [--save]
        [--quick]

--quick runs small grids (a smoke check of the harness, seconds; its
figures mean nothing).
"""
import argparse
import os
import sys
import threading
import time

import numpy as np
import scipy.ndimage as ndi

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

import convstencil as cs  # noqa: E402


def copy_bandwidth(nbytes=1 << 29, threads=os.cpu_count() or 1, repeat=5):
    """Bytes read + written per second by a large multi-threaded copy."""
    src = np.random.rand(nbytes // 8)
    dst = np.empty_like(src)
    parts = np.array_split(np.arange(src.size), threads)
    bounds = [(p[0], p[-1] + 1) for p in parts]

    def work(lo, hi):
        np.copyto(dst[lo:hi], src[lo:hi])  # numpy releases the GIL here

    best = 0.0
    for _ in range(repeat):
        pool = [threading.Thread(target=work, args=b) for b in bounds]
        t0 = time.perf_counter()
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        best = max(best, 2 * src.nbytes / (time.perf_counter() - t0))
    return best


def time_convstencil(u, name, steps, repeat):
    cs.apply(u, name, steps=1, backend="cpu")  # warm-up
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        cs.apply(u, name, steps=steps, backend="cpu")
        times.append(time.perf_counter() - t0)
    return float(np.median(times)), cs.last_run_info()


def time_scipy(u, weights, steps):
    t0 = time.perf_counter()
    v = u
    for _ in range(steps):
        v = ndi.correlate(v, weights, mode="constant", cval=0.0)
    return time.perf_counter() - t0, v


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--save", action="store_true",
                        help="write benchmarks/results/cpu.{json,md}")
    parser.add_argument("--quick", action="store_true",
                        help="small grids: a smoke check, not figures")
    args = parser.parse_args()

    rng = np.random.default_rng()
    bandwidth = copy_bandwidth(1 << 24 if args.quick else 1 << 29)
    device = "%s, %d cores" % (common.cpu_name(), os.cpu_count())
    prov = common.provenance(device)
    floor = bandwidth / 16 / 1e9
    print("device: %s\ncopy bandwidth: %.1f GB/s -> memory floor %.2f "
          "GStencils/s per step" % (device, bandwidth / 1e9, floor))

    records, speedups = [], []
    rows = ["| preset | grid | steps | convstencil cpu | scipy | speed-up "
            "| memory floor | % of floor | path |",
            "|---|---|---|---|---|---|---|---|---|"]
    for name in cs.PRESETS:
        stencil = cs.Stencil(name)
        shape = (common.QUICK_CPU_SIZES if args.quick
                 else common.CPU_SIZES)[stencil.ndim]
        u = rng.random(shape)
        points = u.size * args.steps
        t_cs, info = time_convstencil(u, name, args.steps, args.repeat)
        t_sp, ref = time_scipy(u, stencil.weights, args.steps)
        got = cs.apply(u, name, steps=args.steps, backend="cpu")
        err = np.linalg.norm(got - ref) / np.linalg.norm(ref)
        if not err <= 1e-12:
            raise SystemExit("%s: relative error %.3g vs scipy" % (name, err))
        g_cs, g_sp = points / t_cs / 1e9, points / t_sp / 1e9
        speedups.append(g_cs / g_sp)
        grid = "x".join(map(str, shape))
        rows.append("| %s | %s | %d | %.3f | %.4f | %.1fx | %.2f | %.0f%% "
                    "| %s |" % (name, grid, args.steps, g_cs, g_sp,
                                g_cs / g_sp, floor, 100 * g_cs / floor,
                                info["path"]))
        print(rows[-1], flush=True)
        for system, g in (("convstencil-cpu", g_cs), ("scipy", g_sp)):
            records.append(dict(prov, preset=name, shape=list(shape),
                                steps=args.steps, system=system,
                                gstencils_per_s=g, rel_error_vs_scipy=err,
                                copy_bandwidth_gb_s=bandwidth / 1e9))
    gm = common.geomean(speedups)
    summary = ("geometric-mean speed-up over scipy.ndimage.correlate: %.1fx"
               % gm)
    print(summary)
    md = ("# CPU benchmark\n\n- device: %s\n- date: %s\n- commit: %s\n"
          "- command: `%s`\n- copy bandwidth: %.1f GB/s (memory floor %.2f "
          "GStencils/s per step)\n- %s\n\nGStencils/s (points x steps / "
          "seconds / 1e9), median of %d runs after a warm-up; scipy: one "
          "run.\n\n%s\n" % (device, prov["date"], prov["commit"],
                            prov["command"], bandwidth / 1e9, floor, summary,
                            args.repeat, "\n".join(rows)))
    if args.save:
        common.write_results("cpu", records, md)


if __name__ == "__main__":
    main()
