"""CPU benchmark of PDE schemes: convstencil.apply(grids, scheme, ...,
backend="cpu") against the plain SciPy/NumPy loop a user would otherwise
write (scipy.ndimage.correlate per stencil term, NumPy arithmetic for the
rest).

Cases (mode "wrap", random data, float64):
  wave2d           u <- 2u - u_prev + C L5(u), u_prev <- u     2048^2
  wave2d-velocity  the same with a parameter field: c L5(u)    2048^2
  gray-scott2d     u <- u + dt (Du L(u) - u v^2 + F (1 - u)),
                   v <- v + dt (Dv L(v) + u v^2 - (F + k) v)   2048^2
  wave3d           the leapfrog wave, the 7-point Laplacian    128^3
  heat-source2d    u <- u + a L5(u) + dt s (s a parameter)     2048^2
  heat-source3d    the same with the 7-point Laplacian         128^3

The engine and the reference alternate, --repeat times each, every run
`--steps` steps from the same fields (host grids in, the engine's own
results out: what a user's call costs); the medians are printed with
their ratio, and the engine's result is checked against the reference's.
Wall seconds first, then the process's CPU seconds (every thread's; the
reference runs on one), which a busy machine disturbs less.  --save
writes records (system "convstencil-scheme" and "scipy-scheme", preset,
shape, steps, gstencils_per_s: grid-point updates of every field, one
step, a second, in G).

    python benchmarks/bench_schemes_cpu.py [--steps 40] [--repeat 5]
        [--cases wave2d,wave3d] [--quick] [--save NAME]
"""
import argparse
import os
import sys
import time

import numpy as np
from scipy import ndimage

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

import convstencil as cs  # noqa: E402

MODE = "wrap"
C = 0.1                                   # (c dt / dx)^2, stable in 2D/3D
DT, DU, DV, F, K = 1.0, 0.16, 0.08, 0.035, 0.06
ALPHA = 0.1


def wave(ndim, with_c):
    L = cs.laplacian(ndim)
    lap = L.weights
    u, up = cs.fields("u up")
    c = cs.param("c") if with_c else C
    scheme = cs.Scheme({u: 2 * u - up + c * L(u), up: u}, mode=MODE)

    def reference(fields, params, steps):
        u, u_prev = fields
        c = params["c"] if with_c else C
        for _ in range(steps):
            u, u_prev = (2 * u - u_prev
                         + c * ndimage.correlate(u, lap, mode=MODE)), u
        return [u, u_prev]

    def data(rng, shape):
        fields = [rng.uniform(-1, 1, shape), rng.uniform(-1, 1, shape)]
        params = {"c": rng.uniform(0.0, C, shape)} if with_c else {}
        return fields, params

    return scheme, reference, data


def gray_scott():
    L = cs.laplacian(2)
    lap = L.weights
    u, v = cs.fields("u v")
    scheme = cs.Scheme(
        {u: u + DT * (DU * L(u) - u * v**2 + F * (1 - u)),
         v: v + DT * (DV * L(v) + u * v**2 - (F + K) * v)}, mode=MODE)

    def reference(fields, params, steps):
        u, v = fields
        for _ in range(steps):
            uvv = u * v * v
            u, v = (u + DT * (DU * ndimage.correlate(u, lap, mode=MODE)
                              - uvv + F * (1 - u)),
                    v + DT * (DV * ndimage.correlate(v, lap, mode=MODE)
                              + uvv - (F + K) * v))
        return [u, v]

    def data(rng, shape):
        return [rng.uniform(0.5, 1.0, shape), rng.uniform(0.0, 0.3, shape)], {}

    return scheme, reference, data


def heat_source(ndim):
    L = cs.laplacian(ndim)
    lap = L.weights
    h = cs.fields("h")
    scheme = cs.Scheme({h: h + ALPHA * L(h) + DT * cs.param("s")}, mode=MODE)

    def reference(fields, params, steps):
        u, = fields
        s = params["s"]
        for _ in range(steps):
            u = u + ALPHA * ndimage.correlate(u, lap, mode=MODE) + DT * s
        return [u]

    def data(rng, shape):
        return [rng.uniform(-1, 1, shape)], {"s": rng.uniform(-1e-3, 1e-3,
                                                               shape)}

    return scheme, reference, data


