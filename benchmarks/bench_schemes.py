"""PDE schemes on the GPU: _core.run_scheme_device against the CuPy
composition a user writes.

Presets (float64, random data on CuPy arrays, C = 0.15 / 0.1):

  wave2d           u <- 2u - up + C L5(u), up <- u     10240^2, constant
  wave2d-velocity  u <- 2u - up + C c2 L5(u), up <- u  10240^2, constant
                   (c2 a parameter field)
  wave3d           u <- 2u - up + C L7(u), up <- u     512^3, constant
  heat3d           u <- u + C L7(u)                    512^3, constant
                   (one field: the 3D streamed passes' compiled star)
  gray-scott2d     u <- u + dt (Du L5(u) - u v^2 + F (1 - u)),
                   v <- v + dt (Dv L5(v) + u v^2 - (F + k) v)
                                                       10240^2, wrap

Systems (the `system` of a record):

  convstencil-scheme  _core.run_scheme_device, the fields updated in place
                      (outs = ins), --steps steps a call (even: the run
                      ends in the outs without a copy), queued on a CuPy
                      stream
  convstencil-scheme-api
                      the same scheme as a user writes it: a
                      convstencil.Scheme of the equations, and
                      `u, up = cs.apply((u, up), scheme, steps=--steps,
                      params=..., stream=s)` a call (new arrays of
                      CuPy's pool each call)
  cupy-scheme         cupyx.scipy.ndimage.correlate for each stencil term
                      and one fused cupy.ElementwiseKernel a step, the
                      time levels rotated by name

Timing (benchmarks/common.py's conventions): CUDA events around each call
of --steps steps on the stream, after a warm-up call, the median of
--repeat calls.  gstencils_per_s: G grid-point updates per second (a
point of every field, one step).  bytes_per_point: the fewest bytes a
step moves (each field and parameter field read once, each updated field
written once); gbytes_per_s is that times the rate, beside the copy
floor (a device-to-device copy of a 10240^2 grid, bytes read and written,
measured once).  Before timing, 4 steps of both systems from the same
fields are compared (rel_error_vs_cupy).  --tiles also times the tile
layouts scheme.cu offers for measuring (CONVSTENCIL_SCHEME_TILE); the
summary table shows the engine's default.  (Records of commit 950d1b6
also carry a `kernel`: the instances it offered, r4u1 the one kept.)

    python benchmarks/bench_schemes.py --save h100_schemes
    python benchmarks/bench_schemes.py --reprice h100_schemes  # no GPU:
        # explain() at this commit against the saved device times

Needs CuPy.
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import convstencil as cs  # noqa: E402
from convstencil import _core  # noqa: E402

SIZES = {2: (10240, 10240), 3: (512, 512, 512)}
QUICK_SIZES = {2: (512, 512), 3: (64, 64, 64)}
PRESETS = ("wave2d", "wave2d-velocity", "wave3d", "gray-scott2d")
# presets measured on request (--presets), outside the four
EXTRA_PRESETS = ("heat3d",)
THREE_D = ("wave3d", "heat3d")
# scheme.cu's default tile layout, and its kernel (4 points a thread,
# taps one at a time) as records of commit 950d1b6 name it
DEFAULT = ("default", "r4u1")
GS = dict(dt=1.0, Du=0.2, Dv=0.1, F=0.04, k=0.06)


def laplacian(ndim):
    w = np.zeros((3,) * ndim)
    centre = (1,) * ndim
    w[centre] = -2.0 * ndim
    for a in range(ndim):
        for d in (0, 2):
            idx = list(centre)
            idx[a] = d
            w[tuple(idx)] = 1.0
    return w


class Scheme:
    """A preset's code tables (csrc/scheme.h)."""

    def __init__(self, name):
        self.name = name
        self.ndim = 3 if name in THREE_D else 2
        self.mode = "wrap" if name == "gray-scott2d" else "constant"
        self.K = 1 if name == "heat3d" else 2
        self.P = 1 if name == "wave2d-velocity" else 0
        self.stencils = (laplacian(self.ndim),)
        coefs, terms, updates = [], [], []

        def term(coef, kind, param=-1, field=-1, powers=(0, 0)):
            coefs.append(coef)
            terms.append([kind, param, field, 0 if kind == 0 else -1]
                         + list(powers[:self.K] if kind == 1
                                else (0,) * self.K))

        if name == "gray-scott2d":
            g = GS
            for t in [(1.0, 1, -1, -1, (1, 0)),
                      (g["dt"] * g["Du"], 0, -1, 0),
                      (-g["dt"], 1, -1, -1, (1, 2)),
                      (g["dt"] * g["F"], 1, -1, -1, (0, 0)),
                      (-g["dt"] * g["F"], 1, -1, -1, (1, 0))]:
                term(*t)
            updates.append([0, 0, 5])
            for t in [(1.0, 1, -1, -1, (0, 1)),
                      (g["dt"] * g["Dv"], 0, -1, 1),
                      (g["dt"], 1, -1, -1, (1, 2)),
                      (-g["dt"] * (g["F"] + g["k"]), 1, -1, -1, (0, 1))]:
                term(*t)
            updates.append([1, 5, 4])
            # bytes: u, v read; u, v written
            self.bytes = 32
        elif name == "heat3d":
            self.C = 0.15
            term(1.0, 1, powers=(1,))
            term(self.C, 0, field=0)
            updates.append([0, 0, 2])
            # u read and written
            self.bytes = 16
        else:
            self.C = 0.1 if name == "wave2d-velocity" else 0.15
            term(2.0, 1, powers=(1, 0))
            term(-1.0, 1, powers=(0, 1))
            term(self.C, 0, param=0 if self.P else -1, field=0)
            term(1.0, 1, powers=(1, 0))
            updates += [[0, 0, 3], [1, 3, 1]]
            # u, up (and c2) read; u written (up is a rename)
            self.bytes = 24 + 8 * self.P
        self.coefs = np.array(coefs, dtype=np.float64)
        self.terms = np.array(terms, dtype=np.int32)
        self.updates = np.array(updates, dtype=np.int32)
        self.stages = np.array([[0, len(updates)]], dtype=np.int32)

    def run(self, fields, params, steps, stream):
        ptrs = tuple(a.data.ptr for a in fields)
        return _core.run_scheme_device(
            ptrs, ptrs, tuple(a.data.ptr for a in params),
            tuple(fields[0].shape), self.stencils, self.coefs, self.terms,
            self.updates, self.stages, steps,
            getattr(_core, "MODE_" + self.mode.upper()), 0.0, stream,
            False, None)


