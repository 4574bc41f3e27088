"""Device arrays as the package parses them, without a GPU.

The protocols are read in plain Python (CUDA Array Interface) and C
(DLPack capsules), before the GPU engine is asked for, so every
malformed array gets its own clear error on any machine; a well-formed
one on a build or machine without the CUDA engine gets a TypeError that
says why, and so does a CPU backend asked to run a device array.
"""
import sys

import numpy as np
import pytest

import convstencil as cs
from conftest import HAVE_CUDA
from convstencil import _core, _device


class FakeCAI:
    """An object that says it is a device array (its pointer is bogus)."""

    def __init__(self, **cai):
        self.__cuda_array_interface__ = cai


def cai(shape=(8, 9), typestr="<f8", data=(4096, False), version=3,
        **extra):
    d = dict(version=version, shape=shape, typestr=typestr, data=data)
    d.update(extra)
    return d


BAD = [
    (cai(version=1), ValueError, "version"),
    (cai(version=None), ValueError, "version"),
    ({k: v for k, v in cai().items() if k != "typestr"}, ValueError,
     "typestr"),
    (cai(typestr="<c16"), TypeError, "not a real type"),
    (cai(typestr="|O"), TypeError, "not a real type"),
    (cai(typestr=">f8"), ValueError, "big-endian"),
    (cai(typestr="nonsense"), ValueError, "typestr"),
    (cai(shape=[8, 9]), ValueError, "shape"),
    (cai(shape=(8, -1)), ValueError, "shape"),
    (cai(strides=(72,)), ValueError, "strides"),
    (cai(strides=(72, 4)), ValueError, "multiples"),
    (cai(strides=(72.0, 8)), ValueError, "strides"),
    (cai(data=4096), ValueError, "data"),
    (cai(data=(4096, "no")), ValueError, "data"),
    (cai(data=(-8, False)), ValueError, "data"),
    (cai(mask=FakeCAI(**cai())), ValueError, "mask"),
    (cai(stream=0), ValueError, "stream"),
    (cai(stream="s"), ValueError, "stream"),
]


@pytest.mark.parametrize("iface,exc,match", BAD,
                         ids=["v1", "vNone", "no-typestr", "complex",
                              "object", "big-endian", "bad-typestr",
                              "shape-list", "shape-negative", "strides-len",
                              "strides-unaligned", "strides-float",
                              "data-int", "data-flag", "data-negative",
                              "mask", "stream-0", "stream-str"])
def test_malformed_interface_is_refused(iface, exc, match):
    with pytest.raises(exc, match=match):
        cs.apply(FakeCAI(**iface), "heat2d")


def test_malformed_out_is_refused():
    grid = FakeCAI(**cai())
    with pytest.raises(ValueError, match="read-only"):
        cs.apply(grid, "heat2d", out=FakeCAI(**cai(data=(8192, True))))
    with pytest.raises(TypeError, match="float64"):
        cs.apply(grid, "heat2d", out=FakeCAI(**cai(typestr="<f4")))
    with pytest.raises(ValueError, match="shape"):
        cs.apply(grid, "heat2d", out=FakeCAI(**cai(shape=(9, 8))))
    with pytest.raises(TypeError, match="GPU array"):
        cs.apply(grid, "heat2d", out=np.zeros((8, 9)))
    with pytest.raises(TypeError, match="grid is not"):
        cs.apply(np.zeros((8, 9)), "heat2d", out=grid)


def test_wrong_ndim_is_refused():
    with pytest.raises(ValueError, match="2D stencil"):
        cs.apply(FakeCAI(**cai(shape=(8, 9, 3), strides=None)), "heat2d")
    with pytest.raises(ValueError, match="empty"):
        cs.apply(FakeCAI(**cai(shape=(0, 9))), "heat2d")


@pytest.mark.parametrize("backend", ["cpu", "cpu-tc"])
def test_cpu_backend_refuses_device_arrays(backend):
    with pytest.raises(TypeError, match="host memory"):
        cs.apply(FakeCAI(**cai()), "heat2d", backend=backend)


@pytest.mark.skipif(HAVE_CUDA, reason="the CUDA engine is usable here")
def test_device_array_without_cuda_says_why():
    with pytest.raises(TypeError, match="only the CUDA engine runs"):
        cs.apply(FakeCAI(**cai()), "heat2d")
    with pytest.raises(TypeError, match="only the CUDA engine runs"):
        cs.apply(FakeCAI(**cai()), "heat2d", backend="cuda")


