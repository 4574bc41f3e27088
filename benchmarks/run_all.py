"""Regenerate every committed results file for one device in one run.

    python benchmarks/run_all.py [--dry-run] [--only PATTERN,...] [--quick]
        [--outdir DIR] [--prefix NAME] [--gpu]
    benchmarks/run_all.sh ...           (the same)

Runs, from the repository root, the commands that made the files in
benchmarks/results/ (benchmarks/README.md lists them): the CPU benchmark
always, the GPU ones when a CUDA device is usable (and the profiler and
sanitizer runs when `ncu` and `compute-sanitizer` are on PATH).  GPU
files are named for the device: "NVIDIA H100 80GB HBM3" -> h100_*,
"NVIDIA H200" -> h200_* (--prefix overrides).

--dry-run prints the commands without running them; --only keeps the
jobs whose name or output file matches one of the comma-separated shell
patterns (`--only cpu`, `--only 2d,e2e`, `--only '3d*'`,
`--only h100_3d_paths.md`); --list-like use: `--dry-run --gpu`; --quick runs every
benchmark on small grids as a smoke check of the harness (its figures
mean nothing: the files go to a temporary folder unless --outdir says
where) and skips the test, profiler and sanitizer runs.  A job that fails
is reported and the others still run; the exit status is 1 if any failed.
"""
import argparse
import datetime
import fnmatch
import glob
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results")

# The counters of h100_ncu_tc2d (benchmarks/ncu_table.py reads them).
sys.path.insert(0, HERE)
from ncu_table import METRICS  # noqa: E402

BENCH_GPU_QUICK = ["--size1d", "1048576", "--odd1d", "", "--size2d",
                   "1024x1024", "--odd2d", "", "--size3d", "64x64x64",
                   "--odd3d", "", "--min-seconds", "0.05", "--repeat", "1"]
SMALL3D_QUICK = ["--size", "64x64x64", "--min-seconds", "0.05",
                 "--repeat", "1"]
# bench_depth.py's grids by dimension (bench_gpu.py options after "--":
# no odd grid), and their --quick sizes
DEPTH_GRIDS = {1: ["--size1d", "134217728", "--odd1d", ""],
               2: ["--odd2d", ""], 3: ["--odd3d", ""]}
DEPTH_QUICK = {1: ["--size1d", "1048576", "--min-seconds", "0.05"],
               2: ["--size2d", "1024x1024", "--min-seconds", "0.05"],
               3: ["--size3d", "64x64x64", "--min-seconds", "0.05"]}


class Job:
    """One command and the results files it writes.

    needs: "cpu" (always runs), "gpu", "ncu" or "sanitizer".
    capture: write the command's output to outputs[0] behind a header of
    its command, device, date and commit (the .txt logs)."""

    def __init__(self, name, outputs, argv, needs="gpu", env=None,
                 quick=None, capture=False, then=None):
        self.name, self.outputs, self.argv = name, outputs, argv
        self.needs, self.env, self.capture = needs, env or {}, capture
        self.quick = quick      # extra arguments under --quick; None: skip
        self.then = then        # a second command run after this one


def resolve(argv):
    """The argv to run: "python" is the interpreter running this script
    (the files record the command as "python ...", as a user types it)."""
    return [sys.executable if a == "python" else a for a in argv]


def depth_job(prefix, key, presets, ndim, system=None, depths=None):
    """bench_depth.py on `presets` (of ndim dimensions), one system at the
    given depths or every system at its defaults, into prefix_key."""
    name = prefix + "_" + key
    argv = ["python", "benchmarks/bench_depth.py", "--presets", presets]
    if system:
        argv += ["--system", system, "--depths", depths]
    argv += (["--save", name, "--"] + DEPTH_GRIDS[ndim]
             + ["--no-baselines", "--repeat", "3"])
    return Job(key, [name + ".json", name + ".md"], argv,
               quick=DEPTH_QUICK[ndim])


