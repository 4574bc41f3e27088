"""The halo depth from measurement (convstencil.distributed.tune_halo_steps)
against the cost model's, on device blocks: strong scaling cases, the
grid cut along axis 0, one rank per GPU, mode wrap.

Per case: the tuning (its wall time and each candidate's seconds), then
--repeat runs of each k in turn (model, tuned, model, ...), after a
warm-up; the slowest rank's wall time between barriers, medians.

    mpiexec -n 4 python benchmarks/bench_tune_halo.py --save NAME
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
import time

import numpy as np
from mpi4py import MPI

import convstencil.distributed as csd
from convstencil.distributed._tune import _seconds as _wall

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = (os.environ.get("CONVSTENCIL_RESULTS_DIR")
           or os.path.join(HERE, "results"))
CASES = [("heat2d", (20480, 20480), 200), ("heat3d", (1024, 1024, 1024), 60)]


def case(comm, preset, shape, steps, repeat):
    n = comm.Get_size()
    rng = np.random.default_rng(0)
    u = rng.random(shape) if comm.Get_rank() == 0 else None
    d = csd.scatter(u, comm=comm, dims=(n,) + (1,) * (len(shape) - 1),
                    backend="cuda")
    del u
    kw = dict(steps=steps, mode="wrap")
    t0 = time.perf_counter()
    k, times = csd.tune_halo_steps(d, preset, **kw)
    tuning = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
    model = csd.info(csd.apply(d, preset, **kw))["halo_steps"]
    runs = {"model": [], "tuned": []}
    for _ in range(repeat):
        for name, kk in (("model", None), ("tuned", k)):
            runs[name].append(_wall(comm, lambda: csd.apply(
                d, preset, halo_steps=kk, **kw)))
    med = {name: float(np.median(s)) for name, s in runs.items()}
    return {"preset": preset, "grid": list(shape), "steps": steps,
            "gpus": n, "model_k": model, "tuned_k": k,
            "tuning_seconds": tuning,
            "candidate_seconds": {str(kk): s for kk, s in times.items()},
            "seconds_model_k": med["model"], "seconds_tuned_k": med["tuned"],
            "gstencils_model_k": np.prod(shape) * steps / med["model"] / 1e9,
            "gstencils_tuned_k": np.prod(shape) * steps / med["tuned"] / 1e9}


def parse_case(text):
    """'heat3d:1024x512x512:300' -> ("heat3d", (1024, 512, 512), 300)."""
    try:
        preset, extent, steps = text.split(":")
        shape = tuple(int(n) for n in extent.split("x"))
        return preset, shape, int(steps)
    except ValueError:
        raise argparse.ArgumentTypeError(
            "a case is PRESET:EXTENT:STEPS, e.g. heat3d:1024x512x512:300, "
            "got %r" % text) from None


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--case", action="append", type=parse_case,
                   help="PRESET:EXTENT:STEPS of the whole grid (e.g. "
                        "heat3d:1024x512x512:300), instead of the default "
                        "cases; repeatable")
    p.add_argument("--save")
    args = p.parse_args()
    comm = MPI.COMM_WORLD
    records = [case(comm, preset, shape, steps, args.repeat)
               for preset, shape, steps in (args.case or CASES)]
    if comm.Get_rank() != 0:
        return
    name = subprocess.run(["nvidia-smi", "--query-gpu=name",
                           "--format=csv,noheader"], capture_output=True,
                          text=True).stdout.split("\n")[0].strip()
    prov = {"device": "%d x %s" % (comm.Get_size(), name),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime(
                "%Y-%m-%dT%H:%M:%SZ"),
            "commit": os.environ.get("CONVSTENCIL_COMMIT", "unknown"),
            "command": " ".join(["python"] + sys.argv)}
    lines = ["# Halo depth: tune_halo_steps against the cost model", "",
             "Device: %(device)s; date %(date)s; commit %(commit)s; "
             "command `%(command)s` under mpiexec, one rank per GPU." % prov,
             "", "| preset | grid | GPUs | steps | model k | tuned k | "
             "tuning s | model k ms | tuned k ms | gain | candidates (k: s) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        r.update(prov)
        lines.append("| %s | %s | %d | %d | %d | %d | %.2f | %.2f | %.2f | "
                     "%+.1f%% | %s |" % (
                         r["preset"], "x".join(map(str, r["grid"])),
                         r["gpus"], r["steps"], r["model_k"], r["tuned_k"],
                         r["tuning_seconds"], r["seconds_model_k"] * 1e3,
                         r["seconds_tuned_k"] * 1e3,
                         100 * (r["seconds_model_k"] / r["seconds_tuned_k"]
                                - 1),
                         ", ".join("%s: %.1f ms" % (kk, s * 1e3) for kk, s
                                   in r["candidate_seconds"].items())))
    text = "\n".join(lines) + "\n"
    print(text)
    if args.save:
        os.makedirs(RESULTS, exist_ok=True)
        with open(os.path.join(RESULTS, args.save + ".json"), "w") as f:
            json.dump(records, f, indent=1)
        with open(os.path.join(RESULTS, args.save + ".md"), "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
