//! What airlock prints cannot be taken over by what it quotes (issue 36 items 3, 4 and 5):
//! every vector of the issue (a stray file name in a bundle directory, a carried root's text,
//! a safetensors tensor name, a GGUF key, a name `pack` refuses, an extra file in an install)
//! holds [`HOSTILE_TEXT`], and every command that reports on it, in human mode and with
//! `--json`, prints nothing a terminal would act on, and shows the text escaped. Before, the
//! escape sequences reached the terminal raw: a `BAD` line could be erased and a green `OK`
//! printed in its place (the exit code stayed 3), the clipboard written through OSC 52, the
//! rest of a line shown reversed. The OMS vector is in `oms.rs`, the registry's error text in
//! `oci::client`'s unit tests.

use std::path::Path;

use crate::support::*;

/// Runs `args` in human mode and with `--json` and asserts both are inert; the JSON document
/// must parse. Returns the human text, the exit code and the document.
fn run_both(env: &Env, args: &[&str]) -> (String, i32, serde_json::Value) {
    let out = env.run(args);
    let text = assert_inert(&out, &format!("{args:?}"));
    let mut with_json = args.to_vec();
    with_json.push("--json");
    let json_out = env.run(&with_json);
    assert_inert(&json_out, &format!("{with_json:?}"));
    let doc: serde_json::Value = serde_json::from_slice(&json_out.stdout)
        .unwrap_or_else(|e| panic!("{with_json:?}: not one JSON document ({e})"));
    assert_eq!(
        out.status.code(),
        json_out.status.code(),
        "{args:?}: {text}"
    );
    (text, out.status.code().unwrap(), doc)
}

/// The first data volume of the bundle at `dir`.
fn first_volume(dir: &Path) -> std::path::PathBuf {
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("data."))
        .collect();
    names.sort();
    dir.join(&names[0])
}

