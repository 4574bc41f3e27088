"""explain(): the plan a run would follow and what the model predicts for
it, as a small result object that prints as a table.

The plan is the engines' own (GPU: csrc/plan.c through _core.plan; CPU:
the blocked path's choice mirrored in _model.py); the prediction is
_model.py's.  No GPU is needed: without one the GPU backends are
explained for an H100, and the printout says the device is assumed.
"""
import functools
import numbers
import os

import numpy as np

from . import _backends, _device, _engine, _model
from ._scheme import Scheme
from ._stencil import Stencil, resolve_weights

_GPU_PATHS = {"cuda": "auto", "cuda-tc": "tensor-core",
              "cuda-core": "cuda-core"}
_CANDIDATES = ("tensor-core", "cuda-core")
NOT_MODELLED = "not modelled: verification backend"


class Explanation:
    """What explain() returns: attributes (path, fused_depth,
    bytes_per_point_per_step, predicted_seconds, bound, ...), as_dict(),
    and a readable table from str() / repr()."""

    def __init__(self, fields):
        self._fields = fields
        for key, value in fields.items():
            setattr(self, key, value)

    def as_dict(self):
        """The fields as a plain dict (lists of dicts for passes and
        alternatives)."""
        return {k: (list(map(dict, v)) if k in ("passes", "alternatives")
                    else v) for k, v in self._fields.items()}

    def __str__(self):
        return _format(self._fields)

    __repr__ = __str__


def _seconds(s):
    if s is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if s >= scale:
            return "%.3g %s" % (s / scale, unit)
    return "%.3g us" % (s / 1e-6)


def _format(f):
    lines = ["convstencil.explain: %s, %d step(s) of %s on %s, mode %s"
             % (f["backend"], f["steps"], f["stencil"],
                "x".join(map(str, f["shape"])), f["mode"]),
             "  %-17s %s" % ("device", f["device"])]
    rows = [("path", f["path"]),
            ("fused depth", "%d (%d fused passes, %d unfused steps)"
             % (f["fused_depth"], f["fused_passes"], f["unfused_steps"])),
            ("bytes/point/step", "%.3g" % f["bytes_per_point_per_step"]),
            ("flops/point/step", "%.3g useful, %.3g executed"
             % (f["flops_per_point_per_step"],
                f["executed_flops_per_point_per_step"])),
            ("predicted time", _seconds(f["predicted_seconds"])
             + ("" if f["predicted_gstencils_per_s"] is None
                else " (%.4g GStencils/s)" % f["predicted_gstencils_per_s"])),
            ("bound", f["bound"])]
    if f["transfer_seconds"] is not None:
        rows.append(("with transfers", "%s (NumPy grid: upload and "
                     "download %s)" % (_seconds(f["predicted_seconds"]
                                                + f["transfer_seconds"]),
                                       _seconds(f["transfer_seconds"]))))
    lines += ["  %-17s %s" % row for row in rows]
    if f["passes"]:
        lines.append("  passes:")
        for p in f["passes"]:
            lines.append("    %4d x %-11s %-9s depth %-2d %6.3g B/pt  %s each,"
                         " %s" % (p["count"], p["label"], p["kernel"],
                                  p["depth"], p["bytes_per_point"],
                                  _seconds(p["seconds"]), p["bound"]))
    if f["alternatives"]:
        lines.append("  alternatives:")
        for a in f["alternatives"]:
            what = ("%s, %s" % (_seconds(a["predicted_seconds"]), a["bound"])
                    if a["runs"] else "cannot run: %s" % a["reason"])
            lines.append("    %-24s %s%s" % (a["path"], what,
                                             "  <- chosen" if a["chosen"]
                                             else ""))
        if f["model_agrees"] is not None:
            lines.append("  the model %s the planner's choice"
                         % ("agrees with" if f["model_agrees"]
                            else "would not make"))
    lines += ["  note: %s" % n for n in f["notes"]]
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# arguments

