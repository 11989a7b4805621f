"""The engine-level API (``pdkv/engine.h``): describe an engine rank once, plan each request from
what its scheduler holds.

An :class:`Engine` (model, engine settings, TP rank, where its KV tensors live) derives its
KV-cache groups as vLLM's hybrid KV-cache manager forms them, its handshake metadata and its
registration descriptors. Per request, :meth:`Engine.plan_request` takes per group the logical
block ids of D's block table and the ids P exported, the prompt length and D's prefix-cache hit,
and returns the same :class:`TransferPlan` the low-level :meth:`TransferPlan.compile` does:
the N-1 rule, each side's kernel blocks per logical block and the Mamba slots of each cache mode
are pdkv's job; ``reuse=plan`` plans into a plan the thread keeps (no new handle, its buffers
reused). A request that does not fit the engine raises :class:`InvalidArgumentError` saying what
to pass instead. Block ids may be any buffer of unsigned 64-bit integers (``array('Q')``, numpy
``uint64``) or a list or tuple of ints: the request and a copy of its ids are packed into one
array with array-level copies, no Python loop over the ids; other sequences are converted id by
id.
"""

from __future__ import annotations

import array
import ctypes
import dataclasses
import weakref
from ctypes import POINTER, byref
from typing import TYPE_CHECKING, Any, List, Optional, Sequence, Tuple, Union

from . import _ffi
from ._base import _UNSIGNED_FORMATS, Handle, array_copy, outside_operation, call, error_from, encode, enum_value, handle_arg, index_arg, to_enum, u32, u64, u64_array
from .descriptors import DescriptorList
from .enums import GroupKind, KvLayout, MambaCacheMode
from .errors import ClosedError
from .geometry import EngineConfig
from .metadata import EngineMetadata
from .model import Model
from .plan import PlanContext, TransferPlan, _check_reuse, _ctx_owner, _undeclared

if TYPE_CHECKING:
    from .engine_planner import EnginePlanner


@dataclasses.dataclass(frozen=True)
class EngineInfo:
    """Scalars of an :class:`Engine` (``pdkv_engine_info_t``)."""

    num_groups: int  #: KV-cache groups (:meth:`Engine.groups`).
    num_regions: int  #: Registered KV tensors: the largest group's layers.
    tp_size: int  #: TP size.
    tp_rank: int  #: This rank.
    cache_mode: Union[MambaCacheMode, int]  #: Mamba cache mode (pure attention: none).
    logical_block_size: int  #: Tokens per block of the block table.
    kernel_block_size: int  #: Tokens per kernel block.
    physical_blocks_per_logical: int  #: Kernel blocks per logical block (ppl).
    num_logical_blocks: int  #: Logical blocks per region.
    num_speculative_tokens: int  #: Mamba scratch slots at the end of each Mamba list.
    prefix_caching: bool  #: The engine can hold a prefix-cache hit.


@dataclasses.dataclass(frozen=True)
class EngineGroup:
    """One KV-cache group (``pdkv_engine_group_t``): its kind, its model layers (ascending) and
    the region each layer uses (``regions[i]`` for ``layers[i]``)."""

    kind: Union[GroupKind, int]  #: Group kind.
    layers: Tuple[int, ...]  #: Model layers, ascending.
    regions: Tuple[int, ...]  #: Region of each layer.


@dataclasses.dataclass(frozen=True)
class RequestGroup:
    """One group of a request, in the engine's group order: D's block table for the group
    (logical ids from the request's first block, hit blocks included; a Mamba list as the table
    holds it) and P's logical ids as P exported them (exchange-clipped)."""

    local_block_ids: Any  #: D's block table (buffer of uint64 or sequence of ints).
    remote_block_ids: Any  #: P's exported ids (buffer of uint64 or sequence of ints).



# The request packed into one array('Q') of words: pdkv_engine_request_t (6 words), the groups
# array (4 words each: ids pointer, count, ids pointer, count), then every id list copied after
# them. Only where those structs are exactly words (64-bit pointers and size_t).
_REQUEST_WORDS = 6
_GROUP_WORDS = 4
_PACKABLE = (ctypes.sizeof(ctypes.c_void_p) == 8 and array.array("Q").itemsize == 8
             and ctypes.sizeof(_ffi.EngineRequestC) == 8 * _REQUEST_WORDS
             and ctypes.sizeof(_ffi.EngineRequestGroupC) == 8 * _GROUP_WORDS)
