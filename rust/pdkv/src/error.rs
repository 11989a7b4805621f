//! The error type of every fallible call.
use pdkv_sys as sys;
use std::fmt;

/// Result of a pdkv call.
pub type Result<T, E = Error> = std::result::Result<T, E>;

// The Status enum and its raw-code conversions are generated from the header
// (scripts/gen_bindings.py writes src/status.rs).
pub use crate::status::Status;

impl Status {
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
    /// A CUDA driver API `CUresult` (device memory copies and checks).
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
