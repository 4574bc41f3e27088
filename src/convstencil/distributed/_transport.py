"""Halo exchanges: moving the slabs of a HaloPlan between ranks.

- "mpi": host blocks; MPI subarray datatypes read and write the padded
  block in place (no packing in Python).
- device blocks: slabs that are contiguous in the padded block (those
  of axis 0) move as they are; the others are packed into contiguous
  device buffers (kept for the run and pooled between runs, so device
  memory stays steady) and unpacked after; along axis 0 of an engine
  session's grid, whole planes move as they lie (_run._SessionGrid.span).
  They move by "cuda-ipc" (the copy engines write each slab into the
  receiver's block, mapped through CUDA IPC: ranks of one host), "nccl"
  (ncclSend/ncclRecv), "cuda-mpi" (MPI on device pointers, where
  MPIX_Query_cuda_support says yes) or "staging" (through host memory
  and MPI).  An exchange returns when its ghosts have arrived.

Axes go one after another: an axis's slabs span the ghosts filled along
earlier axes, which fills edges and corners without diagonal messages.
Host blocks can also start an exchange and finish it later (start,
finish), so that compute that needs no ghost runs meanwhile.
"""
import time

import numpy as np
from mpi4py import MPI

from .. import _core
from . import _device_blocks, _nccl, _pads, _peer_memory
from ._agree import agree

HOST_TRANSPORTS = ("mpi",)
LEGACY_STREAM = 1  # cudaStreamLegacy, as the CUDA Array Interface names it
DEVICE_TRANSPORTS = ("nccl", "cuda-ipc", "cuda-mpi", "staging")


def check_name(transport, on_device):
    accepted = ("auto",) + (DEVICE_TRANSPORTS if on_device
                            else HOST_TRANSPORTS)
    if not isinstance(transport, str):
        raise TypeError("transport must be a str, got %s"
                        % type(transport).__name__)
    if transport not in accepted:
        raise ValueError("transport %r is not one for %s blocks; accepted: %s"
                         % (transport, "device" if on_device else "host",
                            ", ".join(accepted)))
    return transport


class HostMPI:
    """Host blocks over MPI, with subarray datatypes."""

    name = "mpi"

    def __init__(self, comm, plan):
        self.comm = comm
        self.plan = plan
        self._types = {}

    def _type(self, region):
        found = self._types.get(region)
        if found is None:
            starts, sizes = region
            found = MPI.DOUBLE.Create_subarray(
                self.plan.padded_shape, sizes, starts).Commit()
            self._types[region] = found
        return found

    def _post(self, padded, sides):
        requests = [self.comm.Irecv([padded, 1, self._type(s.recv)],
                                    source=s.peer, tag=s.recv_tag)
                    for s in sides]
        requests += [self.comm.Isend([padded, 1, self._type(s.send)],
                                     dest=s.peer, tag=s.send_tag)
                     for s in sides]
        return requests

    def start(self, padded):
        """Post the first exchanging axis's messages and return at once;
        finish() completes the exchange.  Until then the owned cells may
        be read (the sends only read them) but no ghost cell: only that
        axis is in flight, because the later axes' slabs carry its
        ghosts on (edges and corners), so they go after it arrived."""
        axes = [sides for sides in self.plan.axes if sides]
        first = self._post(padded, axes[0]) if axes else []
        return first, axes[1:]

    def finish(self, padded, pending):
        """Wait for the first axis (returns the seconds waited for it),
        then exchange the other axes one after another."""
        first, rest = pending
        t0 = time.perf_counter()
        MPI.Request.Waitall(first)
        waited = time.perf_counter() - t0
        for sides in rest:
            MPI.Request.Waitall(self._post(padded, sides))
        return waited

    def exchange(self, padded):
        self.finish(padded, self.start(padded))

    def parts(self):
        """The exchange's parts, timed where they are apart (device
        blocks)."""
        return {}

    def close(self):
        for datatype in self._types.values():
            datatype.Free()
        self._types.clear()


class Message:
    """One side's slab as a move sees it: `count` float64 values read at
    `send` and written at `recv` (device pointers) to and from `side`'s
    peer."""

    __slots__ = ("side", "send", "recv", "count")

    def __init__(self, side, send, recv, count):
        self.side = side
        self.send = send
        self.recv = recv
        self.count = count


