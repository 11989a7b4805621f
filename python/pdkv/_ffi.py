"""Low-level ctypes layer of pdkv: library discovery, C struct mirrors and the function table.

Everything here mirrors ``capi/include/pdkv.h`` one to one. The Pythonic API in the other
modules is built on it; application code should not need this module.
"""

from __future__ import annotations

import ctypes
import os
import threading
from ctypes import (
    POINTER,
    Structure,
    c_char_p,
    c_double,
    c_int,
    c_int32,
    c_int64,
    c_size_t,
    c_uint8,
    c_uint16,
    c_uint32,
    c_uint64,
)
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

#: ABI major version of the pdkv.h this package was written against (PDKV_VERSION_MAJOR).
HEADER_VERSION_MAJOR = 0
#: ABI minor version of the pdkv.h this package was written against (PDKV_VERSION_MINOR).
HEADER_VERSION_MINOR = 2


class LibraryLoadError(ImportError):
    """libpdkv could not be loaded; the message lists every place that was tried and why it failed."""

    def __init__(self, attempts: Sequence[Tuple[str, str]]) -> None:
        #: (where, why it failed) for each candidate, in search order.
        self.attempts: Tuple[Tuple[str, str], ...] = tuple(attempts)
        lines = ["could not load libpdkv; tried:"]
        lines += [f"  - {where}: {why}" for where, why in self.attempts]
        lines.append(
            f"set PDKV_LIB_DIR to the directory holding {library_file_name()} (e.g. <prefix>/lib or build/release/capi)"
        )
        super().__init__("\n".join(lines))


# ---- Opaque handle types -------------------------------------------------------------------


class ErrorT(Structure):
    """Opaque ``pdkv_error_t``."""


class ModelT(Structure):
    """Opaque ``pdkv_model_t``."""


class TpMappingT(Structure):
    """Opaque ``pdkv_tp_mapping_t``."""


class GeometryT(Structure):
    """Opaque ``pdkv_geometry_t``."""


class MambaReadListT(Structure):
    """Opaque ``pdkv_mamba_read_list_t``."""


class DescriptorListT(Structure):
    """Opaque ``pdkv_descriptor_list_t``."""


class U64ListT(Structure):
    """Opaque ``pdkv_u64_list_t``."""


class BytesT(Structure):
    """Opaque ``pdkv_bytes_t``."""


class StringT(Structure):
    """Opaque ``pdkv_string_t``."""


class ZeroRangeListT(Structure):
    """Opaque ``pdkv_zero_range_list_t``."""


class GroupTrimT(Structure):
    """Opaque ``pdkv_group_trim_t``."""


class EngineMetadataT(Structure):
    """Opaque ``pdkv_engine_metadata_t``."""


class HandshakeReportT(Structure):
    """Opaque ``pdkv_handshake_report_t``."""


class PlanContextT(Structure):
    """Opaque ``pdkv_plan_context_t``."""


class TransferPlanT(Structure):
    """Opaque ``pdkv_transfer_plan_t``."""


class EngineT(Structure):
    """Opaque ``pdkv_engine_t``."""


class AgentT(Structure):
    """Opaque ``pdkv_agent_t``."""


class MemoryT(Structure):
    """Opaque ``pdkv_memory_t``."""


class PeerT(Structure):
    """Opaque ``pdkv_peer_t``."""


class TransferT(Structure):
    """Opaque ``pdkv_transfer_t``."""


class NotificationListT(Structure):
    """Opaque ``pdkv_notification_list_t``."""


# ---- Struct mirrors ------------------------------------------------------------------------


class ModelDescC(Structure):
    """``pdkv_model_desc_t``."""

    _c_name_ = "pdkv_model_desc_t"
    _fields_ = [
        ("struct_size", c_size_t),
        ("name", c_char_p),
        ("source", c_char_p),
        ("num_kv_heads", c_uint32),
        ("head_size", c_uint32),
        ("head_size_v", c_uint32),
        ("use_mla", c_uint8),
        ("sliding_window", c_uint32),
        ("mamba_type", c_int32),
        ("mamba_num_heads", c_uint32),
        ("mamba_head_dim", c_uint32),
        ("mamba_d_state", c_uint32),
        ("mamba_n_groups", c_uint32),
        ("mamba_d_inner", c_uint64),
        ("mamba_conv_kernel", c_uint32),
        ("mamba_chunk_size", c_uint32),
        ("mamba_conv_rows_include_spec", c_uint8),
        ("dtype_bytes", c_uint32),
        ("default_ssm_dtype_bytes", c_uint32),
        ("layer_pattern", c_char_p),
        ("mla_head_size", c_uint32),
    ]


class TpMappingParamsC(Structure):
    """``pdkv_tp_mapping_params_t``."""

    _c_name_ = "pdkv_tp_mapping_params_t"
    _fields_ = [
        ("struct_size", c_size_t),
        ("local_tp", c_uint32),
        ("local_rank", c_uint32),
        ("remote_tp", c_uint32),
        ("total_kv_heads", c_uint32),
        ("use_mla", c_uint8),
        ("has_mamba", c_uint8),
    ]


class TpMappingInfoC(Structure):
    """``pdkv_tp_mapping_info_t``."""

    _c_name_ = "pdkv_tp_mapping_info_t"
    _fields_ = [
        ("struct_size", c_size_t),
        ("tp_ratio", c_int32),
        ("rank_offset_factor", c_uint32),
        ("local_replicated", c_uint8),
        ("remote_replicated", c_uint8),
        ("local_physical_heads", c_uint32),
        ("remote_physical_heads", c_uint32),
        ("num_attention_reads", c_uint32),
        ("notifications_expected", c_uint32),
    ]


class EngineConfigC(Structure):
    """``pdkv_engine_config_t``."""

    _c_name_ = "pdkv_engine_config_t"
    _fields_ = [
        ("struct_size", c_size_t),
        ("tp_size", c_uint32),
        ("kv_cache_dtype_bytes", c_uint32),
        ("conv_state_dtype_bytes", c_uint32),
        ("ssm_state_dtype_bytes", c_uint32),
        ("num_speculative_tokens", c_uint32),
        ("user_block_size", c_uint32),
        ("user_mamba_block_size", c_uint32),
        ("attention_backend", c_int32),
        ("preferred_block_size", c_uint32),
        ("kernel_block_sizes", POINTER(c_uint32)),
        ("num_kernel_block_sizes", c_size_t),
        ("kernel_block_multiple_of", c_uint32),
        ("mamba_cache_mode", c_int32),
        ("conv_layout", c_int32),
        ("kv_cache_element_bits", c_uint64),
        ("kv_cache_head_extra_bytes", c_uint64),
    ]


