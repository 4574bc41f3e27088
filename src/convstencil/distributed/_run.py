"""apply() on a DistributedGrid: exchange k*r ghost layers, run k steps
of the single-process engine on the padded block, repeat.  With overlap
(host blocks), the interior runs while the ghosts travel and the strips
near the ghosts after (_overlap.py).

Every rank keeps two padded blocks (block plus ghosts, _plan.py) and
alternates between them: the exchange fills the ghosts of the current
one in place, the engine writes the next one.  Errors on any rank are
raised on every rank (_agree.py) before the next collective call.
"""
import hashlib
import os
import time

import numpy as np
from mpi4py import MPI

from .. import _backends, _engine
from .. import apply as _engine_apply
from .._stencil import resolve_weights
from . import _device_blocks, _overlap, _pads, _plan, _transport
from ._agree import agree, check
from ._grid import DistributedGrid, _check_grid, use_device

_last_info = {}



def info(d=None):
    """What the apply() that made `d` ran (default: this rank's last
    distributed apply): transport, halo_steps, rounds, bytes_sent,
    exchange_seconds, compute_seconds, vote_seconds (the rounds' checks
    that no rank failed, where a rank that finished early waits for the
    others), seconds, backend, path, device (the GPU holding the block,
    None for host blocks), session (whether the rounds ran in an engine
    session), split_bands (where rounds split: "lead", their bands the
    first blocks of the last pass's launch, or "apart", launches of their
    own; else None), setup_seconds (from the call to the first round: the
    checks, the plan, the padded blocks, the transport), load_seconds
    (of those: taking the padded blocks and copying the block in), the
    exchange's parts (device blocks): exchange_pack_seconds,
    exchange_move_seconds, exchange_unpack_seconds, fused_depth (device
    blocks: the most steps a pass of the engine fuses on a round's
    block; a halo_steps that is a multiple of it runs no shallower
    pass; None on host blocks), ...

    With overlap (info["overlap"]): exchange_seconds is the exchange time
    this rank did not hide (posting, waiting, the later axes);
    overlap_seconds the interior compute that ran while the first axis's
    messages were in flight (the most exchange time hidden);
    wait_after_interior_seconds the time still spent waiting for them
    after the interior (exchange time not hidden).  Device blocks whose
    rounds split (info["overlap"] with session): a queued round and an
    exchange queued beside it return at once, so compute_seconds and
    exchange_seconds are the host's time to queue them, and the GPU's
    time lands in the next wait (the next host-driven exchange, the
    store)."""
    if d is None:
        return dict(_last_info)
    _check_grid(d)
    return dict(d.info or {})


def _resolve(d, stencil, weights, steps, mode, cval, backend, transport):
    """Arguments checked as convstencil.apply checks them."""
    w = resolve_weights(stencil, weights)
    steps = _engine.resolve_steps(steps)
    mode = _engine.resolve_mode(mode)
    cval = _engine.resolve_cval(cval)
    _engine.check_ndim(d.shape, w)
    name = _engine.backend_name(backend)
    if d.on_device:
        name = _backends.resolve_device_backend(name)
    elif name == "auto":
        name = "cpu"
    elif name not in ("cpu", "cpu-tc"):
        raise TypeError("backend %r runs on the GPU, but the blocks are in "
                        "host memory; scatter (or from_local) with "
                        "backend=%r to put them there" % (name, name))
    else:
        _backends.resolve_host_backend(name, w.ndim, w)
    transport = _transport.check_name(transport, d.on_device)
    return w, steps, mode, cval, name, transport


def _self_exchange_axes(value, ndim):
    """apply()'s self_exchange: True, False, or a tuple of axes."""
    if value is None or isinstance(value, (bool, np.bool_)):
        return bool(value)
    try:
        axes = tuple(int(a) for a in value)
    except (TypeError, ValueError):
        raise TypeError("self_exchange is True, False or a sequence of "
                        "axes, got %r" % (value,)) from None
    for a in axes:
        if not 0 <= a < ndim:
            raise ValueError("self_exchange: axis %d is not one of the "
                             "grid's %d" % (a, ndim))
    return axes


