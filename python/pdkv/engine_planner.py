"""The engine-level request's fast path from Python: a function generated for an engine's group
count over request structs made once, so that planning a request costs little more than
``pdkv_engine_plan_request_into`` itself. :meth:`Engine.plan_request` makes one on its first
call (the context an argument); :meth:`Engine.prepare` returns an :class:`EnginePlanner` whose
``plan`` is one with the context bound (what :class:`~pdkv.PlanRequest` is to
:meth:`PlanContext.compile`).

Per request the function writes only what changes (each group's id pointers and counts, the
prompt and hit token counts) into a buffer made once (an ``array('Q')`` the library reads in
place), copying short id lists into it and longer ones into a spill area it keeps (the library never reads a caller's buffer), and calls
the library with arguments made once. Anything it does not take (another id container, a value
out of range, a group count other than the engine's, a plan it may not rewrite now, a closed
engine or context) goes through ``Engine._plan_request_checked``, which plans the same request
or raises the error naming the value: the two always agree.
"""

from __future__ import annotations

import array
import ctypes
import struct
import sys
from typing import Any, List, Optional, Sequence, Tuple, Union

from . import _ffi
from ._base import _UNSIGNED_FORMATS, error_from
from .errors import ClosedError
from .plan import PlanContext, TransferPlan, _CallSlot, _check_reuse, _undeclared
from .engine import _GROUP_WORDS, _INT_ONLY, _PACKABLE, _REQUEST_WORDS, Engine, RequestGroup
from .plan_request import _numpy_view, _pinned_words

_A = array.array
# The request and group structs are packed as 8-byte words (engine._PACKABLE: 64-bit pointers
# and size_t), the two token counts at words 4 and 5.
_WORDS_OK = (_PACKABLE and _ffi.EngineRequestC.num_prompt_tokens.offset == 32
             and _ffi.EngineRequestC.num_local_computed_tokens.offset == 40)
# Ids a side copied into the group's own area of the packing, at an address fixed when the planner
# is made; longer lists are copied into the packing's spill area (_Spill).
_COPY_IDS = 256
# Requests of at most this many ids are planned with the GIL held (releasing and retaking it
# costs more than such a call); larger ones release it.
_GIL_IDS = 512
_SPILL_MIN = 4096  # ids in a spill area's first chunk
_ERRORS = (TypeError, ValueError, OverflowError, IndexError, struct.error)
_INTO: List[Any] = []  # pdkv_engine_plan_request_into, undeclared: [GIL released, GIL held]


def _into_functions() -> List[Any]:
    if not _INTO:
        _INTO[:] = _undeclared("pdkv_engine_plan_request_into")
    return _INTO


class _Packing:
    """One request struct, its groups and a copy area per group side, in one buffer: the
    request's fixed words written once. Whoever holds the packing is its only writer."""

    __slots__ = ("buf", "q", "qv", "qn", "arg", "copy_at", "copy_addr", "fill", "spill")

    def __init__(self, n: int) -> None:
        head = _REQUEST_WORDS + _GROUP_WORDS * n
        self.buf, mb, base = _pinned_words(head + 2 * n * _COPY_IDS)
        self.q = self.buf  # array('Q') ids are copied into the array itself (see _pinned_words)
        self.qv = mb.cast("Q")  # any other buffer of native uint64 through this view
        self.qn = _numpy_view(mb)  # None unless numpy is loaded
        self.q[0:4] = _A("Q", [8 * _REQUEST_WORDS, 0, base + 8 * _REQUEST_WORDS if n else 0, n])
        self.arg = ctypes.c_void_p(base)
        # Word index and address of each group side's copy area: local of group i at 2i, remote
        # at 2i + 1.
        self.copy_at = [head + k * _COPY_IDS for k in range(2 * n)]
        self.copy_addr = [base + 8 * w for w in self.copy_at]
        # The prompt and hit counts, then each group's (ids, count, ids, count), at word 4.
        self.fill = struct.Struct(f"@2Q{n * 'QQQQ'}").pack_into
        self.spill = _Spill()


