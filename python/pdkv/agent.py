"""The transfer executor (``pdkv/agent.h``): one :class:`Agent` per engine rank, its memory
registrations (:class:`Memory`), its peers (:class:`Peer`), transfers (:class:`Transfer`),
notifications and leases.

Every handle is a context manager and has an idempotent ``close()``; a :class:`Transfer`
closed (or left by its ``with`` block) while in flight is cancelled. Deadlines are seconds
(int or float), rounded up to whole milliseconds; ``None`` means the agent's default. Calls
into the library release the GIL (ctypes does), and :meth:`Transfer.wait` waits in short
slices, so other threads run meanwhile and a ``close()`` from another thread returns promptly.
Block ids of a request go into the plan (:class:`pdkv.PlanGroup`) and may be any buffer of
unsigned 64-bit integers (``array('Q')``, ``memoryview``, numpy ``uint64``), used in place.
"""

from __future__ import annotations

import collections
import ctypes
import dataclasses
import math
import os
import select
import threading
import time
import weakref
from ctypes import POINTER, byref
from typing import Any, Callable, Deque, Dict, Iterable, List, Optional, Tuple, Union

from . import _ffi
from ._base import (
    Handle,
    call,
    decode,
    encode,
    enum_value,
    handle_arg,
    i32,
    outside_operation,
    to_enum,
    u32,
    u64,
)
from .enums import MemoryType, NotificationKind, ProgressMode, TransferOp, TransferState, Transport
from .errors import ClosedError, InvalidArgumentError, PdkvError, Status
from .metadata import EngineMetadata
from .plan import TransferPlan

_U64_MAX = (1 << 64) - 1
_U32_MAX = (1 << 32) - 1
#: Longest single blocking C wait: close() and KeyboardInterrupt are noticed within this.
_WAIT_SLICE = 0.05


def _millis(name: str, seconds: Any, *, max_ms: int = _U64_MAX) -> int:
    """``seconds`` as whole milliseconds rounded up (a deadline never expires earlier than
    asked). Refused (naming ``name`` and the value): non-numbers, bools, NaN, infinities,
    values <= 0 and values above ``max_ms`` ms."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise TypeError(f"{name} must be a number of seconds, got {type(seconds).__name__}")
    if isinstance(seconds, float) and not math.isfinite(seconds):
        raise InvalidArgumentError(Status.INVALID_ARGUMENT, f"{name} = {seconds!r} seconds is not finite")
    if seconds <= 0:
        raise InvalidArgumentError(Status.INVALID_ARGUMENT, f"{name} = {seconds!r} seconds: must be positive")
    ms = seconds * 1000 if isinstance(seconds, int) else math.ceil(seconds * 1000)
    if ms > max_ms:
        raise InvalidArgumentError(
            Status.INVALID_ARGUMENT, f"{name} = {seconds!r} seconds is longer than the {max_ms} ms the C field holds"
        )
    return int(ms)


def _writable_bytes(name: str, buffer: Any) -> Any:
    """A ctypes char array over the memory of a writable, C-contiguous buffer (bytearray,
    mmap, array, numpy...), without a copy. While it exists the exporter cannot move or free
    the memory (a bytearray cannot be resized, an mmap cannot be closed)."""
    try:
        mv = memoryview(buffer)
    except TypeError:
        raise TypeError(f"{name} must support the buffer protocol, got {type(buffer).__name__}") from None
    if mv.readonly:
        raise TypeError(f"{name} must be writable (peers write into registered memory)")
    if not mv.c_contiguous:
        raise TypeError(f"{name} must be C-contiguous")
    if mv.nbytes == 0:
        raise InvalidArgumentError(Status.INVALID_ARGUMENT, f"{name} is empty")
    return (ctypes.c_char * mv.nbytes).from_buffer(mv.cast("B"))


def buffer_address(buffer: Any) -> int:
    """The address of a writable, C-contiguous buffer's memory, for
    :attr:`pdkv.EngineLayout.region_bases`. The buffer must not move afterwards (do not resize
    a bytearray; an mmap never moves)."""
    return ctypes.addressof(_writable_bytes("buffer", buffer))


@dataclasses.dataclass(frozen=True)
class AgentInfo:
    """Scalars of an :class:`Agent` (``pdkv_agent_info_t``)."""

    engine_id: str  #: This rank's engine id.
    tp_rank: int  #: This rank.
    tp_size: int  #: Its TP size.
    listen_address: str  #: "host:port" actually bound.
    port: int  #: The bound port.
    transport: Union[Transport, int]  #: Data transport.
    progress_mode: Union[ProgressMode, int]  #: Who drives progress.
    num_peers: int  #: Peers currently connected.
    transfers_in_flight: int  #: Transfers in flight.
    copy_threads: int  #: Threads copying each shm batch (the option or its default).


@dataclasses.dataclass(frozen=True)
class PeerInfo:
    """A peer's identity, state and counters (``pdkv_peer_info_t``)."""

    engine_id: str  #: Remote engine.
    tp_rank: int  #: Remote rank.
    address: str  #: The control connection's remote "ip:port".
    connected: bool  #: False once lost or disconnected.
    inbound: bool  #: True when the peer connected to us.
    transport: Union[Transport, int]  #: Transport chosen for this peer.
    lost_status: Union[Status, int]  #: Why it was lost (OK while connected).
    bytes_read: int  #: By READ transfers from this peer.
    bytes_written: int  #: By WRITE transfers into this peer.
    transfers_done: int  #: Transfers done.
    transfers_failed: int  #: Transfers failed.
    operations_failed: int  #: UCX operations that completed with an error.
    notifications_sent: int  #: Notifications sent.
    notifications_received: int  #: Notifications received.
    heartbeat_rtt: float  #: Last heartbeat round trip, seconds.
    pp_rank: int = 0  #: The peer's pipeline stage (0 without pipeline parallelism).
    #: The peer's regions mapped at connect (same-host peers whose regions lie in
    #: :class:`SharedMemory`): their bytes move with memcpy, the others' with cross-memory attach.
    mapped_regions: int = 0
    bytes_mapped: int = 0  #: Bytes copied through those mappings.
    lease_keeps_sent: int = 0  #: Request ids this side asked the peer to keep leased.
    lease_keeps_received: int = 0  #: Request ids the peer asked this side to keep leased.


