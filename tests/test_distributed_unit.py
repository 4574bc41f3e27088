"""convstencil.distributed without launching MPI: the import contract,
block arithmetic, the halo plan, and the NCCL glue that a GPU run uses
(checked here where no GPU is; tests/test_distributed_gpu.py runs it)."""
import os
import subprocess
import sys
import types

import numpy as np
import pytest

import convstencil

# the folder holding the convstencil this run imports: the source tree
# with an in-place build, or site-packages after `pip install .` (then
# the source tree, which has no compiled _core, must not come first)
PACKAGE_HOME = os.path.dirname(os.path.dirname(os.path.abspath(
    convstencil.__file__)))


def _run_python(code):
    env = dict(os.environ, PYTHONPATH=PACKAGE_HOME)
    return subprocess.run([sys.executable, "-c", code], cwd=PACKAGE_HOME,
                          env=env, capture_output=True, text=True,
                          timeout=120)


def test_import_without_mpi4py():
    """import convstencil works without mpi4py; the distributed module
    says what to install."""
    done = _run_python(
        "import sys; sys.modules['mpi4py'] = None\n"
        "import convstencil\n"
        "try:\n"
        "    import convstencil.distributed\n"
        "except ImportError as e:\n"
        "    print('IMPORTERROR', e)\n")
    assert done.returncode == 0, done.stderr
    assert "IMPORTERROR" in done.stdout
    assert 'pip install "convstencil[mpi]"' in done.stdout.replace(
        '\\"', '"')


mpi4py = pytest.importorskip("mpi4py")
from mpi_support import LAUNCHED  # noqa: E402

if not LAUNCHED:
    # these tests need mpi4py's names, not a running MPI: leave this
    # process (and the rest of the suite in it) alone
    mpi4py.rc.initialize = False
csd = pytest.importorskip("convstencil.distributed",
                          exc_type=ImportError)
from convstencil.distributed import (  # noqa: E402
    _nccl, _overlap, _partition, _plan)


def test_balanced_split():
    assert _partition.balanced(10, 3) == (4, 3, 3)
    assert _partition.offsets((4, 3, 3)) == (0, 4, 7)
    assert _partition.split((10, 5), (3, 5)) == ((4, 3, 3), (1,) * 5)
    with pytest.raises(ValueError, match="fewer than the 3 ranks"):
        _partition.split((2,), (3,))


def test_resolve_dims():
    def compute(size, dims):  # what MPI.Compute_dims does for these
        free = [i for i, p in enumerate(dims) if p == 0]
        left = size // int(np.prod([p for p in dims if p] or [1]))
        out = list(dims)
        for i in free:
            out[i] = left if i == free[0] else 1
        return out
    assert _partition.resolve_dims((2, 0), 4, 2, compute) == (2, 2)
    assert _partition.resolve_dims(None, 4, 1, compute) == (4,)
    with pytest.raises(ValueError, match="do not fit"):
        _partition.resolve_dims((3, 0), 4, 2, compute)
    with pytest.raises(ValueError, match="one per axis"):
        _partition.resolve_dims((2, 2, 1), 4, 2, compute)
    with pytest.raises(TypeError, match="dims must be"):
        _partition.resolve_dims(object(), 4, 2, compute)


class _Comm:
    def __init__(self, rank, size):
        self.rank, self.size = rank, size

    def Get_rank(self):
        return self.rank

    def Get_size(self):
        return self.size


def _grid(shape, dims, rank):
    extents = _partition.split(shape, dims)
    size = int(np.prod(dims))
    return csd.DistributedGrid(None, shape, extents, _Comm(rank, size),
                               False)


def test_plan_ghosts_and_slabs():
    # 2 x 2 ranks, wrap: every side has ghosts, k*r deep
    d = _grid((20, 30), (2, 2), 3)
    plan, k = _plan.make_plan(d, (3, 5), "wrap", 10, 3, 9)
    assert k == 3 and plan.depth == (3, 6)
    assert plan.padded_shape == (10 + 6, 15 + 12)
    assert plan.owned_starts == (3, 6)
    # axis 0, low side: send owned rows 3..5, receive ghost rows 0..2,
    # over the whole padded extent of axis 1
    low = plan.axes[0][0]
    assert low.send == ((3, 0), (3, 27)) and low.recv == ((0, 0), (3, 27))
    assert low.peer == 1  # coords (1, 1) -> (0, 1)
    # constant mode: no ghost on the global edges
    plan, _ = _plan.make_plan(d, (3, 5), "constant", 10, 3, 9)
    assert plan.lo == (True, True) and plan.hi == (False, False)
    assert plan.padded_shape == (13, 21)


