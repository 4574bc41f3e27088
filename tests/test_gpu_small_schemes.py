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


def check_placed(out, ref, what):
    """check(), where ref may hold NaN and infinities: each lands where
    the reference puts it, the finite values close."""
    for k, (o, w) in enumerate(zip(out, ref)):
        got = host_of(o)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(w),
                                      err_msg=repr(what))
        inf = np.isinf(w)
        np.testing.assert_array_equal(got[inf], w[inf], err_msg=repr(what))
        fin = np.isfinite(w)
        assert_close(got[fin], w[fin], dict(what, field=k))


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


# ---------------------------------------------------------------------------
# blocked passes (scheme_tb.cu): several steps of a 2D scheme per pass
# ---------------------------------------------------------------------------

def yee_2d():
    # two stages, one-sided differences along both axes, a parameter
    h, e = cs.fields("h e")
    c = cs.param("c")
    dx = cs.Stencil(weights=[[0.0, -1.0, 1.0]])
    dxb = cs.Stencil(weights=[[-1.0, 1.0, 0.0]])
    dy = cs.Stencil(weights=[[0.0], [-1.0], [1.0]])
    return cs.Scheme([{h: h + c * dx(e) - 0.2 * dy(e)},
                      {e: e + c * dxb(h)}])


def three_fields_box():
    # a wide stencil, three fields, a field no stage updates, a monomial
    # of three fields, a source (a parameter alone)
    a, b, k = cs.fields("a b k")
    s = cs.param("s")
    B = cs.Stencil("box2d49p")
    return cs.Scheme({a: 0.5 * B(a) + 0.25 * b - 0.1 * a * b * k + s,
                      b: 0.9 * b + 0.05 * cs.laplacian(2)(a)})


BLOCK_SCHEMES = {
    "gray-scott": (gray_scott, ()),
    "wave": (wave, ("c2",)),
    "yee": (lambda ndim, mode="constant": yee_2d(), ("c",)),
    "box-3-fields": (lambda ndim, mode="constant": three_fields_box(),
                     ("s",)),
}