def jobs(prefix):
    py = "python"
    p = prefix
    gpu = [py, "benchmarks/bench_gpu.py"]
    cudacore = "convstencil-cudacore"
    out = [
        Job("cpu", ["cpu.json", "cpu.md"],
            [py, "benchmarks/bench_cpu.py", "--save"], needs="cpu",
            quick=["--quick", "--repeat", "1", "--steps", "2"]),
        Job("cpu_distributed", ["cpu_distributed.json", "cpu_distributed.md"],
            [py, "benchmarks/bench_distributed.py", "--ranks", "1", "2",
             "--repeat", "5", "--save", "cpu_distributed"], needs="cpu"),
        Job("1d", [p + "_1d.json", p + "_1d.md"],
            gpu + ["--presets", "heat1d,1d5p", "--save", p + "_1d"],
            quick=BENCH_GPU_QUICK),
        Job("2d", [p + "_2d.json", p + "_2d.md"],
            gpu + ["--presets", "heat2d,box2d9p,star2d13p,box2d49p",
                   "--save", p + "_2d"], quick=BENCH_GPU_QUICK),
        Job("2d_tb2d", [p + "_2d_tb2d.json", p + "_2d_tb2d.md"],
            gpu + ["--presets",
                   "heat2d,box2d9p,star2d13p,box2d49p,random7x7,random5x5",
                   "--repeat", "3", "--save", p + "_2d_tb2d"],
            quick=BENCH_GPU_QUICK),
        depth_job(p, "2d_tb2d_depth", "star2d13p", 2, cudacore, "1,2,3,4"),
        depth_job(p, "2d_tb2d_depth_outer", "box2d49p", 2, cudacore,
                  "1,2,3"),
        depth_job(p, "2d_tb2d_depth_box", "random7x7,random5x5", 2, cudacore,
                  "1,2,3,4"),
        Job("3d", [p + "_3d.json", p + "_3d.md"],
            gpu + ["--presets", "heat3d,box3d27p", "--repeat", "3",
                   "--save", p + "_3d"],
            quick=BENCH_GPU_QUICK),
        depth_job(p, "3d_tb3d_depth", "heat3d,box3d27p", 3, cudacore,
                  "1,2,3"),
        depth_job(p, "1d_depth", "heat1d", 1),
        depth_job(p, "3d_depth", "heat3d,box3d27p", 3),
        Job("3d_depth_cuda_core",
            [p + "_3d_depth_cuda_core.json", p + "_3d_depth_cuda_core.md"],
            [py, "benchmarks/bench_fusion_3d.py", "--save",
             p + "_3d_depth_cuda_core"], quick=SMALL3D_QUICK),
        Job("3d_paths", [p + "_3d_paths.json", p + "_3d_paths.md"],
            [py, "benchmarks/bench_paths_3d.py", "--save", p + "_3d_paths"],
            quick=SMALL3D_QUICK),
        Job("e2e", [p + "_e2e.json", p + "_e2e.md"],
            [py, "benchmarks/bench_e2e.py", "--small", "--repeat", "5",
             "--save", p + "_e2e"],
            quick=["--presets", "heat2d", "--steps", "10", "--repeat", "1"]),
        Job("tb2d_segments",
            [p + "_tb2d_segments.json", p + "_tb2d_segments.md"],
            [py, "benchmarks/bench_segments.py", "--repeat", "3",
             "--save", p + "_tb2d_segments"],
            quick=["--shapes", "1024x1024", "--counts", "8,64",
                   "--repeat", "1"]),
        Job("explain", [p + "_explain.json", p + "_explain.md"],
            [py, "benchmarks/bench_explain.py", "--repeat", "5", "--save",
             p + "_explain"], quick=["--repeat", "1", "--steps", "10"]),
        Job("modes", [p + "_modes.json", p + "_modes.md"],
            [py, "benchmarks/bench_modes.py", "--repeat", "5", "--save",
             p + "_modes"], quick=["--repeat", "1", "--presets",
                                   "heat2d,heat3d"]),
        Job("distributed_gpu",
            [p + "_distributed.json", p + "_distributed.md"],
            [py, "benchmarks/bench_distributed.py", "--gpu", "--ranks", "1",
             "--save", p + "_distributed"]),
        Job("gpu_tests", [p + "_gpu_tests.txt"],
            [py, "-m", "pytest", "tests", "-q", "-m", "gpu",
             "-p", "no:cacheprovider"], capture=True),
        Job("sanitize_memcheck", [p + "_sanitize_memcheck.txt"],
            ["compute-sanitizer", "--tool", "memcheck", "--error-exitcode",
             "1", py, "tests/gpu_sanitize_cases.py"], needs="sanitizer",
            capture=True),
        Job("sanitize_racecheck", [p + "_sanitize_racecheck.txt"],
            ["compute-sanitizer", "--tool", "racecheck", "--error-exitcode",
             "1", py, "tests/gpu_sanitize_cases.py"], needs="sanitizer",
            capture=True),
    ]
    ncu_cmd = ["ncu", "--kernel-name", "regex:tc[123]d", "--launch-count",
               "2", "--metrics", ",".join(METRICS), "--csv", py,
               "benchmarks/profile_cases.py", "--presets", "heat2d,box2d49p",
               "--backends", "cuda-tc", "--size", "8192x8192", "--steps", "3"]
    ncu = Job("ncu_tc2d", [p + "_ncu_tc2d.csv", p + "_ncu_tc2d.md"],
              ncu_cmd, needs="ncu", capture=True)
    ncu.then = [py, "benchmarks/ncu_table.py", "{outdir}/%s_ncu_tc2d.csv" % p,
                "--device", "{device}", "--date", "{date}", "--commit",
                "{commit}", "--command", " ".join(map(quote, ncu_cmd)),
                "--save", p + "_ncu_tc2d"]
    out.append(ncu)
    return out


