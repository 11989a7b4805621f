//! Small helpers shared by the wrappers: C string conversion and the error out-parameter.
use crate::error::{Error, Result, Status};
use pdkv_sys as sys;
use std::ffi::{CStr, CString};
use std::os::raw::c_char;
use std::ptr;

/// Runs a C call that takes `pdkv_error_t **err` last and turns its status into a Result.
pub(crate) fn check(
    f: impl FnOnce(*mut *mut sys::pdkv_error_t) -> sys::pdkv_status_t,
) -> Result<()> {
    let mut err: *mut sys::pdkv_error_t = ptr::null_mut();
    let status = f(&mut err);
    if status == sys::PDKV_OK {
        // SAFETY: on success the library sets *err to NULL; freeing NULL is allowed.
        unsafe { sys::pdkv_error_free(err) };
        return Ok(());
    }
    // SAFETY: err is NULL or an error object we own.
    Err(unsafe { Error::from_raw(status, err) })
}

/// Copies a borrowed NUL-terminated C string; NULL gives "".
///
/// # Safety
/// `p` is NULL or points to a valid NUL-terminated string.
pub(crate) unsafe fn owned_str(p: *const c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        CStr::from_ptr(p).to_string_lossy().into_owned()
    }
}

/// Borrows a C string in static storage; NULL or invalid UTF-8 gives "".
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string that lives for the whole program.
pub(crate) unsafe fn static_str(p: *const c_char) -> &'static str {
    if p.is_null() {
        ""
    } else {
        CStr::from_ptr(p).to_str().unwrap_or("")
    }
}

/// Borrows a C string owned by a handle for the handle's lifetime `'a`; NULL gives "".
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string valid for `'a`.
pub(crate) unsafe fn borrowed_str<'a>(p: *const c_char) -> &'a str {
    if p.is_null() {
        ""
    } else {
        CStr::from_ptr(p).to_str().unwrap_or("")
    }
}

/// Converts a Rust string for the C API; an interior NUL is an `InvalidArgument` error
/// naming `what`.
pub(crate) fn cstring(s: &str, what: &str) -> Result<CString> {
    CString::new(s).map_err(|e| {
        Error::new(
            Status::InvalidArgument,
            format!(
                "{what} contains a NUL byte at offset {}: {s:?}",
                e.nul_position()
            ),
        )
    })
}

/// Builds a slice from a (pointer, count) pair owned by a handle; NULL or 0 gives `&[]`.
///
/// # Safety
/// When `count > 0`, `p` points to `count` initialised elements valid for `'a`.
pub(crate) unsafe fn slice<'a, T>(p: *const T, count: usize) -> &'a [T] {
    if p.is_null() || count == 0 {
        &[]
    } else {
        std::slice::from_raw_parts(p, count)
    }
}

/// The one shape of every variable-length result: `make` returns an owned `pdkv_X_list_t`, whose
/// items (`items`: `pdkv_X_list_items`) are converted before the list is freed (`free`).
pub(crate) fn take_list<L, T, U>(
    make: impl FnOnce(*mut *mut L, *mut *mut sys::pdkv_error_t) -> sys::pdkv_status_t,
    items: unsafe fn(
        *const L,
        *mut *const T,
        *mut usize,
        *mut *mut sys::pdkv_error_t,
    ) -> sys::pdkv_status_t,
    free: unsafe fn(*mut L),
    convert: impl FnMut(&T) -> U,
) -> Result<Vec<U>> {
    struct Guard<L>(*mut L, unsafe fn(*mut L));
    impl<L> Drop for Guard<L> {
        fn drop(&mut self) {
            // SAFETY: we own the list; NULL is allowed.
            unsafe { (self.1)(self.0) }
        }
    }
    let mut list: *mut L = ptr::null_mut();
    check(|e| make(&mut list, e))?;
    let g = Guard(list, free);
    if g.0.is_null() {
        return Err(Error::new(Status::Internal, "pdkv returned a NULL list"));
    }
    let (mut p, mut n) = (ptr::null(), 0usize);
    // SAFETY: live list, valid out pointers.
    check(|e| unsafe { items(g.0, &mut p, &mut n, e) })?;
    // SAFETY: n items owned by the list, converted before it is freed.
    Ok(unsafe { slice(p, n) }.iter().map(convert).collect())
}