@pytest.mark.gpu
@pytest.mark.skipif(not HAVE_CUDA, reason="needs the CUDA engine")
def test_bogus_pointer_is_refused_by_the_engine():
    with pytest.raises(ValueError, match="not memory CUDA knows|not in "
                                         "device memory"):
        cs.apply(FakeCAI(**cai()), "heat2d")


def test_host_grid_refuses_stream():
    with pytest.raises(TypeError, match="stream"):
        cs.apply(np.zeros((5, 5)), "heat2d", stream=1)


def test_a_stream_must_be_a_stream():
    with pytest.raises(TypeError, match="stream"):
        cs.apply(FakeCAI(**cai()), "heat2d", stream="fast")
    with pytest.raises(ValueError, match="stream"):
        cs.apply(FakeCAI(**cai()), "heat2d", stream=-3)


def test_interface_parsing():
    v = _device.device_view(FakeCAI(**cai(shape=(4, 5), typestr="<i2",
                                           strides=(-10, 2),
                                           stream=7)))
    assert v.shape == (4, 5) and v.dtype == np.int16
    assert v.code == _core.DTYPE_INT16 and v.stream == 7
    assert v.strides_3d() == (0, -10, 2) and v.shape_3d() == (1, 4, 5)
    # element (0, 0) at 4096; row 3 at 4096 - 30
    assert v.span() == (4096 - 30, 4096 + 8 + 2)
    c = _device.device_view(FakeCAI(**cai(shape=(3, 4, 5), version=2)))
    assert c.strides == (160, 40, 8) and c.stream == 0
    assert _device.device_view(np.zeros(3)) is None
    assert _device.device_view([1.0, 2.0]) is None


PLAIN = [cai(), cai(shape=(7,)), cai(shape=(3, 4, 5)),
         cai(strides=(72, 8)), cai(strides=(-72, -8)),
         cai(shape=(3, 4, 5), strides=(8, 24, 96)), cai(stream=None),
         cai(stream=7), cai(mask=None), cai(data=(4096, True)),
         cai(data=(0, False)), cai(data=(2 ** 64 - 8, False))]
NOT_PLAIN = [d for d, _, _ in BAD] + [
    cai(version=2), cai(typestr="<f4"), cai(typestr="=f8"),
    cai(shape=(8, 0)), cai(shape=(1, 2, 3, 4)), cai(shape=()),
    cai(shape=(np.int64(8), 9)), cai(shape=(True, 9)),
    cai(strides=(72, True)), cai(strides=(72, 8, 8)),
    cai(data=(4096.0, False)), cai(data=(True, False)),
    cai(data=(2 ** 64, False)), cai(data=[4096, False]),
    cai(stream=True), cai(stream=2 ** 70), {}, None, "cai", [1, 2],
    type("DictKind", (dict,), {})(cai())]


def test_plain_interfaces_are_read_in_c():
    """The short path of one step between device arrays reads an
    interface in C only where it is of the plain kind (version 3, <f8,
    exact ints, no mask), and leaves every other (valid or not) to the
    Python reader above, which says what is wrong."""
    for d in PLAIN:
        assert _core.cai_plain_ndim(d) == len(d["shape"]), d
    for d in NOT_PLAIN:
        assert _core.cai_plain_ndim(d) == 0, d


@pytest.mark.parametrize("iface,exc,match", BAD[:6])
def test_a_malformed_out_of_the_short_path_is_refused(iface, exc, match):
    """One step with out= (the short path's call): a malformed out gets
    the same error as a malformed grid."""
    with pytest.raises(exc, match=match):
        cs.apply(FakeCAI(**cai()), "heat2d", out=FakeCAI(**iface))


@pytest.mark.parametrize("shape,strides", [
    ((8.0, 9), None), ((True, 9), None), ((np.int64(8), 9), None),
    ((8, 9), (72.0, 8)), ((8, 9), (72, True))],
    ids=["float", "bool", "numpy-int", "float-stride", "bool-stride"])
def test_remembered_layouts_stay_exact(shape, strides):
    """A layout parsed once is remembered, but an equal shape or strides
    of another type (1.0 == True == 1) is refused as before."""
    good = dict(shape=tuple(int(n) for n in shape),
                strides=None if strides is None else (72, 8))
    for _ in range(2):  # parsed, then remembered
        view = _device.device_view(FakeCAI(**cai(**good)))
        assert view.shape == good["shape"]
    with pytest.raises(ValueError, match="shape|strides"):
        _device.device_view(FakeCAI(**cai(shape=shape, strides=strides)))


