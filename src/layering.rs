//! The layering rules of docs/ARCHITECTURE.md, kept by a test: the module map there is read as
//! the single source of truth (bottom-up, one floor a row), and every `crate::` path in the
//! library's non-test code is held to it. It fails on
//!
//! - a source module missing from the table, or a table module that does not exist;
//! - an import of a module on the same floor or a higher one ("a module uses only modules above
//!   it in this table");
//! - an import of a module that the row's Uses cell does not name (so the cell cannot go
//!   stale);
//! - a circle of files importing each other (in the library or the binary), even inside one
//!   module;
//! - a Uses cell naming a module none of the row's files imports (so the cell stays exact);
//! - the binary (`src/main.rs`, `src/cli.rs`, `src/commands/`) reaching into the file layers
//!   (`fsio`, `durable`, `staging`) or pack's stages outside the exceptions listed with their
//!   reasons;
//! - `commands/mod.rs` holding a command's body;
//! - rooms the module map lets meet that must not (`APART`: the writer and delta planning, a
//!   target and how the bytes were made, the registry client and installing) and a source or a
//!   target hashing on its own (`UNNAMED`);
//! - a file moved into place by a rename outside `fsio`, `durable` and `staging` and the
//!   listed bulk placements (`RENAMES`), an `io::Error` made an `Error` without its path, and
//!   the library ending the process.
//!
//! docs/ARCHITECTURE.md, "Rules and the tests that keep them", names the test of each rule.
//!
//! Test modules are not held to it (`crate::source_rules::non_test_sources` leaves them out): a
//! test may build a bundle with `pack` to test a reader. `super::` paths are read only as
//! sibling files (`super::x` in `src/m/y.rs` is `src/m/x.rs`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// A row of the module map: its floor (0 is the ground), the modules it names and its Uses.
#[derive(Debug)]
struct Row {
    floor: usize,
    modules: Vec<String>,
    uses: Vec<String>,
}

/// The module map table of docs/ARCHITECTURE.md.
fn module_map() -> Vec<Row> {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/ARCHITECTURE.md"))
            .unwrap();
    let start = doc
        .find("\n## Module map\n")
        .expect("docs/ARCHITECTURE.md has a \"## Module map\" section");
    let mut rows = Vec::new();
    let mut seen_separator = false;
    for line in doc[start..].lines().skip(1) {
        if !line.starts_with('|') {
            if seen_separator {
                break;
            }
            continue;
        }
        if line.starts_with("|---") {
            seen_separator = true;
            continue;
        }
        if !seen_separator {
            continue; // the header
        }
        let cells: Vec<&str> = line.trim_matches('|').split('|').collect();
        assert!(
            cells.len() >= 3,
            "module map row with fewer than 3 cells: {line}"
        );
        let modules = ticked(cells[0])
            .into_iter()
            .map(|m| m.trim_end_matches('/').trim_end_matches(".rs").to_string())
            .collect::<Vec<_>>();
        assert!(
            !modules.is_empty(),
            "module map row names no module: {line}"
        );
        let uses = ticked(cells[cells.len() - 1]);
        rows.push(Row {
            floor: rows.len(),
            modules,
            uses,
        });
    }
    assert!(!rows.is_empty(), "the module map table has no rows");
    rows
}

