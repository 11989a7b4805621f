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
    #: An MLA-typed attention region of a GQA model: one latent replicated on every rank.
    MLA = 2


class Transport(enum.IntEnum):
    """``pdkv_transport_t``: how UCX carries data."""

    AUTO = 0  #: Shared memory for a peer on the same host, TCP otherwise.
    SHM = 1  #: UCX shared memory and cross-memory attach (one host).
    TCP = 2  #: UCX over TCP with peer error handling.


class ProgressMode(enum.IntEnum):
    """``pdkv_progress_mode_t``: who drives UCX progress."""

    THREAD = 0  #: A background thread of the agent.
    CALLER = 1  #: The caller calls :meth:`pdkv.Agent.progress`.


class MemoryType(enum.IntEnum):
    """``pdkv_memory_type_t``: where registered memory lives."""

    HOST = 0
    CUDA = 1  #: GPU device memory (this build of the library refuses it).


class TransferOp(enum.IntEnum):
    """``pdkv_transfer_op_t``: direction of a transfer."""

    READ = 0  #: Posted by the D rank: D pulls from the P ranks.
    WRITE = 1  #: Posted by a P rank with the same plan: it pushes its reads into D.


class TransferState(enum.IntEnum):
    """``pdkv_transfer_state_t``: state of a transfer."""

    IN_FLIGHT = 0
    DONE = 1
    FAILED = 2


class NotificationKind(enum.IntEnum):
    """``pdkv_notification_kind_t``: kinds of notification."""

    READ_DONE = 0  #: (On P) a D rank finished reading a request from this rank.
    WRITE_DONE = 1  #: (On D) a P rank finished writing a request into this rank.
    REQUEST_COMPLETE = 2  #: A leased request received its expected count.
    LEASE_EXPIRED = 3  #: A lease's time ran out before its count was reached.
    PEER_CONNECTED = 4  #: A peer completed the handshake (either direction).
    PEER_LOST = 5  #: A peer died, closed, failed heartbeats or misbehaved.
