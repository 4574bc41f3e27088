"""The one seam between Python and the engine (convstencil._core).

Every call into _core that runs, plans or opens something goes through
here, with keyword arguments, so that a change of the engine's signature
is made in one place and caught by every caller's tests; the code tables
(modes, backends, paths) and the argument checks that apply(), explain(),
schemes and convstencil.distributed share live here too.  Nothing above
may call _core's run functions directly or take another module's private
names (docs/ARCHITECTURE.md, "Layers").

This module imports only _core and NumPy: it is the bottom layer.
"""
import numbers
import operator
import threading

import numpy as np

from . import _core

# Mode name -> cs_mode code (csrc/stencil.h).
MODE_CODES = {"constant": _core.MODE_CONSTANT, "wrap": _core.MODE_WRAP,
              "nearest": _core.MODE_NEAREST, "reflect": _core.MODE_REFLECT,
              "mirror": _core.MODE_MIRROR}
MODE_ALIASES = {"periodic": "wrap"}

# Path name -> cs_cuda_path code (csrc/stencil.h).
PATH_CODES = {"auto": _core.PATH_AUTO, "tensor-core": _core.PATH_TENSOR_CORE,
              "cuda-core": _core.PATH_CUDA_CORE}

# Backend name -> (engine code, GPU path code) (csrc/module.c).  "cuda"
# runs the path the performance model predicts fastest (_backends.gpu_path);
# "cuda-tc" and "cuda-core" force one.
BACKEND_CODES = {
    "cpu": (_core.BACKEND_CPU, _core.PATH_AUTO),
    "cpu-tc": (_core.BACKEND_CPU_TC, _core.PATH_AUTO),
    "cuda": (_core.BACKEND_CUDA, _core.PATH_AUTO),
    "cuda-tc": (_core.BACKEND_CUDA, _core.PATH_TENSOR_CORE),
    "cuda-core": (_core.BACKEND_CUDA, _core.PATH_CUDA_CORE)}
CUDA_BACKENDS = ("cuda", "cuda-tc", "cuda-core")
BACKEND_NAMES = ("auto",) + tuple(BACKEND_CODES)

_MAX_STEPS = int(np.iinfo(np.int64).max)
_MAIN_THREAD = threading.main_thread().ident


# ---------------------------------------------------------------------------
# arguments, checked once for every caller

def resolve_steps(steps):
    """`steps` as a non-negative int, or TypeError/ValueError."""
    if type(steps) is int and 0 <= steps <= _MAX_STEPS:
        return steps  # the common case, checked fast
    if isinstance(steps, (bool, np.bool_)) or not isinstance(
            steps, numbers.Integral):
        raise TypeError("steps must be a non-negative integer, got %r"
                        % (steps,))
    steps = operator.index(steps)
    if steps < 0:
        raise ValueError("steps must be a non-negative integer, got %d"
                         % steps)
    if steps > _MAX_STEPS:
        raise ValueError("steps is too large: %d" % steps)
    return steps


def resolve_mode(mode):
    """The canonical name of boundary mode `mode` ("periodic" -> "wrap")."""
    if mode in MODE_CODES:
        return mode
    if not isinstance(mode, str):
        raise TypeError("mode must be a str, got %s" % type(mode).__name__)
    key = MODE_ALIASES.get(mode.lower(), mode.lower())
    if key not in MODE_CODES:
        raise ValueError("unknown mode %r; accepted: %s (and 'periodic' for "
                         "'wrap')" % (mode, ", ".join(MODE_CODES)))
    return key


def resolve_cval(cval):
    try:
        return float(cval)
    except (TypeError, ValueError):
        raise TypeError("cval must be a real number, got %r" % (cval,))


def backend_name(backend):
    """The canonical (lower-case) name of `backend`, checked."""
    if backend in BACKEND_NAMES:
        return backend
    if not isinstance(backend, str):
        raise TypeError("backend must be a str, got %s"
                        % type(backend).__name__)
    key = backend.lower()
    if key not in BACKEND_NAMES:
        raise ValueError("unknown backend %r; accepted: %s"
                         % (backend, ", ".join(BACKEND_NAMES)))
    return key


