"""Engine metadata (what a rank advertises in the handshake), its wire format and handshake
validation."""

from __future__ import annotations

import ctypes
import dataclasses
from ctypes import POINTER, byref, c_int32, c_size_t, c_uint8, c_uint16, c_uint32, c_uint64
from typing import Any, Optional, Sequence, Tuple, Union

from . import _ffi
from ._base import (
    Handle,
    array_copy,
    bytes_arg,
    call,
    call_status,
    decode,
    encode,
    enum_value,
    handle_arg,
    integer,
    operation,
    take_bytes,
    to_enum,
    u32,
    u64,
    u64_array,
)
from .enums import ConvLayout, ElementFormat, KvLayout, MambaCacheMode, MambaType, RegionKind
from .errors import InvalidArgumentError, Status
from .geometry import EngineConfig
from .model import Model


@dataclasses.dataclass(frozen=True)
class EngineLayout:
    """Where an engine's regions live and what it advertises beyond its geometry
    (``pdkv_engine_layout_t``; defaults are pdkv_engine_layout_init's)."""

    engine_id: str = "engine"  #: Non-empty UTF-8, at most 256 bytes.
    tp_rank: int = 0  #: < config tp_size.
    num_logical_blocks: int = 64  #: Per region; kernel blocks = this * ppl.
    num_regions: int = 1  #: Registered KV tensors.
    base: int = 1 << 40  #: Address of region 0; regions follow back to back.
    region_bases: Optional[Tuple[int, ...]] = None  #: None, or num_regions explicit addresses.
    kv_layout: Union[KvLayout, int, str] = KvLayout.HND  #: Attention KV layout.
    prefix_caching: Optional[bool] = None  #: None: on iff mamba_cache_mode != none.
    #: None (derived: MAMBA for hybrids, else ATTENTION, and the attention layers' kinds in
    #: layer_pattern order for a model with MLA-typed layers), or one kind per region.
    region_kinds: Optional[Tuple[Union[RegionKind, int, str], ...]] = None
    #: Pipeline stage (metadata format 1.2): stage pp_rank of pp_size holding the model layers
    #: [layer_begin, layer_end); layer_end None: through the model's last layer. One stage
    #: (the default) holds every layer.
    pp_size: int = 1
    pp_rank: int = 0
    layer_begin: int = 0
    layer_end: Optional[int] = None

    def _to_c(self) -> Tuple[_ffi.EngineLayoutC, Any]:
        c = _ffi.EngineLayoutC()
        call("pdkv_engine_layout_init", byref(c))
        c.engine_id = encode("engine_id", self.engine_id)
        c.tp_rank = u32("tp_rank", self.tp_rank)
        c.num_logical_blocks = u64("num_logical_blocks", self.num_logical_blocks)
        c.num_regions = u32("num_regions", self.num_regions)
        c.base = u64("base", self.base)
        c.field_mask |= _ffi.FIELD_BITS["PDKV_LAYOUT_FIELD_PIPELINE"]
        c.pp_size = u32("pp_size", self.pp_size)
        c.pp_rank = u32("pp_rank", self.pp_rank)
        c.layer_begin = u32("layer_begin", self.layer_begin)
        if self.layer_end is not None:
            c.field_mask |= _ffi.FIELD_BITS["PDKV_LAYOUT_FIELD_LAYER_END"]
            c.layer_end = u32("layer_end", self.layer_end)
        keep = None
        if self.region_bases is not None:
            keep, n = u64_array("region_bases", self.region_bases)
            if n != self.num_regions:
                raise InvalidArgumentError(
                    Status.INVALID_ARGUMENT, f"region_bases has {n} entries but num_regions is {self.num_regions}"
                )
            c.region_bases = ctypes.cast(keep, POINTER(c_uint64)) if keep is not None else None
        if self.region_kinds is not None:
            kinds = [int(enum_value("region_kinds", RegionKind, k)) for k in self.region_kinds]
            if len(kinds) != self.num_regions:
                raise InvalidArgumentError(
                    Status.INVALID_ARGUMENT,
                    f"region_kinds has {len(kinds)} entries but num_regions is {self.num_regions}",
                )
            kinds_c = (c_int32 * max(1, len(kinds)))(*kinds)
            c.region_kinds = ctypes.cast(kinds_c, POINTER(c_int32))
            keep = (keep, kinds_c)
        c.kv_layout = int(enum_value("kv_layout", KvLayout, self.kv_layout))
        if self.prefix_caching is not None:
            c.field_mask |= _ffi.FIELD_BITS["PDKV_LAYOUT_FIELD_PREFIX_CACHING"]
            if isinstance(self.prefix_caching, bool):
                c.prefix_caching = int(self.prefix_caching)
            else:
                c.prefix_caching = integer("prefix_caching", self.prefix_caching, 0, 255)
        return c, keep


