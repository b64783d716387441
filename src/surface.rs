//! The library's `pub` surface (issue 34 item 7), measured and kept by a test: a `pub` item of
//! `src/` whose name no other file of the crate, its tests (`tests/`) or its fuzz targets
//! (`fuzz/`) mentions is used by no other file, and should be private or `pub(crate)`.
//!
//! `cargo test --lib surface:: -- --nocapture` prints the measure: `pub` items by kind, `pub
//! mod`, `pub use`, and the items used by no other file. An item counts as used when its name
//! is a word of another file's code (comments and string contents left out), so a common
//! name (`open`, `parse`) counts as used: the measure undercounts, it never flags an item that
//! another file names.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// `pub` items used by no other file that stay `pub`, each with its reason.
const ALLOWED: &[(&str, &str)] = &[
    (
        "src/pack/prepare.rs: struct Keyed",
        "named in the signature of a pub item other files use (private_interfaces)",
    ),
    (
        "src/oci/client.rs: enum ClientError",
        "named in the signature of a pub item other files use (private_interfaces)",
    ),
    (
        "src/oci/modelpack.rs: enum LayerError",
        "named in the signature of a pub item other files use (private_interfaces)",
    ),
    (
        "src/pack/parity.rs: enum AskError",
        "named in the signature of a pub item other files use (private_interfaces)",
    ),
    (
        "src/oms/bundle.rs: enum BundleError",
        "named in the signature of a pub item other files use (private_interfaces)",
    ),
    (
        "src/oms/statement.rs: enum NameError",
        "named in the signature of a pub item other files use (private_interfaces)",
    ),
    (
        "src/trust/root.rs: enum RootError",
        "named in the signature of a pub item other files use (private_interfaces)",
    ),
    (
        "src/trust/root.rs: enum RotationError",
        "named in the signature of a pub item other files use (private_interfaces)",
    ),
    (
        "src/manifest/mod.rs: enum ChooseError",
        "named in the signature of a pub item other files use (private_interfaces)",
    ),
    (
        "src/keys.rs: enum CommentError",
        "named in the signature of a pub item other files use (private_interfaces)",
    ),
    (
        "src/size.rs: struct SizeError",
        "named in the signature of a pub item other files use (private_interfaces)",
    ),
    (
        "src/size.rs: enum SizeRule",
        "named in the signature of a pub item other files use (private_interfaces)",
    ),
    (
        "src/trust/policy.rs: enum NotCounted",
        "named in the signature of a pub item other files use (private_interfaces)",
    ),
    (
        "src/zstd_frame.rs: enum FrameError",
        "named in the signature of a pub item other files use (private_interfaces)",
    ),
    (
        "src/bundle/open.rs: fn verify_signed_bytes",
        "used only by its own file's tests (dead code outside them if narrowed)",
    ),
    (
        "src/bundle/volumes/at_rest.rs: fn all_of",
        "used only by its own file's tests (dead code outside them if narrowed)",
    ),
    (
        "src/copy.rs: struct MediumReport",
        "named in the signature of a pub item other files use (private_interfaces)",
    ),
    (
        "src/copy.rs: struct Copied",
        "named in the signature of a pub item other files use (private_interfaces)",
    ),
    (
        "src/durable.rs: fn sync_dir",
        "used only by its own file's tests (dead code outside them if narrowed)",
    ),
    (
        "src/fault.rs: struct Fault",
        "named in the signature of a pub item other files use (private_interfaces)",
    ),
    (
        "src/fsio/medium.rs: fn into_reader",
        "used only by its own file's tests (dead code outside them if narrowed)",
    ),
    (
        "src/fsio/medium.rs: struct MediumReader",
        "named in the signature of a pub item other files use (private_interfaces)",
    ),
    (
        "src/fsio/open.rs: fn create_temp",
        "used only by its own file's tests (dead code outside them if narrowed)",
    ),
    (
        "src/fsio/rename.rs: fn rename_noreplace",
        "used only by its own file's tests (dead code outside them if narrowed)",
    ),
    (
        "src/fsio/rename.rs: fn exchange",
        "used only by its own file's tests (dead code outside them if narrowed)",
    ),
    (
        "src/inspect/mod.rs: const WEIGHT_EXTENSIONS",
        "left pub: the narrowing script stopped at the file's first test module (to narrow)",
    ),
    (
        "src/keys.rs: enum SigAlgorithm",
        "named in the signature of a pub item other files use (private_interfaces)",
    ),
    (
        "src/manifest/mod.rs: struct TrustedComment",
        "named in the signature of a pub item other files use (private_interfaces)",
    ),
    (
        "src/oci/auth.rs: struct Helper",
        "named in the signature of a pub item other files use (private_interfaces)",
    ),
    (
        "src/pack/prepare.rs: struct NameFromBase",
        "named in the signature of a pub item other files use (private_interfaces)",
    ),
    (
        "src/pack/prepare.rs: struct Ready",
        "named in the signature of a pub item other files use (private_interfaces)",
    ),
    (
        "src/pack/seal.rs: struct Sealed",
        "named in the signature of a pub item other files use (private_interfaces)",
    ),
    (
        "src/parity.rs: struct Assessment",
        "named in the signature of a pub item other files use (private_interfaces)",
    ),
    (
        "src/paths.rs: const CASE_FOLDING_UNICODE_VERSION",
        "used only by its own file's tests (dead code outside them if narrowed)",
    ),
    (
        "src/paths.rs: const NORMALIZATION_UNICODE_VERSION",
        "used only by its own file's tests (dead code outside them if narrowed)",
    ),
    (
        "src/receipt.rs: struct Receipt",
        "named in the signature of a pub item other files use (private_interfaces)",
    ),
    (
        "src/repair.rs: struct Repaired",
        "named in the signature of a pub item other files use (private_interfaces)",
    ),
    (
        "src/signing.rs: struct Cosigned",
        "named in the signature of a pub item other files use (private_interfaces)",
    ),
    (
        "src/tar.rs: struct Entry",
        "named in the signature of a pub item other files use (private_interfaces)",
    ),
    (
        "src/trust/root.rs: struct Role",
        "named in the signature of a pub item other files use (private_interfaces)",
    ),
    (
        "src/trust/root.rs: struct RootSignature",
        "named in the signature of a pub item other files use (private_interfaces)",
    ),
    (
        "src/trust/root.rs: fn key_for",
        "used only by its own file's tests (dead code outside them if narrowed)",
    ),
    (
        "src/trust/update.rs: struct Applied",
        "named in the signature of a pub item other files use (private_interfaces)",
    ),
    (
        "src/unpack/dir.rs: struct InstalledBase",
        "named in the signature of a pub item other files use (private_interfaces)",
    ),
    (
        "src/unpack/hf.rs: struct CacheBase",
        "named in the signature of a pub item other files use (private_interfaces)",
    ),
    (
        "src/unpack/oci_layout.rs: struct LayoutBase",
        "named in the signature of a pub item other files use (private_interfaces)",
    ),
    (
        "src/unpack/registry.rs: struct Pushed",
        "named in the signature of a pub item other files use (private_interfaces)",
    ),
    (
        "src/zstd_frame.rs: struct FrameHeader",
        "named in the signature of a pub item other files use (private_interfaces)",
    ),
];

