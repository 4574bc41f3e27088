"""GPU benchmark: convstencil's paths against CuPy, PyTorch and the copy floor.

For each preset (the 2D ones by default) on large grids (per dimension:
--size1d, --size2d, --size3d, comma-separated) it times, in one run on one
GPU, with CUDA events after a warm-up, the median of --repeat
runs, each of enough steps to last --min-seconds:

  convstencil-tc        backend "cuda-tc"   (FP64 tensor cores, fused steps)
  convstencil-cudacore  backend "cuda-core" (the CUDA-core kernel)
  convstencil-auto      backend "cuda"      (the path the engine picks)
  cupy                  cupyx.scipy.ndimage.correlate, FP64, same weights
  torch                 torch.nn.functional.conv{1,2,3}d, float64 (cuDNN)
  copy-floor            device-to-device copy bandwidth / 16 bytes per
                        point per pass (one read, one write)

GStencils/s = points x steps / seconds / 1e9, every time step counted
(a fused pass of k steps counts k).  convstencil's seconds are the
engine's step loop measured with CUDA events on its stream
(last_run_info()["device_seconds"]): the one upload and one download of
an apply() call are outside, as the baselines' host transfers are.  The
end-to-end wall time of those calls is recorded too (`wall_seconds`).
Mode "constant" with cval 0, which all three libraries share; random
data.  Results are checked: the tensor-core and CUDA-core paths against
each other and against CuPy (relative error <= 1e-12) on the benchmark
grid.

A name "randomKxK" in --presets stands for a full-rank K x K kernel of
random positive weights summing to 1 (common.kernel_of).

Shapes that are no multiple of any tile (--odd1d, --odd2d, --odd3d) run
convstencil only, and the table compares them with the main shape of
the same dimension at the same position in the list.

    python benchmarks/bench_gpu.py [--presets heat2d,...]
        [--size2d 10240x10240] [--odd2d 10000x10007] [--min-seconds 1]
        [--repeat 5] [--save NAME]

Needs CuPy and PyTorch (baselines only; the package imports neither).
"""
import argparse
import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

import convstencil as cs  # noqa: E402

SYSTEMS = {"convstencil-tc": "cuda-tc", "convstencil-cudacore": "cuda-core",
           "convstencil-auto": "cuda"}


def steps_for(seconds_per_step, min_seconds, multiple):
    steps = max(1, math.ceil(min_seconds / max(seconds_per_step, 1e-9)))
    return int(math.ceil(steps / multiple) * multiple)


# ---------------------------------------------------------------------------
# convstencil

def time_convstencil(grid, name, w, backend, min_seconds, repeat):
    """Median device seconds of the step loop, steps, info, wall seconds;
    None when the backend does not run this stencil (ValueError)."""
    probe = 30
    try:
        cs.apply(grid, weights=w, steps=probe, backend=backend)  # warm-up
    except ValueError as e:
        print("  %-10s %-21s not run: %s" % (name, backend, e), flush=True)
        return None
    per_step = cs.last_run_info()["device_seconds"] / probe
    steps = steps_for(per_step, min_seconds, 6)
    times, walls = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        cs.apply(grid, weights=w, steps=steps, backend=backend)
        walls.append(time.perf_counter() - t0)
        times.append(cs.last_run_info()["device_seconds"])
    return (float(np.median(times)), steps, cs.last_run_info(),
            float(np.median(walls)))


# ---------------------------------------------------------------------------
# baselines

def cuda_event_median(cp, run, repeat):
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    times = []
    for _ in range(repeat):
        start.record()
        run()
        stop.record()
        stop.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, stop) * 1e-3)
    return float(np.median(times))


def copy_bandwidth(cp, points, repeat):
    src = cp.random.random(points)
    dst = cp.empty_like(src)
    dst[...] = src  # warm-up

    def run():
        for _ in range(10):
            dst[...] = src
    seconds = cuda_event_median(cp, run, repeat) / 10
    return 2 * src.nbytes / seconds


def time_cupy(cp, ndi, grid, weights, min_seconds, repeat):
    x = cp.asarray(grid)
    y = cp.empty_like(x)
    w = cp.asarray(weights)

    def steps_run(steps):
        a, b = x, y
        for _ in range(steps):
            ndi.correlate(a, w, output=b, mode="constant", cval=0.0)
            a, b = b, a
        return a
    steps_run(1)  # warm-up: CuPy compiles its kernel on the first call
    probe = 3
    t = cuda_event_median(cp, lambda: steps_run(probe), 1) / probe
    steps = steps_for(t, min_seconds, 1)
    seconds = cuda_event_median(cp, lambda: steps_run(steps), repeat)
    return seconds, steps