@dataclasses.dataclass(frozen=True)
class EngineMetadataInfo:
    """Scalars of an :class:`EngineMetadata` (``pdkv_engine_metadata_info_t``)."""

    engine_id: str  #: Engine id.
    tp_size: int  #: TP size.
    tp_rank: int  #: This rank.
    kv_layout: Union[KvLayout, int]  #: Attention KV layout.
    conv_layout: Union[ConvLayout, int]  #: Conv state layout.
    logical_block_size: int  #: Tokens per logical (HMA) block.
    kernel_block_size: int  #: Tokens per kernel block.
    physical_blocks_per_logical: int  #: ppl.
    num_kernel_blocks: int  #: Kernel blocks per region.
    num_regions: int  #: Regions.
    mamba_type: Union[MambaType, int]  #: NONE: pure attention.
    conv_bytes: int  #: Per rank per logical block.
    ssm_bytes: int  #: Per rank per logical block.
    num_conv_projections: int  #: Conv projections.
    attention_bytes_per_token: int  #: Per rank.
    use_mla: bool  #: MLA model.
    total_kv_heads: int  #: K.
    prefix_caching: bool  #: Prefix caching on.
    cache_mode: Union[MambaCacheMode, int]  #: Mamba cache mode.
    model_fingerprint: int  #: See :func:`model_fingerprint`.
    pp_size: int = 1  #: Pipeline stages of the engine (1 without PP).
    pp_rank: int = 0  #: This rank's stage.
    layer_begin: int = 0  #: First model layer the stage holds.
    layer_end: int = 0  #: One past its last layer; 0: through the model's last layer.
    #: Element formats (metadata format 1.3); UNKNOWN: not named, or metadata from an older pdkv
    #: (compatible with any format in the handshake).
    model_format: Union[ElementFormat, int] = ElementFormat.UNKNOWN
    kv_cache_format: Union[ElementFormat, int] = ElementFormat.UNKNOWN
    conv_state_format: Union[ElementFormat, int] = ElementFormat.UNKNOWN
    ssm_state_format: Union[ElementFormat, int] = ElementFormat.UNKNOWN


@dataclasses.dataclass(frozen=True)
class MetadataRegion:
    """One advertised region."""

    base: int  #: Base address.
    block_len: int  #: Kernel page bytes.
    num_blocks: int  #: Kernel blocks.
    kind: Union[RegionKind, int]  #: Kind of the first user layer.
    layer: int  #: Model layer index of the first user.


