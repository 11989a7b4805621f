"""Transfer plans: one request's compiled, validated reads from P ranks into a D rank."""

from __future__ import annotations

import array
import ctypes
import dataclasses
import json
import struct
import weakref
from ctypes import POINTER, byref, c_size_t, c_uint32, c_uint64
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from . import _ffi
from ._base import (
    Handle,
    _buffer_array,
    _free,
    array_copy,
    call,
    call_status,
    enum_value,
    handle_arg,
    index_arg,
    take_string,
    to_enum,
    u32,
    u32_array,
    u64,
    u64_array,
)
from .blocks import ZeroRange, zero_range_of
from .enums import GroupKind, KvLayout, MambaCacheMode
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
        permute_on_receive: bool = False,
    ) -> None:
        """``local`` is the D rank, ``remote`` the P ranks of ONE engine (any order). The
        geometries are required for Mamba groups; ``mapping`` None derives it from metadata.
        ``permute_on_receive``: when D's and P's KV layouts differ, D writes received attention
        blocks in P's layout and permutes them into its own after receipt (vLLM's
        enable_permute_local_kv); without it different layouts raise
        :class:`UnsupportedLayoutError`."""
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
        if not isinstance(permute_on_receive, bool):
            raise TypeError(f"permute_on_receive must be a bool, got {type(permute_on_receive).__name__}")
        p.permute_on_receive = int(permute_on_receive)
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
    metadata) and the region indices of its layers (empty: all), or the layers themselves."""

    trim: GroupTrimInput  #: Kind, blocks, tokens.
    regions: Tuple[int, ...] = ()  #: Region indices; empty: all.
    #: The group's model layers over the whole model, strictly ascending (exclusive with
    #: ``regions``): needed when D's and P's pipeline stages hold different layer windows (a
    #: layer's region on a stage is its position among the group's layers in that stage's
    #: window; only the layers both stages hold are read). Empty: regions paired by index.
    layers: Tuple[int, ...] = ()


# Region lists are tiny and the same for every request of an engine: their C arrays are cached by
# value (tuples of ints are immutable and the library never writes the array).
_REGION_CACHE: Dict[Tuple[int, ...], Tuple[Any, int]] = {}


def _regions(i: int, regions: Any, field: str = "regions") -> Tuple[Any, int]:
    """The C array of a group's region (or layer) list, cached by value for tuples."""
    if type(regions) is tuple:
        hit = _REGION_CACHE.get(regions)
        if hit is not None:
            return hit
        arr = u32_array(f"groups[{i}].{field}", regions)
        if len(_REGION_CACHE) >= 256:
            _REGION_CACHE.clear()
        if all(type(r) is int for r in regions):  # not e.g. IntEnum members equal to ints
            _REGION_CACHE[regions] = arr
        return arr
    return u32_array(f"groups[{i}].{field}", regions)


class _TrimFastC(ctypes.Structure):
    """``pdkv_group_trim_input_t`` with untyped pointers (same layout), so that the fast path
    stores addresses without a ctypes cast per array."""

    _fields_ = [(n, ctypes.c_void_p if n in ("local_blocks", "remote_blocks") else t)
                for n, t in _ffi.GroupTrimInputC._fields_]


class _PlanGroupFastC(ctypes.Structure):
    """``pdkv_plan_group_t`` with untyped pointers (same layout)."""

    _fields_ = [("struct_size", c_size_t), ("trim", ctypes.c_void_p), ("regions", ctypes.c_void_p),
                ("num_regions", c_size_t), ("layers", ctypes.c_void_p), ("num_layers", c_size_t)]


for _fast, _typed in ((_TrimFastC, _ffi.GroupTrimInputC), (_PlanGroupFastC, _ffi.PlanGroupC)):
    assert ctypes.sizeof(_fast) == ctypes.sizeof(_typed)
    assert all(getattr(_fast, f[0]).offset == getattr(_typed, f[0]).offset for f in _typed._fields_)

