//! Generates the crate's function layer and records where libpdkv was found at build time.
//!
//! libpdkv is not linked: the crate loads it when the first function is called (`src/loader.rs`),
//! so a program that depends on it, directly or through `pdkv`, builds with nothing set and runs
//! with no `LD_LIBRARY_PATH` (an rpath cannot reach a dependent crate's binaries: Cargo applies
//! `rustc-link-arg` to the emitting package only).
//!
//! 1. `src/bindings.rs` (bindgen output, committed, checked against the header by a test) is
//!    split: everything but its `extern "C"` blocks goes to `$OUT_DIR/types.rs`; each declared
//!    function becomes a field of a function table and a `pub unsafe fn` of the same name and
//!    signature that calls through it (`$OUT_DIR/functions.rs`).
//! 2. The directory holding libpdkv at build time is recorded as `PDKV_SYS_BUILD_LIB_DIR`, one
//!    of the places the loader tries: `PDKV_LIB_DIR` when set, else `pkg-config --variable=libdir
//!    pdkv` (an installed prefix, or a build tree's `<build>/pkgconfig`), else the repository's
//!    `build/release/capi` when this crate is used from a source checkout that has one.
use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=PDKV_LIB_DIR");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src/bindings.rs");

    let manifest =
        PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let bindings = fs::read_to_string(manifest.join("src/bindings.rs"))
        .unwrap_or_else(|e| panic!("read src/bindings.rs: {e}"));
    let (types, functions) = split_bindings(&bindings);
    fs::write(out.join("types.rs"), types).expect("write types.rs");
    fs::write(out.join("functions.rs"), render_functions(&functions)).expect("write functions.rs");

    let dir = build_lib_dir(&manifest).unwrap_or_default();
    println!("cargo:rustc-env=PDKV_SYS_BUILD_LIB_DIR={dir}");
    // `links = "pdkv"`: dependents' build scripts see it as DEP_PDKV_LIB_DIR.
    println!("cargo:lib_dir={dir}");
}

/// Where libpdkv is at build time, or None when nothing names a directory.
fn build_lib_dir(manifest: &Path) -> Option<String> {
    if let Some(dir) = env::var_os("PDKV_LIB_DIR").filter(|d| !d.is_empty()) {
        return Some(dir.to_string_lossy().into_owned());
    }
    if let Some(dir) = pkg_config_libdir() {
        return Some(dir);
    }
    let tree = manifest.join("../../build/release/capi");
    if tree.is_dir() {
        let tree = tree.canonicalize().unwrap_or(tree);
        if let Some(dir) = tree.to_str() {
            println!("cargo:rerun-if-changed={dir}");
            return Some(dir.to_owned());
        }
    }
    None
}

/// `pkg-config --variable=libdir pdkv`, or None when pkg-config is missing or does not know pdkv.
fn pkg_config_libdir() -> Option<String> {
    let out = Command::new("pkg-config")
        .args(["--variable=libdir", "pdkv"])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let dir = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (!dir.is_empty()).then_some(dir)
}

/// One function of an `extern "C"` block: its name, its parameters `(name, type)` and its
/// return type (None for `()`).
struct Function {
    name: String,
    params: Vec<(String, String)>,
    ret: Option<String>,
}

/// Splits bindgen output into (everything outside `extern "C"` blocks, the declared functions).
/// bindgen (rustfmt'ed) writes each block as a line `extern "C" {` and a closing line `}`.
fn split_bindings(text: &str) -> (String, Vec<Function>) {
    let mut types = String::new();
    let mut functions = Vec::new();
    let mut block: Option<String> = None;
    for line in text.lines() {
        match &mut block {
            None if line == "extern \"C\" {" => block = Some(String::new()),
            None => {
                types.push_str(line);
                types.push('\n');
            }
            Some(body) if line == "}" => {
                functions.extend(parse_block(body));
                block = None;
            }
            Some(body) => {
                body.push_str(line.trim());
                body.push(' ');
            }
        }
    }
    assert!(
        block.is_none(),
        "src/bindings.rs: unterminated extern \"C\" block"
    );
    (types, functions)
}

/// Parses the declarations of one block: `pub fn NAME(PARAMS) [-> RET];` each. Anything else (a
/// static, a variadic function) stops the build: the loader would not know how to bind it.
fn parse_block(body: &str) -> Vec<Function> {
    let mut out = Vec::new();
    let mut rest = body.trim();
    while !rest.is_empty() {
        let decl = rest
            .strip_prefix("pub fn ")
            .unwrap_or_else(|| panic!("src/bindings.rs: unsupported extern item: {rest}"));
        let open = decl.find('(').expect("function without parameters list");
        let name = decl[..open].trim().to_owned();
        let close = matching(decl, open);
        let params = split_top(&decl[open + 1..close])
            .into_iter()
            .map(|p| {
                assert!(p != "...", "{name}: variadic functions are not supported");
                let (n, t) = p
                    .split_once(':')
                    .unwrap_or_else(|| panic!("{name}: parameter without a type: {p}"));
                (n.trim().to_owned(), t.trim().to_owned())
            })
            .collect();
        let after = &decl[close + 1..];
        let semi = after.find(';').expect("declaration without ';'");
        let ret = after[..semi].trim();
        let ret = ret
            .strip_prefix("->")
            .map(|r| r.trim().to_owned())
            .filter(|r| r != "()");
        out.push(Function { name, params, ret });
        rest = after[semi + 1..].trim();
    }
    out
}

