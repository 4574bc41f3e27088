"""The Markdown table of an Nsight Compute CSV of tc2d's memory counters.

Reads what

    ncu --kernel-name regex:"tc[123]d" --launch-count 2 --metrics <METRICS>
        --csv python benchmarks/profile_cases.py --presets heat2d,box2d49p
        --backends cuda-tc --size 8192x8192 --steps 3

printed (the profiled program's own lines first, then the CSV; METRICS
below) and writes the counters of the first profiled launch with the
ratios that show bank conflicts and coalescing:

    python benchmarks/ncu_table.py results/h100_ncu_tc2d.csv
        --device ... --date ... --commit ... --command ... --save h100_ncu_tc2d
"""
import argparse
import csv
import os

RESULTS = (os.environ.get("CONVSTENCIL_RESULTS_DIR")
           or os.path.join(os.path.dirname(os.path.abspath(__file__)),
                           "results"))

METRICS = [
    "smsp__inst_executed_op_shared_ld.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
    "smsp__inst_executed_op_shared_st.sum",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum",
    "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
    "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum",
    "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum",
    "gpu__time_duration.sum",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
]


def read_counters(path):
    """(kernel name, {metric: float}) of the first profiled launch."""
    with open(path) as f:
        lines = f.read().splitlines()
    start = next((i for i, line in enumerate(lines)
                  if line.startswith('"ID",')), None)
    if start is None:
        raise SystemExit("%s: no Nsight Compute CSV header" % path)
    rows = list(csv.DictReader(lines[start:]))
    first = [r for r in rows if r["ID"] == rows[0]["ID"]]
    values = {r["Metric Name"]: float(r["Metric Value"].replace(",", ""))
              for r in first}
    missing = [m for m in METRICS if m not in values]
    if missing:
        raise SystemExit("%s: missing counters %s" % (path, missing))
    return first[0]["Kernel Name"], values


def table(values):
    v = values

    def n(x):
        return "{:,.0f}".format(x)
    lds, ldw, ldc = (v["smsp__inst_executed_op_shared_ld.sum"],
                     v["l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum"],
                     v["l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld"
                       ".sum"])
    sts, stw, stc = (v["smsp__inst_executed_op_shared_st.sum"],
                     v["l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum"],
                     v["l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st"
                       ".sum"])
    gls, glr = (v["l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum"],
                v["l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"])
    gss, gsr = (v["l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum"],
                v["l1tex__t_requests_pipe_lsu_mem_global_op_st.sum"])
    rows = [
        ("shared load instructions", n(lds), ""),
        ("shared load wavefronts", n(ldw),
         "%.2f per instruction (a warp's 32 doubles need 2)" % (ldw / lds)),
        ("shared load bank conflicts", n(ldc),
         "%.1f%% of the wavefronts" % (100 * ldc / ldw)),
        ("shared store instructions", n(sts), ""),
        ("shared store wavefronts", n(stw),
         "%.2f per instruction (minimum 2)" % (stw / sts)),
        ("shared store bank conflicts", n(stc),
         "%.1f%% of the wavefronts" % (100 * stc / stw)),
        ("global load sectors / requests", "%s / %s" % (n(gls), n(glr)),
         "%.1f sectors per request" % (gls / glr)),
        ("global store sectors / requests", "%s / %s" % (n(gss), n(gsr)),
         "%.1f sectors per request" % (gss / gsr)),
        ("duration", "%.0f us (profiler clocks)"
         % (v["gpu__time_duration.sum"] / 1e3), ""),
        ("DRAM throughput", "%.0f%% of peak" % v[
            "dram__throughput.avg.pct_of_peak_sustained_elapsed"], ""),
        ("SM throughput", "%.0f%% of peak" % v[
            "sm__throughput.avg.pct_of_peak_sustained_elapsed"], ""),
    ]
    return "\n".join(["| counter | value | ratio |", "|---|---|---|"]
                     + ["| %s | %s | %s |" % r for r in rows])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--device", required=True)
    ap.add_argument("--date", required=True)
    ap.add_argument("--commit", required=True)
    ap.add_argument("--command", required=True,
                    help="the ncu command that wrote the CSV")
    ap.add_argument("--save", default="",
                    help="write benchmarks/results/<SAVE>.md")
    args = ap.parse_args()
    kernel, values = read_counters(args.csv)
    md = ("# Nsight Compute counters of tc2d\n\n- device: %s\n- date: %s\n"
          "- commit: %s\n- command: `%s`\n- raw output: `%s` (the first "
          "profiled launch: `%s`)\n- table: `python benchmarks/ncu_table.py "
          "%s ...`\n\n%s\n"
          % (args.device, args.date, args.commit, args.command,
             os.path.basename(args.csv), kernel, os.path.basename(args.csv),
             table(values)))
    print(md)
    if args.save:
        path = os.path.join(RESULTS, args.save + ".md")
        with open(path, "w") as f:
            f.write(md)
        print("wrote", path)


if __name__ == "__main__":
    main()
