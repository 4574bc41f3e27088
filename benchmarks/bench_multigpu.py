"""convstencil.distributed on the GPUs of one host, against the plain
single-GPU convstencil.apply: weak and strong scaling efficiency.

One rank per GPU (`mpiexec -n N`; the ranks of a host take its GPUs in
turn), blocks in device memory, ghosts through the transport that
--transport names (default "auto": CUDA IPC where every rank is on one
host, else NCCL), NVLink multicast off (NCCL_NVLS_ENABLE=0, set here for
every rank).  Grids are cut along axis
0 (dims (N, 1[, 1])), or with --dims balanced as MPI.Compute_dims cuts
them (scatter's default); mode wrap, random data.

What is timed, in each `mpiexec -n N` (the same run for both sides):

- The baseline: plain ``convstencil.apply(x, preset, steps=, mode="wrap",
  out=y)`` on one GPU, x and y preallocated device arrays (so no
  allocation is timed; the call returns when its result is complete).
  Every rank times it on its own GPU at the same time (a barrier before
  each call) and the slowest rank's median is the baseline: the
  distributed run goes at the pace of its slowest GPU.  The records keep
  every rank's median (`seconds_by_rank`), so the spread is visible.
  x is one block (weak: the block per GPU; strong: the grid / N along
  axis 0) and, for strong scaling, also the whole grid on one GPU
  (copies of the block along axis 0; a record says so where it does not
  fit in one GPU's memory).
- The distributed run: ``convstencil.distributed.apply`` on the grid,
  wall clock between barriers (so the slowest rank's), with the halo
  depth the cost model picks (halo_steps=None) and, on more than one
  GPU, with each k of a sweep (--sweep), so that k can be chosen from
  measurement as well as from the model.

A figure is the median of --repeat runs after a warm-up (the sweep's: of
about half as many).  GStencils/s = points * steps / seconds / 1e9; per
GPU = that / N.

- Weak scaling (heat2d 10240^2, heat3d 512^3 per GPU; the grid grows
  along axis 0): efficiency = per-GPU rate of the distributed run / rate
  of plain apply on one block = t_plain(block) / t_N.
- Strong scaling (heat2d 20480^2, heat3d 1024^3): efficiency = per-GPU
  rate / rate of plain apply on the whole grid on one GPU
  = t_plain(whole) / (N * t_N); `efficiency_vs_block` sets the per-GPU
  rate against plain apply on the block (grid / N) instead, which
  separates what the smaller block costs from what distribution costs.
- `efficiency_vs_distributed_1`: against the distributed layer on one
  rank (the figure this harness reported before), for information.

Records: `system` "convstencil" (the plain baseline, `gpus` 1,
`launch_gpus` N) or "convstencil-distributed" (`gpus` N), `device` (the
GPU's name), `halo_steps` (k), and the provenance (date, command,
commit) in each.

    python benchmarks/bench_multigpu.py --gpus 1 2 4 --save h100x4_multigpu
    python benchmarks/bench_multigpu.py --gpus 1 2 --quick     # harness check
    python benchmarks/plot_multigpu.py h100x4_multigpu          # the plot
"""
import argparse
import contextlib
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

# (kind, preset, block per GPU (weak) or whole grid (strong), steps)
CASES = [("weak", "heat2d", (10240, 10240), 600),
         ("weak", "heat3d", (512, 512, 512), 300),
         ("strong", "heat2d", (20480, 20480), 200),
         ("strong", "heat3d", (1024, 1024, 1024), 60)]
QUICK_CASES = [("weak", "heat2d", (1024, 1024), 60),
               ("weak", "heat3d", (64, 64, 64), 30),
               ("strong", "heat2d", (2048, 2048), 40),
               ("strong", "heat3d", (96, 96, 96), 20)]
# The forced halo depths.  k of 1 to 4 were always far behind on two
# H200s (h200x2_multigpu*.md: 1.3 to 4 times the model's time), so the
# sweep starts at 8; the model has picked up to 192 for heat2d.
SWEEP = (8, 16, 32, 64, 128, 256)
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0"}
DISTRIBUTED, PLAIN = "convstencil-distributed", "convstencil"
# info()'s parts of the setup and of the exchanges
PART_KEYS = ("setup_seconds", "load_seconds", "exchange_pack_seconds",
             "exchange_move_seconds", "exchange_unpack_seconds")