/// The `backticked` words of a table cell.
fn ticked(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// Rust source with comments removed and the contents of string and char literals blanked,
/// so that neither can look like a path.
pub(crate) fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if c == b'r'
            && (b.get(i + 1) == Some(&b'"') || b.get(i + 1) == Some(&b'#'))
            && (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_'))
        {
            // A raw string r"…" or r#"…"# (or a raw identifier r#name, left as it is).
            let mut j = i + 1;
            while b.get(j) == Some(&b'#') {
                j += 1;
            }
            if b.get(j) != Some(&b'"') {
                out.push('r');
                i += 1;
                continue;
            }
            let hashes = j - i - 1;
            let mut close = String::from("\"");
            close.push_str(&"#".repeat(hashes));
            let rest = &text[j + 1..];
            let end = rest
                .find(&close)
                .map_or(b.len(), |e| j + 1 + e + close.len());
            out.push_str("\"\"");
            i = end;
        } else if c == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == b'\'' {
            // A char literal ('x', '\n', '\u{..}') or a lifetime ('a).
            if b.get(i + 1) == Some(&b'\\') {
                let mut j = i + 2;
                while j < b.len() && b[j] != b'\'' {
                    j += 1;
                }
                i = j + 1;
                out.push_str("' '");
            } else if let Some(ch) = text[i + 1..].chars().next() {
                if text[i + 1 + ch.len_utf8()..].starts_with('\'') {
                    i += 2 + ch.len_utf8();
                    out.push_str("' '");
                } else {
                    out.push('\'');
                    i += 1;
                }
            } else {
                i += 1;
            }
        } else {
            let ch = text[i..].chars().next().unwrap();
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

/// Every path that follows `prefix` (`crate::`, `airlock::` or `super::`) in the code, with
/// grouped `use` trees expanded: `crate::{a, b::{c, d}}` gives `a`, `b::c`, `b::d`.
fn paths_after(code: &str, prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(i) = code[from..].find(prefix) {
        let at = from + i;
        from = at + prefix.len();
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue; // part of another name or path (`$crate::`, `x::crate::`)
        }
        let (trees, _) = use_tree(&code[at + prefix.len()..]);
        out.extend(trees);
    }
    out
}

/// Parses a use tree at the start of `s`: the paths it names and how many bytes it took.
fn use_tree(s: &str) -> (Vec<String>, usize) {
    let mut segments = Vec::new();
    let mut i = 0;
    loop {
        let rest = &s[i..];
        let skip = rest.len() - rest.trim_start().len();
        i += skip;
        let rest = &s[i..];
        if rest.starts_with('{') {
            i += 1;
            let mut paths = Vec::new();
            loop {
                let rest = &s[i..];
                let skip = rest.len() - rest.trim_start().len();
                i += skip;
                if s[i..].starts_with('}') {
                    i += 1;
                    break;
                }
                if s[i..].starts_with(',') {
                    i += 1;
                    continue;
                }
                if i >= s.len() {
                    break;
                }
                let (sub, used) = use_tree(&s[i..]);
                if used == 0 {
                    i += s[i..].chars().next().map_or(1, char::len_utf8);
                    continue;
                }
                i += used;
                // `x as y`: the rename names nothing.
                let rest = s[i..].trim_start();
                if let Some(renamed) = rest.strip_prefix("as ") {
                    let name = renamed.trim_start();
                    let len = name
                        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
                        .unwrap_or(name.len());
                    i = s.len() - name.len() + len;
                }
                let base = segments.join("::");
                for p in sub {
                    paths.push(match (base.is_empty(), p == "self" || p.is_empty()) {
                        (true, _) => p,
                        (false, true) => base.clone(),
                        (false, false) => format!("{base}::{p}"),
                    });
                }
            }
            return (paths, i);
        }
        let len = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        if len == 0 {
            return (vec![segments.join("::")], i.min(s.len()));
        }
        segments.push(rest[..len].to_string());
        i += len;
        if s[i..].starts_with("::") {
            i += 2;
        } else {
            return (vec![segments.join("::")], i);
        }
    }
}

/// The table module a library file belongs to: `src/x.rs` and `src/x/**` are `x`.
fn module_of(rel: &str) -> String {
    let inner = rel.strip_prefix("src/").unwrap();
    let first = inner.split('/').next().unwrap();
    first.trim_end_matches(".rs").to_string()
}

/// Files of the binary (they may use any of the library, and are in no row).
fn in_binary(rel: &str) -> bool {
    rel == "src/main.rs" || rel == "src/cli.rs" || rel.starts_with("src/commands/")
}

/// The file a path names, from `root` (`src/` for the library and the binary's `crate::`):
/// the longest run of its segments that is a file or a folder's `mod.rs`.
fn file_of(files: &BTreeSet<String>, root: &str, path: &str) -> Option<String> {
    let segments: Vec<&str> = path.split("::").collect();
    for n in (1..=segments.len()).rev() {
        let stem = format!("{root}{}", segments[..n].join("/"));
        for candidate in [format!("{stem}.rs"), format!("{stem}/mod.rs")] {
            if files.contains(&candidate) {
                return Some(candidate);
            }
        }
    }
    None
}

/// The folder whose files a file's `super::` names.
fn parent_root(rel: &str) -> String {
    let dir = Path::new(rel).parent().unwrap();
    let is_mod = rel.ends_with("/mod.rs");
    let base = if is_mod { dir.parent().unwrap() } else { dir };
    format!("{}/", base.display())
}

/// The circles of a graph of files: each set of files that reach each other (a strongly
/// connected component of more than one file), as the files and the imports inside it.
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    fn reach(from: &str, graph: &BTreeMap<String, BTreeSet<String>>, seen: &mut BTreeSet<String>) {
        if !seen.insert(from.to_string()) {
            return;
        }
        for next in graph.get(from).into_iter().flatten() {
            reach(next, graph, seen);
        }
    }
    let mut reverse: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (from, tos) in graph {
        for to in tos {
            reverse.entry(to.clone()).or_default().insert(from.clone());
        }
    }
    let mut placed = BTreeSet::new();
    let mut out = Vec::new();
    for node in graph.keys() {
        if placed.contains(node) {
            continue;
        }
        let (mut down, mut up) = (BTreeSet::new(), BTreeSet::new());
        reach(node, graph, &mut down);
        reach(node, &reverse, &mut up);
        let component: BTreeSet<String> = down.intersection(&up).cloned().collect();
        placed.extend(component.iter().cloned());
        if component.len() > 1 {
            let mut lines = Vec::new();
            for from in &component {
                for to in graph.get(from).into_iter().flatten() {
                    if component.contains(to) {
                        lines.push(format!("{from} -> {to}"));
                    }
                }
            }
            out.push(lines);
        }
    }
    out
}

/// The other files of `files` that the file `rel` (its code `code`) imports.
fn file_imports(rel: &str, code: &str, files: &BTreeSet<String>) -> BTreeSet<String> {
    let mut targets = Vec::new();
    for path in paths_after(code, "crate::") {
        targets.push(file_of(files, "src/", &path));
    }
    for path in paths_after(code, "super::") {
        targets.push(file_of(files, &parent_root(rel), &path));
    }
    for path in paths_after(code, "airlock::") {
        targets.push(file_of(files, "src/", &path));
    }
    targets.into_iter().flatten().filter(|f| f != rel).collect()
}

/// Rooms kept apart inside what the module map allows (its rows are whole modules; these are
/// files and folders): `(files under, what they may not import, the rule of
/// docs/ARCHITECTURE.md it keeps)`.
const APART: &[(&str, &[&str], &str)] = &[
    (
        "src/pack/write/",
        &["src/delta/", "src/pack/plan.rs", "src/pack/base.rs"],
        "the writer knows nothing of delta planning: `pack::plan` hands it a `write::Stream`",
    ),
    (
        "src/unpack/",
        &["src/delta/", "src/pack/", "src/source/registry.rs"],
        "a target never knows how the bytes were made (no delta in a sink, no registry source)",
    ),
    (
        "src/source/",
        &["src/delta/", "src/unpack/"],
        "a source knows nothing of targets and deltas: `pipeline::run` puts them together",
    ),
    (
        "src/oci/",
        &[
            "src/unpack/",
            "src/source/",
            "src/pipeline.rs",
            "src/staging.rs",
        ],
        "the registry client knows nothing of installing",
    ),
];

/// The imports that break [`APART`], one line a fault.
fn apart_faults(sources: &[(String, String)], apart: &[(&str, &[&str], &str)]) -> Vec<String> {
    let files: BTreeSet<String> = sources.iter().map(|(rel, _)| rel.clone()).collect();
    let mut faults = Vec::new();
    for (rel, text) in sources {
        for (room, not, why) in apart.iter().filter(|(room, _, _)| rel.starts_with(room)) {
            for to in file_imports(rel, &code_only(text), &files) {
                if let Some(n) = not.iter().find(|n| to.starts_with(*n)) {
                    faults.push(format!(
                        "{rel} imports {to}: nothing under {room} imports {n} ({why})"
                    ));
                }
            }
        }
    }
    faults
}

/// Files of a room that name a crate it must not use, but for the listed exceptions: `(files
/// under, the crate's path, the rule, [(file, why it may)])`.
type Unnamed = (
    &'static str,
    &'static str,
    &'static str,
    &'static [(&'static str, &'static str)],
);

/// The verifier is the one content check: no source and no target hashes a streamed file
/// against the manifest itself. What a target hashes on its own is listed here with the reason.
const UNNAMED: &[Unnamed] = &[
    (
        "src/source/",
        "sha2::",
        "a source hashes nothing: `entries::Verifier` checks each entry",
        &[],
    ),
    (
        "src/unpack/",
        "sha2::",
        "a target hashes no streamed file: `entries::Verifier` checks each entry",
        &[
            (
                "src/unpack/dir.rs",
                "the installed base's receipt: the SHA-256 of its manifest bytes, to match the delta's signed base",
            ),
            (
                "src/unpack/hf.rs",
                "the commit id made from the manifest's bytes, and proving the blobs an interrupted install left (Target::kept)",
            ),
            (
                "src/unpack/registry_base.rs",
                "a delta's base blob fetched from the registry, held to the base manifest's digest",
            ),
        ],
    ),
];

/// The files that name what [`UNNAMED`] keeps out, and the exceptions that no longer hold.
fn unnamed_faults(sources: &[(String, String)], rules: &[Unnamed]) -> Vec<String> {
    let mut faults = Vec::new();
    for (room, name, why, allowed) in rules {
        let mut used = BTreeSet::new();
        for (rel, text) in sources.iter().filter(|(rel, _)| rel.starts_with(room)) {
            if !code_only(text).contains(name) {
                continue;
            }
            match allowed.iter().find(|(f, _)| f == rel) {
                Some((f, _)) => {
                    used.insert(*f);
                }
                None => faults.push(format!("{rel} uses `{name}`: {why}")),
            }
        }
        for (f, _) in allowed.iter().filter(|(f, _)| !used.contains(f)) {
            faults.push(format!(
                "{f} no longer uses `{name}`: take it off the exceptions"
            ));
        }
    }
    faults
}

/// What the rules find wrong in these sources against this table, one line a fault.
fn faults(rows: &[Row], sources: &[(String, String)]) -> Vec<String> {
    let mut faults = Vec::new();
    let mut floor_of: BTreeMap<&str, &Row> = BTreeMap::new();
    for row in rows {
        for m in &row.modules {
            if floor_of.insert(m, row).is_some() {
                faults.push(format!("the module map names `{m}` twice"));
            }
        }
    }
    let files: BTreeSet<String> = sources.iter().map(|(rel, _)| rel.clone()).collect();
    let lib_modules: BTreeSet<String> = files
        .iter()
        .filter(|rel| !in_binary(rel) && *rel != "src/lib.rs")
        .map(|rel| module_of(rel))
        .collect();
    for m in &lib_modules {
        if !floor_of.contains_key(m.as_str()) {
            faults.push(format!(
                "src/{m} is in no row of the module map (docs/ARCHITECTURE.md)"
            ));
        }
    }
    for m in floor_of.keys() {
        if !lib_modules.contains(*m) {
            faults.push(format!(
                "the module map names `{m}`, which is no module under src/"
            ));
        }
    }
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut used: BTreeSet<(usize, String)> = BTreeSet::new();
    for (rel, text) in sources {
        let code = code_only(text);
        let binary = in_binary(rel);
        graph.insert(rel.clone(), file_imports(rel, &code, &files));
        if binary || rel == "src/lib.rs" {
            continue;
        }
        let me = module_of(rel);
        let Some(my_row) = floor_of.get(me.as_str()) else {
            continue;
        };
        for path in paths_after(&code, "crate::") {
            let target = path.split("::").next().unwrap_or("").to_string();
            if target == me || target.is_empty() {
                continue;
            }
            let Some(their_row) = floor_of.get(target.as_str()) else {
                continue; // a name of lib.rs, or a missing module reported above
            };
            if their_row.floor >= my_row.floor {
                faults.push(format!(
                    "{rel}: `crate::{path}`: `{me}` (row {}) imports `{target}` (row {}); a \
                     module uses only modules above it in the module map",
                    my_row.floor + 1,
                    their_row.floor + 1
                ));
            } else {
                let named: Vec<&String> = my_row
                    .uses
                    .iter()
                    .filter(|u| path == **u || path.starts_with(&format!("{u}::")))
                    .collect();
                if named.is_empty() {
                    faults.push(format!(
                        "{rel}: `crate::{path}`: `{me}`'s Uses cell in the module map does not \
                         name `{target}` (or the part of it used)"
                    ));
                }
                for u in named {
                    used.insert((my_row.floor, u.clone()));
                }
            }
        }
    }
    for row in rows {
        for u in row
            .uses
            .iter()
            .filter(|u| !used.contains(&(row.floor, (*u).clone())))
        {
            faults.push(format!(
                "the Uses cell of `{}` names `{u}`, which none of its files imports: take it off",
                row.modules.join("`, `")
            ));
        }
    }
    for circle in circles(&graph) {
        faults.push(format!(
            "files import each other in a circle: {}",
            circle.join(", ")
        ));
    }
    faults
}

/// The library modules the binary does not reach into: the file layers. A command turns flags
/// into a library operation's options and renders its report; opening, writing and staging
/// files is the library's (issue 34 item 3). Below them, the stages of `pack`: the walk of a
/// model (`scan`) and pack's rooms (its model, base, plan, writer and seal) are reached through
/// `pack::prepare` (before the key) and `pack::pack` (after it), never one by one from
/// `commands/pack.rs`.
///
/// And the calls of pack's half after the key that `pack::prepare` makes (`Ready::with_key`,
/// `installed_receipt`): checking the trust roots to carry and reading the cache's receipts.
const BELOW_THE_BINARY: &[&str] = &[
    "fsio",
    "durable",
    "staging",
    "scan",
    "pack::source",
    "pack::base",
    "pack::plan",
    "pack::write",
    "pack::seal",
    "trust::update::check_for_pack",
    "hfcache::receipts",
];

/// Where the binary still reaches them: `(file, module, why)`. An entry that no longer holds
/// fails too, so the list cannot go stale.
const BINARY_REACHES: &[(&str, &str, &str)] = &[(
    "src/commands/interrupt.rs",
    "staging",
    "the signal handler removes this process's work directories: the signal thread is the binary's",
)];

/// The library paths a file of the binary names: each `airlock::` path, and each path through
/// a name one of them brought in (`use airlock::hfcache;` then `hfcache::receipts(..)` is
/// `hfcache::receipts`).
fn binary_paths(code: &str) -> BTreeSet<String> {
    let direct = paths_after(code, "airlock::");
    let mut all: BTreeSet<String> = direct.iter().cloned().collect();
    for path in &direct {
        let Some(name) = path.rsplit("::").next().filter(|n| !n.is_empty()) else {
            continue;
        };
        for rest in paths_after(code, &format!("{name}::")) {
            all.insert(format!("{path}::{rest}"));
        }
    }
    all
}

/// What the binary reaches below it that [`BINARY_REACHES`] does not allow, and the entries
/// there that no longer hold, one line a fault.
fn binary_faults(sources: &[(String, String)], allowed: &[(&str, &str, &str)]) -> Vec<String> {
    let mut faults = Vec::new();
    let mut used = BTreeSet::new();
    for (rel, text) in sources.iter().filter(|(rel, _)| in_binary(rel)) {
        let code = code_only(text);
        for path in binary_paths(&code) {
            let Some(target) = BELOW_THE_BINARY
                .iter()
                .copied()
                .find(|m| path == *m || path.starts_with(&format!("{m}::")))
            else {
                continue;
            };
            match allowed.iter().find(|(f, m, _)| f == rel && *m == target) {
                Some(entry) => {
                    used.insert(*entry);
                }
                None => faults.push(format!(
                    "{rel}: `airlock::{path}`: the binary does not reach into `{target}`; call a \
                     library operation that does the job"
                )),
            }
        }
    }
    for entry in allowed {
        if !used.contains(entry) {
            faults.push(format!(
                "{} no longer uses `airlock::{}`: take it off the binary's exceptions",
                entry.0, entry.1
            ));
        }
    }
    faults
}

#[test]
fn the_binary_reaches_no_file_layer() {
    let faults = binary_faults(&crate::source_rules::non_test_sources(), BINARY_REACHES);
    assert!(faults.is_empty(), "{}", faults.join("\n"));
}

#[test]
fn a_planted_reach_into_a_pack_stage_fails() {
    let sources = vec![(
        "src/commands/pack.rs".to_string(),
        "use airlock::pack::source::gate;\nlet e = airlock::scan::scan(&p);\n\
         let p = airlock::pack::prepare::prepare(r);"
            .to_string(),
    )];
    assert_eq!(
        binary_faults(&sources, &[]),
        [
            "src/commands/pack.rs: `airlock::pack::source::gate`: the binary does not reach \
             into `pack::source`; call a library operation that does the job"
                .to_string(),
            "src/commands/pack.rs: `airlock::scan::scan`: the binary does not reach into \
             `scan`; call a library operation that does the job"
                .to_string(),
        ]
    );
}

#[test]
fn a_planted_call_through_an_imported_name_fails() {
    let sources = vec![(
        "src/commands/pack.rs".to_string(),
        "use airlock::hfcache;\nuse airlock::trust::{self, update};\n\
         let r = hfcache::receipts(&repo);\nlet t = update::check_for_pack(&f, &k, c);\n\
         let ok = hfcache::parse_repo_folder(f);"
            .to_string(),
    )];
    assert_eq!(
        binary_faults(&sources, &[]),
        [
            "src/commands/pack.rs: `airlock::hfcache::receipts`: the binary does not reach \
             into `hfcache::receipts`; call a library operation that does the job"
                .to_string(),
            "src/commands/pack.rs: `airlock::trust::update::check_for_pack`: the binary does \
             not reach into `trust::update::check_for_pack`; call a library operation that \
             does the job"
                .to_string(),
        ]
    );
}

#[test]
fn a_planted_reach_into_durable_fails() {
    let sources = vec![
        (
            "src/commands/keygen.rs".to_string(),
            "use airlock::durable::{Place, Staged};".to_string(),
        ),
        (
            "src/commands/interrupt.rs".to_string(),
            "let held = airlock::staging::interrupt();".to_string(),
        ),
        (
            "src/durable.rs".to_string(),
            "use crate::fsio::create_at;".to_string(),
        ),
    ];
    let allowed = &[("src/commands/interrupt.rs", "staging", "signals")];
    assert_eq!(
        binary_faults(&sources, allowed),
        [
            "src/commands/keygen.rs: `airlock::durable::Place`: the binary does not reach into \
          `durable`; call a library operation that does the job"
                .to_string(),
            "src/commands/keygen.rs: `airlock::durable::Staged`: the binary does not reach into \
          `durable`; call a library operation that does the job"
                .to_string()
        ]
    );
    let stale = &[
        ("src/commands/interrupt.rs", "staging", "signals"),
        ("src/commands/secret.rs", "fsio", "gone"),
    ];
    assert!(
        binary_faults(&sources[1..], stale)
            .iter()
            .any(|f| f.contains("src/commands/secret.rs no longer uses `airlock::fsio`")),
    );
}

#[test]
fn rooms_kept_apart_stay_apart() {
    let sources = crate::source_rules::non_test_sources();
    let mut faults = apart_faults(&sources, APART);
    faults.extend(unnamed_faults(&sources, UNNAMED));
    assert!(faults.is_empty(), "{}", faults.join("\n"));
}

#[test]
fn a_planted_delta_in_the_writer_and_a_hashing_sink_fail() {
    let sources = vec![
        (
            "src/pack/write/writer.rs".to_string(),
            "use crate::delta::Counts;\nuse crate::pack::plan::Plan;".to_string(),
        ),
        ("src/pack/plan.rs".to_string(), String::new()),
        ("src/delta/mod.rs".to_string(), String::new()),
        (
            "src/unpack/new_target.rs".to_string(),
            "let h = sha2::Sha256::new();".to_string(),
        ),
    ];
    assert_eq!(
        apart_faults(&sources, APART),
        [
            "src/pack/write/writer.rs imports src/delta/mod.rs: nothing under src/pack/write/ \
             imports src/delta/ (the writer knows nothing of delta planning: `pack::plan` hands \
             it a `write::Stream`)",
            "src/pack/write/writer.rs imports src/pack/plan.rs: nothing under src/pack/write/ \
             imports src/pack/plan.rs (the writer knows nothing of delta planning: `pack::plan` \
             hands it a `write::Stream`)"
        ]
    );
    let found = unnamed_faults(&sources, UNNAMED);
    assert!(
        found.contains(
            &"src/unpack/new_target.rs uses `sha2::`: a target hashes no streamed file: \
              `entries::Verifier` checks each entry"
                .to_string()
        ),
        "{found:?}"
    );
}

/// What breaks "`commands/mod.rs` keeps no command body" in the text of `commands/mod.rs`:
/// each arm of `run`'s `match cli.command` hands the command to a file of its own (a `mod`
/// that `mod.rs` declares) in a few lines, one line a fault.
fn command_body_faults(text: &str) -> Vec<String> {
    let code = code_only(text);
    let mods: BTreeSet<&str> = code
        .lines()
        .filter_map(|l| l.strip_prefix("mod ")?.strip_suffix(';'))
        .collect();
    let Some(start) = code.find("match cli.command {") else {
        return vec!["commands/mod.rs: no `match cli.command {` in `run`".to_string()];
    };
    let body = &code[start..];
    let body = &body[..body.find("\n    };").unwrap_or(body.len())];
    let mut arms: Vec<Vec<&str>> = Vec::new();
    for line in body.lines().skip(1) {
        if line.starts_with("        Command::") {
            arms.push(vec![line]);
        } else if let Some(arm) = arms.last_mut() {
            arm.push(line);
        }
    }
    let mut faults = Vec::new();
    for arm in &arms {
        let text = arm.join("\n");
        let head = arm[0].trim();
        let hands_over = mods.iter().any(|m| {
            paths_after(&text, &format!("{m}::"))
                .iter()
                .any(|p| !p.is_empty())
        });
        if !hands_over {
            faults.push(format!(
                "commands/mod.rs: `{head}` calls no command file (a `mod` of commands/)"
            ));
        }
        if arm.len() > MAX_ARM_LINES {
            faults.push(format!(
                "commands/mod.rs: `{head}` is {} lines: a command's body goes in its own file",
                arm.len()
            ));
        }
    }
    faults
}

/// The most lines an arm of `commands::run` takes: the signal handler and the call.
const MAX_ARM_LINES: usize = 4;

#[test]
fn commands_mod_keeps_no_command_body() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/commands/mod.rs");
    let faults = command_body_faults(&std::fs::read_to_string(path).unwrap());
    assert!(faults.is_empty(), "{}", faults.join("\n"));
}

