"""Splitting one round's compute into the deep interior, which runs while
the ghosts travel, and the boundary strips, which run once they arrived.

Pure arithmetic on a padded block (owned cells plus g = k*r ghost layers
on the sides that have them), the same for the run and the cost model.

A piece is (src, dst): slices of the padded block.  The engine runs k
steps on padded[src] and only padded[dst] of its result is kept.  That
is exact because each side of src is either

- a global edge (a side without ghosts, or a whole axis): the engine
  applies the real mode there, as on the whole grid; or
- an artificial edge at least g cells from dst: the engine's errors
  there travel r cells per step, so k steps leave dst untouched.

`dst` expanded by g on both sides and clipped to the padded block gives
such a src: where the clipping stops at a padded edge, that edge is a
global one or a ghost boundary (itself g cells outside every owned cell).

The interior's dst is every owned cell at least g from each ghosted side,
so its src is exactly the owned block: it reads no ghost cell and can run
before the exchange completes.  The strips cover the rest of the owned
block without overlapping, onion-like: along each ghosted axis a, its low
and high strips, limited along earlier axes to their interior range (the
earlier axes' strips hold the rest) and spanning later axes whole.
"""
import numpy as np


def axis_ranges(start, n, lo, hi):
    """Along one axis: the (low strip, interior, high strip) ranges of an
    owned range [start, start+n) with lo and hi ghost layers (0: none).
    A block thinner than lo+hi has an empty interior; then the strips
    share it out, the low strip first."""
    lo_end = start + min(lo, n)
    hi_start = max(lo_end, start + n - hi)
    return (start, lo_end), (lo_end, hi_start), (hi_start, start + n)


def _empty(r):
    return r[1] <= r[0]


def _src(dst, padded_shape, depth):
    """dst's ranges, each grown by the axis's depth, within the block."""
    return tuple((max(0, a - g), min(n, b + g))
                 for (a, b), n, g in zip(dst, padded_shape, depth))


def split(padded_shape, owned_starts, block_shape, lo, hi):
    """(interior, strips) of a padded block: the interior piece (None
    where it is empty) and the list of strip pieces, each piece a pair
    (src, dst) of (start, stop) ranges per axis.  `lo`, `hi`: ghost
    layers per axis on each side (0 where none)."""
    per_axis = [axis_ranges(s, n, a, b)
                for s, n, a, b in zip(owned_starts, block_shape, lo, hi)]
    depth = [max(a, b) for a, b in zip(lo, hi)]
    inner = tuple(r[1] for r in per_axis)
    interior = None
    if not any(_empty(r) for r in inner):
        interior = (_src(inner, padded_shape, depth), inner)
    strips = []
    for axis, (low, _, high) in enumerate(per_axis):
        if any(_empty(r) for r in inner[:axis]):
            break  # the earlier axes' strips already cover the rest
        for strip in (low, high):
            if _empty(strip):
                continue
            dst = (inner[:axis] + (strip,)
                   + tuple((s, s + n) for s, n in zip(
                       owned_starts[axis + 1:], block_shape[axis + 1:])))
            strips.append((_src(dst, padded_shape, depth), dst))
    return interior, strips


def plan_split(plan):
    """split() of a HaloPlan's block."""
    lo = [g * bool(s) for g, s in zip(plan.depth, plan.lo)]
    hi = [g * bool(s) for g, s in zip(plan.depth, plan.hi)]
    return split(plan.padded_shape, plan.owned_starts, plan.block_shape,
                 lo, hi)


def slices(ranges):
    return tuple(slice(a, b) for a, b in ranges)


def within(piece):
    """Slices of dst inside the engine's result on src."""
    src, dst = piece
    return tuple(slice(d0 - s0, d1 - s0)
                 for (s0, _), (d0, d1) in zip(src, dst))


def points(ranges):
    return float(np.prod([b - a for a, b in ranges], dtype=np.float64))
