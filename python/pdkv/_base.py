"""Shared machinery of the Pythonic layer: calling C with error objects, argument checks and
the handle base class. Internal."""

from __future__ import annotations

import ctypes
import enum
import functools
import operator
import threading
import weakref
from ctypes import POINTER, byref
from typing import Any, Callable, Dict, List, Optional, Tuple, Type, TypeVar, Union

from . import _ffi
from .errors import ClosedError, InvalidArgumentError, OutOfBoundsError, PdkvError, Status, error_for  # noqa: F401

E = TypeVar("E", bound=enum.IntEnum)


def call(name: str, *args: Any) -> None:
    """Calls C function ``name`` with ``args`` plus a trailing ``pdkv_error_t **``; raises the
    matching :class:`PdkvError` on failure."""
    status, exc = call_status(name, *args)
    if exc is not None:
        raise exc


# Declared C functions by name, looked up once (the library is loaded once per process).
_FUNCTIONS: Dict[str, Any] = {}
_ErrorPtr = POINTER(_ffi.ErrorT)


def call_status(name: str, *args: Any) -> Tuple[int, Optional[PdkvError]]:
    """Like :func:`call` but returns (status, exception or None) instead of raising."""
    fn = _FUNCTIONS.get(name)
    if fn is None:
        fn = _FUNCTIONS[name] = _ffi.function(name)
    err = _ErrorPtr()
    status = fn(*args, byref(err))
    if status == 0:  # PDKV_OK
        if err:
            _ffi.lib().pdkv_error_free(err)
        return status, None
    return status, error_from(name, status, err)


def error_from(name: str, status: int, err: Any) -> PdkvError:
    """The :class:`PdkvError` for a failed call of C function ``name`` that returned ``status``
    and set ``err`` (a ``pdkv_error_t *``, may be NULL), which this frees."""
    lib = _ffi.lib()
    domain, code = ctypes.c_int32(0), ctypes.c_int64(0)
    try:
        if err:
            message = lib.pdkv_error_message(err).decode("utf-8", "replace")
            err_status = lib.pdkv_error_status(err)
            lib.pdkv_error_cause(err, byref(domain), byref(code))
        else:
            message, err_status = f"{name} failed without an error object", status
    finally:
        lib.pdkv_error_free(err)
    if err_status != status:
        message += f" (error object status {err_status} differs from returned status {status})"
    exc = error_for(status, message)
    if domain.value != 0:
        exc.cause = (int(domain.value), int(code.value))
    return exc


def decode(raw: Optional[bytes]) -> str:
    """A C string (bytes or NULL) as str."""
    return "" if raw is None else raw.decode("utf-8", "replace")


def encode(name: str, value: Any, *, allow_none: bool = False) -> Optional[bytes]:
    """A Python str as a NUL-terminated UTF-8 C string; rejects other types and embedded NULs."""
    if value is None and allow_none:
        return None
    if isinstance(value, os_pathlike_types()):
        value = str(value)
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__}")
    if "\0" in value:
        raise InvalidArgumentError(Status.INVALID_ARGUMENT, f"{name} {value!r} contains a NUL byte")
    return value.encode("utf-8")


def os_pathlike_types() -> Tuple[type, ...]:
    """Path-like types accepted wherever a file name is (pathlib.PurePath)."""
    import pathlib

    return (pathlib.PurePath,)


def _int(name: str, value: Any) -> int:
    """``value`` as a Python int; TypeError for non-integers, bools and None."""
    if isinstance(value, bool) or value is None:
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, got {type(value).__name__}") from None


def integer(name: str, value: Any, lo: int, hi: int) -> int:
    """``value`` as an int in [lo, hi]; TypeError for non-integers (and bools),
    :class:`InvalidArgumentError` (status INVALID_ARGUMENT, also a ValueError) naming ``name``
    and the value when out of range (ctypes would silently truncate)."""
    if type(value) is int and lo <= value <= hi:  # the common case, without a call (hot path)
        return value
    v = _int(name, value)
    if v < lo or v > hi:
        raise InvalidArgumentError(Status.INVALID_ARGUMENT, f"{name} = {v} is out of range [{lo}, {hi}]")
    return v


def u32(name: str, value: Any) -> int:
    """A uint32_t argument."""
    return integer(name, value, 0, 0xFFFFFFFF)


def i32(name: str, value: Any) -> int:
    """An int32_t argument."""
    return integer(name, value, -(1 << 31), (1 << 31) - 1)


