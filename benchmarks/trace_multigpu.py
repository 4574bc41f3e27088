"""A GPU timeline of one distributed run against plain apply, without
Nsight Systems: the CUDA activity that PyTorch's profiler (CUPTI) records
for every kernel, copy and set of the process, the engine's and NCCL's
included, on each rank.

Run under MPI, one rank per GPU of one host:

    mpiexec -n 2 python benchmarks/trace_multigpu.py \
        [--case weak:heat3d:512x512x512:300] [--k 15] \
        [--overlap auto,off] [--transport auto] [--out DIR]

Each rank makes a random block (weak: the extent is one rank's block;
strong: the whole grid), cut along axis 0, mode wrap, and runs, after
two warm-ups each, one plain convstencil.apply on a block of the same
shape (device array in, one out) and one distributed apply per
`--overlap` value, each under its own profiler.  For each rank and run
it prints (and writes to DIR/trace_<case>.md with DIR/trace_<case>_
<run>_rank<r>.json.gz, the chrome traces):

- the span from the first operation's start to the last one's end, the
  time some engine kernel runs, the time NCCL alone runs, the idle time
  (nothing runs), and the time NCCL runs beside an engine kernel;
- kernels by name: launches, summed and median durations (kernels on
  several streams overlap, so the sums may exceed the span);
- for distributed runs, the rounds (from one exchange's first NCCL
  kernel or peer copy to the next): their median length, and the median
  wait between an engine kernel's end and the next round's first engine
  kernel.
"""
import argparse
import gzip
import json
import os
import statistics
import sys
import time

OVERLAP = {"auto": None, "on": True, "off": False}


def parse_case(text):
    kind, preset, extent, steps = text.split(":")
    return kind, preset, tuple(int(n) for n in extent.split("x")), int(steps)


def local_gpu(comm):
    """This rank's GPU: its rank among the ranks of its host."""
    from mpi4py import MPI
    return comm.Split_type(MPI.COMM_TYPE_SHARED).Get_rank()


def make_grid(comm, kind, extent, gpu):
    """(this rank's DistributedGrid, a plain block of the same shape on
    the GPU, an output for it)."""
    import cupy
    import convstencil as cs
    import convstencil.distributed as csd
    size = comm.Get_size()
    shape = tuple(extent)
    if kind == "weak":
        shape = (extent[0] * size,) + tuple(extent[1:])
    dims = (size,) + (1,) * (len(shape) - 1)
    where = csd.local_slices(shape, comm, dims=dims)
    block_shape = tuple(s.stop - s.start for s in where)
    with cupy.cuda.Device(gpu):
        block = cupy.random.default_rng(comm.Get_rank()).random(block_shape)
        plain = cupy.random.default_rng(100 + comm.Get_rank()).random(
            block_shape)
        out = cs.DeviceArray(block_shape)
    d = csd.from_local(block, comm=comm, dims=dims, backend="cuda")
    return d, plain, out


def ops_of(trace_path):
    """[(start us, end us, category, name, stream)] of the trace's GPU
    operations, sorted by start."""
    with gzip.open(trace_path, "rt") as f:
        events = json.load(f).get("traceEvents", [])
    ops = []
    for e in events:
        cat = e.get("cat", "")
        if e.get("ph") != "X" or cat not in ("kernel", "gpu_memcpy",
                                              "gpu_memset"):
            continue
        t0 = float(e["ts"])
        stream = e.get("args", {}).get("stream", e.get("tid"))
        ops.append((t0, t0 + float(e.get("dur", 0.0)), cat, e["name"],
                    stream))
    return sorted(ops)


def kind_of(op):
    if "nccl" in op[3].lower():
        return "nccl"
    return "engine" if op[2] == "kernel" else "copy"


def union(intervals):
    """Total length of the union of (start, end) intervals."""
    total, end = 0.0, None
    start = None
    for t0, t1 in sorted(intervals):
        if end is None or t0 > end:
            if end is not None:
                total += end - start
            start, end = t0, t1
        else:
            end = max(end, t1)
    if end is not None:
        total += end - start
    return total


