//! Property tests of the parsers of what other parties write (issue 36, structural): the TUF
//! root (`trust::root`, over `trust::json`), the OMS Sigstore bundle and its in-toto statement
//! (`oms::bundle`, `oms::statement`) and a credential helper's answer (`oci::auth`).
//!
//! Each property runs in a child copy of this test binary whose address space is capped
//! (`RLIMIT_AS`, [`ADDRESS_SPACE`]; a 1 GiB reservation must fail in it), so an allocation sized from a hostile length fails the
//! child instead of passing on a machine with memory to spare; a panic fails the case, a stack
//! overflow (deep nesting) kills the child. Every input is rejected with the parser's error,
//! a non-empty message of bounded length, or accepted with what its signature proves.
//!
//! The inputs are mutations of valid seeds (real roots made and signed here, the reference
//! project's OMS vectors, statements written as the reference writes them, a helper's answer):
//! byte edits, hostile splices (deep nesting, long strings, huge numbers, NUL and surrogate
//! escapes, duplicate keys) and edits of the parsed document (a value anywhere replaced by a
//! hostile one, a key removed or added). `AIRLOCK_FUZZ_CASES` sets the cases per parser
//! (default [`CASES`]: a few seconds in all); a deep run sets it higher (SECURITY.md section 8
//! has the figures).

use std::path::Path;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::Value as Json;

use crate::capped_child::{cap_address_space, run_capped_child};
use crate::oms::{self, TrustMaterial, bundle, statement};
use crate::trust::root::{self, Root, RootKey};

/// Address space of the child: the test binary, its one test thread and the largest input
/// (a root at its 1 MiB limit) fit many times over; an allocation sized from a hostile length
/// does not.
const ADDRESS_SPACE: u64 = 512 << 20;
/// Cases per parser in an ordinary test run.
const CASES: u32 = 1000;
/// The longest error message a parser may give for an input it refuses: a message quotes
/// names, not documents.
const MAX_MESSAGE: usize = 2048;

fn cases() -> u32 {
    std::env::var("AIRLOCK_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(CASES)
}

/// What a run saw, printed by the child for the parent (and SECURITY.md).
#[derive(Default)]
struct Tally {
    cases: u64,
    accepted: u64,
    longest_input: usize,
    longest_message: usize,
}

impl Tally {
    fn saw(&mut self, input: &[u8], result: Result<(), &str>) -> Result<(), TestCaseError> {
        self.cases += 1;
        self.longest_input = self.longest_input.max(input.len());
        match result {
            Ok(()) => self.accepted += 1,
            Err(m) => {
                prop_assert!(!m.trim().is_empty(), "an empty message");
                prop_assert!(
                    m.len() <= MAX_MESSAGE,
                    "a message of {} bytes for an input of {}: {}",
                    m.len(),
                    input.len(),
                    crate::display::escape_bounded(m, 400)
                );
                self.longest_message = self.longest_message.max(m.len());
            }
        }
        Ok(())
    }

    fn report(&self, what: &str, started: std::time::Instant) {
        eprintln!(
            "fuzz {what}: {} inputs, {} parses, {} accepted, longest input {} bytes, longest message {} bytes, {:.1} s",
            cases(),
            self.cases,
            self.accepted,
            self.longest_input,
            self.longest_message,
            started.elapsed().as_secs_f64()
        );
    }
}

// ---- Mutations -------------------------------------------------------------------------

/// Text spliced into a document: each is a classic way to make a JSON reader spend memory,
/// recurse, or disagree with another reader.
fn hostile_text() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        (1usize..20_000).prop_map(|n| "[".repeat(n).into_bytes()),
        (1usize..20_000).prop_map(|n| "{\"a\":".repeat(n).into_bytes()),
        (1usize..70_000).prop_map(|n| format!("\"{}\"", "a".repeat(n)).into_bytes()),
        Just(b"18446744073709551616".to_vec()),
        Just(b"-9223372036854775809".to_vec()),
        Just(b"1e999999".to_vec()),
        Just(b"-0".to_vec()),
        Just(b"0.5".to_vec()),
        Just(b"\"\\u0000\"".to_vec()),
        Just(b"\"\\ud800\"".to_vec()),
        Just(b"\"\x1b[2K\xe2\x80\xae\"".to_vec()),
        Just(b"\xef\xbb\xbf".to_vec()),
        Just(b"\xff\xfe".to_vec()),
        Just(b"{\"a\":1,\"a\":2}".to_vec()),
        Just(b"null".to_vec()),
        Just(b"[]".to_vec()),
        Just(b"{}".to_vec()),
        prop::collection::vec(any::<u8>(), 0..64),
    ]
}

