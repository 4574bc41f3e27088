"""The plot of bench_multigpu.py's results: weak scaling (GStencils/s per
GPU and efficiency) and strong scaling (time per step against the ideal
1/N), with the halo depth the cost model picked.

    python benchmarks/plot_multigpu.py h200x2_multigpu
writes benchmarks/results/h200x2_multigpu.svg from its .json.
"""
import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def _series(records, kind):
    """{preset: [(gpus, record)]} of the model's own runs, by GPUs."""
    out = {}
    for r in records:
        if r["kind"] == kind and r["forced_halo_steps"] is None:
            out.setdefault(r["preset"], []).append((r["gpus"], r))
    return {p: sorted(v, key=lambda t: t[0]) for p, v in out.items()}


def plot(data, path):
    records, prov = data["records"], data["provenance"]
    fig, (weak, strong) = plt.subplots(1, 2, figsize=(10, 4.2))
    for preset, points in _series(records, "weak").items():
        gpus = [g for g, _ in points]
        per_gpu = [r["gstencils"] / g for g, r in points]
        line, = weak.plot(gpus, per_gpu, "o-", label="%s, %s per GPU" % (
            preset, "x".join(map(str, points[0][1]["block"]))))
        weak.axhline(per_gpu[0], color=line.get_color(), lw=0.8, ls=":")
        for g, r in points:
            weak.annotate("%.0f%%, k=%s" % (100 * r.get("efficiency", 1),
                                            r["halo_steps"] or "-"),
                          (g, r["gstencils"] / g), textcoords="offset points",
                          xytext=(4, -12), fontsize=8)
    weak.set(title="weak scaling", xlabel="GPUs",
             ylabel="GStencils/s per GPU (dotted: 1 GPU)")
    weak.set_ylim(bottom=0)
    for preset, points in _series(records, "strong").items():
        gpus = [g for g, _ in points]
        ms = [1e3 * r["seconds_per_step"] for _, r in points]
        line, = strong.plot(gpus, ms, "o-", label="%s %s" % (
            preset, "x".join(map(str, points[0][1]["grid"]))))
        strong.plot(gpus, [ms[0] / g for g in gpus], ls=":", lw=0.8,
                    color=line.get_color())
        for g, r in points:
            strong.annotate("%.0f%%, k=%s" % (100 * r.get("efficiency", 1),
                                              r["halo_steps"] or "-"),
                            (g, 1e3 * r["seconds_per_step"]),
                            textcoords="offset points", xytext=(4, 4),
                            fontsize=8)
    strong.set(title="strong scaling", xlabel="GPUs",
               ylabel="ms per step (dotted: ideal 1/N)")
    strong.set_ylim(bottom=0)
    for ax in (weak, strong):
        top = max(g for g, _ in sum(_series(records, "weak").values(), [])
                  + sum(_series(records, "strong").values(), []))
        ax.set_xticks(range(1, top + 1))
        ax.legend(fontsize=8, loc="lower left")
        ax.grid(alpha=0.3)
    fig.suptitle("convstencil.distributed, %s, NCCL, commit %s" % (
        prov["device"], prov["commit"]), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, metadata={"Date": None})
    print("wrote", path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("stem", help="results stem, e.g. h200x2_multigpu")
    args = parser.parse_args()
    with open(os.path.join(common.RESULTS, args.stem + ".json")) as f:
        data = json.load(f)
    plot(data, os.path.join(common.RESULTS, args.stem + ".svg"))


if __name__ == "__main__":
    main()