/// One `pub` item: its file, its kind (`fn`, `struct`, …, `mod`, `use`) and its name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Item {
    file: String,
    kind: &'static str,
    name: String,
}

const KINDS: &[&str] = &[
    "fn", "struct", "enum", "const", "static", "type", "trait", "mod", "use",
];

/// The `pub` items of one file's non-test code (already `code_only`).
fn pub_items(file: &str, code: &str) -> Vec<Item> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(at) = find_pub(rest) {
        let after = &rest[at + 4..];
        let mut words = after.split_whitespace();
        let mut kind = words.next().unwrap_or("");
        // `pub const fn`, `pub async fn`, `pub unsafe fn`, `pub extern "C" fn`
        while matches!(kind, "async" | "unsafe" | "extern" | "\"\"")
            || (kind == "const" && after.trim_start()[5..].trim_start().starts_with("fn "))
        {
            kind = words.next().unwrap_or("");
        }
        if let Some(kind) = KINDS.iter().find(|k| **k == kind) {
            if *kind == "use" {
                let end = after.find(';').unwrap_or(after.len());
                for name in use_names(&after[..end]) {
                    out.push(Item {
                        file: file.to_string(),
                        kind,
                        name,
                    });
                }
            } else if let Some(name) = words.next() {
                let name: String = name
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    out.push(Item {
                        file: file.to_string(),
                        kind,
                        name,
                    });
                }
            }
        }
        rest = &rest[at + 4..];
    }
    out
}

/// Where the next `pub ` (not `pub(crate)`) starts a word in `code`.
fn find_pub(code: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = code[from..].find("pub ") {
        let at = from + i;
        let before = code[..at].chars().next_back();
        if before.is_none_or(|c| !(c.is_alphanumeric() || c == '_')) {
            return Some(at);
        }
        from = at + 4;
    }
    None
}

