"""pdkv: transfer configuration for prefill/decode disaggregated LLM serving, from Python.

A ctypes binding of ``libpdkv`` (the stable C API ``pdkv.h``), standard library only.
The library is found through ``$PDKV_LIBRARY``, then ``libpdkv.so`` next to this package, then
``build/release/capi/`` of the source checkout, then the system loader; importing this package
raises :class:`LibraryLoadError` (listing every place tried) when none loads, or when its ABI
major version differs from the header this package was written against.

Results are frozen dataclasses, enumerations are :class:`enum.IntEnum`, handles are context
managers with an idempotent ``close()``, and every failed call raises a :class:`PdkvError`
subclass chosen by its status (``except pdkv.TpNotDivisibleError``).
"""

from __future__ import annotations

from . import _ffi
from ._ffi import HEADER_VERSION_MAJOR, HEADER_VERSION_MINOR, LibraryLoadError, library_path
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
from .enums import AttentionBackend, ConvLayout, MambaCacheMode, MambaReadsRule, MambaType, TpMappingList
from .errors import (
    BufferTooSmallError,
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
    Status,
    StructSizeError,
    TpNotDivisibleError,
    UnsupportedLayoutError,
    UnsupportedMambaTypeError,
)
from .geometry import (
    ByteRange,
    ConvProjection,
    EngineConfig,
    Geometry,
    GeometryInfo,
    block_size_ratio,
    physical_blocks_per_logical,
)
from .mamba import MambaRead, MambaReadList
from .model import (
    Model,
    ModelDesc,
    PresetInfo,
    backend_from_name,
    backend_name,
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
    handshake_target_ranks,
    notifications_expected_per_request,
    physical_head_range,
    tp_ratio,
)

# Load (and version-check) the library now, so a missing library fails at import.
_ffi.lib()

#: Version of this Python package (follows the C library's).
__version__ = "0.1.0"

import types as _types

#: Public names: everything above except submodules and private names.
__all__ = sorted(
    name
    for name, value in list(globals().items())
    if not name.startswith("_") and name != "annotations" and not isinstance(value, _types.ModuleType)
)
