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
    if kinds.pop():
        raise TypeError("schemes run on host arrays in this version; GPU "
                        "arrays are not supported yet (copy them to the "
                        "host, e.g. cupy.asnumpy)")
    if stream is not None:
        raise TypeError("stream= applies to GPU arrays; these grids are "
                        "host arrays")
    if single and callback is not None:
        whole = callback
        callback = lambda step, state: whole(step, state[0])  # noqa: E731
    result = _apply_host(grids, scheme, steps, mode, cval, backend, out,
                         every, callback, progress, params)
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


def host_params(params, scheme, shape):
    """The parameter fields in scheme.params order, float64 C-contiguous
    arrays of `shape`, checked."""
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
    arrays = []
    for name in scheme.params:
        if name not in params:
            raise ValueError("parameter field %r is missing: pass params="
                             "{%r: array}" % (name, name))
        value = params[name]
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
    name = _engine.backend_name(backend)
    if name == "auto":
        return "cpu"
    if name == "cpu-tc":
        raise ValueError("backend 'cpu-tc' runs single stencils (the "
                         "tensor-core algorithm emulated); schemes run on "
                         "'cpu'")
    if name in _backends.CUDA_BACKENDS:
        raise ValueError("schemes do not run on the GPU in this version "
                         "(backend %r); use backend='cpu' or 'auto'" % name)
    return name


def _apply_host(grids, scheme, steps, mode, cval, backend, out, every,
                callback, progress, params):
    name = _host_backend(backend)
    arrays = _host_grids(grids, scheme)
    shape = arrays[0].shape
    param_arrays = host_params(params, scheme, shape)
    if out is not None:
        _check_outs(out, shape, scheme)
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