def _shape_of(grid_or_shape):
    """(shape, transfers): transfers True for a host array, False for a
    GPU array, None for a bare shape (shown as for a NumPy grid)."""
    if isinstance(grid_or_shape, (tuple, list)):
        shape = grid_or_shape
        transfers = None
    elif _device.is_device_array(grid_or_shape):
        shape = _device.device_view(grid_or_shape, known=True).shape
        transfers = False
    elif hasattr(grid_or_shape, "shape") and not isinstance(
            grid_or_shape, (str, bytes)):
        shape = np.shape(grid_or_shape)
        transfers = True
    else:
        raise TypeError("explain() takes a grid or a shape (a tuple of "
                        "ints), got %s" % type(grid_or_shape).__name__)
    if any(isinstance(n, (bool, np.bool_)) or not isinstance(
            n, numbers.Integral) for n in shape):
        raise TypeError("shape must hold integers, got %r" % (shape,))
    return tuple(int(n) for n in shape), transfers


def _max_depth(max_depth):
    if max_depth is None:
        env = os.environ.get("CONVSTENCIL_CUDA_MAX_DEPTH", "")
        return int(env) if env.isdigit() else 0
    if isinstance(max_depth, bool) or not isinstance(
            max_depth, numbers.Integral):
        raise TypeError("max_depth must be an integer, got %r"
                        % (max_depth,))
    if max_depth < 0:
        raise ValueError("max_depth must be >= 0, got %d" % max_depth)
    return int(max_depth)


def _stencil_name(stencil):
    if isinstance(stencil, str):
        return stencil
    if isinstance(stencil, Stencil):
        return getattr(stencil, "name", None) or "custom"
    return "custom weights"


# ---------------------------------------------------------------------------
# the explanation

def _pass_rows(passes):
    return [{"label": p.label, "kernel": p.kernel, "count": p.count,
             "depth": p.depth, "bytes_per_point": p.bytes,
             "useful_flops_per_point": p.useful_flops,
             "executed_flops_per_point": p.executed_flops,
             "unit": p.unit, "seconds": p.seconds, "bound": p.bound}
            for p in passes]


def _per_step(passes, steps, attr):
    if not steps:
        return 0.0
    return sum(p.count * getattr(p, attr) for p in passes) / float(steps)


def _gpu_device():
    name = _backends.cuda_device()
    if name is None:
        return "NVIDIA H100 80GB HBM3 (assumed: no GPU visible)", True
    if "H100" in name:
        return name, False
    return "%s (rates of an H100 assumed)" % name, True


def _explain_gpu(shape, w, mode, steps, backend, max_depth, rates,
                 transfers):
    rates = _model.gpu_rates(rates)
    device_caps = _backends.cuda_plan_device()
    path = _GPU_PATHS[backend]
    if path == "auto":  # as the engine chooses (_backends.gpu_path)
        path = _model.fastest_gpu_path(shape, w, mode, steps, max_depth,
                                       rates, *device_caps)
    seconds, bound, passes, plan = _model.predict_gpu(
        shape, w, mode, steps, path, max_depth, rates, *device_caps)
    device, assumed = _gpu_device()
    fields = _common(shape, steps, mode, backend, plan["path"],
                     plan["fused_depth"], plan["fused_passes"],
                     plan["unfused_steps"], passes, seconds, bound)
    fields.update(device=device, device_assumed=assumed,
                  pass_kind=plan["pass"], band=plan["band"],
                  transfer_seconds=(None if transfers is False else
                                    _model.transfer_seconds(shape, rates)))
    if transfers is None:
        fields["notes"].append("'with transfers' applies to a NumPy grid; "
                               "a GPU array stays on the device")
    if backend == "cuda":
        _add_candidates(fields, shape, w, mode, steps, max_depth, rates,
                        device_caps, plan["path"])
    return fields


