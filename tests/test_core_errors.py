"""convstencil._core called directly with bad arguments: the checks of
module.c itself, behind the ones of convstencil.apply().

Every bad call must raise the right exception with a message that says
what is wrong, never crash, never write its inputs, and leave the
reference counts of its arguments as they were; many bad calls in a row
must not grow the traced memory (bottleneck's memory_test is the model).
"""
import gc
import sys
import tracemalloc

import numpy as np
import pytest

from convstencil import _core
from conftest import HAVE_CUDA

CUDA_BUILT = bool(_core.cuda_info()[0])
N_TRACE_CALLS = 200
TRACE_GROWTH_LIMIT = 32 * 1024

RUN_ARGS = ("grid", "weights", "out", "steps", "mode", "cval", "backend",
            "path", "threads", "interruptible", "progress")
SENTINEL = 7.25    # what `out` holds before a call that must not write it


def good_run(ndim=1):
    """Valid arguments of _core.run, as a dict (a fresh copy each time)."""
    shape = {1: (64,), 2: (6, 7), 3: (4, 5, 6)}[ndim]
    grid = np.linspace(-1.0, 1.0, int(np.prod(shape))).reshape(shape)
    weights = np.full((3,) * ndim, 1.0 / 3 ** ndim)
    return dict(grid=grid, weights=weights, out=np.full(shape, SENTINEL),
                steps=2, mode=_core.MODE_WRAP, cval=0.0,
                backend=_core.BACKEND_CPU, path=_core.PATH_AUTO, threads=0,
                interruptible=False, progress=None)


# ---- bad arrays --------------------------------------------------------

def strided(a):
    """The same values, not contiguous (every other element of a buffer)."""
    buf = np.empty(a.shape[:-1] + (2 * a.shape[-1],))
    view = buf[..., ::2]
    view[...] = a
    return view


def misaligned(a):
    """The same values at an address that is not a multiple of 8."""
    raw = bytearray(a.nbytes + 1)
    view = np.frombuffer(raw, dtype=np.float64, count=a.size,
                         offset=1).reshape(a.shape)
    view[...] = a
    return view


def read_only(a):
    a = a.copy()
    a.setflags(write=False)
    return a


BAD_ARRAYS = {
    "float32": (lambda a: a.astype(np.float32), TypeError, "float64"),
    "int64": (lambda a: a.astype(np.int64), TypeError, "float64"),
    "complex128": (lambda a: a.astype(np.complex128), TypeError, "float64"),
    "object": (lambda a: a.astype(object), TypeError, "float64"),
    "big-endian": (lambda a: a.astype(">f8"), TypeError, "float64"),
    "strided": (strided, TypeError, "C-contiguous"),
    "fortran": (np.asfortranarray, TypeError, "C-contiguous"),
    "misaligned": (misaligned, TypeError, "aligned"),
    "list": (lambda a: a.tolist(), TypeError, "ndarray"),
    "none": (lambda a: None, TypeError, "ndarray"),
}


def bad_array_cases():
    for name in ("grid", "weights", "out"):
        for kind, (make, exc, fragment) in BAD_ARRAYS.items():
            ndim = 2 if kind == "fortran" else 1
            yield pytest.param(ndim, {name: make}, exc, fragment,
                               id="%s-%s" % (name, kind))


# ---- bad shapes, weights and codes -------------------------------------

def replace(value):
    return lambda old: value