/// Calls a "caller buffer + needed count" function twice: first to learn the count, then to
/// fill a buffer of that size (byte strings only: every other result is a list).
pub(crate) fn fill_vec<T: Default + Clone>(
    mut f: impl FnMut(*mut T, usize, *mut usize, *mut *mut sys::pdkv_error_t) -> sys::pdkv_status_t,
) -> Result<Vec<T>> {
    let mut needed = 0usize;
    // A first call with capacity 0 reports the count (BUFFER_TOO_SMALL when non-zero).
    let first = check(|e| f(ptr::null_mut(), 0, &mut needed, e));
    match first {
        Ok(()) if needed == 0 => return Ok(Vec::new()),
        Ok(()) => {}
        Err(e) if e.status() == Status::BufferTooSmall => {}
        Err(e) => return Err(e),
    }
    let mut buf = vec![T::default(); needed];
    let mut written = 0usize;
    check(|e| f(buf.as_mut_ptr(), buf.len(), &mut written, e))?;
    buf.truncate(written);
    Ok(buf)
}

/// Pointer of a slice for the C API: NULL when empty (allowed only with count 0).
pub(crate) fn sp<T, U>(s: &[T]) -> *const U {
    if s.is_empty() {
        ptr::null()
    } else {
        s.as_ptr().cast()
    }
}

/// Takes a freshly returned `pdkv_u64_list_t`, copies its values and frees it.
pub(crate) fn take_u64_list(list: *mut sys::pdkv_u64_list_t) -> Result<Vec<u64>> {
    struct Guard(*mut sys::pdkv_u64_list_t);
    impl Drop for Guard {
        fn drop(&mut self) {
            // SAFETY: we own the list; NULL is allowed.
            unsafe { sys::pdkv_u64_list_free(self.0) }
        }
    }
    let g = Guard(list);
    if g.0.is_null() {
        return Err(Error::new(
            Status::Internal,
            "pdkv returned a NULL value list",
        ));
    }
    let (mut p, mut n) = (ptr::null(), 0usize);
    // SAFETY: live list, valid out pointers.
    check(|e| unsafe { sys::pdkv_u64_list_items(g.0, &mut p, &mut n, e) })?;
    // SAFETY: n values owned by the list, copied before it is freed.
    Ok(unsafe { slice(p, n) }.to_vec())
}

/// Takes a freshly returned `pdkv_zero_range_list_t`, copies its items and frees it.
pub(crate) fn take_zero_ranges(
    list: *mut sys::pdkv_zero_range_list_t,
) -> Result<Vec<crate::ZeroRange>> {
    struct Guard(*mut sys::pdkv_zero_range_list_t);
    impl Drop for Guard {
        fn drop(&mut self) {
            // SAFETY: we own the list; NULL is allowed.
            unsafe { sys::pdkv_zero_range_list_free(self.0) }
        }
    }
    let g = Guard(list);
    if g.0.is_null() {
        return Err(Error::new(
            Status::Internal,
            "pdkv returned a NULL zero-range list",
        ));
    }
    let (mut p, mut n) = (ptr::null(), 0usize);
    // SAFETY: live list, valid out pointers.
    check(|e| unsafe { sys::pdkv_zero_range_list_items(g.0, &mut p, &mut n, e) })?;
    // SAFETY: n items owned by the list; ZeroRange is layout-identical (asserted in blocks.rs).
    Ok(unsafe { slice(p.cast::<crate::ZeroRange>(), n) }.to_vec())
}