def _same_everywhere(comm, args, halo_steps):
    """Ranks that disagree on the arguments would wait on each other in
    different exchanges: refuse on every rank instead."""
    w, steps, mode, cval, name, transport = args
    key = (hashlib.sha1(w.tobytes() + repr(w.shape).encode()).hexdigest(),
           steps, mode, repr(cval), name, transport, repr(halo_steps))
    keys = comm.allgather(key)
    for rank, other in enumerate(keys):
        if other != keys[0]:
            raise ValueError(
                "apply() must get the same arguments on every rank; rank %d "
                "differs from rank 0 (stencil, steps, mode, cval, backend, "
                "transport, halo_steps, self_exchange and overlap): "
                "%r != %r"
                % (rank, other[1:], keys[0][1:]))


def apply(d, stencil=None, *, weights=None, steps=1, mode="constant",
          cval=0.0, halo_steps=None, backend="auto", transport="auto",
          self_exchange=False, overlap=None):
    """Apply a stencil `steps` times to the distributed grid `d`; return
    the new DistributedGrid (`d` is left as it was).

    The arguments are convstencil.apply's, and the result equals
    convstencil.apply on the whole grid for every mode.  Every
    `halo_steps` (k) steps, each rank exchanges k*r ghost layers with
    its neighbours and runs k steps on its block; None lets a cost model
    choose k, and k shrinks where blocks are thinner than k*r (a block
    thinner than r raises ValueError on every rank).  `backend`: "auto"
    runs where the blocks are (GPU or host), or "cpu", "cpu-tc", "cuda",
    ....  `transport` (device blocks): "auto" (the first of these that
    works on every rank; "cuda-ipc" before "nccl" where the rounds split,
    below), "nccl", "cuda-ipc" (the copy engines write each slab into the
    neighbour's block: ranks of one host), "cuda-mpi" or "staging"; host
    blocks always use "mpi".  An axis that is not split
    needs no exchange (the engine's own mode is exact along a whole
    axis, wrap included); `self_exchange=True` makes a periodic one
    exchange with the rank itself through the transport all the same
    (the same result: for testing a transport on one rank), and a tuple
    of axes makes those do so (`(0,)`: one GPU's rounds as a slab's,
    split where a slab's would be).

    `overlap` (host blocks): compute the deep interior of the block,
    which needs no ghost cell, while the first split axis's ghosts are
    in flight, then the boundary strips once they arrived.  It costs
    redundant work (the strips' input margins) and more engine calls:
    None lets the cost model decide (with k, where halo_steps is None),
    True or False forces it; the result is the same.  Device blocks
    (2D and 3D grids cut along axis 0 alone, whose engine session runs
    temporally blocked passes) overlap without redundant work: each
    round's last pass computes the planes the neighbours receive first,
    and the exchange runs beside the rest of it (None or True; False:
    after it).  info()'s "overlap" says whether it did.  Every rank of
    d.comm must call it with the same arguments.
    """
    _check_grid(d)
    started = time.perf_counter()
    comm = d.comm
    agree(comm, use_device, d)
    args = agree(comm, _resolve, d, stencil, weights, steps, mode, cval,
                 backend, transport)
    self_exchange = agree(comm, _self_exchange_axes, self_exchange, d.ndim)
    agree(comm, _same_everywhere, comm, args,
          (halo_steps, self_exchange, overlap))
    w, steps, mode, cval, name, transport = args
    taps = int(np.count_nonzero(w))
    plan, k = agree(comm, _plan.make_plan, d, w.shape, mode, steps,
                    halo_steps, taps, self_exchange, overlap, w, name)
    t0 = time.perf_counter()
    session = _use_session(d, plan, k, steps)
    # an engine session loads the block itself (_session_rounds)
    pads = agree(comm, _padded, d, plan, not session)
    load = time.perf_counter() - t0
    device_overlap = overlap is not False
    split = session and device_overlap and split_bands(plan) is not None
    link = _transport.open_transport(transport, comm, plan, d.on_device,
                                     d.device, split)
    setup = time.perf_counter() - started
    try:
        record = _run(d, pads, plan, k, link, w, steps, mode, cval, name,
                      session, device_overlap)
    finally:
        link.close()
    record.update(device=d.device, setup_seconds=setup, load_seconds=load,
                  **link.parts())
    global _last_info
    _last_info = record
    final = record.pop("_final")
    result = pads[final]
    if d.on_device:
        # the run's work on both is complete when it returns
        _pads.PADS.give_back(pads[1 - final], complete=True)
        result = _pads.Lease(result)
    return DistributedGrid(_owned(result, plan, d.on_device),
                           d.shape, d.extents, comm, d.on_device,
                           dict(record), device=d.device)


