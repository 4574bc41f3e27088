"""The plot of bench_multigpu.py's results: weak scaling (GStencils/s per
GPU and efficiency, against plain apply on one block) and strong scaling
(time per step against plain apply on the whole grid / N), with the halo
depth the cost model picked.

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

DISTRIBUTED = "convstencil-distributed"


def _series(records, kind):
    """{preset: [(gpus, record)]} of the model's own runs, by GPUs."""
    out = {}
    for r in records:
        if r.get("system", DISTRIBUTED) != DISTRIBUTED \
                or r.get("self_exchange"):
            continue
        if r["kind"] == kind and r["forced_halo_steps"] is None:
            out.setdefault(r["preset"], []).append((r["gpus"], r))
    return {p: sorted(v, key=lambda t: t[0]) for p, v in out.items()}


def _pct(r):
    """Efficiency in percent (nan where the record has none)."""
    value = r.get("efficiency")
    return float("nan") if value is None else 100 * value


def _plain_ms(r, fallback):
    """ms per step of plain apply on r's whole grid on one GPU (records
    before the plain baseline: the distributed run on one GPU)."""
    rate = r.get("plain_whole_gstencils")
    if not rate:
        return fallback
    points = 1.0
    for n in r["grid"]:
        points *= n
    return 1e3 * points / (rate * 1e9)


def plot(data, path):
    records, prov = data["records"], data["provenance"]
    fig, (weak, strong) = plt.subplots(1, 2, figsize=(10, 4.2))
    for preset, points in _series(records, "weak").items():
        gpus = [g for g, _ in points]
        per_gpu = [r["gstencils"] / g for g, r in points]
        line, = weak.plot(gpus, per_gpu, "o-", label="%s, %s per GPU" % (
            preset, "x".join(map(str, points[0][1]["block"]))))
        plain = points[0][1].get("plain_block_gstencils") or per_gpu[0]
        weak.axhline(plain, color=line.get_color(), lw=0.8, ls=":")
        for g, r in points:
            weak.annotate("%.0f%%, k=%s" % (_pct(r),
                                            r["halo_steps"] or "-"),
                          (g, r["gstencils"] / g), textcoords="offset points",
                          xytext=(4, -12), fontsize=8)
    weak.set(title="weak scaling", xlabel="GPUs",
             ylabel="GStencils/s per GPU (dotted: plain apply, 1 GPU)")
    weak.set_ylim(bottom=0)
    for preset, points in _series(records, "strong").items():
        gpus = [g for g, _ in points]
        ms = [1e3 * r["seconds_per_step"] for _, r in points]
        line, = strong.plot(gpus, ms, "o-", label="%s %s" % (
            preset, "x".join(map(str, points[0][1]["grid"]))))
        strong.plot(gpus, [_plain_ms(points[0][1], ms[0]) / g
                           for g in gpus], ls=":", lw=0.8,
                    color=line.get_color())
        for g, r in points:
            strong.annotate("%.0f%%, k=%s" % (_pct(r),
                                              r["halo_steps"] or "-"),
                            (g, 1e3 * r["seconds_per_step"]),
                            textcoords="offset points", xytext=(4, 4),
                            fontsize=8)
    strong.set(title="strong scaling", xlabel="GPUs",
               ylabel="ms per step (dotted: plain apply on 1 GPU / N)")
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
