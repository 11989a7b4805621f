"""Block ids, descriptor ids, exchange clipping and receive-side zeroing."""

from __future__ import annotations

import ctypes
import dataclasses
from ctypes import POINTER, byref, c_size_t, c_uint64
from typing import Any, Iterable, Sequence, Tuple, Union

from . import _ffi
from ._base import (
    array_copy,
    call,
    decode,
    enum_value,
    flag,
    i32,
    take_u64_list,
    u64,
    u64_array,
)
from .enums import GroupKind, MambaCacheMode

KindLike = Union[GroupKind, int, str]


def group_kind_name(kind: KindLike) -> str:
    """Stable name of a group kind ("attention", "sliding_window", "mamba"; "unknown" otherwise)."""
    value = int(enum_value("kind", GroupKind, kind)) if isinstance(kind, str) else i32("kind", kind)
    return decode(_ffi.function("pdkv_group_kind_name")(value))


def _kind(kind: KindLike) -> int:
    """A group kind argument as its int (unknown ints pass through: the library names them)."""
    if isinstance(kind, str):
        return int(enum_value("kind", GroupKind, kind))
    return i32("kind", kind)


def logical_to_kernel_block_ids(ids: Sequence[int], kind: KindLike, blocks_per_logical: int) -> Tuple[int, ...]:
    """Logical -> kernel block ids with the ppl of the engine owning the ids (Mamba: unchanged)."""
    arr, n = u64_array("ids", ids)
    return take_u64_list(
        "pdkv_logical_to_kernel_block_ids", arr, n, _kind(kind), u64("blocks_per_logical", blocks_per_logical)
    )


def map_block_ids_for_block_size_ratio(
    ids: Sequence[int], kind: KindLike, block_size_ratio: int, remote_len: int
) -> Tuple[int, ...]:
    """Local kernel ids -> remote-granularity ids, clipped to ``remote_len`` (Mamba: 1:1)."""
    arr, n = u64_array("ids", ids)
    return take_u64_list(
        "pdkv_map_block_ids_for_block_size_ratio",
        arr,
        n,
        _kind(kind),
        u64("block_size_ratio", block_size_ratio),
        u64("remote_len", remote_len),
    )


@dataclasses.dataclass(frozen=True)
class GroupBlockIds:
    """One group's block ids for :func:`descriptor_ids`: kernel ids (attention kinds) or
    logical ids (Mamba)."""

    kind: KindLike  #: Group kind.
    ids: Sequence[int]  #: Block ids (any sequence of ints: tuple, list, array, numpy uint64; copied and checked per call).


@dataclasses.dataclass(frozen=True)
class DescriptorLayout:
    """How an engine's descriptors are laid out (``pdkv_descriptor_layout_t``)."""

    num_blocks: int  #: Kernel blocks of the engine whose handle is addressed.
    block_size_ratio: int = 1  #: bsr (local handle only; the remote uses 1).
    blocks_per_logical: int = 1  #: ppl of that engine.
    num_attention_regions: int = 0  #: Attention regions.
    num_mamba_regions: int = 0  #: Mamba regions.


def descriptor_ids(groups: Iterable[GroupBlockIds], layout: DescriptorLayout) -> Tuple[int, ...]:
    """Descriptor ids for the groups, in order; :class:`OutOfBoundsError` names a block outside
    its region."""
    if not isinstance(layout, DescriptorLayout):
        raise TypeError(f"layout must be a pdkv.DescriptorLayout, got {type(layout).__name__}")
    if isinstance(groups, (str, bytes)) or not hasattr(groups, "__iter__"):
        raise TypeError(f"groups must be a sequence of pdkv.GroupBlockIds, got {type(groups).__name__}")
    glist = list(groups)
    keep = []
    arr = (_ffi.GroupBlockIdsC * len(glist))() if glist else None
    for i, g in enumerate(glist):
        if not isinstance(g, GroupBlockIds):
            raise TypeError(f"groups[{i}] must be a pdkv.GroupBlockIds, got {type(g).__name__}")
        ids, n = u64_array(f"groups[{i}].ids", g.ids)
        keep.append(ids)
        assert arr is not None
        arr[i].kind = _kind(g.kind)
        arr[i].ids = ctypes.cast(ids, POINTER(c_uint64)) if ids is not None else None
        arr[i].num_ids = n
    c = _ffi.DescriptorLayoutC()
    c.struct_size = ctypes.sizeof(c)
    for f in dataclasses.fields(DescriptorLayout):
        setattr(c, f.name, u64(f.name, getattr(layout, f.name)))
    return take_u64_list("pdkv_descriptor_ids", arr, len(glist), byref(c))