def intersect(a, b):
    """Length of the union of intervals a within the union of b."""
    return union(a) + union(b) - union(a + b)


def is_exchange(op):
    """An NCCL kernel, or a copy between two GPUs (CUDA IPC's)."""
    return kind_of(op) == "nccl" or (kind_of(op) == "copy"
                                     and ("PtoP" in op[3] or "Peer" in op[3]))


def rounds(ops):
    """(round count, round lengths, waits) of a distributed run's operations: a round
    starts at an exchange's first operation (is_exchange) after an engine
    kernel, in start order; a wait is the time from the last engine
    kernel's end before a round starts to the first engine kernel's start
    after (none where the exchange runs beside the engine)."""
    marks = []
    last = None
    for op in ops:
        if is_exchange(op):
            if last == "engine":
                marks.append(op[0])
            last = "exchange"
        elif kind_of(op) == "engine":
            last = "engine"
    lengths = [b - a for a, b in zip(marks, marks[1:])]
    engine = [op for op in ops if kind_of(op) == "engine"]
    waits = []
    for m in marks:
        before = [op[1] for op in engine if op[0] < m]
        after = [op[0] for op in engine if op[0] >= m]
        if before and after:
            waits.append(max(0.0, min(after) - max(before)))
    return len(marks), lengths, waits


def summary(ops):
    """The run's figures (us) and its kernels by name."""
    if not ops:
        return None
    by_kind = {"engine": [], "nccl": [], "copy": []}
    for op in ops:
        by_kind[kind_of(op)].append((op[0], op[1]))
    span = ops[-1][1] - ops[0][0]
    everything = [(op[0], op[1]) for op in ops]
    busy = union(everything)
    engine = union(by_kind["engine"])
    nccl = union(by_kind["nccl"])
    beside = intersect(by_kind["nccl"], by_kind["engine"])
    names = {}
    for op in ops:
        names.setdefault((op[3][:70], op[4]), []).append(op[1] - op[0])
    kernels = sorted(((n, s, len(d), sum(d), statistics.median(d))
                      for (n, s), d in names.items()),
                     key=lambda r: -r[3])
    count, lengths, waits = rounds(ops)
    return {"span": span, "engine": engine, "nccl_alone": nccl - beside,
            "nccl_beside": beside, "copies": union(by_kind["copy"]),
            "idle": span - busy, "kernels": kernels,
            "rounds": count,
            "round_median": statistics.median(lengths) if lengths else None,
            "wait_median": statistics.median(waits) if waits else None,
            "wait_sum": sum(waits)}


