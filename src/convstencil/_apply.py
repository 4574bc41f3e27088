"""apply(): validate and convert arguments, run the engine, report.

Host grids (NumPy and anything np.asarray takes) run on any backend and
come back as NumPy arrays; device grids (CUDA Array Interface, DLPack on
a CUDA device) run on the GPU and come back as device arrays of their
own kind (_device.py), with no host copy.  ``every=`` cuts a run into
segments for a callback, ``progress=`` draws a bar (_watch.py).
"""
import time

import numpy as np

from . import _backends, _device, _engine, _explain, _host, _memory, _watch
from ._scheme import Scheme
from ._scheme_run import apply_scheme
from ._stencil import resolve_weights

def last_run_info():
    """What the last apply() call in this process ran (a dict copy).

    Keys: backend, path ("tensor-core", "cuda-core", "direct", ...),
    fused_depth, fused_passes, unfused_steps, threads, device_seconds
    (the GPU step loop's time, None where not measured), wall_seconds
    (host grids: the engine calls' wall time), steps, mode, and for
    device arrays device_array=True.  predicted_seconds is what
    explain()'s model predicts for the run (the GPU's step loop, the CPU
    engine's call; None where not modelled) and fraction_of_prediction
    the measured time over it (device_seconds on the GPU, wall_seconds
    on the CPU; None where either is missing, or where the masked path
    ran).

    >>> v = convstencil.apply(u, "heat2d", steps=10)
    >>> convstencil.last_run_info()["path"]
    'direct'
    """
    info = dict(_engine.last_record())
    model_args = info.pop("_model", None)
    if model_args is not None:
        _explain.add_prediction(info, model_args)
    return info


def _record(info, steps, mode, shape, w, name, fresh=True, calls=None,
            device_array=False):
    """Make `info` (a fresh dict, the caller's no longer) the record.
    `shape`, `w`, `name` (the backend), `fresh` (apply() allocated the
    result) and `calls` (the steps of each engine call, one per segment
    of a run with every=; None: one call) are kept for the prediction
    that last_run_info() adds, computed only when asked for."""
    info["steps"] = steps
    info["mode"] = mode
    if device_array:
        info["device_array"] = True
    info["_model"] = (shape, w, mode, steps, name, fresh,
                      (steps,) if calls is None else tuple(calls))
    _engine.set_last_record(info)


# ---------------------------------------------------------------------------
# host grids

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


def _apply_host(grid, w, steps, mode, cval, backend, out, every, callback,
                progress):
    if out is not None:
        _host.check_out(out, np.shape(grid))
    src = _host.as_grid(grid, out)
    _engine.check_ndim(src.shape, w)
    name = _backends.resolve_host_backend(backend, src.ndim, w)
    if every is not None:
        # segments keep states of their own: up to three more host grids
        # on the CPU (two spares, a staged last segment), one on the GPU
        extra = 1 if name in _backends.CUDA_BACKENDS else 3
        _memory.ensure_host_fits(
            src.nbytes * (extra + 1 + (out is None) + (src is not grid)),
            "a run of %d-step segments on a grid of shape %s"
            % (every, src.shape))
    fresh = out is None
    if out is None:
        # a separate result: computing in place would make the CPU engine
        # copy the grid first (its passes must not write what they read)
        out = np.empty(src.shape, dtype=np.float64)
    path = None
    if name in _backends.CUDA_BACKENDS:
        path = _backends.gpu_path(name, src.shape, w, mode, steps)
    interruptible = _engine.in_main_thread()
    bar = _watch.Progress(steps, progress)
    infos = []

    if name in _backends.CUDA_BACKENDS and every is not None:
        return _apply_host_on_device(src, grid, w, steps, mode, cval, name,
                                     path, out, every, callback, bar)

    def run(a, b, n, done):
        start = time.perf_counter()
        info = _engine.run_host(a, w, b, steps=n, mode=mode, cval=cval,
                                backend=name, path=path,
                                interruptible=interruptible,
                                progress=bar.offset(done))
        info["wall_seconds"] = time.perf_counter() - start
        infos.append(info)
        calls.append(n)

    calls = []

    def show(step, state):
        callback(step, _host.read_only(state))

    report = show if callback is not None else None

    # with segments, `out` is written by the last one only; where it is
    # the grid (or shares its memory) a callback that raises would find
    # it half-done, so the last segment goes to a buffer first
    shares = every is not None and np.may_share_memory(np.asarray(grid), out)
    last = np.empty_like(out) if shares else out
    before = _interrupt_backup(grid, src, out) if every is None else None
    try:
        _watch.run_segments(steps, every, src, last,
                            lambda: np.empty_like(out), run, report, bar)
    except BaseException:
        bar.close(False)
        if before is not None:
            np.copyto(out, before)  # an interrupted run keeps the grid
        raise
    if last is not out:
        np.copyto(out, last)
    bar.close(True)
    _record(_merge(infos), steps, mode, tuple(src.shape), w, name, fresh,
            calls)
    return out


