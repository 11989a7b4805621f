"""The planning hot path (PlanRequest.compile, PlanContext.compile with ``reuse``): untyped ctypes
calls with made-once arguments, the context kept alive by reference counting instead of an
in-flight count, one-id groups (and, prepared, other groups' few ids) copied and other id
buffers pinned for the call, the GIL held for small requests. These tests check what could go
wrong there: the plans equal the checked path's, bad buffers are refused by name, a buffer
resized during the call cannot be, close() racing compiles never frees what a call uses, and a
context nobody uses is freed by close() at once."""

from __future__ import annotations

import gc
import importlib
import random
import threading
from array import array
from typing import Any, Callable, Dict, Iterator, List, Tuple, Union

import pytest

import pdkv
from pdkv import plan as plan_mod

# numpy is optional for the package; these tests use it when present. Imported by name so that
# np is typed Any whether numpy is installed or not (CI runs mypy without it).
np: Any
try:
    np = importlib.import_module("numpy")
except ImportError:
    np = None

PPL = 131  # FlashInfer kernel blocks per 2096-token block on both sides (TP2 and TP4)
BLOCK = 2096
POOL = 64


def make_ctx() -> Tuple[pdkv.PlanContext, List[Any]]:
    """A context of its own (the tests below close it), and the handles it was built from."""
    m = pdkv.Model.from_preset("nemotron-3-nano-30b")
    cfg = {tp: pdkv.EngineConfig(tp_size=tp, user_block_size=BLOCK, backend="flashinfer") for tp in (2, 4)}
    p = [pdkv.EngineMetadata.from_model(m, cfg[4], pdkv.EngineLayout("p", r, POOL, 6)) for r in range(4)]
    d = pdkv.EngineMetadata.from_model(m, cfg[2], pdkv.EngineLayout("d", 0, POOL, 6))
    dg, pg = pdkv.Geometry(m, cfg[2]), pdkv.Geometry(m, cfg[4])
    return pdkv.PlanContext(d, p, local_geometry=dg, remote_geometry=pg), [m, d, *p, dg, pg]


@pytest.fixture()
def own_ctx() -> Iterator[pdkv.PlanContext]:
    c, handles = make_ctx()
    yield c
    c.close()
    for h in handles:
        h.close()


def layout(logical: bool = True) -> List[pdkv.PlanGroup]:
    """Two Mamba groups (the second on regions 0-4) and attention, logical or kernel ids."""
    k = PPL if logical else 1
    return [
        pdkv.PlanGroup(pdkv.GroupTrimInput(pdkv.GroupKind.MAMBA)),
        pdkv.PlanGroup(pdkv.GroupTrimInput(pdkv.GroupKind.MAMBA), (0, 1, 2, 3, 4)),
        pdkv.PlanGroup(pdkv.GroupTrimInput(pdkv.GroupKind.ATTENTION, local_kernel_blocks_per_id=k,
                                           remote_kernel_blocks_per_id=k)),
    ]


def checked_groups(logical: bool, local: List[Any], remote: List[Any], computed: int,
                   hits: List[int]) -> List[pdkv.PlanGroup]:
    """The same request as whole PlanGroups with ids in long-enough tuples or lists that the
    fast packing refuses them: the checked path, converting id by id."""
    out = []
    for g, lb, rb, hit in zip(layout(logical), local, remote, hits):
        t = g.trim
        out.append(pdkv.PlanGroup(pdkv.GroupTrimInput(
            t.kind, tuple(int(v) for v in lb), tuple(int(v) for v in rb), remote_computed_tokens=computed,
            local_hit_tokens=hit, local_kernel_blocks_per_id=t.local_kernel_blocks_per_id,
            remote_kernel_blocks_per_id=t.remote_kernel_blocks_per_id), g.regions))
    return out


def checked_json(ctx: pdkv.PlanContext, groups: List[pdkv.PlanGroup]) -> str:
    """The plan of ``groups`` through the typed, checked C call (no fast path involved)."""
    from pdkv.plan import _compile_checked, _ctx_owner, _groups

    arr, n, keep = _groups([pdkv.PlanGroup(g.trim, g.regions) for g in groups])
    plan = _compile_checked(_ctx_owner(ctx), arr, n, None)
    del keep
    return plan.to_json()


def entry(prepared: bool) -> Tuple[Any, str, List[Any]]:
    """Where the hot path's C entry is looked up and its two real functions (GIL released, held):
    PlanRequest.compile calls pdkv_transfer_plan_compile_args (plan, args), PlanContext.compile
    pdkv_transfer_plan_compile_into (five arguments). Tests replace the list to watch the call."""
    from pdkv import plan_request as pr
    if prepared:
        return pr, "_ARGS", list(pr._args_functions())
    return plan_mod, "_INTO", list(plan_mod._into_functions())


def kernel(logical: List[int]) -> List[int]:
    return [b * PPL + j for b in logical for j in range(PPL)]


def random_request(rng: random.Random, logical: bool) -> Tuple[List[List[int]], List[List[int]], int, List[int]]:
    """A request of 1-5 D blocks with a random hit and random (possibly scattered) ids."""
    nd = rng.randint(1, 5)
    hit_blocks = rng.randint(0, nd - 1)
    computed = nd * BLOCK - rng.randint(1, BLOCK - 1) if rng.random() < 0.5 else nd * BLOCK - 1
    d_ids = rng.sample(range(1, POOL), nd - hit_blocks)
    p_ids = rng.sample(range(1, POOL), nd)
    mamba = rng.sample(range(1, POOL), 4)
    attn_l = d_ids if logical else kernel(d_ids)
    attn_r = p_ids if logical else kernel(p_ids)
    hit = hit_blocks * BLOCK
    return [[mamba[0]], [mamba[1]], attn_l], [[mamba[2]], [mamba[3]], attn_r], computed, [hit, 0, hit]


