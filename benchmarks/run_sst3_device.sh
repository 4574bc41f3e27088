#!/bin/sh
# The 3D streamed scheme passes (csrc/cuda/scheme_stream3.cu) on a GPU
# machine: the schemes' GPU tests, compute-sanitizer on the 3D passes,
# then bench_schemes.py on wave3d at the engine's choice and at every
# depth.  From the repository root, after
#
#   rm -rf build; python -m pip install --no-build-isolation --no-deps -q .
#
#   sh benchmarks/run_sst3_device.sh [NAME]
#
# NAME (default h100_schemes_streamed3d): the results' name; the logs,
# NAME.json and NAME.md go to $OUT (default ./sst_out) as well as
# benchmarks/results/.  PRESETS (default wave3d) and BLOCKS (default
# nostream,stream2,...,stream6) choose what bench_schemes.py times.
set -e
ROOT=$(cd "$(dirname "$0")/.." && pwd)
NAME=${1:-h100_schemes_streamed3d}
OUT=${OUT:-$ROOT/sst_out}
PYTHON=${PYTHON:-python}
mkdir -p "$OUT"
cd "$ROOT"
{
    echo "# ${CONVSTENCIL_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo '?')} $(date -u +%FT%TZ)"
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
} > "$OUT/provenance.txt"
T="$ROOT/tests/test_gpu_small_schemes.py"
# from /tmp: the installed package, not src/ (which holds no build); no
# timings when a test fails
rc=0
{
    echo "## python -m pytest -q tests/test_gpu_small_schemes.py tests/test_gpu_schemes.py tests/test_explain_schemes.py"
    (cd /tmp && "$PYTHON" -m pytest -q -p no:cacheprovider "$T" \
        "$ROOT/tests/test_gpu_schemes.py" \
        "$ROOT/tests/test_explain_schemes.py") 2>&1 | tail -n 2
    for tool in memcheck racecheck synccheck; do
        K="streamed_3d and (wave-wrap or gray-scott-constant or kept-field-constant)"
        echo "## compute-sanitizer --tool $tool python -m pytest -q tests/test_gpu_small_schemes.py -k '$K'"
        (cd /tmp && compute-sanitizer --tool "$tool" "$PYTHON" -m pytest -q \
            -p no:cacheprovider "$T" -k "$K") 2>&1 | tail -n 3
    done
} > "$OUT/tests.txt" 2>&1 || rc=$?
cat "$OUT/tests.txt"
grep -q " failed" "$OUT/tests.txt" && exit 1
PRESETS=${PRESETS:-wave3d}
BLOCKS=${BLOCKS:-nostream,stream2,stream3,stream4,stream5,stream6}
"$PYTHON" benchmarks/bench_schemes.py --steps 48 --repeat 7 \
    --blocks "$BLOCKS" --presets "$PRESETS" --save "$NAME" \
    > "$OUT/bench.txt" 2>&1 || rc=$?
cat "$OUT/bench.txt"
[ "$rc" -eq 0 ] || exit "$rc"
cp "benchmarks/results/$NAME.json" "benchmarks/results/$NAME.md" "$OUT/"
