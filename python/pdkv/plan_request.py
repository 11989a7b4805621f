"""Prepared requests: an engine's group layout packed into C structs once, so that planning one
request from Python costs little more than the C call.

Everything about a request that an engine repeats for every request (each group's kind, cache
mode, regions or layers, tokens per block, sliding window, kernel blocks per id) is checked and
packed when the :class:`PlanRequest` is made; :meth:`PlanRequest.compile` then writes only what
changes per request (the block id buffers and the token counts) and calls the library once.
"""

from __future__ import annotations

import array
import ctypes
import struct
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from . import _ffi
from ._base import error_from, u64, u64_array
from .enums import GroupKind, MambaCacheMode
from .errors import ClosedError, Status, error_for
from .plan import (
    PlanContext,
    PlanGroup,
    TransferPlan,
    _CallSlot,
    _GROUP_FORMAT,
    _PLAN_GROUP_SIZE,
    _TRIM_FORMAT,
    _TRIM_SIZE,
    _check_reuse,
    _groups,
    _ids_address,
    _INTO,
    _into_functions,
    _new_plan,
    _regions,
)

_ARRAY = array.array
_Q_CODES = frozenset(c for c in "QL" if array.array(c).itemsize == 8)
_ERRORS = (TypeError, ValueError, OverflowError, struct.error)  # the fast path hands these to the checked one
# The fields of one pdkv_group_trim_input_t from local_blocks to local_hit_tokens (fields 4..11
# of _TRIM_FORMAT), and their byte offset in the struct.
_WINDOW = struct.Struct("@" + _TRIM_FORMAT[4:12])
_WINDOW_OFFSET = _ffi.GroupTrimInputC.local_blocks.offset
assert _TRIM_FORMAT[4:12] == "PNPNQQQQ" and _ffi.GroupTrimInputC.local_hit_tokens.offset + 8 == _WINDOW_OFFSET + _WINDOW.size
_GROUP_FIELDS = len(_GROUP_FORMAT)
# In a packing each trim is followed by two 8-byte words: a group's local and remote id when it
# passes one each (a Mamba group's usual request), copied there instead of pinning its buffer.
_TRIM_STRIDE = _TRIM_SIZE + 16
_GROUP_STRUCT: Dict[int, struct.Struct] = {}  # n -> struct of n pdkv_plan_group_t
_TRIM_STRUCT = struct.Struct("@" + _TRIM_FORMAT)


