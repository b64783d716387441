//! The value scan (issue 23) through the real binary: `pack` refuses NaN, Inf and zero-filled
//! regions at the end of its read pass and leaves nothing behind, records what it counted in
//! the signed manifest, `check` scans installed trees (comparing with that record), plain model
//! directories and Hugging Face cache blobs. The fixtures are made by the real safetensors,
//! numpy and gguf packages (scripts/make-fixtures.py).

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::support::*;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("testdata/fixtures/values")
        .join(name)
}

/// A model directory `rel` holding a config and the fixture `name` under `as_name`.
fn model_with(env: &Env, rel: &str, name: &str, as_name: &str) {
    env.write(
        &format!("{rel}/config.json"),
        b"{\"model_type\": \"test\"}\n",
    );
    env.write(
        &format!("{rel}/{as_name}"),
        &std::fs::read(fixture(name)).unwrap(),
    );
}

fn codes(findings: &Value) -> Vec<String> {
    findings
        .as_array()
        .unwrap_or_else(|| panic!("findings: {findings:#}"))
        .iter()
        .map(|f| {
            format!(
                "{} {}",
                f["severity"].as_str().unwrap(),
                f["code"].as_str().unwrap()
            )
        })
        .collect()
}

fn manifest(dir: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap()
}

/// One fixture per error finding and format: pack refuses (exit 3) at the end of the read
/// pass, naming the file, tensor and first index, and leaves no bundle and no work directory.
#[test]
fn pack_refuses_each_value_error_and_leaves_nothing() {
    let env = Env::new();
    let cases = [
        ("nan-bf16.safetensors", "model.safetensors", "tensor-nan"),
        ("nan-f8_e4m3.safetensors", "model.safetensors", "tensor-nan"),
        ("inf-f16.safetensors", "model.safetensors", "tensor-inf"),
        ("nan-scale-q8_0.gguf", "model.gguf", "tensor-nan"),
        ("inf-scale-q4_k.gguf", "model.gguf", "tensor-inf"),
        (
            "zero-region.safetensors",
            "model.safetensors",
            "tensor-zero-region",
        ),
        (
            "zero-region-i32.safetensors",
            "model.safetensors",
            "tensor-zero-region",
        ),
        ("zero-region.gguf", "model.gguf", "tensor-zero-region"),
    ];
    for (i, (name, as_name, code)) in cases.into_iter().enumerate() {
        let model = format!("m{i}");
        model_with(&env, &model, name, as_name);
        let out = format!("b{i}");
        let (rc, j) = env.json(&["pack", &model, "--key", "k.key", "--output", &out]);
        assert_eq!(rc, 3, "{name}: {j:#}");
        assert_eq!(j["error"]["kind"], "model-checks", "{name}: {j:#}");
        let found = codes(&j["findings"]);
        assert!(
            found.contains(&format!("error {code}")),
            "{name}: {found:?}"
        );
        let f = j["findings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["code"] == code)
            .unwrap();
        assert_eq!(f["path"], as_name, "{name}: {f:#}");
        let problem = f["problem"].as_str().unwrap();
        if code == "tensor-zero-region" {
            assert!(problem.contains("of zero bytes from byte"), "{problem}");
        } else {
            assert!(
                problem.contains("in tensor `") && problem.contains("the first at element"),
                "{name}: {problem}"
            );
        }
        env.assert_nothing_packed(&out);
    }
}

/// `--no-model-checks` ships the model anyway: the finding in the manifest's `warnings`, the
/// counts in its signed `values`; the installed tree's `check` sees the NaN again (exit 3),
/// matches the record, and says it was recorded at pack time.
#[test]
fn no_model_checks_records_the_finding_and_check_compares_with_the_record() {
    let env = Env::new();
    model_with(&env, "m", "nan-f32.safetensors", "model.safetensors");
    env.ok(&[
        "pack",
        "m",
        "--key",
        "k.key",
        "--output",
        "b",
        "--no-model-checks",
    ]);
    let m = manifest(&env.path("b"));
    assert_eq!(m["warnings"][0]["code"], "tensor-nan", "{m:#}");
    let v = &m["values"];
    assert_eq!(v["rules"], 1, "{m:#}");
    assert_eq!(v["files"].as_array().unwrap().len(), 1, "{m:#}");
    assert_eq!(v["files"][0]["path"], "model.safetensors");
    assert_eq!(v["files"][0]["format"], "safetensors");
    assert_eq!(v["files"][0]["nan"], 2);
    assert_eq!(v["files"][0]["inf"], 0);
    let text = String::from_utf8_lossy(&env.ok(&["inspect", "b"]).stdout).into_owned();
    assert!(text.contains("values:") && text.contains("2 NaN"), "{text}");

    env.ok(&["unpack", "b", "--trust", "k.pub", "--dest", "inst"]);
    let (rc, j) = env.json(&["check", "inst", "--trust", "k.pub"]);
    assert_eq!(rc, 3, "{j:#}");
    assert_eq!(j["drift"], serde_json::json!([]), "{j:#}");
    assert_eq!(j["values_recorded"]["files"][0]["nan"], 2, "{j:#}");
    assert_eq!(j["values"][0]["summary"]["nan"], 2, "{j:#}");
    assert_eq!(codes(&j["findings"]), ["error tensor-nan"], "{j:#}");

    // A record that disagrees with the files (a packer that lied, or other rules) is receipt
    // drift of kind `values`, though every byte matches its digest.
    let receipt = env.path("inst/.airlock");
    let mj = receipt.join("manifest.json");
    set_writable(&receipt);
    let lied = std::fs::read_to_string(&mj)
        .unwrap()
        .replace("\"nan\": 2", "\"nan\": 0");
    std::fs::write(&mj, lied).unwrap();
    env.ok(&[
        "sign",
        "--key",
        "k.key",
        "-o",
        "inst/.airlock/manifest.json.minisig.new",
        "inst/.airlock/manifest.json",
    ]);
    std::fs::rename(
        receipt.join("manifest.json.minisig.new"),
        receipt.join("manifest.json.minisig"),
    )
    .unwrap();
    let (rc, j) = env.json(&["check", "inst", "--trust", "k.pub"]);
    assert_eq!(rc, 3, "{j:#}");
    assert_eq!(j["error"]["kind"], "receipt-mismatch", "{j:#}");
    assert_eq!(j["drift"][0]["kind"], "values", "{j:#}");
    assert_eq!(j["drift"][0]["path"], "model.safetensors", "{j:#}");
}

/// The value scan reads a model file by its content as well as its name (issue 36 item 6): a
/// GGUF holding NaN named `model.bin` packed and checked clean before, though llama.cpp and
/// Ollama load a GGUF by its magic. Now `pack` refuses it, `check` of the directory and of the
/// install report it, and `--no-model-checks` records it; a safetensors file without a
/// `.safetensors` name is read the same way.
#[test]
fn a_gguf_holding_nan_named_model_bin_is_scanned_by_its_content() {
    let env = Env::new();
    for (i, (name, as_name, format)) in [
        ("nan-f32.gguf", "model.bin", "gguf"),
        ("nan-f16.gguf", "blobs/3f1a0c", "gguf"),
        ("nan-f32.safetensors", "weights.bin", "safetensors"),
    ]
    .into_iter()
    .enumerate()
    {
        let model = format!("m{i}");
        model_with(&env, &model, name, as_name);
        let out = format!("b{i}");
        let (rc, j) = env.json(&["pack", &model, "--key", "k.key", "--output", &out]);
        assert_eq!(rc, 3, "{name} as {as_name}: {j:#}");
        assert_eq!(codes(&j["findings"]), ["error tensor-nan"], "{j:#}");
        assert_eq!(j["findings"][0]["path"], as_name, "{j:#}");
        env.assert_nothing_packed(&out);
        let (rc, j) = env.json(&["check", &model]);
        assert_eq!(rc, 3, "{j:#}");
        assert_eq!(codes(&j["findings"]), ["error tensor-nan"], "{j:#}");

        env.ok(&[
            "pack",
            &model,
            "--key",
            "k.key",
            "--output",
            &out,
            "--no-model-checks",
        ]);
        let m = manifest(&env.path(&out));
        assert_eq!(m["values"]["files"][0]["path"], as_name, "{m:#}");
        assert_eq!(m["values"]["files"][0]["format"], format, "{m:#}");
        assert_eq!(m["warnings"][0]["code"], "tensor-nan", "{m:#}");
        let dest = format!("inst{i}");
        env.ok(&["unpack", &out, "--trust", "k.pub", "--dest", &dest]);
        let (rc, j) = env.json(&["check", &dest, "--trust", "k.pub"]);
        assert_eq!(rc, 3, "{j:#}");
        assert_eq!(j["drift"], serde_json::json!([]), "{j:#}");
        assert_eq!(j["values"][0]["path"], as_name, "{j:#}");
        assert_eq!(codes(&j["findings"]), ["error tensor-nan"], "{j:#}");
    }
}

fn set_writable(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    for e in walkdir::WalkDir::new(dir) {
        let e = e.unwrap();
        let mode = if e.file_type().is_dir() { 0o755 } else { 0o644 };
        std::fs::set_permissions(e.path(), std::fs::Permissions::from_mode(mode)).unwrap();
    }
}

/// Healthy models with legitimately zero biases, norms of one and zero padding rows pass
/// `pack` and `check` without a finding (issue 33 item 6: those were warnings), and their
/// record counts no NaN, Inf or region, and the zero biases.
#[test]
fn healthy_models_with_zero_biases_pass_without_findings() {
    let env = Env::new();
    let root = env.path("healthy");
    std::fs::create_dir_all(&root).unwrap();
    for name in ["model.safetensors", "model.gguf"] {
        std::fs::copy(fixture("healthy").join(name), root.join(name)).unwrap();
    }
    env.write("healthy/config.json", b"{}\n");
    let (rc, j) = env.json(&["check", "healthy"]);
    assert_eq!(rc, 0, "{j:#}");
    assert_eq!(codes(&j["findings"]), Vec::<String>::new(), "{j:#}");
    assert_eq!(j["values"].as_array().unwrap().len(), 2, "{j:#}");

    let (rc, j) = env.json(&["pack", "healthy", "--key", "k.key", "--output", "b"]);
    assert_eq!(rc, 0, "{j:#}");
    assert_eq!(j["warnings"], serde_json::json!([]), "{j:#}");
    let m = manifest(&env.path("b"));
    let files = m["values"]["files"].as_array().unwrap();
    assert_eq!(files.len(), 2, "{m:#}");
    for f in files {
        assert_eq!(
            (&f["nan"], &f["inf"], &f["zero_regions"]),
            (&0.into(), &0.into(), &0.into())
        );
        assert!(f["zero_tensors"].as_u64().unwrap() > 0, "{f:#}");
    }
    // The bundle an older airlock can read: no scan, no record.
    env.ok(&[
        "pack",
        "healthy",
        "--key",
        "k.key",
        "--output",
        "b-old",
        "--no-value-scan",
    ]);
    assert!(manifest(&env.path("b-old")).get("values").is_none());
}

/// `check` of a plain model directory names each value finding of each fixture, and
/// `--no-value-scan` and `--sizes-only` leave the scan out.
#[test]
fn check_of_a_model_dir_finds_each_value_finding() {
    let env = Env::new();
    let cases = [
        ("nan-f64.safetensors", "error tensor-nan"),
        ("nan-f16.safetensors", "error tensor-nan"),
        ("nan-f8_e5m2.safetensors", "error tensor-nan"),
        ("inf-f64.safetensors", "error tensor-inf"),
        ("inf-f32.safetensors", "error tensor-inf"),
        ("inf-bf16.safetensors", "error tensor-inf"),
        ("inf-f8_e5m2.safetensors", "error tensor-inf"),
        ("nan-f32.gguf", "error tensor-nan"),
        ("nan-f16.gguf", "error tensor-nan"),
        ("nan-bf16.gguf", "error tensor-nan"),
        ("inf-f32.gguf", "error tensor-inf"),
        ("untrained.safetensors", "warning tensor-all-zero"),
    ];
    for (name, code) in cases {
        let dir = format!("d-{name}");
        env.write(
            &format!("{dir}/sub/{name}"),
            &std::fs::read(fixture(name)).unwrap(),
        );
        let (rc, j) = env.json(&["check", &dir]);
        let found = codes(&j["findings"]);
        assert!(found.contains(&code.to_string()), "{name}: {found:?}");
        assert_eq!(
            rc,
            if code.starts_with("error") { 3 } else { 0 },
            "{name}: {j:#}"
        );
        assert_eq!(j["findings"][0]["path"], format!("sub/{name}"), "{name}");
        let (rc, j) = env.json(&["check", &dir, "--no-value-scan"]);
        assert_eq!((rc, codes(&j["findings"])), (0, vec![]), "{name}: {j:#}");
    }
}

/// A Hugging Face cache whose blob holds NaN: the scan rides on the blob's hash and names the
/// snapshot file; the blob itself matches its name.
#[test]
fn check_hf_cache_scans_the_blobs_it_hashes() {
    use sha2::{Digest, Sha256};
    let env = Env::new();
    let bytes = std::fs::read(fixture("nan-bf16.safetensors")).unwrap();
    let etag = hex::encode(Sha256::digest(&bytes));
    let commit = "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678";
    let repo = "hub/models--acme--nan";
    env.write(&format!("{repo}/blobs/{etag}"), &bytes);
    env.write(&format!("{repo}/refs/main"), commit.as_bytes());
    let snap = env.path(&format!("{repo}/snapshots/{commit}"));
    std::fs::create_dir_all(&snap).unwrap();
    std::os::unix::fs::symlink(
        format!("../../blobs/{etag}"),
        snap.join("model.safetensors"),
    )
    .unwrap();
    let (rc, j) = env.json(&["check", "--hf-cache", "hub"]);
    assert_eq!(rc, 3, "{j:#}");
    let problems = j["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 1, "{j:#}");
    assert_eq!(problems[0]["kind"], "tensor-nan", "{j:#}");
    assert_eq!(
        problems[0]["path"],
        serde_json::json!(snap.join("model.safetensors"))
    );
    assert_eq!(j["values"][0]["summary"]["nan"], 2, "{j:#}");
    let (rc, j) = env.json(&["check", "--hf-cache", "hub", "--no-value-scan"]);
    assert_eq!(rc, 0, "{j:#}");
}

/// Each command of the demo (`scripts/demo.sh`: pack, verify --deep, unpack, check) on
/// `testdata/tiny-model`, on stderr: nothing. Issue 33 item 6: its norm weights, all 1.0, were
/// a "constant tensor" warning on pack, repeated as "recorded at pack time" by verify and
/// unpack and found again by check.
#[test]
fn the_demo_model_goes_through_every_step_without_a_warning() {
    let env = Env::new();
    let demo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata/tiny-model");
    let demo = demo.to_str().unwrap();
    let steps: [&[&str]; 4] = [
        &[
            "pack",
            demo,
            "-o",
            "bundle",
            "--key",
            "k.key",
            "--name",
            "tiny-model",
            "--version",
            "1",
            "--volume-size",
            "100K",
        ],
        &["verify", "bundle", "--trust", "k.pub", "--deep"],
        &[
            "unpack",
            "bundle",
            "--trust",
            "k.pub",
            "--dest",
            "installed",
        ],
        &["check", "installed", "--trust", "k.pub"],
    ];
    for args in steps {
        let out = env.ok(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr, "", "{args:?}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(!stdout.contains("WARN"), "{args:?}: {stdout}");
    }
}

/// Issue 33 item 6, the other half: a genuine warning (an all-zero `lm_head`) is said by the
/// pack that finds it, then counted, not repeated: verify and unpack say how many were recorded
/// and where to read them, check finds the same one and does not print it again. `inspect`
/// lists it, and every `--json` document carries it.
#[test]
fn a_finding_recorded_at_pack_is_not_announced_again() {
    let env = Env::new();
    model_with(&env, "m", "untrained.safetensors", "model.safetensors");
    let out = env.ok(&["pack", "m", "-o", "b", "--key", "k.key"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("tensor `lm_head.weight`") && stderr.contains("are all zero"),
        "{stderr}"
    );
    for args in [
        &["verify", "b", "--trust", "k.pub"][..],
        &["unpack", "b", "--trust", "k.pub", "--dest", "out"][..],
    ] {
        let out = env.ok(args);
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(!stderr.contains("lm_head"), "{args:?}: {stderr}");
        assert!(
            stdout.contains(
                "1 model-check warning recorded at pack time, not repeated here (`airlock inspect b` lists it)"
            ),
            "{args:?}: {stdout}"
        );
    }
    let (_, j) = env.json(&["verify", "b", "--trust", "k.pub"]);
    assert_eq!(
        j["recorded_findings"][0]["code"], "tensor-all-zero",
        "{j:#}"
    );
    assert_eq!(j["warnings"], serde_json::json!([]), "{j:#}");
    let out = env.ok(&["check", "out", "--trust", "k.pub"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("lm_head"), "{stdout}");
    assert!(
        stdout.contains("1 of the warnings recorded at pack time, unchanged, not repeated here"),
        "{stdout}"
    );
    let (rc, j) = env.json(&["check", "out", "--trust", "k.pub"]);
    assert_eq!(rc, 0, "{j:#}");
    assert_eq!(codes(&j["findings"]), ["warning tensor-all-zero"], "{j:#}");
    assert_eq!(j["counts"]["recorded_unchanged"], 1, "{j:#}");
    let out = env.ok(&["inspect", "b"]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("lm_head"),
        "{out:?}"
    );
}
