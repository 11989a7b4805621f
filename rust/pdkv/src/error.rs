//! The error type of every fallible call.
use pdkv_sys as sys;
use std::fmt;

/// Result of a pdkv call.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Status of a failed call (`pdkv_status_t` without `PDKV_OK`). Numeric values are stable.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    /// An argument is out of its domain (zero size, rank >= TP, unknown enum value, ...).
    InvalidArgument,
    /// A required pointer was NULL.
    NullPointer,
    /// A `struct_size` is smaller than the first published size of the struct.
    StructSize,
    /// Two TP sizes do not divide each other.
    TpNotDivisible,
    /// The KV heads do not divide over the TP size (or the reverse).
    HeadsNotDivisible,
    /// The Mamba-like layer type has no transfer rule.
    UnsupportedMambaType,
    /// The conv-state layout (SD) cannot be transferred byte-exactly.
    UnsupportedLayout,
    /// Arithmetic would overflow 64 bits.
    Overflow,
    /// A caller buffer is too small.
    BufferTooSmall,
    /// Malformed input text.
    Parse,
    /// A file cannot be read.
    Io,
    /// A name (preset, backend) is unknown.
    NotFound,
    /// Two inputs do not fit together (models, block sizes, regions).
    Incompatible,
    /// A transfer plan does not cover its target exactly.
    Coverage,
    /// An index or range is out of bounds.
    OutOfBounds,
    /// A checksum does not match.
    Checksum,
    /// An unexpected internal failure.
    Internal,
    /// A deadline expired (transfer, handshake, connect).
    TimedOut,
    /// The caller cancelled the operation.
    Cancelled,
    /// The peer died, closed, or stopped answering heartbeats.
    PeerLost,
    /// The pre-shared key proof failed (the message names the peer).
    Auth,
    /// A peer sent a malformed, unexpected or lying frame.
    Protocol,
    /// The transport library failed (the error's cause gives its code).
    Transport,
    /// A resource is in use (deregistering memory a transfer uses).
    Busy,
    /// The agent is shutting down or was closed.
    Shutdown,
    /// A status code this version of the bindings does not know.
    Other(u32),
}

impl Status {
    /// Maps a raw non-OK status code.
    pub fn from_raw(code: sys::pdkv_status_t) -> Status {
        match code {
            sys::PDKV_ERR_INVALID_ARGUMENT => Status::InvalidArgument,
            sys::PDKV_ERR_NULL_POINTER => Status::NullPointer,
            sys::PDKV_ERR_STRUCT_SIZE => Status::StructSize,
            sys::PDKV_ERR_TP_NOT_DIVISIBLE => Status::TpNotDivisible,
            sys::PDKV_ERR_HEADS_NOT_DIVISIBLE => Status::HeadsNotDivisible,
            sys::PDKV_ERR_UNSUPPORTED_MAMBA_TYPE => Status::UnsupportedMambaType,
            sys::PDKV_ERR_UNSUPPORTED_LAYOUT => Status::UnsupportedLayout,
            sys::PDKV_ERR_OVERFLOW => Status::Overflow,
            sys::PDKV_ERR_BUFFER_TOO_SMALL => Status::BufferTooSmall,
            sys::PDKV_ERR_PARSE => Status::Parse,
            sys::PDKV_ERR_IO => Status::Io,
            sys::PDKV_ERR_NOT_FOUND => Status::NotFound,
            sys::PDKV_ERR_INCOMPATIBLE => Status::Incompatible,
            sys::PDKV_ERR_COVERAGE => Status::Coverage,
            sys::PDKV_ERR_OUT_OF_BOUNDS => Status::OutOfBounds,
            sys::PDKV_ERR_CHECKSUM => Status::Checksum,
            sys::PDKV_ERR_INTERNAL => Status::Internal,
            sys::PDKV_ERR_TIMED_OUT => Status::TimedOut,
            sys::PDKV_ERR_CANCELLED => Status::Cancelled,
            sys::PDKV_ERR_PEER_LOST => Status::PeerLost,
            sys::PDKV_ERR_AUTH => Status::Auth,
            sys::PDKV_ERR_PROTOCOL => Status::Protocol,
            sys::PDKV_ERR_TRANSPORT => Status::Transport,
            sys::PDKV_ERR_BUSY => Status::Busy,
            sys::PDKV_ERR_SHUTDOWN => Status::Shutdown,
            other => Status::Other(other),
        }
    }

