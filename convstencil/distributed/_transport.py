"""Halo exchanges: moving the slabs of a HaloPlan between ranks.

- "mpi": host blocks; MPI subarray datatypes read and write the padded
  block in place (no packing in Python).
- device blocks: slabs packed into contiguous device buffers (kept for
  the run, so device memory stays steady), then moved by "nccl"
  (ncclSend/ncclRecv), "cuda-mpi" (MPI on device pointers, where
  MPIX_Query_cuda_support says yes) or "staging" (through host memory
  and MPI), and unpacked.

Axes go one after another: an axis's slabs span the ghosts filled along
earlier axes, which fills edges and corners without diagonal messages.
Host blocks can also start an exchange and finish it later (start,
finish), so that compute that needs no ghost runs meanwhile.
"""
import time

import numpy as np
from mpi4py import MPI

from .. import _core, _device
from . import _device_blocks, _nccl
from ._agree import agree

HOST_TRANSPORTS = ("mpi",)
DEVICE_TRANSPORTS = ("nccl", "cuda-mpi", "staging")


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

    def close(self):
        for datatype in self._types.values():
            datatype.Free()
        self._types.clear()


class _DeviceTransport:
    """Device blocks: pack, move (by the subclass), unpack."""

    def __init__(self, comm, plan):
        self.comm = comm
        self.plan = plan
        # one send and one receive buffer per side, for the whole run
        self.buffers = [[(_device.DeviceArray(s.send[1]),
                          _device.DeviceArray(s.recv[1]))
                         for s in sides] for sides in plan.axes]

    def exchange(self, padded):
        for axis, (sides, buffers) in enumerate(zip(self.plan.axes,
                                                    self.buffers)):
            if not sides:
                continue
            for s, (send, _) in zip(sides, buffers):
                _device_blocks.copy(_device_blocks.region(padded, *s.send),
                                    send)
            self.move(axis)
            for s, (_, recv) in zip(sides, buffers):
                # the receive was queued on the legacy default stream
                _device_blocks.copy(_device_blocks.whole(recv, stream=1),
                                    _device_blocks.region(padded, *s.recv))

    def close(self):
        self.buffers = []


class Staging(_DeviceTransport):
    """Device slabs through host memory and MPI."""

    name = "staging"

    def __init__(self, comm, plan):
        super().__init__(comm, plan)
        self.host = [[(np.empty(send.shape), np.empty(recv.shape))
                      for send, recv in buffers] for buffers in self.buffers]

    def move(self, axis):
        sides, buffers, host = (self.plan.axes[axis], self.buffers[axis],
                                self.host[axis])
        for (send, _), (hsend, _) in zip(buffers, host):
            _core.to_host(hsend, send.ptr)
        requests = [self.comm.Irecv(hrecv, source=s.peer, tag=s.recv_tag)
                    for s, (_, hrecv) in zip(sides, host)]
        requests += [self.comm.Isend(hsend, dest=s.peer, tag=s.send_tag)
                     for s, (hsend, _) in zip(sides, host)]
        MPI.Request.Waitall(requests)
        for (_, recv), (_, hrecv) in zip(buffers, host):
            _core.to_device(recv.ptr, hrecv)


class CudaMPI(_DeviceTransport):
    """Device slabs through a CUDA-aware MPI, on device pointers."""

    name = "cuda-mpi"

    def move(self, axis):
        sides, buffers = self.plan.axes[axis], self.buffers[axis]
        requests = [self.comm.Irecv([recv, MPI.DOUBLE], source=s.peer,
                                    tag=s.recv_tag)
                    for s, (_, recv) in zip(sides, buffers)]
        requests += [self.comm.Isend([send, MPI.DOUBLE], dest=s.peer,
                                     tag=s.send_tag)
                     for s, (send, _) in zip(sides, buffers)]
        MPI.Request.Waitall(requests)


class NCCL(_DeviceTransport):
    """Device slabs through NCCL, on the legacy default stream."""

    name = "nccl"

    def __init__(self, comm, plan, nccl_comm):
        super().__init__(comm, plan)
        self.nccl = nccl_comm

    def move(self, axis):
        # NCCL has no tags: messages between two ranks match in the order
        # they are posted, so both ends order them by direction (a rank
        # can be both neighbours along an axis, or its own)
        pairs = list(zip(self.plan.axes[axis], self.buffers[axis]))
        sends = sorted(pairs, key=lambda p: p[0].send_tag)
        recvs = sorted(pairs, key=lambda p: p[0].recv_tag)
        self.nccl.exchange(
            [(send.ptr, send.size, s.peer) for s, (send, _) in sends],
            [(recv.ptr, recv.size, s.peer) for s, (_, recv) in recvs])


# ---------------------------------------------------------------------------
# choosing one

_NCCL_COMMS = {}  # id(cartesian communicator) -> (it, nccl Communicator)


def cuda_aware_mpi():
    """Whether MPI says it takes device pointers (MPIX_Query_cuda_support)."""
    query = getattr(MPI, "Query_cuda_support", None)
    try:
        return bool(query()) if query is not None else False
    except Exception:
        return False


def _nccl_comm(comm):
    """The NCCL communicator over `comm`'s ranks (tried once per
    communicator, refusals remembered too: a failed initialisation costs
    seconds and may keep device memory; every rank must call).  None
    where NCCL is missing or refuses on any rank (e.g. two ranks on one
    GPU)."""
    found = _NCCL_COMMS.get(id(comm))
    if found is None:
        found = (comm, _make_nccl_comm(comm))
        _NCCL_COMMS[id(comm)] = found
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


def open_transport(name, comm, plan, on_device):
    """The transport `name` ("auto": the best that works on every rank)
    for a run; collective."""
    if not on_device:
        return HostMPI(comm, plan)
    if name == "auto" and not any(plan.axes):
        # nothing to exchange (every axis whole on its rank): no NCCL
        # communicator to set up for it
        return agree(comm, Staging, comm, plan)
    if name in ("auto", "nccl"):
        nccl = _nccl_comm(comm)
        if nccl is not None:
            return agree(comm, NCCL, comm, plan, nccl)
        if name == "nccl":
            agree(comm, _refuse, "NCCL is not usable on every rank "
                  "(library missing, or it refused, e.g. ranks sharing a "
                  "GPU); use transport='staging'")
    if name == "cuda-mpi" or (name == "auto" and comm.allreduce(
            int(cuda_aware_mpi()), op=MPI.MIN)):
        return agree(comm, CudaMPI, comm, plan)
    return agree(comm, Staging, comm, plan)


def _refuse(message):
    raise RuntimeError(message)
