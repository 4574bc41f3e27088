"""convstencil.distributed on the GPUs of one host: weak and strong scaling.

One rank per GPU (`mpiexec -n N`; the ranks of a host take its GPUs in
turn), blocks in device memory, ghosts through NCCL, NVLink multicast off
(NCCL_NVLS_ENABLE=0, set here for every rank).  Grids are cut along axis
0 (dims (N, 1[, 1])), mode wrap, random data.

- Weak scaling: heat2d 10240^2 and heat3d 512^3 per GPU; the grid grows
  along axis 0 with the GPUs.  efficiency = t(1 GPU) / t(N GPUs).
- Strong scaling: heat2d 20480^2 and heat3d 1024^3 on 1..N GPUs: time
  per step, speedup and efficiency against one GPU.

On one GPU each case also times plain engine calls of 64 steps on its
block (a device array in, another out): the wall clock beyond the step
loop (last_run_info()'s device_seconds) is the call's load and store of
the block, which each distributed round pays once
(`call_overhead_seconds`; the device cost model's IO_FRACTION).

Every case runs with the halo depth the cost model picks (halo_steps=None)
and, on more than one GPU, with each k of a sweep, so the table can set
the model's k against the best one found.  A figure is the median of
--repeat runs after a warm-up, wall clock around one distributed apply
between barriers; the exchange's share and its time per round are the
slowest rank's (info(): the exchange returns once its ghosts arrived).

    python benchmarks/bench_multigpu.py --gpus 1 2 --save h200x2_multigpu
    python benchmarks/plot_multigpu.py h200x2_multigpu   # the plot
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

# (kind, preset, block per GPU or whole grid, steps)
CASES = [("weak", "heat2d", (10240, 10240), 600),
         ("weak", "heat3d", (512, 512, 512), 300),
         ("strong", "heat2d", (20480, 20480), 200),
         ("strong", "heat3d", (1024, 1024, 1024), 60)]
QUICK_CASES = [("weak", "heat2d", (1024, 1024), 60),
               ("weak", "heat3d", (64, 64, 64), 30),
               ("strong", "heat2d", (2048, 2048), 40),
               ("strong", "heat3d", (96, 96, 96), 20)]
SWEEP = (1, 2, 4, 8, 16, 32, 64)
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0"}


# ---------------------------------------------------------------------------
# one rank

def _random_block(shape, seed):
    """Random float64 on this rank's GPU (CuPy where present: the host
    would take seconds per GiB), else from NumPy."""
    import convstencil as cs
    try:
        import cupy
    except ImportError:
        return np.random.default_rng(seed).random(shape)
    with cupy.cuda.Device(cs._core.cuda_current_device()):
        block = cupy.random.default_rng(seed).random(shape)
        cupy.cuda.runtime.deviceSynchronize()
    return block


def _timed(comm, d, preset, steps, halo_steps, repeat, **kw):
    """(median seconds, the median run's info) of one distributed apply."""
    import convstencil.distributed as csd
    runs = []
    for i in range(repeat + 1):
        comm.Barrier()
        t0 = time.perf_counter()
        out = csd.apply(d, preset, steps=steps, mode="wrap",
                        halo_steps=halo_steps, **kw)
        comm.Barrier()
        seconds = time.perf_counter() - t0
        if i:  # the first is the warm-up
            runs.append((seconds, csd.info(out)))
        del out
    runs.sort(key=lambda r: r[0])
    return runs[len(runs) // 2]


def _slowest(comm, value):
    return max(comm.allgather(value))


def _record(comm, kind, preset, block, shape, steps, seconds, info,
            halo_steps):
    rounds = max(info["rounds"], 1)
    exchange = _slowest(comm, info["exchange_seconds"])
    return {"kind": kind, "preset": preset, "gpus": comm.Get_size(),
            "block": list(block), "grid": list(shape), "steps": steps,
            "forced_halo_steps": halo_steps,
            "halo_steps": info["halo_steps"], "rounds": info["rounds"],
            "seconds": seconds, "seconds_per_step": seconds / steps,
            "gstencils": float(np.prod(shape, dtype=np.float64)) * steps
            / seconds / 1e9,
            "exchange_seconds": exchange,
            "exchange_share": _slowest(
                comm, info["exchange_seconds"] / info["seconds"]),
            "exchange_seconds_per_round": exchange / rounds,
            "bytes_per_exchange": info["bytes_sent"] // rounds,
            "transport": info["transport"], "path": info["path"],
            "session": info.get("session"),
            "devices": comm.allgather(info["device"])}


def worker(args):
    """One rank: prints one RESULT line per run (rank 0)."""
    from mpi4py import MPI
    import convstencil.distributed as csd
    comm = MPI.COMM_WORLD
    size, rank = comm.Get_size(), comm.Get_rank()
    for kind, preset, extent, steps in (QUICK_CASES if args.quick
                                        else CASES):
        if kind == "weak":
            shape = (extent[0] * size,) + tuple(extent[1:])
        else:
            shape = tuple(extent)
        dims = (size,) + (1,) * (len(shape) - 1)
        where = csd.local_slices(shape, comm, dims=dims)
        block_shape = tuple(s.stop - s.start for s in where)
        if args.backend == "cuda":
            # on the GPU from_local will choose (a device block stays put)
            block = _on_own_gpu(comm, block_shape, rank)
        else:
            block = np.random.default_rng(rank).random(block_shape)
        d = csd.from_local(block, comm=comm, dims=dims,
                           backend=args.backend)
        del block
        _free_cupy_pool()
        if size == 1 and args.backend == "cuda":
            overhead = _call_overhead(d.local, preset, args.repeat)
            print("RESULT " + json.dumps(dict(
                kind=kind, preset=preset, gpus=1, block=list(extent),
                grid=list(shape), call_overhead=True, **overhead)),
                flush=True)
        if args.self_exchange:
            if kind == "weak":
                _self_exchange(comm, d, preset, extent, shape, steps, args)
            continue
        forced = [None] + ([k for k in SWEEP if k <= steps] if size > 1
                           else [])
        for halo_steps in forced:
            seconds, info = _timed(comm, d, preset, steps, halo_steps,
                                   args.repeat if halo_steps is None
                                   else max(args.repeat // 2, 2))
            record = _record(comm, kind, preset, extent, shape, steps,
                             seconds, info, halo_steps)
            if rank == 0:
                print("RESULT " + json.dumps(record), flush=True)
        del d


def _self_exchange(comm, d, preset, extent, shape, steps, args):
    """One GPU exchanging with itself (wrap, axis 0 through NCCL) at the
    model's k: the rounds of an engine session against one engine call
    per round (CONVSTENCIL_DISTRIBUTED_SESSION=0)."""
    for session in (True, False):
        os.environ["CONVSTENCIL_DISTRIBUTED_SESSION"] = "1" if session else "0"
        seconds, info = _timed(comm, d, preset, steps, None, args.repeat,
                               self_exchange=True)
        record = _record(comm, "self-exchange", preset, extent, shape, steps,
                         seconds, info, None)
        if comm.Get_rank() == 0:
            print("RESULT " + json.dumps(record), flush=True)
    os.environ.pop("CONVSTENCIL_DISTRIBUTED_SESSION")


def _call_overhead(block, preset, repeat, steps=64):
    """Median wall clock of one engine call of `steps` on a device block
    (into another array) and of its step loop alone."""
    import convstencil as cs
    from convstencil import _device
    out = _device.DeviceArray(block.shape)
    walls, loops = [], []
    for i in range(repeat + 1):
        t0 = time.perf_counter()
        cs.apply(block, preset, steps=steps, mode="wrap", out=out)
        wall = time.perf_counter() - t0
        if i:
            walls.append(wall)
            loops.append(cs.last_run_info()["device_seconds"])
    wall, loop = float(np.median(walls)), float(np.median(loops))
    return {"steps": steps, "call_seconds": wall, "loop_seconds": loop,
            "call_overhead_seconds": wall - loop,
            "points": int(np.prod(block.shape))}


def _free_cupy_pool():
    """Hand CuPy's cached blocks back (the random block's copy is ours)."""
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        cupy.get_default_memory_pool().free_all_blocks()


def _on_own_gpu(comm, block_shape, rank):
    """A random block on the GPU the distributed grid will use (chosen
    and made current as scatter and from_local do)."""
    from convstencil.distributed import _grid
    _grid._gpu_for_blocks(comm, True, None, False)
    return _random_block(block_shape, rank)


# ---------------------------------------------------------------------------
# the driver

def _gpu_facts():
    def smi(*args):
        try:
            return subprocess.run(["nvidia-smi"] + list(args),
                                  capture_output=True, text=True,
                                  timeout=60).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""
    names = smi("--query-gpu=name", "--format=csv,noheader").splitlines()
    # topo -m underlines its header with terminal escapes
    return names, re.sub(r"\x1b\[[0-9;]*m", "", smi("topo", "-m"))


def drive(args):
    records = []
    env = dict(os.environ, **NO_MULTICAST)
    worker_args = (["--repeat", str(args.repeat), "--backend", args.backend]
                   + (["--quick"] if args.quick else [])
                   + (["--self-exchange"] if args.self_exchange else []))
    for n in args.gpus:
        records += common.mpi_results(n, __file__, worker_args, env,
                                      args.timeout)
    overheads = [r for r in records if r.get("call_overhead")]
    selfx = [r for r in records if r.get("kind") == "self-exchange"]
    records = [r for r in records if not r.get("call_overhead")
               and r.get("kind") != "self-exchange"]
    summarise(records)
    markdown = (table(records) + overhead_table(overheads)
                + self_exchange_table(selfx))
    records += selfx
    print(markdown)
    if args.save:
        save(args, records, markdown, overheads)


def summarise(records):
    """Efficiency against one GPU, and on each sweep the best k (by time)
    set against the model's."""
    one = {(r["kind"], r["preset"]): r["seconds"] for r in records
           if r["gpus"] == 1 and r["forced_halo_steps"] is None}
    for r in records:
        base = one.get((r["kind"], r["preset"]))
        if base is None:
            continue
        if r["kind"] == "weak":
            r["efficiency"] = base / r["seconds"]
        else:
            r["speedup"] = base / r["seconds"]
            r["efficiency"] = r["speedup"] / r["gpus"]
    for r in records:
        if r["forced_halo_steps"] is not None:
            continue
        sweep = [s for s in records
                 if (s["kind"], s["preset"], s["gpus"]) == (
                     r["kind"], r["preset"], r["gpus"])
                 and s["forced_halo_steps"] is not None]
        if sweep:
            best = min(sweep, key=lambda s: s["seconds"])
            r["best_swept_halo_steps"] = best["halo_steps"]
            r["best_swept_seconds"] = best["seconds"]
            r["model_vs_best"] = r["seconds"] / best["seconds"]


def table(records):
    auto = [r for r in records if r["forced_halo_steps"] is None]
    rows = ["| scaling | preset | grid | GPUs | steps | s/step | "
            "GStencils/s | per GPU | efficiency | exchange share | "
            "exchange per round | bytes per exchange (rank) | halo_steps "
            "(model) | best swept k | model's time / best |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in auto:
        best = r.get("best_swept_halo_steps")
        rows.append(
            "| %s | %s | %s | %d | %d | %.3f ms | %.1f | %.1f | %s | %.1f%% "
            "| %s | %s | %s | %s | %s |" % (
                r["kind"], r["preset"], "x".join(map(str, r["grid"])),
                r["gpus"], r["steps"], 1e3 * r["seconds_per_step"],
                r["gstencils"], r["gstencils"] / r["gpus"],
                "%.1f%%" % (100 * r["efficiency"]) if "efficiency" in r
                else "", 100 * r["exchange_share"],
                "%.0f us" % (1e6 * r["exchange_seconds_per_round"])
                if r["halo_steps"] else "",
                "%.2f MB" % (r["bytes_per_exchange"] / 1e6)
                if r["halo_steps"] else "",
                r["halo_steps"] or "none", best or "",
                "%.3f" % r["model_vs_best"] if best else ""))
    sweeps = [r for r in records if r["forced_halo_steps"] is not None]
    if sweeps:
        rows += ["", "The sweep (halo_steps forced):", "",
                 "| scaling | preset | GPUs | k | s/step | exchange share "
                 "| exchange per round |", "|---|---|---|---|---|---|---|"]
        for r in sweeps:
            rows.append("| %s | %s | %d | %d | %.3f ms | %.1f%% | %.0f us |"
                        % (r["kind"], r["preset"], r["gpus"],
                           r["halo_steps"], 1e3 * r["seconds_per_step"],
                           100 * r["exchange_share"],
                           1e6 * r["exchange_seconds_per_round"]))
    return "\n".join(rows) + "\n"


def self_exchange_table(records):
    if not records:
        return ""
    rows = ["", "One GPU exchanging with itself (wrap; axis 0's ghosts "
            "through NCCL), the model's k, rounds in an engine session or "
            "one engine call each:", "",
            "| preset | block | steps | k | rounds | session | s/step | "
            "exchange per round |", "|---|---|---|---|---|---|---|---|"]
    for r in records:
        rows.append("| %s | %s | %d | %s | %d | %s | %.3f ms | %.0f us |" % (
            r["preset"], "x".join(map(str, r["grid"])), r["steps"],
            r["halo_steps"], r["rounds"], "yes" if r["session"] else "no",
            1e3 * r["seconds_per_step"],
            1e6 * r["exchange_seconds_per_round"]))
    return "\n".join(rows) + "\n"


def overhead_table(overheads):
    if not overheads:
        return ""
    rows = ["", "One engine call of 64 steps on one GPU's block (device "
            "array in, another out), median:", "",
            "| preset | block | call | step loop | beyond the loop | "
            "in steps of the loop |",
            "|---|---|---|---|---|---|"]
    for r in overheads:
        rows.append("| %s | %s | %.2f ms | %.2f ms | %.2f ms | %s |" % (
            r["preset"], "x".join(map(str, r["block"])),
            1e3 * r["call_seconds"], 1e3 * r["loop_seconds"],
            1e3 * r["call_overhead_seconds"],
            "%.2f" % (r["call_overhead_seconds"]
                      / (r["loop_seconds"] / r["steps"]))))
    return "\n".join(rows) + "\n"


def save(args, records, markdown, overheads):
    names, topology = _gpu_facts()
    device = "%d x %s" % (len(names), names[0]) if names else "unknown"
    prov = common.provenance(device)
    prov["gpus"] = len(names)
    prov["mpi"] = common.mpi_version()
    prov["environment"] = dict(NO_MULTICAST)
    head = ("# convstencil.distributed on %s: weak and strong scaling\n\n"
            "%s\n\n- GPUs: %d (%s), one rank per GPU, NCCL, %s\n"
            "- MPI: %s\n\n" % (device, common.provenance_sentence(prov),
                               len(names), ", ".join(names),
                               " ".join("%s=%s" % kv
                                        for kv in NO_MULTICAST.items()),
                               prov["mpi"]))
    if topology:
        head += "`nvidia-smi topo -m`:\n\n```\n%s\n```\n\n" % topology
    common.write_results(args.save, {"provenance": prov,
                                     "records": records,
                                     "call_overheads": overheads},
                         head + markdown)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--quick", action="store_true",
                        help="small grids: a check of the harness, not "
                             "figures")
    parser.add_argument("--timeout", type=int, default=1200)
    parser.add_argument("--self-exchange", action="store_true",
                        help="one GPU exchanging with itself: the rounds "
                             "with and without an engine session (weak "
                             "cases' blocks)")
    parser.add_argument("--backend", default="cuda",
                        choices=["cuda", "cpu"],
                        help="cpu: blocks in host memory, to check the "
                             "harness on a machine without GPUs")
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
