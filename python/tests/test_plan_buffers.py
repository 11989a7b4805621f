"""Plans from buffer-protocol block ids (no per-id work in Python) and zero-copy read views."""

from __future__ import annotations

import ctypes
import gc
import importlib
from array import array
from typing import Any, List, cast

import pytest

import pdkv
from pdkv._ffi import PlanReadC

# numpy is optional for the package; these tests use it when present. Imported by name so that
# np is typed Any whether numpy is installed or not (CI runs mypy without it).
np: Any
try:
    np = importlib.import_module("numpy")
except ImportError:
    np = None



def kernel(logical: List[int]) -> List[int]:
    """FlashInfer kernel ids (131 per 2096-token block)."""
    return [b * 131 + j for b in logical for j in range(131)]


TOKENS = 3 * 2096 - 1


def groups(local: Any, remote: Any, mamba_local: Any = (7,), mamba_remote: Any = (9,)) -> List[pdkv.PlanGroup]:
    return [
        pdkv.PlanGroup(pdkv.GroupTrimInput(pdkv.GroupKind.MAMBA, mamba_local, mamba_remote,
                                           remote_computed_tokens=TOKENS), (0, 1, 2, 3, 4)),
        pdkv.PlanGroup(pdkv.GroupTrimInput(pdkv.GroupKind.ATTENTION, local, remote, remote_computed_tokens=TOKENS)),
    ]


LOCAL, REMOTE = kernel([3, 4, 10]), kernel([20, 5, 6])


def records(view: memoryview) -> ctypes.Array[PlanReadC]:
    """The ctypes array of ``pdkv_plan_read_t`` a rank_reads_view shows (its ``obj``)."""
    return cast("ctypes.Array[PlanReadC]", view.obj)


def test_buffers_give_the_plan_of_tuples(ctx: pdkv.PlanContext) -> None:
    want = ctx.compile(groups(tuple(LOCAL), tuple(REMOTE))).to_json()
    assert ctx.compile(groups(array("Q", LOCAL), array("Q", REMOTE))).to_json() == want
    assert ctx.compile(groups(memoryview(array("Q", LOCAL)), array("Q", REMOTE))).to_json() == want
    read_only = memoryview(array("Q", LOCAL).tobytes()).cast("Q")  # copied once, never per id
    assert read_only.readonly
    assert ctx.compile(groups(read_only, REMOTE)).to_json() == want
    # Signed or narrower buffers take the checked per-id path.
    assert ctx.compile(groups(array("q", LOCAL), array("l", REMOTE))).to_json() == want
    mamba = groups(array("Q", LOCAL), array("Q", REMOTE), array("Q", [7]), array("Q", [9]))
    assert ctx.compile(mamba).to_json() == want
    if np is not None:
        assert ctx.compile(groups(np.array(LOCAL, dtype=np.uint64), np.asarray(REMOTE, dtype=np.uint64))).to_json() == want


def test_buffer_ids_are_read_in_place_and_checked_by_the_library(ctx: pdkv.PlanContext) -> None:
    local = array("Q", LOCAL)
    local[131] = 0  # the null block: the library refuses it, naming it
    with pytest.raises(pdkv.CoverageError, match="null block"):
        ctx.compile(groups(local, array("Q", REMOTE)))
    with pytest.raises(pdkv.CoverageError):
        ctx.compile(groups(array("Q", LOCAL[:-131]), array("Q", REMOTE)))
    with pytest.raises(pdkv.InvalidArgumentError, match=r"local_blocks\[1\] = -5"):
        ctx.compile(groups(array("q", [3, -5]), array("Q", REMOTE)))
    if np is not None:
        with pytest.raises(TypeError, match="contiguous"):
            ctx.compile(groups(np.array(LOCAL + LOCAL, dtype=np.uint64)[::2], REMOTE))


def test_fast_path_errors_name_the_field(ctx: pdkv.PlanContext) -> None:
    bad = pdkv.GroupTrimInput(pdkv.GroupKind.ATTENTION, array("Q", LOCAL), array("Q", REMOTE),
                              remote_computed_tokens=1 << 64)
    with pytest.raises(pdkv.InvalidArgumentError, match="remote_computed_tokens"):
        ctx.compile([pdkv.PlanGroup(bad)])
    bad = pdkv.GroupTrimInput(pdkv.GroupKind.ATTENTION, array("Q", LOCAL), array("Q", REMOTE),
                              remote_computed_tokens=True)  # a bool is an int to mypy, not to pdkv
    with pytest.raises(TypeError, match="remote_computed_tokens"):
        ctx.compile([pdkv.PlanGroup(bad)])
    with pytest.raises(pdkv.InvalidArgumentError, match="kind"):
        ctx.compile([pdkv.PlanGroup(pdkv.GroupTrimInput(7, array("Q", LOCAL), array("Q", REMOTE),
                                                        remote_computed_tokens=TOKENS))])
    with pytest.raises(pdkv.InvalidArgumentError, match="region index 9"):
        ctx.compile([pdkv.PlanGroup(groups(LOCAL, REMOTE)[1].trim, (9,))])