class _DeviceTransport:
    """Device blocks: pack where needed, move (by the subclass), unpack.

    A slab that is one run of memory in the block moves in place (axis
    0's of a C-ordered block); the others go through a send and a receive
    buffer per side, made at their first use and kept for the run (so
    device memory stays steady).  The block is a DeviceArray or a strided
    view (an engine session's grid, whose rows are padded)."""

    def __init__(self, comm, plan):
        self.comm = comm
        self.plan = plan
        self.device = _core.cuda_current_device()
        self.buffers = {}  # (axis, side index) -> (send, receive)
        self.seconds = dict(pack=0.0, move=0.0, unpack=0.0)

    def exchange(self, padded):
        strides = _device_blocks.strides_of(padded)
        seconds = self.seconds
        for axis, sides in enumerate(self.plan.axes):
            if not sides:
                continue
            packed = [not _device_blocks.is_contiguous(s.send[1], strides)
                      for s in sides]
            t0 = time.perf_counter()
            messages = []
            for i, (s, p) in enumerate(zip(sides, packed)):
                message, packed[i] = self._message(padded, axis, i, s, p)
                messages.append(message)
            t1 = time.perf_counter()
            self.move(messages)
            t2 = time.perf_counter()
            for i, (s, p) in enumerate(zip(sides, packed)):
                if p:
                    _device_blocks.unpack(self.buffers[axis, i][1], padded,
                                          *s.recv)
            t3 = time.perf_counter()
            seconds["pack"] += t1 - t0
            seconds["move"] += t2 - t1
            seconds["unpack"] += t3 - t2

    def queue(self, padded, stream):
        """Queue the exchange on `stream` (a cudaStream_t) and return
        True without waiting for it, where the transport can and no slab
        needs packing; False: nothing was done (exchange() then)."""
        return False

    def _in_place(self, padded):
        """Each exchanging axis's Messages, in the axes' order, where
        every slab moves as it lies (in place, or as whole planes of an
        engine session's grid); else None."""
        strides = _device_blocks.strides_of(padded)
        axes = []
        for sides in self.plan.axes:
            messages = [self._unpacked(padded, s, not _device_blocks
                                       .is_contiguous(s.send[1], strides))
                        for s in sides]
            if any(m is None for m in messages):
                return None
            if messages:
                axes.append(messages)
        return axes

    def parts(self):
        """Seconds packing the slabs that are not one run of memory,
        moving the messages (waiting for the peers included) and
        unpacking, over the run's exchanges."""
        return {"exchange_%s_seconds" % part: value
                for part, value in self.seconds.items()}

    def _message(self, padded, axis, index, side, packed):
        """(the side's Message, whether its receive buffer must be
        unpacked): the slab as it lies (_unpacked), else packed into a
        send buffer."""
        message = self._unpacked(padded, side, packed)
        if message is not None:
            return message, False
        buffers = self.buffers.get((axis, index))
        if buffers is None:
            buffers = (_pads.SLABS.take(side.send[1], self.device),
                       _pads.SLABS.take(side.recv[1], self.device))
            self.buffers[axis, index] = buffers
        send, recv = buffers
        _device_blocks.pack(padded, *side.send, send)
        count = int(np.prod(side.send[1], dtype=np.int64))
        return Message(side, send.ptr, recv.ptr, count), True

    @staticmethod
    def _unpacked(padded, side, packed):
        """The side's Message where its slab moves as it lies: in place
        where it is one run of memory (not `packed`), or as whole planes
        of an engine session's grid (its span); else None."""
        if not packed:
            count = int(np.prod(side.send[1], dtype=np.int64))
            return Message(side, _device_blocks.region(padded, *side.send).ptr,
                           _device_blocks.region(padded, *side.recv).ptr,
                           count)
        span = getattr(padded, "span", None)
        send = span(*side.send) if span is not None else None
        if send is None:
            return None
        recv, _ = span(*side.recv)
        return Message(side, send[0], recv, send[1])

    def close(self):
        """Pool the slab buffers (work on them may still be queued where
        an exchange failed: they are handed out after a device
        synchronize)."""
        for buffers in self.buffers.values():
            for buffer in buffers:
                _pads.SLABS.give_back(buffer, complete=False)
        self.buffers = {}


