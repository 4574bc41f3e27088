"""The build's choice of GPU architectures (build_tools/cuda_arch.py, used
by setup.py): CONVSTENCIL_CUDA_ARCH as a list, the driver's GPUs through
a fake nvidia-smi, the default set for a machine with none, and the nvcc
flags that follow."""
import importlib.util
import os
import stat

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load():
    path = os.path.join(ROOT, "build_tools", "cuda_arch.py")
    spec = importlib.util.spec_from_file_location("cuda_arch", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


cuda_arch = load()


def fake_smi(tmp_path, monkeypatch, body):
    """A nvidia-smi on PATH that runs `body` (sh)."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\n" + body + "\n")
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", str(tmp_path))


@pytest.mark.parametrize("text, want", [
    ("sm_90", ["90"]), ("sm_80,sm_90", ["80", "90"]), ("90 80", ["80", "90"]),
    ("8.0;9.0", ["80", "90"]), ("compute_90, sm_90", ["90"]),
    (" sm_86 ", ["86"]), ("sm_100,10.0,sm_90", ["90", "100"]),
    ("sm_70", None), ("7.5", None), ("", None), ("hopper", None),
    ("sm_9", None)])
def test_parse(text, want):
    if want is None:
        with pytest.raises(ValueError, match="CONVSTENCIL_CUDA_ARCH"):
            cuda_arch.parse(text)
    else:
        assert cuda_arch.parse(text) == want


def test_the_variable_wins(tmp_path, monkeypatch):
    fake_smi(tmp_path, monkeypatch, "echo 9.0")
    archs, why = cuda_arch.choose({"CONVSTENCIL_CUDA_ARCH": "sm_80"})
    assert archs == ["80"] and "CONVSTENCIL_CUDA_ARCH" in why


def test_the_driver_s_gpus(tmp_path, monkeypatch):
    fake_smi(tmp_path, monkeypatch, "echo 9.0; echo 8.0; echo 9.0")
    archs, why = cuda_arch.choose({})
    assert archs == ["80", "90"] and "nvidia-smi" in why


def test_no_driver_gives_the_default_set(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi at all
    assert cuda_arch.choose({}) == (["80", "90"],
                                    "no GPU found here: the default set")
    # a driver that finds no GPU: nvidia-smi fails
    fake_smi(tmp_path, monkeypatch, "echo 'No devices were found'; exit 6")
    assert cuda_arch.choose({})[0] == ["80", "90"]


def test_gpus_older_than_sm_80_give_the_default_set(tmp_path, monkeypatch):
    fake_smi(tmp_path, monkeypatch, "echo 7.0")
    archs, why = cuda_arch.choose({})
    assert archs == ["80", "90"] and "sm_70" in why


def test_nvcc_flags_embed_the_newest_ptx():
    assert cuda_arch.nvcc_flags(["80", "90"]) == [
        "-gencode", "arch=compute_80,code=sm_80",
        "-gencode", "arch=compute_90,code=sm_90",
        "-gencode", "arch=compute_90,code=compute_90"]