def test_read_view_is_the_plans_memory_and_outlives_close(ctx: pdkv.PlanContext) -> None:
    plan = ctx.compile(groups(array("Q", LOCAL), array("Q", REMOTE)))
    ranks = plan.read_ranks()
    want = {r: plan.rank_reads(r) for r in ranks}
    views = {r: plan.rank_reads_view(r) for r in ranks}
    for r, v in views.items():
        assert v.readonly and v.nbytes == 40 * len(want[r]) and len(v) == len(want[r])
        assert [pdkv.PlanRead(x.local_region, x.local_offset, x.remote_region, x.remote_offset, x.length)
                for x in (records(v)[i] for i in range(len(v)))] == list(want[r])
    assert len(plan.rank_reads_view(3)) == 0  # D reads nothing from P rank 3
    plan.close()
    with pytest.raises(pdkv.ClosedError):
        plan.rank_reads_view(ranks[0])
    del plan
    gc.collect()
    for r, v in views.items():  # still the plan's bytes: freed only with the last view
        x = records(v)[len(v) - 1]
        assert (x.local_offset, x.length) == (want[r][-1].local_offset, want[r][-1].length)


@pytest.mark.skipif(np is None, reason="numpy not installed")
def test_numpy_reads(ctx: pdkv.PlanContext) -> None:
    plan = ctx.compile(groups(np.array(LOCAL, dtype=np.uint64), np.array(REMOTE, dtype=np.uint64)))
    for r in plan.read_ranks():
        a = plan.rank_reads_numpy(r)
        assert not a.flags.writeable and a.dtype.itemsize == 40
        assert [tuple(int(v) for v in row) for row in a.tolist()] == [
            (x.local_region, x.local_offset, x.remote_region, x.remote_offset, x.length) for x in plan.rank_reads(r)]
        assert int(a["length"].sum()) == plan.rank_bytes(r)


def test_buffer_groups_take_the_fast_path() -> None:
    from pdkv.plan import _groups_fast

    fast = _groups_fast(groups(array("Q", LOCAL), array("Q", REMOTE), array("Q", [7]), array("Q", [9])))
    assert fast is not None
    if np is not None:
        assert _groups_fast(groups(np.array(LOCAL, dtype=np.uint64), np.array(REMOTE, dtype=np.uint64))) is not None
    assert _groups_fast(groups(tuple(LOCAL), array("Q", REMOTE))) is None  # per-id checks for long tuples
    assert _groups_fast([pdkv.PlanGroup(pdkv.GroupTrimInput("attention", array("Q", LOCAL), array("Q", REMOTE)))]) is None


def request(local: List[int], remote: List[int], tokens: int, mamba: Any = (7, 9)) -> List[pdkv.PlanGroup]:
    """Mamba on 5 regions + attention over FlashInfer kernel ids of the given logical blocks."""
    return [
        pdkv.PlanGroup(pdkv.GroupTrimInput(pdkv.GroupKind.MAMBA, array("Q", [mamba[0]]), array("Q", [mamba[1]]),
                                           remote_computed_tokens=tokens), (0, 1, 2, 3, 4)),
        pdkv.PlanGroup(pdkv.GroupTrimInput(pdkv.GroupKind.ATTENTION, array("Q", kernel(local)),
                                           array("Q", kernel(remote)), remote_computed_tokens=tokens)),
    ]


def test_reuse_recompiles_the_same_plan_in_place(ctx: pdkv.PlanContext) -> None:
    plan = pdkv.TransferPlan.empty()
    info = plan.info()
    assert info.num_groups == 0 and info.empty and plan.read_ranks() == ()
    requests = [request([3, 4, 10], [20, 5, 6], TOKENS), request([3], [20], 2000, (11, 12)),
                request([30, 31, 32], [40, 41, 42], TOKENS - 500)]
    for rq in requests + requests[::-1]:  # larger, smaller, larger: stale content would show
        want = ctx.compile(rq)
        assert ctx.compile(rq, reuse=plan) is plan
        assert plan.to_json() == want.to_json()
        assert plan.group_zeros() == want.group_zeros()
        assert plan.info() == want.info()
        assert pdkv.TransferPlan.compile(ctx, rq, reuse=plan) is plan