class GeometryInfoC(Structure):
    """``pdkv_geometry_info_t``."""

    _c_name_ = "pdkv_geometry_info_t"
    _fields_ = [
        ("struct_size", c_size_t),
        ("tp_size", c_uint32),
        ("kv_heads_per_rank", c_uint32),
        ("attn_bytes_per_token", c_uint64),
        ("hybrid", c_uint8),
        ("mamba_type", c_int32),
        ("conv_rows", c_uint64),
        ("conv_dim_local", c_uint64),
        ("conv_dtype_bytes", c_uint32),
        ("ssm_dtype_bytes", c_uint32),
        ("conv_bytes", c_uint64),
        ("ssm_bytes", c_uint64),
        ("mamba_page_bytes", c_uint64),
        ("align", c_uint32),
        ("min_block_size", c_uint64),
        ("block_size", c_uint64),
        ("block_size_raised", c_uint8),
        ("mamba_block_size", c_uint64),
        ("attn_page_bytes", c_uint64),
        ("mamba_page_padded_bytes", c_uint64),
        ("padding_ppm", c_uint64),
        ("padding_percent", c_double),
        ("kernel_block_size", c_uint64),
        ("physical_per_logical", c_uint64),
        ("kernel_page_bytes", c_uint64),
        ("num_projections", c_size_t),
        ("num_temporal_dims", c_size_t),
        ("num_log_lines", c_size_t),
        ("mla_bytes_per_token", c_uint64),
        ("mla_kernel_page_bytes", c_uint64),
        ("kv_head_bytes_per_token", c_uint64),
    ]


class ConvProjectionC(Structure):
    """``pdkv_conv_projection_t``."""

    _c_name_ = "pdkv_conv_projection_t"
    _fields_ = [
        ("struct_size", c_size_t),
        ("name", c_char_p),
        ("dim_local", c_uint64),
        ("dim_total", c_uint64),
        ("replicated", c_uint8),
        ("bytes", c_uint64),
        ("offset", c_uint64),
    ]


class ByteRangeC(Structure):
    """``pdkv_byte_range_t``."""

    _c_name_ = "pdkv_byte_range_t"
    _fields_ = [("offset", c_uint64), ("size", c_uint64)]


class MambaReadC(Structure):
    """``pdkv_mamba_read_t``."""

    _c_name_ = "pdkv_mamba_read_t"
    _fields_ = [
        ("p_rank", c_uint32),
        ("part", c_char_p),
        ("remote_offset", c_uint64),
        ("local_offset", c_uint64),
        ("length", c_uint64),
    ]


class RegionC(Structure):
    """``pdkv_region_t``."""

    _c_name_ = "pdkv_region_t"
    _fields_ = [("base", c_uint64), ("block_len", c_uint64), ("num_blocks", c_uint64)]


class DescriptorC(Structure):
    """``pdkv_descriptor_t``."""

    _c_name_ = "pdkv_descriptor_t"
    _fields_ = [("addr", c_uint64), ("len", c_uint64)]


class GroupBlockIdsC(Structure):
    """``pdkv_group_block_ids_t``."""

    _c_name_ = "pdkv_group_block_ids_t"
    _fields_ = [("kind", c_int32), ("ids", POINTER(c_uint64)), ("num_ids", c_size_t)]


class DescriptorLayoutC(Structure):
    """``pdkv_descriptor_layout_t``."""

    _c_name_ = "pdkv_descriptor_layout_t"
    _fields_ = [
        ("struct_size", c_size_t),
        ("num_blocks", c_uint64),
        ("block_size_ratio", c_uint64),
        ("blocks_per_logical", c_uint64),
        ("num_attention_regions", c_uint64),
        ("num_mamba_regions", c_uint64),
    ]


class ExchangeClipParamsC(Structure):
    """``pdkv_exchange_clip_params_t``."""

    _c_name_ = "pdkv_exchange_clip_params_t"
    _fields_ = [
        ("struct_size", c_size_t),
        ("kind", c_int32),
        ("hma_enabled", c_uint8),
        ("sliding_window", c_uint64),
        ("block_size", c_uint64),
        ("cache_mode", c_int32),
        ("num_speculative_blocks", c_uint64),
    ]


class ZeroRangeC(Structure):
    """``pdkv_zero_range_t``."""

    _c_name_ = "pdkv_zero_range_t"
    _fields_ = [("block", c_uint64), ("token_begin", c_uint64), ("token_end", c_uint64)]


class TokenIntervalC(Structure):
    """``pdkv_token_interval_t``."""

    _c_name_ = "pdkv_token_interval_t"
    _fields_ = [("begin", c_uint64), ("end", c_uint64)]


class GroupTrimInputC(Structure):
    """``pdkv_group_trim_input_t``."""

    _c_name_ = "pdkv_group_trim_input_t"
    _fields_ = [
        ("struct_size", c_size_t),
        ("kind", c_int32),
        ("cache_mode", c_int32),
        ("local_blocks", POINTER(c_uint64)),
        ("num_local_blocks", c_size_t),
        ("remote_blocks", POINTER(c_uint64)),
        ("num_remote_blocks", c_size_t),
        ("local_tokens_per_block", c_uint64),
        ("remote_tokens_per_block", c_uint64),
        ("remote_computed_tokens", c_uint64),
        ("local_hit_tokens", c_uint64),
        ("sliding_window", c_uint64),
        ("has_local_first_block", c_uint8),
        ("local_first_block", c_uint64),
        ("remote_first_block", c_uint64),
    ]


class TokenRunC(Structure):
    """``pdkv_token_run_t``."""

    _c_name_ = "pdkv_token_run_t"
    _fields_ = [
        ("local_block", c_uint64),
        ("local_token_begin", c_uint64),
        ("remote_block", c_uint64),
        ("remote_token_begin", c_uint64),
        ("num_tokens", c_uint64),
    ]


class StatePairC(Structure):
    """``pdkv_state_pair_t``."""

    _c_name_ = "pdkv_state_pair_t"
    _fields_ = [("local_block", c_uint64), ("remote_block", c_uint64), ("tokens", c_uint64)]


class AlignedSplitV0604InputC(Structure):
    """``pdkv_aligned_split_v0604_input_t``."""

    _c_name_ = "pdkv_aligned_split_v0604_input_t"
    _fields_ = [
        ("struct_size", c_size_t),
        ("num_computed_tokens", c_uint64),
        ("num_new_local_computed_tokens", c_uint64),
        ("num_external_computed_tokens", c_uint64),
        ("num_new_tokens", c_uint64),
        ("num_prompt_tokens", c_uint64),
        ("num_tokens", c_uint64),
        ("block_size", c_uint64),
        ("use_eagle", c_uint8),
        ("load_kv_async", c_uint8),
    ]


class AlignedSplitInputC(Structure):
    """``pdkv_aligned_split_input_t``."""

    _c_name_ = "pdkv_aligned_split_input_t"
    _fields_ = [
        ("struct_size", c_size_t),
        ("start", c_uint64),
        ("num_new_tokens", c_uint64),
        ("num_prompt_tokens", c_uint64),
        ("num_tokens", c_uint64),
        ("block_size", c_uint64),
        ("floor_unit", c_uint64),
        ("tail_hash_block_size", c_uint64),
        ("shared_prefix_tokens", c_uint64),
        ("max_num_scheduled_tokens", c_uint64),
        ("long_prefill_token_threshold", c_uint64),
        ("use_eagle", c_uint8),
        ("load_kv_async", c_uint8),
        ("defer_oversized_block", c_uint64),
    ]


