"""DistributedGrid and the moves between one rank and many: scatter,
gather, from_local.

A DistributedGrid holds this rank's block (a NumPy array, or a device
array when the block lives on a GPU), the global shape, how every axis
is cut (so any rank knows every block) and the Cartesian communicator.
"""
import numbers

import numpy as np
from mpi4py import MPI

from .. import _backends, _engine, _host, _memory
from . import _device_blocks, _gpus, _partition
from ._agree import agree

_TAG_BLOCK = 7101


class DistributedGrid:
    """One rank's block of a grid spread over an MPI communicator.

    Attributes: `shape` (global), `ndim`, `comm` (Cartesian), `dims`
    (ranks per axis), `coords` (this rank's place), `extents` (per axis,
    the extents of all blocks along it), `offset` and `local_shape` (this
    block in global indices), `local` (the block: NumPy or device
    array), `on_device`, `device` (the GPU index holding the block, None
    for host blocks).  Made by scatter(), from_local() and apply().
    """

    def __init__(self, block, shape, extents, comm, on_device, info=None,
                 device=None):
        self.local = block
        self.device = device
        self.shape = tuple(shape)
        self.extents = tuple(tuple(e) for e in extents)
        self.comm = comm
        self.dims = tuple(len(e) for e in self.extents)
        self.coords = _partition.coords_of(comm.Get_rank(), self.dims)
        self.on_device = on_device
        self.info = info

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def slices(self):
        """This block's slices of the global grid."""
        return _partition.block_slices(self.extents, self.coords)

    @property
    def offset(self):
        return tuple(s.start for s in self.slices)

    @property
    def local_shape(self):
        return tuple(s.stop - s.start for s in self.slices)

    def __repr__(self):
        return ("DistributedGrid(shape=%s, rank %d of %d at coords %s of "
                "dims %s: block %s at offset %s, %s float64)"
                % (self.shape, self.comm.Get_rank(), self.comm.Get_size(),
                   self.coords, self.dims, self.local_shape, self.offset,
                   "device %d" % self.device if self.on_device
                   else "numpy"))


# ---------------------------------------------------------------------------
# the Cartesian communicator

_CARTS = {}  # (communicator handle, dims) -> Cartesian communicator


def _cartesian(comm, dims):
    """A Cartesian communicator over `comm` (ranks not reordered), kept
    per communicator and dims: MPI has a limited number of them.  Every
    rank votes on reusing, so all make a new one or none does."""
    key = (comm.py2f(), dims)
    cart = _CARTS.get(key)
    if comm.allreduce(0 if cart is None else 1, op=MPI.MIN) == 0:
        cart = comm.Create_cart(dims, periods=[False] * len(dims),
                                reorder=False)
        _CARTS[key] = cart
    return cart


def _check_comm(comm):
    if comm is None:
        return MPI.COMM_WORLD
    if not isinstance(comm, MPI.Intracomm):
        raise TypeError("comm must be an mpi4py intracommunicator (e.g. "
                        "MPI.COMM_WORLD), got %s" % type(comm).__name__)
    return comm


def _check_root(root, comm):
    if (isinstance(root, bool) or not isinstance(root, numbers.Integral)
            or not 0 <= root < comm.Get_size()):
        raise ValueError("root must be a rank of the communicator (0 to %d),"
                         " got %r" % (comm.Get_size() - 1, root))
    return int(root)


def _on_device(backend, is_device_input):
    """Whether blocks live on the GPU for this `backend`."""
    name = _engine.backend_name(backend)
    if name in ("cpu", "cpu-tc"):
        if is_device_input:
            raise TypeError("backend %r keeps blocks in host memory, but the "
                            "grid is a GPU array; use backend='auto' or "
                            "'cuda'" % name)
        return False
    if name == "auto" and not is_device_input:
        return _backends.cuda_status() == "available"
    status = _backends.cuda_status()
    if status != "available":
        raise RuntimeError("blocks on the GPU need the CUDA engine, which "
                           "is not usable here: %s" % status)
    return True


def _host_grid(grid):
    """`grid` as a float64 C-contiguous NumPy array (a private copy)."""
    if _device_blocks.is_device(grid):
        return _device_blocks.download(grid)
    a = _host.as_grid(grid, None)
    return np.array(a, dtype=np.float64, order="C", copy=True)


