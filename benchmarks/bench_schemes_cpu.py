"""CPU benchmark of PDE schemes: the engine's run_scheme against the plain
SciPy/NumPy loop a user would otherwise write (scipy.ndimage.correlate
per stencil term, NumPy arithmetic for the rest).

Cases (mode "wrap", random data, float64):
  wave2d      u <- 2u - u_prev + C L5(u), u_prev <- u          2048^2
  wave2d-c    the same with a parameter field: c L5(u)         2048^2
  gray-scott  u <- u + dt (Du L(u) - u v^2 + F (1 - u)),
              v <- v + dt (Dv L(v) + u v^2 - (F + k) v)         2048^2
  wave3d      the leapfrog wave with the 7-point Laplacian     128^3
  heat-src2d  u <- u + a L5(u) + dt s (s a parameter field)    2048^2
  heat-src3d  the same with the 7-point Laplacian              128^3

The engine and the reference alternate, --repeat times each, every run
`--steps` steps from the same fields (the engine's time includes copying
the fields in and out); the medians are printed with their ratio, and
the engine's result is checked against the reference's.  Wall seconds
first, then the process's CPU seconds (every thread's; the reference runs
on one), which a busy machine disturbs less.  The schemes'
code tables are written out here (csrc/scheme.h), as the Python layer
will build them.

    python benchmarks/bench_schemes_cpu.py [--steps 20] [--repeat 3]
        [--cases wave2d,wave3d] [--quick]
"""
import argparse
import os
import time

import numpy as np
from scipy import ndimage

from convstencil import _core

MODE = "wrap"
C = 0.1                                   # (c dt / dx)^2, stable in 2D/3D
DT, DU, DV, F, K = 1.0, 0.16, 0.08, 0.035, 0.06
ALPHA = 0.1


def laplacian(ndim):
    w = np.zeros((3,) * ndim)
    w[(1,) * ndim] = -2.0 * ndim
    for axis in range(ndim):
        for side in (0, 2):
            index = [1] * ndim
            index[axis] = side
            w[tuple(index)] = 1.0
    return w


def tables(k, stages):
    """Code tables of `stages`: lists of (target, terms); a term is
    ("s", coef, param, field, stencil) or ("m", coef, param, powers)."""
    coefs, terms, updates, stage_rows = [], [], [], []
    for stage in stages:
        stage_rows.append([len(updates), len(stage)])
        for target, update_terms in stage:
            updates.append([target, len(terms), len(update_terms)])
            for t in update_terms:
                coefs.append(t[1])
                if t[0] == "s":
                    terms.append([0, t[2], t[3], t[4]] + [0] * k)
                else:
                    terms.append([1, t[2], -1, -1] + list(t[3]))
    return (np.array(coefs, np.float64),
            np.array(terms, np.int32).reshape(-1, 4 + k),
            np.array(updates, np.int32).reshape(-1, 3),
            np.array(stage_rows, np.int32).reshape(-1, 2))


def wave(ndim, with_c):
    lap = laplacian(ndim)
    coef, param = (1.0, 0) if with_c else (C, -1)
    t = tables(2, [[(0, [("m", 2.0, -1, [1, 0]), ("m", -1.0, -1, [0, 1]),
                         ("s", coef, param, 0, 0)]),
                    (1, [("m", 1.0, -1, [1, 0])])]])

    def reference(fields, params, steps):
        u, u_prev = fields
        c = params[0] if with_c else C
        for _ in range(steps):
            u, u_prev = (2 * u - u_prev
                         + c * ndimage.correlate(u, lap, mode=MODE)), u
        return [u, u_prev]

    def data(rng, shape):
        fields = [rng.uniform(-1, 1, shape), rng.uniform(-1, 1, shape)]
        params = [rng.uniform(0.0, C, shape)] if with_c else []
        return fields, params

    return t, [lap], reference, data


