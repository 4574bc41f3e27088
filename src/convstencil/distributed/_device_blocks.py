"""Blocks in GPU memory: strided views and copies, without CuPy.

A padded block is a `convstencil.DeviceArray`; its owned part and the
slabs that halo exchanges send and receive are strided views of it
(`StridedView`, readable through the CUDA Array Interface).  Copies
between views run on the GPU engine as zero-step applies, which read and
write any strides.
"""
import numpy as np

from .. import _core, _device, _engine


class StridedView:
    """A float64 view of part of a device array (CUDA Array Interface v3).

    `stream` is the stream the data is ordered on (1: the legacy default
    stream, where the transports queue their work), so that the engine
    waits for it before reading.
    """

    def __init__(self, base, ptr, shape, strides, stream=None):
        self.base = base  # keeps the memory alive
        self.ptr = int(ptr)
        self.shape = tuple(int(n) for n in shape)
        self.strides = tuple(int(s) for s in strides)
        self.stream = stream

    @property
    def __cuda_array_interface__(self):
        return {"version": 3, "shape": self.shape, "typestr": "<f8",
                "data": (self.ptr, False), "strides": self.strides,
                "stream": self.stream}

    def __repr__(self):
        return "StridedView(shape=%s, strides=%s)" % (self.shape,
                                                       self.strides)


def c_strides(shape):
    strides, step = [], 8
    for n in reversed(shape):
        strides.append(step)
        step *= int(n)
    return tuple(reversed(strides))


def strides_of(base):
    """Byte strides of a DeviceArray (C order) or a StridedView."""
    strides = getattr(base, "strides", None)
    return tuple(strides) if strides is not None else c_strides(base.shape)


def is_contiguous(sizes, strides):
    """Whether a view of `sizes` with byte `strides` is one C-ordered run
    of memory (axes of extent 1 may have any stride)."""
    step = 8
    for n, s in zip(reversed(sizes), reversed(strides)):
        if n > 1 and s != step:
            return False
        step *= n
    return True


def region(base, starts, sizes, stream=None):
    """The view of `base` (a float64 DeviceArray, or a StridedView of a
    grid such as an engine session's) at `starts` with extents `sizes`."""
    strides = strides_of(base)
    ptr = base.ptr + sum(s * st for s, st in zip(starts, strides))
    return StridedView(base, ptr, sizes, strides, stream)


def whole(base, stream=None):
    return region(base, (0,) * len(base.shape), base.shape, stream)


def pack(base, starts, sizes, buf):
    """buf (a contiguous DeviceArray) = base's box at `starts`, `sizes`;
    returns when done.  A grid that packs itself (an engine session's)
    does; any other goes through a zero-step engine call."""
    if hasattr(base, "pack"):
        base.pack(starts, sizes, buf)
    else:
        copy(region(base, starts, sizes), buf)


def unpack(buf, base, starts, sizes):
    """base's box at `starts`, `sizes` = buf, which a transport filled on
    the legacy default stream (waited for before reading)."""
    if hasattr(base, "unpack"):
        base.unpack(buf, starts, sizes)
    else:
        copy(whole(buf, stream=1), region(base, starts, sizes))


# streams that work queued on the legacy default stream follows anyway
# (CUDA Array Interface: None / 0 for no stream, 1 for the legacy one)
ORDERED_STREAMS = (0, 1)


def ready_view(obj):
    """The DeviceView of a device array whose producer's work is done or
    queued before the legacy default stream's next work (its CAI
    stream waited for where it is another)."""
    view = _device.device_view(obj, known=True)
    if view.stream not in ORDERED_STREAMS:
        _core.cuda_stream_synchronize(view.stream)
    return view


def copy(src, dst):
    """dst[...] = src on the GPU (any strides, same shape); returns when
    the copy is complete.  Views whose rows are contiguous go as one
    pitched cudaMemcpy3D (a padded block's owned part, a slab), at the
    copy rate; others as a zero-step engine call."""
    source = _device.device_view(src, known=True)
    target = _device.device_view(dst, "out", known=True)
    if (source.dtype == np.float64 and target.dtype == np.float64
            and tuple(source.shape) == tuple(target.shape)
            and not source.overlaps(target)):
        source = ready_view(src)
        if _core.device_copy_pitched(target.ptr, target.strides_3d(),
                                     source.ptr, source.strides_3d(),
                                     target.shape_3d()):
            return
    _engine.copy_device(source, target)


def upload(host):
    """A DeviceArray holding the NumPy array `host`."""
    host = np.ascontiguousarray(host, dtype=np.float64)
    dev = _device.DeviceArray(host.shape)
    _device.upload(dev, host)
    return dev


def to_device_array(obj):
    """A private float64 C-contiguous DeviceArray copy of a device array."""
    view = _device.device_view(obj, known=True)
    dev = _device.DeviceArray(tuple(view.shape))
    copy(obj, dev)
    return dev


def download(obj):
    """A NumPy copy of a device array (a DeviceArray or a view)."""
    if isinstance(obj, _device.DeviceArray):
        return obj.get()
    return to_device_array(obj).get()


def is_device(obj):
    return _device.is_device_array(obj)
