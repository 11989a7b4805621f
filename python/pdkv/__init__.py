"""pdkv: transfer configuration for prefill/decode disaggregated LLM serving, from Python.

A ctypes binding of ``libpdkv`` (the stable C API ``pdkv.h``), standard library only.
The library (``libpdkv.so.2``) is found in ``$PDKV_LIB_DIR`` (the directory variable every pdkv
binding shares), then next to this package, then in the directory recorded when the package was
installed (``pip install`` asks ``pkg-config`` for an installed pdkv), then in
``build/release/capi/`` of the source checkout, then through the dynamic loader; importing this
package raises :class:`LibraryLoadError` (listing every place tried) when none loads, or when its
ABI major version differs from the header this package was written against.

Results are frozen dataclasses, enumerations are :class:`enum.IntEnum`, handles are context
managers with an idempotent ``close()``, and every failed call raises a :class:`PdkvError`
subclass chosen by its status (``except pdkv.TpNotDivisibleError``).

The transfer executor (``pdkv/agent.h``) is :class:`Agent` with :class:`Memory`, :class:`Peer`
and :class:`Transfer` (see :mod:`pdkv.agent`): deadlines in seconds, waits that release the GIL,
registered memory from any writable buffer.

Errors raised before C is called follow the same statuses as the Go and Rust bindings:

- a method on a closed handle, or a closed handle passed as an argument, raises
  :class:`ClosedError` (status NULL_POINTER, a :class:`NullPointerError` and a ValueError),
  message ``"pdkv.Model is closed"`` naming the handle type;
- a value that cannot be passed to C (an int outside its C type's range, a str holding a NUL
  character, an unknown enum name or value) raises :class:`InvalidArgumentError` (status
  INVALID_ARGUMENT, also a :class:`ValueError`) naming the parameter and the value, e.g.
  ``tp_size = -2 is out of range [0, 4294967295]``;
- a negative index (``preset_at``, ``Geometry.projection``, ``TransferPlan.group_zero``...)
  raises :class:`OutOfBoundsError`, as an index past the end does;
- an argument of the wrong Python type (``None``, a float for an int, a str for a handle)
  raises a plain :class:`TypeError`.
"""

from __future__ import annotations

from . import _ffi
from ._ffi import HEADER_VERSION_MAJOR, HEADER_VERSION_MINOR, LibraryLoadError, library_path
from ._raw import PDKV_CONTROL_PROTOCOL_MAJOR as CONTROL_PROTOCOL_MAJOR
from ._raw import PDKV_CONTROL_PROTOCOL_MINOR as CONTROL_PROTOCOL_MINOR
from .descriptors import (
    Descriptor,
    DescriptorList,
    Region,
    attention_local_descriptors,
    attention_remote_descriptors,
    attention_split_descriptors,
    mamba_local_descriptors,
    mamba_local_split_descriptors,
    mamba_remote_descriptors,
)
from .enums import AttentionBackend, ConvLayout, ElementFormat, MambaCacheMode, MambaReadsRule, MambaType, TpMappingList
from .errors import (
    AuthError,
    BufferTooSmallError,
    BusyError,
    CancelledError,
    ChecksumError,
    ClosedError,
    CoverageError,
    HeadsNotDivisibleError,
    IncompatibleError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    NullPointerError,
    OutOfBoundsError,
    ParseError,
    PdkvError,
    PdkvIOError,
    PdkvOverflowError,
    PeerLostError,
    ProtocolError,
    ShutdownError,
    Status,
    StructSizeError,
    TimedOutError,
    TpNotDivisibleError,
    TransportError,
    UnsupportedLayoutError,
    UnsupportedMambaTypeError,
)
from .engine import Engine, EngineGroup, EngineInfo, RequestGroup
from .engine_planner import EnginePlanner
from .geometry import (
    ByteRange,
    ConvProjection,
    EngineConfig,
    Geometry,
    GeometryInfo,
)
from .mamba import MambaRead, MambaReadList
from ._plain import (
    backend_kernel_block_size,
    block_size_ratio,
    d_num_new_matched_tokens,
    handshake_target_ranks,
    notifications_expected_per_request,
    physical_blocks_per_logical,
    physical_head_range,
    pipeline_layer_window,
    sliding_window_blocks_to_keep,
    tp_ratio,
)
from .model import (
    Model,
    ModelDesc,
    PresetInfo,
    backend_from_name,
    backend_name,
    element_format_from_name,
    element_format_name,
    mamba_type_name,
    preset_at,
    preset_count,
    presets,
    status_name,
    version,
    version_string,
)
from .topology import (
    TpMapping,
    TpMappingInfo,
)

from .blocks import (
    DescriptorLayout,
    GroupBlockIds,
    TokenInterval,
    ZeroRange,
    clip_exchange_blocks,
    descriptor_ids,
    group_kind_name,
    logical_to_kernel_block_ids,
    mamba_descriptor_ids,
    map_block_ids_for_block_size_ratio,
    receive_zero_ranges,
    uncovered_token_ranges,
)
from .enums import GroupKind, KvLayout, RegionKind
from .enums import MemoryType, NotificationKind, ProgressMode, TransferOp, TransferState, Transport
from .metadata import (
    EngineLayout,
    EngineMetadata,
    EngineMetadataInfo,
    HandshakeReport,
    Incompatibility,
    MetadataRegion,
    crc32c,
    handshake_require_compatible,
    handshake_validate,
    handshake_validate_engine_ranks,
    metadata_wire_version,
    model_fingerprint,
)
from .plan import (
    BlockPermute,
    PlanContext,
    PlanGroup,
    PlanGroupZero,
    PlanRead,
    TransferPlan,
    TransferPlanInfo,
    permute_kv_block,
)
from .plan_request import PlanRequest
from .pipeline import StagePair, pipeline_notifications_expected, pipeline_stage_pairs
from .scheduler import (
    AlignedSplitInput,
    AlignedSplitV0604Input,
    OffloadGeometry,
    OffloadLayer,
    RemoteDecodePrefill,
    RemoteDecodePrefillPlan,
    derive_offload_geometry,
    mamba_aligned_split,
    mamba_aligned_split_v0604,
    plan_remote_decode_prefill,
    truncate_for_remote_decode,
)
from .trim import GroupTrim, GroupTrimInput, StatePair, TokenRun
from .agent import (
    Agent,
    AgentInfo,
    FailedRead,
    Memory,
    SharedMemory,
    Notification,
    Peer,
    PeerInfo,
    Transfer,
    TransferInfo,
    buffer_address,
)

