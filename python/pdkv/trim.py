"""Prefix trimming: which tokens / Mamba states of one KV-cache group D still has to read."""

from __future__ import annotations

import ctypes
import dataclasses
from ctypes import POINTER, byref, c_int32, c_size_t, c_uint64
from typing import Any, List, Optional, Sequence, Tuple, Union

from . import _ffi
from ._base import Handle, array_copy, call, enum_value, flag, i32, to_enum, u64, u64_array
from .blocks import KindLike, ZeroRange, zero_range_of
from .enums import GroupKind, MambaCacheMode


@dataclasses.dataclass(frozen=True)
class GroupTrimInput:
    """One group's trimming inputs (``pdkv_group_trim_input_t``). Attention kinds use KERNEL
    block ids of each side; Mamba groups use logical ids, exchange-clipped exactly once. Id 0 is
    the null block. ``local_first_block`` None: derived as local_hit_tokens / tokens per block.
    ``local_tokens_per_block`` / ``remote_tokens_per_block`` None: from the metadata in a plan
    (:func:`trim_group` needs them for attention kinds and Mamba "all" mode). Block ids: a
    sequence of ints or a buffer of unsigned 64-bit ints (``array('Q')``, numpy ``uint64``),
    which compiling a plan reads in place."""

    kind: KindLike  #: Group kind.
    local_blocks: Sequence[int] = ()  #: D blocks still to fill (after D's prefix hit).
    remote_blocks: Sequence[int] = ()  #: P blocks of the request.
    local_tokens_per_block: Optional[int] = None  #: D tokens per block (None in a plan: from metadata).
    remote_tokens_per_block: Optional[int] = None  #: P tokens per block (None in a plan: from metadata).
    remote_computed_tokens: int = 0  #: Prompt tokens P computed (N-1 rule applied).
    local_hit_tokens: int = 0  #: Tokens D already holds.
    sliding_window: int = 0  #: Sliding-window groups: window in tokens.
    cache_mode: Union[MambaCacheMode, int, str] = MambaCacheMode.NONE  #: Mamba groups only.
    local_first_block: Union[int, None] = None  #: Block-table index of local_blocks[0].
    remote_first_block: int = 0  #: Block-table index of remote_blocks[0].
    #: Attention kinds: kernel blocks each listed D id stands for. 1: kernel ids; k > 1: logical
    #: ids (logical block b = kernel blocks b*k .. b*k+k-1; id 0 = null with all k), so nothing
    #: expands them. Block-table indexes and tokens per block stay in kernel blocks. Mamba: 1.
    local_kernel_blocks_per_id: int = 1
    remote_kernel_blocks_per_id: int = 1  #: The same for the P ids.

    def _to_c(self) -> Tuple[_ffi.GroupTrimInputC, List[Any]]:
        """The C struct and the arrays it points to (keep them alive during the call)."""
        fast = self._to_c_fast()
        if fast is not None:
            return fast
        c = _ffi.GroupTrimInputC()
        c.struct_size = ctypes.sizeof(c)
        c.kind = int(enum_value("kind", GroupKind, self.kind)) if isinstance(self.kind, str) else i32("kind", self.kind)
        mode = self.cache_mode
        c.cache_mode = int(enum_value("cache_mode", MambaCacheMode, mode)) if isinstance(mode, str) else i32("cache_mode", mode)
        la, ln = u64_array("local_blocks", self.local_blocks)
        ra, rn = u64_array("remote_blocks", self.remote_blocks)
        c.local_blocks = ctypes.cast(la, POINTER(c_uint64)) if la is not None else None
        c.num_local_blocks = ln
        c.remote_blocks = ctypes.cast(ra, POINTER(c_uint64)) if ra is not None else None
        c.num_remote_blocks = rn
        mask = _TRIM_KBPI
        lpt, rpt = self.local_tokens_per_block, self.remote_tokens_per_block
        if lpt is not None or rpt is not None:
            mask |= _TRIM_TPB
            c.local_tokens_per_block = 0 if lpt is None else u64("local_tokens_per_block", lpt)
            c.remote_tokens_per_block = 0 if rpt is None else u64("remote_tokens_per_block", rpt)
        c.remote_computed_tokens = u64("remote_computed_tokens", self.remote_computed_tokens)
        c.local_hit_tokens = u64("local_hit_tokens", self.local_hit_tokens)
        c.sliding_window = u64("sliding_window", self.sliding_window)
        if self.local_first_block is not None:
            mask |= _TRIM_LFB
            c.local_first_block = u64("local_first_block", self.local_first_block)
        c.field_mask = mask
        c.remote_first_block = u64("remote_first_block", self.remote_first_block)
        c.local_kernel_blocks_per_id = u64("local_kernel_blocks_per_id", self.local_kernel_blocks_per_id)
        c.remote_kernel_blocks_per_id = u64("remote_kernel_blocks_per_id", self.remote_kernel_blocks_per_id)
        return c, [la, ra]

    def _to_c_fast(self) -> Optional[Tuple[_ffi.GroupTrimInputC, List[Any]]]:
        """:meth:`_to_c` for the common case, in one struct construction: plain ints in range and
        enum members, ids from buffers used in place (or small sequences converted as usual).
        None when any field needs the checked path (which then reports it, naming the field)."""
        k, m = self.kind, self.cache_mode
        if type(k) is GroupKind or type(k) is MambaCacheMode:  # noqa: E721 (exact types: no bools)
            k = int(k)
        if type(m) is MambaCacheMode or type(m) is GroupKind:
            m = int(m)
        if type(k) is not int or type(m) is not int or not (-_I32 <= k < _I32 and -_I32 <= m < _I32):
            return None
        mask, lpt, rpt, lf = trim_optionals(self.local_tokens_per_block, self.remote_tokens_per_block,
                                            self.local_first_block)
        ints = (lpt, rpt, self.remote_computed_tokens,
                self.local_hit_tokens, self.sliding_window, self.remote_first_block,
                self.local_kernel_blocks_per_id, self.remote_kernel_blocks_per_id, lf)
        for v in ints:
            if type(v) is not int or v < 0 or v > _U64:
                return None
        la, ln = u64_array("local_blocks", self.local_blocks)
        ra, rn = u64_array("remote_blocks", self.remote_blocks)
        c = _ffi.GroupTrimInputC(
            _TRIM_SIZE, mask, k, m, la, ln, ra, rn, ints[0], ints[1], ints[2], ints[3], ints[4],
            lf, ints[5], ints[6], ints[7])
        return c, [la, ra]