def _merge(infos):
    """One record for the segments of a run: sums of what adds up."""
    info = dict(infos[-1])
    if len(infos) > 1:
        for key in ("fused_passes", "unfused_steps"):
            info[key] = sum(i[key] for i in infos)
        info["fused_depth"] = max(i["fused_depth"] for i in infos)
        for key in ("device_seconds", "wall_seconds"):
            seconds = [i.get(key) for i in infos]
            info[key] = None if None in seconds else sum(seconds)
        info["segments"] = len(infos)
    return info


def _apply_host_on_device(src, grid, w, steps, mode, cval, name, path, out,
                          every, callback, bar):
    """A host grid run in segments on the GPU: uploaded once, the state
    kept on the device between segments, downloaded for each callback."""
    state = _device.DeviceArray(src.shape)
    _device.upload(state, src)
    host = np.empty(src.shape, dtype=np.float64)

    def show(step, dev):
        _device.download(host, dev)
        callback(step, _host.read_only(host))

    report = show if callback is not None else None

    view = _device.device_view(state)
    try:
        infos = _run_device_segments(view, state, w, steps, mode, cval, path,
                                     every, report, bar, 0, state)
    except BaseException:
        bar.close(False)
        raise
    # every callback has returned: `out` (the grid, maybe) is written now
    _device.download(out, state)
    bar.close(True)
    _record(_merge(infos), steps, mode, tuple(src.shape), w, name)
    return out


# ---------------------------------------------------------------------------
# device grids

def _check_device_out(view, shape):
    if view is None:
        raise TypeError("out must be a GPU array for a GPU grid (one with "
                        "__cuda_array_interface__ or __dlpack__)")
    if view.dtype != np.float64:
        raise TypeError("out must have dtype float64, got %s" % view.dtype)
    if tuple(view.shape) != tuple(shape):
        raise ValueError("out must have the grid's shape %s, got %s"
                         % (tuple(shape), tuple(view.shape)))
    if view.readonly:
        raise ValueError("out is read-only")


def _run_device(src, dst, w, steps, mode, cval, path, stream, progress):
    return _engine.run_device(src, dst, w, steps=steps, mode=mode,
                              cval=cval, path=path, stream=stream,
                              interruptible=_engine.in_main_thread(),
                              progress=progress)


def _run_device_segments(first, first_obj, w, steps, mode, cval, path,
                         every, report, bar, stream, last, last_view=None):
    """Segments between device arrays; `last` is an object (its view
    `last_view`, or parsed here).  Intermediate buffers are arrays of
    first_obj's kind."""
    infos = []
    views = {}
    if last_view is not None:
        views[id(last)] = (last_view, last)

    def view_of(obj):
        if id(obj) not in views:
            views[id(obj)] = (_device.device_view(
                obj, consumer_stream=stream or _device.LEGACY_DEFAULT_STREAM),
                obj)
        return views[id(obj)][0]

    def run(a, b, n, done):
        sa = a if isinstance(a, _device.DeviceView) else view_of(a)
        infos.append(_run_device(sa, view_of(b), w, n, mode, cval, path,
                                 stream, bar.offset(done)))

    def new_buffer():
        return _device.new_like(first_obj, tuple(first.shape))

    _watch.run_segments(steps, every, first, last, new_buffer, run, report,
                        bar)
    return infos


# Array types that offer DLPack and a CUDA Array Interface older than
# version 3 (PyTorch's tensors), so are read through DLPack:
# _onestep_plain does not ask them for their interface again.
_OLD_INTERFACE_KINDS = set()