def test_remembered_layouts_are_bounded():
    for n in range(1, _device._LAYOUTS_KEPT + 50):
        assert _device.device_view(FakeCAI(**cai(shape=(n,)))).shape == (n,)
    assert len(_device._LAYOUTS) <= _device._LAYOUTS_KEPT


def test_dlpack_capsules_are_read_without_consuming():
    a = np.arange(12.0).reshape(3, 4)[:, ::2]
    capsule = a.__dlpack__()
    info = _core.dlpack_info(capsule)
    assert info["device_type"] == 1  # the CPU
    assert info["shape"] == (3, 2)
    assert info["strides"] == (4, 2)  # elements
    assert (info["code"], info["bits"], info["lanes"]) == (2, 64, 1)
    assert info["data"] == a.__array_interface__["data"][0]
    # not consumed: NumPy can still take it
    np.testing.assert_array_equal(np.from_dlpack(_Capsuled(capsule)), a)
    with pytest.raises(TypeError, match="dltensor"):
        _core.dlpack_info(object())


class _Capsuled:
    """Hands out one capsule, as a producer's __dlpack__ would."""

    def __init__(self, capsule):
        self.capsule = capsule

    def __dlpack__(self, **kwargs):
        return self.capsule

    def __dlpack_device__(self):
        return (1, 0)


class FakeDLPack:
    """Claims a CUDA device but hands out a host capsule."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, stream=None):
        return self.array.__dlpack__()

    def __dlpack_device__(self):
        return (2, 0)


def test_dlpack_host_capsule_from_a_cuda_claim_is_refused():
    with pytest.raises(TypeError, match="not a CUDA device"):
        cs.apply(FakeDLPack(np.zeros((4, 4))), "heat2d")


def test_dlpack_other_devices_are_refused():
    class Rocm(FakeDLPack):
        def __dlpack_device__(self):
            return (10, 0)

    with pytest.raises(TypeError, match="device type 10"):
        cs.apply(Rocm(np.zeros((4, 4))), "heat2d")


def test_dlpack_export_holds_its_owner():
    owner = object()
    before = sys.getrefcount(owner)
    capsule = _core.dlpack_export(123456, 0, (3, 4), owner)
    assert sys.getrefcount(owner) == before + 1
    info = _core.dlpack_info(capsule)
    assert info["data"] == 123456 and info["shape"] == (3, 4)
    assert info["strides"] == (4, 1) and info["device_type"] == 2
    del capsule
    assert sys.getrefcount(owner) == before


@pytest.mark.skipif(HAVE_CUDA, reason="the CUDA engine is usable here")
def test_cache_without_cuda_is_empty():
    assert cs.clear_cache() == 0
    assert cs.cache_info() == {"device_bytes": 0, "blocks": 0,
                               "pinned_bytes": 0, "lanes": 0,
                               "host_bytes": 0}
    with pytest.raises(RuntimeError, match="CUDA"):
        cs.DeviceArray((4, 4))


def test_a_fresh_cupy_result_is_described_without_its_interface(
        monkeypatch):
    """The result apply() allocates for a CuPy grid is read from its
    pointer, not its __cuda_array_interface__ (a few microseconds of a
    small call), and is ordered on the stream the grid's interface named,
    as its own interface would say."""
    import types

    class FakeCupyArray:
        __module__ = "cupy"

        def __init__(self, shape):
            self.shape = shape
            self.data = types.SimpleNamespace(ptr=8192)

        @property
        def __cuda_array_interface__(self):
            raise AssertionError("the interface was asked for")

    fake = types.SimpleNamespace(
        __name__="cupy", float64=np.float64,
        empty=lambda shape, dtype: FakeCupyArray(shape))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    monkeypatch.setattr(_device, "_MAKERS", {})
    monkeypatch.setattr(_device, "_POINTERS", {})
    grid = FakeCupyArray((4, 5))
    source = _device.DeviceView(4096, (4, 5), (40, 8), np.dtype(np.float64),
                                _core.DTYPE_FLOAT64, True, 77, None, grid,
                                grid)
    result = _device.new_like(grid, (4, 5))
    assert isinstance(result, FakeCupyArray)
    view = _device.fresh_view(result, source, 1)
    assert (view.ptr, view.shape, view.strides, view.stream) == (
        8192, (4, 5), (40, 8), 77)
    assert view.code == _core.DTYPE_FLOAT64 and not view.readonly
    assert view.keep is result
    # a kind without a known pointer is read through its interface
    other = FakeCAI(**cai(shape=(4, 5)))
    assert _device.fresh_view(other, source, 1).ptr == 4096