_U64 = (1 << 64) - 1
_I32 = 1 << 31
_TRIM_SIZE = ctypes.sizeof(_TrimFastC)
_PLAN_GROUP_SIZE = ctypes.sizeof(_ffi.PlanGroupC)
_ARRAY_TYPECODES_U64 = {c for c in "QL" if array.array(c).itemsize == 8}


def _ids_address(values: Any, name: str) -> Optional[Tuple[int, int, Any]]:
    """(address, count, what pins the memory) of a buffer of unsigned 64-bit ids, or None when
    ``values`` is not one (the checked path then converts it). ``array('Q')`` is the fastest:
    its address is read directly, and a memoryview pins it so that it cannot be resized while
    the library reads it; other buffers (numpy ``uint64``, memoryview) go through ctypes."""
    if type(values) is array.array:
        if values.typecode not in _ARRAY_TYPECODES_U64:
            return None
        n = len(values)
        if n == 0:
            return 0, 0, None
        return values.buffer_info()[0], n, memoryview(values)
    if type(values) is tuple or type(values) is list:
        if len(values) > 16:  # long sequences: the checked path converts them id by id
            return None
        arr, n = u64_array(name, values)  # a Mamba group's one or few ids: cheap to check here
        return (ctypes.addressof(arr) if n else 0), n, arr
    fast = _buffer_array(name, values, ctypes.c_uint64)
    if fast is None:
        return None
    arr, n = fast
    return (ctypes.addressof(arr) if n else 0), n, arr


_TRIM_STRUCT = struct.Struct("@NiiPNPNQQQQQBQQ")  # pdkv_group_trim_input_t
_GROUP_STRUCT = struct.Struct("@NPPNPN")  # pdkv_plan_group_t
assert _TRIM_STRUCT.size == _TRIM_SIZE and _GROUP_STRUCT.size == _PLAN_GROUP_SIZE


def _groups_fast(items: Sequence[Any]) -> Optional[Tuple[Any, List[Any]]]:
    """The C groups array for the common case (PlanGroup of GroupTrimInput with plain ints,
    enum members, ids in buffers, region tuples): every struct is packed into one buffer with
    one ``struct.pack_into`` per struct (which range-checks every field) and no per-id work.
    None as soon as anything needs the checked path, which then builds the array again and
    reports the offending field by name."""
    n = len(items)
    buf = (ctypes.c_char * (n * (_TRIM_SIZE + _PLAN_GROUP_SIZE)))()
    base = ctypes.addressof(buf)
    groups_at = n * _TRIM_SIZE
    keep: List[Any] = [buf]
    pack_trim, pack_group = _TRIM_STRUCT.pack_into, _GROUP_STRUCT.pack_into
    for i, g in enumerate(items):
        if type(g) is not PlanGroup:
            return None
        t = g.trim
        if type(t) is not GroupTrimInput:
            return None
        k, m = t.kind, t.cache_mode
        if type(k) is GroupKind:
            k = int(k)
        if type(m) is MambaCacheMode:
            m = int(m)
        lf = t.local_first_block
        fields = (k, m, t.local_tokens_per_block, t.remote_tokens_per_block, t.remote_computed_tokens,
                  t.local_hit_tokens, t.sliding_window, t.remote_first_block, 0 if lf is None else lf)
        for v in fields:
            if type(v) is not int:  # bools, floats, IntEnums of other types: the checked path
                return None
        la = _ids_address(t.local_blocks, "local_blocks")
        ra = _ids_address(t.remote_blocks, "remote_blocks")
        regions, layers = g.regions, g.layers
        if la is None or ra is None or type(regions) is not tuple or type(layers) is not tuple:
            return None
        keep.append(la[2])
        keep.append(ra[2])
        rarr, rn = _regions(i, regions)
        larr, ln = _regions(i, layers, "layers")
        try:
            pack_trim(buf, i * _TRIM_SIZE, _TRIM_SIZE, k, m, la[0], la[1], ra[0], ra[1], fields[2], fields[3],
                      fields[4], fields[5], fields[6], 0 if lf is None else 1, fields[8], fields[7])
            pack_group(buf, groups_at + i * _PLAN_GROUP_SIZE, _PLAN_GROUP_SIZE, base + i * _TRIM_SIZE,
                       ctypes.addressof(rarr) if rn else 0, rn, ctypes.addressof(larr) if ln else 0, ln)
        except struct.error:  # a value out of its C type's range
            return None
    return ctypes.cast(base + groups_at, POINTER(_ffi.PlanGroupC)), keep


