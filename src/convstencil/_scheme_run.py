"""apply() for a Scheme: the grids as a tuple in scheme.fields order, the
parameter fields by name, the same keywords as a single stencil's run.

The grids are checked and converted as apply() converts one (private
float64 copies where needed), the run goes to the engine in one call (or
one call per `every=` segment), and the result is a tuple of new arrays
or `out`.  The inputs are never written unless `out` names them, and a
run that stops (a raising callback, Ctrl-C) leaves them as they were
even then: where an out shares memory with an input, the run writes
private buffers and copies them out at the end.
"""
import time

import numpy as np

from . import _backends, _device, _engine, _host, _memory, _watch


def apply_scheme(grids, scheme, *, steps, mode, cval, backend, out, every,
                 callback, progress, stream, params):
    """The scheme branch of convstencil.apply (arguments as there; `mode`
    and `cval` None: the scheme's)."""
    mode = scheme.mode if mode is None else _engine.resolve_mode(mode)
    cval = scheme.cval if cval is None else _engine.resolve_cval(cval)
    single = len(scheme.fields) == 1 and not isinstance(grids, (tuple, list))
    grids = (grids,) if single else _as_tuple(grids, scheme, "grids")
    if out is not None:
        out = _as_tuple(out, scheme, "out") if not single else (out,)
    kinds = {_device.is_device_array(g) for g in grids}
    if out is not None:
        kinds |= {_device.is_device_array(o) for o in out}
    if len(kinds) > 1:
        raise TypeError("a scheme's grids (and out) must be all host arrays "
                        "or all GPU arrays, got a mix")
    on_device = kinds.pop()
    if stream is not None and not on_device:
        raise TypeError("stream= applies to GPU arrays; these grids are "
                        "host arrays")
    if single and callback is not None:
        whole = callback
        callback = lambda step, state: whole(step, state[0])  # noqa: E731
    if on_device:
        result = _apply_device(grids, scheme, steps, mode, cval, backend,
                               out, every, callback, progress, params,
                               stream)
    else:
        result = _apply_host(grids, scheme, steps, mode, cval, backend,
                             out, every, callback, progress, params)
    return result[0] if single else result


def _as_tuple(grids, scheme, what):
    names = ", ".join(f.name for f in scheme.fields)
    if not isinstance(grids, (tuple, list)):
        raise TypeError("a scheme of the fields (%s) takes %s as a tuple in "
                        "that order, got %s"
                        % (names, what, type(grids).__name__))
    if len(grids) != len(scheme.fields):
        raise ValueError("a scheme of the fields (%s) takes %d %s, got %d"
                         % (names, len(scheme.fields), what, len(grids)))
    return tuple(grids)


def _host_grids(grids, scheme):
    arrays = []
    for field, grid in zip(scheme.fields, grids):
        try:
            arrays.append(_host.as_grid(grid, None))
        except (TypeError, ValueError) as exc:
            raise type(exc)("field %s: %s" % (field.name, exc)) from None
    shape = arrays[0].shape
    for field, a in zip(scheme.fields, arrays):
        if a.shape != shape:
            raise ValueError("the grids of one scheme must have one shape: "
                             "%s has %s, %s has %s"
                             % (scheme.fields[0].name, shape, field.name,
                                a.shape))
    if scheme.ndim is not None and len(shape) != scheme.ndim:
        raise ValueError("the scheme's stencils are %dD, the grids %dD "
                         "(shape %s)" % (scheme.ndim, len(shape), shape))
    return tuple(arrays)


def _named_params(params, scheme):
    """(name, value) of every parameter field the scheme reads, in
    scheme.params order; `params` checked to name exactly those."""
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise TypeError("params must be a dict {name: array}, got %s"
                        % type(params).__name__)
    for name in params:
        if name not in scheme.params:
            raise ValueError(
                "unknown parameter field %r; the scheme reads %s"
                % (name, ", ".join(map(repr, scheme.params)) or "none"))
    for name in scheme.params:
        if name not in params:
            raise ValueError("parameter field %r is missing: pass params="
                             "{%r: array}" % (name, name))
    return [(name, params[name]) for name in scheme.params]