# ---------------------------------------------------------------------------
# one rank: the grids

def _layout(kind, extent, size, dims="slabs"):
    """(global shape, dims) of a case on `size` ranks: cut along axis 0
    ("slabs"), or as MPI.Compute_dims cuts it ("balanced", scatter's
    default: 2 x 2 on 4 ranks)."""
    shape = tuple(extent)
    if kind == "weak":
        shape = (extent[0] * size,) + tuple(extent[1:])
    if dims == "balanced":
        from mpi4py import MPI
        return shape, tuple(MPI.Compute_dims(size, [0] * len(shape)))
    return shape, (size,) + (1,) * (len(shape) - 1)


def _random_block(shape, seed, gpu):
    """Random float64 on GPU `gpu` with CuPy where present (the host
    would take seconds per GiB), else a NumPy array (from_local uploads
    it)."""
    try:
        import cupy
    except ImportError:
        return np.random.default_rng(seed).random(shape)
    with cupy.cuda.Device(gpu):
        block = cupy.random.default_rng(seed).random(shape)
        cupy.cuda.runtime.deviceSynchronize()
    return block


def _free_cupy_pool():
    """Hand CuPy's cached blocks back (the random block's copy is ours)."""
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        cupy.get_default_memory_pool().free_all_blocks()


def _distributed_grid(comm, shape, dims, backend):
    """This rank's random block of `shape` over `dims`, on its own GPU
    (chosen and made current as from_local does), as a DistributedGrid."""
    import convstencil.distributed as csd
    from convstencil.distributed import _grid
    where = csd.local_slices(shape, comm, dims=dims)
    block_shape = tuple(s.stop - s.start for s in where)
    if backend == "cuda":
        gpu = _grid._gpu_for_blocks(comm, True, None, False)
        block = _random_block(block_shape, comm.Get_rank(), gpu)
    else:
        block = np.random.default_rng(comm.Get_rank()).random(block_shape)
    d = csd.from_local(block, comm=comm, dims=dims, backend=backend)
    del block
    _free_cupy_pool()
    return d


def _empty_like(block, shape):
    """An uninitialised float64 grid of `shape` where `block` lives."""
    import convstencil as cs
    if isinstance(block, np.ndarray):
        return np.empty(shape)
    return cs.DeviceArray(shape)


def _tiled(block, shape):
    """A grid of `shape` holding copies of `block` side by side along
    every axis (the plain whole-grid run's input; no host copy for
    device blocks)."""
    whole = _empty_like(block, shape)
    starts = [range(0, n, b) for n, b in zip(shape, block.shape)]
    for start in itertools.product(*starts):
        sizes = tuple(min(b, n - s)
                      for s, b, n in zip(start, block.shape, shape))
        _copy_box(block, whole, start, sizes)
    return whole


def _copy_box(block, whole, start, sizes):
    """whole[start:start + sizes] = block[:sizes]."""
    if isinstance(whole, np.ndarray):
        whole[tuple(slice(s, s + n) for s, n in zip(start, sizes))] = \
            block[tuple(slice(0, n) for n in sizes)]
        return
    from convstencil.distributed import _device_blocks as blocks
    blocks.copy(blocks.region(block, (0,) * len(sizes), sizes),
                blocks.region(whole, start, sizes))


def _gpu_name(d):
    """The name of the GPU holding d's block ("cpu" for host blocks)."""
    import convstencil as cs
    if not d.on_device:
        return "cpu"
    for dev in cs.devices():
        if dev["index"] == d.device:
            return dev["description"].split(",")[0]
    return "unknown GPU"


# ---------------------------------------------------------------------------
# one rank: timing

def _nvtx():
    """(push, pop) of NVTX ranges for a profiler's timeline, from the
    nvtx package, CuPy or libnvToolsExt; no-ops where none is found."""
    try:
        import nvtx
        return nvtx.push_range, nvtx.pop_range
    except ImportError:
        pass
    try:
        from cupy.cuda import nvtx
        return nvtx.RangePush, nvtx.RangePop
    except ImportError:
        pass
    try:
        import ctypes
        lib = ctypes.CDLL("libnvToolsExt.so.1")
        return (lambda name: lib.nvtxRangePushA(name.encode()),
                lib.nvtxRangePop)
    except OSError:
        return (lambda name: None), (lambda: None)


