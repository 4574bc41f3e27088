"""The halo plan of one distributed apply: which sides of this block get
ghost layers, how deep (k*r, k = halo_steps), and the slabs exchanged.

Every rank derives the same plan from what every rank knows (the global
shape, how it is cut, the stencil, the mode), so an invalid plan raises
the same ValueError on every rank without a message.

Why the block stays exact: a padded block run k steps by the
single-process engine goes wrong only within r cells per step of its
artificial edges (its ghost boundaries), so after k steps ghost layers
k*r deep keep every owned cell exact.  Sides at a global edge of a mode
other than "wrap" get no ghost: the engine applies the real mode there.
Reflect, mirror and nearest read at most r cells inward of that edge,
which stay exact while the block's other side has its ghost layers.
"""
import functools
import numbers
import os

import numpy as np

from .. import _backends, _model
from . import _overlap, _partition

# Largest k the cost model considers: deeper halos only grow the padding.
# Device blocks go deeper: each engine call on a device array costs two
# passes over the block (its load into the engine's padded grid and the
# store out of it) besides its steps, which only a deeper k amortises.
MAX_AUTO_HALO_STEPS = 64
MAX_AUTO_HALO_STEPS_DEVICE = 256


class Side:
    """One exchange along an axis: send `send` (starts, sizes) to `peer`
    and receive `recv` from it; `tag` tells the directions apart (a rank
    may be both neighbours, itself included)."""

    __slots__ = ("peer", "send", "recv", "send_tag", "recv_tag")

    def __init__(self, peer, send, recv, send_tag, recv_tag):
        self.peer = peer
        self.send = send
        self.recv = recv
        self.send_tag = send_tag
        self.recv_tag = recv_tag


class HaloPlan:
    """Ghost layers and exchanges of one block (see module docstring)."""

    def __init__(self, d, radii, ghosted, periodic, k):
        self.radii = radii
        self.k = k
        self.overlap = False  # interior compute during the exchange
        # the most steps an engine pass fuses on a round's block (device
        # blocks, from the engine's plan for the model's block; None on
        # host blocks)
        self.fused_depth = None
        # under wrap every ghosted side is internal
        self.lo = tuple(bool(g and (c > 0 or periodic))
                        for g, c in zip(ghosted, d.coords))
        self.hi = tuple(bool(g and (c < p - 1 or periodic))
                        for g, c, p in zip(ghosted, d.coords, d.dims))
        self.depth = tuple(k * r for r in radii)
        # the ghost layers an axis really has (0 where it exchanges none)
        self.ghost_depth = tuple(g if gh else 0
                                 for g, gh in zip(self.depth, ghosted))
        block = d.local_shape
        self.padded_shape = tuple(
            n + g * (lo + hi)
            for n, g, lo, hi in zip(block, self.depth, self.lo, self.hi))
        self.owned_starts = tuple(g * lo for g, lo in zip(self.depth,
                                                          self.lo))
        self.block_shape = block
        self.axes = [self._sides(d, a) for a in range(d.ndim)]

    def _sides(self, d, axis):
        """The exchanges along `axis`: slabs span the whole padded extent
        of the other axes, so ghosts received along earlier axes travel
        on (that fills edges and corners)."""
        sides = []
        size, g = self.padded_shape[axis], self.depth[axis]
        dims, coords = d.dims, list(d.coords)

        def slab(start):
            starts = [0] * d.ndim
            sizes = list(self.padded_shape)
            starts[axis], sizes[axis] = start, g
            return tuple(starts), tuple(sizes)

        def neighbour(step):
            c = list(coords)
            c[axis] = (c[axis] + step) % dims[axis]
            return _partition.rank_of(c, dims)

        up, down = 2 * axis, 2 * axis + 1  # tags: data moving up / down
        if self.lo[axis]:
            sides.append(Side(neighbour(-1), slab(g), slab(0), down, up))
        if self.hi[axis]:
            sides.append(Side(neighbour(+1), slab(size - 2 * g),
                              slab(size - g), up, down))
        return sides

    def ghost_bytes(self):
        """Bytes this rank sends (and receives) per exchange."""
        return sum(8 * int(np.prod(s.send[1], dtype=np.int64))
                   for sides in self.axes for s in sides)

    def owned(self):
        """Slices of the padded block that hold the owned block."""
        return tuple(slice(s, s + n) for s, n in zip(self.owned_starts,
                                                     self.block_shape))