def _groups(groups: Iterable[PlanGroup]) -> Tuple[Any, int, List[Any]]:
    """A C array of pdkv_plan_group_t, its length, and what must stay alive during the call."""
    if type(groups) is list or type(groups) is tuple:
        items = groups
        if items:
            fast = _groups_fast(items)
            if fast is not None:
                return fast[0], len(items), fast[1]
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
        regions, n = _regions(i, g.regions)
        layers, nl = _regions(i, g.layers, "layers")
        keep += [trim_c, trim_keep, regions, layers]
        assert arr is not None
        arr[i] = _ffi.PlanGroupC(_PLAN_GROUP_SIZE, ctypes.pointer(trim_c), regions, n, layers, nl)
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


class _PlanMemory:
    """Owner of a compiled plan's C memory once zero-copy views of it exist."""


def plan_read_dtype() -> Any:
    """The numpy dtype of one ``pdkv_plan_read_t`` (explicit offsets, itemsize 40)."""
    import numpy as np

    return np.dtype({
        "names": ["local_region", "local_offset", "remote_region", "remote_offset", "length"],
        "formats": ["<u4", "<u8", "<u4", "<u8", "<u8"],
        "offsets": [_ffi.PlanReadC.local_region.offset, _ffi.PlanReadC.local_offset.offset,
                    _ffi.PlanReadC.remote_region.offset, _ffi.PlanReadC.remote_offset.offset,
                    _ffi.PlanReadC.length.offset],
        "itemsize": ctypes.sizeof(_ffi.PlanReadC),
    })


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
    d_pp_size: int = 1  #: D's pipeline stages (1 without PP).
    d_pp_rank: int = 0  #: D's stage.
    p_pp_size: int = 1  #: P's pipeline stages; the plan's P ranks are TP ranks of stage p_pp_rank.
    p_pp_rank: int = 0  #: P's stage.
    layer_begin: int = 0  #: First model layer the plan moves.
    layer_end: int = 0  #: One past its last layer; 0: through the model's last layer.
    #: The receive-side permutation of the blocks each group lists (inactive: equal layouts).
    permute: "BlockPermute" = dataclasses.field(default_factory=lambda: BlockPermute())


@dataclasses.dataclass(frozen=True)
class BlockPermute:
    """How D permutes one received attention KV block: from the layout the bytes arrive in (P's)
    to D's, one block being ``heads`` x ``tokens`` x ``head_bytes``."""

    from_layout: Union[KvLayout, int] = KvLayout.HND  #: Layout of the received bytes (P's).
    to_layout: Union[KvLayout, int] = KvLayout.HND  #: D's layout.
    heads: int = 0  #: D's KV heads per rank.
    tokens: int = 0  #: D's kernel block size in tokens.
    head_bytes: int = 0  #: One head's bytes of one token (scales included).

    @property
    def active(self) -> bool:
        """Whether blocks are permuted (the layouts differ)."""
        return int(self.from_layout) != int(self.to_layout)

    def apply(self, block: Any) -> None:
        """Permutes one block (a writable buffer of heads x tokens x head_bytes bytes) in place."""
        permute_kv_block(block, self.from_layout, self.to_layout, self.heads, self.tokens, self.head_bytes)


def permute_kv_block(block: Any, from_layout: Union[KvLayout, int, str], to_layout: Union[KvLayout, int, str],
                     heads: int, tokens: int, head_bytes: int) -> None:
    """Permutes one attention KV block (a writable buffer: bytearray, memoryview, numpy array)
    of ``heads`` x ``tokens`` x ``head_bytes`` bytes in place from ``from_layout`` to
    ``to_layout``. Raises :class:`InvalidArgumentError` for a block of another size."""
    view = memoryview(block).cast("B")
    if view.readonly:
        raise TypeError("block must be a writable buffer")
    n = view.nbytes
    arr = (ctypes.c_uint8 * n).from_buffer(view) if n else None
    try:
        call("pdkv_permute_kv_block", arr, n, int(enum_value("from_layout", KvLayout, from_layout)),
             int(enum_value("to_layout", KvLayout, to_layout)), u64("heads", heads), u64("tokens", tokens),
             u64("head_bytes", head_bytes))
    finally:
        del arr
        view.release()