#[test]
fn a_planted_command_body_in_commands_mod_fails() {
    let text = "mod pack;\nfn run() {\n    let result = match cli.command {\n        \
                Command::Pack(a) => pack::run(*a, &ui),\n        Command::Completions { shell } \
                => {\n            let mut cmd = Cli::command();\n            let mut text = \
                Vec::new();\n            clap_complete::generate(shell, &mut cmd, \"airlock\", \
                &mut text);\n            return print_text(&text);\n        }\n    };\n}\n";
    assert_eq!(
        command_body_faults(text),
        [
            "commands/mod.rs: `Command::Completions { shell } => {` calls no command file (a \
             `mod` of commands/)",
            "commands/mod.rs: `Command::Completions { shell } => {` is 6 lines: a command's \
             body goes in its own file"
        ]
    );
}

/// Where a file is moved into place by a rename outside `fsio`, `durable` (`Staged`: every small
/// file replaced or created atomically, keys, signatures, roots, refs, `index.json`, traces) and
/// `staging` (a work directory published): `(file, why)`. Each moves what a work directory
/// holds, through directory handles; a new place that renames fails until it is listed here
/// (a small file goes through `durable::Staged` instead).
const RENAMES: &[(&str, &str)] = &[
    (
        "src/repair.rs",
        "a repaired volume over the damaged one, from repair's work directory",
    ),
    (
        "src/pack/write/writer.rs",
        "each volume-N.tmp to data.NNN inside BUNDLE.partial once the count is known",
    ),
    (
        "src/hfcache/layout.rs",
        "a receipt folder, written whole under a temporary name, placed in the cache's trace",
    ),
    (
        "src/unpack/hf.rs",
        "verified blobs, the snapshot (or its exchange) and a new repository, from the staging in .locks, each step in the undo log",
    ),
    (
        "src/unpack/oci_layout.rs",
        "a verified blob into blobs/sha256/ (content-addressed) from the staging in the layout",
    ),
];