def u64(name: str, value: Any) -> int:
    """A uint64_t argument."""
    return integer(name, value, 0, (1 << 64) - 1)


def size(name: str, value: Any) -> int:
    """A size_t argument."""
    return integer(name, value, 0, (1 << (8 * ctypes.sizeof(ctypes.c_size_t))) - 1)


def index_arg(name: str, value: Any) -> int:
    """A size_t index argument: TypeError for non-integers, :class:`OutOfBoundsError` (status
    OUT_OF_BOUNDS, as the library reports an index past the end) when negative or wider than
    size_t."""
    v = _int(name, value)
    if v < 0:
        raise OutOfBoundsError(Status.OUT_OF_BOUNDS, f"{name} {v} is negative")
    if v >= 1 << (8 * ctypes.sizeof(ctypes.c_size_t)):
        raise OutOfBoundsError(Status.OUT_OF_BOUNDS, f"{name} {v} does not fit in size_t")
    return v


def flag(name: str, value: Any) -> int:
    """A 0/1 flag argument: a bool, or the int 0 or 1."""
    if isinstance(value, bool):
        return int(value)
    return integer(name, value, 0, 1)


def enum_value(name: str, cls: Type[E], value: Any) -> E:
    """``value`` (an enum member, its int value or its case-insensitive name) as a member of
    ``cls``."""
    if isinstance(value, cls):
        return value
    if isinstance(value, str):
        key = value.strip().upper()
        if key in cls.__members__:
            return cls[key]
        valid = ", ".join(m.name.lower() for m in cls)
        raise InvalidArgumentError(
            Status.INVALID_ARGUMENT, f"{name} = {value!r} is not a {cls.__name__} (valid: {valid})"
        )
    v = i32(name, value)
    try:
        return cls(v)
    except ValueError:
        raise InvalidArgumentError(Status.INVALID_ARGUMENT, f"{name} = {v} is not a {cls.__name__} value") from None


def to_enum(cls: Type[E], value: int) -> Union[E, int]:
    """A C enum value as a member of ``cls``, or the plain int when this package does not know it."""
    try:
        return cls(value)
    except ValueError:
        return value


def array_copy(ptr: Any, count: int, convert: Callable[[Any], Any]) -> Tuple[Any, ...]:
    """Copies ``count`` elements of a C array (owned by a handle) into a tuple."""
    if count == 0:
        return ()
    if not ptr:
        raise PdkvError(Status.INTERNAL, "library returned NULL for a non-empty array")
    return tuple(convert(ptr[i]) for i in range(count))


class _ThreadUses(threading.local):
    """Per-thread record of the handles in use by this thread's running operations: ``stack``
    holds, per nested operation, the handles it acquired (released when it returns); ``held``
    maps id(handle) to the handle for every handle acquired by any of them."""

    def __init__(self) -> None:
        self.stack: List[List[Any]] = []
        self.held: Dict[int, Any] = {}


_uses = _ThreadUses()

F = TypeVar("F", bound=Callable[..., Any])


def operation(fn: F) -> F:
    """Decorator: runs ``fn`` as one operation on handles. Every handle whose pointer ``fn``
    takes (``Handle._p()`` / :func:`handle_arg`) stays in use, so that a concurrent ``close()``
    waits instead of freeing it, until ``fn`` returns (after it copied out any data the handle
    owns). Nested operations share the uses of the outer ones on the same thread."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        uses = _uses
        uses.stack.append([])
        try:
            return fn(*args, **kwargs)
        finally:
            for h in uses.stack.pop():
                del uses.held[id(h)]
                h._release()

    wrapper.__pdkv_operation__ = True  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]


# Class attributes of Handle subclasses that are not wrapped as operations.
_NOT_OPERATIONS = frozenset({"__new__", "__init_subclass__", "__class_getitem__", "__del__"})


def _as_operation(attr: Any) -> Any:
    """``attr`` (a function, property, classmethod or staticmethod) with its code run as an
    :func:`operation`; anything else unchanged."""
    if isinstance(attr, property):
        fget = operation(attr.fget) if attr.fget is not None else None
        return property(fget, attr.fset, attr.fdel, attr.__doc__)
    if isinstance(attr, (classmethod, staticmethod)):
        fn = attr.__func__
        if getattr(fn, "__pdkv_operation__", False) or getattr(fn, "__pdkv_outside__", False):
            return attr
        return type(attr)(operation(fn))
    if (
        callable(attr)
        and hasattr(attr, "__code__")
        and not getattr(attr, "__pdkv_operation__", False)
        and not getattr(attr, "__pdkv_outside__", False)
    ):
        return operation(attr)
    return attr


def outside_operation(fn: F) -> F:
    """Marks a handle method that must not hold its handle for its whole run: a wait that loops
    over short operations (each checking for a close), so that ``close()`` from another thread
    never waits for the network. The method's own calls on the handle are operations."""
    fn.__pdkv_outside__ = True  # type: ignore[attr-defined]
    return fn


