"""One stencil step between device arrays: convstencil against CuPy.

What a user's PDE scheme calls in its loop: ``convstencil.apply(u,
preset, steps=1)`` with CuPy arrays in and out, against
``cupyx.scipy.ndimage.correlate`` on the same arrays, for the 8 presets on
grids that fill the GPU (2^27 points in 1D, 10240^2, 512^3), FP64,
mode "constant" with cval 0, random data:

  convstencil-onestep-device   apply(x, preset, out=y, stream=s): the
                               one-step kernel (csrc/cuda/onestep.cu)
  cupy-onestep-device          correlate(x, w, output=y, mode="constant")
  convstencil-onestep-variant  (--variants) the same call under
                               CONVSTENCIL_ONESTEP=<variant>: the kernel
                               variants, and "generic", direct.cu's kernel
  copy-floor                   device-to-device copy bandwidth / 16 bytes
                               a point (one read, one write)

GStencils/s: points / seconds / 1e9, the seconds of one call measured with
CUDA events on the stream both run on, around batches of --batch calls
after a warm-up, the median of --repeat batches (ours and CuPy's batches
in turn, so that a drift of the clocks meets both alike).  Each record
also holds the host time of one steps=1 call (`host_us_per_call`): wall
microseconds per call on a small grid of the preset (2^16 points, 256^2,
48^3), where the device keeps up with the host, the median of --repeat
batches of 200 calls, each returning a new array: ``apply(x, preset,
stream=s)`` (queued, as CuPy's calls are) and ``correlate(x, w)``.  The results are checked against each other (relative error).

    python benchmarks/bench_onestep.py [--presets heat2d,...]
        [--repeat 21] [--batch 10] [--variants persist,blocks,l1,generic]
        [--save NAME]

Needs CuPy (inputs and the baseline; the package does not import it).
"""
import argparse
import os
import statistics
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

import convstencil as cs  # noqa: E402

SIZES = {1: common.GPU_SIZES[1], 2: common.GPU_SIZES[2],
         3: common.GPU_SIZES[3]}
SMALL = {1: (1 << 16,), 2: (256, 256), 3: (48, 48, 48)}
# the goal of issue 36 (GStencils/s on the H100): 90% of the copy floor
# for the 5-point kernels, 80% for the others
GOAL = {"heat1d": 170, "heat2d": 170}
GOAL_OTHERS = 150
HOST_CALLS = 200


def event_seconds(cp, stream, run, batch):
    """Seconds of one run() (of a batch of `batch`), CUDA events on
    `stream`."""
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    start.record(stream)
    for _ in range(batch):
        run()
    stop.record(stream)
    stop.synchronize()
    return cp.cuda.get_elapsed_time(start, stop) * 1e-3 / batch


def host_seconds(cp, stream, runs, repeat):
    """Median wall seconds of one call of each of `runs` (a dict), in
    batches of HOST_CALLS taken in turn, the stream drained between."""
    per = common.interleaved_batches(runs, repeat, HOST_CALLS,
                                     stream.synchronize)
    return {key: statistics.median(v) for key, v in per.items()}


def copy_bandwidth(cp, stream, points, repeat, batch):
    src = cp.random.random(points)
    dst = cp.empty_like(src)

    def run():
        dst[...] = src
    run()
    seconds = statistics.median(event_seconds(cp, stream, run, batch)
                                for _ in range(repeat))
    return 2 * src.nbytes / seconds


