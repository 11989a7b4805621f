"""The engine-level fast path: Engine.prepare's planner and Engine.plan_request's generated
function plan exactly what the checked path (Engine._plan_request_checked: the request packed
call by call) plans (every form of ids, short and long id lists, new and reused plans), refuse
what it refuses with the same error, take their fast path for the usual forms, keep the engine
and the context alive for a call and refuse closed ones, and are safe to call from several
threads at once."""

from __future__ import annotations

import array
import threading
from typing import Any, Iterator, List, Tuple

import pytest

import pdkv
import pdkv.engine_planner as planner_module
from test_engine import EXAMPLE, Pair, _align, _forms, pair_of



@pytest.fixture
def pair() -> Iterator[Pair]:
    """test_engine's pair with 600 D and 1200 P blocks: room for a request whose attention lists
    pass the 256 ids a side that are copied into a group's own area."""
    yield from pair_of(600, 1200)


def _long(blocks: int) -> List[Tuple[Any, Any]]:
    """A request of `blocks` D blocks (consecutive ids, no hit; P TP4's blocks are 1056 tokens):
    its attention lists pass _COPY_IDS ids a side when blocks > 256, and go to the spill area."""
    groups: List[Tuple[Any, Any]] = []
    for g in range(4):  # Mamba: D's table (placeholders but the last), P's running state
        groups.append(([0] * (blocks - 1) + [1 + g], [1 + g]))
    p_blocks = -(-(blocks * 2096 - 1) // 1056)  # P's 1056-token blocks hold the N-1 tokens P computed
    groups.append((list(range(10, 10 + blocks)), list(range(10, 10 + p_blocks))))
    return groups


def _plan_or_error(fn: Any, *args: Any, **kwargs: Any) -> str:
    try:
        plan = fn(*args, **kwargs)
    except (pdkv.PdkvError, TypeError, ValueError) as e:
        return f"{type(e).__name__}: {e}"
    text = plan.to_json()
    if kwargs.get("reuse") is None:
        plan.close()
    return str(text)


def _requests() -> List[Tuple[str, Any, Any, Any]]:
    as_arrays = [(array.array("Q", loc), array.array("Q", rem)) for loc, rem in _long(300)]
    out: List[Tuple[str, Any, Any, Any]] = [(name, groups, 5001, 2096) for name, groups in _forms()]
    out += [
        ("tuple of groups", tuple((array.array("Q", l), array.array("Q", r)) for l, r in EXAMPLE), 5001, 2096),
        ("long lists", _long(300), 300 * 2096, 0),
        ("long arrays", as_arrays, 300 * 2096, 0),
        ("long and short", [(a, array.array("Q", [5])) if k < 4 else (a, b) for k, (a, b) in enumerate(as_arrays)],
         300 * 2096, 0),
        ("one token", [(array.array("Q", loc[:1]), array.array("Q", rem[:1])) for loc, rem in EXAMPLE], 1, 0),
        # Refused, each with the error Engine.plan_request names.
        ("four groups", EXAMPLE[:4], 5001, 2096),
        ("six groups", EXAMPLE + EXAMPLE[:1], 5001, 2096),
        ("hit not whole blocks", EXAMPLE, 5001, 100),
        ("id past the pool", EXAMPLE[:4] + [([9, 4, 5000], [1, 2, 3, 4, 5])], 5001, 2096),
        ("bool id", [([True, 0, 6], [6])] + EXAMPLE[1:], 5001, 2096),
        ("negative id", EXAMPLE[:4] + [([9, -4, 5], [1, 2, 3, 4, 5])], 5001, 2096),
        ("id 2**64", EXAMPLE[:4] + [([9, 4, 5], [1, 2, 3, 4, 1 << 64])], 5001, 2096),
        ("float id", EXAMPLE[:4] + [([9.0, 4, 5], [1, 2, 3, 4, 5])], 5001, 2096),
        ("float array", EXAMPLE[:4] + [(array.array("d", [9, 4, 5]), [1, 2, 3, 4, 5])], 5001, 2096),
        ("signed arrays", [(array.array("q", loc), array.array("l", rem)) for loc, rem in EXAMPLE], 5001, 2096),
        ("a group as a list", EXAMPLE[:4] + [[[9, 4, 5], [1]]], 5001, 2096),
        ("a group of three", EXAMPLE[:4] + [([9, 4, 5], [1], [2])], 5001, 2096),
        ("not a sequence", 5, 5001, 2096),
        ("negative hit", EXAMPLE, 5001, -1),
        ("prompt 2**64", EXAMPLE, 1 << 64, 0),
        ("float prompt", EXAMPLE, 5001.0, 2096),
        ("bool hit", EXAMPLE, 5001, True),
        ("no prompt", EXAMPLE, 0, 0),
    ]
    try:
        import numpy as np
    except ImportError:
        return out
    # numpy uint64 in its other buffer format ('Q', np.ulonglong): through the planner's loop.
    out.append(("numpy ulonglong", [(np.array(a, dtype=np.ulonglong), np.array(b, dtype=np.ulonglong))
                                    for a, b in EXAMPLE], 5001, 2096))
    out.append(("long numpy", [(np.array(a, dtype=np.uint64), np.array(b, dtype=np.uint64)) for a, b in _long(300)],
                300 * 2096, 0))
    return out


def test_plans_what_plan_request_plans_and_refuses_what_it_refuses(pair: Pair) -> None:
    _, d, _, ctx = pair
    planner = d.prepare(ctx)
    assert planner.engine is d and planner.context is ctx
    reuse = pdkv.TransferPlan.empty()
    reuse_by_method = pdkv.TransferPlan.empty()  # the same requests in the same order
    planned = 0
    for name, groups, n, hit in _requests():
        want = _plan_or_error(d._plan_request_checked, ctx, groups, n, hit)
        assert _plan_or_error(planner.plan, groups, n, hit) == want, name
        assert _plan_or_error(d.plan_request, ctx, groups, n, hit) == want, name
        assert _plan_or_error(planner.plan, groups, n, hit, reuse=reuse) == want, name
        # What a refusal leaves in the reused plan too: empty after the library refused, as it
        # was after a refusal in Python (a wrong type, a value out of range).
        _plan_or_error(d._plan_request_checked, ctx, groups, n, hit, reuse=reuse_by_method)
        assert reuse.to_json() == reuse_by_method.to_json(), name
        planned += want.startswith("{")
        # Through the class (the method calls the instance's generated function).
        assert _plan_or_error(pdkv.EnginePlanner.plan, planner, groups, n, hit) == want, name
    assert planned >= 12  # the cases above that plan, so the comparison is not of errors alone
    reuse_by_method.close()
    reuse.close()


def test_the_usual_forms_take_the_fast_path(pair: Pair, monkeypatch: pytest.MonkeyPatch) -> None:
    """array('Q') (short or long), lists of ints, RequestGroup, numpy uint64 arrays (numpy
    imported before the planner was made): neither the planner nor Engine.plan_request calls
    the checked path."""
    _, d, _, ctx = pair
    want = {}
    fast = ["array('Q')", "lists", "tuples of tuples", "RequestGroup", "long lists", "long arrays", "long and short",
            "one token", "tuple of groups", "numpy uint64", "long numpy", "numpy ulonglong", "memoryview"]
    cases = [c for c in _requests() if c[0] in fast]  # (numpy imported here when present: before prepare)
    assert {c[0] for c in cases} >= set(fast) - {"numpy uint64", "long numpy", "numpy ulonglong"}  # (numpy: optional)
    for name, groups, n, hit in cases:
        want[name] = _plan_or_error(d._plan_request_checked, ctx, groups, n, hit)
    planner = d.prepare(ctx)

    def slow(*args: Any) -> None:
        raise AssertionError("Engine._plan_request_checked was called")

    monkeypatch.setattr(pdkv.Engine, "_plan_request_checked", slow)
    with pdkv.TransferPlan.empty() as reuse:
        for name, groups, n, hit in cases:
            assert _plan_or_error(planner.plan, groups, n, hit) == want[name], name
            assert planner.plan(groups, n, hit, reuse=reuse) is reuse
            assert reuse.to_json() == want[name], name
            # Engine.plan_request itself: its own generated function, the same fast forms.
            assert _plan_or_error(d.plan_request, ctx, groups, n, hit) == want[name], name
            assert d.plan_request(ctx, groups, n, hit, reuse=reuse) is reuse
            assert reuse.to_json() == want[name], name

    # All arrays or all lists: the generated function's own forms, without its loop (_other,
    # which takes the mixed forms: a RequestGroup of an array and a list, tuples of ints).
    def loop(*args: Any) -> None:
        raise AssertionError("the planner's loop was taken")

    monkeypatch.setattr(planner_module, "_other", loop)
    for name, groups, n, hit in cases:
        if name not in ("tuples of tuples", "RequestGroup", "numpy ulonglong", "memoryview"):
            assert _plan_or_error(planner.plan, groups, n, hit) == want[name], name


def test_long_ids_are_copied_not_pinned(pair: Pair) -> None:
    """A long array is copied into the planner's spill area (it can be resized after the call,
    planned or refused; the spill area keeps one chunk), and a refusal does not keep the error
    object of the call."""
    _, d, _, ctx = pair
    groups = [(array.array("Q", loc), array.array("Q", rem)) for loc, rem in _long(300)]
    planner = d.prepare(ctx)
    with planner.plan(groups, 300 * 2096, 0):
        pass
    groups[4][0].append(599)  # BufferError if still pinned
    groups[4][0].pop()
    groups[4][0][5] = 5000
    with pytest.raises(pdkv.InvalidArgumentError, match="= 5000 is not one of D's 600 logical blocks"):
        planner.plan(groups, 300 * 2096, 0)
    groups[4][0].append(599)  # and after a refusal
    groups[4][0].pop()
    groups[4][0][5] = 15
    assert planner._pk is not None
    spill = planner._pk.spill
    assert spill.used == 0 and len(spill.chunks) == 1
    with planner.plan(groups, 300 * 2096, 0) as plan:
        assert plan.info().bytes > 0


def test_spill_chunks_never_move_during_a_call(pair: Pair, monkeypatch: pytest.MonkeyPatch) -> None:
    """With a first chunk of 64 ids, one long request fills several chunks in one call: every
    copy keeps its address (a chunk is never reallocated under a copy already made), the plan is
    plan_request's, and afterwards only the largest chunk is kept."""
    _, d, _, ctx = pair
    monkeypatch.setattr(planner_module, "_SPILL_MIN", 64)
    planner = d.prepare(ctx)
    for name, groups, n, hit in _requests():
        if name.startswith("long"):
            want = _plan_or_error(d._plan_request_checked, ctx, groups, n, hit)
            assert want.startswith("{")
            assert _plan_or_error(planner.plan, groups, n, hit) == want, name
            assert planner._pk is not None
            spill = planner._pk.spill
            assert spill.used == 0 and len(spill.chunks) == 1 and spill.size >= 596, name


def test_reuse_rules_are_those_of_plan_request(pair: Pair) -> None:
    _, d, _, ctx = pair
    planner = d.prepare(ctx)
    small = [(array.array("Q", loc[:1]), array.array("Q", rem[:1])) for loc, rem in EXAMPLE]
    with planner.plan(EXAMPLE, 5001, 2096) as fresh:
        want = fresh.to_json()
    reuse = pdkv.TransferPlan.empty()
    assert planner.plan(EXAMPLE, 5001, 2096, reuse=reuse) is reuse
    view = reuse.rank_reads_view(0)  # views taken: never rewritten again
    other = planner.plan(small, 1, 0, reuse=reuse)
    assert other is not reuse and reuse.to_json() == want and len(view) > 0
    other.close()
    del view
    reuse.close()
    with planner.plan(small, 1, 0, reuse=reuse) as other:  # closed: a new plan
        assert other is not reuse
    with pytest.raises(TypeError, match="reuse must be a pdkv.TransferPlan"):
        planner.plan(EXAMPLE, 5001, 2096, reuse="plan")  # type: ignore[arg-type]


def test_closed_engine_or_context(pair: Pair) -> None:
    model, d, remote, ctx = pair
    with pytest.raises(TypeError, match="ctx must be a pdkv.PlanContext"):
        d.prepare(remote[0])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="engine must be a pdkv.Engine"):
        pdkv.EnginePlanner(ctx, ctx)  # type: ignore[arg-type]
    e2 = pdkv.Engine(model, _align(2), "decode", 0, 600)
    c2 = e2.plan_context(remote, _align(4))
    c2b = e2.plan_context(remote, _align(4))
    p_ctx = e2.prepare(c2)
    p_eng = e2.prepare(c2b)
    with p_ctx.plan(EXAMPLE, 5001, 2096) as plan:
        want = plan.to_json()
    c2.close()
    with pytest.raises(pdkv.ClosedError, match="PlanContext"):
        p_ctx.plan(EXAMPLE, 5001, 2096)
    e2.close()
    with pytest.raises(pdkv.ClosedError, match="Engine"):
        p_eng.plan(EXAMPLE, 5001, 2096)
    with pytest.raises(pdkv.ClosedError, match="Engine"):
        e2.plan_request(c2b, EXAMPLE, 5001, 2096)
    c2b.close()
    with pytest.raises(pdkv.ClosedError):
        e2.prepare(ctx)
    c3 = d.plan_context(remote, _align(4))
    c3.close()
    with pytest.raises(pdkv.ClosedError):
        d.prepare(c3)
    assert d.prepare(ctx).plan(EXAMPLE, 5001, 2096).to_json() == want


