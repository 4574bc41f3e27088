"""Shared pieces of the benchmark harnesses: provenance and result files."""
import datetime
import json
import os
import platform
import re
import signal
import subprocess
import sys
import time

import numpy as np

import convstencil as cs

# $CONVSTENCIL_RESULTS_DIR redirects the result files (run_all.py --outdir)
RESULTS = (os.environ.get("CONVSTENCIL_RESULTS_DIR")
           or os.path.join(os.path.dirname(os.path.abspath(__file__)),
                           "results"))
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Problem sizes of the paper's CPU comparison (issue: 2D 4096^2, 3D 256^3,
# 1D 2^24 points).
CPU_SIZES = {1: (1 << 24,), 2: (4096, 4096), 3: (256, 256, 256)}
# Small grids for a smoke check of the harness (--quick), not for figures.
QUICK_CPU_SIZES = {1: (1 << 16,), 2: (256, 256), 3: (32, 32, 32)}
# The GPU step-loop benchmarks' grids (bench_explain, bench_modes): sizes
# that fill the H100, as the figures use.
GPU_SIZES = {1: (1 << 27,), 2: (10240, 10240), 3: (512, 512, 512)}


# The seed of a "randomKxK" kernel's weights (kernel_of).
RANDOM_SEED = 7


def kernel_of(name):
    """(weights, what a record calls them) of a preset or "randomKxK": a
    full-rank K x K kernel of random positive weights summing to 1 (seed
    RANDOM_SEED), named in records as `kernel` "random KxK" with its
    `seed`, not as a preset."""
    m = re.fullmatch(r"random(\d+)x\1", name)
    if m is None:
        return cs.Stencil(name).weights, dict(preset=name)
    k = int(m.group(1))
    w = np.random.default_rng(RANDOM_SEED).uniform(0.1, 1.0, (k, k))
    w /= w.sum()
    assert np.linalg.matrix_rank(w) == k
    return w, dict(kernel="random %dx%d" % (k, k), seed=RANDOM_SEED)


def stencil_name(record):
    """The name kernel_of took for a record: its preset, or "randomKxK"
    for its kernel "random KxK"."""
    return record.get("preset") or record["kernel"].replace(" ", "")


def median_wall(run, repeat, each=None):
    """Median wall seconds of run() after one warm-up call (every time
    appended to `each` when given)."""
    run()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    if each is not None:
        each.extend(times)
    return float(np.median(times))


def interleaved_batches(runs, repeat, calls, sync):
    """Wall seconds per call of each of `runs` (a dict of functions), in
    batches of `calls` calls taken in turn `repeat` times, after one call
    of each; sync() (e.g. a stream's synchronize) after each batch, out
    of its time: a drift of the host's speed meets every run alike.
    Returns key -> the batches' seconds per call."""
    per = {key: [] for key in runs}
    for run in runs.values():
        run()
    sync()
    for _ in range(repeat):
        for key, run in runs.items():
            t0 = time.perf_counter()
            for _ in range(calls):
                run()
            per[key].append((time.perf_counter() - t0) / calls)
            sync()
    return per


def median_step_loop(run, repeat):
    """Median step-loop device seconds (last_run_info()) of `repeat`
    calls of run(), after one call that warms the engine up (its
    arenas, lanes and plans); and the last call's run info."""
    run()
    seconds = []
    for _ in range(repeat):
        run()
        seconds.append(cs.last_run_info()["device_seconds"])
    return float(np.median(seconds)), cs.last_run_info()


def scheme_call_seconds(scheme, grids, params, outs, steps, repeat):
    """Wall seconds of `repeat` calls of apply(grids, scheme, steps=...,
    params=..., out=outs, backend="cpu"), after one that warms the engine
    up (its workspace and team), and the last call's run info."""
    cs.apply(grids, scheme, steps=steps, params=params, out=outs,
             backend="cpu")
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        cs.apply(grids, scheme, steps=steps, params=params, out=outs,
                 backend="cpu")
        times.append(time.perf_counter() - t)
    return times, cs.last_run_info()


