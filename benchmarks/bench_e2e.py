"""End-to-end GPU benchmark: what one apply() call delivers to a user.

Every figure is wall clock around whole calls, after one warm-up call,
the median of --repeat calls, on random data, mode "constant":

  convstencil-e2e-numpy      one call from a NumPy grid, fresh result
                             (upload, --steps steps, download, the first
                             touch of the result's pages)
  convstencil-e2e-numpy-out  the same into out= a preallocated NumPy array
  convstencil-e2e-device     one call on a CuPy array (result a new CuPy
                             array), returning when it is complete
  cupy-device                cupyx.scipy.ndimage.correlate, --steps calls
                             on the device, then a synchronization
  convstencil-step-loop      the step loop alone of the e2e-device calls
                             (CUDA events, last_run_info()["device_seconds"])

and what bounds the NumPy figures: the copy engine's rates between
pinned host memory and the device, measured on the grid's size
(`pinned_h2d_bytes_per_s`, `pinned_d2h_bytes_per_s`); `bound_seconds` is
upload + step loop + download at those rates, the best a call can do
that does not overlap the transfers with the steps (the host's copies
into and out of the pinned staging overlapped with them, the result's
first touch hidden behind the steps).

Small calls (--small): host microseconds per steps=1 call of heat2d on
device arrays of 64^2, 1024^2 and 8192^2 (the leapfrog pattern), as the
median over --repeat batches of calls: ours returning a complete result
(`convstencil-small-call`), ours queued on CuPy's stream
(`convstencil-small-call-stream`), and CuPy's correlate
(`cupy-small-call`, asynchronous as CuPy is).

    python benchmarks/bench_e2e.py [--presets heat2d,...] [--steps 100]
        [--repeat 5] [--small] [--save NAME]

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

SIZES = {"heat1d": (1 << 27,), "1d5p": (1 << 27,),
         "heat2d": (10240, 10240), "box2d9p": (10240, 10240),
         "star2d13p": (10240, 10240), "box2d49p": (10240, 10240),
         "heat3d": (512, 512, 512), "box3d27p": (512, 512, 512)}
SMALL_SIDES = (64, 1024, 8192)


def rel_error(a, b):
    a = np.asarray(a)
    b = np.asarray(b)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def bench_preset(cp, ndi, name, shape, steps, repeat, record):
    rng = np.random.default_rng()
    host = rng.random(shape)
    points = host.size
    w = cs.Stencil(name).weights
    gs = lambda seconds: points * steps / seconds / 1e9  # noqa: E731

    # NumPy in, fresh result / out=
    fresh_each, out_each = [], []
    t_fresh = common.median_wall(lambda: cs.apply(host, name, steps=steps), repeat,
                   fresh_each)
    info = cs.last_run_info()  # its device_seconds: the loop in that call
    out = np.empty_like(host)
    out.fill(0.0)
    t_out = common.median_wall(lambda: cs.apply(host, name, steps=steps, out=out),
                 repeat, out_each)
    loop_out = cs.last_run_info()["device_seconds"]
    # device in, device out
    dev = cp.asarray(host)
    res = {}

    def device_call():
        res["v"] = cs.apply(dev, name, steps=steps)
        res["info"] = cs.last_run_info()

    t_dev = common.median_wall(device_call, repeat)
    loops = []
    for _ in range(repeat):
        device_call()
        loops.append(res["info"]["device_seconds"])
    t_loop = statistics.median(loops)
    assert type(res["v"]) is cp.ndarray and res["info"]["device_array"]

    # CuPy correlate, the same steps on the device
    cw = cp.asarray(w)

    def cupy_run():
        u = dev
        for _ in range(steps):
            u = ndi.correlate(u, cw, mode="constant", cval=0.0)
        cp.cuda.get_current_stream().synchronize()
        res["cupy"] = u

    t_cupy = common.median_wall(cupy_run, max(1, repeat // 2))
    err = max(rel_error(out, cp.asnumpy(res["cupy"])),
              rel_error(cp.asnumpy(res["v"]), out))

    # the bound: the copy engine's rates through pinned memory
    h2d, d2h = pinned_rates(cp, host.nbytes, repeat)
    bound = host.nbytes / h2d + t_loop + host.nbytes / d2h
    extra = dict(path=info["path"], fused_depth=info["fused_depth"],
                 device_seconds=info["device_seconds"],
                 rel_error_checked=err, pinned_h2d_bytes_per_s=h2d,
                 pinned_d2h_bytes_per_s=d2h, bound_seconds=bound,
                 bound_gstencils_per_s=gs(bound))
    record(name, shape, steps, "convstencil-e2e-numpy", gs(t_fresh),
           wall_seconds=t_fresh, wall_seconds_each=fresh_each, **extra)
    record(name, shape, steps, "convstencil-e2e-numpy-out", gs(t_out),
           wall_seconds=t_out, wall_seconds_each=out_each,
           **dict(extra, device_seconds=loop_out))
    record(name, shape, steps, "convstencil-e2e-device", gs(t_dev),
           wall_seconds=t_dev, path=info["path"])
    record(name, shape, steps, "convstencil-step-loop", gs(t_loop),
           device_seconds=t_loop, path=info["path"])
    record(name, shape, steps, "cupy-device", gs(t_cupy),
           wall_seconds=t_cupy)
    del dev, res
    cp.get_default_memory_pool().free_all_blocks()


def pinned_rates(cp, nbytes, repeat):
    """Bytes/s host->device and device->host through pinned memory."""
    pinned = cp.cuda.alloc_pinned_memory(nbytes)
    dev = cp.cuda.alloc(nbytes)
    rt = cp.cuda.runtime

    def h2d():
        rt.memcpy(dev.ptr, pinned.ptr, nbytes, rt.memcpyHostToDevice)

    def d2h():
        rt.memcpy(pinned.ptr, dev.ptr, nbytes, rt.memcpyDeviceToHost)

    return nbytes / common.median_wall(h2d, repeat), nbytes / common.median_wall(d2h, repeat)


def bench_small(cp, ndi, repeat, record):
    rng = np.random.default_rng()
    w = cs.Stencil("heat2d").weights
    cw = cp.asarray(w)
    stream = cp.cuda.get_current_stream()
    for side in SMALL_SIDES:
        u = cp.asarray(rng.random((side, side)))
        calls = max(20, min(2000, int(2e8 // (side * side))))

        runs = {"ours": lambda: cs.apply(u, "heat2d"),
                "ours_stream": lambda: cs.apply(u, "heat2d", stream=stream),
                "theirs": lambda: ndi.correlate(u, cw, mode="constant")}
        per = common.interleaved_batches(runs, repeat, calls,
                                         stream.synchronize)
        ours, ours_stream, theirs = (statistics.median(per[key]) * 1e6
                                     for key in runs)
        want = ndi.correlate(u, cw, mode="constant")
        err = rel_error(cp.asnumpy(cs.apply(u, "heat2d")), cp.asnumpy(want))
        for system, us in (("convstencil-small-call", ours),
                           ("convstencil-small-call-stream", ours_stream),
                           ("cupy-small-call", theirs)):
            record("heat2d", (side, side), 1, system, None,
                   host_us_per_call=us, calls=calls, rel_error_checked=err)


def markdown(records, prov, steps):
    lines = ["# End-to-end GPU figures (one apply() call)", "",
             common.provenance_sentence(prov), "",
             "GStencils/s, wall clock of one %d-step call after a warm-up, "
             "median; `bound`: upload + step loop + download at the copy "
             "engine's pinned-memory rates measured on the same size; "
             "`out=, fastest`: the fastest repeat (the NumPy calls vary "
             "with the host from repeat to repeat, the device columns do "
             "not; every repeat is in the JSON)." % steps,
             "",
             "| preset | grid | NumPy in, fresh | NumPy in, out= | "
             "out=, fastest | bound | CuPy array in | step loop alone | "
             "CuPy correlate |",
             "|---|---|---|---|---|---|---|---|---|"]
    by = {}
    for r in records:
        by[(r["preset"], tuple(r["shape"]), r["system"])] = r
    presets = []
    for r in records:
        key = (r["preset"], tuple(r["shape"]))
        if r["system"] == "convstencil-e2e-numpy" and key not in presets:
            presets.append(key)
    for p, shape in presets:
        def g(system, field="gstencils_per_s"):
            r = by.get((p, shape, system))
            return r[field] if r else float("nan")
        each = g("convstencil-e2e-numpy-out", "wall_seconds_each")
        fastest = (np.prod(shape) * steps / min(each) / 1e9
                   if isinstance(each, list) and each else float("nan"))
        lines.append("| %s | %s | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f "
                     "| %.1f |" % (
                         p, "x".join(map(str, shape)),
                         g("convstencil-e2e-numpy"),
                         g("convstencil-e2e-numpy-out"), fastest,
                         g("convstencil-e2e-numpy", "bound_gstencils_per_s"),
                         g("convstencil-e2e-device"),
                         g("convstencil-step-loop"), g("cupy-device")))
    small = [r for r in records if r["system"].endswith("small-call")
             or r["system"].endswith("small-call-stream")]
    if small:
        lines += ["", "Host microseconds per `steps=1` heat2d call on a CuPy "
                  "array (median of batches):", "",
                  "| grid | ours (result complete) | ours (stream=) | "
                  "CuPy correlate |", "|---|---|---|---|"]
        for side in SMALL_SIDES:
            shape = (side, side)

            def us(system):
                r = by.get(("heat2d", shape, system))
                return r["host_us_per_call"] if r else float("nan")
            lines.append("| %dx%d | %.1f | %.1f | %.1f |" % (
                side, side, us("convstencil-small-call"),
                us("convstencil-small-call-stream"), us("cupy-small-call")))
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--presets", default=",".join(SIZES))
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--small", action="store_true")
    parser.add_argument("--save", default="")
    args = parser.parse_args()

    import cupy as cp
    import cupyx.scipy.ndimage as ndi

    prov = common.provenance(common.device_name())
    records = []

    def record(preset, shape, steps, system, gs, **extra):
        records.append(dict(prov, preset=preset, shape=list(shape),
                            steps=steps, system=system, gstencils_per_s=gs,
                            mode="constant", **extra))
        shown = ("%8.1f GStencils/s" % gs) if gs is not None else (
            "%8.1f us/call" % extra["host_us_per_call"])
        print("  %-10s %-14s %-30s %s" % (preset, "x".join(map(str, shape)),
                                           system, shown), flush=True)

    for name in [p for p in args.presets.split(",") if p]:
        bench_preset(cp, ndi, name, SIZES[name], args.steps, args.repeat,
                     record)
    if args.small:
        bench_small(cp, ndi, args.repeat, record)
    md = markdown(records, prov, args.steps)
    print("\n" + md)
    if args.save:
        common.write_results(args.save, records, md)


if __name__ == "__main__":
    main()
