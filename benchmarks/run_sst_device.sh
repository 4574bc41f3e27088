#!/bin/sh
# The streamed scheme passes on a GPU machine: their GPU tests, then
# bench_schemes.py on the presets they run (the leapfrog wave, with a
# velocity field, Gray-Scott) at the engine's choice and forced depths.
# From the repository root, after
#
#   rm -rf build; python -m pip install --no-build-isolation --no-deps -q .
#
#   sh benchmarks/run_sst_device.sh [NAME]
#
# NAME (default h100_schemes_streamed_ring): the results' name; the test
# log, NAME.json and NAME.md go to $OUT (default ./sst_out) as well as
# benchmarks/results/.
set -e
ROOT=$(cd "$(dirname "$0")/.." && pwd)
NAME=${1:-h100_schemes_streamed_ring}
OUT=${OUT:-$ROOT/sst_out}
PYTHON=${PYTHON:-python}
mkdir -p "$OUT"
cd "$ROOT"
{
    echo "# $(git rev-parse --short HEAD 2>/dev/null || echo '?') $(date -u +%FT%TZ)"
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
} > "$OUT/provenance.txt"
# from /tmp: the installed package, not src/ (which holds no build); no
# timings when a test fails
rc=0
(cd /tmp && "$PYTHON" -m pytest -q "$ROOT/tests/test_gpu_small_schemes.py" \
    "$ROOT/tests/test_gpu_schemes.py" -x) > "$OUT/tests.txt" 2>&1 || rc=$?
tail -n 3 "$OUT/tests.txt"
[ "$rc" -eq 0 ] || exit "$rc"
"$PYTHON" benchmarks/bench_schemes.py --steps 48 --repeat 7 \
    --blocks nostream,stream2,stream4 \
    --presets wave2d,wave2d-velocity,gray-scott2d --save "$NAME" \
    > "$OUT/bench.txt" 2>&1 || rc=$?
cat "$OUT/bench.txt"
[ "$rc" -eq 0 ] || exit "$rc"
cp "benchmarks/results/$NAME.json" "benchmarks/results/$NAME.md" "$OUT/"
