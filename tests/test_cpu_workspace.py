"""The CPU engine's kept host blocks (csrc/cpu/workspace.h): a call leaves
its blocks for the next, clear_cache() frees them, and a block that held
another grid (NaN included) gives the same result as a fresh one."""
import numpy as np
import pytest
import scipy.ndimage as ndi

import convstencil as cs


def reference(u, name, steps, mode="constant"):
    w = cs.Stencil(name).weights
    for _ in range(steps):
        u = ndi.correlate(u, w, mode=mode)
    return u


def test_blocks_are_kept_and_freed(rng):
    cs.clear_cache()
    assert cs.cache_info()["host_bytes"] == 0
    cs.apply(rng.random((300, 300)), "heat2d", steps=3)   # direct
    kept = cs.cache_info()["host_bytes"]
    assert kept >= 2 * 300 * 300 * 8
    cs.apply(rng.random((300, 300)), "heat2d", steps=3)
    assert cs.cache_info()["host_bytes"] == kept          # taken, given
    cs.apply(rng.random((800, 900)), "heat2d", steps=70)  # blocked, 2 passes
    assert cs.cache_info()["host_bytes"] > kept
    cs.clear_cache()
    assert cs.cache_info()["host_bytes"] == 0


@pytest.mark.parametrize("mode", ["constant", "wrap", "reflect"])
def test_a_used_block_gives_the_result_of_a_fresh_one(mode, rng):
    """Grids of NaN run first on both paths; then smaller and differently
    shaped grids reuse their blocks."""
    cs.clear_cache()
    for shape, name, steps in (((700, 800), "box2d9p", 40),
                               ((96, 96), "star2d13p", 5),
                               ((30, 31, 33), "box3d27p", 4)):
        cs.apply(np.full(shape, np.nan), name, steps=steps, mode=mode)
    for shape, name, steps in (((61, 67), "star2d13p", 4),
                               ((90, 95), "box2d49p", 3),
                               ((500, 700), "heat2d", 35),
                               ((17, 19, 23), "box3d27p", 3),
                               ((4001,), "1d5p", 6)):
        u = rng.random(shape)
        got = cs.apply(u, name, steps=steps, mode=mode)
        want = reference(u, name, steps, mode)
        assert np.all(np.isfinite(got))
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


def test_a_new_block_displaces_the_oldest(rng):
    """Once the slots are full, the block a call gives back displaces the
    one given longest ago: the run a user repeats after trying other
    grids keeps its block, rather than taking fresh pages every call."""
    cs.clear_cache()
    for n in (100, 150, 200, 250, 300):   # more calls than slots
        cs.apply(rng.random((n, n)), "heat2d", steps=3)
    full = cs.cache_info()["host_bytes"]
    cs.apply(rng.random((400, 400)), "heat2d", steps=3)
    kept = cs.cache_info()["host_bytes"]
    assert kept > full                     # 400^2's block kept
    cs.apply(rng.random((400, 400)), "heat2d", steps=3)
    assert cs.cache_info()["host_bytes"] == kept
    cs.clear_cache()
    assert cs.cache_info()["host_bytes"] == 0
