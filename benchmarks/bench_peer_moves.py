"""How fast one exchange round's messages move between the GPUs of one
host, by each way a transport could move them.

Every rank (one GPU each, ring neighbours as along a wrapped, split axis
0) sends `size` bytes to each of its two neighbours and receives as much
from each, as the distributed layer's exchange does.  The ways:

- nccl: grouped ncclSend/ncclRecv on the legacy default stream, through
  the package's own NCCL binding (its transport "nccl"), then a stream
  synchronize;
- copy-engine: cudaMemcpyAsync from the send buffer straight into the
  neighbour's receive buffer (opened through CUDA IPC), one stream per
  side;
- sm-kernel: a copy kernel whose stores go to the neighbour's receive
  buffer (over NVLink), one launch per side on its own stream;
- local: the same bytes copied within the rank's own GPU (cudaMemcpyAsync
  device to device), the memory system's share of a move for scale.

A repeat is timed between two barriers (the first: every receiver's
buffer is free; the second: every message has landed), so a figure is
what a round would wait; `barrier` times the two barriers alone.  A
figure is the slowest rank's median over --repeat repeats after a
warm-up; GB/s counts the bytes one rank sends (2 x size).  Every way's
received bytes are checked against the sender's.

It needs CuPy and mpi4py, and NCCL where CuPy or PyTorch ship it (or
$CONVSTENCIL_NCCL_LIBRARY); it builds nothing of the package (the NCCL
binding is a ctypes module read from the source tree).

    mpiexec -n 4 python benchmarks/bench_peer_moves.py --save NAME
    NCCL_P2P_USE_CUDA_MEMCPY=1 mpiexec -n 4 python ... --label ce-nccl
"""
import argparse
import datetime
import importlib.util
import json
import os
import subprocess
import sys
import time

import numpy as np
from mpi4py import MPI

import cupy as cp

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = (os.environ.get("CONVSTENCIL_RESULTS_DIR")
           or os.path.join(HERE, "results"))
MIB = 1 << 20

COPY_KERNEL = r"""
extern "C" __global__ void push(const double2 *__restrict__ src,
                                double2 *__restrict__ dst, long long n)
{
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
         i < n; i += (long long)gridDim.x * blockDim.x) {
        dst[i] = src[i];
    }
}
"""


