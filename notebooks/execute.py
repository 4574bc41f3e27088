"""Run the notebooks here top to bottom and save them with their outputs.

    python notebooks/execute.py                  # every notebook
    python notebooks/execute.py 03 06            # by number or name
    python notebooks/execute.py --list           # what is here
    python notebooks/execute.py --check 01       # run, do not save

Needs the `notebooks` extra (pip install ".[notebooks]").  On a machine
with a usable GPU the notebooks pick their GPU sizes (and CuPy arrays
where CuPy is present), and say which device ran them.
"""
import argparse
import glob
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def notebooks():
    """The notebooks in this folder, in order."""
    return sorted(glob.glob(os.path.join(HERE, "*.ipynb")))


def resolve(names):
    """Paths of the notebooks `names` pick (a number such as 03, a name
    with or without .ipynb, or a path); every notebook for none."""
    found = notebooks()
    if not names:
        return found
    picked = []
    for name in names:
        if os.path.isfile(name):
            picked.append(os.path.abspath(name))
            continue
        stem = os.path.basename(name)
        stem = stem[:-6] if stem.endswith(".ipynb") else stem
        matches = [p for p in found
                   if os.path.basename(p)[:-6] == stem
                   or os.path.basename(p).split("_")[0] == stem]
        if len(matches) != 1:
            raise SystemExit("no notebook %r here; these are: %s" % (
                name, ", ".join(os.path.basename(p) for p in found)))
        picked.append(matches[0])
    return picked


def execute(path, timeout, save):
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    t0 = time.perf_counter()
    NotebookClient(nb, timeout=timeout, kernel_name="python3",
                   resources={"metadata": {"path": HERE}}).execute()
    if save:
        nbformat.write(nb, path)
    print("%-28s %6.1f s  %7.0f kB" % (
        os.path.basename(path), time.perf_counter() - t0,
        os.path.getsize(path) / 1024), flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(
        description="Run the notebooks top to bottom and save their "
                    "outputs (the `notebooks` extra is needed).")
    parser.add_argument("names", nargs="*",
                        help="notebooks by number (03), name or path; "
                             "default: all")
    parser.add_argument("--list", action="store_true",
                        help="list the notebooks and exit")
    parser.add_argument("--check", action="store_true",
                        help="run them without saving the outputs")
    parser.add_argument("--timeout", type=int, default=600,
                        help="seconds a cell may take (default 600)")
    args = parser.parse_args(argv)
    if args.list:
        for path in notebooks():
            print(os.path.basename(path))
        return 0
    for path in resolve(args.names):
        execute(path, args.timeout, not args.check)
    return 0


if __name__ == "__main__":
    sys.exit(main())