@dataclasses.dataclass(frozen=True)
class TransferInfo:
    """A transfer's progress (``pdkv_transfer_info_t``)."""

    state: Union[TransferState, int]  #: In flight, done or failed.
    status: Union[Status, int]  #: OK, or why it failed.
    bytes_total: int  #: Bytes of the plan.
    bytes_done: int  #: Bytes moved.
    operations_total: int  #: Operations of the plan.
    operations_done: int  #: Operations completed.
    reads_failed: int  #: Plan reads that did not complete.
    elapsed: float  #: Seconds from post to the final state (or now).


@dataclasses.dataclass(frozen=True)
class FailedRead:
    """One plan read that did not complete (``pdkv_failed_read_t``)."""

    p_tp_rank: int  #: The P rank whose read list holds it.
    read_index: int  #: Index in ``plan.rank_reads(p_tp_rank)``.
    status: Union[Status, int]  #: Why.


@dataclasses.dataclass(frozen=True)
class Notification:
    """One notification (``pdkv_notification_t``), copied out of the library."""

    kind: Union[NotificationKind, int]  #: What happened.
    status: Union[Status, int]  #: OK, the failure a peer reported, or why a peer was lost.
    request_id: str  #: The request ("" for peer notifications).
    engine_id: str  #: The remote engine ("" for lease notifications).
    tp_rank: int  #: The remote rank.
    count: int  #: Successful notifications received for the request so far.
    expected: int  #: The lease's expected count (0: no lease).
    bytes: int  #: Bytes the sender moved for this request.
    pp_rank: int = 0  #: The remote rank's pipeline stage.


def _free_agent(ptr: Any, pins: Dict[Tuple[int, int], Any]) -> None:
    """Finalizer of an agent: frees it, then releases the registered buffers (nothing of the
    agent touches them any more)."""
    _ffi.function("pdkv_agent_free")(ptr)
    pins.clear()


def _free_memory(ptr: Any) -> None:
    """Finalizer of a registration: deregisters (a registration still in use is released by
    the library when its last operation ends) and frees the handle."""
    _ffi.function("pdkv_memory_deregister")(ptr, None)
    _ffi.function("pdkv_memory_free")(ptr)


