"""Enumerations of pdkv.h as :class:`enum.IntEnum` (numeric values are the C ones).

The classes are generated from the header (``scripts/gen_bindings.py`` writes them into
``pdkv/_raw.py``): one per C enum, named after it (``pdkv_mamba_type_t`` -> :class:`MambaType`),
members named by their enumerators without the shared prefix (``PDKV_MAMBA_MAMBA2`` -> ``MAMBA2``).
"""

from __future__ import annotations

from ._raw import (
    AttentionBackend as AttentionBackend,
    ConvLayout as ConvLayout,
    ElementFormat as ElementFormat,
    GroupKind as GroupKind,
    KvLayout as KvLayout,
    MambaCacheMode as MambaCacheMode,
    MambaReadsRule as MambaReadsRule,
    MambaType as MambaType,
    MemoryType as MemoryType,
    NotificationKind as NotificationKind,
    ProgressMode as ProgressMode,
    RegionKind as RegionKind,
    TpMappingList as TpMappingList,
    TransferOp as TransferOp,
    TransferState as TransferState,
    Transport as Transport,
)

__all__ = [
    "MambaType",
    "AttentionBackend",
    "MambaCacheMode",
    "ConvLayout",
    "ElementFormat",
    "TpMappingList",
    "MambaReadsRule",
    "GroupKind",
    "KvLayout",
    "RegionKind",
    "Transport",
    "ProgressMode",
    "MemoryType",
    "TransferOp",
    "TransferState",
    "NotificationKind",
]
