"""Where the host time of one steps=1 call between device arrays goes.

bench_onestep.py measures the host time of ``convstencil.apply(x, preset,
stream=s)`` against CuPy's ``correlate(x, w)`` (issue 36: ours no more
than CuPy's).  This splits both into their parts, on a small grid of each
preset (2^16 points, 256^2, 48^3) where the device keeps up with the
host; wall microseconds per call, the median of --repeat batches of 200
calls taken in turn, the stream drained between batches:

  apply, new result       apply(x, preset, stream=s): bench_onestep's figure
  apply, out=             apply(x, preset, out=y, stream=s)
  engine call             the C engine's call alone as apply() makes it
                          (_engine.run_onestep_cai on the two interface
                          dicts, fetched once: reading them, the pointer
                          checks, the launch, the record)
  engine call, full path  the full path's engine call (_engine.run_device
                          on views parsed once), which arrays that are
                          not of the plain kind take
  Python part             apply, out= minus the engine call (the two
                          interfaces fetched from CuPy included)
  CuPy correlate          correlate(x, w, mode="constant"): new result
  CuPy correlate, output= correlate(x, w, output=y, mode="constant")
  CuPy empty_like         the allocation of a new result
  CUDA array interface    x.__cuda_array_interface__ (CuPy builds it)
  pointer attributes      cudaPointerGetAttributes through CuPy's runtime
  CuPy launch             y.fill(0.0): one element-wise launch

    python benchmarks/bench_onestep_host.py [--presets heat2d,...]
        [--repeat 21] [--save NAME]

Needs CuPy (the package does not import it).
"""
import argparse
import os
import statistics
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

import convstencil as cs  # noqa: E402
from convstencil import _device, _engine  # noqa: E402

SMALL = {1: (1 << 16,), 2: (256, 256), 3: (48, 48, 48)}
CALLS = 200
PARTS = ["apply, new result", "apply, out=", "engine call",
         "engine call, full path", "Python part",
         "CuPy correlate", "CuPy correlate, output=", "CuPy empty_like",
         "CUDA array interface", "pointer attributes", "CuPy launch"]


def host_us(stream, runs, repeat):
    """Median wall microseconds of one call of each of `runs` (a dict),
    in batches of CALLS taken in turn, the stream drained between."""
    per = common.interleaved_batches(runs, repeat, CALLS,
                                     stream.synchronize)
    return {key: 1e6 * statistics.median(v) for key, v in per.items()}


def split(cp, ndi, stream, name, repeat):
    w = cs.Stencil(name).weights
    cw = cp.asarray(w)
    x = cp.asarray(np.random.default_rng().random(SMALL[w.ndim]))
    y = cp.empty_like(x)
    handle = stream.ptr
    xv = _device.device_view(x, consumer_stream=handle)
    yv = _device.device_view(y, "out", consumer_stream=handle)
    x_cai, y_cai = x.__cuda_array_interface__, y.__cuda_array_interface__
    ptr = x.data.ptr
    us = host_us(stream, {
        "apply, new result": lambda: cs.apply(x, name, stream=stream),
        "apply, out=": lambda: cs.apply(x, name, out=y, stream=stream),
        "engine call": lambda: _engine.run_onestep_cai(
            x_cai, y_cai, w, mode="constant", cval=0.0, stream=handle),
        "engine call, full path": lambda: _engine.run_device(
            xv, yv, w, steps=1, mode="constant", cval=0.0, stream=handle),
        "CuPy correlate": lambda: ndi.correlate(x, cw, mode="constant"),
        "CuPy correlate, output=": lambda: ndi.correlate(
            x, cw, output=y, mode="constant"),
        "CuPy empty_like": lambda: cp.empty_like(x),
        "CUDA array interface": lambda: x.__cuda_array_interface__,
        "pointer attributes": lambda: cp.cuda.runtime.pointerGetAttributes(
            ptr),
        "CuPy launch": lambda: y.fill(0.0)}, repeat)
    us["Python part"] = us["apply, out="] - us["engine call"]
    return us


def markdown(rows, prov, repeat):
    lines = common.markdown_head(
        "Host time of one step between device arrays, split", prov,
        "Wall microseconds per call on a small grid of each preset (2^16 "
        "points, 256^2, 48^3), CuPy arrays, within a non-blocking CuPy "
        "stream passed as `stream=`; the median of %d batches of %d calls "
        "taken in turn.  Parts: see the script's docstring." % (repeat,
                                                                  CALLS),
        ["part"] + list(rows))
    for part in PARTS:
        lines.append("| %s | %s |" % (part, " | ".join(
            "%.1f" % rows[p][part] for p in rows)))
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--presets", default=",".join(cs.PRESETS))
    parser.add_argument("--repeat", type=int, default=21)
    parser.add_argument("--save", default="")
    args = parser.parse_args()

    import cupy as cp
    import cupyx.scipy.ndimage as ndi

    prov = common.provenance(common.device_name())
    stream = cp.cuda.Stream(non_blocking=True)
    rows, records = {}, []
    with stream:
        for name in [p for p in args.presets.split(",") if p]:
            rows[name] = split(cp, ndi, stream, name, args.repeat)
            print("  %-10s %s" % (name, "  ".join(
                "%s %.1f" % (k, v) for k, v in rows[name].items())),
                flush=True)
            records.append(dict(prov, preset=name,
                                system="onestep-host-split",
                                shape=list(SMALL[cs.Stencil(
                                    name).weights.ndim]),
                                host_us=rows[name]))
    md = markdown(rows, prov, args.repeat)
    print("\n" + md)
    if args.save:
        common.write_results(args.save, records, md)


if __name__ == "__main__":
    main()