_INT_ONLY = {int}
_ErrorPtr = POINTER(_ffi.ErrorT)
# pdkv_engine_plan_request_into without argtypes: its arguments are ctypes objects already, and
# ctypes converts each declared argument on every call.
_REQUEST_INTO: List[Any] = []


def _request_into() -> Any:
    if not _REQUEST_INTO:
        _REQUEST_INTO.append(_undeclared("pdkv_engine_plan_request_into")[0])
    return _REQUEST_INTO[0]


def _append_ids(pack: "array.array[int]", ids: Any) -> bool:
    """Appends ``ids`` to ``pack`` with no per-element work in Python: an array('Q') or another
    contiguous one-dimensional buffer of unsigned 64-bit integers (numpy uint64) is copied with
    memcpy, a list or tuple of plain ints converted by array itself (range-checked). False, with
    ``pack`` possibly extended, for anything else (bools, numpy scalars, signed buffers, ...): the
    caller then takes the element-by-element path, whose errors name the value."""
    t = type(ids)
    if t is array.array and ids.typecode == "Q":
        pack.extend(ids)
        return True
    if t is list or t is tuple:
        if ids and set(map(type, ids)) != _INT_ONLY:
            return False
        try:
            pack.extend(ids)
        except (OverflowError, TypeError):
            return False
        return True
    if isinstance(ids, (str, bytes, bytearray)):
        return False
    try:
        mv = memoryview(ids)
    except TypeError:
        return False
    if mv.ndim != 1 or mv.itemsize != 8 or mv.format not in _UNSIGNED_FORMATS[8] or not mv.c_contiguous:
        return False
    pack.frombytes(mv.cast("B"))
    return True


def _packed_request(items: List[Any], num_prompt_tokens: Any,
                    num_local_computed_tokens: Any) -> "Optional[array.array[int]]":
    """One array('Q') holding the request's pdkv_engine_request_t at its start, then its groups
    and a copy of every id (see _append_ids), or None where the element-by-element path must
    take it. The copy is this call's own, so no caller buffer is pinned or read while the GIL is
    released."""
    if not _PACKABLE or type(num_prompt_tokens) is not int or type(num_local_computed_tokens) is not int:
        return None
    if not (0 <= num_prompt_tokens < 1 << 64 and 0 <= num_local_computed_tokens < 1 << 64):
        return None
    n = len(items)
    head = _REQUEST_WORDS + _GROUP_WORDS * n
    pack = array.array("Q", bytes(8 * head))
    extend = pack.extend
    counts: List[int] = []  # ids per list, local and remote of each group in turn
    for g in items:
        if type(g) is RequestGroup:
            local, remote = g.local_block_ids, g.remote_block_ids
        elif type(g) is tuple and len(g) == 2:
            local, remote = g
        else:
            return None
        # array('Q'), the usual buffer, inline; anything else through _append_ids.
        if type(local) is array.array and local.typecode == "Q":
            extend(local)
        elif not _append_ids(pack, local):
            return None
        if type(remote) is array.array and remote.typecode == "Q":
            extend(remote)
        elif not _append_ids(pack, remote):
            return None
        counts += (len(local), len(remote))
    base = pack.buffer_info()[0]  # final: nothing is appended from here on
    words = [8 * _REQUEST_WORDS, 0, base + 8 * _REQUEST_WORDS if n else 0, n,
             num_prompt_tokens, num_local_computed_tokens]
    addr = base + 8 * head
    for c in counts:  # each list: its address in the pack (NULL when empty) and its count
        words += (addr if c else 0, c)
        addr += 8 * c
    pack[0:head] = array.array("Q", words)
    return pack