class RemoteDecodePrefillC(Structure):
    """``pdkv_remote_decode_prefill_t``."""

    _c_name_ = "pdkv_remote_decode_prefill_t"
    _fields_ = [
        ("struct_size", c_size_t),
        ("num_prompt_tokens", c_uint64),
        ("max_tokens", c_uint64),
        ("truncated", c_uint8),
    ]


class RemoteDecodePrefillPlanC(Structure):
    """``pdkv_remote_decode_prefill_plan_t``."""

    _c_name_ = "pdkv_remote_decode_prefill_plan_t"
    _fields_ = [
        ("struct_size", c_size_t),
        ("num_prompt_tokens", c_uint64),
        ("computed_tokens", c_uint64),
        ("new_tokens", c_uint64),
    ]


class OffloadLayerC(Structure):
    """``pdkv_offload_layer_t``."""

    _c_name_ = "pdkv_offload_layer_t"
    _fields_ = [("tensor_bytes", c_uint64), ("page_bytes", c_uint64)]


class OffloadGeometryC(Structure):
    """``pdkv_offload_geometry_t``."""

    _c_name_ = "pdkv_offload_geometry_t"
    _fields_ = [("struct_size", c_size_t), ("num_blocks", c_uint64), ("hash_blocks_per_block", c_uint64)]


class EngineLayoutC(Structure):
    """``pdkv_engine_layout_t``."""

    _c_name_ = "pdkv_engine_layout_t"
    _fields_ = [
        ("struct_size", c_size_t),
        ("engine_id", c_char_p),
        ("tp_rank", c_uint32),
        ("num_logical_blocks", c_uint64),
        ("num_regions", c_uint32),
        ("base", c_uint64),
        ("region_bases", POINTER(c_uint64)),
        ("kv_layout", c_int32),
        ("prefix_caching", c_int32),
        ("region_kinds", POINTER(c_int32)),
        ("pp_size", c_uint32),
        ("pp_rank", c_uint32),
        ("layer_begin", c_uint32),
        ("layer_end", c_uint32),
    ]


class EngineMetadataInfoC(Structure):
    """``pdkv_engine_metadata_info_t``."""

    _c_name_ = "pdkv_engine_metadata_info_t"
    _fields_ = [
        ("struct_size", c_size_t),
        ("engine_id", c_char_p),
        ("tp_size", c_uint32),
        ("tp_rank", c_uint32),
        ("kv_layout", c_int32),
        ("conv_layout", c_int32),
        ("logical_block_size", c_uint32),
        ("kernel_block_size", c_uint32),
        ("physical_blocks_per_logical", c_uint32),
        ("num_kernel_blocks", c_uint64),
        ("num_regions", c_size_t),
        ("mamba_type", c_int32),
        ("conv_bytes", c_uint64),
        ("ssm_bytes", c_uint64),
        ("num_conv_projections", c_size_t),
        ("attention_bytes_per_token", c_uint64),
        ("use_mla", c_uint8),
        ("total_kv_heads", c_uint32),
        ("prefix_caching", c_uint8),
        ("cache_mode", c_int32),
        ("model_fingerprint", c_uint64),
        ("pp_size", c_uint32),
        ("pp_rank", c_uint32),
        ("layer_begin", c_uint32),
        ("layer_end", c_uint32),
    ]


class MetadataRegionC(Structure):
    """``pdkv_metadata_region_t``."""

    _c_name_ = "pdkv_metadata_region_t"
    _fields_ = [
        ("base", c_uint64),
        ("block_len", c_uint64),
        ("num_blocks", c_uint64),
        ("kind", c_int32),
        ("layer", c_uint32),
    ]


class IncompatibilityC(Structure):
    """``pdkv_incompatibility_t``."""

    _c_name_ = "pdkv_incompatibility_t"
    _fields_ = [
        ("struct_size", c_size_t),
        ("status", c_int32),
        ("field", c_char_p),
        ("local_value", c_char_p),
        ("remote_value", c_char_p),
        ("message", c_char_p),
        ("fix", c_char_p),
        ("text", c_char_p),
    ]


class PlanContextParamsC(Structure):
    """``pdkv_plan_context_params_t``."""

    _c_name_ = "pdkv_plan_context_params_t"
    _fields_ = [
        ("struct_size", c_size_t),
        ("local", POINTER(EngineMetadataT)),
        ("remote", POINTER(POINTER(EngineMetadataT))),
        ("num_remote", c_size_t),
        ("local_geometry", POINTER(GeometryT)),
        ("remote_geometry", POINTER(GeometryT)),
        ("mapping", POINTER(TpMappingT)),
        ("permute_on_receive", c_uint8),
    ]


class PlanGroupC(Structure):
    """``pdkv_plan_group_t``."""

    _c_name_ = "pdkv_plan_group_t"
    _fields_ = [
        ("struct_size", c_size_t),
        ("trim", POINTER(GroupTrimInputC)),
        ("regions", POINTER(c_uint32)),
        ("num_regions", c_size_t),
        ("layers", POINTER(c_uint32)),
        ("num_layers", c_size_t),
    ]


class PlanReadC(Structure):
    """``pdkv_plan_read_t``."""

    _c_name_ = "pdkv_plan_read_t"
    _fields_ = [
        ("local_region", c_uint32),
        ("local_offset", c_uint64),
        ("remote_region", c_uint32),
        ("remote_offset", c_uint64),
        ("length", c_uint64),
    ]


class TransferPlanInfoC(Structure):
    """``pdkv_transfer_plan_info_t``."""

    _c_name_ = "pdkv_transfer_plan_info_t"
    _fields_ = [
        ("struct_size", c_size_t),
        ("d_rank", c_uint32),
        ("d_tp", c_uint32),
        ("p_tp", c_uint32),
        ("num_read_ranks", c_size_t),
        ("num_notify_ranks", c_size_t),
        ("notifications_per_p_rank", c_uint32),
        ("num_groups", c_size_t),
        ("pieces_before_coalescing", c_uint64),
        ("pieces_after_coalescing", c_uint64),
        ("bytes", c_uint64),
        ("attention_bytes", c_uint64),
        ("mamba_bytes", c_uint64),
        ("empty", c_uint8),
        ("d_pp_size", c_uint64),
        ("d_pp_rank", c_uint64),
        ("p_pp_size", c_uint64),
        ("p_pp_rank", c_uint64),
        ("layer_begin", c_uint64),
        ("layer_end", c_uint64),
        ("permute_from_layout", c_uint64),
        ("permute_to_layout", c_uint64),
        ("permute_heads", c_uint64),
        ("permute_tokens", c_uint64),
        ("permute_head_bytes", c_uint64),
    ]


class StagePairC(Structure):
    """``pdkv_stage_pair_t``."""

    _c_name_ = "pdkv_stage_pair_t"
    _fields_ = [
        ("d_pp_rank", c_uint32),
        ("p_pp_rank", c_uint32),
        ("layer_begin", c_uint32),
        ("layer_end", c_uint32),
    ]


class PlanGroupZeroC(Structure):
    """``pdkv_plan_group_zero_t``."""

    _c_name_ = "pdkv_plan_group_zero_t"
    _fields_ = [
        ("struct_size", c_size_t),
        ("kind", c_int32),
        ("regions", POINTER(c_uint32)),
        ("num_regions", c_size_t),
        ("zero", POINTER(ZeroRangeC)),
        ("num_zero", c_size_t),
        ("unfilled_states", POINTER(c_uint64)),
        ("num_unfilled_states", c_size_t),
        ("permute_blocks", POINTER(c_uint64)),
        ("num_permute_blocks", c_size_t),
        ("permute_regions", POINTER(c_uint32)),
        ("num_permute_regions", c_size_t),
    ]