/// A value that replaces one in a parsed document.
fn hostile_value() -> impl Strategy<Value = Json> {
    prop_oneof![
        Just(Json::Null),
        any::<bool>().prop_map(Json::Bool),
        any::<i64>().prop_map(Json::from),
        prop_oneof![Just(u64::MAX), Just(0u64), Just(1u64), Just(1 << 53)].prop_map(Json::from),
        Just(serde_json::json!(1.5)),
        ".{0,40}".prop_map(Json::String),
        (1usize..70_000).prop_map(|n| Json::String("x".repeat(n))),
        Just(Json::String("\u{1b}]52;c;AAAA\u{7}\u{202e}".into())),
        Just(Json::String(String::new())),
        prop::collection::vec(any::<u8>().prop_map(Json::from), 0..8).prop_map(Json::Array),
        (1usize..5000).prop_map(|n| Json::Array(vec![Json::Null; n])),
        (1usize..3000).prop_map(|n| {
            Json::Object((0..n).map(|i| (format!("k{i}"), Json::from(i))).collect())
        }),
        (1usize..120).prop_map(|depth| {
            let mut v = Json::Null;
            for _ in 0..depth {
                v = Json::Array(vec![v]);
            }
            v
        }),
    ]
}

#[derive(Debug, Clone)]
enum Edit {
    /// A byte overwritten.
    Byte(usize, u8),
    /// Bytes removed from a position.
    Delete(usize, usize),
    /// Hostile text inserted at a position.
    Insert(usize, Vec<u8>),
    /// Cut short.
    Truncate(usize),
    /// The `n`-th value of the parsed document (in document order) replaced.
    Replace(usize, Json),
    /// The `n`-th object loses a key.
    RemoveKey(usize, usize),
    /// The `n`-th object gains a key (a known one from another level, or a new one).
    AddKey(usize, String, Json),
    /// The `n`-th string value given a copy of itself appended (a longer string of the same
    /// alphabet: hex, base64, a date).
    Double(usize),
}

fn edit() -> impl Strategy<Value = Edit> {
    let at = prop_oneof![0usize..512, any::<usize>()];
    let key = prop_oneof![
        prop::sample::select(
            &[
                "keyids",
                "threshold",
                "keytype",
                "scheme",
                "keyval",
                "public",
                "sig",
                "keyid",
                "mediaType",
                "payload",
                "payloadType",
                "signatures",
                "dsseEnvelope",
                "verificationMaterial",
                "publicKey",
                "hint",
                "x509CertificateChain",
                "rawBytes",
                "_type",
                "subject",
                "predicate",
                "predicateType",
                "resources",
                "digest",
                "sha256",
                "Username",
                "Secret",
                "ServerURL",
            ][..]
        )
        .prop_map(String::from),
        "[a-z_]{1,12}",
    ];
    prop_oneof![
        3 => (at.clone(), any::<u8>()).prop_map(|(a, b)| Edit::Byte(a, b)),
        1 => (at.clone(), 1usize..64).prop_map(|(a, n)| Edit::Delete(a, n)),
        2 => (at.clone(), hostile_text()).prop_map(|(a, t)| Edit::Insert(a, t)),
        1 => any::<usize>().prop_map(Edit::Truncate),
        6 => (any::<usize>(), hostile_value()).prop_map(|(n, v)| Edit::Replace(n, v)),
        2 => (any::<usize>(), any::<usize>()).prop_map(|(n, k)| Edit::RemoveKey(n, k)),
        2 => (any::<usize>(), key, hostile_value()).prop_map(|(n, k, v)| Edit::AddKey(n, k, v)),
        2 => any::<usize>().prop_map(Edit::Double),
    ]
}

