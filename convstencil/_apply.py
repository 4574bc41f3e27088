"""apply(): validate and convert arguments, run the engine, report."""
import numbers
import operator
import threading

import numpy as np

from . import _backends, _core, _presets
from ._stencil import Stencil, as_weights

# Codes shared with csrc/stencil.h (cs_mode).
MODE_CODES = {"constant": 0, "wrap": 1, "nearest": 2, "reflect": 3,
              "mirror": 4}
MODE_ALIASES = {"periodic": "wrap"}

_last_run_info = {}


def last_run_info():
    """What the last apply() call in this process ran (a dict copy)."""
    return dict(_last_run_info)


def _resolve_weights(stencil, weights):
    if stencil is None and weights is None:
        raise TypeError("apply() needs a stencil (a preset name or a "
                        "Stencil) or weights=, got neither")
    if stencil is not None and weights is not None:
        raise TypeError("apply() takes a stencil or weights=, not both; "
                        "for a preset with your weights use "
                        "Stencil(name, weights=w)")
    if weights is not None:
        return as_weights(weights)
    if isinstance(stencil, Stencil):
        return stencil.weights
    if isinstance(stencil, str):
        return Stencil(stencil).weights
    raise TypeError("stencil must be a preset name (one of %s) or a "
                    "Stencil, got %s"
                    % (", ".join(_presets.PRESETS), type(stencil).__name__))


def _resolve_steps(steps):
    if isinstance(steps, (bool, np.bool_)) or not isinstance(
            steps, numbers.Integral):
        raise TypeError("steps must be a non-negative integer, got %r"
                        % (steps,))
    steps = operator.index(steps)
    if steps < 0:
        raise ValueError("steps must be a non-negative integer, got %d"
                         % steps)
    if steps > np.iinfo(np.int64).max:
        raise ValueError("steps is too large: %d" % steps)
    return steps


def _resolve_mode(mode):
    if not isinstance(mode, str):
        raise TypeError("mode must be a str, got %s" % type(mode).__name__)
    key = MODE_ALIASES.get(mode.lower(), mode.lower())
    if key not in MODE_CODES:
        raise ValueError("unknown mode %r; accepted: %s (and 'periodic' for "
                         "'wrap')" % (mode, ", ".join(MODE_CODES)))
    return key


def _resolve_backend(backend, ndim, weights):
    if not isinstance(backend, str):
        raise TypeError("backend must be a str, got %s"
                        % type(backend).__name__)
    key = backend.lower()
    accepted = ("auto",) + tuple(_backends.BACKEND_CODES)
    if key not in accepted:
        raise ValueError("unknown backend %r; accepted: %s"
                         % (backend, ", ".join(accepted)))
    if key == "auto":
        return _backends.best_backend()
    if key in _backends.CUDA_BACKENDS:
        status = _backends.cuda_status()
        if status != "available":
            raise RuntimeError("backend %r is not usable here: %s"
                               % (key, status))
    if key == "cpu-tc":
        limit = 15 if ndim == 1 else 7
        if max(weights.shape) > limit:
            raise ValueError("backend 'cpu-tc' runs %dD kernels up to %d "
                             "per axis, got shape %s; use backend='cpu'"
                             % (ndim, limit, weights.shape))
    return key


def _as_grid(grid, out):
    if isinstance(grid, (str, bytes)):
        raise TypeError("grid must be a real numeric array, got %s"
                        % type(grid).__name__)
    try:
        a = np.asarray(grid)
    except Exception as exc:
        raise TypeError("grid must be a real numeric array: %s" % exc)
    if a.dtype.kind not in "biuf":
        raise TypeError("grid must hold real numbers (bool, int or float), "
                        "got dtype %s" % a.dtype)
    if a.ndim < 1 or a.ndim > 3:
        raise ValueError("grid must be 1D, 2D or 3D, got ndim=%d" % a.ndim)
    if a.size == 0:
        raise ValueError("grid must not be empty, got shape %s" % (a.shape,))
    # The engines only read their input, so a float64 C-contiguous grid is
    # passed as it is; anything else, or a grid that shares memory with
    # `out` (the engine reads it while writing `out`), becomes a private
    # copy.  Copying 128 MB costs about as much as ten heat2d steps.
    if (a.dtype == np.float64 and a.flags.c_contiguous and a.flags.aligned
            and (out is None or not np.may_share_memory(a, out))):
        return a
    return np.array(a, dtype=np.float64, order="C", copy=True)