class Handle:
    """Base of every owned C handle: ``close()`` (idempotent), context manager, and a
    ``weakref.finalize`` safety net that frees the handle when it is garbage collected.

    Thread safety: any number of threads may call methods of one handle at once (the C queries
    are const and run concurrently; ctypes releases the GIL during them). ``close()`` may race
    them: every method (each an :func:`operation`, applied to subclass methods automatically)
    counts itself in flight on each handle it uses, under a ``threading.Condition``; ``close()``
    marks the handle closed, so later calls raise :class:`ClosedError`, and waits until the
    calls in flight have returned before it frees the C object. A call therefore either
    completes normally or raises :class:`ClosedError`; it never touches freed memory.

    Handles whose class sets ``_owned`` (engines, plan contexts and plans: the planning hot path)
    also give their C object an :class:`_Owner`: the object is freed when the last reference to
    the owner goes, not by close() itself. close() drops the handle's reference (so it frees at
    once when nothing else holds the owner), and a hot-path call that holds the owner in a
    local variable instead of counting itself in flight keeps the object alive until it returns.
    """

    _free_name: str = ""
    _owned: bool = False
    _ptr: Any

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name, attr in list(vars(cls).items()):
            if name not in _NOT_OPERATIONS:
                wrapped = _as_operation(attr)
                if wrapped is not attr:
                    setattr(cls, name, wrapped)

    def _adopt(self, ptr: Any) -> None:
        """Takes ownership of the C pointer ``ptr``."""
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._in_flight = 0
        self._waiters = 0  # threads waiting on _cond (notify only when there are some)
        self._closing = False
        self._exclusive = False  # an in-place rewrite of the C object is running (see _take)
        self._ptr = ptr
        if self._owned:
            owner = _Owner(ptr)
            weakref.finalize(owner, _free, self._free_name, ptr)
            holder = [owner]
            #: [owner] while the handle is open; emptied by close() (and when it is collected).
            self._owner_holder = holder
            self._arg = owner.arg  # the address for untyped calls made while the handle is in use
            self._finalizer = weakref.finalize(self, holder.clear)
        else:
            self._finalizer = weakref.finalize(self, _free, self._free_name, ptr)

    def _wait(self, predicate: Callable[[], bool]) -> None:
        """``_cond.wait_for(predicate)``, counted in ``_waiters``; ``_cond`` must be held."""
        self._waiters += 1
        try:
            self._cond.wait_for(predicate)
        finally:
            self._waiters -= 1

    def close(self) -> None:
        """Frees the C object now. Idempotent; later method calls raise :class:`ClosedError`.
        Calls in flight on other threads finish first (this waits for them); calls that start
        after this began raise :class:`ClosedError`. For an ``_owned`` handle, hot-path calls
        holding its owner (plan compiles holding the context) are not waited for: the C object
        is freed when the last of them returns, at once when none runs."""
        cond = getattr(self, "_cond", None)
        if cond is None:  # never adopted a pointer (construction failed)
            self._ptr = None
            return
        own = 1 if id(self) in _uses.held else 0  # this thread's own operation may hold it
        with cond:
            if self._closing:
                if not own:  # another thread is closing it: return once it is freed
                    self._wait(lambda: self._ptr is None)
                return
            self._closing = True
            self._wait(lambda: self._in_flight <= own)
            self._finalizer()
            self._ptr = None
            cond.notify_all()

    @property
    def closed(self) -> bool:
        """True once :meth:`close` began (or construction failed)."""
        return getattr(self, "_closing", True) or not getattr(self, "_ptr", None)

    def _p(self) -> Any:
        """The live C pointer, kept in use until the running :func:`operation` returns; raises
        :class:`ClosedError` once close() began. Must be called inside an operation."""
        uses = _uses
        if not uses.stack:
            raise RuntimeError(f"internal error: pdkv.{type(self).__name__} used outside an operation")
        if id(self) in uses.held:  # already in use by this thread: no second count
            ptr = self._ptr
            if not ptr:
                raise ClosedError(f"pdkv.{type(self).__name__}")
            return ptr
        cond = getattr(self, "_cond", None)
        if cond is None:
            raise ClosedError(f"pdkv.{type(self).__name__}")
        with cond:
            if self._exclusive:  # wait for an in-place rewrite to finish
                self._wait(lambda: not self._exclusive)
            if self._closing or not self._ptr:
                raise ClosedError(f"pdkv.{type(self).__name__}")
            self._in_flight += 1
            ptr = self._ptr
        uses.held[id(self)] = self
        uses.stack[-1].append(self)
        return ptr

    def _take(self) -> Any:
        """The C pointer for an in-place rewrite of the C object (e.g. a plan recompiled into):
        exclusive, so calls from other threads wait until :meth:`_give_back` and close() waits
        too. None (nothing taken) when the handle is closed or closing, or in use by any call
        (this thread's included)."""
        lock = getattr(self, "_lock", None)
        if lock is None:
            return None
        with lock:
            if self._closing or not self._ptr or self._in_flight or self._exclusive:
                return None
            self._exclusive = True
            self._in_flight = 1
            return self._ptr

    def _give_back(self) -> None:
        """Ends what :meth:`_take` began."""
        with self._lock:
            self._exclusive = False
            self._in_flight = 0
            if self._waiters:
                self._cond.notify_all()

    def _release(self) -> None:
        """Ends one use taken by :meth:`_p`; wakes a waiting close() when none is left."""
        with self._lock:
            self._in_flight -= 1
            if self._in_flight <= 1 and self._waiters:
                self._cond.notify_all()

    @operation
    def __enter__(self: "H") -> "H":
        self._p()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<pdkv.{type(self).__name__} {state}>"