SHAPE_CASES = [
    ("weights-ndim", 1, {"weights": replace(np.ones((3, 3)) / 9)},
     ValueError, "same ndim"),
    ("out-ndim", 1, {"out": replace(np.zeros((1, 64)))}, ValueError,
     "same ndim"),
    ("ndim-0", 1, {"grid": replace(np.array(1.0)),
                   "weights": replace(np.array(1.0)),
                   "out": replace(np.array(0.0))}, ValueError, "1 to 3"),
    ("ndim-4", 1, {"grid": replace(np.ones((2, 2, 2, 2))),
                   "weights": replace(np.ones((1, 1, 1, 1))),
                   "out": replace(np.zeros((2, 2, 2, 2)))}, ValueError,
     "1 to 3"),
    ("out-shape", 1, {"out": replace(np.zeros(63))}, ValueError,
     "out of its shape"),
    ("out-shape-2d", 2, {"out": replace(np.zeros((7, 6)))}, ValueError,
     "out of its shape"),
    ("empty-grid", 1, {"grid": replace(np.zeros(0)),
                       "out": replace(np.zeros(0))}, ValueError,
     "non-empty"),
    ("empty-grid-axis", 2, {"grid": replace(np.zeros((6, 0))),
                            "out": replace(np.zeros((6, 0)))}, ValueError,
     "non-empty"),
    ("weights-even", 1, {"weights": replace(np.ones(2) / 2)}, ValueError,
     "odd size"),
    ("weights-even-4", 1, {"weights": replace(np.ones(4) / 4)}, ValueError,
     "odd size"),
    ("weights-even-axis", 2, {"weights": replace(np.ones((3, 2)) / 6)},
     ValueError, "odd size"),
    ("weights-empty", 1, {"weights": replace(np.zeros(0))}, ValueError,
     "odd size"),
    ("weights-nan", 1, {"weights": replace(np.array([0.25, np.nan, 0.25]))},
     ValueError, "finite"),
    ("weights-inf", 1, {"weights": replace(np.array([np.inf, 0.5, 0.25]))},
     ValueError, "finite"),
    ("weights-minus-inf", 2,
     {"weights": replace(np.array([[0.0] * 3, [0.0, 0.0, -np.inf],
                                   [0.0] * 3]))}, ValueError, "finite"),
    ("steps-negative", 1, {"steps": replace(-1)}, ValueError, "steps < 0"),
    ("mode-negative", 1, {"mode": replace(-1)}, ValueError, "mode code"),
    ("mode-past-last", 1, {"mode": replace(_core.MODE_MIRROR + 1)},
     ValueError, "mode code"),
    ("mode-huge", 1, {"mode": replace(2 ** 31 - 1)}, ValueError,
     "mode code"),
    ("backend-negative", 1, {"backend": replace(-1)}, ValueError,
     "unknown backend code"),
    ("backend-past-last", 1, {"backend": replace(_core.BACKEND_CUDA + 1)},
     ValueError, "unknown backend code"),
    ("steps-overflow", 1, {"steps": replace(2 ** 64)}, OverflowError, ""),
    ("mode-overflow", 1, {"mode": replace(2 ** 40)}, OverflowError, ""),
    ("backend-overflow", 1, {"backend": replace(-2 ** 40)}, OverflowError,
     ""),
    ("steps-float", 1, {"steps": replace(1.5)}, TypeError, "integer"),
    ("mode-str", 1, {"mode": replace("wrap")}, TypeError, "integer"),
    ("cval-str", 1, {"cval": replace("0")}, TypeError, "real number"),
    ("cval-none", 1, {"cval": replace(None)}, TypeError, "real number"),
    ("threads-float", 1, {"threads": replace(2.0)}, TypeError, "integer"),
]


class BoolRaises:
    """An `interruptible` whose truth value cannot be taken."""

    def __bool__(self):
        raise ZeroDivisionError("no truth value here")


SHAPE_CASES.append(("interruptible-raises", 1,
                    {"interruptible": replace(BoolRaises())},
                    ZeroDivisionError, "no truth value"))


def run_cases():
    yield from bad_array_cases()
    for case_id, ndim, changes, exc, fragment in SHAPE_CASES:
        yield pytest.param(ndim, changes, exc, fragment, id=case_id)


def build(ndim, changes):
    args = good_run(ndim)
    for name, make in changes.items():
        args[name] = make(args[name])
    return tuple(args[name] for name in RUN_ARGS)


def watched(args):
    """The arguments whose reference counts are the call's business: every
    object made for the call (small ints, floats, None are shared)."""
    return [a for a in args
            if not isinstance(a, (bool, int, float, type(None)))]


def snapshot(args):
    """Copies of the array arguments' contents, to compare after."""
    return [np.array(a, copy=True) if isinstance(a, np.ndarray) else None
            for a in args]


def assert_unchanged(args, before):
    for name, a, b in zip(RUN_ARGS, args, before):
        if b is None:
            continue
        if a.dtype == object:
            same = list(a.flat) == list(b.flat)
        else:
            same = np.array_equal(a, b, equal_nan=True)
        assert same, "%s was written by a failing call" % name


def expect_failure(func, args, exc, fragment):
    refs = [sys.getrefcount(a) for a in watched(args)]
    with pytest.raises(exc) as info:
        func(*args)
    assert fragment in str(info.value), (
        "%s: %r does not say %r" % (exc.__name__, str(info.value), fragment))
    del info
    assert [sys.getrefcount(a) for a in watched(args)] == refs