def _interrupt_backup(grid, src, out):
    """What `out` holds now, where it shares memory with the grid (an
    interrupted run leaves partial results in `out`, and must not in the
    grid); None elsewhere.  `src` is the engine's private copy of the
    grid, which is that content when `out` is the grid itself."""
    a = np.asarray(grid)
    if src is grid or not np.may_share_memory(a, out):
        return None
    same_view = (a.dtype == out.dtype and a.shape == out.shape
                 and a.strides == out.strides
                 and a.__array_interface__["data"][0]
                 == out.__array_interface__["data"][0])
    return src if same_view else out.copy()


def _check_out(out, shape):
    if not isinstance(out, np.ndarray):
        raise TypeError("out must be a numpy.ndarray, got %s"
                        % type(out).__name__)
    if out.dtype != np.float64:
        raise TypeError("out must have dtype float64, got %s" % out.dtype)
    if out.shape != shape:
        raise ValueError("out must have the grid's shape %s, got %s"
                         % (shape, out.shape))
    if not out.flags.c_contiguous or not out.flags.writeable:
        raise ValueError("out must be C-contiguous and writeable")


def apply(grid, stencil=None, *, weights=None, steps=1, mode="constant",
          cval=0.0, backend="auto", out=None):
    """Apply a stencil to `grid` `steps` times; return the new grid.

    One step is ``scipy.ndimage.correlate(grid, weights, mode=mode,
    cval=cval)``.  `stencil` is a preset name ("heat2d", "box2d49p", ...)
    or a Stencil; or give `weights=` (odd side per axis, same ndim as the
    grid).  `mode` is "constant" (cells outside read `cval` at every step),
    "wrap" (alias "periodic"), "nearest", "reflect" or "mirror".
    `backend` is "auto" (the GPU when usable, else the CPU), "cpu",
    "cpu-tc" (the tensor-core algorithm emulated on the CPU), "cuda" (the
    GPU, tensor cores where they pay), "cuda-tc" or "cuda-core" (the GPU
    on one path: tensor cores, kernels up to 7 per axis (1D: 15
    points) only; CUDA cores).  The result is a new float64 C-contiguous
    array, or `out` (float64, C-contiguous, the grid's shape; it may be
    the grid itself).  The input is never modified unless it is `out`.

    A long run stops at Ctrl-C (KeyboardInterrupt, raised within about a
    tenth of a second on the CPU): the grid is then left as it was, even
    when it is `out`; any other `out` may hold partial results.
    """
    w = _resolve_weights(stencil, weights)
    steps = _resolve_steps(steps)
    mode = _resolve_mode(mode)
    try:
        cval = float(cval)
    except (TypeError, ValueError):
        raise TypeError("cval must be a real number, got %r" % (cval,))
    if out is not None:
        _check_out(out, np.shape(grid))
    src = _as_grid(grid, out)
    if src.ndim != w.ndim:
        raise ValueError("a %dD stencil (weights shape %s) needs a %dD grid, "
                         "got a %dD grid of shape %s"
                         % (w.ndim, w.shape, w.ndim, src.ndim, src.shape))
    name = _resolve_backend(backend, src.ndim, w)
    if out is None:
        # a separate result: computing in place would make the CPU engine
        # copy the grid first (its passes must not write what they read)
        out = np.empty(src.shape, dtype=np.float64)
    engine, path = _backends.BACKEND_CODES[name]
    before = _interrupt_backup(grid, src, out)
    try:
        info = _core.run(src, w, out, steps, MODE_CODES[mode], cval, engine,
                         path, 0, threading.current_thread()
                         is threading.main_thread())
    except KeyboardInterrupt:
        if before is not None:
            np.copyto(out, before)  # an interrupted run keeps the grid
        raise
    _last_run_info.clear()
    _last_run_info.update(info)
    _last_run_info["steps"] = steps
    _last_run_info["mode"] = mode
    return out
