"""The performance model behind explain(): what a run moves and computes,
and how long that takes on the device that runs it.

Each pass of a plan (a fused pass, or one unfused step) is priced on the
resources its kernel uses: DRAM (bytes over the copy bandwidth, times the
fraction of it that kernel family reaches), its arithmetic unit (tensor
cores or FP64 CUDA cores, executed flops over an attainable rate) and,
for the tensor-core kernels, shared memory (the stencil2row operands are
staged there).  A pass takes the longest of these, plus its launches; the
resource that won is the pass's bound, and a run's bound is the one that
costs it the most time.  The GPU plan is the engine's own
(``_core.plan``, csrc/plan.c); so is the CPU plan (``_core.plan_cpu``,
csrc/cpu/cpu_engine.c), priced with rates stored from a 2-core Xeon and
scaled by its measured speed of the engine's row kernel.  Every constant names
its source; the GPU ones are checked against the committed H100 figures
by tests/test_explain.py, the CPU ones against runs on the machine that
runs the tests.
"""
import collections
import functools
import os
import time

import numpy as np

from . import _core, _engine

# ---------------------------------------------------------------------------
# GPU constants (H100 80GB HBM3, SXM)

H100 = {
    # copy bandwidth, read + write: benchmarks/results/h100_2d.md (2997),
    # h100_1d.md (3006), h100_3d.md (3014 GB/s)
    "bandwidth": 3.0e12,
    # FP64 peaks of the H100 SXM datasheet: tensor cores, CUDA cores
    "tensor_flops": 67e12,
    "fp64_flops": 34e12,
    # pinned host <-> device rates: the medians of h100_e2e.json's
    # pinned_h2d_bytes_per_s and pinned_d2h_bytes_per_s (at 2446a85)
    "h2d": 55.3e9,
    "d2h": 55.2e9,
    # SMs, and the SMs a banded tensor-core pass leaves to the band stream
    # (docs/ARCHITECTURE.md, "tensor-core")
    "sms": 132,
    "band_sms": 4,
    # the gap one more dependent launch adds to a step loop: the
    # host microseconds of a queued steps=1 call (h100_e2e.md, 26 us
    # with stream=) are the host's; the device's gap is a few us
    "launch_seconds": 4e-6,
}

# Fraction of the copy bandwidth a kernel family reaches when bound by
# memory (per point: one read and one write of the grid).
MEM_FRACTION = {
    "tc2d": 0.89,      # h100_1d_depth.md: folded tc2d pass 167.8 of 186.8
    "tc1d": 0.85,      # h100_1d_depth.md: tc1d payload 15, 159 of 187.9
    "tc3d": 0.62,      # h100_3d.md: heat3d on tc3d, 116.0 of 186.6 (its
                       # point planes are read from global memory)
    "cc2d": 0.91,      # h100_2d.md as committed in 6936709: cc2d 170.2
                       # to 172.4 of 187.4
    "cc3d": 0.91,      # h100_3d_depth_cuda_core.md: depth 1, 170.7 of 186.6
    "cudacore": 0.60,  # h100_1d.md: heat1d on cudacore.cu, 112.7 of 187.9
    "tb2d": 0.93,      # the depth-1 passes of h100_2d_tb2d_depth.md,
                       # _outer.md and _box.md (star2d13p, box2d49p,
                       # random 7 x 7 and 5 x 5: 0.99 to 1.09 of the
                       # model's time); the strips' margins, read twice,
                       # are priced as read from memory
    "tb3d": 0.90,      # h100_3d_tb3d_depth.md: depths 1 and 2, the
                       # memory-bound ones (143 and 274)
}

# Attainable fraction of the FP64 tensor-core peak.  tc2d and tc3d never
# reach it on the measured kernels (shared memory binds first: below);
# tc1d (payload 31, four MMA n-blocks per group) is fitted to its
# measured pass, h100_1d.md: 1990.8 / 15 = 133 G points/s at 128 flops.
TENSOR_FRACTION = {"tc2d": 0.5, "tc3d": 0.5, "tc1d": 0.254}

# Attainable fraction of the FP64 CUDA-core peak, by tap set: boxes from
# h100_3d_paths.md (5x5x5 box on cc3d, 53.9 G points/s x 250 flops =
# 13.5 TFLOP/s), diamonds from h100_3d_depth_cuda_core.md (heat3d depth
# 3, 63 taps: 64.9 G points/s per pass, 8.2 TFLOP/s).
FP64_FRACTION = {"box": 0.40, "plus": 0.40, "rank1": 0.40, "diamond": 0.24,
                 "generic": 0.40}

# Shared memory the tensor-core kernels reach (bytes/s), staging the
# stencil2row operands: the bytes per output come from layout.h (below)
# and match Nsight Compute (h100_ncu_tc2d.md: 104 B of operand loads and
# 21 B of stores per output of a 7 x 7 pass); the rate is fitted to tc2d
# running 7 x 7 kernels at 144.8 and 143.6 G points/s (h100_2d.md as
# committed in 6936709, star2d13p and box2d49p on tensor cores; 145.2
# and 144.8 at 8742ccf) x 125.7 B.
SMEM_RATE = 18.2e12

# tb2d (csrc/cuda/tb2d.cu): each warp streams a strip of TB2D_STRIP
# columns (TB2D_LANE_COLUMNS per lane) down a segment of rows, carrying
# `depth` steps in registers; a depth needs a margin of `depth` columns,
# in whole lanes, on either side of the columns it stores, and `depth`
# rows above and below its segment.  TB2D_WARPS warps per block,
# TB2D_BLOCKS_PER_SM blocks per SM (its launch bounds; the occupancy the
# host asks the runtime for).
TB2D_STRIP, TB2D_LANE_COLUMNS = 64, 2
TB2D_WARPS, TB2D_BLOCKS_PER_SM = 4, 3
TB2D_MAX_SEGMENTS = 4096
# Rounds a launch costs beyond its own (cs_stream_segments): warps that
# start together run in step, the first round once more
# (h100_tb2d_segments.md)
TB2D_EXTRA_ROUNDS = 1
# The step loop is bound by instruction issue: per cell and level, the
# multiply-adds plus TB2D_OVERHEAD_OPS others (shuffles of the neighbour
# columns, the ring's loads, moves), at TB2D_FP64_FRACTION of the FP64
# peak in those units; a wider kernel (radius r) takes r neighbour
# columns from either side and keeps 2 r partial rows: TB2D_SHUFFLE_OPS
# more per cell for each radius past the first.  Fitted to the step loops
# of h100_tb2d_edge_order.md (the kernel of commit b702181, 10240^2;
# its "between" and "padded" figures averaged): heat2d (5 multiply-adds)
# 990 and box2d9p (then a box: 9) 683 G stencils/s at depth 8 give the
# first two, star2d13p (13, radius 3) 318 at depth 3 the third.
TB2D_OVERHEAD_OPS = 3.9
TB2D_FP64_FRACTION = 0.858
TB2D_SHUFFLE_OPS = 4.26
# A kernel of many taps a cell (a full-rank box of side 5 or 7) is bound
# by the FP64 units' multiply-adds alone, at TB2D_FMA_FRACTION of their
# peak: fitted to random boxes of sides 7 (depths 1 to 3) and 5 (depths
# 3 and 4) at 10240^2 (h100_2d_tb2d_depth_box.md: 0.58 to 0.65).
TB2D_FMA_FRACTION = 0.59

