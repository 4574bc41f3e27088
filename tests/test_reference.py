"""The reference (tests/reference.py) against scipy.ndimage.correlate.

The engine is checked against the reference, so the reference is checked
first, against the definition: scipy.ndimage.correlate repeated `steps`
times.  Needs only NumPy and SciPy, not the package.
"""
import numpy as np
import pytest

import reference as ref
from conftest import assert_close, random_weights

scipy_ndimage = pytest.importorskip("scipy.ndimage")

SIZES = {
    1: [(1,), (2,), (3,), (7,), (13,), (31,)],
    2: [(1, 1), (1, 5), (2, 3), (5, 1), (7, 9), (13, 11), (31, 37)],
    3: [(1, 1, 1), (2, 1, 3), (3, 4, 2), (5, 7, 9), (7, 5, 3)],
}


def _preset_weights(name):
    ndim, shape = ref.PRESET_SHAPES[name]
    if name in ref.HEAT_ALPHA:
        return ref.heat_weights(ndim, ref.HEAT_ALPHA[name])
    # any positive weights on the footprint will do for the reference
    mask = ref.preset_footprint(name)
    w = np.where(mask, np.arange(1, mask.size + 1).reshape(shape), 0.0)
    return w / w.sum()


@pytest.mark.parametrize("mode", ref.MODES)
@pytest.mark.parametrize("name", sorted(ref.PRESET_SHAPES))
def test_presets_every_mode(rng, name, mode):
    w = _preset_weights(name)
    cval = 0.75
    for shape in SIZES[w.ndim]:
        grid = rng.standard_normal(shape)
        for steps in (0, 1, 2, 5):
            got = ref.apply(grid, w, steps, mode, cval)
            want = ref.scipy_apply(grid, w, steps, mode, cval)
            assert_close(got, want, dict(backend="reference", shape=shape,
                                         kernel=name, mode=mode, steps=steps,
                                         cval=cval, seed=rng.seed))


@pytest.mark.parametrize("mode", ref.MODES)
@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_random_weights_every_mode(rng, ndim, mode):
    max_side = {1: 15, 2: 7, 3: 5}[ndim]
    for shape in SIZES[ndim]:
        for _ in range(3):
            w = random_weights(rng, ndim, max_side)
            grid = rng.standard_normal(shape)
            cval = float(rng.uniform(-2, 2))
            for steps in (1, 3):
                got = ref.apply(grid, w, steps, mode, cval)
                want = ref.scipy_apply(grid, w, steps, mode, cval)
                assert_close(got, want, dict(
                    backend="reference", shape=shape, kernel=w.shape,
                    mode=mode, steps=steps, cval=cval, seed=rng.seed))


@pytest.mark.parametrize("mode", ref.MODES)
@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_radius_wider_than_grid(rng, n, mode):
    # radius 7 on lines of 1..5 points: the extension wraps/reflects
    # several times over (np.pad cannot do this for every mode)
    w = rng.uniform(0.1, 1.0, 15)
    w /= w.sum()
    grid = rng.standard_normal(n)
    got = ref.apply(grid, w, 2, mode, -1.5)
    want = ref.scipy_apply(grid, w, 2, mode, -1.5)
    assert_close(got, want, dict(backend="reference", shape=(n,),
                                 kernel=(15,), mode=mode, steps=2, cval=-1.5,
                                 seed=rng.seed))


@pytest.mark.parametrize("shape", [(1,), (4,), (97,), (7, 9), (29, 31)])
def test_prime_and_odd_sizes_many_steps(rng, shape):
    ndim = len(shape)
    w = random_weights(rng, ndim, 5, signed=False)
    grid = rng.standard_normal(shape)
    for mode in ref.MODES:
        got = ref.apply(grid, w, 20, mode, 0.5)
        want = ref.scipy_apply(grid, w, 20, mode, 0.5)
        assert_close(got, want, dict(backend="reference", shape=shape,
                                     kernel=w.shape, mode=mode, steps=20,
                                     cval=0.5, seed=rng.seed))


def test_periodic_alias_is_wrap(rng):
    grid = rng.standard_normal((6, 5))
    w = random_weights(rng, 2, 5)
    np.testing.assert_array_equal(ref.apply(grid, w, 2, "periodic"),
                                  ref.apply(grid, w, 2, "wrap"))


def test_extended_index_small_cases():
    # the rules spelled out in extended_index's docstring, for n = 4, r = 4
    n, r = 4, 4
    assert list(ref.extended_index(n, r, "nearest")) == \
        [0, 0, 0, 0, 0, 1, 2, 3, 3, 3, 3, 3]
    assert list(ref.extended_index(n, r, "wrap")) == \
        [0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3]
    assert list(ref.extended_index(n, r, "reflect")) == \
        [3, 2, 1, 0, 0, 1, 2, 3, 3, 2, 1, 0]
    assert list(ref.extended_index(n, r, "mirror")) == \
        [2, 3, 2, 1, 0, 1, 2, 3, 2, 1, 0, 1]
    assert list(ref.extended_index(n, r, "constant")) == \
        [4, 4, 4, 4, 0, 1, 2, 3, 4, 4, 4, 4]


def test_steps_zero_is_a_copy(rng):
    grid = rng.standard_normal((3, 4))
    out = ref.apply(grid, np.ones((3, 3)) / 9, 0)
    assert out is not grid
    np.testing.assert_array_equal(out, grid)


def test_assert_close_catches_a_difference(rng):
    # the comparison helper itself must be able to fail
    a = rng.standard_normal((5, 6))
    b = a.copy()
    b[2, 3] += 1e-9 * np.linalg.norm(a)
    with pytest.raises(AssertionError, match=r"\(2, 3\)"):
        assert_close(b, a, dict(backend="x", seed=rng.seed))
    assert_close(a, a.copy(), dict(backend="x"))


def test_assert_close_scale_of_a_cancelled_result(rng):
    # a result that cancelled to 1e-6 of its sums' size: an error of
    # 1e-17 against the sums passes, 1e-9 still fails
    sums = 1e-6 * rng.standard_normal((4, 4))
    big = lambda: 1.0  # noqa: E731
    small = sums * (1 + 1e-11)
    assert_close(small, sums, dict(backend="x"), scale=big)
    with pytest.raises(AssertionError, match="absolute values"):
        assert_close(sums + 1e-9, sums, dict(backend="x", seed=rng.seed),
                     scale=big)
    with pytest.raises(AssertionError):
        assert_close(small, sums, dict(backend="x", seed=rng.seed))