class _Spill:
    """Room for the id lists of one call longer than _COPY_IDS: each copied here (so no caller
    buffer is read by the library, pinned or not), at an address that holds until reset(). A
    chunk is never moved while in use: one that runs out is followed by a larger one, and
    reset() keeps only the last (the largest), so a planner settles at one chunk that fits its
    largest request."""

    __slots__ = ("chunks", "q", "qn", "base", "used", "size")

    def __init__(self) -> None:
        self.chunks: List[Any] = []
        self.q: Any = None
        self.qn: Any = None
        self.base = 0
        self.used = 0
        self.size = 0

    def take(self, v: Any, numpy: bool) -> int:
        """Copies the ids of ``v`` (a buffer of uint64: ``array('Q')``, or numpy ``uint64`` when
        ``numpy``; TypeError / ValueError otherwise, as a slice assignment raises) and returns
        their address."""
        c = len(v)
        if self.used + c > self.size:
            size = max(2 * self.size, c, _SPILL_MIN)
            chunk = (ctypes.c_uint64 * size)()
            b = memoryview(chunk).cast("B")
            self.chunks.append(chunk)
            self.q, self.qn = b.cast("Q"), _numpy_view(b)
            self.base, self.used, self.size = ctypes.addressof(chunk), 0, size
        at = self.used
        view = self.qn if numpy else self.q
        if view is None:
            raise TypeError("numpy is not loaded")
        view[at:at + c] = v
        self.used = at + c
        return self.base + 8 * at

    def reset(self) -> None:
        """The call that used the copies returned: their room is free again."""
        del self.chunks[:-1]
        self.used = 0