_PUSH, _POP = _nvtx()


@contextlib.contextmanager
def _range(name):
    _PUSH(name)
    try:
        yield
    finally:
        _POP()


def _time_plain(comm, x, out, preset, steps, repeat, backend):
    """This rank's median (wall, step loop) seconds of plain
    convstencil.apply on `x` into `out`, every rank at the same time on
    its own GPU; and the engine's path."""
    import convstencil as cs
    walls, loops = [], []
    for i in range(repeat + 1):
        comm.Barrier()
        with _range("plain %s %s run %d" % (preset, "x".join(
                map(str, x.shape)), i)):
            t0 = time.perf_counter()
            cs.apply(x, preset, steps=steps, mode="wrap", out=out,
                     backend=backend)
            wall = time.perf_counter() - t0
        if i:  # the first is the warm-up
            walls.append(wall)
            loops.append(cs.last_run_info().get("device_seconds") or wall)
    return (float(np.median(walls)), float(np.median(loops)),
            cs.last_run_info()["path"])


def _plain_record(comm, x, out, preset, steps, repeat, backend):
    """The record of plain apply on `x` on every rank's GPU: the slowest
    rank's median; None on ranks other than 0."""
    wall, loop, path = _time_plain(comm, x, out, preset, steps, repeat,
                                   backend)
    walls, loops = comm.gather(wall), comm.gather(loop)
    if comm.Get_rank():
        return None
    slowest = int(np.argmax(walls))
    return {"system": PLAIN, "gpus": 1, "launch_gpus": comm.Get_size(),
            "grid": list(x.shape), "steps": steps, "fits": True,
            "seconds": walls[slowest], "seconds_by_rank": walls,
            "loop_seconds": loops[slowest],
            "seconds_per_step": walls[slowest] / steps,
            "gstencils": _gstencils(x.shape, steps, walls[slowest]),
            "path": path}


def _gstencils(shape, steps, seconds):
    return float(np.prod(shape, dtype=np.float64)) * steps / seconds / 1e9


def _whole_record(comm, d, shape, preset, steps, repeat, backend):
    """Plain apply on the whole grid on every rank's GPU, or a record
    saying that its input and output do not fit in one GPU (on some
    rank)."""
    from mpi4py import MPI
    try:
        grids = (_tiled(d.local, shape), _empty_like(d.local, shape))
    except MemoryError:
        grids = None
    if not comm.allreduce(0 if grids is None else 1, op=MPI.MIN):
        del grids
        return {"system": PLAIN, "gpus": 1, "launch_gpus": comm.Get_size(),
                "grid": list(shape), "steps": steps, "fits": False,
                "seconds": None, "note": "the whole grid (input and "
                "output) does not fit in one GPU's memory"}
    return _plain_record(comm, *grids, preset, steps, repeat, backend)


# --overlap: apply()'s argument
OVERLAP = {"auto": None, "on": True, "off": False}


def _timed(comm, d, preset, steps, halo_steps, repeat, **kw):
    """(median seconds, the median run's info) of one distributed apply."""
    import convstencil.distributed as csd
    runs = []
    for i in range(repeat + 1):
        comm.Barrier()
        with _range("distributed %s k=%s run %d" % (preset, halo_steps, i)):
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