def _check_halo_steps(halo_steps):
    if halo_steps is None:
        return None
    if (isinstance(halo_steps, (bool, np.bool_))
            or not isinstance(halo_steps, numbers.Integral)):
        raise TypeError("halo_steps must be a positive integer or None, "
                        "got %r" % (halo_steps,))
    if halo_steps < 1:
        raise ValueError("halo_steps must be a positive integer or None, "
                         "got %d" % halo_steps)
    return int(halo_steps)


def _ghosted_axes(d, radii, periodic, self_exchange=False):
    """Axes that get ghost layers: split axes.  An unsplit axis is whole
    on every rank, so the engine's own boundary mode is exact along it
    (wrap too: it wraps the whole axis); with `self_exchange` (True: every
    axis; else a tuple of axes) an unsplit periodic axis at least r wide
    exchanges with the rank itself instead (the same result, through the
    transport: for testing transports, and for one GPU's rounds as a
    slab's)."""
    def selfed(axis):
        return (self_exchange is True
                or (self_exchange not in (False, None)
                    and axis in self_exchange))
    return tuple(r > 0 and (p > 1 or (periodic and selfed(a) and n >= r))
                 for a, (r, p, n) in enumerate(zip(radii, d.dims, d.shape)))


def max_halo_steps(d, radii, ghosted):
    """The deepest k every block can serve: each sends k*r of its own
    cells to a neighbour.  None where no axis is ghosted."""
    limits = [min(e) // r for e, r, g in zip(d.extents, radii, ghosted) if g]
    return min(limits) if limits else None


def _check_overlap(overlap):
    if overlap is None or isinstance(overlap, (bool, np.bool_)):
        return overlap
    raise TypeError("overlap must be True, False or None, got %r"
                    % (overlap,))


def _overlap_choices(d, overlap):
    """What the model may pick: device blocks never overlap (their
    exchange and engine calls are queued on one stream)."""
    if d.on_device:
        return (False,)
    return (False, True) if overlap is None else (bool(overlap),)


def make_plan(d, weights_shape, mode, steps, halo_steps, taps,
              self_exchange=False, overlap=False, weights=None,
              backend="cuda"):
    """The plan, the same on every rank; ValueError where no k fits.
    `overlap`: True, False or None (the cost model decides, with k where
    halo_steps is None); the plan's `overlap` says what runs.  `weights`
    (the kernel, for device blocks) lets the model price the engine's own
    plan for each k, on the path `backend` (a CUDA one) runs."""
    halo_steps = _check_halo_steps(halo_steps)
    overlaps = _overlap_choices(d, _check_overlap(overlap))
    radii = tuple((s - 1) // 2 for s in weights_shape)
    periodic = mode == "wrap"
    ghosted = _ghosted_axes(d, radii, periodic, self_exchange)
    k_max = max_halo_steps(d, radii, ghosted)
    if k_max is None:  # nothing to exchange: one round, nothing to hide
        plan = HaloPlan(d, radii, ghosted, periodic, 0)
        return plan, max(steps, 1)
    if k_max < 1:
        axis, thin = next(
            (a, min(e)) for a, (e, r, g) in enumerate(zip(
                d.extents, radii, ghosted)) if g and min(e) < r)
        raise ValueError(
            "a block of %d cells along axis %d is thinner than the "
            "stencil's radius %d there: a rank would need cells of ranks "
            "beyond its neighbour; use fewer ranks along that axis (dims=) "
            "or a larger grid" % (thin, axis, radii[axis]))
    k = None
    if halo_steps is not None:
        k = max(1, min(halo_steps, k_max, max(steps, 1)))
    deepest = (MAX_AUTO_HALO_STEPS_DEVICE if d.on_device
               else MAX_AUTO_HALO_STEPS)
    engine = ((weights, mode, backend) if d.on_device and weights is not None
              else None)
    k, chosen, depth = choose_halo_steps(d, radii, ghosted,
                                         min(k_max, deepest), steps, taps,
                                         overlaps, k, engine)
    plan = HaloPlan(d, radii, ghosted, periodic, k)
    plan.overlap = chosen
    plan.fused_depth = depth
    return plan, k


# ---------------------------------------------------------------------------
# cost model

# Seconds, per rank.  Rough figures for an MPI job on one host (CPU) and
# for a GPU (NCCL, tensor-core engine); only their ratios matter.  An
# engine call costs about one pass over memory more than its steps (the
# CPU engine's temporal blocking, the GPU's load and store), which is
# what deeper halos save: measured on 2 cores, heat2d 2048^2 per rank runs
# 0.84 s with k=1 and 0.23 s with k=16 (plain apply 0.235 s), heat3d 160^3
# is fastest at k=4 to 8.
_COSTS = {
    False: dict(message=5e-6, byte=1 / 4e9, call=30e-6, call_point=1.6e-9,
                tap_point=0.25e-9),
    # GPU: NCCL between two H200s of one host (NVLink), fitted to
    # benchmarks/results/h200x2_multigpu.md (4097577, the sweep): 129 us
    # per exchange of 0.16 MB (two slabs each way) and 1156 us of 268 MB
    # (heat2d k=1, heat3d k=64); a round's engine call
    # and host work (the call, the vote on errors) about 100 us; the
    # per-point figures are used only without the engine's plan
    True: dict(message=30e-6, byte=1 / 250e9, call=100e-6,
               call_point=16 / 2.5e12, tap_point=8 / 2.5e12 / 5),
}

# A slab's pack or unpack between a session's grid and its message buffer
# (one pitched copy, returning when done: mostly launch and wait).  An
# estimate: no committed run has timed the pitched copies alone.
COPY_SECONDS = 20e-6

# The fraction of the copy bandwidth an engine call's load and store of a
# device array reach, fitted loosely to the call overheads that
# bench_multigpu.py prints (h200x2_multigpu.md, 4097577: 1.95 ms beyond
# the step loop of a heat2d call on 10240^2 and 1.77 ms on heat3d 512^3,
# on an H200); at the H100 copy rate the model uses this prices them at
# 1.49 and 1.91 ms.
IO_FRACTION = 0.75


def _exchange_seconds(padded, depth_sides, k, cost):
    """Per axis, the predicted time of its exchange (latency and bytes;
    slabs span the padded extent of the other axes)."""
    points = float(np.prod(padded, dtype=np.float64))
    return [2 * sides * cost["message"]
            + 8.0 * k * r * sides * points / n * cost["byte"]
            for n, (r, sides) in zip(padded, depth_sides)]


def _call_seconds(points, k, taps, cost):
    """One engine call of k steps on `points` cells."""
    return cost["call"] + points * cost["call_point"] + (
        k * points * taps * cost["tap_point"])


def _overlap_compute(shape, depth_sides, k, taps, cost):
    """(interior, strips) compute seconds of an overlapped round: the
    interior's call (plus copying it in and out where the owned block is
    not contiguous in the padded one), and one call per strip plus the
    copy of its exact part."""
    lo = [k * r * (sides > 0) for r, sides in depth_sides]
    hi = [k * r * (sides > 1) for r, sides in depth_sides]
    padded = [n + a + b for n, a, b in zip(shape, lo, hi)]
    interior, strips = _overlap.split(padded, lo, shape, lo, hi)
    inner = 0.0
    if interior is not None:
        src = _overlap.points(interior[0])
        copies = 0 if not any(lo[1:] + hi[1:]) else 2
        inner = _call_seconds(src, k, taps, cost) + (
            copies * src * cost["call_point"])
    edge = sum(_call_seconds(_overlap.points(src), k, taps, cost)
               + _overlap.points(dst) * cost["call_point"]
               for src, dst in strips)
    return inner, edge


def _engine_round(padded, k, engine):
    """(seconds, plan) of the engine's k steps on the padded block: the
    plan of the path the engine runs (_backends.gpu_run_model) priced by
    the performance model (explain()'s)."""
    weights, mode, backend = engine
    padded = tuple(int(n) for n in padded)
    path, cc_major, cap, smem = _backends.gpu_run_model(
        backend, padded, weights, mode, k)
    w = np.ascontiguousarray(weights, dtype=np.float64)
    return _priced_round(padded, int(k), w.tobytes(), w.shape, mode, path,
                         cap, cc_major, smem)


@functools.lru_cache(maxsize=1024)
def _priced_round(padded, k, wbytes, wshape, mode, path, cap, cc_major,
                  smem):
    """_engine_round's price, kept: a plan weighs some 40 k, each priced
    twice, at about 2 ms a price (the model's pass segments), and a run
    that priced them afresh at every apply() paid 0.16 s a call (weak
    heat2d on 2 H200s, 600 steps: 0.40 ms a step against 0.13 with the
    same k forced; benchmarks/results/h200x2_multigpu_k.md)."""
    w = np.frombuffer(wbytes, dtype=np.float64).reshape(wshape)
    seconds, _, _, plan = _model.predict_gpu(padded, w, mode, k, path, cap,
                                             None, cc_major, smem)
    return seconds, plan


def _round_depth(shape, depth_sides, k, engine, steps=None):
    """The steps a pass fuses in the engine's plan for `steps` (default
    k) on the padded block of a round of k."""
    padded = [n + k * r * sides for n, (r, sides) in zip(shape, depth_sides)]
    plan = _engine_round(padded, steps or k, engine)[1]
    return int(plan.get("fused_depth") or 1)


# Steps enough for any engine plan to fuse its deepest passes (tc1d's
# are the deepest, 15 steps).
_DEPTH_PROBE_STEPS = 64


def _engine_depth(shape, depth_sides, k, engine):
    """The most steps a pass of the engine fuses on the padded block of
    a round of k (its plan for a deeper run where k is shallow), None
    without an engine: a k that is a multiple of it, or no more than it,
    runs no shallower pass (has_tail_pass)."""
    if engine is None:
        return None
    return _round_depth(shape, depth_sides, k, engine,
                        steps=max(k, _DEPTH_PROBE_STEPS))


def has_tail_pass(shape, depth_sides, k, engine):
    """Whether the engine runs k steps on the padded block with a pass
    shallower than its fused depth.  On one H100 such a round ran 12 to
    16% slower a step than rounds of a multiple of the depth (heat2d:
    60 steps at depth 8 against 64; heat3d: 8 and 16 at depth 3 against
    6 and 15; benchmarks/results/h100_session_rounds.md), more than the
    model prices the shallow pass."""
    depth = _round_depth(shape, depth_sides, k, engine)
    return k > depth and k % depth != 0


def _device_round_seconds(padded, depth_sides, k, engine):
    """A device round's k steps on the padded block: the engine's plan
    for them priced by the performance model (explain()'s) and the
    round's host latency.  2D and 3D blocks stay in an engine session
    for the run (_run.py), so a round also packs and unpacks the slabs
    of axes other than 0 (the session's rows are padded); a 1D block's
    round is an engine call
    of its own, which loads and stores the block."""
    seconds = _engine_round(padded, k, engine)[0]
    if len(padded) > 1:
        # axis 0's slabs move as whole planes of the session's grid
        # (_run._SessionGrid.span): only the other axes' are copied
        sides = sum(s for _, s in depth_sides[1:])
        return seconds + _COSTS[True]["call"] + 2 * sides * COPY_SECONDS
    return seconds + _device_io_seconds(padded) + _COSTS[True]["call"]


def _device_io_seconds(padded):
    """An engine call's load of a device block and its store."""
    rates = _model.gpu_rates()
    points = float(np.prod(padded, dtype=np.float64))
    return 2 * 16.0 * points / (rates["bandwidth"] * IO_FRACTION)


def predicted_step_seconds(shape, depth_sides, k, taps, on_device,
                           overlap=False, engine=None):
    """Predicted time per step with halo_steps k: one exchange per k
    steps, then k steps on the padded block in one engine call; with
    `overlap`, the first exchanging axis's messages fly while the
    interior runs (the round waits for the longer of the two), then the
    other axes' exchanges and the strips' calls.  `engine` ((weights,
    mode, backend), device blocks): price the call with the engine's own
    plan (fused passes, a remainder step where k is not a multiple of
    the fused depth) instead of a cost per tap."""
    cost = _COSTS[on_device]
    padded = [n + k * r * sides for n, (r, sides) in zip(shape, depth_sides)]
    exchange = _exchange_seconds(padded, depth_sides, k, cost)
    if on_device and engine is not None:
        return (sum(exchange) + _device_round_seconds(padded, depth_sides, k,
                                                      engine)) / k
    if not overlap:
        compute = _call_seconds(float(np.prod(padded, dtype=np.float64)),
                                k, taps, cost)
        return (sum(exchange) + compute) / k
    inner, edge = _overlap_compute(shape, depth_sides, k, taps, cost)
    first = next((i for i, (_, sides) in enumerate(depth_sides) if sides),
                 None)
    hidden = exchange[first] if first is not None else 0.0
    rest = sum(exchange) - hidden
    return (max(hidden, inner) + rest + edge) / k


def candidate_halo_steps(k_max):
    """The k the model tries: every k up to 16, then every 4th to 64 and
    every 8th beyond (deep halos differ little from their neighbours),
    and k_max itself."""
    ks = set(range(1, min(k_max, 16) + 1))
    ks.update(range(20, min(k_max, 64) + 1, 4))
    ks.update(range(72, k_max + 1, 8))
    ks.add(k_max)
    return sorted(ks)


def choose_halo_steps(d, radii, ghosted, k_max, steps, taps,
                      overlaps=(False,), k=None, engine=None):
    """(k, overlap, fused_depth): the k among candidate_halo_steps(k_max)
    (or the given `k`) and the choice in `overlaps` the cost model
    predicts fastest, and the most steps a pass of the engine fuses on
    that round's block (None without `engine`).  Every rank must pick
    the same, so the model sees the largest block with neighbours on
    both sides of every ghosted axis.
    The model prices steady rounds; where the engine's plan prices device
    rounds (`engine`), the whole run: the rounds an engine session runs,
    then what remains of `steps` as a call of its own, which loads and
    stores the block (so k that divide `steps` gain); and a k whose round
    ends in a pass shallower than the engine's depth is left out where
    another is not (has_tail_pass)."""
    shape = tuple(max(e) for e in d.extents)
    key = None
    if engine is not None:
        weights, mode, backend = engine
        w = np.ascontiguousarray(weights, dtype=np.float64)
        # what the engine's plan depends on beyond the arguments: the
        # device the planner takes and its depth cap (_backends)
        key = (w.tobytes(), w.shape, mode, backend,
               _backends.cuda_plan_device(),
               os.environ.get("CONVSTENCIL_CUDA_MAX_DEPTH", ""))
    # the model's figures as they are now (tests change them)
    figures = (tuple(sorted(_COSTS[d.on_device].items())), COPY_SECONDS,
               IO_FRACTION, tuple(sorted(_model.gpu_rates().items())))
    return _choose_halo_steps(shape, tuple(radii), tuple(ghosted), k_max,
                              steps, taps, tuple(overlaps), k, d.on_device,
                              key, figures)


@functools.lru_cache(maxsize=256)
def _choose_halo_steps(shape, radii, ghosted, k_max, steps, taps, overlaps,
                       k, on_device, engine_key, figures):
    """choose_halo_steps' choice, kept: it prices some 40 k, about 1 ms
    a call (2D) even with each price kept (_priced_round), which a run of
    a few hundred steps on a GPU notices (benchmarks/results/
    h200x4_multigpu_36cc777.md: the calls' setup)."""
    engine = None
    if engine_key is not None:
        wbytes, wshape, mode, backend = engine_key[:4]
        engine = (np.frombuffer(wbytes, dtype=np.float64).reshape(wshape),
                  mode, backend)
    shape = list(shape)
    sides = [(r, 2 if g else 0) for r, g in zip(radii, ghosted)]
    k_max = max(1, min(k_max, max(steps, 1)))
    ks = [k] if k is not None else candidate_halo_steps(k_max)
    if engine is not None and k is None:
        whole = [kk for kk in ks
                 if not has_tail_pass(shape, sides, kk, engine)]
        ks = whole or ks

    def cost(kk, ov):
        per_step = predicted_step_seconds(shape, sides, kk, taps,
                                          on_device, ov, engine)
        rest = steps % kk if steps > kk else 0
        if engine is None or len(shape) == 1 or not rest:
            return per_step
        rest_seconds = (predicted_step_seconds(shape, sides, rest, taps,
                                               True, False, engine) * rest
                        + _device_io_seconds([n + kk * r * s for n, (r, s)
                                              in zip(shape, sides)]))
        return ((steps - rest) * per_step + rest_seconds) / steps

    costs = [(cost(kk, ov), kk, ov) for ov in overlaps for kk in ks]
    _, k, overlap = min(costs, key=lambda c: c[0])
    return k, overlap, _engine_depth(shape, sides, k, engine)