def rel_error(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def bench_preset(cp, ndi, stream, name, args, record, floor):
    w = cs.Stencil(name).weights
    ndim = w.ndim
    shape = SIZES[ndim]
    rng = np.random.default_rng()
    cw = cp.asarray(w)
    x = cp.asarray(rng.random(shape))
    ours_y = cp.empty_like(x)
    theirs_y = cp.empty_like(x)

    def ours():
        cs.apply(x, name, out=ours_y, stream=stream)

    def theirs():
        ndi.correlate(x, cw, output=theirs_y, mode="constant", cval=0.0)

    ours()
    theirs()
    stream.synchronize()
    info = cs.last_run_info()
    err = rel_error(cp.asnumpy(ours_y), cp.asnumpy(theirs_y))
    t_ours, t_theirs = [], []
    for _ in range(args.repeat):
        t_ours.append(event_seconds(cp, stream, ours, args.batch))
        t_theirs.append(event_seconds(cp, stream, theirs, args.batch))
    variants = {}
    for v in args.variants:
        os.environ["CONVSTENCIL_ONESTEP"] = v
        try:
            ours()
            stream.synchronize()
            err_v = rel_error(cp.asnumpy(ours_y), cp.asnumpy(theirs_y))
            variants[v] = (statistics.median(
                event_seconds(cp, stream, ours, args.batch)
                for _ in range(args.repeat)), err_v)
        finally:
            del os.environ["CONVSTENCIL_ONESTEP"]
    del x, ours_y, theirs_y

    # host time per call on a small grid of the preset
    xs = cp.asarray(rng.random(SMALL[ndim]))
    host = host_seconds(cp, stream, {
        "ours": lambda: cs.apply(xs, name, stream=stream),
        "theirs": lambda: ndi.correlate(xs, cw, mode="constant", cval=0.0)},
        args.repeat)
    points = int(np.prod(shape))
    gs = lambda seconds: points / seconds / 1e9  # noqa: E731
    common_fields = dict(shape=list(shape), steps=1, mode="constant",
                         small_shape=list(SMALL[ndim]),
                         rel_error_checked=err)
    s_ours = statistics.median(t_ours)
    s_theirs = statistics.median(t_theirs)
    record(name, "convstencil-onestep-device", gs(s_ours),
           device_seconds=s_ours, device_seconds_each=t_ours,
           host_us_per_call=host["ours"] * 1e6, path=info["path"],
           floor_fraction=gs(s_ours) / floor, **common_fields)
    record(name, "cupy-onestep-device", gs(s_theirs),
           device_seconds=s_theirs, device_seconds_each=t_theirs,
           host_us_per_call=host["theirs"] * 1e6,
           floor_fraction=gs(s_theirs) / floor, **common_fields)
    for v, (s, err_v) in variants.items():
        record(name, "convstencil-onestep-variant", gs(s), variant=v,
               device_seconds=s, floor_fraction=gs(s) / floor,
               **dict(common_fields, rel_error_checked=err_v))
    cp.get_default_memory_pool().free_all_blocks()


def markdown(records, prov, bandwidth, floor, variants):
    by = {}
    for r in records:
        by[(r.get("preset"), r["system"], r.get("variant"))] = r
    presets = [r["preset"] for r in records
               if r["system"] == "convstencil-onestep-device"]
    lines = common.markdown_head(
        "One step between device arrays: convstencil against CuPy", prov,
        "GStencils/s of one `steps=1` call between CuPy arrays (FP64, mode "
        "constant, random data; CUDA events around batches of calls after "
        "a warm-up, the median of the batches); the copy floor: a "
        "device-to-device copy of %.0f GB/s (read + write) / 16 bytes a "
        "point = %.1f GStencils/s.  Host: microseconds of one call on a "
        "small grid of the preset (2^16 points, 256^2, 48^3), ours with "
        "`stream=`, median of batches of %d calls.  Goal (issue 36): "
        "heat1d and heat2d >= 170, the others >= 150, above CuPy."
        % (bandwidth / 1e9, floor, HOST_CALLS),
        ["preset", "grid", "convstencil", "CuPy", "ours / CuPy",
         "ours / copy floor", "goal", "host us: ours (stream=)",
         "host us: CuPy"] + ["%s" % v for v in variants])
    for p in presets:
        ours = by[(p, "convstencil-onestep-device", None)]
        theirs = by[(p, "cupy-onestep-device", None)]
        goal = GOAL.get(p, GOAL_OTHERS)
        met = (ours["gstencils_per_s"] >= goal
               and ours["gstencils_per_s"] > theirs["gstencils_per_s"])
        row = [p, "x".join(map(str, ours["shape"])),
               "%.1f" % ours["gstencils_per_s"],
               "%.1f" % theirs["gstencils_per_s"],
               "%.2f" % (ours["gstencils_per_s"]
                         / theirs["gstencils_per_s"]),
               "%.0f%%" % (100 * ours["floor_fraction"]),
               ("%d: met" if met else "%d: missed") % goal,
               "%.1f" % ours["host_us_per_call"],
               "%.1f" % theirs["host_us_per_call"]]
        for v in variants:
            r = by.get((p, "convstencil-onestep-variant", v))
            row.append("%.1f" % r["gstencils_per_s"] if r else "")
        lines.append("| " + " | ".join(row) + " |")
    if variants:
        lines += ["", "Variant columns: the same call under "
                  "`CONVSTENCIL_ONESTEP=<variant>` (persist, blocks: the "
                  "tile kernels' persistent blocks or a block per tile, "
                  "1D grids read as tiles too; l1: 1D through the L1 "
                  "cache; generic: direct.cu's kernel for any dtype and "
                  "strides)."]
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--presets", default=",".join(cs.PRESETS))
    parser.add_argument("--repeat", type=int, default=21)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--variants", default="",
                        help="comma-separated CONVSTENCIL_ONESTEP values")
    parser.add_argument("--save", default="")
    args = parser.parse_args()
    args.variants = [v for v in args.variants.split(",") if v]

    import cupy as cp
    import cupyx.scipy.ndimage as ndi

    prov = common.provenance(common.device_name())
    stream = cp.cuda.Stream(non_blocking=True)
    records = []

    def record(preset, system, gs, **extra):
        records.append(dict(prov, preset=preset, system=system,
                            gstencils_per_s=gs, **extra))
        print("  %-10s %-28s %-8s %8.1f GStencils/s%s" % (
            preset, system, extra.get("variant", ""), gs,
            ("  host %.1f us/call" % extra["host_us_per_call"])
            if "host_us_per_call" in extra else ""), flush=True)

    with stream:
        bandwidth = copy_bandwidth(cp, stream, 1 << 28, args.repeat,
                                   args.batch)
        floor = bandwidth / 16 / 1e9
        print("device: %s; copy %.0f GB/s -> floor %.1f GStencils/s"
              % (prov["device"], bandwidth / 1e9, floor), flush=True)
        records.append(dict(prov, system="copy-floor", gstencils_per_s=floor,
                            copy_bandwidth_gb_s=bandwidth / 1e9))
        for name in [p for p in args.presets.split(",") if p]:
            bench_preset(cp, ndi, stream, name, args, record, floor)
    md = markdown(records, prov, bandwidth, floor, args.variants)
    print("\n" + md)
    if args.save:
        common.write_results(args.save, records, md)


if __name__ == "__main__":
    main()
