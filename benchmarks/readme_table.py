"""Write the README's performance table from the JSON results of one commit.

    python benchmarks/readme_table.py [--prefix h100] [--commit ABC1234]
        [--results DIR] [--readme README.md] [--print]

Reads cpu.json and <prefix>_1d.json, <prefix>_2d.json, <prefix>_3d.json
(bench_cpu.py and bench_gpu.py, as benchmarks/run_all.py makes them) and
replaces what lies between `<!-- perf-table:start -->` and
`<!-- perf-table:end -->` in the README with a table of one row per
preset: convstencil on the GPU (backend "cuda", the step loop), CuPy and
PyTorch, convstencil on the CPU and SciPy, with the device, date and
commit of the figures under it.

The files must all carry one commit: mixed commits are an error, unless
--commit names the one to use (files of other commits are then left
out, and so are their columns or rows).
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
START = "<!-- perf-table:start -->"
END = "<!-- perf-table:end -->"
PRESETS = ["heat1d", "1d5p", "heat2d", "box2d9p", "star2d13p", "box2d49p",
           "heat3d", "box3d27p"]
# (column title, source, system in the records)
COLUMNS = [("convstencil GPU", "gpu", "convstencil-auto"),
           ("CuPy", "gpu", "cupy"),
           ("PyTorch", "gpu", "torch"),
           ("convstencil CPU", "cpu", "convstencil-cpu"),
           ("SciPy", "cpu", "scipy")]


class MixedCommits(ValueError):
    pass


def load(results, prefix):
    """{source file name: records} of the files present."""
    names = ["cpu.json"] + ["%s_%dd.json" % (prefix, d) for d in (1, 2, 3)]
    out = {}
    for name in names:
        path = os.path.join(results, name)
        if os.path.exists(path):
            with open(path) as f:
                out[name] = json.load(f)
    if not out:
        raise SystemExit("no results files (%s) in %s"
                         % (", ".join(names), results))
    return out


def pick_commit(files, commit=None):
    """The files of one commit: all of them, or those of `commit`."""
    commits = {}
    for name, records in files.items():
        for c in {r.get("commit", "unknown") for r in records}:
            commits.setdefault(c, []).append(name)
    if commit is None:
        if len(commits) > 1:
            raise MixedCommits(
                "the results files carry different commits (%s); run "
                "benchmarks/run_all.py to remake them at one commit, or "
                "name one with --commit"
                % "; ".join("%s: %s" % (c, ", ".join(sorted(n)))
                            for c, n in sorted(commits.items())))
        return files, next(iter(commits))
    chosen = {c: n for c, n in commits.items()
              if c == commit or c.startswith(commit)}
    if len(chosen) != 1:
        raise SystemExit("commit %s: %s in the results files (%s)"
                         % (commit, "ambiguous" if chosen else "not found",
                            ", ".join(sorted(commits))))
    (full, _), = chosen.items()
    return ({n: [r for r in recs if r.get("commit") == full]
             for n, recs in files.items()
             if any(r.get("commit") == full for r in recs)}, full)


def fmt(g):
    if g is None:
        return "-"
    if g >= 100:
        return "%.0f" % g
    if g >= 10:
        return "%.1f" % g if g < 20 else "%.0f" % g
    if g >= 1:
        return "%.1f" % g
    return "%.2f" % g


def shape_text(shape):
    n = len(shape)
    if n == 1 and shape[0] & (shape[0] - 1) == 0:
        return "2^%d" % (shape[0].bit_length() - 1)
    if len(set(shape)) == 1 and n > 1:
        return "%d^%d" % (shape[0], n)
    return "x".join(map(str, shape))


def main_shape(records, preset, systems):
    """The preset's grid in these records: the one the most of `systems`
    ran on (an odd grid runs convstencil alone), the largest on a tie."""
    count = {}
    for r in records:
        if r["preset"] == preset and r["system"] in systems:
            count.setdefault(tuple(r["shape"]), set()).add(r["system"])
    if not count:
        return None
    return max(count, key=lambda s: (len(count[s]), s))


def table(files, commit):
    by_source = {"gpu": [], "cpu": []}
    for name, records in files.items():
        by_source["cpu" if name == "cpu.json" else "gpu"].extend(records)
    cols = [c for c in COLUMNS if any(r["system"] == c[2]
                                      for r in by_source[c[1]])]
    shapes = {}  # (source, preset) -> shape
    for src, records in by_source.items():
        systems = {c[2] for c in cols if c[1] == src}
        for p in PRESETS:
            shapes[(src, p)] = main_shape(records, p, systems)
    presets = [p for p in PRESETS
               if any(shapes[(src, p)] for src in by_source)]
    lines = ["| preset | grid | %s |" % " | ".join(c[0] for c in cols),
             "|---|---|%s" % ("---|" * len(cols))]
    for p in presets:
        gs, cs = shapes[("gpu", p)], shapes[("cpu", p)]
        if gs and cs and gs != cs:
            grid = "%s (CPU: %s)" % (shape_text(gs), shape_text(cs))
        else:
            grid = shape_text(gs or cs)
        cells = []
        for title, src, system in cols:
            shape = shapes[(src, p)]
            rates = [r["gstencils_per_s"] for r in by_source[src]
                     if r["preset"] == p and r["system"] == system
                     and tuple(r["shape"]) == shape]
            cells.append(fmt(rates[0] if rates else None))
        lines.append("| %s | %s | %s |" % (p, grid, " | ".join(cells)))
    notes = []
    for src, label in (("gpu", "GPU"), ("cpu", "CPU")):
        recs = by_source[src]
        if recs:
            devices = sorted({r["device"] for r in recs})
            dates = sorted({r["date"][:10] for r in recs})
            notes.append("%s: %s, %s" % (label, "; ".join(devices),
                                         " to ".join([dates[0], dates[-1]]
                                                     if len(dates) > 1
                                                     else dates)))
    lines.append("")
    lines.append("%s; commit %s (%s)." % (
        "; ".join(notes), commit, ", ".join(
            "`%s`" % n for n in sorted(files))))
    return "\n".join(lines) + "\n"


def replace_between(text, block):
    if text.count(START) != 1 or text.count(END) != 1 or \
            text.index(START) > text.index(END):
        raise SystemExit("the README needs one %s ... %s pair"
                         % (START, END))
    head, rest = text.split(START)
    _, tail = rest.split(END)
    return head + START + "\n" + block + END + tail


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prefix", default="h100",
                    help="the GPU files' prefix (h100_1d.json, ...)")
    ap.add_argument("--commit", default=None,
                    help="use the files of this commit, leave out others")
    ap.add_argument("--results", default=os.path.join(HERE, "results"))
    ap.add_argument("--readme",
                    default=os.path.join(os.path.dirname(HERE), "README.md"))
    ap.add_argument("--print", action="store_true",
                    help="print the table, leave the README as it is")
    args = ap.parse_args(argv)
    files = load(args.results, args.prefix)
    try:
        files, commit = pick_commit(files, args.commit)
    except MixedCommits as e:
        raise SystemExit("error: %s" % e)
    block = table(files, commit)
    if args.print:
        sys.stdout.write(block)
        return 0
    with open(args.readme) as f:
        text = f.read()
    new = replace_between(text, block)
    if new != text:
        with open(args.readme, "w") as f:
            f.write(new)
    print("wrote the table of commit %s into %s" % (commit, args.readme))
    return 0


if __name__ == "__main__":
    sys.exit(main())