/// Calls `f` on the `n`-th value (modulo their count) of `doc` that `pick` accepts, in
/// document order.
fn with_nth(doc: &mut Json, n: usize, pick: &dyn Fn(&Json) -> bool, f: &mut dyn FnMut(&mut Json)) {
    fn count(v: &Json, pick: &dyn Fn(&Json) -> bool) -> usize {
        let own = usize::from(pick(v));
        own + match v {
            Json::Array(a) => a.iter().map(|x| count(x, pick)).sum(),
            Json::Object(o) => o.values().map(|x| count(x, pick)).sum(),
            _ => 0,
        }
    }
    fn visit(
        v: &mut Json,
        n: &mut usize,
        pick: &dyn Fn(&Json) -> bool,
        f: &mut dyn FnMut(&mut Json),
    ) -> bool {
        if pick(v) {
            if *n == 0 {
                f(v);
                return true;
            }
            *n -= 1;
        }
        match v {
            Json::Array(a) => a.iter_mut().any(|x| visit(x, n, pick, f)),
            Json::Object(o) => o.values_mut().any(|x| visit(x, n, pick, f)),
            _ => false,
        }
    }
    let total = count(doc, pick);
    if total > 0 {
        let mut n = n % total;
        visit(doc, &mut n, pick, f);
    }
}

/// `seed` with `edits` applied: the document edits on the parsed seed (when it parses), then
/// the byte edits on its text.
fn apply(seed: &[u8], edits: &[Edit]) -> Vec<u8> {
    let mut bytes = seed.to_vec();
    if let Ok(mut doc) = serde_json::from_slice::<Json>(seed) {
        let mut changed = false;
        for e in edits {
            changed = true;
            match e {
                Edit::Replace(n, v) => with_nth(&mut doc, *n, &|_| true, &mut |x| *x = v.clone()),
                Edit::RemoveKey(n, k) => with_nth(&mut doc, *n, &Json::is_object, &mut |x| {
                    let o = x.as_object_mut().expect("picked");
                    if let Some(key) = o.keys().nth(k % o.len().max(1)).cloned() {
                        o.remove(&key);
                    }
                }),
                Edit::AddKey(n, k, v) => with_nth(&mut doc, *n, &Json::is_object, &mut |x| {
                    x.as_object_mut()
                        .expect("picked")
                        .insert(k.clone(), v.clone());
                }),
                Edit::Double(n) => with_nth(&mut doc, *n, &Json::is_string, &mut |x| {
                    let s = x.as_str().expect("picked").to_string();
                    *x = Json::String(s.repeat(2));
                }),
                _ => changed = false,
            }
        }
        if changed {
            bytes = serde_json::to_vec(&doc).expect("a value serializes");
        }
    }
    for e in edits {
        if bytes.is_empty() {
            break;
        }
        match e {
            Edit::Byte(at, b) => {
                let at = at % bytes.len();
                bytes[at] = *b;
            }
            Edit::Delete(at, n) => {
                let at = at % bytes.len();
                let end = (at + n).min(bytes.len());
                bytes.drain(at..end);
            }
            Edit::Insert(at, t) => {
                let at = at % (bytes.len() + 1);
                bytes.splice(at..at, t.iter().copied());
            }
            Edit::Truncate(at) => bytes.truncate(at % (bytes.len() + 1)),
            _ => {}
        }
    }
    bytes
}

/// A seed chosen from `seeds` with one to four edits.
fn mutated(seeds: Vec<Vec<u8>>) -> impl Strategy<Value = Vec<u8>> {
    (
        prop::sample::select(seeds),
        prop::collection::vec(edit(), 1..5),
    )
        .prop_map(|(seed, edits)| apply(&seed, &edits))
}

