"""Transfer plans: one request's compiled, validated reads from P ranks into a D rank."""

from __future__ import annotations

import array
import ctypes
import dataclasses
import json
import struct
import threading
import traceback
from ctypes import POINTER, byref, c_size_t, c_uint32, c_uint64
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from . import _ffi
from ._base import (
    Handle,
    _Owner,
    _buffer_array,
    array_copy,
    call,
    call_status,
    enum_value,
    error_from,
    handle_arg,
    index_arg,
    outside_operation,
    take_string,
    to_enum,
    u32,
    u32_array,
    u64,
    u64_array,
)
from .blocks import ZeroRange, zero_range_of
from .enums import GroupKind, KvLayout, MambaCacheMode
from .errors import ClosedError, Status
from .geometry import Geometry
from .metadata import EngineMetadata
from .topology import TpMapping
from .trim import GroupTrimInput, trim_optionals

if TYPE_CHECKING:
    from .plan_request import PlanRequest


class PlanContext(Handle):
    """Everything about one (D rank, P engine) pair that does not change per request
    (``pdkv_plan_context_t``). Build it once after the handshake; immutable, thread-safe."""

    _free_name = "pdkv_plan_context_free"
    _owned = True  # the planning hot path holds its _Owner instead of counting itself in flight
    #: Block ids a compile may pass and still keep the GIL (see _into); set from the engines'
    #: region count when the context is built from metadata, conservative otherwise.
    _gil_ids = 1536 // 64

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
        regions = max(len(md.regions()) for md in [local, *items])
        self._adopt(out)
        self._gil_ids = _GIL_WORK // max(1, regions)

    def mapping(self) -> TpMapping:
        """The context's TP mapping (a new handle)."""
        out = POINTER(_ffi.TpMappingT)()
        call("pdkv_plan_context_mapping", self._p(), byref(out))
        m = object.__new__(TpMapping)
        m._adopt(out)
        return m

    @outside_operation  # keeps the context alive through its _Owner (the hot path)
    def compile(self, groups: Iterable["PlanGroup"], reuse: Optional["TransferPlan"] = None) -> "TransferPlan":
        """Compiles one request's plan (see :meth:`TransferPlan.compile`, also for ``reuse``)."""
        return _compile(self, groups, reuse)

    def prepare(self, groups: Sequence["PlanGroup"]) -> "PlanRequest":
        """The engine's group layout packed once (a :class:`PlanRequest`), for planning each
        request from its block ids and token counts alone at close to the C call's cost."""
        from .plan_request import PlanRequest

        return PlanRequest(self, groups)


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
# value (tuples of ints are immutable and the library never writes the array). Equal is not
# enough to use a cached array: (False, True) == (0, 1) with the same hash, and the bools must
# be refused by name as they are on a first call, so a hit counts only for a tuple of exact ints.
_REGION_CACHE: Dict[Tuple[int, ...], Tuple[Any, int]] = {}
_EXACT_INT = frozenset((int,))


# (address, count, array, tuple) of the cached C arrays above, for the packing fast path (which
# keeps the array alive during its call, whatever another thread does to the caches). The fast
# path takes a hit only for the very tuple object it was stored for (checked to hold exact ints
# then), so it needs no per-element check; another equal tuple goes through _region_address.
_REGION_ADDRESS: Dict[Tuple[int, ...], Tuple[int, int, Any, Tuple[int, ...]]] = {(): (0, 0, None, ())}


def _region_address(i: int, regions: Tuple[int, ...], field: str) -> Optional[Tuple[int, int, Any, Tuple[int, ...]]]:
    """(address, count, array, regions) of a region tuple's cached C array (see
    :func:`_regions`, which refuses what is not a list of indices); None when the tuple is not
    cacheable (the checked path then)."""
    arr, n = _regions(i, regions, field)
    if _REGION_CACHE.get(regions) is None or not _EXACT_INT.issuperset(map(type, regions)):
        return None
    hit = (ctypes.addressof(arr) if n else 0, n, arr, regions)
    _REGION_ADDRESS[regions] = hit
    return hit