_U64 = (1 << 64) - 1
_I32 = 1 << 31
_TRIM_SIZE = ctypes.sizeof(_ffi.GroupTrimInputC)
_TRIM_LFB = _ffi.FIELD_BITS["PDKV_TRIM_FIELD_LOCAL_FIRST_BLOCK"]
_TRIM_KBPI = _ffi.FIELD_BITS["PDKV_TRIM_FIELD_KERNEL_BLOCKS_PER_ID"]
_TRIM_TPB = _ffi.FIELD_BITS["PDKV_TRIM_FIELD_TOKENS_PER_BLOCK"]


def trim_optionals(lpt: Optional[int], rpt: Optional[int], lf: Optional[int]) -> Tuple[int, Any, Any, Any]:
    """(field_mask, local tokens per block, remote tokens per block, local first block) of a
    trim input: None leaves a field's bit unset (and its value 0). The kernel blocks per id are
    always set (their default, 1, is the library's)."""
    mask = _TRIM_KBPI
    if lpt is not None or rpt is not None:
        mask |= _TRIM_TPB
        lpt = 0 if lpt is None else lpt
        rpt = 0 if rpt is None else rpt
    else:
        lpt = rpt = 0
    if lf is not None:
        mask |= _TRIM_LFB
    else:
        lf = 0
    return mask, lpt, rpt, lf


@dataclasses.dataclass(frozen=True)
class TokenRun:
    """``num_tokens`` tokens copied from remote_block into local_block (within one block)."""

    local_block: int  #: D kernel block.
    local_token_begin: int  #: First token offset in the D block.
    remote_block: int  #: P kernel block.
    remote_token_begin: int  #: First token offset in the P block.
    num_tokens: int  #: Tokens copied.


@dataclasses.dataclass(frozen=True)
class StatePair:
    """One whole Mamba state copied from remote_block into local_block."""

    local_block: int  #: D block.
    remote_block: int  #: P block.
    tokens: int  #: Prompt tokens the state has consumed.


class GroupTrim(Handle):
    """The trimmed transfer of one group (``pdkv_group_trim_t``). Immutable; thread-safe."""

    _free_name = "pdkv_group_trim_free"

    def __init__(self, input: GroupTrimInput) -> None:
        """Trims one group; raises :class:`CoverageError` when a needed token or state has no
        local slot or remote source (naming it)."""
        if not isinstance(input, GroupTrimInput):
            raise TypeError(f"input must be a pdkv.GroupTrimInput, got {type(input).__name__}")
        c, keep = input._to_c()
        out = POINTER(_ffi.GroupTrimT)()
        call("pdkv_group_trim_new", byref(c), byref(out))
        del keep
        self._adopt(out)

    def summary(self) -> Tuple[Union[GroupKind, int], int]:
        """(kind, tokens transferred)."""
        kind, tokens = c_int32(), c_uint64()
        call("pdkv_group_trim_summary", self._p(), byref(kind), byref(tokens))
        return to_enum(GroupKind, kind.value), tokens.value

    @property
    def kind(self) -> Union[GroupKind, int]:
        """The group kind."""
        return self.summary()[0]

    @property
    def transferred_tokens(self) -> int:
        """Tokens transferred."""
        return self.summary()[1]

    def runs(self) -> Tuple[TokenRun, ...]:
        """Token runs (attention kinds, token order)."""
        ptr = POINTER(_ffi.TokenRunC)()
        n = c_size_t()
        call("pdkv_group_trim_runs", self._p(), byref(ptr), byref(n))
        return array_copy(
            ptr,
            n.value,
            lambda r: TokenRun(r.local_block, r.local_token_begin, r.remote_block, r.remote_token_begin, r.num_tokens),
        )

    def states(self) -> Tuple[StatePair, ...]:
        """State pairs (Mamba groups, position order)."""
        ptr = POINTER(_ffi.StatePairC)()
        n = c_size_t()
        call("pdkv_group_trim_states", self._p(), byref(ptr), byref(n))
        return array_copy(ptr, n.value, lambda s: StatePair(s.local_block, s.remote_block, s.tokens))

    def zero_ranges(self) -> Tuple[ZeroRange, ...]:
        """Token ranges of listed local blocks D neither holds nor receives: zero them."""
        ptr = POINTER(_ffi.ZeroRangeC)()
        n = c_size_t()
        call("pdkv_group_trim_zero_ranges", self._p(), byref(ptr), byref(n))
        return array_copy(ptr, n.value, zero_range_of)

    def unfilled_states(self) -> Tuple[int, ...]:
        """Listed local Mamba slots no remote state fills (never publish them as cache hits)."""
        ptr = POINTER(c_uint64)()
        n = c_size_t()
        call("pdkv_group_trim_unfilled_states", self._p(), byref(ptr), byref(n))
        return array_copy(ptr, n.value, int)