# ---- Transfer executor (pdkv/agent.h) ----------------------------------------------------

#: Field bits of the executor's options structs (``PDKV_*_FIELD_*``); test_ffi checks them
#: against the header.
FIELD_BITS: Dict[str, int] = {
    "PDKV_AGENT_FIELD_LISTEN_ADDRESS": 1 << 0,
    "PDKV_AGENT_FIELD_TRANSPORT": 1 << 1,
    "PDKV_AGENT_FIELD_PROGRESS_MODE": 1 << 2,
    "PDKV_AGENT_FIELD_DEFAULT_TIMEOUT": 1 << 3,
    "PDKV_AGENT_FIELD_PRESHARED_KEY": 1 << 4,
    "PDKV_AGENT_FIELD_HEARTBEAT": 1 << 5,
    "PDKV_AGENT_FIELD_MAX_OUTSTANDING": 1 << 6,
    "PDKV_MEMORY_FIELD_MEMORY_TYPE": 1 << 0,
    "PDKV_MEMORY_FIELD_DEVICE": 1 << 1,
    "PDKV_CONNECT_FIELD_TIMEOUT": 1 << 0,
    "PDKV_TRANSFER_FIELD_TIMEOUT": 1 << 0,
    "PDKV_TRANSFER_FIELD_NOTIFY": 1 << 1,
}


class AgentOptionsC(Structure):
    """``pdkv_agent_options_t``."""

    _c_name_ = "pdkv_agent_options_t"
    _fields_ = [
        ("struct_size", c_size_t),
        ("field_mask", c_uint64),
        ("metadata", POINTER(EngineMetadataT)),
        ("listen_address", c_char_p),
        ("transport", c_int32),
        ("progress_mode", c_int32),
        ("default_timeout_ms", c_uint64),
        ("preshared_key", POINTER(c_uint8)),
        ("preshared_key_len", c_size_t),
        ("heartbeat_interval_ms", c_uint32),
        ("heartbeat_timeout_ms", c_uint32),
        ("max_outstanding", c_uint32),
    ]


class AgentInfoC(Structure):
    """``pdkv_agent_info_t``."""

    _c_name_ = "pdkv_agent_info_t"
    _fields_ = [
        ("struct_size", c_size_t),
        ("engine_id", c_char_p),
        ("tp_rank", c_uint32),
        ("tp_size", c_uint32),
        ("listen_address", c_char_p),
        ("port", c_uint16),
        ("transport", c_int32),
        ("progress_mode", c_int32),
        ("num_peers", c_size_t),
        ("transfers_in_flight", c_size_t),
    ]


class MemoryDescC(Structure):
    """``pdkv_memory_desc_t``."""

    _c_name_ = "pdkv_memory_desc_t"
    _fields_ = [
        ("struct_size", c_size_t),
        ("field_mask", c_uint64),
        ("region", c_uint32),
        ("address", c_uint64),
        ("length", c_uint64),
        ("memory_type", c_int32),
        ("device", c_int32),
    ]


class ConnectOptionsC(Structure):
    """``pdkv_connect_options_t``."""

    _c_name_ = "pdkv_connect_options_t"
    _fields_ = [
        ("struct_size", c_size_t),
        ("field_mask", c_uint64),
        ("address", c_char_p),
        ("timeout_ms", c_uint64),
    ]


class PeerInfoC(Structure):
    """``pdkv_peer_info_t``."""

    _c_name_ = "pdkv_peer_info_t"
    _fields_ = [
        ("struct_size", c_size_t),
        ("engine_id", c_char_p),
        ("tp_rank", c_uint32),
        ("address", c_char_p),
        ("connected", c_uint8),
        ("inbound", c_uint8),
        ("transport", c_int32),
        ("lost_status", c_int32),
        ("bytes_read", c_uint64),
        ("bytes_written", c_uint64),
        ("transfers_done", c_uint64),
        ("transfers_failed", c_uint64),
        ("operations_failed", c_uint64),
        ("notifications_sent", c_uint64),
        ("notifications_received", c_uint64),
        ("heartbeat_rtt_us", c_uint64),
    ]


class TransferParamsC(Structure):
    """``pdkv_transfer_params_t``."""

    _c_name_ = "pdkv_transfer_params_t"
    _fields_ = [
        ("struct_size", c_size_t),
        ("field_mask", c_uint64),
        ("op", c_int32),
        ("plan", POINTER(TransferPlanT)),
        ("peer_engine_id", c_char_p),
        ("request_id", c_char_p),
        ("timeout_ms", c_uint64),
        ("notify", c_uint8),
    ]


class TransferInfoC(Structure):
    """``pdkv_transfer_info_t``."""

    _c_name_ = "pdkv_transfer_info_t"
    _fields_ = [
        ("struct_size", c_size_t),
        ("state", c_int32),
        ("status", c_int32),
        ("bytes_total", c_uint64),
        ("bytes_done", c_uint64),
        ("operations_total", c_uint64),
        ("operations_done", c_uint64),
        ("reads_failed", c_uint64),
        ("elapsed_us", c_uint64),
    ]


class FailedReadC(Structure):
    """``pdkv_failed_read_t``."""

    _c_name_ = "pdkv_failed_read_t"
    _fields_ = [
        ("p_rank", c_uint32),
        ("reserved", c_uint32),
        ("read_index", c_uint64),
        ("status", c_int32),
        ("reserved2", c_uint32),
    ]


class NotificationC(Structure):
    """``pdkv_notification_t``."""

    _c_name_ = "pdkv_notification_t"
    _fields_ = [
        ("struct_size", c_size_t),
        ("kind", c_int32),
        ("status", c_int32),
        ("request_id", c_char_p),
        ("engine_id", c_char_p),
        ("tp_rank", c_uint32),
        ("count", c_uint32),
        ("expected", c_uint32),
        ("bytes", c_uint64),
    ]


#: Every struct mirror, for the layout test (compared against the C compiler's sizeof/offsetof).

# ---- Engine-level API (pdkv/engine.h) --------------------------------------------------------


class EngineOptionsC(Structure):
    """``pdkv_engine_options_t``."""

    _c_name_ = "pdkv_engine_options_t"
    _fields_ = [
        ("struct_size", c_size_t),
        ("model", POINTER(ModelT)),
        ("config", POINTER(EngineConfigC)),
        ("engine_id", c_char_p),
        ("tp_rank", c_uint32),
        ("num_logical_blocks", c_uint64),
        ("base", c_uint64),
        ("region_bases", POINTER(c_uint64)),
        ("num_region_bases", c_size_t),
        ("kv_layout", c_int32),
        ("prefix_caching", c_int32),
    ]


