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
import sys
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
    _undeclared,
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
# After its trims a packing has two 8-byte scratch words per group: a group's local and remote id
# when it passes one each (a Mamba group's usual request), copied there instead of pinning its
# buffer. The Mamba groups' words come first, in group order, so that the usual request writes
# them all with one struct pack.
# A group other than Mamba passing at most this many ids a side in uint64 buffers has them copied
# into its packing (one memcpy each of up to 8 KiB: cheaper than pinning the buffers, ~0.15 us a
# request at 501 ids a side, bench/py_overhead.py; see _usual_block); more are read in place.
_COPY_IDS = 1024
_GROUP_STRUCT: Dict[int, struct.Struct] = {}  # n -> struct of n pdkv_plan_group_t
_TRIM_STRUCT = struct.Struct("@" + _TRIM_FORMAT)


_ARGS: List[Any] = []  # pdkv_transfer_plan_compile_args through CDLL (GIL released) and PyDLL (held)
# The struct of pdkv_compile_args_t: struct_size, ctx, groups, n_groups, err.
_ARGS_STRUCT = struct.Struct("@NPPNP")
assert _ARGS_STRUCT.size == ctypes.sizeof(_ffi.CompileArgsC)


def _args_functions() -> List[Any]:
    """The two undeclared ctypes functions of ``pdkv_transfer_plan_compile_args`` (see
    ``plan._into_functions``), or [] when the loaded library predates it (2.8): the generated
    compile then calls ``pdkv_transfer_plan_compile_into`` with its five arguments. One
    argument fewer each costs ~40 ns less in ctypes: the args entry takes two."""
    if not _ARGS:
        try:
            _ARGS[:] = _undeclared("pdkv_transfer_plan_compile_args")
        except _ffi.MissingFunctionError:
            return []
    return _ARGS


def _numpy_view(mb: memoryview) -> Optional[memoryview]:
    """``mb`` cast to the buffer format numpy gives its ``uint64`` arrays ('L' on LP64 Linux,
    which a memoryview of format 'Q' refuses to be assigned from), when numpy is already
    imported and that format is a native 8-byte unsigned one; else None (numpy arrays then go
    group by group). numpy is never imported here: it is optional."""
    np = sys.modules.get("numpy")
    if np is None:
        return None
    try:
        fmt = memoryview(np.zeros(1, dtype=np.uint64)).format
    except Exception:  # a numpy without the buffer protocol as expected: group by group
        return None
    if fmt not in _Q_CODES:
        return None
    return mb.cast(fmt)


def _pinned_words(words: int) -> Tuple["array.array[int]", memoryview, int]:
    """A zeroed buffer of ``words`` uint64 the library reads in place, as (the buffer, a byte view
    of it, its address): an ``array('Q')``, not a ctypes buffer, because a slice of an array is
    assigned from another ``array('Q')`` by a type check and one memmove (~18 ns), where a
    memoryview first gets the source's buffer and compares formats and shapes (~44 ns), and a
    request copies up to ten id arrays so. Its memory never moves: the view exports its buffer
    for as long as it lives, so a slice assignment of another length (which would resize the
    array) raises BufferError instead. Keep the view as long as the address is used."""
    buf = array.array("Q", bytes(8 * words))
    view = memoryview(buf).cast("B")
    return buf, view, buf.buffer_info()[0]