class EngineMetadata(Handle):
    """What one engine rank advertises in the handshake (``pdkv_engine_metadata_t``, wire
    format 1.x). Immutable; thread-safe. ``==`` compares field for field."""

    _free_name = "pdkv_engine_metadata_free"

    def __init__(self) -> None:
        raise TypeError("use EngineMetadata.from_model or EngineMetadata.decode")

    @classmethod
    def _wrap(cls, ptr: Any) -> "EngineMetadata":
        self = object.__new__(cls)
        self._adopt(ptr)
        return self

    @classmethod
    def from_model(
        cls, model: Model, config: Optional[EngineConfig] = None, layout: Optional[EngineLayout] = None
    ) -> "EngineMetadata":
        """Metadata of rank ``layout.tp_rank`` of an engine running ``model`` with ``config``."""
        m = handle_arg("model", model, Model)
        config = EngineConfig() if config is None else config
        layout = EngineLayout() if layout is None else layout
        if not isinstance(config, EngineConfig):
            raise TypeError(f"config must be a pdkv.EngineConfig, got {type(config).__name__}")
        if not isinstance(layout, EngineLayout):
            raise TypeError(f"layout must be a pdkv.EngineLayout, got {type(layout).__name__}")
        cc = config._to_c()
        lc, keep = layout._to_c()
        out = POINTER(_ffi.EngineMetadataT)()
        call("pdkv_engine_metadata_from_model", m, byref(cc), byref(lc), byref(out))
        del keep
        return cls._wrap(out)

    @classmethod
    def decode(cls, data: bytes) -> "EngineMetadata":
        """Decodes untrusted wire bytes from a peer; raises :class:`ParseError`,
        :class:`ChecksumError` or :class:`OutOfBoundsError`."""
        arr, n = bytes_arg("data", data)
        out = POINTER(_ffi.EngineMetadataT)()
        call("pdkv_engine_metadata_decode", arr, n, byref(out))
        return cls._wrap(out)

    def info(self) -> EngineMetadataInfo:
        """The metadata's scalars."""
        c = _ffi.EngineMetadataInfoC()
        c.struct_size = ctypes.sizeof(c)
        call("pdkv_engine_metadata_get_info", self._p(), byref(c))
        values = {f.name: getattr(c, f.name) for f in dataclasses.fields(EngineMetadataInfo)}
        values["engine_id"] = decode(c.engine_id)
        values["kv_layout"] = to_enum(KvLayout, c.kv_layout)
        values["conv_layout"] = to_enum(ConvLayout, c.conv_layout)
        values["mamba_type"] = to_enum(MambaType, c.mamba_type)
        values["cache_mode"] = to_enum(MambaCacheMode, c.cache_mode)
        values["use_mla"] = bool(c.use_mla)
        values["prefix_caching"] = bool(c.prefix_caching)
        for name in ("model_format", "kv_cache_format", "conv_state_format", "ssm_state_format"):
            values[name] = to_enum(ElementFormat, getattr(c, name))
        return EngineMetadataInfo(**values)

    def regions(self) -> Tuple[MetadataRegion, ...]:
        """The advertised regions."""
        ptr = POINTER(_ffi.MetadataRegionC)()
        n = c_size_t()
        call("pdkv_engine_metadata_regions", self._p(), byref(ptr), byref(n))
        return array_copy(
            ptr,
            n.value,
            lambda r: MetadataRegion(r.base, r.block_len, r.num_blocks, to_enum(RegionKind, r.kind), r.layer),
        )

    def conv_projection_bytes(self) -> Tuple[int, ...]:
        """Conv projection bytes in DS page order (empty for pure attention)."""
        ptr = POINTER(c_uint64)()
        n = c_size_t()
        call("pdkv_engine_metadata_conv_projection_bytes", self._p(), byref(ptr), byref(n))
        return array_copy(ptr, n.value, int)

    def encode(self) -> bytes:
        """The wire encoding (deterministic)."""
        return take_bytes("pdkv_engine_metadata_encode_bytes", self._p())

    def encode_into(self, buffer: Union[bytearray, memoryview]) -> int:
        """Encodes into a caller buffer; returns the encoded size. Raises
        :class:`BufferTooSmallError` (naming the needed size) when it does not fit."""
        if not isinstance(buffer, (bytearray, memoryview)) or (isinstance(buffer, memoryview) and buffer.readonly):
            raise TypeError(f"buffer must be a writable bytearray or memoryview, got {type(buffer).__name__}")
        n = c_size_t()
        cap = len(buffer)
        arr = (c_uint8 * cap).from_buffer(buffer) if cap else None
        try:
            call("pdkv_engine_metadata_encode", self._p(), arr, cap, byref(n))
        finally:
            del arr
        return n.value

    def encoded_size(self) -> int:
        """Size of the wire encoding in bytes."""
        n = c_size_t()
        status, exc = call_status("pdkv_engine_metadata_encode", self._p(), None, 0, byref(n))
        if exc is not None and status != Status.BUFFER_TOO_SMALL:
            raise exc
        return n.value

    def equals(self, other: "EngineMetadata") -> bool:
        """True when both metadata are field-for-field equal."""
        o = handle_arg("other", other, EngineMetadata)
        out = c_uint8()
        call("pdkv_engine_metadata_equal", self._p(), o, byref(out))
        return bool(out.value)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, EngineMetadata):
            return NotImplemented
        return self.equals(other)

    __hash__ = None  # type: ignore[assignment]