/// The files that rename outside [`RENAMES`] and the entries there that no longer hold.
fn rename_faults(sources: &[(String, String)], allowed: &[(&str, &str)]) -> Vec<String> {
    let mut faults = Vec::new();
    let mut used = BTreeSet::new();
    let own = ["src/fsio/", "src/durable.rs", "src/staging.rs"];
    for (rel, text) in sources {
        if own.iter().any(|o| rel.starts_with(o)) {
            continue;
        }
        let code = code_only(text);
        if !(code.contains("rename_at(")
            || code.contains("rename_noreplace(")
            || code.contains("fsio::exchange("))
        {
            continue;
        }
        match allowed.iter().find(|(f, _)| f == rel) {
            Some((f, _)) => {
                used.insert(*f);
            }
            None => faults.push(format!(
                "{rel} moves a file into place by a rename: write a small file with \
                 durable::Staged, or list the file in RENAMES with the reason"
            )),
        }
    }
    for (f, _) in allowed.iter().filter(|(f, _)| !used.contains(f)) {
        faults.push(format!("{f} no longer renames: take it off RENAMES"));
    }
    faults
}

#[test]
fn small_files_are_replaced_by_durable_only() {
    let faults = rename_faults(&crate::source_rules::non_test_sources(), RENAMES);
    assert!(faults.is_empty(), "{}", faults.join("\n"));
}

