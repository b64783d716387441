//! The in-toto statement an OMS v1.0 signature signs (the DSSE payload).
//!
//! ```text
//! _type          https://in-toto.io/Statement/v1
//! subject        [ { name: the model's name, digest: { sha256: ROOT } } ]
//! predicateType  https://model_signing/signature/v1.0
//! predicate      { serialization: { method: "files", hash_type: "sha256",
//!                                   allow_symlinks: false, ignore_paths: [...] },
//!                  resources: [ { name: PATH, algorithm: "sha256", digest: HEX }, ... ] }
//! ```
//!
//! `ROOT` is the SHA-256 of the resources' digests (the raw 32 bytes each) concatenated in the
//! order they are listed; the writer lists them sorted by path, compared component by
//! component as Python's `PurePosixPath` does (`a/b` before `a-b`). The reference writes the
//! JSON with `json.dumps(indent=2)` and every non-ASCII character escaped; [`build`] writes the
//! same layout, so an airlock signature reads like one from `model_signing sign`. (The
//! reference's key order inside `predicate` varies between runs; readers must not depend on
//! it, and [`parse`] does not.)
//!
//! [`parse`] follows the reference verifier and is stricter where the reference would accept
//! something ambiguous: the predicate type must be v1.0 (the pre-1.0 `Digests/v0.1` form, which
//! does not bind the list of files, is refused), the method `files` and the hash `sha256`
//! (airlock does not verify `shards`, `blake2` or `blake3` signatures), every resource name a
//! plain relative path (no `..`, `.`, empty component, leading `/` or NUL; the reference would
//! normalise some and let two names collapse into one), no name twice, at least one resource,
//! every digest 64 hex digits, and the subject digest equal to the root computed from the
//! resources. Fields the reference ignores are ignored.

use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::hexdigest;

/// The in-toto statement type.
pub(crate) const STATEMENT_TYPE: &str = "https://in-toto.io/Statement/v1";
/// The OMS v1.0 predicate type.
pub(crate) const PREDICATE_TYPE: &str = "https://model_signing/signature/v1.0";
/// The pre-1.0 predicate type (refused).
pub(crate) const PREDICATE_TYPE_V01: &str = "https://model_signing/Digests/v0.1";

/// One signed file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resource {
    /// Its path relative to the model directory, `/`-separated.
    pub name: String,
    /// Its SHA-256.
    pub sha256: [u8; 32],
}

/// A statement, parsed and checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Statement {
    /// `subject[0].name`: the model's name (informative).
    pub model_name: String,
    /// `subject[0].digest.sha256`.
    pub root: [u8; 32],
    /// `serialization.allow_symlinks`.
    pub allow_symlinks: bool,
    /// `serialization.ignore_paths`, as written.
    pub ignore_paths: Vec<String>,
    /// The resources, in the order listed.
    pub resources: Vec<Resource>,
}

/// Orders paths as Python's `PurePosixPath` does: component by component.
pub fn path_order(a: &str, b: &str) -> std::cmp::Ordering {
    a.split('/').cmp(b.split('/'))
}

/// The root digest of resources in the given order.
pub fn root_of(resources: &[Resource]) -> [u8; 32] {
    let mut h = Sha256::new();
    for r in resources {
        h.update(r.sha256);
    }
    h.finalize().into()
}

/// A JSON string as Python's `json.dumps(..., ensure_ascii=True)` writes it (the writer TUF's
/// canonical form uses too).
pub(crate) fn py_json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    crate::trust::json::ascii_string(s, &mut out);
    out
}

