"""Markdown tables of where a kernel's warps stall, instruction by
instruction, from Nsight Compute's source page.

Reads the SASS source page of a report made with the SourceCounters and
WarpStateStats sections:

    ncu --kernel-name regex:tb3d --launch-count 1 --section SourceCounters
        --section WarpStateStats --import-source no -o tb3d_src
        python benchmarks/profile_cases.py --presets heat3d
        --backends cuda-core --size 512x512x512 --steps 3
    ncu --import tb3d_src.ncu-rep --page source --csv --print-source sass
        > tb3d_src_sass.csv

and prints the share of the stall samples by reason, by instruction
class, by loop (each backward branch whose body holds a barrier), and
the instructions that gather the most:

    python benchmarks/ncu_source_table.py tb3d_src_sass.csv
"""
import argparse
import collections
import csv
import re


def read_instructions(path):
    """The CSV's instruction rows: (offset, text, {column: value}), with
    offsets and branch targets from the kernel's first instruction."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    header = next(r for r in rows if r and r[0] == "Address")
    start = rows.index(header) + 1
    body = [r for r in rows[start:]
            if len(r) == len(header) and r[0].startswith("0x")]
    base = int(body[0][0], 16)

    def relative(m):
        return "0x%x" % (int(m.group(0), 16) - base)

    return [(int(r[0], 16) - base,
             re.sub(r"0x[0-9a-f]{8,}", relative, r[1].strip()),
             dict(zip(header, r))) for r in body]


def count(cols, name):
    try:
        return int(cols.get(name, "0"))
    except ValueError:
        return 0


def opcode(text):
    """The opcode without its predicate and modifiers: DFMA, SHFL ..."""
    text = re.sub(r"^@!?U?P\w+\s+", "", text)
    return text.split()[0].split(".")[0] if text else "?"


def loops(instructions):
    """(first, last) indices of each backward branch's body that holds a
    barrier: the kernel's plane loops."""
    at = {a: i for i, (a, _, _) in enumerate(instructions)}
    found = []
    for i, (a, text, _) in enumerate(instructions):
        m = re.search(r"BRA\b.*0x([0-9a-f]+)", text)
        target = int(m.group(1), 16) if m else None
        if target is None or target >= a or target not in at:
            continue
        first = at[target]
        if any(opcode(t) == "BAR" for _, t, _ in instructions[first:i + 1]):
            found.append((first, i))
    return found


def share(part, whole):
    return "%.1f%%" % (100.0 * part / whole) if whole else "-"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv")
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args()
    ins = read_instructions(args.csv)
    cols0 = ins[0][2]
    reasons = [c for c in cols0 if c.startswith("stall_") and "(" not in c]
    total = sum(count(c, "# Samples") for _, _, c in ins)
    print("%d stall samples over %d instructions\n" % (total, len(ins)))

    by_reason = collections.Counter()
    by_op = collections.Counter()
    for _, text, c in ins:
        by_op[opcode(text)] += count(c, "# Samples")
        for r in reasons:
            by_reason[r] += count(c, r)
    print("| stall reason | share of the samples |\n|---|---|")
    for r, v in by_reason.most_common(10):
        print("| %s | %s |" % (r[len("stall_"):], share(v, total)))
    print("\n| instruction | share of the samples (warps waiting to issue it)"
          " |\n|---|---|")
    for op, v in by_op.most_common(12):
        print("| %s | %s |" % (op, share(v, total)))

    print("\n| loop (offsets) | instructions | times its first instruction "
          "ran | share of the samples |\n|---|---|---|---|")
    for first, last in loops(ins):
        body = ins[first:last + 1]
        print("| %x-%x | %d | %d | %s |" % (
            body[0][0], body[-1][0], len(body),
            count(body[0][2], "Instructions Executed"),
            share(sum(count(c, "# Samples") for _, _, c in body), total)))

    print("\n| offset | instruction | share of the samples | top reasons |"
          "\n|---|---|---|---|")
    hot = sorted(ins, key=lambda x: -count(x[2], "# Samples"))[:args.top]
    for a, text, c in hot:
        top = sorted(((count(c, r), r[len("stall_"):]) for r in reasons),
                     reverse=True)[:3]
        print("| %x | `%s` | %s | %s |" % (
            a, text[:60], share(count(c, "# Samples"), total),
            ", ".join("%s %d" % (name, v) for v, name in top if v)))


if __name__ == "__main__":
    main()