def _padded(d, plan, fill=True):
    """Two padded blocks, the first holding d's block where `fill`."""
    shape = plan.padded_shape
    if d.on_device:
        pads = [_pads.PADS.take(shape, d.device),
                _pads.PADS.take(shape, d.device)]
        if fill:
            _fill(d, pads[0], plan)
        return pads
    pads = [np.empty(shape), np.empty(shape)]
    pads[0][plan.owned()] = d.local
    return pads


def _fill(d, padded, plan):
    """d's block into the padded device block."""
    _device_blocks.copy(d.local, _device_blocks.region(
        padded, plan.owned_starts, plan.block_shape))


def _owned(padded, plan, on_device):
    if on_device:
        return _device_blocks.region(padded, plan.owned_starts,
                                     plan.block_shape)
    return padded[plan.owned()]


class _Engine:
    """k steps of the single-process engine with the run's arguments."""

    def __init__(self, w, mode, cval, name):
        self.kw = dict(weights=w, mode=mode, cval=cval, backend=name)
        self.path = None

    def __call__(self, grid, steps, out=None):
        result = _engine_apply(grid, steps=steps, out=out, **self.kw)
        # the record as it is: last_run_info() would also price the run
        self.path = _engine.last_record().get("path")
        return result


def _plain_round(link, src, dst, n, engine, times):
    """Exchange every ghost, then one call on the whole padded block."""
    t0 = time.perf_counter()
    link.exchange(src)
    t1 = time.perf_counter()
    times["exchange"] += t1 - t0
    try:
        engine(src, n, out=dst)
    finally:
        times["compute"] += time.perf_counter() - t1


def _interior(src, dst, piece, n, engine):
    """The interior: its src is the owned block, which the result may
    fill whole where it is contiguous (its strips are wrong there until
    the strips' calls overwrite them)."""
    where = _overlap.slices(piece[0])
    target = dst[where]
    if target.flags.c_contiguous:
        engine(src[where], n, out=target)
    else:
        dst[_overlap.slices(piece[1])] = engine(src[where], n)[
            _overlap.within(piece)]


def _strips(src, dst, strips, n, engine):
    for piece in strips:
        dst[_overlap.slices(piece[1])] = engine(
            src[_overlap.slices(piece[0])], n)[_overlap.within(piece)]


def _overlapped_round(link, src, dst, n, engine, times, pieces):
    """Post the first axis, compute the interior, finish the exchange,
    compute the strips (_overlap.py).  The exchange is finished even if
    the interior failed: the neighbours wait for its messages."""
    interior, strips = pieces
    t0 = time.perf_counter()
    pending = link.start(src)
    t1 = time.perf_counter()
    try:
        if interior is not None:
            _interior(src, dst, interior, n, engine)
    finally:
        t2 = time.perf_counter()
        waited = link.finish(src, pending)
        t3 = time.perf_counter()
        times["exchange"] += (t1 - t0) + (t3 - t2)
        times["compute"] += t2 - t1
        if interior is not None:
            times["hidden"] += t2 - t1
        times["wait"] += waited
    try:
        _strips(src, dst, strips, n, engine)
    finally:
        times["compute"] += time.perf_counter() - t3


