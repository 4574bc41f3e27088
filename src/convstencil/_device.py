"""Arrays in GPU memory: reading the exchange protocols, making results.

A device array comes in through one of two protocols, parsed here in
plain Python (the package never imports CuPy or PyTorch):

- the CUDA Array Interface (``__cuda_array_interface__``, versions 2 and
  3: CuPy, Numba, ...), a dict with the pointer, shape, typestr, strides
  and, in version 3, the producer's stream;
- DLPack (``__dlpack__`` / ``__dlpack_device__`` on a CUDA device:
  PyTorch, JAX, ...), a capsule read by ``_core.dlpack_info``.

The interface of version 3 is preferred where an object offers both (it
names the producer's stream); otherwise DLPack, whose exchange has the
producer order its work before the consumer's stream.  A result is made
by the input's own library where it is loaded (CuPy, PyTorch, or any
library with ``__array_namespace__``), found through the input's type,
never imported; for any other input it is a `DeviceArray`.
"""
import numbers
import sys
import weakref

import numpy as np

from . import _core

# DLPack device types (dlpack.h)
_DL_CPU, _DL_CUDA, _DL_CUDA_HOST, _DL_CUDA_MANAGED = 1, 2, 3, 13
# DLPack type codes
_DL_INT, _DL_UINT, _DL_FLOAT, _DL_BFLOAT, _DL_BOOL = 0, 1, 2, 4, 6

# Streams as the CUDA Array Interface and DLPack name them.
LEGACY_DEFAULT_STREAM = 1

_DTYPE_CODES = {
    np.dtype(np.float64): _core.DTYPE_FLOAT64,
    np.dtype(np.float32): _core.DTYPE_FLOAT32,
    np.dtype(np.float16): _core.DTYPE_FLOAT16,
    np.dtype(np.int8): _core.DTYPE_INT8,
    np.dtype(np.int16): _core.DTYPE_INT16,
    np.dtype(np.int32): _core.DTYPE_INT32,
    np.dtype(np.int64): _core.DTYPE_INT64,
    np.dtype(np.uint8): _core.DTYPE_UINT8,
    np.dtype(np.uint16): _core.DTYPE_UINT16,
    np.dtype(np.uint32): _core.DTYPE_UINT32,
    np.dtype(np.uint64): _core.DTYPE_UINT64,
    np.dtype(np.bool_): _core.DTYPE_BOOL,
}
_ACCEPTED = "bool, int8-64, uint8-64, float16, bfloat16, float32, float64"
_FLOAT64 = np.dtype(np.float64)


_ZEROS = {1: (0, 0), 2: (0,), 3: ()}
_ONES = {1: (1, 1), 2: (1,), 3: ()}


class DeviceView:
    """What the engine needs of a device array (and what keeps it alive).

    `strides` are in bytes (C order when the producer gave none);
    `stream` is the producer's stream to wait for (0: none); `dtype` is a
    NumPy dtype, or the string "bfloat16"; `keep` holds the object (and
    a DLPack capsule) for as long as the view is used.
    """

    __slots__ = ("ptr", "shape", "strides", "dtype", "code", "readonly",
                 "stream", "device", "source", "keep")

    def __init__(self, ptr, shape, strides, dtype, code, readonly, stream,
                 device, source, keep):
        self.ptr = ptr
        self.shape = shape
        self.strides = strides
        self.dtype = dtype
        self.code = code
        self.readonly = readonly
        self.stream = stream
        self.device = device
        self.source = source
        self.keep = keep

    @property
    def itemsize(self):
        return 2 if self.dtype == "bfloat16" else self.dtype.itemsize

    def span(self):
        """[lo, hi) of the bytes the array may touch."""
        lo = hi = self.ptr
        for n, s in zip(self.shape, self.strides):
            if n > 1:
                if s < 0:
                    lo += (n - 1) * s
                else:
                    hi += (n - 1) * s
        return lo, hi + self.itemsize

    def overlaps(self, other):
        a0, a1 = self.span()
        b0, b1 = other.span()
        return a0 < b1 and b0 < a1

    def strides_3d(self):
        """Byte strides of the 3D view with leading unit axes."""
        return _ZEROS[len(self.strides)] + tuple(self.strides)

    def shape_3d(self):
        return _ONES[len(self.shape)] + tuple(self.shape)


