"""The engines' policy (csrc/plan.c) through convstencil._core.plan.

The planner is plain C, so these tests run everywhere: which path runs a
kernel, the fused depth, the band fix-up and a 1D grid's fold, for every
preset, every mode and random kernels, checked against the rules the
plan promises (csrc/plan.h), written out here independently.  The GPU
tests check that the engine runs what the plan says (last_run_info); the
"cpu-tc" emulation is checked here to run the tensor-core plan too.
"""
import numpy as np
import pytest

import convstencil
from convstencil import _core
from convstencil._presets import PRESETS, preset_weights as _preset
from conftest import TB2D_WIDE_DEPTH, exact_outer

MODE = {"constant": _core.MODE_CONSTANT, "wrap": _core.MODE_WRAP,
        "nearest": _core.MODE_NEAREST, "reflect": _core.MODE_REFLECT,
        "mirror": _core.MODE_MIRROR}
MODES = list(MODE)
AUTO, TC, CC = _core.PATH_AUTO, _core.PATH_TENSOR_CORE, _core.PATH_CUDA_CORE


def grid_for(ndim, n2=4096, n3=96):
    return {1: (1 << 20,), 2: (n2, n2), 3: (n3, n3, n3)}[ndim]


def preset_weights(name):
    return np.ascontiguousarray(_preset(name), dtype=np.float64)


def launches(steps, depth):
    return steps // depth + steps % depth


def sides3(w):
    """The kernel's extents in the engine's 3D order (leading ones)."""
    return (1,) * (3 - w.ndim) + tuple(w.shape)


def is_plus(w2):
    """Every nonzero weight of the square w2 on its centre row or column."""
    r = (w2.shape[0] - 1) // 2
    off = np.ones(w2.shape, bool)
    off[r, :] = off[:, r] = False
    return not np.any(w2[off])


def is_outer(w2):
    """w2 an outer product of two vectors (rank one; the tests' outer
    products are exact)."""
    return np.linalg.matrix_rank(w2) == 1


def tb2d_max_depth(w):
    """tb2d's most steps per pass of w (0: tb2d does not run it): any
    planar 3 x 3 kernel 8; a planar plus, outer product or full-rank box
    of side 5 or 7 as TB2D_WIDE_DEPTH says."""
    kz, ky, kx = sides3(w)
    if kz != 1 or ky != kx:
        return 0
    if ky == 3:
        return 8
    w2 = w.reshape(ky, kx)
    kind = "plus" if is_plus(w2) else "outer" if is_outer(w2) else "box"
    return TB2D_WIDE_DEPTH.get((kind, ky), 0)


def tb3d_max_depth(w, shape):
    """tb3d's most steps per pass of w on a grid of `shape` (0: tb3d does
    not run it): a 3 x 3 x 3 star (heat3d's taps, any weights) or outer
    product, on a 3D grid of at least 8 in every extent, 3."""
    if w.ndim != 3 or w.shape != (3, 3, 3) or len(shape) != 3 \
            or min(shape) < 8:
        return 0
    star = np.zeros((3, 3, 3), bool)
    star[1, 1, :] = star[1, :, 1] = star[:, 1, 1] = True
    # an outer product: rank one across planes, each plane rank one
    outer = (np.linalg.matrix_rank(w.reshape(3, 9)) == 1
             and all(np.linalg.matrix_rank(w[z]) <= 1 for z in range(3)))
    return 3 if not np.any(w[~star]) or outer else 0


