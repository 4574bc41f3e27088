"""Plain NumPy reference for convstencil.apply, written for clarity.

This is the oracle the engine is tested against (like bottleneck's
``slow/`` twin).  It favours obviousness over speed:

1. For every axis, build the index of the input cell that each position of
   the extended line reads, using SciPy's boundary rule for `mode`
   (``extended_index``).  This works for any radius, even one wider than
   the grid, where ``np.pad`` gives up or differs.
2. Gather the extended grid with ``np.ix_`` (for ``"constant"`` the
   out-of-range positions read one extra cell holding `cval`).
3. One step is ``sum_q W[q] * extended[q : q + n]`` over every position q
   of the weight box -- correlation, as ``scipy.ndimage.correlate``
   defines it.  Zero weights are included (SciPy drops weights with
   ``|w| <= DBL_EPSILON``; the difference only shows for such tiny weights,
   which the tests avoid).
4. ``steps`` repeats the step, re-reading `cval` at every step.
"""
import itertools

import numpy as np

#: Mode names the engine accepts, after aliases are resolved.
MODES = ("constant", "wrap", "nearest", "reflect", "mirror")
#: Alias -> canonical mode.
MODE_ALIASES = {"periodic": "wrap"}


def canonical_mode(mode):
    """'periodic' -> 'wrap'; the canonical names map to themselves."""
    mode = MODE_ALIASES.get(mode, mode)
    if mode not in MODES:
        raise ValueError("unknown mode %r" % (mode,))
    return mode


def extended_index(n, radius, mode):
    """Source index of each of the ``n + 2*radius`` extended positions.

    Position ``i`` of the result stands for grid index ``i - radius``.
    For ``"constant"`` an out-of-range position gets index ``n``, which
    the caller maps to a cell holding `cval`.

    SciPy's rules, for a line ``a b c d`` (n = 4):

    - constant: ``k k k k | a b c d | k k k k``  (k = cval)
    - nearest:  ``a a a a | a b c d | d d d d``
    - wrap:     ``a b c d | a b c d | a b c d``
    - reflect:  ``d c b a | a b c d | d c b a``  (half-sample symmetric)
    - mirror:   ``d c b | a b c d | c b a``      (whole-sample symmetric)
    """
    i = np.arange(-radius, n + radius)
    if mode == "constant":
        return np.where((i >= 0) & (i < n), i, n)
    if mode == "nearest":
        return np.clip(i, 0, n - 1)
    if mode == "wrap":
        return np.mod(i, n)
    if mode == "reflect":
        j = np.mod(i, 2 * n)
        return np.where(j < n, j, 2 * n - 1 - j)
    if mode == "mirror":
        if n == 1:
            return np.zeros_like(i)
        period = 2 * n - 2
        j = np.mod(i, period)
        return np.where(j < n, j, period - j)
    raise ValueError("unknown mode %r" % (mode,))


def extend(grid, radius, mode, cval=0.0):
    """The grid extended by `radius[axis]` cells on both sides of each axis."""
    grid = np.asarray(grid, dtype=np.float64)
    if mode == "constant":
        # one extra cell of cval at the end of every axis; index n reads it
        source = np.pad(grid, [(0, 1)] * grid.ndim, mode="constant",
                        constant_values=cval)
    else:
        source = grid
    index = [extended_index(n, r, mode) for n, r in zip(grid.shape, radius)]
    return source[np.ix_(*index)]


