"""The engine-level API (pdkv.Engine): groups, metadata, descriptors, a request's plan equal to
the low-level plan built by hand, block ids from buffers, refusals that say what to pass, and the
handle contract (context manager, idempotent close)."""

from __future__ import annotations

import array
import json
from typing import Iterator, List, Tuple

import pytest

import pdkv


def _align(tp: int) -> pdkv.EngineConfig:
    return pdkv.EngineConfig(tp_size=tp, mamba_cache_mode="align")


#: (the model, D's engine, P's rank metadata, the plan context of the two).
Pair = Tuple[pdkv.Model, pdkv.Engine, List[pdkv.EngineMetadata], pdkv.PlanContext]


def pair_of(d_blocks: int, p_blocks: int) -> Iterator[Pair]:
    """Nemotron-3-Nano, P TP4 -> D TP2 rank 0, align mode, with these pools of logical blocks:
    D's engine, P's metadata, the context; closed after the yield."""
    model = pdkv.Model.from_preset("nemotron-3-nano-30b")
    d = pdkv.Engine(model, _align(2), "decode", 0, d_blocks)
    remote: List[pdkv.EngineMetadata] = []
    for r in range(4):
        with pdkv.Engine(model, _align(4), "prefill", r, p_blocks) as p:
            remote.append(p.metadata())
    ctx = d.plan_context(remote, _align(4))
    yield model, d, remote, ctx
    for h in [ctx, d, model, *remote]:
        h.close()


@pytest.fixture
def pair() -> Iterator[Pair]:
    """pair_of(16, 16)."""
    yield from pair_of(16, 16)


# The request of the engine examples: a 5001-token prompt, D holds the first 2096 tokens.
EXAMPLE = [([10, 0, 6], [6]), ([11, 0, 7], [7]), ([12, 0, 13], [8]), ([14, 0, 15], [9]),
           ([9, 4, 5], [1, 2, 3, 4, 5])]


def test_groups_info_and_metadata(pair: Pair) -> None:
    model, d, _, _ = pair
    info = d.info()
    assert (info.num_groups, info.num_regions, info.tp_size, info.tp_rank) == (5, 6, 2, 0)
    assert info.cache_mode == pdkv.MambaCacheMode.ALIGN and info.prefix_caching
    assert info.logical_block_size == 2096 and info.num_logical_blocks == 16
    groups = d.groups()
    assert [g.kind for g in groups] == [pdkv.GroupKind.MAMBA] * 4 + [pdkv.GroupKind.ATTENTION]
    pattern = model.describe().layer_pattern
    mamba = [i for i, c in enumerate(pattern) if c == "M"]
    assert groups[0].layers == tuple(mamba[0::4])
    assert groups[4].layers == tuple(i for i, c in enumerate(pattern) if c == "*")
    assert groups[4].regions == tuple(range(6))
    with pytest.raises(pdkv.OutOfBoundsError, match="count 5"):
        d.group(5)
    layout = pdkv.EngineLayout(engine_id="decode", tp_rank=0, num_logical_blocks=16, num_regions=6)
    with d.metadata() as md, pdkv.EngineMetadata.from_model(model, _align(2), layout) as hand:
        assert md == hand
    with d.registration_descriptors() as descs:
        items = descs.items()
    assert len(items) > 6 * 16 and items[0].addr == 1 << 40


def test_plan_equals_the_low_level_plan(pair: Pair) -> None:
    model, d, remote, ctx = pair
    groups = [pdkv.RequestGroup(array.array("Q", loc), array.array("Q", rem)) for loc, rem in EXAMPLE]
    with d.plan_request(ctx, groups, 5001, 2096) as plan:
        engine_json = plan.to_json()
        assert plan.info().mamba_bytes > 0 and plan.info().attention_bytes > 0
    # By hand: P computed 5000 tokens (N-1); D's unhashed attention blocks after its 2096-token
    # hit (one block; ppl 1 with FlashAttention); each Mamba group's running state.
    computed, hit = 5000, 2096
    hand = []
    for g, (loc, rem) in zip(d.groups(), EXAMPLE):
        if g.kind == pdkv.GroupKind.ATTENTION:
            t = pdkv.GroupTrimInput(kind="attention", local_blocks=loc[1:], remote_blocks=rem,
                                    remote_computed_tokens=computed, local_hit_tokens=hit, local_first_block=1)
        else:
            t = pdkv.GroupTrimInput(kind="mamba", cache_mode="align", local_blocks=[loc[-1]], remote_blocks=rem,
                                    remote_computed_tokens=computed, local_hit_tokens=hit)
        hand.append(pdkv.PlanGroup(t, g.regions))
    with d.metadata() as md, pdkv.Geometry(model, _align(2)) as dg, pdkv.Geometry(model, _align(4)) as pg, \
            pdkv.PlanContext(md, remote, dg, pg) as low, low.compile(hand) as plan:
        assert plan.to_json() == engine_json
    # Tuples of (list, list) work too, with the same result.
    with d.plan_request(ctx, EXAMPLE, 5001, 2096) as plan:
        assert plan.to_json() == engine_json