def nccl_binding():
    """The package's ctypes NCCL module, read from the source tree."""
    path = os.path.join(HERE, os.pardir, "src", "convstencil",
                        "distributed", "_nccl.py")
    spec = importlib.util.spec_from_file_location("_nccl", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Buffers:
    """Raw cudaMalloc buffers (CUDA IPC exports a whole allocation, so
    none comes from CuPy's pool): a send buffer per side, filled with
    the rank's and the side's number, and a receive buffer per side."""

    def __init__(self, nbytes, rank):
        self.nbytes = nbytes
        self.send = [cp.cuda.runtime.malloc(nbytes) for _ in range(2)]
        self.recv = [cp.cuda.runtime.malloc(nbytes) for _ in range(2)]
        for side, ptr in enumerate(self.send):
            self.array(ptr).fill(rank * 10 + side)

    def array(self, ptr):
        mem = cp.cuda.UnownedMemory(ptr, self.nbytes, self)
        return cp.ndarray(self.nbytes // 8, cp.float64,
                          cp.cuda.MemoryPointer(mem, 0))

    def clear(self):
        for ptr in self.recv:
            self.array(ptr).fill(-1)

    def check(self, low, high):
        """Whether side 0 holds the low neighbour's high-side message and
        side 1 the high neighbour's low-side one."""
        want = (low * 10 + 1, high * 10 + 0)
        return all(bool((self.array(ptr) == w).all())
                   for ptr, w in zip(self.recv, want))

    def free(self):
        for ptr in self.send + self.recv:
            cp.cuda.runtime.free(ptr)


class Ring:
    def __init__(self, comm, nbytes):
        self.comm = comm
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.low = (self.rank - 1) % self.size
        self.high = (self.rank + 1) % self.size
        self.buf = Buffers(nbytes, self.rank)
        self.streams = [cp.cuda.Stream(non_blocking=True) for _ in range(2)]
        handles = comm.allgather([cp.cuda.runtime.ipcGetMemHandle(p)
                                  for p in self.buf.recv])
        # side 0's message goes to the low neighbour's side-1 buffer
        self.peer = [cp.cuda.runtime.ipcOpenMemHandle(handles[self.low][1]),
                     cp.cuda.runtime.ipcOpenMemHandle(handles[self.high][0])]
        module = cp.RawModule(code=COPY_KERNEL)
        self.kernel = module.get_function("push")
        sms = cp.cuda.Device().attributes["MultiProcessorCount"]
        self.blocks = 2 * sms

    def copy_engine(self):
        for side in range(2):
            cp.cuda.runtime.memcpyAsync(self.peer[side], self.buf.send[side],
                                        self.buf.nbytes, 4,  # default
                                        self.streams[side].ptr)
        for s in self.streams:
            s.synchronize()

    def sm_kernel(self):
        n = self.buf.nbytes // 16
        for side in range(2):
            with self.streams[side]:
                self.kernel((self.blocks,), (512,),
                            (np.uint64(self.buf.send[side]),
                             np.uint64(self.peer[side]), np.int64(n)))
        for s in self.streams:
            s.synchronize()

    def local(self):
        for side in range(2):
            cp.cuda.runtime.memcpyAsync(self.buf.recv[side],
                                        self.buf.send[side],
                                        self.buf.nbytes, 3,
                                        self.streams[side].ptr)
        for s in self.streams:
            s.synchronize()

    def close(self):
        cp.cuda.Device().synchronize()
        self.comm.Barrier()  # no peer still writes into our buffers
        for ptr in self.peer:
            cp.cuda.runtime.ipcCloseMemHandle(ptr)
        self.comm.Barrier()
        self.buf.free()


class NcclMoves:
    def __init__(self, comm, nccl):
        uid = nccl.unique_id_bytes() if comm.Get_rank() == 0 else None
        self.comm = nccl.Communicator(comm.bcast(uid, root=0),
                                      comm.Get_size(), comm.Get_rank())

    def __call__(self, ring):
        b = ring.buf
        count = b.nbytes // 8
        # posted in the same order at both ends (a two-rank ring's
        # neighbours are one rank): sends low then high, receives from
        # the high neighbour then from the low one
        self.comm.exchange([(b.send[0], count, ring.low),
                            (b.send[1], count, ring.high)],
                           [(b.recv[1], count, ring.high),
                            (b.recv[0], count, ring.low)])
        cp.cuda.Stream.null.synchronize()

    def close(self):
        self.comm.close()


def timed(comm, move, repeat):
    """This rank's seconds per repeat, barriers included."""
    move()  # warm-up
    comm.Barrier()
    seconds = []
    for _ in range(repeat):
        comm.Barrier()
        t0 = time.perf_counter()
        move()
        comm.Barrier()
        seconds.append(time.perf_counter() - t0)
    return seconds


def worker(args):
    comm = MPI.COMM_WORLD
    local = comm.Split_type(MPI.COMM_TYPE_SHARED).Get_rank()
    cp.cuda.Device(local % cp.cuda.runtime.getDeviceCount()).use()
    nccl = NcclMoves(comm, nccl_binding())
    records = []
    for mib in args.sizes:
        ring = Ring(comm, int(mib * MIB))
        ways = {"nccl": lambda: nccl(ring), "copy-engine": ring.copy_engine,
                "sm-kernel": ring.sm_kernel, "local": ring.local,
                "barrier": lambda: None}
        for way, move in ways.items():
            ring.buf.clear()
            comm.Barrier()
            seconds = timed(comm, move, args.repeat)
            comm.Barrier()
            ok = True if way in ("local", "barrier") else ring.buf.check(
                ring.low, ring.high)
            medians = comm.gather(float(np.median(seconds)), root=0)
            oks = comm.gather(ok, root=0)
            if comm.Get_rank() == 0:
                slowest = max(medians)
                records.append({
                    "way": way, "mib_per_side": mib, "ranks": comm.Get_size(),
                    "seconds": slowest, "seconds_by_rank": medians,
                    "gb_per_s_sent_per_rank": (
                        2 * mib * MIB / slowest / 1e9 if way != "barrier"
                        else None),
                    "received_right": all(oks)})
        ring.close()
    nccl.close()
    for r in records:
        print(json.dumps(r), flush=True)
    return records


def provenance(args):
    try:
        names = subprocess.run(["nvidia-smi", "--query-gpu=name",
                                "--format=csv,noheader"],
                               capture_output=True, text=True,
                               timeout=30).stdout.split("\n")[0].strip()
    except (OSError, subprocess.SubprocessError):
        names = "unknown GPU"
    return {
        "device": "%d x %s" % (MPI.COMM_WORLD.Get_size(), names),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime(
            "%Y-%m-%dT%H:%M:%SZ"),
        "commit": os.environ.get("CONVSTENCIL_COMMIT", "unknown"),
        "command": " ".join(["python"] + sys.argv),
        "mpi": MPI.Get_library_version().splitlines()[0].strip("\0 \t"),
        "nccl_env": {k: v for k, v in os.environ.items()
                     if k.startswith("NCCL_")},
        "label": args.label}


def markdown(records, prov):
    lines = ["# Moving one exchange round's messages between GPUs (%s)"
             % prov["label"], "",
             "Device: %s; date %s; commit %s; command `%s`; NCCL "
             "environment %s." % (prov["device"], prov["date"],
                                  prov["commit"], prov["command"],
                                  prov["nccl_env"] or "default"), "",
             "Each rank sends the size to each ring neighbour and receives "
             "as much from each; time between two barriers, the slowest "
             "rank's median; GB/s of the bytes one rank sends.", "",
             "| MiB per side | way | us | GB/s sent per rank | received "
             "right |", "|---|---|---|---|---|"]
    for r in records:
        rate = r["gb_per_s_sent_per_rank"]
        lines.append("| %g | %s | %.1f | %s | %s |" % (
            r["mib_per_side"], r["way"], r["seconds"] * 1e6,
            "%.1f" % rate if rate else "", r["received_right"]))
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", type=float, nargs="+",
                   default=[2, 8, 32, 64, 128],
                   help="MiB per side (default 2 8 32 64 128)")
    p.add_argument("--repeat", type=int, default=30)
    p.add_argument("--label", default="default")
    p.add_argument("--save", help="write results/NAME.{json,md} (rank 0)")
    args = p.parse_args()
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # before NCCL starts
    records = worker(args)
    if MPI.COMM_WORLD.Get_rank() != 0 or not args.save:
        return
    prov = provenance(args)
    for r in records:
        r.update(prov)
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, args.save + ".json"), "w") as f:
        json.dump(records, f, indent=1)
        f.write("\n")
    with open(os.path.join(RESULTS, args.save + ".md"), "w") as f:
        f.write(markdown(records, prov))
    print(markdown(records, prov))


if __name__ == "__main__":
    main()