#[test]
fn a_planted_rename_outside_durable_fails() {
    let sources = vec![
        (
            "src/signing.rs".to_string(),
            "fsio::rename_at(&d, \"k.tmp\", &d, \"k.pub\", RenameFlags::empty())?;".to_string(),
        ),
        (
            "src/durable.rs".to_string(),
            "fsio::rename_at(&d, &tmp, &d, name, flags)?;".to_string(),
        ),
    ];
    assert_eq!(
        rename_faults(&sources, &[]),
        [
            "src/signing.rs moves a file into place by a rename: write a small file with \
          durable::Staged, or list the file in RENAMES with the reason"
        ]
    );
}

/// Whether error.rs lets `?` turn an `io::Error` into an `Error` without the path it concerns
/// (ARCHITECTURE.md: every variant that concerns a file names it; `Error::io(path, e)` is the
/// one way).
fn io_error_without_path(error_rs: &str) -> bool {
    let code = code_only(error_rs)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    [
        "From<io::Error> for Error",
        "From<std::io::Error> for Error",
    ]
    .iter()
    .any(|i| code.contains(i))
}

#[test]
fn every_io_error_names_its_path() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/error.rs");
    assert!(
        !io_error_without_path(&std::fs::read_to_string(path).unwrap()),
        "src/error.rs converts an io::Error into an Error without its path: use Error::io(path, e)"
    );
    assert!(io_error_without_path(
        "impl From<std::io::Error>\n    for Error { fn from(e: io::Error) -> Self { todo!() } }"
    ));
}