def _add_candidates(fields, shape, w, mode, steps, max_depth, rates,
                    device_caps, chosen):
    """Each path the planner could run for the kernel on the device
    (_backends.cuda_plan_device), predicted."""
    alts = []
    for path in _CANDIDATES:
        try:
            t, b, _, _ = _model.predict_gpu(shape, w, mode, steps, path,
                                            max_depth, rates,
                                            *device_caps)
        except ValueError as exc:
            alts.append({"path": path, "runs": False, "reason": str(exc),
                         "predicted_seconds": None, "bound": None,
                         "chosen": False})
            continue
        alts.append({"path": path, "runs": True, "reason": None,
                     "predicted_seconds": t, "bound": b,
                     "chosen": path == chosen})
    runnable = [a for a in alts if a["runs"]]
    fastest = min(runnable, key=lambda a: a["predicted_seconds"])
    fields["alternatives"] = alts
    fields["model_agrees"] = (steps == 0 or fastest["path"] == chosen
                              or fastest["predicted_seconds"]
                              >= 0.98 * fields["predicted_seconds"])


def _cpu_passes(plan, shape, steps, w, cost):
    """The passes of a priced CPU plan: a call's fixed part (its setup,
    a fresh result's first touch) and the passes (blocked) or steps
    (direct), each with its share of the compute and memory."""
    if not steps:
        return []
    useful = 2.0 * np.count_nonzero(w)
    blocked = plan["path"] != "direct"
    count = plan["passes"]
    depth = plan["fused_depth"]
    moved = 8.0 * plan["loaded"] + 16.0 if blocked else 0.0
    executed = 2.0 * plan["row_taps"] * plan["computed"]
    call = _model.Pass("call", "setup", 1, 0,
                       (32.0 if not blocked else 0.0)
                       + (8.0 if cost.fresh else 0.0), 0.0, 0.0,
                       "FP64 units", cost.call + cost.setup + cost.fresh,
                       "memory" if cost.setup + cost.fresh > cost.call
                       else "launches")
    each = (cost.compute + cost.memory) / count
    rows = [call, _model.Pass(
        "blocked pass" if blocked else "step", plan["path"], count,
        depth, moved, useful * steps / count, executed * steps / count,
        "FP64 units", each, cost.bound)]
    return rows


def _explain_cpu(shape, w, mode, steps, rates, fresh_out=True):
    threads = int((rates or {}).get("threads", 0))
    rates = _model.cpu_rates(rates)
    plan = _model.cpu_plan(shape, w, mode, steps, threads)
    cost = _model.cpu_time(plan, shape, steps, rates, fresh_out)
    fused = plan["path"] != "direct" and plan["fused_depth"] > 1
    passes = _cpu_passes(plan, shape, steps, w, cost)
    fields = _common(shape, steps, mode, "cpu", plan["path"],
                     plan["fused_depth"] if fused else 1,
                     plan["passes"] if fused else 0,
                     0 if fused else steps, passes, cost.seconds,
                     cost.bound)
    fields.update(device="this CPU, %d of %d thread(s): the rates of a "
                  "2-core Xeon, compute x %.2f, memory x %.2f (measured)"
                  % (plan["threads"], rates["threads"],
                     rates["compute_scale"], rates["memory_scale"]),
                  device_assumed=False, pass_kind=plan["path"],
                  band="none", transfer_seconds=None, threads=plan["threads"])
    fields["alternatives"] = [
        {"path": plan["path"] + (" (T=%d)" % plan["fused_depth"]
                                 if fused else ""),
         "runs": True, "reason": None, "predicted_seconds": cost.seconds,
         "bound": cost.bound, "chosen": True}]
    fields["notes"].append("the plan is the CPU engine's own "
                           "(csrc/cpu/cpu_engine.c, the function its run "
                           "calls); its threads follow the machine's load "
                           "now")
    if cost.fresh:
        fields["notes"].append(
            "includes %s for the first touch of the result apply() "
            "allocates (pass out= to reuse one; on a virtual machine this "
            "varies several-fold)" % _seconds(cost.fresh))
    return fields


def _explain_cpu_tc(shape, w, mode, steps, max_depth):
    plan = _model.gpu_plan(shape, w, mode, steps, "tensor-core", 9,
                           max_depth)
    rates = _model.gpu_rates()
    passes = _model.gpu_passes(plan, shape, w, mode, rates)
    fields = _common(shape, steps, mode, "cpu-tc", plan["path"],
                     plan["fused_depth"], plan["fused_passes"],
                     plan["unfused_steps"], passes, None, NOT_MODELLED)
    fields.update(device="this CPU (emulating an sm_90 device's "
                  "tensor-core plan)", device_assumed=False,
                  pass_kind=plan["pass"], band=plan["band"],
                  transfer_seconds=None)
    for p in fields["passes"]:
        p["seconds"], p["bound"] = None, NOT_MODELLED
    fields["notes"].append("cpu-tc checks the tensor-core algorithm and "
                           "is slow by design; its time is not predicted")
    return fields


