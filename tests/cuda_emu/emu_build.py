"""emu_build.py -- the CUDA engine's real sources as CPU objects, built
against the CUDA emulation in this folder (cuda_runtime.h, emu.cpp).

The one implementation of the rewrite and the compile, shared by run.sh
(the engine's C++ test, test_engine) and setup.py
(CONVSTENCIL_CUDA=emulate, a convstencil._core whose CUDA engine runs
on the CPU).  Two rewrites on the way, nothing else in the sources
changes:

- a launch ``k<<<grid, block, smem, stream>>>(args);`` (one line, an
  optional template argument list) becomes
  ``cs_emu_launch("k", k, grid, block, smem, stream, args);``, which
  counts it by the kernel's name and runs its blocks one at a time;
- the dynamic shared array ``extern __shared__ double smem[];`` becomes
  ``double *smem = cs_emu_dynamic_smem();``.

Each rewritten .cu and emu.cpp compile with g++ -std=c++20
-DCS_CUDA_EMULATION -include cuda_runtime.h, in parallel, one line
printed per file.

    python3 emu_build.py OUT [--jobs N] [--cflags "FLAGS"]

rewrites csrc/cuda into OUT/cuda (csrc's headers into OUT) and leaves
OUT/<name>.o for every .cu and OUT/emu.o; the objects' paths are printed
last, one a line.
"""
import argparse
import concurrent.futures
import glob
import os
import re
import shlex
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CSRC = os.path.normpath(os.path.join(HERE, "..", "..", "csrc"))

_LAUNCH = re.compile(
    r"([A-Za-z_][A-Za-z_0-9]*)((<[^<>]*>)?)<<<(.*)>>>\((.*)\);")
_SMEM = "extern __shared__ double smem[];"
_SMEM_EMU = "double *smem = cs_emu_dynamic_smem();"

# g++ flags of every emulated object (run.sh and setup.py add their own)
CXXFLAGS = ["-std=c++20", "-O2", "-DCS_CUDA_EMULATION", "-Wall", "-Wextra",
            "-Wno-unused-parameter", "-Wno-unknown-pragmas"]


def rewrite_text(text):
    """The source `text` with its launches and its dynamic shared array
    rewritten for the emulation."""
    text = _LAUNCH.sub(r'cs_emu_launch("\1", \1\2, \4, \5);', text)
    return text.replace(_SMEM, _SMEM_EMU)


def rewrite(out, csrc=CSRC):
    """Write csrc/cuda's .cu, .cuh and .h, rewritten, into out/cuda and
    csrc's own headers into out (the sources include "../stencil.h");
    returns the rewritten .cu files.  RuntimeError where a launch is
    left that the rewrite did not convert (one spread over lines)."""
    cuda_out = os.path.join(out, "cuda")
    os.makedirs(cuda_out, exist_ok=True)
    sources = []
    for pattern in ("*.cu", "*.cuh", "*.h"):
        for path in sorted(glob.glob(os.path.join(csrc, "cuda", pattern))):
            with open(path) as f:
                text = rewrite_text(f.read())
            for number, line in enumerate(text.splitlines(), 1):
                if "<<<" in line:
                    raise RuntimeError(
                        "%s:%d: a launch the rewrite did not convert "
                        "(write it on one line): %s"
                        % (path, number, line.strip()))
            target = os.path.join(cuda_out, os.path.basename(path))
            _write_if_changed(target, text)
            if path.endswith(".cu"):
                sources.append(target)
    for path in sorted(glob.glob(os.path.join(csrc, "*.h"))):
        with open(path) as f:
            _write_if_changed(os.path.join(out, os.path.basename(path)),
                              f.read())
    return sources


def _write_if_changed(path, text):
    """Write `text` unless `path` holds it already (its time then stays,
    so an unchanged source is not compiled again)."""
    if os.path.exists(path):
        with open(path) as f:
            if f.read() == text:
                return
    with open(path, "w") as f:
        f.write(text)


def commands(out, sources, cxx="g++", extra=()):
    """(command, object) for every rewritten source and emu.cpp."""
    base = ([cxx] + CXXFLAGS + list(extra)
            + ["-I" + HERE, "-I" + out])
    jobs = []
    for source in sources:
        obj = os.path.join(out, os.path.basename(source)[:-3] + ".o")
        jobs.append((base + ["-x", "c++", "-include",
                             os.path.join(HERE, "cuda_runtime.h"), "-c",
                             source, "-o", obj], obj))
    obj = os.path.join(out, "emu.o")
    jobs.append((base + ["-c", os.path.join(HERE, "emu.cpp"), "-o", obj],
                 obj))
    return jobs


def _stale(obj, sources):
    """Whether `obj` is missing or older than any file it is made of."""
    if not os.path.exists(obj):
        return True
    made = os.path.getmtime(obj)
    return any(os.path.getmtime(s) > made for s in sources)


def build(out, extra=(), jobs=None, cxx="g++", log=print):
    """Rewrite and compile into `out`; returns the objects (the .cu files'
    and emu.o).  Compiles `jobs` files at a time (default: one per core),
    one line each; an object newer than its source and every header is
    kept.  subprocess.CalledProcessError where a compile fails."""
    sources = rewrite(out)
    headers = (glob.glob(os.path.join(out, "cuda", "*.cuh"))
               + glob.glob(os.path.join(out, "cuda", "*.h"))
               + glob.glob(os.path.join(out, "*.h"))
               + glob.glob(os.path.join(HERE, "*.h")))
    todo = []
    objects = []
    for cmd, obj in commands(out, sources, cxx, extra):
        objects.append(obj)
        source = cmd[cmd.index("-c") + 1]
        if _stale(obj, [source] + headers):
            todo.append(cmd)
    workers = max(1, min(len(todo), jobs or os.cpu_count() or 1))
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        for cmd in todo:
            log(" ".join(shlex.quote(c) for c in cmd))
        list(pool.map(subprocess.check_call, todo))
    return objects


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="build folder")
    parser.add_argument("--jobs", type=int, default=None,
                        help="compiles at a time (default: one per core)")
    parser.add_argument("--cflags", default="",
                        help="extra g++ flags, one string")
    args = parser.parse_args(argv)
    out = os.path.abspath(args.out)
    try:
        objects = build(out, shlex.split(args.cflags), args.jobs,
                        log=lambda line: print(line, file=sys.stderr))
    except (RuntimeError, subprocess.CalledProcessError) as exc:
        print("emu_build.py: %s" % exc, file=sys.stderr)
        return 1
    for obj in objects:
        print(obj)
    return 0


if __name__ == "__main__":
    sys.exit(main())