def no_growth(func, args, exc):
    """N_TRACE_CALLS failing calls, after a warm-up, grow the traced memory
    by less than TRACE_GROWTH_LIMIT bytes."""
    def calls(n):
        for _ in range(n):
            try:
                func(*args)
            except exc:
                pass
    tracemalloc.start()
    try:
        calls(20)
        gc.collect()
        before = tracemalloc.take_snapshot()
        calls(N_TRACE_CALLS)
        gc.collect()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    stats = after.compare_to(before, "lineno")
    growth = sum(s.size_diff for s in stats)
    assert growth < TRACE_GROWTH_LIMIT, (
        "%d bytes more after %d failing calls; largest: %s"
        % (growth, N_TRACE_CALLS, stats[:3]))


# ---- _core.run -----------------------------------------------------------

@pytest.mark.parametrize("ndim, changes, exc, fragment", list(run_cases()))
def test_run_rejects(ndim, changes, exc, fragment):
    args = build(ndim, changes)
    before = snapshot(args)
    expect_failure(_core.run, args, exc, fragment)
    assert_unchanged(args, before)


@pytest.mark.parametrize("ndim, changes, exc, fragment", list(run_cases()))
def test_run_rejects_without_leaking(ndim, changes, exc, fragment):
    no_growth(_core.run, build(ndim, changes), exc)


def test_run_read_only_out():
    args = build(1, {"out": read_only})
    before = snapshot(args)
    expect_failure(_core.run, args, ValueError, "read-only")
    assert_unchanged(args, before)


@pytest.mark.parametrize("backend", ["BACKEND_CPU", "BACKEND_CPU_TC"])
@pytest.mark.parametrize("which", ["grid", "weights"])
def test_run_reads_read_only_inputs(backend, which):
    """grid and weights are only read: read-only ones are fine."""
    ref = build(1, {"backend": replace(getattr(_core, backend))})
    _core.run(*ref)
    args = build(1, {which: read_only,
                     "backend": replace(getattr(_core, backend))})
    before = snapshot(args)
    _core.run(*args)
    np.testing.assert_array_equal(args[2], ref[2])
    assert_unchanged(args[:2], before[:2])


@pytest.mark.parametrize("path", [-1, 99])
def test_run_bad_path_code(path):
    """The path code is the CUDA engine's: checked before any device."""
    args = build(1, {"backend": replace(_core.BACKEND_CUDA),
                     "path": replace(path)})
    before = snapshot(args)
    fragment = "path" if CUDA_BUILT else "no CUDA engine"
    expect_failure(_core.run, args, ValueError, fragment)
    assert_unchanged(args, before)


@pytest.mark.parametrize("count", [0, 10, 12])
def test_run_argument_count(count):
    args = build(1, {})
    args = (args + (None,))[:count]
    expect_failure(_core.run, args, TypeError, "argument")


@pytest.mark.parametrize("backend", ["BACKEND_CPU", "BACKEND_CPU_TC"])
@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_run_success_keeps_references(backend, ndim):
    args = build(ndim, {"backend": replace(getattr(_core, backend))})
    refs = [sys.getrefcount(a) for a in watched(args)]
    for _ in range(50):
        info = _core.run(*args)
        # the caller holds the only reference to the result
        assert sys.getrefcount(info) == 2
        assert info["backend"] == ("cpu" if backend == "BACKEND_CPU"
                                   else "cpu-tc")
        del info
    assert [sys.getrefcount(a) for a in watched(args)] == refs


def test_run_success_does_not_leak():
    args = build(2, {})
    no_growth(_core.run, args, ())


def reference_steps(grid, weights, steps):
    """Periodic correlation repeated: the 1D oracle of the aliasing tests."""
    r = len(weights) // 2
    u = grid.copy()
    for _ in range(steps):
        u = sum(w * np.roll(u, r - k) for k, w in enumerate(weights))
    return u


@pytest.mark.parametrize("backend", ["BACKEND_CPU", "BACKEND_CPU_TC"])
def test_run_out_may_be_grid(backend):
    args = dict(good_run(1), backend=getattr(_core, backend))
    expected = reference_steps(args["grid"], args["weights"], args["steps"])
    args["out"] = args["grid"]
    _core.run(*(args[name] for name in RUN_ARGS))
    np.testing.assert_allclose(args["grid"], expected, rtol=1e-12,
                               atol=1e-15)


@pytest.mark.parametrize("backend", ["BACKEND_CPU", "BACKEND_CPU_TC"])
def test_run_out_may_be_weights(backend):
    """The engine copies the weights before it writes out."""
    grid = np.array([1.0, -2.0, 3.0])
    weights = np.array([0.25, 0.5, 0.125])
    expected = reference_steps(grid, weights, 3)
    _core.run(grid, weights, weights, 3, _core.MODE_WRAP, 0.0,
              getattr(_core, backend), _core.PATH_AUTO, 0, False, None)
    np.testing.assert_allclose(weights, expected, rtol=1e-12)