def quote(arg):
    return shlex.quote(arg) if arg else "''"


def device_prefix(name):
    """'NVIDIA H100 80GB HBM3' -> 'h100', 'NVIDIA H200' -> 'h200',
    'NVIDIA GeForce RTX 4090' -> 'rtx4090', 'NVIDIA A100-SXM4-80GB' ->
    'a100'."""
    words = [w for w in re.split(r"[\s_]+", name)
             if w and w.lower() not in ("nvidia", "geforce", "tesla")]
    if not words:
        return "gpu"
    first = words[0].split("-")[0]
    if first.isalpha() and len(words) > 1:   # "RTX 4090", "Quadro RTX"
        first += words[1].split("-")[0]
    return re.sub(r"[^a-z0-9]", "", first.lower()) or "gpu"


def gpu_name():
    """The first GPU's name, or None where no CUDA device is usable by the
    package."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name",
                              "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=60)
        names = out.stdout.strip().splitlines()
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0 or not names:
        return None
    check = subprocess.run(
        [sys.executable, "-c", "import convstencil as cs; "
         "print(cs.backends().get('cuda'))"],
        capture_output=True, text=True, cwd=ROOT)
    if check.stdout.strip() != "available":
        print("a GPU is present but the package's CUDA backend is not: %s%s"
              % (check.stdout.strip(), check.stderr.strip()[-300:]))
        return None
    return names[0].strip()


def package_env():
    """PYTHONPATH for the jobs: the checkout first when it holds an
    in-place build (python setup.py build_ext --inplace), so that the
    commit the files record is the code they measure."""
    src = os.path.join(ROOT, "src")
    if not glob.glob(os.path.join(src, "convstencil", "_core*")):
        return {}
    path = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": src + (os.pathsep + path if path else "")}


def git_commit():
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, cwd=ROOT,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain",
                                "--untracked-files=no"], capture_output=True,
                               text=True, cwd=ROOT).stdout.strip()
        return head + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return os.environ.get("CONVSTENCIL_COMMIT", "unknown")


def shown(argv, env):
    return " ".join(["%s=%s" % kv for kv in sorted(env.items())]
                    + [quote(a) for a in argv])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--only", default="")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--outdir", default="")
    ap.add_argument("--prefix", default="",
                    help="file prefix of the GPU results (default: from the "
                         "device name)")
    ap.add_argument("--gpu", action="store_true",
                    help="with --dry-run: list the GPU jobs even where no "
                         "GPU is present")
    args = ap.parse_args()

    device = gpu_name()
    has = {"cpu": True, "gpu": device is not None,
           "ncu": device is not None and shutil.which("ncu") is not None,
           "sanitizer": device is not None
           and shutil.which("compute-sanitizer") is not None}
    if args.dry_run and args.gpu:
        has = dict.fromkeys(has, True)
    prefix = args.prefix or (device_prefix(device) if device else "h100")
    outdir = os.path.abspath(args.outdir) if args.outdir else (
        tempfile.mkdtemp(prefix="convstencil-quick-") if args.quick
        and not args.dry_run else RESULTS)
    os.makedirs(outdir, exist_ok=True)
    commit = git_commit()
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    print("device: %s; prefix %s; commit %s; results into %s%s"
          % (device or "no CUDA device (CPU jobs only)", prefix, commit,
             outdir, " (quick: small grids)" if args.quick else ""))

    patterns = [p for p in args.only.split(",") if p]
    failed, ran = [], 0
    for job in jobs(prefix):
        if patterns and not any(fnmatch.fnmatch(n, p) for p in patterns
                                for n in [job.name] + job.outputs):
            continue
        if not has[job.needs]:
            print("skip %-20s (needs %s)" % (job.name, job.needs))
            continue
        if args.quick and job.quick is None:
            print("skip %-20s (not under --quick)" % job.name)
            continue
        argv = job.argv + (job.quick if args.quick else [])
        # (the depth sweeps' quick options follow their "--": bench_gpu.py's)
        env = dict(job.env, **package_env())
        if outdir != RESULTS:
            env["CONVSTENCIL_RESULTS_DIR"] = outdir
        line = shown(argv, env)
        if job.capture:
            line += " > %s" % os.path.join(outdir, job.outputs[0])
        print("\n== %s -> %s\n%s" % (job.name, ", ".join(job.outputs), line),
              flush=True)
        subst = {"outdir": outdir, "device": device or "", "date": date,
                 "commit": commit}
        then = [a.format(**subst) for a in job.then] if job.then else None
        if then:
            print(shown(then, env), flush=True)
        if args.dry_run:
            continue
        ran += 1
        rc = run(job, argv, env, outdir, device, date, commit)
        if rc == 0 and then:
            rc = subprocess.run(resolve(then), cwd=ROOT,
                                env=dict(os.environ, **env)).returncode
        if rc != 0:
            print("!! %s failed (exit status %d)" % (job.name, rc),
                  flush=True)
            failed.append(job.name)
    if not args.dry_run:
        print("\n%d jobs run, results in %s; %s" % (
            ran, outdir, "failed: " + ", ".join(failed) if failed
            else "all succeeded"))
    return 1 if failed else 0


def run(job, argv, env, outdir, device, date, commit):
    full_env = dict(os.environ, **env)
    if not job.capture:
        return subprocess.run(resolve(argv), cwd=ROOT,
                              env=full_env).returncode
    path = os.path.join(outdir, job.outputs[0])
    proc = subprocess.run(resolve(argv), cwd=ROOT, env=full_env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    with open(path, "w") as f:
        if not job.outputs[0].endswith(".csv"):
            f.write("# %s\n# device: %s; date: %s; commit: %s\n"
                    % (" ".join(quote(a) for a in argv), device, date,
                       commit))
        f.write(proc.stdout)
    print(proc.stdout[-3000:], flush=True)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