def check_ndim(shape, w):
    """A grid of `shape` can take the weights `w` (ValueError if not)."""
    if len(shape) < 1 or len(shape) > 3:
        raise ValueError("grid must be 1D, 2D or 3D, got ndim=%d"
                         % len(shape))
    if 0 in shape:
        raise ValueError("grid must not be empty, got shape %s" % (shape,))
    if len(shape) != w.ndim:
        raise ValueError("a %dD stencil (weights shape %s) needs a %dD grid, "
                         "got a %dD grid of shape %s"
                         % (w.ndim, w.shape, w.ndim, len(shape), shape))


def in_main_thread():
    """Only the main thread runs signal handlers: only its runs can stop
    at Ctrl-C."""
    return threading.get_ident() == _MAIN_THREAD


# ---------------------------------------------------------------------------
# threads

def set_wait_policy(policy):
    """The CPU engines' step barriers follow `policy`, the OMP_WAIT_POLICY
    the user gave (None: none): "active" spins until released, "passive"
    sleeps at once, none spins a short while and then sleeps
    (csrc/cpu/threads.h).  Returns the spin in nanoseconds."""
    key = (policy or "").strip().lower()
    if key == "active":
        return _core.barrier_spin(-1)
    if key == "passive":
        return _core.barrier_spin(0)
    return _core.barrier_spin(_core.BARRIER_SPIN_NS)


# ---------------------------------------------------------------------------
# the record of the last engine run

# Rebound (never mutated) by each call, so a reader in another thread
# sees one call's whole record.
_last_record = {}


def set_last_record(record):
    """Make `record` (a fresh dict, the caller's no longer) the record of
    the last run in this process."""
    global _last_record
    _last_record = record


def last_record():
    """The last run's record as set (not a copy: do not mutate it)."""
    return _last_record


# ---------------------------------------------------------------------------
# engine calls

def run_host(grid, weights, out, *, steps, mode, cval, backend, path=None,
             threads=0, interruptible=False, progress=None):
    """`steps` steps of `weights` on the host array `grid` into `out`
    (float64, C-contiguous; `out` may be `grid`) on backend `backend` (a
    name of BACKEND_CODES); `path`: a PATH_CODES code for the GPU (None:
    the backend's own).  Returns the engine's record (a dict)."""
    engine, own_path = BACKEND_CODES[backend]
    return _core.run(grid, weights, out, steps, MODE_CODES[mode], cval,
                     engine, own_path if path is None else path, threads,
                     interruptible, progress)


def run_device(src, dst, weights, *, steps, mode, cval, path=None, stream=0,
               interruptible=False, progress=None):
    """`steps` steps of `weights` from the device array `src` into `dst`
    (both DeviceViews of _device.py; any strides, `dst` float64) on the
    GPU.  `path`: a PATH_CODES code (None: the engine chooses); `stream`:
    the stream to queue on (0: run on the engine's own and wait).  A zero
    step run is a strided copy.  Returns the engine's record."""
    return _core.run_device(
        src.ptr, src.code, src.strides_3d(), dst.ptr, dst.strides_3d(),
        src.shape_3d(), weights, steps, MODE_CODES[mode], cval,
        _core.PATH_AUTO if path is None else path, src.stream, dst.stream,
        stream, interruptible, progress)


def run_onestep_cai(grid_cai, out, weights, *, mode, cval, path=None,
                    stream=0, interruptible=False):
    """One step of `weights` between device arrays read from their CUDA
    Array Interface dicts in C, where both are of the plain kind
    (csrc/cai_glue.h: version 3, float64; what a scheme's loop of small
    calls passes): `grid_cai` the grid's, `out` the result's dict, or the
    pointer of a new C-ordered float64 array of the grid's shape.  The
    engine's record, or None where either is not plain (nothing ran)."""
    return _core.run_onestep_cai(
        grid_cai, out, weights, MODE_CODES[mode], cval,
        _core.PATH_AUTO if path is None else path, stream, interruptible)


def cai_plain_ndim(cai):
    """The axes of the array a CUDA Array Interface dict describes where
    run_onestep_cai reads it, else 0."""
    return _core.cai_plain_ndim(cai)