def id_form(rng: random.Random, ids: List[int]) -> Any:
    """``ids`` as one of the inputs PlanRequest.compile takes (the ones its fast path handles,
    and some it leaves to the checked path: signed arrays, read-only numpy)."""
    forms: List[Callable[[], Any]] = [lambda: array("Q", ids), lambda: list(ids), lambda: tuple(ids),
                                      lambda: array("q", ids), lambda: memoryview(array("Q", ids))]
    if np is not None:
        forms += [lambda: np.array(ids, dtype=np.uint64), lambda: np.array(ids, dtype=np.int64)]

        def read_only() -> Any:
            a = np.array(ids, dtype=np.uint64)
            a.flags.writeable = False
            return a
        forms.append(read_only)
    return rng.choice(forms)()


@pytest.mark.parametrize("logical", [True, False])
def test_random_requests_plan_as_the_checked_path(ctx: pdkv.PlanContext, logical: bool) -> None:
    """Random requests through every input form of the fast path (one-id arrays copied,
    array('Q') / array('L') pinned, the GIL held or released) give the checked path's plan."""
    rng = random.Random(10 + logical)
    req = ctx.prepare(layout(logical))
    plan = pdkv.TransferPlan.empty()
    for _ in range(60):
        local, remote, computed, hits = random_request(rng, logical)
        hits = [hits[0], hits[0], hits[0]] if rng.random() < 0.5 else hits
        try:
            want = checked_json(ctx, checked_groups(logical, local, remote, computed, hits))
        except pdkv.PdkvError as e:  # the fast path must raise the same error
            with pytest.raises(type(e)):
                req.compile([array("Q", x) for x in local], [array("Q", x) for x in remote], computed, hits,
                            reuse=plan)
            continue
        code = rng.choice("QL") if array("L").itemsize == 8 else "Q"
        as_arrays = ([array(code, x) for x in local], [array(code, x) for x in remote])
        one: Union[int, List[int]] = hits[0] if len(set(hits)) == 1 and rng.random() < 0.5 else hits
        assert req.compile(*as_arrays, computed, one, reuse=plan) is plan
        assert plan.to_json() == want
        # Every other form the fast path takes, mixed per group and side.
        mixed = ([id_form(rng, x) for x in local], [id_form(rng, x) for x in remote])
        assert req.compile(*mixed, computed, one, reuse=plan) is plan
        assert plan.to_json() == want
        groups = checked_groups(logical, local, remote, computed, hits)
        fast_groups = [pdkv.PlanGroup(pdkv.GroupTrimInput(
            g.trim.kind, array("Q", g.trim.local_blocks), array("Q", g.trim.remote_blocks),
            remote_computed_tokens=computed, local_hit_tokens=g.trim.local_hit_tokens,
            local_kernel_blocks_per_id=g.trim.local_kernel_blocks_per_id,
            remote_kernel_blocks_per_id=g.trim.remote_kernel_blocks_per_id), g.regions) for g in groups]
        assert ctx.compile(fast_groups, reuse=plan) is plan
        assert plan.to_json() == want
        assert req.compile(*as_arrays, computed, hits).to_json() == want  # a new plan


def test_gil_is_held_only_for_small_requests(ctx: pdkv.PlanContext, monkeypatch: pytest.MonkeyPatch) -> None:
    """The PyDLL entry (GIL held) plans requests up to the context's id budget, the CDLL one
    (GIL released) larger ones; both plan alike."""
    module, name, fns = entry(True)
    assert len(fns) == 2  # this library has pdkv_transfer_plan_compile_args
    used: List[int] = []

    def spy(which: int) -> Callable[..., int]:
        def call(*args: Any) -> int:
            used.append(which)
            return int(fns[which](*args))
        return call

    monkeypatch.setattr(module, name, [spy(0), spy(1)])
    req = ctx.prepare(layout(False))
    plan = pdkv.TransferPlan.empty()
    budget = ctx._gil_ids
    assert 16 <= budget <= 1536
    small = ([[60], [61], kernel([3])], [[62], [63], kernel([20])], BLOCK - 1, 0)  # 262 kernel ids
    req_l = ctx.prepare(layout(True))
    req_l.compile([[60], [61], array("Q", [3])], [[62], [63], array("Q", [20])], BLOCK - 1, 0, reuse=plan)
    assert used == [1]
    want = plan.to_json()
    req.compile([array("Q", x) for x in small[0]], [array("Q", x) for x in small[1]], BLOCK - 1, 0, reuse=plan)
    assert used == [1, 0] and 2 * PPL > budget
    assert plan.to_json() == want


