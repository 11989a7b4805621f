"""Enumerations of pdkv.h as :class:`enum.IntEnum` (numeric values are the C ones)."""

from __future__ import annotations

import enum


class MambaType(enum.IntEnum):
    """``pdkv_mamba_type_t``: kind of the Mamba-like layers of a model."""

    NONE = 0
    MAMBA1 = 1
    MAMBA2 = 2
    GDN = 3
    SHORT_CONV = 4
    LINEAR = 5
    KDA = 6


class AttentionBackend(enum.IntEnum):
    """``pdkv_attention_backend_t``: attention backend, fixing the kernel block sizes."""

    FLASH_ATTN = 0
    TRITON = 1
    FLASHINFER = 2
    FLASHMLA = 3
    CUTLASS_MLA = 4
    FLASHINFER_MLA = 5
    CUSTOM = 100


class MambaCacheMode(enum.IntEnum):
    """``pdkv_mamba_cache_mode_t``: vLLM's Mamba prefix-cache mode."""

    NONE = 0
    ALIGN = 1
    ALL = 2


class ConvLayout(enum.IntEnum):
    """``pdkv_conv_layout_t``: layout of the Mamba conv state (only DS is transferable)."""

    DS = 0
    SD = 1


class TpMappingList(enum.IntEnum):
    """``pdkv_tp_mapping_list_t``: which rank list of a TP mapping to return."""

    HANDSHAKE_TARGETS = 0
    ATTENTION_SOURCES = 1
    MAMBA_SOURCES = 2
    ALL_SOURCES = 3
    ATTENTION_SLOTS = 4
    NOTIFY_TARGETS = 5


class MambaReadsRule(enum.IntEnum):
    """``pdkv_mamba_reads_rule_t``: pdkv's exact rule, or vLLM main's (to diagnose a peer)."""

    PDKV = 0
    VLLM = 1


class GroupKind(enum.IntEnum):
    """``pdkv_group_kind_t``: kind of one KV cache group."""

    ATTENTION = 0
    SLIDING_WINDOW = 1
    MAMBA = 2


class KvLayout(enum.IntEnum):
    """``pdkv_kv_layout_t``: attention KV layout of a kernel block."""

    HND = 0
    NHD = 1


class RegionKind(enum.IntEnum):
    """``pdkv_region_kind_t``: kind of the first layer using a registered region."""

    ATTENTION = 0
    MAMBA = 1
