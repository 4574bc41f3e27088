#!/bin/bash
# run.sh [quick|full|tc3d|tc3d-quick|session|tb2d|fold|onestep|scheme|
#         scheme-quick] -- check the CUDA engine without a GPU.
#
# Builds the real sources of csrc/cuda (and csrc/stencil.c, layout.c, plan.c,
# cpu/threads.c: host_copy.c's thread count)
# as CPU code against the small CUDA emulation in this folder, then runs
# test_engine: cs_cuda_apply on every path, mode and kernel family against
# a naive step-by-step correlate, plus the error paths (no device, no
# driver, device out of memory, unsupported kernels) and leak checks;
# "scheme" runs test_scheme instead: PDE schemes on device arrays
# (cs_cuda_scheme_apply_device) against a plain evaluation of their tables.
# emu_build.py rewrites the sources on the way (launches
# `k<<<g, b, smem, stream>>>(args);`, counted by the kernel's name for the
# tests to see which kernels a call ran, and the dynamic shared array;
# nothing else changes) and compiles them, one file per core; setup.py's
# CONVSTENCIL_CUDA=emulate builds convstencil._core the same way.
#
#   EMU_CFLAGS   extra compiler flags, e.g. "-fsanitize=address,undefined"
#   EMU_SMS      SMs the device reports (default 132); a small count makes
#                tc2d's persistent blocks loop over several tiles
#   BUILD        build folder (default: a fresh temporary one)
# "quick" (the default) takes about five minutes on two cores; "full" much
# longer (blocks run one at a time, their threads as OS threads, and each
# MMA is a 32-thread barrier).  "tc3d" / "tc3d-quick" run the 3D
# tensor-core cases of full / quick alone.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../../csrc" && pwd)
out=${BUILD:-$(mktemp -d)}
flags=(${EMU_CFLAGS:-})
mkdir -p "$out"
python3 "$here/emu_build.py" "$out" --cflags "-g ${EMU_CFLAGS:-}" > /dev/null
cxx=(g++ -std=c++20 -O2 -g -DCS_CUDA_EMULATION -I"$here" -I"$out" -Wall -Wextra
     -Wno-unused-parameter -Wno-unknown-pragmas "${flags[@]}")
mkdir -p "$out/tests"
for f in stencil layout host_copy plan scheme scheme_plan cpu/threads; do
    # .c.o: csrc/scheme.c and csrc/cuda/scheme.cu share a name
    gcc -std=c99 -O2 -g -I"$out" "${flags[@]}" -c "$src/$f.c" \
        -o "$out/$(basename "$f").c.o"
done
case "${1:-quick}" in
scheme*) test=test_scheme; mode=${1#scheme}; mode=${mode#-} ;;
*) test=test_engine; mode=${1:-quick} ;;
esac
"${cxx[@]}" -c "$here/$test.cpp" -o "$out/tests/$test.o"
"${cxx[@]}" "$out"/*.o "$out/tests/$test.o" -o "$out/$test" -lpthread
exec "$out/$test" $mode
