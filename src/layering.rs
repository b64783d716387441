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
//! - the binary (`src/main.rs`, `src/cli.rs`, `src/commands/`) reaching into the file layers
//!   (`fsio`, `durable`, `staging`) outside the exceptions listed with their reasons.
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
    for (rel, text) in sources {
        let code = code_only(text);
        let binary = in_binary(rel);
        let mut targets = Vec::new();
        for path in paths_after(&code, "crate::") {
            targets.push((path.clone(), file_of(&files, "src/", &path)));
        }
        for path in paths_after(&code, "super::") {
            targets.push((path.clone(), file_of(&files, &parent_root(rel), &path)));
        }
        for path in paths_after(&code, "airlock::") {
            targets.push((path.clone(), file_of(&files, "src/", &path)));
        }
        let edges = graph.entry(rel.clone()).or_default();
        for (_, file) in &targets {
            if let Some(f) = file
                && f != rel
            {
                edges.insert(f.clone());
            }
        }
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
            } else if !my_row
                .uses
                .iter()
                .any(|u| path == *u || path.starts_with(&format!("{u}::")))
            {
                faults.push(format!(
                    "{rel}: `crate::{path}`: `{me}`'s Uses cell in the module map does not \
                     name `{target}` (or the part of it used)"
                ));
            }
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
];

/// Where the binary still reaches them: `(file, module, why)`. An entry that no longer holds
/// fails too, so the list cannot go stale.
const BINARY_REACHES: &[(&str, &str, &str)] = &[(
    "src/commands/interrupt.rs",
    "staging",
    "the signal handler removes this process's work directories: the signal thread is the binary's",
)];

/// What the binary reaches below it that [`BINARY_REACHES`] does not allow, and the entries
/// there that no longer hold, one line a fault.
fn binary_faults(sources: &[(String, String)], allowed: &[(&str, &str, &str)]) -> Vec<String> {
    let mut faults = Vec::new();
    let mut used = BTreeSet::new();
    for (rel, text) in sources.iter().filter(|(rel, _)| in_binary(rel)) {
        let code = code_only(text);
        for path in paths_after(&code, "airlock::") {
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
