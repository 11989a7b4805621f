"""Engine settings and per-engine geometry (attention/Mamba pages, block sizes, conv layout)."""

from __future__ import annotations

import ctypes
import dataclasses
from ctypes import POINTER, byref, c_char_p, c_size_t, c_uint32, c_uint64
from typing import Any, Optional, Sequence, Tuple, Union

from . import _ffi
from ._base import (
    Handle,
    array_copy,
    call,
    decode,
    enum_value,
    handle_arg,
    i32,
    index_arg,
    take_list,
    to_enum,
    u32,
    u64,
)
from .enums import AttentionBackend, ConvLayout, ElementFormat, MambaCacheMode, MambaType
from .model import Model, backend_from_name, element_format_from_name


@dataclasses.dataclass(frozen=True)
class EngineConfig:
    """Settings of one engine (P or D) that change the geometry (``pdkv_engine_config_t``).
    None leaves an optional field unset (vLLM's "auto" or "not given"). Enum fields accept the
    enum, its value or its name
    (``backend`` also any pdkv/vLLM backend name, e.g. ``"FLASH_ATTN"``)."""

    #: Tensor-parallel size, >= 1.
    tp_size: int = 1
    #: KV cache dtype bytes; None: the model dtype.
    kv_cache_dtype_bytes: Optional[int] = None
    #: Conv state dtype bytes; None: the model dtype.
    conv_state_dtype_bytes: Optional[int] = None
    #: SSM state dtype bytes; None: the model default, else the conv dtype.
    ssm_state_dtype_bytes: Optional[int] = None
    #: Speculative tokens (add conv rows for some models).
    num_speculative_tokens: int = 0
    #: --block-size; None: not given.
    user_block_size: Optional[int] = None
    #: --mamba-block-size ("all" mode); None: the model chunk size.
    user_mamba_block_size: Optional[int] = None
    #: Attention backend.
    backend: Union[AttentionBackend, int, str] = AttentionBackend.FLASH_ATTN
    #: CUSTOM backend only: preferred block size.
    preferred_block_size: int = 0
    #: CUSTOM backend only: explicit supported kernel block sizes (empty: use multiple_of).
    kernel_block_sizes: Tuple[int, ...] = ()
    #: CUSTOM backend only: MultipleOf(n) when no explicit list is given.
    kernel_block_multiple_of: int = 0
    #: Mamba prefix-cache mode.
    mamba_cache_mode: Union[MambaCacheMode, int, str] = MambaCacheMode.NONE
    #: Conv state layout (SD is rejected by the geometry).
    conv_layout: Union[ConvLayout, int, str] = ConvLayout.DS
    #: KV element format: bits per K/V element (4, 8, 16, 32, 64); None: 8 * the KV dtype bytes.
    kv_cache_element_bits: Optional[int] = None
    #: Bytes packed per token per KV head beside K and V (per-token-head scales: 8); 0: none.
    kv_cache_head_extra_bytes: int = 0
    #: Named element formats (:class:`ElementFormat`, its value, or a canonical / vLLM name such
    #: as ``"fp8_e5m2"``, ``"fp8"``, ``"bf16"``, ``"int8_per_token_head"``) of the model (--dtype),
    #: the KV cache (--kv-cache-dtype) and the Mamba conv / SSM state. None (or ``"auto"``): not
    #: named, except that a size left auto takes the format it falls back to (KV cache and conv
    #: state: model_format). They label the sizes above and must agree with them; the handshake
    #: refuses a peer whose known format differs (an unknown one is compatible with anything).
    model_format: Optional[Union[ElementFormat, int, str]] = None
    kv_cache_format: Optional[Union[ElementFormat, int, str]] = None
    conv_state_format: Optional[Union[ElementFormat, int, str]] = None
    ssm_state_format: Optional[Union[ElementFormat, int, str]] = None

    def backend_value(self) -> Union[AttentionBackend, int]:
        """The backend as an :class:`AttentionBackend` (names resolved by the library; a backend
        the library knows but this package does not stays its plain int value)."""
        if isinstance(self.backend, str) and self.backend.strip().upper() not in AttentionBackend.__members__:
            return backend_from_name(self.backend)
        return enum_value("backend", AttentionBackend, self.backend)

    def _to_c(self) -> _ffi.EngineConfigC:
        """The C struct, starting from pdkv_engine_config_init defaults (keeps its array alive)."""
        c = _ffi.EngineConfigC()
        call("pdkv_engine_config_init", byref(c))
        c.tp_size = u32("tp_size", self.tp_size)
        for name, bit in _CONFIG_OPTIONAL:
            value = getattr(self, name)
            if value is not None:  # an optional field: set with its bit
                c.field_mask |= _ffi.FIELD_BITS[bit]
                setattr(c, name, u32(name, value))
        c.num_speculative_tokens = u32("num_speculative_tokens", self.num_speculative_tokens)
        c.attention_backend = int(self.backend_value())
        c.preferred_block_size = u32("preferred_block_size", self.preferred_block_size)
        sizes = self.kernel_block_sizes
        if isinstance(sizes, (str, bytes)) or not isinstance(sizes, Sequence):
            raise TypeError(f"kernel_block_sizes must be a sequence of ints, got {type(sizes).__name__}")
        if sizes:
            arr = (c_uint32 * len(sizes))(*[u32(f"kernel_block_sizes[{i}]", s) for i, s in enumerate(sizes)])
            c.kernel_block_sizes = ctypes.cast(arr, POINTER(c_uint32))
            c._keep = arr
        c.num_kernel_block_sizes = len(sizes)
        c.kernel_block_multiple_of = u32("kernel_block_multiple_of", self.kernel_block_multiple_of)
        c.mamba_cache_mode = int(enum_value("mamba_cache_mode", MambaCacheMode, self.mamba_cache_mode))
        c.conv_layout = int(enum_value("conv_layout", ConvLayout, self.conv_layout))
        c.kv_cache_head_extra_bytes = u32("kv_cache_head_extra_bytes", self.kv_cache_head_extra_bytes)
        for name, bit in _CONFIG_FORMATS:
            fmt = _format_value(name, getattr(self, name))
            if fmt is not None:
                c.field_mask |= _ffi.FIELD_BITS[bit]
                setattr(c, name, fmt)
        return c