def _common(shape, steps, mode, backend, path, depth, fused, unfused,
            passes, seconds, bound):
    npts = float(np.prod(shape))
    return {
        "backend": backend, "shape": shape, "steps": steps, "mode": mode,
        "path": path, "fused_depth": depth, "fused_passes": fused,
        "unfused_steps": unfused,
        "bytes_per_point_per_step": _per_step(passes, steps, "bytes"),
        "flops_per_point_per_step": _per_step(passes, steps,
                                              "useful_flops"),
        "executed_flops_per_point_per_step": _per_step(
            passes, steps, "executed_flops"),
        "predicted_seconds": seconds,
        "predicted_gstencils_per_s": (npts * steps / seconds / 1e9
                                      if seconds and steps else None),
        "bound": bound, "passes": _pass_rows(passes), "alternatives": [],
        "model_agrees": None, "notes": []}


def explain(grid_or_shape, stencil=None, *, weights=None, steps=1,
            mode=None, backend="auto", max_depth=None, rates=None):
    """The plan a run of `stencil` on `grid_or_shape` would follow, and
    the time the performance model predicts for it.

    `grid_or_shape` is a grid (NumPy or GPU array) or its shape; the
    other arguments are apply()'s (mode None: "constant", or a scheme's
    own).  `stencil` may be a Scheme: then `grid_or_shape` is the shape,
    one grid or the tuple of grids, and the plan is the scheme engine's
    (on the GPU its own choice of one-step or blocked passes,
    csrc/scheme_plan.c).  GPU backends ("cuda", "cuda-tc",
    "cuda-core") are explained on any machine: without a GPU for an H100
    (the printout says the device is assumed).  `max_depth` caps the
    fused depth as CONVSTENCIL_CUDA_MAX_DEPTH does (None: that variable);
    `rates` overrides the model's rates (GPU: "bandwidth",
    "tensor_flops", "fp64_flops", "smem_rate", "h2d", "d2h",
    "launch_seconds"; CPU: the keys of _model.CPU_STORED,
    "compute_scale" and "memory_scale" (skip their measurement) and
    "threads", the team the engine's plan is made for).

    Returns an Explanation: path, fused_depth, bytes_per_point_per_step,
    flops_per_point_per_step (useful: 2 x the nonzero taps),
    executed_flops_per_point_per_step, predicted_seconds (device time on
    the GPU), transfer_seconds (a NumPy grid's upload and download),
    bound ("memory", "tensor cores", "FP64 units", "shared memory" or
    "launches"), passes, and for backend "cuda" the alternatives (each
    path that runs the kernel, predicted) and model_agrees.

    >>> print(convstencil.explain((4096, 4096), "heat2d", steps=100,
    ...                           backend="cuda"))
    """
    if isinstance(stencil, Scheme):
        return _explain_scheme(grid_or_shape, stencil, steps, mode, backend,
                               rates)
    mode = "constant" if mode is None else mode
    shape, transfers = _shape_of(grid_or_shape)
    w = np.ascontiguousarray(resolve_weights(stencil, weights, "explain()"),
                             dtype=np.float64)
    _engine.check_ndim(shape, w)
    steps = _engine.resolve_steps(steps)
    mode = _engine.resolve_mode(mode)
    backend = _engine.backend_name(backend)
    max_depth = _max_depth(max_depth)
    if rates is not None and not isinstance(rates, dict):
        raise TypeError("rates must be a dict, got %s"
                        % type(rates).__name__)
    if backend == "auto":
        backend = "cuda" if transfers is False else _backends.best_backend()
    if backend in _GPU_PATHS:
        fields = _explain_gpu(shape, w, mode, steps, backend, max_depth,
                              rates, transfers)
    elif backend == "cpu":
        fields = _explain_cpu(shape, w, mode, steps, rates)
    else:
        fields = _explain_cpu_tc(shape, w, mode, steps, max_depth)
    fields["stencil"] = _stencil_name(stencil)
    return Explanation(fields)