def _plan_function(n: int, pk: _Packing, ctx_arg: bool) -> List[str]:
    """The source of ``plan(groups, N, H, reuse=None)`` (``ctx_arg``: ``plan(ctx, groups, N, H,
    reuse=None)``, :meth:`Engine.plan_request` itself) for an engine of ``n`` groups: one
    statement per group and side, the packing's addresses as constants, no loop. Its fast form
    is ``n`` ``(local, remote)`` tuples (or :class:`RequestGroup`) of ``array('Q')`` ids (or
    all of lists of ints, converted by array('Q') after a type check of every element; or all
    numpy ``uint64``) and int counts: each id list of at most _COPY_IDS ids copied into its copy
    area by a slice assignment (which itself refuses anything but an ``array('Q')``, or in the
    numpy form a buffer of another format: TypeError / ValueError), a longer one into the spill
    area (``take``). A mix of those goes to ``other`` (:func:`_other`); anything else, and a closed engine or context, to ``slow``
    (``Engine._plan_request_checked``), which plans it or raises the error naming it."""
    c = "ctx, " if ctx_arg else ""
    gs = ", ".join(f"g{i}" for i in range(n)) + ("," if n == 1 else "")
    lines = [f"def plan({c}groups, num_prompt_tokens, num_local_computed_tokens=0, reuse=None):"]
    if ctx_arg:
        lines += [
            "    try:",
            "        eo = eh[0]  # the owners keep both C objects alive until this returns",
            "        co = ctx._owner_holder[0] if type(ctx) is PC else None",
            "    except IndexError:  # closed: the checked path raises what it raises",
            "        co = None",
        ]
    else:
        lines += [
            "    try:",
            "        eo = eh[0]  # the owners keep both C objects alive until this returns",
            "        co = ch[0]",
            "    except IndexError:",
            "        co = None",
        ]
    lines += [
        "    if co is None:",
        f"        return slow({c}groups, num_prompt_tokens, num_local_computed_tokens, reuse)",
        "    try:",
        "        free.pop()",
        "    except IndexError:  # another thread is planning through the packing",
        f"        return slow({c}groups, num_prompt_tokens, num_local_computed_tokens, reuse)",
        "    try:",
        "        N = num_prompt_tokens",
        "        H = num_local_computed_tokens",
        "        t = type(groups)",
        "        try:",
        "            if (t is not list and t is not tuple) or type(N) is not int or type(H) is not int:",
        "                raise Slow",
        f"            {gs} = groups",
    ]
    for i in range(n):
        lines += [
            f"            if type(g{i}) is tuple:",
            f"                x{i}, y{i} = g{i}",
            f"            elif type(g{i}) is RG:",
            f"                x{i} = g{i}.local_block_ids",
            f"                y{i} = g{i}.remote_block_ids",
            "            else:",
            "                raise Slow",
        ]

    def ids(lists: bool, view: str) -> List[str]:
        """Each group's ids into the packing: buffers as given (copied through ``view``: ``q``,
        the packing's own array, for ``array('Q')``, ``qn`` for numpy ``uint64``, whose buffer
        format 'L' a 'Q' view refuses), or (``lists``) lists of ints, every element's type
        checked (no bool) and converted at C speed by array('Q')."""
        out: List[str] = []
        for i in range(n):
            la, ra = pk.copy_at[2 * i], pk.copy_at[2 * i + 1]
            aa, ab = pk.copy_addr[2 * i], pk.copy_addr[2 * i + 1]
            x, y = f"x{i}", f"y{i}"
            if lists:
                out += [
                    f"if type({x}) is not list or type({y}) is not list or not INT.issuperset(map(type, {x}))"
                    f" or not INT.issuperset(map(type, {y})):",
                    "    raise Slow",
                    f"{x} = A('Q', {x})  # OverflowError for an id out of range",
                    f"{y} = A('Q', {y})",
                ]
            out += [
                f"c{i} = len({x})",
                f"d{i} = len({y})",
                f"if c{i} <= {_COPY_IDS} >= d{i}:",
                f"    {view}[{la}:{la} + c{i}] = {x}",
                f"    {view}[{ra}:{ra} + d{i}] = {y}",
                f"    a{i} = {aa}",
                f"    b{i} = {ab}",
                "else:  # longer lists: copied into the spill area",
                f"    a{i} = take({x}, {view == 'qn'})",
                f"    b{i} = take({y}, {view == 'qn'})",
            ]
        return ["                " + line for line in out]

    lines += ["            if type(x0) is list:  # block tables as vLLM's scheduler holds them",
              *ids(True, "q")]
    if pk.qn is not None:  # numpy uint64 arrays, copied through the view in numpy's format
        lines += ["            elif type(x0) is ND:", *ids(False, "qn")]
    lines += ["            else:", *ids(False, "q")]
    words = ", ".join(f"a{i}, c{i}, b{i}, d{i}" for i in range(n))
    total = " + ".join(f"c{i} + d{i}" for i in range(n))
    lines += [
        f"            fill(q, 32, N, H, {words})  # struct.error for a count out of range",
        "        except errors:",
        "            if sp.used:",
        "                sp.reset()",
        "            total = other(groups, N, H)  # lists of ints, or None: the checked path",
        "            if total is None:",
        f"                return slow({c}groups, N, H, reuse)",
        "        else:",
        f"            total = {total}",
        f"        fn = (INTO or into())[total <= {_GIL_IDS}]",
        "        if type(reuse) is TP:",
        "            with reuse._lock:",
        "                if reuse._in_flight or reuse._closing or reuse._viewed:",
        "                    status = None",
        "                else:",
        "                    status = fn(eo.arg, co.arg, arg, reuse._arg, slot[0].ref)",
        "            if status is None:",
        f"                return slow({c}groups, N, H, reuse)",
        "            plan = reuse",
        "        elif reuse is None:",
        "            plan = new_plan()",
        "            status = fn(eo.arg, co.arg, arg, plan._arg, slot[0].ref)",
        "        else:  # a subclass, or another type named by the checked path",
        f"            return slow({c}groups, N, H, reuse)",
        "        if status:",
        "            raise failed(status)",
        "        return plan",
        "    finally:",
        "        if sp.used:",
        "            sp.reset()",
        "        free.append(True)",
    ]
    return lines


