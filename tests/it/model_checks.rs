//! airlock's model checks agree with the reference readers.
//!
//! Every fixture `airlock::inspect` accepts (no error findings) must load with the real Python
//! readers, and every fixture it rejects must fail to load: `safetensors` (the same Rust
//! validation the safetensors crate does) for `.safetensors`, a transformers-style walk of the
//! `weight_map` for shard indexes, `gguf.GGUFReader` with every tensor touched for `.gguf`,
//! and python's `zipfile` (CRC-checked) plus `pickletools` for PyTorch files, since torch itself
//! is not installed for tests. A disagreement either way is a bug: a false alarm costs a user a
//! re-download, a miss costs a trip across the air gap.
//!
//! The readers live in the venv made by `scripts/make-fixtures.py` ($AIRLOCK_VENV, default
//! `<repo>/.venv`). Without it these tests fail rather than skip.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use airlock::inspect::{Finding, Severity, check_file, check_tree};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn venv_python() -> PathBuf {
    let venv = std::env::var_os("AIRLOCK_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join(".venv"));
    let python = venv.join("bin").join("python");
    assert!(
        python.is_file(),
        "the Python reference readers are not installed: {} does not exist. Run \
         `python3 scripts/make-fixtures.py --venv-only` (or scripts/test.sh), or point \
         AIRLOCK_VENV at a venv with scripts/requirements-test.txt installed",
        python.display()
    );
    python
}

/// Reads `[[kind, path], ...]` on stdin, loads each file, prints `{path: null | "error"}`.
const LOADER: &str = r#"
import io, json, pickletools, sys, zipfile
import numpy as np
import gguf
from safetensors import safe_open

def load_safetensors(path):
    try:
        with safe_open(path, framework="np") as f:
            for key in f.keys():
                f.get_tensor(key)
    except (TypeError, AttributeError) as e:
        # numpy has no bfloat16 or float8 (the value fixtures): the package's own reader,
        # the same validation, returns their raw bytes.
        if "bfloat16" not in str(e) and "float8" not in str(e):
            raise
        from safetensors import deserialize
        with open(path, "rb") as f:
            deserialize(f.read())

def load_index(path):
    # What transformers does with a sharded checkpoint: open every shard the weight_map
    # names and take from it every tensor the map assigns to it.
    import os
    with open(path) as f:
        weight_map = json.load(f)["weight_map"]
    shards = {}
    for tensor, shard in weight_map.items():
        shards.setdefault(shard, []).append(tensor)
    for shard, tensors in shards.items():
        with safe_open(os.path.join(os.path.dirname(path), shard), framework="np") as f:
            keys = set(f.keys())
            for tensor in tensors:
                if tensor not in keys:
                    raise KeyError(f"{tensor} not in {shard}")
                f.get_tensor(tensor)

def load_gguf(path):
    reader = gguf.GGUFReader(path)
    for tensor in reader.tensors:
        np.asarray(tensor.data).sum()

def load_torch(path):
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as z:
            bad = z.testzip()
            if bad is not None:
                raise ValueError(f"bad CRC in {bad}")
            top = z.namelist()[0].split("/")[0]
            z.read(f"{top}/version")
            pickletools.dis(io.BytesIO(z.read(f"{top}/data.pkl")), out=io.StringIO())
    else:
        with open(path, "rb") as f:
            pickletools.dis(f, out=io.StringIO())

LOADERS = {"safetensors": load_safetensors, "index": load_index, "gguf": load_gguf, "torch": load_torch}
results = {}
for kind, path in json.load(sys.stdin):
    try:
        LOADERS[kind](path)
        results[path] = None
    except Exception as e:
        results[path] = f"{type(e).__name__}: {e}"
json.dump(results, sys.stdout)
"#;

/// Loads each `(kind, path)` with the reference readers: `None` if it loads, else the error.
fn reference_load(files: &[(&str, PathBuf)]) -> BTreeMap<String, Option<String>> {
    let request: Vec<(&str, String)> = files
        .iter()
        .map(|(kind, path)| (*kind, path.to_string_lossy().into_owned()))
        .collect();
    let mut child = Command::new(venv_python())
        .args(["-c", LOADER])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the venv's python");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&serde_json::to_vec(&request).unwrap())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the reference loader failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the loader's JSON")
}

fn reader_kind(rel: &str) -> Option<&'static str> {
    if rel.ends_with(".index.json") {
        Some("index")
    } else if rel.ends_with(".safetensors") {
        Some("safetensors")
    } else if rel.ends_with(".gguf") {
        Some("gguf")
    } else if rel.ends_with(".bin") {
        Some("torch")
    } else {
        None
    }
}

/// Every file under `root` a reference reader can load, as `(rel, kind)`.
fn loadable_files(root: &Path) -> Vec<(String, &'static str)> {
    let mut out = Vec::new();
    for entry in walkdir::WalkDir::new(root).sort_by_file_name() {
        let entry = entry.unwrap();
        if !entry.file_type().is_file() {
            continue;
        }
        let rel = entry
            .path()
            .strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        if let Some(kind) = reader_kind(&rel) {
            out.push((rel, kind));
        }
    }
    out
}