def markdown_head(title, prov, text, columns):
    """A results file's first lines: title, provenance, what the table
    holds, and the table's header for `columns`."""
    return ["# " + title, "", provenance_sentence(prov), "", text, "",
            "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]


def commit():
    """The checkout's commit (-dirty with uncommitted changes), or
    $CONVSTENCIL_COMMIT where the tree was copied without its history."""
    if os.environ.get("CONVSTENCIL_COMMIT"):
        return os.environ["CONVSTENCIL_COMMIT"]
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, check=True,
                             cwd=ROOT)
        dirty = subprocess.run(["git", "status", "--porcelain",
                                "--untracked-files=no"],
                               capture_output=True, text=True,
                               cwd=ROOT).stdout.strip()
        return out.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def engine_switches():
    """The engine's CONVSTENCIL_* switches set for a run (an MPI launch's
    ranks inherit them), e.g. CONVSTENCIL_SPLIT_BANDS=apart; not the
    harness's own (the commit, the results folder)."""
    return {k: v for k, v in sorted(os.environ.items())
            if k.startswith("CONVSTENCIL_") and k not in (
                "CONVSTENCIL_COMMIT", "CONVSTENCIL_RESULTS_DIR")}


def provenance(device):
    return {"device": device,
            "date": datetime.datetime.now(datetime.timezone.utc)
            .strftime("%Y-%m-%dT%H:%M:%SZ"),
            "commit": commit(),
            "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
            "python": platform.python_version(),
            "numpy": np.__version__,
            "convstencil": cs.__version__}


def provenance_sentence(prov):
    """The results file's first line: device, date, commit, command."""
    return "Device: %s; date %s; commit %s; command `%s`." % (
        prov["device"], prov["date"], prov["commit"], prov["command"])


def parse_shape(text):
    """'512x512x512' -> (512, 512, 512)."""
    return tuple(int(v) for v in text.lower().split("x"))


def device_name():
    """The GPU as nvidia-smi names it."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name",
                              "--format=csv,noheader"], capture_output=True,
                             text=True, check=True, timeout=30)
        return out.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return cs._backends.cuda_device() or "unknown GPU"


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def mpi_version():
    """The MPI library's first line of version text (mpi4py; Open MPI
    ends it with a NUL)."""
    from mpi4py import MPI
    return MPI.Get_library_version().splitlines()[0].strip("\0 \t")


def mpi_results(ranks, script, worker_args, env, timeout):
    """Run `script --worker worker_args` under `mpiexec -n ranks`; the
    records its rank 0 printed as `RESULT <json>` lines (echoed as they
    are read).  A failed run exits, naming the command and what it
    printed last."""
    records, failure = mpi_launch(ranks, script, worker_args, env, timeout)
    if failure:
        sys.exit(failure)
    return records


def mpi_launch(ranks, script, worker_args, env, timeout):
    """(records, failure) of `script --worker worker_args` under `mpiexec
    -n ranks`: the records rank 0 printed as `RESULT <json>` lines
    before it ended or ran past `timeout` seconds (then the job's
    process group is killed), and None or a message naming the command
    and what it printed last."""
    command = (["mpiexec", "-n", str(ranks), sys.executable,
                os.path.abspath(script), "--worker"] + list(worker_args))
    job = subprocess.Popen(command, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True,
                           start_new_session=True)
    try:
        stdout, stderr = job.communicate(timeout=timeout)
        why = "exit status %d" % job.returncode if job.returncode else None
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGKILL)
        stdout, stderr = job.communicate()
        why = "ran past %d s" % timeout
    except BaseException:
        # the job has a session of its own: end it with the driver
        # (Ctrl-C, or SIGTERM where the driver turns it into SystemExit)
        os.killpg(job.pid, signal.SIGKILL)
        raise
    records = []
    for line in stdout.splitlines():
        if line.startswith("RESULT "):
            records.append(json.loads(line[7:]))
            print(line[7:], flush=True)
    failure = None
    if why:
        failure = "%s: %s:\n%s%s" % (" ".join(command), why,
                                      stdout[-4000:], stderr[-4000:])
    return records, failure


def write_results(stem, records, markdown):
    """Write <stem>.json (list of records) and <stem>.md under results/."""
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, stem + ".json"), "w") as f:
        json.dump(records, f, indent=1)
        f.write("\n")
    with open(os.path.join(RESULTS, stem + ".md"), "w") as f:
        f.write(markdown)
    print("wrote %s/%s.{json,md}" % (RESULTS, stem))


def geomean(values):
    values = np.asarray(values, dtype=float)
    return float(np.exp(np.mean(np.log(values))))
