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
import threading
from typing import Any, List, Optional, Sequence, Tuple, Union

from . import _ffi
from ._base import operation, u64, u64_array
from .enums import GroupKind, MambaCacheMode
from .errors import Status, error_for
from .plan import (
    PlanContext,
    PlanGroup,
    TransferPlan,
    _GROUP_FORMAT,
    _PLAN_GROUP_SIZE,
    _TRIM_FORMAT,
    _TRIM_SIZE,
    _compile_packed_in_operation,
    _groups,
    _ids_address,
    _regions,
)

_U64 = (1 << 64) - 1
_Q_CODES = frozenset(c for c in "QL" if array.array(c).itemsize == 8)
# The fields of one pdkv_group_trim_input_t from local_blocks to local_hit_tokens (fields 3..10
# of _TRIM_FORMAT), and their byte offset in the struct.
_WINDOW = struct.Struct("@" + _TRIM_FORMAT[3:11])
_WINDOW_OFFSET = _ffi.GroupTrimInputC.local_blocks.offset
assert _TRIM_FORMAT[3:11] == "PNPNQQQQ" and _ffi.GroupTrimInputC.local_hit_tokens.offset + 8 == _WINDOW_OFFSET + _WINDOW.size
_TRIM_FIELDS = len(_TRIM_FORMAT)
_GROUP_FIELDS = len(_GROUP_FORMAT)


class _Packing:
    """One packed copy of the groups array (n pdkv_plan_group_t, then their n trims), its
    per-engine fields written once."""

    def __init__(self, st: struct.Struct, values: List[Any], n: int) -> None:
        self.buf = (ctypes.c_char * st.size)()
        self.base = ctypes.addressof(self.buf)
        trims_at = self.base + n * _PLAN_GROUP_SIZE
        values = list(values)
        for i in range(n):  # each group points at its own trim in this buffer
            values[_GROUP_FIELDS * i + 1] = trims_at + i * _TRIM_SIZE
        st.pack_into(self.buf, 0, *values)
        self.array = ctypes.cast(self.base, ctypes.POINTER(_ffi.PlanGroupC))