# Load (and version-check) the library now, so a missing library fails at import.
_ffi.lib()

#: Version of this Python package (follows the C library's).
__version__ = "2.9.0"

#: Public names, listed literally so that type checkers see them as exported (PEP 484: a
#: ``py.typed`` package re-exports only what ``__all__`` names). tests/test_ffi.py checks that it
#: holds exactly the public names imported above.
__all__ = [
    "Agent",
    "AgentInfo",
    "AlignedSplitInput",
    "AlignedSplitV0604Input",
    "AttentionBackend",
    "AuthError",
    "BlockPermute",
    "BufferTooSmallError",
    "BusyError",
    "ByteRange",
    "CancelledError",
    "ChecksumError",
    "ClosedError",
    "ConvLayout",
    "ElementFormat",
    "ConvProjection",
    "CoverageError",
    "Descriptor",
    "DescriptorLayout",
    "DescriptorList",
    "Engine",
    "EngineConfig",
    "EngineGroup",
    "EngineInfo",
    "EnginePlanner",
    "EngineLayout",
    "EngineMetadata",
    "EngineMetadataInfo",
    "FailedRead",
    "Geometry",
    "GeometryInfo",
    "GroupBlockIds",
    "GroupKind",
    "GroupTrim",
    "GroupTrimInput",
    "CONTROL_PROTOCOL_MAJOR",
    "CONTROL_PROTOCOL_MINOR",
    "HEADER_VERSION_MAJOR",
    "HEADER_VERSION_MINOR",
    "HandshakeReport",
    "HeadsNotDivisibleError",
    "Incompatibility",
    "IncompatibleError",
    "InternalError",
    "InvalidArgumentError",
    "KvLayout",
    "LibraryLoadError",
    "MambaCacheMode",
    "MambaRead",
    "MambaReadList",
    "MambaReadsRule",
    "MambaType",
    "Memory",
    "SharedMemory",
    "MemoryType",
    "MetadataRegion",
    "Model",
    "ModelDesc",
    "NotFoundError",
    "Notification",
    "NotificationKind",
    "NullPointerError",
    "OffloadGeometry",
    "OffloadLayer",
    "OutOfBoundsError",
    "ParseError",
    "PdkvError",
    "PdkvIOError",
    "PdkvOverflowError",
    "Peer",
    "PeerInfo",
    "PeerLostError",
    "PlanContext",
    "PlanGroup",
    "PlanRequest",
    "PlanGroupZero",
    "PlanRead",
    "PresetInfo",
    "ProgressMode",
    "ProtocolError",
    "Region",
    "RegionKind",
    "RemoteDecodePrefill",
    "RemoteDecodePrefillPlan",
    "RequestGroup",
    "ShutdownError",
    "StagePair",
    "StatePair",
    "Status",
    "StructSizeError",
    "TimedOutError",
    "TokenInterval",
    "TokenRun",
    "TpMapping",
    "TpMappingInfo",
    "TpMappingList",
    "TpNotDivisibleError",
    "Transfer",
    "TransferInfo",
    "TransferOp",
    "TransferPlan",
    "TransferPlanInfo",
    "TransferState",
    "Transport",
    "TransportError",
    "UnsupportedLayoutError",
    "UnsupportedMambaTypeError",
    "ZeroRange",
    "attention_local_descriptors",
    "attention_remote_descriptors",
    "attention_split_descriptors",
    "backend_from_name",
    "element_format_from_name",
    "element_format_name",
    "backend_kernel_block_size",
    "backend_name",
    "block_size_ratio",
    "buffer_address",
    "clip_exchange_blocks",
    "crc32c",
    "d_num_new_matched_tokens",
    "derive_offload_geometry",
    "descriptor_ids",
    "group_kind_name",
    "handshake_require_compatible",
    "handshake_target_ranks",
    "handshake_validate",
    "handshake_validate_engine_ranks",
    "library_path",
    "logical_to_kernel_block_ids",
    "mamba_aligned_split",
    "mamba_aligned_split_v0604",
    "mamba_descriptor_ids",
    "mamba_local_descriptors",
    "mamba_local_split_descriptors",
    "mamba_remote_descriptors",
    "mamba_type_name",
    "map_block_ids_for_block_size_ratio",
    "metadata_wire_version",
    "model_fingerprint",
    "notifications_expected_per_request",
    "permute_kv_block",
    "physical_blocks_per_logical",
    "physical_head_range",
    "pipeline_layer_window",
    "pipeline_notifications_expected",
    "pipeline_stage_pairs",
    "plan_remote_decode_prefill",
    "preset_at",
    "preset_count",
    "presets",
    "receive_zero_ranges",
    "sliding_window_blocks_to_keep",
    "status_name",
    "tp_ratio",
    "truncate_for_remote_decode",
    "uncovered_token_ranges",
    "version",
    "version_string",
]