/// Index of the bracket closing the one at `open`, counting (), <> and [].
fn matching(s: &str, open: usize) -> usize {
    let mut depth = 0i32;
    for (i, c) in s.char_indices().skip_while(|(i, _)| *i < open) {
        match c {
            '(' | '<' | '[' => depth += 1,
            ')' | '>' | ']' => {
                // `->` inside a parameter type is not a closing bracket.
                if c == '>' && s[..i].ends_with('-') {
                    continue;
                }
                depth -= 1;
                if depth == 0 {
                    return i;
                }
            }
            _ => {}
        }
    }
    panic!("unbalanced brackets in: {s}")
}

/// Splits a parameter list at the commas outside brackets; drops empty pieces (trailing comma).
fn split_top(s: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let mut depth = 0i32;
    let mut cur = String::new();
    let mut prev = ' ';
    for c in s.chars() {
        match c {
            '(' | '<' | '[' => depth += 1,
            ')' | ']' => depth -= 1,
            '>' if prev != '-' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(std::mem::take(&mut cur));
                prev = c;
                continue;
            }
            _ => {}
        }
        cur.push(c);
        prev = c;
    }
    parts.push(cur);
    parts
        .into_iter()
        .map(|p| p.trim().to_owned())
        .filter(|p| !p.is_empty())
        .collect()
}

/// The function table, its resolution from a `dlopen` handle, and one wrapper per function.
fn render_functions(functions: &[Function]) -> String {
    let mut s = String::new();
    let fn_type = |f: &Function| {
        let args: Vec<&str> = f.params.iter().map(|(_, t)| t.as_str()).collect();
        let ret = f
            .ret
            .as_ref()
            .map(|r| format!(" -> {r}"))
            .unwrap_or_default();
        format!("unsafe extern \"C\" fn({}){ret}", args.join(", "))
    };
    s.push_str("// Generated by build.rs from src/bindings.rs: do not edit.\n\n");
    s.push_str(
        "/// Every function of `pdkv.h`, resolved from the loaded library (None: not exported,\n",
    );
    s.push_str("/// a library older than these bindings).\n");
    s.push_str("pub(crate) struct Functions {\n");
    for f in functions {
        let _ = writeln!(s, "    pub(crate) {}: Option<{}>,", f.name, fn_type(f));
    }
    s.push_str("}\n\n");
    s.push_str("impl Functions {\n");
    s.push_str("    /// Looks every function up in `lib`.\n");
    s.push_str("    ///\n    /// # Safety\n    /// `lib` must be a live `dlopen` handle of a library built from `pdkv.h`, whose\n");
    s.push_str("    /// symbols have the declared signatures.\n");
    s.push_str("    pub(crate) unsafe fn resolve(lib: *mut ::std::os::raw::c_void) -> Self {\n");
    s.push_str("        Functions {\n");
    for f in functions {
        let _ = writeln!(
            s,
            "            {name}: crate::loader::symbol(lib, c\"{name}\").map(|p| unsafe {{ ::std::mem::transmute::<*mut ::std::os::raw::c_void, {ty}>(p) }}),",
            name = f.name,
            ty = fn_type(f)
        );
    }
    s.push_str("        }\n    }\n}\n");
    for f in functions {
        let params: Vec<String> = f.params.iter().map(|(n, t)| format!("{n}: {t}")).collect();
        let names: Vec<&str> = f.params.iter().map(|(n, _)| n.as_str()).collect();
        let ret = f
            .ret
            .as_ref()
            .map(|r| format!(" -> {r}"))
            .unwrap_or_default();
        let _ = write!(
            s,
            "\n/// `{name}` of `pdkv.h`, called through the loaded library (see the crate documentation).\n\
             ///\n/// # Safety\n/// The contract of `{name}` in `pdkv.h`.\n\
             /// # Panics\n/// When libpdkv cannot be loaded, or does not export `{name}`.\n\
             #[inline]\npub unsafe fn {name}({params}){ret} {{\n    \
             let f = crate::loader::functions().{name}.unwrap_or_else(|| crate::loader::missing(\"{name}\"));\n    \
             unsafe {{ f({args}) }}\n}}\n",
            name = f.name,
            params = params.join(", "),
            args = names.join(", "),
        );
    }
    s
}