def public_scheme(name):
    """The preset as a user writes it with convstencil.Scheme."""
    ndim = 3 if name in THREE_D else 2
    L = cs.laplacian(ndim)
    if name == "heat3d":
        u = cs.fields("u")
        return cs.Scheme({u: u + 0.15 * L(u)})
    if name == "gray-scott2d":
        u, v = cs.fields("u v")
        g = GS
        return cs.Scheme(
            {u: u + g["dt"] * (g["Du"] * L(u) - u * v**2 + g["F"] * (1 - u)),
             v: v + g["dt"] * (g["Dv"] * L(v) + u * v**2
                               - (g["F"] + g["k"]) * v)}, mode="wrap")
    u, up = cs.fields("u up")
    if name == "wave2d-velocity":
        return cs.Scheme({u: 2 * u - up + 0.1 * cs.param("c2") * L(u),
                          up: u})
    return cs.Scheme({u: 2 * u - up + 0.15 * L(u), up: u})


class CupyScheme:
    """The same scheme as a CuPy user writes it: one correlate per
    stencil term, one fused elementwise kernel a step."""

    def __init__(self, cp, ndi, scheme, fields, params):
        self.cp, self.ndi, self.s = cp, ndi, scheme
        self.L = cp.asarray(scheme.stencils[0])
        self.f = list(fields)
        self.params = params
        self.tmp = [cp.empty_like(fields[0]) for _ in range(2)]
        self.new = [cp.empty_like(fields[0]) for _ in range(2)]
        if scheme.name == "gray-scott2d":
            self.kernel = cp.ElementwiseKernel(
                "float64 u, float64 v, float64 lu, float64 lv, float64 dt, "
                "float64 Du, float64 Dv, float64 F, float64 k",
                "float64 un, float64 vn",
                "double uvv = u * v * v;"
                "un = u + dt * (Du * lu - uvv + F * (1.0 - u));"
                "vn = v + dt * (Dv * lv + uvv - (F + k) * v);",
                "cs_bench_gray_scott")
        elif scheme.name == "heat3d":
            self.kernel = cp.ElementwiseKernel(
                "float64 u, float64 lap, float64 C", "float64 un",
                "un = u + C * lap", "cs_bench_heat")
        elif scheme.P:
            self.kernel = cp.ElementwiseKernel(
                "float64 u, float64 up, float64 lap, float64 c2, float64 C",
                "float64 un", "un = 2.0 * u - up + (C * c2) * lap",
                "cs_bench_wave_c2")
        else:
            self.kernel = cp.ElementwiseKernel(
                "float64 u, float64 up, float64 lap, float64 C",
                "float64 un", "un = 2.0 * u - up + C * lap",
                "cs_bench_wave")

    def run(self, steps):
        cor, mode = self.ndi.correlate, self.s.mode
        for _ in range(steps):
            if self.s.name == "heat3d":
                u = self.f[0]
                cor(u, self.L, output=self.tmp[0], mode=mode, cval=0.0)
                self.kernel(u, self.tmp[0], self.s.C, self.new[0])
                self.f, self.new = [self.new[0]], [u, self.new[1]]
                continue
            u, w = self.f
            if self.s.name == "gray-scott2d":
                cor(u, self.L, output=self.tmp[0], mode=mode, cval=0.0)
                cor(w, self.L, output=self.tmp[1], mode=mode, cval=0.0)
                g = GS
                self.kernel(u, w, self.tmp[0], self.tmp[1], g["dt"], g["Du"],
                            g["Dv"], g["F"], g["k"], self.new[0],
                            self.new[1])
                self.f, self.new = self.new, self.f
            else:
                cor(u, self.L, output=self.tmp[0], mode=mode, cval=0.0)
                args = (u, w, self.tmp[0]) + tuple(self.params) + (self.s.C,)
                self.kernel(*args, self.new[0])
                # up <- u, u <- new: rotate the three buffers by name
                self.f, self.new = [self.new[0], u], [w, self.new[1]]
        return self.f