def _has(obj, name):
    """hasattr that counts an attribute whose getter raises as present."""
    try:
        return hasattr(obj, name)
    except Exception:
        return True


def is_device_array(obj):
    """Whether `obj` offers a CUDA device array (protocols only)."""
    if isinstance(obj, np.ndarray):
        return False
    # on the type first: a property there is not evaluated
    if hasattr(type(obj), "__cuda_array_interface__") or _has(
            obj, "__cuda_array_interface__"):
        return True
    dev = getattr(obj, "__dlpack_device__", None)
    if dev is None or not hasattr(obj, "__dlpack__"):
        return False
    try:
        kind = dev()[0]
    except Exception:
        return False
    return kind != _DL_CPU


def c_strides(shape, itemsize=8):
    """Byte strides of a C-ordered array of `shape`."""
    return _c_strides(shape, itemsize)


def stream_handle(stream):
    """The CUDA stream `stream` names (a CuPy or PyTorch stream object, or
    a handle), as an integer; 0 where none is given.  A library's handle 0
    is the legacy default stream, which the stream protocols call 1."""
    if stream is None:
        return 0
    # checked in the order of the common cases, which a scheme's loop of
    # small calls pays for at every call: a handle, a library's stream
    if type(stream) is not int:
        for attr in ("ptr", "cuda_stream"):  # CuPy, PyTorch stream objects
            handle = getattr(stream, attr, None)
            if handle is not None:
                stream = handle
                break
        if type(stream) is not int:
            if isinstance(stream, bool) or not isinstance(
                    stream, numbers.Integral):
                raise TypeError("stream must be a CUDA stream: an integer "
                                "handle or an object with .ptr (CuPy) or "
                                ".cuda_stream (PyTorch), got %r" % (stream,))
            stream = int(stream)
    if stream < 0:
        raise ValueError("stream handle must be >= 0, got %d" % stream)
    return stream or LEGACY_DEFAULT_STREAM


def _c_strides(shape, itemsize):
    if len(shape) == 2:  # the common case
        return (shape[1] * itemsize, itemsize)
    strides, step = [], itemsize
    for n in reversed(shape):
        strides.append(step)
        step *= max(int(n), 1)
    return tuple(reversed(strides))


def _check_strides(strides, ndim, itemsize, what):
    if not isinstance(strides, tuple) or len(strides) != ndim:
        raise ValueError("%s: strides must be None or a tuple of %d "
                         "integers, got %r" % (what, ndim, strides))
    for s in strides:
        if not isinstance(s, int) or isinstance(s, bool):
            raise ValueError("%s: strides must be integers, got %r"
                             % (what, strides))
        if s % itemsize:
            raise ValueError("%s: strides %r are not multiples of the "
                             "element size %d" % (what, strides, itemsize))
    return strides


def _check_shape(shape, what):
    ok = type(shape) is tuple
    if ok:
        for n in shape:
            if type(n) is not int or n < 0:
                ok = False
                break
    if not ok:
        raise ValueError("%s: shape must be a tuple of non-negative "
                         "integers, got %r" % (what, shape))
    return shape


_TYPESTRS = {}  # typestr -> (dtype, code): parsed once each