def _distributed_record(comm, d, seconds, info, steps, halo_steps):
    rounds = max(info["rounds"], 1)
    exchange = _slowest(comm, info["exchange_seconds"])
    return {"system": DISTRIBUTED, "gpus": comm.Get_size(),
            "grid": list(d.shape), "block": list(d.local_shape),
            "dims": list(d.dims),
            "steps": steps, "forced_halo_steps": halo_steps,
            "halo_steps": info["halo_steps"], "rounds": info["rounds"],
            "seconds": seconds, "seconds_per_step": seconds / steps,
            "gstencils": _gstencils(d.shape, steps, seconds),
            "exchange_seconds": exchange,
            "exchange_share": _slowest(
                comm, info["exchange_seconds"] / info["seconds"]),
            "exchange_seconds_per_round": exchange / rounds,
            "bytes_per_exchange": info["bytes_sent"] // rounds,
            "transport": info["transport"], "path": info["path"],
            "session": info.get("session"),
            "overlap": info.get("overlap"),
            "split_bands": info.get("split_bands"),
            # where the time goes, each rank's seconds (phases.table)
            "run_seconds_by_rank": comm.allgather(info["seconds"]),
            "compute_seconds_by_rank": comm.allgather(
                info["compute_seconds"]),
            "exchange_seconds_by_rank": comm.allgather(
                info["exchange_seconds"]),
            "vote_seconds_by_rank": comm.allgather(
                info.get("vote_seconds", 0.0)),
            # the setup and the exchange taken apart
            **{"%s_by_rank" % key: comm.allgather(info.get(key))
               for key in PART_KEYS},
            "gpu_indices": comm.allgather(info["device"])}


def _sweep(args, steps, size, model_k):
    """The forced k of a case: none on one rank (nothing is exchanged),
    nor the model's own k (its run has more repeats)."""
    if size == 1:
        return []
    return [k for k in args.sweep if k <= steps and k != model_k]


# ---------------------------------------------------------------------------
# one rank: the cases