def _onestep_plain(grid, w, mode, cval, backend, out, handle):
    """One step between device arrays whose CUDA Array Interfaces are of
    the plain kind (version 3, float64: CuPy's, what a scheme's loop of
    small calls passes), read by the engine in C: reading them here took
    half of such a call's host time.  Returns the result, or None where
    either array is not plain or the CUDA engine is not usable (nothing
    ran; the full path then reads, checks and runs it, or says what is
    wrong)."""
    kind = type(grid)
    if kind in _OLD_INTERFACE_KINDS:
        return None
    try:
        cai = grid.__cuda_array_interface__
        out_cai = None if out is None else out.__cuda_array_interface__
        name = _backends.resolve_device_backend(backend)
    except Exception:  # the full path reads it again and says what failed
        return None
    if (type(cai) is dict and cai.get("version") != 3
            and hasattr(kind, "__dlpack__")):
        _OLD_INTERFACE_KINDS.add(kind)
        return None
    path = _backends.gpu_path(name, None, w, mode, 1, device_arrays=True)
    result = out
    if out is None:
        if _engine.cai_plain_ndim(cai) != w.ndim:
            return None
        result = _device.new_like(grid, cai["shape"])
        out_cai = _device.fresh_pointer(result)
        if out_cai is None:
            out_cai = result.__cuda_array_interface__
    info = _engine.run_onestep_cai(cai, out_cai, w, mode=mode, cval=cval,
                                   path=path, stream=handle,
                                   interruptible=_engine.in_main_thread())
    if info is None:
        return None
    _record(info, 1, mode, cai["shape"], w, name, device_array=True)
    return result


def _apply_device(grid, w, steps, mode, cval, backend, out, every,
                  callback, progress, stream):
    handle = _device.stream_handle(stream)
    if steps == 1 and every is None and not progress:
        # the call of a scheme's loop, kept short
        result = _onestep_plain(grid, w, mode, cval, backend, out, handle)
        if result is not None:
            return result
    # the stream a DLPack producer orders its work before: the caller's,
    # or the legacy default stream, which the engine then waits for
    consumer = handle or _device.LEGACY_DEFAULT_STREAM
    # the arrays are checked before the engine is asked for, so that a
    # malformed one gets its own error everywhere
    view = _device.device_view(grid, consumer_stream=consumer, known=True)
    _engine.check_ndim(view.shape, w)
    if out is not None:
        out_view = _device.device_view(out, "out", consumer_stream=consumer)
        _check_device_out(out_view, view.shape)
    name = _backends.resolve_device_backend(backend)
    # chosen once for the whole run: segments of a run with a callback
    # take the path the run without one takes
    path = _backends.gpu_path(name, tuple(view.shape), w, mode, steps,
                              device_arrays=True)
    result = out
    if out is None:
        result = _device.new_like(grid, view.shape)
        out_view = _device.fresh_view(result, view, consumer)
    if every is None and not progress:
        # the common call, kept short: many steps=1 calls are a scheme
        info = _run_device(view, out_view, w, steps, mode, cval, path,
                           handle, None)
        _record(info, steps, mode, view.shape, w, name, device_array=True)
        return result
    bar = _watch.Progress(steps, progress)
    # the last segment writes `result`; where that is the grid (or shares
    # its memory) and a callback may raise, it goes to a buffer first
    staged = callback is not None and out_view.overlaps(view)
    last = _device.new_like(grid, tuple(view.shape)) if staged else result
    try:
        infos = _run_device_segments(view, grid, w, steps, mode, cval, path,
                                     every, callback, bar, handle, last,
                                     None if staged else out_view)
        if staged:
            staged_view = _device.device_view(last, consumer_stream=consumer)
            _run_device(staged_view, out_view, w, 0, mode, cval, path,
                        handle, None)
    except BaseException:
        bar.close(False)
        raise
    bar.close(True)
    _record(_merge(infos), steps, mode, view.shape, w, name,
            device_array=True)
    return result


# ---------------------------------------------------------------------------