class Agent(Handle):
    """One engine rank's executor (``pdkv_agent_t``): UCX context and worker, control
    listener, peers. ``close()`` shuts it down (transfers in flight fail with
    :class:`pdkv.ShutdownError`, peers are told goodbye); handles taken from it stay usable and
    report that state. Thread-safe."""

    _free_name = "pdkv_agent_free"

    def __init__(
        self,
        metadata: EngineMetadata,
        *,
        listen_address: Optional[str] = None,
        transport: Union[Transport, int, str, None] = None,
        progress_mode: Union[ProgressMode, int, str, None] = None,
        default_timeout: Optional[float] = None,
        preshared_key: Optional[bytes] = None,
        heartbeat_interval: Optional[float] = None,
        heartbeat_timeout: Optional[float] = None,
        max_outstanding: Optional[int] = None,
        copy_threads: Optional[int] = None,
        seal_data: Optional[bool] = None,
        min_peer_protocol_minor: Optional[int] = None,
    ) -> None:
        """Creates the agent of the rank ``metadata`` describes (copied); its control listener
        is bound before this returns. Options left None take the library's defaults
        (listen "127.0.0.1:0", AUTO, THREAD, 30 s, no key, heartbeats 0.5 s / 5 s, 64, copy
        threads 2 from 4 hardware threads up, else 1). Setting either heartbeat option sets both
        (the other at its default); ``heartbeat_timeout`` is the silence after which a peer is
        lost, on its control channel or on a TCP data connection with work pending (a
        CALLER-progress agent must call ``progress`` at least that often while a transfer
        moves). ``copy_threads`` (1-16) is how many threads copy each shm
        batch (``pdkv_agent_options_t.copy_threads``). With a key the TCP data connection is
        sealed; ``seal_data=False`` sends it in clear (trusted fabrics only), and both agents of
        a pair must agree (``pdkv_agent_options_t.seal_data``). ``min_peer_protocol_minor``
        (2.7) refuses peers running an older control protocol minor at connect
        (:class:`pdkv.IncompatibleError`); 5 guarantees every transfer asks the other side about
        its lease."""
        bits = _ffi.FIELD_BITS
        o = _ffi.AgentOptionsC()
        o.struct_size = ctypes.sizeof(o)
        o.metadata = handle_arg("metadata", metadata, EngineMetadata)
        mask = 0
        if listen_address is not None:
            o.listen_address = encode("listen_address", listen_address)
            mask |= bits["PDKV_AGENT_FIELD_LISTEN_ADDRESS"]
        if transport is not None:
            o.transport = _enum_or_int("transport", Transport, transport)
            mask |= bits["PDKV_AGENT_FIELD_TRANSPORT"]
        if progress_mode is not None:
            o.progress_mode = _enum_or_int("progress_mode", ProgressMode, progress_mode)
            mask |= bits["PDKV_AGENT_FIELD_PROGRESS_MODE"]
        if default_timeout is not None:
            o.default_timeout_ms = _millis("default_timeout", default_timeout)
            mask |= bits["PDKV_AGENT_FIELD_DEFAULT_TIMEOUT"]
        key_buf = None
        if preshared_key is not None:
            if isinstance(preshared_key, str) or not isinstance(preshared_key, (bytes, bytearray, memoryview)):
                raise TypeError(f"preshared_key must be bytes, got {type(preshared_key).__name__}")
            raw = bytes(preshared_key)
            if raw:
                key_buf = (ctypes.c_uint8 * len(raw)).from_buffer_copy(raw)
                o.preshared_key = ctypes.cast(key_buf, POINTER(ctypes.c_uint8))
            o.preshared_key_len = len(raw)
            mask |= bits["PDKV_AGENT_FIELD_PRESHARED_KEY"]
        if heartbeat_interval is not None or heartbeat_timeout is not None:
            iv = 0.5 if heartbeat_interval is None else heartbeat_interval
            to = 5.0 if heartbeat_timeout is None else heartbeat_timeout
            o.heartbeat_interval_ms = _millis("heartbeat_interval", iv, max_ms=_U32_MAX)
            o.heartbeat_timeout_ms = _millis("heartbeat_timeout", to, max_ms=_U32_MAX)
            mask |= bits["PDKV_AGENT_FIELD_HEARTBEAT"]
        if max_outstanding is not None:
            o.max_outstanding = u32("max_outstanding", max_outstanding)
            mask |= bits["PDKV_AGENT_FIELD_MAX_OUTSTANDING"]
        if copy_threads is not None:
            o.copy_threads = u32("copy_threads", copy_threads)
            mask |= bits["PDKV_AGENT_FIELD_COPY_THREADS"]
        if seal_data is not None:
            if not isinstance(seal_data, bool):
                raise TypeError(f"seal_data must be a bool, got {type(seal_data).__name__}")
            o.seal_data = 1 if seal_data else 0
            mask |= bits["PDKV_AGENT_FIELD_SEAL_DATA"]
        if min_peer_protocol_minor is not None:
            if isinstance(min_peer_protocol_minor, bool) or not isinstance(min_peer_protocol_minor, int):
                raise TypeError(f"min_peer_protocol_minor must be an int, got {type(min_peer_protocol_minor).__name__}")
            if not 0 <= min_peer_protocol_minor <= 0xFFFF:
                raise InvalidArgumentError(
                    Status.INVALID_ARGUMENT, f"min_peer_protocol_minor must be 0..65535, got {min_peer_protocol_minor}"
                )
            o.min_peer_protocol_minor = min_peer_protocol_minor
            mask |= bits["PDKV_AGENT_FIELD_MIN_PEER_PROTOCOL_MINOR"]
        o.field_mask = mask
        out = POINTER(_ffi.AgentT)()
        wake = _Wake()
        try:
            call("pdkv_agent_new", byref(o), byref(out))
        except BaseException:
            wake.close()
            raise
        finally:
            if key_buf is not None:  # the library keeps its own copy: zero this one now
                ctypes.memset(key_buf, 0, ctypes.sizeof(key_buf))
        del key_buf
        # The registered buffers, by (address, size): a buffer registered again (after its
        # registration was closed) keeps one entry; a list entry per registration grew with
        # every register/close cycle of an engine that registers per request.
        self._pins: Dict[Tuple[int, int], Any] = {}
        self._pending: Deque[Notification] = collections.deque()
        self._pending_lock = threading.Lock()
        # Waiters of wait_notification: the one that sleeps on the event fd (_leading) wakes the
        # others through this condition when notifications come into _pending.
        self._pending_cond = threading.Condition(self._pending_lock)
        # _leading: a wait sleeps on the event fd now (set for the sleep only).
        self._leading = False
        # Bumped (under _pending_lock) whenever a take adds to _pending: a wait whose predicate
        # ran without the lock looks again, instead of sleeping, when it moved meanwhile.
        self._pending_takes = 0
        # close() signals _wake (once: _wake_signalled) so that the waiter sleeping in poll() on
        # the event fd and on it wakes at once; the descriptor is closed when the last of the
        # wait_notification calls counted in _notify_waiters leaves after that, or when the
        # agent is collected (_wake_finalizer). All three guarded by _pending_lock.
        self._wake = wake
        self._wake_signalled = False
        self._notify_waiters = 0
        self._wake_finalizer = weakref.finalize(self, wake.close)
        self._adopt(out)
        self._finalizer.detach()
        self._finalizer = weakref.finalize(self, _free_agent, out, self._pins)

    @outside_operation  # not an operation: Handle.close waits for this agent's operations
    def close(self) -> None:
        """Shuts the agent down and frees it (see :class:`Agent`). Idempotent; waits for the
        calls in flight on other threads, and ends their :meth:`wait_notification` at once
        (:class:`pdkv.ClosedError`)."""
        cond = getattr(self, "_pending_cond", None)
        if cond is None:  # construction failed
            Handle.close(self)
            return
        with cond:
            signal = not self._wake_signalled
            self._wake_signalled = True
        if signal:  # open: only a close that finds it signalled, or the finalizer, closes it
            self._wake.signal()
        Handle.close(self)
        with cond:
            idle = self._notify_waiters == 0
        if idle:  # else the last waiter to leave closes it
            self._wake_finalizer()

    def info(self) -> AgentInfo:
        """The agent's scalars."""
        c = _ffi.AgentInfoC()
        c.struct_size = ctypes.sizeof(c)
        call("pdkv_agent_get_info", self._p(), byref(c))
        return AgentInfo(
            engine_id=decode(c.engine_id),
            tp_rank=c.tp_rank,
            tp_size=c.tp_size,
            listen_address=decode(c.listen_address),
            port=c.port,
            transport=to_enum(Transport, c.transport),
            progress_mode=to_enum(ProgressMode, c.progress_mode),
            num_peers=c.num_peers,
            transfers_in_flight=c.transfers_in_flight,
            copy_threads=c.copy_threads,
        )

    @property
    def address(self) -> str:
        """The "host:port" peers connect to."""
        return self.info().listen_address

    def progress(self) -> int:
        """Drives progress once without blocking; returns the completions handled. Needed with
        ``ProgressMode.CALLER``, harmless otherwise."""
        events = ctypes.c_uint32()
        call("pdkv_agent_progress", self._p(), byref(events))
        return events.value

    def event_fd(self) -> int:
        """A descriptor readable when :meth:`progress` or :meth:`poll_notifications` has work
        (level-triggered; owned by the agent: never close it)."""
        fd = ctypes.c_int(-1)
        call("pdkv_agent_event_fd", self._p(), byref(fd))
        return fd.value

    def register_memory(self, region: int, buffer: Any) -> "Memory":
        """Registers ``buffer`` (any writable, C-contiguous buffer: bytearray, mmap, array,
        numpy...) as the memory of ``region``: its address must be the region's advertised base
        (see :func:`buffer_address`) and its size the region's. The buffer is held (it cannot be
        resized or closed) until the agent is closed, since the agent or a peer may touch it
        until then."""
        arr = _writable_bytes("buffer", buffer)
        m = self._register(u32("region", region), ctypes.addressof(arr), ctypes.sizeof(arr), MemoryType.HOST, 0)
        m._buffer = memoryview(arr).cast("B")
        self._pins[(ctypes.addressof(arr), ctypes.sizeof(arr))] = arr
        return m

    def register_address(
        self,
        region: int,
        address: int,
        length: int,
        memory_type: Union[MemoryType, int, str] = MemoryType.HOST,
        device: int = 0,
    ) -> "Memory":
        """Registers memory by address (memory another allocator owns; the caller keeps it valid
        for reads and writes by peers until the agent is closed).

        GPU memory (e.g. a torch tensor's ``data_ptr()``): ``memory_type=MemoryType.CUDA`` and
        ``device`` its ordinal; every byte must be device memory of that device, and its bytes
        travel staged through host memory over the tcp data connection (since 2.5; see
        ``pdkv_agent_register_memory``)."""
        return self._register(
            u32("region", region),
            u64("address", address),
            u64("length", length),
            _enum_or_int("memory_type", MemoryType, memory_type),
            i32("device", device),
        )

    def _register(self, region: int, address: int, length: int, memory_type: int, device: int) -> "Memory":
        bits = _ffi.FIELD_BITS
        d = _ffi.MemoryDescC()
        d.struct_size = ctypes.sizeof(d)
        d.field_mask = bits["PDKV_MEMORY_FIELD_MEMORY_TYPE"] | bits["PDKV_MEMORY_FIELD_DEVICE"]
        d.region, d.address, d.length, d.memory_type, d.device = region, address, length, memory_type, device
        out = POINTER(_ffi.MemoryT)()
        call("pdkv_agent_register_memory", self._p(), byref(d), byref(out))
        return Memory._wrap(out)

    def connect(self, address: str, timeout: Optional[float] = None) -> "Peer":
        """Connects to the agent at ``address`` ("host:port") and runs the handshake, blocking
        (without the GIL) until done or ``timeout`` seconds (None: the agent's default).
        Raises :class:`pdkv.TimedOutError`, :class:`pdkv.PeerLostError` (refused or closed),
        :class:`pdkv.AuthError`, :class:`pdkv.ProtocolError`, :class:`pdkv.IncompatibleError`..."""
        c = _ffi.ConnectOptionsC()
        c.struct_size = ctypes.sizeof(c)
        c.address = encode("address", address)
        if timeout is not None:
            c.timeout_ms = _millis("timeout", timeout)
            c.field_mask = _ffi.FIELD_BITS["PDKV_CONNECT_FIELD_TIMEOUT"]
        out = POINTER(_ffi.PeerT)()
        call("pdkv_agent_connect", self._p(), byref(c), byref(out))
        return Peer._wrap(out)

    def find_peer(self, engine_id: str, tp_rank: int = 0, pp_rank: Optional[int] = None) -> "Peer":
        """The connected peer (engine_id, tp_rank), whichever side connected
        (:class:`pdkv.NotFoundError` when none). With ``pp_rank`` the peer of that pipeline
        stage; without it, an engine connected as several stages at ``tp_rank`` is refused
        (:class:`pdkv.InvalidArgumentError` naming the stages)."""
        out = POINTER(_ffi.PeerT)()
        if pp_rank is None:
            call("pdkv_agent_find_peer", self._p(), encode("engine_id", engine_id), u32("tp_rank", tp_rank), byref(out))
        else:
            call("pdkv_agent_find_stage_peer", self._p(), encode("engine_id", engine_id), u32("pp_rank", pp_rank),
                 u32("tp_rank", tp_rank), byref(out))
        return Peer._wrap(out)

    def post(
        self,
        op: Union[TransferOp, int, str],
        plan: TransferPlan,
        peer_engine_id: str,
        request_id: str,
        *,
        timeout: Optional[float] = None,
        notify: Optional[bool] = None,
        confirm_lease: Optional[bool] = None,
    ) -> "Transfer":
        """Posts a transfer of ``plan`` and returns at once: READ on the D rank the plan was
        compiled for (pulls from the P engine ``peer_engine_id``), WRITE on a P rank (pushes its
        reads into the D engine ``peer_engine_id``). ``timeout`` in seconds (None: the agent's
        default); ``notify`` None: the library's default (notify the plan's peers). Every range
        is checked before any byte moves (:class:`pdkv.OutOfBoundsError` naming the read). The
        other side first confirms its lease of ``request_id`` is open (2.7): a READ counts its
        bytes, a WRITE sends them, only then, and one of an ended lease fails with
        :class:`pdkv.TimedOutError` or :class:`pdkv.IncompatibleError`; ``confirm_lease=False``
        skips that (one control round trip sooner)."""
        bits = _ffi.FIELD_BITS
        p = _ffi.TransferParamsC()
        p.struct_size = ctypes.sizeof(p)
        mask = 0
        p.op = _enum_or_int("op", TransferOp, op)
        p.plan = handle_arg("plan", plan, TransferPlan)
        p.peer_engine_id = encode("peer_engine_id", peer_engine_id)
        p.request_id = encode("request_id", request_id)
        if timeout is not None:
            p.timeout_ms = _millis("timeout", timeout)
            mask |= bits["PDKV_TRANSFER_FIELD_TIMEOUT"]
        if notify is not None:
            p.notify = 1 if notify else 0
            mask |= bits["PDKV_TRANSFER_FIELD_NOTIFY"]
        if confirm_lease is not None:
            p.confirm_lease = 1 if confirm_lease else 0
            mask |= bits["PDKV_TRANSFER_FIELD_CONFIRM_LEASE"]
        p.field_mask = mask
        out = POINTER(_ffi.TransferT)()
        call("pdkv_agent_post", self._p(), byref(p), byref(out))
        return Transfer._wrap(out)

    def read(self, plan: TransferPlan, peer_engine_id: str, request_id: str, **kwargs: Any) -> "Transfer":
        """:meth:`post` of a READ (on the D rank)."""
        return self.post(TransferOp.READ, plan, peer_engine_id, request_id, **kwargs)

    def write(self, plan: TransferPlan, peer_engine_id: str, request_id: str, **kwargs: Any) -> "Transfer":
        """:meth:`post` of a WRITE (on a P rank)."""
        return self.post(TransferOp.WRITE, plan, peer_engine_id, request_id, **kwargs)

    def lease(self, request_id: str, expected: int, ttl: float) -> None:
        """Leases a request's blocks on this rank: after ``expected`` successful READ_DONE /
        WRITE_DONE notifications for ``request_id`` from distinct ranks of one remote engine
        (ranks of another engine notifying the same id never add up with them) a
        REQUEST_COMPLETE notification follows, or LEASE_EXPIRED once ``ttl`` seconds pass
        first. A reader's READ of the request keeps the lease open while it reads (2.7)."""
        call(
            "pdkv_agent_lease",
            self._p(),
            encode("request_id", request_id),
            u32("expected", expected),
            _millis("ttl", ttl),
        )

    def keep_leases(self, peer_engine_id: str, request_ids: Iterable[str]) -> None:
        """Asks every connected rank of ``peer_engine_id`` to keep its leases of ``request_ids``
        open (``pdkv_agent_keep_leases``): each such rank moves the deadline of each of those
        requests it leases to at least now + that lease's own ttl. Call it on a reader (D) for
        requests it will read later, more often than the other side's ttl, as vLLM's ``HB:``
        notifications do. Returns once the frames are queued. Raises NotFoundError (no connected
        rank of that engine), IncompatibleError (a rank runs control protocol before 3.4),
        InvalidArgumentError (an empty, long or NUL-holding id), TypeError (an id not a str)."""
        if isinstance(request_ids, (str, bytes)):  # a str iterates as its characters
            raise TypeError("request_ids must be an iterable of str, not a single " + type(request_ids).__name__)
        ids = [encode(f"request_ids[{i}]", r) for i, r in enumerate(request_ids)]
        array = (ctypes.c_char_p * max(1, len(ids)))(*ids)
        call("pdkv_agent_keep_leases", self._p(), encode("peer_engine_id", peer_engine_id), array, len(ids))

    def poll_notifications(self) -> List[Notification]:
        """Takes every pending notification, oldest first (including those
        :meth:`wait_notification` took but did not return)."""
        with self._pending_lock:
            self._take_notifications()
            out = list(self._pending)
            self._pending.clear()
        return out

    def _take_notifications(self) -> None:
        """Appends the library's pending notifications to ``_pending`` (lock held)."""
        lst = POINTER(_ffi.NotificationListT)()
        call("pdkv_agent_poll_notifications", self._p(), byref(lst))
        try:
            ptr = POINTER(_ffi.NotificationC)()
            n = ctypes.c_size_t()
            call("pdkv_notification_list_items", lst, byref(ptr), byref(n))
            if n.value and not ptr:
                raise PdkvError(Status.INTERNAL, "library returned NULL for a non-empty array")
            for i in range(n.value):
                c = ptr[i]
                self._pending.append(
                    Notification(
                        kind=to_enum(NotificationKind, c.kind),
                        status=to_enum(Status, c.status),
                        request_id=decode(c.request_id),
                        engine_id=decode(c.engine_id),
                        tp_rank=c.tp_rank,
                        count=c.count,
                        expected=c.expected,
                        bytes=c.bytes,
                        pp_rank=c.pp_rank,
                    )
                )
        finally:
            _ffi.function("pdkv_notification_list_free")(lst)

    @outside_operation
    def wait_notification(
        self, predicate: Optional[Callable[[Notification], bool]] = None, timeout: Optional[float] = None
    ) -> Optional[Notification]:
        """Waits until a notification satisfies ``predicate`` (None: any) and returns it, or
        None after ``timeout`` seconds (None: no limit). The others stay pending, in order. It
        drives :meth:`progress` as it waits, so it also serves caller-mode agents.

        It sleeps on the agent's :meth:`event_fd` (``select.poll``, without the GIL), so it wakes
        when a notification arrives or progress has work, not on a timer. Several threads may
        wait at once, with different predicates: one of them sleeps on the descriptor and the
        others on a condition, woken whenever notifications are taken into the shared queue (by
        any waiter, but only while none sleeps on the descriptor). The sleep lasts until the timeout, without waking in between when nothing
        happens: ``close()`` from another thread wakes it through a descriptor of the binding's
        own, polled with the event fd, and the wait raises :class:`pdkv.ClosedError`; Ctrl-C
        interrupts it (KeyboardInterrupt, on the main thread).

        ``predicate`` runs without any lock of the agent's held, on a copy of the queue, so it
        may call this agent's :meth:`poll_notifications`, another :meth:`wait_notification` or
        :meth:`close` (this wait then raises :class:`pdkv.ClosedError`). A notification it
        matches is returned only if it is still pending by then (a poll or another wait may
        have taken it meanwhile: the wait looks again), so each is delivered to exactly one
        caller. It may be called more than once on the same notification."""
        end = None if timeout is None else time.monotonic() + _millis("timeout", timeout) / 1000
        cond = self._pending_cond
        fd = self.event_fd()
        with cond:
            if self._wake_signalled:  # close() began: its descriptor may be gone
                raise ClosedError("pdkv.Agent")
            self._notify_waiters += 1  # _wake stays open until this wait leaves
        # This wait slept on the event fd and has not seen another waiter take that over since:
        # followers may be waiting for it, so it wakes them as it leaves.
        led = False
        ready = True  # drive progress before the next look (first look, or the fd was readable)
        try:
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            poller.register(self._wake.read_fd, select.POLLIN)
            while True:
                if ready:
                    self.progress()
                with cond:
                    before = len(self._pending)
                    # Not while another wait sleeps on the event fd: a take here drains it under
                    # that wait, which then slept on with what only it wanted in the queue. It
                    # takes them itself when it wakes (and wakes this one).
                    if not self._leading:
                        self._take_notifications()
                    if len(self._pending) != before:
                        self._pending_takes += 1
                        cond.notify_all()  # other waiters' predicates may match what came
                    takes = self._pending_takes
                    candidates = list(self._pending)
                # The predicate runs without the lock: with it held, a predicate calling
                # poll_notifications, another wait or close() on this agent deadlocked.
                match = next((n for n in candidates if predicate is None or predicate(n)), None)
                with cond:
                    if match is not None:
                        for i, n in enumerate(self._pending):
                            if n is match:  # still pending: this wait is the one that takes it
                                del self._pending[i]
                                return n
                    if self._wake_signalled:  # close() began (the predicate may have called it)
                        raise ClosedError("pdkv.Agent")
                    if match is not None or self._pending_takes != takes:
                        ready = False  # the queue moved while the predicate ran: look again
                        continue
                    now = time.monotonic()
                    if end is not None and now >= end:
                        return None
                    left = None if end is None else end - now
                    if self._leading:
                        led = False  # the one on the fd now wakes the followers as it leaves
                        ready = False
                        cond.wait(left)
                        continue
                    self._leading = led = True
                try:
                    ready = _wait_readable(poller, left)
                finally:
                    # Given up while this wait looks and runs the predicate (a predicate's own
                    # wait takes it then); taken again before the next sleep unless another has.
                    with cond:
                        self._leading = False
                if self._wake_signalled:  # close() began (the event fd may be closed or reused)
                    raise ClosedError("pdkv.Agent")
        finally:
            with cond:
                if led:
                    cond.notify_all()  # a follower takes over the event fd
                self._notify_waiters -= 1
                last = self._notify_waiters == 0 and self._wake_signalled
            if last:  # close() ran meanwhile and left _wake open for this wait
                self._wake_finalizer()