# ---------------------------------------------------------------------------
# schemes

# what an H100 block may opt in to: the planner's limit without a GPU
_H100_SMEM_OPTIN = 232448


def _scheme_costs(scheme):
    """Per grid point and step of the one-step passes: (bytes read and
    written, useful flops), from the scheme's tables: each stage reads
    every field and parameter it needs once and writes its sums; a
    stencil term costs 2 flops a nonzero tap, a monomial one multiply a
    factor, a coefficient and the sum one each."""
    t = scheme.tables()
    k = len(scheme.fields)
    nbytes, flops = 0.0, 0.0
    for first_update, count in t["stages"]:
        read, params, writes = set(), set(), 0
        for target, first, nterms in t["updates"][first_update:
                                                  first_update + count]:
            rows = t["terms"][first:first + nterms]
            rename = (nterms == 1 and rows[0][0] == 1 and rows[0][1] < 0
                      and t["coefs"][first] == 1.0
                      and sorted(rows[0][4:]) == [0] * (k - 1) + [1])
            writes += not rename
            for row in rows:
                if row[1] >= 0:
                    params.add(int(row[1]))
                    flops += 1
                if row[0] == 0:
                    read.add(int(row[2]))
                    flops += 2 * np.count_nonzero(t["stencils"][row[3]])
                else:
                    read.update(f for f in range(k) if row[4 + f])
                    flops += int(sum(row[4:]))
                flops += 2
        nbytes += 8.0 * (len(read) + len(params) + writes)
    return nbytes, flops


def _scheme_shape(grid_or_shape):
    """(shape, transfers) of a scheme's shape, grid or tuple of grids."""
    if isinstance(grid_or_shape, (tuple, list)) and grid_or_shape and all(
            hasattr(g, "shape") or _device.is_device_array(g)
            for g in grid_or_shape):
        grid_or_shape = grid_or_shape[0]
    return _shape_of(grid_or_shape)


def _explain_scheme(grid_or_shape, scheme, steps, mode, backend, rates):
    shape, transfers = _scheme_shape(grid_or_shape)
    steps = _engine.resolve_steps(steps)
    mode = scheme.mode if mode is None else _engine.resolve_mode(mode)
    backend = _engine.backend_name(backend)
    if rates is not None and not isinstance(rates, dict):
        raise TypeError("rates must be a dict, got %s"
                        % type(rates).__name__)
    if len(shape) != scheme.ndim:
        raise ValueError("the scheme is %dD and the grid %dD (shape %r)"
                         % (scheme.ndim, len(shape), shape))
    if backend == "auto":
        backend = "cuda" if transfers is False else _backends.best_backend()
    if backend not in ("cuda", "cpu"):
        raise ValueError("a scheme runs on backend 'cpu' or 'cuda', not %r"
                         % backend)
    nbytes, flops = _scheme_costs(scheme)
    npts = float(np.prod(shape))
    k, p = len(scheme.fields), len(scheme.params)
    stages = len(scheme.tables()["stages"])
    if backend == "cuda":
        fields = _explain_scheme_gpu(shape, scheme, mode, steps, rates,
                                     transfers, nbytes, flops, npts, k, p,
                                     stages)
    else:
        fields = _explain_scheme_cpu(shape, scheme, mode, steps, rates,
                                     nbytes, flops, npts, k, p)
    fields.update(mode=mode, stencil="scheme of %s (%d stage%s)" % (
        ", ".join(f.name for f in scheme.fields), stages,
        "" if stages == 1 else "s"))
    return Explanation(fields)


