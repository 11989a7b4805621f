"""Prepared requests (PlanContext.prepare): the plan ctx.compile gives for the same groups, from
block ids and token counts alone; errors name the request argument; safe from many threads."""

from __future__ import annotations

import importlib
import threading
from array import array
from typing import Any, List

import pytest

import pdkv

# numpy is optional for the package; these tests use it when present. Imported by name so that
# np is typed Any whether numpy is installed or not (CI runs mypy without it).
np: Any
try:
    np = importlib.import_module("numpy")
except ImportError:
    np = None

PPL = 131  # FlashInfer kernel blocks per 2096-token block on both sides (TP2 and TP4)



def layout(logical: bool) -> List[pdkv.PlanGroup]:
    """The engine's groups: two Mamba groups (the second on regions 0-4) and attention, whose
    ids are logical (kernel_blocks_per_id = PPL) or kernel ids."""
    k = PPL if logical else 1
    return [
        pdkv.PlanGroup(pdkv.GroupTrimInput(pdkv.GroupKind.MAMBA)),
        pdkv.PlanGroup(pdkv.GroupTrimInput(pdkv.GroupKind.MAMBA), (0, 1, 2, 3, 4)),
        pdkv.PlanGroup(pdkv.GroupTrimInput(pdkv.GroupKind.ATTENTION, local_kernel_blocks_per_id=k,
                                           remote_kernel_blocks_per_id=k)),
    ]


def full(logical: bool, local: List[Any], remote: List[Any], computed: int, hits: List[int]) -> List[pdkv.PlanGroup]:
    """The same request as whole PlanGroups, for ctx.compile."""
    out = []
    for g, lb, rb, hit in zip(layout(logical), local, remote, hits):
        t = g.trim
        out.append(pdkv.PlanGroup(pdkv.GroupTrimInput(
            t.kind, tuple(lb), tuple(rb), remote_computed_tokens=computed, local_hit_tokens=hit,
            local_kernel_blocks_per_id=t.local_kernel_blocks_per_id,
            remote_kernel_blocks_per_id=t.remote_kernel_blocks_per_id), g.regions))
    return out


def kernel(logical: List[int]) -> List[int]:
    return [b * PPL + j for b in logical for j in range(PPL)]


CASES = [  # (D logical ids, P logical ids, computed tokens, hit tokens per group)
    ([3, 4, 10], [20, 5, 6], 3 * 2096 - 1, [0, 0, 0]),
    ([11, 12], [30, 31, 32], 3 * 2096 - 1, [2096, 2096, 2096]),
    ([40], [50, 51, 52, 53], 4 * 2096 - 1, [3 * 2096, 0, 3 * 2096]),  # divergent per-group hits
]
# Nine blocks a side: as kernel ids 1,179 a side, more than plan_request._COPY_IDS.
LONG = ([3, 4, 10, 11, 12, 13, 14, 15, 16], [20, 5, 6, 7, 8, 9, 30, 31, 32], 9 * 2096 - 1, [0, 0, 0])


@pytest.mark.parametrize("logical", [True, False])
def test_prepared_plans_equal_full_compiles(ctx: pdkv.PlanContext, logical: bool) -> None:
    req = ctx.prepare(layout(logical))
    assert req.num_groups == 3
    plan = pdkv.TransferPlan.empty()
    for d_ids, p_ids, computed, hits in CASES:
        attn_l = d_ids if logical else kernel(d_ids)
        attn_r = p_ids if logical else kernel(p_ids)
        local = [[60], [61], attn_l]
        remote = [[62], [63], attn_r]
        want = ctx.compile(full(logical, local, remote, computed, hits)).to_json()
        as_arrays = ([array("Q", x) for x in local], [array("Q", x) for x in remote])
        assert req.compile(*as_arrays, computed, hits).to_json() == want
        assert req.compile(local, remote, computed, hits, reuse=plan) is plan
        assert plan.to_json() == want
        if np is not None:
            npl = [np.asarray(x, dtype=np.uint64) for x in local]
            npr = [np.asarray(x, dtype=np.uint64) for x in remote]
            assert req.compile(npl, npr, computed, hits).to_json() == want
        if len(set(hits)) == 1:  # one count for every group
            assert req.compile(local, remote, computed, hits[0]).to_json() == want