class EngineInfoC(Structure):
    """``pdkv_engine_info_t``."""

    _c_name_ = "pdkv_engine_info_t"
    _fields_ = [
        ("struct_size", c_size_t),
        ("num_groups", c_size_t),
        ("num_regions", c_uint32),
        ("tp_size", c_uint32),
        ("tp_rank", c_uint32),
        ("cache_mode", c_int32),
        ("logical_block_size", c_uint64),
        ("kernel_block_size", c_uint64),
        ("physical_blocks_per_logical", c_uint64),
        ("num_logical_blocks", c_uint64),
        ("num_speculative_tokens", c_uint64),
        ("prefix_caching", c_uint8),
    ]


class EngineGroupC(Structure):
    """``pdkv_engine_group_t``."""

    _c_name_ = "pdkv_engine_group_t"
    _fields_ = [
        ("struct_size", c_size_t),
        ("kind", c_int32),
        ("layers", POINTER(c_uint32)),
        ("num_layers", c_size_t),
        ("regions", POINTER(c_uint32)),
        ("num_regions", c_size_t),
    ]


class EnginePeerC(Structure):
    """``pdkv_engine_peer_t``."""

    _c_name_ = "pdkv_engine_peer_t"
    _fields_ = [
        ("struct_size", c_size_t),
        ("remote", POINTER(POINTER(EngineMetadataT))),
        ("num_remote", c_size_t),
        ("remote_config", POINTER(EngineConfigC)),
        ("permute_on_receive", c_uint8),
    ]


class EngineRequestGroupC(Structure):
    """``pdkv_engine_request_group_t`` (element layout fixed)."""

    _c_name_ = "pdkv_engine_request_group_t"
    _fields_ = [
        ("local_block_ids", POINTER(c_uint64)),
        ("num_local_block_ids", c_size_t),
        ("remote_block_ids", POINTER(c_uint64)),
        ("num_remote_block_ids", c_size_t),
    ]


class EngineRequestC(Structure):
    """``pdkv_engine_request_t``."""

    _c_name_ = "pdkv_engine_request_t"
    _fields_ = [
        ("struct_size", c_size_t),
        ("groups", POINTER(EngineRequestGroupC)),
        ("num_groups", c_size_t),
        ("num_prompt_tokens", c_uint64),
        ("num_local_computed_tokens", c_uint64),
    ]


STRUCTS: Tuple[type, ...] = (
    ModelDescC,
    TpMappingParamsC,
    TpMappingInfoC,
    EngineConfigC,
    GeometryInfoC,
    ConvProjectionC,
    ByteRangeC,
    MambaReadC,
    RegionC,
    DescriptorC,
    GroupBlockIdsC,
    DescriptorLayoutC,
    ExchangeClipParamsC,
    ZeroRangeC,
    TokenIntervalC,
    GroupTrimInputC,
    TokenRunC,
    StatePairC,
    AlignedSplitV0604InputC,
    AlignedSplitInputC,
    RemoteDecodePrefillC,
    RemoteDecodePrefillPlanC,
    OffloadLayerC,
    OffloadGeometryC,
    EngineLayoutC,
    EngineMetadataInfoC,
    MetadataRegionC,
    IncompatibilityC,
    PlanContextParamsC,
    PlanGroupC,
    PlanReadC,
    TransferPlanInfoC,
    PlanGroupZeroC,
    StagePairC,
    AgentOptionsC,
    AgentInfoC,
    MemoryDescC,
    ConnectOptionsC,
    PeerInfoC,
    TransferParamsC,
    TransferInfoC,
    FailedReadC,
    NotificationC,
    EngineOptionsC,
    EngineInfoC,
    EngineGroupC,
    EnginePeerC,
    EngineRequestGroupC,
    EngineRequestC,
)

# ---- Function table ------------------------------------------------------------------------

_st = c_int  # pdkv_status_t (a C enum: int)
_err = POINTER(POINTER(ErrorT))
_model = POINTER(ModelT)
_map = POINTER(TpMappingT)
_geo = POINTER(GeometryT)
_reads = POINTER(MambaReadListT)
_dlist = POINTER(DescriptorListT)
_u32p = POINTER(c_uint32)
_u64p = POINTER(c_uint64)
_szp = POINTER(c_size_t)
_region = POINTER(RegionC)
_range = POINTER(ByteRangeC)
_u64list = POINTER(U64ListT)
_zlist = POINTER(ZeroRangeListT)
_trim = POINTER(GroupTrimT)
_meta = POINTER(EngineMetadataT)
_report = POINTER(HandshakeReportT)
_ctx = POINTER(PlanContextT)
_plan = POINTER(TransferPlanT)
_engine = POINTER(EngineT)
_agent = POINTER(AgentT)
_memory = POINTER(MemoryT)
_peer = POINTER(PeerT)
_xfer = POINTER(TransferT)
_nlist = POINTER(NotificationListT)