H = TypeVar("H", bound=Handle)


class _Owner:
    """What an ``_owned`` handle's C object lives as long as (see :class:`Handle`): ``ptr`` is
    the typed C pointer, ``arg`` the same address as a ``c_void_p`` for calls made without
    argtypes conversion. A ``weakref.finalize`` on the owner frees the object."""

    __slots__ = ("ptr", "arg", "__weakref__")

    def __init__(self, ptr: Any) -> None:
        self.ptr = ptr
        self.arg = ctypes.c_void_p(ctypes.cast(ptr, ctypes.c_void_p).value)


def _free(free_name: str, ptr: Any) -> None:
    """Finalizer: frees ``ptr`` with the C function ``free_name``."""
    getattr(_ffi.lib(), free_name)(ptr)


def handle_arg(name: str, value: Any, cls: Type[Handle]) -> Any:
    """The live C pointer of handle argument ``value``, which must be a ``cls``."""
    if not isinstance(value, cls):
        raise TypeError(f"{name} must be a pdkv.{cls.__name__}, got {type(value).__name__}")
    return value._p()


# Buffer formats that are unsigned integers of the given size on this machine (struct module
# codes, with or without a native / little-endian prefix).
_UNSIGNED_FORMATS = {
    size: {prefix + code for prefix in ("", "@", "=", "<") for code in "BHILQ" if ctypes.sizeof(
        {"B": ctypes.c_ubyte, "H": ctypes.c_ushort, "I": ctypes.c_uint, "L": ctypes.c_ulong,
         "Q": ctypes.c_ulonglong}[code]) == size}
    for size in (4, 8)
}


def _buffer_array(name: str, values: Any, ctype: Any) -> Optional[Tuple[Any, int]]:
    """Zero-copy fast path of :func:`u64_array` / :func:`u32_array`: a C array over the memory of
    a buffer-protocol object (``array('Q')``, a ``memoryview``, a numpy ``uint64`` array) whose
    items are unsigned integers of ``ctype``'s size, one-dimensional and contiguous; no element
    is looked at in Python (any unsigned value is in range by construction). A read-only buffer
    is copied once with memcpy. None when ``values`` is not such a buffer (a list, a tuple, a
    signed array, ...): the caller then converts element by element."""
    if isinstance(values, (tuple, list, str, bytes, bytearray)):
        return None
    try:
        mv = memoryview(values)
    except TypeError:
        return None
    itemsize = ctypes.sizeof(ctype)
    if mv.ndim != 1 or mv.itemsize != itemsize or mv.format not in _UNSIGNED_FORMATS[itemsize]:
        return None
    if not mv.c_contiguous:
        raise TypeError(f"{name} must be a contiguous buffer, got strides {mv.strides}")
    n = mv.shape[0] if mv.shape else 0
    if n == 0:
        return None, 0
    mv = mv.cast("B")  # ctypes accepts any contiguous byte view
    arr = (ctype * n).from_buffer_copy(mv) if mv.readonly else (ctype * n).from_buffer(mv)
    return arr, n


