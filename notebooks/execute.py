"""Run every notebook here top to bottom and save it with its outputs.

    python notebooks/execute.py [NAME.ipynb ...]

Needs the `notebooks` extra.  On a machine with a usable GPU the
notebooks pick their GPU sizes (and CuPy arrays where CuPy is present),
and say which device ran them.
"""
import glob
import os
import sys
import time

import nbformat
from nbclient import NotebookClient

HERE = os.path.dirname(os.path.abspath(__file__))


def main(paths):
    for path in paths or sorted(glob.glob(os.path.join(HERE, "*.ipynb"))):
        nb = nbformat.read(path, as_version=4)
        t0 = time.perf_counter()
        NotebookClient(nb, timeout=600, kernel_name="python3",
                       resources={"metadata": {"path": HERE}}).execute()
        nbformat.write(nb, path)
        print("%-28s %6.1f s  %7.0f kB" % (
            os.path.basename(path), time.perf_counter() - t0,
            os.path.getsize(path) / 1024), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