def profiled(name, out_dir, rank, fn):
    """Run fn under the profiler; the path of its gzipped chrome trace."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    path = os.path.join(out_dir, "%s_rank%d.json" % (name, rank))
    prof.export_chrome_trace(path)
    with open(path, "rb") as f, gzip.open(path + ".gz", "wb") as g:
        g.write(f.read())
    os.remove(path)
    return path + ".gz"


def fmt_ms(us):
    return "" if us is None else "%.3f" % (us / 1000.0)


def report(rows, header):
    """Markdown of every rank's run figures and its kernels."""
    lines = [header, "",
             "| run | rank | span ms | engine kernels ms | NCCL alone ms "
             "| NCCL beside engine ms | copies ms | idle ms | rounds "
             "| round median ms | wait median ms | waits summed ms |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for run, rank, s in rows:
        lines.append("| %s | %d | %s | %s | %s | %s | %s | %s | %d | %s | "
                     "%s | %s |" % (run, rank, fmt_ms(s["span"]),
                                    fmt_ms(s["engine"]),
                                    fmt_ms(s["nccl_alone"]),
                                    fmt_ms(s["nccl_beside"]),
                                    fmt_ms(s["copies"]), fmt_ms(s["idle"]),
                                    s["rounds"], fmt_ms(s["round_median"]),
                                    fmt_ms(s["wait_median"]),
                                    fmt_ms(s["wait_sum"])))
    lines += ["", "Kernels, copies and sets by name and stream (rank 0):",
              "", "| run | name | stream | count | sum ms | median us |",
              "|---|---|---|---|---|---|"]
    for run, rank, s in rows:
        if rank:
            continue
        for name, stream, count, total, median in s["kernels"][:12]:
            lines.append("| %s | `%s` | %s | %d | %.3f | %.1f |"
                         % (run, name.replace("|", "/"), stream, count,
                            total / 1000.0, median))
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", default="weak:heat3d:512x512x512:300")
    parser.add_argument("--k", type=int, default=None,
                        help="halo_steps (default: the cost model's)")
    parser.add_argument("--overlap", default="auto,off",
                        help="distributed runs: comma-separated auto|on|off")
    parser.add_argument("--transport", default="auto",
                        help="the distributed runs' transport")
    parser.add_argument("--self-exchange", action="store_true",
                        help="a periodic axis 0 exchanges through the "
                             "transport even on one rank (one GPU: its "
                             "rounds as a slab's, with itself)")
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    args = parser.parse_args()

    from mpi4py import MPI
    import cupy
    import torch
    import convstencil as cs
    import convstencil.distributed as csd

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    gpu = local_gpu(comm)
    cupy.cuda.Device(gpu).use()
    torch.cuda.set_device(gpu)
    torch.cuda.init()
    kind, preset, extent, steps = parse_case(args.case)
    d, plain, plain_out = make_grid(comm, kind, extent, gpu)
    os.makedirs(args.out, exist_ok=True)
    stem = "trace_%s_%s_%dgpu" % (kind, preset, comm.Get_size())

    def run_plain():
        cs.apply(plain, preset, steps=steps, mode="wrap", out=plain_out)

    def run_distributed(overlap):
        def go():
            out = csd.apply(d, preset, steps=steps, mode="wrap",
                            halo_steps=args.k, overlap=overlap,
                            transport=args.transport,
                            self_exchange=(0,) if args.self_exchange
                            else False)
            comm.Barrier()
            return out
        return go

    runs = [("plain", run_plain)]
    runs += [("distributed-overlap-%s" % o, run_distributed(OVERLAP[o]))
             for o in args.overlap.split(",")]
    rows, infos = [], {}
    for name, fn in runs:
        for _ in range(2):  # warm-ups
            comm.Barrier()
            fn()
        comm.Barrier()
        path = profiled("%s_%s" % (stem, name), args.out, rank, fn)
        if name != "plain":
            info = csd.info()  # the profiled run's
            infos[name] = {key: info.get(key) for key in (
                "halo_steps", "rounds", "overlap", "session", "path",
                "transport", "split_bands")}
        rows.append((name, rank, summary(ops_of(path))))
    everything = comm.gather(rows)
    if rank:
        return
    rows = [row for part in everything for row in part]
    if any(s is None for _, _, s in rows):
        sys.exit("a trace holds no GPU operations: the profiler saw none")
    gpu_name = cupy.cuda.runtime.getDeviceProperties(gpu)["name"].decode()
    header = ("# GPU timeline: %s on %d x %s\n\nDate %s; commit %s; "
              "command `mpiexec -n %d python benchmarks/trace_multigpu.py "
              "%s`.\n\nThe distributed runs: %s" % (
                  args.case, comm.Get_size(), gpu_name,
                  time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                  os.environ.get("CONVSTENCIL_COMMIT", "unknown"),
                  comm.Get_size(), " ".join(sys.argv[1:]),
                  json.dumps(infos)))
    import common  # benchmarks/, the script's folder
    knobs = common.engine_switches()
    if knobs:
        header += "\n\nEnvironment: %s." % ", ".join(
            "%s=%s" % kv for kv in knobs.items())
    text = report(rows, header)
    print(text)
    with open(os.path.join(args.out, stem + ".md"), "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
