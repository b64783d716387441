//! Reading airlock's own source for the tests that keep a rule of the code (STYLE.md, "Rules
//! that a test keeps"): `fsio::open`'s `only_fsio_opens_files`, `display`'s
//! `only_the_terminal_module_prints`, `layering`'s `the_module_map_holds`.

use std::path::Path;

/// Files that are test modules as a whole (declared `#[cfg(test)] mod x;`).
const TEST_ONLY_FILES: &[&str] = &[
    "src/source_rules.rs",
    "src/parse_fuzz.rs",
    "src/capped_child.rs",
    "src/layering.rs",
    "src/inspect/fuzz.rs",
    "src/inspect/values/tests.rs",
    "src/manifest/tests.rs",
    "src/manifest/rules_tests.rs",
    "src/manifest/delta_tests.rs",
    "src/oms/vectors_tests.rs",
    "src/scheme/tests.rs",
    "src/surface.rs",
];

/// The non-test code of a source file: everything before its inline `#[cfg(test)] mod x {`
/// (a `#[cfg(test)] mod x;` declaration names a test-only file, listed in
/// [`TEST_ONLY_FILES`]).
fn non_test_code(text: &str) -> &str {
    let mut from = 0;
    while let Some(i) = text[from..].find("\n#[cfg(test)]\n") {
        let at = from + i;
        let next = text[at + "\n#[cfg(test)]\n".len()..]
            .lines()
            .next()
            .unwrap_or("");
        let next = next
            .trim_start_matches("pub(crate) ")
            .trim_start_matches("pub ");
        if next.starts_with("mod ") && next.trim_end().ends_with('{') {
            return &text[..at];
        }
        from = at + 1;
    }
    text
}

/// Every Rust file under `src/` but the test-only ones, as its path (`src/...`) and its
/// non-test code.
pub(crate) fn non_test_sources() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = Vec::new();
    for entry in walkdir::WalkDir::new(&root).sort_by_file_name() {
        let entry = entry.unwrap();
        if entry.path().extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let rel = format!(
            "src/{}",
            entry.path().strip_prefix(&root).unwrap().display()
        );
        if TEST_ONLY_FILES.contains(&rel.as_str()) {
            continue;
        }
        let text = std::fs::read_to_string(entry.path()).unwrap();
        out.push((rel, non_test_code(&text).to_string()));
    }
    out
}