def worker(args):
    """One rank: prints one RESULT line per record (rank 0)."""
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    for kind, preset, extent, steps in _cases(args):
        shape, dims = _layout(kind, extent, comm.Get_size(), args.dims)
        d = _distributed_grid(comm, shape, dims, args.backend)
        names = comm.allgather(_gpu_name(d))
        tag = dict(kind=kind, preset=preset, case=list(extent),
                   device=" / ".join(sorted(set(names))))
        for record in _plain_records(comm, d, kind, shape, preset, steps,
                                     args):
            _emit(comm, record, tag)
        if args.self_exchange:
            if kind == "weak":
                _self_exchange(comm, d, preset, steps, args, tag)
            continue
        seconds, info = _timed(comm, d, preset, steps, None, args.repeat,
                               transport=args.transport,
                               overlap=OVERLAP[args.overlap])
        _emit(comm, _distributed_record(comm, d, seconds, info, steps, None),
              tag)
        for k in _sweep(args, steps, comm.Get_size(), info["halo_steps"]):
            seconds, info = _timed(comm, d, preset, steps, k,
                                   max(args.repeat // 2, 2),
                                   transport=args.transport,
                                   overlap=OVERLAP[args.overlap])
            _emit(comm, _distributed_record(comm, d, seconds, info, steps,
                                            k), tag)
        del d


def _cases(args):
    if args.case:
        return [_parse_case(text) for text in args.case]
    return QUICK_CASES if args.quick else CASES


def _parse_case(text):
    """'weak:heat2d:10240x10240:600' -> ("weak", "heat2d", (10240, 10240),
    600)."""
    kind, preset, extent, steps = text.split(":")
    if kind not in ("weak", "strong"):
        raise SystemExit("--case: the kind is weak or strong, got %r" % kind)
    return kind, preset, common.parse_shape(extent), int(steps)


def _plain_records(comm, d, kind, shape, preset, steps, args):
    """Plain apply on the block, and for strong scaling on more than one
    GPU on the whole grid (on one GPU the block is the whole grid)."""
    out = _empty_like(d.local, d.local.shape)
    block = _plain_record(comm, d.local, out, preset, steps, args.repeat,
                          args.backend)
    del out
    yield dict(block or {}, role="block")
    if kind == "strong" and comm.Get_size() > 1:
        whole = _whole_record(comm, d, shape, preset, steps, args.repeat,
                              args.backend)
        yield dict(whole or {}, role="whole")


def _emit(comm, record, tag):
    if comm.Get_rank() == 0:
        print("RESULT " + json.dumps(dict(tag, **record)), flush=True)


def _self_exchange(comm, d, preset, steps, args, tag):
    """One GPU exchanging with itself along axis 0 alone (wrap, through
    the transport: a slab's rounds, split as a slab's are) at the model's
    k: the rounds of an engine session against one engine call per round
    (CONVSTENCIL_DISTRIBUTED_SESSION=0)."""
    for session in (True, False):
        os.environ["CONVSTENCIL_DISTRIBUTED_SESSION"] = "1" if session else "0"
        seconds, info = _timed(comm, d, preset, steps, None, args.repeat,
                               self_exchange=(0,), transport=args.transport,
                               overlap=OVERLAP[args.overlap])
        record = _distributed_record(comm, d, seconds, info, steps, None)
        _emit(comm, dict(record, self_exchange=True), tag)
    os.environ.pop("CONVSTENCIL_DISTRIBUTED_SESSION")


# ---------------------------------------------------------------------------
# the driver: efficiencies

def _key(r, gpus=None):
    return (r["kind"], r["preset"], tuple(r["case"]),
            r["gpus"] if gpus is None else gpus)


def summarise(records):
    """Each distributed record's efficiencies (against plain apply in
    its own launch, and against the distributed run on one GPU); each
    model run's best swept k."""
    plain = {_key(r, r["launch_gpus"]) + (tuple(r["grid"]),): r
             for r in records if r["system"] == PLAIN}
    dist = [r for r in records if r["system"] == DISTRIBUTED
            and not r.get("self_exchange")]
    one = {_key(r): r for r in dist
           if r["gpus"] == 1 and r["forced_halo_steps"] is None}
    for r in dist:
        _efficiencies(r, plain, one)
    for r in records:
        if r.get("self_exchange"):
            _efficiencies(r, plain, {})
    for r in dist:
        if r["forced_halo_steps"] is None:
            _best_k(r, dist)


def _per_gpu(r):
    return r["gstencils"] / r["gpus"]


def _efficiencies(r, plain, one):
    block = plain.get(_key(r) + (tuple(r["block"]),))
    whole = plain.get(_key(r) + (tuple(r["grid"]),))
    r["plain_block_gstencils"] = block["gstencils"] if block else None
    r["plain_block_seconds_per_step"] = (block["seconds_per_step"]
                                         if block else None)
    r["plain_whole_gstencils"] = (whole["gstencils"] if r["kind"] == "strong"
                                  and whole and whole["fits"] else None)
    r["efficiency_vs_block"] = (_per_gpu(r) / block["gstencils"]
                                if block else None)
    if r["kind"] == "weak":
        r["efficiency"] = r["efficiency_vs_block"]
    else:
        r["efficiency"] = (_per_gpu(r) / r["plain_whole_gstencils"]
                           if r["plain_whole_gstencils"] else None)
    base = one.get(_key(r, 1))
    r["efficiency_vs_distributed_1"] = (_per_gpu(r) / _per_gpu(base)
                                        if base else None)


def _best_k(r, dist):
    """The fastest of the model's run and the sweep's (same case and
    GPUs): its k, rate and efficiency, set against the model's."""
    runs = [s for s in dist if _key(s) == _key(r)]
    best = min(runs, key=lambda s: s["seconds"])
    r["best_halo_steps"] = best["halo_steps"]
    r["best_gstencils"] = best["gstencils"]
    r["best_efficiency"] = best["efficiency"]
    r["model_vs_best"] = r["seconds"] / best["seconds"]


# ---------------------------------------------------------------------------
# the driver: tables

def _pct(value):
    return "" if value is None else "%.1f%%" % (100 * value)


def _rate(value):
    return "" if value is None else "%.1f" % value


def _grid(r):
    """The grid, and the process grid where it is not slabs."""
    text = "x".join(map(str, r["grid"]))
    dims = r.get("dims") or []
    if any(p > 1 for p in dims[1:]):
        text += " (ranks %s)" % "x".join(map(str, dims))
    return text


def table(records):
    """The model's runs: rates, efficiencies, k (model and best)."""
    rows = ["| scaling | preset | grid | GPUs | s/step | GStencils/s | "
            "per GPU | plain apply, block | plain apply, whole grid | "
            "efficiency | vs block | vs distributed on 1 GPU | k (model) "
            "| best k | per GPU at best k | efficiency at best k | "
            "exchange share | exchange per round | MB per exchange (rank) |",
            "|" + "---|" * 19]
    for r in records:
        if r["system"] != DISTRIBUTED or r["forced_halo_steps"] is not None \
                or r.get("self_exchange"):
            continue
        exchanged = bool(r["halo_steps"]) and r["gpus"] > 1
        rows.append("| " + " | ".join([
            r["kind"], r["preset"], _grid(r), str(r["gpus"]),
            "%.3f ms" % (1e3 * r["seconds_per_step"]),
            _rate(r["gstencils"]), _rate(_per_gpu(r)),
            _rate(r.get("plain_block_gstencils")),
            _rate(r.get("plain_whole_gstencils")),
            _pct(r.get("efficiency")), _pct(r.get("efficiency_vs_block")),
            _pct(r.get("efficiency_vs_distributed_1")),
            str(r["halo_steps"] or "none"),
            str(r.get("best_halo_steps") or "") if exchanged else "",
            _rate(r["best_gstencils"] / r["gpus"]) if exchanged else "",
            _pct(r.get("best_efficiency")) if exchanged else "",
            "%.1f%%" % (100 * r["exchange_share"]),
            "%.0f us" % (1e6 * r["exchange_seconds_per_round"])
            if exchanged else "",
            "%.2f" % (r["bytes_per_exchange"] / 1e6) if exchanged else "",
        ]) + " |")
    return "\n".join(rows) + "\n"


def sweep_table(records):
    """Every k run on more than one GPU, the model's marked."""
    runs = sorted((r for r in records if r["system"] == DISTRIBUTED
                   and r["gpus"] > 1 and not r.get("self_exchange")),
                  key=lambda r: (r["kind"] != "weak", r["preset"],
                                 r["gpus"], r["halo_steps"] or 0))
    if not runs:
        return ""
    rows = ["", "Every halo depth k run (model: the cost model's pick, "
            "halo_steps=None; the others forced):", "",
            "| scaling | preset | GPUs | k | chosen by | s/step | "
            "per GPU | efficiency | exchange share | exchange per round |",
            "|" + "---|" * 10]
    for r in runs:
        rows.append("| %s | %s | %d | %s | %s | %.3f ms | %s | %s | %.1f%% "
                    "| %.0f us |" % (
                        r["kind"], r["preset"], r["gpus"], r["halo_steps"],
                        "model" if r["forced_halo_steps"] is None
                        else "sweep", 1e3 * r["seconds_per_step"],
                        _rate(_per_gpu(r)), _pct(r.get("efficiency")),
                        100 * r["exchange_share"],
                        1e6 * r["exchange_seconds_per_round"]))
    return "\n".join(rows) + "\n"


def phase_table(records):
    """Where a run of the model's k spends its time: the wall time of the
    call (all ranks, barrier to barrier) against the run inside it
    (info()'s seconds: the rounds), and the rounds' compute, exchange and
    votes, the slowest and fastest rank's each (the others are setup:
    the plan, the padded blocks, the transport, the result)."""
    runs = [r for r in records if r["system"] == DISTRIBUTED
            and r["forced_halo_steps"] is None and r["gpus"] > 1
            and "run_seconds_by_rank" in r]
    if not runs:
        return ""
    span = lambda v: "%.2f / %.2f" % (1e3 * max(v), 1e3 * min(v))  # noqa
    rows = ["", "Where the model's runs spend their time, ms for the whole "
            "call (slowest rank / fastest rank; compute, exchange and vote "
            "summed over the rounds; setup: the wall time less the slowest "
            "rank's run):", "",
            "| scaling | preset | GPUs | k | rounds | wall | run | setup | "
            "compute | exchange | vote | plain apply's steps |",
            "|" + "---|" * 12]
    for r in runs:
        plain = r["steps"] * (r.get("plain_block_seconds_per_step") or 0.0)
        rows.append("| %s | %s | %d | %s | %d | %.2f | %s | %.2f | %s | %s "
                    "| %s | %s |" % (
                        r["kind"], r["preset"], r["gpus"], r["halo_steps"],
                        r["rounds"], 1e3 * r["seconds"],
                        span(r["run_seconds_by_rank"]),
                        1e3 * (r["seconds"] - max(r["run_seconds_by_rank"])),
                        span(r["compute_seconds_by_rank"]),
                        span(r["exchange_seconds_by_rank"]),
                        span(r["vote_seconds_by_rank"]),
                        "%.2f" % (1e3 * plain) if plain else ""))
    return "\n".join(rows) + "\n"


def parts_table(records):
    """The setup and the exchanges of the model's runs taken apart, ms
    for the whole call, slowest rank / fastest rank."""
    runs = [r for r in records if r["system"] == DISTRIBUTED
            and r["forced_halo_steps"] is None and r["gpus"] > 1
            and r.get("setup_seconds_by_rank")]
    if not runs:
        return ""

    def span(values):
        values = [v for v in values if v is not None]
        if not values:
            return ""
        return "%.2f / %.2f" % (1e3 * max(values), 1e3 * min(values))

    rows = ["", "The setup (from the call to the first round; load: taking "
            "the padded blocks and copying the block in) and the exchanges "
            "(pack, move with the wait for the peers, unpack; summed over "
            "the rounds), ms, slowest rank / fastest rank:", "",
            "| scaling | preset | GPUs | k | setup | load | pack | move | "
            "unpack |", "|" + "---|" * 9]
    for r in runs:
        rows.append("| %s | %s | %d | %s | %s |" % (
            r["kind"], r["preset"], r["gpus"], r["halo_steps"],
            " | ".join(span(r["%s_by_rank" % key]) for key in PART_KEYS)))
    return "\n".join(rows) + "\n"


def plain_table(records):
    """The baselines: plain apply on one GPU, each rank at once."""
    runs = [r for r in records if r["system"] == PLAIN]
    if not runs:
        return ""
    rows = ["", "The baselines: plain `convstencil.apply` on one GPU "
            "(device array in, a preallocated one out), timed on every GPU "
            "of the launch at once; the slowest GPU's median:", "",
            "| scaling | preset | grid | as | launch GPUs | s/step | "
            "GStencils/s | fastest GPU's time / slowest's | beyond the "
            "step loop |", "|" + "---|" * 9]
    for r in runs:
        if not r["fits"]:
            rows.append("| %s | %s | %s | %s | %d | %s |  |  |  |" % (
                r["kind"], r["preset"], _grid(r), r["role"],
                r["launch_gpus"], r["note"]))
            continue
        rows.append("| %s | %s | %s | %s | %d | %.3f ms | %.1f | %.3f | "
                    "%.2f ms |" % (
                        r["kind"], r["preset"], _grid(r), r["role"],
                        r["launch_gpus"], 1e3 * r["seconds_per_step"],
                        r["gstencils"],
                        min(r["seconds_by_rank"]) / r["seconds"],
                        1e3 * (r["seconds"] - r["loop_seconds"])))
    return "\n".join(rows) + "\n"


def self_exchange_table(records):
    runs = [r for r in records if r.get("self_exchange")]
    if not runs:
        return ""
    rows = ["", "One GPU exchanging with itself (wrap; axis 0's ghosts "
            "through the transport), the model's k, rounds in an engine "
            "session or one engine call each; against plain apply on the "
            "block in the same launch:", "",
            "| preset | block | steps | k | rounds | session | split | "
            "transport | s/step | vs plain apply | exchange per round |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        rows.append("| %s | %s | %d | %s | %d | %s | %s | %s | %.3f ms | %s "
                    "| %.0f us |" % (
                        r["preset"], _grid(r), r["steps"], r["halo_steps"],
                        r["rounds"], "yes" if r["session"] else "no",
                        r.get("split_bands") or "no",
                        r.get("transport"), 1e3 * r["seconds_per_step"],
                        _pct(r.get("efficiency_vs_block")),
                        1e6 * r["exchange_seconds_per_round"]))
    return "\n".join(rows) + "\n"


def markdown(records, failures):
    text = (table(records) + sweep_table(records) + phase_table(records)
            + parts_table(records)
            + plain_table(records) + self_exchange_table(records))
    for line in failures:
        text += "\nFailed: %s\n" % line
    return text


# ---------------------------------------------------------------------------
# the driver: launches and files

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


def _worker_args(args):
    out = ["--repeat", str(args.repeat), "--backend", args.backend,
           "--sweep"] + [str(k) for k in args.sweep]
    out += ["--dims", args.dims, "--transport", args.transport,
            "--overlap", args.overlap]
    out += ["--quick"] if args.quick else []
    out += ["--self-exchange"] if args.self_exchange else []
    for case in args.case or []:
        out += ["--case", case]
    return out


def drive(args):
    """One launch per GPU count; the files are written after each, so a
    launch that fails or runs out of time keeps the ones before it."""
    names, topology = _gpu_facts()
    prov = _provenance(names)
    env = dict(os.environ, **NO_MULTICAST)
    records, failures = [], []
    for n in args.gpus:
        started = time.perf_counter()
        got, failure = common.mpi_launch(n, __file__, _worker_args(args),
                                         env, args.timeout)
        print("%d GPU(s): %.0f s" % (n, time.perf_counter() - started),
              flush=True)
        records += [dict(r, **_record_provenance(prov)) for r in got]
        if failure:
            print(failure, file=sys.stderr, flush=True)
            failures.append("%d GPU(s): %s" % (n, failure.splitlines()[0]))
        summarise(records)
        text = markdown(records, failures)
        if args.save:
            save(args.save, prov, names, topology, records, text)
    print(text)
    return 1 if failures else 0


def _provenance(names):
    device = "%d x %s" % (len(names), names[0]) if names else "unknown"
    prov = common.provenance(device)
    prov["gpus"] = len(names)
    prov["mpi"] = common.mpi_version()
    prov["environment"] = dict(NO_MULTICAST, **common.engine_switches())
    return prov


def _record_provenance(prov):
    return {"date": prov["date"], "command": prov["command"],
            "commit": prov["commit"]}


def _transports(records):
    """The transports the distributed runs took, as a phrase."""
    ran = sorted({r["transport"] for r in records
                  if r.get("system") == DISTRIBUTED and r.get("transport")})
    return " and ".join(ran) or "none run"


def save(stem, prov, names, topology, records, text):
    head = ("# convstencil.distributed on %s: weak and strong scaling "
            "against plain convstencil.apply\n\n"
            "%s\n\n- GPUs: %d (%s), one rank per GPU, transport %s, %s\n"
            "- MPI: %s\n- efficiency: weak, per-GPU rate / plain apply's "
            "rate on one block; strong, per-GPU rate / plain apply's rate "
            "on the whole grid on one GPU; plain apply timed in the same "
            "launch, on every GPU at once, the slowest GPU's median\n\n"
            % (prov["device"], common.provenance_sentence(prov),
               len(names), ", ".join(names), _transports(records),
               " ".join("%s=%s" % kv for kv in dict(
                   NO_MULTICAST, **common.engine_switches()).items()),
               prov["mpi"]))
    if topology:
        head += "`nvidia-smi topo -m`:\n\n```\n%s\n```\n\n" % topology
    common.write_results(stem, {"provenance": prov, "records": records},
                         head + text)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--quick", action="store_true",
                        help="small grids: a check of the harness, not "
                             "figures")
    parser.add_argument("--case", action="append",
                        help="KIND:PRESET:EXTENT:STEPS (e.g. "
                             "weak:heat3d:512x512x512:300), instead of the "
                             "default cases; repeatable")
    parser.add_argument("--sweep", type=int, nargs="*", default=list(SWEEP),
                        help="the halo depths forced on more than one GPU "
                             "(none: the model's k only); default %s"
                             % " ".join(map(str, SWEEP)))
    parser.add_argument("--dims", choices=["slabs", "balanced"],
                        default="slabs",
                        help="the process grid: slabs along axis 0, or "
                             "MPI.Compute_dims's (scatter's default)")
    parser.add_argument("--transport", default="auto",
                        choices=["auto", "cuda-ipc", "nccl", "cuda-mpi",
                                 "staging"],
                        help="the distributed runs' transport (records "
                             "say which ran)")
    parser.add_argument("--overlap", choices=sorted(OVERLAP),
                        default="auto",
                        help="apply()'s overlap: auto (None), on (True) "
                             "or off (False); records say whether it did")
    parser.add_argument("--timeout", type=int, default=300,
                        help="seconds per mpiexec launch")
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
        # a `timeout` around the driver ends the mpiexec job too
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        sys.exit(drive(args))


if __name__ == "__main__":
    main()
