"""Grids that cannot exist: a MemoryError at once, the process usable.

On a machine that overcommits memory the float64 copy of an oversize
grid would not fail; the out-of-memory killer would end the process
later.  apply() compares what it is about to allocate with what can
exist first.
"""
import time

import numpy as np
import pytest

import convstencil as cs
from convstencil import _memory
from conftest import BACKENDS


@pytest.mark.parametrize("backend", BACKENDS + ["auto"])
@pytest.mark.parametrize("log2", [40, 50])
def test_broadcast_views_past_memory_raise_at_once(backend, log2):
    grid = np.broadcast_to(0.0, (2 ** log2,))
    t0 = time.monotonic()
    with pytest.raises(MemoryError, match="needs .* GiB of host memory"):
        cs.apply(grid, "heat1d", backend=backend)
    assert time.monotonic() - t0 < 0.5
    # the process is still usable
    small = np.arange(10.0)
    np.testing.assert_allclose(
        cs.apply(small, "heat1d", backend=backend, mode="nearest")[1:-1],
        small[1:-1])


def test_2d_and_3d_views_too():
    with pytest.raises(MemoryError):
        cs.apply(np.broadcast_to(1.0, (2 ** 22, 2 ** 22)), "heat2d")
    with pytest.raises(MemoryError):
        cs.apply(np.broadcast_to(1.0, (2 ** 14,) * 3), "heat3d")


def test_the_limit_is_the_smallest_of_what_applies(monkeypatch):
    monkeypatch.setattr(_memory, "physical_bytes", lambda: 64 << 30)
    monkeypatch.setattr(_memory, "process_limit_bytes", lambda: 8 << 30)
    monkeypatch.setattr(_memory, "cgroup_limit_bytes", lambda: None)
    assert _memory.host_limit() == (8 << 30, "the process's memory limit")
    _memory.ensure_host_fits(8 << 30, "this")
    with pytest.raises(MemoryError, match="8.0 GiB .*process's memory"):
        _memory.ensure_host_fits((8 << 30) + 1, "this")
    monkeypatch.setattr(_memory, "cgroup_limit_bytes", lambda: 1 << 30)
    with pytest.raises(MemoryError, match="cgroup"):
        cs.apply(np.broadcast_to(0.0, (2 ** 27,)), "heat1d")
    # a grid that needs no copy and goes to out= allocates nothing
    grid = np.zeros(2 ** 10)
    cs.apply(grid, "heat1d", out=np.empty_like(grid))


def test_no_limit_known_means_no_check(monkeypatch):
    for name in ("physical_bytes", "process_limit_bytes",
                 "cgroup_limit_bytes"):
        monkeypatch.setattr(_memory, name, lambda: None)
    assert _memory.host_limit() == (None, None)
    _memory.ensure_host_fits(1 << 60, "anything")


def test_cgroup_file_parsing(tmp_path):
    f = tmp_path / "memory.max"
    f.write_text("max\n")
    assert _memory.cgroup_limit_bytes(str(f)) is None
    f.write_text("1073741824\n")
    assert _memory.cgroup_limit_bytes(str(f)) == 1 << 30
    assert _memory.cgroup_limit_bytes(str(tmp_path / "none")) is None


def test_watched_runs_count_their_segment_buffers(monkeypatch):
    # a grid whose copy and result fit, but not the segments' states too
    grid = np.zeros(1 << 20)  # 8 MiB
    monkeypatch.setattr(_memory, "physical_bytes", lambda: 30 << 20)
    monkeypatch.setattr(_memory, "process_limit_bytes", lambda: None)
    monkeypatch.setattr(_memory, "cgroup_limit_bytes", lambda: None)
    cs.apply(grid, "heat1d", backend="cpu")  # 16 MiB: fits
    with pytest.raises(MemoryError, match="segments"):
        cs.apply(grid, "heat1d", steps=4, every=2, backend="cpu",
                 callback=lambda s, g: None)