class _Packing:
    """One packed copy of the groups array (n pdkv_plan_group_t, then their n trims, then two
    scratch words per group), its per-engine fields written once, and the made-once arguments
    of its calls. Whoever holds the packing is the only writer of its buffer and of its slot."""

    __slots__ = ("buf", "mb", "q", "qn", "arg", "typed", "count", "slot", "call", "groups", "copies", "single", "gil_ids",
                 "free")

    def __init__(self, layout: "_Layout") -> None:
        n = layout.n
        trims = n * _PLAN_GROUP_SIZE
        words = trims + n * _TRIM_SIZE  # where the scratch words start
        others = [i for i, t in enumerate(layout.trim_templates) if t[2] != GroupKind.MAMBA]
        copies = words + n * 16  # where the other groups' copy areas start (see _usual_block)
        call = copies + len(others) * 2 * _COPY_IDS * 8  # where its pdkv_compile_args_t starts
        # (a slice assignment of another length raises BufferError: group by group, see copy_block)
        self.buf, self.mb, base = _pinned_words(-(-(call + _ARGS_STRUCT.size) // 8))
        self.q = self.buf  # the scratch words, as uint64 (a store range-checks the id)
        self.qn = _numpy_view(self.mb)  # the same in numpy uint64's buffer format, if numpy is loaded
        values = list(layout.group_template)
        for i in range(n):  # each group points at its own trim in this buffer
            values[_GROUP_FIELDS * i + 2] = base + trims + i * _TRIM_SIZE
        st = _GROUP_STRUCT.get(n)
        if st is None:
            st = _GROUP_STRUCT.setdefault(n, struct.Struct("@" + _GROUP_FORMAT * n))
        st.pack_into(self.mb, 0, *values)
        # Per group: its window's byte offset, the word index of its local scratch id (the
        # remote one follows), the two scratch addresses, and its tokens per block (local, remote).
        self.groups: List[Tuple[int, int, int, int, int, int]] = []
        order = sorted(range(n), key=lambda i: bool(layout.trim_templates[i][2] != GroupKind.MAMBA))  # stable
        for i, t in enumerate(layout.trim_templates):
            at = trims + i * _TRIM_SIZE
            _TRIM_STRUCT.pack_into(self.mb, at, *t)
            scratch = words + order.index(i) * 16
            self.groups.append((at + _WINDOW_OFFSET, scratch // 8, base + scratch, base + scratch + 8, t[8], t[9]))
        # Per group other than Mamba: the word indexes of its local and remote copy areas (room
        # for _COPY_IDS ids each) and their addresses.
        self.copies: Dict[int, Tuple[int, int, int, int]] = {}
        for j, i in enumerate(others):
            at = copies + j * 2 * _COPY_IDS * 8
            self.copies[i] = (at // 8, base + at, at // 8 + _COPY_IDS, base + at + _COPY_IDS * 8)
        self.arg = ctypes.c_void_p(base)
        self.typed = ctypes.cast(base, ctypes.POINTER(_ffi.PlanGroupC))
        self.count = ctypes.c_size_t(n)
        self.slot = _CallSlot()
        # The arguments of pdkv_transfer_plan_compile_args but the plan: the context's pointer is
        # used only by a compile that holds the context's owner (a closed context is never called).
        _ARGS_STRUCT.pack_into(self.mb, call, _ARGS_STRUCT.size, layout.ctx_addr, base, n,
                               ctypes.addressof(self.slot.err))
        self.call = ctypes.c_void_p(base + call)
        self.single = [False] * (n + 1)  # see _compile_function and _usual_block
        self.gil_ids = layout.gil_ids
        self.free = [True]  # not empty while no compile uses the packing (see _compile_function)


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


def _pin_u64(v: Any) -> Any:
    """A ``c_char`` over the buffer of ``v`` (exported, so ``v`` cannot be resized while it
    lives), when ``v`` is a writable, contiguous, one-dimensional buffer of native unsigned
    64-bit ints (a numpy ``uint64`` array); TypeError otherwise (ctypes reads only writable
    buffers in place: the caller then takes another path)."""
    m = memoryview(v)
    if m.ndim != 1 or m.format not in _U64_FORMATS or not m.c_contiguous:
        raise TypeError("not a contiguous buffer of uint64")
    return ctypes.c_char.from_buffer(m)


def _by_group_body(pk: _Packing, ind: str, per_group: Optional[str]) -> List[str]:
    """The per-group blocks of the generated ``by_group`` (see :func:`_compile_function`),
    indented by ``ind``; ``per_group`` is None when ``h`` is already the one count for every
    group, else the prefix of the names the hit counts were unpacked into (``h0``, ``h1``, ...
    checked to be ints by the caller). A request the fast path does not take raises ``Slow``.
    The common case of each group is tested first: two ``array('Q')`` of one id each (a Mamba
    group), then two longer ``array('Q')``."""
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
            "        raise Slow",
            "else:  # lists, tuples, numpy, memoryviews",
            f"    a = other(x, pins, q, {k}, {sl})",
            f"    b = other(y, pins, q, {k + 1}, {sr})",
            "    if a is None or b is None:",
            "        raise Slow",
            f"    S[{i}] = False",
            f"    window(mb, {at}, a[0], a[1], b[0], b[1], {lpt}, {rpt}, c, h)",
            "    total += a[1] + b[1]",
        ]
    return [ind + line for line in out]


def _by_group_function(pk: _Packing) -> List[str]:
    """The source of ``by_group(L, R, c, H, pins)``: the packing filled group by group, for any
    request the fast path takes (see :func:`_other_ids`), pinning in ``pins`` what the library
    reads in place; it returns how many ids are read in place, and raises ``Slow`` (or one of
    ``_ERRORS``) for a request it does not take, to be named by the checked path. Written twice:
    one hit count for every group, or one per group."""
    n = len(pk.groups)
    names = ", ".join(f"h{i}" for i in range(n)) + ("," if n == 1 else "")
    ints = " or ".join(f"type(h{i}) is not int" for i in range(n))
    lines = ["def by_group(L, R, c, H, pins):",
             f"    S[{n}] = False  # (see _usual_block)",
             f"    if type(c) is not int or len(L) != {n} or len(R) != {n}:",
             "        raise Slow",
             "    total = 0",
             "    if type(H) is int:  # one hit count for every group",
             "        h = H"]
    lines += _by_group_body(pk, "        ", None)
    lines += [f"    elif (type(H) is list or type(H) is tuple) and len(H) == {n}:",
              f"        {names} = H",
              f"        if {ints}:",
              "            raise Slow"]
    lines += _by_group_body(pk, "        ", "h")
    lines += ["    else:", "        raise Slow", "    return total"]
    return lines


def _usual_block(pk: _Packing, layout: "_Layout", ind: str) -> List[str]:
    """Lines filling the packing for the layout's usual request at once, indented by ``ind``:
    n groups, int counts, and the ids either all in ``array``s (each Mamba group one id a side,
    copied into its scratch words; each other group two 64-bit ``array('Q')``/``('L')``, pinned
    in ``p<i>a``/``p<i>b`` and read in place) or all in lists (as vLLM's block tables hold them:
    each Mamba group one int a side, copied; each other group's ints converted at C speed into
    an ``array('Q')`` of this call, after a check that every one is an int and no bool). The
    groups are unpacked (another count raises ValueError: the checked path names it), each
    form's conditions are tested in one expression and every group is filled without a branch of
    its own (fewer bytecodes than ``by_group``, see :func:`_by_group_function`, which runs when
    neither form's conditions hold: nothing was written then). ``S[n]`` records that every
    Mamba group's window holds its one-id layout, so that only the ids and the two token counts
    are written."""
    n = len(pk.groups)
    mamba = [t[2] == GroupKind.MAMBA for t in layout.trim_templates]
    singles = [i for i in range(n) if mamba[i]]
    others = [i for i in range(n) if not mamba[i]]
    xs = ", ".join(f"x{i}" for i in range(n)) + ("," if n == 1 else "")
    ys = ", ".join(f"y{i}" for i in range(n)) + ("," if n == 1 else "")
    hs = ", ".join(f"h{i}" for i in range(n)) + ("," if n == 1 else "")
    types = [f"type({v}{i})" for i in range(n) for v in "xy"]
    lens = [" == ".join(f"len({v}{i})" for i in singles for v in "xy") + " == 1"] if singles else []

    def conditions(container: str, per_other: str) -> List[str]:
        checks = ["type(c) is int is type(h0)", " is ".join(types[:1] + [container] + types[1:])] + lens
        if container == "list" and singles:  # a list's one id must be an int (not a bool)
            checks.append("int is " + " is ".join(f"type({v}{i}[0])" for i in singles for v in "xy"))
        checks += [per_other.format(i=i) for i in others]
        return ["(" + checks[0], *[f"        and {check}" for check in checks[1:-1]], f"        and {checks[-1]})"]

    def fill(arrays: bool) -> List[str]:
        lines = [f"    if not S[{n}]:  # the Mamba groups' windows take their one-id layout once"]
        for i, (at, k, sl, sr, lpt, rpt) in enumerate(pk.groups):
            if mamba[i]:
                lines += [f"        window(mb, {at}, {sl}, 1, {sr}, 1, {lpt}, {rpt}, 0, 0)", f"        S[{i}] = True"]
            else:
                lines += [f"        S[{i}] = False"]
        lines += [f"        S[{n}] = True"]
        if singles and not arrays:  # their scratch words are contiguous (see _Packing), from the first one's
            ids = ", ".join(f"x{i}[0], y{i}[0]" for i in singles)
            lines += [f"    words(mb, {pk.groups[singles[0]][1] * 8}, {ids})"]
        for i, (at, k, sl, sr, lpt, rpt) in enumerate(pk.groups):
            counts = (at - _WINDOW_OFFSET + _ffi.GroupTrimInputC.remote_computed_tokens.offset) // 8
            if mamba[i]:
                lines += [f"    q[{counts}] = c", f"    q[{counts + 1}] = h{i}"]
                continue
            if arrays:  # (la, ln, ra, rn set by copy_block)
                lines += [f"    window(mb, {at}, la{i}, ln{i}, ra{i}, rn{i}, {lpt}, {rpt}, c, h{i})",
                          f"    total += ln{i} + rn{i}"]
                continue
            # arrays of this call (OverflowError for an id out of range: the checked path)
            lines += [f"    p{i}a = A('Q', x{i})", f"    p{i}b = A('Q', y{i})",
                      f"    la, ln = p{i}a.buffer_info()", f"    ra, rn = p{i}b.buffer_info()",
                      f"    window(mb, {at}, la, ln, ra, rn, {lpt}, {rpt}, c, h{i})", "    total += ln + rn"]
        return lines

    def copy_block(q: str) -> List[str]:
        """The ids of the array form, each group's in one statement: a Mamba group's one id a
        side copied into its scratch words by a slice assignment to ``q`` (the packing as
        uint64 in the format of the form's buffers: ``q``, the packing's own ``array('Q')``, for
        ``array('Q')``, ``qn`` for numpy ``uint64``), which itself checks that the source is an
        ``array('Q')`` (numpy: a buffer of that format) of exactly one id (TypeError, ValueError
        or, for an array of another length, BufferError otherwise: then group by group);
        another group's ids copied the same way into its copy area when there are at most _COPY_IDS a side, else pinned and
        read in place (64-bit ``array``, or in the numpy form a writable contiguous numpy
        ``uint64`` array, :func:`_pin_u64`; anything else raises Slow: group by group)."""
        lines: List[str] = []
        for i, (at, k, sl, sr, lpt, rpt) in enumerate(pk.groups):
            if mamba[i]:  # (the slices are made once: see the globals of _compile_function)
                lines += [f"{q}[s{k}] = x{i}", f"{q}[s{k + 1}] = y{i}"]
                continue
            ka, aa, kb, ab = pk.copies[i]
            lines += [
                f"ln{i} = len(x{i})",
                f"rn{i} = len(y{i})",
                f"if ln{i} <= {_COPY_IDS} >= rn{i}:",
                f"    {q}[{ka}:{ka} + ln{i}] = x{i}",
                f"    {q}[{kb}:{kb} + rn{i}] = y{i}",
                f"    la{i} = {aa}",
                f"    ra{i} = {ab}",
                f"elif type(x{i}) is A is type(y{i}) and x{i}.typecode in QC and y{i}.typecode in QC:",
                f"    p{i}a = memoryview(x{i})  # pinned before the address is read: no resize until the call returned",
                f"    p{i}b = memoryview(y{i})",
                f"    la{i}, ln{i} = x{i}.buffer_info()",
                f"    ra{i}, rn{i} = y{i}.buffer_info()",
            ]
            if q == "qn":  # longer numpy uint64 arrays: pinned and read in place too
                lines += [
                    f"elif type(x{i}) is ND is type(y{i}):",
                    f"    p{i}a = pin(x{i})  # (TypeError: group by group) pinned before the address is read",
                    f"    p{i}b = pin(y{i})",
                    f"    la{i} = AO(p{i}a)",
                    f"    ra{i} = AO(p{i}b)",
                ]
            lines += ["else:", "    raise Slow"]
        return ["    " + line for line in lines]

    list_ok = conditions("list", "INT.issuperset(map(type, x{i})) and INT.issuperset(map(type, y{i}))")
    out = [
        f"{xs} = L",
        f"{ys} = R",
        "if type(H) is int:  # one hit count for every group",
        f"    {' = '.join(f'h{i}' for i in range(n))} = H",
        "else:",
        f"    {hs} = H",
        f"    if not (int is {' is '.join(f'type(h{i})' for i in range(n))}):",
        "        h0 = None  # fails the checks below",
    ]
    # The array form (see copy_block), and the same for numpy arrays when numpy was imported
    # before the request was prepared (never imported here: it is optional).
    forms = [("A", "q", "array('Q')")] + ([("ND", "qn", "numpy")] if pk.qn is not None else [])
    for j, (container, view, what) in enumerate(forms):
        out += [
            f"{'el' if j else ''}if type(c) is int is type(h0) and type(x0) is {container}:  # the {what} form",
            "    try:",
            *["    " + line for line in copy_block(view)],
            "    except copy_errors:  # not the usual form after all: group by group (what was copied is rewritten)",
            "        pins = []",
            "        total = by_group(L, R, c, H, pins)",
            "    else:",
            *["    " + line for line in fill(True)],
        ]
    out += [
        "elif " + list_ok[0], *list_ok[1:-1], list_ok[-1] + ":",
        *fill(False),
        "else:  # group by group", "    pins = []", "    total = by_group(L, R, c, H, pins)",
    ]
    return [ind + line for line in out]


class _Slow(Exception):
    """Raised inside a generated compile when the request is not one its fast path takes."""


def _compile_function(pk: _Packing, layout: "_Layout", pool: Optional[List[Any]]) -> Any:
    """:meth:`PlanRequest.compile` for this packing, generated with its offsets and addresses as
    constants (no loop, no per-group lookup), so that planning a request is one Python call
    around the C call. It takes the packing (``free.pop()``: a thread that finds it in use goes
    to ``pool``, the packings beyond the first, instead), writes every group's per-request
    fields (:func:`_usual_block`, else ``by_group``), pins every buffer the library will read in
    place, and, given a plan it may rewrite now, recompiles it in place under the plan's lock
    (``_INTO`` is looked up in this module per call, tests replace it); without one, or with one
    in use on another thread, closing or viewed, it compiles the packing into a new plan.

    A request that is not n groups of ids the fast path takes (two ``array('Q')`` /
    ``array('L')`` (64-bit) or two one-id arrays inline, anything else through
    :func:`_other_ids`) with int counts, or a value out of range, goes to the checked path
    (:func:`_checked`), which writes every window again (and clears ``pk.single``) and names
    what is wrong. ``pk.single[i]`` records that group i's window holds its one-id layout (ids
    in its scratch words): the next one-id request then writes only the ids and the two token
    counts.

    Nothing the function refers to refers back to it (no reference cycle): ``free`` holds a
    token, not the packing, and ``pool`` holds the other packings' functions, which get no pool."""
    n = len(pk.groups)
    mamba = [t[2] == GroupKind.MAMBA for t in layout.trim_templates]
    # Every local that may pin a buffer (see _usual_block and by_group), set to None before an
    # error leaves this function, so that the error's traceback pins nothing.
    pinned = [f"p{i}{side}" for i in range(n) if not mamba[i] for side in "ab"] + ["pins"]
    if _args_functions():  # the entry of two arguments (``M._ARGS``: tests replace it)
        call = f"M._ARGS[total <= {pk.gil_ids}](reuse._arg, call)"
    else:
        call = f"(M._INTO or M._into_functions())[total <= {pk.gil_ids}](co.arg, arg, count, reuse._arg, ref)"
    unpin = f"{', '.join(pinned)} = {', '.join(['None'] * len(pinned))}"
    body = [
        "def compile(local_blocks, remote_blocks, computed_tokens, hit_tokens=0, reuse=None):",
        "    try:",
        "        co = holder[0]  # keeps the context alive until this returns",
        "    except IndexError:",
        "        raise ClosedError('pdkv.PlanContext') from None",
        "    try:",
        "        free.pop()",
        "    except IndexError:  # another thread is compiling through this packing",
        "        return busy(layout, pool, local_blocks, remote_blocks, computed_tokens, hit_tokens, reuse)",
        "    try:",
        "        L = local_blocks",
        "        R = remote_blocks",
        "        c = computed_tokens",
        "        H = hit_tokens",
        "        total = 0",
        "        try:"]
    body += _usual_block(pk, layout, "            ")
    body += [
        "        except errors:",
        "            pass  # to the checked path, below (outside this block: its errors get no context)",
        "        else:",
        "            if type(reuse) is TP:",
        "                lock = reuse._lock",
        "                lock.acquire()",
        "                try:",
        "                    if reuse._in_flight or reuse._closing or reuse._viewed:  # (_exclusive implies _in_flight)",
        "                        status = None",
        "                    else:",
        f"                        status = {call}",
        "                finally:",
        "                    lock.release()",
        "                if not status:",
        f"                    return reuse if status is not None else new_plan(co, typed, {n})",
        f"                {unpin}  # not kept alive by the error's traceback",
        "                fail(status, slot.err)",
        "            if reuse is None:",
        f"                return new_plan(co, typed, {n})",
        "            # reuse of another type (refused by name) or a subclass: the checked path",
        f"        {unpin}",
        "        return checked(pk, co, L, R, c, H, reuse)",
        "    finally:",
        "        free.append(True)",
    ]
    # Each function gets a globals dict of its own holding its constants: a global is read
    # faster than a closure cell (a closure copies its ~30 cells into every call's frame). Each
    # name is taken out of the dict it was defined in, so no function is reachable from its own
    # globals (no reference cycle).
    shared: Dict[str, Any] = {"S": pk.single, "q": pk.q, "qn": pk.qn, "mb": pk.mb, "window": _WINDOW.pack_into,
                              "ND": sys.modules["numpy"].ndarray if pk.qn is not None else None,
                              "words": struct.Struct(f"@{2 * sum(mamba)}Q").pack_into,
                              "A": array.array, "QC": _Q_CODES, "pin": _pin_u64, "AO": ctypes.addressof, "INT": _INT_ONLY, "Slow": _Slow,
                              "copy_errors": (TypeError, ValueError, BufferError, _Slow)}
    # The one-word slices of the Mamba groups' scratch ids (copy_block): a slice made once is
    # one global load, where q[k:k + 1] builds a new slice object per copy.
    shared.update({f"s{k + j}": slice(k + j, k + j + 1) for (_at, k, *_rest), m in zip(pk.groups, mamba) if m
                   for j in (0, 1)})
    fill_ns = dict(shared, other=_other_ids)
    ns = dict(shared, layout=layout, pool=pool, holder=layout.holder, free=pk.free, busy=_compile_busy,
              checked=_checked, ClosedError=ClosedError, M=sys.modules[__name__], arg=pk.arg, count=pk.count,
              call=pk.call,
              slot=pk.slot, ref=pk.slot.ref, fail=_raise_compile_error, errors=_ERRORS + (_Slow,),
              TP=TransferPlan, new_plan=_new_plan, typed=pk.typed, pk=pk)
    # noqa: S102 below - generated from ints of this module, nothing else
    exec("\n".join(_by_group_function(pk)), fill_ns)  # noqa: S102
    ns["by_group"] = fill_ns.pop("by_group")
    exec("\n".join(body), ns)  # noqa: S102
    fn = ns.pop("compile")
    fn.__doc__ = PlanRequest.compile.__doc__
    fn.__qualname__ = "PlanRequest.compile"
    return fn


def _raise_compile_error(status: int, err: Any) -> None:
    raise error_from("pdkv_transfer_plan_compile_into", status, err)


class _Layout:
    """What every packing of one :class:`PlanRequest` is made from (its context, its group
    structs' per-engine fields) and the packings not in use beyond the first. The generated
    compile functions hold this, not the PlanRequest, so nothing refers back to it."""

    __slots__ = ("ctx", "holder", "ctx_addr", "gil_ids", "n", "keep", "group_template", "trim_templates")

    def __init__(self, ctx: PlanContext, items: List[PlanGroup]) -> None:
        self.ctx = ctx  # kept alive while a compile function lives
        self.holder = ctx._owner_holder
        try:  # the C context's address (it never moves; see _Packing for when it is used)
            self.ctx_addr: int = self.holder[0].arg.value or 0
        except IndexError:
            raise ClosedError("pdkv.PlanContext") from None
        self.gil_ids = ctx._gil_ids
        self.n = len(items)
        self.keep: List[Any] = []
        self.group_template: List[Any] = []
        self.trim_templates: List[Tuple[Any, ...]] = []
        for i, g in enumerate(items):
            c, _ = g.trim._to_c()
            # The library checks these per call; a layout that can never plan is refused here.
            for field, value, enum in (("kind", c.kind, GroupKind), ("cache_mode", c.cache_mode, MambaCacheMode)):
                if value not in {int(e) for e in enum}:
                    raise error_for(Status.INVALID_ARGUMENT,
                                    f"groups[{i}].trim.{field} = {value} is not a {enum.__name__} value")
            regions, nr = _regions(i, g.regions)
            layers, nl = _regions(i, g.layers, "layers")
            self.keep += [regions, layers]
            self.group_template += [_PLAN_GROUP_SIZE, 0, None, ctypes.addressof(regions) if nr else 0, nr,
                                    ctypes.addressof(layers) if nl else 0, nl]
            self.trim_templates.append((
                _TRIM_SIZE, c.field_mask, c.kind, c.cache_mode, 0, 0, 0, 0, c.local_tokens_per_block,
                c.remote_tokens_per_block, 0, 0, c.sliding_window, c.local_first_block, c.remote_first_block,
                c.local_kernel_blocks_per_id, c.remote_kernel_blocks_per_id))


def _compile_busy(layout: _Layout, pool: List[Any], local_blocks: Sequence[Any], remote_blocks: Sequence[Any],
                  computed_tokens: int, hit_tokens: Union[int, Sequence[int]],
                  reuse: Optional[TransferPlan]) -> TransferPlan:
    """A compile that found the first packing in use by another thread: through another one,
    from ``pool`` (the compile functions of the packings beyond the first that are not in use;
    list.pop / append are atomic), or a new one when every packing is in use."""
    try:
        fn = pool.pop()
    except IndexError:
        fn = _compile_function(_Packing(layout), layout, None)  # (only its owner calls it: never busy)
    try:
        return fn(local_blocks, remote_blocks, computed_tokens, hit_tokens, reuse)  # type: ignore[no-any-return]
    finally:
        pool.append(fn)


def _checked(pk: _Packing, co: Any, local_blocks: Sequence[Any], remote_blocks: Sequence[Any],
             computed_tokens: int, hit_tokens: Union[int, Sequence[int]], reuse: Optional[TransferPlan]) -> TransferPlan:
    """The checked path of a compile holding ``pk``: every value converted and checked (errors
    name the argument), then the same call as the fast path."""
    _check_reuse(reuse)
    pins: List[Any] = []  # every buffer read in place, pinned until the call returned
    try:
        ids = _pack(pk, local_blocks, remote_blocks, computed_tokens, hit_tokens, pins)
        if reuse is not None:
            # The plan's lock is held for the call, so no other use of the plan starts or ends meanwhile.
            plock = reuse._lock
            plock.acquire()
            try:
                if not (reuse._in_flight or reuse._exclusive or reuse._closing or reuse._viewed):
                    status = (_INTO or _into_functions())[ids <= pk.gil_ids](co.arg, pk.arg, pk.count, reuse._arg,
                                                                             pk.slot.ref)
                    if not status:
                        return reuse
                    raise error_from("pdkv_transfer_plan_compile_into", status, pk.slot.err)
            finally:
                plock.release()
        return _new_plan(co, pk.typed, len(pk.groups))
    finally:
        pins.clear()  # released now, not kept pinned by an error's traceback


def _pack(packing: _Packing, local_blocks: Sequence[Any], remote_blocks: Sequence[Any],
          computed_tokens: int, hit_tokens: Union[int, Sequence[int]], pins: List[Any]) -> int:
    """Writes the request's values into ``packing``, each checked (errors name the argument),
    pins what must stay alive, and returns how many ids the request passes."""
    n = len(packing.groups)
    packing.single[:] = [False] * (n + 1)  # every window is rewritten below (see _compile_function)
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
        la, ln = _ids(f"local_blocks[{i}]", local_blocks[i], pins)
        ra, rn = _ids(f"remote_blocks[{i}]", remote_blocks[i], pins)
        _WINDOW.pack_into(packing.mb, at, la, ln, ra, rn, lpt, rpt, computed_tokens, hits[i])
        total += ln + rn
    return total


def _ids(name: str, values: Any, pins: List[Any]) -> Tuple[int, int]:
    """(address, count) of block ids: unsigned 64-bit buffers in place (pinned), sequences of
    ints converted (each checked, naming the offender)."""
    hit = _ids_address(values, name)
    if hit is None:
        arr, count = u64_array(name, values)
        hit = (ctypes.addressof(arr) if count else 0, count, arr)
    pins.append(hit[2])
    return hit[0], hit[1]


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
        self._layout = _Layout(ctx, items)
        # req.compile(...) is the first packing's generated function itself, stored on the
        # instance so that it shadows the method below: one Python call per request, not two.
        # Nothing it refers to refers back to it or to this object (no reference cycle).
        self._compile = _compile_function(_Packing(self._layout), self._layout, [])
        self.__dict__["compile"] = self._compile

    @property
    def num_groups(self) -> int:
        """How many groups each request passes."""
        return self._layout.n

    def compile(self, local_blocks: Sequence[Any], remote_blocks: Sequence[Any], computed_tokens: int,
                hit_tokens: Union[int, Sequence[int]] = 0,
                reuse: Optional[TransferPlan] = None) -> TransferPlan:
        """Plans one request: ``local_blocks[i]`` and ``remote_blocks[i]`` are group i's D and P
        block ids (``array('Q')``, numpy ``uint64`` or any buffer of unsigned 64-bit ints, used
        in place; a list or tuple of ints is converted at C speed), ``computed_tokens`` the prompt
        tokens P computed (N-1 rule applied), ``hit_tokens`` the tokens D already holds (one
        count for every group, or one per group). ``reuse`` as for :meth:`PlanContext.compile`.
        Raises what :meth:`PlanContext.compile` raises, and ValueError / TypeError naming a
        request argument of the wrong shape.

        The ids are read by the library during the call: a buffer used in place is pinned (it
        cannot be resized meanwhile: resizing raises BufferError; numpy's
        ``ndarray.resize(..., refcheck=False)`` skips that check and must not be called on a
        thread while another compiles from the array), and a group passing one id
        per side, or up to 1,024 a side in ``array('Q')`` (or numpy ``uint64`` arrays, when numpy
        was imported before the request was prepared), has them copied (one memcpy: cheaper than
        pinning so few). A request of few ids (see ``_GIL_WORK`` in
        plan.py: up to 256 ids with six regions) is planned with the GIL held, a larger one
        releases it.

        (On an instance this name is the generated function of :func:`_compile_function`; this
        method, reached only through the class, calls it.)"""
        return self._compile(local_blocks, remote_blocks, computed_tokens,  # type: ignore[no-any-return]
                             hit_tokens, reuse)