def run_scheme(fields_in, fields_out, params, tables, *, steps, mode, cval,
               backend, threads=0, interruptible=False, progress=None):
    """`steps` steps of a scheme (its `tables`: Scheme.tables()) on host
    arrays: `fields_in` and `fields_out` tuples of the K fields (float64,
    C-contiguous, one shape; an out may be an in), `params` the tuple of
    parameter fields in the scheme's order.  Returns the engine's
    record."""
    return _core.run_scheme(
        tuple(fields_in), tuple(fields_out), tuple(params),
        tables["stencils"], tables["coefs"], tables["terms"],
        tables["updates"], tables["stages"], steps, MODE_CODES[mode], cval,
        BACKEND_CODES[backend][0], threads, interruptible, progress)


def plan_scheme_cpu(shape, tables, *, fields, params, mode, steps,
                    threads=0):
    """What run_scheme would run for `steps` steps of a scheme of `fields`
    fields and `params` parameter fields on `shape` under boundary
    `mode` with `threads` threads (0: the engine's choice now): the CPU
    engine's own choice (csrc/cpu/scheme_blocked.c), a dict of path,
    fused_depth, fused_passes, unfused_steps, threads, tiles, tile_rows
    and margins."""
    return _core.plan_scheme_cpu(
        tuple(shape), tables["stencils"], tables["coefs"], tables["terms"],
        tables["updates"], tables["stages"], fields, params,
        MODE_CODES[mode], steps, threads)


def run_scheme_device(fields_in, fields_out, params, shape, tables, *, steps,
                      mode, cval, stream=0, interruptible=False,
                      progress=None):
    """`steps` steps of a scheme on the GPU: `fields_in`, `fields_out`
    and `params` tuples of device pointers to float64 C-contiguous arrays
    of `shape` (an out may be an in; outs distinct).  `stream`: the
    stream to queue on (0: the engine's own, after the legacy default
    stream's work, and wait).  Returns the engine's record."""
    return _core.run_scheme_device(
        tuple(fields_in), tuple(fields_out), tuple(params), tuple(shape),
        tables["stencils"], tables["coefs"], tables["terms"],
        tables["updates"], tables["stages"], steps, MODE_CODES[mode], cval,
        stream, interruptible, progress)


def plan_scheme_device(shape, tables, *, fields, params, mode, steps,
                       smem_optin, image_arch=90):
    """The passes the GPU engine would run for `steps` steps of a scheme
    of `fields` fields and `params` parameter fields on `shape` under
    boundary `mode`, on a device whose kernel image is for `image_arch`
    (cuda_device_caps()["image_arch"]; below 90 no streamed passes), and
    the model's price of each (the engine's own choice,
    csrc/scheme_plan.c; no GPU needed): a dict of path,
    fused_depth, rows, onestep_seconds, blocked_seconds, streamed_seconds
    (a grid point and step) and shared_memory."""
    return _core.plan_scheme_device(
        tuple(shape), tables["stencils"], tables["coefs"], tables["terms"],
        tables["updates"], tables["stages"], fields, params,
        MODE_CODES[mode], steps, smem_optin, image_arch)


def plan_cpu(shape, weights, *, mode, steps, threads=0, in_place=False):
    """What the CPU engine runs for `steps` steps of `weights` on `shape`
    (a dict; csrc/cpu/cpu_engine.h, cs_cpu_plan_make, the function its
    run calls): path, threads (`threads` > 0: that many; 0: the engine's
    own choice, which reads the machine's load now), fused_depth and
    passes, the tiling and what a model prices."""
    return _core.plan_cpu(tuple(shape), weights, MODE_CODES[mode], steps,
                          threads=threads, in_place=in_place)


def synchronize(stream):
    """Wait for the work queued on `stream` (a cudaStream_t as an int)."""
    _core.cuda_stream_synchronize(stream)


_IDENTITY = {n: np.ones((1,) * n) for n in (1, 2, 3)}


def copy_device(src, dst):
    """dst[...] = src for two DeviceViews of one shape (any strides), on
    the GPU; returns when the copy is complete."""
    return run_device(src, dst, _IDENTITY[len(src.shape)], steps=0,
                      mode="constant", cval=0.0)


