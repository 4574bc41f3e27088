"""Shared fixtures and helpers for the convstencil test suite.

- ``rng``: a fresh NumPy Generator per test.  Its seed is in ``rng.seed``,
  printed in every ``assert_close`` failure and in the report of any
  failed test that used it.  Re-run a failure with
  ``CONVSTENCIL_TEST_SEED=<seed> python -m pytest ...``.
- ``assert_close(out, ref, ctx)``: relative error
  ``||out - ref|| / ||ref|| <= 1e-12`` with a rich message.
- ``BACKENDS``: the backends every parametrized suite runs on; "cuda" is
  marked ``gpu`` and skipped unless ``convstencil.backends()["cuda"] ==
  "available"`` on a real GPU.
- ``gpu`` (marks): tests that need a real GPU (large grids, timings).
  ``gpu_small`` (marks): the GPU-facing Python on grids small enough for
  the CPU emulation of CUDA; they run on a real GPU and on a build made
  with ``CONVSTENCIL_CUDA=emulate`` (setup.py), skip elsewhere.  On the
  emulated build every other test skips: it belongs to a normal build
  (``pytest tests`` there runs the gpu_small suites).
"""
import os
import sys

import numpy as np
import pytest

# tests/ on sys.path, so `import reference` works whatever the import mode
_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

RTOL = 1e-12
SEED_ENV = "CONVSTENCIL_TEST_SEED"

try:
    import convstencil as _cs

    CUDA_STATUS = _cs.backends().get("cuda", "missing from backends()")
    #: the CUDA engine of this build runs on the CPU emulation of CUDA
    EMULATED_CUDA = bool(getattr(_cs._core, "CUDA_EMULATION", 0))
except Exception as exc:  # the package is broken or not built: say so
    _cs = None
    CUDA_STATUS = "convstencil not importable: %s: %s" % (
        type(exc).__name__, exc)
    EMULATED_CUDA = False

#: the CUDA engine runs here, on a GPU or on the emulation
CUDA_RUNS = CUDA_STATUS == "available"
#: a real GPU
HAVE_CUDA = CUDA_RUNS and not EMULATED_CUDA

gpu = [pytest.mark.gpu,
       pytest.mark.skipif(not HAVE_CUDA, reason=(
           "cuda: the CPU emulation (a real GPU is needed)" if EMULATED_CUDA
           else "cuda: %s" % CUDA_STATUS))]

#: small grids: a real GPU or the emulated build
gpu_small = [pytest.mark.gpu_small,
             pytest.mark.skipif(not CUDA_RUNS, reason=(
                 "cuda: %s (gpu_small runs on a GPU or on a build made "
                 "with CONVSTENCIL_CUDA=emulate)" % CUDA_STATUS))]

#: Backends every backend-parametrized test runs on.
BACKENDS = ["cpu", "cpu-tc", pytest.param("cuda", marks=gpu, id="cuda")]

# tb2d's steps per pass of planar kernels of sides 5 and 7, by tap set
# (csrc/plan.h: CS_TB2D_MAX_DEPTH_5, _7, CS_TB2D_MAX_DEPTH_BOX_5, _7)
TB2D_WIDE_DEPTH = {("plus", 5): 4, ("plus", 7): 3, ("outer", 5): 4,
                   ("outer", 7): 3, ("box", 5): 3, ("box", 7): 1}


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "gpu: needs a visible CUDA device (skipped elsewhere)")
    config.addinivalue_line(
        "markers", "gpu_small: the GPU-facing Python on small grids: a GPU "
        "or the emulated build (CONVSTENCIL_CUDA=emulate)")


def pytest_collection_modifyitems(config, items):
    """On the emulated build only the gpu_small tests run: the others
    would put their grids, large ones included, on the emulated GPU
    wherever backend "auto" chooses it."""
    if not EMULATED_CUDA:
        return
    skip = pytest.mark.skip(reason="the emulated build "
                            "(CONVSTENCIL_CUDA=emulate) runs the gpu_small "
                            "tests only; this one belongs to a normal build")
    for item in items:
        if item.get_closest_marker("gpu_small") is None:
            item.add_marker(skip)


# ---------------------------------------------------------------------------
# Random numbers with a visible seed

class SeededRng:
    """A numpy Generator that remembers its seed (``.seed``)."""

    def __init__(self, seed):
        self.seed = seed
        self._gen = np.random.default_rng(seed)

    def __getattr__(self, name):
        return getattr(self._gen, name)

    def __repr__(self):
        return "SeededRng(seed=%d)" % self.seed


def new_seed():
    env = os.environ.get(SEED_ENV)
    if env:
        return int(env)
    return int.from_bytes(os.urandom(8), "little") >> 1