def _make_plan(n: int, eh: List[Any], ch: Optional[List[Any]], slow: Any) -> Optional[Tuple[Any, _Packing]]:
    """The generated plan function (:func:`_plan_function`) and its packing, for an engine of
    ``n`` groups whose owner holder is ``eh``: with ``ch`` (a context's owner holder) the
    planner's ``plan(groups, ...)``, without it ``plan(ctx, groups, ...)``. ``slow`` takes the
    same arguments. None where the structs are not made of 8-byte words (every request then goes
    the checked way). Nothing the function refers to refers back to the engine's or planner's
    Python object (no reference cycle)."""
    if not _WORDS_OK:
        return None
    pk = _Packing(n)
    slot = [_CallSlot()]  # replaced after an error (whose object error_from frees)

    def failed(status: int) -> Exception:
        err = slot[0].err
        slot[0] = _CallSlot()
        return error_from("pdkv_engine_plan_request_into", status, err)

    ns = {"eh": eh, "ch": ch, "PC": PlanContext, "free": [True], "slow": slow, "Slow": _Slow, "RG": RequestGroup,
          "q": pk.q, "qn": pk.qn, "ND": sys.modules["numpy"].ndarray if pk.qn is not None else None, "A": _A,
          "INT": _INT_ONLY, "sp": pk.spill, "take": pk.spill.take, "fill": pk.fill, "errors": _ERRORS + (_Slow,),
          "other": lambda g, N, H: _other(pk, n, g, N, H), "INTO": _INTO, "into": _into_functions,
          "TP": TransferPlan, "arg": pk.arg, "slot": slot, "new_plan": TransferPlan.empty, "failed": failed}
    exec("\n".join(_plan_function(n, pk, ch is None)), ns)  # noqa: S102 - generated from ints of this module
    return ns["plan"], pk


class EnginePlanner:
    """:meth:`Engine.plan_request` for one plan context, prepared once (:meth:`Engine.prepare`):
    :meth:`plan` takes the same arguments (but the context) and returns the same plan or raises
    the same error. It keeps the engine's and the context's C objects alive while a call runs;
    once either is closed, :meth:`plan` raises :class:`ClosedError`.

    Thread-safe: threads planning at once through one planner take turns on its packing, or
    (one that finds it in use) go through the checked path, which plans alike."""

    __slots__ = ("_engine", "_ctx", "_eh", "_ch", "_n", "_pk", "__dict__")

    def __init__(self, engine: Engine, ctx: PlanContext) -> None:
        if not isinstance(engine, Engine):
            raise TypeError(f"engine must be a pdkv.Engine, got {type(engine).__name__}")
        if not isinstance(ctx, PlanContext):
            raise TypeError(f"ctx must be a pdkv.PlanContext, got {type(ctx).__name__}")
        self._engine = engine
        self._ctx = ctx
        self._n = len(engine.groups())  # raises ClosedError for a closed engine
        # The handles' owner holders: [owner] while open, emptied by close(); a call holding the
        # owner keeps the C object alive until it returns.
        self._eh = engine._owner_holder
        self._ch = ctx._owner_holder
        if not self._ch:
            raise ClosedError("pdkv.PlanContext")
        self._pk: Optional[_Packing] = None

        def slow(groups: Any, n: Any, hit: Any, reuse: Optional[TransferPlan]) -> TransferPlan:
            return engine._plan_request_checked(ctx, groups, n, hit, reuse)

        made = _make_plan(self._n, self._eh, self._ch, slow)
        if made is not None:  # (else every request goes the checked way: the method below)
            fn, self._pk = made
            fn.__doc__ = EnginePlanner.plan.__doc__
            fn.__qualname__ = "EnginePlanner.plan"
            self.__dict__["plan"] = fn

    @property
    def engine(self) -> Engine:
        """The engine whose requests this plans."""
        return self._engine

    @property
    def context(self) -> PlanContext:
        """The plan context every request is planned against."""
        return self._ctx

    def plan(self, groups: Sequence[Union[RequestGroup, Tuple[Any, Any]]], num_prompt_tokens: int,
             num_local_computed_tokens: int = 0, reuse: Optional[TransferPlan] = None) -> TransferPlan:
        """:meth:`Engine.plan_request` (ctx, groups, num_prompt_tokens, num_local_computed_tokens,
        reuse) with this planner's context: the same plan, the same errors, ``reuse`` planned
        into in place when it may be rewritten now (else a new plan; always use the returned
        one). The fast path takes ``groups`` as a list or tuple of one ``(local, remote)`` tuple
        or :class:`RequestGroup` per engine group, ids in ``array('Q')``, numpy ``uint64``
        arrays (numpy loaded before :meth:`Engine.prepare`) or lists of ints, and int token
        counts. The ids are copied into the planner's own buffers (up to 256 a side into a
        group's area, longer lists into a spill area it keeps), so the library never reads the
        caller's buffers. Anything else goes through the checked path (the request packed call
        by call, every bad value named), which plans and refuses alike.

        (On an instance this name is a function generated for the engine's group count; this
        method, reached only through the class, calls it.)"""
        fn = self.__dict__.get("plan")
        if fn is None:
            return self._slow(groups, num_prompt_tokens, num_local_computed_tokens, reuse)
        return fn(groups, num_prompt_tokens, num_local_computed_tokens, reuse)  # type: ignore[no-any-return]

    def _slow(self, groups: Any, n: Any, hit: Any, reuse: Optional[TransferPlan]) -> TransferPlan:
        return self._engine._plan_request_checked(self._ctx, groups, n, hit, reuse)


