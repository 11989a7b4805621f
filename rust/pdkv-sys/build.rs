//! Links libpdkv. Search order: `PDKV_LIB_DIR` (directory holding libpdkv.so), then
//! `pkg-config --libs pdkv` (run as a command, no crate), then the repository's
//! `build/release/capi`. An rpath to the chosen directory is embedded so that tests and
//! examples run without `LD_LIBRARY_PATH`.
use std::env;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=PDKV_LIB_DIR");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=../../capi/include/pdkv.h");

    if let Some(dir) = env::var_os("PDKV_LIB_DIR").filter(|d| !d.is_empty()) {
        let dir = PathBuf::from(dir);
        emit_dir(&dir.to_string_lossy());
        println!("cargo:rustc-link-lib=dylib=pdkv");
        return;
    }

    if let Some(flags) = pkg_config_libs() {
        let mut linked = false;
        for flag in flags.split_whitespace() {
            if let Some(dir) = flag.strip_prefix("-L") {
                emit_dir(dir);
            } else if let Some(lib) = flag.strip_prefix("-l") {
                println!("cargo:rustc-link-lib=dylib={lib}");
                linked |= lib == "pdkv";
            }
        }
        if !linked {
            println!("cargo:rustc-link-lib=dylib=pdkv");
        }
        return;
    }

    let manifest =
        PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let fallback = manifest.join("../../build/release/capi");
    let fallback = fallback.canonicalize().unwrap_or(fallback);
    println!(
        "cargo:warning=PDKV_LIB_DIR unset and pkg-config has no pdkv: linking {}",
        fallback.display()
    );
    emit_dir(&fallback.to_string_lossy());
    println!("cargo:rustc-link-lib=dylib=pdkv");
}

/// Adds a native search path and an rpath for `dir`; `links = "pdkv"` exports it to
/// dependents as `DEP_PDKV_LIB_DIR`.
fn emit_dir(dir: &str) {
    println!("cargo:rustc-link-search=native={dir}");
    println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    println!("cargo:lib_dir={dir}");
}

/// `pkg-config --libs pdkv`, or None when pkg-config is missing or does not know pdkv.
fn pkg_config_libs() -> Option<String> {
    let out = Command::new("pkg-config")
        .args(["--libs", "pdkv"])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    String::from_utf8(out.stdout).ok()
}
