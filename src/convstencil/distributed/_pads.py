"""The padded blocks of runs on device blocks, kept between runs.

A run on device blocks works in two padded blocks (block plus ghosts,
_plan.py) and returns the owned part of one of them as its result.
Allocating them at every run cost milliseconds per call (cudaMalloc of a
block of a GB or more, cudaFree waiting for the whole device): on 4
H200s the setup outside the rounds took 4 to 21% of a run's wall time
(benchmarks/results/h200x4_multigpu_36cc777.md).  So the blocks are
pooled: the one a run did not return comes back at once, the result's
when the last reference to the result goes (its Lease's finalizer), and
the next run of the same padded shape on the same GPU takes them.

At most two padded blocks wait in the pool (the oldest go first), and
the transports' slab buffers in a pool of their own;
convstencil.clear_cache() frees them all.  A block that a result held
may still be read by work its user queued on some stream: it is handed
out again only after the device finished all its work, as cudaFree
would have waited.
"""
import weakref

from .. import _backends, _core, _device


class BlockPool:
    """Device blocks (DeviceArrays) kept for reuse: at most `keep`,
    the oldest freed first."""

    def __init__(self, keep):
        self.keep = keep
        # [((shape, device), DeviceArray, whether its work is known
        # complete)], oldest first
        self._free = []
        _backends.register_release(self.release)

    def take(self, shape, device):
        """A DeviceArray of `shape` on `device` (the current GPU): a
        pooled one where there is one, else a new one (after freeing the
        pool, where the GPU is out of memory)."""
        key = (tuple(shape), device)
        free = self._free
        for i in range(len(free) - 1, -1, -1):
            if free[i][0] == key:
                _, block, complete = free.pop(i)
                if not complete:
                    _core.cuda_device_synchronize()
                return block
        try:
            return _device.DeviceArray(shape)
        except MemoryError:
            if not free:
                raise
            self.release()
            return _device.DeviceArray(shape)

    def give_back(self, block, complete):
        """Pool `block`; `complete`: no work on it can still be queued."""
        self._free.append(((tuple(block.shape), block.device), block,
                           bool(complete)))
        del self._free[:-self.keep]

    def release(self):
        """Free the pooled blocks (convstencil.clear_cache() calls this);
        their bytes."""
        freed = sum(block.nbytes for _, block, _ in self._free)
        self._free.clear()
        return freed

    def pooled(self):
        """The pooled blocks, oldest first (for tests)."""
        return [block for _, block, _ in self._free]


# The padded blocks: two a run, one of them the result's while it lives.
PADS = BlockPool(keep=2)
# The transports' send and receive buffers of slabs that are packed: two
# per side, up to six sides (a 3D block split along every axis).
SLABS = BlockPool(keep=12)


class Lease:
    """A pooled padded block lent to a result: what the result's view
    reads (ptr, shape) and keeps alive; the block goes back to the pool
    when the lease goes."""

    __slots__ = ("pad", "ptr", "shape", "device", "nbytes", "__weakref__")

    def __init__(self, pad):
        self.pad = pad
        self.ptr = pad.ptr
        self.shape = pad.shape
        self.device = pad.device
        self.nbytes = pad.nbytes
        done = weakref.finalize(self, PADS.give_back, pad, False)
        done.atexit = False  # at exit the memory just goes

    def __repr__(self):
        return "Lease(%r)" % (self.pad,)