def _wait_readable(poller: Any, timeout: Optional[float]) -> bool:
    """Sleeps until a descriptor of ``poller`` (a ``select.poll``) is ready or ``timeout``
    seconds pass (None: no limit), without the GIL; signal handlers run, and their exceptions
    propagate (PEP 475). True when ready (a closed descriptor, POLLNVAL, counts as ready)."""
    return bool(poller.poll(None if timeout is None else math.ceil(max(0.0, timeout) * 1000)))


class _Wake:
    """A pipe an :class:`Agent`'s ``close()`` makes readable, once and for good, to wake a
    :meth:`Agent.wait_notification` sleeping in poll(); both ends non-blocking and not inherited
    (PEP 446)."""

    __slots__ = ("read_fd", "write_fd")

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()
        try:
            os.set_blocking(self.read_fd, False)
            os.set_blocking(self.write_fd, False)
        except BaseException:
            self.close()
            raise

    def signal(self) -> None:
        """Makes the read end readable (it is never drained)."""
        os.write(self.write_fd, b"\x01")

    def close(self) -> None:
        """Closes both ends (called once, by the agent's wake finalizer)."""
        os.close(self.read_fd)
        os.close(self.write_fd)


def _enum_or_int(name: str, cls: Any, value: Any) -> int:
    """An enum member, its name, or any int32 (values the library does not know are passed on,
    so that it reports them with their status)."""
    if isinstance(value, (cls, str)):
        return int(enum_value(name, cls, value))
    return i32(name, value)