def one_cupy_result(cp, ndi, grid, weights, steps):
    a = cp.asarray(grid)
    w = cp.asarray(weights)
    for _ in range(steps):
        a = ndi.correlate(a, w, mode="constant", cval=0.0)
    return cp.asnumpy(a)


def time_torch(torch, grid, weights, min_seconds, repeat):
    conv = {1: torch.nn.functional.conv1d, 2: torch.nn.functional.conv2d,
            3: torch.nn.functional.conv3d}[grid.ndim]
    x = torch.from_numpy(grid).cuda()[None, None]
    w = torch.from_numpy(np.ascontiguousarray(weights)).cuda()[None, None]
    pad = tuple((s - 1) // 2 for s in weights.shape)

    def steps_run(steps):
        a = x
        for _ in range(steps):
            a = conv(a, w, padding=pad)  # correlation, zero padding
        return a
    steps_run(1)
    start = torch.cuda.Event(enable_timing=True)
    stop = torch.cuda.Event(enable_timing=True)

    def timed(steps):
        start.record()
        steps_run(steps)
        stop.record()
        stop.synchronize()
        return start.elapsed_time(stop) * 1e-3
    steps = steps_for(timed(2) / 2, min_seconds, 1)
    seconds = float(np.median([timed(steps) for _ in range(repeat)]))
    check = steps_run(1)[0, 0].cpu().numpy()
    return seconds, steps, check


# ---------------------------------------------------------------------------

def rel_error(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--presets",
                        default="heat2d,box2d9p,star2d13p,box2d49p")
    parser.add_argument("--size1d", default="10240000,134217728")
    parser.add_argument("--odd1d", default=",134217689",
                        help="shapes that are no multiple of any tile "
                             "(convstencil only), one per --size1d entry "
                             "or empty to skip that one")
    parser.add_argument("--size2d", default="10240x10240")
    parser.add_argument("--odd2d", default="10000x10007")
    parser.add_argument("--size3d", default="512x512x512")
    parser.add_argument("--odd3d", default="509x511x513")
    parser.add_argument("--min-seconds", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--no-baselines", action="store_true")
    parser.add_argument("--save", default="",
                        help="write benchmarks/results/<SAVE>.{json,md}")
    args = parser.parse_args()

    import cupy as cp
    import cupyx.scipy.ndimage as ndi
    torch = None
    if not args.no_baselines:
        import torch

    rng = np.random.default_rng()
    device = common.device_name()
    prov = common.provenance(device)
    sizes = {d: [common.parse_shape(t) for t in getattr(args, "size%dd" % d)
                 .split(",")] for d in (1, 2, 3)}
    odds = {d: [common.parse_shape(t) if t else None for t in
                getattr(args, "odd%dd" % d).split(",")] for d in (1, 2, 3)}
    # the copy floor: bandwidth of a copy far larger than the L2 cache
    points = 10240 * 10240
    bandwidth = copy_bandwidth(cp, points, args.repeat)
    floor = bandwidth / 16 / 1e9
    print("device: %s (%s)\ncopy bandwidth: %.0f GB/s -> %.1f GStencils/s "
          "per pass\n" % (device, cs._backends.cuda_device(),
                          bandwidth / 1e9, floor), flush=True)

    records = []
    kernels = {name: common.kernel_of(name)
               for name in args.presets.split(",")}

    def record(preset, grid_shape, steps, system, gs, **extra):
        records.append(dict(prov, **kernels[preset][1],
                            shape=list(grid_shape),
                            steps=steps, system=system, gstencils_per_s=gs,
                            mode="constant", **extra))
        print("  %-10s %-14s %-21s steps %5d  %8.2f GStencils/s %s"
              % (preset, "x".join(map(str, grid_shape)), system, steps, gs,
                 " ".join("%s=%s" % kv for kv in sorted(extra.items())
                          if kv[0] in ("path", "fused_depth"))),
              flush=True)
        return gs

    table = []  # (preset, main shape, odd shape or None, results)
    for name, (w, _) in kernels.items():
        for shape, odd in zip(sizes[w.ndim], odds[w.ndim]):
            row = {}
            table.append((name, shape, odd, row))
            for grid_shape in [shape] + ([odd] if odd else []):
                bench_grid(cp, ndi, torch, rng, args, name, w, grid_shape,
                           grid_shape == shape, row, record, bandwidth,
                           floor)
            cp.get_default_memory_pool().free_all_blocks()
            if torch is not None:
                torch.cuda.empty_cache()

    md = markdown(table, args, prov, bandwidth, floor)
    print("\n" + md)
    if args.save:
        common.write_results(args.save, records, md)


def bench_grid(cp, ndi, torch, rng, args, name, w, grid_shape, main_shape,
               row, record, bandwidth, floor):
    """Check, then time every system on one grid; results go to row."""
    grid = rng.random(grid_shape)
    n = grid.size
    # correctness on this grid: both paths, and CuPy
    steps_check = 7
    core = cs.apply(grid, weights=w, steps=steps_check, backend="cuda-core")
    try:
        tc = cs.apply(grid, weights=w, steps=steps_check, backend="cuda-tc")
    except ValueError:
        tc = cs.apply(grid, weights=w, steps=steps_check, backend="cuda")
    err = rel_error(tc, core)
    if main_shape:
        err = max(err, rel_error(tc, one_cupy_result(
            cp, ndi, grid, w, steps_check)))
    if not err <= 1e-12:
        raise SystemExit("%s %s: paths disagree, relative error %.3g"
                         % (name, grid_shape, err))
    del tc, core
    for system, backend in SYSTEMS.items():
        timed = time_convstencil(grid, name, w, backend, args.min_seconds,
                                 args.repeat)
        if timed is None:
            continue
        secs, steps, info, wall = timed
        gs = record(name, grid_shape, steps, system,
                    n * steps / secs / 1e9, path=info["path"],
                    fused_depth=info["fused_depth"],
                    device_seconds=secs, wall_seconds=wall,
                    rel_error_checked=err)
        row[(grid_shape, system)] = (gs, info)
    if not main_shape or args.no_baselines:
        return
    shape = grid_shape
    secs, steps = time_cupy(cp, ndi, grid, w, args.min_seconds,
                            args.repeat)
    row[(shape, "cupy")] = (record(name, shape, steps, "cupy",
                                   n * steps / secs / 1e9,
                                   device_seconds=secs), None)
    secs, steps, check = time_torch(torch, grid, w, args.min_seconds,
                                    args.repeat)
    terr = rel_error(check, one_cupy_result(cp, ndi, grid, w, 1))
    row[(shape, "torch")] = (record(
        name, shape, steps, "torch", n * steps / secs / 1e9,
        device_seconds=secs, rel_error_vs_cupy=terr), None)
    row[(shape, "copy-floor")] = (record(
        name, shape, 1, "copy-floor", floor,
        copy_bandwidth_gb_s=bandwidth / 1e9), None)


def markdown(table, args, prov, bandwidth, floor):
    lines = [
        "# GPU benchmark: %s" % args.presets, "",
        "- device: %s" % prov["device"], "- date: %s" % prov["date"],
        "- commit: %s" % prov["commit"], "- command: `%s`" % prov["command"],
        "- copy bandwidth: %.0f GB/s (read + write) -> one pass is capped "
        "at %.1f GStencils/s" % (bandwidth / 1e9, floor), "",
        "GStencils/s (points x time steps / seconds / 1e9), FP64, mode "
        "constant, random data; median of %d runs of at least %.1f s each, "
        "timed with CUDA events after a warm-up (convstencil: the engine's "
        "step loop, no host transfers)." % (args.repeat, args.min_seconds),
        ""]
    head = ["preset", "grid", "tensor cores (depth)", "CUDA cores",
            "auto (path)", "CuPy", "PyTorch", "copy floor x fused depth",
            "odd grid: auto", "odd / main"]
    lines += ["| %s |" % " | ".join(head),
              "|%s" % ("---|" * len(head))]
    for name, shape, odd, row in table:
        def g(key):
            v = row.get(key)
            return "%.1f" % v[0] if v else "-"
        auto = row.get((shape, "convstencil-auto"))
        tc = row.get((shape, "convstencil-tc"))
        depth = tc[1]["fused_depth"] if tc else 1
        o = row.get((odd, "convstencil-auto")) if odd else None
        cells = [name, "x".join(map(str, shape)),
                 "%.1f (%d)" % (tc[0], depth) if tc else "-",
                 g((shape, "convstencil-cudacore")),
                 "%.1f (%s)" % (auto[0], auto[1]["path"]) if auto else "-",
                 g((shape, "cupy")), g((shape, "torch")),
                 "%.0f x %d = %.0f" % (floor, depth, floor * depth),
                 "%.1f at %s" % (o[0], "x".join(map(str, odd))) if o else "-",
                 "%.0f%%" % (100 * o[0] / auto[0]) if o and auto else "-"]
        lines.append("| %s |" % " | ".join(cells))
    if any(len(shape) == 2 for _, shape, _, _ in table):
        lines += ["", "CUDA cores: planar 3 x 3 kernels (heat2d, box2d9p) "
                  "run temporally blocked on tb2d, up to 8 steps per pass, "
                  "and pluses and outer products of side 5 and 7 "
                  "(star2d13p, box2d49p) up to 4 and 3, full-rank "
                  "planar squares of side 5 and 7 (random5x5, random7x7) "
                  "up to 3 and 1, every tap (docs/ARCHITECTURE.md)."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
