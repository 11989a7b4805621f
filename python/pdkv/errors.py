"""Statuses and exceptions of pdkv.

Every failing C call raises a :class:`PdkvError` subclass chosen by its status, so callers can
write ``except pdkv.TpNotDivisibleError``. Its message is the library's, naming the offending
values.
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple, Type

# Status (pdkv_status_t as an IntEnum, with c_name) is generated from the header into _raw.py.
from ._raw import Status as Status


class PdkvError(Exception):
    """A failed pdkv call: ``status`` (a :class:`Status`, or a plain int for a status newer than
    this package) and the library's ``message``."""

    #: The status this class stands for (the base class: none in particular).
    default_status: int = Status.INTERNAL

    def __init__(self, status: int, message: str) -> None:
        try:
            status = Status(status)
        except ValueError:
            pass
        #: The status of the failed call.
        self.status: int = status
        #: The library's message, naming the offending values.
        self.message: str = message
        #: ``(domain, code)`` of the lower layer that caused the failure (``pdkv_error_cause``:
        #: domain 1 UCX ucs_status_t, 2 errno, 3 CUDA, 4 OpenSSL), or None.
        self.cause: Optional[Tuple[int, int]] = None
        name = status.c_name if isinstance(status, Status) else f"status {int(status)}"
        super().__init__(f"{name}: {message}")


class InvalidArgumentError(PdkvError, ValueError):
    """PDKV_ERR_INVALID_ARGUMENT: an argument value is not allowed (zero TP, rank >= TP, ...).

    Raised by the library, and by the bindings before calling C for a value that cannot be
    passed at all: an int outside its C type's range (``tp_size = -2 is out of range
    [0, 4294967295]``), a str holding a NUL character, an unknown enum name or value. Also a
    :class:`ValueError`, so ``except ValueError`` keeps working; an argument of the wrong Python
    type raises :class:`TypeError` instead."""

    default_status = Status.INVALID_ARGUMENT


class NullPointerError(PdkvError):
    """PDKV_ERR_NULL_POINTER: a required pointer was NULL."""

    default_status = Status.NULL_POINTER


class StructSizeError(PdkvError):
    """PDKV_ERR_STRUCT_SIZE: an options/output struct has an unsupported struct_size."""

    default_status = Status.STRUCT_SIZE


class TpNotDivisibleError(PdkvError):
    """PDKV_ERR_TP_NOT_DIVISIBLE: the larger TP size is not a multiple of the smaller."""

    default_status = Status.TP_NOT_DIVISIBLE


class HeadsNotDivisibleError(PdkvError):
    """PDKV_ERR_HEADS_NOT_DIVISIBLE: KV heads and TP size do not divide."""

    default_status = Status.HEADS_NOT_DIVISIBLE


class UnsupportedMambaTypeError(PdkvError):
    """PDKV_ERR_UNSUPPORTED_MAMBA_TYPE: the Mamba-like layer kind has no transfer rule."""

    default_status = Status.UNSUPPORTED_MAMBA_TYPE


class UnsupportedLayoutError(PdkvError):
    """PDKV_ERR_UNSUPPORTED_LAYOUT: e.g. the SD conv-state layout."""

    default_status = Status.UNSUPPORTED_LAYOUT


class PdkvOverflowError(PdkvError):
    """PDKV_ERR_OVERFLOW: a size or address computation would overflow 64 bits."""

    default_status = Status.OVERFLOW


class BufferTooSmallError(PdkvError):
    """PDKV_ERR_BUFFER_TOO_SMALL (the bindings size buffers themselves; seen only in odd races)."""

    default_status = Status.BUFFER_TOO_SMALL


class ParseError(PdkvError):
    """PDKV_ERR_PARSE: malformed JSON, config or wire data."""

    default_status = Status.PARSE


class PdkvIOError(PdkvError):
    """PDKV_ERR_IO: a file could not be read (the message names the path)."""

    default_status = Status.IO


class NotFoundError(PdkvError):
    """PDKV_ERR_NOT_FOUND: an unknown preset or backend name."""

    default_status = Status.NOT_FOUND


