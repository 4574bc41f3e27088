"""Fused depth: bench_gpu.py once per depth limit.

For each d in --depths it runs

    CONVSTENCIL_CUDA_MAX_DEPTH=d python benchmarks/bench_gpu.py
        --presets PRESETS BENCH_GPU_OPTIONS...

(its result files go to a temporary folder) and tabulates one
path (--system: the tensor-core path `convstencil-tc` by default, or the
CUDA-core path `convstencil-cudacore`, tb2d for planar kernels of side
3, 5 and 7; every time step counted, a fused pass of k steps counts k)
per preset (or "randomKxK", as bench_gpu.py takes it) and depth, with
the depth the engine fused and the rate per pass.  Timing, checks and
data are bench_gpu.py's.

    python benchmarks/bench_depth.py --presets heat1d --save h100_1d_depth
        -- --size1d 134217728 --odd1d '' --no-baselines --repeat 3
    python benchmarks/bench_depth.py --presets heat3d,box3d27p
        --save h100_3d_depth -- --odd3d '' --no-baselines --repeat 3

Everything after `--` goes to bench_gpu.py unchanged.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def run_depth(depth, presets, passthrough):
    """Records of one bench_gpu.py run with the depth limit set."""
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, CONVSTENCIL_CUDA_MAX_DEPTH=str(depth),
                   CONVSTENCIL_RESULTS_DIR=tmp)
        cmd = [sys.executable, os.path.join(HERE, "bench_gpu.py"),
               "--presets", presets, "--save", "depth"] + passthrough
        print("CONVSTENCIL_CUDA_MAX_DEPTH=%d %s" % (depth, " ".join(cmd)),
              flush=True)
        subprocess.run(cmd, env=env, check=True)
        with open(os.path.join(tmp, "depth.json")) as f:
            return json.load(f)


def main():
    argv = sys.argv[1:]
    passthrough = []
    if "--" in argv:
        cut = argv.index("--")
        argv, passthrough = argv[:cut], argv[cut + 1:]
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--presets", required=True)
    ap.add_argument("--depths", default="1,2,3")
    ap.add_argument("--system", default="convstencil-tc",
                    choices=("convstencil-tc", "convstencil-cudacore"))
    ap.add_argument("--save", default="")
    args = ap.parse_args(argv)

    depths = [int(d) for d in args.depths.split(",")]
    presets = args.presets.split(",")
    prov = None
    records = []
    rates = {}  # (preset, depth) -> (GStencils/s, fused depth, shape)
    for depth in depths:
        for r in run_depth(depth, args.presets, passthrough):
            if prov is None:
                prov = common.provenance(r["device"])
            if r["system"] != args.system:
                continue
            key = (common.stencil_name(r), depth)
            # the largest grid of the preset (the main shape when there
            # are several)
            if key in rates and rates[key][2] >= r["shape"]:
                continue
            rates[key] = (r["gstencils_per_s"], r.get("fused_depth", 0),
                          r["shape"])
            which = {k: r[k] for k in ("preset", "kernel", "seed")
                     if k in r}
            records.append(dict(prov, **which, shape=r["shape"],
                                steps=r["steps"], system=args.system,
                                max_depth=depth,
                                fused_depth=r.get("fused_depth"),
                                gstencils_per_s=r["gstencils_per_s"]))
    if prov is None:
        raise SystemExit("bench_gpu.py recorded nothing")
    shapes = {p: "x".join(map(str, rates[(p, depths[0])][2]))
              for p in presets if (p, depths[0]) in rates}
    head = ["| CONVSTENCIL_CUDA_MAX_DEPTH |"
            + "".join(" %s %s: GStencils/s (fused) | per pass |"
                      % (p, shapes.get(p, "")) for p in presets),
            "|---|" + "---|---|" * len(presets)]
    for depth in depths:
        cells = []
        for p in presets:
            if (p, depth) not in rates:
                cells += ["-", "-"]
                continue
            g, fused, _ = rates[(p, depth)]
            cells += ["%.1f (%d)" % (g, fused),
                      "%.1f" % (g / fused) if fused else "-"]
        head.append("| %d | %s |" % (depth, " | ".join(cells)))
    path = {"convstencil-tc": "tensor-core path (backend \"cuda-tc\")",
            "convstencil-cudacore": "CUDA-core path (backend "
                                    "\"cuda-core\")"}[args.system]
    md = ("# Fused depth, %s: %s\n\n- device: %s\n- date: %s\n"
          "- commit: %s\n- command: `%s`\n\nGStencils/s of the %s, "
          "every time step counted, with "
          "CONVSTENCIL_CUDA_MAX_DEPTH set to each depth in turn; in brackets "
          "the depth the engine fused; per pass: the rate divided by that "
          "depth.  Timing and checks are bench_gpu.py's (the step loop, CUDA "
          "events, median of its runs).\n\n%s\n"
          % (args.system, args.presets, prov["device"], prov["date"],
             prov["commit"], prov["command"], path, "\n".join(head)))
    print("\n" + md)
    if args.save:
        common.write_results(args.save, records, md)


if __name__ == "__main__":
    main()
