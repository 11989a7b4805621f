//! Every public function of `capi/include/pdkv.h` and the headers it includes
//! (`capi/include/pdkv/*.h`, listed by the generated `common/header_functions.rs`) must be
//! reachable from the safe API: each name must be used (as `sys::name`) somewhere in `pdkv/src`. A
//! function added to the header without a safe wrapper fails this test.
use std::path::Path;

// The header's function names, generated from it by scripts/gen_bindings.py (checked for drift
// by the ctest bindings_generated_drift).
#[path = "common/header_functions.rs"]
mod header_functions;
use header_functions::HEADER_FUNCTIONS;

#[test]
fn every_header_function_is_wrapped() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    assert!(
        HEADER_FUNCTIONS.len() > 100,
        "only {} functions listed",
        HEADER_FUNCTIONS.len()
    );
    let mut sources = String::new();
    for entry in std::fs::read_dir(root.join("src")).expect("src dir") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "rs") {
            sources.push_str(&std::fs::read_to_string(&path).expect("read source"));
        }
    }
    // `sys::name` followed by a non-identifier character (a call, or a path passed to a macro).
    let used = |n: &str| {
        let needle = format!("sys::{n}");
        sources.match_indices(&needle).any(|(i, _)| {
            sources[i + needle.len()..]
                .chars()
                .next()
                .is_some_and(|c| !(c.is_ascii_alphanumeric() || c == '_'))
        })
    };
    let missing: Vec<&&str> = HEADER_FUNCTIONS.iter().filter(|n| !used(n)).collect();
    assert!(
        missing.is_empty(),
        "pdkv.h functions without a safe wrapper: {missing:?}"
    );
}