def test_plan_limits_k_by_thinnest_block():
    d = _grid((7, 40), (2, 1), 0)  # blocks of 4 and 3 rows
    plan, k = _plan.make_plan(d, (3, 3), "reflect", 100, 10, 5)
    assert k == 3  # 3 rows can feed 3 steps of radius 1
    with pytest.raises(ValueError, match="thinner than the stencil"):
        _plan.make_plan(d, (9, 3), "reflect", 100, None, 5)


def test_plan_unsplit_axes():
    # one rank: the engine's own mode along whole axes, wrap too
    d = _grid((2, 50), (1, 1), 0)
    plan, k = _plan.make_plan(d, (7, 7), "wrap", 10, 2, 49)
    assert plan.padded_shape == (2, 50) and k == 10  # one round
    # self_exchange: along axes at least r wide, with the rank itself; an
    # axis thinner than r keeps the engine's own wrap (exact, whole axis)
    plan, _ = _plan.make_plan(d, (7, 7), "wrap", 10, 2, 49,
                              self_exchange=True)
    assert plan.lo == (False, True) and plan.axes[0] == []
    assert [s.peer for s in plan.axes[1]] == [0, 0]
    # a tuple names the axes that do: (0,) as a slab's (split rounds)
    from convstencil.distributed import _run
    one = _grid((40, 50), (1, 1), 0)
    plan, _ = _plan.make_plan(one, (3, 3), "wrap", 10, 2, 5,
                              self_exchange=(0,))
    assert plan.lo == (True, False) and plan.axes[1] == []
    assert _run.split_bands(plan) == (2, 2)
    with pytest.raises(ValueError, match="axis 2"):
        _run._self_exchange_axes((2,), 2)
    with pytest.raises(TypeError, match="sequence of axes"):
        _run._self_exchange_axes("x", 2)
    plan, _ = _plan.make_plan(d, (7, 7), "mirror", 10, 2, 49)
    assert plan.padded_shape == (2, 50)  # nothing to exchange


def test_cost_model_prefers_deeper_halos_on_large_blocks():
    d = _grid((4096, 4096), (2, 1), 0)
    _, k_big = _plan.make_plan(d, (3, 3), "wrap", 1000, None, 5)
    d = _grid((64, 64), (2, 1), 0)
    _, k_small = _plan.make_plan(d, (3, 3), "wrap", 1000, None, 5)
    assert k_big > 1 and 1 <= k_small <= 32
    assert _plan.predicted_step_seconds((100,), [(1, 2)], 1, 3, False) > 0


def _cover(plan):
    """Per owned cell, how many pieces write it; checks every src."""
    interior, strips = _overlap.plan_split(plan)
    count = np.zeros(plan.padded_shape, dtype=int)
    pieces = ([interior] if interior else []) + strips
    for src, dst in pieces:
        count[_overlap.slices(dst)] += 1
        for axis, ((s0, s1), (d0, d1)) in enumerate(zip(src, dst)):
            g = plan.depth[axis]
            n = plan.padded_shape[axis]
            # each src side: a padded edge, or g cells off dst
            assert s0 == 0 or d0 - s0 == g, (axis, src, dst)
            assert s1 == n or s1 - d1 == g, (axis, src, dst)
    return interior, strips, count


