"""Which backends this build and this machine can run, and why not."""
from . import _core

# Codes shared with csrc/module.c.
BACKEND_CODES = {"cpu": 0, "cpu-tc": 1, "cuda": 2}
CUDA_PATH_CODES = {"auto": 0, "tensor-core": 1, "cuda-core": 2}

_cuda_status = None


def cuda_status():
    """'available' or the reason the CUDA engine cannot run (cached)."""
    global _cuda_status
    if _cuda_status is None:
        built, count, message = _core.cuda_info()
        if not built:
            _cuda_status = message
        elif count > 0:
            _cuda_status = "available"
        elif count == 0:
            _cuda_status = "built, no device visible"
        else:
            _cuda_status = "built, CUDA runtime unusable: %s" % message
    return _cuda_status


def cuda_device():
    """One-line description of the CUDA device, or None."""
    built, count, message = _core.cuda_info()
    return message if built and count > 0 else None


def backends():
    """Map each backend name to "available" or why it cannot run here.

    "cpu" is the direct C engine, "cpu-tc" the CPU emulation of the
    tensor-core algorithm (for verification, not speed), "cuda" the GPU
    engine (tensor cores for 2D kernels up to 7x7, CUDA cores otherwise).
    """
    return {"cpu": "available", "cpu-tc": "available", "cuda": cuda_status()}


def best_backend():
    """The backend "auto" runs: the GPU when usable, else the CPU."""
    return "cuda" if cuda_status() == "available" else "cpu"
