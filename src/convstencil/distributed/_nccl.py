"""NCCL through ctypes: the library CuPy and PyTorch ship (the
nvidia-nccl-cu* wheel's nvidia/nccl/lib) or the system's.

Only what a halo exchange needs: a communicator over the ranks of an MPI
communicator (its unique id broadcast over MPI), grouped send/receive of
float64 buffers on the legacy default stream, and destruction.
"""
import ctypes
import os
import sys

_NCCL_FLOAT64 = 8  # ncclDataType_t
_LIBNAME = "libnccl.so.2"


_ID_BYTES = 128  # NCCL_UNIQUE_ID_BYTES


class _UniqueId(ctypes.Structure):
    # bytes, not c_char: a c_char array field reads and writes as a
    # NUL-terminated string, and the id holds zero bytes (its socket
    # address), which would cut it short
    _fields_ = [("internal", ctypes.c_ubyte * _ID_BYTES)]


def candidates():
    """Paths to try, in order: $CONVSTENCIL_NCCL_LIBRARY, the wheels'
    nvidia/nccl/lib on sys.path, then the loader's search (system)."""
    found = []
    env = os.environ.get("CONVSTENCIL_NCCL_LIBRARY")
    if env:
        found.append(env)
    for entry in sys.path:
        path = os.path.join(entry or ".", "nvidia", "nccl", "lib", _LIBNAME)
        if os.path.exists(path):
            found.append(path)
    found.append(_LIBNAME)
    return found


_lib = None


def load():
    """The NCCL library (loaded once); OSError naming what was tried."""
    global _lib
    if _lib is not None:
        return _lib
    errors = []
    for path in candidates():
        try:
            lib = ctypes.CDLL(path)
        except OSError as exc:
            errors.append("%s: %s" % (path, exc))
            continue
        _declare(lib)
        _lib = lib
        return lib
    raise OSError("NCCL not found (pip install nvidia-nccl-cu12, or set "
                  "CONVSTENCIL_NCCL_LIBRARY); tried %s" % "; ".join(errors))


def _declare(lib):
    vp, i, sz = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
    lib.ncclGetUniqueId.argtypes = [ctypes.POINTER(_UniqueId)]
    lib.ncclCommInitRank.argtypes = [ctypes.POINTER(vp), i, _UniqueId, i]
    lib.ncclSend.argtypes = [vp, sz, i, i, vp, vp]
    lib.ncclRecv.argtypes = [vp, sz, i, i, vp, vp]
    lib.ncclCommDestroy.argtypes = [vp]
    lib.ncclGetErrorString.argtypes = [i]
    lib.ncclGetErrorString.restype = ctypes.c_char_p
    for name in ("ncclGetUniqueId", "ncclCommInitRank", "ncclSend",
                 "ncclRecv", "ncclCommDestroy", "ncclGroupStart",
                 "ncclGroupEnd"):
        getattr(lib, name).restype = i


def _check(lib, result, what):
    if result != 0:
        raise RuntimeError("NCCL %s failed: %s (ncclResult %d)"
                           % (what, lib.ncclGetErrorString(result).decode(
                               errors="replace"), result))


def unique_id_bytes():
    """A new NCCL unique id (on the rank that bootstraps)."""
    lib = load()
    uid = _UniqueId()
    _check(lib, lib.ncclGetUniqueId(ctypes.byref(uid)), "ncclGetUniqueId")
    return id_bytes(uid)


def id_bytes(uid):
    """The _UniqueId's 128 bytes, zeros included."""
    return ctypes.string_at(ctypes.addressof(uid), _ID_BYTES)


def id_from_bytes(data):
    """A _UniqueId holding `data` (128 bytes) exactly."""
    if len(data) != _ID_BYTES:
        raise ValueError("an NCCL unique id has %d bytes, not %d"
                         % (_ID_BYTES, len(data)))
    ident = _UniqueId()
    ctypes.memmove(ctypes.addressof(ident), data, _ID_BYTES)
    return ident


class Communicator:
    """An NCCL communicator of `size` ranks; `uid` from unique_id_bytes()
    on one rank, sent to all (collective: every rank must construct)."""

    def __init__(self, uid, size, rank):
        self._lib = load()
        self._comm = ctypes.c_void_p()
        ident = id_from_bytes(uid)
        _check(self._lib, self._lib.ncclCommInitRank(
            ctypes.byref(self._comm), size, ident, rank), "ncclCommInitRank")

    def exchange(self, sends, recvs, stream=0):
        """Grouped sends [(ptr, count, peer)] and receives, queued on
        `stream` (0: the legacy default stream)."""
        lib = self._lib
        _check(lib, lib.ncclGroupStart(), "ncclGroupStart")
        try:
            for ptr, count, peer in recvs:
                _check(lib, lib.ncclRecv(ptr, count, _NCCL_FLOAT64, peer,
                                         self._comm, stream), "ncclRecv")
            for ptr, count, peer in sends:
                _check(lib, lib.ncclSend(ptr, count, _NCCL_FLOAT64, peer,
                                         self._comm, stream), "ncclSend")
        finally:
            _check(lib, lib.ncclGroupEnd(), "ncclGroupEnd")

    def close(self):
        if self._comm:
            self._lib.ncclCommDestroy(self._comm)
            self._comm = ctypes.c_void_p()