#: name -> (restype, argtypes) for EVERY ``PDKV_API`` function of pdkv.h.
FUNCTIONS: Dict[str, Tuple[Any, List[Any]]] = {
    # Errors
    "pdkv_error_status": (_st, [POINTER(ErrorT)]),
    "pdkv_error_message": (c_char_p, [POINTER(ErrorT)]),
    "pdkv_error_free": (None, [POINTER(ErrorT)]),
    "pdkv_error_cause": (None, [POINTER(ErrorT), POINTER(c_int32), POINTER(c_int64)]),
    "pdkv_status_name": (c_char_p, [_st]),
    # Version
    "pdkv_version": (c_uint32, []),
    "pdkv_version_string": (c_char_p, []),
    # Model
    "pdkv_model_new": (_st, [POINTER(ModelDescC), POINTER(_model), _err]),
    "pdkv_model_from_preset": (_st, [c_char_p, POINTER(_model), _err]),
    "pdkv_model_from_hf_config_file": (_st, [c_char_p, c_char_p, POINTER(_model), _err]),
    "pdkv_model_from_hf_config_json": (_st, [c_char_p, c_size_t, c_char_p, POINTER(_model), _err]),
    "pdkv_model_describe": (_st, [_model, POINTER(ModelDescC), _err]),
    "pdkv_model_layer_counts": (_st, [_model, _u32p, _u32p, _err]),
    "pdkv_model_free": (None, [_model]),
    "pdkv_mamba_type_name": (c_char_p, [c_int32]),
    # Presets
    "pdkv_preset_count": (c_size_t, []),
    "pdkv_preset_at": (_st, [c_size_t, POINTER(c_char_p), POINTER(c_char_p), POINTER(c_char_p), _err]),
    # TP topology
    "pdkv_tp_ratio": (_st, [c_uint32, c_uint32, POINTER(c_int32), _err]),
    "pdkv_handshake_target_ranks": (_st, [c_uint32, c_uint32, c_uint32, _u32p, c_size_t, _szp, _err]),
    "pdkv_physical_head_range": (_st, [c_uint32, c_uint32, c_uint32, _u32p, _u32p, _err]),
    "pdkv_notifications_expected_per_request": (_st, [c_uint32, c_uint32, _u32p, _err]),
    "pdkv_tp_mapping_new": (_st, [POINTER(TpMappingParamsC), POINTER(_map), _err]),
    "pdkv_tp_mapping_get_info": (_st, [_map, POINTER(TpMappingInfoC), _err]),
    "pdkv_tp_mapping_ranks": (_st, [_map, c_int32, POINTER(_u32p), _szp, _err]),
    "pdkv_tp_mapping_attention_slot": (_st, [_map, c_uint32, _u32p, _err]),
    "pdkv_tp_mapping_free": (None, [_map]),
    # Engine settings
    "pdkv_engine_config_init": (_st, [POINTER(EngineConfigC), _err]),
    "pdkv_backend_name": (c_char_p, [c_int32]),
    "pdkv_backend_from_name": (_st, [c_char_p, POINTER(c_int32), _err]),
    # Geometry
    "pdkv_geometry_new": (_st, [_model, POINTER(EngineConfigC), POINTER(_geo), _err]),
    "pdkv_geometry_get_info": (_st, [_geo, POINTER(GeometryInfoC), _err]),
    "pdkv_geometry_projection": (_st, [_geo, c_size_t, POINTER(ConvProjectionC), _err]),
    "pdkv_geometry_temporal_shape": (_st, [_geo, POINTER(_u64p), _szp, _err]),
    "pdkv_geometry_log_line": (_st, [_geo, c_size_t, POINTER(c_char_p), _err]),
    "pdkv_geometry_free": (None, [_geo]),
    "pdkv_block_size_ratio": (_st, [c_uint64, c_uint64, _u64p, _err]),
    # Mamba state transfer
    "pdkv_mamba_local_conv_offsets": (_st, [_geo, _range, c_size_t, _szp, _err]),
    "pdkv_mamba_remote_conv_offsets": (_st, [_geo, c_uint32, c_int32, _range, c_size_t, _szp, _err]),
    "pdkv_mamba_ssm_read_range": (_st, [_geo, c_uint64, c_uint64, c_uint32, c_int32, _range, _err]),
    "pdkv_physical_blocks_per_logical": (_st, [c_uint64, c_uint64, c_uint64, _u64p, _err]),
    "pdkv_mamba_reads_new": (_st, [_geo, _geo, c_uint32, c_int32, POINTER(_reads), _err]),
    "pdkv_mamba_read_list_items": (_st, [_reads, POINTER(POINTER(MambaReadC)), _szp, _err]),
    "pdkv_mamba_read_list_source_ranks": (_st, [_reads, POINTER(_u32p), _szp, _err]),
    "pdkv_mamba_read_list_free": (None, [_reads]),
    # Descriptors
    "pdkv_descriptor_list_items": (_st, [_dlist, POINTER(POINTER(DescriptorC)), _szp, _err]),
    "pdkv_descriptor_list_free": (None, [_dlist]),
    "pdkv_attention_local_descriptors": (_st, [_region, c_size_t, c_uint32, POINTER(_dlist), _err]),
    "pdkv_attention_remote_descriptors": (
        _st,
        [_region, c_size_t, _region, c_size_t, _map, c_uint32, POINTER(_dlist), _err],
    ),
    "pdkv_attention_split_descriptors": (_st, [_dlist, _map, c_uint32, c_uint32, POINTER(_dlist), _err]),
    "pdkv_mamba_local_descriptors": (_st, [_region, c_size_t, c_uint64, _geo, POINTER(_dlist), _err]),
    "pdkv_mamba_remote_descriptors": (
        _st,
        [_region, c_size_t, c_uint64, _geo, _reads, c_uint32, POINTER(_dlist), _err],
    ),
    "pdkv_mamba_local_split_descriptors": (
        _st,
        [_region, c_size_t, c_uint64, _geo, _reads, c_uint32, POINTER(_dlist), _err],
    ),
    # Value lists
    "pdkv_u64_list_items": (_st, [_u64list, POINTER(_u64p), _szp, _err]),
    "pdkv_u64_list_free": (None, [_u64list]),
    "pdkv_bytes_data": (_st, [POINTER(BytesT), POINTER(POINTER(c_uint8)), _szp, _err]),
    "pdkv_bytes_free": (None, [POINTER(BytesT)]),
    "pdkv_string_text": (_st, [POINTER(StringT), POINTER(c_char_p), _szp, _err]),
    "pdkv_string_free": (None, [POINTER(StringT)]),
    # Block ids
    "pdkv_group_kind_name": (c_char_p, [c_int32]),
    "pdkv_logical_to_kernel_block_ids": (_st, [_u64p, c_size_t, c_int32, c_uint64, POINTER(_u64list), _err]),
    "pdkv_map_block_ids_for_block_size_ratio": (
        _st,
        [_u64p, c_size_t, c_int32, c_uint64, c_uint64, POINTER(_u64list), _err],
    ),
    "pdkv_descriptor_ids": (
        _st,
        [POINTER(GroupBlockIdsC), c_size_t, POINTER(DescriptorLayoutC), POINTER(_u64list), _err],
    ),
    "pdkv_mamba_descriptor_ids": (
        _st,
        [_u64p, c_size_t, c_uint64, c_uint64, c_uint64, c_uint64, POINTER(_u64list), _err],
    ),
    # Exchange clipping and zeroing
    "pdkv_sliding_window_blocks_to_keep": (_st, [c_uint64, c_uint64, _u64p, _err]),
    "pdkv_clip_exchange_blocks": (
        _st,
        [_u64p, c_size_t, POINTER(ExchangeClipParamsC), POINTER(_u64list), _err],
    ),
    "pdkv_zero_range_list_items": (_st, [_zlist, POINTER(POINTER(ZeroRangeC)), _szp, _err]),
    "pdkv_zero_range_list_free": (None, [_zlist]),
    "pdkv_receive_zero_ranges": (
        _st,
        [_u64p, c_size_t, c_uint64, c_uint64, c_uint64, POINTER(_zlist), _err],
    ),
    "pdkv_uncovered_token_ranges": (
        _st,
        [_u64p, c_size_t, c_uint64, c_uint64, c_uint64, POINTER(TokenIntervalC), c_size_t, POINTER(_zlist), _err],
    ),
    # Prefix trimming
    "pdkv_group_trim_new": (_st, [POINTER(GroupTrimInputC), POINTER(_trim), _err]),
    "pdkv_group_trim_summary": (_st, [_trim, POINTER(c_int32), _u64p, _err]),
    "pdkv_group_trim_runs": (_st, [_trim, POINTER(POINTER(TokenRunC)), _szp, _err]),
    "pdkv_group_trim_states": (_st, [_trim, POINTER(POINTER(StatePairC)), _szp, _err]),
    "pdkv_group_trim_zero_ranges": (_st, [_trim, POINTER(POINTER(ZeroRangeC)), _szp, _err]),
    "pdkv_group_trim_unfilled_states": (_st, [_trim, POINTER(_u64p), _szp, _err]),
    "pdkv_group_trim_free": (None, [_trim]),
    # Scheduler helpers
    "pdkv_mamba_aligned_split_v0604": (_st, [POINTER(AlignedSplitV0604InputC), _u64p, _err]),
    "pdkv_mamba_aligned_split": (_st, [POINTER(AlignedSplitInputC), _u64p, _err]),
    "pdkv_d_num_new_matched_tokens": (_st, [c_uint64, c_uint64, c_uint8, _u64p, _err]),
    "pdkv_truncate_for_remote_decode": (
        _st,
        [POINTER(RemoteDecodePrefillC), c_uint8, POINTER(RemoteDecodePrefillC), _err],
    ),
    "pdkv_plan_remote_decode_prefill": (
        _st,
        [c_uint64, c_uint64, c_uint64, c_uint8, POINTER(RemoteDecodePrefillPlanC), _err],
    ),
    # KV offloading
    "pdkv_derive_offload_geometry": (
        _st,
        [c_uint64, c_uint64, c_uint64, POINTER(OffloadLayerC), c_size_t, POINTER(OffloadGeometryC), _err],
    ),
    # Engine metadata
    "pdkv_engine_layout_init": (_st, [POINTER(EngineLayoutC), _err]),
    "pdkv_engine_metadata_from_model": (
        _st,
        [_model, POINTER(EngineConfigC), POINTER(EngineLayoutC), POINTER(_meta), _err],
    ),
    "pdkv_engine_metadata_get_info": (_st, [_meta, POINTER(EngineMetadataInfoC), _err]),
    "pdkv_engine_metadata_regions": (_st, [_meta, POINTER(POINTER(MetadataRegionC)), _szp, _err]),
    "pdkv_engine_metadata_conv_projection_bytes": (_st, [_meta, POINTER(_u64p), _szp, _err]),
    "pdkv_engine_metadata_encode": (_st, [_meta, POINTER(c_uint8), c_size_t, _szp, _err]),
    "pdkv_engine_metadata_encode_bytes": (_st, [_meta, POINTER(POINTER(BytesT)), _err]),
    "pdkv_engine_metadata_decode": (_st, [POINTER(c_uint8), c_size_t, POINTER(_meta), _err]),
    "pdkv_engine_metadata_equal": (_st, [_meta, _meta, POINTER(c_uint8), _err]),
    "pdkv_engine_metadata_free": (None, [_meta]),
    "pdkv_metadata_wire_version": (None, [POINTER(c_uint16), POINTER(c_uint16)]),
    "pdkv_crc32c": (_st, [POINTER(c_uint8), c_size_t, _u32p, _err]),
    "pdkv_model_fingerprint": (_st, [_model, _u64p, _err]),
    # Handshake validation
    "pdkv_handshake_validate": (_st, [_meta, _meta, POINTER(_report), _err]),
    "pdkv_handshake_validate_engine_ranks": (_st, [POINTER(_meta), c_size_t, POINTER(_report), _err]),
    "pdkv_handshake_report_count": (_st, [_report, _szp, _err]),
    "pdkv_handshake_report_item": (_st, [_report, c_size_t, POINTER(IncompatibilityC), _err]),
    "pdkv_handshake_report_free": (None, [_report]),
    "pdkv_handshake_require_compatible": (_st, [_meta, _meta, _err]),
    # Transfer plans
    "pdkv_plan_context_new": (_st, [POINTER(PlanContextParamsC), POINTER(_ctx), _err]),
    "pdkv_plan_context_mapping": (_st, [_ctx, POINTER(_map), _err]),
    "pdkv_plan_context_free": (None, [_ctx]),
    "pdkv_transfer_plan_compile": (_st, [_ctx, POINTER(PlanGroupC), c_size_t, POINTER(_plan), _err]),
    "pdkv_transfer_plan_validate": (_st, [_plan, _ctx, POINTER(PlanGroupC), c_size_t, _err]),
    "pdkv_transfer_plan_get_info": (_st, [_plan, POINTER(TransferPlanInfoC), _err]),
    "pdkv_transfer_plan_read_ranks": (_st, [_plan, POINTER(_u32p), _szp, _err]),
    "pdkv_transfer_plan_rank_reads": (
        _st,
        [_plan, c_uint32, POINTER(POINTER(PlanReadC)), _szp, _u64p, _err],
    ),
    "pdkv_transfer_plan_notify_ranks": (_st, [_plan, POINTER(_u32p), _szp, _err]),
    "pdkv_transfer_plan_group_zero": (_st, [_plan, c_size_t, POINTER(PlanGroupZeroC), _err]),
    "pdkv_transfer_plan_to_json": (_st, [_plan, POINTER(ctypes.c_char), c_size_t, _szp, _err]),
    "pdkv_transfer_plan_to_json_string": (_st, [_plan, POINTER(POINTER(StringT)), _err]),
    "pdkv_transfer_plan_free": (None, [_plan]),
    "pdkv_permute_kv_block": (
        _st,
        [POINTER(c_uint8), c_size_t, c_int32, c_int32, c_uint64, c_uint64, c_uint64, _err],
    ),
    # Pipeline parallelism
    "pdkv_pipeline_layer_window": (_st, [c_uint32, c_uint32, c_uint32, _u32p, _u32p, _err]),
    "pdkv_pipeline_stage_pairs": (
        _st,
        [POINTER(_meta), c_size_t, POINTER(_meta), c_size_t, POINTER(StagePairC), c_size_t, _szp, _err],
    ),
    "pdkv_pipeline_notifications_expected": (
        _st,
        [POINTER(StagePairC), c_size_t, c_uint32, c_uint32, c_uint32, _u32p, _err],
    ),
    # Engine-level API (pdkv/engine.h)
    "pdkv_engine_options_init": (_st, [POINTER(EngineOptionsC), _err]),
    "pdkv_engine_new": (_st, [POINTER(EngineOptionsC), POINTER(_engine), _err]),
    "pdkv_engine_free": (None, [_engine]),
    "pdkv_engine_get_info": (_st, [_engine, POINTER(EngineInfoC), _err]),
    "pdkv_engine_group": (_st, [_engine, c_size_t, POINTER(EngineGroupC), _err]),
    "pdkv_engine_get_metadata": (_st, [_engine, POINTER(_meta), _err]),
    "pdkv_engine_registration_descriptors": (_st, [_engine, POINTER(_dlist), _err]),
    "pdkv_engine_plan_context_new": (_st, [_engine, POINTER(EnginePeerC), POINTER(_ctx), _err]),
    "pdkv_engine_plan_request": (_st, [_engine, _ctx, POINTER(EngineRequestC), POINTER(_plan), _err]),
    # Transfer executor: agent
    "pdkv_agent_new": (_st, [POINTER(AgentOptionsC), POINTER(_agent), _err]),
    "pdkv_agent_free": (None, [_agent]),
    "pdkv_agent_get_info": (_st, [_agent, POINTER(AgentInfoC), _err]),
    "pdkv_agent_progress": (_st, [_agent, _u32p, _err]),
    "pdkv_agent_event_fd": (_st, [_agent, POINTER(c_int), _err]),
    # Memory
    "pdkv_agent_register_memory": (_st, [_agent, POINTER(MemoryDescC), POINTER(_memory), _err]),
    "pdkv_memory_deregister": (_st, [_memory, _err]),
    "pdkv_memory_free": (None, [_memory]),
    # Peers
    "pdkv_agent_connect": (_st, [_agent, POINTER(ConnectOptionsC), POINTER(_peer), _err]),
    "pdkv_agent_find_peer": (_st, [_agent, c_char_p, c_uint32, POINTER(_peer), _err]),
    "pdkv_peer_get_info": (_st, [_peer, POINTER(PeerInfoC), _err]),
    "pdkv_peer_metadata": (_st, [_peer, POINTER(_meta), _err]),
    "pdkv_peer_disconnect": (_st, [_peer, _err]),
    "pdkv_peer_free": (None, [_peer]),
    # Transfers
    "pdkv_agent_post": (_st, [_agent, POINTER(TransferParamsC), POINTER(_xfer), _err]),
    "pdkv_transfer_get_info": (_st, [_xfer, POINTER(TransferInfoC), _err]),
    "pdkv_transfer_wait": (_st, [_xfer, c_uint64, POINTER(c_uint8), _err]),
    "pdkv_transfer_cancel": (_st, [_xfer, _err]),
    "pdkv_transfer_failed_reads": (_st, [_xfer, POINTER(POINTER(FailedReadC)), _szp, _err]),
    "pdkv_transfer_free": (None, [_xfer]),
    # Notifications and leases
    "pdkv_agent_lease": (_st, [_agent, c_char_p, c_uint32, c_uint64, _err]),
    "pdkv_agent_poll_notifications": (_st, [_agent, POINTER(_nlist), _err]),
    "pdkv_notification_list_count": (_st, [_nlist, _szp, _err]),
    "pdkv_notification_list_get": (_st, [_nlist, c_size_t, POINTER(NotificationC), _err]),
    "pdkv_notification_list_free": (None, [_nlist]),
}