def _request_struct(items: List[Any], num_prompt_tokens: Any, num_local_computed_tokens: Any) -> Tuple[Any, List[Any]]:
    """The request as ctypes structs over the caller's buffers (read in place) or converted
    sequences, element by element with errors naming the value; and what must stay alive."""
    arr = (_ffi.EngineRequestGroupC * len(items))() if items else None
    keep: List[Any] = []
    for i, g in enumerate(items):
        if isinstance(g, RequestGroup):
            local, remote = g.local_block_ids, g.remote_block_ids
        elif isinstance(g, tuple) and len(g) == 2:
            local, remote = g
        else:
            raise TypeError(f"groups[{i}] must be a pdkv.RequestGroup or a (local, remote) pair, "
                            f"got {type(g).__name__}")
        la, ln = u64_array(f"groups[{i}].local_block_ids", local)
        ra, rn = u64_array(f"groups[{i}].remote_block_ids", remote)
        keep += [la, ra]
        assert arr is not None
        arr[i].local_block_ids = ctypes.cast(la, POINTER(ctypes.c_uint64)) if ln else None
        arr[i].num_local_block_ids = ln
        arr[i].remote_block_ids = ctypes.cast(ra, POINTER(ctypes.c_uint64)) if rn else None
        arr[i].num_remote_block_ids = rn
    r = _ffi.EngineRequestC()
    r.struct_size = ctypes.sizeof(r)
    r.groups = ctypes.cast(arr, POINTER(_ffi.EngineRequestGroupC)) if arr is not None else None
    r.num_groups = len(items)
    r.num_prompt_tokens = u64("num_prompt_tokens", num_prompt_tokens)
    r.num_local_computed_tokens = u64("num_local_computed_tokens", num_local_computed_tokens)
    keep.append(arr)
    return r, keep


