//! Every public function of `capi/include/pdkv.h` and the headers it includes
//! (`capi/include/pdkv/*.h`) must be reachable from the safe API: each
//! `PDKV_API` function name must be used (as `sys::name`) somewhere in `pdkv/src`. A
//! function added to the header without a safe wrapper fails this test.
use std::path::Path;

fn header_functions(header: &str) -> Vec<String> {
    let mut names = Vec::new();
    // Join declarations so that a name split from PDKV_API by a line break is still found.
    for decl in header.split("PDKV_API").skip(1) {
        let Some(open) = decl.find('(') else { continue };
        let before = &decl[..open];
        let name: String = before
            .chars()
            .rev()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        if name.starts_with("pdkv_") {
            names.push(name);
        }
    }
    names
}

#[test]
fn every_header_function_is_wrapped() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let include = root.join("../../capi/include");
    let mut header = std::fs::read_to_string(include.join("pdkv.h")).expect("read pdkv.h");
    let mut subs: Vec<_> = std::fs::read_dir(include.join("pdkv"))
        .expect("capi/include/pdkv")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "h"))
        .collect();
    subs.sort();
    assert!(
        subs.iter().any(|p| p.ends_with("agent.h")),
        "pdkv/agent.h not found"
    );
    for p in subs {
        header.push_str(&std::fs::read_to_string(&p).expect("read header"));
    }
    let names = header_functions(&header);
    assert!(
        names.len() > 100,
        "parsed only {} functions from pdkv.h",
        names.len()
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
    let missing: Vec<&String> = names.iter().filter(|n| !used(n)).collect();
    assert!(
        missing.is_empty(),
        "pdkv.h functions without a safe wrapper: {missing:?}"
    );
}
