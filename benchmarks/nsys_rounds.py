"""Per-GPU round timeline of a distributed run from an Nsight Systems GPU
trace (`nsys stats --report cuda_gpu_trace --format csv`, as
profile_multigpu.sh writes it).

A round of convstencil.distributed on device blocks is an exchange (NCCL
kernels) followed by the engine's passes on the block and its ghosts
(engine kernels and copies).  For each GPU this prints the busy time by
kind (NCCL, engine kernels, memory copies and sets), the idle gaps (the
GPU doing nothing between two operations), and one line per round: from
one NCCL kernel's start to the next, the NCCL, engine and copy time and
the idle time within it.  The first round also holds everything before
the first exchange (the plain baseline runs, set-up).

    python benchmarks/nsys_rounds.py prof/weak_heat3d_2gpu_cuda_gpu_trace.csv
"""
import argparse
import csv
import io
import sys

# gaps shorter than this are launch latency, not idle time worth a line
GAP_NS = 5000


def read_trace(path):
    """The trace's rows as dicts (nsys may print lines before the CSV
    header, which names Start and Duration)."""
    with open(path) as f:
        lines = f.read().splitlines()
    start = next((i for i, line in enumerate(lines)
                  if "Start" in line and "Duration" in line), None)
    if start is None:
        sys.exit("%s: no CSV header naming Start and Duration" % path)
    return list(csv.DictReader(io.StringIO("\n".join(lines[start:]))))


def column(rows, *prefixes):
    """The first column whose name starts with one of `prefixes`."""
    for prefix in prefixes:
        for name in rows[0]:
            if name.strip().startswith(prefix):
                return name
    return None


def kind_of(name):
    lower = name.lower()
    if "nccl" in lower:
        return "nccl"
    if lower.startswith("[cuda mem"):
        return "copy"
    return "engine"


def operations(rows):
    """{device: [(start ns, end ns, kind, name)]}, each sorted by start."""
    start, duration = column(rows, "Start"), column(rows, "Duration")
    device, name = column(rows, "Device"), column(rows, "Name")
    by_device = {}
    for r in rows:
        t0 = float(r[start])
        op = (t0, t0 + float(r[duration]), kind_of(r[name]), r[name])
        by_device.setdefault(r[device] if device else "GPU", []).append(op)
    return {d: sorted(ops) for d, ops in by_device.items()}


def busy_and_gaps(ops):
    """(busy ns per kind, [(gap start, gap ns)]) of sorted operations:
    durations summed per kind (operations on several streams may
    overlap), gaps where no operation runs."""
    busy = {"nccl": 0.0, "engine": 0.0, "copy": 0.0}
    gaps, end = [], ops[0][0]
    for t0, t1, kind, _ in ops:
        busy[kind] += t1 - t0
        if t0 - end > 0:
            gaps.append((end, t0 - end))
        end = max(end, t1)
    return busy, gaps


def rounds(ops):
    """One (start, end, ops) per round: from each NCCL kernel that
    follows a non-NCCL operation (an exchange's first kernel) to the
    next one's start (the last: to its last operation's end)."""
    marks = [i for i, op in enumerate(ops) if op[2] == "nccl"
             and (i == 0 or ops[i - 1][2] != "nccl")]
    bounds = [0] + marks[1:] + [len(ops)]
    out = []
    for a, b in zip(bounds, bounds[1:]):
        end = ops[b][0] if b < len(ops) else max(op[1] for op in ops[a:])
        out.append((ops[a][0], end, ops[a:b]))
    return out


def report(device, ops, out):
    busy, gaps = busy_and_gaps(ops)
    span = ops[-1][1] - ops[0][0]
    idle = sum(g for _, g in gaps)
    long_gaps = [g for _, g in gaps if g >= GAP_NS]
    out.write("%s: %d operations over %.3f ms; NCCL %.3f ms, engine "
              "kernels %.3f ms, copies and sets %.3f ms; idle %.3f ms "
              "(%d gaps of %d us or more, %.3f ms, the longest %.3f ms)\n"
              % (device, len(ops), span / 1e6, busy["nccl"] / 1e6,
                 busy["engine"] / 1e6, busy["copy"] / 1e6, idle / 1e6,
                 len(long_gaps), GAP_NS // 1000, sum(long_gaps) / 1e6,
                 max(long_gaps, default=0) / 1e6))
    out.write("  round  start ms  length ms  nccl ms  engine ms  copies ms"
              "  idle ms  engine kernels\n")
    origin = ops[0][0]
    for i, (t0, t1, part) in enumerate(rounds(ops)):
        b, g = busy_and_gaps(part)
        # the gaps within the round and the one before the next round
        trailing = t1 - max(op[1] for op in part)
        out.write("  %5d  %8.3f  %9.3f  %7.3f  %9.3f  %9.3f  %7.3f  %d\n"
                  % (i, (t0 - origin) / 1e6, (t1 - t0) / 1e6,
                     b["nccl"] / 1e6, b["engine"] / 1e6, b["copy"] / 1e6,
                     (sum(x for _, x in g) + max(trailing, 0)) / 1e6,
                     sum(1 for op in part if op[2] == "engine")))
    out.write("\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", help="cuda_gpu_trace CSV")
    args = parser.parse_args()
    rows = read_trace(args.trace)
    if not rows:
        sys.exit("%s: an empty trace" % args.trace)
    for device, ops in sorted(operations(rows).items()):
        report(device, ops, sys.stdout)


if __name__ == "__main__":
    main()