@pytest.mark.skipif(np is None, reason="numpy is not installed (optional)")
def test_long_numpy_ids_are_read_in_place(ctx: pdkv.PlanContext, monkeypatch: pytest.MonkeyPatch) -> None:
    """numpy uint64 id arrays of more than _COPY_IDS ids (kernel ids: 1,179 a side here) are pinned and
    read in place by the usual request's numpy form, not sent group by group; a read-only one
    still plans (group by group, copied)."""
    import pdkv.plan_request as plan_request_module

    def group_by_group(*args: Any) -> None:
        raise AssertionError("the numpy ids went group by group")

    monkeypatch.setattr(plan_request_module, "_other_ids", group_by_group)
    req = ctx.prepare(layout(False))  # (its group-by-group function takes _other_ids now)
    d_ids, p_ids, computed, hits = LONG
    local = [[60], [61], kernel(d_ids)]
    remote = [[62], [63], kernel(p_ids)]
    want = ctx.compile(full(False, local, remote, computed, hits)).to_json()
    npl = [np.asarray(x, dtype=np.uint64) for x in local]
    npr = [np.asarray(x, dtype=np.uint64) for x in remote]
    assert len(npl[2]) > plan_request_module._COPY_IDS
    with pdkv.TransferPlan.empty() as plan:
        assert req.compile(npl, npr, computed, hits, reuse=plan) is plan
        assert plan.to_json() == want
        monkeypatch.undo()
        readonly = npl[2].copy()
        readonly.flags.writeable = False
        req2 = ctx.prepare(layout(False))
        assert req2.compile(npl[:2] + [readonly], npr, computed, hits).to_json() == want


def test_logical_and_kernel_ids_plan_alike(ctx: pdkv.PlanContext) -> None:
    d_ids, p_ids, computed, hits = CASES[0]
    by_logical = ctx.prepare(layout(True)).compile([[60], [61], d_ids], [[62], [63], p_ids], computed, hits)
    by_kernel = ctx.prepare(layout(False)).compile([[60], [61], kernel(d_ids)], [[62], [63], kernel(p_ids)],
                                                    computed, hits)
    assert by_logical.to_json() == by_kernel.to_json()


def test_request_errors_name_the_argument(ctx: pdkv.PlanContext) -> None:
    req = ctx.prepare(layout(True))
    ok_l, ok_r = [[60], [61], [3, 4, 10]], [[62], [63], [20, 5, 6]]
    with pytest.raises(ValueError, match="3 groups: pass 3 local_blocks and 3 remote_blocks"):
        req.compile(ok_l[:2], ok_r, 100)
    with pytest.raises(ValueError, match="hit_tokens: pass one count or 3"):
        req.compile(ok_l, ok_r, 100, [0, 0])
    with pytest.raises(pdkv.InvalidArgumentError, match="computed_tokens"):
        req.compile(ok_l, ok_r, -1)
    with pytest.raises(pdkv.InvalidArgumentError, match=r"hit_tokens\[1\]"):
        req.compile(ok_l, ok_r, 100, [0, -3, 0])
    with pytest.raises(pdkv.InvalidArgumentError, match=r"local_blocks\[2\]\[1\] = -4"):
        req.compile([[60], [61], [3, -4]], ok_r, 100)
    with pytest.raises(TypeError, match=r"remote_blocks\[0\]"):
        req.compile(ok_l, [None, [63], [1]], 100)
    # The library's own errors come through unchanged: D's list misses tokens it must receive.
    with pytest.raises(pdkv.CoverageError, match="local blocks do not cover token"):
        req.compile([[60], [61], [3]], ok_r, 3 * 2096 - 1)
    with pytest.raises(TypeError, match="non-empty list"):
        ctx.prepare([])
    with pytest.raises(pdkv.InvalidArgumentError, match="cache_mode"):
        ctx.prepare([pdkv.PlanGroup(pdkv.GroupTrimInput(pdkv.GroupKind.MAMBA, cache_mode=7))])