@pytest.fixture
def rng():
    """Fresh random data per test; the seed is reported on failure."""
    return SeededRng(new_seed())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        generator = getattr(item, "funcargs", {}).get("rng")
        if isinstance(generator, SeededRng):
            report.sections.append((
                "random seed",
                "rng seed %d (re-run with %s=%d)"
                % (generator.seed, SEED_ENV, generator.seed)))


def random_weights(rng, ndim, max_side, signed=True, shape=None,
                   min_side=1):
    """Random weights of random odd shape, bounded: sum(|w|) == 1.

    Every axis gets its own odd side in ``min_side..max_side`` (so 2D and
    3D kernels are often non-square).  Magnitudes are in [0.1, 1] before
    scaling, so no weight is so small that SciPy would drop it; with
    ``signed`` a random fraction of them is negative.  sum(|w|) == 1 keeps
    every value bounded by max(|grid|, |cval|) for any number of steps.

    Signed weights are redrawn until |sum(w)| >= 0.5: the 1e-12 relative
    test is only meaningful for a well-conditioned problem.  A kernel that
    nearly cancels itself (|sum w| << sum|w|) shrinks the result by
    |sum w|**steps while rounding errors stay near eps * sum|w|**steps --
    especially in a fused pass, whose composed kernel is computed once --
    so a relative error far above 1e-12 there says nothing about the
    engine.  test_backends.py checks such kernels against the input's
    scale instead (test_cancelling_weights).
    """
    if shape is None:
        sides = np.arange(min_side, max_side + 1, 2)
        shape = tuple(int(rng.choice(sides)) for _ in range(ndim))
    while True:
        w = rng.uniform(0.1, 1.0, shape)
        if signed:
            # up to a quarter negative on average, so the redraw loop ends
            negative = rng.random(shape) < rng.uniform(0.0, 0.25)
            w[negative] *= -1.0
        w /= np.abs(w).sum()
        if abs(w.sum()) >= 0.5:
            return w


def exact_outer(rng, side):
    """A random signed side x side outer product of nonzero factors that
    is exact in floating point (dyadic factors, scaled by a power of two
    so that sum(|w|) <= 1): the planners see rank one, as they would
    box2d49p's, and changing any one weight breaks it."""
    w = np.outer(rng.choice(np.r_[-4:0, 1:9], side) / 8.0,
                 rng.integers(1, 9, side) / 16.0)
    return w / 2.0 ** np.ceil(np.log2(np.abs(w).sum()))


# ---------------------------------------------------------------------------
# Comparison

def _describe(ctx):
    return ", ".join("%s=%s" % (k, v) for k, v in ctx.items())


def assert_close(out, ref, ctx=None, rtol=RTOL, scale=None):
    """Assert ``||out - ref|| / ||ref|| <= rtol`` (exact match if ref == 0).

    `ctx` is a dict (backend, shape, kernel, mode, steps, cval, seed, ...)
    printed in the failure message with the error and where it is largest.

    `scale`, when given, is a function returning the norm of the same run
    on absolute values (|grid|, |weights|, |cval|): the size of the sums
    every result is rounded from.  Where the result is much smaller than
    that (many steps of a mass-conserving mode drive a zero-mean grid
    towards its tiny mean), rounding errors are relative to it, and the
    error is measured against it instead.
    """
    ctx = dict(ctx or {})
    out = np.asarray(out)
    ref = np.asarray(ref)
    where = _describe(ctx)
    assert out.shape == ref.shape, "shape %s, expected %s [%s]" % (
        out.shape, ref.shape, where)
    if not np.all(np.isfinite(out)):
        bad = np.argwhere(~np.isfinite(out))
        raise AssertionError("non-finite output at %d points, first at %s "
                             "(value %r) [%s]"
                             % (len(bad), tuple(bad[0]),
                                out[tuple(bad[0])], where))
    diff = np.abs(out.astype(np.float64) - ref)
    err = float(np.linalg.norm(diff.ravel()))
    norm = float(np.linalg.norm(ref.ravel()))
    if err <= rtol * norm or err == 0.0:
        return
    if scale is not None:
        norm = max(norm, float(scale()))
        where += ", error measured against the run on absolute values"
        if err <= rtol * norm:
            return
    at = np.unravel_index(int(np.argmax(diff)), diff.shape)
    raise AssertionError(
        "relative error %.3g > %.1g (||out-ref|| = %.3g, ||ref|| = %.3g); "
        "max abs error %.3g at %s: out %.17g, ref %.17g; "
        "%d of %d points differ [%s]"
        % (err / norm if norm else float("inf"), rtol, err, norm,
           diff[at], tuple(int(i) for i in at), float(out[at]),
           float(ref[at]), int(np.count_nonzero(diff)), diff.size, where))