# ---- Library discovery ---------------------------------------------------------------------

_PACKAGE_DIR = Path(__file__).resolve().parent
#: The repository root when the package runs from a source checkout (python/pdkv/ -> repo).
_REPO_ROOT = _PACKAGE_DIR.parent.parent


def library_file_name() -> str:
    """The file name looked for: the library's SONAME, one per ABI major version (``libpdkv.so.0``)."""
    return f"libpdkv.so.{HEADER_VERSION_MAJOR}"


def _installed_lib_dir() -> Optional[str]:
    """The directory recorded when this package was installed (``pdkv/_install.py``, written by
    ``setup.py``), or None: running from a source checkout, or nothing was found then."""
    try:
        from . import _install  # type: ignore[attr-defined]  # generated at install time
    except ImportError:
        return None
    value = getattr(_install, "LIB_DIR", None)
    return value if isinstance(value, str) and value else None


def library_candidates(
    environ: Optional[Dict[str, str]] = None, installed_lib_dir: Optional[str] = None
) -> List[Tuple[str, Optional[str]]]:
    """The places libpdkv is looked for, in order, as (description, path or None).

    1. ``$PDKV_LIB_DIR/libpdkv.so.0``: ``PDKV_LIB_DIR`` is the one variable every pdkv binding
       reads (Rust, Python), the directory holding the library;
    2. ``libpdkv.so.0`` next to this package (a package shipped with its library);
    3. the directory recorded at install time (``PDKV_LIB_DIR`` when ``pip install`` ran, else
       ``pkg-config --variable=libdir pdkv``, else the checkout's ``build/release/capi``);
    4. ``build/release/capi`` of the source checkout this package sits in, if any;
    5. ``libpdkv.so.0`` through the dynamic loader's own search (``LD_LIBRARY_PATH``,
       ``ldconfig``'s cache, the system directories).

    ``environ`` and ``installed_lib_dir`` default to the process environment and the recorded
    directory; they are parameters so that the order can be tested.
    """
    env = os.environ if environ is None else environ
    name = library_file_name()
    installed = _installed_lib_dir() if installed_lib_dir is None else installed_lib_dir or None
    out: List[Tuple[str, Optional[str]]] = []
    explicit = env.get("PDKV_LIB_DIR")
    out.append(("$PDKV_LIB_DIR", os.path.join(explicit, name) if explicit else None))
    out.append(("next to the package", str(_PACKAGE_DIR / name)))
    out.append(("the directory recorded at install time", os.path.join(installed, name) if installed else None))
    checkout = _REPO_ROOT / "build" / "release" / "capi"
    out.append(("source checkout build", str(checkout / name) if (_REPO_ROOT / "capi").is_dir() else None))
    out.append(("the dynamic loader", name))
    return out


