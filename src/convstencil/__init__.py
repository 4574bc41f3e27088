"""convstencil: stencil computations on FP64 tensor cores and fast CPUs.

    >>> import numpy as np, convstencil as cs
    >>> u = np.random.rand(512, 512)
    >>> v = cs.apply(u, "heat2d", steps=100)            # preset weights
    >>> w = cs.apply(u, weights=np.ones((3, 3)) / 9)    # custom kernel
    >>> s = cs.Stencil("heat2d", alpha=0.2)
    >>> v = cs.apply(u, s, steps=10, mode="wrap")

One step equals scipy.ndimage.correlate(u, weights, mode=..., cval=...).

PDE schemes of several fields, time levels, sources and reactions:

    >>> u, v = cs.fields("u v")
    >>> L = cs.laplacian(2)
    >>> gs = cs.Scheme({u: u + dt * (Du * L(u) - u * v**2 + F * (1 - u)),
    ...                 v: v + dt * (Dv * L(v) + u * v**2 - (F + k) * v)},
    ...                mode="wrap")
    >>> u1, v1 = cs.apply((u0, v0), gs, steps=1000)
"""
import os as _os

# OpenMP reads OMP_WAIT_POLICY once, when the engine loads it.  Unless the
# user chose a policy, its idle threads sleep instead of spinning (they
# would hold a core for milliseconds after every call, starving other
# processes); the engine's own step barriers spin a few tens of
# microseconds first (docs/USER_GUIDE.md, "Threads").
_WAIT_POLICY = _os.environ.get("OMP_WAIT_POLICY")
if _WAIT_POLICY is None and "GOMP_SPINCOUNT" not in _os.environ:
    _os.environ["OMP_WAIT_POLICY"] = "PASSIVE"

from . import _engine  # noqa: E402  (after the policy: it loads OpenMP)

_engine.set_wait_policy(_WAIT_POLICY)

from ._apply import apply, last_run_info  # noqa: E402
from ._backends import backends, cache_info, clear_cache, devices  # noqa: E402
from ._device import DeviceArray  # noqa: E402
from ._explain import explain  # noqa: E402
from ._expr import Field, Param, fields, param  # noqa: E402
from ._presets import PRESETS  # noqa: E402
from ._scheme import Scheme  # noqa: E402
from ._stencil import Stencil, laplacian  # noqa: E402

__version__ = "0.1.0"

__all__ = ["apply", "explain", "Stencil", "PRESETS", "backends",
           "last_run_info", "Scheme", "fields", "param", "Field", "Param",
           "laplacian", "devices",
           "clear_cache", "cache_info", "DeviceArray", "__version__"]