def test_overlap_pieces_cover_the_block_once():
    for shape, dims, rank, w, mode, k in [
            ((20, 30), (2, 2), 3, (3, 5), "wrap", 3),
            ((20, 30), (2, 2), 0, (3, 5), "constant", 3),
            ((40, 9, 9), (2, 1, 1), 1, (3, 3, 3), "reflect", 4),
            ((12, 12, 12), (2, 2, 1), 2, (5, 3, 3), "mirror", 2),
            ((7, 40), (2, 1), 1, (3, 3), "wrap", 3)]:
        d = _grid(shape, dims, rank)
        plan, _ = _plan.make_plan(d, w, mode, 10, k, 9, overlap=True)
        assert plan.overlap
        interior, strips, count = _cover(plan)
        owned = np.zeros_like(count)
        owned[plan.owned()] = 1
        np.testing.assert_array_equal(count, owned)
        if interior is not None:  # it reads owned cells only
            assert _overlap.slices(interior[0]) == plan.owned()


def test_overlap_pieces_of_a_thin_block():
    # 3 rows, ghosts 3 deep on both sides: no interior, the strips
    # share the rows out
    d = _grid((7, 40), (2, 1), 1)  # rows 4..6, wrap: both sides ghosted
    plan, k = _plan.make_plan(d, (3, 3), "wrap", 10, 3, 5, overlap=True)
    interior, strips, count = _cover(plan)
    assert k == 3 and interior is None and len(strips) == 1
    assert _overlap.axis_ranges(3, 3, 3, 3) == ((3, 6), (6, 6), (6, 6))


def test_overlap_keeps_global_edges():
    # constant mode, first block of 2 along axis 0: no ghost on its low
    # side, so its pieces reach the padded block's low edge (the global
    # edge, where the engine applies the real mode)
    d = _grid((30, 30), (2, 1), 0)
    plan, _ = _plan.make_plan(d, (3, 3), "constant", 10, 2, 5, overlap=True)
    assert plan.lo == (False, False) and plan.hi == (True, False)
    interior, strips = _overlap.plan_split(plan)
    assert interior == (((0, 15), (0, 30)), ((0, 13), (0, 30)))
    assert strips == [(((11, 17), (0, 30)), ((13, 15), (0, 30)))]


def test_cost_model_overlap_choice(monkeypatch):
    # a large block whose exchange takes long (slow network figures):
    # overlap pays; a tiny block: the redundant work and calls do not
    d = _grid((8192, 8192), (2, 1), 0)
    sides = [(1, 2), (1, 0)]
    shape = (4096, 8192)
    plain = _plan.predicted_step_seconds(shape, sides, 8, 5, False)
    over = _plan.predicted_step_seconds(shape, sides, 8, 5, False, True)
    assert over > 0 and plain > 0
    with monkeypatch.context() as m:
        m.setitem(_plan._COSTS, False, dict(_plan._COSTS[False],
                                            byte=1 / 0.2e9, message=1e-3))
        plan, k = _plan.make_plan(d, (3, 3), "wrap", 100, 8, 5,
                                  overlap=None)
        assert plan.overlap and k == 8
        small = _grid((16, 16), (2, 1), 0)
        plan, _ = _plan.make_plan(small, (3, 3), "wrap", 100, 2, 5,
                                  overlap=None)
        assert not plan.overlap
    # forced either way, whatever the model says
    for flag in (False, True):
        plan, _ = _plan.make_plan(d, (3, 3), "wrap", 100, None, 5,
                                  overlap=flag)
        assert plan.overlap is flag
    # device blocks never overlap; nothing to exchange, nothing to hide
    gpu = csd.DistributedGrid(None, (64, 64), _partition.split(
        (64, 64), (2, 1)), _Comm(0, 2), True)
    plan, _ = _plan.make_plan(gpu, (3, 3), "wrap", 10, 2, 5, overlap=True)
    assert not plan.overlap
    plan, _ = _plan.make_plan(_grid((8, 8), (1, 1), 0), (3, 3), "wrap", 10,
                              2, 5, overlap=True)
    assert not plan.overlap
    with pytest.raises(TypeError, match="overlap must be"):
        _plan.make_plan(d, (3, 3), "wrap", 10, 2, 5, overlap=1)