def gray_scott():
    lap = laplacian(2)
    t = tables(2, [[
        (0, [("m", 1.0, -1, [1, 0]), ("s", DT * DU, -1, 0, 0),
             ("m", -DT, -1, [1, 2]), ("m", DT * F, -1, [0, 0]),
             ("m", -DT * F, -1, [1, 0])]),
        (1, [("m", 1.0, -1, [0, 1]), ("s", DT * DV, -1, 1, 0),
             ("m", DT, -1, [1, 2]), ("m", -DT * (F + K), -1, [0, 1])])]])

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
        return [rng.uniform(0.5, 1.0, shape), rng.uniform(0.0, 0.3, shape)], []

    return t, [lap], reference, data


def heat_source(ndim):
    lap = laplacian(ndim)
    t = tables(1, [[(0, [("m", 1.0, -1, [1]), ("s", ALPHA, -1, 0, 0),
                         ("m", DT, 0, [0])])]])

    def reference(fields, params, steps):
        u, = fields
        s, = params
        for _ in range(steps):
            u = u + ALPHA * ndimage.correlate(u, lap, mode=MODE) + DT * s
        return [u]

    def data(rng, shape):
        return [rng.uniform(-1, 1, shape)], [rng.uniform(-1e-3, 1e-3, shape)]

    return t, [lap], reference, data


CASES = {
    "wave2d": ((2048, 2048), lambda: wave(2, False)),
    "wave2d-c": ((2048, 2048), lambda: wave(2, True)),
    "gray-scott": ((2048, 2048), gray_scott),
    "wave3d": ((128, 128, 128), lambda: wave(3, False)),
    "heat-src2d": ((2048, 2048), lambda: heat_source(2)),
    "heat-src3d": ((128, 128, 128), lambda: heat_source(3)),
}


def run_engine(t, stencils, fields, params, steps, threads=0):
    out = tuple(np.empty_like(f) for f in fields)
    info = _core.run_scheme(tuple(fields), out, tuple(params),
                            tuple(stencils), *t, steps,
                            getattr(_core, "MODE_" + MODE.upper()), 0.0,
                            _core.BACKEND_CPU, threads, False, None)
    return list(out), info


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--threads", type=int, default=0,
                        help="the engine's threads (0: OpenMP's default)")
    parser.add_argument("--quick", action="store_true",
                        help="small grids: a smoke check, not figures")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print("%d cores, %d steps a run, median of %d runs, seconds per step"
          % (os.cpu_count() or 1, args.steps, args.repeat))
    print("%-11s %-13s %9s %9s %7s %8s %9s %9s %7s  %s"
          % ("case", "shape", "engine", "reference", "ratio", "rel.err",
             "cpu", "cpu ref", "ratio", "threads"))
    for name in args.cases.split(","):
        shape, make = CASES[name]
        if args.quick:
            shape = tuple(min(n, 64) for n in shape)
        t, stencils, reference, data = make()
        fields, params = data(rng, shape)
        run_engine(t, stencils, fields, params, 1)      # warm-up
        ours, theirs = [], []
        for _ in range(args.repeat):
            t0, c0 = time.perf_counter(), time.process_time()
            got, info = run_engine(t, stencils, fields, params, args.steps,
                                   args.threads)
            ours.append((time.perf_counter() - t0, time.process_time() - c0))
            t0, c0 = time.perf_counter(), time.process_time()
            want = reference(fields, params, args.steps)
            theirs.append((time.perf_counter() - t0,
                           time.process_time() - c0))
        err = max(np.linalg.norm(g - w) / np.linalg.norm(w)
                  for g, w in zip(got, want))
        a, ac = np.median(ours, axis=0) / args.steps
        b, bc = np.median(theirs, axis=0) / args.steps
        print("%-11s %-13s %9.5f %9.5f %6.1fx %8.1e %9.5f %9.5f %6.1fx  %d"
              % (name, "x".join(map(str, shape)), a, b, b / a, err, ac, bc,
                 bc / ac, info["threads"]))


if __name__ == "__main__":
    main()
