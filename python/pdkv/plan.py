"""Transfer plans: one request's compiled, validated reads from P ranks into a D rank."""

from __future__ import annotations

import ctypes
import dataclasses
import json
from ctypes import POINTER, byref, c_size_t, c_uint32, c_uint64
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from . import _ffi
from ._base import Handle, array_copy, call, call_status, handle_arg, index_arg, take_string, to_enum, u32, u32_array
from .blocks import ZeroRange, zero_range_of
from .enums import GroupKind
from .errors import Status
from .geometry import Geometry
from .metadata import EngineMetadata
from .topology import TpMapping
from .trim import GroupTrimInput


class PlanContext(Handle):
    """Everything about one (D rank, P engine) pair that does not change per request
    (``pdkv_plan_context_t``). Build it once after the handshake; immutable, thread-safe."""

    _free_name = "pdkv_plan_context_free"

    def __init__(
        self,
        local: EngineMetadata,
        remote: Sequence[EngineMetadata],
        local_geometry: Optional[Geometry] = None,
        remote_geometry: Optional[Geometry] = None,
        mapping: Optional[TpMapping] = None,
    ) -> None:
        """``local`` is the D rank, ``remote`` the P ranks of ONE engine (any order). The
        geometries are required for Mamba groups; ``mapping`` None derives it from metadata."""
        p = _ffi.PlanContextParamsC()
        p.struct_size = ctypes.sizeof(p)
        p.local = handle_arg("local", local, EngineMetadata)
        if isinstance(remote, (str, bytes)) or not hasattr(remote, "__iter__"):
            raise TypeError(f"remote must be a sequence of pdkv.EngineMetadata, got {type(remote).__name__}")
        items = list(remote)
        arr = (POINTER(_ffi.EngineMetadataT) * len(items))() if items else None
        for i, r in enumerate(items):
            assert arr is not None
            arr[i] = handle_arg(f"remote[{i}]", r, EngineMetadata)
        p.remote = ctypes.cast(arr, POINTER(POINTER(_ffi.EngineMetadataT))) if arr is not None else None
        p.num_remote = len(items)
        if local_geometry is not None:
            p.local_geometry = handle_arg("local_geometry", local_geometry, Geometry)
        if remote_geometry is not None:
            p.remote_geometry = handle_arg("remote_geometry", remote_geometry, Geometry)
        if mapping is not None:
            p.mapping = handle_arg("mapping", mapping, TpMapping)
        out = POINTER(_ffi.PlanContextT)()
        call("pdkv_plan_context_new", byref(p), byref(out))
        self._adopt(out)

    def mapping(self) -> TpMapping:
        """The context's TP mapping (a new handle)."""
        out = POINTER(_ffi.TpMappingT)()
        call("pdkv_plan_context_mapping", self._p(), byref(out))
        m = object.__new__(TpMapping)
        m._adopt(out)
        return m

    def compile(self, groups: Iterable["PlanGroup"]) -> "TransferPlan":
        """Compiles one request's plan (see :meth:`TransferPlan.compile`)."""
        return TransferPlan.compile(self, groups)


@dataclasses.dataclass(frozen=True)
class PlanGroup:
    """One KV-cache group of a request: its trimming inputs (tokens per block 0: from the
    metadata) and the region indices of its layers (empty: all)."""

    trim: GroupTrimInput  #: Kind, blocks, tokens.
    regions: Tuple[int, ...] = ()  #: Region indices; empty: all.


def _groups(groups: Iterable[PlanGroup]) -> Tuple[Any, int, List[Any]]:
    """A C array of pdkv_plan_group_t, its length, and what must stay alive during the call."""
    if isinstance(groups, (str, bytes)) or not hasattr(groups, "__iter__"):
        raise TypeError(f"groups must be a sequence of pdkv.PlanGroup, got {type(groups).__name__}")
    items = list(groups)
    keep: List[Any] = []
    arr = (_ffi.PlanGroupC * len(items))() if items else None
    for i, g in enumerate(items):
        if not isinstance(g, PlanGroup):
            raise TypeError(f"groups[{i}] must be a pdkv.PlanGroup, got {type(g).__name__}")
        if not isinstance(g.trim, GroupTrimInput):
            raise TypeError(f"groups[{i}].trim must be a pdkv.GroupTrimInput, got {type(g.trim).__name__}")
        trim_c, trim_keep = g.trim._to_c()
        regions, n = u32_array(f"groups[{i}].regions", g.regions)
        keep += [trim_c, trim_keep, regions]
        assert arr is not None
        arr[i].struct_size = ctypes.sizeof(_ffi.PlanGroupC)
        arr[i].trim = ctypes.pointer(trim_c)
        arr[i].regions = ctypes.cast(regions, POINTER(c_uint32)) if regions is not None else None
        arr[i].num_regions = n
    return arr, len(items), keep


@dataclasses.dataclass(frozen=True)
class PlanRead:
    """One read: D's [local_offset, +length) of local_region receives P's
    [remote_offset, +length) of remote_region (offsets relative to the region bases)."""

    local_region: int  #: D region index.
    local_offset: int  #: Offset in the D region.
    remote_region: int  #: P region index.
    remote_offset: int  #: Offset in the P region.
    length: int  #: Bytes.


@dataclasses.dataclass(frozen=True)
class TransferPlanInfo:
    """Scalars of a :class:`TransferPlan`."""

    d_rank: int  #: The D rank.
    d_tp: int  #: D TP size.
    p_tp: int  #: P TP size.
    num_read_ranks: int  #: P ranks with at least one read.
    num_notify_ranks: int  #: P ranks notified.
    notifications_per_p_rank: int  #: Each P rank waits for this many per request.
    num_groups: int  #: Groups.
    pieces_before_coalescing: int  #: Reads before coalescing.
    pieces_after_coalescing: int  #: Reads after coalescing.
    bytes: int  #: Total bytes moved.
    attention_bytes: int  #: Attention bytes moved.
    mamba_bytes: int  #: Mamba bytes moved.
    empty: bool  #: Nothing to read (full prefix hit), notify only.