def _other(pk: _Packing, n_groups: int, groups: Any, n: int, hit: int) -> Optional[int]:
    """The request packed into ``pk`` when its ids are lists or tuples of ints (converted at
    C speed, bools refused), ``array('Q')``s or other contiguous buffers of native uint64 (numpy
    arrays whose format the generated function's numpy form does not take, memoryviews), in
    any mix; how many ids it passes, or None where the
    fast path does not take it (nothing is wrong then that :meth:`Engine.plan_request` would
    not name). Lists longer than _COPY_IDS go to the packing's spill area."""
    t = type(groups)
    if (t is not list and t is not tuple) or type(n) is not int or type(hit) is not int or len(groups) != n_groups or not (0 <= n < 1 << 64 and 0 <= hit < 1 << 64):
        return None
    q = pk.qv  # (not the array: other buffers than array('Q') are assigned here)
    at = pk.copy_at
    addr = pk.copy_addr
    words: List[int] = [n, hit]
    total = 0
    k = 0
    try:
        for g in groups:
            tg = type(g)
            if tg is tuple:
                x, y = g
            elif tg is RequestGroup:
                x, y = g.local_block_ids, g.remote_block_ids
            else:
                return None
            for v in (x, y):
                tv = type(v)
                if tv is list or tv is tuple:
                    if not _INT_ONLY.issuperset(map(type, v)):
                        return None  # a bool or another int type: the checked path names it
                    v = _A("Q", v)  # OverflowError for a negative or too large id
                elif tv is not _A or v.typecode != "Q":
                    # Another buffer of native uint64 (numpy uint64 in either of its formats,
                    # 'L' or 'Q'; a memoryview), viewed as 'Q'; anything else: the checked path.
                    if tv is _A or tv is str or tv is bytes or tv is bytearray:
                        return None
                    m = memoryview(v)  # TypeError: not a buffer
                    if m.ndim != 1 or m.format not in _UNSIGNED_FORMATS[8] or not m.c_contiguous:
                        return None
                    v = m.cast("B").cast("Q")
                c = len(v)
                if c <= _COPY_IDS:
                    w = at[k]
                    q[w:w + c] = v
                    words += (addr[k], c)
                else:
                    words += (pk.spill.take(v, False), c)
                total += c
                k += 1
        pk.fill(q, 32, *words)
    except _ERRORS:
        return None
    return total


class _Slow(Exception):
    """Raised inside a generated plan function when the request is not one its fast path takes."""