/// Fails the test with the reason and the start of the input (a hostile input can be
/// megabytes: printed whole, it buries the reason).
fn finish(result: Result<(), proptest::test_runner::TestError<Vec<u8>>>) {
    use proptest::test_runner::TestError;
    match result {
        Ok(()) => {}
        Err(TestError::Abort(why)) => panic!("aborted: {why}"),
        Err(TestError::Fail(why, input)) => panic!(
            "{why}\ninput ({} bytes) begins: {}",
            input.len(),
            crate::display::escape_bounded(
                &String::from_utf8_lossy(&input[..input.len().min(600)]),
                1200
            )
        ),
    }
}

fn runner() -> TestRunner {
    TestRunner::new(Config {
        cases: cases(),
        failure_persistence: None,
        // Shrinking a hostile document is slow and the failure is printed whole anyway.
        max_shrink_iters: 64,
        ..Config::default()
    })
}

// ---- The TUF root ----------------------------------------------------------------------

/// Valid roots, signed: one key, 2 of 3, different keys in the two roles.
fn root_seeds() -> Vec<Vec<u8>> {
    let keys: Vec<crate::keys::SecretKey> = (0..4)
        .map(|_| crate::keys::SecretKey::generate().unwrap())
        .collect();
    let pk = |k: &crate::keys::SecretKey| RootKey::from_minisign(&k.public_key());
    let mut out = Vec::new();
    let one = [pk(&keys[0])];
    let three = [pk(&keys[0]), pk(&keys[1]), pk(&keys[2])];
    let other = [pk(&keys[3])];
    for (version, targets, root_role) in [
        (1, (&one[..], 1), (&one[..], 1)),
        (2, (&three[..], 2), (&three[..], 2)),
        (7, (&three[..], 3), (&other[..], 1)),
    ] {
        let mut r = Root::build(version, 4_102_444_800, targets, root_role).unwrap();
        for k in &keys {
            r.sign(k);
        }
        out.push(r.to_bytes());
    }
    out
}

#[test]
fn the_tuf_root_parser_survives_hostile_roots_in_a_memory_capped_process() {
    let figures = run_capped_child("parse_fuzz::root_child", ADDRESS_SPACE);
    assert!(figures.contains("fuzz root:"), "{figures}");
}

#[test]
#[ignore = "the body of the_tuf_root_parser_survives_hostile_roots_in_a_memory_capped_process"]
fn root_child() {
    cap_address_space();
    let started = std::time::Instant::now();
    let seeds = root_seeds();
    let trusted: Vec<Root> = seeds.iter().map(|s| Root::parse(s).unwrap()).collect();
    let tally = std::cell::RefCell::new(Tally::default());
    finish(runner().run(&mutated(seeds), |mut bytes| {
        // What the reader hands over: at most the limit (a longer file is refused unread).
        bytes.truncate(root::MAX_ROOT_BYTES as usize);
        match Root::parse(&bytes) {
            Ok(r) => {
                // Whatever parses writes back to a root that parses to the same signed
                // content, and verifies against a trusted root only as its signatures
                // allow: a signature counts only over the canonical bytes it signed.
                let again = Root::parse(&r.to_bytes())
                    .map_err(|e| TestCaseError::fail(format!("rewritten: {e}")))?;
                prop_assert_eq!(again.canonical_signed(), r.canonical_signed());
                for t in &trusted {
                    if t.verification(root::ROOT, &r).ok() {
                        prop_assert!(
                            trusted
                                .iter()
                                .any(|s| s.canonical_signed() == r.canonical_signed()),
                            "a changed root verified"
                        );
                    }
                }
                tally.borrow_mut().saw(&bytes, Ok(()))
            }
            Err(e) => tally.borrow_mut().saw(&bytes, Err(&e.to_string())),
        }
    }));
    tally.borrow().report("root", started);
}