def host_params(params, scheme, shape):
    """The parameter fields in scheme.params order, float64 C-contiguous
    arrays of `shape`, checked."""
    arrays = []
    for name, value in _named_params(params, scheme):
        if _device.is_device_array(value):
            raise TypeError("parameter field %r is a GPU array but the "
                            "grids are host arrays" % name)
        try:
            a = np.asarray(value)
        except Exception as exc:
            raise TypeError("parameter field %r must be a real numeric "
                            "array: %s" % (name, exc)) from None
        if a.dtype.kind not in "biuf":
            raise TypeError("parameter field %r must hold real numbers, got "
                            "dtype %s" % (name, a.dtype))
        if a.shape != shape:
            raise ValueError("parameter field %r must have the grids' shape "
                             "%s, got %s" % (name, shape, a.shape))
        arrays.append(np.ascontiguousarray(a, dtype=np.float64))
    return tuple(arrays)


def _check_outs(out, shape, scheme):
    for field, o in zip(scheme.fields, out):
        try:
            _host.check_out(o, shape)
        except (TypeError, ValueError) as exc:
            raise type(exc)("out for field %s: %s" % (field.name, exc)) \
                from None
    for i in range(len(out)):
        for j in range(i + 1, len(out)):
            if np.may_share_memory(out[i], out[j]):
                raise ValueError("out for fields %s and %s share memory; "
                                 "each field needs its own array"
                                 % (scheme.fields[i].name,
                                    scheme.fields[j].name))


def _host_backend(backend):
    """"cpu" or "cuda": where a scheme on host grids runs."""
    name = _engine.backend_name(backend)
    if name == "cpu-tc":
        raise ValueError("backend 'cpu-tc' runs single stencils (the "
                         "tensor-core algorithm emulated); schemes run on "
                         "'cpu' or 'cuda'")
    if name == "auto":
        return _backends.best_backend()
    if name in _backends.CUDA_BACKENDS:
        status = _backends.cuda_status()
        if status != "available":
            raise RuntimeError("backend %r is not usable here: %s"
                               % (name, status))
        return "cuda"
    return name


def _apply_host(grids, scheme, steps, mode, cval, backend, out, every,
                callback, progress, params):
    name = _host_backend(backend)
    arrays = _host_grids(grids, scheme)
    shape = arrays[0].shape
    param_arrays = host_params(params, scheme, shape)
    if out is not None:
        _check_outs(out, shape, scheme)
    if name == "cuda":
        return _host_on_device(arrays, scheme, steps, mode, cval, out,
                               every, callback, progress, param_arrays)
    k = len(arrays)
    nbytes = arrays[0].nbytes
    # results, and the segments' two spare sets (or one private set where
    # an out shares memory with a grid)
    shares = out is not None and any(
        np.may_share_memory(o, g) for o in out for g in grids)
    sets = (out is None) + (2 if every is not None else 0) + shares
    if sets:
        _memory.ensure_host_fits(
            sets * k * nbytes, "a scheme's %d fields of shape %s, %d set%s"
            % (k, shape, sets, "s" if sets > 1 else ""))

    def new_set():
        return tuple(np.empty(shape) for _ in range(k))

    result = new_set() if out is None else out
    last = new_set() if shares else result
    tables = scheme.tables()
    interruptible = _engine.in_main_thread()
    bar = _watch.Progress(steps, progress)
    infos = []

    def run(src, dst, n, done):
        start = time.perf_counter()
        info = _engine.run_scheme(src, dst, param_arrays, tables, steps=n,
                                  mode=mode, cval=cval, backend=name,
                                  interruptible=interruptible,
                                  progress=bar.offset(done))
        info["wall_seconds"] = time.perf_counter() - start
        infos.append(info)

    def show(step, state):
        callback(step, tuple(_host.read_only(a) for a in state))

    try:
        _watch.run_segments(steps, every, arrays, last, new_set, run,
                            show if callback is not None else None, bar)
    except BaseException:
        bar.close(False)
        raise
    if last is not result:
        for dst, src in zip(result, last):
            np.copyto(dst, src)
    bar.close(True)
    info = dict(infos[-1])
    if len(infos) > 1:
        info["segments"] = len(infos)
        info["wall_seconds"] = sum(i["wall_seconds"] for i in infos)
    info.update(steps=steps, mode=mode, scheme=True, fields=k)
    _engine.set_last_record(info)
    return tuple(result)