def _typestr(typestr, what):
    found = _TYPESTRS.get(typestr) if isinstance(typestr, str) else None
    if found is not None:
        return found
    try:
        dtype = np.dtype(typestr) if isinstance(typestr, str) else None
    except TypeError:
        dtype = None
    if dtype is None:
        raise ValueError("%s: typestr %r is not an array type string such "
                         "as '<f8'" % (what, typestr))
    if dtype.byteorder == ">" or (dtype.byteorder == "="
                                  and sys.byteorder == "big"):
        raise ValueError("%s: big-endian data (typestr %r) is not "
                         "supported" % (what, typestr))
    dtype = dtype.newbyteorder("=")
    if dtype not in _DTYPE_CODES:
        raise TypeError("%s: dtype %s is not a real type; accepted: %s"
                        % (what, dtype, _ACCEPTED))
    _TYPESTRS[typestr] = found = (dtype, _DTYPE_CODES[dtype])
    return found


# (shape, typestr, strides) as a producer gave them -> (shape, strides,
# dtype, code) checked: a scheme of many small calls passes the same few
# layouts again and again.  Bounded: cleared when it grows past
# _LAYOUTS_KEPT (a run whose shapes keep changing).
_LAYOUTS = {}
_LAYOUTS_KEPT = 256


def _exact_ints(values):
    if type(values) is not tuple:
        return False
    for v in values:
        if type(v) is not int:
            return False
    return True


def _cai_layout(shape, typestr, strides, what):
    """(shape, strides in bytes, dtype, code) of a CAI's array, checked."""
    try:
        key = (shape, typestr, strides)
        found = _LAYOUTS.get(key)
    except TypeError:  # an unhashable (so invalid) entry: checked below
        key = found = None
    # equal is not enough: 1.0, True and numpy integers equal the ints a
    # valid layout holds, and must still be refused
    if found is not None and _exact_ints(shape) and (
            strides is None or _exact_ints(strides)):
        return found
    shape = _check_shape(shape, what)
    dtype, code = _typestr(typestr, what)
    if strides is None:
        strides = _c_strides(shape, dtype.itemsize)
    else:
        strides = _check_strides(strides, len(shape), dtype.itemsize, what)
    found = (shape, strides, dtype, code)
    if key is not None:
        if len(_LAYOUTS) >= _LAYOUTS_KEPT:
            _LAYOUTS.clear()
        _LAYOUTS[key] = found
    return found


def _from_cai(obj, cai, what):
    if type(cai) is not dict and not isinstance(cai, dict):
        raise TypeError("%s: __cuda_array_interface__ must be a dict, got %s"
                        % (what, type(cai).__name__))
    version = cai.get("version")
    if version != 3 and version != 2:
        raise ValueError("%s: CUDA Array Interface version %r is not "
                         "supported (versions 2 and 3 are)" % (what, version))
    try:
        shape, typestr, data = cai["shape"], cai["typestr"], cai["data"]
    except KeyError as missing:
        raise ValueError("%s: __cuda_array_interface__ has no %s"
                         % (what, missing))
    shape, strides, dtype, code = _cai_layout(shape, typestr,
                                              cai.get("strides"), what)
    if (type(data) is not tuple or len(data) != 2
            or not isinstance(data[0], int) or data[0] < 0
            or not isinstance(data[1], bool)):
        raise ValueError("%s: data must be a tuple (pointer: int, read_only: "
                         "bool), got %r" % (what, data))
    if cai.get("mask") is not None:
        raise ValueError("%s: masked device arrays are not supported"
                         % what)
    stream = cai.get("stream") if version == 3 else None
    if stream is not None and (type(stream) is not int or stream <= 0):
        raise ValueError("%s: stream must be None or a positive integer "
                         "(1: the legacy default stream), got %r"
                         % (what, stream))
    return DeviceView(data[0], shape, strides, dtype, code, data[1],
                      stream or 0, None, obj, obj)