/// The calls that end the process: only the binary makes them (the library reports through
/// its return values; `main` turns them into the exit code).
const EXITING: &[&str] = &["process::exit(", "process::abort("];

/// The library files that end the process, one line a call.
fn exiting_faults(sources: &[(String, String)]) -> Vec<String> {
    let mut faults = Vec::new();
    for (rel, text) in sources.iter().filter(|(rel, _)| !in_binary(rel)) {
        for (n, line) in code_only(text).lines().enumerate() {
            for call in EXITING.iter().filter(|c| line.contains(*c)) {
                faults.push(format!(
                    "{rel}:{}: `{call}`: the library never exits; return an error",
                    n + 1
                ));
            }
        }
    }
    faults
}

#[test]
fn the_library_never_exits() {
    let faults = exiting_faults(&crate::source_rules::non_test_sources());
    assert!(faults.is_empty(), "{}", faults.join("\n"));
}

#[test]
fn a_planted_exit_in_the_library_fails() {
    let sources = vec![
        (
            "src/unpack/dir.rs".to_string(),
            "fn f() {\n    std::process::exit(3);\n}".to_string(),
        ),
        (
            "src/commands/interrupt.rs".to_string(),
            "std::process::exit(130);".to_string(),
        ),
    ];
    assert_eq!(
        exiting_faults(&sources),
        ["src/unpack/dir.rs:2: `process::exit(`: the library never exits; return an error"]
    );
}