def test_many_threads_share_one_prepared_request(ctx: pdkv.PlanContext) -> None:
    req = ctx.prepare(layout(True))
    wants = []
    for d_ids, p_ids, computed, hits in CASES:
        local, remote = [[60], [61], d_ids], [[62], [63], p_ids]
        wants.append(((local, remote, computed, hits), ctx.compile(full(True, local, remote, computed, hits)).to_json()))
    errors: List[str] = []

    def worker(seed: int) -> None:
        plan = pdkv.TransferPlan.empty()
        for i in range(150):
            (local, remote, computed, hits), want = wants[(seed + i) % len(wants)]
            got = req.compile([array("Q", x) for x in local], [array("Q", x) for x in remote], computed, hits,
                              reuse=plan)
            if got.to_json() != want:
                errors.append(f"thread {seed} request {i}")
                return

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_closed_context_is_refused(ctx: pdkv.PlanContext) -> None:
    with pdkv.Model.from_preset("nemotron-3-nano-30b") as m:
        cfg = pdkv.EngineConfig(tp_size=2, user_block_size=2096, backend="flashinfer")
        d = pdkv.EngineMetadata.from_model(m, cfg, pdkv.EngineLayout("d", 0, 64, 6))
        p = pdkv.EngineMetadata.from_model(m, cfg, pdkv.EngineLayout("p", 0, 64, 6))
        c = pdkv.PlanContext(d, [p])
        req = c.prepare([pdkv.PlanGroup(pdkv.GroupTrimInput(pdkv.GroupKind.ATTENTION))])
        c.close()
        with pytest.raises(pdkv.ClosedError):
            req.compile([[3]], [[4]], 10)


def test_plan_requests_example_runs() -> None:
    import subprocess
    import sys
    from pathlib import Path

    example = Path(__file__).resolve().parents[2] / "examples" / "python" / "plan_requests.py"
    out = subprocess.run([sys.executable, str(example), "--requests", "5", "--tokens", "8192"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "5 requests of 8192 tokens planned" in out.stdout
    assert "viewed in place" in out.stdout


def test_reused_plan_that_cannot_be_rewritten_gets_a_new_one_and_errors_are_typed(ctx: pdkv.PlanContext) -> None:
    """The one-call fast path into a reused plan: a plan whose memory a view shows is never
    rewritten (a new plan comes back, the view unchanged), and a refusal by the library is raised
    as its typed error naming the value, after which the same plan plans again."""
    req = ctx.prepare(layout(True))
    local = [array("Q", [60]), array("Q", [61]), array("Q", [3, 4, 10])]
    remote = [array("Q", [62]), array("Q", [63]), array("Q", [20, 5, 6])]
    computed = 3 * 2096 - 1
    plan = pdkv.TransferPlan.empty()
    assert req.compile(local, remote, computed, 0, reuse=plan) is plan
    want = plan.to_json()
    view = plan.rank_reads_view(plan.read_ranks()[0])
    before = bytes(view)
    other = [array("Q", [60]), array("Q", [61]), array("Q", [3])]
    fresh = req.compile(other, [array("Q", [62]), array("Q", [63]), array("Q", [20])], 2096 - 1, 0, reuse=plan)
    assert fresh is not plan and bytes(view) == before and plan.to_json() == want
    assert fresh.to_json() == ctx.compile(full(True, [[60], [61], [3]], [[62], [63], [20]], 2096 - 1, [0, 0, 0])).to_json()
    # A library refusal through the fast path (a D block id past the pool), then a good request.
    plan2 = pdkv.TransferPlan.empty()
    bad = [array("Q", [60]), array("Q", [61]), array("Q", [3, 4, 1 << 40])]
    with pytest.raises(pdkv.OutOfBoundsError, match="D region 0: read at offset .* leaves the registered region"):
        req.compile(bad, remote, computed, [0, 0, 0], reuse=plan2)
    assert req.compile(local, remote, computed, [0, 0, 0], reuse=plan2) is plan2
    assert plan2.to_json() == want