def test_device_model_prices_the_engine_plan():
    """Device blocks: each round's engine call is priced with the plan of
    the path the engine runs (_backends.gpu_run_model: for heat2d on an
    H100, the CUDA cores' passes of 8 steps, not the tensor cores' of 3)
    plus the load and store of the block, so k goes past the host's 64 on
    a large block, where those two passes dominate the exchange; and k
    avoids a round that ends in a pass shallower than the engine's depth
    (on the H100 such rounds ran 12 to 16% slower a step:
    benchmarks/results/h100_session_rounds.md)."""
    from convstencil import _backends, _model
    w = convstencil.Stencil("heat2d").weights
    engine = (w, "wrap", "cuda")
    sides = [(1, 2), (0, 0)]
    shape = (10240, 10240)
    path, cc_major, cap, smem = _backends.gpu_run_model(
        "cuda", (10240 + 128, 10240), w, "wrap", 64)
    assert path == _model.auto_gpu_path((10240 + 128, 10240), w, "wrap", 64,
                                        cc_major, cap, smem)
    depth = _model.gpu_plan((10240 + 128, 10240), w, "wrap", 64,
                            path)["fused_depth"]
    assert depth > 1
    assert not _plan.has_tail_pass(shape, sides, 8 * depth, engine)
    assert _plan.has_tail_pass(shape, sides, 8 * depth + 1, engine)
    assert not _plan.has_tail_pass(shape, sides, 1, engine)

    def per_step(k):
        return _plan.predicted_step_seconds(shape, sides, k, 5, True,
                                            engine=engine)
    assert per_step(8 * depth) < per_step(depth) < per_step(1)
    gpu = csd.DistributedGrid(None, (20480, 10240), _partition.split(
        (20480, 10240), (2, 1)), _Comm(0, 2), True)
    for steps in (1000, 600, 601):
        plan, k = _plan.make_plan(gpu, (3, 3), "wrap", steps, None, 5,
                                  weights=w)
        assert k > 64 and k % depth == 0, (steps, k)
        assert k <= _plan.MAX_AUTO_HALO_STEPS_DEVICE
        # the plan says what a pass fuses (info()'s fused_depth)
        assert plan.fused_depth == depth
    # a forced k that is no multiple of the depth still reports it
    forced, _ = _plan.make_plan(gpu, (3, 3), "wrap", 600, depth + 1, 5,
                                weights=w)
    assert forced.fused_depth == depth
    # a forced path prices its own plan
    assert _backends.gpu_run_model("cuda-tc", (64, 64), w, "wrap",
                                   10)[0] == "tensor-core"
    # the host model is untouched by weights: host blocks stop at 64
    host, k_host = _plan.make_plan(_grid((20480, 10240), (2, 1), 0),
                                   (3, 3), "wrap", 1000, None, 5, weights=w)
    assert k_host <= _plan.MAX_AUTO_HALO_STEPS
    assert host.fused_depth is None


def test_tune_candidates_run_whole_passes():
    """tune_halo_steps' default k: the model's, and the powers of two
    from 4 to the steps, each moved to the nearest multiple of the
    engine's fused depth (no round ends in a shallower pass), never past
    the steps; without a depth (host blocks) the powers of two as they
    are."""
    from convstencil.distributed import _tune
    assert _tune._default_candidates(40, 600) == [4, 8, 16, 32, 40, 64,
                                                  128, 256, 512]
    assert _tune._default_candidates(6, 60, 3) == [3, 6, 9, 15, 33]
    assert _tune._default_candidates(6, 32, 3) == [3, 6, 9, 15, 30]
    assert _tune._default_candidates(40, 600, 8) == [8, 16, 32, 40, 64,
                                                     128, 256, 512]
    for model_k, steps, depth in [(15, 300, 3), (7, 100, 5), (2, 5, 3),
                                  (13, 200, 13), (1, 3, 1)]:
        ks = _tune._default_candidates(model_k, steps, depth)
        assert model_k in ks and ks == sorted(set(ks))
        assert all(k == model_k or (k % depth == 0 and k <= max(steps,
                                                                depth))
                   for k in ks), (model_k, steps, depth, ks)


def test_candidate_halo_steps():
    ks = _plan.candidate_halo_steps(256)
    assert ks[:16] == list(range(1, 17)) and ks[-1] == 256
    assert 63 not in ks and 192 in ks and ks == sorted(set(ks))
    assert _plan.candidate_halo_steps(5) == [1, 2, 3, 4, 5]
    assert _plan.candidate_halo_steps(30)[-1] == 30