# tc2d's tile (csrc/cuda/tc2d.cu, also tc3d's: 32 rows x 128 columns).
TC_TILE_ROWS = 32
TC_TILE_COLS = 128

# Seconds per band point of a fused cc3d pass recomputed in place
# (fused_band.cu): h100_3d_depth_cuda_core.md, heat3d depth 2, the pass
# alone 325.9 and with the band 267.7 G stencils/s on 512^3 (1.56 M band
# points): 0.179 ms per pass.
BAND_IN_PLACE_SECONDS = 1.14e-10

BOUNDS = ("memory", "tensor cores", "FP64 units", "shared memory",
          "launches")

# ---------------------------------------------------------------------------
# kernels: composition and the tap sets the CUDA-core kernels run


def sides3(w):
    return (1,) * (3 - w.ndim) + tuple(w.shape)


def compose(w, depth):
    """The kernel of `depth` steps of w (full convolution of w with
    itself), as csrc/stencil.c's cs_kernel_compose builds it."""
    out = w
    for _ in range(depth - 1):
        size = tuple(a + b - 1 for a, b in zip(out.shape, w.shape))
        acc = np.zeros(size)
        for idx in zip(*np.nonzero(w)):
            sl = tuple(slice(i, i + n) for i, n in zip(idx, out.shape))
            acc[sl] += w[idx] * out
        out = acc
    return out


def kernel_taps(w):
    """The engine's own tap-set tests of w (csrc/plan.c, host_device.h,
    through _core.kernel_taps): cc2d, cc3d, plus, outer."""
    return _core.kernel_taps(np.ascontiguousarray(w, dtype=np.float64))