def test_shared_vector_of_the_examples(pair: Pair) -> None:
    from conftest import VECTORS_DIR

    cases = json.loads((VECTORS_DIR / "engine.json").read_text())["cases"]
    case = next(c for c in cases if c["name"] == "engine_plan/example_nano_config_json_p4_d2_align_prefix_hit")
    assert [(g["local"], g["remote"]) for g in case["input"]["request"]["groups"]] == EXAMPLE
    _, d, _, ctx = pair
    with d.plan_request(ctx, EXAMPLE, 5001, 2096) as plan:
        assert plan.to_json().split("\n") == case["output"]["lines"]


def test_refusals_say_what_to_pass(pair: Pair) -> None:
    model, d, remote, ctx = pair
    with pytest.raises(pdkv.InvalidArgumentError, match="5 KV-cache groups"):
        d.plan_request(ctx, EXAMPLE[:4], 5001, 2096)
    with pytest.raises(pdkv.InvalidArgumentError, match="not a multiple"):
        d.plan_request(ctx, EXAMPLE, 5001, 100)
    bad = EXAMPLE[:4] + [([9, 4, 500], [1, 2, 3, 4, 5])]
    with pytest.raises(pdkv.InvalidArgumentError, match=r"local_block_ids\[2\] \(attention group\) = 500"):
        d.plan_request(ctx, bad, 5001, 2096)
    with pdkv.Engine(model, pdkv.EngineConfig(tp_size=2), "decode", 0, 16) as off:
        with pytest.raises(pdkv.InvalidArgumentError, match="prefix caching is off"):
            with off.plan_context(remote, _align(4)) as c2:
                off.plan_request(c2, EXAMPLE, 5001, 2096)
    with pytest.raises(pdkv.InvalidArgumentError, match="tp_size 4"):
        d.plan_context(remote, _align(2))
    with pytest.raises(pdkv.InvalidArgumentError, match="num_region_bases = 2"):
        pdkv.Engine(model, _align(2), region_bases=[1 << 40, 2 << 40])
    with pytest.raises(TypeError):
        d.plan_request(ctx, [1, 2], 10)  # type: ignore[list-item]  # ints, not groups: refused
    with pytest.raises(pdkv.InvalidArgumentError, match="out of range"):
        d.plan_request(ctx, EXAMPLE, -1)


def test_block_ids_from_buffers_are_not_copied_per_element(pair: Pair) -> None:
    _, d, _, ctx = pair
    # A memoryview over array('Q') and a bytes-backed read-only buffer both reach C as buffers.
    groups = [(memoryview(array.array("Q", loc)), memoryview(array.array("Q", rem)).toreadonly()) for loc, rem in EXAMPLE]
    with d.plan_request(ctx, groups, 5001, 2096) as a, d.plan_request(ctx, EXAMPLE, 5001, 2096) as b:
        assert a.to_json() == b.to_json()
    # A signed buffer is not taken as ids in place; its negative value is refused by name.
    with pytest.raises(pdkv.InvalidArgumentError, match=r"groups\[4\].local_block_ids\[0\] = -1"):
        d.plan_request(ctx, EXAMPLE[:4] + [(array.array("q", [-1, 4, 5]), [1, 2, 3, 4, 5])], 5001, 2096)


def test_close_is_idempotent_and_closed_handles_raise() -> None:
    model = pdkv.Model.from_preset("nemotron-3-nano-30b")
    with pdkv.Engine(model, _align(2)) as e:
        assert not e.closed
    assert e.closed
    e.close()
    with pytest.raises(pdkv.ClosedError):
        e.info()
    model.close()