def test_cost_model_overlap_costs_without_exchange(monkeypatch):
    # with free messages there is nothing to hide: overlap only adds
    # redundant work and calls
    monkeypatch.setitem(_plan._COSTS, False, dict(
        _plan._COSTS[False], byte=0.0, message=0.0))
    sides = [(1, 2), (0, 0)]
    plain = _plan.predicted_step_seconds((512, 512), sides, 4, 5, False)
    over = _plan.predicted_step_seconds((512, 512), sides, 4, 5, False, True)
    assert over > plain


def test_nccl_messages_match_in_order(monkeypatch):
    """NCCL has no tags: between two ranks the i-th send must meet the
    i-th receive of the same direction, also when one rank is both
    neighbours (2 ranks, wrap) or its own (1 rank)."""
    from convstencil.distributed import _transport
    monkeypatch.setattr(_transport._core, "cuda_stream_synchronize",
                        lambda stream: None)
    for dims in [(2, 1), (1, 1), (2, 2)]:
        size = int(np.prod(dims))
        queues = {}
        for rank in range(size):
            d = _grid((12, 12), dims, rank)
            plan, _ = _plan.make_plan(d, (3, 3), "wrap", 4, 2, 5,
                                     self_exchange=True)
            t = _transport.NCCL.__new__(_transport.NCCL)
            for axis in range(2):
                messages = [_transport.Message(
                    s, ("send", rank, axis, s.send_tag),
                    ("recv", rank, axis, s.recv_tag), 1)
                    for s in plan.axes[axis]]
                log = {}
                t.nccl = types.SimpleNamespace(
                    exchange=lambda sends, recvs, stream, log=log:
                    log.update(sends=sends, recvs=recvs, stream=stream))
                t.move(messages)
                for ptr, _, peer in log["sends"]:
                    queues.setdefault(("s", axis, rank, peer), []).append(
                        ptr[3])
                for ptr, _, peer in log["recvs"]:
                    queues.setdefault(("r", axis, peer, rank), []).append(
                        ptr[3])
        for (kind, axis, src, dst), tags in queues.items():
            if kind == "s":
                assert queues[("r", axis, src, dst)] == tags, (dims, axis)


def test_slabs_move_in_place_only_where_contiguous():
    """Axis 0's slabs span whole rows of a C-ordered block: they move
    without packing; a later axis's only where every axis before it is 1;
    none of an engine session's grid, whose rows are padded."""
    from convstencil.distributed._device_blocks import (c_strides,
                                                        is_contiguous)
    c = c_strides((20, 30))
    assert is_contiguous((3, 30), c)          # axis 0's slab
    assert not is_contiguous((20, 3), c)      # axis 1's
    assert is_contiguous((1, 3), c_strides((1, 30)))
    assert not is_contiguous((4, 5, 2), c_strides((4, 5, 6)))
    assert is_contiguous((1, 1, 6), c_strides((1, 1, 6)))
    assert not is_contiguous((3, 30), (8 * 40, 8))  # rows of 40, 30 used
    assert is_contiguous((1, 30), (8 * 40, 8))
    # a slab of axis 0 is one run of memory: the owned rows next to it
    d = _grid((12, 10), (2, 1), 0)
    plan, _ = _plan.make_plan(d, (3, 3), "wrap", 4, 2, 5)
    (lo, hi) = plan.axes[0]
    starts, sizes = hi.send
    assert starts[1:] == (0,) and sizes[1:] == plan.padded_shape[1:]


def test_nccl_library_search(tmp_path, monkeypatch):
    lib = tmp_path / "nvidia" / "nccl" / "lib"
    lib.mkdir(parents=True)
    (lib / "libnccl.so.2").write_bytes(b"")
    monkeypatch.setattr(sys, "path", [str(tmp_path)] + sys.path)
    monkeypatch.delenv("CONVSTENCIL_NCCL_LIBRARY", raising=False)
    found = _nccl.candidates()
    assert found[0] == str(lib / "libnccl.so.2")
    assert found[-1] == "libnccl.so.2"
    monkeypatch.setattr(_nccl, "_lib", None)
    monkeypatch.setattr(_nccl, "candidates", lambda: [str(tmp_path / "no")])
    with pytest.raises(OSError, match="nvidia-nccl-cu12"):
        _nccl.load()