class IncompatibleError(PdkvError):
    """PDKV_ERR_INCOMPATIBLE: two engines or inputs do not fit together."""

    default_status = Status.INCOMPATIBLE


class CoverageError(PdkvError):
    """PDKV_ERR_COVERAGE: a transfer would leave bytes unwritten or write them twice."""

    default_status = Status.COVERAGE


class OutOfBoundsError(PdkvError):
    """PDKV_ERR_OUT_OF_BOUNDS: an index or byte range lies outside its container."""

    default_status = Status.OUT_OF_BOUNDS


class ChecksumError(PdkvError):
    """PDKV_ERR_CHECKSUM: serialized data failed its checksum."""

    default_status = Status.CHECKSUM


class InternalError(PdkvError):
    """PDKV_ERR_INTERNAL: an unexpected failure inside the library."""

    default_status = Status.INTERNAL


class TimedOutError(PdkvError, TimeoutError):
    """PDKV_ERR_TIMED_OUT: a deadline expired (transfer, handshake, connect)."""

    default_status = Status.TIMED_OUT


class CancelledError(PdkvError):
    """PDKV_ERR_CANCELLED: the caller cancelled the operation."""

    default_status = Status.CANCELLED


class PeerLostError(PdkvError, ConnectionError):
    """PDKV_ERR_PEER_LOST: the peer died, closed, or stopped answering heartbeats."""

    default_status = Status.PEER_LOST


class AuthError(PdkvError, PermissionError):
    """PDKV_ERR_AUTH: the pre-shared key proof failed (the message names the peer)."""

    default_status = Status.AUTH


class ProtocolError(PdkvError):
    """PDKV_ERR_PROTOCOL: a peer sent a malformed, unexpected or lying frame."""

    default_status = Status.PROTOCOL


class TransportError(PdkvError):
    """PDKV_ERR_TRANSPORT: the transport library failed (the error's cause gives its code)."""

    default_status = Status.TRANSPORT


class BusyError(PdkvError):
    """PDKV_ERR_BUSY: a resource is in use (deregistering memory a transfer uses)."""

    default_status = Status.BUSY


class ShutdownError(PdkvError):
    """PDKV_ERR_SHUTDOWN: the agent is shutting down or was closed."""

    default_status = Status.SHUTDOWN


class ClosedError(NullPointerError, ValueError):
    """A method was called on a handle after ``close()`` (or a closed handle was passed as an
    argument); raised by the bindings, never by C.

    Its status is NULL_POINTER (a closed handle is a NULL pointer to the library), so it is a
    :class:`NullPointerError` (and a :class:`ValueError`); its message names the handle type,
    ``"pdkv.Model is closed"``, as the Go binding's closed errors do. A NULL_POINTER error
    reported by the library is a :class:`NullPointerError` but not a ClosedError."""

    default_status = Status.NULL_POINTER

    def __init__(self, what: str) -> None:
        super().__init__(Status.NULL_POINTER, f"{what} is closed")


#: Status -> exception class raised for it.
ERROR_CLASSES: Dict[int, Type[PdkvError]] = {
    cls.default_status: cls
    for cls in (
        InvalidArgumentError,
        NullPointerError,
        StructSizeError,
        TpNotDivisibleError,
        HeadsNotDivisibleError,
        UnsupportedMambaTypeError,
        UnsupportedLayoutError,
        PdkvOverflowError,
        BufferTooSmallError,
        ParseError,
        PdkvIOError,
        NotFoundError,
        IncompatibleError,
        CoverageError,
        OutOfBoundsError,
        ChecksumError,
        InternalError,
        TimedOutError,
        CancelledError,
        PeerLostError,
        AuthError,
        ProtocolError,
        TransportError,
        BusyError,
        ShutdownError,
    )
}


def error_for(status: int, message: str) -> PdkvError:
    """The exception instance for ``status`` (the :class:`PdkvError` base for unknown statuses)."""
    return ERROR_CLASSES.get(int(status), PdkvError)(status, message)