def check_plan_rules(p, w, shape, mode, steps, max_depth=0):
    """What every plan must satisfy, whatever it chose."""
    depth = p["fused_depth"]
    assert depth >= 1
    assert p["fused_passes"] * depth + p["unfused_steps"] == steps, p
    if p["path"] == "tensor-core" and steps > 0:
        assert p["unfused_steps"] == steps % depth, p
    # the fused kernel fits the limits the plan names
    for k, side in zip(sides3(w), p["max_side"]):
        assert depth * (k - 1) + 1 <= side, p
    if max_depth:
        assert depth <= max(1, max_depth), p
    if p["pass"] in ("tb2d", "tb3d"):
        # exact at every edge: no band; the remainder is one tail pass
        assert p["band"] == "none" and p["tail_pass"], p
        assert set(p["band_widths"]) == {0}, p
        top = (tb2d_max_depth(w) if p["pass"] == "tb2d"
               else tb3d_max_depth(w, shape))
        assert top, p
        assert depth == min(top, max_depth or top, steps), p
        return
    assert not p["tail_pass"], p
    # band geometry: (depth-1)*r, read from strips of (2*depth-1)*r
    needs_band = depth > 1 and mode != "wrap"
    for k, n, b, s in zip(sides3(w), (1,) * (3 - len(shape)) + shape,
                          p["band_widths"], p["strip_widths"]):
        r = (k - 1) // 2
        assert b == (r * (depth - 1) if needs_band else 0), p
        assert s == (r * (2 * depth - 1) if needs_band else 0), p
        assert b == 0 or n >= 2 * s, p  # both strips inside the grid
    if not needs_band or p["fused_passes"] == 0:
        assert p["band"] == "none", p
    elif p["fold"]:
        assert p["band"] == "fold-ends", p
    elif p["pass"] == "cc3d":
        assert p["band"] == "in-place", p
    else:
        assert p["band"] == "strips", p


def deepest_that_fits(w, shape, mode, steps, max_side):
    """The rule's starting point, by brute force."""
    best = 1
    for d in range(2, steps + 1):
        if any(d * (k - 1) + 1 > s for k, s in zip(sides3(w), max_side)):
            break
        if mode != "wrap" and any(
                (k - 1) // 2 > 0 and n < 2 * (2 * d - 1) * ((k - 1) // 2)
                for k, n in zip(sides3(w), (1,) * (3 - len(shape)) + shape)):
            break
        best = d
    return best if max(sides3(w)) > 1 else 1


def check_depth_choice(p, w, shape, mode, steps, cap_side):
    """The depth needs the fewest launches of those that fit, the deepest
    of equals."""
    if steps == 0 or p["fused_passes"] == 0 and p["pass"] == "none":
        return
    top = deepest_that_fits(w, shape, mode, steps, cap_side)
    want = min(range(top, 0, -1), key=lambda d: (launches(steps, d), -d))
    assert p["fused_depth"] == want, (p, top)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("steps", [0, 1, 2, 3, 7, 16, 100])
@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_auto(name, steps, mode):
    w = preset_weights(name)
    shape = grid_for(w.ndim)
    p = _core.plan(shape, w, MODE[mode], steps, AUTO)
    check_plan_rules(p, w, shape, mode, steps)
    if steps == 0:
        assert p["fused_passes"] == 0 and p["path"] == "cuda-core"
        return
    if p["path"] == "tensor-core":
        limit = (1, 1, 31) if w.ndim == 1 else (7, 7, 7)
        if w.ndim == 3 and w.shape[0] > 1:
            limit = sides3(w)  # several planes: not fused
        check_depth_choice(p, w, shape, mode, steps, limit)


def test_auto_paths_of_the_presets():
    """Tensor cores where they fuse (every 1D preset, the 3x3 2D ones);
    CUDA cores for planar squares of side 5 and 7 (a plus and an outer
    product temporally blocked on tb2d) and the 3D presets (a star and an
    outer product, temporally blocked on tb3d), which they run faster
    (csrc/plan.c)."""
    want = {"heat1d": "tc1d", "1d5p": "tc1d", "heat2d": "tc2d",
            "box2d9p": "tc2d", "star2d13p": "tb2d", "box2d49p": "tb2d",
            "heat3d": "tb3d", "box3d27p": "tb3d"}
    for name, pass_kind in want.items():
        w = preset_weights(name)
        p = _core.plan(grid_for(w.ndim), w, MODE["constant"], 100, AUTO)
        assert p["pass"] == pass_kind, (name, p)
        assert p["path"] == ("cuda-core" if pass_kind in ("tb2d", "tb3d")
                             else "tensor-core"), (name, p)