def event_median(cp, stream, run, repeat):
    """Median seconds of run() between CUDA events on `stream`, after one
    warm-up call."""
    run()
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    times = []
    for _ in range(repeat):
        start.record(stream)
        run()
        stop.record(stream)
        stop.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, stop) * 1e-3)
    return float(np.median(times))


def copy_floor(cp, shape, repeat):
    """Device-to-device copy rate, bytes read plus written per second."""
    src = cp.random.random_sample(shape)
    dst = cp.empty_like(src)
    stream = cp.cuda.get_current_stream()

    def run():
        for _ in range(10):
            dst[...] = src
    seconds = event_median(cp, stream, run, repeat) / 10
    return 2 * src.nbytes / seconds


def rel_error(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def set_tile(tile):
    """CONVSTENCIL_SCHEME_TILE for a layout ("default": unset)."""
    if tile == DEFAULT[0]:
        os.environ.pop("CONVSTENCIL_SCHEME_TILE", None)
    else:
        os.environ["CONVSTENCIL_SCHEME_TILE"] = tile


def set_block(block):
    """CONVSTENCIL_SCHEME_BLOCK for a pass shape ("default": unset, the
    engine's choice; "off": one-step passes; ROWSxSTEPS)."""
    if block == "default":
        os.environ.pop("CONVSTENCIL_SCHEME_BLOCK", None)
    else:
        os.environ["CONVSTENCIL_SCHEME_BLOCK"] = block


def bench(cp, ndi, name, sizes, steps, repeat, tiles, blocks, prov, floor):
    scheme = Scheme(name)
    shape = sizes[scheme.ndim]
    points = int(np.prod(shape))
    rng = cp.random.default_rng(7)
    fields = [rng.uniform(0.2, 1.2, shape) for _ in range(scheme.K)]
    params = [rng.uniform(0.5, 1.5, shape) for _ in range(scheme.P)]
    stream = cp.cuda.Stream(non_blocking=True)
    cp.cuda.Device().synchronize()
    records = []
    base = dict(preset=name, shape=list(shape), mode=scheme.mode,
                steps=steps, bytes_per_point=scheme.bytes,
                copy_floor_gbytes_per_s=floor / 1e9)

    # the same 4 steps on both, from the same fields
    with stream:
        ours = [f.copy() for f in fields]
        scheme.run(ours, params, 4, stream.ptr)
        theirs = CupyScheme(cp, ndi, scheme, [f.copy() for f in fields],
                            params).run(4)
        stream.synchronize()
        err = max(rel_error(cp.asnumpy(a), cp.asnumpy(b))
                  for a, b in zip(ours, theirs))
        del ours, theirs

        variants = [(t, "default") for t in tiles]
        variants += [(DEFAULT[0], b) for b in blocks if b != "default"]
        for tile, block in variants:
            set_tile(tile)
            set_block(block)
            work = [f.copy() for f in fields]
            info = {}

            def run_ours():
                info.update(scheme.run(work, params, steps, stream.ptr))
            secs = event_median(cp, stream, run_ours, repeat)
            rate = points * steps / secs / 1e9
            rec = dict(base, system="convstencil-scheme", tile=tile,
                       block=block, kernel=DEFAULT[1],
                       path=info.get("path"),
                       fused_depth=info.get("fused_depth"),
                       device_seconds=secs, gstencils_per_s=rate,
                       gbytes_per_s=rate * scheme.bytes,
                       rel_error_vs_cupy=err)
            rec.update(prov)
            records.append(rec)
            print("%-16s %-18s %-11s %-6s %-15s %8.1f G/s %7.0f GB/s" % (
                name, "convstencil-scheme", tile, block,
                "%s/%s" % (info.get("path"), info.get("fused_depth")),
                rate, rate * scheme.bytes), flush=True)
            del work
        set_block("default")
        set_tile(DEFAULT[0])

        public = public_scheme(name)
        named = {"c2": params[0]} if scheme.P else None
        state = [tuple(f.copy() for f in fields)]
        check = cs.apply(state[0], public, steps=4, params=named,
                         stream=stream)
        stream.synchronize()
        api_err = max(rel_error(cp.asnumpy(a), cp.asnumpy(b))
                      for a, b in zip(check, CupyScheme(
                          cp, ndi, scheme, [f.copy() for f in fields],
                          params).run(4)))

        def run_api():
            state[0] = cs.apply(state[0], public, steps=steps, params=named,
                                stream=stream)
        secs = event_median(cp, stream, run_api, repeat)
        rate = points * steps / secs / 1e9
        # what explain() predicts for the same call (device time)
        said = cs.explain(state[0], public, steps=steps)
        rec = dict(base, system="convstencil-scheme-api",
                   device_seconds=secs, gstencils_per_s=rate,
                   gbytes_per_s=rate * scheme.bytes,
                   rel_error_vs_cupy=api_err, path=said.path,
                   fused_depth=said.fused_depth,
                   predicted_seconds=said.predicted_seconds,
                   fraction_of_prediction=secs / said.predicted_seconds)
        rec.update(prov)
        records.append(rec)
        print("%-16s %-18s %-11s %8.1f G/s   (rel error vs CuPy %.1e; "
              "explain(): %s depth %d, measured/predicted %.2f)" % (
                  name, "convstencil-scheme-api", "", rate, api_err,
                  said.path, said.fused_depth,
                  rec["fraction_of_prediction"]), flush=True)
        del state, check

        cupy = CupyScheme(cp, ndi, scheme, [f.copy() for f in fields],
                          params)
        secs = event_median(cp, stream, lambda: cupy.run(steps), repeat)
        rate = points * steps / secs / 1e9
        rec = dict(base, system="cupy-scheme", device_seconds=secs,
                   gstencils_per_s=rate, gbytes_per_s=rate * scheme.bytes)
        rec.update(prov)
        records.append(rec)
        print("%-16s %-18s %-11s %8.1f G/s   (rel error vs CuPy %.1e)" % (
            name, "cupy-scheme", "", rate, err), flush=True)
        del cupy
    del fields, params
    cp.get_default_memory_pool().free_all_blocks()
    _core.clear_cache()
    return records


def markdown(records, prov, steps, repeat):
    lines = common.markdown_head(
        "PDE schemes on the GPU", prov,
        "G grid-point updates per second (a point of every field, one "
        "step): _core.run_scheme_device (fields in place, %d steps a call, "
        "queued on a stream) against cupyx.scipy.ndimage.correlate per "
        "stencil term plus one fused cupy.ElementwiseKernel a step; CUDA "
        "events, median of %d calls after a warm-up; random data.  "
        "GB/s: the fewest bytes a step moves times the rate, beside the "
        "measured copy floor." % (steps, repeat),
        ["preset", "grid", "mode", "bytes/point", "convstencil-scheme",
         "GB/s (of copy floor)", "convstencil-scheme-api", "cupy-scheme",
         "speed-up (api)", "rel. error vs CuPy",
         "explain(): path, measured / predicted"])
    by = {}
    for r in records:
        by.setdefault(r["preset"], []).append(r)
    variants = []
    for name, rs in by.items():
        ours = [r for r in rs if r["system"] == "convstencil-scheme"]
        main = next(r for r in ours
                    if (r["tile"], r.get("kernel", "r4u1")) == DEFAULT
                    and r.get("block", "default") == "default")
        cupy = next(r for r in rs if r["system"] == "cupy-scheme")
        api = next((r for r in rs
                    if r["system"] == "convstencil-scheme-api"), None)
        api_rate = api["gstencils_per_s"] if api else float("nan")
        said = ("%s/%d, %.2f" % (api["path"], api["fused_depth"],
                                  api["fraction_of_prediction"])
                if api and "fraction_of_prediction" in api else "-")
        lines.append("| %s | %s | %s | %d | %.1f | %.0f (%.0f%%) | %.1f | "
                     "%.1f | %.2fx (%.2fx) | %.1e | %s |" % (
                         name, "x".join(map(str, main["shape"])),
                         main["mode"], main["bytes_per_point"],
                         main["gstencils_per_s"], main["gbytes_per_s"],
                         100 * main["gbytes_per_s"]
                         / main["copy_floor_gbytes_per_s"], api_rate,
                         cupy["gstencils_per_s"],
                         main["gstencils_per_s"] / cupy["gstencils_per_s"],
                         api_rate / cupy["gstencils_per_s"],
                         main["rel_error_vs_cupy"], said))
        variants += [(name, r) for r in ours if r is not main]
    floor = records[0]["copy_floor_gbytes_per_s"]
    lines += ["", "Copy floor (a device-to-device copy, bytes read and "
              "written): %.0f GB/s." % floor]
    if variants:
        lines += ["", "The summary is tile layout %s, kernel %s and the "
                  "engine's choice of pass; the others "
                  "(CONVSTENCIL_SCHEME_TILE; kernel rN: N points a "
                  "thread, uM: M taps at a time; CONVSTENCIL_SCHEME_BLOCK: "
                  "off = one-step passes, RxS = blocked passes of R rows "
                  "and S steps), for measuring:" % DEFAULT,
                  "",
                  "| preset | tile | kernel | block | path/depth | "
                  "convstencil-scheme | GB/s |",
                  "|---|---|---|---|---|---|---|"]
        for name, r in variants:
            lines.append("| %s | %s | %s | %s | %s/%s | %.1f | %.0f |" % (
                name, r["tile"], r.get("kernel", "r4u1"),
                r.get("block", "default"), r.get("path"),
                r.get("fused_depth"), r["gstencils_per_s"],
                r["gbytes_per_s"]))
    return "\n".join(lines) + "\n"


def reprice(stem):
    """Print explain()'s prediction at this commit (the model's GPU side
    needs no GPU: an H100 is assumed) for each API call measured in
    results/<stem>.json, and the measured / predicted fraction."""
    with open(os.path.join(common.RESULTS, stem + ".json")) as f:
        records = json.load(f)
    print("explain() at %s against the device times of %s.json "
          "(measured at %s on %s):" % (common.commit(), stem,
                                      records[0].get("commit"),
                                      records[0].get("device")))
    print("| preset | path/depth | measured s | predicted s | measured / "
          "predicted |\n|---|---|---|---|---|")
    for r in records:
        if r.get("system") != "convstencil-scheme-api":
            continue
        e = cs.explain(tuple(r["shape"]), public_scheme(r["preset"]),
                       steps=r["steps"], backend="cuda")
        print("| %s | %s/%d | %.5f | %.5f | %.2f |" % (
            r["preset"], e.path, e.fused_depth, r["device_seconds"],
            e.predicted_seconds, r["device_seconds"] / e.predicted_seconds))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--presets", default=",".join(PRESETS))
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--tiles", default="default",
                        help="comma-separated tile layouts to time "
                             "(default, interleaved, wide, planes)")
    parser.add_argument("--blocks", default="default",
                        help="comma-separated pass shapes to time besides "
                             "the engine's choice (CONVSTENCIL_SCHEME_BLOCK: "
                             "off, or ROWSxSTEPS such as 64x8)")
    parser.add_argument("--quick", action="store_true",
                        help="small grids: a smoke check, not figures")
    parser.add_argument("--save", default="",
                        help="write results/NAME.json and NAME.md")
    parser.add_argument("--reprice", default="",
                        help="no GPU run: explain()'s prediction at this "
                        "commit for the API calls of results/NAME.json, "
                        "against the device times measured there")
    args = parser.parse_args()
    if args.reprice:
        return reprice(args.reprice)
    import cupy as cp
    import cupyx.scipy.ndimage as ndi

    sizes = QUICK_SIZES if args.quick else SIZES
    tiles = [t for t in args.tiles.split(",") if t]
    blocks = [b for b in args.blocks.split(",") if b]
    if DEFAULT[0] not in tiles:
        tiles.insert(0, DEFAULT[0])
    prov = common.provenance(common.device_name())
    floor = copy_floor(cp, sizes[2], args.repeat)
    print("copy floor %.0f GB/s" % (floor / 1e9), flush=True)
    records = []
    for name in args.presets.split(","):
        records += bench(cp, ndi, name, sizes, args.steps, args.repeat,
                         tiles, blocks, prov, floor)
    text = markdown(records, prov, args.steps, args.repeat)
    print(text)
    if args.save:
        common.write_results(args.save, records, text)


if __name__ == "__main__":
    main()
