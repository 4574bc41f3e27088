"""The paper's benchmark stencils, with documented, stable default weights.

Every default kernel is non-negative and sums to 1, so each step is a
weighted average: values stay within [min, max] of the grid (and cval)
for any number of steps.  The heat presets take a diffusion number
``alpha``, checked against the stability limit of the explicit scheme,
0 <= alpha <= 1 / (2 * ndim): beyond it the result grows without bound
(heat2d with alpha 0.3 reaches 1e26 in 200 steps), so such an alpha is a
ValueError unless the caller asks for it with ``unstable=True``.
"""
import difflib
import re

import numpy as np

PRESETS = ("heat1d", "1d5p", "heat2d", "box2d9p", "star2d13p", "box2d49p",
           "heat3d", "box3d27p")

# Binomial rows: smooth, positive, sum to 1.
_BINOMIAL = {
    3: np.array([1.0, 2.0, 1.0]) / 4.0,
    5: np.array([1.0, 4.0, 6.0, 4.0, 1.0]) / 16.0,
    7: np.array([1.0, 6.0, 15.0, 20.0, 15.0, 6.0, 1.0]) / 64.0,
}

_HEAT_ALPHA = {1: 0.25, 2: 0.2, 3: 0.125}


def normalize_name(name):
    """'Box-2D49P' -> 'box2d49p': lower case, no dashes/underscores/spaces."""
    return re.sub(r"[\s_\-]", "", name).lower()


def heat_alpha_limit(ndim):
    """The largest stable diffusion number of heat<ndim>d."""
    return 1.0 / (2 * ndim)


def _heat(ndim, alpha, unstable=False):
    if alpha is None:
        alpha = _HEAT_ALPHA[ndim]
    alpha = float(alpha)
    if not np.isfinite(alpha):
        raise ValueError("alpha must be finite, got %r" % alpha)
    limit = heat_alpha_limit(ndim)
    if not unstable and not 0.0 <= alpha <= limit:
        raise ValueError(
            "alpha=%r is outside heat%dd's stability limit 0 <= alpha <= %g "
            "(explicit Euler: beyond it the result grows without bound); "
            "pass unstable=True to build it anyway" % (alpha, ndim, limit))
    w = np.zeros((3,) * ndim)
    center = (1,) * ndim
    w[center] = 1.0 - 2 * ndim * alpha
    for axis in range(ndim):
        for side in (0, 2):
            index = list(center)
            index[axis] = side
            w[tuple(index)] = alpha
    return w


def _outer(row, ndim):
    w = row
    for _ in range(ndim - 1):
        w = np.multiply.outer(w, row)
    return w


def _star2d13p():
    # radius-3 star: the mean of the 7-point binomial along each axis
    w = np.zeros((7, 7))
    w[3, :] += 0.5 * _BINOMIAL[7]
    w[:, 3] += 0.5 * _BINOMIAL[7]
    return w


def preset_weights(name, alpha=None, unstable=False):
    """Dense default weights of canonical preset `name`."""
    if name.startswith("heat"):
        return _heat(int(name[4]), alpha, unstable)
    if alpha is not None:
        raise TypeError("alpha= applies to the heat presets only, not %r"
                        % name)
    if name == "1d5p":
        return _BINOMIAL[5].copy()
    if name == "box2d9p":
        return _outer(_BINOMIAL[3], 2)
    if name == "star2d13p":
        return _star2d13p()
    if name == "box2d49p":
        return _outer(_BINOMIAL[7], 2)
    if name == "box3d27p":
        return _outer(_BINOMIAL[3], 3)
    raise AssertionError(name)


def footprint(name):
    """Boolean mask of the points a preset may weight (its shape)."""
    # every default weight inside the shape is non-zero
    return preset_weights(name) != 0


def resolve(name):
    """Canonical preset name for a user spelling; ValueError with hints."""
    if not isinstance(name, str):
        raise TypeError("a preset name must be a str, got %s"
                        % type(name).__name__)
    key = normalize_name(name)
    if key in PRESETS:
        return key
    close = difflib.get_close_matches(key, PRESETS, n=3, cutoff=0.5)
    hint = (" Did you mean %s?" % " or ".join(repr(c) for c in close)
            if close else "")
    raise ValueError("unknown stencil preset %r.%s Presets: %s."
                     % (name, hint, ", ".join(PRESETS)))