fn errors(findings: &[Finding]) -> Vec<&Finding> {
    findings
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .collect()
}

#[test]
fn every_fixture_airlock_accepts_loads_and_every_one_it_rejects_does_not() {
    let mut files = Vec::new();
    let mut verdicts = Vec::new();
    for root in [
        repo().join("testdata/fixtures"),
        repo().join("testdata/tiny-model"),
    ] {
        for (rel, kind) in loadable_files(&root) {
            let findings = check_file(&root, &rel).unwrap();
            let rejected = errors(&findings)
                .iter()
                .map(|f| format!("{}: {}", f.code, f.problem))
                .collect::<Vec<_>>();
            let path = root.join(&rel);
            verdicts.push((path.to_string_lossy().into_owned(), rejected));
            files.push((kind, path));
        }
    }
    let loaded = reference_load(&files);

    let mut disagreements = Vec::new();
    let (mut accepted, mut rejected) = (0, 0);
    for (path, airlock_errors) in &verdicts {
        let reference_error = loaded
            .get(path)
            .unwrap_or_else(|| panic!("no result for {path}"));
        match (airlock_errors.is_empty(), reference_error) {
            (true, None) => accepted += 1,
            (false, Some(_)) => rejected += 1,
            (true, Some(e)) => {
                disagreements.push(format!("{path}: airlock accepts, the reader fails: {e}"))
            }
            (false, None) => disagreements.push(format!(
                "{path}: the reader loads it, airlock rejects: {airlock_errors:?}"
            )),
        }
    }
    assert!(disagreements.is_empty(), "{disagreements:#?}");
    // Both directions were exercised, for every reader.
    assert!(
        accepted >= 12 && rejected >= 15,
        "{accepted} accepted, {rejected} rejected"
    );
    for kind in ["safetensors", "index", "gguf", "torch"] {
        let of_kind = || files.iter().filter(|(k, _)| *k == kind);
        let ok = of_kind()
            .filter(|(_, p)| loaded[&*p.to_string_lossy()].is_none())
            .count();
        assert!(
            ok > 0 && ok < of_kind().count(),
            "{kind}: {ok} of {} load",
            of_kind().count()
        );
    }
}

#[test]
fn each_corrupt_fixture_gets_its_code_on_its_file() {
    let findings = check_tree(&repo().join("testdata/fixtures/corrupt")).unwrap();
    let got: Vec<(&str, &str, Severity)> = findings
        .iter()
        .map(|f| (f.path.as_str(), f.code, f.severity))
        .collect();
    use Severity::{Error, Warning};
    let expected = vec![
        ("html-page.bin", "torch-not-a-checkpoint", Error),
        (
            "html-page.safetensors",
            "safetensors-header-too-large",
            Error,
        ),
        (
            "invalid-offset.safetensors",
            "safetensors-invalid-offset",
            Error,
        ),
        ("lfs-pointer.safetensors", "lfs-pointer", Error),
        (
            "missing-shard/model.safetensors.index.json",
            "shard-missing",
            Error,
        ),
        (
            "tensor-invalid-info.safetensors",
            "safetensors-tensor-invalid-info",
            Error,
        ),
        (
            "tensor-missing/model-00002-of-00003.safetensors",
            "shard-tensor-missing",
            Error,
        ),
        (
            "trailing-bytes.safetensors",
            "safetensors-trailing-bytes",
            Error,
        ),
        (
            "truncated-at-data-start.safetensors",
            "safetensors-truncated",
            Error,
        ),
        ("truncated-in-data.gguf", "gguf-tensor-out-of-bounds", Error),
        (
            "truncated-in-data.safetensors",
            "safetensors-truncated",
            Error,
        ),
        (
            "truncated-in-header.safetensors",
            "safetensors-header-truncated",
            Error,
        ),
        (
            "truncated-in-length.safetensors",
            "safetensors-header-too-small",
            Error,
        ),
        ("truncated-in-metadata.gguf", "gguf-truncated", Error),
        ("truncated-zip.bin", "torch-zip-no-eocd", Error),
        (
            "wrong-total-size/model.safetensors.index.json",
            "shard-total-size-mismatch",
            Warning,
        ),
        ("zero-filled.safetensors", "safetensors-zero-filled", Error),
    ];
    assert_eq!(got, expected, "{findings:#?}");
    for f in &findings {
        assert!(f.problem.len() > 20 && f.fix.len() > 20, "{f:#?}");
    }
}

#[test]
fn the_demo_model_is_clean_and_loads() {
    let tiny = repo().join("testdata/tiny-model");
    let findings = check_tree(&tiny).unwrap();
    assert!(findings.is_empty(), "{findings:#?}");
    let loaded = reference_load(&[("safetensors", tiny.join("model.safetensors"))]);
    assert_eq!(loaded.values().next(), Some(&None), "{loaded:?}");
    let size = std::fs::metadata(tiny.join("model.safetensors"))
        .unwrap()
        .len();
    assert!((100_000..400_000).contains(&size), "{size} bytes");
}