@dataclasses.dataclass(frozen=True)
class PlanGroupZero:
    """Receive-side work of one group."""

    kind: Union[GroupKind, int]  #: Group kind.
    regions: Tuple[int, ...]  #: Resolved region indices to zero in.
    zero: Tuple[ZeroRange, ...]  #: D kernel block + token range.
    unfilled_states: Tuple[int, ...]  #: Mamba slots never to publish as cache hits.
    #: D kernel blocks (ascending) that arrive in P's layout and must be permuted into D's
    #: (:attr:`TransferPlanInfo.permute`) in each of ``permute_regions``, after the data and
    #: before the zero ranges.
    permute_blocks: Tuple[int, ...] = ()
    permute_regions: Tuple[int, ...] = ()  #: Regions the blocks are permuted in (not MLA).


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
        values: Dict[str, Any] = {
            f.name: getattr(c, f.name) for f in dataclasses.fields(TransferPlanInfo) if f.name != "permute"
        }
        values["empty"] = bool(c.empty)
        values["permute"] = BlockPermute(to_enum(KvLayout, c.permute_from_layout), to_enum(KvLayout, c.permute_to_layout),
                                         c.permute_heads, c.permute_tokens, c.permute_head_bytes)
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

    def rank_reads_view(self, p_rank: int) -> memoryview:
        """The reads D issues against P rank ``p_rank`` as a read-only ``memoryview`` of
        ``pdkv_plan_read_t`` records over the plan's own memory: no copy, no Python object per
        read. Its format is a ctypes struct (fields local_region, local_offset, remote_region,
        remote_offset, length; 40 bytes each); ``numpy.asarray`` of it, or :meth:`rank_reads_numpy`,
        gives a structured array. The view keeps the plan's memory alive: after :meth:`close` the
        plan's methods raise :class:`ClosedError` but the memory is freed only once the last view
        is gone. Empty view for a rank D does not read from."""
        ptr = POINTER(_ffi.PlanReadC)()
        n = c_size_t()
        call("pdkv_transfer_plan_rank_reads", self._p(), u32("p_rank", p_rank), byref(ptr), byref(n), None)
        arr = (_ffi.PlanReadC * n.value).from_address(ctypes.addressof(ptr.contents)) if n.value else (
            _ffi.PlanReadC * 0)()
        arr._pdkv_owner = self._memory_owner()  # type: ignore[attr-defined]
        return memoryview(arr).toreadonly()

    def rank_reads_numpy(self, p_rank: int) -> Any:
        """:meth:`rank_reads_view` as a read-only numpy structured array of dtype
        :data:`PLAN_READ_DTYPE` (no copy; needs numpy)."""
        import numpy as np

        view = self.rank_reads_view(p_rank)
        return np.frombuffer(view.cast("B"), dtype=plan_read_dtype())

    def _memory_owner(self) -> "_PlanMemory":
        """The object whose lifetime the plan's C memory follows once views exist: the handle's
        own finalizer is swapped for one that only drops the handle's reference to it, and the
        C plan is freed when the owner goes (the handle closed or collected, every view gone).
        Runs inside an operation, so close() cannot free the plan meanwhile."""
        holder: Optional[List[_PlanMemory]] = getattr(self, "_owner_holder", None)
        if holder is None:
            owner = _PlanMemory()
            weakref.finalize(owner, _free, self._free_name, self._ptr)
            self._finalizer.detach()
            holder = [owner]
            self._owner_holder = holder
            self._finalizer = weakref.finalize(self, holder.clear)
        return holder[0]

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
            array_copy(c.permute_blocks, c.num_permute_blocks, int),
            array_copy(c.permute_regions, c.num_permute_regions, int),
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
