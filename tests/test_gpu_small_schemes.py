"""Schemes on the GPU through convstencil.apply, on grids small enough for
the CPU emulation of CUDA: device arrays (convstencil.DeviceArray and a
pure-Python CUDA Array Interface producer of any dtype and strides) in
and out, parameter fields on the device, out= (in place, swapped, the
grids themselves), every= with the tuple, host grids on backend "cuda";
each against the reference loop (reference.scheme_apply).

Marked gpu_small: runs on a real GPU and on the emulated build
(CONVSTENCIL_CUDA=emulate).
"""
import numpy as np
import pytest

import convstencil as cs
import reference
from convstencil import _core
from cai_support import StridedCAI, download, upload
from conftest import assert_close, gpu_small

pytestmark = gpu_small

MODES = ["constant", "wrap", "nearest", "reflect", "mirror"]
SHAPES = {1: (37,), 2: (11, 13), 3: (5, 6, 7)}


def device_array(host):
    host = np.ascontiguousarray(host, dtype=np.float64)
    d = cs.DeviceArray(host.shape)
    _core.to_device(d.ptr, host)
    return d


def host_of(d):
    if isinstance(d, np.ndarray):
        return d
    return d.get() if isinstance(d, cs.DeviceArray) else download(d)


def gray_scott(ndim, mode="wrap"):
    u, v = cs.fields("u v")
    L = cs.laplacian(ndim)
    return cs.Scheme({u: u + (0.16 * L(u) - u * v ** 2 + 0.035 * (1 - u)),
                      v: v + (0.08 * L(v) + u * v ** 2 - 0.1 * v)},
                     mode=mode)


def wave(ndim, mode="constant"):
    u, up = cs.fields("u up")
    c2 = cs.param("c2")
    return cs.Scheme({u: 2 * u - up + c2 * cs.laplacian(ndim)(u), up: u},
                     mode=mode)


def check(out, ref, what):
    for i, (o, r) in enumerate(zip(out, ref)):
        assert_close(host_of(o), r, dict(field=i, case=what))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_device_arrays_every_mode(rng, ndim, mode):
    shape = SHAPES[ndim]
    hosts = (rng.uniform(0.5, 1.0, shape), rng.uniform(0.0, 0.3, shape))
    grids = tuple(device_array(h) for h in hosts)
    out = cs.apply(grids, gray_scott(ndim), steps=3, mode=mode, cval=0.2)
    assert all(isinstance(o, cs.DeviceArray) for o in out)
    check(out, reference.scheme_apply(hosts, gray_scott(ndim), 3,
                                      mode=mode, cval=0.2), "gray-scott")
    c2 = rng.uniform(0.0, 0.2, shape)
    out = cs.apply(grids, wave(ndim), steps=4, mode=mode,
                   params={"c2": device_array(c2)})
    check(out, reference.scheme_apply(hosts, wave(ndim), 4, {"c2": c2},
                                      mode=mode), "wave")
    for g, h in zip(grids, hosts):
        np.testing.assert_array_equal(g.get(), h)  # grids never written


def test_strided_and_other_dtypes(rng):
    # a flipped float32 view, a view of every other row, a transposed one
    grids = (upload(rng.uniform(0.5, 1.0, (9, 12)).astype(np.float32)
                    [:, ::-1]),
             upload(rng.uniform(0.0, 0.3, (18, 12))[::2]))
    c2 = rng.uniform(0.0, 0.2, (12, 9)).T
    as_read = tuple(download(g).astype(np.float64) for g in grids)
    out = cs.apply(grids, wave(2), steps=3, params={"c2": upload(c2)})
    check(out, reference.scheme_apply(as_read, wave(2), 3, {"c2": c2}),
          "strided")


def test_out_in_place_swapped_and_new(rng):
    hosts = (rng.uniform(0.5, 1.0, (10, 8)), rng.uniform(0.0, 0.3, (10, 8)))
    ref = reference.scheme_apply(hosts, gray_scott(2), 5)
    u, v = (device_array(h) for h in hosts)
    got = cs.apply((u, v), gray_scott(2), steps=5, out=(u, v))
    assert got[0] is u and got[1] is v
    check((u, v), ref, "in place")
    u, v = (device_array(h) for h in hosts)
    cs.apply((u, v), gray_scott(2), steps=5, out=(v, u))
    check((v, u), ref, "swapped")
    u, v = (device_array(h) for h in hosts)
    a, b = cs.DeviceArray((10, 8)), cs.DeviceArray((10, 8))
    cs.apply((u, v), gray_scott(2), steps=5, out=(a, b))
    check((a, b), ref, "fresh outs")
    with pytest.raises(ValueError, match="share memory"):
        cs.apply((u, v), gray_scott(2), out=(a, a))


def test_every_callback_with_device_tuples(rng):
    hosts = (rng.uniform(0.5, 1.0, (8, 9)), rng.uniform(0.0, 0.3, (8, 9)))
    grids = tuple(device_array(h) for h in hosts)
    seen = []
    out = cs.apply(grids, gray_scott(2), steps=7, every=3,
                   callback=lambda step, g: seen.append(
                       (step, g[0].get(), g[1].get())))
    assert [s for s, _, _ in seen] == [3, 6]
    check((seen[0][1], seen[0][2]),
          reference.scheme_apply(hosts, gray_scott(2), 3), "step 3")
    check(out, reference.scheme_apply(hosts, gray_scott(2), 7), "step 7")
    info = cs.last_run_info()
    assert info["scheme"] and info["device_array"] and info["steps"] == 7


@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_host_grids_on_backend_cuda(rng, ndim):
    shape = SHAPES[ndim]
    hosts = (rng.uniform(0.5, 1.0, shape), rng.uniform(0.0, 0.3, shape))
    seen = []
    out = cs.apply(hosts, gray_scott(ndim), steps=4, backend="cuda",
                   every=2, callback=lambda s, g: seen.append(g[1].copy()))
    assert all(isinstance(o, np.ndarray) for o in out)
    check(out, reference.scheme_apply(hosts, gray_scott(ndim), 4), "host")
    assert_close(seen[0], reference.scheme_apply(hosts, gray_scott(ndim),
                                                 2)[1], {"case": "step 2"})
    assert cs.last_run_info()["backend"] == "cuda"


def test_mixed_kinds_are_refused(rng):
    host = rng.uniform(0, 1, (6, 6))
    with pytest.raises(TypeError, match="mix"):
        cs.apply((device_array(host), host), gray_scott(2))
    with pytest.raises(TypeError, match="host array"):
        cs.apply((device_array(host), device_array(host)), wave(2),
                 params={"c2": host})