def mamba_descriptor_ids(
    logical_block_ids: Sequence[int],
    num_logical_blocks: int,
    num_regions: int,
    descs_per_region: int,
    first_id: int = 0,
) -> Tuple[int, ...]:
    """Mamba descriptor ids of logical blocks in a region-major Mamba list starting at
    ``first_id``."""
    arr, n = u64_array("logical_block_ids", logical_block_ids)
    return take_u64_list(
        "pdkv_mamba_descriptor_ids",
        arr,
        n,
        u64("num_logical_blocks", num_logical_blocks),
        u64("num_regions", num_regions),
        u64("descs_per_region", descs_per_region),
        u64("first_id", first_id),
    )


def clip_exchange_blocks(
    ids: Sequence[int],
    kind: KindLike,
    *,
    hma_enabled: bool = True,
    sliding_window: int = 0,
    block_size: int = 0,
    cache_mode: Union[MambaCacheMode, int, str] = MambaCacheMode.NONE,
    num_speculative_blocks: int = 0,
) -> Tuple[int, ...]:
    """vLLM's get_exchange_clipped_blocks for one group's list. Clip a Mamba "all"-mode list
    with speculative blocks exactly once (not idempotent)."""
    arr, n = u64_array("ids", ids)
    p = _ffi.ExchangeClipParamsC()
    p.struct_size = ctypes.sizeof(p)
    p.kind = _kind(kind)
    p.hma_enabled = flag("hma_enabled", hma_enabled)
    p.sliding_window = u64("sliding_window", sliding_window)
    p.block_size = u64("block_size", block_size)
    p.cache_mode = (
        int(enum_value("cache_mode", MambaCacheMode, cache_mode)) if isinstance(cache_mode, str) else i32("cache_mode", cache_mode)
    )
    p.num_speculative_blocks = u64("num_speculative_blocks", num_speculative_blocks)
    return take_u64_list("pdkv_clip_exchange_blocks", arr, n, byref(p))


@dataclasses.dataclass(frozen=True)
class ZeroRange:
    """Tokens [token_begin, token_end) inside kernel block ``block``."""

    block: int  #: Kernel block id.
    token_begin: int  #: First token offset in the block.
    token_end: int  #: One past the last token offset.


@dataclasses.dataclass(frozen=True)
class TokenInterval:
    """Absolute token positions [begin, end) of a request."""

    begin: int  #: First position.
    end: int  #: One past the last position.


def zero_range_of(c: Any) -> ZeroRange:
    """A :class:`ZeroRange` from a ``pdkv_zero_range_t``."""
    return ZeroRange(c.block, c.token_begin, c.token_end)


def _take_zero_ranges(fn: str, *args: Any) -> Tuple[ZeroRange, ...]:
    out = POINTER(_ffi.ZeroRangeListT)()
    call(fn, *args, byref(out))
    try:
        ptr = POINTER(_ffi.ZeroRangeC)()
        n = c_size_t()
        call("pdkv_zero_range_list_items", out, byref(ptr), byref(n))
        return array_copy(ptr, n.value, zero_range_of)
    finally:
        _ffi.function("pdkv_zero_range_list_free")(out)


def receive_zero_ranges(
    local_blocks: Sequence[int], tokens_per_block: int, block_size_ratio: int, remote_kernel_len: int
) -> Tuple[ZeroRange, ...]:
    """vLLM's receive-side zeroing for one attention group."""
    arr, n = u64_array("local_blocks", local_blocks)
    return _take_zero_ranges(
        "pdkv_receive_zero_ranges",
        arr,
        n,
        u64("tokens_per_block", tokens_per_block),
        u64("block_size_ratio", block_size_ratio),
        u64("remote_kernel_len", remote_kernel_len),
    )


def uncovered_token_ranges(
    local_blocks: Sequence[int],
    first_block_index: int,
    tokens_per_block: int,
    held_tokens: int,
    written: Iterable[TokenInterval],
) -> Tuple[ZeroRange, ...]:
    """Tokens of the listed blocks D neither holds nor receives (null blocks never zeroed)."""
    arr, n = u64_array("local_blocks", local_blocks)
    if isinstance(written, (str, bytes)) or not hasattr(written, "__iter__"):
        raise TypeError(f"written must be a sequence of pdkv.TokenInterval, got {type(written).__name__}")
    wl = list(written)
    warr = (_ffi.TokenIntervalC * len(wl))() if wl else None
    for i, w in enumerate(wl):
        if not isinstance(w, TokenInterval):
            raise TypeError(f"written[{i}] must be a pdkv.TokenInterval, got {type(w).__name__}")
        assert warr is not None
        warr[i].begin = u64(f"written[{i}].begin", w.begin)
        warr[i].end = u64(f"written[{i}].end", w.end)
    return _take_zero_ranges(
        "pdkv_uncovered_token_ranges",
        arr,
        n,
        u64("first_block_index", first_block_index),
        u64("tokens_per_block", tokens_per_block),
        u64("held_tokens", held_tokens),
        warr,
        len(wl),
    )
