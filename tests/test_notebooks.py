"""The notebooks in notebooks/: committed with their outputs, light, and
running top to bottom here.

The static checks need nothing but the standard library; executing the
notebooks needs the `notebooks` extra (nbclient, ipykernel, matplotlib)
and is skipped without it.  The kernel imports the same convstencil as
these tests.
"""
import json
import os

import pytest

import convstencil as cs

HERE = os.path.dirname(os.path.abspath(__file__))
NOTEBOOKS = os.path.join(os.path.dirname(HERE), "notebooks")
NAMES = ["01_quickstart", "02_heat_equation", "03_wave_equation",
         "04_image_and_3d", "05_performance", "06_reaction_diffusion"]
MAX_BYTES = 2 << 20
CELL_TIMEOUT = 300


def path_of(name):
    return os.path.join(NOTEBOOKS, name + ".ipynb")


def test_every_notebook_is_there():
    found = sorted(f[:-6] for f in os.listdir(NOTEBOOKS)
                   if f.endswith(".ipynb"))
    assert found == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_committed_with_pictures_and_no_errors(name):
    path = path_of(name)
    assert os.path.getsize(path) < MAX_BYTES
    with open(path) as f:
        nb = json.load(f)
    outputs = [o for c in nb["cells"] if c["cell_type"] == "code"
               for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert any("image/png" in o.get("data", {}) for o in outputs)
    # every code cell ran, in order
    counts = [c.get("execution_count") for c in nb["cells"]
              if c["cell_type"] == "code"]
    assert counts == list(range(1, len(counts) + 1))


@pytest.mark.parametrize("name", NAMES)
def test_runs_top_to_bottom(name, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("matplotlib")
    pytest.importorskip("ipykernel")
    # the kernel imports the package these tests import
    root = os.path.dirname(os.path.dirname(os.path.abspath(cs.__file__)))
    monkeypatch.setenv("PYTHONPATH", root + os.pathsep
                       + os.environ.get("PYTHONPATH", ""))
    nb = nbformat.read(path_of(name), as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=CELL_TIMEOUT, kernel_name="python3",
        resources={"metadata": {"path": NOTEBOOKS}})
    client.execute()  # raises CellExecutionError on any error
    images = [o for c in nb.cells if c.cell_type == "code"
              for o in c.outputs if "image/png" in o.get("data", {})]
    assert images


def _execute_py(*args):
    import subprocess
    import sys
    return subprocess.run([sys.executable, os.path.join(NOTEBOOKS,
                                                        "execute.py")]
                          + list(args), capture_output=True, text=True)


def test_execute_py_has_a_command_line():
    run = _execute_py("--help")
    assert run.returncode == 0 and "--check" in run.stdout
    run = _execute_py("--list")
    assert run.returncode == 0
    assert run.stdout.split() == [n + ".ipynb" for n in NAMES]
    run = _execute_py("99")
    assert run.returncode != 0 and "no notebook '99'" in run.stderr