# ---- _core.run_device: every check before the device --------------------

def good_device():
    return dict(in_ptr=1 << 20, in_dtype=_core.DTYPE_FLOAT64,
                in_strides=(8 * 64 * 4, 8 * 64, 8), out_ptr=1 << 21,
                out_strides=(8 * 64 * 4, 8 * 64, 8), shape=(1, 4, 64),
                weights=np.full((3, 3), 1.0 / 9), steps=1,
                mode=_core.MODE_WRAP, cval=0.0, path=_core.PATH_AUTO,
                wait0=0, wait1=0, run_stream=0, interruptible=False,
                progress=None)


DEVICE_ARGS = tuple(good_device())

DEVICE_CASES = [
    ("in_strides-list", {"in_strides": [8, 8, 8]}, ValueError,
     "in_strides must be a tuple of 3 integers"),
    ("out_strides-pair", {"out_strides": (8, 8)}, ValueError,
     "out_strides must be a tuple of 3 integers"),
    ("shape-str", {"shape": (1, "4", 64)}, TypeError, "integer"),
    ("shape-huge", {"shape": (1, 4, 2 ** 70)}, OverflowError, ""),
    ("weights-float32", {"weights": np.ones(3, np.float32)}, TypeError,
     "float64"),
    ("weights-big-endian", {"weights": (np.ones(3) / 3).astype(">f8")}, TypeError,
     "float64"),
    ("weights-strided", {"weights": strided(np.ones(3))}, TypeError,
     "C-contiguous"),
    ("weights-ndim-0", {"weights": np.array(1.0)}, TypeError, "1 to 3"),
    ("weights-ndim-4", {"weights": np.ones((1, 1, 1, 1))}, TypeError,
     "1 to 3"),
    ("weights-even", {"weights": np.ones((3, 2))}, ValueError, "odd size"),
    ("weights-empty", {"weights": np.zeros((0,))}, ValueError, "odd size"),
    ("weights-nan", {"weights": np.array([0.5, np.nan, 0.5])}, ValueError,
     "finite"),
    ("steps-negative", {"steps": -1}, ValueError, "steps < 0"),
    ("mode-bad", {"mode": 99}, ValueError, "mode"),
    ("dtype-negative", {"in_dtype": -1}, ValueError, "dtype code"),
    ("dtype-past-last", {"in_dtype": 1000}, ValueError, "dtype code"),
    ("shape-empty", {"shape": (1, 0, 64)}, ValueError, "empty shape"),
    ("in-null", {"in_ptr": 0}, ValueError, "NULL"),
]


def device_cases():
    for case_id, changes, exc, fragment in DEVICE_CASES:
        if not CUDA_BUILT:   # parsed, then refused as a whole
            exc, fragment = RuntimeError, "no CUDA engine"
        yield pytest.param(changes, exc, fragment, id=case_id)
    # argument parsing comes first in every build
    yield pytest.param({"weights": [1.0, 1.0, 1.0]}, TypeError, "ndarray",
                       id="weights-list")
    yield pytest.param({"in_ptr": "0"}, TypeError, "int", id="in_ptr-str")
    yield pytest.param({"steps": 1.0}, TypeError, "integer",
                       id="steps-float")


def build_device(changes):
    args = good_device()
    args.update(changes)
    return tuple(args[name] for name in DEVICE_ARGS)


@pytest.mark.parametrize("changes, exc, fragment",
                         list(device_cases()))
def test_run_device_rejects(changes, exc, fragment):
    args = build_device(changes)
    before = [np.array(a, copy=True) if isinstance(a, np.ndarray) else None
              for a in args]
    expect_failure(_core.run_device, args, exc, fragment)
    for a, b in zip(args, before):
        if b is not None:
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("changes, exc, fragment",
                         list(device_cases()))
def test_run_device_rejects_without_leaking(changes, exc, fragment):
    no_growth(_core.run_device, build_device(changes), exc)


@pytest.mark.parametrize("count", [0, 15, 17])
def test_run_device_argument_count(count):
    args = (build_device({}) + (None,))[:count]
    expect_failure(_core.run_device, args, TypeError, "argument")


# ---- the other functions ---------------------------------------------------