class Staging(_DeviceTransport):
    """Device slabs through host memory and MPI."""

    name = "staging"

    def __init__(self, comm, plan):
        super().__init__(comm, plan)
        self._host = {}  # count -> (send, receive) host buffers per side

    def _host_buffers(self, index, count):
        found = self._host.get((index, count))
        if found is None:
            found = (np.empty(count), np.empty(count))
            self._host[(index, count)] = found
        return found

    def move(self, messages):
        host = [self._host_buffers(i, m.count)
                for i, m in enumerate(messages)]
        for m, (hsend, _) in zip(messages, host):
            _core.to_host(hsend, m.send)
        requests = [self.comm.Irecv(hrecv, source=m.side.peer,
                                    tag=m.side.recv_tag)
                    for m, (_, hrecv) in zip(messages, host)]
        requests += [self.comm.Isend(hsend, dest=m.side.peer,
                                     tag=m.side.send_tag)
                     for m, (hsend, _) in zip(messages, host)]
        MPI.Request.Waitall(requests)
        for m, (_, hrecv) in zip(messages, host):
            _core.to_device(m.recv, hrecv)


class CudaMPI(_DeviceTransport):
    """Device slabs through a CUDA-aware MPI, on device pointers."""

    name = "cuda-mpi"

    def move(self, messages):
        def view(ptr, count):  # MPI reads device memory through the CAI
            return [_device_blocks.StridedView(None, ptr, (count,), (8,)),
                    MPI.DOUBLE]

        requests = [self.comm.Irecv(view(m.recv, m.count),
                                    source=m.side.peer, tag=m.side.recv_tag)
                    for m in messages]
        requests += [self.comm.Isend(view(m.send, m.count),
                                     dest=m.side.peer, tag=m.side.send_tag)
                     for m in messages]
        MPI.Request.Waitall(requests)


class NCCL(_DeviceTransport):
    """Device slabs through NCCL, on the legacy default stream."""

    name = "nccl"

    def __init__(self, comm, plan, nccl_comm):
        super().__init__(comm, plan)
        self.nccl = nccl_comm

    def _post(self, messages, stream):
        # NCCL has no tags: messages between two ranks match in the order
        # they are posted, so both ends order them by direction (a rank
        # can be both neighbours along an axis, or its own)
        sends = sorted(messages, key=lambda m: m.side.send_tag)
        recvs = sorted(messages, key=lambda m: m.side.recv_tag)
        self.nccl.exchange([(m.send, m.count, m.side.peer) for m in sends],
                           [(m.recv, m.count, m.side.peer) for m in recvs],
                           stream)

    def move(self, messages):
        self._post(messages, 0)
        # the ghosts are in place when the exchange returns (and its time
        # is the transfer's, not the next engine call's)
        _core.cuda_stream_synchronize(LEGACY_STREAM)

    def queue(self, padded, stream):
        """Slabs that move as they lie go on `stream`, one group per
        axis (stream order keeps the axes in turn)."""
        axes = self._in_place(padded)
        if axes is None:
            return False
        t0 = time.perf_counter()
        for messages in axes:
            self._post(messages, stream)
        self.seconds["move"] += time.perf_counter() - t0
        return True