def test_plan_request_into_a_reused_plan(pair: Pair) -> None:
    """reuse=: the plan is planned into in place (pdkv_engine_plan_request_into) and returned,
    planning what a new plan holds; a refusal leaves it empty and reusable; a plan it must not
    rewrite (views taken, closed) is left as it is and a new plan returned."""
    _, d, _, ctx = pair
    with d.plan_request(ctx, EXAMPLE, 5001, 2096) as fresh:
        want = fresh.to_json()
    small = [(loc[:1], rem[:1]) for loc, rem in EXAMPLE]  # 1 token: a different, smaller plan
    reuse = pdkv.TransferPlan.empty()
    try:
        assert d.plan_request(ctx, small, 1, 0, reuse=reuse) is reuse
        small_json = reuse.to_json()
        assert small_json != want
        assert d.plan_request(ctx, EXAMPLE, 5001, 2096, reuse=reuse) is reuse
        assert reuse.to_json() == want
        # A refusal: the same error as without reuse, and the plan holds nothing.
        with pytest.raises(pdkv.InvalidArgumentError, match="not a multiple"):
            d.plan_request(ctx, EXAMPLE, 5001, 100, reuse=reuse)
        info = reuse.info()
        assert (info.bytes, info.num_groups) == (0, 0)
        assert d.plan_request(ctx, EXAMPLE, 5001, 2096, reuse=reuse) is reuse
        assert reuse.to_json() == want
        # Views were taken: their memory must stay, so a new plan comes back.
        view = reuse.rank_reads_view(0)
        other = d.plan_request(ctx, small, 1, 0, reuse=reuse)
        with other:
            assert other is not reuse and other.to_json() == small_json
        assert reuse.to_json() == want and len(view) > 0
        del view
    finally:
        reuse.close()
    # A closed plan is not written either.
    with d.plan_request(ctx, small, 1, 0, reuse=reuse) as other:
        assert other is not reuse and other.to_json() == small_json
    with pytest.raises(TypeError, match="reuse must be a pdkv.TransferPlan"):
        d.plan_request(ctx, EXAMPLE, 5001, 2096, reuse="plan")  # type: ignore[arg-type]


def _forms() -> List[Tuple[str, object]]:
    """EXAMPLE's groups in every form a caller may hold block ids in."""
    forms: List[Tuple[str, object]] = [
        ("lists", EXAMPLE),
        ("tuples of tuples", [(tuple(loc), tuple(rem)) for loc, rem in EXAMPLE]),
        ("array('Q')", [(array.array("Q", loc), array.array("Q", rem)) for loc, rem in EXAMPLE]),
        ("RequestGroup", [pdkv.RequestGroup(array.array("Q", loc), list(rem)) for loc, rem in EXAMPLE]),
        ("memoryview", [(memoryview(array.array("Q", loc)), memoryview(array.array("Q", rem)).toreadonly())
                        for loc, rem in EXAMPLE]),
        ("bytes-backed", [(memoryview(array.array("Q", loc).tobytes()).cast("Q"), rem) for loc, rem in EXAMPLE]),
        ("empty remote", [(loc, array.array("Q")) if k < 4 else (loc, rem) for k, (loc, rem) in enumerate(EXAMPLE)]),
    ]
    try:
        import numpy as np
    except ImportError:
        return forms
    forms.append(("numpy uint64", [(np.array(loc, dtype=np.uint64), np.array(rem, dtype=np.uint64))
                                   for loc, rem in EXAMPLE]))
    return forms


def test_every_form_of_ids_is_packed_without_per_element_work(pair: Pair, monkeypatch: pytest.MonkeyPatch) -> None:
    """Lists of ints, tuples, array('Q') and unsigned 64-bit buffers are copied into one packed
    request (array-level copies, no Python loop over ids) and plan exactly what the
    element-by-element path plans from them."""
    import pdkv.engine as engine_module

    _, d, _, ctx = pair
    expected = {}
    with monkeypatch.context() as m:
        m.setattr(engine_module, "_packed_request", lambda *args: None)
        for name, groups in _forms():
            try:
                with d._plan_request_checked(ctx, groups, 5001, 2096) as plan:  # type: ignore[arg-type]
                    expected[name] = plan.to_json()
            except pdkv.PdkvError as e:
                expected[name] = repr(e)

    def unpacked(*args: object) -> None:
        raise AssertionError("the element-by-element path was taken")

    monkeypatch.setattr(engine_module, "_request_struct", unpacked)
    reuse = pdkv.TransferPlan.empty()
    for name, groups in _forms():
        try:
            with d._plan_request_checked(ctx, groups, 5001, 2096) as plan:  # type: ignore[arg-type]
                got = plan.to_json()
        except pdkv.PdkvError as e:
            got = repr(e)
        assert got == expected[name], name
        if "empty" not in name:  # and into a reused plan, through the untyped _into call
            assert d._plan_request_checked(ctx, groups, 5001, 2096, reuse=reuse) is reuse  # type: ignore[arg-type]
            assert reuse.to_json() == got, name
    reuse.close()
    # An empty list reaches C as NULL with count 0 on both paths (here refused for its content).
    assert "P's list of 0 blocks" in expected["empty remote"]


