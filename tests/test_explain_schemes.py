"""explain() of a PDE scheme: the plan is the engine's own (on the GPU
csrc/scheme_plan.c's choice of one-step, blocked or streamed passes, through
_core.plan_scheme_device, no GPU needed), the prediction the model's, the
result prints.  That the choice is the one the engine then runs is
checked on the GPU and the emulated build (test_gpu_small_schemes.py)."""
import numpy as np
import pytest

import convstencil as cs


def gray_scott():
    u, v = cs.fields("u v")
    L = cs.laplacian(2)
    return cs.Scheme({u: u + 0.2 * L(u) - u * v**2 + 0.04 * (1 - u),
                      v: v + 0.1 * L(v) + u * v**2 - 0.1 * v}, mode="wrap")


def wave(ndim=2):
    u, up = cs.fields("u up")
    return cs.Scheme({u: 2 * u - up + 0.15 * cs.laplacian(ndim)(u), up: u})


def test_cpu_explains_bytes_and_flops_of_a_step():
    e = cs.explain((256, 256), gray_scott(), steps=100, backend="cpu")
    assert e.backend == "cpu" and e.path == "scheme" and e.steps == 100
    assert e.mode == "wrap"  # the scheme's own
    # u and v read, u and v written, once a step
    assert e.bytes_per_point_per_step == 32
    assert e.flops_per_point_per_step > 2 * 2 * 5  # two 5-point stencils
    assert e.predicted_seconds > 0 and e.bound in ("memory", "FP64 units")
    assert "scheme of u, v" in str(e)


def test_cpu_model_prices_a_pass_as_its_bytes_plus_its_operations():
    """The CPU scheme model (_model.scheme_cpu_time): a whole-grid step
    costs its bytes plus its operations (the fit found them in sequence,
    not overlapped); a blocked pass's operations cost more per point than
    the whole grid's, and more again where its tiles spill from L2."""
    from convstencil import _model
    rates = _model.cpu_rates({"compute_scale": 1.0, "memory_scale": 1.0})
    whole = dict(path="scheme", threads=1)
    seconds, _, rows = _model.scheme_cpu_time(whole, (512, 512), 10, rates,
                                              32.0, 30.0, 2, 0)
    npts = 512.0 * 512
    memory = npts * 32.0 / rates["scheme_bandwidth"]
    ops = npts * 30.0 * rates["scheme_flop_seconds"]
    assert rows[0].seconds == pytest.approx(
        memory + ops + rates["scheme_step_seconds"])
    assert seconds == pytest.approx(
        rates["scheme_call_seconds"]
        + npts * 2 * rates["scheme_field_seconds"]
        + 10 * rows[0].seconds)
    blocked = dict(path="scheme-blocked", threads=1, fused_depth=10,
                   fused_passes=1, tile_rows=(1, 64), margins=(0, 10),
                   tile_spills=False)
    kept = _model.scheme_cpu_time(blocked, (512, 512), 10, rates, 32.0,
                                  30.0, 2, 0)[0]
    spilled = _model.scheme_cpu_time(dict(blocked, tile_spills=True),
                                     (512, 512), 10, rates, 32.0, 30.0, 2,
                                     0)[0]
    in_tiles = ops * 10 * (74.0 / 64.0)   # the margins' rows, half on average
    assert spilled - kept == pytest.approx(
        in_tiles * rates["scheme_blocked_flop_factor"]
        * (rates["scheme_spill_factor"] - 1.0))
    assert rates["scheme_blocked_flop_factor"] >= 1.0
    assert rates["scheme_spill_factor"] > 1.0


def test_gpu_plan_of_a_wave_is_streamed_on_an_h100():
    # the 2D wave under constant: streamed passes as deep as the kernel
    # holds, priced below the blocked and one-step passes
    # (benchmarks/results/h100_schemes_streamed.md)
    e = cs.explain((10240, 10240), wave(), steps=48, backend="cuda")
    assert e.path == "scheme-streamed" and e.fused_depth == 8
    assert e.fused_passes == 6
    chosen = [a for a in e.alternatives if a["chosen"]]
    assert [a["path"] for a in chosen] == ["scheme-streamed"]
    for other in ("scheme", "scheme-blocked"):
        alt = next(a for a in e.alternatives if a["path"] == other)
        assert alt["predicted_seconds"] > chosen[0]["predicted_seconds"]
    assert e.transfer_seconds > 0  # a shape: shown as for NumPy grids
    assert "streamed passes of 8 steps" in str(e)
    # steps fewer than the depth: one pass of them
    e = cs.explain((10240, 10240), wave(), steps=3, backend="cuda")
    assert (e.path, e.fused_depth, e.fused_passes) == ("scheme-streamed",
                                                       3, 1)