// ---- The OMS bundle and its statement --------------------------------------------------

fn oms_data(rel: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata/oms")
        .join(rel)
}

/// The reference project's signatures (both methods, three versions).
fn bundle_seeds() -> Vec<Vec<u8>> {
    [
        "v1.0.0-elliptic-key",
        "v1.0.1-elliptic-key",
        "v1.0.1-certificate",
        "v1.1.0-elliptic-key",
        "v1.1.0-certificate",
    ]
    .iter()
    .map(|d| std::fs::read(oms_data(&format!("{d}/model.sig"))).unwrap())
    .collect()
}

/// The statements inside the seeds, and one written here as the reference writes it.
fn statement_seeds(bundles: &[Vec<u8>]) -> Vec<Vec<u8>> {
    use base64::Engine;
    let mut out: Vec<Vec<u8>> = bundles
        .iter()
        .map(|b| {
            let v: Json = serde_json::from_slice(b).unwrap();
            let p = v["dsseEnvelope"]["payload"].as_str().unwrap();
            base64::engine::general_purpose::STANDARD.decode(p).unwrap()
        })
        .collect();
    out.push(statement::build(
        "model",
        vec![
            statement::Resource {
                name: "config.json".into(),
                sha256: [1; 32],
            },
            statement::Resource {
                name: "sub/model.safetensors".into(),
                sha256: [2; 32],
            },
        ],
        &["ignored".into()],
    ));
    out
}

#[test]
fn the_oms_bundle_and_statement_parsers_survive_hostile_signatures_in_a_memory_capped_process() {
    let figures = run_capped_child("parse_fuzz::oms_child", ADDRESS_SPACE);
    assert!(figures.contains("fuzz oms bundle:"), "{figures}");
    assert!(figures.contains("fuzz oms statement:"), "{figures}");
}

#[test]
#[ignore = "the body of the_oms_bundle_and_statement_parsers_survive_hostile_signatures_in_a_memory_capped_process"]
fn oms_child() {
    cap_address_space();
    let seeds = bundle_seeds();
    let key =
        TrustMaterial::Key(oms::load_public_key(&oms_data("keys/signing-key-pub.pem")).unwrap());
    let certs = TrustMaterial::Certificates(
        oms::load_certificates(&[oms_data("keys/ca-cert.pem")]).unwrap(),
    );
    // What the seeds' signatures vouch for: nothing else may verify.
    let signed: Vec<statement::Statement> = seeds
        .iter()
        .filter_map(|s| bundle::read_statement(s).ok())
        .collect();
    let started = std::time::Instant::now();
    let tally = std::cell::RefCell::new(Tally::default());
    finish(runner().run(&mutated(seeds.clone()), |mut bytes| {
        bytes.truncate(crate::manifest::MAX_OMS_SIGNATURE_BYTES as usize);
        for trust in [&key, &certs] {
            match bundle::verify(&bytes, &trust.as_trust()) {
                Ok(v) => {
                    prop_assert!(
                        signed.contains(&v.statement),
                        "a changed statement verified"
                    );
                    tally.borrow_mut().saw(&bytes, Ok(()))?;
                }
                Err(e) => tally.borrow_mut().saw(&bytes, Err(&e.to_string()))?,
            }
        }
        match bundle::read_statement(&bytes) {
            Ok(_) => tally.borrow_mut().saw(&bytes, Ok(())),
            Err(e) => tally.borrow_mut().saw(&bytes, Err(&e.to_string())),
        }
    }));
    tally.borrow().report("oms bundle", started);
    let started = std::time::Instant::now();
    let tally = std::cell::RefCell::new(Tally::default());
    finish(runner().run(&mutated(statement_seeds(&seeds)), |bytes| {
        match statement::parse(&bytes) {
            Ok(s) => {
                // A parsed statement names only resources a model directory can hold.
                for r in &s.resources {
                    prop_assert!(statement::check_name(&r.name).is_ok(), "{:?}", r.name);
                }
                tally.borrow_mut().saw(&bytes, Ok(()))
            }
            Err(e) => tally.borrow_mut().saw(&bytes, Err(&e.to_string())),
        }
    }));
    tally.borrow().report("oms statement", started);
}

