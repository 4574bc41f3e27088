"""Other ranks' device memory on one host (CUDA IPC), for the
"cuda-ipc" transport.

A rank that is to receive a slab tells its sender where the slab lands:
a descriptor holding the IPC handle of the allocation around the
receive region, the allocation's base in the receiver's address space
and the region's offset in it (`describe`).  The sender maps that
allocation (`Mapped.address`) and copies into it with the copy engines
(_core.device_copies): on the GPUs of one host they moved a round's
slabs 1.3 to 2 times as fast as NCCL's send and receive
(benchmarks/results/h200x4_peer_moves_*.md).  A rank sending to itself
(self_exchange) writes to its own pointer: CUDA maps no process's memory
into itself.

Mapping costs time in proportion to the allocation (an engine session's
grids of a GB or more: tens of milliseconds a run on 4 H200s, more than
the exchanges; h200x4_multigpu_ipc_4dcfec0.md), so the mappings a run
used are kept for the next run, which finds the same allocations where
it runs the same grid (the engine's and the padded blocks' pools keep
them); the others are unmapped when a run ends, and clear_cache()
unmaps all.  A kept mapping keeps the peer's memory allocated until it
goes, even where the peer freed it.
"""
import collections

import numpy as np
from mpi4py import MPI

from .. import _backends, _core

_HANDLE = 64  # bytes of a cudaIpcMemHandle_t
DESCRIPTOR_BYTES = _HANDLE + 16


def describe(ptr):
    """The descriptor (uint8 array) of device pointer `ptr`, for the
    rank that will write there."""
    handle, base, _ = _core.cuda_ipc_export(ptr)
    out = np.zeros(DESCRIPTOR_BYTES, np.uint8)
    out[:_HANDLE] = np.frombuffer(handle, np.uint8)
    out[_HANDLE:].view(np.uint64)[:] = (base, ptr - base)
    return out


def _fields(descriptor):
    base, offset = (int(v) for v in descriptor[_HANDLE:].view(np.uint64))
    return bytes(descriptor[:_HANDLE]), base, offset


# handle -> the allocation's base in this process, kept between runs
_MAPPED = collections.OrderedDict()


def _unmap(handles):
    errors = []
    for handle in handles:
        try:
            _core.cuda_ipc_close(_MAPPED.pop(handle))
        except RuntimeError as exc:
            errors.append(str(exc))
    if errors:
        raise RuntimeError("unmapping the peers' device memory failed: "
                           + "; ".join(errors))


def release():
    """Unmap every kept mapping (clear_cache()); no device bytes of this
    process are freed."""
    _unmap(list(_MAPPED))
    return 0


_backends.register_release(release)


class Mapped:
    """The peers' allocations one run writes into."""

    def __init__(self):
        self._used = set()

    def address(self, descriptor, peer, own):
        """Where the descriptor's region is in this process: mapped from
        `peer` (kept from an earlier run where it was mapped then), or
        the pointer itself where the rank is its own peer (`own`)."""
        handle, base, offset = _fields(descriptor)
        if base == 0:
            raise RuntimeError("rank %d failed in this exchange (it raises "
                               "its own error)" % peer)
        if own:
            return base + offset
        here = _MAPPED.get(handle)
        if here is None:
            here = self._open(handle)
        self._used.add(handle)
        return here + offset

    def _open(self, handle):
        """Map `handle`'s allocation.  Where the runtime says it is
        mapped already, a kept mapping holds memory the peer freed and
        allocated again (under a new handle): the kept mappings this run
        has not used go, and the map is tried again."""
        try:
            here, _ = _core.cuda_ipc_open(handle)
        except RuntimeError:
            stale = [h for h in _MAPPED if h not in self._used]
            if not stale:
                raise
            _unmap(stale)
            here, _ = _core.cuda_ipc_open(handle)
        _MAPPED[handle] = here
        return here

    def close(self):
        """Unmap the kept mappings this run did not use (no copy into
        them is pending: each exchange's copies are complete when it
        returns)."""
        _unmap([h for h in _MAPPED if h not in self._used])


def usable(comm, device):
    """Whether every rank of `comm` can write into every other's device
    memory through CUDA IPC: all on one host (MPI's shared-memory split),
    each rank's test allocation opened by every other rank, and each
    pair of devices the same or peers (NVLink or PCIe peer access).
    Collective; False on every rank where any rank says no."""
    local = comm.Split_type(MPI.COMM_TYPE_SHARED)
    one_host = local.Get_size() == comm.Get_size()
    local.Free()
    if not one_host:
        return False
    ok, ptr, descriptor = True, None, None
    try:
        ptr, _ = _core.device_alloc(256)
        descriptor = describe(ptr)
    except (RuntimeError, ValueError, MemoryError):
        ok = False
    everyone = comm.allgather(descriptor if ok else None)
    rank = comm.Get_rank()
    if ok and all(d is not None for d in everyone):
        ok = _open_all(everyone, rank, device)
    else:
        ok = False
    comm.Barrier()  # no rank frees its allocation while another maps it
    if ptr is not None:
        _core.device_free(ptr)
    return bool(comm.allreduce(int(ok), op=MPI.MIN))


def _open_all(descriptors, rank, device):
    """Whether this rank maps every other rank's allocation and reaches
    its device."""
    try:
        for peer, descriptor in enumerate(descriptors):
            if peer == rank:
                continue
            here, holder = _core.cuda_ipc_open(_fields(descriptor)[0])
            try:
                reach = _core.cuda_can_access_peer(device, holder)
            finally:
                _core.cuda_ipc_close(here)
            if not reach:
                return False
    except (RuntimeError, ValueError):
        return False
    return True