def _regions(i: int, regions: Any, field: str = "regions") -> Tuple[Any, int]:
    """The C array of a group's region (or layer) list, cached by value for tuples of ints."""
    if type(regions) is tuple:
        hit = _REGION_CACHE.get(regions)
        if hit is not None and _EXACT_INT.issuperset(map(type, regions)):
            return hit
        arr = u32_array(f"groups[{i}].{field}", regions)
        if len(_REGION_CACHE) >= 256:
            _REGION_CACHE.clear()
            _REGION_ADDRESS.clear()
            _REGION_ADDRESS[()] = (0, 0, None, ())
        if _EXACT_INT.issuperset(map(type, regions)):  # not e.g. IntEnum members equal to ints
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

    _fields_ = [("struct_size", c_size_t), ("field_mask", ctypes.c_uint64), ("trim", ctypes.c_void_p),
                ("regions", ctypes.c_void_p),
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
        pin = memoryview(values)  # first: the array cannot be resized once it is pinned
        n = len(values)
        if n == 0:
            return 0, 0, None
        return values.buffer_info()[0], n, pin
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


_TRIM_FORMAT, _GROUP_FORMAT = "NQiiPNPNQQQQQQQQQ", "NQPPNPN"  # pdkv_group_trim_input_t, pdkv_plan_group_t
assert struct.calcsize("@" + _TRIM_FORMAT) == _TRIM_SIZE and struct.calcsize("@" + _GROUP_FORMAT) == _PLAN_GROUP_SIZE
_TRIM_SCRATCH = struct.Struct("@" + _TRIM_FORMAT + "QQ")  # a trim and its two scratch words (see _PackBuffer)
_GROUP_STRUCT = struct.Struct("@" + _GROUP_FORMAT)


class _CallSlot:
    """The error out-parameter of one buffer's compile calls (``pdkv_error_t *`` and a
    ``byref`` of it, made once): whoever holds the buffer holds its slot."""

    __slots__ = ("err", "ref")

    def __init__(self) -> None:
        self.err = POINTER(_ffi.ErrorT)()
        self.ref = byref(self.err)


class _PackBuffer:
    """One C groups array (n ``pdkv_plan_group_t``, then their n ``pdkv_group_trim_input_t``,
    each trim followed by two 8-byte scratch words that hold the group's ids when it passes one
    a side; all sizes are multiples of 8, so no padding falls between them), with the arguments of its calls made once: ``arg`` (its address as a
    ``c_void_p``), ``typed`` (as ``pdkv_plan_group_t *``), ``count`` (n as a ``c_size_t``)."""

    __slots__ = ("buf", "mb", "base", "arg", "typed", "count", "slot")

    def __init__(self, n: int) -> None:
        self.buf = (ctypes.c_char * (n * _GROUP_STRUCT.size + n * _TRIM_SCRATCH.size))()
        self.mb = memoryview(self.buf).cast("B")  # packing through a memoryview is cheaper
        self.base = ctypes.addressof(self.buf)
        self.arg = ctypes.c_void_p(self.base)
        self.typed = ctypes.cast(self.base, POINTER(_ffi.PlanGroupC))
        self.count = c_size_t(n)
        self.slot = _CallSlot()


class _PackBuffers(threading.local):
    """Per thread: for each group count n, one :class:`_PackBuffer`, reused call after call. A
    thread packs the next request only after the library returned from the previous one
    (ctypes calls do not re-enter Python), so reusing the buffer is safe."""

    def __init__(self) -> None:
        self.by_count: Dict[int, _PackBuffer] = {}


_pack_buffers = _PackBuffers()


def _pack_buffer(n: int) -> _PackBuffer:
    """The pack buffer for n groups on this thread."""
    hit = _pack_buffers.by_count.get(n)
    if hit is None:
        hit = _PackBuffer(n)
        if len(_pack_buffers.by_count) < 64:
            _pack_buffers.by_count[n] = hit
    return hit


def _groups_fast(items: Sequence[Any]) -> Optional[Tuple[_PackBuffer, int, List[Any]]]:
    """The C groups array for the common case (PlanGroup of GroupTrimInput with plain ints,
    enum members, ids in buffers, region tuples): every struct is packed into this thread's
    reused buffer with one ``struct.pack_into`` each (which range-checks every field) and no
    per-id work (a group's one id a side is copied into its trim's scratch words, longer
    ``array('Q')`` are pinned and read in place). Returns (the buffer, how many block ids the groups pass, what must stay alive
    during the call), or None as soon as anything needs the checked path, which then builds the
    array again and reports the offending field by name."""
    n = len(items)
    pb = _pack_buffer(n)
    trims_at = pb.base + n * _PLAN_GROUP_SIZE
    stride = _TRIM_SIZE + 16  # each trim is followed by its two scratch words
    keep: List[Any] = []
    total = 0
    mb = pb.mb
    trim_pack, group_pack = _TRIM_SCRATCH.pack_into, _GROUP_STRUCT.pack_into
    group_at = 0
    trim_at = n * _PLAN_GROUP_SIZE  # offsets in the buffer
    # One pass, few calls: this runs once per request, so every Python operation counts.
    i = 0
    for g in items:
        if type(g) is not PlanGroup:
            return None
        t = g.trim
        if type(t) is not GroupTrimInput:
            return None
        k, m = t.kind, t.cache_mode
        tk, tm = type(k), type(m)
        mask, lpt, rpt, lf = trim_optionals(t.local_tokens_per_block, t.remote_tokens_per_block, t.local_first_block)
        computed, hit = t.remote_computed_tokens, t.local_hit_tokens
        window, rfirst = t.sliding_window, t.remote_first_block
        lk, rk = t.local_kernel_blocks_per_id, t.remote_kernel_blocks_per_id
        # bools, floats, IntEnums of other types: the checked path
        if not ((tk is int or tk is GroupKind) and (tm is int or tm is MambaCacheMode) and type(lpt) is int and
                type(rpt) is int and type(computed) is int and type(hit) is int and type(window) is int and
                type(rfirst) is int and type(lf) is int and type(lk) is int and type(rk) is int):
            return None
        lb: Any = t.local_blocks
        rb: Any = t.remote_blocks
        at = trims_at + i * stride
        lv = rv = 0  # the scratch words: a one-id group's ids, copied (pack_into range-checks them)
        tl, tr = type(lb), type(rb)
        if tl is array.array and len(lb) == 1:
            lv, la, ln = lb[0], at + _TRIM_SIZE, 1
        elif tl is array.array and lb.typecode in _ARRAY_TYPECODES_U64:
            keep.append(memoryview(lb))  # pins it first: no resize while the library reads it
            la, ln = lb.buffer_info()
        elif (tl is tuple or tl is list) and len(lb) == 1 and type(lb[0]) is int:
            lv, la, ln = lb[0], at + _TRIM_SIZE, 1
        else:
            x = _ids_address(lb, "local_blocks")
            if x is None:
                return None
            la, ln = x[0], x[1]
            keep.append(x[2])
        if tr is array.array and len(rb) == 1:
            rv, ra, rn = rb[0], at + _TRIM_SIZE + 8, 1
        elif tr is array.array and rb.typecode in _ARRAY_TYPECODES_U64:
            keep.append(memoryview(rb))
            ra, rn = rb.buffer_info()
        elif (tr is tuple or tr is list) and len(rb) == 1 and type(rb[0]) is int:
            rv, ra, rn = rb[0], at + _TRIM_SIZE + 8, 1
        else:
            x = _ids_address(rb, "remote_blocks")
            if x is None:
                return None
            ra, rn = x[0], x[1]
            keep.append(x[2])
        regions, layers = g.regions, g.layers
        if type(regions) is not tuple or type(layers) is not tuple:
            return None
        reg = _REGION_ADDRESS.get(regions)
        if reg is None or reg[3] is not regions:  # (an equal tuple may hold bools: see _REGION_CACHE)
            reg = _region_address(i, regions, "regions")
            if reg is None:
                return None
        lay = _REGION_ADDRESS.get(layers)
        if lay is None or lay[3] is not layers:
            lay = _region_address(i, layers, "layers")
            if lay is None:
                return None
        keep.append(reg[2])
        keep.append(lay[2])
        total += ln + rn
        try:  # one pack per struct (cheaper than one of them all): each range-checks its fields
            trim_pack(mb, trim_at, _TRIM_SIZE, mask, k, m, la, ln, ra, rn, lpt, rpt, computed, hit, window, lf, rfirst,
                      lk, rk, lv, rv)
            group_pack(mb, group_at, _PLAN_GROUP_SIZE, 0, at, reg[0], reg[1], lay[0], lay[1])
        except struct.error:  # a value out of its C type's range
            return None
        i += 1
        trim_at += stride
        group_at += _PLAN_GROUP_SIZE
    return pb, total, keep


def _groups(groups: Iterable[PlanGroup]) -> Tuple[Any, int, List[Any]]:
    """A C array of pdkv_plan_group_t, its length, and what must stay alive during the call."""
    if type(groups) is list or type(groups) is tuple:
        items = groups
        if items:
            fast = _groups_fast(items)
            if fast is not None:
                return fast[0].typed, len(items), fast[2]
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
        arr[i] = _ffi.PlanGroupC(_PLAN_GROUP_SIZE, 0, ctypes.pointer(trim_c), regions, n, layers, nl)
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


# A compile keeps the GIL (the ctypes call goes through a PyDLL function) when its ids times the
# engines' region count is at most this: a few to about 15 µs of C work on the machine of
# docs/benchmarks.md, where releasing and retaking the GIL costs more than it lets other threads
# do, and where a thread that released it may wait a whole switch interval (5 ms) to get it
# back while others run. Longer compiles release it, as every other call does.
_GIL_WORK = 1536

# pdkv_transfer_plan_compile_into without argtypes (every argument is passed as a made-once
# ctypes object): [releasing the GIL (CDLL), holding it (PyDLL)].
_INTO: List[Any] = []


def _undeclared(name: str) -> List[Any]:
    """C function ``name`` as two new, undeclared ctypes function objects (no argtypes: every
    argument is passed as a made-once ctypes object; restype int): [releasing the GIL (CDLL),
    holding it (PyDLL)]. MissingFunctionError for a library without it."""
    _ffi.function(name)
    lib = _ffi.lib()
    fns = []
    for dll in (lib, ctypes.PyDLL(_ffi.library_path(), handle=lib._handle)):
        fn = dll[name]
        fn.restype = ctypes.c_int
        fns.append(fn)
    return fns


def _into_functions() -> List[Any]:
    if not _INTO:
        _INTO[:] = _undeclared("pdkv_transfer_plan_compile_into")
    return _INTO


def _ctx_owner(ctx: Any) -> _Owner:
    """The :class:`_Owner` of ``ctx``'s C context: holding it keeps the context alive whatever
    another thread's close() does (the free happens when the last holder lets go)."""
    if type(ctx) is not PlanContext and not isinstance(ctx, PlanContext):
        raise TypeError(f"ctx must be a pdkv.PlanContext, got {type(ctx).__name__}")
    try:
        return ctx._owner_holder[0]
    except (IndexError, AttributeError):
        raise ClosedError("pdkv.PlanContext") from None


def _check_reuse(reuse: Any) -> None:
    if reuse is not None and type(reuse) is not TransferPlan and not isinstance(reuse, TransferPlan):
        raise TypeError(f"reuse must be a pdkv.TransferPlan, got {type(reuse).__name__}")


def _into(co: _Owner, arg: Any, count: Any, plan: "TransferPlan", slot: _CallSlot, hold_gil: bool) -> bool:
    """Recompiles ``plan`` in place from the packed groups at ``arg`` (``count`` of them) for
    the context ``co``; False, doing nothing, when the plan cannot be rewritten now (closed or
    closing, in use by a call on another thread, or zero-copy views were taken from it). The
    plan's lock is held for the call: every other use of the plan (a call starting, one
    returning, close()) waits for it, as they wait for what :meth:`Handle._take` holds."""
    lock = plan._lock
    lock.acquire()
    try:
        if plan._in_flight or plan._exclusive or plan._closing or plan._viewed:  # (closing stays set once closed)
            return False
        status = (_INTO or _into_functions())[hold_gil](co.arg, arg, count, plan._arg, slot.ref)
    finally:
        lock.release()
    if status:
        raise error_from("pdkv_transfer_plan_compile_into", status, slot.err)
    return True


def _new_plan(co: _Owner, groups: Any, n: int) -> "TransferPlan":
    """A new plan compiled from the C groups array ``groups`` (n of them) for the context ``co``."""
    out = POINTER(_ffi.TransferPlanT)()
    call("pdkv_transfer_plan_compile", co.ptr, groups, n, byref(out))
    plan = object.__new__(TransferPlan)
    plan._adopt(out)
    return plan


def _compile(ctx: PlanContext, groups: Iterable[PlanGroup], reuse: Optional["TransferPlan"]) -> "TransferPlan":
    """PlanContext.compile / TransferPlan.compile: the context is held through its owner."""
    co = _ctx_owner(ctx)
    _check_reuse(reuse)
    if (type(groups) is list or type(groups) is tuple) and groups:
        fast = _groups_fast(groups)
        if fast is not None:
            pb, ids, keep = fast
            try:
                if reuse is not None and _into(co, pb.arg, pb.count, reuse, pb.slot, ids <= ctx._gil_ids):
                    return reuse
                return _new_plan(co, pb.typed, len(groups))
            finally:
                keep.clear()  # the buffers it pins released now, not kept by an error's traceback
    arr, n, keep = _groups(groups)
    try:
        return _compile_checked(co, arr, n, reuse)
    except BaseException as e:
        # The C structs refer to the pinned buffers (ctypes keeps what a field was set from):
        # the error's traceback holds this frame and the ones below it, so none may keep them.
        arr = None
        keep.clear()
        traceback.clear_frames(e.__traceback__)  # (skips this frame, still running)
        raise


def _compile_checked(co: _Owner, arr: Any, n: int, reuse: Optional["TransferPlan"]) -> "TransferPlan":
    """Compiles the typed C groups array ``arr`` into ``reuse`` when it can be rewritten, else
    into a new plan (the path of groups the fast packing does not take)."""
    if reuse is not None:
        ptr = reuse._take()
        if ptr is not None:
            try:
                # _viewed is read only once the plan is taken: views are taken inside operations
                # on the plan, which _take excludes, so none appears from here on (read before
                # _take, a view another thread took in between was rewritten under it).
                if not reuse._viewed:
                    call("pdkv_transfer_plan_compile_into", co.ptr, arr, n, ptr)
                    return reuse
            finally:
                reuse._give_back()
    return _new_plan(co, arr, n)


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

    p_tp_size: int  #: P TP size.
    d_tp_size: int  #: D TP size.
    d_tp_rank: int  #: The reading D rank.
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
    p_pp_size: int = 1  #: P's pipeline stages; the plan's P ranks are TP ranks of stage p_pp_rank.
    p_pp_rank: int = 0  #: P's stage.
    d_pp_size: int = 1  #: D's pipeline stages (1 without PP).
    d_pp_rank: int = 0  #: D's stage.
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
    _owned = True  # zero-copy views hold its _Owner: the memory outlives close() while they live
    _viewed = False  # set once views of its memory were taken: never rewritten in place after

    def __init__(self) -> None:
        raise TypeError("use TransferPlan.compile or PlanContext.compile")

    @classmethod
    @outside_operation  # holds the context through its _Owner (the hot path)
    def compile(cls, ctx: PlanContext, groups: Iterable[PlanGroup],
                reuse: Optional["TransferPlan"] = None) -> "TransferPlan":
        """Compiles and validates one request's plan; raises :class:`CoverageError`,
        :class:`OutOfBoundsError`, :class:`InvalidArgumentError`, ...

        ``reuse``: a plan this thread no longer needs (e.g. the previous request's, once its
        reads were posted), or one from :meth:`TransferPlan.empty`. It is recompiled in place
        and returned: no new handle, and its C buffers are reused (``pdkv_transfer_plan_compile_into``),
        which makes small requests markedly cheaper. Everything read from it before is stale;
        on error it holds an empty plan and can be reused again. When it cannot be rewritten
        safely (closed, in use by a call on another thread, or :meth:`rank_reads_view` /
        :meth:`rank_reads_numpy` views were ever taken from it: their memory must stay as it
        is), a new plan is returned instead and ``reuse`` is left untouched; so always use the
        returned plan."""
        return _compile(ctx, groups, reuse)

    @classmethod
    def empty(cls) -> "TransferPlan":
        """A plan with no reads and no groups, to pass as ``reuse`` to :meth:`compile`."""
        out = POINTER(_ffi.TransferPlanT)()
        call("pdkv_transfer_plan_new", byref(out))
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

    def rank_reads(self, p_tp_rank: int) -> Tuple[PlanRead, ...]:
        """The reads D issues against P rank ``p_tp_rank``, in issue order."""
        return self._rank_reads(p_tp_rank)[0]

    def rank_bytes(self, p_tp_rank: int) -> int:
        """Total bytes D reads from P rank ``p_tp_rank``."""
        return self._rank_reads(p_tp_rank)[1]

    def _rank_reads(self, p_tp_rank: int) -> Tuple[Tuple[PlanRead, ...], int]:
        ptr = POINTER(_ffi.PlanReadC)()
        n = c_size_t()
        total = c_uint64()
        call("pdkv_transfer_plan_rank_reads", self._p(), u32("p_tp_rank", p_tp_rank), byref(ptr), byref(n), byref(total))
        reads = array_copy(
            ptr,
            n.value,
            lambda r: PlanRead(r.local_region, r.local_offset, r.remote_region, r.remote_offset, r.length),
        )
        return reads, total.value

    def rank_reads_view(self, p_tp_rank: int) -> memoryview:
        """The reads D issues against P rank ``p_tp_rank`` as a read-only ``memoryview`` of
        ``pdkv_plan_read_t`` records over the plan's own memory: no copy, no Python object per
        read. Its format is a ctypes struct (fields local_region, local_offset, remote_region,
        remote_offset, length; 40 bytes each); ``numpy.asarray`` of it, or :meth:`rank_reads_numpy`,
        gives a structured array. The view keeps the plan's memory alive: after :meth:`close` the
        plan's methods raise :class:`ClosedError` but the memory is freed only once the last view
        is gone. Empty view for a rank D does not read from."""
        ptr = POINTER(_ffi.PlanReadC)()
        n = c_size_t()
        call("pdkv_transfer_plan_rank_reads", self._p(), u32("p_tp_rank", p_tp_rank), byref(ptr), byref(n), None)
        arr = (_ffi.PlanReadC * n.value).from_address(ctypes.addressof(ptr.contents)) if n.value else (
            _ffi.PlanReadC * 0)()
        arr._pdkv_owner = self._memory_owner()  # type: ignore[attr-defined]
        return memoryview(arr).toreadonly()

    def rank_reads_numpy(self, p_tp_rank: int) -> Any:
        """:meth:`rank_reads_view` as a read-only numpy structured array of dtype
        :data:`PLAN_READ_DTYPE` (no copy; needs numpy)."""
        import numpy as np

        view = self.rank_reads_view(p_tp_rank)
        return np.frombuffer(view.cast("B"), dtype=plan_read_dtype())

    def _memory_owner(self) -> _Owner:
        """The object whose lifetime the plan's C memory follows: views hold it, so the plan is
        freed when it goes (the handle closed or collected, every view gone), and the plan is
        never rewritten in place once views were taken. Runs inside an operation, so close()
        cannot drop it meanwhile."""
        self._viewed = True
        return self._owner_holder[0]

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