def test_a_library_without_compile_args_is_called_with_five_arguments(ctx: pdkv.PlanContext,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A library older than 2.8 lacks pdkv_transfer_plan_compile_args: a PlanRequest prepared
    against it calls pdkv_transfer_plan_compile_into instead, and plans alike."""
    from pdkv import plan_request as pr
    _, _, fns = entry(False)
    used: List[int] = []

    def spy(*args: Any) -> int:
        used.append(len(args))
        return int(fns[1](*args))

    computed = 3 * BLOCK - 1
    local, remote = [[60], [61], array("Q", [3, 4, 10])], [[62], [63], array("Q", [20, 5, 6])]
    want = ctx.prepare(layout(True)).compile(local, remote, computed).to_json()
    monkeypatch.setattr(pr, "_args_functions", lambda: [])
    monkeypatch.setattr(pr, "_ARGS", [])  # would raise IndexError if the generated code used it
    monkeypatch.setattr(pr, "_INTO", [spy, spy])
    old = ctx.prepare(layout(True))
    plan = pdkv.TransferPlan.empty()
    assert old.compile(local, remote, computed, reuse=plan) is plan
    assert used == [5] and plan.to_json() == want


def test_bad_buffers_are_refused_by_name(ctx: pdkv.PlanContext) -> None:
    req = ctx.prepare(layout(True))
    ok_l = [array("Q", [60]), array("Q", [61]), array("Q", [3, 4, 10])]
    ok_r = [array("Q", [62]), array("Q", [63]), array("Q", [20, 5, 6])]
    computed = 3 * BLOCK - 1

    def swap(side: List[Any], i: int, value: Any) -> List[Any]:
        out = list(side)
        out[i] = value
        return out

    with pytest.raises(TypeError, match=r"local_blocks\[2\]\[1\] must be an int, got bool"):
        req.compile(swap(ok_l, 2, [3, True, 10]), ok_r, computed)
    with pytest.raises(TypeError, match=r"remote_blocks\[0\]\[0\] must be an int, got bool"):
        req.compile(ok_l, swap(ok_r, 0, [True]), computed)
    with pytest.raises(pdkv.InvalidArgumentError, match=r"remote_blocks\[2\]\[2\] = -6"):
        req.compile(ok_l, swap(ok_r, 2, [20, 5, -6]), computed)
    with pytest.raises(pdkv.InvalidArgumentError, match=r"local_blocks\[2\]\[0\] = 18446744073709551616"):
        req.compile(swap(ok_l, 2, (1 << 64, 4)), ok_r, computed)
    with pytest.raises(TypeError, match=r"local_blocks\[1\]\[0\] must be an int, got str"):
        req.compile(swap(ok_l, 1, ["61"]), ok_r, computed)
    if np is not None:
        with pytest.raises(pdkv.InvalidArgumentError, match=r"remote_blocks\[2\]\[1\] = -5"):
            req.compile(ok_l, swap(ok_r, 2, np.array([20, -5, 6], dtype=np.int64)), computed)
        with pytest.raises(TypeError, match=r"local_blocks\[2\]\[0\] must be an int, got float"):
            req.compile(swap(ok_l, 2, np.array([3.0, 4.0, 10.0])), ok_r, computed)
    with pytest.raises(TypeError, match=r"local_blocks\[2\]\[0\] must be an int, got float"):
        req.compile(swap(ok_l, 2, array("d", [3.0, 4.0])), ok_r, computed)
    with pytest.raises(TypeError, match=r"remote_blocks\[0\]\[0\] must be an int, got float"):
        req.compile(ok_l, swap(ok_r, 0, array("d", [62.0])), computed)
    with pytest.raises(pdkv.InvalidArgumentError, match=r"local_blocks\[1\]\[0\] = -61"):
        req.compile(swap(ok_l, 1, array("q", [-61])), ok_r, computed)
    with pytest.raises(pdkv.InvalidArgumentError, match=r"remote_blocks\[2\]\[1\] = -5"):
        req.compile(ok_l, swap(ok_r, 2, array("q", [20, -5, 6])), computed)
    with pytest.raises(TypeError, match=r"local_blocks\[0\] must be a sequence of ints, got bytes"):
        req.compile(swap(ok_l, 0, b"\x3c"), ok_r, computed)
    with pytest.raises(TypeError, match=r"remote_blocks\[1\] must be a sequence of ints, got NoneType"):
        req.compile(ok_l, swap(ok_r, 1, None), computed)
    with pytest.raises(ValueError, match="3 groups: pass 3 local_blocks and 3 remote_blocks"):
        req.compile(ok_l + [array("Q", [1])], ok_r + [array("Q", [1])], computed)
    with pytest.raises(ValueError, match="hit_tokens: pass one count or 3"):
        req.compile(ok_l, ok_r, computed, (0, 0))
    with pytest.raises(TypeError, match="computed_tokens must be an int, got bool"):
        req.compile(ok_l, ok_r, True)  # a bool is an int to mypy: only the binding refuses it
    with pytest.raises(TypeError, match=r"hit_tokens\[2\] must be an int, got bool"):
        req.compile(ok_l, ok_r, computed, [0, 0, False])
    with pytest.raises(pdkv.InvalidArgumentError, match=r"computed_tokens = 18446744073709551616"):
        req.compile(ok_l, ok_r, 1 << 64)
    with pytest.raises(TypeError, match="reuse must be a pdkv.TransferPlan"):
        req.compile(ok_l, ok_r, computed, reuse="plan")  # type: ignore[arg-type]
    if np is not None:
        strided = np.arange(1, 13, dtype=np.uint64)[::2]
        with pytest.raises(TypeError, match="contiguous"):
            req.compile(swap(ok_l, 2, strided), ok_r, computed)
    # After every refusal the prepared buffers still plan correctly.
    want = ctx.compile(checked_groups(True, [[60], [61], [3, 4, 10]], [[62], [63], [20, 5, 6]], computed,
                                      [0, 0, 0])).to_json()
    assert req.compile(ok_l, ok_r, computed).to_json() == want


@pytest.mark.parametrize("field", ["regions", "layers"])
@pytest.mark.parametrize("prepared", [False, True])
def test_bools_in_a_region_list_are_refused_after_an_equal_list_of_ints(ctx: pdkv.PlanContext, field: str,
                                                                           prepared: bool) -> None:
    """(False, True) == (0, 1) and both hash alike: the C arrays cached by value for the ints
    must not be found for the bools, which the checked path refuses by name."""
    g = layout(True)

    def groups(indices: Tuple[Any, ...]) -> List[pdkv.PlanGroup]:
        mamba = pdkv.GroupTrimInput(pdkv.GroupKind.MAMBA, array("Q", [5]), array("Q", [6]),
                                    remote_computed_tokens=BLOCK - 1)
        return [g[0], pdkv.PlanGroup(mamba, **{field: indices}), g[2]]

    ints = groups((0, 1))
    ctx.compile(ints)  # caches (0, 1)'s C array
    ctx.prepare(ints)
    bools = groups((False, True))
    with pytest.raises(TypeError, match=rf"groups\[1\]\.{field}\[0\] must be an int, got bool"):
        if prepared:
            ctx.prepare(bools)
        else:
            ctx.compile(bools)
    # An equal tuple of ints that is another object still plans (and as the first one).
    again = groups(tuple(int(v) for v in "01"))
    assert getattr(again[1], field) is not getattr(ints[1], field)
    assert ctx.compile(again).to_json() == ctx.compile(ints).to_json()


@pytest.mark.parametrize("prepared,logical", [(True, True), (True, False), (False, True)])
def test_buffers_cannot_be_resized_during_the_call(ctx: pdkv.PlanContext, monkeypatch: pytest.MonkeyPatch,
                                                   prepared: bool, logical: bool) -> None:
    """During the C call every id buffer read in place is pinned (resizing it raises
    BufferError), one-id groups were copied (changing them then does not change the plan), and
    so were, through PlanRequest.compile, the attention group's ids when they are few (9 logical
    ids a side: resizing or rewriting them then changes nothing the call reads; 1,179 kernel ids a
    side are more than ``_COPY_IDS`` and read in place); afterwards the buffers are free again;
    through PlanRequest.compile and ctx.compile."""
    from pdkv import plan_request as pr
    module, name, fns = entry(prepared)
    seen: List[str] = []
    d_ids, p_ids = [3, 4, 10, 11, 12, 13, 14, 15, 16], [20, 5, 6, 7, 8, 9, 30, 31, 32]
    attn_l = d_ids if logical else kernel(d_ids)
    attn_r = p_ids if logical else kernel(p_ids)
    assert (len(attn_l) <= pr._COPY_IDS) == logical
    local = [array("Q", [60]), array("Q", [61]), array("Q", attn_l)]
    remote = [array("Q", [62]), array("Q", [63]), array("Q", attn_r)]

    def meddle(*args: Any) -> int:
        for side in (local, remote):
            try:
                side[2].append(7)
                seen.append("resized")
                side[2][0] = 1  # a copy is what the library reads
            except BufferError:
                seen.append("pinned")
            side[0][0] = 1  # a copied one-id group: the library reads the copy
        return int(fns[1](*args))

    monkeypatch.setattr(module, name, [meddle, meddle])
    req = ctx.prepare(layout(logical))
    computed = len(d_ids) * BLOCK - 1
    want = ctx.compile(checked_groups(logical, [[60], [61], attn_l], [[62], [63], attn_r], computed,
                                      [0, 0, 0])).to_json()
    plan = pdkv.TransferPlan.empty()
    if prepared:
        assert req.compile(local, remote, computed, reuse=plan) is plan
    else:
        groups = [pdkv.PlanGroup(pdkv.GroupTrimInput(
            g.trim.kind, lb, rb, remote_computed_tokens=computed,
            local_kernel_blocks_per_id=g.trim.local_kernel_blocks_per_id,
            remote_kernel_blocks_per_id=g.trim.remote_kernel_blocks_per_id), g.regions)
            for g, lb, rb in zip(layout(logical), local, remote)]
        assert ctx.compile(groups, reuse=plan) is plan
    assert seen == (["resized", "resized"] if prepared and logical else ["pinned", "pinned"])
    assert plan.to_json() == want
    local[2].append(7)  # no pin left once compile returned
    remote[2].pop()


@pytest.mark.parametrize("prepared", [True, False])
def test_memoryview_bases_cannot_be_resized_during_the_call(ctx: pdkv.PlanContext, monkeypatch: pytest.MonkeyPatch, prepared: bool) -> None:
    """Ids in a memoryview over a bytearray (read in place): during the call the bytearray stays
    exported, even once the caller released its view (resizing it raises BufferError)."""
    module, name, fns = entry(prepared)
    seen: List[str] = []
    raw = bytearray(array("Q", [20, 5, 6]).tobytes())
    view = memoryview(raw).cast("Q")
    local = [[60], [61], [3, 4, 10]]
    remote = [[62], [63], view]

    def meddle(*args: Any) -> int:
        view.release()
        try:
            raw.extend(b"x" * 8 * 4096)  # would move the ids the library is reading
            seen.append("resized")
        except BufferError:
            seen.append("held")
        return int(fns[1](*args))

    monkeypatch.setattr(module, name, [meddle, meddle])
    computed = 3 * BLOCK - 1
    want = ctx.compile(checked_groups(True, [[60], [61], [3, 4, 10]], [[62], [63], [20, 5, 6]], computed,
                                      [0, 0, 0])).to_json()
    plan = pdkv.TransferPlan.empty()
    if prepared:
        assert ctx.prepare(layout(True)).compile(local, remote, computed, reuse=plan) is plan
    else:
        groups = [pdkv.PlanGroup(pdkv.GroupTrimInput(
            g.trim.kind, lb, rb, remote_computed_tokens=computed,
            local_kernel_blocks_per_id=g.trim.local_kernel_blocks_per_id,
            remote_kernel_blocks_per_id=g.trim.remote_kernel_blocks_per_id), g.regions)
            for g, lb, rb in zip(layout(True), local, remote)]
        assert ctx.compile(groups, reuse=plan) is plan
    assert seen == ["held"]
    assert plan.to_json() == want
    raw.extend(b"x" * 8)  # free once compile returned


def test_resizing_threads_cannot_crash_compiles(ctx: pdkv.PlanContext) -> None:
    """Threads resize and rewrite the id buffers as fast as they can while others plan from
    them (big kernel-id requests, so that the GIL is released during the C call): every compile
    either plans or raises a pdkv error, the resizers only ever see BufferError."""
    req = ctx.prepare(layout(False))
    computed = 3 * BLOCK - 1
    local = [array("Q", [60]), array("Q", [61]), array("Q", kernel([3, 4, 10]))]
    remote = [array("Q", [62]), array("Q", [63]), array("Q", kernel([20, 5, 6]))]
    stop = threading.Event()
    errors: List[BaseException] = []
    counts = {"ok": 0, "refused": 0, "pinned": 0}

    def resizer() -> None:
        rng = random.Random(1)
        while not stop.is_set():
            for side in (local, remote):
                try:
                    if rng.random() < 0.5:
                        side[2].extend(side[2][:PPL])
                    elif len(side[2]) > PPL:
                        del side[2][-PPL:]
                    side[0][0] = rng.randint(1, POOL - 1)
                    side[2][0] = rng.randint(0, 1 << 20)
                except BufferError:
                    counts["pinned"] += 1
                except BaseException as e:  # pragma: no cover - reported below
                    errors.append(e)
                    return

    def planner() -> None:
        plan = pdkv.TransferPlan.empty()
        for _ in range(300):
            try:
                req.compile(local, remote, computed, reuse=plan)
                counts["ok"] += 1
            except pdkv.PdkvError:
                counts["refused"] += 1
            except BaseException as e:  # pragma: no cover - reported below
                errors.append(e)
                return

    rs = [threading.Thread(target=resizer) for _ in range(2)]
    ps = [threading.Thread(target=planner) for _ in range(2)]
    for t in rs + ps:
        t.start()
    for t in ps:
        t.join(60)
    stop.set()
    for t in rs:
        t.join(10)
    assert not errors, errors
    assert counts["ok"] + counts["refused"] == 600


def test_close_does_not_wait_for_a_compile_and_frees_after_it(own_ctx: pdkv.PlanContext,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A compile in flight holds the context's owner: close() from another thread returns at
    once, later compiles raise ClosedError, the compile in flight completes with the right plan,
    and the C context is freed when it returns, not before."""
    c = own_ctx
    req = c.prepare(layout(True))
    computed = 3 * BLOCK - 1
    local = [[60], [61], array("Q", [3, 4, 10])]
    remote = [[62], [63], array("Q", [20, 5, 6])]
    want = c.compile(checked_groups(True, [[60], [61], [3, 4, 10]], [[62], [63], [20, 5, 6]], computed,
                                    [0, 0, 0])).to_json()
    owner = c._owner_holder[0]
    import weakref

    gone = weakref.ref(owner)
    del owner
    module, name, fns = entry(True)
    inside, release = threading.Event(), threading.Event()

    def held(*args: Any) -> int:
        inside.set()
        assert release.wait(10)
        return int(fns[1](*args))

    monkeypatch.setattr(module, name, [held, held])
    got: List[str] = []
    plan = pdkv.TransferPlan.empty()
    user = threading.Thread(target=lambda: got.append(req.compile(local, remote, computed, reuse=plan).to_json()))
    user.start()
    assert inside.wait(10)
    closer = threading.Thread(target=c.close)
    closer.start()
    closer.join(5)
    assert not closer.is_alive(), "close() waited for a compile holding the owner"
    assert c.closed and gone() is not None  # closed, but the C context is still alive
    with pytest.raises(pdkv.ClosedError):
        req.compile(local, remote, computed)
    with pytest.raises(pdkv.ClosedError):
        c.compile(checked_groups(True, [[60], [61], [3]], [[62], [63], [20]], computed, [0, 0, 0]))
    release.set()
    user.join(10)
    assert got == [want]
    assert gone() is None  # freed when the compile returned


