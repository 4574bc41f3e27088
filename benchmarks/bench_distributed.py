"""convstencil.distributed: what spreading one grid over ranks costs.

CPU (default): weak scaling on this machine.  Each rank holds a block of
the same size (heat2d 2048^2 and heat3d 160^3 per rank, wrap); the run
with N ranks is compared with one rank on one block:
  efficiency = time(1 rank) / time(N ranks)
and the exchange share is the time in halo exchanges over the run's
time (the slowest rank's).  With more than one rank each case runs with
the interior's compute overlapping the exchange forced off and forced on
(k chosen by the cost model for each), and the table says which of the
two the model picks when left to decide (overlap=None).  Every figure is the median of --repeat runs
after a warm-up.  The driver starts `mpiexec -n N` for each N:

    python benchmarks/bench_distributed.py --ranks 1 2 --save cpu_distributed

GPU (--gpu, one rank): the distributed path against plain apply on the
same device array, heat2d 10240^2 and heat3d 512^3 (wrap; the one rank
exchanges nothing, its axes are whole: the figure is the distributed
path's own cost):

    python benchmarks/bench_distributed.py --gpu --ranks 1 --save h100_distributed

Each rank runs one thread (OMP_NUM_THREADS=1 unless set), so N ranks use
N cores: weak scaling with the resources growing with the ranks.  The
one-rank run also times plain convstencil.apply on its block (the
distributed path's own overhead there).
"""
import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

CPU_CASES = [("heat2d", (2048, 2048), 100), ("heat3d", (160, 160, 160), 40)]
GPU_CASES = [("heat2d", (10240, 10240), 1000), ("heat3d", (512, 512, 512),
                                                 500)]


def _median_time(fn, repeat):
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)), out


def worker(args):
    """One rank of `mpiexec -n N`: prints one JSON line per case (rank 0)."""
    from mpi4py import MPI
    import convstencil as cs
    import convstencil.distributed as csd
    comm = MPI.COMM_WORLD
    size, rank = comm.Get_size(), comm.Get_rank()
    backend = "cuda" if args.gpu else "cpu"
    for preset, block, steps in (GPU_CASES if args.gpu else CPU_CASES):
        # weak scaling: the grid grows along axis 0 with the ranks
        shape = (block[0] * size,) + tuple(block[1:])
        where = csd.local_slices(shape, comm, dims=(size,) + (1,) * (
            len(shape) - 1))
        rng = np.random.default_rng(rank)
        d = csd.from_local(rng.random([s.stop - s.start for s in where]),
                           comm=comm, dims=(size,) + (1,) * (len(shape) - 1),
                           backend=backend)

        # what the model picks left alone (one rank: nothing to hide)
        picked = csd.info(csd.apply(d, preset, steps=1, mode="wrap"))
        flags = [None] if size == 1 or args.gpu else [False, True]
        for overlap in flags:
            record = _measure(comm, d, preset, steps, overlap, args.repeat)
            record.update(preset=preset, block=list(block), steps=steps,
                          gstencils=np.prod(shape) * steps
                          / record["seconds"] / 1e9,
                          model_overlap=picked["overlap"])
            if size == 1:
                grid = d.local
                plain, _ = _median_time(
                    lambda: cs.apply(grid, preset, steps=steps, mode="wrap"),
                    args.repeat)
                record["plain_seconds"] = plain
                record["overhead"] = record["seconds"] / plain - 1.0
            if rank == 0:
                print("RESULT " + json.dumps(record), flush=True)


