//! Embeds an rpath to the libpdkv directory chosen by `pdkv-sys` (exported through
//! `links = "pdkv"` as `DEP_PDKV_LIB_DIR`) into this crate's tests and examples, so they run
//! without `LD_LIBRARY_PATH`. (`cargo:rustc-link-arg` only applies to the package that emits
//! it, so pdkv-sys's own rpath does not reach these targets.)
fn main() {
    println!("cargo:rerun-if-env-changed=DEP_PDKV_LIB_DIR");
    if let Ok(dir) = std::env::var("DEP_PDKV_LIB_DIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
}