class Engine(Handle):
    """One engine rank described once (``pdkv_engine_t``). Immutable; thread-safe; a context
    manager with an idempotent ``close()``."""

    _free_name = "pdkv_engine_free"
    _owned = True  # EnginePlanner calls hold its _Owner instead of counting themselves in flight

    def __init__(
        self,
        model: Model,
        config: EngineConfig,
        engine_id: str = "engine",
        tp_rank: int = 0,
        num_logical_blocks: int = 64,
        base: int = 1 << 40,
        region_bases: Optional[Sequence[int]] = None,
        kv_layout: Union[KvLayout, int, str] = KvLayout.HND,
        prefix_caching: Optional[bool] = None,
    ) -> None:
        """``region_bases`` None places the regions back to back from ``base``; else one address
        per region. ``prefix_caching`` None derives it (on iff the Mamba cache mode is not none)."""
        if not isinstance(config, EngineConfig):
            raise TypeError(f"config must be a pdkv.EngineConfig, got {type(config).__name__}")
        o = _ffi.EngineOptionsC()
        call("pdkv_engine_options_init", byref(o))
        o.model = handle_arg("model", model, Model)
        cc = config._to_c()
        o.config = ctypes.pointer(cc)
        o.engine_id = encode("engine_id", engine_id)
        o.tp_rank = u32("tp_rank", tp_rank)
        o.num_logical_blocks = u64("num_logical_blocks", num_logical_blocks)
        o.base = u64("base", base)
        keep: Any = None
        if region_bases is not None:
            keep, n = u64_array("region_bases", region_bases)
            o.region_bases = ctypes.cast(keep, POINTER(ctypes.c_uint64)) if n else None
            o.num_region_bases = n
        o.kv_layout = int(enum_value("kv_layout", KvLayout, kv_layout))
        if isinstance(prefix_caching, bool):
            o.field_mask |= _ffi.FIELD_BITS["PDKV_ENGINE_FIELD_PREFIX_CACHING"]
            o.prefix_caching = int(prefix_caching)
        elif prefix_caching is not None:
            raise TypeError(f"prefix_caching must be a bool or None, got {type(prefix_caching).__name__}")
        out = POINTER(_ffi.EngineT)()
        call("pdkv_engine_new", byref(o), byref(out))
        del keep, cc
        self._adopt(out)

    def info(self) -> EngineInfo:
        """The engine's scalars."""
        i = _ffi.EngineInfoC()
        i.struct_size = ctypes.sizeof(i)
        call("pdkv_engine_get_info", self._p(), byref(i))
        return EngineInfo(
            num_groups=i.num_groups, num_regions=i.num_regions, tp_size=i.tp_size, tp_rank=i.tp_rank,
            cache_mode=to_enum(MambaCacheMode, i.cache_mode), logical_block_size=i.logical_block_size,
            kernel_block_size=i.kernel_block_size, physical_blocks_per_logical=i.physical_blocks_per_logical,
            num_logical_blocks=i.num_logical_blocks, num_speculative_tokens=i.num_speculative_tokens,
            prefix_caching=bool(i.prefix_caching),
        )

    def group(self, index: int) -> EngineGroup:
        """KV-cache group ``index`` (raises :class:`OutOfBoundsError` past the last)."""
        g = _ffi.EngineGroupC()
        g.struct_size = ctypes.sizeof(g)
        call("pdkv_engine_group", self._p(), index_arg("index", index), byref(g))
        return EngineGroup(
            kind=to_enum(GroupKind, g.kind),
            layers=array_copy(g.layers, g.num_layers, int),
            regions=array_copy(g.regions, g.num_regions, int),
        )

    def groups(self) -> Tuple[EngineGroup, ...]:
        """Every KV-cache group, in the order a request lists its groups."""
        return tuple(self.group(i) for i in range(self.info().num_groups))

    def metadata(self) -> EngineMetadata:
        """The metadata this rank advertises in the handshake (a new handle)."""
        out = POINTER(_ffi.EngineMetadataT)()
        call("pdkv_engine_get_metadata", self._p(), byref(out))
        return EngineMetadata._wrap(out)

    def registration_descriptors(self) -> DescriptorList:
        """Every kernel block of every region as attention descriptors, then (Mamba models) every
        logical block's conv projections and temporal state (vLLM's local-handle order)."""
        return DescriptorList._make("pdkv_engine_registration_descriptors", self._p())

    def plan_context(
        self, remote: Sequence[EngineMetadata], remote_config: EngineConfig, permute_on_receive: bool = False
    ) -> PlanContext:
        """The plan context of this (D) engine and one P engine: the metadata of each of its
        ranks (any order, each once) and its settings."""
        if isinstance(remote, (str, bytes)) or not hasattr(remote, "__iter__"):
            raise TypeError(f"remote must be a sequence of pdkv.EngineMetadata, got {type(remote).__name__}")
        if not isinstance(remote_config, EngineConfig):
            raise TypeError(f"remote_config must be a pdkv.EngineConfig, got {type(remote_config).__name__}")
        if not isinstance(permute_on_receive, bool):
            raise TypeError(f"permute_on_receive must be a bool, got {type(permute_on_receive).__name__}")
        items = list(remote)
        arr = (POINTER(_ffi.EngineMetadataT) * len(items))() if items else None
        for i, r in enumerate(items):
            assert arr is not None
            arr[i] = handle_arg(f"remote[{i}]", r, EngineMetadata)
        cc = remote_config._to_c()
        p = _ffi.EnginePeerC()
        p.struct_size = ctypes.sizeof(p)
        p.remote = ctypes.cast(arr, POINTER(POINTER(_ffi.EngineMetadataT))) if arr is not None else None
        p.num_remote = len(items)
        p.remote_config = ctypes.pointer(cc)
        p.permute_on_receive = int(permute_on_receive)
        out = POINTER(_ffi.PlanContextT)()
        call("pdkv_engine_plan_context_new", self._p(), byref(p), byref(out))
        ctx = object.__new__(PlanContext)
        ctx._adopt(out)
        return ctx

    def prepare(self, ctx: PlanContext) -> "EnginePlanner":
        """The planner of this engine's requests against ``ctx`` (see :class:`EnginePlanner`):
        :meth:`EnginePlanner.plan` is :meth:`plan_request` with the request structs made once,
        for an engine that plans request after request from Python."""
        from .engine_planner import EnginePlanner

        return EnginePlanner(self, ctx)

    _fast: Any = None  # plan_request's generated function, made on its first call

    @outside_operation  # holds the engine and the context through their _Owners (the hot path)
    def plan_request(
        self,
        ctx: PlanContext,
        groups: Sequence[Union[RequestGroup, Tuple[Any, Any]]],
        num_prompt_tokens: int,
        num_local_computed_tokens: int = 0,
        reuse: Optional[TransferPlan] = None,
    ) -> TransferPlan:
        """Compiles one request's plan. ``groups``: one :class:`RequestGroup` (or a
        ``(local_block_ids, remote_block_ids)`` pair) per engine group, in the engine's order.

        ``reuse``: a plan this thread no longer needs, or one from :meth:`TransferPlan.empty`,
        as for :meth:`TransferPlan.compile`: it is planned into in place and returned
        (``pdkv_engine_plan_request_into``: no new handle, its C buffers reused); on error it
        holds an empty plan. When it cannot be rewritten safely (closed, in use by a call on
        another thread, zero-copy views ever taken from it) a new plan is returned and
        ``reuse`` is left untouched; so always use the returned plan.

        Block ids in ``array('Q')``, numpy ``uint64`` arrays (numpy loaded before the first
        call) or lists of ints, all groups alike, take a function generated for the engine's
        group count on the first call (``engine_planner.py``: the request structs in a buffer
        made once, the ids copied into it); any other request is packed call by call, with the
        same results and errors. :meth:`prepare` binds a context too (one argument fewer)."""
        fast = self._fast
        if fast is None:
            fast = self._make_fast()
        return fast(ctx, groups, num_prompt_tokens, num_local_computed_tokens, reuse)  # type: ignore[no-any-return]

    def _make_fast(self) -> Any:
        """plan_request's generated function (engine_planner._make_plan), or the checked method
        where it cannot be made (a closed engine: the checked path raises ClosedError)."""
        from .engine_planner import _make_plan

        try:
            n = len(self.groups())
        except ClosedError:
            return self._plan_request_checked  # (not kept: it would refer back to this object)
        # The generated function must not refer back to this object (no reference cycle): its
        # checked path finds the engine through a weak reference (alive: its caller holds it).
        eref = weakref.ref(self)

        def slow(ctx: Any, groups: Any, n: Any, hit: Any, reuse: Any) -> TransferPlan:
            engine = eref()
            if engine is None:
                raise ClosedError("pdkv.Engine")
            return engine._plan_request_checked(ctx, groups, n, hit, reuse)

        made = _make_plan(n, self._owner_holder, None, slow)
        if made is None:  # structs not made of 8-byte words: the checked path, every call
            return self._plan_request_checked  # (not kept, as above)
        self._fast = made[0]
        return made[0]

    def _plan_request_checked(
        self,
        ctx: PlanContext,
        groups: Sequence[Union[RequestGroup, Tuple[Any, Any]]],
        num_prompt_tokens: int,
        num_local_computed_tokens: int = 0,
        reuse: Optional[TransferPlan] = None,
    ) -> TransferPlan:
        """:meth:`plan_request` for any request: every argument checked and named when wrong,
        the request packed into one array (or element by element)."""
        _check_reuse(reuse)
        # The context is held through its owner (as its compiles hold it): alive until this call
        # returns whatever another thread's close() does, without counting a use under its lock.
        co = _ctx_owner(ctx)
        c = co.ptr
        if isinstance(groups, (str, bytes)) or not hasattr(groups, "__iter__"):
            raise TypeError(f"groups must be a sequence of pdkv.RequestGroup, got {type(groups).__name__}")
        items = list(groups)
        packed = _packed_request(items, num_prompt_tokens, num_local_computed_tokens)
        if packed is not None:
            # The untyped call takes the pack's address (the pack outlives the call: a local);
            # the typed one a struct view of it (which holds the pack).
            req: Any = ctypes.c_void_p(packed.buffer_info()[0])
            keep: List[Any] = []
        else:
            r, keep = _request_struct(items, num_prompt_tokens, num_local_computed_tokens)
            req = byref(r)
        if reuse is not None:
            ptr = reuse._take()
            if ptr is not None:
                try:
                    # _viewed is read once the plan is taken (see plan._compile_checked).
                    if not reuse._viewed:
                        err = _ErrorPtr()
                        status = (_REQUEST_INTO[0] if _REQUEST_INTO else _request_into())(self._p(), co.arg, req, ptr, byref(err))
                        if status:
                            raise error_from("pdkv_engine_plan_request_into", status, err)
                        if err:
                            _ffi.lib().pdkv_error_free(err)
                        return reuse
                finally:
                    reuse._give_back()
        if packed is not None:
            r = _ffi.EngineRequestC.from_buffer(packed)
        out = POINTER(_ffi.TransferPlanT)()
        call("pdkv_engine_plan_request", self._p(), c, byref(r), byref(out))
        del keep
        plan = object.__new__(TransferPlan)
        plan._adopt(out)
        return plan