class CudaIPC(_DeviceTransport):
    """Device slabs written by the copy engines straight into the
    receiver's block, mapped through CUDA IPC (_peer_memory.py).

    An exchange: each rank, its own work on the block complete, tells
    each sender where its slab lands (a descriptor: the receive region
    is free to write from then on), copies its own slabs into the
    regions its receivers named, and tells each receiver once they
    landed; it returns when its own ghosts have landed.  A rank that
    fails on the way still sends its notes, to the end of the exchange
    (an empty descriptor, a "failed" flag), so that no neighbour waits
    for ever: the exchange raises on both."""

    name = "cuda-ipc"
    _WHERE, _LANDED = 16, 32  # tag offsets of the two notes

    def __init__(self, comm, plan):
        super().__init__(comm, plan)
        self.mapped = _peer_memory.Mapped()
        self.rank = comm.Get_rank()
        self.failure = None  # this rank's, within one exchange
        self._notes_of = {}  # receive pointer -> its descriptor
        self.seconds.update(ready=0.0, where=0.0, copies=0.0, landed=0.0)

    def _notes(self, messages, outgoing, size, offset, towards_sender):
        """Swap one note per message with its peer: `outgoing[i]` goes
        to messages[i]'s peer, and what it sent back is returned.  Notes
        towards the sender carry the receive tags, the others the send
        tags."""
        incoming = [np.zeros(size, np.uint8) for _ in messages]
        tags = [(m.side.recv_tag, m.side.send_tag) if towards_sender
                else (m.side.send_tag, m.side.recv_tag) for m in messages]
        requests = [self.comm.Irecv(buf, source=m.side.peer,
                                    tag=back + offset)
                    for buf, m, (_, back) in zip(incoming, messages, tags)]
        requests += [self.comm.Isend(note, dest=m.side.peer,
                                     tag=out + offset)
                     for note, m, (out, _) in zip(outgoing, messages, tags)]
        MPI.Request.Waitall(requests)
        return incoming

    def _describe(self, ptr):
        """_peer_memory.describe(ptr), once per run: a run's blocks stay
        where they are until it ends."""
        note = self._notes_of.get(ptr)
        if note is None:
            note = self._notes_of[ptr] = _peer_memory.describe(ptr)
        return note

    def exchange(self, padded):
        """The axes' moves one after another; a failure on the way is
        raised after the last axis, whose neighbours wait for its notes
        too."""
        self.failure = None
        super().exchange(padded)
        failure, self.failure = self.failure, None
        if failure is not None:
            raise failure

    def move(self, messages):
        seconds = self.seconds
        t0 = time.perf_counter()
        size = _peer_memory.DESCRIPTOR_BYTES
        notes = [np.zeros(size, np.uint8) for _ in messages]
        if self.failure is None:
            try:
                # the receive regions are free once this rank's work on
                # the block is complete: the engine's calls return so, the
                # packs were queued on the legacy stream
                _core.cuda_stream_synchronize(LEGACY_STREAM)
                notes = [self._describe(m.recv) for m in messages]
            except (RuntimeError, ValueError) as exc:
                self.failure = exc
        t1 = time.perf_counter()
        where = self._notes(messages, notes, size, self._WHERE, True)
        t2 = time.perf_counter()
        if self.failure is None:
            try:
                _core.device_copies([
                    (self.mapped.address(buf, m.side.peer,
                                         own=m.side.peer == self.rank),
                     m.send, 8 * m.count)
                    for buf, m in zip(where, messages)])
            except (RuntimeError, ValueError) as exc:
                self.failure = exc
        t3 = time.perf_counter()
        flag = np.array([self.failure is None], np.uint8)
        landed = self._notes(messages, [flag] * len(messages), 1,
                             self._LANDED, False)
        for note, m in zip(landed, messages):
            if not note[0] and self.failure is None:
                self.failure = RuntimeError(
                    "rank %d failed in this exchange (it raises its own "
                    "error)" % m.side.peer)
        # the move's parts (info()'s exchange_*_seconds): this rank's
        # sync and descriptors, the wait for the receivers' descriptors,
        # the copies (mapping included), the wait for the senders' notes
        seconds["ready"] += t1 - t0
        seconds["where"] += t2 - t1
        seconds["copies"] += t3 - t2
        seconds["landed"] += time.perf_counter() - t3

    def close(self):
        try:
            self.mapped.close()
        finally:
            super().close()


# ---------------------------------------------------------------------------
# choosing one

# (id(cartesian communicator), device) -> (it, nccl Communicator): an
# NCCL communicator belongs to the device current when it was made
_NCCL_COMMS = {}


def cuda_aware_mpi():
    """Whether MPI says it takes device pointers (MPIX_Query_cuda_support)."""
    query = getattr(MPI, "Query_cuda_support", None)
    try:
        return bool(query()) if query is not None else False
    except Exception:
        return False