def _format_value(name: str, value: Optional[Union[ElementFormat, int, str]]) -> Optional[int]:
    """An element format field as its C value, or None when not named (None, "auto", UNKNOWN)."""
    if value is None:
        return None
    if isinstance(value, str):
        fmt = int(element_format_from_name(value))
    else:
        fmt = int(enum_value(name, ElementFormat, value))
    return None if fmt == ElementFormat.UNKNOWN else fmt


# The element format fields of pdkv_engine_config_t and their bits.
_CONFIG_FORMATS = (
    ("model_format", "PDKV_CONFIG_FIELD_MODEL_FORMAT"),
    ("kv_cache_format", "PDKV_CONFIG_FIELD_KV_CACHE_FORMAT"),
    ("conv_state_format", "PDKV_CONFIG_FIELD_CONV_STATE_FORMAT"),
    ("ssm_state_format", "PDKV_CONFIG_FIELD_SSM_STATE_FORMAT"),
)


# The optional fields of pdkv_engine_config_t and their bits.
_CONFIG_OPTIONAL = (
    ("kv_cache_dtype_bytes", "PDKV_CONFIG_FIELD_KV_CACHE_DTYPE"),
    ("conv_state_dtype_bytes", "PDKV_CONFIG_FIELD_CONV_STATE_DTYPE"),
    ("ssm_state_dtype_bytes", "PDKV_CONFIG_FIELD_SSM_STATE_DTYPE"),
    ("user_block_size", "PDKV_CONFIG_FIELD_BLOCK_SIZE"),
    ("user_mamba_block_size", "PDKV_CONFIG_FIELD_MAMBA_BLOCK_SIZE"),
    ("kv_cache_element_bits", "PDKV_CONFIG_FIELD_KV_CACHE_ELEMENT_BITS"),
)