def test_ids_the_packing_refuses_go_element_by_element(pair: Pair) -> None:
    """What array('Q') would accept but pdkv refuses (bools), or cannot hold (negative, 2**64),
    or only the element path names (floats, signed buffers), keeps its named error or result."""
    _, d, _, ctx = pair
    bad_bool = [([True, 0, 6], [6])] + EXAMPLE[1:]
    with pytest.raises(TypeError, match=r"groups\[0\].local_block_ids\[0\] must be an int, got bool"):
        d.plan_request(ctx, bad_bool, 5001, 2096)
    negative = EXAMPLE[:4] + [([9, -4, 5], [1, 2, 3, 4, 5])]
    with pytest.raises(pdkv.InvalidArgumentError, match=r"groups\[4\].local_block_ids\[1\] = -4 is out of range"):
        d.plan_request(ctx, negative, 5001, 2096)
    huge = EXAMPLE[:4] + [([9, 4, 5], [1, 2, 3, 4, 1 << 64])]
    with pytest.raises(pdkv.InvalidArgumentError, match=r"groups\[4\].remote_block_ids\[4\] = 18446744073709551616"):
        d.plan_request(ctx, huge, 5001, 2096)
    floats = EXAMPLE[:4] + [([9.0, 4, 5], [1, 2, 3, 4, 5])]
    with pytest.raises(TypeError, match=r"groups\[4\].local_block_ids\[0\] must be an int, got float"):
        d.plan_request(ctx, floats, 5001, 2096)
    with pytest.raises(TypeError, match="must be a pdkv.RequestGroup"):
        d.plan_request(ctx, EXAMPLE[:4] + [[[9, 4, 5], [1]]], 5001, 2096)  # type: ignore[list-item]
    # Signed arrays of valid ids plan as the lists do.
    signed = [(array.array("q", loc), array.array("l", rem)) for loc, rem in EXAMPLE]
    with d.plan_request(ctx, signed, 5001, 2096) as a, d.plan_request(ctx, EXAMPLE, 5001, 2096) as b:
        assert a.to_json() == b.to_json()
    with pytest.raises(pdkv.InvalidArgumentError, match="num_local_computed_tokens = -1"):
        d.plan_request(ctx, EXAMPLE, 5001, -1)
    with pytest.raises(TypeError, match="num_prompt_tokens must be an int"):
        d.plan_request(ctx, EXAMPLE, 5001.0, 2096)  # type: ignore[arg-type]


def test_plan_request_holds_the_context_and_refuses_a_closed_one(pair: Pair) -> None:
    """The context is held through its owner for the call: a closed one raises ClosedError, a
    wrong type TypeError, with and without reuse."""
    _, d, remote, ctx = pair
    c2 = d.plan_context(remote, _align(4))
    with d.plan_request(c2, EXAMPLE, 5001, 2096) as plan:
        want = plan.to_json()
    c2.close()
    with pdkv.TransferPlan.empty() as reuse:
        for kwargs in ({}, {"reuse": reuse}):
            with pytest.raises(pdkv.ClosedError):
                d.plan_request(c2, EXAMPLE, 5001, 2096, **kwargs)  # type: ignore[arg-type]
            with pytest.raises(TypeError, match="ctx must be a pdkv.PlanContext"):
                d.plan_request(remote[0], EXAMPLE, 5001, 2096, **kwargs)  # type: ignore[arg-type]
        assert d.plan_request(ctx, EXAMPLE, 5001, 2096, reuse=reuse).to_json() == want