def _place(block, on_device):
    return _device_blocks.upload(block) if on_device else block


def _gpu_for_blocks(comm, on_device, device, device_input):
    """The GPU this rank's blocks go to, made current (None for host
    blocks; collective).  ValueError on every rank where `device` is
    given for host blocks or is not a visible GPU."""
    if not on_device:
        if device is not None:
            agree(comm, _refuse_device, device)
        return None
    rank_on_host, _ = _gpus.host_rank(comm)
    return agree(comm, lambda: _gpus.use(_gpus.choose(
        device, device_input, rank_on_host)))


def _refuse_device(device):
    raise ValueError("device=%d names a GPU, but the blocks are in host "
                     "memory; use backend='cuda' (or 'auto' where a GPU is "
                     "usable)" % device)


def use_device(d):
    """Make d's GPU current on this thread (nothing for host blocks)."""
    if d.on_device and d.device is not None:
        _gpus.use(d.device)


# ---------------------------------------------------------------------------
# scatter and gather

def scatter(grid, comm=None, root=0, dims=None, backend="auto",
            device=None):
    """Split `grid` (given on `root`; other ranks pass None) into one
    block per rank of `comm` (default MPI.COMM_WORLD).

    `dims`: ranks per axis (default: as MPI.Compute_dims gives; entries
    0 are filled in).  Blocks differ by at most one cell along an axis.
    `backend`: "auto" puts the blocks on the GPU when one is usable (or
    the grid is a GPU array), "cpu" in host memory, "cuda" on the GPU.
    `device`: the GPU of this rank's block; None gives the ranks of one
    host its GPUs in turn (rank i on a host with n GPUs takes GPU i % n)
    and makes it current.  Every rank must call it; an error on any rank
    is raised on all.

    >>> d = csd.scatter(u if comm.rank == 0 else None, comm=comm)
    """
    comm = _check_comm(comm)
    root = agree(comm, _check_root, root, comm)
    rank = comm.Get_rank()

    def read_root():
        if rank != root:
            return None
        return _host_grid(grid)

    full = agree(comm, read_root)
    meta = comm.bcast(None if full is None else
                      (full.shape, _device_blocks.is_device(grid)), root=root)
    shape, device_input = meta

    def plan():
        d = _partition.resolve_dims(dims, comm.Get_size(), len(shape),
                                    MPI.Compute_dims)
        return (d, _partition.split(shape, d),
                _on_device(backend, device_input), _gpus.check_device(device))

    dims_, extents, on_device, gpu = agree(comm, plan)
    # the root read a device grid on its current device: choose after
    gpu = _gpu_for_blocks(comm, on_device, gpu, False)
    cart = _cartesian(comm, dims_)
    block = _send_blocks(cart, full, extents, root)
    block = agree(comm, _place, block, on_device)
    return DistributedGrid(block, shape, extents, cart, on_device,
                           device=gpu)


def _send_blocks(cart, full, extents, root):
    """Root sends every rank its block; returns this rank's."""
    rank, dims = cart.Get_rank(), tuple(len(e) for e in extents)
    mine = _partition.block_slices(extents, _partition.coords_of(rank, dims))
    if rank != root:
        block = np.empty([s.stop - s.start for s in mine])
        cart.Recv(block, source=root, tag=_TAG_BLOCK)
        return block
    for other in range(cart.Get_size()):
        if other != root:
            where = _partition.block_slices(
                extents, _partition.coords_of(other, dims))
            cart.Send(np.ascontiguousarray(full[where]), dest=other,
                      tag=_TAG_BLOCK)
    return np.ascontiguousarray(full[mine])


def _check_grid(d, what="d"):
    if not isinstance(d, DistributedGrid):
        raise TypeError("%s must be a DistributedGrid (made by scatter, "
                        "from_local or apply), got %s"
                        % (what, type(d).__name__))


def host_block(d):
    """This rank's block as a C-contiguous NumPy array."""
    if d.on_device:
        use_device(d)
        return _device_blocks.download(d.local)
    return np.ascontiguousarray(d.local)