/// Writes the statement for `resources` (sorted here by [`path_order`]) with the layout of the
/// reference. `ignore_paths` is recorded as given.
pub fn build(model_name: &str, mut resources: Vec<Resource>, ignore_paths: &[String]) -> Vec<u8> {
    resources.sort_by(|a, b| path_order(&a.name, &b.name));
    let root = hex::encode(root_of(&resources));
    let q = py_json_string;
    let mut s = String::new();
    s.push_str("{\n");
    s.push_str(&format!("  \"_type\": {},\n", q(STATEMENT_TYPE)));
    s.push_str("  \"subject\": [\n    {\n");
    s.push_str(&format!("      \"name\": {},\n", q(model_name)));
    s.push_str(&format!(
        "      \"digest\": {{\n        \"sha256\": {}\n      }}\n",
        q(&root)
    ));
    s.push_str("    }\n  ],\n");
    s.push_str(&format!("  \"predicateType\": {},\n", q(PREDICATE_TYPE)));
    s.push_str("  \"predicate\": {\n    \"serialization\": {\n");
    s.push_str("      \"method\": \"files\",\n      \"hash_type\": \"sha256\",\n");
    if ignore_paths.is_empty() {
        s.push_str("      \"allow_symlinks\": false\n");
    } else {
        s.push_str("      \"allow_symlinks\": false,\n      \"ignore_paths\": [\n");
        let items: Vec<String> = ignore_paths
            .iter()
            .map(|p| format!("        {}", q(p)))
            .collect();
        s.push_str(&items.join(",\n"));
        s.push_str("\n      ]\n");
    }
    s.push_str("    },\n");
    if resources.is_empty() {
        s.push_str("    \"resources\": []\n");
    } else {
        s.push_str("    \"resources\": [\n");
        let items: Vec<String> = resources
            .iter()
            .map(|r| {
                format!(
                    "      {{\n        \"name\": {},\n        \"algorithm\": \"sha256\",\n        \"digest\": {}\n      }}",
                    q(&r.name),
                    q(&hex::encode(r.sha256))
                )
            })
            .collect();
        s.push_str(&items.join(",\n"));
        s.push_str("\n    ]\n");
    }
    s.push_str("  }\n}");
    s.into_bytes()
}

#[derive(Deserialize)]
struct RawStatement {
    #[serde(rename = "_type")]
    kind: String,
    subject: Vec<RawSubject>,
    #[serde(rename = "predicateType")]
    predicate_type: String,
    predicate: Option<RawPredicate>,
}

#[derive(Deserialize)]
struct RawSubject {
    name: String,
    digest: RawDigest,
}

#[derive(Deserialize)]
struct RawDigest {
    sha256: String,
}

#[derive(Deserialize)]
struct RawPredicate {
    serialization: RawSerialization,
    resources: Vec<RawResource>,
}

#[derive(Deserialize)]
struct RawSerialization {
    method: String,
    hash_type: String,
    allow_symlinks: bool,
    #[serde(default)]
    ignore_paths: Vec<String>,
    #[serde(default)]
    shard_size: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct RawResource {
    name: String,
    algorithm: String,
    digest: String,
}

/// Why a name cannot be a resource's (issue 34 item 6: typed). `Display` is the reason after
/// "lists the resource " (or "--name ").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// The name is empty.
    #[error("an empty name")]
    Empty,
    /// The name starts with `/`.
    #[error("{}, an absolute path", crate::display::quote(.0))]
    Absolute(String),
    /// The name holds a NUL.
    #[error("{}, which holds a NUL", crate::display::quote(.0))]
    Nul(String),
    /// A component is empty.
    #[error("{}, which has an empty component", crate::display::quote(.0))]
    EmptyComponent(String),
    /// A component is `.`.
    #[error("{}, which has a '.' component", crate::display::quote(.0))]
    Dot(String),
    /// A component is `..`.
    #[error("{}, which has a '..' component (a path out of the model)", crate::display::quote(.0))]
    DotDot(String),
}