#[test]
fn the_module_map_holds() {
    let rows = module_map();
    let sources = crate::source_rules::non_test_sources();
    let faults = faults(&rows, &sources);
    assert!(
        faults.is_empty(),
        "the code breaks the module map of docs/ARCHITECTURE.md (mend the import, or the table \
         where the import is right):\n{}",
        faults.join("\n")
    );
}

#[test]
fn grouped_uses_and_inline_paths_are_read() {
    let code = code_only(
        "use crate::{a, b::{c, self}, d::e as f};\n// crate::g\nlet x = \"crate::h\"; \
         crate::i::j(); let c = '\"'; crate::k;",
    );
    assert_eq!(
        paths_after(&code, "crate::"),
        ["a", "b::c", "b", "d::e", "i::j", "k"]
    );
}

#[test]
fn a_planted_upward_import_and_circle_fail() {
    let rows = vec![
        Row {
            floor: 0,
            modules: vec!["low".into()],
            uses: vec![],
        },
        Row {
            floor: 1,
            modules: vec!["high".into()],
            uses: vec!["low".into()],
        },
    ];
    let ok = vec![
        ("src/low.rs".to_string(), "pub fn f() {}".to_string()),
        ("src/high.rs".to_string(), "use crate::low::f;".to_string()),
    ];
    assert_eq!(faults(&rows, &ok), Vec::<String>::new());
    let stale = vec![
        ("src/low.rs".to_string(), String::new()),
        ("src/high.rs".to_string(), "fn g() {}".to_string()),
    ];
    assert_eq!(
        faults(&rows, &stale),
        ["the Uses cell of `high` names `low`, which none of its files imports: take it off"]
    );
    let up = vec![
        ("src/low.rs".to_string(), "use crate::high::g;".to_string()),
        ("src/high.rs".to_string(), "use crate::low::f;".to_string()),
    ];
    let found = faults(&rows, &up);
    assert!(
        found
            .iter()
            .any(|f| f.contains("src/low.rs: `crate::high::g`")),
        "{found:?}"
    );
    assert!(found.iter().any(|f| f.contains("circle")), "{found:?}");
    let unnamed = vec![
        ("src/low.rs".to_string(), String::new()),
        (
            "src/high.rs".to_string(),
            "use crate::{low, other::x};".to_string(),
        ),
        ("src/other.rs".to_string(), String::new()),
    ];
    let found = faults(&rows, &unnamed);
    assert!(
        found.iter().any(|f| f.contains("src/other is in no row")),
        "{found:?}"
    );
    let inner = vec![
        ("src/low.rs".to_string(), String::new()),
        ("src/high/mod.rs".to_string(), "mod a; mod b;".to_string()),
        ("src/high/a.rs".to_string(), "use super::b::x;".to_string()),
        (
            "src/high/b.rs".to_string(),
            "use crate::high::a::y;".to_string(),
        ),
    ];
    let found = faults(&rows, &inner);
    assert!(
        found
            .iter()
            .any(|f| f.contains("src/high/a.rs -> src/high/b.rs, src/high/b.rs -> src/high/a.rs")),
        "{found:?}"
    );
}