# ---------------------------------------------------------------------------
# on the GPU

def _host_on_device(arrays, scheme, steps, mode, cval, out, every,
                    callback, progress, param_arrays):
    """Host grids run on the GPU: uploaded once, the state kept there
    between segments (downloaded for each callback), the result
    downloaded once."""
    shape = arrays[0].shape
    grids = tuple(_pair(_uploaded(a)) for a in arrays)
    params = tuple(_pair(_uploaded(p)) for p in param_arrays)
    report = None
    if callback is not None:
        def report(step, state):
            callback(step, tuple(_host.read_only(d.get()) for d in state))
    state = _run_on_device(grids, scheme, steps, mode, cval, None, every,
                           report, progress, params, 0, shape)
    result = out if out is not None else tuple(
        np.empty(shape) for _ in arrays)
    for host, dev in zip(result, state):
        _device.download(host, dev)
    return tuple(result)


def _pair(obj):
    return obj, _device.device_view(obj, known=True)


def _uploaded(host):
    dev = _device.DeviceArray(host.shape)
    _device.upload(dev, np.ascontiguousarray(host, dtype=np.float64))
    return dev


def _is_plain(view):
    """A float64 C-contiguous view, which the engine takes as it is."""
    return (view.dtype == np.float64
            and tuple(view.strides) == _device.c_strides(view.shape))


def _engine_array(obj, view, shape):
    """`obj` itself where the engine can read it, else a private float64
    C-contiguous copy on the GPU (any dtype and strides converted)."""
    if _is_plain(view):
        return obj, view
    copy = _device.DeviceArray(shape)
    copy_view = _device.device_view(copy, known=True)
    _engine.copy_device(view, copy_view)
    return copy, copy_view


def _apply_device(grids, scheme, steps, mode, cval, backend, out, every,
                  callback, progress, params, stream):
    _backends.resolve_device_backend(backend)
    handle = _device.stream_handle(stream)
    views = []
    for field, g in zip(scheme.fields, grids):
        try:
            views.append(_device.device_view(g, "grid %s" % field.name,
                                             known=True))
        except (TypeError, ValueError) as exc:
            raise type(exc)("field %s: %s" % (field.name, exc)) from None
    shape = tuple(views[0].shape)
    for field, v in zip(scheme.fields, views):
        if tuple(v.shape) != shape:
            raise ValueError("the grids of one scheme must have one shape: "
                             "%s has %s, %s has %s"
                             % (scheme.fields[0].name, shape, field.name,
                                tuple(v.shape)))
    if scheme.ndim is not None and len(shape) != scheme.ndim:
        raise ValueError("the scheme's stencils are %dD, the grids %dD "
                         "(shape %s)" % (scheme.ndim, len(shape), shape))
    param_views = _device_params(params, scheme, shape)
    out_views = None
    if out is not None:
        out_views = _device_outs(out, shape, scheme)
    # the producers' streams: their work is done before the engine reads
    for v in views + [p for _, p in param_views]:
        if v.stream not in (0, _device.LEGACY_DEFAULT_STREAM):
            _engine.synchronize(v.stream)
    engine_grids = [_engine_array(g, v, shape)
                    for g, v in zip(grids, views)]
    engine_params = [_engine_array(p, v, shape) for p, v in param_views]
    # where an out is also a grid, the run ends in new arrays, copied to
    # the outs once it is complete: a run that stops leaves the grids
    shares = out_views is not None and any(
        o.overlaps(v) for o in out_views for v in views)
    last = tuple(zip(out, out_views)) if out is not None and not shares \
        else None
    state = _run_on_device(
        tuple(engine_grids), scheme, steps, mode, cval, last, every,
        callback, progress, tuple(engine_params), handle, shape,
        like=grids[0])
    if out is None:
        return state
    if shares:
        for src, dst in zip(state, out_views):
            _engine.copy_device(_device.device_view(src, known=True), dst)
    return tuple(out)