class Memory(Handle):
    """A registration of one region's memory (``pdkv_memory_t``). ``close()`` deregisters and
    frees the handle (a registration still in use is released when its last operation ends)."""

    _free_name = "pdkv_memory_free"
    _buffer: Optional[memoryview] = None

    def __init__(self) -> None:
        raise TypeError("use Agent.register_memory or Agent.register_address")

    @classmethod
    def _wrap(cls, ptr: Any) -> "Memory":
        self = object.__new__(cls)
        self._adopt(ptr)
        self._finalizer.detach()
        self._finalizer = weakref.finalize(self, _free_memory, ptr)
        return self

    @property
    def buffer(self) -> Optional[memoryview]:
        """The registered memory as a byte memoryview (None for :meth:`Agent.register_address`).
        While transfers that write it are in flight, reads may observe partial data."""
        return self._buffer

    def deregister(self) -> None:
        """Deregisters now (:class:`pdkv.BusyError` while a transfer uses the region; the
        registration then stays). Calling it twice is fine."""
        call("pdkv_memory_deregister", self._p())


class Peer(Handle):
    """A connected (or formerly connected) remote engine rank (``pdkv_peer_t``).
    ``close()`` frees the handle and keeps the connection; :meth:`disconnect` closes it."""

    _free_name = "pdkv_peer_free"

    def __init__(self) -> None:
        raise TypeError("use Agent.connect or Agent.find_peer")

    @classmethod
    def _wrap(cls, ptr: Any) -> "Peer":
        self = object.__new__(cls)
        self._adopt(ptr)
        return self

    def info(self) -> PeerInfo:
        """Identity, state and counters."""
        c = _ffi.PeerInfoC()
        c.struct_size = ctypes.sizeof(c)
        call("pdkv_peer_get_info", self._p(), byref(c))
        return PeerInfo(
            engine_id=decode(c.engine_id),
            tp_rank=c.tp_rank,
            address=decode(c.address),
            connected=bool(c.connected),
            inbound=bool(c.inbound),
            transport=to_enum(Transport, c.transport),
            lost_status=to_enum(Status, c.lost_status),
            bytes_read=c.bytes_read,
            bytes_written=c.bytes_written,
            transfers_done=c.transfers_done,
            transfers_failed=c.transfers_failed,
            operations_failed=c.operations_failed,
            notifications_sent=c.notifications_sent,
            notifications_received=c.notifications_received,
            heartbeat_rtt=c.heartbeat_rtt_us / 1e6,
            pp_rank=c.pp_rank,
            mapped_regions=c.mapped_regions,
            bytes_mapped=c.bytes_mapped,
            lease_keeps_sent=c.lease_keeps_sent,
            lease_keeps_received=c.lease_keeps_received,
        )

    def metadata(self) -> EngineMetadata:
        """A copy of the metadata the peer advertised."""
        out = POINTER(_ffi.EngineMetadataT)()
        call("pdkv_peer_metadata", self._p(), byref(out))
        return EngineMetadata._wrap(out)

    def disconnect(self) -> None:
        """Closes the connection; transfers in flight with this peer fail with
        :class:`pdkv.PeerLostError`. Fine on a lost peer."""
        call("pdkv_peer_disconnect", self._p())