@dataclasses.dataclass(frozen=True)
class GeometryInfo:
    """Scalars of a :class:`Geometry` (``pdkv_geometry_info_t``); sizes per rank."""

    tp_size: int  #: TP size of the engine.
    kv_heads_per_rank: int  #: max(1, K/TP); MLA: 1.
    attn_bytes_per_token: int  #: Attention bytes per token per rank.
    hybrid: bool  #: The model has Mamba layers.
    mamba_type: Union[MambaType, int]  #: Kind of Mamba layers.
    conv_rows: int  #: conv_kernel - 1 (+ speculative tokens).
    conv_dim_local: int  #: Conv channels per rank.
    conv_dtype_bytes: int  #: Conv state dtype bytes.
    ssm_dtype_bytes: int  #: SSM state dtype bytes.
    conv_bytes: int  #: Conv state bytes per logical block.
    ssm_bytes: int  #: Temporal state bytes per logical block.
    mamba_page_bytes: int  #: conv + ssm, unpadded.
    align: int  #: Rounding unit of the block-size rule.
    min_block_size: int  #: Smallest block whose attention page holds a Mamba page.
    block_size: int  #: Logical block size in tokens.
    block_size_raised: bool  #: block_size was raised to min_block_size.
    mamba_block_size: int  #: Tokens per Mamba state ("none": 0).
    attn_page_bytes: int  #: block_size * attn_bytes_per_token.
    mamba_page_padded_bytes: int  #: == attn_page_bytes for hybrids, else 0.
    padding_ppm: int  #: 1e6 * (padded - page) / page, rounded down.
    padding_percent: float  #: 100 * (padded - page) / page.
    kernel_block_size: int  #: Tokens per kernel block.
    physical_per_logical: int  #: ppl = block_size / kernel_block_size.
    kernel_page_bytes: int  #: attn_page_bytes / ppl (block_len in the handshake).
    num_projections: int  #: Conv projections.
    num_temporal_dims: int  #: Rank of the temporal state.
    num_log_lines: int  #: vLLM log lines.
    #: MLA-typed layers of a GQA model: bytes per token of their replicated latent (the same at
    #: every TP); 0 for other models.
    mla_bytes_per_token: int = 0
    mla_kernel_page_bytes: int = 0  #: kernel_block_size * mla_bytes_per_token.
    #: One KV head's entry per token: K and V elements plus the per-token-head extras.
    kv_head_bytes_per_token: int = 0


@dataclasses.dataclass(frozen=True)
class ConvProjection:
    """One projection of the conv channels (``pdkv_conv_projection_t``), DS layout."""

    name: str  #: "x", "B", "C", "Q", "K" or "V".
    dim_local: int  #: Channels held by one rank.
    dim_total: int  #: Channels of the whole model.
    replicated: bool  #: Each rank holds a copy (Mamba2 B/C with n_groups < TP).
    bytes: int  #: dim_local * conv_rows * conv dtype.
    offset: int  #: Byte offset in the page.


@dataclasses.dataclass(frozen=True)
class ByteRange:
    """A byte range inside one logical Mamba page (``pdkv_byte_range_t``)."""

    offset: int  #: First byte.
    size: int  #: Length in bytes.


def _ranges(fn: str, *args: Any) -> Tuple[ByteRange, ...]:
    """Calls a function returning a byte-range list and copies its ranges."""
    ranges: Tuple[ByteRange, ...] = take_list(
        "byte_range", _ffi.ByteRangeC, lambda r: ByteRange(r.offset, r.size), fn, *args
    )
    return ranges