def test_transport_names():
    from convstencil.distributed import _transport
    assert _transport.check_name("auto", True) == "auto"
    assert _transport.check_name("staging", True) == "staging"
    with pytest.raises(ValueError, match="accepted: auto, mpi"):
        _transport.check_name("nccl", False)
    with pytest.raises(TypeError):
        _transport.check_name(None, True)


@pytest.mark.parametrize("split, order", [(True, ["cuda-ipc", "nccl"]),
                                          (False, ["nccl", "cuda-ipc"])])
def test_auto_transport_takes_copy_engines_first_where_rounds_split(
        monkeypatch, split, order):
    """"auto" tries CUDA IPC before NCCL where the rounds exchange beside
    their interior (NCCL's kernels would take SMs from it), NCCL first
    elsewhere; each next where the one before is not usable on every
    rank; a transport named is the only one tried."""
    from mpi4py import MPI
    from convstencil.distributed import _transport
    tried = []

    def opener(kind):
        def open_(comm, plan, device, asked):
            tried.append((kind, asked))
            return kind if kind in usable else None
        return open_

    monkeypatch.setattr(_transport, "_open_nccl", opener("nccl"))
    monkeypatch.setattr(_transport, "_open_ipc", opener("cuda-ipc"))
    plan = types.SimpleNamespace(axes=(True, False))
    for usable, expected in (({"nccl", "cuda-ipc"}, order[:1]),
                             ({order[1]}, order)):
        tried.clear()
        assert _transport.open_transport("auto", MPI.COMM_SELF, plan, True,
                                         0, split) == expected[-1]
        assert tried == [(kind, False) for kind in expected]
    tried.clear()
    usable = {"nccl", "cuda-ipc"}
    assert _transport.open_transport(order[1], MPI.COMM_SELF, plan, True,
                                     0, split) == order[1]
    assert tried == [(order[1], True)]


def test_nccl_queues_slabs_that_move_as_they_lie(monkeypatch):
    """queue(): where every slab is one run of memory (a block cut along
    axis 0), each axis's group goes on the given stream and nothing
    waits; where a slab needs packing (axis 1 cut too), nothing is
    posted and the caller exchanges as usual."""
    from convstencil.distributed import _device_blocks, _transport
    monkeypatch.setattr(_transport._core, "cuda_stream_synchronize",
                        lambda stream: pytest.fail("queue() waited"))
    for dims, expected in [((2, 1), True), ((2, 2), False)]:
        d = _grid((12, 12), dims, 0)
        plan, _ = _plan.make_plan(d, (3, 3), "wrap", 4, 2, 5)
        t = _transport.NCCL.__new__(_transport.NCCL)
        t.plan, t.seconds = plan, dict(move=0.0)
        posted = []
        t.nccl = types.SimpleNamespace(
            exchange=lambda sends, recvs, stream: posted.append(
                (len(sends), len(recvs), stream)))
        padded = _device_blocks.StridedView(
            None, 4096, plan.padded_shape,
            _device_blocks.c_strides(plan.padded_shape))
        assert t.queue(padded, 77) is expected
        assert posted == ([(2, 2, 77)] if expected else [])


def test_nccl_unique_id_keeps_its_zero_bytes():
    """The id carries a socket address with zero bytes in it: a c_char
    field would cut it at the first one (NCCL then dials 0.0.0.0)."""
    from convstencil.distributed import _nccl
    data = bytes([7, 0, 2, 0]) + bytes(range(1, 125))
    assert _nccl.id_bytes(_nccl.id_from_bytes(data)) == data
    with pytest.raises(ValueError, match="128 bytes"):
        _nccl.id_from_bytes(data[:9])


class _OneRank:
    """A communicator of one rank, for the votes of the session loop."""

    def allreduce(self, value, op=None):
        return value

    def allgather(self, value):
        return [value]


