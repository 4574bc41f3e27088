"""Host grids: what apply(), schemes and convstencil.distributed accept
as a NumPy grid, and the private float64 copy the engines read."""
import numpy as np

from . import _memory


def as_grid(grid, out):
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
    copy = not (a.dtype == np.float64 and a.flags.c_contiguous
                and a.flags.aligned
                and (out is None or not np.may_share_memory(a, out)))
    # a copy and a result the size of the grid: checked before either is
    # made (an allocation past what exists may only fail much later, by
    # the kernel's out-of-memory killer)
    needed = a.size * 8 * (int(copy) + int(out is None))
    if needed:
        _memory.ensure_host_fits(
            needed, "a grid of shape %s (%d points; float64%s)"
            % (a.shape, a.size,
               ", copied and a result" if copy and out is None
               else ", copied" if copy else ", a result"))
    # The engines only read their input, so a float64 C-contiguous grid is
    # passed as it is; anything else, or a grid that shares memory with
    # `out` (the engine reads it while writing `out`), becomes a private
    # copy.  Copying 128 MB costs about as much as ten heat2d steps.
    if not copy:
        return a
    return np.array(a, dtype=np.float64, order="C", copy=True)


def check_out(out, shape):
    if not isinstance(out, np.ndarray):
        raise TypeError("out must be a numpy.ndarray for a host grid, got %s"
                        % type(out).__name__)
    if out.dtype != np.float64:
        raise TypeError("out must have dtype float64, got %s" % out.dtype)
    if out.shape != shape:
        raise ValueError("out must have the grid's shape %s, got %s"
                         % (shape, out.shape))
    if not out.flags.c_contiguous or not out.flags.writeable:
        raise ValueError("out must be C-contiguous and writeable")


def read_only(a):
    view = a.view()
    view.flags.writeable = False
    return view