def metadata_wire_version() -> Tuple[int, int]:
    """Wire format version this library writes, as (major, minor)."""
    major, minor = c_uint16(), c_uint16()
    _ffi.function("pdkv_metadata_wire_version")(byref(major), byref(minor))
    return major.value, minor.value


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli) of ``data``, as the metadata header uses."""
    arr, n = bytes_arg("data", data)
    out = c_uint32()
    call("pdkv_crc32c", arr, n, byref(out))
    return out.value


@operation
def model_fingerprint(model: Model) -> int:
    """Stable 64-bit fingerprint of the geometry-relevant parts of a model."""
    out = c_uint64()
    call("pdkv_model_fingerprint", handle_arg("model", model, Model), byref(out))
    return out.value


@dataclasses.dataclass(frozen=True)
class Incompatibility:
    """One incompatibility found by a handshake validation."""

    status: Union[Status, int]  #: INCOMPATIBLE, TP_NOT_DIVISIBLE, ...
    field: str  #: Metadata field, e.g. "kv_layout".
    local_value: str  #: The local side's value.
    remote_value: str  #: The remote side's value.
    message: str  #: What is wrong.
    fix: str  #: What the operator can change.
    text: str  #: One-line summary.


class HandshakeReport(Handle):
    """Every incompatibility found by one validation (``pdkv_handshake_report_t``); empty:
    the pair can be served. Sized, indexable and iterable."""

    _free_name = "pdkv_handshake_report_free"

    def __init__(self) -> None:
        raise TypeError("use pdkv.handshake_validate or pdkv.handshake_validate_engine_ranks")

    @classmethod
    def _wrap(cls, ptr: Any) -> "HandshakeReport":
        self = object.__new__(cls)
        self._adopt(ptr)
        return self

    def __len__(self) -> int:
        n = c_size_t()
        call("pdkv_handshake_report_count", self._p(), byref(n))
        return n.value

    def item(self, index: int) -> Incompatibility:
        """Item ``index``; :class:`OutOfBoundsError` past the end."""
        c = _ffi.IncompatibilityC()
        c.struct_size = ctypes.sizeof(c)
        call("pdkv_handshake_report_item", self._p(), integer("index", index, 0, (1 << 64) - 1), byref(c))
        return Incompatibility(
            to_enum(Status, c.status),
            decode(c.field),
            decode(c.local_value),
            decode(c.remote_value),
            decode(c.message),
            decode(c.fix),
            decode(c.text),
        )

    def items(self) -> Tuple[Incompatibility, ...]:
        """Every item."""
        return tuple(self.item(i) for i in range(len(self)))

    def __getitem__(self, index: int) -> Incompatibility:
        n = len(self)
        if isinstance(index, int) and -n <= index < 0:
            index += n
        return self.item(index)

    def __iter__(self) -> Any:
        return iter(self.items())

    @property
    def compatible(self) -> bool:
        """True when the report is empty."""
        return len(self) == 0


@operation
def handshake_validate(local: EngineMetadata, remote: EngineMetadata) -> HandshakeReport:
    """Validates a (local, remote) pair ("local" runs the check: D when pulling). An
    incompatible pair is not an error: the report lists every item."""
    lp = handle_arg("local", local, EngineMetadata)
    rp = handle_arg("remote", remote, EngineMetadata)
    out = POINTER(_ffi.HandshakeReportT)()
    call("pdkv_handshake_validate", lp, rp, byref(out))
    return HandshakeReport._wrap(out)


@operation
def handshake_validate_engine_ranks(ranks: Sequence[EngineMetadata]) -> HandshakeReport:
    """Checks that the ranks of ONE remote engine agree; items compare ranks[0] with the
    offending rank."""
    if isinstance(ranks, (str, bytes)) or not hasattr(ranks, "__iter__"):
        raise TypeError(f"ranks must be a sequence of pdkv.EngineMetadata, got {type(ranks).__name__}")
    items = list(ranks)
    arr = (POINTER(_ffi.EngineMetadataT) * len(items))() if items else None
    for i, r in enumerate(items):
        assert arr is not None
        arr[i] = handle_arg(f"ranks[{i}]", r, EngineMetadata)
    out = POINTER(_ffi.HandshakeReportT)()
    call("pdkv_handshake_validate_engine_ranks", arr, len(items), byref(out))
    return HandshakeReport._wrap(out)


@operation
def handshake_require_compatible(local: EngineMetadata, remote: EngineMetadata) -> None:
    """Raises :class:`IncompatibleError` (joining every item's text) unless the pair can be served."""
    call(
        "pdkv_handshake_require_compatible",
        handle_arg("local", local, EngineMetadata),
        handle_arg("remote", remote, EngineMetadata),
    )