def test_session_rounds_drive_an_engine_session(monkeypatch):
    """Without a GPU: the session loop opens one session loaded with the
    owned block at its place in the padded grid (no padded block is
    read), and each round exchanges through the session's grid (its
    boxes packed and unpacked by the session, or spans of whole rows)
    and then runs; the store goes to the second block; a non-finite
    result is reported."""
    from convstencil import _core, _engine
    from convstencil.distributed import _device_blocks, _run
    log = []

    class FakeCore:
        def __getattr__(self, name):  # the rest (codes, the planner)
            return getattr(_core, name)

        def session_open(self, ptr, strides, shape, w, k, mode, cval, path,
                         at, box, ends):
            log.append(("open", ptr, strides, shape, k, at, box, ends))
            return "handle", "cuda-core"

        def session_view(self, handle):
            return 4096, (0, 8 * 40, 8), (1, 12, 30)  # rows padded to 40

        def session_halo(self, handle):
            return 0, 1, 1

        def session_copy(self, handle, starts, sizes, ptr, put):
            log.append(("put" if put else "get", starts, sizes, ptr))

        def session_run(self, handle, bands=None, out=None):
            log.append(("run", out))

        def session_close(self, handle, ptr, strides):
            log.append(("close", ptr, strides))
            return nonfinite[0]

    class Link:
        def exchange(self, grid):
            assert grid.shape == (12, 30) and grid.strides == (320, 8)
            assert not _device_blocks.is_contiguous((2, 30), grid.strides)
            # one rank, one layout: axis 0's slabs also move as whole rows
            # (halo and padding along), the others' are packed
            assert grid.span((2, 0), (2, 30)) == (4096 + 2 * 320, 2 * 40)
            assert grid.span((0, 1), (12, 2)) is None
            _device_blocks.pack(grid, (2, 0), (2, 30),
                                types.SimpleNamespace(ptr=7))
            _device_blocks.unpack(types.SimpleNamespace(ptr=8), grid,
                                  (0, 0), (2, 30))

    monkeypatch.setattr(_engine, "_core", FakeCore())
    pads = [None, types.SimpleNamespace(ptr=200, shape=(12, 30))]
    block = _device_blocks.StridedView(None, 100, (10, 30), (240, 8))
    d = types.SimpleNamespace(comm=_OneRank(), local=block)
    # no exchanging axis to split the rounds for
    plan = types.SimpleNamespace(padded_shape=(12, 30), owned_starts=(1, 0),
                                 axes=[], depth=(1, 0))
    w = convstencil.Stencil("heat2d").weights
    times = dict(exchange=0.0, compute=0.0, vote=0.0)
    nonfinite = [False]
    path, split, bands = _run._session_rounds(d, pads, plan, Link(), w, 3,
                                              2, "wrap", 0.0, "cuda", times)
    assert path == "cuda-core"  # the engine's word for its plan
    assert split is False and bands is None
    # only the planes the first exchange sends are loaded
    assert log[0] == ("open", 100, (0, 240, 8), (1, 12, 30), 3, (0, 1, 0),
                      (1, 10, 30), 1)
    exchange = [("get", (0, 2, 0), (1, 2, 30), 7),
                ("put", (0, 0, 0), (1, 2, 30), 8)]
    # the last round writes its result into pads[1] itself; close is
    # given the same array
    assert log[1:] == (exchange + [("run", None)] + exchange
                       + [("run", (200, (0, 240, 8)))]
                       + [("close", 200, (0, 240, 8))])
    assert times["vote"] > 0  # every round's check
    nonfinite[0] = True
    log.clear()
    assert _run._session_rounds(d, pads, plan, Link(), w, 3, 1, "wrap", 0.0,
                                "cuda", times) is None


