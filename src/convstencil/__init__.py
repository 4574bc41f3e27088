"""convstencil: stencil computations on FP64 tensor cores and fast CPUs.

    >>> import numpy as np, convstencil as cs
    >>> u = np.random.rand(512, 512)
    >>> v = cs.apply(u, "heat2d", steps=100)            # preset weights
    >>> w = cs.apply(u, weights=np.ones((3, 3)) / 9)    # custom kernel
    >>> s = cs.Stencil("heat2d", alpha=0.2)
    >>> v = cs.apply(u, s, steps=10, mode="wrap")

One step equals scipy.ndimage.correlate(u, weights, mode=..., cval=...).
"""
from ._apply import apply, last_run_info
from ._backends import backends, cache_info, clear_cache
from ._device import DeviceArray
from ._explain import explain
from ._presets import PRESETS
from ._stencil import Stencil

__version__ = "0.1.0"

__all__ = ["apply", "explain", "Stencil", "PRESETS", "backends",
           "last_run_info",
           "clear_cache", "cache_info", "DeviceArray", "__version__"]