def test_gpu_plan_blocks_a_wave_the_streamed_passes_do_not_take():
    # nearest: no streamed passes; the model prices the blocked passes
    # below the one-step ones (h100_schemes_blocked.md measured 145.0
    # against 112.9 G point updates/s)
    e = cs.explain((10240, 10240), wave(), steps=48, mode="nearest",
                   backend="cuda")
    assert e.path == "scheme-blocked" and e.fused_depth >= 2
    assert e.fused_passes == -(-48 // e.fused_depth)
    streamed = next(a for a in e.alternatives
                    if a["path"] == "scheme-streamed")
    assert not streamed["runs"] and "wrap or constant" in streamed["reason"]


def test_no_streamed_passes_on_an_image_without_them(monkeypatch):
    # an sm_80 image holds no streamed passes (csrc/cuda/kernels.cuh):
    # the plan, forced or not, is then the best of the others, as the
    # engine runs it
    from convstencil import _backends, _engine
    tables = wave().tables()
    args = dict(fields=2, params=0, mode="constant", steps=48,
                smem_optin=227 * 1024)
    on90 = _engine.plan_scheme_device((10240, 10240), tables,
                                      image_arch=90, **args)
    on80 = _engine.plan_scheme_device((10240, 10240), tables,
                                      image_arch=80, **args)
    assert on90["path"] == "scheme-streamed"
    assert on80["path"] == "scheme-blocked" and on80["streamed_seconds"] == 0
    monkeypatch.setenv("CONVSTENCIL_SCHEME_BLOCK", "stream4")
    assert _engine.plan_scheme_device((500, 700), tables, image_arch=80,
                                      **args)["path"] != "scheme-streamed"
    monkeypatch.delenv("CONVSTENCIL_SCHEME_BLOCK")
    monkeypatch.setattr(_backends, "cuda_image_arch", lambda: 80)
    e = cs.explain((10240, 10240), wave(), steps=48, backend="cuda")
    assert e.path == "scheme-blocked"
    streamed = next(a for a in e.alternatives
                    if a["path"] == "scheme-streamed")
    assert not streamed["runs"] and "sm_80" in streamed["reason"]


def test_gpu_plan_keeps_one_step_passes_where_blocking_does_not_pay():
    e = cs.explain((10240, 10240), gray_scott(), steps=48, mode="nearest",
                   backend="cuda")
    assert e.path == "scheme" and e.fused_depth == 1
    assert e.unfused_steps == 48
    # nearest: neither blocked passes (2D only) nor streamed ones (wrap
    # or constant) take it in 3D
    e3 = cs.explain((128, 128, 128), wave(3), steps=10, mode="nearest",
                    backend="cuda")
    assert e3.path == "scheme"
    for other in ("scheme-blocked", "scheme-streamed"):
        alt = next(a for a in e3.alternatives if a["path"] == other)
        assert not alt["runs"] and "2D" in alt["reason"]
    # constant: the 3D streamed passes
    e3 = cs.explain((128, 128, 128), wave(3), steps=10, backend="cuda")
    assert e3.path == "scheme-streamed" and e3.fused_depth >= 2


def test_the_setting_that_forces_passes_is_honoured(monkeypatch):
    monkeypatch.setenv("CONVSTENCIL_SCHEME_BLOCK", "32x3")
    e = cs.explain((500, 700), gray_scott(), steps=10, backend="cuda")
    assert e.path == "scheme-blocked" and e.fused_depth == 3
    assert e.fused_passes == 4
    monkeypatch.setenv("CONVSTENCIL_SCHEME_BLOCK", "off")
    assert cs.explain((500, 700), wave(), steps=10,
                      backend="cuda").path == "scheme"
    monkeypatch.setenv("CONVSTENCIL_SCHEME_BLOCK", "stream3")
    e = cs.explain((500, 700), gray_scott(), steps=10, backend="cuda")
    assert (e.path, e.fused_depth, e.fused_passes) == ("scheme-streamed",
                                                       3, 4)
    monkeypatch.setenv("CONVSTENCIL_SCHEME_BLOCK", "nostream")
    assert cs.explain((500, 700), wave(), steps=10,
                      backend="cuda").path != "scheme-streamed"
    monkeypatch.setenv("CONVSTENCIL_SCHEME_BLOCK", "sideways")
    with pytest.raises(ValueError, match="CONVSTENCIL_SCHEME_BLOCK"):
        cs.explain((500, 700), wave(), steps=10, backend="cuda")


def test_grids_and_arguments():
    grids = (np.zeros((40, 50)), np.zeros((40, 50)))
    e = cs.explain(grids, wave(), steps=3, backend="cpu")
    assert e.shape == (40, 50) and e.mode == "constant"
    assert cs.explain((40, 50), gray_scott(), mode="reflect",
                      backend="cpu").mode == "reflect"
    with pytest.raises(ValueError, match="2D"):
        cs.explain((40, 50, 6), wave(), backend="cpu")
    with pytest.raises(ValueError, match="backend"):
        cs.explain((40, 50), wave(), backend="cpu-tc")
    with pytest.raises(ValueError):
        cs.explain((40, 50), wave(), steps=-1, backend="cpu")
