"""Choosing the halo depth k from measurement.

The cost model picks k for apply(halo_steps=None) from prices of the
engine's plan, the exchange and a round's host latency.  On 4 H200s its
pick was the fastest for heat3d but not always for heat2d: strong
scaling on 20480^2 ran 2 to 4% faster at k = 128 than at the model's 40
in two sweeps of three (benchmarks/results/h200x4_multigpu_1f01ceb.md,
h200x4_multigpu_ipc_0468e57.md).  tune_halo_steps runs the candidates on
the caller's grid and returns the fastest, for the calls that follow.
"""
import time

from mpi4py import MPI

from ._agree import agree
from ._grid import _check_grid
from ._run import apply


def _check_candidates(candidates):
    if candidates is None:
        return None
    try:
        ks = sorted({int(k) for k in candidates})
        exact = all(int(k) == k and not isinstance(k, bool)
                    for k in candidates)
    except (TypeError, ValueError):
        exact, ks = False, []
    if not ks or not exact or ks[0] < 1:
        raise ValueError("candidates must be positive integers (halo depths "
                         "k), got %r" % (candidates,))
    return ks


def _check_repeat(repeat):
    if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
        raise ValueError("repeat must be a positive int, got %r" % (repeat,))
    return repeat


def _default_candidates(model_k, steps, depth=None):
    """The model's k, and the powers of two from 4 up to the steps (k =
    128 of 200 steps, one round and a shorter one, was the fastest of the
    sweeps above), each moved to the nearest multiple of the engine's
    fused depth where the run has one (info()'s fused_depth): a round of
    any other k ends in a shallower pass.  heat3d's passes fuse 3 steps,
    so no power of two ran whole passes: on 2 H200s its forced k = 4, 8
    and 16 ran at 66.7 to 78.8% of plain apply's rate, the model's 6 at
    90.8% (benchmarks/results/h200x2_multigpu_4gpu_blocks_017aac0.md)."""
    depth = depth or 1
    ks = {model_k}
    k = 4
    while k <= steps:
        whole = max(depth, depth * int(k / depth + 0.5))
        if whole > steps:
            whole = max(depth, steps // depth * depth)
        ks.add(whole)
        k *= 2
    return sorted(ks)


def _seconds(comm, run):
    """The slowest rank's wall time of run(), between two barriers."""
    comm.Barrier()
    t0 = time.perf_counter()
    run()
    comm.Barrier()
    return comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)


def tune_halo_steps(d, stencil=None, *, weights=None, steps=1,
                    mode="constant", cval=0.0, candidates=None, repeat=2,
                    **apply_kw):
    """(k, times): the halo depth with which apply() ran `steps` steps of
    `stencil` on the distributed grid `d` fastest, and the measured
    seconds of each k tried ({k: the best of `repeat` runs, the slowest
    rank's wall time}); the same on every rank.

    The arguments are apply()'s (backend, transport, overlap, ...
    through `apply_kw`); `candidates`: the k to try, default the cost
    model's k and the powers of two from 4 to `steps`, on device blocks
    each moved to the nearest multiple of the steps the engine fuses in
    a pass (info()'s fused_depth).  A k deeper than
    a block allows runs shallower (apply() shrinks it), and times lists
    the k that ran.  Each try is a whole apply() whose result is dropped,
    after one warm-up run with the model's k: tuning costs some
    len(candidates) * repeat runs, worth it for a grid run many times
    (then pass the k as halo_steps).  `d` is left as it was.  Every rank
    of d.comm must call it with the same arguments.

    >>> k, times = csd.tune_halo_steps(d, "heat2d", steps=200, mode="wrap")
    >>> d = csd.apply(d, "heat2d", steps=200, mode="wrap", halo_steps=k)
    """
    _check_grid(d)
    comm = d.comm
    candidates = agree(comm, _check_candidates, candidates)
    repeat = agree(comm, _check_repeat, repeat)
    kw = dict(apply_kw, weights=weights, steps=steps, mode=mode, cval=cval)
    warm = apply(d, stencil, halo_steps=None, **kw)
    model_k = warm.info["halo_steps"]
    depth = warm.info.get("fused_depth")
    del warm
    if model_k is None:  # nothing is exchanged: k does not matter
        return None, {}
    if candidates is None:
        candidates = _default_candidates(model_k, steps, depth)
    times = {}
    for k in candidates:
        ran, best = k, None
        for _ in range(repeat):
            runs = []  # the result, dropped once its k is read
            seconds = _seconds(comm, lambda: runs.append(
                apply(d, stencil, halo_steps=k, **kw)))
            ran = runs.pop().info["halo_steps"]
            best = seconds if best is None else min(best, seconds)
        times[ran] = min(best, times.get(ran, best))
    k = min(times, key=lambda kk: (times[kk], kk))
    return k, times
