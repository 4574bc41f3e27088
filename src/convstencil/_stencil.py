"""Stencil: a validated, immutable weight box, from a preset or custom."""
import functools

import numpy as np

from . import _expr, _presets

# The engine handles any radius; this bound keeps a typo (a 2001-wide
# kernel) from silently running for hours.  Raise it if a real use needs.
MAX_RADIUS = 7


def as_weights(weights):
    """Validate user weights; return a read-only float64 C-ordered copy."""
    if isinstance(weights, Stencil):
        return weights.weights
    try:
        w = np.asarray(weights)
    except Exception as exc:  # ragged lists and the like
        raise TypeError("weights must be a real numeric array: %s" % exc)
    if w.dtype.kind not in "biuf":
        raise TypeError("weights must be real numbers (bool, int or float), "
                        "got dtype %s" % w.dtype)
    if w.ndim < 1 or w.ndim > 3:
        raise ValueError("weights must be a 1D, 2D or 3D array, got ndim=%d"
                         % w.ndim)
    if w.size == 0:
        raise ValueError("weights must not be empty, got shape %s"
                         % (w.shape,))
    if any(s % 2 == 0 for s in w.shape):
        raise ValueError("weights need an odd size on every axis (the point "
                         "itself at the centre), got shape %s" % (w.shape,))
    if any(s > 2 * MAX_RADIUS + 1 for s in w.shape):
        raise ValueError("weights may be at most %d wide per axis (radius "
                         "%d), got shape %s"
                         % (2 * MAX_RADIUS + 1, MAX_RADIUS, w.shape))
    w = np.array(w, dtype=np.float64, order="C")
    if not np.all(np.isfinite(w)):
        raise ValueError("weights must be finite (no NaN or inf)")
    w.flags.writeable = False
    return w


class Stencil:
    """A stencil: dense float64 weights applied by correlation.

    ``Stencil("heat2d", alpha=0.2)`` builds a preset (names are
    case-insensitive and ignore dashes); ``Stencil(weights=w)`` a custom
    kernel of odd side per axis, 1D to 3D; ``Stencil("box2d9p",
    weights=w)`` a preset shape with your weights (w must have the
    preset's shape and be zero outside its footprint).  A heat preset's
    alpha must lie within the explicit scheme's stability limit
    (0 <= alpha <= 1 / (2 * ndim)) unless ``unstable=True``.

    >>> s = Stencil("heat2d", alpha=0.2)
    >>> s.weights
    array([[0. , 0.2, 0. ],
           [0.2, 0.2, 0.2],
           [0. , 0.2, 0. ]])
    >>> v = convstencil.apply(u, s, steps=100)
    >>> Stencil(weights=np.ones((3, 3)) / 9).radius
    (1, 1)
    """

    __slots__ = ("_name", "_weights")

    def __init__(self, name=None, *, weights=None, alpha=None,
                 unstable=False):
        if name is None and weights is None:
            raise TypeError("Stencil needs a preset name or weights=")
        if name is None:
            if alpha is not None:
                raise TypeError("alpha= applies to the heat presets only")
            self._name = None
            self._weights = as_weights(weights)
            return
        canonical = _presets.resolve(name)
        self._name = canonical
        if weights is None:
            w = _presets.preset_weights(canonical, alpha, unstable)
        else:
            if alpha is not None:
                raise TypeError("give either alpha= or weights=, not both")
            w = as_weights(weights)
            mask = _presets.footprint(canonical)
            if w.shape != mask.shape:
                raise ValueError("preset %r needs weights of shape %s, got %s"
                                 % (canonical, mask.shape, w.shape))
            if np.any(w[~mask] != 0):
                raise ValueError("weights for preset %r must be zero outside "
                                 "its footprint; pass weights= alone for a "
                                 "custom kernel" % canonical)
        self._weights = as_weights(w)

    @property
    def name(self):
        """The canonical preset name, or None for custom weights."""
        return self._name

    @property
    def weights(self):
        """Full dense float64 weight array (read-only), zeros included."""
        return self._weights

    @property
    def ndim(self):
        return self._weights.ndim

    @property
    def shape(self):
        return self._weights.shape

    @property
    def radius(self):
        return tuple((s - 1) // 2 for s in self._weights.shape)

    def __call__(self, field):
        """The stencil applied to a field, as a term of a scheme:
        ``L(u)`` is one step of ``apply(u, L)`` inside the scheme
        (convstencil.Scheme)."""
        return _expr.stencil_term(self, field)

    def __repr__(self):
        if self._name is not None:
            return "Stencil(%r, shape=%s)" % (self._name, self.shape)
        return "Stencil(weights=<%s float64>)" % "x".join(map(str, self.shape))

    def __eq__(self, other):
        return (isinstance(other, Stencil)
                and self.shape == other.shape
                and np.array_equal(self._weights, other._weights))

    def __hash__(self):
        return hash((self.shape, self._weights.tobytes()))


@functools.lru_cache(maxsize=64)
def _preset(name):
    return Stencil(name).weights  # read-only: safe to share


def resolve_weights(stencil, weights, what="apply()"):
    """The read-only float64 weights of a call's `stencil` (a preset name
    or a Stencil) or `weights=` (exactly one of them)."""
    if stencil is None and weights is None:
        raise TypeError("%s needs a stencil (a preset name or a Stencil) "
                        "or weights=, got neither" % what)
    if stencil is not None and weights is not None:
        raise TypeError("%s takes a stencil or weights=, not both; for a "
                        "preset with your weights use Stencil(name, "
                        "weights=w)" % what)
    if weights is not None:
        return as_weights(weights)
    if isinstance(stencil, Stencil):
        return stencil.weights
    if isinstance(stencil, str):
        return _preset(stencil)
    raise TypeError("stencil must be a preset name (one of %s) or a "
                    "Stencil, got %s"
                    % (", ".join(_presets.PRESETS), type(stencil).__name__))


def laplacian(ndim, h=1.0):
    """The (2*ndim + 1)-point Laplacian on a grid of spacing `h`, as a
    Stencil: centre -2*ndim/h**2, axis neighbours 1/h**2.

    >>> L = convstencil.laplacian(2)
    >>> L.weights
    array([[ 0.,  1.,  0.],
           [ 1., -4.,  1.],
           [ 0.,  1.,  0.]])
    """
    if isinstance(ndim, bool) or ndim not in (1, 2, 3):
        raise ValueError("laplacian() takes ndim 1, 2 or 3, got %r"
                         % (ndim,))
    h = float(h)
    if not h > 0 or h == float("inf"):
        raise ValueError("laplacian() needs a spacing h > 0, got %r" % h)
    w = np.zeros((3,) * ndim)
    centre = (1,) * ndim
    w[centre] = -2.0 * ndim
    for axis in range(ndim):
        for side in (0, 2):
            index = list(centre)
            index[axis] = side
            w[tuple(index)] = 1.0
    return Stencil(weights=w / (h * h))