#: Why a candidate of :func:`library_candidates` names no path.
_NO_PATH_REASONS = {
    "$PDKV_LIB_DIR": "not set",
    "the directory recorded at install time": "none recorded (pip install found no pdkv through pkg-config)",
    "source checkout build": "not running from a source checkout",
}


def load_library(candidates: Sequence[Tuple[str, Optional[str]]]) -> Tuple[ctypes.CDLL, str]:
    """Loads the first candidate that opens and has a compatible version.

    Returns (library, path). Raises :class:`LibraryLoadError` listing every attempt when none does.
    """
    attempts: List[Tuple[str, str]] = []
    for where, path in candidates:
        if not path:
            attempts.append((where, _NO_PATH_REASONS.get(where, "nothing there")))
            continue
        label = f"{where} ({path})"
        if os.sep in path and not os.path.exists(path):
            attempts.append((label, "no such file"))
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError as exc:
            attempts.append((label, str(exc)))
            continue
        if not hasattr(lib, "pdkv_version"):
            attempts.append((label, "not a pdkv library (no pdkv_version symbol)"))
            continue
        _declare(lib)
        version = lib.pdkv_version()
        major = (version >> 16) & 0xFF
        if major != HEADER_VERSION_MAJOR:
            attempts.append(
                (
                    label,
                    f"ABI major version {major} (library {lib.pdkv_version_string().decode()})"
                    f" differs from the header's PDKV_VERSION_MAJOR {HEADER_VERSION_MAJOR}",
                )
            )
            continue
        return lib, path
    raise LibraryLoadError(attempts)


def _declare(lib: ctypes.CDLL) -> None:
    """Sets restype and argtypes of every function of :data:`FUNCTIONS` that ``lib`` exports.

    A library older than this package (same major, lower minor) lacks the newest functions:
    they are left undeclared and calling them raises :class:`MissingFunctionError`."""
    for name, (restype, argtypes) in FUNCTIONS.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            continue
        fn.restype = restype
        fn.argtypes = argtypes


class MissingFunctionError(AttributeError):
    """The loaded libpdkv does not export a function of pdkv.h (it predates that function)."""


def function(name: str) -> Any:
    """The declared C function ``name`` of the loaded library."""
    if name not in FUNCTIONS:
        raise KeyError(f"{name} is not a declared pdkv function")
    try:
        return getattr(lib(), name)
    except AttributeError:
        raise MissingFunctionError(
            f"the loaded libpdkv ({library_path()}, version {lib().pdkv_version_string().decode()}) "
            f"does not export {name}; rebuild it from this checkout"
        ) from None


_lock = threading.Lock()
_loaded: Optional[Tuple[ctypes.CDLL, str]] = None


def lib() -> ctypes.CDLL:
    """The loaded libpdkv (loaded on first use; raises :class:`LibraryLoadError`)."""
    global _loaded
    if _loaded is None:
        with _lock:
            if _loaded is None:
                _loaded = load_library(library_candidates())
    return _loaded[0]


def library_path() -> str:
    """Path (or loader name) libpdkv was loaded from."""
    lib()
    assert _loaded is not None
    return _loaded[1]


Fn = Callable[..., Any]
