"""Device arrays for the tests that need no CuPy or PyTorch.

``StridedCAI`` is a pure-Python producer of the CUDA Array Interface
(version 3) over convstencil's own device memory: any real dtype, any
shape, byte strides of either sign and an offset into the memory, the
interface and nothing else (as Numba offers it), so the engine sees the
producer it knows least about.  ``upload(host)`` puts a NumPy array on
the device in the layout it has (its strides, its place in the memory it
views); ``download(obj)`` reads any device array back through its
interface, in its own layout.  Both work on a real GPU and on the CPU
emulation of CUDA (setup.py's CONVSTENCIL_CUDA=emulate).
"""
import ctypes

import numpy as np

import convstencil as cs
from convstencil import _core


class StridedCAI:
    """A view of device memory through the CUDA Array Interface only.

    `owner` keeps the memory alive (a convstencil.DeviceArray); `ptr` is
    the address of element (0, ..., 0); `strides` are in bytes (None: C
    order); `stream` is the producer's stream (None: nothing to wait for).
    """

    def __init__(self, owner, ptr, shape, strides, dtype, stream=None,
                 readonly=False):
        self.owner = owner
        self.ptr = int(ptr)
        self.shape = tuple(int(n) for n in shape)
        self.strides = None if strides is None else tuple(
            int(s) for s in strides)
        self.dtype = np.dtype(dtype)
        self.stream = stream
        self.readonly = readonly

    @property
    def __cuda_array_interface__(self):
        return {"version": 3, "shape": self.shape,
                "typestr": self.dtype.str, "data": (self.ptr, self.readonly),
                "strides": self.strides, "stream": self.stream}

    def view(self, **changes):
        """The same memory described again with some fields changed
        (shape, strides, dtype, stream, readonly, ptr)."""
        fields = dict(ptr=self.ptr, shape=self.shape, strides=self.strides,
                      dtype=self.dtype, stream=self.stream,
                      readonly=self.readonly)
        fields.update(changes)
        return StridedCAI(self.owner, **fields)

    def __repr__(self):
        return "StridedCAI(shape=%s, dtype=%s, strides=%s)" % (
            self.shape, self.dtype, self.strides)


def _span(ptr, shape, strides, itemsize):
    """[lo, hi) of the bytes a view may touch."""
    lo = hi = ptr
    for n, s in zip(shape, strides):
        if n > 1:
            if s < 0:
                lo += (n - 1) * s
            else:
                hi += (n - 1) * s
    return lo, hi + itemsize


def _c_strides(shape, itemsize):
    strides, step = [], itemsize
    for n in reversed(shape):
        strides.append(step)
        step *= max(int(n), 1)
    return tuple(reversed(strides))


def device_bytes(nbytes):
    """Fresh device memory of at least `nbytes` bytes (a DeviceArray)."""
    return cs.DeviceArray((max(1, -(-int(nbytes) // 8)),))


def upload(host, stream=None, readonly=False):
    """A StridedCAI holding `host`'s values in `host`'s layout: the bytes
    its view spans go up, and the device view keeps its strides (a
    transposed, flipped or sliced NumPy view gives that device view)."""
    host = np.asarray(host)
    ptr = host.__array_interface__["data"][0]
    lo, hi = _span(ptr, host.shape, host.strides, host.itemsize)
    raw = np.ctypeslib.as_array((ctypes.c_uint8 * (hi - lo)).from_address(lo))
    memory = device_bytes(hi - lo)
    _core.to_device(memory.ptr, np.array(raw, copy=True))
    return StridedCAI(memory, memory.ptr + (ptr - lo), host.shape,
                      host.strides, host.dtype, stream, readonly)


def download(obj):
    """A NumPy copy of the device array `obj` (anything with the CUDA
    Array Interface), its dtype and values."""
    if isinstance(obj, cs.DeviceArray):
        return obj.get()
    cai = obj.__cuda_array_interface__
    dtype = np.dtype(cai["typestr"])
    shape = tuple(cai["shape"])
    strides = cai.get("strides") or _c_strides(shape, dtype.itemsize)
    ptr = cai["data"][0]
    lo, hi = _span(ptr, shape, strides, dtype.itemsize)
    raw = np.empty(hi - lo, dtype=np.uint8)
    _core.to_host(raw, lo)
    view = np.ndarray(shape, dtype=dtype, buffer=raw, offset=ptr - lo,
                      strides=strides)
    return np.array(view, copy=True)