class _Session:
    """The padded block in the engine's own layout for the whole run
    (_engine.session_*: loaded once, stored once), so that a round costs its
    exchange and its steps and not a load and a store of the block."""

    def __init__(self, shape, block, at, w, k, mode, cval, name, ends=0):
        """A session on a grid of the padded `shape`, loaded with the
        device array `block` (the owned block) at `at`: the ghosts are
        the first exchange's to write.  ends > 0: where the engine can,
        only the `ends` planes at each end along axis 0 that the first
        exchange sends are loaded, and the first round reads the rest
        from `block`, which stays as it is until then."""
        path = _backends.gpu_path(name, tuple(shape), w, mode, k)
        self.ndim = len(shape)
        view = _device_blocks.ready_view(block)
        self.handle, self.path = _engine.session_open(
            view.ptr, shape, view.strides, w, steps=k, mode=mode, cval=cval,
            path=path, at=at, box=view.shape, ends=ends)
        # the block, read by the first round (ends): alive as long as
        # the session (a queued round may still read it)
        self._block = block
        self.spans = False  # set by _session_rounds where every rank may

    def layout(self):
        """What must match on two ranks for a whole-plane span of one
        to land cell for cell in the other's (_SessionGrid.span)."""
        _, strides, shape = _engine.session_view(self.handle, self.ndim)
        return strides, shape[1:], _engine.session_halo(self.handle)

    def spans_fit(self):
        """Whether a span of the last planes ends inside the grid's
        memory: the cells it covers past the last plane (the next one's
        halo rows and columns before its first interior cell) exist
        where the grid has a halo plane there, or are none where it has
        no halo across the planes."""
        halo = _engine.session_halo(self.handle)[3 - self.ndim:]
        return halo[0] >= 1 or not any(halo[1:])

    def grid(self):
        """The current grid (its interior) as a strided view that packs
        and unpacks boxes through the session (one pitched copy each),
        or moves whole planes as they are (span)."""
        ptr, strides, shape = _engine.session_view(self.handle, self.ndim)
        return _SessionGrid(self, ptr, shape, strides)

    def copy(self, starts, sizes, buf, put):
        _engine.session_copy(self.handle, starts, sizes, buf.ptr, put=put)

    def run(self, bands=None, out=None):
        """One round; with `bands` queued (see _engine.session_run):
        True where its last pass was split for the exchange.  With `out`
        (a DeviceArray of the padded shape), the last round: its result
        goes there, written by its last pass where it can (close then
        stores nothing and must be given `out`)."""
        result = None
        if out is not None:
            result = (out.ptr, _device_blocks.c_strides(out.shape))
        return _engine.session_run(self.handle, bands, result)

    def exchange_beside(self, link):
        """The exchange after a queued round, beside the rest of its
        last pass: queued on the session's exchange stream where the
        transport can, else started once the bands are written; the
        next round waits for it."""
        grid = self.grid()
        if not link.queue(grid, _engine.session_exchange_stream(self.handle)):
            _engine.session_wait_bands(self.handle)
            link.exchange(grid)
        _engine.session_exchanged(self.handle)

    def close(self, out):
        """Store into the DeviceArray `out` (unless the last round wrote
        there); True where a value was not finite (the rounds must run
        again without a session)."""
        return _engine.session_close(self.handle, out.ptr,
                                     _device_blocks.c_strides(out.shape))