def u64_array(name: str, values: Any) -> Tuple[Any, int]:
    """A C uint64_t array (NULL when empty) from a sequence of ints, and its length. A buffer of
    unsigned 64-bit integers (``array('Q')``, numpy ``uint64``) is used in place, without
    per-element work (see :func:`_buffer_array`)."""
    fast = _buffer_array(name, values, ctypes.c_uint64)
    if fast is not None:
        return fast
    if isinstance(values, (str, bytes)) or values is None or not hasattr(values, "__iter__"):
        raise TypeError(f"{name} must be a sequence of ints, got {type(values).__name__}")
    items = [u64(f"{name}[{i}]", v) for i, v in enumerate(values)]
    if not items:
        return None, 0
    return (ctypes.c_uint64 * len(items))(*items), len(items)


def u32_array(name: str, values: Any) -> Tuple[Any, int]:
    """A C uint32_t array (NULL when empty) from a sequence of ints, and its length; a buffer of
    unsigned 32-bit integers is used in place (see :func:`_buffer_array`)."""
    fast = _buffer_array(name, values, ctypes.c_uint32)
    if fast is not None:
        return fast
    if isinstance(values, (str, bytes)) or values is None or not hasattr(values, "__iter__"):
        raise TypeError(f"{name} must be a sequence of ints, got {type(values).__name__}")
    items = [u32(f"{name}[{i}]", v) for i, v in enumerate(values)]
    if not items:
        return None, 0
    return (ctypes.c_uint32 * len(items))(*items), len(items)


def take_list(kind: str, item_type: Any, convert: Callable[[Any], Any], fn: str, *args: Any) -> Tuple[Any, ...]:
    """Calls ``fn(*args, pdkv_<kind>_list_t **out, err)``, the one shape of every
    variable-length result, converts the items (``pdkv_<kind>_list_items``) and frees the list."""
    list_type = getattr(_ffi, "".join(p.capitalize() for p in kind.split("_")) + "ListT")
    out = POINTER(list_type)()
    call(fn, *args, byref(out))
    try:
        ptr = POINTER(item_type)()
        n = ctypes.c_size_t()
        call(f"pdkv_{kind}_list_items", out, byref(ptr), byref(n))
        return array_copy(ptr, n.value, convert)
    finally:
        _ffi.function(f"pdkv_{kind}_list_free")(out)


def take_u64_list(fn: str, *args: Any) -> Tuple[int, ...]:
    """Calls ``fn(*args, pdkv_u64_list_t **out, err)``, copies the values and frees the list."""
    out = POINTER(_ffi.U64ListT)()
    call(fn, *args, byref(out))
    try:
        ptr = POINTER(ctypes.c_uint64)()
        n = ctypes.c_size_t()
        call("pdkv_u64_list_items", out, byref(ptr), byref(n))
        return array_copy(ptr, n.value, int)
    finally:
        _ffi.function("pdkv_u64_list_free")(out)


def take_string(fn: str, *args: Any) -> str:
    """Calls ``fn(*args, pdkv_string_t **out, err)``, copies the text and frees the string."""
    out = POINTER(_ffi.StringT)()
    call(fn, *args, byref(out))
    try:
        text = ctypes.c_char_p()
        n = ctypes.c_size_t()
        call("pdkv_string_text", out, byref(text), byref(n))
        return ctypes.string_at(text, n.value).decode("utf-8") if n.value else ""
    finally:
        _ffi.function("pdkv_string_free")(out)


def take_bytes(fn: str, *args: Any) -> bytes:
    """Calls ``fn(*args, pdkv_bytes_t **out, err)``, copies the data and frees the buffer."""
    out = POINTER(_ffi.BytesT)()
    call(fn, *args, byref(out))
    try:
        data = POINTER(ctypes.c_uint8)()
        n = ctypes.c_size_t()
        call("pdkv_bytes_data", out, byref(data), byref(n))
        return ctypes.string_at(data, n.value) if n.value else b""
    finally:
        _ffi.function("pdkv_bytes_free")(out)


def bytes_arg(name: str, data: Any) -> Tuple[Any, int]:
    """A (const uint8_t *, len) pair from bytes-like ``data`` (NULL when empty)."""
    if isinstance(data, str) or not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"{name} must be bytes, got {type(data).__name__}")
    raw = bytes(data)
    if not raw:
        return None, 0
    return (ctypes.c_uint8 * len(raw)).from_buffer_copy(raw), len(raw)
