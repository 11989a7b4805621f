"""Scheduler helpers (Mamba align-mode splits, the N-1 rule, remote-decode prefill) and KV
offload geometry."""

from __future__ import annotations

import ctypes
import dataclasses
from ctypes import byref, c_uint64
from typing import Iterable, Optional

from . import _ffi
from ._base import call, flag, u64


@dataclasses.dataclass(frozen=True)
class AlignedSplitV0604Input:
    """Inputs of the v0604 Mamba align-mode block-aligned chunk split (vLLM #42554)."""

    num_computed_tokens: int  #: Tokens computed so far.
    num_new_local_computed_tokens: int  #: New local prefix-cache hits.
    num_external_computed_tokens: int  #: Tokens loaded by the connector.
    num_new_tokens: int  #: Proposed by budget / threshold.
    num_prompt_tokens: int  #: Prompt length.
    num_tokens: int  #: Prompt + output so far.
    block_size: int  #: Mamba block size (tokens).
    use_eagle: bool = False  #: EAGLE keeps one block back.
    load_kv_async: bool = False  #: Asynchronous connector load: no split.


def mamba_aligned_split_v0604(input: AlignedSplitV0604Input) -> int:
    """The (possibly reduced) number of new tokens, v0604 form."""
    if not isinstance(input, AlignedSplitV0604Input):
        raise TypeError(f"input must be a pdkv.AlignedSplitV0604Input, got {type(input).__name__}")
    c = _ffi.AlignedSplitV0604InputC()
    c.struct_size = ctypes.sizeof(c)
    for f in dataclasses.fields(input):
        v = getattr(input, f.name)
        setattr(c, f.name, flag(f.name, v) if f.name in ("use_eagle", "load_kv_async") else u64(f.name, v))
    out = c_uint64()
    call("pdkv_mamba_aligned_split_v0604", byref(c), byref(out))
    return out.value


@dataclasses.dataclass(frozen=True)
class AlignedSplitInput:
    """Inputs of the main-branch Mamba align-mode split."""

    start: int  #: Tokens already computed (incl. external).
    num_new_tokens: int  #: Proposed by budget / threshold.
    num_prompt_tokens: int  #: Prompt length.
    num_tokens: int  #: Prompt + output so far.
    block_size: int  #: Mamba block size.
    floor_unit: Optional[int] = None  #: Finer floor for a sub-block chunk end; None: none (vLLM main).
    tail_hash_block_size: Optional[int] = None  #: Fine-grained tail hits; None: off.
    shared_prefix_tokens: int = 0  #: 0: no shared prefix.
    max_num_scheduled_tokens: Optional[int] = None  #: None: unlimited.
    long_prefill_token_threshold: Optional[int] = None  #: None: no threshold.
    use_eagle: bool = False  #: EAGLE keeps one block back.
    load_kv_async: bool = False  #: Asynchronous connector load.
    #: Return 0 (the request waits) instead of a sub-block chunk that no floor keeps when the
    #: block is wider than every chunk; False is vLLM main's default (the request progresses).
    defer_oversized_block: bool = False


_SPLIT_FLAGS = ("use_eagle", "load_kv_async", "defer_oversized_block")
_SPLIT_OPTIONAL = {
    "floor_unit": "PDKV_SPLIT_FIELD_FLOOR_UNIT",
    "tail_hash_block_size": "PDKV_SPLIT_FIELD_TAIL_HASH_BLOCK_SIZE",
    "max_num_scheduled_tokens": "PDKV_SPLIT_FIELD_MAX_NUM_SCHEDULED_TOKENS",
    "long_prefill_token_threshold": "PDKV_SPLIT_FIELD_LONG_PREFILL_TOKEN_THRESHOLD",
}


def mamba_aligned_split(input: AlignedSplitInput) -> int:
    """New tokens for this step, main-branch form. 0 means the request waits this step: a block
    that fits in a chunk is not reached by this step's budget, or ``defer_oversized_block``."""
    if not isinstance(input, AlignedSplitInput):
        raise TypeError(f"input must be a pdkv.AlignedSplitInput, got {type(input).__name__}")
    c = _ffi.AlignedSplitInputC()
    c.struct_size = ctypes.sizeof(c)
    for f in dataclasses.fields(input):
        v = getattr(input, f.name)
        bit = _SPLIT_OPTIONAL.get(f.name)
        if bit is not None:
            if v is None:  # an optional field left unset
                continue
            c.field_mask |= _ffi.FIELD_BITS[bit]
        setattr(c, f.name, flag(f.name, v) if f.name in _SPLIT_FLAGS else u64(f.name, v))
    out = c_uint64()
    call("pdkv_mamba_aligned_split", byref(c), byref(out))
    return out.value