class PlanRequest:
    """The groups of an engine's requests, prepared once for one :class:`PlanContext`:
    :meth:`compile` plans a request from its block ids and token counts alone, with the plan
    :meth:`PlanContext.compile` would give for the same groups.

    ``groups`` gives every per-engine field (kind, cache mode, regions or layers, tokens per
    block, sliding window, ``local_first_block``, ``remote_first_block``, kernel blocks per id);
    their block ids and token counts are ignored (each request passes its own). The context is
    kept alive by this object. Thread-safe: several threads may compile through one
    PlanRequest at once (a thread that finds the prepared buffer in use packs into a new one)."""

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
        self._n = len(items)
        self._keep: List[Any] = []
        self._st = struct.Struct("@" + _GROUP_FORMAT * self._n + _TRIM_FORMAT * self._n)
        self._template: List[Any] = []
        trims: List[Any] = []
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
            self._template += [_PLAN_GROUP_SIZE, None, ctypes.addressof(regions) if nr else 0, nr,
                               ctypes.addressof(layers) if nl else 0, nl]
            trims += [_TRIM_SIZE, c.kind, c.cache_mode, 0, 0, 0, 0, c.local_tokens_per_block,
                      c.remote_tokens_per_block, 0, 0, c.sliding_window, c.has_local_first_block,
                      c.local_first_block, c.remote_first_block, c.local_kernel_blocks_per_id,
                      c.remote_kernel_blocks_per_id]
        self._template += trims
        # Byte offset of each trim's per-request window, and its per-engine tokens per block.
        self._window_at = [self._n * _PLAN_GROUP_SIZE + i * _TRIM_SIZE + _WINDOW_OFFSET for i in range(self._n)]
        self._window_static = [(trims[_TRIM_FIELDS * i + 7], trims[_TRIM_FIELDS * i + 8]) for i in range(self._n)]
        self._lock = threading.Lock()
        self._packing = self._new_packing()

    def _new_packing(self) -> _Packing:
        """A buffer holding the groups array with every per-engine field packed."""
        return _Packing(self._st, self._template, self._n)

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
        request argument of the wrong shape."""
        return _compile_request(self, local_blocks, remote_blocks, computed_tokens, hit_tokens, reuse)

    def _pack(self, packing: _Packing, local_blocks: Sequence[Any], remote_blocks: Sequence[Any],
              computed_tokens: int, hit_tokens: Union[int, Sequence[int]], pins: List[Any]) -> None:
        """Writes the request's values into ``packing`` and packs it (pins what must stay alive)."""
        n = self._n
        if len(local_blocks) != n or len(remote_blocks) != n:
            raise ValueError(f"this PlanRequest has {n} groups: pass {n} local_blocks and {n} remote_blocks "
                             f"(got {len(local_blocks)} and {len(remote_blocks)})")
        if type(computed_tokens) is not int or not 0 <= computed_tokens <= _U64:
            computed_tokens = u64("computed_tokens", computed_tokens)
        per_group = type(hit_tokens) is not int
        if per_group:
            hits = list(hit_tokens)  # type: ignore[arg-type]
            if len(hits) != n:
                raise ValueError(f"hit_tokens: pass one count or {n} (one per group), got {len(hits)}")
            hits = [h if type(h) is int and 0 <= h <= _U64 else u64(f"hit_tokens[{i}]", h) for i, h in enumerate(hits)]
        elif not 0 <= hit_tokens <= _U64:  # type: ignore[operator]
            u64("hit_tokens", hit_tokens)
        # Only the per-request window of each trim is written (its fields 3..10: the two id
        # arrays, the two tokens per block, computed and hit tokens); the rest was packed once.
        buf, window, at, static = packing.buf, _WINDOW.pack_into, self._window_at, self._window_static
        for i in range(n):
            x = local_blocks[i]
            if type(x) is array.array and x.typecode in _Q_CODES:
                la, ln = x.buffer_info()
                pins.append(memoryview(x))  # no resize while the library reads it
            else:
                la, ln = self._ids(f"local_blocks[{i}]", x, pins)
            x = remote_blocks[i]
            if type(x) is array.array and x.typecode in _Q_CODES:
                ra, rn = x.buffer_info()
                pins.append(memoryview(x))
            else:
                ra, rn = self._ids(f"remote_blocks[{i}]", x, pins)
            lpt, rpt = static[i]
            window(buf, at[i], la, ln, ra, rn, lpt, rpt, computed_tokens, hits[i] if per_group else hit_tokens)

    @staticmethod
    def _ids(name: str, values: Any, pins: List[Any]) -> Tuple[int, int]:
        """(address, count) of block ids that are not an ``array('Q')``: other unsigned 64-bit
        buffers in place, sequences of ints converted (each checked, naming the offender)."""
        hit = _ids_address(values, name)
        if hit is None:
            arr, count = u64_array(name, values)
            hit = (ctypes.addressof(arr) if count else 0, count, arr)
        pins.append(hit[2])
        return hit[0], hit[1]


@operation
def _compile_request(req: PlanRequest, local_blocks: Sequence[Any], remote_blocks: Sequence[Any],
                     computed_tokens: int, hit_tokens: Union[int, Sequence[int]],
                     reuse: Optional[TransferPlan]) -> TransferPlan:
    """PlanRequest.compile as one operation (the context stays in use during the call)."""
    if not req._lock.acquire(blocking=False):
        # Another thread is packing or planning with the prepared buffer: use a private one.
        return _compile_with(req, req._new_packing(), local_blocks, remote_blocks, computed_tokens,
                             hit_tokens, reuse)
    try:
        return _compile_with(req, req._packing, local_blocks, remote_blocks, computed_tokens, hit_tokens, reuse)
    finally:
        req._lock.release()


def _compile_with(req: PlanRequest, packing: _Packing, local_blocks: Sequence[Any], remote_blocks: Sequence[Any],
                  computed_tokens: int, hit_tokens: Union[int, Sequence[int]],
                  reuse: Optional[TransferPlan]) -> TransferPlan:
    pins: List[Any] = []

    def pack() -> Tuple[Any, int, List[Any]]:
        req._pack(packing, local_blocks, remote_blocks, computed_tokens, hit_tokens, pins)
        return packing.array, req._n, pins

    return _compile_packed_in_operation(req._ctx, pack, reuse)