def _nccl_comm(comm, device):
    """The NCCL communicator over `comm`'s ranks on `device` (tried once
    per communicator and device, refusals remembered too: a failed
    initialisation costs seconds and may keep device memory; every rank
    must call).  None where NCCL is missing or refuses on any rank (e.g.
    two ranks on one GPU)."""
    key = (id(comm), device)
    found = _NCCL_COMMS.get(key)
    if found is None:
        found = (comm, _make_nccl_comm(comm))
        _NCCL_COMMS[key] = found
    return found[1]


# (id(communicator), device) -> (it, whether CUDA IPC works on it)
_IPC_USABLE = {}


def _ipc_usable(comm, device):
    """_peer_memory.usable, asked once per communicator and device (every
    rank must call)."""
    key = (id(comm), device)
    found = _IPC_USABLE.get(key)
    if found is None:
        found = (comm, agree(comm, _peer_memory.usable, comm, device))
        _IPC_USABLE[key] = found
    return found[1]


def _make_nccl_comm(comm):
    loaded = _try(_nccl.load) is not None
    if comm.allreduce(int(loaded), op=MPI.MIN) == 0:
        return None
    uid = _try(_nccl.unique_id_bytes) if comm.Get_rank() == 0 else None
    uid = comm.bcast(uid, root=0)
    if uid is None:
        return None
    try:
        nccl = _nccl.Communicator(uid, comm.Get_size(), comm.Get_rank())
    except RuntimeError:
        nccl = None
    if comm.allreduce(int(nccl is not None), op=MPI.MIN) == 0:
        if nccl is not None:
            nccl.close()
        return None
    return nccl


def _try(fn):
    try:
        return fn() or True
    except (OSError, RuntimeError, AttributeError):
        return None


def open_transport(name, comm, plan, on_device, device=None, split=False):
    """The transport `name` ("auto": the best that works on every rank)
    for a run on `device` (the current GPU); collective.  `split`: the
    rounds will exchange beside their interior (_run.split_bands), where
    "auto" takes CUDA IPC before NCCL: its copy engines leave the SMs to
    the interior, which ran 13% slower beside NCCL's kernels
    (h200x2_trace_weak_heat3d_*.md; h200x2_multigpu_split_*_640d598.md:
    weak heat3d on 2 GPUs 93.6% against 91.7%)."""
    if not on_device:
        return HostMPI(comm, plan)
    if name == "auto" and not any(plan.axes):
        # nothing to exchange (every axis whole on its rank): no NCCL
        # communicator to set up for it
        return agree(comm, Staging, comm, plan)
    if name == "auto":
        order = ("cuda-ipc", "nccl") if split else ("nccl", "cuda-ipc")
    else:
        order = (name,) if name in ("nccl", "cuda-ipc") else ()
    for candidate in order:
        link = (_open_nccl if candidate == "nccl" else _open_ipc)(
            comm, plan, device, name == candidate)
        if link is not None:
            return link
    if name == "cuda-mpi" or (name == "auto" and comm.allreduce(
            int(cuda_aware_mpi()), op=MPI.MIN)):
        return agree(comm, CudaMPI, comm, plan)
    return agree(comm, Staging, comm, plan)


def _open_nccl(comm, plan, device, asked):
    """NCCL where every rank can use it, else None (or, `asked` for it by
    name, a RuntimeError on every rank)."""
    nccl = _nccl_comm(comm, device)
    if nccl is not None:
        return agree(comm, NCCL, comm, plan, nccl)
    if asked:
        agree(comm, _refuse, "NCCL is not usable on every rank "
              "(library missing, or it refused, e.g. ranks sharing a "
              "GPU); use transport='staging'")
    return None


def _open_ipc(comm, plan, device, asked):
    """CUDA IPC where every pair of ranks can use it, else None (or,
    `asked` for it by name, a RuntimeError on every rank)."""
    if _ipc_usable(comm, device):
        return agree(comm, CudaIPC, comm, plan)
    if asked:
        agree(comm, _refuse, "CUDA IPC is not usable between every "
              "pair of ranks (ranks on several hosts, devices that are "
              "not peers, or a runtime that refuses); use "
              "transport='nccl' or 'staging'")
    return None


def _refuse(message):
    raise RuntimeError(message)