def _dl_dtype(code, bits, lanes, what):
    if lanes != 1:
        raise TypeError("%s: vector element types (lanes=%d) are not "
                        "supported" % (what, lanes))
    if code == _DL_BFLOAT and bits == 16:
        return "bfloat16", _core.DTYPE_BFLOAT16
    kind = {_DL_INT: "i", _DL_UINT: "u", _DL_FLOAT: "f",
            _DL_BOOL: "b"}.get(code)
    try:
        dtype = np.dtype("%s%d" % (kind, bits // 8)) if kind else None
    except TypeError:
        dtype = None
    if dtype is None or dtype not in _DTYPE_CODES:
        raise TypeError("%s: DLPack type (code %d, %d bits) is not a real "
                        "type; accepted: %s" % (what, code, bits, _ACCEPTED))
    return dtype, _DTYPE_CODES[dtype]


def _from_dlpack(obj, what, consumer_stream):
    try:
        capsule = obj.__dlpack__(stream=consumer_stream)
    except TypeError:  # a producer of an older protocol: no stream
        capsule = obj.__dlpack__()
    info = _core.dlpack_info(capsule)
    if info["device_type"] not in (_DL_CUDA, _DL_CUDA_MANAGED):
        raise TypeError("%s: DLPack device type %d is not a CUDA device"
                        % (what, info["device_type"]))
    dtype, code = _dl_dtype(info["code"], info["bits"], info["lanes"], what)
    shape = tuple(info["shape"])
    itemsize = 2 if dtype == "bfloat16" else dtype.itemsize
    if info["strides"] is None:
        strides = _c_strides(shape, itemsize)
    else:
        strides = tuple(s * itemsize for s in info["strides"])
    # DLPack has no read-only flag: only `out` is written, and it is the
    # caller's to give
    return DeviceView(info["data"], shape, strides, dtype, code, False,
                      consumer_stream or 0, info["device_id"], obj,
                      (obj, capsule))


def device_view(obj, what="grid", consumer_stream=LEGACY_DEFAULT_STREAM,
                known=False):
    """The DeviceView of a device array, or None for anything else.

    `consumer_stream` is the stream named in a DLPack exchange (the
    producer orders its work before it; the engine then waits for it);
    `known`: the caller has seen that `obj` is a device array.  Raises
    TypeError/ValueError for a malformed or unsupported array.
    """
    if not known and not is_device_array(obj):
        return None
    cai = None
    try:
        cai = obj.__cuda_array_interface__
    except AttributeError:
        pass
    except Exception as exc:  # e.g. a tensor that requires grad
        if not hasattr(obj, "__dlpack__"):
            raise TypeError("%s: __cuda_array_interface__ failed: %s"
                            % (what, exc))
    if type(cai) is dict and cai.get("version") == 3:
        return _from_cai(obj, cai, what)  # preferred to DLPack: no lookups
    has_dlpack = hasattr(obj, "__dlpack__") and hasattr(
        obj, "__dlpack_device__")
    if cai is not None and (not has_dlpack
                            or (isinstance(cai, dict)
                                and cai.get("version") == 3)):
        return _from_cai(obj, cai, what)
    if has_dlpack:
        kind, _ = obj.__dlpack_device__()
        if kind not in (_DL_CUDA, _DL_CUDA_MANAGED):
            raise TypeError("%s: arrays on DLPack device type %d are not "
                            "supported (CUDA device memory is)"
                            % (what, kind))
        return _from_dlpack(obj, what, consumer_stream)
    return _from_cai(obj, cai, what)


_MAKERS = {}  # array type -> make(source, shape), for the known kinds
# array type -> its device pointer, for kinds whose new arrays are read
# without a protocol call (fresh_view)
_POINTERS = {}


def _cupy_maker(cupy):
    empty, f64 = cupy.empty, cupy.float64
    return lambda source, shape: empty(shape, dtype=f64)


def _torch_maker(torch):
    empty, f64 = torch.empty, torch.float64
    return lambda source, shape: empty(shape, dtype=f64,
                                       device=source.device)


def library_of(obj):
    """The loaded module of `obj`'s array library, or None."""
    root = type(obj).__module__.split(".")[0]
    return sys.modules.get(root)


def _cupy_pointer(array):
    return array.data.ptr


def fresh_view(result, source, consumer):
    """The view of `result`, a new array that new_like() made for the
    device array `source` (its DeviceView).  A CuPy result is described
    without asking it for its CUDA Array Interface (a few microseconds
    of a small call): float64, C order, source's shape, and its memory
    ordered on the stream source's interface named, CuPy's current
    stream, whose pool handed it out, as its own interface would say."""
    pointer = _POINTERS.get(type(result))
    if pointer is None:
        return device_view(result, "out", consumer_stream=consumer,
                           known=True)
    shape = source.shape
    return DeviceView(pointer(result), shape, _c_strides(shape, 8),
                      _FLOAT64, _core.DTYPE_FLOAT64, False, source.stream,
                      None, result, result)


def fresh_pointer(result):
    """The device pointer of `result`, a new array new_like() made, where
    its kind is known (CuPy, DeviceArray), else None."""
    pointer = _POINTERS.get(type(result))
    if pointer is not None:
        return pointer(result)
    if type(result) is DeviceArray:
        return result.ptr
    return None


def new_like(source, shape):
    """A new float64 C-contiguous device array of `source`'s kind."""
    make = _MAKERS.get(type(source))
    if make is not None:
        return make(source, shape)
    lib = library_of(source)
    name = getattr(lib, "__name__", "")
    if name == "torch":
        make = _torch_maker(lib)
    elif name == "cupy":
        make = _cupy_maker(lib)
        _POINTERS[type(source)] = _cupy_pointer
    if name in ("torch", "cupy"):
        _MAKERS[type(source)] = make
        return make(source, shape)
    namespace = getattr(source, "__array_namespace__", None)
    if namespace is not None:
        xp = namespace()
        return xp.empty(shape, dtype=xp.float64, device=source.device)
    return DeviceArray(shape)


def upload(dev, host):
    """dev (a DeviceArray) = host (a float64 C-contiguous NumPy array of
    its size); returns when done."""
    _core.to_device(dev.ptr, host)


def download(host, dev):
    """host (a float64 C-contiguous NumPy array) = dev (a DeviceArray of
    its size); returns when done."""
    _core.to_host(host, dev.ptr)


class DeviceArray:
    """A float64 C-contiguous array in GPU memory, made by convstencil.

    The result of `apply` for a device array whose library convstencil
    does not know (CuPy and PyTorch inputs get arrays of their own
    kind).  Any library reads it without a copy, through the CUDA Array
    Interface or DLPack::

        >>> v = convstencil.apply(numba_array, "heat2d")
        >>> c = cupy.asarray(v)                # or torch.from_dlpack(v)
        >>> host = v.get()                     # a NumPy copy

    The memory is freed when the last reference to it goes.
    """

    def __init__(self, shape):
        shape = tuple(int(n) for n in shape)
        self.shape = shape
        self.dtype = np.dtype(np.float64)
        self.nbytes = int(np.prod(shape, dtype=np.int64)) * 8
        self.ptr, self.device = _core.device_alloc(self.nbytes)
        self._free = weakref.finalize(self, _core.device_free, self.ptr)

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return self.nbytes // 8

    @property
    def __cuda_array_interface__(self):
        return {"version": 3, "shape": self.shape, "typestr": "<f8",
                "data": (self.ptr, False), "strides": None, "stream": None}

    def __dlpack_device__(self):
        return (_DL_CUDA, self.device)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None,
                   copy=None):
        # the data is complete when apply() returns: no stream to order
        return _core.dlpack_export(self.ptr, self.device, self.shape, self)

    def get(self):
        """A NumPy copy of the array."""
        host = np.empty(self.shape, dtype=np.float64)
        download(host, self)
        return host

    def __repr__(self):
        return "DeviceArray(shape=%s, dtype=float64, device=%d)" % (
            self.shape, self.device)
