"""The CPU scheme engine's two ways against each other: whole-grid passes
(CONVSTENCIL_CPU_SCHEME_BLOCK=off, a pass a stage over the whole grid,
the fields copied into padded buffers and out) and the engine's own plan
(blocked passes of several steps over tiles where its model prices them
lower, csrc/cpu/scheme_blocked.c).

For the schemes of bench_explain_schemes_cpu.py (the leapfrog wave in 2D
and 3D, with a velocity field, Gray-Scott, heat with a source field) on
256^2, 1024^2 and 2048^2 (2D) or 64^3 and 128^3 (3D), 1, 10 and 100
steps, random data: convstencil.apply(grids, scheme, steps=...,
backend="cpu", out=...) wall seconds, each way --repeat times after a
warm-up, the two ways in turn twice (whole, plan, whole, plan) so that
a drift of the machine's speed touches both; the median of each.

    python benchmarks/bench_schemes_cpu_blocked.py [--repeat 3]
        [--steps 1,10,100] [--save NAME]
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from bench_explain_schemes_cpu import schemes  # noqa: E402

import convstencil as cs  # noqa: E402

SHAPES = {2: [(256, 256), (1024, 1024), (2048, 2048)],
          3: [(64, 64, 64), (128, 128, 128)]}
BLOCK = "CONVSTENCIL_CPU_SCHEME_BLOCK"


def timed(scheme, grids, params, outs, steps, plan, repeat):
    """Wall seconds of `repeat` calls under `plan` ("off" or "": the
    engine's own), after a warm-up, and the last call's record."""
    os.environ[BLOCK] = plan
    return common.scheme_call_seconds(scheme, grids, params, outs, steps,
                                      repeat)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--steps", default="1,10,100")
    parser.add_argument("--save", default="")
    args = parser.parse_args()
    steps_list = [int(s) for s in args.steps.split(",")]
    kept = os.environ.get(BLOCK)
    rng = np.random.default_rng(11)
    prov = common.provenance(common.cpu_name())
    records, rows = [], []
    for name, (scheme, ndim, pnames) in schemes().items():
        for shape in SHAPES[ndim]:
            grids = tuple(rng.uniform(0.0, 1.0, shape)
                          for _ in scheme.fields)
            params = {p: rng.uniform(0.0, 0.1, shape) for p in pnames}
            outs = tuple(np.empty(shape) for _ in scheme.fields)
            npts = float(np.prod(shape))
            for steps in steps_list:
                whole, plan = [], []
                for _ in range(2):
                    t, _ = timed(scheme, grids, params, outs, steps, "off",
                                 args.repeat)
                    whole += t
                    t, info = timed(scheme, grids, params, outs, steps, "",
                                    args.repeat)
                    plan += t
                w, p = float(np.median(whole)), float(np.median(plan))
                how = "%s/%d" % (info["path"], info["fused_depth"])
                print("%-16s %-14s %4d steps  whole %.5f s  plan %.5f s "
                      "(%s, %d thread(s))  speed-up %.2f" % (
                          name, "x".join(map(str, shape)), steps, w, p, how,
                          info["threads"], w / p), flush=True)
                for system, secs, path, depth in (
                        ("convstencil-scheme-cpu-whole", w, "scheme", 1),
                        ("convstencil-scheme-cpu", p, info["path"],
                         info["fused_depth"])):
                    records.append(dict(
                        prov, system=system, preset=name, shape=list(shape),
                        steps=steps, wall_seconds=secs, path=path,
                        fused_depth=depth, threads=info["threads"],
                        gstencils_per_s=npts * steps / secs / 1e9))
                rows.append("| %s | %s | %d | %.5f | %.5f | %s | %.2f |" % (
                    name, "x".join(map(str, shape)), steps, w, p, how,
                    w / p))
    if kept is None:
        os.environ.pop(BLOCK, None)
    else:
        os.environ[BLOCK] = kept
    if args.save:
        text = "\n".join(common.markdown_head(
            "PDE schemes on the CPU: whole-grid passes against the "
            "engine's plan", prov,
            "Median wall seconds of convstencil.apply(grids, scheme, "
            "steps=..., backend='cpu', out=...) over %d calls of each way, "
            "the two ways in turn twice after a warm-up each; 'whole': "
            "CONVSTENCIL_CPU_SCHEME_BLOCK=off; 'plan': the engine's own "
            "choice (path/depth)." % (2 * args.repeat),
            ["scheme", "grid", "steps", "whole s", "plan s", "plan",
             "whole / plan"]) + rows) + "\n"
        common.write_results(args.save, records, text)


if __name__ == "__main__":
    main()