def test_engine_closed_during_a_call_stays_alive_until_it_returns(pair: Pair, monkeypatch: pytest.MonkeyPatch) -> None:
    """close() from inside the C call (a stand-in function that closes both handles, then calls
    the library): the call holds their owners, so the C objects are freed after it returns."""
    model, _, remote, _ = pair
    e2 = pdkv.Engine(model, _align(2), "decode", 0, 600)
    c2 = e2.plan_context(remote, _align(4))
    planner = e2.prepare(c2)
    real = planner_module._into_functions()

    def closing(*args: Any) -> int:
        c2.close()
        e2.close()
        return int(real[1](*args))

    monkeypatch.setattr(planner_module, "_INTO", [])
    monkeypatch.setattr(planner_module, "_into_functions", lambda: [closing, closing])
    planner2 = e2.prepare(c2)
    with planner2.plan(EXAMPLE, 5001, 2096) as plan:
        assert plan.info().bytes > 0
    with pytest.raises(pdkv.ClosedError):
        planner.plan(EXAMPLE, 5001, 2096)


def test_threads_plan_through_one_planner(pair: Pair) -> None:
    """Eight threads plan at once through one planner, each into its own reused plan and
    sometimes a new one, some requests refused: every result equals the request planned alone."""
    _, d, _, ctx = pair
    planner = d.prepare(ctx)
    requests = [(name, g, n, h) for name, g, n, h in _requests() if name not in ("not a sequence",)]
    want = [_plan_or_error(d._plan_request_checked, ctx, g, n, h) for _, g, n, h in requests]
    failures: List[str] = []

    def worker(k: int) -> None:
        with pdkv.TransferPlan.empty() as reuse:
            for round_ in range(6):
                for j, (name, g, n, h) in enumerate(requests):
                    kwargs = {"reuse": reuse} if (j + k + round_) % 3 else {}
                    if (j + round_) % 2:
                        got = _plan_or_error(planner.plan, g, n, h, **kwargs)
                    else:  # Engine.plan_request's own generated function, from every thread too
                        got = _plan_or_error(d.plan_request, ctx, g, n, h, **kwargs)
                    if got != want[j]:
                        failures.append(f"thread {k} {name}")

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures
