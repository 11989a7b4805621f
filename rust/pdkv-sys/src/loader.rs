//! Finds and loads libpdkv at run time (`dlopen`), once per process.
//!
//! Candidates, in order (the same rules as the Python package):
//!
//! 1. `$PDKV_LIB_DIR/libpdkv.so.<MAJOR>`: `PDKV_LIB_DIR` is the one variable every pdkv binding
//!    reads, a directory holding the library;
//! 2. next to the running executable (a program shipped with its library beside it);
//! 3. the directory found when this crate was built: `PDKV_LIB_DIR` at build time, else
//!    `pkg-config --variable=libdir pdkv` (an installed prefix), else the source checkout's
//!    `build/release/capi`;
//! 4. `libpdkv.so.<MAJOR>` through the dynamic loader's own search (`LD_LIBRARY_PATH`,
//!    `/etc/ld.so.conf` directories after `ldconfig`, the system directories).
//!
//! A candidate that opens but is not a pdkv library of this ABI major version is skipped with
//! its reason. The library is never unloaded: the function table stays valid for the process.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::functions::Functions;

#[link(name = "dl")]
extern "C" {
    fn dlopen(filename: *const c_char, flag: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
    fn dlerror() -> *mut c_char;
}

// glibc's values (dlfcn.h): resolve every symbol now, keep them out of the global namespace.
const RTLD_NOW: c_int = 2;
const RTLD_LOCAL: c_int = 0;

/// The file name the loader asks for: the library's SONAME, one per ABI major version.
pub fn library_file_name() -> String {
    format!("libpdkv.so.{}", crate::PDKV_VERSION_MAJOR)
}

/// libpdkv could not be loaded: every place that was tried, and why it failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadError {
    /// `(where, why it failed)` for each candidate, in search order.
    pub attempts: Vec<(String, String)>,
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "could not load libpdkv; tried:")?;
        for (place, why) in &self.attempts {
            writeln!(f, "  - {place}: {why}")?;
        }
        write!(
            f,
            "set PDKV_LIB_DIR to the directory holding {} (e.g. <prefix>/lib or build/release/capi)",
            library_file_name()
        )
    }
}

impl std::error::Error for LoadError {}

/// The places libpdkv is looked for, in order, as `(description, path)`; `None` when that
/// place names nothing (the variable is unset, no directory was found at build time).
///
/// `lib_dir_var` is the value of `PDKV_LIB_DIR` and `exe` the running executable; both are
/// parameters so that the order can be tested without touching the process environment.
pub fn library_candidates(
    lib_dir_var: Option<&std::ffi::OsStr>,
    exe: Option<&Path>,
) -> Vec<(String, Option<PathBuf>)> {
    let file = library_file_name();
    let mut out = Vec::new();
    let var = lib_dir_var.filter(|v| !v.is_empty());
    out.push((
        "$PDKV_LIB_DIR".to_owned(),
        var.map(|d| Path::new(d).join(&file)),
    ));
    let beside = exe.and_then(Path::parent).map(|d| d.join(&file));
    out.push(("next to the executable".to_owned(), beside));
    let built = option_env!("PDKV_SYS_BUILD_LIB_DIR").filter(|d| !d.is_empty());
    out.push((
        "the directory found at build time".to_owned(),
        built.map(|d| Path::new(d).join(&file)),
    ));
    out.push(("the dynamic loader".to_owned(), Some(PathBuf::from(&file))));
    out
}

/// The loaded library: where it came from and its functions.
struct Loaded {
    path: PathBuf,
    functions: Functions,
}

static LOADED: OnceLock<Result<Loaded, LoadError>> = OnceLock::new();

fn loaded() -> &'static Result<Loaded, LoadError> {
    LOADED.get_or_init(|| {
        let exe = std::env::current_exe().ok();
        let var = std::env::var_os("PDKV_LIB_DIR");
        load_first(&library_candidates(var.as_deref(), exe.as_deref()))
    })
}

/// Loads libpdkv (on first use) and returns the path it was loaded from, or every attempt.
/// Calling a function of this crate loads it too; call this first to report a missing library
/// as an error instead of a panic.
pub fn load() -> Result<&'static Path, &'static LoadError> {
    match loaded() {
        Ok(l) => Ok(&l.path),
        Err(e) => Err(e),
    }
}

/// The function table, loading the library on first use. Panics with every attempt when it
/// cannot be loaded: the generated wrappers have the C signatures, with no room for an error.
pub(crate) fn functions() -> &'static Functions {
    match loaded() {
        Ok(l) => &l.functions,
        Err(e) => panic!("{e}"),
    }
}

/// Called by a wrapper whose function the loaded library lacks.
#[cold]
pub(crate) fn missing(name: &str) -> ! {
    let path = load().map(|p| p.display().to_string()).unwrap_or_default();
    panic!(
        "the loaded libpdkv ({path}) does not export {name}: it is older than these bindings \
         (same ABI major version, lower minor); install a libpdkv built from the same release"
    )
}

/// `dlsym(lib, name)`, or None when the library has no such symbol.
///
/// # Safety
/// `lib` must be a live handle returned by `dlopen`.
pub(crate) unsafe fn symbol(lib: *mut c_void, name: &CStr) -> Option<*mut c_void> {
    let p = unsafe { dlsym(lib, name.as_ptr()) };
    (!p.is_null()).then_some(p)
}

