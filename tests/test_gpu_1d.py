"""1D grids on the GPU: every path against the CPU engine.

On tensor cores, fused 1D kernels run on tc2d's payload of 7 up to 7
points and on tc1d's payloads of 15 and 31 up to 31 points.  A 1D grid
runs folded into rows of 4096 points (csrc/cuda/fold1d.cu), so the sizes
below cover one short row, exactly one row, a partial last row shorter
than the kernel's halo, many rows, and a size that is a multiple
of nothing (1000003).  Device memory and `out` are NaN-poisoned as in
test_gpu.py, whose helpers these tests share.
"""
import pytest

import convstencil as cs
from conftest import assert_close, gpu, random_weights
from test_gpu import (MODE_IDS, MODES, check_all_paths,
                      check_preset_every_step, poison_device_memory)  # noqa: F401
from test_gpu import expected_depth as shared_expected_depth

pytestmark = gpu

PRESETS_1D = ("heat1d", "1d5p")
SIZES_1D = (1, 2, 7, 129, 4096, 4098, 12289)


def expected_depth(weights, steps, n, mode):
    """The tensor-core path's fusion depth for a 1D kernel (composed
    kernels of up to 31 points: tc1d)."""
    return shared_expected_depth(weights, steps, (n,), mode)


@pytest.mark.parametrize("mode,cval", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("n", SIZES_1D)
@pytest.mark.parametrize("name", PRESETS_1D)
def test_presets_every_path(name, n, mode, cval, rng):
    check_preset_every_step(name, rng.uniform(-1.0, 1.0, n), mode, cval, rng)


@pytest.mark.parametrize("mode,cval", [("constant", -0.75), ("wrap", 0.0)],
                         ids=["constant-cval", "wrap"])
@pytest.mark.parametrize("name", PRESETS_1D)
def test_presets_1000003_points(name, mode, cval, rng):
    grid = rng.uniform(-1.0, 1.0, 1000003)
    w = cs.Stencil(name).weights
    for steps in (1, 5, 50):
        check_all_paths(grid, w, steps, mode, cval,
                        dict(preset=name, mode=mode, cval=cval, steps=steps,
                             seed=rng.seed))


@pytest.mark.parametrize("mode,cval", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("k", (1, 3, 5, 7, 9, 11, 13, 15))
def test_random_kernels_tensor_core(k, mode, cval, rng):
    w = random_weights(rng, 1, 0, shape=(k,))
    for n in (1, 7, 300, 8193):
        grid = rng.standard_normal(n)
        for steps in (1, 2, 3, 4, int(rng.integers(5, 51))):
            infos = check_all_paths(grid, w, steps, mode, cval,
                                    dict(k=k, n=n, mode=mode, cval=cval,
                                         steps=steps, seed=rng.seed))
            tc = infos["cuda-tc"]
            assert tc["path"] == "tensor-core", tc
            assert tc["fused_depth"] == expected_depth(w, steps, n,
                                                      mode), tc


# (depth, passes, unfused steps): the fewest launches, the deepest of
# equals (csrc/plan.c): 50 heat1d steps run as 5 passes of 10, not 3
# passes of 15 and 5 steps; 30 as 2 passes of 15
@pytest.mark.parametrize("name,steps,plan", [
    ("heat1d", 16, (15, 1, 1)), ("heat1d", 50, (10, 5, 0)),
    ("heat1d", 30, (15, 2, 0)), ("heat1d", 100, (14, 7, 2)),
    ("heat1d", 9, (9, 1, 0)), ("1d5p", 16, (7, 2, 2)),
    ("1d5p", 5, (5, 1, 0))])
def test_presets_fuse_up_to_31_points(name, steps, plan, rng):
    grid = rng.uniform(-1.0, 1.0, 50001)
    w = cs.Stencil(name).weights
    for mode, cval in (("constant", 0.5), ("wrap", 0.0), ("reflect", 0.0)):
        infos = check_all_paths(grid, w, steps, mode, cval,
                                dict(preset=name, mode=mode, seed=rng.seed),
                                backends=("cuda-tc", "cuda"))
        for info in infos.values():
            assert (info["fused_depth"], info["fused_passes"],
                    info["unfused_steps"]) == plan, info


def test_out_may_alias_the_grid(rng):
    grid = rng.standard_normal(10007)
    want = cs.apply(grid, "heat1d", steps=9, backend="cpu")
    for backend in ("cuda", "cuda-tc", "cuda-core"):
        work = grid.copy()
        result = cs.apply(work, "heat1d", steps=9, backend=backend, out=work)
        assert result is work
        assert_close(work, want, dict(backend=backend, seed=rng.seed))
