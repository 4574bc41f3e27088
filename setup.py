"""Build convstencil._core: the C engine, and the CUDA engine when nvcc is found.

Environment:
  CONVSTENCIL_CUDA=0|1   force building without / with the CUDA engine
                         (default: build it when nvcc is found via CUDA_HOME,
                         CUDA_PATH, then PATH)
  CONVSTENCIL_CUDA=emulate
                         for testing without a GPU: the CUDA engine's real
                         sources compiled as CPU C++ (g++ -std=c++20) against
                         the CUDA emulation of tests/cuda_emu (emu_build.py,
                         the rewrite run.sh uses too), so that the Python
                         that drives the GPU runs on the CPU; needs a source
                         checkout (tests/cuda_emu), no nvcc.  Slow (blocks
                         run one at a time, their threads as OS threads):
                         tiny grids only.  backends() says "available" and
                         cuda_info() names the emulated device.
  CONVSTENCIL_MARCH=...  -march for the C engine (default "native": the
                         package is built where it runs; set "x86-64-v3" or
                         similar for portable builds)
  CONVSTENCIL_CUDA_ARCH  the GPU architectures to compile for, a list
                         ("sm_80,sm_90"); default: the GPUs nvidia-smi
                         reports here, else sm_80 and sm_90; the PTX of the
                         newest is embedded too (build_tools/cuda_arch.py)
"""
import concurrent.futures
import glob
import importlib.util
import os
import shutil
import subprocess
import sys
import threading
import time

import numpy as np
import setuptools
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


def find_nvcc():
    """Return the nvcc path, or None; CUDA_HOME, then CUDA_PATH, then PATH."""
    for var in ("CUDA_HOME", "CUDA_PATH"):
        home = os.environ.get(var)
        if home:
            candidate = os.path.join(home, "bin", "nvcc")
            if os.path.isfile(candidate):
                return candidate
    return shutil.which("nvcc")


EMULATE = "emulate"


def want_cuda():
    """(the nvcc path, EMULATE or None; one line saying why)."""
    forced = os.environ.get("CONVSTENCIL_CUDA")
    if forced not in (None, "", "0", "1", EMULATE):
        raise SystemExit("CONVSTENCIL_CUDA must be 0, 1 or emulate, got %r"
                         % forced)
    if forced == EMULATE:
        return EMULATE, ("building the CUDA engine against the CPU "
                         "emulation of tests/cuda_emu (no GPU is used)")
    nvcc = find_nvcc()
    if forced == "0":
        return None, "CUDA engine disabled by CONVSTENCIL_CUDA=0 at build time"
    if nvcc is None:
        if forced == "1":
            raise SystemExit("CONVSTENCIL_CUDA=1 but nvcc was not found "
                             "(set CUDA_HOME or put nvcc on PATH)")
        return None, "nvcc not found at build time"
    return nvcc, "building the CUDA engine with %s" % nvcc