def test_100_steps_of_heat1d_balance_the_passes():
    """7 passes of 14 and 2 single steps (9 launches), not 6 passes of 15
    and 10 single steps (16)."""
    w = preset_weights("heat1d")
    p = _core.plan((1 << 27,), w, MODE["wrap"], 100, AUTO)
    assert (p["fused_depth"], p["fused_passes"], p["unfused_steps"]) \
        == (14, 7, 2)
    assert p["fold"] and p["fold_width"] == 4096
    assert p["run_shape"] == (1, (1 << 27) // 4096, 4096)


def random_kernel(rng, sides, density=0.7):
    w = rng.standard_normal(sides)
    w[rng.random(sides) > density] = 0.0
    w[tuple(s // 2 for s in sides)] = 1.0
    return np.ascontiguousarray(w)


@pytest.mark.parametrize("seed", range(40))
def test_random_kernels_every_path(seed):
    rng = np.random.default_rng(seed)
    ndim = int(rng.integers(1, 4))
    odd = [1, 3, 5, 7]
    sides = tuple(int(rng.choice(odd)) for _ in range(ndim))
    if ndim == 1:
        sides = (int(rng.choice([1, 3, 5, 9, 15, 31])),)
    w = random_kernel(rng, sides)
    shape = tuple(int(rng.integers(1, 200)) for _ in range(ndim))
    mode = MODES[int(rng.integers(0, 5))]
    steps = int(rng.integers(0, 40))
    max_depth = int(rng.choice([0, 0, 1, 2, 3, 5]))
    for path in (AUTO, TC, CC):
        p = _core.plan(shape, w, MODE[mode], steps, path,
                       max_depth=max_depth)
        check_plan_rules(p, w, shape, mode, steps, max_depth)
        if steps > 0 and path == TC:
            assert p["path"] == "tensor-core"
            assert p["pass"] in ("tc1d", "tc2d", "tc3d")
        if path == CC:
            assert p["path"] == "cuda-core"
            assert p["pass"] in ("none", "cc3d", "tb2d", "tb3d")
            tb2d = (tb2d_max_depth(w) > 0 and len(shape) >= 2
                    and min(shape[-2:]) >= 16)
            assert (p["pass"] == "tb2d") == (tb2d and steps > 0), p
            tb3d = tb3d_max_depth(w, shape) > 0
            assert (p["pass"] == "tb3d") == (tb3d and steps > 0), p


def test_cuda_core_fuses_only_the_7_point_star_under_tb3d():
    """On a grid with an extent under tb3d's 8, cc3d fuses heat3d two
    steps a pass and steps a 27-point box one by one."""
    w = preset_weights("heat3d")
    p = _core.plan((64, 7, 64), w, MODE["reflect"], 9, CC)
    assert (p["pass"], p["fused_depth"], p["fused_passes"],
            p["unfused_steps"], p["band"]) == ("cc3d", 2, 4, 1, "in-place")
    p = _core.plan((64, 7, 64), w, MODE["reflect"], 9, CC, max_depth=1)
    assert p["pass"] == "none" and p["unfused_steps"] == 9
    box = preset_weights("box3d27p")
    p = _core.plan((7, 64, 64), box, MODE["reflect"], 9, CC)
    assert p["pass"] == "none" and p["fused_depth"] == 1


@pytest.mark.parametrize("steps", [1, 2, 3, 7, 100])
@pytest.mark.parametrize("name", ["heat3d", "box3d27p"])
def test_tb3d_on_cuda_cores(name, steps):
    """3 x 3 x 3 stars and outer products run temporally blocked on grids
    of at least 8 in every extent: passes of 3 steps, the remainder as one
    more pass, no band; a full-rank box (the outer product with one weight
    changed) does not."""
    w = preset_weights(name)
    d = min(3, steps)
    for mode in MODES:
        p = _core.plan((8, 512, 9), w, MODE[mode], steps, CC)
        assert (p["pass"], p["band"], p["tail_pass"]) \
            == ("tb3d", "none", True), p
        assert (p["fused_depth"], p["fused_passes"], p["unfused_steps"]) \
            == (d, steps // d, steps % d)
    p = _core.plan((64, 64, 64), w, MODE["wrap"], steps, CC, max_depth=2)
    assert p["pass"] == "tb3d" and p["fused_depth"] == min(2, steps)
    full = w.copy()
    full[0, 0, 0] += 0.01
    p = _core.plan((64, 64, 64), full, MODE["wrap"], steps, CC)
    assert p["pass"] != "tb3d", p


def tb3d_shared_bytes(name, depth):
    """A tb3d block's shared memory: planes of (32 + 2) x 64 doubles, a
    pair per level for a star, one pair for an outer product."""
    planes = 2 * depth if name == "heat3d" else 2
    return planes * 34 * 64 * 8


@pytest.mark.parametrize("name", ["heat3d", "box3d27p"])
def test_tb3d_depth_fits_the_shared_memory(name):
    """On a device whose blocks may take less shared memory than a pass
    of 3 steps needs (a star's 104448 bytes on 99 KB), tb3d runs the
    deepest pass that fits, and none where not even one step fits."""
    w = preset_weights(name)
    for depth in (3, 2, 1):
        fits = tb3d_shared_bytes(name, depth)
        for optin in (fits, fits + 1000):
            p = _core.plan((64, 64, 64), w, MODE["reflect"], 12, CC,
                           smem_optin=optin)
            want = depth if name == "heat3d" else 3
            assert (p["pass"], p["fused_depth"]) == ("tb3d", want), p
    p = _core.plan((64, 64, 64), w, MODE["reflect"], 12, CC,
                   smem_optin=99 * 1024)
    assert p["fused_depth"] == (2 if name == "heat3d" else 3), p
    p = _core.plan((64, 64, 64), w, MODE["reflect"], 12, CC,
                   smem_optin=tb3d_shared_bytes(name, 1) - 1)
    assert p["pass"] != "tb3d", p


@pytest.mark.parametrize("side", [5, 7])
def test_tb2d_takes_pluses_outer_products_and_boxes(side, rng):
    """tb2d runs pluses and outer products of sides 5 and 7, and full-rank
    boxes of those sides (a plus with one weight off its arms, an outer
    product with one weight changed) at their own depth."""
    w = np.zeros((side, side))
    r = side // 2
    w[r, :] = rng.uniform(-1, 1, side)
    w[:, r] = rng.uniform(-1, 1, side)
    for kind, kernel in (("plus", w), ("outer", exact_outer(rng, side))):
        p = _core.plan((100, 100), kernel, MODE["mirror"], 9, CC)
        assert (p["pass"], p["fused_depth"]) \
            == ("tb2d", TB2D_WIDE_DEPTH[kind, side]), p
        kernel[0, 0] += 0.01
        p = _core.plan((100, 100), kernel, MODE["mirror"], 9, CC)
        assert (p["pass"], p["fused_depth"]) \
            == ("tb2d", TB2D_WIDE_DEPTH["box", side]), p
        assert _core.kernel_taps(kernel)["cc2d"] == "box"


def test_too_small_for_the_band_is_not_fused():
    w = preset_weights("heat2d")
    # depth 3 needs strips of 5 rows at both edges: 10 rows
    assert _core.plan((9, 100), w, MODE["nearest"], 30, TC)["fused_depth"] \
        == 2
    assert _core.plan((5, 100), w, MODE["nearest"], 30, TC)["fused_depth"] \
        == 1
    # wrap needs no band: any grid fuses
    assert _core.plan((1, 1), w, MODE["wrap"], 30, TC)["fused_depth"] == 3


def test_device_without_fp64_tensor_cores():
    w = preset_weights("heat2d")
    p = _core.plan((100, 100), w, MODE["wrap"], 10, AUTO, cc_major=8)
    assert p["path"] == "cuda-core" and p["pass"] == "tb2d"
    with pytest.raises(ValueError, match=r"sm_90"):
        _core.plan((100, 100), w, MODE["wrap"], 10, TC, cc_major=8)


@pytest.mark.parametrize("sides", [(9, 9), (3, 9), (9, 3, 3), (33,)])
def test_tensor_core_path_refuses_what_it_cannot_run(sides):
    w = np.full(sides, 1.0 / np.prod(sides))
    shape = (64,) * len(sides)
    with pytest.raises(ValueError, match=r"tensor-core path runs"):
        _core.plan(shape, w, MODE["constant"], 3, TC)
    p = _core.plan(shape, w, MODE["constant"], 3, AUTO)
    assert p["path"] == "cuda-core"


@pytest.mark.parametrize("args,match", [
    (((0, 5), np.ones((3, 3)), 0, 1, 0), r"extent"),
    (((5, 5), np.ones((3,)), 0, 1, 0), r"ndim"),
    (((5, 5), np.ones((2, 3)), 0, 1, 0), r"odd"),
    (((5, 5), np.ones((3, 3), np.float32), 0, 1, 0), r"float64"),
    (((5, 5), np.ones((3, 3)), 9, 1, 0), r"mode"),
    (((5, 5), np.ones((3, 3)), 0, -1, 0), r"steps"),
    (((5, 5), np.ones((3, 3)), 0, 1, 7), r"path"),
    (((1, 2, 3, 4), np.ones((1, 1, 1, 1)), 0, 1, 0), r"1 to 3"),
    (((5, 5), np.ones((3, 3)), 0, 1, 0, 9, 0, -1), r"smem_optin"),
])
def test_bad_arguments(args, match):
    with pytest.raises(ValueError, match=match):
        _core.plan(*args)


def test_limits_are_exported():
    assert (_core.TC_MAX_SIDE, _core.TC_MAX_SIDE_1D, _core.TC3D_MAX_KZ) \
        == (7, 31, 7)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name,steps", [("heat1d", 100), ("heat1d", 31),
                                        ("1d5p", 23), ("heat2d", 10),
                                        ("box2d9p", 7), ("heat3d", 5),
                                        ("box3d27p", 4)])
def test_cpu_tc_runs_the_tensor_core_plan(name, steps, mode, rng):
    """The emulation runs the GPU's tensor-core plan, and gives the
    reference's numbers with it."""
    w = preset_weights(name)
    shape = {1: (3001,), 2: (61, 67), 3: (17, 19, 23)}[w.ndim]
    grid = rng.uniform(-1.0, 1.0, shape)
    got = convstencil.apply(grid, name, steps=steps, mode=mode,
                            backend="cpu-tc")
    info = convstencil.last_run_info()
    p = _core.plan(shape, w, MODE[mode], steps, TC)
    assert (info["fused_depth"], info["fused_passes"],
            info["unfused_steps"]) == (p["fused_depth"], p["fused_passes"],
                                      p["unfused_steps"])
    want = convstencil.apply(grid, name, steps=steps, mode=mode,
                             backend="cpu")
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("steps", [1, 5, 8, 9, 100])
@pytest.mark.parametrize("name,top", [("heat2d", 8), ("box2d9p", 8),
                                      ("star2d13p", 3), ("box2d49p", 3)])
def test_tb2d_on_cuda_cores(name, top, steps):
    """Planar 3 x 3 kernels, pluses and outer products on CUDA cores run
    temporally blocked: passes of their most steps, the remainder as one
    more pass, no band (the modes are applied inside the block); grids
    under 16 rows or columns step one by one."""
    w = preset_weights(name)
    d = min(top, steps)
    for mode in MODES:
        p = _core.plan((10240, 10240), w, MODE[mode], steps, CC)
        assert (p["pass"], p["band"], p["tail_pass"]) \
            == ("tb2d", "none", True), p
        assert (p["fused_depth"], p["fused_passes"], p["unfused_steps"]) \
            == (d, steps // d, steps % d)
    p = _core.plan((10240, 10240), w, MODE["wrap"], steps, CC, max_depth=3)
    assert p["fused_depth"] == min(3, steps)
    side = min(3, steps) * (w.shape[0] - 1) + 1
    assert list(p["max_side"][1:]) == [side] * 2
    for small in [(15, 100), (100, 15)]:
        p = _core.plan(small, w, MODE["wrap"], steps, CC)
        assert p["pass"] == "none" and p["unfused_steps"] == steps


def test_kernel_taps_of_the_presets():
    """The tap sets the CUDA-core kernels take, from the engine's own
    tests (the performance model reads these)."""
    want = {"heat2d": ("plus", None, True, False),
            "box2d9p": ("rank1", None, False, True),
            "star2d13p": ("plus", None, True, False),
            "box2d49p": ("rank1", None, False, True),
            "heat3d": (None, "diamond", False, False),
            "box3d27p": (None, "box", False, True)}
    for name, (cc2d, cc3d, plus, outer) in want.items():
        t = _core.kernel_taps(preset_weights(name))
        assert (t["cc2d"], t["cc3d"], t["plus"], t["outer"]) \
            == (cc2d, cc3d, plus, outer), (name, t)


def test_kernel_taps_rank_one_within_4_ulp():
    w = preset_weights("box2d49p").copy()
    assert _core.kernel_taps(w)["cc2d"] == "rank1"
    w[0, 0] *= 1 + 1e-9  # off rank one by far more than rounding
    assert _core.kernel_taps(w)["cc2d"] == "box"
    assert not _core.kernel_taps(w)["outer"]
    with pytest.raises(ValueError, match="odd"):
        _core.kernel_taps(np.ones((2, 3)))
    with pytest.raises(ValueError, match="float64"):
        _core.kernel_taps(np.ones((3, 3), np.float32))
