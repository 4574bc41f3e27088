"""explain()'s CPU prediction for PDE schemes against the measured call.

For the schemes of bench_schemes.py (the leapfrog wave in 2D and 3D,
with a velocity field, Gray-Scott) and a heat equation with a source
field, on 256^2 and 2048^2 (2D) or 64^3 and 128^3 (3D), 1 to 100 steps,
random data: the median wall time of convstencil.apply (host grids,
out= given, backend "cpu") over --repeat calls after a warm-up, against
explain(...).predicted_seconds for the same call.  The issue's goal is a
fraction (measured / predicted) within 0.75 to 1.33 (on the GPU: 25%).

    python benchmarks/bench_explain_schemes_cpu.py [--repeat 3]
        [--steps 1,10,100] [--save NAME]
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

import convstencil as cs  # noqa: E402

SHAPES = {2: [(256, 256), (2048, 2048)], 3: [(64, 64, 64), (128, 128, 128)]}


def schemes():
    """name -> (scheme, ndim, parameter names)."""
    out = {}
    for ndim in (2, 3):
        L = cs.laplacian(ndim)
        u, up = cs.fields("u up")
        out["wave%dd" % ndim] = (
            cs.Scheme({u: 2 * u - up + 0.1 * L(u), up: u}), ndim, ())
    L = cs.laplacian(2)
    u, up = cs.fields("u up")
    out["wave2d-velocity"] = (
        cs.Scheme({u: 2 * u - up + cs.param("c2") * L(u), up: u}), 2,
        ("c2",))
    u, v = cs.fields("u v")
    out["gray-scott2d"] = (cs.Scheme(
        {u: u + (0.16 * L(u) - u * v ** 2 + 0.035 * (1 - u)),
         v: v + (0.08 * L(v) + u * v ** 2 - 0.095 * v)}, mode="wrap"), 2, ())
    h = cs.fields("h")
    out["heat-source3d"] = (cs.Scheme(
        {h: h + 0.1 * cs.laplacian(3)(h) + cs.param("s")}), 3, ("s",))
    return out


def measure(scheme, pnames, shape, steps, repeat, rng):
    grids = tuple(rng.uniform(0.0, 1.0, shape) for _ in scheme.fields)
    params = {p: rng.uniform(0.0, 0.1, shape) for p in pnames}
    outs = tuple(np.empty(shape) for _ in scheme.fields)
    predicted = cs.explain(shape, scheme, steps=steps,
                           backend="cpu").predicted_seconds
    cs.apply(grids, scheme, steps=steps, params=params, backend="cpu",
             out=outs)  # warm-up
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        cs.apply(grids, scheme, steps=steps, params=params, backend="cpu",
                 out=outs)
        times.append(time.perf_counter() - t)
    return float(np.median(times)), predicted


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--steps", default="1,10,100")
    parser.add_argument("--save", default="")
    args = parser.parse_args()
    steps_list = [int(s) for s in args.steps.split(",")]
    rng = np.random.default_rng(7)
    prov = common.provenance(common.cpu_name())
    records = []
    rows = []
    for name, (scheme, ndim, pnames) in schemes().items():
        for shape in SHAPES[ndim]:
            for steps in steps_list:
                got, pred = measure(scheme, pnames, shape, steps,
                                    args.repeat, rng)
                frac = got / pred
                print("%-16s %-16s %5d steps  measured %.5f s  predicted "
                      "%.5f s  fraction %.2f" % (
                          name, "x".join(map(str, shape)), steps, got, pred,
                          frac), flush=True)
                records.append(dict(prov, system="convstencil-scheme-cpu",
                                    preset=name, shape=list(shape),
                                    steps=steps, wall_seconds=got,
                                    predicted_seconds=pred,
                                    fraction=frac))
                rows.append("| %s | %s | %d | %.5f | %.5f | %.2f |" % (
                    name, "x".join(map(str, shape)), steps, got, pred, frac))
    fracs = [r["fraction"] for r in records]
    inside = sum(0.75 <= f <= 1.33 for f in fracs)
    summary = ("%d of %d cases within 0.75 to 1.33 (fractions %.2f to %.2f)"
               % (inside, len(fracs), min(fracs), max(fracs)))
    print(summary)
    if args.save:
        text = "\n".join(common.markdown_head(
            "explain() of PDE schemes on the CPU", prov,
            "Median wall seconds of convstencil.apply(grids, scheme, "
            "steps=..., backend='cpu', out=...) over %d calls after a "
            "warm-up, against explain()'s predicted_seconds. %s."
            % (args.repeat, summary),
            ["scheme", "grid", "steps", "measured s", "predicted s",
             "measured / predicted"]) + rows) + "\n"
        common.write_results(args.save, records, text)


if __name__ == "__main__":
    main()