class _Packing:
    """One packed copy of the groups array (n pdkv_plan_group_t, then their n trims, each with
    its two scratch words), its per-engine fields written once, and the made-once arguments of
    its calls. Whoever holds the packing is the only writer of its buffer and of its slot."""

    __slots__ = ("buf", "mb", "q", "arg", "typed", "count", "slot", "groups", "single", "run")

    def __init__(self, req: "PlanRequest") -> None:
        n = req._n
        trims = n * _PLAN_GROUP_SIZE
        self.buf = (ctypes.c_char * (trims + n * _TRIM_STRIDE))()
        base = ctypes.addressof(self.buf)
        self.mb = memoryview(self.buf).cast("B")
        self.q = self.mb.cast("Q")  # the scratch words, as uint64 (a store range-checks the id)
        values = list(req._group_template)
        for i in range(n):  # each group points at its own trim in this buffer
            values[_GROUP_FIELDS * i + 2] = base + trims + i * _TRIM_STRIDE
        st = _GROUP_STRUCT.get(n)
        if st is None:
            st = _GROUP_STRUCT.setdefault(n, struct.Struct("@" + _GROUP_FORMAT * n))
        st.pack_into(self.mb, 0, *values)
        # Per group: its window's byte offset, the word index of its local scratch id (the
        # remote one follows), the two scratch addresses, and its tokens per block (local, remote).
        self.groups: List[Tuple[int, int, int, int, int, int]] = []
        for i, t in enumerate(req._trim_templates):
            at = trims + i * _TRIM_STRIDE
            _TRIM_STRUCT.pack_into(self.mb, at, *t)
            scratch = at + _TRIM_SIZE
            self.groups.append((at + _WINDOW_OFFSET, scratch // 8, base + scratch, base + scratch + 8, t[8], t[9]))
        self.arg = ctypes.c_void_p(base)
        self.typed = ctypes.cast(base, ctypes.POINTER(_ffi.PlanGroupC))
        self.count = ctypes.c_size_t(n)
        self.slot = _CallSlot()
        self.single = [False] * n  # see _run_function
        self.run = _run_function(self, req._gil_ids)


_INT_ONLY = frozenset((int,))
_U64_FORMATS = frozenset(p + c for p in ("", "@", "=", "<") for c in "QL" if struct.calcsize("@" + c) == 8)


def _other_ids(v: Any, pins: List[Any], q: Any, k: int, scratch: int) -> Optional[Tuple[int, int]]:
    """(address, count) of block ids given as anything but ``array('Q')`` on the fast path:
    a list or tuple of ints (one id copied into the scratch word ``q[k]`` at ``scratch``, more
    converted at C speed into an ``array('Q')`` kept in ``pins``; bools and other int types
    refused), an ``array`` of one id of any integer type (copied), an ``array('Q')``/``('L')``
    (pinned), or a contiguous one-dimensional buffer of unsigned 64-bit ints (numpy ``uint64``,
    a memoryview: one id copied, more pinned and read in place when it is writable). None for anything else (the checked path
    then converts it or names what is wrong); a value out of range raises (same)."""
    t = type(v)
    if t is list or t is tuple:
        if len(v) == 1:
            x = v[0]
            if type(x) is not int:
                return None
            q[k] = x
            return scratch, 1
        if not _INT_ONLY.issuperset(map(type, v)):
            return None
        a = _ARRAY("Q", v)  # OverflowError for a negative or too large id
        pins.append(a)
        return a.buffer_info()
    if t is _ARRAY:
        if len(v) == 1:
            q[k] = v[0]
            return scratch, 1
        if v.typecode not in _Q_CODES:
            return None
        pins.append(memoryview(v))  # first: no resize until the call returned
        return v.buffer_info()  # type: ignore[no-any-return]
    try:
        mv = memoryview(v)
    except TypeError:
        return None
    if mv.ndim != 1 or mv.format not in _U64_FORMATS or not mv.c_contiguous:
        return None
    n = mv.shape[0]  # type: ignore[index]
    if n == 1:  # copied, as above
        q[k] = mv[0]
        return scratch, 1
    if n == 0:
        return 0, 0
    if mv.readonly:  # ctypes reads writable buffers only: the checked path copies it
        return None
    c = ctypes.c_char.from_buffer(mv)  # holds the buffer exported (pinned) while it lives
    pins.append(c)
    return ctypes.addressof(c), n


def _fill_body(pk: _Packing, ind: str, per_group: Optional[str]) -> List[str]:
    """The per-group blocks of the generated run (see :func:`_run_function`), indented by
    ``ind``; ``per_group`` is None when ``h`` is already the one count for every group, else the
    prefix of the names the hit counts were unpacked into (``h0``, ``h1``, ... checked to be ints
    by the caller). A request the fast path does not take returns None. The common case of each group is tested first: two
    ``array('Q')`` of one id each (a Mamba group), then two longer ``array('Q')``."""
    out: List[str] = []
    for i, (at, k, sl, sr, lpt, rpt) in enumerate(pk.groups):
        counts = (at - _WINDOW_OFFSET + _ffi.GroupTrimInputC.remote_computed_tokens.offset) // 8
        if per_group is not None:
            out += [f"h = {per_group}{i}"]
        out += [
            f"x = L[{i}]",
            f"y = R[{i}]",
            "if type(x) is A is type(y):",
            "    if len(x) == 1 == len(y):  # one id a side (a Mamba group): copied, range-checked",
            f"        q[{k}] = x[0]",
            f"        q[{k + 1}] = y[0]",
            f"        if S[{i}]:",
            f"            q[{counts}] = c",
            f"            q[{counts + 1}] = h",
            "        else:",
            f"            window(mb, {at}, {sl}, 1, {sr}, 1, {lpt}, {rpt}, c, h)",
            f"            S[{i}] = True",
            "    elif x.typecode in QC and y.typecode in QC:",
            f"        S[{i}] = False",
            "        pins.append(memoryview(x))  # before the address is read: no resize until the call returned",
            "        pins.append(memoryview(y))",
            "        la, ln = x.buffer_info()",
            "        ra, rn = y.buffer_info()",
            f"        window(mb, {at}, la, ln, ra, rn, {lpt}, {rpt}, c, h)",
            "        total += ln + rn",
            "    else:",
            "        return None",
            "else:  # lists, tuples, numpy, memoryviews",
            f"    a = other(x, pins, q, {k}, {sl})",
            f"    b = other(y, pins, q, {k + 1}, {sr})",
            "    if a is None or b is None:",
            "        return None",
            f"    S[{i}] = False",
            f"    window(mb, {at}, a[0], a[1], b[0], b[1], {lpt}, {rpt}, c, h)",
            "    total += a[1] + b[1]",
        ]
    return [ind + line for line in out]


def _unpack_hits(n: int, ind: str) -> List[str]:
    """Lines unpacking the per-group hit counts H (a list or tuple of n) into h0..h{n-1},
    returning None unless every one is an int."""
    names = ", ".join(f"h{i}" for i in range(n))
    checks = " or ".join(f"type(h{i}) is not int" for i in range(n))
    return [ind + f"{names}{',' if n == 1 else ''} = H", ind + f"if {checks}:", ind + "    return None"]


def _run_function(pk: _Packing, gil_ids: int) -> Any:
    """The fast path of :meth:`PlanRequest.compile` for this packing, generated with its offsets
    and addresses as constants and one block per group (no loop, no per-group lookup), written
    twice (one hit count for every group, or one per group): ``run(local_blocks, remote_blocks,
    computed_tokens, hit_tokens, pins, co, plan)`` writes every group's per-request fields,
    pinning in ``pins`` every buffer the library will read in place, and, when ``plan`` is given
    and can be rewritten now, recompiles it in place under the plan's lock and returns it (a
    library error is raised as from :meth:`PlanRequest.compile`; ``_INTO`` is looked up in this
    module per call, tests replace it). It returns ``_FILLED`` when the packing is written but
    nothing was called (no plan, or one in use on another thread, closing, or viewed: the caller
    compiles the packing into a new plan while ``pins`` lives), and None as soon as the request is
    not n groups of ids the fast path takes (two ``array('Q')`` / ``array('L')`` (64-bit) or two
    one-id arrays inline, anything else through :func:`_other_ids`) with int counts, or a value
    is out of range: the caller then takes the checked path, which writes every window again
    (and clears ``pk.single``) and names what is wrong.

    ``pk.single[i]`` records that group i's window holds its one-id layout (ids in its scratch
    words): the next one-id request then writes only the ids and the two token counts."""
    n = len(pk.groups)
    lines = ["def run(L, R, c, H, pins, co, plan, q=q, mb=mb, window=window, S=S, A=A, QC=QC, other=other,",
             "        type=type, len=len, int=int, memoryview=memoryview, M=M, arg=arg, count=count, slot=slot,",
             "        ref=ref, filled=filled, fail=fail, errors=errors):",
             f"    if type(c) is not int or len(L) != {n} or len(R) != {n}:",
             "        return None",
             "    total = 0",
             "    try:",
             "        if type(H) is int:  # one hit count for every group",
             "            h = H"]
    lines += _fill_body(pk, "            ", None)
    lines += [f"        elif (type(H) is list or type(H) is tuple) and len(H) == {n}:"]
    lines += _unpack_hits(n, "            ")
    lines += _fill_body(pk, "            ", "h")
    lines += ["        else:", "            return None",
              "    except errors:",
              "        return None",
              "    if plan is None:",
              "        return filled",
              "    lock = plan._lock",
              "    lock.acquire()",
              "    try:",
              "        if plan._in_flight or plan._closing or plan._viewed:  # (_exclusive implies _in_flight)",
              "            return filled",
              f"        status = (M._INTO or M._into_functions())[total <= {gil_ids}](co.arg, arg, count, plan._arg, ref)",
              "    finally:",
              "        lock.release()",
              "    if status:",
              "        fail(status, slot.err)",
              "    return plan"]
    import sys
    ns: Dict[str, Any] = {"q": pk.q, "mb": pk.mb, "window": _WINDOW.pack_into, "S": pk.single, "A": array.array,
                          "QC": _Q_CODES, "other": _other_ids, "M": sys.modules[__name__], "arg": pk.arg,
                          "count": pk.count, "slot": pk.slot, "ref": pk.slot.ref, "filled": _FILLED,
                          "fail": _raise_compile_error, "errors": _ERRORS}
    exec("\n".join(lines), ns)  # noqa: S102 - generated from ints of this module, nothing else
    return ns["run"]


def _raise_compile_error(status: int, err: Any) -> None:
    raise error_from("pdkv_transfer_plan_compile_into", status, err)


_FILLED = object()  # run(): the packing is written, nothing was called


class PlanRequest:
    """The groups of an engine's requests, prepared once for one :class:`PlanContext`:
    :meth:`compile` plans a request from its block ids and token counts alone, with the plan
    :meth:`PlanContext.compile` would give for the same groups.

    ``groups`` gives every per-engine field (kind, cache mode, regions or layers, tokens per
    block, sliding window, ``local_first_block``, ``remote_first_block``, kernel blocks per id);
    their block ids and token counts are ignored (each request passes its own). The context is
    kept alive by this object. Thread-safe: several threads may compile through one
    PlanRequest at once (a thread that finds every prepared buffer in use packs into a new one),
    and the context may be closed meanwhile (a compile in flight keeps it alive until it returns;
    later ones raise :class:`ClosedError`)."""

    def __init__(self, ctx: PlanContext, groups: Sequence[PlanGroup]) -> None:
        if not isinstance(ctx, PlanContext):
            raise TypeError(f"ctx must be a pdkv.PlanContext, got {type(ctx).__name__}")
        items = list(groups) if isinstance(groups, (list, tuple)) else None
        if items is None or not items:
            raise TypeError("groups must be a non-empty list or tuple of pdkv.PlanGroup")
        # The checked path validates every field once and names the offending one.
        _arr, _n, keep = _groups(items)
        del _arr, keep
        self._ctx = ctx
        self._ctx_holder = ctx._owner_holder
        self._gil_ids = ctx._gil_ids
        self._n = len(items)
        self._keep: List[Any] = []
        self._group_template: List[Any] = []
        self._trim_templates: List[Tuple[Any, ...]] = []
        for i, g in enumerate(items):
            c, _ = g.trim._to_c()
            # The library checks these per call; a layout that can never plan is refused here.
            for field, value, enum in (("kind", c.kind, GroupKind), ("cache_mode", c.cache_mode, MambaCacheMode)):
                if value not in {int(e) for e in enum}:
                    raise error_for(Status.INVALID_ARGUMENT,
                                    f"groups[{i}].trim.{field} = {value} is not a {enum.__name__} value")
            regions, nr = _regions(i, g.regions)
            layers, nl = _regions(i, g.layers, "layers")
            self._keep += [regions, layers]
            self._group_template += [_PLAN_GROUP_SIZE, 0, None, ctypes.addressof(regions) if nr else 0, nr,
                                     ctypes.addressof(layers) if nl else 0, nl]
            self._trim_templates.append((
                _TRIM_SIZE, c.field_mask, c.kind, c.cache_mode, 0, 0, 0, 0, c.local_tokens_per_block,
                c.remote_tokens_per_block, 0, 0, c.sliding_window, c.local_first_block, c.remote_first_block,
                c.local_kernel_blocks_per_id, c.remote_kernel_blocks_per_id))
        # Packings not in use: a compile pops one (or makes one when several threads compile at
        # once) and puts it back (list.pop / append are atomic).
        self._pool = [_Packing(self)]

    @property
    def num_groups(self) -> int:
        """How many groups each request passes."""
        return self._n

    def compile(self, local_blocks: Sequence[Any], remote_blocks: Sequence[Any], computed_tokens: int,
                hit_tokens: Union[int, Sequence[int]] = 0,
                reuse: Optional[TransferPlan] = None) -> TransferPlan:
        """Plans one request: ``local_blocks[i]`` and ``remote_blocks[i]`` are group i's D and P
        block ids (``array('Q')``, numpy ``uint64`` or any buffer of unsigned 64-bit ints, used
        in place; a short list or tuple of ints is converted), ``computed_tokens`` the prompt
        tokens P computed (N-1 rule applied), ``hit_tokens`` the tokens D already holds (one
        count for every group, or one per group). ``reuse`` as for :meth:`PlanContext.compile`.
        Raises what :meth:`PlanContext.compile` raises, and ValueError / TypeError naming a
        request argument of the wrong shape.

        The ids are read by the library during the call: a buffer used in place is pinned (it
        cannot be resized meanwhile: resizing raises BufferError), and a group passing one id
        per side has them copied. A request of few ids (see ``_GIL_WORK`` in plan.py: up to 256
        ids with six regions) is planned with the GIL held, a larger one releases it."""
        # Everything below runs once per request: every Python operation counts.
        try:
            co = self._ctx_holder[0]  # keeps the context alive until this returns
        except IndexError:
            raise ClosedError("pdkv.PlanContext") from None
        pool = self._pool
        try:
            pk = pool.pop()
        except IndexError:  # every packing is in use by another thread
            pk = _Packing(self)
        try:
            if reuse is not None and type(reuse) is not TransferPlan:
                _check_reuse(reuse)
            pins: List[Any] = []  # every buffer read in place, pinned until the call returned
            # The usual request: one generated function fills the packing and makes the call.
            done = pk.run(local_blocks, remote_blocks, computed_tokens, hit_tokens, pins, co, reuse)
            if done is _FILLED:
                return _new_plan(co, pk.typed, self._n)
            if done is not None:
                return reuse  # type: ignore[return-value]  # (done is reuse)
            # Anything else: the checked path, which names what is wrong.
            pins.clear()
            ids = self._pack(pk, local_blocks, remote_blocks, computed_tokens, hit_tokens, pins)
            if reuse is not None:
                # plan._into inlined (one Python call less per request): the plan's lock is held
                # for the call, so no other use of the plan starts or ends meanwhile.
                plock = reuse._lock
                plock.acquire()
                try:
                    if not (reuse._in_flight or reuse._exclusive or reuse._closing or reuse._viewed):
                        status = (_INTO or _into_functions())[ids <= self._gil_ids](
                            co.arg, pk.arg, pk.count, reuse._arg, pk.slot.ref)
                        if not status:
                            return reuse
                        raise error_from("pdkv_transfer_plan_compile_into", status, pk.slot.err)
                finally:
                    plock.release()
            return _new_plan(co, pk.typed, self._n)
        finally:
            pool.append(pk)

    def _pack(self, packing: _Packing, local_blocks: Sequence[Any], remote_blocks: Sequence[Any],
              computed_tokens: int, hit_tokens: Union[int, Sequence[int]], pins: List[Any]) -> int:
        """Writes the request's values into ``packing``, each checked (errors name the argument),
        pins what must stay alive, and returns how many ids the request passes."""
        n = self._n
        packing.single[:] = [False] * n  # every window is rewritten below (see _run_function)
        if len(local_blocks) != n or len(remote_blocks) != n:
            raise ValueError(f"this PlanRequest has {n} groups: pass {n} local_blocks and {n} remote_blocks "
                             f"(got {len(local_blocks)} and {len(remote_blocks)})")
        computed_tokens = u64("computed_tokens", computed_tokens)
        if type(hit_tokens) is int or isinstance(hit_tokens, bool) or not hasattr(hit_tokens, "__iter__"):
            hits = [u64("hit_tokens", hit_tokens)] * n
        else:
            hits = list(hit_tokens)
            if len(hits) != n:
                raise ValueError(f"hit_tokens: pass one count or {n} (one per group), got {len(hits)}")
            hits = [u64(f"hit_tokens[{i}]", h) for i, h in enumerate(hits)]
        total = 0
        for i, (at, _k, _sl, _sr, lpt, rpt) in enumerate(packing.groups):
            la, ln = self._ids(f"local_blocks[{i}]", local_blocks[i], pins)
            ra, rn = self._ids(f"remote_blocks[{i}]", remote_blocks[i], pins)
            _WINDOW.pack_into(packing.mb, at, la, ln, ra, rn, lpt, rpt, computed_tokens, hits[i])
            total += ln + rn
        return total

    @staticmethod
    def _ids(name: str, values: Any, pins: List[Any]) -> Tuple[int, int]:
        """(address, count) of block ids: unsigned 64-bit buffers in place (pinned), sequences
        of ints converted (each checked, naming the offender)."""
        hit = _ids_address(values, name)
        if hit is None:
            arr, count = u64_array(name, values)
            hit = (ctypes.addressof(arr) if count else 0, count, arr)
        pins.append(hit[2])
        return hit[0], hit[1]