class _SessionGrid(_device_blocks.StridedView):
    """A session's current grid, as the transports see a padded block."""

    def span(self, starts, sizes):
        """(ptr, count): the memory from the box's first cell over
        sizes[0] whole planes (rows of a 2D grid) of the session's padded
        layout, where the box spans every other axis whole and every
        rank's session has the same layout; else None.

        A slab along axis 0 then moves as it lies, without packing: the
        count covers, besides the box, the engine's halo cells and row
        padding between its planes, which land on the same kind of cells
        in the receiver's grid.  The engine refills every halo cell it
        reads at the start of each round (halo.cu) and never reads the
        padding (kernels.cuh's cs_dgrid), so what they receive is never
        read."""
        if not self.base.spans or any(starts[1:]) or (
                tuple(sizes[1:]) != self.shape[1:]):
            return None
        stride = self.strides[0]
        return self.ptr + starts[0] * stride, sizes[0] * stride // 8

    def pack(self, starts, sizes, buf):
        self.base.copy(starts, sizes, buf, False)

    def unpack(self, buf, starts, sizes):
        # the transports left buf complete on the legacy default stream
        self.base.copy(starts, sizes, buf, True)


def _use_session(d, plan, k, steps):
    """Device blocks of 2D and 3D grids with at least two whole rounds to
    run (one round gains nothing): CONVSTENCIL_DISTRIBUTED_SESSION=0 turns
    it off."""
    return (d.on_device and plan.k and d.ndim > 1 and steps // k >= 2
            and os.environ.get("CONVSTENCIL_DISTRIBUTED_SESSION", "1")
            != "0")


def _session_ends(plan):
    """The planes at each end of the block along axis 0 that a session
    loads (the first exchange sends them; the first round reads the rest
    from the block), or 0 for the whole block:
    CONVSTENCIL_SESSION_LOAD=whole (for comparison)."""
    if os.environ.get("CONVSTENCIL_SESSION_LOAD", "ends") == "whole":
        return 0
    return plan.depth[0]


def _vote(comm, failure, times):
    """check() (every rank learns of a failure on any), timed: a rank
    that finished its round early waits here for the others."""
    t0 = time.perf_counter()
    try:
        check(comm, failure)
    finally:
        times["vote"] += time.perf_counter() - t0


def split_bands(plan):
    """(low, high): the planes at the ends of the block along axis 0
    that the neighbours receive, where a round may compute them first
    and exchange them beside the rest (axis 0 the only one exchanged:
    another axis's slabs hold cells of every plane); else None."""
    if not plan.axes or not plan.axes[0] or any(plan.axes[1:]):
        return None
    return tuple(plan.depth[0] if side else 0
                 for side in (plan.lo[0], plan.hi[0]))


def _session_rounds(d, pads, plan, link, w, k, rounds, mode, cval, name,
                    times, overlap=True):
    """`rounds` rounds of k steps in an engine session loaded with d's
    block (the padded blocks are not read: the block goes straight into
    the session's grid, and the exchanges fill its ghosts: the first
    before the first round, the others beside the round before where
    `overlap` (split_bands), else before their round); the last round
    writes the result into pads[1].  Returns (the engine's path, whether
    a round was split, how its bands ran: _engine.session_bands, None
    where none split), or None where a value was not finite on some rank:
    the caller then runs the rounds again without a session."""
    comm = d.comm
    # a session left open by an exception is freed with its handle; it
    # loads only the planes the first exchange sends (the block is read
    # by the first round, before anything writes it)
    session = agree(comm, _Session, plan.padded_shape, d.local,
                    plan.owned_starts, w, k, mode, cval, name,
                    _session_ends(plan))
    layouts = comm.allgather(session.layout())
    session.spans = (session.spans_fit()
                     and all(layout == layouts[0] for layout in layouts))
    bands = split_bands(plan) if overlap else None
    ghosts_sent = False  # by the round before, beside its last pass
    split = False
    for i in range(rounds):
        last = i + 1 == rounds
        queue = None if last else bands
        failure = None
        try:
            t0 = time.perf_counter()
            if not ghosts_sent:
                link.exchange(session.grid())
            t1 = time.perf_counter()
            # the last round writes the result itself: no store after it
            split = session.run(queue, pads[1] if last else None) or split
            times["exchange"] += t1 - t0
            times["compute"] += time.perf_counter() - t1
        except BaseException as exc:  # noqa: B902 - voted on, re-raised
            failure = exc
        if queue is not None:
            # even after a failure: the neighbours' exchanges wait for
            # this rank's messages
            t0 = time.perf_counter()
            try:
                session.exchange_beside(link)
            except BaseException as exc:  # noqa: B902 - voted on
                failure = failure or exc
            times["exchange"] += time.perf_counter() - t0
        ghosts_sent = queue is not None
        _vote(comm, failure, times)
    t0 = time.perf_counter()
    bands_ran = _engine.session_bands(session.handle) if split else None
    nonfinite = agree(comm, session.close, pads[1])
    times["compute"] += time.perf_counter() - t0
    if comm.allreduce(int(nonfinite), op=MPI.MAX):
        return None
    return session.path, split, bands_ran


