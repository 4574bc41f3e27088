#!/usr/bin/env bash
# Everything issue 37 measures on a host with several GPUs, in one go,
# from the repository root of an installed checkout (it builds nothing):
#
#   1. the distributed GPU tests under mpiexec -n 2 and -n 4;
#   2. bench_multigpu.py --gpus 1 2 4 (weak and strong scaling against
#      plain convstencil.apply, with the halo depth sweep), saved as
#      <gpu>x<count>_multigpu.{json,md};
#   3. profile_multigpu.sh (an Nsight Systems timeline of weak heat3d on
#      2 GPUs, where nsys is installed).
#
#     bash benchmarks/run_multigpu_device.sh [OUTDIR]    # default $OUT
#
# Each step writes OUTDIR/<step>.log; OUTDIR/steps.txt says how each
# ended and how long it took.  A failed step does not stop the later
# ones.  Every step has a time limit, all of them together about
# $DEADLINE_S seconds (default 570), each leaving time for the ones after
# it.  Set CONVSTENCIL_COMMIT where the checkout has no git history (the
# records' commit), STEM to name the results files, GPUS for other GPU
# counts ("1 2"), TESTS for the GPU counts of the tests ("" skips
# them), BENCH_ARGS for more bench_multigpu.py arguments (e.g.
# "--repeat 3").
set -u
out=${1:-${OUT:?give OUTDIR or set OUT}}
mkdir -p "$out"
python=${PYTHON:-python}
deadline=${DEADLINE_S:-570}
gpus=${GPUS:-1 2 4}
started=$(date +%s)

export NCCL_NVLS_ENABLE=0  # NVLink multicast off (KINDS: not lent)
export PYTHON=$python
if [ -z "${CONVSTENCIL_COMMIT:-}" ]; then
    commit=$(git rev-parse --short HEAD 2> /dev/null) \
        && export CONVSTENCIL_COMMIT=$commit
fi
# Open MPI refuses to start as root unless asked; the variables reach
# the mpiexec that bench_multigpu.py starts too.
if mpiexec --version 2>&1 | grep -qiE "open mpi|open-rte|openrte" \
        && [ "$(id -u)" = 0 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi

# step NAME CAP RESERVE COMMAND...: run COMMAND with output in
# OUTDIR/NAME.log, for at most CAP seconds and never into the RESERVE
# seconds that the later steps need.
step() {
    local name=$1 cap=$2 reserve=$3 left limit t0 status
    shift 3
    left=$((deadline - ($(date +%s) - started) - reserve))
    limit=$((cap < left ? cap : left))
    if [ "$limit" -lt 20 ]; then
        echo "$name: skipped (no time left)" | tee -a "$out/steps.txt"
        return
    fi
    echo "== $name (at most $limit s): $*"
    t0=$(date +%s)
    timeout "$limit" "$@" > "$out/$name.log" 2>&1
    status=$?
    echo "$name: exit status $status$([ $status = 124 ] \
        && echo ' (time limit)') in $(($(date +%s) - t0)) s" \
        | tee -a "$out/steps.txt"
}

facts() {
    date -u +%Y-%m-%dT%H:%M:%SZ
    echo "commit: ${CONVSTENCIL_COMMIT:-unknown}"
    nvidia-smi --query-gpu=index,name,memory.total,driver_version \
        --format=csv,noheader
    nvidia-smi topo -m | sed 's/\x1b\[[0-9;]*m//g'
    mpiexec --version 2>&1 | head -n 3
    nsys --version 2>&1 || echo "nsys: not found"
    "$python" -c "import sys, convstencil as cs, mpi4py
print(sys.version.split()[0], 'convstencil', cs.__version__,
      'mpi4py', mpi4py.__version__)
print(cs.backends())
print(cs.devices())"
}

# results named for the GPUs: h100x4_multigpu on four H100s
if [ -z "${STEM:-}" ]; then
    name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1 \
        | grep -oiE "[A-Z][0-9]{2,3}" | head -n 1 | tr '[:upper:]' '[:lower:]')
    count=$(nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)
    STEM=${name:-gpu}x${count}_multigpu
fi

: > "$out/steps.txt"
facts > "$out/facts.log" 2>&1
tests="tests/test_distributed_gpu.py tests/test_distributed_gpu_small.py"
for n in ${TESTS-2 4}; do
    # shellcheck disable=SC2086
    step "tests_${n}gpu" 90 $((n == 2 ? 420 : 330)) \
        mpiexec -n "$n" "$python" -m pytest $tests -q -p no:cacheprovider -rs
done
# shellcheck disable=SC2086
step bench 400 120 env CONVSTENCIL_RESULTS_DIR="$out" \
    "$python" benchmarks/bench_multigpu.py --gpus $gpus --timeout 200 \
    --save "$STEM" ${BENCH_ARGS:-}
step profile 200 0 bash benchmarks/profile_multigpu.sh "$out/profile"
echo "all steps: $(($(date +%s) - started)) s" | tee -a "$out/steps.txt"