def gather(d, root=0):
    """The whole grid as a NumPy array on `root`, None on other ranks
    (the inverse of scatter).  Every rank of d.comm must call it."""
    _check_grid(d)
    comm = d.comm
    root = agree(comm, _check_root, root, comm)
    rank = comm.Get_rank()
    block = agree(comm, host_block, d)
    full = agree(comm, _new_full, d.shape, rank == root)
    if rank != root:
        comm.Send(block, dest=root, tag=_TAG_BLOCK)
        return None
    for other in range(comm.Get_size()):
        where = _partition.block_slices(
            d.extents, _partition.coords_of(other, d.dims))
        if other == root:
            full[where] = block
        else:
            part = np.empty([s.stop - s.start for s in where])
            comm.Recv(part, source=other, tag=_TAG_BLOCK)
            full[where] = part
    return full


def _new_full(shape, here):
    """The gathered grid, on root only; checked before it is made."""
    if not here:
        return None
    _memory.ensure_host_fits(int(np.prod(shape, dtype=np.int64)) * 8,
                             "a gathered grid of shape %s" % (shape,))
    return np.empty(shape)


# ---------------------------------------------------------------------------
# blocks each rank already holds

def local_slices(shape, comm=None, dims=None):
    """The slices of a grid of `shape` that this rank's block covers in
    scatter's layout: build blocks with them for from_local().

    >>> block = make_part_of_grid(csd.local_slices((4096, 4096), comm))
    """
    comm = _check_comm(comm)
    shape = tuple(int(n) for n in shape)
    dims = _partition.resolve_dims(dims, comm.Get_size(), len(shape),
                                   MPI.Compute_dims)
    extents = _partition.split(shape, dims)
    return _partition.block_slices(
        extents, _partition.coords_of(comm.Get_rank(), dims))


def _local_block(block):
    if _device_blocks.is_device(block):
        return _device_blocks.to_device_array(block), True
    return _host_grid(block), False


def _extents_from(shapes, dims):
    """Per axis, the block extents that the ranks' block shapes give;
    a ValueError where they do not form a Cartesian tiling."""
    ndims = {len(s) for s in shapes}
    if len(ndims) != 1:
        raise ValueError("the ranks' blocks have different numbers of "
                         "dimensions: %s" % sorted(ndims))
    extents = []
    for axis, parts in enumerate(dims):
        along = [None] * parts
        for rank, s in enumerate(shapes):
            c = _partition.coords_of(rank, dims)[axis]
            if along[c] is None:
                along[c] = s[axis]
            elif along[c] != s[axis]:
                raise ValueError(
                    "blocks at coordinate %d of axis %d must have the same "
                    "extent along it, got %d and %d (rank %d): the blocks "
                    "must tile the grid as dims %s does"
                    % (c, axis, along[c], s[axis], rank, tuple(dims)))
        extents.append(tuple(along))
    return tuple(extents)


def from_local(block, comm=None, dims=None, backend="auto", device=None):
    """A DistributedGrid from the block each rank holds (the grid need
    never exist on one rank).  Ranks are laid out row-major over `dims`
    (default as MPI.Compute_dims gives); blocks at the same coordinate
    of an axis must have the same extent along it (local_slices() gives
    scatter's layout).  The block is copied; it stays on the GPU if it is
    a GPU array (on its device, which must be current; `device` may only
    name that one), and goes there if `backend` asks for it (to `device`,
    or as scatter chooses)."""
    comm = _check_comm(comm)
    device = agree(comm, _gpus.check_device, device)
    local, device_input = agree(comm, _local_block, block)
    shapes = comm.allgather(local.shape)

    def plan():
        d = _partition.resolve_dims(dims, comm.Get_size(), len(shapes[0]),
                                    MPI.Compute_dims)
        return d, _extents_from(shapes, d), _on_device(backend,
                                                       device_input)

    dims_, extents, on_device = agree(comm, plan)
    gpu = _gpu_for_blocks(comm, on_device, device, device_input)
    if on_device and not device_input:
        local = agree(comm, _place, local, True)
    elif device_input and not on_device:  # pragma: no cover - refused above
        local = _device_blocks.download(local)
    cart = _cartesian(comm, dims_)
    shape = tuple(sum(e) for e in extents)
    return DistributedGrid(local, shape, extents, cart, on_device,
                           device=gpu)