@pytest.mark.parametrize("queues", [True, False])
def test_split_rounds_exchange_beside_the_last_pass(monkeypatch, queues):
    """Without a GPU: with a block cut along axis 0 alone, every round but
    the last is queued with the planes its neighbours receive (split),
    and its exchange follows at once: queued on the session's exchange
    stream where the transport can (NCCL), else started after the bands
    are waited for; the next round waits for it (exchanged), and only the
    first round exchanges before it runs."""
    from convstencil import _core, _engine
    from convstencil.distributed import _device_blocks, _run
    log = []

    class FakeCore:
        def __getattr__(self, name):
            return getattr(_core, name)

        def session_open(self, ptr, strides, shape, w, k, mode, cval, path,
                         at, box, ends):
            return "handle", "cuda-core"

        def session_view(self, handle):
            return 4096, (0, 8 * 30, 8), (1, 12, 30)

        def session_halo(self, handle):
            return 0, 0, 0

        def session_run(self, handle, bands=None, out=None):
            assert out is None or out == (200, (0, 240, 8))
            log.append(("run", bands) if out is None else ("last", bands))
            return bands is not None

        def session_exchange_stream(self, handle):
            return 77

        def session_bands(self, handle):
            return "lead"

        def session_wait_bands(self, handle):
            log.append("wait")

        def session_exchanged(self, handle):
            log.append("exchanged")

        def session_close(self, handle, ptr, strides):
            log.append("close")
            return False

    class Link:
        def exchange(self, grid):
            log.append("exchange")

        def queue(self, grid, stream):
            assert stream == 77 and grid.shape == (12, 30)
            if queues:
                log.append("queue")
            return queues

    monkeypatch.setattr(_engine, "_core", FakeCore())
    pads = [None, types.SimpleNamespace(ptr=200, shape=(12, 30))]
    block = _device_blocks.StridedView(None, 100, (8, 30), (240, 8))
    d = types.SimpleNamespace(comm=_OneRank(), local=block)
    side = object()
    plan = types.SimpleNamespace(padded_shape=(12, 30), owned_starts=(2, 0),
                                 axes=[[side, side], []], depth=(2, 0),
                                 lo=(True, False), hi=(True, False))
    assert _run.split_bands(plan) == (2, 2)
    w = convstencil.Stencil("heat2d").weights
    times = dict(exchange=0.0, compute=0.0, vote=0.0)
    path, split, bands = _run._session_rounds(d, pads, plan, Link(), w, 2,
                                              3, "wrap", 0.0, "cuda", times)
    assert split is True and bands == "lead"
    beside = ["queue"] if queues else ["wait", "exchange"]
    queued = [("run", (2, 2))] + beside + ["exchanged"]
    assert log == (["exchange"] + queued + queued + [("last", None),
                                                     "close"])
    # overlap=False: each round exchanges before it runs, none split
    log.clear()
    path, split, bands = _run._session_rounds(d, pads, plan, Link(), w, 2,
                                              2, "wrap", 0.0, "cuda", times,
                                              overlap=False)
    assert split is False and bands is None
    assert log == ["exchange", ("run", None), "exchange", ("last", None),
                   "close"]
    # an axis besides axis 0 exchanges: its slabs hold every plane
    plan.axes = [[side], [side]]
    assert _run.split_bands(plan) is None


def test_device_block_copy_passes_the_engine_a_path_code(monkeypatch):
    """Without a GPU: a copy between device blocks reaches the engine's
    run_device with integer codes (a backend name as its path argument
    made every distributed call on device blocks raise TypeError)."""
    from convstencil import _core, _engine
    from convstencil.distributed import _device_blocks
    calls = []

    class FakeCore:
        def __getattr__(self, name):
            return getattr(_core, name)

        def run_device(self, *args):
            calls.append(args)
            for position in (1, 7, 8, 10, 11, 12, 13):  # code, steps, ...
                assert type(args[position]) is int, (position, args)
            return {}

        def device_copy_pitched(self, *args):
            pitched.append(args)
            return False  # as for a layout it cannot express

    pitched = []
    monkeypatch.setattr(_engine, "_core", FakeCore())
    monkeypatch.setattr(_device_blocks, "_core", FakeCore())
    src = _device_blocks.StridedView(None, 4096, (3, 5), (40, 8))
    dst = _device_blocks.StridedView(None, 8192, (3, 5), (80, 8))
    _device_blocks.copy(src, dst)
    # a pitched copy first (3D, leading unit axes), then the engine
    assert pitched == [(8192, (0, 80, 8), 4096, (0, 40, 8), (1, 3, 5))]
    (args,) = calls
    assert args[0] == 4096 and args[3] == 8192
    assert args[7] == 0 and args[10] == _core.PATH_AUTO  # steps, path