// ---- A credential helper's answer ------------------------------------------------------

/// The secret of the seeds: an error message must never quote it.
const SECRET: &str = "SECRET-8c1f0e";

fn helper_seeds() -> Vec<Vec<u8>> {
    vec![
        format!(r#"{{"ServerURL":"https://r.example","Username":"user","Secret":"{SECRET}"}}"#)
            .into_bytes(),
        format!(r#"{{"ServerURL":"r.example","Username":"<token>","Secret":"{SECRET}"}}"#)
            .into_bytes(),
        br#"{"ServerURL":"","Username":"","Secret":""}"#.to_vec(),
        format!(r#"{{"Username":"{SECRET}","Secret":"{SECRET}"}}"#).into_bytes(),
        format!("\"{SECRET}\"").into_bytes(),
        b"credentials not found in native keychain\n".to_vec(),
    ]
}

#[test]
fn the_credential_helper_answer_parser_survives_hostile_output_in_a_memory_capped_process() {
    let figures = run_capped_child("parse_fuzz::helper_child", ADDRESS_SPACE);
    assert!(figures.contains("fuzz helper:"), "{figures}");
}

#[test]
#[ignore = "the body of the_credential_helper_answer_parser_survives_hostile_output_in_a_memory_capped_process"]
fn helper_child() {
    use crate::oci::auth::{HELPER_OUTPUT_CAP, HelperFailure, first_line, parse_helper_answer};

    cap_address_space();
    let started = std::time::Instant::now();
    let tally = std::cell::RefCell::new(Tally::default());
    finish(runner().run(&mutated(helper_seeds()), |mut bytes| {
        bytes.truncate(HELPER_OUTPUT_CAP as usize);
        match parse_helper_answer(&bytes) {
            Ok(_) | Err(HelperFailure::IdentityToken) => tally.borrow_mut().saw(&bytes, Ok(()))?,
            Err(HelperFailure::BadOutput(m)) => {
                // The message is for a log: it says what is wrong, never what the
                // helper answered (a secret of the wrong type included).
                prop_assert!(!m.contains(SECRET), "the secret quoted: {}", m);
                tally.borrow_mut().saw(&bytes, Err(&m))?;
            }
            Err(other) => {
                return Err(TestCaseError::fail(format!("parsing gave {other:?}")));
            }
        }
        // A failed helper's output is quoted by its first line: short and escaped.
        if let Some(line) = first_line(&String::from_utf8_lossy(&bytes)) {
            prop_assert!(
                line.chars().count() <= 200 * 10,
                "{} chars",
                line.chars().count()
            );
            prop_assert!(
                !line.chars().any(crate::display::needs_escape),
                "{:?}",
                line
            );
        }
        Ok(())
    }));
    tally.borrow().report("helper", started);
}

#[test]
fn edits_apply_to_the_document_and_its_text() {
    let seed = br#"{"a":{"b":"xy","c":[1,2]},"d":"z"}"#;
    let doubled = apply(seed, &[Edit::Double(0)]);
    assert_eq!(doubled, br#"{"a":{"b":"xyxy","c":[1,2]},"d":"z"}"#);
    let removed = apply(seed, &[Edit::RemoveKey(1, 0)]);
    assert_eq!(removed, br#"{"a":{"c":[1,2]},"d":"z"}"#);
    let replaced = apply(seed, &[Edit::Replace(3, Json::Null)]);
    assert_eq!(replaced, br#"{"a":{"b":"xy","c":null},"d":"z"}"#);
    assert_eq!(apply(b"[1]", &[Edit::Insert(1, b"[".to_vec())]), b"[[1]");
    assert_eq!(apply(b"", &[Edit::Byte(3, 1)]), b"");
}