class Transfer(Handle):
    """One posted transfer (``pdkv_transfer_t``). ``close()`` (or leaving its ``with`` block)
    cancels a transfer still in flight and frees it; :meth:`wait` first to let it finish."""

    _free_name = "pdkv_transfer_free"

    def __init__(self) -> None:
        raise TypeError("use Agent.post, Agent.read or Agent.write")

    @classmethod
    def _wrap(cls, ptr: Any) -> "Transfer":
        self = object.__new__(cls)
        self._adopt(ptr)
        return self

    def info(self) -> TransferInfo:
        """Progress (a poll: never blocks)."""
        c = _ffi.TransferInfoC()
        c.struct_size = ctypes.sizeof(c)
        call("pdkv_transfer_get_info", self._p(), byref(c))
        return TransferInfo(
            state=to_enum(TransferState, c.state),
            status=to_enum(Status, c.status),
            bytes_total=c.bytes_total,
            bytes_done=c.bytes_done,
            operations_total=c.operations_total,
            operations_done=c.operations_done,
            reads_failed=c.reads_failed,
            elapsed=c.elapsed_us / 1e6,
        )

    @outside_operation
    def wait(self, timeout: Optional[float] = None) -> bool:
        """Waits for the final state, without the GIL: True when done, False when ``timeout``
        seconds passed first (None: until the end, which the transfer's deadline bounds; 0: a
        poll). Raises the failure (:class:`pdkv.TimedOutError`, :class:`pdkv.CancelledError`,
        :class:`pdkv.PeerLostError`, :class:`pdkv.ShutdownError`..., naming the reads and
        peers) when the transfer failed, and :class:`pdkv.ClosedError` when another thread
        closed it."""
        if timeout is None:
            end = None
        elif timeout == 0 and not isinstance(timeout, bool):
            end = time.monotonic()
        else:
            end = time.monotonic() + _millis("timeout", timeout) / 1000
        while True:
            left = _WAIT_SLICE if end is None else max(0.0, min(_WAIT_SLICE, end - time.monotonic()))
            if self._wait_slice(math.ceil(left * 1000)):
                return True
            if end is not None and time.monotonic() >= end:
                return False

    def _wait_slice(self, ms: int) -> bool:
        """One C wait of at most ``ms`` ms: True when finished (raises its failure)."""
        finished = ctypes.c_uint8()
        call("pdkv_transfer_wait", self._p(), ms, byref(finished))
        return bool(finished.value)

    def cancel(self) -> None:
        """Asks the transfer to stop: it fails with :class:`pdkv.CancelledError` once its
        operations in flight complete (a WRITE flushes first); no effect when finished."""
        call("pdkv_transfer_cancel", self._p())

    def done_fd(self) -> int:
        """A descriptor that becomes readable once the transfer is final and stays readable
        (``pdkv_transfer_done_fd``, since 2.5), for ``selectors`` or asyncio's ``add_reader``.
        Poll it only: never read or close it; it is valid until the transfer is closed."""
        fd = ctypes.c_int(-1)
        call("pdkv_transfer_done_fd", self._p(), byref(fd))
        return fd.value

    async def wait_async(self) -> None:
        """Waits for the final state without blocking the running asyncio loop (the loop watches
        :meth:`done_fd`); returns when done and raises the failure as :meth:`wait` does. In
        CALLER progress mode something must still call :meth:`Agent.progress` when the agent's
        :meth:`Agent.event_fd` is readable, or the transfer never moves."""
        import asyncio

        fd = self.done_fd()
        loop = asyncio.get_running_loop()
        ready: "asyncio.Future[None]" = loop.create_future()

        def on_ready() -> None:
            if not ready.done():
                ready.set_result(None)

        loop.add_reader(fd, on_ready)
        try:
            await ready
        finally:
            loop.remove_reader(fd)
        self._wait_slice(0)  # final now: True, or raises its failure

    def failed_reads(self) -> Tuple[FailedRead, ...]:
        """The reads that did not complete, by P rank then index (empty while in flight or
        when done)."""
        ptr = POINTER(_ffi.FailedReadC)()
        n = ctypes.c_size_t()
        call("pdkv_transfer_failed_reads", self._p(), byref(ptr), byref(n))
        return tuple(
            FailedRead(p_tp_rank=ptr[i].p_tp_rank, read_index=ptr[i].read_index, status=to_enum(Status, ptr[i].status))
            for i in range(n.value)
        )

    @outside_operation
    def close(self) -> None:
        """Cancels the transfer if it is still in flight, then frees it (the library releases
        its resources when its last operation ends). Idempotent; waiters on other threads
        return within a short slice."""
        try:
            self.cancel()
        except PdkvError:
            pass  # already closed (ClosedError): nothing to cancel
        Handle.close(self)