def _run(d, pads, plan, k, link, w, steps, mode, cval, name, use_session,
         device_overlap=True):
    """The rounds; `use_session` (_use_session): whole rounds in an
    engine session, whose grid loads the block (pads[0] left unfilled);
    `device_overlap`: its rounds may split (_session_rounds)."""
    comm = d.comm
    engine = _Engine(w, mode, cval, name)
    times = dict(exchange=0.0, compute=0.0, hidden=0.0, wait=0.0, vote=0.0)
    overlap = bool(plan.overlap and plan.k and not d.on_device)
    pieces = _overlap.plan_split(plan) if overlap else None
    rounds, cur = 0, 0
    start = time.perf_counter()
    done = 0
    session = split = False
    bands_ran = None
    if use_session:
        whole = steps // k
        ran = _session_rounds(d, pads, plan, link, w, k, whole, mode, cval,
                              name, times, device_overlap)
        if ran is not None:
            session = True
            engine.path, split, bands_ran = ran
            rounds, cur, done = whole, 1, whole * k
        else:
            # NaN or infinity met: every round again, each a call of its
            # own, which keeps non-finite values where SciPy does
            agree(comm, _fill, d, pads[0], plan)
    while done < steps:
        n = min(k, steps - done)
        failure = None
        try:
            if overlap:
                _overlapped_round(link, pads[cur], pads[1 - cur], n, engine,
                                  times, pieces)
            else:
                _plain_round(link, pads[cur], pads[1 - cur], n, engine,
                             times)
        except BaseException as exc:  # noqa: B902 - voted on, re-raised
            failure = exc
        _vote(comm, failure, times)
        cur, done, rounds = 1 - cur, done + n, rounds + 1
    comm_size = comm.Get_size()
    exchanged = plan.ghost_bytes() * rounds if plan.k else 0
    return {"transport": link.name, "halo_steps": plan.k or None,
            "rounds": rounds, "bytes_sent": exchanged,
            "bytes_sent_all_ranks": comm.allreduce(exchanged, op=MPI.SUM),
            "exchange_seconds": times["exchange"],
            "compute_seconds": times["compute"],
            "vote_seconds": times["vote"],
            "overlap": overlap or split,
            "overlap_seconds": times["hidden"],
            "wait_after_interior_seconds": times["wait"],
            "engine_calls_per_round": (
                1 if not overlap
                else len(pieces[1]) + (pieces[0] is not None)),
            "session": session,
            "split_bands": bands_ran,
            "seconds": time.perf_counter() - start, "backend": name,
            "path": engine.path, "steps": steps, "mode": mode,
            "dims": d.dims, "ranks": comm_size,
            "ghost_depth": plan.ghost_depth,
            "fused_depth": plan.fused_depth,
            "padded_shape": plan.padded_shape, "_final": cur}