/// Why a statement is refused (issue 34 item 6: typed). `Display` is the reason as the user
/// reads it after the signature's name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StatementError {
    /// Not the in-toto JSON expected; the parser's reason.
    #[error("holds a statement that is not the in-toto JSON expected: {0}")]
    Json(String),
    /// Another statement type.
    #[error("holds a statement of type {}, not {STATEMENT_TYPE:?}", crate::display::quote(.0))]
    Type(String),
    /// The pre-1.0 predicate.
    #[error(
        "is a pre-1.0 model signature (predicate {PREDICATE_TYPE_V01:?}), which does not bind the list of files; airlock verifies OMS v1.0 signatures only: sign the model again with model_signing 1.0 or later"
    )]
    PreV1,
    /// Another predicate type.
    #[error("has the predicate type {}, not {PREDICATE_TYPE:?}", crate::display::quote(.0))]
    PredicateType(String),
    /// Not exactly one subject (how many).
    #[error("has {0} subjects, not one")]
    Subjects(usize),
    /// The subject digest is not 64 hex digits.
    #[error("has a subject digest that is not 64 hex digits")]
    SubjectDigest,
    /// No predicate.
    #[error("has no predicate")]
    NoPredicate,
    /// The `shards` serialization.
    #[error(
        "was made with the `shards` serialization, which airlock does not verify (it verifies `files`)"
    )]
    Shards,
    /// Another serialization method.
    #[error("names the serialization method {}, not \"files\"", crate::display::quote(.0))]
    Method(String),
    /// Another hash.
    #[error("hashes with {}; airlock verifies sha256 signatures only", crate::display::quote(.0))]
    HashType(String),
    /// An ignore path that covers the whole model.
    #[error(
        "lists the ignore path {}, which would leave every file of the model unsigned",
        crate::display::quote(.0)
    )]
    IgnoresAll(String),
    /// No resource.
    #[error("signs no file (its resource list is empty)")]
    NoResource,
    /// A resource's name is refused.
    #[error("lists the resource {0}")]
    ResourceName(NameError),
    /// A resource hashed with another algorithm (name, algorithm).
    #[error(
        "lists {} with the algorithm {}, not sha256",
        crate::display::quote(.name),
        crate::display::quote(.algorithm)
    )]
    ResourceAlgorithm {
        /// The resource.
        name: String,
        /// Its algorithm.
        algorithm: String,
    },
    /// A resource digest that is not 64 hex digits.
    #[error("lists {} with a digest that is not 64 hex digits", crate::display::quote(.0))]
    ResourceDigest(String),
    /// A resource listed twice.
    #[error("lists {} twice", crate::display::quote(.0))]
    Twice(String),
    /// The subject digest is not the resources' root (subject, computed).
    #[error(
        "is inconsistent: its subject digest is {}, its resources hash to {}",
        hex::encode(.subject),
        hex::encode(.computed)
    )]
    Inconsistent {
        /// The subject digest.
        subject: [u8; 32],
        /// What the resources hash to.
        computed: [u8; 32],
    },
}

/// Why a name cannot be a resource's (or a plain relative path's).
pub fn check_name(name: &str) -> Result<(), NameError> {
    if name.is_empty() {
        return Err(NameError::Empty);
    }
    if name.starts_with('/') {
        return Err(NameError::Absolute(name.into()));
    }
    if name.contains('\0') {
        return Err(NameError::Nul(name.into()));
    }
    for c in name.split('/') {
        match c {
            "" => {
                return Err(NameError::EmptyComponent(name.into()));
            }
            "." => {
                return Err(NameError::Dot(name.into()));
            }
            ".." => {
                return Err(NameError::DotDot(name.into()));
            }
            _ => {}
        }
    }
    Ok(())
}

fn hex32(s: &str) -> Option<[u8; 32]> {
    if !hexdigest::is_sha256(s) {
        return None;
    }
    let mut out = [0u8; 32];
    hex::decode_to_slice(s, &mut out).ok()?;
    Some(out)
}