class SharedMemory:
    """Host memory that same-host peer agents can map (``pdkv_shared_memory_t``): build the
    engine's regions inside :attr:`buffer` and register them with :meth:`Agent.register_memory`;
    a same-host SHM peer then copies them with memcpy instead of cross-memory attach
    (:attr:`PeerInfo.mapped_regions`).

    ``buffer`` is a writable byte memoryview over the whole allocation (zero-filled). The memory
    is freed once this object is closed (or collected) *and* no view of it is left: every view
    (and every registration made from one, which holds its buffer) keeps it mapped, so no view can
    outlive it. Thread-safe.
    """

    def __init__(self, nbytes: int) -> None:
        ptr = POINTER(_ffi.SharedMemoryT)()
        call("pdkv_shared_memory_alloc", ctypes.c_size_t(u64("nbytes", nbytes)), byref(ptr))
        address = ctypes.c_void_p()
        size = ctypes.c_size_t()
        try:
            call("pdkv_shared_memory_address", ptr, byref(address), byref(size))
        except BaseException:
            _ffi.function("pdkv_shared_memory_free")(ptr)
            raise
        array = (ctypes.c_ubyte * size.value).from_address(address.value or 0)
        # The C memory goes with the array, which every view keeps alive (memoryview.obj).
        weakref.finalize(array, _ffi.function("pdkv_shared_memory_free"), ptr)
        self._array: Optional[Any] = array
        self._view: Optional[memoryview] = memoryview(array).cast("B")
        self._nbytes = size.value

    @property
    def buffer(self) -> memoryview:
        """The memory as a writable byte memoryview (:class:`pdkv.ClosedError` once closed)."""
        if self._view is None:
            raise ClosedError("SharedMemory is closed")
        return self._view

    @property
    def nbytes(self) -> int:
        """The size asked for."""
        return self._nbytes

    def close(self) -> None:
        """Drops this object's view; the memory is freed when no other view holds it."""
        self._view = None
        self._array = None

    def __enter__(self) -> "SharedMemory":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
