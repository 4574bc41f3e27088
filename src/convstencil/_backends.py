"""Which backends this build and this machine can run, and why not; the
GPU path backend "cuda" runs; the GPU engine's cache of memory kept
between calls."""
import atexit
import os

from . import _core, _engine, _model

# The backends' codes live with the engine calls (_engine.py).
BACKEND_CODES = _engine.BACKEND_CODES
CUDA_BACKENDS = _engine.CUDA_BACKENDS

_cuda_status = None

# What the runtime says where no driver is installed at all: a statically
# linked runtime finds no libcuda and calls the driver "insufficient".
_NO_DRIVER = "CUDA driver version is insufficient"


def _driver_present():
    """Whether the NVIDIA driver library can be loaded."""
    import ctypes
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


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
            reason = message.replace("no usable CUDA device: ", "")
            if _NO_DRIVER in reason and not _driver_present():
                reason = ("no NVIDIA GPU driver found (libcuda.so.1 is not "
                          "installed), so there is no GPU to run on")
            _cuda_status = "built, no usable device: %s" % reason
    return _cuda_status


def cuda_device():
    """One-line description of the current CUDA device, or None."""
    built, count, message = _core.cuda_info()
    return message if built and count > 0 else None


def devices():
    """The CUDA devices this build can run on, as a list of dicts: index,
    description ("NVIDIA H100 80GB HBM3, sm_90, 132 SMs"), cc_major
    (compute capability), sms; empty where there is none (backends()
    says why).  The current device is left as it was.

    >>> convstencil.devices()            # on a machine without a GPU
    []
    >>> convstencil.devices()[0]["description"]
    'NVIDIA H100 80GB HBM3, sm_90, 132 SMs'
    """
    if cuda_status() != "available":
        return []
    count = _core.cuda_info()[1]
    current = _core.cuda_current_device()
    found = []
    try:
        for index in range(count):
            _core.cuda_set_device(index)
            message = _core.cuda_info()[2]
            caps = _core.cuda_device_caps()
            found.append({"index": index,
                          "description": message.split(" (device ")[0],
                          "cc_major": caps["cc_major"], "sms": caps["sms"]})
    finally:
        _core.cuda_set_device(current)
    return found


_device_caps = {}  # device index -> its facts


def cuda_device_caps():
    """The current CUDA device's facts the planner reads (a dict:
    cc_major, sms, smem_optin), or None where no device can run; read
    once per device, as the engine's own cache is."""
    if cuda_status() != "available":
        return None
    try:
        device = _core.cuda_current_device()
        if device not in _device_caps:
            _device_caps[device] = _core.cuda_device_caps()
    except RuntimeError:
        return None
    return _device_caps[device]


def cuda_plan_device():
    """(cc_major, smem_optin): the compute capability major and the
    shared memory (bytes) a block may opt in to that the planner takes
    for the current device; (9, 0) where none can run, an H100's, whose
    constants the model holds (0: no limit)."""
    caps = cuda_device_caps()
    return (caps["cc_major"], caps["smem_optin"]) if caps else (9, 0)


def cuda_image_arch():
    """The architecture of the kernel image the current device runs (90:
    sm_90's, which holds every kernel); 90 where none can run, as for the
    H100 the model describes."""
    caps = cuda_device_caps()
    return caps["image_arch"] if caps else 90


def gpu_run_model(name, shape, w, mode, steps):
    """What the performance model prices for a run of backend `name` (a
    CUDA one) in the engine's own layout: (path name, cc_major,
    max_depth, smem_optin), the path gpu_path gives the engine ("cuda":
    _model.auto_gpu_path's, the others their own) and the device and
    depth cap its plan takes."""
    env = os.environ.get("CONVSTENCIL_CUDA_MAX_DEPTH", "")
    cap = int(env) if env.isdigit() else 0
    cc_major, smem_optin = cuda_plan_device()
    if name == "cuda":
        path = _model.auto_gpu_path(shape, w, mode, steps, cc_major, cap,
                                    smem_optin)
    else:
        code = BACKEND_CODES[name][1]
        path = next(p for p, c in _engine.PATH_CODES.items() if c == code)
    return path, cc_major, cap, smem_optin


def gpu_path(name, shape, w, mode, steps, device_arrays=False):
    """The engine's path code for a run of backend `name` (a CUDA one):
    "cuda" takes the path _model.auto_gpu_path predicts fastest for this
    grid, kernel, mode and step count; the others their own.

    One step between device arrays (`device_arrays`) is left to the
    engine (PATH_AUTO): it runs the direct kernel, which reads and writes
    the arrays where they are, asynchronously, instead of loading them
    into its padded layout (csrc/cuda/device_call.cu)."""
    if name != "cuda":
        return BACKEND_CODES[name][1]
    if device_arrays and steps == 1:
        return _engine.PATH_CODES["auto"]
    return _engine.PATH_CODES[gpu_run_model(name, shape, w, mode, steps)[0]]


