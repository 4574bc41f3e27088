"""python -m convstencil: a heat-equation demo, a correctness check and
GStencils/s for the 8 presets on the best backend present.

Two figures per preset: end to end (the wall time of one apply() call;
on the GPU it includes the one upload and one download per call), and,
on the GPU, the step loop alone as the engine timed it on the device
(last_run_info()["device_seconds"]).  benchmarks/ has the careful
harness (warm-up, medians, baselines).
"""
import argparse
import sys
import time

import numpy as np

from . import PRESETS, Stencil, apply, backends, last_run_info
from ._backends import best_backend, cuda_device

# Grid sizes per dimensionality: small enough for a laptop, large enough
# to leave the caches.
SIZES = {"cpu": {1: (1 << 22,), 2: (2048, 2048), 3: (128, 128, 128)},
         "cuda": {1: (1 << 26,), 2: (8192, 8192), 3: (384, 384, 384)}}


def heat_step_numpy(u, alpha):
    """One explicit heat step, 5-point star, zero (Dirichlet) boundary."""
    p = np.pad(u, 1)
    return ((1 - 4 * alpha) * u + alpha * (p[:-2, 1:-1] + p[2:, 1:-1]
                                           + p[1:-1, :-2] + p[1:-1, 2:]))


def check_heat(backend, rng):
    """Diffuse a hot square 200 steps; compare with plain NumPy."""
    u = np.zeros((257, 263))
    u[100:150, 90:170] = 1.0
    u += 0.01 * rng.random(u.shape)
    alpha, steps = 0.2, 200
    got = apply(u, Stencil("heat2d", alpha=alpha), steps=steps,
                backend=backend)
    ref = u
    for _ in range(steps):
        ref = heat_step_numpy(ref, alpha)
    err = np.linalg.norm(got - ref) / np.linalg.norm(ref)
    print("heat2d 257x263, 200 steps, %s (%s): relative error %.2e vs NumPy"
          % (backend, last_run_info().get("path"), err))
    return err <= 1e-12


def time_preset(name, shape, steps, backend, rng):
    """GStencils/s end to end and on the device (None off the GPU)."""
    u = rng.random(shape)
    apply(u[tuple(slice(0, 16) for _ in shape)], name, steps=1,
          backend=backend)  # warm-up: thread pools, device context
    t0 = time.perf_counter()
    apply(u, name, steps=steps, backend=backend)
    seconds = time.perf_counter() - t0
    info = last_run_info()
    device = info.get("device_seconds")
    on_device = (u.size * steps / device / 1e9
                 if device is not None and device > 0 else None)
    return u.size * steps / seconds / 1e9, on_device, info


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m convstencil",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--backend", default="auto",
                        help="auto (default), cpu, cpu-tc or cuda")
    parser.add_argument("--steps", type=int, default=None,
                        help="time steps per preset (default: 10 on the "
                             "CPU, 300 on the GPU)")
    args = parser.parse_args(argv)
    backend = best_backend() if args.backend == "auto" else args.backend
    rng = np.random.default_rng()

    print("convstencil backends:", backends())
    if backend == "cuda":
        print("device:", cuda_device())
    ok = check_heat(backend, rng)
    gpu = backend == "cuda"
    sizes = SIZES["cuda" if gpu else "cpu"]
    steps = args.steps if args.steps is not None else (300 if gpu else 10)
    print("\nGStencils/s: end to end%s"
          % (", and the step loop on the device" if gpu else ""))
    print("%-10s %-16s %6s %11s %9s  %s" % ("preset", "grid", "steps",
                                            "end-to-end", "device",
                                            "path"))
    for name in PRESETS:
        ndim = Stencil(name).ndim
        rate, on_device, info = time_preset(name, sizes[ndim], steps,
                                            backend, rng)
        print("%-10s %-16s %6d %11.2f %9s  %s (fused %d)"
              % (name, "x".join(map(str, sizes[ndim])), steps, rate,
                 "%.1f" % on_device if on_device else "-",
                 info.get("path"), info.get("fused_depth", 1)))
    if not ok:
        print("FAILED: the heat2d check disagrees with NumPy", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