class Geometry(Handle):
    """Per-engine geometry of a model (``pdkv_geometry_t``). Immutable; queries thread-safe."""

    _free_name = "pdkv_geometry_free"

    def __init__(self, model: Model, config: Optional[EngineConfig] = None) -> None:
        """Derives the geometry of ``model`` on engine ``config`` (default: TP1, FlashAttention).
        Raises :class:`HeadsNotDivisibleError`, :class:`UnsupportedLayoutError`,
        :class:`IncompatibleError`, ..."""
        config = EngineConfig() if config is None else config
        if not isinstance(config, EngineConfig):
            raise TypeError(f"config must be a pdkv.EngineConfig, got {type(config).__name__}")
        m = handle_arg("model", model, Model)
        c = config._to_c()
        out = POINTER(_ffi.GeometryT)()
        call("pdkv_geometry_new", m, byref(c), byref(out))
        self._adopt(out)
        #: The engine settings this geometry was derived for.
        self.config: EngineConfig = config

    def info(self) -> GeometryInfo:
        """The geometry's scalars."""
        c = _ffi.GeometryInfoC()
        c.struct_size = ctypes.sizeof(c)
        call("pdkv_geometry_get_info", self._p(), byref(c))
        values = {f.name: getattr(c, f.name) for f in dataclasses.fields(GeometryInfo)}
        values["hybrid"] = bool(c.hybrid)
        values["block_size_raised"] = bool(c.block_size_raised)
        values["mamba_type"] = to_enum(MambaType, c.mamba_type)
        return GeometryInfo(**values)

    def projection(self, index: int) -> ConvProjection:
        """Conv projection ``index``; :class:`OutOfBoundsError` past the end."""
        c = _ffi.ConvProjectionC()
        c.struct_size = ctypes.sizeof(c)
        call("pdkv_geometry_projection", self._p(), index_arg("index", index), byref(c))
        return ConvProjection(decode(c.name), c.dim_local, c.dim_total, bool(c.replicated), c.bytes, c.offset)

    def projections(self) -> Tuple[ConvProjection, ...]:
        """Every conv projection, in page order."""
        return tuple(self.projection(i) for i in range(self.info().num_projections))

    def temporal_shape(self) -> Tuple[int, ...]:
        """Per-rank temporal (SSM) state shape."""
        ptr = POINTER(c_uint64)()
        n = c_size_t()
        call("pdkv_geometry_temporal_shape", self._p(), byref(ptr), byref(n))
        return array_copy(ptr, n.value, int)

    def log_line(self, index: int) -> str:
        """vLLM's INFO log line ``index`` for this engine, verbatim."""
        line = c_char_p()
        call("pdkv_geometry_log_line", self._p(), index_arg("index", index), byref(line))
        return decode(line.value)

    def log_lines(self) -> Tuple[str, ...]:
        """Every vLLM log line for this engine."""
        return tuple(self.log_line(i) for i in range(self.info().num_log_lines))

    def mamba_local_conv_offsets(self) -> Tuple[ByteRange, ...]:
        """Cumulative (offset, size) of each conv projection in the local page."""
        return _ranges("pdkv_mamba_local_conv_offsets", self._p())

    def mamba_remote_conv_offsets(self, local_tp_rank: int, tp_ratio: int) -> Tuple[ByteRange, ...]:
        """vLLM main's remote conv slices for ``local_tp_rank`` (this is the LOCAL engine's
        geometry). Wrong for Mamba2 with n_groups < TP (vLLM #55208); plan with MambaReadList."""
        return _ranges(
            "pdkv_mamba_remote_conv_offsets", self._p(), u32("local_tp_rank", local_tp_rank), i32("tp_ratio", tp_ratio)
        )

    def mamba_ssm_read_range(
        self, remote_conv_bytes: int, remote_ssm_bytes: int, local_tp_rank: int, tp_ratio: int
    ) -> ByteRange:
        """vLLM's SSM temporal-state read in the remote page."""
        out = _ffi.ByteRangeC()
        call(
            "pdkv_mamba_ssm_read_range",
            self._p(),
            u64("remote_conv_bytes", remote_conv_bytes),
            u64("remote_ssm_bytes", remote_ssm_bytes),
            u32("local_tp_rank", local_tp_rank),
            i32("tp_ratio", tp_ratio),
            byref(out),
        )
        return ByteRange(out.offset, out.size)