def plan(shape, weights, *, mode, steps, path, cc_major, max_depth,
         smem_optin):
    """The GPU engine's plan for a run (a dict; csrc/plan.c)."""
    return _core.plan(tuple(shape), weights, MODE_CODES[mode], steps,
                      PATH_CODES[path], cc_major=cc_major,
                      max_depth=max_depth, smem_optin=smem_optin)


# An engine session: one padded block kept in the engine's own layout for
# many runs of the same steps (convstencil.distributed's rounds).

def _lead(ndim):
    return 3 - ndim


def session_open(ptr, shape, strides, weights, *, steps, mode, cval, path,
                 at=None, box=None, ends=0):
    """Open a session on a grid of `shape` (1 to 3 axes) loaded from the
    float64 device array at `ptr` (byte `strides`): the whole grid, or
    an array of extents `box` into the box at `at` (the rest is the
    caller's to write before a round).  ends > 0: where the rounds can,
    only `ends` planes at each end of the box along axis 0 are loaded
    (what an exchange sends), and the first round reads the rest from
    the array, which must stay as it is until that round is done; the
    box is whole in the grid for session_copy before it, not through
    session_view.  Returns (handle, path name)."""
    lead = _lead(len(shape))
    at = (0,) * len(shape) if at is None else at
    box = shape if box is None else box
    return _core.session_open(ptr, (0,) * lead + tuple(strides),
                              (1,) * lead + tuple(shape), weights, steps,
                              MODE_CODES[mode], cval, path,
                              (0,) * lead + tuple(at),
                              (1,) * lead + tuple(box), int(ends))


def session_run(handle, bands=None, out=None):
    """Run the session's steps once (its grid becomes the result).
    Without `bands`, returns when done (False).  With bands = (low,
    high), planes at the ends of the box along axis 0: queued, those
    planes written first; True where the round's last pass was split so
    (the exchange then runs beside the rest of it).  Exchange on
    session_exchange_stream or after session_wait_bands, then call
    session_exchanged.  With out = (ptr, byte strides) of a float64
    device array of the grid's shape: the last round, its result written
    there (the box's planes along axis 0 where the passes take windows,
    no store of the grid after them); session_close then takes the same
    array."""
    bands = None if bands is None else tuple(int(b) for b in bands)
    if out is None:
        return _core.session_run(handle, bands)
    ptr, strides = out
    lead = _lead(len(strides))
    return _core.session_run(handle, bands,
                             (ptr, (0,) * lead + tuple(strides)))


def session_exchange_stream(handle):
    """The stream (cudaStream_t, an int) a queued round's exchange goes
    on: it waits for the round's bands."""
    return _core.session_exchange_stream(handle)


def session_wait_bands(handle):
    """Wait for the bands of the round last queued."""
    _core.session_wait_bands(handle)


def session_exchanged(handle):
    """The exchange of a queued round is queued on the exchange stream
    (or done): the next round waits for it."""
    _core.session_exchanged(handle)


def session_view(handle, ndim):
    """(ptr, byte strides, shape) of the session's current grid."""
    ptr, strides, shape = _core.session_view(handle)
    lead = _lead(ndim)
    return ptr, tuple(strides[lead:]), tuple(shape[lead:])


def session_bands(handle):
    """How a split round's bands run: "lead" (the first blocks of their
    pass's launch) or "apart" (launches of their own)."""
    return _core.session_bands(handle)


def session_halo(handle):
    """The halo widths (z, y, x) around the session's current grid."""
    return tuple(_core.session_halo(handle))


def session_copy(handle, starts, sizes, buffer_ptr, *, put):
    """Copy the box at `starts`, `sizes` of the session's grid into the
    contiguous device buffer (put=False), or the buffer into it."""
    lead = _lead(len(starts))
    _core.session_copy(handle, (0,) * lead + tuple(starts),
                       (1,) * lead + tuple(sizes), buffer_ptr, put)


def session_close(handle, out_ptr, out_strides):
    """Store the session's grid at `out_ptr` (byte strides `out_strides`;
    unless the last round wrote its result there: session_run's `out`)
    and close it; True where a value was not finite."""
    lead = _lead(len(out_strides))
    return _core.session_close(handle, out_ptr,
                               (0,) * lead + tuple(out_strides))
