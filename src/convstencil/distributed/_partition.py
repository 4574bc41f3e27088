"""How a global grid is cut into blocks over a Cartesian grid of ranks.

Pure arithmetic, the same on every rank: each rank can work out every
other rank's block without asking it.  Ranks are numbered row-major over
their coordinates, as ``Create_cart(..., reorder=False)`` numbers them.
"""
import numbers

import numpy as np


def balanced(n, parts):
    """Extents of `parts` blocks covering `n` cells, the first ones one
    cell longer where `n` does not divide."""
    base, extra = divmod(n, parts)
    return tuple(base + (i < extra) for i in range(parts))


def offsets(extents):
    """Start of each block along an axis."""
    return tuple(int(x) for x in np.cumsum((0,) + tuple(extents[:-1])))


def resolve_dims(dims, size, ndim, compute_dims):
    """The process grid: the caller's `dims` (checked), or what
    MPI.Compute_dims gives (0 entries are filled in as it fills them)."""
    if dims is None:
        dims = (0,) * ndim
    if isinstance(dims, numbers.Integral):
        dims = (dims,)
    try:
        dims = tuple(dims)
    except TypeError:
        raise TypeError("dims must be a sequence of %d non-negative "
                        "integers, got %r" % (ndim, dims))
    if len(dims) != ndim or not all(
            isinstance(p, numbers.Integral) and not isinstance(p, bool)
            and p >= 0 for p in dims):
        raise ValueError("dims must be %d non-negative integers (one per "
                         "axis of the grid), got %r" % (ndim, dims))
    fixed = int(np.prod([p for p in dims if p > 0], dtype=np.int64))
    if fixed == 0 or size % fixed:
        raise ValueError("dims %r do not fit %d ranks" % (dims, size))
    dims = tuple(int(p) for p in compute_dims(size, list(dims)))
    if int(np.prod(dims, dtype=np.int64)) != size:
        raise ValueError("dims %r multiply to %d, not to the %d ranks"
                         % (dims, int(np.prod(dims)), size))
    return dims


def coords_of(rank, dims):
    """Row-major coordinates of `rank`."""
    return tuple(int(c) for c in np.unravel_index(rank, dims))


def rank_of(coords, dims):
    return int(np.ravel_multi_index(coords, dims))


def split(shape, dims):
    """Per axis, the extents of the blocks along it."""
    for axis, (n, p) in enumerate(zip(shape, dims)):
        if n < p:
            raise ValueError(
                "axis %d of the grid has %d cells, fewer than the %d ranks "
                "along it (dims=%s); pass dims= with fewer ranks along that "
                "axis" % (axis, n, p, tuple(dims)))
    return tuple(balanced(n, p) for n, p in zip(shape, dims))


def block_slices(extents, coords):
    """The global slices of the block at `coords`."""
    return tuple(slice(offsets(e)[c], offsets(e)[c] + e[c])
                 for e, c in zip(extents, coords))