def _measure(comm, d, preset, steps, overlap, repeat):
    """The median run of apply(..., overlap=overlap) and its info (the
    slowest rank's exchange share and hidden time)."""
    import convstencil.distributed as csd

    def distributed():
        comm.Barrier()
        out = csd.apply(d, preset, steps=steps, mode="wrap",
                        overlap=overlap)
        comm.Barrier()
        return out

    seconds, out = _median_time(distributed, repeat)
    info = csd.info(out)
    shares = comm.gather(info["exchange_seconds"] / info["seconds"], root=0)
    hidden = comm.gather(info["overlap_seconds"], root=0)
    waits = comm.gather(info["wait_after_interior_seconds"], root=0)
    first = comm.Get_rank() == 0
    return {"ranks": comm.Get_size(), "seconds": seconds,
            "overlap": info["overlap"],
            "exchange_share": max(shares) if first else None,
            "overlap_seconds": max(hidden) if first else None,
            "wait_after_interior_seconds": max(waits) if first else None,
            "engine_calls_per_round": info["engine_calls_per_round"],
            "halo_steps": info["halo_steps"],
            "transport": info["transport"], "path": info["path"]}


def drive(args):
    records = []
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    for n in args.ranks:
        records += common.mpi_results(
            n, __file__, ["--repeat", str(args.repeat)]
            + (["--gpu"] if args.gpu else []), env, 1800)
    single = {r["preset"]: r["seconds"] for r in records if r["ranks"] == 1}
    for r in records:
        if r["preset"] in single:
            r["efficiency"] = single[r["preset"]] / r["seconds"]
    markdown = table(records, args)
    print(markdown)
    if args.save:
        import convstencil as cs
        device = (cs._backends.cuda_device() if args.gpu
                  else common.cpu_name())
        prov = common.provenance(device)
        head = ("# convstencil.distributed: %s\n\n- device: %s (%d cores)\n"
                "- date: %s\n- commit: %s\n- command: `%s`\n- MPI: %s\n\n"
                % ("one rank on the GPU against plain apply" if args.gpu
                   else "weak scaling on the CPU", device,
                   os.cpu_count() or 1, prov["date"], prov["commit"],
                   prov["command"], common.mpi_version()))
        common.write_results(args.save, {"provenance": prov,
                                         "records": records}, head + markdown)


def table(records, args):
    if args.gpu:
        rows = ["| preset | grid | steps | plain apply s | distributed s | "
                "overhead | halo_steps | transport | exchange share |",
                "|---|---|---|---|---|---|---|---|---|"]
        for r in records:
            rows.append("| %s | %s | %d | %.4f | %.4f | %+.1f%% | %s | %s | "
                        "%.1f%% |" % (
                            r["preset"], "x".join(map(str, r["block"])),
                            r["steps"], r["plain_seconds"], r["seconds"],
                            100 * r["overhead"], r["halo_steps"],
                            r["transport"], 100 * r["exchange_share"]))
        return "\n".join(rows) + "\n"
    rows = ["| preset | block per rank | steps | ranks | overlap | seconds | "
            "GStencils/s | weak scaling efficiency | exchange share | "
            "halo_steps | calls per round | interior with messages out s | "
            "wait after interior s | model picks overlap | "
            "plain apply s (1 rank) |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        plain = r.get("plain_seconds")
        rows.append("| %s | %s | %d | %d | %s | %.3f | %.2f | %.0f%% | "
                    "%.1f%% | %s | %d | %.3f | %.3f | %s | %s |" % (
                        r["preset"], "x".join(map(str, r["block"])),
                        r["steps"], r["ranks"],
                        "on" if r["overlap"] else "off", r["seconds"],
                        r["gstencils"], 100 * r.get("efficiency", 0),
                        100 * r["exchange_share"], r["halo_steps"],
                        r["engine_calls_per_round"], r["overlap_seconds"],
                        r["wait_after_interior_seconds"],
                        "yes" if r["model_overlap"] else "no",
                        "%.3f" % plain if plain else ""))
    return "\n".join(rows) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--gpu", action="store_true",
                        help="blocks on the GPU (one rank: overhead "
                             "against plain apply)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--save", help="stem of the results files in "
                                       "benchmarks/results/")
    parser.add_argument("--worker", action="store_true",
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
    else:
        drive(args)


if __name__ == "__main__":
    main()