def test_reuse_errors_leave_an_empty_plan(ctx: pdkv.PlanContext) -> None:
    plan = ctx.compile(groups(array("Q", LOCAL), array("Q", REMOTE)))
    with pytest.raises(pdkv.CoverageError):
        ctx.compile(groups(array("Q", LOCAL[:-131]), array("Q", REMOTE)), reuse=plan)
    assert plan.info().num_groups == 0 and plan.read_ranks() == ()
    assert ctx.compile(groups(array("Q", LOCAL), array("Q", REMOTE)), reuse=plan) is plan
    assert plan.info().num_groups == 2
    with pytest.raises(TypeError, match="reuse"):
        ctx.compile(groups(array("Q", LOCAL), array("Q", REMOTE)), reuse="plan")  # type: ignore[arg-type]


def test_reuse_never_rewrites_memory_a_view_shows(ctx: pdkv.PlanContext) -> None:
    plan = ctx.compile(groups(array("Q", LOCAL), array("Q", REMOTE)))
    r = plan.read_ranks()[0]
    want = plan.rank_reads(r)
    view = plan.rank_reads_view(r)
    other = ctx.compile(request([3], [20], 2000), reuse=plan)
    assert other is not plan  # a new plan: the view's memory stays as it was
    assert plan.rank_reads(r) == want
    x = records(view)[0]
    assert (x.local_offset, x.length) == (want[0].local_offset, want[0].length)
    plan.close()
    fresh = ctx.compile(request([3], [20], 2000), reuse=plan)  # closed: a new plan
    assert fresh is not plan and fresh.to_json() == other.to_json()


def test_checked_reuse_never_rewrites_a_view_taken_meanwhile(ctx: pdkv.PlanContext,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The checked path (groups given as an iterator) decides whether ``reuse`` may be rewritten
    in place once it holds the plan exclusively: a view another thread takes just before that
    (here: while the compile asks for the plan) keeps the plan from being rewritten under it."""
    import threading

    plan = ctx.compile(groups(array("Q", LOCAL), array("Q", REMOTE)))
    r = plan.read_ranks()[0]
    want = plan.rank_reads(r)
    views: List[memoryview] = []
    take = pdkv.TransferPlan._take

    def take_after_a_view(self: pdkv.TransferPlan) -> Any:
        if self is plan and not views:  # another thread takes a view at this point
            t = threading.Thread(target=lambda: views.append(plan.rank_reads_view(r)))
            t.start()
            t.join()
        return take(self)

    monkeypatch.setattr(pdkv.TransferPlan, "_take", take_after_a_view)
    other = ctx.compile(iter(request([3], [20], 2000)), reuse=plan)
    assert len(views) == 1
    assert other is not plan  # a new plan: the view's memory stays as it was
    assert plan.rank_reads(r) == want
    x = records(views[0])[0]
    assert (x.local_offset, x.length) == (want[0].local_offset, want[0].length)


def test_reuse_while_other_threads_read_the_plan(ctx: pdkv.PlanContext) -> None:
    import threading

    a = groups(array("Q", LOCAL), array("Q", REMOTE))
    b = request([3], [20], 2000, (11, 12))
    want = {ctx.compile(rq).to_json() for rq in (a, b)}
    plan = ctx.compile(a)
    stop = threading.Event()
    seen: List[str] = []
    errors: List[BaseException] = []

    def reader() -> None:
        try:
            while not stop.is_set():
                seen.append(plan.to_json())  # whole before or whole after a recompile, never torn
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for i in range(300):
        got = ctx.compile(a if i % 2 else b, reuse=plan)
        assert got.to_json() in want
    stop.set()
    for t in threads:
        t.join()
    assert not errors
    assert seen and set(seen) <= want


def test_numpy_is_optional(ctx: pdkv.PlanContext) -> None:
    """Without numpy (PDKV_TEST_WITHOUT_NUMPY=1 hides it) pdkv imports and plans, its plan reads
    are still a zero-copy memoryview, and only the numpy view fails, with ImportError; with numpy
    (as CI installs it), the numpy view is there."""
    from conftest import WITHOUT_NUMPY

    plan = ctx.compile(groups(array("Q", LOCAL), array("Q", REMOTE)))
    r = plan.read_ranks()[0]
    assert len(plan.rank_reads_view(r)) == len(plan.rank_reads(r)) > 0
    if WITHOUT_NUMPY:
        assert np is None
        with pytest.raises(ImportError):
            plan.rank_reads_numpy(r)
    elif np is not None:
        assert len(plan.rank_reads_numpy(r)) == len(plan.rank_reads(r))