/// The current `dlerror()` text (it describes the last failed dlopen/dlsym of this thread).
fn last_dl_error() -> String {
    let msg = unsafe { dlerror() };
    if msg.is_null() {
        "unknown dlopen error".to_owned()
    } else {
        unsafe { CStr::from_ptr(msg) }
            .to_string_lossy()
            .into_owned()
    }
}

fn load_first(candidates: &[(String, Option<PathBuf>)]) -> Result<Loaded, LoadError> {
    let mut attempts = Vec::new();
    for (place, path) in candidates {
        let Some(path) = path else {
            let why = if place.starts_with('$') {
                "not set"
            } else {
                "nothing found"
            };
            attempts.push((place.clone(), why.to_owned()));
            continue;
        };
        let label = format!("{place} ({})", path.display());
        // A path with a directory that does not exist is reported plainly; a bare file name is
        // left to the dynamic loader's search.
        if path.components().count() > 1 && !path.exists() {
            attempts.push((label, "no such file".to_owned()));
            continue;
        }
        match open(path) {
            Ok(loaded) => return Ok(loaded),
            Err(why) => attempts.push((label, why)),
        }
    }
    Err(LoadError { attempts })
}

/// Opens one candidate and checks that it is a pdkv library of this crate's ABI major version.
fn open(path: &Path) -> Result<Loaded, String> {
    use std::os::unix::ffi::OsStrExt;
    let c = CString::new(path.as_os_str().as_bytes()).map_err(|_| "path holds a NUL byte")?;
    let lib = unsafe { dlopen(c.as_ptr(), RTLD_NOW | RTLD_LOCAL) };
    if lib.is_null() {
        return Err(last_dl_error());
    }
    // The handle is kept for the process lifetime (never dlclose'd), even when rejected below:
    // unloading a library that may have started threads or registered handlers is not safe.
    let functions = unsafe { Functions::resolve(lib) };
    let version = functions
        .pdkv_version
        .ok_or("not a pdkv library (no pdkv_version symbol)")?;
    let v = unsafe { version() };
    let major = (v >> 16) & 0xff;
    if major != crate::PDKV_VERSION_MAJOR {
        return Err(format!(
            "ABI major version {major} (library {}.{}.{}) differs from the header's PDKV_VERSION_MAJOR {}",
            major,
            (v >> 8) & 0xff,
            v & 0xff,
            crate::PDKV_VERSION_MAJOR
        ));
    }
    Ok(Loaded {
        path: path.to_path_buf(),
        functions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn candidates_in_order_variable_executable_build_loader() {
        let c = library_candidates(
            Some(OsStr::new("/opt/x/lib")),
            Some(Path::new("/srv/app/bin/app")),
        );
        let places: Vec<&str> = c.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(
            places,
            [
                "$PDKV_LIB_DIR",
                "next to the executable",
                "the directory found at build time",
                "the dynamic loader"
            ]
        );
        let file = library_file_name();
        assert_eq!(file, format!("libpdkv.so.{}", crate::PDKV_VERSION_MAJOR));
        assert_eq!(c[0].1, Some(Path::new("/opt/x/lib").join(&file)));
        assert_eq!(c[1].1, Some(Path::new("/srv/app/bin").join(&file)));
        assert_eq!(c[3].1, Some(PathBuf::from(&file)));
    }

    #[test]
    fn empty_variable_is_unset() {
        let c = library_candidates(Some(OsStr::new("")), None);
        assert_eq!(c[0].1, None);
        assert_eq!(c[1].1, None);
    }

    #[test]
    fn every_failed_candidate_is_reported_with_its_reason() {
        let err = load_first(&[
            ("$PDKV_LIB_DIR".to_owned(), None),
            (
                "missing".to_owned(),
                Some(PathBuf::from("/nonexistent-pdkv/libpdkv.so.2")),
            ),
            // A real shared library without pdkv's symbols is refused, not used.
            ("libm".to_owned(), Some(PathBuf::from("libm.so.6"))),
        ])
        .err()
        .expect("no candidate is a pdkv library");
        assert_eq!(err.attempts.len(), 3);
        assert_eq!(
            err.attempts[0],
            ("$PDKV_LIB_DIR".to_owned(), "not set".to_owned())
        );
        assert_eq!(err.attempts[1].1, "no such file");
        assert!(err.attempts[1].0.contains("/nonexistent-pdkv/libpdkv.so.2"));
        assert!(
            err.attempts[2].1.contains("no pdkv_version symbol"),
            "{:?}",
            err.attempts[2]
        );
        let text = err.to_string();
        assert!(text.contains("set PDKV_LIB_DIR"), "{text}");
        assert!(text.contains("libm (libm.so.6)"), "{text}");
    }

    #[test]
    fn the_loaded_library_is_a_candidate_and_reports_this_major() {
        let path = load().expect("libpdkv loads in the test environment");
        let again = load_first(&[("again".to_owned(), Some(path.to_path_buf()))]).expect("reload");
        let v = unsafe { again.functions.pdkv_version.expect("pdkv_version")() };
        assert_eq!(v >> 16, crate::PDKV_VERSION_MAJOR);
    }
}