OTHER_CASES = [
    # host buffers are checked before anything touches a device
    ("to_device-list", _core.to_device, (0, [1.0]), TypeError, "ndarray"),
    ("to_device-strided", _core.to_device, (1 << 20, strided(np.ones(4))),
     ValueError, "C-contiguous"),
    ("to_host-strided", _core.to_host, (strided(np.ones(4)), 1 << 20),
     ValueError, "C-contiguous"),
    ("to_host-read-only", _core.to_host, (read_only(np.ones(4)), 1 << 20),
     ValueError, "writeable"),
    ("to_host-arguments-swapped", _core.to_host, (1 << 20, np.ones(4)),
     TypeError, "ndarray"),
    ("device_alloc-negative", _core.device_alloc, (-1,), ValueError,
     ">= 0"),
    ("device_alloc-str", _core.device_alloc, ("8",), TypeError, "integer"),
    ("device_alloc-huge", _core.device_alloc, (2 ** 70,), OverflowError, ""),
    ("device_free-str", _core.device_free, ("0",), TypeError, "int"),
    ("clear_cache-arg", _core.clear_cache, (1,), TypeError, "argument"),
    ("cache_info-arg", _core.cache_info, (1,), TypeError, "argument"),
    ("cuda_info-arg", _core.cuda_info, (1,), TypeError, "argument"),
    ("cuda_mem_info-arg", _core.cuda_mem_info, (1,), TypeError, "argument"),
    ("cuda_current_device-arg", _core.cuda_current_device, (1,), TypeError,
     "argument"),
    ("cuda_set_device-str", _core.cuda_set_device, ("0",), TypeError,
     "integer"),
    ("cuda_set_device-none", _core.cuda_set_device, (), TypeError,
     "argument"),
    ("cuda_stream_synchronize-str", _core.cuda_stream_synchronize, ("1",),
     TypeError, "int"),
    ("dlpack_info-object", _core.dlpack_info, (object(),), TypeError,
     "dltensor"),
    ("dlpack_export-shape-list", _core.dlpack_export,
     (1 << 20, 0, [4, 4], object()), TypeError, "tuple"),
    ("dlpack_export-ndim-0", _core.dlpack_export,
     (1 << 20, 0, (), object()), ValueError, "ndim 1 to 3"),
    ("dlpack_export-ndim-4", _core.dlpack_export,
     (1 << 20, 0, (1, 1, 1, 1), object()), ValueError, "ndim 1 to 3"),
    ("dlpack_export-shape-str", _core.dlpack_export,
     (1 << 20, 0, (4, "4"), object()), TypeError, "integer"),
]


@pytest.mark.parametrize("func, args, exc, fragment",
                         [pytest.param(*c[1:], id=c[0]) for c in OTHER_CASES])
def test_other_functions_reject(func, args, exc, fragment):
    before = [np.array(a, copy=True) if isinstance(a, np.ndarray) else None
              for a in args]
    expect_failure(func, args, exc, fragment)
    for a, b in zip(args, before):
        if b is not None:
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("func, args, exc, fragment",
                         [pytest.param(*c[1:], id=c[0]) for c in OTHER_CASES])
def test_other_functions_reject_without_leaking(func, args, exc, fragment):
    no_growth(func, args, exc)


def test_dlpack_export_releases_owner():
    """The capsule holds its owner until it is gone, and no longer."""
    owner = object()
    refs = sys.getrefcount(owner)
    capsule = _core.dlpack_export(1 << 20, 0, (4, 4), owner)
    assert sys.getrefcount(owner) == refs + 1
    del capsule
    gc.collect()
    assert sys.getrefcount(owner) == refs


@pytest.mark.skipif(HAVE_CUDA, reason="checks the answer without a GPU")
@pytest.mark.parametrize("func, args", [
    (_core.cuda_current_device, ()), (_core.cuda_set_device, (0,)),
    (_core.cuda_stream_synchronize, (1,))], ids=["current", "set", "sync"])
def test_device_calls_without_a_usable_gpu(func, args):
    """No GPU (or no CUDA in the build): a RuntimeError that says so."""
    with pytest.raises(RuntimeError, match="CUDA"):
        func(*args)


@pytest.mark.gpu
@pytest.mark.skipif(not HAVE_CUDA, reason="needs a GPU")
def test_device_selection():
    """The current device can be read and set again; a device index past
    the visible ones is a ValueError naming the range; the legacy stream
    can be waited for."""
    count = _core.cuda_info()[1]
    before = _core.cuda_current_device()
    assert 0 <= before < count
    try:
        for device in range(count):
            _core.cuda_set_device(device)
            assert _core.cuda_current_device() == device
        for bad in (count, -1):
            with pytest.raises(ValueError, match="0 to %d" % (count - 1)):
                _core.cuda_set_device(bad)
        _core.cuda_stream_synchronize(1)
    finally:
        _core.cuda_set_device(before)