def _explain_scheme_gpu(shape, scheme, mode, steps, rates, transfers,
                        nbytes, flops, npts, k, p, stages):
    rates = _model.gpu_rates(rates)
    smem = _backends.cuda_plan_device()[1] or _H100_SMEM_OPTIN
    image_arch = _backends.cuda_image_arch()
    plan = _engine.plan_scheme_device(shape, scheme.tables(), fields=k,
                                      params=p, mode=mode, steps=steps,
                                      smem_optin=smem, image_arch=image_arch)
    streamed = plan["path"] == "scheme-streamed"
    blocked = streamed or plan["path"] == "scheme-blocked"
    depth = plan["fused_depth"]
    per = (plan["streamed_seconds"] if streamed else
           plan["blocked_seconds"] if blocked else plan["onestep_seconds"])
    launches = -(-steps // depth) if blocked else steps * stages
    seconds = (npts * steps * per + launches * rates["launch_seconds"]
               if steps else 0.0)
    # the fraction of the copy floor the one-step tiles reach
    # (csrc/scheme_plan.c): 2D 93%, 3D 69%
    floor = 0.69 if len(shape) == 3 and shape[0] > 1 else 0.93
    memory = nbytes / (floor * rates["bandwidth"])
    bound = ("registers" if streamed else "shared memory" if blocked else
             "memory" if plan["onestep_seconds"] <= 1.05 * memory
             else "instructions")
    if blocked:  # each array moved once a pass of `depth` steps
        row = _model.Pass("streamed pass" if streamed else "blocked pass",
                          plan["path"], launches, depth,
                          (2 * k + p) * 8.0, flops * depth, flops * depth,
                          bound, seconds / max(launches, 1), bound)
    else:
        row = _model.Pass("step", plan["path"], steps, 1, nbytes, flops,
                          flops, "FP64 units", seconds / max(steps, 1),
                          bound)
    fields = _common(shape, steps, None, "cuda", plan["path"], depth,
                     launches if blocked else 0, 0 if blocked else steps,
                     [row] if steps else [], seconds, bound)
    device, assumed = _gpu_device()
    moved = npts * 8.0
    fields.update(device=device, device_assumed=assumed,
                  pass_kind=plan["path"], band=None,
                  transfer_seconds=(None if transfers is False else
                                    (k + p) * moved / rates["h2d"]
                                    + k * moved / rates["d2h"]))
    alts = [{"path": "scheme", "runs": True, "reason": None,
             "predicted_seconds": npts * steps * plan["onestep_seconds"],
             "bound": None, "chosen": not blocked}]
    if plan["streamed_seconds"]:
        alts.append({"path": "scheme-streamed", "runs": True,
                     "reason": None,
                     "predicted_seconds": (npts * steps
                                           * plan["streamed_seconds"]),
                     "bound": "registers", "chosen": streamed})
    else:
        alts.append({"path": "scheme-streamed", "runs": False,
                     "reason": "streamed passes are built for sm_90 only; "
                               "this device runs the sm_%d kernels"
                               % image_arch if image_arch < 90 else
                               "streamed passes take one-stage 2D or 3D "
                               "schemes of up to 2 fields, stencils within "
                               "3 x 3 (3D: the 7-point star), wrap or "
                               "constant, grids of 16 x 16 (3D: 8 x 8 x 8) "
                               "or more",
                     "predicted_seconds": None, "bound": None,
                     "chosen": False})
    if plan["blocked_seconds"]:
        alts.append({"path": "scheme-blocked", "runs": True, "reason": None,
                     "predicted_seconds": (npts * steps
                                           * plan["blocked_seconds"]),
                     "bound": "shared memory",
                     "chosen": blocked and not streamed})
    else:
        alts.append({"path": "scheme-blocked", "runs": False,
                     "reason": "blocked passes take 2D grids of 2 steps or "
                               "more and tables that fit the kernel",
                     "predicted_seconds": None, "bound": None,
                     "chosen": False})
    fields["alternatives"] = alts
    fields["model_agrees"] = True  # the engine's own choice
    if streamed:
        fields["notes"].append("streamed passes of %d steps, carried in "
                               "registers" % depth)
    elif blocked:
        fields["notes"].append("blocked passes of %d rows and %d steps "
                               "(%d bytes of shared memory a block)"
                               % (plan["rows"], depth,
                                  plan["shared_memory"]))
    return fields


def _explain_scheme_cpu(shape, scheme, mode, steps, rates, nbytes, flops,
                        npts, k, p):
    rates = _model.cpu_rates(rates)
    # the engine's own choice now: its threads, then its passes
    plan = _engine.plan_scheme_cpu(shape, scheme.tables(), fields=k,
                                   params=p, mode=mode, steps=steps)
    seconds, bound, rows = _model.scheme_cpu_time(plan, shape, steps, rates,
                                                  nbytes, flops, k, p)
    fields = _common(shape, steps, None, "cpu", plan["path"],
                     plan["fused_depth"], plan["fused_passes"],
                     plan["unfused_steps"], rows, seconds, bound)
    fields.update(device="this CPU, %d thread(s): the rates of a 2-core "
                  "Xeon, compute x %.2f (measured)" % (
                      plan["threads"], rates["compute_scale"]),
                  device_assumed=False, pass_kind=plan["path"], band=None,
                  transfer_seconds=None)
    if plan["path"] == "scheme-blocked":
        fields["notes"].append(
            "blocked passes of %d steps over %d tile(s) of up to %s rows, "
            "margins of %s rows (csrc/cpu/scheme_blocked.c's plan)"
            % (plan["fused_depth"], plan["tiles"][0] * plan["tiles"][1],
               " x ".join(str(n) for n in plan["tile_rows"]),
               " and ".join(str(m) for m in plan["margins"])))
    fields["notes"].append("the CPU scheme engine's time is modelled as "
                           "a pass's bytes plus its operations, a pass at "
                           "a time, plus the whole-grid passes' copies in "
                           "and out; fitted on 2 cores "
                           "(benchmarks/bench_explain_schemes_cpu.py)")
    return fields


# ---------------------------------------------------------------------------
# last_run_info()

@functools.lru_cache(maxsize=128)
def _predicted_cached(shape, wbytes, wshape, mode, steps, backend, path,
                      max_depth, threads, fresh, calls, cpu_scale):
    w = np.frombuffer(wbytes, dtype=np.float64).reshape(wshape)
    try:
        if backend in _GPU_PATHS and path == "direct":
            # a device array's single step: one direct kernel, read and
            # written once, as the generic CUDA-core kernel
            return (float(np.prod(shape)) * 16.0
                    / (_model.H100["bandwidth"]
                       * _model.MEM_FRACTION["cudacore"]))
        if backend in _GPU_PATHS:
            # "cuda": the path the model chose and the engine ran
            ran = path if path in _CANDIDATES else _GPU_PATHS[backend]
            return _model.predict_gpu(shape, w, mode, steps, ran,
                                      max_depth)[0]
        if backend == "cpu":
            # each engine call as it ran: its steps, on the threads it
            # had (the plan for that many is the one it ran)
            rates = _model.cpu_rates({"compute_scale": cpu_scale[0],
                                      "memory_scale": cpu_scale[1]})
            return sum(_model.cpu_time(
                _model.cpu_plan(shape, w, mode, n, threads), shape, n,
                rates, fresh).seconds for n in calls)
    except ValueError:
        return None
    return None  # cpu-tc: not modelled


def add_prediction(info, model_args):
    """Add predicted_seconds and fraction_of_prediction (measured time /
    predicted) to a copy of a run's record."""
    shape, w, mode, steps, backend, fresh, calls = model_args
    # the CPU's compute and memory scales are part of the key: they may
    # still settle (_model.measure_cpu_scale)
    cpu_scale = ((_model.measure_cpu_scale(), _model.cpu_memory_scale())
                 if backend == "cpu" else None)
    predicted = _predicted_cached(shape, w.tobytes(), w.shape, mode, steps,
                                  backend, info.get("path"),
                                  _max_depth(None),
                                  int(info.get("threads") or 0), fresh,
                                  tuple(calls), cpu_scale)
    measured = info.get("device_seconds")
    if backend not in _GPU_PATHS:
        measured = info.get("wall_seconds")
    info["predicted_seconds"] = predicted
    info["fraction_of_prediction"] = (
        measured / predicted if measured is not None and predicted
        and info.get("nonfinite") is not True else None)
    return info
