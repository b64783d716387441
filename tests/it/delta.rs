//! Delta bundles (issue 12, docs/FORMAT.md section 16): size targets on synthetic bf16 models
//! written by the real `safetensors` package, chains, and every refusal of a delta install.
//!
//! The models are 4 shards of 4 MiB of random-bit bf16 tensors (nothing compresses by
//! itself) plus config, tokenizer and index files. The venv is the one
//! `scripts/make-fixtures.py --venv-only` makes ($AIRLOCK_VENV, default `<repo>/.venv`).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::*;

fn venv_python() -> PathBuf {
    let venv = std::env::var_os("AIRLOCK_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".venv"));
    let python = venv.join("bin").join("python");
    assert!(
        python.is_file(),
        "the safetensors package is not installed for the tests: {} does not exist. Run \
         `python3 scripts/make-fixtures.py --venv-only`, or point AIRLOCK_VENV at a venv with \
         scripts/requirements-test.txt installed",
        python.display()
    );
    python
}

/// Writes a model version with the real safetensors writer. `change`: `none` (the base),
/// `config` (config.json only), `shard` (shard 2 retrained: all new bits), `header` (new
/// metadata in every shard's header: every tensor's offset moves), `finetune` (2% of the
/// elements of every tensor get new values), `finetune2` (another 2% on top of `finetune`).
const SYNTH: &str = r#"
import json, os, sys
import numpy as np
from safetensors import TensorSpec, serialize_file

out, change = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
SHARDS, PER = 4, 4 << 20
weight_map = {}
for i in range(1, SHARDS + 1):
    rng = np.random.default_rng(1000 + i)
    name = f"model-{i:05d}-of-{SHARDS:05d}.safetensors"
    tensors, keep = {}, []
    for t, frac in (("attn", 1 / 4), ("mlp", 3 / 4)):
        n = int(PER * frac) // 2
        data = rng.integers(0, 1 << 16, n, dtype=np.uint16)
        if change == "shard" and i == 2:
            data = np.random.default_rng(5000 + 10 * i + (t == "mlp")).integers(0, 1 << 16, n, dtype=np.uint16)
        rounds = {"finetune": 1, "finetune2": 2}.get(change, 0)
        for r in range(rounds):
            step = np.random.default_rng(7000 + 10 * i + r + (t == "mlp") * 100)
            idx = step.choice(n, size=n // 50, replace=False)
            data[idx] = step.integers(0, 1 << 16, idx.size, dtype=np.uint16)
        key = f"layers.{i}.{t}.weight"
        data[(data & 0x7F80) == 0x7F80] &= 0xFF7F  # random bits, but no NaN or Inf (the value scan)
        keep.append(data)
        tensors[key] = TensorSpec(dtype="bfloat16", shape=[n // 256, 256],
                                  data_ptr=data.ctypes.data, data_len=data.nbytes)
        weight_map[key] = name
    meta = {"format": "pt"}
    if change == "header":
        meta["note"] = "re-exported with a longer header that moves every tensor"
    serialize_file(tensors, os.path.join(out, name), metadata=meta)
config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256}
if change == "config":
    config["rope_theta"] = 500000.0
json.dump(config, open(os.path.join(out, "config.json"), "w"), indent=2)
json.dump({"metadata": {"total_size": SHARDS * PER}, "weight_map": weight_map},
          open(os.path.join(out, "model.safetensors.index.json"), "w"), indent=2)
vocab = {f"tok{j}": j for j in range(3000)}
json.dump({"version": "1.0", "model": {"type": "BPE", "vocab": vocab}},
          open(os.path.join(out, "tokenizer.json"), "w"))
"#;

fn synth(env: &Env, rel: &str, change: &str) -> PathBuf {
    let dir = env.path(rel);
    let out = Command::new(venv_python())
        .args(["-c", SYNTH, dir.to_str().unwrap(), change])
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "synth {change}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    dir
}

fn volume_bytes(env: &Env, bundle: &str) -> u64 {
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(env.path(bundle).join("manifest.json")).unwrap())
            .unwrap();
    m["totals"]["volume_bytes"].as_u64().unwrap()
}

fn pack(env: &Env, model: &str, out: &str, version: u32, base: Option<&str>) {
    let v = version.to_string();
    let mut args = vec![
        "pack",
        model,
        "-o",
        out,
        "--key",
        "k.key",
        "--name",
        "m",
        "--version",
        &v,
    ];
    if let Some(b) = base {
        args.extend(["--base", b]);
    }
    env.ok(&args);
}

fn unpack(env: &Env, bundle: &str, dest: &str) {
    env.ok(&[
        "unpack",
        bundle,
        "--trust",
        "k.pub",
        "--dest",
        dest,
        "--replace",
    ]);
}

fn unpack_fails(env: &Env, bundle: &str, dest: &str) -> String {
    env.fails(
        3,
        &[
            "unpack",
            bundle,
            "--trust",
            "k.pub",
            "--dest",
            dest,
            "--replace",
        ],
    )
}

/// The installed tree equals the model directory (the receipt aside), modes included.
fn assert_installed(env: &Env, dest: &str, model: &Path) {
    let summary = |t: Vec<(String, u32, Option<Vec<u8>>)>| -> Vec<(String, u32, Option<String>)> {
        use sha2::Digest;
        t.into_iter()
            // The safetensors writer makes 0600 files; an install has 0644 or 0755.
            .map(|(p, mode, bytes)| {
                (
                    p,
                    mode & 0o100,
                    bytes.map(|b| hex::encode(sha2::Sha256::digest(b))),
                )
            })
            .collect()
    };
    assert_eq!(
        summary(tree_without_receipt(&env.path(dest))),
        summary(tree(model)),
        "{dest} differs from {}",
        model.display()
    );
    env.ok(&["check", dest, "--trust", "k.pub"]);
}

#[test]
fn size_targets_on_synthetic_bf16_models() {
    let env = Env::new();
    synth(&env, "v1", "none");
    pack(&env, "v1", "b1", 1, None);
    // (change, largest delta volume bytes / full bundle volume bytes)
    let targets = [
        ("config", 0.01),
        ("shard", 0.30),
        ("header", 0.05),
        ("finetune", 0.06),
    ];
    let mut report = Vec::new();
    for (change, limit) in targets {
        let model = synth(&env, change, change);
        let inst = format!("inst-{change}");
        unpack(&env, "b1", &inst);
        let full = format!("full-{change}");
        let delta = format!("delta-{change}");
        pack(&env, change, &full, 2, None);
        pack(&env, change, &delta, 2, Some(&inst));
        let ratio = volume_bytes(&env, &delta) as f64 / volume_bytes(&env, &full) as f64;
        report.push(format!("{change}: {ratio:.5}"));
        assert!(
            ratio <= limit,
            "{change}: delta is {ratio:.4} of the full bundle, the target is {limit}"
        );
        env.ok(&["verify", &delta, "--trust", "k.pub", "--deep"]);
        unpack(&env, &delta, &inst);
        assert_installed(&env, &inst, &model);
    }
    eprintln!("delta / full volume bytes: {}", report.join(", "));
}

#[test]
fn a_chain_applies_in_order_and_out_of_order_is_refused() {
    let env = Env::new();
    synth(&env, "v1", "none");
    let v2 = synth(&env, "v2", "finetune");
    let v3 = synth(&env, "v3", "finetune2");
    pack(&env, "v1", "b1", 1, None);
    unpack(&env, "b1", "stage");
    pack(&env, "v2", "d2", 2, Some("stage"));
    unpack(&env, "d2", "stage");
    // The next delta is made against the installed delta (its receipt is the delta's).
    pack(&env, "v3", "d3", 3, Some("stage"));

    unpack(&env, "b1", "target");
    let before = tree(&env.path("target"));
    let err = unpack_fails(&env, "d3", "target");
    assert!(
        err.contains("needs m version 2 installed at") && err.contains("holds version 1"),
        "{err}"
    );
    assert!(
        tree(&env.path("target")) == before,
        "a refused delta changed the install"
    );
    unpack(&env, "d2", "target");
    assert_installed(&env, "target", &v2);
    unpack(&env, "d3", "target");
    assert_installed(&env, "target", &v3);
    // Applying it again: the target already holds it.
    let err = unpack_fails(&env, "d3", "target");
    assert!(err.contains("already holds version 3"), "{err}");
    // The base may also be the signed manifest of a bundle (copies only, changed files carried).
    let (code, v) = env.json(&[
        "pack",
        "v3",
        "-o",
        "d3m",
        "--key",
        "k.key",
        "--name",
        "m",
        "--version",
        "3",
        "--base",
        "d2/manifest.json",
    ]);
    assert_eq!(code, 0, "{v}");
    assert!(v["warnings"].to_string().contains("carried whole"), "{v}");
    // Or the base's bundle directory: the files to patch come out of its verified stream.
    let (code, v) = env.json(&[
        "pack",
        "v2",
        "-o",
        "d2b",
        "--key",
        "k.key",
        "--name",
        "m",
        "--version",
        "2",
        "--base",
        "b1",
    ]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["delta"]["patched_files"], 4, "{v}");
    assert!(
        std::fs::read_dir(env.path("d2b")).unwrap().count() == 3,
        "the work files of the extraction were left in the bundle"
    );
    unpack(&env, "b1", "target3");
    unpack(&env, "d2b", "target3");
    assert_installed(&env, "target3", &v2);
    unpack(&env, "b1", "target2");
    unpack(&env, "d2", "target2");
    unpack(&env, "d3m", "target2");
    assert_installed(&env, "target2", &v3);
}

#[test]
fn refusals_leave_the_install_untouched() {
    let env = Env::new();
    synth(&env, "v1", "none");
    synth(&env, "v2", "finetune");
    pack(&env, "v1", "b1", 1, None);
    unpack(&env, "b1", "base");
    pack(&env, "v2", "d2", 2, Some("base"));

    // Nothing installed.
    let err = unpack_fails(&env, "d2", "missing");
    assert!(
        err.contains("needs m version 1 installed at") && err.contains("nothing is there"),
        "{err}"
    );
    assert!(!env.path("missing").exists());

    // Another model there.
    env.model("other-model");
    env.ok(&[
        "pack",
        "other-model",
        "-o",
        "ob",
        "--key",
        "k.key",
        "--name",
        "other",
    ]);
    unpack(&env, "ob", "other");
    let before = tree(&env.path("other"));
    let err = unpack_fails(&env, "d2", "other");
    assert!(err.contains("it holds \"other\" version 1"), "{err}");
    assert!(tree(&env.path("other")) == before);

    // Another build of version 1 (same name and version, other bytes).
    std::fs::write(env.path("v1/config.json"), b"{\"model_type\": \"llama\"}\n").unwrap();
    pack(&env, "v1", "b1-other", 1, None);
    unpack(&env, "b1-other", "rebuilt");
    let before = tree(&env.path("rebuilt"));
    let err = unpack_fails(&env, "d2", "rebuilt");
    assert!(err.contains("another build of version 1"), "{err}");
    assert!(tree(&env.path("rebuilt")) == before);

    // A receipt the target's trust set does not verify (another signer's install).
    env.ok(&["keygen", "--out", "k2", "--unencrypted"]);
    env.ok(&[
        "pack",
        "v1",
        "-o",
        "b1-k2",
        "--key",
        "k2.key",
        "--name",
        "m",
        "--version",
        "1",
    ]);
    env.ok(&["unpack", "b1-k2", "--trust", "k2.pub", "--dest", "foreign"]);
    let before = tree(&env.path("foreign"));
    let err = unpack_fails(&env, "d2", "foreign");
    assert!(
        err.contains("the receipt there does not verify with the trust set"),
        "{err}"
    );
    assert!(tree(&env.path("foreign")) == before);

    // A base file that rotted since the install: named, nothing changed.
    unpack(&env, "b1", "rot");
    let shard = env.path("rot/model-00003-of-00004.safetensors");
    let mut bytes = std::fs::read(&shard).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 1;
    std::fs::write(&shard, &bytes).unwrap();
    let before = tree(&env.path("rot"));
    let err = unpack_fails(&env, "d2", "rot");
    assert!(
        err.contains("model-00003-of-00004.safetensors")
            && err.contains("no longer matches its receipt"),
        "{err}"
    );
    assert!(tree(&env.path("rot")) == before);
    assert!(
        staging_leftovers(env.dir.path()).is_empty(),
        "a refused delta left staging behind"
    );
    // A rotted file that the delta copies (config-only change: every shard is copied).
    synth(&env, "v2c", "config");
    pack(&env, "v2c", "d2c", 2, Some("base"));
    let err = unpack_fails(&env, "d2c", "rot");
    assert!(
        err.contains("model-00003-of-00004.safetensors")
            && err.contains("no longer matches its receipt"),
        "{err}"
    );
    assert!(tree(&env.path("rot")) == before);
}

/// Re-signs a bundle's edited manifest with the test key (a hostile or broken packer).
fn resign(env: &Env, bundle: &str, edit: impl Fn(&mut serde_json::Value)) {
    let path = env.path(bundle).join("manifest.json");
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    edit(&mut v);
    let bytes = serde_json::to_vec_pretty(&v).unwrap();
    std::fs::write(&path, &bytes).unwrap();
    use sha2::Digest;
    let comment = format!(
        "airlock manifest_sha256={} version={} name={}",
        hex::encode(sha2::Sha256::digest(&bytes)),
        v["version"],
        v["name"].as_str().unwrap()
    );
    let manifest = format!("{bundle}/manifest.json");
    env.ok(&[
        "sign", &manifest, "--key", "k.key", "-t", &comment, "--force",
    ]);
}

#[test]
fn a_patch_that_does_not_rebuild_the_signed_digest_is_refused() {
    let env = Env::new();
    synth(&env, "v1", "none");
    synth(&env, "v2", "header");
    pack(&env, "v1", "b1", 1, None);
    unpack(&env, "b1", "base");
    pack(&env, "v2", "d2", 2, Some("base"));
    let before = tree(&env.path("base"));
    // The same patch applied with the other alignment rebuilds other bytes.
    resign(&env, "d2", |v| {
        for f in v["files"].as_array_mut().unwrap() {
            if f["from"]["op"] == "xor" {
                f["from"]["map"] = "bytes".into();
            }
        }
    });
    env.ok(&["verify", "d2", "--trust", "k.pub", "--deep"]);
    let err = unpack_fails(&env, "d2", "base");
    assert!(
        err.contains("its patch .airlock-delta/") && err.contains("the manifest says"),
        "{err}"
    );
    assert!(tree(&env.path("base")) == before);
    assert!(staging_leftovers(env.dir.path()).is_empty());
}

#[test]
fn a_tampered_patch_is_refused_by_verify_and_unpack() {
    let env = Env::new();
    synth(&env, "v1", "none");
    synth(&env, "v2", "finetune");
    pack(&env, "v1", "b1", 1, None);
    unpack(&env, "b1", "base");
    env.ok(&[
        "pack",
        "v2",
        "-o",
        "d2",
        "--key",
        "k.key",
        "--name",
        "m",
        "--version",
        "2",
        "--base",
        "base",
        "--compress",
        "none",
    ]);
    // Flip a byte inside the first patch's content and re-sign the volume's chunk digest, so
    // only the patch digest can catch it.
    let m = env.read_json("d2/manifest.json");
    let patched = m["files"]
        .as_array()
        .unwrap()
        .iter()
        .position(|f| f["from"]["op"] == "xor")
        .expect("a patched file");
    let volume = env.path("d2/data.000");
    let mut data = std::fs::read(&volume).unwrap();
    let name = format!(".airlock-delta/{patched}");
    let at = data
        .windows(name.len())
        .position(|w| w == name.as_bytes())
        .expect("patch entry in the stream");
    data[at + 512 + 100] ^= 0x40;
    std::fs::write(&volume, &data).unwrap();
    let chunk = m["chunk_size"].as_u64().unwrap() as usize;
    resign(&env, "d2", |v| {
        use sha2::Digest;
        v["volumes"][0]["chunks"] = data
            .chunks(chunk)
            .map(|c| serde_json::Value::from(hex::encode(sha2::Sha256::digest(c))))
            .collect();
    });
    env.ok(&["verify", "d2", "--trust", "k.pub"]);
    let err = env.fails(3, &["verify", "d2", "--trust", "k.pub", "--deep"]);
    assert!(err.contains(&name), "{err}");
    let before = tree(&env.path("base"));
    let err = unpack_fails(&env, "d2", "base");
    assert!(err.contains(".airlock-delta/"), "{err}");
    assert!(tree(&env.path("base")) == before);
}

#[test]
fn verify_and_inspect_describe_a_delta_without_its_base() {
    let env = Env::new();
    synth(&env, "v1", "none");
    synth(&env, "v2", "finetune");
    pack(&env, "v1", "b1", 1, None);
    unpack(&env, "b1", "base");
    std::fs::write(env.path("v2/config.json"), b"{\"model_type\": \"llama\"}\n").unwrap();
    pack(&env, "v2", "d2", 2, Some("base"));
    let (code, v) = env.json(&["verify", "d2", "--trust", "k.pub", "--deep"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["base"]["version"], 1);
    assert!(
        v["warnings"]
            .to_string()
            .contains("can only be checked on install"),
        "{v}"
    );
    let (code, v) = env.json(&["inspect", "d2"]);
    assert_eq!(code, 0, "{v}");
    assert_eq!(v["delta"]["patched_files"], 4, "{v}");
    assert_eq!(v["delta"]["carried_files"], 1, "{v}");
    assert_eq!(v["delta"]["copied_files"], 2, "{v}");
    let text = String::from_utf8(env.ok(&["inspect", "d2"]).stdout).unwrap();
    assert!(text.contains("base:        delta of m version 1"), "{text}");
    assert!(
        text.contains("patched from the base's model-00001"),
        "{text}"
    );
    let text = String::from_utf8(
        env.ok(&["verify", "d2", "--trust", "k.pub", "--deep"])
            .stdout,
    )
    .unwrap();
    assert!(
        text.contains("1 carried file(s) and 4 patch(es) checked"),
        "{text}"
    );
    // Checked before the key is unlocked: a base of another model or a later version.
    let err = env.fails(
        2,
        &[
            "pack",
            "v2",
            "-o",
            "x",
            "--key",
            "k.key",
            "--name",
            "n",
            "--version",
            "2",
            "--base",
            "base",
        ],
    );
    assert!(err.contains("not a version of \"n\""), "{err}");
    let err = env.fails(
        2,
        &[
            "pack",
            "v2",
            "-o",
            "x",
            "--key",
            "k.key",
            "--name",
            "m",
            "--version",
            "1",
            "--base",
            "base",
        ],
    );
    assert!(
        err.contains("a delta must have a higher --version"),
        "{err}"
    );
    env.assert_nothing_packed("x");
    // A pre-delta reader's rule: `.airlock-delta` is not a model path.
    env.write("bad/.airlock-delta/x", b"x");
    let err = env.fails(1, &["pack", "bad", "-o", "bb", "--key", "k.key"]);
    assert!(err.contains("reserved for the patches"), "{err}");
}

/// Issue 26 item 2: a delta's base on the staging host is read by the model directory's rules.
/// An installed base where one file became a link to a host file, one a FIFO, and one drifted
/// from its receipt: the pack neither follows the link (the host file's bytes reach no volume)
/// nor hangs on the FIFO, uses none of the three (their new versions travel whole, with a
/// warning naming each), and the delta installs over a sound copy of the base.
#[test]
fn a_delta_base_on_the_staging_host_is_read_as_untrusted() {
    let env = Env::new();
    let files = ["a.bin", "b.bin", "c.bin", "d.bin"];
    std::fs::create_dir(env.path("v1")).unwrap();
    std::fs::create_dir(env.path("v2")).unwrap();
    for (i, f) in files.iter().enumerate() {
        let v1 = pseudo_random(1 << 20, 40 + i as u64);
        let mut v2 = v1.clone();
        v2[1000] ^= 0x5a;
        std::fs::write(env.path("v1").join(f), &v1).unwrap();
        std::fs::write(env.path("v2").join(f), &v2).unwrap();
    }
    pack(&env, "v1", "b1", 1, None);
    unpack(&env, "b1", "base");
    unpack(&env, "b1", "sound");
    // The host file a link in the base points to: the size of the base file, a marker inside.
    let mut secret = vec![b'S'; 1 << 20];
    secret[..16].copy_from_slice(b"HOST-SECRET-0001");
    std::fs::write(env.path("host-secret"), &secret).unwrap();
    let base = env.path("base");
    std::fs::remove_file(base.join("a.bin")).unwrap();
    std::os::unix::fs::symlink(env.path("host-secret"), base.join("a.bin")).unwrap();
    std::fs::remove_file(base.join("b.bin")).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        base.join("b.bin"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
    let mut drifted = std::fs::read(base.join("c.bin")).unwrap();
    drifted[77] ^= 1;
    std::fs::write(base.join("c.bin"), drifted).unwrap();

    let mut child = Command::new(env!("CARGO_BIN_EXE_airlock"))
        .args([
            "--json",
            "pack",
            "v2",
            "-o",
            "d2",
            "--key",
            "k.key",
            "--name",
            "m",
            "--version",
            "2",
            "--base",
            "base",
            "--compress",
            "none",
        ])
        .current_dir(env.dir.path())
        .env_remove("AIRLOCK_TRUST")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > std::time::Duration::from_secs(120) {
            let _ = child.kill();
            panic!("pack hung on the FIFO in the base");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["exit_code"], 0, "{j:#}");
    // Only d.bin, whose base is sound, is patched; the three others travel whole.
    assert_eq!(j["delta"]["patched_files"], 1, "{j:#}");
    assert_eq!(j["delta"]["carried_files"], 3, "{j:#}");
    let warnings = j["warnings"].to_string();
    for f in ["a.bin", "b.bin", "c.bin"] {
        assert!(
            warnings.contains(&format!("{f} was not used")),
            "{f}: {warnings}"
        );
    }
    for v in std::fs::read_dir(env.path("d2")).unwrap() {
        let v = v.unwrap();
        let bytes = std::fs::read(v.path()).unwrap();
        assert!(
            !bytes.windows(16).any(|w| w == b"HOST-SECRET-0001"),
            "{} carries the host file",
            v.path().display()
        );
    }
    unpack(&env, "d2", "sound");
    assert_installed(&env, "sound", &env.path("v2"));
}
