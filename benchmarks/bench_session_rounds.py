"""One GPU: what a distributed round's k steps cost, against plain
convstencil.apply on the block.

convstencil.distributed runs a device block in rounds: exchange k*r
ghost layers, then k steps of the engine on the padded block, held in an
engine session for the whole run (distributed/_run.py).  Its weak-scaling
efficiency is measured against plain apply on one block
(bench_multigpu.py); this isolates the rounds' compute from the
exchange, on one GPU, no MPI:

- plain: convstencil.apply(block, preset, steps=STEPS, mode="wrap",
  out=...) on a CuPy array of the block's shape, wall seconds a step;
- session: k steps a round on the block padded by k*r cells on both
  sides of axis 0 (a slab split's ghosts), run in an engine session
  (_engine.session_open/run, as the distributed rounds run them): wall
  seconds of a round (session_run returns when done), and the useful
  rate (the owned block's points times k over that time);
- call: the same k steps as one plain apply call on the padded block.

Medians of --repeat runs after a warm-up, random data.

    python benchmarks/bench_session_rounds.py [--ks 8,16,60,64]
        [--repeat 9] [--save NAME]
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

import convstencil as cs  # noqa: E402
from convstencil import _backends, _engine  # noqa: E402

# (preset, block, steps of the plain run, k): the weak-scaling blocks of
# bench_multigpu.py, and the k its sweeps and its model took
CASES = [("heat2d", (10240, 10240), 600, (8, 16, 32, 60, 64, 128)),
         ("heat3d", (512, 512, 512), 300, (6, 8, 15, 16, 32))]


def strides_of(a):
    return tuple(int(s) for s in a.strides)


def session_round(padded, w, k):
    """(median wall seconds of a round of k steps in a session on the
    CuPy array `padded`, the session's path)."""
    path = _backends.gpu_path("cuda", tuple(padded.shape), w, "wrap", k)
    handle, name = _engine.session_open(
        padded.data.ptr, padded.shape, strides_of(padded), w, steps=k,
        mode="wrap", cval=0.0, path=path)
    try:
        seconds = common.median_wall(lambda: _engine.session_run(handle), ARGS.repeat)
    finally:
        _engine.session_close(handle, padded.data.ptr, strides_of(padded))
    return seconds, name


def main():
    import cupy as cp
    rng = cp.random.default_rng(3)
    prov = common.provenance(common.device_name())
    records, rows = [], []
    for preset, block, steps, ks in CASES:
        w = cs.Stencil(preset).weights
        r = (w.shape[0] - 1) // 2
        x = rng.random(block)
        y = cp.empty_like(x)
        plain = common.median_wall(lambda: cs.apply(x, preset, steps=steps,
                                             mode="wrap", out=y),
                            ARGS.repeat) / steps
        base_path = cs.last_run_info()["path"]
        npts = float(np.prod(block))
        print("%s %s: plain apply, %d steps: %.1f us a step (%.1f G/s, %s)"
              % (preset, "x".join(map(str, block)), steps, plain * 1e6,
                 npts / plain / 1e9, base_path), flush=True)
        records.append(dict(prov, system="convstencil", preset=preset,
                            shape=list(block), steps=steps, how="plain",
                            seconds_per_step=plain,
                            gstencils_per_s=npts / plain / 1e9,
                            path=base_path))
        del x, y
        for k in ARGS.ks or ks:
            shape = (block[0] + 2 * k * r,) + block[1:]
            p = rng.random(shape)
            q = cp.empty_like(p)
            sess, sess_path = session_round(p, w, k)
            call = common.median_wall(lambda: cs.apply(p, preset, steps=k,
                                                mode="wrap", out=q),
                               ARGS.repeat)
            call_path = cs.last_run_info()["path"]
            depth = cs.last_run_info().get("fused_depth")
            useful = npts * k / sess
            print("  k=%3d: session round %.3f ms (%.1f us a step, useful "
                  "%.1f G/s = %.1f%% of plain; %s), one call %.3f ms (%s, "
                  "depth %s)" % (k, sess * 1e3, sess / k * 1e6, useful / 1e9,
                                 100.0 * useful * plain / npts, sess_path,
                                 call * 1e3, call_path, depth), flush=True)
            records.append(dict(prov, system="convstencil-session-round",
                                preset=preset, shape=list(shape),
                                block=list(block), k=k, how="session",
                                round_seconds=sess, call_seconds=call,
                                useful_gstencils_per_s=useful / 1e9,
                                fraction_of_plain=useful * plain / npts,
                                path=sess_path, call_path=call_path,
                                call_fused_depth=depth))
            rows.append("| %s | %s | %d | %.3f | %.1f | %.1f | %.1f%% | %.3f "
                        "| %s |" % (preset, "x".join(map(str, shape)), k,
                                    sess * 1e3, sess / k * 1e6,
                                    useful / 1e9,
                                    100.0 * useful * plain / npts,
                                    call * 1e3, sess_path))
            del p, q
    if ARGS.save:
        plains = ["%s %s: %.1f us a step" % (
            r["preset"], "x".join(map(str, r["shape"])),
            r["seconds_per_step"] * 1e6) for r in records
            if r["how"] == "plain"]
        text = "\n".join(common.markdown_head(
            "A distributed round's k steps on one GPU, in an engine "
            "session, against plain apply", prov,
            "Median wall seconds of %d runs after a warm-up. Plain apply "
            "on the block (%s). A round: k steps on the block padded by k*r "
            "cells on both sides of axis 0, in an engine session; its "
            "useful rate counts the block's points only; 'one call' runs "
            "the same k steps as one convstencil.apply call on the padded "
            "block." % (ARGS.repeat, "; ".join(plains)),
            ["preset", "padded block", "k", "round ms", "us a step",
             "useful G/s", "of plain", "one call ms", "session path"])
            + rows) + "\n"
        common.write_results(ARGS.save, records, text)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ks", default="",
                        help="the k of every case (default: CASES')")
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--save", default="")
    ARGS = parser.parse_args()
    ARGS.ks = [int(k) for k in ARGS.ks.split(",") if k]
    main()