def cc_taps(w):
    """(kernel, tap set, multiply-adds per output) of the CUDA-core kernel
    that runs one step of w (plan.c: cs_cc2d_taps, cs_cc3d_taps)."""
    k = w.shape[-1]
    taps = kernel_taps(w)
    if w.ndim == 2 and taps["cc2d"]:
        # rank1: each thread 8 rows x 2 columns; a row sum per input row
        # and output column, then a column sum (cc2d.cu): 19 for 7 x 7
        macs = {"plus": 2 * k - 1, "rank1": (8 + k - 1) * k / 8.0 + k,
                "box": k * k}[taps["cc2d"]]
        return "cc2d", taps["cc2d"], macs
    if w.ndim == 3 and taps["cc3d"] == "diamond":
        return "cc3d", "diamond", int(np.count_nonzero(
            np.abs(np.indices(w.shape) - k // 2).sum(axis=0) <= k // 2))
    if w.ndim == 3 and taps["cc3d"] == "box":
        return "cc3d", "box", k ** 3
    return "cudacore", "generic", int(np.count_nonzero(w)) or 1


# ---------------------------------------------------------------------------
# tensor-core work, from csrc/layout.h


def _payload(kx):
    return 7 if kx <= 7 else 15 if kx <= 15 else 31


def tc_costs(wk, kind):
    """Per output of one tensor-core pass of composed kernel wk: executed
    tensor flops, CUDA-core flops (tc3d's point planes) and shared-memory
    bytes.

    layout.h: the ky x kx kernel sits in a payload of P columns, groups of
    G = P + 1 outputs; each output takes kpad multiply-adds from matrix A
    and kpad from B (K = ky * P padded to the MMA's k = 4), so 4 * kpad
    flops on tensor cores.  An m16n8k4 A fragment (16 x 4 doubles, from
    shared memory) serves 16 groups x 8 outputs: 4 bytes per output and
    k-step, 2 * kpad bytes per output (tc1d loads it once for two
    n-blocks: kpad).  The loader stores each input element into A and B:
    16 bytes x G / P x (tile rows + ky - 1) / tile rows per output.
    """
    kz, ky, kx = sides3(wk)
    planes = wk.reshape(kz, ky, kx)
    dense = [p for p in planes if np.count_nonzero(p) > 1]
    points = sum(1 for p in planes if np.count_nonzero(p) == 1)
    p_ = _payload(kx)
    kpad = -(-ky * p_ // 4) * 4
    operand = kpad if kind == "tc1d" else 2 * kpad
    stores = 16.0 * (p_ + 1) / p_ * (TC_TILE_ROWS + ky - 1) / TC_TILE_ROWS
    n = max(len(dense), 1)
    return 4.0 * kpad * n, 2.0 * points, (operand + stores) * n


# ---------------------------------------------------------------------------
# GPU passes

Pass = collections.namedtuple(
    "Pass", "label kernel count depth bytes useful_flops executed_flops "
            "unit seconds bound")


def _pass_time(resources, launches, rates, extra=0.0):
    """The longest resource, plus launches; (seconds, bound)."""
    bound, t = max(resources.items(), key=lambda kv: kv[1])
    t_launch = launches * rates["launch_seconds"]
    if t_launch > t:
        bound = "launches"
    return t + t_launch + extra, bound


def tb2d_margin(depth, radius=1):
    """Columns of margin on either side of a tb2d strip's stored ones:
    `radius` per step, in whole lanes."""
    lanes = -(-(radius * depth) // TB2D_LANE_COLUMNS)
    return lanes * TB2D_LANE_COLUMNS


def stream_segments(units, n, halo, resident, most, extra_rounds):
    """Segments of the streamed axis (n cells) per unit that streams it,
    as tb2d.cu and tb3d.cu pick them (cs_stream_segments):
    each segment's 2 halo extra cells weighed against the rounds of units
    the launch takes (`resident` at a time), plus `extra_rounds` (tb2d:
    one, the first round runs in step, h100_tb2d_segments.md; tb3d:
    none, h100_tb3d_segments.md); at most `most`."""
    best, best_cost = 1, None
    for s in range(1, min(n, most) + 1):
        cells = -(-n // s)
        rounds = -(-(units * s) // resident)
        cost = (rounds + extra_rounds) * (cells + 2 * halo)
        if best_cost is None or cost < best_cost:
            best, best_cost = s, cost
    return best


def tb2d_segments(columns, ny, halo_rows, resident):
    """Segments per strip (rows per segment), as tb2d.cu picks them."""
    return stream_segments(columns, ny, halo_rows, resident,
                           TB2D_MAX_SEGMENTS, TB2D_EXTRA_ROUNDS)


def _launch_idle(items, resident, extra_rounds):
    """Slots of a launch of `items` units, `resident` at a time, left
    idle: a ragged last round, and `extra_rounds` more (as
    cs_stream_segments prices them), as a factor on the time."""
    rounds = -(-items // resident)
    return (rounds + extra_rounds) * resident / items


def _blocked_pass(kind, depth, npts, bytes_, useful, executed, issue,
                  rates):
    """A tb2d or tb3d pass: memory against instruction issue (`issue`:
    FP64-unit operations per point, each already divided by the fraction
    of the peak the kernel reaches on it)."""
    res = {
        "memory": npts * bytes_ / (rates["bandwidth"] * MEM_FRACTION[kind]),
        "FP64 units": npts * issue / rates["fp64_flops"],
    }
    seconds, bound = _pass_time(res, 1, rates)
    return Pass("fused pass", kind, 0, depth, bytes_, useful, executed,
                "FP64 units", seconds, bound)


def _tb2d_pass(w, shape, depth, rates):
    """Cost of one tb2d pass of `depth` steps: every warp reads its strip
    with margins once and writes its stored columns once; each level
    computes the whole strip, the margins redundantly, and the rows of
    the segment and the radius x `depth` above and below it."""
    nz, ny, nx = (1,) * (3 - len(shape)) + tuple(shape)
    side = w.shape[-1]
    radius = (side - 1) // 2
    halo = radius * depth
    npts = float(nz * ny * nx)
    own = TB2D_STRIP - 2 * tb2d_margin(depth, radius)
    strips = -(-nx // own)
    resident = rates["sms"] * TB2D_BLOCKS_PER_SM * TB2D_WARPS
    segs = tb2d_segments(strips * nz, ny, halo, resident)
    rows = -(-ny // segs)
    idle = _launch_idle(strips * segs * nz, resident, TB2D_EXTRA_ROUNDS)
    redundancy = (float(TB2D_STRIP * strips * (rows + 2 * halo) * segs)
                  / (nx * ny))
    # a plus: its centre row and 2 r centre weights; an outer product:
    # one row filter, then a weight per output row
    taps = kernel_taps(w.reshape(side, side))
    macs = (4 * radius + 1 if taps["plus"]
            else 2 * side if taps["cc2d"] == "rank1" else side * side)
    useful = 2.0 * np.count_nonzero(w) * depth
    executed = 2.0 * macs * depth * redundancy
    bytes_ = 8.0 * (TB2D_STRIP * strips * (rows + 2 * halo) * segs
                    + nx * ny) / (nx * ny)
    others = TB2D_OVERHEAD_OPS + TB2D_SHUFFLE_OPS * (radius - 1)
    # the longer of instruction issue (every operation, at
    # TB2D_FP64_FRACTION of the FP64 peak) and the multiply-adds alone (at
    # TB2D_FMA_FRACTION)
    issue = max(2.0 * (macs + others) / TB2D_FP64_FRACTION,
                2.0 * macs / TB2D_FMA_FRACTION) * depth * redundancy * idle
    return _blocked_pass("tb2d", depth, npts, bytes_, useful, executed,
                         issue, rates)


# tb3d (csrc/cuda/tb3d.cu): one block of TB3D_THREADS threads per SM
# (its launch bounds) owns a tile of TB3D_TILE cells of a plane and
# streams a segment of planes, carrying `depth` steps; each level is
# exact one cell further in, so a tile stores its central
# (rows - 2 depth) x (columns - 2 depth) cells, and a segment starts
# `depth` planes early and ends `depth` late.
TB3D_TILE = (32, 64)
TB3D_BLOCKS_PER_SM = 1
TB3D_MAX_SEGMENTS = 1024
# Rounds a launch costs beyond its own (cs_stream_segments): none for
# tb3d's one block an SM (h100_tb3d_segments.md)
TB3D_EXTRA_ROUNDS = 0
# The stream is bound by instruction issue and latency (Nsight Compute,
# h100_ncu_tb3d.txt: 16 warps an SM): per cell and level
# TB3D_ISSUE_OPS operations (the multiply-adds, shuffles, the shared
# plane's stores and loads, the barrier's wait), at TB3D_FP64_FRACTION
# of the FP64 peak in those units.  A star's levels share one barrier a
# plane, an outer product's take one each: the star's operations are
# fewer.  Fitted to the 100-step loops of h100_explain.json at 15d94c6
# (512^3, depth 3, 5 segments a tile: heat3d 33.85 ms, box3d27p 38.19;
# depths 1 and 2 are memory-bound, h100_3d_tb3d_depth.md).
TB3D_ISSUE_OPS = {"star": 13.7, "outer": 15.4}
TB3D_FP64_FRACTION = 0.5


def tb3d_tiles(ny, nx, depth):
    """The tiles of a plane a tb3d pass of `depth` steps launches."""
    ty, tx = TB3D_TILE
    return -(-ny // (ty - 2 * depth)) * -(-nx // (tx - 2 * depth))


def tb3d_segments(tiles, nz, depth, resident):
    """Segments per tile (planes per segment), as tb3d.cu picks them."""
    return stream_segments(tiles, nz, depth, resident, TB3D_MAX_SEGMENTS,
                           TB3D_EXTRA_ROUNDS)


def _tb3d_pass(w, shape, depth, rates):
    """Cost of one tb3d pass of `depth` steps: every block reads its tile
    with margins once per plane of its segment and the 2 depth planes
    beyond, and writes its stored cells once; each level computes the
    whole tile."""
    nz, ny, nx = shape
    npts = float(nz * ny * nx)
    ty, tx = TB3D_TILE
    tiles = tb3d_tiles(ny, nx, depth)
    resident = rates["sms"] * TB3D_BLOCKS_PER_SM
    segs = tb3d_segments(tiles, nz, depth, resident)
    planes = -(-nz // segs)
    idle = _launch_idle(tiles * segs, resident, TB3D_EXTRA_ROUNDS)
    redundancy = tiles * ty * tx * segs * (planes + 2 * depth) / npts
    taps = np.count_nonzero(w)
    # a star: its 7 weights; an outer product: 3 along each axis
    macs = 7 if taps == 7 else 9
    useful = 2.0 * taps * depth
    executed = 2.0 * macs * depth * redundancy
    bytes_ = 8.0 * (redundancy + 1.0)
    ops = TB3D_ISSUE_OPS["star" if taps == 7 else "outer"]
    issue = 2.0 * ops / TB3D_FP64_FRACTION * depth * redundancy * idle
    return _blocked_pass("tb3d", depth, npts, bytes_, useful, executed,
                         issue, rates)


# the passes that step the kernel themselves, and their tail passes
_BLOCKED_PASSES = {"tb2d": _tb2d_pass, "tb3d": _tb3d_pass}


def _gpu_pass(plan, w, shape, mode, rates, fused):
    """Cost of one pass (fused: the plan's pass kind; else one step)."""
    npts = float(np.prod(shape))
    depth = plan["fused_depth"] if fused else 1
    if fused and plan["pass"] in _BLOCKED_PASSES:
        return _BLOCKED_PASSES[plan["pass"]](w, shape, depth, rates)
    wk = compose(w, depth) if depth > 1 else w
    useful = 2.0 * np.count_nonzero(wk)
    bytes_ = 16.0
    launches = 1 + (mode != "constant" or plan["fold"])  # halo refresh
    extra = 0.0
    kind = plan["pass"] if fused else None
    if kind in ("tc2d", "tc1d", "tc3d"):
        tflops, cflops, smem = tc_costs(wk, kind)
        unit = "tensor cores"
        sm_share = 1.0
        tiles = _tile_waste(plan["run_shape"], kind)
        if plan["band"] == "strips":
            sm_share = (rates["sms"] - rates["band_sms"]) / rates["sms"]
        res = {
            "memory": npts * bytes_ / (rates["bandwidth"]
                                       * MEM_FRACTION[kind]),
            "tensor cores": npts * tiles * tflops / (rates["tensor_flops"]
                                             * TENSOR_FRACTION[kind]
                                             * sm_share),
            "shared memory": npts * tiles * smem / (rates["smem_rate"]
                                                    * sm_share),
        }
        executed = tflops + cflops
    else:
        if kind == "cc3d":
            kernel, taps, macs = cc_taps(wk)
        elif plan["fold"]:
            kernel, taps, macs = "cudacore", "generic", np.count_nonzero(w)
        else:
            kernel, taps, macs = cc_taps(wk)
        kind = kernel
        unit = "FP64 units"
        executed = 2.0 * macs
        res = {
            "memory": npts * bytes_ / (rates["bandwidth"]
                                       * MEM_FRACTION[kernel]),
            "FP64 units": npts * executed / (rates["fp64_flops"]
                                             * FP64_FRACTION[taps]),
        }
    if fused and plan["band"] in ("strips", "fold-ends"):
        # edge strips gathered, stepped `depth` times and scattered on the
        # band stream (overlapped); their traffic shares DRAM
        strip = _strip_points(plan, shape)
        bytes_ += 16.0 * strip * (depth + 2) / npts
        res["memory"] += 16.0 * strip * (depth + 2) / rates["bandwidth"]
        launches += 1  # the scatter waits for the main pass
    if fused and plan["band"] == "in-place":
        extra = _band_points(plan, shape) * rates["band_in_place_seconds"]
        launches += 1
    seconds, bound = _pass_time(res, launches, rates, extra)
    return Pass("fused pass" if fused else "single step", kind,
                0, depth, bytes_, useful, executed, unit, seconds, bound)


def _tile_waste(run, kind):
    """Outputs computed per useful one: tc2d and tc3d compute whole tiles
    of 32 rows x 128 columns (a 513-column grid computes 640); tc1d's
    rows are whole folds."""
    if kind == "tc1d":
        return 1.0
    ny, nx = run[1], run[2]
    return (-(-ny // TC_TILE_ROWS) * TC_TILE_ROWS / ny
            * -(-nx // TC_TILE_COLS) * TC_TILE_COLS / nx)


def _strip_points(plan, shape):
    run = plan["run_shape"]
    total = float(np.prod(run))
    pts = 0.0
    if plan["fold"]:
        return 2.0 * plan["strip_widths"][2]
    for a in range(3):
        if plan["strip_widths"][a] and run[a] > 1:
            pts += 2.0 * plan["strip_widths"][a] * total / run[a]
    return pts


def _band_points(plan, shape):
    run = plan["run_shape"]
    inner = 1.0
    for a in range(3):
        inner *= max(run[a] - 2 * plan["band_widths"][a], 0)
    return float(np.prod(run)) - inner


@functools.lru_cache(maxsize=256)
def _plan_cached(shape, wbytes, wshape, mode, steps, path, cc_major,
                 max_depth, smem_optin):
    w = np.frombuffer(wbytes, dtype=np.float64).reshape(wshape)
    return _engine.plan(shape, w, mode=mode, steps=steps, path=path,
                        cc_major=cc_major, max_depth=max_depth,
                        smem_optin=smem_optin)


def gpu_plan(shape, w, mode, steps, path, cc_major=9, max_depth=0,
             smem_optin=0):
    """The engine's plan (a dict; ValueError when `path` cannot run w) on
    a device of compute capability `cc_major` whose blocks may opt in to
    `smem_optin` bytes of shared memory (0: no limit)."""
    w = np.ascontiguousarray(w, dtype=np.float64)
    return dict(_plan_cached(tuple(int(n) for n in shape), w.tobytes(),
                             w.shape, mode, int(steps), path, cc_major,
                             int(max_depth), int(smem_optin)))


def gpu_passes(plan, shape, w, mode, rates):
    """The passes of a plan, priced: a list of Pass with counts."""
    passes = []
    if plan["fused_passes"]:
        p = _gpu_pass(plan, w, shape, mode, rates, True)
        passes.append(p._replace(count=plan["fused_passes"]))
    if plan["unfused_steps"] and plan.get("tail_pass"):
        p = _BLOCKED_PASSES[plan["pass"]](w, shape, plan["unfused_steps"],
                                          rates)
        passes.append(p._replace(label="tail pass", count=1))
    elif plan["unfused_steps"]:
        p = _gpu_pass(plan, w, shape, mode, rates, False)
        passes.append(p._replace(count=plan["unfused_steps"]))
    return passes


def transfer_seconds(shape, rates):
    """A NumPy grid's upload and the result's download (pinned rates)."""
    nbytes = 8.0 * float(np.prod(shape))
    return nbytes / rates["h2d"] + nbytes / rates["d2h"]


def gpu_rates(overrides=None):
    rates = dict(H100)
    rates["smem_rate"] = SMEM_RATE
    rates["band_in_place_seconds"] = BAND_IN_PLACE_SECONDS
    rates.update(overrides or {})
    return rates


# ---------------------------------------------------------------------------
# CPU: the engine's own plan (csrc/cpu/cpu_engine.c plan_run, through
# _engine.plan_cpu: the function the engine's run calls), priced with
# rates stored from a 2-core Xeon and scaled to this machine by its
# measured speed of the row kernel (measure_cpu_scale)

# The model's rates, fitted by benchmarks/bench_explain_cpu.py --fit to
# the calls of every preset on the sizes and step counts of
# benchmarks/results/cpu2_explain_fractions*.md, on a 2-core Intel Xeon
# under KVM (2 MiB of L2 a core, 260 MiB of L3): two runs with the
# engine's own team and one on one thread (OMP_NUM_THREADS=1), 324
# calls, 313 of them within 0.75 to 1.33 of the fitted model (a call
# measured twice differed by up to 1.6 times on that machine).
# Seconds, on one thread:
CPU_STORED = {
    # a call: parsing, setup, the team's start and end (the fit leaves
    # next to nothing: the setup per point holds it)
    "call_seconds": 1.0e-9,
    # the direct path's setup per point (its two padded grids zeroed, the
    # grid loaded into lanes and stored back: memory, not shared by
    # threads), by the engine's dimension (1D, 2D run as rows, 3D)
    "setup_seconds": {1: 1.84e-9, 2: 1.95e-9, 3: 2.38e-9},
    # a step of the row kernel per point beyond its taps, on the direct
    # path (the whole grid in two buffers) and in a blocked pass's rings
    "point_seconds": {1: 1.83e-10, 2: 1.79e-10, 3: 3.27e-10},
    "ring_point_seconds": {1: 2.07e-10, 2: 3.18e-10, 3: 3.97e-10},
    # per multiply-add of the row kernel, on either path
    "tap_seconds": 2.01e-11,
    "ring_tap_seconds": 2.67e-11,
    # a step per row and radius along x (the x halo's moves)
    "row_radius_seconds": 2.44e-8,
    # a direct step's barriers with a team of two or more
    "sync_seconds": 2.28e-5,
    # a blocked pass's compute grows by spill_factor times the bytes its
    # rings hold beyond L2, over L2 (cs_cpu_plan's ring_bytes), by
    # dimension
    "spill_factor": {1: 0.156, 2: 2.16, 3: 0.246},
    # the blocked passes' traffic (bytes read and written) on one thread:
    # grids whose arrays fit an eighth of the last-level cache, others;
    # a team of n moves 1 + (n - 1) * memory_thread_gain times as much
    "cache_bandwidth": 1.54e10,
    "bandwidth": 8.63e9,
    "memory_thread_gain": 1.03,
    # the blocked passes' traffic's time by the engine's dimension,
    # against 1D's (the memory probe's)
    "memory_dim_factor": {1: 1.0, 2: 1.0, 3: 1.0},
    # a team of n threads computes 1 + (n - 1) * thread_gain times as
    # much as one
    "thread_gain": 0.916,
    # the first touch of a fresh result (apply() allocates one; the C
    # allocator maps one of 32 MiB or more afresh each call), per byte
    "fresh_seconds_per_byte": 1.0e-10,
    # the memory probe's reading (_memory_reading) on the machine these
    # rates were fitted on: a machine's memory scale is its reading
    # against this one (the fit takes the scale as 1)
    "memory_probe_reading": 1.0,
    # the scheme engine (csrc/cpu/scheme_cpu.c, scheme_blocked.c;
    # _model.scheme_cpu_time): a call's fixed cost (the scheme's checks
    # and tables; a 16^2 grid's call takes 35 to 70 us), its row
    # kernels, one thread, an operation of _explain._scheme_costs' count
    # on one point; a whole-grid step's
    # bytes with the team, and the barrier that ends it (the fit leaves
    # nothing beyond the bytes); the call's copy of the fields into its
    # buffers and out (a point and field); blocked passes' loads and
    # stores with the team, a pass's start and end, a tile's operations
    # against the whole grid's, and against those again where its
    # buffers spill from L2 (plan_scheme_cpu's tile_spills).  A pass
    # costs its bytes plus its operations: the fit put the two in
    # sequence, not overlapped.  Fitted on 2 cores to 61 calls (the
    # wave in 2D and 3D, with a velocity field, Gray-Scott, heat with a
    # source; 256^2 and 2048^2, 64^3 and 128^3; 1 to 100 steps; the
    # plan's path, and the whole-grid passes where it blocks), the
    # quickest of 5 calls: benchmarks/bench_explain_schemes_cpu.py
    # --whole --fit --steps 1,3,10,30,100.  The scheme engine's prices
    # take no memory scale (cpu_memory_scale): its probe is a stencil's
    # call, and refits of the schemes' rates in its units followed its
    # readings (0.83 to 1.01 as five fresh processes settled it,
    # benchmarks/results/cpu2_scales.md) no better than these rates
    # without it
    "scheme_call_seconds": 5.6e-5,
    "scheme_flop_seconds": 1.91e-11,
    "scheme_bandwidth": 6.29e10,
    "scheme_step_seconds": 0.0,
    "scheme_field_seconds": 1.89e-9,
    "scheme_blocked_bandwidth": 2.0e10,
    "scheme_pass_seconds": 4.4e-5,
    "scheme_blocked_flop_factor": 1.67,
    "scheme_spill_factor": 1.63,
}
# The stencil rates refitted on a second machine kind: a 2-core AMD EPYC
# of CPU family 26 (AVX-512, 1 MiB of L2 a core, 32 MiB of L3) under
# KVM, where the rates above priced 3D blocked calls twice as long as
# they ran and 49-tap 2D calls 0.7 times as long: 135 of 252 calls
# within 0.75 to 1.33 (benchmarks/results/cpu2amd_explain_fractions*.md,
# the engine's team and one thread). Fitted to those runs by
# `bench_explain_cpu.py --load cpu2amd_explain_fractions.json,
# cpu2amd_explain_fractions_one_thread.json --fit`: 0.75 to 1.49. In
# the units of that machine's compute scale against the stored machine
# (AMD_ZEN5_COMPUTE_SCALE, its probe's reading: every compute-scaled
# rate divided by it), so that the probe and the scheme engine's rates
# stay as they are.
AMD_ZEN5_COMPUTE_SCALE = 0.647
_AMD_ZEN5_FITTED = {
    "call_seconds": 1.53e-10,
    "setup_seconds": {1: 6.01e-10, 2: 9.63e-10, 3: 7.6e-10},
    "point_seconds": {1: 3.62e-11, 2: 5.64e-11, 3: 1.13e-10},
    # 2D's blocked rings refitted to one thread's calls (heat2d, box2d9p,
    # star2d13p, box2d49p on 2048^2, 10 and 100 steps, the fastest of 4;
    # benchmarks/results/cpu2amd_ring2d_one_thread.md): the fit above
    # priced a ring point at 1.89e-10 and a tap at 2.83e-11, heat2d's
    # calls 1.45 times as long as they ran and box2d49p's 0.9 times; a
    # ring's tap is priced per dimension here
    "ring_point_seconds": {1: 3.75e-11, 2: 3.47e-11, 3: 6.22e-11},
    "tap_seconds": 2.79e-11,
    "ring_tap_seconds": {1: 2.83e-11, 2: 4.11e-11, 3: 2.83e-11},
    "row_radius_seconds": 1.09e-08,
    "sync_seconds": 9.26e-07,
    "spill_factor": {1: 1.03e-09, 2: 0.027, 3: 7.85e-10},
    "cache_bandwidth": 1.54e+10,
    "bandwidth": 3.39e+10,
    "memory_thread_gain": 0.96,
    "memory_dim_factor": {1: 1.0, 2: 1.32, 3: 2.09},
    "thread_gain": 0.793,
    # its probe's readings: 0.76 to 1.62, median 0.885, twelve 0.5 s
    # apart
    "memory_probe_reading": 0.885,
}
# the rates a call's compute scale multiplies (cpu_time)
_COMPUTE_SCALED = ("call_seconds", "setup_seconds", "point_seconds",
                   "ring_point_seconds", "tap_seconds", "ring_tap_seconds",
                   "row_radius_seconds", "sync_seconds")


def _in_stored_units(fitted, scale):
    """Rates fitted with a machine's compute scale taken as 1, in the
    units of the stored machine's (that machine's scale against it)."""
    out = {}
    for key, value in fitted.items():
        if key in _COMPUTE_SCALED:
            value = ({d: v / scale for d, v in value.items()}
                     if isinstance(value, dict) else value / scale)
        out[key] = value
    return out


CPU_STORED_AMD_ZEN5 = dict(CPU_STORED, **_in_stored_units(
    _AMD_ZEN5_FITTED, AMD_ZEN5_COMPUTE_SCALE))
# (vendor_id, cpu family) -> its rates; other CPUs take CPU_STORED's
CPU_KINDS = {("AuthenticAMD", 26): CPU_STORED_AMD_ZEN5}


@functools.lru_cache(maxsize=1)
def cpu_kind():
    """(vendor_id, cpu family) of this machine's first CPU, from
    /proc/cpuinfo; (None, None) where it cannot be read."""
    vendor = family = None
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key, value = key.strip(), value.strip()
                if key == "vendor_id" and vendor is None:
                    vendor = value
                elif key == "cpu family" and family is None:
                    family = int(value)
                if vendor is not None and family is not None:
                    break
    except (OSError, ValueError):
        pass
    return vendor, family


def cpu_stored():
    """The stored rates for this machine's kind (CPU_KINDS), else
    CPU_STORED's."""
    return CPU_KINDS.get(cpu_kind(), CPU_STORED)


# Where the C allocator gives fresh pages every call (glibc's largest
# mmap threshold)
CPU_FRESH_BYTES = 32 << 20
# The compute scale's run on the stored machine: a step of a 5-point
# kernel on a 128 x 128 grid in cache on one thread (seconds)
CPU_STORED_STEP_SECONDS = 6.95e-6

# The compute scale, measured at a process's first CPU_SCALE_TRIES
# predictions, CPU_SCALE_INTERVAL seconds apart at the soonest
# (measure_cpu_scale)
CPU_SCALE_TRIES = 3
CPU_SCALE_INTERVAL = 2.0
_cpu_measured = {"scale": 1.0, "memory": 1.0, "readings": [], "tries": 0,
                 "at": 0.0}
# The memory scale's probe: a call the model prices as memory-bound (a
# 3-point stencil over 2^22 points, one step: the blocked path's load and
# store of 32 MiB grids, as large grids' calls move them)
CPU_MEMORY_PROBE_POINTS = 1 << 22
# The readings' bounds: a reading outside them is a machine too unlike
# the stored one for the model (or a probe gone wrong), not a rate
CPU_MEMORY_SCALE_BOUNDS = (0.4, 2.5)
_clock = time.monotonic


def _cache_bytes(level, default):
    """The size of the cache of `level` of CPU 0 (sysfs), or `default`."""
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for entry in sorted(os.listdir(base)):
            path = os.path.join(base, entry)
            with open(os.path.join(path, "level")) as f:
                if int(f.read()) != level:
                    continue
            with open(os.path.join(path, "size")) as f:
                text = f.read().strip().upper()
            scale = {"K": 1 << 10, "M": 1 << 20}.get(text[-1:], 1)
            return int(text.rstrip("KM")) * scale
    except (OSError, ValueError):
        pass
    return default


def cpu_threads():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def _call_seconds(fn, repeat):
    """Wall seconds of each of `repeat` calls of fn()."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def _min_seconds(fn, repeat):
    return min(_call_seconds(fn, repeat))


def _median_seconds(fn, repeat):
    return float(np.median(_call_seconds(fn, repeat)))


def _step_scale():
    """One measurement of the compute scale on the calling thread."""
    w = np.zeros((3, 3))
    w[1, :] = w[:, 1] = 0.2
    u = np.random.default_rng(0).random((128, 128))
    out = np.empty_like(u)

    def run(steps):
        return lambda: _engine.run_host(u, w, out, steps=steps,
                                        mode="constant", cval=0.0,
                                        backend="cpu", threads=1)
    step = (_min_seconds(run(24), 7) - _min_seconds(run(4), 7)) / 20.0
    return max(step, 1e-9) / CPU_STORED_STEP_SECONDS


def _scale_on_cores():
    """The fastest of _step_scale() on each of up to four of the cores
    this process may use (about 10 ms a core)."""
    try:
        mine = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        mine = []
    cores = mine[:: max(1, -(-len(mine) // 4))][:4]
    scales = []
    for core in cores:
        try:
            os.sched_setaffinity(0, {core})
        except OSError:
            continue
        try:
            scales.append(_step_scale())
        finally:
            os.sched_setaffinity(0, mine)
    return min(scales) if scales else _step_scale()


def _memory_reading(compute_scale):
    """One reading of the memory scale: the probe's call (the engine's
    own choice of path and team), the median of nine after one that maps
    its pages (back to back, such calls took 4.1 to 6.4 ms on the 2-core
    machine, benchmarks/results/cpu2_scales.md: a virtual machine's
    memory is shared), against the model's
    price of that call with memory_scale 1, its memory part alone
    scaled; 1.0 where the model prices no memory for it (a machine whose
    caches hold the probe) or where the probe's 64 MiB are not to be
    had (a prediction does not fail for want of its probe)."""
    w = np.array([0.25, 0.5, 0.25])
    try:
        u = np.full(CPU_MEMORY_PROBE_POINTS, 0.5)
        out = np.empty_like(u)
    except MemoryError:
        return 1.0
    record = {}

    def run():
        record.update(_engine.run_host(u, w, out, steps=1, mode="constant",
                                       cval=0.0, backend="cpu", threads=0))
    run()
    seconds = _median_seconds(run, 9)
    plan = cpu_plan(u.shape, w, "constant", 1,
                    int(record.get("threads") or 0))
    rates = cpu_rates({"compute_scale": compute_scale, "memory_scale": 1.0})
    cost = cpu_time(plan, u.shape, 1, rates, fresh_out=False)
    if cost.memory <= 0.0:
        return 1.0
    low, high = CPU_MEMORY_SCALE_BOUNDS
    return min(max((seconds - (cost.seconds - cost.memory)) / cost.memory,
                   low), high)


def measure_cpu_scale():
    """How much slower than the stored machine this one runs the engine's
    row kernel: the fastest of short runs of the engine on each of up to
    four of the cores this process may use.  The fastest is the quiet
    moment: on a virtual machine a core may run at two thirds of its
    speed for a second or more while the host runs something beside it
    (a whole measurement once read 1.37 where the same machine read
    0.94 to 0.97 in five processes a minute later).  So the scale is
    measured again at later calls, CPU_SCALE_INTERVAL seconds apart at
    the soonest and CPU_SCALE_TRIES times in all, and the fastest counts:
    a process's predictions settle within its first few seconds of
    use.  Each measurement also reads the memory scale
    (cpu_memory_scale()), whose readings' median counts: memory's noise
    runs both ways (the other machines' use of the shared last-level
    cache), so the fastest reading would price too low."""
    m = _cpu_measured
    now = _clock()
    if m["tries"] < CPU_SCALE_TRIES and (
            m["tries"] == 0 or now - m["at"] >= CPU_SCALE_INTERVAL):
        scale = _scale_on_cores()
        m["scale"] = scale if m["tries"] == 0 else min(m["scale"], scale)
        m["readings"].append(_memory_reading(m["scale"])
                             / cpu_stored()["memory_probe_reading"])
        m["memory"] = float(np.median(m["readings"]))
        m["tries"] += 1
        m["at"] = _clock()
    return m["scale"]


def cpu_memory_scale():
    """How much slower than the model's stored rates this machine moves
    large grids' bytes now: the probe's call (CPU_MEMORY_PROBE_POINTS)
    against its price, the median of measure_cpu_scale()'s readings.  On
    a virtual machine the last-level cache is shared with other machines
    of the host, and grids of tens of MiB ran 1.3 times faster in one
    hour than in another, at the same compute speed."""
    measure_cpu_scale()
    return _cpu_measured["memory"]


def cpu_rates(overrides=None):
    """The CPU model's rates: the stored ones of this machine's kind
    (cpu_stored()), "compute_scale" (this
    machine's against the stored one: measure_cpu_scale() unless given),
    "memory_scale" (cpu_memory_scale() unless given), "threads" (the
    cores), "l2_bytes" and "llc_bytes" (the caches, from sysfs);
    `overrides` replaces any."""
    overrides = dict(overrides or {})
    rates = dict(cpu_stored())
    rates.update(threads=cpu_threads(), l2_bytes=_cache_bytes(2, 2 << 20),
                 llc_bytes=_cache_bytes(3, 32 << 20))
    if "compute_scale" not in overrides:
        rates["compute_scale"] = measure_cpu_scale()
    if "memory_scale" not in overrides:
        rates["memory_scale"] = cpu_memory_scale()
    rates.update(overrides)
    return rates


@functools.lru_cache(maxsize=256)
def _cpu_plan_cached(shape, wbytes, wshape, mode, steps, threads):
    w = np.frombuffer(wbytes, dtype=np.float64).reshape(wshape)
    return _engine.plan_cpu(shape, w, mode=mode, steps=steps,
                            threads=threads)


def cpu_plan(shape, w, mode, steps, threads=0):
    """What the CPU engine runs (a dict, _engine.plan_cpu): `threads` > 0
    as a run of that many threads would (cached), 0 as the engine would
    choose now (it reads the machine's load)."""
    w = np.ascontiguousarray(w, dtype=np.float64)
    shape = tuple(int(n) for n in shape)
    if threads > 0:
        return dict(_cpu_plan_cached(shape, w.tobytes(), w.shape, mode,
                                     int(steps), int(threads)))
    return _engine.plan_cpu(shape, w, mode=mode, steps=int(steps))


CpuCost = collections.namedtuple(
    "CpuCost", "seconds bound call setup compute memory fresh")


def _cpu_dim(plan):
    n = plan["run_shape"]
    return 3 if n[1] > 1 else (2 if n[0] > 1 else 1)


def cpu_time(plan, shape, steps, rates, fresh_out=True):
    """The model's price of a CPU plan (a CpuCost, seconds): a call's
    fixed cost; the direct path's setup; each step's compute (the points
    a step computes, margins included, at the row kernel's rate, rings
    that spill from L2 slower), shared by the threads, and the direct
    path's barriers; the blocked passes' memory traffic; the first touch
    of a fresh result of 32 MiB or more (`fresh_out`: apply() allocated
    it)."""
    npts = float(np.prod(shape))
    kc, km = rates["compute_scale"], rates["memory_scale"]
    call = kc * rates["call_seconds"]
    if steps == 0:
        return CpuCost(call, "memory", call, 0.0, 0.0, 0.0, 0.0)
    d = _cpu_dim(plan)
    nt = plan["threads"]
    share = 1.0 + (nt - 1) * rates["thread_gain"]
    rows = npts / plan["run_shape"][2]
    direct = plan["path"] == "direct"
    if direct:
        per_point = (rates["point_seconds"][d]
                     + rates["tap_seconds"] * plan["row_taps"])
    else:
        ring_tap = rates["ring_tap_seconds"]  # per dimension, or one
        if isinstance(ring_tap, dict):
            ring_tap = ring_tap[d]
        per_point = (rates["ring_point_seconds"][d]
                     + ring_tap * plan["row_taps"])
        if plan["ring_spills"]:
            l2 = float(rates["l2_bytes"])
            per_point *= 1.0 + rates["spill_factor"][d] * max(
                plan["ring_bytes"] - l2, 0.0) / l2
    per_row = rates["row_radius_seconds"] * plan["radius"][2]
    compute = (kc * steps * plan["computed"]
               * (npts * per_point + rows * per_row) / share)
    setup = memory = 0.0
    if direct:
        setup = kc * npts * rates["setup_seconds"][d]
        if nt > 1:
            compute += kc * steps * rates["sync_seconds"]
    else:
        arrays = npts * 8.0 * (3.0 if plan["temp_grid"] else 2.0)
        # one thread's rate; a team's grows by memory_thread_gain a thread
        rate = ((rates["cache_bandwidth"] if arrays <= rates["llc_bytes"] / 8.0
                 else rates["bandwidth"])
                * (1.0 + (nt - 1) * rates["memory_thread_gain"]))
        memory = (km * rates["memory_dim_factor"][d] * plan["passes"] * npts
                  * (8.0 * plan["loaded"] + 16.0) / rate)
    fresh = 0.0
    if fresh_out and npts * 8.0 >= CPU_FRESH_BYTES:
        fresh = km * npts * 8.0 * rates["fresh_seconds_per_byte"]
    seconds = call + setup + compute + memory + fresh
    bound = "FP64 units" if compute >= memory + setup + fresh else "memory"
    return CpuCost(seconds, bound, call, setup, compute, memory, fresh)


def scheme_cpu_time(plan, shape, steps, rates, nbytes, flops, k, p):
    """The model's price of the CPU scheme engine's plan (plan_scheme_cpu's
    dict) for `steps` steps of a scheme of k fields and p parameter
    fields moving `nbytes` and doing `flops` useful operations a point
    and step in its whole-grid passes: (seconds, bound, [Pass]).  Each
    pass costs its bytes plus its operations (the row kernels at
    scheme_flop_seconds an operation on one thread, the team sharing
    them): a whole-grid step its nbytes at scheme_bandwidth, a blocked
    pass its tiles' loads (margins included) and stores at
    scheme_blocked_bandwidth and its operations on the rows the margins
    add too, at a tile's slower rate.  The whole-grid passes' call copies
    the fields in and out; a blocked pass starts and ends its team."""
    npts = float(np.prod(shape))
    # the stored rates of bytes as fitted: no memory scale (CPU_STORED)
    kc = rates["compute_scale"]
    share = 1.0 + (plan["threads"] - 1) * rates["thread_gain"]
    call = kc * rates["scheme_call_seconds"]
    if steps == 0:
        return call, "memory", []
    op = kc * npts * flops * rates["scheme_flop_seconds"] / share
    if plan["path"] == "scheme":
        memory = npts * nbytes / rates["scheme_bandwidth"]
        step = memory + op + kc * rates["scheme_step_seconds"]
        copies = npts * k * rates["scheme_field_seconds"]
        seconds = call + copies + steps * step
        bound = "memory" if memory >= op else "FP64 units"
        row = Pass("step", "scheme", steps, 1, nbytes, flops, flops,
                   "FP64 units", step, bound)
        return seconds, bound, [row]
    computed = loaded = 1.0
    for tile, margin in zip(plan["tile_rows"], plan["margins"]):
        computed *= (tile + margin) / tile   # shrinking: half on average
        loaded *= (tile + 2.0 * margin) / tile
    # a tile's rows run slower than the whole grid's (shorter sweeps, the
    # halo copies), and slower yet where its buffers spill from L2
    tile_op = rates["scheme_blocked_flop_factor"] * (
        rates["scheme_spill_factor"] if plan["tile_spills"] else 1.0)
    depth, passes = plan["fused_depth"], plan["fused_passes"]
    pass_bytes = 8.0 * ((k + p) * loaded + k)
    seconds, bound, rows = call, "memory", []
    for count, steps_now in ((passes - 1, depth),
                             (1, steps - (passes - 1) * depth)):
        if count <= 0:
            continue
        memory = npts * pass_bytes / rates["scheme_blocked_bandwidth"]
        compute = op * computed * steps_now * tile_op
        one = memory + compute + kc * rates["scheme_pass_seconds"]
        bound = "memory" if memory >= compute else "FP64 units"
        seconds += count * one
        rows.append(Pass("blocked pass", "scheme-blocked", count, steps_now,
                         pass_bytes, flops * steps_now,
                         flops * computed * steps_now, "FP64 units", one,
                         bound))
    return seconds, bound, rows


def predict_gpu(shape, w, mode, steps, path, max_depth=0, rates=None,
                cc_major=9, smem_optin=0):
    """(device seconds, bound, passes, plan) of a GPU run (the device as
    gpu_plan takes it)."""
    rates = rates or gpu_rates()
    plan = gpu_plan(shape, w, mode, steps, path, cc_major, max_depth,
                    smem_optin)
    passes = gpu_passes(plan, shape, w, mode, rates)
    if not passes:
        return 0.0, "memory", passes, plan
    total = sum(p.count * p.seconds for p in passes)
    heaviest = max(passes, key=lambda p: p.count * p.seconds)
    return total, heaviest.bound, passes, plan


GPU_PATHS = ("tensor-core", "cuda-core")


def fastest_gpu_path(shape, w, mode, steps, max_depth=0, rates=None,
                     cc_major=9, smem_optin=0):
    """Of the GPU paths that run w on the device (as gpu_plan takes it),
    the one predicted fastest (tensor cores on a tie)."""
    best, best_seconds = "cuda-core", None
    for path in GPU_PATHS:
        try:
            seconds = predict_gpu(shape, w, mode, steps, path, max_depth,
                                  rates, cc_major, smem_optin)[0]
        except ValueError:  # the path cannot run this kernel or device
            continue
        if best_seconds is None or seconds < best_seconds:
            best, best_seconds = path, seconds
    return best


@functools.lru_cache(maxsize=256)
def _auto_path_cached(shape, wbytes, wshape, mode, steps, cc_major,
                      max_depth, smem_optin):
    w = np.frombuffer(wbytes, dtype=np.float64).reshape(wshape)
    return fastest_gpu_path(shape, w, mode, steps, max_depth, None,
                            cc_major, smem_optin)


def auto_gpu_path(shape, w, mode, steps, cc_major=9, max_depth=0,
                  smem_optin=0):
    """The path backend "cuda" runs (fastest_gpu_path at the default
    rates, cached per grid shape, kernel, mode, step count and device)."""
    w = np.ascontiguousarray(w, dtype=np.float64)
    return _auto_path_cached(tuple(int(n) for n in shape), w.tobytes(),
                             w.shape, mode, int(steps), int(cc_major),
                             int(max_depth), int(smem_optin))