/// A stray file on the medium and a carried `N.root.json` whose text holds escape sequences,
/// beside a damaged volume: the `BAD` line stays on the screen, nothing is erased or recoloured.
#[test]
fn what_a_bundle_directory_holds_cannot_rewrite_the_verdict() {
    let env = Env::new();
    env.model("m");
    env.ok(&["pack", "m", "--key", "k.key", "--output", "b"]);
    env.write(&format!("b/README{HOSTILE_TEXT}.txt"), b"hello\n");
    // A root whose key id quotes the text (JSON-escaped, so it parses and is quoted back).
    let root = serde_json::json!({
        "signed": {
            "_type": "root",
            "spec_version": "1.0",
            "version": 2,
            "expires": "2030-01-01T00:00:00Z",
            "consistent_snapshot": false,
            "keys": { HOSTILE_TEXT: { "keytype": "ed25519" } },
            "roles": {}
        },
        "signatures": []
    });
    env.write("b/2.root.json", root.to_string().as_bytes());
    let volume = first_volume(&env.path("b"));
    let mut bytes = std::fs::read(&volume).unwrap();
    bytes[100] ^= 0x40;
    std::fs::write(&volume, bytes).unwrap();

    let (text, rc, doc) = run_both(&env, &["verify", "b", "--trust", "k.pub"]);
    assert_eq!(rc, 3, "{text}");
    assert!(text.contains("BAD  data."), "{text}");
    assert!(!text.contains("OK  "), "{text}");
    assert!(
        text.contains(&format!("README{HOSTILE_SHOWN}.txt")),
        "{text}"
    );
    assert!(
        text.contains("2.root.json: is not a valid TUF root: key \\x1b[1A"),
        "{text}"
    );
    // In the JSON document too the warnings are text for a person: escaped.
    let stray = format!("README{HOSTILE_SHOWN}.txt");
    assert!(
        doc["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w.as_str().unwrap().contains(&stray)),
        "{doc:#}"
    );
    for args in [
        &["verify", "b", "--trust", "k.pub", "--deep"][..],
        &["unpack", "b", "--trust", "k.pub", "--dest", "inst"],
        &["inspect", "b"],
    ] {
        let (text, rc, _) = run_both(&env, args);
        assert!(rc != 0 || args[0] == "inspect", "{args:?}: {text}");
    }
    assert!(!env.path("inst").exists());
}

/// A safetensors file with the text as a tensor name and a GGUF file with it as a key, each
/// with a finding that quotes it: `check`, `pack`, and `pack --no-model-checks` (which ended
/// with `internal error` before: the finding went into the manifest unescaped, item 5), then
/// `verify`, `inspect`, `unpack` and `check` of the install, which show the recorded findings.
#[test]
fn what_a_model_file_holds_cannot_write_to_the_terminal() {
    let env = Env::new();
    env.write("m/config.json", b"{\"model_type\": \"test\"}\n");
    // Three F32 values are 12 bytes, the offsets say 8: the check quotes the tensor's name.
    let header = serde_json::json!({
        HOSTILE_TEXT: { "dtype": "F32", "shape": [3], "data_offsets": [0, 8] }
    })
    .to_string();
    let mut st = (header.len() as u64).to_le_bytes().to_vec();
    st.extend_from_slice(header.as_bytes());
    st.extend_from_slice(&[0; 8]);
    env.write("m/model.safetensors", &st);
    // GGUF v3, no tensors, the same key twice (ggml: "duplicate key").
    let mut gguf = b"GGUF".to_vec();
    gguf.extend_from_slice(&3u32.to_le_bytes());
    gguf.extend_from_slice(&0u64.to_le_bytes());
    gguf.extend_from_slice(&2u64.to_le_bytes());
    for _ in 0..2 {
        gguf.extend_from_slice(&(HOSTILE_TEXT.len() as u64).to_le_bytes());
        gguf.extend_from_slice(HOSTILE_TEXT.as_bytes());
        gguf.extend_from_slice(&4u32.to_le_bytes());
        gguf.extend_from_slice(&7u32.to_le_bytes());
    }
    env.write("m/model.gguf", &gguf);

    let (text, rc, doc) = run_both(&env, &["check", "m"]);
    assert_eq!(rc, 3, "{text}");
    assert!(
        text.contains(&format!("tensor `{HOSTILE_SHOWN}`")),
        "{text}"
    );
    assert!(text.contains(&format!("key `{HOSTILE_SHOWN}`")), "{text}");
    // The findings are data in the JSON document: exact.
    let problems = doc["findings"].to_string();
    assert!(problems.contains("\\u001b[1A"), "{doc:#}");

    let (text, rc, _) = run_both(&env, &["pack", "m", "--key", "k.key", "--output", "b"]);
    assert_eq!(rc, 3, "{text}");
    env.assert_nothing_packed("b");

    let out = env.ok(&[
        "pack",
        "m",
        "--key",
        "k.key",
        "--output",
        "b",
        "--no-model-checks",
    ]);
    let text = assert_inert(&out, "pack --no-model-checks");
    assert!(
        text.contains(&format!("tensor `{HOSTILE_SHOWN}`")),
        "{text}"
    );
    let manifest = env.read_json("b/manifest.json");
    let recorded: Vec<&str> = manifest["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["problem"].as_str().unwrap())
        .collect();
    assert_eq!(recorded.len(), 2, "{manifest:#}");
    assert!(
        recorded.iter().all(|p| p.contains(HOSTILE_SHOWN)),
        "{recorded:?}"
    );

    for args in [
        &["verify", "b", "--trust", "k.pub", "--deep"][..],
        &["inspect", "b"],
    ] {
        let (text, rc, _) = run_both(&env, args);
        assert_eq!(rc, 0, "{args:?}: {text}");
        assert!(text.contains("recorded at pack time"), "{text}");
        assert!(text.contains(HOSTILE_SHOWN), "{text}");
    }
    let out = env.ok(&["unpack", "b", "--trust", "k.pub", "--dest", "inst"]);
    assert_inert(&out, "unpack");
    let (text, rc, _) = run_both(&env, &["check", "inst", "--trust", "k.pub"]);
    assert_eq!(rc, 3, "{text}");
    assert!(text.contains(HOSTILE_SHOWN), "{text}");
}

/// A model file whose name `pack` refuses, and a file added to an install under such a name,
/// are named escaped.
#[test]
fn names_in_a_model_or_an_install_cannot_write_to_the_terminal() {
    let env = Env::new();
    env.model("m");
    env.write(&format!("bad/weights{HOSTILE_TEXT}.bin"), b"x");
    env.write("bad/config.json", b"{}\n");
    let (text, rc, _) = run_both(&env, &["pack", "bad", "--key", "k.key", "--output", "b0"]);
    assert_ne!(rc, 0, "{text}");
    assert!(
        text.contains(&format!("weights{HOSTILE_SHOWN}.bin")),
        "{text}"
    );
    env.assert_nothing_packed("b0");

    env.ok(&["pack", "m", "--key", "k.key", "--output", "b"]);
    env.ok(&["unpack", "b", "--trust", "k.pub", "--dest", "inst"]);
    env.write(&format!("inst/extra{HOSTILE_TEXT}"), b"planted\n");
    let (text, rc, doc) = run_both(&env, &["check", "inst", "--trust", "k.pub"]);
    assert_eq!(rc, 3, "{text}");
    assert!(text.contains(&format!("extra{HOSTILE_SHOWN}")), "{text}");
    // The drift's path is data: exact in the document.
    let paths: Vec<&str> = doc["drift"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["path"].as_str().unwrap())
        .collect();
    assert!(
        paths.contains(&format!("extra{HOSTILE_TEXT}").as_str()),
        "{doc:#}"
    );
}