def correlate_once(grid, weights, mode="constant", cval=0.0):
    """One step: ``scipy.ndimage.correlate(grid, weights, mode, cval)``."""
    grid = np.asarray(grid, dtype=np.float64)
    weights = np.asarray(weights, dtype=np.float64)
    if grid.ndim != weights.ndim:
        raise ValueError("grid and weights must have the same ndim")
    if any(s % 2 == 0 for s in weights.shape):
        raise ValueError("weights need an odd side on every axis")
    radius = tuple(s // 2 for s in weights.shape)
    ext = extend(grid, radius, canonical_mode(mode), cval)
    out = np.zeros(grid.shape, dtype=np.float64)
    for q in itertools.product(*(range(s) for s in weights.shape)):
        window = tuple(slice(qa, qa + n) for qa, n in zip(q, grid.shape))
        out += weights[q] * ext[window]
    return out


def apply(grid, weights, steps=1, mode="constant", cval=0.0):
    """`steps` repeated correlations; steps=0 returns a float64 copy."""
    out = np.array(grid, dtype=np.float64, copy=True)
    for _ in range(steps):
        out = correlate_once(out, weights, mode, cval)
    return out


def scipy_apply(grid, weights, steps=1, mode="constant", cval=0.0):
    """The same with scipy.ndimage.correlate (the definition we follow)."""
    from scipy import ndimage

    out = np.array(grid, dtype=np.float64, copy=True)
    for _ in range(steps):
        out = ndimage.correlate(out, np.asarray(weights, dtype=np.float64),
                                mode=canonical_mode(mode), cval=cval)
    return out


# ---------------------------------------------------------------------------
# Schemes: several fields, stages, parameter fields, monomials.

def scheme_step(state, scheme, params, mode, cval, correlate=None):
    """One step of `scheme` (a convstencil.Scheme) on `state`, a list of
    float64 arrays in scheme.fields order; returns the new list.

    Per stage, each update sums its terms in order, starting from 0
    (csrc/scheme.h): a stencil term is coef * [param] * the stencil
    correlated with its field (`correlate`, default scipy.ndimage's, with
    the mode and cval), a monomial coef * [param] * the product of the
    fields, each multiplied in power times in field order.  Every update
    of a stage reads the values from the stage's start."""
    if correlate is None:
        from scipy import ndimage

        def correlate(grid, weights, mode, cval):
            return ndimage.correlate(grid, weights, mode=mode, cval=cval)

    for stage in scheme.updates():
        before = list(state)
        for target, terms in stage:
            acc = np.zeros_like(before[0])
            for t in terms:
                coef = t.coef if t.param is None else t.coef * params[t.param]
                if t.stencil is not None:
                    value = correlate(before[t.field], t.stencil,
                                      canonical_mode(mode), cval)
                else:
                    value = np.ones_like(before[0])
                    for f, power in enumerate(t.powers):
                        for _ in range(power):
                            value = value * before[f]
                acc = acc + coef * value
            state[target] = acc
    return state


def scheme_apply(grids, scheme, steps=1, params=None, mode=None, cval=None,
                 correlate=None):
    """`steps` steps of `scheme` from the tuple `grids`; returns a tuple of
    float64 arrays.  `params`: {name: array}; mode/cval None: the
    scheme's."""
    mode = scheme.mode if mode is None else mode
    cval = scheme.cval if cval is None else cval
    params = {k: np.asarray(v, dtype=np.float64)
              for k, v in (params or {}).items()}
    state = [np.array(g, dtype=np.float64, copy=True) for g in grids]
    for _ in range(steps):
        state = scheme_step(state, scheme, params, mode, cval, correlate)
    return tuple(state)


# ---------------------------------------------------------------------------
# Preset weights, written out from the spec (independent of the package).

def heat_weights(ndim, alpha):
    """Centre ``1 - 2*ndim*alpha``, each axis neighbour ``alpha``."""
    w = np.zeros((3,) * ndim)
    centre = (1,) * ndim
    w[centre] = 1.0 - 2 * ndim * alpha
    for axis in range(ndim):
        for side in (0, 2):
            index = list(centre)
            index[axis] = side
            w[tuple(index)] = alpha
    return w


#: canonical name -> (ndim, shape, footprint mask or None for a full box)
PRESET_SHAPES = {
    "heat1d": (1, (3,)),
    "1d5p": (1, (5,)),
    "heat2d": (2, (3, 3)),
    "box2d9p": (2, (3, 3)),
    "star2d13p": (2, (7, 7)),
    "box2d49p": (2, (7, 7)),
    "heat3d": (3, (3, 3, 3)),
    "box3d27p": (3, (3, 3, 3)),
}

#: number of points of each preset (its footprint size)
PRESET_POINTS = {
    "heat1d": 3, "1d5p": 5, "heat2d": 5, "box2d9p": 9, "star2d13p": 13,
    "box2d49p": 49, "heat3d": 7, "box3d27p": 27,
}

HEAT_ALPHA = {"heat1d": 0.25, "heat2d": 0.2, "heat3d": 0.125}


def star_mask(ndim, radius):
    """Boolean mask of a star (axis-aligned cross) of the given radius."""
    side = 2 * radius + 1
    mask = np.zeros((side,) * ndim, dtype=bool)
    centre = [radius] * ndim
    for axis in range(ndim):
        index = list(centre)
        index[axis] = slice(None)
        mask[tuple(index)] = True
    return mask


def preset_footprint(name):
    """Where a preset may hold non-zero weights."""
    ndim, shape = PRESET_SHAPES[name]
    if name.startswith("heat"):
        return star_mask(ndim, 1)
    if name == "star2d13p":
        return star_mask(2, 3)
    return np.ones(shape, dtype=bool)
