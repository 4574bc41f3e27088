"""Which GPU architectures the CUDA engine is compiled for (setup.py).

CONVSTENCIL_CUDA_ARCH, when set, is a list ("sm_80,sm_90", "80 90" or
"8.0;9.0"); else the GPUs this machine's driver reports (nvidia-smi);
else, with none (a login node that builds for its compute nodes), the
default set: sm_80 (A100) and sm_90 (H100, H200).  Every build also
embeds the PTX of its newest architecture, which the driver compiles for
newer GPUs on first use.

The engine needs sm_80 or newer (asynchronous copies, FP64 MMA); its
tensor-core kernels need sm_90 (FP64 m16n8k4), and on sm_80 the planner
runs the CUDA-core paths instead.
"""
import os
import re
import shutil
import subprocess

DEFAULT = ("80", "90")
OLDEST = 80


def parse(text):
    """'sm_80,sm_90', '80 90', '8.0;9.0' or 'compute_90' -> ['80', '90']
    (sorted, each once); ValueError for anything else or an architecture
    older than sm_80."""
    archs = set()
    for item in re.split(r"[\s,;]+", text.strip()):
        if not item:
            continue
        dotted = re.fullmatch(r"(\d+)\.(\d)", item)
        plain = re.fullmatch(r"(?:sm_|compute_)?(\d{2,3})", item)
        if dotted is None and plain is None:
            raise ValueError("CONVSTENCIL_CUDA_ARCH: %r is no GPU "
                             "architecture (write sm_80, 80 or 8.0)" % item)
        arch = (dotted.group(1) + dotted.group(2) if dotted
                else plain.group(1))
        if int(arch) < OLDEST:
            raise ValueError("CONVSTENCIL_CUDA_ARCH: sm_%s is older than the "
                             "engine supports (sm_80 or newer)" % arch)
        archs.add(arch)
    if not archs:
        raise ValueError("CONVSTENCIL_CUDA_ARCH is empty")
    return sorted(archs, key=int)


def driver_archs(run=subprocess.run):
    """The compute capabilities of this machine's GPUs as '90' and so on
    (nvidia-smi), [] when there is no driver or no GPU."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = run([smi, "--query-gpu=compute_cap", "--format=csv,noheader"],
                  capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return []
    if out.returncode != 0:
        return []
    found = set()
    for line in out.stdout.splitlines():
        m = re.fullmatch(r"\s*(\d+)\.(\d)\s*", line)
        if m:
            found.add(m.group(1) + m.group(2))
    return sorted(found, key=int)


def choose(environ=os.environ, run=subprocess.run):
    """(architectures, one line saying why)."""
    text = environ.get("CONVSTENCIL_CUDA_ARCH", "")
    if text.strip():
        return parse(text), "CONVSTENCIL_CUDA_ARCH"
    found = driver_archs(run)
    usable = [a for a in found if int(a) >= OLDEST]
    if usable:
        return usable, "the GPUs of this machine (nvidia-smi)"
    if found:
        return list(DEFAULT), ("this machine's GPUs (sm_%s) are older than "
                               "the engine supports; the default set"
                               % ", sm_".join(found))
    return list(DEFAULT), "no GPU found here: the default set"


def nvcc_flags(archs):
    """-gencode flags: a binary image for each architecture and the PTX
    of the newest."""
    flags = []
    for arch in archs:
        flags += ["-gencode", "arch=compute_%s,code=sm_%s" % (arch, arch)]
    newest = archs[-1]
    flags += ["-gencode", "arch=compute_%s,code=compute_%s"
              % (newest, newest)]
    return flags