@dataclasses.dataclass(frozen=True)
class PlanGroupZero:
    """Receive-side work of one group."""

    kind: Union[GroupKind, int]  #: Group kind.
    regions: Tuple[int, ...]  #: Resolved region indices to zero in.
    zero: Tuple[ZeroRange, ...]  #: D kernel block + token range.
    unfilled_states: Tuple[int, ...]  #: Mamba slots never to publish as cache hits.


class TransferPlan(Handle):
    """One request's compiled, validated transfer plan (``pdkv_transfer_plan_t``): every D
    byte needed is written exactly once and no read leaves a registered region. Immutable."""

    _free_name = "pdkv_transfer_plan_free"

    def __init__(self) -> None:
        raise TypeError("use TransferPlan.compile or PlanContext.compile")

    @classmethod
    def compile(cls, ctx: PlanContext, groups: Iterable[PlanGroup]) -> "TransferPlan":
        """Compiles and validates one request's plan; raises :class:`CoverageError`,
        :class:`OutOfBoundsError`, :class:`InvalidArgumentError`, ..."""
        c = handle_arg("ctx", ctx, PlanContext)
        arr, n, keep = _groups(groups)
        out = POINTER(_ffi.TransferPlanT)()
        call("pdkv_transfer_plan_compile", c, arr, n, byref(out))
        del keep
        self = object.__new__(cls)
        self._adopt(out)
        return self

    def validate(self, ctx: PlanContext, groups: Iterable[PlanGroup]) -> None:
        """Re-runs the coverage and bounds check against (ctx, groups); raises on failure."""
        c = handle_arg("ctx", ctx, PlanContext)
        arr, n, keep = _groups(groups)
        call("pdkv_transfer_plan_validate", self._p(), c, arr, n)
        del keep

    def info(self) -> TransferPlanInfo:
        """The plan's scalars."""
        c = _ffi.TransferPlanInfoC()
        c.struct_size = ctypes.sizeof(c)
        call("pdkv_transfer_plan_get_info", self._p(), byref(c))
        values: Dict[str, Any] = {f.name: getattr(c, f.name) for f in dataclasses.fields(TransferPlanInfo)}
        values["empty"] = bool(c.empty)
        return TransferPlanInfo(**values)

    def read_ranks(self) -> Tuple[int, ...]:
        """The P ranks D reads from, ascending."""
        ptr = POINTER(c_uint32)()
        n = c_size_t()
        call("pdkv_transfer_plan_read_ranks", self._p(), byref(ptr), byref(n))
        return array_copy(ptr, n.value, int)

    def notify_ranks(self) -> Tuple[int, ...]:
        """P ranks D notifies after its reads (every handshake target), ascending."""
        ptr = POINTER(c_uint32)()
        n = c_size_t()
        call("pdkv_transfer_plan_notify_ranks", self._p(), byref(ptr), byref(n))
        return array_copy(ptr, n.value, int)

    def rank_reads(self, p_rank: int) -> Tuple[PlanRead, ...]:
        """The reads D issues against P rank ``p_rank``, in issue order."""
        return self._rank_reads(p_rank)[0]

    def rank_bytes(self, p_rank: int) -> int:
        """Total bytes D reads from P rank ``p_rank``."""
        return self._rank_reads(p_rank)[1]

    def _rank_reads(self, p_rank: int) -> Tuple[Tuple[PlanRead, ...], int]:
        ptr = POINTER(_ffi.PlanReadC)()
        n = c_size_t()
        total = c_uint64()
        call("pdkv_transfer_plan_rank_reads", self._p(), u32("p_rank", p_rank), byref(ptr), byref(n), byref(total))
        reads = array_copy(
            ptr,
            n.value,
            lambda r: PlanRead(r.local_region, r.local_offset, r.remote_region, r.remote_offset, r.length),
        )
        return reads, total.value

    def group_zero(self, index: int) -> PlanGroupZero:
        """Receive-side work of group ``index``; :class:`OutOfBoundsError` past the end."""
        c = _ffi.PlanGroupZeroC()
        c.struct_size = ctypes.sizeof(c)
        call("pdkv_transfer_plan_group_zero", self._p(), index_arg("index", index), byref(c))
        return PlanGroupZero(
            to_enum(GroupKind, c.kind),
            array_copy(c.regions, c.num_regions, int),
            array_copy(c.zero, c.num_zero, zero_range_of),
            array_copy(c.unfilled_states, c.num_unfilled_states, int),
        )

    def group_zeros(self) -> Tuple[PlanGroupZero, ...]:
        """Receive-side work of every group, in group order."""
        return tuple(self.group_zero(i) for i in range(self.info().num_groups))

    def to_json(self) -> str:
        """Human-readable JSON dump (stable key order)."""
        return take_string("pdkv_transfer_plan_to_json_string", self._p())

    def to_json_buffered(self) -> str:
        """The same JSON through the caller-buffer form of the C API (sized by a first call)."""
        n = c_size_t()
        status, exc = call_status("pdkv_transfer_plan_to_json", self._p(), None, 0, byref(n))
        if exc is not None and status != Status.BUFFER_TOO_SMALL:
            raise exc
        buf = ctypes.create_string_buffer(n.value + 1)
        call("pdkv_transfer_plan_to_json", self._p(), buf, len(buf), byref(n))
        return buf.raw[: n.value].decode("utf-8")

    def to_dict(self) -> Any:
        """The JSON dump parsed."""
        return json.loads(self.to_json())