def test_close_of_an_unused_context_frees_at_once(own_ctx: pdkv.PlanContext) -> None:
    import weakref

    c = own_ctx
    req = c.prepare(layout(True))
    req.compile([[60], [61], [3]], [[62], [63], [20]], BLOCK - 1)
    gone = weakref.ref(c._owner_holder[0])
    c.close()
    assert gone() is None and c.closed and not c._owner_holder
    with pytest.raises(pdkv.ClosedError):
        req.compile([[60], [61], [3]], [[62], [63], [20]], BLOCK - 1)
    with pytest.raises(pdkv.ClosedError):
        c.mapping()


def test_plan_close_waits_for_its_rewrite(ctx: pdkv.PlanContext, monkeypatch: pytest.MonkeyPatch) -> None:
    """A plan being recompiled in place is held: close() from another thread waits for the
    rewrite, then frees the plan."""
    module, name, fns = entry(True)
    inside, release = threading.Event(), threading.Event()

    def held(*args: Any) -> int:
        inside.set()
        assert release.wait(10)
        return int(fns[1](*args))

    monkeypatch.setattr(module, name, [held, held])
    req = ctx.prepare(layout(True))
    plan = pdkv.TransferPlan.empty()
    user = threading.Thread(target=req.compile, args=([[60], [61], [3]], [[62], [63], [20]], BLOCK - 1),
                            kwargs={"reuse": plan})
    user.start()
    assert inside.wait(10)
    closer = threading.Thread(target=plan.close)
    closer.start()
    closer.join(0.3)
    assert closer.is_alive(), "close() freed a plan during its rewrite"
    release.set()
    user.join(10)
    closer.join(10)
    assert not closer.is_alive() and plan.closed and not plan._owner_holder