/// Parses and checks a statement (module documentation). `Err` says what is wrong.
pub fn parse(payload: &[u8]) -> Result<Statement, StatementError> {
    let raw: RawStatement = serde_json::from_slice(payload)
        .map_err(|e| StatementError::Json(crate::display::json_error(&e)))?;
    if raw.kind != STATEMENT_TYPE {
        return Err(StatementError::Type(raw.kind));
    }
    if raw.predicate_type == PREDICATE_TYPE_V01 {
        return Err(StatementError::PreV1);
    }
    if raw.predicate_type != PREDICATE_TYPE {
        return Err(StatementError::PredicateType(raw.predicate_type));
    }
    let [subject] =
        <[RawSubject; 1]>::try_from(raw.subject).map_err(|s| StatementError::Subjects(s.len()))?;
    let root = hex32(&subject.digest.sha256).ok_or(StatementError::SubjectDigest)?;
    let predicate = raw.predicate.ok_or(StatementError::NoPredicate)?;
    let ser = predicate.serialization;
    if ser.method == "shards" || ser.shard_size.is_some() {
        return Err(StatementError::Shards);
    }
    if ser.method != "files" {
        return Err(StatementError::Method(ser.method));
    }
    if ser.hash_type != "sha256" {
        return Err(StatementError::HashType(ser.hash_type));
    }
    for p in &ser.ignore_paths {
        let canon = canonical_ignore(p);
        if canon.as_deref() == Some("") {
            return Err(StatementError::IgnoresAll(p.clone()));
        }
    }
    if predicate.resources.is_empty() {
        return Err(StatementError::NoResource);
    }
    let mut resources = Vec::with_capacity(predicate.resources.len());
    let mut seen = std::collections::HashSet::new();
    for r in predicate.resources {
        check_name(&r.name).map_err(StatementError::ResourceName)?;
        if r.algorithm != "sha256" {
            return Err(StatementError::ResourceAlgorithm {
                name: r.name,
                algorithm: r.algorithm,
            });
        }
        let sha256 =
            hex32(&r.digest).ok_or_else(|| StatementError::ResourceDigest(r.name.clone()))?;
        if !seen.insert(r.name.clone()) {
            return Err(StatementError::Twice(r.name));
        }
        resources.push(Resource {
            name: r.name,
            sha256,
        });
    }
    let computed = root_of(&resources);
    if computed != root {
        return Err(StatementError::Inconsistent {
            subject: root,
            computed,
        });
    }
    Ok(Statement {
        model_name: subject.name,
        root,
        allow_symlinks: ser.allow_symlinks,
        ignore_paths: ser.ignore_paths,
        resources,
    })
}

/// An ignore path as the reference resolves it against the model directory (lexically, as
/// `PurePosixPath` does): `None` for one that names nothing inside the model (absolute, or
/// climbing with `..`), `Some("")` for the model directory itself.
pub fn canonical_ignore(p: &str) -> Option<String> {
    if p.starts_with('/') {
        return None;
    }
    let parts: Vec<&str> = p
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect();
    if parts.contains(&"..") {
        return None;
    }
    Some(parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(name: &str, byte: u8) -> Resource {
        Resource {
            name: name.into(),
            sha256: [byte; 32],
        }
    }

    #[test]
    fn build_then_parse_round_trips_and_sorts_by_component() {
        let payload = build(
            "m\u{e9}",
            vec![r("a-b", 1), r("a/b", 2), r("\u{e9}.txt", 3)],
            &["model.sig".into()],
        );
        let text = String::from_utf8(payload.clone()).unwrap();
        assert!(text.contains("\"m\\u00e9\""), "{text}");
        let s = parse(&payload).unwrap();
        let names: Vec<&str> = s.resources.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["a/b", "a-b", "\u{e9}.txt"]);
        assert_eq!(s.root, root_of(&s.resources));
        assert_eq!(s.model_name, "m\u{e9}");
    }

    #[test]
    fn hostile_statements_are_refused_with_the_reason() {
        let good = String::from_utf8(build("m", vec![r("a", 1)], &[])).unwrap();
        let cases = [
            (good.replace("\"a\"", "\"../a\""), "'..'"),
            (good.replace("\"a\"", "\"/a\""), "absolute"),
            (good.replace("signature/v1.0", "Digests/v0.1"), "pre-1.0"),
            (good.replace("\"files\"", "\"shards\""), "shards"),
            (
                good.replace("\"hash_type\": \"sha256\"", "\"hash_type\": \"blake3\""),
                "blake3",
            ),
            (
                good.replace(&"01".repeat(32), &"02".repeat(32)),
                "inconsistent",
            ),
            (
                good.replace(
                    "\"sha256\",\n        \"digest\"",
                    "\"sha512\",\n        \"digest\"",
                ),
                "sha512",
            ),
            ("{".to_string(), "not the in-toto JSON"),
        ];
        for (text, want) in cases {
            let err = parse(text.as_bytes()).unwrap_err().to_string();
            assert!(err.contains(want), "{want}: {err}");
        }
    }

    #[test]
    fn python_escapes_match_json_dumps_ensure_ascii() {
        assert_eq!(
            py_json_string("a\"\\\n\u{7f}\u{1F600}"),
            "\"a\\\"\\\\\\n\\u007f\\ud83d\\ude00\""
        );
    }
}