/// The names a `use` tree brings in: each leaf's last segment or its alias (`self` names the
/// module; a glob names nothing).
fn use_names(tree: &str) -> Vec<String> {
    let tree = tree.trim_start_matches("use").trim();
    let mut out = Vec::new();
    for leaf in tree.split([',', '{', '}']) {
        let leaf = leaf.trim();
        if leaf.is_empty() || leaf.ends_with('*') {
            continue;
        }
        let name = match leaf.split_once(" as ") {
            Some((_, alias)) => alias.trim(),
            None => leaf.rsplit("::").next().unwrap_or(leaf).trim(),
        };
        if name == "self" {
            continue;
        }
        if !name.is_empty() && name != "_" {
            out.push(name.to_string());
        }
    }
    out
}

/// The identifiers of `code`.
fn words(code: &str) -> BTreeSet<&str> {
    code.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .collect()
}

/// Every Rust file of the crate, its tests and its fuzz targets, as its path from the crate's
/// root and its code (`code_only`).
fn all_files() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = Vec::new();
    for dir in ["src", "tests", "fuzz/fuzz_targets", "benches", "examples"] {
        for entry in walkdir::WalkDir::new(root.join(dir)).sort_by_file_name() {
            let Ok(entry) = entry else { continue };
            if entry.path().extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = entry
                .path()
                .strip_prefix(root)
                .unwrap()
                .display()
                .to_string();
            let text = std::fs::read_to_string(entry.path()).unwrap();
            out.push((rel, crate::layering::code_only(&text)));
        }
    }
    out
}

/// What the measure finds: every `pub` item, and those no other file names.
struct Surface {
    items: Vec<Item>,
    unused: Vec<Item>,
}

fn measure() -> Surface {
    let files = all_files();
    let words_of: BTreeMap<&str, BTreeSet<&str>> = files
        .iter()
        .map(|(f, code)| (f.as_str(), words(code)))
        .collect();
    let mut items = Vec::new();
    for (file, code) in crate::source_rules::non_test_sources() {
        if file == "src/main.rs" || file == "src/cli.rs" || file.starts_with("src/commands/") {
            continue; // the binary's crate: its `pub` is not the library's surface
        }
        items.extend(pub_items(&file, &crate::layering::code_only(&code)));
    }
    let unused = items
        .iter()
        .filter(|i| i.kind != "use")
        .filter(|i| {
            !words_of
                .iter()
                .any(|(f, w)| *f != i.file.as_str() && w.contains(i.name.as_str()))
        })
        .cloned()
        .collect();
    Surface { items, unused }
}

fn key(i: &Item) -> String {
    format!("{}: {} {}", i.file, i.kind, i.name)
}

#[test]
fn no_pub_item_is_used_by_no_other_file() {
    let s = measure();
    let mut by_kind: BTreeMap<&str, usize> = BTreeMap::new();
    for i in &s.items {
        *by_kind.entry(i.kind).or_default() += 1;
    }
    let items = s.items.iter().filter(|i| i.kind != "use").count();
    println!(
        "pub items (not counting `pub use`): {items}; by kind: {by_kind:?}; used by no other \
         file: {}",
        s.unused.len()
    );
    for i in &s.unused {
        println!("  unused: {}", key(i));
    }
    let allowed: BTreeSet<&str> = ALLOWED.iter().map(|(k, _)| *k).collect();
    let unused: BTreeSet<String> = s.unused.iter().map(key).collect();
    let mut faults: Vec<String> = unused
        .iter()
        .filter(|k| !allowed.contains(k.as_str()))
        .map(|k| format!("{k}: pub, and no other file uses it: make it private or pub(crate)"))
        .collect();
    faults.extend(
        allowed
            .iter()
            .filter(|k| !unused.contains(**k))
            .map(|k| format!("{k}: allowed as unused, but another file uses it now (or it is gone): remove it from ALLOWED")),
    );
    assert!(faults.is_empty(), "{}", faults.join("\n"));
}

#[test]
fn pub_items_and_uses_are_read() {
    let code = "pub fn a() {}\npub(crate) fn b() {}\npub const fn c() {}\npub const D: u8 = 1;\n\
                pub struct E;\npub use x::{F, g::H as I, self, j::*};\nfn k() { let pub_x = 1; }\n\
                pub async fn l() {}\npub mod m;\n";
    let got: Vec<String> = pub_items("f", code)
        .iter()
        .map(|i| format!("{} {}", i.kind, i.name))
        .collect();
    assert_eq!(
        got,
        [
            "fn a", "fn c", "const D", "struct E", "use F", "use I", "fn l", "mod m"
        ]
    );
}
