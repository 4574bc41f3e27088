"""The source distribution carries what its tests need, and they run.

Builds the sdist (without build isolation or the wheel's build
requirements: only setuptools is needed for it), unpacks it, checks that the engine's sources, the test fixtures and
the CUDA emulation harness are in it, and runs one test module from the
unpacked tree against the installed package.
"""
import os
import subprocess
import sys
import tarfile

import pytest

import convstencil as cs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NEEDED = ["LICENSE", "README.md", "pyproject.toml", "setup.py",
          "csrc/module.c", "csrc/host_copy.c", "csrc/dlpack_glue.c",
          "csrc/cuda/engine.cu", "csrc/cuda/convert.cuh",
          "tests/conftest.py", "tests/reference.py",
          "tests/test_reference.py", "tests/cuda_emu/run.sh",
          "tests/cuda_emu/emu.cpp", "notebooks/01_quickstart.ipynb",
          "docs/USER_GUIDE.md"]


@pytest.fixture(scope="module")
def unpacked(tmp_path_factory):
    pytest.importorskip("build")
    pytest.importorskip("setuptools")
    if not os.path.exists(os.path.join(ROOT, "pyproject.toml")):
        pytest.skip("not a source checkout")
    out = tmp_path_factory.mktemp("sdist")
    # an sdist needs setuptools only: not the wheel build's requirements
    run = subprocess.run([sys.executable, "-m", "build", "--sdist",
                          "--no-isolation", "--skip-dependency-check",
                          "--outdir", str(out), ROOT],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    (archive,) = [f for f in os.listdir(out) if f.endswith(".tar.gz")]
    with tarfile.open(os.path.join(out, archive)) as tar:
        tar.extractall(out)
    return os.path.join(out, archive[:-len(".tar.gz")])


def test_sdist_carries_what_the_tests_need(unpacked):
    missing = [p for p in NEEDED
               if not os.path.exists(os.path.join(unpacked, p))]
    assert not missing


def test_a_test_module_runs_from_the_sdist(unpacked, tmp_path):
    # the installed (or in-place built) package these tests import
    root = os.path.dirname(os.path.dirname(os.path.abspath(cs.__file__)))
    env = dict(os.environ, PYTHONPATH=root)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         os.path.join(unpacked, "tests", "test_reference.py")],
        cwd=str(tmp_path), env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert " passed" in run.stdout