def resolve_host_backend(backend, ndim, weights):
    """The backend a host grid runs on for `backend` ("auto": the best
    here), checked to be usable for a `ndim`-D kernel `weights`."""
    key = _engine.backend_name(backend)
    if key == "auto":
        return best_backend()
    if key in CUDA_BACKENDS:
        status = cuda_status()
        if status != "available":
            raise RuntimeError("backend %r is not usable here: %s"
                               % (key, status))
    if key == "cpu-tc":
        # the GPU's tensor-core limits (plan.h), which the emulation runs
        limit = _core.TC_MAX_SIDE_1D if ndim == 1 else _core.TC_MAX_SIDE
        if max(weights.shape) > limit:
            raise ValueError("backend 'cpu-tc' runs %dD kernels up to %d "
                             "per axis, got shape %s; use backend='cpu'"
                             % (ndim, limit, weights.shape))
    return key


def resolve_device_backend(backend):
    """The CUDA backend a GPU array runs on for `backend` ("auto":
    "cuda"); TypeError where it cannot run there."""
    key = _engine.backend_name(backend)
    if key in ("cpu", "cpu-tc"):
        raise TypeError("backend %r runs on host memory, but the grid is a "
                        "GPU array; use backend='auto' or 'cuda' (or copy "
                        "it to the host first, e.g. cupy.asnumpy(grid))"
                        % key)
    status = cuda_status()
    if status != "available":
        raise TypeError("the grid is a GPU array, which only the CUDA "
                        "engine runs, and it is not usable here: %s; pass a "
                        "NumPy array instead" % status)
    return "cuda" if key == "auto" else key


def backends():
    """Map each backend name to "available" or why it cannot run here.

    "cpu" is the direct C engine, "cpu-tc" the CPU emulation of the
    tensor-core algorithm (for verification, not speed), "cuda" the GPU
    engine on the path the performance model predicts fastest for the
    grid, kernel and step count (explain() shows the prediction;
    last_run_info()["path"] says which ran); "cuda-tc" and "cuda-core"
    force one path.

    >>> convstencil.backends()["cpu"]
    'available'
    >>> convstencil.backends()["cuda"]      # on a machine without a GPU
    'built, no device visible'
    """
    status = cuda_status()
    result = {"cpu": "available", "cpu-tc": "available"}
    for name in CUDA_BACKENDS:
        result[name] = status
    return result


def best_backend():
    """The backend "auto" runs: the GPU when usable, else the CPU."""
    return "cuda" if cuda_status() == "available" else "cpu"


# Functions that free memory a layer above keeps between calls
# (convstencil.distributed's pooled padded blocks), each returning the
# device bytes it freed: clear_cache() calls them.
_RELEASES = []


def register_release(release):
    """Have clear_cache() call release() (-> device bytes freed)."""
    _RELEASES.append(release)


def clear_cache():
    """Free the memory the engines keep between calls.

    The GPU engine keeps the device memory of its last grids (up to a
    quarter of the device's memory, or CONVSTENCIL_CACHE_BYTES bytes) and
    64 MiB of pinned host memory per concurrent call, so that the next
    call of the same or a smaller size allocates nothing; the CPU engine
    keeps its padded grids, temporary grid and ring planes (up to 256 MiB
    and a sixteenth of the machine's memory), so that the next call does
    not pay their page faults; convstencil.distributed keeps up to two padded
    blocks of its runs on device blocks.  Call this to give that
    memory back (to CuPy or PyTorch, say); it is also freed at exit.
    Returns the device bytes freed (0 without the CUDA engine).

    >>> convstencil.clear_cache()
    0
    """
    freed = sum(release() for release in _RELEASES)
    return freed + _core.clear_cache()


def cache_info():
    """What the engines keep between calls: a dict of device_bytes
    (idle device memory), blocks (idle grid arenas), pinned_bytes
    (staging) and lanes (sets of streams, idle or in use) of the GPU
    engine, and host_bytes (the CPU engine's kept blocks).

    >>> v = convstencil.apply(cupy_grid, "heat2d", steps=10)
    >>> convstencil.cache_info()["blocks"]
    1
    """
    return _core.cache_info()


atexit.register(_core.clear_cache)