@pytest.mark.parametrize("block", ["32x3", "64x5", "default"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(BLOCK_SCHEMES))
def test_blocked_passes_every_mode(rng, monkeypatch, name, mode, block):
    # grids smaller than a region, odd, and longer than several tiles;
    # step counts that are no multiple of a pass
    if block != "default":
        monkeypatch.setenv("CONVSTENCIL_SCHEME_BLOCK", block)
    make, pnames = BLOCK_SCHEMES[name]
    scheme = make(2)
    for shape, steps in [((3, 5), 4), ((23, 41), 7), ((70, 131), 11)]:
        hosts = tuple(rng.uniform(0.0, 1.0, shape) for _ in scheme.fields)
        params = {p: rng.uniform(0.0, 0.3, shape) for p in pnames}
        grids = tuple(device_array(h) for h in hosts)
        out = cs.apply(grids, scheme, steps=steps, mode=mode, cval=0.4,
                       params={p: device_array(v)
                               for p, v in params.items()})
        info = cs.last_run_info()
        what = dict(scheme=name, mode=mode, block=block, shape=shape,
                    steps=steps, path=info["path"])
        check(out, reference.scheme_apply(hosts, scheme, steps, params,
                                          mode=mode, cval=0.4), what)
        for g, h in zip(grids, hosts):
            np.testing.assert_array_equal(g.get(), h)  # ins never written
        if block != "default":
            assert info["path"] == "scheme-blocked", what


def test_blocked_passes_agree_with_one_step_passes(rng, monkeypatch):
    # the same sums in the same order: the two GPU paths agree bit for
    # bit, NaN and infinities included
    hosts = [rng.uniform(0.5, 1.0, (40, 70)), rng.uniform(0.0, 0.3, (40, 70))]
    hosts[0][5, 7] = np.nan
    hosts[1][30, 60] = np.inf
    results = {}
    for block in ["off", "64x4", "32x2"]:
        monkeypatch.setenv("CONVSTENCIL_SCHEME_BLOCK", block)
        out = cs.apply(tuple(device_array(h) for h in hosts),
                       gray_scott(2), steps=9, mode="reflect")
        results[block] = [o.get() for o in out]
        assert cs.last_run_info()["path"] == (
            "scheme" if block == "off" else "scheme-blocked")
    for block in ["64x4", "32x2"]:
        for got, want in zip(results[block], results["off"]):
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("outs", ["in place", "swapped", "fresh"])
def test_blocked_passes_out(rng, monkeypatch, outs):
    # outs that are the ins, the ins swapped, or new arrays; even and odd
    # pass counts (the passes alternate between the outs and scratch)
    monkeypatch.setenv("CONVSTENCIL_SCHEME_BLOCK", "32x2")
    shape = (30, 50)
    c2 = rng.uniform(0.0, 0.2, shape)
    for steps in (2, 3, 4, 6, 7):
        hosts = (rng.uniform(0.5, 1.0, shape), rng.uniform(0.0, 0.3, shape))
        ref = reference.scheme_apply(hosts, wave(2), steps, {"c2": c2})
        u, up = (device_array(h) for h in hosts)
        out = {"in place": (u, up), "swapped": (up, u),
               "fresh": (cs.DeviceArray(shape), cs.DeviceArray(shape))}[outs]
        got = cs.apply((u, up), wave(2), steps=steps, out=out,
                       params={"c2": device_array(c2)})
        assert got[0] is out[0] and got[1] is out[1]
        assert cs.last_run_info()["path"] == "scheme-blocked"
        check(got, ref, dict(outs=outs, steps=steps))


def test_blocked_pass_setting_is_checked(rng, monkeypatch):
    monkeypatch.setenv("CONVSTENCIL_SCHEME_BLOCK", "48x3")
    grids = tuple(device_array(rng.uniform(0, 1, (8, 9))) for _ in range(2))
    with pytest.raises(ValueError, match="CONVSTENCIL_SCHEME_BLOCK"):
        cs.apply(grids, gray_scott(2), steps=4)


# Streamed passes (csrc/cuda/scheme_stream.cu): one-stage 2D schemes of
# one or two fields, stencils within 3 x 3, wrap or constant.  Each entry:
# the scheme, its parameter fields, the deepest pass its kernel holds
# (sch_stream_max_depth).  The leapfrog waves, Gray-Scott, Allen-Cahn and
# the heat equation with a constant source run kernels with their
# patterns and pointwise terms compiled in; the others the kernels that
# read them at run time.
def plain_wave():
    u, up = cs.fields("u up")
    return cs.Scheme({u: 2 * u - up + 0.2 * cs.laplacian(2)(u), up: u})


def damped_wave_box():
    # a 3 x 3 box and a damping term: patterns read at run time
    u, up = cs.fields("u up")
    box = cs.Stencil(weights=np.arange(1.0, 10.0).reshape(3, 3) / 50)
    return cs.Scheme({u: 1.9 * u - 0.9 * up + box(u) - 0.3 * u, up: u})


def heat_constant_source():
    h = cs.fields("h")
    return cs.Scheme({h: h + 0.2 * cs.laplacian(2)(h) + 0.01})


def heat_with_source():
    h = cs.fields("h")
    s = cs.param("s")
    return cs.Scheme({h: h + 0.2 * cs.laplacian(2)(h) + s})


def advection_reaction():
    # a one-sided and a central difference (taps of no pattern), a
    # parameter alone and times a field, a cube
    h = cs.fields("h")
    s = cs.param("s")
    dx = cs.Stencil(weights=[[0.0, -1.0, 1.0]])
    dy = cs.Stencil(weights=[[-0.5], [0.0], [0.5]])
    return cs.Scheme({h: h - 0.1 * dx(h) - 0.05 * dy(h) + 0.02 * s * h
                      - 0.01 * h ** 3 + s})


def allen_cahn():
    h = cs.fields("h")
    return cs.Scheme({h: h + 0.1 * cs.laplacian(2)(h) + 0.05 * (h - h ** 3)})


def scaled_diffusion():
    # a conductivity field times the Laplacian, a kept field
    h, k = cs.fields("h k")
    s = cs.param("s")
    return cs.Scheme({h: h + s * cs.laplacian(2)(h) + 0.1 * k * h})


STREAM_SCHEMES = {
    "wave": (plain_wave, (), 8),
    "wave-velocity": (lambda: wave(2), ("c2",), 6),
    "gray-scott": (lambda: gray_scott(2), (), 5),
    "allen-cahn": (allen_cahn, (), 8),
    "damped-wave-box": (damped_wave_box, (), 8),
    "heat-constant": (heat_constant_source, (), 8),
    "heat-source": (heat_with_source, ("s",), 6),
    "advection-reaction": (advection_reaction, ("s",), 6),
    "scaled-diffusion": (scaled_diffusion, ("s",), 3),
}


@pytest.mark.parametrize("mode", ["wrap", "constant"])
@pytest.mark.parametrize("name", sorted(STREAM_SCHEMES))
def test_streamed_passes_against_the_reference(rng, monkeypatch, name, mode):
    # forced depths (the last pass of a call may be shallower), grids of
    # one strip and of several, odd extents, non-finite values
    make, pnames, top = STREAM_SCHEMES[name]
    scheme = make()
    for depth in sorted({1, 2, 3, top}):
        monkeypatch.setenv("CONVSTENCIL_SCHEME_BLOCK", "stream%d" % depth)
        for shape, steps in [((16, 16), 5), ((23, 41), 7), ((70, 131), 11)]:
            hosts = tuple(rng.uniform(0.0, 1.0, shape)
                          for _ in scheme.fields)
            if shape == (23, 41):
                hosts[0][0, 0] = np.nan
                hosts[0][11, 20] = np.inf
                hosts[-1][22, 40] = -np.inf
            params = {p: rng.uniform(0.0, 0.3, shape) for p in pnames}
            grids = tuple(device_array(h) for h in hosts)
            out = cs.apply(grids, scheme, steps=steps, mode=mode, cval=0.4,
                           params={p: device_array(v)
                                   for p, v in params.items()})
            info = cs.last_run_info()
            what = dict(scheme=name, mode=mode, depth=depth, shape=shape)
            assert info["path"] == "scheme-streamed", what
            assert info["fused_depth"] == min(depth, top), what
            assert info["fused_passes"] == -(-steps // min(depth, top))
            want = reference.scheme_apply(hosts, scheme, steps, params,
                                          mode=mode, cval=0.4)
            check_placed(out, want, what)
            for g, h in zip(grids, hosts):
                np.testing.assert_array_equal(g.get(), h)


# 3D streamed passes (csrc/cuda/scheme_stream3.cu): one-stage 3D schemes
# of one or two fields, stencils within the 7-point star, wrap or
# constant.  The leapfrog wave and a field under the star run kernels with
# their patterns compiled in (6 levels); the others read them at run time.
def plain_wave3():
    u, up = cs.fields("u up")
    return cs.Scheme({u: 2 * u - up + 0.1 * cs.laplacian(3)(u), up: u})


def heat3():
    h = cs.fields("h")
    return cs.Scheme({h: h + 0.1 * cs.laplacian(3)(h)})


def heat3_sources():
    # a conductivity field times the Laplacian, a source field, a constant,
    # a central difference along z and a one-sided one along x (taps of no
    # pattern), a cube
    h = cs.fields("h")
    k, s = cs.param("k"), cs.param("s")
    dz = cs.Stencil(weights=np.array([-0.5, 0.0, 0.5]).reshape(3, 1, 1))
    dx = cs.Stencil(weights=np.array([-1.0, 1.0, 0.0]).reshape(1, 1, 3))
    return cs.Scheme({h: h + k * cs.laplacian(3)(h) - 0.05 * dz(h)
                      + 0.03 * dx(h) + s + 0.01 - 0.02 * h ** 3})


def kept_field3():
    # a field no update sets, read at the point and through a y difference
    h, g = cs.fields("h g")
    dy = cs.Stencil(weights=np.array([-0.5, 0.0, 0.5]).reshape(1, 3, 1))
    return cs.Scheme({h: h + 0.1 * cs.laplacian(3)(h) + 0.2 * dy(g)
                      - 0.1 * g * h})


STREAM3_SCHEMES = {
    "wave": (plain_wave3, (), 4),
    "heat": (heat3, (), 4),
    "heat-sources": (heat3_sources, ("k", "s"), 4),
    "gray-scott": (lambda: gray_scott(3), (), 3),
    "wave-velocity": (lambda: wave(3), ("c2",), 2),
    "kept-field": (kept_field3, (), 3),
}


@pytest.mark.parametrize("mode", ["wrap", "constant"])
@pytest.mark.parametrize("name", sorted(STREAM3_SCHEMES))
def test_streamed_3d_passes_against_the_reference(rng, monkeypatch, name,
                                                  mode):
    # forced depths (a last pass shallower), one tile and several, odd
    # extents, a segment split of the planes, non-finite values
    make, pnames, top = STREAM3_SCHEMES[name]
    scheme = make()
    cases = [((8, 8, 8), 3, None), ((11, 23, 41), 7, None),
             ((13, 34, 61), 5, "3")]
    for depth in sorted({1, top}):
        monkeypatch.setenv("CONVSTENCIL_SCHEME_BLOCK", "stream%d" % depth)
        for shape, steps, segments in cases:
            if segments is None:
                monkeypatch.delenv("CONVSTENCIL_SCHEME_SEGMENTS",
                                   raising=False)
            else:
                monkeypatch.setenv("CONVSTENCIL_SCHEME_SEGMENTS", segments)
            hosts = tuple(rng.uniform(0.0, 1.0, shape)
                          for _ in scheme.fields)
            if shape == (11, 23, 41):
                hosts[0][0, 0, 0] = np.nan
                hosts[0][5, 11, 20] = np.inf
                hosts[-1][10, 22, 40] = -np.inf
            params = {p: rng.uniform(0.0, 0.15, shape) for p in pnames}
            grids = tuple(device_array(h) for h in hosts)
            out = cs.apply(grids, scheme, steps=steps, mode=mode, cval=0.4,
                           params={p: device_array(v)
                                   for p, v in params.items()})
            info = cs.last_run_info()
            what = dict(scheme=name, mode=mode, depth=depth, shape=shape)
            assert info["path"] == "scheme-streamed", what
            assert info["fused_depth"] == min(depth, top), what
            want = reference.scheme_apply(hosts, scheme, steps, params,
                                          mode=mode, cval=0.4)
            check_placed(out, want, what)
            for g, h in zip(grids, hosts):
                np.testing.assert_array_equal(g.get(), h)


def test_streamed_3d_passes_do_not_take(rng, monkeypatch):
    # taps off the star, other modes, grids under 8 planes: the one-step
    # passes run, forced or not
    monkeypatch.setenv("CONVSTENCIL_SCHEME_BLOCK", "stream4")
    u, up = cs.fields("u up")
    box = cs.Scheme({u: 2 * u - up + 0.01 * cs.Stencil("box3d27p")(u),
                     up: u})
    for scheme, mode, shape in [(box, "wrap", (9, 9, 9)),
                                (plain_wave3(), "nearest", (9, 9, 9)),
                                (plain_wave3(), "wrap", (7, 12, 12))]:
        hosts = tuple(rng.uniform(0.0, 1.0, shape) for _ in scheme.fields)
        out = cs.apply(tuple(device_array(h) for h in hosts), scheme,
                       steps=3, mode=mode)
        assert cs.last_run_info()["path"] != "scheme-streamed", scheme
        check(out, reference.scheme_apply(hosts, scheme, 3, mode=mode),
              str(scheme))


@pytest.mark.parametrize("outs", ["in place", "swapped", "fresh"])
def test_streamed_passes_out(rng, outs):
    # the engine's own choice (streamed, 6 steps a pass) with outs that
    # are the ins, the ins swapped, or new arrays; pass counts even and
    # odd, a last pass shallower
    shape = (40, 70)
    c2 = rng.uniform(0.0, 0.2, shape)
    for steps in (2, 5, 6, 12, 17):
        hosts = (rng.uniform(0.5, 1.0, shape), rng.uniform(0.0, 0.3, shape))
        ref = reference.scheme_apply(hosts, wave(2), steps, {"c2": c2})
        u, up = (device_array(h) for h in hosts)
        out = {"in place": (u, up), "swapped": (up, u),
               "fresh": (cs.DeviceArray(shape), cs.DeviceArray(shape))}[outs]
        got = cs.apply((u, up), wave(2), steps=steps, out=out,
                       params={"c2": device_array(c2)})
        assert got[0] is out[0] and got[1] is out[1]
        assert cs.last_run_info()["path"] == "scheme-streamed"
        check(got, ref, dict(outs=outs, steps=steps))


def test_schemes_streamed_passes_do_not_take(rng, monkeypatch):
    # other modes, two stages, a 5 x 5 stencil, two stencils on one tap,
    # three fields, grids under 16 x 16: the other passes run, and the
    # forcing setting does not force what the kernel cannot take
    monkeypatch.setenv("CONVSTENCIL_SCHEME_BLOCK", "stream4")
    u, up = cs.fields("u up")
    overlapping = cs.Scheme({u: u + 0.1 * cs.laplacian(2)(u)
                             + 0.05 * cs.Stencil(weights=[[0.0, -1.0, 1.0]])(u)
                             - 0.1 * up, up: u})
    wide = cs.Scheme({u: 0.5 * cs.Stencil("star2d13p")(u) + 0.1 * up,
                      up: u})
    cases = [(plain_wave(), "nearest", (30, 30)),
             (plain_wave(), "wrap", (12, 40)),
             (overlapping, "wrap", (30, 30)),
             (wide, "wrap", (30, 30)),
             (yee_2d(), "constant", (30, 30)),
             (three_fields_box(), "constant", (30, 30))]
    for scheme, mode, shape in cases:
        pnames = list(scheme.params)
        hosts = tuple(rng.uniform(0.0, 1.0, shape) for _ in scheme.fields)
        params = {p: rng.uniform(0.0, 0.3, shape) for p in pnames}
        out = cs.apply(tuple(device_array(h) for h in hosts), scheme,
                       steps=5, mode=mode,
                       params={p: device_array(v)
                               for p, v in params.items()})
        assert cs.last_run_info()["path"] != "scheme-streamed", scheme
        check(out, reference.scheme_apply(hosts, scheme, 5, params,
                                          mode=mode), str(scheme))


@pytest.mark.parametrize("name", sorted(BLOCK_SCHEMES))
def test_explain_names_the_passes_the_engine_runs(rng, name):
    # explain() reads the engine's own planner: what it says is what the
    # run then records, for every scheme and a few step counts
    make, pnames = BLOCK_SCHEMES[name]
    scheme = make(2)
    shape = (90, 150)
    for steps in (1, 2, 5, 12):
        hosts = tuple(rng.uniform(0.0, 1.0, shape) for _ in scheme.fields)
        grids = tuple(device_array(h) for h in hosts)
        params = {p: device_array(rng.uniform(0.0, 0.3, shape))
                  for p in pnames}
        said = cs.explain(grids, scheme, steps=steps)
        cs.apply(grids, scheme, steps=steps, params=params)
        ran = cs.last_run_info()
        assert (said.path, said.fused_depth) == (ran["path"],
                                                 ran["fused_depth"]), steps
