"""Small cases that launch every GPU kernel once, for compute-sanitizer.

    compute-sanitizer --tool memcheck --error-exitcode 1 \\
        python tests/gpu_sanitize_cases.py [tb2d|tb3d|fold|onestep|scheme|split]
    compute-sanitizer --tool racecheck --error-exitcode 1 \\
        python tests/gpu_sanitize_cases.py [tb2d|tb3d|fold|onestep|scheme|split]

("tb2d", ...: those cases alone; "onestep" and "scheme" need CuPy.)
Covers the tensor-core kernels (tc2d, tc1d, and tc3d with dense, point
and zero planes) for every kernel height they are built for (ky = 1, 3,
5, 7), on grids that are and are not multiples of their tile (so partial
tiles read past the grid's edge), tc2d's blocks looping over several
tiles, fused passes with the band fix-up (along z too), the CUDA-core step in
1D/2D/3D (cc2d's and cc3d's instances, streaming along z, and heat3d's fused
passes on CUDA cores with their band recomputed in place included), the halo fill of every
boundary mode, and 1D grids folded into rows (the fold's halo fill and
end fix-up, partial last rows, payloads 7, 15 and 31, and between device
arrays without a load or a store), tb2d's temporal blocking (planar 3
x 3 kernels, pluses, outer products and full-rank boxes, passes and a
tail pass), tb3d's (3 x 3 x 3 stars and outer products), and engine
sessions (a grid kept in the engine's layout across rounds, boxes copied
out of and into it between them).  Each result is
compared with the CPU engine, so the run
also fails (exit status 1) on a wrong answer.
"""
import sys

import numpy as np

import convstencil as cs

MODES = ("constant", "wrap", "nearest", "reflect", "mirror")


def report(got, want, what):
    """Print `what` with got's error relative to want; whether it is
    within 1e-12."""
    err = np.linalg.norm(got - want) / np.linalg.norm(want)
    ok = err <= 1e-12
    print("%-4s %s rel %.2e" % ("ok" if ok else "FAIL", what, err))
    return ok


def check(grid, weights, steps, mode, backend):
    want = cs.apply(grid, weights=weights, steps=steps, mode=mode, cval=0.5,
                    backend="cpu")
    got = cs.apply(grid, weights=weights, steps=steps, mode=mode, cval=0.5,
                   backend=backend)
    info = cs.last_run_info()
    return report(got, want, "%-9s %-12s kernel %-9s grid %-12s steps %d -> "
                  "%s depth %d" % (backend, mode,
                                   "x".join(map(str, weights.shape)),
                                   "x".join(map(str, grid.shape)), steps,
                                   info["path"], info["fused_depth"]))


def device_run(cp, grid, host, name, steps, mode, cval, backend, what):
    """One preset on the CuPy array `grid` (holding `host`) against the
    CPU engine on host."""
    want = cs.apply(host, name, steps=steps, mode=mode, cval=cval,
                    backend="cpu")
    got = cp.asnumpy(cs.apply(grid, name, steps=steps, mode=mode, cval=cval,
                              backend=backend))
    return report(got, want, "device array %s %s %s" % (what, name, mode))


