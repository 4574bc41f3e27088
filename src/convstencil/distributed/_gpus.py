"""Which GPU holds a rank's blocks.

One GPU per rank where the host has enough of them: the ranks on one
host (MPI's shared-memory split) take its visible GPUs in turn, so
``mpiexec -n 4`` on a host with 4 GPUs puts rank i on GPU i with no
CUDA_VISIBLE_DEVICES.  More ranks than GPUs share them, and ranks that
share a GPU exchange through host staging (NCCL refuses them).  A block
made from a device array stays on the array's device (the current one),
and `device=` names a GPU outright.

The CUDA runtime's current device belongs to a thread, so every
distributed call makes the grid's device current again before it
touches a block (a few microseconds).
"""
import numbers

from mpi4py import MPI

from .. import _core


def check_device(device):
    """None or a visible GPU's index (checked against the count later)."""
    if device is None:
        return None
    if isinstance(device, bool) or not isinstance(device, numbers.Integral):
        raise TypeError("device must be None or a GPU index (int), got %r"
                        % (device,))
    if device < 0:
        raise ValueError("device must be a GPU index >= 0, got %d" % device)
    return int(device)


def host_rank(comm):
    """(this rank's index among the ranks of `comm` on its host, their
    number); collective."""
    host = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        return host.Get_rank(), host.Get_size()
    finally:
        host.Free()


def choose(device, device_input, rank_on_host):
    """The GPU index for this rank's blocks: `device` when given, the
    current device for a block that already is a device array, else the
    host's GPUs in turn by the rank's index on its host."""
    if device_input:
        current = _core.cuda_current_device()
        if device is not None and device != current:
            raise ValueError(
                "the block is a device array on the current GPU (%d), but "
                "device=%d: make device %d current before making the array, "
                "or leave device=None" % (current, device, device))
        return current
    if device is not None:
        return device
    count = _core.cuda_info()[1]
    if count < 1:
        raise RuntimeError("no CUDA device is visible to this rank")
    return rank_on_host % count


def use(device):
    """Make `device` current for this thread (ValueError if not visible)."""
    _core.cuda_set_device(device)
    return device