def apply(grid, stencil=None, *, weights=None, steps=1, mode=None,
          cval=None, backend="auto", out=None, every=None, callback=None,
          progress=False, stream=None, params=None):
    """Apply a stencil to `grid` `steps` times; return the new grid.

    One step is ``scipy.ndimage.correlate(grid, weights, mode=mode,
    cval=cval)``.  `stencil` is a preset name ("heat2d", "box2d49p", ...)
    or a Stencil; or give `weights=` (odd side per axis, same ndim as the
    grid).  `mode` is "constant" (cells outside read `cval` at every step),
    "wrap" (alias "periodic"), "nearest", "reflect" or "mirror".

    `mode` defaults to "constant" and `cval` to 0.0 (for a Scheme, to
    the scheme's own).

    With a Scheme (convstencil.Scheme) as the stencil, `grid` is the
    tuple of the scheme's fields' grids in ``scheme.fields`` order (one
    shape), `params` a dict of its parameter fields' arrays by name, and
    the result a tuple of new arrays (or `out`, a tuple); `every=` calls
    ``callback(step, grids)`` with the tuple.  One step is the scheme's
    stages in order (convstencil.Scheme says what a step computes).

    `grid` is a host array (NumPy, or anything ``np.asarray`` takes; the
    result is a new float64 C-contiguous NumPy array, or `out`: float64,
    C-contiguous, the grid's shape, possibly the grid itself), or a GPU
    array (CuPy, a PyTorch CUDA tensor, Numba, ...: anything with
    ``__cuda_array_interface__`` or ``__dlpack__`` on a CUDA device, of
    any real dtype and strides): it runs on the GPU with no host copy and
    the result is a new float64 array of the same kind (CuPy in, CuPy
    out; a tensor in, a tensor out; otherwise a convstencil.DeviceArray),
    or `out` (a float64 GPU array of the grid's shape, any strides,
    possibly the grid).  The input is never modified unless it is `out`.

    `backend` is "auto" (the GPU when usable or when the grid is on it,
    else the CPU), "cpu", "cpu-tc" (the tensor-core algorithm emulated on
    the CPU), "cuda" (the GPU, tensor cores where they pay), "cuda-tc" or
    "cuda-core" (the GPU on one path: tensor cores, kernels up to 7 per
    axis (1D: 31 points) only; CUDA cores).  GPU arrays run on the "cuda"
    backends only.

    Watching a long run: ``every=N, callback=f`` calls ``f(step, grid)``
    after every N steps (`step`: steps done so far; `grid`: the state
    then, read-only (GPU arrays: do not write it), of the input's kind,
    valid during the call).  The run is cut into N-step segments, so the
    result is the same with or without a callback.  If f raises, the run
    stops and the exception propagates; the grid is left as it was, even
    when it is `out`.  ``progress=True`` draws a progress bar (tqdm when
    installed, else a counter on stderr).

    GPU arrays: the call waits for the work their producer queued before
    (CUDA Array Interface v3 stream, DLPack exchange) and returns when
    the result is complete.  With ``stream=`` (a CuPy or PyTorch stream,
    or a handle) the work is queued on that stream instead and the call
    returns at once; the result is valid in that stream's order (use the
    stream the arrays' library works on, e.g.
    ``cupy.cuda.get_current_stream()``).

    A long run stops at Ctrl-C (KeyboardInterrupt, raised within about a
    tenth of a second on the CPU): the grid is then left as it was, even
    when it is `out`; any other `out` may hold partial results.

    >>> import numpy as np, convstencil as cs
    >>> u = np.random.rand(256, 256)
    >>> v = cs.apply(u, "heat2d", steps=100, mode="wrap")
    >>> frames = []
    >>> v = cs.apply(u, "heat2d", steps=100, every=25,
    ...              callback=lambda step, g: frames.append(g.copy()))
    >>> len(frames)
    4
    """
    steps = _engine.resolve_steps(steps)
    if every is not None or callback is not None:
        every, callback = _watch.resolve_every(every, callback, steps)
    if progress is not False and not isinstance(progress, (bool, np.bool_)):
        raise TypeError("progress must be True or False, got %r"
                        % (progress,))
    if isinstance(stencil, Scheme):
        if weights is not None:
            raise TypeError("apply() takes a Scheme or weights=, not both")
        return apply_scheme(grid, stencil, steps=steps, mode=mode, cval=cval,
                            backend=backend, out=out, every=every,
                            callback=callback, progress=bool(progress),
                            stream=stream, params=params)
    if params is not None:
        raise TypeError("params= gives a Scheme's parameter fields; a "
                        "stencil takes none")
    w = resolve_weights(stencil, weights)
    mode = _engine.resolve_mode("constant" if mode is None else mode)
    cval = _engine.resolve_cval(0.0 if cval is None else cval)
    if _device.is_device_array(grid):
        return _apply_device(grid, w, steps, mode, cval, backend, out, every,
                             callback, bool(progress), stream)
    if out is not None and _device.is_device_array(out):
        raise TypeError("out is a GPU array but the grid is not; put the "
                        "grid on the GPU too (e.g. cupy.asarray(grid))")
    if stream is not None:
        raise TypeError("stream= applies to GPU arrays; this grid is a "
                        "host array")
    return _apply_host(grid, w, steps, mode, cval, backend, out, every,
                       callback, bool(progress))
