#!/usr/bin/env bash
# An Nsight Systems timeline of one scaling case of bench_multigpu.py on
# several GPUs of this host (default: weak heat3d 512^3 per GPU, 300
# steps, 2 GPUs): plain convstencil.apply on each GPU's block, then the
# distributed apply at the cost model's k, each run twice after a
# warm-up (no sweep).
#
#     bash benchmarks/profile_multigpu.sh OUTDIR [CASE [GPUS]]
#     bash benchmarks/profile_multigpu.sh prof weak:heat2d:10240x10240:600 2
#
# Writes to OUTDIR: NAME.nsys-rep (open it in the Nsight Systems GUI),
# NAME.log (the bench's records), and text to commit: NAME_<report>.txt
# of `nsys stats` (kernels, CUDA API calls, memory operations, NVTX
# ranges) and NAME_rounds.txt (nsys_rounds.py on the GPU trace: each
# round's exchange, engine kernels, copies and idle gaps per GPU).
# convstencil emits no NVTX ranges of its own; the bench marks each run
# where the nvtx package, CuPy or libnvToolsExt is found, and NCCL marks
# its calls.  Without nsys on PATH it says so and exits 0.
set -u
out=${1:?usage: profile_multigpu.sh OUTDIR [KIND:PRESET:EXTENT:STEPS [GPUS]]}
case=${2:-weak:heat3d:512x512x512:300}
gpus=${3:-2}
python=${PYTHON:-python}
here=$(cd "$(dirname "$0")" && pwd)

if ! command -v nsys > /dev/null; then
    echo "nsys is not on PATH: no profile taken"
    exit 0
fi
mkdir -p "$out"
name=$(echo "$case" | cut -d: -f1,2 | tr : _)_${gpus}gpu
rep="$out/$name.nsys-rep"
export NCCL_NVLS_ENABLE=0
nsys --version

# One report holding every rank: nsys follows mpiexec's children.
nsys profile --trace=cuda,nvtx --sample=none --cpuctxsw=none \
    --force-overwrite=true --output "$out/$name" \
    mpiexec -n "$gpus" "$python" "$here/bench_multigpu.py" --worker \
    --case "$case" --sweep --repeat 2 > "$out/$name.log" 2>&1
status=$?
echo "nsys profile: exit status $status (log: $out/$name.log)"
[ -f "$rep" ] || exit "$status"

# A report under its current name, else its name before nsys 2023.
stats() {  # stats NEW_NAME OLD_NAME FORMAT EXTENSION
    local file="$out/${name}_$1.$4"
    nsys stats --report "$1" --format "$3" "$rep" > "$file" 2> "$file.err" \
        || nsys stats --report "$2" --format "$3" "$rep" > "$file" \
            2> "$file.err" \
        || echo "nsys stats --report $1 (or $2) failed: $file.err"
    [ -s "$file.err" ] || rm -f "$file.err"
}
stats cuda_gpu_kern_sum gpukernsum column txt
stats cuda_api_sum cudaapisum column txt
stats cuda_gpu_mem_time_sum gpumemtimesum column txt
stats nvtx_sum nvtxsum column txt
stats cuda_gpu_trace gputrace csv csv
"$python" "$here/nsys_rounds.py" "$out/${name}_cuda_gpu_trace.csv" \
    > "$out/${name}_rounds.txt" \
    || echo "nsys_rounds.py failed (see $out/${name}_rounds.txt)"
ls -l "$out"
exit "$status"