CASES = {
    "wave2d": ((2048, 2048), lambda: wave(2, False)),
    "wave2d-velocity": ((2048, 2048), lambda: wave(2, True)),
    "gray-scott2d": ((2048, 2048), gray_scott),
    "wave3d": ((128, 128, 128), lambda: wave(3, False)),
    "heat-source2d": ((2048, 2048), lambda: heat_source(2)),
    "heat-source3d": ((128, 128, 128), lambda: heat_source(3)),
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--quick", action="store_true",
                        help="small grids: a smoke check, not figures")
    parser.add_argument("--save", default="")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    prov = common.provenance(common.cpu_name())
    records, rows = [], []
    print("%d cores, %d steps a run, median of %d runs, seconds per step"
          % (os.cpu_count() or 1, args.steps, args.repeat))
    print("%-15s %-13s %9s %9s %7s %8s %9s %9s %7s  %s"
          % ("case", "shape", "engine", "reference", "ratio", "rel.err",
             "cpu", "cpu ref", "ratio", "threads"))
    for name in args.cases.split(","):
        shape, make = CASES[name]
        if args.quick:
            shape = tuple(min(n, 64) for n in shape)
        scheme, reference, data = make()
        fields, params = data(rng, shape)
        grids = tuple(fields)
        cs.apply(grids, scheme, steps=1, params=params, backend="cpu")
        ours, theirs = [], []
        for _ in range(args.repeat):
            t0, c0 = time.perf_counter(), time.process_time()
            got = cs.apply(grids, scheme, steps=args.steps, params=params,
                           backend="cpu")
            ours.append((time.perf_counter() - t0, time.process_time() - c0))
            info = cs.last_run_info()
            t0, c0 = time.perf_counter(), time.process_time()
            want = reference(fields, params, args.steps)
            theirs.append((time.perf_counter() - t0,
                           time.process_time() - c0))
        err = max(np.linalg.norm(g - w) / np.linalg.norm(w)
                  for g, w in zip(got, want))
        a, ac = np.median(ours, axis=0) / args.steps
        b, bc = np.median(theirs, axis=0) / args.steps
        print("%-15s %-13s %9.5f %9.5f %6.1fx %8.1e %9.5f %9.5f %6.1fx  %d"
              % (name, "x".join(map(str, shape)), a, b, b / a, err, ac, bc,
                 bc / ac, info["threads"]), flush=True)
        npts = float(np.prod(shape))
        for system, per_step in (("convstencil-scheme", a),
                                 ("scipy-scheme", b)):
            records.append(dict(
                prov, system=system, backend="cpu", preset=name,
                shape=list(shape), steps=args.steps, mode=MODE,
                seconds_per_step=float(per_step),
                gstencils_per_s=npts / per_step / 1e9,
                threads=info["threads"] if system != "scipy-scheme" else 1,
                path=info["path"] if system != "scipy-scheme" else "loop"))
        rows.append("| %s | %s | %.5f | %.5f | %.1f | %s, %d thread(s) | "
                    "%.1e |" % (name, "x".join(map(str, shape)), a, b, b / a,
                                info["path"], info["threads"], err))
    if args.save:
        text = "\n".join(common.markdown_head(
            "PDE schemes on the CPU against the SciPy/NumPy loop", prov,
            "Seconds a step, the median of %d runs of %d steps each "
            "(convstencil.apply(grids, scheme, steps=%d, params=..., "
            "backend='cpu') from host grids, its results allocated; the "
            "reference: scipy.ndimage.correlate per stencil term and NumPy "
            "for the rest, on one core), mode %s; relative error of the "
            "engine's fields against the loop's." % (
                args.repeat, args.steps, args.steps, MODE),
            ["scheme", "grid", "convstencil s/step", "SciPy/NumPy s/step",
             "times faster", "engine path", "rel. error"]) + rows) + "\n"
        common.write_results(args.save, records, text)


if __name__ == "__main__":
    main()