def test_close_racing_compiles_from_threads() -> None:
    """Threads plan through a PlanRequest and ctx.compile (one reused plan each, one shared
    plan too) while another thread closes the context, then the plans: every call plans or
    raises ClosedError, nothing crashes, and every C object is freed in the end."""
    import weakref

    for round_ in range(15):
        c, handles = make_ctx()
        req = c.prepare(layout(True))
        computed = 3 * BLOCK - 1
        local = [array("Q", [60]), array("Q", [61]), array("Q", [3, 4, 10])]
        remote = [array("Q", [62]), array("Q", [63]), array("Q", [20, 5, 6])]
        groups = [pdkv.PlanGroup(pdkv.GroupTrimInput(
            g.trim.kind, lb, rb, remote_computed_tokens=computed,
            local_kernel_blocks_per_id=g.trim.local_kernel_blocks_per_id,
            remote_kernel_blocks_per_id=g.trim.remote_kernel_blocks_per_id), g.regions)
            for g, lb, rb in zip(layout(True), local, remote)]
        want = c.compile(groups).to_json()
        shared = pdkv.TransferPlan.empty()
        gone = [weakref.ref(c._owner_holder[0]), weakref.ref(shared._owner_holder[0])]
        start = threading.Barrier(5, timeout=10)
        stop = threading.Event()
        errors: List[BaseException] = []
        counts = {"ok": 0, "closed": 0}
        lock = threading.Lock()

        def hammer(k: int) -> None:
            own = pdkv.TransferPlan.empty()
            gone.append(weakref.ref(own._owner_holder[0]))
            start.wait()
            i = k
            while not stop.is_set():
                try:
                    target = shared if i % 3 == 0 else own
                    got = req.compile(local, remote, computed, reuse=target) if i % 2 else \
                        c.compile(groups, reuse=target)
                    if got.to_json() != want:
                        errors.append(AssertionError(f"thread {k}: wrong plan"))
                        return
                    with lock:
                        counts["ok"] += 1
                except pdkv.ClosedError:
                    with lock:
                        counts["closed"] += 1
                except BaseException as e:  # noqa: BLE001 - anything else is a failure
                    errors.append(e)
                    return
                i += 1
            own.close()

        threads = [threading.Thread(target=hammer, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        start.wait()
        import time

        time.sleep(0.001 * (round_ % 5))
        closers = [threading.Thread(target=h.close) for h in (c, shared)]
        for t in closers:
            t.start()
        for t in closers:
            t.join(10)
        assert not any(t.is_alive() for t in closers), "close() hung"
        # Every call after the close must raise ClosedError: let the threads run until one has
        # (a fixed 5 ms was too short for a thread to be scheduled on a loaded 2-core machine).
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            with lock:
                if counts["closed"] > 0:
                    break
            time.sleep(0.001)
        stop.set()
        for t in threads:
            t.join(10)
        assert not any(t.is_alive() for t in threads)
        assert not errors, errors
        assert counts["closed"] > 0
        del t, threads
        gc.collect()
        assert all(g() is None for g in gone), "a C object outlived every user"
        for h in handles:
            h.close()


@pytest.mark.parametrize("order", [(0, 1, 2), (0, 2, 1), (2, 0, 1)])
def test_usual_and_group_by_group_requests_share_one_packing(ctx: pdkv.PlanContext, order: Tuple[int, ...]) -> None:
    """One PlanRequest and one reused plan through requests that alternate between the layout's
    usual request (every Mamba group one id a side, filled at once) and requests filled group by
    group (a Mamba group passing several ids, lists, one-id attention, a library refusal midway),
    each planned as the checked path plans it: neither fill may rely on a window the other
    rewrote (a Mamba group's window left pointing at an earlier request's ids would read them).
    With the groups in other orders too (attention between the Mamba groups, or first)."""

    def perm(items: List[Any]) -> List[Any]:
        return [items[o] for o in order]

    req = ctx.prepare(perm(layout(True)))
    plan = pdkv.TransferPlan.empty()
    computed = 3 * BLOCK - 1
    attn_l, attn_r = [3, 4, 10], [20, 5, 6]
    requests: List[Tuple[List[Any], List[Any], Any]] = [
        ([[60], [61], attn_l], [[62], [63], attn_r], 0),                   # usual
        ([[60], [61], attn_l], [[62, 30], [63], attn_r], [0, 0, 0]),      # Mamba group 0: 2 P ids
        ([[57], [58], attn_l], [[31], [32], attn_r], 0),                   # usual again
        ([[57], [58], attn_l], [[31], [32], attn_r], [BLOCK, 0, BLOCK]),   # usual, per-group hits
        ([[59], [56], [3]], [[33], [34], [20]], 0),                        # attention one id a side
        ([[55], [54], attn_l], [[35], [36], attn_r], 0),                   # usual
        ([[55], [54], attn_l], [[35, 37, 38], [36], attn_r], 0),           # several ids again
        ([[60], [61], attn_l], [[62], [63], attn_r], 0),                   # usual
    ]
    for step, (local, remote, hits) in enumerate(requests):
        n_ids = len(local[2])
        c = n_ids * BLOCK - 1 if n_ids < 3 else computed
        per_group = hits if isinstance(hits, list) else [hits] * 3
        want = checked_json(ctx, perm(checked_groups(True, local, remote, c, per_group)))
        arrays = (perm([array("Q", x) for x in local]), perm([array("Q", x) for x in remote]))
        got = req.compile(*arrays, c, perm(hits) if isinstance(hits, list) else hits, reuse=plan)
        assert got is plan and plan.to_json() == want, f"request {step}"
        if step == 2:  # refusals (by the library, by the binding) from the usual fill, then it again
            with pytest.raises(pdkv.CoverageError):
                req.compile(perm([array("Q", [57]), array("Q", [58]), array("Q", [3])]), arrays[1], c, hits,
                            reuse=plan)  # D's one attention block cannot hold the 3 blocks P sends
            with pytest.raises(pdkv.InvalidArgumentError, match=rf"local_blocks\[{order.index(1)}\]\[0\] = -58"):
                req.compile(perm([array("Q", [57]), array("q", [-58]), array("Q", attn_l)]), arrays[1], c, hits,
                            reuse=plan)
            assert req.compile(*arrays, c, hits, reuse=plan) is plan
            assert plan.to_json() == want


@pytest.mark.parametrize("path", ["usual", "group by group", "checked", "ctx.compile", "ctx.compile checked"])
def test_an_error_leaves_no_buffer_pinned(ctx: pdkv.PlanContext, path: str) -> None:
    """A compile that raises releases every buffer it pinned: with the error (and its traceback,
    which holds the compile's frames) still alive, the id arrays can be resized. The error has
    no internal exception chained to it. Through PlanRequest.compile's three paths and
    PlanContext.compile's two."""
    req = ctx.prepare(layout(True))
    attn_l, attn_r = array("Q", [3, 4]), array("Q", [20, 5, 6])  # D's 2 blocks cannot hold P's 3
    mamba_l: List[Any] = [array("Q", [60]), array("Q", [61])]
    if path == "group by group":
        mamba_l = [[60], array("Q", [61])]  # a list: filled group by group, ids copied
    local: List[Any] = mamba_l + [attn_l]
    if path == "checked":  # read-only ids: the checked path copies them (and pins attn_r)
        local[2] = memoryview(attn_l.tobytes()).cast("Q")
    remote = [array("Q", [62]), array("Q", [63]), attn_r]
    with pytest.raises(pdkv.CoverageError) as info:
        if path.startswith("ctx.compile"):
            groups = [pdkv.PlanGroup(pdkv.GroupTrimInput(
                g.trim.kind, lb, rb, remote_computed_tokens=3 * BLOCK - 1,
                local_kernel_blocks_per_id=g.trim.local_kernel_blocks_per_id,
                remote_kernel_blocks_per_id=g.trim.remote_kernel_blocks_per_id), g.regions)
                for g, lb, rb in zip(layout(True), local, remote)]
            # Groups from an iterator: the checked packing, group by group.
            ctx.compile(iter(groups) if path.endswith("checked") else groups, reuse=pdkv.TransferPlan.empty())
        else:
            req.compile(local, remote, 3 * BLOCK - 1, 0, reuse=pdkv.TransferPlan.empty())
    err = info.value
    assert err.__context__ is None and err.__cause__ is None
    attn_l.append(11)  # BufferError if the error's traceback still held a pin
    attn_r.append(7)
    del err


def test_a_prepared_request_needs_no_cycle_collector(ctx: pdkv.PlanContext) -> None:
    """Dropping a PlanRequest frees it and its compile functions at once, the extra packings
    made for a compile that found the first one in use included (no reference cycle); and its
    compile function alone keeps everything it needs alive."""
    import weakref

    local = [array("Q", [60]), array("Q", [61]), array("Q", [3, 4, 10])]
    remote = [array("Q", [62]), array("Q", [63]), array("Q", [20, 5, 6])]
    computed = 3 * BLOCK - 1
    want = checked_json(ctx, checked_groups(True, [[60], [61], [3, 4, 10]], [[62], [63], [20, 5, 6]],
                                            computed, [0, 0, 0]))
    gc.collect()
    gc.disable()
    try:
        req = ctx.prepare(layout(True))
        inner: List[str] = []

        class Reentering(list):  # type: ignore[type-arg]
            """Local ids whose iteration plans a request through the same PlanRequest: the inner
            compile finds the first packing in use and makes another."""

            def __iter__(self) -> Any:
                if not inner:
                    inner.append(req.compile(local, remote, computed).to_json())
                return super().__iter__()

        assert req.compile(Reentering(local), remote, computed).to_json() == want
        assert inner == [want]
        pool = req.compile.__globals__["pool"]
        assert len(pool) == 1
        refs: List[Any] = [weakref.ref(req), weakref.ref(req.compile), weakref.ref(pool[0])]
        del pool, Reentering
        fn = req.compile
        del req
        assert refs[0]() is None  # the request itself; its first function lives on in fn
        assert fn(local, remote, computed).to_json() == want
        del fn
        assert [r() for r in refs] == [None, None, None]
    finally:
        gc.enable()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # numpy converting -1 to uint64
def test_any_input_plans_or_fails_as_the_checked_path(ctx: pdkv.PlanContext) -> None:
    """Random requests of every shape (ids as arrays of any type code, lists, tuples, numpy
    arrays, memoryviews, dicts, bytes, strings, None; ids out of range, bools, floats; wrong group
    counts; counts of every type; three quarters of them all arrays, all numpy arrays (when
    numpy is installed) or all lists, as the fast path's usual forms) through
    PlanRequest.compile give what the checked path alone gives: the same plan, or an error of
    the same type. The generated fast paths may take a request or leave it, never take one the
    checked path refuses or refuse one it takes."""
    from pdkv import plan_request as pr

    rng = random.Random(7)
    req = ctx.prepare(layout(True))
    oracle = ctx.prepare(layout(True))
    pk = oracle._compile.__globals__["pk"]  # the checked path on a packing of its own
    co = ctx._owner_holder[0]

    def ids(n: int) -> List[Any]:
        v: List[Any] = [rng.randint(1, POOL - 1) for _ in range(n)]
        if rng.random() < 0.05:
            v[rng.randrange(n)] = rng.choice([-1, 1 << 64, True, 2.0, "3", None])
        return v

    def numpy_of(v: List[Any]) -> Any:
        try:
            return np.array(v, dtype=np.uint64)
        except (TypeError, ValueError, OverflowError):
            return list(v)

    def array_of(code: str, v: List[Any]) -> Any:
        try:
            return array(code, v)
        except (TypeError, OverflowError):
            return list(v)

    def form(v: List[Any]) -> Any:
        good: List[Callable[[], Any]] = [lambda: array("Q", v), lambda: list(v), lambda: tuple(v),
                                         lambda: array("q", v), lambda: memoryview(array("Q", v))]
        bad: List[Callable[[], Any]] = [lambda: array("d", v), lambda: bytes(len(v)), lambda: None,
                                        lambda: {0: v[0]}, lambda: str(v)]
        if np is not None:
            good += [lambda: np.array(v, dtype=np.uint64), lambda: np.array(v, dtype=np.int64)]
            bad.append(lambda: np.array(v))
        try:
            return rng.choice(good if rng.random() < 0.93 else bad)()
        except (TypeError, ValueError, OverflowError):
            return list(v)

    def mamba() -> int:  # ids of a Mamba group: one, or a few (P's last one is read; D's overlap)
        return 1 if rng.random() < 0.9 else rng.randint(2, 3)

    def side(n: int) -> Any:
        out = [form(ids(mamba())), form(ids(mamba())), form(ids(n))]
        k = rng.random()
        if k < 0.05:
            return out[:2]
        if k < 0.1:
            return out + [array("Q", [1])]
        if k < 0.15:
            return tuple(out)
        return out

    bad_ids: List[Any] = [-1, 1 << 64, True, False, 2.0, "3", None]

    def usual(n: int, container: str) -> Tuple[Any, Any, Any, Any]:
        """A usual request (every group in array('Q'), every group a numpy uint64 array, or
        every group in a list: the fast path's forms), with at most one thing out of line."""
        arrays = container != "lists"
        clean = [[rng.randint(1, POOL - 1) for _ in range(k)] for k in (mamba(), mamba(), n, mamba(), mamba(), n)]
        computed: Any = n * BLOCK - 1
        hits: Any = rng.choice([0, [0, 0, 0], (0, BLOCK, 0)])
        fault = rng.randrange(8)
        if fault == 0:  # one id out of range or of another type
            v = clean[rng.randrange(6)]
            v[rng.randrange(len(v))] = rng.choice(bad_ids)
        sides = [numpy_of(v) if container == "numpy" else array_of("Q", v) if arrays else list(v) for v in clean]
        if fault == 1:  # one group in another form
            g = rng.randrange(6)
            sides[g] = form(clean[g])
        elif fault == 2 and arrays:  # one group's array of another type code
            g = rng.randrange(6)
            sides[g] = array_of(rng.choice("qLdb"), clean[g])
        elif fault == 3:
            computed = rng.choice([0, -1, 1 << 64, True, 2.0, None])
        elif fault == 4:
            hits = rng.choice([[0, 0], [0, 0, True], (0, 1 << 64, 0), 1.5, None, True])
        local, remote = sides[:3], sides[3:]
        if fault == 5:
            local = local[:2] if rng.random() < 0.5 else local + [array("Q", [1])]
        return local, remote, computed, hits

    outcomes: Dict[str, int] = {}
    for step in range(2000):
        n = rng.randint(1, 4)
        mode = rng.choice(["arrays", "lists", "any"] + (["numpy"] if np is not None else []))
        if mode == "any":
            local, remote = side(n), side(n)
            computed: Any = rng.choice([n * BLOCK - 1] * 6 + [0, -1, 1 << 64, True, 2.0, None])
            hits: Any = rng.choice([0] * 4 + [[0, 0, 0], (0, BLOCK, 0)] * 2 + [[0, 0], [0, 0, True], 1.5, None, BLOCK])
        else:
            local, remote, computed, hits = usual(n, mode)
        try:
            want: Any = pr._checked(pk, co, local, remote, computed, hits, None).to_json()
        except (TypeError, ValueError, pdkv.PdkvError) as e:
            want = type(e)
        reuse = pdkv.TransferPlan.empty() if rng.random() < 0.5 else None
        try:
            got: Any = req.compile(local, remote, computed, hits, reuse=reuse).to_json()
        except (TypeError, ValueError, pdkv.PdkvError) as e:
            got = type(e)
        assert got == want, f"request {step}: {local!r} {remote!r} {computed!r} {hits!r}"
        key = "plan" if isinstance(want, str) else want.__name__
        outcomes[key] = outcomes.get(key, 0) + 1
    assert outcomes.get("plan", 0) >= 300 and len(outcomes) >= 4, outcomes  # both sides of the line were tried