def load_cuda_arch():
    """build_tools/cuda_arch.py as a module: the choice of GPU
    architectures (tests/test_cuda_arch.py checks it)."""
    path = os.path.join(ROOT, "build_tools", "cuda_arch.py")
    spec = importlib.util.spec_from_file_location("cuda_arch", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_emu_build():
    """tests/cuda_emu/emu_build.py as a module (the emulation's rewrite
    and compile, shared with tests/cuda_emu/run.sh)."""
    path = os.path.join(ROOT, "tests", "cuda_emu", "emu_build.py")
    if not os.path.isfile(path):
        raise SystemExit("CONVSTENCIL_CUDA=emulate needs the source tree's "
                         "tests/cuda_emu, and %s is missing" % path)
    spec = importlib.util.spec_from_file_location("emu_build", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _read(path):
    """The text of `path`, or None where it does not exist."""
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


class BuildExtWithCuda(build_ext):
    """Compile csrc/cuda/*.cu into objects linked into _core: with nvcc,
    or as CPU C++ against the emulation (CONVSTENCIL_CUDA=emulate)."""

    def build_extension(self, ext):
        # the module is rebuilt when the engine changes kind (CPU only,
        # nvcc, emulated): setuptools would keep a newer module whose
        # sources did not change
        stamp = os.path.join(self.build_temp, "cuda_engine_kind")
        kind = ext.cuda_kind
        if not self.force and _read(stamp) != kind:
            self.force = True
        nvcc = getattr(ext, "nvcc", None)
        if nvcc == EMULATE:
            self._compile_emulated(ext)
        elif nvcc:
            self._compile_cuda(ext, nvcc)
        super().build_extension(ext)
        os.makedirs(self.build_temp, exist_ok=True)
        with open(stamp, "w") as f:
            f.write(kind)

    def _compile_emulated(self, ext):
        """csrc/cuda as CPU objects against tests/cuda_emu; every symbol
        hidden, so that the emulated runtime's cudaMalloc and friends
        never meet a real CUDA runtime loaded in the same process."""
        emu = load_emu_build()
        build_dir = os.path.join(self.build_temp, "cuda_emu")
        objects = emu.build(build_dir, extra=["-fPIC",
                                              "-fvisibility=hidden"])
        ext.extra_objects = list(ext.extra_objects or []) + objects

    def _compile_cuda(self, ext, nvcc):
        cuda_arch = load_cuda_arch()
        try:
            archs, why = cuda_arch.choose()
        except ValueError as e:
            raise SystemExit(str(e))
        arch_flags = cuda_arch.nvcc_flags(archs)
        arch = "+".join("sm_" + a for a in archs)
        print("convstencil: CUDA architectures %s (%s), and the PTX of "
              "sm_%s for newer GPUs" % (arch, why, archs[-1]), flush=True)
        build_dir = os.path.join(self.build_temp, "cuda")
        os.makedirs(build_dir, exist_ok=True)
        headers = (glob.glob(os.path.join(ROOT, "csrc", "*.h"))
                   + glob.glob(os.path.join(ROOT, "csrc", "cuda", "*.cuh"))
                   + glob.glob(os.path.join(ROOT, "csrc", "cuda", "*.h")))
        commands = []
        for source in sorted(glob.glob(os.path.join(ROOT, "csrc", "cuda",
                                                    "*.cu")),
                             key=_longest_first):
            obj = os.path.join(build_dir,
                               os.path.basename(source)[:-3] + ".o")
            commands.append([nvcc, "-std=c++17", "-O3"] + arch_flags
                            + ["-Xcompiler", "-fPIC",
                             "-I" + os.path.join(ROOT, "csrc"),
                             "-c", source, "-o", obj])
        # an object newer than its source and every header, made by the
        # same command, is kept: the README's second install (with the
        # test extra) reuses the first one's CUDA objects
        stale = [cmd for cmd in commands
                 if not _up_to_date(cmd, [cmd[-3]] + headers)]
        print("convstencil: compiling %d of %d CUDA files with nvcc "
              "(%s), %d at a time; the rest are up to date"
              % (len(stale), len(commands), arch,
                 max(1, min(len(stale), os.cpu_count() or 1))), flush=True)
        # one nvcc per core: the files are independent
        workers = max(1, min(len(stale) or 1, os.cpu_count() or 1))
        done = [0]
        lock = threading.Lock()

        def compile_one(cmd):
            start = time.monotonic()
            subprocess.check_call(cmd)
            with open(cmd[-1] + ".cmd", "w") as f:
                f.write(" ".join(cmd))
            with lock:
                done[0] += 1
                print("convstencil: [%d/%d] %s (%.0f s)"
                      % (done[0], len(stale), os.path.basename(cmd[-3]),
                         time.monotonic() - start), flush=True)

        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            list(pool.map(compile_one, stale))
        objects = [cmd[-1] for cmd in commands]
        ext.extra_objects = list(ext.extra_objects or []) + objects


# The CUDA files that take longest to compile, longest first (one core of
# a 2-core machine, sm_80 and sm_90, from a fresh build's timeline on
# 2026-11-27: tb2d_3x3_deep 143 s, tb3d 122, tb2d_rank1 120, tb2d_plus
# 101, tb2d_3x3 90, tb2d_rank1_wide 61, scheme_stream3 51 (sm_90 only:
# its sm_80 images trap; nvcc_scheme_stream3_ptxas.txt), tb2d_box_wide
# 49, scheme_stream 22; no other file above 4 s).  Started first, they
# do not end the build on one core while the others idle (tb3d, last in
# name order, did).
_SLOW_CUDA = ("tb2d_3x3_deep.cu", "tb3d.cu", "tb2d_rank1.cu",
              "tb2d_plus.cu", "tb2d_3x3.cu", "tb2d_rank1_wide.cu",
              "scheme_stream3.cu", "tb2d_box_wide.cu", "scheme_stream.cu")


def _longest_first(source):
    name = os.path.basename(source)
    return (_SLOW_CUDA.index(name) if name in _SLOW_CUDA
            else len(_SLOW_CUDA), name)


def _up_to_date(cmd, inputs):
    """Whether the object cmd makes exists, is newer than every input and
    was made by this same command."""
    obj = cmd[-1]
    if _read(obj + ".cmd") != " ".join(cmd) or not os.path.exists(obj):
        return False
    made = os.path.getmtime(obj)
    return all(os.path.getmtime(p) < made for p in inputs)


def make_extension():
    nvcc, why = want_cuda()
    print("convstencil: %s" % (why if nvcc else why + ": building the CPU "
                                "engine only"), file=sys.stderr)
    march = os.environ.get("CONVSTENCIL_MARCH", "native")
    sources = (["csrc/module.c", "csrc/stencil.c", "csrc/layout.c",
                "csrc/host_copy.c", "csrc/cai_glue.c", "csrc/dlpack_glue.c",
                "csrc/plan.c", "csrc/plan_glue.c", "csrc/scheme.c",
                "csrc/scheme_glue.c", "csrc/scheme_plan.c",
                "csrc/scheme_device_glue.c", "csrc/scheme_tables_glue.c",
                "csrc/peer_glue.c", "csrc/device_glue.c",
                "csrc/session_glue.c"]
               + sorted(glob.glob("csrc/cpu/*.c")))
    compile_args = ["-std=c99", "-O3", "-fopenmp", "-Wall", "-Wextra",
                    "-Wno-unused-parameter"]
    if march:
        compile_args.append("-march=" + march)
    link_args = ["-fopenmp"]
    macros = [("NPY_NO_DEPRECATED_API", "NPY_1_22_API_VERSION")]
    libraries, library_dirs = [], []
    if not nvcc:
        macros.append(("CS_NO_CUDA_REASON", '"%s"' % why))
    elif nvcc == EMULATE:
        macros += [("CS_HAVE_CUDA", "1"), ("CS_CUDA_EMULATION", "1")]
        libraries += ["stdc++", "pthread"]
    else:
        cuda_home = os.path.dirname(os.path.dirname(os.path.realpath(nvcc)))
        macros.append(("CS_HAVE_CUDA", "1"))
        library_dirs.append(os.path.join(cuda_home, "lib64"))
        # static runtime: the wheel needs only the driver on the user's machine
        libraries += ["cudart_static", "rt", "dl", "pthread", "stdc++"]
    # every engine file: setuptools relinks the module only when one of
    # its sources or depends is newer than it, and the CUDA objects are
    # not sources (an edited .cu or header would leave a stale module)
    depends = sorted(glob.glob("csrc/**/*.h", recursive=True)
                     + glob.glob("csrc/cuda/*.cu")
                     + glob.glob("csrc/cuda/*.cuh"))
    if nvcc == EMULATE:
        depends += sorted(glob.glob("tests/cuda_emu/*.h")
                          + glob.glob("tests/cuda_emu/*.cpp")
                          + ["tests/cuda_emu/emu_build.py"])
    ext = Extension("convstencil._core", sources=sources, depends=depends,
                    include_dirs=[np.get_include(), "csrc"],
                    define_macros=macros, extra_compile_args=compile_args,
                    extra_link_args=link_args, libraries=libraries,
                    library_dirs=library_dirs)
    ext.nvcc = nvcc
    ext.cuda_kind = EMULATE if nvcc == EMULATE else "nvcc" if nvcc else "none"
    return ext


def license_metadata():
    """The SPDX license expression as PEP 639 metadata where setuptools
    knows it (77 and later), else the plain license field: pyproject.toml
    cannot hold the expression itself for setuptools older than 77, which
    reject `project.license` as a string (pip install --no-build-isolation
    with the installed setuptools)."""
    try:
        major = int(setuptools.__version__.split(".")[0])
    except ValueError:
        major = 0
    if major >= 77:
        return {"license_expression": "BSD-3-Clause",
                "license_files": ["LICENSE"]}
    return {"license": "BSD-3-Clause", "license_files": ["LICENSE"]}


setup(ext_modules=[make_extension()], cmdclass={"build_ext": BuildExtWithCuda},
      **license_metadata())