def main():
    rng = np.random.default_rng(2026)
    ok = True
    # tensor cores: every template height, full and partial tiles
    for kshape in ((1, 5), (3, 3), (5, 7), (7, 7)):
        w = rng.uniform(0.1, 1.0, kshape)
        w /= w.sum()
        for shape in ((32, 128), (45, 139)):
            grid = rng.standard_normal(shape)
            for mode in MODES:
                ok &= check(grid, w, 1, mode, "cuda-tc")
    # fused passes with the band fix-up, and the remainder
    for name in ("heat2d", "box2d9p"):
        w = cs.Stencil(name).weights
        grid = rng.standard_normal((70, 200))
        for mode in MODES:
            ok &= check(grid, w, 4, mode, "cuda-tc")
    # tc2d's persistent blocks handing tile buffers over: more tiles than
    # SMs (32 x 14 = 448 tiles), a plain pass and a banded fused one
    grid = rng.standard_normal((1000, 1700))
    ok &= check(grid, rng.uniform(0.1, 1.0, (7, 5)) / 20, 1, "wrap",
                "cuda-tc")
    ok &= check(grid, cs.Stencil("heat2d").weights, 3, "constant", "cuda-tc")
    # 1D folded into rows: one partial row, several rows with a last row
    # shorter than the halo, fused passes with the end fix-up
    for name in ("heat1d", "1d5p"):
        w = cs.Stencil(name).weights
        for n in (100, 8194):
            grid = rng.standard_normal(n)
            for mode in MODES:
                for steps in (2, 4, 16):  # payloads 7, 15 and 31
                    ok &= check(grid, w, steps, mode, "cuda-tc")
                ok &= check(grid, w, 2, mode, "cuda-core")
    # 3D on tensor cores: every template height, kz 3..7, full and partial
    # tiles, a kernel with point and zero planes, and fused passes with
    # the band along z
    for kshape in ((3, 1, 5), (5, 3, 3), (3, 5, 7), (7, 7, 7)):
        w = rng.uniform(0.1, 1.0, kshape)
        w /= w.sum()
        for shape in ((3, 32, 128), (4, 45, 139)):
            grid = rng.standard_normal(shape)
            for mode in ("constant", "wrap", "reflect"):
                ok &= check(grid, w, 1, mode, "cuda-tc")
    planes = np.zeros((5, 3, 3))
    planes[0, 0, 2] = 0.2          # point plane
    planes[2] = 0.05               # dense plane; planes 1 and 3 are zero
    planes[4, 1, 1] = 0.35         # point plane
    for mode in MODES:
        ok &= check(rng.standard_normal((6, 40, 130)), planes, 1, mode,
                    "cuda-tc")
    for name in ("heat3d", "box3d27p"):
        w = cs.Stencil(name).weights
        grid = rng.standard_normal((12, 40, 140))
        for mode in MODES:
            ok &= check(grid, w, 4, mode, "cuda-tc")
    # CUDA cores in every dimension, and a kernel past 7x7
    cases = [(rng.standard_normal(1000), cs.Stencil("1d5p").weights),
             (rng.standard_normal((45, 139)), cs.Stencil("box2d49p").weights),
             (rng.standard_normal((45, 139)), np.full((9, 11), 1 / 99)),
             (rng.standard_normal((9, 13, 40)), cs.Stencil("box3d27p").weights)]
    for grid, w in cases:
        for mode in MODES:
            ok &= check(grid, w, 2, mode, "cuda-core")
    ok &= tb2d_cases(rng)
    # cc2d: the box instance with persistent blocks walking several tiles
    # (1100 x 1700: 315 tiles of 128 x 32); the plus and outer-product
    # (box2d49p) instances on planes under tb2d's 16 rows
    box7 = rng.uniform(0.1, 1.0, (7, 7))
    ok &= check(rng.standard_normal((1100, 1700)), box7 / box7.sum(), 1,
                "reflect", "cuda-core")
    for name in ("star2d13p", "box2d49p"):
        ok &= check(rng.standard_normal((15, 1700)), cs.Stencil(name).weights,
                    1, "reflect", "cuda-core")
    ok &= tb3d_cases(rng)
    # cc3d, streaming along z: several z blocks and partial tiles, heat3d
    # fused two steps per pass (the band recomputed in place) with a
    # remainder, every instance (box 3 and 5, diamond 3, 5 and 7; narrow
    # tiles for a grid 9 columns wide), and a 7x7x7 box, which the generic
    # kernel runs; stars and outer products of side 3 on grids with an
    # extent under tb3d's 8
    grid = rng.standard_normal((20, 7, 70))
    for mode in MODES:
        ok &= check(grid, cs.Stencil("heat3d").weights, 5, mode, "cuda-core")
    narrow = rng.standard_normal((7, 150, 9))
    for name in ("heat3d", "box3d27p"):
        ok &= check(narrow, cs.Stencil(name).weights, 3, "constant",
                    "cuda-core")
    for side, diamond in ((5, False), (5, True), (7, True), (7, False)):
        w = rng.uniform(0.1, 1.0, (side, side, side))
        if diamond:
            z, y, x = np.indices(w.shape) - side // 2
            w[np.abs(z) + np.abs(y) + np.abs(x) > side // 2] = 0.0
        w /= w.sum()
        for mode in ("constant", "wrap"):
            ok &= check(grid, w, 1, mode, "cuda-core")
    ok &= device_array_cases(rng)
    ok &= fold_array_cases(rng)
    ok &= session_cases(rng)
    ok &= split_cases(rng)
    print("all ok" if ok else "FAILURES")
    return 0 if ok else 1


def tb2d_cases(rng):
    """tb2d: planar 3 x 3 kernels (a plus, an outer product, a box) and
    pluses, outer products and full-rank boxes of sides 5 and 7 on CUDA
    cores, T steps per trip to memory (depth 8, 4, 3 or 1, then a tail
    pass), tiles past every edge and several tiles per row and column,
    every mode; between the caller's CuPy arrays (no load, no store)
    where CuPy is there."""
    ok = True
    plus5 = np.zeros((5, 5))
    plus5[2, :] = plus5[:, 2] = 0.1
    box3 = rng.uniform(0.1, 1.0, (3, 3))
    # an outer product of side 5 with exact products (the planner's test)
    outer5 = np.outer([1.0, 4.0, 6.0, 4.0, 1.0], [1.0, 2.0, 3.0, 2.0, 1.0])
    box5 = rng.uniform(-0.3, 1.0, (5, 5))
    box7 = rng.uniform(-0.3, 1.0, (7, 7))
    for w in (cs.Stencil("heat2d").weights, cs.Stencil("box2d9p").weights,
              box3 / box3.sum(), cs.Stencil("star2d13p").weights, plus5,
              cs.Stencil("box2d49p").weights, outer5 / 256.0,
              box5 / np.abs(box5).sum(), box7 / np.abs(box7).sum()):
        for shape in ((70, 200), (301, 517)):
            for mode in MODES:
                ok &= check(rng.standard_normal(shape), w, 11, mode,
                            "cuda-core")
    for mode in ("constant", "wrap"):
        ok &= check(rng.standard_normal((3, 70, 131)), plus5[None], 2, mode,
                    "cuda-core")
    try:
        import cupy as cp
    except ImportError:
        print("skip tb2d between device arrays: no CuPy")
        return ok
    # C order and rows padded to 530 elements; depth 8 (3 for star2d13p
    # and box2d49p) then a tail pass
    host = rng.standard_normal((301, 517))
    wide = cp.asarray(rng.standard_normal((301, 530)))
    for name in ("heat2d", "box2d9p", "star2d13p", "box2d49p"):
        for grid in (cp.asarray(host), wide[:, :517]):
            grid[...] = cp.asarray(host)
            layout = "C" if grid.flags.c_contiguous else "padded"
            for mode in MODES:
                ok &= device_run(cp, grid, host, name, 11, mode, 0.0,
                                 "cuda-core", "tb2d " + layout)
    return ok


def tb3d_cases(rng):
    """tb3d: 3 x 3 x 3 stars and outer products on CUDA cores, 3 steps per
    trip to memory (passes and a tail pass), tiles inside the grid beside
    tiles at its edges, a grid of the least extent, every mode; between
    the caller's CuPy arrays (no load, no store) where CuPy is there."""
    ok = True
    for name in ("heat3d", "box3d27p"):
        w = cs.Stencil(name).weights
        for shape in ((12, 61, 150), (9, 8, 8)):
            for mode in MODES:
                ok &= check(rng.standard_normal(shape), w, 7, mode,
                            "cuda-core")
    try:
        import cupy as cp
    except ImportError:
        print("skip tb3d between device arrays: no CuPy")
        return ok
    host = rng.standard_normal((12, 40, 70))
    wide = cp.asarray(rng.standard_normal((12, 40, 80)))
    grid = wide[..., :70]
    grid[...] = cp.asarray(host)
    for name in ("heat3d", "box3d27p"):
        for mode in MODES:
            ok &= device_run(cp, grid, host, name, 7, mode, 0.0,
                             "cuda-core", "tb3d padded")
    return ok


def device_array_cases(rng):
    """The transfer paths: host grids through the pinned staging (past
    one 16 MiB chunk, a partial last chunk), and device arrays read and
    written in place with dtype conversion, negative strides and 1D
    folds (needs CuPy; skipped without it)."""
    ok = True
    for grid in (rng.standard_normal(3_000_001),
                 rng.standard_normal((700, 1301))):
        w = cs.Stencil("heat1d" if grid.ndim == 1 else "heat2d").weights
        ok &= check(grid, w, 3, "reflect", "cuda")
    try:
        import cupy as cp
    except ImportError:
        print("skip device arrays: no CuPy")
        return ok
    host = rng.standard_normal((301, 517))
    want = cs.apply(host, "box2d9p", steps=4, mode="mirror", backend="cpu")
    for grid in (cp.asarray(host), cp.asfortranarray(cp.asarray(host)),
                 cp.asarray(host[::-1, ::-1])[::-1, ::-1],
                 cp.asarray(host).astype(cp.float32)):
        got = cp.asnumpy(cs.apply(grid, "box2d9p", steps=4, mode="mirror"))
        ref = want if grid.dtype == cp.float64 else cs.apply(
            cp.asnumpy(grid).astype(np.float64), "box2d9p", steps=4,
            mode="mirror", backend="cpu")
        order = ("F" if grid.flags.f_contiguous
                 and not grid.flags.c_contiguous else "C")
        ok &= report(got, ref, "device array %s %s" % (grid.dtype, order))
    line = cp.asarray(rng.standard_normal(9000))
    want = cs.apply(cp.asnumpy(line), "1d5p", steps=5, mode="wrap",
                    backend="cpu")
    cs.apply(line, "1d5p", steps=5, mode="wrap", out=line)
    return ok & report(cp.asnumpy(line), want,
                       "device array 1D fold in place")


def fold_array_cases(rng):
    """A folded 1D grid between float64 CuPy arrays: the first tc1d pass
    reads the caller's array and the last unfused step writes the result
    (every mode, one row and several rows with a partial last one; needs
    CuPy)."""
    try:
        import cupy as cp
    except ImportError:
        print("skip 1D folds between device arrays: no CuPy")
        return True
    ok = True
    for name, steps in (("heat1d", 17), ("1d5p", 16)):
        for n in (3001, 300_007):
            host = rng.standard_normal(n)
            for mode in MODES:
                ok &= device_run(cp, cp.asarray(host), host, name, steps,
                                 mode, 0.5, "cuda-tc", "fold %d" % n)
    return ok


def open_session(rng, name, shape, k, mode, backend):
    """(the random host grid, the stencil's weights, a session opened on
    the grid's copy on the GPU, its byte strides, the engine's 3D view's
    leading axes)."""
    from convstencil import _core, _device, _engine
    w = cs.Stencil(name).weights
    host = rng.standard_normal(shape)
    grid = _device.DeviceArray(shape)
    _core.to_device(grid.ptr, host)
    lead = 3 - len(shape)
    strides = (0,) * lead + tuple(
        int(8 * np.prod(shape[a + 1:])) for a in range(len(shape)))
    session, _ = _core.session_open(
        grid.ptr, strides, (1,) * lead + shape, w, k,
        _engine.MODE_CODES[mode], 0.5,
        cs._backends.BACKEND_CODES[backend][1])
    return host, w, session, strides, lead


def session_cases(rng):
    """Engine sessions (session.cu): rounds of k steps on a device grid,
    the grid's first two rows read out and overwritten between the
    rounds, against the CPU engine doing the same."""
    from convstencil import _core, _device
    ok = True
    for name, shape, backend in (("heat2d", (45, 139), "cuda-tc"),
                                 ("box2d49p", (40, 70), "cuda-tc"),
                                 ("heat2d", (45, 139), "cuda-core"),
                                 ("heat3d", (12, 20, 33), "cuda")):
        k, rounds, mode = 3, 2, "wrap"
        host, w, session, strides, lead = open_session(rng, name, shape, k,
                                                       mode, backend)
        want = host
        box_shape = (2,) + shape[1:]
        starts, sizes = (0,) * 3, (1,) * lead + box_shape
        if len(shape) == 3:
            sizes = (2,) + shape[1:]
        buf = _device.DeviceArray(box_shape)
        for _ in range(rounds):
            _core.session_run(session)
            want = cs.apply(want, weights=w, steps=k, mode=mode,
                            backend="cpu")
            _core.session_copy(session, starts, sizes, buf.ptr, False)
            got_box = buf.get()
            ok &= np.allclose(got_box, want[:2], rtol=1e-12, atol=1e-12)
            new = rng.standard_normal(box_shape)
            _core.to_device(buf.ptr, new)
            _core.session_copy(session, starts, sizes, buf.ptr, True)
            want = want.copy()
            want[:2] = new
        out = _device.DeviceArray(shape)
        nonfinite = _core.session_close(session, out.ptr, strides)
        err = np.linalg.norm(out.get() - want) / np.linalg.norm(want)
        good = err <= 1e-12 and not nonfinite
        print("%-4s session %-9s %-9s grid %-10s rel %.2e" % (
            "ok" if good else "FAIL", backend, name,
            "x".join(map(str, shape)), err))
        ok &= good
    return ok


def split_cases(rng):
    """A session's split rounds (session.cu's split_pass: the bands
    leading the last pass's launch, counted in memory and waited for
    with cuStreamWaitValue32, or apart with CONVSTENCIL_SPLIT_BANDS=apart
    set in the environment), the last round writing the result
    (session_run's out); tb2d and tb3d, against the CPU engine."""
    from convstencil import _core, _device
    ok = True
    for name, shape in (("heat2d", (45, 139)), ("star2d13p", (52, 70)),
                        ("heat3d", (14, 9, 10)), ("box3d27p", (13, 8, 9))):
        k, mode = 3, "wrap"
        host, w, session, strides, _ = open_session(rng, name, shape, k,
                                                    mode, "cuda-core")
        bands = (k * (w.shape[0] // 2),) * 2
        split = True
        for _ in range(3):
            split &= _core.session_run(session, bands)
            _core.session_wait_bands(session)
            _core.session_exchanged(session)
        how = _core.session_bands(session)
        out = _device.DeviceArray(shape)
        _core.session_run(session, None, (out.ptr, strides))
        nonfinite = _core.session_close(session, out.ptr, strides)
        want = cs.apply(host, weights=w, steps=4 * k, mode=mode,
                        backend="cpu")
        err = np.linalg.norm(out.get() - want) / np.linalg.norm(want)
        good = err <= 1e-12 and not nonfinite and split
        print("%-4s split     %-5s %-9s grid %-10s rel %.2e" % (
            "ok" if good else "FAIL", how, name,
            "x".join(map(str, shape)), err))
        ok &= good
    return ok


def onestep_cases(rng):
    """One step between float64 CuPy arrays (the one-step kernels: 1D,
    planar and 3D tiles, every preset and mode, grids that are not
    multiples of a tile, out= a view with longer rows)."""
    try:
        import cupy as cp
    except ImportError:
        print("skip one-step cases: no CuPy")
        return True
    ok = True
    shapes = {1: (1003,), 2: (67, 131), 3: (13, 21, 35)}
    for name in cs.PRESETS:
        w = cs.Stencil(name).weights
        host = rng.standard_normal(shapes[w.ndim])
        for mode in MODES:
            want = cs.apply(host, weights=w, mode=mode, cval=0.5,
                            backend="cpu")
            got = cs.apply(cp.asarray(host), weights=w, mode=mode, cval=0.5)
            ok &= report(cp.asnumpy(got), want, "one step %s %s"
                         % (name, mode))
    host = rng.standard_normal((67, 131))
    wide = cp.zeros((67, 140))
    cs.apply(cp.asarray(host), "box2d49p", mode="reflect",
             out=wide[:, :131])
    return ok & report(cp.asnumpy(wide[:, :131]),
                       cs.apply(host, "box2d49p", mode="reflect",
                                backend="cpu"), "one step into a view")


def scheme_cases(rng):
    """Schemes on the GPU (scheme.cu): Gray-Scott and a leapfrog wave with
    a velocity field in 1D/2D/3D, every mode, outs fresh and in place,
    two stages (a Yee grid), against the CPU engine."""
    try:
        import cupy as cp
    except ImportError:
        print("skip scheme cases: no CuPy")
        return True
    ok = True
    u, v, up = cs.fields("u v up")
    c2 = cs.param("c2")
    shapes = {1: (1001,), 2: (67, 131), 3: (13, 21, 35)}
    for ndim, shape in shapes.items():
        L = cs.laplacian(ndim)
        gs = cs.Scheme({u: u + 0.16 * L(u) - u * v**2 + 0.035 * (1 - u),
                        v: v + 0.08 * L(v) + u * v**2 - 0.1 * v})
        wave = cs.Scheme({u: 2 * u - up + c2 * L(u), up: u})
        a, b = rng.uniform(0.5, 1, shape), rng.uniform(0, 0.3, shape)
        speed = rng.uniform(0, 0.2, shape)
        for mode in MODES:
            want = cs.apply((a, b), gs, steps=3, mode=mode, backend="cpu")
            got = cs.apply((cp.asarray(a), cp.asarray(b)), gs, steps=3,
                           mode=mode)
            for i in range(2):
                ok &= report(cp.asnumpy(got[i]), want[i], "scheme gs %dD "
                             "%s field %d" % (ndim, mode, i))
            want = cs.apply((a, b), wave, steps=4, mode=mode,
                            params={"c2": speed}, backend="cpu")
            pair = (cp.asarray(a), cp.asarray(b))
            cs.apply(pair, wave, steps=4, mode=mode, out=pair,
                     params={"c2": cp.asarray(speed)})
            ok &= report(cp.asnumpy(pair[0]), want[0], "scheme wave %dD %s "
                         "in place" % (ndim, mode))
    h, e = cs.fields("h e")
    dx = cs.Stencil(weights=[[0.0, -1.0, 1.0]])
    dxb = cs.Stencil(weights=[[-1.0, 1.0, 0.0]])
    yee = cs.Scheme([{h: h + 0.5 * dx(e)}, {e: e + 0.5 * dxb(h)}])
    a, b = rng.standard_normal((67, 131)), rng.standard_normal((67, 131))
    want = cs.apply((a, b), yee, steps=5, backend="cpu")
    got = cs.apply((cp.asarray(a), cp.asarray(b)), yee, steps=5)
    return ok & report(cp.asnumpy(got[1]), want[1], "scheme two stages")


if __name__ == "__main__":
    alone = {"tb2d": tb2d_cases, "tb3d": tb3d_cases,
             "fold": fold_array_cases, "onestep": onestep_cases,
             "scheme": scheme_cases, "split": split_cases}
    if len(sys.argv) == 2 and sys.argv[1] in alone:  # one set alone
        set_ok = alone[sys.argv[1]](np.random.default_rng(2026))
        print("all ok" if set_ok else "FAILURES")
        sys.exit(0 if set_ok else 1)
    sys.exit(main())
