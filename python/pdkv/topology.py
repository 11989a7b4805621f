"""TP topology: vLLM's tp_ratio, handshake targets, GQA head placement and TP mappings."""

from __future__ import annotations

import ctypes
import dataclasses
from ctypes import POINTER, byref, c_size_t, c_uint32
from typing import Tuple, Union

from . import _ffi
from ._base import Handle, array_copy, call, enum_value, flag, u32
from .enums import TpMappingList



@dataclasses.dataclass(frozen=True)
class TpMappingInfo:
    """Scalars of a :class:`TpMapping` (``pdkv_tp_mapping_info_t``)."""

    #: See :func:`tp_ratio`.
    tp_ratio: int
    #: Head-slice offset in the remote block, in local block_lens.
    rank_offset_factor: int
    #: local_tp_size > K.
    local_replicated: bool
    #: remote_tp_size > K.
    remote_replicated: bool
    #: max(1, K / local_tp_size).
    local_physical_heads: int
    #: max(1, K / remote_tp_size).
    remote_physical_heads: int
    #: Number of attention source ranks.
    num_attention_reads: int
    #: Notifications per request on each remote (P) rank.
    notifications_expected: int


class TpMapping(Handle):
    """Which remote ranks one local rank reads from, and where (``pdkv_tp_mapping_t``).
    Immutable; queries are thread-safe."""

    _free_name = "pdkv_tp_mapping_free"

    def __init__(
        self,
        local_tp_size: int,
        local_tp_rank: int,
        remote_tp_size: int,
        total_kv_heads: int,
        use_mla: bool = False,
        has_mamba: bool = False,
    ) -> None:
        """Computes the mapping. Raises :class:`TpNotDivisibleError`,
        :class:`HeadsNotDivisibleError`, :class:`InvalidArgumentError`."""
        p = _ffi.TpMappingParamsC()
        p.struct_size = ctypes.sizeof(p)
        p.local_tp_size = u32("local_tp_size", local_tp_size)
        p.local_tp_rank = u32("local_tp_rank", local_tp_rank)
        p.remote_tp_size = u32("remote_tp_size", remote_tp_size)
        p.total_kv_heads = u32("total_kv_heads", total_kv_heads)
        p.use_mla = flag("use_mla", use_mla)
        p.has_mamba = flag("has_mamba", has_mamba)
        out = POINTER(_ffi.TpMappingT)()
        call("pdkv_tp_mapping_new", byref(p), byref(out))
        self._adopt(out)

    def info(self) -> TpMappingInfo:
        """The mapping's scalars."""
        c = _ffi.TpMappingInfoC()
        c.struct_size = ctypes.sizeof(c)
        call("pdkv_tp_mapping_get_info", self._p(), byref(c))
        return TpMappingInfo(
            tp_ratio=c.tp_ratio,
            rank_offset_factor=c.rank_offset_factor,
            local_replicated=bool(c.local_replicated),
            remote_replicated=bool(c.remote_replicated),
            local_physical_heads=c.local_physical_heads,
            remote_physical_heads=c.remote_physical_heads,
            num_attention_reads=c.num_attention_reads,
            notifications_expected=c.notifications_expected,
        )

    def ranks(self, which: Union[TpMappingList, int, str]) -> Tuple[int, ...]:
        """One rank list of the mapping (a :class:`TpMappingList`, its value or name)."""
        w = enum_value("which", TpMappingList, which)
        ptr = POINTER(c_uint32)()
        n = c_size_t()
        call("pdkv_tp_mapping_ranks", self._p(), int(w), byref(ptr), byref(n))
        return array_copy(ptr, n.value, int)

    @property
    def handshake_targets(self) -> Tuple[int, ...]:
        """Remote ranks this rank handshakes with."""
        return self.ranks(TpMappingList.HANDSHAKE_TARGETS)

    @property
    def attention_sources(self) -> Tuple[int, ...]:
        """Remote ranks attention KV is read from (GQA dedup)."""
        return self.ranks(TpMappingList.ATTENTION_SOURCES)

    @property
    def mamba_sources(self) -> Tuple[int, ...]:
        """Remote ranks Mamba state is read from (empty without Mamba)."""
        return self.ranks(TpMappingList.MAMBA_SOURCES)

    @property
    def all_sources(self) -> Tuple[int, ...]:
        """Sorted union of attention and Mamba sources."""
        return self.ranks(TpMappingList.ALL_SOURCES)

    @property
    def attention_slots(self) -> Tuple[int, ...]:
        """Parallel to :attr:`all_sources`: index into :attr:`attention_sources`."""
        return self.ranks(TpMappingList.ATTENTION_SLOTS)

    @property
    def notify_targets(self) -> Tuple[int, ...]:
        """Remote ranks notified per request."""
        return self.ranks(TpMappingList.NOTIFY_TARGETS)

    def attention_slot(self, remote_tp_rank: int) -> int:
        """Attention slot of ``remote_tp_rank``; :class:`InvalidArgumentError` if not a source."""
        out = c_uint32()
        call("pdkv_tp_mapping_attention_slot", self._p(), u32("remote_tp_rank", remote_tp_rank), byref(out))
        return out.value
