"""benchmarks/readme_table.py: the README's performance table comes from
the results of one commit, and mixed commits are refused."""
import importlib.util
import json
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "benchmarks", "readme_table.py")


@pytest.fixture(scope="module")
def rt():
    if not os.path.exists(SCRIPT):
        pytest.skip("no benchmarks/readme_table.py here")
    spec = importlib.util.spec_from_file_location("readme_table", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def records(commit, device, rows):
    return [{"device": device, "date": "2026-01-02T03:04:05Z",
             "commit": commit, "command": "python benchmarks/x.py",
             "preset": preset, "shape": list(shape), "system": system,
             "gstencils_per_s": g} for preset, shape, system, g in rows]


def write(folder, name, recs):
    with open(os.path.join(str(folder), name), "w") as f:
        json.dump(recs, f)


README = """# project

Text before.

<!-- perf-table:start -->
old table
<!-- perf-table:end -->

Text after.
"""


@pytest.fixture
def results(tmp_path):
    gpu = "NVIDIA H100 80GB HBM3"
    write(tmp_path, "h100_2d.json", records("abc1234", gpu, [
        ("heat2d", (1024, 1024), "convstencil-auto", 410.5),
        ("heat2d", (1024, 1024), "cupy", 120.9),
        ("heat2d", (1024, 1024), "torch", 1.84),
        ("heat2d", (1000, 1007), "convstencil-auto", 407.4),   # odd grid
    ]))
    write(tmp_path, "h100_1d.json", records("abc1234", gpu, [
        ("heat1d", (1 << 20,), "convstencil-auto", 1991.1),
        ("heat1d", (1 << 20,), "cupy", 171.5),
        ("heat1d", (1 << 10,), "convstencil-auto", 900.0),
        ("heat1d", (1 << 10,), "cupy", 100.0),
    ]))
    write(tmp_path, "cpu.json", records("abc1234", "AMD EPYC, 2 cores", [
        ("heat2d", (256, 256), "convstencil-cpu", 3.243),
        ("heat2d", (256, 256), "scipy", 0.1316),
    ]))
    readme = tmp_path / "README.md"
    readme.write_text(README)
    return tmp_path


def test_one_commit_makes_a_table(rt, results):
    readme = results / "README.md"
    assert rt.main(["--results", str(results), "--readme",
                    str(readme)]) == 0
    text = readme.read_text()
    assert "old table" not in text
    assert text.startswith("# project\n\nText before.\n\n"
                           "<!-- perf-table:start -->\n| preset |")
    assert text.endswith("<!-- perf-table:end -->\n\nText after.\n")
    lines = text.splitlines()
    assert ("| preset | grid | convstencil GPU | CuPy | PyTorch "
            "| convstencil CPU | SciPy |") in lines
    # 1D: the larger grid; 2D: the grid every system ran, not the odd one
    assert "| heat1d | 2^20 | 1991 | 172 | - | - | - |" in lines
    assert ("| heat2d | 1024^2 (CPU: 256^2) | 410 | 121 | 1.8 | 3.2 "
            "| 0.13 |") in lines
    note = [l for l in lines if l.startswith("GPU: ")]
    assert note == ["GPU: NVIDIA H100 80GB HBM3, 2026-01-02; CPU: AMD EPYC, "
                    "2 cores, 2026-01-02; commit abc1234 (`cpu.json`, "
                    "`h100_1d.json`, `h100_2d.json`)."]
    # a second run changes nothing
    rt.main(["--results", str(results), "--readme", str(readme)])
    assert readme.read_text() == text


def test_mixed_commits_are_refused(rt, results, capsys):
    recs = json.loads((results / "cpu.json").read_text())
    for r in recs:
        r["commit"] = "def5678"
    write(results, "cpu.json", recs)
    readme = results / "README.md"
    with pytest.raises(SystemExit) as err:
        rt.main(["--results", str(results), "--readme", str(readme)])
    message = str(err.value)
    assert "different commits" in message
    assert "abc1234: h100_1d.json, h100_2d.json" in message
    assert "def5678: cpu.json" in message
    assert "--commit" in message
    assert readme.read_text() == README      # left as it was


def test_a_named_commit_leaves_the_others_out(rt, results):
    recs = json.loads((results / "cpu.json").read_text())
    for r in recs:
        r["commit"] = "def5678"
    write(results, "cpu.json", recs)
    readme = results / "README.md"
    rt.main(["--results", str(results), "--readme", str(readme),
             "--commit", "abc1234"])
    lines = readme.read_text().splitlines()
    assert "| preset | grid | convstencil GPU | CuPy | PyTorch |" in lines
    assert "| heat2d | 1024^2 | 410 | 121 | 1.8 |" in lines
    assert not any("SciPy" in l or "AMD" in l for l in lines)
    with pytest.raises(SystemExit, match="not found"):
        rt.main(["--results", str(results), "--readme", str(readme),
                 "--commit", "0000000"])


def test_the_readme_needs_its_markers(rt, results):
    readme = results / "README.md"
    readme.write_text("# no markers\n")
    with pytest.raises(SystemExit, match="perf-table"):
        rt.main(["--results", str(results), "--readme", str(readme)])