def _device_params(params, scheme, shape):
    """(array, DeviceView) of every parameter field, checked."""
    found = []
    for name, value in _named_params(params, scheme):
        if not _device.is_device_array(value):
            raise TypeError("parameter field %r is a host array but the "
                            "grids are GPU arrays: put it on the GPU too"
                            % name)
        view = _device.device_view(value, "parameter field %r" % name,
                                   known=True)
        if tuple(view.shape) != shape:
            raise ValueError("parameter field %r must have the grids' shape "
                             "%s, got %s" % (name, shape, tuple(view.shape)))
        found.append((value, view))
    return found


def _device_outs(out, shape, scheme):
    views = []
    for field, o in zip(scheme.fields, out):
        view = _device.device_view(o, "out for field %s" % field.name)
        if view is None:
            raise TypeError("out for field %s must be a GPU array, as the "
                            "grids are" % field.name)
        if not _is_plain(view) or tuple(view.shape) != shape:
            raise ValueError("out for field %s must be a float64 "
                             "C-contiguous GPU array of the grids' shape %s"
                             % (field.name, shape))
        if view.readonly:
            raise ValueError("out for field %s is read-only" % field.name)
        views.append(view)
    for i in range(len(views)):
        for j in range(i + 1, len(views)):
            if views[i].overlaps(views[j]):
                raise ValueError("out for fields %s and %s share memory; "
                                 "each field needs its own array"
                                 % (scheme.fields[i].name,
                                    scheme.fields[j].name))
    return views


def _run_on_device(grids, scheme, steps, mode, cval, last, every, report,
                   progress, params, stream, shape, like=None):
    """Run on (obj, view) pairs `grids`; `last`: the (obj, view) pairs
    the run ends in, or None for new arrays.  Returns the objects of the
    final state."""
    like = like if like is not None else grids[0][0]
    tables = scheme.tables()
    interruptible = _engine.in_main_thread()
    bar = _watch.Progress(steps, progress)
    k = len(grids)
    pointers = tuple(p.ptr for _, p in params)

    def new_set():
        made = tuple(_device.new_like(like, shape) for _ in range(k))
        return tuple((m, _device.device_view(m, known=True)) for m in made)

    if last is None:
        last = new_set()
    infos = []

    def run(src, dst, n, done):
        infos.append(_engine.run_scheme_device(
            tuple(v.ptr for _, v in src), tuple(v.ptr for _, v in dst),
            pointers, shape, tables, steps=n, mode=mode, cval=cval,
            stream=stream, interruptible=interruptible,
            progress=bar.offset(done)))

    def show(step, state):
        report(step, tuple(obj for obj, _ in state))

    try:
        _watch.run_segments(steps, every, grids, last, new_set, run,
                            show if report is not None else None, bar)
    except BaseException:
        bar.close(False)
        raise
    bar.close(True)
    info = dict(infos[-1])
    if len(infos) > 1:
        info["segments"] = len(infos)
        seconds = [i.get("device_seconds") for i in infos]
        info["device_seconds"] = None if None in seconds or any(
            s is not None and s < 0 for s in seconds) else sum(seconds)
    info.update(steps=steps, mode=mode, scheme=True, fields=k,
                device_array=True)
    _engine.set_last_record(info)
    return tuple(obj for obj, _ in last)