@dataclasses.dataclass(frozen=True)
class RemoteDecodePrefill:
    """P side of a request decoded remotely."""

    num_prompt_tokens: int  #: Prompt length.
    max_tokens: int  #: Max output tokens.
    truncated: bool = False  #: The N-1 truncation was applied.


def truncate_for_remote_decode(request: RemoteDecodePrefill, has_mamba: bool) -> RemoteDecodePrefill:
    """Mamba: truncates the prompt to N-1 (N > 1) and sets max_tokens to 1, once (idempotent);
    other models only get max_tokens = 1."""
    if not isinstance(request, RemoteDecodePrefill):
        raise TypeError(f"request must be a pdkv.RemoteDecodePrefill, got {type(request).__name__}")
    c = _ffi.RemoteDecodePrefillC()
    c.struct_size = ctypes.sizeof(c)
    c.num_prompt_tokens = u64("num_prompt_tokens", request.num_prompt_tokens)
    c.max_tokens = u64("max_tokens", request.max_tokens)
    c.truncated = flag("truncated", request.truncated)
    out = _ffi.RemoteDecodePrefillC()
    out.struct_size = ctypes.sizeof(out)
    call("pdkv_truncate_for_remote_decode", byref(c), flag("has_mamba", has_mamba), byref(out))
    return RemoteDecodePrefill(out.num_prompt_tokens, out.max_tokens, bool(out.truncated))


@dataclasses.dataclass(frozen=True)
class RemoteDecodePrefillPlan:
    """What P schedules for a remotely decoded request given its own prefix hit."""

    num_prompt_tokens: int  #: After truncation.
    computed_tokens: int  #: Usable local hit.
    new_tokens: int  #: >= 1.


def plan_remote_decode_prefill(
    num_prompt_tokens: int, local_hit_tokens: int, block_size: int, has_mamba: bool
) -> RemoteDecodePrefillPlan:
    """P's schedule for a remotely decoded request (fixes vLLM #53514)."""
    out = _ffi.RemoteDecodePrefillPlanC()
    out.struct_size = ctypes.sizeof(out)
    call(
        "pdkv_plan_remote_decode_prefill",
        u64("num_prompt_tokens", num_prompt_tokens),
        u64("local_hit_tokens", local_hit_tokens),
        u64("block_size", block_size),
        flag("has_mamba", has_mamba),
        byref(out),
    )
    return RemoteDecodePrefillPlan(out.num_prompt_tokens, out.computed_tokens, out.new_tokens)


@dataclasses.dataclass(frozen=True)
class OffloadLayer:
    """One registered KV tensor: its size and the page (bytes per block) of its layer."""

    tensor_bytes: int  #: Tensor size in bytes.
    page_bytes: int  #: Bytes per block.


@dataclasses.dataclass(frozen=True)
class OffloadGeometry:
    """Offload geometry (vLLM #38554)."""

    num_blocks: int  #: From the KV cache configuration.
    hash_blocks_per_block: int  #: gpu_block_size / hash_block_size.


def derive_offload_geometry(
    config_num_blocks: int, gpu_block_size: int, hash_block_size: int, layers: Iterable[OffloadLayer]
) -> OffloadGeometry:
    """Offload geometry: the block count comes from the cache configuration; each layer is only
    checked to hold num_blocks pages."""
    if isinstance(layers, (str, bytes)) or not hasattr(layers, "__iter__"):
        raise TypeError(f"layers must be a sequence of pdkv.OffloadLayer, got {type(layers).__name__}")
    items = list(layers)
    arr = (_ffi.OffloadLayerC * len(items))() if items else None
    for i, layer in enumerate(items):
        if not isinstance(layer, OffloadLayer):
            raise TypeError(f"layers[{i}] must be a pdkv.OffloadLayer, got {type(layer).__name__}")
        assert arr is not None
        arr[i].tensor_bytes = u64(f"layers[{i}].tensor_bytes", layer.tensor_bytes)
        arr[i].page_bytes = u64(f"layers[{i}].page_bytes", layer.page_bytes)
    out = _ffi.OffloadGeometryC()
    out.struct_size = ctypes.sizeof(out)
    call(
        "pdkv_derive_offload_geometry",
        u64("config_num_blocks", config_num_blocks),
        u64("gpu_block_size", gpu_block_size),
        u64("hash_block_size", hash_block_size),
        arr,
        len(items),
        byref(out),
    )
    return OffloadGeometry(out.num_blocks, out.hash_blocks_per_block)