    /// The raw `pdkv_status_t` code.
    pub fn code(self) -> sys::pdkv_status_t {
        match self {
            Status::InvalidArgument => sys::PDKV_ERR_INVALID_ARGUMENT,
            Status::NullPointer => sys::PDKV_ERR_NULL_POINTER,
            Status::StructSize => sys::PDKV_ERR_STRUCT_SIZE,
            Status::TpNotDivisible => sys::PDKV_ERR_TP_NOT_DIVISIBLE,
            Status::HeadsNotDivisible => sys::PDKV_ERR_HEADS_NOT_DIVISIBLE,
            Status::UnsupportedMambaType => sys::PDKV_ERR_UNSUPPORTED_MAMBA_TYPE,
            Status::UnsupportedLayout => sys::PDKV_ERR_UNSUPPORTED_LAYOUT,
            Status::Overflow => sys::PDKV_ERR_OVERFLOW,
            Status::BufferTooSmall => sys::PDKV_ERR_BUFFER_TOO_SMALL,
            Status::Parse => sys::PDKV_ERR_PARSE,
            Status::Io => sys::PDKV_ERR_IO,
            Status::NotFound => sys::PDKV_ERR_NOT_FOUND,
            Status::Incompatible => sys::PDKV_ERR_INCOMPATIBLE,
            Status::Coverage => sys::PDKV_ERR_COVERAGE,
            Status::OutOfBounds => sys::PDKV_ERR_OUT_OF_BOUNDS,
            Status::Checksum => sys::PDKV_ERR_CHECKSUM,
            Status::Internal => sys::PDKV_ERR_INTERNAL,
            Status::TimedOut => sys::PDKV_ERR_TIMED_OUT,
            Status::Cancelled => sys::PDKV_ERR_CANCELLED,
            Status::PeerLost => sys::PDKV_ERR_PEER_LOST,
            Status::Auth => sys::PDKV_ERR_AUTH,
            Status::Protocol => sys::PDKV_ERR_PROTOCOL,
            Status::Transport => sys::PDKV_ERR_TRANSPORT,
            Status::Busy => sys::PDKV_ERR_BUSY,
            Status::Shutdown => sys::PDKV_ERR_SHUTDOWN,
            Status::Other(code) => code,
        }
    }

    /// The library's stable name of the status, e.g. `"PDKV_ERR_TP_NOT_DIVISIBLE"`
    /// (`pdkv_status_name`).
    pub fn name(self) -> &'static str {
        // SAFETY: any value is accepted; the result is static storage.
        unsafe { crate::ffi_util::static_str(sys::pdkv_status_name(self.code())) }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A failed pdkv call: the status and the library's message (which names the offending
/// values). Errors raised by the bindings themselves (e.g. a NUL byte in a string) use the
/// same statuses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    status: Status,
    message: String,
    cause: Option<Cause>,
}

/// The lower-layer cause of an error (`pdkv_error_cause`): which layer and its own code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// A UCX `ucs_status_t`.
    Ucx(i64),
    /// An `errno` value.
    Errno(i64),
    /// A CUDA `cudaError_t`.
    Cuda(i64),
    /// An OpenSSL `ERR_get_error()` value.
    OpenSsl(i64),
    /// A domain this version of the bindings does not know, with its code.
    Other(i32, i64),
}

impl Error {
    /// Creates an error from a status and a message.
    pub fn new(status: Status, message: impl Into<String>) -> Error {
        Error {
            status,
            message: message.into(),
            cause: None,
        }
    }

    /// Takes ownership of a C error object (may be NULL) returned with `status`, copies its
    /// message and frees it.
    ///
    /// # Safety
    /// `err` is NULL or a live `pdkv_error_t` that the caller owns and does not use afterwards.
    pub unsafe fn from_raw(status: sys::pdkv_status_t, err: *mut sys::pdkv_error_t) -> Error {
        let message = crate::ffi_util::owned_str(sys::pdkv_error_message(err));
        let status = if err.is_null() {
            status
        } else {
            sys::pdkv_error_status(err)
        };
        let (mut domain, mut code) = (0i32, 0i64);
        sys::pdkv_error_cause(err, &mut domain, &mut code);
        sys::pdkv_error_free(err);
        // The C field is int32_t; bindgen types the enum's constants as unsigned.
        let cause = match domain as sys::pdkv_cause_domain {
            sys::PDKV_CAUSE_NONE => None,
            sys::PDKV_CAUSE_UCX => Some(Cause::Ucx(code)),
            sys::PDKV_CAUSE_ERRNO => Some(Cause::Errno(code)),
            sys::PDKV_CAUSE_CUDA => Some(Cause::Cuda(code)),
            sys::PDKV_CAUSE_OPENSSL => Some(Cause::OpenSsl(code)),
            _ => Some(Cause::Other(domain, code)),
        };
        Error {
            status: Status::from_raw(status),
            message,
            cause,
        }
    }

    /// The lower layer's code behind this error, when a lower layer (UCX, the OS, CUDA,
    /// OpenSSL) caused it.
    pub fn cause(&self) -> Option<Cause> {
        self.cause
    }

    /// The status of the failure.
    pub fn status(&self) -> Status {
        self.status
    }

    /// The library's message.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.status.name(), self.message)
    }
}

impl std::error::Error for Error {}
